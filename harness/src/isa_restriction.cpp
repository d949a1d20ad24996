#include <ka/harness/detail/isa_restriction.hpp>

#include <ka/harness/detail/bench_case.hpp>
#include <ka/harness/detail/peer_blas.hpp>

#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/harness/bench.hpp>

#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ka::harness {
namespace detail {

// Note [--isa]
// --isa avx512|avx2|generic runs ka and every library on one instruction-set family, so a
// comparison says which code is better rather than which ISA is wider:
//
//   --isa    ka (KA_CPU_ISA)  OPENBLAS_CORETYPE  BLIS config  ONEDNN_MAX_CPU_ISA
//   avx512   avx512           SkylakeX           skx          AVX512_CORE
//   avx2     avx2             Haswell            haswell      AVX2
//   generic  generic          Nehalem            penryn       SSE41
//
// "generic" is each library's code without AVX (ka's portable C++ kernel, the others' SSE
// kernels). Every library reads its variable once, when it initialises: OpenBLAS when it is
// loaded, and libtorch loads it at process start; BLIS and oneDNN at their first call. So
// ka-bench sets the variables and re-executes itself (execv of /proc/self/exe with the same
// arguments) unless they are already as wanted; KA_BENCH_ISA_REEXEC marks the new process, so
// this happens at most once. BLIS 0.9 takes BLIS_ARCH_TYPE as its configuration's number (a
// name is silently ignored), so ka-bench looks the number up in the BLIS it loads. The header
// prints what each library then reports it runs; without --isa nothing is set (the machines'
// own OPENBLAS_CORETYPE stays as it is).

IsaRestriction isa_restriction(const std::string& isa, const std::string& cpu_level) {
  IsaRestriction r;
  if (isa == "avx512") {
    r = {isa, "SkylakeX", "skx", "AVX512_CORE", "avx512_core"};
  } else if (isa == "avx2") {
    r = {isa, "Haswell", "haswell", "AVX2", "avx2"};
  } else if (isa == "generic") {
    r = {isa, "Nehalem", "penryn", "SSE41", "sse41"};
  } else {
    KA_THROW(ValueError, "--isa ", isa, ": expected avx512, avx2 or generic");
  }
  const bool runs = isa == "generic" || cpu_level == "avx512" ||
                    (isa == "avx2" && cpu_level == "avx2");
  KA_CHECK(runs, "--isa ", isa, ": this CPU supports only ", cpu_level);
  return r;
}

std::string IsaRestriction::expected_core(const std::string& library) const {
  if (library == "ka") return isa;
  if (library == kImplBlis) return blis_config;
  if (library == kImplOneDnn) return onednn_isa;
  return openblas_coretype;  // libtorch's BLAS and the openblas peer
}

// Note [Kernels older than the CPU]
// Each library picks its kernels from the CPU's model, not only its features, and a release
// older than the CPU may not know the model: it then falls back to a far older family. Seen
// here: BLIS 0.9 runs its portable C kernels on AMD's family 26, and OpenBLAS 0.3.21 runs its
// Prescott (SSE3) kernels on a Xeon of model 207, libtorch's GEMMs with them (figures in commit
// d673d6f's body). A comparison with such a library measures its fallback, so the
// header says so, and what would select the CPU's own family. The names are those the
// libraries report (openblas_get_corename, bli_arch_string, dnnl_get_effective_cpu_isa).
std::string core_isa_family(const std::string& library, const std::string& core) {
  auto in = [&core](std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(),
                       [&core](const char* n) { return strcasecmp(core.c_str(), n) == 0; });
  };
  if (library == kImplOneDnn) {
    // oneDNN 3's AVX10 levels (avx10_1_512, avx10_2_512_amx_2) are AVX-512 with new names; a
    // prefix test alone would class them "avx".
    if (core.rfind("avx10", 0) == 0) return "avx512";
    for (const char* family : {"avx512", "avx2", "avx", "sse"}) {
      if (core.rfind(family, 0) == 0) return family;
    }
    return "";
  }
  if (library == kImplBlis) {
    if (in({"skx", "knl", "zen4", "zen5"})) return "avx512";
    if (in({"haswell", "zen", "zen2", "zen3"})) return "avx2";
    if (in({"sandybridge", "bulldozer", "piledriver", "steamroller", "excavator"})) return "avx";
    if (in({"penryn", "generic"})) return "sse";
    return "";
  }
  // OpenBLAS, libtorch's BLAS included.
  if (in({"SkylakeX", "Cooperlake", "SapphireRapids"})) return "avx512";
  if (in({"Haswell", "Zen", "Excavator"})) return "avx2";
  if (in({"Sandybridge", "Bulldozer", "Piledriver", "Steamroller"})) return "avx";
  if (in({"Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Atom", "Core2", "Penryn",
          "Dunnington", "Nehalem", "Opteron", "Opteron_SSE3", "Barcelona", "Bobcat"})) {
    return "sse";
  }
  return "";
}

std::string older_kernels_warning(const std::string& library, const std::string& core,
                                  const std::string& cpu_level) {
  static const std::array<std::string, 4> kOrder = {"sse", "avx", "avx2", "avx512"};
  const std::string family = core_isa_family(library, core);
  const auto rank = [](const std::string& f) {
    return std::find(kOrder.begin(), kOrder.end(), f) - kOrder.begin();
  };
  if (family.empty() || (cpu_level != "avx2" && cpu_level != "avx512") ||
      rank(family) >= rank(cpu_level)) {
    return "";
  }
  const IsaRestriction own = isa_restriction(cpu_level, cpu_level);
  std::string selects = "--isa " + cpu_level;
  if (library == kImplLibtorch || library == kImplOpenBlas) {
    selects = "OPENBLAS_CORETYPE=" + own.openblas_coretype + " or " + selects;
  }
  return "WARNING: " + library + " runs its " + core + " kernels (" + family + ") on this " +
         cpu_level + " CPU, which it did not recognise; " + selects + " selects its " +
         own.expected_core(library) + " kernels";
}

std::vector<std::pair<std::string, std::string>> isa_environment(const IsaRestriction& r,
                                                                 int blis_arch_id) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"KA_CPU_ISA", r.isa},
      {"OPENBLAS_CORETYPE", r.openblas_coretype},
      {"ONEDNN_MAX_CPU_ISA", r.onednn_max_cpu_isa}};
  if (blis_arch_id >= 0) env.emplace_back("BLIS_ARCH_TYPE", std::to_string(blis_arch_id));
  return env;
}

}  // namespace detail

void apply_isa_restriction(const BenchOptions& options, char** argv) {
  if (options.isa.empty()) return;
  const detail::IsaRestriction r = detail::isa_restriction(options.isa, cpu_isa_level());
  const auto references = detail::parse_references(options.references);
  const bool blis = std::find(references.begin(), references.end(), detail::kImplBlis) !=
                    references.end();
  const auto env = detail::isa_environment(r, blis ? detail::blis_arch_id(r.blis_config) : -1);
  const bool as_wanted = std::all_of(env.begin(), env.end(), [](const auto& kv) {
    const char* now = std::getenv(kv.first.c_str());
    return now != nullptr && kv.second == now;
  });
  const char* marker = std::getenv(detail::kIsaMarker);
  // Once re-executed, go on whatever the variables say: the header shows what each library runs.
  if (as_wanted || (marker != nullptr && options.isa == marker)) return;
  for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
  setenv(detail::kIsaMarker, options.isa.c_str(), 1);
  std::fflush(stdout);
  std::fflush(stderr);
  execv("/proc/self/exe", argv);
  KA_THROW(Error, "--isa ", options.isa, ": could not re-execute ka-bench (execv /proc/self/exe): ",
           std::strerror(errno));
}

}  // namespace ka::harness
