// ka-bench --isa: one instruction-set family for ka and every library it is compared with.
// See Note [--isa] in isa_restriction.cpp.
// Internal to ka (namespace detail): for the harness and its unit tests, not a stable API.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ka::harness::detail {

/// What `--isa` asks of ka and of each library, in each one's own vocabulary.
struct IsaRestriction {
  std::string isa;                 ///< avx512, avx2 or generic: ka's KA_CPU_ISA.
  std::string openblas_coretype;   ///< OPENBLAS_CORETYPE: SkylakeX, Haswell, Nehalem.
  std::string blis_config;         ///< BLIS's configuration: skx, haswell, penryn.
  std::string onednn_max_cpu_isa;  ///< ONEDNN_MAX_CPU_ISA: AVX512_CORE, AVX2, SSE41.
  std::string onednn_isa;          ///< What oneDNN then reports: avx512_core, avx2, sse41.

  /// What `library` should then report it runs: ka's micro-kernel family ("ka"), OpenBLAS's
  /// core ("libtorch", "openblas"), BLIS's configuration, oneDNN's ISA.
  [[nodiscard]] std::string expected_core(const std::string& library) const;
};

/// The restriction `isa` means on a CPU whose best level is `cpu_level` (cpu_isa_level()).
/// Throws ka::ValueError for a name other than avx512, avx2 or generic, or one the CPU cannot
/// run ("--isa avx512: this CPU supports only avx2").
IsaRestriction isa_restriction(const std::string& isa, const std::string& cpu_level);

/// The environment `r` sets, in order: KA_CPU_ISA, OPENBLAS_CORETYPE, ONEDNN_MAX_CPU_ISA, and
/// BLIS_ARCH_TYPE=`blis_arch_id` when that is >= 0 (BLIS is only loaded when --vs names it).
std::vector<std::pair<std::string, std::string>> isa_environment(const IsaRestriction& r,
                                                                 int blis_arch_id);

/// The instruction-set family of the kernels `library` ("libtorch" and "openblas": OpenBLAS's
/// core; "blis": its configuration; "onednn": its ISA) says it runs: "avx512", "avx2", "avx" or
/// "sse"; "" for a name this does not know.
std::string core_isa_family(const std::string& library, const std::string& core);

/// A warning when `library`'s kernels are of an older family than this CPU runs (cpu_level,
/// cpu_isa_level()): the library did not recognise the CPU (OpenBLAS 0.3.21 takes a Xeon of
/// model 207 for a Prescott and runs SSE3 kernels). It says what selects the CPU's own family.
/// "" when the kernels are the CPU's family or the name is unknown.
std::string older_kernels_warning(const std::string& library, const std::string& core,
                                  const std::string& cpu_level);

/// The variable that marks a process ka-bench re-executed for --isa (its value is the ISA).
constexpr const char* kIsaMarker = "KA_BENCH_ISA_REEXEC";

}  // namespace ka::harness::detail
