// The per-ISA FMA loops behind measure_fma_peak.
#pragma once

#include <cstdint>

namespace ka::profiler::detail {

/// Runs `iterations` rounds of 12 independent vector FMAs; returns a value that depends on
/// every result (so nothing is optimised away). FLOP per round: 12 * lanes * 2.
float fma_loop_avx512(std::int64_t iterations);  // 16 lanes
float fma_loop_avx2(std::int64_t iterations);    // 8 lanes
float fma_loop_generic(std::int64_t iterations); // 1 lane

}  // namespace ka::profiler::detail
