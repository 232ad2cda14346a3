#include "loop/ensemble/predictions.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/splitmix.h"
#include "common/worker_protocol.h"
#include "loop/ensemble/prediction_stream.h"
#include "loop/ensemble/testing/probability_files.h"
#include "loop/ensemble/view.h"
#include "store/host_array.h"
#include "store/import.h"
#include "store/npy.h"

namespace cohort::loop {
namespace {

namespace fs = std::filesystem;
using testing::WriteRandomProbabilities;

std::string Scratch(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("cohort-predictions-test-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// Uniform probabilities of `shape`.
void WriteProbabilities(const std::string& path, std::vector<uint64_t> shape) {
  store::HostArray a(store::Dtype::kFloat32, shape);
  const uint64_t classes = shape.back();
  float* p = a.as<float>();
  for (size_t i = 0; i < a.data.size() / sizeof(float); ++i) {
    p[i] = 1.0F / static_cast<float>(classes);
  }
  ASSERT_TRUE(store::WriteNpyFile(path, a).ok());
}

PredictionShape Shape() {
  PredictionShape s;
  s.pool_rows = 4;
  s.test_rows = 2;
  s.classes = 3;
  s.pool_ids = {10, 11, 12, 13};
  return s;
}

std::string File(const std::string& dir, std::string_view name) {
  return dir + "/" + std::string(name);
}

TEST(PredictionsTest, AnAttemptWithDropoutPassesMustWriteThemInShape) {
  const std::string dir = Scratch("passes");
  WriteProbabilities(File(dir, protocol::file::kPoolPredictions), {4, 3});
  WriteProbabilities(File(dir, protocol::file::kTestPredictions), {2, 3});
  EXPECT_EQ(CheckAttemptPredictions(dir, Shape(), true, false, "m", 0), "");
  EXPECT_EQ(CheckAttemptPredictions(dir, Shape(), true, false, "m", 5),
            "exited 0 without writing predictions-pool-passes.npy");
  WriteProbabilities(File(dir, protocol::file::kPoolDropoutPasses), {4, 4, 3});
  EXPECT_EQ(CheckAttemptPredictions(dir, Shape(), true, false, "m", 5),
            "predictions-pool-passes.npy: expected float32 probabilities of shape [5, 4, 3] "
            "(passes, rows, classes), got float32 [4, 4, 3]");
  EXPECT_EQ(CheckAttemptPredictions(dir, Shape(), true, false, "m", 4), "");
  // Not asked for the pool: its passes are not read either.
  EXPECT_EQ(CheckAttemptPredictions(dir, Shape(), false, false, "m", 9), "");

  // A bad row is named by member, pass and sample id.
  store::HostArray a = *store::ReadNpyFile(File(dir, protocol::file::kPoolDropoutPasses));
  a.as<float>()[(2 * 4 + 1) * 3] = 0.9F;  // pass 2, row 1
  ASSERT_TRUE(store::WriteNpyFile(File(dir, protocol::file::kPoolDropoutPasses), a).ok());
  const std::string problem = CheckAttemptPredictions(dir, Shape(), true, false, "m", 4);
  EXPECT_NE(problem.find("predictions-pool-passes.npy: "), std::string::npos) << problem;
  EXPECT_NE(problem.find("member m pass 2 row 1 (sample id 11)"), std::string::npos) << problem;
}

TEST(PredictionsTest, PoolSamplesStackEveryPassAsAMember) {
  const std::string dir = Scratch("stack");
  WriteProbabilities(dir + "/a.npy", {4, 3});
  WriteProbabilities(dir + "/b-passes.npy", {3, 4, 3});
  WriteProbabilities(dir + "/c.npy", {4, 3});
  auto stacked = StackPoolSamples(
      {{0, dir + "/a.npy", 0}, {1, dir + "/b-passes.npy", 3}, {2, dir + "/c.npy", 0}}, 4, 3);
  ASSERT_TRUE(stacked.ok()) << stacked.status().ToString();
  EXPECT_EQ(stacked->members, 5);
  EXPECT_EQ(stacked->samples, 4);
  EXPECT_EQ(stacked->classes, 3);
  EXPECT_EQ(stacked->data.size(), 5U * 4 * 3);
  EXPECT_EQ(stacked->member_index, (std::vector<size_t>{0, 1, 1, 1, 2}));
  auto wrong = StackPoolSamples({{0, dir + "/a.npy", 0}, {1, dir + "/b-passes.npy", 2}}, 4, 3);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("b-passes.npy: expected float32 probabilities of "
                                          "shape [2, 4, 3]"),
            std::string::npos)
      << wrong.status().ToString();
}

TEST(PredictionsTest, ABadRowInALaterBlockIsNamedByItsRowInTheTable) {
  const std::string dir = Scratch("stream-bad");
  const uint64_t rows = 20000;
  WriteRandomProbabilities(dir + "/p.npy", {rows, 4}, 5);
  store::HostArray a = *store::ReadNpyFile(dir + "/p.npy");
  a.as<float>()[17000 * 4 + 2] = -0.5F;
  ASSERT_TRUE(store::WriteNpyFile(dir + "/p.npy", a).ok());
  std::vector<uint64_t> ids(rows);
  for (uint64_t i = 0; i < rows; ++i) ids[i] = 100000 + i;
  int64_t classes = 0;
  Status s = CheckPredictionFile(dir + "/p.npy", "p.npy", rows, 4, &classes, ids, "m");
  EXPECT_EQ(s.message(),
            "p.npy: member m row 17000 (sample id 117000): probability of class 2 is -0.500000");
  // A file of another length or width is refused by its header alone.
  EXPECT_EQ(CheckPredictionFile(dir + "/p.npy", "p.npy", rows + 1, 4, &classes).message(),
            "p.npy: expected float32 probabilities of shape (20001, classes), got float32 "
            "[20000, 4]");
  EXPECT_EQ(CheckPredictionFile(dir + "/p.npy", "p.npy", rows, 10, &classes).message(),
            "p.npy: 4 classes where the run has 10");
}

}  // namespace
}  // namespace cohort::loop
