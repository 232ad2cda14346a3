// Wall-clock instants as text, for what people and other programs read back: manifests'
// creation times, the journal's columns.
//
// Thread-safety: pure functions of the clock; safe to call from any thread.
#pragma once

#include <string>

namespace cohort {

// The current UTC time with milliseconds: "2024-05-01T12:34:56.789Z". Strings of this form
// sort in time order.
std::string NowIso8601();

}  // namespace cohort
