// One GEMM case's tensors and its two implementations (ka, libtorch). The only harness code
// besides graph_case.cpp that includes libtorch; this header keeps torch out of its includers.
#pragma once

#include <ka/harness/detail/bench_case.hpp>

#include <ka/core/launch_config.hpp>
#include <ka/core/shape_key.hpp>

#include <cstdint>
#include <memory>

namespace ka::harness::detail {

/// Tolerance of the correctness check: |ka - ref| <= atol + rtol * |ref| element-wise, with
/// inputs uniform in [-1, 1). atol grows with sqrt(K) because the rounding error of an fp32
/// dot product of length K does.
struct Tolerance {
  double rtol = 1e-4;
  double atol_per_sqrt_k = 1e-5;
  [[nodiscard]] double atol(std::int64_t k) const;
};

/// An aten::mm / aten::addmm case. Variants (variants_of): 0 = ka through its pipeline (ka's
/// dispatcher's aten::addmm.out / aten::mm.out into a preallocated output, as libtorch's
/// at::addmm_out is timed), then the context's references: libtorch (at::addmm_out /
/// at::mm_out: OpenBLAS on the CPU, cuBLAS on a GPU), the peer libraries (CPU only; Note
/// [Peer GEMM calls]) and ka-kernel (ka's GEMM called directly at the configuration the
/// pipeline chooses). With context.device == CUDA the tensors live on CUDA device 0 and ka's
/// CUDA SGEMM runs on the legacy default stream, libtorch's current stream, without waiting.
class GemmCase final : public BenchCase {
 public:
  /// Allocates and fills the inputs (seeded), the bias for addmm, and the outputs. The peer
  /// libraries among the context's references must be loaded (peer_library) and run on the CPU.
  GemmCase(const SuiteCase& c, std::uint64_t seed, const CaseContext& context);
  ~GemmCase() override;

  /// ka's shape key of `c` (no tensors needed).
  static ShapeKey shape_key(const SuiteCase& c);

  Status run(std::size_t v) override;
  CheckResult check(std::size_t v) override;
  [[nodiscard]] VariantInfo info(std::size_t v) const override;
  void run_pipeline() override;
  bool run_kernel() override;

  /// One call of ka through its pipeline into the ka output.
  void run_ka();
  /// One call of ka's GEMM kernel (CPU, or enqueued on the GPU) into the ka output.
  Status run_ka_kernel();
  /// One call of libtorch: at::addmm_out / at::mm_out into a preallocated output.
  void run_libtorch();
  /// One call of peer library `name` into the peers' preallocated output.
  Status run_peer(const std::string& name);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ka::harness::detail
