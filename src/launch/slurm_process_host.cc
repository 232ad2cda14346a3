#include "launch/slurm_process_host.h"

#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <utility>

#include "common/file_util.h"
#include "common/worker_protocol.h"

namespace cohort::launch {

namespace {

// The end of a log file, where srun and slurmstepd write why a step ended.
std::string LogTail(const std::string& path, size_t bytes = 16384) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  auto size = static_cast<size_t>(in.tellg());
  in.seekg(static_cast<std::streamoff>(size > bytes ? size - bytes : 0));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The user scancel filters on, so a name never reaches another user's jobs (root sees all).
std::string UserName() {
  const passwd* pw = getpwuid(getuid());
  return pw != nullptr ? pw->pw_name : std::to_string(getuid());
}

// A short random token: controllers on several hosts share one user's queue.
std::string RandomToken() {
  std::random_device device;
  return fmt::format("{:08x}", device());
}

}  // namespace

// Starts a step's heartbeat clock at its first line and adds Slurm's words to its exit.
class SlurmProcessHost::Adapter : public ProcessHost::Listener {
 public:
  Adapter(SlurmProcessHost* host, Listener* listener) : host_(host), listener_(listener) {}

  void OnEvent(ProcessId process, nlohmann::json event) override {
    if (host_->cancels_.contains(process)) return;
    Started(process);
    // A command's end (done, error) is answered by the next command, which acknowledges it.
    const auto* kind = event.is_object() && event.contains("ev")
                           ? event["ev"].get_ptr<const std::string*>()
                           : nullptr;
    if (kind != nullptr &&
        (*kind == protocol::ev::kProgress || *kind == protocol::ev::kHeartbeat)) {
      Acknowledge(process);
    }
    listener_->OnEvent(process, std::move(event));
  }
  void OnLog(ProcessId process, std::string_view line) override {
    if (host_->cancels_.contains(process)) return;
    Started(process);
    listener_->OnLog(process, line);
  }
  void OnStdoutClosed(ProcessId process) override {
    if (!host_->cancels_.contains(process)) listener_->OnStdoutClosed(process);
  }
  void OnExit(ProcessId process, const ExitInfo& info) override {
    if (host_->cancels_.erase(process) > 0) return;
    ExitInfo with_detail = info;
    auto it = host_->steps_.find(process);
    if (it != host_->steps_.end()) {
      with_detail.detail = host_->EndDetail(it->second, info);
      // A srun that did not exit by itself may not have told Slurm its job is over.
      if (info.reason != ExitReason::kExited) host_->CancelJob(it->second);
      host_->steps_.erase(it);
    }
    listener_->OnExit(process, with_detail);
  }

 private:
  // A blank line back to a worker for each progress or heartbeat event (workers skip blank
  // lines). srun and slurmstepd relay a step's stdio over TCP with Nagle's algorithm on: a line
  // the task prints soon after another waits until the first is acknowledged, and the receiver
  // delays that by ~40 ms unless data goes back the other way, which the blank line is.
  // Without it, the event that ends a command is held that long whenever a progress event just
  // preceded it. Not after a command's end: the next command acknowledges that, and a blank
  // line just before it would hold the command back the same way.
  void Acknowledge(ProcessId process) {
    auto it = host_->steps_.find(process);
    if (it != host_->steps_.end() && it->second.worker) (void)host_->local_->Write(process, "");
  }

  void Started(ProcessId process) {
    auto it = host_->steps_.find(process);
    if (it == host_->steps_.end() || it->second.started) return;
    it->second.started = true;
    host_->local_->SetHeartbeatTimeout(process, it->second.heartbeat_timeout);
  }

  SlurmProcessHost* host_;
  Listener* listener_;
};

SlurmProcessHost::SlurmProcessHost(SlurmOptions options, std::unique_ptr<LocalProcessHost> local)
    : options_(std::move(options)),
      in_allocation_(InSlurmAllocation()),
      local_(std::move(local)),
      token_(RandomToken()) {}

Result<std::unique_ptr<SlurmProcessHost>> SlurmProcessHost::Create(
    SlurmOptions options, std::chrono::milliseconds kill_grace) {
  COHORT_ASSIGN_OR_RETURN(auto local, LocalProcessHost::Create(kill_grace));
  return std::unique_ptr<SlurmProcessHost>(
      new SlurmProcessHost(std::move(options), std::move(local)));
}

std::string SlurmProcessHost::EndDetail(const Step& step, const ExitInfo& info) const {
  if (info.reason == ExitReason::kExited && info.exit_code == 0) return "";
  std::string reason = SlurmEndReason(LogTail(step.log_path));
  if (reason.rfind("the step did not start: ", 0) == 0) {
    return fmt::format("slurm: the step did not start within {} s ({}): {}",
                       options_.queue_timeout_s, DescribeRequest(options_),
                       reason.substr(std::string("the step did not start: ").size()));
  }
  return reason.empty() ? "" : "slurm: " + reason;
}

std::string SlurmProcessHost::JobName(const std::string& program) {
  if (in_allocation_) return program;
  return fmt::format("{}-{}-{}", program, token_, next_job_++);
}

void SlurmProcessHost::CancelJob(const Step& step) {
  if (step.job_name.empty()) return;
  SpawnSpec cancel;
  cancel.argv = ScancelByNameArgv(step.job_name, UserName());
  cancel.stderr_path = step.log_path;
  // Best effort: without scancel the job ends at its time limit, as it would have anyway.
  auto started = local_->Start(cancel);
  if (started.ok()) cancels_.insert(*started);
}

Result<ProcessId> SlurmProcessHost::Start(const SpawnSpec& spec) {
  SpawnSpec step = spec;
  std::string program =
      spec.argv.empty() ? "cohort" : std::filesystem::path(spec.argv[0]).filename().string();
  bool worker = spec.argv.size() > 1 && spec.argv[1] == "worker";
  // A memory limit binds the task through Slurm (--mem), not srun through prlimit.
  SlurmOptions request = options_;
  if (spec.memory_limit_bytes > 0 && request.mem.empty()) {
    request.mem = std::to_string(std::max<uint64_t>(1, spec.memory_limit_bytes >> 20)) + "M";
  }
  step.memory_limit_bytes = 0;
  // A worker writes its log itself, on the node: through srun, every log line would delay the
  // event after it by ~40 ms (docs/slurm.md, "Latency"). srun's own words still go to the
  // same file, from here.
  std::vector<std::string> command = spec.argv;
  if (worker && !spec.stderr_path.empty()) {
    command.insert(command.end(), {"--log-file", spec.stderr_path});
  }
  std::string job_name = JobName("cohort-" + (worker ? std::string("worker") : program));
  step.argv = SrunArgv(request, job_name, in_allocation_, command);
  std::erase_if(step.env, [](const auto& kv) { return IsLocalBindingVariable(kv.first); });
  // A step waiting for its resources says nothing; --immediate bounds that wait, so until the
  // first line the heartbeat allows the queue wait on top. A task that hangs before its first
  // line (stuck at start-up, stopped) is still killed, only later.
  step.heartbeat_timeout = std::chrono::milliseconds(0);
  if (spec.heartbeat_timeout.count() > 0 && options_.queue_timeout_s > 0) {
    step.heartbeat_timeout =
        spec.heartbeat_timeout +
        std::chrono::milliseconds(static_cast<int64_t>(std::ceil(options_.queue_timeout_s) * 1000));
  }
  COHORT_ASSIGN_OR_RETURN(ProcessId id, local_->Start(step));
  steps_[id] = Step{.log_path = spec.stderr_path,
                    .heartbeat_timeout = spec.heartbeat_timeout,
                    .job_name = in_allocation_ ? "" : job_name,
                    .worker = worker};
  return id;
}

Status SlurmProcessHost::Write(ProcessId process, std::string_view line) {
  return local_->Write(process, line);
}
void SlurmProcessHost::CloseStdin(ProcessId process) { local_->CloseStdin(process); }
// srun turns SIGTERM into SIGKILL of the task and ends the step: the scancel of its step.
void SlurmProcessHost::Terminate(ProcessId process) { local_->Terminate(process); }
void SlurmProcessHost::Kill(ProcessId process) { local_->Kill(process); }
int64_t SlurmProcessHost::Pid(ProcessId process) const { return local_->Pid(process); }
std::string SlurmProcessHost::Name(ProcessId process) const {
  return "srun:" + local_->Name(process);
}

Result<int> SlurmProcessHost::Poll(std::chrono::milliseconds timeout, Listener& listener) {
  Adapter adapter(this, &listener);
  return local_->Poll(timeout, adapter);
}

Status SlurmProcessHost::CheckSharedStore(const std::string& store_dir,
                                          const std::string& log_path) {
  const std::string current = store_dir + "/CURRENT";
  COHORT_ASSIGN_OR_RETURN(std::string here, ReadFileToString(current));
  SpawnSpec probe;
  probe.argv = {"cat", current};
  probe.stderr_path = log_path;

  // A listener that keeps the probe's output and exit.
  struct Collect : Listener {
    std::string out;
    std::optional<ExitInfo> exit;
    void OnEvent(ProcessId, nlohmann::json) override {}
    void OnLog(ProcessId, std::string_view line) override { out.append(line).append("\n"); }
    void OnExit(ProcessId, const ExitInfo& info) override { exit = info; }
  } collect;
  // The smallest step the run's account and partition allow: the probe needs no GPU.
  SlurmOptions small = options_;
  small.gpus_per_member = 0;
  small.cpus_per_member = 1;
  small.mem.clear();
  SpawnSpec step = probe;
  std::string job_name = JobName("cohort-probe");
  step.argv = SrunArgv(small, job_name, in_allocation_, probe.argv);
  COHORT_ASSIGN_OR_RETURN(ProcessId id, local_->Start(step));
  steps_[id] = Step{.log_path = probe.stderr_path, .job_name = in_allocation_ ? "" : job_name};
  while (!collect.exit) {
    COHORT_ASSIGN_OR_RETURN(int interrupts, Poll(std::chrono::milliseconds(250), collect));
    if (interrupts > 0) {
      // Let the probe's job go before returning: nothing may be left queued on the cluster.
      Kill(id);
      for (int i = 0; i < 40 && local_->live() > 0; ++i) {
        (void)Poll(std::chrono::milliseconds(250), collect);
      }
      return Status::Aborted("interrupted while probing the cluster");
    }
  }
  if (collect.exit->reason == ExitReason::kExited && collect.exit->exit_code == 0 &&
      collect.out == here) {
    return Status::OK();
  }
  std::string what = collect.exit->reason == ExitReason::kExited && collect.exit->exit_code == 0
                         ? "it read other contents than this machine's"
                         : collect.exit->ToString();
  return Status::IOError(fmt::format(
      "slurm: a probe step could not read the run's store at {} ({}; log: {}); the run "
      "directory must be on a filesystem every node of the cluster mounts at the same path",
      store_dir, what, probe.stderr_path));
}

}  // namespace cohort::launch
