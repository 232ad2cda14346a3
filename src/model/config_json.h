// TrainConfig <-> JSON: how a member's training settings travel in worker commands (and
// come from the loop config). Field names are the TrainConfig field names, both ways read from
// the one table of fields (TrainConfigFields(), train_config.h); nested objects "optimizer",
// "schedule" and "device" hold those structs' fields. Unknown keys are errors
// (they are almost always typos), named with their path: "member m2: config.optimizer.lr:
// unknown field (did you mean learning_rate?)".
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "model/train_config.h"

namespace cohort::model {

// Fields absent from `j` keep their value in `base` (the defaults, or the loop's shared
// member defaults).
Result<TrainConfig> TrainConfigFromJson(const nlohmann::json& j, const TrainConfig& base,
                                        const std::string& member);
nlohmann::json TrainConfigToJson(const TrainConfig& config);

}  // namespace cohort::model
