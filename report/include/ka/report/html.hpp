// `ka-db report`: one self-contained HTML page of a ka database. No network access and no
// external file: inline SVG plots (svg.hpp), an inline style sheet and a short inline script
// that sorts tables. Opens from disk and from an e-mail attachment.
#pragma once

#include <ka/db/sqlite.hpp>
#include <ka/report/report_data.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ka::report {

/// What the page shows.
struct ReportOptions {
  std::string db_label;               ///< How the page names the database (its path).
  std::vector<std::int64_t> runs;     ///< Runs to show; empty: the latest run with results
                                      ///< and every run's trials.
  std::optional<std::int64_t> baseline;  ///< A run to compare the (first) shown run with.
  HeatmapAxes axes;                   ///< Heatmap tunables; empty: chosen per shape.
  double threshold = 0.03;            ///< Smallest relative change a regression needs.
  std::size_t max_tuning_plots = 40;  ///< Shapes drawn; the table lists every shape.
};

/// The whole page. Throws ka::ValueError for a run or baseline the database lacks, and
/// ka::DbError when a query fails.
std::string render_report(db::Connection& db, const ReportOptions& options);

/// What one rendered page holds, for the tool's summary line and the tests.
struct ReportCounts {
  std::size_t bench_runs = 0;
  std::size_t cases = 0;
  std::size_t tuned_shapes = 0;
  std::size_t regressions = 0;  ///< Significant slowdowns against the baseline.
};

/// As render_report(), also counting what the page shows.
std::string render_report(db::Connection& db, const ReportOptions& options, ReportCounts& counts);

}  // namespace ka::report
