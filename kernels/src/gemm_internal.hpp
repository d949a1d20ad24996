// Internal pieces of the GEMM shared by the CPU driver, its micro-kernels and the CUDA launcher.
#pragma once

#include <ka/kernels/gemm.hpp>

#include <cstdint>

namespace ka::kernels::detail {

/// Rows of the micro-tile, the same for every ISA so that tile_m constraints do not change
/// with the machine.
constexpr int kMicroRows = 6;
/// Largest micro-tile width of any ISA (AVX-512: 32 floats = two zmm registers).
constexpr int kMaxMicroCols = 32;

/// C[kMicroRows x nr] += alpha * A_packed(kc x kMicroRows)^T-panel * B_packed(kc x nr), where
/// A is packed as kMicroRows values per k and B as nr values per k. `c` has row stride ldc.
using MicroKernel = void (*)(std::int64_t kc, const float* a, const float* b, float* c,
                             std::int64_t ldc, float alpha);

struct MicroKernelInfo {
  const char* isa;
  int cols;  ///< nr
  MicroKernel fn;
};

MicroKernelInfo micro_kernel_avx512();
MicroKernelInfo micro_kernel_avx2();
MicroKernelInfo micro_kernel_generic();

/// The operands of the skinny-M path: B row-major (unit column stride), any A strides.
struct SkinnyArgs {
  const float* a;
  std::int64_t a_row_stride, a_col_stride;
  const float* b;
  std::int64_t ldb;
  float* c;
  std::int64_t ldc;
  std::int64_t m, k;
  std::int64_t tile_k;
  float alpha;
};

/// C[:, col_begin:col_end] += alpha * A @ B[:, col_begin:col_end], streaming B unpacked in
/// strips of 64 columns x tile_k rows (AVX-512 only).
void skinny_columns_avx512(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end);

/// Where the bias comes from once broadcast to [M, N]: element (i, j) is at
/// data[i * row_stride + j * col_stride]. `data` is null when there is no bias term.
struct BiasView {
  const float* data = nullptr;
  std::int64_t row_stride = 0;
  std::int64_t col_stride = 0;
};

/// Validates an AddmmArgs (dtypes, ranks, inner dimensions, out shape, bias broadcast) and
/// returns M, N, K. Throws ka::ValueError naming the offending argument and shapes.
GemmShape validate_addmm(const AddmmArgs& args, DeviceType expected_device);

/// The bias view of args.self broadcast to [M, N]; empty when there is no self or beta == 0.
BiasView broadcast_bias(const AddmmArgs& args, std::int64_t m, std::int64_t n);

/// Batch count and per-batch M, N, K of a bmm.
struct BmmShape {
  std::int64_t batch = 0;
  GemmShape gemm;
};

/// Validates a BmmArgs (dtypes, devices, ranks, batch and inner dimensions, out shape), for
/// the CPU and CUDA kernels alike. Throws ka::ValueError naming the offending argument and
/// shapes.
BmmShape validate_bmm(const BmmArgs& args, DeviceType expected_device);

/// Reads B, M, N, K from a shape key of aten::bmm(mat1, mat2). Throws ka::ValueError when the
/// key is not a well-formed batched GEMM.
BmmShape bmm_shape(const ShapeKey& key);

}  // namespace ka::kernels::detail

/// The CUDA SGEMM's compiled variants, X(tile_m, tile_n, tile_k, thread_m, thread_n, vec):
/// every tile with one-float global loads (sgemm_tiled), those whose thread tiles are multiples
/// of 4 also with float4 loads (vec 4: sgemm_vec4, Note [Vector SGEMM]). The one list that
/// gemm_cuda.cu instantiates, the descriptor's space admits and the tests run.
#define KA_CUDA_SGEMM_VARIANTS(X)                                                     \
  X(32, 32, 8, 2, 2, 1) X(64, 64, 8, 4, 4, 1) X(128, 128, 8, 8, 8, 1)                 \
  X(128, 64, 8, 8, 4, 1) X(64, 128, 8, 4, 8, 1) X(32, 32, 16, 2, 2, 1)                \
  X(64, 64, 16, 4, 4, 1) X(128, 128, 16, 8, 8, 1) X(128, 64, 16, 8, 4, 1)             \
  X(64, 128, 16, 4, 8, 1) X(64, 64, 8, 4, 4, 4) X(128, 128, 8, 8, 8, 4)               \
  X(128, 64, 8, 8, 4, 4) X(64, 128, 8, 4, 8, 4) X(64, 64, 16, 4, 4, 4)                \
  X(128, 128, 16, 8, 8, 4) X(128, 64, 16, 8, 4, 4) X(64, 128, 16, 4, 8, 4)

/// The bf16 GEMM's compiled variants, X(tile_m, tile_n, warps_m, warps_n): the block's output
/// tile and its warps' grid (each warp owns a (tile_m / warps_m) x (tile_n / warps_n) tile of
/// 16 x 16 fragments; Note [bf16 WMMA GEMM]). The one list the launcher instantiates, the
/// descriptor's space admits and the tests run.
/// (128 x 128 with 2 x 2 warps, 64 x 64 per warp, spilled registers on sm_90: left out.)
#define KA_CUDA_BF16_GEMM_VARIANTS(X) \
  X(64, 64, 2, 2) X(128, 64, 2, 2) X(64, 128, 2, 2) X(128, 128, 4, 2) X(128, 128, 2, 4)
