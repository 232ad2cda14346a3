// PrecisionScope: runs the forward passes inside it in a member's precision. For "bf16" the
// dense and convolution layers compute in bfloat16 through libtorch's autocast (the weights,
// the optimizer state and the loss stay float32; the weights' bfloat16 copies are cached for
// the scope), on the CPU (oneDNN's bf16 kernels where the CPU has them) and on CUDA; for
// "fp32" it does nothing.
//
// A training step opens one per step (the weights change between steps, and leaving the scope
// drops the cached copies); a prediction pass opens one for the whole pass.
//
// Thread-safety: autocast state is per thread; a scope belongs to the thread that made it.
#pragma once

#include <torch/torch.h>

#include <string>

namespace cohort::model {

// Whether autocast is on for `type` in this thread (a PrecisionScope of a bf16 member is open).
bool AutocastEnabled(torch::DeviceType type);

class PrecisionScope {
 public:
  PrecisionScope(const torch::Device& device, const std::string& precision);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  bool active_ = false;
  torch::DeviceType type_ = torch::kCPU;
  bool was_enabled_ = false;
  torch::ScalarType was_dtype_ = torch::kFloat;
};

}  // namespace cohort::model
