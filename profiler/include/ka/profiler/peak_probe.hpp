// Machine-limit probes: the fp32 FMA peak that GEMM throughput is quoted against, and the
// copy bandwidth that memory-bound kernels are quoted against.
#pragma once

#include <chrono>
#include <cstddef>
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

namespace ka::profiler {

/// The result of one copy-bandwidth measurement.
struct BandwidthMeasurement {
  double gbytes_per_s = 0.0;  ///< Bytes read + bytes written per second (1e9), all threads.
  int threads = 1;
  std::size_t array_bytes = 0;  ///< Size of the source (and of the destination) array.
};

/// Measures memory copy bandwidth the way STREAM's "Copy" does: every thread copies its slice
/// of a source array into a destination array with ordinary loads and stores (no
/// non-temporal stores, like ka's and libtorch's element-wise kernels), arrays far larger
/// than the last-level cache; the figure is (bytes read + bytes written) over the wall time
/// from the first thread's start to the last thread's end, best of 5. What memory-bound
/// kernels are quoted against ("% of copy bandwidth").
BandwidthMeasurement measure_copy_bandwidth(int threads,
                                            std::size_t array_bytes = std::size_t{128} << 20);

}  // namespace ka::profiler
