#include "loop/ensemble_metrics.h"

#include <gtest/gtest.h>

#include <cmath>

namespace cohort::loop {
namespace {

constexpr double kTol = 1e-6;  // inputs are float32, so hand values hold to about 1e-7

Result<EnsembleMetrics> Compute(const std::vector<float>& data, int64_t members,
                                const std::vector<int64_t>& labels, int64_t classes) {
  auto view = MakeEnsemblePredictions(data, members, static_cast<int64_t>(labels.size()), classes);
  if (!view.ok()) return view.status();
  return ComputeEnsembleMetrics(*view, labels);
}

void ExpectMetrics(const ClassificationMetrics& got, int64_t count, double accuracy, double nll,
                   double brier, double ece) {
  EXPECT_EQ(got.count, count);
  EXPECT_NEAR(got.accuracy, accuracy, kTol);
  EXPECT_NEAR(got.nll, nll, kTol);
  EXPECT_NEAR(got.brier, brier, kTol);
  EXPECT_NEAR(got.ece, ece, kTol);
}

TEST(EnsembleMetricsTest, OneMemberHandComputed) {
  // 2 classes. p, label -> correct?, confidence, ECE bin floor(15 * confidence):
  //   s0 (0.90, 0.10), 0 -> yes, 0.90, bin 13 (13.5)
  //   s1 (0.88, 0.12), 1 -> no,  0.88, bin 13 (13.2)
  //   s2 (0.62, 0.38), 0 -> yes, 0.62, bin 9  (9.3)
  //   s3 (0.30, 0.70), 1 -> yes, 0.70, bin 10 (10.5)
  // accuracy 3/4 = 0.75
  // nll = -(ln 0.9 + ln 0.12 + ln 0.62 + ln 0.7) / 4
  //     = (0.105361 + 2.120264 + 0.478036 + 0.356675) / 4 = 0.765084
  // brier = (2*0.1^2 + 2*0.88^2 + 2*0.38^2 + 2*0.3^2) / 4 = (0.02 + 1.5488 + 0.2888 + 0.18) / 4
  //       = 0.5094
  // ece: bin 13 has 2 samples, accuracy 0.5, confidence 0.89 -> 2/4 * 0.39 = 0.195;
  //      bin 9: 1/4 * |1 - 0.62| = 0.095; bin 10: 1/4 * |1 - 0.7| = 0.075; total 0.365.
  auto m = Compute({0.9f, 0.1f, 0.88f, 0.12f, 0.62f, 0.38f, 0.3f, 0.7f}, 1, {0, 1, 0, 1}, 2);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->members.size(), 1u);
  ExpectMetrics(m->members[0], 4, 0.75, 0.765084, 0.5094, 0.365);
  ExpectMetrics(m->ensemble, 4, 0.75, 0.765084, 0.5094, 0.365);
  // The reliability bins behind that ECE.
  const auto& bins = m->ensemble.bins;
  ASSERT_EQ(bins.size(), static_cast<size_t>(kEceBins));
  EXPECT_NEAR(bins[13].lower, 13.0 / 15, kTol);
  EXPECT_NEAR(bins[13].upper, 14.0 / 15, kTol);
  EXPECT_EQ(bins[13].count, 2);
  EXPECT_NEAR(bins[13].confidence, 0.89, kTol);
  EXPECT_NEAR(bins[13].accuracy, 0.5, kTol);
  EXPECT_EQ(bins[9].count, 1);
  EXPECT_NEAR(bins[9].confidence, 0.62, kTol);
  EXPECT_NEAR(bins[9].accuracy, 1.0, kTol);
  EXPECT_EQ(bins[10].count, 1);
  EXPECT_EQ(bins[0].count, 0);
  EXPECT_EQ(bins[0].accuracy, 0.0);
  int64_t total = 0;
  for (const auto& b : bins) total += b.count;
  EXPECT_EQ(total, 4);
}

TEST(EnsembleMetricsTest, EceBinsAreSeparate) {
  // Confidence 0.86 (bin 12, 12.9) correct and 0.88 (bin 13, 13.2) wrong: separate bins give
  // (|1 - 0.86| + |0 - 0.88|) / 2 = 0.51; one shared bin would give |1 - 1.74| / 2 = 0.37.
  auto m = Compute({0.86f, 0.14f, 0.88f, 0.12f}, 1, {0, 1}, 2);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_NEAR(m->ensemble.ece, 0.51, kTol);
}

TEST(EnsembleMetricsTest, ConfidenceOneFallsInTheLastBinAndNllIsFloored) {
  // p = (1, 0): confidence 1 goes to bin 14 (the last bin is closed). Label 0: perfect.
  auto right = Compute({1.0f, 0.0f}, 1, {0}, 2);
  ASSERT_TRUE(right.ok());
  ExpectMetrics(right->ensemble, 1, 1.0, 0.0, 0.0, 0.0);
  // Label 1: the true class has probability 0, floored at FLT_MIN: nll = -ln(1.17549e-38)
  // = 87.336545; brier = 1 + 1 = 2; ece = |0 - 1| = 1.
  auto wrong = Compute({1.0f, 0.0f}, 1, {1}, 2);
  ASSERT_TRUE(wrong.ok());
  ExpectMetrics(wrong->ensemble, 1, 0.0, 87.336545, 2.0, 1.0);
  EXPECT_TRUE(std::isfinite(wrong->ensemble.nll));
}

TEST(EnsembleMetricsTest, PerfectlyCalibratedHasZeroEce) {
  // 10 samples at confidence 0.8 (bin 12), 8 of them right; 4 samples at (0.5, 0.5) (bin 7;
  // the first maximum, class 0, is predicted), 2 of them right. Each bin's accuracy equals its
  // confidence, so ECE is 0 (up to 0.8f's float rounding).
  std::vector<float> data;
  std::vector<int64_t> labels;
  for (int i = 0; i < 10; i++) {
    data.insert(data.end(), {0.8f, 0.2f});
    labels.push_back(i < 8 ? 0 : 1);
  }
  for (int i = 0; i < 4; i++) {
    data.insert(data.end(), {0.5f, 0.5f});
    labels.push_back(i < 2 ? 0 : 1);
  }
  auto m = Compute(data, 1, labels, 2);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_NEAR(m->ensemble.ece, 0.0, 1e-7);
  EXPECT_NEAR(m->ensemble.accuracy, 10.0 / 14.0, 1e-12);
}

TEST(EnsembleMetricsTest, TwoMembersAndTheirMean) {
  // labels 0, 0.
  // member 0: s0 (0.9, 0.1) right conf 0.9 bin 13; s1 (0.4, 0.6) wrong conf 0.6 bin 9.
  //   accuracy 0.5; nll (0.105361 + 0.916291) / 2 = 0.510826;
  //   brier (0.02 + 2*0.6^2) / 2 = 0.37; ece (|1 - 0.9| + |0 - 0.6|) / 2 = 0.35.
  // member 1: s0 (0.5, 0.5) right (first maximum) conf 0.5 bin 7; s1 (0.9, 0.1) right bin 13.
  //   accuracy 1; nll (0.693147 + 0.105361) / 2 = 0.399254;
  //   brier (0.5 + 0.02) / 2 = 0.26; ece (0.5 + 0.1) / 2 = 0.3.
  // mean: s0 (0.7, 0.3) right bin 10; s1 (0.65, 0.35) right bin 9.
  //   accuracy 1; nll (0.356675 + 0.430783) / 2 = 0.393729;
  //   brier (2*0.09 + 2*0.1225) / 2 = 0.2125; ece (0.3 + 0.35) / 2 = 0.325.
  auto m = Compute({0.9f, 0.1f, 0.4f, 0.6f, 0.5f, 0.5f, 0.9f, 0.1f}, 2, {0, 0}, 2);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->members.size(), 2u);
  ExpectMetrics(m->members[0], 2, 0.5, 0.510826, 0.37, 0.35);
  ExpectMetrics(m->members[1], 2, 1.0, 0.399254, 0.26, 0.3);
  ExpectMetrics(m->ensemble, 2, 1.0, 0.393729, 0.2125, 0.325);

  auto map = m->ensemble.ToMap();
  EXPECT_EQ(map.size(), 5u);
  EXPECT_EQ(map.at("count"), 2.0);
  EXPECT_NEAR(map.at("nll"), 0.393729, kTol);
  EXPECT_NEAR(map.at("ece"), 0.325, kTol);
}

TEST(EnsembleMetricsTest, IdenticalMembersEqualTheMember) {
  constexpr int64_t N = 500, C = 4;
  std::vector<float> one(static_cast<size_t>(N * C));
  std::vector<int64_t> labels(N);
  uint64_t x = 0x2545f4914f6cdd1dULL;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (int64_t i = 0; i < N; i++) {
    double sum = 0;
    for (int64_t c = 0; c < C; c++) {
      one[i * C + c] = static_cast<float>((next() >> 11) * 0x1.0p-53 + 0.01);
      sum += one[i * C + c];
    }
    for (int64_t c = 0; c < C; c++) one[i * C + c] = static_cast<float>(one[i * C + c] / sum);
    labels[i] = static_cast<int64_t>(next() % C);
  }
  std::vector<float> three;
  for (int k = 0; k < 3; k++) three.insert(three.end(), one.begin(), one.end());
  auto single = Compute(one, 1, labels, C);
  auto triple = Compute(three, 3, labels, C);
  ASSERT_TRUE(single.ok() && triple.ok());
  const ClassificationMetrics& a = single->members[0];
  for (const ClassificationMetrics& b :
       {triple->members[0], triple->members[1], triple->members[2], triple->ensemble}) {
    EXPECT_EQ(b.count, a.count);
    EXPECT_NEAR(b.accuracy, a.accuracy, 1e-12);
    EXPECT_NEAR(b.nll, a.nll, 1e-12);
    EXPECT_NEAR(b.brier, a.brier, 1e-12);
    EXPECT_NEAR(b.ece, a.ece, 1e-12);
  }
  EXPECT_GT(a.nll, 0.0);
  EXPECT_GT(a.ece, 0.0);
}

TEST(EnsembleMetricsTest, EmptyTableHasZeroCount) {
  auto m = Compute({}, 2, {}, 3);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ExpectMetrics(m->ensemble, 0, 0, 0, 0, 0);
  ASSERT_EQ(m->members.size(), 2u);
}

TEST(EnsembleMetricsTest, Errors) {
  const std::vector<float> data = {0.9f, 0.1f, 0.4f, 0.6f, 0.5f, 0.5f};
  auto bad_label = Compute(data, 1, {0, 1, 2}, 2);
  ASSERT_FALSE(bad_label.ok());
  EXPECT_TRUE(bad_label.status().IsInvalidArgument());
  EXPECT_NE(bad_label.status().message().find("sample 2"), std::string::npos)
      << bad_label.status().message();
  auto negative = Compute(data, 1, {0, -1, 0}, 2);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("sample 1"), std::string::npos);

  auto view = MakeEnsemblePredictions(data, 1, 3, 2);
  ASSERT_TRUE(view.ok());
  auto count = ComputeEnsembleMetrics(*view, {0, 1});
  ASSERT_FALSE(count.ok());
  EXPECT_NE(count.status().message().find("2 labels for 3 samples"), std::string::npos);

  std::vector<float> nan = data;
  nan[3] = std::nanf("");
  auto bad_prob = Compute(nan, 1, {0, 0, 0}, 2);
  ASSERT_FALSE(bad_prob.ok());
  EXPECT_NE(bad_prob.status().message().find("member 0 row 1"), std::string::npos);
}

}  // namespace
}  // namespace cohort::loop
