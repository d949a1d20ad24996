// Tiled CUDA SGEMM with addmm semantics: shared-memory tiles of tile_m x tile_k (A) and
// tile_k x tile_n (B), each thread accumulating a thread_m x thread_n register tile.
// Compiled on every machine with nvcc; it runs where a GPU is visible.
#include "cuda_check.hpp"
#include "gemm_internal.hpp"

#include <cuda_runtime.h>

namespace ka::kernels {
namespace {

template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    sgemm_tiled(long long m, long long n, long long k, const float* __restrict__ a, long long sa0,
                long long sa1, const float* __restrict__ b, long long sb0, long long sb1,
                float* __restrict__ c, long long ldc, const float* __restrict__ bias,
                long long bs0, long long bs1, float alpha, float beta) {
  constexpr int kThreads = (BM / TM) * (BN / TN);
  __shared__ float as[BK][BM];
  __shared__ float bs[BK][BN];
  const int tid = static_cast<int>(threadIdx.x);
  const long long row0 = static_cast<long long>(blockIdx.y) * BM;
  const long long col0 = static_cast<long long>(blockIdx.x) * BN;
  const int trow = tid / (BN / TN);
  const int tcol = tid % (BN / TN);

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0F;
  }

  for (long long k0 = 0; k0 < k; k0 += BK) {
    for (int i = tid; i < BM * BK; i += kThreads) {
      const int r = i / BK;
      const int kk = i % BK;
      const long long gr = row0 + r;
      const long long gk = k0 + kk;
      as[kk][r] = (gr < m && gk < k) ? a[gr * sa0 + gk * sa1] : 0.0F;
    }
    for (int i = tid; i < BK * BN; i += kThreads) {
      const int kk = i / BN;
      const int cc = i % BN;
      const long long gk = k0 + kk;
      const long long gc = col0 + cc;
      bs[kk][cc] = (gk < k && gc < n) ? b[gk * sb0 + gc * sb1] : 0.0F;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float ar[TM];
      float br[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) ar[i] = as[kk][trow * TM + i];
#pragma unroll
      for (int j = 0; j < TN; ++j) br[j] = bs[kk][tcol * TN + j];
#pragma unroll
      for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const long long r = row0 + trow * TM + i;
    if (r >= m) continue;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const long long cc = col0 + tcol * TN + j;
      if (cc >= n) continue;
      float v = alpha * acc[i][j];
      if (bias != nullptr) v += beta * bias[r * bs0 + cc * bs1];
      c[r * ldc + cc] = v;
    }
  }
}

struct Variant {
  int bm, bn, bk, tm, tn;
  void (*kernel)(long long, long long, long long, const float*, long long, long long,
                 const float*, long long, long long, float*, long long, const float*, long long,
                 long long, float, float);
};

#define KA_SGEMM_VARIANT(BM, BN, BK, TM, TN) \
  Variant { BM, BN, BK, TM, TN, &sgemm_tiled<BM, BN, BK, TM, TN> }

const Variant kVariants[] = {
    KA_SGEMM_VARIANT(32, 32, 8, 2, 2),    KA_SGEMM_VARIANT(64, 64, 8, 4, 4),
    KA_SGEMM_VARIANT(128, 128, 8, 8, 8),  KA_SGEMM_VARIANT(128, 64, 8, 8, 4),
    KA_SGEMM_VARIANT(64, 128, 8, 4, 8),   KA_SGEMM_VARIANT(32, 32, 16, 2, 2),
    KA_SGEMM_VARIANT(64, 64, 16, 4, 4),   KA_SGEMM_VARIANT(128, 128, 16, 8, 8),
    KA_SGEMM_VARIANT(128, 64, 16, 8, 4),  KA_SGEMM_VARIANT(64, 128, 16, 4, 8),
};

#undef KA_SGEMM_VARIANT

}  // namespace

bool cuda_compiled() noexcept { return true; }

Status gemm_f32_cuda(const AddmmArgs& args, const LaunchConfig& config, void* stream) {
  const GemmShape s = detail::validate_addmm(args, DeviceType::kCUDA);
  const ShapeKey key = addmm_shape_key(s.m, s.k, s.n, false);
  const KernelDescriptor& d = gemm_f32_cuda_descriptor();
  if (Status st = d.can_run(key, config); !st) return st;
  if (s.m == 0 || s.n == 0) return Status::ok();
  const auto bm = config.get_or("tile_m", 0);
  const auto bn = config.get_or("tile_n", 0);
  const auto bk = config.get_or("tile_k", 0);
  const auto tm = config.get_or("thread_m", 0);
  const auto tn = config.get_or("thread_n", 0);
  for (const Variant& v : kVariants) {
    if (v.bm == bm && v.bn == bn && v.bk == bk && v.tm == tm && v.tn == tn) {
      const detail::BiasView bias = detail::broadcast_bias(args, s.m, s.n);
      const dim3 grid(static_cast<unsigned>((s.n + bn - 1) / bn),
                      static_cast<unsigned>((s.m + bm - 1) / bm));
      const dim3 block(static_cast<unsigned>((bm / tm) * (bn / tn)));
      v.kernel<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(
          s.m, s.n, s.k, args.mat1.data_as<const float>(), args.mat1.stride(0),
          args.mat1.stride(1), args.mat2.data_as<const float>(), args.mat2.stride(0),
          args.mat2.stride(1), args.out.data_as<float>(), args.out.stride(0), bias.data,
          bias.row_stride, bias.col_stride, args.alpha, args.beta);
      KA_CUDA_CHECK(cudaGetLastError());
      return Status::ok();
    }
  }
  return Status::unsupported("no compiled SGEMM variant for " + config.str());
}

}  // namespace ka::kernels
