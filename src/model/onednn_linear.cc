#include "model/onednn_linear.h"

#include <ATen/ops/mkldnn_linear.h>
#include <ATen/ops/mkldnn_linear_backward_input.h>
#include <ATen/ops/mkldnn_linear_backward_weights.h>

#include <tuple>

#include "common/cpu_features.h"

namespace cohort::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

class OneDnnLinearFunction : public torch::autograd::Function<OneDnnLinearFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    const torch::Tensor input = x.contiguous();
    const bool has_bias = bias.numel() > 0;
    ctx->save_for_backward({input, weight});
    ctx->saved_data["bias"] = has_bias;
    return at::mkldnn_linear(input.to_mkldnn(), weight, has_bias ? bias : torch::Tensor())
        .to_dense();
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& input = saved[0];
    const torch::Tensor& weight = saved[1];
    const bool has_bias = ctx->saved_data["bias"].toBool();
    const torch::Tensor grad = grad_outputs[0].contiguous().to_mkldnn();
    torch::Tensor grad_input, grad_weight, grad_bias;
    if (ctx->needs_input_grad(0)) {
      grad_input = at::mkldnn_linear_backward_input(input.sizes(), grad, weight).to_dense();
    }
    if (ctx->needs_input_grad(1) || (has_bias && ctx->needs_input_grad(2))) {
      std::tie(grad_weight, grad_bias) =
          at::mkldnn_linear_backward_weights(grad, input.to_mkldnn(), weight, has_bias);
    }
    if (!ctx->needs_input_grad(1)) grad_weight = torch::Tensor();
    if (!has_bias || !ctx->needs_input_grad(2)) grad_bias = torch::Tensor();
    return {grad_input, grad_weight, grad_bias};
  }
};

}  // namespace

// Off x86 (ARM) false: oneDNN's kernels there are not measured against the BLAS.
bool OneDnnLinearPaysOnThisCpu() { return CpuHasAvx512F(); }

torch::Tensor OneDnnLinear(const torch::Tensor& x, const torch::Tensor& weight,
                           const torch::Tensor& bias) {
  // autograd::Function takes no undefined tensor: no bias goes in as an empty one.
  return OneDnnLinearFunction::apply(x, weight,
                                     bias.defined() ? bias : torch::empty({0}, weight.options()));
}

}  // namespace cohort::model
