// CUDA kernels run on the CPU, for testing them where no GPU is visible (Note [SIMT on the
// host]). Include this header before anything that includes cuda_runtime.h, then the kernels'
// .cuh, and run a kernel over a grid with ka::test::simt::launch:
//
//   ka::test::simt::launch(grid, block, [&] { my_kernel<64>(n, x, y); });
//
// Note [SIMT on the host]
// A host compiler sees CUDA's qualifiers (__global__, __device__, __shared__ ...) defined to
// nothing by cuda_runtime.h, so a kernel compiles as an ordinary function. This header gives it
// what only nvcc provides: threadIdx, blockIdx, blockDim and gridDim, __syncthreads(), __syncwarp()
// and __shfl_xor_sync over full warps, and __shared__ as `static`, so that a block's threads share
// one copy of each shared array (simt_wmma.hpp adds WMMA fragments). Blocks run one after another;
// the threads of a block are ucontext fibers on the calling thread that take turns, a turn lasting
// until the thread waits (at a barrier for its block, at a shuffle for its warp) or returns (an
// exited thread no longer counts at a barrier, as on a GPU). Turns go in thread order in one round
// and in reverse order in the next, so a missing __syncthreads shows as a wrong result: some thread
// reads shared data its neighbours have not written yet, or have already overwritten. A warp whose
// threads split between a shuffle and a barrier, or a shuffle reading a returned lane, aborts with
// the block and thread. Under ASan (the fibers' stacks are announced to it) an index out of a
// shared array or a tensor fails the test. What this checks: the kernel's indexing, bounds,
// barriers, shuffles and arithmetic (with the host's float functions). What it does not: other warp
// intrinsics, how a fragment's elements spread over lanes, timing, and memory-model effects that
// sequential turns cannot show. KA_SIMT_VECTOR_ALIGNED(p) (defined here) aborts at a misaligned
// 16-byte vector access, which a GPU faults on and a CPU forgives.
#pragma once

#if defined(__CUDACC__)
#error "simt_host.hpp is for host compilers; nvcc builds the kernels for the GPU"
#endif

#if defined(__shared__)
#error "include simt_host.hpp before cuda_runtime.h (it defines __shared__ for the host)"
#endif
#define __shared__ static

#include <cuda_runtime.h>

#if !defined(__launch_bounds__)
#define __launch_bounds__(...)
#endif

#include <ucontext.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define KA_SIMT_ASAN 1
#include <sanitizer/common_interface_defs.h>
#else
#define KA_SIMT_ASAN 0
#endif

namespace ka::test::simt {

struct ThreadState {
  uint3 thread{0, 0, 0};
  uint3 block{0, 0, 0};
};

inline ThreadState current;
inline dim3 block_dim;
inline dim3 grid_dim;

// The emulated threads of the running block: one ucontext fiber each on the calling thread,
// run in turns. A turn ends where the thread waits (at __syncthreads(), for the whole block;
// at a warp shuffle, for its warp) or returns; waiting threads are released when every live
// thread of their block (or warp) waits there too.
class Block {
 public:
  explicit Block(unsigned threads) : fibers_(threads), slots_(threads) {
    // Not zeroed: a stack's pages are touched (and faulted in) only as deep as it is used.
    for (Fiber& f : fibers_) f.stack.reset(new char[kStackBytes]);
  }

  void run(uint3 block, const std::function<void()>& kernel) {
    kernel_ = &kernel;
    for (unsigned t = 0; t < fibers_.size(); ++t) {
      fibers_[t].state = {
          {t % block_dim.x, t / block_dim.x % block_dim.y, t / (block_dim.x * block_dim.y)}, block};
      prepare(fibers_[t]);
    }
    const std::size_t n = fibers_.size();
    for (bool reverse = false;; reverse = !reverse) {
      for (std::size_t i = 0; i < n; ++i) {
        Fiber& f = fibers_[reverse ? n - 1 - i : i];
        if (f.wait != Wait::kRun) continue;
        running_ = &f;
        current = f.state;
        switch_to(&scheduler_, f);
      }
      if (!release()) return;
    }
  }

  // From a fiber: waits until every live thread of the block waits here too.
  void barrier() { wait(Wait::kBlock); }

  // From a fiber: waits until every live thread of its warp waits here too (__syncwarp).
  void warp_barrier() { wait(Wait::kWarp); }

  /// From a fiber: __shfl_xor_sync over the whole warp.
  std::uint64_t shuffle_xor(std::uint64_t bits, unsigned lane_mask) {
    const auto self = static_cast<std::size_t>(running_ - fibers_.data());
    const std::size_t partner = self ^ lane_mask;
    if (lane_mask >= kWarp || partner >= fibers_.size()) {
      fail("a warp shuffle's partner lane is outside the block");
    }
    slots_[self] = bits;
    wait(Wait::kWarp);  // every lane has written its slot
    if (fibers_[partner].wait == Wait::kDone) fail("a warp shuffle reads a lane that returned");
    const std::uint64_t got = slots_[partner];
    wait(Wait::kWarp);  // every lane has read before any writes its next value
    return got;
  }

 private:
  static constexpr std::size_t kStackBytes = 256 * 1024;
  static constexpr std::size_t kWarp = 32;
  enum class Wait : std::uint8_t { kRun, kBlock, kWarp, kDone };
  struct Fiber {
    ucontext_t context;
    std::unique_ptr<char[]> stack;
    ThreadState state;
    Wait wait = Wait::kRun;
  };

  [[noreturn]] static void fail(const char* what) {
    std::fprintf(stderr, "simt_host: %s (block %u,%u,%u thread %u,%u,%u)\n", what,
                 current.block.x, current.block.y, current.block.z, current.thread.x,
                 current.thread.y, current.thread.z);
    std::abort();
  }

  // Lets the waiting threads go on: whole warps that all wait at a shuffle, else the whole
  // block if all wait at __syncthreads(). False when every thread has returned.
  bool release() {
    bool any = false;
    for (std::size_t w = 0; w < fibers_.size(); w += kWarp) {
      const std::size_t end = std::min(fibers_.size(), w + kWarp);
      bool all = true;
      bool some = false;
      for (std::size_t i = w; i < end; ++i) {
        all = all && (fibers_[i].wait == Wait::kWarp || fibers_[i].wait == Wait::kDone);
        some = some || fibers_[i].wait == Wait::kWarp;
      }
      if (!all || !some) continue;
      for (std::size_t i = w; i < end; ++i) {
        if (fibers_[i].wait == Wait::kWarp) fibers_[i].wait = Wait::kRun;
      }
      any = true;
    }
    if (any) return true;
    bool live = false;
    for (const Fiber& f : fibers_) {
      if (f.wait == Wait::kWarp) fail("threads of a warp diverge: a shuffle against a barrier");
      live = live || f.wait == Wait::kBlock;
    }
    for (Fiber& f : fibers_) {
      if (f.wait == Wait::kBlock) f.wait = Wait::kRun;
    }
    return live;
  }

  // f's context: kernel_ on f's stack from the start. (Apart from run(): getcontext returns
  // twice, and no loop variable may live across it.)
  void prepare(Fiber& f) {
    f.wait = Wait::kRun;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &scheduler_;
    makecontext(&f.context, &Block::entry, 0);
  }

  static void entry() {
    Block& b = *active;
#if KA_SIMT_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &b.scheduler_stack_bottom_, &b.scheduler_stack_size_);
#endif
    (*b.kernel_)();
    b.wait(Wait::kDone);
  }

  void switch_to(ucontext_t* from, Fiber& to) {
#if KA_SIMT_ASAN
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&fake_stack, to.stack.get(), kStackBytes);
#endif
    swapcontext(from, &to.context);
#if KA_SIMT_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  }

  // The running fiber's turn ends; it resumes once released (never, after kDone).
  void wait(Wait why) {
    Fiber& self = *running_;
    self.wait = why;
    const bool finished = why == Wait::kDone;
#if KA_SIMT_ASAN
    // A finished fiber's fake stack is released (null save slot).
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(finished ? nullptr : &fake_stack, scheduler_stack_bottom_,
                                   scheduler_stack_size_);
#endif
    if (finished) {
      setcontext(&scheduler_);
    } else {
      swapcontext(&self.context, &scheduler_);
    }
#if KA_SIMT_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, &scheduler_stack_bottom_, &scheduler_stack_size_);
#endif
  }

 public:
  static inline Block* active = nullptr;

 private:
  std::vector<Fiber> fibers_;
  std::vector<std::uint64_t> slots_;  // each thread's value at a shuffle
  ucontext_t scheduler_{};
  Fiber* running_ = nullptr;
  const std::function<void()>* kernel_ = nullptr;
  const void* scheduler_stack_bottom_ = nullptr;
  std::size_t scheduler_stack_size_ = 0;
};

/// Runs `kernel` (a call of the kernel with its arguments) for every thread of every block of
/// grid x block, blocks in order, the threads of a block in turns between barriers.
inline void launch(dim3 grid, dim3 block, const std::function<void()>& kernel) {
  grid_dim = grid;
  block_dim = block;
  Block team(block.x * block.y * block.z);
  Block::active = &team;
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) team.run({bx, by, bz}, kernel);
    }
  }
  Block::active = nullptr;
}

/// A launcher for the kernels' run_* functions (launch(kernel, grid, block, args...)): the
/// kernel over the emulated grid.
struct Launcher {
  template <typename... Params, typename... Args>
  void operator()(void (*kernel)(Params...), dim3 grid, dim3 block, const Args&... args) const {
    launch(grid, block, [&] { kernel(args...); });
  }
};

}  // namespace ka::test::simt

#define threadIdx (::ka::test::simt::current.thread)
#define blockIdx (::ka::test::simt::current.block)
#define blockDim (::ka::test::simt::block_dim)
#define gridDim (::ka::test::simt::grid_dim)

inline void __syncthreads() { ::ka::test::simt::Block::active->barrier(); }

inline void __syncwarp(unsigned mask = 0xffffffffU) {
  if (mask != 0xffffffffU) std::abort();  // partial masks are not emulated
  ::ka::test::simt::Block::active->warp_barrier();
}

// The full-warp shuffle of a value of at most 8 bytes (float, int, ...).
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t) && std::is_trivially_copyable_v<T>,
                "simt_host shuffles values of up to 8 bytes");
  if (mask != 0xffffffffU) std::abort();  // partial masks are not emulated
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = ::ka::test::simt::Block::active->shuffle_xor(bits, static_cast<unsigned>(lane_mask));
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

#define KA_SIMT_VECTOR_ALIGNED(p)                                                         \
  do {                                                                                   \
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) {                                 \
      std::fprintf(stderr, "%s:%d: misaligned 16-byte vector access at %p\n", __FILE__, \
                   __LINE__, static_cast<const void*>(p));                               \
      std::abort();                                                                      \
    }                                                                                    \
  } while (false)
