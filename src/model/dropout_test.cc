#include "model/dropout.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>

#include "model/network.h"

namespace cohort::model {
namespace {

TEST(DropoutTest, EvaluationIsTheIdentity) {
  Dropout dropout(0.5);
  dropout->eval();
  torch::Tensor x = torch::randn({64, 32});
  EXPECT_TRUE(torch::equal(dropout->forward(x), x));
}

TEST(DropoutTest, KeepsOneMinusRateOfTheElementsScaledUp) {
  for (double rate : {0.1, 0.25, 0.5}) {
    SCOPED_TRACE(rate);
    Dropout dropout(rate);
    dropout->train();
    torch::manual_seed(1);
    torch::Tensor x = torch::rand({1000, 1000}) + 1;  // no zeros of its own
    torch::Tensor y = dropout->forward(x);
    torch::Tensor kept = y.ne(0);
    const double fraction = kept.to(torch::kDouble).mean().item<double>();
    // 10^6 Bernoulli draws: the standard deviation of the fraction is under 5e-4.
    EXPECT_NEAR(fraction, 1 - rate, 3e-3);
    const auto scale = static_cast<float>(1.0 / (1.0 - rate));
    EXPECT_TRUE(torch::equal(y.masked_select(kept), x.masked_select(kept) * scale));
    // Both halves of each 64-bit draw are used and independent: even and odd elements alike.
    torch::Tensor flat = kept.flatten().to(torch::kDouble);
    EXPECT_NEAR(flat.slice(0, 0, flat.numel(), 2).mean().item<double>(), 1 - rate, 4e-3);
    EXPECT_NEAR(flat.slice(0, 1, flat.numel(), 2).mean().item<double>(), 1 - rate, 4e-3);
    // Neighbours are not correlated: P(both kept) = (1 - rate)^2.
    torch::Tensor pairs = flat.slice(0, 0, flat.numel() - 1) * flat.slice(0, 1, flat.numel());
    EXPECT_NEAR(pairs.mean().item<double>(), (1 - rate) * (1 - rate), 4e-3);
  }
}

TEST(DropoutTest, SeededByTorchsGeneratorAndTheSameForAnyThreadCount) {
  Dropout dropout(0.3);
  dropout->train();
  torch::Tensor x = torch::ones({300, 777});
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  torch::manual_seed(7);
  torch::Tensor a = dropout->forward(x);
  torch::Tensor b = dropout->forward(x);  // the generator moved on: another mask
  at::set_num_threads(2);
  torch::manual_seed(7);
  torch::Tensor c = dropout->forward(x);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(a, c));
  EXPECT_FALSE(torch::equal(a, b));
}

TEST(DropoutTest, TheGradientGoesThroughTheKeptElementsOnly) {
  Dropout dropout(0.4);
  dropout->train();
  torch::manual_seed(3);
  torch::Tensor x = (torch::rand({50, 40}) + 1).requires_grad_();
  torch::Tensor y = dropout->forward(x);
  (y * 3).sum().backward();
  torch::Tensor expected = y.detach().ne(0).to(torch::kFloat) * (3.0f / 0.6f);
  EXPECT_TRUE(torch::allclose(x.grad(), expected));
}

TEST(DropoutTest, EdgeRatesAndOtherDtypes) {
  torch::Tensor x = torch::rand({20, 30}) + 1;
  Dropout none(0.0);
  none->train();
  EXPECT_TRUE(torch::equal(none->forward(x), x));
  Dropout all(1.0);
  all->train();
  EXPECT_EQ(all->forward(x).ne(0).sum().item<int64_t>(), 0);
  // bfloat16 (autocast training) keeps its dtype and the same mask as float.
  Dropout dropout(0.5);
  dropout->train();
  torch::manual_seed(5);
  torch::Tensor f = dropout->forward(x);
  torch::manual_seed(5);
  torch::Tensor h = dropout->forward(x.to(torch::kBFloat16));
  EXPECT_EQ(h.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(h.ne(0), f.ne(0)));
  // An odd element count uses the first half of the last draw.
  EXPECT_EQ(DropoutMask(7, 0.5, 1).numel(), 7);
  EXPECT_TRUE(torch::equal(DropoutMask(7, 0.5, 1), DropoutMask(8, 0.5, 1).slice(0, 0, 7)));
}

TEST(DropoutTest, NetworksUseIt) {
  auto spec = ParseModelSpec("dense 16 relu, dropout 0.5, dense 10", "m");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  Network net(*spec, std::vector<int64_t>{12}, 10, /*standardize=*/false);
  int found = 0;
  for (const auto& module : net->modules()) found += module->as<Dropout>() != nullptr;
  EXPECT_EQ(found, 1);
}

}  // namespace
}  // namespace cohort::model
