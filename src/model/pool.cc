#include "model/pool.h"

namespace cohort::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// A window is k*k elementwise steps; beyond 15x15 torch's own op is used.
constexpr int64_t kMaxKernel = 15;

bool OwnKernelsApply(PoolKind kind, const torch::Tensor& x, int64_t kernel) {
  if (!x.device().is_cpu() || x.dim() != 4 || kernel < 1 || kernel > kMaxKernel) return false;
  if (x.size(2) < kernel || x.size(3) < kernel) return false;  // torch's error message
  if (x.scalar_type() == torch::kFloat) return true;
  return kind == PoolKind::kMax && x.scalar_type() == torch::kBFloat16;
}

torch::Tensor TorchPool(PoolKind kind, const torch::Tensor& x, int64_t kernel) {
  return kind == PoolKind::kMax ? torch::max_pool2d(x, kernel) : torch::avg_pool2d(x, kernel);
}

// The window's element at `offset` (row * kernel + column), for every window: a strided view
// of x (B, C, H, W) with the output's shape.
torch::Tensor WindowElement(const torch::Tensor& x, int64_t kernel, int64_t offset) {
  using torch::indexing::Slice;
  const int64_t rows = x.size(2) / kernel * kernel;
  const int64_t columns = x.size(3) / kernel * kernel;
  return x.index({Slice(), Slice(), Slice(offset / kernel, rows, kernel),
                  Slice(offset % kernel, columns, kernel)});
}

// Max pooling as a chain of elementwise maxima over the windows' elements: torch's vectorised
// kernels. torch::maximum propagates NaN, so the values are max_pool2d's (where 0.0 and -0.0
// tie, either sign may stay).
torch::Tensor MaxPoolValues(const torch::Tensor& x, int64_t kernel) {
  torch::Tensor best = WindowElement(x, kernel, 0).clone(torch::MemoryFormat::Contiguous);
  for (int64_t offset = 1; offset < kernel * kernel; offset++) {
    best = torch::maximum(best, WindowElement(x, kernel, offset));
  }
  return best;
}

// The gradient max_pool2d gives: each window's gradient goes to its first element equal to the
// maximum or, where the maximum is NaN, to its last NaN.
torch::Tensor MaxPoolGradient(const torch::Tensor& x, const torch::Tensor& best,
                              const torch::Tensor& grad_out, int64_t kernel) {
  torch::Tensor grad_in = torch::zeros(x.sizes(), grad_out.options());
  torch::Tensor taken = torch::zeros(best.sizes(), best.options().dtype(torch::kBool));
  // Each element of grad_in belongs to one window and is written once by the first pass;
  // the NaN pass adds to the few it chooses. (A gradient of inf would turn the products with
  // 0 into NaN; torch::where would avoid that but is several times slower in libtorch 1.13.)
  auto give = [&](int64_t offset, const torch::Tensor& match, bool add) {
    torch::Tensor chosen = match.logical_and(taken.logical_not());
    taken.logical_or_(chosen);
    torch::Tensor share = grad_out * chosen.to(grad_out.scalar_type());
    torch::Tensor element = WindowElement(grad_in, kernel, offset);
    if (add) {
      element.add_(share);
    } else {
      element.copy_(share);
    }
  };
  for (int64_t offset = 0; offset < kernel * kernel; offset++) {
    give(offset, WindowElement(x, kernel, offset).eq(best), /*add=*/false);
  }
  const torch::Tensor nan_windows = best.isnan();
  if (nan_windows.any().item<bool>()) {
    for (int64_t offset = kernel * kernel - 1; offset >= 0; offset--) {
      give(offset, WindowElement(x, kernel, offset).isnan().logical_and(nan_windows),
           /*add=*/true);
    }
  }
  return grad_in;
}

// Average pooling: each window's elements added in row-major order in float, then divided by
// k*k, as avg_pool2d's CPU kernel does, so the results are bit-identical.
torch::Tensor AvgPoolValues(const torch::Tensor& x, int64_t kernel) {
  torch::Tensor sum = WindowElement(x, kernel, 0).clone(torch::MemoryFormat::Contiguous);
  for (int64_t offset = 1; offset < kernel * kernel; offset++) {
    sum.add_(WindowElement(x, kernel, offset));
  }
  return sum.div_(static_cast<double>(kernel * kernel));
}

class MaxPoolFunction : public torch::autograd::Function<MaxPoolFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t kernel) {
    torch::Tensor best = MaxPoolValues(x, kernel);
    ctx->save_for_backward({x, best});
    ctx->saved_data["kernel"] = kernel;
    return best;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const int64_t kernel = ctx->saved_data["kernel"].toInt();
    return {MaxPoolGradient(saved[0], saved[1], grad_outputs[0].contiguous(), kernel),
            torch::Tensor()};
  }
};

class AvgPoolFunction : public torch::autograd::Function<AvgPoolFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t kernel) {
    ctx->saved_data["kernel"] = kernel;
    ctx->saved_data["shape"] = x.sizes().vec();
    return AvgPoolValues(x, kernel);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    const int64_t kernel = ctx->saved_data["kernel"].toInt();
    const torch::Tensor share = grad_outputs[0] / static_cast<double>(kernel * kernel);
    torch::Tensor grad_in =
        torch::zeros(ctx->saved_data["shape"].toIntVector(), grad_outputs[0].options());
    for (int64_t offset = 0; offset < kernel * kernel; offset++) {
      WindowElement(grad_in, kernel, offset).copy_(share);
    }
    return {grad_in, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor Pool2dForward(PoolKind kind, const torch::Tensor& x, int64_t kernel) {
  if (!OwnKernelsApply(kind, x, kernel)) return TorchPool(kind, x, kernel);
  const bool needs_grad = torch::GradMode::is_enabled() && x.requires_grad();
  if (kind == PoolKind::kMax) {
    return needs_grad ? MaxPoolFunction::apply(x, kernel) : MaxPoolValues(x, kernel);
  }
  return needs_grad ? AvgPoolFunction::apply(x, kernel) : AvgPoolValues(x, kernel);
}

}  // namespace cohort::model
