// Where a shape's trials run: in the tuner's own process, or in a worker process it
// supervises (Note [Isolated trials]).
#pragma once

#include "shape_trials.hpp"

#include <ka/tuner/tune.hpp>

#include <memory>
#include <optional>
#include <vector>

namespace ka::tuner::detail {

/// Runs the trials of one shape at a time for ShapeTuner.
class TrialRunner {
 public:
  virtual ~TrialRunner() = default;
  /// Makes shape `index` (built here as `local`) the one later calls run. Throws what building
  /// the shape throws (a ka::Error), wherever it is built.
  virtual void begin_shape(std::size_t index, const ShapeTrials& local) = 0;
  /// One configuration, as ShapeTrials::run_trial; a worker that dies or overruns the trial's
  /// deadline gives kCrashed or kTimeout with the reason.
  virtual TrialOutcome run_trial(const LaunchConfig& point) = 0;
  /// As ShapeTrials::time_finals; nullopt (with a warning) when a worker died or overran.
  virtual std::optional<Finals> time_finals(const std::vector<LaunchConfig>& finalists) = 0;
};

/// Trials run by `local` itself, in this process.
std::unique_ptr<TrialRunner> in_process_trials();
/// Trials run in a worker process (this program again, see serve_trial_worker_if_asked), one
/// at a time, each with a deadline (Note [Isolated trials]); the worker is replaced after it
/// dies or is killed. Throws ka::InternalError when this program's main() does not serve
/// trial workers.
std::unique_ptr<TrialRunner> worker_trials(const TuneOptions& o);

}  // namespace ka::tuner::detail
