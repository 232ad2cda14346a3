#include "cli/ensemble/npz_writer.h"

#include <zlib.h>

namespace cohort::cli {

namespace {

void Put16(std::string* out, uint32_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>((v >> 8) & 0xff));
}
void Put32(std::string* out, uint32_t v) {
  Put16(out, v & 0xffff);
  Put16(out, v >> 16);
}

}  // namespace

void NpzWriter::Add(const std::string& name, store::Dtype dtype, std::vector<uint64_t> shape,
                    std::span<const std::byte> data) {
  Entry e;
  e.name = name + ".npy";
  e.bytes = store::EncodeNpyHeader(dtype, shape);
  e.bytes.append(reinterpret_cast<const char*>(data.data()), data.size());
  entries_.push_back(std::move(e));
}

Result<std::string> NpzWriter::Finish() const {
  std::string out, central;
  for (const Entry& e : entries_) {
    if (e.bytes.size() >= 0xffffffffull || out.size() >= 0xffffffffull) {
      return Status::InvalidArgument(".npz output over 4 GiB is not supported");
    }
    const uint32_t crc = static_cast<uint32_t>(
        crc32(0L, reinterpret_cast<const Bytef*>(e.bytes.data()), e.bytes.size()));
    const auto size = static_cast<uint32_t>(e.bytes.size());
    const auto offset = static_cast<uint32_t>(out.size());
    // Local file header: stored (method 0), no data descriptor, DOS time 1980-01-01 00:00.
    Put32(&out, 0x04034b50);
    Put16(&out, 20);    // version needed
    Put16(&out, 0);     // flags
    Put16(&out, 0);     // method: stored
    Put16(&out, 0);     // time
    Put16(&out, 0x21);  // date: 1980-01-01
    Put32(&out, crc);
    Put32(&out, size);
    Put32(&out, size);
    Put16(&out, static_cast<uint32_t>(e.name.size()));
    Put16(&out, 0);  // extra
    out += e.name;
    out += e.bytes;
    // Its central directory record.
    Put32(&central, 0x02014b50);
    Put16(&central, 20);  // version made by
    Put16(&central, 20);  // version needed
    Put16(&central, 0);
    Put16(&central, 0);
    Put16(&central, 0);
    Put16(&central, 0x21);
    Put32(&central, crc);
    Put32(&central, size);
    Put32(&central, size);
    Put16(&central, static_cast<uint32_t>(e.name.size()));
    Put16(&central, 0);  // extra
    Put16(&central, 0);  // comment
    Put16(&central, 0);  // disk
    Put16(&central, 0);  // internal attributes
    Put32(&central, 0);  // external attributes
    Put32(&central, offset);
    central += e.name;
  }
  const auto central_offset = static_cast<uint32_t>(out.size());
  out += central;
  Put32(&out, 0x06054b50);
  Put16(&out, 0);
  Put16(&out, 0);
  Put16(&out, static_cast<uint32_t>(entries_.size()));
  Put16(&out, static_cast<uint32_t>(entries_.size()));
  Put32(&out, static_cast<uint32_t>(central.size()));
  Put32(&out, central_offset);
  Put16(&out, 0);
  return out;
}

}  // namespace cohort::cli
