#include "cli/report/png.h"

#include <gtest/gtest.h>
#include <zlib.h>

namespace cohort::cli {
namespace {

uint32_t Be32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) |
         (uint32_t(uint8_t(s[at + 2])) << 8) | uint32_t(uint8_t(s[at + 3]));
}

TEST(PngTest, Base64) {
  EXPECT_EQ(Base64(""), "");
  EXPECT_EQ(Base64("f"), "Zg==");
  EXPECT_EQ(Base64("fo"), "Zm8=");
  EXPECT_EQ(Base64("foo"), "Zm9v");
  EXPECT_EQ(Base64("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64(std::string("\xff\xfe", 2)), "//4=");
}

TEST(PngTest, ChunksAndPixelsRoundTrip) {
  std::vector<uint8_t> px = {0, 64, 128, 255, 10, 20};  // 3 x 2 gray
  const std::string png = EncodePng(px, 3, 2, 1);
  ASSERT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  // IHDR: width 3, height 2, depth 8, colour type 0; its CRC covers type and data.
  EXPECT_EQ(Be32(png, 8), 13u);
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_EQ(Be32(png, 16), 3u);
  EXPECT_EQ(Be32(png, 20), 2u);
  EXPECT_EQ(png[24], 8);
  EXPECT_EQ(png[25], 0);
  EXPECT_EQ(Be32(png, 29), crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17));
  // IDAT inflates to the rows, each after a filter byte 0.
  const uint32_t len = Be32(png, 33);
  EXPECT_EQ(png.substr(37, 4), "IDAT");
  std::string raw(64, '\0');
  uLongf raw_len = raw.size();
  ASSERT_EQ(uncompress(reinterpret_cast<Bytef*>(raw.data()), &raw_len,
                       reinterpret_cast<const Bytef*>(png.data() + 41), len),
            Z_OK);
  raw.resize(raw_len);
  EXPECT_EQ(raw, std::string("\0\0\x40\x80\0\xff\x0a\x14", 8));
  EXPECT_EQ(png.substr(png.size() - 8, 4), "IEND");
}

}  // namespace
}  // namespace cohort::cli
