#include "worker/command.h"

#include <utility>

#include "common/json_text.h"
#include "common/worker_protocol.h"

namespace cohort::worker {

using nlohmann::json;

ParsedCommand ParseCommandLine(std::string_view line) {
  ParsedCommand p;
  if (JsonTextNestsDeeperThan(line, kMaxJsonDepth)) {
    p.error =
        "malformed command: JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return p;
  }
  try {
    p.command = json::parse(line);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number beyond double ("1e400"), which once escaped
    // and made the worker stop serving.
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at ..." -> "parse error at ..."
    if (auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    p.error = "malformed command: " + what;
    return p;
  }
  const json& cmd = p.command;
  if (!cmd.is_object()) {
    p.error = "malformed command: expected a JSON object, got " + JsonForMessage(cmd);
    return p;
  }
  if (auto it = cmd.find("id"); it != cmd.end()) {
    if (it->is_string() || it->is_number()) {
      p.id = nlohmann::ordered_json::parse(it->dump());
    } else if (!it->is_null()) {
      p.error =
          "malformed command: \"id\" must be a string or a number, got " + JsonForMessage(*it);
      return p;
    }
  }
  if (auto it = cmd.find("op"); it == cmd.end()) {
    p.error = "malformed command: missing field \"op\"";
    return p;
  } else if (!it->is_string()) {
    p.error = "malformed command: \"op\" must be a string, got " + JsonForMessage(*it);
    return p;
  } else {
    p.op = it->get<std::string>();
  }
  if (auto it = cmd.find("version"); it != cmd.end() && *it != json(protocol::kVersion)) {
    p.error = "protocol version " + JsonForMessage(*it) + " is not supported (this worker speaks " +
              std::to_string(protocol::kVersion) + ")";
    return p;
  }
  return p;
}

Result<std::string> CommandFields::String(const char* key,
                                          std::optional<std::string> fallback) const {
  auto it = cmd_.find(key);
  if (it == cmd_.end()) {
    if (fallback) return *fallback;
    return Missing(key);
  }
  if (!it->is_string()) return Wrong(key, "a string", *it);
  return it->get<std::string>();
}

Result<uint64_t> CommandFields::Unsigned(const char* key, uint64_t fallback) const {
  auto it = cmd_.find(key);
  if (it == cmd_.end()) return fallback;
  if (!it->is_number_unsigned()) return Wrong(key, "a non-negative integer", *it);
  return it->get<uint64_t>();
}

Result<uint64_t> CommandFields::Generation() const {
  auto it = cmd_.find("generation");
  if (it == cmd_.end()) {
    return Status::InvalidArgument(op_ +
                                   ": missing field \"generation\" (a command names the "
                                   "generation it reads; CURRENT is never implied)");
  }
  if (!it->is_number_unsigned()) return Wrong("generation", "a non-negative integer", *it);
  return it->get<uint64_t>();
}

Result<model::DeviceConfig> CommandFields::Device(const model::DeviceConfig& base) const {
  model::DeviceConfig d = base;
  auto it = cmd_.find("device");
  if (it == cmd_.end()) return d;
  if (!it->is_object()) return Wrong("device", "an object {\"device\", \"threads\"}", *it);
  for (const auto& [key, value] : it->items()) {
    if (key == "device") {
      if (!value.is_string()) return Wrong("device.device", "a string", value);
      d.device = value.get<std::string>();
    } else if (key == "threads") {
      if (!value.is_number_unsigned() || value.get<uint64_t>() < 1 ||
          value.get<uint64_t>() > 4096) {
        return Wrong("device.threads", "an integer from 1 to 4096", value);
      }
      d.threads = static_cast<int>(value.get<uint64_t>());
    } else {
      return Status::InvalidArgument(op_ + ": device." + key + ": unknown field (device, threads)");
    }
  }
  return d;
}

Status CommandFields::Missing(const char* key) const {
  return Status::InvalidArgument(op_ + ": missing field \"" + key + "\"");
}

Status CommandFields::Wrong(const std::string& key, const std::string& want,
                            const json& got) const {
  return Status::InvalidArgument(op_ + ": field \"" + key + "\": expected " + want + ", got " +
                                 JsonForMessage(got));
}

}  // namespace cohort::worker
