// For the loop's unit tests: two members' class probabilities and their view.
#pragma once

#include <vector>

#include "loop/ensemble/view.h"

namespace cohort::loop::testing {

// Two members' probabilities over three classes, one inner vector per sample, stacked member
// after member as the loop stacks prediction files, and their view (it points into `data`, so
// the object is not copied).
struct TwoMemberPredictions {
  std::vector<float> data;
  EnsemblePredictions view;
  TwoMemberPredictions(const std::vector<std::vector<float>>& member_a,
                       const std::vector<std::vector<float>>& member_b) {
    for (const auto* member : {&member_a, &member_b}) {
      for (const auto& row : *member) data.insert(data.end(), row.begin(), row.end());
    }
    view = *MakeEnsemblePredictions(data, 2, static_cast<int64_t>(member_a.size()), 3);
  }
  TwoMemberPredictions(const TwoMemberPredictions&) = delete;
  TwoMemberPredictions& operator=(const TwoMemberPredictions&) = delete;
};

}  // namespace cohort::loop::testing
