// `cohort sbatch CONFIG`: a ready-to-submit Slurm batch script that runs `cohort run CONFIG`
// inside one allocation (docs/slurm.md). The controller runs in the batch step; each worker is a
// step of the same job (launch/slurm.h). The script asks for a warning signal before the time
// limit (cohort stops resumably on SIGTERM) and may be requeued (cohort run resumes the run).
//
// Thread-safety: BatchScript and ShellQuote are pure functions.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "loop/config/config.h"

namespace cohort::cli {

struct SbatchOptions {
  std::string config;  // the loop config; absolute in BatchScript
  int nodes = 1;
  int gpus_per_node = -1;  // -1: slurm.gpus_per_member when > 0, else no GPUs
  std::string time;        // --time; empty: the partition's default
  std::string partition;   // empty: slurm.partition
  std::string account;     // empty: slurm.account
  int cpus_per_task = 0;   // 0: one worker slot per node (see BatchScript)
  std::string out;         // -o: write the script here instead of printing it
};

// `text` as one shell word: unchanged when it holds only characters the shell takes literally,
// else in single quotes ('it'\''s' for a quote inside).
std::string ShellQuote(std::string_view text);

// The batch script running `cohort_binary run options.config` for `config` (the parsed
// options.config). Directives: the job name (config.name), the output file
// RUN_DIR/workers/slurm-%j.out (appended to, so a requeued job adds to it), --requeue,
// --signal=B:TERM@120, --nodes, the GPUs per node (--gres=gpu:G), --cpus-per-task, --time,
// partition and account (the options', else the config's [slurm] ones), qos and constraint
// (the config's).
// CPUs per task default to what the node's worker steps need: G / gpus_per_member steps of
// cpus_per_member CPUs each with GPUs, one step's cpus_per_member without.
// InvalidArgument when the config's launcher is not "slurm", or the GPUs per node cannot hold
// one member's.
Result<std::string> BatchScript(const SbatchOptions& options, const loop::LoopConfig& config,
                                const std::string& cohort_binary);

// Adds `sbatch` to `app`. The chosen command's action is stored in `*run`.
void AddSbatchCommand(CLI::App& app, std::function<Status()>* run);

}  // namespace cohort::cli
