#include "fma_loop.hpp"

#include <immintrin.h>

namespace ka::profiler::detail {

float fma_loop_avx512(std::int64_t iterations) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3F);
  const __m512 mul = _mm512_set1_ps(0.999999F);
  const __m512 add = _mm512_set1_ps(1e-7F);
  for (std::int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm512_fmadd_ps(a, mul, add);
  }
  __m512 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm512_add_ps(sum, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0.0F;
  for (const float v : lanes) total += v;
  return total;
}

}  // namespace ka::profiler::detail
