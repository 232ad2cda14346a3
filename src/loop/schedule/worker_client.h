// The scheduler's side of the worker protocol (docs/protocol.md, common/worker_protocol.h):
// how a slot's `cohort-member worker` process is started, the commands of a native member's
// attempt (train on the round's generation, predict the pool, predict the test table), and
// what the events it answers with mean. No state: the Scheduler keeps the attempts.
//
// Thread-safety: functions over their arguments only.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launch/device.h"
#include "launch/subprocess.h"
#include "loop/config/config.h"
#include "loop/run/journal.h"
#include "loop/schedule/progress.h"

namespace cohort::loop {

// How a slot's worker is started.
struct WorkerLaunch {
  std::string member_binary;  // `cohort-member`; the worker is its `worker` command
  launch::Device device;
  int threads_per_cpu_device = 1;
  int cpu_count = 1;
  std::chrono::milliseconds heartbeat_timeout{60000};
  uint64_t memory_limit_bytes = 0;
};

// argv, device environment, heartbeat, log file (absolute) and working directory.
launch::SpawnSpec WorkerSpawnSpec(const WorkerLaunch& launch, const std::string& log_path,
                                  const std::string& cwd);

// The commands of a native member's attempt, in order; kPredictPool is skipped in a round
// known to be the last, kPredictTrain unless an update step reads the train predictions.
enum class WorkerStep { kTrain, kPredictPool, kPredictTrain, kPredictTest };

// What every command of an attempt names.
struct AttemptCommandContext {
  std::string store;  // absolute
  uint64_t generation = 0;
  int64_t round = 0;
  const MemberConfig* member = nullptr;
  int attempt = 0;
  std::string attempt_dir;  // absolute
  std::string warm_start_from;
  const StoreConfig* tables = nullptr;
  int64_t classes = 0;  // the run's class count, for a member without its own `classes`
  // acquisition.pool_sample (0: none): the pool predictions cover that many rows, drawn by
  // SampleRows from pool_sample_seed.
  int64_t pool_sample = 0;
  uint64_t pool_sample_seed = 0;
};

// The command for `step`, with its id (unique per round, member, attempt and step).
nlohmann::json WorkerCommand(WorkerStep step, const AttemptCommandContext& context);

// The event kinds the scheduler acts on.
enum class WorkerEventKind {
  kHello,
  kProgress,
  kHeartbeat,
  kDone,
  kPredictions,
  kError,
  kBye,
  kOther
};
WorkerEventKind KindOf(const nlohmann::json& event);

// A `hello`'s protocol version is the one this controller speaks.
bool SpeaksOurProtocol(const nlohmann::json& hello);

// A progress event's fields; events come from other programs, so a field of the wrong type
// reads as absent.
TrainingProgress ProgressOf(const nlohmann::json& event);

// The epochs a `done` event lists, for the journal; entries that are not objects are skipped.
std::vector<EpochRecord> EpochsOf(const nlohmann::json& done);

// The metrics the journal keeps for a finished attempt: the `done` event's training figures
// (and a script's own numeric metrics), plus the prediction and attempt seconds.
nlohmann::json AttemptMetrics(const nlohmann::json& done, bool script, double predict_seconds,
                              double attempt_seconds);

}  // namespace cohort::loop
