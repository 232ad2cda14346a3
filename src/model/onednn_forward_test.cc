// The oneDNN forward gives the network's outputs to float rounding, the same bits every pass,
// and stays out of the passes it must not take.
#include "model/onednn_forward.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include "model/onednn_linear.h"
#include "model/precision.h"

namespace cohort::model {
namespace {

Network MakeNetwork(const std::string& spec_text, const std::vector<int64_t>& input_shape,
                    bool standardize) {
  auto spec = ParseModelSpec(spec_text, "m");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  torch::manual_seed(3);
  Network net(*spec, input_shape, 10, standardize);
  if (standardize) {
    net->SetStandardization(torch::rand(input_shape), torch::rand(input_shape) + 0.5);
  }
  net->eval();
  return net;
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

// Both ways a plan runs its dense layers: as this CPU has it (COHORT_ONEDNN unset: oneDNN on
// AVX-512, the sgemm elsewhere) and in oneDNN whatever the CPU (COHORT_ONEDNN=on).
void ExpectCloseAndRepeatable(Network& net, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  for (bool forced : {false, true}) {
    std::optional<ScopedEnv> on;
    if (forced) on.emplace("COHORT_ONEDNN", "on");
    auto plan = OneDnnForward::For(net, torch::kCPU, "fp32", /*sample_dropout=*/false);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    ASSERT_TRUE(plan->has_value()) << "no oneDNN plan (is oneDNN in this libtorch?)";
    EXPECT_EQ((*plan)->onednn_dense(), forced || OneDnnLinearPaysOnThisCpu());
    torch::Tensor want = net->forward(x);
    torch::Tensor got = (*plan)->forward(x);
    ASSERT_EQ(want.sizes(), got.sizes());
    EXPECT_TRUE(torch::allclose(want, got, /*rtol=*/1e-4, /*atol=*/1e-5))
        << "largest difference " << (want - got).abs().max().item<float>() << " forced " << forced;
    EXPECT_TRUE(torch::equal(got, (*plan)->forward(x))) << "a second pass gave other bits";
  }
}

TEST(OneDnnForwardTest, MlpWithStandardisationReluAndDropout) {
  Network net = MakeNetwork("dense 64 relu, dropout 0.2, dense 32 tanh, dense 10", {28, 28}, true);
  torch::manual_seed(5);
  ExpectCloseAndRepeatable(net, torch::rand({300, 28, 28}));
}

TEST(OneDnnForwardTest, NaNFeaturesGiveNaNOutputs) {
  // cohort eval names the samples whose outputs are NaN; a ReLU in oneDNN's format once hid them.
  Network net = MakeNetwork("dense 16 relu, dense 16 relu, dense 10", {6}, true);
  auto plan = OneDnnForward::For(net, torch::kCPU, "fp32", false);
  ASSERT_TRUE(plan.ok() && plan->has_value());
  torch::NoGradGuard no_grad;
  torch::Tensor x = torch::rand({4, 6});
  x.index_put_({2, 3}, std::nanf(""));
  torch::Tensor nan_rows = (*plan)->forward(x).isnan().any(1);
  EXPECT_TRUE(torch::equal(nan_rows, torch::tensor({false, false, true, false}))) << nan_rows;
}

TEST(OneDnnForwardTest, CnnKeepsItsOwnLayersAroundTheDenseOnes) {
  Network net = MakeNetwork("conv2d 4 3 1 1 elu, maxpool 2, flatten, dense 16 gelu, dense 10",
                            {12, 12}, false);
  torch::manual_seed(6);
  ExpectCloseAndRepeatable(net, torch::rand({33, 12, 12}));
}

TEST(OneDnnForwardTest, BatchNormsAreFoldedIntoTheLayerBeforeThem) {
  Network net = MakeNetwork(
      "conv2d 8 3 1 1, batchnorm, relu, maxpool 2, conv2d 6 5 1 2, batchnorm, gelu, flatten, "
      "dense 16, batchnorm, silu, dense 10",
      {12, 12}, true);
  // Running statistics and affine parameters far from their initial 0 and 1, some scales
  // negative: the fold must carry each of them.
  torch::manual_seed(9);
  {
    torch::NoGradGuard no_grad;
    for (auto& buffer : net->named_buffers()) {
      if (buffer.key().find("running_mean") != std::string::npos) buffer.value().normal_(0, 2);
      if (buffer.key().find("running_var") != std::string::npos) buffer.value().uniform_(0.1, 4);
    }
    for (auto& p : net->named_parameters()) {
      if (p.value().dim() == 1) p.value().normal_(0, 1.5);  // biases, gammas and betas
    }
  }
  auto plan = OneDnnForward::For(net, torch::kCPU, "fp32", false);
  ASSERT_TRUE(plan.ok() && plan->has_value());
  EXPECT_EQ((*plan)->folded_batch_norms(), 3);
  EXPECT_EQ((*plan)->fused_max_pools(), 1);  // the second convolution's gelu sits before none
  torch::manual_seed(10);
  ExpectCloseAndRepeatable(net, torch::rand({50, 12, 12}));

  // In training mode batch norm uses the batch's statistics: no fold (the plan is for
  // evaluation, but the check is what keeps a fold from ever using stale statistics).
  net->train();
  auto training = OneDnnForward::For(net, torch::kCPU, "fp32", false);
  ASSERT_TRUE(training.ok() && training->has_value());
  EXPECT_EQ((*training)->folded_batch_norms(), 0);
}

TEST(OneDnnForwardTest, ConvolutionAndMaxPoolRunTogetherAndKeepNaNs) {
  // 13x13: the pools drop a remainder row and column, as the network's own do.
  Network net = MakeNetwork(
      "conv2d 16 3 1 1 elu, maxpool 2, conv2d 8 3 1 1 relu, maxpool 2, flatten, dense 10", {13, 13},
      true);
  auto plan = OneDnnForward::For(net, torch::kCPU, "fp32", false);
  ASSERT_TRUE(plan.ok() && plan->has_value());
  EXPECT_EQ((*plan)->fused_max_pools(), 2);
  torch::manual_seed(11);
  torch::Tensor x = torch::rand({70, 13, 13});
  ExpectCloseAndRepeatable(net, x);

  torch::NoGradGuard no_grad;
  x.index_put_({5, 12, 12}, std::nanf(""));  // a corner the first pool drops: torch keeps it
  torch::Tensor want = net->forward(x).isnan().any(1);
  torch::Tensor got = (*plan)->forward(x).isnan().any(1);
  EXPECT_TRUE(got[5].item<bool>());
  EXPECT_TRUE(torch::equal(want, got));
}

TEST(OneDnnForwardTest, TakesImageBytesWithTheScaleFoldedIn) {
  Network net = MakeNetwork("dense 64 relu, dense 10", {28, 28}, true);
  torch::NoGradGuard no_grad;
  auto plan = OneDnnForward::For(net, torch::kCPU, "fp32", false, 1.0 / 255.0);
  ASSERT_TRUE(plan.ok() && plan->has_value());
  ASSERT_TRUE((*plan)->takes_raw_features());
  torch::manual_seed(7);
  torch::Tensor bytes = torch::randint(0, 256, {200, 28, 28}, torch::kUInt8);
  torch::Tensor want = net->forward(bytes.to(torch::kFloat).mul_(1.0 / 255.0));
  torch::Tensor got = (*plan)->forward(bytes);
  EXPECT_TRUE(torch::allclose(want, got, 1e-4, 1e-4))
      << "largest difference " << (want - got).abs().max().item<float>();
  // Without the scale (float features) the plan takes what the network takes.
  auto float_plan = OneDnnForward::For(net, torch::kCPU, "fp32", false);
  ASSERT_TRUE(float_plan.ok() && float_plan->has_value());
  EXPECT_FALSE((*float_plan)->takes_raw_features());
  // A network whose first layer is not a dense one cannot take the scale.
  Network cnn = MakeNetwork("conv2d 4 3 1 1 relu, flatten, dense 10", {8, 8}, false);
  auto cnn_plan = OneDnnForward::For(cnn, torch::kCPU, "fp32", false, 1.0 / 255.0);
  ASSERT_TRUE(cnn_plan.ok() && cnn_plan->has_value());
  EXPECT_FALSE((*cnn_plan)->takes_raw_features());
}

TEST(OneDnnForwardTest, Bf16PlanMatchesAutocast) {
  if (!OneDnnForward::CpuHasBf16()) GTEST_SKIP() << "this CPU has no oneDNN bf16 kernels";
  for (bool raw : {false, true}) {
    SCOPED_TRACE(raw ? "image bytes" : "floats");
    Network net =
        MakeNetwork("dense 128 gelu, dropout 0.1, dense 64 relu, dense 10", {28, 28}, true);
    torch::NoGradGuard no_grad;
    auto plan = OneDnnForward::For(net, torch::kCPU, "bf16", false, raw ? 1.0 / 255.0 : 0);
    ASSERT_TRUE(plan.ok() && plan->has_value());
    ASSERT_EQ((*plan)->takes_raw_features(), raw);
    torch::manual_seed(8);
    torch::Tensor bytes = torch::randint(0, 256, {500, 28, 28}, torch::kUInt8);
    torch::Tensor x = bytes.to(torch::kFloat).mul_(1.0 / 255.0);
    torch::Tensor want;
    torch::Tensor got;
    {
      PrecisionScope bf16(torch::kCPU, "bf16");
      want = net->forward(x).to(torch::kFloat);
      got = (*plan)->forward(raw ? bytes : x);
    }
    EXPECT_EQ(got.scalar_type(), torch::kBFloat16);  // as autocast gives it
    got = got.to(torch::kFloat);
    torch::Tensor fp32 = net->forward(x);
    // bf16 keeps 8 bits: both sit about as far from the fp32 outputs, and pick the same classes
    // for nearly every row.
    const float autocast_error = (want - fp32).abs().max().item<float>();
    const float plan_error = (got - fp32).abs().max().item<float>();
    EXPECT_LT(plan_error, 3 * autocast_error + 1e-3) << "autocast " << autocast_error;
    EXPECT_GT(got.argmax(1).eq(fp32.argmax(1)).sum().item<int64_t>(), 490);
    EXPECT_TRUE(torch::equal(got, (*plan)->forward(raw ? bytes : x).to(torch::kFloat)));
  }
}

TEST(OneDnnForwardTest, Bf16CnnPlanMatchesAutocast) {
  if (!OneDnnForward::CpuHasBf16()) GTEST_SKIP() << "this CPU has no oneDNN bf16 kernels";
  Network net = MakeNetwork(
      "conv2d 16 3 1 1, batchnorm, relu, maxpool 2, conv2d 32 3 1 1 gelu, maxpool 2, flatten, "
      "dense 10",
      {28, 28}, true);
  torch::NoGradGuard no_grad;
  auto plan = OneDnnForward::For(net, torch::kCPU, "bf16", false);
  ASSERT_TRUE(plan.ok() && plan->has_value());
  EXPECT_EQ((*plan)->fused_max_pools(), 1);  // the gelu stays before its pool
  EXPECT_EQ((*plan)->folded_batch_norms(), 1);
  torch::manual_seed(12);
  torch::Tensor x = torch::rand({300, 28, 28});
  torch::Tensor want;
  torch::Tensor got;
  {
    PrecisionScope bf16(torch::kCPU, "bf16");
    want = net->forward(x).to(torch::kFloat);
    got = (*plan)->forward(x);
  }
  EXPECT_EQ(got.scalar_type(), torch::kBFloat16);
  got = got.to(torch::kFloat);
  torch::Tensor fp32 = net->forward(x);
  const float autocast_error = (want - fp32).abs().max().item<float>();
  const float plan_error = (got - fp32).abs().max().item<float>();
  EXPECT_LT(plan_error, 3 * autocast_error + 1e-3) << "autocast " << autocast_error;
  EXPECT_GT(got.argmax(1).eq(fp32.argmax(1)).sum().item<int64_t>(), 290);
}

TEST(OneDnnForwardTest, StaysOutOfPassesItMustNotTake) {
  Network net = MakeNetwork("dense 8 relu, dropout 0.5, dense 10", {6}, false);
  auto dropout = OneDnnForward::For(net, torch::kCPU, "fp32", /*sample_dropout=*/true);
  ASSERT_TRUE(dropout.ok());
  EXPECT_FALSE(dropout->has_value());
  {
    ScopedEnv off("COHORT_ONEDNN", "off");
    auto plan = OneDnnForward::For(net, torch::kCPU, "fp32", false);
    ASSERT_TRUE(plan.ok());
    EXPECT_FALSE(plan->has_value());
  }
  {
    ScopedEnv bad("COHORT_ONEDNN", "fast");
    auto plan = OneDnnForward::For(net, torch::kCPU, "fp32", false);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().message(), "COHORT_ONEDNN='fast': expected auto, on or off");
  }
}

// The conditions training and prediction share: the variable, the device, libtorch's oneDNN.
TEST(OneDnnForwardTest, OneDnnIsUsableOnlyOnTheCpuAndWhenNotSwitchedOff) {
  auto cpu = OneDnnUsableOn(torch::kCPU);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(*cpu, at::hasMKLDNN());
  auto cuda = OneDnnUsableOn(torch::Device("cuda:0"));
  ASSERT_TRUE(cuda.ok());
  EXPECT_FALSE(*cuda);
  {
    ScopedEnv off("COHORT_ONEDNN", "off");
    auto usable = OneDnnUsableOn(torch::kCPU);
    ASSERT_TRUE(usable.ok());
    EXPECT_FALSE(*usable);
  }
  {
    ScopedEnv on("COHORT_ONEDNN", "on");
    auto usable = OneDnnUsableOn(torch::kCPU);
    ASSERT_TRUE(usable.ok());
    EXPECT_EQ(*usable, at::hasMKLDNN());
  }
  ScopedEnv bad("COHORT_ONEDNN", "yes");
  auto usable = OneDnnUsableOn(torch::kCPU);
  ASSERT_FALSE(usable.ok());
  EXPECT_EQ(usable.status().message(), "COHORT_ONEDNN='yes': expected auto, on or off");
}

TEST(OneDnnForwardTest, TheVariableReadsAsAutoOnOrOff) {
  auto unset = OneDnnModeFromEnv();
  ASSERT_TRUE(unset.ok());
  EXPECT_EQ(*unset, OneDnnMode::kAuto);
  for (auto [text, mode] : {std::pair{"auto", OneDnnMode::kAuto}, std::pair{"on", OneDnnMode::kOn},
                            std::pair{"off", OneDnnMode::kOff}}) {
    ScopedEnv env("COHORT_ONEDNN", text);
    auto read = OneDnnModeFromEnv();
    ASSERT_TRUE(read.ok()) << text;
    EXPECT_EQ(*read, mode) << text;
  }
  ScopedEnv bad("COHORT_ONEDNN", "ON");
  auto read = OneDnnModeFromEnv();
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().message(), "COHORT_ONEDNN='ON': expected auto, on or off");
}

}  // namespace
}  // namespace cohort::model
