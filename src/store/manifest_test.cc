#include "store/manifest.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

namespace cohort::store {
namespace {

Manifest SampleManifest() {
  Manifest m;
  m.generation = 3;
  m.parent = 2;
  m.created = "2026-12-02T12:00:00.000Z";
  m.note = "split \"quoted\" note";
  m.next_segment = 5;
  m.next_sample_id = 100;
  TableEntry t;
  t.schema.feature_dtype = Dtype::kUint8;
  t.schema.feature_shape = {28, 28};
  t.schema.label_kind = LabelKind::kClass;
  t.row_count = 10;
  t.rows_file = {"train-gen-000003.rows.npy", 208, 77};
  SegmentEntry s;
  s.id = 4;
  s.rows = 10;
  s.x = {"train-seg-000004.x.npy", 7968, 1};
  s.y = FileEntry{"train-seg-000004.y.npy", 208, 2};
  s.ids = {"train-seg-000004.id.npy", 208, 3};
  t.segments.push_back(s);
  m.tables["train"] = t;
  TableEntry pool = t;
  pool.schema.label_kind = LabelKind::kVector;
  pool.schema.label_shape = {3};
  m.tables["pool"] = pool;
  return m;
}

TEST(ManifestTest, EncodeDecodeRoundTrip) {
  Manifest m = SampleManifest();
  std::string text = EncodeManifest(m);
  auto back = DecodeManifest(text, "gen-000003.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->generation, 3u);
  EXPECT_EQ(back->parent, 2u);
  EXPECT_EQ(back->note, m.note);
  EXPECT_EQ(back->next_sample_id, 100u);
  ASSERT_EQ(back->tables.size(), 2u);
  EXPECT_EQ(back->tables["train"].schema, m.tables["train"].schema);
  EXPECT_EQ(back->tables["pool"].schema.label_shape, std::vector<uint64_t>{3});
  EXPECT_EQ(back->tables["train"].segments[0].y->file, "train-seg-000004.y.npy");
  EXPECT_EQ(back->Files().size(), 4u);  // rows + x + y + ids, shared by both tables
}

TEST(ManifestTest, EveryBitFlipIsDetected) {
  std::string text = EncodeManifest(SampleManifest());
  for (size_t i = 0; i < text.size(); i += 7) {
    std::string damaged = text;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x04);
    auto r = DecodeManifest(damaged, "gen-000003.json");
    EXPECT_FALSE(r.ok()) << "flip at byte " << i << " went unnoticed";
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("gen-000003.json"), std::string::npos);
    }
  }
}

TEST(ManifestTest, TruncationIsDetected) {
  std::string text = EncodeManifest(SampleManifest());
  for (size_t len : {size_t{0}, size_t{1}, text.size() / 2, text.size() - 1}) {
    auto r = DecodeManifest(text.substr(0, len), "gen-000003.json");
    EXPECT_FALSE(r.ok()) << "length " << len;
  }
}

// The manifest's text after `mutate` changed its JSON, with a valid checksum trailer again:
// damage the checksum cannot catch (a bug, or a hand edit), which the parser must refuse.
std::string Resealed(const Manifest& m, const std::function<void(nlohmann::json&)>& mutate) {
  std::string text = EncodeManifest(m);
  const size_t cut = text.rfind('\n', text.size() - 2);
  nlohmann::json j = nlohmann::json::parse(text.substr(0, cut + 1));
  mutate(j);
  std::string body = j.dump(1) + "\n";
  char trailer[32];
  std::snprintf(trailer, sizeof(trailer), "#crc32=%08x\n", Crc32(body));
  return body + trailer;
}

// Fuzzing found (fuzz/findings/manifest-ubsan-from_json-356) that a float too large for a
// uint32 field reached nlohmann's float-to-integer cast: undefined behaviour. Every integer
// field now takes JSON integers in its type's range and nothing else.
TEST(ManifestTest, IntegerFieldsOutOfTheirRangeAreCorruption) {
  using nlohmann::json;
  const Manifest m = SampleManifest();
  const std::vector<std::pair<std::string, std::function<void(json&)>>> damage{
      {"crc32 3.3887e19", [](json& j) { j["tables"]["train"]["rows"]["crc32"] = 3.3887e19; }},
      {"crc32 2^32", [](json& j) { j["tables"]["train"]["rows"]["crc32"] = 4294967296ULL; }},
      {"crc32 -1", [](json& j) { j["tables"]["train"]["rows"]["crc32"] = -1; }},
      {"bytes 1.5", [](json& j) { j["tables"]["pool"]["segments"][0]["x"]["bytes"] = 1.5; }},
      {"bytes -8", [](json& j) { j["tables"]["pool"]["segments"][0]["x"]["bytes"] = -8; }},
      {"generation \"3\"", [](json& j) { j["generation"] = "3"; }},
      {"generation 1e300", [](json& j) { j["generation"] = 1e300; }},
      {"format_version 1e300", [](json& j) { j["format_version"] = 1e300; }},
      {"segment id -2", [](json& j) { j["tables"]["train"]["segments"][0]["id"] = -2; }},
      {"row count 7.0", [](json& j) { j["tables"]["train"]["rows"]["count"] = 7.0; }},
      {"shape [-1]",
       [](json& j) {
         j["tables"]["train"]["features"]["shape"] = {28, -1};
       }},
      {"shape [2.5e30]", [](json& j) { j["tables"]["pool"]["labels"]["shape"] = {2.5e30}; }},
      {"shape 3", [](json& j) { j["tables"]["pool"]["labels"]["shape"] = 3; }},
  };
  for (const auto& [what, mutate] : damage) {
    auto r = DecodeManifest(Resealed(m, mutate), "gen-000003.json");
    ASSERT_FALSE(r.ok()) << what << " was accepted";
    EXPECT_TRUE(r.status().IsCorruption()) << what << ": " << r.status().ToString();
    EXPECT_NE(r.status().message().find("gen-000003.json"), std::string::npos) << what;
    EXPECT_NE(r.status().message().find("is not an"), std::string::npos)
        << what << ": " << r.status().ToString();
  }
  // The largest values of each type still read back.
  auto r = DecodeManifest(Resealed(m,
                                   [](json& j) {
                                     j["tables"]["train"]["rows"]["crc32"] = 4294967295ULL;
                                     j["next_sample_id"] = UINT64_MAX;
                                   }),
                          "gen-000003.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tables["train"].rows_file.crc32, 4294967295u);
  EXPECT_EQ(r->next_sample_id, UINT64_MAX);
}

TEST(ManifestTest, FileNames) {
  EXPECT_EQ(ManifestFileName(42), "gen-000042.json");
  EXPECT_EQ(RowsFileName("train", 42), "train-gen-000042.rows.npy");
  EXPECT_EQ(SegmentFileName("pool", 17, "x"), "pool-seg-000017.x.npy");
  EXPECT_EQ(ParseManifestFileName("gen-000042.json"), 42u);
  EXPECT_EQ(ParseManifestFileName("gen-1234567.json"), 1234567u);
  EXPECT_FALSE(ParseManifestFileName("gen-000042.json.tmp").has_value());
  EXPECT_FALSE(ParseManifestFileName("gen-abc.json").has_value());
}

TEST(ManifestTest, DataFileNamesAndLeftovers) {
  EXPECT_TRUE(IsStoreDataFileName("train-seg-000017.x.npy"));
  EXPECT_TRUE(IsStoreDataFileName("my_pool-seg-000017.id.npy"));
  EXPECT_TRUE(IsStoreDataFileName("train-gen-000003.rows.npy"));
  EXPECT_FALSE(IsStoreDataFileName("train-seg-000017.x.npy.tmp"));
  EXPECT_FALSE(IsStoreDataFileName("export.x.npy"));
  EXPECT_FALSE(IsStoreDataFileName("gen-000003.json"));
  EXPECT_FALSE(IsStoreDataFileName("bad-name-seg-000017.x.npy"));  // not a table name
  EXPECT_FALSE(IsStoreDataFileName("train-seg-17.x.npy"));
  EXPECT_EQ(ClassifyStoreFile("CURRENT.tmp").kind, StoreFileKind::kTemp);
  EXPECT_EQ(ClassifyStoreFile("gen-000004.json.tmp").kind, StoreFileKind::kTemp);
  EXPECT_EQ(ClassifyStoreFile("notes.tmp").kind, StoreFileKind::kOther);
  EXPECT_EQ(ClassifyStoreFile("gen-000004.json").number, 4u);
  // CURRENT at generation 3 whose next segment is 18.
  EXPECT_TRUE(IsUncommittedFile("train-seg-000018.x.npy", 3, 18));
  EXPECT_FALSE(IsUncommittedFile("train-seg-000017.x.npy", 3, 18));
  EXPECT_TRUE(IsUncommittedFile("train-gen-000004.rows.npy", 3, 18));
  EXPECT_FALSE(IsUncommittedFile("train-gen-000003.rows.npy", 3, 18));
  EXPECT_TRUE(IsUncommittedFile("gen-000004.json", 3, 18));
  EXPECT_TRUE(IsUncommittedFile("CURRENT.tmp", 3, 18));
  EXPECT_FALSE(IsUncommittedFile("notes.txt", 3, 18));
}

TEST(ManifestTest, Crc32MatchesZlibReference) {
  // zlib.crc32(b"123456789") == 0xcbf43926, the standard check value.
  EXPECT_EQ(Crc32(std::string_view("123456789")), 0xcbf43926u);
}

}  // namespace
}  // namespace cohort::store
