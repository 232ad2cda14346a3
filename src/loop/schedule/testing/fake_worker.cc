#include "loop/schedule/testing/fake_worker.h"

#include <csignal>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "common/json_text.h"
#include "common/worker_protocol.h"
#include "store/import.h"

namespace cohort::loop {

namespace {

using nlohmann::json;
using Duration = std::chrono::milliseconds;

class FakeWorker : public launch::FakeProcessHost::Program {
 public:
  explicit FakeWorker(const FakeWorkerOptions& options) : options_(options) {}

  void OnStart(launch::FakeProcessHost::Process& p) override {
    // The heartbeat interval the scheduler asked for (--heartbeat SECONDS).
    const auto& argv = p.spec().argv;
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == "--heartbeat") {
        heartbeat_ = Duration(static_cast<int64_t>(std::stod(argv[i + 1]) * 1000));
      }
    }
    for (const std::string& line : options_.stray_lines) p.Log(line);
    json hello = {{"ev", protocol::ev::kHello},
                  {"version", options_.hello_version},
                  {"pid", p.pid()},
                  {"hostname", "fake-node"}};
    for (const auto& [name, value] : p.spec().env) {
      if (name == "CUDA_VISIBLE_DEVICES") hello["cuda_visible_devices"] = value;
    }
    p.Event(std::move(hello), options_.start_time);
    p.After(options_.start_time, [this, &p] { Beat(p); });
  }

  void OnLine(launch::FakeProcessHost::Process& p, const std::string& line) override {
    if (options_.commands != nullptr) options_.commands->push_back(line);
    json cmd = json::parse(line, nullptr, false);
    std::string op = JsonStringField(cmd, "op");
    std::string id = JsonStringField(cmd, "id");
    if (op == protocol::op::kShutdown) {
      p.Event({{"ev", protocol::ev::kBye}, {"id", id}});
      p.Exit(0);
      return;
    }
    std::string member = JsonStringField(cmd, "member");
    if (op == protocol::op::kTrain) return Train(p, cmd, member, id);
    if (op == protocol::op::kPredict) return Predict(p, cmd, member, id);
    p.Event({{"ev", protocol::ev::kError}, {"id", id}, {"message", "unknown op " + op}});
  }

  void OnTerminate(launch::FakeProcessHost::Process& p) override {
    if (!ignore_terminate_) p.Crash(SIGTERM);
  }

 private:
  // Heartbeats while it is not hung, as the real worker's heartbeat thread does.
  void Beat(launch::FakeProcessHost::Process& p) {
    if (hung_) return;
    p.Event({{"ev", protocol::ev::kHeartbeat}});
    p.After(heartbeat_, [this, &p] { Beat(p); });
  }

  // "r3/m1/a2/train" -> round 3, attempt 2.
  static void ParseId(const std::string& id, int64_t* round, int* attempt) {
    *round = 0;
    *attempt = 1;
    if (id.size() > 1 && id[0] == 'r') *round = std::stoll(id.substr(1));
    auto a = id.rfind("/a");
    if (a != std::string::npos) *attempt = std::stoi(id.substr(a + 2));
  }

  void Train(launch::FakeProcessHost::Process& p, const json& cmd, const std::string& member,
             const std::string& id) {
    int64_t round = 0;
    int attempt = 1;
    ParseId(id, &round, &attempt);
    FakeAttempt plan = options_.plan ? options_.plan(member, round, attempt) : FakeAttempt{};
    plan_ = plan;
    using Outcome = FakeAttempt::Outcome;
    switch (plan.outcome) {
      case Outcome::kOk: {
        p.Event({{"ev", protocol::ev::kProgress},
                 {"id", id},
                 {"epoch", 1},
                 {"epochs", 2},
                 {"step", 1},
                 {"steps", 1},
                 {"loss", 0.9}},
                plan.train_time / 2);
        json epochs = json::array({{{"epoch", 1}, {"train_loss", 0.9}, {"lr", 0.001}},
                                   {{"epoch", 2}, {"train_loss", 0.5}, {"lr", 0.001}}});
        double seconds = std::chrono::duration<double>(plan.train_time).count();
        p.Event({{"ev", protocol::ev::kDone},
                 {"id", id},
                 {"op", "train"},
                 {"seconds", seconds},
                 {"samples", 100},
                 {"epochs", epochs}},
                plan.train_time);
        break;
      }
      case Outcome::kErrorEvent:
        p.Event({{"ev", protocol::ev::kError}, {"id", id}, {"message", plan.error}},
                plan.train_time);
        break;
      case Outcome::kCrashInTraining:
        p.Crash(SIGSEGV, plan.train_time / 2);
        break;
      case Outcome::kIgnoreTerminate:
        ignore_terminate_ = true;
        hung_ = true;
        break;
      case Outcome::kHangInTraining:
        hung_ = true;
        break;
    }
  }

  void Predict(launch::FakeProcessHost::Process& p, const json& cmd, const std::string& member,
               const std::string& id) {
    auto snap = store::Snapshot::Open(
        JsonStringField(cmd, "store"),
        static_cast<uint64_t>(JsonNumberField(cmd, "generation").value_or(0)));
    std::string message;
    if (snap.ok()) {
      auto table = (*snap)->table(JsonStringField(cmd, "table"));
      if (table.ok()) {
        std::vector<float> probs = options_.predict
                                       ? options_.predict(member, **table)
                                       : DefaultFakePredictions(**table, options_.classes);
        // A custom `predict` may give another width (a member that gets the classes wrong).
        uint64_t rows = (*table)->size();
        uint64_t width = rows == 0 ? static_cast<uint64_t>(options_.classes) : probs.size() / rows;
        store::HostArray out(store::Dtype::kFloat32, {rows, width});
        // An empty pool gives empty arrays, whose data() may be null: memcpy must not see it.
        if (!out.data.empty()) std::memcpy(out.data.data(), probs.data(), out.data.size());
        Status written = store::WriteNpyFile(JsonStringField(cmd, "out"), out);
        if (!written.ok()) message = written.message();
      } else {
        message = table.status().message();
      }
    } else {
      message = snap.status().message();
    }
    if (!message.empty()) {
      p.Event({{"ev", protocol::ev::kError}, {"id", id}, {"message", message}});
      return;
    }
    double seconds = std::chrono::duration<double>(plan_.predict_time).count();
    p.Event({{"ev", protocol::ev::kPredictions}, {"id", id}, {"seconds", seconds}},
            plan_.predict_time);
  }

  const FakeWorkerOptions& options_;
  Duration heartbeat_{500};
  FakeAttempt plan_;
  bool hung_ = false;
  bool ignore_terminate_ = false;
};

}  // namespace

std::vector<float> DefaultFakePredictions(const store::Table& table, int64_t classes) {
  const uint64_t rows = table.size();
  std::vector<int64_t> labels(rows);
  if (table.schema().has_labels()) {
    store::HostArray stored = table.ReadLabels();
    // Not for an empty table: memcpy from a null pointer is undefined even for 0 bytes (UBSan).
    if (rows > 0) std::memcpy(labels.data(), stored.data.data(), rows * sizeof(int64_t));
  } else {
    for (uint64_t i = 0; i < rows; ++i) labels[i] = static_cast<int64_t>(table.id(i));
  }
  std::vector<float> probs(rows * classes, 0.3f / static_cast<float>(classes - 1));
  for (uint64_t i = 0; i < rows; ++i) {
    int64_t label = ((labels[i] % classes) + classes) % classes;
    probs[i * classes + label] = 0.7f;
  }
  return probs;
}

launch::FakeProcessHost::Factory FakeWorkerFactory(FakeWorkerOptions options,
                                                   const launch::FakeProcessHost::Factory& other) {
  auto shared = std::make_shared<FakeWorkerOptions>(std::move(options));
  return [shared, other](
             const launch::SpawnSpec& spec) -> std::unique_ptr<launch::FakeProcessHost::Program> {
    if (spec.argv.size() > 1 && spec.argv[1] == "worker") {
      // The options outlive every worker: the factory (holding them) lives in the host.
      return std::make_unique<FakeWorker>(*shared);
    }
    return other ? other(spec) : nullptr;
  };
}

}  // namespace cohort::loop
