// The outside-script member contract (docs/outside-members.md): an attempt is one run of the
// member's program, told what to do by environment variables and a spec file, and judged by
// its exit status and the prediction files it leaves. The Scheduler runs it on a slot like a
// native attempt; this file holds what is particular to scripts.
//
// Thread-safety: functions over their arguments only.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "launch/device.h"
#include "launch/subprocess.h"
#include "loop/config/config.h"
#include "loop/ensemble/predictions.h"

namespace cohort::loop {

// One attempt of a script member.
struct ScriptAttempt {
  const LoopConfig* config = nullptr;
  size_t member_index = 0;
  std::string store;  // absolute
  uint64_t generation = 0;
  int64_t round = 0;
  int attempt = 0;
  launch::Device device;
  int threads = 1;
  int cpu_count = 1;
  std::string out_dir;  // absolute; made empty by PrepareScriptAttempt
  std::string warm_start_from;
  std::chrono::milliseconds heartbeat_timeout{0};
  int64_t classes = 0;  // the run's class count (COHORT_CLASSES); 0 in a regression run
  RunTask task;         // COHORT_TASK, COHORT_TARGET_SHAPE
  // The script must also predict the train table (COHORT_PREDICT_TRAIN=1, the spec's
  // predictions.train): an update step reads it.
  bool predict_train = false;
  uint64_t memory_limit_bytes = 0;
};

// Makes the attempt's directory afresh, writes its spec file durably, and returns how to start
// the program (argv as configured, in the config file's directory, stderr to member.log).
Result<launch::SpawnSpec> PrepareScriptAttempt(const ScriptAttempt& attempt);

// A script's `done` event with its "metrics" object's fields also at the top level (where a
// native worker puts them), without overriding the event's own fields.
nlohmann::json NormalizeScriptDone(nlohmann::json done);

}  // namespace cohort::loop
