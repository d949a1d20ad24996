// Machine-limit probes: the fp32 FMA peak that GEMM throughput is quoted against.
#pragma once

#include <chrono>
#include <string>

namespace ka::profiler {

/// The result of one peak measurement.
struct PeakMeasurement {
  double gflops = 0.0;   ///< fp32 GFLOP/s over all threads (an FMA counts as 2 FLOP).
  int threads = 1;
  std::string isa;       ///< The instruction set the probe loop used: avx512, avx2 or generic.
};

/// Measures fp32 FMA throughput: every thread runs a loop of independent vector FMAs (12
/// accumulators, enough to cover FMA latency) for about `duration`; the figure is total FLOP
/// over the wall time from the first thread's start to the last thread's end, best of 3.
PeakMeasurement measure_fma_peak(int threads,
                                 std::chrono::milliseconds duration = std::chrono::milliseconds(60));

}  // namespace ka::profiler
