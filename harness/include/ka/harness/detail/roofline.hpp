// The roofline of decode GEMMs (small M: every element of B is read once and used M times),
// and the streaming-read bandwidth it is drawn with.
// Internal to ka (namespace detail): for the harness and its unit tests, not a stable API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ka::harness::detail {

/// The machine's streaming-read bandwidth: what a kernel that only reads, such as a GEMV
/// reading its matrix, can reach.
struct ReadBandwidth {
  /// The best pattern's median over the rounds of bytes read / wall time (1e9 B/s).
  double gbytes_per_s = 0.0;
  int threads = 1;
  std::size_t array_bytes = 0;
  int rounds = 0;
  const char* pattern = "";  ///< The access pattern that read fastest (read_pattern_name).
};

/// The access patterns the probe times (Note [Read probe patterns] in roofline.cpp).
constexpr int kReadPatterns = 3;
/// "1 stream", "4 interleaved streams", ...
const char* read_pattern_name(int pattern);
/// The sum of `words` 64-bit words read with pattern `pattern` as the probe reads one block,
/// with `isa`'s loads ("avx512", "avx2", "generic"; the probe uses the widest the CPU has);
/// `words` a multiple of 32 x the pattern's streams (256), `block` 64-byte aligned.
std::uint64_t read_pattern_sum(int pattern, const std::uint64_t* block, std::size_t words,
                               const std::string& isa);

/// The streaming-read probe with its array kept: allocated and first touched once, by the
/// threads that then read it, and measured as often as needed (right before each decode case:
/// this VM's bandwidth moves by 2x with its neighbours' load). Not thread-safe.
///
///   ReadProbe probe(threads);
///   const double gbps = probe.measure().gbytes_per_s;
class ReadProbe {
 public:
  /// An array of `array_bytes` (0: four times the L3, 128 MiB to 1 GiB) in blocks of 1 MiB,
  /// or one block of its own size, rounded up to 2 KiB, when it is smaller (Note [Arrays
  /// smaller than a block]). Throws std::bad_alloc when it cannot be had.
  explicit ReadProbe(int threads, std::size_t array_bytes = 0);
  ~ReadProbe();
  ReadProbe(const ReadProbe&) = delete;
  ReadProbe& operator=(const ReadProbe&) = delete;

  /// Sums the array block by block with the widest vector loads the CPU has, on the probe's
  /// threads of ka's pool, in each access pattern: one untimed pass, then `rounds` rounds of
  /// one timed pass per pattern (an array under 32 MiB read several times per pass); the best
  /// pattern's median.
  ReadBandwidth measure(int rounds = 5);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Op cases with M <= 16 are decode cases: memory-bound on reading B.
constexpr std::int64_t kDecodeMaxM = 16;

/// Bytes of B (K x N fp32) a decode GEMM must read.
double b_bytes(std::int64_t k, std::int64_t n);

/// The roofline of a GEMM with `m` rows that reads B once: min(FMA peak, read bandwidth x FLOP
/// per byte of B), with 2MNK FLOP over 4KN bytes = M/2 FLOP per byte. GFLOP/s; 0 when either
/// limit is unknown (<= 0).
double decode_roofline_gflops(double fma_peak_gflops, double read_gbps, std::int64_t m);

}  // namespace ka::harness::detail
