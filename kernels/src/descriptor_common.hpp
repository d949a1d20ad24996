// Pieces the kernel descriptors (CPU and CUDA) share: the CPU `threads` candidates and what
// a shape key says about element counts and bytes moved.
#pragma once

#include <ka/core/shape_key.hpp>

#include <cstdint>
#include <vector>

namespace ka::kernels::detail {

/// 1, 2, 4, ... below the hardware's logical cores, then the core count itself: the candidates
/// of every CPU space's `threads` tunable.
std::vector<std::int64_t> cpu_thread_candidates();

/// The default of the CPU kernels' `stream` tunable (Note [Streaming stores]): 1 when an
/// output of `out_bytes` is at least the last-level cache (it cannot stay cached for its
/// consumer anyway, so writing it around the caches saves the read-for-ownership) and either
/// the kernel is bound by memory (`memory_bound`) or it streams from registers (AVX-512
/// active) on two or more `threads`; else 0.
std::int64_t stream_default(double out_bytes, bool memory_bound, std::int64_t threads);

/// Elements of one tensor of a shape key.
double spec_numel(const TensorSpec& t);

/// Elements of the broadcast of the key's tensors (numpy rules: the output of an element-wise
/// op over them). Throws ka::ValueError naming the key when they do not broadcast.
std::int64_t broadcast_numel(const ShapeKey& key);

/// The fewest bytes an fp32 element-wise op over the key's tensors moves: every input read
/// once, the broadcast output written once.
double elementwise_bytes(const ShapeKey& key);

}  // namespace ka::kernels::detail
