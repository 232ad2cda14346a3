// FakeWorker: a launch::FakeProcessHost program that speaks the worker protocol (docs/protocol.md)
// the way `cohort-member worker` does, with scripted behaviour per member, round and attempt: train
// for a while and finish, answer with an error event, crash, or hang. Its predictions are real .npy
// files computed from the store's tables, so the controller's ensemble and acquisition steps run on
// them unchanged. For scheduler and controller unit tests.
//
// Thread-safety: as launch::FakeProcessHost.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "launch/testing/fake_process_host.h"
#include "store/snapshot.h"

namespace cohort::loop {

// How one attempt of a member goes.
struct FakeAttempt {
  enum class Outcome {
    kOk,
    kErrorEvent,       // the training answers with an error event; the worker lives on
    kCrashInTraining,  // the worker dies of SIGSEGV halfway through the training
    kHangInTraining,   // the worker stops writing anything (heartbeats included)
    kIgnoreTerminate,  // like kHangInTraining, and it ignores SIGTERM too
  };
  Outcome outcome = Outcome::kOk;
  std::chrono::milliseconds train_time{2000};
  std::chrono::milliseconds predict_time{200};
  std::string error = "loss diverged";
};

struct FakeWorkerOptions {
  std::chrono::milliseconds start_time{300};  // until `hello`
  int hello_version = 1;
  // Plain stdout lines the worker prints before `hello` (as a chatty library would).
  std::vector<std::string> stray_lines;
  // Per (member, round, attempt); default: every attempt is kOk with the default times.
  std::function<FakeAttempt(const std::string& member, int64_t round, int attempt)> plan;
  // Class probabilities a member predicts for a table (rows x classes, row-major); default:
  // 0.7 on the stored label (or on id % classes without labels), the rest spread evenly.
  std::function<std::vector<float>(const std::string& member, const store::Table& table)> predict;
  int64_t classes = 3;
  // Every command line a fake worker received, in order, when set.
  std::vector<std::string>* commands = nullptr;
};

// A factory for launch::FakeProcessHost: argv[1] == "worker" gets a FakeWorker; anything else is
// handed to `other` (outside scripts, oracles), or cannot be started when `other` is null.
launch::FakeProcessHost::Factory FakeWorkerFactory(
    FakeWorkerOptions options, const launch::FakeProcessHost::Factory& other = nullptr);

// The default predictions of FakeWorkerOptions::predict.
std::vector<float> DefaultFakePredictions(const store::Table& table, int64_t classes);

}  // namespace cohort::loop
