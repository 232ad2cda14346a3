// The loop config (`loop.toml`): what a run is, read and validated before anything starts.
//
// docs/config.md documents every field, its default and what a resume may change. Member
// training settings are model::TrainConfig fields, read through model::TrainConfigFromJson
// (the TOML is converted to JSON first), so their names, types and unknown-key errors are the
// same as in worker commands.
//
// Every error is one line "FILE:LINE: FIELD: what is wrong", FILE being the path as given:
//   loop.toml:14: member[2].model: layer 2 'dense x': 'x' is not a positive integer
// member[N] is the Nth [[member]] entry, counting from 1. Checks that need the store (model
// shapes against the table's feature shape, table existence) happen later, in the controller.
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "launch/device.h"
#include "launch/slurm.h"
#include "loop/acquire/batch_bald.h"
#include "loop/acquire/selection.h"
#include "loop/acquire/strategy.h"
#include "model/train_config.h"

namespace cohort::loop {

struct StoreConfig {
  std::string source;                         // absolute, normalised
  std::optional<uint64_t> source_generation;  // unset: the source's current generation
  std::string train = "train";
  std::string pool = "pool";
  std::string test = "test";
};

enum class Launcher { kLocal, kSlurm };
const char* LauncherName(Launcher launcher);

struct MemberConfig {
  std::string name;
  // An outside-script member (docs/outside-members.md): the argv cohort runs once per round
  // and attempt; empty for a native member. Its program is resolved like the oracle's.
  std::vector<std::string> command;
  // A script member's settings: its table with [defaults] merged underneath, minus name,
  // command and warm_start; handed to the script unvalidated. Null for native members.
  nlohmann::json script_config;
  bool is_script() const { return !command.empty(); }
  // Native members: [defaults] with this member's fields on top; train.member == name. The
  // loop fills in device and warm_start_from per attempt.
  model::TrainConfig train;
  bool warm_start = false;  // continue from the member's checkpoint of the previous round
  // Native classification members with a dropout layer: T MC-dropout passes over the pool each
  // round (model::DropoutPasses), which acquisition takes as T samples of this member; 0: none.
  int64_t dropout_passes = 0;
  int line = 0;  // the [[member]] header's line, for later messages
  // Native members: where `model` is set (the member's table or [defaults]) and the field as
  // messages name it ("member[2].model", "defaults.model"), for shape errors found later.
  int model_line = 0;
  std::string model_field;
};

struct AcquisitionConfig {
  // A strategy name of loop/acquire/strategy.h for the run's task.
  std::string strategy;
  int64_t batch_size = 0;  // k: samples labelled per round, > 0
  uint64_t seed = 0;       // tie-breaking (and `random`)
  // min_score / max_score: only samples scoring in [lower, upper) are picked (DP-GEN's trust
  // levels: below, the members agree already; above, the sample is an outlier), so a round
  // may pick fewer than k. Unset bounds are open.
  ScoreBand band;
  // How the batch is drawn from the scores (loop/acquire/selection.h): the top k, or a stochastic
  // draw (power, softmax, softrank) at `temperature`.
  BatchSelection selection;
  // Score only a seeded random sample of this many pool rows each round (Gal et al. 2017,
  // Baal's max_sample): the members predict just those rows (PoolSampleOfRound); 0: all.
  int64_t pool_sample = 0;
  int pool_sample_line = 0;
  // strategy "batchbald" (loop/acquire/batch_bald.h): the label configurations it keeps and the
  // top-BALD candidates it considers.
  BatchBaldOptions batch_bald;
  // Cold start: rounds 0 .. cold_start_rounds - 1 acquire by `cold_start_strategy` instead (an
  // ensemble trained on few labels scores badly; random picks beat its uncertainty there).
  int64_t cold_start_rounds = 0;
  std::string cold_start_strategy = "random";
  // The strategy round `round` acquires by.
  const std::string& StrategyOfRound(int64_t round) const {
    return round < cold_start_rounds ? cold_start_strategy : strategy;
  }
  // Whether round `round`'s acquisition reads the members' pool predictions: `random` does not
  // (every sample scores 0 and the seeded tie-break draws the picks), so its members need not
  // predict the pool for it.
  bool ScoresPredictionsInRound(int64_t round) const {
    return StrategyReadsPredictions(StrategyOfRound(round));
  }
};

struct OracleConfig {
  enum class Kind { kHiddenLabels, kCommand };
  Kind kind = Kind::kHiddenLabels;
  std::vector<std::string> command;  // argv, kCommand only
  double timeout_s = 0;              // kCommand: killed past this, failing the round; 0: none
};
const char* OracleKindName(OracleConfig::Kind kind);

// One [[update]] step: what changes the dataset between rounds, run in config order after the
// members are scored (docs/updates.md). Without any [[update]] table a run has one `acquire`
// step: today's strategy + oracle, configured by [acquisition] and [oracle].
struct UpdateStepConfig {
  enum class Kind { kAcquire, kCommand, kPseudoLabel, kImportNew, kRelabelOrDrop };
  Kind kind = Kind::kAcquire;
  std::string name;                  // for messages; default the kind, or the program's name
  std::vector<std::string> command;  // argv, kCommand only; resolved like the oracle's
  double timeout_s = 0;              // kCommand: killed past this, failing the round; 0: none
  // kCommand with predict = ["train"]: the members also predict the train table, and the
  // program finds those files in COHORT_PREDICTIONS (pool and test are always predicted).
  bool predict_train = false;
  // kPseudoLabel (self-training, pseudo_label.h): pool samples whose ensemble confidence is at
  // least `threshold` (and, with `agreement`, every member's vote is the ensemble's class) move
  // to train with the ensemble's class, the most confident first, at most `max_per_round` in
  // all and `max_per_class` per class (0: no cap).
  double threshold = 0;
  bool agreement = false;
  int64_t max_per_round = 0;
  int64_t max_per_class = 0;
  // kRelabelOrDrop (curation, relabel_or_drop.h): train samples whose stored label has an
  // ensemble probability below `threshold` are suspects, the least probable first, at most
  // `max_per_round` (0: no cap); `action` drops them from train, or asks the run's command
  // oracle for their labels and relabels those it answers differently.
  enum class Action { kDrop, kRelabel };
  Action action = Action::kDrop;
  // kImportNew: every .npy / .csv file in `directory` not imported before joins `table`, once
  // (update_step.h); a CSV's labels are in its `label_column`.
  std::string directory;  // absolute (resolved against the config file's directory)
  std::string table;      // default: the store's train table
  std::string label_column = "label";
  int line = 0;  // the [[update]] header's line
};
const char* UpdateKindName(UpdateStepConfig::Kind kind);
struct LoopConfig;
// Whether the run's update steps include `acquire` (the default single step does).
bool HasAcquireStep(const LoopConfig& config);
// Whether the run has an update step other than acquire. Such a run journals each step and its
// round's line lists them; its members predict the pool every round (a step may read it); a
// run of the default single acquire step journals its round alone, as it always has.
bool HasStepsBeyondAcquire(const LoopConfig& config);
// Whether an update step reads the members' predictions of the train table, so members predict
// it in every round that runs the update steps.
bool UpdatesReadTrainPredictions(const LoopConfig& config);

struct TargetMetric {
  // An ensemble test metric the loop computes every round: accuracy | nll | brier | ece in a
  // classification run, rmse | mae | nll | calibration_error in a regression run (the train
  // table's labels decide; the check against the store refuses a metric of the other kind,
  // since a target the loop never computes could never end a run).
  std::string metric;
  double value = 0;
  bool higher_is_better = true;  // accuracy; the others stop when at or below value
};

struct StopConfig {
  std::optional<int64_t> max_rounds;    // rounds that train (and, but the last, acquire)
  std::optional<int64_t> label_budget;  // labels the oracle may give over the whole run
  std::optional<TargetMetric> target;
  bool stop_when_pool_exhausted = true;
};

struct FailureConfig {
  // min_members' default: every member, however many there are.
  static constexpr int64_t kAllMembers = std::numeric_limits<int64_t>::max();

  int64_t retries = 2;  // fresh attempts after a failed one, per member and round
  // Members that must finish for the round to proceed. Default: all of them (kAllMembers);
  // ParseLoopConfig, which knows how many there are, turns that into their count, so a
  // parsed config always holds a number from 1 to members.size().
  int64_t min_members = kAllMembers;
  double heartbeat_timeout_s = 60;
  double attempt_timeout_s = 0;  // 0: no wall-clock limit per attempt
  double memory_limit_gb = 0;    // each worker's and script's address space; 0: no limit
  int64_t log_limit_mb = 64;     // a worker's or script's log is rotated past this; 0: no cap
};

struct LoopConfig {
  std::string path;  // the config file as given (error messages)
  std::string name;
  std::string run_dir;  // absolute, normalised; default <config dir>/runs/NAME
  StoreConfig store;
  // "auto" leaves `devices` empty and sets devices_auto; the controller resolves it with
  // launch::ResolveAutoDevices("auto", ...) when it knows the machine.
  bool devices_auto = false;
  std::vector<launch::Device> devices;
  int threads_per_cpu_device = 1;
  int members_per_device = 1;
  Launcher launcher = Launcher::kLocal;
  // launcher = "slurm": the [slurm] table (devices are then "auto": the allocation's slots, or
  // slurm.slots outside one; threads_per_cpu_device is slurm.cpus_per_member).
  launch::SlurmOptions slurm;
  std::vector<MemberConfig> members;
  AcquisitionConfig acquisition;
  OracleConfig oracle;
  // The [[update]] steps in order; ParseLoopConfig fills in the single default acquire step
  // when the file has none, so this is never empty in a parsed config.
  std::vector<UpdateStepConfig> updates;
  // Whether the file listed [[update]] tables (false: the default step), so the JSON and
  // fingerprint of a config without them stay as they were.
  bool updates_explicit = false;
  StopConfig stop;
  FailureConfig failure;
};

// The text of the config file `path`; NotFound names a missing file.
Result<std::string> ReadLoopConfigText(const std::string& path);

// Reads and validates `path`. Relative paths in it (run_dir, store.source, a command oracle's
// program when it contains a '/') are taken relative to the file's directory.
Result<LoopConfig> LoadLoopConfig(const std::string& path);

// The same from text; `path` names it in errors. `base_dir` resolves relative paths; empty:
// the directory of `path` (the controller passes the original one when it re-reads the copy
// kept in the run directory).
Result<LoopConfig> ParseLoopConfig(const std::string& text, const std::string& path,
                                   const std::string& base_dir = "");

// The whole config as canonical JSON (for the journal and `cohort status`).
nlohmann::json LoopConfigToJson(const LoopConfig& config);

// A hex digest of the parts a resume may not change (see CheckResumeCompatible): two
// configs with the same fingerprint may resume each other.
std::string LoopConfigFingerprint(const LoopConfig& config);

struct ConfigChange {
  std::string field;   // "stop.max_rounds", "member[2].optimizer.learning_rate"
  std::string before;  // compact JSON, "(none)" when absent
  std::string after;
  bool safe_on_resume = false;
};

// Every difference between two configs, in field order. Safe on resume: devices,
// threads_per_cpu_device, members_per_device, launcher, run_dir, everything in [stop] and
// [failure]. Anything else (name, store, members and their settings, acquisition, oracle)
// is not.
std::vector<ConfigChange> DiffLoopConfigs(const LoopConfig& before, const LoopConfig& after);

// OK when every difference is safe on resume; otherwise an InvalidArgument naming the first
// unsafe field and both values.
Status CheckResumeCompatible(const LoopConfig& old_config, const LoopConfig& new_config);

}  // namespace cohort::loop
