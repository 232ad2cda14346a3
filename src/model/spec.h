// Model specs: the Keras-like layer list a member is built from, parsed and shape-checked
// without libtorch.
//
// Text form (the loop config and `cohort train --model`): layers separated by commas, each a
// name and its arguments separated by spaces; an activation may follow a layer inside the
// same item ("dense 256 relu") or stand alone ("relu"):
//   dense N | conv2d F K [stride] [padding] | maxpool K | avgpool K | flatten | dropout P |
//   batchnorm | layernorm | relu | gelu | tanh | sigmoid | elu | silu
// The last layer must be `dense`; its width is the model's output (the class count, or the
// regression target size, doubled for the Gaussian NLL head's variance). `conv2d` and pooling
// need a (C, H, W) or (H, W) input (the latter gets one channel); `dense` flattens a
// multi-dimensional input implicitly, as Keras's Flatten would be needed for.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace cohort::model {

enum class LayerKind {
  kDense,
  kConv2d,
  kMaxPool,
  kAvgPool,
  kFlatten,
  kDropout,
  kBatchNorm,
  kLayerNorm,
  kActivation,
};

enum class Activation { kRelu, kGelu, kTanh, kSigmoid, kElu, kSilu };

struct LayerSpec {
  LayerKind kind = LayerKind::kDense;
  int64_t units = 0;                          // dense: output width; conv2d: filters
  int64_t kernel = 0;                         // conv2d, pools
  int64_t stride = 1;                         // conv2d (pools use stride = kernel)
  int64_t padding = 0;                        // conv2d
  double rate = 0;                            // dropout probability
  Activation activation = Activation::kRelu;  // kActivation
  std::string text;                           // the item as written, for messages ("conv2d 32 3")
  int index = 0;                              // 1-based position in the spec, for messages
};

struct ModelSpec {
  std::vector<LayerSpec> layers;
  std::string text;  // the whole spec as given
};

// Parses the text form. Errors name `member` and the layer: "member m3: layer 2 'dense x':
// 'x' is not a positive integer".
Result<ModelSpec> ParseModelSpec(const std::string& text, const std::string& member);

// The shape after each layer for a sample of `input_shape` (no batch dimension), and checks
// that the spec fits: kernels not larger than their input, a final dense of `outputs` units,
// 2-D layers given an image. Errors name the member and the layer.
Result<std::vector<std::vector<int64_t>>> InferShapes(const ModelSpec& spec,
                                                      const std::vector<int64_t>& input_shape,
                                                      int64_t outputs, const std::string& member);

// Number of trainable parameters of the spec on that input (for messages and reports).
Result<int64_t> CountParameters(const ModelSpec& spec, const std::vector<int64_t>& input_shape,
                                int64_t outputs, const std::string& member);

const char* ActivationName(Activation a);

}  // namespace cohort::model
