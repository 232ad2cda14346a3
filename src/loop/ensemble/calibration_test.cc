#include "loop/ensemble/calibration.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace cohort::loop {
namespace {

// Samples whose labels are drawn from softmax(z) for random logits z, and two identical
// members that predict softmax(z * sharpness): over-confident for sharpness > 1, under-confident
// below 1, so the temperature that calibrates them is `sharpness`.
struct Synthetic {
  std::vector<float> data;  // 2 members x samples x classes
  std::vector<int64_t> labels;
  EnsemblePredictions view;

  Synthetic(int64_t samples, int64_t classes, double sharpness, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> logit(0.0, 2.0);
    std::vector<float> member;
    std::vector<double> z(static_cast<size_t>(classes)), q(z.size());
    for (int64_t i = 0; i < samples; i++) {
      for (double& v : z) v = logit(rng);
      double sum = 0;
      for (int64_t c = 0; c < classes; c++) sum += (q[c] = std::exp(z[c]));
      for (double& v : q) v /= sum;
      labels.push_back(std::discrete_distribution<int64_t>(q.begin(), q.end())(rng));
      double sharp_sum = 0;
      for (int64_t c = 0; c < classes; c++) sharp_sum += std::exp(sharpness * z[c]);
      for (int64_t c = 0; c < classes; c++) {
        member.push_back(static_cast<float>(std::exp(sharpness * z[c]) / sharp_sum));
      }
    }
    data = member;
    data.insert(data.end(), member.begin(), member.end());
    view = *MakeEnsemblePredictions(data, 2, samples, classes);
  }
};

TEST(CalibrationTest, RecoversTheTemperatureOfAnOverConfidentEnsemble) {
  Synthetic s(20000, 4, 2.0, 1);
  auto fit = FitEnsembleTemperature(s.view, s.labels);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_NEAR(fit->temperature, 2.0, 0.1);
  EXPECT_LT(fit->after.nll, fit->before.nll - 0.05);
  EXPECT_LT(fit->after.ece, fit->before.ece / 2);
  EXPECT_EQ(fit->after.accuracy, fit->before.accuracy);  // the argmax never moves
  EXPECT_EQ(fit->after.count, 20000);
}

TEST(CalibrationTest, SharpensAnUnderConfidentEnsemble) {
  Synthetic s(20000, 4, 0.5, 2);
  auto fit = FitEnsembleTemperature(s.view, s.labels);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_NEAR(fit->temperature, 0.5, 0.03);
  EXPECT_LT(fit->after.nll, fit->before.nll);
  EXPECT_LT(fit->after.ece, fit->before.ece);
}

TEST(CalibrationTest, LeavesACalibratedEnsembleAlmostAlone) {
  Synthetic s(20000, 4, 1.0, 3);
  auto fit = FitEnsembleTemperature(s.view, s.labels);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_NEAR(fit->temperature, 1.0, 0.06);
  EXPECT_LE(fit->after.nll, fit->before.nll);
  EXPECT_NEAR(fit->after.nll, fit->before.nll, 1e-3);
}

TEST(CalibrationTest, AnAlwaysRightEnsembleSharpens) {
  // Every sample right at 0.9: the NLL falls all the way as T falls.
  std::vector<float> data = {0.9f, 0.1f, 0.1f, 0.9f, 0.9f, 0.1f};
  auto view = MakeEnsemblePredictions(data, 1, 3, 2);
  ASSERT_TRUE(view.ok());
  auto fit = FitEnsembleTemperature(*view, {0, 1, 0});
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_GE(fit->temperature, kMinTemperature);
  EXPECT_LT(fit->temperature, 0.1);
  EXPECT_LT(fit->after.nll, 1e-6);
}

TEST(CalibrationTest, RefusesWhatItCannotFit) {
  std::vector<float> data = {0.9f, 0.1f, 0.2f, 0.8f};
  auto view = MakeEnsemblePredictions(data, 1, 2, 2);
  ASSERT_TRUE(view.ok());
  EXPECT_FALSE(FitEnsembleTemperature(*view, {0}).ok());     // one label for two samples
  EXPECT_FALSE(FitEnsembleTemperature(*view, {0, 2}).ok());  // a label outside the classes
  EXPECT_FALSE(FitEnsembleTemperature(*view, {0, -1}).ok());
  std::vector<float> none;
  auto empty = MakeEnsemblePredictions(none, 1, 0, 2);
  ASSERT_TRUE(empty.ok());
  auto fit = FitEnsembleTemperature(*empty, {});
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(fit.status().ToString().find("no samples"), std::string::npos);
}

// Rows of a one-member view: those of `parity` (0 even, 1 odd) of member 0 of `view`.
std::vector<float> RowsOfParity(const EnsemblePredictions& view, int64_t parity) {
  std::vector<float> rows;
  for (int64_t i = parity; i < view.samples; i += 2) {
    rows.insert(rows.end(), view.row(0, i), view.row(0, i) + view.classes);
  }
  return rows;
}

std::vector<int64_t> LabelsOfParity(const std::vector<int64_t>& labels, size_t parity) {
  std::vector<int64_t> out;
  for (size_t i = parity; i < labels.size(); i += 2) out.push_back(labels[i]);
  return out;
}

TEST(CalibrationTest, EnsembleMeanIsTheMembersMeanInFloat32) {
  // Two members, two rows of three classes: member-major, as MakeEnsemblePredictions takes.
  const std::vector<float> data = {0.5f, 0.25f, 0.25f, 0.1f, 0.1f, 0.8f,
                                   0.1f, 0.6f,  0.3f,  0.3f, 0.3f, 0.4f};
  auto view = MakeEnsemblePredictions(data, 2, 2, 3);
  ASSERT_TRUE(view.ok());
  const std::vector<float> mean = EnsembleMean(*view);
  const std::vector<float> want = {0.3f, 0.425f, 0.275f, 0.2f, 0.2f, 0.6f};
  ASSERT_EQ(mean.size(), want.size());
  for (size_t j = 0; j < want.size(); j++) EXPECT_FLOAT_EQ(mean[j], want[j]) << j;
}

TEST(CalibrationTest, CrossFitScoresEachHalfAtTheOtherHalfsTemperature) {
  Synthetic s(3001, 5, 0.6, 4);  // identical members: the mean is member 0
  auto cross = CrossFitEnsembleTemperature(s.view, s.labels);
  ASSERT_TRUE(cross.ok()) << cross.status().ToString();
  auto whole = FitEnsembleTemperature(s.view, s.labels);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(cross->temperature, whole->temperature);
  EXPECT_EQ(cross->raw.nll, whole->before.nll);

  // The same by hand: fit on one parity's rows, apply to the other's, score them all.
  std::vector<float> calibrated(s.data.size() / 2);
  for (int64_t half = 0; half < 2; half++) {
    std::vector<float> fit_rows = RowsOfParity(s.view, 1 - half);
    std::vector<int64_t> fit_labels = LabelsOfParity(s.labels, static_cast<size_t>(1 - half));
    auto fit_view =
        MakeEnsemblePredictions(fit_rows, 1, static_cast<int64_t>(fit_labels.size()), 5);
    ASSERT_TRUE(fit_view.ok());
    auto fit = FitEnsembleTemperature(*fit_view, fit_labels);
    ASSERT_TRUE(fit.ok());
    EXPECT_EQ(cross->half_temperatures[half], fit->temperature);
    auto applied = ApplyTemperature(RowsOfParity(s.view, half), 5, fit->temperature);
    ASSERT_TRUE(applied.ok());
    for (size_t j = 0; j * 5 < applied->size(); j++) {
      std::copy_n(applied->data() + j * 5, 5, calibrated.data() + (2 * j + half) * 5);
    }
  }
  auto view = MakeEnsemblePredictions(calibrated, 1, s.view.samples, 5);
  ASSERT_TRUE(view.ok());
  auto want = ComputeEnsembleMetrics(*view, s.labels);
  ASSERT_TRUE(want.ok());
  EXPECT_DOUBLE_EQ(cross->calibrated.nll, want->ensemble.nll);
  EXPECT_DOUBLE_EQ(cross->calibrated.ece, want->ensemble.ece);
  EXPECT_EQ(cross->probabilities, calibrated);  // the rows it scored, returned
  EXPECT_EQ(cross->calibrated.accuracy, cross->raw.accuracy);
  // Under-confident members (sharpness 0.6): calibrated, the table's NLL and ECE fall.
  EXPECT_LT(cross->temperature, 0.8);
  EXPECT_LT(cross->calibrated.nll, cross->raw.nll);
  EXPECT_LT(cross->calibrated.ece, cross->raw.ece);
}

TEST(CalibrationTest, CrossFitNeverFitsTheRowsItScores) {
  // Even rows over-confident, odd rows under-confident: a temperature fitted on all of them
  // would look good on the table; fitted on the other half, each is wrong for its rows.
  Synthetic sharp(2000, 4, 3.0, 5);
  Synthetic soft(2000, 4, 0.4, 6);
  std::vector<float> data;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < 2000; i++) {
    data.insert(data.end(), sharp.view.row(0, i), sharp.view.row(0, i) + 4);
    data.insert(data.end(), soft.view.row(0, i), soft.view.row(0, i) + 4);
    labels.push_back(sharp.labels[static_cast<size_t>(i)]);
    labels.push_back(soft.labels[static_cast<size_t>(i)]);
  }
  auto view = MakeEnsemblePredictions(data, 1, 4000, 4);
  ASSERT_TRUE(view.ok());
  auto cross = CrossFitEnsembleTemperature(*view, labels);
  ASSERT_TRUE(cross.ok()) << cross.status().ToString();
  EXPECT_GT(cross->half_temperatures[0], 0.2);  // fitted on the soft rows: sharpens
  EXPECT_LT(cross->half_temperatures[0], 0.6);
  EXPECT_GT(cross->half_temperatures[1], 2.0);  // fitted on the sharp rows: softens
  auto in_sample = FitEnsembleTemperature(*view, labels);
  ASSERT_TRUE(in_sample.ok());
  EXPECT_GT(cross->calibrated.nll, in_sample->after.nll + 0.1);
  EXPECT_GT(cross->calibrated.nll, cross->raw.nll);  // worse than not calibrating at all
}

TEST(CalibrationTest, CrossFitRefusesWhatItCannotFit) {
  std::vector<float> one = {0.9f, 0.1f};
  auto view = MakeEnsemblePredictions(one, 1, 1, 2);
  ASSERT_TRUE(view.ok());
  auto fit = CrossFitEnsembleTemperature(*view, {0});
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(fit.status().ToString().find("at least 2 samples"), std::string::npos);
  std::vector<float> two = {0.9f, 0.1f, 0.2f, 0.8f};
  view = MakeEnsemblePredictions(two, 1, 2, 2);
  ASSERT_TRUE(view.ok());
  EXPECT_FALSE(CrossFitEnsembleTemperature(*view, {0}).ok());
  EXPECT_FALSE(CrossFitEnsembleTemperature(*view, {0, 2}).ok());
  EXPECT_FALSE(CrossFitEnsembleTemperature(*view, {-1, 0}).ok());
}

TEST(CalibrationTest, ApplyTemperatureScalesLogProbabilities) {
  // T = 2 takes square roots before renormalising: (0.8, 0.2) -> (2, 1) / 3.
  std::vector<float> p = {0.8f, 0.2f, 0.5f, 0.5f};
  auto out = ApplyTemperature(p, 2, 2.0);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_NEAR((*out)[0], 2.0 / 3, 1e-6);
  EXPECT_NEAR((*out)[1], 1.0 / 3, 1e-6);
  EXPECT_NEAR((*out)[2], 0.5, 1e-6);
  auto same = ApplyTemperature(p, 2, 1.0);
  ASSERT_TRUE(same.ok());
  for (size_t i = 0; i < p.size(); i++) EXPECT_NEAR((*same)[i], p[i], 1e-6);
  // A zero probability stays finite and (for T < 1) gets smaller, not NaN.
  auto zero = ApplyTemperature(std::vector<float>{1.0f, 0.0f}, 2, 0.5);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ((*zero)[0], 1.0f);
  EXPECT_EQ((*zero)[1], 0.0f);
}

TEST(CalibrationTest, ApplyTemperatureRefusesBadArguments) {
  std::vector<float> p = {0.8f, 0.2f, 0.5f};
  EXPECT_FALSE(ApplyTemperature(p, 2, 1.0).ok());  // not rows of 2
  std::vector<float> q = {0.8f, 0.2f};
  for (double t : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_FALSE(ApplyTemperature(q, 2, t).ok()) << t;
  }
}

}  // namespace
}  // namespace cohort::loop
