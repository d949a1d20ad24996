// The CUDA bf16 GEMM's launcher: plans the call (gemm_bf16_cuda_kernels.cuh), checks the config
// against the device and launches on the caller's stream.
#include "stream_launcher.hpp"

#include <ka/kernels/detail/gemm_bf16_cuda_kernels.cuh>
#include <ka/kernels/gemm.hpp>

namespace ka::kernels {

Status gemm_bf16_cuda(const AddmmArgs& args, const LaunchConfig& config, void* stream) {
  cuda_detail::Bf16GemmLaunch l;
  if (Status st = cuda_detail::plan_gemm_bf16(args, config, l); !st) return st;
  const ShapeKey key = mm_bf16_shape_key(l.op.m, l.op.k, l.op.n);
  if (Status st = gemm_bf16_cuda_descriptor().can_run(key, config); !st) return st;
  cuda_detail::run_gemm_bf16(l, cuda_detail::StreamLauncher{cuda_detail::as_stream(stream)});
  return Status::ok();
}

}  // namespace ka::kernels
