// TorchScript modules as benchmark cases (ka-bench --model, a suite's `models:`): loaded,
// frozen and inlined once per file.
#pragma once

#include <ka/harness/suite.hpp>

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ka::harness::detail {

/// A TorchScript module ready to run: frozen (its parameters and attributes folded into
/// constants) and its forward graph inlined.
struct LoadedModel {
  std::string path;
  torch::jit::Module module;                 ///< Frozen, in eval mode.
  std::shared_ptr<torch::jit::Graph> graph;  ///< forward, inlined; input 0 is the module.
  /// forward's arguments after self, as its code names them ("x", not "x.1").
  std::vector<std::string> input_names;
  std::vector<c10::TypePtr> input_types;  ///< annotation_str(): "Tensor", "Optional[Tensor]".
  /// forward's default per argument after self (`mask: Optional[Tensor] = None`), if any.
  std::vector<std::optional<c10::IValue>> input_defaults;
};

/// Loads `path` (torch::jit::load), freezes it and inlines forward; the first load of a file
/// is kept for the process, so every case of a model shares it. Throws ka::ValueError naming
/// the file when it is missing, is no TorchScript archive, or has no forward.
std::shared_ptr<const LoadedModel> load_model(const std::string& path);

/// Checks that `c.inputs` give every argument of `model`'s forward a shape (a Tensor or an
/// Optional[Tensor]) or a value (an int, float or bool, or None where it is optional), each
/// once, and nothing else; an argument left out takes forward's default, where it has one
/// that is such a value. Puts them in forward's order. Throws ka::ValueError naming the file
/// and the input (and listing forward's arguments) otherwise, or for an argument of another
/// type (a list, a tuple, a string).
void check_module_inputs(const LoadedModel& model, SuiteCase& c);

/// Runs `model`'s forward once on `c.inputs` (in forward's order, as check_module_inputs
/// leaves them). Throws ka::ValueError naming the file, the inputs and libtorch's complaint when
/// it fails: a shape, dtype or range that does not fit the model.
void check_module_runs(const LoadedModel& model, const SuiteCase& c);

/// Sizes joined by `sep`: "1x128x768" with "x".
std::string dims_text(at::IntArrayRef sizes, const char* sep);

/// A graph case's input: `in`'s value, or a tensor of its shape, dtype and fill drawn from
/// `gen`.
c10::IValue make_input(const GraphInput& in, at::Generator& gen);

/// `in` as --input gives it: "x:1x128x768:float32", "n=3".
std::string input_text(const GraphInput& in);

/// The names of `model`'s inputs, for error messages: "x: Tensor, mask: Tensor".
std::string describe_inputs(const LoadedModel& model);

}  // namespace ka::harness::detail
