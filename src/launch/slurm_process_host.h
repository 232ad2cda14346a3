// SlurmProcessHost: the ProcessHost that runs each process as a Slurm job step (launch/slurm.h):
// `srun --ntasks=1 ... ARGV`, started and served by a LocalProcessHost, so the worker protocol
// passes through srun's stdio unchanged and deadlines, kills and interrupts work as locally.
// What it adds:
// - the step's request (partition, time, memory, CPUs, GPUs, extra srun arguments) and Slurm's
//   own device binding (the local CUDA_VISIBLE_DEVICES and CPU set are not passed on);
// - a step waiting in the queue is not silent: until its first line the heartbeat timeout
//   allows queue_timeout_s on top (srun's --immediate ends a step that did not start by then),
//   after it the member's own timeout applies;
// - an end Slurm caused is said in words in ExitInfo::detail ("slurm: the step did not start
//   within 300 s (partition gpu, 1 GPU, 1 CPU): Requested nodes are busy", a time limit,
//   preemption, a node failure), read from the step's log;
// - outside an allocation each step is a job of its own named uniquely
//   ("cohort-worker-<host token>-<n>"), and a step whose srun was killed or signalled has its
//   job cancelled through scancel: srun killed between its allocation and its step's launch
//   would otherwise leave the job holding its node until its time limit;
// - CheckSharedStore: a probe step that reads the run store's CURRENT, so a store the nodes do
//   not see fails the run at its start.
//
// Thread-safety: as LocalProcessHost.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "launch/local_process_host.h"
#include "launch/slurm.h"

namespace cohort::launch {

class SlurmProcessHost : public ProcessHost {
 public:
  static Result<std::unique_ptr<SlurmProcessHost>> Create(SlurmOptions options,
                                                          std::chrono::milliseconds kill_grace);

  // Runs one probe step that prints `store_dir`/CURRENT and compares it with this machine's;
  // the step's stderr goes to `log_path`.
  Status CheckSharedStore(const std::string& store_dir, const std::string& log_path);

  Result<ProcessId> Start(const SpawnSpec& spec) override;
  // Not a step: a plain child of the controller.
  Result<ProcessId> StartHere(const SpawnSpec& spec) override { return local_->Start(spec); }
  Status Write(ProcessId process, std::string_view line) override;
  void CloseStdin(ProcessId process) override;
  void Terminate(ProcessId process) override;
  void Kill(ProcessId process) override;
  int64_t Pid(ProcessId process) const override;
  std::string Name(ProcessId process) const override;
  Result<int> Poll(std::chrono::milliseconds timeout, Listener& listener) override;
  size_t live() const override { return local_->live(); }
  Clock::time_point Now() const override { return local_->Now(); }

 private:
  class Adapter;
  struct Step {
    std::string log_path;  // the step's stderr: srun's and slurmstepd's words
    std::chrono::milliseconds heartbeat_timeout{0};
    bool started = false;  // printed its first line
    std::string job_name;  // outside an allocation: the step's own job, unique to it
    bool worker = false;   // a `cohort-member worker`: reads the protocol on its stdin
  };
  SlurmProcessHost(SlurmOptions options, std::unique_ptr<LocalProcessHost> local);
  std::string EndDetail(const Step& step, const ExitInfo& info) const;
  // The job name for a step running `program`: unique outside an allocation.
  std::string JobName(const std::string& program);
  // Outside an allocation: scancel of the step's job, as a child whose end nobody is told of.
  void CancelJob(const Step& step);

  SlurmOptions options_;
  bool in_allocation_ = false;
  std::unique_ptr<LocalProcessHost> local_;
  std::map<ProcessId, Step> steps_;
  std::string token_;  // this controller's part of its job names
  int64_t next_job_ = 0;
  std::set<ProcessId> cancels_;  // scancel children
};

}  // namespace cohort::launch
