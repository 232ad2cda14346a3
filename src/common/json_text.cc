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

}  // namespace cohort
