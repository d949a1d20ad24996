// See shape_trials.hpp and Note [Tuning a shape] in tune.cpp.
#include "shape_trials.hpp"

#include <ka/core/error.hpp>
#include <ka/core/text.hpp>
#include <ka/profiler/measure.hpp>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>

namespace ka::tuner::detail {
namespace {

// A shape's arguments, and libtorch's result computed only when asked for (a worker's
// supervisor never checks outputs).
struct ShapeCall {
  std::vector<c10::IValue> args;
  std::function<at::Tensor()> reference;
  std::int64_t k = 1;
};

// The ops ka-tune can tune and the form of their shapes: GEMMs take MxKxN (BxMxKxN for bmm),
// the others the sizes of their input (softmax, layer_norm and sum over its last dim; a
// binary op's second input has the same sizes; gelu is the exact form, approximate='none').
struct TunableOp {
  const char* op;
  std::size_t min_dims;
  std::size_t max_dims;
  const char* form;  // for error messages
};
constexpr const char* kSizes = "the input's sizes, 1 to 4 dims, e.g. 4096x4096";
constexpr TunableOp kTunableOps[] = {
    {"aten::mm", 3, 3, "MxKxN[:t]"},    {"aten::addmm", 3, 3, "MxKxN[:t]"},
    {"aten::bmm", 4, 4, "BxMxKxN[:t]"},     {"aten::_softmax", 1, 4, kSizes},
    {"aten::layer_norm", 1, 4, kSizes}, {"aten::sum.dim_IntList", 1, 4, kSizes},
    {"aten::add.Tensor", 1, 4, kSizes}, {"aten::mul.Tensor", 1, 4, kSizes},
    {"aten::relu", 1, 4, kSizes},       {"aten::gelu", 1, 4, kSizes},
    {"aten::sigmoid", 1, 4, kSizes},    {"aten::silu", 1, 4, kSizes},
    {"aten::tanh", 1, 4, kSizes},       {"aten::neg", 1, 4, kSizes},
    {"aten::exp", 1, 4, kSizes},
};

// The tunable ops whose one argument is the input, with ATen's function for the reference.
struct UnaryOp {
  const char* op;
  at::Tensor (*fn)(const at::Tensor&);
};
constexpr UnaryOp kUnaryOps[] = {
    {"aten::relu", &at::relu}, {"aten::sigmoid", &at::sigmoid}, {"aten::silu", &at::silu},
    {"aten::tanh", &at::tanh}, {"aten::neg", &at::neg},         {"aten::exp", &at::exp},
};

const UnaryOp* unary_op(const std::string& op) {
  for (const UnaryOp& u : kUnaryOps) {
    if (op == u.op) return &u;
  }
  return nullptr;
}

const TunableOp& tunable_op(const std::string& op) {
  for (const TunableOp& t : kTunableOps) {
    if (op == t.op) return t;
  }
  std::string names;
  for (const TunableOp& t : kTunableOps) names += (names.empty() ? "" : ", ") + std::string(t.op);
  KA_THROW(ValueError, "--op ", op, " is not tunable yet (tunable: ", names, ")");
}

}  // namespace

bool b_transposed(const std::string& shape) {
  return shape.size() >= 2 && shape.compare(shape.size() - 2, 2, ":t") == 0;
}

std::vector<std::int64_t> parse_dims(const std::string& op, const std::string& shape) {
  const TunableOp& t = tunable_op(op);
  const bool transposed = b_transposed(shape);
  KA_CHECK(!transposed || is_gemm(op), "bad shape '", shape, "' for ", op,
           ": only a GEMM's B can be transposed (':t'); expected ", t.form);
  const std::string sizes = transposed ? shape.substr(0, shape.size() - 2) : shape;
  std::vector<std::int64_t> dims;
  for (const std::string_view piece : split(sizes, 'x')) {
    const std::string part(piece);
    char* end = nullptr;
    const long long v = std::strtoll(part.c_str(), &end, 10);
    KA_CHECK(!part.empty() && end != nullptr && *end == '\0' && v > 0, "bad shape '", shape,
             "' for ", op, ": expected positive integers separated by 'x' (", t.form, ")");
    dims.push_back(v);
  }
  KA_CHECK(dims.size() >= t.min_dims && dims.size() <= t.max_dims, "bad shape '", shape,
           "' for ", op, ": expected ", t.form);
  return dims;
}

bool is_gemm(const std::string& op) {
  return op == "aten::mm" || op == "aten::addmm" || op == "aten::bmm";
}

std::uint64_t shape_tensor_bytes(const std::string& op, const std::vector<std::int64_t>& dims) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  const auto times = [](std::uint64_t a, std::uint64_t b) {
    std::uint64_t out = 0;
    return __builtin_mul_overflow(a, b, &out) ? kMax : out;
  };
  const auto plus = [](std::uint64_t a, std::uint64_t b) { return a > kMax - b ? kMax : a + b; };
  std::vector<std::uint64_t> d;
  for (const std::int64_t v : dims) {
    d.push_back(static_cast<std::uint64_t>(std::max<std::int64_t>(v, 0)));
  }
  std::uint64_t elements = 0;
  if (is_gemm(op)) {
    const std::size_t o = op == "aten::bmm" ? 1 : 0;  // BxMxKxN: B multiplies everything
    const std::uint64_t m = d.at(o), k = d.at(o + 1), n = d.at(o + 2);
    elements = plus(plus(times(m, k), times(k, n)), times(2, times(m, n)));
    if (op == "aten::addmm") elements = plus(elements, n);
    if (o == 1) elements = times(d[0], elements);
  } else {
    std::uint64_t x = 1;
    for (const std::uint64_t v : d) x = times(x, v);
    const std::uint64_t last = d.empty() ? 1 : std::max<std::uint64_t>(d.back(), 1);
    if (op == "aten::sum.dim_IntList") {
      elements = plus(x, times(2, x / last));
    } else if (op == "aten::add.Tensor" || op == "aten::mul.Tensor") {
      elements = times(4, x);
    } else {
      elements = plus(times(3, x), op == "aten::layer_norm" ? times(2, last) : 0);
    }
  }
  return times(elements, sizeof(float));
}

namespace {

// `shape`'s call with inputs uniform in [-1, 1), or zeros when `values` is false (a process
// that only needs the call's shape: drawing them costs a tenth of a second per 64 MB).
ShapeCall make_call(const std::string& op, const std::string& shape, bool values) {
  const auto d = parse_dims(op, shape);
  ShapeCall c;
  auto uniform = [values](c10::IntArrayRef sizes) {
    return values ? at::rand(sizes) * 2 - 1 : at::zeros(sizes);
  };
  const bool transposed = b_transposed(shape);
  if (op == "aten::mm" || op == "aten::addmm") {
    const at::Tensor a = uniform({d[0], d[1]});
    const at::Tensor b = transposed ? uniform({d[2], d[1]}).t() : uniform({d[1], d[2]});
    c.k = d[1];
    if (op == "aten::mm") {
      c.args = {a, b};
      c.reference = [=] { return at::Tensor(at::mm(a, b)); };
    } else {
      const at::Tensor bias = uniform({d[2]});
      c.args = {bias, a, b, 1, 1};
      c.reference = [=] { return at::Tensor(at::addmm(bias, a, b)); };
    }
    return c;
  }
  if (op == "aten::bmm") {
    const at::Tensor a = uniform({d[0], d[1], d[2]});
    const at::Tensor b = transposed ? uniform({d[0], d[3], d[2]}).transpose(1, 2)
                                    : uniform({d[0], d[2], d[3]});
    c.k = d[2];
    c.args = {a, b};
    c.reference = [=] { return at::Tensor(at::bmm(a, b)); };
    return c;
  }
  const at::Tensor x = uniform(d);
  const std::int64_t last = d.back();
  if (op == "aten::_softmax") {
    c.args = {x, -1, false};
    c.reference = [=] { return at::Tensor(at::_softmax(x, -1, false)); };
  } else if (op == "aten::layer_norm") {
    const at::Tensor w = uniform({last});
    const at::Tensor b = uniform({last});
    c.args = {x, std::vector<std::int64_t>{last}, w, b, 1e-5, true};
    c.reference = [=] { return at::Tensor(at::layer_norm(x, {last}, w, b, 1e-5)); };
  } else if (op == "aten::sum.dim_IntList") {
    c.k = last;
    c.args = {x, c10::IValue(std::vector<std::int64_t>{-1}), false, c10::IValue()};
    c.reference = [=] { return at::Tensor(at::sum(x, {-1})); };
  } else if (op == "aten::add.Tensor" || op == "aten::mul.Tensor") {
    const at::Tensor y = uniform(d);
    c.args = op == "aten::add.Tensor" ? std::vector<c10::IValue>{x, y, 1}
                                      : std::vector<c10::IValue>{x, y};
    c.reference = [=] { return at::Tensor(op == "aten::add.Tensor" ? x + y : x * y); };
  } else if (op == "aten::gelu") {
    c.args = {x, std::string("none")};
    c.reference = [=] { return at::Tensor(at::gelu(x)); };
  } else if (const UnaryOp* u = unary_op(op); u != nullptr) {
    c.args = {x};
    c.reference = [=] { return u->fn(x); };
  } else {  // in kTunableOps without a call built here
    KA_THROW(InternalError, "no call is built for ", op, ", a tunable op");
  }
  return c;
}

// The call's tensor arguments copied to `device` (the reference stays where it was computed).
void move_args(ShapeCall& c, DeviceType device) {
  if (device == DeviceType::kCPU) return;
  for (c10::IValue& a : c.args) {
    if (a.isTensor()) a = a.toTensor().to(at::Device(at::kCUDA, 0));
  }
}

// Device time of one run of `call`: CPU calls by the host clock, CUDA calls by events.
profiler::Measurement time_call(const extractor::PreparedCall& call,
                                const profiler::MeasureOptions& options) {
  if (call.device().type == DeviceType::kCUDA) {
    return profiler::measure_cuda([&call](void* stream) { call.enqueue(stream); }, options);
  }
  return profiler::measure([&call] { call.run(); }, options);
}

std::string check_output(const at::Tensor& device_result, const at::Tensor& reference,
                         std::int64_t k) {
  const at::Tensor got = device_result.to(at::kCPU);
  const double atol = 1e-5 * std::sqrt(static_cast<double>(k));
  const at::Tensor err = (got - reference).abs() - (atol + 1e-4 * reference.abs());
  if (err.numel() == 0 || err.max().item<double>() <= 0.0) return {};
  return fmt::format("max |ka - ref| = {:.3g} exceeds the tolerance (atol {:.3g}, rtol 1e-4)",
                     (got - reference).abs().max().item<double>(), atol);
}

void set_timing(TrialOutcome& out, const profiler::Measurement& m) {
  out.median_ns = m.median_ns();
  out.mean_ns = m.summary.mean;
  out.min_ns = m.summary.min;
  out.max_ns = m.summary.max;
  out.stddev_ns = m.summary.stddev;
  // Below 6 samples the median has no 95% interval: store none rather than inf.
  if (std::isfinite(m.median_ci95.half_width())) out.ci95_ns = m.median_ci95.half_width();
  out.repetitions = static_cast<std::int64_t>(m.repetitions());
}

}  // namespace

ShapeTrials::ShapeTrials(const TuneOptions& o, std::size_t index, Use use)
    : o_(o), ex_(extractor::Extractor::global()), handle_(ex_.resolve(o.op)) {
  at::manual_seed(static_cast<std::uint64_t>(index) + o.seed);
  ShapeCall c = make_call(o.op, o.shapes.at(index), use == Use::kTrials);
  if (use == Use::kTrials) reference_ = c.reference();
  move_args(c, o.device);
  args_ = std::move(c.args);
  k_ = c.k;
  base_ = prepare(nullptr);
}

std::unique_ptr<extractor::PreparedCall> ShapeTrials::prepare(const LaunchConfig* config) const {
  return ex_.prepare_call(handle_, args_.data(), args_.size(), config);
}

// Only a configuration that computes the right result is timed.
TrialOutcome ShapeTrials::run_trial(const LaunchConfig& point) const {
  TrialOutcome out;
  try {
    const auto call = prepare(&point);
    if (!call->status()) {
      out.disposition = db::Disposition::kUnsupported;
      out.error = call->status().reason();
      return out;
    }
    call->run();
    KA_ASSERT(reference_.defined(), "a trial needs the shape's reference");
    if (std::string bad = check_output(call->result().toTensor(), reference_, k_); !bad.empty()) {
      out.disposition = db::Disposition::kIncorrect;
      out.error = bad;
      return out;
    }
    set_timing(out, time_call(*call, o_.measure));
  } catch (const std::exception& e) {  // ka's errors and libtorch's: the sweep goes on
    out.disposition = db::Disposition::kFailed;
    out.error = e.what();
  }
  return out;
}

// Each round starts one candidate further along (Note [Paired finals]).
Finals ShapeTrials::time_finals(const std::vector<LaunchConfig>& finalists) const {
  Finals f;
  std::vector<std::unique_ptr<extractor::PreparedCall>> owned;
  std::vector<const extractor::PreparedCall*> calls = {base_.get()};
  f.configs = {params_of(base_->default_config())};
  for (const LaunchConfig& point : finalists) {
    auto call = prepare(&point);
    if (!call->status()) continue;
    calls.push_back(call.get());
    owned.push_back(std::move(call));
    f.configs.push_back(point);
  }
  profiler::MeasureOptions round_options = o_.measure;
  round_options.budget_s = o_.measure.budget_s / 4;
  f.rounds.assign(kFinalRounds, FinalRound(calls.size()));
  for (std::size_t round = 0; round < kFinalRounds; ++round) {
    for (std::size_t j = 0; j < calls.size(); ++j) {
      const std::size_t e = (j + round) % calls.size();
      f.rounds[round][e] = time_call(*calls[e], round_options).median_ns();
    }
  }
  return f;
}

double ShapeTrials::time_default_call() const {
  base_->run();
  profiler::MeasureOptions one;
  one.warmup_runs = 0;
  one.min_repetitions = 1;
  one.max_repetitions = 1;
  one.batch = 1;
  one.budget_s = 1e-9;  // one sample, however long it takes
  return time_call(*base_, one).median_ns();
}

}  // namespace ka::tuner::detail
