// The CUDA element-wise kernel: a grid-stride loop evaluating an EwProgram per output element.
// Dense operands (every input contiguous like out, or one broadcast value) take a path with
// float4 loads where aligned; anything else walks collapsed strides.
#include "cuda_check.hpp"
#include "elementwise_device.cuh"

#include <ka/core/error.hpp>
#include <ka/kernels/elementwise.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace ka::kernels {
namespace {

using cuda_detail::kMaxTensors;
using cuda_detail::Layout;
constexpr int kMaxInputs = EwProgram::kMaxInputs;
// Every kernel must launch at the space's largest block: (1024, 1) caps registers at 64.
constexpr int kMaxBlockThreads = 1024;

struct InputPtrs {
  const float* p[kMaxInputs];
};

// Not inlined: each kernel evaluates the program at several unrolled sites, and one copy of
// the interpreter keeps compile time and instruction cache footprint small.
__device__ __noinline__ float eval_at(const EwProgram& prog, const float* in) {
  return cuda_detail::eval_program(prog, in);
}

__device__ __forceinline__ long long global_thread() {
  return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long grid_threads() {
  return static_cast<long long>(gridDim.x) * blockDim.x;
}

// Dense operands, one float per item. Bit j of `scalar_mask` marks input j as one value.
// `out` may alias an input exactly (in-place ops), so no __restrict__.
template <int kItems>
__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    ew_dense(__grid_constant__ const EwProgram prog, float* out,
             __grid_constant__ const InputPtrs in, unsigned scalar_mask, long long begin,
             long long n) {
  const long long stride = grid_threads();
  const int nin = prog.inputs;
  for (long long i0 = begin + global_thread(); i0 < n; i0 += stride * kItems) {
    float xs[kItems][kMaxInputs];
    // All loads first, for memory-level parallelism.
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const long long i = i0 + k * stride;
#pragma unroll
      for (int j = 0; j < kMaxInputs; ++j) {
        if (j < nin && i < n) xs[k][j] = in.p[j][((scalar_mask >> j) & 1U) != 0 ? 0 : i];
      }
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const long long i = i0 + k * stride;
      if (i < n) out[i] = eval_at(prog, xs[k]);
    }
  }
}

// Dense operands, float4 loads and stores: every non-scalar pointer is 16-byte aligned. Covers
// the first 4 * (n / 4) elements; the launcher runs ew_dense<1> on the tail.
template <int kItems>
__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    ew_dense_vec4(__grid_constant__ const EwProgram prog, float* out,
                  __grid_constant__ const InputPtrs in, unsigned scalar_mask, long long nvec) {
  const long long stride = grid_threads();
  const int nin = prog.inputs;
  for (long long v0 = global_thread(); v0 < nvec; v0 += stride * kItems) {
    float4 xs[kItems][kMaxInputs];
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const long long v = v0 + k * stride;
#pragma unroll
      for (int j = 0; j < kMaxInputs; ++j) {
        if (j < nin && v < nvec) {
          if (((scalar_mask >> j) & 1U) != 0) {
            const float s = in.p[j][0];
            xs[k][j] = make_float4(s, s, s, s);
          } else {
            xs[k][j] = reinterpret_cast<const float4*>(in.p[j])[v];
          }
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const long long v = v0 + k * stride;
      if (v >= nvec) continue;
      float lane[kMaxInputs];
      float4 r;
#pragma unroll
      for (int j = 0; j < kMaxInputs; ++j) lane[j] = xs[k][j].x;
      r.x = eval_at(prog, lane);
#pragma unroll
      for (int j = 0; j < kMaxInputs; ++j) lane[j] = xs[k][j].y;
      r.y = eval_at(prog, lane);
#pragma unroll
      for (int j = 0; j < kMaxInputs; ++j) lane[j] = xs[k][j].z;
      r.z = eval_at(prog, lane);
#pragma unroll
      for (int j = 0; j < kMaxInputs; ++j) lane[j] = xs[k][j].w;
      r.w = eval_at(prog, lane);
      reinterpret_cast<float4*>(out)[v] = r;
    }
  }
}

// Any strides: offsets from the collapsed layout (tensor 0 is out, tensor 1 + j input j), with
// `Index` arithmetic for the linear index (see Layout::offsets).
template <typename Index>
__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    ew_strided(__grid_constant__ const EwProgram prog, float* out,
               __grid_constant__ const InputPtrs in, __grid_constant__ const Layout layout,
               long long n, int items) {
  const long long stride = grid_threads();
  const int nin = prog.inputs;
  for (long long i0 = global_thread(); i0 < n; i0 += stride * items) {
    for (int k = 0; k < items; ++k) {
      const long long i = i0 + k * stride;
      if (i >= n) break;
      long long off[kMaxTensors];
      layout.offsets(static_cast<Index>(i), off);
      float xs[kMaxInputs];
      for (int j = 0; j < nin; ++j) xs[j] = in.p[j][off[j + 1]];
      out[off[0]] = eval_at(prog, xs);
    }
  }
}

// Grid blocks for `units` work items at `per_block` items per block; the grid-stride loops
// cover whatever a capped grid leaves.
unsigned grid_for(long long units, long long per_block) {
  constexpr long long kMaxBlocks = 1LL << 20;
  return static_cast<unsigned>(
      std::clamp<long long>((units + per_block - 1) / per_block, 1, kMaxBlocks));
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15U) == 0; }

template <int kItems>
void launch_dense(const EwProgram& prog, float* out, const InputPtrs& in, unsigned mask,
                  long long n, unsigned threads, cudaStream_t stream) {
  ew_dense<kItems>
      <<<grid_for(n, threads * kItems), threads, 0, stream>>>(prog, out, in, mask, 0, n);
}

template <int kItems>
void launch_vec4(const EwProgram& prog, float* out, const InputPtrs& in, unsigned mask, long long n,
                 unsigned threads, cudaStream_t stream) {
  const long long nvec = n / 4;
  if (nvec > 0) {
    ew_dense_vec4<kItems>
        <<<grid_for(nvec, threads * kItems), threads, 0, stream>>>(prog, out, in, mask, nvec);
  }
  if (nvec * 4 < n) ew_dense<1><<<1, 32, 0, stream>>>(prog, out, in, mask, nvec * 4, n);
}

}  // namespace

Status elementwise_f32_cuda(const ElementwiseArgs& args, const LaunchConfig& config, void* stream) {
  cuda_detail::validate_program_inputs("elementwise_f32_cuda", args.out, args.inputs.data(),
                                       args.program);
  if (Status st = elementwise_f32_cuda_descriptor().space.check(config); !st) return st;
  const long long n = args.out.numel();
  if (n == 0) return Status::ok();
  const auto threads = static_cast<unsigned>(config.get_or("block_threads", 256));
  const auto items = static_cast<int>(config.get_or("items_per_thread", 1));
  const int nin = args.program.inputs;

  const TensorView* views[kMaxTensors] = {&args.out};
  InputPtrs in{};
  for (int j = 0; j < nin; ++j) {
    views[j + 1] = &args.inputs[static_cast<std::size_t>(j)];
    in.p[j] = args.inputs[static_cast<std::size_t>(j)].data_as<const float>();
  }
  const Layout layout = cuda_detail::make_layout(views, nin + 1, args.out.ndim,
                                                 cuda_detail::dim_range(0, args.out.ndim));
  float* out = args.out.data_as<float>();
  cudaStream_t s = cuda_detail::as_stream(stream);

  // Dense: after collapsing, out is one unit-stride run and each input is either the same run
  // or one broadcast value.
  bool dense = layout.ndim == 0 || (layout.ndim == 1 && layout.strides[0][0] == 1);
  unsigned scalar_mask = 0;
  bool vec4 = aligned16(out);
  for (int j = 0; j < nin && dense; ++j) {
    const long long st = layout.ndim == 0 ? 0 : layout.strides[j + 1][0];
    dense = st == 0 || st == 1;
    if (st == 0) {
      scalar_mask |= 1U << j;
    } else {
      vec4 = vec4 && aligned16(in.p[j]);
    }
  }

  if (!dense) {
    const unsigned blocks = grid_for(n, threads * static_cast<unsigned>(items));
    if (n <= INT32_MAX) {
      ew_strided<unsigned><<<blocks, threads, 0, s>>>(args.program, out, in, layout, n, items);
    } else {
      ew_strided<long long><<<blocks, threads, 0, s>>>(args.program, out, in, layout, n, items);
    }
  } else if (vec4) {
    switch (items) {
      case 1:
      case 2:
      case 4:
        launch_vec4<1>(args.program, out, in, scalar_mask, n, threads, s);
        break;
      default:  // 8: two float4s per step; more would spill under the 64-register cap
        launch_vec4<2>(args.program, out, in, scalar_mask, n, threads, s);
        break;
    }
  } else {
    switch (items) {
      case 1:
        launch_dense<1>(args.program, out, in, scalar_mask, n, threads, s);
        break;
      case 2:
        launch_dense<2>(args.program, out, in, scalar_mask, n, threads, s);
        break;
      case 4:
        launch_dense<4>(args.program, out, in, scalar_mask, n, threads, s);
        break;
      default:
        launch_dense<8>(args.program, out, in, scalar_mask, n, threads, s);
        break;
    }
  }
  KA_CUDA_CHECK(cudaGetLastError());
  return Status::ok();
}

}  // namespace ka::kernels
