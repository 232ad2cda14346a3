// The `cohort` executable. It does not link libtorch, so data commands (and the loop
// controller) start in milliseconds; the member commands (train, eval, predict, worker) live
// in `cohort-member`, which this program execs with the same arguments.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "cli/base/run_cli.h"
#include "cli/data/data_command.h"
#include "cli/ensemble/ensemble_export.h"
#include "cli/ensemble/ensemble_predict.h"
#include "cli/report/report_command.h"
#include "cli/run/run_command.h"
#include "cli/run/sbatch_command.h"
#include "common/status.h"

#ifndef COHORT_VERSION
#define COHORT_VERSION "0.0.0"
#endif

namespace {

constexpr const char* kMemberCommands[][2] = {
    {"train", "Train one member on a store table (cohort train --help)"},
    {"eval", "Evaluate a checkpoint on a store table (cohort eval --help)"},
    {"export-member", "Write checkpoints as .npy weights and JSON (run by cohort export)"},
    {"worker", "Serve train/predict/evaluate commands on stdin (docs/protocol.md)"},
};

// The commands cohort-member runs: train, eval, worker, and `predict --checkpoint C ...`, which
// applies one checkpoint (`predict RUN_DIR ...` applies a run's ensemble: ensemble_predict.h).
bool IsMemberCommand(int argc, char** argv) {
  if (argc < 2) return false;
  for (const auto& command : kMemberCommands) {
    if (std::strcmp(argv[1], command[0]) == 0) return true;
  }
  if (std::strcmp(argv[1], "predict") != 0) return false;
  for (int i = 2; i < argc; i++) {
    if (std::strcmp(argv[i], "--checkpoint") == 0 ||
        std::strncmp(argv[i], "--checkpoint=", 13) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {  // NOLINT(bugprone-exception-escape): CLI11 setup only
  if (IsMemberCommand(argc, argv)) {
    std::string member = cohort::cli::SiblingExecutable("cohort-member");
    argv[0] = member.data();
    ::execv(member.c_str(), argv);
    std::fprintf(stderr, "cohort: error: cannot run %s: %s\n", member.c_str(),
                 std::strerror(errno));
    return 1;
  }
  CLI::App app{"cohort: train an ensemble in parallel inside a closed data loop", "cohort"};
  app.set_version_flag("--version", COHORT_VERSION);
  app.require_subcommand(1);
  std::function<cohort::Status()> run;
  int exit_code = 0;
  cohort::cli::AddDataCommands(app, &run);
  cohort::cli::AddRunCommands(app, &run, &exit_code);
  cohort::cli::AddSbatchCommand(app, &run);
  cohort::cli::AddReportCommand(app, &run, COHORT_VERSION);
  cohort::cli::AddEnsemblePredictCommand(app, &run);
  cohort::cli::AddExportCommand(app, &run, COHORT_VERSION);
  for (const auto& command : kMemberCommands) {
    app.add_subcommand(command[0], command[1])->allow_extras();  // listed in --help only
  }
  int rc = cohort::cli::RunCli(app, argc, argv, run);
  return rc == 0 ? exit_code : rc;
}
