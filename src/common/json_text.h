// JSON from outside: values shown in one-line error messages (compact, cut short, and safe
// for hostile input: a value nested thousands deep is described, not dumped recursively),
// and fields read without trusting their types.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace cohort {

// Whether `v` nests deeper than `limit` levels.
bool JsonNestsDeeperThan(const nlohmann::json& v, int limit);

// `v` as compact JSON on one line (invalid UTF-8 replaced), at most `max_chars` characters
// ("..." marks a cut); "a deeply nested array/object" for values nested more than 8 deep.
std::string JsonForMessage(const nlohmann::json& v, size_t max_chars = 60);

// Field `key` of `j` (a worker's event, a script's metrics, a journal column): a missing key,
// a value of another type, or a `j` that is not an object reads as absent. Never throws,
// unlike nlohmann's value(), which throws on a type mismatch.
std::optional<double> JsonNumberField(const nlohmann::json& j, const char* key);
std::string JsonStringField(const nlohmann::json& j, const char* key,
                            const std::string& fallback = "");

}  // namespace cohort
