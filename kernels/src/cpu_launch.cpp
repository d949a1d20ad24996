#include <ka/core/thread_pool.hpp>
#include <ka/kernels/cpu_launch.hpp>

namespace ka::kernels {

void run_on_pool(const CpuLaunch& launch) {
  if (launch.blocks <= 0) return;
  // One block or one thread: run inline, skipping the pool (small eager calls stay cheap).
  if (launch.blocks == 1 || launch.threads <= 1) {
    for (std::int64_t b = 0; b < launch.blocks; ++b) launch.run_block(b);
    return;
  }
  // One pointer captured: the std::function stays in its inline buffer (no allocation).
  ThreadPool::global().parallel_for(launch.blocks, launch.threads,
                                    [p = &launch](std::int64_t b) { p->run_block(b); });
}

}  // namespace ka::kernels
