// RunWorker(): the `cohort worker` loop. docs/protocol.md is the normative description.
//
// Threads: the main thread runs one command at a time; a reader thread turns stdin into a
// queue of lines (and raises the cancel flag when stdin closes); a heartbeat thread reports
// what the main thread is doing. Every event goes out through Channel::Emit, one write() per
// line under a mutex, on a duplicate of the original stdout; fd 1 itself then points at
// stderr so stray library prints land in the log.
#include "worker/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/file_util.h"
#include "common/json_text.h"
#include "common/row_sample.h"
#include "common/status.h"
#include "common/worker_protocol.h"
#include "launch/device.h"
#include "model/config_json.h"
#include "model/member.h"
#include "store/snapshot.h"
#include "worker/command.h"
#include "worker/fault_injection.h"

namespace cohort::worker {

namespace {

using nlohmann::json;
// Events keep their fields in the order written ("ev" and "id" first) for people reading logs.
using Event = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// Longest command line accepted; a longer one is skipped up to its newline and answered
// with an error event.
constexpr size_t kMaxLineBytes = size_t{64} << 20;

// Messages travel as one line: control characters become spaces.
std::string OneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return s;
}

template <typename Json>
std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// "2026-12-03T16:12:07.123Z": when a line was written, to the millisecond, in UTC, so a
// worker's log lines up with the journal's times and with other workers' logs.
std::string UtcNow() {
  auto now = std::chrono::system_clock::now();
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[64];  // room for any int the format could print
  std::snprintf(text, sizeof(text), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms.count()));
  return text;
}

void Log(const std::string& text) {
  // fd 2 is the member's log; one write so concurrent lines stay whole.
  std::string line = UtcNow() + " cohort worker: " + OneLine(text) + "\n";
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

// The event channel: the original stdout.
class Channel {
 public:
  explicit Channel(int fd) : fd_(fd) {}
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Writes "@cohort {json}\n" whole; false once the controller is gone (the pipe broke).
  bool Emit(const Event& event) {
    return WriteLine(std::string(protocol::kEventPrefix) + Dump(event));
  }

  // Writes `text` and a newline whole, as it is (fault injection's garbage).
  bool WriteLine(const std::string& text) {
    std::string line = text + "\n";
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.load()) return false;
    size_t done = 0;
    while (done < line.size()) {
      ssize_t n = ::write(fd_.get(), line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        broken_.store(true);
        return false;
      }
      done += static_cast<size_t>(n);
    }
    return true;
  }

  bool broken() const { return broken_.load(); }

  // Closes the controller's end of events (fault injection's close_stdout).
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    broken_.store(true);
    fd_.reset();
  }

 private:
  ScopedFd fd_;
  std::mutex mu_;
  std::atomic<bool> broken_{false};
};

// State shared by the three threads.
struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::optional<std::string>> lines;  // nullopt: a line over kMaxLineBytes
  bool stdin_closed = false;
  bool stopping = false;  // the main thread is leaving: helpers stop
  // What the main thread is doing, for heartbeats.
  std::string busy_op;  // "" when idle
  Event busy_id;        // null when the command has no id

  // Set when stdin closes or the event channel breaks; Train polls it.
  std::atomic<bool> cancel{false};
};

// Reads stdin into lines until EOF or until `wake_fd` becomes readable (shutdown). A last
// line without its newline is dropped with the rest: nothing runs after stdin closes.
void ReadStdinLoop(Shared* shared, int wake_fd) {
  std::string line;
  bool skipping = false;  // inside an over-long line, dropping bytes up to its newline
  std::vector<char> buf(size_t{1} << 16);
  auto push = [&](std::optional<std::string> item) {
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->lines.push_back(std::move(item));
    shared->cv.notify_all();
  };
  auto finish = [&] {
    shared->cancel.store(true);
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->stdin_closed = true;
    shared->cv.notify_all();
  };
  for (;;) {
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    int r = ::poll(fds, 2, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      return finish();
    }
    if (fds[1].revents != 0) return;  // the main thread is done; not an EOF
    if (fds[0].revents == 0) continue;
    ssize_t n = ::read(STDIN_FILENO, buf.data(), buf.size());
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return finish();
    const char* p = buf.data();
    const char* end = p + n;
    while (p < end) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
      const char* stop = nl != nullptr ? nl : end;
      if (!skipping) {
        line.append(p, stop);
        if (line.size() > kMaxLineBytes) {
          skipping = true;
          std::string().swap(line);
        }
      }
      if (nl == nullptr) break;
      if (skipping) {
        push(std::nullopt);
      } else {
        push(std::move(line));
      }
      line.clear();
      skipping = false;
      p = nl + 1;
    }
  }
}

void HeartbeatLoop(Shared* shared, Channel* channel, double interval_s) {
  // Clamped so the conversion to the clock's integer ticks cannot overflow.
  const auto interval = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::clamp(interval_s, 1e-3, 1e6)));
  std::unique_lock<std::mutex> lock(shared->mu);
  for (;;) {
    if (shared->cv.wait_for(lock, interval, [&] { return shared->stopping; })) return;
    Event event = {{"ev", protocol::ev::kHeartbeat}, {"busy", nullptr}};
    if (!shared->busy_op.empty()) event["busy"] = shared->busy_op;
    if (!shared->busy_id.is_null()) event["id"] = shared->busy_id;
    lock.unlock();
    bool ok = channel->Emit(event);
    lock.lock();
    if (!ok) {
      shared->cancel.store(true);
      shared->cv.notify_all();
      return;
    }
  }
}

std::string FirstWords(const std::string& text) {
  std::string s = OneLine(text.substr(0, 60));
  return text.size() > 60 ? s + "..." : s;
}

// The helper threads must not end the process by throwing (out of memory): a reader that
// fails acts as if stdin closed; a heartbeat that fails stops beating.
void ReadStdin(Shared* shared, int wake_fd) {
  try {
    ReadStdinLoop(shared, wake_fd);
  } catch (...) {
    shared->cancel.store(true);
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->stdin_closed = true;
    shared->cv.notify_all();
  }
}

void Heartbeat(Shared* shared, Channel* channel, double interval_s) {
  try {
    HeartbeatLoop(shared, channel, interval_s);
  } catch (...) {
    Log("heartbeat stopped: internal error");
  }
}

using Fields = CommandFields;

class Worker {
 public:
  Worker(const WorkerOptions& options, Channel* channel, Shared* shared)
      : options_(options), channel_(channel), shared_(shared) {}

  // Runs one command line. Returns false when the worker should exit (shutdown).
  bool Handle(const std::optional<std::string>& line) {
    id_ = nullptr;
    op_.clear();
    member_.clear();
    if (!line) {
      Error("malformed command: line longer than " + std::to_string(kMaxLineBytes >> 20) + " MiB");
      return true;
    }
    ParsedCommand parsed = ParseCommandLine(*line);
    id_ = std::move(parsed.id);
    op_ = std::move(parsed.op);
    if (!parsed.error.empty()) {
      Error(parsed.error);
      return true;
    }
    const json& cmd = parsed.command;
    if (op_ == protocol::op::kShutdown) {
      Event bye = {{"ev", protocol::ev::kBye}};
      if (!id_.is_null()) bye["id"] = id_;
      channel_->Emit(bye);
      return false;
    }
    MaybeInjectFault(
        op_, [this](const std::string& line) { channel_->WriteLine(line); },
        [this] { channel_->Close(); });
    Status status;
    if (op_ == protocol::op::kTrain || op_ == protocol::op::kPredict ||
        op_ == protocol::op::kEvaluate) {
      SetBusy(op_);
      const auto start = Clock::now();
      Log(op_ + (id_.is_null() ? std::string() : " " + Dump(id_)) + ": started");
      try {
        if (op_ == protocol::op::kTrain) status = Train(cmd);
        if (op_ == protocol::op::kPredict) status = Predict(cmd);
        if (op_ == protocol::op::kEvaluate) status = Evaluate(cmd);
      } catch (const std::exception& e) {
        status = Status::Aborted(std::string("internal error: ") + e.what());
      } catch (...) {
        status = Status::Aborted("internal error: unknown exception");
      }
      Log(op_ + (id_.is_null() ? std::string() : " " + Dump(id_)) + ": " +
          (status.ok() ? std::string("done") : status.ToString()) + " after " +
          std::to_string(std::chrono::duration<double>(Clock::now() - start).count()) + " s");
      SetBusy("");
    } else {
      status = Status::InvalidArgument("unknown op \"" + FirstWords(op_) +
                                       "\" (train, predict, evaluate, shutdown)");
    }
    if (!status.ok()) {
      // A cancel raised by stdin closing (not an error in the command) says so.
      if (status.code() == Status::Code::kAborted && shared_->cancel.load()) {
        Error("cancelled: stdin closed");
      } else {
        Error(status.message());
      }
    }
    return true;
  }

 private:
  void SetBusy(const std::string& op) {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->busy_op = op;
    shared_->busy_id = op.empty() ? Event() : id_;
  }

  // An event about the current command: "ev" and "id" first.
  Event Make(std::string_view ev) const {
    Event e = {{"ev", ev}};
    if (!id_.is_null()) e["id"] = id_;
    return e;
  }

  void Emit(const Event& event) {
    if (!channel_->Emit(event)) shared_->cancel.store(true);  // the controller is gone
  }

  void Error(const std::string& message) {
    Event e = Make(protocol::ev::kError);
    if (!op_.empty()) e["op"] = op_;
    if (!member_.empty()) e["member"] = member_;
    e["message"] = OneLine(message);
    Emit(e);
    member_.clear();
  }

  static Result<std::shared_ptr<const store::Snapshot>> Open(const Fields& f) {
    COHORT_ASSIGN_OR_RETURN(std::string dir, f.String("store"));
    COHORT_ASSIGN_OR_RETURN(uint64_t generation, f.Generation());
    return store::Snapshot::Open(dir, generation);
  }

  model::DeviceConfig DefaultDevice() const {
    model::DeviceConfig d;
    d.device = options_.device;
    d.threads = options_.threads;
    return d;
  }

  Status Train(const json& cmd) {
    Fields f(cmd, "train");
    COHORT_ASSIGN_OR_RETURN(std::string member, f.String("member", std::string()));
    member_ = member;
    COHORT_ASSIGN_OR_RETURN(std::string table, f.String("table"));
    COHORT_ASSIGN_OR_RETURN(std::string checkpoint, f.String("checkpoint"));
    model::TrainConfig base;
    base.device = DefaultDevice();
    static const json kNoConfig = json::object();
    auto config_it = cmd.find("config");  // not copied: a hostile value could nest deeply
    const json& config_json = config_it != cmd.end() ? *config_it : kNoConfig;
    COHORT_ASSIGN_OR_RETURN(model::TrainConfig config,
                            model::TrainConfigFromJson(config_json, base, member));
    if (!member.empty()) config.member = member;
    member_ = config.member;
    COHORT_ASSIGN_OR_RETURN(auto snapshot, Open(f));

    auto progress = [&](const model::Progress& p) {
      Event e = Make(protocol::ev::kProgress);
      e["member"] = config.member;
      e["epoch"] = p.epoch;
      e["epochs"] = p.epochs;
      e["step"] = p.step;
      e["steps"] = p.steps_per_epoch;
      e["loss"] = p.loss;
      e["samples_per_second"] = p.samples_per_second;
      e["lr"] = p.learning_rate;
      Emit(e);
    };
    COHORT_ASSIGN_OR_RETURN(model::TrainResult r,
                            model::Train(*snapshot, table, config, checkpoint, progress,
                                         options_.progress_interval_s, &shared_->cancel));

    Event done = Make(protocol::ev::kDone);
    done["op"] = protocol::op::kTrain;
    done["member"] = config.member;
    done["checkpoint"] = r.checkpoint;
    done["generation"] = snapshot->generation();
    done["table"] = table;
    done["seconds"] = r.seconds;
    done["samples"] = r.samples;
    Event epochs = Event::array();
    for (const auto& m : r.epochs) {
      Event e = {{"epoch", m.epoch}, {"train_loss", m.train_loss}};
      if (m.val_loss) e["val_loss"] = *m.val_loss;
      if (m.val_accuracy) e["val_accuracy"] = *m.val_accuracy;
      e["lr"] = m.learning_rate;
      e["seconds"] = m.seconds;
      epochs.push_back(std::move(e));
    }
    done["epochs"] = std::move(epochs);
    done["best_epoch"] = r.best_epoch;
    done["stopped_early"] = r.stopped_early;
    done["parameters"] = r.parameters;
    done["resident_data"] = r.resident_data;
    done["onednn_dense"] = r.onednn_dense;
    done["step_times"] = {{"data", r.step_times.data},
                          {"forward", r.step_times.forward},
                          {"backward", r.step_times.backward},
                          {"optimizer", r.step_times.optimizer}};
    Emit(done);
    member_.clear();
    return Status::OK();
  }

  Status Predict(const json& cmd) {
    Fields f(cmd, "predict");
    COHORT_ASSIGN_OR_RETURN(member_, f.String("member", std::string()));
    COHORT_ASSIGN_OR_RETURN(std::string table, f.String("table"));
    COHORT_ASSIGN_OR_RETURN(std::string checkpoint, f.String("checkpoint"));
    COHORT_ASSIGN_OR_RETURN(std::string out, f.String("out"));
    COHORT_ASSIGN_OR_RETURN(model::DeviceConfig device, f.Device(DefaultDevice()));
    // MC dropout: "dropout_passes": T more passes with dropout on, into "passes_out".
    model::DropoutPasses passes;
    COHORT_ASSIGN_OR_RETURN(uint64_t count, f.Unsigned("dropout_passes", 0));
    if (count > 10000) {
      return Status::InvalidArgument("predict: field \"dropout_passes\": at most 10000, not " +
                                     std::to_string(count));
    }
    passes.count = static_cast<int64_t>(count);
    if (passes.count > 0) {
      COHORT_ASSIGN_OR_RETURN(passes.seed, f.Unsigned("dropout_seed", 0));
      COHORT_ASSIGN_OR_RETURN(passes.out_path, f.String("passes_out"));
    }
    COHORT_ASSIGN_OR_RETURN(auto snapshot, Open(f));
    model::PredictOptions options;
    options.dropout = passes;
    // "precision": fp32 or bf16 for this pass (pool_precision); absent: the member's own.
    COHORT_ASSIGN_OR_RETURN(options.precision, f.String("precision", std::string()));
    // acquisition.pool_sample: "sample_rows" rows of the table drawn from "sample_seed".
    if (cmd.contains("sample_rows")) {
      COHORT_ASSIGN_OR_RETURN(uint64_t sample, f.Unsigned("sample_rows", 0));
      COHORT_ASSIGN_OR_RETURN(uint64_t seed, f.Unsigned("sample_seed", 0));
      COHORT_ASSIGN_OR_RETURN(const store::Table* t, snapshot->table(table));
      options.rows = SampleRows(t->size(), sample, seed);
    }
    auto started = Clock::now();
    COHORT_ASSIGN_OR_RETURN(model::PredictResult r,
                            model::Predict(checkpoint, *snapshot, table, out, device, options));
    double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    Event e = Make(protocol::ev::kPredictions);
    if (!member_.empty()) e["member"] = member_;
    e["path"] = r.path;
    e["rows"] = r.rows;
    e["shape"] = r.shape;
    e["table"] = table;
    e["generation"] = snapshot->generation();
    e["seconds"] = seconds;
    if (passes.count > 0) {
      e["dropout_passes"] = passes.count;
      e["passes_path"] = passes.out_path;
    }
    Emit(e);
    member_.clear();
    return Status::OK();
  }

  Status Evaluate(const json& cmd) {
    Fields f(cmd, "evaluate");
    COHORT_ASSIGN_OR_RETURN(member_, f.String("member", std::string()));
    COHORT_ASSIGN_OR_RETURN(std::string table, f.String("table"));
    COHORT_ASSIGN_OR_RETURN(std::string checkpoint, f.String("checkpoint"));
    COHORT_ASSIGN_OR_RETURN(model::DeviceConfig device, f.Device(DefaultDevice()));
    COHORT_ASSIGN_OR_RETURN(auto snapshot, Open(f));
    COHORT_ASSIGN_OR_RETURN(auto metrics, model::Evaluate(checkpoint, *snapshot, table, device));
    Event e = Make(protocol::ev::kDone);
    e["op"] = protocol::op::kEvaluate;
    if (!member_.empty()) e["member"] = member_;
    e["table"] = table;
    e["generation"] = snapshot->generation();
    e["metrics"] = Event::object();
    for (const auto& [name, value] : metrics) e["metrics"][name] = value;
    Emit(e);
    member_.clear();
    return Status::OK();
  }

  const WorkerOptions& options_;
  Channel* channel_;
  Shared* shared_;
  Event id_;            // the current command's id, null when it has none
  std::string op_;      // the current command's op, "" until known
  std::string member_;  // the member the current command is about, "" when none
};

std::string Hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

}  // namespace

int RunWorker(const WorkerOptions& options) {
  if (!options.log_file.empty()) {
    int fd = ::open(options.log_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || ::dup2(fd, STDERR_FILENO) < 0) {
      Log("cannot open the log file " + options.log_file + ": " + std::strerror(errno));
      return 1;
    }
    ::close(fd);
  }
  // The launcher binds a cpu:N worker to its cores through COHORT_CPU_SET; it must take effect
  // before any thread exists (libtorch's, ours) so that all of them inherit it.
  if (Status st = launch::ApplyCpuSetFromEnvironment(); !st.ok()) {
    Log("cannot bind to the cores of this device: " + st.message());
    return 1;
  }
  // The event channel is the original stdout; fd 1 becomes a second stderr so that whatever
  // a library prints goes to the log, never into the channel.
  std::fflush(stdout);
  int events_fd = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (events_fd < 0) {
    Log(std::string("cannot duplicate stdout: ") + std::strerror(errno));
    return 1;
  }
  if (::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    Log(std::string("cannot move stdout aside: ") + std::strerror(errno));
    ::close(events_fd);
    return 1;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // A write to a closed pipe fails with EPIPE instead of killing the process: the worker
  // then knows the controller is gone and leaves quietly.
  std::signal(SIGPIPE, SIG_IGN);

  Channel channel(events_fd);
  Shared shared;
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC) != 0) {
    Log(std::string("cannot create a pipe: ") + std::strerror(errno));
    return 1;
  }

  Event hello = {{"ev", protocol::ev::kHello},
                 {"version", protocol::kVersion},
                 {"pid", static_cast<int64_t>(::getpid())},
                 {"device", options.device},
                 {"threads", options.threads},
                 {"torch", model::TorchVersion()},
                 {"cuda_devices", model::CudaDeviceCount()},
                 {"hostname", Hostname()}};
  // The GPUs this process was given (by the launcher, or by Slurm through GRES): journalled.
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    hello["cuda_visible_devices"] = visible;
  }
  if (!channel.Emit(hello)) {
    ::close(wake[0]);
    ::close(wake[1]);
    return 0;
  }
  Log("pid " + std::to_string(::getpid()) + ", device " + options.device + ", " +
      std::to_string(options.threads) + " threads: serving");

  std::thread reader(ReadStdin, &shared, wake[0]);
  std::thread heartbeat;
  if (options.heartbeat_interval_s > 0) {
    heartbeat = std::thread(Heartbeat, &shared, &channel, options.heartbeat_interval_s);
  }

  Worker worker(options, &channel, &shared);
  for (;;) {
    std::optional<std::string> line;
    {
      std::unique_lock<std::mutex> lock(shared.mu);
      shared.cv.wait(
          lock, [&] { return !shared.lines.empty() || shared.stdin_closed || channel.broken(); });
      // Once stdin has closed (or the channel broke) nothing more is run: the controller
      // that sent the queued commands is not there to read their results.
      if (shared.stdin_closed || channel.broken()) break;
      line = std::move(shared.lines.front());
      shared.lines.pop_front();
    }
    if (line && line->find_first_not_of(" \t\r") == std::string::npos) continue;  // blank
    if (line && !line->empty() && line->back() == '\r') line->pop_back();         // CRLF
    bool keep_going = true;
    try {
      keep_going = worker.Handle(line);
    } catch (...) {
      // Handle catches what commands throw; this is for parsing and the error path itself
      // (out of memory, most likely). Best effort: the worker goes on either way.
      try {
        channel.Emit(
            {{"ev", protocol::ev::kError}, {"message", "internal error while reading a command"}});
        Log("internal error while reading a command");
      } catch (...) {
      }
    }
    if (!keep_going || channel.broken()) break;
  }

  {
    std::lock_guard<std::mutex> lock(shared.mu);
    shared.stopping = true;
    shared.cv.notify_all();
  }
  char byte = 1;
  ssize_t ignored = ::write(wake[1], &byte, 1);
  (void)ignored;
  reader.join();
  if (heartbeat.joinable()) heartbeat.join();
  ::close(wake[0]);
  ::close(wake[1]);
  Log(channel.broken() ? "event channel closed: exiting" : "exiting");
  return 0;
}

}  // namespace cohort::worker
