// CUDA kernels run on the CPU, for testing them where no GPU is visible (Note [SIMT on the
// host]). Include this header before anything that includes cuda_runtime.h, then the kernels'
// .cuh, and run a kernel over a grid with ka::test::simt::launch:
//
//   ka::test::simt::launch(grid, block, [&] { my_kernel<64>(n, x, y); });
//
// Note [SIMT on the host]
// A host compiler sees CUDA's qualifiers (__global__, __device__, __shared__ ...) defined to
// nothing by cuda_runtime.h, so a kernel compiles as an ordinary function. This header gives
// it what only nvcc provides: threadIdx, blockIdx, blockDim and gridDim, __syncthreads(), and
// __shared__ as `static`, so that a block's threads share one copy of each shared array.
// Blocks run one after another; the threads of a block are ucontext fibers on the calling
// thread that take turns, a turn lasting from one barrier to the next (or to the kernel's
// return: an exited thread no longer counts at the barrier, as on a GPU). Turns go in thread
// order in one phase and in reverse order in the next, so a missing __syncthreads shows as a
// wrong result: some thread reads shared data its neighbours have not written yet, or have
// already overwritten. Under ASan (the fibers' stacks are announced to it) an index out of a
// shared array or a tensor fails the test. What this checks: the kernel's indexing, bounds,
// barriers and arithmetic (with the host's float functions). What it does not: warp-
// synchronous code (shuffles, votes), tensor-core fragments, timing, and memory-model effects
// that sequential turns cannot show. KA_SIMT_VECTOR_ALIGNED(p) (defined here) aborts at a
// misaligned 16-byte vector access, which a GPU faults on and a CPU forgives.
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

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
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
// run in turns; a turn ends at __syncthreads() or when the kernel returns, so one round of
// turns is one barrier phase.
class Block {
 public:
  explicit Block(unsigned threads) : fibers_(threads) {
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
    bool live = true;
    for (bool reverse = false; live; reverse = !reverse) {
      live = false;
      for (std::size_t i = 0; i < n; ++i) {
        Fiber& f = fibers_[reverse ? n - 1 - i : i];
        if (f.done) continue;
        running_ = &f;
        current = f.state;
        switch_to(&scheduler_, f);
        live = live || !f.done;
      }
    }
  }

  // From a fiber: its turn ends until every live thread of the block got here.
  void barrier() { switch_back(false); }

 private:
  static constexpr std::size_t kStackBytes = 256 * 1024;
  struct Fiber {
    ucontext_t context;
    std::unique_ptr<char[]> stack;
    ThreadState state;
    bool done = false;
  };

  // f's context: kernel_ on f's stack from the start. (Apart from run(): getcontext returns
  // twice, and no loop variable may live across it.)
  void prepare(Fiber& f) {
    f.done = false;
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
    b.running_->done = true;
    b.switch_back(true);
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

  void switch_back(bool finished) {
    Fiber& self = *running_;
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

}  // namespace ka::test::simt

#define threadIdx (::ka::test::simt::current.thread)
#define blockIdx (::ka::test::simt::current.block)
#define blockDim (::ka::test::simt::block_dim)
#define gridDim (::ka::test::simt::grid_dim)

inline void __syncthreads() { ::ka::test::simt::Block::active->barrier(); }

#define KA_SIMT_VECTOR_ALIGNED(p)                                                         \
  do {                                                                                   \
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) {                                 \
      std::fprintf(stderr, "%s:%d: misaligned 16-byte vector access at %p\n", __FILE__, \
                   __LINE__, static_cast<const void*>(p));                               \
      std::abort();                                                                      \
    }                                                                                    \
  } while (false)
