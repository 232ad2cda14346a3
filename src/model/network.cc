#include "model/network.h"

#include "model/dropout.h"
#include "model/onednn_linear.h"
#include "model/pool.h"
#include "model/precision.h"

namespace cohort::model {

namespace {

torch::nn::AnyModule MakeActivation(Activation a) {
  switch (a) {
    case Activation::kRelu:
      return torch::nn::AnyModule(torch::nn::ReLU());
    case Activation::kGelu:
      return torch::nn::AnyModule(torch::nn::GELU());
    case Activation::kTanh:
      return torch::nn::AnyModule(torch::nn::Tanh());
    case Activation::kSigmoid:
      return torch::nn::AnyModule(torch::nn::Sigmoid());
    case Activation::kElu:
      return torch::nn::AnyModule(torch::nn::ELU());
    case Activation::kSilu:
      return torch::nn::AnyModule(torch::nn::SiLU());
  }
  return torch::nn::AnyModule(torch::nn::ReLU());
}

// Whether max(f(a), f(b)) = f(max(a, b)) for every a, b: f never decreases. GELU and SiLU dip
// below zero left of it, so they do not qualify.
bool NonDecreasing(Activation a) {
  switch (a) {
    case Activation::kRelu:
    case Activation::kTanh:
    case Activation::kSigmoid:
    case Activation::kElu:
      return true;
    case Activation::kGelu:
    case Activation::kSilu:
      return false;
  }
  return false;
}

int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

NetworkImpl::NetworkImpl(const ModelSpec& spec, const std::vector<int64_t>& input_shape,
                         int64_t outputs, bool standardize)
    : input_shape_(input_shape), standardize_(standardize) {
  // Shapes were checked by InferShapes before a Network is built; recompute them here to
  // size each layer.
  auto shapes = InferShapes(spec, input_shape, outputs, "network");
  TORCH_CHECK(shapes.ok(), shapes.status().message());
  layers_ = torch::nn::Sequential();
  std::vector<int64_t> in = input_shape;
  bool image_layers = false;
  for (const auto& l : spec.layers) {
    image_layers = image_layers || l.kind == LayerKind::kConv2d || l.kind == LayerKind::kMaxPool ||
                   l.kind == LayerKind::kAvgPool;
  }
  // (H, W) images feed 2-D layers as one channel: every layer sees (1, H, W) where the
  // shape inference, which works on the data's shape, says (H, W).
  add_channel_ = image_layers && input_shape.size() == 2;
  auto as_seen = [&](const std::vector<int64_t>& shape) {
    return add_channel_ && shape.size() == 2 ? std::vector<int64_t>{1, shape[0], shape[1]} : shape;
  };
  in = as_seen(in);

  for (size_t i = 0; i < spec.layers.size(); i++) {
    const LayerSpec& l = spec.layers[i];
    if (l.kind == LayerKind::kActivation && NonDecreasing(l.activation) &&
        i + 1 < spec.layers.size() && spec.layers[i + 1].kind == LayerKind::kMaxPool) {
      // The max-pool first, then the activation: the same outputs (f commutes with max), and
      // the activation and its gradient touch K*K times fewer values. In a CNN member they were
      // memory-bound passes over the largest activations (docs/models.md has the figures).
      layers_->push_back(Pool2d(PoolKind::kMax, spec.layers[i + 1].kernel));
      layers_->push_back(MakeActivation(l.activation));
      in = as_seen((*shapes)[i + 1]);
      i++;
      continue;
    }
    const std::vector<int64_t>& out = (*shapes)[i];
    switch (l.kind) {
      case LayerKind::kDense:
        if (in.size() > 1) layers_->push_back(torch::nn::Flatten());
        layers_->push_back(torch::nn::Linear(Product(in), l.units));
        break;
      case LayerKind::kConv2d:
        layers_->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(in[0], l.units, l.kernel)
                                                 .stride(l.stride)
                                                 .padding(l.padding)));
        break;
      case LayerKind::kMaxPool:
        layers_->push_back(Pool2d(PoolKind::kMax, l.kernel));
        break;
      case LayerKind::kAvgPool:
        layers_->push_back(Pool2d(PoolKind::kAvg, l.kernel));
        break;
      case LayerKind::kFlatten:
        layers_->push_back(torch::nn::Flatten());
        break;
      case LayerKind::kDropout:
        layers_->push_back(Dropout(l.rate));
        break;
      case LayerKind::kBatchNorm:
        if (in.size() == 3) {
          layers_->push_back(torch::nn::BatchNorm2d(in[0]));
        } else {
          layers_->push_back(torch::nn::BatchNorm1d(in[0]));
        }
        break;
      case LayerKind::kLayerNorm:
        layers_->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions(in)));
        break;
      case LayerKind::kActivation:
        layers_->push_back(MakeActivation(l.activation));
        break;
    }
    in = as_seen(out);
  }
  register_module("layers", layers_);
  mean_ = register_buffer("input_mean", torch::zeros(input_shape));
  inv_std_ = register_buffer("input_inv_std", torch::ones(input_shape));
}

void NetworkImpl::SetStandardization(const torch::Tensor& mean, const torch::Tensor& std) {
  torch::NoGradGuard no_grad;
  mean_.copy_(mean.reshape(input_shape_));
  // A (nearly) constant feature keeps scale 1, as scikit-learn does: dividing by a tiny std
  // would turn any value unseen in training into a huge input.
  torch::Tensor s = std.reshape(input_shape_);
  inv_std_.copy_(torch::where(s < 1e-3, torch::ones_like(s), s.reciprocal()));
}

torch::Tensor NetworkImpl::forward(torch::Tensor x) {
  if (standardize_) x = (x - mean_) * inv_std_;
  if (add_channel_) x = x.unsqueeze(1);
  const bool onednn = onednn_dense_ && x.device().is_cpu() && x.scalar_type() == torch::kFloat &&
                      !AutocastEnabled(torch::kCPU);
  if (!onednn) return layers_->forward(x);
  for (auto& layer : *layers_) {
    const auto* dense = layer.ptr()->as<torch::nn::Linear>();
    const bool through_onednn = dense != nullptr && x.dim() == 2 &&
                                dense->weight.scalar_type() == torch::kFloat &&
                                x.size(0) * dense->weight.numel() >= kOneDnnLinearMinMultiplyAdds;
    x = through_onednn ? OneDnnLinear(x, dense->weight, dense->bias) : layer.forward(x);
  }
  return x;
}

}  // namespace cohort::model
