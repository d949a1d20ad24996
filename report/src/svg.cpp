// SVG builders for `ka-db report`.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <ka/core/error.hpp>
#include <ka/report/svg.hpp>
#include <limits>

namespace ka::report {

// Note [SVG plot contract]
// Every renderer returns one <svg class="ka-plot" data-plot="<id>"> that a headless browser test
// inspects with `svg[data-plot="<id>"] .mark`, so the class "mark" is reserved for drawn data:
// one per scatter point, bar, measured heatmap cell, and one per line of a line chart. Legend
// swatches, roofs, rules and unmeasured cells never carry it.
// A value that cannot be drawn (NaN, +-inf, or <= 0 on a log axis) gets no element; the plot
// counts them in a "N points not shown: ..." note, and says "no data" when nothing is left.
// Output is a pure function of the input: numbers go through fixed fmt formats (pixels "{:.1f}")
// so equal inputs give equal bytes and 10,000 marks stay near 1 MB.
// Colours come from CSS classes (s0..s7, bar, low, roof, axis, grid, ...). Each SVG embeds
// default_style_sheet() so it stands alone; its rules have zero specificity (:where), so the
// page's style sheet wins wherever it says something. Heatmap cells are the exception: their
// fill is continuous, so it is an inline style.

namespace {

constexpr double kWidth = 640;
constexpr double kHeight = 400;
constexpr double kTitleY = 20;
constexpr double kLegendY = 40;
constexpr double kCharWidthPx = 6.5;  // rough width of one 11px sans-serif glyph
constexpr std::size_t kMaxTickLabels = 10;
constexpr std::size_t kMaxBarLabels = 60;
constexpr int kPaletteSize = 8;
constexpr int kLegendSteps = 32;

constexpr std::string_view kStyleSheet =
    ":where(.ka-plot){font:11px sans-serif}"
    ":where(.ka-plot .title){font-size:14px;font-weight:bold}"
    ":where(.ka-plot .axis){stroke:#333;fill:none}"
    ":where(.ka-plot .grid){stroke:#e6e6e6}"
    ":where(.ka-plot .note){fill:#a33;font-size:10px}"
    ":where(.ka-plot .no-data){fill:#888;font-size:16px}"
    ":where(.ka-plot .roof){fill:none;stroke:#555;stroke-width:1.5}"
    ":where(.ka-plot .roof-label){fill:#555;font-size:10px}"
    ":where(.ka-plot .bar){fill:#4c78a8}"
    ":where(.ka-plot .bar.low){fill:#e45756}"
    ":where(.ka-plot .baseline){stroke:#333}"
    ":where(.ka-plot .mean){stroke:#000;stroke-dasharray:5 3}"
    ":where(.ka-plot .missing){fill:#e8e8e8}"
    ":where(.ka-plot .winner){fill:none;stroke:#d62728;stroke-width:2.5}"
    ":where(.ka-plot .cell-label){font-size:10px}"
    ":where(.ka-plot .s0){fill:#0072b2;stroke:#0072b2}"
    ":where(.ka-plot .s1){fill:#d55e00;stroke:#d55e00}"
    ":where(.ka-plot .s2){fill:#009e73;stroke:#009e73}"
    ":where(.ka-plot .s3){fill:#cc79a7;stroke:#cc79a7}"
    ":where(.ka-plot .s4){fill:#e69f00;stroke:#e69f00}"
    ":where(.ka-plot .s5){fill:#56b4e9;stroke:#56b4e9}"
    ":where(.ka-plot .s6){fill:#000;stroke:#000}"
    ":where(.ka-plot .s7){fill:#999;stroke:#999}"
    ":where(.ka-plot circle.mark){fill-opacity:0.7;stroke-width:0.5}"
    ":where(.ka-plot polyline.mark){fill:none;stroke-width:2;stroke-linejoin:round;"
    "stroke-linecap:round}"
    ":where(.ka-plot line.swatch){stroke-width:3}";

template <typename... T>
void put(std::string& out, fmt::format_string<T...> format, T&&... args) {
  fmt::format_to(std::back_inserter(out), format, std::forward<T>(args)...);
}

double as_double(std::size_t n) { return static_cast<double>(n); }

bool drawable(double v, bool log) { return std::isfinite(v) && (!log || v > 0); }

int series_class(std::size_t i) { return static_cast<int>(i % kPaletteSize); }

// --- text -------------------------------------------------------------------------------------

/// Number of UTF-8 code points (an estimate of glyphs, for layout).
std::size_t glyph_count(std::string_view text) {
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

/// `text` cut to at most `max_glyphs` code points (never inside one), with "…" when cut.
std::string truncate_glyphs(std::string_view text, std::size_t max_glyphs) {
  std::size_t glyphs = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) continue;
    if (glyphs == max_glyphs) return std::string(text.substr(0, i)) + "\u2026";
    ++glyphs;
  }
  return std::string(text);
}

double text_width(std::string_view text) { return kCharWidthPx * as_double(glyph_count(text)); }

std::string plural(std::size_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

// --- ticks and domains ------------------------------------------------------------------------

/// 1, 2 or 5 times a power of ten, close to `raw` (d3's thresholds).
double nice_step(double raw) {
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double error = raw / magnitude;
  if (error >= std::sqrt(50.0)) return 10 * magnitude;
  if (error >= std::sqrt(10.0)) return 5 * magnitude;
  if (error >= std::sqrt(2.0)) return 2 * magnitude;
  return magnitude;
}

bool usable_step(double step) { return std::isfinite(step) && step > 0; }

std::vector<double> linear_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo};
  const double step = nice_step((hi - lo) / std::max(target, 1));
  if (!usable_step(step)) return {lo, hi};
  const double first = std::ceil(lo / step - 1e-9);
  const double last = std::floor(hi / step + 1e-9);
  if (!(last - first <= 1000) || std::fabs(first) > 1e15 || std::fabs(last) > 1e15) {
    return {lo, hi};
  }
  std::vector<double> ticks;
  for (double i = first; i <= last; ++i) {
    const double v = i * step;
    ticks.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  return ticks;
}

bool inside(double v, double lo, double hi) { return v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9); }

std::vector<double> log_ticks(double lo, double hi, int target) {
  const double lg_lo = std::log10(lo);
  const double lg_hi = std::log10(hi);
  if (!(lg_hi - lg_lo <= 1000)) return {lo, hi};
  std::vector<double> ticks;
  const bool with_halves = lg_hi - lg_lo < 3;
  for (double k = std::floor(lg_lo); k <= std::ceil(lg_hi); ++k) {
    const double power = std::pow(10.0, k);
    for (double factor : {1.0, 2.0, 5.0}) {
      if (factor != 1.0 && !with_halves) continue;
      if (inside(power * factor, lo, hi)) ticks.push_back(power * factor);
    }
  }
  if (ticks.size() >= 2) return ticks;
  ticks.clear();
  for (double v : linear_ticks(lo, hi, target)) {
    if (v > 0) ticks.push_back(v);
  }
  return ticks.empty() ? std::vector<double>{lo} : ticks;
}

/// The largest step * 10^k (step from `steps`, ascending) that is <= v.
double log_round_down(double v, const std::array<double, 3>& steps) {
  const double power = std::pow(10.0, std::floor(std::log10(v)));
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (*it * power <= v * (1 + 1e-12)) return *it * power;
  }
  return power;
}

/// The smallest step * 10^k (step from `steps`, ascending, or 10) that is >= v.
double log_round_up(double v, const std::array<double, 3>& steps) {
  const double power = std::pow(10.0, std::floor(std::log10(v)));
  for (double step : steps) {
    if (step * power >= v * (1 - 1e-12)) return step * power;
  }
  return 10 * power;
}

/// Widens a data domain to round numbers so the axis ends on ticks: whole decades (or 1/2/5
/// steps under two decades) on a log axis, multiples of the tick step on a linear one.
std::pair<double, double> nice_domain(std::pair<double, double> domain, bool log) {
  auto [lo, hi] = domain;
  if (log) {
    // Under two decades whole decades would waste most of the axis: stop at 1, 2 or 5 instead.
    const std::array<double, 3> steps =
        hi / lo < 100 ? std::array<double, 3>{1, 2, 5} : std::array<double, 3>{1, 1, 1};
    const double nice_lo = log_round_down(lo, steps);
    const double nice_hi = log_round_up(hi, steps);
    return {nice_lo > 0 ? nice_lo : lo, std::isfinite(nice_hi) ? nice_hi : hi};
  }
  const double step = nice_step((hi - lo) / 5);
  if (!usable_step(step)) return domain;
  const double nice_lo = std::floor(lo / step) * step;
  const double nice_hi = std::ceil(hi / step) * step;
  if (!std::isfinite(nice_lo) || !std::isfinite(nice_hi)) return domain;
  return {nice_lo, nice_hi};
}

Scale axis_scale(const std::vector<double>& values, bool log, bool include_zero, double px_lo,
                 double px_hi) {
  const auto [lo, hi] = nice_domain(domain_of(values, log, include_zero), log);
  return log ? Scale::log10(lo, hi, px_lo, px_hi) : Scale::linear(lo, hi, px_lo, px_hi);
}

// --- frame and chrome -------------------------------------------------------------------------

/// The SVG size and the plot area's edges, in pixels.
struct Frame {
  double width, height;
  double left, top, right, bottom;
};

Frame default_frame() { return {kWidth, kHeight, 70, 56, kWidth - 30, kHeight - 56}; }

void open_svg(std::string& out, const std::string& id, const std::string& title, const Frame& f) {
  const std::string safe_title = escape_xml(title);
  put(out,
      "<svg xmlns=\"http://www.w3.org/2000/svg\" data-plot=\"{}\" viewBox=\"0 0 {:.0f} {:.0f}\" "
      "width=\"{:.0f}\" height=\"{:.0f}\" role=\"img\" aria-label=\"{}\" class=\"ka-plot\">\n",
      escape_xml(id), f.width, f.height, f.width, f.height, safe_title);
  put(out, "<style>{}</style>\n<title>{}</title>\n", kStyleSheet, safe_title);
  put(out, "<text class=\"title\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
      f.width / 2, kTitleY, safe_title);
}

void close_svg(std::string& out) { out += "</svg>\n"; }

void put_line(std::string& out, std::string_view css_class, double x1, double y1, double x2,
              double y2) {
  put(out, "<line class=\"{}\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>\n",
      css_class, x1, y1, x2, y2);
}

void put_text(std::string& out, double x, double y, std::string_view anchor, std::string_view text,
              std::string_view css_class = {}) {
  out += "<text";
  if (!css_class.empty()) put(out, " class=\"{}\"", css_class);
  put(out, " x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\">{}</text>\n", x, y, anchor,
      escape_xml(text));
}

void put_vertical_text(std::string& out, double x, double y, std::string_view text) {
  put(out,
      "<text transform=\"translate({:.1f} {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
      x, y, escape_xml(text));
}

/// Every how many ticks gets a label, so that at most kMaxTickLabels are written.
std::size_t label_stride(std::size_t ticks) {
  return std::max<std::size_t>(1, (ticks + kMaxTickLabels - 1) / kMaxTickLabels);
}

void draw_x_axis(std::string& out, const Frame& f, const Scale& x, const std::string& label) {
  const std::vector<double> ticks = x.ticks();
  const std::size_t stride = label_stride(ticks.size());
  for (std::size_t i = 0; i < ticks.size(); ++i) {
    const double px = x(ticks[i]);
    put_line(out, "grid", px, f.top, px, f.bottom);
    put_line(out, "axis", px, f.bottom, px, f.bottom + 5);
    if (i % stride == 0) put_text(out, px, f.bottom + 17, "middle", format_number(ticks[i]));
  }
  put_line(out, "axis", f.left, f.bottom, f.right, f.bottom);
  put_text(out, (f.left + f.right) / 2, f.bottom + 34, "middle", label);
}

void draw_y_axis(std::string& out, const Frame& f, const Scale& y, const std::string& label) {
  const std::vector<double> ticks = y.ticks();
  const std::size_t stride = label_stride(ticks.size());
  for (std::size_t i = 0; i < ticks.size(); ++i) {
    const double py = y(ticks[i]);
    put_line(out, "grid", f.left, py, f.right, py);
    put_line(out, "axis", f.left - 5, py, f.left, py);
    if (i % stride == 0) put_text(out, f.left - 8, py + 4, "end", format_number(ticks[i]));
  }
  put_line(out, "axis", f.left, f.top, f.left, f.bottom);
  put_vertical_text(out, 16, (f.top + f.bottom) / 2, label);
}

/// "3 points not shown: no finite positive value" at the bottom left, when anything was hidden.
void draw_note(std::string& out, const Frame& f, std::size_t hidden, std::string_view noun,
               bool any_log) {
  if (hidden == 0) return;
  put_text(out, 6, f.height - 6, "start",
           fmt::format("{} not shown: no finite{} value", plural(hidden, noun),
                       any_log ? " positive" : ""),
           "note");
}

void draw_no_data(std::string& out, const Frame& f) {
  put_text(out, (f.left + f.right) / 2, (f.top + f.bottom) / 2, "middle", "no data", "no-data");
}

/// One row of legend entries under the title: a swatch in class s<i> and the name. Entries
/// that do not fit are summarised as "+N more".
void draw_legend(std::string& out, const Frame& f, const std::vector<std::string>& names,
                 bool line_swatch) {
  double x = f.left;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string name = truncate_glyphs(names[i], 24);
    const double entry_width = 22 + text_width(name);
    if (x + entry_width > f.width - 8 && i > 0) {
      put_text(out, x, kLegendY + 4, "start", fmt::format("+{} more", names.size() - i));
      return;
    }
    if (line_swatch) {
      put_line(out, fmt::format("swatch s{}", series_class(i)), x, kLegendY, x + 12, kLegendY);
    } else {
      put(out, "<circle class=\"swatch s{}\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\"/>\n",
          series_class(i), x + 6, kLegendY);
    }
    put_text(out, x + 16, kLegendY + 4, "start", name);
    x += entry_width + 10;
  }
}

bool any_named(const std::vector<std::string>& names) {
  return std::any_of(names.begin(), names.end(), [](const std::string& n) { return !n.empty(); });
}

std::string points_attribute(const std::vector<std::pair<double, double>>& pixels) {
  std::string points;
  for (const auto& [px, py] : pixels) {
    if (!points.empty()) points += ' ';
    put(points, "{:.1f},{:.1f}", px, py);
  }
  return points;
}

// --- scatter ----------------------------------------------------------------------------------

struct Drawable {
  std::vector<double> xs, ys;
  std::size_t hidden = 0;
};

/// The drawable coordinates of every mark and line point, for the axes' domains.
Drawable collect_scatter(const ScatterPlot& p) {
  Drawable d;
  auto take = [&](double x, double y) {
    if (drawable(x, p.log_x) && drawable(y, p.log_y)) {
      d.xs.push_back(x);
      d.ys.push_back(y);
    } else {
      ++d.hidden;
    }
  };
  for (const Series& s : p.series) {
    for (const Mark& m : s.marks) take(m.x, m.y);
  }
  for (const Line& l : p.lines) {
    for (const auto& [x, y] : l.points) take(x, y);
  }
  return d;
}

void draw_roofs(std::string& out, const ScatterPlot& p, const Scale& x, const Scale& y) {
  for (const Line& line : p.lines) {
    std::vector<std::pair<double, double>> pixels;
    for (const auto& [vx, vy] : line.points) {
      if (drawable(vx, p.log_x) && drawable(vy, p.log_y)) pixels.emplace_back(x(vx), y(vy));
    }
    if (pixels.empty()) continue;
    put(out, "<polyline class=\"roof\" points=\"{}\"><title>{}</title></polyline>\n",
        points_attribute(pixels), escape_xml(line.name));
    if (!line.name.empty()) {
      // Above the end, right-aligned: clear of a roof that continues to the right.
      put_text(out, pixels.back().first - 4, pixels.back().second - 6, "end",
               truncate_glyphs(line.name, 48), "roof-label");
    }
  }
}

std::size_t draw_points(std::string& out, const ScatterPlot& p, const Scale& x, const Scale& y,
                        std::size_t total) {
  const double radius = total > 1000 ? 2.0 : 3.5;
  std::size_t drawn = 0;
  for (std::size_t i = 0; i < p.series.size(); ++i) {
    for (const Mark& m : p.series[i].marks) {
      if (!drawable(m.x, p.log_x) || !drawable(m.y, p.log_y)) continue;
      const std::string title =
          m.label.empty() ? format_number(m.x) + ", " + format_number(m.y) : m.label;
      put(out,
          "<circle class=\"mark s{}\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\"><title>{}</title>"
          "</circle>\n",
          series_class(i), x(m.x), y(m.y), radius, escape_xml(title));
      ++drawn;
    }
  }
  return drawn;
}

// --- line chart -------------------------------------------------------------------------------

/// Best-so-far as a step function: hold each value until the next point's x.
std::vector<std::pair<double, double>> step_pixels(std::vector<std::pair<double, double>> points,
                                                   const Scale& x, const Scale& y) {
  std::stable_sort(points.begin(), points.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<double, double>> pixels;
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (i > 0) pixels.emplace_back(x(points[i].first), y(points[i - 1].second));
    pixels.emplace_back(x(points[i].first), y(points[i].second));
  }
  // A lone point would be an invisible polyline; a zero-length segment with round caps is a dot.
  if (pixels.size() == 1) pixels.push_back(pixels.front());
  return pixels;
}

// --- bars -------------------------------------------------------------------------------------

Frame bar_frame(std::size_t bars) {
  const bool labels = bars <= kMaxBarLabels;
  const double width = std::clamp(120 + 16 * as_double(bars), kWidth, 1400.0);
  const double height = labels ? kHeight + 44 : kHeight;
  return {width, height, 70, 56, width - 100, height - (labels ? 100 : 56)};
}

std::vector<double> bar_domain_values(const BarChart& c) {
  std::vector<double> values;
  for (const Bar& b : c.bars) values.push_back(b.value);
  if (c.baseline) values.push_back(*c.baseline);
  if (c.mean_line) values.push_back(*c.mean_line);
  return values;
}

void draw_rule(std::string& out, const Frame& f, const Scale& y, std::optional<double> value,
               bool log, std::string_view css_class, std::string_view label) {
  if (!value || !drawable(*value, log)) return;
  const double py = y(*value);
  put_line(out, css_class, f.left, py, f.right, py);
  if (!label.empty()) put_text(out, f.right + 4, py + 4, "start", truncate_glyphs(label, 14));
}

std::size_t draw_bar_marks(std::string& out, const BarChart& c, const Frame& f, const Scale& y) {
  const double slot = (f.right - f.left) / as_double(std::max<std::size_t>(c.bars.size(), 1));
  const bool from_baseline = c.log_y && c.baseline && drawable(*c.baseline, true);
  const double base_py = c.log_y ? (from_baseline ? y(*c.baseline) : f.bottom) : y(0.0);
  std::size_t drawn = 0;
  for (std::size_t i = 0; i < c.bars.size(); ++i) {
    const Bar& bar = c.bars[i];
    if (!drawable(bar.value, c.log_y)) continue;
    const double py = y(bar.value);
    // At least 1px tall, so a bar exactly at its base still shows (and can be hovered).
    const double height = std::max(std::fabs(base_py - py), 1.0);
    const double top = py <= base_py ? base_py - height : base_py;
    const std::string title = bar.tooltip.empty()
                                  ? fmt::format("{}: {}", bar.label, format_number(bar.value))
                                  : bar.tooltip;
    put(out,
        "<rect class=\"mark bar{}\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\">"
        "<title>{}</title></rect>\n",
        bar.highlight ? " low" : "", f.left + slot * (as_double(i) + 0.1), top, slot * 0.8, height,
        escape_xml(title));
    ++drawn;
  }
  return drawn;
}

void draw_bar_labels(std::string& out, const BarChart& c, const Frame& f) {
  if (c.bars.size() > kMaxBarLabels) return;
  const double slot = (f.right - f.left) / as_double(std::max<std::size_t>(c.bars.size(), 1));
  for (std::size_t i = 0; i < c.bars.size(); ++i) {
    put(out,
        "<text transform=\"translate({:.1f} {:.1f}) rotate(-45)\" text-anchor=\"end\">{}</text>\n",
        f.left + slot * (as_double(i) + 0.5), f.bottom + 10,
        escape_xml(truncate_glyphs(c.bars[i].label, 16)));
  }
}

// --- heatmap ----------------------------------------------------------------------------------

std::optional<double> cell_at(const Heatmap& h, std::size_t yi, std::size_t xi) {
  if (yi >= h.cells.size() || xi >= h.cells[yi].size()) return std::nullopt;
  return h.cells[yi][xi];
}

std::string category(const std::vector<std::string>& labels, std::size_t i) {
  return i < labels.size() ? labels[i] : std::string();
}

std::size_t max_glyphs(const std::vector<std::string>& labels, std::size_t cap) {
  std::size_t widest = 0;
  for (const std::string& l : labels) widest = std::max(widest, glyph_count(l));
  return std::min(widest, cap);
}

/// The grid's shape and cell size, in pixels.
struct Grid {
  std::size_t nx = 0, ny = 0;
  double cell_w = 0, cell_h = 0;
};

Grid heatmap_grid(const Heatmap& h) {
  Grid g;
  g.nx = h.x_values.size();
  for (const auto& row : h.cells) g.nx = std::max(g.nx, row.size());
  g.ny = std::max(h.y_values.size(), h.cells.size());
  if (g.nx == 0 || g.ny == 0) return {};
  g.cell_w = std::clamp(480 / as_double(g.nx), 4.0, 60.0);
  g.cell_h = std::clamp(300 / as_double(g.ny), 4.0, 40.0);
  return g;
}

Frame heatmap_frame(const Heatmap& h, const Grid& g) {
  if (g.nx == 0) return default_frame();
  const double left = 40 + kCharWidthPx * as_double(max_glyphs(h.y_values, 16));
  const double plot_w = g.cell_w * as_double(g.nx);
  const double plot_h = std::max(g.cell_h * as_double(g.ny), 80.0);
  // Wide enough for the title, however few the columns.
  const double width = std::max({left + plot_w + 120, 360.0, text_width(h.title) * 1.15 + 40});
  const double height = 56 + plot_h + 60;
  return {width, height, left, 56, left + plot_w, 56 + g.cell_h * as_double(g.ny)};
}

/// Colour by goodness g in [0, 1] (1 = best): ColorBrewer YlGn, light yellow to dark green.
std::string goodness_colour(double g) {
  constexpr std::array<std::array<double, 3>, 3> kStops = {
      {{255, 255, 204}, {120, 198, 121}, {0, 104, 55}}};
  const double t = std::clamp(g, 0.0, 1.0) * 2;
  const std::size_t k = t >= 1 ? 1 : 0;
  const double u = t - as_double(k);
  auto channel = [&](std::size_t c) {
    return static_cast<int>(std::lround(kStops[k][c] + (kStops[k + 1][c] - kStops[k][c]) * u));
  };
  return fmt::format("#{:02x}{:02x}{:02x}", channel(0), channel(1), channel(2));
}

/// Maps a cell value to [0, 1]; a log scale when every value is positive and they span a decade.
Scale colour_scale(const Heatmap& h, const Grid& g, double px_lo, double px_hi) {
  std::vector<double> values;
  for (std::size_t yi = 0; yi < g.ny; ++yi) {
    for (std::size_t xi = 0; xi < g.nx; ++xi) {
      const auto v = cell_at(h, yi, xi);
      if (v && std::isfinite(*v)) values.push_back(*v);
    }
  }
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  if (values.empty()) return Scale::linear(0, 1, px_lo, px_hi);
  if (*lo > 0 && *hi / *lo >= 10) return Scale::log10(*lo, *hi, px_lo, px_hi);
  return Scale::linear(*lo, *hi, px_lo, px_hi);
}

double goodness(const Scale& colour, double v, bool lower_is_better) {
  const double t = std::clamp(colour(v), 0.0, 1.0);
  return lower_is_better ? 1 - t : t;
}

struct CellCounts {
  std::size_t drawn = 0, hidden = 0;
};

CellCounts draw_cells(std::string& out, const Heatmap& h, const Grid& g, const Frame& f,
                      const Scale& colour) {
  const bool labelled = g.cell_w >= 36 && g.cell_h >= 16;
  const std::string unit = h.value_label.empty() ? "" : " (" + h.value_label + ")";
  CellCounts counts;
  for (std::size_t yi = 0; yi < g.ny; ++yi) {
    for (std::size_t xi = 0; xi < g.nx; ++xi) {
      const double x = f.left + g.cell_w * as_double(xi);
      const double y = f.top + g.cell_h * as_double(yi);
      const std::string where = category(h.x_values, xi) + ", " + category(h.y_values, yi);
      const auto v = cell_at(h, yi, xi);
      if (!v || !std::isfinite(*v)) {
        counts.hidden += v ? 1 : 0;
        put(out,
            "<rect class=\"missing\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" "
            "height=\"{:.1f}\"><title>{}</title></rect>\n",
            x, y, g.cell_w, g.cell_h,
            escape_xml(where + (v ? ": no finite value" : ": not measured")));
        continue;
      }
      const double good = goodness(colour, *v, h.lower_is_better);
      put(out,
          "<rect class=\"mark cell\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
          "style=\"fill:{}\"><title>{}</title></rect>\n",
          x, y, g.cell_w, g.cell_h, goodness_colour(good),
          escape_xml(where + ": " + format_number(*v) + unit));
      if (labelled) {
        put(out,
            "<text class=\"cell-label\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" "
            "style=\"fill:{}\">{}</text>\n",
            x + g.cell_w / 2, y + g.cell_h / 2 + 4, good > 0.5 ? "#fff" : "#000",
            escape_xml(format_number(*v)));
      }
      ++counts.drawn;
    }
  }
  return counts;
}

void draw_category_axes(std::string& out, const Heatmap& h, const Grid& g, const Frame& f) {
  const std::size_t x_glyphs = std::max<std::size_t>(max_glyphs(h.x_values, 12), 1);
  const auto x_stride = static_cast<std::size_t>(
      std::max(1.0, std::ceil((kCharWidthPx * as_double(x_glyphs) + 6) / g.cell_w)));
  for (std::size_t xi = 0; xi < g.nx; xi += x_stride) {
    put_text(out, f.left + g.cell_w * (as_double(xi) + 0.5), f.bottom + 14, "middle",
             truncate_glyphs(category(h.x_values, xi), 12));
  }
  const auto y_stride = static_cast<std::size_t>(std::max(1.0, std::ceil(14 / g.cell_h)));
  for (std::size_t yi = 0; yi < g.ny; yi += y_stride) {
    put_text(out, f.left - 6, f.top + g.cell_h * (as_double(yi) + 0.5) + 4, "end",
             truncate_glyphs(category(h.y_values, yi), 16));
  }
  put_text(out, (f.left + f.right) / 2, f.bottom + 34, "middle", h.x_label);
  put_vertical_text(out, 14, (f.top + f.bottom) / 2, h.y_label);
}

void draw_winner(std::string& out, const Heatmap& h, const Grid& g, const Frame& f) {
  if (!h.highlight) return;
  const auto [yi, xi] = *h.highlight;
  if (yi >= g.ny || xi >= g.nx) return;
  put(out,
      "<rect class=\"winner\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\">"
      "<title>best</title></rect>\n",
      f.left + g.cell_w * as_double(xi) + 1, f.top + g.cell_h * as_double(yi) + 1,
      std::max(g.cell_w - 2, 1.0), std::max(g.cell_h - 2, 1.0));
}

/// A vertical colour bar right of the grid, highest value on top, with value ticks.
void draw_colour_legend(std::string& out, const Heatmap& h, const Grid& g, const Frame& f) {
  const double x = f.right + 20;
  const double top = f.top;
  const double height = std::clamp(g.cell_h * as_double(g.ny), 80.0, 200.0);
  const double step = height / kLegendSteps;
  for (int j = 0; j < kLegendSteps; ++j) {
    const double t = 1 - (j + 0.5) / kLegendSteps;
    put(out,
        "<rect class=\"legend\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"{:.1f}\" "
        "style=\"fill:{}\"/>\n",
        x, top + step * j, step + 0.5, goodness_colour(h.lower_is_better ? 1 - t : t));
  }
  const Scale px = colour_scale(h, g, top + height, top);
  for (double v : px.ticks(3)) put_text(out, x + 16, px(v) + 4, "start", format_number(v));
  put_text(out, x, top - 6, "start", truncate_glyphs(h.value_label, 16));
}

}  // namespace

// --- public -----------------------------------------------------------------------------------

std::string escape_xml(std::string_view text) {
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
      case '\t':
      case '\n':
      case '\r':
        out += c;
        break;
      default:
        // XML 1.0 cannot hold the other C0 controls, not even as character references.
        if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
  }
  return out;
}

std::string format_number(double v) {
  if (!std::isfinite(v)) return "n/a";
  if (v == 0) return "0";
  const double magnitude = std::fabs(v);
  if (magnitude < 1e-4 || magnitude >= 1e6) return fmt::format("{:.3g}", v);
  const int exponent = static_cast<int>(std::floor(std::log10(magnitude)));
  if (exponent >= 3) {
    // 12345 -> 12300: three significant digits, as for the small numbers.
    const double unit = std::pow(10.0, exponent - 2);
    return fmt::format("{:.0f}", std::round(v / unit) * unit);
  }
  std::string text = fmt::format("{:.{}f}", v, 2 - exponent);
  if (text.find('.') != std::string::npos) {
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') text.pop_back();
  }
  return text == "-0" ? "0" : text;
}

Scale::Scale(double lo, double hi, double px_lo, double px_hi, bool log)
    : lo_(lo), hi_(hi), px_lo_(px_lo), px_hi_(px_hi), log_(log) {}

Scale Scale::linear(double lo, double hi, double px_lo, double px_hi) {
  KA_CHECK(std::isfinite(lo) && std::isfinite(hi) && std::isfinite(px_lo) && std::isfinite(px_hi),
           "Scale::linear needs finite bounds, got [", lo, ", ", hi, "] -> [", px_lo, ", ", px_hi,
           "]");
  return Scale(lo, hi, px_lo, px_hi, false);
}

Scale Scale::log10(double lo, double hi, double px_lo, double px_hi) {
  KA_CHECK(lo > 0 && hi > 0 && std::isfinite(lo) && std::isfinite(hi) && std::isfinite(px_lo) &&
               std::isfinite(px_hi),
           "Scale::log10 needs finite bounds with lo, hi > 0, got [", lo, ", ", hi, "] -> [", px_lo,
           ", ", px_hi, "]");
  return Scale(lo, hi, px_lo, px_hi, true);
}

double Scale::operator()(double v) const {
  const double a = log_ ? std::log10(lo_) : lo_;
  const double b = log_ ? std::log10(hi_) : hi_;
  if (a == b) return (px_lo_ + px_hi_) / 2;
  const double t = log_ ? std::log10(v) : v;
  return px_lo_ + (t - a) / (b - a) * (px_hi_ - px_lo_);
}

std::vector<double> Scale::ticks(int target) const {
  const double lo = std::min(lo_, hi_);
  const double hi = std::max(lo_, hi_);
  return log_ ? log_ticks(lo, hi, target) : linear_ticks(lo, hi, target);
}

std::pair<double, double> domain_of(const std::vector<double>& values, bool log,
                                    bool include_zero) {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (double v : values) {
    if (!drawable(v, log)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (lo > hi) return log ? std::pair{1.0, 10.0} : std::pair{0.0, 1.0};
  if (log) {
    if (lo < hi) return {lo, hi};
    // One decade either side, unless that leaves the doubles (then the scale is degenerate).
    return {lo / 10 > 0 ? lo / 10 : lo, std::isfinite(hi * 10) ? hi * 10 : hi};
  }
  if (include_zero) {
    lo = std::min(lo, 0.0);
    hi = std::max(hi, 0.0);
  }
  if (lo < hi) return {lo, hi};
  if (lo == 0) return include_zero ? std::pair{0.0, 1.0} : std::pair{-1.0, 1.0};
  const double pad = std::fabs(lo) / 2;
  return {lo - pad, hi + pad};
}

std::string_view default_style_sheet() { return kStyleSheet; }

std::string render_scatter(const ScatterPlot& p) {
  const Frame f = default_frame();
  const Drawable d = collect_scatter(p);
  const Scale x = axis_scale(d.xs, p.log_x, false, f.left, f.right);
  const Scale y = axis_scale(d.ys, p.log_y, false, f.bottom, f.top);
  std::string out;
  out.reserve(4096 + 96 * d.xs.size());
  open_svg(out, p.id, p.title, f);
  draw_x_axis(out, f, x, p.x_label);
  draw_y_axis(out, f, y, p.y_label);
  draw_roofs(out, p, x, y);
  const std::size_t drawn = draw_points(out, p, x, y, d.xs.size());
  std::vector<std::string> names;
  for (const Series& s : p.series) names.push_back(s.name);
  if (any_named(names)) draw_legend(out, f, names, false);
  draw_note(out, f, d.hidden, "point", p.log_x || p.log_y);
  if (drawn == 0) draw_no_data(out, f);
  close_svg(out);
  return out;
}

std::string render_bars(const BarChart& c) {
  const Frame f = bar_frame(c.bars.size());
  const Scale y =
      axis_scale(bar_domain_values(c), c.log_y, /*include_zero=*/!c.log_y, f.bottom, f.top);
  std::string out;
  out.reserve(4096 + 128 * c.bars.size());
  open_svg(out, c.id, c.title, f);
  draw_y_axis(out, f, y, c.y_label);
  put_line(out, "axis", f.left, f.bottom, f.right, f.bottom);
  const std::size_t drawn = draw_bar_marks(out, c, f, y);
  draw_bar_labels(out, c, f);
  draw_rule(out, f, y, c.baseline, c.log_y, "baseline", "");
  const std::string mean_label =
      c.mean_label.empty() && c.mean_line ? "mean " + format_number(*c.mean_line) : c.mean_label;
  draw_rule(out, f, y, c.mean_line, c.log_y, "mean", mean_label);
  draw_note(out, f, c.bars.size() - drawn, "bar", c.log_y);
  if (drawn == 0) draw_no_data(out, f);
  close_svg(out);
  return out;
}

std::string render_lines(const LineChart& c) {
  const Frame f = default_frame();
  std::vector<std::vector<std::pair<double, double>>> kept(c.lines.size());
  std::vector<double> xs, ys;
  std::size_t hidden = 0;
  for (std::size_t i = 0; i < c.lines.size(); ++i) {
    for (const auto& [vx, vy] : c.lines[i].points) {
      if (!drawable(vx, c.log_x) || !drawable(vy, c.log_y)) {
        ++hidden;
        continue;
      }
      kept[i].emplace_back(vx, vy);
      xs.push_back(vx);
      ys.push_back(vy);
    }
  }
  const Scale x = axis_scale(xs, c.log_x, false, f.left, f.right);
  const Scale y = axis_scale(ys, c.log_y, false, f.bottom, f.top);
  std::string out;
  out.reserve(4096 + 32 * xs.size());
  open_svg(out, c.id, c.title, f);
  draw_x_axis(out, f, x, c.x_label);
  draw_y_axis(out, f, y, c.y_label);
  std::size_t drawn = 0;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < c.lines.size(); ++i) {
    const std::string name = c.lines[i].name.empty() ? fmt::format("line {}", i) : c.lines[i].name;
    names.push_back(name);
    if (kept[i].empty()) continue;
    put(out, "<polyline class=\"mark s{}\" points=\"{}\"><title>{}</title></polyline>\n",
        series_class(i), points_attribute(step_pixels(kept[i], x, y)), escape_xml(name));
    ++drawn;
  }
  if (!names.empty()) draw_legend(out, f, names, true);
  draw_note(out, f, hidden, "point", c.log_x || c.log_y);
  if (drawn == 0) draw_no_data(out, f);
  close_svg(out);
  return out;
}

std::string render_heatmap(const Heatmap& h) {
  const Grid g = heatmap_grid(h);
  const Frame f = heatmap_frame(h, g);
  std::string out;
  out.reserve(4096 + 160 * g.nx * g.ny);
  open_svg(out, h.id, h.title, f);
  if (g.nx == 0) {
    draw_no_data(out, f);
    close_svg(out);
    return out;
  }
  const CellCounts counts = draw_cells(out, h, g, f, colour_scale(h, g, 0, 1));
  draw_winner(out, h, g, f);
  draw_category_axes(out, h, g, f);
  if (counts.drawn > 0) draw_colour_legend(out, h, g, f);
  draw_note(out, f, counts.hidden, "cell", false);
  if (counts.drawn == 0) draw_no_data(out, f);
  close_svg(out);
  return out;
}

}  // namespace ka::report
