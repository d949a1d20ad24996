// ka-bench --vs and --isa: the reference list, the ISA restriction each library is given, the
// decode roofline, and the peer libraries computing what libtorch computes.
#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/harness/suite.hpp>

#include <ka/harness/detail/bench_case.hpp>
#include <ka/harness/detail/isa_restriction.hpp>
#include <ka/harness/detail/peer_blas.hpp>
#include <ka/harness/detail/roofline.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace ka::harness::detail {
namespace {

using Strings = std::vector<std::string>;

// The ValueError message of `fn`, or "" when it did not throw one.
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const ValueError& e) {
    return e.what();
  }
  return {};
}

TEST(Peers, ReferencesKeepTheOrderGiven) {
  EXPECT_EQ(parse_references("libtorch"), Strings{"libtorch"});
  EXPECT_EQ(parse_references("onednn,libtorch,blis,openblas"),
            (Strings{"onednn", "libtorch", "blis", "openblas"}));
  EXPECT_EQ(parse_references("blis"), Strings{"blis"});
}

TEST(Peers, BadReferenceListsAreUsageErrors) {
  EXPECT_EQ(error_of([] { parse_references("libtorch,mkl"); }),
            "--vs mkl: unknown implementation (expected libtorch, openblas, blis, onednn or ka-kernel)");
  EXPECT_NE(error_of([] { parse_references("blis,blis"); }).find("names blis twice"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_references(""); }).find("empty entry"), std::string::npos);
  EXPECT_NE(error_of([] { parse_references("openblas,"); }).find("empty entry"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_references("OpenBLAS"); }), "") << "names are lower case";
}

TEST(Peers, OnlyTheLoadedLibrariesArePeers) {
  EXPECT_TRUE(is_peer("openblas"));
  EXPECT_TRUE(is_peer("blis"));
  EXPECT_TRUE(is_peer("onednn"));
  EXPECT_FALSE(is_peer("libtorch"));
  EXPECT_FALSE(is_peer("ka"));
}

TEST(Peers, AMissingLibraryNamesItsDebianPackage) {
  EXPECT_EQ(missing_peer_message("blis"),
            "--vs blis: libblis.so.4 not found; install the Debian package libblis4-pthread "
            "(scripts/install-deps.sh installs it)");
  EXPECT_NE(missing_peer_message("openblas").find("libopenblas0-pthread"), std::string::npos);
  EXPECT_NE(missing_peer_message("onednn").find("libdnnl.so.2"), std::string::npos);
}

TEST(Peers, VariantsAreKaThenTheReferences) {
  SuiteCase c;
  c.op = "aten::mm";
  EXPECT_EQ(variants_of(c), (Strings{"ka", "libtorch"}));
  EXPECT_EQ(variants_of(c, {"blis", "libtorch"}), (Strings{"ka", "blis", "libtorch"}));
  EXPECT_EQ(variants_of(c, {"openblas"}), (Strings{"ka", "openblas"}));
  c.graph = "g";  // graph cases keep their own variants
  EXPECT_EQ(variants_of(c, {"openblas"}), (Strings{"ka", "ka_unfused", "libtorch"}));
}

TEST(IsaRestriction, EachLibraryGetsItsOwnNameForTheFamily) {
  const IsaRestriction avx2 = isa_restriction("avx2", "avx512");
  EXPECT_EQ(avx2.openblas_coretype, "Haswell");
  EXPECT_EQ(avx2.blis_config, "haswell");
  EXPECT_EQ(avx2.onednn_max_cpu_isa, "AVX2");
  EXPECT_EQ(avx2.expected_core("ka"), "avx2");
  EXPECT_EQ(avx2.expected_core("libtorch"), "Haswell");
  EXPECT_EQ(avx2.expected_core("openblas"), "Haswell");
  EXPECT_EQ(avx2.expected_core("blis"), "haswell");
  EXPECT_EQ(avx2.expected_core("onednn"), "avx2");
  const IsaRestriction avx512 = isa_restriction("avx512", "avx512");
  EXPECT_EQ(avx512.openblas_coretype, "SkylakeX");
  EXPECT_EQ(avx512.blis_config, "skx");
  EXPECT_EQ(avx512.expected_core("onednn"), "avx512_core");
  const IsaRestriction generic = isa_restriction("generic", "generic");
  EXPECT_EQ(generic.openblas_coretype, "Nehalem");
  EXPECT_EQ(generic.blis_config, "penryn");
  EXPECT_EQ(generic.onednn_max_cpu_isa, "SSE41");
}

// Every core the --isa restriction asks for is classed in its own family, so a library that
// obeys --isa is never warned about.
TEST(OlderKernels, TheRestrictionsOwnCoresAreTheirFamily) {
  for (const std::string isa : {"avx512", "avx2"}) {
    const IsaRestriction r = isa_restriction(isa, "avx512");
    for (const std::string library : {"libtorch", "openblas", "blis", "onednn"}) {
      EXPECT_EQ(core_isa_family(library, r.expected_core(library)), isa) << library;
      EXPECT_EQ(older_kernels_warning(library, r.expected_core(library), isa), "") << library;
    }
  }
  EXPECT_EQ(core_isa_family("openblas", isa_restriction("generic", "generic").openblas_coretype),
            "sse");
  EXPECT_EQ(core_isa_family("blis", "penryn"), "sse");
  EXPECT_EQ(core_isa_family("onednn", "sse41"), "sse");
}

TEST(OlderKernels, AFallbackIsNamedWithWhatSelectsTheCpusOwn) {
  // OpenBLAS 0.3.21 on a Xeon of model 207; BLIS 0.9 on AMD's family 26.
  EXPECT_EQ(older_kernels_warning("libtorch", "Prescott", "avx512"),
            "WARNING: libtorch runs its Prescott kernels (sse) on this avx512 CPU, which it did "
            "not recognise; OPENBLAS_CORETYPE=SkylakeX or --isa avx512 selects its SkylakeX "
            "kernels");
  EXPECT_EQ(older_kernels_warning("blis", "generic", "avx512"),
            "WARNING: blis runs its generic kernels (sse) on this avx512 CPU, which it did not "
            "recognise; --isa avx512 selects its skx kernels");
  EXPECT_EQ(older_kernels_warning("blis", "haswell", "avx512"),
            "WARNING: blis runs its haswell kernels (avx2) on this avx512 CPU, which it did not "
            "recognise; --isa avx512 selects its skx kernels");
  EXPECT_NE(older_kernels_warning("onednn", "avx2", "avx512"), "");
  EXPECT_NE(older_kernels_warning("openblas", "Sandybridge", "avx2"), "");
  // The CPU's own family or a newer one, a CPU without AVX2, or a name not known: no warning.
  EXPECT_EQ(older_kernels_warning("openblas", "Haswell", "avx2"), "");
  EXPECT_EQ(older_kernels_warning("openblas", "Cooperlake", "avx512"), "");
  EXPECT_EQ(older_kernels_warning("onednn", "avx512_core_bf16", "avx512"), "");
  EXPECT_EQ(core_isa_family("onednn", "avx10_1_512_amx"), "avx512");  // oneDNN 3's names
  EXPECT_EQ(older_kernels_warning("onednn", "avx10_2_512", "avx512"), "");
  EXPECT_EQ(older_kernels_warning("blis", "zen5", "avx512"), "");  // BLIS 1.x
  EXPECT_EQ(older_kernels_warning("openblas", "Prescott", "sse4.2"), "");
  EXPECT_EQ(older_kernels_warning("openblas", "SomeFutureCore", "avx512"), "");
}

TEST(IsaRestriction, IsCheckedAgainstTheCpu) {
  EXPECT_EQ(error_of([] { isa_restriction("avx512", "avx2"); }),
            "--isa avx512: this CPU supports only avx2");
  EXPECT_EQ(error_of([] { isa_restriction("avx2", "sse4.2"); }),
            "--isa avx2: this CPU supports only sse4.2");
  EXPECT_EQ(error_of([] { isa_restriction("avx2", "avx2"); }), "");
  EXPECT_EQ(error_of([] { isa_restriction("generic", "generic"); }), "");
  EXPECT_EQ(error_of([] { isa_restriction("neon", "avx512"); }),
            "--isa neon: expected avx512, avx2 or generic");
}

TEST(IsaRestriction, EnvironmentSetsBlisOnlyWhenLoaded) {
  const IsaRestriction r = isa_restriction("avx2", "avx2");
  using Env = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(isa_environment(r, -1), (Env{{"KA_CPU_ISA", "avx2"},
                                         {"OPENBLAS_CORETYPE", "Haswell"},
                                         {"ONEDNN_MAX_CPU_ISA", "AVX2"}}));
  const Env with_blis = isa_environment(r, 3);
  ASSERT_EQ(with_blis.size(), 4U);
  EXPECT_EQ(with_blis.back(), (std::pair<std::string, std::string>{"BLIS_ARCH_TYPE", "3"}));
}

TEST(Roofline, DecodeIsBoundByReadingBOnce) {
  EXPECT_DOUBLE_EQ(b_bytes(4096, 11008), 4.0 * 4096 * 11008);
  // M = 1: 0.5 FLOP per byte of B, so 50 GB/s reads allow 25 GFLOP/s.
  EXPECT_DOUBLE_EQ(decode_roofline_gflops(200.0, 50.0, 1), 25.0);
  EXPECT_DOUBLE_EQ(decode_roofline_gflops(200.0, 50.0, 16), 200.0) << "M = 16 reaches the FMA peak";
  EXPECT_DOUBLE_EQ(decode_roofline_gflops(500.0, 50.0, 16), 400.0);
  EXPECT_DOUBLE_EQ(decode_roofline_gflops(0.0, 50.0, 1), 0.0) << "unknown peak";
  EXPECT_DOUBLE_EQ(decode_roofline_gflops(200.0, 0.0, 1), 0.0) << "unknown bandwidth";
}

TEST(Roofline, ReadProbeMeasuresSomethingAgainAndAgain) {
  ReadProbe probe(1, std::size_t{8} << 20);
  std::vector<std::string> names;
  for (int k = 0; k < kReadPatterns; ++k) names.emplace_back(read_pattern_name(k));
  for (int i = 0; i < 2; ++i) {
    const ReadBandwidth r = probe.measure(3);
    EXPECT_GT(r.gbytes_per_s, 0.0);
    EXPECT_EQ(r.array_bytes, std::size_t{8} << 20);
    EXPECT_EQ(r.rounds, 3);
    EXPECT_EQ(r.threads, 1);
    EXPECT_NE(std::find(names.begin(), names.end(), std::string(r.pattern)), names.end())
        << "the best pattern is one of the probe's: '" << r.pattern << "'";
  }
}

// A per-case probe reads an array the size of the case's B: under a block, one block of that
// size in whole 2 KiB steps; above it, whole 1 MiB blocks.
TEST(Roofline, ReadProbeArraysFollowTheSizeAsked) {
  const std::pair<std::size_t, std::size_t> asked_and_read[] = {
      {1, 2048},
      {300 * 33 * 4, 40960},  // a 300 x 33 B: 39600 bytes in 20 steps
      {std::size_t{1} << 20, std::size_t{1} << 20},
      {(std::size_t{3} << 20) / 2, std::size_t{2} << 20},
  };
  for (const auto& [asked, read] : asked_and_read) {
    ReadProbe probe(2, asked);
    const ReadBandwidth r = probe.measure(1);
    EXPECT_EQ(r.array_bytes, read) << asked << " bytes asked";
    EXPECT_GT(r.gbytes_per_s, 0.0) << asked << " bytes asked";
    EXPECT_EQ(r.threads, 2);
  }
}

TEST(Roofline, EveryReadPatternReadsEveryWordOnce) {
  // Distinct words, so a pattern that skipped or repeated a stretch would sum differently.
  constexpr std::size_t kWords = std::size_t{1} << 16;
  // The probe's vector loads are aligned, as its array is.
  const std::unique_ptr<std::uint64_t, decltype(&std::free)> block(
      static_cast<std::uint64_t*>(std::aligned_alloc(64, kWords * sizeof(std::uint64_t))),
      &std::free);
  ASSERT_NE(block, nullptr);
  std::uint64_t expected = 0;
  for (std::size_t i = 0; i < kWords; ++i) {
    block.get()[i] = i * i + 1;
    expected += block.get()[i];
  }
  // Every load width this CPU can run (the probe itself uses the widest).
  const std::string host = cpu_isa_level();
  Strings isas = {"generic"};
  if (host == "avx2" || host == "avx512") isas.emplace_back("avx2");
  if (host == "avx512") isas.emplace_back("avx512");
  for (const std::string& isa : isas) {
    for (int k = 0; k < kReadPatterns; ++k) {
      EXPECT_EQ(read_pattern_sum(k, block.get(), kWords, isa), expected)
          << read_pattern_name(k) << " with " << isa << " loads";
    }
  }
  EXPECT_THROW((void)read_pattern_sum(2, block.get(), 100, "generic"), ValueError)
      << "not whole steps";
  EXPECT_THROW((void)read_pattern_name(kReadPatterns), ValueError);
}

// The peers are loaded with RTLD_DEEPBIND, which the sanitizers' runtimes refuse.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

TEST(Peers, EveryPeerComputesWhatLibtorchComputes) {
  if (kSanitized) GTEST_SKIP() << "dlopen(RTLD_DEEPBIND) is refused under a sanitizer";
  Strings refs = {"libtorch"};
  for (const char* peer : {"openblas", "blis", "onednn"}) {
    try {
      peer_library(peer).set_threads(2);
      refs.emplace_back(peer);
    } catch (const ValueError& e) {
      std::cout << "skipping " << peer << ": " << e.what() << "\n";
    }
  }
  if (refs.size() == 1) GTEST_SKIP() << "no peer library installed";
  // alpha/beta, an odd shape, K = 0 and aten::mm.
  const Suite s = load_suite_file(std::string(KA_TEST_SUITES_DIR) + "/smoke.yaml");
  CaseContext context{2, "at::addmm_out (x)"};
  context.references = refs;
  for (const SuiteCase& c : s.cases) {
    SCOPED_TRACE(c.name);
    const auto b = make_bench_case(c, 7, context);
    const Strings variants = variants_of(c, refs);
    for (std::size_t v = 0; v < variants.size(); ++v) {
      if (!is_peer(variants[v])) continue;
      SCOPED_TRACE(variants[v]);
      const CheckResult r = b->check(v);
      EXPECT_TRUE(r.correct) << r.detail;
      EXPECT_TRUE(b->run(v).is_ok());
      const VariantInfo info = b->info(v);
      EXPECT_EQ(info.config, "threads=2");
      const bool names_its_kernels = info.kernel.find(", core ") != std::string::npos ||
                                     info.kernel.find(", configuration ") != std::string::npos ||
                                     info.kernel.find(", ISA ") != std::string::npos;
      EXPECT_TRUE(names_its_kernels) << info.kernel;
    }
  }
}

}  // namespace
}  // namespace ka::harness::detail
