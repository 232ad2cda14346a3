#include "cli/ensemble/ensemble_export.h"

#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>

#include "cli/base/run_cli.h"
#include "cli/ensemble/ensemble_loader_py.h"  // generated from python/cohort_ensemble.py
#include "cli/ensemble/member_jobs.h"
#include "common/file_util.h"
#include "common/time_text.h"
#include "loop/ensemble/calibration.h"
#include "loop/ensemble/predictions.h"
#include "loop/run/run_reader.h"

namespace cohort::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct ExportOptions {
  std::string run_dir;
  std::optional<int64_t> round;
  std::string out;
  std::optional<double> temperature;  // written to the manifest: the loader calibrates with it
  bool calibrated = false;            // that temperature: the round's journalled test temperature
  std::string member_binary;
  std::string version;
};

Status WriteText(const std::string& path, const std::string& text) {
  return WriteFileAtomically(path,
                             {std::as_bytes(std::span<const char>(text.data(), text.size()))});
}

Status RunExport(const ExportOptions& o) {
  if (o.temperature && !loop::ValidTemperature(*o.temperature)) {
    return Status::InvalidArgument(
        fmt::format("--temperature {}: must be a finite number > 0", *o.temperature));
  }
  if (o.temperature && o.calibrated) {
    return Status::InvalidArgument(
        "--temperature gives a temperature and --calibrated takes the loop's: pass one of them");
  }
  COHORT_ASSIGN_OR_RETURN(loop::RunReader run, loop::OpenRunReader(o.run_dir));
  COHORT_ASSIGN_OR_RETURN(auto chosen, loop::NativeMembersOf(run, o.round, "cohort export writes"));
  const int64_t round = chosen.first;
  std::optional<double> temperature = o.temperature;
  if (o.temperature || o.calibrated) {
    COHORT_ASSIGN_OR_RETURN(const loop::RoundTrainTable train, loop::TrainTableOfRound(run, round));
    if (loop::RunTaskOf(*train.table).regression) {
      return Status::InvalidArgument(
          o.run_dir +
          ": --temperature and --calibrated scale class probabilities, and this is a regression "
          "run");
    }
  }
  if (o.calibrated) {
    COHORT_ASSIGN_OR_RETURN(temperature, loop::RoundTemperature(run, round));
  }
  std::error_code ec;
  if (fs::exists(o.out) && !fs::is_empty(o.out, ec)) {
    return Status::AlreadyExists(o.out +
                                 ": exists and is not empty (cohort export writes a new "
                                 "directory)");
  }
  fs::create_directories(o.out + "/members", ec);
  if (ec) return Status::IOError(o.out + ": " + ec.message());

  std::vector<std::string> argv = {o.member_binary, "export-member"};
  json members = json::array();
  for (const auto& m : chosen.second) {
    const std::string dir = "members/" + m.name;
    argv.push_back(m.checkpoint);
    argv.push_back(o.out + "/" + dir);
    members.push_back(
        {{"name", m.name}, {"dir", dir}, {"attempt", m.attempt}, {"checkpoint", m.checkpoint}});
  }
  MemberJob job;
  job.what = "export of round " + std::to_string(round);
  job.spec.argv = argv;
  job.spec.stderr_path = o.out + "/export.log";
  COHORT_RETURN_IF_ERROR(RunMemberJobs({job}, 1));
  fs::remove(job.spec.stderr_path, ec);

  // The ensemble's input: what every member says it takes (they trained on the same table).
  json first;
  for (size_t i = 0; i < members.size(); i++) {
    COHORT_ASSIGN_OR_RETURN(
        std::string text,
        ReadFileToString(o.out + "/" + members[i]["dir"].get<std::string>() + "/member.json"));
    json j = json::parse(text, nullptr, false);
    if (!j.is_object()) return Status::Corruption(o.out + ": a member.json does not parse");
    members[i]["model"] = j["model"];
    if (i == 0) first = j;
  }
  COHORT_ASSIGN_OR_RETURN(auto rounds, run.journal->RoundsOf(run.run.id));
  json round_json;
  for (const auto& r : rounds) {
    if (r.round != round) continue;
    round_json = {{"round", round}, {"input_generation", r.input_generation}};
    if (r.test.accuracy) round_json["test_accuracy"] = *r.test.accuracy;
    if (r.test.nll) round_json["test_nll"] = *r.test.nll;
    if (r.test.temperature) round_json["test_temperature"] = *r.test.temperature;
    if (r.test.nll_calibrated) round_json["test_nll_calibrated"] = *r.test.nll_calibrated;
    if (r.test.ece_calibrated) round_json["test_ece_calibrated"] = *r.test.ece_calibrated;
    if (r.test.rmse) round_json["test_rmse"] = *r.test.rmse;
    if (r.test.mae) round_json["test_mae"] = *r.test.mae;
    if (r.test.calibration_error) round_json["test_calibration"] = *r.test.calibration_error;
  }
  json manifest = {{"format", "cohort-ensemble"},
                   {"version", 1},
                   {"run", run.run.name},
                   {"run_dir", run.paths.root},
                   {"round", round_json},
                   {"task", first["task"]},
                   {"classes", first["classes"]},
                   {"feature_dtype", first["feature_dtype"]},
                   {"input_shape", first["input_shape"]},
                   {"members", members},
                   {"created_at", NowIso8601()},
                   {"cohort_version", o.version},
                   {"loader", "cohort_ensemble.py"}};
  // A regression ensemble has no classes (its members say 0) but a target shape: the loader
  // shapes the means and variances by it.
  if (first["task"] == "regression") {
    manifest.erase("classes");
    manifest["target_shape"] = first["target_shape"];
  }
  if (temperature) manifest["temperature"] = *temperature;
  COHORT_RETURN_IF_ERROR(WriteText(o.out + "/cohort_ensemble.py", kEnsembleLoaderPy));
  COHORT_RETURN_IF_ERROR(WriteText(o.out + "/manifest.json", manifest.dump(2) + "\n"));
  fmt::print(
      "exported the {} members of round {} of run {} to {}\n"
      "  python3: import cohort_ensemble; cohort_ensemble.load(\"{}\").predict(x)\n",
      members.size(), round, run.run.name, o.out, o.out);
  return Status::OK();
}

}  // namespace

void AddExportCommand(CLI::App& app, std::function<Status()>* run, const char* version) {
  auto o = std::make_shared<ExportOptions>();
  o->version = version;
  auto* cmd = app.add_subcommand(
      "export", "Write a round's ensemble as .npy weights, JSON and a numpy loader for Python");
  cmd->add_option("run_dir", o->run_dir, "the run directory (runs/NAME)")->required();
  cmd->add_option("--round", o->round, "the round (default: the last finished round)");
  cmd->add_option("-o,--out", o->out, "the directory to write (new or empty)")->required();
  cmd->add_option("--temperature", o->temperature,
                  "the loader also gives probabilities calibrated at this temperature (the one "
                  "cohort predict --calibrate printed)");
  cmd->add_flag("--calibrated", o->calibrated,
                "that temperature: the one the loop fitted to the round's ensemble on the test "
                "table (cohort status: test_temperature)");
  cmd->callback([o, run] {
    o->member_binary = SiblingExecutable("cohort-member");
    *run = [o] { return RunExport(*o); };
  });
}

}  // namespace cohort::cli
