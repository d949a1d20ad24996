// One GEMM case's tensors and its two implementations (ka, libtorch). The only harness code
// that includes libtorch; this header keeps torch out of its includers.
#pragma once

#include <ka/core/launch_config.hpp>
#include <ka/core/shape_key.hpp>
#include <ka/core/status.hpp>
#include <ka/harness/suite.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace ka::harness::detail {

/// Tolerance of the correctness check: |ka - ref| <= atol + rtol * |ref| element-wise, with
/// inputs uniform in [-1, 1). atol grows with sqrt(K) because the rounding error of an fp32
/// dot product of length K does.
struct Tolerance {
  double rtol = 1e-4;
  double atol_per_sqrt_k = 1e-5;
  [[nodiscard]] double atol(std::int64_t k) const;
};

struct CheckResult {
  bool correct = false;
  bool refused = false;  ///< The kernel declined the case (a Status), nothing was compared.
  double max_abs_error = 0.0;
  std::string detail;  ///< Why it failed (first bad element, or the exception text).
};

class GemmCase {
 public:
  /// Allocates and fills the inputs (seeded), the bias for addmm, and both outputs.
  GemmCase(const SuiteCase& c, std::uint64_t seed);
  ~GemmCase();
  GemmCase(const GemmCase&) = delete;
  GemmCase& operator=(const GemmCase&) = delete;

  [[nodiscard]] ShapeKey shape_key() const;
  /// One call of ka's CPU GEMM into the ka output.
  Status run_ka(const LaunchConfig& config);
  /// One call of libtorch: at::addmm_out / at::mm_out into a preallocated output.
  void run_libtorch();
  /// Runs both once and compares ka's output with libtorch's.
  CheckResult check(const LaunchConfig& config, const Tolerance& tolerance);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// "1.13.0" (libtorch's version as compiled against).
std::string libtorch_version();
/// Sets libtorch's intra-op threads (and OpenBLAS's, when it is the BLAS).
void set_libtorch_threads(int threads);

}  // namespace ka::harness::detail
