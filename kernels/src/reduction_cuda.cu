// The CUDA row kernels' launcher: each entry point validates and plans its launch
// (reduction_cuda_kernels.cuh) and launches the planned kernel on the caller's stream.
#include "stream_launcher.hpp"

#include <ka/core/error.hpp>
#include <ka/kernels/detail/reduction_cuda_kernels.cuh>
#include <ka/kernels/reduction.hpp>

#include <cuda_runtime.h>

namespace ka::kernels {
Status softmax_f32_cuda(const SoftmaxArgs& args, const LaunchConfig& config, void* stream) {
  cuda_detail::SoftmaxLaunch l;
  if (Status st = cuda_detail::plan_softmax(args, config, l); !st) return st;
  if (l.blocks > 0) {
    cuda_detail::run_softmax(args, l, cuda_detail::StreamLauncher{cuda_detail::as_stream(stream)});
  }
  return Status::ok();
}

Status layer_norm_f32_cuda(const LayerNormArgs& args, const LaunchConfig& config, void* stream) {
  cuda_detail::LayerNormLaunch l;
  if (Status st = cuda_detail::plan_layer_norm(args, config, l); !st) return st;
  if (l.blocks > 0) {
    cuda_detail::run_layer_norm(args, l,
                                cuda_detail::StreamLauncher{cuda_detail::as_stream(stream)});
  }
  return Status::ok();
}

Status sum_f32_cuda(const SumArgs& args, const LaunchConfig& config, void* stream) {
  cuda_detail::SumLaunch l;
  if (Status st = cuda_detail::plan_sum(args, config, l); !st) return st;
  if (l.blocks > 0) {
    cuda_detail::run_sum(l, cuda_detail::StreamLauncher{cuda_detail::as_stream(stream)});
  }
  return Status::ok();
}

}  // namespace ka::kernels
