#include "loop/run/run_status.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "loop/config/config.h"
#include "loop/run/journal.h"
#include "loop/run/run_dir.h"
#include "loop/run/run_reader.h"
#include "store/snapshot.h"
#include "store/store.h"

namespace cohort::loop {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json Optional(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

std::string Num(const json& v, const char* format) {
  return v.is_number() ? fmt::format(fmt::runtime(format), v.get<double>()) : "-";
}

}  // namespace

Result<json> RunStatusJson(const std::string& run_dir_in) {
  COHORT_ASSIGN_OR_RETURN(RunReader reader, OpenRunReader(run_dir_in));
  const RunPaths& paths = reader.paths;
  const std::string& run_dir = paths.root;
  const LoopConfig* config = &reader.config;
  Journal* journal = reader.journal.get();
  const RunRecord& run = reader.run;
  COHORT_ASSIGN_OR_RETURN(auto rounds, journal->RoundsOf(run.id));
  const std::optional<int64_t>& holder = reader.controller_pid;

  json out;
  out["name"] = run.name;
  out["run_dir"] = run_dir;
  out["status"] = reader.StatusText();
  out["controller_pid"] = holder ? json(*holder) : json(nullptr);
  out["source_store"] = run.source_store;
  out["source_generation"] = run.source_generation;
  out["started_at"] = run.started_at;
  out["ended_at"] = run.ended_at ? json(*run.ended_at) : json(nullptr);
  auto history = store::ReadHistory(paths.store());
  out["store_generation"] =
      history.ok() && !history->empty() ? json(history->back().generation) : json(nullptr);
  out["rounds"] = json::array();
  for (const RoundRecord& r : rounds) {
    json jr;
    jr["round"] = r.round;
    jr["status"] = std::string(RoundStatusName(r.status));
    jr["input_generation"] = r.input_generation;
    jr["output_generation"] = r.output_generation ? json(*r.output_generation) : json(nullptr);
    auto snap = store::Snapshot::Open(paths.store(), r.input_generation);
    json labels = nullptr;
    if (snap.ok()) {
      auto table = (*snap)->table(config->store.train);
      if (table.ok()) labels = (*table)->size();
    }
    jr["labels"] = labels;  // labelled samples the members trained on
    jr["labels_after"] = r.labels_total ? json(*r.labels_total) : json(nullptr);
    jr["test_accuracy"] = Optional(r.test.accuracy);
    jr["test_nll"] = Optional(r.test.nll);
    jr["test_brier"] = Optional(r.test.brier);
    jr["test_ece"] = Optional(r.test.ece);
    jr["test_rmse"] = Optional(r.test.rmse);
    jr["test_mae"] = Optional(r.test.mae);
    jr["test_calibration"] = Optional(r.test.calibration_error);
    jr["test_temperature"] = Optional(r.test.temperature);
    jr["test_nll_calibrated"] = Optional(r.test.nll_calibrated);
    jr["test_ece_calibrated"] = Optional(r.test.ece_calibrated);
    jr["started_at"] = r.started_at;
    jr["ended_at"] = r.ended_at ? json(*r.ended_at) : json(nullptr);
    jr["error"] = r.error ? json(*r.error) : json(nullptr);
    if (r.status == RoundStatus::kDone) {
      jr["timings"] = {{"train_s", r.timings.train_s},     {"predict_s", r.timings.predict_s},
                       {"acquire_s", r.timings.acquire_s}, {"label_s", r.timings.label_s},
                       {"commit_s", r.timings.commit_s},   {"idle_s", r.timings.idle_s}};
    }
    COHORT_ASSIGN_OR_RETURN(auto attempts, journal->AttemptsOfRound(run.id, r.round));
    COHORT_ASSIGN_OR_RETURN(auto metrics, journal->MemberMetricsOf(run.id, r.round));
    json members = json::array();
    for (const MemberConfig& m : config->members) {
      json jm;
      jm["name"] = m.name;
      jm["status"] = "queued";
      jm["attempts"] = 0;
      for (const char* key : {"device", "pid", "exit", "log"}) jm[key] = nullptr;
      for (const AttemptRecord& a : attempts) {
        if (a.member != m.name) continue;
        jm["attempts"] = jm["attempts"].get<int>() + 1;
        jm["status"] = std::string(AttemptStatusName(a.status));
        jm["device"] = a.device;
        jm["pid"] = a.pid ? json(*a.pid) : json(nullptr);
        jm["exit"] = a.exit ? json(*a.exit) : json(nullptr);
        jm["log"] = a.log_path ? json(paths.Absolute(*a.log_path)) : json(nullptr);
      }
      auto it = metrics.find(m.name);
      jm["test"] = it != metrics.end() ? json(it->second) : json(nullptr);
      members.push_back(jm);
    }
    jr["members"] = members;
    COHORT_ASSIGN_OR_RETURN(auto steps, journal->UpdateStepsOf(run.id, r.round));
    json updates = json::array();
    for (const UpdateStepRecord& u : steps) {
      updates.push_back(
          {{"step", u.step},
           {"kind", u.kind},
           {"name", u.name},
           {"output_generation", u.output_generation ? json(*u.output_generation) : json(nullptr)},
           {"summary", u.summary},
           {"counts", json::parse(u.counts_json, nullptr, false)},
           {"seconds", u.seconds}});
    }
    jr["updates"] = std::move(updates);
    out["rounds"].push_back(jr);
  }
  return out;
}

std::string RunStatusText(const json& s) {
  std::string out =
      fmt::format("run {}: {}", s["name"].get<std::string>(), s["status"].get<std::string>());
  if (s["controller_pid"].is_number())
    out += fmt::format(" (controller pid {})", s["controller_pid"].get<int64_t>());
  out += fmt::format("\n  {}\n  store generation {}, cloned from {} generation {}\n",
                     s["run_dir"].get<std::string>(),
                     s["store_generation"].is_number() ? s["store_generation"].dump() : "?",
                     s["source_store"].get<std::string>(), s["source_generation"].dump());
  // A regression run's rounds have an RMSE where a classification run's have an accuracy.
  bool regression = false;
  for (const json& r : s["rounds"]) regression = regression || r["test_rmse"].is_number();
  const char* headline = regression ? "test_rmse" : "test_accuracy";
  out += fmt::format("\n  {:>5} {:>6} {:>7} {:>7} {:>11} {:>9} {:>8} {:>8}\n", "round", "gen_in",
                     "gen_out", "labels", "status", regression ? "rmse" : "accuracy", "nll",
                     "train_s");
  for (const json& r : s["rounds"]) {
    out += fmt::format("  {:>5} {:>6} {:>7} {:>7} {:>11} {:>9} {:>8} {:>8}\n",
                       r["round"].get<int64_t>(), r["input_generation"].dump(),
                       r["output_generation"].is_null() ? "-" : r["output_generation"].dump(),
                       r["labels"].is_null() ? "-" : r["labels"].dump(),
                       r["status"].get<std::string>(), Num(r[headline], "{:.4f}"),
                       Num(r["test_nll"], "{:.4f}"),
                       r.contains("timings") ? Num(r["timings"]["train_s"], "{:.1f}") : "-");
  }
  // What each round's [[update]] steps did, when the run has steps.
  std::string steps;
  const json none = json::array();
  for (const json& r : s["rounds"]) {
    for (const json& u : r.contains("updates") ? r["updates"] : none) {
      steps += fmt::format(
          "    round {} step {} ({}): {}{}\n", r["round"].get<int64_t>(), u["step"].get<int64_t>(),
          u["name"].get<std::string>(), u["summary"].get<std::string>(),
          u["output_generation"].is_null() ? "" : ", generation " + u["output_generation"].dump());
    }
  }
  if (!steps.empty()) out += "\n  update steps:\n" + steps;
  if (!s["rounds"].empty()) {
    const json& last = s["rounds"].back();
    out += fmt::format("\n  round {} members:\n", last["round"].get<int64_t>());
    for (const json& m : last["members"]) {
      std::string line = fmt::format("    {:<20} {:<8} attempts {}", m["name"].get<std::string>(),
                                     m["status"].get<std::string>(), m["attempts"].get<int>());
      if (m["test"].is_object() && m["test"].contains("rmse")) {
        line += " rmse " + Num(m["test"]["rmse"], "{:.4f}");
      }
      if (m["test"].is_object() && m["test"].contains("accuracy")) {
        line += " accuracy " + Num(m["test"]["accuracy"], "{:.4f}");
      }
      if (m.contains("exit") && m["exit"].is_string() && m["status"] != "done") {
        line += " (" + m["exit"].get<std::string>() + ")";
      }
      out += line + "\n";
    }
    if (last["error"].is_string()) out += "  error: " + last["error"].get<std::string>() + "\n";
  }
  return out;
}

}  // namespace cohort::loop
