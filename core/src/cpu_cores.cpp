#include <ka/core/cpu_cores.hpp>

#include <sched.h>

#include <algorithm>
#include <thread>

// Note [Usable cores]
// std::thread::hardware_concurrency() counts the machine's online cores. A process bound to
// fewer (a Slurm shard with --cpus-per-task=4 on a 64-core node, `taskset -c 0`, a container's
// cpuset) that planned for the machine would run 64 threads on 4 cores, and a sweep of the
// `threads` tunable would time configurations that oversubscribe. So the count is the affinity
// mask's, read once at first use: Slurm, taskset and cpusets set it before the program starts,
// and a count that changed under a running sweep would change its space half-way.

namespace ka {

int usable_cores() {
  static const int cores = [] {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
      const int n = CPU_COUNT(&mask);
      if (n > 0) return n;
    }
    return static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  }();
  return cores;
}

}  // namespace ka
