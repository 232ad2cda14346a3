#include "model/batch_pipeline.h"

#include <algorithm>

#include "model/augment.h"

namespace cohort::model {

BatchPipeline::BatchPipeline(const store::Table& table, bool with_labels, int64_t batch_size)
    : table_(table),
      with_labels_(with_labels && table.schema().has_labels()),
      batch_size_(static_cast<size_t>(std::max<int64_t>(batch_size, 1))) {
  for (Slot& s : slots_) {
    s.features.resize(batch_size_ * table.schema().feature_row_bytes());
    if (with_labels_) s.labels.resize(batch_size_ * table.schema().label_row_bytes());
  }
}

BatchPipeline::~BatchPipeline() { Stop(); }

void BatchPipeline::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BatchPipeline::Start(std::vector<uint64_t> rows, uint64_t pass_seed) {
  Stop();
  rows_ = std::move(rows);
  pass_seed_ = pass_seed;
  for (Slot& s : slots_) {
    s.filled = false;
    s.index = -1;
    s.status = Status::OK();
  }
  next_index_ = 0;
  held_ = -1;
  stop_ = false;
  thread_ = std::thread([this] { Produce(); });
}

void BatchPipeline::Produce() {
  const int64_t total = batches();
  for (int64_t b = 0; b < total; b++) {
    Slot& slot = slots_[b % 2];
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || (!slot.filled && held_ != b % 2); });
      if (stop_) return;
    }
    // The slot is ours until we mark it filled: the consumer only reads filled slots.
    const size_t begin = static_cast<size_t>(b) * batch_size_;
    const size_t n = std::min(batch_size_, rows_.size() - begin);
    std::span<const uint64_t> rows(rows_.data() + begin, n);
    Status st = table_.GatherFeatures(rows, slot.features.data());
    if (st.ok() && augment_.enabled()) {
      st = AugmentBatch(augment_, table_.schema().feature_dtype, table_.schema().feature_shape,
                        slot.features.data(), static_cast<int64_t>(n), pass_seed_,
                        static_cast<int64_t>(begin));
    }
    if (st.ok() && with_labels_) st = table_.GatherLabels(rows, slot.labels.data());
    {
      std::lock_guard<std::mutex> lock(mu_);
      slot.size = static_cast<int64_t>(n);
      slot.index = b;
      slot.status = st;
      slot.filled = true;
    }
    cv_.notify_all();
    if (!st.ok()) return;
  }
}

Result<std::optional<BatchPipeline::Batch>> BatchPipeline::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  if (held_ >= 0) {
    slots_[held_].filled = false;
    held_ = -1;
    cv_.notify_all();
  }
  if (next_index_ >= batches()) return std::optional<Batch>();
  Slot& slot = slots_[next_index_ % 2];
  cv_.wait(lock, [&] { return slot.filled && slot.index == next_index_; });
  if (!slot.status.ok()) return slot.status;
  held_ = static_cast<int>(next_index_ % 2);
  next_index_++;
  Batch batch;
  batch.features = slot.features.data();
  batch.labels = with_labels_ ? slot.labels.data() : nullptr;
  batch.size = slot.size;
  batch.index = slot.index;
  return std::optional<Batch>(batch);
}

}  // namespace cohort::model
