// BatchPipeline: gathers the batches of one pass over a table on a background thread, into
// two buffers it owns (double buffering), so the next batch is ready when a step ends.
//
// The caller gives the rows to visit in order (a shuffled epoch, or 0..n-1 for prediction);
// batch i holds rows [i * batch_size, (i + 1) * batch_size) of that order, features and
// labels as the store holds them (uint8 or float32; int64 or float32). The trainer hands the
// buffers to libtorch with from_blob, so nothing copies the whole table.
//
// Thread-safety: one consumer thread calls Start/Next; the pipeline's own thread fills the
// buffer that the consumer is not reading. A batch returned by Next() stays valid until the
// next call to Next() or Start().
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/status.h"
#include "model/train_config.h"
#include "store/snapshot.h"

namespace cohort::model {

class BatchPipeline {
 public:
  struct Batch {
    const std::byte* features = nullptr;
    const std::byte* labels = nullptr;  // nullptr when labels were not asked for
    int64_t size = 0;                   // rows in this batch (the last may be short)
    int64_t index = 0;                  // batch number within the pass
  };

  BatchPipeline(const store::Table& table, bool with_labels, int64_t batch_size);
  ~BatchPipeline();
  BatchPipeline(const BatchPipeline&) = delete;
  BatchPipeline& operator=(const BatchPipeline&) = delete;

  // Training passes augment their features (augment.h); off until this is called.
  void SetAugmentation(const AugmentConfig& augment) { augment_ = augment; }
  // Begins a pass over `rows` (table row numbers), stopping any pass in progress;
  // `pass_seed` draws the pass's augmentations.
  void Start(std::vector<uint64_t> rows, uint64_t pass_seed = 0);
  // The next batch of the pass; nullopt once the pass is over. A gather error (a row out of
  // range) is returned as the Status.
  Result<std::optional<Batch>> Next();

  int64_t batches() const {
    return static_cast<int64_t>((rows_.size() + batch_size_ - 1) / batch_size_);
  }

 private:
  struct Slot {
    std::vector<std::byte> features;
    std::vector<std::byte> labels;
    int64_t size = 0;
    int64_t index = -1;
    bool filled = false;
    Status status;
  };
  void Produce();
  void Stop();

  const store::Table& table_;
  const bool with_labels_;
  const size_t batch_size_;
  std::vector<uint64_t> rows_;
  AugmentConfig augment_;
  uint64_t pass_seed_ = 0;
  Slot slots_[2];
  int64_t next_index_ = 0;  // consumer: the batch Next() returns next
  int64_t held_ = -1;       // consumer: slot index currently lent out, or -1
  bool stop_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace cohort::model
