// `cohort status RUN_DIR`: a run's state read from its journal and store, for a running or a
// finished run (the journal is opened alongside the controller; WAL readers never block it).
//
// The JSON (`--json`) is documented in docs/cli.md; its top level holds the run (name,
// status, controller pid when one runs, source, current generation) and `rounds`, each with
// its input and output generations, labelled samples, phase, timings, the ensemble's test
// metrics and per-member attempts and metrics.
//
// Thread-safety: pure functions over the files.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace cohort::loop {

Result<nlohmann::json> RunStatusJson(const std::string& run_dir);

// The same for people: a header, a table of rounds, the last round's members.
std::string RunStatusText(const nlohmann::json& status);

}  // namespace cohort::loop
