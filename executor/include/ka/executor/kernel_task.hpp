// KernelTask: one kernel launch, ready to run, with everything the executor needs to order it.
#pragma once

#include <ka/core/device.hpp>
#include <ka/core/launch_config.hpp>
#include <ka/core/mem_range.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/kernels/kernel_descriptor.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ka::executor {

/// A kernel launch as the extractor assembles it (DESIGN.md §5). The task owns its packed
/// arguments through `params` (scalars, TensorViews, output tensors) until it completes, so
/// nothing it points at lives on a caller's stack.
///
///   KernelTask t;
///   t.kernel = &kernels::elementwise_f32_cpu_descriptor();
///   t.device = Device::cpu();
///   t.ranges = {in_range, out_range};
///   (void)kernels::prepare_elementwise_f32_cpu(*args, config, t.cpu);
///   executor.submit(std::move(t));
struct KernelTask {
  std::uint64_t id = 0;  ///< Assigned by the executor at submit when 0.
  const kernels::KernelDescriptor* kernel = nullptr;
  Device device;
  /// The launch configuration (points into the extractor's config cache or table, which
  /// outlive the task).
  const LaunchConfig* config = nullptr;
  int priority = 0;  ///< Higher runs first among ready tasks.
  /// Every byte range the task reads or writes (in-place self: kReadWrite).
  std::vector<MemRange> ranges;
  /// Ids of earlier tasks this one waits for (filled by the executor from `ranges`).
  std::vector<std::uint64_t> dependencies;
  /// CPU: the prepared grid. CUDA: `cuda_launch(stream)` enqueues the kernel on a stream.
  kernels::CpuLaunch cpu;
  std::function<void(void* stream)> cuda_launch;
  /// Owns the packed arguments the launch points into.
  std::shared_ptr<void> params;
  /// What the task computes, for dumps and errors ("aten::add.Tensor", "fused[mm+gelu]").
  std::string label;
};

/// True when `later` must wait for `earlier`: some pair of their ranges overlaps and one of
/// the two writes (read-after-write, write-after-read, write-after-write).
bool depends_on(const KernelTask& later, const KernelTask& earlier) noexcept;

}  // namespace ka::executor
