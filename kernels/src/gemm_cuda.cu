// The CUDA SGEMM's launcher: plans the call (gemm_cuda_kernels.cuh: the compiled variant of the
// config, over the output's tiles, blockIdx.z walking the batch of a bmm), checks the config
// against the device and launches on the caller's stream. Compiled on every machine with nvcc;
// it runs where a GPU is visible.
#include "stream_launcher.hpp"

#include <ka/core/error.hpp>
#include <ka/kernels/detail/gemm_cuda_kernels.cuh>

#include <cuda_runtime.h>

#include <algorithm>

namespace ka::kernels {

bool cuda_compiled() noexcept { return true; }

Status gemm_f32_cuda(const AddmmArgs& args, const LaunchConfig& config, void* stream) {
  cuda_detail::SgemmLaunch l;
  if (Status st = cuda_detail::plan_addmm(args, config, l); !st) return st;
  const ShapeKey key = addmm_shape_key(l.op.m, l.op.k, l.op.n, false);
  if (Status st = gemm_f32_cuda_descriptor().can_run(key, config); !st) return st;
  cuda_detail::run_sgemm(l, cuda_detail::StreamLauncher{cuda_detail::as_stream(stream)});
  return Status::ok();
}

Status bmm_f32_cuda(const BmmArgs& args, const LaunchConfig& config, void* stream) {
  cuda_detail::SgemmLaunch l;
  if (Status st = cuda_detail::plan_bmm(args, config, l); !st) return st;
  const ShapeKey key("aten::bmm", {TensorSpec{DType::kFloat32, {l.batch, l.op.m, l.op.k}, true},
                                   TensorSpec{DType::kFloat32, {l.batch, l.op.k, l.op.n}, true}});
  if (Status st = bmm_f32_cuda_descriptor().can_run(key, config); !st) return st;
  cuda_detail::run_sgemm(l, cuda_detail::StreamLauncher{cuda_detail::as_stream(stream)});
  return Status::ok();
}

}  // namespace ka::kernels
