#include "loop/update/change_set.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "loop/config/class_labels.h"
#include "loop/config/testing/source_store.h"
#include "store/store.h"
#include "store/test_util.h"
#include "store/transaction.h"

namespace cohort::loop {
namespace {

using store::Dtype;
using store::HostArray;
using store::testing::ScratchDir;
using store::testing::Uint8Features;

// Tables of the test store (3 classes):
//   train  ids 0..5    uint8 (2, 3) features, class labels i % 3
//   pool   ids 6..11   the same
//   test   ids 12..13  the same
//   reg    ids 14..16  float32 (3,) features, vector labels float32 (2,)
//   unl    ids 17..18  uint8 (2, 3) features, no labels
std::string MakeStore() {
  std::string dir = ScratchDir("store");
  testing::MakeSourceStore(dir, 6, 6, 2);
  auto txn = store::Transaction::Begin(dir);
  EXPECT_TRUE(txn.ok());
  store::TableSchema reg;
  reg.feature_dtype = Dtype::kFloat32;
  reg.feature_shape = {3};
  reg.label_kind = store::LabelKind::kVector;
  reg.label_shape = {2};
  EXPECT_TRUE((*txn)->CreateTable("reg", reg).ok());
  HostArray x(Dtype::kFloat32, {3, 3});
  HostArray y(Dtype::kFloat32, {3, 2});
  EXPECT_TRUE((*txn)->Append("reg", x, &y).ok());
  store::TableSchema unl;
  unl.feature_dtype = Dtype::kUint8;
  unl.feature_shape = {2, 3};
  unl.label_kind = store::LabelKind::kNone;
  EXPECT_TRUE((*txn)->CreateTable("unl", unl).ok());
  EXPECT_TRUE((*txn)->Append("unl", Uint8Features(2, 17), nullptr).ok());
  EXPECT_TRUE((*txn)->Commit("more tables").ok());
  return dir;
}

void WriteNpy(const std::string& path, const HostArray& a) {
  std::ofstream f(path, std::ios::binary);
  f << store::EncodeNpyHeader(a.dtype, a.shape);
  f.write(reinterpret_cast<const char*>(a.data.data()),
          static_cast<std::streamsize>(a.data.size()));
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

HostArray Uint64s(std::vector<uint64_t> v) {
  HostArray a(Dtype::kUint64, {v.size()});
  if (!v.empty()) std::memcpy(a.data.data(), v.data(), v.size() * 8);
  return a;
}

HostArray Int64s(std::vector<int64_t> v) {
  HostArray a(Dtype::kInt64, {v.size()});
  if (!v.empty()) std::memcpy(a.data.data(), v.data(), v.size() * 8);
  return a;
}

HostArray Floats(std::vector<uint64_t> shape, std::vector<float> v) {
  HostArray a(Dtype::kFloat32, std::move(shape));
  std::memcpy(a.data.data(), v.data(), v.size() * 4);
  return a;
}

std::vector<int64_t> ClassLabelsOfTable(const store::Snapshot& snap, const std::string& name) {
  return ClassLabelsOf(**snap.table(name));
}

std::string Current(const std::string& store_dir) {
  return *ReadFileToString(store_dir + "/CURRENT");
}

class ChangeSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = MakeStore();
    auto snap = store::Snapshot::Open(store_);
    ASSERT_TRUE(snap.ok()) << snap.status().ToString();
    base_ = *snap;
  }
  // A fresh change-set directory holding changes.json and the given arrays.
  std::string MakeChangeSet(const std::string& leaf, const std::string& json,
                            const std::vector<std::pair<std::string, HostArray>>& files = {}) {
    std::string dir = ScratchDir(leaf);
    std::filesystem::create_directories(dir);
    WriteText(dir + "/changes.json", json);
    for (const auto& [name, array] : files) WriteNpy(dir + "/" + name, array);
    return dir;
  }

  std::string store_;
  std::shared_ptr<const store::Snapshot> base_;
};

TEST_F(ChangeSetTest, EmptyChangeSetsAreValid) {
  for (const std::string json : {"{}", R"({"add": [], "remove": [], "move": [], "relabel": []})"}) {
    auto cs = ReadChangeSet(MakeChangeSet("empty", json), *base_, 3);
    ASSERT_TRUE(cs.ok()) << cs.status().ToString();
    EXPECT_TRUE(cs->empty());
  }
  std::string dir = MakeChangeSet("empty-arrays",
                                  R"({"remove": [{"table": "train", "ids": "none.npy"}],
          "relabel": [{"table": "train", "ids": "none.npy", "labels": "no-labels.npy"}],
          "move": [{"from": "pool", "to": "train", "ids": "none.npy"}],
          "add": [{"table": "train", "features": "no-x.npy", "labels": "no-labels.npy"}]})",
                                  {{"none.npy", Uint64s({})},
                                   {"no-labels.npy", Int64s({})},
                                   {"no-x.npy", HostArray(Dtype::kUint8, {0, 2, 3})}});
  auto cs = ReadChangeSet(dir, *base_, 3);
  ASSERT_TRUE(cs.ok()) << cs.status().ToString();
  EXPECT_TRUE(cs->empty());
  auto txn = store::Transaction::Begin(store_);
  ASSERT_TRUE(txn.ok());
  auto counts = ApplyChangeSet(*cs, txn->get());
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  EXPECT_TRUE(counts->tables.empty());
  EXPECT_EQ(counts->added_ids, (std::vector<std::vector<uint64_t>>{{}}));
  EXPECT_TRUE((*txn)->Commit("nothing").status().IsInvalidArgument());
}

TEST_F(ChangeSetTest, EveryKindIsAppliedAndCommitted) {
  std::string dir = MakeChangeSet(
      "all",
      R"({"relabel": [{"table": "train", "ids": "relabel-ids.npy", "labels": "relabel-y.npy"},
                      {"table": "reg", "ids": "reg-ids.npy", "labels": "reg-y.npy"}],
          "remove":  [{"table": "train", "ids": "sub/remove.npy"}],
          "move":    [{"from": "pool", "to": "train", "ids": "move-ids.npy", "labels": "move-y.npy"},
                      {"from": "pool", "to": "test", "ids": "carry.npy"}],
          "add":     [{"table": "train", "features": "add-x.npy", "labels": "add-y.npy"},
                      {"table": "unl", "features": "./add-unl-x.npy"}]})",
      {{"relabel-ids.npy", Uint64s({4, 1})},
       {"relabel-y.npy", Int64s({0, 2})},
       {"reg-ids.npy", Int64s({15})},
       {"reg-y.npy", Floats({1, 2}, {0.5f, -1.5f})}});
  std::filesystem::create_directories(dir + "/sub");
  WriteNpy(dir + "/sub/remove.npy", Int64s({0}));  // int64 ids are taken too
  WriteNpy(dir + "/move-ids.npy", Uint64s({7, 6}));
  WriteNpy(dir + "/move-y.npy", Int64s({1, 1}));
  WriteNpy(dir + "/carry.npy", Uint64s({8}));
  WriteNpy(dir + "/add-x.npy", Uint8Features(2, 100));
  WriteNpy(dir + "/add-y.npy", Int64s({2, 0}));
  WriteNpy(dir + "/add-unl-x.npy", Uint8Features(1, 200));

  auto cs = ReadChangeSet(dir, *base_, 3);
  ASSERT_TRUE(cs.ok()) << cs.status().ToString();
  EXPECT_FALSE(cs->empty());
  auto txn = store::Transaction::Begin(store_);
  ASSERT_TRUE(txn.ok());
  auto counts = ApplyChangeSet(*cs, txn->get());
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  auto gen = (*txn)->Commit("change set");
  ASSERT_TRUE(gen.ok()) << gen.status().ToString();

  EXPECT_EQ(counts->tables.at("train"),
            (TableChangeCounts{.added = 2, .removed = 1, .moved_in = 2, .relabelled = 2}));
  EXPECT_EQ(counts->tables.at("pool"), (TableChangeCounts{.moved_out = 3}));
  EXPECT_EQ(counts->tables.at("test"), (TableChangeCounts{.moved_in = 1}));
  EXPECT_EQ(counts->tables.at("reg"), (TableChangeCounts{.relabelled = 1}));
  EXPECT_EQ(counts->tables.at("unl"), (TableChangeCounts{.added = 1}));
  EXPECT_EQ(counts->added_ids, (std::vector<std::vector<uint64_t>>{{19, 20}, {21}}));

  auto snap = store::Snapshot::Open(store_);
  ASSERT_TRUE(snap.ok());
  const store::Table* train = *(*snap)->table("train");
  EXPECT_EQ(train->Ids(), (std::vector<uint64_t>{1, 2, 3, 4, 5, 7, 6, 19, 20}));
  EXPECT_EQ(ClassLabelsOfTable(**snap, "train"), (std::vector<int64_t>{2, 2, 0, 0, 2, 1, 1, 2, 0}));
  EXPECT_EQ(static_cast<uint8_t>(train->features(7)[0]), 100);  // the added rows' features
  EXPECT_EQ(static_cast<uint8_t>(train->features(5)[0]), 7);    // moved rows keep theirs
  EXPECT_EQ((*(*snap)->table("pool"))->Ids(), (std::vector<uint64_t>{9, 10, 11}));
  EXPECT_EQ((*(*snap)->table("test"))->Ids(), (std::vector<uint64_t>{12, 13, 8}));
  EXPECT_EQ(ClassLabelsOfTable(**snap, "test"), (std::vector<int64_t>{0, 1, 2}));  // carried
  HostArray reg_y = (*(*snap)->table("reg"))->ReadLabels();
  EXPECT_EQ(reg_y.as<float>()[2], 0.5f);
  EXPECT_EQ(reg_y.as<float>()[3], -1.5f);
  EXPECT_EQ((*(*snap)->table("unl"))->Ids(), (std::vector<uint64_t>{17, 18, 21}));
  Status verified = store::VerifyGeneration(store_, *gen);
  EXPECT_TRUE(verified.ok()) << verified.ToString();
}

TEST_F(ChangeSetTest, ApplyRefusesATransactionOnAnotherGeneration) {
  std::string dir = MakeChangeSet("gen", R"({"remove": [{"table": "train", "ids": "ids.npy"}]})",
                                  {{"ids.npy", Uint64s({0})}});
  auto cs = ReadChangeSet(dir, *base_, 3);
  ASSERT_TRUE(cs.ok()) << cs.status().ToString();
  {
    auto txn = store::Transaction::Begin(store_);
    ASSERT_TRUE(txn.ok());
    std::vector<uint64_t> ids{1};
    ASSERT_TRUE((*txn)->Remove("train", ids).ok());
    ASSERT_TRUE((*txn)->Commit("meanwhile").ok());
  }
  auto txn = store::Transaction::Begin(store_);
  ASSERT_TRUE(txn.ok());
  auto counts = ApplyChangeSet(*cs, txn->get());
  EXPECT_TRUE(counts.status().IsInvalidArgument());
  EXPECT_EQ(counts.status().message(),
            dir +
                "/changes.json: checked against generation 2, but the transaction starts from "
                "generation 3");
}

struct Refusal {
  std::string name;
  std::string json;
  std::vector<std::pair<std::string, HostArray>> files;
  std::string message;  // expected after "DIR/changes.json: "
  int64_t classes = 3;
};

TEST_F(ChangeSetTest, RefusalsAreOneLineNamingTheFileAndLeaveTheStoreAlone) {
  HostArray nan_x = Floats({2, 3}, {0, 0, 0, 0, std::numeric_limits<float>::quiet_NaN(), 0});
  HostArray inf_y = Floats({1, 2}, {std::numeric_limits<float>::infinity(), 0});
  const std::string add_train =
      R"({"add": [{"table": "train", "features": "x.npy", "labels": "y.npy"}]})";
  const std::string relabel_train =
      R"({"relabel": [{"table": "train", "ids": "ids.npy", "labels": "y.npy"}]})";
  const std::vector<Refusal> refusals = {
      {"unknown-key",
       R"({"relable": []})",
       {},
       "unknown key \"relable\"; did you mean 'relabel'? (keys: add, remove, move, relabel)"},
      {"not-a-list",
       R"({"remove": {"table": "train"}})",
       {},
       "'remove' must be a list of entries, not {\"table\":\"train\"}"},
      {"unknown-entry-key",
       R"({"remove": [{"tabel": "train", "ids": "ids.npy"}]})",
       {},
       "remove[0]: unknown key \"tabel\"; did you mean 'table'? (a remove has table, ids)"},
      {"missing-key",
       R"({"remove": [{"table": "train"}]})",
       {},
       "remove[0]: 'ids' is missing (a remove needs table, ids)"},
      {"not-json", R"({"remove": [)", {}, "not valid JSON"},
      {"unknown-table",
       R"({"remove": [{"table": "trian", "ids": "ids.npy"}]})",
       {},
       "remove[0]: table \"trian\" does not exist at generation 2 (tables: pool, reg, test, train, "
       "unl); did you mean 'train'?"},
      {"unknown-id",
       R"({"remove": [{"table": "train", "ids": "ids.npy"}]})",
       {{"ids.npy", Uint64s({0, 999, 1000})}},
       "remove[0] (table train): 2 sample ids 999, 1000 are not live in table train at "
       "generation 2"},
      {"id-in-other-table",
       R"({"remove": [{"table": "train", "ids": "ids.npy"}]})",
       {{"ids.npy", Uint64s({6})}},
       "remove[0] (table train): sample id 6 is not live in table train at generation 2 (sample "
       "id 6 is in table pool)"},
      {"id-twice-in-one",
       R"({"remove": [{"table": "train", "ids": "ids.npy"}]})",
       {{"ids.npy", Uint64s({2, 3, 2})}},
       "remove[0] (table train): sample id 2 is given twice (a change set changes each sample "
       "once)"},
      {"remove-and-relabel",
       R"({"remove": [{"table": "train", "ids": "ids.npy"}],
           "relabel": [{"table": "train", "ids": "ids.npy", "labels": "y.npy"}]})",
       {{"ids.npy", Uint64s({1})}, {"y.npy", Int64s({0})}},
       "remove[0] (table train): sample id 1 is already used by relabel[0] (a change set changes "
       "each sample once)"},
      {"two-moves",
       R"({"move": [{"from": "pool", "to": "train", "ids": "a.npy"},
                    {"from": "pool", "to": "test", "ids": "b.npy"}]})",
       {{"a.npy", Uint64s({6, 7})}, {"b.npy", Uint64s({8, 7})}},
       "move[1] (pool -> test): sample id 7 is already used by move[0] (a change set changes each "
       "sample once)"},
      {"features-dtype",
       add_train,
       {{"x.npy", HostArray(Dtype::kFloat32, {2, 2, 3})}, {"y.npy", Int64s({0, 1})}},
       "add[0] (table train): features x.npy are float32(2, 2, 3), table train needs uint8(2, 2, "
       "3)"},
      {"features-shape",
       add_train,
       {{"x.npy", HostArray(Dtype::kUint8, {2, 6})}, {"y.npy", Int64s({0, 1})}},
       "add[0] (table train): features x.npy are uint8(2, 6), table train needs uint8(2, 2, 3)"},
      {"features-nan",
       R"({"add": [{"table": "reg", "features": "x.npy", "labels": "y.npy"}]})",
       {{"x.npy", nan_x}, {"y.npy", HostArray(Dtype::kFloat32, {2, 2})}},
       "add[0] (table reg): features x.npy: NaN or infinity at row 1"},
      {"labels-dtype",
       add_train,
       {{"x.npy", Uint8Features(2)}, {"y.npy", HostArray(Dtype::kFloat32, {2})}},
       "add[0] (table train): labels y.npy are float32(2,), table train needs int64(2,)"},
      {"labels-count",
       add_train,
       {{"x.npy", Uint8Features(2)}, {"y.npy", Int64s({0, 1, 2})}},
       "add[0] (table train): labels y.npy have 3 rows for 2 rows of features"},
      {"labels-missing",
       R"({"add": [{"table": "train", "features": "x.npy"}]})",
       {{"x.npy", Uint8Features(2)}},
       "add[0] (table train): 'labels' is missing: table train has labels class"},
      {"labels-for-unlabelled",
       R"({"add": [{"table": "unl", "features": "x.npy", "labels": "y.npy"}]})",
       {{"x.npy", Uint8Features(2)}, {"y.npy", Int64s({0, 1})}},
       "add[0] (table unl): labels y.npy given, but table unl has no labels"},
      {"add-class-range",
       add_train,
       {{"x.npy", Uint8Features(2)}, {"y.npy", Int64s({0, 5})}},
       "add[0] (table train): labels y.npy: 1 label(s) outside [0, 3) at row 1 (label 5)"},
      {"relabel-class-range",
       relabel_train,
       {{"ids.npy", Uint64s({1, 2})}, {"y.npy", Int64s({-1, 7})}},
       "relabel[0] (table train): labels y.npy: 2 label(s) outside [0, 3) at sample id 1 (label "
       "-1), sample id 2 (label 7)"},
      {"relabel-vector-inf",
       R"({"relabel": [{"table": "reg", "ids": "ids.npy", "labels": "y.npy"}]})",
       {{"ids.npy", Uint64s({16})}, {"y.npy", inf_y}},
       "relabel[0] (table reg): labels y.npy: NaN or infinity at sample id 16"},
      {"relabel-vector-shape",
       R"({"relabel": [{"table": "reg", "ids": "ids.npy", "labels": "y.npy"}]})",
       {{"ids.npy", Uint64s({16})}, {"y.npy", HostArray(Dtype::kFloat32, {1, 3})}},
       "relabel[0] (table reg): labels y.npy are float32(1, 3), table reg needs float32(1, 2)"},
      {"relabel-unlabelled",
       R"({"relabel": [{"table": "unl", "ids": "ids.npy", "labels": "y.npy"}]})",
       {{"ids.npy", Uint64s({17})}, {"y.npy", Int64s({0})}},
       "relabel[0] (table unl): table unl has no labels to relabel"},
      {"move-needs-labels",
       R"({"move": [{"from": "unl", "to": "train", "ids": "ids.npy"}]})",
       {{"ids.npy", Uint64s({17})}},
       "move[0] (unl -> train): 'labels' is missing: unl has labels none, train needs class"},
      {"move-schema",
       R"({"move": [{"from": "reg", "to": "train", "ids": "ids.npy"}]})",
       {{"ids.npy", Uint64s({14})}},
       "move[0] (reg -> train): schema mismatch: reg has features float32[3], labels vector "
       "float32[2], train has features uint8[2, 3], labels class"},
      {"move-to-itself",
       R"({"move": [{"from": "pool", "to": "pool", "ids": "ids.npy"}]})",
       {{"ids.npy", Uint64s({6})}},
       "move[0] (pool -> pool): cannot move samples from table pool to itself"},
      {"move-unknown-destination",
       R"({"move": [{"from": "pool", "to": "trian", "ids": "ids.npy"}]})",
       {{"ids.npy", Uint64s({6})}},
       "move[0]: table \"trian\" does not exist at generation 2 (tables: pool, reg, test, train, "
       "unl); did you mean 'train'?"},
      {"ids-float",
       R"({"remove": [{"table": "train", "ids": "ids.npy"}]})",
       {{"ids.npy", HostArray(Dtype::kFloat32, {2})}},
       "remove[0] (table train): ids ids.npy is float32, ids must be uint64 (or int64 without "
       "negative values)"},
      {"ids-negative",
       R"({"remove": [{"table": "train", "ids": "ids.npy"}]})",
       {{"ids.npy", Int64s({1, -4})}},
       "remove[0] (table train): ids ids.npy: negative sample id -4 at position 1"},
      {"ids-2d",
       R"({"remove": [{"table": "train", "ids": "ids.npy"}]})",
       {{"ids.npy", HostArray(Dtype::kUint64, {2, 1})}},
       "remove[0] (table train): ids ids.npy is uint64(2, 1), ids must be a 1-D array"},
      {"path-escapes",
       R"({"remove": [{"table": "train", "ids": "sub/../../ids.npy"}]})",
       {},
       "remove[0] (table train): 'ids' \"sub/../../ids.npy\" leaves the change-set directory"},
      {"path-absolute",
       R"({"remove": [{"table": "train", "ids": "/etc/passwd"}]})",
       {},
       "remove[0] (table train): 'ids' \"/etc/passwd\" must be a path relative to the change-set "
       "directory"},
      {"path-not-a-string",
       R"({"remove": [{"table": "train", "ids": 3}]})",
       {},
       "remove[0] (table train): 'ids' must be a string, not 3"},
      {"file-missing",
       R"({"remove": [{"table": "train", "ids": "nope.npy"}]})",
       {},
       "remove[0] (table train): 'ids': "},
  };
  const std::string current = Current(store_);
  for (const Refusal& r : refusals) {
    SCOPED_TRACE(r.name);
    std::string dir = MakeChangeSet(r.name, r.json, r.files);
    auto cs = ReadChangeSet(dir, *base_, r.classes);
    ASSERT_FALSE(cs.ok());
    const std::string& message = cs.status().message();
    EXPECT_EQ(message.rfind(dir + "/changes.json: " + r.message, 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(Current(store_), current);
  }
}

TEST_F(ChangeSetTest, MissingChangesFileAndSymbolicLinksOutAreRefused) {
  std::string empty_dir = ScratchDir("no-changes");
  std::filesystem::create_directories(empty_dir);
  auto missing = ReadChangeSet(empty_dir, *base_, 3);
  EXPECT_TRUE(missing.status().IsNotFound());
  EXPECT_EQ(missing.status().message().rfind(empty_dir + "/changes.json: no such file", 0), 0u)
      << missing.status().message();

  std::string outside = ScratchDir("outside.npy");
  WriteNpy(outside, Uint64s({0}));
  std::string dir = MakeChangeSet("link", R"({"remove": [{"table": "train", "ids": "ids.npy"}]})");
  std::filesystem::create_symlink(outside, dir + "/ids.npy");
  auto linked = ReadChangeSet(dir, *base_, 3);
  EXPECT_TRUE(linked.status().IsInvalidArgument());
  EXPECT_EQ(linked.status().message(),
            dir +
                "/changes.json: remove[0] (table train): 'ids' \"ids.npy\" leaves the "
                "change-set directory (through a symbolic link)");
}

TEST_F(ChangeSetTest, WithoutAClassCountOnlyTheSchemaIsChecked) {
  std::string dir = MakeChangeSet(
      "no-classes", R"({"relabel": [{"table": "train", "ids": "ids.npy", "labels": "y.npy"}]})",
      {{"ids.npy", Uint64s({1})}, {"y.npy", Int64s({7})}});
  EXPECT_FALSE(ReadChangeSet(dir, *base_, 3).ok());
  auto cs = ReadChangeSet(dir, *base_, 0);
  ASSERT_TRUE(cs.ok()) << cs.status().ToString();
  EXPECT_FALSE(cs->empty());
}

}  // namespace
}  // namespace cohort::loop
