// File utilities for code that touches the filesystem directly (not through a store::Env):
// an owning file descriptor, a write loop, whole-file reads, and the durable, atomic
// replacement of a file.
//
// "Durably and atomically" is always the same four steps: write PATH's new content to a temp
// file, fsync it, rename it over PATH, fsync PATH's directory. After a crash PATH holds its
// old content or the whole new one, never a mix; once the call returns, the new content and
// its name survive a power loss.
//
// One implementation per layer. This file holds the one for plain POSIX callers (the .npy
// exporter, the checkpoint writer) and the primitives the POSIX Env is built from. The store
// and the loop write their files through a store::Env so that tests can inject faults and
// simulate crashes; their durable write is store::WriteFileAtomically (store/env.h), the same
// four steps as Env operations. It cannot live here: src/common depends on nothing of ours.
//
// Thread-safety: free functions without shared state, safe to call concurrently (two writers
// of the same PATH through WriteFileAtomically share PATH.tmp, so callers that may race pick
// their own temp names and use PublishFile). A ScopedFd is used by one thread at a time.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "common/status.h"

namespace cohort {

// Owns a file descriptor and closes it on scope exit, unless released. -1 holds nothing.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.release()) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing.
  int release() { return std::exchange(fd_, -1); }
  // Closes the descriptor held (ignoring errors) and takes `fd`.
  void reset(int fd = -1);
  // Closes now and reports a failure ("close PATH: ..."): for a file just written, close()
  // may be where a delayed write error (NFS, a full disk) shows. Holds nothing afterwards.
  Status Close(const std::string& path);

 private:
  int fd_ = -1;
};

// Writes all of `data` to `fd`, looping over short writes and EINTR. `path` names the file in
// the error ("write PATH: ...").
Status WriteAll(int fd, std::span<const std::byte> data, const std::string& path);

// The whole content of the file at `path` ("open PATH: ..." / "read PATH: ..." on failure).
Result<std::string> ReadFileToString(const std::string& path);

// The last line of the file at `path` that is not blank, trailing whitespace removed and cut to
// 300 characters; only the file's last 64 KiB are read. "" when the file is missing or blank.
std::string LastNonEmptyLine(const std::string& path);

// The directory holding `path`: "a/b" -> "a", "b" -> ".", "/b" -> "/". Trailing slashes are
// ignored, so "a/b/" -> "a" as well.
std::string ParentDir(const std::string& path);

// fsync of the directory `dir`: makes the entries created, renamed or removed in it durable.
Status SyncDir(const std::string& dir);

// Writes `parts`, one after another, to `path` durably and atomically (above) through the
// temp file `path` + ".tmp". On failure `path` is untouched and the temp file removed.
Status WriteFileAtomically(const std::string& path,
                           std::initializer_list<std::span<const std::byte>> parts);

// The last three steps for a temp file someone else wrote (a library that only writes to a
// path): fsyncs `tmp`, renames it over `path`, fsyncs the directory. `tmp` must be in
// `path`'s directory. `tmp` is removed if it cannot become `path`.
Status PublishFile(const std::string& tmp, const std::string& path);

// A temp name for a write of `path` that no other writer uses, for PublishFile:
// PATH.tmp.HOST.PID.N (N counts this process's temp names).
std::string UniqueTempName(const std::string& path);

// Removes `path`'s temp files (UniqueTempName's, and PATH.tmp.PID.N as older cohorts named
// them) whose writer ran on this host and no longer runs: what a writer killed mid-write
// leaves. Temp files of live writers and of other hosts (a shared filesystem) are left alone.
// Best effort: errors are ignored. Returns how many files were removed.
int RemoveStaleTempFiles(const std::string& path);

}  // namespace cohort
