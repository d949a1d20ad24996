// The CPU kernels' ISA paths a test can force on this machine (KA_CPU_ISA / force_cpu_isa):
// the GEMM's micro-kernels and the element-wise AVX-512 math versus the portable loops.
#pragma once

#include <ka/core/fingerprint.hpp>
#include <ka/kernels/gemm.hpp>

#include <string>
#include <vector>

namespace ka::test {

/// "generic", then "avx2" and "avx512" where this CPU runs them.
inline std::vector<std::string> runnable_isas() {
  std::vector<std::string> isas = {"generic"};
  const std::string level = cpu_isa_level();
  if (level == "avx2" || level == "avx512") isas.push_back("avx2");
  if (level == "avx512") isas.push_back("avx512");
  return isas;
}

/// Forces an ISA path for its lifetime, then restores automatic selection.
struct IsaGuard {
  explicit IsaGuard(const std::string& isa) { kernels::force_cpu_isa(isa); }
  ~IsaGuard() { kernels::force_cpu_isa(""); }
  IsaGuard(const IsaGuard&) = delete;
  IsaGuard& operator=(const IsaGuard&) = delete;
};

}  // namespace ka::test
