// Wall-clock instants as text, for what people and other programs read back: manifests'
// creation times, the journal's columns.
//
// Thread-safety: pure functions of the clock; safe to call from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cohort {

// The current UTC time with milliseconds: "2024-05-01T12:34:56.789Z". Strings of this form
// sort in time order.
std::string NowIso8601();

// Seconds since the Unix epoch of a time in NowIso8601's form (the milliseconds are optional);
// nullopt for any other text.
std::optional<double> ParseIso8601(std::string_view text);

}  // namespace cohort
