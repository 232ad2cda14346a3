// `cohort predict RUN_DIR`: the ensemble of a round applied to new data. Every finished member
// of the round runs `cohort-member predict` on the input, in parallel on the run's devices;
// the members' probabilities are combined into the mean, the predicted class and per-sample
// uncertainty (loop/ensemble/uncertainty.h), written as .npz or CSV (docs/cli.md). In a
// regression run (the run's train table holds float targets: loop::RunTaskOf) the members'
// means and variances are combined into the ensemble's mean and its total variance, split into
// aleatoric and epistemic parts (loop::ComputeRegressionUncertainty).
//
// Inputs: a store table (--store, --table, --generation) or a file: .npy, IDX images
// (gzip or plain), or CSV (--label-column names a column to leave out). A file is imported
// into a temporary store first, checked against the run's train table (dtype and shape).
//
// Calibration (classification runs): with --calibrate TABLE the members also predict a labelled
// table they did not train on, a temperature is fitted to the ensemble mean there
// (loop/ensemble/calibration.h), and the output gains the calibrated probabilities; --temperature T
// applies a temperature fitted before.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/status.h"

namespace cohort::cli {

struct EnsemblePredictOptions {
  std::string run_dir;
  std::optional<int64_t> round;  // unset: the last finished round
  std::string input;             // a file, or empty when store/table are given
  std::string label_column;      // CSV input: the column that is not a feature
  std::string store, table;
  std::optional<uint64_t> generation;
  std::string calibrate_table;          // a labelled table to fit a temperature on
  std::string calibrate_store;          // its store; empty: the run's store
  std::optional<double> temperature;    // a temperature to apply instead of fitting one
  bool calibrated = false;              // apply the round's journalled test temperature
  std::string out = "predictions.npz";  // .csv: CSV, anything else: .npz
  std::string member_binary;            // cohort-member
};

Status RunEnsemblePredict(const EnsemblePredictOptions& options);

// Adds `predict RUN_DIR ...` to `app` (the single-checkpoint form, `predict --checkpoint`,
// is cohort-member's; main.cc sends it there).
void AddEnsemblePredictCommand(CLI::App& app, std::function<Status()>* run);

}  // namespace cohort::cli
