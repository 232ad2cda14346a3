#include "model/pool.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace cohort::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// The window's offset (row * kernel + column) is kept in a byte for the gradient: 15x15 at most.
// Beyond that torch's own op is used.
constexpr int64_t kMaxKernel = 15;

bool OwnKernelsApply(PoolKind kind, const torch::Tensor& x, int64_t kernel) {
  if (!x.device().is_cpu() || x.dim() != 4 || kernel < 1 || kernel > kMaxKernel) return false;
  if (x.size(2) < kernel || x.size(3) < kernel) return false;  // torch's error message
  // Contiguous NCHW only: a channels-last tensor (or any other strides) goes to torch's op.
  if (!x.is_contiguous()) return false;
  if (x.scalar_type() == torch::kFloat) return true;
  return kind == PoolKind::kMax && x.scalar_type() == torch::kBFloat16;
}

torch::Tensor TorchPool(PoolKind kind, const torch::Tensor& x, int64_t kernel) {
  return kind == PoolKind::kMax ? torch::max_pool2d(x, kernel) : torch::avg_pool2d(x, kernel);
}

// The loops below read and write contiguous NCHW tensors. The planes (sample, channel) are
// split over torch's intra-op threads, each plane computed the same way whichever thread takes
// it.
struct PlaneShape {
  int64_t planes, height, width, kernel;
  int64_t out_height() const { return height / kernel; }
  int64_t out_width() const { return width / kernel; }
};

PlaneShape ShapeOf(const torch::Tensor& x, int64_t kernel) {
  return {x.size(0) * x.size(1), x.size(2), x.size(3), kernel};
}

// Planes per intra-op task: a 28x28 plane is a few microseconds of work.
constexpr int64_t kPlanesPerTask = 16;

template <typename Body>
void ForEachPlane(const PlaneShape& s, Body body) {
  at::parallel_for(0, s.planes, kPlanesPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; p++) body(p);
  });
}

// One element of a window against the best so far, as max_pool2d's CPU kernel compares them
// (it takes an element that is greater or NaN), without branches so that the loops vectorise:
// a branch per element mispredicted on image data. The choice is an integer mask because
// GCC 12 does not vectorise `take ? offset : best_at` with a bool `take` ("control flow in
// loop"); that left the 2x2 pass several times slower.
inline void Consider(float v, int32_t offset, float& best, int32_t& best_at) {
  const int32_t take = -static_cast<int32_t>(v > best) | -static_cast<int32_t>(v != v);
  best = take != 0 ? v : best;
  best_at = (offset & take) | (best_at & ~take);
}

// The first half of a 2x2 max-pool: the pairs of `pairs` adjacent elements.
template <typename T>
void MaxPoolPairs(const T* __restrict in, int64_t pairs, float* __restrict best,
                  uint8_t* __restrict best_at) {
  for (int64_t i = 0; i < pairs; i++) {
    float b = static_cast<float>(in[2 * i]);
    int32_t b_at = 0;
    Consider(static_cast<float>(in[2 * i + 1]), 1, b, b_at);
    best[i] = b;
    best_at[i] = static_cast<uint8_t>(b_at);
  }
}

// The second half: one row's pairs (`top`, `ow` of them, the next row's right after) against
// the next row's.
template <typename T>
void MaxPoolRowPairs(const float* __restrict top, const uint8_t* __restrict top_at, int64_t ow,
                     T* __restrict out, uint8_t* __restrict where) {
  for (int64_t ox = 0; ox < ow; ox++) {
    float b = top[ox];
    int32_t b_at = top_at[ox];
    Consider(top[ow + ox], 2 + top_at[ow + ox], b, b_at);
    out[ox] = static_cast<T>(b);  // one of the elements, exactly
    where[ox] = static_cast<uint8_t>(b_at);
  }
}

// 2x2 windows over planes of even width (the common case), in two vectorised passes: the pairs
// within each row, then pairs of rows. The row-major rule is kept: within a row the first
// element and between rows the first row win a tie, and the window's last NaN wins.
template <typename T>
void MaxPool2x2Planes(const PlaneShape& s, const T* x, T* out, uint8_t* where) {
  const int64_t oh = s.out_height(), ow = s.out_width();
  const int64_t pairs_per_plane = s.height * ow;  // width == 2 * ow
  // Not ForEachPlane: each task keeps one buffer for the planes it takes.
  at::parallel_for(0, s.planes, kPlanesPerTask, [&](int64_t begin, int64_t end) {
    // One plane's pairs at a time, so they are still in the L1 cache for the second pass.
    std::vector<float> best(static_cast<size_t>(pairs_per_plane));
    std::vector<uint8_t> at(static_cast<size_t>(pairs_per_plane));
    for (int64_t p = begin; p < end; p++) {
      MaxPoolPairs(x + p * pairs_per_plane * 2, pairs_per_plane, best.data(), at.data());
      for (int64_t oy = 0; oy < oh; oy++) {
        const int64_t o = (p * oh + oy) * ow;
        MaxPoolRowPairs(best.data() + 2 * oy * ow, at.data() + 2 * oy * ow, ow, out + o, where + o);
      }
    }
  });
}

// Any other window, read in row-major order with the same rule.
template <typename T>
void MaxPoolPlanes(const PlaneShape& s, const T* x, T* out, uint8_t* where) {
  const int64_t oh = s.out_height(), ow = s.out_width(), k = s.kernel, w = s.width;
  if (k == 2 && w % 2 == 0) {
    MaxPool2x2Planes(s, x, out, where);
    return;
  }
  ForEachPlane(s, [&](int64_t p) {
    const T* in = x + p * s.height * w;
    for (int64_t oy = 0; oy < oh; oy++) {
      for (int64_t ox = 0; ox < ow; ox++) {
        const T* window = in + oy * k * w + ox * k;
        float best = -std::numeric_limits<float>::infinity();
        int32_t best_at = 0;
        for (int64_t dy = 0; dy < k; dy++) {
          for (int64_t dx = 0; dx < k; dx++) {
            Consider(static_cast<float>(window[dy * w + dx]), static_cast<int32_t>(dy * k + dx),
                     best, best_at);
          }
        }
        const int64_t o = (p * oh + oy) * ow + ox;
        out[o] = window[best_at / k * w + best_at % k];
        where[o] = static_cast<uint8_t>(best_at);
      }
    }
  });
}

// Each window's gradient to the element the forward chose, every other element 0. (Writing every
// element of a 2x2 window with selects, vectorised, measured 2.5x slower than this fill and
// scatter.)
template <typename T>
void MaxPoolGradientPlanes(const PlaneShape& s, const uint8_t* where, const T* grad_out,
                           T* grad_in) {
  const int64_t oh = s.out_height(), ow = s.out_width(), k = s.kernel, w = s.width;
  ForEachPlane(s, [&](int64_t p) {
    T* g = grad_in + p * s.height * w;
    const T* go = grad_out + p * oh * ow;
    const uint8_t* at = where + p * oh * ow;
    std::fill(g, g + s.height * w, T(0));
    for (int64_t oy = 0; oy < oh; oy++) {
      for (int64_t ox = 0; ox < ow; ox++) {
        const int64_t chosen = at[oy * ow + ox];
        g[(oy * k + chosen / k) * w + ox * k + chosen % k] = go[oy * ow + ox];
      }
    }
  });
}

// Average pooling as avg_pool2d's CPU kernel has it: each window's elements added in row-major
// order in float, then divided by k*k, so the results are the same bits.
void AvgPoolPlanes(const PlaneShape& s, const float* x, float* out) {
  const int64_t oh = s.out_height(), ow = s.out_width(), k = s.kernel, w = s.width;
  const auto divisor = static_cast<float>(k * k);
  ForEachPlane(s, [&](int64_t p) {
    const float* in = x + p * s.height * w;
    float* o = out + p * oh * ow;
    for (int64_t oy = 0; oy < oh; oy++) {
      for (int64_t ox = 0; ox < ow; ox++) {
        const float* window = in + oy * k * w + ox * k;
        float sum = 0;
        for (int64_t dy = 0; dy < k; dy++) {
          for (int64_t dx = 0; dx < k; dx++) sum += window[dy * w + dx];
        }
        o[oy * ow + ox] = sum / divisor;
      }
    }
  });
}

void AvgPoolGradientPlanes(const PlaneShape& s, const float* grad_out, float* grad_in) {
  const int64_t oh = s.out_height(), ow = s.out_width(), k = s.kernel, w = s.width;
  const auto divisor = static_cast<float>(k * k);
  ForEachPlane(s, [&](int64_t p) {
    float* g = grad_in + p * s.height * w;
    std::fill(g, g + s.height * w, 0.0f);
    const float* go = grad_out + p * oh * ow;
    for (int64_t oy = 0; oy < oh; oy++) {
      for (int64_t ox = 0; ox < ow; ox++) {
        const float share = go[oy * ow + ox] / divisor;
        float* window = g + oy * k * w + ox * k;
        for (int64_t dy = 0; dy < k; dy++) {
          for (int64_t dx = 0; dx < k; dx++) window[dy * w + dx] = share;
        }
      }
    }
  });
}

torch::Tensor PooledLike(const torch::Tensor& x, int64_t kernel) {
  return torch::empty({x.size(0), x.size(1), x.size(2) / kernel, x.size(3) / kernel}, x.options());
}

// The max-pool's values and each window's chosen offset (uint8, the output's shape).
std::pair<torch::Tensor, torch::Tensor> MaxPoolValues(const torch::Tensor& x, int64_t kernel) {
  const PlaneShape s = ShapeOf(x, kernel);
  torch::Tensor out = PooledLike(x, kernel);
  torch::Tensor where = torch::empty(out.sizes(), x.options().dtype(torch::kUInt8));
  if (x.scalar_type() == torch::kFloat) {
    MaxPoolPlanes(s, x.data_ptr<float>(), out.data_ptr<float>(), where.data_ptr<uint8_t>());
  } else {
    MaxPoolPlanes(s, x.data_ptr<c10::BFloat16>(), out.data_ptr<c10::BFloat16>(),
                  where.data_ptr<uint8_t>());
  }
  return {out, where};
}

torch::Tensor AvgPoolValues(const torch::Tensor& x, int64_t kernel) {
  torch::Tensor out = PooledLike(x, kernel);
  AvgPoolPlanes(ShapeOf(x, kernel), x.data_ptr<float>(), out.data_ptr<float>());
  return out;
}

class MaxPoolFunction : public torch::autograd::Function<MaxPoolFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t kernel) {
    auto [best, where] = MaxPoolValues(x, kernel);
    // The chosen offsets, a byte per window, rather than the input: the layer before need not
    // keep its output for the pool's gradient.
    ctx->save_for_backward({where});
    ctx->saved_data["kernel"] = kernel;
    ctx->saved_data["shape"] = x.sizes().vec();
    return best;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    const torch::Tensor where = ctx->get_saved_variables()[0];
    const int64_t kernel = ctx->saved_data["kernel"].toInt();
    const torch::Tensor grad_out = grad_outputs[0].contiguous();
    torch::Tensor grad_in =
        torch::empty(ctx->saved_data["shape"].toIntVector(), grad_out.options());
    const PlaneShape s = ShapeOf(grad_in, kernel);
    if (grad_out.scalar_type() == torch::kFloat) {
      MaxPoolGradientPlanes(s, where.data_ptr<uint8_t>(), grad_out.data_ptr<float>(),
                            grad_in.data_ptr<float>());
    } else {
      MaxPoolGradientPlanes(s, where.data_ptr<uint8_t>(), grad_out.data_ptr<c10::BFloat16>(),
                            grad_in.data_ptr<c10::BFloat16>());
    }
    return {grad_in, torch::Tensor()};
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
    const torch::Tensor grad_out = grad_outputs[0].contiguous();
    torch::Tensor grad_in =
        torch::empty(ctx->saved_data["shape"].toIntVector(), grad_out.options());
    AvgPoolGradientPlanes(ShapeOf(grad_in, kernel), grad_out.data_ptr<float>(),
                          grad_in.data_ptr<float>());
    return {grad_in, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor Pool2dForward(PoolKind kind, const torch::Tensor& x, int64_t kernel) {
  if (!OwnKernelsApply(kind, x, kernel)) return TorchPool(kind, x, kernel);
  const bool needs_grad = torch::GradMode::is_enabled() && x.requires_grad();
  if (kind == PoolKind::kMax) {
    return needs_grad ? MaxPoolFunction::apply(x, kernel) : MaxPoolValues(x, kernel).first;
  }
  return needs_grad ? AvgPoolFunction::apply(x, kernel) : AvgPoolValues(x, kernel);
}

}  // namespace cohort::model
