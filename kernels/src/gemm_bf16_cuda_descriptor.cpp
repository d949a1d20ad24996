// The CUDA bf16 GEMM's descriptor. Compiled everywhere (it is data), also where nvcc is absent.
#include <ka/core/ceil_div.hpp>
#include <ka/core/error.hpp>
#include <ka/kernels/cuda_limits.hpp>
#include <ka/kernels/detail/gemm_cuda_variants.hpp>
#include <ka/kernels/gemm.hpp>

#include <algorithm>
#include <iterator>

namespace ka::kernels {
namespace {

// The (tile_m, tile_n, warps_m, warps_n) combinations gemm_bf16_cuda.cu instantiates.
#define KA_BF16_ROW(BM, BN, WM, WN) {BM, BN, WM, WN},
constexpr std::int64_t kCompiled[][4] = {KA_CUDA_BF16_GEMM_VARIANTS(KA_BF16_ROW)};
#undef KA_BF16_ROW

bool compiled_variant(const LaunchConfig& c) {
  const std::int64_t want[4] = {c.get_or("tile_m", 0), c.get_or("tile_n", 0),
                                c.get_or("warps_m", 0), c.get_or("warps_n", 0)};
  return std::any_of(std::begin(kCompiled), std::end(kCompiled), [&](const std::int64_t(&v)[4]) {
    return std::equal(std::begin(v), std::end(v), std::begin(want));
  });
}

// Shared memory of a variant: the A and B slices (32 deep, rows padded by 8 elements, bf16)
// and a 16 x 16 float stage per warp.
std::int64_t shared_bytes(std::int64_t bm, std::int64_t bn, std::int64_t warps) {
  return 2 * (bm * (32 + 8) + 32 * (bn + 8)) + 4 * 256 * warps;
}

LaunchConfig complete(const ShapeKey& shape, const LaunchConfig& point) {
  const GemmShape s = gemm_shape(shape);
  LaunchConfig c = point;
  const auto bm = std::max<std::int64_t>(1, point.get_or("tile_m", 1));
  const auto bn = std::max<std::int64_t>(1, point.get_or("tile_n", 1));
  const auto warps = point.get_or("warps_m", 1) * point.get_or("warps_n", 1);
  c.block = {32 * warps, 1, 1};
  c.grid = {std::max<std::int64_t>(1, ceil_div(s.n, bn)),
            std::max<std::int64_t>(1, ceil_div(s.m, bm)), 1};
  c.shared_mem_bytes = shared_bytes(bm, bn, warps);
  return c;
}

// 128 x 128 blocks of 8 warps (32 x 64 each) for large outputs, where they have blocks enough
// to fill the SMs; 64 x 64 blocks of 4 warps otherwise: reasoned from the tiles and the SM
// count, so ka-tune's or ka_gpu_bench's sweep over the space (Note [bf16 WMMA GEMM]) is what
// to trust over it.
LaunchConfig default_point(const GemmShape& s) {
  LaunchConfig point;
  const bool large = s.m >= 1024 && s.n >= 1024;
  point.set("tile_m", large ? 128 : 64).set("tile_n", large ? 128 : 64);
  point.set("warps_m", large ? 4 : 2).set("warps_n", 2);
  return point;
}

KernelDescriptor make() {
  KernelDescriptor d;
  d.name = "gemm_bf16_wmma";
  d.version = 1;
  d.ops = {"aten::mm"};
  d.dtypes = {DType::kBFloat16};
  d.device = DeviceType::kCUDA;
  d.space = TunableSpace(
      {
          {"tile_m", {64, 128}, "rows of the output tile per thread block"},
          {"tile_n", {64, 128}, "columns of the output tile per thread block"},
          {"warps_m", {2, 4}, "warps along the tile's rows"},
          {"warps_n", {2, 4}, "warps along the tile's columns"},
      },
      {
          {"the variant is compiled (warp tiles of whole 16 x 16 fragments)", compiled_variant},
      });
  d.complete = complete;
  d.can_run = [](const ShapeKey& shape, const LaunchConfig& config) -> Status {
    for (const auto& t : shape.args()) {
      if (t.dtype != DType::kBFloat16) return Status::unsupported("only bfloat16 is supported");
    }
    if (Status st = gemm_bf16_cuda_descriptor().space.check(config); !st) return st;
    return check_cuda_launch_here(config, "gemm_bf16_wmma");
  };
  d.default_config = [](const ShapeKey& shape) {
    return complete(shape, default_point(gemm_shape(shape)));
  };
  d.flop_count = gemm_f32_cpu_descriptor().flop_count;
  d.byte_count = [](const ShapeKey& shape) {
    const GemmShape s = gemm_shape(shape);
    return 2.0 * static_cast<double>(s.m * s.k + s.k * s.n + s.m * s.n);
  };
  return d;
}

}  // namespace

const KernelDescriptor& gemm_bf16_cuda_descriptor() {
  static const KernelDescriptor d = make();
  return d;
}

ShapeKey mm_bf16_shape_key(std::int64_t m, std::int64_t k, std::int64_t n) {
  return ShapeKey("aten::mm", {TensorSpec{DType::kBFloat16, {m, k}, true},
                               TensorSpec{DType::kBFloat16, {k, n}, true}});
}

}  // namespace ka::kernels
