#include <ka/harness/detail/bench_case.hpp>

#include <climits>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "gemm_case.hpp"
#include "graph_case.hpp"

#include <ka/core/dtype.hpp>
#include <ka/core/error.hpp>

#include <fmt/format.h>

namespace ka::harness::detail {

std::regex case_filter(const std::string& text, const char* option) {
  try {
    return std::regex(text.empty() ? "." : text);
  } catch (const std::regex_error& e) {
    KA_THROW(ValueError, option, "='", text, "' is not a regular expression: ", e.what());
  }
}

std::vector<std::string> variants_of(const SuiteCase& c,
                                     const std::vector<std::string>& references) {
  if (c.is_graph()) return {kImplKa, kImplKaUnfused, kImplLibtorch};
  std::vector<std::string> variants = {kImplKa};
  variants.insert(variants.end(), references.begin(), references.end());
  return variants;
}

std::string keep_freed_memory() {
#if defined(__GLIBC__)
  // M_MMAP_MAX = 0: every block comes from the heap, so a freed 64 MiB output is reused by the
  // next call instead of being unmapped; M_TRIM_THRESHOLD: the heap's top is never returned.
  if (mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1) {
    return "freed memory stays in the process (glibc M_MMAP_MAX=0, no trimming), so large "
           "per-call outputs are not page-faulted in again on every call";
  }
#endif
  return "";
}

double flop_of(const SuiteCase& c) {
  if (c.is_graph()) return 0.0;
  return 2.0 * static_cast<double>(c.m) * static_cast<double>(c.n) * static_cast<double>(c.k);
}

double min_bytes_of(const SuiteCase& c) {
  if (c.is_graph()) return 0.0;
  const auto m = static_cast<double>(c.m);
  const auto n = static_cast<double>(c.n);
  const auto k = static_cast<double>(c.k);
  return static_cast<double>(element_size(parse_dtype(c.dtype))) * (m * k + k * n + m * n);
}

std::unique_ptr<BenchCase> make_bench_case(const SuiteCase& c, std::uint64_t seed,
                                           const CaseContext& context) {
  if (c.is_graph()) return std::make_unique<GraphCase>(c, seed);
  return std::make_unique<GemmCase>(c, seed, context);
}

std::string tolerance_text(const SuiteCase& c) {
  if (c.is_graph()) {
    return fmt::format(
        "|ka - ref| <= {:g}*rms(ref) + {:g}*|ref| per output (inputs randn, masks "
        "0/-1e4)",
        c.atol, c.rtol);
  }
  const Tolerance t;
  return fmt::format("|ka - ref| <= {:g}*sqrt(K) + {:g}*|ref| (inputs uniform in [-1, 1))",
                     t.atol_per_sqrt_k, t.rtol);
}

}  // namespace ka::harness::detail
