#include "model/config_json.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "common/closest_name.h"
#include "common/json_text.h"

namespace cohort::model {

namespace {

using nlohmann::json;

// Reads one JSON object into a struct, field by field; the first problem wins.
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string path, const std::string& member, Status* status)
      : j_(j), path_(std::move(path)), member_(member), status_(status) {
    if (status_->ok() && !j_.is_object()) {
      Fail(path_, "expected an object, got " + JsonForMessage(j_));
    }
  }

  void Read(const std::string& key, std::string* out) {
    Field(key, [&](const json& v, const std::string& path) {
      if (!v.is_string()) return Fail(path, "expected a string, got " + JsonForMessage(v));
      *out = v.get<std::string>();
    });
  }

  void Read(const std::string& key, double* out) {
    Field(key, [&](const json& v, const std::string& path) {
      if (!v.is_number()) return Fail(path, "expected a number, got " + JsonForMessage(v));
      *out = v.get<double>();
    });
  }

  void Read(const std::string& key, bool* out) {
    Field(key, [&](const json& v, const std::string& path) {
      if (!v.is_boolean()) return Fail(path, "expected true or false, got " + JsonForMessage(v));
      *out = v.get<bool>();
    });
  }

  template <typename Int>
  void Read(const std::string& key, Int* out) {
    Field(key, [&](const json& v, const std::string& path) {
      const char* what = std::is_signed_v<Int> ? "an integer" : "a non-negative integer";
      // 10.0 is accepted as 10 (some writers only have doubles); 2.5 is not.
      if (v.is_number_unsigned()) {
        uint64_t x = v.get<uint64_t>();
        if (x > static_cast<uint64_t>(std::numeric_limits<Int>::max())) {
          return Fail(path, std::string("expected ") + what + ", got " + JsonForMessage(v) +
                                " (out of range)");
        }
        *out = static_cast<Int>(x);
      } else if (v.is_number_integer()) {
        int64_t x = v.get<int64_t>();
        if (x < static_cast<int64_t>(std::numeric_limits<Int>::min()) ||
            (std::is_signed_v<Int> && x > static_cast<int64_t>(std::numeric_limits<Int>::max()))) {
          return Fail(path, std::string("expected ") + what + ", got " + JsonForMessage(v));
        }
        *out = static_cast<Int>(x);
      } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
                 v.get<double>() >= static_cast<double>(std::numeric_limits<Int>::min()) &&
                 v.get<double>() < static_cast<double>(std::numeric_limits<Int>::max())) {
        *out = static_cast<Int>(v.get<double>());
      } else {
        return Fail(path, std::string("expected ") + what + ", got " + JsonForMessage(v));
      }
    });
  }

  // A nested object: `fill` reads its fields with a reader of its own.
  template <typename Fill>
  void Object(const std::string& key, Fill fill) {
    known_.emplace_back(key);
    static const json kEmpty = json::object();
    auto it = j_.is_object() ? j_.find(key) : j_.end();
    const bool present = it != j_.end();
    ObjectReader inner(present ? *it : kEmpty, path_ + "." + key, member_, status_);
    fill(inner);
    if (present) inner.Finish();
    nested_.emplace_back(key, std::move(inner.known_));
  }

  // Reports the first key no reader asked for, with the closest known name: one of this
  // object's, or else one of a nested object's ("lr" at the top: optimizer.learning_rate).
  void Finish() {
    if (!status_->ok()) return;
    for (const auto& [key, value] : j_.items()) {
      if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
      std::string suggestion = ClosestName(key, known_);
      for (size_t i = 0; suggestion.empty() && i < nested_.size(); i++) {
        std::string inner = ClosestName(key, nested_[i].second);
        if (!inner.empty()) suggestion = nested_[i].first + "." + inner;
      }
      std::string message = "unknown field";
      if (!suggestion.empty()) message += " (did you mean " + suggestion + "?)";
      Fail(path_ + "." + key, message);
      return;
    }
  }

 private:
  template <typename ReadValue>
  void Field(const std::string& key, ReadValue read) {
    known_.emplace_back(key);
    if (!status_->ok() || !j_.is_object()) return;
    auto it = j_.find(key);
    if (it == j_.end()) return;
    read(*it, path_ + "." + key);
  }

  void Fail(const std::string& path, const std::string& message) {
    if (status_->ok())
      *status_ = Status::InvalidArgument("member " + member_ + ": " + path + ": " + message);
  }

  const json& j_;
  std::string path_;
  const std::string& member_;
  Status* status_;
  std::vector<std::string> known_;
  std::vector<std::pair<std::string, std::vector<std::string>>> nested_;
};

// Reads the table's fields under `prefix` ("" for the top level, "optimizer." for that
// struct) from `r`'s object, in table order; a nested struct is read as an object where its
// first field comes in the table.
void ReadFields(ObjectReader& r, const std::string& prefix, TrainConfig* config) {
  std::vector<std::string> groups_read;
  for (const TrainConfigField& f : TrainConfigFields()) {
    if (f.path.rfind(prefix, 0) != 0) continue;
    const std::string rest = f.path.substr(prefix.size());
    const size_t dot = rest.find('.');
    if (dot == std::string::npos) {
      std::visit([&](auto* out) { r.Read(rest, out); }, f.field(*config));
      continue;
    }
    const std::string group = rest.substr(0, dot);
    if (std::find(groups_read.begin(), groups_read.end(), group) != groups_read.end()) continue;
    groups_read.push_back(group);
    r.Object(group, [&](ObjectReader& inner) { ReadFields(inner, prefix + group + ".", config); });
  }
}

}  // namespace

Result<TrainConfig> TrainConfigFromJson(const nlohmann::json& j, const TrainConfig& base,
                                        const std::string& member) {
  // Errors name the member the caller says this is; failing that, the one the JSON names.
  std::string name = member;
  if (name.empty()) {
    auto it = j.is_object() ? j.find("member") : j.end();
    name =
        (j.is_object() && it != j.end() && it->is_string()) ? it->get<std::string>() : base.member;
  }
  TrainConfig c = base;
  Status status;
  ObjectReader r(j, "config", name, &status);
  ReadFields(r, "", &c);
  r.Finish();
  if (!status.ok()) return status;
  return c;
}

nlohmann::json TrainConfigToJson(const TrainConfig& config) {
  TrainConfig copy = config;  // the table hands out pointers into a config it may write
  json j = json::object();
  for (const TrainConfigField& f : TrainConfigFields()) {
    json* object = &j;
    std::string rest = f.path;
    for (size_t dot; (dot = rest.find('.')) != std::string::npos; rest = rest.substr(dot + 1)) {
      object = &(*object)[rest.substr(0, dot)];
    }
    std::visit([&](const auto* value) { (*object)[rest] = *value; }, f.field(copy));
  }
  return j;
}

}  // namespace cohort::model
