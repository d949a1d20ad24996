// ka-bench's engine: runs a suite's cases through Google Benchmark, ka against libtorch.
#pragma once

#include <ka/harness/suite.hpp>

#include <string>
#include <vector>

namespace ka::harness {

/// What `ka-bench` was asked to do.
struct BenchOptions {
  std::string suite;         ///< Suite name (looked up in the suite path) or a .yaml path.
  /// --model: a TorchScript file benchmarked as the one module case of a suite of its own
  /// (instead of `suite`), with `model_inputs` ("x:1x128x768") as its inputs' shapes.
  std::string model;
  std::vector<std::string> model_inputs;
  std::string suites_dir;    ///< Extra folder searched first for suite names.
  std::string db_path = "ka.db";
  /// A tuned table (ka database or export) whose configs ka's cases use; "" = KA_TUNED_TABLE
  /// if set, else the kernels' heuristics.
  std::string tuned_table;
  bool write_db = true;
  int threads = 0;           ///< libtorch's and ka GEMM cases' threads; 0 = all logical cores.
  /// "cpu", or "cuda": op cases on CUDA device 0, ka's CUDA GEMM against libtorch's (cuBLAS),
  /// timed by CUDA events; graph cases are left out (they run on the CPU).
  std::string device = "cpu";
  /// What op cases are timed against (--vs): a comma list of libtorch, openblas, blis, onednn
  /// (the peer libraries, loaded with dlopen and checked against libtorch like ka).
  std::string references = "libtorch";
  /// --isa: avx512, avx2 or generic runs ka and every library on that ISA family (see
  /// apply_isa_restriction); "" = each picks its own.
  std::string isa;
  int repetitions = 5;       ///< Rounds per case, each timing every variant once.
  double min_time_s = 0.1;   ///< Minimum time of back-to-back calls in one round.
  bool explain = false;
  bool breakdown = false;    ///< Split ka's per-call time into dispatch, extract, execute.
  /// Write a Chrome trace of ka's pipeline spans (and CUPTI's GPU activity where a GPU and
  /// CUPTI are present) to this file at the end; "" = no trace.
  std::string trace_path;      ///< Print each case's plan instead of benchmarking.
  std::string command_line;  ///< Stored with the run.
  /// Run the cases in a supervised child process (run_suite_isolated): a case that crashes
  /// it is recorded as 'crashed' and the rest of the suite runs.
  bool isolate = false;
  /// Seconds a case (all its variants) may take before it is stopped and recorded as
  /// 'timeout'; 0 = no limit. Needs isolate.
  double case_timeout_s = 0.0;
  std::vector<std::string> benchmark_flags;  ///< --benchmark_* flags passed through.
};

/// The suite `options` ask for: --model's suite of one module case (model_suite), else the
/// --suite file, whose path goes to `path` (--model: the model file). Throws ka::ValueError.
Suite load_bench_suite(const BenchOptions& options, std::string* path = nullptr);
/// Runs the suite and prints the summary table. Returns the exit status: 0 when every ka
/// result was correct, 1 when any case was INCORRECT or failed, 128 + N when signal N
/// (SIGINT, SIGTERM, SIGHUP) stopped the run (what finished is stored; the run is marked failed).
/// With `explain`, prints each case's kernels and configurations (a graph's fusion groups and
/// tasks) from one checked run instead, and returns 0, or 1 when a ka variant failed or was
/// incorrect (see Note [--explain] in bench.cpp). Throws ka::ValueError for a bad suite or
/// options (the caller exits 2) and ka::DbError when the database cannot be opened or written
/// (checked before any benchmark runs).
int run_suite(const BenchOptions& options);

/// run_suite in a supervised child process (this program again, with `argv`): a case that
/// crashes the child or overruns `options.case_timeout_s` gets a stored row per benchmark
/// ('crashed' or 'timeout', with the reason) and a new child runs the rest of the suite into
/// the same run (Note [Isolated cases] in case_supervisor.cpp). Returns 1 when a case was
/// lost, else the child's status; in a process a supervisor started, or for --explain and
/// --breakdown, it is run_suite itself.
int run_suite_isolated(const BenchOptions& options, const std::vector<std::string>& argv);

/// Puts the process under `options.isa` (Note [--isa] in isa_restriction.cpp): sets KA_CPU_ISA,
/// OPENBLAS_CORETYPE, ONEDNN_MAX_CPU_ISA and (with --vs blis) BLIS_ARCH_TYPE, and re-executes
/// /proc/self/exe with `argv` so the libraries read them when they load; returns at once when
/// `options.isa` is empty or they are already set (or this process is the re-executed one).
/// Throws ka::ValueError for an unknown ISA, one this CPU cannot run, or a bad --vs; ka::Error
/// when execv fails.
void apply_isa_restriction(const BenchOptions& options, char** argv);

}  // namespace ka::harness
