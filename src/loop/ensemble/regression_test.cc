#include "loop/ensemble/regression.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "loop/ensemble/testing/regression_tables.h"
#include "loop/ensemble/view.h"

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

TEST(RegressionTest, ViewAccessorsFollowTheStackedLayout) {
  Table t = ThreeSamples();
  EXPECT_EQ(t.view.mean(1, 2)[0], 1.0f);
  EXPECT_EQ(t.view.mean(1, 2)[1], 2.0f);
  EXPECT_EQ(t.view.variance(1, 2)[0], 0.5f);
  EXPECT_EQ(t.view.variance(0, 1)[1], 0.25f);
  // data[((m * samples + i) * 2 + 1) * outputs + d] is the variance.
  EXPECT_EQ(t.view.variance(1, 1) + 1, &t.data[((1 * 3 + 1) * 2 + 1) * 2 + 1]);
}

TEST(RegressionTest, UncertaintyRefusesInvalidPredictions) {
  Table t = MakeTable({0, -1}, 1, 1, 1);
  auto u = ComputeRegressionUncertainty(t.view);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().message(),
            "member 0 row 0: variance of component 0 is -1.000000 (must be finite and >= 0)");
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
    Status r = ValidateRegressionPredictions(t.view);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("member 1 row 2: mean of component 1"), std::string::npos)
        << r.message();
    // The metrics validate too.
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
