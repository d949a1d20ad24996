// The sampling loop of measure() (DESIGN.md §6), shared by the CPU timer and the CUDA event
// timer (measure_cuda.cpp): warm-up, automatic batch, samples until the CI target, the
// budget or the repetition cap, then the statistics.
#pragma once

#include <ka/profiler/measure.hpp>

#include <cstdint>
#include <functional>

namespace ka::profiler::detail {

/// How measure_loop() takes samples.
struct Sampler {
  /// Runs `calls` calls back to back and returns how long they took, in ns.
  std::function<double(int calls)> time;
  /// Cold mode: evicts the caches before a call (untimed); unused in hot mode.
  std::function<void()> flush;
  std::int64_t flush_bytes = 0;  ///< What one flush touches (reported in the Measurement).
};

/// measure()'s method with `sampler` as the clock. Throws ka::ValueError for inconsistent
/// options.
Measurement measure_loop(const Sampler& sampler, const MeasureOptions& options);

}  // namespace ka::profiler::detail
