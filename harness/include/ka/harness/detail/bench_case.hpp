// A benchmark case as ka-bench runs it: its variants (ka's implementations and the libtorch
// reference), one call of each, the correctness check and what each variant ran as. Keeps
// torch out of its includers.
// Internal to ka (namespace detail): for the harness and its unit tests, not a stable API.
#pragma once

#include <ka/core/device.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/core/status.hpp>
#include <ka/db/recommendation_table.hpp>
#include <ka/harness/suite.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <regex>
#include <string>
#include <vector>

namespace ka::harness::detail {

/// ka as a program calling it gets it: its dispatcher, extractor and executor (with fusion,
/// for graphs; op cases write a preallocated output through the out= overloads).
constexpr const char* kImplKa = "ka";
constexpr const char* kImplKaUnfused = "ka_unfused";  ///< ka, every graph op its own kernel.
/// Op cases: ka's GEMM kernel called directly at the pipeline's configuration, no dispatch
/// or extraction (a --vs entry, not a reference: never a case's "best").
constexpr const char* kImplKaKernel = "ka-kernel";
constexpr const char* kImplLibtorch = "libtorch";     ///< The reference.

/// `text` as a regular expression selecting cases ("" selects all). Throws ka::ValueError
/// naming `option` when it does not compile.
std::regex case_filter(const std::string& text, const char* option);

/// The variants of `c`, each timed as its own benchmark: ka, then `references` (--vs, in its
/// order: libtorch and the peer libraries) for op cases; {ka, ka_unfused, libtorch} for graph
/// cases. Every variant but libtorch is checked against libtorch before it is timed.
std::vector<std::string> variants_of(const SuiteCase& c,
                                     const std::vector<std::string>& references = {kImplLibtorch});

struct CheckResult {
  bool correct = false;
  bool refused = false;  ///< The kernel declined the case (a Status), nothing was compared.
  double max_abs_error = 0.0;
  std::string detail;  ///< Why it failed (first bad element, or the exception text).
};

/// One kernel launch of a graph variant, as ka's extractor planned it (extractor::TaskPlan
/// without torch), with tasks numbered from 1 within the run.
struct TaskInfo {
  int id = 0;
  std::string pattern;  ///< Signature, or "fused::gemm_epilogue[aten::linear+aten::gelu]".
  std::vector<int> nodes;
  std::string fusion;  ///< Why the nodes fused; "" for a single op.
  std::string kernel;
  int kernel_version = 0;
  std::string device;
  std::string shape_key;
  std::string config;
  db::Provenance provenance = db::Provenance::kHeuristic;
  std::vector<int> after;  ///< Ids of the tasks this one waits for.
  std::string fallback;    ///< Why libtorch's kernel ran it (provenance kFallback); else "".
};

/// What one variant runs as, for the database and --explain.
struct VariantInfo {
  std::string op;         ///< aten::addmm, or "graph:<template name>".
  std::string shape_key;  ///< A graph's input shapes for graph cases.
  std::string kernel;     ///< For a graph: its tasks' kernels, joined with " + ".
  int kernel_version = 0;
  std::string config;  ///< For a graph: its tasks' configs, joined with " | ".
  std::string provenance;  ///< As stored and printed: its tasks' provenances, joined with ",".
  std::vector<TaskInfo> tasks;  ///< Graph ka variants: the plan of the last checked run.
  /// The fewest bytes a call must move: every input read once and every output written once
  /// (graph cases, once checked; 0 when unknown). Effective bandwidth = min_bytes / time.
  double min_bytes = 0.0;
};

/// What every case of a run shares.
struct CaseContext {
  int threads = 1;                   ///< For libtorch, and for ka's GEMM config.
  std::string libtorch_gemm_kernel;  ///< "at::addmm_out (OpenBLAS Haswell)".
  /// Where op cases run: the CPU, or CUDA device 0 (ka's CUDA GEMM against libtorch's, i.e.
  /// cuBLAS; timed by CUDA events).
  DeviceType device = DeviceType::kCPU;
  /// What op cases are timed against (--vs): libtorch and/or the peers of peer_blas.hpp, each
  /// loaded (peer_library) and set to `threads` before a case is made.
  std::vector<std::string> references = {kImplLibtorch};
};

/// The GPU of a `--device cuda` run.
struct GpuInfo {
  DeviceFingerprint fingerprint;
  int fp32_lanes_per_sm = 0;
  double fp32_peak_gflops = 0.0;  ///< The datasheet's: SMs x lanes x 2 x peak SM clock.
  std::string libtorch_gemm_kernel;  ///< "at::addmm_out (cuBLAS, TF32 off)".
};
/// CUDA device 0 as ka-bench --device cuda uses it. Throws ka::CudaError naming what is
/// missing: a visible GPU, or CUDA in the libtorch ka is linked with.
GpuInfo cuda_bench_device();

/// Makes `path` (or, when empty, KA_TUNED_TABLE) the table ka's cases take their configs
/// from, through ka's runtime; returns where `device`'s kernels take their configs from, for
/// the report header. Throws ka::DbError naming an unreadable table.
std::string load_tuned_table(const std::string& path, DeviceType device);

/// Where a graph's time goes, per operator and shapes, from the profiler's spans of some
/// fused ka calls (GraphCase::profile_ops).
struct OpProfile {
  struct Row {
    std::string op;      ///< Signature, or fusion pattern.
    std::string shapes;  ///< ka's shape key, or a fallback's input shapes.
    std::string served;  ///< "ka", "ka fused" or "libtorch".
    int calls = 0;       ///< Per graph call.
    double busy_ns = 0;  ///< Per graph call, summed over threads ("block" / "fallback" spans).
  };
  std::vector<Row> rows;  ///< Largest busy time first.
  int graph_calls = 0;
  double wall_ns = 0;  ///< Per graph call.
};

/// A case's tensors and implementations. Variants are indices into variants_of(case).
class BenchCase {
 public:
  virtual ~BenchCase() = default;
  BenchCase() = default;
  BenchCase(const BenchCase&) = delete;
  BenchCase& operator=(const BenchCase&) = delete;

  /// One call of variant `v`. Not ok when ka's kernel declines the case; throws what ka or
  /// libtorch throw.
  virtual Status run(std::size_t v) = 0;
  /// Runs the libtorch reference and variant `v` (ka's, or a peer library) once each and
  /// compares their outputs.
  virtual CheckResult check(std::size_t v) = 0;
  /// What variant `v` runs as (a graph's plan is known once it has run).
  [[nodiscard]] virtual VariantInfo info(std::size_t v) const = 0;
  /// One call of ka through its whole pipeline inside a "call" span: ka's dispatcher, then
  /// extract and execute (op cases; the output is allocated per call), or the graph run with
  /// fusion (graph cases). For --breakdown.
  virtual void run_pipeline() = 0;
  /// One call of ka's kernel alone inside a "kernel" span, as ka-kernel runs it (op cases);
  /// false when there is none (graph cases) or it declined the case. For --breakdown.
  virtual bool run_kernel() = 0;
  /// Runs ka (fused) `calls` times with the profiler on and says where the time went; empty
  /// for cases that are one operator.
  virtual OpProfile profile_ops(int /*calls*/) { return {}; }
};

/// Allocates and fills `c`'s inputs (seeded) and prepares its variants.
std::unique_ptr<BenchCase> make_bench_case(const SuiteCase& c, std::uint64_t seed,
                                           const CaseContext& context);

/// The correctness criterion of `c`'s check, in words.
std::string tolerance_text(const SuiteCase& c);

/// Floating-point operations of one call of `c` (2MNK for GEMMs; 0 when not counted).
double flop_of(const SuiteCase& c);

/// The fewest bytes one call of op case `c` must move: A, B and C once each (MK + KN + MN
/// elements). 0 for graph cases, whose VariantInfo::min_bytes is known once they are checked.
double min_bytes_of(const SuiteCase& c);

/// Keeps freed memory in the process (glibc: no mmap for large blocks, no trimming), as
/// jemalloc or tcmalloc setups do, so graph cases that allocate 64 MiB outputs per call do not
/// page-fault them in every time, for ka and libtorch alike. Returns what was done, for the
/// report header ("" when the allocator could not be told).
std::string keep_freed_memory();

/// "1.13.0" (libtorch's version as compiled against).
std::string libtorch_version();
/// Sets libtorch's intra-op threads (and OpenBLAS's, when it is the BLAS).
void set_libtorch_threads(int threads);

}  // namespace ka::harness::detail
