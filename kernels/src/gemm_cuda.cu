// Tiled CUDA SGEMM with addmm semantics: shared-memory tiles of tile_m x tile_k (A) and
// tile_k x tile_n (B), each thread accumulating a thread_m x thread_n register tile. The
// activation epilogue is a runtime switch at the store (one branch per element, uniform across
// the grid) rather than a template parameter, which would multiply the compiled variants by 6.
// blockIdx.z walks the batch of a bmm. Compiled on every machine with nvcc; it runs where a
// GPU is visible.
#include "cuda_check.hpp"
#include "elementwise_device.cuh"
#include "gemm_internal.hpp"

#include <ka/core/error.hpp>

#include <cuda_runtime.h>

#include <algorithm>

namespace ka::kernels {
namespace {

// Strides of a batch of GEMMs: blockIdx.z selects entry z of each operand (0 for a 2-D GEMM).
struct BatchStrides {
  long long a;
  long long b;
  long long c;
};

template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    sgemm_tiled(long long m, long long n, long long k, const float* __restrict__ a, long long sa0,
                long long sa1, const float* __restrict__ b, long long sb0, long long sb1,
                float* __restrict__ c, long long sc0, long long sc1, const float* __restrict__ bias,
                long long bs0, long long bs1, float alpha, float beta, Epilogue epilogue,
                BatchStrides batch) {
  constexpr int kThreads = (BM / TM) * (BN / TN);
  a += static_cast<long long>(blockIdx.z) * batch.a;
  b += static_cast<long long>(blockIdx.z) * batch.b;
  c += static_cast<long long>(blockIdx.z) * batch.c;
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
      c[r * sc0 + cc * sc1] = cuda_detail::apply_epilogue(epilogue, v);
    }
  }
}

struct Variant {
  int bm, bn, bk, tm, tn;
  void (*kernel)(long long, long long, long long, const float*, long long, long long, const float*,
                 long long, long long, float*, long long, long long, const float*, long long,
                 long long, float, float, Epilogue, BatchStrides);
};

#define KA_SGEMM_VARIANT(BM, BN, BK, TM, TN) \
  Variant { BM, BN, BK, TM, TN, &sgemm_tiled<BM, BN, BK, TM, TN> }

const Variant kVariants[] = {
    KA_SGEMM_VARIANT(32, 32, 8, 2, 2),   KA_SGEMM_VARIANT(64, 64, 8, 4, 4),
    KA_SGEMM_VARIANT(128, 128, 8, 8, 8), KA_SGEMM_VARIANT(128, 64, 8, 8, 4),
    KA_SGEMM_VARIANT(64, 128, 8, 4, 8),  KA_SGEMM_VARIANT(32, 32, 16, 2, 2),
    KA_SGEMM_VARIANT(64, 64, 16, 4, 4),  KA_SGEMM_VARIANT(128, 128, 16, 8, 8),
    KA_SGEMM_VARIANT(128, 64, 16, 8, 4), KA_SGEMM_VARIANT(64, 128, 16, 4, 8),
};

#undef KA_SGEMM_VARIANT

const Variant* find_variant(const LaunchConfig& config) {
  const auto bm = config.get_or("tile_m", 0);
  const auto bn = config.get_or("tile_n", 0);
  const auto bk = config.get_or("tile_k", 0);
  const auto tm = config.get_or("thread_m", 0);
  const auto tn = config.get_or("thread_n", 0);
  for (const Variant& v : kVariants) {
    if (v.bm == bm && v.bn == bn && v.bk == bk && v.tm == tm && v.tn == tn) return &v;
  }
  return nullptr;
}

// The operands of one launch: a GEMM, or `batch` of them `batch_strides` apart.
struct Launch {
  GemmShape s;
  const float* a;
  long long sa0, sa1;
  const float* b;
  long long sb0, sb1;
  float* c;
  long long sc0, sc1;
  detail::BiasView bias;
  float alpha = 1.0F;
  float beta = 0.0F;
  Epilogue epilogue = Epilogue::kNone;
  long long batch = 1;
  BatchStrides batch_strides{0, 0, 0};
};

void launch(const Variant& v, const Launch& l, cudaStream_t stream) {
  // gridDim.z is at most 65535: larger batches go in slices.
  constexpr long long kMaxGridZ = 65535;
  const dim3 block(static_cast<unsigned>((v.bm / v.tm) * (v.bn / v.tn)));
  for (long long z0 = 0; z0 < l.batch; z0 += kMaxGridZ) {
    const long long nz = std::min(kMaxGridZ, l.batch - z0);
    const dim3 grid(static_cast<unsigned>((l.s.n + v.bn - 1) / v.bn),
                    static_cast<unsigned>((l.s.m + v.bm - 1) / v.bm), static_cast<unsigned>(nz));
    v.kernel<<<grid, block, 0, stream>>>(l.s.m, l.s.n, l.s.k, l.a + z0 * l.batch_strides.a, l.sa0,
                                         l.sa1, l.b + z0 * l.batch_strides.b, l.sb0, l.sb1,
                                         l.c + z0 * l.batch_strides.c, l.sc0, l.sc1, l.bias.data,
                                         l.bias.row_stride, l.bias.col_stride, l.alpha, l.beta,
                                         l.epilogue, l.batch_strides);
    KA_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace

bool cuda_compiled() noexcept { return true; }

Status gemm_f32_cuda(const AddmmArgs& args, const LaunchConfig& config, void* stream) {
  const GemmShape s = detail::validate_addmm(args, DeviceType::kCUDA);
  KA_CHECK(static_cast<int>(args.epilogue) <= static_cast<int>(Epilogue::kSilu),
           "gemm_f32_cuda: unknown epilogue ", static_cast<int>(args.epilogue));
  const ShapeKey key = addmm_shape_key(s.m, s.k, s.n, false);
  const KernelDescriptor& d = gemm_f32_cuda_descriptor();
  if (Status st = d.can_run(key, config); !st) return st;
  if (s.m == 0 || s.n == 0) return Status::ok();
  const Variant* v = find_variant(config);
  if (v == nullptr) return Status::unsupported("no compiled SGEMM variant for " + config.str());
  Launch l{s,
           args.mat1.data_as<const float>(),
           args.mat1.stride(0),
           args.mat1.stride(1),
           args.mat2.data_as<const float>(),
           args.mat2.stride(0),
           args.mat2.stride(1),
           args.out.data_as<float>(),
           args.out.stride(0),
           args.out.stride(1),
           detail::broadcast_bias(args, s.m, s.n)};
  l.alpha = args.alpha;
  l.beta = args.beta;
  l.epilogue = args.epilogue;
  launch(*v, l, static_cast<cudaStream_t>(stream));
  return Status::ok();
}

Status bmm_f32_cuda(const BmmArgs& args, const LaunchConfig& config, void* stream) {
  const detail::BmmShape bs = detail::validate_bmm(args, DeviceType::kCUDA);
  const long long batch = bs.batch;
  const GemmShape s = bs.gemm;
  const ShapeKey key("aten::bmm", {TensorSpec{DType::kFloat32, {batch, s.m, s.k}, true},
                                   TensorSpec{DType::kFloat32, {batch, s.k, s.n}, true}});
  if (Status st = bmm_f32_cuda_descriptor().can_run(key, config); !st) return st;
  if (batch == 0 || s.m == 0 || s.n == 0) return Status::ok();
  const Variant* v = find_variant(config);
  if (v == nullptr) return Status::unsupported("no compiled SGEMM variant for " + config.str());
  Launch l{s,
           args.mat1.data_as<const float>(),
           args.mat1.stride(1),
           args.mat1.stride(2),
           args.mat2.data_as<const float>(),
           args.mat2.stride(1),
           args.mat2.stride(2),
           args.out.data_as<float>(),
           args.out.stride(1),
           args.out.stride(2),
           {}};
  l.batch = batch;
  l.batch_strides = {args.mat1.stride(0), args.mat2.stride(0), args.out.stride(0)};
  launch(*v, l, static_cast<cudaStream_t>(stream));
  return Status::ok();
}

}  // namespace ka::kernels
