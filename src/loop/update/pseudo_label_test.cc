#include "loop/update/pseudo_label.h"

#include <gtest/gtest.h>

#include "loop/ensemble/testing/two_member_predictions.h"

namespace cohort::loop {
namespace {

using Fixture = testing::TwoMemberPredictions;

std::vector<int64_t> Samples(const std::vector<PseudoLabel>& picks) {
  std::vector<int64_t> out;
  for (const auto& p : picks) out.push_back(p.sample);
  return out;
}

TEST(PseudoLabelTest, ThresholdAgreementAndOrder) {
  // Mean confidences: 0.95 (class 0), 0.7 (class 1, members disagree), 0.5, 0.97 (class 2).
  Fixture f({{0.9f, 0.05f, 0.05f}, {0.6f, 0.4f, 0.0f}, {0.5f, 0.5f, 0.0f}, {0.0f, 0.06f, 0.94f}},
            {{1.0f, 0.0f, 0.0f}, {0.0f, 1.0f, 0.0f}, {0.5f, 0.5f, 0.0f}, {0.0f, 0.0f, 1.0f}});
  auto picks = SelectPseudoLabels(f.view, {.threshold = 0.5});
  ASSERT_TRUE(picks.ok()) << picks.status().ToString();
  // Most confident first; sample 2's tie (0.5 each) goes to the first class.
  EXPECT_EQ(Samples(*picks), (std::vector<int64_t>{3, 0, 1, 2}));
  EXPECT_EQ((*picks)[0].label, 2);
  EXPECT_NEAR((*picks)[0].confidence, 0.97, 1e-6);
  EXPECT_EQ((*picks)[2].label, 1);
  EXPECT_EQ((*picks)[3].label, 0);

  picks = SelectPseudoLabels(f.view, {.threshold = 0.9});
  EXPECT_EQ(Samples(*picks), (std::vector<int64_t>{3, 0}));
  picks = SelectPseudoLabels(f.view, {.threshold = 0.6});
  EXPECT_EQ(Samples(*picks), (std::vector<int64_t>{3, 0, 1}));
  // Member a votes class 0 for sample 1, member b class 1: no agreement.
  picks = SelectPseudoLabels(f.view, {.threshold = 0.6, .agreement = true});
  EXPECT_EQ(Samples(*picks), (std::vector<int64_t>{3, 0}));
  picks = SelectPseudoLabels(f.view, {.threshold = 0.99});
  EXPECT_TRUE(picks->empty());
}

TEST(PseudoLabelTest, CapsPerRoundAndPerClass) {
  // Confidences 0.99, 0.98, 0.97, 0.96 for classes 0, 0, 1, 0.
  Fixture f(
      {{0.99f, 0.01f, 0.0f}, {0.98f, 0.02f, 0.0f}, {0.03f, 0.97f, 0.0f}, {0.96f, 0.04f, 0.0f}},
      {{0.99f, 0.01f, 0.0f}, {0.98f, 0.02f, 0.0f}, {0.03f, 0.97f, 0.0f}, {0.96f, 0.04f, 0.0f}});
  auto picks = SelectPseudoLabels(f.view, {.threshold = 0.9, .max_per_round = 2});
  EXPECT_EQ(Samples(*picks), (std::vector<int64_t>{0, 1}));
  // One per class: the second class-0 sample is skipped, the class-1 one taken.
  picks = SelectPseudoLabels(f.view, {.threshold = 0.9, .max_per_class = 1});
  EXPECT_EQ(Samples(*picks), (std::vector<int64_t>{0, 2}));
  picks = SelectPseudoLabels(f.view, {.threshold = 0.9, .max_per_round = 3, .max_per_class = 2});
  EXPECT_EQ(Samples(*picks), (std::vector<int64_t>{0, 1, 2}));
  // A sample no longer eligible takes no place under the caps.
  const std::vector<bool> eligible = {false, true, true, true};
  picks = SelectPseudoLabels(f.view, {.threshold = 0.9, .max_per_round = 2}, &eligible);
  EXPECT_EQ(Samples(*picks), (std::vector<int64_t>{1, 2}));
  const std::vector<bool> short_list = {true};
  EXPECT_FALSE(SelectPseudoLabels(f.view, {.threshold = 0.9}, &short_list).ok());
}

TEST(PseudoLabelTest, InvalidPredictionsAreRefused) {
  std::vector<float> data = {0.5f, 0.6f, 0.0f};  // sums to 1.1
  auto view = MakeEnsemblePredictions(data, 1, 1, 3);
  ASSERT_TRUE(view.ok());
  EXPECT_FALSE(SelectPseudoLabels(*view, {.threshold = 0.5}).ok());
}

}  // namespace
}  // namespace cohort::loop
