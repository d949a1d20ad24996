// The page of ka-db report. See ka/report/html.hpp.
#include <ka/report/html.hpp>

#include <ka/core/error.hpp>
#include <ka/report/svg.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string_view>

namespace ka::report {
namespace {

// Note [Report page]
// Every plot is followed by a <details> table with its numbers (screen readers, copying), and
// every figure says what it is: units on the axes, "median of N" in the method line. Tables
// with class "sortable" sort on a header click; cells sort by their data-v (a number) when
// they have one, else by their text. The script is the page's only one and touches nothing
// outside the tables, so a page whose script is blocked (e-mail viewers) still reads fully.

constexpr std::string_view kStyle = R"css(
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1100px; padding: 0 16px 48px; color: #1b1b1b; }
h1 { margin: 24px 0 4px; } h2 { margin-top: 36px; border-bottom: 1px solid #ccc; } h3 { margin-top: 24px; }
nav a { margin-right: 12px; } .muted { color: #666; } .warn { color: #a33; }
table { border-collapse: collapse; margin: 8px 0; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 8px; border-bottom: 1px solid #e4e4e4; text-align: right; }
th:first-child, td:first-child, td.text, th.text { text-align: left; }
table.sortable th { cursor: pointer; user-select: none; } table.sortable th:hover { background: #f0f0f0; }
td.low, tr.low td { background: #fde8e8; } td.bad { color: #a33; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; }
dl.facts dt { color: #555; } td.config { font: 12px ui-monospace, monospace; max-width: 360px; text-align: left; }
dl.facts dd { margin: 0; font-family: ui-monospace, monospace; overflow-wrap: anywhere; }
details { margin: 4px 0 16px; } summary { cursor: pointer; color: #345; }
figure { margin: 12px 0; } svg { max-width: 100%; height: auto; }
)css";

constexpr std::string_view kScript = R"js(
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, column) {
    th.addEventListener('click', function () {
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var up = th.getAttribute('aria-sort') !== 'ascending';
      var key = function (row) {
        var cell = row.cells[column];
        if (!cell) return '';
        var v = cell.getAttribute('data-v');
        return v === null ? cell.textContent : parseFloat(v);
      };
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (typeof x === 'number' && typeof y === 'number') return up ? x - y : y - x;
        return up ? String(x).localeCompare(String(y)) : String(y).localeCompare(String(x));
      });
      rows.forEach(function (row) { body.appendChild(row); });
      table.querySelectorAll('th').forEach(function (h) { h.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', up ? 'ascending' : 'descending');
    });
  });
});
)js";

std::string esc(std::string_view s) { return escape_xml(s); }

bool finite_positive(const std::optional<double>& v) {
  return v.has_value() && std::isfinite(*v) && *v > 0.0;
}

// A numeric table cell: shown with `format`, sorted by the raw value; "-" when unset.
std::string number_cell(const std::optional<double>& v, std::string_view format,
                        std::string_view css = "") {
  const std::string cls = css.empty() ? "" : fmt::format(" class=\"{}\"", css);
  if (!v.has_value() || !std::isfinite(*v)) return fmt::format("<td{} data-v=\"-1e300\">-</td>", cls);
  return fmt::format("<td{} data-v=\"{:.6g}\">{}</td>", cls, *v,
                     fmt::format(fmt::runtime(format), *v));
}

std::string text_cell(std::string_view text, std::string_view css = "text") {
  return fmt::format("<td class=\"{}\">{}</td>", css, esc(text));
}

std::string header_row(const std::vector<std::string>& names) {
  std::string out = "<thead><tr>";
  for (const std::string& n : names) out += "<th scope=\"col\">" + esc(n) + "</th>";
  return out + "</tr></thead>";
}

std::string fact(std::string_view name, std::string_view value) {
  return fmt::format("<dt>{}</dt><dd>{}</dd>", esc(name), esc(value.empty() ? "-" : value));
}

std::string optional_figure(const std::optional<double>& v, std::string_view unit) {
  return finite_positive(v) ? fmt::format("{:.1f} {}", *v, unit) : std::string("not measured");
}

std::string plot_with_numbers(const std::string& svg, const std::string& caption,
                              const std::string& table) {
  return "<figure>" + svg + "<details><summary>" + esc(caption) + "</summary>" + table +
         "</details></figure>\n";
}

// --- run overview ----------------------------------------------------------------------------

// "median of 5 repetitions, hot cache" from the ka rows of the run's cases.
std::string method_of(const BenchRun& run) {
  std::int64_t reps = 0;
  std::string cache;
  for (const CaseRow& c : run.cases) {
    for (const ImplResult& r : c.impls) {
      reps = std::max(reps, r.repetitions);
      if (cache.empty()) cache = r.cache_state;
    }
  }
  if (reps == 0) return "no measurements";
  return fmt::format("per-call time, median of {} repetitions, {} cache", reps,
                     cache.empty() ? "hot" : cache);
}

std::string overview_section(const BenchRun& b) {
  const db::RunInfo& r = b.run.info;
  std::string out = fmt::format("<h3>Machine and method</h3><dl class=\"facts\">");
  out += fact("tool", r.tool) + fact("command", r.command_line) + fact("status", b.run.status);
  out += fact("started / finished (UTC)", b.run.started_at + " / " + b.run.finished_at);
  out += fact("host", r.host) + fact("device", r.device) + fact("fingerprint", r.fingerprint);
  out += fact("ka", r.ka_version + " (" + r.git_sha + ")");
  out += fact("libtorch", r.libtorch_version);
  out += fact("BLAS under libtorch; peers", r.openblas_core);
  out += fact("OPENBLAS_CORETYPE", r.openblas_coretype.empty() ? "unset" : r.openblas_coretype);
  out += fact("threads", std::to_string(r.threads));
  out += fact("FMA peak (measured)", optional_figure(r.fma_peak_gflops, "GFLOP/s") + " on " +
                                         std::to_string(r.threads) + " thread(s), " +
                                         optional_figure(r.fma_peak_1t_gflops, "GFLOP/s") +
                                         " on one");
  out += fact("copy bandwidth (measured)", optional_figure(r.copy_gbps, "GB/s"));
  out += fact("read bandwidth (measured)", optional_figure(r.read_gbps, "GB/s"));
  out += fact("method", method_of(b));
  for (const auto& [key, value] : b.run.machine) out += fact("machine: " + key, value);
  return out + "</dl>\n";
}

std::string cases_table(const BenchRun& b) {
  std::vector<std::string> head = {"case", "op", "GFLOP", "FLOP/byte"};
  for (const std::string& impl : b.impls) {
    head.push_back(impl + " median µs");
    head.push_back(impl + " GFLOP/s");
    head.push_back(impl + " %peak");
  }
  for (const std::string& impl : b.impls) {
    if (impl != "ka") head.push_back("ka vs " + impl);
  }
  std::string out = "<table class=\"sortable\" id=\"cases-" + std::to_string(b.run.id) + "\">" +
                    header_row(head) + "<tbody>";
  for (const CaseRow& c : b.cases) {
    out += "<tr>" + text_cell(c.name) + text_cell(c.op);
    out += number_cell(c.flop ? std::optional<double>(*c.flop / 1e9) : std::nullopt, "{:.3g}");
    out += number_cell(c.intensity(), "{:.3g}");
    for (const std::string& impl : b.impls) {
      const ImplResult* r = c.find(impl);
      if (r == nullptr || r->disposition != "ok") {
        const std::string what = r == nullptr ? "-" : r->disposition;
        out += text_cell(what, r == nullptr ? "text" : "text bad") + "<td></td><td></td>";
        continue;
      }
      out += number_cell(r->median_ns ? std::optional<double>(*r->median_ns / 1e3) : std::nullopt,
                         "{:.2f}");
      out += number_cell(r->gflops, "{:.1f}") + number_cell(r->pct_peak, "{:.1f}%");
    }
    for (const std::string& impl : b.impls) {
      if (impl == "ka") continue;
      const ImplResult* ka = c.find("ka");
      const ImplResult* ref = c.find(impl);
      std::optional<double> ratio;
      if (ka && ref && ka->disposition == "ok" && ref->disposition == "ok" &&
          finite_positive(ka->median_ns) && finite_positive(ref->median_ns)) {
        ratio = *ref->median_ns / *ka->median_ns;
      }
      out += number_cell(ratio, "{:.2f}x", ratio && *ratio < 1.0 ? "low" : "");
    }
    out += "</tr>";
  }
  return out + "</tbody></table>\n";
}

// --- roofline --------------------------------------------------------------------------------

// The memory roof: the copy bandwidth when the run probed it, else the streaming read.
std::optional<std::pair<double, std::string>> memory_roof(const db::RunInfo& r) {
  if (finite_positive(r.copy_gbps)) return std::make_pair(*r.copy_gbps, std::string("copy"));
  if (finite_positive(r.read_gbps)) return std::make_pair(*r.read_gbps, std::string("read"));
  return std::nullopt;
}

std::vector<Line> roofs(const db::RunInfo& r, double lo_intensity, double hi_intensity) {
  std::vector<Line> out;
  const auto mem = memory_roof(r);
  const bool compute = finite_positive(r.fma_peak_gflops);
  const double lo = lo_intensity / 2.0;
  const double hi = hi_intensity * 2.0;
  if (compute && mem) {
    // Bandwidth (GB/s) x intensity (FLOP/byte) = GFLOP/s, up to the ridge, then flat.
    const double ridge = *r.fma_peak_gflops / mem->first;
    Line roof{fmt::format("roof: {:.0f} GFLOP/s, {:.1f} GB/s {}", *r.fma_peak_gflops, mem->first,
                          mem->second),
              {}};
    roof.points.emplace_back(lo, mem->first * lo);
    if (ridge > lo && ridge < hi) roof.points.emplace_back(ridge, *r.fma_peak_gflops);
    roof.points.emplace_back(hi, std::min(*r.fma_peak_gflops, mem->first * hi));
    out.push_back(std::move(roof));
  } else if (compute) {
    out.push_back({fmt::format("FMA peak {:.0f} GFLOP/s", *r.fma_peak_gflops),
                   {{lo, *r.fma_peak_gflops}, {hi, *r.fma_peak_gflops}}});
  }
  return out;
}

std::string roofline_section(const BenchRun& b) {
  ScatterPlot p;
  p.id = "roofline-" + std::to_string(b.run.id);
  p.title = fmt::format("Roofline of run {}: achieved GFLOP/s against arithmetic intensity",
                        b.run.id);
  p.x_label = "arithmetic intensity (FLOP per byte, fewest bytes a call must move)";
  p.y_label = "achieved GFLOP/s (median)";
  double lo = 1e300;
  double hi = 0.0;
  std::string rows;
  for (const std::string& impl : b.impls) {
    Series s{impl, {}};
    for (const CaseRow& c : b.cases) {
      const ImplResult* r = c.find(impl);
      const auto ai = c.intensity();
      if (r == nullptr || r->disposition != "ok" || !ai || !finite_positive(r->gflops)) continue;
      s.marks.push_back({*ai, *r->gflops, fmt::format("{} ({}): {:.3g} FLOP/B, {:.1f} GFLOP/s",
                                                      c.name, impl, *ai, *r->gflops)});
      lo = std::min(lo, *ai);
      hi = std::max(hi, *ai);
      rows += "<tr>" + text_cell(c.name) + text_cell(impl) + number_cell(ai, "{:.3g}") +
              number_cell(r->gflops, "{:.1f}") + "</tr>";
    }
    p.series.push_back(std::move(s));
  }
  if (hi > 0.0) p.lines = roofs(b.run.info, lo, hi);
  std::string note;
  if (!memory_roof(b.run.info)) {
    note = "<p class=\"muted\">This run probed no memory bandwidth (ka-bench probes it for "
           "decode and graph cases), so only the compute roof is drawn.</p>";
  }
  return "<h3>Roofline</h3>" + note +
         plot_with_numbers(render_scatter(p), "the roofline's points",
                           "<table class=\"sortable\">" +
                               header_row({"case", "impl", "FLOP/byte", "GFLOP/s"}) +
                               "<tbody>" + rows + "</tbody></table>");
}

// --- speed-ups -------------------------------------------------------------------------------

std::string speedup_section(const BenchRun& b) {
  std::string out = "<h3>Speed-up of ka</h3>";
  bool any = false;
  for (const std::string& ref : b.impls) {
    if (ref == "ka") continue;
    const std::vector<Speedup> s = speedups(b, ref);
    if (s.empty()) continue;
    any = true;
    BarChart c;
    c.id = fmt::format("speedup-{}-{}", b.run.id, ref);
    c.title = fmt::format("ka against {}: {} time / ka time per case (> 1: ka is faster)", ref, ref);
    c.y_label = "speed-up (x)";
    c.baseline = 1.0;
    c.log_y = true;
    std::string rows;
    for (const Speedup& x : s) {
      c.bars.push_back({x.case_name, x.ratio, x.ratio < 1.0,
                        fmt::format("{}: {:.2f}x", x.case_name, x.ratio)});
      rows += std::string("<tr") + (x.ratio < 1.0 ? " class=\"low\"" : "") + ">" +
              text_cell(x.case_name) + number_cell(x.ratio, "{:.3f}x") + "</tr>";
    }
    const double g = *geomean(s);
    c.mean_line = g;
    c.mean_label = fmt::format("geomean {:.2f}x", g);
    out += fmt::format("<p>Geometric mean over {} cases: <strong>{:.2f}x</strong>; {} below 1 "
                       "(highlighted).</p>",
                       s.size(), g,
                       std::count_if(s.begin(), s.end(), [](const Speedup& x) { return x.ratio < 1.0; }));
    out += plot_with_numbers(render_bars(c), "the speed-ups against " + ref,
                             "<table class=\"sortable\">" + header_row({"case", "ka vs " + ref}) +
                                 "<tbody>" + rows + "</tbody></table>");
  }
  if (!any) out += "<p class=\"muted\">No case ran ok with both ka and a reference.</p>";
  return out;
}

// --- tuning ----------------------------------------------------------------------------------

std::string shape_title(const TuningShape& t) {
  return t.op + " " + t.shape_key + " — " + t.kernel + " v" + std::to_string(t.kernel_version);
}

std::string convergence_plot(const TuningShape& t, std::size_t index) {
  LineChart c;
  c.id = "tuning-" + std::to_string(index);
  c.title = "Best median so far against evaluations, per run (strategy)";
  c.x_label = "evaluations (trials in the order measured)";
  c.y_label = "best median so far (µs)";
  for (const TuningTrace& trace : t.traces) {
    Line line{fmt::format("run {} ({})", trace.run_id, trace.strategy), {}};
    for (std::size_t i = 0; i < trace.best_so_far_ns.size(); ++i) {
      line.points.emplace_back(static_cast<double>(i + 1), trace.best_so_far_ns[i] / 1e3);
    }
    c.lines.push_back(std::move(line));
  }
  return render_lines(c);
}

bool winner_cell_unmeasured(const TuningHeatmap& h) {
  return h.winner && !h.cells.at(h.winner->first).at(h.winner->second).has_value();
}

std::string heatmap_plot(const TuningShape& t, std::size_t index) {
  const TuningHeatmap& h = *t.heatmap;
  Heatmap m;
  m.id = "heatmap-" + std::to_string(index);
  m.title = fmt::format("Median µs over {} and {}, {}", h.x_param, h.y_param,
                        h.slice == HeatmapSlice::kAtWinner ? "the others at the winner's values"
                                                           : "the best over the others");
  m.x_label = h.x_param;
  m.y_label = h.y_param;
  m.value_label = "median µs";
  m.x_values = h.x_values;
  m.y_values = h.y_values;
  for (const auto& row : h.cells) {
    std::vector<std::optional<double>> us;
    for (const auto& v : row) us.push_back(v ? std::optional<double>(*v / 1e3) : std::nullopt);
    m.cells.push_back(std::move(us));
  }
  m.highlight = h.winner;
  return render_heatmap(m);
}

// Per run: its evaluations, its best, and how many evaluations it took to get within 3% of it.
std::string convergence_table(const TuningShape& t) {
  std::string out = "<table class=\"sortable\">" +
                    header_row({"run", "strategy", "evaluations", "best median µs",
                                "evaluations to within 3% of its best"}) +
                    "<tbody>";
  for (const TuningTrace& trace : t.traces) {
    const double best = trace.best_so_far_ns.empty() ? std::nan("") : trace.best_so_far_ns.back();
    std::optional<double> reached;
    for (std::size_t i = 0; i < trace.best_so_far_ns.size() && std::isfinite(best); ++i) {
      if (trace.best_so_far_ns[i] <= best * 1.03) {
        reached = static_cast<double>(i + 1);
        break;
      }
    }
    out += "<tr>" + number_cell(static_cast<double>(trace.run_id), "{:.0f}") +
           text_cell(trace.strategy) +
           number_cell(static_cast<double>(trace.best_so_far_ns.size()), "{:.0f}") +
           number_cell(best / 1e3, "{:.2f}") + number_cell(reached, "{:.0f}") + "</tr>";
  }
  return out + "</tbody></table>";
}

// The heatmap's grid as a table: a row per y value, a column per x value, µs.
std::string heatmap_table(const TuningHeatmap& h) {
  std::vector<std::string> head = {h.y_param + " ↓ " + h.x_param + " →"};
  head.insert(head.end(), h.x_values.begin(), h.x_values.end());
  std::string out = "<table>" + header_row(head) + "<tbody>";
  for (std::size_t y = 0; y < h.y_values.size(); ++y) {
    out += "<tr>" + text_cell(h.y_values[y]);
    for (const auto& cell : h.cells[y]) {
      out += number_cell(cell ? std::optional<double>(*cell / 1e3) : std::nullopt, "{:.2f}");
    }
    out += "</tr>";
  }
  return out + "</tbody></table>";
}

std::string gain_text(const TuningShape& t) {
  if (!t.gain_over_default) return "-";
  std::string out = fmt::format("{:.2f}x", *t.gain_over_default);
  if (t.gain_low && t.gain_high) {
    out += fmt::format(" [{:.2f}, {:.2f}]", *t.gain_low, *t.gain_high);
  } else if (t.winner_ci95_ns && t.winner_median_ns && *t.winner_median_ns > 0.0) {
    out += fmt::format(" (winner's trial CI95 ±{:.1f}%)",
                       *t.winner_ci95_ns / *t.winner_median_ns * 100.0);
  }
  return out;
}

std::string tuning_table(const std::vector<TuningShape>& shapes) {
  std::string out = "<table class=\"sortable\" id=\"tuning\">" +
                    header_row({"op", "shape", "kernel", "trials", "ok", "runs", "winner config",
                                "winner median µs", "default median µs",
                                "gain over default [95% interval]"}) +
                    "<tbody>";
  for (const TuningShape& t : shapes) {
    out += "<tr>" + text_cell(t.op) + text_cell(t.shape_key) +
           text_cell(t.kernel + " v" + std::to_string(t.kernel_version)) +
           number_cell(static_cast<double>(t.trials), "{:.0f}") +
           number_cell(static_cast<double>(t.ok), "{:.0f}") +
           number_cell(static_cast<double>(t.traces.size()), "{:.0f}") +
           text_cell(t.winner_config.empty() ? "no recommendation" : t.winner_config, "config") +
           number_cell(t.winner_median_ns ? std::optional<double>(*t.winner_median_ns / 1e3)
                                          : std::nullopt,
                       "{:.2f}") +
           number_cell(t.default_median_ns ? std::optional<double>(*t.default_median_ns / 1e3)
                                           : std::nullopt,
                       "{:.2f}") +
           text_cell(gain_text(t), "") + "</tr>";
  }
  return out + "</tbody></table>\n";
}

std::string tuning_section(const std::vector<TuningShape>& shapes,
                           const std::vector<std::int64_t>& runs, std::size_t max_plots) {
  std::string out = "<h2 id=\"tuning-section\">Tuning</h2>";
  if (shapes.empty()) return out + "<p class=\"muted\">No trials in this database.</p>";
  std::string which = "every run";
  if (!runs.empty()) {
    which = "run";
    for (const std::int64_t id : runs) which += " " + std::to_string(id);
  }
  out += fmt::format("<p>Trials of {}: {} (op, shape, kernel) tuned. The gain is the default configuration's "
                     "time over the winner's, the median of paired final rounds, with the 95% "
                     "interval of that median; a winner that did not beat the default in enough "
                     "rounds is the default (gain 1).</p>",
                     which, shapes.size());
  out += tuning_table(shapes);
  for (std::size_t i = 0; i < shapes.size() && i < max_plots; ++i) {
    const TuningShape& t = shapes[i];
    out += "<h3>" + esc(shape_title(t)) + "</h3>";
    out += plot_with_numbers(convergence_plot(t, i), "the runs' convergence", convergence_table(t));
    if (t.heatmap) {
      out += plot_with_numbers(heatmap_plot(t, i), "the heatmap's cells (median µs)",
                               heatmap_table(*t.heatmap));
      if (t.heatmap->slice == HeatmapSlice::kBestOverOthers) {
        out += "<p class=\"muted\">Too few trials differ from the winner on these two tunables "
               "only, so each cell is the best over every value of the others.</p>";
      }
      if (winner_cell_unmeasured(*t.heatmap)) {
        out += "<p class=\"muted\">The winner's cell (outlined) holds no trial: the sweep gave "
               "the winner the time of an equivalent configuration measured before it (one "
               "that runs exactly as it does).</p>";
      }
    } else {
      out += "<p class=\"muted\">No heatmap: fewer than two tunables took two or more values "
             "(or the chosen ones did not vary).</p>";
    }
  }
  if (shapes.size() > max_plots) {
    out += fmt::format("<p class=\"muted\">Plots of the first {} shapes; the table lists all {}.</p>",
                       max_plots, shapes.size());
  }
  return out;
}

// --- regressions -----------------------------------------------------------------------------

std::string regression_section(const BenchRun& baseline, const BenchRun& current,
                               double threshold, std::size_t& significant_slower) {
  const std::vector<Regression> rows = compare_runs(baseline, current, threshold);
  std::string out = fmt::format(
      "<h2 id=\"regressions\">Regressions: run {} against baseline run {}</h2><p>A change counts "
      "when it exceeds {:.0f}% and the combined CI95 of the two medians, as in ka-db diff.</p>",
      current.run.id, baseline.run.id, threshold * 100.0);
  BarChart c;
  c.id = "regressions";
  c.title = fmt::format("Run {} against run {}: baseline time / current time (< 1: slower)",
                        current.run.id, baseline.run.id);
  c.y_label = "baseline / current (x)";
  c.baseline = 1.0;
  c.log_y = true;
  std::string table = "<table class=\"sortable\">" +
                      header_row({"case", "impl", "baseline µs", "current µs", "change",
                                  "combined CI95 µs", "verdict"}) +
                      "<tbody>";
  for (const Regression& r : rows) {
    const bool bad = r.significant && r.slower;
    significant_slower += bad ? 1 : 0;
    c.bars.push_back({r.case_name + " " + r.impl, r.baseline_ns / r.current_ns, bad, ""});
    const std::string verdict = !r.significant ? "within noise or threshold"
                                : r.slower     ? "REGRESSION"
                                               : "improved";
    table += std::string("<tr") + (bad ? " class=\"low\"" : "") + ">" + text_cell(r.case_name) +
             text_cell(r.impl) + number_cell(r.baseline_ns / 1e3, "{:.2f}") +
             number_cell(r.current_ns / 1e3, "{:.2f}") +
             number_cell((r.current_ns / r.baseline_ns - 1.0) * 100.0, "{:+.1f}%") +
             number_cell(r.combined_ci95_ns / 1e3, "{:.2f}") + text_cell(verdict) + "</tr>";
  }
  table += "</tbody></table>";
  out += fmt::format("<p><strong>{}</strong> significant regression(s) among {} compared "
                     "(case, impl) pairs.</p>",
                     significant_slower, rows.size());
  return out + plot_with_numbers(render_bars(c), "the comparison", table);
}

// --- the page --------------------------------------------------------------------------------

std::string run_section(const BenchRun& b) {
  std::string out = fmt::format("<h2 id=\"run-{}\">Run {}: {} {} on {} ({} cases)</h2>", b.run.id,
                                b.run.id, esc(b.run.info.tool), esc(b.run.info.suite),
                                esc(b.run.info.host), b.cases.size());
  out += overview_section(b);
  out += "<h3>Cases</h3><p class=\"muted\">Click a column to sort. Times are medians of the "
         "per-call time; %peak is against the FMA peak probed before each case.</p>";
  out += cases_table(b);
  out += roofline_section(b);
  out += speedup_section(b);
  return out;
}

std::string models_section(const std::vector<BenchRun>& runs) {
  std::size_t graphs = 0;
  for (const BenchRun& b : runs) {
    for (const CaseRow& c : b.cases) graphs += c.op.rfind("graph:", 0) == 0 ? 1 : 0;
  }
  return fmt::format("<h2 id=\"models\">Models</h2><p class=\"muted\">No model cases in the "
                     "selected runs: a model's per-operator time shares appear here once models "
                     "run as cases. {} graph case(s) appear in the run tables above.</p>",
                     graphs);
}

// The selected runs that made trials; none (every run's trials) when no selected run did, so
// that --run of a benchmark run still shows the tuning behind its tables.
std::vector<std::int64_t> runs_with_trials(const std::vector<RunOverview>& all,
                                           const std::vector<std::int64_t>& selected) {
  std::vector<std::int64_t> out;
  for (const RunOverview& r : all) {
    if (r.trials > 0 && std::find(selected.begin(), selected.end(), r.id) != selected.end()) {
      out.push_back(r.id);
    }
  }
  return out;
}

std::vector<std::int64_t> bench_run_ids(db::Connection& db, const ReportOptions& o) {
  const std::vector<std::int64_t> with_results = runs_with_results(db);
  if (o.runs.empty()) {
    return with_results.empty() ? std::vector<std::int64_t>{}
                                : std::vector<std::int64_t>{with_results.back()};
  }
  std::vector<std::int64_t> out;
  for (const std::int64_t id : o.runs) {
    if (std::find(with_results.begin(), with_results.end(), id) != with_results.end()) {
      out.push_back(id);
    }
  }
  return out;
}

std::string page_head(const ReportOptions& o) {
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      "<title>ka report: {}</title><style>{}{}</style></head><body>\n"
      "<h1>ka report</h1><p class=\"muted\">Database {}. Self-contained: no network access; "
      "hover a mark for its label, open “numbers” under a plot for its table.</p>\n",
      esc(o.db_label), kStyle, default_style_sheet(), esc(o.db_label));
}

std::string runs_index(const std::vector<RunOverview>& runs) {
  std::string out = "<h2 id=\"runs\">Runs in this database</h2><table class=\"sortable\">" +
                    header_row({"run", "tool", "status", "started (UTC)", "host", "device",
                                "results", "trials", "command"}) +
                    "<tbody>";
  for (const RunOverview& r : runs) {
    out += "<tr>" + number_cell(static_cast<double>(r.id), "{:.0f}") + text_cell(r.info.tool) +
           text_cell(r.status) + text_cell(r.started_at) + text_cell(r.info.host) +
           text_cell(r.info.device) + number_cell(static_cast<double>(r.results), "{:.0f}") +
           number_cell(static_cast<double>(r.trials), "{:.0f}") +
           text_cell(r.info.command_line) + "</tr>";
  }
  return out + "</tbody></table>\n";
}

void check_requested_runs(const std::vector<RunOverview>& all, const ReportOptions& o,
                          const std::string& db_label) {
  auto known = [&](std::int64_t id) {
    return std::any_of(all.begin(), all.end(), [&](const RunOverview& r) { return r.id == id; });
  };
  for (const std::int64_t id : o.runs) {
    KA_CHECK(known(id), db_label, ": there is no run ", id, " (ka-db show --runs lists them)");
  }
  if (o.baseline) {
    KA_CHECK(known(*o.baseline), db_label, ": there is no baseline run ", *o.baseline,
             " (ka-db show --runs lists them)");
  }
}

}  // namespace

std::string render_report(db::Connection& db, const ReportOptions& options) {
  ReportCounts counts;
  return render_report(db, options, counts);
}

std::string render_report(db::Connection& db, const ReportOptions& o, ReportCounts& counts) {
  const std::vector<RunOverview> all = load_runs(db);
  check_requested_runs(all, o, o.db_label);
  std::vector<BenchRun> bench;
  for (const std::int64_t id : bench_run_ids(db, o)) bench.push_back(load_bench_run(db, id));
  const std::vector<std::int64_t> tuning_runs = runs_with_trials(all, o.runs);
  const std::vector<TuningShape> tuning = load_tuning(db, tuning_runs, o.axes);

  std::string page = page_head(o);
  page += "<nav><a href=\"#runs\">runs</a>";
  for (const BenchRun& b : bench) page += fmt::format("<a href=\"#run-{0}\">run {0}</a>", b.run.id);
  page += "<a href=\"#tuning-section\">tuning</a><a href=\"#models\">models</a>";
  if (o.baseline) page += "<a href=\"#regressions\">regressions</a>";
  page += "</nav>\n" + runs_index(all);
  if (bench.empty()) {
    page += "<p class=\"muted\">No benchmark results in the selected runs.</p>";
  }
  for (const BenchRun& b : bench) {
    page += run_section(b);
    counts.cases += b.cases.size();
  }
  counts.bench_runs = bench.size();
  page += tuning_section(tuning, tuning_runs, o.max_tuning_plots);
  counts.tuned_shapes = tuning.size();
  page += models_section(bench);
  if (o.baseline) {
    KA_CHECK(!bench.empty(), o.db_label, ": --baseline compares benchmark results, and the "
             "selected runs have none");
    const BenchRun base = load_bench_run(db, *o.baseline);
    page += regression_section(base, bench.front(), o.threshold, counts.regressions);
  }
  page += "<script>" + std::string(kScript) + "</script>\n</body></html>\n";
  return page;
}

}  // namespace ka::report
