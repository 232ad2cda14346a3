// Small shims over differences between the libtorch releases cohort builds against: Debian's
// 1.13 and the CUDA PyTorch 2.x of GPU machines (internal to src/model).
//
// Thread-safety: plain functions.
#pragma once

#include <torch/version.h>

#include <variant>

namespace cohort::model {

// libtorch's option variants (a convolution's padding): c10::variant up to 2.0, std::variant
// since (c10::get_if is gone in 2.x releases, e.g. the CUDA PyTorch 2.11 of the GPU check).
template <typename T, typename V>
const T* VariantGetIf(const V* v) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  return std::get_if<T>(v);
#else
  return c10::get_if<T>(v);
#endif
}

}  // namespace cohort::model
