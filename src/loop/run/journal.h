// Journal: the run's durable record, an SQLite database RUN_DIR/run.db.
//
// The controller writes here everything it needs to resume a killed run exactly and
// everything a user wants to ask afterwards: the run (its config and where its store came
// from), each round (input and output generation, phase, timings, ensemble test metrics),
// each member attempt (device, pid, exit, metrics, checkpoint, logs), epoch metrics,
// per-member test metrics and the samples each round acquired. docs/journal.md documents
// every table and column for querying with `sqlite3`.
//
// Durability: the database runs in WAL mode with synchronous=FULL, and every write method is
// one transaction (BEGIN IMMEDIATE ... COMMIT): when it returns OK the change survives a
// crash or power loss; when the process dies inside it, the database reopens with the state
// before the call. The schema version lives in PRAGMA user_version; a journal written by a
// newer cohort is refused rather than misread.
//
// Errors: every failure is a Status with one line naming the file, what the statement was
// for, and SQLite's message. SQLITE_BUSY (another writer held the lock past busy_timeout_ms)
// is Busy; a damaged or foreign file is Corruption; a constraint (duplicate round, unknown
// run) is InvalidArgument or AlreadyExists; I/O failures are IOError.
//
// Thread-safety: a Journal is safe for concurrent use (calls are serialised by an internal
// mutex). Several Journal objects, in one process or in several, may open the same file at
// once: readers never block the writer and see the last committed state. Do not carry an
// open Journal across fork(); open a new one in the child.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace cohort::loop {

// The schema version this build writes and reads (PRAGMA user_version).
inline constexpr int kJournalSchemaVersion = 6;

enum class RunStatus { kRunning, kFinished, kFailed, kStopped };
enum class RoundStatus {
  kTraining,
  kPredicting,
  kAcquiring,
  kLabelling,
  kCommitting,
  kDone,
  kFailed
};
// kFailed and kKilled are the member's failures (it erred, crashed, hung or overran) and count
// against its retries; kInterrupted is an attempt the controller's own stop ended (Ctrl-C
// twice, a controller error, the controller's death), which does not.
enum class AttemptStatus { kRunning, kDone, kFailed, kKilled, kInterrupted };

// The text stored in the database ("running", "labelling", "killed", ...).
std::string_view RunStatusName(RunStatus s);
std::string_view RoundStatusName(RoundStatus s);
std::string_view AttemptStatusName(AttemptStatus s);

// What starts a run.
struct RunStart {
  std::string name;
  std::string config_toml;         // the config text as the run was started
  std::string config_fingerprint;  // e.g. a hash of the normalised config
  std::string source_store;        // path of the store the run's store was cloned from
  uint64_t source_generation = 0;  // the generation cloned
};

struct RunRecord {
  int64_t id = 0;
  std::string name;
  std::string config_toml;
  std::string config_fingerprint;
  std::string source_store;
  uint64_t source_generation = 0;
  std::string started_at;  // ISO 8601 UTC
  RunStatus status = RunStatus::kRunning;
  std::optional<std::string> ended_at;
};

// Seconds spent in each phase of a round.
struct PhaseTimings {
  double train_s = 0;
  double predict_s = 0;
  double acquire_s = 0;
  double label_s = 0;
  double commit_s = 0;
  double idle_s = 0;  // waiting for a free device or worker start-up
};

// The ensemble's metrics on the test table; unset when not computed.
struct EnsembleTestMetrics {
  std::optional<double> accuracy;
  std::optional<double> nll;
  std::optional<double> brier;
  std::optional<double> ece;
  // Regression runs (nll above is shared): of the ensemble's mean, and its predictive
  // intervals' calibration (regression.h).
  std::optional<double> rmse;
  std::optional<double> mae;
  std::optional<double> calibration_error;
  // Classification runs with at least 2 test rows: the temperature fitted to the ensemble mean
  // on the test table, and NLL and ECE calibrated without seeing the rows they score
  // (CrossFitEnsembleTemperature, loop/ensemble/calibration.h).
  std::optional<double> temperature;
  std::optional<double> nll_calibrated;
  std::optional<double> ece_calibrated;
};

// What a finished round produced.
struct RoundOutcome {
  uint64_t output_generation = 0;  // the store generation the round committed
  int64_t labels_total = 0;        // labelled samples in that generation
  PhaseTimings timings;
  EnsembleTestMetrics test;
};

struct RoundRecord {
  int64_t run_id = 0;
  int64_t round = 0;
  uint64_t input_generation = 0;
  std::optional<uint64_t> output_generation;
  RoundStatus status = RoundStatus::kTraining;
  std::string started_at;
  std::optional<std::string> ended_at;
  PhaseTimings timings;  // zeros until the round finishes
  std::optional<int64_t> labels_total;
  EnsembleTestMetrics test;
  std::optional<std::string> error;  // FailRound's message
};

// What starts a member attempt.
struct AttemptStart {
  int64_t run_id = 0;
  int64_t round = 0;
  std::string member;
  int attempt = 1;  // 1 for the first try, 2 for the first retry, ...
  std::string device;
  int64_t pid = 0;  // 0 when not known yet (see SetAttemptPid)
  std::string log_path;
};

// How a member attempt ended.
struct AttemptEnd {
  AttemptStatus status = AttemptStatus::kDone;
  std::string exit;              // "exit 0", "signal 9 (heartbeat timeout)", "error: ..."
  std::string metrics_json;      // a JSON object; empty = none
  std::string checkpoint;        // empty = none
  std::string predictions_json;  // JSON, e.g. {"pool": "...npy", "test": "...npy"}; empty = none
};

struct AttemptRecord {
  int64_t id = 0;
  int64_t run_id = 0;
  int64_t round = 0;
  std::string member;
  int attempt = 0;
  std::string device;
  std::optional<int64_t> pid;
  AttemptStatus status = AttemptStatus::kRunning;
  std::optional<std::string> exit;
  std::string started_at;
  std::optional<std::string> ended_at;
  std::optional<std::string> metrics_json;
  std::optional<std::string> checkpoint;
  std::optional<std::string> log_path;
  std::optional<std::string> predictions_json;
  std::optional<std::string> node;  // the host its worker ran on
  std::optional<std::string> gpus;  // the CUDA_VISIBLE_DEVICES its worker saw
};

struct EpochRecord {
  int64_t epoch = 0;
  double train_loss = 0;
  std::optional<double> val_loss;
  std::optional<double> val_accuracy;
  std::optional<double> lr;  // NULL when the member did not report it (outside members)
  double seconds = 0;
};

// What one [[update]] step of a round did (schema version 5).
struct UpdateStepRecord {
  int64_t step = 0;  // from 1, in config order
  std::string kind;  // acquire | command | pseudo_label | relabel_or_drop | import_new
  std::string name;
  std::optional<uint64_t> output_generation;  // none when it committed nothing
  std::string summary;  // "train: 2 added, 3 removed" (the commit note's words), "no changes"
  // Per table: {"train": {"added": 2, "removed": 3, "moved_in": 0, ...}}; {} without changes.
  std::string counts_json = "{}";
  double seconds = 0;
};

// One acquired sample; its rank is its position in the vector given to RecordAcquisition.
struct AcquiredSample {
  int64_t sample_id = 0;
  double score = 0;
};

struct JournalOptions {
  int busy_timeout_ms = 10000;  // how long a reader or a writer waits for another's lock
  // A reader's open (`cohort status`, reports): never creates, upgrades or writes anything,
  // works on a read-only run directory, and needs the journal at the current schema version.
  bool read_only = false;
};

// What to do about a journal SQLite finds damaged, for messages and docs/journal.md.
inline constexpr char kJournalRecoveryHint[] =
    "move it aside and copy what SQLite can still read into a new one (docs/journal.md, \"A "
    "damaged journal\")";

class Journal {
 public:
  // Opens `path` (normally RUN_DIR/run.db), creating it with the current schema when it does
  // not exist (unless read_only), and runs SQLite's quick_check on it. InvalidArgument for a
  // journal of a newer schema version or an SQLite database that is not a journal; Corruption
  // for a file that is not an SQLite database or that the quick check finds damaged (the
  // message says what to do).
  static Result<std::unique_ptr<Journal>> Open(const std::string& path,
                                               const JournalOptions& options = {});
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  const std::string& path() const { return path_; }

  // ---- runs
  // Records a new run with status running; returns its id. AlreadyExists for a taken name.
  Result<int64_t> StartRun(const RunStart& run);
  // The run called `name`; NotFound if none.
  Result<RunRecord> FindRun(const std::string& name);
  // Sets the run's status; a terminal status stamps ended_at, kRunning (resume) clears it.
  Status SetRunStatus(int64_t run_id, RunStatus status);

  // ---- rounds
  // Records round `round` of the run as training on `input_generation`. AlreadyExists if the
  // round is already recorded (a resumed run continues it; see LastRound).
  Status BeginRound(int64_t run_id, int64_t round, uint64_t input_generation);
  // Moves a round to another phase (kTraining .. kCommitting).
  Status SetRoundPhase(int64_t run_id, int64_t round, RoundStatus phase);
  // Marks the round done with what it produced.
  Status FinishRound(int64_t run_id, int64_t round, const RoundOutcome& outcome);
  // Marks the round failed with a one-line reason.
  Status FailRound(int64_t run_id, int64_t round, const std::string& error);

  // ---- attempts
  // Records a running attempt; returns its id. AlreadyExists for a repeated
  // (run, round, member, attempt).
  Result<int64_t> BeginAttempt(const AttemptStart& attempt);
  // Where the attempt runs: its worker's host name and the GPU ids it sees (empty: none), as
  // its `hello` said.
  Status SetAttemptPlacement(int64_t attempt_id, const std::string& node, const std::string& gpus);
  Status SetAttemptPid(int64_t attempt_id, int64_t pid);
  Status FinishAttempt(int64_t attempt_id, const AttemptEnd& end);
  // Appends epoch rows to an attempt, all in one transaction.
  Status AddEpochs(int64_t attempt_id, const std::vector<EpochRecord>& epochs);
  // Records (or replaces) a member's test metrics for a round, in one transaction.
  Status RecordMemberMetrics(int64_t run_id, int64_t round, const std::string& member,
                             const std::map<std::string, double>& metrics);
  // Records the round's acquired samples, best first (rank 0 = samples[0]), in one
  // transaction. Replaces picks recorded earlier for the round (an acquisition redone after a
  // resume).
  Status RecordAcquisition(int64_t run_id, int64_t round,
                           const std::vector<AcquiredSample>& samples);

  // ---- readers
  // The run's highest-numbered round, or nullopt when it has none.
  Result<std::optional<RoundRecord>> LastRound(int64_t run_id);
  // Every round of the run in order.
  Result<std::vector<RoundRecord>> RoundsOf(int64_t run_id);
  // Every attempt of a round, ordered by member name then attempt number.
  Result<std::vector<AttemptRecord>> AttemptsOfRound(int64_t run_id, int64_t round);
  Result<std::vector<EpochRecord>> EpochsOf(int64_t attempt_id);
  // member -> metric -> value.
  Result<std::map<std::string, std::map<std::string, double>>> MemberMetricsOf(int64_t run_id,
                                                                               int64_t round);
  // The round's picks ordered by rank.
  Result<std::vector<AcquiredSample>> AcquisitionsOf(int64_t run_id, int64_t round);
  // Records what an update step did. A step recorded already (a resumed round whose step had
  // committed and been recorded before the stop) keeps its first record.
  Status RecordUpdateStep(int64_t run_id, int64_t round, const UpdateStepRecord& step);
  // The round's update steps in order.
  Result<std::vector<UpdateStepRecord>> UpdateStepsOf(int64_t run_id, int64_t round);

 private:
  class Stmt;
  class Txn;
  Journal(std::string path, sqlite3* db);

  Status CreateOrUpgradeSchema();
  Status Init(const JournalOptions& options);
  Status InitReadOnly();
  Status QuickCheck();
  Status Exec(const char* sql, const char* purpose);
  // A prepared statement for `sql`, compiled on first use and kept for the Journal's life.
  Result<sqlite3_stmt*> Prepare(const char* sql, const char* purpose);
  Status Error(int rc, const char* purpose) const;
  // Runs a one-statement update of a round inside a transaction; NotFound if no row changed.
  template <typename BindFn>
  Status UpdateRound(int64_t run_id, int64_t round, const char* sql, const char* purpose,
                     BindFn bind);

  const std::string path_;
  sqlite3* db_;
  std::mutex mu_;
  std::map<const char*, sqlite3_stmt*> stmts_;
  mutable int last_rc_ = 0;  // the code of the last error Error() made
};

}  // namespace cohort::loop
