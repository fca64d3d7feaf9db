#include "eval/svg_chart.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numbers>
#include <string_view>

namespace uniprefill::eval {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                    "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
constexpr double kFont = 10;  // tick label size, px; estimated glyph width is 0.6 em
constexpr double kPadLeft = 44, kPadRight = 14, kPadTop = 26, kPadBottom = 22;  // around a plot
constexpr const char* kDash = " stroke-dasharray=\"5 3\"";
constexpr double kRotate = 40;  // degrees for x tick labels that would overlap

using Ticks = std::vector<std::pair<double, std::string>>;  // pixel position, label

std::string Escape(std::string_view s) {
  static constexpr std::string_view kEntities[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
  std::string out;
  for (char c : s) {
    size_t k = std::string_view("&<>\"'").find(c);
    if (k != std::string_view::npos) {
      out += kEntities[k];
    } else {
      out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;  // XML 1.0 forbids control characters
    }
  }
  return out;
}

// Fixed-point, trailing zeros trimmed, locale-independent; never "nan" or "inf".
std::string Fixed(double v, int decimals) {
  if (!std::isfinite(v) || std::fabs(v) > 1e30) return "0";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed, decimals);
  if (ec != std::errc()) return "0";
  std::string s(buf, end);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s == "-0" ? "0" : s;
}
std::string Px(double v) { return Fixed(v, 1); }

double TextWidth(std::string_view s, double font) {  // counts UTF-8 code points
  double n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n * 0.6 * font;
}

// `s` cut to about `width` px with an ellipsis (at a code point boundary).
std::string Fit(const std::string& s, double width, double font) {
  if (TextWidth(s, font) <= width) return s;
  size_t end = 0;
  for (double n = 0; end < s.size(); ++end) {
    if ((static_cast<unsigned char>(s[end]) & 0xC0) != 0x80 && ++n * 0.6 * font > width - font)
      break;
  }
  return s.substr(0, end) + "\u2026";
}

// Appends a <text> element; nothing for empty text.
void Text(std::string& out, double x, double y, std::string_view text, std::string_view attrs) {
  if (text.empty()) return;
  out += "<text x=\"" + Px(x) + "\" y=\"" + Px(y) + "\" " + std::string(attrs) + ">" +
         Escape(text) + "</text>\n";
}
void Line(std::string& out, double x1, double y1, double x2, double y2, std::string_view attrs) {
  out += "<line x1=\"" + Px(x1) + "\" y1=\"" + Px(y1) + "\" x2=\"" + Px(x2) + "\" y2=\"" + Px(y2) +
         "\" " + std::string(attrs) + "/>\n";
}

// A point marker; hollow and smaller for dashed series, so they stay distinguishable in print and a
// solid point under a dashed one at the same value still shows as a ring.
void Marker(std::string& out, double x, double y, const std::string& color, bool hollow) {
  out += "<circle cx=\"" + Px(x) + "\" cy=\"" + Px(y) + "\" r=\"" + (hollow ? "2.8" : "4.5") +
         "\" fill=\"" +
         (hollow ? "white" : color) + "\" stroke=\"" + color + "\"/>\n";
}

// "4K", "128K", "1M" for multiples of 1024; compact decimals otherwise.
std::string Log2Label(double x) {
  if (x >= 1048576 && std::fmod(x, 1048576) == 0) return Fixed(x / 1048576, 0) + "M";
  if (x >= 1024 && std::fmod(x, 1024) == 0) return Fixed(x / 1024, 0) + "K";
  return Fixed(x, 3);
}

// Tick labels on a nice-number axis: "12.5K", "3M", "0.25"; precision from the tick step.
std::string AxisLabel(double v, double step, double max_abs) {
  double scale = max_abs >= 1e9 ? 1e9 : max_abs >= 1e6 ? 1e6 : max_abs >= 1e4 ? 1e3 : 1;
  const char* suffix = scale == 1e9 ? "G" : scale == 1e6 ? "M" : scale == 1e3 ? "K" : "";
  int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(step / scale) - 1e-9)), 0, 6);
  return Fixed(v / scale, decimals) + (v == 0 ? "" : suffix);
}

// Ticks at multiples of 1, 2 or 5 x 10^k in [lo, hi], about `target` intervals; returns the step.
double NiceTicks(double lo, double hi, int target, std::vector<double>* ticks) {
  double raw = (hi - lo) / std::max(target, 1);
  double mag = std::pow(10, std::floor(std::log10(raw))), step = mag;
  for (double m : {2.0, 5.0, 10.0}) {  // the candidate nearest to raw on a log scale
    if (std::fabs(std::log(m * mag / raw)) < std::fabs(std::log(step / raw))) step = m * mag;
  }
  if (!std::isfinite(step) || step <= 0) return 1;
  double first = std::ceil(lo / step - 1e-9);
  for (int i = 0; i <= 2 * target + 2 && (first + i) * step <= hi + step * 1e-9; ++i) {
    ticks->push_back(first + i == 0 ? 0 : (first + i) * step);
  }
  return step;
}

struct LegendEntry {
  std::string name, color;
  bool dashed = false, bars = false;
};

double LegendItemWidth(const LegendEntry& e) { return 28 + TextWidth(e.name, 10) + 16; }

std::vector<LegendEntry> BuildLegend(const std::vector<ChartPanel>& panels) {
  std::vector<LegendEntry> legend;
  for (const ChartPanel& p : panels) {
    for (const ChartSeries& s : p.series) {
      if (s.name.empty()) continue;
      auto it =
          std::find_if(legend.begin(), legend.end(), [&](auto& e) { return e.name == s.name; });
      if (it != legend.end()) continue;
      std::string color = s.color.empty() ? kPalette[legend.size() % std::size(kPalette)] : s.color;
      legend.push_back({s.name, color, s.dashed, s.style == ChartSeries::Style::kBars});
    }
  }
  return legend;
}

std::string ColorOf(const ChartSeries& s, size_t index, const std::vector<LegendEntry>& legend) {
  if (!s.color.empty()) return s.color;
  for (const LegendEntry& e : legend) {
    if (!s.name.empty() && e.name == s.name) return e.color;
  }
  return kPalette[index % std::size(kPalette)];
}

// Maps data to pixels for one panel. Categorical (any bar series): one band per distinct x.
struct Scale {
  bool categorical = false, log2 = false;
  std::vector<double> xs;  // distinct valid x, ascending
  double x_lo = 0, x_hi = 1, left = 0, right = 1;
  double y_lo = 0, y_hi = 1, top = 0, bottom = 1;

  bool Valid(const ChartSeries& s, size_t i) const {
    return i < s.x.size() && i < s.y.size() && std::isfinite(s.x[i]) && std::isfinite(s.y[i]) &&
           (!log2 || categorical || s.x[i] > 0);
  }
  double Band() const { return (right - left) / std::max<size_t>(xs.size(), 1); }
  double X(double x) const {
    if (categorical) {
      return left + (std::lower_bound(xs.begin(), xs.end(), x) - xs.begin() + 0.5) * Band();
    }
    double t = log2 ? std::log2(x) : x;
    return left + (t - x_lo) / (x_hi - x_lo) * (right - left);
  }
  double Y(double y) const {
    return bottom + (std::clamp(y, y_lo, y_hi) - y_lo) / (y_hi - y_lo) * (top - bottom);
  }
};

// Fills xs and the x domain; false when the panel has no valid point.
bool FitX(const ChartPanel& panel, Scale& sc) {
  for (const ChartSeries& s : panel.series) {
    sc.categorical |= s.style == ChartSeries::Style::kBars;
  }
  for (const ChartSeries& s : panel.series) {
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (sc.Valid(s, i)) sc.xs.push_back(s.x[i]);
    }
  }
  std::sort(sc.xs.begin(), sc.xs.end());
  sc.xs.erase(std::unique(sc.xs.begin(), sc.xs.end()), sc.xs.end());
  if (sc.xs.empty()) return false;
  double lo = sc.log2 ? std::log2(sc.xs.front()) : sc.xs.front();
  double hi = sc.log2 ? std::log2(sc.xs.back()) : sc.xs.back();
  double pad = hi > lo ? 0.06 * (hi - lo) : 1;  // keeps edge markers off the frame
  sc.x_lo = lo - pad;
  sc.x_hi = hi + pad;
  return true;
}

std::vector<std::string> SplitLines(const std::string& label) {
  std::vector<std::string> lines(1);
  for (char c : label) {
    if (c == '\n') {
      lines.emplace_back();
    } else {
      lines.back().push_back(c);
    }
  }
  return lines;
}

void FitY(const ChartPanel& panel, const ChartOptions& o, Scale& sc) {
  double lo = INFINITY, hi = -INFINITY;
  for (const ChartSeries& s : panel.series) {
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!sc.Valid(s, i)) continue;
      lo = std::min(lo, s.y[i]);
      hi = std::max(hi, s.y[i]);
    }
  }
  if (sc.categorical) {  // bars grow from 0
    lo = std::min(lo, 0.0);
    hi = std::max(hi, 0.0);
  }
  double pad = hi > lo ? 0.05 * (hi - lo) : std::max(std::fabs(hi) * 0.05, 1.0);
  sc.y_lo = lo >= 0 ? std::max(lo - pad, 0.0) : lo - pad;
  // Headroom for point labels above the highest point: a fraction f of the plot height.
  size_t lines = 0;
  for (const ChartSeries& s : panel.series) {
    for (const std::string& l : s.point_labels) lines = std::max(lines, SplitLines(l).size());
  }
  double f = lines ? std::min(0.5, (10.0 * lines + 8) / (sc.bottom - sc.top)) : 0;
  sc.y_hi = hi + std::max(pad, (hi - sc.y_lo) * f / (1 - f));
  if (o.y_min && std::isfinite(*o.y_min)) sc.y_lo = *o.y_min;
  if (o.y_max && std::isfinite(*o.y_max)) sc.y_hi = *o.y_max;
  if (!(sc.y_hi > sc.y_lo)) sc.y_hi = sc.y_lo + 1;
}

std::string XTickLabel(const ChartPanel& panel, bool log2, double x, double step, double max_abs) {
  if (x >= 0 && x < static_cast<double>(panel.x_categories.size()) && x == std::floor(x)) {
    return panel.x_categories[static_cast<size_t>(x)];
  }
  return log2 ? Log2Label(x) : AxisLabel(x, step, max_abs);
}

// Ticks at the data's x values (categorical, log2 or named), else nice numbers; thinned to fit.
Ticks XTicks(const ChartPanel& panel, const Scale& sc) {
  Ticks ticks;
  double max_abs = std::max(std::fabs(sc.xs.front()), std::fabs(sc.xs.back()));
  if (sc.categorical || sc.log2 || !panel.x_categories.empty()) {
    size_t stride = 1 + static_cast<size_t>(sc.xs.size() * 14 / std::max(sc.right - sc.left, 1.0));
    for (size_t i = 0; i < sc.xs.size(); i += stride) {
      ticks.push_back({sc.X(sc.xs[i]), XTickLabel(panel, sc.log2, sc.xs[i], 1, max_abs)});
    }
  } else {
    std::vector<double> vals;
    double step = NiceTicks(sc.x_lo, sc.x_hi, static_cast<int>((sc.right - sc.left) / 60), &vals);
    for (double v : vals) ticks.push_back({sc.X(v), XTickLabel(panel, false, v, step, max_abs)});
  }
  return ticks;
}

// The pixel y of a label's first baseline: above the point, or below it.
double LabelTop(size_t n_lines, double y, bool below) {
  return below ? y + 15 : y - 6 - 10.0 * (n_lines - 1);
}

// Small text at a point, kept inside the plot horizontally; '\n' stacks lines.
void PointLabel(std::string& out, const std::string& label, double x, double y, bool below,
                const Scale& sc, const std::string& color) {
  std::vector<std::string> lines = SplitLines(label);
  double w = 0;
  for (const std::string& l : lines) w = std::max(w, TextWidth(l, 9));
  if (sc.right - sc.left > w) x = std::clamp(x, sc.left + w / 2, sc.right - w / 2);
  double first = LabelTop(lines.size(), y, below);
  for (size_t i = 0; i < lines.size(); ++i) {
    Text(out, x, first + 10.0 * i, lines[i],
         "font-size=\"9\" text-anchor=\"middle\" fill=\"" + Escape(color) + "\"");
  }
}

void DrawSeries(std::string& out, const ChartPanel& panel, const Scale& sc,
                const std::vector<LegendEntry>& legend) {
  size_t n_bars = 0, bar = 0;
  for (const ChartSeries& s : panel.series) n_bars += s.style == ChartSeries::Style::kBars;
  double group = 0.8 * sc.Band(), bw = group / std::max<size_t>(n_bars, 1);
  for (size_t k = 0; k < panel.series.size(); ++k) {
    const ChartSeries& s = panel.series[k];
    std::string color = Escape(ColorOf(s, k, legend)), path, marks;  // marks drawn over the line
    std::string dash = s.dashed ? kDash : "";
    bool bars = s.style == ChartSeries::Style::kBars, gap = true, below = false;
    for (size_t i = 0; i < s.point_labels.size(); ++i) {  // one side for all labels of a series
      if (!sc.Valid(s, i) || s.point_labels[i].empty()) continue;
      below |= LabelTop(SplitLines(s.point_labels[i]).size(), sc.Y(s.y[i]), false) - 9 < sc.top + 2;
    }
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!sc.Valid(s, i)) {
        gap = true;
        continue;
      }
      double x = sc.X(s.x[i]), y = sc.Y(s.y[i]);
      if (bars) {
        x += -group / 2 + (bar + 0.5) * bw;
        double base = sc.Y(std::clamp(0.0, sc.y_lo, sc.y_hi));
        out += "<rect x=\"" + Px(x - bw / 2) + "\" y=\"" + Px(std::min(y, base)) + "\" width=\"" +
               Px(bw) + "\" height=\"" + Px(std::fabs(base - y)) + "\" fill=\"" + color + "\"" +
               (s.dashed ? " fill-opacity=\"0.35\" stroke=\"" + color + "\"" + dash : "") + "/>\n";
      } else {
        path += (gap ? "M" : " L") + Px(x) + " " + Px(y);
        Marker(marks, x, y, color, s.dashed);
        gap = false;
      }
      if (i < s.point_labels.size() && !s.point_labels[i].empty()) {
        PointLabel(marks, s.point_labels[i], x, y, below, sc,
                   bars ? "#333" : ColorOf(s, k, legend));
      }
    }
    bar += bars;
    if (!path.empty()) {
      out += "<path d=\"" + path + "\" fill=\"none\" stroke=\"" + color +
             "\" stroke-width=\"1.8\"" + dash + "/>\n";
    }
    out += marks;
  }
}

// Gridlines (none across bars), ticks, tick labels and the frame.
void DrawAxes(std::string& out, const Scale& sc, const Ticks& xticks, bool rotate) {
  const std::string grid = "stroke=\"#e4e4e4\" stroke-width=\"1\"";
  std::vector<double> yticks;
  double step = NiceTicks(sc.y_lo, sc.y_hi,
                          std::max(2, static_cast<int>((sc.bottom - sc.top) / 36)), &yticks);
  double max_abs = std::max(std::fabs(sc.y_lo), std::fabs(sc.y_hi));
  for (double v : yticks) {
    Line(out, sc.left, sc.Y(v), sc.right, sc.Y(v), grid);
    Text(out, sc.left - 4, sc.Y(v) + 3.5, AxisLabel(v, step, max_abs),
         "font-size=\"10\" text-anchor=\"end\"");
  }
  for (const auto& [x, label] : xticks) {
    if (!sc.categorical) Line(out, x, sc.top, x, sc.bottom, grid);
    Line(out, x, sc.bottom, x, sc.bottom + 4, "stroke=\"#444\"");
    if (rotate) {
      Text(out, x + 3, sc.bottom + 12, label,
           "font-size=\"10\" text-anchor=\"end\" transform=\"rotate(-" + Px(kRotate) + " " +
               Px(x + 3) + " " + Px(sc.bottom + 12) + ")\"");
    } else {
      Text(out, x, sc.bottom + 15, label, "font-size=\"10\" text-anchor=\"middle\"");
    }
  }
  out += "<rect x=\"" + Px(sc.left) + "\" y=\"" + Px(sc.top) + "\" width=\"" +
         Px(sc.right - sc.left) + "\" height=\"" + Px(sc.bottom - sc.top) +
         "\" fill=\"none\" stroke=\"#444\"/>\n";
}

void DrawPanel(std::string& out, const ChartPanel& panel, const ChartOptions& o,
               const std::vector<LegendEntry>& legend, double x0, double y0, double w, double h) {
  out += "<g>\n";
  Text(out, x0 + w / 2, y0 + 16, Fit(panel.title, w - 8, 12),
       "font-size=\"12\" font-weight=\"bold\" text-anchor=\"middle\"");
  Scale sc;
  sc.log2 = o.log2_x;
  sc.left = x0 + kPadLeft;
  sc.right = x0 + std::max(w - kPadRight, kPadLeft + 10);
  sc.top = y0 + kPadTop;
  if (!FitX(panel, sc)) {
    Text(out, x0 + w / 2, y0 + h / 2, "no data",
         "font-size=\"11\" fill=\"#888\" text-anchor=\"middle\"");
    out += "</g>\n";
    return;
  }
  Ticks xticks = XTicks(panel, sc);
  double spacing = INFINITY, widest = 0;
  for (size_t i = 0; i < xticks.size(); ++i) {
    widest = std::max(widest, TextWidth(xticks[i].second, kFont));
    if (i > 0) spacing = std::min(spacing, xticks[i].first - xticks[i - 1].first);
  }
  bool rotate = widest + 4 > spacing;
  double pad_bottom =
      rotate ? std::min(h * 0.45, 16 + widest * std::sin(kRotate * std::numbers::pi / 180))
             : kPadBottom;
  sc.bottom = std::max(y0 + h - pad_bottom, sc.top + 10);
  FitY(panel, o, sc);
  DrawAxes(out, sc, xticks, rotate);
  DrawSeries(out, panel, sc, legend);
  out += "</g>\n";
}

// Legend entries packed into rows no wider than `width`.
std::vector<std::vector<size_t>> LegendRows(const std::vector<LegendEntry>& legend, double width) {
  std::vector<std::vector<size_t>> rows;
  double used = 0;
  for (size_t i = 0; i < legend.size(); ++i) {
    if (rows.empty() || used + LegendItemWidth(legend[i]) > width) {
      rows.emplace_back();
      used = 0;
    }
    rows.back().push_back(i);
    used += LegendItemWidth(legend[i]);
  }
  return rows;
}

void DrawLegend(std::string& out, const std::vector<LegendEntry>& legend,
                const std::vector<std::vector<size_t>>& rows, double x0, double y0, double width) {
  for (size_t r = 0; r < rows.size(); ++r) {
    double row_w = 0;
    for (size_t i : rows[r]) row_w += LegendItemWidth(legend[i]);
    double x = x0 + std::max(0.0, (width - row_w) / 2), y = y0 + 18.0 * r + 9;
    for (size_t i : rows[r]) {
      const LegendEntry& e = legend[i];
      std::string color = Escape(e.color);
      std::string outline =
          e.dashed ? " fill-opacity=\"0.35\" stroke=\"" + color + "\"" + kDash : std::string();
      if (e.bars) {
        out += "<rect x=\"" + Px(x + 6) + "\" y=\"" + Px(y - 5) +
               "\" width=\"12\" height=\"10\" fill=\"" + color + "\"" + outline + "/>\n";
      } else {
        Line(out, x, y, x + 24, y,
             "stroke=\"" + color + "\" stroke-width=\"1.8\"" + (e.dashed ? kDash : ""));
        Marker(out, x + 12, y, color, e.dashed);
      }
      Text(out, x + 28, y + 4, e.name, "font-size=\"11\"");
      x += LegendItemWidth(e);
    }
  }
}

}  // namespace

std::string RenderSvgChart(const std::vector<ChartPanel>& panels, const ChartOptions& options) {
  const double pw = std::max(options.panel_width, 120), ph = std::max(options.panel_height, 100);
  const size_t cols = std::clamp<size_t>(options.columns, 1, std::max<size_t>(panels.size(), 1));
  const size_t rows = std::max<size_t>((panels.size() + cols - 1) / cols, 1);
  const double left = options.y_label.empty() ? 6 : 24, grid_w = cols * pw;
  const double width = left + grid_w + 6;
  std::vector<LegendEntry> legend = BuildLegend(panels);
  std::vector<std::vector<size_t>> legend_rows = LegendRows(legend, grid_w);
  const double legend_y = options.title.empty() ? 6 : 30;
  const double top = legend_y + (legend.empty() ? 0 : 18.0 * legend_rows.size() + 4);
  const double height = top + rows * ph + (options.x_label.empty() ? 6 : 24);

  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Px(width) +
                    "\" height=\"" + Px(height) + "\" viewBox=\"0 0 " + Px(width) + " " +
                    Px(height) + "\" font-family=\"Arial, Helvetica, sans-serif\">\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  Text(out, width / 2, 21, Fit(options.title, width - 8, 15),
       "font-size=\"15\" font-weight=\"bold\" text-anchor=\"middle\"");
  DrawLegend(out, legend, legend_rows, left, legend_y, grid_w);
  for (size_t i = 0; i < panels.size(); ++i) {
    DrawPanel(out, panels[i], options, legend, left + (i % cols) * pw, top + (i / cols) * ph, pw,
              ph);
  }
  Text(out, left + grid_w / 2, height - 9, options.x_label,
       "font-size=\"12\" text-anchor=\"middle\"");
  double yc = top + rows * ph / 2;
  Text(out, 16, yc, options.y_label,
       "font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 16 " + Px(yc) + ")\"");
  out += "</svg>\n";
  return out;
}

Status WriteSvgChart(const std::string& path, const std::vector<ChartPanel>& panels,
                     const ChartOptions& options) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) {
    std::string why = std::strerror(errno);
    return NotFound("cannot write chart '" + path + "': " + why +
                    "; check that its directory exists and is writable");
  }
  file << RenderSvgChart(panels, options);
  file.close();
  if (!file) return Internal("failed writing chart '" + path + "' (disk full?)");
  return OkStatus();
}

}  // namespace uniprefill::eval
