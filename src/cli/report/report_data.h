// What `cohort report` shows, gathered from a run directory without taking its lock: the
// journal (rounds, attempts, epochs, member metrics, picks), the run's store (generations,
// table sizes, what each round changed, the picked samples' labels and images) and the final
// round's test predictions (the reliability diagram; in a regression run, the coverage of the
// ensemble's central predictive intervals).
//
// Everything the report draws is in ReportData as plain values, so report_html.cc only lays
// it out and tests can build one by hand.
//
// Thread-safety: GatherReport reads files only; the result is a plain value.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "loop/ensemble/calibration.h"
#include "loop/ensemble/metrics.h"
#include "loop/ensemble/regression.h"
#include "loop/run/journal.h"

namespace cohort::cli {

struct ReportTableChange {
  int64_t added = 0;      // ids live in the output generation only
  int64_t removed = 0;    // ids live in the input generation only
  int64_t moved_in = 0;   // of `added`, ids that left another table in the same round
  int64_t moved_out = 0;  // of `removed`, ids that entered another table in the same round
};

struct ReportPickImage {
  int64_t sample_id = 0;
  int64_t rank = 0;
  double score = 0;
  std::optional<int64_t> label;
  std::string png;  // the image as a PNG file's bytes
};

struct ReportRound {
  loop::RoundRecord record;
  std::optional<int64_t> labels_in;  // rows of the train table the members trained on
  std::optional<double> wall_s;      // ended_at - started_at
  std::map<std::string, ReportTableChange> changes;  // per table, input -> output generation
  std::vector<loop::AcquiredSample> picks;
  std::vector<std::optional<int64_t>> pick_labels;  // per pick, from the output generation
  std::vector<ReportPickImage> images;              // the best-scored picks, for image tables
  std::map<std::string, std::map<std::string, double>> member_metrics;  // member -> metric
};

struct ReportAttempt {
  loop::AttemptRecord record;
  std::optional<double> start_s, end_s;  // seconds since the run started; end unset: running
  std::vector<loop::EpochRecord> epochs;
};

struct ReportGeneration {
  uint64_t generation = 0;
  std::string created;
  std::string note;
  std::map<std::string, uint64_t> rows;  // per table
};

// One member of the final ensemble alone on the test rows the reliability section scores.
struct ReportMemberReliability {
  std::string name;
  loop::ClassificationMetrics metrics;
  std::optional<loop::EceRange> ece_range;  // loop::PerfectlyCalibratedEce of its predictions
};

struct ReportData {
  std::string run_dir;
  std::string name;
  std::string status;  // running, finished, failed, stopped, interrupted
  std::optional<int64_t> controller_pid;
  std::string started_at, ended_at;
  std::string config_toml;
  std::string source_store;
  uint64_t source_generation = 0;
  std::string train_table, pool_table, test_table;
  std::string strategy;
  // A regression run (the train table holds float targets: loop::RunTaskOf; when the store
  // cannot be read, a round with a test RMSE says so): its metrics are RMSE, MAE, NLL and
  // calibration error, its picks have no classes, and its reliability section shows coverage.
  bool regression = false;
  std::vector<std::string> members;  // config order
  std::vector<std::string> devices;  // config order
  std::string generated_at;
  std::string cohort_version;

  std::vector<ReportRound> rounds;
  std::vector<ReportAttempt> attempts;  // every round, in start order
  std::vector<ReportGeneration> generations;
  std::string store_error;  // why the store could not be read, if it could not

  // The final ensemble on the test table: the last done round's finished members.
  std::optional<int64_t> reliability_round;
  int64_t reliability_members = 0;
  std::optional<loop::ClassificationMetrics> reliability;
  // The same predictions calibrated as the loop calibrates each round (loop::
  // CrossFitEnsembleTemperature): its `calibrated` metrics are the journal's cross-fitted ones.
  std::optional<loop::CrossFittedCalibration> reliability_calibrated;
  // The ECE a perfectly calibrated model with the confidences of `reliability`, and of
  // `reliability_calibrated`, would read on this table (loop::PerfectlyCalibratedEce).
  std::optional<loop::EceRange> reliability_ece_range;
  std::optional<loop::EceRange> reliability_calibrated_ece_range;
  // Each of those members alone on the same rows, in the order of their prediction files.
  std::vector<ReportMemberReliability> reliability_by_member;
  // Regression: every member's and the ensemble's metrics, whose `coverage` the section draws.
  std::optional<loop::EnsembleRegressionMetrics> coverage;
  std::vector<std::string> coverage_members;  // the names of coverage->members, in order
  std::string reliability_error;              // why there is neither
};

struct GatherOptions {
  int images_per_round = 16;  // best-scored picks shown per round (image tables only)
};

// Reads RUN_DIR. Errors: not a run directory, an unreadable config or journal. A missing or
// pruned store generation or prediction file only leaves its part of the report empty (with
// the reason), since a report of a damaged run is still useful.
Result<ReportData> GatherReport(const std::string& run_dir, const GatherOptions& options = {});

}  // namespace cohort::cli
