// `cohort-member`: the commands that need libtorch (train, eval, predict, worker). Users run
// them as `cohort train ...`; `cohort` execs this program with the same arguments.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>

#include "cli/base/run_cli.h"
#include "cli/member/member_command.h"
#include "common/status.h"

#ifndef COHORT_VERSION
#define COHORT_VERSION "0.0.0"
#endif

int main(int argc, char** argv) {  // NOLINT(bugprone-exception-escape): CLI11 setup only
  CLI::App app{"cohort member commands (run them as `cohort train|eval|predict|worker`)", "cohort"};
  app.set_version_flag("--version", COHORT_VERSION);
  app.require_subcommand(1);
  std::function<cohort::Status()> run;
  cohort::cli::AddMemberCommands(app, &run);
  int code = cohort::cli::RunCli(app, argc, argv, run);
  // Everything that matters is on disk (checkpoints are fsync'd) and stdout is flushed here;
  // skipping libtorch's static destructors saves 60-80 ms per command (docs/benchmarks.md).
  std::fflush(nullptr);
  ::_exit(code);
}
