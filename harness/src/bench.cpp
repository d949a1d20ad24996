#include <ka/core/cpu_cores.hpp>
#include <ka/harness/detail/bench_case.hpp>
#include "blas_info.hpp"
#include "case_supervisor.hpp"
#include <ka/harness/detail/isa_restriction.hpp>
#include <ka/harness/detail/peer_blas.hpp>
#include <ka/harness/detail/roofline.hpp>
#include <ka/harness/detail/rounds_reporter.hpp>

#include <ka/core/error.hpp>
#include <ka/core/interrupt.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/core/logging.hpp>
#include <ka/core/option_checks.hpp>
#include <ka/db/results_store.hpp>
#include <ka/harness/bench.hpp>
#include <ka/harness/suite.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/profiler/cupti_profiler.hpp>
#include <ka/profiler/measure.hpp>
#include <ka/profiler/peak_probe.hpp>
#include <ka/profiler/perf_counters.hpp>
#include <ka/profiler/span.hpp>
#include <ka/profiler/statistics.hpp>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <functional>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <thread>
#include <time.h>
#include <utility>

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

using detail::kImplKa;
using detail::kImplKaUnfused;
using detail::kImplLibtorch;
constexpr std::uint64_t kSeed = 20261130;

// Note [Interrupting a run]
// Inside run_benchmarks, the first SIGINT/SIGTERM/SIGHUP only sets a flag (ka::InterruptScope):
// the case under way finishes its rounds (Note [Interleaved rounds]), so each of its variants
// has all its repetitions and its ratios stay paired; every case not yet started is skipped
// as INTERRUPTED, the finished results are stored and the run is marked failed. A second
// signal kills the process at once.

// Note [Interleaved rounds]
// On a shared machine the speed drifts within a run (neighbours' load; the copy bandwidth moves
// by 2x), and when a case's variants run one after another, drift favours whichever ran at the
// better moment: a ka/libtorch ratio then measures the machine as much as the kernels. So a
// case's --repetitions are rounds, and each round times every variant once (ka's, the peers',
// libtorch, in that order) before the next round starts: the two sides of a ratio alternate,
// and the medians over rounds meet the same drift. Each (case, variant, round) is one Google
// Benchmark of one repetition, registered in that order; the rounds of a variant share its
// name, and RoundsReporter turns them back into repetitions and their aggregates. Each round
// sizes its own iteration count, and its timed calls follow one untimed call, so they start
// with the variant's data in cache whatever ran before (another variant, a copy probe).
bool interrupted() { return interrupt_signal() != 0; }

constexpr const char* kInterrupted = "INTERRUPTED: stopped by a signal";

// Note [Per-operator profile]
// After a module case's fused ka variant is timed, it runs kProfiledCalls more times with the
// profiler on; each task's "block" spans (a fallback's "fallback" span) are summed per
// (operator, shapes, served by), per call. Busy time adds up the threads' time, so a GEMM on
// two threads counts twice its wall time: a share says where the machine's work goes, not the
// critical path. The wall time per call is printed beside it; the gap between the two
// (busy / threads short of wall) is extraction, waiting and idle threads.
constexpr int kProfiledCalls = 5;

// One case and its variants (detail::variants_of): ka's implementations, then the references.
struct CaseState {
  SuiteCase c;
  std::vector<std::string> variants;
  std::vector<detail::VariantInfo> info;   // per variant; graphs' plans once checked
  double flop = 0.0;                       // per call; 0 when not counted
  // CPU GEMM cases, Note [Per-case FMA probes]: the FMA peak probed right before the case ran
  // (0: not probed; %peak then uses the run's first probe).
  double peak_gflops = 0.0;
  // Decode cases, likewise: the read bandwidth probed right before the case ran (0: not probed).
  double read_gbps = 0.0;
  // Graph cases, Note [Paired copy probes]: ka's fused bandwidth over the copy bandwidth probed
  // around each of its timing calls, and the probes' range.
  std::vector<double> paired_copy;
  double probe_low = 0.0;
  double probe_high = 0.0;
  detail::OpProfile op_profile;            // module cases: where ka's fused time went
  bool checked = false;                    // every ka variant was checked
  std::vector<Disposition> disposition;    // per variant, of the check
  std::vector<detail::CheckResult> check;  // per variant
  bool started = false;                    // a round ran; see Note [Interrupting a run]

  /// libtorch: timed, never checked (it is what the others are checked against).
  [[nodiscard]] bool is_reference(std::size_t v) const { return variants[v] == kImplLibtorch; }
};

// What one benchmark (one case, one variant) produced.
struct Outcome {
  std::size_t case_index = 0;
  std::size_t variant = 0;
  std::string impl;
  Disposition disposition = Disposition::kOk;
  std::string error;
  std::vector<double> per_call_ns;  // one value per round (repetition) that ran
  std::int64_t iterations = 0;      // the fewest calls a round made (each sizes its own)
  std::size_t rounds_reported = 0;  // rounds Google Benchmark reported, errors included
  bool written = false;             // summarised and stored
  profiler::Summary summary;
};

struct Session {
  BenchOptions options;
  Suite suite;
  std::vector<CaseState> cases;
  detail::CaseContext context;
  std::unique_ptr<detail::BenchCase> current;
  std::size_t current_index = SIZE_MAX;
  std::unique_ptr<db::ResultsStore> store;
  std::int64_t run_id = 0;
  double peak_gflops = 0.0;
  int graph_threads = 1;  // threads ka's graph runs use (--threads)
  double first_copy_gbps = 0.0;  // the copy bandwidth probed at the start
  // The streaming-read bandwidth from memory probed at the start (0: the run has no decode
  // case, or no memory for the probe's array, so no roofline).
  double read_gbps = 0.0;
  // The current graph case's copy probe, Note [Paired copy probes].
  std::unique_ptr<profiler::CopyProbe> probe;
  std::size_t probe_request = 0;               // the array bytes it was made for
  std::map<std::string, Outcome> outcomes;  // by benchmark name
  bool db_failed = false;
  std::size_t rows_stored = 0;
  int interrupt_signal = 0;  // the signal that stopped the run (Note [Interrupting a run])
  std::size_t reported_case = SIZE_MAX;  // the case a supervisor was last told of

  // Cases' tensors are built on first use and dropped when another case starts: the
  // benchmarks of a case's variants run back to back, so each case is built once.
  detail::BenchCase& materialize(std::size_t i) {
    if (current_index != i) {
      current.reset();
      current_index = SIZE_MAX;
      current = detail::make_bench_case(cases[i].c, kSeed + i, context);
      current_index = i;
      CaseState& cs = cases[i];
      for (std::size_t v = 0; v < cs.variants.size(); ++v) {
        if (cs.info[v].op.empty()) cs.info[v] = current->info(v);
      }
    }
    return *current;
  }

  std::string benchmark_name(std::size_t i, const std::string& impl) const {
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

// Skips a round of a case that had not started when the run was interrupted; a case already
// under way finishes its rounds. See Note [Interrupting a run].
bool skip_if_interrupted(benchmark::State& state, bool& started) {
  if (interrupted() && !started) {
    state.SkipWithError(kInterrupted);
    return true;
  }
  started = true;
  return false;
}

// Checks every variant of case i but libtorch (ka's, the peers') against libtorch, once, before
// the first is timed.
void ensure_checked(Session& s, std::size_t i) {
  CaseState& cs = s.cases[i];
  if (cs.checked) return;
  cs.checked = true;
  for (std::size_t v = 0; v < cs.variants.size(); ++v) {
    if (cs.is_reference(v)) continue;
    try {
      detail::BenchCase& b = s.materialize(i);
      cs.check[v] = b.check(v);
      cs.info[v] = b.info(v);
      if (!cs.check[v].correct) {
        cs.disposition[v] =
            cs.check[v].refused ? Disposition::kUnsupported : Disposition::kIncorrect;
      }
    } catch (const std::exception& e) {
      cs.disposition[v] = Disposition::kFailed;
      cs.check[v].detail = e.what();
    }
  }
}

void skip_with(benchmark::State& state, Disposition d, const std::string& why) {
  state.SkipWithError((error_label(d) + ": " + why).c_str());
}

// Note [Paired copy probes]
// This VM's copy bandwidth moves by up to 2x within a run (neighbours share the memory), so one
// probe at the start says little about the moment a case ran. Each timing call of a graph
// case's fused ka variant is bracketed by two copy probes (each the best of 2 copies of each of
// its three kinds) over arrays as large as the case's data (half its input + output bytes
// each, so a copy moves as many bytes as the op), and the call's bandwidth is quoted against
// their mean: a paired ratio, like ka/libtorch. The summary gives the median of these ratios,
// and the fused time against the best probe of the whole run beside it.

// The copy probe of graph case i sized to its data, or nullptr when it has none (an op case,
// a case whose bytes are unknown, or too little memory for the arrays).
profiler::CopyProbe* paired_probe(Session& s, std::size_t i) {
  const CaseState& cs = s.cases[i];
  const double bytes = cs.info.empty() ? 0.0 : cs.info[0].min_bytes;
  if (!cs.c.is_graph() || bytes <= 0.0) return nullptr;
  const auto half = static_cast<std::size_t>(bytes / 2.0);
  if (s.probe == nullptr || s.probe_request != half) {
    s.probe.reset();
    s.probe_request = half;
    try {
      s.probe = std::make_unique<profiler::CopyProbe>(s.graph_threads, half);
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }
  return s.probe.get();
}

// Note [Per-case FMA probes]
// The FMA peak probed once at the start drifted from the machine the cases met: on a shared
// host a run whose cases all slowed by 5-8% (ka and libtorch alike) quoted 1024^3 at 83% of
// that peak where the run before read 87%. Each CPU GEMM case now probes the peak (on the
// run's threads, best of three 30 ms loops) right before its first benchmark, and both its variants'
// %peak use that probe; the summary shows the range the probes spanned.
constexpr std::chrono::milliseconds kCaseProbe{30};

// The FMA peak %peak of case cs is quoted against.
double case_peak(const Session& s, const CaseState& cs) {
  return cs.peak_gflops > 0.0 ? cs.peak_gflops : s.peak_gflops;
}

// Note [Per-case read probes]
// Decode cases (M <= 16) are quoted against a roofline drawn with the streaming-read
// bandwidth, and that moves even more than the FMA peak: a run whose first probe read 13.3 GB/s
// while a neighbour was busy then quoted its decode cases at up to 270% of the roofline, read
// at 26-36 GB/s. So each decode case probes the bandwidth again right before its first
// benchmark (the median of 3 passes), and its %roof uses that probe; the summary gives the
// range the probes spanned.
// The probe reads an array the size of the case's B, and reads it hot, as the case does (every
// timed call reads the same B again). The run's first probe reads four times the L3, from
// memory; but a B that fits in a cache is read from there, and a roofline drawn from memory's
// bandwidth is then no bound at all: every library read such a B faster than it (figures in
// commit 7a309b3's body). Where B outgrows the caches the two probes agree.
bool is_decode(const SuiteCase& c) { return !c.is_graph() && c.m <= detail::kDecodeMaxM; }

// The read bandwidth of an array the size of case c's B, read hot (Note [Per-case read
// probes]); 0 when its memory cannot be had, so the run's first figure stands.
double probe_case_read(const Session& s, const SuiteCase& c) {
  try {
    detail::ReadProbe probe(s.options.threads, static_cast<std::size_t>(detail::b_bytes(c.k, c.n)));
    return probe.measure(3).gbytes_per_s;
  } catch (const std::bad_alloc&) {
    return 0.0;
  }
}

// The read bandwidth the roofline of decode case cs is drawn with.
double case_read_gbps(const Session& s, const CaseState& cs) {
  return cs.read_gbps > 0.0 ? cs.read_gbps : s.read_gbps;
}

// Tells a supervisor (ka-bench --isolate) that case i starts, once per case, after storing
// the benchmark before it: Google Benchmark reports a benchmark's runs before it starts the
// next, but the reporter stores them only when the next one reports, which a case that
// crashes never does.
void report_case_start(Session& s, std::size_t i) {
  detail::SupervisedRun* supervisor = detail::SupervisedRun::current();
  if (supervisor == nullptr || s.reported_case == i) return;
  s.reported_case = i;
  std::vector<std::string> names;
  for (const std::string& impl : s.cases[i].variants) names.push_back(s.benchmark_name(i, impl));
  supervisor->report_case(s.cases[i].c.name, names);
}

// Note [Quiet before a round]
// Other libraries' worker threads keep running after a call returns: OpenBLAS's (the pthread
// build libtorch uses here) spin-wait for up to 2^28 cycles, about 0.1 s
// (OPENBLAS_THREAD_TIMEOUT), and BLIS's and oneDNN's may too. In interleaved rounds the
// variant after libtorch or a peer would then share the cores with them (ka's
// hf_bert_layer_128 found OpenBLAS's threads busy for 106 ms after each of libtorch's rounds).
// So each round first waits until the process's other threads are idle:
// it sleeps in steps of kQuietStep until the process used less than a tenth of a step of CPU
// time during one (the sleeping caller uses none), for at most kQuietMax.
constexpr std::chrono::milliseconds kQuietStep{2};
constexpr std::chrono::milliseconds kQuietMax{300};

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void wait_until_quiet() {
  const double step = std::chrono::duration<double>(kQuietStep).count();
  for (auto waited = std::chrono::milliseconds{0}; waited < kQuietMax; waited += kQuietStep) {
    const double before = process_cpu_seconds();
    std::this_thread::sleep_for(kQuietStep);
    if (process_cpu_seconds() - before < 0.1 * step) return;
  }
}

// One round of variant v of case i. A ka or peer variant is timed only once its check against
// libtorch passed; every round's timed calls follow one untimed call (Note [Interleaved
// rounds]).
void bench_variant(benchmark::State& state, Session* s, std::size_t i, std::size_t v) {
  CaseState& cs = s->cases[i];
  if (skip_if_interrupted(state, cs.started)) return;
  report_case_start(*s, i);
  detail::BenchCase* b = nullptr;
  try {
    b = &s->materialize(i);
    if (!cs.is_reference(v)) {
      ensure_checked(*s, i);
      if (cs.disposition[v] != Disposition::kOk) {
        skip_with(state, cs.disposition[v], cs.check[v].detail);
        return;
      }
    }
  } catch (const std::exception& e) {
    skip_with(state, Disposition::kFailed, e.what());
    return;
  }
  if (cs.flop > 0.0 && cs.peak_gflops == 0.0 && s->peak_gflops > 0.0 &&
      s->context.device == DeviceType::kCPU) {
    cs.peak_gflops = profiler::measure_fma_peak(s->options.threads, kCaseProbe).gflops;
  }
  if (s->read_gbps > 0.0 && cs.read_gbps == 0.0 && is_decode(cs.c)) {
    cs.read_gbps = probe_case_read(*s, cs.c);
  }
  if (s->context.device == DeviceType::kCPU) wait_until_quiet();
  profiler::CopyProbe* probe = v == 0 ? paired_probe(*s, i) : nullptr;
  const double before = probe != nullptr ? probe->measure(2).gbytes_per_s : 0.0;
  try {
    if (Status st = b->run(v); !st) {  // the untimed call
      skip_with(state, Disposition::kUnsupported, st.reason());
      return;
    }
  } catch (const std::exception& e) {
    skip_with(state, Disposition::kFailed, e.what());
    return;
  }
  double seconds = 0.0;
  // On a GPU a call only enqueues its kernel: its time is the device's, between two events on
  // the stream both ka and libtorch use (Note [GPU cases]).
  std::unique_ptr<profiler::CudaEventTimer> events;
  try {
    if (s->context.device == DeviceType::kCUDA) events = std::make_unique<profiler::CudaEventTimer>();
  } catch (const std::exception& e) {
    skip_with(state, Disposition::kFailed, e.what());
    return;
  }
  for (auto _ : state) {
    const auto t0 = Clock::now();
    Status st = Status::ok();
    double dt = 0.0;
    try {
      if (events) events->start();
      st = b->run(v);
      if (events) dt = events->stop_ns() * 1e-9;
    } catch (const std::exception& e) {
      skip_with(state, Disposition::kFailed, e.what());
      break;
    }
    const auto t1 = Clock::now();
    if (!st) {
      skip_with(state, Disposition::kUnsupported, st.reason());
      break;
    }
    if (!events) dt = std::chrono::duration<double>(t1 - t0).count();
    seconds += dt;
    state.SetIterationTime(dt);
  }
  if (state.error_occurred() || state.iterations() == 0) return;
  if (v == 0 && cs.c.is_module() && cs.op_profile.rows.empty()) {
    cs.op_profile = b->profile_ops(kProfiledCalls);
  }
  if (probe == nullptr) return;
  const double after = probe->measure(2).gbytes_per_s;
  const double per_call = seconds / static_cast<double>(state.iterations());
  const double gbps = cs.info[0].min_bytes / per_call / 1e9;
  cs.paired_copy.push_back(gbps / (0.5 * (before + after)));
  const double low = std::min(before, after);
  const double high = std::max(before, after);
  cs.probe_low = cs.probe_low > 0.0 ? std::min(cs.probe_low, low) : low;
  cs.probe_high = std::max(cs.probe_high, high);
}

db::ResultRow make_row(const Session& s, const std::string& name, const Outcome& o) {
  const CaseState& cs = s.cases[o.case_index];
  const detail::VariantInfo& info = cs.info[o.variant];
  db::ResultRow r;
  r.suite = s.suite.name;
  r.case_name = cs.c.name;
  r.impl = o.impl;
  r.benchmark_name = name;
  r.op = info.op.empty() ? (cs.c.is_graph() ? "graph:" + cs.c.graph : cs.c.op) : info.op;
  r.shape_key = info.shape_key;
  r.m = cs.c.m;
  r.n = cs.c.n;
  r.k = cs.c.k;
  r.dtype = cs.c.dtype;
  r.kernel = info.kernel;
  r.kernel_version = info.kernel_version;
  r.config = info.config;
  if (!cs.is_reference(o.variant) && cs.checked &&
      cs.disposition[o.variant] != Disposition::kFailed) {
    r.max_abs_error = cs.check[o.variant].max_abs_error;
  }
  if (cs.flop > 0.0) r.flop = cs.flop;
  const double min_bytes = info.min_bytes > 0.0 ? info.min_bytes : detail::min_bytes_of(cs.c);
  if (min_bytes > 0.0) r.min_bytes = min_bytes;
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
    if (o.summary.median > 0.0 && cs.flop > 0.0) {
      r.gflops = cs.flop / o.summary.median;
      if (case_peak(s, cs) > 0.0) r.pct_peak = *r.gflops / case_peak(s, cs) * 100.0;
    }
  }
  return r;
}

// Collects every run for ka's own statistics and database rows, and forwards them to the
// reporter of what the user sees (a RoundsReporter over Google Benchmark's reporter of the
// chosen format). A variant is summarised and stored once its last round has been reported.
class CollectingReporter : public benchmark::BenchmarkReporter {
 public:
  CollectingReporter(Session& s, std::unique_ptr<benchmark::BenchmarkReporter> inner)
      : s_(s), inner_(std::move(inner)) {}

  bool ReportContext(const Context& context) override { return inner_->ReportContext(context); }

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration) continue;
      const std::string name = run.run_name.function_name;
      auto it = s_.outcomes.find(name);
      if (it == s_.outcomes.end()) continue;
      Outcome& o = it->second;
      if (run.error_occurred) {
        o.error = run.error_message;
        o.disposition = disposition_of_error(o.error);
      } else if (run.iterations > 0) {
        o.per_call_ns.push_back(run.real_accumulated_time / static_cast<double>(run.iterations) *
                                1e9);
        o.iterations = o.iterations > 0 ? std::min(o.iterations, run.iterations) : run.iterations;
      }
      if (++o.rounds_reported >= static_cast<std::size_t>(s_.options.repetitions)) {
        write_once(name, o);
      }
    }
    inner_->ReportRuns(runs);
  }

  /// Stores every variant that has reported rounds but not all of them (idempotent).
  void flush() {
    for (auto& [name, o] : s_.outcomes) {
      if (o.rounds_reported > 0) write_once(name, o);
    }
  }

  void Finalize() override {
    flush();
    inner_->Finalize();
  }

 private:
  void write_once(const std::string& name, Outcome& o) {
    if (o.written) return;
    o.written = true;
    if (o.disposition == Disposition::kOk && !o.per_call_ns.empty()) {
      o.summary = profiler::summarize(o.per_call_ns);
    }
    write(name, o);
  }

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
};

std::string flag_value(const std::vector<std::string>& flags, const std::string& name) {
  std::string value;
  const std::string prefix = "--" + name + "=";
  for (const auto& f : flags) {
    if (f.rfind(prefix, 0) == 0) value = f.substr(prefix.size());
  }
  return value;
}

std::string fmt_ms(double ns) { return fmt::format("{:.3f}", ns / 1e6); }

// The outcome of variant `impl` of case i, or nullptr when its benchmark did not run (filtered
// out, or never started because of an interrupt).
const Outcome* outcome_of(const Session& s, std::size_t i, const std::string& impl) {
  const auto it = s.outcomes.find(s.benchmark_name(i, impl));
  if (it == s.outcomes.end()) return nullptr;
  const Outcome& o = it->second;
  const bool ran =
      !o.per_call_ns.empty() || (o.disposition != Disposition::kOk && o.error != kInterrupted);
  return ran ? &o : nullptr;
}

bool timed(const Outcome* o) {
  return o != nullptr && o->disposition == Disposition::kOk && o->summary.median > 0;
}

// "-", the disposition, or the median in ms, right-aligned to `width`.
std::string time_cell(const Outcome* o, int width) {
  if (o == nullptr) return fmt::format("{:>{}}", "-", width);
  if (o->disposition != Disposition::kOk)
    return fmt::format("{:>{}}", error_label(o->disposition), width);
  return fmt::format("{:>{}}", fmt_ms(o->summary.median), width);
}

// Ratio `num / den` of two medians as "1.23x" (accumulated into a geometric mean), or "-".
std::string ratio_cell(const Outcome* num, const Outcome* den, double& log_sum, int& count) {
  if (!timed(num) || !timed(den)) return "-";
  const double r = num->summary.median / den->summary.median;
  log_sum += std::log(r);
  ++count;
  return fmt::format("{:.2f}x", r);
}

// The fastest timed reference of case i (libtorch or a peer; ka-kernel is ka itself) and its
// name, or nullptr.
const Outcome* best_reference(const Session& s, std::size_t i, std::string& name) {
  const Outcome* best = nullptr;
  for (const std::string& ref : s.context.references) {
    if (ref == detail::kImplKaKernel) continue;
    const Outcome* o = outcome_of(s, i, ref);
    if (timed(o) && (best == nullptr || o->summary.median < best->summary.median)) {
      best = o;
      name = ref;
    }
  }
  return best;
}

// What --vs names besides libtorch (the peer libraries, ka-kernel), in order: a time and a
// GFLOP/s column each in the summary.
std::vector<std::string> extra_columns_of(const Session& s) {
  std::vector<std::string> extras;
  for (const std::string& ref : s.context.references) {
    if (ref != kImplLibtorch) extras.push_back(ref);
  }
  return extras;
}

int extra_column_width(const std::string& impl) {
  return std::max(10, static_cast<int>(impl.size()) + 3);
}

// The GEMM summary's column titles.
std::string gemm_summary_head(const std::vector<std::string>& extras, bool with_lt,
                              bool with_best) {
  std::string head = fmt::format("{:<28} {:>6} {:>6} {:>6} | {:>10} {:>9} {:>6}", "case", "M", "K",
                                 "N", "ka ms", "GFLOP/s", "%peak");
  if (with_lt) head += fmt::format(" | {:>10} {:>9} {:>6}", "libtorch ms", "GFLOP/s", "%peak");
  for (const std::string& e : extras) {
    head += fmt::format(" | {:>{}} {:>9}", e + " ms", extra_column_width(e), "GFLOP/s");
  }
  if (with_lt) head += fmt::format(" | {:>8}", "ka/lt");
  if (with_best) head += fmt::format(" | {:>8} {}", "ka/best", "best");
  return head;
}

// The range of the per-case FMA probes %peak was quoted against.
void print_peak_probe_range(const Session& s, std::FILE* out) {
  double low = 0.0;
  double high = 0.0;
  for (const CaseState& cs : s.cases) {
    if (cs.peak_gflops <= 0.0) continue;
    low = low > 0.0 ? std::min(low, cs.peak_gflops) : cs.peak_gflops;
    high = std::max(high, cs.peak_gflops);
  }
  if (high > 0.0) {
    fmt::print(out, "(%peak: GFLOP/s over the FMA peak probed right before each case; the probes "
                    "ranged {:.1f} to {:.1f} GFLOP/s)\n",
               low, high);
  }
}

void print_gemm_summary(const Session& s, std::FILE* out) {
  const auto& refs = s.context.references;
  const bool with_lt = std::find(refs.begin(), refs.end(), kImplLibtorch) != refs.end();
  const std::vector<std::string> extras = extra_columns_of(s);
  // ka/best says more than ka/lt only when a peer library is timed too.
  const bool with_best = std::any_of(refs.begin(), refs.end(), detail::is_peer);
  fmt::print(out, "{}\n", gemm_summary_head(extras, with_lt, with_best));
  double log_sum = 0.0;
  int ratios = 0;
  double best_log_sum = 0.0;
  int best_ratios = 0;
  for (std::size_t i = 0; i < s.cases.size(); ++i) {
    const CaseState& cs = s.cases[i];
    if (cs.c.is_graph()) continue;
    const Outcome* ko = outcome_of(s, i, kImplKa);
    const bool any_ref = std::any_of(refs.begin(), refs.end(), [&](const std::string& r) {
      return outcome_of(s, i, r) != nullptr;
    });
    if (ko == nullptr && !any_ref) continue;
    auto cells = [&](const Outcome* o) -> std::string {
      if (o == nullptr) return fmt::format("{:>10} {:>9} {:>6}", "-", "-", "-");
      if (o->disposition != Disposition::kOk) {
        return fmt::format("{:>28}", error_label(o->disposition));
      }
      const double gflops = o->summary.median > 0 ? cs.flop / o->summary.median : 0.0;
      const double pct = case_peak(s, cs) > 0 ? gflops / case_peak(s, cs) * 100.0 : 0.0;
      return fmt::format("{:>10} {:>9.1f} {:>5.1f}%", fmt_ms(o->summary.median), gflops, pct);
    };
    std::string row = fmt::format("{:<28} {:>6} {:>6} {:>6} | {}", cs.c.name, cs.c.m, cs.c.k,
                                  cs.c.n, cells(ko));
    const Outcome* lo = outcome_of(s, i, kImplLibtorch);
    if (with_lt) row += " | " + cells(lo);
    for (const std::string& e : extras) {
      const Outcome* po = outcome_of(s, i, e);
      const int width = extra_column_width(e);
      if (!timed(po)) {
        row += fmt::format(" | {} {:>9}", time_cell(po, width), "-");
      } else {
        row += fmt::format(" | {:>{}} {:>9.1f}", fmt_ms(po->summary.median), width,
                           cs.flop / po->summary.median);
      }
    }
    if (with_lt) row += fmt::format(" | {:>8}", ratio_cell(lo, ko, log_sum, ratios));
    if (with_best) {
      std::string best_name;
      const Outcome* best = best_reference(s, i, best_name);
      row += fmt::format(" | {:>8} {}", ratio_cell(best, ko, best_log_sum, best_ratios),
                         best == nullptr ? "-" : best_name);
    }
    fmt::print(out, "{}\n", row);
  }
  if (ratios > 0) {
    fmt::print(out, "geometric mean of ka/libtorch throughput over {} cases: {:.2f}x  "
                    "(ka/lt = libtorch time / ka time; > 1 means ka is faster)\n",
               ratios, std::exp(log_sum / ratios));
  }
  if (best_ratios > 0) {
    std::string names;
    for (const std::string& r : refs) {
      if (r != detail::kImplKaKernel) names += (names.empty() ? "" : ", ") + r;
    }
    fmt::print(out, "geometric mean of ka/best over {} cases: {:.2f}x  (ka/best = the fastest "
                    "reference's time / ka time, of {}; best names it; > 1 means ka is faster "
                    "than all of them)\n",
               best_ratios, std::exp(best_log_sum / best_ratios), names);
  }
  print_peak_probe_range(s, out);
}

// Decode cases (M <= 16) against their roofline: they are bound by reading B once.
void print_decode_summary(const Session& s, std::FILE* out) {
  std::vector<std::string> impls = {kImplKa};
  impls.insert(impls.end(), s.context.references.begin(), s.context.references.end());
  auto width = [](const std::string& impl) {
    return std::max(8, static_cast<int>(impl.size()) + 5);
  };
  std::string head = fmt::format("{:<28} {:>6} {:>6} {:>6} | {:>9} {:>9}", "decode case", "M",
                                 "K", "N", "read GB/s", "roof GF/s");
  for (const std::string& impl : impls) {
    head += fmt::format(" | {:>{}} {:>6}", impl + " GB/s", width(impl), "%roof");
  }
  fmt::print(out, "\n{}\n", head);
  for (std::size_t i = 0; i < s.cases.size(); ++i) {
    const CaseState& cs = s.cases[i];
    const bool ran = std::any_of(impls.begin(), impls.end(), [&](const std::string& impl) {
      return outcome_of(s, i, impl) != nullptr;
    });
    if (!is_decode(cs.c) || !ran) continue;
    const double read = case_read_gbps(s, cs);
    const double roof = detail::decode_roofline_gflops(case_peak(s, cs), read, cs.c.m);
    std::string row = fmt::format("{:<28} {:>6} {:>6} {:>6} | {:>9.1f} {:>9.1f}", cs.c.name,
                                  cs.c.m, cs.c.k, cs.c.n, read, roof);
    for (const std::string& impl : impls) {
      const Outcome* o = outcome_of(s, i, impl);
      if (!timed(o)) {
        row += fmt::format(" | {} {:>6}", time_cell(o, width(impl)), "-");
        continue;
      }
      const double gbps = detail::b_bytes(cs.c.k, cs.c.n) / o->summary.median;
      const double pct = roof > 0.0 ? cs.flop / o->summary.median / roof * 100.0 : 0.0;
      row += fmt::format(" | {:>{}.1f} {:>5.1f}%", gbps, width(impl), pct);
    }
    fmt::print(out, "{}\n", row);
  }
  double low = s.read_gbps;
  double high = s.read_gbps;
  for (const CaseState& cs : s.cases) {
    if (cs.read_gbps <= 0.0) continue;
    low = std::min(low, cs.read_gbps);
    high = std::max(high, cs.read_gbps);
  }
  fmt::print(out, "(decode cases: GB/s = bytes of B (4*K*N) / median time; %roof = GFLOP/s over "
                  "the roofline min(FMA peak, read bandwidth x M/2 FLOP per byte of B), both "
                  "probed right before the case, read GB/s over an array the size of its B read "
                  "hot; the read probes ranged {:.1f} to {:.1f} GB/s)\n",
             low, high);
}

void print_graph_summary(const Session& s, std::FILE* out) {
  // Each case's %copy is the median of its paired ratios (Note [Paired copy probes]); %best
  // quotes the same time against the best probe of the whole run, which no case is flattered by.
  double copy_best = s.first_copy_gbps;
  double copy_worst = s.first_copy_gbps;
  for (const CaseState& cs : s.cases) {
    if (cs.probe_high <= 0.0) continue;
    copy_best = std::max(copy_best, cs.probe_high);
    copy_worst = copy_worst > 0.0 ? std::min(copy_worst, cs.probe_low) : cs.probe_low;
  }
  fmt::print(out, "{:<24} {:<22} | {:>10} {:>7} {:>6} {:>6} | {:>10} | {:>11} | {:>8} | {:>8}\n",
             "case", "graph", "ka ms", "GB/s", "%copy", "%best", "unfused ms", "libtorch ms",
             "fusion", "ka/lt");
  double fusion_log = 0.0;
  double lt_log = 0.0;
  int fusion_n = 0;
  int lt_n = 0;
  for (std::size_t i = 0; i < s.cases.size(); ++i) {
    const CaseState& cs = s.cases[i];
    if (!cs.c.is_graph()) continue;
    const Outcome* fused = outcome_of(s, i, kImplKa);
    const Outcome* unfused = outcome_of(s, i, kImplKaUnfused);
    const Outcome* lt = outcome_of(s, i, kImplLibtorch);
    if (fused == nullptr && unfused == nullptr && lt == nullptr) continue;
    const std::string speedup = ratio_cell(unfused, fused, fusion_log, fusion_n);
    const std::string ratio = ratio_cell(lt, fused, lt_log, lt_n);
    std::string bandwidth = fmt::format("{:>7} {:>6} {:>6}", "-", "-", "-");
    const double bytes = cs.info.empty() ? 0.0 : cs.info[0].min_bytes;
    if (timed(fused) && bytes > 0.0) {
      const double gbps = bytes / fused->summary.median;
      const std::string paired =
          cs.paired_copy.empty()
              ? std::string("-")
              : fmt::format("{:.1f}%", profiler::summarize(cs.paired_copy).median * 100.0);
      bandwidth = fmt::format("{:>7.1f} {:>6} {:>5.1f}%", gbps, paired,
                              copy_best > 0 ? gbps / copy_best * 100.0 : 0.0);
    }
    fmt::print(out, "{:<24} {:<22} | {} {} | {} | {} | {:>8} | {:>8}\n", cs.c.name, cs.c.graph,
               time_cell(fused, 10), bandwidth, time_cell(unfused, 10), time_cell(lt, 11), speedup,
               ratio);
  }
  fmt::print(out,
             "(ka ms = ka with fusion; GB/s = (input + output bytes) / ka time; %copy = median "
             "over ka's timing calls of their GB/s over the copy bandwidth probed right before "
             "and after each (probes ranged {:.1f} to {:.1f} GB/s); %best = GB/s over the best "
             "probe of the run, {:.1f} GB/s; fusion = unfused time / fused time; ka/lt = "
             "libtorch time / ka fused time; > 1 means faster)\n",
             copy_worst, copy_best, copy_best);
  if (fusion_n > 0) {
    fmt::print(out, "geometric mean of the fusion speed-up over {} cases: {:.2f}x\n", fusion_n,
               std::exp(fusion_log / fusion_n));
  }
  if (lt_n > 0) {
    fmt::print(out, "geometric mean of ka (fused)/libtorch throughput over {} cases: {:.2f}x\n",
               lt_n, std::exp(lt_log / lt_n));
  }
}

// Module cases: where ka's fused time goes, per operator and shapes (Note [Per-operator
// profile]).
void print_op_profiles(const Session& s, std::FILE* out) {
  for (const CaseState& cs : s.cases) {
    const detail::OpProfile& p = cs.op_profile;
    if (p.rows.empty()) continue;
    double busy = 0.0;
    for (const auto& r : p.rows) busy += r.busy_ns;
    fmt::print(out,
               "\n{}: per operator, ka fused, mean of {} profiled calls: {:.3f} ms wall per call, "
               "{:.3f} ms of busy time (summed over threads)\n",
               cs.c.name, p.graph_calls, p.wall_ns * 1e-6, busy * 1e-6);
    fmt::print(out, "{:<48} {:<44} {:>5} {:<8} {:>9} {:>6}\n", "operator", "shapes", "calls",
               "served", "busy ms", "share");
    for (const auto& r : p.rows) {
      std::string shapes = r.shapes;
      if (shapes.size() > 44) shapes = shapes.substr(0, 41) + "...";
      fmt::print(out, "{:<48} {:<44} {:>5} {:<8} {:>9.3f} {:>5.1f}%\n", r.op, shapes, r.calls,
                 r.served, r.busy_ns * 1e-6, busy > 0 ? r.busy_ns / busy * 100.0 : 0.0);
    }
  }
}

void print_summary(const Session& s, std::FILE* out) {
  const std::string where = s.context.device == DeviceType::kCUDA
                                ? std::string("CUDA device 0, device time by CUDA events")
                                : fmt::format("{} threads", s.options.threads);
  fmt::print(out,
             "\nka-bench summary: suite '{}', {}, hot cache; time = median over "
             "repetitions of the mean per-call time\n",
             s.suite.name, where);
  const bool any_gemm = std::any_of(s.cases.begin(), s.cases.end(),
                                    [](const CaseState& cs) { return !cs.c.is_graph(); });
  const bool any_graph = std::any_of(s.cases.begin(), s.cases.end(),
                                     [](const CaseState& cs) { return cs.c.is_graph(); });
  if (any_gemm) print_gemm_summary(s, out);
  if (any_gemm && s.read_gbps > 0.0) print_decode_summary(s, out);
  if (any_gemm && any_graph) fmt::print(out, "\n");
  if (any_graph) print_graph_summary(s, out);
  if (any_graph) print_op_profiles(s, out);
  for (std::size_t i = 0; i < s.cases.size(); ++i) {
    const CaseState& cs = s.cases[i];
    if (!cs.checked) continue;
    for (std::size_t v = 0; v < cs.variants.size(); ++v) {
      if (cs.is_reference(v) || cs.disposition[v] == Disposition::kOk) continue;
      fmt::print(out, "{}: {}: {}\n", s.benchmark_name(i, cs.variants[v]),
                 cs.disposition[v] == Disposition::kIncorrect ? "INCORRECT" : "not timed",
                 cs.check[v].detail);
    }
  }
}

// What a run compares ka with: libtorch (always the correctness reference) and its BLAS, and
// the peer libraries --vs names.
struct References {
  detail::BlasInfo blas;
  std::vector<std::string> peers;         // in --vs order
  std::vector<detail::PeerInfo> peer_info;  // likewise
};

// Sets libtorch's (and OpenBLAS's) threads, loads the peers of --vs and sets theirs (Note [Peer
// threads]); fills what cases share. Throws ka::ValueError for a bad --vs, a missing library,
// or peers on a GPU run, before anything is measured.
References setup_references(const BenchOptions& options, detail::CaseContext& context) {
  const int threads = options.threads;
  References r;
  context.references = detail::parse_references(options.references);
  for (const std::string& name : context.references) {
    if (!detail::is_peer(name)) continue;
    KA_CHECK(options.device == "cpu", "--vs ", name, ": the peer libraries run on the CPU; ",
             "with --device cuda use --vs libtorch");
    detail::PeerLibrary& lib = detail::peer_library(name);
    lib.set_threads(threads);
    r.peers.push_back(name);
    r.peer_info.push_back(lib.info());
  }
  detail::set_libtorch_threads(threads);
  detail::set_openblas_threads(threads);
  r.blas = detail::blas_info();
  context.threads = threads;
  context.libtorch_gemm_kernel = r.blas.core.empty()
                                     ? "at::addmm_out (BLAS: unknown)"
                                     : "at::addmm_out (OpenBLAS " + r.blas.core + ")";
  if (options.device == "cuda") {
    context.device = DeviceType::kCUDA;
    context.libtorch_gemm_kernel = detail::cuda_bench_device().libtorch_gemm_kernel;
  }
  return r;
}

// "; WARNING: ..." when `library` runs kernels older than the CPU's (Note [Kernels older than
// the CPU]); under --isa the restriction's own line says what each library runs instead.
std::string older_kernels_note(const std::string& library, const std::string& core) {
  if (std::getenv(detail::kIsaMarker) != nullptr) return "";
  const std::string warning = detail::older_kernels_warning(library, core, cpu_isa_level());
  return warning.empty() ? "" : "; " + warning;
}

// One header line per peer library: what it is, the kernels it picked, its threads.
void print_peers(const References& refs, std::FILE* out) {
  for (std::size_t p = 0; p < refs.peers.size(); ++p) {
    const detail::PeerInfo& info = refs.peer_info[p];
    fmt::print(out, "peer {}: {}{}; {}, {} thread(s) by {}; checked against libtorch like ka{}\n",
               refs.peers[p], info.kernel(), info.detail.empty() ? "" : " (" + info.detail + ")",
               info.library, info.threads, info.threads_by,
               older_kernels_note(refs.peers[p], info.core));
  }
}

// The --isa line: what was set before the libraries loaded (Note [--isa]), what each library
// reports it runs, and any that does not run what was asked.
void print_isa_restriction(const std::string& isa, const References& refs, std::FILE* out) {
  const detail::IsaRestriction r = detail::isa_restriction(isa, cpu_isa_level());
  std::string set;
  for (const char* var :
       {"KA_CPU_ISA", "OPENBLAS_CORETYPE", "ONEDNN_MAX_CPU_ISA", "BLIS_ARCH_TYPE"}) {
    if (const char* value = std::getenv(var)) set += fmt::format(" {}={}", var, value);
  }
  std::vector<std::pair<std::string, std::string>> runs = {{"ka", kernels::gemm_cpu_isa()},
                                                           {kImplLibtorch, refs.blas.core}};
  for (std::size_t p = 0; p < refs.peers.size(); ++p) {
    runs.emplace_back(refs.peers[p], refs.peer_info[p].core);
  }
  std::string running;
  std::string astray;
  for (const auto& [library, core] : runs) {
    running += fmt::format("{}{} {}", running.empty() ? "" : ", ", library, core);
    if (core != r.expected_core(library)) {
      astray += fmt::format("; WARNING: {} runs {}, not {}", library, core,
                            r.expected_core(library));
    }
  }
  // The FMA probe (profiler) runs the CPU's widest loop whatever --isa says.
  fmt::print(out, "ISA restriction (--isa {}):{}, set before any library loaded; running: {}{}; "
                  "%peak stays against the CPU's widest FMA loop\n",
             isa, set, running, astray);
}

// One "correctness:" line per kind of criterion the suite's cases use.
void print_correctness(const Suite& suite, std::FILE* out) {
  std::vector<std::string> seen;
  for (const SuiteCase& c : suite.cases) {
    const std::string text = detail::tolerance_text(c);
    if (std::find(seen.begin(), seen.end(), text) != seen.end()) continue;
    seen.push_back(text);
    fmt::print(out, "correctness: ka checked against libtorch before timing, {}{}\n", text,
               c.is_graph() ? " (graph cases)" : "");
  }
}

std::string join_ints(const std::vector<int>& v, const char* sep) {
  std::string s;
  for (const int x : v) s += (s.empty() ? "" : sep) + std::to_string(x);
  return s;
}

std::string case_heading(const SuiteCase& c) {
  if (!c.is_graph()) {
    return fmt::format("{}: {} M={} K={} N={} ({})", c.name, c.op, c.m, c.k, c.n, c.model);
  }
  std::string inputs;
  for_each_input_leaf(c.inputs, [&](const GraphInput& in) {
    if (in.value) {
      inputs += fmt::format("{}{}={}", inputs.empty() ? "" : " ", in.name, to_string(*in.value));
      return;
    }
    std::string dims;
    for (const auto d : in.shape) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    std::string kind = in.fill == InputFill::kRandn ? "" : std::string("/") + to_string(in.fill);
    if (!is_integer(in.dtype) && in.dtype != InputDtype::kFloat32) {
      kind += std::string("/") + to_string(in.dtype);
    }
    if (is_integer(in.dtype)) {
      kind = fmt::format("/{} in [{}, {})", to_string(in.dtype), in.low, in.high);
    }
    inputs += fmt::format("{}{}=[{}]{}", inputs.empty() ? "" : " ", in.name, dims, kind);
  });
  return fmt::format("{}: {} {} ({}); inputs {}", c.name, c.is_module() ? "model" : "graph",
                     c.is_module() ? c.module_file : c.graph, c.model, inputs);
}

// Note [--breakdown]
// --breakdown times ka's whole pipeline per case and splits each call into its stages from the
// profiler's spans: "call" wraps one call as the ka variant makes it (op cases: ka's
// dispatcher's addmm.out / mm.out, typed, into a preallocated output; graph cases: a fused
// graph run), "extract", "execute" and "fallback" (libtorch's kernel for a node ka does not
// serve) are recorded inside it by the extractor. The stages nest: a node ka refuses within a
// fused segment runs its fallback inside "extract", and a fallback that reads data first
// drains the tasks before it ("execute" inside "extract"). Each stage is charged its exclusive
// time on the calling thread, its spans less the stage spans within them, so other = call -
// extract - execute - fallback: ka's dispatcher and argument boxing for op cases; walking the
// lowered graph and freeing its tensors for graph cases. Op cases then make as many calls of
// the bare kernel (the ka-kernel variant, "kernel" spans), so pipeline = call - kernel is what
// going through ka costs over calling its kernel. Each case runs a few warm-up calls, then
// calls until ~0.3 s (at most 2000), and reports the mean per call of each stage over those
// calls.
// One case's --breakdown: per-call means of its spans (ns), NaN where not measured.
struct BreakdownRow {
  int calls = 0;
  double call_ns = 0.0;
  double extract_ns = 0.0;
  double execute_ns = 0.0;
  double fallback_ns = 0.0;
  double kernel_ns = std::numeric_limits<double>::quiet_NaN();  ///< ka-kernel; op cases only
  double cpu_ns = std::numeric_limits<double>::quiet_NaN();     ///< calling thread's task-clock
  double ipc = std::numeric_limits<double>::quiet_NaN();
};

// Sums, over several start/stop windows, the calling thread's counters.
struct CounterTally {
  std::uint64_t task_clock = 0, cycles = 0, instructions = 0;
  bool has_task_clock = true, has_cycles = true, has_instructions = true;
  void add(const profiler::PerfCounters& counters) {
    const auto take = [&](profiler::PerfEvent e, std::uint64_t& sum, bool& has) {
      const auto v = counters.read(e);
      has = has && v.available;
      sum += v.value;
    };
    take(profiler::PerfEvent::kTaskClock, task_clock, has_task_clock);
    take(profiler::PerfEvent::kCycles, cycles, has_cycles);
    take(profiler::PerfEvent::kInstructions, instructions, has_instructions);
  }
};

// Per span name, the time of the spans that started at or after since_ns; for the stages
// within a call, their exclusive time (Note [--breakdown]): each span less the stage spans
// nested in it on its thread. "call" and other names are kept whole.
std::map<std::string, double> stage_totals_ns(const std::vector<profiler::Span>& spans,
                                              std::int64_t since_ns) {
  static const std::set<std::string> stages = {"call", "extract", "execute", "fallback"};
  std::map<std::string, double> total;
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<const profiler::Span*>> threads;
  for (const profiler::Span& sp : spans) {
    if (sp.start_ns < since_ns) continue;
    if (stages.count(sp.name) != 0) {
      threads[{sp.process, sp.track}].push_back(&sp);
    } else {
      total[sp.name] += static_cast<double>(sp.duration_ns());
    }
  }
  for (auto& [thread, list] : threads) {
    // Outer spans first where two start together: they are the ones nested in.
    std::sort(list.begin(), list.end(), [](const profiler::Span* a, const profiler::Span* b) {
      return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->depth < b->depth;
    });
    std::vector<const profiler::Span*> open;
    for (const profiler::Span* sp : list) {
      while (!open.empty() && open.back()->end_ns <= sp->start_ns) open.pop_back();
      const auto ns = static_cast<double>(sp->duration_ns());
      total[sp->name] += ns;
      if (!open.empty() && open.back()->name != "call") total[open.back()->name] -= ns;
      open.push_back(sp);
    }
  }
  return total;
}

// Warms the case up, then alternates a pipeline call (counted by `counters`) and, for op
// cases, a bare-kernel call, so that drift affects both alike, until ~0.3 s or 2000 calls.
BreakdownRow measure_breakdown(detail::BenchCase& b, profiler::PerfCounters& counters) {
  auto& rec = profiler::SpanRecorder::global();
  for (int w = 0; w < 3; ++w) b.run_pipeline();
  bool kernel_ran = b.run_kernel();
  // With --trace the recorder is already on and keeps everything; otherwise it is on for
  // this case only. Either way only this case's spans are summed.
  const bool tracing = rec.enabled();
  if (!tracing) rec.clear();
  rec.set_enabled(true);
  const std::int64_t since_ns = profiler::now_ns();
  const auto start = std::chrono::steady_clock::now();
  CounterTally tally;
  BreakdownRow r;
  while (r.calls < 2000 &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 0.3) {
    counters.start();
    b.run_pipeline();
    counters.stop();
    tally.add(counters);
    ++r.calls;
    if (kernel_ran) kernel_ran = b.run_kernel();
  }
  std::map<std::string, double> total = stage_totals_ns(rec.collect(), since_ns);
  if (!tracing) {
    rec.set_enabled(false);
    rec.clear();
  }
  const double calls = r.calls;
  r.call_ns = total["call"] / calls;
  r.extract_ns = total["extract"] / calls;
  r.execute_ns = total["execute"] / calls;
  r.fallback_ns = total["fallback"] / calls;
  if (kernel_ran) r.kernel_ns = total["kernel"] / calls;
  if (tally.has_task_clock) r.cpu_ns = static_cast<double>(tally.task_clock) / calls;
  if (tally.has_cycles && tally.has_instructions && tally.cycles > 0) {
    r.ipc = static_cast<double>(tally.instructions) / static_cast<double>(tally.cycles);
  }
  return r;
}

int breakdown_suite(const BenchOptions& options, const Suite& suite,
                    const detail::CaseContext& context) {
  const std::regex filter_re = detail::case_filter(
      flag_value(options.benchmark_flags, "benchmark_filter"), "--benchmark_filter");
  fmt::print("ka-bench {} --breakdown: suite '{}'; per call, mean over the calls made (hot "
             "cache); each stage's own time, less the stages within it; fallback = libtorch's "
             "kernels for the nodes ka does not serve; other = call - extract - execute - "
             "fallback (op cases: ka's dispatcher and boxing; graphs: walking the lowered graph "
             "and freeing tensors); kernel = ka's kernel called directly (ka-kernel), "
             "pipeline = call - kernel\n",
             KA_VERSION, suite.name);
  fmt::print("{:<28} {:>7} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>9} {:>12} {:>6}\n",
             "case", "calls", "call", "other", "extract", "execute", "fallback", "kernel",
             "pipeline", "overhead", "cpu/call", "IPC");
  // perf_event counters of the calling thread (pool workers not included); a VM may refuse
  // the hardware ones, which then read n/a (the reason is printed below).
  profiler::PerfCounters counters;
  int shown = 0;
  bool all_ok = true;
  for (std::size_t i = 0; i < suite.cases.size(); ++i) {
    const SuiteCase& c = suite.cases[i];
    if (!std::regex_search(suite.name + "/" + c.name + "/ka", filter_re)) continue;
    ++shown;
    try {
      auto b = detail::make_bench_case(c, kSeed + i, context);
      const BreakdownRow r = measure_breakdown(*b, counters);
      const double kernels = r.execute_ns + r.fallback_ns;
      const double dispatch = std::max(0.0, r.call_ns - r.extract_ns - kernels);
      const auto or_dash = [](double ns) {
        return std::isnan(ns) ? std::string("-") : profiler::format_duration_ns(ns);
      };
      fmt::print("{:<28} {:>7} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>8.1f}% {:>12} "
                 "{:>6}\n",
                 c.name, r.calls, profiler::format_duration_ns(r.call_ns),
                 profiler::format_duration_ns(dispatch), profiler::format_duration_ns(r.extract_ns),
                 profiler::format_duration_ns(r.execute_ns),
                 profiler::format_duration_ns(r.fallback_ns), or_dash(r.kernel_ns),
                 or_dash(r.call_ns - r.kernel_ns),
                 r.call_ns > 0 ? 100.0 * (r.call_ns - kernels) / r.call_ns : 0.0,
                 or_dash(r.cpu_ns), std::isnan(r.ipc) ? std::string("n/a") : fmt::format("{:.2f}", r.ipc));
    } catch (const std::exception& e) {
      fmt::print("{:<28} FAILED: {}\n", c.name, e.what());
      all_ok = false;
    }
  }
  fmt::print("(overhead = (call - execute - fallback) / call: the share of a call not spent "
             "running kernels, ka's or libtorch's; "
             "cpu/call = the calling thread's task-clock per call, IPC = instructions/cycles of "
             "that thread, perf_event)\n");
  for (const auto& v : counters.read()) {
    if (!v.available) fmt::print("  {}\n", v.str());
  }
  std::fflush(stdout);
  KA_CHECK(shown > 0, "no case matched --benchmark_filter");
  return all_ok ? 0 : 1;
}

// Note [--explain]
// --explain runs each case's ka variants once, checks them against libtorch and prints what
// ran: for graphs, the extractor's plan (fusion groups, kernels, configs with provenance,
// dependencies); for GEMMs, the kernel and configuration. It times nothing and writes no
// database: a plan is a property of the shapes, and a benchmark run stores its kernels and
// configs anyway. --benchmark_filter=REGEX selects the cases with a benchmark name
// (suite/case/variant) it matches, as in a benchmark run. The peer libraries of --vs are
// checked the same way. Exit 1 when a ka or peer variant failed or was incorrect.
int explain_suite(const BenchOptions& options, const Suite& suite, const std::string& path,
                  const detail::CaseContext& context) {
  const std::regex filter_re = detail::case_filter(
      flag_value(options.benchmark_flags, "benchmark_filter"), "--benchmark_filter");
  fmt::print(
      "ka-bench {} --explain: suite '{}' ({} cases) from {}; {} thread(s); each ka variant "
      "runs once and is checked against libtorch; nothing is timed or stored\n",
      KA_VERSION, suite.name, suite.cases.size(), path, options.threads);
  bool all_ok = true;
  int explained = 0;
  for (std::size_t i = 0; i < suite.cases.size(); ++i) {
    const SuiteCase& c = suite.cases[i];
    const auto variants = detail::variants_of(c, context.references);
    if (std::none_of(variants.begin(), variants.end(), [&](const std::string& v) {
          return std::regex_search(suite.name + "/" + c.name + "/" + v, filter_re);
        })) {
      continue;
    }
    ++explained;
    fmt::print("\n{}\n", case_heading(c));
    std::unique_ptr<detail::BenchCase> b;
    try {
      b = detail::make_bench_case(c, kSeed + i, context);
    } catch (const std::exception& e) {
      fmt::print("  FAILED: {}\n", e.what());
      all_ok = false;
      continue;
    }
    for (std::size_t v = 0; v < variants.size(); ++v) {
      if (variants[v] == kImplLibtorch) continue;
      detail::CheckResult r;
      try {
        r = b->check(v);
      } catch (const std::exception& e) {
        fmt::print("  {}: FAILED: {}\n", variants[v], e.what());
        all_ok = false;
        continue;
      }
      std::string verdict;
      if (r.correct) {
        verdict = fmt::format("correct (max abs error {:.3g})", r.max_abs_error);
      } else if (r.refused) {
        verdict = "UNSUPPORTED: " + r.detail;
      } else {
        verdict = "INCORRECT: " + r.detail;
        all_ok = false;
      }
      const detail::VariantInfo info = b->info(v);
      if (detail::is_peer(variants[v])) {
        fmt::print("  {}: {} ({}); {}\n", variants[v], info.kernel, info.config, verdict);
        continue;
      }
      if (info.tasks.empty()) {
        fmt::print("  {}: kernel {} v{}, shape key {}, config {}, provenance {}; {}\n", variants[v],
                   info.kernel, info.kernel_version, info.shape_key, info.config, info.provenance,
                   verdict);
        continue;
      }
      fmt::print("  {}: {} task(s); {}\n", variants[v], info.tasks.size(), verdict);
      for (const detail::TaskInfo& t : info.tasks) {
        if (t.provenance == db::Provenance::kFallback) {
          fmt::print("    #{} {}  nodes [{}]  on {}: {}; {}\n", t.id, t.pattern,
                     join_ints(t.nodes, ", "), t.kernel, t.fallback, t.config);
          continue;
        }
        fmt::print("    #{} {}  nodes [{}]{}\n", t.id, t.pattern, join_ints(t.nodes, ", "),
                   t.fusion.empty() ? "" : "  fusion: " + t.fusion);
        fmt::print("       kernel {} v{} on {}, shape key {}, config {}, provenance {}, after {}\n",
                   t.kernel, t.kernel_version, t.device, t.shape_key, t.config, db::to_string(t.provenance),
                   t.after.empty() ? "-" : "#" + join_ints(t.after, ", #"));
      }
    }
    const auto lt = std::find(variants.begin(), variants.end(), kImplLibtorch);
    fmt::print("  {}: {}\n", kImplLibtorch,
               lt != variants.end()
                   ? b->info(static_cast<std::size_t>(lt - variants.begin())).kernel
                   : context.libtorch_gemm_kernel + " (the reference only)");
  }
  std::fflush(stdout);
  KA_CHECK(explained > 0, "no case matched --benchmark_filter");
  return all_ok ? 0 : 1;
}

}  // namespace

namespace {
// Throws ka::IoError naming `option` and `path` unless a byte can be written there, so that an
// output that cannot be written fails the run before anything is measured. The byte is
// flushed: a full device (/dev/full) only fails then.
void check_writable(const char* option, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  const bool ok = f != nullptr && std::fputc('\n', f) != EOF && std::fflush(f) == 0;
  const int error = errno;
  if (f != nullptr) std::fclose(f);
  KA_CHECK_TYPE(IoError, ok, option, ": cannot write '", path, "': ", std::strerror(error));
}

// Google Benchmark opens --benchmark_out itself and does not report a failed write: checked
// before the run (check_writable) and after it (something must have been written).
void check_benchmark_out_written(const BenchOptions& options, std::size_t ran) {
  const std::string path = flag_value(options.benchmark_flags, "benchmark_out");
  if (path.empty() || ran == 0) return;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return;  // a pipe or device: nothing to see
  KA_CHECK_TYPE(IoError, std::filesystem::file_size(path, ec) > 1 && !ec,
                "--benchmark_out: nothing was written to '", path, "'");
}

// Note [--trace]
// With --trace, the global span recorder is on for the whole run, and a CUPTI profiler runs
// alongside when this build has CUPTI and a GPU answers; at the end GPU activity joins the
// host spans and the lot is written as one Chrome trace (chrome://tracing, Perfetto). Every
// ka call records its extract and execute spans (op and graph cases alike); ka-kernel calls
// record none.
class TraceSession {
 public:
  /// Checks that `path` can be written before anything is measured; throws ka::IoError.
  explicit TraceSession(std::string path) : path_(std::move(path)) {
    if (path_.empty()) return;
    check_writable("--trace", path_);
    profiler::SpanRecorder::global().clear();
    profiler::SpanRecorder::global().set_enabled(true);
    if (profiler::CuptiProfiler::compiled()) {
      cupti_ = std::make_unique<profiler::CuptiProfiler>();
      if (Status st = cupti_->start(); !st) {
        log().info("--trace: no GPU activity in the trace: {}", st.reason());
        cupti_.reset();
      }
    }
  }
  // A run that failed still leaves its trace when it can; the run's own error is the one
  // reported.
  ~TraceSession() {
    if (path_.empty() || written_) return;
    try {
      write();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ka-bench: error: %s\n", e.what());
    }
  }
  TraceSession(const TraceSession&) = delete;
  TraceSession& operator=(const TraceSession&) = delete;

  /// Writes the trace; throws ka::IoError naming the path when it cannot.
  void write() {
    if (path_.empty()) return;
    written_ = true;
    auto& rec = profiler::SpanRecorder::global();
    rec.set_enabled(false);
    if (cupti_) {
      cupti_->stop();
      cupti_->export_spans(rec);
    }
    try {
      rec.write_chrome_trace(path_);
    } catch (const IoError& e) {
      KA_THROW(IoError, "--trace: ", e.what());
    }
    std::fprintf(stderr, "trace: %zu spans written to %s\n", rec.collect().size(), path_.c_str());
  }

 private:
  std::string path_;
  std::unique_ptr<profiler::CuptiProfiler> cupti_;
  bool written_ = false;
};
}  // namespace

namespace {

// What run_suite measures of the machine before the first case: the FMA peaks (CPU runs), the
// copy bandwidth (when graph cases run) and the streaming-read bandwidth (decode cases).
struct MachineProbes {
  profiler::PeakMeasurement peak;   ///< On --threads threads.
  profiler::PeakMeasurement peak1;  ///< On one thread.
  profiler::BandwidthMeasurement copy;
  detail::ReadBandwidth read;
};

// Note [GPU cases]
// --device cuda runs the suite's op cases on CUDA device 0: the seeded inputs are copied
// there, ka's CUDA SGEMM (its config from the GPU's tuned table, else its heuristic) and
// libtorch's at::addmm_out (cuBLAS) write into preallocated outputs on the legacy default
// stream, and each timed call is bracketed by two CUDA events on that stream, so the time
// is the device's (plus one launch latency when the GPU was idle). %peak is against the
// datasheet's fp32 peak (SMs x fp32 lanes x 2 x peak SM clock). Graph cases run on the CPU
// and are left out.
// Leaves the graph cases out of a GPU run; returns how many.
std::size_t leave_out_graph_cases(Suite& suite) {
  const auto graph_end = std::remove_if(suite.cases.begin(), suite.cases.end(),
                                        [](const SuiteCase& c) { return c.is_graph(); });
  const auto left_out = static_cast<std::size_t>(suite.cases.end() - graph_end);
  suite.cases.erase(graph_end, suite.cases.end());
  KA_CHECK(!suite.cases.empty(), "suite '", suite.name, "' has only graph cases, which run on "
           "the CPU; --device cuda times op cases (e.g. --suite matmul)");
  return left_out;
}

// Checks the options that need no measurement and settles the thread count (0: all cores),
// which also caps ka's kernels (kernels::set_cpu_thread_limit).
void check_options(const BenchOptions& options, bool gpu, BenchOptions& settled) {
  KA_CHECK(options.device == "cpu" || options.device == "cuda", "--device '", options.device,
           "': expected cpu or cuda");
  const int hw = usable_cores();
  KA_CHECK(options.threads >= 0 && options.threads <= max_threads(), "--threads ",
           options.threads, ": expected 0 (all ", hw, " cores) to ", max_threads());
  KA_CHECK(options.repetitions >= 1, "--repetitions must be >= 1");
  KA_CHECK(std::isfinite(options.min_time_s) && options.min_time_s > 0.0,
           "--min-time must be finite seconds > 0");
  if (options.write_db && !options.explain && !options.breakdown) {
    require_database_file("--db", options.db_path);
  }
  KA_CHECK(options.isa.empty() || !gpu, "--isa ", options.isa, " restricts the CPU libraries; ",
           "not with --device cuda");
  settled.threads = options.threads == 0 ? hw : options.threads;
  // Untuned configs are the ones ka's heuristics plan for this many threads.
  kernels::set_cpu_thread_limit(settled.threads);
}

// Hands Google Benchmark its flags (repetitions, min time, the user's --benchmark_*), which it
// checks before anything is measured. benchmark::Initialize keeps a pointer to argv[0] (the
// program name its reports print), so the strings live as long as the process.
void initialize_google_benchmark(const BenchOptions& options) {
  static std::vector<std::string> args;
  for (const char* own : {"benchmark_repetitions", "benchmark_enable_random_interleaving"}) {
    KA_CHECK(flag_value(options.benchmark_flags, own).empty(), "--", own,
             ": ka-bench sets it; use --repetitions N (the rounds a case's variants take turns "
             "in)");
  }
  // Each benchmark is one round (Note [Interleaved rounds]): one repetition.
  args = {"ka-bench", "--benchmark_repetitions=1",
          fmt::format("--benchmark_min_time={}", options.min_time_s)};
  args.insert(args.end(), options.benchmark_flags.begin(), options.benchmark_flags.end());
  // Google Benchmark 1.7.1 treats its default filter "." specially and then grows its list
  // of benchmarks one reservation per case, copying it each time: quadratic in the cases
  // (a 25,000-case suite took 79 s to start, 4.5 s with ".*"). ".*" selects the same.
  if (const std::string f = flag_value(options.benchmark_flags, "benchmark_filter");
      f.empty() || f == ".") {
    args.emplace_back("--benchmark_filter=.*");
  }
  static std::vector<char*> argv;
  argv.clear();
  for (auto& a : args) argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  benchmark::Initialize(&argc, argv.data());
  if (benchmark::ReportUnrecognizedArguments(argc, argv.data())) {
    KA_THROW(ValueError, "unrecognised Google Benchmark flag");
  }
}

void make_case_states(Session& s) {
  for (const SuiteCase& c : s.suite.cases) {
    CaseState cs;
    cs.c = c;
    cs.variants = detail::variants_of(c, s.context.references);
    cs.info.resize(cs.variants.size());
    cs.flop = detail::flop_of(c);
    cs.disposition.assign(cs.variants.size(), Disposition::kOk);
    cs.check.resize(cs.variants.size());
    s.cases.push_back(std::move(cs));
  }
}

bool any_graph_case(const Suite& suite) {
  return std::any_of(suite.cases.begin(), suite.cases.end(),
                     [](const SuiteCase& c) { return c.is_graph(); });
}

// The run-wide probes; the CPU's FMA peak only for CPU runs (a GPU's is its datasheet's).
MachineProbes probe_machine(Session& s, const std::optional<detail::GpuInfo>& gpu_info) {
  MachineProbes m;
  if (gpu_info) {
    s.peak_gflops = gpu_info->fp32_peak_gflops;
  } else {
    m.peak = profiler::measure_fma_peak(s.options.threads);
    m.peak1 = s.options.threads == 1 ? m.peak : profiler::measure_fma_peak(1);
    s.peak_gflops = m.peak.gflops;
  }
  // Graph cases are quoted against the copy bandwidth at the threads ka's graph runs use: the
  // executor and the kernels' defaults are both capped at --threads.
  s.graph_threads = s.options.threads;
  if (any_graph_case(s.suite)) m.copy = profiler::measure_copy_bandwidth(s.graph_threads);
  s.first_copy_gbps = m.copy.gbytes_per_s;
  // Decode cases are quoted against a roofline drawn with the streaming-read bandwidth, Note
  // [Per-case read probes]; without memory for the probe's array they get no roofline.
  if (!gpu_info && std::any_of(s.suite.cases.begin(), s.suite.cases.end(), is_decode)) {
    try {
      m.read = detail::ReadProbe(s.options.threads).measure();
    } catch (const std::bad_alloc&) {
      m.read = {};
    }
  }
  s.read_gbps = m.read.gbytes_per_s;
  return m;
}

// Everything a run's header says about the run, besides the probes.
struct RunSetting {
  std::string path;  ///< The suite file.
  std::optional<detail::GpuInfo> gpu;
  std::size_t graphs_left_out = 0;
  std::string configs;    ///< Where ka's configs come from.
  std::string allocator;  ///< What keep_freed_memory() did.
};

void print_device_lines(const Session& s, const RunSetting& run, const MachineProbes& m,
                        const References& refs, std::FILE* out) {
  const auto& descriptor =
      run.gpu ? kernels::gemm_f32_cuda_descriptor() : kernels::gemm_f32_cpu_descriptor();
  if (run.gpu) {
    const DeviceFingerprint& g = run.gpu->fingerprint;
    fmt::print(out, "device: CUDA 0, {} ({}, {} SMs, {} GiB, L2 {} MiB, SM clock {} MHz, memory "
                    "clock {} MHz, driver {}, runtime {}); ka GEMM: {} v{}\n",
               g.name, g.isa, g.cores, g.memory_bytes >> 30, g.l2_bytes >> 20, g.clock_mhz,
               g.memory_clock_mhz, g.driver_version, g.runtime_version, descriptor.name,
               descriptor.version);
    fmt::print(out, "libtorch {} ({}) on the same stream\n", detail::libtorch_version(),
               s.context.libtorch_gemm_kernel);
    fmt::print(out, "fp32 peak (datasheet: {} SMs x {} fp32 lanes x 2 x {} MHz): {:.1f} "
                    "GFLOP/s; %peak uses it\n",
               g.cores, run.gpu->fp32_lanes_per_sm, g.clock_mhz, s.peak_gflops);
    if (run.graphs_left_out > 0) {
      fmt::print(out, "{} graph case(s) left out: graph cases run on the CPU\n",
                 run.graphs_left_out);
    }
    return;
  }
  const DeviceFingerprint fp = cpu_fingerprint();
  fmt::print(out, "device: {} ({}, {} logical cores, L2 {} KiB/core); ka GEMM: {} v{}, {} "
                  "micro-kernel\n",
             fp.name, fp.isa, fp.cores, fp.l2_bytes / 1024, descriptor.name, descriptor.version,
             kernels::gemm_cpu_isa());
  fmt::print(out, "libtorch {} ({}), OPENBLAS_CORETYPE={}; {} thread(s) for ka and libtorch{}\n",
             detail::libtorch_version(), s.context.libtorch_gemm_kernel,
             refs.blas.coretype_env.empty() ? "(unset)" : refs.blas.coretype_env,
             s.options.threads, older_kernels_note(kImplLibtorch, refs.blas.core));
  print_peers(refs, out);
  if (!s.options.isa.empty()) print_isa_restriction(s.options.isa, refs, out);
  fmt::print(out, "fp32 FMA peak (measured now, {} FMA loop): {:.1f} GFLOP/s on {} thread(s), "
                  "{:.1f} on 1; each GEMM case's %peak uses a {}-thread probe run right "
                  "before it\n",
             m.peak.isa, m.peak.gflops, m.peak.threads, m.peak1.gflops, s.options.threads);
}

void print_run_header(const Session& s, const RunSetting& run, const MachineProbes& m,
                      const References& refs, std::FILE* out) {
  fmt::print(out, "ka-bench {}: suite '{}' ({} cases) from {}\n", KA_VERSION, s.suite.name,
             s.suite.cases.size(), run.path);
  print_device_lines(s, run, m, refs, out);
  if (s.read_gbps > 0.0) {
    fmt::print(out, "read bandwidth (measured now, sum of {} MiB on {} thread(s) read {} ways, "
                    "the best way's median of {}): {:.1f} GB/s ({}); decode cases (M <= {}) are "
                    "quoted against min(FMA peak, read bandwidth x M/2 FLOP per byte of B), the "
                    "read bandwidth probed again right before each over an array the size of its "
                    "B, read hot as the case reads B (from a cache where B fits)\n",
               m.read.array_bytes >> 20, m.read.threads, detail::kReadPatterns, m.read.rounds,
               m.read.gbytes_per_s, m.read.pattern, detail::kDecodeMaxM);
  }
  const bool graphs = any_graph_case(s.suite);
  if (graphs) {
    fmt::print(out, "copy bandwidth (measured now, STREAM copy of 2 x {} MiB on {} thread(s), "
                    "bytes read + written): {:.1f} GB/s, the best of ordinary stores {:.1f}, "
                    "streaming stores {:.1f} and streaming stores on ka's thread pool {:.1f}; "
                    "it drifts, so it is probed again around every timing call of ka's fused "
                    "variant\n",
               m.copy.array_bytes >> 20, m.copy.threads, m.copy.gbytes_per_s,
               m.copy.ordinary_gbps, m.copy.streaming_gbps, m.copy.pooled_gbps);
  }
  fmt::print(out, "method: {} rounds per case, each timing every variant in turn (interleaved, "
                  "so drift meets both sides of a ratio): once the process's other threads are "
                  "idle (BLAS workers spin after a call), >= {:.2f} s of back-to-back calls "
                  "after one untimed call (hot cache), per-call time by {} (Google Benchmark "
                  "manual time); the median over rounds is reported\n",
             s.options.repetitions, s.options.min_time_s,
             run.gpu ? "two CUDA events around each call (device time)" : "steady_clock");
  fmt::print(out, "configs: {}\n", run.configs);
  print_correctness(s.suite, out);
  if (graphs) {
    fmt::print(out,
               "graph cases: ka = ka's runtime with fusion, ka_unfused = one kernel per op, "
               "libtorch = the TorchScript interpreter on the same graph; each call runs the "
               "whole graph, outputs allocated; {} thread(s) for both (ka's executor and its "
               "kernels' untuned configs)\n",
               s.options.threads);
    const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
    if (s.options.threads > 1 && (wait_policy == nullptr || *wait_policy == '\0')) {
      fmt::print(out,
                 "WARNING: OMP_WAIT_POLICY is unset, so libtorch's OpenMP threads spin after "
                 "each parallel region while OpenBLAS's own threads run its GEMMs; on few cores "
                 "a libtorch op that alternates them (nn.TransformerEncoderLayer's fast path, "
                 "also when ka falls back to it) can take several times longer, in both "
                 "variants; OMP_WAIT_POLICY=passive avoids it\n");
    }
  }
  if (!run.allocator.empty()) fmt::print(out, "allocator: {}\n", run.allocator);
}

// Records the run in the database (with --db): the machine, the probes and the references.
void begin_stored_run(Session& s, const RunSetting& run, const MachineProbes& m,
                      const References& refs, std::FILE* out) {
  db::RunInfo info = run.gpu ? db::run_info(run.gpu->fingerprint, "ka-bench",
                                            s.options.command_line)
                             : db::cpu_run_info("ka-bench", s.options.command_line);
  info.suite = s.suite.name;
  info.threads = s.options.threads;
  if (!run.gpu) {  // a GPU's peak is its datasheet's, not a measurement
    info.fma_peak_gflops = m.peak.gflops;
    info.fma_peak_1t_gflops = m.peak1.gflops;
  }
  if (m.copy.gbytes_per_s > 0.0) info.copy_gbps = m.copy.gbytes_per_s;
  if (m.read.gbytes_per_s > 0.0) info.read_gbps = m.read.gbytes_per_s;
  info.libtorch_version = detail::libtorch_version();
  info.openblas_coretype = refs.blas.coretype_env;
  // The peers' versions and kernels ride in the same free-text column (no schema change):
  // "Haswell; --vs openblas: OpenBLAS 0.3.21 cblas_sgemm, core Haswell; blis: ...".
  info.openblas_core = refs.blas.core;
  for (std::size_t p = 0; p < refs.peers.size(); ++p) {
    info.openblas_core += (p == 0 ? "; --vs " : "; ") + refs.peers[p] + ": " +
                          refs.peer_info[p].kernel();
  }
  detail::SupervisedRun* supervisor = detail::SupervisedRun::current();
  if (supervisor != nullptr && supervisor->resume_run_id() > 0) {
    s.run_id = supervisor->resume_run_id();
    s.store->continue_run(s.run_id);
    fmt::print(out, "results: {} (run {}, continued without the {} cases run before)\n",
               s.options.db_path, s.run_id, supervisor->skipped_cases().size());
  } else {
    s.run_id = s.store->begin_run(info);
    fmt::print(out, "results: {} (run {})\n", s.options.db_path, s.run_id);
  }
  if (supervisor != nullptr) supervisor->report_run(s.run_id);
}

// One Outcome slot per (case, variant), and one Google Benchmark per (case, round, variant),
// a case's rounds one after another (Note [Interleaved rounds]).
void register_benchmarks(Session& s) {
  for (std::size_t i = 0; i < s.cases.size(); ++i) {
    const CaseState& cs = s.cases[i];
    for (std::size_t v = 0; v < cs.variants.size(); ++v) {
      Outcome o;
      o.case_index = i;
      o.variant = v;
      o.impl = cs.variants[v];
      s.outcomes.emplace(s.benchmark_name(i, cs.variants[v]), std::move(o));
    }
    for (int round = 0; round < s.options.repetitions; ++round) {
      for (std::size_t v = 0; v < cs.variants.size(); ++v) {
        benchmark::RegisterBenchmark(s.benchmark_name(i, cs.variants[v]).c_str(), bench_variant,
                                     &s, i, v)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

// The reporter of --benchmark_out's file, for --benchmark_out_format (json when not given);
// nullptr without --benchmark_out.
std::unique_ptr<benchmark::BenchmarkReporter> make_file_reporter(const BenchOptions& options) {
  if (flag_value(options.benchmark_flags, "benchmark_out").empty()) return nullptr;
  const std::string format = flag_value(options.benchmark_flags, "benchmark_out_format");
  if (format.empty() || format == "json") return std::make_unique<benchmark::JSONReporter>();
  KA_CHECK(format == "console", "--benchmark_out_format='", format,
           "': expected json or console (Google Benchmark deprecates csv)");
  return std::make_unique<benchmark::ConsoleReporter>(benchmark::ConsoleReporter::OO_None);
}

std::unique_ptr<benchmark::BenchmarkReporter> make_reporter(const std::string& format,
                                                            bool console) {
  if (format == "json") return std::make_unique<benchmark::JSONReporter>();
  KA_CHECK(console, "--benchmark_format='", format,
           "': expected console or json (Google Benchmark deprecates csv)");
  return std::make_unique<benchmark::ConsoleReporter>(
      isatty(STDOUT_FILENO) != 0 ? benchmark::ConsoleReporter::OO_Color
                                 : benchmark::ConsoleReporter::OO_None);
}

// Runs every registered benchmark with SIGINT/SIGTERM/SIGHUP turned into a stop after the current
// case; returns how many benchmarks (rounds) ran. The display and the --benchmark_out file both
// see each variant's rounds as repetitions with their aggregates (Note [Interleaved rounds]).
std::size_t run_benchmarks(Session& s, std::unique_ptr<benchmark::BenchmarkReporter> inner,
                           std::unique_ptr<benchmark::BenchmarkReporter> file_inner,
                           bool console) {
  const auto rounds = static_cast<std::size_t>(s.options.repetitions);
  CollectingReporter reporter(
      s, std::make_unique<detail::RoundsReporter>(std::move(inner), rounds, console));
  std::unique_ptr<detail::RoundsReporter> file;
  if (file_inner) {
    file = std::make_unique<detail::RoundsReporter>(std::move(file_inner), rounds, false);
  }
  std::size_t ran = 0;
  {
    const InterruptScope scope;
    ran = benchmark::RunSpecifiedBenchmarks(&reporter, file.get());
    s.interrupt_signal = interrupt_signal();
  }
  reporter.flush();
  benchmark::Shutdown();
  s.current.reset();
  return ran;
}

// True when no ka or peer variant was incorrect or failed.
bool all_variants_ok(const Session& s) {
  return std::none_of(s.outcomes.begin(), s.outcomes.end(), [](const auto& entry) {
    const Outcome& o = entry.second;
    return o.impl != kImplLibtorch &&
           (o.disposition == Disposition::kIncorrect || o.disposition == Disposition::kFailed);
  });
}

// Closes the stored run, reports an interruption, and turns the outcome into the exit code.
int finish_run(Session& s, std::size_t ran, std::FILE* out) {
  const bool all_ok = all_variants_ok(s);
  const int signal_number = s.interrupt_signal;
  if (s.store) {
    s.store->finish_run(s.run_id, all_ok && !s.db_failed && signal_number == 0 && ran > 0);
    fmt::print(out, "stored {} benchmark results in {} (run {}{})\n", s.rows_stored,
               s.options.db_path, s.run_id,
               signal_number != 0 ? ", marked failed: interrupted" : "");
    fmt::print(out, "see it: ka-db report --db {} --run {} --out report.html (roofline, "
                    "speed-ups and the cases, one HTML file)\n",
               s.options.db_path, s.run_id);
  }
  if (signal_number != 0) {
    fmt::print(stderr, "ka-bench: interrupted by signal {}; the results measured so far are "
                       "stored\n", signal_number);
    return 128 + signal_number;
  }
  KA_CHECK_TYPE(DbError, !s.db_failed, "some results could not be written to ",
                s.options.db_path, " (see the errors above)");
  KA_CHECK(ran > 0, "no benchmark matched --benchmark_filter");
  return all_ok ? 0 : 1;
}

// In a ka-bench a supervisor started (--isolate), the cases earlier children finished or lost.
void leave_out_finished_cases(Suite& suite) {
  const detail::SupervisedRun* supervisor = detail::SupervisedRun::current();
  if (supervisor == nullptr) return;
  const auto& skipped = supervisor->skipped_cases();
  suite.cases.erase(std::remove_if(suite.cases.begin(), suite.cases.end(),
                                   [&](const SuiteCase& c) { return skipped.count(c.name) != 0; }),
                    suite.cases.end());
}

// run_suite() without the trace: everything from loading the suite to the exit code.
int run_traced_suite(const BenchOptions& options) {
  RunSetting run;
  run.allocator = detail::keep_freed_memory();
  Session s;
  s.options = options;
  s.suite = load_bench_suite(options, &run.path);
  leave_out_finished_cases(s.suite);
  const bool gpu = options.device == "cuda";
  check_options(options, gpu, s.options);
  if (gpu) {
    run.gpu = detail::cuda_bench_device();  // fails here, before anything runs, without one
    run.graphs_left_out = leave_out_graph_cases(s.suite);
  }
  // --vs is checked and its libraries loaded before anything is measured or stored.
  const References refs = setup_references(s.options, s.context);
  run.configs = detail::load_tuned_table(options.tuned_table,
                                         gpu ? DeviceType::kCUDA : DeviceType::kCPU);
  if (options.explain || options.breakdown) {
    fmt::print("configs: {}\n", run.configs);
    return options.explain ? explain_suite(s.options, s.suite, run.path, s.context)
                           : breakdown_suite(s.options, s.suite, s.context);
  }
  initialize_google_benchmark(options);
  if (const std::string out = flag_value(options.benchmark_flags, "benchmark_out"); !out.empty()) {
    check_writable("--benchmark_out", out);
  }
  const std::string format = flag_value(options.benchmark_flags, "benchmark_format");
  const bool console = format.empty() || format == "console";
  auto reporter = make_reporter(format, console);
  auto file_reporter = make_file_reporter(options);
  // The database is opened (and its schema migrated) before any measurement, so a bad --db
  // fails fast and a failure never costs a run's worth of measurements.
  if (options.write_db) s.store = std::make_unique<db::ResultsStore>(options.db_path);
  make_case_states(s);
  const MachineProbes probes = probe_machine(s, run.gpu);
  std::FILE* out = console ? stdout : stderr;
  print_run_header(s, run, probes, refs, out);
  if (s.store) begin_stored_run(s, run, probes, refs, out);
  std::fflush(out);
  register_benchmarks(s);
  const std::size_t ran =
      run_benchmarks(s, std::move(reporter), std::move(file_reporter), console);
  if (detail::SupervisedRun* supervisor = detail::SupervisedRun::current()) {
    supervisor->report_done();
  }
  print_summary(s, out);
  const int code = finish_run(s, ran, out);
  check_benchmark_out_written(options, ran);
  return code;
}

}  // namespace

Suite load_bench_suite(const BenchOptions& options, std::string* path) {
  if (!options.model.empty()) {
    KA_CHECK(options.suite.empty(), "--model and --suite cannot both be given");
    if (path != nullptr) *path = options.model;
    return model_suite(options.model, options.model_inputs);
  }
  KA_CHECK(options.model_inputs.empty(), "--input gives the shapes of --model's inputs");
  const std::string file = find_suite_file(options.suite, options.suites_dir);
  if (path != nullptr) *path = file;
  return load_suite_file(file);
}

int run_suite(const BenchOptions& options) {
  TraceSession trace(options.trace_path);
  const int code = run_traced_suite(options);
  trace.write();  // a trace that cannot be written fails the run: exit 1
  return code;
}

}  // namespace ka::harness
