#include "cli/run/sbatch_command.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <system_error>

#include "common/file_util.h"

namespace cohort::cli {

namespace {

namespace fs = std::filesystem;

// Seconds between the warning signal and the time limit: time for a round to finish.
constexpr int kSignalLeadSeconds = 120;

bool IsShellSafe(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
}

bool AllShellSafe(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), IsShellSafe);
}

// A value in an #SBATCH line, which sbatch splits itself: quotes group (single or double), and a
// backslash escapes the next character even inside quotes.
std::string DirectiveQuote(std::string_view text) {
  if (AllShellSafe(text)) return std::string(text);
  std::string out = "'";
  for (char c : text) {
    if (c == '\\' || c == '\'') out += '\\';
    out += c;
  }
  return out + "'";
}

// A path in an --output pattern, where Slurm expands %j and friends: "%%" is a literal "%".
std::string LiteralInPattern(std::string_view path) {
  std::string out;
  for (char c : path) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

bool HasControlCharacter(std::string_view text) {
  return std::any_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

// The running executable, absolute (/proc/self/exe).
Result<std::string> SelfExecutable() {
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return Status::IOError("cannot find the cohort executable (/proc/self/exe)");
  return std::string(self, static_cast<size_t>(n));
}

}  // namespace

std::string ShellQuote(std::string_view text) {
  if (AllShellSafe(text)) return std::string(text);
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

Result<std::string> BatchScript(const SbatchOptions& options, const loop::LoopConfig& config,
                                const std::string& cohort_binary) {
  if (config.launcher != loop::Launcher::kSlurm) {
    return Status::InvalidArgument(
        config.path + ": launcher is \"" + loop::LauncherName(config.launcher) +
        "\": cohort sbatch needs launcher = \"slurm\" and a [slurm] table (docs/slurm.md)");
  }
  for (const std::string* path : {&options.config, &config.run_dir, &cohort_binary}) {
    if (HasControlCharacter(*path)) {
      return Status::InvalidArgument("the path '" + *path +
                                     "' holds a control character; a batch script cannot name it");
    }
  }
  const launch::SlurmOptions& slurm = config.slurm;
  if (options.nodes < 1) return Status::InvalidArgument("--nodes must be at least 1");
  int gpus = options.gpus_per_node >= 0 ? options.gpus_per_node : slurm.gpus_per_member;
  if (slurm.gpus_per_member > 0 && gpus < slurm.gpus_per_member) {
    return Status::InvalidArgument(
        "--gpus-per-node " + std::to_string(gpus) + ": each member's step asks for " +
        std::to_string(slurm.gpus_per_member) + " GPU(s) (slurm.gpus_per_member in " + config.path +
        "), so a node needs at least that many");
  }
  int cpus = options.cpus_per_task;
  if (cpus <= 0) {
    // What the worker steps of one node ask for together.
    int steps = slurm.gpus_per_member > 0 ? gpus / slurm.gpus_per_member : 1;
    cpus = std::max(1, steps) * std::max(1, slurm.cpus_per_member);
  }
  const std::string& partition = options.partition.empty() ? slurm.partition : options.partition;
  const std::string& account = options.account.empty() ? slurm.account : options.account;

  std::string s;
  auto line = [&s](const std::string& text) { s += text + "\n"; };
  auto directive = [&](const std::string& flag, const std::string& value) {
    if (!value.empty()) line("#SBATCH " + flag + "=" + DirectiveQuote(value));
  };
  line("#!/bin/bash");
  line("# Slurm batch script for the cohort run " + config.name + ", written by `cohort sbatch`");
  line("# (docs/slurm.md). Submit it with `sbatch FILE`. The loop's controller runs in this");
  line("# script; each member's worker runs as a step of this job (srun).");
  line("# " + std::to_string(kSignalLeadSeconds) +
       " s before the time limit Slurm sends SIGTERM: cohort finishes the running round");
  line("# and stops, resumably (exit status 130). A requeued job (preemption, node failure,");
  line("# scontrol requeue) or this script submitted again runs `cohort run` again, which");
  line("# resumes the run.");
  directive("--job-name", config.name);
  directive("--output", LiteralInPattern(config.run_dir + "/workers") + "/slurm-%j.out");
  line("#SBATCH --open-mode=append");
  line("#SBATCH --requeue");
  line("#SBATCH --signal=B:TERM@" + std::to_string(kSignalLeadSeconds));
  line("#SBATCH --nodes=" + std::to_string(options.nodes));
  line("#SBATCH --ntasks-per-node=1");
  line("#SBATCH --cpus-per-task=" + std::to_string(cpus));
  if (gpus > 0) line("#SBATCH --gres=gpu:" + std::to_string(gpus));
  directive("--time", options.time);
  directive("--partition", partition);
  directive("--account", account);
  directive("--qos", slurm.qos);
  directive("--constraint", slurm.constraint);
  if (!slurm.mem.empty()) {
    line("# Each member's step asks for --mem=" + slurm.mem +
         " (slurm.mem): if the partition's default memory");
    line("# per node is less than its steps need together, add an #SBATCH --mem line here.");
  }
  line("");
  line("exec " + ShellQuote(cohort_binary) + " run " + ShellQuote(options.config));
  return s;
}

void AddSbatchCommand(CLI::App& app, std::function<Status()>* run) {
  auto o = std::make_shared<SbatchOptions>();
  auto* cmd = app.add_subcommand(
      "sbatch", "Print a Slurm batch script that runs `cohort run CONFIG` (docs/slurm.md)");
  cmd->add_option("config", o->config, "the loop config (loop.toml), launcher = \"slurm\"")
      ->required();
  cmd->add_option("--nodes", o->nodes, "nodes of the allocation (default 1)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--gpus-per-node", o->gpus_per_node,
                  "GPUs per node (--gres=gpu:G); default slurm.gpus_per_member, else none")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--time", o->time, "the job's time limit, Slurm's format (\"1-00:00:00\")");
  cmd->add_option("--partition", o->partition, "partition; default slurm.partition");
  cmd->add_option("--account", o->account, "account; default slurm.account");
  cmd->add_option("--cpus-per-task", o->cpus_per_task,
                  "CPUs per node; default what the node's worker steps ask for together")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("-o,--out", o->out, "write the script to FILE instead of printing it");
  cmd->callback([o, run] {
    *run = [o]() -> Status {
      COHORT_ASSIGN_OR_RETURN(loop::LoopConfig config, loop::LoadLoopConfig(o->config));
      COHORT_ASSIGN_OR_RETURN(std::string binary, SelfExecutable());
      SbatchOptions options = *o;
      options.config = fs::absolute(o->config).lexically_normal().string();
      COHORT_ASSIGN_OR_RETURN(std::string script, BatchScript(options, config, binary));
      // Slurm opens the output file before the script starts and does not create its directory.
      std::error_code ec;
      fs::create_directories(config.run_dir + "/workers", ec);
      if (ec) {
        return Status::IOError("create " + config.run_dir +
                               "/workers (the job's output): " + ec.message());
      }
      if (o->out.empty()) {
        std::fputs(script.c_str(), stdout);
        return Status::OK();
      }
      COHORT_RETURN_IF_ERROR(
          WriteFileAtomically(o->out, {std::as_bytes(std::span(script.data(), script.size()))}));
      std::printf("wrote %s (submit it with: sbatch %s)\n", o->out.c_str(),
                  ShellQuote(o->out).c_str());
      return Status::OK();
    };
  });
}

}  // namespace cohort::cli
