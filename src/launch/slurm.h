// Slurm: how a worker is started as a job step with `srun`, and what Slurm's own words about a
// step's end mean. The loop's SlurmProcessHost (launch/slurm_process_host.h) runs these argvs
// through the local SubprocessSet, so everything else (pipes, process groups, deadlines) is the
// local launcher's.
//
// A slot's worker is one `srun --ntasks=1 --nodes=1 ... cohort-member worker ...`: one task with
// its own stdin and stdout (srun copies stdin to every task of a multi-task step, so a step is
// never shared), started inside the allocation the controller runs in (`sbatch`, `salloc`), or
// outside one as a job of its own. Slurm binds the step's GPUs (CUDA_VISIBLE_DEVICES through
// GRES) and CPUs itself: the local binding variables are not passed on. A SIGTERM to srun makes
// it SIGKILL the task (exit 137); closing its stdin ends a worker cleanly.
//
// Thread-safety: pure functions, except InSlurmAllocation and AllocationSlots, which read the
// environment.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace cohort::launch {

// The [slurm] table of a loop config (docs/slurm.md).
struct SlurmOptions {
  std::string partition;    // --partition; empty: the cluster's default
  std::string account;      // --account
  std::string qos;          // --qos
  std::string time;         // --time per step, Slurm's format ("30", "1:00:00", "1-00:00:00")
  std::string constraint;   // --constraint
  std::string mem;          // --mem per member ("8G")
  int cpus_per_member = 1;  // --cpus-per-task
  int gpus_per_member = 0;  // --gpus
  std::vector<std::string> srun_args;  // appended as given (no shell)
  double queue_timeout_s = 300;        // --immediate: a step must start within this
  int slots = 0;  // outside an allocation: steps run at once, each a job of its own
};

// True when this process runs inside a Slurm allocation (SLURM_JOB_ID is set).
bool InSlurmAllocation();

// How many workers an allocation holds: its GPUs over gpus_per_member when members use GPUs,
// else its CPUs over cpus_per_member, across all its nodes; at least 1. Read from SLURM_JOB_GPUS
// / SLURM_GPUS_ON_NODE, SLURM_JOB_CPUS_PER_NODE and SLURM_JOB_NUM_NODES.
int AllocationSlots(const SlurmOptions& options);

// srun's argv for one worker step named `job_name` running `command`.
std::vector<std::string> SrunArgv(const SlurmOptions& options, const std::string& job_name,
                                  bool in_allocation, const std::vector<std::string>& command);

// scancel's argv that cancels the job named `job_name` that `user` owns, pending or running.
// Outside an allocation every step is a job of its own with a unique name, and a srun killed
// between its allocation and its step's launch leaves that job holding its resources until its
// time limit (Slurm's InactiveLimit is 0 by default): the name is how it is found again.
std::vector<std::string> ScancelByNameArgv(const std::string& job_name, const std::string& user);

// Environment variables the local launcher binds devices with, which a step must not get:
// Slurm binds the step's GPUs and CPUs.
bool IsLocalBindingVariable(std::string_view name);

// Slurm's reason for a step's end, in words, from the end of its log (srun's and slurmstepd's
// messages go to the step's stderr): "the step did not start: Requested nodes are busy",
// "cancelled by Slurm: time limit", "preempted", "node failure", "cancelled (scancel)"; empty
// when the log says nothing about it.
std::string SlurmEndReason(std::string_view log_tail);

// "partition debug, 1 GPU, 2 CPUs" for messages.
std::string DescribeRequest(const SlurmOptions& options);

}  // namespace cohort::launch
