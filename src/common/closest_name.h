// ClosestName: the "did you mean ...?" for an unknown key in a config or command.
//
// A known name is suggested when it is within a small edit distance of the key (optimal
// string alignment: insertions, deletions, substitutions and adjacent transpositions; up to
// 1 edit for keys of 4 characters, 2 up to 8, 3 beyond), or else when the key abbreviates it
// (its letters appear in order, starting with the same one: "lr" for "learning_rate").
// Case and '-' versus '_' are ignored.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace cohort {

// The known name closest to `key`, or "" when none is close enough to be a likely typo.
std::string ClosestName(std::string_view key, const std::vector<std::string>& names);

size_t EditDistance(std::string_view a, std::string_view b);

}  // namespace cohort
