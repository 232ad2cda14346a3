// Pool2d: the `maxpool K` and `avgpool K` layers of a ModelSpec (internal to src/model):
// K x K windows, stride K, no padding, the remainder rows and columns dropped.
//
// On the CPU, for float (and bfloat16 for max pooling, which autocast hands it), forward and
// backward are plain loops over each (sample, channel) plane, because libtorch's own NCHW
// kernels are slow on this path: at 1 thread on a 125x32x28x28 batch, torch's max_pool2d took
// 21.8 ms and avg_pool2d 8.4 ms. The max-pool keeps each window's chosen offset (a byte) for
// its gradient instead of its input; at 1 thread on a 128x32x28x28 batch its 2x2 forward takes
// ~3.8 ms and its backward ~2.6 ms. The results are bit-identical to torch's, outputs and
// gradients: windows read in row-major order, the first maximum wins a tie, a NaN wins over any
// number (the last NaN of a window, as in torch), averages summed in float in row-major order
// and divided by K*K. Every other device, dtype or layout (contiguous NCHW only) goes to
// torch's ops.
//
// Thread-safety: a torch module; one thread at a time (the loops split planes over torch's
// intra-op threads).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace cohort::model {

enum class PoolKind { kMax, kAvg };

// What the layer computes, for tests and for export.
torch::Tensor Pool2dForward(PoolKind kind, const torch::Tensor& x, int64_t kernel);

class Pool2dImpl : public torch::nn::Module {
 public:
  Pool2dImpl(PoolKind kind, int64_t kernel) : kind_(kind), kernel_(kernel) {}
  torch::Tensor forward(const torch::Tensor& x) { return Pool2dForward(kind_, x, kernel_); }

  PoolKind kind() const { return kind_; }
  int64_t kernel() const { return kernel_; }

 private:
  PoolKind kind_;
  int64_t kernel_;
};
TORCH_MODULE(Pool2d);

}  // namespace cohort::model
