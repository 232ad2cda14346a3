// The oneDNN forward gives the network's outputs to float rounding, the same bits every pass,
// and stays out of the passes it must not take.
#include "model/onednn_forward.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

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

void ExpectCloseAndRepeatable(Network& net, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  auto plan = OneDnnForward::For(net, torch::kCPU, "fp32", /*sample_dropout=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_TRUE(plan->has_value()) << "no oneDNN plan (is oneDNN in this libtorch?)";
  torch::Tensor want = net->forward(x);
  torch::Tensor got = (*plan)->forward(x);
  ASSERT_EQ(want.sizes(), got.sizes());
  EXPECT_TRUE(torch::allclose(want, got, /*rtol=*/1e-4, /*atol=*/1e-5))
      << "largest difference " << (want - got).abs().max().item<float>();
  EXPECT_TRUE(torch::equal(got, (*plan)->forward(x))) << "a second pass gave other bits";
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

TEST(OneDnnForwardTest, StaysOutOfPassesItMustNotTake) {
  Network net = MakeNetwork("dense 8 relu, dropout 0.5, dense 10", {6}, false);
  auto bf16 = OneDnnForward::For(net, torch::kCPU, "bf16", false);
  ASSERT_TRUE(bf16.ok());
  EXPECT_FALSE(bf16->has_value());
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

}  // namespace
}  // namespace cohort::model
