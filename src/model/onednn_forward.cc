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

Result<std::optional<OneDnnForward>> OneDnnForward::For(Network& net, const torch::Device& device,
                                                        const std::string& precision,
                                                        bool sample_dropout) {
  COHORT_ASSIGN_OR_RETURN(bool enabled, OneDnnEnabledFromEnv());
  if (!enabled || !device.is_cpu() || precision == "bf16" || sample_dropout || !at::hasMKLDNN() ||
      !at::globalContext().userEnabledMkldnn()) {
    return std::optional<OneDnnForward>();
  }
  torch::NoGradGuard no_grad;
  OneDnnForward plan(net);
  bool any_dense = false;
  bool only_flattened = true;  // no layer but flatten (or dropout) before this one
  for (const auto& layer : *net->layers()) {
    const auto& module = layer.ptr();
    Step step;
    if (auto* linear = module->as<torch::nn::Linear>()) {
      if (linear->weight.scalar_type() != torch::kFloat) return std::optional<OneDnnForward>();
      torch::Tensor weight = linear->weight.detach();
      torch::Tensor bias = linear->bias.detach();
      if (only_flattened && net->standardize() && !net->add_channel()) {
        // W (x - mean) * inv_std + b = (W * inv_std) x + (b - (W * inv_std) mean): the input
        // goes in as it comes, two passes over it fewer.
        torch::Tensor scaled =
            weight.to(torch::kDouble) * net->input_inv_std().reshape({1, -1}).to(torch::kDouble);
        bias = (bias.to(torch::kDouble) -
                scaled.matmul(net->input_mean().reshape({-1}).to(torch::kDouble)))
                   .to(torch::kFloat);
        weight = scaled.to(torch::kFloat);
        plan.standardization_folded_ = true;
      }
      step.weight = weight.contiguous().to_mkldnn();
      step.bias = bias.contiguous().to_mkldnn();
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
  if (net.standardize() && !standardization_folded_) {
    x = (x - net.input_mean()) * net.input_inv_std();
  }
  if (net.add_channel()) x = x.unsqueeze(1);
  bool onednn_format = false;
  for (Step& step : steps_) {
    if (step.weight.defined()) {
      if (!onednn_format) x = x.contiguous().to_mkldnn();
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
