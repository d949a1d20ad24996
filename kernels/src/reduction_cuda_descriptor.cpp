// Descriptors of the CUDA softmax, layer_norm and sum. Compiled everywhere (they are data), also
// where nvcc is absent.
#include "descriptor_common.hpp"

#include <ka/core/ceil_div.hpp>
#include <ka/core/error.hpp>
#include <ka/kernels/cuda_limits.hpp>
#include <ka/kernels/reduction.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ka::kernels {
namespace {

constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 20;  // as reduction_cuda.cu's grid cap

// Rows and row length as the heuristics see a key: the reduced extent is the first tensor's
// last dimension, except for layer_norm, whose weight (when in the key) gives the normalized
// shape.
struct Rows {
  std::int64_t rows = 1;
  std::int64_t row_len = 1;
};

Rows key_rows(const ShapeKey& key, bool layer_norm) {
  KA_CHECK(!key.args().empty(), "shape key ", key.str(), " has no tensor argument");
  const TensorSpec& x = key.args()[0];
  std::int64_t total = 1;
  for (const auto s : x.sizes) total *= s;
  Rows r;
  r.row_len = x.sizes.empty() ? 1 : x.sizes.back();
  if (layer_norm && key.args().size() >= 2 && !key.args()[1].sizes.empty()) {
    const std::int64_t w = static_cast<std::int64_t>(detail::spec_numel(key.args()[1]));
    if (w > 0 && total % w == 0) r.row_len = w;
  }
  r.rows = r.row_len == 0 ? 0 : total / r.row_len;
  return r;
}

TunableSpace row_space() {
  return TunableSpace(
      {
          {"block_threads", {32, 64, 128, 256, 512, 1024}, "threads per block"},
          {"rows_per_block",
           {1, 2, 4, 8},
           "rows one block reduces at once (block_threads / rows_per_block threads each)"},
      },
      {
          {"block_threads is a multiple of 32 in [32, 1024]",
           [](const LaunchConfig& c) {
             const std::int64_t t = c.get_or("block_threads", 0);
             return t >= 32 && t <= 1024 && t % 32 == 0;
           }},
          {"each row gets whole warps: block_threads % (32 * rows_per_block) == 0",
           [](const LaunchConfig& c) {
             const std::int64_t t = c.get_or("block_threads", 0);
             const std::int64_t r = c.get_or("rows_per_block", 0);
             return r >= 1 && t % (32 * r) == 0;
           }},
      });
}

LaunchConfig complete_rows(const Rows& r, const LaunchConfig& point) {
  LaunchConfig c = point;
  const std::int64_t threads = std::max<std::int64_t>(1, point.get_or("block_threads", 256));
  const std::int64_t rpb = std::max<std::int64_t>(1, point.get_or("rows_per_block", 1));
  c.block = {threads, 1, 1};
  c.grid = {std::clamp<std::int64_t>(ceil_div(r.rows, rpb), 1, kMaxBlocks), 1, 1};
  return c;
}

// About eight elements per thread, whole warps per row, and blocks of at least 128 threads
// (several short rows share one) so that the block scheduler is not the bottleneck.
LaunchConfig default_rows(const Rows& r) {
  std::int64_t group = 32;
  while (group < 1024 && group * 8 < r.row_len) group *= 2;
  const std::int64_t rpb = std::clamp<std::int64_t>(128 / group, 1, 8);
  LaunchConfig point;
  point.set("block_threads", group * rpb).set("rows_per_block", rpb);
  return complete_rows(r, point);
}

Status only_f32(const ShapeKey& shape) {
  for (const auto& t : shape.args()) {
    if (t.dtype != DType::kFloat32) return Status::unsupported("only float32 is supported");
    if (t.sizes.size() > static_cast<std::size_t>(TensorView::kMaxDims)) {
      return Status::unsupported("more than 8 dimensions");
    }
  }
  return Status::ok();
}

// A row-kernel descriptor; `flops_per_elem` and `bytes` give its cost model.
KernelDescriptor make_rows(const char* name, std::vector<std::string> ops, bool layer_norm,
                           const KernelDescriptor& (*self)(), double flops_per_elem,
                           double (*bytes)(const ShapeKey&)) {
  KernelDescriptor d;
  d.name = name;
  d.version = 1;
  d.ops = std::move(ops);
  d.dtypes = {DType::kFloat32};
  d.device = DeviceType::kCUDA;
  d.space = row_space();
  d.complete = [layer_norm](const ShapeKey& shape, const LaunchConfig& point) {
    return complete_rows(key_rows(shape, layer_norm), point);
  };
  d.can_run = [self, name](const ShapeKey& shape, const LaunchConfig& config) -> Status {
    if (Status st = only_f32(shape); !st) return st;
    if (Status st = self().space.check(config); !st) return st;
    return check_cuda_launch_here(config, name);
  };
  d.default_config = [layer_norm](const ShapeKey& shape) {
    return default_rows(key_rows(shape, layer_norm));
  };
  d.flop_count = [flops_per_elem](const ShapeKey& shape) {
    return flops_per_elem * (shape.args().empty() ? 0.0 : detail::spec_numel(shape.args()[0]));
  };
  d.byte_count = bytes;
  return d;
}

// Read once and write once (the second read of a row is expected to hit L2).
double softmax_bytes(const ShapeKey& shape) {
  return shape.args().empty() ? 0.0 : 8.0 * detail::spec_numel(shape.args()[0]);
}

// Input and output plus weight and bias once.
double layer_norm_bytes(const ShapeKey& shape) {
  double bytes = softmax_bytes(shape);
  for (std::size_t i = 1; i < shape.args().size(); ++i) {
    bytes += 4.0 * detail::spec_numel(shape.args()[i]);
  }
  return bytes;
}

// The input plus one output per row (the reduced dims are not in the key: the last one).
double sum_bytes(const ShapeKey& shape) {
  if (shape.args().empty()) return 0.0;
  const Rows r = key_rows(shape, false);
  return 4.0 * (detail::spec_numel(shape.args()[0]) + static_cast<double>(r.rows));
}

}  // namespace

const KernelDescriptor& softmax_f32_cuda_descriptor() {
  // max, subtract, exp, add, multiply per element.
  static const KernelDescriptor d =
      make_rows("softmax_block_f32_cuda", {"aten::_softmax", "aten::softmax.int"}, false,
                softmax_f32_cuda_descriptor, 5.0, softmax_bytes);
  return d;
}

const KernelDescriptor& layer_norm_f32_cuda_descriptor() {
  // Welford update (4), normalize (2), scale and shift (2) per element.
  static const KernelDescriptor d =
      make_rows("layer_norm_block_f32_cuda", {"aten::layer_norm", "aten::native_layer_norm"}, true,
                layer_norm_f32_cuda_descriptor, 8.0, layer_norm_bytes);
  return d;
}

const KernelDescriptor& sum_f32_cuda_descriptor() {
  static const KernelDescriptor d =
      make_rows("sum_f32_cuda", {"aten::sum.dim_IntList", "aten::sum"}, false,
                sum_f32_cuda_descriptor, 1.0, sum_bytes);
  return d;
}

}  // namespace ka::kernels
