#include "common/json_text.h"

namespace cohort {

bool JsonTextNestsDeeperThan(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); i++) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        i++;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      depth--;
    }
  }
  return false;
}

Result<nlohmann::json> ParseJsonBounded(std::string_view text, int max_depth) {
  if (JsonTextNestsDeeperThan(text, max_depth)) {
    return Status::InvalidArgument("JSON nested deeper than " + std::to_string(max_depth) +
                                   " levels");
  }
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("not valid JSON");
  return j;
}

bool JsonNestsDeeperThan(const nlohmann::json& v, int limit) {
  if (!v.is_structured()) return false;
  if (limit == 0) return true;
  for (const auto& e : v) {
    if (JsonNestsDeeperThan(e, limit - 1)) return true;
  }
  return false;
}

std::string JsonForMessage(const nlohmann::json& v, size_t max_chars) {
  if (JsonNestsDeeperThan(v, 8)) {
    return v.is_array() ? "a deeply nested array" : "a deeply nested object";
  }
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  if (s.size() > max_chars && max_chars > 3) s = s.substr(0, max_chars - 3) + "...";
  return s;
}

std::optional<double> JsonNumberField(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string JsonStringField(const nlohmann::json& j, const char* key, const std::string& fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

namespace {
[[noreturn]] void ThrowNotAnInteger(const nlohmann::json& v, const std::string& range) {
  throw nlohmann::json::type_error::create(
      302, JsonForMessage(v) + " is not an integer in " + range, nullptr);
}
}  // namespace

uint64_t JsonUint(const nlohmann::json& v, uint64_t max) {
  const bool fits = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
  if (!fits || v.get<uint64_t>() > max) {
    ThrowNotAnInteger(v, "[0, " + std::to_string(max) + "]");
  }
  return v.get<uint64_t>();
}

int64_t JsonInt(const nlohmann::json& v, int64_t min, int64_t max) {
  const bool is_int =
      v.is_number_integer() &&
      (!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX));
  if (!is_int || v.get<int64_t>() < min || v.get<int64_t>() > max) {
    ThrowNotAnInteger(v, "[" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v.get<int64_t>();
}

std::vector<uint64_t> JsonUintArray(const nlohmann::json& v, uint64_t max) {
  if (!v.is_array()) {
    throw nlohmann::json::type_error::create(302, JsonForMessage(v) + " is not an array", nullptr);
  }
  std::vector<uint64_t> out;
  out.reserve(v.size());
  for (const auto& e : v) out.push_back(JsonUint(e, max));
  return out;
}

std::vector<int64_t> JsonIntArray(const nlohmann::json& v, int64_t min, int64_t max) {
  if (!v.is_array()) {
    throw nlohmann::json::type_error::create(302, JsonForMessage(v) + " is not an array", nullptr);
  }
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (const auto& e : v) out.push_back(JsonInt(e, min, max));
  return out;
}

}  // namespace cohort
