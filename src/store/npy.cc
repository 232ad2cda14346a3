#include "store/npy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "common/file_util.h"
#include "store/host_array.h"

namespace cohort::store {

namespace {
constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

struct DtypeInfo {
  Dtype dtype;
  const char* descr;
  const char* name;
  size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {Dtype::kUint8, "|u1", "uint8", 1},     {Dtype::kInt64, "<i8", "int64", 8},
    {Dtype::kUint64, "<u8", "uint64", 8},   {Dtype::kFloat32, "<f4", "float32", 4},
    {Dtype::kFloat64, "<f8", "float64", 8}, {Dtype::kInt32, "<i4", "int32", 4},
};

const DtypeInfo& Info(Dtype d) {
  for (const auto& info : kDtypes) {
    if (info.dtype == d) return info;
  }
  return kDtypes[0];
}

// Finds the value text after 'key': in a numpy header dict.
bool FindValue(const std::string& header, const std::string& key, size_t* pos) {
  for (const char quote : {'\'', '"'}) {
    std::string k = std::string(1, quote) + key + std::string(1, quote);
    size_t at = header.find(k);
    if (at == std::string::npos) continue;
    at = header.find(':', at + k.size());
    if (at == std::string::npos) return false;
    at++;
    while (at < header.size() && header[at] == ' ') at++;
    *pos = at;
    return true;
  }
  return false;
}
}  // namespace

size_t DtypeSize(Dtype d) { return Info(d).size; }
const char* DtypeDescr(Dtype d) { return Info(d).descr; }
const char* DtypeName(Dtype d) { return Info(d).name; }

Result<Dtype> DtypeFromName(const std::string& name) {
  for (const auto& info : kDtypes) {
    if (name == info.name) return info.dtype;
  }
  return Status::InvalidArgument("unknown dtype '" + name + "'");
}

uint64_t NpyHeader::num_elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

std::vector<uint64_t> WithRows(uint64_t rows, const std::vector<uint64_t>& row_shape) {
  std::vector<uint64_t> shape{rows};
  shape.insert(shape.end(), row_shape.begin(), row_shape.end());
  return shape;
}

std::string ShapeToString(std::span<const uint64_t> shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); i++) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

std::string EncodeNpyHeader(Dtype dtype, std::span<const uint64_t> shape) {
  std::string dict = std::string("{'descr': '") + DtypeDescr(dtype) +
                     "', 'fortran_order': False, 'shape': " + ShapeToString(shape) + ", }";
  // magic(6) + version(2) + header length(2) + dict + padding + '\n' is a multiple of 64.
  size_t unpadded = kMagicLen + 2 + 2 + dict.size() + 1;
  size_t padded = (unpadded + 63) / 64 * 64;
  dict.append(padded - unpadded, ' ');
  dict.push_back('\n');
  std::string out(kMagic, kMagicLen);
  out.push_back('\x01');
  out.push_back('\x00');
  uint16_t len = static_cast<uint16_t>(dict.size());
  out.push_back(static_cast<char>(len & 0xff));
  out.push_back(static_cast<char>(len >> 8));
  return out + dict;
}

Result<NpyHeader> ParseNpyHeaderOf(std::span<const std::byte> head, uint64_t file_size,
                                   const std::string& name) {
  std::span<const std::byte> file = head;
  auto bad = [&](const std::string& why) {
    return Status::Corruption(name + ": not a valid .npy file: " + why);
  };
  if (file.size() < kMagicLen + 4 || std::memcmp(file.data(), kMagic, kMagicLen) != 0) {
    return bad("missing \\x93NUMPY magic");
  }
  auto byte_at = [&](size_t i) { return static_cast<uint8_t>(file[i]); };
  uint8_t major = byte_at(6);
  size_t header_len = 0;
  size_t offset = 0;
  if (major == 1) {
    header_len = byte_at(8) | (static_cast<size_t>(byte_at(9)) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12) return bad("truncated header");
    header_len = byte_at(8) | (static_cast<size_t>(byte_at(9)) << 8) |
                 (static_cast<size_t>(byte_at(10)) << 16) |
                 (static_cast<size_t>(byte_at(11)) << 24);
    offset = 12;
  } else {
    return bad("unsupported format version " + std::to_string(major));
  }
  if (file.size() < offset + header_len) return bad("truncated header");
  std::string header(reinterpret_cast<const char*>(file.data()) + offset, header_len);

  NpyHeader out;
  out.data_offset = offset + header_len;

  size_t pos = 0;
  if (!FindValue(header, "descr", &pos) || pos >= header.size()) return bad("no 'descr'");
  char quote = header[pos];
  size_t end = header.find(quote, pos + 1);
  if ((quote != '\'' && quote != '"') || end == std::string::npos) return bad("bad 'descr'");
  std::string descr = header.substr(pos + 1, end - pos - 1);
  // "|u1", "<u1" and "u1" all mean uint8; '=' is native, which is little-endian here.
  if (!descr.empty() && (descr[0] == '=' || descr[0] == '|')) descr[0] = '<';
  if (descr.size() == 2) descr = "<" + descr;
  if (descr == "<u1" || descr == ">u1" || descr == "<b1") descr = "|u1";
  bool found = false;
  for (const auto& info : kDtypes) {
    if (descr == info.descr) {
      out.dtype = info.dtype;
      found = true;
    }
  }
  if (!found) {
    if (!descr.empty() && descr[0] == '>') return bad("big-endian dtype '" + descr + "'");
    return bad("unsupported dtype '" + descr +
               "' (supported: uint8, int32, int64, uint64, "
               "float32, float64)");
  }

  if (!FindValue(header, "fortran_order", &pos)) return bad("no 'fortran_order'");
  if (header.compare(pos, 4, "True") == 0) return bad("Fortran-order arrays are not supported");
  if (header.compare(pos, 5, "False") != 0) return bad("bad 'fortran_order'");

  if (!FindValue(header, "shape", &pos) || pos >= header.size() || header[pos] != '(') {
    return bad("no 'shape'");
  }
  end = header.find(')', pos);
  if (end == std::string::npos) return bad("bad 'shape'");
  std::string dims = header.substr(pos + 1, end - pos - 1);
  size_t i = 0;
  while (i < dims.size()) {
    while (i < dims.size() && (dims[i] == ' ' || dims[i] == ',')) i++;
    if (i >= dims.size()) break;
    if (dims[i] < '0' || dims[i] > '9')
      return bad("bad 'shape' " + header.substr(pos, end - pos + 1));
    uint64_t v = 0;
    while (i < dims.size() && dims[i] >= '0' && dims[i] <= '9') {
      if (v > (UINT64_MAX - 9) / 10) return bad("shape dimension too large");
      v = v * 10 + static_cast<uint64_t>(dims[i] - '0');
      i++;
    }
    while (i < dims.size() && dims[i] == 'L') i++;  // Python 2 long suffix
    out.shape.push_back(v);
  }
  // Overflow-safe check that the data fits in the file.
  uint64_t bytes = DtypeSize(out.dtype);
  for (uint64_t d : out.shape) {
    if (d != 0 && bytes > UINT64_MAX / d) return bad("array size overflows");
    bytes *= d;
  }
  if (file_size < out.data_offset || file_size - out.data_offset != bytes) {
    bool shorter = file_size < out.data_offset || file_size - out.data_offset < bytes;
    return bad(std::string(shorter ? "truncated" : "trailing bytes") + ": header promises " +
               std::to_string(bytes) + " data bytes, file has " +
               std::to_string(file_size < out.data_offset ? 0 : file_size - out.data_offset));
  }
  return out;
}

Result<NpyHeader> ParseNpyHeader(std::span<const std::byte> file, const std::string& name) {
  return ParseNpyHeaderOf(file, file.size(), name);
}

Result<HostArray> ReadNpyFile(const std::string& path) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno("open " + path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + ": not a regular file");
  const size_t size = static_cast<size_t>(st.st_size);
  void* addr = nullptr;
  if (size > 0) {
    addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (addr == MAP_FAILED) return Status::FromErrno("mmap " + path, errno);
  }
  struct Unmap {
    void* addr;
    size_t size;
    ~Unmap() {
      if (addr != nullptr) ::munmap(addr, size);
    }
  } unmap{addr, size};

  std::span<const std::byte> file(static_cast<const std::byte*>(addr), addr != nullptr ? size : 0);
  COHORT_ASSIGN_OR_RETURN(NpyHeader header, ParseNpyHeader(file, path));
  const uint64_t bytes = header.data_bytes();  // ParseNpyHeader checked the file is exactly this
  HostArray out(header.dtype, header.shape);
  if (bytes > 0) std::memcpy(out.data.data(), file.data() + header.data_offset, bytes);
  return out;
}

}  // namespace cohort::store
