#include "loop/ensemble/uncertainty.h"

#include <gtest/gtest.h>

#include <cmath>

namespace cohort::loop {
namespace {

TEST(EnsembleUncertaintyTest, TwoMembersHandComputed) {
  // Two members, two samples, two classes.
  //   sample 0: m0 (0.9, 0.1), m1 (0.3, 0.7): mean (0.6, 0.4), predicted 0, votes 0 and 1.
  //   sample 1: m0 (0.2, 0.8), m1 (0.2, 0.8): identical members, no disagreement.
  std::vector<float> data = {0.9f, 0.1f, 0.2f, 0.8f, 0.3f, 0.7f, 0.2f, 0.8f};
  auto view = MakeEnsemblePredictions(data, 2, 2, 2);
  ASSERT_TRUE(view.ok());
  auto u = ComputeEnsembleUncertainty(*view);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  auto h = [](double a, double b) { return -(a * std::log(a) + b * std::log(b)); };
  EXPECT_NEAR(u->mean[0], 0.6, 1e-6);
  EXPECT_NEAR(u->mean[1], 0.4, 1e-6);
  EXPECT_EQ(u->predicted, (std::vector<int64_t>{0, 1}));
  EXPECT_NEAR(u->entropy[0], h(0.6, 0.4), 1e-6);
  EXPECT_NEAR(u->mutual_information[0], h(0.6, 0.4) - (h(0.9, 0.1) + h(0.3, 0.7)) / 2, 1e-6);
  // variance: (1/C) sum_c (1/M) sum_m (p - mean)^2 = 0.3^2 for both classes.
  EXPECT_NEAR(u->variance[0], 0.09, 1e-6);
  EXPECT_DOUBLE_EQ(u->agreement[0], 0.5);
  EXPECT_NEAR(u->entropy[1], h(0.2, 0.8), 1e-6);
  EXPECT_NEAR(u->mutual_information[1], 0.0, 1e-6);
  EXPECT_NEAR(u->variance[1], 0.0, 1e-9);
  EXPECT_DOUBLE_EQ(u->agreement[1], 1.0);
}

TEST(EnsembleUncertaintyTest, InvalidPredictionsAreRefused) {
  std::vector<float> data = {0.9f, 0.3f};  // does not sum to 1
  auto view = MakeEnsemblePredictions(data, 1, 1, 2);
  ASSERT_TRUE(view.ok());
  EXPECT_FALSE(ComputeEnsembleUncertainty(*view).ok());
}

}  // namespace
}  // namespace cohort::loop
