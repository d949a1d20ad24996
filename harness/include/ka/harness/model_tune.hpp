// What ka-tune --model tunes: the (operator, shape) pairs a model runs on ka's kernels.
#pragma once

#include <string>
#include <vector>

namespace ka::harness {

/// One tuning job as ka-tune's --op and --shapes take it.
struct TuningItem {
  std::string op;     ///< aten::addmm, aten::mm, aten::bmm, aten::layer_norm, ...
  std::string shape;  ///< "128x768x2304:t", "12x128x64x128", "1x128x768"
  std::string from;   ///< The model's task it came from: pattern and shape key.
};

/// What a model runs on ka's kernels, found by running it once unfused (every operator its
/// own task) on the given input shapes and checking it against libtorch.
struct ModelTuningWork {
  std::vector<TuningItem> items;     ///< Distinct (op, shape), in the order the model runs them.
  std::vector<std::string> skipped;  ///< ka's tasks ka-tune cannot tune, and why.
};

/// Loads `file` with `inputs` ("x:1x128x768", as ka-bench --model takes them) on `threads`
/// threads and lists its tuning work. Throws ka::ValueError as ka-bench --model does, and
/// when ka's run of the model is not correct.
ModelTuningWork model_tuning_work(const std::string& file, const std::vector<std::string>& inputs,
                                  int threads);

}  // namespace ka::harness
