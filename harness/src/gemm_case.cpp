#include "gemm_case.hpp"

#include <ka/kernels/gemm.hpp>
#include <ka/extractor/tensor_interop.hpp>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#if __has_include(<torch/version.h>)
#include <torch/version.h>
#endif

#include <cmath>
#include <sstream>

namespace ka::harness::detail {
double Tolerance::atol(std::int64_t k) const {
  return atol_per_sqrt_k * std::sqrt(static_cast<double>(std::max<std::int64_t>(k, 1)));
}

struct GemmCase::Impl {
  SuiteCase c;
  at::Tensor mat1, mat2, bias, out_ka, out_ref;
  kernels::AddmmArgs args;
};

GemmCase::GemmCase(const SuiteCase& c, std::uint64_t seed) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.c = c;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  s.mat1 = at::empty({c.m, c.k}, opts).uniform_(-1.0, 1.0, gen);
  s.mat2 = at::empty({c.k, c.n}, opts).uniform_(-1.0, 1.0, gen);
  if (c.op == "aten::addmm") s.bias = at::empty({c.n}, opts).uniform_(-1.0, 1.0, gen);
  s.out_ka = at::empty({c.m, c.n}, opts);
  s.out_ref = at::empty({c.m, c.n}, opts);
  s.args.out = extractor::to_view(s.out_ka);
  s.args.mat1 = extractor::to_view(s.mat1);
  s.args.mat2 = extractor::to_view(s.mat2);
  if (s.bias.defined()) s.args.self = extractor::to_view(s.bias);
  s.args.alpha = static_cast<float>(c.alpha);
  s.args.beta = static_cast<float>(c.beta);
}

GemmCase::~GemmCase() = default;

ShapeKey GemmCase::shape_key() const {
  return kernels::addmm_shape_key(impl_->c.m, impl_->c.k, impl_->c.n, impl_->bias.defined());
}

Status GemmCase::run_ka(const LaunchConfig& config) {
  return kernels::gemm_f32_cpu(impl_->args, config);
}

void GemmCase::run_libtorch() {
  Impl& s = *impl_;
  if (s.bias.defined()) {
    at::addmm_out(s.out_ref, s.bias, s.mat1, s.mat2, s.c.beta, s.c.alpha);
  } else {
    at::mm_out(s.out_ref, s.mat1, s.mat2);
  }
}

CheckResult GemmCase::check(const LaunchConfig& config, const Tolerance& tolerance) {
  Impl& s = *impl_;
  CheckResult r;
  s.out_ka.fill_(std::numeric_limits<float>::quiet_NaN());  // unwritten elements must show
  run_libtorch();
  if (Status st = run_ka(config); !st) {
    r.refused = true;
    r.detail = "ka kernel refused the case: " + st.reason();
    return r;
  }
  if (s.out_ka.numel() == 0) {
    r.correct = true;
    return r;
  }
  const double atol = tolerance.atol(s.c.k);
  const at::Tensor diff = (s.out_ka - s.out_ref).abs();
  const at::Tensor bound = s.out_ref.abs() * tolerance.rtol + atol;
  const at::Tensor bad = diff.gt(bound).logical_or(s.out_ka.isnan().logical_xor(s.out_ref.isnan()));
  r.max_abs_error = diff.nan_to_num(std::numeric_limits<double>::infinity()).max().item<double>();
  const auto nbad = bad.sum().item<std::int64_t>();
  r.correct = nbad == 0;
  if (!r.correct) {
    const auto first = bad.flatten().nonzero()[0].item<std::int64_t>();
    const auto row = first / s.c.n;
    const auto col = first % s.c.n;
    std::ostringstream out;
    out << nbad << " of " << s.out_ka.numel() << " elements differ beyond atol=" << atol
        << " rtol=" << tolerance.rtol << "; first at [" << row << ", " << col
        << "]: ka=" << s.out_ka[row][col].item<float>()
        << " libtorch=" << s.out_ref[row][col].item<float>();
    r.detail = out.str();
  }
  return r;
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
