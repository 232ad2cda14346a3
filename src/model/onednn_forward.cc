#include "model/onednn_forward.h"

#include <ATen/Context.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/cpu_features.h"
#include "model/dropout.h"
#include "model/onednn_linear.h"
#include "model/pool.h"
#include "model/torch_compat.h"

namespace cohort::model {
namespace {

// Image bytes to float or bfloat16, exact (every byte value is a bfloat16: the top half of its
// float). ATen's conversion of a 1,024-image batch to bfloat16 took about a tenth of the time
// of the inner product after it; these loops, vectorised by the compiler for AVX-512, half of
// that (a bf16 MLP pool pass: 0.100 -> 0.082 s). The AVX-512 copies are chosen at run time with
// __builtin_cpu_supports, not an ifunc (target_clones), which sanitizer builds resolve before
// their runtime is up. Inlined into each caller, so each copy is compiled for its target.
[[gnu::always_inline]] inline void BytesToFloatLoop(const uint8_t* __restrict in,
                                                    float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = static_cast<float>(in[i]);
}

[[gnu::always_inline]] inline void BytesToBf16Loop(const uint8_t* __restrict in,
                                                   uint16_t* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float f = static_cast<float>(in[i]);
    uint32_t bits = 0;
    std::memcpy(&bits, &f, sizeof bits);
    out[i] = static_cast<uint16_t>(bits >> 16);
  }
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw"))) void BytesToFloatAvx512(const uint8_t* in, float* out,
                                                                    int64_t n) {
  BytesToFloatLoop(in, out, n);
}

__attribute__((target("avx512f,avx512bw"))) void BytesToBf16Avx512(const uint8_t* in, uint16_t* out,
                                                                   int64_t n) {
  BytesToBf16Loop(in, out, n);
}

bool HasAvx512() {
  static const bool has = CpuHasAvx512F() && CpuHasAvx512BW();
  return has;
}
#endif

// `bytes` (uint8) converted to `dtype` (float or bfloat16), same shape.
torch::Tensor ConvertBytes(const torch::Tensor& bytes, torch::ScalarType dtype) {
  torch::Tensor in = bytes.contiguous();
  torch::Tensor out = torch::empty(in.sizes(), in.options().dtype(dtype));
  const auto* src = in.data_ptr<uint8_t>();
  const int64_t n = in.numel();
  if (dtype == torch::kBFloat16) {
    auto* dst = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
#if defined(__x86_64__)
    if (HasAvx512()) {
      BytesToBf16Avx512(src, dst, n);
      return out;
    }
#endif
    BytesToBf16Loop(src, dst, n);
  } else {
    auto* dst = out.data_ptr<float>();
#if defined(__x86_64__)
    if (HasAvx512()) {
      BytesToFloatAvx512(src, dst, n);
      return out;
    }
#endif
    BytesToFloatLoop(src, dst, n);
  }
  return out;
}

// The batch norm whose running statistics, affine parameters (`gamma`, `beta`: undefined when it
// has none) and epsilon are given, folded into the layer before it, whose outputs' channels are
// dimension 0 of `weight`: bn(W x + b) = (s W) x + s (b - mean) + beta with
// s = gamma / sqrt(var + eps), in double and rounded once. `bias` may be undefined.
struct Folded {
  torch::Tensor weight;
  torch::Tensor bias;
};
template <typename BatchNorm>
Folded FoldBatchNorm(const torch::Tensor& weight, const torch::Tensor& bias, const BatchNorm& bn) {
  const auto d = torch::kDouble;
  torch::Tensor s = (bn.running_var.to(d) + bn.options.eps()).rsqrt();
  if (bn.weight.defined()) s = s * bn.weight.detach().to(d);
  torch::Tensor b = bias.defined() ? bias.detach().to(d) : torch::zeros_like(s);
  b = (b - bn.running_mean.to(d)) * s;
  if (bn.bias.defined()) b = b + bn.bias.detach().to(d);
  std::vector<int64_t> per_channel(static_cast<size_t>(weight.dim()), 1);
  per_channel[0] = -1;
  return {(weight.detach().to(d) * s.reshape(per_channel)).to(torch::kFloat), b.to(torch::kFloat)};
}

// Whether `module` is a batch norm that evaluation computes from running statistics.
template <typename BatchNorm>
const BatchNorm* FoldableBatchNorm(const torch::nn::Module* module) {
  const auto* bn = module == nullptr ? nullptr : module->as<BatchNorm>();
  if (bn == nullptr || module->is_training() || !bn->options.track_running_stats() ||
      !bn->running_mean.defined() || bn->running_mean.scalar_type() != torch::kFloat) {
    return nullptr;
  }
  return bn;
}

// The max-pool right after layer i, or after the batch norm right after it.
const Pool2dImpl* MaxPoolAfter(const std::vector<torch::nn::AnyModule>& layers, size_t i) {
  auto at = [&](size_t j) { return j < layers.size() ? layers[j].ptr().get() : nullptr; };
  const torch::nn::Module* next = at(i + 1);
  if (FoldableBatchNorm<torch::nn::BatchNorm2dImpl>(next) != nullptr) next = at(i + 2);
  const auto* pool = next == nullptr ? nullptr : next->as<Pool2d>();
  return pool != nullptr && pool->kind() == PoolKind::kMax ? pool : nullptr;
}

}  // namespace

Result<OneDnnMode> OneDnnModeFromEnv() {
  const char* value = std::getenv("COHORT_ONEDNN");
  const std::string text = value == nullptr ? "" : value;
  if (text.empty() || text == "auto") return OneDnnMode::kAuto;
  if (text == "on") return OneDnnMode::kOn;
  if (text == "off") return OneDnnMode::kOff;
  return Status::InvalidArgument("COHORT_ONEDNN='" + text + "': expected auto, on or off");
}

Result<bool> OneDnnEnabledFromEnv() {
  COHORT_ASSIGN_OR_RETURN(const OneDnnMode mode, OneDnnModeFromEnv());
  return mode != OneDnnMode::kOff;
}

Result<bool> OneDnnUsableOn(const torch::Device& device) {
  COHORT_ASSIGN_OR_RETURN(const bool enabled, OneDnnEnabledFromEnv());
  return enabled && device.is_cpu() && at::hasMKLDNN() && at::globalContext().userEnabledMkldnn();
}

bool OneDnnForward::CpuHasBf16() {
  static const bool has = [] {
    try {
      torch::NoGradGuard no_grad;
      torch::Tensor x = torch::ones({2, 4}, torch::kBFloat16).to_mkldnn();
      torch::Tensor w = torch::ones({3, 4}, torch::kBFloat16).to_mkldnn();
      torch::Tensor b = torch::zeros({3}, torch::kBFloat16).to_mkldnn();
      return at::mkldnn_linear(x, w, b).to_dense().to(torch::kFloat).eq(4).all().item<bool>();
    } catch (const c10::Error&) {
      return false;  // "the bf16 path needs the cpu support avx512bw, avx512vl and avx512dq"
    }
  }();
  return has;
}

Result<std::optional<OneDnnForward>> OneDnnForward::For(Network& net, const torch::Device& device,
                                                        const std::string& precision,
                                                        bool sample_dropout, double uint8_scale) {
  COHORT_ASSIGN_OR_RETURN(const bool usable, OneDnnUsableOn(device));
  const bool bf16 = precision == "bf16";
  if (!usable || sample_dropout || (bf16 && !CpuHasBf16())) {
    return std::optional<OneDnnForward>();
  }
  torch::NoGradGuard no_grad;
  OneDnnForward plan(net);
  plan.dtype_ = bf16 ? torch::kBFloat16 : torch::kFloat;
  // fp32 dense layers through oneDNN where it beats the sgemm (model/onednn_linear.h: AVX-512),
  // through the sgemm (with the same folding) elsewhere; bf16 ones need oneDNN.
  COHORT_ASSIGN_OR_RETURN(const OneDnnMode mode, OneDnnModeFromEnv());
  plan.onednn_dense_ = bf16 || mode == OneDnnMode::kOn || OneDnnLinearPaysOnThisCpu();
  bool any_dense = false;
  bool only_flattened = true;  // no layer but flatten (or dropout) before this one
  const std::vector<torch::nn::AnyModule> layers(net->layers()->begin(), net->layers()->end());
  for (size_t i = 0; i < layers.size(); i++) {
    const torch::nn::AnyModule& layer = layers[i];
    const auto& module = layer.ptr();
    const torch::nn::Module* next = i + 1 < layers.size() ? layers[i + 1].ptr().get() : nullptr;
    Step step;
    if (auto* linear = module->as<torch::nn::Linear>()) {
      if (linear->weight.scalar_type() != torch::kFloat) return std::optional<OneDnnForward>();
      torch::Tensor weight = linear->weight.detach();
      torch::Tensor bias = linear->bias.detach();
      const bool fold_scale = uint8_scale > 0;
      if (only_flattened && !net->add_channel() && (net->standardize() || fold_scale)) {
        // W ((s u - mean) * inv_std) + b = (W * inv_std * s) u + (b - (W * inv_std) mean): the
        // input goes in as it comes, passes over it fewer. In double, then rounded once.
        torch::Tensor scaled = weight.to(torch::kDouble);
        if (net->standardize()) {
          scaled = scaled * net->input_inv_std().reshape({1, -1}).to(torch::kDouble);
          bias = (bias.to(torch::kDouble) -
                  scaled.matmul(net->input_mean().reshape({-1}).to(torch::kDouble)))
                     .to(torch::kFloat);
          plan.standardization_folded_ = true;
        }
        if (fold_scale) scaled = scaled * uint8_scale;
        plan.raw_scale_folded_ = fold_scale;
        weight = scaled.to(torch::kFloat);
      }
      if (const auto* bn = FoldableBatchNorm<torch::nn::BatchNorm1dImpl>(next); bn && !bf16) {
        Folded folded = FoldBatchNorm(weight, bias, *bn);
        weight = folded.weight;
        bias = folded.bias;
        plan.folded_batch_norms_++;
        i++;
      }
      step.weight = weight.to(plan.dtype_).contiguous();
      step.bias = bias.to(plan.dtype_).contiguous();
      if (plan.onednn_dense_) {
        step.weight = step.weight.to_mkldnn();
        step.bias = step.bias.to_mkldnn();
      }
      any_dense = true;
      only_flattened = false;
    } else if (module->as<Dropout>() != nullptr) {
      continue;  // the identity in evaluation
    } else if (const auto* conv = module->as<torch::nn::Conv2d>();
               conv != nullptr && conv->weight.scalar_type() == torch::kFloat &&
               (!bf16 || MaxPoolAfter(layers, i) != nullptr)) {
      const auto* padding = VariantGetIf<torch::ExpandingArray<2>>(&conv->options.padding());
      if (padding == nullptr || conv->options.padding_mode().index() != 0) {
        return std::optional<OneDnnForward>();  // never built by Network; its forward then
      }
      const Pool2dImpl* pool = MaxPoolAfter(layers, i);
      Folded folded{conv->weight.detach(), conv->bias.defined() ? conv->bias.detach() : conv->bias};
      if (const auto* bn = FoldableBatchNorm<torch::nn::BatchNorm2dImpl>(next)) {
        folded = FoldBatchNorm(conv->weight, conv->bias, *bn);
        plan.folded_batch_norms_++;
        i++;
      }
      step.conv_stride = conv->options.stride();
      step.conv_padding = *padding;
      step.conv_dilation = conv->options.dilation();
      step.conv_groups = conv->options.groups();
      if (pool != nullptr && torch::isfinite(folded.weight).all().item<bool>() &&
          (!folded.bias.defined() || torch::isfinite(folded.bias).all().item<bool>())) {
        // Convolution and max-pool in oneDNN's blocked format, one conversion back after them.
        // oneDNN's max may drop a NaN where torch's keeps it: finite weights here, and
        // forward sends a batch with a NaN feature through the network's own layers.
        step.conv_weight = at::mkldnn_reorder_conv2d_weight(
            folded.weight.to(plan.dtype_).contiguous().to_mkldnn(), step.conv_padding,
            step.conv_stride, step.conv_dilation, step.conv_groups);
        if (folded.bias.defined()) {
          step.conv_bias = folded.bias.to(plan.dtype_).contiguous().to_mkldnn();
        }
        step.max_pool = pool->kernel();
        plan.fused_max_pools_++;
        i++;
      } else if (bf16) {
        return std::optional<OneDnnForward>();  // non-finite weights: the network's forward
      } else {
        step.conv_weight = folded.weight.contiguous();
        if (folded.bias.defined()) step.conv_bias = folded.bias.contiguous();
      }
      only_flattened = false;
    } else {
      step.module = layer;
      only_flattened = only_flattened && module->as<torch::nn::Flatten>() != nullptr;
    }
    plan.steps_.push_back(std::move(step));
  }
  if (!any_dense) return std::optional<OneDnnForward>();
  return std::optional<OneDnnForward>(std::move(plan));
}

torch::Tensor OneDnnForward::forward(torch::Tensor x) {
  NetworkImpl& net = **net_;
  if (fused_max_pools_ > 0 && x.is_floating_point() && x.isnan().any().item<bool>()) {
    return net.forward(x);  // torch's max-pool keeps a NaN, so the outputs report it
  }
  if (x.scalar_type() == torch::kByte) {
    // Raw image bytes (takes_raw_features): one conversion, the first dense layer scales them.
    x = ConvertBytes(x, dtype_);
  } else if (net.standardize() && !standardization_folded_) {
    x = (x - net.input_mean()) * net.input_inv_std();
  }
  if (net.add_channel()) x = x.unsqueeze(1);
  bool onednn_format = false;
  for (Step& step : steps_) {
    if (step.weight.defined() && !onednn_dense_) {
      if (onednn_format) x = x.to_dense();
      onednn_format = false;
      x = torch::nn::functional::linear(x.to(dtype_), step.weight, step.bias);
    } else if (step.weight.defined()) {
      if (!onednn_format) x = x.to(dtype_).contiguous().to_mkldnn();
      onednn_format = true;
      x = at::mkldnn_linear(x, step.weight, step.bias);
    } else if (step.max_pool > 0) {
      if (!onednn_format) x = x.to(dtype_).contiguous().to_mkldnn();
      x = at::mkldnn_convolution(x, step.conv_weight, step.conv_bias, step.conv_padding,
                                 step.conv_stride, step.conv_dilation, step.conv_groups);
      x = at::max_pool2d(x, {step.max_pool, step.max_pool}, {step.max_pool, step.max_pool})
              .to_dense();
      onednn_format = false;
    } else if (step.conv_weight.defined()) {
      if (onednn_format) x = x.to_dense();
      onednn_format = false;
      x = torch::conv2d(x, step.conv_weight, step.conv_bias, step.conv_stride, step.conv_padding,
                        step.conv_dilation, step.conv_groups);
    } else {
      if (onednn_format) x = x.to_dense();
      onednn_format = false;
      x = step.module.forward(x);
    }
  }
  return onednn_format ? x.to_dense() : x;
}

}  // namespace cohort::model
