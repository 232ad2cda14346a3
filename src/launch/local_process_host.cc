#include "launch/local_process_host.h"

#include <utility>

namespace cohort::launch {

// Turns the set's callbacks on Subprocess objects into the host's on ProcessIds.
class LocalProcessHost::Adapter : public SubprocessSet::Handler {
 public:
  Adapter(LocalProcessHost* host, Listener* listener) : host_(host), listener_(listener) {}

  void OnEvent(Subprocess& child, nlohmann::json event) override {
    if (auto id = IdOf(child)) listener_->OnEvent(*id, std::move(event));
  }
  void OnLog(Subprocess& child, std::string_view line) override {
    if (auto id = IdOf(child)) listener_->OnLog(*id, line);
  }
  void OnStdoutClosed(Subprocess& child) override {
    if (auto id = IdOf(child)) listener_->OnStdoutClosed(*id);
  }
  void OnExit(Subprocess& child, const ExitInfo& info) override {
    auto id = IdOf(child);
    if (!id) return;
    host_->by_id_.erase(*id);
    host_->ids_.erase(&child);
    listener_->OnExit(*id, info);
  }

 private:
  std::optional<ProcessId> IdOf(const Subprocess& child) const {
    auto it = host_->ids_.find(&child);
    if (it == host_->ids_.end()) return std::nullopt;
    return it->second;
  }

  LocalProcessHost* host_;
  Listener* listener_;
};

Result<std::unique_ptr<LocalProcessHost>> LocalProcessHost::Create(
    std::chrono::milliseconds kill_grace) {
  SubprocessSet::Options options;
  options.kill_grace = kill_grace;
  COHORT_ASSIGN_OR_RETURN(auto set, SubprocessSet::Create(options));
  return std::unique_ptr<LocalProcessHost>(new LocalProcessHost(std::move(set)));
}

Subprocess* LocalProcessHost::Find(ProcessId process) const {
  auto it = by_id_.find(process);
  return it == by_id_.end() ? nullptr : it->second;
}

Result<ProcessId> LocalProcessHost::Start(const SpawnSpec& spec) {
  COHORT_ASSIGN_OR_RETURN(Subprocess * child, set_->Spawn(spec));
  ProcessId id = next_id_++;
  by_id_[id] = child;
  ids_[child] = id;
  return id;
}

Status LocalProcessHost::Write(ProcessId process, std::string_view line) {
  Subprocess* child = Find(process);
  if (child == nullptr) return Status::IOError("write to a process that has ended");
  return child->Write(line);
}

void LocalProcessHost::CloseStdin(ProcessId process) {
  if (Subprocess* child = Find(process)) child->CloseStdin();
}

void LocalProcessHost::Terminate(ProcessId process) {
  if (Subprocess* child = Find(process)) (void)child->Terminate();
}

void LocalProcessHost::Kill(ProcessId process) {
  if (Subprocess* child = Find(process)) (void)child->Kill();
}

void LocalProcessHost::SetHeartbeatTimeout(ProcessId process, std::chrono::milliseconds timeout) {
  if (Subprocess* child = Find(process)) child->set_heartbeat_timeout(timeout);
}

int64_t LocalProcessHost::Pid(ProcessId process) const {
  Subprocess* child = Find(process);
  return child == nullptr ? 0 : child->pid();
}

std::string LocalProcessHost::Name(ProcessId process) const {
  Subprocess* child = Find(process);
  return child == nullptr ? "process#" + std::to_string(process) : child->name();
}

Result<int> LocalProcessHost::Poll(std::chrono::milliseconds timeout, Listener& listener) {
  Adapter adapter(this, &listener);
  COHORT_ASSIGN_OR_RETURN(auto polled, set_->Poll(timeout, adapter));
  return polled.interrupts;
}

}  // namespace cohort::launch
