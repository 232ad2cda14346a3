// Snapshot: one generation of a store, mapped read-only.
//
// Opening a snapshot reads the generation's manifest, maps every file it names and checks
// each file's size and .npy header against the manifest (full checksums are `Verify`'s job).
// Store files are immutable, so a snapshot sees exactly its generation for as long as it is
// held, whatever commits happen meanwhile; readers take no lock.
//
// Table gives zero-copy pointers to a row's features and a gather of a list of rows into a
// caller's contiguous buffer (the training batch path).
//
// Thread-safety: a Snapshot and its Tables are immutable after Open and safe to share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "store/env.h"
#include "store/host_array.h"
#include "store/manifest.h"
#include "store/schema.h"

namespace cohort::store {

class Table {
 public:
  const std::string& name() const { return name_; }
  const TableSchema& schema() const { return entry_->schema; }
  const TableEntry& entry() const { return *entry_; }
  uint64_t size() const { return locs_.size(); }

  // Zero-copy access to live row `row` (0 <= row < size()); the pointers stay valid while the
  // snapshot lives. label() is nullptr for tables without labels.
  const std::byte* features(uint64_t row) const {
    const Loc& l = locs_[row];
    return segs_[l.seg].x + l.row * feature_bytes_;
  }
  const std::byte* label(uint64_t row) const {
    const Loc& l = locs_[row];
    return segs_[l.seg].y == nullptr ? nullptr : segs_[l.seg].y + l.row * label_bytes_;
  }
  uint64_t id(uint64_t row) const {
    const Loc& l = locs_[row];
    return segs_[l.seg].ids[l.row];
  }
  // The row ref (segment << 32 | row) stored for live row `row`.
  uint64_t ref(uint64_t row) const;

  // The segments the table's rows live in. A segment's bytes never change once written (a
  // relabel writes a new one), so its id names the same rows for the life of the store: a
  // copy of a segment kept elsewhere (on a GPU) stays valid across generations.
  struct Segment {
    uint64_t id = 0;
    uint64_t rows = 0;  // rows stored, live or not
    const std::byte* features = nullptr;
    const std::byte* labels = nullptr;  // nullptr for tables without labels
  };
  size_t segment_count() const { return segs_.size(); }
  Segment segment(size_t i) const {
    const Seg& s = segs_[i];
    return {s.id, s.rows, s.x, s.y};
  }
  // Live row `row` as (index into the segments, row within that segment).
  std::pair<size_t, uint64_t> location(uint64_t row) const {
    return {locs_[row].seg, locs_[row].row};
  }

  // Copies the features (labels) of `rows` into `dst`, rows.size() * row-bytes long, in order.
  // InvalidArgument if a row is out of range (nothing useful is written then).
  Status GatherFeatures(std::span<const uint64_t> rows, std::byte* dst) const;
  Status GatherLabels(std::span<const uint64_t> rows, std::byte* dst) const;

  // Whole-table copies, for export and tests.
  HostArray ReadFeatures() const;
  HostArray ReadLabels() const;  // empty shape for tables without labels
  std::vector<uint64_t> Ids() const;

  // The table rows of the given sample ids; NotFound naming the first unknown id.
  Result<std::vector<uint64_t>> RowsOfIds(std::span<const uint64_t> ids) const;

 private:
  friend class Snapshot;
  friend class Transaction;  // reads segments by ref, not by live row
  struct Seg {
    uint64_t id = 0;
    uint64_t rows = 0;
    const std::byte* x = nullptr;
    const std::byte* y = nullptr;
    const uint64_t* ids = nullptr;
  };
  struct Loc {
    uint32_t seg;  // index into segs_
    uint32_t row;
  };
  Status Gather(std::span<const uint64_t> rows, bool labels, std::byte* dst) const;
  std::string name_;
  const TableEntry* entry_ = nullptr;
  size_t feature_bytes_ = 0;
  size_t label_bytes_ = 0;
  std::vector<Seg> segs_;
  std::vector<Loc> locs_;
};

class Snapshot {
 public:
  // Opens `generation`, or the one CURRENT names when it is nullopt.
  static Result<std::shared_ptr<const Snapshot>> Open(const std::string& dir,
                                                      std::optional<uint64_t> generation = {},
                                                      Env* env = Env::Default());
  // Opens the generation `manifest` describes, already read, without consulting CURRENT
  // (verify reads every manifest, also when CURRENT is damaged).
  static Result<std::shared_ptr<const Snapshot>> OpenManifest(const std::string& dir,
                                                              Manifest manifest,
                                                              Env* env = Env::Default());

  const std::string& dir() const { return dir_; }
  uint64_t generation() const { return manifest_.generation; }
  const Manifest& manifest() const { return manifest_; }
  std::vector<std::string> table_names() const;
  bool has_table(const std::string& name) const { return tables_.count(name) > 0; }
  // NotFound naming the table, the generation and the tables that exist.
  Result<const Table*> table(const std::string& name) const;

 private:
  Snapshot() = default;
  std::string dir_;
  Manifest manifest_;
  std::vector<std::shared_ptr<const MappedFile>> files_;
  std::map<std::string, std::unique_ptr<Table>> tables_;
};

}  // namespace cohort::store
