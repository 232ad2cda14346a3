#include "common/time_text.h"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace cohort {

std::string NowIso8601() {
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

std::optional<double> ParseIso8601(std::string_view text) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0, ms = 0;
  char z = 0;
  const std::string t(text);
  int n = 0;
  if (std::sscanf(t.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s, &n) != 6 ||
      n != 19) {
    return std::nullopt;
  }
  size_t pos = 19;
  if (pos < t.size() && t[pos] == '.') {
    int digits = 0, m = 0;
    for (pos++; pos < t.size() && t[pos] >= '0' && t[pos] <= '9'; pos++, digits++) {
      if (digits < 3) m = m * 10 + (t[pos] - '0');
    }
    if (digits == 0) return std::nullopt;
    for (; digits < 3; digits++) m *= 10;
    ms = m;
  }
  if (pos < t.size()) z = t[pos++];
  if (z != 'Z' || pos != t.size() || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 ||
      s > 60) {
    return std::nullopt;
  }
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  return static_cast<double>(timegm(&tm)) + ms / 1000.0;
}

}  // namespace cohort
