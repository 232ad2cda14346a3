// Importers and exporters between files users bring and the HostArrays the store accepts:
// MNIST-style IDX files (plain or gzip) and CSV tables with a header row (numpy .npy files
// are read by ReadNpyFile in store/npy.h); plus WriteNpyFile, which `cohort data export` uses, and
// the conversions that bring any numeric array to the dtypes and shapes a TableSchema allows.
//
// Every function reads or writes whole files in memory and returns a Status whose message
// is one line naming the file (and the line and column for CSV). Malformed binary files
// (bad magic, truncated data, trailing bytes) are kCorruption; content the store cannot
// take (a non-numeric CSV value, a missing column, mismatched counts) is kInvalidArgument;
// the operating system's refusals are kIOError / kNotFound.
//
// These functions touch the filesystem directly, not through an Env: they handle files
// outside the store, so fault injection does not apply to them.
//
// Thread-safety: free functions without shared state; safe to call concurrently (on
// different output paths for WriteNpyFile).
#pragma once

#include <string>
#include <utility>

#include "common/status.h"
#include "store/host_array.h"
#include "store/npy.h"  // ReadNpyFile, which lived here once; some callers still include this

namespace cohort::store {

// Reads an IDX file (the MNIST / Fashion-MNIST format), gzip-compressed or plain: two zero
// bytes, a type byte, a dimension count, big-endian uint32 dimensions, then the big-endian
// data. Types 0x08 (uint8) and 0x0D (float32, converted to host order) are supported;
// other types are rejected. The file must hold exactly the bytes its dimensions promise,
// and at most 2^40 of them.
Result<HostArray> ReadIdxFile(const std::string& path);

// Reads an IDX image file and its IDX label file: features as stored (e.g. uint8
// (n, 28, 28)) and labels as int64 classes of shape (n,). The sample counts must match,
// and the labels be valid classes (CheckClassLabels with `classes`).
Result<std::pair<HostArray, HostArray>> ReadIdxDataset(const std::string& images,
                                                       const std::string& labels,
                                                       int64_t classes = 0);

// Writes `array` as a version 1.0 .npy file: to path + ".tmp" first, fsync'd, then renamed
// over `path` and the directory fsync'd, so `path` holds either its old content or the
// complete new file.
Status WriteNpyFile(const std::string& path, const HostArray& array);

// The conversions below take the array by value (move it in to avoid a copy) and name
// `what` (usually the source file) in their messages.

// Features: uint8 and float32 are kept as they are; float64, int32, int64 and uint64 are
// converted to float32 (nearest value; a finite float64 beyond float32's range is an
// error). The array must have at least one dimension (its rows).
Result<HostArray> ToStoreFeatures(HostArray a, const std::string& what);

// Class labels: int64 of shape (n,). Accepts uint8, int32, int64 and uint64 (values must
// fit in int64), and float32 / float64 whose values are all integral. Shape (n,) or
// (n, 1); the latter is squeezed to (n,).
Result<HostArray> ToClassLabels(HostArray a, const std::string& what);

// Vector labels (regression targets): float32 of shape (n, ...). Any numeric dtype is
// converted as in ToStoreFeatures; shape (n,) becomes (n, 1), since a vector label is
// never a scalar. A scalar array is an error.
Result<HostArray> ToVectorLabels(HostArray a, const std::string& what);

// Class labels are integers in [0, classes): a member's output has one unit per class.
// Without a class count a label must still be below kMaxClasses (100,000, the largest class
// count the loop infers from labels): a larger one is an id or a hash by mistake far more
// often than a class; importers of more classes say so (`--classes N`).
inline constexpr int64_t kMaxClasses = 100000;

// Checks int64 class labels of shape (n,): each in [0, classes), or [0, kMaxClasses) when
// `classes` is 0. InvalidArgument naming `what`, the first rows at fault (at most 5, with
// their values) and how many there are
// (rows are 0-based, as numpy counts them).
Status CheckClassLabels(const HostArray& labels, int64_t classes, const std::string& what);

// Checks that float32 values (features, or vector labels) hold no NaN and no infinity.
// InvalidArgument naming `what`, `role` ("features", "labels"), the first rows at fault and
// how many rows there are. Other dtypes are always finite.
Status CheckFinite(const HostArray& values, const std::string& what, const char* role);

struct CsvOptions {
  // Name of the label column (as written in the header row, after trimming and unquoting).
  std::string label_column;
  enum class LabelType {
    kAuto,    // int64 classes if every label value is integral ("3", "-1", "3.0"), else vector
    kClass,   // int64 classes; a non-integral value is an error
    kVector,  // float32 of shape (n, 1)
  };
  LabelType label_type = LabelType::kAuto;
  char delimiter = ',';
  // Class labels must be in [0, classes); 0: in [0, kMaxClasses).
  int64_t classes = 0;
  // Accept "nan" and "inf" feature values (and vector labels) instead of refusing them.
  bool allow_non_finite = false;
};

// Reads a CSV table whose first line names the columns. Names are trimmed of whitespace and
// may be double-quoted. The label column is found by name; every other column is a feature,
// giving float32 features of shape (n, columns - 1) in file order, and labels per
// `options.label_type`: kAuto makes classes when every label is a whole number (then each
// must be a valid class: 1e23 is refused, never turned into a regression target). Each data
// row must have as many fields as the header. Values are decimal numbers (optionally
// double-quoted, surrounded by whitespace); empty values are rejected, and NaN and
// infinities unless `allow_non_finite`. Errors name the file and line. CRLF line ends, a
// UTF-8 byte-order mark and blank lines are accepted. A file without data rows is an error.
Result<std::pair<HostArray, HostArray>> ReadCsvDataset(const std::string& path,
                                                       const CsvOptions& options);

}  // namespace cohort::store
