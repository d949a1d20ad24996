// KernelDescriptor: everything the extractor and the tuner need to know about one kernel.
#pragma once

#include <ka/core/device.hpp>
#include <ka/core/dtype.hpp>
#include <ka/core/launch_config.hpp>
#include <ka/core/shape_key.hpp>
#include <ka/core/status.hpp>
#include <ka/kernels/tunable_space.hpp>

#include <functional>
#include <string>
#include <vector>

namespace ka::kernels {

/// A kernel as data: identity, what it serves, its tunable space, its default heuristic and
/// its cost model. Tuned entries record `name` and `version`; bump `version` whenever a change
/// invalidates previously tuned configurations.
struct KernelDescriptor {
  std::string name;                 ///< e.g. "gemm_f32_blocked"
  int version = 1;
  std::vector<std::string> ops;     ///< Exact overload names served, e.g. "aten::addmm".
  std::vector<DType> dtypes;
  DeviceType device = DeviceType::kCPU;
  TunableSpace space;

  /// The configuration used when nothing is tuned for `shape` (complete: grid/block filled).
  std::function<LaunchConfig(const ShapeKey& shape)> default_config;
  /// Completes a point of `space` for `shape` (derives grid and block from the tunables).
  std::function<LaunchConfig(const ShapeKey& shape, const LaunchConfig& point)> complete;
  /// Whether this kernel can run `shape` with `config`; the reason when not.
  std::function<Status(const ShapeKey& shape, const LaunchConfig& config)> can_run;
  /// Floating-point operations of one call (for GFLOP/s and roofline figures).
  std::function<double(const ShapeKey& shape)> flop_count;
  /// Minimum bytes moved to and from memory by one call.
  std::function<double(const ShapeKey& shape)> byte_count;
  /// A point of `space` reduced to what it changes for `shape` (params only): two points
  /// with equal canonical forms run the same code over the same blocks, so a tuner measures
  /// one of them (a tile taller than M is M; auto sizes resolved). Only asked of points
  /// can_run accepts. Empty: every point is its own.
  std::function<LaunchConfig(const ShapeKey& shape, const LaunchConfig& point)> canonical;
};

}  // namespace ka::kernels
