#include "cli/ensemble/ensemble_predict.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "cli/base/run_cli.h"
#include "cli/ensemble/member_jobs.h"
#include "cli/ensemble/npz_writer.h"
#include "common/file_util.h"
#include "launch/device.h"
#include "loop/config/class_labels.h"
#include "loop/ensemble/calibration.h"
#include "loop/ensemble/predictions.h"
#include "loop/ensemble/regression.h"
#include "loop/ensemble/uncertainty.h"
#include "loop/run/run_reader.h"
#include "store/import.h"
#include "store/snapshot.h"
#include "store/store.h"
#include "store/transaction.h"

namespace cohort::cli {

namespace {

namespace fs = std::filesystem;
using store::HostArray;

// A directory removed with everything in it when this goes out of scope.
class TempDir {
 public:
  static Result<TempDir> Create() {
    const char* base = std::getenv("TMPDIR");
    std::string templ =
        std::string(base != nullptr && *base ? base : "/tmp") + "/cohort-predict-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) return Status::FromErrno(templ, errno);
    return TempDir(templ);
  }
  TempDir(TempDir&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string p) : path_(std::move(p)) {}
  std::string path_;
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Reads --input as features: .npy, .csv, or IDX (anything else).
Result<HostArray> ReadInputFile(const EnsemblePredictOptions& o) {
  if (!fs::exists(o.input)) return Status::NotFound(o.input + ": no such file");
  const std::string name = Lower(o.input);
  if (EndsWith(name, ".npy")) {
    COHORT_ASSIGN_OR_RETURN(HostArray raw, store::ReadNpyFile(o.input));
    return store::ToStoreFeatures(std::move(raw), o.input);
  }
  if (EndsWith(name, ".csv")) {
    if (o.label_column.empty()) {
      return Status::InvalidArgument(
          o.input + ": CSV input needs --label-column NAME (the column that is not a feature)");
    }
    store::CsvOptions csv;
    csv.label_column = o.label_column;
    COHORT_ASSIGN_OR_RETURN(auto pair, store::ReadCsvDataset(o.input, csv));
    return std::move(pair.first);
  }
  return store::ReadIdxFile(o.input);
}

std::string Shape(const std::vector<uint64_t>& row_shape) {
  std::string s;
  for (uint64_t d : row_shape) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return "(" + s + (row_shape.size() == 1 ? ",)" : ")");
}

// The members take what they trained on: `what` must have the train table's feature dtype and
// sample shape.
Status CheckFeatures(const std::string& what, store::Dtype dtype,
                     const std::vector<uint64_t>& row_shape, const store::TableSchema& train,
                     const std::string& train_name) {
  if (dtype == train.feature_dtype && row_shape == train.feature_shape) return Status::OK();
  return Status::InvalidArgument(
      fmt::format("{}: samples are {} {}, but the ensemble takes {} {} (the run's {} table)", what,
                  store::DtypeName(dtype), Shape(row_shape), store::DtypeName(train.feature_dtype),
                  Shape(train.feature_shape), train_name));
}

// Imports `x` into a new store at `dir` as table "input"; returns its generation.
Result<uint64_t> ImportToTempStore(const std::string& dir, const HostArray& x) {
  COHORT_RETURN_IF_ERROR(store::InitStore(dir));
  COHORT_ASSIGN_OR_RETURN(auto txn, store::Transaction::Begin(dir));
  store::TableSchema schema;
  schema.feature_dtype = x.dtype;
  schema.feature_shape = x.row_shape();
  schema.label_kind = store::LabelKind::kNone;
  COHORT_RETURN_IF_ERROR(txn->CreateTable("input", schema));
  COHORT_RETURN_IF_ERROR(txn->Append("input", x, nullptr).status());
  return txn->Commit("cohort predict input");
}

// The calibrated probabilities (`calibrated`, empty without calibration) follow the
// ensemble's as columns q0 ... qC-1.
Status WriteCsv(const std::string& path, const loop::EnsembleUncertainty& u,
                const std::vector<float>& calibrated, const std::vector<uint64_t>& ids) {
  std::string text = ids.empty() ? "row" : "row,id";
  text += ",predicted,agreement,entropy,mutual_information,variance";
  for (int64_t c = 0; c < u.classes; c++) text += fmt::format(",p{}", c);
  if (!calibrated.empty()) {
    for (int64_t c = 0; c < u.classes; c++) text += fmt::format(",q{}", c);
  }
  text += "\n";
  for (int64_t i = 0; i < u.samples; i++) {
    text += std::to_string(i);
    if (!ids.empty()) text += "," + std::to_string(ids[i]);
    text += fmt::format(",{},{:.9g},{:.9g},{:.9g},{:.9g}", u.predicted[i], u.agreement[i],
                        u.entropy[i], u.mutual_information[i], u.variance[i]);
    for (int64_t c = 0; c < u.classes; c++) {
      text += fmt::format(",{:.9g}", u.mean[static_cast<size_t>(i * u.classes + c)]);
    }
    if (!calibrated.empty()) {
      for (int64_t c = 0; c < u.classes; c++) {
        text += fmt::format(",{:.9g}", calibrated[static_cast<size_t>(i * u.classes + c)]);
      }
    }
    text += "\n";
  }
  return WriteFileAtomically(path,
                             {std::as_bytes(std::span<const char>(text.data(), text.size()))});
}

Status WriteNpz(const std::string& path, const loop::EnsembleUncertainty& u,
                const loop::StackedPredictions& stacked, const std::vector<float>& calibrated,
                std::optional<double> temperature, const std::vector<uint64_t>& ids) {
  NpzWriter npz;
  const auto n = static_cast<uint64_t>(u.samples);
  const auto c = static_cast<uint64_t>(u.classes);
  npz.Add("probabilities", store::Dtype::kFloat32, {n, c}, u.mean);
  npz.Add("predicted", store::Dtype::kInt64, {n}, u.predicted);
  npz.Add("entropy", store::Dtype::kFloat64, {n}, u.entropy);
  npz.Add("mutual_information", store::Dtype::kFloat64, {n}, u.mutual_information);
  npz.Add("variance", store::Dtype::kFloat64, {n}, u.variance);
  npz.Add("agreement", store::Dtype::kFloat64, {n}, u.agreement);
  npz.Add("member_probabilities", store::Dtype::kFloat32,
          {static_cast<uint64_t>(stacked.members), n, c}, stacked.data);
  if (temperature) {
    npz.Add("calibrated_probabilities", store::Dtype::kFloat32, {n, c}, calibrated);
    npz.Add("temperature", store::Dtype::kFloat64, {}, std::vector<double>{*temperature});
  }
  if (!ids.empty()) npz.Add("ids", store::Dtype::kUint64, {n}, ids);
  COHORT_ASSIGN_OR_RETURN(std::string bytes, npz.Finish());
  return WriteFileAtomically(path,
                             {std::as_bytes(std::span<const char>(bytes.data(), bytes.size()))});
}

// A regression run's CSV: per sample its id and, per target component (C order over the
// target shape), the mean, the total variance and its aleatoric and epistemic parts.
Status WriteRegressionCsv(const std::string& path, const loop::RegressionUncertainty& u,
                          const std::vector<uint64_t>& ids) {
  std::string text = ids.empty() ? "row" : "row,id";
  for (const char* what : {"mean", "total", "aleatoric", "epistemic"}) {
    for (int64_t d = 0; d < u.outputs; d++) text += fmt::format(",{}_{}", what, d);
  }
  text += "\n";
  for (int64_t i = 0; i < u.samples; i++) {
    text += std::to_string(i);
    if (!ids.empty()) text += "," + std::to_string(ids[i]);
    for (const std::vector<double>* column : {&u.mean, &u.total, &u.aleatoric, &u.epistemic}) {
      for (int64_t d = 0; d < u.outputs; d++) {
        text += fmt::format(",{:.9g}", (*column)[static_cast<size_t>(i * u.outputs + d)]);
      }
    }
    text += "\n";
  }
  return WriteFileAtomically(path,
                             {std::as_bytes(std::span<const char>(text.data(), text.size()))});
}

// A regression run's .npz: the ensemble's moments, shaped (n, *target_shape), and the members'
// own means and variances, (members, n, *target_shape), split out of their (n, 2, ...) files.
Status WriteRegressionNpz(const std::string& path, const loop::RegressionUncertainty& u,
                          const loop::StackedPredictions& stacked, const loop::RunTask& task,
                          const std::vector<uint64_t>& ids) {
  NpzWriter npz;
  const auto n = static_cast<uint64_t>(u.samples);
  std::vector<uint64_t> shape{n};
  shape.insert(shape.end(), task.target_shape.begin(), task.target_shape.end());
  npz.Add("mean", store::Dtype::kFloat64, shape, u.mean);
  npz.Add("total", store::Dtype::kFloat64, shape, u.total);
  npz.Add("aleatoric", store::Dtype::kFloat64, shape, u.aleatoric);
  npz.Add("epistemic", store::Dtype::kFloat64, shape, u.epistemic);
  const auto outputs = static_cast<size_t>(stacked.outputs);
  std::vector<float> means, variances;
  means.reserve(stacked.data.size() / 2);
  variances.reserve(stacked.data.size() / 2);
  for (size_t at = 0; at < stacked.data.size(); at += 2 * outputs) {
    means.insert(means.end(), stacked.data.begin() + at, stacked.data.begin() + at + outputs);
    variances.insert(variances.end(), stacked.data.begin() + at + outputs,
                     stacked.data.begin() + at + 2 * outputs);
  }
  std::vector<uint64_t> member_shape{static_cast<uint64_t>(stacked.members)};
  member_shape.insert(member_shape.end(), shape.begin(), shape.end());
  npz.Add("member_means", store::Dtype::kFloat32, member_shape, means);
  npz.Add("member_variances", store::Dtype::kFloat32, member_shape, variances);
  if (!ids.empty()) npz.Add("ids", store::Dtype::kUint64, {n}, ids);
  COHORT_ASSIGN_OR_RETURN(std::string bytes, npz.Finish());
  return WriteFileAtomically(path,
                             {std::as_bytes(std::span<const char>(bytes.data(), bytes.size()))});
}

// The flags that exclude or need each other.
Status CheckPredictOptions(const EnsemblePredictOptions& o) {
  const bool from_store = !o.store.empty() || !o.table.empty();
  if (from_store == !o.input.empty()) {
    return Status::InvalidArgument(
        "predict RUN_DIR needs exactly one input: --input FILE, or --store STORE --table TABLE");
  }
  if (from_store && (o.store.empty() || o.table.empty())) {
    return Status::InvalidArgument("--store and --table go together");
  }
  if (static_cast<int>(!o.calibrate_table.empty()) + static_cast<int>(o.temperature.has_value()) +
          static_cast<int>(o.calibrated) >
      1) {
    return Status::InvalidArgument(
        "--calibrate fits a temperature, --temperature gives one and --calibrated takes the "
        "loop's: pass one of them");
  }
  if (!o.calibrate_store.empty() && o.calibrate_table.empty()) {
    return Status::InvalidArgument("--calibrate-store needs --calibrate TABLE");
  }
  if (o.temperature && !loop::ValidTemperature(*o.temperature)) {
    return Status::InvalidArgument(
        fmt::format("--temperature {}: must be a finite number > 0", *o.temperature));
  }
  return Status::OK();
}

// What the members predict: a store table, or the input file imported into a scratch store.
struct PredictInput {
  std::string store_dir, table, what;
  uint64_t generation = 0;
  std::vector<uint64_t> ids;  // the table's (empty for a file: rows are its order)
  uint64_t rows = 0;
};

Result<PredictInput> StageInput(const EnsemblePredictOptions& o, const loop::RunReader& run,
                                const store::Table& train, const TempDir& tmp) {
  PredictInput in;
  if (!o.store.empty()) {
    COHORT_ASSIGN_OR_RETURN(auto snap, store::Snapshot::Open(o.store, o.generation));
    COHORT_ASSIGN_OR_RETURN(const store::Table* t, snap->table(o.table));
    in.what = fmt::format("{} table {} (generation {})", o.store, o.table, snap->generation());
    COHORT_RETURN_IF_ERROR(CheckFeatures(in.what, t->schema().feature_dtype,
                                         t->schema().feature_shape, train.schema(),
                                         run.config.store.train));
    in.store_dir = o.store;
    in.table = o.table;
    in.generation = snap->generation();
    in.ids = t->Ids();
    in.rows = t->size();
    return in;
  }
  COHORT_ASSIGN_OR_RETURN(HostArray x, ReadInputFile(o));
  COHORT_RETURN_IF_ERROR(
      CheckFeatures(o.input, x.dtype, x.row_shape(), train.schema(), run.config.store.train));
  if (x.rows() == 0) return Status::InvalidArgument(o.input + ": no samples");
  in.store_dir = tmp.path() + "/input-store";
  in.table = "input";
  COHORT_ASSIGN_OR_RETURN(in.generation, ImportToTempStore(in.store_dir, x));
  in.rows = x.rows();
  in.what = o.input;
  return in;
}

// The labelled table a temperature is fitted on (--calibrate), checked before any member runs.
struct Calibration {
  std::string store_dir, table, what;
  uint64_t generation = 0;
  std::vector<int64_t> labels;
  std::vector<uint64_t> ids;
};

Result<Calibration> StageCalibration(const EnsemblePredictOptions& o, const loop::RunReader& run,
                                     const store::Table& train) {
  Calibration cal;
  cal.store_dir = o.calibrate_store.empty() ? run.paths.store() : o.calibrate_store;
  cal.table = o.calibrate_table;
  COHORT_ASSIGN_OR_RETURN(auto snap, store::Snapshot::Open(cal.store_dir, std::nullopt));
  COHORT_ASSIGN_OR_RETURN(const store::Table* t, snap->table(cal.table));
  cal.generation = snap->generation();
  cal.what = fmt::format("{} table {} (generation {})", cal.store_dir, cal.table, cal.generation);
  COHORT_RETURN_IF_ERROR(CheckFeatures(cal.what, t->schema().feature_dtype,
                                       t->schema().feature_shape, train.schema(),
                                       run.config.store.train));
  if (t->schema().label_kind != store::LabelKind::kClass) {
    return Status::InvalidArgument(cal.what + ": --calibrate needs class labels, and it has " +
                                   (t->schema().label_kind == store::LabelKind::kNone
                                        ? std::string("none")
                                        : std::string("vector targets")));
  }
  if (t->size() == 0) return Status::InvalidArgument(cal.what + ": no samples to calibrate on");
  cal.labels = loop::ClassLabelsOf(*t);
  cal.ids = t->Ids();
  return cal;
}

// One `cohort-member predict` per member of `members` for one table, spread over the run's
// devices; returns each member's output file (config index, path).
class JobPlan {
 public:
  JobPlan(const EnsemblePredictOptions& o, const loop::RunReader& run, const TempDir& tmp)
      : o_(o), tmp_(tmp), devices_(run.config.devices) {
    if (devices_.empty()) devices_.push_back(launch::Device{});
    threads_ = std::max(1, run.config.threads_per_cpu_device);
    slots_ = devices_.size() * static_cast<size_t>(std::max(1, run.config.members_per_device));
  }

  std::vector<std::pair<size_t, std::string>> Add(const std::vector<loop::FinishedMember>& members,
                                                  const std::string& store_dir,
                                                  const std::string& table, uint64_t generation,
                                                  const std::string& tag) {
    const int cpus = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    std::vector<std::pair<size_t, std::string>> files;
    for (size_t i = 0; i < members.size(); i++) {
      const auto& m = members[i];
      const launch::Device& device = devices_[i % devices_.size()];
      MemberJob job;
      job.what = "member " + m.name;
      const std::string out = fmt::format("{}/{}-member-{}.npy", tmp_.path(), tag, i);
      job.spec.argv = {o_.member_binary, "predict",
                       "--store",        store_dir,
                       "--table",        table,
                       "--generation",   std::to_string(generation),
                       "--checkpoint",   m.checkpoint,
                       "--out",          out,
                       "--device",       device.is_cuda() ? "cuda:0" : "cpu",
                       "--threads",      std::to_string(threads_)};
      job.spec.env = launch::DeviceEnvironment(device, threads_, cpus);
      job.spec.stderr_path = fmt::format("{}/{}-member-{}.log", tmp_.path(), tag, i);
      jobs_.push_back(std::move(job));
      files.emplace_back(m.config_index, out);
    }
    return files;
  }

  Status Run() { return RunMemberJobs(std::move(jobs_), slots_); }

 private:
  const EnsemblePredictOptions& o_;
  const TempDir& tmp_;
  std::vector<launch::Device> devices_;
  int threads_ = 1;
  size_t slots_ = 1;
  std::vector<MemberJob> jobs_;
};

// The temperature fitted on the calibration table's predictions; says what it did there.
Result<double> FitTemperature(const Calibration& calibration,
                              const std::vector<std::pair<size_t, std::string>>& files,
                              const loop::RunTask& task) {
  COHORT_ASSIGN_OR_RETURN(loop::StackedPredictions stacked,
                          loop::StackPredictions(files, calibration.labels.size(), task));
  COHORT_ASSIGN_OR_RETURN(
      auto view, loop::MakeEnsemblePredictions(stacked.data, stacked.members, stacked.samples,
                                               stacked.classes));
  COHORT_RETURN_IF_ERROR(loop::CheckClassLabels(calibration.what, calibration.labels,
                                                calibration.ids, stacked.classes));
  COHORT_ASSIGN_OR_RETURN(loop::TemperatureFit fit,
                          loop::FitEnsembleTemperature(view, calibration.labels));
  fmt::print(
      "calibrated on {} ({} samples): temperature {:.4f}; there NLL {:.4f} -> {:.4f}, ECE "
      "{:.4f} -> {:.4f}, accuracy {:.4f}\n",
      calibration.what, fit.before.count, fit.temperature, fit.before.nll, fit.after.nll,
      fit.before.ece, fit.after.ece, fit.after.accuracy);
  return fit.temperature;
}

// Writes the ensemble's output for the input (.npz or .csv by o.out's name); returns what the
// last line adds about calibration.
Result<std::string> WriteOutput(const EnsemblePredictOptions& o, const PredictInput& in,
                                const loop::StackedPredictions& stacked, const loop::RunTask& task,
                                std::optional<double> temperature) {
  const bool csv = EndsWith(Lower(o.out), ".csv");
  if (task.regression) {
    COHORT_ASSIGN_OR_RETURN(
        auto view, loop::MakeRegressionPredictions(stacked.data, stacked.members, stacked.samples,
                                                   stacked.outputs));
    COHORT_ASSIGN_OR_RETURN(loop::RegressionUncertainty u,
                            loop::ComputeRegressionUncertainty(view));
    COHORT_RETURN_IF_ERROR(csv ? WriteRegressionCsv(o.out, u, in.ids)
                               : WriteRegressionNpz(o.out, u, stacked, task, in.ids));
    return std::string();
  }
  COHORT_ASSIGN_OR_RETURN(
      auto view, loop::MakeEnsemblePredictions(stacked.data, stacked.members, stacked.samples,
                                               stacked.classes));
  COHORT_ASSIGN_OR_RETURN(loop::EnsembleUncertainty u, loop::ComputeEnsembleUncertainty(view));
  std::vector<float> calibrated;
  std::string note;
  if (temperature) {
    COHORT_ASSIGN_OR_RETURN(calibrated, loop::ApplyTemperature(u.mean, u.classes, *temperature));
    note = fmt::format(" (calibrated probabilities at temperature {:.4f})", *temperature);
  }
  COHORT_RETURN_IF_ERROR(csv ? WriteCsv(o.out, u, calibrated, in.ids)
                             : WriteNpz(o.out, u, stacked, calibrated, temperature, in.ids));
  return note;
}

}  // namespace

Status RunEnsemblePredict(const EnsemblePredictOptions& o) {
  const auto started = std::chrono::steady_clock::now();
  COHORT_RETURN_IF_ERROR(CheckPredictOptions(o));
  COHORT_ASSIGN_OR_RETURN(loop::RunReader run, loop::OpenRunReader(o.run_dir));
  COHORT_ASSIGN_OR_RETURN(auto chosen, loop::NativeMembersOf(run, o.round, "cohort predict runs"));
  const int64_t round = chosen.first;
  COHORT_ASSIGN_OR_RETURN(const loop::RoundTrainTable trained_on,
                          loop::TrainTableOfRound(run, round));
  const store::Table& train = *trained_on.table;
  // The train table's labels make the run what it is, so they say what the members' files hold.
  const loop::RunTask task = loop::RunTaskOf(train);
  if (task.regression && (!o.calibrate_table.empty() || o.temperature || o.calibrated)) {
    return Status::InvalidArgument(
        o.run_dir +
        ": --calibrate, --calibrated and --temperature scale class probabilities, and this is a "
        "regression run");
  }
  std::optional<double> temperature = o.temperature;
  if (o.calibrated) {
    COHORT_ASSIGN_OR_RETURN(temperature, loop::RoundTemperature(run, round));
  }

  COHORT_ASSIGN_OR_RETURN(TempDir tmp, TempDir::Create());
  COHORT_ASSIGN_OR_RETURN(const PredictInput in, StageInput(o, run, train, tmp));
  std::optional<Calibration> calibration;
  if (!o.calibrate_table.empty()) {
    COHORT_ASSIGN_OR_RETURN(calibration, StageCalibration(o, run, train));
  }
  JobPlan plan(o, run, tmp);
  const auto files = plan.Add(chosen.second, in.store_dir, in.table, in.generation, "input");
  std::vector<std::pair<size_t, std::string>> calibration_files;
  if (calibration) {
    calibration_files = plan.Add(chosen.second, calibration->store_dir, calibration->table,
                                 calibration->generation, "calibrate");
  }
  COHORT_RETURN_IF_ERROR(plan.Run());

  COHORT_ASSIGN_OR_RETURN(loop::StackedPredictions stacked,
                          loop::StackPredictions(files, in.rows, task));
  if (calibration && !task.regression) {
    COHORT_ASSIGN_OR_RETURN(temperature, FitTemperature(*calibration, calibration_files, task));
  }
  COHORT_ASSIGN_OR_RETURN(const std::string calibrated_note,
                          WriteOutput(o, in, stacked, task, temperature));
  std::string names;
  for (const auto& m : chosen.second) names += (names.empty() ? "" : ", ") + m.name;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  fmt::print(
      "predicted {} samples of {} with the {} members of round {} ({}) in {:.1f} s: wrote {}{}\n",
      in.rows, in.what, chosen.second.size(), round, names, seconds, o.out, calibrated_note);
  return Status::OK();
}

void AddEnsemblePredictCommand(CLI::App& app, std::function<Status()>* run) {
  auto o = std::make_shared<EnsemblePredictOptions>();
  auto* cmd = app.add_subcommand(
      "predict",
      "Apply a run's ensemble to new data: mean probabilities, predicted class and uncertainty "
      "(regression: mean and aleatoric, epistemic and total variance; cohort predict "
      "--checkpoint C ... applies one checkpoint)");
  // The one-checkpoint form is cohort-member's (main.cc): its options are not this parser's.
  cmd->footer(
      "One checkpoint instead of a run's ensemble:\n"
      "  cohort predict --checkpoint C --store S --table T -o out.npy [--precision P] "
      "[--device D] [--threads N]\n"
      "  (cohort predict --checkpoint C --help lists its options)");
  cmd->add_option("run_dir", o->run_dir, "the run directory (runs/NAME)")->required();
  cmd->add_option("--round", o->round,
                  "the round whose members predict (default: the last "
                  "finished round)");
  cmd->add_option("--input,-i", o->input, "samples: a .npy, IDX or .csv file");
  cmd->add_option("--label-column", o->label_column, "CSV input: the column to leave out");
  cmd->add_option("--store", o->store, "samples: a store directory (with --table)");
  cmd->add_option("--table", o->table, "the store table");
  cmd->add_option("--generation,-g", o->generation, "the store generation (default: current)");
  cmd->add_option("--calibrate", o->calibrate_table,
                  "fit a temperature to the ensemble on this labelled table (of the run's store, "
                  "or --calibrate-store) and write calibrated probabilities too");
  cmd->add_option("--calibrate-store", o->calibrate_store,
                  "the store of the --calibrate table (default: the run's store)");
  cmd->add_option("--temperature", o->temperature,
                  "write probabilities calibrated at this temperature (one --calibrate printed)");
  cmd->add_flag("--calibrated", o->calibrated,
                "write probabilities calibrated at the temperature the loop fitted to the "
                "round's ensemble on the test table (cohort status: test_temperature)");
  cmd->add_option("--out,-o", o->out,
                  "output: .npz (default predictions.npz), or .csv for a CSV table");
  cmd->callback([o, run] {
    o->member_binary = SiblingExecutable("cohort-member");
    *run = [o] { return RunEnsemblePredict(*o); };
  });
}

}  // namespace cohort::cli
