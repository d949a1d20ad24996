// Every function that baseline (SSE) code calls in the AVX2 and AVX-512 translation units
// returns with the upper halves of the vector registers clean (Note [Clean upper state on
// return], kernels/src/ew_math.hpp). The processor reports which state components are in
// use (XGETBV with ECX = 1, XINUSE): the YMM_Hi128 and ZMM_Hi256 bits stay set after a
// function that returns without VZEROUPPER. White-box: it calls the internal entry points
// directly, for each ISA this CPU runs.
#include "ew_loops.hpp"
#include "ew_math.hpp"
#include "gemm_internal.hpp"
#include "isa_paths.hpp"

#include <ka/core/fingerprint.hpp>
#include <ka/kernels/elementwise.hpp>

#include <gtest/gtest.h>

#include <cpuid.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace ka::kernels::detail {
namespace {

// XINUSE bits 2 (the upper 128 bits of YMM0-15) and 6 (the upper 256 bits of ZMM0-15): what
// VZEROUPPER clears and what SSE code after them pays for. Bit 7 (ZMM16-31) is not among
// them: VZEROUPPER leaves those registers alone, and SSE code never reads them.
constexpr std::uint64_t kUpperHalves = (1U << 2U) | (1U << 6U);

bool cpu_reports_state_in_use() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(0xD, 1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (eax & (1U << 2U)) != 0;  // XGETBV with ECX = 1
}

std::uint64_t state_in_use() {
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
  return (static_cast<std::uint64_t>(hi) << 32U) | lo;
}

__attribute__((target("avx"), noinline)) void clear_upper_halves() {
  __builtin_ia32_vzeroupper();
}

// XINUSE right after setting every bit of ymm0, whose upper half is then in use (one asm
// block: the compiler ends an AVX function with VZEROUPPER).
__attribute__((target("avx2"), noinline)) std::uint64_t state_in_use_when_dirty() {
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("vpcmpeqd %%ymm0, %%ymm0, %%ymm0\n\txgetbv"
                   : "=a"(lo), "=d"(hi)
                   : "c"(1)
                   : "xmm0");
  return (static_cast<std::uint64_t>(hi) << 32U) | lo;
}

// Empty where XINUSE follows the upper halves (set after a 256-bit write, clear after
// VZEROUPPER), else what it showed: the architecture lets a CPU report a component in use
// while it is in its initial state, and such a CPU cannot be checked this way. Call only where
// AVX2 runs.
std::string why_unobservable() {
  if (!cpu_reports_state_in_use()) return "this CPU has no XGETBV with ECX = 1";
  clear_upper_halves();
  const std::uint64_t clean = state_in_use();
  const std::uint64_t dirty = state_in_use_when_dirty();
  clear_upper_halves();
  if ((clean & kUpperHalves) != 0 || (dirty & (1U << 2U)) == 0) {
    std::ostringstream why;
    why << "XINUSE does not follow the upper halves on this CPU (0x" << std::hex << clean
        << " after VZEROUPPER, 0x" << dirty << " after a 256-bit write)";
    return why.str();
  }
  return "";
}

// Runs `call` from a clean state and expects it clean again right after.
template <class F>
void expect_clean_after(const std::string& what, F&& call) {
  clear_upper_halves();
  ASSERT_EQ(state_in_use() & kUpperHalves, 0U) << "the test's own code left the state dirty";
  call();
  const std::uint64_t in_use = state_in_use();
  EXPECT_EQ(in_use & kUpperHalves, 0U)
      << what << " returned with the upper halves of the vector registers in use (XINUSE 0x"
      << std::hex << in_use << "): the SSE code after it pays a transition";
}

// 64-byte aligned operands, larger than any loop's unrolled step, with a ragged tail.
constexpr std::int64_t kN = 203;
struct alignas(64) Buffers {
  float x[256];
  float y[256];
  float out[256];
  float exps[256];
  Buffers() {
    for (int i = 0; i < 256; ++i) {
      x[i] = 0.01F * static_cast<float>(i % 37) - 0.2F;
      y[i] = 0.5F + 0.001F * static_cast<float>(i);
      out[i] = 0.0F;
      exps[i] = 0.0F;
    }
  }
};

class UpperState : public ::testing::Test {
 protected:
  bool runs(const char* isa) const {
    for (const std::string& i : test::runnable_isas()) {
      if (i == isa) return true;
    }
    return false;
  }
};

constexpr EwOp kUnaryOps[] = {EwOp::kNeg,      EwOp::kExp,     EwOp::kTanh, EwOp::kRelu,
                              EwOp::kGelu,     EwOp::kGeluTanh, EwOp::kSigmoid, EwOp::kSilu};

void check_loops(const EwLoops& l) {
  Buffers b;
  const std::string isa = l.isa;
  double acc64[256] = {};
  for (const EwOp op : kUnaryOps) {
    expect_clean_after(isa + " unary_run " + to_string(op),
                       [&] { l.unary_run(op, b.x, b.out, kN); });
  }
  expect_clean_after(isa + " exp_shifted_sum", [&] { l.exp_shifted_sum(b.x, 1.0F, b.out, kN); });
  expect_clean_after(isa + " binary_run", [&] { l.binary_run(EwOp::kMul, b.x, b.y, b.out, kN); });
  expect_clean_after(isa + " exp_shifted_run",
                     [&] { l.exp_shifted_run(b.x, 1.0F, 0.5F, b.out, kN); });
  expect_clean_after(isa + " lane_sum", [&] { l.lane_sum(b.x, kN); });
  expect_clean_after(isa + " lane_max", [&] { l.lane_max(b.x, kN); });
  expect_clean_after(isa + " lane_sum_sq_dev", [&] { l.lane_sum_sq_dev(b.x, 0.1F, kN); });
  expect_clean_after(isa + " normalize_run",
                     [&] { l.normalize_run(b.x, 0.1F, 2.0F, b.y, b.y, b.out, kN); });
  expect_clean_after(isa + " max_accumulate", [&] { l.max_accumulate(b.out, b.x, kN); });
  expect_clean_after(isa + " exp_sub_accumulate",
                     [&] { l.exp_sub_accumulate(b.out, b.y, b.exps, kN); });
  expect_clean_after(isa + " mul_inplace", [&] { l.mul_inplace(b.out, b.y, kN); });
  expect_clean_after(isa + " scale_run", [&] { l.scale_run(b.x, 0.5F, b.out, kN); });
  expect_clean_after(isa + " scale_inplace", [&] { l.scale_inplace(b.out, 0.5F, kN); });
  expect_clean_after(isa + " accumulate_f32", [&] { l.accumulate_f32(b.out, b.x, kN); });
  expect_clean_after(isa + " accumulate4_f32",
                     [&] { l.accumulate4_f32(b.out, b.x, b.y, b.x, b.y, kN); });
  expect_clean_after(isa + " accumulate_f64", [&] { l.accumulate_f64(acc64, b.x, kN); });
}

// Every function of a MicroKernelInfo: the micro-kernels, packing and skinny paths.
void check_gemm(const MicroKernelInfo& mk) {
  ASSERT_NE(mk.fn, nullptr);
  const std::string isa = std::string(mk.isa) + " nr=" + std::to_string(mk.cols);
  constexpr std::int64_t kc = 19;
  const std::int64_t nr = mk.cols;
  // Two slivers of A and two tiles of C, for the kernels of two slivers.
  std::vector<float> a(static_cast<std::size_t>(2 * kMicroRows * kc + kPackSlack), 0.25F);
  std::vector<float> bp(static_cast<std::size_t>(nr * kc + kPackSlack), 0.5F);
  std::vector<float> c(static_cast<std::size_t>(2 * kMicroRows * nr), 0.0F);
  std::vector<float> src(static_cast<std::size_t>(64 * 64), 0.125F);
  expect_clean_after(isa + " micro-kernel",
                     [&] { mk.fn(kc, a.data(), bp.data(), c.data(), nr, 1.0F); });
  if (mk.fn_set != nullptr) {
    const float* starts[] = {nullptr, src.data()};
    for (const float* c0 : starts) {
      expect_clean_after(isa + " set micro-kernel", [&] {
        mk.fn_set(kc, a.data(), bp.data(), c.data(), nr, 1.0F, c0, 64);
      });
    }
  }
  if (mk.fn_pair != nullptr) {
    expect_clean_after(isa + " micro-kernel of two slivers",
                       [&] { mk.fn_pair(kc, a.data(), bp.data(), c.data(), nr, 1.0F); });
  }
  if (mk.fn_set_pair != nullptr) {
    expect_clean_after(isa + " set micro-kernel of two slivers", [&] {
      mk.fn_set_pair(kc, a.data(), bp.data(), c.data(), nr, 1.0F, src.data(), 64);
    });
  }
  if (mk.edge != nullptr) {
    expect_clean_after(isa + " edge micro-kernel",
                       [&] { mk.edge(3, nr - 1, kc, a.data(), bp.data(), c.data(), nr, 1.0F); });
  }
  if (mk.fn_row_a != nullptr) {
    expect_clean_after(isa + " row-A micro-kernel", [&] {
      mk.fn_row_a(kc, src.data(), 64, bp.data(), c.data(), nr, 1.0F);
    });
  }
  expect_clean_after(isa + " pack_a", [&] { mk.pack_a(src.data(), 64, 1, 0, 5, 0, kc, a.data()); });
  expect_clean_after(isa + " pack_b",
                     [&] { mk.pack_b(src.data(), 64, 1, 0, kc, 0, nr - 1, nr, bp.data()); });
  std::vector<float> out(64 * 4, 0.0F);
  for (const bool transposed : {false, true}) {
    const SkinnyColumns path = transposed ? mk.skinny_dot : mk.skinny;
    if (path == nullptr) continue;
    SkinnyArgs s{src.data(), 64, 1, src.data(), 64, out.data(), 64, 3, 64, 1.0F, transposed};
    expect_clean_after(isa + (transposed ? " skinny_dot" : " skinny"), [&] { path(s, 0, 61); });
  }
}

TEST_F(UpperState, Avx2EntryPointsReturnClean) {
  if (!runs("avx2")) GTEST_SKIP() << "this CPU has no AVX2: " << cpu_isa_level();
  if (const std::string why = why_unobservable(); !why.empty()) GTEST_SKIP() << why;
  check_loops(kEwLoopsAvx2);
  Buffers b;
  for (const EwOp op : kUnaryOps) {
    expect_clean_after(std::string("unary_run_avx2 ") + to_string(op),
                       [&] { unary_run_avx2(op, b.x, b.out, kN); });
    expect_clean_after(std::string("unary_rows_inplace_avx2 ") + to_string(op),
                       [&] { unary_rows_inplace_avx2(op, b.out, 64, 3, 45); });
  }
  expect_clean_after("exp_shifted_sum_avx2", [&] { exp_shifted_sum_avx2(b.x, 1.0F, b.out, kN); });
  float m[3] = {-HUGE_VALF, 0.5F, 9.0F};
  float l[3] = {0.0F, 1.0F, 1.0F};
  expect_clean_after("online_softmax_rows_avx2", [&] {
    online_softmax_rows_avx2(b.x, 64, 3, 45, b.out, 64, m, l, b.exps, 64, 40);
  });
  expect_clean_after("stream_store_avx2", [&] { stream_store_avx2(b.out, b.x, kN); });
  std::vector<float> dst(64 * 64);
  std::vector<float> src(64 * 64, 0.5F);
  expect_clean_after("pack_a_avx2",
                     [&] { pack_a_avx2(src.data(), 64, 1, 0, 13, 0, 24, dst.data()); });
  expect_clean_after("pack_b_transposed_avx2",
                     [&] { pack_b_transposed_avx2(src.data(), 64, 0, 24, 0, 13, 16, dst.data()); });
  for (const std::int64_t w : {16, 32, 48}) {
    const MicroKernelInfo mk = micro_kernel_avx2(static_cast<int>(w));
    if (mk.fn != nullptr) check_gemm(mk);
  }
}

TEST_F(UpperState, Avx512EntryPointsReturnClean) {
  if (!runs("avx512")) GTEST_SKIP() << "this CPU has no AVX-512: " << cpu_isa_level();
  if (const std::string why = why_unobservable(); !why.empty()) GTEST_SKIP() << why;
  check_loops(kEwLoopsAvx512);
  Buffers b;
  for (const EwOp op : kUnaryOps) {
    expect_clean_after(std::string("unary_run_avx512 ") + to_string(op),
                       [&] { unary_run_avx512(op, b.x, b.out, kN); });
    expect_clean_after(std::string("unary_stream_avx512 ") + to_string(op),
                       [&] { unary_stream_avx512(op, b.x, b.out, kN); });
    expect_clean_after(std::string("unary_rows_inplace_avx512 ") + to_string(op),
                       [&] { unary_rows_inplace_avx512(op, b.out, 64, 3, 45); });
  }
  expect_clean_after("binary_stream_avx512",
                     [&] { binary_stream_avx512(EwOp::kAdd, b.x, false, b.y, true, b.out, kN); });
  expect_clean_after("exp_shifted_sum_avx512",
                     [&] { exp_shifted_sum_avx512(b.x, 1.0F, b.out, kN); });
  expect_clean_after("stream_store_avx512", [&] { stream_store_avx512(b.out, b.x, kN); });
  EwProgram p;
  p.set_result(p.unary(EwOp::kGelu, p.binary(EwOp::kMul, p.input(0), p.input(1))));
  ASSERT_TRUE(program_avx512_covers(p)) << p.str();
  const EwOperand in[2] = {{b.x, false, false}, {b.y, false, false}};
  for (const bool stream : {false, true}) {
    expect_clean_after("program_run_avx512", [&] { program_run_avx512(p, in, b.out, kN, stream); });
  }
  const float* rows[2] = {b.x, b.y};
  double sums[2] = {};
  expect_clean_after("rows_sum_avx512", [&] { rows_sum_avx512(rows, 2, kN, sums); });
  expect_clean_after("run_sum_avx512", [&] { run_sum_avx512(b.x, kN); });
  for (const bool stream : {false, true}) {
    expect_clean_after("layer_norm_row_avx512", [&] {
      layer_norm_row_avx512(b.x, b.y, b.y, b.out, kN, 1e-5F, stream, NextRow{b.y});
    });
  }
  expect_clean_after("softmax_row_avx512",
                     [&] { softmax_row_avx512(b.x, b.out, kN, NextRow{b.y}); });
  SoftmaxPending pending;
  expect_clean_after("softmax_row_streamed_avx512", [&] {
    softmax_row_streamed_avx512(b.x, b.out, 192, b.exps, pending, NextRow{});
  });
  expect_clean_after("softmax_flush_avx512", [&] { softmax_flush_avx512(pending, 192); });
  float m[3] = {-HUGE_VALF, 0.5F, 9.0F};
  float l[3] = {0.0F, 1.0F, 1.0F};
  expect_clean_after("online_softmax_rows_avx512", [&] {
    online_softmax_rows_avx512(b.x, 64, 3, 45, b.out, 64, m, l, b.exps, 64, 40);
  });
  stream_fence();
  for (const std::int64_t w : {16, 32, 48}) {
    const MicroKernelInfo mk = micro_kernel_avx512(static_cast<int>(w));
    if (mk.fn != nullptr) check_gemm(mk);
  }
}

}  // namespace
}  // namespace ka::kernels::detail
