// SampleRows: a seeded uniform sample of table rows, the same on every platform, so that the
// controller and a worker (or a resumed controller) compute the same rows from a seed alone.
// `acquisition.pool_sample` scores such a sample of the pool each round.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "common/splitmix.h"

namespace cohort {

// n of the rows 0 .. total-1, without replacement, in increasing order: Knuth's selection
// sampling (TAOCP vol. 2, Algorithm S), one splitmix64 draw per row considered and no memory
// beyond the result, so a pool of 10^7 rows costs ~10^7 draws, not a permutation. Every row
// when n >= total.
inline std::vector<uint64_t> SampleRows(uint64_t total, uint64_t n, uint64_t seed) {
  std::vector<uint64_t> rows;
  if (n >= total) {
    rows.resize(total);
    for (uint64_t i = 0; i < total; i++) rows[i] = i;
    return rows;
  }
  rows.reserve(n);
  uint64_t state = seed;
  for (uint64_t i = 0; i < total && rows.size() < n; i++) {
    const uint64_t needed = n - rows.size();
    const uint64_t left = total - i;
    // Take row i with probability needed / left.
    if (SplitMix64Unit(&state) * static_cast<double>(left) < static_cast<double>(needed)) {
      rows.push_back(i);
    }
  }
  return rows;
}

}  // namespace cohort
