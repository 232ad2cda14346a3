// Helpers shared by the store's unit tests: scratch directories and small sample arrays.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "store/host_array.h"

namespace cohort::store::testing {

// A fresh, empty directory for the running test, under $COHORT_TEST_TMP when set.
inline std::string ScratchDir(const std::string& leaf = "") {
  const char* root = std::getenv("COHORT_TEST_TMP");
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::path(root != nullptr ? root : ::testing::TempDir()) /
                              (std::string(info->test_suite_name()) + "." + info->name() + "." +
                               std::to_string(::getpid()));
  if (!leaf.empty()) dir /= leaf;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir.parent_path());
  return dir.string();
}

// n samples of uint8 features of shape (2, 3) whose bytes encode `first + i`, so any row
// says which sample it came from.
inline HostArray Uint8Features(uint64_t n, uint8_t first = 0) {
  HostArray a(Dtype::kUint8, {n, 2, 3});
  for (uint64_t i = 0; i < n; i++) {
    for (int j = 0; j < 6; j++) a.as<uint8_t>()[i * 6 + j] = static_cast<uint8_t>(first + i + j);
  }
  return a;
}

inline HostArray ClassLabels(uint64_t n, int64_t first = 0) {
  HostArray a(Dtype::kInt64, {n});
  for (uint64_t i = 0; i < n; i++) a.as<int64_t>()[i] = first + static_cast<int64_t>(i);
  return a;
}

}  // namespace cohort::store::testing
