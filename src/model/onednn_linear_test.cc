// The oneDNN dense layer gives torch's linear outputs and gradients to float rounding, the same
// bits every time, only the gradients asked for, and a network uses it only where it should.
#include "model/onednn_linear.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "model/network.h"
#include "model/precision.h"

namespace cohort::model {
namespace {

void ExpectClose(const torch::Tensor& want, const torch::Tensor& got, const std::string& what,
                 double tolerance = 1e-5) {
  ASSERT_EQ(want.sizes(), got.sizes()) << what;
  ASSERT_EQ(got.scalar_type(), torch::kFloat) << what;
  const double scale = want.abs().max().item<double>() + 1;
  EXPECT_LT((want - got).abs().max().item<double>(), tolerance * scale) << what;
}

TEST(OneDnnLinearTest, OutputsAndGradientsMatchTorch) {
  if (!at::hasMKLDNN()) GTEST_SKIP() << "libtorch without oneDNN";
  torch::manual_seed(1);
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "bias" : "no bias");
    torch::Tensor x = torch::randn({37, 300});
    torch::Tensor w = torch::randn({70, 300}) * 0.1;
    torch::Tensor b = with_bias ? torch::randn({70}) : torch::Tensor();
    torch::Tensor grad = torch::randn({37, 70});

    torch::Tensor x1 = x.clone().requires_grad_(), w1 = w.clone().requires_grad_();
    torch::Tensor b1 = with_bias ? b.clone().requires_grad_() : torch::Tensor();
    torch::Tensor want = torch::nn::functional::linear(x1, w1, b1);
    want.backward(grad);

    torch::Tensor x2 = x.clone().requires_grad_(), w2 = w.clone().requires_grad_();
    torch::Tensor b2 = with_bias ? b.clone().requires_grad_() : torch::Tensor();
    torch::Tensor got = OneDnnLinear(x2, w2, b2);
    ASSERT_NE(got.grad_fn(), nullptr);
    EXPECT_NE(got.grad_fn()->name().find("OneDnnLinear"), std::string::npos)
        << got.grad_fn()->name();
    EXPECT_FALSE(got.is_mkldnn());
    ExpectClose(want.detach(), got.detach(), "output");
    got.backward(grad);
    ExpectClose(x1.grad(), x2.grad(), "input gradient");
    ExpectClose(w1.grad(), w2.grad(), "weight gradient");
    if (with_bias) ExpectClose(b1.grad(), b2.grad(), "bias gradient");
  }
}

TEST(OneDnnLinearTest, SameBitsEveryTimeAndOnlyTheGradientsAskedFor) {
  if (!at::hasMKLDNN()) GTEST_SKIP() << "libtorch without oneDNN";
  torch::manual_seed(2);
  // The first layer of an MLP: its input (the data) needs no gradient.
  torch::Tensor x = torch::randn({64, 784});
  torch::Tensor grad = torch::randn({64, 32});
  torch::Tensor first_weight_grad;
  for (int run = 0; run < 2; run++) {
    torch::Tensor w = (torch::ones({32, 784}) * 0.01).requires_grad_();
    torch::Tensor b = torch::zeros({32}).requires_grad_();
    OneDnnLinear(x, w, b).backward(grad);
    EXPECT_FALSE(x.grad().defined());
    ASSERT_TRUE(w.grad().defined());
    ASSERT_TRUE(b.grad().defined());
    if (run == 0) {
      first_weight_grad = w.grad().clone();
    } else {
      EXPECT_TRUE(torch::equal(first_weight_grad, w.grad()));
    }
  }
  // Frozen weights (no gradient) still pass one to the input.
  torch::Tensor xi = x.clone().requires_grad_();
  torch::Tensor frozen = torch::ones({32, 784}) * 0.01;
  OneDnnLinear(xi, frozen, torch::Tensor()).backward(grad);
  ExpectClose(grad.mm(frozen), xi.grad(), "input gradient with frozen weights");
}

Network MakeMlp() {
  auto spec = ParseModelSpec("dense 64 relu, dropout 0.2, dense 10", "m");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  torch::manual_seed(3);
  return Network(*spec, std::vector<int64_t>{28, 28}, 10, /*standardize=*/false);
}

// Whether the autograd graph behind `t` holds a node whose name contains `name`.
bool GraphHas(const torch::Tensor& t, const std::string& name) {
  std::vector<std::shared_ptr<torch::autograd::Node>> todo = {t.grad_fn()};
  while (!todo.empty()) {
    auto node = todo.back();
    todo.pop_back();
    if (node == nullptr) continue;
    if (node->name().find(name) != std::string::npos) return true;
    for (const auto& edge : node->next_edges()) todo.push_back(edge.function);
  }
  return false;
}

TEST(OneDnnLinearTest, ANetworkUsesItOnlyWhenOnForLargeFloatLayersOutsideAutocast) {
  if (!at::hasMKLDNN()) GTEST_SKIP() << "libtorch without oneDNN";
  Network net = MakeMlp();
  net->eval();  // dropout off: the two paths see the same values
  // 128 x 784 x 64 multiply-adds reach the threshold; the 64-to-10 layer does not.
  ASSERT_GE(128 * 784 * 64, kOneDnnLinearMinMultiplyAdds);
  ASSERT_LT(128 * 64 * 10, kOneDnnLinearMinMultiplyAdds);
  torch::Tensor x = torch::rand({128, 28, 28});
  const torch::Tensor blas = net->forward(x);
  EXPECT_FALSE(GraphHas(blas, "OneDnnLinear"));

  net->set_onednn_dense(true);
  const torch::Tensor onednn = net->forward(x);
  EXPECT_TRUE(GraphHas(onednn, "OneDnnLinear"));
  EXPECT_NE(onednn.grad_fn()->name().find("Addmm"), std::string::npos)  // the small layer
      << onednn.grad_fn()->name();
  ExpectClose(blas.detach(), onednn.detach(), "network output");

  // A small batch: every layer keeps the sgemm (oneDNN's fixed cost would dominate).
  EXPECT_FALSE(GraphHas(net->forward(x.slice(0, 0, 16)), "OneDnnLinear"));
  {
    // A bf16 member's forward: autocast's own bf16 dense layers, not the fp32 oneDNN path.
    PrecisionScope scope(torch::kCPU, "bf16");
    EXPECT_FALSE(GraphHas(net->forward(x), "OneDnnLinear"));
  }
  // Another dtype takes the module's own forward.
  net->to(torch::kDouble);
  const torch::Tensor doubles = net->forward(x.to(torch::kDouble));
  EXPECT_EQ(doubles.scalar_type(), torch::kDouble);
  EXPECT_FALSE(GraphHas(doubles, "OneDnnLinear"));
}

TEST(OneDnnLinearTest, TrainingStepsMatchTheBlasPath) {
  if (!at::hasMKLDNN()) GTEST_SKIP() << "libtorch without oneDNN";
  // Ten Adam steps each way from the same weights. Adam scales every update to about the
  // learning rate, so where a gradient is near 0 the two summation orders can move a weight by
  // a different fraction of a step: 4e-5 in the ASan build (-O1), under 1e-5 in Release. The
  // bound, a tenth of one step (1e-4), still fails a wrong gradient, which is off by whole
  // steps (10 steps of 1e-3).
  torch::Tensor x = torch::rand({128, 28, 28});  // the first layer through oneDNN
  torch::Tensor y = torch::randint(0, 10, {128});
  std::vector<torch::Tensor> finals[2];
  for (int onednn = 0; onednn < 2; onednn++) {
    Network net = MakeMlp();
    net->eval();
    net->set_onednn_dense(onednn == 1);
    torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-3));
    for (int step = 0; step < 10; step++) {
      adam.zero_grad();
      torch::nn::functional::cross_entropy(net->forward(x), y).backward();
      adam.step();
    }
    for (const auto& p : net->parameters()) finals[onednn].push_back(p.detach().clone());
  }
  ASSERT_EQ(finals[0].size(), finals[1].size());
  for (size_t i = 0; i < finals[0].size(); i++) {
    ExpectClose(finals[0][i], finals[1][i], "parameter " + std::to_string(i), 1e-4);
  }
}

}  // namespace
}  // namespace cohort::model
