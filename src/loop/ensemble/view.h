// The views every consumer of the members' predictions reads: class probabilities
// (EnsemblePredictions) and regression moments (RegressionPredictions) of one table, laid out
// [member][sample][...] in C order over caller memory, with the shape and value checks every
// prediction file passes before a metric, a score, a calibration or an update step reads it.
//
// Thread-safety: views own nothing; the functions are pure over caller-owned memory, which must
// stay valid (and unchanged) for the duration of a call. Concurrent calls are safe.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace cohort::loop {

// The members' class probabilities for one table: data[(m * samples + i) * classes + c] is
// member m's probability of class c for sample i. A view: it owns nothing.
struct EnsemblePredictions {
  int64_t members = 0;
  int64_t samples = 0;
  int64_t classes = 0;
  const float* data = nullptr;

  const float* row(int64_t member, int64_t sample) const {
    return data + (member * samples + sample) * classes;
  }
};

// A view over `data`, which must hold exactly members * samples * classes values and outlive
// the view. Checks the shape only; ValidatePredictions checks the values.
Result<EnsemblePredictions> MakeEnsemblePredictions(const std::vector<float>& data, int64_t members,
                                                    int64_t samples, int64_t classes);

// "member cnn-b row 1 (sample id 101)", or "member 1 row 1" without names and ids: how every
// check of member prediction files (class probabilities, regression moments) names a row.
std::string DescribePredictionRow(int64_t member, int64_t sample,
                                  std::span<const std::string> member_names = {},
                                  std::span<const uint64_t> sample_ids = {});

// The product of a prediction array's dimensions (all >= 0), or nullopt when it overflows
// int64: the shape check before a view is made over caller memory.
std::optional<uint64_t> PredictionElementCount(std::initializer_list<int64_t> dims);

// Rows each summing to 1 within this tolerance are accepted as probability vectors.
inline constexpr double kProbabilitySumTolerance = 1e-3;

// OK when members >= 1, classes >= 2, samples >= 0, data is set (unless empty), and every
// value is finite and non-negative with every row summing to 1 within
// kProbabilitySumTolerance; otherwise an InvalidArgument naming the member and sample: by
// name and sample id when `member_names` / `sample_ids` give them (one per member / sample),
// else by index ("member 0 row 3"). A view of rows first_row.. of a larger table (a block read
// by loop/ensemble/prediction_stream.h) names rows by their index in the table, and `sample_ids`
// holds the whole table's ids.
Status ValidatePredictions(const EnsemblePredictions& predictions,
                           std::span<const std::string> member_names = {},
                           std::span<const uint64_t> sample_ids = {}, int64_t first_row = 0);

// The members' regression predictions for one table: data[((m * samples + i) * 2 + 0) *
// outputs + d] is member m's mean of component d for sample i, and `+ 1` in place of `+ 0` its
// variance. A view: it owns nothing.
struct RegressionPredictions {
  int64_t members = 0;
  int64_t samples = 0;
  int64_t outputs = 0;  // components per sample: the product of the target shape
  const float* data = nullptr;

  // Member m's `outputs` means for sample i.
  const float* mean(int64_t member, int64_t sample) const {
    return data + (member * samples + sample) * 2 * outputs;
  }
  // Member m's `outputs` variances for sample i (they follow its means).
  const float* variance(int64_t member, int64_t sample) const {
    return mean(member, sample) + outputs;
  }
};

// A view over `data`, which must hold exactly members * samples * 2 * outputs values and
// outlive the view. Checks the shape only; ValidateRegressionPredictions checks the values.
Result<RegressionPredictions> MakeRegressionPredictions(const std::vector<float>& data,
                                                        int64_t members, int64_t samples,
                                                        int64_t outputs);

// OK when members >= 1, outputs >= 1, samples >= 0, data is set (unless empty), every mean is
// finite and every variance finite and >= 0; otherwise an InvalidArgument naming the member
// and sample: by name and sample id when `member_names` / `sample_ids` give them (one per
// member / sample), else by index ("member 0 row 3"), as ValidatePredictions does.
Status ValidateRegressionPredictions(const RegressionPredictions& predictions,
                                     std::span<const std::string> member_names = {},
                                     std::span<const uint64_t> sample_ids = {});

}  // namespace cohort::loop
