// The roofline of decode GEMMs (small M: every element of B is read once and used M times),
// and the streaming-read bandwidth it is drawn with.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ka::harness::detail {

/// The machine's streaming-read bandwidth: what a kernel that only reads, such as a GEMV
/// reading its matrix, can reach.
struct ReadBandwidth {
  double gbytes_per_s = 0.0;  ///< Median over the rounds of bytes read / wall time (1e9 B/s).
  int threads = 1;
  std::size_t array_bytes = 0;
  int rounds = 0;
};

/// Sums an array of `array_bytes` (0: four times the L3, 128 MiB to 1 GiB) in 1 MiB blocks on
/// `threads` threads of ka's pool: one untimed pass (after the pages are first touched), then
/// the median of `rounds` timed ones. Throws std::bad_alloc when the array cannot be had.
ReadBandwidth measure_read_bandwidth(int threads, std::size_t array_bytes = 0, int rounds = 5);

/// Op cases with M <= 16 are decode cases: memory-bound on reading B.
constexpr std::int64_t kDecodeMaxM = 16;

/// Bytes of B (K x N fp32) a decode GEMM must read.
double b_bytes(std::int64_t k, std::int64_t n);

/// The roofline of a GEMM with `m` rows that reads B once: min(FMA peak, read bandwidth x FLOP
/// per byte of B), with 2MNK FLOP over 4KN bytes = M/2 FLOP per byte. GFLOP/s; 0 when either
/// limit is unknown (<= 0).
double decode_roofline_gflops(double fma_peak_gflops, double read_gbps, std::int64_t m);

}  // namespace ka::harness::detail
