#include "loop/acquire/round_seeds.h"

#include "common/row_sample.h"

namespace cohort::loop {

uint64_t RoundSeed(uint64_t seed, int64_t round) {
  // splitmix64 of (seed, round), so each round draws afresh but reproducibly.
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(round + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t PoolSampleSeed(uint64_t acquisition_seed, int64_t round) {
  return RoundSeed(acquisition_seed ^ 0x6A09E667F3BCC908ULL, round);
}

std::optional<std::vector<uint64_t>> PoolSampleOfRound(int64_t pool_sample,
                                                       uint64_t acquisition_seed, int64_t round,
                                                       uint64_t pool_rows) {
  if (pool_sample <= 0) return std::nullopt;
  return SampleRows(pool_rows, static_cast<uint64_t>(pool_sample),
                    PoolSampleSeed(acquisition_seed, round));
}

}  // namespace cohort::loop
