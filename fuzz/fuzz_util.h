// Helpers for the libFuzzer targets in this folder (docs/development.md, "Fuzzing").
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace cohort::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// A per-process scratch path under $TMPDIR (or /tmp), for parsers that take a file name.
inline std::string ScratchPath(const char* suffix) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/cohort-fuzz-" +
         std::to_string(::getpid()) + suffix;
}

// Writes `data` to `path` (replacing it); aborts on failure, which is the harness's fault.
inline void WriteFileOrDie(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

}  // namespace cohort::fuzz
