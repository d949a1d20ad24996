#include "fma_loop.hpp"

#include <immintrin.h>

namespace ka::profiler::detail {

float fma_loop_avx2(std::int64_t iterations) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3F);
  const __m256 mul = _mm256_set1_ps(0.999999F);
  const __m256 add = _mm256_set1_ps(1e-7F);
  for (std::int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm256_fmadd_ps(a, mul, add);
  }
  __m256 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm256_add_ps(sum, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0.0F;
  for (const float v : lanes) total += v;
  return total;
}

}  // namespace ka::profiler::detail
