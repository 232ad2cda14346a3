// The numpy .npy format, version 1.0: the only array format the store writes.
//
// A .npy file is a 6-byte magic "\x93NUMPY", version bytes 1 0, a little-endian uint16
// header length, an ASCII Python-dict header padded with spaces to a multiple of 64 bytes
// and ended by '\n', then the raw C-order array data. We write v1.0 and read v1.0, 2.0 and
// 3.0 headers (2.0/3.0 have a uint32 header length), little-endian or byte-order-free types.
// ReadNpyFile reads a whole file from outside the store (not through an Env); the store maps
// its own .npy files through its Env and parses them with ParseNpyHeader.
//
// Thread-safety: pure functions, and ReadNpyFile, which has no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace cohort::store {

struct HostArray;  // store/host_array.h, which includes this header for Dtype

enum class Dtype { kUint8, kInt64, kUint64, kFloat32, kFloat64, kInt32 };

// Size in bytes of one element.
size_t DtypeSize(Dtype d);
// The numpy descr string: "|u1", "<i8", "<u8", "<f4", "<f8", "<i4".
const char* DtypeDescr(Dtype d);
// Human name used in manifests, messages and the CLI: "uint8", "int64", "float32", ...
const char* DtypeName(Dtype d);
Result<Dtype> DtypeFromName(const std::string& name);

struct NpyHeader {
  Dtype dtype = Dtype::kUint8;
  std::vector<uint64_t> shape;  // empty for a scalar
  size_t data_offset = 0;       // bytes from the start of the file to the array data

  uint64_t num_elements() const;
  uint64_t data_bytes() const { return num_elements() * DtypeSize(dtype); }
};

// The complete v1.0 header (magic through '\n') for a C-order array.
std::string EncodeNpyHeader(Dtype dtype, std::span<const uint64_t> shape);

// Parses the header at the start of `file`, which must be the whole file. `name` is used in
// error messages. Rejects Fortran order, big-endian types, unknown dtypes, and a file whose
// length is not exactly header + data (truncated, or with trailing bytes).
Result<NpyHeader> ParseNpyHeader(std::span<const std::byte> file, const std::string& name);
// The same checks from the file's first bytes (`head`, holding at least the whole header) and
// its size: for reading a large file a block at a time.
Result<NpyHeader> ParseNpyHeaderOf(std::span<const std::byte> head, uint64_t file_size,
                                   const std::string& name);

// (rows, *row_shape): the shape of `rows` samples of `row_shape` each.
std::vector<uint64_t> WithRows(uint64_t rows, const std::vector<uint64_t>& row_shape);

// Shape as Python tuple text, "(n, 28, 28)" or "(7,)", for headers and messages.
std::string ShapeToString(std::span<const uint64_t> shape);

// Reads a whole .npy file (format version 1.0, 2.0 or 3.0; C order; little-endian or
// byte-order-free dtypes). Bytes after the array data are rejected. Include
// store/host_array.h to use the result.
Result<HostArray> ReadNpyFile(const std::string& path);

}  // namespace cohort::store
