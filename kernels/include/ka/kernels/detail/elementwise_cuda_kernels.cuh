// The CUDA element-wise kernels (a grid-stride loop evaluating an EwProgram per output
// element) and their launch plan, apart from the launcher (elementwise_cuda.cu) so that tests
// also run plan and kernels on the CPU (tests/support/simt_host.hpp, Note [SIMT on the host]).
// plan_elementwise validates a call and picks the kernel; run_elementwise hands it and its
// arguments to a launcher (the CUDA <<<>>>, or the emulated grid). Dense operands (every input
// contiguous like out, or one broadcast value) take a path with float4 loads where aligned;
// anything else walks collapsed strides.
#pragma once

#include <ka/core/ceil_div.hpp>
#include <ka/core/error.hpp>
#include <ka/kernels/detail/elementwise_device.cuh>
#include <ka/kernels/elementwise.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace ka::kernels::cuda_detail {

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
    float xs[kItems][kMaxInputs] = {};  // the program reads only its inputs
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
    float4 xs[kItems][kMaxInputs] = {};  // the program reads only its inputs
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
            xs[k][j] = load_float4(in.p[j] + 4 * v);
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
      store_float4(out + 4 * v, r);
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

// ---- launch plan (host) -----------------------------------------------------------------------

/// Grid blocks for `units` work items at `per_block` items per block; the grid-stride loops
/// cover whatever a capped grid leaves.
inline unsigned grid_for(long long units, long long per_block) {
  constexpr long long kMaxBlocks = 1LL << 20;
  return static_cast<unsigned>(
      std::clamp<long long>(ceil_div(units, per_block), 1, kMaxBlocks));
}

/// The kernel an element-wise call takes and its operands. kNone: nothing to launch.
struct ElementwiseLaunch {
  enum class Kind { kNone, kStrided, kDense, kVec4 } kind = Kind::kNone;
  unsigned threads = 0;
  int items = 1;
  long long n = 0;
  unsigned scalar_mask = 0;  ///< dense paths: bit j marks input j as one broadcast value
  Layout layout;             ///< strided path
  InputPtrs in{};
  float* out = nullptr;
};

/// Validates an element-wise call (throws ka::ValueError on bad arguments; a config outside the
/// descriptor's space is a Status) and picks its kernel.
inline Status plan_elementwise(const ElementwiseArgs& args, const LaunchConfig& config,
                               ElementwiseLaunch& l) {
  validate_program_inputs("elementwise_f32_cuda", args.out, args.inputs.data(), args.program);
  if (Status st = elementwise_f32_cuda_descriptor().space.check(config); !st) return st;
  l = ElementwiseLaunch{};
  l.n = args.out.numel();
  if (l.n == 0) return Status::ok();
  l.threads = static_cast<unsigned>(config.get_or("block_threads", 256));
  l.items = static_cast<int>(config.get_or("items_per_thread", 1));
  const int nin = args.program.inputs;
  const TensorView* views[kMaxTensors] = {&args.out};
  for (int j = 0; j < nin; ++j) {
    views[j + 1] = &args.inputs[static_cast<std::size_t>(j)];
    l.in.p[j] = args.inputs[static_cast<std::size_t>(j)].data_as<const float>();
  }
  l.layout = make_layout(views, nin + 1, args.out.ndim, dim_range(0, args.out.ndim));
  l.out = args.out.data_as<float>();
  // Dense: after collapsing, out is one unit-stride run and each input is either the same run
  // or one broadcast value.
  const auto aligned16 = [](const void* p) {
    return (reinterpret_cast<std::uintptr_t>(p) & 15U) == 0;
  };
  bool dense = l.layout.ndim == 0 || (l.layout.ndim == 1 && l.layout.strides[0][0] == 1);
  bool vec4 = aligned16(l.out);
  for (int j = 0; j < nin && dense; ++j) {
    const long long st = l.layout.ndim == 0 ? 0 : l.layout.strides[j + 1][0];
    dense = st == 0 || st == 1;
    if (st == 0) {
      l.scalar_mask |= 1U << j;
    } else {
      vec4 = vec4 && aligned16(l.in.p[j]);
    }
  }
  l.kind = !dense ? ElementwiseLaunch::Kind::kStrided
           : vec4 ? ElementwiseLaunch::Kind::kVec4
                  : ElementwiseLaunch::Kind::kDense;
  return Status::ok();
}

/// Launches l's kernel through `launch(kernel, blocks, threads, kernel arguments...)`.
template <class Launcher>
void run_elementwise(const ElementwiseArgs& args, const ElementwiseLaunch& l, Launcher&& launch) {
  const EwProgram& prog = args.program;
  const unsigned threads = l.threads;
  switch (l.kind) {
    case ElementwiseLaunch::Kind::kNone:
      return;
    case ElementwiseLaunch::Kind::kStrided: {
      const unsigned blocks = grid_for(l.n, threads * static_cast<unsigned>(l.items));
      if (l.n <= INT32_MAX) {
        launch(&ew_strided<unsigned>, blocks, threads, prog, l.out, l.in, l.layout, l.n, l.items);
      } else {
        launch(&ew_strided<long long>, blocks, threads, prog, l.out, l.in, l.layout, l.n, l.items);
      }
      return;
    }
    case ElementwiseLaunch::Kind::kVec4: {
      // 8 items: two float4s per step; more would spill under the 64-register cap.
      const int k = l.items >= 8 ? 2 : 1;
      const long long nvec = l.n / 4;
      if (nvec > 0) {
        launch(k == 2 ? &ew_dense_vec4<2> : &ew_dense_vec4<1>,
               grid_for(nvec, threads * static_cast<unsigned>(k)), threads, prog, l.out, l.in,
               l.scalar_mask, nvec);
      }
      if (nvec * 4 < l.n) {
        launch(&ew_dense<1>, 1U, 32U, prog, l.out, l.in, l.scalar_mask, nvec * 4, l.n);
      }
      return;
    }
    case ElementwiseLaunch::Kind::kDense: {
      const int k = l.items >= 8 ? 8 : l.items >= 4 ? 4 : l.items >= 2 ? 2 : 1;
      void (*kernel)(EwProgram, float*, InputPtrs, unsigned, long long, long long) =
          k == 8 ? &ew_dense<8> : k == 4 ? &ew_dense<4> : k == 2 ? &ew_dense<2> : &ew_dense<1>;
      launch(kernel, grid_for(l.n, threads * static_cast<unsigned>(k)), threads, prog, l.out, l.in,
             l.scalar_mask, 0LL, l.n);
      return;
    }
  }
}

}  // namespace ka::kernels::cuda_detail
