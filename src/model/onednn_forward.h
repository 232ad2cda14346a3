// OneDnnForward: a Network's forward for fp32 prediction passes on the CPU, with its dense
// layers computed by oneDNN's inner product (inside libtorch, `mkldnn_linear`) instead of the
// BLAS sgemm where the CPU has AVX-512 (onednn_dense(); on AVX2-only CPUs the sgemm won, see
// model/onednn_linear.h), and its convolutions and max-pools fused in oneDNN (internal to
// src/model).
//
// Why: the environment pins OpenBLAS to its AVX2 kernels (older builds compute wrong results on
// these CPUs, ../shared/NOTES.md), while oneDNN picks the CPU's widest instructions itself
// (AVX-512 here). For a 784-256-10 MLP at one thread its inner product ran at ~200 GFLOPS
// against ~95 for the sgemm (docs/benchmarks.md, "Precision"). The weights go into oneDNN's
// format once per pass; a standardisation right before the first dense layer is folded into
// its weights and bias; every other layer, activations included, runs as the network's own
// module on ordinary tensors (oneDNN's ReLU turns NaN into 0, and a NaN must reach the outputs
// to be reported). Results match the network's forward to float rounding (not bit for bit:
// another summation order), and a pass is deterministic.
//
// In bf16 (a member's `precision` or the pool's) the weights go in as bfloat16 and the dense
// layers compute in it, as autocast would have them, with bfloat16 activations between them;
// only where the CPU has oneDNN's bf16 kernels (AVX-512), autocast otherwise.
//
// A batch norm right after a convolution or a dense layer is folded into that layer's weights and
// bias (its running statistics, as evaluation uses them; in double, rounded once): the batch
// norm's pass over the layer's outputs is gone.
//
// A max-pool right after a convolution (and its batch norm; Network puts a non-decreasing
// activation after the pool) runs with it in oneDNN's blocked format, converted back to an
// ordinary tensor once after the pool: the convolution's outputs are never written in NCHW
// order. For the 1-to-32-channel 3x3 convolution and 2x2 pool of a 28x28 image, libtorch's NCHW
// convolution and pool took about 4x as long at one thread; the outputs are the same bits
// (docs/benchmarks.md, "The loop"). A batch with a NaN feature runs the network's own forward
// instead: oneDNN's max may drop a NaN. A bf16 plan runs these convolutions in bfloat16 (AMX
// where the CPU has it: a 32-to-64-channel convolution ran 3x faster than in fp32 here); it
// folds batch norms only into them and keeps every other convolution and batch norm module.
//
// When the first layer after a flatten is a dense one and the table holds uint8 images, the
// plan also takes the image bytes as they come: their scale (1/255) goes into that layer's
// weights with the standardisation, and the bytes are converted once, straight to the layer's
// dtype (a float pass, a multiply and, in bf16, a second conversion fewer per batch).
//
// Used by prediction passes (RunOver) on the CPU, except MC-dropout passes (dropout runs in the
// network's modules) and where oneDNN is unavailable; `COHORT_ONEDNN=off` in the environment
// turns it off (`on`/`auto`, the default, leave it on; anything else is refused), and with it the
// training path's oneDNN dense layers (model/onednn_linear.h), which `auto` takes only on CPUs
// where they pay and `on` on any. Training and validation keep the
// network's forward.
//
// Thread-safety: one thread at a time, like the network it reads.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/network.h"

namespace cohort::model {

// COHORT_ONEDNN: unset or "auto" (oneDNN where it pays), "on" (wherever it is usable, even where
// measurements say it loses: model/onednn_linear.h) or "off"; an error naming the variable for
// another value.
enum class OneDnnMode { kAuto, kOn, kOff };
Result<OneDnnMode> OneDnnModeFromEnv();

// COHORT_ONEDNN: true unless "off"; errors as OneDnnModeFromEnv.
Result<bool> OneDnnEnabledFromEnv();

// Whether work on `device` may go through oneDNN at all: COHORT_ONEDNN allows it (errors as
// OneDnnEnabledFromEnv), the device is the CPU, and libtorch has oneDNN and has not had it
// switched off. Training (dense layers, model/onednn_linear.h) and prediction (OneDnnForward::
// For) each add their own conditions on top.
Result<bool> OneDnnUsableOn(const torch::Device& device);

class OneDnnForward {
 public:
  // The plan for a pass of `net` on `device` in `precision`; nullopt where the network's own
  // forward should run (see above). The network must not change while the plan is used.
  // `uint8_scale` > 0: the pass's features are uint8, scaled by it before the network.
  static Result<std::optional<OneDnnForward>> For(Network& net, const torch::Device& device,
                                                  const std::string& precision, bool sample_dropout,
                                                  double uint8_scale = 0);

  // Whether forward takes the uint8 features unscaled (BatchSource::Start's raw_features).
  bool takes_raw_features() const { return raw_scale_folded_; }

  // The network's outputs for batch x, as Network::forward gives them (in bf16 plans, as it gives
  // them under autocast): x as the network takes it, or the uint8 features where
  // takes_raw_features().
  torch::Tensor forward(torch::Tensor x);

  // How many batch norms were folded into the layer before them, and how many max-pools run in
  // oneDNN with the convolution before them (for tests).
  int folded_batch_norms() const { return folded_batch_norms_; }
  int fused_max_pools() const { return fused_max_pools_; }

  // Whether this CPU runs oneDNN's bf16 inner product (checked once).
  static bool CpuHasBf16();

  // Whether the dense layers run in oneDNN (bf16 plans; fp32 ones where that pays: on a CPU
  // with AVX-512, or with COHORT_ONEDNN=on) or through the sgemm on ordinary tensors, with the
  // same folding of the standardisation, the uint8 scale and batch norms.
  bool onednn_dense() const { return onednn_dense_; }

 private:
  struct Step {
    torch::nn::AnyModule module;  // the network's own layer, when not a dense one
    torch::Tensor weight;         // dense: oneDNN tensors
    torch::Tensor bias;
    torch::Tensor conv_weight;  // a convolution (any batch norm folded in): dense tensors, or
    torch::Tensor conv_bias;    // oneDNN's where max_pool > 0
    int64_t max_pool = 0;       // the kernel of a max-pool computed with the convolution
    torch::ExpandingArray<2> conv_stride = torch::ExpandingArray<2>(1);
    torch::ExpandingArray<2> conv_padding = torch::ExpandingArray<2>(0);
    torch::ExpandingArray<2> conv_dilation = torch::ExpandingArray<2>(1);
    int64_t conv_groups = 1;
  };
  explicit OneDnnForward(Network& net) : net_(&net) {}

  Network* net_;
  std::vector<Step> steps_;
  torch::ScalarType dtype_ = torch::kFloat;  // of the dense layers
  bool standardization_folded_ = false;      // into the first dense layer's weights
  bool raw_scale_folded_ = false;            // the uint8 scale, there too
  bool onednn_dense_ = true;                 // dense layers in oneDNN, else the sgemm
  int folded_batch_norms_ = 0;
  int fused_max_pools_ = 0;
};

}  // namespace cohort::model
