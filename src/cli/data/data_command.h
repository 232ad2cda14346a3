// `cohort data ...`: the store's command-line interface (init, import, info, log, diff, split,
// remove, verify, compact, prune, export, clone). Each subcommand reports failure as one Status
// that main() prints as a single line.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "common/status.h"

namespace cohort::cli {

// Adds the `data` subcommand tree to `app`. The chosen command's action is stored in `*run`.
void AddDataCommands(CLI::App& app, std::function<Status()>* run);

}  // namespace cohort::cli
