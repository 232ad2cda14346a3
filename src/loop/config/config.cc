#include "loop/config/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <toml.hpp>
#include <tuple>
#include <utility>

#include "common/closest_name.h"
#include "loop/acquire/strategy.h"
#include "loop/ensemble/regression.h"
#include "model/config_json.h"
#include "model/spec.h"

namespace cohort::loop {

namespace {

// The largest number of seconds a timeout may be: beyond it a typo, not a plan.
constexpr double kMaxSeconds = 1e7;

namespace fs = std::filesystem;
using nlohmann::json;
using TV = toml::basic_value<toml::discard_comments, std::map, std::vector>;

// ---------------------------------------------------------------------------------------------
// TOML values.

int LineOf(const TV& v) { return static_cast<int>(v.location().line()); }

// TOML -> JSON. Dates and times have no JSON form: *bad receives the first one met.
json ToJson(const TV& v, const TV** bad) {
  switch (v.type()) {
    case toml::value_t::boolean:
      return v.as_boolean();
    case toml::value_t::integer:
      return static_cast<int64_t>(v.as_integer());
    case toml::value_t::floating:
      return static_cast<double>(v.as_floating());
    case toml::value_t::string:
      return v.as_string().str;
    case toml::value_t::array: {
      json a = json::array();
      for (const auto& e : v.as_array()) a.push_back(ToJson(e, bad));
      return a;
    }
    case toml::value_t::table: {
      json o = json::object();
      for (const auto& [k, e] : v.as_table()) o[k] = ToJson(e, bad);
      return o;
    }
    default:
      if (*bad == nullptr) *bad = &v;
      return nullptr;
  }
}

std::string Shown(const TV& v) {
  if (v.is_table()) return "a table";
  if (v.is_array()) return "an array";
  const TV* bad = nullptr;
  json j = ToJson(v, &bad);
  if (bad != nullptr) return "a date or time";
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// The line of the value at `path` inside `table`, 0 when absent.
int LineAt(const TV* table, const std::vector<std::string>& path) {
  const TV* v = table;
  for (const auto& key : path) {
    if (v == nullptr || !v->is_table()) return 0;
    auto it = v->as_table().find(key);
    if (it == v->as_table().end()) return 0;
    v = &it->second;
  }
  return v == nullptr ? 0 : LineOf(*v);
}

std::vector<std::string> SplitPath(const std::string& path) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : path) {
    if (c == '.') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Errors: the first one wins.

struct Errors {
  std::string file;
  Status status;

  bool ok() const { return status.ok(); }
  void Fail(int line, const std::string& field, const std::string& message) {
    if (!status.ok()) return;
    status = Status::InvalidArgument(file + ":" + std::to_string(std::max(line, 1)) + ": " + field +
                                     ": " + message);
  }
};

// Reads one TOML table's fields. Unknown keys are reported when the reader is made, before
// any field, since a misspelt key otherwise shows up as a confusing "missing" error.
class Reader {
 public:
  // `table` may be null (the table is absent: every field keeps its default). `prefix` names
  // the table in errors ("acquisition."), `line` is where it starts.
  Reader(Errors* errors, const TV* table, std::string prefix, int line,
         const std::vector<std::string>& known)
      : errors_(errors), table_(table), prefix_(std::move(prefix)), line_(line) {
    if (table_ == nullptr || known.empty()) return;  // empty: the caller checks the keys
    for (const auto& [key, value] : table_->as_table()) {
      if (std::find(known.begin(), known.end(), key) != known.end()) continue;
      std::string suggestion = ClosestName(key, known);
      errors_->Fail(
          LineOf(value), prefix_ + key,
          "unknown field" + (suggestion.empty() ? "" : " (did you mean " + suggestion + "?)"));
      return;
    }
  }

  bool ok() const { return errors_->ok(); }
  int line() const { return line_; }
  std::string Field(const std::string& key) const { return prefix_ + key; }
  int KeyLine(const std::string& key) const {
    const TV* v = Get(key);
    return v == nullptr ? line_ : LineOf(*v);
  }
  const TV* Get(const std::string& key) const {
    if (table_ == nullptr) return nullptr;
    auto it = table_->as_table().find(key);
    return it == table_->as_table().end() ? nullptr : &it->second;
  }
  void Fail(const std::string& key, const std::string& message) {
    errors_->Fail(KeyLine(key), Field(key), message);
  }
  void Missing(const std::string& key, const std::string& what) {
    errors_->Fail(line_, Field(key), "missing (" + what + ")");
  }

  // Each returns true when the key is present and well typed (and *out was set).
  bool String(const std::string& key, std::string* out) {
    const TV* v = Get(key);
    if (v == nullptr || !ok()) return false;
    if (!v->is_string()) return Wrong(key, *v, "a string");
    *out = v->as_string().str;
    return true;
  }
  bool Bool(const std::string& key, bool* out) {
    const TV* v = Get(key);
    if (v == nullptr || !ok()) return false;
    if (!v->is_boolean()) return Wrong(key, *v, "true or false");
    *out = v->as_boolean();
    return true;
  }
  bool Int(const std::string& key, int64_t* out, int64_t min) {
    const TV* v = Get(key);
    if (v == nullptr || !ok()) return false;
    if (!v->is_integer()) return Wrong(key, *v, "an integer");
    if (v->as_integer() < min) {
      return Wrong(key, *v, min == 0 ? "an integer >= 0" : "an integer >= " + std::to_string(min));
    }
    *out = v->as_integer();
    return true;
  }
  bool Number(const std::string& key, double* out) {
    const TV* v = Get(key);
    if (v == nullptr || !ok()) return false;
    if (v->is_integer()) {
      *out = static_cast<double>(v->as_integer());
    } else if (v->is_floating()) {
      *out = v->as_floating();
    } else {
      return Wrong(key, *v, "a number");
    }
    return true;
  }
  const TV* Table(const std::string& key) {
    const TV* v = Get(key);
    if (v == nullptr || !ok()) return nullptr;
    if (!v->is_table()) {
      Wrong(key, *v, "a table");
      return nullptr;
    }
    return v;
  }

 private:
  bool Wrong(const std::string& key, const TV& v, const std::string& expected) {
    Fail(key, "expected " + expected + ", got " + Shown(v));
    return false;
  }

  Errors* errors_;
  const TV* table_;
  std::string prefix_;
  int line_;
};

bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 100 || s[0] == '.' || s[0] == '-') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}
constexpr const char* kNameRule =
    "use letters, digits, '_', '-' and '.', not starting with '.' or '-'";

std::string Resolve(const fs::path& base, const std::string& p) {
  fs::path path(p);
  if (path.is_relative()) path = base / path;
  return path.lexically_normal().string();
}

// Member settings -------------------------------------------------------------------------------

// The TrainConfig field names at the top level ("optimizer" for "optimizer.name"), from its
// table of fields.
const std::vector<std::string>& TrainKeys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const model::TrainConfigField& f : model::TrainConfigFields()) {
      std::string key = f.path.substr(0, f.path.find('.'));
      if (std::find(k.begin(), k.end(), key) == k.end()) k.push_back(std::move(key));
    }
    return k;
  }();
  return keys;
}

// Set by the loop, never by the config.
const std::map<std::string, std::string>& ReservedTrainKeys() {
  static const std::map<std::string, std::string> keys = {
      {"member", "set by the loop; use name"},
      {"warm_start_from", "set by the loop; use warm_start = true"},
      {"device", "set by the loop from devices and threads_per_cpu_device"},
  };
  return keys;
}

// Where a member setting comes from, for messages: the member's table, else [defaults].
struct SettingSource {
  const TV* member = nullptr;  // null for [defaults] itself
  std::string member_prefix;   // "member[2]."
  int member_line = 0;
  const TV* defaults = nullptr;
  int defaults_line = 0;

  // The line and field for a TrainConfig path ("optimizer.learning_rate").
  std::pair<int, std::string> Locate(const std::string& path) const {
    auto parts = SplitPath(path);
    if (member != nullptr) {
      if (int line = LineAt(member, parts)) return {line, member_prefix + path};
      if (int line = LineAt(defaults, parts)) return {line, "defaults." + path};
      return {member_line, member_prefix + path};
    }
    int line = LineAt(defaults, parts);
    return {line ? line : defaults_line, "defaults." + path};
  }
};

// An argv list ("command = [...]"): non-empty strings; a program containing '/' is made
// absolute against `base`. False (with the error recorded) when malformed.
bool ReadArgv(Errors* errors, const TV& value, const std::string& field, const fs::path& base,
              std::vector<std::string>* argv) {
  if (!value.is_array() || value.as_array().empty()) {
    errors->Fail(LineOf(value), field,
                 "expected a non-empty list of strings (argv), got " + Shown(value));
    return false;
  }
  for (const auto& arg : value.as_array()) {
    if (!arg.is_string()) {
      errors->Fail(LineOf(arg), field, "expected strings, got " + Shown(arg));
      return false;
    }
    argv->push_back(arg.as_string().str);
  }
  if ((*argv)[0].empty()) {
    errors->Fail(LineOf(value), field, "the program is empty");
    return false;
  }
  if ((*argv)[0].find('/') != std::string::npos) (*argv)[0] = Resolve(base, (*argv)[0]);
  return true;
}

// A misspelt loop key ("nmae" for name) in a [defaults] or [[member]] table. Other unknown
// keys are left to TrainConfigFromJson, which also suggests nested fields ("lr":
// optimizer.learning_rate).
bool CheckLoopKeyTypos(Errors* errors, const TV& table, const std::vector<std::string>& loop_keys,
                       const std::string& prefix) {
  const auto& train_keys = TrainKeys();
  for (const auto& [key, value] : table.as_table()) {
    if (std::find(loop_keys.begin(), loop_keys.end(), key) != loop_keys.end()) continue;
    if (std::find(train_keys.begin(), train_keys.end(), key) != train_keys.end()) continue;
    std::string suggestion = ClosestName(key, loop_keys);
    if (!suggestion.empty()) {
      errors->Fail(LineOf(value), prefix + key, "unknown field (did you mean " + suggestion + "?)");
      return false;
    }
  }
  return true;
}

// Reads a [defaults] or [[member]] table's TrainConfig fields onto `base`. `loop_keys` are
// the loop's own keys allowed in the table (read by the caller).
bool ReadTrainSettings(Errors* errors, const TV& table, const std::vector<std::string>& loop_keys,
                       const SettingSource& where, const std::string& member_name,
                       model::TrainConfig* config) {
  const std::string prefix = where.member != nullptr ? where.member_prefix : "defaults.";
  if (!CheckLoopKeyTypos(errors, table, loop_keys, prefix)) return false;
  json j = json::object();
  for (const auto& [key, value] : table.as_table()) {
    if (std::find(loop_keys.begin(), loop_keys.end(), key) != loop_keys.end()) continue;
    auto reserved = ReservedTrainKeys().find(key);
    if (reserved != ReservedTrainKeys().end()) {
      errors->Fail(LineOf(value), prefix + key, reserved->second);
      return false;
    }
    const TV* bad = nullptr;
    j[key] = ToJson(value, &bad);
    if (bad != nullptr) {
      errors->Fail(LineOf(*bad), prefix + key, "dates and times are not accepted here");
      return false;
    }
  }
  auto parsed = model::TrainConfigFromJson(j, *config, member_name);
  if (!parsed.ok()) {
    // "member NAME: config.optimizer.lr: unknown field (...)" -> field and line.
    std::string message = parsed.status().message();
    const std::string head = "member " + member_name + ": ";
    if (message.rfind(head, 0) == 0) message = message.substr(head.size());
    std::string path;
    if (message.rfind("config.", 0) == 0) {
      size_t colon = message.find(": ");
      path = message.substr(7, colon == std::string::npos ? std::string::npos : colon - 7);
      message = colon == std::string::npos ? "invalid" : message.substr(colon + 2);
    }
    auto parts = SplitPath(path);
    int line = path.empty() ? 0 : LineAt(&table, parts);
    if (line == 0) line = LineOf(table);
    errors->Fail(line, prefix + (path.empty() ? std::string("settings") : path), message);
    return false;
  }
  *config = std::move(parsed).value();
  return true;
}

// Checks of values TrainConfigFromJson takes as typed: the table's rules, which Train would
// apply only after the run started.
void CheckTrainValues(Errors* errors, const model::TrainConfig& c, const SettingSource& where) {
  if (auto problem = model::CheckTrainConfig(c)) {
    auto [line, field] = where.Locate(problem->path);
    errors->Fail(line, field, problem->message);
  }
}

// Checks a spec's text; shapes need the store and are checked by the controller.
void CheckModel(Errors* errors, const std::string& text, const std::string& member, int line,
                const std::string& field) {
  auto spec = model::ParseModelSpec(text, member);
  if (spec.ok()) return;
  std::string message = spec.status().message();
  const std::string head = "member " + member + ": ";
  if (message.rfind(head, 0) == 0) message = message.substr(head.size());
  errors->Fail(line, field, message);
}

// Joins names for a message: "a, b, c".
std::string NameList(const std::vector<std::string>& names) {
  std::string list;
  for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
  return list;
}

// The ensemble test metrics a stop target can name: those the loop computes every round
// (ClassificationMetrics in ensemble_metrics.h, RegressionMetrics in regression.h), and which
// way is better.
struct TargetMetricRule {
  const char* name;
  bool higher_is_better;
};
constexpr TargetMetricRule kTargetMetrics[] = {
    {"accuracy", true},
    {"nll", false},
    {"brier", false},
    {"ece", false},
    {"rmse", false},
    {"mae", false},
    {"calibration_error", false},
};

std::vector<std::string> TargetMetricNames() {
  std::vector<std::string> names;
  for (const auto& m : kTargetMetrics) names.emplace_back(m.name);
  return names;
}

// The whole parse ------------------------------------------------------------------------------
// One step per part of the file, in file order; the first error wins, so each step may run
// after an earlier one failed and must only add nothing then.

void ParseRun(Reader& r, const fs::path& base, LoopConfig* c) {
  if (!r.String("name", &c->name) && r.ok()) r.Missing("name", "the run's name");
  if (r.ok() && !ValidName(c->name)) {
    r.Fail("name", "'" + c->name + "' is not a valid run name: " + kNameRule);
  }
  std::string run_dir;
  if (r.String("run_dir", &run_dir)) {
    if (run_dir.empty()) r.Fail("run_dir", "must not be empty");
    c->run_dir = Resolve(base, run_dir);
  } else if (r.ok()) {
    c->run_dir = Resolve(base, "runs/" + c->name);
  }
}

void ParseStore(Errors* e, Reader& r, const fs::path& base, StoreConfig* store) {
  const TV* t = r.Table("store");
  if (t == nullptr && r.ok()) r.Missing("store", "a [store] table with source");
  Reader s(e, t, "store.", t ? LineOf(*t) : 1, {"source", "generation", "train", "pool", "test"});
  std::string source;
  if (s.String("source", &source)) {
    if (source.empty()) s.Fail("source", "must not be empty");
    store->source = Resolve(base, source);
  } else if (s.ok()) {
    s.Missing("source", "the store the run clones");
  }
  int64_t generation = 0;
  if (s.Int("generation", &generation, 1)) {
    store->source_generation = static_cast<uint64_t>(generation);
  }
  for (auto [key, out] : {std::pair{"train", &store->train}, std::pair{"pool", &store->pool},
                          std::pair{"test", &store->test}}) {
    if (s.String(key, out) && out->empty()) s.Fail(key, "must not be empty");
  }
  if (s.ok()) {
    std::set<std::string> names = {store->train, store->pool, store->test};
    if (names.size() != 3) {
      s.Fail(s.Get("test")   ? "test"
             : s.Get("pool") ? "pool"
                             : "train",
             "the train, pool and test tables must be three different tables");
    }
  }
}

// `devices` and how workers use them: threads_per_cpu_device, members_per_device, launcher.
void ParseDevices(Errors* e, Reader& r, LoopConfig* c) {
  std::string launcher;
  if (r.String("launcher", &launcher)) {
    if (launcher == "local") {
      c->launcher = Launcher::kLocal;
    } else if (launcher == "slurm") {
      c->launcher = Launcher::kSlurm;
    } else {
      r.Fail("launcher", "unknown launcher '" + launcher + "' (local, slurm)");
    }
  }
  if (c->launcher == Launcher::kSlurm) {
    // Slurm places the steps: the slots come from the allocation, or slurm.slots outside one.
    const TV* d = r.Get("devices");
    if (d != nullptr && !(d->is_string() && d->as_string().str == "auto")) {
      r.Fail("devices",
             "with launcher = \"slurm\" devices must be \"auto\" (Slurm places "
             "the steps; set slurm.slots to run outside an allocation)");
    }
    c->devices_auto = true;
  } else if (const TV* d = r.Get("devices"); d != nullptr && r.ok()) {
    if (d->is_string()) {
      if (d->as_string().str != "auto") {
        r.Fail("devices",
               "expected \"auto\" or a list like [\"cpu:0\", \"cpu:1\"], got " + Shown(*d));
      }
      c->devices_auto = true;
    } else if (d->is_array()) {
      const auto& a = d->as_array();
      if (a.empty()) r.Fail("devices", "the list is empty");
      for (size_t i = 0; i < a.size() && r.ok(); i++) {
        const std::string field = "devices[" + std::to_string(i + 1) + "]";
        if (!a[i].is_string()) {
          e->Fail(LineOf(a[i]), field, "expected a string like \"cpu:0\", got " + Shown(a[i]));
          break;
        }
        auto device = launch::ParseDevice(a[i].as_string().str);
        if (!device.ok()) {
          e->Fail(LineOf(a[i]), field, device.status().message());
          break;
        }
        if (std::find(c->devices.begin(), c->devices.end(), *device) != c->devices.end()) {
          e->Fail(LineOf(a[i]), field, device->ToString() + " is listed twice");
          break;
        }
        c->devices.push_back(*device);
      }
    } else {
      r.Fail("devices", "expected \"auto\" or a list of devices, got " + Shown(*d));
    }
  } else if (r.ok()) {
    r.Missing("devices", "a list like [\"cpu:0\", \"cpu:1\"], or \"auto\"");
  }
  int64_t n = 0;
  if (r.Int("threads_per_cpu_device", &n, 1))
    c->threads_per_cpu_device = static_cast<int>(std::min<int64_t>(n, 4096));
  if (r.Int("members_per_device", &n, 1))
    c->members_per_device = static_cast<int>(std::min<int64_t>(n, 4096));
}

// [slurm]: how each worker step is requested (launch/slurm.h, docs/slurm.md).
void ParseSlurm(Errors* e, Reader& r, LoopConfig* c) {
  const TV* t = r.Table("slurm");
  if (t != nullptr && c->launcher != Launcher::kSlurm) {
    r.Fail("slurm", "a [slurm] table needs launcher = \"slurm\"");
    return;
  }
  Reader s(e, t, "slurm.", t ? LineOf(*t) : 1,
           {"partition", "account", "qos", "time", "constraint", "mem", "cpus_per_member",
            "gpus_per_member", "srun_args", "queue_timeout_s", "slots"});
  launch::SlurmOptions& o = c->slurm;
  s.String("partition", &o.partition);
  s.String("account", &o.account);
  s.String("qos", &o.qos);
  s.String("time", &o.time);
  s.String("constraint", &o.constraint);
  s.String("mem", &o.mem);
  int64_t n = 0;
  if (s.Int("cpus_per_member", &n, 1))
    o.cpus_per_member = static_cast<int>(std::min<int64_t>(n, 4096));
  if (s.Int("gpus_per_member", &n, 0))
    o.gpus_per_member = static_cast<int>(std::min<int64_t>(n, 64));
  if (s.Int("slots", &n, 1)) o.slots = static_cast<int>(std::min<int64_t>(n, 100000));
  if (s.Number("queue_timeout_s", &o.queue_timeout_s) &&
      !(o.queue_timeout_s > 0 && o.queue_timeout_s <= 1e7)) {
    s.Fail("queue_timeout_s", "must be > 0 and at most 1e7 seconds");
  }
  if (const TV* args = s.Get("srun_args"); args != nullptr && s.ok()) {
    if (!args->is_array()) {
      s.Fail("srun_args", "expected a list of strings (srun arguments), got " + Shown(*args));
      return;
    }
    for (const auto& arg : args->as_array()) {
      if (!arg.is_string()) {
        e->Fail(LineOf(arg), "slurm.srun_args", "expected strings, got " + Shown(arg));
        return;
      }
      o.srun_args.push_back(arg.as_string().str);
    }
  }
  // A worker's threads are the CPUs its step asks for.
  if (c->launcher == Launcher::kSlurm) c->threads_per_cpu_device = o.cpus_per_member;
}

// [defaults]: what every [[member]] starts from.
struct MemberDefaults {
  const TV* table = nullptr;
  int line = 1;
  model::TrainConfig train;
  bool warm_start = false;
  int64_t dropout_passes = 0;
  int dropout_passes_line = 0;
};

MemberDefaults ParseMemberDefaults(Errors* e, Reader& r) {
  MemberDefaults d;
  d.table = r.Table("defaults");
  if (d.table == nullptr || !r.ok()) return d;
  d.line = LineOf(*d.table);
  SettingSource where;
  where.defaults = d.table;
  where.defaults_line = d.line;
  Reader dr(e, d.table, "defaults.", d.line, {});  // keys checked by ReadTrainSettings
  if (ReadTrainSettings(e, *d.table, {"warm_start", "dropout_passes"}, where, "defaults",
                        &d.train)) {
    dr.Bool("warm_start", &d.warm_start);
    if (dr.Int("dropout_passes", &d.dropout_passes, 0)) {
      d.dropout_passes_line = dr.KeyLine("dropout_passes");
    }
    if (!d.train.model.empty()) {
      CheckModel(e, d.train.model, "defaults", dr.KeyLine("model"), "defaults.model");
    }
  }
  return d;
}

// An outside script's member: its settings are its own business, passed through as JSON,
// [defaults] underneath.
bool ParseScriptMember(Errors* e, Reader& mr, const TV& t, const std::string& prefix,
                       const MemberDefaults& defaults, const fs::path& base, MemberConfig* member) {
  if (!ReadArgv(e, *mr.Get("command"), prefix + "command", base, &member->command)) return false;
  mr.Bool("warm_start", &member->warm_start);
  // [defaults]' dropout_passes is for the native members; an outside member samples itself.
  member->dropout_passes = 0;
  if (mr.Get("dropout_passes") != nullptr) {
    mr.Fail("dropout_passes",
            "only for native members: an outside member writes what it predicts itself");
    return false;
  }
  json settings = json::object();
  for (const TV* table : {defaults.table, &t}) {
    if (table == nullptr) continue;
    for (const auto& [key, value] : table->as_table()) {
      if (key == "name" || key == "command" || key == "warm_start" || key == "dropout_passes") {
        continue;
      }
      const TV* bad = nullptr;
      json v = ToJson(value, &bad);
      if (bad != nullptr) {
        e->Fail(LineOf(*bad), prefix + key, "dates and times are not accepted here");
        break;
      }
      if (v.is_object() && settings.contains(key) && settings[key].is_object()) {
        settings[key].update(v);  // an inline table replaces only the fields it names
      } else {
        settings[key] = std::move(v);
      }
    }
  }
  if (!mr.ok()) return false;
  member->script_config = std::move(settings);
  member->train = defaults.train;
  member->train.member = member->name;
  return true;
}

// A native member: TrainConfig fields on top of [defaults], checked now.
// `classes = N` and a final `dense N` say the same thing: refused when they disagree, at the
// `model` line, naming where `classes` is set.
void CheckClassesAgree(Errors* e, const model::TrainConfig& train, const SettingSource& where) {
  if (!e->ok() || train.classes <= 0) return;
  auto spec = model::ParseModelSpec(train.model, train.member);
  if (!spec.ok() || spec->layers.empty()) return;
  const model::LayerSpec& last = spec->layers.back();
  if (last.kind != model::LayerKind::kDense || last.units == train.classes) return;
  auto [line, field] = where.Locate("model");
  auto [classes_line, classes_field] = where.Locate("classes");
  e->Fail(line, field,
          train.member + "'s final layer '" + last.text + "' has " + std::to_string(last.units) +
              " units but " + classes_field + " = " + std::to_string(train.classes) + " (line " +
              std::to_string(classes_line) + "); the output layer needs one unit per class, so " +
              "make them agree");
}

bool ParseNativeMember(Errors* e, Reader& mr, const TV& t, const std::string& prefix,
                       const std::vector<std::string>& loop_keys, const MemberDefaults& defaults,
                       MemberConfig* member) {
  SettingSource where{&t, prefix, member->line, defaults.table, defaults.line};
  member->train = defaults.train;
  if (!ReadTrainSettings(e, t, loop_keys, where, member->name, &member->train)) return false;
  mr.Bool("warm_start", &member->warm_start);
  int passes_line = defaults.dropout_passes_line;
  std::string passes_field = "defaults.dropout_passes";
  if (mr.Int("dropout_passes", &member->dropout_passes, 0)) {
    passes_line = mr.KeyLine("dropout_passes");
    passes_field = prefix + "dropout_passes";
  }
  member->train.member = member->name;
  if (member->train.model.empty()) {
    mr.Missing("model", "a model spec, here or in [defaults]");
    return false;
  }
  if (mr.Get("model") != nullptr) {
    CheckModel(e, member->train.model, member->name, mr.KeyLine("model"), prefix + "model");
  }
  CheckTrainValues(e, member->train, where);
  CheckClassesAgree(e, member->train, where);
  if (e->ok() && member->dropout_passes > 1000) {
    e->Fail(passes_line, passes_field, "must be at most 1000");
  } else if (e->ok() && member->dropout_passes > 0) {
    auto spec = model::ParseModelSpec(member->train.model, member->name);
    const bool has_dropout =
        spec.ok() && std::any_of(spec->layers.begin(), spec->layers.end(), [](const auto& l) {
          return l.kind == model::LayerKind::kDropout;
        });
    if (!has_dropout) {
      e->Fail(passes_line, passes_field,
              member->name + "'s model '" + member->train.model +
                  "' has no dropout layer, so its passes would all be equal; add one (dropout "
                  "0.2) or set dropout_passes = 0");
    }
  }
  std::tie(member->model_line, member->model_field) = where.Locate("model");
  return true;
}

// The [[member]] entry `t`, the index-th (from 0). False after an error.
bool ParseMember(Errors* e, const TV& t, size_t index, const MemberDefaults& defaults,
                 const fs::path& base, LoopConfig* c) {
  const std::vector<std::string> loop_keys = {"name", "warm_start", "command", "dropout_passes"};
  const std::string prefix = "member[" + std::to_string(index + 1) + "].";
  if (!t.is_table()) {
    e->Fail(LineOf(t), prefix.substr(0, prefix.size() - 1), "expected a table");
    return false;
  }
  MemberConfig member;
  member.line = LineOf(t);
  member.warm_start = defaults.warm_start;
  member.dropout_passes = defaults.dropout_passes;
  Reader mr(e, &t, prefix, member.line, {});  // keys checked by ReadTrainSettings
  // A script member's other keys are its own settings: no typo guessing there.
  const bool script = mr.Get("command") != nullptr;
  if (!script && !CheckLoopKeyTypos(e, t, loop_keys, prefix)) return false;
  if (!mr.String("name", &member.name)) {
    if (mr.ok()) mr.Missing("name", "each [[member]] needs a unique name");
    return false;
  }
  if (!ValidName(member.name)) {
    mr.Fail("name", "'" + member.name + "' is not a valid member name: " + kNameRule);
    return false;
  }
  for (const auto& other : c->members) {
    if (other.name == member.name) {
      mr.Fail("name", "'" + member.name + "' is already the name of the member at line " +
                          std::to_string(other.line));
    }
  }
  if (!mr.ok()) return false;
  const bool ok = script ? ParseScriptMember(e, mr, t, prefix, defaults, base, &member)
                         : ParseNativeMember(e, mr, t, prefix, loop_keys, defaults, &member);
  if (!ok) return false;
  c->members.push_back(std::move(member));
  return true;
}

void ParseMembers(Errors* e, Reader& r, const MemberDefaults& defaults, const fs::path& base,
                  LoopConfig* c) {
  if (const TV* m = r.Get("member"); m != nullptr && r.ok()) {
    if (!m->is_array() || (!m->as_array().empty() && !m->as_array()[0].is_table())) {
      r.Fail("member", "expected [[member]] tables, got " + Shown(*m));
    } else {
      const auto& entries = m->as_array();
      for (size_t i = 0; i < entries.size() && r.ok(); i++) {
        if (!ParseMember(e, entries[i], i, defaults, base, c)) break;
      }
    }
  }
  if (r.ok() && c->members.empty()) r.Missing("member", "at least one [[member]] entry");
}

// The strategy names of both kinds of run, classification's first. Which kind a run is only
// its store says (the train table's labels): CheckConfigAgainstStore refuses the other kind's.
std::vector<std::string> AllStrategyNames() {
  std::vector<std::string> names = StrategyNames(StrategyTask::kClassification);
  for (const std::string& name : StrategyNames(StrategyTask::kRegression)) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

// Whether `strategy` needs several members in every kind of run that has it (`variance` of
// class probabilities does, a regression run's predictive variance does not).
bool NeedsSeveralMembersInAnyRun(const std::string& strategy) {
  const Strategy* regression = FindStrategy(strategy, StrategyTask::kRegression);
  const Strategy* classification = FindStrategy(strategy, StrategyTask::kClassification);
  if (regression != nullptr) return regression->needs_several_members;
  return classification != nullptr && classification->needs_several_members;
}

// Whether the file's [[update]] steps include acquire, read before they are parsed (the
// [acquisition] table is required only then); without [[update]] the run acquires.
bool FileAcquires(const TV& root) {
  if (!root.is_table()) return true;
  auto it = root.as_table().find("update");
  if (it == root.as_table().end() || !it->second.is_array()) return true;
  for (const TV& step : it->second.as_array()) {
    if (!step.is_table()) continue;
    auto kind = step.as_table().find("kind");
    if (kind != step.as_table().end() && kind->second.is_string() &&
        kind->second.as_string().str == "acquire") {
      return true;
    }
  }
  return false;
}

// After the members: a disagreement strategy needs at least two. `acquires`: the run has an
// acquire step, so the table is required.
// `name` (the value of acquisition.`key`) must be a strategy some run takes, and one that a
// run of this many members can use.
void CheckStrategyName(Reader& a, const char* key, const std::string& name, size_t members) {
  const std::vector<std::string> strategies = AllStrategyNames();
  if (std::find(strategies.begin(), strategies.end(), name) == strategies.end()) {
    std::string suggestion = ClosestName(name, strategies);
    a.Fail(key, "unknown strategy '" + name + "'" +
                    (suggestion.empty() ? "" : " (did you mean " + suggestion + "?)") +
                    "; one of " + NameList(strategies));
  } else if (NeedsSeveralMembersInAnyRun(name) && members < 2) {
    a.Fail(key, "'" + name +
                    "' measures disagreement between members and needs at least 2 [[member]] "
                    "entries");
  }
}

// The band of scores a pick may have (DP-GEN's trust levels): [min_score, max_score).
void ParseScoreBand(Reader& a, ScoreBand* band) {
  for (const char* key : {"min_score", "max_score"}) {
    double value = 0;
    if (!a.Number(key, &value)) continue;
    if (!std::isfinite(value)) {
      a.Fail(key, "must be a finite number");
    } else if (std::string(key) == "min_score") {
      band->lower = value;
    } else {
      band->upper = value;
    }
  }
  if (a.ok() && band->lower && band->upper && *band->lower >= *band->upper) {
    a.Fail("max_score", fmt::format("{} is not above min_score {}: no sample could be picked",
                                    *band->upper, *band->lower));
  }
}

void ParseBatchSelection(Reader& a, BatchSelection* selection) {
  if (std::string name; a.String("selection", &name)) {
    const std::vector<std::string>& names = BatchSelectionNames();
    auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) {
      std::string suggestion = ClosestName(name, names);
      a.Fail("selection", "unknown selection '" + name + "'" +
                              (suggestion.empty() ? "" : " (did you mean " + suggestion + "?)") +
                              "; one of " + NameList(names));
    } else {
      selection->kind = static_cast<BatchSelection::Kind>(it - names.begin());
    }
  }
  if (a.Number("temperature", &selection->temperature)) {
    if (!(selection->temperature > 0 && selection->temperature <= 1e6)) {
      a.Fail("temperature", "must be > 0 and at most 1e6");
    } else if (selection->kind == BatchSelection::Kind::kTop) {
      a.Fail("temperature", "only for a stochastic selection (power, softmax, softrank)");
    }
  }
}

void ParsePoolSample(Reader& a, LoopConfig* c) {
  if (!a.Int("pool_sample", &c->acquisition.pool_sample, 1)) return;
  c->acquisition.pool_sample_line = a.KeyLine("pool_sample");
  const int64_t k = c->acquisition.batch_size;
  if (k > 0 && c->acquisition.pool_sample < k) {
    a.Fail("pool_sample", fmt::format("{} is below batch_size {}: a round could not pick its "
                                      "batch from the sample",
                                      c->acquisition.pool_sample, k));
  }
  for (const MemberConfig& m : c->members) {
    if (m.is_script() && a.ok()) {
      a.Fail("pool_sample", "member " + m.name +
                                " is an outside member, which predicts the whole pool; "
                                "pool_sample needs native members");
    }
  }
}

// What a strategy asks of the rest of [acquisition]: BatchBALD's own settings (and its batch is
// its own: no stochastic draw over it); margin's scores are <= 0 (the negated gap), so no power
// of them is a weight.
void CheckStrategySettings(Reader& a, AcquisitionConfig* acquisition) {
  const bool cold = acquisition->cold_start_rounds > 0;
  auto uses = [&](const char* name) {
    return acquisition->strategy == name || (cold && acquisition->cold_start_strategy == name);
  };
  const bool batchbald = uses("batchbald");
  for (auto [key, out, max] :
       {std::tuple{"batchbald_samples", &acquisition->batch_bald.samples, int64_t{1000000}},
        std::tuple{"batchbald_candidates", &acquisition->batch_bald.candidates,
                   int64_t{10000000}}}) {
    if (!a.Int(key, out, 1)) continue;
    if (*out > max) {
      a.Fail(key, fmt::format("must be at most {}", max));
    } else if (!batchbald) {
      a.Fail(key, "only for strategy = \"batchbald\"");
    }
  }
  const BatchSelection::Kind kind = acquisition->selection.kind;
  if (a.ok() && batchbald && kind != BatchSelection::Kind::kTop) {
    a.Fail("selection", "batchbald picks its batch jointly; it takes no stochastic selection");
  }
  if (a.ok() && kind == BatchSelection::Kind::kPower && uses("margin")) {
    a.Fail("selection",
           "power draws by score^(1/T), and margin's scores are <= 0; use softmax "
           "or softrank");
  }
}

void ParseAcquisition(Errors* e, Reader& r, bool acquires, LoopConfig* c) {
  const TV* t = r.Table("acquisition");
  if (t == nullptr && r.ok() && acquires) {
    r.Missing("acquisition", "an [acquisition] table, for the acquire step");
  }
  Reader a(e, t, "acquisition.", t ? LineOf(*t) : 1,
           {"strategy", "batch_size", "seed", "min_score", "max_score", "selection", "temperature",
            "cold_start_rounds", "cold_start_strategy", "batchbald_samples", "batchbald_candidates",
            "pool_sample"});
  AcquisitionConfig& acquisition = c->acquisition;
  if (a.String("strategy", &acquisition.strategy)) {
    CheckStrategyName(a, "strategy", acquisition.strategy, c->members.size());
  } else if (a.ok() && t != nullptr) {
    a.Missing("strategy", "one of " + NameList(AllStrategyNames()));
  }
  if (!a.Int("batch_size", &acquisition.batch_size, 1) && a.ok() && t != nullptr) {
    a.Missing("batch_size", "k, the samples labelled per round");
  }
  int64_t seed = 0;
  if (a.Int("seed", &seed, 0)) acquisition.seed = static_cast<uint64_t>(seed);
  ParseScoreBand(a, &acquisition.band);
  ParseBatchSelection(a, &acquisition.selection);
  a.Int("cold_start_rounds", &acquisition.cold_start_rounds, 0);
  if (a.String("cold_start_strategy", &acquisition.cold_start_strategy)) {
    const std::string& cold = acquisition.cold_start_strategy;
    const std::vector<std::string> strategies = AllStrategyNames();
    if (std::find(strategies.begin(), strategies.end(), cold) != strategies.end() &&
        acquisition.cold_start_rounds == 0) {
      a.Fail("cold_start_strategy", "set cold_start_rounds too: the rounds it acquires in");
    } else {
      CheckStrategyName(a, "cold_start_strategy", cold, c->members.size());
    }
  }
  ParsePoolSample(a, c);
  CheckStrategySettings(a, &acquisition);
}

void ParseOracle(Errors* e, Reader& r, const fs::path& base, OracleConfig* oracle) {
  const TV* t = r.Table("oracle");
  Reader o(e, t, "oracle.", t ? LineOf(*t) : 1, {"kind", "command", "timeout_s"});
  std::string kind = "hidden_labels";
  o.String("kind", &kind);
  if (!o.ok()) return;
  if (kind == "hidden_labels") {
    oracle->kind = OracleConfig::Kind::kHiddenLabels;
    for (const char* key : {"command", "timeout_s"}) {
      if (o.Get(key) != nullptr) o.Fail(key, "only for kind = \"command\"");
    }
  } else if (kind == "command") {
    oracle->kind = OracleConfig::Kind::kCommand;
    const TV* cmd = o.Get("command");
    if (cmd == nullptr) {
      o.Fail("kind", "kind = \"command\" needs command = [\"program\", \"arg\", ...]");
    } else {
      ReadArgv(e, *cmd, "oracle.command", base, &oracle->command);
    }
    if (o.Number("timeout_s", &oracle->timeout_s) &&
        !(oracle->timeout_s >= 0 && oracle->timeout_s <= kMaxSeconds)) {
      o.Fail("timeout_s", "must be >= 0 (0: no limit) and at most 1e7 seconds");
    }
  } else {
    o.Fail("kind", "unknown oracle '" + kind + "' (hidden_labels, command)");
  }
}

// A step without a name is called by its program, or by the script an interpreter runs
// (["python3", "fix.py"] is "fix.py"), since "python3" would name every such step alike.
std::string DefaultStepName(const UpdateStepConfig& step) {
  if (step.kind != UpdateStepConfig::Kind::kCommand) return UpdateKindName(step.kind);
  const std::vector<std::string>& argv = step.command;
  std::string program = fs::path(argv.front()).filename().string();
  for (const char* interpreter : {"python", "bash", "sh", "Rscript", "node", "perl", "ruby"}) {
    if (argv.size() > 1 && program.rfind(interpreter, 0) == 0 && argv[1].front() != '-') {
      return fs::path(argv[1]).filename().string();
    }
  }
  return program;
}

// One [[update]] entry, the index-th (from 0).
// Each kind's own settings, read from its [[update]] table `u` into `step`.
using ParseStepFields = void (*)(Errors* e, Reader& u, const fs::path& base, const LoopConfig& c,
                                 UpdateStepConfig* step);

void ParseAcquireFields(Errors*, Reader& u, const fs::path&, const LoopConfig& c,
                        UpdateStepConfig*) {
  for (const auto& other : c.updates) {
    if (other.kind == UpdateStepConfig::Kind::kAcquire) {
      u.Fail("kind", "a run has at most one acquire step (the other is at line " +
                         std::to_string(other.line) + ")");
    }
  }
}

void ParseCommandFields(Errors* e, Reader& u, const fs::path& base, const LoopConfig&,
                        UpdateStepConfig* step) {
  const TV* cmd = u.Get("command");
  if (cmd == nullptr) {
    u.Fail("kind", "kind = \"command\" needs command = [\"program\", \"arg\", ...]");
  } else {
    ReadArgv(e, *cmd, u.Field("command"), base, &step->command);
  }
  if (u.Number("timeout_s", &step->timeout_s) &&
      !(step->timeout_s >= 0 && step->timeout_s <= kMaxSeconds)) {
    u.Fail("timeout_s", "must be >= 0 (0: no limit) and at most 1e7 seconds");
  }
  const TV* predict = u.Get("predict");
  if (predict == nullptr || !u.ok()) return;
  const std::string tables =
      "a list of the tables the members predict for the program: "
      "\"train\", \"pool\", \"test\"";
  if (!predict->is_array()) {
    u.Fail("predict", "expected " + tables + ", got " + Shown(*predict));
    return;
  }
  for (const TV& entry : predict->as_array()) {
    const std::string name = entry.is_string() ? entry.as_string().str : "";
    if (name == "train") {
      step->predict_train = true;
    } else if (name != "pool" && name != "test") {
      u.Fail("predict", "expected " + tables + ", got " + Shown(entry));
      break;
    }
  }
}

void ParsePseudoLabelFields(Errors*, Reader& u, const fs::path&, const LoopConfig&,
                            UpdateStepConfig* step) {
  if (!u.Number("threshold", &step->threshold)) {
    if (u.ok()) u.Missing("threshold", "the ensemble confidence a pool sample needs, in (0, 1]");
  } else if (!(step->threshold > 0 && step->threshold <= 1)) {
    u.Fail("threshold", "must be in (0, 1]: the ensemble's mean probability of its class");
  }
  u.Bool("agreement", &step->agreement);
  u.Int("max_per_round", &step->max_per_round, 0);
  u.Int("max_per_class", &step->max_per_class, 0);
}

void ParseRelabelOrDropFields(Errors*, Reader& u, const fs::path&, const LoopConfig& c,
                              UpdateStepConfig* step) {
  if (!u.Number("threshold", &step->threshold)) {
    if (u.ok()) {
      u.Missing("threshold",
                "a train sample is a suspect when the ensemble gives its label a "
                "probability below this, in (0, 1)");
    }
  } else if (!(step->threshold > 0 && step->threshold < 1)) {
    u.Fail("threshold", "must be in (0, 1): the ensemble's mean probability of the stored label");
  }
  u.Int("max_per_round", &step->max_per_round, 0);
  std::string action = "drop";
  if (!u.String("action", &action)) return;
  if (action == "relabel") {
    step->action = UpdateStepConfig::Action::kRelabel;
    if (c.oracle.kind != OracleConfig::Kind::kCommand) {
      u.Fail("action",
             "\"relabel\" asks the oracle for new labels, and a hidden_labels "
             "oracle has none for train samples: set [oracle] kind = \"command\", "
             "or action = \"drop\"");
    }
  } else if (action != "drop") {
    u.Fail("action", "unknown action '" + action + "'; one of drop, relabel");
  }
}

void ParseImportNewFields(Errors*, Reader& u, const fs::path& base, const LoopConfig& c,
                          UpdateStepConfig* step) {
  if (!u.String("directory", &step->directory)) {
    if (u.ok()) u.Missing("directory", "where new .npy and .csv files arrive");
  } else {
    step->directory = Resolve(base, step->directory);
  }
  if (!u.String("table", &step->table)) step->table = c.store.train;
  u.String("label_column", &step->label_column);
}

// The [[update]] kinds, one row each (the order the messages list them in), and each setting
// with the kinds it belongs to. A new kind is a row here, its fields in UpdateStepConfig, and
// its run function in loop/update/.
struct StepKindRow {
  const char* name;
  UpdateStepConfig::Kind kind;
  ParseStepFields parse;
};
constexpr StepKindRow kStepKindRows[] = {
    {"acquire", UpdateStepConfig::Kind::kAcquire, ParseAcquireFields},
    {"command", UpdateStepConfig::Kind::kCommand, ParseCommandFields},
    {"pseudo_label", UpdateStepConfig::Kind::kPseudoLabel, ParsePseudoLabelFields},
    {"relabel_or_drop", UpdateStepConfig::Kind::kRelabelOrDrop, ParseRelabelOrDropFields},
    {"import_new", UpdateStepConfig::Kind::kImportNew, ParseImportNewFields},
};
const std::vector<std::pair<std::string, std::vector<std::string>>>& StepSettings() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kSettings = {
      {"command", {"command"}},
      {"timeout_s", {"command"}},
      {"predict", {"command"}},
      {"threshold", {"pseudo_label", "relabel_or_drop"}},
      {"agreement", {"pseudo_label"}},
      {"max_per_round", {"pseudo_label", "relabel_or_drop"}},
      {"max_per_class", {"pseudo_label"}},
      {"action", {"relabel_or_drop"}},
      {"directory", {"import_new"}},
      {"table", {"import_new"}},
      {"label_column", {"import_new"}}};
  return kSettings;
}

// Settings of another kind than `kind` are refused, each naming the kinds it belongs to.
void RefuseOtherKindsSettings(Reader& u, const std::string& kind) {
  for (const auto& [key, owners] : StepSettings()) {
    if (u.Get(key) == nullptr || std::find(owners.begin(), owners.end(), kind) != owners.end()) {
      continue;
    }
    std::string which;
    for (size_t i = 0; i < owners.size(); ++i) {
      which += (i == 0 ? "" : i + 1 == owners.size() ? " and " : ", ") + ("\"" + owners[i] + "\"");
    }
    u.Fail(key, "only for kind = " + which);
  }
}

bool ParseUpdateStep(Errors* e, const TV& t, size_t index, const fs::path& base, LoopConfig* c) {
  const std::string prefix = "update[" + std::to_string(index + 1) + "].";
  if (!t.is_table()) {
    e->Fail(LineOf(t), prefix.substr(0, prefix.size() - 1), "expected a table");
    return false;
  }
  UpdateStepConfig step;
  step.line = LineOf(t);
  std::vector<std::string> keys = {"kind", "name"};
  for (const auto& [key, owners] : StepSettings()) keys.push_back(key);
  Reader u(e, &t, prefix, step.line, keys);
  std::vector<std::string> kinds;
  for (const StepKindRow& row : kStepKindRows) kinds.emplace_back(row.name);
  std::string kind;
  if (!u.String("kind", &kind)) {
    if (u.ok()) u.Missing("kind", "one of " + NameList(kinds));
    return false;
  }
  const StepKindRow* row = nullptr;
  for (const StepKindRow& r : kStepKindRows) {
    if (kind == r.name) row = &r;
  }
  // Settings of another kind, once the kind itself is known (an unknown one is said first).
  if (row != nullptr) RefuseOtherKindsSettings(u, kind);
  if (!u.ok()) return false;
  if (row == nullptr) {
    std::string suggestion = ClosestName(kind, kinds);
    u.Fail("kind", "unknown update step '" + kind + "'" +
                       (suggestion.empty() ? "" : " (did you mean " + suggestion + "?)") +
                       "; one of " + NameList(kinds));
    return false;
  }
  step.kind = row->kind;
  row->parse(e, u, base, *c, &step);
  if (!u.ok()) return false;
  if (u.String("name", &step.name) && !ValidName(step.name)) {
    u.Fail("name", "'" + step.name + "' is not a valid step name: " + kNameRule);
  }
  if (!u.ok()) return false;
  if (step.name.empty()) step.name = DefaultStepName(step);
  c->updates.push_back(std::move(step));
  return true;
}

void ParseUpdates(Errors* e, Reader& r, const fs::path& base, LoopConfig* c) {
  if (const TV* u = r.Get("update"); u != nullptr && r.ok()) {
    if (!u->is_array() || u->as_array().empty() || !u->as_array()[0].is_table()) {
      r.Fail("update", "expected [[update]] tables, got " + Shown(*u));
      return;
    }
    c->updates_explicit = true;
    const auto& entries = u->as_array();
    for (size_t i = 0; i < entries.size() && r.ok(); i++) {
      if (!ParseUpdateStep(e, entries[i], i, base, c)) return;
    }
  }
  if (r.ok() && c->updates.empty()) {
    UpdateStepConfig step;
    step.name = "acquire";
    c->updates.push_back(std::move(step));
  }
}

// stop.target: only a metric the loop computes can ever be reached.
void ParseTarget(Errors* e, const TV& target, StopConfig* stop) {
  Reader tr(e, &target, "stop.target.", LineOf(target), {"metric", "value"});
  const std::vector<std::string> metrics = TargetMetricNames();
  TargetMetric m;
  if (!tr.String("metric", &m.metric) && tr.ok()) tr.Missing("metric", NameList(metrics));
  if (tr.ok()) {
    const auto* rule = std::find_if(std::begin(kTargetMetrics), std::end(kTargetMetrics),
                                    [&](const auto& k) { return m.metric == k.name; });
    if (rule != std::end(kTargetMetrics)) {
      m.higher_is_better = rule->higher_is_better;
    } else {
      tr.Fail("metric", "unknown metric '" + m.metric + "' (" + NameList(metrics) + ")");
    }
  }
  if (!tr.Number("value", &m.value) && tr.ok()) tr.Missing("value", "the metric's target");
  if (tr.ok() && !std::isfinite(m.value)) tr.Fail("value", "must be a finite number");
  if (tr.ok()) stop->target = m;
}

void ParseStop(Errors* e, Reader& r, StopConfig* stop) {
  const TV* t = r.Table("stop");
  Reader s(e, t, "stop.", t ? LineOf(*t) : 1,
           {"max_rounds", "label_budget", "target", "stop_when_pool_exhausted"});
  int64_t v = 0;
  if (s.Int("max_rounds", &v, 1)) stop->max_rounds = v;
  if (s.Int("label_budget", &v, 1)) stop->label_budget = v;
  if (const TV* target = s.Table("target")) ParseTarget(e, *target, stop);
  s.Bool("stop_when_pool_exhausted", &stop->stop_when_pool_exhausted);
  if (s.ok() && !stop->max_rounds && !stop->label_budget && !stop->target) {
    e->Fail(s.line(), "stop",
            "no stop rule: set at least one of max_rounds, label_budget or target");
  }
}

// After the members: min_members counts them.
void ParseFailure(Errors* e, Reader& r, LoopConfig* c) {
  const TV* t = r.Table("failure");
  Reader f(e, t, "failure.", t ? LineOf(*t) : 1,
           {"retries", "min_members", "heartbeat_timeout_s", "attempt_timeout_s", "memory_limit_gb",
            "log_limit_mb"});
  FailureConfig& failure = c->failure;
  f.Int("retries", &failure.retries, 0);
  const auto members = static_cast<int64_t>(c->members.size());
  if (f.Int("min_members", &failure.min_members, 1) && failure.min_members > members) {
    f.Fail("min_members", std::to_string(failure.min_members) + " is more than the " +
                              std::to_string(members) + " members configured");
  }
  if (failure.min_members == FailureConfig::kAllMembers) failure.min_members = members;
  // Bounded so the controller's conversion to a clock duration cannot overflow.
  if (f.Number("heartbeat_timeout_s", &failure.heartbeat_timeout_s) &&
      !(failure.heartbeat_timeout_s > 0 && failure.heartbeat_timeout_s <= kMaxSeconds)) {
    f.Fail("heartbeat_timeout_s", "must be > 0 and at most 1e7 seconds");
  }
  if (f.Number("attempt_timeout_s", &failure.attempt_timeout_s) &&
      !(failure.attempt_timeout_s >= 0 && failure.attempt_timeout_s <= kMaxSeconds)) {
    f.Fail("attempt_timeout_s", "must be >= 0 (0: no limit) and at most 1e7 seconds");
  }
  if (f.Number("memory_limit_gb", &failure.memory_limit_gb) &&
      !(failure.memory_limit_gb == 0 ||
        (failure.memory_limit_gb >= 0.25 && failure.memory_limit_gb <= 1e6))) {
    f.Fail("memory_limit_gb", "must be 0 (no limit) or from 0.25 to 1e6 GB");
  }
  if (f.Int("log_limit_mb", &failure.log_limit_mb, 0) && failure.log_limit_mb > 1000000) {
    f.Fail("log_limit_mb", "must be at most 1000000 (0: no cap)");
  }
}

void ParseRoot(Errors* e, const TV& root, const fs::path& base, LoopConfig* c) {
  Reader r(e, &root, "", 1,
           {"name", "run_dir", "devices", "threads_per_cpu_device", "members_per_device",
            "launcher", "slurm", "store", "defaults", "member", "acquisition", "oracle", "update",
            "stop", "failure"});
  ParseRun(r, base, c);
  ParseStore(e, r, base, &c->store);
  ParseDevices(e, r, c);
  ParseSlurm(e, r, c);
  const MemberDefaults defaults = ParseMemberDefaults(e, r);
  ParseMembers(e, r, defaults, base, c);
  ParseAcquisition(e, r, FileAcquires(root), c);
  ParseOracle(e, r, base, &c->oracle);
  ParseUpdates(e, r, base, c);
  if (e->ok() && c->acquisition.pool_sample > 0) {
    for (const UpdateStepConfig& u : c->updates) {
      if (u.kind == UpdateStepConfig::Kind::kPseudoLabel ||
          u.kind == UpdateStepConfig::Kind::kCommand) {
        e->Fail(c->acquisition.pool_sample_line, "acquisition.pool_sample",
                "update step '" + u.name + "' (line " + std::to_string(u.line) +
                    ") reads the members' pool predictions, which would cover only the sample");
        break;
      }
    }
  }
  ParseStop(e, r, &c->stop);
  if (e->ok() && !HasAcquireStep(*c) && !c->stop.max_rounds) {
    const TV* stop = r.Get("stop");
    e->Fail(stop != nullptr ? LineOf(*stop) : 1, "stop.max_rounds",
            "missing (a run without an acquire step never runs out of samples to acquire: say "
            "how many rounds it runs)");
  }
  ParseFailure(e, r, c);
}

// Syntax errors: toml11's message is several lines; keep the first, plus the hint at the
// marker ("^--- expected value, but got nothing").
std::string SyntaxMessage(const std::string& what) {
  std::istringstream in(what);
  std::string line, first, hint;
  while (std::getline(in, line)) {
    if (first.empty()) first = line;
    size_t marker = line.find("^--- ");
    if (marker == std::string::npos) marker = line.find("~~~ ");
    if (marker != std::string::npos) hint = line.substr(line.find(' ', marker) + 1);
  }
  if (first.rfind("[error] ", 0) == 0) first = first.substr(8);
  if (first.rfind("toml::", 0) == 0) {
    size_t colon = first.find(": ");
    if (colon != std::string::npos) first = first.substr(colon + 2);
  }
  if (!hint.empty()) first += " (" + hint + ")";
  return first;
}

// Diff ----------------------------------------------------------------------------------------

bool SafeOnResume(const std::string& field) {
  for (const char* prefix : {"devices", "threads_per_cpu_device", "members_per_device", "launcher",
                             "slurm", "run_dir", "stop", "failure"}) {
    std::string p = prefix;
    if (field == p || field.rfind(p + ".", 0) == 0 || field.rfind(p + "[", 0) == 0) return true;
  }
  return false;
}

std::string Compact(const json& j) {
  if (j.is_null()) return "(none)";
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

void Diff(const json& a, const json& b, const std::string& path, std::vector<ConfigChange>* out) {
  if (a == b) return;
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (const auto& [k, v] : a.items()) keys.insert(k);
    for (const auto& [k, v] : b.items()) keys.insert(k);
    for (const auto& k : keys) {
      Diff(a.contains(k) ? a[k] : json(), b.contains(k) ? b[k] : json(),
           path.empty() ? k : path + "." + k, out);
    }
    return;
  }
  if (a.is_array() && b.is_array() && a.size() == b.size() && !a.empty() && a[0].is_structured()) {
    for (size_t i = 0; i < a.size(); i++) {
      Diff(a[i], b[i], path + "[" + std::to_string(i + 1) + "]", out);
    }
    return;
  }
  out->push_back({path, Compact(a), Compact(b), SafeOnResume(path)});
}

}  // namespace

const char* LauncherName(Launcher launcher) {
  return launcher == Launcher::kSlurm ? "slurm" : "local";
}

const char* OracleKindName(OracleConfig::Kind kind) {
  return kind == OracleConfig::Kind::kCommand ? "command" : "hidden_labels";
}

bool HasAcquireStep(const LoopConfig& config) {
  return config.updates.empty() ||
         std::any_of(config.updates.begin(), config.updates.end(), [](const UpdateStepConfig& u) {
           return u.kind == UpdateStepConfig::Kind::kAcquire;
         });
}

bool HasStepsBeyondAcquire(const LoopConfig& config) {
  return std::any_of(config.updates.begin(), config.updates.end(), [](const UpdateStepConfig& u) {
    return u.kind != UpdateStepConfig::Kind::kAcquire;
  });
}

bool UpdatesReadTrainPredictions(const LoopConfig& config) {
  return std::any_of(config.updates.begin(), config.updates.end(), [](const UpdateStepConfig& u) {
    return u.kind == UpdateStepConfig::Kind::kRelabelOrDrop ||
           (u.kind == UpdateStepConfig::Kind::kCommand && u.predict_train);
  });
}

const char* UpdateKindName(UpdateStepConfig::Kind kind) {
  for (const StepKindRow& row : kStepKindRows) {
    if (row.kind == kind) return row.name;
  }
  return "acquire";
}

namespace {

// toml11 parses arrays, inline tables and dotted keys recursively: a config nested 100,000
// deep overflows the stack. Nothing a loop.toml holds nests more than a few levels.
constexpr int kMaxTomlNesting = 64;

// The line on which `text` first nests more than kMaxTomlNesting levels, or 0: arrays and
// inline tables inside one another plus the dots of the key being read (`a.b.c`, a table
// header's name). Skips comments and every kind of TOML string; a number's decimal point
// and a header's brackets add a level or two at most. Linear and iterative.
int LineNestedTooDeep(std::string_view text) {
  int line = 1;
  int depth = 0;
  int dots = 0;  // in the current key (or value), since the last = , [ ] { } or newline
  size_t i = 0;
  auto skip_string = [&](std::string_view quote, bool escapes) {
    i += quote.size();
    while (i < text.size()) {
      if (text.compare(i, quote.size(), quote) == 0) {
        i += quote.size();
        return;
      }
      if (escapes && text[i] == '\\' && i + 1 < text.size()) i++;  // the escaped character
      if (text[i] == '\n') line++;
      i++;
    }
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '#') {
      while (i < text.size() && text[i] != '\n') i++;
    } else if (text.compare(i, 3, "\"\"\"") == 0) {
      skip_string("\"\"\"", true);
    } else if (text.compare(i, 3, "'''") == 0) {
      skip_string("'''", false);
    } else if (c == '"') {
      skip_string("\"", true);
    } else if (c == '\'') {
      skip_string("'", false);
    } else {
      if (c == '[' || c == '{') depth++;
      if (c == ']' || c == '}') depth--;
      if (c == '.') dots++;
      if (c == '=' || c == ',' || c == '\n' || c == '[' || c == ']' || c == '{' || c == '}') {
        dots = 0;
      }
      if (depth + dots > kMaxTomlNesting) return line;
      if (c == '\n') line++;
      i++;
    }
  }
  return 0;
}

// The offset of the first byte of `text` that does not start or continue a well-formed UTF-8
// sequence (no overlong forms, no surrogates, nothing past U+10FFFF); npos when it is all
// valid. TOML files are UTF-8, and toml11 (3.7) reads past its buffer on an invalid sequence
// inside a multi-line literal string (found by the loop_config fuzzer), so none reaches it.
size_t FirstInvalidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    size_t length = 0;
    unsigned char low = 0x80;
    unsigned char high = 0xBF;
    if (b < 0x80) {
      i++;
      continue;
    } else if (b >= 0xC2 && b <= 0xDF) {
      length = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      length = 3;
      if (b == 0xE0) low = 0xA0;   // overlong
      if (b == 0xED) high = 0x9F;  // surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
      length = 4;
      if (b == 0xF0) low = 0x90;   // overlong
      if (b == 0xF4) high = 0x8F;  // past U+10FFFF
    } else {
      return i;
    }
    if (i + length > text.size()) return i;
    for (size_t k = 1; k < length; k++) {
      const auto c = static_cast<unsigned char>(text[i + k]);
      if (c < (k == 1 ? low : 0x80) || c > (k == 1 ? high : 0xBF)) return i;
    }
    i += length;
  }
  return std::string_view::npos;
}

}  // namespace

Result<LoopConfig> ParseLoopConfig(const std::string& text, const std::string& path,
                                   const std::string& base_dir) {
  Errors errors{path, Status::OK()};
  if (size_t at = FirstInvalidUtf8(text); at != std::string_view::npos) {
    const size_t line_start = text.rfind('\n', at == 0 ? 0 : at - 1);
    const size_t column = at - (line_start == std::string::npos || at == 0 ? 0 : line_start + 1);
    const auto line =
        1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
    errors.Fail(static_cast<int>(line), "syntax",
                fmt::format("not valid UTF-8 (byte 0x{:02x} at column {}); a TOML file is UTF-8",
                            static_cast<unsigned char>(text[at]), column + 1));
    return errors.status;
  }
  if (int line = LineNestedTooDeep(text); line > 0) {
    errors.Fail(line, "syntax",
                "keys, arrays or inline tables nested deeper than " +
                    std::to_string(kMaxTomlNesting) + " levels");
    return errors.status;
  }
  TV root;
  try {
    std::istringstream in(text);
    root = toml::parse<toml::discard_comments, std::map, std::vector>(in, path);
  } catch (const toml::syntax_error& ex) {
    errors.Fail(static_cast<int>(ex.location().line()), "syntax", SyntaxMessage(ex.what()));
    return errors.status;
  } catch (const std::exception& ex) {
    errors.Fail(1, "syntax", SyntaxMessage(ex.what()));
    return errors.status;
  }
  fs::path base = base_dir.empty() ? fs::path(path).parent_path() : fs::path(base_dir);
  std::error_code ec;
  fs::path absolute_base = fs::absolute(base.empty() ? fs::path(".") : base, ec);
  if (ec) absolute_base = base;
  LoopConfig config;
  config.path = path;
  ParseRoot(&errors, root, absolute_base.lexically_normal(), &config);
  if (!errors.ok()) return errors.status;
  return config;
}

Result<std::string> ReadLoopConfigText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound(path + ": no such config file");
    return Status::FromErrno(path, err);
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::IOError(path + ": read failed");
  return text.str();
}

Result<LoopConfig> LoadLoopConfig(const std::string& path) {
  COHORT_ASSIGN_OR_RETURN(std::string text, ReadLoopConfigText(path));
  return ParseLoopConfig(text, path);
}

nlohmann::json LoopConfigToJson(const LoopConfig& c) {
  json members = json::array();
  for (const auto& m : c.members) {
    json j;
    if (m.is_script()) {
      j["command"] = m.command;
      j["config"] = m.script_config;
    } else {
      j = model::TrainConfigToJson(m.train);
      for (const auto& [key, why] : ReservedTrainKeys()) j.erase(key);
      // Only when on, so the JSON (and fingerprint) of a run from before it stays as it was.
      if (!m.train.augment.enabled()) j.erase("augment");
    }
    j["name"] = m.name;
    j["warm_start"] = m.warm_start;
    if (m.dropout_passes > 0) j["dropout_passes"] = m.dropout_passes;
    members.push_back(std::move(j));
  }
  json devices = json::array();
  for (const auto& d : c.devices) devices.push_back(d.ToString());
  json stop = json::object();
  stop["max_rounds"] = c.stop.max_rounds ? json(*c.stop.max_rounds) : json();
  stop["label_budget"] = c.stop.label_budget ? json(*c.stop.label_budget) : json();
  stop["target"] = c.stop.target
                       ? json{{"metric", c.stop.target->metric}, {"value", c.stop.target->value}}
                       : json();
  stop["stop_when_pool_exhausted"] = c.stop.stop_when_pool_exhausted;
  json out = {
      {"name", c.name},
      {"run_dir", c.run_dir},
      {"store",
       {{"source", c.store.source},
        {"generation", c.store.source_generation ? json(*c.store.source_generation) : json()},
        {"train", c.store.train},
        {"pool", c.store.pool},
        {"test", c.store.test}}},
      {"devices", c.devices_auto ? json("auto") : devices},
      {"threads_per_cpu_device", c.threads_per_cpu_device},
      {"members_per_device", c.members_per_device},
      {"launcher", LauncherName(c.launcher)},
      {"member", members},
      {"acquisition",
       {{"strategy", c.acquisition.strategy},
        {"batch_size", c.acquisition.batch_size},
        {"seed", c.acquisition.seed},
        {"min_score", c.acquisition.band.lower ? json(*c.acquisition.band.lower) : json()},
        {"max_score", c.acquisition.band.upper ? json(*c.acquisition.band.upper) : json()}}},
      {"oracle", {{"kind", OracleKindName(c.oracle.kind)}, {"command", c.oracle.command}}},
      {"stop", stop},
      {"failure",
       {{"retries", c.failure.retries},
        {"min_members", c.failure.min_members},
        {"heartbeat_timeout_s", c.failure.heartbeat_timeout_s},
        {"attempt_timeout_s", c.failure.attempt_timeout_s}}},
  };
  // Only when set, so the JSON (and fingerprint) of a run from before it stays as it was.
  if (c.oracle.timeout_s > 0) out["oracle"]["timeout_s"] = c.oracle.timeout_s;
  if (c.acquisition.selection.kind != BatchSelection::Kind::kTop) {
    out["acquisition"]["selection"] = BatchSelectionName(c.acquisition.selection.kind);
    out["acquisition"]["temperature"] = c.acquisition.selection.temperature;
  }
  if (c.acquisition.pool_sample > 0) out["acquisition"]["pool_sample"] = c.acquisition.pool_sample;
  if (c.acquisition.strategy == "batchbald" || c.acquisition.cold_start_strategy == "batchbald") {
    out["acquisition"]["batchbald_samples"] = c.acquisition.batch_bald.samples;
    out["acquisition"]["batchbald_candidates"] = c.acquisition.batch_bald.candidates;
  }
  if (c.acquisition.cold_start_rounds > 0) {
    out["acquisition"]["cold_start_rounds"] = c.acquisition.cold_start_rounds;
    out["acquisition"]["cold_start_strategy"] = c.acquisition.cold_start_strategy;
  }
  if (c.updates_explicit) {
    json updates = json::array();
    for (const UpdateStepConfig& u : c.updates) {
      json step = {{"kind", UpdateKindName(u.kind)}, {"name", u.name}};
      if (u.kind == UpdateStepConfig::Kind::kCommand) {
        step["command"] = u.command;
        if (u.timeout_s > 0) step["timeout_s"] = u.timeout_s;
        if (u.predict_train) step["predict"] = json::array({"train"});
      }
      if (u.kind == UpdateStepConfig::Kind::kRelabelOrDrop) {
        step["threshold"] = u.threshold;
        step["max_per_round"] = u.max_per_round;
        step["action"] = u.action == UpdateStepConfig::Action::kRelabel ? "relabel" : "drop";
      }
      if (u.kind == UpdateStepConfig::Kind::kImportNew) {
        step["directory"] = u.directory;
        step["table"] = u.table;
        step["label_column"] = u.label_column;
      }
      if (u.kind == UpdateStepConfig::Kind::kPseudoLabel) {
        step["threshold"] = u.threshold;
        step["agreement"] = u.agreement;
        step["max_per_round"] = u.max_per_round;
        step["max_per_class"] = u.max_per_class;
      }
      updates.push_back(std::move(step));
    }
    out["update"] = std::move(updates);
  }
  if (c.failure.memory_limit_gb > 0) out["failure"]["memory_limit_gb"] = c.failure.memory_limit_gb;
  if (c.failure.log_limit_mb != 64) out["failure"]["log_limit_mb"] = c.failure.log_limit_mb;
  // Only for Slurm runs, so a local run's JSON (and fingerprint) stays as it was.
  if (c.launcher == Launcher::kSlurm) {
    const launch::SlurmOptions& o = c.slurm;
    out["slurm"] = {{"partition", o.partition},
                    {"account", o.account},
                    {"qos", o.qos},
                    {"time", o.time},
                    {"constraint", o.constraint},
                    {"mem", o.mem},
                    {"cpus_per_member", o.cpus_per_member},
                    {"gpus_per_member", o.gpus_per_member},
                    {"srun_args", o.srun_args},
                    {"queue_timeout_s", o.queue_timeout_s},
                    {"slots", o.slots}};
  }
  return out;
}

std::string LoopConfigFingerprint(const LoopConfig& config) {
  json j = LoopConfigToJson(config);
  json kept = json::object();
  for (const auto& [key, value] : j.items()) {
    if (!SafeOnResume(key)) kept[key] = value;
  }
  const std::string text = kept.dump();
  // FNV-1a, 64 bits, twice with different offsets: 128 bits of hex.
  auto fnv = [&](uint64_t h) {
    for (unsigned char ch : text) {
      h ^= ch;
      h *= 1099511628211ULL;
    }
    return h;
  };
  char out[33];
  std::snprintf(out, sizeof out, "%016llx%016llx",
                static_cast<unsigned long long>(fnv(14695981039346656037ULL)),
                static_cast<unsigned long long>(fnv(0x9e3779b97f4a7c15ULL)));
  return out;
}

std::vector<ConfigChange> DiffLoopConfigs(const LoopConfig& before, const LoopConfig& after) {
  std::vector<ConfigChange> out;
  Diff(LoopConfigToJson(before), LoopConfigToJson(after), "", &out);
  return out;
}

// How to start afresh instead of resuming: a new name moves the run only when run_dir is the
// default runs/NAME; a config that sets run_dir must set another one.
static std::string NewRunAdvice(const LoopConfig& config) {
  fs::path dir = fs::path(config.run_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  bool default_dir = dir.filename() == config.name && dir.parent_path().filename() == "runs";
  if (default_dir) return "start a new run with another name instead";
  return "start a new run instead: this config sets run_dir = " + config.run_dir +
         ", so change run_dir (a new name alone keeps the same directory)";
}

Status CheckResumeCompatible(const LoopConfig& old_config, const LoopConfig& new_config) {
  for (const auto& change : DiffLoopConfigs(old_config, new_config)) {
    if (change.safe_on_resume) continue;
    return Status::InvalidArgument(
        new_config.path + ": " + change.field + ": changed from " + change.before + " to " +
        change.after +
        ", which a resume cannot take (it may change only devices, threads_per_cpu_device, "
        "members_per_device, launcher, run_dir, [stop] and [failure]); " +
        NewRunAdvice(new_config));
  }
  return Status::OK();
}

}  // namespace cohort::loop
