#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <ka/core/error.hpp>
#include <ka/report/svg.hpp>
#include <limits>
#include <string>
#include <vector>

namespace ka::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

std::size_t marks(const std::string& svg) { return count_of(svg, "class=\"mark"); }

bool starts_entity(const std::string& text, std::size_t at) {
  for (const char* entity : {"&amp;", "&lt;", "&gt;", "&quot;", "&#39;"}) {
    if (text.compare(at, std::char_traits<char>::length(entity), entity) == 0) return true;
  }
  return false;
}

/// "" when every tag opened is closed, in order, under one root, and every '&' starts an
/// entity; otherwise what is wrong. A tiny stand-in for an XML parser.
std::string well_formed_error(const std::string& xml) {
  std::vector<std::string> open;
  std::size_t roots = 0;
  for (std::size_t i = 0; i < xml.size(); ++i) {
    if (xml[i] == '&' && !starts_entity(xml, i)) return "bare & at " + std::to_string(i);
    if (xml[i] != '<') continue;
    const std::size_t end = xml.find('>', i);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(i);
    const std::string tag = xml.substr(i + 1, end - i - 1);
    i = end;
    if (tag.empty() || tag.find('<') != std::string::npos) return "bad tag <" + tag + ">";
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return "stray </" + tag.substr(1) + ">";
      open.pop_back();
      continue;
    }
    if (open.empty()) ++roots;
    if (tag.back() != '/') open.push_back(tag.substr(0, tag.find_first_of(" \t\n")));
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  if (roots != 1) return std::to_string(roots) + " root elements";
  return "";
}

// A large plot: `render` takes under 0.5 s, the SVG stays under 2 MB, has `want` marks and is
// well formed.
template <typename Render>
void expect_fast_small_and_whole(Render render, std::size_t want) {
  const auto start = std::chrono::steady_clock::now();
  const std::string svg = render();
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took.count(), 0.5);
  EXPECT_LT(svg.size(), 2u << 20);
  EXPECT_EQ(marks(svg), want);
  EXPECT_EQ(well_formed_error(svg), "");
}

/// What every plot promises: one <svg data-plot=id> root, balanced tags, no nan/inf text.
void expect_valid_plot(const std::string& svg, const std::string& id) {
  EXPECT_EQ(well_formed_error(svg), "");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\" data-plot=\"" + id + "\"", 0), 0u)
      << svg.substr(0, 200);
  EXPECT_NE(svg.find("role=\"img\""), std::string::npos);
  EXPECT_NE(svg.find("<title>"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

ScatterPlot scatter_of(std::vector<Mark> points) {
  ScatterPlot p;
  p.id = "roofline";
  p.title = "Roofline";
  p.x_label = "arithmetic intensity (FLOP/byte)";
  p.y_label = "GFLOP/s";
  p.series.push_back(Series{"ka", std::move(points)});
  return p;
}

// --- the checker itself -----------------------------------------------------------------------

TEST(SvgChecker, CatchesUnbalancedTagsAndBareAmpersands) {
  EXPECT_EQ(well_formed_error("<svg><g><line/></g></svg>"), "");
  EXPECT_NE(well_formed_error("<svg><g></svg>"), "");
  EXPECT_NE(well_formed_error("<svg></g></svg>"), "");
  EXPECT_NE(well_formed_error("<svg><text>a < b</text></svg>"), "");
  EXPECT_NE(well_formed_error("<svg>R&D</svg>"), "");
  EXPECT_NE(well_formed_error("<svg/><svg/>"), "");
  EXPECT_EQ(well_formed_error("<svg>R&amp;D</svg>"), "");
}

// --- scales -----------------------------------------------------------------------------------

TEST(Scale, LinearMapsDomainToPixels) {
  const Scale x = Scale::linear(0, 10, 100, 200);
  EXPECT_DOUBLE_EQ(x(0), 100);
  EXPECT_DOUBLE_EQ(x(5), 150);
  EXPECT_DOUBLE_EQ(x(10), 200);
  EXPECT_DOUBLE_EQ(x(20), 300);  // clamps nothing
  EXPECT_FALSE(x.is_log());
  EXPECT_EQ(x.lo(), 0);
  EXPECT_EQ(x.hi(), 10);
}

TEST(Scale, LogMapsDecadesEvenly) {
  const Scale x = Scale::log10(1, 1e4, 0, 400);
  EXPECT_TRUE(x.is_log());
  EXPECT_NEAR(x(1), 0, 1e-9);
  EXPECT_NEAR(x(10), 100, 1e-9);
  EXPECT_NEAR(x(1e3), 300, 1e-9);
  EXPECT_NEAR(x(std::sqrt(10.0)), 50, 1e-9);
}

TEST(Scale, ReversedPixelRangeServesTheYAxis) {
  const Scale y = Scale::linear(0, 1, 360, 40);
  EXPECT_DOUBLE_EQ(y(0), 360);
  EXPECT_DOUBLE_EQ(y(1), 40);
  EXPECT_DOUBLE_EQ(y(0.25), 280);
  const Scale log_y = Scale::log10(0.1, 1000, 400, 0);
  EXPECT_NEAR(log_y(1), 300, 1e-9);
  EXPECT_NEAR(log_y(100), 100, 1e-9);
}

TEST(Scale, DegenerateDomainMapsToTheMiddle) {
  EXPECT_DOUBLE_EQ(Scale::linear(3, 3, 0, 100)(3), 50);
  EXPECT_DOUBLE_EQ(Scale::log10(5, 5, 0, 100)(5), 50);
  EXPECT_EQ(Scale::linear(3, 3, 0, 100).ticks(), std::vector<double>{3});
}

TEST(Scale, Log10RejectsNonPositiveOrNonFiniteDomains) {
  EXPECT_THROW(Scale::log10(0, 10, 0, 100), ValueError);
  EXPECT_THROW(Scale::log10(-1, 10, 0, 100), ValueError);
  EXPECT_THROW(Scale::log10(1, kInf, 0, 100), ValueError);
  EXPECT_THROW(Scale::linear(kNaN, 1, 0, 100), ValueError);
}

void expect_ticks(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size()) << "first tick " << (got.empty() ? kNaN : got.front());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], std::fabs(want[i]) * 1e-9 + 1e-12) << "tick " << i;
  }
}

TEST(Scale, LinearTicksAreNiceSteps) {
  expect_ticks(Scale::linear(0, 1, 0, 100).ticks(), {0, 0.2, 0.4, 0.6, 0.8, 1});
  expect_ticks(Scale::linear(0, 100, 0, 100).ticks(), {0, 20, 40, 60, 80, 100});
  expect_ticks(Scale::linear(-3, 7, 0, 100).ticks(), {-2, 0, 2, 4, 6});
  expect_ticks(Scale::linear(0.13, 0.61, 0, 100).ticks(), {0.2, 0.3, 0.4, 0.5, 0.6});
  expect_ticks(Scale::linear(0, 1, 0, 100).ticks(2), {0, 0.5, 1});
}

TEST(Scale, LogTicksArePowersOfTen) {
  expect_ticks(Scale::log10(1, 1e4, 0, 100).ticks(), {1, 10, 100, 1e3, 1e4});
  expect_ticks(Scale::log10(0.5, 2e3, 0, 100).ticks(), {1, 10, 100, 1e3});
}

TEST(Scale, LogTicksAddTwoAndFiveUnderThreeDecades) {
  expect_ticks(Scale::log10(1, 100, 0, 100).ticks(), {1, 2, 5, 10, 20, 50, 100});
  // Inside one decade with no power of ten: falls back to linear steps.
  const std::vector<double> narrow = Scale::log10(3, 7, 0, 100).ticks();
  ASSERT_GE(narrow.size(), 2u);
  for (double t : narrow) EXPECT_TRUE(t >= 3 && t <= 7) << t;
}

// --- domains, numbers, escaping ---------------------------------------------------------------

TEST(SvgDomain, EmptyGetsADefaultRange) {
  EXPECT_EQ(domain_of({}, true), std::make_pair(1.0, 10.0));
  EXPECT_EQ(domain_of({}, false), std::make_pair(0.0, 1.0));
  EXPECT_EQ(domain_of({kNaN, kInf, -kInf}, false), std::make_pair(0.0, 1.0));
}

TEST(SvgDomain, SinglePointIsPadded) {
  const auto [log_lo, log_hi] = domain_of({5}, true);
  EXPECT_DOUBLE_EQ(log_lo, 0.5);
  EXPECT_DOUBLE_EQ(log_hi, 50);
  const auto [lo, hi] = domain_of({4}, false);
  EXPECT_LT(lo, 4);
  EXPECT_GT(hi, 4);
  EXPECT_EQ(domain_of({0}, false, true), std::make_pair(0.0, 1.0));
}

TEST(SvgDomain, FiltersNonFiniteValues) {
  EXPECT_EQ(domain_of({3, kNaN, 1, kInf, 4, -kInf}, false), std::make_pair(1.0, 4.0));
}

TEST(SvgDomain, LogIgnoresNonPositiveValues) {
  EXPECT_EQ(domain_of({-5, 0, 2, 20}, true), std::make_pair(2.0, 20.0));
  EXPECT_EQ(domain_of({-5, 0}, true), std::make_pair(1.0, 10.0));
}

TEST(SvgDomain, IncludeZeroExtendsLinearDomains) {
  EXPECT_EQ(domain_of({2, 3}, false, true), std::make_pair(0.0, 3.0));
  EXPECT_EQ(domain_of({-2, -1}, false, true), std::make_pair(-2.0, 0.0));
  EXPECT_EQ(domain_of({2, 3}, false, false), std::make_pair(2.0, 3.0));
}

TEST(SvgFormat, ThreeSignificantDigits) {
  EXPECT_EQ(format_number(0), "0");
  EXPECT_EQ(format_number(0.001), "0.001");
  EXPECT_EQ(format_number(0.25), "0.25");
  EXPECT_EQ(format_number(0.6000000000000001), "0.6");
  EXPECT_EQ(format_number(12), "12");
  EXPECT_EQ(format_number(3.14159), "3.14");
  EXPECT_EQ(format_number(1500), "1500");
  EXPECT_EQ(format_number(12345), "12300");
  EXPECT_EQ(format_number(-0.5), "-0.5");
  EXPECT_EQ(format_number(2e6), "2e+06");
  EXPECT_EQ(format_number(1.5e-7), "1.5e-07");
  EXPECT_EQ(format_number(kNaN), "n/a");
  EXPECT_EQ(format_number(-kInf), "n/a");
}

TEST(SvgEscape, EscapesMarkupCharacters) {
  EXPECT_EQ(escape_xml("<script>alert('x') & \"y\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;");
  EXPECT_EQ(escape_xml("median µs"), "median µs");
  EXPECT_EQ(escape_xml(std::string("a\x01"
                                   "b\tc",
                                   5)),
            "ab\tc");
}

TEST(SvgEscape, LabelsTitlesAndIdsComeOutEscaped) {
  ScatterPlot p = scatter_of({{1, 2, "<script>alert(1)</script>"}});
  p.title = "a <b> & c";
  p.x_label = "x \"quoted\"";
  p.series[0].name = "<img src=x>";
  const std::string svg = render_scatter(p);
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(svg.find("<img"), std::string::npos);
  EXPECT_NE(svg.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(svg.find("aria-label=\"a &lt;b&gt; &amp; c\""), std::string::npos);
  EXPECT_NE(svg.find("x &quot;quoted&quot;"), std::string::npos);
  EXPECT_EQ(well_formed_error(svg), "");
}

// --- scatter ----------------------------------------------------------------------------------

TEST(SvgScatter, OneMarkPerPointWithItsTitle) {
  ScatterPlot p = scatter_of({{0.5, 10, "gemm 1024"}, {4, 200, "gemm 4096"}});
  p.series.push_back(Series{"torch", {{1, 50, "ref"}}});
  p.lines.push_back(Line{"HBM 4.8 TB/s", {{0.01, 48}, {100, 4.8e5}}});
  const std::string svg = render_scatter(p);
  expect_valid_plot(svg, "roofline");
  EXPECT_EQ(marks(svg), 3u);
  EXPECT_EQ(count_of(svg, "class=\"mark s0\""), 2u);
  EXPECT_EQ(count_of(svg, "class=\"mark s1\""), 1u);
  EXPECT_EQ(count_of(svg, "<polyline class=\"roof\""), 1u);
  EXPECT_NE(svg.find("<title>gemm 4096</title>"), std::string::npos);
  EXPECT_NE(svg.find("HBM 4.8 TB/s"), std::string::npos);
  EXPECT_NE(svg.find("arithmetic intensity (FLOP/byte)"), std::string::npos);
  EXPECT_EQ(svg.find("not shown"), std::string::npos);
  EXPECT_EQ(svg.find("no data"), std::string::npos);
}

TEST(SvgScatter, NonFiniteAndNonPositiveValuesAreNotDrawnButNoted) {
  ScatterPlot p = scatter_of({{1, 10, "ok"},
                              {kNaN, 10, "nan x"},
                              {1, kInf, "inf y"},
                              {-1, 10, "negative x"},
                              {2, 0, "zero y"},
                              {3, 30, "ok too"}});
  const std::string svg = render_scatter(p);
  EXPECT_EQ(marks(svg), 2u);
  EXPECT_NE(svg.find("4 points not shown: no finite positive value"), std::string::npos);
  EXPECT_EQ(well_formed_error(svg), "");
  EXPECT_EQ(svg.find(">nan"), std::string::npos);
  EXPECT_EQ(svg.find("\"nan"), std::string::npos);
  EXPECT_EQ(svg.find("\"inf"), std::string::npos);
  EXPECT_EQ(svg.find("\"-inf"), std::string::npos);
}

TEST(SvgScatter, LinearAxesKeepNegativeValues) {
  ScatterPlot p = scatter_of({{-1, -5, "a"}, {2, 3, "b"}, {kNaN, 1, "c"}});
  p.log_x = p.log_y = false;
  const std::string svg = render_scatter(p);
  expect_valid_plot(svg, "roofline");
  EXPECT_EQ(marks(svg), 2u);
  EXPECT_NE(svg.find("1 point not shown: no finite value"), std::string::npos);
}

TEST(SvgScatter, EmptySaysNoData) {
  ScatterPlot p = scatter_of({});
  const std::string svg = render_scatter(p);
  expect_valid_plot(svg, "roofline");
  EXPECT_EQ(marks(svg), 0u);
  EXPECT_NE(svg.find(">no data<"), std::string::npos);

  p.series.clear();
  EXPECT_NE(render_scatter(p).find(">no data<"), std::string::npos);
  p.series.push_back(Series{"all bad", {{kNaN, 1, ""}, {0, 1, ""}}});
  const std::string bad = render_scatter(p);
  EXPECT_EQ(marks(bad), 0u);
  EXPECT_NE(bad.find(">no data<"), std::string::npos);
  EXPECT_NE(bad.find("2 points not shown"), std::string::npos);
}

TEST(SvgScatter, SinglePointRendersInsideThePlot) {
  const std::string svg = render_scatter(scatter_of({{8, 123, ""}}));
  expect_valid_plot(svg, "roofline");
  EXPECT_EQ(marks(svg), 1u);
  EXPECT_NE(svg.find("<title>8, 123</title>"), std::string::npos);  // default label
  EXPECT_EQ(svg.find("no data"), std::string::npos);
}

TEST(SvgScatter, SameInputSameBytes) {
  ScatterPlot p = scatter_of({{0.3, 7, "a"}, {30, 700, "b"}});
  EXPECT_EQ(render_scatter(p), render_scatter(p));
}

TEST(SvgScatter, TenThousandMarksAreFastAndSmall) {
  std::vector<Mark> points;
  for (int i = 0; i < 10000; ++i) {
    points.push_back({0.01 * (i + 1), 1.0 + (i % 977) * 3.7, "case " + std::to_string(i)});
  }
  const ScatterPlot p = scatter_of(std::move(points));
  expect_fast_small_and_whole([&] { return render_scatter(p); }, 10000u);
}

// --- bars -------------------------------------------------------------------------------------

BarChart speedups() {
  BarChart c;
  c.id = "speedup";
  c.title = "ka / reference";
  c.y_label = "speed-up (x)";
  c.bars = {{"gemm", 1.4, false, ""},
            {"softmax", 0.8, true, "softmax: 0.8x (slower)"},
            {"layernorm", 1.1, false, ""}};
  c.baseline = 1.0;
  c.mean_line = 1.07;
  c.mean_label = "geomean 1.07x";
  return c;
}

TEST(SvgBars, OneMarkPerBarAndLowOnesHighlighted) {
  const std::string svg = render_bars(speedups());
  expect_valid_plot(svg, "speedup");
  EXPECT_EQ(marks(svg), 3u);
  EXPECT_EQ(count_of(svg, "class=\"mark bar low\""), 1u);
  EXPECT_NE(svg.find("<title>softmax: 0.8x (slower)</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>gemm: 1.4</title>"), std::string::npos);
  EXPECT_NE(svg.find("geomean 1.07x"), std::string::npos);
  EXPECT_EQ(count_of(svg, "class=\"baseline\""), 1u);
  EXPECT_EQ(count_of(svg, "class=\"mean\""), 1u);
  EXPECT_NE(svg.find("speed-up (x)"), std::string::npos);
}

TEST(SvgBars, LogAxisDropsNonPositiveAndNonFiniteBars) {
  BarChart c = speedups();
  c.log_y = true;
  c.bars.push_back({"broken", kNaN, false, ""});
  c.bars.push_back({"zero", 0, true, ""});
  c.bars.push_back({"huge", kInf, false, ""});
  const std::string svg = render_bars(c);
  expect_valid_plot(svg, "speedup");
  EXPECT_EQ(marks(svg), 3u);
  EXPECT_NE(svg.find("3 bars not shown: no finite positive value"), std::string::npos);
}

TEST(SvgBars, EmptySaysNoData) {
  BarChart c = speedups();
  c.bars.clear();
  c.mean_line = kNaN;
  const std::string svg = render_bars(c);
  expect_valid_plot(svg, "speedup");
  EXPECT_EQ(marks(svg), 0u);
  EXPECT_NE(svg.find(">no data<"), std::string::npos);
}

TEST(SvgBars, SingleBarRenders) {
  BarChart c;
  c.id = "one";
  c.bars = {{"only", 2.5, false, ""}};
  const std::string svg = render_bars(c);
  expect_valid_plot(svg, "one");
  EXPECT_EQ(marks(svg), 1u);
}

TEST(SvgBars, TenThousandBarsAreFastAndSmall) {
  BarChart c;
  c.id = "many";
  for (int i = 0; i < 10000; ++i)
    c.bars.push_back({"b" + std::to_string(i), 0.5 + i % 7, i % 7 == 0, ""});
  expect_fast_small_and_whole([&] { return render_bars(c); }, 10000u);
}

// --- lines ------------------------------------------------------------------------------------

LineChart convergence() {
  LineChart c;
  c.id = "convergence";
  c.title = "Tuning convergence";
  c.x_label = "evaluations";
  c.y_label = "best time (µs)";
  c.lines = {{"random", {{1, 90}, {2, 70}, {5, 40}, {9, 35}}},
             {"annealing", {{1, 100}, {3, 30}, {6, 20}}}};
  return c;
}

TEST(SvgLines, OneMarkPerLineDrawnAsSteps) {
  const std::string svg = render_lines(convergence());
  expect_valid_plot(svg, "convergence");
  EXPECT_EQ(marks(svg), 2u);
  EXPECT_EQ(count_of(svg, "<polyline class=\"mark s0\""), 1u);
  EXPECT_EQ(count_of(svg, "<polyline class=\"mark s1\""), 1u);
  EXPECT_NE(svg.find("<title>annealing</title>"), std::string::npos);
  // A step function has 2n-1 vertices: the first line's points attribute holds 7 pairs.
  const auto at = svg.find("points=\"", svg.find("mark s0")) + 8;
  const std::string points = svg.substr(at, svg.find('"', at) - at);
  EXPECT_EQ(count_of(points, ","), 7u) << points;
  EXPECT_NE(svg.find("best time (µs)"), std::string::npos);
}

TEST(SvgLines, NonFinitePointsAreNotDrawnButNoted) {
  LineChart c = convergence();
  c.lines[0].points.push_back({10, kNaN});
  c.lines[1].points.push_back({7, 0});  // log y
  c.lines.push_back({"all broken", {{1, kInf}}});
  const std::string svg = render_lines(c);
  expect_valid_plot(svg, "convergence");
  EXPECT_EQ(marks(svg), 2u);
  EXPECT_NE(svg.find("3 points not shown: no finite positive value"), std::string::npos);
}

TEST(SvgLines, EmptyAndSinglePoint) {
  LineChart c = convergence();
  c.lines.clear();
  const std::string empty = render_lines(c);
  expect_valid_plot(empty, "convergence");
  EXPECT_EQ(marks(empty), 0u);
  EXPECT_NE(empty.find(">no data<"), std::string::npos);

  c.lines = {{"one", {{1, 5}}}};
  const std::string single = render_lines(c);
  expect_valid_plot(single, "convergence");
  EXPECT_EQ(marks(single), 1u);
  EXPECT_EQ(single.find("no data"), std::string::npos);
}

TEST(SvgLines, TenThousandPointsAreFastAndSmall) {
  LineChart c = convergence();
  c.lines.clear();
  for (int l = 0; l < 4; ++l) {
    Line line{"strategy " + std::to_string(l), {}};
    for (int i = 1; i <= 2500; ++i) line.points.push_back({double(i), 1000.0 / (i + l)});
    c.lines.push_back(std::move(line));
  }
  expect_fast_small_and_whole([&] { return render_lines(c); }, 4u);
}

// --- heatmap ----------------------------------------------------------------------------------

Heatmap tile_sweep() {
  Heatmap h;
  h.id = "heatmap";
  h.title = "gemm 4096: median time";
  h.x_label = "BLOCK_N";
  h.y_label = "BLOCK_M";
  h.value_label = "median µs";
  h.x_values = {"32", "64", "128"};
  h.y_values = {"16", "32"};
  h.cells = {{12.5, std::nullopt, 9.0}, {20.0, 7.5, std::nullopt}};
  h.highlight = std::make_pair(std::size_t{1}, std::size_t{1});
  return h;
}

TEST(SvgHeatmap, MeasuredCellsAreMarksUnmeasuredAreNot) {
  const std::string svg = render_heatmap(tile_sweep());
  expect_valid_plot(svg, "heatmap");
  EXPECT_EQ(marks(svg), 4u);
  EXPECT_EQ(count_of(svg, "class=\"missing\""), 2u);
  EXPECT_EQ(count_of(svg, "class=\"winner\""), 1u);
  EXPECT_NE(svg.find("<title>64, 32: 7.5 (median µs)</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>64, 16: not measured</title>"), std::string::npos);
  EXPECT_GE(count_of(svg, "class=\"legend\""), 2u);
  EXPECT_EQ(svg.find("not shown"), std::string::npos);
}

TEST(SvgHeatmap, BestCellIsDarkest) {
  const std::string svg = render_heatmap(tile_sweep());
  // 7.5 is the lowest time: full goodness, the darkest green; 20 the lightest.
  EXPECT_NE(svg.find("style=\"fill:#006837\"><title>64, 32"), std::string::npos);
  EXPECT_NE(svg.find("style=\"fill:#ffffcc\"><title>32, 32"), std::string::npos);
  Heatmap higher = tile_sweep();
  higher.lower_is_better = false;
  EXPECT_NE(render_heatmap(higher).find("style=\"fill:#006837\"><title>32, 32"), std::string::npos);
}

TEST(SvgHeatmap, NonFiniteCellsAreNotMarksButNoted) {
  Heatmap h = tile_sweep();
  h.cells[0][1] = kNaN;
  h.cells[1][2] = kInf;
  const std::string svg = render_heatmap(h);
  expect_valid_plot(svg, "heatmap");
  EXPECT_EQ(marks(svg), 4u);
  EXPECT_NE(svg.find("2 cells not shown: no finite value"), std::string::npos);
}

TEST(SvgHeatmap, EmptyOrUnmeasuredSaysNoData) {
  Heatmap h = tile_sweep();
  h.cells = {{std::nullopt, std::nullopt, std::nullopt}};
  const std::string unmeasured = render_heatmap(h);
  expect_valid_plot(unmeasured, "heatmap");
  EXPECT_EQ(marks(unmeasured), 0u);
  EXPECT_NE(unmeasured.find(">no data<"), std::string::npos);

  const std::string empty = render_heatmap(Heatmap{});
  EXPECT_EQ(marks(empty), 0u);
  EXPECT_NE(empty.find(">no data<"), std::string::npos);
  EXPECT_EQ(well_formed_error(empty), "");
}

TEST(SvgHeatmap, RaggedInputAndOutOfRangeHighlightAreSafe) {
  Heatmap h = tile_sweep();
  h.cells.push_back({1.0, 2.0, 3.0, 4.0});  // a third row and a fourth column with no labels
  h.highlight = std::make_pair(std::size_t{9}, std::size_t{9});
  const std::string svg = render_heatmap(h);
  expect_valid_plot(svg, "heatmap");
  EXPECT_EQ(marks(svg), 8u);
  EXPECT_EQ(count_of(svg, "class=\"winner\""), 0u);
}

TEST(SvgHeatmap, SingleCellRenders) {
  Heatmap h;
  h.id = "one";
  h.x_values = {"a"};
  h.y_values = {"b"};
  h.cells = {{3.0}};
  const std::string svg = render_heatmap(h);
  expect_valid_plot(svg, "one");
  EXPECT_EQ(marks(svg), 1u);
}

TEST(SvgHeatmap, TenThousandCellsAreFastAndSmall) {
  Heatmap h = tile_sweep();
  h.x_values.clear();
  h.y_values.clear();
  h.cells.assign(100, {});
  for (int i = 0; i < 100; ++i) {
    h.x_values.push_back(std::to_string(i));
    h.y_values.push_back(std::to_string(i));
    for (int j = 0; j < 100; ++j) h.cells[i].push_back(1.0 + (i * 37 + j * 11) % 101);
  }
  expect_fast_small_and_whole([&] { return render_heatmap(h); }, 10000u);
}

}  // namespace
}  // namespace ka::report
