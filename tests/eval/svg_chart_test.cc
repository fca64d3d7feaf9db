#include "eval/svg_chart.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace uniprefill::eval {
namespace {

size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

ChartSeries Line(std::string name, std::vector<double> x, std::vector<double> y) {
  ChartSeries s;
  s.name = std::move(name);
  s.x = std::move(x);
  s.y = std::move(y);
  return s;
}

// Two RULER-like panels: dense vs UniPrefill (dashed, annotated) over context lengths.
std::vector<ChartPanel> RulerPanels() {
  std::vector<double> ctx = {4096, 8192, 16384, 32768, 65536, 131072};
  ChartSeries dense = Line("dense", ctx, {98, 97, 95, 93, 90, 85});
  ChartSeries uni = Line("UniPrefill", ctx, {97, 97, 94, 92, 88, 84});
  uni.dashed = true;
  uni.point_labels = {"k=.62\n1.3x", "k=.48\n1.7x", "k=.37\n2.2x",
                      "k=.29\n2.9x", "k=.22\n3.6x", "k=.18\n4.4x"};
  ChartPanel niah{"niah_single_1", {dense, uni}, {}};
  ChartPanel avg{"average", {dense, uni}, {}};
  return {niah, avg};
}

ChartOptions RulerOptions() {
  ChartOptions o;
  o.title = "RULER accuracy";
  o.x_label = "context length";
  o.y_label = "accuracy (%)";
  o.log2_x = true;
  o.y_min = 0;
  o.y_max = 100;
  return o;
}

TEST(SvgChartTest, IsAStandaloneSvgDocument) {
  std::string svg = RenderSvgChart(RulerPanels(), RulerOptions());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(Count(svg, "<text"), Count(svg, "</text>"));
}

TEST(SvgChartTest, OnePathPerNonEmptyLineSeries) {
  std::vector<ChartPanel> panels = RulerPanels();
  panels.push_back({"empty series", {Line("dense", {}, {})}, {}});
  std::string svg = RenderSvgChart(panels, RulerOptions());
  EXPECT_EQ(Count(svg, "<path"), 4u);  // two series in each of two panels
}

TEST(SvgChartTest, DashedSeriesUsesDasharray) {
  std::vector<ChartPanel> panels = {{"p", {Line("solid", {1, 2}, {1, 2})}, {}}};
  EXPECT_EQ(Count(RenderSvgChart(panels, {}), "stroke-dasharray"), 0u);
  panels[0].series[0].dashed = true;
  std::string svg = RenderSvgChart(panels, {});
  EXPECT_EQ(Count(svg, "stroke-dasharray"), 2u);  // the line and its legend sample
}

TEST(SvgChartTest, EscapesAllText) {
  ChartOptions o;
  o.title = "a<b & c";
  o.y_label = "\"quoted\" 'y'";
  std::vector<ChartPanel> panels = {{"p>q", {Line("x&y", {1, 2}, {3, 4})}, {}}};
  panels[0].series[0].point_labels = {"<1>", ""};
  std::string svg = RenderSvgChart(panels, o);
  EXPECT_NE(svg.find(">a&lt;b &amp; c<"), std::string::npos);
  EXPECT_NE(svg.find(">&quot;quoted&quot; &apos;y&apos;<"), std::string::npos);
  EXPECT_NE(svg.find(">p&gt;q<"), std::string::npos);
  EXPECT_NE(svg.find(">x&amp;y<"), std::string::npos);
  EXPECT_NE(svg.find(">&lt;1&gt;<"), std::string::npos);
  EXPECT_EQ(svg.find("a<b"), std::string::npos);
}

TEST(SvgChartTest, Log2AxisLabelsContextLengths) {
  std::string svg = RenderSvgChart(RulerPanels(), RulerOptions());
  for (const char* label : {">4K<", ">8K<", ">16K<", ">32K<", ">64K<", ">128K<"}) {
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  }
  std::vector<ChartPanel> million = {{"m", {Line("d", {524288, 1048576}, {1, 2})}, {}}};
  EXPECT_NE(RenderSvgChart(million, RulerOptions()).find(">1M<"), std::string::npos);
}

TEST(SvgChartTest, Log2AxisPlacesPowersOfTwoEvenly) {
  ChartOptions o = RulerOptions();
  std::vector<ChartPanel> panels = {{"p", {Line("", {4096, 8192, 16384}, {50, 50, 50})}, {}}};
  std::string svg = RenderSvgChart(panels, o);
  size_t d = svg.find("<path d=\"M");
  ASSERT_NE(d, std::string::npos);
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  ASSERT_EQ(std::sscanf(svg.c_str() + d, "<path d=\"M%lf %lf L%lf %lf L%lf %lf", &x0, &y0, &x1, &y1,
                        &x2, &y2),
            6);
  EXPECT_NEAR(x1 - x0, x2 - x1, 0.15);
  EXPECT_EQ(y0, y1);
}

TEST(SvgChartTest, NanPointsAreSkippedAndBreakTheLine) {
  std::vector<ChartPanel> panels = {
      {"p", {Line("d", {1, 2, 3, 4, 5}, {1, NAN, 3, 4, INFINITY})}, {}}};
  panels[0].series[0].point_labels = {"a", "b", "c", "d", "e"};
  std::string svg = RenderSvgChart(panels, {});
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  EXPECT_EQ(Count(svg, "<circle"), 3u + 1u);  // three valid points plus the legend marker
  EXPECT_EQ(Count(svg, "<path"), 1u);
  size_t d = svg.find("<path d=\"");
  std::string path = svg.substr(d, svg.find('"', d + 9) - d);
  EXPECT_EQ(Count(path, "M"), 2u) << path;        // a new subpath after the missing point
  EXPECT_EQ(svg.find(">b<"), std::string::npos);  // no label for a missing point
}

TEST(SvgChartTest, EmptyInputsGiveValidDocuments) {
  std::vector<ChartPanel> all_nan = {{"all missing", {Line("d", {1, 2}, {NAN, NAN})}, {}},
                                     {"none", {}, {}}};
  for (const auto& panels : {std::vector<ChartPanel>{}, all_nan}) {
    std::string svg = RenderSvgChart(panels, RulerOptions());
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
    EXPECT_EQ(svg.find("nan"), std::string::npos);
    EXPECT_EQ(Count(svg, "<path"), 0u);
  }
}

TEST(SvgChartTest, TickLabelsAreCompact) {
  std::vector<ChartPanel> panels = {
      {"throughput", {Line("tok/s", {1, 2, 3}, {12000, 45000, 98000})}, {}},
      {"small", {Line("tok/s", {1, 2, 3}, {0.001, 0.002, 0.0035})}, {}}};
  std::string svg = RenderSvgChart(panels, {});
  EXPECT_EQ(svg.find("e+"), std::string::npos);
  EXPECT_EQ(svg.find("e-0"), std::string::npos);
  EXPECT_NE(svg.find(">40K<"), std::string::npos);
  EXPECT_NE(svg.find(">0.002<"), std::string::npos);
}

TEST(SvgChartTest, BarsAreGroupedPerCategoryWithNames) {
  ChartSeries dense = Line("dense", {0, 1, 2}, {90, 80, 70});
  ChartSeries uni = Line("UniPrefill", {0, 1, 2}, {88, 81, NAN});
  dense.style = uni.style = ChartSeries::Style::kBars;
  ChartPanel panel{"per task", {dense, uni}, {"niah", "vt", "cwe"}};
  ChartOptions o;
  o.y_min = 0;
  o.y_max = 100;
  std::string svg = RenderSvgChart({panel}, o);
  EXPECT_EQ(Count(svg, "<rect"), 9u);  // 5 bars, 2 legend swatches, background, panel frame
  EXPECT_EQ(Count(svg, "<path"), 0u);
  for (const char* name : {">niah<", ">vt<", ">cwe<"}) EXPECT_NE(svg.find(name), std::string::npos);
}

TEST(SvgChartTest, LongPanelTitleIsShortenedToThePanel) {
  std::string title(200, 'w');
  std::string svg = RenderSvgChart({{title, {Line("d", {1, 2}, {1, 2})}, {}}}, {});
  EXPECT_EQ(svg.find(title), std::string::npos);
  EXPECT_NE(svg.find("w\u2026<"), std::string::npos);
}

TEST(SvgChartTest, SameNameKeepsOneColourAndOneLegendEntry) {
  std::string svg = RenderSvgChart(RulerPanels(), RulerOptions());
  EXPECT_EQ(Count(svg, ">dense<"), 1u);
  EXPECT_EQ(Count(svg, ">UniPrefill<"), 1u);
  EXPECT_EQ(Count(svg, "stroke=\"#1f77b4\" stroke-width"), 3u);  // legend + one line per panel
}

TEST(SvgChartTest, IsDeterministic) {
  EXPECT_EQ(RenderSvgChart(RulerPanels(), RulerOptions()),
            RenderSvgChart(RulerPanels(), RulerOptions()));
}

TEST(SvgChartTest, WriteReportsUnwritablePath) {
  Status st = WriteSvgChart("/nonexistent/dir/x.svg", RulerPanels(), RulerOptions());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent/dir/x.svg"), std::string::npos);
}

TEST(SvgChartTest, WriteStoresTheRenderedDocument) {
  std::string path = ::testing::TempDir() + "svg_chart_test.svg";
  ASSERT_TRUE(WriteSvgChart(path, RulerPanels(), RulerOptions()).ok());
  std::FILE* f = std::fopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
  std::fclose(f);
  std::remove(path.c_str());
  EXPECT_EQ(text, RenderSvgChart(RulerPanels(), RulerOptions()));
}

}  // namespace
}  // namespace uniprefill::eval
