// The worker's command line parsing (docs/protocol.md, "Commands"), torch-free so it can be
// tested and fuzzed without libtorch (fuzz/worker_command_fuzz.cc): one stdin line to the
// command's JSON object, id and op, and a command's fields read with one-line errors that name
// the op and the field. What each op then does lives in worker.cc.
//
// Thread-safety: pure functions; CommandFields reads a command it does not own.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "model/train_config.h"

namespace cohort::worker {

// One command line, parsed. `error` is empty when the line is a well-formed command;
// otherwise it is the message of the error event to answer with ("malformed command: ...",
// "protocol version ... is not supported"), and `id` (null when absent) and `op` ("" until
// known) hold what was read before the fault, for that event.
struct ParsedCommand {
  nlohmann::json command;     // the JSON object
  nlohmann::ordered_json id;  // a string or a number, or null
  std::string op;
  std::string error;
};
ParsedCommand ParseCommandLine(std::string_view line);

// A command's fields, read with one-line errors naming the op and the field.
class CommandFields {
 public:
  CommandFields(const nlohmann::json& cmd, std::string op) : cmd_(cmd), op_(std::move(op)) {}

  Result<std::string> String(const char* key, std::optional<std::string> fallback = {}) const;
  // A non-negative integer, `fallback` when the field is absent.
  Result<uint64_t> Unsigned(const char* key, uint64_t fallback) const;
  // "generation": a non-negative integer, always required.
  Result<uint64_t> Generation() const;
  // {"device": "cuda:0", "threads": 2}, each optional, over the worker's defaults.
  Result<model::DeviceConfig> Device(const model::DeviceConfig& base) const;

 private:
  Status Missing(const char* key) const;
  Status Wrong(const std::string& key, const std::string& want, const nlohmann::json& got) const;

  const nlohmann::json& cmd_;
  std::string op_;
};

}  // namespace cohort::worker
