#include "store/snapshot.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "common/closest_name.h"

namespace cohort::store {

namespace {

// Maps a file named by the manifest and checks its size and .npy header.
Result<std::shared_ptr<const MappedFile>> MapChecked(Env* env, const std::string& dir,
                                                     const FileEntry& entry, Dtype dtype,
                                                     const std::vector<uint64_t>& shape,
                                                     NpyHeader* header_out) {
  std::string path = JoinPath(dir, entry.file);
  auto mapped = env->MapReadOnly(path);
  if (!mapped.ok()) {
    if (mapped.status().IsNotFound()) {
      return Status::Corruption(path + ": file named by the manifest is missing");
    }
    return mapped.status();
  }
  const auto& file = *mapped;
  if (file->size() != entry.bytes) {
    return Status::Corruption(path + ": size " + std::to_string(file->size()) +
                              " bytes, manifest says " + std::to_string(entry.bytes) +
                              (file->size() < entry.bytes ? " (truncated)" : ""));
  }
  COHORT_ASSIGN_OR_RETURN(
      NpyHeader header,
      ParseNpyHeader(std::span<const std::byte>(file->data(), file->size()), path));
  if (header.dtype != dtype || header.shape != shape) {
    return Status::Corruption(path + ": holds " + DtypeName(header.dtype) +
                              ShapeToString(header.shape) + ", manifest says " + DtypeName(dtype) +
                              ShapeToString(shape));
  }
  *header_out = header;
  return file;
}

}  // namespace

uint64_t Table::ref(uint64_t row) const {
  const Loc& l = locs_[row];
  return MakeRowRef(segs_[l.seg].id, l.row);
}

Status Table::Gather(std::span<const uint64_t> rows, bool labels, std::byte* dst) const {
  const size_t n = locs_.size();
  for (uint64_t r : rows) {
    if (r >= n) {
      return Status::InvalidArgument("table " + name_ + ": row " + std::to_string(r) +
                                     " is out of range (size " + std::to_string(n) + ")");
    }
  }
  const size_t bytes = labels ? label_bytes_ : feature_bytes_;
  auto source = [&](uint64_t r) {
    const Loc& l = locs_[r];
    return (labels ? segs_[l.seg].y : segs_[l.seg].x) + l.row * bytes;
  };
  // Shuffled rows are cache misses one after another; fetching the rows a few places ahead
  // overlaps those misses with the copies (about 2x on 784-byte rows, docs/benchmarks.md).
  // Keep about kBytesInFlight of prefetches outstanding whatever the row size.
  constexpr size_t kBytesInFlight = 12288;
  constexpr size_t kLine = 64;
  const size_t kAhead = std::clamp<size_t>(kBytesInFlight / std::max<size_t>(bytes, 1), 1, 16);
  for (size_t i = 0; i < rows.size(); i++) {
    if (i + kAhead < rows.size()) {
      const std::byte* next = source(rows[i + kAhead]);
      for (size_t off = 0; off < bytes; off += kLine) __builtin_prefetch(next + off);
    }
    std::memcpy(dst, source(rows[i]), bytes);
    dst += bytes;
  }
  return Status::OK();
}

Status Table::GatherFeatures(std::span<const uint64_t> rows, std::byte* dst) const {
  return Gather(rows, /*labels=*/false, dst);
}

Status Table::GatherLabels(std::span<const uint64_t> rows, std::byte* dst) const {
  if (!schema().has_labels()) {
    return Status::InvalidArgument("table " + name_ + " has no labels");
  }
  return Gather(rows, /*labels=*/true, dst);
}

HostArray Table::ReadFeatures() const {
  HostArray out(schema().feature_dtype, WithRows(size(), schema().feature_shape));
  std::byte* dst = out.data.data();
  for (uint64_t r = 0; r < size(); r++, dst += feature_bytes_) {
    std::memcpy(dst, features(r), feature_bytes_);
  }
  return out;
}

HostArray Table::ReadLabels() const {
  if (!schema().has_labels()) return HostArray();
  HostArray out(schema().label_dtype(), WithRows(size(), schema().label_shape));
  std::byte* dst = out.data.data();
  for (uint64_t r = 0; r < size(); r++, dst += label_bytes_) {
    std::memcpy(dst, label(r), label_bytes_);
  }
  return out;
}

std::vector<uint64_t> Table::Ids() const {
  std::vector<uint64_t> out(size());
  for (uint64_t r = 0; r < size(); r++) out[r] = id(r);
  return out;
}

Result<std::vector<uint64_t>> Table::RowsOfIds(std::span<const uint64_t> ids) const {
  std::unordered_map<uint64_t, uint64_t> row_of;
  row_of.reserve(size());
  for (uint64_t r = 0; r < size(); r++) row_of.emplace(id(r), r);
  std::vector<uint64_t> rows;
  rows.reserve(ids.size());
  for (uint64_t i : ids) {
    auto it = row_of.find(i);
    if (it == row_of.end()) {
      return Status::NotFound("sample id " + std::to_string(i) + " is not in table " + name_);
    }
    rows.push_back(it->second);
  }
  return rows;
}

Result<std::shared_ptr<const Snapshot>> Snapshot::Open(const std::string& dir,
                                                       std::optional<uint64_t> generation,
                                                       Env* env) {
  COHORT_ASSIGN_OR_RETURN(uint64_t current, ReadCurrent(env, dir));
  uint64_t gen = generation.value_or(current);
  if (gen > current) {
    // A manifest newer than CURRENT is an unfinished commit the next writer deletes.
    return Status::NotFound("generation " + std::to_string(gen) + " is not committed in " + dir +
                            " (the current generation is " + std::to_string(current) + ")");
  }
  COHORT_ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(env, dir, gen));
  return OpenManifest(dir, std::move(manifest), env);
}

Result<std::shared_ptr<const Snapshot>> Snapshot::OpenManifest(const std::string& dir,
                                                               Manifest manifest, Env* env) {
  std::shared_ptr<Snapshot> snap(new Snapshot());
  snap->dir_ = dir;
  snap->manifest_ = std::move(manifest);
  const uint64_t gen = snap->manifest_.generation;

  for (const auto& [name, entry] : snap->manifest_.tables) {
    auto table = std::make_unique<Table>();
    table->name_ = name;
    table->entry_ = &entry;
    table->feature_bytes_ = entry.schema.feature_row_bytes();
    table->label_bytes_ = entry.schema.label_row_bytes();

    std::unordered_map<uint64_t, uint32_t> seg_index;
    for (const auto& seg : entry.segments) {
      Table::Seg s;
      s.id = seg.id;
      s.rows = seg.rows;
      NpyHeader h;
      COHORT_ASSIGN_OR_RETURN(auto x,
                              MapChecked(env, dir, seg.x, entry.schema.feature_dtype,
                                         WithRows(seg.rows, entry.schema.feature_shape), &h));
      s.x = x->data() + h.data_offset;
      snap->files_.push_back(std::move(x));
      if (seg.y) {
        COHORT_ASSIGN_OR_RETURN(auto y,
                                MapChecked(env, dir, *seg.y, entry.schema.label_dtype(),
                                           WithRows(seg.rows, entry.schema.label_shape), &h));
        s.y = y->data() + h.data_offset;
        snap->files_.push_back(std::move(y));
      }
      COHORT_ASSIGN_OR_RETURN(auto ids,
                              MapChecked(env, dir, seg.ids, Dtype::kUint64, {seg.rows}, &h));
      // .npy headers are padded to 64 bytes, so the id array is 8-byte aligned in the map.
      s.ids = reinterpret_cast<const uint64_t*>(ids->data() + h.data_offset);
      snap->files_.push_back(std::move(ids));
      if (!seg_index.emplace(seg.id, static_cast<uint32_t>(table->segs_.size())).second) {
        return Status::Corruption(JoinPath(dir, ManifestFileName(gen)) + ": table " + name +
                                  " lists segment " + std::to_string(seg.id) + " twice");
      }
      table->segs_.push_back(s);
    }

    NpyHeader h;
    COHORT_ASSIGN_OR_RETURN(auto rows_file, MapChecked(env, dir, entry.rows_file, Dtype::kUint64,
                                                       {entry.row_count}, &h));
    const auto* refs = reinterpret_cast<const uint64_t*>(rows_file->data() + h.data_offset);
    table->locs_.resize(entry.row_count);
    for (uint64_t i = 0; i < entry.row_count; i++) {
      auto it = seg_index.find(RefSegment(refs[i]));
      if (it == seg_index.end() || RefRow(refs[i]) >= table->segs_[it->second].rows) {
        return Status::Corruption(JoinPath(dir, entry.rows_file.file) + ": row " +
                                  std::to_string(i) + " points outside the table's segments");
      }
      table->locs_[i] = {it->second, static_cast<uint32_t>(RefRow(refs[i]))};
    }
    snap->tables_.emplace(name, std::move(table));
  }
  return std::shared_ptr<const Snapshot>(std::move(snap));
}

std::vector<std::string> Snapshot::table_names() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : tables_) names.push_back(name);
  return names;
}

Result<const Table*> Snapshot::table(const std::string& name) const {
  auto it = tables_.find(name);
  if (it == tables_.end()) {
    std::string have;
    for (const auto& [n, t] : tables_) have += (have.empty() ? "" : ", ") + n;
    std::string closest = ClosestName(name, table_names());
    return Status::NotFound("table '" + name + "' does not exist in generation " +
                            std::to_string(generation()) + " of " + dir_ +
                            (have.empty() ? " (it has no tables)" : " (tables: " + have + ")") +
                            (closest.empty() ? "" : "; did you mean '" + closest + "'?"));
  }
  return it->second.get();
}

}  // namespace cohort::store
