#include "cli/report/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace cohort::cli::svg {

namespace {

constexpr const char* kPalette[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00",
                                    "#56b4e9", "#000000", "#f0e442", "#7f7f7f", "#8c564b"};
constexpr double kCharWidth = 6.4;  // of the 11px sans-serif legend text, roughly

std::string Num(double v) { return fmt::format("{:.1f}", v); }

// The chart's opening tag, background and title.
std::string Open(const std::string& id, const std::string& title, int w, int h) {
  return fmt::format(
      "<svg class=\"chart\" data-chart=\"{0}\" xmlns=\"http://www.w3.org/2000/svg\" "
      "viewBox=\"0 0 {1} {2}\" width=\"{1}\" height=\"{2}\" role=\"img\" "
      "aria-label=\"{3}\">\n<rect class=\"bg\" x=\"0\" y=\"0\" width=\"{1}\" height=\"{2}\"/>\n"
      "<text class=\"chart-title\" x=\"{4}\" y=\"18\" text-anchor=\"middle\">{3}</text>\n",
      Escape(id), w, h, Escape(title), w / 2);
}

// A legend laid out in rows from (x0, y0) within `width`; returns its height.
double Legend(const std::vector<std::pair<std::string, std::string>>& items, double x0, double y0,
              double width, std::string* out, const std::vector<bool>& dashed = {},
              const std::vector<bool>& boxes = {}, const std::vector<bool>& dots = {}) {
  if (items.empty()) return 0;
  *out += "<g class=\"legend\">\n";
  double x = x0, y = y0;
  for (size_t i = 0; i < items.size(); i++) {
    const double w = 26 + kCharWidth * static_cast<double>(items[i].first.size()) + 14;
    if (x > x0 && x + w > x0 + width) {
      x = x0;
      y += 16;
    }
    const bool box = i < boxes.size() && boxes[i];
    *out += fmt::format("<g class=\"legend-item\" transform=\"translate({},{})\">", Num(x), Num(y));
    if (box) {
      *out += fmt::format("<rect x=\"0\" y=\"-8\" width=\"18\" height=\"10\" fill=\"{}\"/>",
                          items[i].second);
    } else if (i < dots.size() && dots[i]) {
      *out += fmt::format("<circle cx=\"9\" cy=\"-4\" r=\"4\" fill=\"{}\"/>", items[i].second);
    } else {
      *out += fmt::format(
          "<line x1=\"0\" y1=\"-4\" x2=\"18\" y2=\"-4\" stroke=\"{}\" stroke-width=\"2.5\"{}/>",
          items[i].second, i < dashed.size() && dashed[i] ? " stroke-dasharray=\"5 3\"" : "");
    }
    *out += fmt::format("<text x=\"24\" y=\"0\">{}</text></g>\n", Escape(items[i].first));
    x += w;
  }
  *out += "</g>\n";
  return y - y0 + 16;
}

// Height a legend of `items` takes in `width` (same layout as Legend).
double LegendHeight(const std::vector<std::string>& names, double width) {
  if (names.empty()) return 0;
  double x = 0, rows = 1;
  for (const auto& n : names) {
    const double w = 26 + kCharWidth * static_cast<double>(n.size()) + 14;
    if (x > 0 && x + w > width) {
      x = 0;
      rows++;
    }
    x += w;
  }
  return rows * 16;
}

struct Range {
  double lo = 0, hi = 1;
};

Range DataRange(const Axis& axis, const std::vector<double>& values, bool include_zero) {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  for (const auto& t : axis.ticks) {
    lo = std::min(lo, t.first);
    hi = std::max(hi, t.first);
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (include_zero) lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
  if (axis.min) lo = *axis.min;
  if (axis.max) hi = *axis.max;
  if (hi <= lo) {  // one value: widen around it (upwards only from a fixed minimum)
    const double pad = axis.integer ? 0.5 : std::abs(lo) > 0 ? std::abs(lo) * 0.1 : 1;
    if (!axis.min) lo -= pad;
    hi = lo + (axis.min ? pad : 2 * pad);
  }
  return {lo, hi};
}

// Ticks of an axis: explicit ones, or nice ones widened to cover the range.
std::vector<std::pair<double, std::string>> TicksOf(const Axis& axis, Range* r, int count) {
  if (!axis.ticks.empty()) return axis.ticks;
  std::vector<double> v = NiceTicks(r->lo, r->hi, count, axis.integer);
  std::vector<std::pair<double, std::string>> out;
  if (v.empty()) return out;
  const double step = v.size() > 1 ? v[1] - v[0] : 1;
  // A value axis grows to its outer ticks; an integer (count) axis keeps to its data.
  if (!axis.min && !axis.integer) r->lo = std::min(r->lo, v.front());
  if (!axis.max && !axis.integer) r->hi = std::max(r->hi, v.back());
  for (double t : v) {
    if (t < r->lo - 1e-9 * step || t > r->hi + 1e-9 * step) continue;
    out.emplace_back(t, TickText(t, step));
  }
  return out;
}

struct Frame {
  double left, top, right, bottom;  // plot area in pixels
  Range x{}, y{};
  double X(double v) const { return left + (v - x.lo) / (x.hi - x.lo) * (right - left); }
  double Y(double v) const { return bottom - (v - y.lo) / (y.hi - y.lo) * (bottom - top); }
};

// Grid lines, tick labels and axis labels of a frame.
std::string Axes(const Frame& f, const std::vector<std::pair<double, std::string>>& xt,
                 const std::vector<std::pair<double, std::string>>& yt, const std::string& xl,
                 const std::string& yl, bool x_grid = true) {
  std::string s = "<g class=\"axes\">\n";
  for (const auto& [v, text] : yt) {
    const double y = f.Y(v);
    s += fmt::format(
        "<line class=\"grid\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/><text class=\"tick\" "
        "x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
        Num(f.left), Num(y), Num(f.right), Num(y), Num(f.left - 6), Num(y + 4), Escape(text));
  }
  for (const auto& [v, text] : xt) {
    const double x = f.X(v);
    if (x_grid) {
      s += fmt::format("<line class=\"grid\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>", Num(x),
                       Num(f.top), Num(f.bottom));
    }
    s += fmt::format(
        "<line class=\"tickmark\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/><text "
        "class=\"tick\" x=\"{0}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        Num(x), Num(f.bottom), Num(f.bottom + 4), Num(f.bottom + 16), Escape(text));
  }
  s += fmt::format(
      "<line class=\"axis\" x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/><line class=\"axis\" "
      "x1=\"{0}\" y1=\"{3}\" x2=\"{0}\" y2=\"{1}\"/>\n",
      Num(f.left), Num(f.bottom), Num(f.right), Num(f.top));
  s += fmt::format(
      "<text class=\"axis-label\" data-axis=\"x\" x=\"{}\" y=\"{}\" "
      "text-anchor=\"middle\">{}</text>\n",
      Num((f.left + f.right) / 2), Num(f.bottom + 32), Escape(xl));
  s += fmt::format(
      "<text class=\"axis-label\" data-axis=\"y\" transform=\"translate({},{}) rotate(-90)\" "
      "text-anchor=\"middle\">{}</text>\n",
      Num(f.left - 46), Num((f.top + f.bottom) / 2), Escape(yl));
  s += "</g>\n";
  return s;
}

std::string Note(const std::string& note, int w, int h) {
  if (note.empty()) return "";
  return fmt::format("<text class=\"note\" x=\"8\" y=\"{}\">{}</text>\n", h - 6, Escape(note));
}

std::string Tip(const std::string& tip) {
  return tip.empty() ? "" : "<title>" + Escape(tip) + "</title>";
}

}  // namespace

std::string Escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

const char* PaletteColor(size_t i) { return kPalette[i % std::size(kPalette)]; }

std::vector<double> NiceTicks(double lo, double hi, int count, bool integer) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / std::max(count, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  if (integer) step = std::max(1.0, std::ceil(step - 1e-9));  // whole numbers only
  // Tick k is (first + k) * step, computed as an integer times the mantissa scaled by an exact
  // power of ten, so 3 * 0.2 comes out as 0.6 and not 0.6000000000000001.
  const double mantissa = step / mag;
  const int exponent = static_cast<int>(std::lround(std::log10(mag)));
  auto value = [&](double k) {
    const double units = k * mantissa;
    return exponent < 0 ? units / std::pow(10.0, -exponent) : units * std::pow(10.0, exponent);
  };
  std::vector<double> out;
  const double first = std::floor(lo / step + 1e-9);
  for (double k = first; out.size() < 50; k += 1) {
    const double t = value(k);
    if (t > hi + step * 0.999) break;
    out.push_back(t == 0 ? 0.0 : t);
    if (t >= hi - step * 1e-9) break;
  }
  return out;
}

std::string TickText(double v, double step) {
  const double a = std::abs(v);
  if (a >= 10000 && step >= 1000) return fmt::format("{}k", v / 1000);
  if (step >= 1 && std::abs(v - std::round(v)) < 1e-9) return fmt::format("{:.0f}", v);
  int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  if (std::abs(step * std::pow(10, decimals) - std::round(step * std::pow(10, decimals))) > 1e-6)
    decimals++;
  return fmt::format("{:.{}f}", v, std::min(decimals, 6));
}

std::string RenderXY(const XYChart& c) {
  std::vector<std::string> names;
  for (const auto& s : c.series) names.push_back(s.name);
  const double legend_h = c.series.size() > 1 ? LegendHeight(names, c.width - 80) : 0;
  const int h = c.height + static_cast<int>(legend_h) + (c.note.empty() ? 0 : 14);
  std::string out = Open(c.id, c.title, c.width, h);

  std::vector<double> xs, ys;
  for (const auto& s : c.series) {
    xs.insert(xs.end(), s.x.begin(), s.x.end());
    ys.insert(ys.end(), s.y.begin(), s.y.end());
  }
  bool bars = false;
  for (const auto& s : c.series) bars = bars || s.style == SeriesStyle::kBars;
  Frame f{62, 30 + legend_h + 6, static_cast<double>(c.width) - 16,
          30 + legend_h + 6 + (c.height - 30 - 6 - 44)};
  f.x = DataRange(c.x, xs, false);
  f.y = DataRange(c.y, ys, bars);
  if (bars && !c.x.min && !c.x.max) {  // room for the outer bars
    f.x.lo -= c.bar_width / 2;
    f.x.hi += c.bar_width / 2;
  }
  if (!c.y.min && !c.y.max && !bars) {  // a little air above and below lines
    const double pad = (f.y.hi - f.y.lo) * 0.05;
    // Never below 0 for values that cannot be (losses, errors, counts).
    f.y.lo = f.y.lo >= 0 ? std::max(0.0, f.y.lo - pad) : f.y.lo - pad;
    f.y.hi += pad;
  }
  auto xt = TicksOf(c.x, &f.x, std::max(3, (c.width - 80) / 70));
  auto yt = TicksOf(c.y, &f.y, 5);
  if (!bars && !c.x.min && !c.x.max) {  // keep the end points' markers inside the frame
    const double pad = (f.x.hi - f.x.lo) * 0.03;
    f.x.lo -= pad;
    f.x.hi += pad;
  }
  if (c.series.size() > 1) {
    std::vector<std::pair<std::string, std::string>> items;
    std::vector<bool> dashed, boxes, dots;
    for (size_t i = 0; i < c.series.size(); i++) {
      const auto& s = c.series[i];
      items.emplace_back(s.name, s.color.empty() ? PaletteColor(i) : s.color);
      dashed.push_back(s.dashed);
      boxes.push_back(s.style == SeriesStyle::kBars);
      dots.push_back(s.style == SeriesStyle::kPoints);
    }
    Legend(items, 64, 40, c.width - 80, &out, dashed, boxes, dots);
  }
  out += Axes(f, xt, yt, c.x.label, c.y.label, !bars);
  out += fmt::format(
      "<clipPath id=\"clip-{}\"><rect x=\"{}\" y=\"{}\" width=\"{}\" "
      "height=\"{}\"/></clipPath>\n<g clip-path=\"url(#clip-{})\">\n",
      Escape(c.id), Num(f.left), Num(f.top - 4), Num(f.right - f.left + 4),
      Num(f.bottom - f.top + 8), Escape(c.id));
  if (c.diagonal) {
    const double lo = std::max(f.x.lo, f.y.lo), hi = std::min(f.x.hi, f.y.hi);
    out += fmt::format("<line class=\"diagonal\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>\n",
                       Num(f.X(lo)), Num(f.Y(lo)), Num(f.X(hi)), Num(f.Y(hi)));
  }
  for (size_t i = 0; i < c.series.size(); i++) {
    const Series& s = c.series[i];
    const std::string color = s.color.empty() ? PaletteColor(i) : s.color;
    out += fmt::format("<g class=\"series\" data-series=\"{}\">", Escape(s.name));
    const size_t n = std::min(s.x.size(), s.y.size());
    if (s.style == SeriesStyle::kBars) {
      for (size_t k = 0; k < n; k++) {
        const double x0 = f.X(s.x[k] - c.bar_width / 2), x1 = f.X(s.x[k] + c.bar_width / 2);
        const double y0 = f.Y(std::max(f.y.lo, 0.0)), y1 = f.Y(s.y[k]);
        out += fmt::format(
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" "
            "fill-opacity=\"0.8\">{}</rect>",
            Num(x0), Num(std::min(y0, y1)), Num(std::max(x1 - x0, 1.0)), Num(std::abs(y0 - y1)),
            color, Tip(k < s.tips.size() ? s.tips[k] : ""));
      }
    } else {
      if (s.style == SeriesStyle::kLine && n > 1) {
        std::string points;
        for (size_t k = 0; k < n; k++) {
          if (!std::isfinite(s.y[k])) continue;
          points += Num(f.X(s.x[k])) + "," + Num(f.Y(s.y[k])) + " ";
        }
        out += fmt::format(
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\"{} points=\"{}\"/>", color,
            s.stroke_width, s.dashed ? " stroke-dasharray=\"5 3\"" : "", points);
      }
      const double r = s.style == SeriesStyle::kPoints ? 3.5 : s.stroke_width + 1.2;
      // A line of many points is drawn without markers (they would merge into a band).
      const size_t markers = s.style == SeriesStyle::kLine && n > 40 ? 0 : n;
      for (size_t k = 0; k < markers; k++) {
        if (!std::isfinite(s.y[k])) continue;
        out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\">{}</circle>",
                           Num(f.X(s.x[k])), Num(f.Y(s.y[k])), r, color,
                           Tip(k < s.tips.size() ? s.tips[k] : ""));
      }
    }
    out += "</g>\n";
  }
  out += "</g>\n" + Note(c.note, c.width, h) + "</svg>\n";
  return out;
}

std::string RenderStackedBars(const StackedBars& c) {
  std::vector<std::string> names;
  for (const auto& s : c.stacks) names.push_back(s.name);
  const double legend_h = LegendHeight(names, c.width - 80);
  const int h = c.height + static_cast<int>(legend_h) + (c.note.empty() ? 0 : 14);
  std::string out = Open(c.id, c.title, c.width, h);
  std::vector<double> totals(c.categories.size(), 0.0);
  for (const auto& s : c.stacks) {
    for (size_t k = 0; k < c.categories.size() && k < s.values.size(); k++) {
      totals[k] += std::max(0.0, s.values[k]);
    }
  }
  Frame f{62, 30 + legend_h + 6, static_cast<double>(c.width) - 16,
          30 + legend_h + 6 + (c.height - 30 - 6 - 44)};
  const double n = static_cast<double>(std::max<size_t>(c.categories.size(), 1));
  f.x = {-0.5, n - 0.5};
  f.y = DataRange(c.y, totals, true);
  auto yt = TicksOf(c.y, &f.y, 5);
  std::vector<std::pair<double, std::string>> xt;
  const size_t every = std::max<size_t>(1, c.categories.size() / 20 + 1);
  for (size_t k = 0; k < c.categories.size(); k += every) {
    xt.emplace_back(static_cast<double>(k), c.categories[k]);
  }
  std::vector<std::pair<std::string, std::string>> items;
  for (size_t i = 0; i < c.stacks.size(); i++) {
    items.emplace_back(c.stacks[i].name,
                       c.stacks[i].color.empty() ? PaletteColor(i) : c.stacks[i].color);
  }
  Legend(items, 64, 40, c.width - 80, &out, {}, std::vector<bool>(items.size(), true));
  out += Axes(f, xt, yt, c.x_label, c.y.label, false);
  std::vector<double> base(c.categories.size(), 0.0);
  const double bw = std::min(60.0, (f.right - f.left) / n * 0.7);
  for (size_t i = 0; i < c.stacks.size(); i++) {
    const auto& s = c.stacks[i];
    out += fmt::format("<g class=\"series\" data-series=\"{}\">", Escape(s.name));
    for (size_t k = 0; k < c.categories.size() && k < s.values.size(); k++) {
      const double v = std::max(0.0, s.values[k]);
      if (v <= 0) continue;
      const double y0 = f.Y(base[k]), y1 = f.Y(base[k] + v);
      base[k] += v;
      out += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}: {} "
          "{}</title></rect>",
          Num(f.X(static_cast<double>(k)) - bw / 2), Num(y1), Num(bw), Num(y0 - y1),
          items[i].second, Escape(c.categories[k]), Escape(s.name), fmt::format("{:.3g}", v));
    }
    out += "</g>\n";
  }
  out += Note(c.note, c.width, h) + "</svg>\n";
  return out;
}

std::string RenderTimeline(const Timeline& c) {
  constexpr double kLane = 26;
  const double legend_h = LegendHeight(
      [&] {
        std::vector<std::string> v;
        for (const auto& l : c.legend) v.push_back(l.first);
        return v;
      }(),
      c.width - 120);
  const double top = 30 + legend_h + 18;
  const double plot_h = kLane * static_cast<double>(std::max<size_t>(c.lanes.size(), 1));
  const int h = static_cast<int>(top + plot_h + 44 + (c.note.empty() ? 0 : 14));
  std::string out = Open(c.id, c.title, c.width, h);
  std::vector<std::pair<std::string, std::string>> legend = c.legend;
  std::vector<bool> boxes(legend.size(), true);
  Legend(legend, 100, 40, c.width - 120, &out, {}, boxes);
  Frame f{96, top, static_cast<double>(c.width) - 16, top + plot_h};
  std::vector<double> xs;
  for (const auto& s : c.spans) xs.push_back(s.start), xs.push_back(s.end);
  f.x = DataRange(c.x, xs, true);
  f.y = {0, 1};
  auto xt = TicksOf(c.x, &f.x, std::max(3, (c.width - 120) / 80));
  out += Axes(f, xt, {}, c.x.label, c.lane_label);
  for (size_t i = 0; i < c.lanes.size(); i++) {
    const double y = f.top + kLane * static_cast<double>(i);
    out += fmt::format("<text class=\"tick lane\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
                       Num(f.left - 6), Num(y + kLane / 2 + 4), Escape(c.lanes[i]));
  }
  for (const auto& [x, label] : c.markers) {
    out += fmt::format(
        "<line class=\"marker\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/><text "
        "class=\"marker-label\" x=\"{3}\" y=\"{4}\">{5}</text>\n",
        Num(f.X(x)), Num(f.top - 12), Num(f.bottom), Num(f.X(x) + 3), Num(f.top - 4),
        Escape(label));
  }
  out += "<g class=\"spans\">\n";
  for (const auto& s : c.spans) {
    const double y = f.top + kLane * static_cast<double>(s.lane) + 4;
    // One pixel of air at each end, so back-to-back attempts stay apart.
    const double x0 = f.X(s.start) + 1, x1 = std::max(f.X(s.end) - 1, x0 + 2);
    out += fmt::format(
        "<g class=\"span\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" "
        "rx=\"2\"{}/>",
        Num(x0), Num(y), Num(x1 - x0), Num(kLane - 8), s.color,
        s.retry ? " stroke=\"#000\" stroke-width=\"1.5\" stroke-dasharray=\"3 2\"" : "");
    if (!s.label.empty() && x1 - x0 > kCharWidth * static_cast<double>(s.label.size()) + 6) {
      out += fmt::format("<text class=\"span-label\" x=\"{}\" y=\"{}\">{}</text>", Num(x0 + 4),
                         Num(y + kLane / 2), Escape(s.label));
    }
    if (s.cross) {
      out += fmt::format(
          "<path class=\"cross\" d=\"M{0} {1} l8 8 M{0} {2} l8 -8\" "
          "transform=\"translate(-4,0)\"/>",
          Num(x1), Num(y + kLane / 2 - 8), Num(y + kLane / 2));
    }
    out += Tip(s.tip) + "</g>\n";
  }
  out += "</g>\n" + Note(c.note, c.width, h) + "</svg>\n";
  return out;
}

std::string RenderHeatmap(const Heatmap& c) {
  const double cell_h = 22;
  const double top = 40;
  const double left = 74;
  const double cols = static_cast<double>(std::max<size_t>(c.columns.size(), 1));
  const double cell_w = std::min(48.0, (c.width - left - 16) / cols);
  const double plot_h = cell_h * static_cast<double>(std::max<size_t>(c.rows.size(), 1));
  const int h = static_cast<int>(top + plot_h + 60 + (c.note.empty() ? 0 : 14));
  std::string out = Open(c.id, c.title, c.width, h);
  double max = 0;
  for (const auto& r : c.values) {
    for (double v : r) max = std::max(max, v);
  }
  out += "<g class=\"cells\">\n";
  for (size_t i = 0; i < c.rows.size(); i++) {
    const double y = top + cell_h * static_cast<double>(i);
    out += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
                       Num(left - 6), Num(y + cell_h / 2 + 4), Escape(c.rows[i]));
    for (size_t k = 0; k < c.columns.size(); k++) {
      const double v = i < c.values.size() && k < c.values[i].size() ? c.values[i][k] : 0;
      const double t = max > 0 ? v / max : 0;
      // white to the palette's blue
      const int r = static_cast<int>(255 - t * (255 - 0x00));
      const int g = static_cast<int>(255 - t * (255 - 0x72));
      const int b = static_cast<int>(255 - t * (255 - 0xb2));
      const double x = left + cell_w * static_cast<double>(k);
      out += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"rgb({},{},{})\" "
          "stroke=\"#fff\"><title>{} {}, {} {}: {}</title></rect>",
          Num(x), Num(y), Num(cell_w), Num(cell_h), r, g, b, Escape(c.y_label), Escape(c.rows[i]),
          Escape(c.x_label), Escape(c.columns[k]), fmt::format("{:g}", v));
      if (v != 0) {
        out += fmt::format(
            "<text class=\"cell\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"{}\">{}</text>",
            Num(x + cell_w / 2), Num(y + cell_h / 2 + 4), t > 0.55 ? "#fff" : "#000",
            fmt::format("{:g}", v));
      }
    }
  }
  out += "</g>\n";
  const double bottom = top + plot_h;
  for (size_t k = 0; k < c.columns.size(); k++) {
    out += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                       Num(left + cell_w * (static_cast<double>(k) + 0.5)), Num(bottom + 14),
                       Escape(c.columns[k]));
  }
  out += fmt::format(
      "<text class=\"axis-label\" data-axis=\"x\" x=\"{}\" y=\"{}\" "
      "text-anchor=\"middle\">{}</text>\n",
      Num(left + cell_w * cols / 2), Num(bottom + 32), Escape(c.x_label));
  out += fmt::format(
      "<text class=\"axis-label\" data-axis=\"y\" transform=\"translate({},{}) rotate(-90)\" "
      "text-anchor=\"middle\">{}</text>\n",
      Num(16), Num(top + plot_h / 2), Escape(c.y_label));
  // The legend: the shade scale from 0 to the largest value.
  out += fmt::format(
      "<g class=\"legend\"><g class=\"legend-item\" transform=\"translate({},{})\">"
      "<defs><linearGradient id=\"grad-{}\"><stop offset=\"0\" stop-color=\"#fff\"/>"
      "<stop offset=\"1\" stop-color=\"#0072b2\"/></linearGradient></defs>"
      "<rect x=\"0\" y=\"-9\" width=\"80\" height=\"10\" fill=\"url(#grad-{})\" "
      "stroke=\"#999\"/><text x=\"86\" y=\"0\">{}: 0 to {}</text></g></g>\n",
      Num(left), Num(bottom + 50), Escape(c.id), Escape(c.id), Escape(c.value_label),
      fmt::format("{:g}", max));
  out += Note(c.note, c.width, h) + "</svg>\n";
  return out;
}

}  // namespace cohort::cli::svg
