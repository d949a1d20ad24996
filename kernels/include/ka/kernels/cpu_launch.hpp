// CpuLaunch: a CPU kernel prepared for one call, as a grid of independent blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ka::kernels {

/// What a CPU kernel's `prepare_*` function produces: `blocks` independent pieces of work
/// (the grid) and a function that runs one of them. Whoever runs it (ka's executor, or
/// run_on_pool) decides which thread runs which block; blocks never share writes. The kernel's
/// per-call state is copied into `job` (trivially copyable, at most kJobBytes), so a CpuLaunch
/// holds no heap memory; pointers in it refer to the kernel's arguments, which the caller keeps
/// alive until every block has run.
///
///   CpuLaunch launch;
///   if (Status st = prepare_elementwise_f32_cpu(args, config, launch); !st) return st;
///   for (std::int64_t b = 0; b < launch.blocks; ++b) launch.run_block(b);
///   launch.finish();
///
/// A kernel that splits one reduction over several blocks (bind_split) has each block write
/// its partial results into its own slots of `scratch`, and a finish function, run once after
/// every block, combines them: whoever runs the blocks calls finish() (a no-op for the
/// others). The scratch lives in the CpuLaunch, so one CpuLaunch object runs one call at a
/// time; run_on_pool runs a copy.
struct CpuLaunch {
  static constexpr std::size_t kJobBytes = 320;
  static constexpr int kScratch = 64;  ///< Partial results a split launch can hold.

  std::int64_t blocks = 0;  ///< Grid volume; 0 means there is nothing to do.
  int threads = 1;          ///< Most threads worth using (the config's `threads`).
  void (*block_fn)(const void* job, std::int64_t block, double* scratch) = nullptr;
  void (*finish_fn)(const void* job, const double* scratch) = nullptr;
  alignas(64) unsigned char job[kJobBytes] = {};
  mutable double scratch[kScratch] = {};

  /// Stores `state` and binds Fn(state, block) as the block function.
  template <class Job, void (*Fn)(const Job&, std::int64_t)>
  void bind(const Job& state, std::int64_t grid_blocks, int max_threads) {
    store(state, grid_blocks, max_threads);
    block_fn = [](const void* p, std::int64_t b, double*) { Fn(*static_cast<const Job*>(p), b); };
    finish_fn = nullptr;
  }

  /// The same for a split launch: Fn(state, block, scratch) writes its partials into scratch,
  /// Finish(state, scratch) combines them after the last block.
  template <class Job, void (*Fn)(const Job&, std::int64_t, double*),
            void (*Finish)(const Job&, const double*)>
  void bind_split(const Job& state, std::int64_t grid_blocks, int max_threads) {
    store(state, grid_blocks, max_threads);
    block_fn = [](const void* p, std::int64_t b, double* s) {
      Fn(*static_cast<const Job*>(p), b, s);
    };
    finish_fn = [](const void* p, const double* s) { Finish(*static_cast<const Job*>(p), s); };
  }

  void run_block(std::int64_t block) const { block_fn(job, block, scratch); }
  /// Runs the finish function, if any; call once after every block has run.
  void finish() const {
    if (finish_fn != nullptr) finish_fn(job, scratch);
  }

 private:
  template <class Job>
  void store(const Job& state, std::int64_t grid_blocks, int max_threads) {
    static_assert(std::is_trivially_copyable_v<Job>, "CpuLaunch jobs are copied bytewise");
    static_assert(sizeof(Job) <= kJobBytes, "CpuLaunch job too large: raise kJobBytes");
    static_assert(alignof(Job) <= 64, "CpuLaunch job over-aligned");
    std::memcpy(job, &state, sizeof(Job));
    blocks = grid_blocks;
    threads = max_threads < 1 ? 1 : max_threads;
  }
};

/// Runs every block of `launch` on ThreadPool::global() with up to launch.threads threads, then
/// its finish function (what the direct entry points such as gemm_f32_cpu do after preparing).
void run_on_pool(const CpuLaunch& launch);

/// The most threads the CPU kernels' default heuristics plan for (0 = KA_NUM_THREADS if set,
/// else every logical core; the initial value), like at::set_num_threads for libtorch:
/// `ka-bench --threads N` and `ka-tune --threads N` set it so that untuned configs are the
/// ones ka would pick on N cores; the extractor runs tuned configs on at most this many
/// threads too. Tunable spaces are not affected. Set it before the first call: configs the
/// extractor has already chosen are cached.
void set_cpu_thread_limit(int threads);
/// min(limit, logical cores), at least 1.
int cpu_thread_limit();

}  // namespace ka::kernels
