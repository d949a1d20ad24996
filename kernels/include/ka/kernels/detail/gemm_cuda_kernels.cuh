// The CUDA SGEMM kernels (addmm semantics, blockIdx.z over a batch) and their launch plans,
// apart from the launcher (gemm_cuda.cu) so that tests also run plan and kernels on the CPU
// (tests/support/simt_host.hpp, Note [SIMT on the host]). plan_addmm / plan_bmm validate a
// call and pick the compiled variant of its config; run_sgemm hands the kernel to a launcher.
#pragma once

#include <ka/core/ceil_div.hpp>
#include <ka/core/error.hpp>
#include <ka/kernels/detail/elementwise_device.cuh>
#include <ka/kernels/detail/gemm_cuda_variants.hpp>
#include <ka/kernels/detail/gemm_operands.hpp>
#include <ka/kernels/gemm.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ka::kernels::cuda_detail {

/// One SGEMM launch's operands: C = epilogue(alpha * A @ B + beta * bias), A [m, k], B [k, n],
/// C [m, n], each with its row and column strides in elements; entry z of a batch (blockIdx.z)
/// starts batch_* elements after entry z - 1. bias is null or broadcast to [m, n] by its
/// strides. vec_a / vec_b: the operand may be read as float4 along its unit-stride dim
/// (float4_rows); only sgemm_vec4 reads them.
struct SgemmOperands {
  long long m, n, k;
  const float* a;
  long long sa0, sa1;
  const float* b;
  long long sb0, sb1;
  float* c;
  long long sc0, sc1;
  const float* bias;
  long long bs0, bs1;
  float alpha, beta;
  Epilogue epilogue;
  long long batch_a, batch_b, batch_c;
  bool vec_a, vec_b;
};

/// Whether an operand's rows can be read as aligned float4s along its columns: unit column
/// stride, row and batch strides multiples of 4, 16-byte aligned start.
__host__ __device__ inline bool float4_rows(const float* p, long long row_stride,
                                            long long col_stride, long long batch_stride) {
  return col_stride == 1 && row_stride % 4 == 0 && batch_stride % 4 == 0 &&
         reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// x[r][c..c+3] of a rows x cols matrix with strides (s0, s1): one float4 load where `vec`
// allows it (float4_rows) and the four are in bounds, else four guarded loads (zeros outside).
__device__ __forceinline__ float4 load_chunk4(const float* x, long long s0, long long s1,
                                              long long rows, long long cols, long long r,
                                              long long c, bool vec) {
  if (vec && r < rows && c + 3 < cols) return load_float4(x + r * s0 + c);
  float v[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = (r < rows && c + j < cols) ? x[r * s0 + (c + j) * s1] : 0.0F;
  return make_float4(v[0], v[1], v[2], v[3]);
}

// The value at (r, c) of the output tile a thread holds, epilogue applied, stored if in range.
__device__ __forceinline__ void store_output(const SgemmOperands& op, float* c, long long r,
                                             long long col, float acc) {
  if (r >= op.m || col >= op.n) return;
  float v = op.alpha * acc;
  if (op.bias != nullptr) v += op.beta * op.bias[r * op.bs0 + col * op.bs1];
  c[r * op.sc0 + col * op.sc1] = apply_epilogue(op.epilogue, v);
}

/// Shared-memory tiles of BM x BK (A) and BK x BN (B), each thread accumulating a TM x TN
/// register tile; every global load is one float. The activation epilogue is a runtime
/// switch at the store (uniform across the grid) rather than a template parameter, which
/// would multiply the compiled variants by 6.
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN)) sgemm_tiled(const SgemmOperands op) {
  constexpr int kThreads = (BM / TM) * (BN / TN);
  const float* a = op.a + static_cast<long long>(blockIdx.z) * op.batch_a;
  const float* b = op.b + static_cast<long long>(blockIdx.z) * op.batch_b;
  float* c = op.c + static_cast<long long>(blockIdx.z) * op.batch_c;
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

  for (long long k0 = 0; k0 < op.k; k0 += BK) {
    for (int i = tid; i < BM * BK; i += kThreads) {
      const int r = i / BK;
      const int kk = i % BK;
      const long long gr = row0 + r;
      const long long gk = k0 + kk;
      as[kk][r] = (gr < op.m && gk < op.k) ? a[gr * op.sa0 + gk * op.sa1] : 0.0F;
    }
    for (int i = tid; i < BK * BN; i += kThreads) {
      const int kk = i / BN;
      const int cc = i % BN;
      const long long gk = k0 + kk;
      const long long gc = col0 + cc;
      bs[kk][cc] = (gk < op.k && gc < op.n) ? b[gk * op.sb0 + gc * op.sb1] : 0.0F;
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
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      store_output(op, c, row0 + trow * TM + i, col0 + tcol * TN + j, acc[i][j]);
    }
  }
}

// Note [Vector SGEMM]
// sgemm_tiled issues one 4-byte global load per element and waits for each tile before it
// computes on it. sgemm_vec4 reads A along k and B along n in float4s where the operand's
// layout allows (vec_a, vec_b: unit stride along that dim, 16-byte aligned rows; else four
// guarded scalar loads fill the same float4, and so do the tiles' ragged edges), and fetches
// the next K slice into registers while it computes on the current one in shared memory, so
// the global loads' latency hides behind BK steps of FMAs; one barrier pair per slice. A is
// stored transposed (as[k][m]) so that both operands' per-thread fragments are float4 reads
// of shared memory: thread_m and thread_n are multiples of 4. The `vec` tunable chooses
// between the two kernels; ka_gpu_bench (run by scripts/device-check.sh) sweeps both against
// cuBLAS.
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN)) sgemm_vec4(const SgemmOperands op) {
  static_assert(BK % 4 == 0 && BN % 4 == 0 && TM % 4 == 0 && TN % 4 == 0,
                "sgemm_vec4 moves float4s along k (A), n (B) and the thread tiles");
  constexpr int kThreads = (BM / TM) * (BN / TN);
  constexpr int kSlotsA = BM * BK / 4;  // float4s of an A slice: 4 consecutive k of a row
  constexpr int kSlotsB = BK * BN / 4;  // float4s of a B slice: 4 consecutive n of a row
  constexpr int kPerThreadA = ceil_div(kSlotsA, kThreads);
  constexpr int kPerThreadB = ceil_div(kSlotsB, kThreads);
  const float* a = op.a + static_cast<long long>(blockIdx.z) * op.batch_a;
  const float* b = op.b + static_cast<long long>(blockIdx.z) * op.batch_b;
  float* c = op.c + static_cast<long long>(blockIdx.z) * op.batch_c;
  __shared__ __align__(16) float as[BK][BM];
  __shared__ __align__(16) float bs[BK][BN];
  const int tid = static_cast<int>(threadIdx.x);
  const long long row0 = static_cast<long long>(blockIdx.y) * BM;
  const long long col0 = static_cast<long long>(blockIdx.x) * BN;
  const int trow = tid / (BN / TN);
  const int tcol = tid % (BN / TN);

  float4 ra[kPerThreadA] = {};  // (a thread's spare slots stay unused; the host compiler
  float4 rb[kPerThreadB] = {};  // cannot tell, and warns)
  // The slice at k0 into ra / rb (zeros outside the matrices).
  const auto fetch = [&](long long k0) {
#pragma unroll
    for (int s = 0; s < kPerThreadA; ++s) {
      const int slot = tid + s * kThreads;
      if (slot >= kSlotsA) break;
      ra[s] = load_chunk4(a, op.sa0, op.sa1, op.m, op.k, row0 + slot / (BK / 4),
                          k0 + 4 * (slot % (BK / 4)), op.vec_a);
    }
#pragma unroll
    for (int s = 0; s < kPerThreadB; ++s) {
      const int slot = tid + s * kThreads;
      if (slot >= kSlotsB) break;
      rb[s] = load_chunk4(b, op.sb0, op.sb1, op.k, op.n, k0 + slot / (BN / 4),
                          col0 + 4 * (slot % (BN / 4)), op.vec_b);
    }
  };
  // ra / rb into the shared tiles.
  const auto stash = [&] {
#pragma unroll
    for (int s = 0; s < kPerThreadA; ++s) {
      const int slot = tid + s * kThreads;
      if (slot >= kSlotsA) break;
      const int r = slot / (BK / 4);
      const int kq = 4 * (slot % (BK / 4));
      as[kq][r] = ra[s].x;
      as[kq + 1][r] = ra[s].y;
      as[kq + 2][r] = ra[s].z;
      as[kq + 3][r] = ra[s].w;
    }
#pragma unroll
    for (int s = 0; s < kPerThreadB; ++s) {
      const int slot = tid + s * kThreads;
      if (slot >= kSlotsB) break;
      store_float4(&bs[slot / (BN / 4)][4 * (slot % (BN / 4))], rb[s]);
    }
  };

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0F;
  }
  fetch(0);
  stash();
  __syncthreads();
  for (long long k0 = 0; k0 < op.k; k0 += BK) {
    const bool more = k0 + BK < op.k;
    if (more) fetch(k0 + BK);  // in flight during this slice's FMAs
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float ar[TM];
      float br[TN];
#pragma unroll
      for (int i = 0; i < TM; i += 4) {
        const float4 v = load_float4(&as[kk][trow * TM + i]);
        ar[i] = v.x;
        ar[i + 1] = v.y;
        ar[i + 2] = v.z;
        ar[i + 3] = v.w;
      }
#pragma unroll
      for (int j = 0; j < TN; j += 4) {
        const float4 v = load_float4(&bs[kk][tcol * TN + j]);
        br[j] = v.x;
        br[j + 1] = v.y;
        br[j + 2] = v.z;
        br[j + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
      }
    }
    __syncthreads();  // every thread is done reading this slice
    if (more) {
      stash();
      __syncthreads();
    }
  }

#pragma unroll
  for (int i = 0; i < TM; ++i) {
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      store_output(op, c, row0 + trow * TM + i, col0 + tcol * TN + j, acc[i][j]);
    }
  }
}

// ---- launch plans (host) ----------------------------------------------------------------------

/// A compiled SGEMM: its tunables and kernel.
struct SgemmVariant {
  int bm, bn, bk, tm, tn, vec;
  void (*kernel)(SgemmOperands);
};

// The kernel of a variant: one-float loads (vec 1) or float4 loads (vec 4).
template <int BM, int BN, int BK, int TM, int TN, int VEC>
constexpr SgemmVariant sgemm_variant() {
  if constexpr (VEC == 4) {
    return {BM, BN, BK, TM, TN, VEC, &sgemm_vec4<BM, BN, BK, TM, TN>};
  } else {
    return {BM, BN, BK, TM, TN, VEC, &sgemm_tiled<BM, BN, BK, TM, TN>};
  }
}

/// Every compiled variant (KA_CUDA_SGEMM_VARIANTS), in its order.
inline const std::vector<SgemmVariant>& sgemm_variants() {
#define KA_SGEMM_VARIANT(BM, BN, BK, TM, TN, VEC) sgemm_variant<BM, BN, BK, TM, TN, VEC>(),
  static const std::vector<SgemmVariant> all = {KA_CUDA_SGEMM_VARIANTS(KA_SGEMM_VARIANT)};
#undef KA_SGEMM_VARIANT
  return all;
}

/// The variant a config names; null when none is compiled.
inline const SgemmVariant* find_sgemm_variant(const LaunchConfig& config) {
  const auto bm = config.get_or("tile_m", 0);
  const auto bn = config.get_or("tile_n", 0);
  const auto bk = config.get_or("tile_k", 0);
  const auto tm = config.get_or("thread_m", 0);
  const auto tn = config.get_or("thread_n", 0);
  const auto vec = config.get_or("vec", 1);
  for (const SgemmVariant& v : sgemm_variants()) {
    if (v.bm == bm && v.bn == bn && v.bk == bk && v.tm == tm && v.tn == tn && v.vec == vec) {
      return &v;
    }
  }
  return nullptr;
}

/// One SGEMM call: `batch` GEMMs (batch_* apart in op) with variant v. v null: nothing to
/// launch (an empty output).
struct SgemmLaunch {
  const SgemmVariant* v = nullptr;
  SgemmOperands op{};
  long long batch = 1;
};

// The operands of C = A @ B over views whose last two dims are the matrices (a leading dim
// is the batch): sizes, strides, batch strides; alpha 1, no bias, no activation.
inline SgemmOperands sgemm_operands(const TensorView& a, const TensorView& b,
                                    const TensorView& c) {
  const int r = a.ndim - 2;
  SgemmOperands op{};
  op.m = a.size(r);
  op.k = a.size(r + 1);
  op.n = b.size(r + 1);
  op.a = a.data_as<const float>();
  op.sa0 = a.stride(r);
  op.sa1 = a.stride(r + 1);
  op.b = b.data_as<const float>();
  op.sb0 = b.stride(r);
  op.sb1 = b.stride(r + 1);
  op.c = c.data_as<float>();
  op.sc0 = c.stride(r);
  op.sc1 = c.stride(r + 1);
  op.alpha = 1.0F;
  op.epilogue = Epilogue::kNone;
  if (r == 1) {
    op.batch_a = a.stride(0);
    op.batch_b = b.stride(0);
    op.batch_c = c.stride(0);
  }
  return op;
}

// The variant of a config checked against the space; fills l.v and op's float4 flags.
inline Status pick_variant(const KernelDescriptor& d, const LaunchConfig& config, SgemmLaunch& l) {
  if (Status st = d.space.check(config); !st) return st;
  l.v = find_sgemm_variant(config);
  if (l.v == nullptr) return Status::unsupported("no compiled SGEMM variant for " + config.str());
  l.op.vec_a = float4_rows(l.op.a, l.op.sa0, l.op.sa1, l.op.batch_a);
  l.op.vec_b = float4_rows(l.op.b, l.op.sb0, l.op.sb1, l.op.batch_b);
  return Status::ok();
}

/// Validates an addmm (throws ka::ValueError on bad arguments; a config outside the space, or
/// not compiled, is a Status) and lays out its launch. The device's limits are the caller's
/// check (KernelDescriptor::can_run).
inline Status plan_addmm(const AddmmArgs& args, const LaunchConfig& config, SgemmLaunch& l) {
  const GemmShape s = detail::validate_addmm(args, DeviceType::kCUDA);
  KA_CHECK(static_cast<int>(args.epilogue) <= static_cast<int>(Epilogue::kSilu),
           "gemm_f32_cuda: unknown epilogue ", static_cast<int>(args.epilogue));
  l = SgemmLaunch{};
  l.op = sgemm_operands(args.mat1, args.mat2, args.out);
  const detail::BiasView bias = detail::broadcast_bias(args, s.m, s.n);
  l.op.bias = bias.data;
  l.op.bs0 = bias.row_stride;
  l.op.bs1 = bias.col_stride;
  l.op.alpha = args.alpha;
  l.op.beta = args.beta;
  l.op.epilogue = args.epilogue;
  if (Status st = pick_variant(gemm_f32_cuda_descriptor(), config, l); !st) return st;
  if (s.m == 0 || s.n == 0) l.v = nullptr;
  return Status::ok();
}

/// As plan_addmm, for bmm.
inline Status plan_bmm(const BmmArgs& args, const LaunchConfig& config, SgemmLaunch& l) {
  const detail::BmmShape bs = detail::validate_bmm(args, DeviceType::kCUDA);
  l = SgemmLaunch{};
  l.op = sgemm_operands(args.mat1, args.mat2, args.out);
  l.batch = bs.batch;
  if (Status st = pick_variant(bmm_f32_cuda_descriptor(), config, l); !st) return st;
  if (bs.batch == 0 || bs.gemm.m == 0 || bs.gemm.n == 0) l.v = nullptr;
  return Status::ok();
}

/// Launches l through `launch(kernel, grid, block, operands)`: the output's tiles in x and y,
/// the batch in z, in slices of at most 65535 (gridDim.z's limit).
template <class Launcher>
void run_sgemm(const SgemmLaunch& l, Launcher&& launch) {
  if (l.v == nullptr) return;
  const SgemmVariant& v = *l.v;
  constexpr long long kMaxGridZ = 65535;
  const dim3 block(static_cast<unsigned>((v.bm / v.tm) * (v.bn / v.tn)));
  for (long long z0 = 0; z0 < l.batch; z0 += kMaxGridZ) {
    const long long nz = std::min(kMaxGridZ, l.batch - z0);
    const dim3 grid(static_cast<unsigned>(ceil_div(l.op.n, v.bn)),
                    static_cast<unsigned>(ceil_div(l.op.m, v.bm)), static_cast<unsigned>(nz));
    SgemmOperands slice = l.op;
    slice.a += z0 * l.op.batch_a;
    slice.b += z0 * l.op.batch_b;
    slice.c += z0 * l.op.batch_c;
    launch(v.kernel, grid, block, slice);
  }
}

}  // namespace ka::kernels::cuda_detail
