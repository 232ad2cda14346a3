// CSV import: ReadCsvDataset on an arbitrary file. The first byte picks the options (label
// type, delimiter); the label column is "label".
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "store/host_array.h"
#include "store/import.h"

using namespace cohort::store;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  CsvOptions options;
  options.label_column = "label";
  options.label_type = static_cast<CsvOptions::LabelType>(data[0] % 3);
  options.delimiter = (data[0] & 4) ? ';' : ',';
  static const std::string path = cohort::fuzz::ScratchPath(".csv");
  cohort::fuzz::WriteFileOrDie(path, data + 1, size - 1);
  auto table = ReadCsvDataset(path, options);
  if (!table.ok()) return 0;
  const auto& [x, y] = *table;
  if (x.rows() != y.rows() || x.rows() == 0) __builtin_trap();
  return 0;
}
