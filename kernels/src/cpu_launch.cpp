#include <ka/core/thread_pool.hpp>
#include <ka/kernels/cpu_launch.hpp>

namespace ka::kernels {

namespace {

void run_blocks(const CpuLaunch& launch) {
  // One block or one thread: run inline, skipping the pool (small eager calls stay cheap).
  if (launch.blocks == 1 || launch.threads <= 1) {
    for (std::int64_t b = 0; b < launch.blocks; ++b) launch.run_block(b);
    return;
  }
  // One pointer captured: the std::function stays in its inline buffer (no allocation).
  ThreadPool::global().parallel_for(launch.blocks, launch.threads,
                                    [p = &launch](std::int64_t b) { p->run_block(b); });
}

}  // namespace

void run_on_pool(const CpuLaunch& launch) {
  if (launch.blocks <= 0) return;
  if (launch.finish_fn == nullptr) {
    run_blocks(launch);
    return;
  }
  // A split launch writes its scratch: run a copy, so that one prepared launch (an
  // extractor's cached plan) may run on several threads at once.
  const CpuLaunch own = launch;
  run_blocks(own);
  own.finish();
}

}  // namespace ka::kernels
