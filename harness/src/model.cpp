#include "model.hpp"

#include <ka/core/error.hpp>

#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/serialization/import.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>

namespace ka::harness::detail {
namespace {

// "x.1" → "x": TorchScript suffixes a value's name with .N where the name is reused.
std::string source_name(const std::string& debug_name) {
  const std::size_t dot = debug_name.rfind('.');
  if (dot == std::string::npos || dot + 1 == debug_name.size()) return debug_name;
  for (std::size_t i = dot + 1; i < debug_name.size(); ++i) {
    if (debug_name[i] < '0' || debug_name[i] > '9') return debug_name;
  }
  return debug_name.substr(0, dot);
}

std::shared_ptr<LoadedModel> load_uncached(const std::string& path) {
  std::error_code ec;
  KA_CHECK(std::filesystem::is_regular_file(path, ec), "model file '", path,
           "' does not exist or is not a file");
  auto m = std::make_shared<LoadedModel>();
  m->path = path;
  try {
    torch::jit::Module module = torch::jit::load(path);
    module.eval();
    m->module = torch::jit::freeze(module);
  } catch (const c10::Error& e) {
    KA_THROW(ValueError, "model file '", path, "' is not a TorchScript module libtorch can load: ",
             e.what_without_backtrace());
  }
  const auto forward = m->module.find_method("forward");
  KA_CHECK(forward.has_value(), "model file '", path, "' has no forward method");
  m->graph = forward->graph()->copy();
  torch::jit::Inline(*m->graph);
  const auto inputs = m->graph->inputs();
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    m->input_names.push_back(source_name(inputs[i]->debugName()));
    m->input_types.push_back(inputs[i]->type()->annotation_str());
  }
  return m;
}

}  // namespace

std::shared_ptr<const LoadedModel> load_model(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const LoadedModel>> loaded;
  std::error_code ec;
  const std::string key = std::filesystem::weakly_canonical(path, ec).string();
  const std::lock_guard<std::mutex> lock(mutex);
  auto& slot = loaded[ec ? path : key];
  if (!slot) slot = load_uncached(path);
  return slot;
}

void check_module_inputs(const LoadedModel& model, SuiteCase& c) {
  for (const GraphInput& in : c.inputs) {
    KA_CHECK(std::find(model.input_names.begin(), model.input_names.end(), in.name) !=
                 model.input_names.end(),
             "model '", model.path, "' has no input '", in.name, "' (forward takes ",
             describe_inputs(model), ")");
  }
  std::vector<GraphInput> ordered;
  for (std::size_t i = 0; i < model.input_names.size(); ++i) {
    const std::string& name = model.input_names[i];
    KA_CHECK(model.input_types[i] == "Tensor", "model '", model.path, "': input '", name,
             "' is a ", model.input_types[i], "; module cases give Tensor inputs only");
    const auto it = std::find_if(c.inputs.begin(), c.inputs.end(),
                                 [&](const GraphInput& in) { return in.name == name; });
    KA_CHECK(it != c.inputs.end(), "model '", model.path, "': no shape for input '", name,
             "' (forward takes ", describe_inputs(model), ")");
    ordered.push_back(*it);
  }
  c.inputs = std::move(ordered);
}

std::string describe_inputs(const LoadedModel& model) {
  std::string s;
  for (std::size_t i = 0; i < model.input_names.size(); ++i) {
    s += (i ? ", " : "") + model.input_names[i] + ": " + model.input_types[i];
  }
  return s.empty() ? "none" : s;
}

}  // namespace ka::harness::detail
