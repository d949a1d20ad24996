// The CUDA bf16 tensor-core GEMM (aten::mm on bfloat16: float accumulation, bf16 output) and
// its launch plan, apart from the launcher (gemm_bf16_cuda.cu) so that tests also run plan and
// kernel on the CPU (tests/support/simt_host.hpp and simt_wmma.hpp, Note [SIMT on the host]).
// See Note [bf16 WMMA GEMM].
#pragma once

#include <ka/core/ceil_div.hpp>
#include <ka/core/error.hpp>
#include <ka/kernels/detail/elementwise_device.cuh>
#include <ka/kernels/detail/gemm_cuda_variants.hpp>
#include <ka/kernels/gemm.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#if defined(__CUDACC__)
#include <mma.h>
#endif

#include <cstdint>
#include <cstring>
#include <vector>

namespace ka::kernels::cuda_detail {

/// One bf16 GEMM: c = act(alpha * a @ b), a [m, k], b [k, n], c [m, n], strides in elements.
/// vec_a / vec_b: the operand's rows may be read as 16-byte chunks of 8 (bf16x8_rows).
struct Bf16GemmOperands {
  long long m, n, k;
  const __nv_bfloat16* a;
  long long sa0, sa1;
  const __nv_bfloat16* b;
  long long sb0, sb1;
  __nv_bfloat16* c;
  long long sc0, sc1;
  float alpha;
  Epilogue epilogue;
  bool vec_a, vec_b;
};

/// Whether an operand's rows can be read as aligned 16-byte chunks of 8 bf16 along its columns.
__host__ __device__ inline bool bf16x8_rows(const void* p, long long row_stride,
                                            long long col_stride) {
  return col_stride == 1 && row_stride % 8 == 0 && reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

__device__ __forceinline__ uint4 load_bf16x8(const __nv_bfloat16* p) {
  KA_SIMT_VECTOR_ALIGNED(p);
  return *reinterpret_cast<const uint4*>(p);
}

__device__ __forceinline__ void store_bf16x8(__nv_bfloat16* p, uint4 v) {
  KA_SIMT_VECTOR_ALIGNED(p);
  *reinterpret_cast<uint4*>(p) = v;
}

// x[r][c..c+7] of a rows x cols bf16 matrix with strides (s0, s1) as one 16-byte chunk: one
// load where `vec` allows it (bf16x8_rows) and the eight are in bounds, else guarded loads
// (zeros outside).
__device__ __forceinline__ uint4 load_chunk8(const __nv_bfloat16* x, long long s0, long long s1,
                                             long long rows, long long cols, long long r,
                                             long long c, bool vec) {
  if (vec && r < rows && c + 7 < cols) return load_bf16x8(x + r * s0 + c);
  __nv_bfloat16 v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    v[j] = (r < rows && c + j < cols) ? x[r * s0 + (c + j) * s1] : __float2bfloat16(0.0F);
  }
  uint4 chunk;
  memcpy(&chunk, v, sizeof chunk);
  return chunk;
}

// Note [bf16 WMMA GEMM]
// A block computes a tile_m x tile_n tile of C with warps_m x warps_n warps, each warp a grid of
// 16 x 16 x 16 WMMA fragments (bf16 A and B, float accumulators). K goes in slices of 32: the
// slice's A (tile_m x 32) and B (32 x tile_n) are staged in shared memory, rows padded by 8
// elements (16 bytes, which keeps WMMA's 32-byte alignment and spreads the rows over the
// banks), and read as 16-byte chunks where the operand's layout allows (else 8 guarded scalar
// loads fill the chunk, and so do the matrices' ragged edges); the next slice is fetched into
// registers while the warps multiply the current one, one barrier pair per slice. The
// accumulators go out through a per-warp 16 x 16 float stage in shared memory, where each
// lane scales, activates, rounds to bf16 and stores its elements within bounds. WMMA's
// mma.sync path, not Hopper's wgmma, so that it runs on sm_80 and later. ka_gpu_bench (run by
// scripts/device-check.sh) sweeps its variants against cuBLAS (cublasGemmEx, bf16 in and out,
// float compute).
template <int BM, int BN, int WM, int WN>
__global__ void __launch_bounds__(WM * WN * 32) gemm_bf16_wmma(const Bf16GemmOperands op) {
  namespace wmma = nvcuda::wmma;
  constexpr int kBK = 32;
  constexpr int kThreads = WM * WN * 32;
  constexpr int kWarpM = BM / WM;
  constexpr int kWarpN = BN / WN;
  constexpr int kFragM = kWarpM / 16;
  constexpr int kFragN = kWarpN / 16;
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "warp tiles are whole 16x16 fragments");
  constexpr int kLdA = kBK + 8;  // padded rows, multiples of 8 elements (WMMA's ldm rule)
  constexpr int kLdB = BN + 8;
  constexpr int kChunksA = BM * kBK / 8;  // 16-byte chunks of a slice
  constexpr int kChunksB = kBK * BN / 8;
  constexpr int kPerThreadA = ceil_div(kChunksA, kThreads);
  constexpr int kPerThreadB = ceil_div(kChunksB, kThreads);
  __shared__ __align__(32) __nv_bfloat16 as[BM * kLdA];
  __shared__ __align__(32) __nv_bfloat16 bs[kBK * kLdB];
  __shared__ __align__(32) float stage[WM * WN][16 * 16];

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int wm = warp / WN;
  const int wn = warp % WN;
  const long long row0 = static_cast<long long>(blockIdx.y) * BM;
  const long long col0 = static_cast<long long>(blockIdx.x) * BN;

  uint4 ra[kPerThreadA] = {};
  uint4 rb[kPerThreadB] = {};
  // The slice at k0 into ra / rb (zeros outside the matrices).
  const auto fetch = [&](long long k0) {
#pragma unroll
    for (int s = 0; s < kPerThreadA; ++s) {
      const int chunk = tid + s * kThreads;
      if (chunk >= kChunksA) break;
      ra[s] = load_chunk8(op.a, op.sa0, op.sa1, op.m, op.k, row0 + chunk / (kBK / 8),
                          k0 + 8 * (chunk % (kBK / 8)), op.vec_a);
    }
#pragma unroll
    for (int s = 0; s < kPerThreadB; ++s) {
      const int chunk = tid + s * kThreads;
      if (chunk >= kChunksB) break;
      rb[s] = load_chunk8(op.b, op.sb0, op.sb1, op.k, op.n, k0 + chunk / (BN / 8),
                          col0 + 8 * (chunk % (BN / 8)), op.vec_b);
    }
  };
  // ra / rb into the shared slices.
  const auto stash = [&] {
#pragma unroll
    for (int s = 0; s < kPerThreadA; ++s) {
      const int chunk = tid + s * kThreads;
      if (chunk >= kChunksA) break;
      store_bf16x8(&as[(chunk / (kBK / 8)) * kLdA + 8 * (chunk % (kBK / 8))], ra[s]);
    }
#pragma unroll
    for (int s = 0; s < kPerThreadB; ++s) {
      const int chunk = tid + s * kThreads;
      if (chunk >= kChunksB) break;
      store_bf16x8(&bs[(chunk / (BN / 8)) * kLdB + 8 * (chunk % (BN / 8))], rb[s]);
    }
  };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kFragM][kFragN];
#pragma unroll
  for (int i = 0; i < kFragM; ++i) {
#pragma unroll
    for (int j = 0; j < kFragN; ++j) wmma::fill_fragment(acc[i][j], 0.0F);
  }
  fetch(0);
  stash();
  __syncthreads();
  for (long long k0 = 0; k0 < op.k; k0 += kBK) {
    const bool more = k0 + kBK < op.k;
    if (more) fetch(k0 + kBK);  // in flight during this slice's MMAs
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[kFragM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb[kFragN];
#pragma unroll
      for (int i = 0; i < kFragM; ++i) {
        wmma::load_matrix_sync(fa[i], &as[(wm * kWarpM + 16 * i) * kLdA + kk], kLdA);
      }
#pragma unroll
      for (int j = 0; j < kFragN; ++j) {
        wmma::load_matrix_sync(fb[j], &bs[kk * kLdB + wn * kWarpN + 16 * j], kLdB);
      }
#pragma unroll
      for (int i = 0; i < kFragM; ++i) {
#pragma unroll
        for (int j = 0; j < kFragN; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
      }
    }
    __syncthreads();  // every warp is done reading this slice
    if (more) {
      stash();
      __syncthreads();
    }
  }

  float* st = stage[warp];
#pragma unroll
  for (int i = 0; i < kFragM; ++i) {
#pragma unroll
    for (int j = 0; j < kFragN; ++j) {
      wmma::store_matrix_sync(st, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      const long long r0 = row0 + wm * kWarpM + 16 * i;
      const long long c0 = col0 + wn * kWarpN + 16 * j;
      for (int e = lane; e < 16 * 16; e += 32) {
        const long long r = r0 + e / 16;
        const long long c = c0 + e % 16;
        if (r < op.m && c < op.n) {
          op.c[r * op.sc0 + c * op.sc1] =
              __float2bfloat16(apply_epilogue(op.epilogue, op.alpha * st[e]));
        }
      }
      __syncwarp();  // the stage is read before the next fragment overwrites it
    }
  }
}

// ---- launch plan (host) -----------------------------------------------------------------------

/// A compiled bf16 GEMM: its tunables and kernel.
struct Bf16GemmVariant {
  int bm, bn, wm, wn;
  void (*kernel)(Bf16GemmOperands);
};

/// Every compiled variant (KA_CUDA_BF16_GEMM_VARIANTS), in its order.
inline const std::vector<Bf16GemmVariant>& bf16_gemm_variants() {
#define KA_BF16_VARIANT(BM, BN, WM, WN) \
  Bf16GemmVariant{BM, BN, WM, WN, &gemm_bf16_wmma<BM, BN, WM, WN>},
  static const std::vector<Bf16GemmVariant> all = {KA_CUDA_BF16_GEMM_VARIANTS(KA_BF16_VARIANT)};
#undef KA_BF16_VARIANT
  return all;
}

/// The variant a config names; null when none is compiled.
inline const Bf16GemmVariant* find_bf16_gemm_variant(const LaunchConfig& config) {
  for (const Bf16GemmVariant& v : bf16_gemm_variants()) {
    if (v.bm == config.get_or("tile_m", 0) && v.bn == config.get_or("tile_n", 0) &&
        v.wm == config.get_or("warps_m", 0) && v.wn == config.get_or("warps_n", 0)) {
      return &v;
    }
  }
  return nullptr;
}

/// One bf16 GEMM call; v null: nothing to launch (an empty output).
struct Bf16GemmLaunch {
  const Bf16GemmVariant* v = nullptr;
  Bf16GemmOperands op{};
};

/// Validates a bf16 mm (throws ka::ValueError on bad arguments, naming them; a config outside
/// the space, or not compiled, is a Status) and lays out its launch. The device's limits are
/// the caller's check (KernelDescriptor::can_run).
inline Status plan_gemm_bf16(const AddmmArgs& args, const LaunchConfig& config,
                             Bf16GemmLaunch& l) {
  const TensorView* t[3] = {&args.out, &args.mat1, &args.mat2};
  const char* names[3] = {"out", "mat1", "mat2"};
  for (int i = 0; i < 3; ++i) {
    KA_CHECK(t[i]->dtype == DType::kBFloat16, "gemm_bf16_cuda: ", names[i], " has dtype ",
             long_name(t[i]->dtype), "; this kernel takes bfloat16");
    KA_CHECK(t[i]->device.type == DeviceType::kCUDA, "gemm_bf16_cuda: ", names[i], " is on ",
             t[i]->device.str(), "; this kernel runs on cuda");
    KA_CHECK(t[i]->ndim == 2, "gemm_bf16_cuda: ", names[i], " has shape ", t[i]->shape_str(),
             "; expected a matrix");
  }
  const long long m = args.mat1.size(0);
  const long long k = args.mat1.size(1);
  const long long n = args.mat2.size(1);
  KA_CHECK(args.mat2.size(0) == k, "gemm_bf16_cuda: mat1 ", args.mat1.shape_str(), " and mat2 ",
           args.mat2.shape_str(), " cannot be multiplied");
  KA_CHECK(args.out.size(0) == m && args.out.size(1) == n, "gemm_bf16_cuda: out has shape ",
           args.out.shape_str(), ", expected [", m, ", ", n, "]");
  KA_CHECK(args.self.data == nullptr || args.beta == 0.0F,
           "gemm_bf16_cuda: no bias term (aten::mm); self must be absent or beta 0");
  KA_CHECK(static_cast<int>(args.epilogue) <= static_cast<int>(Epilogue::kSilu),
           "gemm_bf16_cuda: unknown epilogue ", static_cast<int>(args.epilogue));
  if (Status st = gemm_bf16_cuda_descriptor().space.check(config); !st) return st;
  l = Bf16GemmLaunch{};
  l.v = find_bf16_gemm_variant(config);
  if (l.v == nullptr) {
    return Status::unsupported("no compiled bf16 GEMM variant for " + config.str());
  }
  Bf16GemmOperands& op = l.op;
  op.m = m;
  op.n = n;
  op.k = k;
  op.a = static_cast<const __nv_bfloat16*>(args.mat1.data);
  op.sa0 = args.mat1.stride(0);
  op.sa1 = args.mat1.stride(1);
  op.b = static_cast<const __nv_bfloat16*>(args.mat2.data);
  op.sb0 = args.mat2.stride(0);
  op.sb1 = args.mat2.stride(1);
  op.c = static_cast<__nv_bfloat16*>(args.out.data);
  op.sc0 = args.out.stride(0);
  op.sc1 = args.out.stride(1);
  op.alpha = args.alpha;
  op.epilogue = args.epilogue;
  op.vec_a = bf16x8_rows(op.a, op.sa0, op.sa1);
  op.vec_b = bf16x8_rows(op.b, op.sb0, op.sb1);
  if (m == 0 || n == 0) l.v = nullptr;
  return Status::ok();
}

/// Launches l through `launch(kernel, grid, block, operands)`.
template <class Launcher>
void run_gemm_bf16(const Bf16GemmLaunch& l, Launcher&& launch) {
  if (l.v == nullptr) return;
  const Bf16GemmVariant& v = *l.v;
  const dim3 grid(static_cast<unsigned>(ceil_div(l.op.n, v.bn)),
                  static_cast<unsigned>(ceil_div(l.op.m, v.bm)));
  launch(v.kernel, grid, dim3(static_cast<unsigned>(v.wm * v.wn * 32)), l.op);
}

}  // namespace ka::kernels::cuda_detail
