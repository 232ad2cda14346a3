// IDX import (MNIST format, plain or gzip): ReadIdxFile on an arbitrary file, and
// ReadIdxDataset with it as both the images and the labels file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "store/host_array.h"
#include "store/import.h"

using namespace cohort::store;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = cohort::fuzz::ScratchPath(".idx");
  cohort::fuzz::WriteFileOrDie(path, data, size);
  auto array = ReadIdxFile(path);
  if (array.ok() && array->data.size() != array->num_elements() * DtypeSize(array->dtype)) {
    __builtin_trap();
  }
  (void)ReadIdxDataset(path, path);
  return 0;
}
