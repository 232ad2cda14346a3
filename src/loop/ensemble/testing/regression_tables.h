// Regression prediction tables for the loop's unit tests: a view that owns its data, the
// three-sample ensemble the metric and score tests share, their metrics, and comparisons.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "loop/ensemble/regression.h"
#include "loop/ensemble/view.h"

namespace cohort::loop::testing {

// Owns the predictions a view points into.
struct Table {
  std::vector<float> data;
  RegressionPredictions view;
};

inline Table MakeTable(std::vector<float> data, int64_t members, int64_t samples, int64_t outputs) {
  Table t;
  t.data = std::move(data);
  auto view = MakeRegressionPredictions(t.data, members, samples, outputs);
  EXPECT_TRUE(view.ok()) << view.status().ToString();
  if (view.ok()) t.view = *view;
  return t;
}

// 2 members, 3 samples, 2 outputs; per sample (mean0, mean1, var0, var1):
//   member 0: s0 (1, 2, 1, 4)  s1 (0, 0, 0.25, 0.25)  s2 (3, -1, 2, 1)
//   member 1: s0 (1, 2, 1, 4)  s1 (2, 0, 0.25, 1)     s2 (1, 2, 0.5, 1)
// s0: the members agree; s1: they disagree on component 0 only; s2: on both components.
// Targets: s0 (1.5, 0), s1 (1, 0.5), s2 (2, 0).
inline Table ThreeSamples() {
  return MakeTable(
      {// member 0
       1, 2, 1, 4, 0, 0, 0.25f, 0.25f, 3, -1, 2, 1,
       // member 1
       1, 2, 1, 4, 2, 0, 0.25f, 1, 1, 2, 0.5f, 1},
      2, 3, 2);
}
inline const std::vector<float> kThreeTargets = {1.5f, 0, 1, 0.5f, 2, 0};

inline void ExpectNear(const std::vector<double>& got, const std::vector<double>& want,
                       double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); i++) EXPECT_NEAR(got[i], want[i], tol) << "index " << i;
}

// The same predictions with the members in the order `order`.
inline Table Reordered(const Table& t, const std::vector<int64_t>& order) {
  const RegressionPredictions& p = t.view;
  const auto block = static_cast<size_t>(p.samples * 2 * p.outputs);
  std::vector<float> data;
  for (int64_t m : order) {
    data.insert(data.end(), t.data.begin() + static_cast<std::ptrdiff_t>(m * block),
                t.data.begin() + static_cast<std::ptrdiff_t>((m + 1) * block));
  }
  return MakeTable(std::move(data), p.members, p.samples, p.outputs);
}

// The metrics of `p` against `targets`, failing the test on an error.
inline EnsembleRegressionMetrics MetricsOk(const RegressionPredictions& p,
                                           const std::vector<float>& targets) {
  auto r = ComputeRegressionMetrics(p, targets);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : EnsembleRegressionMetrics{};
}

// The observed coverage at each of kCoverageLevels.
inline std::vector<double> Observed(const RegressionMetrics& m) {
  std::vector<double> out;
  for (const auto& [nominal, observed] : m.coverage) out.push_back(observed);
  return out;
}

}  // namespace cohort::loop::testing
