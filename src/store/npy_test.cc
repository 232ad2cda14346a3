#include "store/npy.h"

#include <gtest/gtest.h>

namespace cohort::store {
namespace {

std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

TEST(NpyTest, HeaderRoundTripIsAlignedAndParses) {
  std::vector<uint64_t> shape{5, 28, 28};
  std::string header = EncodeNpyHeader(Dtype::kUint8, shape);
  EXPECT_EQ(header.size() % 64, 0u);
  EXPECT_EQ(header.back(), '\n');
  std::string file = header + std::string(5 * 28 * 28, '\0');
  auto parsed = ParseNpyHeader(Bytes(file), "f.npy");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->dtype, Dtype::kUint8);
  EXPECT_EQ(parsed->shape, shape);
  EXPECT_EQ(parsed->data_offset, header.size());
}

TEST(NpyTest, OneDimensionalShapeHasTrailingComma) {
  std::vector<uint64_t> shape{7};
  std::string header = EncodeNpyHeader(Dtype::kUint64, shape);
  EXPECT_NE(header.find("'shape': (7,)"), std::string::npos);
  auto parsed = ParseNpyHeader(Bytes(header + std::string(56, '\0')), "ids.npy");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->shape, shape);
  EXPECT_EQ(parsed->dtype, Dtype::kUint64);
}

TEST(NpyTest, RejectsDamagedFilesNamingThem) {
  std::vector<uint64_t> shape{4};
  std::string good = EncodeNpyHeader(Dtype::kFloat32, shape) + std::string(16, '\0');
  auto truncated = ParseNpyHeader(Bytes(good.substr(0, good.size() - 1)), "t.npy");
  ASSERT_FALSE(truncated.ok());
  EXPECT_TRUE(truncated.status().IsCorruption());
  EXPECT_NE(truncated.status().message().find("t.npy"), std::string::npos);

  std::string bad_magic = good;
  bad_magic[1] = 'X';
  EXPECT_FALSE(ParseNpyHeader(Bytes(bad_magic), "m.npy").ok());

  std::string fortran = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  auto f = ParseNpyHeader(Bytes(fortran), "f.npy");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("Fortran"), std::string::npos);

  std::string big = good;
  big.replace(big.find("<f4"), 3, ">f4");
  auto b = ParseNpyHeader(Bytes(big), "b.npy");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("big-endian"), std::string::npos);

  EXPECT_FALSE(ParseNpyHeader(Bytes(std::string("\x93NUMPY")), "short.npy").ok());
}

TEST(NpyTest, DtypeNamesRoundTrip) {
  for (Dtype d : {Dtype::kUint8, Dtype::kInt64, Dtype::kUint64, Dtype::kFloat32, Dtype::kFloat64,
                  Dtype::kInt32}) {
    auto back = DtypeFromName(DtypeName(d));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, d);
  }
  EXPECT_FALSE(DtypeFromName("complex64").ok());
}

}  // namespace
}  // namespace cohort::store
