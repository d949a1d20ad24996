// The CUDA row kernels (softmax with an online max/sum, layer_norm with Welford, sum over any
// dims) and their launch plans, apart from the launcher (reduction_cuda.cu) so that tests also
// run plan and kernels on the CPU (tests/support/simt_host.hpp, Note [SIMT on the host]).
// Device code, and host code that lays out launches: plan_* validates arguments and config and
// computes a launch, run_* hands the chosen kernel and its arguments to a launcher (the CUDA
// <<<>>> in reduction_cuda.cu, the emulated grid in the tests).
//
// A block holds rows_per_block groups of block_threads / rows_per_block threads (whole warps);
// each group reduces one row with warp shuffles and, across its warps, shared memory. Rows that
// are not unit-stride (softmax over a non-last dim, sums over outer dims) take one thread per
// row instead, so neighbouring threads read neighbouring addresses.
#pragma once

#include <ka/core/ceil_div.hpp>
#include <ka/core/error.hpp>
#include <ka/kernels/detail/elementwise_device.cuh>
#include <ka/kernels/reduction.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

namespace ka::kernels::cuda_detail {

constexpr int kWarp = 32;

// ---- group reductions ---------------------------------------------------------------------

struct MaxSum {  // online softmax state: running max and sum of exp(x - max)
  float m;
  float s;
};

struct Welford {
  float n;
  float mean;
  float m2;
};

__device__ __forceinline__ float combine(float a, float b) { return a + b; }

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  // Both -inf: keep counting so that an all -inf row gives NaN, as ATen.
  if (m == -INFINITY) return {m, a.s + b.s};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ Welford combine(Welford a, Welford b) {
  const float n = a.n + b.n;
  if (n == 0.0F) return a;
  const float delta = b.mean - a.mean;
  const float wb = b.n / n;
  return {n, a.mean + delta * wb, a.m2 + b.m2 + delta * delta * a.n * wb};
}

__device__ __forceinline__ float shfl_xor(float v, int mask) {
  return __shfl_xor_sync(0xffffffffU, v, mask);
}
__device__ __forceinline__ MaxSum shfl_xor(MaxSum v, int mask) {
  return {shfl_xor(v.m, mask), shfl_xor(v.s, mask)};
}
__device__ __forceinline__ Welford shfl_xor(Welford v, int mask) {
  return {shfl_xor(v.n, mask), shfl_xor(v.mean, mask), shfl_xor(v.m2, mask)};
}

/// Reduces `v` over the group of `group_threads` (a multiple of 32) threads holding it; every
/// thread of the group gets the result. Every thread of the block must call it (it syncs).
template <typename T>
__device__ __forceinline__ T group_reduce(T v, int group_threads) {
  __shared__ T partial[kMaxBlockThreads / kWarp];
#pragma unroll
  for (int mask = kWarp / 2; mask > 0; mask /= 2) v = combine(v, shfl_xor(v, mask));
  if (group_threads == kWarp) return v;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int group_warps = group_threads / kWarp;
  const int first = warp - warp % group_warps;
  __syncthreads();  // the previous call's readers are done with `partial`
  if (threadIdx.x % kWarp == 0) partial[warp] = v;
  __syncthreads();
  T r = partial[first];
  for (int w = 1; w < group_warps; ++w) r = combine(r, partial[first + w]);
  return r;
}

// Row r of a group-per-row kernel, stepping so that every thread of a block runs the same
// number of iterations (group_reduce syncs the block).
struct GroupRows {
  int group_threads;
  int rows_per_block;
};

__device__ __forceinline__ int group_index(const GroupRows& g) {
  return static_cast<int>(threadIdx.x) / g.group_threads;
}
__device__ __forceinline__ int group_lane(const GroupRows& g) {
  return static_cast<int>(threadIdx.x) % g.group_threads;
}

__device__ __forceinline__ float prologue_at(const EwProgram& prog, const InputPtrs& in,
                                             const long long* base, const long long* step,
                                             long long j) {
  float xs[kMaxInputs];
  for (int t = 0; t < prog.inputs; ++t) xs[t] = in.p[t][base[t + 1] + j * step[t + 1]];
  return eval_at(prog, xs);
}

// Row elements each thread of a group keeps in registers between the reduction and the write,
// so that rows up to group_threads * kCachedPerThread read their inputs (and evaluate the
// prologue) once instead of twice.
constexpr int kCachedPerThread = 8;

// ---- softmax -------------------------------------------------------------------------------

// A group per row. `rows` walks the dims other than `dim` (tensor 0 out, 1 + t input t);
// `step[t]` is tensor t's stride along `dim`.
struct SoftmaxParams {
  Layout rows;
  long long step[kMaxTensors];
  long long num_rows;
  long long row_len;
};

__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    softmax_group_rows(__grid_constant__ const EwProgram prog, float* out,
                       __grid_constant__ const InputPtrs in,
                       __grid_constant__ const SoftmaxParams p, GroupRows g) {
  const bool cached = p.row_len <= static_cast<long long>(g.group_threads) * kCachedPerThread;
  const long long row_blocks = ceil_div(p.num_rows, g.rows_per_block);
  for (long long rb = blockIdx.x; rb < row_blocks; rb += gridDim.x) {
    const long long row = rb * g.rows_per_block + group_index(g);
    const bool valid = row < p.num_rows;
    long long base[kMaxTensors];
    if (valid) p.rows.offsets(row, base);
    MaxSum acc{-INFINITY, 0.0F};
    float cache[kCachedPerThread];
    if (valid && cached) {
#pragma unroll
      for (int c = 0; c < kCachedPerThread; ++c) {
        const long long j = group_lane(g) + static_cast<long long>(c) * g.group_threads;
        if (j < p.row_len) {
          cache[c] = prologue_at(prog, in, base, p.step, j);
          acc = combine(acc, MaxSum{cache[c], 1.0F});
        }
      }
    } else if (valid) {
      for (long long j = group_lane(g); j < p.row_len; j += g.group_threads) {
        acc = combine(acc, MaxSum{prologue_at(prog, in, base, p.step, j), 1.0F});
      }
    }
    acc = group_reduce(acc, g.group_threads);
    const float inv = 1.0F / acc.s;
    if (valid && cached) {
#pragma unroll
      for (int c = 0; c < kCachedPerThread; ++c) {
        const long long j = group_lane(g) + static_cast<long long>(c) * g.group_threads;
        if (j < p.row_len) out[base[0] + j * p.step[0]] = expf(cache[c] - acc.m) * inv;
      }
    } else if (valid) {
      for (long long j = group_lane(g); j < p.row_len; j += g.group_threads) {
        out[base[0] + j * p.step[0]] = expf(prologue_at(prog, in, base, p.step, j) - acc.m) * inv;
      }
    }
  }
}

// A thread per row: for a dim whose stride is not 1, consecutive rows are consecutive
// addresses, so this coalesces where a group per row would not.
__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    softmax_thread_rows(__grid_constant__ const EwProgram prog, float* out,
                        __grid_constant__ const InputPtrs in,
                        __grid_constant__ const SoftmaxParams p) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       row < p.num_rows; row += stride) {
    long long base[kMaxTensors];
    p.rows.offsets(row, base);
    MaxSum acc{-INFINITY, 0.0F};
    for (long long j = 0; j < p.row_len; ++j) {
      acc = combine(acc, MaxSum{prologue_at(prog, in, base, p.step, j), 1.0F});
    }
    const float inv = 1.0F / acc.s;
    for (long long j = 0; j < p.row_len; ++j) {
      out[base[0] + j * p.step[0]] = expf(prologue_at(prog, in, base, p.step, j) - acc.m) * inv;
    }
  }
}

// ---- layer_norm ----------------------------------------------------------------------------

// `rows` walks the leading dims and `cols` the normalized ones; tensor 0 is out, 1 + t input
// t, then weight and bias (stride 0 where absent).
struct LayerNormParams {
  Layout rows;
  Layout cols;
  long long num_rows;
  long long row_len;
  const float* weight;
  const float* bias;
  float eps;
};

__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    layer_norm_group_rows(__grid_constant__ const EwProgram prog, float* out,
                          __grid_constant__ const InputPtrs in,
                          __grid_constant__ const LayerNormParams p, GroupRows g) {
  const int nin = prog.inputs;
  const bool cached = p.row_len <= static_cast<long long>(g.group_threads) * kCachedPerThread;
  const long long row_blocks = ceil_div(p.num_rows, g.rows_per_block);
  for (long long rb = blockIdx.x; rb < row_blocks; rb += gridDim.x) {
    const long long row = rb * g.rows_per_block + group_index(g);
    const bool valid = row < p.num_rows;
    long long base[kMaxTensors];
    if (valid) p.rows.offsets(row, base);
    const auto x_at = [&](long long j, long long* off) {
      p.cols.offsets(j, off);
      float xs[kMaxInputs];
      for (int t = 0; t < nin; ++t) xs[t] = in.p[t][base[t + 1] + off[t + 1]];
      return eval_at(prog, xs);
    };
    Welford acc{0.0F, 0.0F, 0.0F};
    float cache[kCachedPerThread];
    if (valid && cached) {
#pragma unroll
      for (int c = 0; c < kCachedPerThread; ++c) {
        const long long j = group_lane(g) + static_cast<long long>(c) * g.group_threads;
        if (j < p.row_len) {
          long long off[kMaxTensors];
          cache[c] = x_at(j, off);
          acc = combine(acc, Welford{1.0F, cache[c], 0.0F});
        }
      }
    } else if (valid) {
      for (long long j = group_lane(g); j < p.row_len; j += g.group_threads) {
        long long off[kMaxTensors];
        acc = combine(acc, Welford{1.0F, x_at(j, off), 0.0F});
      }
    }
    acc = group_reduce(acc, g.group_threads);
    const float var = fmaxf(acc.m2 / static_cast<float>(p.row_len), 0.0F);
    const float rstd = 1.0F / sqrtf(var + p.eps);
    const auto store = [&](float x, const long long* off) {
      float y = (x - acc.mean) * rstd;
      if (p.weight != nullptr) y *= p.weight[off[nin + 1]];
      if (p.bias != nullptr) y += p.bias[off[nin + 2]];
      out[base[0] + off[0]] = y;
    };
    if (valid && cached) {
#pragma unroll
      for (int c = 0; c < kCachedPerThread; ++c) {
        const long long j = group_lane(g) + static_cast<long long>(c) * g.group_threads;
        if (j < p.row_len) {
          long long off[kMaxTensors];
          p.cols.offsets(j, off);
          store(cache[c], off);
        }
      }
    } else if (valid) {
      for (long long j = group_lane(g); j < p.row_len; j += g.group_threads) {
        long long off[kMaxTensors];
        const float x = x_at(j, off);
        store(x, off);
      }
    }
  }
}

// ---- sum -----------------------------------------------------------------------------------

// `kept` walks out's dims (tensor 0 out, tensor 1 in); `reduced` walks in's reduced dims.
struct SumParams {
  Layout kept;
  Layout reduced;
  long long num_out;
  long long reduced_len;
  bool index32;  ///< reduced_len fits 32-bit division (see Layout::offsets)
};

__device__ __forceinline__ float reduced_at(const float* in, const SumParams& p, long long base,
                                            long long j) {
  long long off[kMaxTensors];
  if (p.index32) {
    p.reduced.offsets(static_cast<unsigned>(j), off);
  } else {
    p.reduced.offsets(j, off);
  }
  return in[base + off[0]];
}

__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    sum_group_rows(const float* in, float* out, __grid_constant__ const SumParams p, GroupRows g) {
  const long long row_blocks = ceil_div(p.num_out, g.rows_per_block);
  for (long long rb = blockIdx.x; rb < row_blocks; rb += gridDim.x) {
    const long long row = rb * g.rows_per_block + group_index(g);
    const bool valid = row < p.num_out;
    long long base[kMaxTensors];
    if (valid) p.kept.offsets(row, base);
    float acc = 0.0F;
    if (valid) {
      // The reduced dims collapsed to one unit-stride run here (see sum_f32_cuda).
      for (long long j = group_lane(g); j < p.reduced_len; j += g.group_threads) {
        acc += in[base[1] + j];
      }
    }
    acc = group_reduce(acc, g.group_threads);
    if (valid && group_lane(g) == 0) out[base[0]] = acc;
  }
}

__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    sum_thread_rows(const float* in, float* out, __grid_constant__ const SumParams p) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       row < p.num_out; row += stride) {
    long long base[kMaxTensors];
    p.kept.offsets(row, base);
    float acc = 0.0F;
    for (long long j = 0; j < p.reduced_len; ++j) acc += reduced_at(in, p, base[1], j);
    out[base[0]] = acc;
  }
}

constexpr long long kMaxBlocks = 1LL << 20;

inline unsigned blocks_for(long long units, long long per_block) {
  return static_cast<unsigned>(
      std::clamp<long long>(ceil_div(units, per_block), 1, kMaxBlocks));
}

// block_threads and rows_per_block of a config already checked against the descriptor.
inline GroupRows group_rows(const LaunchConfig& config) {
  const auto threads = static_cast<int>(config.get_or("block_threads", 256));
  const auto rows = static_cast<int>(std::max<std::int64_t>(1, config.get_or("rows_per_block", 1)));
  return {threads / rows, rows};
}

inline InputPtrs input_ptrs(const std::array<TensorView, kMaxInputs>& inputs, int count) {
  InputPtrs in{};
  for (int t = 0; t < count; ++t) {
    in.p[t] = inputs[static_cast<std::size_t>(t)].data_as<const float>();
  }
  return in;
}

// `v` with `ndim` dims: its own dims aligned to the trailing ones, stride 0 on the others.
inline TensorView align_trailing(const TensorView& v, int ndim) {
  TensorView r = v;
  r.ndim = ndim;
  const int lead = ndim - v.ndim;
  for (int d = ndim - 1; d >= 0; --d) {
    const auto du = static_cast<std::size_t>(d);
    if (d >= lead) {
      r.sizes[du] = v.sizes[static_cast<std::size_t>(d - lead)];
      r.strides[du] = v.strides[static_cast<std::size_t>(d - lead)];
    } else {
      r.sizes[du] = 1;
      r.strides[du] = 0;
    }
  }
  return r;
}


// ---- launch plans (host) ----------------------------------------------------------------------

/// A row kernel's launch: `blocks` x `threads`; thread_rows picks the thread-per-row kernel
/// over the group-per-row one. blocks == 0: nothing to launch (an empty tensor).
struct RowLaunch {
  unsigned blocks = 0;
  unsigned threads = 0;
  GroupRows g{};
  bool thread_rows = false;
};

struct SoftmaxLaunch : RowLaunch {
  SoftmaxParams p{};
  InputPtrs in{};
  float* out = nullptr;
};

/// Validates a softmax call (throws ka::ValueError on bad arguments; a config outside the
/// descriptor's space is a Status) and lays out its launch.
inline Status plan_softmax(const SoftmaxArgs& args, const LaunchConfig& config,
                           SoftmaxLaunch& l) {
  validate_program_inputs("softmax_f32_cuda", args.out, args.inputs.data(), args.prologue);
  const int ndim = args.out.ndim;
  KA_CHECK((ndim == 0 && args.dim == 0) || (args.dim >= 0 && args.dim < ndim),
           "softmax_f32_cuda: dim ", args.dim, " is out of range for shape ", args.out.shape_str());
  if (Status st = softmax_f32_cuda_descriptor().space.check(config); !st) return st;
  l = SoftmaxLaunch{};
  const long long n = args.out.numel();
  if (n == 0) return Status::ok();
  const int nin = args.prologue.inputs;
  const TensorView* views[kMaxTensors] = {&args.out};
  for (int t = 0; t < nin; ++t) views[t + 1] = &args.inputs[static_cast<std::size_t>(t)];

  SoftmaxParams& p = l.p;
  p.row_len = ndim == 0 ? 1 : args.out.size(args.dim);
  p.num_rows = n / p.row_len;
  const std::uint64_t all = dim_range(0, ndim);
  p.rows = make_layout(views, nin + 1, ndim, ndim == 0 ? 0 : all & ~(1ULL << args.dim));
  for (int t = 0; t <= nin; ++t) p.step[t] = ndim == 0 ? 0 : views[t]->stride(args.dim);

  l.in = input_ptrs(args.inputs, nin);
  l.out = args.out.data_as<float>();
  l.g = group_rows(config);
  l.threads = static_cast<unsigned>(l.g.group_threads * l.g.rows_per_block);
  l.thread_rows = !(p.step[0] == 1 || p.num_rows < 4096);
  l.blocks = l.thread_rows ? blocks_for(p.num_rows, l.threads)
                           : blocks_for(p.num_rows, l.g.rows_per_block);
  return Status::ok();
}

/// Launches l's kernel through `launch(kernel, blocks, threads, kernel arguments...)`.
template <class Launcher>
void run_softmax(const SoftmaxArgs& args, const SoftmaxLaunch& l, Launcher&& launch) {
  if (l.thread_rows) {
    launch(&softmax_thread_rows, l.blocks, l.threads, args.prologue, l.out, l.in, l.p);
  } else {
    launch(&softmax_group_rows, l.blocks, l.threads, args.prologue, l.out, l.in, l.p, l.g);
  }
}

struct LayerNormLaunch : RowLaunch {
  LayerNormParams p{};
  InputPtrs in{};
  float* out = nullptr;
};

/// As plan_softmax, for layer_norm.
inline Status plan_layer_norm(const LayerNormArgs& args, const LaunchConfig& config,
                              LayerNormLaunch& l) {
  validate_program_inputs("layer_norm_f32_cuda", args.out, args.inputs.data(), args.prologue);
  const int ndim = args.out.ndim;
  const int nd = args.normalized_dims;
  KA_CHECK(nd >= 1 && nd <= ndim, "layer_norm_f32_cuda: normalized_dims ", nd,
           " is out of range for shape ", args.out.shape_str());
  const TensorView* affine[2] = {&args.weight, &args.bias};
  const char* affine_names[2] = {"weight", "bias"};
  for (int i = 0; i < 2; ++i) {
    const TensorView& w = *affine[i];
    if (w.data == nullptr) continue;
    KA_CHECK(w.dtype == DType::kFloat32 && w.device.type == DeviceType::kCUDA,
             "layer_norm_f32_cuda: ", affine_names[i], " must be a float32 CUDA tensor");
    bool same = w.ndim == nd;
    for (int d = 0; d < nd && same; ++d) same = w.size(d) == args.out.size(ndim - nd + d);
    KA_CHECK(same, "layer_norm_f32_cuda: ", affine_names[i], " has shape ", w.shape_str(),
             ", expected the normalized shape of ", args.out.shape_str());
  }
  if (Status st = layer_norm_f32_cuda_descriptor().space.check(config); !st) return st;
  l = LayerNormLaunch{};
  const long long n = args.out.numel();
  if (n == 0) return Status::ok();

  const int nin = args.prologue.inputs;
  const TensorView weight = align_trailing(args.weight, ndim);
  const TensorView bias = align_trailing(args.bias, ndim);
  const TensorView* views[kMaxTensors] = {&args.out};
  for (int t = 0; t < nin; ++t) views[t + 1] = &args.inputs[static_cast<std::size_t>(t)];
  views[nin + 1] = &weight;
  views[nin + 2] = &bias;

  LayerNormParams& p = l.p;
  p.row_len = 1;
  for (int d = ndim - nd; d < ndim; ++d) p.row_len *= args.out.size(d);
  p.num_rows = n / p.row_len;
  p.rows = make_layout(views, nin + 1, ndim, dim_range(0, ndim - nd));
  p.cols = make_layout(views, nin + 3, ndim, dim_range(ndim - nd, ndim));
  p.weight = args.weight.data_as<const float>();
  p.bias = args.bias.data_as<const float>();
  p.eps = args.eps;

  l.in = input_ptrs(args.inputs, nin);
  l.out = args.out.data_as<float>();
  l.g = group_rows(config);
  l.threads = static_cast<unsigned>(l.g.group_threads * l.g.rows_per_block);
  l.blocks = blocks_for(p.num_rows, l.g.rows_per_block);
  return Status::ok();
}

template <class Launcher>
void run_layer_norm(const LayerNormArgs& args, const LayerNormLaunch& l, Launcher&& launch) {
  launch(&layer_norm_group_rows, l.blocks, l.threads, args.prologue, l.out, l.in, l.p, l.g);
}

struct SumLaunch : RowLaunch {
  SumParams p{};
  const float* in = nullptr;
  float* out = nullptr;
};

/// As plan_softmax, for sum.
inline Status plan_sum(const SumArgs& args, const LaunchConfig& config, SumLaunch& l) {
  const TensorView& in = args.in;
  const TensorView& out = args.out;
  for (const TensorView* t : {&in, &out}) {
    KA_CHECK(t->dtype == DType::kFloat32, "sum_f32_cuda: dtype ", long_name(t->dtype),
             "; this kernel takes float32");
    KA_CHECK(t->device.type == DeviceType::kCUDA, "sum_f32_cuda: a tensor is on ", t->device.str(),
             "; this kernel runs on cuda");
  }
  const int ndim = in.ndim;
  KA_CHECK(out.ndim == ndim, "sum_f32_cuda: out has shape ", out.shape_str(),
           "; expected in's rank (", in.shape_str(), ") with size 1 on reduced dims");
  KA_CHECK((args.reduce_mask >> ndim) == 0, "sum_f32_cuda: reduce_mask 0x", std::hex,
           args.reduce_mask, " names dims past ", in.shape_str());
  for (int d = 0; d < ndim; ++d) {
    const bool reduced = ((args.reduce_mask >> d) & 1U) != 0;
    KA_CHECK(out.size(d) == (reduced ? 1 : in.size(d)), "sum_f32_cuda: out has shape ",
             out.shape_str(), ", expected in's shape ", in.shape_str(),
             " with size 1 on reduced dims");
  }
  if (Status st = sum_f32_cuda_descriptor().space.check(config); !st) return st;
  l = SumLaunch{};
  const long long num_out = out.numel();
  if (num_out == 0) return Status::ok();

  const std::uint64_t all = dim_range(0, ndim);
  const TensorView* kept_views[2] = {&out, &in};
  const TensorView* in_view[1] = {&in};
  SumParams& p = l.p;
  p.kept = make_layout(kept_views, 2, ndim, all & ~args.reduce_mask);
  p.reduced = make_layout(in_view, 1, ndim, args.reduce_mask & all);
  p.num_out = num_out;
  p.reduced_len = 1;
  for (int d = 0; d < ndim; ++d) {
    if (((args.reduce_mask >> d) & 1U) != 0) p.reduced_len *= in.size(d);
  }
  p.index32 = p.reduced_len <= INT32_MAX;

  l.in = in.data_as<const float>();
  l.out = out.data_as<float>();
  l.g = group_rows(config);
  l.threads = static_cast<unsigned>(l.g.group_threads * l.g.rows_per_block);
  const bool unit_rows =
      p.reduced.ndim == 0 || (p.reduced.ndim == 1 && p.reduced.strides[0][0] == 1);
  l.thread_rows = !(unit_rows && (p.reduced_len >= 64 || num_out < 4096));
  l.blocks = l.thread_rows ? blocks_for(num_out, l.threads)
                           : blocks_for(num_out, l.g.rows_per_block);
  return Status::ok();
}

template <class Launcher>
void run_sum(const SumLaunch& l, Launcher&& launch) {
  if (l.thread_rows) {
    launch(&sum_thread_rows, l.blocks, l.threads, l.in, l.out, l.p);
  } else {
    launch(&sum_group_rows, l.blocks, l.threads, l.in, l.out, l.p, l.g);
  }
}

}  // namespace ka::kernels::cuda_detail
