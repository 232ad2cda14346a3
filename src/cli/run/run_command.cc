#include "cli/run/run_command.h"

#include <cstdio>
#include <memory>
#include <string>

#include "cli/base/run_cli.h"
#include "loop/controller.h"
#include "loop/run/run_status.h"

namespace cohort::cli {

void AddRunCommands(CLI::App& app, std::function<Status()>* run, int* exit_code) {
  struct Options {
    std::string config;
    std::string run_dir;
    bool json = false;
    bool plain = false;
    bool no_verify_source = false;
  };
  auto o = std::make_shared<Options>();

  auto* run_cmd = app.add_subcommand(
      "run", "Run (or resume) the closed loop a loop.toml describes (docs/config.md)");
  run_cmd->add_option("config", o->config, "the loop config (loop.toml)")->required();
  run_cmd->add_flag("--plain", o->plain,
                    "plain progress lines even on a terminal (no redrawn display)");
  run_cmd->add_flag("--no-verify-source", o->no_verify_source,
                    "a new run clones its source generation without reading it all first "
                    "(for huge stores checked otherwise)");
  run_cmd->callback([o, run, exit_code] {
    *run = [o, exit_code]() -> Status {
      loop::RunOptions options;
      options.config_path = o->config;
      options.member_binary = SiblingExecutable("cohort-member");
      if (o->plain) options.display.terminal = 0;
      options.verify_source = !o->no_verify_source;
      std::setvbuf(stdout, nullptr, _IOLBF, 0);
      auto outcome = loop::RunLoop(options);
      if (!outcome.ok()) return outcome.status();
      if (*outcome == loop::RunOutcome::kStopped) *exit_code = 130;
      return Status::OK();
    };
  });

  auto* status_cmd = app.add_subcommand("status", "Show a run's rounds, metrics and members");
  status_cmd->add_option("run_dir", o->run_dir, "the run directory (runs/NAME)")->required();
  status_cmd->add_flag("--json", o->json, "machine-readable output (docs/cli.md)");
  status_cmd->callback([o, run] {
    *run = [o]() -> Status {
      auto status = loop::RunStatusJson(o->run_dir);
      if (!status.ok()) return status.status();
      if (o->json) {
        std::printf("%s\n", status->dump(2).c_str());
      } else {
        std::fputs(loop::RunStatusText(*status).c_str(), stdout);
      }
      return Status::OK();
    };
  });
}

}  // namespace cohort::cli
