// Network: a ModelSpec turned into a libtorch module (internal to src/model).
//
// The module owns the optional standardisation of its inputs so a checkpoint carries it: a
// per-feature mean and inverse standard deviation (buffers, saved with the weights).
// forward() takes a float batch of shape (B, *input_shape), already scaled to [0, 1] for
// uint8 data (BatchTensors does that), and returns (B, outputs) raw outputs (logits, or mean
// and raw variance for the Gaussian head).
//
// The modules follow the spec's layers in order, with one exception: an activation that never
// decreases (relu, tanh, sigmoid, elu) right before a max-pool runs after it. Outputs are the
// same, and so are gradients (each window's maximum is the same element either way, except
// where the activation rounds two inputs to one value); a checkpoint's parameter names do not
// change, since neither layer has parameters.
//
// Thread-safety: a torch module; one thread at a time.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "model/spec.h"

namespace cohort::model {

class NetworkImpl : public torch::nn::Module {
 public:
  NetworkImpl(const ModelSpec& spec, const std::vector<int64_t>& input_shape, int64_t outputs,
              bool standardize);
  torch::Tensor forward(torch::Tensor x);

  // Dense layers through oneDNN (model/onednn_linear.h), forward and backward, for float CPU
  // batches outside autocast where a layer's batch x in x out reaches
  // kOneDnnLinearMinMultiplyAdds; off by default. The trainer decides.
  void set_onednn_dense(bool on) { onednn_dense_ = on; }

  // Sets the standardisation statistics (shape = input_shape).
  void SetStandardization(const torch::Tensor& mean, const torch::Tensor& std);

  // What forward() does, for export (export.cc): standardise if standardize(), add a channel
  // axis if add_channel(), then run layers() in order.
  const torch::nn::Sequential& layers() const { return layers_; }
  bool standardize() const { return standardize_; }
  bool add_channel() const { return add_channel_; }
  const torch::Tensor& input_mean() const { return mean_; }
  const torch::Tensor& input_inv_std() const { return inv_std_; }

 private:
  torch::nn::Sequential layers_{nullptr};
  std::vector<int64_t> input_shape_;
  bool add_channel_ = false;  // (H, W) images feed conv/pool layers as (1, H, W)
  bool standardize_ = false;  // without it the buffers stay 0 and 1 and are skipped
  bool onednn_dense_ = false;
  torch::Tensor mean_;     // buffer, input_shape
  torch::Tensor inv_std_;  // buffer, input_shape
};
TORCH_MODULE(Network);

}  // namespace cohort::model
