// A round's picks from the members' pool prediction files, by one strategy record
// (strategy.h): what the acquire step asks of acquisition. Pointwise classification strategies
// read the files a block at a time; regression and joint strategies stack them whole; `random`
// reads nothing.
//
// Thread-safety: pure over its arguments and the files.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "loop/acquire/batch_bald.h"
#include "loop/acquire/selection.h"
#include "loop/acquire/strategy.h"
#include "loop/ensemble/predictions.h"

namespace cohort::loop {

struct PoolPickRequest {
  // One per member that finished: its pool predictions file (config index, absolute path)...
  std::vector<std::pair<size_t, std::string>> predictions;
  // ...and, in classification, what acquisition takes as that member's samples: the file, or
  // the file of its MC-dropout passes.
  std::vector<PoolSampleFile> samples;
  uint64_t rows = 0;  // pool rows every file holds
  RunTask task;
  int64_t classes = 0;  // classification
  int64_t k = 0;
  uint64_t seed = 0;  // the round's (RoundSeed)
  ScoreBand band;
  BatchSelection selection;
  BatchBaldOptions batch_bald;
};

struct PoolPicks {
  std::vector<int64_t> indices;  // file rows, in the order picked
  std::vector<double> scores;    // every row's score; a joint strategy's picks hold their gain
};

// The (at most) k rows `strategy` picks. Errors: those of reading the files and of the
// strategy's scoring and selection.
Result<PoolPicks> PickFromPool(const Strategy& strategy, const PoolPickRequest& request);

}  // namespace cohort::loop
