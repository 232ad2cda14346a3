// FaultInjectionEnv: an Env for tests that simulates a power loss and injects I/O errors.
//
// It wraps another Env (Env::Default() unless told otherwise) and keeps the model of what a
// power cut would leave on disk that LevelDB's FaultInjectionTestEnv keeps:
//   - for every file written through it, the size last made durable by Sync();
//   - for every directory, the entries created in it (files, hard links, subdirectories)
//     since its last SyncDir;
//   - the renames done since the target's directory was last synced, each with the source
//     name and the target's previous contents (or the fact that it did not exist).
// Every mutating operation is one "step": NewWritableFile, WritableFile::Append, Sync and
// Close, RenameFile, RemoveFile, SyncDir, LinkOrCopyFile and CreateDir. SetCrashAfter(n) lets
// steps 1..n run and makes step n+1 and every later one fail with Status::Aborted("injected
// crash"), so the caller stops exactly where a process that died there would have stopped.
// DropUnsyncedData() then puts the disk in the state the power loss leaves: un-synced renames
// undone (source back, target's old contents restored or the target removed), files cut
// back to their synced size, and entries created in a directory that was never synced
// afterwards removed.
//
// Separately, an operation can be made to fail with Status::IOError without being done
// (FailSyncOn for the common fsync case, SetIOErrorPredicate for anything else), to test
// error paths. Reads, LockFile and FileExists/FileSize/ListDir pass straight through and are
// not steps.
//
// Limits of the model: a removal is durable at once (a power cut never brings a removed file
// back); data past a file's synced size is dropped whole, never kept in part; files and
// directories the env did not create are taken as durable; a truncating NewWritableFile on
// an existing file leaves it empty after a power loss unless synced; the un-synced entries
// and renames of a directory are lost all together, never some of them, so a SyncDir that
// is missing but covered by a later SyncDir of the same directory goes unnoticed.
//
// With set_real_sync(false), Sync and SyncDir update the model without calling fsync: a test
// that only simulates crashes gets the same outcomes without waiting for the disk.
//
// Thread-safety: safe for concurrent use like any Env (one mutex guards the model and is held
// across each mutating operation, so those run one at a time). A WritableFile it returns is
// used by one thread at a time. DropUnsyncedData must not run concurrently with writes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/env.h"

namespace cohort::store {

// The mutating operations a FaultInjectionEnv counts as steps.
enum class FaultOp {
  kNewWritableFile,
  kAppend,
  kSync,
  kClose,
  kRenameFile,
  kRemoveFile,
  kSyncDir,
  kLinkOrCopyFile,
  kCreateDir,
};

// "NewWritableFile", "Append", ... for messages.
const char* FaultOpName(FaultOp op);

// One step about to run: the operation and the paths it touches.
struct FaultSite {
  FaultOp op = FaultOp::kAppend;
  std::string path;    // the file or directory operated on; the source for rename and link
  std::string target;  // the destination for rename and link; empty otherwise
  // The last component of `path` ("CURRENT.tmp") and of `target` ("CURRENT").
  std::string base_name() const;
  std::string target_base_name() const;
};

// Says whether a step should fail with an injected IOError.
using FaultPredicate = std::function<bool(const FaultSite&)>;

class FaultInjectionEnv final : public Env {
 public:
  // `base` does the real work and must outlive this env.
  explicit FaultInjectionEnv(Env* base = Env::Default());
  ~FaultInjectionEnv() override;
  FaultInjectionEnv(const FaultInjectionEnv&) = delete;
  FaultInjectionEnv& operator=(const FaultInjectionEnv&) = delete;

  // Lets the next `steps` steps (counted from now) run and makes every later one fail with
  // Status::Aborted("injected crash"). SetCrashAfter(0) fails the very next step.
  void SetCrashAfter(uint64_t steps);
  // Disarms the crash; steps run again.
  void ClearCrash();
  // True once a step was refused by the armed crash.
  bool crashed() const;
  // Steps run so far (refused steps are not counted; steps failed by an injected IOError
  // are). A test runs an operation once without a crash to learn how many steps it takes.
  uint64_t steps() const;

  // Makes every step for which `predicate` is true fail with Status::IOError, without doing
  // the operation. Replaces an earlier predicate. The predicate sees every step that is not
  // refused by the crash, in order (a test may record them), and runs under the env's mutex:
  // it must not call the env.
  void SetIOErrorPredicate(FaultPredicate predicate);
  // Shorthand: Sync() of a file whose base name is `base_name` fails with an IOError (the
  // data is not made durable).
  void FailSyncOn(const std::string& base_name);
  // Removes the IOError predicate.
  void ClearIOErrors();
  // Steps failed by an injected IOError so far.
  uint64_t injected_io_errors() const;

  // Turns real fsync calls on (the default) or off; the model is kept either way.
  void set_real_sync(bool real_sync);

  // Rewrites the disk to what a power loss at this moment would leave (see the header
  // paragraph), then forgets what it tracked, disarms the crash and sets steps() back to 0:
  // the env starts afresh, as after a reboot. WritableFiles opened before must not be used
  // afterwards. The IOError predicate and set_real_sync stay as they were.
  Status DropUnsyncedData();

  // Env.
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  Result<std::string> ReadFileToString(const std::string& path) override;
  Result<std::shared_ptr<const MappedFile>> MapReadOnly(const std::string& path) override;
  bool FileExists(const std::string& path) override;
  Result<uint64_t> FileSize(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& dir) override;
  Status CreateDir(const std::string& dir) override;
  Status RemoveFile(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status LinkOrCopyFile(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& dir) override;
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override;

 private:
  class TrackedFile;

  // Bytes written to a file through this env and how many of them are durable.
  struct FileState {
    uint64_t size = 0;
    uint64_t synced_size = 0;
  };

  // A rename not yet made durable by a SyncDir of the target's directory.
  struct PendingRename {
    std::string from;
    std::string to;
    std::optional<std::string> previous_target;        // contents; nullopt if `to` did not exist
    std::shared_ptr<FileState> previous_target_state;  // its model, if the env tracked it
  };

  // Counts a step and decides its fate: Aborted when the crash is armed and due, IOError
  // when the predicate says so, OK to go ahead. Called with mu_ held.
  Status BeginStepLocked(const FaultSite& site);
  // Records that `path` was created in its directory. Called with mu_ held.
  void NoteCreatedLocked(const std::string& path);

  // The file-level steps of TrackedFile.
  Status AppendTo(TrackedFile* file, std::span<const std::byte> data);
  Status SyncFile(TrackedFile* file);
  Status CloseFile(TrackedFile* file);

  Env* const base_;
  mutable std::mutex mu_;
  uint64_t steps_ = 0;
  std::optional<uint64_t> crash_at_step_;  // steps_ value at which steps start failing
  bool crashed_ = false;
  FaultPredicate io_error_predicate_;
  uint64_t injected_io_errors_ = 0;
  bool real_sync_ = true;
  std::map<std::string, std::shared_ptr<FileState>> files_;  // by normalized path
  std::map<std::string, std::set<std::string>> created_;     // directory -> entries created
  std::vector<PendingRename> renames_;                       // in the order they were done
};

}  // namespace cohort::store
