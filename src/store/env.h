// Env: the store's only way to touch the filesystem.
//
// Every file operation of the store goes through an Env, as in LevelDB, so tests can swap
// in an implementation that injects faults or simulates a crash (dropping data that was
// never fsync'd). Env::Default() is the POSIX implementation.
//
// Thread-safety: Env implementations are safe for concurrent use. A WritableFile is used
// by one thread at a time. A MappedFile is immutable and may be shared across threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace cohort::store {

// A file being written from the start. Data reaches stable storage only after Sync().
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(std::span<const std::byte> data) = 0;
  virtual Status Sync() = 0;
  virtual Status Close() = 0;
  Status Append(std::string_view s) {
    return Append(std::as_bytes(std::span<const char>(s.data(), s.size())));
  }
};

// A whole file mapped read-only. The mapping stays valid while the object lives, even if
// the file is renamed or unlinked meanwhile.
class MappedFile {
 public:
  virtual ~MappedFile() = default;
  virtual const std::byte* data() const = 0;
  virtual std::size_t size() const = 0;
  virtual const std::string& path() const = 0;
};

// An exclusive advisory lock held on a file; released when the object is destroyed.
class FileLock {
 public:
  virtual ~FileLock() = default;
};

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide POSIX Env. Never deleted.
  static Env* Default();

  // Creates (or truncates) `path` for writing.
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  virtual Result<std::string> ReadFileToString(const std::string& path) = 0;
  virtual Result<std::shared_ptr<const MappedFile>> MapReadOnly(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  virtual Result<uint64_t> FileSize(const std::string& path) = 0;
  // Names in `dir`, without "." and "..", in no particular order.
  virtual Result<std::vector<std::string>> ListDir(const std::string& dir) = 0;
  virtual Status CreateDir(const std::string& dir) = 0;
  virtual Status RemoveFile(const std::string& path) = 0;
  // Atomically replaces `to` with `from`; durable once the directory is synced.
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // Hard-links `to` to `from`; falls back to a byte copy (synced) across filesystems.
  virtual Status LinkOrCopyFile(const std::string& from, const std::string& to) = 0;
  // fsync of a directory: makes created, renamed and removed entries durable.
  virtual Status SyncDir(const std::string& dir) = 0;
  // Takes an exclusive lock on `path` (created if missing) without waiting. Busy if another
  // process, or another lock object in this process, holds it.
  virtual Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) = 0;
};

// Joins a directory and a file name with one '/'.
std::string JoinPath(const std::string& dir, const std::string& name);

// Writes `contents` to `path` durably and atomically through `env`: to path + ".tmp", Sync,
// Close, RenameFile over `path`, SyncDir of its directory. After a crash `path` holds its old
// content or the whole new one; after an error the temp file may be left behind, for the next
// write to replace. The one such writer for everything that writes through an Env (the
// store's CURRENT and manifests, the loop's run files); common/file_util.h has the same steps
// for code outside any Env.
Status WriteFileAtomically(Env* env, const std::string& path, std::string_view contents);

}  // namespace cohort::store
