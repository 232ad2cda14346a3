// A Network runs its spec's layers in order, except that a non-decreasing activation right
// before a max-pool runs after it: outputs and gradients must be those of the spec's order.
#include "model/network.h"

#include <gtest/gtest.h>

#include <string>

#include "model/pool.h"

namespace cohort::model {
namespace {

Network MakeNetwork(const std::string& spec_text) {
  auto spec = ParseModelSpec(spec_text, "m");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  torch::manual_seed(4);
  return Network(*spec, std::vector<int64_t>{12, 12}, 10, /*standardize=*/false);
}

torch::Tensor Activate(const std::string& name, const torch::Tensor& x) {
  if (name == "relu") return torch::relu(x);
  if (name == "tanh") return torch::tanh(x);
  if (name == "sigmoid") return torch::sigmoid(x);
  if (name == "elu") return torch::elu(x);
  if (name == "gelu") return torch::gelu(x);
  return torch::silu(x);
}

// The spec's order computed by hand from the network's own parameters: conv, activation,
// max-pool, dense.
torch::Tensor SpecOrder(Network& net, const std::string& activation, const torch::Tensor& x) {
  auto& conv = *net->layers()->ptr(0)->as<torch::nn::Conv2d>();
  auto& dense = *net->layers()->ptr(4)->as<torch::nn::Linear>();
  torch::Tensor h = Activate(activation, conv.forward(x.unsqueeze(1)));
  h = torch::max_pool2d(h, 2).flatten(1);
  return dense.forward(h);
}

TEST(NetworkTest, MaxPoolRunsBeforeANonDecreasingActivationWithTheSameResults) {
  for (const std::string activation : {"relu", "tanh", "sigmoid", "elu"}) {
    SCOPED_TRACE(activation);
    Network net = MakeNetwork("conv2d 6 3 1 1 " + activation + ", maxpool 2, flatten, dense 10");
    ASSERT_NE(net->layers()->ptr(1)->as<Pool2d>(), nullptr) << "the max-pool was not moved first";
    ASSERT_EQ(net->layers()->ptr(1)->as<Pool2d>()->kind(), PoolKind::kMax);

    torch::manual_seed(8);
    torch::Tensor x = torch::randn({40, 12, 12}) * 3;
    torch::Tensor got = net->forward(x);
    EXPECT_TRUE(torch::equal(got, SpecOrder(net, activation, x))) << "outputs differ";

    // Gradients: the parameters' after the network's order, then after the spec's.
    got.square().sum().backward();
    std::vector<torch::Tensor> grads;
    for (auto& p : net->parameters()) grads.push_back(p.grad().clone());
    net->zero_grad();
    SpecOrder(net, activation, x).square().sum().backward();
    const auto params = net->parameters();
    for (size_t i = 0; i < params.size(); i++) {
      EXPECT_TRUE(torch::equal(grads[i], params[i].grad())) << "gradient " << i << " differs";
    }
  }
}

TEST(NetworkTest, ActivationsThatDipKeepTheirPlaceBeforeTheMaxPool) {
  // GELU and SiLU are not monotone: max(f(a), f(b)) is not f(max(a, b)) left of zero.
  for (const std::string activation : {"gelu", "silu"}) {
    SCOPED_TRACE(activation);
    Network net = MakeNetwork("conv2d 6 3 1 1 " + activation + ", maxpool 2, flatten, dense 10");
    EXPECT_EQ(net->layers()->ptr(1)->as<Pool2d>(), nullptr);
    EXPECT_NE(net->layers()->ptr(2)->as<Pool2d>(), nullptr);
    torch::Tensor x = torch::randn({8, 12, 12});
    EXPECT_TRUE(torch::equal(net->forward(x), SpecOrder(net, activation, x)));
  }
  // An average pool does not commute with any of them.
  Network net = MakeNetwork("conv2d 6 3 1 1 relu, avgpool 2, flatten, dense 10");
  EXPECT_NE(net->layers()->ptr(2)->as<Pool2d>(), nullptr);
}

}  // namespace
}  // namespace cohort::model
