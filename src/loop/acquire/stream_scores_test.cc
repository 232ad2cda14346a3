#include "loop/acquire/stream_scores.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "loop/acquire/acquisition.h"
#include "loop/acquire/strategy.h"
#include "loop/ensemble/testing/probability_files.h"
#include "store/import.h"
#include "store/npy.h"
#include "store/test_util.h"

namespace cohort::loop {
namespace {

namespace fs = std::filesystem;
using testing::WriteRandomProbabilities;

// A fresh, empty directory for the running test.
std::string Scratch() {
  const std::string dir = store::testing::ScratchDir();
  fs::create_directories(dir);
  return dir;
}

// 20,000 rows: more than two blocks of kPredictionBlockRows.
TEST(StreamScoresTest, StreamedScoresEqualTheScoresOfTheStackedFiles) {
  const std::string dir = Scratch();
  const uint64_t rows = 20000;
  WriteRandomProbabilities(dir + "/a.npy", {rows, 4}, 1);
  WriteRandomProbabilities(dir + "/b-passes.npy", {3, rows, 4}, 2);
  WriteRandomProbabilities(dir + "/c.npy", {rows, 4}, 3);
  const std::vector<PoolSampleFile> files = {
      {0, dir + "/a.npy", 0}, {1, dir + "/b-passes.npy", 3}, {2, dir + "/c.npy", 0}};
  auto stacked = StackPoolSamples(files, rows, 4);
  ASSERT_TRUE(stacked.ok()) << stacked.status().ToString();
  auto view = MakeEnsemblePredictions(stacked->data, stacked->members, stacked->samples, 4);
  ASSERT_TRUE(view.ok());
  for (const std::string strategy : {"bald", "entropy", "vote_entropy", "variance"}) {
    auto whole = ScoreSamples(strategy, *view);
    auto streamed = StreamScores(FindStrategy(strategy, StrategyTask::kClassification)->measure,
                                 files, rows, 4);
    ASSERT_TRUE(whole.ok() && streamed.ok()) << streamed.status().ToString();
    EXPECT_EQ(*whole, *streamed) << strategy;
  }
}

TEST(StreamScoresTest, ABadRowInALaterBlockIsNamedByItsRowInTheTable) {
  const std::string dir = Scratch();
  const uint64_t rows = 20000;
  WriteRandomProbabilities(dir + "/p.npy", {rows, 4}, 5);
  store::HostArray a = *store::ReadNpyFile(dir + "/p.npy");
  a.as<float>()[17000 * 4 + 2] = -0.5F;
  ASSERT_TRUE(store::WriteNpyFile(dir + "/p.npy", a).ok());
  auto scored =
      StreamScores(MutualInformation, {{0, dir + "/p.npy", 0}, {1, dir + "/p.npy", 0}}, rows, 4);
  ASSERT_FALSE(scored.ok());
  EXPECT_NE(scored.status().message().find("row 17000"), std::string::npos)
      << scored.status().ToString();
}

}  // namespace
}  // namespace cohort::loop
