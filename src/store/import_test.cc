#include "store/import.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "store/npy.h"

namespace cohort::store {
namespace {

namespace fs = std::filesystem;

std::string Bytes(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

// An IDX file: magic, big-endian dims, then `payload` as is.
std::string Idx(uint8_t type, const std::vector<uint32_t>& dims, const std::string& payload) {
  std::string s = Bytes({0, 0, type, static_cast<int>(dims.size())});
  for (uint32_t d : dims) {
    s += Bytes({static_cast<int>(d >> 24), static_cast<int>((d >> 16) & 0xff),
                static_cast<int>((d >> 8) & 0xff), static_cast<int>(d & 0xff)});
  }
  return s + payload;
}

std::string Iota(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; i++) s.push_back(static_cast<char>(i));
  return s;
}

// A .npy file with a hand-written v1.0 header dict.
std::string Npy(const std::string& dict, const std::string& data) {
  std::string header = dict;
  size_t unpadded = 10 + header.size() + 1;
  header.append((unpadded + 63) / 64 * 64 - unpadded, ' ');
  header.push_back('\n');
  std::string s = "\x93NUMPY";
  s += Bytes({1, 0, static_cast<int>(header.size() & 0xff), static_cast<int>(header.size() >> 8)});
  return s + header + data;
}

template <typename T>
HostArray MakeArray(Dtype dtype, std::vector<uint64_t> shape, const std::vector<T>& values) {
  HostArray a(dtype, std::move(shape));
  EXPECT_EQ(a.data.size(), values.size() * sizeof(T));
  std::memcpy(a.data.data(), values.data(), a.data.size());
  return a;
}

template <typename T>
std::vector<T> Values(const HostArray& a) {
  std::vector<T> v(a.data.size() / sizeof(T));
  std::memcpy(v.data(), a.data.data(), v.size() * sizeof(T));
  return v;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class ImportTest : public testing::Test {
 protected:
  void SetUp() override {
    const char* env = std::getenv("COHORT_TEST_TMP");
    fs::path base = (env != nullptr && *env != '\0') ? fs::path(env) : fs::path(testing::TempDir());
    static std::atomic<int> counter{0};
    const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (base / ("import_test-" + std::string(info->name()) + "-" + std::to_string(::getpid()) +
                    "-" + std::to_string(counter++)))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  std::string WriteFile(const std::string& name, const std::string& content) const {
    std::string path = Path(name);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    EXPECT_TRUE(out.good()) << path;
    return path;
  }

  std::string WriteGzip(const std::string& name, const std::string& content) const {
    std::string path = Path(name);
    gzFile gz = gzopen(path.c_str(), "wb");
    EXPECT_NE(gz, nullptr) << path;
    if (gz == nullptr) return path;
    EXPECT_EQ(gzwrite(gz, content.data(), static_cast<unsigned>(content.size())),
              static_cast<int>(content.size()));
    EXPECT_EQ(gzclose(gz), Z_OK);
    return path;
  }

  std::string dir_;
};

// The status is an error whose one-line message contains `text`.
testing::AssertionResult ErrorHas(const Status& s, const std::string& text) {
  if (s.ok()) return testing::AssertionFailure() << "expected an error containing: " << text;
  if (s.message().find('\n') != std::string::npos) {
    return testing::AssertionFailure() << "message is not one line: " << s.ToString();
  }
  if (s.message().find(text) == std::string::npos) {
    return testing::AssertionFailure() << s.ToString() << "\n  does not contain: " << text;
  }
  return testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------
// IDX

TEST_F(ImportTest, IdxUint8PlainAndGzip) {
  const std::string content = Idx(0x08, {3, 2, 2}, Iota(12));
  for (const std::string& path :
       {WriteFile("images-idx3-ubyte", content), WriteGzip("images-idx3-ubyte.gz", content)}) {
    Result<HostArray> a = ReadIdxFile(path);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->dtype, Dtype::kUint8);
    EXPECT_EQ(a->shape, (std::vector<uint64_t>{3, 2, 2}));
    EXPECT_EQ(Values<uint8_t>(*a), (std::vector<uint8_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  }
}

TEST_F(ImportTest, IdxFloat32IsBigEndian) {
  // 1.5 = 0x3FC00000, -2.25 = 0xC0100000, 0.0 = 0.
  const std::string payload = Bytes({0x3F, 0xC0, 0, 0, 0xC0, 0x10, 0, 0, 0, 0, 0, 0});
  Result<HostArray> a = ReadIdxFile(WriteGzip("f.gz", Idx(0x0D, {3}, payload)));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->dtype, Dtype::kFloat32);
  EXPECT_EQ(a->shape, (std::vector<uint64_t>{3}));
  EXPECT_EQ(Values<float>(*a), (std::vector<float>{1.5F, -2.25F, 0.0F}));
}

TEST_F(ImportTest, IdxEmptyLeadingDimension) {
  Result<HostArray> a = ReadIdxFile(WriteFile("empty", Idx(0x08, {0, 28, 28}, "")));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->shape, (std::vector<uint64_t>{0, 28, 28}));
  EXPECT_TRUE(a->data.empty());
}

TEST_F(ImportTest, IdxBadMagic) {
  std::string path = WriteFile("bad", Bytes({1, 0, 8, 1, 0, 0, 0, 1, 7}));
  Result<HostArray> a = ReadIdxFile(path);
  EXPECT_TRUE(a.status().IsCorruption());
  EXPECT_TRUE(ErrorHas(a.status(), path + ": not an IDX file: bad magic"));

  // A .npy file is not an IDX file either.
  path = WriteFile("x.npy", EncodeNpyHeader(Dtype::kUint8, std::vector<uint64_t>{1}) + "a");
  EXPECT_TRUE(ErrorHas(ReadIdxFile(path).status(), "bad magic"));

  path = WriteGzip("short.gz", Bytes({0, 0}));
  EXPECT_TRUE(ErrorHas(ReadIdxFile(path).status(), path + ": not an IDX file: only 2 bytes"));

  path = WriteFile("nodims", Bytes({0, 0, 8, 0}));
  EXPECT_TRUE(ErrorHas(ReadIdxFile(path).status(), "zero dimensions"));
}

TEST_F(ImportTest, IdxUnsupportedType) {
  std::string path = WriteFile("int32", Idx(0x0C, {1}, Bytes({0, 0, 0, 1})));
  Result<HostArray> a = ReadIdxFile(path);
  EXPECT_TRUE(a.status().IsInvalidArgument());
  EXPECT_TRUE(ErrorHas(a.status(), path + ": IDX data type int32 (0x0C) is not supported"));

  path = WriteFile("weird", Idx(0x42, {1}, "x"));
  EXPECT_TRUE(ErrorHas(ReadIdxFile(path).status(), "unknown data type byte 0x42"));
}

TEST_F(ImportTest, IdxTruncated) {
  const std::string content = Idx(0x08, {3, 2, 2}, Iota(11));  // one byte short
  for (const std::string& path : {WriteFile("t", content), WriteGzip("t.gz", content)}) {
    Result<HostArray> a = ReadIdxFile(path);
    EXPECT_TRUE(a.status().IsCorruption());
    EXPECT_TRUE(ErrorHas(a.status(), path + ": truncated IDX file"));
    EXPECT_TRUE(ErrorHas(a.status(), "promise 12 data bytes, found 11"));
  }
  // The header itself cut short.
  std::string path = WriteFile("h", Idx(0x08, {3, 2, 2}, "").substr(0, 9));
  EXPECT_TRUE(ErrorHas(ReadIdxFile(path).status(), path + ": truncated IDX header"));

  // A header promising 2^39 bytes that are not there: an error, not a huge allocation.
  path = WriteFile("liar", Idx(0x08, {1U << 20, 1U << 19}, "abc"));
  EXPECT_TRUE(ErrorHas(ReadIdxFile(path).status(), "promise 549755813888 data bytes, found 3"));

  // A gzip stream cut in the middle.
  std::string noise;
  uint32_t seed = 12345;
  for (int i = 0; i < 4000; i++) {
    seed = seed * 1103515245 + 12345;
    noise.push_back(static_cast<char>(seed >> 24));
  }
  std::string gz = ReadFile(WriteGzip("full.gz", Idx(0x08, {4000}, noise)));
  ASSERT_TRUE(ReadIdxFile(Path("full.gz")).ok());
  path = WriteFile("cut.gz", gz.substr(0, gz.size() / 2));
  Result<HostArray> a = ReadIdxFile(path);
  EXPECT_TRUE(a.status().IsCorruption());
  EXPECT_TRUE(ErrorHas(a.status(), path + ": truncated IDX file"));
}

TEST_F(ImportTest, IdxTrailingBytes) {
  const std::string content = Idx(0x08, {2, 2}, Iota(4) + "xyz");
  for (const std::string& path : {WriteFile("t", content), WriteGzip("t.gz", content)}) {
    Result<HostArray> a = ReadIdxFile(path);
    EXPECT_TRUE(a.status().IsCorruption());
    EXPECT_TRUE(ErrorHas(a.status(), path + ": 3 bytes of trailing data after the 4 data bytes"));
  }
}

TEST_F(ImportTest, IdxAbsurdDimensions) {
  std::string path = WriteFile("huge", Idx(0x08, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, ""));
  EXPECT_TRUE(ErrorHas(ReadIdxFile(path).status(), path + ": IDX dimensions"));
  EXPECT_TRUE(ErrorHas(ReadIdxFile(path).status(), "more than 2^40 bytes"));
  // 2^41 bytes without overflowing uint64.
  path = WriteFile("big", Idx(0x0D, {1u << 20, 1u << 19}, ""));
  EXPECT_TRUE(ErrorHas(ReadIdxFile(path).status(), "more than 2^40 bytes"));
}

TEST_F(ImportTest, IdxMissingFile) {
  std::string path = Path("no-such-file.gz");
  Result<HostArray> a = ReadIdxFile(path);
  EXPECT_TRUE(a.status().IsNotFound());
  EXPECT_TRUE(ErrorHas(a.status(), path));
}

TEST_F(ImportTest, IdxDataset) {
  std::string images = WriteGzip("img.gz", Idx(0x08, {3, 2, 2}, Iota(12)));
  std::string labels = WriteGzip("lbl.gz", Idx(0x08, {3}, Bytes({9, 0, 4})));
  auto ds = ReadIdxDataset(images, labels);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->first.dtype, Dtype::kUint8);
  EXPECT_EQ(ds->first.shape, (std::vector<uint64_t>{3, 2, 2}));
  EXPECT_EQ(ds->second.dtype, Dtype::kInt64);
  EXPECT_EQ(ds->second.shape, (std::vector<uint64_t>{3}));
  EXPECT_EQ(Values<int64_t>(ds->second), (std::vector<int64_t>{9, 0, 4}));
}

TEST_F(ImportTest, IdxDatasetCountMismatch) {
  std::string images = WriteGzip("img.gz", Idx(0x08, {3, 2, 2}, Iota(12)));
  std::string labels = WriteFile("lbl", Idx(0x08, {2}, Bytes({1, 2})));
  auto ds = ReadIdxDataset(images, labels);
  EXPECT_TRUE(ds.status().IsInvalidArgument());
  EXPECT_TRUE(ErrorHas(ds.status(), images + " has 3 samples but " + labels + " has 2 labels"));

  // Labels must be one value per sample.
  std::string matrix = WriteFile("lbl2", Idx(0x08, {3, 2}, Iota(6)));
  EXPECT_TRUE(ErrorHas(ReadIdxDataset(images, matrix).status(), matrix + ": class labels must"));
}

TEST_F(ImportTest, FashionMnistTestSet) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  const std::string images = dir + "t10k-images-idx3-ubyte.gz";
  const std::string labels = dir + "t10k-labels-idx1-ubyte.gz";
  if (!fs::exists(images) || !fs::exists(labels)) GTEST_SKIP() << "no Fashion-MNIST in " << dir;

  Result<HostArray> y = ReadIdxFile(labels);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->dtype, Dtype::kUint8);
  ASSERT_EQ(y->shape, (std::vector<uint64_t>{10000}));
  std::vector<int> per_class(10, 0);
  for (uint8_t v : Values<uint8_t>(*y)) {
    ASSERT_LE(v, 9);
    per_class[v]++;
  }
  EXPECT_EQ(per_class, std::vector<int>(10, 1000));  // the test set is balanced

  auto ds = ReadIdxDataset(images, labels);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->first.dtype, Dtype::kUint8);
  EXPECT_EQ(ds->first.shape, (std::vector<uint64_t>{10000, 28, 28}));
  EXPECT_EQ(ds->second.dtype, Dtype::kInt64);
  EXPECT_EQ(ds->second.shape, (std::vector<uint64_t>{10000}));
  std::vector<int64_t> converted = Values<int64_t>(ds->second);
  std::vector<uint8_t> raw = Values<uint8_t>(*y);
  EXPECT_TRUE(std::equal(converted.begin(), converted.end(), raw.begin()));
}

// ---------------------------------------------------------------------------------------
// .npy

TEST_F(ImportTest, NpyRoundTrip) {
  std::vector<HostArray> arrays;
  arrays.push_back(MakeArray<uint8_t>(Dtype::kUint8, {2, 3}, {0, 1, 2, 253, 254, 255}));
  arrays.push_back(MakeArray<float>(Dtype::kFloat32, {4}, {1.5F, -0.0F, 3e38F, 1e-40F}));
  arrays.push_back(MakeArray<int64_t>(Dtype::kInt64, {3, 1, 1}, {INT64_MIN, -1, INT64_MAX}));
  arrays.push_back(HostArray(Dtype::kFloat32, {0, 28, 28}));
  arrays.push_back(MakeArray<double>(Dtype::kFloat64, {}, {2.5}));  // a scalar
  for (size_t i = 0; i < arrays.size(); i++) {
    SCOPED_TRACE(i);
    std::string path = Path("a" + std::to_string(i) + ".npy");
    ASSERT_TRUE(WriteNpyFile(path, arrays[i]).ok());
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    EXPECT_EQ(ReadFile(path).size() % 64, arrays[i].data.size() % 64);  // header is 64-aligned
    Result<HostArray> back = ReadNpyFile(path);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->dtype, arrays[i].dtype);
    EXPECT_EQ(back->shape, arrays[i].shape);
    EXPECT_EQ(back->data, arrays[i].data);
  }
  // Overwriting replaces the old content.
  std::string path = Path("a0.npy");
  ASSERT_TRUE(WriteNpyFile(path, arrays[1]).ok());
  Result<HostArray> back = ReadNpyFile(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->dtype, Dtype::kFloat32);
}

TEST_F(ImportTest, NpyReadsVersion2Header) {
  std::string dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }";
  std::string header = dict + std::string(128 - 12 - dict.size() - 1, ' ') + "\n";
  std::string file = "\x93NUMPY" + Bytes({2, 0, static_cast<int>(header.size()), 0, 0, 0}) +
                     header + Bytes({7, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF});
  Result<HostArray> a = ReadNpyFile(WriteFile("v2.npy", file));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->dtype, Dtype::kInt32);
  EXPECT_EQ(Values<int32_t>(*a), (std::vector<int32_t>{7, -1}));
}

TEST_F(ImportTest, NpyRejectsBadFiles) {
  const std::string good_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
  const std::string data16(16, '\0');

  std::string path = WriteFile("truncated.npy", Npy(good_dict, data16.substr(0, 15)));
  Result<HostArray> a = ReadNpyFile(path);
  EXPECT_TRUE(a.status().IsCorruption());
  EXPECT_TRUE(ErrorHas(a.status(), path + ": not a valid .npy file: truncated"));

  path = WriteFile("magic.npy", "\x93NUMPX" + Npy(good_dict, data16).substr(6));
  EXPECT_TRUE(ErrorHas(ReadNpyFile(path).status(), path + ": not a valid .npy file: missing"));

  path = WriteFile("fortran.npy",
                   Npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", data16));
  EXPECT_TRUE(ErrorHas(ReadNpyFile(path).status(), path + ": not a valid .npy file: Fortran"));

  path = WriteFile("bigendian.npy",
                   Npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", data16));
  EXPECT_TRUE(ErrorHas(ReadNpyFile(path).status(), path + ": not a valid .npy file: big-endian"));

  path = WriteFile("trailing.npy", Npy(good_dict, data16 + "x"));
  EXPECT_TRUE(
      ErrorHas(ReadNpyFile(path).status(), path + ": not a valid .npy file: trailing bytes"));

  path = WriteFile("empty.npy", "");
  EXPECT_TRUE(ErrorHas(ReadNpyFile(path).status(), path + ": not a valid .npy file"));

  path = Path("missing.npy");
  a = ReadNpyFile(path);
  EXPECT_TRUE(a.status().IsNotFound());
  EXPECT_TRUE(ErrorHas(a.status(), path));
}

TEST_F(ImportTest, WriteNpyErrors) {
  HostArray bad(Dtype::kFloat32, {2, 2});
  bad.data.resize(15);
  std::string path = Path("bad.npy");
  EXPECT_TRUE(ErrorHas(WriteNpyFile(path, bad), path + ": float32 array of shape (2, 2) holds 15"));
  EXPECT_FALSE(fs::exists(path));

  path = Path("no-such-dir/x.npy");
  Status s = WriteNpyFile(path, HostArray(Dtype::kUint8, {1}));
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_TRUE(ErrorHas(s, path + ".tmp"));
}

// ---------------------------------------------------------------------------------------
// Conversions

TEST_F(ImportTest, ToStoreFeatures) {
  auto f =
      ToStoreFeatures(MakeArray<double>(Dtype::kFloat64, {2, 2}, {0.5, -1.25, 1e10, 0.1}), "x.npy");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->dtype, Dtype::kFloat32);
  EXPECT_EQ(f->shape, (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(Values<float>(*f), (std::vector<float>{0.5F, -1.25F, 1e10F, 0.1F}));

  f = ToStoreFeatures(MakeArray<int32_t>(Dtype::kInt32, {3}, {-7, 0, 1 << 20}), "x.npy");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(Values<float>(*f), (std::vector<float>{-7.0F, 0.0F, 1048576.0F}));

  f = ToStoreFeatures(MakeArray<int64_t>(Dtype::kInt64, {1}, {-3}), "x.npy");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(Values<float>(*f), (std::vector<float>{-3.0F}));

  HostArray u8 = MakeArray<uint8_t>(Dtype::kUint8, {1, 2}, {3, 250});
  f = ToStoreFeatures(u8, "x.npy");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->dtype, Dtype::kUint8);
  EXPECT_EQ(f->data, u8.data);

  EXPECT_TRUE(
      ErrorHas(ToStoreFeatures(MakeArray<float>(Dtype::kFloat32, {}, {1.0F}), "s.npy").status(),
               "s.npy: features must have at least one dimension"));
  EXPECT_TRUE(ErrorHas(
      ToStoreFeatures(MakeArray<double>(Dtype::kFloat64, {2}, {1.0, 1e300}), "big.npy").status(),
      "big.npy: element 1 (1e+300) is out of range for float32"));
}

TEST_F(ImportTest, ToClassLabels) {
  auto y = ToClassLabels(MakeArray<float>(Dtype::kFloat32, {3, 1}, {0.0F, 7.0F, -2.0F}), "y.npy");
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->dtype, Dtype::kInt64);
  EXPECT_EQ(y->shape, (std::vector<uint64_t>{3}));
  EXPECT_EQ(Values<int64_t>(*y), (std::vector<int64_t>{0, 7, -2}));

  y = ToClassLabels(MakeArray<uint8_t>(Dtype::kUint8, {2}, {9, 255}), "y.npy");
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(Values<int64_t>(*y), (std::vector<int64_t>{9, 255}));

  y = ToClassLabels(MakeArray<int32_t>(Dtype::kInt32, {2}, {-1, 5}), "y.npy");
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(Values<int64_t>(*y), (std::vector<int64_t>{-1, 5}));

  y = ToClassLabels(MakeArray<int64_t>(Dtype::kInt64, {2, 1}, {4, 2}), "y.npy");
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->shape, (std::vector<uint64_t>{2}));

  y = ToClassLabels(MakeArray<double>(Dtype::kFloat64, {3}, {1.0, 2.5, 3.0}), "y.npy");
  EXPECT_TRUE(y.status().IsInvalidArgument());
  EXPECT_TRUE(ErrorHas(y.status(), "y.npy: label 1 is 2.5, not an integer"));
  EXPECT_TRUE(ErrorHas(
      ToClassLabels(MakeArray<float>(Dtype::kFloat32, {1}, {std::nanf("")}), "y.npy").status(),
      "y.npy: label 0 is nan"));
  EXPECT_TRUE(ErrorHas(
      ToClassLabels(MakeArray<uint64_t>(Dtype::kUint64, {1}, {UINT64_MAX}), "y.npy").status(),
      "beyond the int64 range"));
  EXPECT_TRUE(ErrorHas(ToClassLabels(HostArray(Dtype::kInt64, {2, 2}), "y.npy").status(),
                       "y.npy: class labels must have shape (n,) or (n, 1), not (2, 2)"));
  EXPECT_TRUE(ErrorHas(ToClassLabels(HostArray(Dtype::kInt64, {}), "y.npy").status(),
                       "class labels must have shape"));
}

TEST_F(ImportTest, ToVectorLabels) {
  auto y = ToVectorLabels(MakeArray<int64_t>(Dtype::kInt64, {3}, {1, -2, 3}), "y.npy");
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->dtype, Dtype::kFloat32);
  EXPECT_EQ(y->shape, (std::vector<uint64_t>{3, 1}));
  EXPECT_EQ(Values<float>(*y), (std::vector<float>{1.0F, -2.0F, 3.0F}));

  y = ToVectorLabels(MakeArray<double>(Dtype::kFloat64, {1, 2}, {0.25, 4.0}), "y.npy");
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->shape, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(Values<float>(*y), (std::vector<float>{0.25F, 4.0F}));

  EXPECT_TRUE(ErrorHas(ToVectorLabels(HostArray(Dtype::kFloat32, {}), "y.npy").status(),
                       "y.npy: vector labels must have at least one dimension"));
}

// ---------------------------------------------------------------------------------------
// CSV

CsvOptions Label(const std::string& column,
                 CsvOptions::LabelType type = CsvOptions::LabelType::kAuto) {
  CsvOptions o;
  o.label_column = column;
  o.label_type = type;
  return o;
}

TEST_F(ImportTest, CsvLabelInMiddleColumnWithCrlfAndQuotes) {
  std::string path = WriteFile("data.csv",
                               "\xEF\xBB\xBF a , \"the label\",\"c,d\"\r\n"
                               "1.5, 3 ,-2\r\n"
                               "\r\n"
                               "+4,\"0\",1e3\r\n"
                               "0,7,.25\r\n"
                               "\r\n");
  auto ds = ReadCsvDataset(path, Label("the label"));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const auto& [x, y] = *ds;
  EXPECT_EQ(x.dtype, Dtype::kFloat32);
  EXPECT_EQ(x.shape, (std::vector<uint64_t>{3, 2}));
  EXPECT_EQ(Values<float>(x), (std::vector<float>{1.5F, -2.0F, 4.0F, 1000.0F, 0.0F, 0.25F}));
  EXPECT_EQ(y.dtype, Dtype::kInt64);
  EXPECT_EQ(y.shape, (std::vector<uint64_t>{3}));
  EXPECT_EQ(Values<int64_t>(y), (std::vector<int64_t>{3, 0, 7}));

  // The feature column named with a comma is found too.
  ds = ReadCsvDataset(path, Label("c,d"));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->second.dtype, Dtype::kFloat32);  // -2, 1000, 0.25: not all integral
  EXPECT_EQ(ds->second.shape, (std::vector<uint64_t>{3, 1}));
}

TEST_F(ImportTest, CsvLabelTypes) {
  std::string path = WriteFile("d.csv", "x;y\n1;2.0\n2;1e1\n");
  CsvOptions o = Label("y");
  o.delimiter = ';';
  auto ds = ReadCsvDataset(path, o);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->second.dtype, Dtype::kInt64);  // integral values are classes
  EXPECT_EQ(Values<int64_t>(ds->second), (std::vector<int64_t>{2, 10}));

  o.label_type = CsvOptions::LabelType::kVector;
  ds = ReadCsvDataset(path, o);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->second.dtype, Dtype::kFloat32);
  EXPECT_EQ(ds->second.shape, (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(Values<float>(ds->second), (std::vector<float>{2.0F, 10.0F}));

  path = WriteFile("r.csv", "x,y\n1,0.5\n2,3\n");
  ds = ReadCsvDataset(path, Label("y"));
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->second.dtype, Dtype::kFloat32);
  EXPECT_EQ(Values<float>(ds->second), (std::vector<float>{0.5F, 3.0F}));

  ds = ReadCsvDataset(path, Label("y", CsvOptions::LabelType::kClass));
  EXPECT_TRUE(ds.status().IsInvalidArgument());
  EXPECT_TRUE(ErrorHas(ds.status(), path + ":2: column 'y': '0.5' is not an integer"));
}

TEST_F(ImportTest, CsvClassLabelsOutOfRangeNameTheirLines) {
  // Issue 14: -1, 2^40 and 1e23 were imported; 1e23 even turned the labels into regression.
  std::string path = WriteFile("c.csv", "x,y\n1,2\n2,-1\n\n3,1099511627776\n4,1e23\n5,0\n");
  auto ds = ReadCsvDataset(path, Label("y"));
  EXPECT_TRUE(ds.status().IsInvalidArgument());
  EXPECT_EQ(ds.status().message(), path +
                                       ": column 'y': class labels must be in [0, 100000); line 3: "
                                       "-1, line 5: 1099511627776, line 6: 1e+23");
  EXPECT_TRUE(ErrorHas(ReadCsvDataset(path, Label("y", CsvOptions::LabelType::kClass)).status(),
                       "line 6: 1e+23"));
  // A class count narrows the range.
  path = WriteFile("k.csv", "x,y\n1,2\n2,9\n3,10\n");
  CsvOptions o = Label("y");
  o.classes = 10;
  EXPECT_EQ(ReadCsvDataset(path, o).status().message(),
            path + ": column 'y': class labels must be in [0, 10); line 4: 10");
  o.classes = 11;
  EXPECT_TRUE(ReadCsvDataset(path, o).ok());
  // More than five bad rows: the first five and the count.
  std::string text = "x,y\n";
  for (int i = 0; i < 8; i++) text += "1,-" + std::to_string(i + 1) + "\n";
  ds = ReadCsvDataset(WriteFile("many.csv", text), Label("y"));
  EXPECT_TRUE(ErrorHas(ds.status(), "line 6: -5, ... (8 rows)"));
  // Regression targets stay regression targets.
  ds = ReadCsvDataset(WriteFile("r.csv", "x,y\n1,0.5\n2,1e23\n"), Label("y"));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->second.dtype, Dtype::kFloat32);
}

TEST_F(ImportTest, CsvNonFiniteFeaturesOnlyWhenAllowed) {
  std::string path = WriteFile("n.csv", "a,label\n1,0\nnan,1\n-inf,1\n");
  EXPECT_TRUE(ErrorHas(ReadCsvDataset(path, Label("label")).status(),
                       path + ":3: column 'a': 'nan' is not a finite number"));
  CsvOptions o = Label("label");
  o.allow_non_finite = true;
  auto ds = ReadCsvDataset(path, o);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  auto x = Values<float>(ds->first);
  EXPECT_TRUE(std::isnan(x[1]));
  EXPECT_TRUE(std::isinf(x[2]) && x[2] < 0);
}

TEST_F(ImportTest, ClassLabelsOutOfRangeNameTheirRows) {
  HostArray y(Dtype::kInt64, {4});
  int64_t* v = y.as<int64_t>();
  v[0] = 0;
  v[1] = -1;
  v[2] = int64_t{1} << 40;
  v[3] = 9;
  EXPECT_EQ(CheckClassLabels(y, 0, "y.npy").message(),
            "y.npy: class labels must be in [0, 100000); row 1: -1, row 2: 1099511627776");
  v[1] = 1;
  v[2] = 2;
  EXPECT_TRUE(CheckClassLabels(y, 0, "y.npy").ok());
  EXPECT_TRUE(CheckClassLabels(y, 10, "y.npy").ok());
  EXPECT_EQ(CheckClassLabels(y, 9, "y.npy").message(),
            "y.npy: class labels must be in [0, 9); row 3: 9");
}

TEST_F(ImportTest, NonFiniteValuesNameTheirRows) {
  HostArray x(Dtype::kFloat32, {3, 2});
  float* f = x.as<float>();
  for (int i = 0; i < 6; i++) f[i] = static_cast<float>(i);
  EXPECT_TRUE(CheckFinite(x, "x.npy", "features").ok());
  f[1] = std::nanf("");
  f[4] = -std::numeric_limits<float>::infinity();
  f[5] = std::nanf("");
  EXPECT_EQ(CheckFinite(x, "x.npy", "features").message(),
            "x.npy: features must be finite numbers; row 0 (nan), row 2 (-inf)");
  HostArray u(Dtype::kUint8, {2, 2});
  EXPECT_TRUE(CheckFinite(u, "u.npy", "features").ok());
}

TEST_F(ImportTest, IdxLabelsOutsideTheClassCount) {
  std::string images = WriteFile("i.idx", Idx(0x08, {3, 2}, std::string(6, '\x01')));
  std::string labels = WriteFile("l.idx", Idx(0x08, {3}, std::string("\x00\x09\x0c", 3)));
  EXPECT_TRUE(ReadIdxDataset(images, labels).ok());
  auto ds = ReadIdxDataset(images, labels, 10);
  EXPECT_EQ(ds.status().message(), labels + ": class labels must be in [0, 10); row 2: 12");
}

TEST_F(ImportTest, CsvMissingLabelColumn) {
  std::string path = WriteFile("data.csv", "a,b,c\n1,2,3\n");
  auto ds = ReadCsvDataset(path, Label("label"));
  EXPECT_TRUE(ds.status().IsInvalidArgument());
  EXPECT_TRUE(ErrorHas(ds.status(), path + ": no column named 'label' (columns: 'a', 'b', 'c')"));

  // A typo in a wide header: every column is listed, and the closest one suggested.
  std::string header, row;
  for (int c = 0; c < 30; c++) {
    header += "f" + std::to_string(c) + ",";
    row += "1,";
  }
  path = WriteFile("wide.csv", header + "species\n" + row + "2\n");
  auto wide = ReadCsvDataset(path, Label("specis"));
  EXPECT_TRUE(ErrorHas(wide.status(), "no column named 'specis'; did you mean 'species'?"));
  EXPECT_TRUE(ErrorHas(wide.status(), "'f29', 'species')"));

  path = WriteFile("dup.csv", "a,a\n1,2\n");
  EXPECT_TRUE(ErrorHas(ReadCsvDataset(path, Label("a")).status(), "appears 2 times"));

  path = WriteFile("only.csv", "a\n1\n");
  EXPECT_TRUE(ErrorHas(ReadCsvDataset(path, Label("a")).status(), "no feature columns"));
}

TEST_F(ImportTest, CsvRaggedRow) {
  std::string path = WriteFile("data.csv", "a,label,c\n1,2,3\n4,5\n");
  auto ds = ReadCsvDataset(path, Label("label"));
  EXPECT_TRUE(ds.status().IsInvalidArgument());
  EXPECT_TRUE(ErrorHas(ds.status(), path + ":3: expected 3 fields, found 2"));

  path = WriteFile("long.csv", "a,label\n1,2,3\n");
  EXPECT_TRUE(ErrorHas(ReadCsvDataset(path, Label("label")).status(),
                       path + ":2: expected 2 fields, found 3"));
}

TEST_F(ImportTest, CsvBadValues) {
  struct Case {
    std::string row;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"abc,1", ":2: column 'a': 'abc' is not a number"},
      {"1.5x,1", ":2: column 'a': '1.5x' is not a number"},
      {",1", ":2: column 'a': empty value"},
      {"nan,1", ":2: column 'a': 'nan' is not a finite number"},
      {"-inf,1", ":2: column 'a': '-inf' is not a finite number"},
      {"1e39,1", ":2: column 'a': '1e39' is out of range for float32"},
      {"1,two", ":2: column 'label': 'two' is not a number"},
      {"1,NaN", ":2: column 'label': 'NaN' is not a finite number"},
      {"1,\"2", ":2: unterminated or malformed quoted field"},
  };
  for (size_t i = 0; i < cases.size(); i++) {
    SCOPED_TRACE(cases[i].row);
    std::string path = WriteFile("bad" + std::to_string(i) + ".csv", "a,label\n" + cases[i].row);
    Result<std::pair<HostArray, HostArray>> ds = ReadCsvDataset(path, Label("label"));
    EXPECT_TRUE(ds.status().IsInvalidArgument());
    EXPECT_TRUE(ErrorHas(ds.status(), path + cases[i].message));
  }
  // Underflow is not an error: it rounds to zero, as numpy does.
  auto ds = ReadCsvDataset(WriteFile("tiny.csv", "a,label\n1e-60,1\n"), Label("label"));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(Values<float>(ds->first), (std::vector<float>{0.0F}));
}

TEST_F(ImportTest, CsvNoData) {
  std::string path = WriteFile("header.csv", "a,label\r\n\r\n");
  auto ds = ReadCsvDataset(path, Label("label"));
  EXPECT_TRUE(ds.status().IsInvalidArgument());
  EXPECT_TRUE(ErrorHas(ds.status(), path + ": no data rows"));

  path = WriteFile("empty.csv", "");
  EXPECT_TRUE(ErrorHas(ReadCsvDataset(path, Label("label")).status(), path + ": empty file"));

  path = Path("missing.csv");
  ds = ReadCsvDataset(path, Label("label"));
  EXPECT_TRUE(ds.status().IsNotFound());
  EXPECT_TRUE(ErrorHas(ds.status(), path));
}

}  // namespace
}  // namespace cohort::store
