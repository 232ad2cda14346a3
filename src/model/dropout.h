// Dropout: the `dropout R` layer of a ModelSpec (internal to src/model). In training (and in
// MC-dropout passes) each element is kept with probability 1 - R and scaled by 1 / (1 - R),
// else zeroed, as torch::nn::Dropout does; in evaluation it is the identity.
//
// Why not torch's: on the CPU libtorch 1.13 draws the mask with bernoulli_, one call into the
// Mersenne Twister per element, 8.8 ms for a 128x6272 activation at one thread (a 5th of a
// small CNN's training step; docs/models.md). Here the mask comes from a counter-based hash
// (splitmix64 of the element's index and a 64-bit seed drawn from torch's default generator,
// under its lock), two 32-bit draws per hash: a fraction of that time, the same mask for any
// number of threads, and still seeded by torch::manual_seed. The keep threshold is rounded to
// 2^-32. Other devices use torch's dropout.
//
// Thread-safety: a torch module; one thread at a time.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace cohort::model {

// The keep mask times 1 / (1 - rate) for `numel` elements from `seed`: the values DropoutImpl
// multiplies by (for tests).
torch::Tensor DropoutMask(int64_t numel, double rate, uint64_t seed);

class DropoutImpl : public torch::nn::Cloneable<DropoutImpl> {
 public:
  explicit DropoutImpl(double rate) : rate_(rate) {}
  void reset() override {}
  torch::Tensor forward(const torch::Tensor& x);
  double rate() const { return rate_; }

 private:
  double rate_;
};
TORCH_MODULE(Dropout);

}  // namespace cohort::model
