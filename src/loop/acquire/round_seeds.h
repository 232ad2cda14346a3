// The seeds a round draws from: each round its own stream, reproducibly, from a seed of the
// run's config (the acquisition's, a member's). Plain integers in, plain integers out, so the
// scheduler and the worker client read them without knowing the acquisition's config.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace cohort::loop {

// A seed of its own for each round, drawn reproducibly from `seed` (splitmix64 of both).
uint64_t RoundSeed(uint64_t seed, int64_t round);

// acquisition.pool_sample: the seed of round `round`'s sample, from the acquisition's seed
// (given to the workers, which draw the same rows with SampleRows).
uint64_t PoolSampleSeed(uint64_t acquisition_seed, int64_t round);

// The pool rows, increasing, of round `round`'s sample of `pool_sample` rows out of
// `pool_rows`; nullopt when pool_sample <= 0 (the run scores the whole pool).
std::optional<std::vector<uint64_t>> PoolSampleOfRound(int64_t pool_sample,
                                                       uint64_t acquisition_seed, int64_t round,
                                                       uint64_t pool_rows);

}  // namespace cohort::loop
