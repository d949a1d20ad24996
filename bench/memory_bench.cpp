// ka's memory-bound CPU kernels against the machine's copy bandwidth, measured in pairs: each
// round probes the copy bandwidth (profiler::CopyProbe over arrays as large as the kernel's
// data) right before and after timing the kernel, and the round's figure is the kernel's
// bandwidth over the mean of the two probes. The median over rounds is what ka-bench's memory
// suite quotes as %copy, without the runtime, the graph and the output allocation around the
// kernel. A last column gives each kernel's cost on one thread with its data hot in L2 (ns per
// element), which says whether a kernel is bound by its arithmetic or by memory. --vs times a
// second config in the same rounds, for A/B comparisons that the bandwidth's drift between
// runs would otherwise drown.
//
//   ka_memory_bench [--threads N] [--rounds R] [--only NAME] [--set TUNABLE=VALUE ...]
//                   [--vs TUNABLE=VALUE ...]
//   (NAME: add, mul_scalar, relu, gelu_tanh, silu, bias_gelu_residual, softmax, layer_norm,
//   sum_rows, sum_cols, sum_all)
#include <ka/core/launch_config.hpp>
#include <ka/core/shape_key.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/kernels/elementwise.hpp>
#include <ka/kernels/kernel_descriptor.hpp>
#include <ka/kernels/reduction.hpp>
#include <ka/kernels/tensor_view.hpp>
#include <ka/profiler/peak_probe.hpp>
#include <ka/profiler/statistics.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <utility>
#include <random>
#include <string>
#include <vector>

namespace {

using ka::DType;

using Overrides = std::vector<std::pair<std::string, std::int64_t>>;
// --set NAME=VALUE overrides, applied to every kernel's default config (tunables a kernel does
// not have are refused by it: the kernel then reports the config error).
Overrides g_overrides;
// --vs NAME=VALUE: the alternative config, applied on top of g_overrides.
Overrides g_vs;

ka::LaunchConfig with_overrides(const ka::kernels::KernelDescriptor& d, const ka::ShapeKey& key,
                                const Overrides& extra) {
  ka::LaunchConfig point = d.default_config(key);
  if (g_overrides.empty() && extra.empty()) return point;
  for (const auto& [name, value] : g_overrides) point.set(name, value);
  for (const auto& [name, value] : extra) point.set(name, value);
  return d.complete(key, point);
}
using ka::kernels::TensorView;

struct Floats {
  explicit Floats(std::int64_t n)
      : size(n), ptr(static_cast<float*>(std::aligned_alloc(
                     64, static_cast<std::size_t>((n * 4 + 63) / 64 * 64)))) {
    std::mt19937 rng(11);
    std::normal_distribution<float> g(0.0F, 1.0F);
    for (std::int64_t i = 0; i < n; ++i) ptr[i] = g(rng);
  }
  ~Floats() { std::free(ptr); }
  Floats(const Floats&) = delete;
  Floats& operator=(const Floats&) = delete;
  std::int64_t size;
  float* ptr;
};

// A refused config ends the program with the kernel's reason.
void report(const ka::Status& st) {
  if (st.is_ok()) return;
  std::fprintf(stderr, "ka_memory_bench: config refused: %s\n", st.reason().c_str());
  std::exit(2);
}

TensorView view(const Floats& f, std::initializer_list<std::int64_t> sizes) {
  return TensorView::contiguous(f.ptr, DType::kFloat32, ka::Device::cpu(), sizes);
}

// One kernel at one shape: its call (default config), under --vs the call of the alternative
// config (else empty), and the bytes it must move.
struct Kernel {
  std::string name;
  std::int64_t elements = 0;
  double bytes = 0.0;
  std::function<void()> call;
  std::function<void()> call_vs;
  std::string config;     // the configs, as printed under KA_MEMORY_BENCH_VERBOSE
  std::string config_vs;
};

// A Kernel whose calls are run(config) for the default config and the --vs one.
template <class Run>
Kernel kernel_of(const char* name, std::int64_t elements, double bytes,
                 const ka::kernels::KernelDescriptor& d, const ka::ShapeKey& key, Run run) {
  const ka::LaunchConfig a = with_overrides(d, key, {});
  Kernel k{name, elements, bytes, [run, a] { run(a); }, {}, a.str(), {}};
  if (!g_vs.empty()) {
    const ka::LaunchConfig b = with_overrides(d, key, g_vs);
    k.call_vs = [run, b] { run(b); };
    k.config_vs = b.str();
  }
  return k;
}

// The kernels of suites/memory.yaml, at `rows` x 4096 elements, on buffers owned by `keep`.
std::vector<Kernel> make_kernels(std::int64_t rows, std::vector<std::unique_ptr<Floats>>& keep,
                                 const std::string& only) {
  const std::int64_t cols = 4096;
  const std::int64_t n = rows * cols;
  auto buffer = [&](std::int64_t count) -> Floats& {
    keep.push_back(std::make_unique<Floats>(count));
    return *keep.back();
  };
  std::vector<Kernel> out;
  auto elementwise = [&](const char* name, const char* op, ka::kernels::EwProgram p, int inputs) {
    if (!only.empty() && only != name) return;
    auto args = std::make_shared<ka::kernels::ElementwiseArgs>();
    args->out = view(buffer(n), {n});
    std::vector<ka::TensorSpec> specs;
    for (int i = 0; i < inputs; ++i) {
      args->inputs[static_cast<std::size_t>(i)] = view(buffer(n), {n});
      specs.push_back({DType::kFloat32, {n}, true});
    }
    args->program = p;
    out.push_back(kernel_of(name, n, 4.0 * static_cast<double>(n * (inputs + 1)),
                            ka::kernels::elementwise_f32_cpu_descriptor(), ka::ShapeKey(op, specs),
                            [args](const ka::LaunchConfig& c) {
                              report(ka::kernels::elementwise_f32_cpu(*args, c));
                            }));
  };
  using ka::kernels::EwOp;
  using ka::kernels::EwProgram;
  {
    EwProgram p;
    p.set_result(p.binary(EwOp::kAdd, p.input(0), p.input(1)));
    elementwise("add", "aten::add.Tensor", p, 2);
  }
  {
    EwProgram p;
    p.set_result(p.binary(EwOp::kMul, p.input(0), p.scalar(0.5F)));
    elementwise("mul_scalar", "aten::mul.Scalar", p, 1);
  }
  for (const auto& [name, op, code] :
       {std::tuple{"relu", "aten::relu", EwOp::kRelu},
        std::tuple{"gelu_tanh", "aten::gelu", EwOp::kGeluTanh},
        std::tuple{"silu", "aten::silu", EwOp::kSilu}}) {
    EwProgram p;
    p.set_result(p.unary(code, p.input(0)));
    elementwise(name, op, p, 1);
  }
  const ka::TensorSpec x_spec{DType::kFloat32, {rows, cols}, true};
  if (only.empty() || only == "bias_gelu_residual") {
    // gelu_tanh(x + b) + res, b a row broadcast over the rows: the fused chain's kernel.
    auto args = std::make_shared<ka::kernels::ElementwiseArgs>();
    args->out = view(buffer(n), {rows, cols});
    args->inputs[0] = view(buffer(n), {rows, cols});
    args->inputs[1] = ka::kernels::broadcast_view(view(buffer(cols), {cols}),
                                                  args->out.sizes.data(), 2);
    args->inputs[2] = view(buffer(n), {rows, cols});
    EwProgram& p = args->program;
    p.set_result(p.binary(EwOp::kAdd,
                          p.unary(EwOp::kGeluTanh, p.binary(EwOp::kAdd, p.input(0), p.input(1))),
                          p.input(2)));
    const ka::TensorSpec row_spec{DType::kFloat32, {cols}, true};
    out.push_back(kernel_of("bias_gelu_residual", n, 4.0 * static_cast<double>(3 * n + cols),
                            ka::kernels::elementwise_f32_cpu_descriptor(),
                            ka::ShapeKey("fused::ew_chain", {x_spec, row_spec, x_spec}),
                            [args](const ka::LaunchConfig& c) {
                              report(ka::kernels::elementwise_f32_cpu(*args, c));
                            }));
  }
  if (only.empty() || only == "softmax") {
    auto args = std::make_shared<ka::kernels::SoftmaxArgs>();
    args->out = view(buffer(n), {rows, cols});
    args->inputs[0] = view(buffer(n), {rows, cols});
    args->prologue.set_result(args->prologue.input(0));
    args->dim = 1;
    out.push_back(kernel_of(
        "softmax", n, 8.0 * static_cast<double>(n), ka::kernels::softmax_f32_cpu_descriptor(),
        ka::ShapeKey("aten::_softmax", {x_spec}),
        [args](const ka::LaunchConfig& c) { report(ka::kernels::softmax_f32_cpu(*args, c)); }));
  }
  if (only.empty() || only == "layer_norm") {
    auto args = std::make_shared<ka::kernels::LayerNormArgs>();
    args->out = view(buffer(n), {rows, cols});
    args->inputs[0] = view(buffer(n), {rows, cols});
    args->prologue.set_result(args->prologue.input(0));
    args->weight = view(buffer(cols), {cols});
    args->bias = view(buffer(cols), {cols});
    const ka::TensorSpec row_spec{DType::kFloat32, {cols}, true};
    out.push_back(kernel_of("layer_norm", n, 8.0 * static_cast<double>(n) + 8.0 * cols,
                            ka::kernels::layer_norm_f32_cpu_descriptor(),
                            ka::ShapeKey("aten::layer_norm", {x_spec, row_spec, row_spec}),
                            [args](const ka::LaunchConfig& c) {
                              report(ka::kernels::layer_norm_f32_cpu(*args, c));
                            }));
  }
  // Sums: over the rows (x.sum(1)), over the columns (x.sum(0)) and over everything; they
  // only read (bytes: the input and the outputs), so they can pass 100% of a copy.
  const auto sum = [&](const char* name, std::uint64_t mask, const TensorView& in,
                       const TensorView& o) {
    auto args = std::make_shared<ka::kernels::SumArgs>();
    args->in = in;
    args->out = o;
    args->reduce_mask = mask;
    const ka::TensorSpec spec{DType::kFloat32, {in.sizes.begin(), in.sizes.begin() + in.ndim},
                              true};
    out.push_back(kernel_of(
        name, n, 4.0 * static_cast<double>(n + o.numel()), ka::kernels::sum_f32_cpu_descriptor(),
        ka::ShapeKey("aten::sum.dim_IntList", {spec}),
        [args](const ka::LaunchConfig& c) { report(ka::kernels::sum_f32_cpu(*args, c)); }));
  };
  if (only.empty() || only == "sum_rows") {
    sum("sum_rows", 2U, view(buffer(n), {rows, cols}), view(buffer(rows), {rows, 1}));
  }
  if (only.empty() || only == "sum_cols") {
    sum("sum_cols", 1U, view(buffer(n), {rows, cols}), view(buffer(cols), {1, cols}));
  }
  if (only.empty() || only == "sum_all") {
    sum("sum_all", 1U, view(buffer(n), {n}), view(buffer(1), {1}));
  }
  return out;
}

double seconds_of(const std::function<void()>& f, int calls) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls;
}

// A call's cost on one thread with its data hot in L2.
double hot_ns_per_element(const std::function<void()>& f, std::int64_t elements) {
  f();
  return seconds_of(f, 2000) * 1e9 / static_cast<double>(elements);
}

// One config's rounds: times and bandwidths over the probes around them.
struct Rounds {
  std::vector<double> ratios;
  std::vector<double> times;
  double lo = 1e30;
  double hi = 0.0;
  void add(double bytes, double t, double before, double after) {
    ratios.push_back(bytes / t / 1e9 / (0.5 * (before + after)));
    times.push_back(t);
    lo = std::min({lo, before, after});
    hi = std::max({hi, before, after});
  }
  void print(const std::string& name, double bytes, double hot_ns) const {
    const double t = ka::profiler::summarize(times).median;
    std::printf("%-11s | %8.3f %7.1f %6.1f%% | %9.1f %9.1f | %.3f\n", name.c_str(), t * 1e3,
                bytes / t / 1e9, ka::profiler::summarize(ratios).median * 100.0, lo, hi, hot_ns);
  }
};

struct Args {
  int threads = static_cast<int>(ka::kernels::cpu_thread_limit());
  int rounds = 9;
  std::string only;
  std::string vs_label;  // the --vs overrides as given
};

// Parses the command line into `args` (and the --set/--vs overrides); returns -1 to go on, else
// the exit code (0 after --help, 2 for a bad option).
int parse_arguments(int argc, char** argv, Args& args) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::puts("usage: ka_memory_bench [--threads N] [--rounds R] [--only NAME] "
                "[--set TUNABLE=VALUE ...] [--vs TUNABLE=VALUE ...]\n"
                "ka's memory-bound CPU kernels (default configs) at 16M fp32 elements: each "
                "round times the kernel\nbetween two copy-bandwidth probes; prints the median "
                "over rounds of the kernel's bandwidth over\ntheir mean (%copy), and the "
                "kernel's cost on one thread hot in cache (ns per element).\n"
                "KA_MEMORY_BENCH_VERBOSE=1 prints every round.\n"
                "NAME: add, mul_scalar, relu, gelu_tanh, silu, bias_gelu_residual, softmax, "
                "layer_norm, sum_rows, sum_cols, sum_all\n"
                "--set overrides a tunable of the default configs (e.g. stream=1, "
                "rows_per_block=16).\n"
                "--vs TUNABLE=VALUE times a second config (the first plus this) in the same "
                "rounds, alternating\nwhich runs first, and prints both and the median of their "
                "paired time ratios.");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "ka_memory_bench: %s needs a value (see --help)\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (a == "--threads") {
      args.threads = std::max(1, std::atoi(v));
    } else if (a == "--rounds") {
      args.rounds = std::max(1, std::atoi(v));
    } else if (a == "--only") {
      args.only = v;
    } else if (a == "--set" || a == "--vs") {
      const char* eq = std::strchr(v, '=');
      if (eq == nullptr) {
        std::fprintf(stderr, "ka_memory_bench: %s %s: expected NAME=VALUE\n", a.c_str(), v);
        return 2;
      }
      (a == "--set" ? g_overrides : g_vs).emplace_back(std::string(v, eq), std::atoll(eq + 1));
      args.vs_label += (a == "--vs" ? std::string(args.vs_label.empty() ? "" : ",") + v : "");
    } else {
      std::fprintf(stderr, "ka_memory_bench: unknown option %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  return -1;
}

// Times `kern` over `rounds` rounds between copy probes (and its --vs twin in the same rounds)
// and prints its line; `hot` is the same kernel on a small problem, for the hot figure.
void time_kernel(const Kernel& kern, const Kernel& hot, int threads, int rounds,
                 const std::string& vs_label) {
  ka::profiler::CopyProbe probe(threads, static_cast<std::size_t>(kern.bytes / 2.0));
  // Under --vs each round times both configs between the same two probes, in alternating
  // order: their ratio is paired, immune to the bandwidth moving between rounds.
  const bool vs = static_cast<bool>(kern.call_vs);
  kern.call();  // first touch of the output, outside the timing
  if (vs) kern.call_vs();
  if (std::getenv("KA_MEMORY_BENCH_VERBOSE") != nullptr) {
    std::printf("  config: %s\n", kern.config.c_str());
    if (vs) std::printf("  --vs config: %s\n", kern.config_vs.c_str());
  }
  Rounds a;
  Rounds b;
  std::vector<double> paired;  // time of --vs over time of the default, per round
  for (int r = 0; r < rounds; ++r) {
    const double before = probe.measure(2).gbytes_per_s;
    double ta = 0.0;
    double tb = 0.0;
    // Under --vs one untimed call first: the other config's last call may have left the
    // output in the caches, which a streamed output would pay for.
    const auto timed = [vs](const std::function<void()>& f) {
      if (vs) f();
      return seconds_of(f, 5);
    };
    if (vs && r % 2 == 1) tb = timed(kern.call_vs);
    ta = timed(kern.call);
    if (vs && r % 2 == 0) tb = timed(kern.call_vs);
    const double after = probe.measure(2).gbytes_per_s;
    a.add(kern.bytes, ta, before, after);
    if (vs) {
      b.add(kern.bytes, tb, before, after);
      paired.push_back(tb / ta);
    }
    if (std::getenv("KA_MEMORY_BENCH_VERBOSE") != nullptr) {
      std::printf("  round %d: probe %.1f, kernel %.1f", r, before, kern.bytes / ta / 1e9);
      if (vs) std::printf(" (--vs %.1f)", kern.bytes / tb / 1e9);
      std::printf(", probe %.1f GB/s\n", after);
    }
  }
  a.print(kern.name, kern.bytes, hot_ns_per_element(hot.call, hot.elements));
  if (vs) {
    b.print(kern.name + " [" + vs_label + "]", kern.bytes,
            hot_ns_per_element(hot.call_vs, hot.elements));
    std::printf("%-11s   --vs time / default time: median %.3f over %d paired rounds\n", "",
                ka::profiler::summarize(paired).median, rounds);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (const int code = parse_arguments(argc, argv, args); code >= 0) return code;
  const int threads = args.threads;
  const int rounds = args.rounds;
  const std::string& only = args.only;
  ka::kernels::set_cpu_thread_limit(threads);
  std::vector<std::unique_ptr<Floats>> keep;
  const std::vector<Kernel> big = make_kernels(4096, keep, only);
  // The hot figure: 4 rows of 4096 (64 KiB per tensor, hot in L2 after the first call) on one
  // thread (the default config runs a problem this small on the calling thread).
  std::vector<std::unique_ptr<Floats>> keep_small;
  ka::kernels::set_cpu_thread_limit(1);
  const std::vector<Kernel> small = make_kernels(4, keep_small, only);
  ka::kernels::set_cpu_thread_limit(threads);
  if (big.empty()) {
    std::fprintf(stderr, "ka_memory_bench: no kernel named '%s' (see --help)\n", only.c_str());
    return 2;
  }
  std::printf("ka_memory_bench: %d thread(s), %d rounds; 16M fp32 elements per tensor\n", threads,
              rounds);
  std::printf("%-11s | %8s %7s %7s | %9s %9s | %s\n", "kernel", "ms", "GB/s", "%copy",
              "probe lo", "probe hi", "hot, 1 thread: ns/elem");
  for (std::size_t k = 0; k < big.size(); ++k) {
    time_kernel(big[k], small[k], threads, rounds, args.vs_label);
  }
  std::puts("(ms and GB/s: median over rounds of the mean of 5 calls; %copy: median over rounds "
            "of GB/s over the mean of the copy probes taken right before and after (each the best "
            "of 2 copies of each kind: ordinary, streaming, streaming on ka's thread pool); probe "
            "lo/hi: GB/s range of those probes)");
  return 0;
}
