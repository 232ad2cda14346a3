// Member predictions: the one place that reads and checks the .npy files members write.
//
// A member predicts a table as float32 class probabilities of shape (rows, classes): native
// workers through the `predict` command, outside scripts by writing the files themselves. The
// scheduler checks every attempt's files when it ends (a bad file fails the attempt, which is
// then retried or left out under min_members, never journalled done); a resumed run checks a
// finished attempt's files again before it trusts them; the controller stacks every finished
// member's files into the ensemble's view. All go through ReadMemberPredictions, so a file is
// accepted or refused by the same rules and words.
//
// Thread-safety: functions over their arguments only; concurrent calls are safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace cohort::store {
class Table;
}

namespace cohort::loop {

// What kind of run a store makes; the train table's labels decide. Class labels: a
// classification run, whose members predict class probabilities. Float targets: a regression
// run, whose members predict a mean and a variance per target component (a file of shape
// (rows, 2, *target_shape)).
struct RunTask {
  bool regression = false;
  std::vector<uint64_t> target_shape;  // regression: one target's shape
  int64_t outputs() const;             // regression: components per target (>= 1)
  std::string Describe() const;  // "classification run", "regression run (targets of shape [3])"
};
RunTask RunTaskOf(const store::Table& train);

// Reads the predictions at `path` and checks them: float32, shape (rows, classes) with
// classes >= 2, and equal to `expected_classes` when that is > 0; every row a probability
// vector (ValidatePredictions). `name` stands for the file in messages ("predictions-pool.npy"
// for a script's attempt, the path for the ensemble). Sets *classes.
Result<std::vector<float>> ReadMemberPredictions(const std::string& path, const std::string& name,
                                                 uint64_t rows, int64_t expected_classes,
                                                 int64_t* classes,
                                                 std::span<const uint64_t> ids = {},
                                                 const std::string& member = "");

// Reads a member's MC-dropout passes at `path` (protocol::file::kPoolDropoutPasses) and checks
// them: float32 of shape (passes, rows, classes), every row of every pass a probability vector
// (named "member NAME pass T row I (sample id N)").
Result<std::vector<float>> ReadDropoutPasses(const std::string& path, const std::string& name,
                                             int64_t passes, uint64_t rows, int64_t classes,
                                             std::span<const uint64_t> ids = {},
                                             const std::string& member = "");

// Reads a regression member's predictions at `path` and checks them: float32 of shape
// (rows, 2, *target_shape), means finite, variances finite and >= 0
// (ValidateRegressionPredictions).
Result<std::vector<float>> ReadRegressionMemberPredictions(
    const std::string& path, const std::string& name, uint64_t rows,
    const std::vector<uint64_t>& target_shape, std::span<const uint64_t> ids = {},
    const std::string& member = "");

// What every member's prediction files must hold in a round.
struct PredictionShape {
  uint64_t pool_rows = 0;
  uint64_t test_rows = 0;
  uint64_t train_rows = 0;
  int64_t classes = 0;  // the run's class count (RunClassCount); 0: only equal across files
  // The tables' sample ids, to name a bad row by (optional).
  std::vector<uint64_t> pool_ids, test_ids, train_ids;
  RunTask task;  // regression: the files hold means and variances, `classes` is unused
};

// Checks the prediction files of an attempt in `dir` (absolute): the test table's, the pool's
// when `pool` (and its `pool_passes` MC-dropout passes when > 0) and the train table's when
// `train`. "" when they are sound, else one line naming the
// file and the problem
// ("exited 0 without writing predictions-pool.npy", "predictions-test.npy: 7 classes where
// the run has 10", a shape, a row that is not a probability vector).
std::string CheckAttemptPredictions(const std::string& dir, const PredictionShape& shape, bool pool,
                                    bool train, const std::string& member = "",
                                    int64_t pool_passes = 0);

// The members' predictions for one table, stacked: [member][sample][class] probabilities in a
// classification run, [member][sample][mean, variance][output] in a regression run (the
// layout RegressionPredictions views).
struct StackedPredictions {
  std::vector<float> data;
  int64_t members = 0, samples = 0, classes = 0;
  int64_t outputs = 0;               // regression: components per target; 0 in classification
  std::vector<size_t> member_index;  // config index of each stacked member
};

// Stacks the files of `members` (config index, absolute path), in that order; every member
// must predict `rows` rows, and the same number of classes as the first (classification) or
// the task's target shape (regression).
Result<StackedPredictions> StackPredictions(
    const std::vector<std::pair<size_t, std::string>>& members, uint64_t rows,
    const RunTask& task = {});

// One member's pool predictions for acquisition: its file (`passes` = 0), or the file of its
// `passes` MC-dropout passes.
struct PoolSampleFile {
  size_t index = 0;  // config index
  std::string path;  // absolute
  int64_t passes = 0;
};

// A classification run's pool as acquisition sees it: every member's predictions, a member
// with dropout passes counting as that many members (each with its config index), in order.
// Every file must have `rows` rows of `classes` (the run's class count, > 0) probabilities.
Result<StackedPredictions> StackPoolSamples(const std::vector<PoolSampleFile>& files, uint64_t rows,
                                            int64_t classes);

}  // namespace cohort::loop
