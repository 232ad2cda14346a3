// TrainConfig <-> JSON: how a member's training settings travel in worker commands (and
// come from the loop config). Field names are the TrainConfig field names; nested tables
// "optimizer", "schedule" and "device" hold those structs' fields. Unknown keys are errors
// (they are almost always typos), named with their path: "member m2: config.optimizer.lr:
// unknown field (did you mean learning_rate?)".
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "model/member.h"

namespace cohort::model {

// Fields absent from `j` keep their value in `base` (the defaults, or the loop's shared
// member defaults).
Result<TrainConfig> TrainConfigFromJson(const nlohmann::json& j, const TrainConfig& base,
                                        const std::string& member);
nlohmann::json TrainConfigToJson(const TrainConfig& config);

}  // namespace cohort::model
