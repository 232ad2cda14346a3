// CURRENT: ReadCurrent on an arbitrary file; a generation it accepts must be written back
// identically by WriteCurrent.
#include <cstddef>
#include <cstdint>
#include <string>
#include <sys/stat.h>

#include "fuzz/fuzz_util.h"
#include "store/env.h"
#include "store/manifest.h"

using namespace cohort::store;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    std::string d = cohort::fuzz::ScratchPath(".current");
    ::mkdir(d.c_str(), 0755);
    return d;
  }();
  cohort::fuzz::WriteFileOrDie(dir + "/CURRENT", data, size);
  auto gen = ReadCurrent(Env::Default(), dir);
  if (!gen.ok()) return 0;
  if (!WriteCurrent(Env::Default(), dir, *gen).ok()) __builtin_trap();
  auto again = ReadCurrent(Env::Default(), dir);
  if (!again.ok() || *again != *gen) __builtin_trap();
  return 0;
}
