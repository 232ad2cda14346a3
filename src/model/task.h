// What a member learns and how its data is laid out, worked out from a store table without
// libtorch: the task (classification or regression), the loss, shapes, the class count, and
// the seeded row orders (validation split, epoch shuffles) that make training reproducible.
//
// Thread-safety: plain values and pure functions (the RNG is the caller's).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/train_config.h"
#include "store/snapshot.h"

namespace cohort::model {

inline constexpr int kCheckpointVersion = 1;

// What a checkpoint says about its member (the "meta" JSON of the checkpoint archive).
struct MemberMeta {
  std::string member;
  std::string model;          // spec text
  std::string task;           // classification | regression
  std::string loss;           // cross_entropy | mse | gaussian_nll
  std::string feature_dtype;  // uint8 | float32
  std::vector<int64_t> input_shape;
  std::vector<int64_t> target_shape;      // regression: shape of one target
  int64_t classes = 0;                    // classification
  int64_t outputs = 0;                    // width of the network's last layer
  bool standardize = false;               // inputs standardised with stored statistics
  std::string precision = "fp32";         // fp32 | bf16 (TrainConfig::precision)
  std::vector<double> residual_variance;  // mse: per target value, from the training data
  nlohmann::json training = nlohmann::json::object();  // summary of the run that wrote it

  nlohmann::json ToJson() const;
  static Result<MemberMeta> FromJson(const nlohmann::json& j, const std::string& path);
  double input_scale() const { return feature_dtype == "uint8" ? 1.0 / 255.0 : 1.0; }
  int64_t target_size() const;
  bool classification() const { return task == "classification"; }
};

// The meta of a member to be trained on `table` with `config` (everything but the training
// summary). Errors name the member: a table without labels, an unknown loss, a label outside
// [0, classes).
Result<MemberMeta> DescribeTask(const store::Table& table, const TrainConfig& config);

// Checks that `table` can be evaluated by a member described by `meta` (same feature dtype
// and shape; labels of the same kind if `need_labels`).
Status CheckCompatible(const MemberMeta& meta, const store::Table& table, bool need_labels);

// Splits rows 0..n-1 into a training part and a held-out part of round(fraction * n) rows,
// chosen with `rng`; both come back ascending.
void SplitRows(uint64_t n, double fraction, std::mt19937_64& rng, std::vector<uint64_t>* train,
               std::vector<uint64_t>* held_out);

// A uniformly shuffled copy of `rows`, written out (not std::shuffle, whose output differs
// between standard libraries) so a seed means the same order everywhere.
std::vector<uint64_t> Shuffled(const std::vector<uint64_t>& rows, std::mt19937_64& rng);

}  // namespace cohort::model
