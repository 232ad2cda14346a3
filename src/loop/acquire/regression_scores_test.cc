#include "loop/acquire/regression_scores.h"

#include <gtest/gtest.h>

#include <cmath>

#include "loop/acquire/acquisition.h"
#include "loop/acquire/strategy.h"
#include "loop/ensemble/regression.h"
#include "loop/ensemble/testing/regression_tables.h"

namespace cohort::loop {
namespace {

using testing::ExpectNear;
using testing::kThreeTargets;
using testing::MakeTable;
using testing::MetricsOk;
using testing::Observed;
using testing::Reordered;
using testing::Table;
using testing::ThreeSamples;

std::vector<double> ScoreOk(const std::string& strategy, const RegressionPredictions& p) {
  auto r = ScoreRegression(strategy, p);
  EXPECT_TRUE(r.ok()) << strategy << ": " << r.status().ToString();
  return r.ok() ? *r : std::vector<double>{};
}

TEST(RegressionTest, MaxDeviationIsTheLargestSpreadOfTheMeans) {
  // Population sd over members of the means, per component:
  // s0 (0, 0); s1 ({0, 2} -> 1, {0, 0} -> 0); s2 ({3, 1} -> 1, {-1, 2} -> 1.5).
  Table t = ThreeSamples();
  ExpectNear(ScoreOk("max_deviation", t.view), {0.0, 1.0, 1.5}, 1e-12);
}

TEST(RegressionTest, MeanDeviationAveragesTheSpreadOverComponents) {
  // s0 (0 + 0) / 2 = 0; s1 (1 + 0) / 2 = 0.5; s2 (1 + 1.5) / 2 = 1.25.
  Table t = ThreeSamples();
  ExpectNear(ScoreOk("mean_deviation", t.view), {0.0, 0.5, 1.25}, 1e-12);
}

TEST(RegressionTest, VarianceIsTheTotalPredictiveVariance) {
  // Mean member variance + variance of the means, averaged over components:
  // s0: (1 + 0, 4 + 0) -> 2.5 (agreeing members, all aleatoric: it still scores highest of
  //     the first two samples, unlike the deviations);
  // s1: (0.25 + 1, (0.25 + 1) / 2 + 0) = (1.25, 0.625) -> 0.9375;
  // s2: ((2 + 0.5) / 2 + 1, 1 + 2.25) = (2.25, 3.25) -> 2.75.
  Table t = ThreeSamples();
  ExpectNear(ScoreOk("variance", t.view), {2.5, 0.9375, 2.75}, 1e-12);
}

TEST(RegressionTest, UncertaintySplitsTheMixtureVarianceByHand) {
  // Per (sample, component): mean of the means, mean of the variances, population variance of
  // the means (see MaxDeviationIsTheLargestSpreadOfTheMeans for their spreads).
  Table t = ThreeSamples();
  auto u = ComputeRegressionUncertainty(t.view);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->samples, 3);
  EXPECT_EQ(u->outputs, 2);
  ExpectNear(u->mean, {1, 2, 1, 0, 2, 0.5}, 1e-12);
  ExpectNear(u->aleatoric, {1, 4, 0.25, 0.625, 1.25, 1}, 1e-12);
  ExpectNear(u->epistemic, {0, 0, 1, 0, 1, 2.25}, 1e-12);
  ExpectNear(u->total, {1, 4, 1.25, 0.625, 2.25, 3.25}, 1e-12);
  // The acquisition scores are these numbers, summarised per sample.
  const std::vector<double> variance = ScoreOk("variance", t.view);
  const std::vector<double> max_deviation = ScoreOk("max_deviation", t.view);
  for (size_t i = 0; i < 3; i++) {
    EXPECT_NEAR(variance[i], (u->total[2 * i] + u->total[2 * i + 1]) / 2, 1e-12);
    EXPECT_NEAR(max_deviation[i], std::sqrt(std::max(u->epistemic[2 * i], u->epistemic[2 * i + 1])),
                1e-12);
  }
}

TEST(RegressionTest, RandomScoresZero) {
  Table t = ThreeSamples();
  EXPECT_EQ(ScoreOk("random", t.view), (std::vector<double>{0, 0, 0}));
}

TEST(RegressionTest, ScoresDoNotDependOnMemberOrder) {
  // 3 members with unequal, non-representable values, in all six orders.
  Table t = MakeTable({0.1f,  1.7f, 0.3f, 0.2f, -2.3f, 0.71f, 0.05f, 0.4f,  //
                       0.4f,  1.1f, 0.6f, 0.9f, -1.9f, 0.13f, 0.5f,  0.3f,  //
                       -0.7f, 1.3f, 0.2f, 0.1f, -2.9f, 0.44f, 0.8f,  0.7f},
                      3, 2, 2);
  std::vector<int64_t> order = {0, 1, 2};
  for (const std::string& s : StrategyNames(StrategyTask::kRegression)) {
    std::vector<double> base = ScoreOk(s, t.view);
    ASSERT_EQ(base.size(), 2u);
    do {
      Table r = Reordered(t, order);
      std::vector<double> got = ScoreOk(s, r.view);
      ASSERT_EQ(got.size(), 2u);
      // Summation order only moves the last bits.
      for (size_t i = 0; i < 2; i++) {
        EXPECT_NEAR(got[i], base[i], 1e-14 * std::max(1.0, base[i])) << s << " sample " << i;
      }
    } while (std::next_permutation(order.begin(), order.end()));
  }
  // And the scores are not trivially zero.
  EXPECT_GT(ScoreOk("max_deviation", t.view)[0], 0.1);
}

TEST(RegressionTest, OneMemberHasNoDeviation) {
  Table t = MakeTable({1, -2, 0.5f, 3, 7, 0, 0.25f, 0}, 1, 2, 2);
  for (const std::string& s : StrategyNames(StrategyTask::kRegression)) {
    std::vector<double> scores = ScoreOk(s, t.view);
    const bool all_zero =
        std::all_of(scores.begin(), scores.end(), [](double v) { return v == 0.0; });
    EXPECT_EQ(all_zero,
              FindStrategy(s, StrategyTask::kRegression)->needs_several_members || s == "random")
        << s;
  }
  // With one member, `variance` is that member's own mean variance.
  ExpectNear(ScoreOk("variance", t.view), {1.75, 0.125}, 1e-12);
  EXPECT_TRUE(FindStrategy("max_deviation", StrategyTask::kRegression)->needs_several_members);
  EXPECT_TRUE(FindStrategy("mean_deviation", StrategyTask::kRegression)->needs_several_members);
  EXPECT_FALSE(FindStrategy("variance", StrategyTask::kRegression)->needs_several_members);
  EXPECT_EQ(FindStrategy("no_such_strategy", StrategyTask::kRegression), nullptr);
}

TEST(RegressionTest, UnknownStrategyListsTheValidNames) {
  Table t = ThreeSamples();
  auto r = ScoreRegression("max_devation", t.view);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument());
  EXPECT_NE(r.status().message().find("max_devation"), std::string::npos);
  for (const std::string& s : StrategyNames(StrategyTask::kRegression)) {
    EXPECT_NE(r.status().message().find(s), std::string::npos) << s;
  }
  EXPECT_EQ(StrategyNames(StrategyTask::kRegression),
            (std::vector<std::string>{"random", "max_deviation", "mean_deviation", "variance"}));
  // Classification names are not regression strategies.
  EXPECT_FALSE(ScoreRegression("bald", t.view).ok());
}

TEST(RegressionTest, DeviationScoresSelectWithinABand) {
  // max_deviation (0, 1, 1.5) with DP-GEN's trust levels [0.5, 1.2): only s1 is eligible; s2
  // deviates too much, s0 not at all.
  Table t = ThreeSamples();
  std::vector<double> scores = ScoreOk("max_deviation", t.view);
  ScoreBand band;
  band.lower = 0.5;
  band.upper = 1.2;
  auto picked = SelectTop(scores, 3, 1, band);
  ASSERT_TRUE(picked.ok()) << picked.status().ToString();
  EXPECT_EQ(*picked, (std::vector<int64_t>{1}));
}

TEST(RegressionTest, CrossCheckAgainstNumpy) {
  // 3 members, 5 samples, 3 outputs; values rng = numpy.random.default_rng(7), means
  // round(normal(0, 1), 2), variances round(uniform(0.05, 1.5), 2), targets
  // round(normal(0, 1.2), 2), and the expected numbers from an independent numpy
  // implementation of the formulas in docs/acquisition.md (float32 inputs, float64 maths,
  // z from Python's statistics.NormalDist). No target lies within 0.002 standard deviations
  // of an interval edge, so float32 rounding cannot move a coverage count.
  Table t = MakeTable(
      {0,     0.3,   -0.27, 0.18,  0.83,  0.79,  -0.89, -0.45, -0.99, 1.31,  0.57,  0.92,  0.06,
       1.34,  -0.49, 0.14,  0.61,  0.52,  -0.62, 0.49,  0.36,  0.27,  1.23,  0.6,   0.11,  -0.93,
       -0.03, 1.47,  0.91,  0.93,  0.7,   -1.34, -0.46, 0.98,  1.03,  0.27,  -1.9,  -1.29, -1.84,
       0.69,  0.4,   0.63,  -0.24, -1.27, 0.27,  0.19,  1.45,  0.36,  0.16,  -0.19, -2.52, 1.02,
       0.49,  1.32,  -0.54, -0.05, 0.11,  1.01,  0.24,  1.28,  -1.53, -0.48, -0.98, 1.42,  1.36,
       0.88,  -0.81, 1.06,  -0.81, 0.26,  0.33,  1.4,   -0.03, 0.88,  -0.58, 0.85,  0.31,  1.33,
       -0.11, 0.11,  0.06,  0.98,  0.88,  0.6,   -1.23, 0.08,  1.36,  0.65,  0.4,   0.11},
      3, 5, 3);
  const std::vector<float> targets = {-0.03, 0.8,   -0.41, 1.26,  -0.01, 0.7,  -1.55, 0.42,
                                      -2.03, -2.44, -0.37, -1.08, 0.2,   2.69, -1};
  ExpectNear(
      ScoreOk("max_deviation", t.view),
      {0.931176061344794, 0.972293925547342, 1.13755097601274, 1.29274900359155, 0.62487332714562},
      1e-12);
  ExpectNear(ScoreOk("mean_deviation", t.view),
             {0.633693281940654, 0.639172360148376, 0.548168087728456, 0.631472243408453,
              0.540211606869286},
             1e-12);
  ExpectNear(
      ScoreOk("variance", t.view),
      {1.32859258898541, 1.1877258933085, 1.12505927372453, 1.43885186301558, 1.07480741370348},
      1e-12);

  struct Want {
    double rmse, mae, nll, calibration_error;
    std::vector<double> coverage;
  };
  const double s = 1.0 / 15;  // one (sample, component) of 15
  const Want want[] = {
      {1.50403458589676,
       1.18800000660121,
       2.80189694128971,
       0.178333333333333,
       {2 * s, 3 * s, 3 * s, 3 * s, 5 * s, 6 * s, 7 * s, 8 * s, 8 * s, 11 * s}},
      {1.84763091789152,
       1.60066666553418,
       4.03922320565824,
       0.298333333333333,
       {1 * s, 1 * s, 2 * s, 2 * s, 2 * s, 4 * s, 5 * s, 6 * s, 7 * s, 7 * s}},
      {1.59024527250223,
       1.452000004674,
       4.30707740380863,
       0.311666666666667,
       {0, 0, 0, 1 * s, 2 * s, 3 * s, 3 * s, 7 * s, 8 * s, 11 * s}},
      // the ensemble
      {1.50610437841624,
       1.20066667414374,
       2.2938678488278,
       0.138333333333333,
       {1 * s, 5 * s, 5 * s, 6 * s, 7 * s, 7 * s, 7 * s, 8 * s, 9 * s, 11 * s}},
  };
  EnsembleRegressionMetrics m = MetricsOk(t.view, targets);
  ASSERT_EQ(m.members.size(), 3u);
  for (size_t k = 0; k < 4; k++) {
    const RegressionMetrics& got = k < 3 ? m.members[k] : m.ensemble;
    SCOPED_TRACE(k < 3 ? "member " + std::to_string(k) : std::string("ensemble"));
    EXPECT_EQ(got.count, 5);
    EXPECT_NEAR(got.rmse, want[k].rmse, 1e-12);
    EXPECT_NEAR(got.mae, want[k].mae, 1e-12);
    EXPECT_NEAR(got.nll, want[k].nll, 1e-12);
    EXPECT_NEAR(got.calibration_error, want[k].calibration_error, 1e-12);
    ExpectNear(Observed(got), want[k].coverage, 1e-12);
  }
}

TEST(RegressionTest, NoSamplesGiveZeroMetrics) {
  Table t = MakeTable({}, 2, 0, 3);
  EnsembleRegressionMetrics m = MetricsOk(t.view, {});
  ASSERT_EQ(m.members.size(), 2u);
  for (const RegressionMetrics& r : {m.members[0], m.members[1], m.ensemble}) {
    EXPECT_EQ(r.count, 0);
    EXPECT_EQ(r.rmse, 0);
    EXPECT_EQ(r.mae, 0);
    EXPECT_EQ(r.nll, 0);
    EXPECT_EQ(r.calibration_error, 0);
    EXPECT_EQ(r.coverage.size(), kCoverageLevels.size());
    for (double observed : Observed(r)) EXPECT_EQ(observed, 0);
  }
  EXPECT_EQ(ScoreOk("max_deviation", t.view).size(), 0u);
}

TEST(RegressionScoresTest, InvalidPredictionsAreRefusedByEveryStrategy) {
  Table t = ThreeSamples();
  t.data[((1 * 3 + 2) * 2 + 0) * 2 + 1] = std::nanf("");  // member 1, sample 2, mean of d1
  for (const std::string& s : StrategyNames(StrategyTask::kRegression)) {
    auto r = ScoreRegression(s, t.view);
    ASSERT_FALSE(r.ok()) << s;
    EXPECT_NE(r.status().message().find("member 1 row 2: mean of component 1"), std::string::npos)
        << r.status().message();
  }
  auto no_outputs = MakeRegressionPredictions({}, 2, 3, 0);
  ASSERT_TRUE(no_outputs.ok());
  EXPECT_FALSE(ScoreRegression("variance", *no_outputs).ok());
}

}  // namespace
}  // namespace cohort::loop
