// `cohort report RUN_DIR [-o FILE] [--watch [SECONDS]]`: a run's charts as one self-contained
// HTML file (docs/report.md), read from the journal and the store without taking the run's
// lock, so it works while the run goes.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "common/status.h"

namespace cohort::cli {

void AddReportCommand(CLI::App& app, std::function<Status()>* run, const char* version);

}  // namespace cohort::cli
