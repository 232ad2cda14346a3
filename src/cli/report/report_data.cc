#include "cli/report/report_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <span>

#include "cli/report/png.h"
#include "common/time_text.h"
#include "loop/config/class_labels.h"
#include "loop/ensemble/predictions.h"
#include "loop/run/run_reader.h"
#include "store/snapshot.h"
#include "store/store.h"

namespace cohort::cli {

namespace {

std::optional<double> Since(const std::optional<double>& origin, const std::string& when) {
  auto t = ParseIso8601(when);
  if (!origin || !t) return std::nullopt;
  return *t - *origin;
}

std::optional<int64_t> ClassLabel(const store::Table& table, uint64_t row) {
  if (table.schema().label_kind != store::LabelKind::kClass) return std::nullopt;
  const std::byte* p = table.label(row);
  if (p == nullptr) return std::nullopt;
  int64_t v = 0;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// (H, W), (1, H, W), (3, H, W), (H, W, 1) or (H, W, 3) features are images.
struct ImageLayout {
  int height = 0, width = 0, channels = 0;
  bool channels_first = false;
};

std::optional<ImageLayout> ImageLayoutOf(const store::TableSchema& schema) {
  const auto& s = schema.feature_shape;
  auto small = [](uint64_t d) { return d >= 4 && d <= 512; };
  if (s.size() == 2 && small(s[0]) && small(s[1])) {
    return ImageLayout{static_cast<int>(s[0]), static_cast<int>(s[1]), 1, false};
  }
  if (s.size() == 3 && (s[0] == 1 || s[0] == 3) && small(s[1]) && small(s[2])) {
    return ImageLayout{static_cast<int>(s[1]), static_cast<int>(s[2]), static_cast<int>(s[0]),
                       true};
  }
  if (s.size() == 3 && (s[2] == 1 || s[2] == 3) && small(s[0]) && small(s[1])) {
    return ImageLayout{static_cast<int>(s[0]), static_cast<int>(s[1]), static_cast<int>(s[2]),
                       false};
  }
  return std::nullopt;
}

// A PNG of one sample's features: uint8 as they are, float32 scaled from its min..max.
std::string SamplePng(const store::Table& table, uint64_t row, const ImageLayout& l) {
  const size_t n = static_cast<size_t>(l.height) * l.width * l.channels;
  std::vector<double> v(n);
  const std::byte* p = table.features(row);
  const bool u8 = table.schema().feature_dtype == store::Dtype::kUint8;
  for (size_t i = 0; i < n; i++) {
    if (u8) {
      v[i] = static_cast<double>(static_cast<uint8_t>(p[i]));
    } else {
      float f = 0;
      std::memcpy(&f, p + i * sizeof(float), sizeof(float));
      v[i] = std::isfinite(f) ? f : 0.0;
    }
  }
  double lo = 0, hi = 255;
  if (!u8) {
    lo = *std::min_element(v.begin(), v.end());
    hi = *std::max_element(v.begin(), v.end());
  }
  const double scale = hi > lo ? 255.0 / (hi - lo) : 0;
  std::vector<uint8_t> px(n);
  for (int y = 0; y < l.height; y++) {
    for (int x = 0; x < l.width; x++) {
      for (int c = 0; c < l.channels; c++) {
        const size_t src = l.channels_first
                               ? (static_cast<size_t>(c) * l.height + y) * l.width + x
                               : (static_cast<size_t>(y) * l.width + x) * l.channels + c;
        const size_t dst = (static_cast<size_t>(y) * l.width + x) * l.channels + c;
        px[dst] = static_cast<uint8_t>(std::lround(std::clamp((v[src] - lo) * scale, 0.0, 255.0)));
      }
    }
  }
  return EncodePng(px, l.width, l.height, l.channels);
}

void GatherStore(const loop::RunReader& run, const GatherOptions& options, ReportData* out) {
  const std::string store_dir = run.paths.store();
  auto history = store::ReadHistory(store_dir);
  if (!history.ok()) {
    out->store_error = history.status().message();
    return;
  }
  for (const store::Manifest& m : *history) {
    ReportGeneration g;
    g.generation = m.generation;
    g.created = m.created;
    g.note = m.note;
    for (const auto& [name, t] : m.tables) g.rows[name] = t.row_count;
    out->generations.push_back(std::move(g));
  }
  for (ReportRound& r : out->rounds) {
    auto in = store::Snapshot::Open(store_dir, r.record.input_generation);
    if (in.ok()) {
      auto t = (*in)->table(out->train_table);
      if (t.ok()) r.labels_in = (*t)->size();
    }
    if (!r.record.output_generation || *r.record.output_generation == r.record.input_generation) {
      continue;
    }
    auto diff =
        store::DiffGenerations(store_dir, r.record.input_generation, *r.record.output_generation);
    if (diff.ok()) {
      std::map<std::string, std::set<uint64_t>> added, removed;
      for (const auto& [table, d] : *diff) {
        added[table].insert(d.added.begin(), d.added.end());
        removed[table].insert(d.removed.begin(), d.removed.end());
      }
      for (const auto& [table, d] : *diff) {
        ReportTableChange c;
        c.added = static_cast<int64_t>(d.added.size());
        c.removed = static_cast<int64_t>(d.removed.size());
        for (const auto& [other, ids] : removed) {
          if (other == table) continue;
          for (uint64_t id : d.added) c.moved_in += ids.count(id);
        }
        for (const auto& [other, ids] : added) {
          if (other == table) continue;
          for (uint64_t id : d.removed) c.moved_out += ids.count(id);
        }
        r.changes[table] = c;
      }
    }
    // The picks' labels and images: they sit in the train table of the output generation.
    auto snap = store::Snapshot::Open(store_dir, *r.record.output_generation);
    if (!snap.ok() || r.picks.empty()) continue;
    auto table = (*snap)->table(out->train_table);
    if (!table.ok()) continue;
    std::vector<uint64_t> ids;
    for (const auto& p : r.picks) ids.push_back(static_cast<uint64_t>(p.sample_id));
    auto rows = (*table)->RowsOfIds(ids);
    if (!rows.ok()) continue;
    for (uint64_t row : *rows) r.pick_labels.push_back(ClassLabel(**table, row));
    auto layout = ImageLayoutOf((*table)->schema());
    if (!layout) continue;
    for (size_t i = 0; i < rows->size() && static_cast<int>(i) < options.images_per_round; i++) {
      ReportPickImage img;
      img.sample_id = r.picks[i].sample_id;
      img.rank = static_cast<int64_t>(i);
      img.score = r.picks[i].score;
      img.label = r.pick_labels[i];
      img.png = SamplePng(**table, (*rows)[i], *layout);
      r.images.push_back(std::move(img));
    }
  }
}

void GatherReliability(const loop::RunReader& run, ReportData* out) {
  auto members = loop::FinishedMembersOf(run, std::nullopt);
  if (!members.ok()) {
    out->reliability_error = members.status().message();
    return;
  }
  const int64_t round = members->first;
  const loop::RoundRecord* record = nullptr;
  for (const ReportRound& r : out->rounds) {
    if (r.record.round == round) record = &r.record;
  }
  if (record == nullptr) return;
  auto snap = store::Snapshot::Open(run.paths.store(), record->input_generation);
  if (!snap.ok()) {
    out->reliability_error = snap.status().message();
    return;
  }
  auto table = (*snap)->table(out->test_table);
  if (!table.ok()) {
    out->reliability_error = table.status().message();
    return;
  }
  std::vector<std::pair<size_t, std::string>> files;
  for (const auto& m : members->second) {
    if (!m.test_predictions.empty()) files.emplace_back(m.config_index, m.test_predictions);
  }
  if (files.empty()) {
    out->reliability_error =
        "the members of round " + std::to_string(round) + " wrote no test predictions";
    return;
  }
  loop::RunTask task;
  if (out->regression) {
    auto train = (*snap)->table(out->train_table);
    if (!train.ok()) {
      out->reliability_error = train.status().message();
      return;
    }
    task = loop::RunTaskOf(**train);
  }
  auto stacked = loop::StackPredictions(files, (*table)->size(), task);
  if (!stacked.ok()) {
    out->reliability_error = stacked.status().message();
    return;
  }
  if (task.regression) {
    // The loop's own metrics (Controller::ScoreEnsemble) on the same files and targets: the
    // ensemble's calibration error here is the journal's rounds.test_calibration.
    if ((*table)->schema().label_kind != store::LabelKind::kVector) {
      out->reliability_error = "the test table has no float targets";
      return;
    }
    auto view = loop::MakeRegressionPredictions(stacked->data, stacked->members, stacked->samples,
                                                stacked->outputs);
    if (!view.ok()) {
      out->reliability_error = view.status().message();
      return;
    }
    auto metrics = loop::ComputeRegressionMetrics(*view, loop::TargetsOf(**table));
    if (!metrics.ok()) {
      out->reliability_error = metrics.status().message();
      return;
    }
    out->reliability_round = round;
    out->reliability_members = stacked->members;
    out->coverage = std::move(*metrics);
    for (size_t index : stacked->member_index) {
      out->coverage_members.push_back(index < out->members.size() ? out->members[index]
                                                                  : std::to_string(index));
    }
    return;
  }
  std::vector<int64_t> labels;
  for (uint64_t i = 0; i < (*table)->size(); i++) {
    auto l = ClassLabel(**table, i);
    if (!l) {
      out->reliability_error = "the test table has no class labels";
      return;
    }
    labels.push_back(*l);
  }
  auto view = loop::MakeEnsemblePredictions(stacked->data, stacked->members, stacked->samples,
                                            stacked->classes);
  if (!view.ok()) {
    out->reliability_error = view.status().message();
    return;
  }
  auto metrics = loop::ComputeEnsembleMetrics(*view, labels);
  if (!metrics.ok()) {
    out->reliability_error = metrics.status().message();
    return;
  }
  out->reliability_round = round;
  out->reliability_members = stacked->members;
  out->reliability = metrics->ensemble;
  for (size_t i = 0; i < metrics->members.size(); i++) {
    const size_t index = stacked->member_index[i];
    ReportMemberReliability member;
    member.name = index < out->members.size() ? out->members[index] : std::to_string(index);
    member.metrics = std::move(metrics->members[i]);
    const std::span<const float> probabilities(view->row(static_cast<int64_t>(i), 0),
                                               static_cast<size_t>(view->samples * view->classes));
    if (auto range = loop::PerfectlyCalibratedEce(probabilities, view->classes); range.ok()) {
      member.ece_range = *range;
    }
    out->reliability_by_member.push_back(std::move(member));
  }
  if (auto range = loop::PerfectlyCalibratedEce(loop::EnsembleMean(*view), view->classes);
      range.ok()) {
    out->reliability_ece_range = *range;
  }
  // Fails only on a table of one row, where there is nothing to cross-fit: no second diagram.
  if (auto calibrated = loop::CrossFitEnsembleTemperature(*view, labels); calibrated.ok()) {
    if (auto range = loop::PerfectlyCalibratedEce(calibrated->probabilities, view->classes);
        range.ok()) {
      out->reliability_calibrated_ece_range = *range;
    }
    out->reliability_calibrated = std::move(*calibrated);
  }
}

}  // namespace

Result<ReportData> GatherReport(const std::string& run_dir, const GatherOptions& options) {
  COHORT_ASSIGN_OR_RETURN(loop::RunReader run, loop::OpenRunReader(run_dir));
  ReportData out;
  out.run_dir = run.paths.root;
  out.name = run.run.name;
  out.status = run.StatusText();
  out.controller_pid = run.controller_pid;
  out.started_at = run.run.started_at;
  out.ended_at = run.run.ended_at.value_or("");
  out.config_toml = run.run.config_toml;
  out.source_store = run.run.source_store;
  out.source_generation = run.run.source_generation;
  out.train_table = run.config.store.train;
  out.pool_table = run.config.store.pool;
  out.test_table = run.config.store.test;
  out.strategy = run.config.acquisition.strategy;
  for (const auto& m : run.config.members) out.members.push_back(m.name);
  for (const auto& d : run.config.devices) out.devices.push_back(d.ToString());
  out.generated_at = NowIso8601();

  const std::optional<double> origin = ParseIso8601(run.run.started_at);
  COHORT_ASSIGN_OR_RETURN(auto rounds, run.journal->RoundsOf(run.run.id));
  for (const loop::RoundRecord& rec : rounds) {
    ReportRound r;
    r.record = rec;
    if (rec.ended_at) {
      auto a = ParseIso8601(rec.started_at), b = ParseIso8601(*rec.ended_at);
      if (a && b) r.wall_s = *b - *a;
    }
    COHORT_ASSIGN_OR_RETURN(r.picks, run.journal->AcquisitionsOf(run.run.id, rec.round));
    COHORT_ASSIGN_OR_RETURN(r.member_metrics, run.journal->MemberMetricsOf(run.run.id, rec.round));
    COHORT_ASSIGN_OR_RETURN(auto attempts, run.journal->AttemptsOfRound(run.run.id, rec.round));
    for (const loop::AttemptRecord& a : attempts) {
      ReportAttempt ra;
      ra.record = a;
      ra.start_s = Since(origin, a.started_at);
      if (a.ended_at) ra.end_s = Since(origin, *a.ended_at);
      COHORT_ASSIGN_OR_RETURN(ra.epochs, run.journal->EpochsOf(a.id));
      out.attempts.push_back(std::move(ra));
    }
    out.rounds.push_back(std::move(r));
  }
  std::stable_sort(out.attempts.begin(), out.attempts.end(),
                   [](const ReportAttempt& a, const ReportAttempt& b) {
                     return a.record.started_at < b.record.started_at;
                   });
  // What kind of run: the train table's labels decide, as they did when the run started.
  // A store that cannot be read leaves it to the journal: only regression rounds have an RMSE.
  std::optional<uint64_t> first_generation;
  if (!out.rounds.empty()) first_generation = out.rounds.front().record.input_generation;
  bool known = false;
  if (auto snap = store::Snapshot::Open(run.paths.store(), first_generation); snap.ok()) {
    if (auto train = (*snap)->table(out.train_table); train.ok()) {
      out.regression = loop::RunTaskOf(**train).regression;
      known = true;
    }
  }
  if (!known) {
    for (const ReportRound& r : out.rounds) out.regression |= r.record.test.rmse.has_value();
  }
  GatherStore(run, options, &out);
  GatherReliability(run, &out);
  return out;
}

}  // namespace cohort::cli
