#include "gemm_case.hpp"

#include <ka/harness/detail/peer_blas.hpp>

#include <ka/core/error.hpp>

#include <ka/executor/cuda_executor.hpp>
#include <ka/kernels/cuda_limits.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/extractor/extractor.hpp>
#include <ka/dispatch/dispatcher.hpp>
#include <ka/profiler/span.hpp>
#include <ka/runtime/aten_ops.hpp>
#include <ka/runtime/runtime.hpp>
#include <ka/extractor/tensor_interop.hpp>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#if __has_include(<torch/version.h>)
#include <torch/version.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

namespace ka::harness::detail {

double Tolerance::atol(std::int64_t k) const {
  return atol_per_sqrt_k * std::sqrt(static_cast<double>(std::max<std::int64_t>(k, 1)));
}

namespace {
// Note [Peer GEMM calls]
// A peer computes what libtorch's at::addmm_out / at::mm_out do, into its own preallocated
// output, from the same tensors. aten::mm is one sgemm with beta = 0. aten::addmm's bias (a
// row of N) is first broadcast into C, scaled by beta, and then sgemm adds alpha * A B with
// beta = 1. The broadcast is part of every timed call, as it is of libtorch's (addmm_out
// copies the bias into its output before its GEMM); it writes M x N floats once, cheap
// beside the GEMM. With beta = 0 the bias is ignored, as aten::addmm ignores it; with K = 0
// no library is called (C is the bias, or zeros). The operands are passed row-major; one that
// is not contiguous (no case builds one today) is copied once when the case is built,
// outside timing.

// `t` (rows x cols) as a row-major BLAS operand and its leading dimension, at least 1 (BLAS
// checks that even for empty matrices).
std::pair<at::Tensor, std::int64_t> blas_operand(const at::Tensor& t) {
  return {t.contiguous(), std::max<std::int64_t>(1, t.size(1))};
}
}  // namespace

struct GemmCase::Impl {
  SuiteCase c;
  CaseContext context;
  bool cuda = false;
  LaunchConfig config;
  std::string provenance;
  Tolerance tolerance;
  at::Tensor mat1, mat2, bias, out_ka, out_ref;
  kernels::AddmmArgs args;
  std::vector<std::string> variants;
  // The peers' output (shared: one peer runs at a time) and operands; Note [Peer GEMM calls].
  at::Tensor out_peer;
  std::pair<at::Tensor, std::int64_t> peer_a, peer_b;  // (tensor, leading dimension)
};

ShapeKey GemmCase::shape_key(const SuiteCase& c) {
  return kernels::addmm_shape_key(c.m, c.k, c.n, c.op == "aten::addmm");
}

GemmCase::GemmCase(const SuiteCase& c, std::uint64_t seed, const CaseContext& context)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  runtime::register_aten_ops();  // the ka variant calls ka's dispatcher
  s.c = c;
  s.context = context;
  s.cuda = context.device == DeviceType::kCUDA;
  // The configuration ka's pipeline uses for this shape (ka-kernel runs it too): a tuned
  // table's (KA_TUNED_TABLE or --tuned-table) or the kernel's heuristic, on at most --threads
  // threads (the run sets kernels::set_cpu_thread_limit).
  const auto choice = extractor::Extractor::global().choose_config(
      s.cuda ? kernels::gemm_f32_cuda_descriptor() : kernels::gemm_f32_cpu_descriptor(), c.op,
      shape_key(c));
  s.config = choice.config;
  s.provenance = db::to_string(choice.provenance);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  s.mat1 = at::empty({c.m, c.k}, opts).uniform_(-1.0, 1.0, gen);
  s.mat2 = at::empty({c.k, c.n}, opts).uniform_(-1.0, 1.0, gen);
  if (c.op == "aten::addmm") s.bias = at::empty({c.n}, opts).uniform_(-1.0, 1.0, gen);
  // On a GPU the same seeded inputs are copied over, so both devices see one case.
  const at::Device where = s.cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  if (s.cuda) {
    s.mat1 = s.mat1.to(where);
    s.mat2 = s.mat2.to(where);
    if (s.bias.defined()) s.bias = s.bias.to(where);
  }
  s.out_ka = at::empty({c.m, c.n}, opts.device(where));
  s.out_ref = at::empty({c.m, c.n}, opts.device(where));
  s.args.out = extractor::to_view(s.out_ka);
  s.args.mat1 = extractor::to_view(s.mat1);
  s.args.mat2 = extractor::to_view(s.mat2);
  if (s.bias.defined()) s.args.self = extractor::to_view(s.bias);
  s.args.alpha = static_cast<float>(c.alpha);
  s.args.beta = static_cast<float>(c.beta);
  s.variants = variants_of(c, context.references);
  if (std::any_of(s.variants.begin(), s.variants.end(), is_peer)) {
    KA_ASSERT(!s.cuda, "a CUDA case with CPU peer libraries (ka-bench refuses --vs with them)");
    s.out_peer = at::empty({c.m, c.n}, opts);
    s.peer_a = blas_operand(s.mat1);
    s.peer_b = blas_operand(s.mat2);
  }
}

GemmCase::~GemmCase() = default;

namespace {
using T = const at::Tensor&;
using S = const at::Scalar&;
// The out= overloads in ka's dispatcher (registered by the Runtime the run makes).
const dispatch::TypedOperatorHandle<at::Tensor(T, T, T, S, S, T)>& ka_addmm_out() {
  static const auto op = dispatch::Dispatcher::singleton()
                             .find_op_or_throw("aten::addmm.out")
                             .typed<at::Tensor(T, T, T, S, S, T)>();
  return op;
}
const dispatch::TypedOperatorHandle<at::Tensor(T, T, T)>& ka_mm_out() {
  static const auto op = dispatch::Dispatcher::singleton()
                             .find_op_or_throw("aten::mm.out")
                             .typed<at::Tensor(T, T, T)>();
  return op;
}
}  // namespace

void GemmCase::run_ka() {
  Impl& s = *impl_;
  if (s.bias.defined()) {
    ka_addmm_out().call(s.bias, s.mat1, s.mat2, s.c.beta, s.c.alpha, s.out_ka);
  } else {
    ka_mm_out().call(s.mat1, s.mat2, s.out_ka);
  }
}

Status GemmCase::run_ka_kernel() {
  if (impl_->cuda) return kernels::gemm_f32_cuda(impl_->args, impl_->config, nullptr);
  return kernels::gemm_f32_cpu(impl_->args, impl_->config);
}

void GemmCase::run_libtorch() {
  Impl& s = *impl_;
  if (s.bias.defined()) {
    at::addmm_out(s.out_ref, s.bias, s.mat1, s.mat2, s.c.beta, s.c.alpha);
  } else {
    at::mm_out(s.out_ref, s.mat1, s.mat2);
  }
}

Status GemmCase::run_peer(const std::string& name) {
  Impl& s = *impl_;
  const std::int64_t m = s.c.m;
  const std::int64_t n = s.c.n;
  if (m == 0 || n == 0) return Status::ok();
  auto* out = s.out_peer.data_ptr<float>();
  float beta = 0.0F;
  if (s.bias.defined() && s.c.beta != 0.0) {
    // Note [Peer GEMM calls]: the bias is broadcast into C inside the timed call.
    const auto* bias = s.bias.data_ptr<float>();
    const auto scale = static_cast<float>(s.c.beta);
    const auto row_bytes = static_cast<std::size_t>(n) * sizeof(float);
    for (std::int64_t i = 0; i < m; ++i) {
      float* row = out + i * n;
      if (scale == 1.0F) {
        std::memcpy(row, bias, row_bytes);
      } else {
        for (std::int64_t j = 0; j < n; ++j) row[j] = scale * bias[j];
      }
    }
    beta = 1.0F;
  }
  if (s.c.k == 0) {
    // An empty product leaves beta * C: the bias, or zeros. dnnl_sgemm 2.6 refuses K = 0
    // (invalid arguments), so no library is asked.
    if (beta == 0.0F) std::fill(out, out + m * n, 0.0F);
    return Status::ok();
  }
  SgemmArgs g;
  g.m = m;
  g.n = n;
  g.k = s.c.k;
  g.alpha = static_cast<float>(s.c.alpha);
  g.a = s.peer_a.first.data_ptr<float>();
  g.lda = s.peer_a.second;
  g.b = s.peer_b.first.data_ptr<float>();
  g.ldb = s.peer_b.second;
  g.beta = beta;
  g.c = out;
  g.ldc = n;
  return peer_library(name).sgemm(g);
}

Status GemmCase::run(std::size_t v) {
  const std::string& impl = impl_->variants.at(v);
  if (impl == kImplKa) {
    run_ka();
    return Status::ok();
  }
  if (impl == kImplKaKernel) return run_ka_kernel();
  if (impl == kImplLibtorch) {
    run_libtorch();
    return Status::ok();
  }
  return run_peer(impl);
}

VariantInfo GemmCase::info(std::size_t v) const {
  const Impl& s = *impl_;
  VariantInfo info;
  info.op = s.c.op;
  info.shape_key = shape_key(s.c).str();
  const std::string& impl = s.variants.at(v);
  if (impl == kImplKa || impl == kImplKaKernel) {
    const auto& d =
        s.cuda ? kernels::gemm_f32_cuda_descriptor() : kernels::gemm_f32_cpu_descriptor();
    info.kernel = s.cuda ? d.name : d.name + "[" + kernels::gemm_cpu_isa() + "]";
    info.kernel_version = d.version;
    info.config = s.config.str();
    info.provenance = s.provenance;
  } else if (impl == kImplLibtorch) {
    info.kernel = s.context.libtorch_gemm_kernel;
  } else {
    const PeerInfo peer = peer_library(impl).info();
    info.kernel = peer.kernel();
    info.config = "threads=" + std::to_string(peer.threads);
  }
  return info;
}

CheckResult GemmCase::check(std::size_t v) {
  Impl& s = *impl_;
  const Tolerance& tolerance = s.tolerance;
  const std::string& impl = s.variants.at(v);
  KA_ASSERT(impl != kImplLibtorch, "GemmCase::check of libtorch, the reference itself");
  const bool ka = impl == kImplKa || impl == kImplKaKernel;
  const at::Tensor& out = ka ? s.out_ka : s.out_peer;
  CheckResult r;
  out.fill_(std::numeric_limits<float>::quiet_NaN());  // unwritten elements must show
  run_libtorch();
  if (Status st = run(v); !st) {
    r.refused = true;
    r.detail = (ka ? std::string("ka kernel") : impl) + " refused the case: " +
               st.reason();
    return r;
  }
  if (out.numel() == 0) {
    r.correct = true;
    return r;
  }
  const double atol = tolerance.atol(s.c.k);
  const at::Tensor diff = (out - s.out_ref).abs();
  const at::Tensor bound = s.out_ref.abs() * tolerance.rtol + atol;
  const at::Tensor bad = diff.gt(bound).logical_or(out.isnan().logical_xor(s.out_ref.isnan()));
  r.max_abs_error = diff.nan_to_num(std::numeric_limits<double>::infinity()).max().item<double>();
  const auto nbad = bad.sum().item<std::int64_t>();
  r.correct = nbad == 0;
  if (!r.correct) {
    const auto first = bad.flatten().nonzero()[0].item<std::int64_t>();
    const auto row = first / s.c.n;
    const auto col = first % s.c.n;
    std::ostringstream text;
    text << nbad << " of " << out.numel() << " elements differ beyond atol=" << atol
         << " rtol=" << tolerance.rtol << "; first at [" << row << ", " << col << "]: " << impl
         << "=" << out[row][col].item<float>() << " libtorch=" << s.out_ref[row][col].item<float>();
    r.detail = text.str();
  }
  return r;
}

void GemmCase::run_pipeline() {
  KA_SPAN("call");
  run_ka();
}

bool GemmCase::run_kernel() {
  KA_SPAN("kernel");
  return run_ka_kernel().is_ok();
}

GpuInfo cuda_bench_device() {
  std::string why;
  KA_CHECK_TYPE(CudaError, executor::cuda_device_available(&why),
                "--device cuda: no CUDA device to run on (", why, ")");
  KA_CHECK_TYPE(CudaError, at::hasCUDA(),
                "--device cuda: the libtorch ka is linked with (", libtorch_version(),
                ") has no CUDA, so neither the cases' tensors nor the cuBLAS reference can be "
                "placed on the GPU; build ka against a CUDA libtorch (scripts/device-check.sh "
                "shows how)");
  const auto limits = kernels::current_cuda_limits();
  const auto fp = kernels::current_cuda_fingerprint();
  KA_CHECK_TYPE(CudaError, limits && fp, "--device cuda: the GPU's properties could not be read");
  GpuInfo g;
  g.fingerprint = *fp;
  g.fp32_lanes_per_sm = kernels::fp32_lanes_per_sm(limits->cc_major, limits->cc_minor);
  g.fp32_peak_gflops = kernels::cuda_fp32_peak_gflops(*limits);
  g.libtorch_gemm_kernel = std::string("at::addmm_out (cuBLAS, TF32 ") +
                           (at::globalContext().allowTF32CuBLAS() ? "on" : "off") + ")";
  return g;
}

std::string load_tuned_table(const std::string& path, DeviceType device) {
  const runtime::Runtime rt;  // registers ka's ops; reads KA_TUNED_TABLE once per process
  if (!path.empty()) rt.load_table(path);
  const auto table = rt.extractor().table(device);
  if (table->size() == 0) {
    return "the kernels' default heuristics (no tuned table; see ka-tune and --tuned-table)";
  }
  const char* env = std::getenv("KA_TUNED_TABLE");
  return "tuned table " + (path.empty() ? std::string(env ? env : "?") : path) + " (" +
         std::to_string(table->size()) +
         " rows for this " + (device == DeviceType::kCUDA ? "GPU" : "CPU") + "; other shapes: nearest tuned shape, else heuristic; "
         "--explain shows each case's provenance)";
}

std::string libtorch_version() {
#ifdef TORCH_VERSION_MAJOR
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
#else
  return "unknown";
#endif
}

void set_libtorch_threads(int threads) { at::set_num_threads(threads); }

}  // namespace ka::harness::detail
