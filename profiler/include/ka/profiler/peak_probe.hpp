// Machine-limit probes: the fp32 FMA peak that GEMM throughput is quoted against, and the
// copy bandwidth that memory-bound kernels are quoted against.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
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
  /// The machine's copy bandwidth: the best of the three below. Bytes read + bytes written
  /// per second (1e9), all threads.
  double gbytes_per_s = 0.0;
  double ordinary_gbps = 0.0;   ///< Copy with ordinary stores (each line read, then written).
  double streaming_gbps = 0.0;  ///< Copy with streaming (non-temporal) stores.
  /// The streaming copy in 256 KiB blocks on ka's global thread pool, as ka's kernels run.
  double pooled_gbps = 0.0;
  int threads = 1;
  std::size_t array_bytes = 0;  ///< Size of the source (and of the destination) array.
};

/// Measures memory copy bandwidth the way STREAM's "Copy" does: every thread copies its slice
/// of a source array into a destination array, arrays far larger than the last-level cache,
/// once with ordinary stores (the write allocates: the line is read first), once with
/// streaming stores (64-byte AVX-512 stores where the CPU has them, else SSE), and once with
/// streaming stores in 256 KiB blocks on ka's thread pool (as ka's kernels run, which can
/// beat the plain split); each figure is (bytes read + bytes written) over the wall time of
/// the whole copy, best of 5. What memory-bound kernels are
/// quoted against ("% of copy bandwidth"): the best of the three, so kernels that stream
/// their output are not flattered.
BandwidthMeasurement measure_copy_bandwidth(int threads,
                                            std::size_t array_bytes = std::size_t{128} << 20);

/// The copy probe with its arrays kept: allocated and first touched (by the thread that later
/// copies each slice) once, then measured as often as needed, e.g. right before and after a
/// kernel's timing so that the kernel is quoted against the bandwidth of that moment (a
/// shared machine's bandwidth moves with its neighbours' load). Not thread-safe.
class CopyProbe {
 public:
  /// Arrays of about `array_bytes` each (whole 64-byte lines per thread). Throws
  /// std::bad_alloc when they cannot be allocated.
  CopyProbe(int threads, std::size_t array_bytes);
  ~CopyProbe();
  CopyProbe(const CopyProbe&) = delete;
  CopyProbe& operator=(const CopyProbe&) = delete;

  /// Best of `trials` copies of each kind (ordinary, streaming, streaming on the pool).
  BandwidthMeasurement measure(int trials = 5);

  [[nodiscard]] std::size_t array_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ka::profiler
