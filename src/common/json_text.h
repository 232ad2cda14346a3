// JSON values shown in one-line error messages: compact, cut short, and safe for hostile
// input (a value nested thousands deep is described, not dumped recursively).
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace cohort {

// Whether `v` nests deeper than `limit` levels.
bool JsonNestsDeeperThan(const nlohmann::json& v, int limit);

// `v` as compact JSON on one line (invalid UTF-8 replaced), at most `max_chars` characters
// ("..." marks a cut); "a deeply nested array/object" for values nested more than 8 deep.
std::string JsonForMessage(const nlohmann::json& v, size_t max_chars = 60);

}  // namespace cohort
