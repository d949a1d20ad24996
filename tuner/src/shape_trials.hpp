// One shape's trials in the process that runs them: its call, the reference, the default
// configuration, and how a configuration is run, checked and timed. tune() uses it directly
// (in-process trials) or through a worker process (Note [Isolated trials]).
#pragma once

#include <ka/db/results_store.hpp>
#include <ka/extractor/extractor.hpp>
#include <ka/tuner/paired_finals.hpp>
#include <ka/tuner/tune.hpp>

#include <ATen/core/ivalue.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ka::tuner::detail {

/// `shape`'s sizes for `op` ("512x768x3072" → {512, 768, 3072}); throws ka::ValueError naming
/// the form the op expects. A GEMM's shape may end in ":t": B is then passed as the transpose
/// of a contiguous N×K matrix, as F.linear passes its weight (shape key layout `t`).
std::vector<std::int64_t> parse_dims(const std::string& op, const std::string& shape);
/// Whether `shape` ends in ":t" (see parse_dims).
bool b_transposed(const std::string& shape);

/// Whether `op` is one of the GEMMs (mm, addmm, bmm), whose dims are loop extents (B, M, K, N)
/// rather than an input's sizes.
bool is_gemm(const std::string& op);

/// Bytes of the fp32 tensors a trial of `op` at `dims` (parse_dims) allocates: its inputs,
/// ka's output and libtorch's reference. Saturates at UINT64_MAX.
std::uint64_t shape_tensor_bytes(const std::string& op, const std::vector<std::int64_t>& dims);

/// What became of one configuration: the trial row's disposition, message and timing.
struct TrialOutcome {
  db::Disposition disposition = db::Disposition::kOk;
  std::string error;
  double median_ns = 0.0;
  double mean_ns = 0.0;
  double min_ns = 0.0;
  double max_ns = 0.0;
  double stddev_ns = 0.0;
  std::optional<double> ci95_ns;  ///< None below 6 samples.
  std::int64_t repetitions = 0;
};

/// The finals' candidates (the default configuration first, then the finalists the kernel
/// accepted) and their paired rounds (Note [Paired finals]).
struct Finals {
  std::vector<LaunchConfig> configs;
  std::vector<FinalRound> rounds;
};

/// Shape `index` of `o` built in this process: inputs drawn from the seed for that index (the
/// same in every process), placed on the device, with libtorch's result (Use::kTrials); or,
/// for a supervisor that never runs the call (Use::kShapeOnly), zero inputs and no reference.
///
///   ShapeTrials t(options, 0, ShapeTrials::Use::kTrials);
///   TrialOutcome r = t.run_trial(point);
class ShapeTrials {
 public:
  enum class Use { kTrials, kShapeOnly };
  ShapeTrials(const TuneOptions& o, std::size_t index, Use use);

  /// The call prepared with the kernel's default configuration.
  [[nodiscard]] const extractor::PreparedCall& base() const noexcept { return *base_; }
  /// Prepares `point`, runs it once, checks the output against the reference and times it:
  /// unsupported, incorrect, failed (a ka::Error, its message) or ok with its timing.
  [[nodiscard]] TrialOutcome run_trial(const LaunchConfig& point) const;
  /// The default configuration and those of `finalists` the kernel accepts, timed in
  /// kFinalRounds paired rounds of a quarter of the per-config budget each.
  [[nodiscard]] Finals time_finals(const std::vector<LaunchConfig>& finalists) const;
  /// One call of the default configuration after a warm-up call, nanoseconds: the scale of
  /// the shape's trial deadlines.
  [[nodiscard]] double time_default_call() const;

 private:
  std::unique_ptr<extractor::PreparedCall> prepare(const LaunchConfig* config) const;

  const TuneOptions& o_;
  extractor::Extractor& ex_;
  const extractor::OpHandle handle_;
  std::vector<c10::IValue> args_;
  at::Tensor reference_;
  std::int64_t k_ = 1;  // the reduction length the tolerance scales with
  std::unique_ptr<extractor::PreparedCall> base_;
};

}  // namespace ka::tuner::detail
