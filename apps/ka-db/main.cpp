// ka-db: look into a ka database and move its recommendation table between machines and builds:
// show, export (SQLite table, C++ header, JSON), import, merge, diff, report (HTML).
#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/core/files.hpp>
#include <ka/core/interrupt.hpp>
#include <ka/core/option_checks.hpp>
#include <ka/db/queries.hpp>
#include <ka/db/recommendation_io.hpp>
#include <ka/db/recommendation_table.hpp>
#include <ka/db/schema.hpp>
#include <ka/db/sqlite.hpp>
#include <ka/db/table_ops.hpp>
#include <ka/kernels/builtin.hpp>
#include <ka/profiler/measure.hpp>
#include <ka/report/html.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "../cli_checks.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;
using ka::db::Connection;
using ka::db::Recommendation;

/// A mistake in the command line found after parsing: exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int fail(int code, const std::string& what) {
  std::fprintf(stderr, "ka-db: error: %s\n", what.c_str());
  return code;
}

// A missing input must name the file, not surface as SQLite's "unable to open database file".
void require_file(const std::string& path, const char* what) {
  std::error_code ec;
  KA_CHECK_TYPE(ka::IoError, fs::is_regular_file(path, ec), "cannot read ", what, " '", path,
                "': ", fs::exists(path, ec) ? "not a regular file" : "no such file");
}

// An export that replaced its own input would destroy the database it reads (the export is
// renamed over --out). Compared by device and inode, so another path to the same file or a
// hard link to it is caught too.
void refuse_overwriting_input(const std::string& in, const std::string& out) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  if (fs::equivalent(in, out, ec) && !ec) {
    throw UsageError("--out '" + out + "' is the database being read (--db '" + in +
                     "'); write the export to another file");
  }
}

std::string duration(double ns) {
  return std::isnan(ns) ? std::string("-") : ka::profiler::format_duration_ns(ns);
}

std::string duration(const std::optional<double>& ns) {
  return ns.has_value() ? "±" + ka::profiler::format_duration_ns(*ns) : std::string("-");
}

// Column-aligned text; the last column is not padded so long configs do not widen the rest.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  [[nodiscard]] std::size_t size() const { return rows_.size() - 1; }
  void print(const char* indent = "  ") const {
    std::vector<std::size_t> width(rows_[0].size(), 0);
    for (const auto& row : rows_) {
      for (std::size_t i = 0; i < row.size() && i < width.size(); ++i) {
        width[i] = std::max(width[i], display_width(row[i]));
      }
    }
    for (const auto& row : rows_) {
      std::string line = indent;
      for (std::size_t i = 0; i < row.size(); ++i) {
        line += row[i];
        if (i + 1 < row.size()) line += std::string(width[i] - display_width(row[i]) + 2, ' ');
      }
      std::printf("%s\n", line.c_str());
    }
  }

 private:
  // Bytes that start a UTF-8 character ("±" is two bytes, one column).
  static std::size_t display_width(const std::string& s) {
    std::size_t n = 0;
    for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
  }
  std::vector<std::vector<std::string>> rows_;
};

// Removes a database this command created when the command then fails, so that a refused
// import or merge leaves no empty ka.db behind.
class NewFileGuard {
 public:
  explicit NewFileGuard(std::string path) : path_(std::move(path)) {
    std::error_code ec;
    created_ = !fs::exists(path_, ec);
  }
  ~NewFileGuard() {
    if (!created_ || done_) return;
    std::error_code ignored;
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(path_ + suffix, ignored);
  }
  NewFileGuard(const NewFileGuard&) = delete;
  NewFileGuard& operator=(const NewFileGuard&) = delete;
  void keep() { done_ = true; }

 private:
  std::string path_;
  bool created_ = false;
  bool done_ = false;
};

std::string this_fingerprint() { return ka::cpu_fingerprint().key(); }

// The kernels the extractor of this build registers, which export and import check rows against.
ka::db::KernelVersions this_build_kernels() {
  ka::db::KernelVersions versions;
  for (const ka::kernels::KernelDescriptor* k : ka::kernels::builtin_kernels()) {
    versions[k->name] = k->version;
  }
  return versions;
}

// Fingerprint -> number of recommendations, for "which devices does this file have?".
std::map<std::string, std::int64_t> fingerprints_in(const std::string& path) {
  std::map<std::string, std::int64_t> out;
  for (const Recommendation& r : ka::db::read_recommendation_rows(path)) ++out[r.fingerprint];
  return out;
}

std::string describe_fingerprints(const std::map<std::string, std::int64_t>& fps) {
  if (fps.empty()) return "it has no recommendations";
  std::string out = "it has rows for: ";
  bool first = true;
  for (const auto& [fp, n] : fps) {
    out += fmt::format("{}'{}' ({} row(s))", first ? "" : ", ", fp, n);
    first = false;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// show

struct ShowOptions {
  std::string db = "ka.db";
  bool runs = false;
  bool recommendations = false;
  bool trials = false;
  std::string op;
  std::string shape;
};

void show_runs(Connection& db) {
  TextTable t({"id", "tool", "status", "started (UTC)", "finished (UTC)", "device", "host",
               "results", "trials"});
  for (const ka::db::RunSummary& r : ka::db::list_runs(db)) {
    t.add({std::to_string(r.id), r.tool, r.status, r.started_at, r.finished_at.value_or("-"),
           r.device, r.host, std::to_string(r.results), std::to_string(r.trials)});
  }
  std::printf("runs: %zu\n", t.size());
  if (t.size() != 0) t.print();
}

void show_devices(Connection& db, const std::string& here) {
  TextTable t({"fingerprint", "first seen (UTC)", "last seen (UTC)", "recommendations"});
  for (const ka::db::DeviceSummary& d : ka::db::list_devices(db)) {
    t.add({d.fingerprint + (d.fingerprint == here ? "  (this machine)" : ""), d.first_seen,
           d.last_seen, std::to_string(d.recommendations)});
  }
  std::printf("devices: %zu\n", t.size());
  if (t.size() != 0) t.print();
}

void show_recommendations(const std::string& path, const std::string& here) {
  const auto rows = ka::db::read_recommendation_rows(path);
  std::printf(
      "recommendations: %zu (median: per call, hot cache; gain: default config's median "
      "/ this one's)\n",
      rows.size());
  const ka::db::KernelVersions kernels = this_build_kernels();
  std::size_t i = 0;
  while (i < rows.size()) {
    const std::string& fp = rows[i].fingerprint;
    TextTable t({"op", "shape key", "kernel", "v", "median", "gain", "config"});
    std::size_t stale = 0;
    for (; i < rows.size() && rows[i].fingerprint == fp; ++i) {
      const Recommendation& r = rows[i];
      const auto it = kernels.find(r.kernel);
      const bool usable = it != kernels.end() && it->second == r.kernel_version;
      stale += !usable;
      t.add({r.op, r.shape_key, r.kernel, std::to_string(r.kernel_version) + (usable ? "" : "*"),
             duration(r.median_ns),
             std::isnan(r.gain_over_default) ? "-" : fmt::format("{:.2f}x", r.gain_over_default),
             r.config.str() + (r.fusion.has_value() ? " fusion=" + *r.fusion : "")});
    }
    std::printf("  device %s%s: %zu row(s)\n", fp.c_str(), fp == here ? " (this machine)" : "",
                t.size());
    t.print("    ");
    if (stale != 0) {
      std::printf(
          "    * %zu row(s) for a kernel version this build does not have (skipped "
          "when loaded)\n",
          stale);
    }
  }
}

void show_trial_counts(Connection& db) {
  TextTable t({"op", "kernel", "v", "shapes", "trials", "ok", "not ok", "runs"});
  std::int64_t total = 0;
  for (const ka::db::TrialCounts& c : ka::db::count_trials(db)) {
    total += c.trials;
    t.add({c.op, c.kernel, std::to_string(c.kernel_version), std::to_string(c.shapes),
           std::to_string(c.trials), std::to_string(c.ok), std::to_string(c.trials - c.ok),
           std::to_string(c.runs)});
  }
  std::printf("trials: %lld (list them with --trials --op OP [--shape KEY])\n",
              static_cast<long long>(total));
  if (t.size() != 0) t.print();
}

void show_trials(Connection& db, const ShowOptions& o) {
  TextTable t(
      {"shape key", "kernel", "v", "disposition", "median", "CI95", "reps", "run", "config"});
  for (const ka::db::StoredTrial& trial : ka::db::list_trials(db, {o.op, o.shape})) {
    std::string disposition(ka::db::to_string(trial.disposition));
    if (trial.disposition != ka::db::Disposition::kOk && trial.error.has_value()) {
      disposition += ": " + *trial.error;
    }
    t.add({trial.shape_key, trial.kernel, std::to_string(trial.kernel_version), disposition,
           trial.median_ns.has_value() ? duration(*trial.median_ns) : "-", duration(trial.ci95_ns),
           trial.repetitions.has_value() ? std::to_string(*trial.repetitions) : "-",
           std::to_string(trial.run_id), trial.config});
  }
  std::printf("trials%s%s%s%s: %zu (median per call, CI95 half-width; fastest first per shape)\n",
              o.op.empty() ? "" : " of ", o.op.c_str(), o.shape.empty() ? "" : " for shape ",
              o.shape.c_str(), t.size());
  if (t.size() != 0) t.print();
}

int run_show(const ShowOptions& o) {
  if ((!o.op.empty() || !o.shape.empty()) && !o.trials) {
    throw UsageError("--op and --shape select trials: add --trials");
  }
  require_file(o.db, "database");
  Connection db = ka::db::open_for_reading(o.db);
  const int version = db.user_version();
  KA_CHECK_TYPE(ka::DbError, version >= 1, o.db, ": not a ka database (schema version 0)");
  const bool all = !o.runs && !o.recommendations && !o.trials;
  const std::string here = this_fingerprint();
  std::printf("ka database %s (schema version %d)\n", o.db.c_str(), version);
  if (all || o.runs) show_runs(db);
  if (version < 2) {
    std::printf("(schema version %d has no devices, trials or recommendations)\n", version);
    return 0;
  }
  if (all) show_devices(db, here);
  if (all || o.recommendations) show_recommendations(o.db, here);
  if (o.trials && (!o.op.empty() || !o.shape.empty())) {
    show_trials(db, o);
  } else if (all || o.trials) {
    show_trial_counts(db);
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// export / import

struct ExportOptions {
  std::string db = "ka.db";
  std::string format;
  std::string out;
  std::string fingerprint;
  std::string symbol;
};

int run_export(const ExportOptions& o) {
  if (!o.symbol.empty() && o.format != "header") {
    throw UsageError(
        "--symbol names the table in a generated header: use it with --format "
        "header");
  }
  require_file(o.db, "database");
  refuse_overwriting_input(o.db, o.out);
  const std::string fp = o.fingerprint.empty() ? this_fingerprint() : o.fingerprint;
  const auto table = ka::db::RecommendationTable::load(o.db, fp, this_build_kernels());
  if (table.size() == 0) {
    const auto& s = table.skipped();
    throw ka::DbError(fmt::format(
        "{}: no usable recommendations for device '{}' ({}; {} skipped for another kernel version "
        "or a kernel this build lacks); nothing exported. Pick one with --fingerprint.",
        o.db, fp, describe_fingerprints(fingerprints_in(o.db)),
        s.stale_version + s.unknown_kernel));
  }
  const std::string symbol = o.symbol.empty() ? "ka::tuned::table" : o.symbol;
  if (o.format == "sqlite") {
    ka::db::export_sqlite(table, o.out);
  } else if (o.format == "header") {
    ka::db::export_header(table, o.out, symbol);
  } else {
    ka::db::export_json(table, o.out);
  }
  const auto& s = table.skipped();
  std::printf("exported %zu recommendation(s) of device '%s' from %s to %s (%s%s)\n", table.size(),
              fp.c_str(), o.db.c_str(), o.out.c_str(), o.format.c_str(),
              o.format == "header" ? (", function " + symbol + "()").c_str() : "");
  if (s.total() != 0) {
    std::printf(
        "left out: %zu row(s) of other devices, %zu for another kernel version, %zu for "
        "kernels this build does not have\n",
        s.other_fingerprint, s.stale_version, s.unknown_kernel);
  }
  return 0;
}

struct ImportOptions {
  std::string db = "ka.db";
  std::string in;
  std::string fingerprint;
};

int run_import(const ImportOptions& o) {
  ka::require_database_file("--db", o.db);
  require_file(o.in, "table export");
  const std::string fp = o.fingerprint.empty() ? this_fingerprint() : o.fingerprint;
  const auto kernels = this_build_kernels();
  NewFileGuard guard(o.db);
  std::size_t n = 0;
  {
    Connection target(o.db);
    ka::db::migrate(target);
    n = ka::db::import_sqlite(o.in, target, fp, kernels);
  }
  guard.keep();
  std::printf(
      "imported %zu recommendation(s) of device '%s' from %s into %s (rows with the "
      "same op, shape and kernel replaced)\n",
      n, fp.c_str(), o.in.c_str(), o.db.c_str());
  return 0;
}

// ---------------------------------------------------------------------------------------------
// report

struct ReportCommand {
  std::string db = "ka.db";
  std::string out = "report.html";
  std::vector<std::int64_t> runs;
  std::int64_t baseline = 0;
  std::string heatmap_x;
  std::string heatmap_y;
  double threshold = 0.03;
  std::size_t max_plots = 40;
};

int run_report(const ReportCommand& o) {
  require_file(o.db, "database");
  refuse_overwriting_input(o.db, o.out);
  if (o.heatmap_x.empty() != o.heatmap_y.empty()) {
    throw UsageError("--heatmap-x and --heatmap-y name the two tunables together; give both "
                     "or neither");
  }
  Connection db = ka::db::open_for_reading(o.db);
  KA_CHECK_TYPE(ka::DbError, db.user_version() >= 1, o.db, ": not a ka database (schema version 0)");
  ka::report::ReportOptions options;
  options.db_label = o.db;
  options.runs = o.runs;
  if (o.baseline > 0) options.baseline = o.baseline;
  options.axes = {o.heatmap_x, o.heatmap_y};
  options.threshold = o.threshold;
  options.max_tuning_plots = o.max_plots;
  ka::report::ReportCounts counts;
  const std::string page = ka::report::render_report(db, options, counts);
  ka::write_file_replacing(o.out, page);
  std::printf("wrote %s (%.1f KiB, one self-contained file): %zu benchmark run(s) with %zu "
              "case(s), %zu tuned shape(s)",
              o.out.c_str(), static_cast<double>(page.size()) / 1024.0, counts.bench_runs,
              counts.cases, counts.tuned_shapes);
  if (options.baseline) {
    std::printf(", %zu significant regression(s) against run %lld", counts.regressions,
                static_cast<long long>(*options.baseline));
  }
  std::printf("\n");
  return 0;
}

// ---------------------------------------------------------------------------------------------
// merge / diff

struct MergeOptions {
  std::string into;
  std::vector<std::string> sources;
};

int run_merge(const MergeOptions& o) {
  ka::require_database_file("--into", o.into);
  for (const std::string& s : o.sources) require_file(s, "database");
  NewFileGuard guard(o.into);
  ka::db::MergeCounts c;
  {
    Connection target(o.into);
    c = ka::db::merge_databases(target, o.sources);
  }
  guard.keep();
  std::printf("merged %zu database(s) into %s (one transaction)\n", o.sources.size(),
              o.into.c_str());
  std::printf(
      "  recommendations: %zu added, %zu replaced (newer kernel version or lower median), "
      "%zu kept (the existing row was as good or better)\n",
      c.added, c.replaced, c.kept);
  std::printf("  devices: %zu added\n", c.devices);
  std::printf(
      "  runs: %zu copied under new ids, %zu already present; trials: %zu copied; "
      "results: %zu copied\n",
      c.runs, c.runs_present, c.trials, c.results);
  return 0;
}

struct DiffOptions {
  std::string a;
  std::string b;
  std::string fingerprint;
  double threshold = 0.03;
  bool fail_on_regression = false;
};

std::string config_change(const ka::db::DiffRow& d) {
  if (!d.a.has_value()) return d.b->kernel + " " + d.b->config.str();
  if (!d.b.has_value()) return d.a->kernel + " " + d.a->config.str();
  std::string a = d.a->config.str();
  std::string b = d.b->config.str();
  if (d.a->kernel != d.b->kernel) return d.a->kernel + " " + a + "  ->  " + d.b->kernel + " " + b;
  if (a == b) return d.a->kernel + " " + a + "  (same)";
  return d.a->kernel + " " + a + "  ->  " + b;
}

int run_diff(const DiffOptions& o) {
  require_file(o.a, "database");
  require_file(o.b, "database");
  const std::string fp = o.fingerprint.empty() ? this_fingerprint() : o.fingerprint;
  const auto rows = ka::db::diff_databases(o.a, o.b, fp, o.threshold);
  if (rows.empty()) {
    throw ka::DbError(
        fmt::format("no recommendations of device '{}' in {} or {} ({}: {}; {}: {}); pick one with "
                    "--fingerprint",
                    fp, o.a, o.b, o.a, describe_fingerprints(fingerprints_in(o.a)), o.b,
                    describe_fingerprints(fingerprints_in(o.b))));
  }
  std::printf("diff of the recommendation tables of device '%s'\n  A: %s\n  B: %s\n", fp.c_str(),
              o.a.c_str(), o.b.c_str());
  TextTable t({"op", "shape key", "median A", "median B", "B/A", "CI95 A", "CI95 B", "verdict",
               "kernel and config (A -> B)"});
  std::map<ka::db::DiffStatus, std::size_t> counts;
  std::size_t threshold_only = 0;
  for (const auto& d : rows) {
    ++counts[d.status];
    const bool both = d.a.has_value() && d.b.has_value();
    const bool no_ci = both && !d.used_ci;
    threshold_only += no_ci;
    t.add({d.op, d.shape_key, d.a.has_value() ? duration(d.a->median_ns) : "-",
           d.b.has_value() ? duration(d.b->median_ns) : "-",
           std::isnan(d.ratio) ? "-" : fmt::format("{:.3f}", d.ratio), duration(d.ci95_a_ns),
           duration(d.ci95_b_ns), std::string(ka::db::to_string(d.status)) + (no_ci ? " (t)" : ""),
           config_change(d)});
  }
  t.print();
  using S = ka::db::DiffStatus;
  std::printf(
      "\n%zu case(s): %zu regression(s), %zu improved, %zu within noise, %zu same, %zu "
      "only in A, %zu only in B, %zu without a median\n",
      rows.size(), counts[S::kRegression], counts[S::kImprovement], counts[S::kWithinNoise],
      counts[S::kSame], counts[S::kOnlyA], counts[S::kOnlyB], counts[S::kUnknown]);
  std::printf(
      "significant: |B - A| > %.1f%% of A and, when both trials stored a CI95, > "
      "sqrt(CI95_A^2 + CI95_B^2)\n",
      100 * o.threshold);
  if (threshold_only != 0) {
    std::printf(
        "(t) %zu case(s) judged by the threshold only: A's or B's trials hold no CI95 "
        "for the recommended config\n",
        threshold_only);
  }
  if (o.fail_on_regression && counts[S::kRegression] != 0) return 3;
  return 0;
}

// `ka-db show`: its options into `show`.
CLI::App* add_show_command(CLI::App& app, ShowOptions& show) {
  CLI::App* show_cmd = app.add_subcommand("show", "runs, devices, recommendations and trials");
  show_cmd->footer(
      "Print a readable summary of a ka database: runs, devices, recommendations per "
      "device (median per call, hot cache; gain over the default config) and trial "
      "counts. With a section flag, only those sections.");
  show_cmd->add_option("--db", show.db, "ka database")->capture_default_str();
  show_cmd->add_flag("--runs", show.runs, "only the runs");
  show_cmd->add_flag("--recommendations", show.recommendations, "only the recommendations");
  show_cmd->add_flag("--trials", show.trials,
                     "only the trials: counts per op and kernel, or with --op/--shape each trial");
  show_cmd->add_option("--op", show.op, "with --trials: list the trials of this op");
  show_cmd->add_option("--shape", show.shape, "with --trials: list the trials of this shape key");
  return show_cmd;
}

// `ka-db export`: its options into `exp`.
CLI::App* add_export_command(CLI::App& app, ExportOptions& exp) {
  CLI::App* export_cmd =
      app.add_subcommand("export", "a device's table as SQLite, a C++ header or JSON");
  export_cmd->footer(
      "Write one device's recommendation table (rows for this build's kernel versions) as a "
      "compact table-only SQLite file (load with KA_TUNED_TABLE=<file> or ka-db import), a "
      "generated C++ header that compiles the table into a binary, or JSON.");
  export_cmd->add_option("--db", exp.db, "ka database to read")->capture_default_str();
  export_cmd->add_option("--format", exp.format, "sqlite, header or json")
      ->required()
      ->check(CLI::IsMember({"sqlite", "header", "json"}));
  export_cmd->add_option("--out", exp.out, "file to write (replaced)")->required();
  export_cmd->add_option("--fingerprint", exp.fingerprint,
                         "device whose rows to export (default: this machine's)");
  export_cmd->add_option("--symbol", exp.symbol,
                         "header only: qualified name of the generated function (default "
                         "ka::tuned::table)");
  return export_cmd;
}

// `ka-db import`: its options into `imp`.
CLI::App* add_import_command(CLI::App& app, ImportOptions& imp) {
  CLI::App* import_cmd = app.add_subcommand("import", "a table export into a database");
  import_cmd->footer(
      "Copy a table export (ka-db export --format sqlite) into a database, in one transaction. "
      "Refused as a whole (exit 1, every mismatch listed) when a row was tuned on another "
      "device or for a kernel version this build does not have.");
  import_cmd->add_option("--db", imp.db, "ka database to write (created if missing)")
      ->capture_default_str();
  import_cmd->add_option("--in", imp.in, "table export to read")->required();
  import_cmd->add_option("--fingerprint", imp.fingerprint,
                         "device the rows must have been tuned on (default: this machine's)");
  return import_cmd;
}

// `ka-db merge`: its options into `merge`.
CLI::App* add_merge_command(CLI::App& app, MergeOptions& merge) {
  CLI::App* merge_cmd = app.add_subcommand("merge", "databases from several machines into one");
  merge_cmd->footer(
      "Combine databases from several machines into one, in one transaction: devices, runs "
      "(new ids) with their trials and results, and recommendations. For the same device, op, "
      "shape and kernel the newer kernel version wins, else the lower median; merging the same "
      "database twice changes nothing.");
  merge_cmd->add_option("--into", merge.into, "ka database to merge into (created if missing)")
      ->required();
  merge_cmd->add_option("sources", merge.sources, "databases to merge, in order")->required();
  return merge_cmd;
}

// `ka-db diff`: its options into `diff`.
CLI::App* add_diff_command(CLI::App& app, DiffOptions& diff) {
  CLI::App* diff_cmd = app.add_subcommand("diff", "two tables case by case");
  diff_cmd->footer(
      "Compare the recommendation tables of databases A and B case by case (op, shape key): "
      "configs, medians, B/A. A change is significant only when it exceeds --threshold and, "
      "when the trials stored CI95 half-widths, their combination sqrt(ciA^2 + ciB^2).");
  diff_cmd->add_option("A", diff.a, "baseline database")->required();
  diff_cmd->add_option("B", diff.b, "database compared with A")->required();
  diff_cmd->add_option("--fingerprint", diff.fingerprint,
                       "device whose rows to compare (default: this machine's)");
  diff_cmd
      ->add_option("--threshold", diff.threshold,
                   "smallest relative change that counts (0.03 = 3%)")
      ->capture_default_str()
      ->check(ka::apps::finite_number(true))
      ->check(CLI::Range(0.0, 10.0));
  diff_cmd->add_flag("--fail-on-regression", diff.fail_on_regression,
                     "exit 3 when any case regressed significantly");
  return diff_cmd;
}

// `ka-db report`: its options into `report`.
CLI::App* add_report_command(CLI::App& app, ReportCommand& report) {
  CLI::App* cmd = app.add_subcommand("report", "one self-contained HTML page of runs and tuning");
  cmd->footer(
      "Writes one HTML file (inline SVG and a little inline script; no network access) with "
      "each selected run's machine, method and cases (ka against every reference, sortable), "
      "a roofline under the run's measured FMA peak and bandwidth, speed-up bars with their "
      "geometric mean, per (op, shape) tuning convergence and a heatmap over two tunables, and "
      "with --baseline the cases whose change exceeds the threshold and the combined CI95.");
  cmd->add_option("--db", report.db, "database to read")->capture_default_str();
  cmd->add_option("--out", report.out, "HTML file to write (replaced)")->capture_default_str();
  cmd->add_option("--run", report.runs,
                  "runs to show (repeatable; default: the latest run with results, and the "
                  "trials of every run)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--baseline", report.baseline, "run to compare the first shown run with")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--heatmap-x", report.heatmap_x,
                  "tunable on the heatmaps' x axis (default: the two that explain most of the "
                  "variance, per shape)");
  cmd->add_option("--heatmap-y", report.heatmap_y, "tunable on the heatmaps' y axis");
  cmd->add_option("--threshold", report.threshold,
                  "smallest relative change a regression needs (0.03 = 3%)")
      ->capture_default_str()
      ->check(ka::apps::finite_number(true))
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--max-plots", report.max_plots, "tuned shapes drawn (the table lists all)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{0}, std::size_t{100000}));
  return cmd;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "ka-db: inspect ka databases and move recommendation tables between machines and builds.\n"
      "Run 'ka-db SUBCOMMAND --help' for each subcommand's options.",
      "ka-db"};
  app.require_subcommand(1);
  // CLI11 would answer an unknown subcommand with "A subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string name = argv[1];
    if (name != "show" && name != "export" && name != "import" && name != "merge" &&
        name != "diff" && name != "report") {
      return fail(2, "unknown subcommand '" + name +
                         "' (expected show, export, import, merge, diff or report; see ka-db "
                         "--help)");
    }
  }

  ShowOptions show;
  CLI::App* show_cmd = add_show_command(app, show);
  ExportOptions exp;
  CLI::App* export_cmd = add_export_command(app, exp);
  ImportOptions imp;
  CLI::App* import_cmd = add_import_command(app, imp);
  MergeOptions merge;
  CLI::App* merge_cmd = add_merge_command(app, merge);
  DiffOptions diff;
  CLI::App* diff_cmd = add_diff_command(app, diff);
  ReportCommand report;
  CLI::App* report_cmd = add_report_command(app, report);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr,
                 "ka-db: error: %s\nRun 'ka-db --help' for the subcommands, 'ka-db "
                 "SUBCOMMAND --help' for their options.\n",
                 e.what());
    return 2;
  }
  // Every subcommand is one transaction (or a read): a first SIGINT/SIGTERM/SIGHUP lets it
  // finish and then exits 128 + the signal; a second ends ka-db at once, and SQLite rolls the
  // unfinished transaction back.
  const ka::InterruptScope stop_on_signal;
  const auto finished = [](int code) {
    if (const int sig = ka::interrupt_signal(); sig != 0) {
      std::fprintf(stderr, "ka-db: interrupted by signal %d; the command had finished and "
                           "what it wrote is complete\n", sig);
      return 128 + sig;
    }
    return code;
  };
  try {
    ka::check_environment();
    if (show_cmd->parsed()) return finished(run_show(show));
    if (export_cmd->parsed()) return finished(run_export(exp));
    if (import_cmd->parsed()) return finished(run_import(imp));
    if (merge_cmd->parsed()) return finished(run_merge(merge));
    if (diff_cmd->parsed()) return finished(run_diff(diff));
    if (report_cmd->parsed()) return finished(run_report(report));
    return fail(2, "no subcommand");
  } catch (const UsageError& e) {
    return fail(2, e.what());
  } catch (const ka::ValueError& e) {
    return fail(2, e.what());
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
}
