// ceil_div and round_up: the blocks that cover a count, shared by the CPU and CUDA kernels (host
// and device code), their descriptors and the probes.
#pragma once

#include <type_traits>

namespace ka {

/// ceil(a / b) for a >= 0 and b > 0: how many blocks of `b` items cover `a` items. Computed
/// in the type of `a + b`, as the expression written out would be; a constant expression
/// where its arguments are, and callable from device code under nvcc.
template <typename A, typename B>
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr auto ceil_div(A a, B b) noexcept -> decltype(a + b) {
  static_assert(std::is_integral_v<A> && std::is_integral_v<B>, "ceil_div counts integers");
  return (a + b - 1) / b;
}

/// The least multiple of `b` that is at least `a` (a >= 0, b > 0): ceil_div(a, b) blocks of
/// `b`. Same type and constexpr-ness as ceil_div.
template <typename A, typename B>
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr auto round_up(A a, B b) noexcept -> decltype(a + b) {
  return ceil_div(a, b) * b;
}

}  // namespace ka
