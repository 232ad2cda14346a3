#include "model/onednn_forward.h"

#include <ATen/Context.h>

#include <cstdlib>

namespace cohort::model {

Result<bool> OneDnnEnabledFromEnv() {
  const char* value = std::getenv("COHORT_ONEDNN");
  const std::string text = value == nullptr ? "" : value;
  if (text.empty() || text == "auto" || text == "on") return true;
  if (text == "off") return false;
  return Status::InvalidArgument("COHORT_ONEDNN='" + text + "': expected auto, on or off");
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
  COHORT_ASSIGN_OR_RETURN(bool enabled, OneDnnEnabledFromEnv());
  const bool bf16 = precision == "bf16";
  if (!enabled || !device.is_cpu() || sample_dropout || !at::hasMKLDNN() ||
      !at::globalContext().userEnabledMkldnn() || (bf16 && !CpuHasBf16())) {
    return std::optional<OneDnnForward>();
  }
  torch::NoGradGuard no_grad;
  OneDnnForward plan(net);
  plan.dtype_ = bf16 ? torch::kBFloat16 : torch::kFloat;
  bool any_dense = false;
  bool only_flattened = true;  // no layer but flatten (or dropout) before this one
  for (const auto& layer : *net->layers()) {
    const auto& module = layer.ptr();
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
      step.weight = weight.to(plan.dtype_).contiguous().to_mkldnn();
      step.bias = bias.to(plan.dtype_).contiguous().to_mkldnn();
      any_dense = true;
      only_flattened = false;
    } else if (module->as<torch::nn::Dropout>() != nullptr) {
      continue;  // the identity in evaluation
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
  if (x.scalar_type() == torch::kByte) {
    // Raw image bytes (takes_raw_features): one conversion, the first dense layer scales them.
    x = x.to(dtype_);
  } else if (net.standardize() && !standardization_folded_) {
    x = (x - net.input_mean()) * net.input_inv_std();
  }
  if (net.add_channel()) x = x.unsqueeze(1);
  bool onednn_format = false;
  for (Step& step : steps_) {
    if (step.weight.defined()) {
      if (!onednn_format) x = x.to(dtype_).contiguous().to_mkldnn();
      onednn_format = true;
      x = at::mkldnn_linear(x, step.weight, step.bias);
    } else {
      if (onednn_format) x = x.to_dense();
      onednn_format = false;
      x = step.module.forward(x);
    }
  }
  return onednn_format ? x.to_dense() : x;
}

}  // namespace cohort::model
