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
#include <set>

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

// Whether ka-bench can give an argument of `type`: one of kGivenTypes, or a Tuple or List of
// what it can give (Note [Container inputs]).
bool givable(const c10::TypePtr& type) {
  if (std::any_of(std::begin(kGivenTypes), std::end(kGivenTypes),
                  [&](const c10::TypePtr& t) { return t->isSubtypeOf(*type); })) {
    return true;
  }
  if (const auto tuple = type->cast<c10::TupleType>()) {
    const auto elements = tuple->elements();
    return std::all_of(elements.begin(), elements.end(), givable);
  }
  if (const auto list = type->cast<c10::ListType>()) return givable(list->getElementType());
  return false;
}

// Checks that `in` suits forward's argument of type `type`; an int given for a float becomes
// that float.
void check_input_type(const LoadedModel& model, const c10::TypePtr& type, GraphInput& in) {
  const std::string where = "model '" + model.path + "': input '" + in.name + "' has type " +
                            type->annotation_str();
  const bool container = type->cast<c10::TupleType>() || type->cast<c10::ListType>();
  KA_CHECK(!container, where, ": give its items one by one, --input ", in.name, ".0:SHAPE (or ",
           in.name, ".0=VALUE), ", in.name, ".1 and so on, not ",
           in.value ? "one value" : "one shape");
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

// Note [Container inputs]
// A forward may take a Tuple or a List (of tensors, values, or further tuples and lists): an
// RNN's (h, c) state, a list of feature maps. Its items are given one by one as inputs named
// NAME.0, NAME.1, ... (NAME.0.1 inside a nested one), each a shape or a value like any input;
// a Tuple takes exactly its elements, a List as many items as are given from NAME.0 on (at
// least one). ka-bench assembles them into the Tuple or List that forward receives.

// The given inputs by name, each marked once bound.
struct GivenInputs {
  std::map<std::string, const GraphInput*> by_name;
  std::set<std::string> bound;

  const GraphInput* find(const std::string& name) const {
    const auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  }
  // Whether an input at or under `name` (name.0, name.0.1, ...) was given.
  bool any_under(const std::string& name) const {
    if (by_name.count(name) != 0) return true;
    const auto it = by_name.lower_bound(name + ".");
    return it != by_name.end() && it->first.compare(0, name.size() + 1, name + ".") == 0;
  }
};

// Forward's argument `name` of type `type`, from what was given (Note [Container inputs]), or
// from `fallback`, its default, where nothing was.
GraphInput bind_input(const LoadedModel& model, const std::string& name, const c10::TypePtr& type,
                      const std::optional<c10::IValue>& fallback, GivenInputs& given) {
  const auto tuple = type->cast<c10::TupleType>();
  const auto list = type->cast<c10::ListType>();
  if ((tuple || list) && given.find(name) == nullptr && given.any_under(name)) {
    GraphInput in;
    in.name = name;
    in.container = tuple ? InputContainer::kTuple : InputContainer::kList;
    const std::size_t count = [&] {
      if (tuple) return tuple->elements().size();
      std::size_t n = 0;
      while (given.any_under(name + "." + std::to_string(n))) ++n;
      return n;
    }();
    KA_CHECK(count > 0, "model '", model.path, "': input '", name, "' has type ",
             type->annotation_str(), "; give its items from ", name, ".0 on");
    for (std::size_t i = 0; i < count; ++i) {
      const c10::TypePtr item = tuple ? tuple->elements()[i] : list->getElementType();
      const std::string item_name = name + "." + std::to_string(i);
      in.items.push_back(bind_input(model, item_name, item, std::nullopt, given));
    }
    return in;
  }
  if (const GraphInput* found = given.find(name)) {
    given.bound.insert(name);
    GraphInput in = *found;
    check_input_type(model, type, in);
    return in;
  }
  const std::optional<InputValue> v = fallback ? value_of(*fallback) : std::nullopt;
  const bool container = tuple || list;
  KA_CHECK(v.has_value(), "model '", model.path, "': no ",
           container                                         ? "items"
           : c10::TensorType::get()->isSubtypeOf(*type) ? "shape"
                                                             : "value",
           " for input '", name, "'",
           container ? " (" + type->annotation_str() + ": give them as --input " + name +
                           ".0:SHAPE or " + name + ".0=VALUE, and so on)"
                     : std::string(),
           " (forward takes ", describe_inputs(model), ")");
  GraphInput in;
  in.name = name;
  in.value = *v;
  check_input_type(model, type, in);
  return in;
}

}  // namespace

void check_module_inputs(const LoadedModel& model, SuiteCase& c) {
  // The leaves: the inputs as given, also where an earlier call assembled them.
  std::vector<GraphInput> leaves;
  for_each_input_leaf(c.inputs, [&](const GraphInput& in) { leaves.push_back(in); });
  GivenInputs given;
  for (const GraphInput& in : leaves) {
    // Items of a container are NAME.0, NAME.1, ...: NAME is the argument.
    const std::string argument = in.name.substr(0, in.name.find('.'));
    KA_CHECK(std::find(model.input_names.begin(), model.input_names.end(), argument) !=
                 model.input_names.end(),
             "model '", model.path, "' has no input '", argument, "' (forward takes ",
             describe_inputs(model), ")");
    given.by_name[in.name] = &in;
  }
  std::vector<GraphInput> ordered;
  for (std::size_t i = 0; i < model.input_names.size(); ++i) {
    const std::string& name = model.input_names[i];
    const c10::TypePtr& type = model.input_types[i];
    KA_CHECK(givable(type) || model.input_defaults[i].has_value(), "model '", model.path,
             "': input '", name, "' has type ", type->annotation_str(),
             "; ka-bench gives a model tensors (--input NAME:SHAPE), ints, floats, bools or ",
             "None (--input NAME=VALUE), and tuples and lists of them (their items as NAME.0, ",
             "NAME.1, ...)");
    ordered.push_back(bind_input(model, name, type, model.input_defaults[i], given));
  }
  for (const GraphInput& in : leaves) {
    KA_CHECK(given.bound.count(in.name) != 0, "model '", model.path, "': input '", in.name,
             "' is not an item of what forward takes (", describe_inputs(model), ")");
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

// The Tuple or List of `in`'s items (Note [Container inputs]).
c10::IValue make_container(const GraphInput& in, at::Generator& gen) {
  std::vector<c10::IValue> items;
  for (const GraphInput& item : in.items) items.push_back(make_input(item, gen));
  if (in.container == InputContainer::kTuple) return c10::ivalue::Tuple::create(std::move(items));
  // The list's element type as the schema names it (Tensor, not one tensor's own type).
  const c10::IValue& first = items.at(0);
  const c10::TypePtr element = first.isTensor()   ? c10::TensorType::get()
                               : first.isInt()    ? c10::IntType::get()
                               : first.isDouble() ? c10::FloatType::get()
                               : first.isBool()   ? c10::BoolType::get()
                                                  : first.type();
  c10::impl::GenericList list(element);
  for (c10::IValue& item : items) list.push_back(std::move(item));
  return list;
}

}  // namespace

c10::IValue make_input(const GraphInput& in, at::Generator& gen) {
  if (in.container != InputContainer::kNone) return make_container(in, gen);
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
  for (const GraphInput& in : c.inputs) inputs.emplace_back(make_input(in, gen));
  for_each_input_leaf(c.inputs, [&](const GraphInput& in) {
    given += (given.empty() ? "" : ", ") + input_text(in);
  });
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
