// Resident tables: copies of store tables kept on a device (a GPU) for the life of the process,
// so that a worker training and predicting round after round uploads each stored segment once.
// A commit that adds rows adds a segment, and only that segment crosses to the device; batches
// are then gathered on the device (index_select) instead of gathered on the host and copied.
//
// A table's copy holds the rows of its segments, features as stored (uint8 stays uint8, a
// quarter of the floats) and labels, and an index from each live row to its place in the copy.
// Segments are immutable (store/snapshot.h), so a copy of one stays valid in every later
// generation; segments a table no longer uses are dropped once they hold half of the copy.
// Host-to-device uploads go through a pinned buffer in 64 MiB pieces.
//
// Whether a pass uses a resident copy: COHORT_RESIDENT_DATA = auto (the default: on CUDA
// devices, for tables whose features take at most 8 GiB, when the pass does not augment: the
// augmentations run on the host), on (any device, the CPU too: the tests compare it bit for bit
// with the host path), off.
//
// Thread-safety: one mutex guards the process's cache; a returned view is immutable.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "common/status.h"
#include "store/snapshot.h"

namespace cohort::model {

enum class ResidentMode { kAuto, kOn, kOff };

// COHORT_RESIDENT_DATA's mode; an unknown value is an error naming the variable.
Result<ResidentMode> ResidentModeFromEnv();

// Whether a pass over `table` on `device` uses a resident copy under `mode`.
bool UseResidentTable(ResidentMode mode, const store::Table& table, const torch::Device& device,
                      bool augments);

// A table's rows on the device. features (stored rows, *feature_shape) and labels (stored rows)
// int64 or (stored rows, *label_shape) float32 (undefined without labels) hold every row of the
// segments the copy keeps; live (table rows) int64 maps live row i to its row in them.
struct ResidentView {
  torch::Tensor features;
  torch::Tensor labels;
  torch::Tensor live;
};

// The copy of `table` (of the store at `store_dir`) on `device`, uploading the segments it lacks.
// An error when the device runs out of memory (the caller then falls back to the host path).
Result<ResidentView> ResidentTable(const std::string& store_dir, const store::Table& table,
                                   const torch::Device& device);

// Rows uploaded to devices by this process so far (every segment row of each upload).
uint64_t ResidentRowsUploaded();

// Drops every resident copy (tests).
void ClearResidentTables();

}  // namespace cohort::model
