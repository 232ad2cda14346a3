// Trains real members on slices of Fashion-MNIST (and small synthetic sets) and checks what a
// user relies on: accuracy, determinism, checkpoints, errors.
#include "model/member.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "model/onednn_linear.h"
#include "store/import.h"
#include "store/npy.h"
#include "store/store.h"
#include "store/transaction.h"

namespace cohort::model {
namespace {

const char kImages[] = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
const char kLabels[] = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz";
const char kTestImages[] = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
const char kTestLabels[] = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";

std::string Scratch(const std::string& name) {
  const char* root = std::getenv("COHORT_TEST_TMP");
  auto dir = std::filesystem::path(root != nullptr ? root : ::testing::TempDir()) /
             ("member_test." + name + "." + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// A store with `train` (first n_train Fashion-MNIST training images) and `test` (first
// n_test test images), made once per test binary.
const std::string& FashionStore() {
  static const std::string dir = [] {
    std::string d = Scratch("fashion") + "/store";
    EXPECT_TRUE(store::InitStore(d).ok());
    auto txn = store::Transaction::Begin(d);
    for (auto [table, images, labels, n] : {std::tuple{"train", kImages, kLabels, 5000},
                                            std::tuple{"test", kTestImages, kTestLabels, 10000}}) {
      auto data = store::ReadIdxDataset(images, labels);
      EXPECT_TRUE(data.ok()) << data.status().ToString();
      data->first.TruncateRows(n);
      data->second.TruncateRows(n);
      store::TableSchema s;
      s.feature_dtype = store::Dtype::kUint8;
      s.feature_shape = {28, 28};
      EXPECT_TRUE((*txn)->CreateTable(table, s).ok());
      EXPECT_TRUE((*txn)->Append(table, data->first, &data->second).ok());
    }
    EXPECT_TRUE((*txn)->Commit("fashion slice").ok());
    return d;
  }();
  return dir;
}

// y = sin(x0) + 0.5 x1 with noise, x ~ U(-2, 2)^2: a small regression store.
const std::string& RegressionStore() {
  static const std::string dir = [] {
    std::string d = Scratch("regression-store") + "/store";
    EXPECT_TRUE(store::InitStore(d).ok());
    auto txn = store::Transaction::Begin(d);
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<float> u(-2, 2);
    std::normal_distribution<float> noise(0, 0.1f);
    for (auto [table, n] : {std::pair{"train", 2000}, std::pair{"test", 500}}) {
      store::HostArray x(store::Dtype::kFloat32, {static_cast<uint64_t>(n), 2});
      store::HostArray y(store::Dtype::kFloat32, {static_cast<uint64_t>(n), 1});
      for (int i = 0; i < n; i++) {
        float a = u(rng), b = u(rng);
        x.as<float>()[2 * i] = a;
        x.as<float>()[2 * i + 1] = b;
        y.as<float>()[i] = std::sin(a) + 0.5f * b + noise(rng);
      }
      store::TableSchema s;
      s.feature_dtype = store::Dtype::kFloat32;
      s.feature_shape = {2};
      s.label_kind = store::LabelKind::kVector;
      s.label_shape = {1};
      EXPECT_TRUE((*txn)->CreateTable(table, s).ok());
      EXPECT_TRUE((*txn)->Append(table, x, &y).ok());
    }
    EXPECT_TRUE((*txn)->Commit("regression").ok());
    return d;
  }();
  return dir;
}

std::shared_ptr<const store::Snapshot> Open(const std::string& dir) {
  auto snap = store::Snapshot::Open(dir);
  EXPECT_TRUE(snap.ok()) << snap.status().ToString();
  return *snap;
}

TrainConfig MlpConfig(int epochs, uint64_t seed) {
  TrainConfig c;
  c.member = "mlp";
  c.model = "dense 256 relu, dropout 0.1, dense 10";
  c.epochs = epochs;
  c.seed = seed;
  c.batch_size = 64;
  return c;
}

std::vector<std::byte> PredictBytes(const std::string& ckpt, const std::string& out,
                                    const std::string& table = "test") {
  auto r = Predict(ckpt, *Open(FashionStore()), table, out);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  auto a = store::ReadNpyFile(out);
  EXPECT_TRUE(a.ok());
  return a->data;
}

TEST(MemberTest, MlpOnFiveThousandFashionMnistSamplesReachesEightyPercent) {
  std::string dir = Scratch("accuracy");
  auto snap = Open(FashionStore());
  auto r = Train(*snap, "train", MlpConfig(10, 1), dir + "/m.ckpt");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->epochs.size(), 10u);
  EXPECT_EQ(r->samples, 50000u);
  EXPECT_LT(r->epochs.back().train_loss, r->epochs.front().train_loss);
  EXPECT_EQ(r->parameters, 784 * 256 + 256 + 256 * 10 + 10);
  auto m = Evaluate(dir + "/m.ckpt", *snap, "test");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::printf("accuracy %.4f nll %.4f brier %.4f ece %.4f (%.0f samples/s)\n", m->at("accuracy"),
              m->at("nll"), m->at("brier"), m->at("ece"),
              static_cast<double>(r->samples) / r->seconds);
  EXPECT_GE(m->at("accuracy"), 0.80);
  EXPECT_EQ(m->at("count"), 10000);
  EXPECT_GT(m->at("nll"), 0.0);
  EXPECT_LT(m->at("nll"), 1.0);
  EXPECT_GT(m->at("brier"), 0.0);
  EXPECT_LT(m->at("brier"), 0.5);
  EXPECT_GE(m->at("ece"), 0.0);
  EXPECT_LT(m->at("ece"), 0.15);
}

TEST(MemberTest, SameSeedGivesIdenticalWeightsAndOtherSeedsDiffer) {
  std::string dir = Scratch("determinism");
  auto snap = Open(FashionStore());
  for (const char* name : {"a", "b"}) {
    ASSERT_TRUE(Train(*snap, "train", MlpConfig(2, 7), dir + "/" + name + ".ckpt").ok());
  }
  ASSERT_TRUE(Train(*snap, "train", MlpConfig(2, 8), dir + "/c.ckpt").ok());
  auto a = PredictBytes(dir + "/a.ckpt", dir + "/a.npy");
  auto b = PredictBytes(dir + "/b.ckpt", dir + "/b.npy");
  auto c = PredictBytes(dir + "/c.ckpt", dir + "/c.npy");
  EXPECT_EQ(a, b) << "same seed, same data, one thread: outputs must be bit-identical";
  EXPECT_NE(a, c);
}

TEST(MemberTest, CheckpointRoundTripGivesIdenticalPredictions) {
  std::string dir = Scratch("roundtrip");
  auto snap = Open(FashionStore());
  ASSERT_TRUE(Train(*snap, "train", MlpConfig(1, 3), dir + "/m.ckpt").ok());
  auto first = PredictBytes(dir + "/m.ckpt", dir + "/p1.npy");
  std::filesystem::copy_file(dir + "/m.ckpt", dir + "/copy.ckpt");
  auto second = PredictBytes(dir + "/copy.ckpt", dir + "/p2.npy");
  EXPECT_EQ(first, second);
  // Predictions are probabilities, and Evaluate's accuracy agrees with them.
  auto probs = *store::ReadNpyFile(dir + "/p1.npy");
  ASSERT_EQ(probs.shape, (std::vector<uint64_t>{10000, 10}));
  auto test = *(*snap).table("test");
  int correct = 0;
  for (uint64_t i = 0; i < 10000; i++) {
    const float* p = probs.as<float>() + i * 10;
    double sum = 0;
    int best = 0;
    for (int k = 0; k < 10; k++) {
      sum += p[k];
      if (p[k] > p[best]) best = k;
    }
    EXPECT_NEAR(sum, 1.0, 1e-4);
    int64_t label;
    std::memcpy(&label, test->label(i), 8);
    correct += best == label;
  }
  auto m = Evaluate(dir + "/m.ckpt", *snap, "test");
  ASSERT_TRUE(m.ok());
  EXPECT_NEAR(m->at("accuracy"), correct / 10000.0, 1e-9);
  auto described = DescribeCheckpoint(dir + "/m.ckpt");
  ASSERT_TRUE(described.ok());
  EXPECT_NE(described->find("\"classes\": 10"), std::string::npos);
}

TEST(MemberTest, DropoutPassesAreSeededSamplesAroundTheDeterministicPrediction) {
  std::string dir = Scratch("dropout-passes");
  auto snap = Open(FashionStore());
  TrainConfig c = MlpConfig(1, 4);
  c.model = "dense 128 relu, dropout 0.3, dense 10";
  ASSERT_TRUE(Train(*snap, "train", c, dir + "/m.ckpt").ok());
  auto predict = [&](const std::string& name, uint64_t seed) {
    DropoutPasses passes{3, seed, dir + "/" + name + "-passes.npy"};
    auto r = Predict(dir + "/m.ckpt", *snap, "test", dir + "/" + name + ".npy", {},
                     PredictOptions{.rows = std::nullopt, .dropout = passes});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    auto a = store::ReadNpyFile(passes.out_path);
    EXPECT_TRUE(a.ok());
    return *a;
  };
  store::HostArray first = predict("a", 11);
  store::HostArray again = predict("b", 11);
  store::HostArray other = predict("c", 12);
  ASSERT_EQ(first.shape, (std::vector<uint64_t>{3, 10000, 10}));
  EXPECT_EQ(first.data, again.data) << "same seed: the same masks";
  EXPECT_NE(first.data, other.data);
  // The deterministic file is unchanged by the passes beside it.
  EXPECT_EQ(PredictBytes(dir + "/m.ckpt", dir + "/plain.npy"),
            store::ReadNpyFile(dir + "/a.npy")->data);
  // Each pass is a probability row per sample; passes differ, and their mean stays near the
  // deterministic prediction (dropout's expectation, up to the nonlinearity).
  auto plain = *store::ReadNpyFile(dir + "/plain.npy");
  const float* p = first.as<float>();
  const size_t per_pass = 10000 * 10;
  double differ = 0, mean_gap = 0;
  for (size_t i = 0; i < per_pass; i++) {
    differ = std::max(differ, static_cast<double>(std::abs(p[i] - p[per_pass + i])));
    const double mean = (p[i] + p[per_pass + i] + p[2 * per_pass + i]) / 3.0;
    mean_gap += std::abs(mean - plain.as<float>()[i]) / static_cast<double>(per_pass);
  }
  for (size_t row = 0; row < 3 * 10000; row += 997) {
    double sum = 0;
    for (int k = 0; k < 10; k++) sum += p[row * 10 + k];
    EXPECT_NEAR(sum, 1.0, 1e-4);
  }
  EXPECT_GT(differ, 0.05);
  EXPECT_LT(mean_gap, 0.05);

  // A member without dropout has nothing to sample.
  TrainConfig plain_config = MlpConfig(1, 4);
  plain_config.model = "dense 32 relu, dense 10";
  ASSERT_TRUE(Train(*snap, "train", plain_config, dir + "/plain.ckpt").ok());
  auto refused = Predict(dir + "/plain.ckpt", *snap, "test", dir + "/x.npy", {},
                         PredictOptions{.dropout = DropoutPasses{2, 1, dir + "/x-passes.npy"}});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("has no dropout layer"), std::string::npos)
      << refused.status().ToString();
}

TEST(MemberTest, PredictingChosenRowsGivesThoseRowsOfTheFullPrediction) {
  std::string dir = Scratch("rows");
  auto snap = Open(FashionStore());
  ASSERT_TRUE(Train(*snap, "train", MlpConfig(1, 9), dir + "/m.ckpt").ok());
  ASSERT_TRUE(Predict(dir + "/m.ckpt", *snap, "test", dir + "/full.npy").ok());
  const std::vector<uint64_t> rows = {2, 7, 9999};
  auto r =
      Predict(dir + "/m.ckpt", *snap, "test", dir + "/some.npy", {}, PredictOptions{.rows = rows});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rows, 3U);
  auto full = *store::ReadNpyFile(dir + "/full.npy");
  auto some = *store::ReadNpyFile(dir + "/some.npy");
  ASSERT_EQ(some.shape, (std::vector<uint64_t>{3, 10}));
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int c = 0; c < 10; c++) {
      // Another batch composition: the BLAS may round differently in the last bits.
      EXPECT_NEAR(some.as<float>()[i * 10 + c], full.as<float>()[rows[i] * 10 + c], 1e-5) << i;
    }
  }
  auto beyond = Predict(dir + "/m.ckpt", *snap, "test", dir + "/x.npy", {},
                        PredictOptions{.rows = std::vector<uint64_t>{1, 10000}});
  ASSERT_FALSE(beyond.ok());
  EXPECT_EQ(beyond.status().message(), "predict: row 10000 is beyond table test (10000 rows)");
}

// Sets an environment variable (COHORT_RESIDENT_DATA, COHORT_ONEDNN) for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// Training's dense layers go through oneDNN where the CPU gains from it (AVX-512: model/
// onednn_linear.h), on any CPU with COHORT_ONEDNN=on, and never with "off" or for a bf16 member.
TEST(MemberTest, DenseLayersTrainThroughOneDnnWhereTheCpuGainsFromIt) {
  if (!at::hasMKLDNN()) GTEST_SKIP() << "this libtorch has no oneDNN";
  std::string dir = Scratch("onednn-dense");
  auto snap = Open(FashionStore());
  TrainConfig c = MlpConfig(1, 5);
  std::map<std::string, bool> used;
  for (const char* mode : {"auto", "on", "off"}) {
    ScopedEnv env("COHORT_ONEDNN", mode);
    auto r = Train(*snap, "train", c, dir + "/" + mode + ".ckpt");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    used[mode] = r->onednn_dense;
  }
  EXPECT_EQ(used["auto"], OneDnnLinearPaysOnThisCpu());
  EXPECT_TRUE(used["on"]);
  EXPECT_FALSE(used["off"]);
  c.precision = "bf16";
  ScopedEnv on("COHORT_ONEDNN", "on");
  auto bf16 = Train(*snap, "train", c, dir + "/bf16.ckpt");
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  EXPECT_FALSE(bf16->onednn_dense);
}

TEST(MemberTest, ResidentDataTrainsAndPredictsBitForBitLikeTheHostPipeline) {
  std::string dir = Scratch("resident");
  auto snap = Open(FashionStore());
  TrainConfig c = MlpConfig(2, 5);
  c.validation_fraction = 0.1;
  std::map<std::string, TrainResult> results;
  std::map<std::string, std::vector<std::byte>> predictions;
  for (const char* mode : {"off", "on"}) {
    ScopedEnv env("COHORT_RESIDENT_DATA", mode);
    const std::string ckpt = dir + "/" + mode + ".ckpt";
    auto r = Train(*snap, "train", c, ckpt);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    results[mode] = *r;
    predictions[mode] = PredictBytes(ckpt, dir + "/" + mode + ".npy");
  }
  EXPECT_FALSE(results["off"].resident_data);
  EXPECT_TRUE(results["on"].resident_data);
  ASSERT_EQ(results["off"].epochs.size(), results["on"].epochs.size());
  for (size_t e = 0; e < results["on"].epochs.size(); e++) {
    EXPECT_EQ(results["off"].epochs[e].train_loss, results["on"].epochs[e].train_loss);
    EXPECT_EQ(results["off"].epochs[e].val_loss, results["on"].epochs[e].val_loss);
  }
  EXPECT_EQ(predictions["off"], predictions["on"]);
  {
    // Prediction through the resident copy gives the same bytes for the same checkpoint.
    ScopedEnv env("COHORT_RESIDENT_DATA", "on");
    EXPECT_EQ(PredictBytes(dir + "/off.ckpt", dir + "/off-resident.npy"), predictions["off"]);
  }
  // An augmenting member gathers on the host, where its augmentations run.
  c.augment.flip = true;
  c.epochs = 1;
  ScopedEnv env("COHORT_RESIDENT_DATA", "on");
  auto augmented = Train(*snap, "train", c, dir + "/flip.ckpt");
  ASSERT_TRUE(augmented.ok()) << augmented.status().ToString();
  EXPECT_FALSE(augmented->resident_data);
  ::setenv("COHORT_RESIDENT_DATA", "yes", 1);
  auto bad = Train(*snap, "train", c, dir + "/bad.ckpt");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("COHORT_RESIDENT_DATA='yes'"), std::string::npos)
      << bad.status().message();
}

TEST(MemberTest, ResidentDataGivesTheSameRegressionMember) {
  std::string dir = Scratch("resident-regression");
  auto snap = Open(RegressionStore());
  TrainConfig c;
  c.member = "mse";
  c.model = "dense 32 tanh, dense 1";
  c.loss = "mse";  // its residual variance is a pass over the train rows
  c.epochs = 3;
  c.batch_size = 32;
  c.standardize = true;
  std::map<std::string, std::vector<std::byte>> out;
  for (const char* mode : {"off", "on"}) {
    ScopedEnv env("COHORT_RESIDENT_DATA", mode);
    ASSERT_TRUE(Train(*snap, "train", c, dir + "/" + mode + ".ckpt").ok());
    auto p = Predict(dir + "/" + mode + ".ckpt", *snap, "test", dir + "/" + mode + ".npy");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    out[mode] = store::ReadNpyFile(dir + "/" + mode + ".npy")->data;
  }
  EXPECT_EQ(out["off"], out["on"]);
}

TEST(MemberTest, WarmStartContinuesFromThePreviousCheckpoint) {
  std::string dir = Scratch("warm");
  auto snap = Open(FashionStore());
  ASSERT_TRUE(Train(*snap, "train", MlpConfig(2, 5), dir + "/round1.ckpt").ok());
  TrainConfig warm = MlpConfig(1, 6);
  warm.warm_start_from = dir + "/round1.ckpt";
  auto continued = Train(*snap, "train", warm, dir + "/round2.ckpt");
  ASSERT_TRUE(continued.ok()) << continued.status().ToString();
  auto fresh = Train(*snap, "train", MlpConfig(1, 6), dir + "/fresh.ckpt");
  ASSERT_TRUE(fresh.ok());
  EXPECT_LT(continued->epochs[0].train_loss, fresh->epochs[0].train_loss);
  TrainConfig mismatched = warm;
  mismatched.model = "dense 32 relu, dense 10";
  auto bad = Train(*snap, "train", mismatched, dir + "/bad.ckpt");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("warm start"), std::string::npos);
}

TEST(MemberTest, EarlyStoppingKeepsTheBestEpoch) {
  std::string dir = Scratch("early");
  auto snap = Open(FashionStore());
  TrainConfig c = MlpConfig(40, 2);
  c.model = "dense 512 relu, dense 10";
  c.validation_fraction = 0.5;
  c.patience = 2;
  c.optimizer.learning_rate = 3e-3;
  auto r = Train(*snap, "train", c, dir + "/m.ckpt");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->epochs[0].val_loss.has_value());
  EXPECT_TRUE(r->stopped_early);
  EXPECT_LT(r->epochs.size(), 40u);
  double best = INFINITY;
  int64_t best_epoch = 0;
  for (const auto& e : r->epochs) {
    if (*e.val_loss < best) {
      best = *e.val_loss;
      best_epoch = e.epoch;
    }
  }
  EXPECT_EQ(r->best_epoch, best_epoch);
  EXPECT_EQ(static_cast<int64_t>(r->epochs.size()), best_epoch + c.patience);
}

TEST(MemberTest, RegressionHeadsLearnAndReportRmseAndNll) {
  std::string dir = Scratch("regression");
  auto snap = Open(RegressionStore());
  for (const char* loss : {"mse", "gaussian_nll"}) {
    TrainConfig c;
    c.member = loss;
    c.model = "dense 64 tanh, dense 64 tanh, dense " +
              std::string(loss == std::string("mse") ? "1" : "2");
    c.loss = loss;
    c.epochs = 30;
    c.batch_size = 32;
    c.standardize = true;
    auto r = Train(*snap, "train", c, dir + "/" + loss + ".ckpt");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto m = Evaluate(dir + "/" + loss + ".ckpt", *snap, "test");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    // The targets' spread is about 0.95; the noise is 0.1.
    EXPECT_LT(m->at("rmse"), 0.3) << loss;
    EXPECT_LT(m->at("nll"), 0.5) << loss;
    auto p = Predict(dir + "/" + loss + ".ckpt", *snap, "test", dir + "/" + loss + ".npy");
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->shape, (std::vector<int64_t>{500, 2, 1}));
    auto a = *store::ReadNpyFile(dir + "/" + loss + ".npy");
    for (uint64_t i = 0; i < 500; i++) EXPECT_GT(a.as<float>()[2 * i + 1], 0.0f);
  }
}

TEST(MemberTest, ErrorsNameTheMemberAndWhatIsWrong) {
  std::string dir = Scratch("errors");
  auto snap = Open(FashionStore());
  TrainConfig c = MlpConfig(1, 0);
  c.member = "m7";
  c.model = "dense 64 relu, conv2d 8 3, dense 10";
  auto bad_spec = Train(*snap, "train", c, dir + "/x.ckpt");
  ASSERT_FALSE(bad_spec.ok());
  EXPECT_NE(bad_spec.status().message().find("member m7"), std::string::npos);
  EXPECT_NE(bad_spec.status().message().find("conv2d 8 3"), std::string::npos);
  c.model = "dense 64 relu, dense 5";
  auto wrong_outputs = Train(*snap, "train", c, dir + "/x.ckpt");
  ASSERT_FALSE(wrong_outputs.ok());
  EXPECT_NE(wrong_outputs.status().message().find("10"), std::string::npos);
  c = MlpConfig(3, 0);
  c.optimizer.name = "sgd";
  c.optimizer.learning_rate = 1e12;
  auto diverged = Train(*snap, "train", c, dir + "/x.ckpt");
  ASSERT_FALSE(diverged.ok());
  EXPECT_NE(diverged.status().message().find("loss became"), std::string::npos)
      << diverged.status().message();
  EXPECT_FALSE(std::filesystem::exists(dir + "/x.ckpt"));
  c = MlpConfig(1, 0);
  c.optimizer.name = "lbfgs";
  EXPECT_TRUE(Train(*snap, "train", c, dir + "/x.ckpt").status().IsInvalidArgument());
  EXPECT_TRUE(Train(*snap, "nope", MlpConfig(1, 0), dir + "/x.ckpt").status().IsNotFound());
  auto missing = Evaluate(dir + "/none.ckpt", *snap, "test");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("none.ckpt"), std::string::npos);
  std::ofstream(dir + "/garbage.ckpt") << "not a checkpoint";
  auto garbage = Evaluate(dir + "/garbage.ckpt", *snap, "test");
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.status().message().find("garbage.ckpt"), std::string::npos);
  EXPECT_EQ(garbage.status().message().find('\n'), std::string::npos);
}

// Tables train (2 classes), nan (a NaN feature in row 3) and labels (labels -1 and 5 in rows 2
// and 4), written past the importer's checks, as an older cohort let them in.
std::string BadDataStore(const std::string& dir) {
  std::string d = dir + "/store";
  EXPECT_TRUE(store::InitStore(d).ok());
  auto txn = store::Transaction::Begin(d);
  EXPECT_TRUE(txn.ok());
  store::TableSchema s;
  s.feature_dtype = store::Dtype::kFloat32;
  s.feature_shape = {4};
  for (const char* table : {"train", "nan", "labels"}) {
    const uint64_t n = std::string(table) == "train" ? 200 : 10;
    store::HostArray x(store::Dtype::kFloat32, {n, 4});
    store::HostArray y(store::Dtype::kInt64, {n});
    for (uint64_t i = 0; i < n; i++) {
      for (int k = 0; k < 4; k++) x.as<float>()[4 * i + k] = static_cast<float>((i * 7 + k) % 5);
      y.as<int64_t>()[i] = x.as<float>()[4 * i] > 2 ? 1 : 0;
    }
    if (std::string(table) == "nan") x.as<float>()[4 * 3 + 1] = std::nanf("");
    if (std::string(table) == "labels") {
      y.as<int64_t>()[2] = -1;
      y.as<int64_t>()[4] = 5;
    }
    EXPECT_TRUE((*txn)->CreateTable(table, s).ok());
    EXPECT_TRUE((*txn)->Append(table, x, &y).ok());
  }
  EXPECT_TRUE((*txn)->Commit("bad data").ok());
  return d;
}

TEST(MemberTest, EvaluateNamesNaNOutputsAndBadLabelsBySampleId) {
  // Issue 14: a NaN feature made `cohort eval` index an ECE bin with NaN (SIGSEGV), and a
  // label -1 gave torch's "index -1 is out of bounds".
  std::string dir = Scratch("bad-data");
  std::string d = BadDataStore(dir);
  auto snap = store::Snapshot::Open(d);
  ASSERT_TRUE(snap.ok());
  TrainConfig c;
  c.member = "m1";
  c.model = "dense 8 relu, dense 2";
  c.epochs = 1;
  ASSERT_TRUE(Train(**snap, "train", c, dir + "/m.ckpt").ok());
  ASSERT_TRUE(Evaluate(dir + "/m.ckpt", **snap, "train").ok());
  const uint64_t nan_id = (*(*snap)->table("nan"))->id(3);
  auto nan = Evaluate(dir + "/m.ckpt", **snap, "nan");
  ASSERT_FALSE(nan.ok());
  EXPECT_EQ(nan.status().message(),
            "member m1 outputs NaN or infinity on table nan for sample id " +
                std::to_string(nan_id) +
                " (1 sample) (NaN or infinite features, or diverged weights)");
  const store::Table* labels = *(*snap)->table("labels");
  auto bad = Evaluate(dir + "/m.ckpt", **snap, "labels");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "table labels: class labels must be in [0, 2) for member m1; "
            "sample id " +
                std::to_string(labels->id(2)) + ": -1, sample id " + std::to_string(labels->id(4)) +
                ": 5 (2 samples)");
}

TEST(MemberTest, FullDiskWritingACheckpointIsAnErrorNotAnAbort) {
  // Issue 14: a full disk made libtorch throw from a destructor (std::terminate, exit 134)
  // and left checkpoint.pt.tmp.* behind. A 64 KiB tmpfs holds no 800 KB checkpoint.
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  std::string dir = Scratch("full-disk");
  std::string mnt = dir + "/mnt";
  std::filesystem::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs: " << std::strerror(errno);
  }
  auto snap = Open(FashionStore());
  auto r = Train(*snap, "train", MlpConfig(1, 0), mnt + "/checkpoint.pt");
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(mnt)) left.push_back(e.path().string());
  ::umount2(mnt.c_str(), MNT_DETACH);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "no space left on device writing checkpoint " + mnt + "/checkpoint.pt");
  EXPECT_TRUE(left.empty()) << left.front();
}

TEST(MemberTest, StaleCheckpointTempsOfDeadWritersAreRemoved) {
  std::string dir = Scratch("stale-temps");
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  ::waitpid(dead, nullptr, 0);
  const std::string ckpt = dir + "/checkpoint.pt";
  const std::string stale = ckpt + ".tmp." + host + "." + std::to_string(dead) + ".0";
  const std::string old_style = ckpt + ".tmp." + std::to_string(dead) + ".3";
  const std::string live = ckpt + ".tmp." + host + "." + std::to_string(::getpid()) + ".7";
  const std::string other_host = ckpt + ".tmp.elsewhere.example." + std::to_string(dead) + ".0";
  const std::string other_file = dir + "/other.pt.tmp." + host + "." + std::to_string(dead) + ".0";
  for (const auto& f : {stale, old_style, live, other_host, other_file}) std::ofstream(f) << "x";
  auto snap = Open(FashionStore());
  ASSERT_TRUE(Train(*snap, "train", MlpConfig(1, 0), ckpt).ok());
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_FALSE(std::filesystem::exists(old_style));
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_TRUE(std::filesystem::exists(other_host));
  EXPECT_TRUE(std::filesystem::exists(other_file));
  EXPECT_TRUE(std::filesystem::exists(ckpt));
}

TEST(MemberTest, CancelStopsTraining) {
  std::string dir = Scratch("cancel");
  auto snap = Open(FashionStore());
  std::atomic<bool> cancel{false};
  int calls = 0;
  auto r = Train(
      *snap, "train", MlpConfig(50, 0), dir + "/m.ckpt",
      [&](const Progress&) {
        if (++calls == 2) cancel = true;
      },
      0.0, &cancel);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kAborted);
  EXPECT_FALSE(std::filesystem::exists(dir + "/m.ckpt"));
}

TEST(MemberTest, ConvolutionalMemberTrains) {
  std::string dir = Scratch("cnn");
  auto snap = Open(FashionStore());
  TrainConfig c = MlpConfig(1, 0);
  c.model =
      "conv2d 8 3 1 1 relu, maxpool 2, batchnorm, conv2d 16 3 relu, avgpool 2, flatten, "
      "layernorm, dense 32 gelu, dropout 0.2, dense 10";
  c.optimizer.name = "adamw";
  c.optimizer.weight_decay = 0.01;
  c.schedule.name = "cosine";
  c.schedule.warmup_epochs = 1;
  c.grad_clip_norm = 1.0;
  c.label_smoothing = 0.1;
  c.epochs = 2;
  auto r = Train(*snap, "train", c, dir + "/cnn.ckpt");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto m = Evaluate(dir + "/cnn.ckpt", *snap, "test");
  ASSERT_TRUE(m.ok());
  EXPECT_GT(m->at("accuracy"), 0.6);
}

TEST(MemberTest, ImageLayersAfterShapePreservingLayersSeeOneChannel) {
  std::string dir = Scratch("channels");
  auto snap = Open(FashionStore());
  TrainConfig c = MlpConfig(1, 0);
  c.model = "dropout 0.1, layernorm, conv2d 4 3, relu, maxpool 2, dense 10";
  auto r = Train(*snap, "train", c, dir + "/m.ckpt");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->parameters, 2 * 28 * 28 + (1 * 4 * 9 + 4) + (4 * 13 * 13 * 10 + 10));
}

TEST(MemberTest, Bf16MembersComputeInBfloat16AndLearnAsWell) {
  std::string dir = Scratch("bf16");
  auto snap = Open(FashionStore());
  TrainConfig c = MlpConfig(3, 1);
  ASSERT_TRUE(Train(*snap, "train", c, dir + "/fp32.ckpt").ok());
  c.precision = "bf16";
  for (const char* name : {"bf16", "bf16-again"}) {
    auto r = Train(*snap, "train", c, dir + "/" + name + ".ckpt");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  auto fp32 = Evaluate(dir + "/fp32.ckpt", *snap, "test");
  auto bf16 = Evaluate(dir + "/bf16.ckpt", *snap, "test");
  ASSERT_TRUE(fp32.ok() && bf16.ok());
  std::printf("test accuracy fp32 %.4f bf16 %.4f\n", fp32->at("accuracy"), bf16->at("accuracy"));
  EXPECT_GT(bf16->at("accuracy"), fp32->at("accuracy") - 0.03);
  // The checkpoint remembers the precision, and the member predicts in it by default.
  auto described = DescribeCheckpoint(dir + "/bf16.ckpt");
  ASSERT_TRUE(described.ok());
  EXPECT_NE(described->find("\"precision\": \"bf16\""), std::string::npos);
  auto own = PredictBytes(dir + "/bf16.ckpt", dir + "/own.npy");
  EXPECT_EQ(own, PredictBytes(dir + "/bf16-again.ckpt", dir + "/again.npy"))
      << "bf16 training is as deterministic as fp32";
  PredictOptions as_fp32;
  as_fp32.precision = "fp32";
  ASSERT_TRUE(Predict(dir + "/bf16.ckpt", *snap, "test", dir + "/as-fp32.npy", {}, as_fp32).ok());
  auto a = *store::ReadNpyFile(dir + "/own.npy");
  auto b = *store::ReadNpyFile(dir + "/as-fp32.npy");
  ASSERT_EQ(a.shape, b.shape);
  // bfloat16 keeps 8 bits of mantissa: the probabilities move, the predicted classes barely.
  double max_diff = 0;
  int agree = 0;
  for (uint64_t i = 0; i < 10000; i++) {
    const float* p = a.as<float>() + i * 10;
    const float* q = b.as<float>() + i * 10;
    for (int k = 0; k < 10; k++) max_diff = std::max(max_diff, double(std::fabs(p[k] - q[k])));
    agree += std::max_element(p, p + 10) - p == std::max_element(q, q + 10) - q;
  }
  EXPECT_GT(max_diff, 0.0) << "bf16 predictions equal fp32 ones: bf16 was not used";
  EXPECT_LT(max_diff, 0.2);
  EXPECT_GT(agree, 9700);
  // A member with batch normalisation and convolutions trains in bf16 too.
  c.model = "conv2d 8 3 1 1 relu, batchnorm, maxpool 2, flatten, dense 10";
  c.epochs = 1;
  auto cnn = Train(*snap, "train", c, dir + "/cnn.ckpt");
  ASSERT_TRUE(cnn.ok()) << cnn.status().ToString();
  auto m = Evaluate(dir + "/cnn.ckpt", *snap, "test");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_GT(m->at("accuracy"), 0.6);
  // What is not a precision is refused, naming the field.
  c.precision = "fp16";
  auto bad = Train(*snap, "train", c, dir + "/bad.ckpt");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "member mlp: precision: unknown precision 'fp16' (fp32, bf16)");
  as_fp32.precision = "fp8";
  auto bad_predict = Predict(dir + "/bf16.ckpt", *snap, "test", dir + "/bad.npy", {}, as_fp32);
  ASSERT_FALSE(bad_predict.ok());
  EXPECT_EQ(bad_predict.status().message(), "predict: unknown precision 'fp8' (fp32, bf16)");
}

TEST(MemberTest, BatchnormSkipsASingleSampleLastBatch) {
  std::string dir = Scratch("batchnorm");
  auto snap = Open(FashionStore());
  TrainConfig c = MlpConfig(1, 0);
  c.model = "dense 32, batchnorm, relu, dense 10";
  c.validation_fraction = 0.2;  // 4,000 training rows = 43 batches of 93 + 1
  c.batch_size = 93;
  auto r = Train(*snap, "train", c, dir + "/m.ckpt");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->samples, 3999u);
}

TEST(MemberTest, WarmupRisesFromTheFirstStepToTheBaseRate) {
  std::string dir = Scratch("warmup");
  auto snap = Open(FashionStore());
  TrainConfig c = MlpConfig(2, 0);
  c.batch_size = 1000;  // 5 steps per epoch
  c.schedule.warmup_epochs = 1;
  std::vector<double> rates;
  auto r = Train(
      *snap, "train", c, dir + "/m.ckpt",
      [&](const Progress& p) { rates.push_back(p.learning_rate); }, 0.0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(rates.size(), 10u);
  EXPECT_DOUBLE_EQ(rates[0], 1e-3 / 5);
  EXPECT_DOUBLE_EQ(rates[4], 1e-3);
  EXPECT_DOUBLE_EQ(rates[9], 1e-3);
}

}  // namespace
}  // namespace cohort::model
