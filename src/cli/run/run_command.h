// `cohort run CONFIG` and `cohort status RUN_DIR`: the loop's command-line interface
// (docs/cli.md). They live in the torch-free `cohort` binary; the workers they start run
// `cohort-member worker`.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "common/status.h"

namespace cohort::cli {

// Adds `run` and `status` to `app`. The chosen command's action is stored in `*run`; a run
// that stopped on Ctrl-C sets `*exit_code` to 130 (it returns OK: nothing failed).
void AddRunCommands(CLI::App& app, std::function<Status()>* run, int* exit_code);

}  // namespace cohort::cli
