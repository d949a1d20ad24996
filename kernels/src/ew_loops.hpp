// The CPU kernels' element-wise loops, compiled once per ISA path and chosen by the active one.
// See Note [Element-wise loops per ISA].
#pragma once

#include <ka/kernels/elementwise.hpp>

#include <cstdint>

namespace ka::kernels::detail {

// Note [Element-wise loops per ISA]
// The library is built for baseline x86-64 (SSE2), where the vectorized exp runs several times
// slower than with AVX2. The element-wise loops (ew_loops_body.hpp: plain loops over short runs
// that the compiler vectorizes) are therefore compiled three times, for x86-64-v4 (AVX-512),
// x86-64-v3 (AVX2 + FMA) and the baseline, each into its own table of function pointers, and
// calls go through the table of the active ISA path (avx512_active() and its kin: the CPU's
// best, or what KA_CPU_ISA / force_cpu_isa chose): one indirect call per run of up to 256
// elements. A forced path so runs the loops that path's users run, where an ifunc
// (target_clones) would pick the CPU's best whatever was forced; and no ifunc resolver runs
// before ThreadSanitizer's runtime is up. The math the loops inline (ew_math.hpp) is
// always_inline: an out-of-line copy compiled for AVX-512 must never be the one a baseline loop
// calls.

/// One ISA's compilation of the element-wise loops (the functions of the same names in
/// ew_math.hpp, which dispatch to these).
struct EwLoops {
  const char* isa;
  void (*unary_run)(EwOp, const float* __restrict, float* __restrict, std::int64_t);
  float (*exp_shifted_sum)(const float* __restrict, float, float* __restrict, std::int64_t);
  void (*binary_run)(EwOp, const float*, const float*, float*, std::int64_t);
  void (*exp_shifted_run)(const float* __restrict, float, float, float* __restrict,
                          std::int64_t);
  float (*lane_sum)(const float*, std::int64_t);
  float (*lane_max)(const float*, std::int64_t);
  float (*lane_sum_sq_dev)(const float*, float, std::int64_t);
  void (*normalize_run)(const float*, float, float, const float*, const float*, float*,
                        std::int64_t);
  void (*max_accumulate)(float* __restrict, const float* __restrict, std::int64_t);
  void (*exp_sub_accumulate)(float* __restrict, const float* __restrict, float* __restrict,
                             std::int64_t);
  void (*mul_inplace)(float* __restrict, const float* __restrict, std::int64_t);
  void (*scale_run)(const float* __restrict, float, float* __restrict, std::int64_t);
  void (*scale_inplace)(float*, float, std::int64_t);
  void (*accumulate_f32)(float* __restrict, const float* __restrict, std::int64_t);
  void (*accumulate4_f32)(float* __restrict, const float*, const float*, const float*,
                          const float*, std::int64_t);
  void (*accumulate_f64)(double* __restrict, const float* __restrict, std::int64_t);
};

extern const EwLoops kEwLoopsGeneric;  ///< baseline x86-64
extern const EwLoops kEwLoopsAvx2;     ///< x86-64-v3; call only on AVX2 + FMA CPUs
extern const EwLoops kEwLoopsAvx512;   ///< x86-64-v4; call only on AVX-512 CPUs

/// The loops of the active ISA path.
const EwLoops& ew_loops();

}  // namespace ka::kernels::detail
