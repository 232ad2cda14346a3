// Writing numpy's .npz (a zip archive of .npy files, stored without compression, as
// numpy.savez writes it) and plain CSV tables: the output formats of `cohort predict RUN_DIR`.
//
// Thread-safety: an NpzWriter is used by one thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/npy.h"

namespace cohort::cli {

class NpzWriter {
 public:
  // Adds NAME.npy holding `data` (C order) of `shape`.
  void Add(const std::string& name, store::Dtype dtype, std::vector<uint64_t> shape,
           std::span<const std::byte> data);
  template <typename T>
  void Add(const std::string& name, store::Dtype dtype, std::vector<uint64_t> shape,
           const std::vector<T>& values) {
    Add(name, dtype, std::move(shape), std::as_bytes(std::span<const T>(values)));
  }
  // The archive's bytes (a zip with a central directory; no ZIP64, so under 4 GiB).
  Result<std::string> Finish() const;

 private:
  struct Entry {
    std::string name;
    std::string bytes;  // the whole .npy file
  };
  std::vector<Entry> entries_;
};

}  // namespace cohort::cli
