#include "common/closest_name.h"

#include <algorithm>
#include <cctype>

namespace cohort {

namespace {

std::string Folded(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    out.push_back(c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

bool Abbreviates(std::string_view key, std::string_view name) {
  if (key.size() < 2 || key.size() >= name.size() || key[0] != name[0]) return false;
  size_t j = 0;
  for (char c : name) {
    if (j < key.size() && key[j] == c) j++;
  }
  return j == key.size();
}

}  // namespace

size_t EditDistance(std::string_view a, std::string_view b) {
  const size_t n = a.size();
  const size_t m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; i++) d[i][0] = i;
  for (size_t j = 0; j <= m; j++) d[0][j] = j;
  for (size_t i = 1; i <= n; i++) {
    for (size_t j = 1; j <= m; j++) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string ClosestName(std::string_view key, const std::vector<std::string>& names) {
  const std::string k = Folded(key);
  const size_t limit = k.size() <= 4 ? 1 : k.size() <= 8 ? 2 : 3;
  std::string best;
  size_t best_distance = limit + 1;
  for (const auto& name : names) {
    size_t d = EditDistance(k, name);
    if (d < best_distance) {
      best_distance = d;
      best = name;
    }
  }
  if (!best.empty()) return best;
  for (const auto& name : names) {
    if (Abbreviates(k, name) && (best.empty() || name.size() < best.size())) best = name;
  }
  return best;
}

}  // namespace cohort
