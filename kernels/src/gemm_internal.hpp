// Internal pieces of the CPU GEMM shared by its driver, micro-kernels and skinny paths. The
// operand checks it shares with the CUDA GEMMs are in ka/kernels/detail/gemm_operands.hpp.
#pragma once

#include <ka/core/ceil_div.hpp>
#include <ka/kernels/detail/gemm_operands.hpp>
#include <ka/kernels/gemm.hpp>

#include <cstdint>
#include <type_traits>

namespace ka::kernels::detail {

/// Rows of the micro-tile, the same for every ISA so that tile_m constraints do not change
/// with the machine.
constexpr int kMicroRows = 6;
/// Largest micro-tile width of any ISA (AVX-512: 48 floats = three zmm registers).
constexpr int kMaxMicroCols = 48;

/// C[kMicroRows x nr] += alpha * A_packed(kc x kMicroRows)^T-panel * B_packed(kc x nr), where
/// A is packed as kMicroRows values per k and B as nr values per k. `c` has row stride ldc.
using MicroKernel = void (*)(std::int64_t kc, const float* a, const float* b, float* c,
                             std::int64_t ldc, float alpha);

/// The same with A unpacked: rows [0, kMicroRows) of a row-major matrix (element (i, k) at
/// a[i * lda + k]), kc columns: for an A read once, which packing would copy for nothing
/// (attention's P: Note [P read in rows]).
using MicroKernelRowA = void (*)(std::int64_t kc, const float* a, std::int64_t lda,
                                 const float* b, float* c, std::int64_t ldc, float alpha);

/// C[kMicroRows x nr] = alpha * A_packed * B_packed + C0, C0's rows ldc0 apart (0: one row
/// broadcast), or + 0 when c0 is null: C is written, never read. For a product whose C
/// starts as another matrix (attention's scores start as the mask: Note [Scores start as
/// the mask]), without a pass that copies it into C first.
using MicroKernelSet = void (*)(std::int64_t kc, const float* a, const float* b, float* c,
                                std::int64_t ldc, float alpha, const float* c0,
                                std::int64_t ldc0);

// Note [Edge micro-tiles]
// A task whose rows are not a multiple of kMicroRows ends in a short A sliver (BERT's 128
// tokens: 21 slivers of 6 and one of 2), and one whose columns are not a multiple of nr in a
// narrow B sliver. The full micro-kernel on such a tile computes rows that are dropped (4 of
// 6 at 128 rows) into a buffer whose useful part is then added to C by a scalar loop. An
// edge kernel computes only the sliver's rows (one instance per row count) and reads and
// writes only its columns (masked), straight into C. An ISA without one (the portable
// kernel) takes the buffer path.

/// C[0:rows, 0:cols] += alpha * (the first `rows` rows of a packed A sliver) * (a packed B
/// sliver, of which the first `cols` columns are kept); rows <= kMicroRows, cols <= nr.
using MicroEdge = void (*)(int rows, std::int64_t cols, std::int64_t kc, const float* a,
                           const float* b, float* c, std::int64_t ldc, float alpha);

/// Calls `tile(std::integral_constant<int, R>{})` with R = rows (1 to kMicroRows): an ISA's
/// MicroEdge picks its kernel instance for the row count with it.
template <typename Tile>
inline void with_row_count(int rows, Tile&& tile) {
  static_assert(kMicroRows == 6, "one case per row count");
  switch (rows) {
    case 1: tile(std::integral_constant<int, 1>{}); break;
    case 2: tile(std::integral_constant<int, 2>{}); break;
    case 3: tile(std::integral_constant<int, 3>{}); break;
    case 4: tile(std::integral_constant<int, 4>{}); break;
    case 5: tile(std::integral_constant<int, 5>{}); break;
    default: tile(std::integral_constant<int, kMicroRows>{}); break;
  }
}

/// Packs rows [row0, row0 + rows) x columns [k0, k0 + kb) of A (element (i, k) at
/// src[i * s0 + k * s1]) into slivers of kMicroRows rows, kMicroRows values per k (the
/// micro-kernel's order). Rows past the edge repeat the last row: the micro-tiles they fall
/// in are edge tiles, whose extra rows are never stored. May write up to kPackSlack
/// floats past the last sliver (vector stores that overlap the next k's values).
using PackA = void (*)(const float* src, std::int64_t s0, std::int64_t s1, std::int64_t row0,
                       std::int64_t rows, std::int64_t k0, std::int64_t kb, float* dst);
/// Packs rows [k0, k0 + kb) x columns [col0, col0 + cols) of B (element (k, j) at
/// src[k * s0 + j * s1]) into slivers of nr columns, nr values per k; columns past the edge
/// are zeros.
using PackB = void (*)(const float* src, std::int64_t s0, std::int64_t s1, std::int64_t k0,
                       std::int64_t kb, std::int64_t col0, std::int64_t cols, std::int64_t nr,
                       float* dst);
// Note [Packing B by rows]
// A row-major B's panel was packed sliver by sliver: nr columns of every row of the K block,
// rows ldb apart, so each load touched a new page (12 KiB apart at N = 3072) in an order no
// hardware prefetcher follows. The ISA packings walk it kPackRowGroup rows at a time across
// every sliver instead, reading each row front to back; a sliver's few rows are written
// together.
constexpr std::int64_t kPackRowGroup = 4;
/// `rows(s, k, count)` for every group of rows [k, k + count) of a K block `kb` deep and every
/// sliver s of `cols` columns nr wide, in the order Note [Packing B by rows] gives.
template <typename Rows>
inline void for_each_b_row_group(std::int64_t kb, std::int64_t cols, std::int64_t nr,
                                 Rows&& rows) {
  for (std::int64_t k = 0; k < kb; k += kPackRowGroup) {
    const std::int64_t count = kb - k < kPackRowGroup ? kb - k : kPackRowGroup;
    for (std::int64_t s = 0; s * nr < cols; ++s) rows(s, k, count);
  }
}

/// Floats a PackA may write past the packed block (buffers are that much longer).
constexpr std::int64_t kPackSlack = 8;

struct SkinnyArgs;
/// C[:, 0:col_end-col_begin] += alpha * A @ B[:, col_begin:col_end] for M <= kSkinnyMaxRows
/// (s.c points at the output of column col_begin), streaming B unpacked (Note [Skinny rows in
/// one pass]).
using SkinnyColumns = void (*)(const SkinnyArgs& s, std::int64_t col_begin,
                               std::int64_t col_end);

/// A micro-kernel, the packing routines of its ISA and the ISA's skinny-M (decode) paths.
struct MicroKernelInfo {
  const char* isa;
  int cols;  ///< nr
  MicroKernel fn;
  MicroEdge edge;  ///< null: edge tiles go through a buffer (Note [Edge micro-tiles])
  MicroKernelRowA fn_row_a;  ///< null: A is packed first
  PackA pack_a;
  PackB pack_b;
  SkinnyColumns skinny;     ///< B row-major
  SkinnyColumns skinny_dot;  ///< B transposed (Note [Skinny dot products])
  MicroKernelSet fn_set;     ///< null: C is set first, then fn adds to it
  /// fn and fn_set on two A slivers at once, C's rows [0, 2 * kMicroRows): the second sliver
  /// is the one packed after the first (kMicroRows * kc floats on); null where the ISA's
  /// registers cannot hold that tile (Note [Micro-tiles of two slivers]).
  MicroKernel fn_pair;
  MicroKernelSet fn_set_pair;
};

// Note [Micro-tiles of two slivers]
// A 6 x 32 AVX-512 micro-tile keeps 12 accumulators: per k it loads two vectors of B from L1
// and broadcasts six values of A for twelve FMAs, and with the A block streaming from L2 it
// ran well short of the FMA peak inside a GEMM. Two A slivers against the same B sliver (12 x 32,
// 24 of the 32 zmm registers) load B once for both and run half the loop iterations per FMA,
// and the longer chains of independent FMAs hide more of A's latency from L2. The slivers
// keep their kMicroRows-row packing (the pair reads the next sliver, packed right after), so
// tile shapes, edge tiles and every other user of the packed A are unchanged, and each
// output's sum runs over K in the same order: the results are bit for bit those of two 6-row
// tiles. AVX2's 16 ymm registers hold no 12-row tile (6 x 16 already takes 12), and AVX-512's
// 6 x 48 (18 accumulators) would need 36.

/// An ISA's micro-kernel `cols` wide (the tunable micro_n); 0 gives the ISA's default width
/// (AVX-512 32, AVX2 and generic 16). Where the ISA has no kernel that wide, `fn` is null.
/// AVX-512 has 16, 32 and 48; AVX2 and the portable kernel only 16.
MicroKernelInfo micro_kernel_avx512(int cols);
/// The active ISA's (gemm_cpu_isa()) micro-kernel `cols` wide; 0: its default width. `fn` is
/// null where it has none that wide. For kernels built on the GEMM's (attention).
MicroKernelInfo micro_kernel_in_use(std::int64_t cols);
MicroKernelInfo micro_kernel_avx2(int cols);
MicroKernelInfo micro_kernel_generic(int cols);

/// The portable packing routines (any strides); the ISA ones fall back to them where their
/// fast path does not apply.
void pack_a_generic(const float* src, std::int64_t s0, std::int64_t s1, std::int64_t row0,
                    std::int64_t rows, std::int64_t k0, std::int64_t kb, float* dst);
void pack_b_generic(const float* src, std::int64_t s0, std::int64_t s1, std::int64_t k0,
                    std::int64_t kb, std::int64_t col0, std::int64_t cols, std::int64_t nr,
                    float* dst);
/// AVX2 packing of A (8 x 8 transposes of unit-stride rows; compiled with -mavx2), also used
/// by the AVX-512 kernel.
void pack_a_avx2(const float* src, std::int64_t s0, std::int64_t s1, std::int64_t row0,
                 std::int64_t rows, std::int64_t k0, std::int64_t kb, float* dst);

/// AVX2 packing of a transposed B (s0 == 1, columns contiguous along K; nr a multiple of 8),
/// by 8 x 8 transposes (Note [Packing a transposed B]); also used by the AVX-512 kernel.
void pack_b_transposed_avx2(const float* src, std::int64_t s1, std::int64_t k0, std::int64_t kb,
                            std::int64_t col0, std::int64_t cols, std::int64_t nr, float* dst);

/// The operands of the skinny-M paths: any A strides; B row-major (element (k, j) at
/// b[k * ldb + j]), or with b_transposed its columns contiguous (element (k, j) at
/// b[j * ldb + k]).
struct SkinnyArgs {
  const float* a;
  std::int64_t a_row_stride, a_col_stride;
  const float* b;
  std::int64_t ldb;
  float* c;
  std::int64_t ldc;
  std::int64_t m, k;
  float alpha;
  bool b_transposed;

  /// The distance in B between consecutive k.
  [[nodiscard]] std::int64_t b_k_stride() const { return b_transposed ? 1 : ldb; }
};

/// The most rows of A the skinny path takes (its strips keep every row's accumulators in
/// registers).
constexpr int kSkinnyMaxRows = 16;

/// Each ISA's skinny path (SkinnyColumns): AVX-512 (-mavx512f), AVX2 (-mavx2 -mfma) and the
/// portable loops; call an ISA's only on a CPU that has it.
void skinny_columns_avx512(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end);
void skinny_columns_avx2(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end);
void skinny_columns_generic(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end);
/// The same for a transposed B (Note [Skinny dot products], gemm_skinny_dot.hpp).
void skinny_dot_avx512(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end);
void skinny_dot_avx2(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end);
void skinny_dot_generic(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end);
/// Rows of B a skinny pass reads before the next (every row of A is applied to each of them
/// while its vectors are in registers), on AVX2 and the portable path; AVX-512 reads more
/// (Note [Longer AVX-512 skinny passes]).
constexpr std::int64_t kSkinnyRowsPerPass = 8;
/// The AVX2 path's passes where M takes several row groups, and the most columns they span
/// (Note [AVX2 long skinny passes]).
constexpr std::int64_t kAvx2LongPassRows = 16;
constexpr std::int64_t kAvx2LongPassBytes = std::int64_t{256} << 10;
constexpr std::int64_t kAvx2LongPassCols = kAvx2LongPassBytes / (kAvx2LongPassRows * 4);
constexpr std::int64_t kAvx2MaxGroupRows = 6;  ///< Note [AVX2 skinny row groups]

/// The skinny path's passes, shared by the ISAs: for each block of `Rows` rows of B, A's block
/// is copied k-major into `ap` (ap[k * m + r] = A[r, k0 + k], so a strip's broadcasts share
/// one pointer) and `strips(ap, kb, b, next)` applies it to B's rows [k0, k0 + kb) starting
/// at `b`; `next` is the next pass's first row (to prefetch during this one), null when no
/// full pass follows.
template <std::int64_t Rows, typename Strips>
inline void for_each_skinny_pass(const SkinnyArgs& s, Strips&& strips) {
  alignas(64) float ap[Rows * kSkinnyMaxRows];
  for (std::int64_t k0 = 0; k0 < s.k; k0 += Rows) {
    const std::int64_t kb = s.k - k0 < Rows ? s.k - k0 : Rows;
    for (std::int64_t k = 0; k < kb; ++k) {
      for (std::int64_t r = 0; r < s.m; ++r) {
        ap[k * s.m + r] = s.a[r * s.a_row_stride + (k0 + k) * s.a_col_stride];
      }
    }
    const float* b = s.b + k0 * s.ldb;
    const bool more = k0 + kb + Rows <= s.k;
    strips(static_cast<const float*>(ap), kb, b, more ? b + Rows * s.ldb : nullptr);
  }
}

/// M's rows in balanced groups of at most `max_rows` (M = 16, 6: 6 + 5 + 5): `group(r0, rows)`
/// for each, in order. The skinny paths run a group's accumulators in registers.
template <typename Group>
inline void for_each_row_group(std::int64_t m, std::int64_t max_rows, Group&& group) {
  const std::int64_t groups = ceil_div(m, max_rows);
  const std::int64_t base = m / groups;
  const std::int64_t extra = m % groups;  // the first `extra` groups take one row more
  std::int64_t r0 = 0;
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t rows = base + (g < extra ? 1 : 0);
    group(r0, rows);
    r0 += rows;
  }
}

/// `cols` columns as strips of `Width`: `strip(j, w, full)` for each, full strips first
/// (full is std::true_type, w == Width), then the tail (std::false_type, w < Width).
template <std::int64_t Width, typename Strip>
inline void for_each_strip(std::int64_t cols, Strip&& strip) {
  std::int64_t j = 0;
  for (; j + Width <= cols; j += Width) strip(j, Width, std::true_type{});
  if (j < cols) strip(j, cols - j, std::false_type{});
}

// Note [Skinny passes of a known depth]
// Every pass but the last reads the same number of rows of B, fixed by the path. A strip's k
// loop over a run-time depth stays a loop, and a task narrower than B's rows (every task when
// N is split between threads, or wider than one task) then read B at two thirds of the rate
// the same loop reached over whole rows: 1 x 4096 x 11008 in two tasks of 5504 columns, 11-12
// GB/s where BLIS reads 16-17. Unrolled over a depth known at compile time, the strip issues
// every row's loads back to back, and the split tasks read as fast as BLIS (figures in the
// commit bodies). So a group kernel runs its full passes through a strip instance of the
// path's depth and only the last, shorter pass through the loop. The unroll pragma stays on
// the known-depth loop: on the run-time loop it made clang (the fuzz build, with ASan and
// coverage) spend over a quarter of an hour on one file. The unrolling must be whole (the
// AVX-512 passes of 32 rows unrolled by 8 lost all of M = 16's gain), and sanitizer builds
// leave the known-depth instances out: instrumenting every load of 32 unrolled rows took the
// AVX-512 file from 28 s to 135 s (clang, fuzz build) and 280 s (GCC, ASan), for code that
// computes the same thing as the loop they still test.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSkinnyKnownDepths = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSkinnyKnownDepths = false;
#else
constexpr bool kSkinnyKnownDepths = true;
#endif
#else
constexpr bool kSkinnyKnownDepths = true;
#endif

/// `row(k)` for k in [0, kb): unrolled when Depth > 0 (the caller guarantees kb == Depth), a
/// loop when Depth == 0. Note [Skinny passes of a known depth].
template <std::int64_t Depth, typename Row>
inline __attribute__((always_inline)) void for_each_pass_row(std::int64_t kb, Row&& row) {
  if constexpr (Depth > 0) {
#pragma GCC unroll 32
    for (std::int64_t k = 0; k < Depth; ++k) row(k);
  } else {
    for (std::int64_t k = 0; k < kb; ++k) row(k);
  }
}

/// `body(std::integral_constant<std::int64_t, Depth>{})` when kb == Depth (a full pass), else
/// `body` of the constant 0 (the last, shorter pass, and every pass in sanitizer builds). Note
/// [Skinny passes of a known depth].
template <std::int64_t Depth, typename Body>
inline void with_pass_depth(std::int64_t kb, Body&& body) {
  if constexpr (kSkinnyKnownDepths) {
    if (kb == Depth) {
      body(std::integral_constant<std::int64_t, Depth>{});
      return;
    }
  }
  body(std::integral_constant<std::int64_t, 0>{});
}

/// The rows of the next pass a group prefetches while it runs (Note [Every group prefetches a
/// share]): while on row k of its own pass, row k of the next one when k % step == first;
/// none when `rows` is null. `rows` is the next pass's first row at the group's columns.
struct NextPassShare {
  const float* rows = nullptr;
  std::int64_t first = 0;
  std::int64_t step = 1;
};

/// A group's pass over `cols` columns in strips of `Width` (for_each_strip): `strip(j, w, next,
/// full, depth)` for each, `next` the group's share of the next pass moved to column j, and
/// `depth` the pass depth as a constant for the full strips of a full pass (Depth), else 0
/// (Note [Skinny passes of a known depth]).
template <std::int64_t Width, std::int64_t Depth, typename Strip>
inline void for_each_pass_strip(std::int64_t cols, std::int64_t kb, NextPassShare next,
                                Strip&& strip) {
  with_pass_depth<Depth>(kb, [&](auto depth) {
    for_each_strip<Width>(cols, [&](std::int64_t j, std::int64_t w, auto full) {
      NextPassShare at_j = next;
      if (at_j.rows != nullptr) at_j.rows += j;
      constexpr std::int64_t kStripDepth = decltype(full)::value ? decltype(depth)::value : 0;
      strip(j, w, at_j, full, std::integral_constant<std::int64_t, kStripDepth>{});
    });
  });
}

/// A skinny path's kernel for one group of rows over `cols` columns of a pass: C[0:rows,
/// 0:cols] += alpha * A_group @ B[0:kb, 0:cols], with ap[k * lda + r] = A[r, k] of the group
/// and `next` its share of the next pass's rows to prefetch.
using SkinnyGroupKernel = void (*)(const float* ap, std::int64_t lda, const float* b,
                                   NextPassShare next, std::int64_t ldb, float* c,
                                   std::int64_t ldc, std::int64_t cols, std::int64_t kb,
                                   float alpha);

// Note [Every group prefetches a share]
// A pass's first group of rows reads its rows of B from memory; the later groups read them
// again from L1 or L2 and compute. When only the first group prefetched the next pass, memory
// sat idle while the later ones ran: at M = 16 (two groups of 8 on AVX-512) the path read B at
// half the rate M = 1 reaches. So each of G groups prefetches every G-th row of the next pass,
// and the reads of B are spread over the whole pass (figures in the commit body).

/// The skinny paths' driver: every pass of `PassRows` rows of B (for_each_skinny_pass), every
/// group of at most `max_rows` rows (for_each_row_group) over the columns [col_begin,
/// col_end), each by `kernel_for(rows)`, each group with its share of the next pass.
template <std::int64_t PassRows, typename KernelFor>
inline void run_skinny_groups(const SkinnyArgs& s, std::int64_t col_begin, std::int64_t col_end,
                              std::int64_t max_rows, KernelFor&& kernel_for) {
  const std::int64_t groups = ceil_div(s.m, max_rows);
  for_each_skinny_pass<PassRows>(s, [&](const float* ap, std::int64_t kb, const float* b,
                                        const float* next) {
    std::int64_t g = 0;
    for_each_row_group(s.m, max_rows, [&](std::int64_t r0, std::int64_t rows) {
      const SkinnyGroupKernel kernel = kernel_for(rows);
      const NextPassShare share{next != nullptr ? next + col_begin : nullptr, g++, groups};
      kernel(ap + r0, s.m, b + col_begin, share, s.ldb, s.c + r0 * s.ldc, s.ldc,
             col_end - col_begin, kb, s.alpha);
    });
  });
}

}  // namespace ka::kernels::detail
