#include "loop/acquire/batch_bald.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>

#include "common/splitmix.h"
#include "loop/acquire/acquisition.h"
#include "loop/acquire/strategy.h"

namespace cohort::loop {
namespace {

// Owns the probabilities a view points into: probs[m][i][c].
struct Pool {
  int64_t members = 0, samples = 0, classes = 0;
  std::vector<float> data;
  EnsemblePredictions view() const {
    auto v = MakeEnsemblePredictions(data, members, samples, classes);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? *v : EnsemblePredictions{};
  }
  void Set(int64_t m, int64_t i, std::vector<float> p) {
    std::copy(p.begin(), p.end(), data.begin() + (m * samples + i) * classes);
  }
};

Pool MakePool(int64_t members, int64_t samples, int64_t classes) {
  Pool p{members, samples, classes, {}};
  p.data.assign(static_cast<size_t>(members * samples * classes), 0.0F);
  return p;
}

// Seeded random probability rows, each bent toward one class so members disagree.
Pool RandomPool(int64_t members, int64_t samples, int64_t classes, uint64_t seed) {
  Pool p = MakePool(members, samples, classes);
  for (int64_t m = 0; m < members; m++) {
    for (int64_t i = 0; i < samples; i++) {
      std::vector<float> row(static_cast<size_t>(classes));
      float total = 0;
      for (auto& v : row) {
        const double u = SplitMix64Unit(&seed);
        v = static_cast<float>(std::pow(u, 4.0) + 1e-3);
        total += v;
      }
      for (auto& v : row) v /= total;
      p.Set(m, i, row);
    }
  }
  return p;
}

double Entropy(const std::vector<double>& p) {
  double h = 0;
  for (double v : p) {
    if (v > 0) h -= v * std::log(v);
  }
  return h;
}

// I(y_batch; member) by enumerating every label configuration of the batch.
double ExactJointMutualInformation(const Pool& pool, const std::vector<int64_t>& batch) {
  const auto n = static_cast<int64_t>(batch.size());
  int64_t configs = 1;
  for (int64_t j = 0; j < n; j++) configs *= pool.classes;
  const EnsemblePredictions v = pool.view();
  double joint = 0;
  for (int64_t s = 0; s < configs; s++) {
    double mixture = 0;
    for (int64_t m = 0; m < pool.members; m++) {
      double prob = 1;
      int64_t code = s;
      for (int64_t j = 0; j < n; j++) {
        prob *= v.row(m, batch[static_cast<size_t>(j)])[code % pool.classes];
        code /= pool.classes;
      }
      mixture += prob / static_cast<double>(pool.members);
    }
    if (mixture > 0) joint -= mixture * std::log(mixture);
  }
  double conditional = 0;
  for (int64_t i : batch) {
    for (int64_t m = 0; m < pool.members; m++) {
      const float* row = v.row(m, i);
      conditional +=
          Entropy(std::vector<double>(row, row + pool.classes)) / static_cast<double>(pool.members);
    }
  }
  return joint - conditional;
}

TEST(BatchBaldTest, FirstPickIsBaldsBestAndItsGainIsTheBaldScore) {
  Pool pool = RandomPool(5, 40, 4, 7);
  auto bald = ScoreSamples("bald", pool.view());
  ASSERT_TRUE(bald.ok());
  auto top = SelectTop(*bald, 1, 3);
  ASSERT_TRUE(top.ok());
  auto picks = SelectBatchBald(pool.view(), 1, 3, {}, {});
  ASSERT_TRUE(picks.ok()) << picks.status().ToString();
  ASSERT_EQ(picks->indices.size(), 1U);
  EXPECT_EQ(picks->indices[0], (*top)[0]);
  EXPECT_NEAR(picks->gains[0], (*bald)[static_cast<size_t>((*top)[0])], 1e-9);
}

// Four members split two ways by samples 0 and 1 (identical), another way by sample 2. BALD
// ranks 0 and 1 first; once 0's label is known, 1 tells nothing and 2 still splits the members.
TEST(BatchBaldTest, SkipsACopyOfAPickedSampleForOneThatSplitsTheMembersAnotherWay) {
  Pool pool = MakePool(4, 3, 2);
  for (int64_t i : {0, 1}) {
    pool.Set(0, i, {1, 0});
    pool.Set(1, i, {1, 0});
    pool.Set(2, i, {0, 1});
    pool.Set(3, i, {0, 1});
  }
  pool.Set(0, 2, {0.95F, 0.05F});
  pool.Set(1, 2, {0.05F, 0.95F});
  pool.Set(2, 2, {0.95F, 0.05F});
  pool.Set(3, 2, {0.05F, 0.95F});
  auto bald = ScoreSamples("bald", pool.view());
  ASSERT_TRUE(bald.ok());
  auto top = SelectTop(*bald, 2, 1);
  ASSERT_TRUE(top.ok());
  EXPECT_EQ(std::set<int64_t>(top->begin(), top->end()), (std::set<int64_t>{0, 1}));

  auto picks = SelectBatchBald(pool.view(), 2, 1, {}, {});
  ASSERT_TRUE(picks.ok()) << picks.status().ToString();
  ASSERT_EQ(picks->indices.size(), 2U);
  EXPECT_EQ(picks->indices[1], 2);
  EXPECT_NEAR(picks->gains[0], std::log(2.0), 1e-9);
  // Given the first label, sample 2 splits the two members left: ln 2 - H(0.95, 0.05).
  EXPECT_NEAR(picks->gains[1], std::log(2.0) - Entropy({0.95, 0.05}), 1e-6);
  // Asked for all three, the copy comes last with nothing to add.
  auto all = SelectBatchBald(pool.view(), 3, 1, {}, {});
  ASSERT_TRUE(all.ok());
  EXPECT_NEAR(all->gains[2], 0.0, 1e-9);
}

TEST(BatchBaldTest, GainsSumToTheBatchsJointMutualInformationWhileEnumeratedExactly) {
  Pool pool = RandomPool(3, 30, 3, 11);
  auto picks = SelectBatchBald(pool.view(), 4, 5, {}, {.samples = 1000, .candidates = 30});
  ASSERT_TRUE(picks.ok()) << picks.status().ToString();
  ASSERT_EQ(picks->indices.size(), 4U);
  double sum = 0;
  for (size_t j = 0; j < picks->gains.size(); ++j) {
    sum += picks->gains[j];
    const std::vector<int64_t> prefix(picks->indices.begin(),
                                      picks->indices.begin() + static_cast<std::ptrdiff_t>(j + 1));
    // Float probabilities whose rows sum to 1 within 1e-7: agreement to 1e-6.
    EXPECT_NEAR(sum, ExactJointMutualInformation(pool, prefix), 1e-6) << "after pick " << j;
  }
  // Greedy: no other candidate would have added more at the second step.
  const std::vector<int64_t> first = {picks->indices[0]};
  const double base = ExactJointMutualInformation(pool, first);
  for (int64_t i = 0; i < pool.samples; i++) {
    if (i == picks->indices[0]) continue;
    EXPECT_LE(ExactJointMutualInformation(pool, {picks->indices[0], i}) - base,
              picks->gains[1] + 1e-9)
        << "sample " << i;
  }
}

TEST(BatchBaldTest, SampledConfigurationsTrackTheExactJointInformationAndAreSeeded) {
  Pool pool = RandomPool(6, 60, 3, 23);
  // 3^5 = 243 configurations after five picks: exact with 1000 samples, sampled with 60.
  auto exact = SelectBatchBald(pool.view(), 6, 9, {}, {.samples = 1000, .candidates = 60});
  auto sampled = SelectBatchBald(pool.view(), 6, 9, {}, {.samples = 60, .candidates = 60});
  auto again = SelectBatchBald(pool.view(), 6, 9, {}, {.samples = 60, .candidates = 60});
  ASSERT_TRUE(exact.ok() && sampled.ok() && again.ok());
  EXPECT_EQ(sampled->indices, again->indices);
  EXPECT_EQ(sampled->gains, again->gains);
  // The sampled picks' true joint information is close to the exact greedy batch's.
  const double exact_mi = ExactJointMutualInformation(pool, exact->indices);
  const double sampled_mi = ExactJointMutualInformation(pool, sampled->indices);
  EXPECT_GT(sampled_mi, 0.9 * exact_mi);
  double estimated = 0;
  for (double g : sampled->gains) estimated += g;
  EXPECT_NEAR(estimated, sampled_mi, 0.15 * sampled_mi);
}

TEST(BatchBaldTest, KeepsToTheBandAndTheCandidatesAndReturnsFewerWhenThatIsAll) {
  Pool pool = RandomPool(4, 50, 5, 31);
  auto bald = ScoreSamples("bald", pool.view());
  ASSERT_TRUE(bald.ok());
  std::vector<double> sorted = *bald;
  std::sort(sorted.begin(), sorted.end());
  const ScoreBand band{sorted[10], sorted[40]};  // 30 samples eligible
  auto picks = SelectBatchBald(pool.view(), 50, 2, band, {.samples = 100, .candidates = 20});
  ASSERT_TRUE(picks.ok()) << picks.status().ToString();
  EXPECT_EQ(picks->indices.size(), 20U);
  auto candidates = SelectTop(*bald, 20, 2, band);
  ASSERT_TRUE(candidates.ok());
  EXPECT_EQ(std::set<int64_t>(picks->indices.begin(), picks->indices.end()),
            std::set<int64_t>(candidates->begin(), candidates->end()));
  auto none = SelectBatchBald(pool.view(), 0, 2, {}, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->indices.empty());
}

TEST(BatchBaldTest, RefusesOneMemberAndBadOptions) {
  Pool one = RandomPool(1, 5, 3, 1);
  auto r = SelectBatchBald(one.view(), 2, 0, {}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("at least 2 members"), std::string::npos);
  Pool pool = RandomPool(2, 5, 3, 1);
  EXPECT_FALSE(SelectBatchBald(pool.view(), 2, 0, {}, {.samples = 0, .candidates = 5}).ok());
  EXPECT_FALSE(SelectBatchBald(pool.view(), -1, 0, {}, {}).ok());
  pool.data[0] = std::nanf("");
  auto bad = SelectBatchBald(pool.view(), 2, 0, {}, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("member 0 row 0"), std::string::npos)
      << bad.status().ToString();
}

TEST(BatchBaldTest, AcquireByBatchBaldIsSelectBatchBaldWithTheDefaults) {
  Pool pool = RandomPool(4, 100, 10, 5);
  auto acquired = Acquire("batchbald", pool.view(), 8, 17);
  auto direct = SelectBatchBald(pool.view(), 8, 17, {}, {});
  ASSERT_TRUE(acquired.ok() && direct.ok());
  EXPECT_EQ(*acquired, direct->indices);
  EXPECT_TRUE(FindStrategy("batchbald", StrategyTask::kClassification)->needs_several_members);
}

}  // namespace
}  // namespace cohort::loop
