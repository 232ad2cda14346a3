// The worker protocol's names, in one place: the version both sides speak, the framing prefix,
// the commands (ops) the controller sends and the events a worker or an outside-script member
// prints, and the files an attempt leaves. docs/protocol.md is the normative description; the
// worker (src/worker), the scheduler's worker client (src/loop) and the launcher's line framing
// (src/launch) all read these constants, so a change here is a change of the protocol and
// must bump kVersion when an old peer would misread it.
//
// Torch-free and dependency-free on purpose: every part may include it.
//
// Thread-safety: constants only.
#pragma once

#include <string_view>

namespace cohort::protocol {

// The version a command's and a `hello` event's "version" field carries; a peer that sees
// another refuses with a clear error. Outside-script members read the same number from their
// spec file's "version".
inline constexpr int kVersion = 1;

// Every event line on a child's stdout starts with this; other lines are log.
inline constexpr std::string_view kEventPrefix = "@cohort ";

// Commands: {"op": ..., "id": ..., "version": kVersion, ...}.
namespace op {
inline constexpr std::string_view kTrain = "train";
inline constexpr std::string_view kPredict = "predict";
inline constexpr std::string_view kEvaluate = "evaluate";
inline constexpr std::string_view kShutdown = "shutdown";
}  // namespace op

// Events: {"ev": ..., "id": <the command's id>, ...}.
namespace ev {
inline constexpr std::string_view kHello = "hello";
inline constexpr std::string_view kProgress = "progress";
inline constexpr std::string_view kHeartbeat = "heartbeat";
inline constexpr std::string_view kDone = "done";
inline constexpr std::string_view kPredictions = "predictions";
inline constexpr std::string_view kError = "error";
inline constexpr std::string_view kBye = "bye";
}  // namespace ev

// Files an attempt writes into its directory (RunPaths::AttemptDir).
namespace file {
inline constexpr std::string_view kNativeCheckpoint = "checkpoint.pt";
inline constexpr std::string_view kScriptCheckpoint = "checkpoint";
inline constexpr std::string_view kPoolPredictions = "predictions-pool.npy";
inline constexpr std::string_view kTestPredictions = "predictions-test.npy";
// Only when an update step reads the members' view of the train table (relabel_or_drop, a
// command step with predict = ["train"]).
inline constexpr std::string_view kTrainPredictions = "predictions-train.npy";
// Only for a member with dropout_passes = T: its T MC-dropout passes over the pool,
// float32 (T, rows, classes).
inline constexpr std::string_view kPoolDropoutPasses = "predictions-pool-passes.npy";
inline constexpr std::string_view kWorkerLog = "worker.log";  // a native attempt's log slice
inline constexpr std::string_view kMemberLog = "member.log";  // an outside script's log
inline constexpr std::string_view kScriptSpec = "spec.json";  // an outside script's round spec
}  // namespace file

}  // namespace cohort::protocol
