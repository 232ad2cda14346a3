#include "model/device_table.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "model/checkpoint.h"

namespace cohort::model {

namespace {

constexpr uint64_t kAutoLimitBytes = uint64_t{8} << 30;
constexpr size_t kUploadChunkBytes = size_t{64} << 20;

torch::ScalarType TorchType(store::Dtype d) {
  switch (d) {
    case store::Dtype::kUint8:
      return torch::kByte;
    case store::Dtype::kInt64:
      return torch::kLong;
    case store::Dtype::kInt32:
      return torch::kInt;
    case store::Dtype::kFloat64:
      return torch::kDouble;
    case store::Dtype::kUint64:  // not a feature or label dtype; same bytes as int64
      return torch::kLong;
    case store::Dtype::kFloat32:
      break;
  }
  return torch::kFloat;
}

std::vector<int64_t> WithRows(uint64_t rows, const std::vector<uint64_t>& shape) {
  std::vector<int64_t> out{static_cast<int64_t>(rows)};
  for (uint64_t d : shape) out.push_back(static_cast<int64_t>(d));
  return out;
}

// Copies `rows` rows of `row_bytes` each from host memory into dst[offset:offset + rows).
// To a GPU through a pinned buffer in pieces, so the copies are DMA and the staging stays small.
void Upload(const std::byte* src, uint64_t rows, size_t row_bytes, torch::Tensor& dst,
            int64_t offset) {
  if (rows == 0) return;
  torch::Tensor flat = dst.view({dst.size(0), -1});
  const torch::ScalarType type = dst.scalar_type();
  const int64_t elements_per_row = flat.size(1);
  if (dst.device().is_cpu()) {
    auto* data = const_cast<std::byte*>(src);  // from_blob wants void*; not written
    flat.narrow(0, offset, static_cast<int64_t>(rows))
        .copy_(torch::from_blob(data, {static_cast<int64_t>(rows), elements_per_row}, type));
    return;
  }
  const uint64_t chunk_rows =
      std::max<uint64_t>(kUploadChunkBytes / std::max<size_t>(row_bytes, 1), 1);
  torch::Tensor staging =
      torch::empty({static_cast<int64_t>(std::min(chunk_rows, rows)), elements_per_row},
                   torch::TensorOptions().dtype(type).pinned_memory(true));
  for (uint64_t begin = 0; begin < rows; begin += chunk_rows) {
    const uint64_t n = std::min(chunk_rows, rows - begin);
    std::memcpy(staging.data_ptr(), src + begin * row_bytes, n * row_bytes);
    // A blocking copy: the staging buffer is refilled next.
    flat.narrow(0, offset + static_cast<int64_t>(begin), static_cast<int64_t>(n))
        .copy_(staging.narrow(0, 0, static_cast<int64_t>(n)));
  }
}

struct Cached {
  struct Piece {
    int64_t offset = 0;
    uint64_t rows = 0;
  };
  std::unordered_map<uint64_t, Piece> segments;  // segment id -> its rows in the tensors
  int64_t rows = 0;
  torch::Tensor features;
  torch::Tensor labels;
};

struct Cache {
  std::mutex mu;
  std::map<std::string, Cached> tables;
  uint64_t uploaded_rows = 0;
};

Cache& TheCache() {
  // Never destroyed: device tensors must not be freed after the CUDA runtime has shut down.
  static Cache* cache = new Cache;
  return *cache;
}

}  // namespace

Result<ResidentMode> ResidentModeFromEnv() {
  const char* value = std::getenv("COHORT_RESIDENT_DATA");
  const std::string text = value == nullptr ? "" : value;
  if (text.empty() || text == "auto") return ResidentMode::kAuto;
  if (text == "on") return ResidentMode::kOn;
  if (text == "off") return ResidentMode::kOff;
  return Status::InvalidArgument("COHORT_RESIDENT_DATA='" + text + "': expected auto, on or off");
}

bool UseResidentTable(ResidentMode mode, const store::Table& table, const torch::Device& device,
                      bool augments) {
  if (mode == ResidentMode::kOff || augments) return false;
  if (mode == ResidentMode::kOn) return true;
  if (!device.is_cuda()) return false;
  return table.size() * table.schema().feature_row_bytes() <= kAutoLimitBytes;
}

Result<ResidentView> ResidentTable(const std::string& store_dir, const store::Table& table,
                                   const torch::Device& device) {
  Cache& cache = TheCache();
  std::lock_guard<std::mutex> lock(cache.mu);
  const std::string key = store_dir + '\n' + table.name() + '\n' + device.str();
  Cached& cached = cache.tables[key];
  const store::TableSchema& schema = table.schema();
  const bool has_labels = schema.has_labels();

  // The segments this generation of the table uses; the copy keeps the ones it has unless
  // they are mostly dead weight.
  std::unordered_set<uint64_t> used;
  for (size_t i = 0; i < table.segment_count(); i++) used.insert(table.segment(i).id);
  uint64_t kept_rows = 0;
  for (const auto& [id, piece] : cached.segments) {
    if (used.count(id) != 0) kept_rows += piece.rows;
  }
  const bool rebuild = static_cast<uint64_t>(cached.rows) > 2 * kept_rows;
  uint64_t new_rows = 0;
  for (size_t i = 0; i < table.segment_count(); i++) {
    store::Table::Segment s = table.segment(i);
    if (cached.segments.count(s.id) == 0) new_rows += s.rows;
  }

  Status st = GuardTorch("table " + table.name() + " on " + device.str(), [&]() -> Status {
    if (new_rows == 0 && !rebuild) return Status::OK();
    const uint64_t total = (rebuild ? kept_rows : static_cast<uint64_t>(cached.rows)) + new_rows;
    const auto options = torch::TensorOptions().device(device);
    torch::Tensor features = torch::empty(WithRows(total, schema.feature_shape),
                                          options.dtype(TorchType(schema.feature_dtype)));
    torch::Tensor labels;
    if (has_labels) {
      labels = torch::empty(WithRows(total, schema.label_shape),
                            options.dtype(TorchType(schema.label_dtype())));
    }
    std::unordered_map<uint64_t, Cached::Piece> segments;
    int64_t offset = 0;
    // Rows already on the device move there (a device-to-device copy), in one gather.
    if (!rebuild && cached.rows > 0) {
      features.narrow(0, 0, cached.rows).copy_(cached.features);
      if (has_labels) labels.narrow(0, 0, cached.rows).copy_(cached.labels);
      segments = cached.segments;
      offset = cached.rows;
    } else if (rebuild && kept_rows > 0) {
      std::vector<int64_t> keep;
      keep.reserve(kept_rows);
      for (const auto& [id, piece] : cached.segments) {
        if (used.count(id) == 0) continue;
        segments[id] = {offset, piece.rows};
        for (uint64_t r = 0; r < piece.rows; r++)
          keep.push_back(piece.offset + static_cast<int64_t>(r));
        offset += static_cast<int64_t>(piece.rows);
      }
      torch::Tensor index = torch::tensor(keep, torch::kLong).to(device);
      features.narrow(0, 0, offset).copy_(cached.features.index_select(0, index));
      if (has_labels) labels.narrow(0, 0, offset).copy_(cached.labels.index_select(0, index));
    }
    for (size_t i = 0; i < table.segment_count(); i++) {
      store::Table::Segment s = table.segment(i);
      if (segments.count(s.id) != 0) continue;
      Upload(s.features, s.rows, schema.feature_row_bytes(), features, offset);
      if (has_labels) Upload(s.labels, s.rows, schema.label_row_bytes(), labels, offset);
      segments[s.id] = {offset, s.rows};
      offset += static_cast<int64_t>(s.rows);
      cache.uploaded_rows += s.rows;
    }
    cached.segments = std::move(segments);
    cached.rows = offset;
    cached.features = features;
    cached.labels = labels;
    return Status::OK();
  });
  if (!st.ok()) {
    cache.tables.erase(key);  // half-built or not: the next pass starts over
    return st;
  }

  ResidentView view;
  view.features = cached.features;
  view.labels = cached.labels;
  std::vector<int64_t> live(table.size());
  std::vector<int64_t> segment_offset(table.segment_count());
  for (size_t i = 0; i < table.segment_count(); i++) {
    segment_offset[i] = cached.segments.at(table.segment(i).id).offset;
  }
  for (uint64_t row = 0; row < table.size(); row++) {
    auto [segment, within] = table.location(row);
    live[row] = segment_offset[segment] + static_cast<int64_t>(within);
  }
  st = GuardTorch("table " + table.name() + " on " + device.str(), [&]() -> Status {
    view.live = torch::tensor(live, torch::kLong).to(device);
    return Status::OK();
  });
  if (!st.ok()) return st;
  return view;
}

uint64_t ResidentRowsUploaded() {
  Cache& cache = TheCache();
  std::lock_guard<std::mutex> lock(cache.mu);
  return cache.uploaded_rows;
}

void ClearResidentTables() {
  Cache& cache = TheCache();
  std::lock_guard<std::mutex> lock(cache.mu);
  cache.tables.clear();
}

}  // namespace cohort::model
