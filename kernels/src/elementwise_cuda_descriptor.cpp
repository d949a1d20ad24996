// The CUDA element-wise kernel's descriptor. Compiled everywhere (it is data), also where nvcc
// is absent.
#include "descriptor_common.hpp"

#include <ka/core/ceil_div.hpp>
#include <ka/core/error.hpp>
#include <ka/kernels/cuda_limits.hpp>
#include <ka/kernels/elementwise.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ka::kernels {
namespace {

constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 20;  // as elementwise_cuda.cu's grid cap

LaunchConfig complete_for(std::int64_t numel, const LaunchConfig& point) {
  LaunchConfig c = point;
  const std::int64_t threads = std::max<std::int64_t>(1, point.get_or("block_threads", 256));
  const std::int64_t items = std::max<std::int64_t>(1, point.get_or("items_per_thread", 1));
  const std::int64_t per_block = threads * items;
  c.block = {threads, 1, 1};
  c.grid = {std::clamp<std::int64_t>(ceil_div(numel, per_block), 1, kMaxBlocks), 1, 1};
  return c;
}

KernelDescriptor make() {
  KernelDescriptor d;
  d.name = "ew_chain_f32_cuda";
  d.version = 1;
  d.ops = {"aten::add.Tensor", "aten::sub.Tensor", "aten::mul.Tensor", "aten::div.Tensor",
           "aten::maximum",    "aten::neg",        "aten::exp",        "aten::tanh",
           "aten::relu",       "aten::gelu",       "aten::sigmoid",    "aten::silu",
           "aten::pow.Tensor_Scalar", "aten::contiguous"};
  d.dtypes = {DType::kFloat32};
  d.device = DeviceType::kCUDA;
  d.space = TunableSpace(
      {
          {"block_threads", {64, 128, 256, 512, 1024}, "threads per block"},
          {"items_per_thread",
           {1, 2, 4, 8},
           "elements each thread handles per grid step (dense aligned operands load whole "
           "float4s: one vector up to 4 elements, two for 8)"},
      },
      {
          {"block_threads is a multiple of 32 in [32, 1024]",
           [](const LaunchConfig& c) {
             const std::int64_t t = c.get_or("block_threads", 0);
             return t >= 32 && t <= 1024 && t % 32 == 0;
           }},
          {"items_per_thread is 1, 2, 4 or 8 (the compiled unrolls)",
           [](const LaunchConfig& c) {
             const std::int64_t i = c.get_or("items_per_thread", 0);
             return i == 1 || i == 2 || i == 4 || i == 8;
           }},
      });
  d.complete = [](const ShapeKey& shape, const LaunchConfig& point) {
    return complete_for(detail::broadcast_numel(shape), point);
  };
  d.can_run = [](const ShapeKey& shape, const LaunchConfig& config) -> Status {
    if (shape.args().size() > static_cast<std::size_t>(EwProgram::kMaxInputs)) {
      return Status::unsupported("more than 8 tensor inputs");
    }
    for (const auto& t : shape.args()) {
      if (t.dtype != DType::kFloat32) return Status::unsupported("only float32 is supported");
      if (t.sizes.size() > static_cast<std::size_t>(TensorView::kMaxDims)) {
        return Status::unsupported("more than 8 dimensions");
      }
    }
    // Throws ka::ValueError when the tensors do not broadcast.
    static_cast<void>(detail::broadcast_numel(shape));
    if (Status st = elementwise_f32_cuda_descriptor().space.check(config); !st) return st;
    return check_cuda_launch_here(config, "ew_chain_f32_cuda");
  };
  d.default_config = [](const ShapeKey& shape) {
    // Small tensors: many small blocks so every SM gets some. Large ones: 256 threads with a
    // float4 (or two) each per step, enough bytes in flight to saturate HBM.
    const std::int64_t numel = detail::broadcast_numel(shape);
    LaunchConfig point;
    if (numel < (std::int64_t{1} << 16)) {
      point.set("block_threads", 128).set("items_per_thread", 1);
    } else if (numel < (std::int64_t{1} << 22)) {
      point.set("block_threads", 256).set("items_per_thread", 4);
    } else {
      point.set("block_threads", 256).set("items_per_thread", 8);
    }
    return complete_for(numel, point);
  };
  // One operation per element (the program is not part of the key).
  d.flop_count = [](const ShapeKey& shape) {
    return static_cast<double>(detail::broadcast_numel(shape));
  };
  d.byte_count = detail::elementwise_bytes;
  return d;
}

}  // namespace

const KernelDescriptor& elementwise_f32_cuda_descriptor() {
  static const KernelDescriptor d = make();
  return d;
}

}  // namespace ka::kernels
