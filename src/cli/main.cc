// The `cohort` executable: parses the command line and runs one subcommand. Errors are one
// line on stderr and a non-zero exit status, never a stack trace.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <functional>

#include "cli/data_command.h"
#include "common/status.h"

#ifndef COHORT_VERSION
#define COHORT_VERSION "0.0.0"
#endif

int main(int argc, char** argv) {  // NOLINT(bugprone-exception-escape): CLI11 setup only
  CLI::App app{"cohort: train an ensemble in parallel inside a closed data loop", "cohort"};
  app.set_version_flag("--version", COHORT_VERSION);
  app.require_subcommand(1);
  std::function<cohort::Status()> run;
  cohort::cli::AddDataCommands(app, &run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other error; --help shows the usage.
    std::fprintf(stderr, "cohort: error: %s (see --help)\n", e.what());
    return 2;
  }
  if (!run) {
    std::fprintf(stderr, "cohort: error: no command given (see cohort --help)\n");
    return 2;
  }
  try {
    cohort::Status status = run();
    if (!status.ok()) {
      std::fprintf(stderr, "cohort: error: %s\n", status.message().c_str());
      return 1;
    }
  } catch (const std::exception& e) {
    // Only out-of-memory and library bugs get here; still one line.
    std::fprintf(stderr, "cohort: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
