#include "launch/testing/fake_process_host.h"

#include <csignal>
#include <utility>

namespace cohort::launch {

void FakeProcessHost::Program::OnStdinClosed(Process& process) { process.Exit(0); }
void FakeProcessHost::Program::OnTerminate(Process& process) { process.Crash(SIGTERM); }

// ---- Process

void FakeProcessHost::Process::Event(nlohmann::json event, Duration delay) {
  if (ending_ || !stdout_open_) return;
  host_->Schedule(id_, delay, [this, event = std::move(event)](Listener& listener) {
    if (!stdout_open_) return;
    last_output_ = host_->now_;
    listener.OnEvent(id_, event);
  });
}

void FakeProcessHost::Process::Log(std::string line, Duration delay) {
  if (ending_ || !stdout_open_) return;
  host_->Schedule(id_, delay, [this, line = std::move(line)](Listener& listener) {
    if (!stdout_open_) return;
    last_output_ = host_->now_;
    listener.OnLog(id_, line);
  });
}

void FakeProcessHost::Process::Exit(int code, Duration delay) {
  if (ending_) return;
  ExitInfo info;
  info.reason = ExitReason::kExited;
  info.exit_code = code;
  host_->End(*this, info, delay);
}

void FakeProcessHost::Process::Crash(int signal, Duration delay) {
  if (ending_) return;
  ExitInfo info;
  info.reason = ExitReason::kSignalled;
  info.signal = signal;
  host_->End(*this, info, delay);
}

void FakeProcessHost::Process::CloseStdout(Duration delay) {
  After(delay, [this] {
    stdout_open_ = false;
    // Reported like the local host does: only when it still runs a while later.
    host_->Schedule(id_, Duration(1000), [this](Listener& listener) {
      if (!ending_) listener.OnStdoutClosed(id_);
    });
  });
}

void FakeProcessHost::Process::After(Duration delay, std::function<void()> action) {
  if (ending_) return;
  host_->Schedule(id_, delay, [this, action = std::move(action)](Listener&) {
    if (!ending_) action();
  });
}

// ---- the host

FakeProcessHost::FakeProcessHost(Factory factory, Duration kill_grace)
    : factory_(std::move(factory)), kill_grace_(kill_grace) {
  // Any fixed origin will do; a day in, so no duration computed from it is negative.
  start_ = now_ = Clock::time_point(std::chrono::hours(24));
}

FakeProcessHost::~FakeProcessHost() = default;

void FakeProcessHost::InterruptAt(Duration at) {
  actions_.emplace(std::make_pair(start_ + at, sequence_++),
                   Action{0, [this](Listener&) { ++pending_interrupts_; }});
}

FakeProcessHost::Duration FakeProcessHost::elapsed() const {
  return std::chrono::duration_cast<Duration>(now_ - start_);
}

FakeProcessHost::Process* FakeProcessHost::Find(ProcessId process) {
  auto it = processes_.find(process);
  return it == processes_.end() ? nullptr : it->second.get();
}

void FakeProcessHost::Schedule(ProcessId process, Duration delay,
                               std::function<void(Listener&)> run) {
  actions_.emplace(std::make_pair(now_ + delay, sequence_++), Action{process, std::move(run)});
}

void FakeProcessHost::End(Process& p, ExitInfo info, Duration delay) {
  Clock::time_point at = now_ + delay;
  // Nothing it scheduled for later than its end happens.
  for (auto it = actions_.begin(); it != actions_.end();) {
    bool drop = it->second.process == p.id_ && it->first.first > at;
    it = drop ? actions_.erase(it) : std::next(it);
  }
  p.ending_ = true;
  ProcessId id = p.id_;
  Schedule(id, delay, [this, id, info](Listener& listener) mutable {
    auto it = processes_.find(id);
    if (it == processes_.end()) return;  // a second end scheduled for the same moment
    std::unique_ptr<Process> gone = std::move(it->second);
    processes_.erase(it);
    for (auto a = actions_.begin(); a != actions_.end();) {
      a = a->second.process == id ? actions_.erase(a) : std::next(a);
    }
    if (gone->terminating_) {
      info.reason = *gone->terminating_;
      if (info.reason == ExitReason::kKilledForHeartbeat) {
        info.limit = gone->spec_.heartbeat_timeout;
      } else if (info.reason == ExitReason::kKilledForWallClock) {
        info.limit = gone->spec_.wall_clock_limit;
      }
      info.exit_code = -1;
    }
    info.run_time = now_ - gone->started_;
    listener.OnExit(id, info);
  });
}

Result<ProcessId> FakeProcessHost::Start(const SpawnSpec& spec) {
  started_.push_back(spec);
  std::unique_ptr<Program> program = factory_(spec);
  if (!program) {
    return Status::NotFound("cannot run " + (spec.argv.empty() ? std::string("''") : spec.argv[0]) +
                            ": no such program");
  }
  auto p = std::make_unique<Process>();
  p->host_ = this;
  p->id_ = next_id_++;
  p->pid_ = next_pid_++;
  p->spec_ = spec;
  p->program_ = std::move(program);
  p->started_ = p->last_output_ = now_;
  Process& ref = *p;
  processes_[ref.id_] = std::move(p);
  ref.program_->OnStart(ref);
  return ref.id_;
}

Status FakeProcessHost::Write(ProcessId process, std::string_view line) {
  Process* p = Find(process);
  if (p == nullptr || !p->stdin_open_ || p->ending_) {
    return Status::IOError("write to a process whose stdin is closed");
  }
  std::string text(line);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  p->program_->OnLine(*p, text);
  return Status::OK();
}

void FakeProcessHost::CloseStdin(ProcessId process) {
  Process* p = Find(process);
  if (p == nullptr || !p->stdin_open_) return;
  p->stdin_open_ = false;
  if (!p->ending_) p->program_->OnStdinClosed(*p);
}

void FakeProcessHost::Terminate(ProcessId process) {
  Process* p = Find(process);
  if (p == nullptr || p->ending_ || p->terminating_) return;
  p->terminating_ = ExitReason::kKilledByRequest;
  p->kill_at_ = now_ + kill_grace_;
  p->program_->OnTerminate(*p);
}

void FakeProcessHost::Kill(ProcessId process) {
  Process* p = Find(process);
  if (p == nullptr) return;
  if (!p->terminating_) p->terminating_ = ExitReason::kKilledByRequest;
  ExitInfo info;
  info.reason = ExitReason::kSignalled;
  info.signal = SIGKILL;
  p->ending_ = false;  // a kill overrides an exit still to come
  End(*p, info);
}

int64_t FakeProcessHost::Pid(ProcessId process) const {
  auto it = processes_.find(process);
  return it == processes_.end() ? 0 : it->second->pid_;
}

std::string FakeProcessHost::Name(ProcessId process) const {
  auto it = processes_.find(process);
  if (it == processes_.end()) return "process#" + std::to_string(process);
  const auto& argv = it->second->spec_.argv;
  return (argv.empty() ? std::string("?") : argv[0]) + "[" + std::to_string(it->second->pid_) + "]";
}

Clock::time_point FakeProcessHost::NextDeadline(const Process& p) const {
  if (p.ending_) return Clock::time_point::max();
  if (p.terminating_) return p.kill_at_;
  Clock::time_point next = Clock::time_point::max();
  if (p.spec_.heartbeat_timeout.count() > 0) {
    next = std::min(next, p.last_output_ + p.spec_.heartbeat_timeout);
  }
  if (p.spec_.wall_clock_limit.count() > 0) {
    next = std::min(next, p.started_ + p.spec_.wall_clock_limit);
  }
  return next;
}

void FakeProcessHost::EnforceDeadlines() {
  std::vector<Process*> due;
  for (auto& [id, p] : processes_) {
    if (NextDeadline(*p) <= now_) due.push_back(p.get());
  }
  for (Process* p : due) {
    if (p->terminating_) {
      ExitInfo info;
      info.reason = ExitReason::kSignalled;
      info.signal = SIGKILL;
      End(*p, info);
      continue;
    }
    bool heartbeat = p->spec_.heartbeat_timeout.count() > 0 &&
                     p->last_output_ + p->spec_.heartbeat_timeout <= now_;
    p->terminating_ = heartbeat ? ExitReason::kKilledForHeartbeat : ExitReason::kKilledForWallClock;
    p->kill_at_ = now_ + kill_grace_;
    p->program_->OnTerminate(*p);
  }
}

Result<int> FakeProcessHost::Poll(std::chrono::milliseconds timeout, Listener& listener) {
  const bool forever = timeout.count() < 0;
  const Clock::time_point limit = forever ? Clock::time_point::max() : now_ + timeout;
  Clock::time_point next =
      actions_.empty() ? Clock::time_point::max() : actions_.begin()->first.first;
  for (const auto& [id, p] : processes_) next = std::min(next, NextDeadline(*p));
  if (next == Clock::time_point::max() && forever) {
    return Status::Aborted("fake process host: a poll without a limit, and nothing can happen");
  }
  if (next > limit) {
    now_ = limit;
    return 0;
  }
  now_ = std::max(now_, next);
  EnforceDeadlines();
  // Everything due now, including what it schedules for now; the bound catches a program that
  // keeps scheduling itself at no delay.
  for (int guard = 0; guard < 1000000; ++guard) {
    if (actions_.empty() || actions_.begin()->first.first > now_) break;
    auto node = actions_.extract(actions_.begin());
    node.mapped().run(listener);
  }
  int interrupts = pending_interrupts_;
  pending_interrupts_ = 0;
  return interrupts;
}

}  // namespace cohort::launch
