// The CUDA SGEMM's descriptors (2-D and batched). Compiled everywhere (they are data), also
// where nvcc is absent.
#include <ka/core/ceil_div.hpp>
#include <ka/core/error.hpp>
#include <ka/kernels/cuda_limits.hpp>
#include <ka/kernels/detail/gemm_cuda_variants.hpp>
#include <ka/kernels/gemm.hpp>

#include <algorithm>

namespace ka::kernels {
namespace {

// The (tile_m, tile_n, tile_k, thread_m, thread_n, vec) combinations gemm_cuda.cu
// instantiates.
#define KA_SGEMM_ROW(BM, BN, BK, TM, TN, VEC) {BM, BN, BK, TM, TN, VEC},
constexpr std::int64_t kCompiled[][6] = {KA_CUDA_SGEMM_VARIANTS(KA_SGEMM_ROW)};
#undef KA_SGEMM_ROW

bool compiled_variant(const LaunchConfig& c) {
  const std::int64_t want[6] = {c.get_or("tile_m", 0),   c.get_or("tile_n", 0),
                                c.get_or("tile_k", 0),   c.get_or("thread_m", 0),
                                c.get_or("thread_n", 0), c.get_or("vec", 0)};
  return std::any_of(std::begin(kCompiled), std::end(kCompiled), [&](const std::int64_t(&v)[6]) {
    return std::equal(std::begin(v), std::end(v), std::begin(want));
  });
}

// A bmm's batch and per-entry shape from its key aten::bmm(mat1 [B, M, K], mat2 [B, K, N]).
struct BatchedShape {
  std::int64_t batch = 1;
  GemmShape s;
};

BatchedShape bmm_shape(const ShapeKey& key) {
  const auto& args = key.args();
  KA_CHECK(key.op() == "aten::bmm" && args.size() == 2, "shape key ", key.str(),
           " is not a batched GEMM (aten::bmm with 2 tensors)");
  const auto& a = args[0].sizes;
  const auto& b = args[1].sizes;
  KA_CHECK(a.size() == 3 && b.size() == 3 && a[0] == b[0] && a[2] == b[1], "shape key ", key.str(),
           ": mat1 and mat2 are not multipliable batches of matrices");
  return {a[0], {a[1], b[2], a[2]}};
}

LaunchConfig complete_for(const GemmShape& s, std::int64_t batch, const LaunchConfig& point) {
  LaunchConfig c = point;
  const auto bm = point.get_or("tile_m", 1);
  const auto bn = point.get_or("tile_n", 1);
  const auto threads = (bm / std::max<std::int64_t>(1, point.get_or("thread_m", 1))) *
                       (bn / std::max<std::int64_t>(1, point.get_or("thread_n", 1)));
  c.block = {threads, 1, 1};
  c.grid = {std::max<std::int64_t>(1, ceil_div(s.n, bn)),
            std::max<std::int64_t>(1, ceil_div(s.m, bm)), std::max<std::int64_t>(1, batch)};
  c.shared_mem_bytes = (bm + bn) * point.get_or("tile_k", 0) * 4;
  return c;
}

LaunchConfig complete(const ShapeKey& shape, const LaunchConfig& point) {
  return complete_for(gemm_shape(shape), 1, point);
}

// The tile heuristic: large tiles for large outputs, small ones where few blocks would
// otherwise leave most SMs idle.
LaunchConfig default_point(const GemmShape& s) {
  LaunchConfig point;
  const bool large = s.m >= 1024 && s.n >= 1024;
  const bool small = s.m < 256 || s.n < 256;
  const std::int64_t tile = large ? 128 : small ? 32 : 64;
  const std::int64_t thread = tile / 16;
  point.set("tile_m", tile).set("tile_n", tile).set("tile_k", 8);
  point.set("thread_m", thread).set("thread_n", thread);
  // float4 loads wherever the thread tile allows them (Note [Vector SGEMM]).
  point.set("vec", thread % 4 == 0 ? 4 : 1);
  return point;
}

TunableSpace sgemm_space() {
  return TunableSpace(
      {
          {"tile_m", {32, 64, 128}, "rows of the output tile per thread block"},
          {"tile_n", {32, 64, 128}, "columns of the output tile per thread block"},
          {"tile_k", {8, 16}, "depth of the shared-memory K slice"},
          {"thread_m", {2, 4, 8}, "rows of each thread's register tile"},
          {"thread_n", {2, 4, 8}, "columns of each thread's register tile"},
          {"vec", {1, 4}, "floats per global load: 1, or float4 where the layout allows, the "
                          "next K slice fetched during this one (Note [Vector SGEMM])"},
      },
      {
          {"(tile_m/thread_m) * (tile_n/thread_n) == 256 threads and the variant is compiled "
           "(vec 4: thread_m, thread_n multiples of 4)",
           compiled_variant},
      });
}

Status only_f32(const ShapeKey& shape) {
  for (const auto& t : shape.args()) {
    if (t.dtype != DType::kFloat32) return Status::unsupported("only float32 is supported");
  }
  return Status::ok();
}

KernelDescriptor make() {
  KernelDescriptor d;
  d.name = "sgemm_smem_tiled";
  d.version = 2;  // 2: the vec tunable
  d.ops = {"aten::mm", "aten::addmm"};
  d.dtypes = {DType::kFloat32};
  d.device = DeviceType::kCUDA;
  d.space = sgemm_space();
  d.complete = complete;
  d.can_run = [](const ShapeKey& shape, const LaunchConfig& config) -> Status {
    if (Status st = only_f32(shape); !st) return st;
    if (Status st = gemm_f32_cuda_descriptor().space.check(config); !st) return st;
    return check_cuda_launch_here(config, "sgemm_smem_tiled");
  };
  d.default_config = [](const ShapeKey& shape) {
    return complete(shape, default_point(gemm_shape(shape)));
  };
  d.flop_count = gemm_f32_cpu_descriptor().flop_count;
  d.byte_count = gemm_f32_cpu_descriptor().byte_count;
  return d;
}

KernelDescriptor make_batched() {
  KernelDescriptor d;
  d.name = "sgemm_smem_tiled_batched";
  d.version = 2;  // 2: the vec tunable
  d.ops = {"aten::bmm"};
  d.dtypes = {DType::kFloat32};
  d.device = DeviceType::kCUDA;
  d.space = sgemm_space();
  d.complete = [](const ShapeKey& shape, const LaunchConfig& point) {
    const BatchedShape b = bmm_shape(shape);
    return complete_for(b.s, b.batch, point);
  };
  d.can_run = [](const ShapeKey& shape, const LaunchConfig& config) -> Status {
    if (Status st = only_f32(shape); !st) return st;
    static_cast<void>(bmm_shape(shape));  // throws ka::ValueError for a malformed key
    if (Status st = bmm_f32_cuda_descriptor().space.check(config); !st) return st;
    return check_cuda_launch_here(config, "sgemm_smem_tiled_batched");
  };
  // One batch entry decides the tiles: blocks over the batch fill the GPU anyway.
  d.default_config = [](const ShapeKey& shape) {
    const BatchedShape b = bmm_shape(shape);
    return complete_for(b.s, b.batch, default_point(b.s));
  };
  d.flop_count = [](const ShapeKey& shape) {
    const BatchedShape b = bmm_shape(shape);
    return 2.0 * static_cast<double>(b.batch) * static_cast<double>(b.s.m) *
           static_cast<double>(b.s.n) * static_cast<double>(b.s.k);
  };
  d.byte_count = [](const ShapeKey& shape) {
    const BatchedShape b = bmm_shape(shape);
    return 4.0 * static_cast<double>(b.batch) *
           static_cast<double>(b.s.m * b.s.k + b.s.k * b.s.n + b.s.m * b.s.n);
  };
  return d;
}

}  // namespace

const KernelDescriptor& gemm_f32_cuda_descriptor() {
  static const KernelDescriptor d = make();
  return d;
}

const KernelDescriptor& bmm_f32_cuda_descriptor() {
  static const KernelDescriptor d = make_batched();
  return d;
}

}  // namespace ka::kernels
