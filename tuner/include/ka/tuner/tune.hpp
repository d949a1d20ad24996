// ka-tune's engine: sweep a kernel's configurations per operator shape, store every trial,
// pick the winner statistically and write it to the recommendation table.
#pragma once

#include <ka/core/device.hpp>
#include <ka/core/launch_config.hpp>
#include <ka/profiler/measure.hpp>
#include <ka/tuner/shards.hpp>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace ka::tuner {

/// What to tune and how.
struct TuneOptions {
  /// Exact signature: aten::mm, addmm, bmm, _softmax, layer_norm, sum.dim_IntList,
  /// add.Tensor, mul.Tensor, relu, gelu, sigmoid, silu, tanh.
  std::string op;
  /// "MxKxN" (mm, addmm), "BxMxKxN" (bmm), else the input's sizes ("4096x4096"; softmax,
  /// layer_norm and sum over the last dim).
  std::vector<std::string> shapes;
  /// Parallel to `shapes` (empty: every shape whole): sweep only this slice of a shape's
  /// space, with its share of the budgets (a shard's item, Note [Space slices]).
  std::vector<ShapeSlice> slices;
  std::string strategy = "model";
  std::uint64_t seed = 1;
  std::size_t budget = 0;  ///< Evaluations per shape (0: none, the strategy decides).
  double time_budget_s = std::numeric_limits<double>::infinity();  ///< Per shape.
  std::string db_path = "ka.db";
  bool fresh = false;  ///< Ignore trials earlier runs stored for the same configs.
  std::string command_line;
  profiler::MeasureOptions measure;  ///< How each configuration is timed.
  int finalists = 3;                 ///< Candidates re-measured to separate the winner.
  /// At most this many threads (0: all cores): the `threads` tunable keeps only candidates up
  /// to it, and the default config it is compared with is the one planned for it (see
  /// kernels::set_cpu_thread_limit, which tune() sets).
  int threads = 0;
  /// Where the kernels run: the CPU, or CUDA device 0 (ka's CUDA kernels, timed by CUDA
  /// events; trials and recommendations stored under the GPU's fingerprint).
  DeviceType device = DeviceType::kCPU;
  std::FILE* progress = stderr;      ///< Progress bar (null: none).
  /// Run each configuration in a supervised worker process (Note [Isolated trials]): one that
  /// crashes or overruns its deadline is recorded ('crashed', 'timeout') and the sweep goes
  /// on. Needs main() to call serve_trial_worker_if_asked() (ka/tuner/trial_worker.hpp).
  bool isolate = false;
  /// An isolated trial's deadline in seconds (0: automatic, from the default config's time).
  double trial_timeout_s = 0.0;
  /// Run again the configurations earlier runs recorded as crashed, timed out or failed
  /// (otherwise a resumed sweep keeps their disposition).
  bool retry_failed = false;
};

/// `config` without grid and block: the tunables only (what trials and recommendations store).
LaunchConfig params_of(const LaunchConfig& config);
/// "threads=2 tile_k=256 tile_m=96": the tunables only, for people.
std::string params_str(const LaunchConfig& config);

/// One shape's outcome.
struct ShapeOutcome {
  std::string shape;      ///< As given ("512x768x3072").
  std::string shape_key;  ///< ShapeKey canonical form.
  std::string kernel;
  std::string best_config;
  double best_median_ns = 0.0;
  double default_median_ns = 0.0;
  double gain = 1.0;  ///< default / best
  bool separated = false;  ///< The winner was faster than the runner-up in enough paired
                           ///< rounds; false also when a tie kept the default (Note [Paired
                           ///< finals], ka/tuner/paired_finals.hpp).
  std::int64_t finals_run = 0;  ///< The concurrent run whose finals (and recommendation) this
                                ///< outcome took, or 0 when this run timed them.
  std::size_t evaluated = 0;  ///< Configurations measured in this run.
  std::size_t reused = 0;     ///< Configurations whose trials an earlier run stored.
  std::size_t shared = 0;     ///< Configurations a concurrent run of the same work measured
                              ///< while this one swept (Note [Shared trials]).
  std::size_t equivalent = 0; ///< Configurations that run as one already measured (same
                              ///< canonical form): given its result, not run or stored.
  std::size_t failed = 0;     ///< Configurations that did not run ok (threw, wrong,
                              ///< crashed, timed out).
  std::size_t crashed = 0;    ///< ... of which killed their worker process (isolated trials).
  std::size_t timed_out = 0;  ///< ... of which overran the trial deadline (isolated trials).
  std::size_t space = 0;      ///< Points swept: the space's valid points the kernel can run
                              ///< for this shape here (this process's slice of them).
  std::size_t refused = 0;    ///< Valid points the kernel refuses for this shape on this
                              ///< device (an ISA path's missing widths): not swept.
};

/// Tunes every shape: for each, the strategy proposes configurations, each is run through
/// ka's extractor (PreparedCall) on `device` and timed by profiler::measure (measure_cuda on
/// a GPU); every trial is written to
/// the database as it lands (so a killed sweep resumes without losing or repeating trials:
/// configurations already stored for this device, kernel version and shape are reused, not
/// re-run); the best few and the default are timed again in paired rounds (Note [Paired
/// finals], select_winner), and the winner becomes the shape's recommendation. With
/// `isolate`, trials run in a supervised worker process (Note [Isolated trials]). SIGINT,
/// SIGTERM and SIGHUP stop the sweep between trials (an isolated trial under way is
/// abandoned): the run is marked failed and ka::Interrupted is thrown. Throws ka::ValueError
/// for a bad op or shape, ka::DbError when the database cannot be written, ka::CudaError when
/// `device` is CUDA and no GPU (or no CUDA libtorch) is here.
std::vector<ShapeOutcome> tune(const TuneOptions& options);

/// Replay: for every (op, shape, kernel) with a complete sweep stored in `db_path` (a trial for
/// every valid point of the kernel's space, on this device), how many evaluations `strategy`
/// needs to get within `tolerance` of the sweep's best, with `seed`.
struct ReplayOutcome {
  std::string op;
  std::string shape_key;
  std::string kernel;
  std::size_t space = 0;
  std::size_t evaluations = 0;
};
std::vector<ReplayOutcome> replay(const std::string& db_path, const std::string& strategy,
                                  std::uint64_t seed, double tolerance);

}  // namespace ka::tuner
