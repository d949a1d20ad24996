// The CUDA SGEMM's launcher: picks the compiled kernel (gemm_cuda_kernels.cuh) for a config
// and launches it over the output's tiles, blockIdx.z walking the batch of a bmm. Compiled on
// every machine with nvcc; it runs where a GPU is visible.
#include "cuda_check.hpp"
#include "gemm_cuda_kernels.cuh"
#include "gemm_internal.hpp"

#include <ka/core/error.hpp>

#include <cuda_runtime.h>

#include <algorithm>

namespace ka::kernels {
namespace {

using cuda_detail::SgemmOperands;

struct Variant {
  int bm, bn, bk, tm, tn, vec;
  void (*kernel)(SgemmOperands);
};

// The kernel of a variant: one-float loads (vec 1) or float4 loads (vec 4).
template <int BM, int BN, int BK, int TM, int TN, int VEC>
constexpr void (*kernel_of())(SgemmOperands) {
  if constexpr (VEC == 4) {
    return &cuda_detail::sgemm_vec4<BM, BN, BK, TM, TN>;
  } else {
    return &cuda_detail::sgemm_tiled<BM, BN, BK, TM, TN>;
  }
}

#define KA_SGEMM_VARIANT(BM, BN, BK, TM, TN, VEC) \
  Variant{BM, BN, BK, TM, TN, VEC, kernel_of<BM, BN, BK, TM, TN, VEC>()},
const Variant kVariants[] = {KA_CUDA_SGEMM_VARIANTS(KA_SGEMM_VARIANT)};
#undef KA_SGEMM_VARIANT

const Variant* find_variant(const LaunchConfig& config) {
  const auto bm = config.get_or("tile_m", 0);
  const auto bn = config.get_or("tile_n", 0);
  const auto bk = config.get_or("tile_k", 0);
  const auto tm = config.get_or("thread_m", 0);
  const auto tn = config.get_or("thread_n", 0);
  const auto vec = config.get_or("vec", 1);
  for (const Variant& v : kVariants) {
    if (v.bm == bm && v.bn == bn && v.bk == bk && v.tm == tm && v.tn == tn && v.vec == vec) {
      return &v;
    }
  }
  return nullptr;
}

// op over `batch` GEMMs (batch_* apart in op).
void launch(const Variant& v, SgemmOperands op, long long batch, cudaStream_t stream) {
  op.vec_a = cuda_detail::float4_rows(op.a, op.sa0, op.sa1, op.batch_a);
  op.vec_b = cuda_detail::float4_rows(op.b, op.sb0, op.sb1, op.batch_b);
  // gridDim.z is at most 65535: larger batches go in slices.
  constexpr long long kMaxGridZ = 65535;
  const dim3 block(static_cast<unsigned>((v.bm / v.tm) * (v.bn / v.tn)));
  for (long long z0 = 0; z0 < batch; z0 += kMaxGridZ) {
    const long long nz = std::min(kMaxGridZ, batch - z0);
    const dim3 grid(static_cast<unsigned>((op.n + v.bn - 1) / v.bn),
                    static_cast<unsigned>((op.m + v.bm - 1) / v.bm), static_cast<unsigned>(nz));
    SgemmOperands slice = op;
    slice.a += z0 * op.batch_a;
    slice.b += z0 * op.batch_b;
    slice.c += z0 * op.batch_c;
    v.kernel<<<grid, block, 0, stream>>>(slice);
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
  const detail::BiasView bias = detail::broadcast_bias(args, s.m, s.n);
  SgemmOperands op{};
  op.m = s.m;
  op.n = s.n;
  op.k = s.k;
  op.a = args.mat1.data_as<const float>();
  op.sa0 = args.mat1.stride(0);
  op.sa1 = args.mat1.stride(1);
  op.b = args.mat2.data_as<const float>();
  op.sb0 = args.mat2.stride(0);
  op.sb1 = args.mat2.stride(1);
  op.c = args.out.data_as<float>();
  op.sc0 = args.out.stride(0);
  op.sc1 = args.out.stride(1);
  op.bias = bias.data;
  op.bs0 = bias.row_stride;
  op.bs1 = bias.col_stride;
  op.alpha = args.alpha;
  op.beta = args.beta;
  op.epilogue = args.epilogue;
  launch(*v, op, 1, static_cast<cudaStream_t>(stream));
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
  SgemmOperands op{};
  op.m = s.m;
  op.n = s.n;
  op.k = s.k;
  op.a = args.mat1.data_as<const float>();
  op.sa0 = args.mat1.stride(1);
  op.sa1 = args.mat1.stride(2);
  op.b = args.mat2.data_as<const float>();
  op.sb0 = args.mat2.stride(1);
  op.sb1 = args.mat2.stride(2);
  op.c = args.out.data_as<float>();
  op.sc0 = args.out.stride(1);
  op.sc1 = args.out.stride(2);
  op.alpha = 1.0F;
  op.epilogue = Epilogue::kNone;
  op.batch_a = args.mat1.stride(0);
  op.batch_b = args.mat2.stride(0);
  op.batch_c = args.out.stride(0);
  launch(*v, op, batch, static_cast<cudaStream_t>(stream));
  return Status::ok();
}

}  // namespace ka::kernels
