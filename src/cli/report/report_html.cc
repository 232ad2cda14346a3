#include "cli/report/report_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <span>

#include "cli/report/png.h"
#include "cli/report/svg_chart.h"

namespace cohort::cli {

namespace {

using svg::Escape;

constexpr const char* kStyle = R"(
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
  color: #1a1a1a; background: #fff; margin: 0; }
main { max-width: 1100px; margin: 0 auto; padding: 16px 24px 48px; }
header.top { border-bottom: 2px solid #0072b2; margin-bottom: 8px; padding-bottom: 6px; }
h1 { font-size: 22px; margin: 8px 0 2px; }
h2 { font-size: 17px; margin: 28px 0 6px; border-bottom: 1px solid #ddd; padding-bottom: 3px; }
h3 { font-size: 14px; margin: 14px 0 4px; }
p.lead { color: #555; margin: 0; }
.status { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px;
  font-weight: 600; color: #fff; background: #555; vertical-align: middle; }
.status.finished { background: #009e73; } .status.running { background: #0072b2; }
.status.failed { background: #d55e00; } .status.stopped, .status.interrupted { background: #b07d00; }
.banner { background: #e8f3fb; border: 1px solid #56b4e9; padding: 6px 10px; margin: 10px 0; }
nav { font-size: 13px; margin: 6px 0 0; } nav a { margin-right: 12px; color: #0072b2; }
.facts { display: grid; grid-template-columns: repeat(auto-fill, minmax(200px, 1fr));
  gap: 6px 18px; margin: 10px 0; }
.fact b { display: block; font-size: 18px; } .fact span { color: #555; font-size: 12px; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
svg.chart { background: #fff; font-size: 11px; max-width: 100%; height: auto; }
svg.chart .bg { fill: #fff; }
svg.chart .chart-title { font-size: 13px; font-weight: 600; fill: #1a1a1a; }
svg.chart .axis-label { font-size: 12px; fill: #333; }
svg.chart .tick { fill: #444; } svg.chart .grid { stroke: #e6e6e6; }
svg.chart .axis, svg.chart .tickmark { stroke: #333; }
svg.chart .legend text { fill: #222; }
svg.chart .note, svg.chart .marker-label { fill: #666; font-size: 11px; }
svg.chart .marker { stroke: #888; stroke-dasharray: 4 3; }
svg.chart .diagonal { stroke: #888; stroke-dasharray: 5 4; }
svg.chart .span-label { fill: #fff; font-size: 10px; dominant-baseline: middle; }
svg.chart .cross { stroke: #000; stroke-width: 2; fill: none; }
table { border-collapse: collapse; font-size: 12.5px; margin: 6px 0; }
th, td { border-bottom: 1px solid #e3e3e3; padding: 3px 10px 3px 0; text-align: right; }
th { font-weight: 600; color: #333; } td.l, th.l { text-align: left; }
.muted { color: #666; } .bad { color: #b34400; }
.grid-images { display: grid; grid-template-columns: repeat(auto-fill, 76px); gap: 6px;
  max-width: 660px; }
figure.pick { margin: 0; text-align: center; font-size: 11px; width: 72px; }
figure.pick img { width: 64px; height: 64px; image-rendering: pixelated; border: 1px solid #ccc; }
pre { background: #f6f6f6; padding: 8px 10px; overflow: auto; font-size: 12px; max-height: 420px; }
select { font: inherit; }
@media print { nav, .banner select { display: none; } h2 { break-after: avoid; }
  svg.chart { break-inside: avoid; } [data-round-panel][hidden] { display: block !important; } }
)";

// Chooses which round's loss curves show; the only script in the page.
constexpr const char* kScript = R"(
document.querySelectorAll('select[data-panels]').forEach(function (sel) {
  function show() {
    document.querySelectorAll('[data-round-panel="' + sel.dataset.panels + '"]').forEach(
      function (p) { p.hidden = p.dataset.round !== sel.value; });
  }
  sel.addEventListener('change', show);
  show();
});
)";

std::string F(double v, int digits = 4) { return fmt::format("{:.{}f}", v, digits); }
std::string Opt(const std::optional<double>& v, int digits = 4) {
  return v ? F(*v, digits) : "&ndash;";
}

std::string Seconds(double s) {
  if (s < 120) return fmt::format("{:.1f} s", s);
  if (s < 7200) return fmt::format("{:.1f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

std::string Fact(const std::string& value, const std::string& what) {
  return "<div class=\"fact\"><b>" + value + "</b><span>" + Escape(what) + "</span></div>";
}

const ReportRound* LastDone(const ReportData& d) {
  const ReportRound* last = nullptr;
  for (const auto& r : d.rounds) {
    if (r.record.status == loop::RoundStatus::kDone) last = &r;
  }
  return last;
}

std::string Summary(const ReportData& d) {
  std::string s = "<section id=\"summary\"><div class=\"facts\">";
  int64_t done = 0;
  for (const auto& r : d.rounds) done += r.record.status == loop::RoundStatus::kDone;
  s += Fact(fmt::format("{} of {}", done, d.rounds.size()), "rounds done of started");
  const ReportRound* last = LastDone(d);
  if (last != nullptr && last->record.test.accuracy) {
    s += Fact(F(*last->record.test.accuracy),
              fmt::format("test accuracy after round {}", last->record.round));
  }
  if (last != nullptr && last->record.test.rmse) {
    s += Fact(F(*last->record.test.rmse),
              fmt::format("test RMSE after round {}", last->record.round));
  }
  if (last != nullptr && last->record.labels_total) {
    s += Fact(std::to_string(*last->record.labels_total), "labels after the last round");
  }
  s += Fact(std::to_string(d.members.size()), "members");
  s += Fact(std::to_string(d.devices.size()), "devices");
  int64_t retries = 0, failures = 0;
  for (const auto& a : d.attempts) {
    retries += a.record.attempt > 1;
    failures += a.record.status == loop::AttemptStatus::kFailed ||
                a.record.status == loop::AttemptStatus::kKilled;
  }
  s += Fact(fmt::format("{} / {}", failures, retries), "failed or killed attempts / retries");
  double run_s = 0;
  for (const auto& a : d.attempts) run_s = std::max(run_s, a.end_s.value_or(a.start_s.value_or(0)));
  for (const auto& r : d.rounds) (void)r;
  s += Fact(Seconds(run_s), "from start to the last attempt's end");
  s += "</div></section>\n";
  return s;
}

// ---- metrics

struct MetricDef {
  const char* id;     // chart ids: ID-by-round, ID-by-labels
  const char* key;    // member_metrics key
  const char* title;  // chart title: TITLE by round
  const char* label;  // axis label
  std::optional<double> loop::EnsembleTestMetrics::*field;
  // The same metric of the calibrated ensemble (loop/ensemble/calibration.h), or null.
  std::optional<double> loop::EnsembleTestMetrics::*calibrated = nullptr;
};

// What the loop journals for each kind of run (Controller::ScoreEnsemble).
constexpr MetricDef kClassificationMetrics[] = {
    {"accuracy", "accuracy", "Accuracy", "test accuracy (fraction correct)",
     &loop::EnsembleTestMetrics::accuracy},
    {"nll", "nll", "NLL", "test NLL (nats per sample)", &loop::EnsembleTestMetrics::nll,
     &loop::EnsembleTestMetrics::nll_calibrated},
    {"ece", "ece", "ECE", "test ECE (calibration error)", &loop::EnsembleTestMetrics::ece,
     &loop::EnsembleTestMetrics::ece_calibrated},
};
constexpr MetricDef kRegressionMetrics[] = {
    {"rmse", "rmse", "RMSE", "test RMSE (target units)", &loop::EnsembleTestMetrics::rmse},
    {"mae", "mae", "MAE", "test MAE (target units)", &loop::EnsembleTestMetrics::mae},
    {"nll", "nll", "NLL", "test NLL (nats per target component)", &loop::EnsembleTestMetrics::nll},
    {"calibration", "calibration_error", "Calibration error", "test calibration (coverage gap)",
     &loop::EnsembleTestMetrics::calibration_error},
};

// A regression run's numbers behind the charts: the ensemble's four metrics and each member's
// RMSE per round.
std::string RegressionMetricsTable(const ReportData& d) {
  std::string s =
      "<table><tr><th>round</th><th>labels</th><th>RMSE</th><th>MAE</th><th>NLL</th>"
      "<th>calibration error</th>";
  for (const auto& m : d.members) s += "<th>" + Escape(m) + " RMSE</th>";
  s += "</tr>";
  for (const auto& r : d.rounds) {
    s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
                     r.record.round, r.labels_in ? std::to_string(*r.labels_in) : "&ndash;",
                     Opt(r.record.test.rmse), Opt(r.record.test.mae), Opt(r.record.test.nll),
                     Opt(r.record.test.calibration_error));
    for (const auto& m : d.members) {
      auto it = r.member_metrics.find(m);
      std::optional<double> v;
      if (it != r.member_metrics.end() && it->second.count("rmse")) v = it->second.at("rmse");
      s += "<td>" + Opt(v) + "</td>";
    }
    s += "</tr>";
  }
  return s + "</table>";
}

std::string MetricsSection(const ReportData& d) {
  std::string s = "<section id=\"metrics\"><h2>Test metrics</h2>";
  if (d.regression) {
    s += fmt::format(
        "<p class=\"muted\">The ensemble (mean of the members' means, black) and each member "
        "on the <code>{}</code> table, after each round's training. Labels: rows of "
        "<code>{}</code> the round trained on. NLL: Gaussian, per target component (the "
        "ensemble's is that of the members' mixture). Calibration error: the mean over {} "
        "nominal levels of how far the observed coverage of the central predictive intervals "
        "is from the nominal one.</p>",
        Escape(d.test_table), Escape(d.train_table), loop::kCoverageLevels.size());
  } else {
    s += fmt::format(
        "<p class=\"muted\">The ensemble (mean of the members' probabilities, black) and each "
        "member on the <code>{}</code> table, after each round's training; grey, the ensemble "
        "calibrated by one temperature, each half of the table at the temperature fitted on the "
        "other half. Labels: rows of <code>{}</code> the round trained on. ECE: 15 equal-width "
        "confidence bins.</p>",
        Escape(d.test_table), Escape(d.train_table));
  }
  const std::span<const MetricDef> defs =
      d.regression ? std::span<const MetricDef>(kRegressionMetrics) : kClassificationMetrics;
  s += "<div class=\"charts\">";
  for (const MetricDef& m : defs) {
    for (bool by_labels : {false, true}) {
      svg::XYChart c;
      c.id = fmt::format("{}-by-{}", m.id, by_labels ? "labels" : "round");
      c.title = fmt::format("{} by {}", m.title, by_labels ? "labels used" : "round");
      c.x.label = by_labels ? "labels trained on (rows of " + d.train_table + ")" : "round";
      c.x.integer = true;
      c.y.label = m.label;
      c.width = 500;
      c.height = 280;
      svg::Series ens;
      ens.name = "ensemble";
      ens.color = "#000000";
      ens.stroke_width = 3;
      svg::Series calibrated;
      calibrated.name = "ensemble, calibrated";
      calibrated.color = "#7a7a7a";
      calibrated.stroke_width = 2.5;
      std::vector<svg::Series> members(d.members.size());
      for (size_t i = 0; i < d.members.size(); i++) {
        members[i].name = d.members[i];
        members[i].color = svg::PaletteColor(i);
        members[i].stroke_width = 1.3;
        members[i].dashed = true;
      }
      for (const auto& r : d.rounds) {
        double x = static_cast<double>(r.record.round);
        if (by_labels) {
          if (!r.labels_in) continue;
          x = static_cast<double>(*r.labels_in);
        }
        if (auto v = r.record.test.*(m.field)) {
          ens.x.push_back(x);
          ens.y.push_back(*v);
          ens.tips.push_back(
              fmt::format("round {}: ensemble {} {:.4f}", r.record.round, m.key, *v));
        }
        if (m.calibrated != nullptr) {
          if (auto v = r.record.test.*(m.calibrated)) {
            calibrated.x.push_back(x);
            calibrated.y.push_back(*v);
            calibrated.tips.push_back(
                fmt::format("round {}: ensemble {} {:.4f} calibrated (temperature {:.3f})",
                            r.record.round, m.key, *v, r.record.test.temperature.value_or(1)));
          }
        }
        for (size_t i = 0; i < d.members.size(); i++) {
          auto it = r.member_metrics.find(d.members[i]);
          if (it == r.member_metrics.end()) continue;
          auto v = it->second.find(m.key);
          if (v == it->second.end()) continue;
          members[i].x.push_back(x);
          members[i].y.push_back(v->second);
          members[i].tips.push_back(fmt::format("round {}: {} {} {:.4f}", r.record.round,
                                                d.members[i], m.key, v->second));
        }
      }
      for (auto& ms : members) c.series.push_back(std::move(ms));
      c.series.push_back(std::move(ens));
      if (!calibrated.x.empty()) c.series.push_back(std::move(calibrated));
      s += svg::RenderXY(c);
    }
  }
  s += "</div>";
  if (d.regression) return s + RegressionMetricsTable(d) + "</section>\n";
  // The numbers behind the charts.
  s += "<table><tr><th>round</th><th>labels</th><th>accuracy</th><th>NLL</th><th>Brier</th>"
       "<th>ECE</th><th>NLL, calibrated</th><th>ECE, calibrated</th><th>temperature</th>";
  for (const auto& m : d.members) s += "<th>" + Escape(m) + " acc.</th>";
  s += "</tr>";
  for (const auto& r : d.rounds) {
    const loop::EnsembleTestMetrics& test = r.record.test;
    s += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td>",
        r.record.round, r.labels_in ? std::to_string(*r.labels_in) : "&ndash;", Opt(test.accuracy),
        Opt(test.nll), Opt(test.brier), Opt(test.ece), Opt(test.nll_calibrated),
        Opt(test.ece_calibrated), Opt(test.temperature));
    for (const auto& m : d.members) {
      auto it = r.member_metrics.find(m);
      std::optional<double> v;
      if (it != r.member_metrics.end() && it->second.count("accuracy")) {
        v = it->second.at("accuracy");
      }
      s += "<td>" + Opt(v) + "</td>";
    }
    s += "</tr>";
  }
  s += "</table></section>\n";
  return s;
}

// ---- timeline

const char* AttemptColor(loop::AttemptStatus s) {
  switch (s) {
    case loop::AttemptStatus::kDone:
      return svg::kDoneColor;
    case loop::AttemptStatus::kFailed:
      return svg::kFailedColor;
    case loop::AttemptStatus::kKilled:
      return svg::kKilledColor;
    case loop::AttemptStatus::kInterrupted:
      return svg::kInterruptedColor;
    case loop::AttemptStatus::kRunning:
      return svg::kRunningColor;
  }
  return svg::kDoneColor;
}

std::string TimelineSection(const ReportData& d) {
  std::string s = "<section id=\"timeline\"><h2>Device timeline</h2>";
  s += "<p class=\"muted\">Every member attempt on its device, from its start to its end "
       "(training, then predicting the pool and test tables). Failed and killed attempts end "
       "in a cross; a retry has a dashed outline; gaps are idle device time. Hover a bar for "
       "its member, round, attempt and how it ended.</p>";
  svg::Timeline t;
  t.id = "timeline";
  t.title = "Member attempts per device";
  t.x.label = "time since the run started (s)";
  t.lane_label = "device";
  // Lanes: one per device; attempts overlapping on a device (members_per_device > 1) get
  // extra lanes.
  std::vector<std::string> devices = d.devices;
  for (const auto& a : d.attempts) {
    if (std::find(devices.begin(), devices.end(), a.record.device) == devices.end()) {
      devices.push_back(a.record.device);
    }
  }
  double now = 0;
  for (const auto& a : d.attempts) now = std::max(now, a.end_s.value_or(a.start_s.value_or(0)));
  struct Lane {
    std::string device;
    double busy_until = -1e300;
  };
  std::vector<Lane> lanes;
  lanes.reserve(devices.size());
  for (const auto& dev : devices) lanes.push_back({dev});
  for (const auto& a : d.attempts) {
    if (!a.start_s) continue;
    const double end = a.end_s.value_or(now);
    size_t lane = lanes.size();
    for (size_t i = 0; i < lanes.size(); i++) {
      if (lanes[i].device == a.record.device && lanes[i].busy_until <= *a.start_s + 1e-6) {
        lane = i;
        break;
      }
    }
    if (lane == lanes.size()) {
      // Put the extra lane right after the device's last one.
      size_t after = 0;
      for (size_t i = 0; i < lanes.size(); i++) {
        if (lanes[i].device == a.record.device) after = i + 1;
      }
      lanes.insert(lanes.begin() + static_cast<std::ptrdiff_t>(after), Lane{a.record.device});
      for (auto& sp : t.spans) sp.lane += sp.lane >= after;
      lane = after;
    }
    lanes[lane].busy_until = end;
    svg::Timeline::Span sp;
    sp.lane = lane;
    sp.start = *a.start_s;
    sp.end = end;
    sp.label = a.record.member;
    sp.color = AttemptColor(a.record.status);
    sp.cross = a.record.status == loop::AttemptStatus::kFailed ||
               a.record.status == loop::AttemptStatus::kKilled;
    sp.retry = a.record.attempt > 1;
    sp.tip = fmt::format("{} round {} attempt {} on {}: {} ({:.2f} s){}", a.record.member,
                         a.record.round, a.record.attempt, a.record.device,
                         loop::AttemptStatusName(a.record.status), end - *a.start_s,
                         a.record.exit ? ": " + *a.record.exit : "");
    t.spans.push_back(std::move(sp));
  }
  // A device's extra lanes (members_per_device > 1) are "cpu:0 #2", "#3", ...
  for (size_t i = 0, n = 1; i < lanes.size(); i++) {
    n = i > 0 && lanes[i].device == lanes[i - 1].device ? n + 1 : 1;
    t.lanes.push_back(n == 1 ? lanes[i].device : fmt::format("#{}", n));
  }
  std::set<int64_t> marked;
  for (const auto& a : d.attempts) {
    if (!a.start_s || marked.count(a.record.round)) continue;
    marked.insert(a.record.round);
    t.markers.emplace_back(*a.start_s, fmt::format("round {}", a.record.round));
  }
  t.legend = {{"done", svg::kDoneColor},
              {"failed (crossed)", svg::kFailedColor},
              {"killed by cohort (crossed)", svg::kKilledColor},
              {"interrupted", svg::kInterruptedColor},
              {"running", svg::kRunningColor}};
  s += svg::RenderTimeline(t);
  // The attempts that did not finish, with why.
  std::string rows;
  for (const auto& a : d.attempts) {
    if (a.record.status == loop::AttemptStatus::kDone ||
        a.record.status == loop::AttemptStatus::kRunning) {
      continue;
    }
    rows += fmt::format(
        "<tr><td>{}</td><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td>"
        "<td class=\"l\">{}</td><td class=\"l bad\">{}</td></tr>",
        a.record.round, Escape(a.record.member), a.record.attempt, Escape(a.record.device),
        loop::AttemptStatusName(a.record.status), Escape(a.record.exit.value_or("")));
  }
  if (!rows.empty()) {
    s += "<h3>Attempts that did not finish</h3><table><tr><th>round</th><th class=\"l\">member"
         "</th><th>attempt</th><th class=\"l\">device</th><th class=\"l\">status</th>"
         "<th class=\"l\">exit</th></tr>" +
         rows + "</table>";
  }
  s += "</section>\n";
  return s;
}

// ---- time per round

std::string TimeSection(const ReportData& d) {
  std::string s = "<section id=\"time\"><h2>Time per round</h2>";
  s += "<p class=\"muted\">Wall-clock seconds of each finished round by phase. <i>members</i> "
       "is the members phase: training, then predicting the pool and test tables, on every "
       "device; <i>other</i> is the rest of the round's wall time (the controller's own work, "
       "and a stop and resume inside the round). Predicting time and idle device time lie "
       "inside the members phase and are listed in the table.</p>";
  svg::StackedBars c;
  c.id = "time-per-round";
  c.title = "Time per round by phase";
  c.x_label = "round";
  c.y.label = "wall-clock time (s)";
  c.width = 720;
  const char* names[] = {"members (train + predict)", "acquire", "label", "commit", "other"};
  const char* colors[] = {svg::kDoneColor, "#009e73", "#e69f00", "#cc79a7", "#bbbbbb"};
  for (int i = 0; i < 5; i++) c.stacks.push_back({names[i], {}, colors[i]});
  std::string rows;
  for (const auto& r : d.rounds) {
    if (r.record.status != loop::RoundStatus::kDone) continue;
    const auto& t = r.record.timings;
    c.categories.push_back(std::to_string(r.record.round));
    const double phases = t.train_s + t.acquire_s + t.label_s + t.commit_s;
    const double other = r.wall_s ? std::max(0.0, *r.wall_s - phases) : 0;
    const double v[] = {t.train_s, t.acquire_s, t.label_s, t.commit_s, other};
    for (int i = 0; i < 5; i++) c.stacks[i].values.push_back(v[i]);
    rows += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{:.2f}</td><td>{:.2f}</td><td>{:.3f}</td><td>{:.3f}"
        "</td><td>{:.3f}</td><td>{:.3f}</td><td>{:.2f}</td></tr>",
        r.record.round, r.wall_s ? fmt::format("{:.2f}", *r.wall_s) : "&ndash;", t.train_s,
        t.predict_s, t.acquire_s, t.label_s, t.commit_s, other, t.idle_s);
  }
  if (c.categories.empty()) {
    s += "<p>No round has finished yet.</p></section>\n";
    return s;
  }
  s += svg::RenderStackedBars(c);
  s += "<table><tr><th>round</th><th>wall s</th><th>members s</th><th>predict s (summed over "
       "members)</th><th>acquire s</th><th>label s</th><th>commit s</th><th>other s</th>"
       "<th>idle slot-s</th></tr>" +
       rows + "</table></section>\n";
  return s;
}

// ---- dataset

std::string DatasetSection(const ReportData& d) {
  std::string s = "<section id=\"dataset\"><h2>Dataset</h2>";
  if (!d.store_error.empty()) {
    return s + "<p class=\"bad\">The run's store could not be read: " + Escape(d.store_error) +
           "</p></section>\n";
  }
  svg::XYChart c;
  c.id = "dataset-size";
  c.title = "Rows per table in each store generation";
  c.x.label = "store generation";
  c.x.integer = true;
  c.y.label = "rows (samples)";
  c.width = 720;
  std::set<std::string> tables;
  for (const auto& g : d.generations) {
    for (const auto& [t, n] : g.rows) tables.insert(t);
  }
  size_t i = 0;
  for (const auto& t : tables) {
    svg::Series ser;
    ser.name = t;
    ser.color = svg::PaletteColor(i++);
    ser.stroke_width = 2;
    for (const auto& g : d.generations) {
      auto it = g.rows.find(t);
      if (it == g.rows.end()) continue;
      ser.x.push_back(static_cast<double>(g.generation));
      ser.y.push_back(static_cast<double>(it->second));
      ser.tips.push_back(
          fmt::format("generation {}: {} rows of {} ({})", g.generation, it->second, t, g.note));
    }
    c.series.push_back(std::move(ser));
  }
  c.note = fmt::format("generations {} to {}; the run's store was cloned from {} generation {}",
                       d.generations.empty() ? 0 : d.generations.front().generation,
                       d.generations.empty() ? 0 : d.generations.back().generation, d.source_store,
                       d.source_generation);
  s += svg::RenderXY(c);
  s += "<h3>What each round changed</h3><table><tr><th>round</th><th>generation</th>";
  for (const auto& t : tables) s += "<th>" + Escape(t) + "</th>";
  s += "</tr>";
  for (const auto& r : d.rounds) {
    s += fmt::format(
        "<tr><td>{}</td><td>{} &rarr; {}</td>", r.record.round, r.record.input_generation,
        r.record.output_generation ? std::to_string(*r.record.output_generation) : "&ndash;");
    for (const auto& t : tables) {
      auto it = r.changes.find(t);
      if (it == r.changes.end() || (it->second.added == 0 && it->second.removed == 0)) {
        s += "<td class=\"muted\">&ndash;</td>";
        continue;
      }
      const auto& ch = it->second;
      std::string cell;
      if (ch.added) {
        cell += fmt::format("+{}", ch.added);
        if (ch.moved_in) cell += fmt::format(" ({} moved in)", ch.moved_in);
      }
      if (ch.removed) {
        cell += fmt::format("{}&minus;{}", cell.empty() ? "" : " ", ch.removed);
        if (ch.moved_out) cell += fmt::format(" ({} moved out)", ch.moved_out);
      }
      s += "<td>" + cell + "</td>";
    }
    s += "</tr>";
  }
  s += "</table></section>\n";
  return s;
}

// ---- picks

// A regression run's picks have no classes: how their scores spread instead, per round, in
// equal-width ranges between the lowest and the highest score picked in any round.
std::string RegressionPicks(const ReportData& d) {
  std::string s = fmt::format(
      "<p class=\"muted\">Regression run: no classes. The samples each round acquired by "
      "<code>{}</code>, counted by their score (the ensemble's model deviation or variance "
      "the round ranked the pool by).</p>",
      Escape(d.strategy));
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& r : d.rounds) {
    for (const auto& p : r.picks) lo = std::min(lo, p.score), hi = std::max(hi, p.score);
  }
  if (!(lo <= hi)) return s + "<p>No round has acquired samples yet.</p></section>\n";
  constexpr int kBins = 10;
  const int bins = hi > lo ? kBins : 1;
  const double width = hi > lo ? (hi - lo) / kBins : 0;
  svg::Heatmap h;
  h.id = "picks-by-score";
  h.title = "Acquired samples per score range and round";
  h.x_label = fmt::format("{} score (middle of the range)", d.strategy);
  h.y_label = "round";
  h.value_label = "samples acquired";
  h.width = 720;
  for (int k = 0; k < bins; k++) {
    h.columns.push_back(svg::TickText(lo + width * (k + 0.5), width > 0 ? width : 1));
  }
  for (const auto& r : d.rounds) {
    if (r.picks.empty()) continue;
    h.rows.push_back(std::to_string(r.record.round));
    std::vector<double> counts(static_cast<size_t>(bins), 0.0);
    for (const auto& p : r.picks) {
      // The highest score falls in the last range, not in one past it.
      const int k = width > 0 ? std::min(bins - 1, static_cast<int>((p.score - lo) / width)) : 0;
      counts[static_cast<size_t>(k)] += 1;
    }
    h.values.push_back(std::move(counts));
  }
  h.note = fmt::format("scores from {:.4g} to {:.4g} in {} ranges of {:.3g}", lo, hi, bins, width);
  return s + svg::RenderHeatmap(h) + "</section>\n";
}

std::string PicksSection(const ReportData& d) {
  std::string s = "<section id=\"picks\"><h2>Picks</h2>";
  if (d.regression) return s + RegressionPicks(d);
  s += fmt::format(
      "<p class=\"muted\">The samples each round acquired by <code>{}</code> and had labelled, "
      "counted by their label (the oracle's, read from the <code>{}</code> table after the "
      "round).</p>",
      Escape(d.strategy), Escape(d.train_table));
  int64_t max_label = -1;
  bool any = false;
  for (const auto& r : d.rounds) {
    for (const auto& l : r.pick_labels) {
      if (l) max_label = std::max(max_label, *l), any = true;
    }
  }
  if (!any) {
    s += "<p>No round has acquired labelled samples yet.</p></section>\n";
    return s;
  }
  svg::Heatmap h;
  h.id = "picks-by-class";
  h.title = "Acquired samples per class and round";
  h.x_label = "class (label)";
  h.y_label = "round";
  h.value_label = "samples acquired";
  h.width = 720;
  for (int64_t k = 0; k <= max_label; k++) h.columns.push_back(std::to_string(k));
  for (const auto& r : d.rounds) {
    if (r.pick_labels.empty()) continue;
    h.rows.push_back(std::to_string(r.record.round));
    std::vector<double> counts(static_cast<size_t>(max_label + 1), 0.0);
    for (const auto& l : r.pick_labels) {
      if (l && *l >= 0) counts[static_cast<size_t>(*l)] += 1;
    }
    h.values.push_back(std::move(counts));
  }
  s += svg::RenderHeatmap(h);
  for (const auto& r : d.rounds) {
    if (r.images.empty()) continue;
    s += fmt::format(
        "<h3>Round {}: the {} best-scored picks</h3><div class=\"grid-images\" "
        "data-round=\"{}\">",
        r.record.round, r.images.size(), r.record.round);
    for (const auto& img : r.images) {
      s += fmt::format(
          "<figure class=\"pick\"><img alt=\"sample {} label {}\" src=\"data:image/png;base64,{}\">"
          "<figcaption>label {}<br><span class=\"muted\">{} {:.3g}</span></figcaption></figure>",
          img.sample_id, img.label ? std::to_string(*img.label) : "?", Base64(img.png),
          img.label ? std::to_string(*img.label) : "?", Escape(d.strategy), img.score);
    }
    s += "</div>";
  }
  s += "</section>\n";
  return s;
}

// ---- loss curves

std::string LossSection(const ReportData& d) {
  std::string s = "<section id=\"loss\"><h2>Training loss</h2>";
  std::vector<int64_t> rounds;
  for (const auto& r : d.rounds) rounds.push_back(r.record.round);
  if (rounds.empty()) return s + "<p>No round yet.</p></section>\n";
  s += "<p class=\"muted\">Each member's mean training loss per epoch in its last attempt of "
       "the chosen round (validation loss dashed, when the member validates).</p>";
  s += "<label>round <select data-panels=\"loss\">";
  for (int64_t r : rounds) {
    s += fmt::format("<option value=\"{0}\"{1}>{0}</option>", r,
                     r == rounds.back() ? " selected" : "");
  }
  s += "</select></label>";
  for (int64_t round : rounds) {
    svg::XYChart c;
    c.id = fmt::format("loss-round-{}", round);
    c.title = fmt::format("Training loss per epoch, round {}", round);
    c.x.label = "epoch";
    c.x.integer = true;
    c.y.label = "training loss (mean per sample)";
    c.width = 720;
    for (size_t i = 0; i < d.members.size(); i++) {
      const ReportAttempt* last = nullptr;
      for (const auto& a : d.attempts) {
        if (a.record.round == round && a.record.member == d.members[i] &&
            (last == nullptr || a.record.attempt > last->record.attempt)) {
          last = &a;
        }
      }
      if (last == nullptr) continue;
      svg::Series train, val;
      train.name = d.members[i];
      train.color = svg::PaletteColor(i);
      train.stroke_width = 2;
      val.name = d.members[i] + " (validation)";
      val.color = train.color;
      val.dashed = true;
      for (const auto& e : last->epochs) {
        train.x.push_back(static_cast<double>(e.epoch));
        train.y.push_back(e.train_loss);
        train.tips.push_back(fmt::format("{} epoch {}: loss {:.4f}, {:.2f} s", d.members[i],
                                         e.epoch, e.train_loss, e.seconds));
        if (e.val_loss) {
          val.x.push_back(static_cast<double>(e.epoch));
          val.y.push_back(*e.val_loss);
        }
      }
      c.series.push_back(std::move(train));
      if (!val.x.empty()) c.series.push_back(std::move(val));
    }
    s += fmt::format("<div data-round-panel=\"loss\" data-round=\"{}\"{}>", round,
                     round == rounds.back() ? "" : " hidden");
    s += svg::RenderXY(c) + "</div>";
  }
  s += "</section>\n";
  return s;
}

// ---- reliability

// A regression run's reliability: how often the targets fall inside the central predictive
// intervals of each nominal level (regression.h's kCoverageLevels), for the ensemble's
// moment-matched Gaussian and each member's own.
std::string CoverageSection(const ReportData& d) {
  std::string s = "<section id=\"reliability\"><h2>Reliability of the final ensemble</h2>";
  const loop::RegressionMetrics& e = d.coverage->ensemble;
  s += fmt::format(
      "<p class=\"muted\">The {} members of round {} on the <code>{}</code> table ({} samples): "
      "for each nominal level, the fraction of target components inside the central interval "
      "of that probability (the ensemble's: of the Gaussian with its mean and total variance; "
      "each member's: of its own). A calibrated predictor's points lie on the diagonal; points "
      "below it are intervals too narrow (over-confident).</p>",
      d.reliability_members, *d.reliability_round, Escape(d.test_table), e.count);
  svg::XYChart c;
  c.id = "coverage";
  c.title = fmt::format("Interval coverage, round {} (calibration error {:.4f})",
                        *d.reliability_round, e.calibration_error);
  c.x.label = "nominal coverage (probability of the central interval)";
  c.y.label = "observed coverage (fraction of targets inside)";
  c.x.min = 0;
  c.x.max = 1;
  c.y.min = 0;
  c.y.max = 1;
  c.diagonal = true;
  c.width = 560;
  c.height = 420;
  auto series = [](const std::string& name, const loop::RegressionMetrics& m) {
    svg::Series ser;
    ser.name = name;
    for (const auto& [nominal, observed] : m.coverage) {
      ser.x.push_back(nominal);
      ser.y.push_back(observed);
      ser.tips.push_back(
          fmt::format("{}: {:.3f} of targets inside the {:g} interval", name, observed, nominal));
    }
    return ser;
  };
  for (size_t i = 0; i < d.coverage->members.size() && i < d.coverage_members.size(); i++) {
    svg::Series m = series(d.coverage_members[i], d.coverage->members[i]);
    const auto at = std::find(d.members.begin(), d.members.end(), d.coverage_members[i]);
    m.color = svg::PaletteColor(static_cast<size_t>(at - d.members.begin()));
    m.stroke_width = 1.3;
    m.dashed = true;
    c.series.push_back(std::move(m));
  }
  svg::Series ens = series("ensemble", e);
  ens.color = "#000000";
  ens.stroke_width = 3;
  c.series.push_back(std::move(ens));
  c.note = "dashed diagonal: perfect calibration (observed = nominal)";
  s += "<div class=\"charts\">" + svg::RenderXY(c) + "</div>";
  // The numbers behind the chart.
  s += "<table><tr><th>nominal</th><th>ensemble</th>";
  for (const auto& name : d.coverage_members) s += "<th>" + Escape(name) + "</th>";
  s += "</tr>";
  for (size_t l = 0; l < e.coverage.size(); l++) {
    s += fmt::format("<tr><td>{:g}</td><td>{}</td>", e.coverage[l].first, F(e.coverage[l].second));
    for (const auto& m : d.coverage->members) {
      s += "<td>" + (l < m.coverage.size() ? F(m.coverage[l].second) : "&ndash;") + "</td>";
    }
    s += "</tr>";
  }
  s += fmt::format(
      "</table><p>RMSE {:.4f}, MAE {:.4f}, NLL {:.4f}, calibration error {:.4f}</p></section>\n",
      e.rmse, e.mae, e.nll, e.calibration_error);
  return s;
}

double ReliabilityBarWidth(const loop::ClassificationMetrics& m) {
  return m.bins.empty() ? 0.05 : (m.bins[0].upper - m.bins[0].lower) * 0.92;
}

// A reliability diagram of `m`'s confidence bins: accuracy as bars, mean confidence as points.
std::string ReliabilityChart(const std::string& id, const std::string& title,
                             const loop::ClassificationMetrics& m) {
  svg::XYChart c;
  c.id = id;
  c.title = title;
  c.x.label = "confidence (top-class probability)";
  c.y.label = "accuracy (fraction correct)";
  c.x.min = 0;
  c.x.max = 1;
  c.y.min = 0;
  c.y.max = 1;
  c.diagonal = true;
  c.bar_width = ReliabilityBarWidth(m);
  c.width = 460;
  c.height = 380;
  svg::Series acc, conf;
  acc.name = "accuracy in bin";
  acc.style = svg::SeriesStyle::kBars;
  acc.color = svg::kDoneColor;
  conf.name = "mean confidence in bin";
  conf.style = svg::SeriesStyle::kPoints;
  conf.color = svg::kFailedColor;
  for (const auto& b : m.bins) {
    if (b.count == 0) continue;
    const double mid = (b.lower + b.upper) / 2;
    acc.x.push_back(mid);
    acc.y.push_back(b.accuracy);
    acc.tips.push_back(
        fmt::format("confidence {:.3f}-{:.3f}: {} samples, accuracy {:.3f}, mean "
                    "confidence {:.3f}",
                    b.lower, b.upper, b.count, b.accuracy, b.confidence));
    conf.x.push_back(mid);
    conf.y.push_back(b.confidence);
    conf.tips.push_back(acc.tips.back());
  }
  c.series = {acc, conf};
  c.note = "dashed: perfect calibration (accuracy = confidence)";
  return svg::RenderXY(c);
}

// The final ensemble beside each of its members on the same test rows: the table of every
// metric, and a sentence on whether the ensemble's NLL and ECE (calibrated where the loop
// calibrates) are below every member's, naming each member that does better and where its ECE
// lies against the range a perfectly calibrated model would read.
std::string EnsembleAgainstMembers(const ReportData& d) {
  if (d.reliability_by_member.empty()) return "";
  auto range = [](const std::optional<loop::EceRange>& r) {
    return r ? fmt::format("{:.4f} ({:.4f}-{:.4f})", r->mean, r->low, r->high)
             : std::string("&ndash;");
  };
  auto row = [&](const std::string& name, const loop::ClassificationMetrics& m,
                 const std::optional<loop::EceRange>& r) {
    return fmt::format(
        "<tr><td>{}</td><td>{:.4f}</td><td>{:.4f}</td><td>{:.4f}</td><td>{:.4f}</td><td>{}</td>"
        "</tr>",
        name, m.accuracy, m.nll, m.brier, m.ece, range(r));
  };
  std::string s =
      "<table id=\"ensemble-vs-members\"><tr><th>model</th><th>accuracy</th><th>NLL</th>"
      "<th>Brier</th><th>ECE</th><th>ECE if perfectly calibrated: mean (5-95%)</th></tr>";
  s += row("ensemble (mean)", *d.reliability, d.reliability_ece_range);
  if (d.reliability_calibrated) {
    s += row("ensemble, calibrated (cross-fitted)", d.reliability_calibrated->calibrated,
             d.reliability_calibrated_ece_range);
  }
  for (const auto& member : d.reliability_by_member) {
    s += row(Escape(member.name), member.metrics, member.ece_range);
  }
  s += "</table>";

  const bool calibrated = d.reliability_calibrated.has_value();
  const loop::ClassificationMetrics& ensemble =
      calibrated ? d.reliability_calibrated->calibrated : *d.reliability;
  const size_t n = d.reliability_by_member.size();
  size_t nll_below = 0;
  std::vector<const ReportMemberReliability*> lower_ece;
  for (const auto& member : d.reliability_by_member) {
    if (ensemble.nll < member.metrics.nll) nll_below++;
    if (!(ensemble.ece < member.metrics.ece)) lower_ece.push_back(&member);
  }
  auto below = [n](size_t k) {
    return k == n ? fmt::format("below every member's ({})", n)
                  : fmt::format("below {} of the {} members'", k, n);
  };
  s += fmt::format(
      "<p id=\"ensemble-vs-members-summary\">The ensemble{}: NLL {:.4f}, {}; ECE {:.4f}, {}.",
      calibrated ? ", calibrated" : "", ensemble.nll, below(nll_below), ensemble.ece,
      below(n - lower_ece.size()));
  for (const ReportMemberReliability* member : lower_ece) {
    std::string where;
    if (member->ece_range) {
      const loop::EceRange& r = *member->ece_range;
      where = member->metrics.ece < r.low    ? "below"
              : member->metrics.ece > r.high ? "above"
                                             : "inside";
      where = fmt::format(
          ", {} the {:.4f}-{:.4f} a perfectly calibrated model with its "
          "confidences reads",
          where, r.low, r.high);
    }
    s += fmt::format(" {} reads ECE {:.4f}{}.", Escape(member->name), member->metrics.ece, where);
  }
  return s + "</p>";
}

std::string ReliabilitySection(const ReportData& d) {
  if (d.coverage) return CoverageSection(d);
  std::string s = "<section id=\"reliability\"><h2>Reliability of the final ensemble</h2>";
  if (!d.reliability) {
    return s + "<p class=\"muted\">No reliability diagram: " + Escape(d.reliability_error) +
           ".</p></section>\n";
  }
  const auto& m = *d.reliability;
  s += fmt::format(
      "<p class=\"muted\">The mean prediction of the {} members of round {} on the <code>{}</code> "
      "table ({} samples), grouped by confidence (the top class's probability) into {} bins. "
      "A calibrated ensemble's bars reach the diagonal; bars below it are over-confident.",
      d.reliability_members, *d.reliability_round, Escape(d.test_table), m.count, m.bins.size());
  if (d.reliability_calibrated) {
    const auto& cal = *d.reliability_calibrated;
    s += fmt::format(
        " Beside it, the same mean calibrated as the loop calibrates every round, so that no "
        "sample is scored by a temperature that saw its label: the even rows at temperature "
        "{:.3f}, fitted on the odd rows, and the odd rows at {:.3f}, fitted on the even rows "
        "(fitted on every row: {:.3f}, the temperature <code>cohort predict --calibrated</code> "
        "applies).",
        cal.half_temperatures[0], cal.half_temperatures[1], cal.temperature);
  }
  s += "</p><div class=\"charts\">" +
       ReliabilityChart(
           "reliability",
           fmt::format("Reliability diagram, round {} (ECE {:.4f})", *d.reliability_round, m.ece),
           m);
  if (d.reliability_calibrated) {
    const auto& cal = *d.reliability_calibrated;
    s += ReliabilityChart("reliability-calibrated",
                          fmt::format("Calibrated, round {} (cross-fitted ECE {:.4f})",
                                      *d.reliability_round, cal.calibrated.ece),
                          cal.calibrated);
  }
  svg::XYChart counts;
  counts.id = "reliability-counts";
  counts.title = "Test samples per confidence bin (uncalibrated)";
  counts.x.label = "confidence (top-class probability)";
  counts.y.label = "samples";
  counts.x.min = 0;
  counts.x.max = 1;
  counts.bar_width = ReliabilityBarWidth(m);
  counts.width = 460;
  counts.height = 380;
  svg::Series n;
  n.name = "samples";
  n.style = svg::SeriesStyle::kBars;
  n.color = "#7f7f7f";
  for (const auto& b : m.bins) {
    n.x.push_back((b.lower + b.upper) / 2);
    n.y.push_back(static_cast<double>(b.count));
  }
  counts.series = {n};
  s += svg::RenderXY(counts) + "</div>";
  auto range = [](const std::optional<loop::EceRange>& r) {
    return r ? fmt::format(" (if perfectly calibrated: {:.4f}-{:.4f})", r->low, r->high)
             : std::string();
  };
  s += fmt::format("<p>accuracy {:.4f}, NLL {:.4f}, Brier {:.4f}, ECE {:.4f}{}", m.accuracy, m.nll,
                   m.brier, m.ece, range(d.reliability_ece_range));
  if (d.reliability_calibrated) {
    const auto& cal = *d.reliability_calibrated;
    s += fmt::format("; calibrated (cross-fitted): NLL {:.4f}, Brier {:.4f}, ECE {:.4f}{}",
                     cal.calibrated.nll, cal.calibrated.brier, cal.calibrated.ece,
                     range(d.reliability_calibrated_ece_range));
  }
  s += "</p>" + EnsembleAgainstMembers(d);
  if (d.reliability_ece_range) {
    s += fmt::format(
        "<p class=\"muted\" id=\"ece-resolution\">An ECE is not 0 even for a perfectly "
        "calibrated model: on {} samples the bins' accuracies scatter around their confidences. "
        "The ranges in brackets hold 90% of the ECEs such a model, with these confidences, reads "
        "on this many samples (labels drawn from its own probabilities, {} times). An ECE inside "
        "its range is as calibrated as this table can show, and two ECEs inside theirs (the "
        "ensemble's and a member's in the table above, say) are not told apart by it.</p>",
        m.count, loop::kEceRangeDraws);
  }
  return s + "</section>\n";
}

// ---- config

std::string ConfigSection(const ReportData& d) {
  std::string s = "<section id=\"config\"><h2>Config, versions and machine</h2><table>";
  auto row = [&](const std::string& k, const std::string& v) {
    s += "<tr><th class=\"l\">" + Escape(k) + "</th><td class=\"l\">" + v + "</td></tr>";
  };
  std::set<std::string> nodes, gpus, torch;
  for (const auto& a : d.attempts) {
    if (a.record.node) nodes.insert(*a.record.node);
    if (a.record.gpus && !a.record.gpus->empty()) gpus.insert(*a.record.gpus);
    if (a.record.metrics_json) {
      auto metrics = nlohmann::json::parse(*a.record.metrics_json, nullptr, false);
      auto it = metrics.is_object() ? metrics.find("worker_torch") : metrics.end();
      if (it != metrics.end() && it->is_string()) torch.insert(it->get<std::string>());
    }
  }
  auto join = [](const std::set<std::string>& v) {
    std::string out;
    for (const auto& x : v) out += (out.empty() ? "" : ", ") + Escape(x);
    return out.empty() ? std::string("&ndash;") : out;
  };
  row("run directory", Escape(d.run_dir));
  row("started", Escape(d.started_at));
  row("ended", d.ended_at.empty() ? "&ndash;" : Escape(d.ended_at));
  row("source store",
      Escape(d.source_store) + " generation " + std::to_string(d.source_generation));
  std::string devs;
  for (const auto& x : d.devices) devs += (devs.empty() ? "" : ", ") + Escape(x);
  row("devices", devs);
  row("hosts the workers ran on", join(nodes));
  row("GPUs the workers saw (CUDA_VISIBLE_DEVICES)", join(gpus));
  row("report written by", "cohort " + Escape(d.cohort_version) + " at " + Escape(d.generated_at));
  row("libtorch the native members trained with",
      torch.empty() ? std::string("<span class=\"muted\">not recorded (outside members only, "
                                  "or a run journalled before cohort recorded it)</span>")
                    : join(torch));
  s += "</table><h3>loop.toml as the run was started</h3><pre>" + Escape(d.config_toml) +
       "</pre></section>\n";
  return s;
}

}  // namespace

std::string RenderReportHtml(const ReportData& d, const HtmlOptions& options) {
  const bool running = d.status == "running";
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  if (running && options.refresh_s > 0) {
    h += fmt::format("<meta http-equiv=\"refresh\" content=\"{}\">\n", options.refresh_s);
  }
  h += "<title>cohort report: " + Escape(d.name) + "</title>\n<style>" + kStyle +
       "</style></head>\n<body><main>\n";
  h += fmt::format(
      "<header class=\"top\"><h1>Run {} <span class=\"status {}\">{}</span></h1>"
      "<p class=\"lead\">{} &middot; {} members &middot; strategy {} &middot; report of {}</p>",
      Escape(d.name), Escape(d.status), Escape(d.status), Escape(d.run_dir), d.members.size(),
      Escape(d.strategy), Escape(d.generated_at));
  h += "<nav><a href=\"#metrics\">metrics</a><a href=\"#timeline\">timeline</a><a "
       "href=\"#time\">time</a><a href=\"#dataset\">dataset</a><a href=\"#picks\">picks</a><a "
       "href=\"#loss\">loss</a><a href=\"#reliability\">reliability</a><a "
       "href=\"#config\">config</a></nav></header>\n";
  if (running) {
    h += fmt::format(
        "<div class=\"banner\" id=\"live\">This run is still running (controller pid {}): "
        "this page shows it as of {}{}.</div>\n",
        d.controller_pid.value_or(0), Escape(d.generated_at),
        options.refresh_s > 0
            ? fmt::format(" and reloads itself every {} s (<code>cohort report --watch</code> "
                          "keeps the file current)",
                          options.refresh_s)
            : "");
  } else if (d.status == "failed") {
    for (const auto& r : d.rounds) {
      if (r.record.status != loop::RoundStatus::kFailed) continue;
      h += fmt::format(
          "<div class=\"banner bad\">Round {} failed: {}. <code>cohort run</code> retries "
          "it.</div>\n",
          r.record.round, Escape(r.record.error.value_or("(no reason recorded)")));
    }
  } else if (d.status == "interrupted") {
    h += "<div class=\"banner\">The journal says this run is running, but no controller holds "
         "it: it was killed. <code>cohort run</code> resumes it.</div>\n";
  }
  h += Summary(d) + MetricsSection(d) + TimelineSection(d) + TimeSection(d) + DatasetSection(d) +
       PicksSection(d) + LossSection(d) + ReliabilitySection(d) + ConfigSection(d);
  h += "</main>\n<script>" + std::string(kScript) + "</script>\n</body></html>\n";
  return h;
}

}  // namespace cohort::cli
