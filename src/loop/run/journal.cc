#include "loop/run/journal.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <utility>

#include "common/time_text.h"

namespace cohort::loop {

namespace {

namespace fs = std::filesystem;

constexpr const char* kRunStatusNames[] = {"running", "finished", "failed", "stopped"};
constexpr const char* kRoundStatusNames[] = {"training",   "predicting", "acquiring", "labelling",
                                             "committing", "done",       "failed"};
constexpr const char* kAttemptStatusNames[] = {"running", "done", "failed", "killed",
                                               "interrupted"};

template <typename E, std::size_t N>
bool ParseEnum(const char* const (&names)[N], std::string_view text, E* out) {
  for (std::size_t i = 0; i < N; i++) {
    if (text == names[i]) {
      *out = static_cast<E>(i);
      return true;
    }
  }
  return false;
}

// The attempts table's columns, shared by the schema and the upgrade that rebuilds it.
constexpr const char* kAttemptsColumns = R"sql((
  id               INTEGER PRIMARY KEY,
  run_id           INTEGER NOT NULL,
  round            INTEGER NOT NULL,
  member           TEXT NOT NULL,
  attempt          INTEGER NOT NULL,
  device           TEXT NOT NULL,
  pid              INTEGER,
  status           TEXT NOT NULL
                   CHECK (status IN ('running', 'done', 'failed', 'killed', 'interrupted')),
  exit             TEXT,
  started_at       TEXT NOT NULL,
  ended_at         TEXT,
  metrics_json     TEXT CHECK (metrics_json IS NULL OR json_valid(metrics_json)),
  checkpoint       TEXT,
  log_path         TEXT,
  predictions_json TEXT CHECK (predictions_json IS NULL OR json_valid(predictions_json)),
  node             TEXT,
  gpus             TEXT,
  UNIQUE (run_id, round, member, attempt),
  FOREIGN KEY (run_id, round) REFERENCES rounds(run_id, round)
))sql";

// The schema (version 6). docs/journal.md documents every column; keep the two in step.
constexpr const char* kSchemaTemplate = R"sql(
CREATE TABLE runs (
  id                 INTEGER PRIMARY KEY,
  name               TEXT NOT NULL UNIQUE,
  config_toml        TEXT NOT NULL,
  config_fingerprint TEXT NOT NULL,
  source_store       TEXT NOT NULL,
  source_generation  INTEGER NOT NULL,
  started_at         TEXT NOT NULL,
  status             TEXT NOT NULL
                     CHECK (status IN ('running', 'finished', 'failed', 'stopped')),
  ended_at           TEXT
);
CREATE TABLE rounds (
  run_id            INTEGER NOT NULL REFERENCES runs(id),
  round             INTEGER NOT NULL,
  input_generation  INTEGER NOT NULL,
  output_generation INTEGER,
  status            TEXT NOT NULL CHECK (status IN ('training', 'predicting', 'acquiring',
                                         'labelling', 'committing', 'done', 'failed')),
  started_at        TEXT NOT NULL,
  ended_at          TEXT,
  train_s           REAL,
  predict_s         REAL,
  acquire_s         REAL,
  label_s           REAL,
  commit_s          REAL,
  idle_s            REAL,
  labels_total      INTEGER,
  test_accuracy     REAL,
  test_nll          REAL,
  test_brier        REAL,
  test_ece          REAL,
  error             TEXT,
  test_rmse         REAL,
  test_mae          REAL,
  test_calibration  REAL,
  test_temperature  REAL,
  test_nll_calibrated REAL,
  test_ece_calibrated REAL,
  PRIMARY KEY (run_id, round)
);
CREATE TABLE attempts {attempts};
CREATE TABLE epochs (
  attempt_id   INTEGER NOT NULL REFERENCES attempts(id),
  epoch        INTEGER NOT NULL,
  train_loss   REAL,
  val_loss     REAL,
  val_accuracy REAL,
  lr           REAL,
  seconds      REAL,
  PRIMARY KEY (attempt_id, epoch)
);
CREATE TABLE member_metrics (
  run_id INTEGER NOT NULL,
  round  INTEGER NOT NULL,
  member TEXT NOT NULL,
  metric TEXT NOT NULL,
  value  REAL,
  PRIMARY KEY (run_id, round, member, metric),
  FOREIGN KEY (run_id, round) REFERENCES rounds(run_id, round)
);
CREATE TABLE acquisitions (
  run_id    INTEGER NOT NULL,
  round     INTEGER NOT NULL,
  rank      INTEGER NOT NULL,
  sample_id INTEGER NOT NULL,
  score     REAL,
  PRIMARY KEY (run_id, round, rank),
  UNIQUE (run_id, round, sample_id),
  FOREIGN KEY (run_id, round) REFERENCES rounds(run_id, round)
);
{update_steps}
)sql";

// Version 5 added what each [[update]] step of a round did.
constexpr const char* kUpdateStepsTable = R"sql(
CREATE TABLE IF NOT EXISTS update_steps (
  run_id            INTEGER NOT NULL,
  round             INTEGER NOT NULL,
  step              INTEGER NOT NULL,
  kind              TEXT NOT NULL,
  name              TEXT NOT NULL,
  output_generation INTEGER,
  summary           TEXT NOT NULL,
  counts_json       TEXT NOT NULL CHECK (json_valid(counts_json)),
  seconds           REAL,
  PRIMARY KEY (run_id, round, step),
  FOREIGN KEY (run_id, round) REFERENCES rounds(run_id, round)
);
)sql";

// Version 2 added the attempt status 'interrupted' (an attempt the controller's own stop
// ended: not the member's failure, so a resume does not count it against its retries).
// Version 1 journalled those as 'killed', told apart only by their exit text; the upgrade
// reads that text once. SQLite cannot change a CHECK in place: the table is rebuilt (with
// foreign keys off, so the epochs pointing at its rows are left alone).
constexpr const char* kMigrateV1ToV2Template = R"sql(
CREATE TABLE attempts_v2 {attempts};
INSERT INTO attempts_v2 (id, run_id, round, member, attempt, device, pid, status, exit,
  started_at, ended_at, metrics_json, checkpoint, log_path, predictions_json)
  SELECT id, run_id, round, member, attempt, device, pid,
  CASE WHEN status = 'killed' AND (exit LIKE 'interrupted%' OR exit LIKE 'the controller%')
       THEN 'interrupted' ELSE status END,
  exit, started_at, ended_at, metrics_json, checkpoint, log_path, predictions_json
  FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_v2 RENAME TO attempts;
)sql";

// Version 3 added where an attempt ran: the node and the GPU ids its worker saw.
constexpr const char* kMigrateV2ToV3 = R"sql(
ALTER TABLE attempts ADD COLUMN node TEXT;
ALTER TABLE attempts ADD COLUMN gpus TEXT;
)sql";

// Version 4 added the regression metrics of a round's ensemble (a run whose train table has
// float targets): RMSE, MAE and calibration error; test_nll serves both kinds of run.
constexpr const char* kMigrateV3ToV4 = R"sql(
ALTER TABLE rounds ADD COLUMN test_rmse REAL;
ALTER TABLE rounds ADD COLUMN test_mae REAL;
ALTER TABLE rounds ADD COLUMN test_calibration REAL;
)sql";

// Version 6 added a classification round's calibration on the test table: the temperature fitted
// to the ensemble mean there, and NLL and ECE at a temperature cross-fitted on the other half of
// the table (loop/ensemble/calibration.h).
constexpr const char* kMigrateV5ToV6 = R"sql(
ALTER TABLE rounds ADD COLUMN test_temperature REAL;
ALTER TABLE rounds ADD COLUMN test_nll_calibrated REAL;
ALTER TABLE rounds ADD COLUMN test_ece_calibrated REAL;
)sql";

// `sql` with its {attempts} replaced by the attempts table's columns (and {update_steps}, where
// it has it, by that table).
std::string WithAttemptsColumns(std::string sql) {
  const std::string marker = "{attempts}";
  sql.replace(sql.find(marker), marker.size(), kAttemptsColumns);
  const std::string steps = "{update_steps}";
  if (size_t at = sql.find(steps); at != std::string::npos) {
    sql.replace(at, steps.size(), kUpdateStepsTable);
  }
  return sql;
}

// The column list every round reader selects, in the order ReadRound expects.
#define COHORT_ROUND_COLUMNS                                                                \
  "run_id, round, input_generation, output_generation, status, started_at, ended_at, "      \
  "train_s, predict_s, acquire_s, label_s, commit_s, idle_s, labels_total, test_accuracy, " \
  "test_nll, test_brier, test_ece, error, test_rmse, test_mae, test_calibration, "          \
  "test_temperature, test_nll_calibrated, test_ece_calibrated"

#define COHORT_ATTEMPT_COLUMNS                                                            \
  "id, run_id, round, member, attempt, device, pid, status, exit, started_at, ended_at, " \
  "metrics_json, checkpoint, log_path, predictions_json, node, gpus"

}  // namespace

std::string_view RunStatusName(RunStatus s) { return kRunStatusNames[static_cast<int>(s)]; }
std::string_view RoundStatusName(RoundStatus s) { return kRoundStatusNames[static_cast<int>(s)]; }
std::string_view AttemptStatusName(AttemptStatus s) {
  return kAttemptStatusNames[static_cast<int>(s)];
}

// A prepared statement in use: binds by 1-based index, steps, and is reset (bindings cleared)
// when it goes out of scope so the cached statement is ready for the next call.
class Journal::Stmt {
 public:
  Stmt(Journal* j, sqlite3_stmt* s, const char* purpose) : j_(j), s_(s), purpose_(purpose) {}
  ~Stmt() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  void Int(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }
  void Real(int i, double v) { sqlite3_bind_double(s_, i, v); }
  void Real(int i, const std::optional<double>& v) {
    if (v)
      sqlite3_bind_double(s_, i, *v);
    else
      sqlite3_bind_null(s_, i);
  }
  void Text(int i, std::string_view v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  // Binds NULL for an empty string.
  void TextOrNull(int i, std::string_view v) {
    if (v.empty())
      sqlite3_bind_null(s_, i);
    else
      Text(i, v);
  }

  // Steps once: true with a row, false when done.
  Result<bool> Step() {
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return j_->Error(rc, purpose_);
  }
  // Steps a statement that returns no rows.
  Status Run() {
    Result<bool> r = Step();
    if (!r.ok()) return r.status();
    sqlite3_reset(s_);
    return Status::OK();
  }

  int64_t ColInt(int c) const { return sqlite3_column_int64(s_, c); }
  bool IsNull(int c) const { return sqlite3_column_type(s_, c) == SQLITE_NULL; }
  std::optional<int64_t> ColOptInt(int c) const {
    return IsNull(c) ? std::nullopt : std::optional<int64_t>(ColInt(c));
  }
  std::optional<double> ColOptReal(int c) const {
    return IsNull(c) ? std::nullopt : std::optional<double>(sqlite3_column_double(s_, c));
  }
  double ColReal(int c) const { return sqlite3_column_double(s_, c); }
  std::string ColText(int c) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, c));
    return p == nullptr ? std::string() : std::string(p, sqlite3_column_bytes(s_, c));
  }
  std::optional<std::string> ColOptText(int c) const {
    return IsNull(c) ? std::nullopt : std::optional<std::string>(ColText(c));
  }
  const char* purpose() const { return purpose_; }

 private:
  Journal* j_;
  sqlite3_stmt* s_;
  const char* purpose_;
};

// BEGIN IMMEDIATE on construction (Begin), ROLLBACK on destruction unless committed.
class Journal::Txn {
 public:
  explicit Txn(Journal* j) : j_(j) {}
  ~Txn() {
    if (open_) sqlite3_exec(j_->db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;
  Status Begin(const char* purpose) {
    purpose_ = purpose;
    COHORT_RETURN_IF_ERROR(j_->Exec("BEGIN IMMEDIATE", purpose));
    open_ = true;
    return Status::OK();
  }
  Status Commit() {
    COHORT_RETURN_IF_ERROR(j_->Exec("COMMIT", purpose_));
    open_ = false;
    return Status::OK();
  }

 private:
  Journal* j_;
  const char* purpose_ = "";
  bool open_ = false;
};

Journal::Journal(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

Journal::~Journal() {
  for (auto& [sql, stmt] : stmts_) sqlite3_finalize(stmt);
  sqlite3_close_v2(db_);
}

Status Journal::Error(int rc, const char* purpose) const {
  last_rc_ = rc;
  const char* detail = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  std::string msg = path_ + ": " + purpose + ": " + detail;
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Status::Busy(msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return Status::Corruption(msg);
    case SQLITE_CONSTRAINT:
      if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY) {
        return Status::AlreadyExists(msg);
      }
      return Status::InvalidArgument(msg);
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
    case SQLITE_ERROR:
      return Status::InvalidArgument(msg);
    default:
      return Status::IOError(msg);
  }
}

Status Journal::Exec(const char* sql, const char* purpose) {
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? Status::OK() : Error(rc, purpose);
}

Result<sqlite3_stmt*> Journal::Prepare(const char* sql, const char* purpose) {
  auto it = stmts_.find(sql);
  if (it != stmts_.end()) return it->second;
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, purpose);
  stmts_.emplace(sql, stmt);
  return stmt;
}

#define COHORT_STMT_(var, sql, purpose)                                     \
  COHORT_ASSIGN_OR_RETURN(sqlite3_stmt* var##_raw_, Prepare(sql, purpose)); \
  Stmt var(this, var##_raw_, purpose)

namespace {

// A reader may not be able to make the -shm file WAL mode needs (a read-only directory): it
// then reads the file as immutable, which is right there, since nothing can write it either.
bool NeedsImmutableRead(int rc) {
  int primary = rc & 0xff;
  return primary == SQLITE_CANTOPEN || primary == SQLITE_READONLY || primary == SQLITE_IOERR;
}

std::string FileUri(const std::string& path, bool immutable) {
  std::string uri = "file:";
  for (char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      uri += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    } else {
      uri += c;
    }
  }
  return uri + (immutable ? "?mode=ro&immutable=1" : "?mode=ro");
}

}  // namespace

Result<std::unique_ptr<Journal>> Journal::Open(const std::string& path,
                                               const JournalOptions& options) {
  if (options.read_only) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return Status::NotFound(path + ": no journal");
    if (fs::file_size(path, ec) == 0 && !ec) {
      return Status::InvalidArgument(path +
                                     ": the journal is an empty file (a run that never "
                                     "started, or a damaged one)");
    }
  }
  for (bool immutable : {false, true}) {
    if (immutable && !options.read_only) break;
    sqlite3* db = nullptr;
    int flags =
        SQLITE_OPEN_NOMUTEX | (options.read_only ? SQLITE_OPEN_READONLY | SQLITE_OPEN_URI
                                                 : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    std::string name = options.read_only ? FileUri(path, immutable) : path;
    int rc = sqlite3_open_v2(name.c_str(), &db, flags, nullptr);
    std::unique_ptr<Journal> j(new Journal(path, db));
    if (rc != SQLITE_OK) {
      Status s = j->Error(rc, "open");
      return db == nullptr ? Status::IOError(path + ": open: out of memory") : s;
    }
    sqlite3_extended_result_codes(db, 1);
    // Readers wait too: a writer's open (journal_mode=WAL) and the checkpoint its last close
    // runs hold locks a reader cannot share; `cohort report --watch` met one as a run ended.
    sqlite3_busy_timeout(db, options.busy_timeout_ms);
    Status init = options.read_only ? j->InitReadOnly() : j->Init(options);
    if (options.read_only && !immutable && !init.ok() && NeedsImmutableRead(j->last_rc_)) {
      continue;
    }
    if (init.code() == Status::Code::kCorruption &&
        init.message().find(kJournalRecoveryHint) == std::string::npos) {
      return Status::Corruption(std::string(init.message()) + "; " + kJournalRecoveryHint);
    }
    COHORT_RETURN_IF_ERROR(init);
    return j;
  }
  return Status::IOError(path + ": open: cannot read the journal");
}

Status Journal::InitReadOnly() {
  {
    COHORT_STMT_(uv, "PRAGMA user_version", "read the schema version");
    COHORT_ASSIGN_OR_RETURN(bool row, uv.Step());
    int64_t version = row ? uv.ColInt(0) : 0;
    if (version != kJournalSchemaVersion) {
      return Status::InvalidArgument(fmt::format(
          "{}: journal schema version {}; this build reads version {}{}", path_, version,
          kJournalSchemaVersion,
          version == 0                      ? " (not a cohort journal)"
          : version < kJournalSchemaVersion ? " (the next `cohort run` of this run upgrades it)"
                                            : " (it was written by a newer cohort)"));
    }
  }
  COHORT_RETURN_IF_ERROR(QuickCheck());
  return Exec("PRAGMA query_only=ON", "make the connection read-only");
}

Status Journal::QuickCheck() {
  COHORT_STMT_(check, "PRAGMA quick_check(1)", "check the journal");
  auto row = check.Step();
  std::string verdict;
  if (!row.ok()) {
    verdict = std::string(row.status().message());
    if (row.status().code() != Status::Code::kCorruption) return row.status();
  } else {
    verdict = *row ? check.ColText(0) : "no answer";
    if (verdict == "ok") return Status::OK();
  }
  // SQLite's verdict spans lines ("*** in database main ***\nTree 3 page 3 ..."): one line.
  for (char& c : verdict) {
    if (c == '\n') c = ' ';
  }
  return Status::Corruption(fmt::format("{}: the journal is damaged (SQLite quick_check: {}); {}",
                                        path_, verdict, kJournalRecoveryHint));
}

Status Journal::Init(const JournalOptions& options) {
  // The first statement that reads the file: a file that is not a database fails here.
  {
    COHORT_STMT_(mode, "PRAGMA journal_mode=WAL", "open the journal (WAL mode)");
    COHORT_ASSIGN_OR_RETURN(bool row, mode.Step());
    if (!row || mode.ColText(0) != "wal") {
      return Status::IOError(path_ + ": set WAL mode: the database refused journal_mode=WAL");
    }
  }
  COHORT_RETURN_IF_ERROR(Exec("PRAGMA synchronous=FULL", "set synchronous=FULL"));
  COHORT_RETURN_IF_ERROR(QuickCheck());
  // Create (or upgrade) the schema once; another process may be doing the same, so check under
  // the lock. Foreign keys are enforced from the end of this step on: an upgrade rebuilds a
  // table other tables point at.
  COHORT_RETURN_IF_ERROR(CreateOrUpgradeSchema());
  return Exec("PRAGMA foreign_keys=ON", "enable foreign keys");
}

Status Journal::CreateOrUpgradeSchema() {
  Txn txn(this);
  COHORT_RETURN_IF_ERROR(txn.Begin("create the schema"));
  int64_t version = 0;
  {
    COHORT_STMT_(uv, "PRAGMA user_version", "read the schema version");
    COHORT_ASSIGN_OR_RETURN(bool row, uv.Step());
    if (row) version = uv.ColInt(0);
  }
  if (version > kJournalSchemaVersion) {
    return Status::InvalidArgument(path_ + ": journal schema version " + std::to_string(version) +
                                   " was written by a newer cohort; this build reads up to " +
                                   std::to_string(kJournalSchemaVersion));
  }
  if (version == kJournalSchemaVersion) return txn.Commit();
  if (version == 0) {
    COHORT_STMT_(count, "SELECT count(*) FROM sqlite_schema", "inspect the database");
    COHORT_ASSIGN_OR_RETURN(bool row, count.Step());
    if (row && count.ColInt(0) != 0) {
      return Status::InvalidArgument(path_ +
                                     ": an SQLite database that is not a cohort journal "
                                     "(tables present, user_version 0)");
    }
  }
  if (version == 1) {
    // The rebuilt table has every column of the current version.
    COHORT_RETURN_IF_ERROR(Exec(WithAttemptsColumns(kMigrateV1ToV2Template).c_str(),
                                "upgrade the journal from schema version 1"));
  } else if (version == 2) {
    COHORT_RETURN_IF_ERROR(Exec(kMigrateV2ToV3, "upgrade the journal from schema version 2"));
  }
  if (version >= 1 && version <= 3) {
    COHORT_RETURN_IF_ERROR(Exec(kMigrateV3ToV4, "upgrade the journal to schema version 4"));
  }
  if (version >= 1 && version <= 4) {
    COHORT_RETURN_IF_ERROR(Exec(kUpdateStepsTable, "upgrade the journal to schema version 5"));
  }
  if (version >= 1 && version <= 5) {
    COHORT_RETURN_IF_ERROR(Exec(kMigrateV5ToV6, "upgrade the journal to schema version 6"));
  } else if (version == 0) {
    COHORT_RETURN_IF_ERROR(Exec(WithAttemptsColumns(kSchemaTemplate).c_str(), "create the schema"));
  }
  COHORT_RETURN_IF_ERROR(
      Exec(("PRAGMA user_version=" + std::to_string(kJournalSchemaVersion)).c_str(),
           "set the schema version"));
  return txn.Commit();
}

// ---- runs

Result<int64_t> Journal::StartRun(const RunStart& run) {
  std::lock_guard lock(mu_);
  const char* purpose = "start run";
  Txn txn(this);
  COHORT_RETURN_IF_ERROR(txn.Begin(purpose));
  COHORT_STMT_(st,
               "INSERT INTO runs (name, config_toml, config_fingerprint, source_store, "
               "source_generation, started_at, status) VALUES (?, ?, ?, ?, ?, ?, 'running')",
               purpose);
  st.Text(1, run.name);
  st.Text(2, run.config_toml);
  st.Text(3, run.config_fingerprint);
  st.Text(4, run.source_store);
  st.Int(5, static_cast<int64_t>(run.source_generation));
  st.Text(6, NowIso8601());
  COHORT_RETURN_IF_ERROR(st.Run());
  int64_t id = sqlite3_last_insert_rowid(db_);
  COHORT_RETURN_IF_ERROR(txn.Commit());
  return id;
}

Result<RunRecord> Journal::FindRun(const std::string& name) {
  std::lock_guard lock(mu_);
  COHORT_STMT_(st,
               "SELECT id, name, config_toml, config_fingerprint, source_store, "
               "source_generation, started_at, status, ended_at FROM runs WHERE name = ?",
               "find run");
  st.Text(1, name);
  COHORT_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return Status::NotFound(path_ + ": no run named '" + name + "'");
  RunRecord r;
  r.id = st.ColInt(0);
  r.name = st.ColText(1);
  r.config_toml = st.ColText(2);
  r.config_fingerprint = st.ColText(3);
  r.source_store = st.ColText(4);
  r.source_generation = static_cast<uint64_t>(st.ColInt(5));
  r.started_at = st.ColText(6);
  std::string status = st.ColText(7);
  if (!ParseEnum(kRunStatusNames, status, &r.status)) {
    return Status::Corruption(path_ + ": run '" + name + "' has unknown status '" + status + "'");
  }
  r.ended_at = st.ColOptText(8);
  return r;
}

Status Journal::SetRunStatus(int64_t run_id, RunStatus status) {
  std::lock_guard lock(mu_);
  const char* purpose = "set run status";
  Txn txn(this);
  COHORT_RETURN_IF_ERROR(txn.Begin(purpose));
  COHORT_STMT_(st, "UPDATE runs SET status = ?, ended_at = ? WHERE id = ?", purpose);
  st.Text(1, RunStatusName(status));
  st.TextOrNull(2, status == RunStatus::kRunning ? std::string() : NowIso8601());
  st.Int(3, run_id);
  COHORT_RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_) == 0) {
    return Status::NotFound(path_ + ": " + purpose + ": no run with id " + std::to_string(run_id));
  }
  return txn.Commit();
}

// ---- rounds

template <typename BindFn>
Status Journal::UpdateRound(int64_t run_id, int64_t round, const char* sql, const char* purpose,
                            BindFn bind) {
  std::lock_guard lock(mu_);
  Txn txn(this);
  COHORT_RETURN_IF_ERROR(txn.Begin(purpose));
  COHORT_STMT_(st, sql, purpose);
  // The statement's last two parameters are the run id and the round.
  int n = bind(st);
  st.Int(n + 1, run_id);
  st.Int(n + 2, round);
  COHORT_RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_) == 0) {
    return Status::NotFound(path_ + ": " + purpose + ": run " + std::to_string(run_id) +
                            " has no round " + std::to_string(round));
  }
  return txn.Commit();
}

Status Journal::BeginRound(int64_t run_id, int64_t round, uint64_t input_generation) {
  std::lock_guard lock(mu_);
  const char* purpose = "begin round";
  Txn txn(this);
  COHORT_RETURN_IF_ERROR(txn.Begin(purpose));
  COHORT_STMT_(st,
               "INSERT INTO rounds (run_id, round, input_generation, status, started_at) "
               "VALUES (?, ?, ?, 'training', ?)",
               purpose);
  st.Int(1, run_id);
  st.Int(2, round);
  st.Int(3, static_cast<int64_t>(input_generation));
  st.Text(4, NowIso8601());
  COHORT_RETURN_IF_ERROR(st.Run());
  return txn.Commit();
}

Status Journal::SetRoundPhase(int64_t run_id, int64_t round, RoundStatus phase) {
  if (phase == RoundStatus::kDone || phase == RoundStatus::kFailed) {
    return Status::InvalidArgument(
        path_ + ": set round phase: use FinishRound or FailRound to end a round");
  }
  return UpdateRound(run_id, round, "UPDATE rounds SET status = ? WHERE run_id = ? AND round = ?",
                     "set round phase", [&](Stmt& st) {
                       st.Text(1, RoundStatusName(phase));
                       return 1;
                     });
}

Status Journal::FinishRound(int64_t run_id, int64_t round, const RoundOutcome& o) {
  return UpdateRound(
      run_id, round,
      "UPDATE rounds SET status = 'done', ended_at = ?, output_generation = ?, labels_total = ?, "
      "train_s = ?, predict_s = ?, acquire_s = ?, label_s = ?, commit_s = ?, idle_s = ?, "
      "test_accuracy = ?, test_nll = ?, test_brier = ?, test_ece = ?, test_rmse = ?, test_mae = ?, "
      "test_calibration = ?, test_temperature = ?, test_nll_calibrated = ?, "
      "test_ece_calibrated = ?, error = NULL "
      "WHERE run_id = ? AND round = ?",
      "finish round", [&](Stmt& st) {
        st.Text(1, NowIso8601());
        st.Int(2, static_cast<int64_t>(o.output_generation));
        st.Int(3, o.labels_total);
        st.Real(4, o.timings.train_s);
        st.Real(5, o.timings.predict_s);
        st.Real(6, o.timings.acquire_s);
        st.Real(7, o.timings.label_s);
        st.Real(8, o.timings.commit_s);
        st.Real(9, o.timings.idle_s);
        st.Real(10, o.test.accuracy);
        st.Real(11, o.test.nll);
        st.Real(12, o.test.brier);
        st.Real(13, o.test.ece);
        st.Real(14, o.test.rmse);
        st.Real(15, o.test.mae);
        st.Real(16, o.test.calibration_error);
        st.Real(17, o.test.temperature);
        st.Real(18, o.test.nll_calibrated);
        st.Real(19, o.test.ece_calibrated);
        return 19;
      });
}

Status Journal::FailRound(int64_t run_id, int64_t round, const std::string& error) {
  return UpdateRound(
      run_id, round,
      "UPDATE rounds SET status = 'failed', ended_at = ?, error = ? WHERE run_id = ? AND round = ?",
      "fail round", [&](Stmt& st) {
        st.Text(1, NowIso8601());
        st.Text(2, error);
        return 2;
      });
}

// ---- attempts

Result<int64_t> Journal::BeginAttempt(const AttemptStart& a) {
  std::lock_guard lock(mu_);
  const char* purpose = "begin attempt";
  Txn txn(this);
  COHORT_RETURN_IF_ERROR(txn.Begin(purpose));
  COHORT_STMT_(st,
               "INSERT INTO attempts (run_id, round, member, attempt, device, pid, status, "
               "started_at, log_path) VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?)",
               purpose);
  st.Int(1, a.run_id);
  st.Int(2, a.round);
  st.Text(3, a.member);
  st.Int(4, a.attempt);
  st.Text(5, a.device);
  if (a.pid != 0) st.Int(6, a.pid);
  st.Text(7, NowIso8601());
  st.TextOrNull(8, a.log_path);
  COHORT_RETURN_IF_ERROR(st.Run());
  int64_t id = sqlite3_last_insert_rowid(db_);
  COHORT_RETURN_IF_ERROR(txn.Commit());
  return id;
}

Status Journal::SetAttemptPlacement(int64_t attempt_id, const std::string& node,
                                    const std::string& gpus) {
  std::lock_guard lock(mu_);
  const char* purpose = "set attempt placement";
  Txn txn(this);
  COHORT_RETURN_IF_ERROR(txn.Begin(purpose));
  COHORT_STMT_(st, "UPDATE attempts SET node = ?, gpus = ? WHERE id = ?", purpose);
  st.TextOrNull(1, node);
  st.TextOrNull(2, gpus);
  st.Int(3, attempt_id);
  COHORT_RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_) == 0) {
    return Status::NotFound(path_ + ": " + purpose + ": no attempt " + std::to_string(attempt_id));
  }
  return txn.Commit();
}

Status Journal::SetAttemptPid(int64_t attempt_id, int64_t pid) {
  std::lock_guard lock(mu_);
  const char* purpose = "set attempt pid";
  Txn txn(this);
  COHORT_RETURN_IF_ERROR(txn.Begin(purpose));
  COHORT_STMT_(st, "UPDATE attempts SET pid = ? WHERE id = ?", purpose);
  st.Int(1, pid);
  st.Int(2, attempt_id);
  COHORT_RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_) == 0) {
    return Status::NotFound(path_ + ": " + purpose + ": no attempt " + std::to_string(attempt_id));
  }
  return txn.Commit();
}

Status Journal::FinishAttempt(int64_t attempt_id, const AttemptEnd& end) {
  std::lock_guard lock(mu_);
  const char* purpose = "finish attempt";
  Txn txn(this);
  COHORT_RETURN_IF_ERROR(txn.Begin(purpose));
  COHORT_STMT_(st,
               "UPDATE attempts SET status = ?, exit = ?, ended_at = ?, metrics_json = ?, "
               "checkpoint = ?, predictions_json = ? WHERE id = ?",
               purpose);
  st.Text(1, AttemptStatusName(end.status));
  st.TextOrNull(2, end.exit);
  st.Text(3, NowIso8601());
  st.TextOrNull(4, end.metrics_json);
  st.TextOrNull(5, end.checkpoint);
  st.TextOrNull(6, end.predictions_json);
  st.Int(7, attempt_id);
  COHORT_RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_) == 0) {
    return Status::NotFound(path_ + ": " + purpose + ": no attempt " + std::to_string(attempt_id));
  }
  return txn.Commit();
}

// SQLite stores a NaN as NULL, which would read back as 0 (a diverged member looking
// perfect): non-finite values are refused before anything is written.
static Status RequireFinite(const std::string& path, const char* purpose, const std::string& what,
                            double v) {
  if (std::isfinite(v)) return Status::OK();
  return Status::InvalidArgument(path + ": " + purpose + ": " + what + " is " + std::to_string(v) +
                                 " (only finite values are journaled)");
}

Status Journal::AddEpochs(int64_t attempt_id, const std::vector<EpochRecord>& epochs) {
  std::lock_guard lock(mu_);
  const char* purpose = "add epochs";
  for (const EpochRecord& e : epochs) {
    const std::string at = "epoch " + std::to_string(e.epoch) + " ";
    COHORT_RETURN_IF_ERROR(RequireFinite(path_, purpose, at + "train_loss", e.train_loss));
    if (e.val_loss)
      COHORT_RETURN_IF_ERROR(RequireFinite(path_, purpose, at + "val_loss", *e.val_loss));
    if (e.val_accuracy) {
      COHORT_RETURN_IF_ERROR(RequireFinite(path_, purpose, at + "val_accuracy", *e.val_accuracy));
    }
    if (e.lr) COHORT_RETURN_IF_ERROR(RequireFinite(path_, purpose, at + "lr", *e.lr));
    COHORT_RETURN_IF_ERROR(RequireFinite(path_, purpose, at + "seconds", e.seconds));
  }
  Txn txn(this);
  COHORT_RETURN_IF_ERROR(txn.Begin(purpose));
  COHORT_STMT_(st,
               "INSERT INTO epochs (attempt_id, epoch, train_loss, val_loss, val_accuracy, lr, "
               "seconds) VALUES (?, ?, ?, ?, ?, ?, ?)",
               purpose);
  for (const EpochRecord& e : epochs) {
    st.Int(1, attempt_id);
    st.Int(2, e.epoch);
    st.Real(3, e.train_loss);
    st.Real(4, e.val_loss);
    st.Real(5, e.val_accuracy);
    st.Real(6, e.lr);
    st.Real(7, e.seconds);
    COHORT_RETURN_IF_ERROR(st.Run());
  }
  return txn.Commit();
}

Status Journal::RecordMemberMetrics(int64_t run_id, int64_t round, const std::string& member,
                                    const std::map<std::string, double>& metrics) {
  std::lock_guard lock(mu_);
  const char* purpose = "record member metrics";
  for (const auto& [name, value] : metrics) {
    COHORT_RETURN_IF_ERROR(RequireFinite(path_, purpose, member + " " + name, value));
  }
  Txn txn(this);
  COHORT_RETURN_IF_ERROR(txn.Begin(purpose));
  COHORT_STMT_(st,
               "INSERT OR REPLACE INTO member_metrics (run_id, round, member, metric, value) "
               "VALUES (?, ?, ?, ?, ?)",
               purpose);
  for (const auto& [name, value] : metrics) {
    st.Int(1, run_id);
    st.Int(2, round);
    st.Text(3, member);
    st.Text(4, name);
    st.Real(5, value);
    COHORT_RETURN_IF_ERROR(st.Run());
  }
  return txn.Commit();
}

Status Journal::RecordAcquisition(int64_t run_id, int64_t round,
                                  const std::vector<AcquiredSample>& samples) {
  std::lock_guard lock(mu_);
  const char* purpose = "record acquisition";
  Txn txn(this);
  COHORT_RETURN_IF_ERROR(txn.Begin(purpose));
  {
    COHORT_STMT_(del, "DELETE FROM acquisitions WHERE run_id = ? AND round = ?", purpose);
    del.Int(1, run_id);
    del.Int(2, round);
    COHORT_RETURN_IF_ERROR(del.Run());
  }
  COHORT_STMT_(st,
               "INSERT INTO acquisitions (run_id, round, rank, sample_id, score) "
               "VALUES (?, ?, ?, ?, ?)",
               purpose);
  for (std::size_t i = 0; i < samples.size(); i++) {
    st.Int(1, run_id);
    st.Int(2, round);
    st.Int(3, static_cast<int64_t>(i));
    st.Int(4, samples[i].sample_id);
    st.Real(5, samples[i].score);
    COHORT_RETURN_IF_ERROR(st.Run());
  }
  return txn.Commit();
}

// ---- readers

namespace {

template <typename S>
Result<RoundRecord> ReadRound(const S& st, const std::string& path) {
  RoundRecord r;
  r.run_id = st.ColInt(0);
  r.round = st.ColInt(1);
  r.input_generation = static_cast<uint64_t>(st.ColInt(2));
  if (auto g = st.ColOptInt(3)) r.output_generation = static_cast<uint64_t>(*g);
  std::string status = st.ColText(4);
  if (!ParseEnum(kRoundStatusNames, status, &r.status)) {
    return Status::Corruption(path + ": round " + std::to_string(r.round) +
                              " has unknown status '" + status + "'");
  }
  r.started_at = st.ColText(5);
  r.ended_at = st.ColOptText(6);
  r.timings.train_s = st.ColReal(7);
  r.timings.predict_s = st.ColReal(8);
  r.timings.acquire_s = st.ColReal(9);
  r.timings.label_s = st.ColReal(10);
  r.timings.commit_s = st.ColReal(11);
  r.timings.idle_s = st.ColReal(12);
  r.labels_total = st.ColOptInt(13);
  r.test.accuracy = st.ColOptReal(14);
  r.test.nll = st.ColOptReal(15);
  r.test.brier = st.ColOptReal(16);
  r.test.ece = st.ColOptReal(17);
  r.error = st.ColOptText(18);
  r.test.rmse = st.ColOptReal(19);
  r.test.mae = st.ColOptReal(20);
  r.test.calibration_error = st.ColOptReal(21);
  r.test.temperature = st.ColOptReal(22);
  r.test.nll_calibrated = st.ColOptReal(23);
  r.test.ece_calibrated = st.ColOptReal(24);
  return r;
}

}  // namespace

Result<std::optional<RoundRecord>> Journal::LastRound(int64_t run_id) {
  std::lock_guard lock(mu_);
  COHORT_STMT_(st,
               "SELECT " COHORT_ROUND_COLUMNS
               " FROM rounds WHERE run_id = ? ORDER BY round DESC LIMIT 1",
               "read the last round");
  st.Int(1, run_id);
  COHORT_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return std::optional<RoundRecord>();
  COHORT_ASSIGN_OR_RETURN(RoundRecord r, ReadRound(st, path_));
  return std::optional<RoundRecord>(std::move(r));
}

Result<std::vector<RoundRecord>> Journal::RoundsOf(int64_t run_id) {
  std::lock_guard lock(mu_);
  COHORT_STMT_(st, "SELECT " COHORT_ROUND_COLUMNS " FROM rounds WHERE run_id = ? ORDER BY round",
               "read rounds");
  st.Int(1, run_id);
  std::vector<RoundRecord> out;
  while (true) {
    COHORT_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    COHORT_ASSIGN_OR_RETURN(RoundRecord r, ReadRound(st, path_));
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::vector<AttemptRecord>> Journal::AttemptsOfRound(int64_t run_id, int64_t round) {
  std::lock_guard lock(mu_);
  COHORT_STMT_(st,
               "SELECT " COHORT_ATTEMPT_COLUMNS
               " FROM attempts WHERE run_id = ? AND round = ? ORDER BY member, attempt",
               "read attempts");
  st.Int(1, run_id);
  st.Int(2, round);
  std::vector<AttemptRecord> out;
  while (true) {
    COHORT_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    AttemptRecord a;
    a.id = st.ColInt(0);
    a.run_id = st.ColInt(1);
    a.round = st.ColInt(2);
    a.member = st.ColText(3);
    a.attempt = static_cast<int>(st.ColInt(4));
    a.device = st.ColText(5);
    a.pid = st.ColOptInt(6);
    std::string status = st.ColText(7);
    if (!ParseEnum(kAttemptStatusNames, status, &a.status)) {
      return Status::Corruption(path_ + ": attempt " + std::to_string(a.id) +
                                " has unknown status '" + status + "'");
    }
    a.exit = st.ColOptText(8);
    a.started_at = st.ColText(9);
    a.ended_at = st.ColOptText(10);
    a.metrics_json = st.ColOptText(11);
    a.checkpoint = st.ColOptText(12);
    a.log_path = st.ColOptText(13);
    a.predictions_json = st.ColOptText(14);
    a.node = st.ColOptText(15);
    a.gpus = st.ColOptText(16);
    out.push_back(std::move(a));
  }
  return out;
}

Result<std::vector<EpochRecord>> Journal::EpochsOf(int64_t attempt_id) {
  std::lock_guard lock(mu_);
  COHORT_STMT_(st,
               "SELECT epoch, train_loss, val_loss, val_accuracy, lr, seconds FROM epochs "
               "WHERE attempt_id = ? ORDER BY epoch",
               "read epochs");
  st.Int(1, attempt_id);
  std::vector<EpochRecord> out;
  while (true) {
    COHORT_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    EpochRecord e;
    e.epoch = st.ColInt(0);
    e.train_loss = st.ColReal(1);
    e.val_loss = st.ColOptReal(2);
    e.val_accuracy = st.ColOptReal(3);
    e.lr = st.ColOptReal(4);
    e.seconds = st.ColReal(5);
    out.push_back(e);
  }
  return out;
}

Result<std::map<std::string, std::map<std::string, double>>> Journal::MemberMetricsOf(
    int64_t run_id, int64_t round) {
  std::lock_guard lock(mu_);
  COHORT_STMT_(st,
               "SELECT member, metric, value FROM member_metrics WHERE run_id = ? AND round = ?",
               "read member metrics");
  st.Int(1, run_id);
  st.Int(2, round);
  std::map<std::string, std::map<std::string, double>> out;
  while (true) {
    COHORT_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out[st.ColText(0)][st.ColText(1)] = st.ColReal(2);
  }
  return out;
}

Result<std::vector<AcquiredSample>> Journal::AcquisitionsOf(int64_t run_id, int64_t round) {
  std::lock_guard lock(mu_);
  COHORT_STMT_(st,
               "SELECT sample_id, score FROM acquisitions WHERE run_id = ? AND round = ? "
               "ORDER BY rank",
               "read acquisitions");
  st.Int(1, run_id);
  st.Int(2, round);
  std::vector<AcquiredSample> out;
  while (true) {
    COHORT_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out.push_back({st.ColInt(0), st.ColReal(1)});
  }
  return out;
}

Status Journal::RecordUpdateStep(int64_t run_id, int64_t round, const UpdateStepRecord& r) {
  std::lock_guard lock(mu_);
  const char* purpose = "record an update step";
  COHORT_RETURN_IF_ERROR(RequireFinite(path_, purpose, "seconds", r.seconds));
  COHORT_STMT_(st,
               // Only the key's conflict is passed over: OR IGNORE would also drop a row that
               // fails its CHECK without a word.
               "INSERT INTO update_steps (run_id, round, step, kind, name, output_generation, "
               "summary, counts_json, seconds) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
               "ON CONFLICT (run_id, round, step) DO NOTHING",
               purpose);
  st.Int(1, run_id);
  st.Int(2, round);
  st.Int(3, r.step);
  st.Text(4, r.kind);
  st.Text(5, r.name);
  if (r.output_generation) st.Int(6, static_cast<int64_t>(*r.output_generation));
  st.Text(7, r.summary);
  st.Text(8, r.counts_json);
  st.Real(9, r.seconds);
  return st.Run();
}

Result<std::vector<UpdateStepRecord>> Journal::UpdateStepsOf(int64_t run_id, int64_t round) {
  std::lock_guard lock(mu_);
  COHORT_STMT_(st,
               "SELECT step, kind, name, output_generation, summary, counts_json, seconds FROM "
               "update_steps WHERE run_id = ? AND round = ? ORDER BY step",
               "read update steps");
  st.Int(1, run_id);
  st.Int(2, round);
  std::vector<UpdateStepRecord> out;
  while (true) {
    COHORT_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    UpdateStepRecord r;
    r.step = st.ColInt(0);
    r.kind = st.ColText(1);
    r.name = st.ColText(2);
    if (auto g = st.ColOptInt(3)) r.output_generation = static_cast<uint64_t>(*g);
    r.summary = st.ColText(4);
    r.counts_json = st.ColText(5);
    r.seconds = st.ColOptReal(6).value_or(0);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace cohort::loop
