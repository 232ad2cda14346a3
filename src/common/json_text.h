// JSON from outside: values shown in one-line error messages (compact, cut short, and safe
// for hostile input: a value nested thousands deep is described, not dumped recursively),
// and fields read without trusting their types.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace cohort {

// How deep JSON from outside (a member's events, a worker's commands) may nest. nlohmann's
// parser is iterative, but copying, dumping and comparing a value recurse once per level:
// a line nested 300,000 deep overflows the stack. Nothing cohort exchanges nests beyond a
// handful of levels.
inline constexpr int kMaxJsonDepth = 64;

// Whether JSON text opens more than `limit` arrays/objects inside one another (brackets in
// strings are skipped). Linear, iterative: safe for any input.
bool JsonTextNestsDeeperThan(std::string_view text, int limit);

// Parses JSON from outside without exceptions: InvalidArgument "JSON nested deeper than N
// levels" (checked on the text, before anything is built) or "not valid JSON: ...". The one
// way untrusted JSON text becomes a value.
Result<nlohmann::json> ParseJsonBounded(std::string_view text, int max_depth = kMaxJsonDepth);

// Whether `v` nests deeper than `limit` levels (recursion at most `limit` deep).
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

// Integers read from files cohort wrote (manifests, checkpoint metadata) that may have been
// damaged: `v` must be a JSON integer (not a float, not a string) within [min, max], else
// these throw nlohmann's type_error 302 ("... is not an integer in [0, 4294967295]"), for
// parsers that already turn json::exception into a Corruption status. nlohmann's own
// get<uint32_t>() converts 3.4e19 with a float-to-integer cast (undefined behaviour) and
// wraps -1 to 2^64-1.
uint64_t JsonUint(const nlohmann::json& v, uint64_t max = std::numeric_limits<uint64_t>::max());
int64_t JsonInt(const nlohmann::json& v, int64_t min = std::numeric_limits<int64_t>::min(),
                int64_t max = std::numeric_limits<int64_t>::max());
// An array of such integers.
std::vector<uint64_t> JsonUintArray(const nlohmann::json& v,
                                    uint64_t max = std::numeric_limits<uint64_t>::max());
std::vector<int64_t> JsonIntArray(const nlohmann::json& v,
                                  int64_t min = std::numeric_limits<int64_t>::min(),
                                  int64_t max = std::numeric_limits<int64_t>::max());

}  // namespace cohort
