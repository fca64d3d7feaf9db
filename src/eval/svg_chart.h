// SvgChart: a tiny dependency-free SVG writer for evaluation and benchmark plots (RULER accuracy vs
// context length, dense and UniPrefill side by side; throughput vs context length).
//
// Goals: one standalone SVG document from plain data: a grid of small panels with axes, ticks,
// gridlines and titles, one shared legend, line series (markers, optional dashes, a small label
// above each point) and grouped bars for categorical x. Output is deterministic for the same input.
// Non-goals: a plotting library. No text measurement (label widths are estimated from character
// counts), no styling beyond colour and dashes, no interactivity, no per-panel axis labels.
// Invariants: non-finite values never reach the document (it never contains "nan" or "inf"): a
// point whose x or y is not finite (or x <= 0 on a log2 axis) is missing and breaks its line; all
// user text is XML-escaped. A series name keeps one colour across panels.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace uniprefill::eval {

struct ChartSeries {
  std::string name;          // legend label, e.g. "dense", "UniPrefill"; empty = not in the legend
  std::vector<double> x, y;  // same length (extra entries of the longer one are ignored)
  // Optional, same length as x: small text above each point; '\n' stacks lines.
  std::vector<std::string> point_labels;
  bool dashed = false;  // lines: stroke-dasharray; bars: light fill with a dashed outline
  std::string color;    // CSS colour; empty = the legend entry's colour (a fixed palette)
  enum class Style { kLine, kBars } style = Style::kLine;  // bars: grouped per distinct x
};

struct ChartPanel {
  std::string title;
  std::vector<ChartSeries> series;
  // Optional names for x = 0, 1, 2, ...: tick labels for categorical data (e.g. RULER task names
  // for grouped bars). An addition to the API the eval CLI asked for.
  std::vector<std::string> x_categories;
};

struct ChartOptions {
  std::string title;             // figure title
  std::string x_label, y_label;  // shared by all panels: below the grid / left of it
  // Context lengths: x placed at log2(x), ticks at the union of the panel's x values labelled
  // "4K", "8K", "128K", "1M" (powers of 1024), otherwise compact numbers.
  bool log2_x = false;
  std::optional<double> y_min, y_max;  // default: from the data with 5% padding (0 kept as floor
                                       // for non-negative data); accuracy plots pass 0..100
  int columns = 3;                     // panels per row
  int panel_width = 320, panel_height = 220;
};

// A complete standalone SVG document (UTF-8), deterministic for the same input.
std::string RenderSvgChart(const std::vector<ChartPanel>& panels, const ChartOptions& options);

// Writes RenderSvgChart's document to `path`; an error Status naming the path if it cannot be
// written.
Status WriteSvgChart(const std::string& path, const std::vector<ChartPanel>& panels,
                     const ChartOptions& options);

}  // namespace uniprefill::eval
