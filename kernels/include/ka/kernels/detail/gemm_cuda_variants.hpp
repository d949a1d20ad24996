// The CUDA GEMMs' compiled variants, as X-macros over their template arguments.
#pragma once

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
