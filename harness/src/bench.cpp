#include "blas_info.hpp"
#include "gemm_case.hpp"

#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/core/logging.hpp>
#include <ka/db/results_store.hpp>
#include <ka/harness/bench.hpp>
#include <ka/harness/suite.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/profiler/peak_probe.hpp>
#include <ka/profiler/statistics.hpp>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <thread>

#ifndef KA_VERSION
#define KA_VERSION "unknown"
#endif
#ifndef KA_GIT_SHA
#define KA_GIT_SHA "unknown"
#endif

namespace ka::harness {
namespace {

using Clock = std::chrono::steady_clock;
using db::Disposition;

constexpr const char* kImplKa = "ka";
constexpr const char* kImplLibtorch = "libtorch";
constexpr std::uint64_t kSeed = 20261130;

// Note [Interrupting a run]
// The first SIGINT/SIGTERM only sets a flag: the benchmark under way finishes its
// repetitions (Google Benchmark 1.7 aborts when the repetitions of one benchmark report
// different iteration counts, so it cannot stop half-way), every benchmark not yet started is
// skipped as INTERRUPTED, the finished results are stored and the run is marked failed. The
// handler restores the default action, so a second signal kills the process at once.
std::atomic<int> g_interrupt_signal{0};

extern "C" void on_interrupt(int signal_number) {
  g_interrupt_signal.store(signal_number, std::memory_order_relaxed);
  std::signal(signal_number, SIG_DFL);
}

bool interrupted() { return g_interrupt_signal.load(std::memory_order_relaxed) != 0; }

constexpr const char* kInterrupted = "INTERRUPTED: stopped by a signal";

struct CaseState {
  SuiteCase c;
  ShapeKey key;
  LaunchConfig config;  // the ka kernel's default configuration for this shape
  bool checked = false;
  Disposition ka_disposition = Disposition::kOk;
  detail::CheckResult check;
  bool ka_started = false;  // a repetition ran; see Note [Interrupting a run]
  bool libtorch_started = false;
};

// What one benchmark (one case, one impl) produced.
struct Outcome {
  std::size_t case_index = 0;
  std::string impl;
  Disposition disposition = Disposition::kOk;
  std::string error;
  std::vector<double> per_call_ns;  // one value per repetition
  std::int64_t iterations = 0;
  profiler::Summary summary;
};

struct Session {
  BenchOptions options;
  Suite suite;
  std::vector<CaseState> cases;
  detail::Tolerance tolerance;
  std::unique_ptr<detail::GemmCase> current;
  std::size_t current_index = SIZE_MAX;
  std::unique_ptr<db::ResultsStore> store;
  std::int64_t run_id = 0;
  double peak_gflops = 0.0;
  std::string libtorch_kernel;
  std::map<std::string, Outcome> outcomes;  // by benchmark name
  bool db_failed = false;
  std::size_t rows_stored = 0;

  // Cases' tensors are built on first use and dropped when another case starts: the ka and
  // libtorch benchmarks of a case run back to back, so each case is built once.
  detail::GemmCase& materialize(std::size_t i) {
    if (current_index != i) {
      current.reset();
      current = std::make_unique<detail::GemmCase>(cases[i].c, kSeed + i);
      current_index = i;
    }
    return *current;
  }

  std::string benchmark_name(std::size_t i, const char* impl) const {
    return suite.name + "/" + cases[i].c.name + "/" + impl;
  }
};

// A benchmark that did not produce timings reports "<LABEL>: <why>" through Google Benchmark's
// error message, LABEL being the disposition in capitals; the reporter reads it back.
std::string error_label(Disposition d) {
  std::string label(db::to_string(d));
  for (auto& ch : label) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return label;
}

Disposition disposition_of_error(const std::string& message) {
  for (const Disposition d : {Disposition::kIncorrect, Disposition::kUnsupported}) {
    if (message.rfind(error_label(d) + ":", 0) == 0) return d;
  }
  return Disposition::kFailed;  // FAILED and INTERRUPTED
}

// Skips a benchmark that had not started when the run was interrupted; one already under way
// finishes its repetitions. See Note [Interrupting a run].
bool skip_if_interrupted(benchmark::State& state, bool& started) {
  if (interrupted() && !started) {
    state.SkipWithError(kInterrupted);
    return true;
  }
  started = true;
  return false;
}

void ensure_checked(Session& s, std::size_t i) {
  CaseState& cs = s.cases[i];
  if (cs.checked) return;
  cs.checked = true;
  try {
    cs.check = s.materialize(i).check(cs.config, s.tolerance);
    if (!cs.check.correct) {
      cs.ka_disposition = cs.check.refused ? Disposition::kUnsupported : Disposition::kIncorrect;
    }
  } catch (const std::exception& e) {
    cs.ka_disposition = Disposition::kFailed;
    cs.check.detail = e.what();
  }
}

void bench_ka(benchmark::State& state, Session* s, std::size_t i) {
  CaseState& cs = s->cases[i];
  if (skip_if_interrupted(state, cs.ka_started)) return;
  ensure_checked(*s, i);
  if (cs.ka_disposition != Disposition::kOk) {
    state.SkipWithError((error_label(cs.ka_disposition) + ": " + cs.check.detail).c_str());
    return;
  }
  detail::GemmCase& g = s->materialize(i);
  for (auto _ : state) {
    const auto t0 = Clock::now();
    const Status st = g.run_ka(cs.config);
    const auto t1 = Clock::now();
    if (!st) {
      state.SkipWithError((error_label(Disposition::kUnsupported) + ": " + st.reason()).c_str());
      break;
    }
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
}

void bench_libtorch(benchmark::State& state, Session* s, std::size_t i) {
  if (skip_if_interrupted(state, s->cases[i].libtorch_started)) return;
  detail::GemmCase* g = nullptr;
  try {
    g = &s->materialize(i);
    g->run_libtorch();  // warm-up call, outside the timed loop
  } catch (const std::exception& e) {
    state.SkipWithError((error_label(Disposition::kFailed) + ": " + e.what()).c_str());
    return;
  }
  for (auto _ : state) {
    const auto t0 = Clock::now();
    g->run_libtorch();
    const auto t1 = Clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
}

db::ResultRow make_row(const Session& s, const std::string& name, const Outcome& o) {
  const CaseState& cs = s.cases[o.case_index];
  db::ResultRow r;
  r.suite = s.suite.name;
  r.case_name = cs.c.name;
  r.impl = o.impl;
  r.benchmark_name = name;
  r.op = cs.c.op;
  r.shape_key = cs.key.str();
  r.m = cs.c.m;
  r.n = cs.c.n;
  r.k = cs.c.k;
  r.dtype = cs.c.dtype;
  if (o.impl == kImplKa) {
    const auto& d = kernels::gemm_f32_cpu_descriptor();
    r.kernel = d.name + "[" + kernels::gemm_cpu_isa() + "]";
    r.kernel_version = d.version;
    r.config = cs.config.str();
    if (cs.checked) r.max_abs_error = cs.check.max_abs_error;
  } else {
    r.kernel = s.libtorch_kernel;
  }
  r.disposition = o.disposition;
  r.error = o.error;
  r.repetitions = static_cast<std::int64_t>(o.per_call_ns.size());
  r.iterations = o.iterations;
  if (o.disposition == Disposition::kOk && !o.per_call_ns.empty()) {
    r.median_ns = o.summary.median;
    r.mean_ns = o.summary.mean;
    r.min_ns = o.summary.min;
    r.max_ns = o.summary.max;
    r.stddev_ns = o.summary.stddev;
    const double flop = 2.0 * static_cast<double>(cs.c.m) * static_cast<double>(cs.c.n) *
                        static_cast<double>(cs.c.k);
    if (o.summary.median > 0.0) {
      r.gflops = flop / o.summary.median;
      if (s.peak_gflops > 0.0) r.pct_peak = *r.gflops / s.peak_gflops * 100.0;
    }
  }
  return r;
}

// Collects every run for ka's own statistics and database rows, and forwards what the user
// should see to Google Benchmark's reporter of the chosen format.
class CollectingReporter : public benchmark::BenchmarkReporter {
 public:
  CollectingReporter(Session& s, std::unique_ptr<benchmark::BenchmarkReporter> inner,
                     bool medians_only)
      : s_(s), inner_(std::move(inner)), medians_only_(medians_only) {}

  bool ReportContext(const Context& context) override { return inner_->ReportContext(context); }

  // Google Benchmark reports each repetition as it finishes, then the aggregates; a
  // benchmark's results are complete when the next benchmark starts reporting (or at the end).
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> shown;
    for (const Run& run : runs) {
      const std::string name = run.run_name.function_name;
      auto it = s_.outcomes.find(name);
      if (it == s_.outcomes.end()) continue;
      if (name != pending_) {
        flush();
        pending_ = name;
      }
      Outcome& o = it->second;
      if (run.error_occurred) {
        if (o.error.empty()) shown.push_back(run);  // the same error repeats per repetition
        o.error = run.error_message;
        o.disposition = disposition_of_error(o.error);
        continue;
      }
      if (run.run_type == Run::RT_Aggregate) {
        if (run.aggregate_name == "median") shown.push_back(run);
        continue;
      }
      if (run.iterations > 0) {
        o.per_call_ns.push_back(run.real_accumulated_time / static_cast<double>(run.iterations) *
                                1e9);
        o.iterations = run.iterations;
      }
      if (s_.options.repetitions == 1) shown.push_back(run);
    }
    if (!medians_only_) {
      inner_->ReportRuns(runs);
    } else if (!shown.empty()) {
      inner_->ReportRuns(shown);
    }
  }

  /// Stores the benchmark whose runs were reported last (idempotent).
  void flush() {
    if (pending_.empty()) return;
    Outcome& o = s_.outcomes.at(pending_);
    if (o.disposition == Disposition::kOk && !o.per_call_ns.empty()) {
      o.summary = profiler::summarize(o.per_call_ns);
    }
    write(pending_, o);
    pending_.clear();
  }

  void Finalize() override {
    flush();
    inner_->Finalize();
  }

 private:
  void write(const std::string& name, const Outcome& o) {
    if (!s_.store) return;
    // A benchmark an interrupt kept from starting has nothing to store.
    if (o.per_call_ns.empty() && o.error == kInterrupted) return;
    try {
      s_.store->add_results(s_.run_id, {make_row(s_, name, o)});
      ++s_.rows_stored;
    } catch (const Error& e) {
      // Keep measuring; the run is marked failed at the end and the error is shown.
      s_.db_failed = true;
      log().error("could not store {}: {}", name, e.what());
    }
  }

  Session& s_;
  std::unique_ptr<benchmark::BenchmarkReporter> inner_;
  bool medians_only_;
  std::string pending_;
};

std::string flag_value(const std::vector<std::string>& flags, const std::string& name) {
  std::string value;
  const std::string prefix = "--" + name + "=";
  for (const auto& f : flags) {
    if (f.rfind(prefix, 0) == 0) value = f.substr(prefix.size());
  }
  return value;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

std::string fmt_ms(double ns) { return fmt::format("{:.3f}", ns / 1e6); }

void print_summary(const Session& s, std::FILE* out) {
  fmt::print(out, "\nka-bench summary: suite '{}', {} threads, hot cache; time = median over "
                  "repetitions of the mean per-call time\n", s.suite.name, s.options.threads);
  fmt::print(out, "{:<28} {:>6} {:>6} {:>6} | {:>10} {:>9} {:>6} | {:>10} {:>9} {:>6} | {:>8}\n",
             "case", "M", "K", "N", "ka ms", "GFLOP/s", "%peak", "libtorch ms", "GFLOP/s", "%peak",
             "ka/lt");
  double log_sum = 0.0;
  int ratios = 0;
  for (std::size_t i = 0; i < s.cases.size(); ++i) {
    const auto ka = s.outcomes.find(s.benchmark_name(i, kImplKa));
    const auto lt = s.outcomes.find(s.benchmark_name(i, kImplLibtorch));
    const bool ka_ran = ka != s.outcomes.end() && (!ka->second.per_call_ns.empty() ||
                                                   ka->second.disposition != Disposition::kOk);
    const bool lt_ran = lt != s.outcomes.end() && (!lt->second.per_call_ns.empty() ||
                                                   lt->second.disposition != Disposition::kOk);
    if (!ka_ran && !lt_ran) continue;
    const CaseState& cs = s.cases[i];
    const double flop = 2.0 * static_cast<double>(cs.c.m) * static_cast<double>(cs.c.n) *
                        static_cast<double>(cs.c.k);
    auto cells = [&](const Outcome* o) -> std::string {
      if (o == nullptr) return fmt::format("{:>10} {:>9} {:>6}", "-", "-", "-");
      if (o->disposition != Disposition::kOk) {
        return fmt::format("{:>28}", error_label(o->disposition));
      }
      const double gflops = o->summary.median > 0 ? flop / o->summary.median : 0.0;
      const double pct = s.peak_gflops > 0 ? gflops / s.peak_gflops * 100.0 : 0.0;
      return fmt::format("{:>10} {:>9.1f} {:>5.1f}%", fmt_ms(o->summary.median), gflops, pct);
    };
    const Outcome* ko = ka_ran ? &ka->second : nullptr;
    const Outcome* lo = lt_ran ? &lt->second : nullptr;
    std::string ratio = "-";
    if (ko != nullptr && lo != nullptr && ko->disposition == Disposition::kOk &&
        lo->disposition == Disposition::kOk && ko->summary.median > 0) {
      const double r = lo->summary.median / ko->summary.median;
      ratio = fmt::format("{:.2f}x", r);
      log_sum += std::log(r);
      ++ratios;
    }
    fmt::print(out, "{:<28} {:>6} {:>6} {:>6} | {} | {} | {:>8}\n", cs.c.name, cs.c.m, cs.c.k,
               cs.c.n, cells(ko), cells(lo), ratio);
  }
  if (ratios > 0) {
    fmt::print(out, "geometric mean of ka/libtorch throughput over {} cases: {:.2f}x  "
                    "(ka/lt = libtorch time / ka time; > 1 means ka is faster)\n",
               ratios, std::exp(log_sum / ratios));
  }
  for (std::size_t i = 0; i < s.cases.size(); ++i) {
    const CaseState& cs = s.cases[i];
    if (cs.checked && cs.ka_disposition != Disposition::kOk) {
      fmt::print(out, "{}: {}: {}\n", s.benchmark_name(i, kImplKa),
                 cs.ka_disposition == Disposition::kIncorrect ? "INCORRECT" : "not timed",
                 cs.check.detail);
    }
  }
}

}  // namespace

int run_suite(const BenchOptions& options) {
  Session s;
  s.options = options;
  const std::string path = find_suite_file(options.suite, options.suites_dir);
  s.suite = load_suite_file(path);
  const int hw = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  KA_CHECK(options.threads >= 0, "--threads must be >= 0 (0 means all ", hw, " cores)");
  KA_CHECK(options.repetitions >= 1, "--repetitions must be >= 1");
  KA_CHECK(options.min_time_s > 0.0, "--min-time must be > 0 seconds");
  s.options.threads = options.threads == 0 ? hw : options.threads;

  // Google Benchmark's own flags are checked before anything is measured.
  std::vector<std::string> args = {"ka-bench",
                                   "--benchmark_repetitions=" + std::to_string(options.repetitions),
                                   fmt::format("--benchmark_min_time={}", options.min_time_s)};
  args.insert(args.end(), options.benchmark_flags.begin(), options.benchmark_flags.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  benchmark::Initialize(&argc, argv.data());
  if (benchmark::ReportUnrecognizedArguments(argc, argv.data())) {
    KA_THROW(ValueError, "unrecognised Google Benchmark flag");
  }

  // The database is opened (and its schema migrated) before any measurement, so a bad --db
  // fails fast and a failure never costs a run's worth of measurements.
  if (options.write_db) s.store = std::make_unique<db::ResultsStore>(options.db_path);

  const auto& descriptor = kernels::gemm_f32_cpu_descriptor();
  for (const SuiteCase& c : s.suite.cases) {
    CaseState cs;
    cs.c = c;
    cs.key = kernels::addmm_shape_key(c.m, c.k, c.n, c.op == "aten::addmm");
    LaunchConfig config = descriptor.default_config(cs.key);
    config.set("threads", std::min<std::int64_t>(s.options.threads,
                                                 config.get_or("threads", s.options.threads)));
    cs.config = config;
    s.cases.push_back(std::move(cs));
  }

  detail::set_libtorch_threads(s.options.threads);
  detail::set_openblas_threads(s.options.threads);
  const detail::BlasInfo blas = detail::blas_info();
  s.libtorch_kernel = blas.core.empty() ? "at::addmm_out (BLAS: unknown)"
                                        : "at::addmm_out (OpenBLAS " + blas.core + ")";

  const auto peak = profiler::measure_fma_peak(s.options.threads);
  const auto peak1 = s.options.threads == 1 ? peak : profiler::measure_fma_peak(1);
  s.peak_gflops = peak.gflops;

  const DeviceFingerprint fp = cpu_fingerprint();
  nlohmann::json fp_json;
  for (const auto& [k, v] : fp.fields()) fp_json[k] = v;

  const std::string format = flag_value(options.benchmark_flags, "benchmark_format");
  const bool console = format.empty() || format == "console";
  std::FILE* out = console ? stdout : stderr;

  fmt::print(out, "ka-bench {}: suite '{}' ({} cases) from {}\n", KA_VERSION, s.suite.name,
             s.suite.cases.size(), path);
  fmt::print(out, "device: {} ({}, {} logical cores, L2 {} KiB/core); ka GEMM: {} v{}, {} micro-kernel\n",
             fp.name, fp.isa, fp.cores, fp.l2_bytes / 1024, descriptor.name, descriptor.version,
             kernels::gemm_cpu_isa());
  fmt::print(out, "libtorch {} ({}), OPENBLAS_CORETYPE={}; {} thread(s) for ka and libtorch\n",
             detail::libtorch_version(), s.libtorch_kernel,
             blas.coretype_env.empty() ? "(unset)" : blas.coretype_env, s.options.threads);
  fmt::print(out, "fp32 FMA peak (measured now, {} FMA loop): {:.1f} GFLOP/s on {} thread(s), "
                  "{:.1f} on 1; %peak uses the {}-thread figure\n",
             peak.isa, peak.gflops, peak.threads, peak1.gflops, s.options.threads);
  fmt::print(out, "method: {} repetitions of >= {:.2f} s of back-to-back calls (hot cache), "
                  "per-call time by steady_clock (Google Benchmark manual time); median reported\n",
             options.repetitions, options.min_time_s);
  fmt::print(out, "correctness: ka checked against libtorch before timing, |ka - ref| <= "
                  "{:g}*sqrt(K) + {:g}*|ref| (inputs uniform in [-1, 1))\n",
             s.tolerance.atol_per_sqrt_k, s.tolerance.rtol);

  if (s.store) {
    db::RunInfo info;
    info.tool = "ka-bench";
    info.command_line = options.command_line;
    info.host = host_name();
    info.ka_version = KA_VERSION;
    info.git_sha = KA_GIT_SHA;
    info.suite = s.suite.name;
    info.device = fp.device.str();
    info.fingerprint = fp.key();
    info.fingerprint_json = fp_json.dump();
    info.threads = s.options.threads;
    info.fma_peak_gflops = peak.gflops;
    info.fma_peak_1t_gflops = peak1.gflops;
    info.libtorch_version = detail::libtorch_version();
    info.openblas_coretype = blas.coretype_env;
    info.openblas_core = blas.core;
    s.run_id = s.store->begin_run(info);
    fmt::print(out, "results: {} (run {})\n", options.db_path, s.run_id);
  }
  std::fflush(out);

  for (std::size_t i = 0; i < s.cases.size(); ++i) {
    for (const char* impl : {kImplKa, kImplLibtorch}) {
      const std::string name = s.benchmark_name(i, impl);
      Outcome o;
      o.case_index = i;
      o.impl = impl;
      s.outcomes.emplace(name, std::move(o));
      auto* b = impl == kImplKa
                    ? benchmark::RegisterBenchmark(name.c_str(), bench_ka, &s, i)
                    : benchmark::RegisterBenchmark(name.c_str(), bench_libtorch, &s, i);
      b->UseManualTime()->Unit(benchmark::kMillisecond);
    }
  }

  std::unique_ptr<benchmark::BenchmarkReporter> inner;
  if (format == "json") {
    inner = std::make_unique<benchmark::JSONReporter>();
  } else {
    KA_CHECK(console, "--benchmark_format='", format,
             "': expected console or json (Google Benchmark deprecates csv)");
    inner = std::make_unique<benchmark::ConsoleReporter>(
        isatty(STDOUT_FILENO) != 0 ? benchmark::ConsoleReporter::OO_Color
                                   : benchmark::ConsoleReporter::OO_None);
  }
  CollectingReporter reporter(s, std::move(inner), console);
  g_interrupt_signal.store(0);
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  const std::size_t ran = benchmark::RunSpecifiedBenchmarks(&reporter);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  reporter.flush();
  benchmark::Shutdown();
  s.current.reset();

  print_summary(s, out);
  bool all_ok = true;
  for (const auto& [name, o] : s.outcomes) {
    if (o.impl == kImplKa && (o.disposition == Disposition::kIncorrect ||
                              o.disposition == Disposition::kFailed)) {
      all_ok = false;
    }
  }
  const int signal_number = g_interrupt_signal.load();
  if (s.store) {
    s.store->finish_run(s.run_id, all_ok && !s.db_failed && signal_number == 0 && ran > 0);
    fmt::print(out, "stored {} benchmark results in {} (run {}{})\n", s.rows_stored,
               options.db_path, s.run_id, signal_number != 0 ? ", marked failed: interrupted" : "");
  }
  if (signal_number != 0) {
    fmt::print(stderr, "ka-bench: interrupted by signal {}; the results measured so far are "
                       "stored\n", signal_number);
    return 128 + signal_number;
  }
  KA_CHECK_TYPE(DbError, !s.db_failed, "some results could not be written to ", options.db_path,
                " (see the errors above)");
  KA_CHECK(ran > 0, "no benchmark matched --benchmark_filter");
  return all_ok ? 0 : 1;
}

}  // namespace ka::harness
