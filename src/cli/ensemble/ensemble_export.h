// `cohort export RUN_DIR [--round N] -o DIR`: a round's ensemble as plain files a Python user
// loads with numpy alone (python/cohort_ensemble.py, copied into DIR): per member its weights
// as .npy, its model spec, input scaling and standardisation, classes and layers
// (member.json, written by `cohort-member export-member`), and DIR/manifest.json naming the
// members, the run, the round and the input they take, and the task: classes, or a regression
// ensemble's target shape (docs/cli.md).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "common/status.h"

namespace cohort::cli {

void AddExportCommand(CLI::App& app, std::function<Status()>* run, const char* version);

}  // namespace cohort::cli
