// The CUDA element-wise kernel's launcher: validates and plans the call
// (elementwise_cuda_kernels.cuh) and launches the planned kernel on the caller's stream.
#include "stream_launcher.hpp"

#include <ka/kernels/detail/elementwise_cuda_kernels.cuh>
#include <ka/kernels/elementwise.hpp>

#include <cuda_runtime.h>

namespace ka::kernels {

Status elementwise_f32_cuda(const ElementwiseArgs& args, const LaunchConfig& config, void* stream) {
  cuda_detail::ElementwiseLaunch l;
  if (Status st = cuda_detail::plan_elementwise(args, config, l); !st) return st;
  cuda_detail::run_elementwise(args, l,
                               cuda_detail::StreamLauncher{cuda_detail::as_stream(stream)});
  return Status::ok();
}

}  // namespace ka::kernels
