#include "model/network.h"

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

int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

NetworkImpl::NetworkImpl(const ModelSpec& spec, const std::vector<int64_t>& input_shape,
                         int64_t outputs, double input_scale, bool standardize)
    : input_shape_(input_shape), input_scale_(input_scale), standardize_(standardize) {
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
  add_channel_ = image_layers && input_shape.size() == 2;
  if (add_channel_) in = {1, input_shape[0], input_shape[1]};

  for (size_t i = 0; i < spec.layers.size(); i++) {
    const LayerSpec& l = spec.layers[i];
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
        layers_->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(l.kernel)));
        break;
      case LayerKind::kAvgPool:
        layers_->push_back(torch::nn::AvgPool2d(torch::nn::AvgPool2dOptions(l.kernel)));
        break;
      case LayerKind::kFlatten:
        layers_->push_back(torch::nn::Flatten());
        break;
      case LayerKind::kDropout:
        layers_->push_back(torch::nn::Dropout(torch::nn::DropoutOptions(l.rate)));
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
    in = out;
  }
  register_module("layers", layers_);
  mean_ = register_buffer("input_mean", torch::zeros(input_shape));
  inv_std_ = register_buffer("input_inv_std", torch::ones(input_shape));
}

void NetworkImpl::SetStandardization(const torch::Tensor& mean, const torch::Tensor& std) {
  torch::NoGradGuard no_grad;
  mean_.copy_(mean.reshape(input_shape_));
  inv_std_.copy_(std.reshape(input_shape_).clamp_min(1e-6).reciprocal());
}

torch::Tensor NetworkImpl::forward(torch::Tensor x) {
  if (input_scale_ != 1.0) x = x * input_scale_;
  if (standardize_) x = (x - mean_) * inv_std_;
  if (add_channel_) x = x.unsqueeze(1);
  return layers_->forward(x);
}

}  // namespace cohort::model
