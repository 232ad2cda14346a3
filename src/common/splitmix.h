// splitmix64 (Steele, Lea, Flood 2014): the one pseudo-random recipe of cohort's seeded draws
// (acquisition tie keys and stochastic batches, BatchBALD's label samples, augmentation). A
// fixed integer recipe, so the same seed gives the same stream on every platform and standard
// library, which std::mt19937 plus a distribution does not promise.
//
// Thread-safety: pure functions over a caller-owned state.
#pragma once

#include <cstdint>

namespace cohort {

// The next value of the stream whose state is *state (advances it).
inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// A uniform double in [0, 1) from the next 53 bits of the stream.
inline double SplitMix64Unit(uint64_t* state) {
  return static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53;
}

}  // namespace cohort
