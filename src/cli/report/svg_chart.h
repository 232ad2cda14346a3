// SVG charts for `cohort report`: x/y charts (lines, points, bars), stacked bars, a timeline
// (Gantt) and a heat map, each rendered as one inline <svg> element with a title, axes with
// ticks and labelled units, and a legend. No script, no external resource, print-friendly
// (black text on white, colours from the colour-blind-safe Okabe-Ito palette).
//
// Every chart is an <svg class="chart" data-chart="ID"> holding <text class="chart-title">,
// <text class="axis-label"> for each axis and <g class="legend"> with one <g class="legend-item">
// per series; tests find the charts by these names.
//
// Thread-safety: pure functions over their arguments.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cohort::cli::svg {

// Text escaped for XML/HTML (&, <, >, ", ').
std::string Escape(std::string_view text);

// The i-th colour of the palette (wraps around).
const char* PaletteColor(size_t i);

// Colours for attempt states, shared by the timeline and its legend.
inline constexpr const char* kDoneColor = "#0072b2";
inline constexpr const char* kFailedColor = "#d55e00";
inline constexpr const char* kKilledColor = "#e69f00";
inline constexpr const char* kInterruptedColor = "#999999";
inline constexpr const char* kRunningColor = "#56b4e9";

struct Axis {
  std::string label;          // with its unit: "test accuracy", "time since start (s)"
  std::optional<double> min;  // the range; unset: from the data (0 included for bars)
  std::optional<double> max;
  bool integer = false;  // ticks only at whole numbers
  // Explicit ticks (value, text); when empty, "nice" ticks are computed.
  std::vector<std::pair<double, std::string>> ticks;
};

enum class SeriesStyle { kLine, kPoints, kBars };

struct Series {
  std::string name;
  std::vector<double> x, y;
  SeriesStyle style = SeriesStyle::kLine;
  double stroke_width = 1.5;
  bool dashed = false;
  std::string color;              // empty: the palette colour of its index
  std::vector<std::string> tips;  // optional tooltip per point
};

struct XYChart {
  std::string id, title;
  Axis x, y;
  std::vector<Series> series;
  double bar_width = 0.8;  // kBars: bar width in x units
  bool diagonal = false;   // draw y = x (a reliability diagram's perfect calibration)
  std::string note;        // a short line under the plot
  int width = 520, height = 300;
};
std::string RenderXY(const XYChart& chart);

// Bars of `categories` (along x), each made of one segment per stack, stacked upwards.
struct StackedBars {
  std::string id, title;
  std::string x_label;
  Axis y;
  std::vector<std::string> categories;
  struct Stack {
    std::string name;
    std::vector<double> values;  // one per category
    std::string color;           // empty: palette
  };
  std::vector<Stack> stacks;
  std::string note;
  int width = 520, height = 300;
};
std::string RenderStackedBars(const StackedBars& chart);

// Horizontal bars on named lanes along a time axis.
struct Timeline {
  std::string id, title;
  Axis x;                  // time
  std::string lane_label;  // what a lane is: "device"
  std::vector<std::string> lanes;
  struct Span {
    size_t lane = 0;
    double start = 0, end = 0;
    std::string label;  // written inside the bar when it fits
    std::string tip;    // tooltip
    std::string color;
    bool cross = false;  // mark the end with a cross (a failure)
    bool retry = false;  // outline the bar (a retry)
  };
  std::vector<Span> spans;
  std::vector<std::pair<double, std::string>> markers;      // vertical lines with a label
  std::vector<std::pair<std::string, std::string>> legend;  // name, colour
  std::string note;
  int width = 1060;
};
std::string RenderTimeline(const Timeline& chart);

// A grid of numbers, each cell shaded by its value.
struct Heatmap {
  std::string id, title;
  std::string x_label, y_label;
  std::vector<std::string> columns, rows;
  std::vector<std::vector<double>> values;  // [row][column]
  std::string value_label;                  // what a cell counts, for the legend
  std::string note;
  int width = 520;
};
std::string RenderHeatmap(const Heatmap& chart);

// Nice tick values covering [lo, hi] (about `count` of them), as "1, 2, 5 times 10^k" steps.
std::vector<double> NiceTicks(double lo, double hi, int count, bool integer);
// A tick value as short text ("0.25", "1.2k", "3").
std::string TickText(double v, double step);

}  // namespace cohort::cli::svg
