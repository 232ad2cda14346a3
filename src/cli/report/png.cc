#include "cli/report/png.h"

#include <zlib.h>

namespace cohort::cli {

namespace {

void Put32(std::string* out, uint32_t v) {
  out->push_back(static_cast<char>(v >> 24));
  out->push_back(static_cast<char>(v >> 16));
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v));
}

void Chunk(std::string* out, const char* type, const std::string& data) {
  Put32(out, static_cast<uint32_t>(data.size()));
  std::string body = std::string(type, 4) + data;
  out->append(body);
  uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(body.data()), body.size());
  Put32(out, static_cast<uint32_t>(crc));
}

}  // namespace

std::string EncodePng(const std::vector<uint8_t>& pixels, int width, int height, int channels) {
  std::string out("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  Put32(&ihdr, static_cast<uint32_t>(width));
  Put32(&ihdr, static_cast<uint32_t>(height));
  ihdr.push_back(8);                      // bit depth
  ihdr.push_back(channels == 3 ? 2 : 0);  // colour type: RGB or gray
  ihdr.append(std::string("\0\0\0", 3));  // compression, filter, interlace
  Chunk(&out, "IHDR", ihdr);
  // Each row starts with filter type 0 (none).
  const size_t row = static_cast<size_t>(width) * channels;
  std::string raw;
  raw.reserve((row + 1) * height);
  for (int y = 0; y < height; y++) {
    raw.push_back(0);
    raw.append(reinterpret_cast<const char*>(pixels.data()) + row * y, row);
  }
  uLongf size = compressBound(raw.size());
  std::string z(size, '\0');
  compress2(reinterpret_cast<Bytef*>(z.data()), &size, reinterpret_cast<const Bytef*>(raw.data()),
            raw.size(), 9);
  z.resize(size);
  Chunk(&out, "IDAT", z);
  Chunk(&out, "IEND", "");
  return out;
}

std::string Base64(std::string_view bytes) {
  static const char* kDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(kDigits[(v >> s) & 63]);
  }
  if (i < bytes.size()) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= uint8_t(bytes[i + 1]) << 8;
    out.push_back(kDigits[(v >> 18) & 63]);
    out.push_back(kDigits[(v >> 12) & 63]);
    out.push_back(i + 1 < bytes.size() ? kDigits[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

}  // namespace cohort::cli
