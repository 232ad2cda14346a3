// For the loop's unit tests: members' probability files with seeded rows.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/splitmix.h"
#include "store/host_array.h"
#include "store/import.h"

namespace cohort::loop::testing {

// Seeded probability rows of `shape`, (rows, classes) or (passes, rows, classes).
inline void WriteRandomProbabilities(const std::string& path, std::vector<uint64_t> shape,
                                     uint64_t seed) {
  store::HostArray a(store::Dtype::kFloat32, shape);
  const uint64_t classes = shape.back();
  float* p = a.as<float>();
  const size_t rows = a.data.size() / sizeof(float) / classes;
  for (size_t r = 0; r < rows; ++r) {
    double total = 0;
    for (uint64_t c = 0; c < classes; ++c) {
      p[r * classes + c] = static_cast<float>(SplitMix64Unit(&seed) + 0.01);
      total += p[r * classes + c];
    }
    for (uint64_t c = 0; c < classes; ++c) {
      p[r * classes + c] = static_cast<float>(p[r * classes + c] / total);
    }
  }
  ASSERT_TRUE(store::WriteNpyFile(path, a).ok());
}

}  // namespace cohort::loop::testing
