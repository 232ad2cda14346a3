#include "loop/run/run_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "store/store.h"
#include "store/test_util.h"
#include "store/transaction.h"

namespace cohort::loop {
namespace {

namespace fs = std::filesystem;

class RunDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = store::testing::ScratchDir();
    source_ = dir_ + "/source";
    fs::create_directories(source_);
    Status init = store::InitStore(source_);
    ASSERT_TRUE(init.ok()) << init.ToString();
    auto txn = store::Transaction::Begin(source_);
    ASSERT_TRUE(txn.ok());
    store::TableSchema schema;
    schema.feature_dtype = store::Dtype::kUint8;
    schema.feature_shape = {2, 3};
    schema.label_kind = store::LabelKind::kClass;
    for (const char* table : {"train", "pool", "test"}) {
      ASSERT_TRUE((*txn)->CreateTable(table, schema).ok());
      auto labels = store::testing::ClassLabels(4);
      ASSERT_TRUE((*txn)->Append(table, store::testing::Uint8Features(4), &labels).ok());
    }
    ASSERT_TRUE((*txn)->Commit("tables").ok());
  }

  std::string ConfigText(int64_t k = 2, int64_t rounds = 3) {
    return "name = \"r\"\ndevices = [\"cpu:0\"]\n[store]\nsource = \"" + source_ +
           "\"\n[[member]]\nname = \"m\"\nmodel = \"flatten, dense 4\"\n"
           "[acquisition]\nstrategy = \"entropy\"\nbatch_size = " +
           std::to_string(k) + "\n[stop]\nmax_rounds = " + std::to_string(rounds) + "\n";
  }

  LoopConfig Config(const std::string& text) {
    auto c = ParseLoopConfig(text, dir_ + "/loop.toml");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return *c;
  }

  std::string dir_;
  std::string source_;
};

TEST_F(RunDirTest, FirstStartClonesRecordsAndKeepsTheConfig) {
  std::string text = ConfigText();
  LoopConfig config = Config(text);
  auto run = OpenRunDir(config, text);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_FALSE(run->resumed);
  EXPECT_EQ(run->paths.root, dir_ + "/runs/r");
  EXPECT_TRUE(fs::exists(run->paths.store() + "/CURRENT"));
  EXPECT_FALSE(fs::exists(run->paths.root + "/store.partial"));
  std::ifstream kept(run->paths.config());
  std::string kept_text((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept_text, text);
  EXPECT_EQ(run->run.name, "r");
  EXPECT_EQ(run->run.source_generation, 1u);
  EXPECT_EQ(run->run.source_store, source_);
  EXPECT_EQ(RunLockHolder(run->paths.root), ::getpid());

  // Held: a second controller is refused, naming the run.
  auto second = OpenRunDir(config, text);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(second.status().IsBusy());
  EXPECT_NE(second.status().message().find("already running"), std::string::npos);
}

TEST_F(RunDirTest, SecondStartResumesAndListsSafeChanges) {
  std::string text = ConfigText();
  LoopConfig config = Config(text);
  { ASSERT_TRUE(OpenRunDir(config, text).ok()); }
  EXPECT_FALSE(RunLockHolder(config.run_dir).has_value());

  std::string more = ConfigText(2, 5);
  auto run = OpenRunDir(Config(more), more);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_TRUE(run->resumed);
  ASSERT_EQ(run->changes.size(), 1u);
  EXPECT_EQ(run->changes[0].field, "stop.max_rounds");
  // The run keeps the config it started with.
  EXPECT_EQ(run->run.config_toml, text);
}

TEST_F(RunDirTest, UnsafeChangeIsRefused) {
  std::string text = ConfigText();
  { ASSERT_TRUE(OpenRunDir(Config(text), text).ok()); }
  std::string other = ConfigText(3);
  auto run = OpenRunDir(Config(other), other);
  ASSERT_FALSE(run.ok());
  EXPECT_TRUE(run.status().IsInvalidArgument());
  EXPECT_NE(run.status().message().find("acquisition.batch_size"), std::string::npos)
      << run.status().message();
}

TEST_F(RunDirTest, ForeignDirectoryIsRefusedUntouched) {
  std::string text = ConfigText();
  LoopConfig config = Config(text);
  fs::create_directories(config.run_dir);
  std::ofstream(config.run_dir + "/notes.txt") << "mine";
  auto run = OpenRunDir(config, text);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("notes.txt"), std::string::npos);
  EXPECT_FALSE(fs::exists(config.run_dir + "/store"));
  EXPECT_FALSE(fs::exists(config.run_dir + "/lock"));
}

TEST_F(RunDirTest, InterruptedCreationIsFinished) {
  std::string text = ConfigText();
  LoopConfig config = Config(text);
  // A clone that died half-way.
  fs::create_directories(config.run_dir + "/store.partial");
  std::ofstream(config.run_dir + "/store.partial/seg-junk.npy") << "x";
  {
    auto run = OpenRunDir(config, text);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    EXPECT_FALSE(fs::exists(config.run_dir + "/store.partial"));
  }
  // Killed after the journal recorded the run, before loop.toml was written.
  fs::remove(config.run_dir + "/loop.toml");
  auto run = OpenRunDir(config, text);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_FALSE(run->resumed);
  EXPECT_TRUE(fs::exists(config.run_dir + "/loop.toml"));
  auto verify = store::VerifyStore(run->paths.store());
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->ok());
}

TEST_F(RunDirTest, MissingSourceNamesIt) {
  std::string text = ConfigText();
  LoopConfig config = Config(text);
  config.store.source = dir_ + "/nowhere";
  auto run = OpenRunDir(config, text);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("nowhere"), std::string::npos);
}

}  // namespace
}  // namespace cohort::loop
