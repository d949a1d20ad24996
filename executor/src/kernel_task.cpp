#include <ka/executor/kernel_task.hpp>

namespace ka::executor {

bool depends_on(const KernelTask& later, const KernelTask& earlier) noexcept {
  for (const MemRange& a : later.ranges) {
    for (const MemRange& b : earlier.ranges) {
      if (a.conflicts_with(b)) return true;
    }
  }
  return false;
}

}  // namespace ka::executor
