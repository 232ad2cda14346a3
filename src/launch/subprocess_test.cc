// Tests for Subprocess and SubprocessSet with real children (/bin/sh scripts, sleep, cat).
#include "launch/subprocess.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

struct Record {
  std::vector<nlohmann::json> events;
  std::vector<std::string> logs;
  std::vector<std::string> order;  // "event", "log", "closed", "exit"
  bool exited = false;
  bool stdout_closed = false;
  ExitInfo info;
  Clock::time_point exit_time;
};

class Recorder : public SubprocessSet::Handler {
 public:
  void OnEvent(Subprocess& child, nlohmann::json event) override {
    Record& r = records[child.pid()];
    r.events.push_back(std::move(event));
    r.order.push_back("event");
    if (on_event) on_event(child, r.events.back());
  }
  void OnLog(Subprocess& child, std::string_view line) override {
    Record& r = records[child.pid()];
    r.logs.emplace_back(line);
    r.order.push_back("log");
    if (on_log) on_log(child, r.logs.back());
  }
  void OnStdoutClosed(Subprocess& child) override {
    Record& r = records[child.pid()];
    r.stdout_closed = true;
    r.order.push_back("closed");
    if (on_stdout_closed) on_stdout_closed(child);
  }
  void OnExit(Subprocess& child, const ExitInfo& info) override {
    Record& r = records[child.pid()];
    EXPECT_FALSE(r.exited) << "OnExit twice for " << child.name();
    EXPECT_TRUE(child.stdout_eof());
    r.exited = true;
    r.info = info;
    r.exit_time = Clock::now();
    r.order.push_back("exit");
  }

  std::map<pid_t, Record> records;
  std::function<void(Subprocess&, const nlohmann::json&)> on_event;
  std::function<void(Subprocess&, const std::string&)> on_log;
  std::function<void(Subprocess&)> on_stdout_closed;
};

std::string TestDir() {
  const char* env = std::getenv("COHORT_TEST_TMP");
  std::filesystem::path base = env != nullptr ? env : std::filesystem::temp_directory_path();
  std::filesystem::path dir = base / ("launch-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

SpawnSpec Program(std::vector<std::string> argv) {
  SpawnSpec spec;
  spec.argv = std::move(argv);
  return spec;
}

SpawnSpec Shell(const std::string& script) { return Program({"/bin/sh", "-c", script}); }

// True once `pid` no longer exists (or is a zombie waiting for an init that does not reap).
bool ProcessGone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

bool WaitGone(pid_t pid, std::chrono::milliseconds limit) {
  auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    if (ProcessGone(pid)) return true;
    std::this_thread::sleep_for(10ms);
  }
  return ProcessGone(pid);
}

class SubprocessTest : public ::testing::Test {
 protected:
  void MakeSet(SubprocessSet::Options options = {}) {
    set_.reset();
    auto set = SubprocessSet::Create(options);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    set_ = std::move(set).value();
  }
  void SetUp() override {
    SubprocessSet::Options options;
    options.kill_grace = 300ms;
    options.stdout_closed_grace = 200ms;
    MakeSet(options);
  }
  void TearDown() override { set_.reset(); }

  Subprocess* Spawn(const SpawnSpec& spec) {
    auto child = set_->Spawn(spec);
    EXPECT_TRUE(child.ok()) << child.status().ToString();
    return child.ok() ? *child : nullptr;
  }

  // Polls until every child has exited, or `limit` passes (a test failure).
  void PollUntilEmpty(std::chrono::milliseconds limit = 5000ms) {
    auto end = Clock::now() + limit;
    while (!set_->empty() && Clock::now() < end) {
      auto polled = set_->Poll(100ms, recorder_);
      ASSERT_TRUE(polled.ok()) << polled.status().ToString();
    }
    ASSERT_TRUE(set_->empty()) << set_->size() << " children still running";
  }

  // Polls until `done()` holds or `limit` passes.
  template <typename Predicate>
  bool PollUntil(Predicate done, std::chrono::milliseconds limit = 5000ms) {
    auto end = Clock::now() + limit;
    while (!done() && Clock::now() < end) {
      auto polled = set_->Poll(50ms, recorder_);
      if (!polled.ok()) return false;
    }
    return done();
  }

  std::unique_ptr<SubprocessSet> set_;
  Recorder recorder_;
};

TEST_F(SubprocessTest, EventsAndLogsSeparatedExitAfterAllOutput) {
  std::string dir = TestDir();
  std::string err_path = dir + "/events.err";
  std::filesystem::remove(err_path);
  SpawnSpec spec = Shell(
      "echo '@cohort {\"ev\":\"hello\",\"n\":1}'; echo plain log; printf '@cohort not json\\r\\n';"
      "echo '@cohort [1,2]'; echo \"env=$COHORT_TEST_VAR\"; echo \"cwd=$(pwd)\";"
      "echo to-stderr >&2; echo '@cohort {\"ev\":\"done\"}'; exit 0");
  spec.env = {{"COHORT_TEST_VAR", "xyz"}};
  spec.stderr_path = err_path;
  spec.cwd = dir;
  Subprocess* child = Spawn(spec);
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  PollUntilEmpty();
  const Record& r = recorder_.records[pid];
  ASSERT_EQ(r.events.size(), 2u);
  EXPECT_EQ(r.events[0]["ev"], "hello");
  EXPECT_EQ(r.events[0]["n"], 1);
  EXPECT_EQ(r.events[1]["ev"], "done");
  ASSERT_EQ(r.logs.size(), 5u);
  EXPECT_EQ(r.logs[0], "plain log");
  EXPECT_EQ(r.logs[1], "@cohort not json");
  EXPECT_EQ(r.logs[2], "@cohort [1,2]");
  EXPECT_EQ(r.logs[3], "env=xyz");
  EXPECT_EQ(r.logs[4], "cwd=" + std::filesystem::canonical(dir).string());
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.order.back(), "exit");
  EXPECT_EQ(r.info.reason, ExitReason::kExited);
  EXPECT_EQ(r.info.exit_code, 0);
  EXPECT_EQ(r.info.signal, 0);
  EXPECT_EQ(ReadFile(err_path), "to-stderr\n");
  // Appended, not truncated.
  child = Spawn([&] {
    SpawnSpec again = Shell("echo again >&2");
    again.stderr_path = err_path;
    return again;
  }());
  PollUntilEmpty();
  EXPECT_EQ(ReadFile(err_path), "to-stderr\nagain\n");
}

TEST_F(SubprocessTest, EventsNestedTooDeepAreLogNotEvents) {
  // A member printing a `done` whose metrics nest 300,000 deep once killed the controller
  // (stack overflow copying the value). Such a line is refused as garbage and logged.
  std::string dir = TestDir();
  std::string deep = "@cohort {\"ev\":\"done\",\"metrics\":";
  for (int i = 0; i < 300000; i++) deep += "{\"a\":";
  deep += "1" + std::string(300001, '}') + "\n";
  std::string path = dir + "/deep.txt";
  {
    std::ofstream out(path);
    out << deep << "@cohort [" << std::string(100000, '[') << "\n";
  }
  Subprocess* child = Spawn(Shell("cat " + path + "; echo '@cohort {\"ev\":\"done\"}'"));
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  PollUntilEmpty();
  const Record& r = recorder_.records[pid];
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0]["ev"], "done");
  ASSERT_EQ(r.logs.size(), 2u);
  for (const auto& log : r.logs) {
    EXPECT_TRUE(log.ends_with("[cohort: not an event: JSON nested deeper than 64 levels]"))
        << log.substr(log.size() - 80);
  }
}

TEST_F(SubprocessTest, CrashIsSignalled) {
  Subprocess* child = Spawn(Shell("echo before; kill -SEGV $$"));
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  PollUntilEmpty();
  const Record& r = recorder_.records[pid];
  EXPECT_EQ(r.logs, std::vector<std::string>{"before"});
  EXPECT_EQ(r.info.reason, ExitReason::kSignalled);
  EXPECT_EQ(r.info.signal, SIGSEGV);
  EXPECT_EQ(r.info.exit_code, -1);
  EXPECT_NE(r.info.ToString().find("signal 11"), std::string::npos) << r.info.ToString();
}

TEST_F(SubprocessTest, ExitStatusReported) {
  Subprocess* child = Spawn(Shell("exit 3"));
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  PollUntilEmpty();
  const Record& r = recorder_.records[pid];
  EXPECT_EQ(r.info.reason, ExitReason::kExited);
  EXPECT_EQ(r.info.exit_code, 3);
  EXPECT_EQ(r.info.ToString(), "exited with status 3");
}

TEST_F(SubprocessTest, SilentChildKilledForHeartbeat) {
  SpawnSpec spec = Shell("echo up; sleep 100");
  spec.heartbeat_timeout = 300ms;
  auto start = Clock::now();
  Subprocess* child = Spawn(spec);
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  PollUntilEmpty();
  const Record& r = recorder_.records[pid];
  auto took = r.exit_time - start;
  EXPECT_EQ(r.info.reason, ExitReason::kKilledForHeartbeat) << r.info.ToString();
  EXPECT_EQ(r.info.limit, 300ms);
  EXPECT_EQ(r.logs, std::vector<std::string>{"up"});
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 300ms + 300ms + 700ms);  // timeout + grace + slack
  EXPECT_NE(r.info.ToString().find("heartbeat"), std::string::npos);
}

TEST_F(SubprocessTest, ChattyChildKilledForWallClock) {
  SpawnSpec spec = Shell("while :; do echo tick; sleep 0.05; done");
  spec.heartbeat_timeout = 300ms;  // kept alive by the ticks
  spec.wall_clock_limit = 500ms;
  auto start = Clock::now();
  Subprocess* child = Spawn(spec);
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  PollUntilEmpty();
  const Record& r = recorder_.records[pid];
  EXPECT_EQ(r.info.reason, ExitReason::kKilledForWallClock) << r.info.ToString();
  EXPECT_GE(r.logs.size(), 4u);
  EXPECT_GE(r.exit_time - start, 500ms);
  EXPECT_LT(r.exit_time - start, 500ms + 300ms + 700ms);
}

TEST_F(SubprocessTest, IgnoringSigtermGetsSigkillAfterGrace) {
  Subprocess* child = Spawn(Shell("trap '' TERM; echo ready; while :; do sleep 0.05; done"));
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  Clock::time_point terminated;
  recorder_.on_log = [&](Subprocess& c, const std::string& line) {
    if (line == "ready") {
      EXPECT_TRUE(c.Terminate().ok());
      terminated = Clock::now();
    }
  };
  PollUntilEmpty();
  const Record& r = recorder_.records[pid];
  EXPECT_EQ(r.info.reason, ExitReason::kKilledByRequest);
  EXPECT_EQ(r.info.signal, SIGKILL) << r.info.ToString();
  EXPECT_GE(r.exit_time - terminated, 300ms);
  EXPECT_LT(r.exit_time - terminated, 1500ms);
}

TEST_F(SubprocessTest, GrandchildDiesWithTheGroup) {
  Subprocess* child = Spawn(Shell("sleep 1000 & echo $!; wait"));
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  pid_t grandchild = 0;
  recorder_.on_log = [&](Subprocess& c, const std::string& line) {
    grandchild = std::stoi(line);
    EXPECT_TRUE(c.Kill().ok());
  };
  PollUntilEmpty();
  ASSERT_GT(grandchild, 0);
  const Record& r = recorder_.records[pid];
  EXPECT_EQ(r.info.reason, ExitReason::kKilledByRequest);
  EXPECT_EQ(r.info.signal, SIGKILL);
  EXPECT_TRUE(WaitGone(grandchild, 2000ms)) << "grandchild " << grandchild << " survived";
}

TEST_F(SubprocessTest, ExitedChildsLeftoverProcessesAreKilled) {
  // The shell exits at once; the sleep it left holds stdout open until the set kills the group.
  Subprocess* child = Spawn(Shell("sleep 1000 & echo $!; echo bye"));
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  PollUntilEmpty();
  const Record& r = recorder_.records[pid];
  ASSERT_EQ(r.logs.size(), 2u);
  EXPECT_EQ(r.logs[1], "bye");
  EXPECT_EQ(r.info.reason, ExitReason::kExited);
  EXPECT_EQ(r.info.exit_code, 0);
  EXPECT_FALSE(r.info.output_cut);
  EXPECT_TRUE(WaitGone(std::stoi(r.logs[0]), 2000ms));
}

TEST_F(SubprocessTest, ChildSeesNoParentDescriptors) {
  // Other children's pipes and the set's wake pipe exist while this one starts.
  Subprocess* cat = Spawn(Program({"/bin/cat"}));
  ASSERT_NE(cat, nullptr);
  // One inheritable descriptor, as a careless library would leave: it must not reach the child.
  int inheritable = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(inheritable, 0);
  Subprocess* child = Spawn(Shell("exec ls /proc/self/fd"));
  ::close(inheritable);
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  ASSERT_TRUE(PollUntil([&] { return recorder_.records[pid].exited; }));
  std::set<std::string> fds(recorder_.records[pid].logs.begin(), recorder_.records[pid].logs.end());
  // 0, 1, 2 and the directory ls opens to list itself.
  EXPECT_LE(fds.size(), 4u);
  for (const std::string& fd : fds) EXPECT_LE(std::stoi(fd), 3) << "leaked fd " << fd;
  cat->CloseStdin();
  PollUntilEmpty();
}

TEST_F(SubprocessTest, SpawnErrorsNameTheProgram) {
  auto missing = set_->Spawn(Program({"/nonexistent/cohort-program", "x"}));
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(missing.status().IsNotFound()) << missing.status().ToString();
  EXPECT_NE(missing.status().message().find("/nonexistent/cohort-program"), std::string::npos);

  auto not_on_path = set_->Spawn(Program({"cohort-no-such-program-xyz"}));
  ASSERT_FALSE(not_on_path.ok());
  EXPECT_NE(not_on_path.status().message().find("cohort-no-such-program-xyz"), std::string::npos)
      << not_on_path.status().ToString();

  auto not_executable = set_->Spawn(Program({"/etc/passwd"}));
  ASSERT_FALSE(not_executable.ok());
  EXPECT_NE(not_executable.status().message().find("/etc/passwd"), std::string::npos);

  SpawnSpec bad_stderr = Program({"/bin/true"});
  bad_stderr.stderr_path = "/nonexistent-dir/x.log";
  auto s = set_->Spawn(bad_stderr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/nonexistent-dir/x.log"), std::string::npos);

  SpawnSpec bad_cwd = Program({"/bin/true"});
  bad_cwd.cwd = "/nonexistent-dir";
  s = set_->Spawn(bad_cwd);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/nonexistent-dir"), std::string::npos);

  EXPECT_FALSE(set_->Spawn(Program({})).ok());
  EXPECT_TRUE(set_->empty());
  // A program found on PATH runs.
  ASSERT_TRUE(set_->Spawn(Program({"true"})).ok());
  PollUntilEmpty();
}

TEST_F(SubprocessTest, ProgramsFoundRelativeToCwdAndOnTheGivenPath) {
  std::string dir = TestDir();
  std::string script = dir + "/cohort-hello.sh";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\necho hello from script\n";
  }
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  SpawnSpec relative = Program({"./cohort-hello.sh"});
  relative.cwd = dir;
  Subprocess* child = Spawn(relative);
  ASSERT_NE(child, nullptr);
  pid_t relative_pid = child->pid();
  SpawnSpec on_path = Program({"cohort-hello.sh"});
  on_path.env = {{"PATH", "/nonexistent:" + dir}};
  child = Spawn(on_path);
  ASSERT_NE(child, nullptr);
  pid_t path_pid = child->pid();
  PollUntilEmpty();
  EXPECT_EQ(recorder_.records[relative_pid].logs, std::vector<std::string>{"hello from script"});
  EXPECT_EQ(recorder_.records[path_pid].logs, std::vector<std::string>{"hello from script"});
  // Not on the PATH the child gets: refused, even though the controller's PATH has sh.
  SpawnSpec hidden = Program({"sh", "-c", "true"});
  hidden.env = {{"PATH", dir}};
  auto refused = set_->Spawn(hidden);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().IsNotFound()) << refused.status().ToString();
}

TEST_F(SubprocessTest, ManyChildrenServedByOneLoop) {
  constexpr int kChildren = 20;
  std::map<pid_t, int> index;
  for (int i = 0; i < kChildren; ++i) {
    Subprocess* cat = Spawn(Program({"/bin/cat"}));
    ASSERT_NE(cat, nullptr);
    index[cat->pid()] = i;
    ASSERT_TRUE(cat->Write("hello " + std::to_string(i)).ok());
    ASSERT_TRUE(cat->Write("@cohort {\"i\":" + std::to_string(i) + "}\n").ok());
  }
  recorder_.on_event = [](Subprocess& c, const nlohmann::json&) { c.CloseStdin(); };
  PollUntilEmpty();
  ASSERT_EQ(recorder_.records.size(), static_cast<size_t>(kChildren));
  for (const auto& [pid, r] : recorder_.records) {
    int i = index.at(pid);
    EXPECT_EQ(r.logs, std::vector<std::string>{"hello " + std::to_string(i)});
    ASSERT_EQ(r.events.size(), 1u);
    EXPECT_EQ(r.events[0]["i"], i);
    EXPECT_EQ(r.info.reason, ExitReason::kExited);
    EXPECT_EQ(r.info.exit_code, 0);
  }
}

TEST_F(SubprocessTest, WriteEchoesAndQueuesPastAFullPipe) {
  Subprocess* cat = Spawn(Program({"/bin/cat"}));
  ASSERT_NE(cat, nullptr);
  pid_t pid = cat->pid();
  ASSERT_TRUE(cat->Write("one").ok());
  ASSERT_TRUE(cat->Write("two\n").ok());
  // Larger than any pipe buffer: the rest waits in the queue and Poll() writes it.
  std::string big(3 << 20, 'b');
  ASSERT_TRUE(cat->Write(big).ok());
  EXPECT_GT(cat->pending_input(), 0u);
  ASSERT_TRUE(cat->Write("last").ok());
  cat->CloseStdin();
  EXPECT_FALSE(cat->Write("after close").ok());
  PollUntilEmpty();
  const Record& r = recorder_.records[pid];
  ASSERT_EQ(r.logs.size(), 4u);
  EXPECT_EQ(r.logs[0], "one");
  EXPECT_EQ(r.logs[1], "two");
  EXPECT_EQ(r.logs[2], big);
  EXPECT_EQ(r.logs[3], "last");
  EXPECT_EQ(r.info.exit_code, 0);
}

TEST_F(SubprocessTest, WriteToClosedStdinFails) {
  Subprocess* child = Spawn(Shell("exec 0<&-; echo closed; sleep 100"));
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  Status write_status;
  recorder_.on_log = [&](Subprocess& c, const std::string&) {
    write_status = c.Write("anyone there?");
    EXPECT_TRUE(c.Kill().ok());
  };
  PollUntilEmpty();
  EXPECT_FALSE(write_status.ok());
  EXPECT_NE(write_status.message().find("write to stdin"), std::string::npos)
      << write_status.ToString();
  EXPECT_EQ(recorder_.records[pid].info.reason, ExitReason::kKilledByRequest);
}

TEST_F(SubprocessTest, WriteRefusesBeyondThePendingLimit) {
  SubprocessSet::Options options;
  options.max_pending_input = 1 << 20;
  MakeSet(options);
  Subprocess* child = Spawn(Shell("sleep 100"));  // never reads stdin
  ASSERT_NE(child, nullptr);
  Status status;
  for (int i = 0; i < 64 && status.ok(); ++i) status = child->Write(std::string(100000, 'x'));
  EXPECT_TRUE(status.IsBusy()) << status.ToString();
  EXPECT_LE(child->pending_input(), size_t{1} << 20);
  EXPECT_TRUE(child->Kill().ok());
  PollUntilEmpty();
}

TEST_F(SubprocessTest, PartialLinesAndLongLinesAcrossReads) {
  SubprocessSet::Options options;
  options.max_line_bytes = 100000;
  MakeSet(options);
  Subprocess* child = Spawn(Shell(
      "printf 'par'; sleep 0.1; printf 'tial\\nsecond'; sleep 0.1; printf ' line\\r\\n';"
      "head -c 300000 /dev/zero | tr '\\0' x; echo; printf '@cohort {\"ev\":\"x\"'; sleep 0.1;"
      "printf '}\\n'; printf 'no newline at end'"));
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  PollUntilEmpty();
  const Record& r = recorder_.records[pid];
  ASSERT_EQ(r.logs.size(), 4u);
  EXPECT_EQ(r.logs[0], "partial");
  EXPECT_EQ(r.logs[1], "second line");
  EXPECT_EQ(r.logs[2].substr(0, 100000), std::string(100000, 'x'));
  EXPECT_EQ(r.logs[2].substr(100000), " [cohort: line cut at 100000 of 300000 bytes]");
  EXPECT_EQ(r.logs[3], "no newline at end");
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0]["ev"], "x");
}

TEST_F(SubprocessTest, StdoutClosedWhileRunningIsReported) {
  Subprocess* child = Spawn(Shell("echo bye-stdout; exec 1>&-; sleep 100"));
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  recorder_.on_stdout_closed = [](Subprocess& c) {
    EXPECT_TRUE(c.running());
    EXPECT_TRUE(c.Kill().ok());
  };
  PollUntilEmpty();
  const Record& r = recorder_.records[pid];
  EXPECT_TRUE(r.stdout_closed);
  EXPECT_EQ(r.order, (std::vector<std::string>{"log", "closed", "exit"}));
  EXPECT_EQ(r.info.reason, ExitReason::kKilledByRequest);
  // A child that closes stdout and then exits on its own is not reported.
  child = Spawn(Shell("exec 1>&-; sleep 0.05"));
  pid = child->pid();
  PollUntilEmpty();
  EXPECT_FALSE(recorder_.records[pid].stdout_closed);
  EXPECT_EQ(recorder_.records[pid].info.exit_code, 0);
}

TEST_F(SubprocessTest, AMemoryLimitBindsTheChildAndWhatItStarts) {
  // The limit as the child sees it, through a grandchild (the shell's `ulimit -v` is KiB).
  SpawnSpec spec = Shell("ulimit -v; exec /bin/sh -c 'ulimit -v'");
  spec.memory_limit_bytes = uint64_t{3} << 30;
  Subprocess* child = Spawn(spec);
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  PollUntilEmpty();
  const Record& r = recorder_.records[pid];
  EXPECT_EQ(r.info.exit_code, 0);
  EXPECT_EQ(r.logs, (std::vector<std::string>{"3145728", "3145728"}));
  // Without one, nothing is set.
  child = Spawn(Shell("ulimit -v"));
  pid = child->pid();
  PollUntilEmpty();
  EXPECT_EQ(recorder_.records[pid].logs, std::vector<std::string>{"unlimited"});
}

TEST_F(SubprocessTest, InterruptsAreCountedNotFatal) {
  std::thread sender([] {
    std::this_thread::sleep_for(100ms);
    ::kill(::getpid(), SIGINT);
    std::this_thread::sleep_for(200ms);
    ::kill(::getpid(), SIGTERM);
  });
  int interrupts = 0;
  auto end = Clock::now() + 3000ms;
  auto start = Clock::now();
  Clock::time_point first;
  while (interrupts < 2 && Clock::now() < end) {
    auto polled = set_->Poll(5000ms, recorder_);  // no children: only a signal wakes it
    ASSERT_TRUE(polled.ok());
    if (interrupts == 0 && polled->interrupts > 0) first = Clock::now();
    interrupts += polled->interrupts;
  }
  sender.join();
  EXPECT_EQ(interrupts, 2);
  EXPECT_LT(first - start, 1000ms);  // woke on the signal, not the timeout
  EXPECT_GE(set_->total_interrupts(), 2);
}

TEST_F(SubprocessTest, PollTimesOutAndShortensToDeadlines) {
  auto start = Clock::now();
  ASSERT_TRUE(set_->Poll(100ms, recorder_).ok());
  EXPECT_GE(Clock::now() - start, 100ms);
  SpawnSpec spec = Shell("sleep 100");
  spec.heartbeat_timeout = 200ms;
  Subprocess* child = Spawn(spec);
  ASSERT_NE(child, nullptr);
  start = Clock::now();
  // One long Poll must still wake for the heartbeat deadline.
  ASSERT_TRUE(set_->Poll(10000ms, recorder_).ok());
  EXPECT_LT(Clock::now() - start, 1000ms);
  PollUntilEmpty();
}

TEST_F(SubprocessTest, OnlyOneSetPerProcess) {
  auto second = SubprocessSet::Create();
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(second.status().IsBusy());
}

TEST_F(SubprocessTest, DestroyingTheSetKillsItsChildren) {
  Subprocess* child = Spawn(Shell("sleep 1000 & echo $!; wait"));
  ASSERT_NE(child, nullptr);
  pid_t pid = child->pid();
  ASSERT_TRUE(PollUntil([&] { return !recorder_.records[pid].logs.empty(); }));
  pid_t grandchild = std::stoi(recorder_.records[pid].logs[0]);
  set_.reset();
  EXPECT_TRUE(ProcessGone(pid));
  EXPECT_TRUE(WaitGone(grandchild, 2000ms));
}

}  // namespace
}  // namespace cohort::launch
