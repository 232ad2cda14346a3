// Subprocess and SubprocessSet on POSIX: posix_spawn, pipes, process groups, one ppoll loop.
// The shape follows ninja's subprocess-posix.cc.
#include "launch/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/json_text.h"
#include "common/worker_protocol.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX declares it nowhere

namespace cohort::launch {

namespace {

// Event lines start with the worker protocol's prefix; the set only frames them.
using protocol::kEventPrefix;

// At most this many bytes are read from one child per Poll(), so a chatty child cannot starve
// the others.
constexpr size_t kReadBudgetPerPoll = size_t{1} << 20;

// The signal handler's view of the (single) set: where to write a wake-up byte, and a count of
// SIGINT/SIGTERM. Lock-free atomics are safe to use from a handler.
std::atomic<int> g_wake_fd{-1};
std::atomic<int> g_interrupts{0};
std::atomic<bool> g_set_exists{false};

extern "C" void HandleSignal(int sig) {
  int saved_errno = errno;
  if (sig == SIGINT || sig == SIGTERM) g_interrupts.fetch_add(1, std::memory_order_relaxed);
  int fd = g_wake_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    char byte = 0;
    [[maybe_unused]] ssize_t ignored = ::write(fd, &byte, 1);  // full pipe: already awake
  }
  errno = saved_errno;
}

// Moves a close-on-exec descriptor above 2, so that a file action dup2(fd, 0..2) never meets
// fd == target (which would leave the close-on-exec flag set in the child).
Status MoveAboveStdio(ScopedFd* fd) {
  if (fd->get() > 2) return Status::OK();
  int moved = ::fcntl(fd->get(), F_DUPFD_CLOEXEC, 3);
  if (moved < 0) return Status::FromErrno("fcntl(F_DUPFD_CLOEXEC)", errno);
  fd->reset(moved);
  return Status::OK();
}

Status SetNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return Status::FromErrno("fcntl(O_NONBLOCK)", errno);
  }
  return Status::OK();
}

std::string Seconds(Clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}

std::string SignalText(int sig) {
  const char* name = ::strsignal(sig);
  return "signal " + std::to_string(sig) + (name != nullptr ? std::string(" (") + name + ")" : "");
}

// ---------------------------------------------------------------------------------------------
// The steps of SubprocessSet::Spawn, in its order.

// The spec's own mistakes, found before anything is created: a bad environment variable name,
// a working directory that is missing or not a directory.
Status CheckSpawnSpec(const SpawnSpec& spec, const std::string& what) {
  for (const auto& [name, value] : spec.env) {
    if (name.empty() || name.find('=') != std::string::npos) {
      return Status::InvalidArgument(what + ": bad environment variable name \"" + name + "\"");
    }
  }
  if (!spec.cwd.empty()) {
    struct stat st;
    if (::stat(spec.cwd.c_str(), &st) != 0) {
      return Status::FromErrno(what + ": working directory " + spec.cwd, errno);
    }
    if (!S_ISDIR(st.st_mode)) {
      return Status::InvalidArgument(what + ": working directory " + spec.cwd +
                                     " is not a directory");
    }
  }
  return Status::OK();
}

// The PATH the child searches: the one `spec.env` sets, else the controller's.
std::string ChildSearchPath(const SpawnSpec& spec) {
  std::string path_list = "/bin:/usr/bin";  // the C library's default when PATH is unset
  if (const char* path = std::getenv("PATH"); path != nullptr) path_list = path;
  for (const auto& [name, value] : spec.env) {
    if (name == "PATH") path_list = value;
  }
  return path_list;
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// The path to hand posix_spawn for `program`, checked here in the parent so that a missing or
// non-executable program is an error from Spawn() rather than a child that exits 127: the
// program itself when it contains '/', else the first executable file of that name in the
// directories of `path_list` (an empty entry is the working directory). A relative result is
// resolved in the child after it changes to `cwd`, so it is checked relative to `cwd` too.
Result<std::string> ResolveProgram(const std::string& program, const std::string& cwd,
                                   std::string_view path_list, const std::string& what) {
  auto as_seen_by_child = [&](const std::string& path) {
    return (path.front() == '/' || cwd.empty()) ? path : cwd + "/" + path;
  };
  if (program.find('/') != std::string::npos) {
    std::string check = as_seen_by_child(program);
    if (::access(check.c_str(), X_OK) != 0) return Status::FromErrno(what, errno);
    if (!IsExecutableFile(check)) return Status::InvalidArgument(what + ": not an executable file");
    return program;
  }
  while (true) {
    size_t colon = path_list.find(':');
    std::string dir(path_list.substr(0, colon));
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (IsExecutableFile(as_seen_by_child(candidate))) return candidate;
    if (colon == std::string_view::npos) break;
    path_list = path_list.substr(colon + 1);
  }
  return Status::NotFound(what + ": no executable \"" + program + "\" on PATH");
}

// The descriptors a child starts with. All are close-on-exec and above 2; the file actions
// dup2 the child's ends onto its 0, 1 and 2, which clears the flag on those copies only. Our
// ends are non-blocking, for the ppoll loop.
struct ChildPipes {
  ScopedFd stdin_read;    // the child's stdin
  ScopedFd stdin_write;   // ours: commands go in here
  ScopedFd stdout_read;   // ours: events and log lines come out here
  ScopedFd stdout_write;  // the child's stdout
  ScopedFd stderr_file;   // the child's stderr, when it goes to a file

  // Once the child runs it holds its own copies; ours would keep its stdin from ever seeing
  // end of file and our stdout reader from ever seeing it.
  void CloseChildEnds() {
    stdin_read.reset();
    stdout_write.reset();
    stderr_file.reset();
  }
};

Result<ChildPipes> OpenChildPipes(const std::string& stderr_path, const std::string& what) {
  ChildPipes pipes;
  int stdin_pipe[2];
  int stdout_pipe[2];
  if (::pipe2(stdin_pipe, O_CLOEXEC) != 0) return Status::FromErrno(what + ": pipe2", errno);
  pipes.stdin_read.reset(stdin_pipe[0]);
  pipes.stdin_write.reset(stdin_pipe[1]);
  if (::pipe2(stdout_pipe, O_CLOEXEC) != 0) return Status::FromErrno(what + ": pipe2", errno);
  pipes.stdout_read.reset(stdout_pipe[0]);
  pipes.stdout_write.reset(stdout_pipe[1]);
  if (!stderr_path.empty()) {
    pipes.stderr_file.reset(
        ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!pipes.stderr_file.valid()) {
      return Status::FromErrno(what + ": stderr file " + stderr_path, errno);
    }
  }
  for (ScopedFd* fd : {&pipes.stdin_read, &pipes.stdin_write, &pipes.stdout_read,
                       &pipes.stdout_write, &pipes.stderr_file}) {
    if (!fd->valid()) continue;
    if (Status s = MoveAboveStdio(fd); !s.ok()) return s.WithContext(what);
  }
  if (Status s = SetNonBlocking(pipes.stdin_write.get()); !s.ok()) return s.WithContext(what);
  if (Status s = SetNonBlocking(pipes.stdout_read.get()); !s.ok()) return s.WithContext(what);
  return pipes;
}

// posix_spawn's attributes and file actions, destroyed on every path out of Spawn().
struct SpawnAttributes {
  posix_spawnattr_t attr;
  posix_spawn_file_actions_t actions;
  bool attr_ok = false;
  bool actions_ok = false;
  SpawnAttributes() = default;
  SpawnAttributes(const SpawnAttributes&) = delete;
  SpawnAttributes& operator=(const SpawnAttributes&) = delete;
  ~SpawnAttributes() {
    if (attr_ok) posix_spawnattr_destroy(&attr);
    if (actions_ok) posix_spawn_file_actions_destroy(&actions);
  }

  // A process group of its own, an empty signal mask and default dispositions for the signals
  // the set handles, the pipes on 0, 1 (and 2), the working directory `cwd`, and no other
  // descriptor. Returns 0 or an errno value.
  int Init(const ChildPipes& pipes, const std::string& cwd) {
    int err = posix_spawnattr_init(&attr);
    attr_ok = err == 0;
    if (err != 0) return err;
    err = posix_spawn_file_actions_init(&actions);
    actions_ok = err == 0;
    if (err != 0) return err;
    sigset_t empty;
    sigemptyset(&empty);
    sigset_t defaults;
    sigemptyset(&defaults);
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGCHLD}) sigaddset(&defaults, sig);
    short flags =  // NOLINT(google-runtime-int): posix_spawnattr_setflags takes a short
        POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
    if ((err = posix_spawnattr_setflags(&attr, flags)) == 0 &&
        (err = posix_spawnattr_setpgroup(&attr, 0)) == 0 &&
        (err = posix_spawnattr_setsigmask(&attr, &empty)) == 0 &&
        (err = posix_spawnattr_setsigdefault(&attr, &defaults)) == 0 &&
        (err = posix_spawn_file_actions_adddup2(&actions, pipes.stdin_read.get(), 0)) == 0 &&
        (err = posix_spawn_file_actions_adddup2(&actions, pipes.stdout_write.get(), 1)) == 0 &&
        pipes.stderr_file.valid()) {
      err = posix_spawn_file_actions_adddup2(&actions, pipes.stderr_file.get(), 2);
    }
    if (err == 0 && !cwd.empty()) {
      err = posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
    }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    // Our descriptors are close-on-exec already; this also keeps out any that a library (or
    // whoever started the controller) left inheritable, such as a driver's device files.
    if (err == 0) err = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
    return err;
  }
};

// The environment for a child: the parent's, with `overrides` set on top.
std::vector<std::string> BuildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    std::string_view name = text.substr(0, text.find('='));
    bool overridden = std::any_of(overrides.begin(), overrides.end(),
                                  [&](const auto& kv) { return kv.first == name; });
    if (!overridden) env.emplace_back(text);
  }
  for (const auto& [name, value] : overrides) env.push_back(name + "=" + value);
  return env;
}

// The null-terminated array of pointers into `strings` that posix_spawn takes for argv and
// envp; valid while `strings` lives unchanged.
std::vector<char*> CStringArray(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

constexpr char kPrlimit[] = "/usr/bin/prlimit";

// Starts `executable` with `spec`'s argv and environment (under its memory limit); the
// child's pid.
Result<pid_t> StartChild(const std::string& executable, const SpawnSpec& spec,
                         const SpawnAttributes& sa, const std::string& what) {
  std::vector<std::string> env = BuildEnvironment(spec.env);
  std::vector<std::string> args = spec.argv;
  std::string program = executable;
  if (spec.memory_limit_bytes > 0) {
    // posix_spawn cannot set a resource limit, and one set after the spawn would race with
    // the child's first allocations: util-linux's prlimit sets it on itself, then execs.
    program = kPrlimit;
    if (::access(kPrlimit, X_OK) != 0) {
      return Status::NotFound(what + ": a memory limit needs " + kPrlimit + " (util-linux)");
    }
    args = {"prlimit", "--as=" + std::to_string(spec.memory_limit_bytes), "--", executable};
    args.insert(args.end(), spec.argv.begin() + 1, spec.argv.end());
  }
  std::vector<char*> envp = CStringArray(env);
  std::vector<char*> argv = CStringArray(args);
  pid_t pid = -1;
  // glibc runs the child with CLONE_VFORK and reports a failed exec here too (a race with the
  // check in ResolveProgram, or a bad interpreter line); other implementations may let it
  // exit 127.
  int err = posix_spawn(&pid, program.c_str(), &sa.actions, &sa.attr, argv.data(), envp.data());
  if (err != 0) return Status::FromErrno(what, err);
  return pid;
}

// "cohort-member[4242]": the program's file name and the pid, for messages.
std::string ChildName(const std::string& program, pid_t pid) {
  size_t slash = program.rfind('/');
  return (slash == std::string::npos ? program : program.substr(slash + 1)) + "[" +
         std::to_string(pid) + "]";
}

}  // namespace

const char* ExitReasonName(ExitReason reason) {
  switch (reason) {
    case ExitReason::kExited:
      return "exited";
    case ExitReason::kSignalled:
      return "signalled";
    case ExitReason::kKilledForHeartbeat:
      return "killed_for_heartbeat";
    case ExitReason::kKilledForWallClock:
      return "killed_for_wall_clock";
    case ExitReason::kKilledByRequest:
      return "killed_by_request";
  }
  return "unknown";
}

std::string ExitInfo::ToString() const {
  std::string how = signal != 0      ? "killed by " + SignalText(signal)
                    : exit_code >= 0 ? "exited with status " + std::to_string(exit_code)
                                     : "exit status unknown";
  std::string text;
  switch (reason) {
    case ExitReason::kExited:
    case ExitReason::kSignalled:
      text = how;
      break;
    case ExitReason::kKilledForHeartbeat:
      text = "killed: no output for " + Seconds(limit) + " (heartbeat timeout), then " + how;
      break;
    case ExitReason::kKilledForWallClock:
      text = "killed: ran past its wall-clock limit of " + Seconds(limit) + ", then " + how;
      break;
    case ExitReason::kKilledByRequest:
      text = "killed on request, then " + how;
      break;
  }
  if (output_cut) text += "; its stdout was still open and was cut";
  if (!detail.empty()) text += ": " + detail;
  return text;
}

// ---------------------------------------------------------------------------------------------
// Subprocess

Subprocess::Subprocess(SubprocessSet* set, pid_t pid, std::string name, ScopedFd stdin_fd,
                       ScopedFd stdout_fd)
    : set_(set),
      pid_(pid),
      name_(std::move(name)),
      stdin_fd_(std::move(stdin_fd)),
      stdout_fd_(std::move(stdout_fd)) {
  start_time_ = Clock::now();
  last_output_time_ = start_time_;
}

Subprocess::~Subprocess() = default;

Status Subprocess::Write(std::string_view line) {
  if (!stdin_fd_.valid() || close_stdin_after_flush_) {
    return Status::IOError(name_ + ": write to stdin: stdin is closed");
  }
  bool needs_newline = line.empty() || line.back() != '\n';
  size_t adding = line.size() + (needs_newline ? 1 : 0);
  if (pending_input() + adding > set_->options().max_pending_input) {
    return Status::Busy(name_ + ": not reading its stdin (" + std::to_string(pending_input()) +
                        " bytes waiting)");
  }
  if (pending_offset_ == pending_input_.size()) {
    pending_input_.clear();
    pending_offset_ = 0;
  }
  pending_input_.append(line);
  if (needs_newline) pending_input_.push_back('\n');
  return FlushInput();
}

Status Subprocess::FlushInput() {
  while (stdin_fd_.valid() && pending_input() > 0) {
    ssize_t n = ::write(stdin_fd_.get(), pending_input_.data() + pending_offset_, pending_input());
    if (n > 0) {
      pending_offset_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    int err = n < 0 ? errno : EIO;
    CloseStdinNow();
    return Status::FromErrno(name_ + ": write to stdin", err);
  }
  if (pending_input() == 0) {
    pending_input_.clear();
    pending_offset_ = 0;
    if (close_stdin_after_flush_) CloseStdinNow();
  } else if (pending_offset_ > (size_t{1} << 16) && pending_offset_ * 2 > pending_input_.size()) {
    pending_input_.erase(0, pending_offset_);
    pending_offset_ = 0;
  }
  return Status::OK();
}

void Subprocess::CloseStdin() {
  close_stdin_after_flush_ = true;
  if (pending_input() == 0) CloseStdinNow();
}

void Subprocess::CloseStdinNow() {
  stdin_fd_.reset();
  pending_input_.clear();
  pending_offset_ = 0;
}

void Subprocess::CloseStdout() { stdout_fd_.reset(); }

Status Subprocess::SignalGroup(int sig) {
  if (reaped_) return Status::OK();  // its pid may belong to someone else now
  if (::kill(-pid_, sig) != 0 && errno != ESRCH) {
    return Status::FromErrno(name_ + ": kill(" + std::to_string(sig) + ")", errno);
  }
  return Status::OK();
}

void Subprocess::BeginTermination(ExitReason reason, Clock::time_point now) {
  if (terminating_ || exit_seen_) return;
  terminating_ = true;
  kill_reason_ = reason;
  term_time_ = now;
  (void)SignalGroup(SIGTERM);  // a failure shows as the SIGKILL deadline passing
}

Status Subprocess::Terminate() {
  ObserveExit();  // one that has already exited is not "killed on request"
  if (exit_seen_ || terminating_) return Status::OK();
  terminating_ = true;
  kill_reason_ = ExitReason::kKilledByRequest;
  term_time_ = Clock::now();
  return SignalGroup(SIGTERM);
}

Status Subprocess::Kill() {
  ObserveExit();
  Clock::time_point now = Clock::now();
  if (!exit_seen_ && !terminating_) {
    terminating_ = true;
    kill_reason_ = ExitReason::kKilledByRequest;
    term_time_ = now;
  }
  kill_sent_ = true;
  kill_time_ = now;
  return SignalGroup(SIGKILL);
}

// ---------------------------------------------------------------------------------------------
// SubprocessSet

struct SubprocessSet::SavedSignals {
  sigset_t old_mask;
  sigset_t poll_mask;  // the old mask without SIGCHLD/SIGINT/SIGTERM: what ppoll waits with
  struct sigaction old_chld, old_int, old_term, old_pipe;
  bool mask_set = false;
  bool handlers_set = false;
};

Result<std::unique_ptr<SubprocessSet>> SubprocessSet::Create(Options options) {
  if (g_set_exists.exchange(true)) {
    return Status::Busy("a SubprocessSet already exists in this process (one is allowed)");
  }
  std::unique_ptr<SubprocessSet> set(new SubprocessSet(std::move(options)));
  set->initialized_ = true;  // the destructor now releases g_set_exists
  COHORT_RETURN_IF_ERROR(set->Init());
  return set;
}

SubprocessSet::SubprocessSet(Options options)
    : options_(std::move(options)), saved_(std::make_unique<SavedSignals>()) {}

Status SubprocessSet::Init() {
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) return Status::FromErrno("pipe2", errno);
  wake_read_fd_.reset(wake[0]);
  wake_write_fd_.reset(wake[1]);
  g_wake_fd.store(wake_write_fd_.get());

  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGCHLD);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  if (int err = pthread_sigmask(SIG_BLOCK, &block, &saved_->old_mask); err != 0) {
    return Status::FromErrno("pthread_sigmask", err);
  }
  saved_->mask_set = true;
  saved_->poll_mask = saved_->old_mask;
  sigdelset(&saved_->poll_mask, SIGCHLD);
  sigdelset(&saved_->poll_mask, SIGINT);
  sigdelset(&saved_->poll_mask, SIGTERM);

  struct sigaction action = {};
  action.sa_handler = HandleSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  struct sigaction chld_action = action;
  chld_action.sa_flags |= SA_NOCLDSTOP;
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  if (::sigaction(SIGCHLD, &chld_action, &saved_->old_chld) != 0 ||
      ::sigaction(SIGINT, &action, &saved_->old_int) != 0 ||
      ::sigaction(SIGTERM, &action, &saved_->old_term) != 0 ||
      ::sigaction(SIGPIPE, &ignore, &saved_->old_pipe) != 0) {
    return Status::FromErrno("sigaction", errno);
  }
  saved_->handlers_set = true;
  interrupts_seen_ = g_interrupts.load();
  return Status::OK();
}

SubprocessSet::~SubprocessSet() {
  for (auto& child : children_) {
    if (child->reaped_) continue;
    (void)child->SignalGroup(SIGKILL);
    int status = 0;
    while (::waitpid(child->pid_, &status, 0) < 0 && errno == EINTR) {
    }
    child->reaped_ = true;
  }
  children_.clear();
  // The old handlers come back before the old mask, so a signal still pending (a Ctrl-C
  // after the last Poll) reaches the disposition the process had, instead of being counted by
  // a handler nobody reads any more.
  g_wake_fd.store(-1);
  if (saved_->handlers_set) {
    ::sigaction(SIGCHLD, &saved_->old_chld, nullptr);
    ::sigaction(SIGINT, &saved_->old_int, nullptr);
    ::sigaction(SIGTERM, &saved_->old_term, nullptr);
    ::sigaction(SIGPIPE, &saved_->old_pipe, nullptr);
  }
  if (saved_->mask_set) pthread_sigmask(SIG_SETMASK, &saved_->old_mask, nullptr);
  wake_read_fd_.reset();
  wake_write_fd_.reset();
  if (initialized_) g_set_exists.store(false);
}

int SubprocessSet::total_interrupts() const { return g_interrupts.load(); }

Result<Subprocess*> SubprocessSet::Spawn(const SpawnSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return Status::InvalidArgument("spawn: empty argv (no program named)");
  }
  const std::string& program = spec.argv[0];
  const std::string what = "spawn " + program;
  COHORT_RETURN_IF_ERROR(CheckSpawnSpec(spec, what));
  COHORT_ASSIGN_OR_RETURN(std::string executable,
                          ResolveProgram(program, spec.cwd, ChildSearchPath(spec), what));
  COHORT_ASSIGN_OR_RETURN(ChildPipes pipes, OpenChildPipes(spec.stderr_path, what));
  SpawnAttributes sa;
  if (int err = sa.Init(pipes, spec.cwd); err != 0) {
    return Status::FromErrno(what + ": posix_spawn setup", err);
  }
  COHORT_ASSIGN_OR_RETURN(pid_t pid, StartChild(executable, spec, sa, what));
  pipes.CloseChildEnds();

  std::unique_ptr<Subprocess> child(new Subprocess(this, pid, ChildName(program, pid),
                                                   std::move(pipes.stdin_write),
                                                   std::move(pipes.stdout_read)));
  child->heartbeat_timeout_ = spec.heartbeat_timeout;
  child->wall_clock_limit_ = spec.wall_clock_limit;
  children_.push_back(std::move(child));
  return children_.back().get();
}

std::optional<nlohmann::json> ParseEventLine(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (!line.starts_with(kEventPrefix)) return std::nullopt;
  line.remove_prefix(kEventPrefix.size());
  // Bounded: a child's output is untrusted, and a value nested thousands deep would overflow
  // the stack of whoever copies or prints it later. Such a line is log.
  if (JsonTextNestsDeeperThan(line, kMaxJsonDepth)) return std::nullopt;
  nlohmann::json event = nlohmann::json::parse(line.begin(), line.end(), /*cb=*/nullptr,
                                               /*allow_exceptions=*/false);
  if (!event.is_object()) return std::nullopt;
  return event;
}

void SubprocessSet::DeliverLine(Subprocess& child, Handler& handler) {
  std::string& line = child.partial_line_;
  child.last_output_time_ = Clock::now();
  if (child.dropped_bytes_ > 0) {
    size_t total = line.size() + child.dropped_bytes_;
    line += " [cohort: line cut at " + std::to_string(options_.max_line_bytes) + " of " +
            std::to_string(total) + " bytes]";
    child.dropped_bytes_ = 0;
    handler.OnLog(child, line);
    line.clear();
    return;
  }
  if (std::optional<nlohmann::json> event = ParseEventLine(line)) {
    line.clear();
    handler.OnEvent(child, std::move(*event));
    return;
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (std::string_view(line).starts_with(kEventPrefix) &&
      JsonTextNestsDeeperThan(std::string_view(line).substr(kEventPrefix.size()), kMaxJsonDepth)) {
    line += " [cohort: not an event: JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
            " levels]";
  }
  // Moved out first: the handler may cause more output to be appended (it cannot today, but
  // the buffer must not be aliased while a callback runs).
  std::string text = std::move(line);
  line.clear();
  handler.OnLog(child, text);
}

void SubprocessSet::AddOutput(Subprocess& child, const char* data, size_t size, Handler& handler) {
  while (size > 0) {
    const char* newline = static_cast<const char*>(std::memchr(data, '\n', size));
    size_t chunk = newline != nullptr ? static_cast<size_t>(newline - data) : size;
    size_t room = options_.max_line_bytes > child.partial_line_.size()
                      ? options_.max_line_bytes - child.partial_line_.size()
                      : 0;
    size_t take = std::min(chunk, room);
    child.partial_line_.append(data, take);
    child.dropped_bytes_ += chunk - take;
    if (newline == nullptr) return;
    DeliverLine(child, handler);
    data += chunk + 1;
    size -= chunk + 1;
  }
}

void SubprocessSet::ReadOutput(Subprocess& child, Handler& handler) {
  char buffer[65536];
  size_t budget = kReadBudgetPerPoll;
  while (child.stdout_fd_.valid() && budget > 0) {
    ssize_t n = ::read(child.stdout_fd_.get(), buffer, sizeof(buffer));
    if (n > 0) {
      AddOutput(child, buffer, static_cast<size_t>(n), handler);
      budget -= std::min(budget, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // End of file (or a read error, which ends the stream the same way). A last line without
    // its newline is still a line.
    if (!child.partial_line_.empty() || child.dropped_bytes_ > 0) DeliverLine(child, handler);
    child.CloseStdout();
    child.stdout_eof_time_ = Clock::now();
  }
}

void Subprocess::ObserveExit() {
  Subprocess& child = *this;
  if (child.exit_seen_) return;
  // WNOWAIT leaves the zombie in place: its pid (and so its process group id) cannot be reused
  // until Reap(), so signals to the group stay safe until then.
  siginfo_t info;
  std::memset(&info, 0, sizeof(info));
  int rc;
  do {
    rc = ::waitid(P_PID, static_cast<id_t>(child.pid_), &info, WEXITED | WNOHANG | WNOWAIT);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) {
    // ECHILD: someone else in this process reaped it (waitpid(-1), SIGCHLD ignored). Its
    // status is lost; it is certainly gone.
    child.exit_seen_ = true;
    child.reaped_ = true;
    child.state_ = Subprocess::State::kExited;
    child.exit_time_ = Clock::now();
    return;
  }
  if (info.si_pid != child.pid_) return;  // still running
  child.exit_seen_ = true;
  child.exit_time_ = Clock::now();
  if (info.si_code == CLD_EXITED) {
    child.state_ = Subprocess::State::kExited;
    child.exit_code_ = info.si_status;
  } else {
    child.state_ = Subprocess::State::kSignalled;
    child.term_signal_ = info.si_status;
  }
}

void SubprocessSet::Reap(Subprocess& child) {
  if (child.reaped_) return;
  int status = 0;
  pid_t rc;
  do {
    rc = ::waitpid(child.pid_, &status, 0);  // a zombie already: does not block
  } while (rc < 0 && errno == EINTR);
  child.reaped_ = true;
  if (rc == child.pid_) {
    if (WIFEXITED(status)) {
      child.state_ = Subprocess::State::kExited;
      child.exit_code_ = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      child.state_ = Subprocess::State::kSignalled;
      child.term_signal_ = WTERMSIG(status);
    }
  }
}

Clock::time_point SubprocessSet::NextDeadline(const Subprocess& child) const {
  Clock::time_point next = Clock::time_point::max();
  auto consider = [&](Clock::time_point t) { next = std::min(next, t); };
  if (!child.exit_seen_) {
    if (!child.terminating_) {
      if (child.heartbeat_timeout_.count() > 0) {
        consider(child.last_output_time_ + child.heartbeat_timeout_);
      }
      if (child.wall_clock_limit_.count() > 0) {
        consider(child.start_time_ + child.wall_clock_limit_);
      }
    } else if (!child.kill_sent_) {
      consider(child.term_time_ + options_.kill_grace);
    }
    if (child.stdout_eof() && !child.stdout_closed_reported_) {
      consider(child.stdout_eof_time_ + options_.stdout_closed_grace);
    }
  } else if (!child.reaped_) {
    consider(child.stdout_eof() ? Clock::time_point::min()
                                : child.exit_time_ + options_.kill_grace);
  } else if (!child.stdout_eof()) {
    consider(child.force_close_time_);
  } else {
    consider(Clock::time_point::min());  // ready to report
  }
  return next;
}

void SubprocessSet::Advance(Subprocess& child, Clock::time_point now, Handler& handler) {
  child.ObserveExit();
  if (!child.exit_seen_) {
    if (!child.terminating_) {
      if (child.heartbeat_timeout_.count() > 0 &&
          now >= child.last_output_time_ + child.heartbeat_timeout_) {
        child.BeginTermination(ExitReason::kKilledForHeartbeat, now);
      } else if (child.wall_clock_limit_.count() > 0 &&
                 now >= child.start_time_ + child.wall_clock_limit_) {
        child.BeginTermination(ExitReason::kKilledForWallClock, now);
      }
    }
    if (child.terminating_ && !child.kill_sent_ && now >= child.term_time_ + options_.kill_grace) {
      child.kill_sent_ = true;
      child.kill_time_ = now;
      (void)child.SignalGroup(SIGKILL);
    }
    if (child.stdout_eof() && !child.stdout_closed_reported_ &&
        now >= child.stdout_eof_time_ + options_.stdout_closed_grace) {
      child.stdout_closed_reported_ = true;
      handler.OnStdoutClosed(child);
    }
    return;
  }
  if (!child.reaped_) {
    if (child.stdout_eof()) {
      if (options_.kill_group_on_exit) (void)child.SignalGroup(SIGKILL);
      Reap(child);
    } else if (now >= child.exit_time_ + options_.kill_grace) {
      // It exited, but something it started still holds its stdout: stop waiting for that.
      if (options_.kill_group_on_exit) {
        (void)child.SignalGroup(SIGKILL);
        Reap(child);
        child.force_close_time_ = now + options_.kill_grace;
      } else {
        Reap(child);
        child.force_close_time_ = now;
      }
    }
  }
  if (child.reaped_ && !child.stdout_eof() && now >= child.force_close_time_) {
    child.output_cut_ = true;
    if (!child.partial_line_.empty() || child.dropped_bytes_ > 0) DeliverLine(child, handler);
    child.CloseStdout();
  }
  if (child.reaped_ && child.stdout_eof() && !child.finished_) {
    child.CloseStdinNow();
    ExitInfo info;
    if (child.terminating_) {
      info.reason = child.kill_reason_;
    } else {
      info.reason = child.state_ == Subprocess::State::kSignalled ? ExitReason::kSignalled
                                                                  : ExitReason::kExited;
    }
    if (info.reason == ExitReason::kKilledForHeartbeat) info.limit = child.heartbeat_timeout_;
    if (info.reason == ExitReason::kKilledForWallClock) info.limit = child.wall_clock_limit_;
    info.exit_code = child.state_ == Subprocess::State::kExited ? child.exit_code_ : -1;
    info.signal = child.state_ == Subprocess::State::kSignalled ? child.term_signal_ : 0;
    info.output_cut = child.output_cut_;
    info.run_time = child.exit_time_ - child.start_time_;
    child.finished_ = true;
    handler.OnExit(child, info);
  }
}

Result<SubprocessSet::PollResult> SubprocessSet::Poll(std::chrono::milliseconds timeout,
                                                      Handler& handler) {
  Clock::time_point now = Clock::now();
  Clock::time_point wake_at = timeout.count() < 0 ? Clock::time_point::max() : now + timeout;
  std::vector<pollfd> fds;
  std::vector<Subprocess*> owners;  // the child of each fds[i], nullptr for the wake pipe
  fds.push_back({wake_read_fd_.get(), POLLIN, 0});
  owners.push_back(nullptr);
  for (auto& child : children_) {
    wake_at = std::min(wake_at, NextDeadline(*child));
    if (child->stdout_fd_.valid()) {
      fds.push_back({child->stdout_fd_.get(), POLLIN, 0});
      owners.push_back(child.get());
    }
    if (child->stdin_fd_.valid() && child->pending_input() > 0) {
      fds.push_back({child->stdin_fd_.get(), POLLOUT, 0});
      owners.push_back(child.get());
    }
  }
  timespec wait_for;
  timespec* wait = nullptr;
  if (wake_at != Clock::time_point::max()) {
    int64_t ns = 0;
    if (wake_at > now) {
      ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wake_at - now).count();
    }
    wait_for.tv_sec = static_cast<time_t>(ns / 1000000000);
    wait_for.tv_nsec = static_cast<long>(ns % 1000000000);
    wait = &wait_for;
  }
  // The only place where SIGCHLD/SIGINT/SIGTERM are unblocked: a signal that arrived since the
  // last call is pending and interrupts this at once, so none is missed.
  int ready = ::ppoll(fds.data(), fds.size(), wait, &saved_->poll_mask);
  if (ready < 0 && errno != EINTR) return Status::FromErrno("ppoll", errno);

  char drain[256];
  while (::read(wake_read_fd_.get(), drain, sizeof(drain)) > 0) {
  }

  if (ready > 0) {
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Subprocess& child = *owners[i];
      if (fds[i].events == POLLIN) {
        ReadOutput(child, handler);
      } else {
        (void)child.FlushInput();  // an error closes stdin; the next Write reports it
      }
    }
  }

  now = Clock::now();
  size_t polled = children_.size();  // children spawned by the handler wait for the next call
  for (size_t i = 0; i < polled; ++i) Advance(*children_[i], now, handler);
  std::erase_if(children_, [](const std::unique_ptr<Subprocess>& c) { return c->finished_; });

  PollResult result;
  int interrupts = g_interrupts.load();
  result.interrupts = interrupts - interrupts_seen_;
  interrupts_seen_ = interrupts;
  return result;
}

}  // namespace cohort::launch
