// The pooling loops must give torch's own results bit for bit, outputs and gradients, on the
// cases where a hand loop could differ: ties, NaN, -inf, remainders, threads, bfloat16.
#include "model/pool.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace cohort::model {
namespace {

torch::Tensor TorchPool(PoolKind kind, const torch::Tensor& x, int64_t kernel) {
  return kind == PoolKind::kMax ? torch::max_pool2d(x, kernel) : torch::avg_pool2d(x, kernel);
}

// Equal bit for bit, NaN where the other has NaN.
void ExpectSame(const torch::Tensor& want, const torch::Tensor& got, const std::string& what) {
  ASSERT_EQ(want.sizes(), got.sizes()) << what;
  ASSERT_EQ(want.scalar_type(), got.scalar_type()) << what;
  EXPECT_TRUE(torch::equal(want.isnan(), got.isnan())) << what;
  EXPECT_TRUE(torch::equal(want.nan_to_num(7), got.nan_to_num(7))) << what;
}

// Random values with the awkward cases planted: a constant region (ties in every window, as
// the background of an image gives after a convolution), a NaN, -inf, and, with `few_values`,
// repeated maxima everywhere (averages get continuous values, where a sum or a division done
// another way would show in the last bits).
torch::Tensor AwkwardInput(std::vector<int64_t> shape, torch::ScalarType dtype, uint64_t seed,
                           bool few_values = true) {
  torch::manual_seed(seed);
  torch::Tensor x = torch::randn(shape);
  if (few_values) x = x.round().div(4);
  x.index_put_({torch::indexing::Slice(), torch::indexing::Slice(), torch::indexing::Slice(0, 4),
                torch::indexing::Slice(0, 4)},
               0.25);
  x.index_put_({0, 0, 1, 1}, std::numeric_limits<float>::quiet_NaN());
  x.index_put_({0, 0, 3, 2}, std::numeric_limits<float>::quiet_NaN());
  x.index_put_({0, 0, 2, 3}, std::numeric_limits<float>::quiet_NaN());
  x.index_put_({shape[0] - 1, shape[1] - 1, 0, 0}, -std::numeric_limits<float>::infinity());
  return x.to(dtype);
}

struct Case {
  PoolKind kind;
  torch::ScalarType dtype;
  std::vector<int64_t> shape;
  int64_t kernel;
};

std::string Name(const Case& c) {
  std::string s = c.kind == PoolKind::kMax ? "max" : "avg";
  s += c.dtype == torch::kFloat ? " float" : " bf16";
  for (int64_t d : c.shape) s += " " + std::to_string(d);
  return s + " kernel " + std::to_string(c.kernel);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg}) {
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
      if (kind == PoolKind::kAvg && dtype == torch::kBFloat16) continue;  // torch's op
      cases.push_back({kind, dtype, {5, 3, 28, 28}, 2});
      cases.push_back({kind, dtype, {2, 4, 9, 11}, 2});  // a row and a column left over
      cases.push_back({kind, dtype, {2, 4, 9, 10}, 2});  // the 2x2 passes, a row left over
      cases.push_back({kind, dtype, {3, 2, 10, 11}, 3});
      cases.push_back({kind, dtype, {2, 2, 6, 5}, 1});
      cases.push_back({kind, dtype, {1, 1, 7, 7}, 7});
    }
  }
  return cases;
}

TEST(Pool2dTest, OutputsAndGradientsAreTorchsBitForBit) {
  uint64_t seed = 1;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(Name(c));
    torch::Tensor x = AwkwardInput(c.shape, c.dtype, seed++, c.kind == PoolKind::kMax);
    torch::Tensor a = x.clone().requires_grad_();
    torch::Tensor b = x.clone().requires_grad_();
    torch::Tensor want = TorchPool(c.kind, a, c.kernel);
    torch::Tensor got = Pool2dForward(c.kind, b, c.kernel);
    ExpectSame(want, got, "output");
    // The loops ran, not torch's op under another name.
    ASSERT_NE(got.grad_fn(), nullptr);
    EXPECT_EQ(got.grad_fn()->name().find("Pool2DWithIndices"), std::string::npos);
    EXPECT_NE(got.grad_fn()->name().find(c.kind == PoolKind::kMax ? "MaxPool" : "AvgPool"),
              std::string::npos)
        << got.grad_fn()->name();

    torch::Tensor grad = torch::randn(want.sizes()).to(c.dtype);
    want.backward(grad);
    got.backward(grad);
    ExpectSame(a.grad(), b.grad(), "gradient");

    torch::NoGradGuard no_grad;
    ExpectSame(want.detach(), Pool2dForward(c.kind, x, c.kernel), "output without autograd");
  }
}

TEST(Pool2dTest, ThreadsSplitPlanesWithoutChangingResults) {
  const int threads = torch::get_num_threads();
  torch::set_num_threads(2);
  torch::Tensor x = AwkwardInput({64, 32, 14, 14}, torch::kFloat, 42);
  for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg}) {
    ExpectSame(TorchPool(kind, x, 2), Pool2dForward(kind, x, 2), "2 threads");
  }
  torch::set_num_threads(threads);
}

TEST(Pool2dTest, OtherInputsGoToTorchsOps) {
  // double, a channels-last float input, and a window larger than the image.
  torch::Tensor d = AwkwardInput({2, 3, 8, 8}, torch::kDouble, 7);
  ExpectSame(torch::max_pool2d(d, 2), Pool2dForward(PoolKind::kMax, d, 2), "double");
  torch::Tensor channels_last =
      AwkwardInput({2, 3, 8, 8}, torch::kFloat, 8).contiguous(torch::MemoryFormat::ChannelsLast);
  ExpectSame(torch::max_pool2d(channels_last, 2).contiguous(),
             Pool2dForward(PoolKind::kMax, channels_last, 2), "channels last");
  torch::Tensor small = torch::zeros({1, 1, 2, 2});
  EXPECT_THROW(Pool2dForward(PoolKind::kMax, small, 3), c10::Error);
}

TEST(Pool2dTest, AModuleSaysWhatItIs) {
  Pool2d pool(PoolKind::kAvg, 3);
  EXPECT_EQ(pool->kind(), PoolKind::kAvg);
  EXPECT_EQ(pool->kernel(), 3);
  EXPECT_TRUE(pool->parameters().empty());
  EXPECT_TRUE(pool->buffers().empty());
}

}  // namespace
}  // namespace cohort::model
