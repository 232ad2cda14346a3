// The run's class count and the label checks that keep a bad label out of a run.
#include "loop/config/class_labels.h"

#include <gtest/gtest.h>

#include "loop/config/testing/source_store.h"
#include "store/snapshot.h"
#include "store/test_util.h"
#include "store/transaction.h"

namespace cohort::loop {
namespace {

class ClassLabelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = store::testing::ScratchDir();
    testing::MakeSourceStore(dir_ + "/source", 6, 9, 6, 3);
  }

  // Appends one row with `label` to `table`.
  void AppendLabel(const std::string& table, int64_t label) {
    auto txn = store::Transaction::Begin(dir_ + "/source");
    ASSERT_TRUE(txn.ok()) << txn.status().ToString();
    store::HostArray labels(store::Dtype::kInt64, {1});
    labels.as<int64_t>()[0] = label;
    auto added = (*txn)->Append(table, store::testing::Uint8Features(1, 200), &labels);
    ASSERT_TRUE(added.ok()) << added.status().ToString();
    ASSERT_TRUE((*txn)->Commit("one more row").ok());
  }

  // The run's class count; with `scripts`, every member is an outside one (no final layer
  // cohort knows of), so the stored labels give the count.
  Result<int64_t> Count(const std::string& extra = "", int members = 2, bool scripts = false) {
    std::string text = testing::LoopConfigText(dir_ + "/source", members, 1, extra);
    auto config = ParseLoopConfig(text, dir_ + "/loop.toml");
    EXPECT_TRUE(config.ok()) << config.status().ToString();
    if (scripts) {
      for (auto& member : config->members) member.command = {"/bin/true"};
    }
    auto snap = store::Snapshot::Open(dir_ + "/source");
    EXPECT_TRUE(snap.ok()) << snap.status().ToString();
    return RunClassCount(*config, **snap);
  }

  std::string dir_;
};

TEST_F(ClassLabelsTest, WithoutAModelTheCountIsOneMoreThanTheLargestStoredLabel) {
  auto classes = Count("", 2, /*scripts=*/true);
  ASSERT_TRUE(classes.ok()) << classes.status().ToString();
  EXPECT_EQ(*classes, 3);
  // A class only the test table has still counts: every member must predict it.
  AppendLabel("test", 6);
  classes = Count("", 2, /*scripts=*/true);
  ASSERT_TRUE(classes.ok()) << classes.status().ToString();
  EXPECT_EQ(*classes, 7);
}

TEST_F(ClassLabelsTest, TheFinalDenseGivesTheCountWithoutClasses) {
  // The members end in `dense 3`: a train table holding only classes 0 and 1 still makes a
  // 3-class run.
  std::string text = testing::LoopConfigText(dir_ + "/source", 2, 1, "");
  for (size_t at = 0; (at = text.find("dense 3\"", at)) != std::string::npos;) {
    text.replace(at, 7, "dense 4");
  }
  auto config = ParseLoopConfig(text, dir_ + "/loop.toml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto snap = store::Snapshot::Open(dir_ + "/source");
  ASSERT_TRUE(snap.ok());
  auto classes = RunClassCount(*config, **snap);
  ASSERT_TRUE(classes.ok()) << classes.status().ToString();
  EXPECT_EQ(*classes, 4);
  // A label beyond it is refused, and the message says where the count comes from.
  AppendLabel("test", 6);
  snap = store::Snapshot::Open(dir_ + "/source");
  ASSERT_TRUE(snap.ok());
  classes = RunClassCount(*config, **snap);
  ASSERT_FALSE(classes.ok());
  EXPECT_NE(classes.status().message().find("outside [0, 4)"), std::string::npos)
      << classes.status().message();
  EXPECT_NE(classes.status().message().find("final layer has 4 units"), std::string::npos)
      << classes.status().message();
  // Members that end differently, without `classes` to settle it, are refused by name.
  config->members[1].train.model = "dense 8 relu, dense 5";
  classes = RunClassCount(*config, **snap);
  ASSERT_FALSE(classes.ok());
  EXPECT_NE(classes.status().message().find("member[2] (m1).model: the final layer has 5 units"),
            std::string::npos)
      << classes.status().message();
}

TEST_F(ClassLabelsTest, TheMembersClassesWinAndMustAgree) {
  std::string text = testing::LoopConfigText(dir_ + "/source", 2, 1, "");
  // Both members say 5.
  std::string five = text;
  size_t at = 0;
  while ((at = five.find("model = ", at)) != std::string::npos) {
    five.insert(at, "classes = 5\n");
    at += 20;
  }
  // The final layer says 5 too (a mismatch is refused when the config is parsed).
  for (at = 0; (at = five.find("dense 3\"", at)) != std::string::npos;)
    five.replace(at, 7, "dense 5");
  auto config = ParseLoopConfig(five, dir_ + "/loop.toml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto snap = store::Snapshot::Open(dir_ + "/source");
  ASSERT_TRUE(snap.ok());
  auto classes = RunClassCount(*config, **snap);
  ASSERT_TRUE(classes.ok()) << classes.status().ToString();
  EXPECT_EQ(*classes, 5);
  // One says 4.
  config->members[1].train.classes = 4;
  classes = RunClassCount(*config, **snap);
  ASSERT_FALSE(classes.ok());
  EXPECT_NE(classes.status().message().find("member[2] (m1).classes: 4 classes, but"),
            std::string::npos)
      << classes.status().message();
  // A stored label beyond the members' count is named with its sample id.
  config->members[1].train.classes = 2;
  config->members[0].train.classes = 2;
  classes = RunClassCount(*config, **snap);
  ASSERT_FALSE(classes.ok());
  EXPECT_NE(classes.status().message().find("label(s) outside [0, 2) at sample id"),
            std::string::npos)
      << classes.status().message();
}

TEST_F(ClassLabelsTest, ANegativeTestLabelIsNamed) {
  AppendLabel("test", -1);
  auto classes = Count();
  ASSERT_FALSE(classes.ok());
  const std::string& m = classes.status().message();
  EXPECT_NE(m.find("table 'test'"), std::string::npos) << m;
  EXPECT_NE(m.find("1 label(s) outside [0, 3)"), std::string::npos) << m;
  EXPECT_NE(m.find("(label -1)"), std::string::npos) << m;
}

TEST_F(ClassLabelsTest, ThePoolCountsOnlyWhenItsLabelsAreRevealed) {
  AppendLabel("pool", -1);
  // The default oracle is hidden_labels: the pool's -1 would be committed to train.
  auto classes = Count();
  ASSERT_FALSE(classes.ok());
  EXPECT_NE(classes.status().message().find("table 'pool'"), std::string::npos);
  // A command oracle gives the labels itself: the pool's stored ones do not matter.
  classes = Count("[oracle]\nkind = \"command\"\ncommand = [\"/bin/true\"]\n");
  ASSERT_TRUE(classes.ok()) << classes.status().ToString();
  EXPECT_EQ(*classes, 3);
}

TEST_F(ClassLabelsTest, AnAbsurdLabelIsRefusedNotTakenForAClassCount) {
  AppendLabel("train", int64_t{1} << 40);
  auto classes = Count("", 2, /*scripts=*/true);
  ASSERT_FALSE(classes.ok());
  EXPECT_NE(classes.status().message().find("(label 1099511627776)"), std::string::npos)
      << classes.status().message();
  EXPECT_NE(classes.status().message().find("gives `classes` on its members"), std::string::npos)
      << classes.status().message();
}

TEST(CheckClassLabels, NamesTheFirstFewIdsAndCountsTheRest) {
  std::vector<int64_t> labels = {0, 9, 1, -1, 10, 11, 12, 13, 2};
  std::vector<uint64_t> ids = {100, 101, 102, 103, 104, 105, 106, 107, 108};
  Status st = CheckClassLabels("answer.npy", labels, ids, 3, "fix the oracle");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "answer.npy: 6 label(s) outside [0, 3) at sample id 101 (label 9), sample id 103 "
            "(label -1), sample id 104 (label 10), sample id 105 (label 11), sample id 106 "
            "(label 12), ...; fix the oracle");
  EXPECT_TRUE(CheckClassLabels("x", std::vector<int64_t>{0, 2}, ids, 3).ok());
}

}  // namespace
}  // namespace cohort::loop
