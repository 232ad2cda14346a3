// ExportMember(): a checkpoint's network as .npy files plus the list of steps that apply them
// (`cohort export`; python/cohort_ensemble.py is the reader).
#include <fmt/format.h>

#include <filesystem>

#include "model/checkpoint.h"
#include "model/member.h"
#include "model/dropout.h"
#include "model/pool.h"
#include "model/torch_compat.h"
#include "store/host_array.h"
#include "store/import.h"

namespace cohort::model {

namespace {

using nlohmann::json;

// Writes `t` as a float32 .npy named `name` in `dir`; returns the name.
Result<std::string> WriteTensor(const std::string& dir, const std::string& name,
                                const torch::Tensor& t) {
  torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat).contiguous();
  store::HostArray a;
  a.dtype = store::Dtype::kFloat32;
  for (int64_t d : c.sizes()) a.shape.push_back(static_cast<uint64_t>(d));
  a.data.resize(static_cast<size_t>(c.numel()) * sizeof(float));
  std::memcpy(a.data.data(), c.data_ptr<float>(), a.data.size());
  COHORT_RETURN_IF_ERROR(store::WriteNpyFile(dir + "/" + name, a));
  return name;
}

Result<json> LayerStep(const std::string& dir, int index,
                       const std::shared_ptr<torch::nn::Module>& m) {
  const std::string p = fmt::format("layer-{:02d}", index);
  auto tensor = [&](const char* what, const torch::Tensor& t) {
    return WriteTensor(dir, p + "." + what + ".npy", t);
  };
  json step;
  if (auto* l = m->as<torch::nn::Linear>()) {
    step["op"] = "dense";
    COHORT_ASSIGN_OR_RETURN(std::string w, tensor("weight", l->weight));
    COHORT_ASSIGN_OR_RETURN(std::string b, tensor("bias", l->bias));
    step["weight"] = w;
    step["bias"] = b;
  } else if (auto* c = m->as<torch::nn::Conv2d>()) {
    step["op"] = "conv2d";
    COHORT_ASSIGN_OR_RETURN(std::string w, tensor("weight", c->weight));
    COHORT_ASSIGN_OR_RETURN(std::string b, tensor("bias", c->bias));
    step["weight"] = w;
    step["bias"] = b;
    step["stride"] = (*c->options.stride())[0];
    const auto* padding = VariantGetIf<torch::ExpandingArray<2>>(&c->options.padding());
    step["padding"] = padding != nullptr ? (**padding)[0] : 0;
  } else if (auto* pool = m->as<Pool2d>()) {
    step["op"] = pool->kind() == PoolKind::kMax ? "maxpool" : "avgpool";
    step["kernel"] = pool->kernel();
  } else if (m->as<torch::nn::Flatten>() != nullptr) {
    step["op"] = "flatten";
  } else if (m->as<Dropout>() != nullptr) {
    step["op"] = "dropout";  // the identity at inference
  } else if (auto* bn = m->as<torch::nn::BatchNorm1d>()) {
    step["op"] = "batchnorm";
    step["eps"] = bn->options.eps();
    COHORT_ASSIGN_OR_RETURN(step["weight"], tensor("weight", bn->weight));
    COHORT_ASSIGN_OR_RETURN(step["bias"], tensor("bias", bn->bias));
    COHORT_ASSIGN_OR_RETURN(step["running_mean"], tensor("running_mean", bn->running_mean));
    COHORT_ASSIGN_OR_RETURN(step["running_var"], tensor("running_var", bn->running_var));
  } else if (auto* bn2 = m->as<torch::nn::BatchNorm2d>()) {
    step["op"] = "batchnorm";
    step["eps"] = bn2->options.eps();
    COHORT_ASSIGN_OR_RETURN(step["weight"], tensor("weight", bn2->weight));
    COHORT_ASSIGN_OR_RETURN(step["bias"], tensor("bias", bn2->bias));
    COHORT_ASSIGN_OR_RETURN(step["running_mean"], tensor("running_mean", bn2->running_mean));
    COHORT_ASSIGN_OR_RETURN(step["running_var"], tensor("running_var", bn2->running_var));
  } else if (auto* ln = m->as<torch::nn::LayerNorm>()) {
    step["op"] = "layernorm";
    step["eps"] = ln->options.eps();
    step["shape"] = ln->options.normalized_shape();
    COHORT_ASSIGN_OR_RETURN(step["weight"], tensor("weight", ln->weight));
    COHORT_ASSIGN_OR_RETURN(step["bias"], tensor("bias", ln->bias));
  } else if (m->as<torch::nn::ReLU>() != nullptr) {
    step["op"] = "relu";
  } else if (m->as<torch::nn::GELU>() != nullptr) {
    step["op"] = "gelu";
  } else if (m->as<torch::nn::Tanh>() != nullptr) {
    step["op"] = "tanh";
  } else if (m->as<torch::nn::Sigmoid>() != nullptr) {
    step["op"] = "sigmoid";
  } else if (auto* elu = m->as<torch::nn::ELU>()) {
    step["op"] = "elu";
    step["alpha"] = elu->options.alpha();
  } else if (m->as<torch::nn::SiLU>() != nullptr) {
    step["op"] = "silu";
  } else {
    return Status::InvalidArgument("layer " + std::to_string(index) + " (" + m->name() +
                                   ") cannot be exported");
  }
  return step;
}

}  // namespace

Result<json> ExportMember(const std::string& checkpoint, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError(dir + ": " + ec.message());
  COHORT_ASSIGN_OR_RETURN(LoadedCheckpoint member, LoadCheckpoint(checkpoint, torch::kCPU));
  return GuardTorch("export " + checkpoint, [&]() -> Result<json> {
    json out = member.meta.ToJson();
    json input = {{"scale", member.meta.input_scale()},
                  {"add_channel", member.net->add_channel()},
                  {"standardize", member.net->standardize()}};
    if (member.net->standardize()) {
      COHORT_ASSIGN_OR_RETURN(input["mean"],
                              WriteTensor(dir, "input-mean.npy", member.net->input_mean()));
      COHORT_ASSIGN_OR_RETURN(input["inv_std"],
                              WriteTensor(dir, "input-inv-std.npy", member.net->input_inv_std()));
    }
    out["input"] = input;
    json layers = json::array();
    int index = 0;
    for (const auto& m : member.net->layers()->children()) {
      COHORT_ASSIGN_OR_RETURN(json step, LayerStep(dir, index++, m));
      layers.push_back(step);
    }
    out["layers"] = layers;
    return out;
  });
}

}  // namespace cohort::model
