#include "cli/report/report_html.h"

#include <gtest/gtest.h>

namespace cohort::cli {
namespace {

ReportData OneRound() {
  ReportData d;
  d.run_dir = "/runs/x";
  d.name = "demo<&>";
  d.status = "finished";
  d.members = {"a", "b"};
  d.devices = {"cpu:0"};
  d.train_table = "train";
  d.test_table = "test";
  d.strategy = "bald";
  ReportRound r;
  r.record.round = 0;
  r.record.status = loop::RoundStatus::kDone;
  r.record.test.accuracy = 0.75;
  r.record.test.nll = 0.5;
  r.record.test.ece = 0.1;
  r.labels_in = 100;
  r.wall_s = 3;
  r.record.timings.train_s = 2;
  r.member_metrics["a"]["accuracy"] = 0.7;
  r.picks = {{7, 0.9}, {8, 0.8}};
  r.pick_labels = {3, 3};
  d.rounds.push_back(r);
  ReportAttempt a;
  a.record.member = "a";
  a.record.attempt = 1;
  a.record.device = "cpu:0";
  a.record.status = loop::AttemptStatus::kFailed;
  a.record.exit = "worker killed by signal 9 (Killed)";
  a.start_s = 0;
  a.end_s = 1;
  loop::EpochRecord e;
  e.epoch = 1;
  e.train_loss = 2.0;
  a.epochs.push_back(e);
  e.epoch = 2;
  e.train_loss = 1.0;
  a.epochs.push_back(e);
  d.attempts.push_back(a);
  a.record.attempt = 2;
  a.record.status = loop::AttemptStatus::kDone;
  a.start_s = 1;
  a.end_s = 2;
  d.attempts.push_back(a);
  ReportGeneration g;
  g.generation = 1;
  g.rows = {{"train", 100}, {"pool", 50}};
  d.generations.push_back(g);
  g.generation = 2;
  g.rows = {{"train", 102}, {"pool", 48}};
  d.generations.push_back(g);
  return d;
}

TEST(ReportHtmlTest, EverySectionAndChart) {
  const std::string h = RenderReportHtml(OneRound());
  for (const char* id : {"summary", "metrics", "timeline", "time", "dataset", "picks", "loss",
                         "reliability", "config"}) {
    EXPECT_NE(h.find(std::string("<section id=\"") + id + "\""), std::string::npos) << id;
  }
  for (const char* chart : {"accuracy-by-round", "nll-by-labels", "ece-by-round", "timeline",
                            "time-per-round", "dataset-size", "picks-by-class", "loss-round-0"}) {
    EXPECT_NE(h.find(std::string("data-chart=\"") + chart + "\""), std::string::npos) << chart;
  }
  EXPECT_NE(h.find("Run demo&lt;&amp;&gt;"), std::string::npos);  // names are escaped
  EXPECT_EQ(h.find("demo<&>"), std::string::npos);
  EXPECT_NE(h.find("worker killed by signal 9 (Killed)"), std::string::npos);
  EXPECT_EQ(h.find("http-equiv=\"refresh\""), std::string::npos);
  // No reliability data: the section says why rather than drawing an empty chart.
  EXPECT_EQ(h.find("data-chart=\"reliability\""), std::string::npos);
}

// Two confidence bins of a classification table, as loop::ComputeEnsembleMetrics fills them.
loop::ClassificationMetrics TwoBins(double ece, double low_accuracy, double high_accuracy) {
  loop::ClassificationMetrics m;
  m.count = 40;
  m.accuracy = 0.75;
  m.nll = 0.5;
  m.brier = 0.3;
  m.ece = ece;
  loop::ReliabilityBin low{
      .lower = 0.5, .upper = 0.75, .count = 10, .confidence = 0.6, .accuracy = low_accuracy};
  loop::ReliabilityBin high{
      .lower = 0.75, .upper = 1, .count = 30, .confidence = 0.9, .accuracy = high_accuracy};
  m.bins = {low, high};
  return m;
}

// OneRound with the final ensemble's reliability on 40 test rows (ECE 0.125), by round 0's two
// members.
ReportData OneRoundWithReliability() {
  ReportData d = OneRound();
  d.reliability_round = 0;
  d.reliability_members = 2;
  d.reliability = TwoBins(0.125, 0.4, 0.8);
  return d;
}

TEST(ReportHtmlTest, TheReliabilityDiagramShowsTheCalibratedEnsembleBesideTheRawOne) {
  ReportData d = OneRoundWithReliability();
  std::string h = RenderReportHtml(d);
  EXPECT_NE(h.find("Reliability diagram, round 0 (ECE 0.1250)"), std::string::npos);
  EXPECT_NE(h.find("confidence 0.750-1.000: 30 samples, accuracy 0.800, mean confidence 0.900"),
            std::string::npos);
  // Without a calibration (a one-row table) there is one diagram and no sentence about it.
  EXPECT_EQ(h.find("reliability-calibrated"), std::string::npos);
  EXPECT_EQ(h.find("cross-fitted"), std::string::npos);

  loop::CrossFittedCalibration cal;
  cal.temperature = 0.9;
  cal.half_temperatures = {0.875, 0.925};
  cal.raw = *d.reliability;
  cal.calibrated = TwoBins(0.0625, 0.55, 0.875);
  cal.calibrated.nll = 0.4375;
  d.reliability_calibrated = cal;
  h = RenderReportHtml(d);
  EXPECT_NE(h.find("data-chart=\"reliability-calibrated\""), std::string::npos);
  EXPECT_NE(h.find("Calibrated, round 0 (cross-fitted ECE 0.0625)"), std::string::npos);
  EXPECT_NE(h.find("confidence 0.500-0.750: 10 samples, accuracy 0.550, mean confidence 0.600"),
            std::string::npos);
  EXPECT_NE(h.find("the even rows at temperature 0.875, fitted on the odd rows, and the odd rows "
                   "at 0.925"),
            std::string::npos);
  EXPECT_NE(h.find("calibrated (cross-fitted): NLL 0.4375"), std::string::npos);
}

TEST(ReportHtmlTest, EachEceIsShownWithTheRangeAPerfectlyCalibratedModelReads) {
  ReportData d = OneRoundWithReliability();
  std::string h = RenderReportHtml(d);
  // Without the ranges (none gathered): no brackets, no sentence.
  EXPECT_EQ(h.find("if perfectly calibrated"), std::string::npos);
  EXPECT_EQ(h.find("ece-resolution"), std::string::npos);

  d.reliability_ece_range = loop::EceRange{0.05, 0.03, 0.0625};
  loop::CrossFittedCalibration cal;
  cal.calibrated = TwoBins(0.0625, 0.55, 0.875);
  d.reliability_calibrated = cal;
  d.reliability_calibrated_ece_range = loop::EceRange{0.04, 0.0234375, 0.0546875};
  h = RenderReportHtml(d);
  EXPECT_NE(h.find("ECE 0.1250 (if perfectly calibrated: 0.0300-0.0625)"), std::string::npos);
  EXPECT_NE(h.find("ECE 0.0625 (if perfectly calibrated: 0.0234-0.0547)"), std::string::npos);
  const size_t sentence = h.find("id=\"ece-resolution\"");
  ASSERT_NE(sentence, std::string::npos);
  EXPECT_NE(h.find("on 40 samples", sentence), std::string::npos);
  EXPECT_NE(h.find("200 times", sentence), std::string::npos);
}

TEST(ReportHtmlTest, TheFinalEnsembleIsComparedWithEachMemberOnTheSameRows) {
  ReportData d = OneRoundWithReliability();
  std::string h = RenderReportHtml(d);
  EXPECT_EQ(h.find("ensemble-vs-members"), std::string::npos);  // no members gathered

  ReportMemberReliability a{.name = "a<1>",
                            .metrics = TwoBins(0.25, 0.3, 0.7),
                            .ece_range = loop::EceRange{0.05, 0.03, 0.0625}};
  a.metrics.nll = 0.625;
  ReportMemberReliability b{
      .name = "b", .metrics = TwoBins(0.0625, 0.5, 0.9), .ece_range = std::nullopt};
  b.metrics.nll = 0.4375;
  d.reliability_by_member = {a, b};
  h = RenderReportHtml(d);
  const size_t table = h.find("id=\"ensemble-vs-members\"");
  ASSERT_NE(table, std::string::npos);
  EXPECT_NE(h.find("<td>a&lt;1&gt;</td><td>0.7500</td><td>0.6250</td><td>0.3000</td>"
                   "<td>0.2500</td><td>0.0500 (0.0300-0.0625)</td>",
                   table),
            std::string::npos);
  EXPECT_NE(h.find("<td>b</td><td>0.7500</td><td>0.4375</td><td>0.3000</td><td>0.0625</td>"
                   "<td>&ndash;</td>",
                   table),
            std::string::npos);
  // Uncalibrated: the raw ensemble (NLL 0.5, ECE 0.125) against a (0.625, 0.25) and b (0.4375,
  // 0.0625): below one member of two on each, b named with no range gathered for it.
  EXPECT_NE(h.find("The ensemble: NLL 0.5000, below 1 of the 2 members'; ECE 0.1250, below 1 of "
                   "the 2 members'. b reads ECE 0.0625.</p>"),
            std::string::npos);

  // Calibrated, the comparison is the cross-fitted ensemble's; a member at or under its ECE is
  // named with where its own ECE lies against its range.
  loop::CrossFittedCalibration cal;
  cal.calibrated = TwoBins(0.03125, 0.55, 0.875);
  cal.calibrated.nll = 0.375;
  d.reliability_calibrated = cal;
  d.reliability_by_member[0].metrics.ece = 0.015625;
  h = RenderReportHtml(d);
  EXPECT_NE(h.find("<td>ensemble, calibrated (cross-fitted)</td><td>0.7500</td><td>0.3750</td>"),
            std::string::npos);
  EXPECT_NE(h.find("The ensemble, calibrated: NLL 0.3750, below every member's (2); ECE 0.0312, "
                   "below 1 of the 2 members'. a&lt;1&gt; reads ECE 0.0156, below the "
                   "0.0300-0.0625 a perfectly calibrated model with its confidences reads.</p>"),
            std::string::npos);
}

// OneRound as a regression run: regression metrics, no classes, the coverage of its intervals.
ReportData OneRegressionRound() {
  ReportData d = OneRound();
  d.regression = true;
  d.strategy = "max_deviation";
  ReportRound& r = d.rounds[0];
  r.record.test = {};
  r.record.test.rmse = 0.25;
  r.record.test.mae = 0.2;
  r.record.test.nll = 1.5;
  r.record.test.calibration_error = 0.125;
  r.member_metrics = {{"a", {{"rmse", 0.3}, {"mae", 0.22}}}};
  r.picks = {{7, 0.9}, {8, 0.5}, {9, 0.1}};
  r.pick_labels = {std::nullopt, std::nullopt, std::nullopt};
  loop::EnsembleRegressionMetrics m;
  m.ensemble.count = 40;
  m.ensemble.rmse = 0.25;
  m.ensemble.calibration_error = 0.125;
  for (double level : loop::kCoverageLevels) m.ensemble.coverage.emplace_back(level, level / 2);
  m.members = {m.ensemble, m.ensemble};
  d.coverage = m;
  d.coverage_members = {"a", "b"};
  d.reliability_round = 0;
  d.reliability_members = 2;
  return d;
}

TEST(ReportHtmlTest, ARegressionRunShowsRegressionMetricsAndCoverage) {
  const std::string h = RenderReportHtml(OneRegressionRound());
  for (const char* chart :
       {"rmse-by-round", "rmse-by-labels", "mae-by-round", "nll-by-labels", "calibration-by-round",
        "calibration-by-labels", "picks-by-score", "coverage"}) {
    EXPECT_NE(h.find(std::string("data-chart=\"") + chart + "\""), std::string::npos) << chart;
  }
  for (const char* chart : {"accuracy-by-round", "ece-by-round", "picks-by-class",
                            "reliability-counts", "data-chart=\"reliability\""}) {
    EXPECT_EQ(h.find(chart), std::string::npos) << chart;
  }
  EXPECT_NE(h.find("Interval coverage, round 0 (calibration error 0.1250)"), std::string::npos);
  EXPECT_NE(h.find("test RMSE after round 0"), std::string::npos);
  EXPECT_NE(h.find("Regression run: no classes."), std::string::npos);
  // The table: the ensemble's four numbers and member a's RMSE; b has none.
  EXPECT_NE(h.find("<td>0.2500</td><td>0.2000</td><td>1.5000</td><td>0.1250</td><td>0.3000</td>"
                   "<td>&ndash;</td>"),
            std::string::npos);
  // Three picks from 0.1 to 0.9 in ten ranges: the first, the middle and the last.
  EXPECT_NE(h.find("scores from 0.1 to 0.9 in 10 ranges of 0.08"), std::string::npos);
  // The coverage table: one row per level, ensemble then members.
  EXPECT_NE(h.find("<tr><td>0.95</td><td>0.4750</td><td>0.4750</td><td>0.4750</td></tr>"),
            std::string::npos);
}

TEST(ReportHtmlTest, ARegressionRunWithoutCoverageSaysWhy) {
  ReportData d = OneRegressionRound();
  d.coverage.reset();
  d.reliability_error = "the members of round 0 wrote no test predictions";
  const std::string h = RenderReportHtml(d);
  EXPECT_NE(h.find("No reliability diagram: the members of round 0 wrote no test predictions."),
            std::string::npos);
  d.rounds[0].picks.clear();
  EXPECT_NE(RenderReportHtml(d).find("No round has acquired samples yet."), std::string::npos);
}

TEST(ReportHtmlTest, RunningRunReloads) {
  ReportData d = OneRound();
  d.status = "running";
  d.controller_pid = 4242;
  const std::string h = RenderReportHtml(d, {.refresh_s = 15});
  EXPECT_NE(h.find("<meta http-equiv=\"refresh\" content=\"15\">"), std::string::npos);
  EXPECT_NE(h.find("still running (controller pid 4242)"), std::string::npos);
  EXPECT_EQ(RenderReportHtml(d, {.refresh_s = 0}).find("http-equiv"), std::string::npos);
}

TEST(ReportHtmlTest, AFailedRoundSaysWhy) {
  ReportData d = OneRound();
  d.status = "failed";
  d.rounds[0].record.status = loop::RoundStatus::kFailed;
  d.rounds[0].record.error = "1 of 2 members finished, min_members is 2; b: <boom>";
  const std::string h = RenderReportHtml(d);
  EXPECT_NE(h.find("Round 0 failed: 1 of 2 members finished, min_members is 2; b: &lt;boom&gt;."),
            std::string::npos);
}

TEST(ReportHtmlTest, ARunWithoutRounds) {
  ReportData d;
  d.name = "new";
  d.status = "running";
  const std::string h = RenderReportHtml(d);
  EXPECT_NE(h.find("No round has finished yet."), std::string::npos);
  EXPECT_NE(h.find("No round yet."), std::string::npos);
  EXPECT_NE(h.find("</html>"), std::string::npos);
}

}  // namespace
}  // namespace cohort::cli
