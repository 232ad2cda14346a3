#include "loop/ensemble/metrics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/splitmix.h"

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

// n rows of a model that is right with probability 0.9 on every one, its 10 classes' other
// 0.1 spread evenly: one confidence bin.
std::vector<float> ConfidentRows(size_t n) {
  std::vector<float> p;
  for (size_t i = 0; i < n; i++) {
    p.push_back(0.9f);
    for (int c = 1; c < 10; c++) p.push_back(0.1f / 9);
  }
  return p;
}

TEST(EnsembleMetricsTest, ThePerfectlyCalibratedRangeIsThatOfTheBinomialCount) {
  // One bin: the ECE is |K - 0.9 n| / n with K ~ Binomial(n, 0.9), whose mean for n = 400 is
  // sqrt(2 / pi) * sd / n = 0.7979 * 6 / 400 = 0.01197 (the normal approximation).
  auto range = PerfectlyCalibratedEce(ConfidentRows(400), 10, 4000, 7);
  ASSERT_TRUE(range.ok()) << range.status().ToString();
  EXPECT_NEAR(range->mean, 0.01197, 0.0008);
  EXPECT_LT(range->low, range->mean);
  EXPECT_GT(range->high, range->mean);
  // |K - 360| is a whole number: the 5% point is 1 / 400 at most, the 95% point near
  // 1.96 * 6 / 400 = 0.0294.
  EXPECT_LE(range->low, 1.0 / 400 + 1e-12);
  EXPECT_NEAR(range->high, 0.0294, 0.0026);

  // Four times the rows: half the ECE.
  auto more = PerfectlyCalibratedEce(ConfidentRows(1600), 10, 4000, 7);
  ASSERT_TRUE(more.ok());
  EXPECT_NEAR(more->mean / range->mean, 0.5, 0.05);
}

TEST(EnsembleMetricsTest, ThePerfectlyCalibratedRangeMatchesTheEceOfLabelsDrawnFromTheModel) {
  // Rows of varied confidence over several bins. Labels drawn from each row's own
  // probabilities and scored by ComputeEnsembleMetrics give ECEs whose mean is the range's.
  const int64_t classes = 4;
  const size_t rows = 2000;
  std::vector<float> p;
  uint64_t state = 11;
  for (size_t i = 0; i < rows; i++) {
    double w[classes];
    double sum = 0;
    for (double& x : w) {
      x = std::pow(SplitMix64Unit(&state), 3.0);
      sum += x;
    }
    for (double x : w) p.push_back(static_cast<float>(x / sum));
  }
  auto range = PerfectlyCalibratedEce(p, classes, 400, 3);
  ASSERT_TRUE(range.ok()) << range.status().ToString();
  auto view = MakeEnsemblePredictions(p, 1, static_cast<int64_t>(rows), classes);
  ASSERT_TRUE(view.ok());
  double mean_ece = 0;
  int inside = 0;
  const int draws = 200;
  for (int d = 0; d < draws; d++) {
    std::vector<int64_t> labels;
    for (size_t i = 0; i < rows; i++) {
      double u = SplitMix64Unit(&state), cumulative = 0;
      int64_t label = classes - 1;
      for (int64_t c = 0; c < classes; c++) {
        cumulative += p[i * classes + static_cast<size_t>(c)];
        if (u < cumulative) {
          label = c;
          break;
        }
      }
      labels.push_back(label);
    }
    auto m = ComputeEnsembleMetrics(*view, labels);
    ASSERT_TRUE(m.ok());
    mean_ece += m->ensemble.ece / draws;
    if (m->ensemble.ece >= range->low && m->ensemble.ece <= range->high) inside++;
  }
  EXPECT_NEAR(mean_ece, range->mean, 0.08 * range->mean);
  EXPECT_GT(inside, draws * 80 / 100);  // 90% expected
  EXPECT_LT(inside, draws * 97 / 100);

  // A model that is always right with confidence 1 reads 0, whatever the draws.
  std::vector<float> certain(30, 0.0f);
  for (size_t i = 0; i < 10; i++) certain[i * 3 + i % 3] = 1.0f;
  auto zero = PerfectlyCalibratedEce(certain, 3);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->mean, 0.0);
  EXPECT_EQ(zero->high, 0.0);
}

TEST(EnsembleMetricsTest, ThePerfectlyCalibratedRangeIsSeededAndChecksItsInput) {
  auto a = PerfectlyCalibratedEce(ConfidentRows(100), 10, 50, 1);
  auto b = PerfectlyCalibratedEce(ConfidentRows(100), 10, 50, 1);
  auto c = PerfectlyCalibratedEce(ConfidentRows(100), 10, 50, 2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->mean, b->mean);
  EXPECT_EQ(a->high, b->high);
  EXPECT_NE(a->mean, c->mean);

  const std::vector<float> three = {0.5f, 0.5f, 1.0f};
  EXPECT_NE(PerfectlyCalibratedEce(three, 2).status().message().find("not rows of 2"),
            std::string::npos);
  EXPECT_FALSE(PerfectlyCalibratedEce({}, 2).ok());
  EXPECT_FALSE(PerfectlyCalibratedEce(three, 0).ok());
  EXPECT_FALSE(PerfectlyCalibratedEce(ConfidentRows(3), 10, 0).ok());
}

}  // namespace
}  // namespace cohort::loop
