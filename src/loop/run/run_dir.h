// The run directory: where one run keeps its store, journal, config and member outputs.
//
//   RUN_DIR/
//     loop.toml     the config as the run was started (a resume compares against it)
//     lock          held by the running controller (its pid inside), so one controller per run
//     store/        the run's own store, cloned from the configured source on first start
//     run.db        the journal (journal.h)
//     members/NAME/round-0003/attempt-1/{checkpoint.pt, predictions-pool.npy,
//                                        predictions-test.npy, worker.log}
//     workers/      one stderr log per worker process
//     oracle/round-0003/  a command oracle's input and output files
//
// OpenRunDir creates a run on first start and reopens it on the next ones. Creation is
// ordered so that a controller killed at any point leaves something the next start finishes:
// the store is cloned into store.partial and renamed into place, then the run is recorded in
// the journal, then loop.toml is written (tmp, fsync, rename); a start finds which steps are
// done and does the rest. A directory that holds other files and no run is refused.
//
// Thread-safety: an OpenRun is used by the controller thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "loop/config/config.h"
#include "loop/run/journal.h"
#include "store/env.h"

namespace cohort::loop {

// Paths inside a run directory, relative names first for the journal's columns.
struct RunPaths {
  std::string root;  // absolute

  std::string config() const { return root + "/loop.toml"; }
  std::string lock() const { return root + "/lock"; }
  std::string store() const { return root + "/store"; }
  std::string journal() const { return root + "/run.db"; }
  std::string workers() const { return root + "/workers"; }
  // "members/NAME/round-0003/attempt-1", relative to root.
  static std::string AttemptDir(const std::string& member, int64_t round, int attempt);
  // A file of an attempt (a protocol::file name), relative to root like `attempt_dir`.
  static std::string AttemptFile(const std::string& attempt_dir, std::string_view name) {
    return attempt_dir + "/" + std::string(name);
  }
  // "workers/cpu-0-1-0007.log": the stderr log of the 7th worker process started in this run
  // directory, on slot 1 of device cpu:0; relative to root.
  static std::string WorkerLog(const std::string& device, int slot, int number);
  // "oracle/round-0003", relative to root.
  static std::string OracleDir(int64_t round);
  // updates/round-RRRR/step-K: an update step's log, inputs and change set (K from 1).
  static std::string UpdateStepDir(int64_t round, size_t step);
  std::string Absolute(const std::string& relative) const { return root + "/" + relative; }
};

struct OpenRun {
  RunPaths paths;
  std::unique_ptr<store::FileLock> lock;
  std::unique_ptr<Journal> journal;
  RunRecord run;
  bool resumed = false;  // the run existed before this start
  // Safe differences between the config the run started with and this one (resume only).
  std::vector<ConfigChange> changes;
};

// Creates or reopens the run `config` names (see above). `config_text` is the config file's
// text, kept in the run directory and the journal. Errors: the run directory is in use
// (Busy, naming the holder's pid), holds unrelated files, the config differs from the run's
// in a way a resume may not change (InvalidArgument naming the field), the source store
// cannot be cloned.
Result<OpenRun> OpenRunDir(const LoopConfig& config, const std::string& config_text,
                           store::Env* env = store::Env::Default());

// Who holds RUN_DIR/lock: the pid of a live controller, or nullopt when nobody does (the run
// is not running). Does not take the lock.
std::optional<int64_t> RunLockHolder(const std::string& run_dir);

// The run's files (loop.toml, members' specs) are written durably and atomically through the
// store's Env, by the store's one implementation: path.tmp, fsync, rename, fsync of the directory.
using store::WriteFileAtomically;

}  // namespace cohort::loop
