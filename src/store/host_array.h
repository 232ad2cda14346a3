// HostArray: an n-dimensional array held in memory, the unit that import, export and the
// writer API exchange. Row-major (C order); shape[0] is the sample count for sample arrays.
//
// Thread-safety: a plain value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "store/npy.h"

namespace cohort::store {

struct HostArray {
  Dtype dtype = Dtype::kFloat32;
  std::vector<uint64_t> shape;
  std::vector<std::byte> data;

  HostArray() = default;
  HostArray(Dtype d, std::vector<uint64_t> s) : dtype(d), shape(std::move(s)) {
    data.resize(num_elements() * DtypeSize(dtype));
  }

  uint64_t num_elements() const {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    return n;
  }
  // Number of samples (shape[0]); 0 for a scalar.
  uint64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  // The shape of one sample: shape without its first dimension.
  std::vector<uint64_t> row_shape() const {
    return shape.empty() ? std::vector<uint64_t>{}
                         : std::vector<uint64_t>(shape.begin() + 1, shape.end());
  }
  size_t row_bytes() const {
    uint64_t n = DtypeSize(dtype);
    for (size_t i = 1; i < shape.size(); i++) n *= shape[i];
    return n;
  }
  // Keeps the first n rows (n <= rows()).
  void TruncateRows(uint64_t n) {
    if (shape.empty() || n >= shape[0]) return;
    data.resize(n * row_bytes());
    shape[0] = n;
  }
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(data.data());
  }
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data.data());
  }
};

}  // namespace cohort::store
