// .npy import: ParseNpyHeader on the bytes as they are (how the store reads its own mapped
// files), ReadNpyFile on them as a file (`cohort data import --npy`), and the conversions an
// import applies to what it read (features, class labels, vector labels).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "fuzz/fuzz_util.h"
#include "store/host_array.h"
#include "store/import.h"
#include "store/npy.h"

using namespace cohort::store;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto header =
      ParseNpyHeader(std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size),
                     "fuzz.npy");
  static const std::string path = cohort::fuzz::ScratchPath(".npy");
  cohort::fuzz::WriteFileOrDie(path, data, size);
  auto array = ReadNpyFile(path);
  if (array.ok() != header.ok()) __builtin_trap();  // the two readers agree
  if (!array.ok()) return 0;
  if (array->data.size() != array->num_elements() * DtypeSize(array->dtype)) __builtin_trap();
  (void)ToStoreFeatures(*array, "fuzz.npy");
  (void)ToClassLabels(*array, "fuzz.npy");
  (void)ToVectorLabels(std::move(*array), "fuzz.npy");
  return 0;
}
