#include "model/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

// PyTorch 2.4 made autocast's C++ switches per device type; before, CPU and CUDA had their own.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define COHORT_AUTOCAST_PER_DEVICE 1
#else
#define COHORT_AUTOCAST_PER_DEVICE 0
#endif

namespace cohort::model {

bool AutocastEnabled(torch::DeviceType type) {
#if COHORT_AUTOCAST_PER_DEVICE
  return at::autocast::is_autocast_enabled(type);
#else
  return type == torch::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

namespace {

torch::ScalarType Dtype(torch::DeviceType type) {
#if COHORT_AUTOCAST_PER_DEVICE
  return at::autocast::get_autocast_dtype(type);
#else
  return type == torch::kCPU ? at::autocast::get_autocast_cpu_dtype()
                             : at::autocast::get_autocast_gpu_dtype();
#endif
}

void Set(torch::DeviceType type, bool enabled, torch::ScalarType dtype) {
#if COHORT_AUTOCAST_PER_DEVICE
  at::autocast::set_autocast_enabled(type, enabled);
  at::autocast::set_autocast_dtype(type, dtype);
#else
  if (type == torch::kCPU) {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
}

}  // namespace

PrecisionScope::PrecisionScope(const torch::Device& device, const std::string& precision) {
  if (precision != "bf16") return;
  active_ = true;
  type_ = device.type();
  was_enabled_ = AutocastEnabled(type_);
  was_dtype_ = Dtype(type_);
  at::autocast::increment_nesting();
  Set(type_, true, torch::kBFloat16);
}

PrecisionScope::~PrecisionScope() {
  if (!active_) return;
  Set(type_, was_enabled_, was_dtype_);
  // The outermost scope drops the cached bfloat16 copies of the weights.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
}

}  // namespace cohort::model
