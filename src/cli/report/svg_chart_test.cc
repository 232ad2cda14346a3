#include "cli/report/svg_chart.h"

#include <gtest/gtest.h>

#include <regex>

namespace cohort::cli::svg {
namespace {

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) n++;
  return n;
}

TEST(SvgChartTest, EscapeAndTicks) {
  EXPECT_EQ(Escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  EXPECT_EQ(NiceTicks(0, 1, 5, false), (std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1.0}));
  EXPECT_EQ(NiceTicks(0.53, 0.71, 5, false).front(), 0.5);
  EXPECT_EQ(NiceTicks(0, 2, 8, true), (std::vector<double>{0, 1, 2}));  // no half rounds
  EXPECT_EQ(NiceTicks(300, 500, 4, true), (std::vector<double>{300, 350, 400, 450, 500}));
  EXPECT_EQ(TickText(0.25, 0.05), "0.25");
  EXPECT_EQ(TickText(3, 1), "3");
  EXPECT_EQ(TickText(20000, 5000), "20k");
}

TEST(SvgChartTest, XYChartHasTitleAxesLegendAndEveryPoint) {
  XYChart c;
  c.id = "acc";
  c.title = "Accuracy <by> round";
  c.x.label = "round";
  c.y.label = "accuracy";
  c.series.push_back({.name = "m1", .x = {0, 1, 2}, .y = {0.5, 0.6, 0.7}, .color = "", .tips = {}});
  c.series.push_back(
      {.name = "ensemble", .x = {0, 1, 2}, .y = {0.55, 0.65, 0.75}, .color = "", .tips = {}});
  const std::string s = RenderXY(c);
  EXPECT_NE(s.find("data-chart=\"acc\""), std::string::npos);
  EXPECT_NE(s.find(">Accuracy &lt;by&gt; round</text>"), std::string::npos);
  EXPECT_NE(s.find("data-axis=\"x\" x=\""), std::string::npos);
  EXPECT_NE(s.find(">round</text>"), std::string::npos);
  EXPECT_NE(s.find(">accuracy</text>"), std::string::npos);
  EXPECT_EQ(Count(s, "class=\"legend-item\""), 2);
  EXPECT_EQ(Count(s, "<circle"), 6);
  EXPECT_EQ(Count(s, "<polyline"), 2);
  // One series: no legend.
  c.series.pop_back();
  EXPECT_EQ(Count(RenderXY(c), "class=\"legend-item\""), 0);
}

TEST(SvgChartTest, ValuesLandInsideThePlot) {
  XYChart c;
  c.id = "r";
  c.x.min = 0;
  c.x.max = 1;
  c.y.min = 0;
  c.y.max = 1;
  c.series.push_back({.name = "p",
                      .x = {0, 1},
                      .y = {0, 1},
                      .style = SeriesStyle::kPoints,
                      .color = "",
                      .tips = {}});
  const std::string s = RenderXY(c);
  std::regex circle(R"re(<circle cx="([0-9.]+)" cy="([0-9.]+)")re");
  std::vector<std::pair<double, double>> pts;
  for (std::sregex_iterator it(s.begin(), s.end(), circle), end; it != end; ++it) {
    pts.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
  }
  ASSERT_EQ(pts.size(), 2u);
  // (0, 0) at the bottom left, (1, 1) at the top right of the plot area.
  EXPECT_DOUBLE_EQ(pts[0].first, 62);
  EXPECT_DOUBLE_EQ(pts[1].first, c.width - 16);
  EXPECT_GT(pts[0].second, pts[1].second);
}

TEST(SvgChartTest, NonNegativeDataGetsNoNegativeTicks) {
  XYChart c;
  c.id = "loss";
  c.series.push_back(
      {.name = "loss", .x = {1, 2, 3}, .y = {2.0, 0.5, 0.01}, .color = "", .tips = {}});
  const std::string s = RenderXY(c);
  EXPECT_EQ(s.find(">-"), std::string::npos);  // no tick label starts with a minus
  EXPECT_NE(s.find(">0.0</text>"), std::string::npos);
}

TEST(SvgChartTest, TimelineMarksFailuresAndRetries) {
  Timeline t;
  t.id = "tl";
  t.title = "attempts";
  t.x.label = "time (s)";
  t.lane_label = "device";
  t.lanes = {"cpu:0", "cpu:1"};
  t.spans.push_back({.lane = 0,
                     .start = 0,
                     .end = 1,
                     .label = "a",
                     .tip = "a failed",
                     .color = kFailedColor,
                     .cross = true});
  t.spans.push_back({.lane = 0,
                     .start = 1,
                     .end = 3,
                     .label = "a",
                     .tip = "a retry",
                     .color = kDoneColor,
                     .retry = true});
  t.legend = {{"done", kDoneColor}, {"failed", kFailedColor}};
  const std::string s = RenderTimeline(t);
  EXPECT_EQ(Count(s, "class=\"span\""), 2);
  EXPECT_EQ(Count(s, "class=\"cross\""), 1);
  EXPECT_EQ(Count(s, "stroke-dasharray=\"3 2\""), 1);
  EXPECT_EQ(Count(s, "class=\"legend-item\""), 2);
  EXPECT_NE(s.find(">cpu:1</text>"), std::string::npos);
  EXPECT_NE(s.find("<title>a retry</title>"), std::string::npos);
}

TEST(SvgChartTest, StackedBarsAndHeatmap) {
  StackedBars b;
  b.id = "time";
  b.categories = {"0", "1"};
  b.stacks = {{"train", {1, 2}, ""}, {"commit", {0.5, 0}, ""}};
  const std::string s = RenderStackedBars(b);
  EXPECT_EQ(Count(s, "<title>"), 3);  // a bar for each non-zero value, with its tooltip
  EXPECT_EQ(Count(s, "class=\"legend-item\""), 2);
  Heatmap h;
  h.id = "picks";
  h.columns = {"0", "1", "2"};
  h.rows = {"0"};
  h.values = {{3, 0, 7}};
  const std::string hs = RenderHeatmap(h);
  EXPECT_NE(hs.find(">7</text>"), std::string::npos);
  EXPECT_EQ(Count(hs, "class=\"cell\""), 2);
}

}  // namespace
}  // namespace cohort::cli::svg
