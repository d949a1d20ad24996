// Reading what ka-db report shows. See ka/report/report_data.hpp.
#include <ka/report/report_data.hpp>

#include <ka/core/error.hpp>
#include <ka/db/queries.hpp>
#include <ka/db/table_ops.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

namespace ka::report {
namespace {

std::optional<double> optional_real(const db::Statement& st, int index) {
  if (st.column_is_null(index)) return std::nullopt;
  return st.column_double(index);
}

std::string text_or_empty(const db::Statement& st, int index) {
  return st.column_is_null(index) ? std::string() : st.column_text(index);
}

// `column` of `table` when `present` has it, else NULL: older schemas lack later columns.
std::string column_or_null(const std::set<std::string>& present, const std::string& column) {
  return present.count(column) != 0 ? column : "NULL";
}

// The fingerprint's fields in the order the JSON object lists them (nlohmann sorts keys,
// which reads well enough); a malformed or non-object JSON gives none.
std::vector<std::pair<std::string, std::string>> machine_fields(const std::string& json) {
  std::vector<std::pair<std::string, std::string>> out;
  const nlohmann::json doc = nlohmann::json::parse(json, nullptr, false);
  if (!doc.is_object()) return out;
  for (const auto& [key, value] : doc.items()) {
    out.emplace_back(key, value.is_string() ? value.get<std::string>() : value.dump());
  }
  return out;
}

RunOverview read_run(const db::Statement& st) {
  RunOverview r;
  r.id = st.column_int64(0);
  r.status = st.column_text(2);
  r.started_at = st.column_text(3);
  r.finished_at = text_or_empty(st, 4);
  db::RunInfo& i = r.info;
  i.tool = st.column_text(1);
  i.command_line = st.column_text(5);
  i.host = st.column_text(6);
  i.ka_version = st.column_text(7);
  i.git_sha = st.column_text(8);
  i.suite = text_or_empty(st, 9);
  i.device = st.column_text(10);
  i.fingerprint = st.column_text(11);
  i.fingerprint_json = st.column_text(12);
  i.threads = static_cast<int>(st.column_int64(13));
  i.fma_peak_gflops = optional_real(st, 14);
  i.fma_peak_1t_gflops = optional_real(st, 15);
  i.libtorch_version = text_or_empty(st, 16);
  i.openblas_coretype = text_or_empty(st, 17);
  i.openblas_core = text_or_empty(st, 18);
  i.copy_gbps = optional_real(st, 19);
  i.read_gbps = optional_real(st, 20);
  i.strategy = text_or_empty(st, 21);
  r.machine = machine_fields(i.fingerprint_json);
  r.results = st.column_int64(22);
  r.trials = st.column_int64(23);
  return r;
}

std::string runs_query(db::Connection& db, const std::string& where) {
  const std::set<std::string> cols = db::column_names(db, "runs");
  const bool trials = !db::column_names(db, "trials").empty();
  return "SELECT id, tool, status, started_at, finished_at, command_line, host, ka_version, "
         "git_sha, suite, device, fingerprint, fingerprint_json, threads, fma_peak_gflops, "
         "fma_peak_1t_gflops, libtorch_version, openblas_coretype, openblas_core, " +
         column_or_null(cols, "copy_gbps") + ", " + column_or_null(cols, "read_gbps") + ", " +
         column_or_null(cols, "strategy") +
         ", (SELECT count(*) FROM results WHERE results.run_id = runs.id), " +
         (trials ? "(SELECT count(*) FROM trials WHERE trials.run_id = runs.id)" : "0") +
         " FROM runs " + where + " ORDER BY id";
}

ImplResult read_impl(const db::Statement& st, int first) {
  ImplResult r;
  r.impl = st.column_text(first);
  r.kernel = text_or_empty(st, first + 1);
  r.config = text_or_empty(st, first + 2);
  r.disposition = st.column_text(first + 3);
  r.error = text_or_empty(st, first + 4);
  r.cache_state = st.column_text(first + 5);
  r.median_ns = optional_real(st, first + 6);
  r.stddev_ns = optional_real(st, first + 7);
  r.gflops = optional_real(st, first + 8);
  r.pct_peak = optional_real(st, first + 9);
  r.repetitions = st.column_is_null(first + 10) ? 0 : st.column_int64(first + 10);
  return r;
}

bool finite_positive(const std::optional<double>& v) {
  return v.has_value() && std::isfinite(*v) && *v > 0.0;
}

// A config's "key=value" words as a map; words without '=' are kept whole as keys.
std::map<std::string, std::string> config_params(const std::string& config) {
  std::map<std::string, std::string> out;
  std::istringstream in(config);
  std::string word;
  while (in >> word) {
    const auto eq = word.find('=');
    if (eq == std::string::npos) {
      out[word] = "";
    } else {
      out[word.substr(0, eq)] = word.substr(eq + 1);
    }
  }
  return out;
}

// Note [Heatmap tunables]
// A stored config is a LaunchConfig's canonical form: its geometry (grid=, block=) followed by
// the kernel's tunables. The geometry follows from the tunables and the shape, so it is never
// an axis, and "the others at the winner's values" means the other tunables only.
bool is_geometry(const std::string& key) { return key == "grid" || key == "block"; }

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  (void)std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// Values sorted numerically when all are numbers, else as text.
std::vector<std::string> sorted_values(const std::set<std::string>& values) {
  std::vector<std::string> out(values.begin(), values.end());
  if (std::all_of(out.begin(), out.end(), is_number)) {
    std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
      return std::strtod(a.c_str(), nullptr) < std::strtod(b.c_str(), nullptr);
    });
  }
  return out;
}

using Params = std::map<std::string, std::string>;

// Each value's mean of `y` over the trials, grouped by `key`'s value.
std::map<std::string, double> group_means(const std::vector<Params>& params,
                                          const std::vector<double>& y, const std::string& key) {
  std::map<std::string, std::pair<double, int>> groups;  // value -> (sum, count)
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto it = params[i].find(key);
    auto& g = groups[it == params[i].end() ? std::string() : it->second];
    g.first += y[i];
    ++g.second;
  }
  std::map<std::string, double> out;
  for (const auto& [value, g] : groups) out[value] = g.first / g.second;
  return out;
}

std::string value_of(const Params& p, const std::string& key) {
  const auto it = p.find(key);
  return it == p.end() ? std::string() : it->second;
}

// Between-group sum of squares of `y` over the total, grouping by `key`'s value (eta squared):
// the share of the variance that tunable explains on its own.
double explained_variance(const std::vector<Params>& params, const std::vector<double>& y,
                          const std::string& key) {
  const double mean = std::accumulate(y.begin(), y.end(), 0.0) / static_cast<double>(y.size());
  const std::map<std::string, double> means = group_means(params, y, key);
  double total = 0.0;
  double between = 0.0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const double gm = means.at(value_of(params[i], key));
    total += (y[i] - mean) * (y[i] - mean);
    between += (gm - mean) * (gm - mean);
  }
  return total > 0.0 ? between / total : 0.0;
}

// `y` less each trial's group mean by `key`: what `key` leaves unexplained.
std::vector<double> residuals(const std::vector<Params>& params, const std::vector<double>& y,
                              const std::string& key) {
  const std::map<std::string, double> means = group_means(params, y, key);
  std::vector<double> out(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) out[i] = y[i] - means.at(value_of(params[i], key));
  return out;
}

// The varying tunable whose values explain most of the variance of `y` (ties by name).
std::string most_explaining(const std::map<std::string, std::set<std::string>>& varying,
                            const std::vector<Params>& params, const std::vector<double>& y,
                            const std::string& besides) {
  std::string best;
  double best_share = -1.0;
  for (const auto& [key, values] : varying) {
    if (key == besides) continue;
    const double share = explained_variance(params, y, key);
    if (share > best_share) {
      best_share = share;
      best = key;
    }
  }
  return best;
}

// The tunables with two or more values among `params`.
std::map<std::string, std::set<std::string>> varying_tunables(const std::vector<Params>& params) {
  std::map<std::string, std::set<std::string>> values;
  for (const Params& p : params) {
    for (const auto& [key, value] : p) {
      if (!is_geometry(key)) values[key].insert(value);
    }
  }
  for (auto it = values.begin(); it != values.end();) {
    it = it->second.size() < 2 ? values.erase(it) : std::next(it);
  }
  return values;
}

// Note [Heatmap axes]
// Unless the user names them, the axes are the tunable that explains most of the variance of
// log(time), then the one that explains most of what the first leaves (the residuals after its
// group means): picked on the raw variance, a tunable correlated with the first by the
// sampling (one fast trial at threads=2 that also has the best tile) would look important.
std::optional<std::pair<std::string, std::string>> pick_axes(
    const std::map<std::string, std::set<std::string>>& varying, const std::vector<Params>& params,
    const std::vector<double>& log_t, const HeatmapAxes& axes) {
  if (!axes.x.empty() || !axes.y.empty()) {
    if (varying.count(axes.x) == 0 || varying.count(axes.y) == 0 || axes.x == axes.y) {
      return std::nullopt;
    }
    return std::make_pair(axes.x, axes.y);
  }
  if (varying.size() < 2) return std::nullopt;
  const std::string first = most_explaining(varying, params, log_t, "");
  const std::string second =
      most_explaining(varying, params, residuals(params, log_t, first), first);
  return std::make_pair(first, second);
}

std::size_t index_of(const std::vector<std::string>& values, const std::string& v) {
  return static_cast<std::size_t>(std::find(values.begin(), values.end(), v) - values.begin());
}

// Whether `p` agrees with `winner` on every tunable but the two axes.
bool at_winner_elsewhere(const Params& p, const Params& winner, const std::string& x,
                         const std::string& y) {
  for (const auto& [key, value] : p) {
    if (key == x || key == y || is_geometry(key)) continue;
    const auto it = winner.find(key);
    if (it == winner.end() || it->second != value) return false;
  }
  return true;
}

// Note [Heatmap slices]
// A heatmap holds the other tunables at the winner's values. A sampled sweep (random,
// annealing, model) rarely measured two points that differ only on the two axes, so that slice
// can be all but empty; with fewer than kFewestSliceCells measured cells each cell shows the
// best time over every value of the other tunables instead, and the heatmap says so.
constexpr std::size_t kFewestSliceCells = 4;

// Fills h.cells from the trials: those agreeing with `winner` elsewhere, or every trial when
// `winner` is null; a cell keeps its fastest trial (equivalent configurations repeat cells).
void fill_cells(TuningHeatmap& h, const std::vector<Params>& params,
                const std::vector<double>& times, const Params* winner) {
  h.cells.assign(h.y_values.size(), std::vector<std::optional<double>>(h.x_values.size()));
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (winner != nullptr && !at_winner_elsewhere(params[i], *winner, h.x_param, h.y_param)) {
      continue;
    }
    const auto x = params[i].find(h.x_param);
    const auto y = params[i].find(h.y_param);
    if (x == params[i].end() || y == params[i].end()) continue;
    auto& cell = h.cells[index_of(h.y_values, y->second)][index_of(h.x_values, x->second)];
    if (!cell || times[i] < *cell) cell = times[i];
  }
}

std::size_t measured_cells(const TuningHeatmap& h) {
  std::size_t n = 0;
  for (const auto& row : h.cells) {
    for (const auto& cell : row) n += cell.has_value() ? 1 : 0;
  }
  return n;
}

// Trials carry no device: their run does. Each query binds the fingerprint last.
constexpr const char* kOnDevice = " AND run_id IN (SELECT id FROM runs WHERE fingerprint = ?)";

std::vector<TrialPoint> ok_points(db::Connection& db, const TuningShape& t,
                                  const std::string& run_filter) {
  auto st = db.prepare(
      "SELECT config, median_ns FROM trials WHERE op = ? AND shape_key = ? AND kernel = ? AND "
      "kernel_version = ? AND disposition = 'ok' AND median_ns > 0" + run_filter +
      kOnDevice + " ORDER BY id");
  st.bind(1, t.op).bind(2, t.shape_key).bind(3, t.kernel).bind(4, t.kernel_version);
  st.bind(5, t.fingerprint);
  std::vector<TrialPoint> out;
  while (st.step()) out.push_back({st.column_text(0), st.column_double(1)});
  return out;
}

std::string run_filter_sql(const std::vector<std::int64_t>& runs) {
  if (runs.empty()) return "";
  std::string list;
  for (const std::int64_t id : runs) list += (list.empty() ? "" : ", ") + std::to_string(id);
  return " AND run_id IN (" + list + ")";
}

// Each run's sweep of `t`: best so far after each trial, in the order the trials were stored.
std::vector<TuningTrace> traces_of(db::Connection& db, const TuningShape& t,
                                   const std::string& run_filter,
                                   const std::map<std::int64_t, std::string>& strategies) {
  auto st = db.prepare(
      "SELECT run_id, disposition, median_ns FROM trials WHERE op = ? AND shape_key = ? AND "
      "kernel = ? AND kernel_version = ?" + run_filter + kOnDevice + " ORDER BY run_id, id");
  st.bind(1, t.op).bind(2, t.shape_key).bind(3, t.kernel).bind(4, t.kernel_version);
  st.bind(5, t.fingerprint);
  std::vector<TuningTrace> out;
  double best = std::numeric_limits<double>::quiet_NaN();
  while (st.step()) {
    const std::int64_t run = st.column_int64(0);
    if (out.empty() || out.back().run_id != run) {
      TuningTrace trace;
      trace.run_id = run;
      const auto it = strategies.find(run);
      trace.strategy = it != strategies.end() && !it->second.empty() ? it->second : "unknown";
      out.push_back(std::move(trace));
      best = std::numeric_limits<double>::quiet_NaN();
    }
    const bool ok = st.column_text(1) == "ok" && !st.column_is_null(2);
    const double t_ns = ok ? st.column_double(2) : std::numeric_limits<double>::quiet_NaN();
    if (std::isfinite(t_ns) && t_ns > 0.0 && !(best <= t_ns)) best = t_ns;
    out.back().best_so_far_ns.push_back(best);
  }
  return out;
}

// The recommendation stored for `t` on its device, and the winner trial's interval.
void read_winner(db::Connection& db, TuningShape& t, const std::string& run_filter) {
  const std::set<std::string> cols = db::column_names(db, "recommendations");
  auto rec = db.prepare(
      "SELECT config, median_ns, gain_over_default, " + column_or_null(cols, "default_median_ns") +
      ", " + column_or_null(cols, "gain_low") + ", " + column_or_null(cols, "gain_high") +
      " FROM recommendations WHERE fingerprint = ? AND op = ? AND shape_key = ? AND kernel = ? "
      "AND kernel_version = ?");
  rec.bind(1, t.fingerprint).bind(2, t.op).bind(3, t.shape_key).bind(4, t.kernel);
  rec.bind(5, t.kernel_version);
  if (!rec.step()) return;
  t.winner_config = rec.column_text(0);
  t.winner_median_ns = optional_real(rec, 1);
  t.gain_over_default = optional_real(rec, 2);
  t.default_median_ns = optional_real(rec, 3);
  t.gain_low = optional_real(rec, 4);
  t.gain_high = optional_real(rec, 5);
  auto trial = db.prepare(
      "SELECT ci95_ns FROM trials WHERE op = ? AND shape_key = ? AND kernel = ? AND "
      "kernel_version = ? AND config = ? AND disposition = 'ok' AND ci95_ns IS NOT NULL" +
      run_filter + kOnDevice + " ORDER BY median_ns LIMIT 1");
  trial.bind(1, t.op).bind(2, t.shape_key).bind(3, t.kernel).bind(4, t.kernel_version);
  trial.bind(5, t.winner_config).bind(6, t.fingerprint);
  if (trial.step()) t.winner_ci95_ns = trial.column_double(0);
}

}  // namespace

std::optional<double> ImplResult::ci95_ns() const {
  if (!stddev_ns.has_value() || repetitions < 2 || !std::isfinite(*stddev_ns)) return std::nullopt;
  return 1.96 * *stddev_ns / std::sqrt(static_cast<double>(repetitions));
}

const ImplResult* CaseRow::find(const std::string& impl) const {
  for (const ImplResult& r : impls) {
    if (r.impl == impl) return &r;
  }
  return nullptr;
}

std::optional<double> CaseRow::intensity() const {
  if (!finite_positive(flop) || !finite_positive(min_bytes)) return std::nullopt;
  return *flop / *min_bytes;
}

std::vector<RunOverview> load_runs(db::Connection& db) {
  auto st = db.prepare(runs_query(db, ""));
  std::vector<RunOverview> out;
  while (st.step()) out.push_back(read_run(st));
  return out;
}

std::vector<std::int64_t> runs_with_results(db::Connection& db) {
  auto st = db.prepare("SELECT DISTINCT run_id FROM results ORDER BY run_id");
  std::vector<std::int64_t> out;
  while (st.step()) out.push_back(st.column_int64(0));
  return out;
}

BenchRun load_bench_run(db::Connection& db, std::int64_t run_id) {
  BenchRun out;
  {
    auto st = db.prepare(runs_query(db, "WHERE id = " + std::to_string(run_id)));
    KA_CHECK(st.step(), db.path(), ": there is no run ", run_id, " (ka-db show --runs lists them)");
    out.run = read_run(st);
  }
  const std::set<std::string> cols = db::column_names(db, "results");
  auto st = db.prepare(
      "SELECT case_name, op, shape_key, " + column_or_null(cols, "flop") + ", " +
      column_or_null(cols, "min_bytes") +
      ", impl, kernel, config, disposition, error, cache_state, median_ns, stddev_ns, gflops, "
      "pct_peak, repetitions FROM results WHERE run_id = ? ORDER BY id");
  st.bind(1, run_id);
  std::map<std::string, std::size_t> case_index;
  std::set<std::string> seen_impls;
  while (st.step()) {
    const std::string name = st.column_text(0);
    auto [it, added] = case_index.emplace(name, out.cases.size());
    if (added) {
      CaseRow c;
      c.name = name;
      c.op = st.column_text(1);
      c.shape_key = st.column_text(2);
      out.cases.push_back(std::move(c));
    }
    CaseRow& c = out.cases[it->second];
    if (!c.flop) c.flop = optional_real(st, 3);
    if (!c.min_bytes) c.min_bytes = optional_real(st, 4);
    ImplResult r = read_impl(st, 5);
    if (seen_impls.insert(r.impl).second) out.impls.push_back(r.impl);
    c.impls.push_back(std::move(r));
  }
  // ka first, in the impl list and in every case.
  const auto ka_first = [](const std::string& a, const std::string& b) {
    return a == "ka" && b != "ka";
  };
  std::stable_sort(out.impls.begin(), out.impls.end(), ka_first);
  for (CaseRow& c : out.cases) {
    std::stable_sort(c.impls.begin(), c.impls.end(),
                     [&](const ImplResult& a, const ImplResult& b) { return ka_first(a.impl, b.impl); });
  }
  return out;
}

std::vector<Speedup> speedups(const BenchRun& run, const std::string& reference) {
  std::vector<Speedup> out;
  for (const CaseRow& c : run.cases) {
    const ImplResult* ka = c.find("ka");
    const ImplResult* ref = c.find(reference);
    if (ka == nullptr || ref == nullptr || ka->disposition != "ok" || ref->disposition != "ok" ||
        !finite_positive(ka->median_ns) || !finite_positive(ref->median_ns)) {
      continue;
    }
    out.push_back({c.name, *ref->median_ns / *ka->median_ns});
  }
  return out;
}

std::optional<double> geomean(const std::vector<Speedup>& s) {
  if (s.empty()) return std::nullopt;
  double log_sum = 0.0;
  for (const Speedup& x : s) log_sum += std::log(x.ratio);
  return std::exp(log_sum / static_cast<double>(s.size()));
}

std::optional<TuningHeatmap> heatmap_of(const std::vector<TrialPoint>& trials,
                                        const std::string& winner_config,
                                        const HeatmapAxes& axes) {
  std::vector<Params> params;
  std::vector<double> times;
  std::vector<double> log_t;
  for (const TrialPoint& t : trials) {
    if (!std::isfinite(t.median_ns) || t.median_ns <= 0.0) continue;
    params.push_back(config_params(t.config));
    times.push_back(t.median_ns);
    log_t.push_back(std::log(t.median_ns));
  }
  if (params.empty()) return std::nullopt;
  const auto varying = varying_tunables(params);
  const auto picked = pick_axes(varying, params, log_t, axes);
  if (!picked) return std::nullopt;
  TuningHeatmap h;
  h.x_param = picked->first;
  h.y_param = picked->second;
  h.x_values = sorted_values(varying.at(h.x_param));
  h.y_values = sorted_values(varying.at(h.y_param));
  const Params winner = config_params(winner_config);
  fill_cells(h, params, times, winner.empty() ? nullptr : &winner);
  if (measured_cells(h) < kFewestSliceCells && !winner.empty()) {
    h.slice = HeatmapSlice::kBestOverOthers;
    fill_cells(h, params, times, nullptr);
  }
  const auto wx = winner.find(h.x_param);
  const auto wy = winner.find(h.y_param);
  if (wx != winner.end() && wy != winner.end()) {
    const std::size_t xi = index_of(h.x_values, wx->second);
    const std::size_t yi = index_of(h.y_values, wy->second);
    if (xi < h.x_values.size() && yi < h.y_values.size()) h.winner = std::make_pair(yi, xi);
  }
  return h;
}

std::vector<TuningShape> load_tuning(db::Connection& db, const std::vector<std::int64_t>& runs,
                                     const HeatmapAxes& axes) {
  std::vector<TuningShape> out;
  if (db::column_names(db, "trials").empty()) return out;  // schema 1: no trials
  std::map<std::int64_t, std::string> strategies;
  for (const RunOverview& r : load_runs(db)) strategies[r.id] = r.info.strategy;
  const std::string filter = run_filter_sql(runs);
  auto st = db.prepare(
      "SELECT op, shape_key, kernel, kernel_version, count(*), sum(disposition = 'ok'), "
      "runs.fingerprint FROM trials JOIN runs ON runs.id = trials.run_id WHERE 1" + filter +
      " GROUP BY runs.fingerprint, op, shape_key, kernel, kernel_version ORDER BY op, shape_key, "
      "kernel, kernel_version, runs.fingerprint");
  while (st.step()) {
    TuningShape t;
    t.op = st.column_text(0);
    t.shape_key = st.column_text(1);
    t.kernel = st.column_text(2);
    t.kernel_version = static_cast<int>(st.column_int64(3));
    t.trials = st.column_int64(4);
    t.ok = st.column_int64(5);
    t.fingerprint = st.column_text(6);
    out.push_back(std::move(t));
  }
  for (TuningShape& t : out) {
    t.traces = traces_of(db, t, filter, strategies);
    read_winner(db, t, filter);
    t.heatmap = heatmap_of(ok_points(db, t, filter), t.winner_config, axes);
  }
  return out;
}

std::vector<Regression> compare_runs(const BenchRun& baseline, const BenchRun& current,
                                     double threshold) {
  std::vector<Regression> out;
  for (const CaseRow& c : current.cases) {
    const auto base_case = std::find_if(baseline.cases.begin(), baseline.cases.end(),
                                        [&](const CaseRow& b) { return b.name == c.name; });
    if (base_case == baseline.cases.end()) continue;
    for (const ImplResult& now : c.impls) {
      const ImplResult* before = base_case->find(now.impl);
      if (before == nullptr || before->disposition != "ok" || now.disposition != "ok" ||
          !finite_positive(before->median_ns) || !finite_positive(now.median_ns)) {
        continue;
      }
      Regression r;
      r.case_name = c.name;
      r.impl = now.impl;
      r.baseline_ns = *before->median_ns;
      r.current_ns = *now.median_ns;
      const double ca = before->ci95_ns().value_or(0.0);
      const double cb = now.ci95_ns().value_or(0.0);
      r.combined_ci95_ns = std::sqrt(ca * ca + cb * cb);
      const db::DiffStatus status = db::classify_change(r.baseline_ns, r.current_ns,
                                                        before->ci95_ns(), now.ci95_ns(), threshold);
      r.significant = status == db::DiffStatus::kRegression ||
                      status == db::DiffStatus::kImprovement;
      r.slower = r.current_ns > r.baseline_ns;
      out.push_back(std::move(r));
    }
  }
  return out;
}

}  // namespace ka::report
