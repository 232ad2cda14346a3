// OneDnnForward: a Network's forward for fp32 prediction passes on the CPU, with its dense
// layers computed by oneDNN's inner product (inside libtorch, `mkldnn_linear`) instead of the
// BLAS sgemm (internal to src/model).
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
// Used by prediction passes (RunOver) in fp32 on the CPU, except MC-dropout passes (dropout
// runs in the network's modules) and where oneDNN is unavailable; `COHORT_ONEDNN=off` in the
// environment turns it off (`on`/`auto`, the default, leave it on; anything else is refused).
// Training and validation keep the network's forward.
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

// COHORT_ONEDNN: true unless "off"; an error naming the variable for another value.
Result<bool> OneDnnEnabledFromEnv();

class OneDnnForward {
 public:
  // The plan for a pass of `net` on `device` in `precision`; nullopt where the network's own
  // forward should run (see above). The network must not change while the plan is used.
  static Result<std::optional<OneDnnForward>> For(Network& net, const torch::Device& device,
                                                  const std::string& precision,
                                                  bool sample_dropout);

  // The network's outputs for batch x, as Network::forward gives them.
  torch::Tensor forward(torch::Tensor x);

 private:
  struct Step {
    torch::nn::AnyModule module;  // the network's own layer, when not a dense one
    torch::Tensor weight;         // dense: oneDNN tensors
    torch::Tensor bias;
  };
  explicit OneDnnForward(Network& net) : net_(&net) {}

  Network* net_;
  std::vector<Step> steps_;
  bool standardization_folded_ = false;  // into the first dense layer's weights
};

}  // namespace cohort::model
