// SVG builders for `ka-db report`: pure functions from plain structs to one inline <svg> string.
//
// See Note [SVG plot contract] in svg.cpp for what every plot guarantees (the `.mark` count,
// non-finite values, determinism, CSS classes).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ka::report {

/// Escapes & < > " ' for XML text and attribute values; drops the control characters XML 1.0
/// cannot hold (all below 0x20 except tab, newline, carriage return).
std::string escape_xml(std::string_view text);

/// A short label for an axis tick or a value: 3 significant digits, plain for 1e-4 <= |v| < 1e6
/// ("0.001", "0.25", "12", "1500", "12300"), exponent otherwise ("2e+06"); "n/a" if not finite.
std::string format_number(double v);

/// Maps a data domain [lo, hi] to pixels [px_lo, px_hi] (reversed pixel ranges are fine, as
/// for a y axis). A degenerate domain (lo == hi) maps everything to the pixel midpoint.
///
///   auto y = Scale::log10(1.0, 1e4, /*px_lo=*/360.0, /*px_hi=*/40.0);
///   y(100.0);    // 200.0
///   y.ticks();   // 1, 10, 100, 1000, 10000
class Scale {
 public:
  /// Throws ka::ValueError unless all four bounds are finite.
  static Scale linear(double lo, double hi, double px_lo, double px_hi);
  /// Throws ka::ValueError unless lo > 0, hi > 0 and all bounds are finite.
  static Scale log10(double lo, double hi, double px_lo, double px_hi);

  /// The pixel for `v`; clamps nothing (on a log scale v <= 0 gives a non-finite pixel).
  [[nodiscard]] double operator()(double v) const;
  [[nodiscard]] bool is_log() const { return log_; }
  /// Linear: "nice" 1/2/5 steps inside the domain, about `target` of them. Log: the powers of
  /// ten inside, plus 2x and 5x when the domain spans fewer than 3 decades (falling back to
  /// linear steps when that still gives fewer than two).
  [[nodiscard]] std::vector<double> ticks(int target = 5) const;
  [[nodiscard]] double lo() const { return lo_; }
  [[nodiscard]] double hi() const { return hi_; }

 private:
  Scale(double lo, double hi, double px_lo, double px_hi, bool log);

  double lo_, hi_, px_lo_, px_hi_;
  bool log_;
};

/// The [min, max] of the finite values (and only those > 0 when `log`). Pads a single value
/// (log: one decade either side; linear: half its magnitude, or 1 around zero) and an empty
/// set ([1, 10] log, [0, 1] linear); a linear domain includes 0 when `include_zero`.
std::pair<double, double> domain_of(const std::vector<double>& values, bool log,
                                    bool include_zero = false);

/// One data point; `label` becomes its hover <title> (empty: "x, y").
struct Mark {
  double x = 0, y = 0;
  std::string label;
};
/// Series i is drawn with CSS class "s<i % 8>".
struct Series {
  std::string name;
  std::vector<Mark> marks;
};
/// A polyline through data points, e.g. a roof.
struct Line {
  std::string name;
  std::vector<std::pair<double, double>> points;
};

/// A scatter plot (e.g. a roofline). Each drawable mark is a <circle class="mark s<i>"> with a
/// <title>; each line a <polyline class="roof"> labelled at its end. Both set the domain.
struct ScatterPlot {
  std::string id, title, x_label, y_label;  ///< id -> data-plot; labels carry the units.
  bool log_x = true, log_y = true;
  std::vector<Series> series;
  std::vector<Line> lines;
};
std::string render_scatter(const ScatterPlot& p);

/// One bar; `tooltip` (empty: "label: value") becomes its <title>.
struct Bar {
  std::string label;
  double value = 0;
  bool highlight = false;  ///< Drawn with class "low" (e.g. below parity).
  std::string tooltip;
};
/// A bar chart. Each drawable bar is a <rect class="mark bar[ low]"> with a <title>. On a linear
/// axis bars rise from 0; on a log axis from `baseline` when set, else from the axis bottom.
struct BarChart {
  std::string id, title, y_label;
  std::vector<Bar> bars;
  std::optional<double> baseline;   ///< Solid horizontal rule (e.g. 1.0 = parity).
  std::optional<double> mean_line;  ///< Dashed rule labelled `mean_label`.
  std::string mean_label;           ///< e.g. "geomean 0.93x"; empty: the number.
  bool log_y = false;
};
std::string render_bars(const BarChart& c);

/// Step-function lines (best-so-far vs evaluations). Each line with a drawable point is ONE
/// <polyline class="mark s<i>"> with <title>name</title>; its points are sorted by x.
struct LineChart {
  std::string id, title, x_label, y_label;
  bool log_x = false, log_y = true;
  std::vector<Line> lines;
};
std::string render_lines(const LineChart& c);

/// A heatmap over two categorical tunables. Each measured cell is a <rect class="mark cell">
/// with <title>x, y: value (value_label)</title>; unmeasured or non-finite cells are grey
/// <rect class="missing"> (no "mark"). A colour legend bar sits on the right.
struct Heatmap {
  std::string id, title, x_label, y_label, value_label;   ///< value_label e.g. "median µs".
  std::vector<std::string> x_values, y_values;            ///< Category labels; y[0] on top.
  std::vector<std::vector<std::optional<double>>> cells;  ///< cells[y][x]; nullopt = not measured.
  std::optional<std::pair<std::size_t, std::size_t>> highlight;  ///< (y, x) of the winner.
  bool lower_is_better = true;                                   ///< Best cell = dark green.
};
std::string render_heatmap(const Heatmap& h);

/// The default style rules every plot embeds, wrapped in :where() so they have zero
/// specificity: any rule of the page's own style sheet overrides them.
std::string_view default_style_sheet();

}  // namespace ka::report
