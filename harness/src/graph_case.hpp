// One graph case: a TorchScript graph at one set of input shapes, run by ka's runtime with
// and without fusion and by libtorch's interpreter. This header keeps torch out of its
// includers.
#pragma once

#include <ka/harness/detail/bench_case.hpp>

#include <ka/db/recommendation_table.hpp>
#include <ka/profiler/measure.hpp>

#include <cstdint>
#include <memory>

namespace ka::harness::detail {

/// Variants: 0 = ka with fusion, 1 = ka with every op its own kernel, 2 = libtorch's
/// TorchScript interpreter (one ATen call per node). The IR is parsed once per
/// implementation (the interpreter gets its own copy of the graph, as it may rewrite it); each
/// call runs the whole graph, output allocation included, for all three.
class GraphCase final : public BenchCase {
 public:
  /// Parses the case's IR and fills its inputs (seeded). Throws ka::ValueError when the IR
  /// does not parse.
  GraphCase(const SuiteCase& c, std::uint64_t seed);
  ~GraphCase() override;

  Status run(std::size_t v) override;
  /// Compares every output: |ka - ref| <= atol * rms(ref) + rtol * |ref| (atol alone when the
  /// reference is all zeros), NaN where libtorch has NaN.
  CheckResult check(std::size_t v) override;
  [[nodiscard]] VariantInfo info(std::size_t v) const override;
  void run_pipeline() override;
  bool run_kernel() override { return false; }
  OpProfile profile_ops(int calls) override;

  /// Times the whole graph fused and unfused with profiler::measure (alternating, so drift
  /// hits both) and returns both, plus the fused run's plan (info(0).tasks).
  struct FusionTiming {
    profiler::Measurement fused;
    profiler::Measurement unfused;
    VariantInfo plan;
  };
  FusionTiming time_fusion(const profiler::MeasureOptions& options);
  /// Times the graph fused, as time_fusion does, with `table` as the extractor's CPU table;
  /// the table it found is restored afterwards (ka-tune --fusion sweeps a fused kernel's
  /// configurations this way, Note [Sweeping a fused kernel]).
  profiler::Measurement time_fused_with(std::shared_ptr<const db::RecommendationTable> table,
                                        const profiler::MeasureOptions& options);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ka::harness::detail
