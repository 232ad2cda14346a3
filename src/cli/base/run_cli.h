// RunCli: parse a command line with CLI11 and run the chosen command, the way every cohort
// executable does it: usage errors are one line and status 2, a failed command is one line
// `cohort: error: ...` and status 1, never a stack trace.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "common/status.h"

namespace cohort::cli {

int RunCli(CLI::App& app, int argc, char** argv, const std::function<Status()>& run);

// The path of the executable `name` installed beside the running one (/proc/self/exe's
// directory), for commands that live in another binary.
std::string SiblingExecutable(const std::string& name);

}  // namespace cohort::cli
