#include "store/transaction.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "common/closest_name.h"
#include "common/time_text.h"

namespace cohort::store {

struct Transaction::TableState {
  struct SegView {
    uint64_t rows = 0;
    const std::byte* x = nullptr;
    const std::byte* y = nullptr;
    const uint64_t* ids = nullptr;
  };

  TableSchema schema;
  bool changed = false;  // needs a new rows file (created, appended, removed, moved, compacted)
  std::optional<TableEntry> base_entry;         // as in the base generation, if the table existed
  std::map<uint64_t, SegmentEntry> segments;    // every segment rows may point into
  std::unordered_map<uint64_t, SegView> views;  // the same, mapped
  std::vector<uint64_t> refs;                   // live rows in table order

  uint64_t IdOf(uint64_t ref) const { return views.at(RefSegment(ref)).ids[RefRow(ref)]; }
  const std::byte* FeaturesOf(uint64_t ref) const {
    return views.at(RefSegment(ref)).x + RefRow(ref) * schema.feature_row_bytes();
  }
  const std::byte* LabelOf(uint64_t ref) const {
    return views.at(RefSegment(ref)).y + RefRow(ref) * schema.label_row_bytes();
  }
  // Positions in `refs` of the given ids; NotFound naming the first few unknown ids,
  // InvalidArgument naming the first few repeated ones.
  Result<std::vector<size_t>> PositionsOf(std::span<const uint64_t> ids,
                                          const std::string& name) const {
    std::unordered_map<uint64_t, size_t> pos;
    pos.reserve(refs.size());
    for (size_t i = 0; i < refs.size(); i++) pos.emplace(IdOf(refs[i]), i);
    std::vector<size_t> out;
    out.reserve(ids.size());
    std::unordered_set<uint64_t> seen;
    std::vector<uint64_t> unknown;
    std::vector<uint64_t> repeated;
    for (uint64_t id : ids) {
      auto it = pos.find(id);
      if (it == pos.end()) {
        unknown.push_back(id);
      } else if (!seen.insert(id).second) {
        repeated.push_back(id);
      } else {
        out.push_back(it->second);
      }
    }
    if (!unknown.empty()) {
      return Status::NotFound(IdsText(unknown) + (unknown.size() == 1 ? " is" : " are") +
                              " not in table " + name);
    }
    if (!repeated.empty()) {
      return Status::InvalidArgument(IdsText(repeated) + (repeated.size() == 1 ? " is" : " are") +
                                     " given twice for table " + name);
    }
    return out;
  }
  // "sample id 7", or "3 sample ids 7, 8, 9" naming at most the first five.
  static std::string IdsText(const std::vector<uint64_t>& ids) {
    constexpr size_t kNamed = 5;
    if (ids.size() == 1) return "sample id " + std::to_string(ids[0]);
    std::string s = std::to_string(ids.size()) + " sample ids ";
    for (size_t i = 0; i < ids.size() && i < kNamed; i++) {
      s += (i > 0 ? ", " : "") + std::to_string(ids[i]);
    }
    return ids.size() > kNamed ? s + ", ..." : s;
  }
  // Features, labels (if asked) and ids of the given rows, copied into one buffer each.
  struct Rows {
    uint64_t count = 0;
    std::vector<std::byte> x;
    std::vector<std::byte> y;
    std::vector<uint64_t> ids;
  };
  Rows Collect(std::span<const uint64_t> refs_to_copy, bool with_labels) const {
    const size_t xb = schema.feature_row_bytes();
    const size_t yb = with_labels ? schema.label_row_bytes() : 0;
    Rows out;
    out.count = refs_to_copy.size();
    out.x.resize(out.count * xb);
    out.y.resize(out.count * yb);
    out.ids.resize(out.count);
    for (uint64_t i = 0; i < out.count; i++) {
      uint64_t ref = refs_to_copy[i];
      std::memcpy(out.x.data() + i * xb, FeaturesOf(ref), xb);
      if (yb > 0) std::memcpy(out.y.data() + i * yb, LabelOf(ref), yb);
      out.ids[i] = IdOf(ref);
    }
    return out;
  }
  void DropPositions(const std::vector<size_t>& positions) {
    std::vector<bool> dead(refs.size(), false);
    for (size_t p : positions) dead[p] = true;
    size_t w = 0;
    for (size_t i = 0; i < refs.size(); i++) {
      if (!dead[i]) refs[w++] = refs[i];
    }
    refs.resize(w);
  }
};

namespace {

Status CheckLabels(const std::string& table, const TableSchema& schema, const HostArray* labels,
                   uint64_t rows) {
  if (!schema.has_labels()) {
    if (labels != nullptr && !labels->shape.empty()) {
      return Status::InvalidArgument("table " + table + " has no labels, but labels were given");
    }
    return Status::OK();
  }
  if (labels == nullptr || labels->shape.empty()) {
    return Status::InvalidArgument("table " + table + " needs labels (" +
                                   LabelKindName(schema.label_kind) + ")");
  }
  auto want = WithRows(rows, schema.label_shape);
  if (labels->dtype != schema.label_dtype() || labels->shape != want) {
    return Status::InvalidArgument("table " + table + ": labels are " + DtypeName(labels->dtype) +
                                   ShapeToString(labels->shape) + ", table needs " +
                                   DtypeName(schema.label_dtype()) + ShapeToString(want));
  }
  return Status::OK();
}

}  // namespace

Transaction::Transaction(std::string dir, Env* env, std::unique_ptr<FileLock> lock,
                         std::shared_ptr<const Snapshot> base)
    : dir_(std::move(dir)), env_(env), lock_(std::move(lock)), base_(std::move(base)) {
  next_.next_segment = base_->manifest().next_segment;
  next_.next_sample_id = base_->manifest().next_sample_id;
  for (const auto& name : base_->table_names()) {
    const Table* t = *base_->table(name);
    auto state = std::make_unique<TableState>();
    state->schema = t->schema();
    state->base_entry = t->entry();
    for (const auto& seg : t->entry().segments) state->segments[seg.id] = seg;
    for (const auto& seg : t->segs_) state->views[seg.id] = {seg.rows, seg.x, seg.y, seg.ids};
    state->refs.resize(t->size());
    for (uint64_t r = 0; r < t->size(); r++) state->refs[r] = t->ref(r);
    tables_.emplace(name, std::move(state));
  }
}

Transaction::~Transaction() {
  if (committed_) return;
  mapped_.clear();
  for (const auto& path : written_) (void)env_->RemoveFile(path);
}

Result<std::unique_ptr<FileLock>> Transaction::LockStore(const std::string& dir, Env* env) {
  // Refuse a directory that is not a store before creating a LOCK file in it.
  COHORT_RETURN_IF_ERROR(ReadCurrent(env, dir).status());
  return env->LockFile(JoinPath(dir, "LOCK"));
}

Result<std::unique_ptr<Transaction>> Transaction::BeginHeld(const std::string& dir,
                                                            const FileLock& /*held*/, Env* env) {
  // The lock object itself is only proof: the caller keeps it for longer than this
  // transaction.
  return Begin(dir, env, nullptr);
}

Result<std::unique_ptr<Transaction>> Transaction::Begin(const std::string& dir, Env* env) {
  COHORT_ASSIGN_OR_RETURN(auto lock, LockStore(dir, env));
  return Begin(dir, env, std::move(lock));
}

Result<std::unique_ptr<Transaction>> Transaction::Begin(const std::string& dir, Env* env,
                                                        std::unique_ptr<FileLock> lock) {
  COHORT_ASSIGN_OR_RETURN(uint64_t current, ReadCurrent(env, dir));
  COHORT_ASSIGN_OR_RETURN(auto base, Snapshot::Open(dir, current, env));
  std::unique_ptr<Transaction> txn(new Transaction(dir, env, std::move(lock), std::move(base)));
  COHORT_RETURN_IF_ERROR(txn->CleanUpLeftovers());
  return txn;
}

// An interrupted writer can leave temp files, manifests newer than CURRENT, and data files
// no committed manifest names. Counters only grow, so the last are exactly the segments
// numbered at or above CURRENT's next_segment and the rows files of later generations.
// Generations committed after CURRENT (CURRENT set back by hand) are never deleted: Begin
// refuses. One manifest at CURRENT + 1 is what an interrupted commit leaves (or CURRENT set
// back by one generation: the two cannot be told apart); it is removed, and notes() says so.
Status Transaction::CleanUpLeftovers() {
  COHORT_ASSIGN_OR_RETURN(auto names, env_->ListDir(dir_));
  const uint64_t current = base_->generation();
  const uint64_t next_segment = base_->manifest().next_segment;
  std::vector<uint64_t> manifests;
  for (const auto& name : names) {
    StoreFileName f = ClassifyStoreFile(name);
    if (f.kind == StoreFileKind::kManifest) manifests.push_back(f.number);
  }
  std::sort(manifests.begin(), manifests.end());
  std::optional<uint64_t> leftover;
  COHORT_RETURN_IF_ERROR(CheckNothingCommittedAfter(dir_, current, manifests, &leftover));
  if (leftover) {
    notes_.push_back("removed generation " + std::to_string(*leftover) + " (" +
                     JoinPath(dir_, ManifestFileName(*leftover)) +
                     "), newer than CURRENT: a commit that was interrupted before CURRENT "
                     "named it, or CURRENT was set back one generation");
  }
  bool removed = false;
  for (const auto& name : names) {
    if (IsUncommittedFile(name, current, next_segment)) {
      COHORT_RETURN_IF_ERROR(env_->RemoveFile(JoinPath(dir_, name)));
      removed = true;
    }
  }
  return removed ? env_->SyncDir(dir_) : Status::OK();
}

// "table 'x' does not exist", with the tables that do and the closest of them.
Status Transaction::UnknownTable(const std::string& name) const {
  std::vector<std::string> names;
  for (const auto& [n, t] : tables_) names.push_back(n);
  std::string have;
  for (const auto& n : names) have += (have.empty() ? "" : ", ") + n;
  std::string closest = ClosestName(name, names);
  return Status::NotFound("table '" + name + "' does not exist in " + dir_ +
                          (have.empty() ? " (it has no tables)" : " (tables: " + have + ")") +
                          (closest.empty() ? "" : "; did you mean '" + closest + "'?"));
}

Result<Transaction::TableState*> Transaction::MutableTable(const std::string& name) {
  if (committed_) return Status::InvalidArgument("transaction on " + dir_ + " already committed");
  auto it = tables_.find(name);
  if (it == tables_.end()) return UnknownTable(name);
  return it->second.get();
}

Result<const Transaction::TableState*> Transaction::FindTable(const std::string& name) const {
  auto it = tables_.find(name);
  if (it == tables_.end()) return UnknownTable(name);
  return it->second.get();
}

Result<TableSchema> Transaction::Schema(const std::string& table) const {
  COHORT_ASSIGN_OR_RETURN(const TableState* t, FindTable(table));
  return t->schema;
}

std::vector<std::string> Transaction::TableNames() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tables_) out.push_back(name);
  return out;
}

Result<uint64_t> Transaction::TableSize(const std::string& table) const {
  COHORT_ASSIGN_OR_RETURN(const TableState* t, FindTable(table));
  return static_cast<uint64_t>(t->refs.size());
}

Result<std::vector<uint64_t>> Transaction::TableIds(const std::string& table) const {
  COHORT_ASSIGN_OR_RETURN(const TableState* t, FindTable(table));
  std::vector<uint64_t> ids(t->refs.size());
  for (size_t i = 0; i < ids.size(); i++) ids[i] = t->IdOf(t->refs[i]);
  return ids;
}

Status Transaction::CreateTable(const std::string& name, const TableSchema& schema) {
  if (committed_) return Status::InvalidArgument("transaction on " + dir_ + " already committed");
  COHORT_RETURN_IF_ERROR(ValidateTableName(name));
  COHORT_RETURN_IF_ERROR(schema.Validate().WithContext("table " + name));
  if (tables_.count(name) > 0) {
    return Status::AlreadyExists("table '" + name + "' already exists in " + dir_);
  }
  auto state = std::make_unique<TableState>();
  state->schema = schema;
  state->changed = true;
  tables_.emplace(name, std::move(state));
  return Status::OK();
}

Result<FileEntry> Transaction::WriteNpyFile(const std::string& name, Dtype dtype,
                                            std::span<const uint64_t> shape,
                                            const std::byte* data) {
  std::string path = JoinPath(dir_, name);
  std::string header = EncodeNpyHeader(dtype, shape);
  uint64_t data_bytes = DtypeSize(dtype);
  for (uint64_t d : shape) data_bytes *= d;
  COHORT_ASSIGN_OR_RETURN(auto file, env_->NewWritableFile(path));
  written_.push_back(path);
  std::span<const std::byte> body(data, data_bytes);
  COHORT_RETURN_IF_ERROR(file->Append(header));
  COHORT_RETURN_IF_ERROR(file->Append(body));
  COHORT_RETURN_IF_ERROR(file->Sync());
  COHORT_RETURN_IF_ERROR(file->Close());
  FileEntry entry;
  entry.file = name;
  entry.bytes = header.size() + data_bytes;
  entry.crc32 = Crc32(body, Crc32(header));
  return entry;
}

Result<SegmentEntry> Transaction::WriteSegment(const std::string& table, const TableSchema& schema,
                                               uint64_t rows, const std::byte* x,
                                               const std::byte* y, const uint64_t* ids) {
  if (rows > 0xffffffffu) {
    return Status::InvalidArgument("table " + table + ": more than 2^32 rows in one segment");
  }
  if (next_.next_segment > 0xffffffffu) {
    return Status::InvalidArgument(dir_ + ": the store has used all 2^32 segment ids");
  }
  SegmentEntry seg;
  seg.id = next_.next_segment++;
  seg.rows = rows;
  verified_segments_.insert(seg.id);  // written from memory now: nothing to check
  auto x_shape = WithRows(rows, schema.feature_shape);
  COHORT_ASSIGN_OR_RETURN(
      seg.x, WriteNpyFile(SegmentFileName(table, seg.id, "x"), schema.feature_dtype, x_shape, x));
  if (schema.has_labels()) {
    auto y_shape = WithRows(rows, schema.label_shape);
    COHORT_ASSIGN_OR_RETURN(
        seg.y, WriteNpyFile(SegmentFileName(table, seg.id, "y"), schema.label_dtype(), y_shape, y));
  }
  std::vector<uint64_t> id_shape{rows};
  COHORT_ASSIGN_OR_RETURN(
      seg.ids, WriteNpyFile(SegmentFileName(table, seg.id, "id"), Dtype::kUint64, id_shape,
                            reinterpret_cast<const std::byte*>(ids)));
  return seg;
}

Status Transaction::MapSegment(TableState* table, const SegmentEntry& seg) {
  TableState::SegView view;
  view.rows = seg.rows;
  auto map = [&](const FileEntry& f) -> Result<const std::byte*> {
    COHORT_ASSIGN_OR_RETURN(auto file, env_->MapReadOnly(JoinPath(dir_, f.file)));
    COHORT_ASSIGN_OR_RETURN(
        NpyHeader h,
        ParseNpyHeader(std::span<const std::byte>(file->data(), file->size()), f.file));
    const std::byte* p = file->data() + h.data_offset;
    mapped_.push_back(std::move(file));
    return p;
  };
  COHORT_ASSIGN_OR_RETURN(view.x, map(seg.x));
  if (seg.y) {
    COHORT_ASSIGN_OR_RETURN(view.y, map(*seg.y));
  }
  COHORT_ASSIGN_OR_RETURN(const std::byte* ids, map(seg.ids));
  view.ids = reinterpret_cast<const uint64_t*>(ids);
  table->segments[seg.id] = seg;
  table->views[seg.id] = view;
  return Status::OK();
}

Status Transaction::VerifySegmentsOf(const std::string& table, const TableState& t,
                                     std::span<const uint64_t> refs) {
  std::set<uint64_t> segments;
  for (uint64_t ref : refs) segments.insert(RefSegment(ref));
  for (uint64_t id : segments) {
    if (verified_segments_.count(id) > 0) continue;
    const SegmentEntry& seg = t.segments.at(id);
    for (const FileEntry* f : {&seg.x, seg.y ? &*seg.y : nullptr, &seg.ids}) {
      if (f == nullptr) continue;
      Status st = VerifyFileEntry(env_, dir_, *f, base_->generation());
      if (!st.ok()) {
        return Status::Corruption("table " + table +
                                  ": not copying rows from a damaged segment: " + st.message());
      }
    }
    verified_segments_.insert(id);
  }
  return Status::OK();
}

Result<std::vector<uint64_t>> Transaction::Append(const std::string& table,
                                                  const HostArray& features,
                                                  const HostArray* labels) {
  COHORT_ASSIGN_OR_RETURN(TableState * t, MutableTable(table));
  const uint64_t n = features.rows();
  if (n == 0) return Status::InvalidArgument("table " + table + ": no samples to append");
  if (features.dtype != t->schema.feature_dtype ||
      features.row_shape() != t->schema.feature_shape) {
    return Status::InvalidArgument(
        "schema mismatch: table " + table + " has features " + DtypeName(t->schema.feature_dtype) +
        ShapeToString(t->schema.feature_shape) + " per sample, input has " +
        DtypeName(features.dtype) + ShapeToString(features.row_shape()));
  }
  COHORT_RETURN_IF_ERROR(CheckLabels(table, t->schema, labels, n));
  std::vector<uint64_t> ids(n);
  for (uint64_t i = 0; i < n; i++) ids[i] = next_.next_sample_id + i;
  COHORT_ASSIGN_OR_RETURN(
      SegmentEntry seg,
      WriteSegment(table, t->schema, n, features.data.data(),
                   t->schema.has_labels() ? labels->data.data() : nullptr, ids.data()));
  next_.next_sample_id += n;
  COHORT_RETURN_IF_ERROR(MapSegment(t, seg));
  for (uint64_t i = 0; i < n; i++) t->refs.push_back(MakeRowRef(seg.id, i));
  t->changed = true;
  return ids;
}

Status Transaction::Remove(const std::string& table, std::span<const uint64_t> ids) {
  COHORT_ASSIGN_OR_RETURN(TableState * t, MutableTable(table));
  if (ids.empty()) return Status::OK();
  COHORT_ASSIGN_OR_RETURN(auto positions, t->PositionsOf(ids, table));
  t->DropPositions(positions);
  t->changed = true;
  return Status::OK();
}

Status Transaction::Move(const std::string& from, const std::string& to,
                         std::span<const uint64_t> ids, const HostArray* labels) {
  COHORT_ASSIGN_OR_RETURN(TableState * src, MutableTable(from));
  COHORT_RETURN_IF_ERROR(ValidateTableName(to));
  if (from == to) {
    return Status::InvalidArgument("cannot move samples from table " + from + " to itself");
  }
  const uint64_t k = ids.size();
  if (labels != nullptr && labels->rows() != k) {
    return Status::InvalidArgument("move " + from + " -> " + to + ": " +
                                   std::to_string(labels->rows()) + " labels for " +
                                   std::to_string(k) + " samples");
  }
  // Everything is checked before anything changes: a failed move creates no table.
  TableSchema dst_schema = src->schema;
  if (HasTable(to)) {
    dst_schema = tables_.at(to)->schema;
  } else if (!dst_schema.has_labels() && labels != nullptr) {
    dst_schema.label_kind = labels->dtype == Dtype::kInt64 ? LabelKind::kClass : LabelKind::kVector;
    dst_schema.label_shape =
        dst_schema.label_kind == LabelKind::kClass ? std::vector<uint64_t>{} : labels->row_shape();
  }
  if (src->schema.feature_dtype != dst_schema.feature_dtype ||
      src->schema.feature_shape != dst_schema.feature_shape) {
    return Status::InvalidArgument("schema mismatch: cannot move from " + from + " (" +
                                   src->schema.ToString() + ") to " + to + " (" +
                                   dst_schema.ToString() + ")");
  }
  if (labels == nullptr && dst_schema.has_labels() &&
      (src->schema.label_kind != dst_schema.label_kind ||
       src->schema.label_shape != dst_schema.label_shape)) {
    return Status::InvalidArgument("move " + from + " -> " + to + ": labels must be given (" +
                                   from + " has labels " + LabelKindName(src->schema.label_kind) +
                                   ", " + to + " needs " + LabelKindName(dst_schema.label_kind) +
                                   ")");
  }
  if (labels != nullptr) COHORT_RETURN_IF_ERROR(CheckLabels(to, dst_schema, labels, k));
  COHORT_ASSIGN_OR_RETURN(auto positions, src->PositionsOf(ids, from));
  if (k == 0) return Status::OK();
  if (!HasTable(to)) COHORT_RETURN_IF_ERROR(CreateTable(to, dst_schema));
  COHORT_ASSIGN_OR_RETURN(TableState * dst, MutableTable(to));

  std::vector<uint64_t> refs(k);
  for (uint64_t i = 0; i < k; i++) refs[i] = src->refs[positions[i]];
  COHORT_RETURN_IF_ERROR(VerifySegmentsOf(from, *src, refs));
  TableState::Rows rows =
      src->Collect(refs, /*with_labels=*/labels == nullptr && dst_schema.has_labels());
  if (labels != nullptr && dst_schema.has_labels()) rows.y = labels->data;
  COHORT_ASSIGN_OR_RETURN(SegmentEntry seg,
                          WriteSegment(to, dst->schema, rows.count, rows.x.data(),
                                       rows.y.empty() ? nullptr : rows.y.data(), rows.ids.data()));
  COHORT_RETURN_IF_ERROR(MapSegment(dst, seg));
  src->DropPositions(positions);
  for (uint64_t i = 0; i < k; i++) dst->refs.push_back(MakeRowRef(seg.id, i));
  src->changed = true;
  dst->changed = true;
  return Status::OK();
}

Status Transaction::Relabel(const std::string& table, std::span<const uint64_t> ids,
                            const HostArray& labels) {
  COHORT_ASSIGN_OR_RETURN(TableState * t, MutableTable(table));
  if (!t->schema.has_labels()) {
    return Status::InvalidArgument("cannot relabel table " + table + ": it has no labels");
  }
  const uint64_t k = ids.size();
  if (labels.rows() != k) {
    return Status::InvalidArgument("relabel " + table + ": " + std::to_string(labels.rows()) +
                                   " labels for " + std::to_string(k) + " samples");
  }
  COHORT_RETURN_IF_ERROR(CheckLabels(table, t->schema, &labels, k));
  COHORT_ASSIGN_OR_RETURN(auto positions, t->PositionsOf(ids, table));
  if (k == 0) return Status::OK();

  std::vector<uint64_t> refs(k);
  for (uint64_t i = 0; i < k; i++) refs[i] = t->refs[positions[i]];
  COHORT_RETURN_IF_ERROR(VerifySegmentsOf(table, *t, refs));
  TableState::Rows rows = t->Collect(refs, /*with_labels=*/false);
  COHORT_ASSIGN_OR_RETURN(SegmentEntry seg,
                          WriteSegment(table, t->schema, rows.count, rows.x.data(),
                                       labels.data.data(), rows.ids.data()));
  COHORT_RETURN_IF_ERROR(MapSegment(t, seg));
  // The rows keep their places; what they pointed at is now dead, as after a removal.
  for (uint64_t i = 0; i < k; i++) t->refs[positions[i]] = MakeRowRef(seg.id, i);
  t->changed = true;
  return Status::OK();
}

Result<std::vector<std::string>> Transaction::Compact(double threshold) {
  if (committed_) return Status::InvalidArgument("transaction on " + dir_ + " already committed");
  std::vector<std::string> compacted;
  for (auto& [name, t] : tables_) {
    std::set<uint64_t> live_segments;
    for (uint64_t ref : t->refs) live_segments.insert(RefSegment(ref));
    uint64_t held = 0;
    for (uint64_t s : live_segments) held += t->segments.at(s).rows;
    if (held == 0) continue;
    double dead = 1.0 - static_cast<double>(t->refs.size()) / static_cast<double>(held);
    if (dead <= threshold || t->refs.empty()) continue;
    // The live rows are gathered in memory (one table's worth) and written as one segment.
    COHORT_RETURN_IF_ERROR(VerifySegmentsOf(name, *t, t->refs));
    TableState::Rows rows = t->Collect(t->refs, t->schema.has_labels());
    COHORT_ASSIGN_OR_RETURN(
        SegmentEntry seg, WriteSegment(name, t->schema, rows.count, rows.x.data(),
                                       rows.y.empty() ? nullptr : rows.y.data(), rows.ids.data()));
    COHORT_RETURN_IF_ERROR(MapSegment(t.get(), seg));
    for (uint64_t i = 0; i < t->refs.size(); i++) t->refs[i] = MakeRowRef(seg.id, i);
    t->changed = true;
    compacted.push_back(name);
  }
  return compacted;
}

Result<uint64_t> Transaction::Commit(const std::string& note, CommitOptions options) {
  if (committed_) return Status::InvalidArgument("transaction on " + dir_ + " already committed");
  bool any_change = false;
  for (const auto& [name, t] : tables_) any_change = any_change || t->changed;
  if (!any_change && !options.allow_empty) {
    return Status::InvalidArgument("nothing to commit in " + dir_ + " (no table changed)");
  }
  // The lock makes this impossible unless someone broke it (deleted LOCK, or a store shared
  // over a filesystem without working locks): refuse rather than overwrite their commit.
  COHORT_ASSIGN_OR_RETURN(uint64_t current, ReadCurrent(env_, dir_));
  if (current != base_->generation()) {
    return Status::Busy(dir_ + ": CURRENT moved from generation " +
                        std::to_string(base_->generation()) + " to " + std::to_string(current) +
                        " during this transaction; another writer got past the lock");
  }
  Manifest m = next_;
  m.generation = base_->generation() + 1;
  m.parent = base_->generation();
  m.created = NowIso8601();
  m.note = note;
  for (const auto& [name, t] : tables_) {
    if (!t->changed && t->base_entry) {
      m.tables[name] = *t->base_entry;
      continue;
    }
    TableEntry entry;
    entry.schema = t->schema;
    entry.row_count = t->refs.size();
    std::vector<uint64_t> shape{entry.row_count};
    COHORT_ASSIGN_OR_RETURN(entry.rows_file,
                            WriteNpyFile(RowsFileName(name, m.generation), Dtype::kUint64, shape,
                                         reinterpret_cast<const std::byte*>(t->refs.data())));
    std::set<uint64_t> live;
    for (uint64_t ref : t->refs) live.insert(RefSegment(ref));
    for (uint64_t s : live) entry.segments.push_back(t->segments.at(s));
    m.tables[name] = std::move(entry);
  }
  // Segments this transaction wrote that the new generation does not name (compacted away,
  // or moved in and removed again) would be named by no generation ever: delete them now,
  // while a crash still leaves them above CURRENT's counters for the next writer to remove.
  std::set<std::string> named;
  for (const auto& f : m.Files()) named.insert(f.file);
  std::vector<std::string> kept;
  for (const auto& path : written_) {
    std::string name = path.substr(path.rfind('/') + 1);
    if (IsStoreDataFileName(name) && named.count(name) == 0) {
      COHORT_RETURN_IF_ERROR(env_->RemoveFile(path));
    } else {
      kept.push_back(path);
    }
  }
  written_ = std::move(kept);
  written_.push_back(JoinPath(dir_, ManifestFileName(m.generation) + ".tmp"));
  written_.push_back(JoinPath(dir_, ManifestFileName(m.generation)));
  // WriteManifest syncs the directory: the entries of every new file become durable there,
  // before CURRENT can name them.
  COHORT_RETURN_IF_ERROR(WriteManifest(env_, dir_, m));
  // From the rename of CURRENT on, the new generation may be the store's truth: never delete
  // its files, even if what follows fails. The next writer sorts out what is referenced.
  committed_ = true;
  COHORT_RETURN_IF_ERROR(WriteCurrent(env_, dir_, m.generation));
  return m.generation;
}

}  // namespace cohort::store
