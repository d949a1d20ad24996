#include "model.hpp"

#include <ka/core/error.hpp>

#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/serialization/import.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <filesystem>
#include <limits>
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

// The last non-empty line of `text`: the error itself, after a TorchScript traceback.
std::string last_line(const std::string& text) {
  const std::size_t end = text.find_last_not_of(" \n\r\t");
  if (end == std::string::npos) return text;
  const std::size_t newline = text.rfind('\n', end);
  const std::size_t start = newline == std::string::npos ? 0 : newline + 1;
  return text.substr(start, end + 1 - start);
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
  const auto& arguments = forward->function().getSchema().arguments();
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    m->input_names.push_back(source_name(inputs[i]->debugName()));
    m->input_types.push_back(inputs[i]->type());
    std::optional<c10::IValue> fallback;
    if (i < arguments.size() && arguments[i].default_value()) {
      fallback = *arguments[i].default_value();
    }
    m->input_defaults.push_back(std::move(fallback));
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

namespace {

c10::IValue to_ivalue(const InputValue& v) {
  switch (v.kind) {
    case InputValue::Kind::kInt:
      return v.i;
    case InputValue::Kind::kFloat:
      return v.f;
    case InputValue::Kind::kBool:
      return v.b;
    case InputValue::Kind::kNone:
      break;
  }
  return {};
}

// A default forward's schema gives, as an input value; nullopt for one that is not None, an
// int, a float or a bool.
std::optional<InputValue> value_of(const c10::IValue& v) {
  InputValue out;
  if (v.isNone()) return out;
  if (v.isInt()) {
    out.kind = InputValue::Kind::kInt;
    out.i = v.toInt();
  } else if (v.isDouble()) {
    out.kind = InputValue::Kind::kFloat;
    out.f = v.toDouble();
  } else if (v.isBool()) {
    out.kind = InputValue::Kind::kBool;
    out.b = v.toBool();
  } else {
    return std::nullopt;
  }
  return out;
}

// The types of what an input may be given as.
const c10::TypePtr kGivenTypes[] = {c10::TensorType::get(), c10::IntType::get(),
                                    c10::FloatType::get(), c10::BoolType::get(),
                                    c10::NoneType::get()};

// Checks that `in` suits forward's argument of type `type`; an int given for a float becomes
// that float.
void check_input_type(const LoadedModel& model, const c10::TypePtr& type, GraphInput& in) {
  const std::string where = "model '" + model.path + "': input '" + in.name + "' has type " +
                            type->annotation_str();
  if (!in.value) {
    KA_CHECK(c10::TensorType::get()->isSubtypeOf(*type), where, ": give it a value, --input ",
             in.name, "=VALUE (an int, a float, true, false or none), not a shape");
    return;
  }
  const bool takes_float = c10::FloatType::get()->isSubtypeOf(*type);
  if (in.value->kind == InputValue::Kind::kInt && takes_float) {
    in.value->kind = InputValue::Kind::kFloat;
    in.value->f = static_cast<double>(in.value->i);
  }
  KA_CHECK(to_ivalue(*in.value).type()->isSubtypeOf(*type), where, ": ",
           to_string(*in.value), " does not fit it",
           c10::TensorType::get()->isSubtypeOf(*type)
               ? std::string("; give it a shape, --input ") + in.name + ":SHAPE"
               : std::string());
}

}  // namespace

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
    const c10::TypePtr& type = model.input_types[i];
    const bool takes_something =
        std::any_of(std::begin(kGivenTypes), std::end(kGivenTypes),
                    [&](const c10::TypePtr& t) { return t->isSubtypeOf(*type); });
    KA_CHECK(takes_something || model.input_defaults[i].has_value(), "model '", model.path,
             "': input '", name, "' has type ", type->annotation_str(),
             "; ka-bench gives a model tensors (--input NAME:SHAPE) and ints, floats, bools ",
             "or None (--input NAME=VALUE)");
    const auto it = std::find_if(c.inputs.begin(), c.inputs.end(),
                                 [&](const GraphInput& in) { return in.name == name; });
    if (it != c.inputs.end()) {
      ordered.push_back(*it);
    } else {
      const std::optional<c10::IValue>& fallback = model.input_defaults[i];
      const std::optional<InputValue> v = fallback ? value_of(*fallback) : std::nullopt;
      KA_CHECK(v.has_value(), "model '", model.path, "': no ",
               c10::TensorType::get()->isSubtypeOf(*type) ? "shape" : "value", " for input '",
               name, "' (forward takes ", describe_inputs(model), ")");
      GraphInput in;
      in.name = name;
      in.value = *v;
      ordered.push_back(std::move(in));
    }
    check_input_type(model, type, ordered.back());
  }
  c.inputs = std::move(ordered);
}

std::string input_text(const GraphInput& in) {
  if (in.value) return in.name + "=" + to_string(*in.value);
  return in.name + ":" + dims_text(in.shape, "x") + ":" + to_string(in.dtype);
}

std::string dims_text(at::IntArrayRef sizes, const char* sep) {
  std::string s;
  for (std::size_t i = 0; i < sizes.size(); ++i) s += (i ? sep : "") + std::to_string(sizes[i]);
  return s;
}

namespace {

at::ScalarType scalar_type_of(InputDtype dtype) {
  switch (dtype) {
    case InputDtype::kInt64:
      return at::kLong;
    case InputDtype::kInt32:
      return at::kInt;
    case InputDtype::kBool:
      return at::kBool;
    case InputDtype::kFloat64:
      return at::kDouble;
    case InputDtype::kFloat16:
      return at::kHalf;
    case InputDtype::kBFloat16:
      return at::kBFloat16;
    case InputDtype::kInt16:
      return at::kShort;
    case InputDtype::kInt8:
      return at::kChar;
    case InputDtype::kUInt8:
      return at::kByte;
    case InputDtype::kFloat32:
      break;
  }
  return at::kFloat;
}

// A float32 tensor of `in`'s shape and fill.
at::Tensor float32_input(const GraphInput& in, at::Generator& gen) {
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  switch (in.fill) {
    case InputFill::kMask:
      // One position in five masked, as padding or dropped tokens would be.
      return at::where(at::rand(in.shape, gen, opts) < 0.2, -1e4, 0.0).to(at::kFloat);
    case InputFill::kCausal: {
      const std::int64_t rows = in.shape[in.shape.size() - 2];
      const std::int64_t cols = in.shape.back();
      // -inf above the diagonal, as nn.Transformer.generate_square_subsequent_mask makes it.
      return at::full({rows, cols}, -std::numeric_limits<float>::infinity(), opts)
          .triu(1)
          .expand(in.shape)
          .contiguous();
    }
    case InputFill::kRandn:
      break;
  }
  return at::randn(in.shape, gen, opts);
}

}  // namespace

c10::IValue make_input(const GraphInput& in, at::Generator& gen) {
  if (in.value) return to_ivalue(*in.value);
  const at::ScalarType type = scalar_type_of(in.dtype);
  if (in.dtype == InputDtype::kBool) {
    return at::randint(0, 2, in.shape, gen, at::TensorOptions().dtype(at::kLong)).to(at::kBool);
  }
  if (is_integer(in.dtype)) {
    return at::randint(in.low, in.high, in.shape, gen, at::TensorOptions().dtype(type));
  }
  const at::Tensor values = float32_input(in, gen);
  return type == at::kFloat ? values : values.to(type);
}

void check_module_runs(const LoadedModel& model, const SuiteCase& c) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  std::vector<c10::IValue> inputs;
  std::string given;
  for (const GraphInput& in : c.inputs) {
    inputs.emplace_back(make_input(in, gen));
    given += (given.empty() ? "" : ", ") + input_text(in);
  }
  try {
    torch::jit::Module m = model.module;
    (void)m.forward(std::move(inputs));
  } catch (const std::exception& e) {
    const auto* error = dynamic_cast<const c10::Error*>(&e);
    KA_THROW(ValueError, "model '", model.path, "' does not run on the inputs given (", given,
             "): libtorch says: ", last_line(error ? error->what_without_backtrace() : e.what()));
  }
}

std::string describe_inputs(const LoadedModel& model) {
  std::string s;
  for (std::size_t i = 0; i < model.input_names.size(); ++i) {
    s += (i ? ", " : "") + model.input_names[i] + ": " + model.input_types[i]->annotation_str();
    const std::optional<c10::IValue>& fallback = model.input_defaults[i];
    if (const auto v = fallback ? value_of(*fallback) : std::nullopt) s += " = " + to_string(*v);
  }
  return s.empty() ? "none" : s;
}

}  // namespace ka::harness::detail
