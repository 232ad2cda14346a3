#include "loop/update/relabel_or_drop.h"

#include <gtest/gtest.h>

#include "loop/ensemble/testing/two_member_predictions.h"

namespace cohort::loop {
namespace {

using Fixture = testing::TwoMemberPredictions;

std::vector<int64_t> Samples(const std::vector<SuspectLabel>& suspects) {
  std::vector<int64_t> out;
  for (const auto& s : suspects) out.push_back(s.sample);
  return out;
}

// Four samples; the ensemble's mean probabilities of the stored labels {0, 1, 2, 0} are 0.9,
// 0.05, 0.3 and 0.05.
Fixture FourSamples() {
  return Fixture({{0.8f, 0.1f, 0.1f}, {0.9f, 0.1f, 0.0f}, {0.1f, 0.5f, 0.4f}, {0.0f, 0.0f, 1.0f}},
                 {{1.0f, 0.0f, 0.0f}, {0.9f, 0.0f, 0.1f}, {0.5f, 0.3f, 0.2f}, {0.1f, 0.0f, 0.9f}});
}
const std::vector<int64_t> kLabels = {0, 1, 2, 0};

TEST(RelabelOrDropTest, SuspectsAreTheLabelsBelowTheThresholdLeastProbableFirst) {
  Fixture f = FourSamples();
  auto suspects = SelectSuspectLabels(f.view, kLabels, {.threshold = 0.5});
  ASSERT_TRUE(suspects.ok()) << suspects.status().ToString();
  // Samples 1 and 3 tie at 0.05: sample order decides.
  EXPECT_EQ(Samples(*suspects), (std::vector<int64_t>{1, 3, 2}));
  EXPECT_NEAR((*suspects)[0].probability, 0.05, 1e-6);
  EXPECT_EQ((*suspects)[0].label, 1);
  EXPECT_EQ((*suspects)[0].predicted, 0);
  EXPECT_EQ((*suspects)[1].predicted, 2);
  EXPECT_EQ((*suspects)[2].predicted, 1);  // mean (0.3, 0.4, 0.3)
  EXPECT_NEAR((*suspects)[2].probability, 0.3, 1e-6);

  suspects = SelectSuspectLabels(f.view, kLabels, {.threshold = 0.1});
  EXPECT_EQ(Samples(*suspects), (std::vector<int64_t>{1, 3}));
  suspects = SelectSuspectLabels(f.view, kLabels, {.threshold = 0.01});
  EXPECT_TRUE(suspects->empty());
}

TEST(RelabelOrDropTest, CapAndEligibility) {
  Fixture f = FourSamples();
  auto suspects = SelectSuspectLabels(f.view, kLabels, {.threshold = 0.5, .max_per_round = 2});
  EXPECT_EQ(Samples(*suspects), (std::vector<int64_t>{1, 3}));
  // Sample 1 left train in an earlier step of the round: passed over before the cap counts.
  std::vector<bool> eligible = {true, false, true, true};
  suspects =
      SelectSuspectLabels(f.view, kLabels, {.threshold = 0.5, .max_per_round = 2}, &eligible);
  EXPECT_EQ(Samples(*suspects), (std::vector<int64_t>{3, 2}));
}

TEST(RelabelOrDropTest, MismatchedInputsAreRefused) {
  Fixture f = FourSamples();
  std::vector<int64_t> three = {0, 1, 2};
  EXPECT_FALSE(SelectSuspectLabels(f.view, three, {.threshold = 0.5}).ok());
  std::vector<int64_t> outside = {0, 1, 3, 0};
  auto bad = SelectSuspectLabels(f.view, outside, {.threshold = 0.5});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("outside [0, 3)"), std::string::npos);
  std::vector<bool> short_flags = {true};
  EXPECT_FALSE(SelectSuspectLabels(f.view, kLabels, {.threshold = 0.5}, &short_flags).ok());
}

}  // namespace
}  // namespace cohort::loop
