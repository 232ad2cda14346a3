#include "loop/regression.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "loop/acquisition.h"

namespace cohort::loop {
namespace {

// Owns the predictions a view points into.
struct Table {
  std::vector<float> data;
  RegressionPredictions view;
};

Table MakeTable(std::vector<float> data, int64_t members, int64_t samples, int64_t outputs) {
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
Table ThreeSamples() {
  return MakeTable(
      {// member 0
       1, 2, 1, 4, 0, 0, 0.25f, 0.25f, 3, -1, 2, 1,
       // member 1
       1, 2, 1, 4, 2, 0, 0.25f, 1, 1, 2, 0.5f, 1},
      2, 3, 2);
}
const std::vector<float> kThreeTargets = {1.5f, 0, 1, 0.5f, 2, 0};

std::vector<double> ScoreOk(const std::string& strategy, const RegressionPredictions& p) {
  auto r = ScoreRegression(strategy, p);
  EXPECT_TRUE(r.ok()) << strategy << ": " << r.status().ToString();
  return r.ok() ? *r : std::vector<double>{};
}

EnsembleRegressionMetrics MetricsOk(const RegressionPredictions& p,
                                    const std::vector<float>& targets) {
  auto r = ComputeRegressionMetrics(p, targets);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : EnsembleRegressionMetrics{};
}

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); i++) EXPECT_NEAR(got[i], want[i], tol) << "index " << i;
}

std::vector<double> Observed(const RegressionMetrics& m) {
  std::vector<double> out;
  for (const auto& [nominal, observed] : m.coverage) out.push_back(observed);
  return out;
}

// The same predictions with the members in the order `order`.
Table Reordered(const Table& t, const std::vector<int64_t>& order) {
  const RegressionPredictions& p = t.view;
  const auto block = static_cast<size_t>(p.samples * 2 * p.outputs);
  std::vector<float> data;
  for (int64_t m : order) {
    data.insert(data.end(), t.data.begin() + static_cast<std::ptrdiff_t>(m * block),
                t.data.begin() + static_cast<std::ptrdiff_t>((m + 1) * block));
  }
  return MakeTable(std::move(data), p.members, p.samples, p.outputs);
}

TEST(RegressionTest, ViewAccessorsFollowTheStackedLayout) {
  Table t = ThreeSamples();
  EXPECT_EQ(t.view.mean(1, 2)[0], 1.0f);
  EXPECT_EQ(t.view.mean(1, 2)[1], 2.0f);
  EXPECT_EQ(t.view.variance(1, 2)[0], 0.5f);
  EXPECT_EQ(t.view.variance(0, 1)[1], 0.25f);
  // data[((m * samples + i) * 2 + 1) * outputs + d] is the variance.
  EXPECT_EQ(t.view.variance(1, 1) + 1, &t.data[((1 * 3 + 1) * 2 + 1) * 2 + 1]);
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

TEST(RegressionTest, UncertaintyRefusesInvalidPredictions) {
  Table t = MakeTable({0, -1}, 1, 1, 1);
  auto u = ComputeRegressionUncertainty(t.view);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().message(),
            "member 0 row 0: variance of component 0 is -1.000000 (must be finite and >= 0)");
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
  for (const std::string& s : RegressionStrategies()) {
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
  for (const std::string& s : RegressionStrategies()) {
    std::vector<double> scores = ScoreOk(s, t.view);
    const bool all_zero =
        std::all_of(scores.begin(), scores.end(), [](double v) { return v == 0.0; });
    EXPECT_EQ(all_zero, RegressionStrategyNeedsSeveralMembers(s) || s == "random") << s;
  }
  // With one member, `variance` is that member's own mean variance.
  ExpectNear(ScoreOk("variance", t.view), {1.75, 0.125}, 1e-12);
  EXPECT_TRUE(RegressionStrategyNeedsSeveralMembers("max_deviation"));
  EXPECT_TRUE(RegressionStrategyNeedsSeveralMembers("mean_deviation"));
  EXPECT_FALSE(RegressionStrategyNeedsSeveralMembers("variance"));
  EXPECT_FALSE(RegressionStrategyNeedsSeveralMembers("no_such_strategy"));
}

TEST(RegressionTest, UnknownStrategyListsTheValidNames) {
  Table t = ThreeSamples();
  auto r = ScoreRegression("max_devation", t.view);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument());
  EXPECT_NE(r.status().message().find("max_devation"), std::string::npos);
  for (const std::string& s : RegressionStrategies()) {
    EXPECT_NE(r.status().message().find(s), std::string::npos) << s;
  }
  EXPECT_EQ(RegressionStrategies(),
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

TEST(RegressionTest, MemberMetricsByHand) {
  // Member 0's errors y - mu: s0 (0.5, -2), s1 (1, 0.5), s2 (-1, 1), variances
  // (1, 4, 0.25, 0.25, 2, 1).
  //   rmse = sqrt((0.25 + 4 + 1 + 0.25 + 1 + 1) / 6) = sqrt(1.25) = 1.118034;
  //   mae  = (0.5 + 2 + 1 + 0.5 + 1 + 1) / 6 = 1;
  //   nll  = 0.5 * (6 ln(2 pi) + sum ln v + sum e^2 / v) / 6
  //        = 0.5 * (11.027262 - 0.693147 + 7.75) / 6 = 1.507010.
  //   |e| / sd = (0.5, 1, 2, 1, 0.7071, 1) against z = 0.1257, 0.2533, 0.3853, 0.5244, 0.6745,
  //   0.8416, 1.0364, 1.2816, 1.6449, 1.9600 at levels 0.1 .. 0.9, 0.95:
  //   observed 0, 0, 0, 1/6, 1/6, 2/6, 5/6, 5/6, 5/6, 5/6;
  //   calibration error = (0.1 + 0.2 + 0.3 + 0.2333 + 0.3333 + 0.2667 + 0.1333 + 0.0333
  //   + 0.0667 + 0.1167) / 10 = 0.178333.
  // Member 1 (errors s0 (0.5, -2), s1 (-1, 0.5), s2 (1, -2)), checked against numpy: rmse
  // 1.322876, mae 1.166667, nll 1.819510, calibration error 0.211667.
  Table t = ThreeSamples();
  EnsembleRegressionMetrics m = MetricsOk(t.view, kThreeTargets);
  ASSERT_EQ(m.members.size(), 2u);
  const RegressionMetrics& m0 = m.members[0];
  EXPECT_EQ(m0.count, 3);
  EXPECT_NEAR(m0.rmse, std::sqrt(1.25), 1e-12);
  EXPECT_NEAR(m0.mae, 1.0, 1e-12);
  const double log_two_pi = std::log(2 * std::numbers::pi);
  EXPECT_NEAR(m0.nll, 0.5 * (6 * log_two_pi - std::log(2.0) + 7.75) / 6, 1e-12);
  ExpectNear(Observed(m0), {0, 0, 0, 1.0 / 6, 1.0 / 6, 2.0 / 6, 5.0 / 6, 5.0 / 6, 5.0 / 6, 5.0 / 6},
             1e-12);
  EXPECT_NEAR(m0.calibration_error, 0.178333333333, 1e-9);
  const RegressionMetrics& m1 = m.members[1];
  EXPECT_NEAR(m1.rmse, 1.322875655532, 1e-9);
  EXPECT_NEAR(m1.mae, 1.166666666667, 1e-9);
  EXPECT_NEAR(m1.nll, 1.819509601491, 1e-9);
  EXPECT_NEAR(m1.calibration_error, 0.211666666667, 1e-9);
  ASSERT_EQ(m0.coverage.size(), kCoverageLevels.size());
  for (size_t l = 0; l < kCoverageLevels.size(); l++) {
    EXPECT_EQ(m0.coverage[l].first, kCoverageLevels[l]);
  }
}

TEST(RegressionTest, EnsembleMetricsByHand) {
  // Mean of the means: s0 (1, 2), s1 (1, 0), s2 (2, 0.5); errors s0 (0.5, -2), s1 (0, 0.5),
  // s2 (0, -0.5): rmse = sqrt(4.75 / 6) = 0.889757, mae = 3.5 / 6 = 0.583333.
  // Moment-matched variances: s0 (1, 4), s1 (0.25 + 1, 0.625), s2 (2.25, 3.25): |e| / sd =
  // (0.5, 1, 0, 0.6325, 0, 0.2774): observed 2/6, 2/6, 3/6, 4/6, 5/6, 5/6, 1, 1, 1, 1;
  // calibration error 0.205.
  // Mixture NLL (numpy, log-sum-exp over the members' joint log-densities, / 2 outputs, mean
  // over samples): 1.615066526838.
  Table t = ThreeSamples();
  EnsembleRegressionMetrics m = MetricsOk(t.view, kThreeTargets);
  EXPECT_EQ(m.ensemble.count, 3);
  EXPECT_NEAR(m.ensemble.rmse, std::sqrt(4.75 / 6), 1e-12);
  EXPECT_NEAR(m.ensemble.mae, 3.5 / 6, 1e-12);
  ExpectNear(Observed(m.ensemble),
             {2.0 / 6, 2.0 / 6, 3.0 / 6, 4.0 / 6, 5.0 / 6, 5.0 / 6, 1, 1, 1, 1}, 1e-12);
  EXPECT_NEAR(m.ensemble.calibration_error, 0.205, 1e-12);
  EXPECT_NEAR(m.ensemble.nll, 1.615066526838, 1e-9);
}

TEST(RegressionTest, MixtureNllOfTwoUnitGaussians) {
  // N(0; 0, 1) = 0.398942, N(0; 2, 1) = 0.053991: -ln((0.398942 + 0.053991) / 2) = 1.485158.
  Table t = MakeTable({0, 1, 2, 1}, 2, 1, 1);
  EnsembleRegressionMetrics m = MetricsOk(t.view, {0});
  const double phi0 = 1 / std::sqrt(2 * std::numbers::pi);
  const double phi2 = phi0 * std::exp(-2.0);
  EXPECT_NEAR(m.ensemble.nll, -std::log((phi0 + phi2) / 2), 1e-12);
  EXPECT_NEAR(m.ensemble.nll, 1.4851577027216454, 1e-12);  // Python's math, for the record
  // Each member's own NLL: 0.5 ln(2 pi) and 0.5 ln(2 pi) + 2.
  EXPECT_NEAR(m.members[0].nll, 0.5 * std::log(2 * std::numbers::pi), 1e-12);
  EXPECT_NEAR(m.members[1].nll, 0.5 * std::log(2 * std::numbers::pi) + 2, 1e-12);
}

TEST(RegressionTest, MixtureNllSurvivesDensitiesThatUnderflow) {
  // Two sharp members (variance 1e-4) at 0 and 100, target 50: each joint log-density is
  // l = -0.5 (ln(2 pi 1e-4) + 2500 / 1e-4), about -1.25e7, so exp(l) is 0 in double, yet the
  // mixture's NLL is exactly -l: -ln((e^l + e^l) / 2) = -l.
  Table t = MakeTable({0, 1e-4f, 100, 1e-4f}, 2, 1, 1);
  EnsembleRegressionMetrics m = MetricsOk(t.view, {50});
  const double v = static_cast<double>(1e-4f);
  const double expected = 0.5 * (std::log(2 * std::numbers::pi * v) + 2500 / v);
  ASSERT_TRUE(std::isfinite(m.ensemble.nll));
  EXPECT_NEAR(m.ensemble.nll, expected, 1e-9 * expected);
}

TEST(RegressionTest, OneMemberEnsembleEqualsTheMember) {
  Table t =
      MakeTable({0.3f, -1.2f, 0.5f, 2.0f, 1.1f, 0.4f, 0.1f, 0.9f, -0.6f, 0, 3, 1.5f}, 1, 3, 2);
  std::vector<float> targets = {0.1f, -0.2f, 2.0f, 0.0f, -1.0f, 0.5f};
  EnsembleRegressionMetrics m = MetricsOk(t.view, targets);
  ASSERT_EQ(m.members.size(), 1u);
  const RegressionMetrics& one = m.members[0];
  EXPECT_NEAR(m.ensemble.nll, one.nll, 1e-12);
  EXPECT_NEAR(m.ensemble.rmse, one.rmse, 1e-15);
  EXPECT_NEAR(m.ensemble.mae, one.mae, 1e-15);
  EXPECT_EQ(Observed(m.ensemble), Observed(one));
  EXPECT_EQ(m.ensemble.calibration_error, one.calibration_error);
  EXPECT_GT(one.nll, 0.5);  // not trivially equal: a real, non-zero NLL
}

TEST(RegressionTest, ZeroVarianceIsFlooredInTheNll) {
  // An MSE member that fit its training set exactly: variance 0. On target: the NLL is
  // 0.5 ln(2 pi 1e-12) = -12.896572; off by 1e-6: + 0.5 * (1e-6)^2 / 1e-12 = +0.5.
  Table t = MakeTable({1, 0, 2, 0}, 1, 2, 1);
  EnsembleRegressionMetrics m = MetricsOk(t.view, {1, static_cast<float>(2 + 1e-6)});
  const double err = static_cast<double>(static_cast<float>(2 + 1e-6)) - 2;
  const double floor_nll = 0.5 * std::log(2 * std::numbers::pi * kRegressionVarianceFloor);
  EXPECT_NEAR(m.members[0].nll, (2 * floor_nll + 0.5 * err * err / kRegressionVarianceFloor) / 2,
              1e-9);
  EXPECT_NEAR(floor_nll, -12.896572024759601, 1e-9);
  EXPECT_TRUE(std::isfinite(m.ensemble.nll));
  EXPECT_NEAR(m.ensemble.nll, m.members[0].nll, 1e-9);
  // A zero-width interval covers the exact target only: half the components at every level.
  for (double observed : Observed(m.members[0])) EXPECT_EQ(observed, 0.5);
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

TEST(RegressionTest, ToMapKeys) {
  Table t = ThreeSamples();
  EnsembleRegressionMetrics m = MetricsOk(t.view, kThreeTargets);
  std::map<std::string, double> map = m.members[0].ToMap();
  EXPECT_EQ(map.size(), 6u);
  EXPECT_EQ(map.at("count"), 3);
  EXPECT_EQ(map.at("rmse"), m.members[0].rmse);
  EXPECT_EQ(map.at("mae"), m.members[0].mae);
  EXPECT_EQ(map.at("nll"), m.members[0].nll);
  EXPECT_EQ(map.at("calibration_error"), m.members[0].calibration_error);
  EXPECT_NEAR(map.at("coverage_90"), 5.0 / 6, 1e-12);  // observed at the 0.9 level
  EXPECT_NEAR(m.ensemble.ToMap().at("coverage_90"), 1.0, 1e-12);
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

TEST(RegressionTest, TargetErrorsNameTheSample) {
  Table t = ThreeSamples();
  auto short_targets = ComputeRegressionMetrics(t.view, std::vector<float>(5, 0.0f));
  ASSERT_FALSE(short_targets.ok());
  EXPECT_TRUE(short_targets.status().IsInvalidArgument());
  EXPECT_NE(short_targets.status().message().find("5 targets"), std::string::npos)
      << short_targets.status().message();

  std::vector<float> targets = kThreeTargets;
  targets[2 * 2 + 1] = std::nanf("");  // sample 2, component 1
  auto r = ComputeRegressionMetrics(t.view, targets);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument());
  EXPECT_NE(r.status().message().find("sample 2"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("component 1"), std::string::npos) << r.status().message();
  targets[2 * 2 + 1] = INFINITY;
  EXPECT_FALSE(ComputeRegressionMetrics(t.view, targets).ok());
}

TEST(RegressionTest, BadPredictionsNameMemberAndSample) {
  {
    Table t = ThreeSamples();
    t.data[((1 * 3 + 2) * 2 + 0) * 2 + 1] = std::nanf("");  // member 1, sample 2, mean of d1
    auto r = ScoreRegression("max_deviation", t.view);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("member 1 row 2: mean of component 1"), std::string::npos)
        << r.status().message();
    // Random and the metrics validate too.
    EXPECT_FALSE(ScoreRegression("random", t.view).ok());
    EXPECT_FALSE(ComputeRegressionMetrics(t.view, kThreeTargets).ok());
  }
  {
    Table t = ThreeSamples();
    t.data[((0 * 3 + 1) * 2 + 1) * 2 + 0] = -0.5f;  // member 0, sample 1, variance of d0
    Status st = ValidateRegressionPredictions(t.view);
    EXPECT_TRUE(st.IsInvalidArgument());
    EXPECT_NE(st.message().find("member 0 row 1: variance of component 0"), std::string::npos)
        << st.message();
    // With names and ids at hand, by them.
    std::vector<std::string> names = {"mlp-a", "gnn-b"};
    std::vector<uint64_t> ids = {100, 101, 102};
    st = ValidateRegressionPredictions(t.view, names, ids);
    EXPECT_NE(st.message().find("member mlp-a row 1 (sample id 101): variance of component 0"),
              std::string::npos)
        << st.message();
  }
  {
    Table t = ThreeSamples();
    t.data[((1 * 3 + 0) * 2 + 1) * 2 + 1] = INFINITY;  // member 1, sample 0, variance of d1
    Status st = ValidateRegressionPredictions(t.view);
    EXPECT_NE(st.message().find("member 1 row 0: variance of component 1"), std::string::npos)
        << st.message();
  }
  {
    // A zero variance is allowed (an MSE member's residual variance can be 0).
    Table t = ThreeSamples();
    t.data[((0 * 3 + 0) * 2 + 1) * 2 + 0] = 0;
    EXPECT_TRUE(ValidateRegressionPredictions(t.view).ok());
  }
}

TEST(RegressionTest, ShapeErrors) {
  std::vector<float> data(12, 0.5f);
  EXPECT_TRUE(MakeRegressionPredictions(data, 2, 3, 1).ok());
  EXPECT_TRUE(MakeRegressionPredictions(data, 1, 2, 3).ok());
  auto wrong = MakeRegressionPredictions(data, 2, 2, 2);  // needs 16
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("16"), std::string::npos) << wrong.status().message();
  EXPECT_FALSE(MakeRegressionPredictions(data, -1, 3, 2).ok());
  EXPECT_FALSE(MakeRegressionPredictions(data, INT64_MAX, 3, 2).ok());
  EXPECT_FALSE(MakeRegressionPredictions(data, 3, INT64_MAX / 4, 2).ok());

  RegressionPredictions none;  // members == 0
  none.samples = 3;
  none.outputs = 2;
  none.data = data.data();
  Status st = ValidateRegressionPredictions(none);
  EXPECT_NE(st.message().find("no members"), std::string::npos) << st.message();

  auto no_outputs = MakeRegressionPredictions({}, 2, 3, 0);
  ASSERT_TRUE(no_outputs.ok());
  EXPECT_FALSE(ValidateRegressionPredictions(*no_outputs).ok());
  EXPECT_FALSE(ScoreRegression("variance", *no_outputs).ok());
}

TEST(RegressionTest, InverseNormalCdfMatchesReferenceQuantiles) {
  // Reference quantiles from Python's statistics.NormalDist().inv_cdf (Wichura's AS241,
  // accurate to about 1e-16), and the textbook 1.959964 / 1.644854 / 1.281552.
  const std::pair<double, double> cases[] = {
      {1e-300, -37.0470962993612},
      {1e-100, -21.27345356096532},
      {1e-10, -6.361340902404056},
      {1e-05, -4.2648907939228256},
      {0.001, -3.090232306167813},
      {0.02425, -1.9729610513118845},  // Acklam's switch between centre and tail
      {0.025, -1.9599639845400538},
      {0.05, -1.6448536269514726},
      {0.1, -1.2815515655446008},
      {0.3, -0.5244005127080407},
      {0.5, 0.0},
      {0.7, 0.5244005127080407},
      {0.9, 1.2815515655446008},
      {0.95, 1.6448536269514715},
      {0.975, 1.9599639845400536},
      {0.999, 3.090232306167813},
      {0.9999999999, 6.361340889697421},  // the double nearest 1 - 1e-10 is a little below it
  };
  for (const auto& [p, x] : cases) {
    EXPECT_NEAR(InverseNormalCdf(p), x, 1e-12 * std::max(1.0, std::abs(x))) << "p = " << p;
  }
  EXPECT_NEAR(CentralIntervalZ(0.95), 1.959964, 1e-6);
  EXPECT_NEAR(CentralIntervalZ(0.9), 1.6448536269514715, 1e-12);
  EXPECT_NEAR(CentralIntervalZ(0.5), 0.6744897501960817, 1e-12);
  EXPECT_NEAR(CentralIntervalZ(0.1), 0.12566134685507413, 1e-12);
  EXPECT_EQ(InverseNormalCdf(0), -INFINITY);
  EXPECT_EQ(InverseNormalCdf(1), INFINITY);
  EXPECT_TRUE(std::isnan(InverseNormalCdf(-0.1)));
  EXPECT_TRUE(std::isnan(InverseNormalCdf(1.5)));
  EXPECT_TRUE(std::isnan(InverseNormalCdf(NAN)));
}

TEST(RegressionTest, InverseNormalCdfInvertsTheCdf) {
  // Phi(x) = erfc(-x / sqrt 2) / 2 over a fine grid of p, both halves.
  for (int k = 1; k < 1000; k++) {
    const double p = k / 1000.0;
    const double x = InverseNormalCdf(p);
    EXPECT_NEAR(0.5 * std::erfc(-x / std::numbers::sqrt2), p, 1e-15) << "p = " << p;
    EXPECT_NEAR(x, -InverseNormalCdf(1 - p), 1e-12) << "p = " << p;
  }
}

}  // namespace
}  // namespace cohort::loop
