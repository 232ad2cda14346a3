// Transaction: the store's only writer.
//
// Begin() takes the store's LOCK (one writer at a time; a second gets Busy naming the
// holder's pid), removes what an interrupted writer left behind, and starts from the
// generation CURRENT names. Appends write new segment files at once (O(k) bytes for k
// samples, never touching existing segments), and so do moves and relabels (a copy of the
// k rows they touch); removals change only the in-memory row lists. Commit() writes the changed
// tables' rows files, the manifest and then CURRENT, each synced before the next
// (docs/store-format.md, "Durability"), and returns the new generation number. A transaction that
// is destroyed without committing leaves CURRENT as it was and deletes the files it wrote. Moves,
// relabels and compaction copy rows only out of segments whose checksums hold; Begin refuses a
// store whose CURRENT was set back behind committed generations rather than delete them.
//
// Thread-safety: one thread at a time. Readers (Snapshot) never wait for a writer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "store/env.h"
#include "store/host_array.h"
#include "store/manifest.h"
#include "store/snapshot.h"

namespace cohort::store {

struct CommitOptions {
  // An empty commit (nothing changed) is refused unless this is set.
  bool allow_empty = false;
};

class Transaction {
 public:
  static Result<std::unique_ptr<Transaction>> Begin(const std::string& dir,
                                                    Env* env = Env::Default());
  // The store's writer lock, for a process that keeps the store to itself across several
  // transactions (a run's controller, for the whole run): other writers are refused with Busy
  // naming its pid meanwhile. Busy if another writer holds it.
  static Result<std::unique_ptr<FileLock>> LockStore(const std::string& dir,
                                                     Env* env = Env::Default());
  // Begin, under `held`: the lock LockStore gave for `dir`, which the caller keeps.
  static Result<std::unique_ptr<Transaction>> BeginHeld(const std::string& dir,
                                                        const FileLock& held,
                                                        Env* env = Env::Default());
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  uint64_t base_generation() const { return base_->generation(); }
  const Snapshot& base() const { return *base_; }
  const std::string& dir() const { return dir_; }

  bool HasTable(const std::string& name) const { return tables_.count(name) > 0; }
  Result<TableSchema> Schema(const std::string& table) const;
  std::vector<std::string> TableNames() const;
  Status CreateTable(const std::string& name, const TableSchema& schema);

  // Number of live rows and their sample ids, in table order, as this transaction sees them.
  Result<uint64_t> TableSize(const std::string& table) const;
  Result<std::vector<uint64_t>> TableIds(const std::string& table) const;

  // Appends features (n, *feature_shape) and labels (n,) / (n, *label_shape) (nullptr for a
  // table without labels). Features may be given as uint8 or float32 exactly as the schema
  // says; labels as int64 (class) or float32 (vector). Returns the ids given to the samples.
  Result<std::vector<uint64_t>> Append(const std::string& table, const HostArray& features,
                                       const HostArray* labels);
  // Drops samples from a table. NotFound naming the first unknown id; nothing changes then.
  Status Remove(const std::string& table, std::span<const uint64_t> ids);
  // Moves samples from one table to another, keeping their ids. The destination is created
  // with the source's schema if missing. Labels (n,...) replace the carried ones if given;
  // they are required when the source has no labels and the destination has.
  Status Move(const std::string& from, const std::string& to, std::span<const uint64_t> ids,
              const HostArray* labels = nullptr);
  // Gives live rows of a table new labels (k,) / (k, *label_shape), checked against the
  // schema as Append checks them, keeping their sample ids and their place in table order.
  // Like Move, it copies the rows' features and ids (out of sound segments only) into one new
  // segment with the new labels, so the old rows stay in their segments as dead rows, counted
  // by compaction exactly as removed ones. NotFound naming the first unknown ids,
  // InvalidArgument for repeated ids, wrong labels or a table without labels; nothing changes
  // then.
  Status Relabel(const std::string& table, std::span<const uint64_t> ids, const HostArray& labels);
  // Rewrites the live rows of every table whose dead fraction (dead rows / rows held in its
  // segments) is above `threshold` into one fresh segment. Returns the tables rewritten.
  Result<std::vector<std::string>> Compact(double threshold);

  // What Begin() found and repaired, one line each, for the caller to show as warnings: a
  // manifest newer than CURRENT it removed (an interrupted commit's). Empty on a clean store.
  const std::vector<std::string>& notes() const { return notes_; }

  // Makes everything durable and switches CURRENT. Returns the new generation. On an error
  // before CURRENT is replaced the store stays at the base generation; if only the final
  // directory fsync fails, CURRENT may already name the new generation (the store is sound
  // either way: read CURRENT to know which).
  Result<uint64_t> Commit(const std::string& note, CommitOptions options = {});

 private:
  struct TableState;
  Transaction(std::string dir, Env* env, std::unique_ptr<FileLock> lock,
              std::shared_ptr<const Snapshot> base);
  // The rest of Begin, once the writer lock is held (`lock`, or null under BeginHeld).
  static Result<std::unique_ptr<Transaction>> Begin(const std::string& dir, Env* env,
                                                    std::unique_ptr<FileLock> lock);
  Status CleanUpLeftovers();
  Result<TableState*> MutableTable(const std::string& name);
  Result<const TableState*> FindTable(const std::string& name) const;
  Status UnknownTable(const std::string& name) const;
  // Writes one segment of `rows` samples from row-major buffers; the new files are synced.
  Result<SegmentEntry> WriteSegment(const std::string& table, const TableSchema& schema,
                                    uint64_t rows, const std::byte* x, const std::byte* y,
                                    const uint64_t* ids);
  Result<FileEntry> WriteNpyFile(const std::string& name, Dtype dtype,
                                 std::span<const uint64_t> shape, const std::byte* data);
  Status MapSegment(TableState* table, const SegmentEntry& segment);
  // Rows are copied (Move, Compact) only out of sound segments: each segment `refs` point
  // into has its files' sizes and CRC-32s checked once per transaction. Corruption naming
  // the table and the damaged file otherwise, so damage is never sealed under a new checksum.
  Status VerifySegmentsOf(const std::string& table, const TableState& t,
                          std::span<const uint64_t> refs);

  std::string dir_;
  Env* env_;
  std::unique_ptr<FileLock> lock_;  // null under BeginHeld: the caller holds it
  std::shared_ptr<const Snapshot> base_;
  Manifest next_;  // counters and metadata of the generation being built
  std::map<std::string, std::unique_ptr<TableState>> tables_;
  std::vector<std::string> written_;  // files created by this transaction, removed on abort
  std::vector<std::shared_ptr<const MappedFile>> mapped_;
  std::set<uint64_t> verified_segments_;  // segments read and found sound, or written here
  std::vector<std::string> notes_;
  bool committed_ = false;
};

}  // namespace cohort::store
