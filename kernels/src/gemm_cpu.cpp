// Blocked CPU GEMM: each grid tile (tile_m x tile_n of the output) is one task; it walks K in
// tile_k steps, packs its A and B panels into thread-local buffers and runs an ISA-specific
// register-blocked micro-kernel over them. See Note [CPU GEMM blocking].
#include "descriptor_common.hpp"
#include "ew_math.hpp"
#include "gemm_internal.hpp"

#include <ka/core/ceil_div.hpp>
#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/core/logging.hpp>
#include <ka/core/thread_pool.hpp>
#include <ka/kernels/cpu_launch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

namespace ka::kernels {

// Note [CPU GEMM blocking]
// The output is cut into tasks of tile_m x tile_n (the LaunchConfig's block; the grid is the
// number of tasks). A task is the unit of parallel work, so tasks never share writes. Inside a
// task the loops are the classic BLIS ones: for each K block of tile_k, the task packs its B
// panel (tile_k x tile_n) once, in slivers of the micro-kernel's width; then for each block of
// `mc` rows (as many as keep the packed A block, mc x tile_k, within half the L2) it packs A
// in slivers of kMicroRows rows and runs the micro-kernel over every (B sliver, A sliver)
// pair, B sliver outer so it stays in L1 while the A block streams from L2. So A is packed
// once per task column and B once per task row: a task as wide as N packs A once in all, and
// a narrower or shorter task packs an operand again for each of its neighbours. B's slivers
// are zero-padded at the edges and A's repeat its last row, so the micro-kernel always sees
// full slivers and any input strides (transposed views) cost nothing extra; edge micro-tiles go
// through a small local buffer whose extra rows and columns are dropped. Packing is the
// micro-kernel's ISA's (MicroKernelInfo::pack_a / pack_b; Note [Packing A by transposes]).
// A B packed whole ahead of the run in the same slivers (AddmmArgs::mat2_packed, a constant
// weight: Note [Constant weights packed once]) is read in place of the task's own packing.
// The output starts as beta * bias (or 0), set by the first K block's micro-kernels where they
// can (Note [C set by the first K block]), then every K block adds alpha * A_block * B_block;
// the micro-kernels prefetch their C tile when they start, as its rows are far apart and were
// last touched a whole K block ago.
// The epilogue (an activation) runs on each micro-tile right after the last K block has
// finished it (Note [Epilogue per micro-tile]); a bmm is the same tasks with the batch index
// as the outermost part of the block number (grid = batch x tasks), operands offset by the
// batch strides. The job (TileJob/SkinnyJob) holds raw operands, so a prepared CpuLaunch
// does not refer to the AddmmArgs.

namespace {

std::atomic<const detail::MicroKernelInfo*> g_forced{nullptr};

bool cpu_can_run(const std::string& isa) {
  const std::string level = cpu_isa_level();
  if (isa == "generic") return true;
  if (isa == "avx2") return level == "avx2" || level == "avx512";
  if (isa == "avx512") return level == "avx512";
  return false;
}

// ISA family `isa`'s micro-kernel `cols` wide (the tunable micro_n; 0: the ISA's default);
// `fn` is null where the ISA has none that wide. Any name but avx512 and avx2 is the portable
// kernel.
detail::MicroKernelInfo micro_kernel_of(std::string_view isa, int cols) {
  if (isa == "avx512") return detail::micro_kernel_avx512(cols);
  if (isa == "avx2") return detail::micro_kernel_avx2(cols);
  return detail::micro_kernel_generic(cols);
}

const detail::MicroKernelInfo& micro_kernel_for(const std::string& isa) {
  static const detail::MicroKernelInfo avx512 = micro_kernel_of("avx512", 0);
  static const detail::MicroKernelInfo avx2 = micro_kernel_of("avx2", 0);
  static const detail::MicroKernelInfo generic = micro_kernel_of("generic", 0);
  if (isa == "avx512") return avx512;
  if (isa == "avx2") return avx2;
  return generic;
}

// The micro-kernel family `isa`, after checking the name and that this CPU can run it.
// `source` names who asked (KA_CPU_ISA, force_cpu_isa) in the error.
const detail::MicroKernelInfo& checked_micro_kernel(const std::string& isa, const char* source) {
  KA_CHECK(isa == "avx512" || isa == "avx2" || isa == "generic", source, "='", isa,
           "': expected avx512, avx2 or generic");
  KA_CHECK(cpu_can_run(isa), source, "='", isa, "': this CPU supports only ", cpu_isa_level());
  return micro_kernel_for(isa);
}

detail::MicroKernelInfo automatic_micro_kernel() {
  static const detail::MicroKernelInfo info = [] {
    if (const char* env = std::getenv("KA_CPU_ISA"); env != nullptr && *env != '\0') {
      return checked_micro_kernel(env, "KA_CPU_ISA");
    }
    return micro_kernel_for(cpu_isa_level());  // sse4.2 and generic get the portable kernel
  }();
  return info;
}

detail::MicroKernelInfo active_micro_kernel() {
  if (const auto* forced = g_forced.load(std::memory_order_acquire)) return *forced;
  return automatic_micro_kernel();
}

// The active ISA's micro-kernel `cols` wide (micro_kernel_of).
detail::MicroKernelInfo micro_kernel_of_width(std::int64_t cols) {
  return micro_kernel_of(active_micro_kernel().isa, static_cast<int>(cols));
}

// The largest packed B panel (tile_k x tile_n floats) of a task: it bounds the per-thread
// packing buffer, and a panel this size still sits in the L3 next to the other thread's.
constexpr std::int64_t kMaxPackedB = std::int64_t{2} << 20;

// The largest task whose partial sums are staged (Note [Partial sums staged]): 16 MiB, a
// 2048 x 2048 tile (its rows rounded up to whole slivers); a larger one accumulates in C.
constexpr std::int64_t kMaxStagedFloats =
    std::int64_t{2048} * round_up(std::int64_t{2048}, std::int64_t{detail::kMicroRows});

// Packing buffers live per thread and only grow, so steady-state calls do not allocate.
struct PackBuffers {
  std::vector<float> a;
  std::vector<float> b;
  std::vector<float> stage;  ///< partial sums of whole micro-tiles (Note [Partial sums staged])
};
PackBuffers& pack_buffers() {
  thread_local PackBuffers buffers;
  return buffers;
}

// One GEMM (or a batch of them, `batch_*` strides apart) cut into tiles. Copied into the
// CpuLaunch, so it holds raw operands rather than the args.
struct TileJob {
  const float* a;
  std::int64_t a_rs, a_cs, a_bs;
  const float* b;
  std::int64_t b_rs, b_cs, b_bs;
  float* c;
  std::int64_t ldc, c_bs;
  detail::BiasView bias;
  float alpha, beta;
  Epilogue epilogue;
  GemmShape shape;
  detail::MicroKernelInfo micro;
  std::int64_t tile_m, tile_n, tile_k, tiles_n, tiles_per_batch;
  std::int64_t block_m;  ///< rows of A packed per L2 block (MC); 0: sized to the L2
  /// B packed whole before the run (PackedMat2Layout, in this job's tile_k and micro width),
  /// or null: each task packs its panels.
  const float* b_packed;
};

struct SkinnyJob {
  detail::BiasView bias;
  float beta;
  Epilogue epilogue;
  GemmShape shape;
  detail::SkinnyArgs operands;
  detail::SkinnyColumns columns;  ///< the active ISA's skinny path
  std::int64_t cols;
  std::int64_t k_parts;  ///< split_k: K parts run as blocks of one launch (Note [Split K])
};

// Note [Split K]
// A skinny GEMM whose N is too narrow for column tasks to feed every thread (1 x 16384 x 64:
// one 64-column task) splits K instead: block p computes alpha * A @ B over its
// K range; block 0 adds its part onto C (beta * bias), the others leave theirs in the
// launch's scratch (CpuLaunch::scratch, no allocation), and the finish adds them onto C in
// part order, then the activation: the same sum whatever ran first, so results do not depend
// on the schedule. The partials must fit the scratch: M * N * (split_k - 1) <= kSplitFloats,
// which is exactly the narrow case; wider shapes split columns.
constexpr std::int64_t kSplitFloats =
    static_cast<std::int64_t>(CpuLaunch::kScratch * sizeof(double) / sizeof(float));

// Sets out[i0:i1, j0:j1] to beta * bias, or to zero without a bias term.
void init_output(float* out, std::int64_t ldc, const detail::BiasView& bias, float beta,
                 std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) {
  for (std::int64_t i = i0; i < i1; ++i) {
    float* row = out + i * ldc;
    if (bias.data == nullptr) {
      std::fill(row + j0, row + j1, 0.0F);
    } else {
      const float* brow = bias.data + i * bias.row_stride;
      for (std::int64_t j = j0; j < j1; ++j) row[j] = beta * brow[j * bias.col_stride];
    }
  }
}

// out[i0:i1, j0:j1] = act(out[...]), while the block is still in cache.
void apply_epilogue(Epilogue e, float* out, std::int64_t ldc, std::int64_t i0, std::int64_t i1,
                    std::int64_t j0, std::int64_t j1) {
  detail::apply_epilogue(e, out + i0 * ldc + j0, ldc, i1 - i0, j1 - j0);
}

// Rows of A packed per L2 block (MC) of a task `rows` tall whose K blocks are `kb` deep:
// `block_m` when the config sets it (the tunable), else a multiple of kMicroRows whose packed
// block fills at most half the L2 (the other half holds B slivers and C lines in transit);
// never more than the task's rows.
std::int64_t a_block_rows(std::int64_t block_m, std::int64_t kb, std::int64_t rows) {
  constexpr std::int64_t mr = detail::kMicroRows;
  const std::int64_t fit =
      block_m > 0 ? block_m
                  : l2_budget_bytes() / 2 / (4 * std::max<std::int64_t>(kb, 1)) / mr * mr;
  return std::min(std::max(fit, mr), round_up(rows, mr));
}

// Note [Prefetching the next B sliver]
// A B sliver (kb x nr floats, 32 KiB at 256 x 32) is read from memory by the first A sliver
// that multiplies it: a weight packed ahead of the run is seldom in cache, as a model's
// weights together outgrow it. That first pass runs at the speed of memory, not of the FMAs
// (it needs 128 bytes of B per 6 cycles), once in every block's A slivers. So while the A
// slivers run over one B sliver, each micro-kernel call prefetches its share of the next
// one (into L2: two slivers would not fit in L1 together).
void prefetch_share(const float* sliver, std::int64_t sliver_floats, std::int64_t part,
                    std::int64_t parts) {
  constexpr std::int64_t kLine = 64 / sizeof(float);
  const std::int64_t lines = ceil_div(sliver_floats, kLine);
  for (std::int64_t l = part * lines / parts; l < (part + 1) * lines / parts; ++l) {
    __builtin_prefetch(sliver + l * kLine, 0, 2);
  }
}

// Note [Epilogue per micro-tile]
// A micro-tile's rows are ldc apart, and a column strip's many rows at a stride of a multiple
// of 4 KiB (N = 768, 3072, 4096 floats) fall in the same few L1 sets: applied to a whole strip
// after its last micro-tile, the activation read most of it back from L2. Applied to each
// micro-tile as the micro-kernel stores it, it reads what is still in L1, for one call per
// kMicroRows x nr floats.

// Note [C set by the first K block]
// The output used to start as beta * bias (or zeros) in a pass over the tile, which the first K
// block's micro-kernels then read back. Where the micro-kernel that sets C exists
// (MicroKernelSet) and the start is a plain row of bias (beta 1, unit column stride) or zeros,
// the first K block sets each whole micro-tile itself, reading the bias in place of C; an
// edge micro-tile is set by init_output just before its own first product.
bool first_k_sets_c(const TileJob& job) {
  return job.micro.fn_set != nullptr &&
         (job.bias.data == nullptr || (job.beta == 1.0F && job.bias.col_stride == 1));
}

// Note [Partial sums staged]
// A micro-tile's rows are ldc apart, and at the widths models use (N = 1024, 2048, 3072,
// 4096: multiples of 4 KiB) they fall in the same few cache sets: a column strip of a task a
// few hundred rows tall no longer fits the L2 sets its rows map to, so every K block read its
// micro-tiles back from L3, in an order the hardware prefetchers do not follow. So where the
// first K block sets C (Note [C set by the first K block]) and more blocks follow, the whole
// micro-tiles' partial sums live in a per-thread buffer instead, each tile's kMicroRows x nr
// floats together in the order the blocks visit them: the first block sets a tile to bias +
// product, the middle ones add to it, and the last writes C = product + partial sum, so C
// is written once. The sums are the same, in the same order. Edge micro-tiles use C itself.

// The partial sums of one A block's whole micro-tiles (Note [Partial sums staged]), or none.
struct Stage {
  float* tiles = nullptr;
  std::int64_t slivers = 0;  ///< A slivers of the task: tiles of one strip
  /// Strip js, A sliver `is` of this block; null when not staging.
  [[nodiscard]] float* tile(std::int64_t js, std::int64_t is, std::int64_t nr) const {
    return tiles == nullptr ? nullptr : tiles + (js * slivers + is) * detail::kMicroRows * nr;
  }
};

// One whole micro-tile's product on a K block, or with `pair` two A slivers' (Note
// [Micro-tiles of two slivers]): set from the bias (or zero) on the first block, added onto
// the partial sum after it; kept in `staged` until the last block when there is one (Note
// [Partial sums staged]: a pair's two tiles are adjacent there too), else in C.
void multiply_whole_tile(const TileJob& job, bool pair, std::int64_t kb, const float* ap,
                         const float* bp, float* c, const float* bias, float* staged, bool first,
                         bool last) {
  const std::int64_t nr = job.micro.cols;
  const detail::MicroKernel fn = pair ? job.micro.fn_pair : job.micro.fn;
  const detail::MicroKernelSet fn_set = pair ? job.micro.fn_set_pair : job.micro.fn_set;
  float* const dst = staged != nullptr && !last ? staged : c;
  const std::int64_t ld = dst == c ? job.ldc : nr;
  if (first) {
    fn_set(kb, ap, bp, dst, ld, job.alpha, bias, job.bias.row_stride);
  } else if (staged != nullptr && last) {
    fn_set(kb, ap, bp, c, job.ldc, job.alpha, staged, nr);
  } else {
    fn(kb, ap, bp, dst, ld, job.alpha);
  }
}

// out[i0 : i0 + rows_total, j0 : j0 + cols_total] += alpha * (packed A block) * (packed B
// panel), K blocks of kb, or with `set_c` (the first K block: Note [C set by the first K
// block]) = beta * bias (or 0) + that; the activation follows on the last K block.
// `after_panel`: the B sliver read after the panel's last one (the next K block's first), or
// null.
void multiply_block(const TileJob& job, const float* ap_block, const float* bp_panel,
                    std::int64_t kb, float* out, std::int64_t i0, std::int64_t rows_total,
                    std::int64_t j0, std::int64_t cols_total, bool set_c, bool last_k,
                    const float* after_panel, const Stage& stage) {
  const std::int64_t mr = detail::kMicroRows;
  const std::int64_t nr = job.micro.cols;
  const std::int64_t ldc = job.ldc;
  const std::int64_t strips = ceil_div(cols_total, nr);
  const std::int64_t a_slivers = ceil_div(rows_total, mr);
  alignas(64) float buffer[detail::kMicroRows * detail::kMaxMicroCols];
  for (std::int64_t js = 0; js < strips; ++js) {
    const std::int64_t cols = std::min(nr, cols_total - js * nr);
    const float* bp = bp_panel + js * nr * kb;
    // A B packed per task was just written, so it is in cache already.
    const float* next = job.b_packed == nullptr ? nullptr
                        : js + 1 < strips       ? bp + nr * kb
                                                : after_panel;
    std::int64_t slivers = 1;
    for (std::int64_t is = 0; is < a_slivers; is += slivers) {
      // Two whole tiles at once where the ISA has the kernel (Note [Micro-tiles of two
      // slivers]).
      const bool pair =
          job.micro.fn_pair != nullptr && job.micro.fn_set_pair != nullptr && cols == nr &&
          rows_total - is * mr >= 2 * mr;
      slivers = pair ? 2 : 1;
      const std::int64_t rows = std::min(slivers * mr, rows_total - is * mr);
      const float* ap = ap_block + is * mr * kb;
      for (std::int64_t part = is; next != nullptr && part < is + slivers; ++part) {
        prefetch_share(next, nr * kb, part, a_slivers);
      }
      const std::int64_t ci = i0 + is * mr;
      const std::int64_t cj = j0 + js * nr;
      float* c = out + ci * ldc + cj;
      const bool whole = rows == slivers * mr && cols == nr;
      if (set_c && !whole) init_output(out, ldc, job.bias, job.beta, ci, ci + rows, cj, cj + cols);
      if (whole) {
        const float* bias = job.bias.data == nullptr
                                ? nullptr
                                : job.bias.data + ci * job.bias.row_stride + cj;
        multiply_whole_tile(job, pair, kb, ap, bp, c, bias, stage.tile(js, is, nr), set_c,
                            last_k);
      } else if (job.micro.edge != nullptr) {  // Note [Edge micro-tiles]
        job.micro.edge(static_cast<int>(rows), cols, kb, ap, bp, c, ldc, job.alpha);
      } else {
        std::fill(buffer, buffer + mr * nr, 0.0F);
        job.micro.fn(kb, ap, bp, buffer, nr, job.alpha);
        for (std::int64_t r = 0; r < rows; ++r) {
          for (std::int64_t j = 0; j < cols; ++j) c[r * ldc + j] += buffer[r * nr + j];
        }
      }
      // This micro-tile is final: apply the activation while it is in L1 (Note [Epilogue
      // per micro-tile]).
      if (last_k && job.epilogue != Epilogue::kNone) {
        detail::apply_epilogue(job.epilogue, c, ldc, rows, cols);
      }
    }
  }
}

// Whether a task's partial sums are staged at all (Note [Partial sums staged]): more than one
// K block, the first setting C.
bool stages_partial_sums(const TileJob& job, bool set_c) {
  return set_c && job.shape.k > job.tile_k;
}

// The floats of the staged whole micro-tiles of `mb` rows x `nb` columns.
std::int64_t staged_floats(const TileJob& job, std::int64_t mb, std::int64_t nb) {
  return round_up(nb, job.micro.cols) * round_up(mb, std::int64_t{detail::kMicroRows});
}

// Rows [i0, i0 + mb) x columns [j0, j0 + nb) of the output, through every K block: B's
// panel packed once per K block, A per block of rows (Note [CPU GEMM blocking]). `set_c`:
// the first K block sets the output (Note [C set by the first K block]).
void multiply_rows(const TileJob& job, const float* a, const float* b, float* out,
                   std::int64_t i0, std::int64_t mb, std::int64_t j0, std::int64_t nb,
                   bool set_c) {
  const std::int64_t nr = job.micro.cols;
  const std::int64_t mc = a_block_rows(job.block_m, std::min(job.tile_k, job.shape.k), mb);
  PackBuffers& buf = pack_buffers();
  const auto a_need = static_cast<std::size_t>(mc * job.tile_k + detail::kPackSlack);
  const auto b_need =
      job.b_packed != nullptr ? 0 : static_cast<std::size_t>(round_up(nb, nr) * job.tile_k);
  if (buf.a.size() < a_need) buf.a.resize(a_need);
  if (buf.b.size() < b_need) buf.b.resize(b_need);
  // Note [Partial sums staged]: the buffer holds every whole micro-tile of the rows.
  const std::int64_t stage_floats = staged_floats(job, mb, nb);
  const bool staging = stages_partial_sums(job, set_c) && stage_floats <= kMaxStagedFloats;
  if (staging && buf.stage.size() < static_cast<std::size_t>(stage_floats)) {
    buf.stage.resize(static_cast<std::size_t>(stage_floats));
  }

  const std::int64_t padded_n = round_up(job.shape.n, nr);
  for (std::int64_t k0 = 0; k0 < job.shape.k; k0 += job.tile_k) {
    const std::int64_t kb = std::min(job.tile_k, job.shape.k - k0);
    const bool last_k = k0 + job.tile_k >= job.shape.k;
    // A K block of the packed B starts at row k0 of every sliver; the task's first sliver is
    // column j0's (j0 is a multiple of nr when B is packed ahead).
    const float* bp = job.b_packed != nullptr ? job.b_packed + k0 * padded_n + j0 * kb : buf.b.data();
    if (job.b_packed == nullptr) job.micro.pack_b(b, job.b_rs, job.b_cs, k0, kb, j0, nb, nr, buf.b.data());
    // Packed ahead, the next K block's first sliver is known now (Note [Prefetching the next
    // B sliver]); a B packed per block is written just before it is read.
    const std::int64_t next_k0 = k0 + job.tile_k;
    const float* after_panel = nullptr;
    if (job.b_packed != nullptr && next_k0 < job.shape.k) {
      after_panel = job.b_packed + next_k0 * padded_n + j0 * std::min(job.tile_k, job.shape.k - next_k0);
    }
    for (std::int64_t ib = 0; ib < mb; ib += mc) {
      const std::int64_t rows = std::min(mc, mb - ib);
      job.micro.pack_a(a, job.a_rs, job.a_cs, i0 + ib, rows, k0, kb, buf.a.data());
      Stage stage;
      if (staging) {
        stage.slivers = ceil_div(mb, detail::kMicroRows);
        stage.tiles = buf.stage.data() + ib * nr;  // ib is a multiple of kMicroRows
      }
      multiply_block(job, buf.a.data(), bp, kb, out, i0 + ib, rows, j0, nb, set_c && k0 == 0,
                     last_k, ib + mc >= mb ? after_panel : bp, stage);
    }
  }
}

// Note [Staged bands of rows]
// A task whose whole micro-tiles outgrow the staging buffer (1 thread on 4096 x 2048: 8 M
// floats) accumulated in C, its rows far apart in a few cache sets, which Note [Partial sums
// staged] is there to avoid. Such a task now runs as bands of equal height that fit the
// buffer, each band through every K block, so B is packed once per band. A band shorter than
// kMinStagedBand rows would pack B for too little arithmetic (a band of r rows does 2r flops
// per float of B it packs), so a task that wide still accumulates in C.
constexpr std::int64_t kMinStagedBand = 256;

// The height of the bands a task `mb` x `nb` runs in (Note [Staged bands of rows]): mb itself
// where it is staged whole, where nothing is staged, or where bands would be too short.
std::int64_t staged_band_rows(const TileJob& job, bool set_c, std::int64_t mb, std::int64_t nb) {
  constexpr std::int64_t mr = detail::kMicroRows;
  if (!stages_partial_sums(job, set_c) || staged_floats(job, mb, nb) <= kMaxStagedFloats) {
    return mb;
  }
  const std::int64_t fit = kMaxStagedFloats / round_up(nb, job.micro.cols) / mr * mr;
  if (fit < kMinStagedBand) return mb;
  return round_up(ceil_div(mb, ceil_div(mb, fit)), mr);
}

void run_tile(const TileJob& job, std::int64_t block) {
  const std::int64_t batch = block / job.tiles_per_batch;
  const std::int64_t tile = block % job.tiles_per_batch;
  const std::int64_t i0 = (tile / job.tiles_n) * job.tile_m;
  const std::int64_t j0 = (tile % job.tiles_n) * job.tile_n;
  const std::int64_t mb = std::min(job.tile_m, job.shape.m - i0);
  const std::int64_t nb = std::min(job.tile_n, job.shape.n - j0);
  const float* a = job.a + batch * job.a_bs;
  const float* b = job.b + batch * job.b_bs;
  float* out = job.c + batch * job.c_bs;
  const std::int64_t ldc = job.ldc;

  // Output starts as beta * bias (or zero); the K blocks accumulate onto it. The first K
  // block sets it where it can (Note [C set by the first K block]).
  const bool set_c = job.shape.k > 0 && first_k_sets_c(job);
  if (!set_c) init_output(out, ldc, job.bias, job.beta, i0, i0 + mb, j0, j0 + nb);
  if (job.shape.k == 0) {
    if (job.epilogue != Epilogue::kNone) {
      apply_epilogue(job.epilogue, out, ldc, i0, i0 + mb, j0, j0 + nb);
    }
    return;
  }
  const std::int64_t band = staged_band_rows(job, set_c, mb, nb);
  for (std::int64_t r0 = 0; r0 < mb; r0 += band) {
    multiply_rows(job, a, b, out, i0 + r0, std::min(band, mb - r0), j0, nb, set_c);
  }
}

// The CPU "launch" of a GEMM: block = one tile_n x tile_m output tile, grid = the tiles (and
// the batch in z for a bmm).
void gemm_grid(const GemmShape& s, std::int64_t batch, std::int64_t tm, std::int64_t tn,
               Dim3& grid, Dim3& block) {
  block = {tn, tm, 1};
  grid = {std::max<std::int64_t>(1, ceil_div(s.n, tn)), std::max<std::int64_t>(1, ceil_div(s.m, tm)),
          std::max<std::int64_t>(1, batch)};
}

LaunchConfig complete_gemm_config(const ShapeKey& shape, const LaunchConfig& point) {
  LaunchConfig c = point;
  gemm_grid(gemm_shape(shape), 1, point.get_or("tile_m", 1), point.get_or("tile_n", 1), c.grid,
            c.block);
  return c;
}

LaunchConfig complete_bmm_config(const ShapeKey& shape, const LaunchConfig& point) {
  LaunchConfig c = point;
  const detail::BmmShape s = detail::bmm_shape(shape);
  gemm_grid(s.gemm, s.batch, point.get_or("tile_m", 1), point.get_or("tile_n", 1), c.grid,
            c.block);
  return c;
}

// Whether `config` of descriptor `d` can run `batch` GEMMs of shape `s`; `mat2_streamed`: a
// skinny path can read mat2 (row-major or transposed). Allocates nothing unless it refuses
// (it runs on every call of gemm_f32_cpu).
Status check_gemm_point(const KernelDescriptor& d, const GemmShape& s, std::int64_t batch,
                        bool mat2_streamed, const LaunchConfig& config) {
  if (Status st = d.space.check(config); !st) return st;
  if (config.get_or("skinny", 0) == 1) {
    if (!mat2_streamed) {
      return Status::unsupported("skinny=1 needs mat2 row-major (unit column stride) or "
                                 "transposed (unit row stride, as nn.Linear's weight)");
    }
    if (s.m > detail::kSkinnyMaxRows) {
      return Status::unsupported("skinny=1 takes M <= " + std::to_string(detail::kSkinnyMaxRows) +
                                 " rows (every row's accumulators in registers); M is " +
                                 std::to_string(s.m));
    }
  }
  if (const std::int64_t width = config.get_or("micro_n", 0);
      width != 0 && micro_kernel_of_width(width).fn == nullptr) {
    return Status::unsupported("micro_n=" + std::to_string(width) + ": the " + gemm_cpu_isa() +
                               " path has no micro-kernel that wide (AVX-512: 16, 32, 48; "
                               "AVX2 and generic: 16)");
  }
  if (const std::int64_t parts = config.get_or("split_k", 1); parts > 1) {
    if (ceil_div(s.n, config.get_or("tile_n", 1)) != 1) {
      return Status::unsupported("split_k=" + std::to_string(parts) + " needs one column task "
                                 "(tile_n >= N = " + std::to_string(s.n) + ")");
    }
    if (s.m * s.n * (parts - 1) > kSplitFloats) {
      return Status::unsupported("split_k=" + std::to_string(parts) + ": the partial outputs (" +
                                 std::to_string(parts - 1) + " x M x N = " +
                                 std::to_string(s.m * s.n * (parts - 1)) +
                                 " floats) exceed the launch's scratch of " +
                                 std::to_string(kSplitFloats));
    }
  }
  Dim3 grid;
  Dim3 block;
  gemm_grid(s, batch, config.get_or("tile_m", 1), config.get_or("tile_n", 1), grid, block);
  const bool unset = config.grid == Dim3{} && config.block == Dim3{};
  if (!unset && (config.grid != grid || config.block != block)) {
    LaunchConfig expected = config;
    expected.grid = grid;
    expected.block = block;
    return Status::unsupported("grid/block (" + config.str() +
                               ") do not match the tiles; expected " + expected.str());
  }
  return Status::ok();
}

// `point` reduced to what it changes for `batch` GEMMs of shape `s` (KernelDescriptor::
// canonical): tiles no larger than the matrix, K blocks no deeper than K, the micro-tile width
// and the A block (MC) resolved, threads no more than tasks; the skinny path ignores tile_m
// and tile_k.
LaunchConfig canonical_gemm_point(const GemmShape& s, std::int64_t batch, const LaunchConfig& point) {
  const std::int64_t m = std::max<std::int64_t>(s.m, 1);
  const std::int64_t n = std::max<std::int64_t>(s.n, 1);
  const std::int64_t nb = std::max<std::int64_t>(batch, 1);
  LaunchConfig c;
  const std::int64_t tile_n = std::min(point.get_or("tile_n", 1), n);
  if (point.get_or("skinny", 0) == 1) {
    const std::int64_t parts = point.get_or("split_k", 1);
    const std::int64_t tasks = parts > 1 ? parts : ceil_div(n, tile_n);
    c.set("tile_n", tile_n).set("skinny", 1).set("split_k", parts);
    c.set("threads", std::min(point.get_or("threads", 1), tasks));
    return c;
  }
  const std::int64_t tile_m = std::min(point.get_or("tile_m", 1), m);
  const std::int64_t tile_k = std::min(point.get_or("tile_k", 1), std::max<std::int64_t>(s.k, 1));
  const std::int64_t tasks = nb * ceil_div(m, tile_m) * ceil_div(n, tile_n);
  c.set("tile_m", tile_m).set("tile_n", tile_n).set("tile_k", tile_k).set("skinny", 0);
  c.set("micro_n", micro_kernel_of_width(point.get_or("micro_n", 0)).cols);
  c.set("block_m", a_block_rows(point.get_or("block_m", 0), tile_k, tile_m));
  c.set("threads", std::min(point.get_or("threads", 1), tasks));
  return c;
}

// Whether the skinny paths can read the GEMM's mat2 (its last argument): row-major, or the
// transpose of a contiguous matrix (Note [Skinny dot products]).
bool mat2_streamed(const ShapeKey& shape) {
  const TensorSpec& mat2 = shape.args().back();
  return mat2.contiguous || mat2.transposed;
}

Status check_gemm_config(const ShapeKey& shape, const LaunchConfig& config) {
  return check_gemm_point(gemm_f32_cpu_descriptor(), gemm_shape(shape), 1, mat2_streamed(shape),
                          config);
}

Status check_bmm_config(const ShapeKey& shape, const LaunchConfig& config) {
  const detail::BmmShape s = detail::bmm_shape(shape);
  return check_gemm_point(bmm_f32_cpu_descriptor(), s.gemm, s.batch, true, config);
}

}  // namespace

std::int64_t l2_budget_bytes() {
  // The machine's per-core L2; 1 MiB when sysfs does not say.
  static const std::int64_t bytes = [] {
    const std::int64_t l2 = cpu_fingerprint().l2_bytes;
    return l2 > 0 ? l2 : std::int64_t{1} << 20;
  }();
  return bytes;
}

namespace {

// The GEMM's tunable space; a bmm has no skinny path.
TunableSpace gemm_space(const std::vector<std::int64_t>& threads, bool batched) {
  std::vector<Constraint> constraints = {
      {"tile_m % 6 == 0 (micro-tile rows)",
       [](const LaunchConfig& c) { return c.get_or("tile_m", 0) > 0 && c.get_or("tile_m", 0) % 6 == 0; }},
      {"tile_n % 32 == 0 (widest micro-tile)",
       [](const LaunchConfig& c) { return c.get_or("tile_n", 0) > 0 && c.get_or("tile_n", 0) % 32 == 0; }},
      {"tile_k >= 1", [](const LaunchConfig& c) { return c.get_or("tile_k", 0) >= 1; }},
      {"threads >= 1", [](const LaunchConfig& c) { return c.get_or("threads", 0) >= 1; }},
      {"skinny is 0 or 1",
       [](const LaunchConfig& c) { return c.get_or("skinny", -1) == 0 || c.get_or("skinny", -1) == 1; }},
      {"split_k == 1 unless skinny == 1",
       [](const LaunchConfig& c) {
         return c.get_or("split_k", 0) == 1 ||
                (c.get_or("skinny", 0) == 1 && c.get_or("split_k", 0) > 1);
       }},
      {"block_m % 6 == 0 and block_m <= tile_m (0: sized to the L2)",
       [](const LaunchConfig& c) {
         const std::int64_t bm = c.get_or("block_m", -1);
         return bm == 0 || (bm > 0 && bm % 6 == 0 && bm <= c.get_or("tile_m", 0));
       }},
      {"micro_n == 0 and block_m == 0 when skinny == 1 (no micro-tiles there)",
       [](const LaunchConfig& c) {
         return c.get_or("skinny", 0) == 0 ||
                (c.get_or("micro_n", -1) == 0 && c.get_or("block_m", -1) == 0);
       }},
      {"tile_n * tile_k * 4 <= 2 MiB (the packed B panel of a task)",
       [](const LaunchConfig& c) {
         return c.get_or("tile_n", 0) * c.get_or("tile_k", 0) * 4 <= kMaxPackedB;
       }},
  };
  if (batched) {
    constraints.push_back({"skinny == 0 (bmm has no skinny path)",
                           [](const LaunchConfig& c) { return c.get_or("skinny", -1) == 0; }});
  }
  return TunableSpace(
      {
          {"tile_m", {6, 12, 24, 48, 96, 192, 384, 768, 1536},
           "rows of the output tile one task computes"},
          {"tile_n", {32, 64, 128, 256, 512, 1024, 2048},
           "columns of the output tile one task computes (its packed B panel is tile_k x tile_n)"},
          {"tile_k", {64, 128, 256, 384, 512}, "depth of the packed A/B panels (K block)"},
          {"threads", threads, "worker threads running the tiles"},
          {"skinny", {0, 1},
           "1: stream B unpacked, tile_n columns per task (decode shapes, row-major B)"},
          {"split_k", {1, 2, 4, 8},
           "skinny: K parts run in parallel, partials added in order (one column task, narrow N)"},
          {"micro_n", {0, 16, 32, 48},
           "columns of the 6-row register micro-tile (0: the ISA's own, AVX-512 32, AVX2 16)"},
          {"block_m", {0, 48, 96, 192, 384},
           "rows of A packed per L2 block (MC); 0: as many as fill half the L2"},
      },
      std::move(constraints));
}

// Note [Skinny column tasks]
// A skinny task reads each row of B (row-major) as one stream across its columns, and a
// longer stream reads faster, so the heuristic gives each thread one task, as wide as the
// path reads well. The AVX2 path, without prefetches up to 6 rows (Note [AVX2 skinny
// prefetch only across groups]), kept reading faster with wider tasks on Zen 3 up to a whole
// N, so it takes N / threads, rounded up to 64 columns so the threads get equal shares, in
// tasks of at most kWidestSkinnyTask columns (more tasks per thread, as few as that allows,
// where N is wider); with several row groups (M > 6), of at most kAvx2LongPassCols, so that
// its passes are the long ones (Note [AVX2 long skinny passes]).
// So does the AVX-512 path up to kSkinnyStreamRows rows, where it reads B at memory speed
// (measured on an Intel Xeon). With more rows its groups read each pass of 32 rows again
// (Note [Longer AVX-512 skinny passes]), which wider tasks push out of L2, so those tasks stay
// at most 2048 columns wide (a power of two, like the tunable's candidates), as measured on
// Zen 5. A transposed B (Note [Skinny dot products]) takes the same tasks. The measurements
// are in the bodies of commits c4712ea, e393edb and the one adding kSkinnyStreamRows.
// The skinny paths pack no B and ignore tile_k (canonical_gemm_point drops it), but the
// space's packed-panel constraint (tile_n x tile_k x 4 <= 2 MiB) is checked on every point:
// skinny defaults wider than 2048 set tile_k to its smallest candidate, 64, which admits
// 8192 columns. (Exempting skinny points from the constraint instead would add points to
// the space, and so reshuffle every seeded random sweep.)
constexpr std::int64_t kSkinnyWideTileK = 64;
constexpr std::int64_t kWidestSkinnyTask = kMaxPackedB / (4 * kSkinnyWideTileK);
// Up to this many rows of A the AVX-512 skinny path streams B in tasks as wide as AVX2's.
constexpr std::int64_t kSkinnyStreamRows = 4;

std::int64_t skinny_task_cols(std::int64_t m, std::int64_t n, std::int64_t hw) {
  const std::int64_t threads = std::max<std::int64_t>(hw, 1);
  const bool avx2 = std::string_view(active_micro_kernel().isa) == "avx2";
  if (avx2 || m <= kSkinnyStreamRows) {
    const std::int64_t widest =
        avx2 && m > detail::kAvx2MaxGroupRows ? detail::kAvx2LongPassCols : kWidestSkinnyTask;
    std::int64_t parts = threads;
    while (round_up(ceil_div(n, parts), 64) > widest) parts += threads;
    return round_up(ceil_div(n, parts), 64);
  }
  std::int64_t cols = 64;
  while (cols < 2048 && cols < ceil_div(n, threads)) cols *= 2;
  return cols;
}

// Note [Shallower K blocks for short tasks]
// A task of few rows (a transformer's 128 tokens) multiplies each B sliver by few A slivers
// (11 pairs at 132 rows), so bringing the sliver into L1 is a larger share of its time than in
// a tall task. K blocks of 128 halve the sliver (16 KiB at nr = 32), which then shares L1 with
// the A slivers streaming past it and with the next sliver's first lines; the extra K blocks
// cost one more pass over the staged partial sums each. AVX2's slivers (16 columns) are 16 KiB
// at a depth of 256 already, and keep it.
constexpr std::int64_t kShortTaskRows = 192;
constexpr std::int64_t kShortTaskTileK = 128;
constexpr std::int64_t kShortTaskSliverBytes = 16 << 10;

// The default tiles for `batch` GEMMs of shape `s` (grid/block not filled).
LaunchConfig default_gemm_point(const GemmShape& s, std::int64_t batch, std::int64_t hw,
                                bool skinny_ok) {
  // Heuristic: one task as tall as M and as wide as N (up to the widest packed B panel), so
  // each operand is packed once (Note [CPU GEMM blocking]); K in blocks of 256. Then split
  // tasks until every thread has one: N first while tasks stay at least 256 wide (the other
  // thread packs its own columns of B and re-packs A, the smaller cost for wide shapes), else
  // M. Tasks of few rows take shallower K blocks (Note [Shallower K blocks for short tasks]).
  const std::int64_t nb = std::max<std::int64_t>(batch, 1);
  constexpr std::int64_t kTileK = 256;
  const std::int64_t m = std::max<std::int64_t>(s.m, 1);
  const std::int64_t n = std::max<std::int64_t>(s.n, 1);
  // Cut M and N into equal parts (multiples of the micro-tile), so threads get equal work.
  std::int64_t m_parts = 1;
  std::int64_t n_parts = ceil_div(n, kMaxPackedB / (4 * kTileK));
  const auto tile_rows = [&] { return round_up(ceil_div(m, m_parts), detail::kMicroRows); };
  const auto tile_cols = [&] { return round_up(ceil_div(n, n_parts), 32); };
  // Below ~0.2 MFLOP (a few microseconds on one core) a second thread costs as much as it
  // saves. Above it, one task per thread: a caller never waits for a worker that has not
  // woken (Note [Wait only for started blocks]), so more tasks per thread would only pack
  // the operands more often.
  const double flop = 2.0 * static_cast<double>(nb) * static_cast<double>(s.m) *
                      static_cast<double>(s.n) * static_cast<double>(s.k);
  const bool tiny = flop < 2.0e5;
  while (!tiny && nb * m_parts * n_parts < hw) {
    if (tile_cols() >= 512 || (tile_cols() >= 64 && tile_rows() <= detail::kMicroRows)) {
      ++n_parts;
    } else if (tile_rows() >= 2 * detail::kMicroRows) {
      ++m_parts;
    } else {
      break;
    }
  }
  const std::int64_t tm = tile_rows();
  const std::int64_t tn = tile_cols();
  const std::int64_t tiles = nb * ceil_div(s.m, tm) * ceil_div(s.n, tn);
  LaunchConfig point;
  const bool deep_slivers = active_micro_kernel().cols * kTileK * 4 > kShortTaskSliverBytes;
  const std::int64_t tile_k = tm <= kShortTaskRows && deep_slivers ? kShortTaskTileK : kTileK;
  point.set("tile_m", tm).set("tile_n", tn).set("tile_k", tile_k).set("skinny", 0);
  point.set("split_k", 1).set("micro_n", 0).set("block_m", 0);
  point.set("threads", tiny ? 1 : std::min<std::int64_t>(hw, std::max<std::int64_t>(1, tiles)));
  // Decode shapes (M <= 16): packing B costs as much as the arithmetic, so stream it
  // unpacked (Note [Skinny rows in one pass]), in column tasks (Note [Skinny column tasks]).
  // Few flops can still be a long read of B (1 x 16384 x 64: 2 MFLOP, 4 MiB of B).
  const double b_bytes = static_cast<double>(s.k) * static_cast<double>(s.n) * 4.0;
  const bool long_read = b_bytes >= 1 << 20;
  if (skinny_ok && s.m <= detail::kSkinnyMaxRows && (!tiny || long_read)) {
    point.set("skinny", 1);
    point.set("tile_m", round_up(std::max<std::int64_t>(s.m, 1), detail::kMicroRows));
    const std::int64_t cols = skinny_task_cols(s.m, n, hw);
    point.set("tile_n", cols);
    // Wider than a 256-deep packed panel allows: Note [Skinny column tasks].
    if (cols * kTileK * 4 > kMaxPackedB) point.set("tile_k", kSkinnyWideTileK);
    point.set("threads", std::min<std::int64_t>(hw, ceil_div(s.n, cols)));
    // One column task reading at least 8 MiB of B: split K over the idle threads where the
    // partials fit the launch's scratch (Note [Split K]). A shorter read (B of a few MiB,
    // which the L3 may hold) gains less than waking another thread costs.
    const bool long_b = b_bytes >= 8 << 20;
    std::int64_t parts = 1;
    while (ceil_div(s.n, cols) == 1 && long_b && parts * 2 <= std::min<std::int64_t>(hw, 8) &&
           s.m * s.n * (parts * 2 - 1) <= kSplitFloats) {
      parts *= 2;
    }
    point.set("split_k", parts);
    if (parts > 1) point.set("threads", parts);
  }
  return point;
}

KernelDescriptor make_cpu_descriptor() {
  KernelDescriptor d;
  d.name = "gemm_f32_blocked";
  // 2: adds the skinny-M path (tunable `skinny`). 3: tiles are tasks packing B once per K
  // block and A per L2 block of rows (tile_m no longer sizes the A block). 4: split_k.
  // 5: micro_n and block_m. 6: the skinny path (and split_k) on every ISA, no longer AVX-512
  // only. 7: skinny=1 also takes a transposed mat2 (Note [Skinny dot products]).
  d.version = 7;
  d.ops = {"aten::mm", "aten::addmm"};
  d.dtypes = {DType::kFloat32};
  d.device = DeviceType::kCPU;
  const auto threads = detail::cpu_thread_candidates();
  d.space = gemm_space(threads, false);
  d.complete = complete_gemm_config;
  d.can_run = [](const ShapeKey& shape, const LaunchConfig& config) -> Status {
    for (const auto& t : shape.args()) {
      if (t.dtype != DType::kFloat32) return Status::unsupported("only float32 is supported");
    }
    return check_gemm_config(shape, config);
  };
  d.default_config = [](const ShapeKey& shape) {
    const GemmShape s = gemm_shape(shape);
    return complete_gemm_config(
        shape, default_gemm_point(s, 1, cpu_thread_limit(), mat2_streamed(shape)));
  };
  d.canonical = [](const ShapeKey& shape, const LaunchConfig& point) {
    return canonical_gemm_point(gemm_shape(shape), 1, point);
  };
  d.flop_count = [](const ShapeKey& shape) {
    const GemmShape s = gemm_shape(shape);
    return 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  };
  d.byte_count = [](const ShapeKey& shape) {
    const GemmShape s = gemm_shape(shape);
    const double bias = shape.op() == "aten::addmm" ? static_cast<double>(s.n) : 0.0;
    return 4.0 * (static_cast<double>(s.m * s.k + s.k * s.n + s.m * s.n) + bias);
  };
  return d;
}

KernelDescriptor make_bmm_descriptor() {
  KernelDescriptor d;
  d.name = "bmm_f32_blocked";
  // 2: tasks pack B once per K block (see gemm_f32_blocked version 3). 3: micro_n, block_m.
  d.version = 3;
  d.ops = {"aten::bmm"};
  d.dtypes = {DType::kFloat32};
  d.device = DeviceType::kCPU;
  const auto threads = detail::cpu_thread_candidates();
  d.space = gemm_space(threads, true);
  d.complete = complete_bmm_config;
  d.can_run = [](const ShapeKey& shape, const LaunchConfig& config) -> Status {
    for (const auto& t : shape.args()) {
      if (t.dtype != DType::kFloat32) return Status::unsupported("only float32 is supported");
    }
    return check_bmm_config(shape, config);
  };
  d.default_config = [](const ShapeKey& shape) {
    const detail::BmmShape s = detail::bmm_shape(shape);
    return complete_bmm_config(shape,
                               default_gemm_point(s.gemm, s.batch, cpu_thread_limit(), false));
  };
  d.canonical = [](const ShapeKey& shape, const LaunchConfig& point) {
    const detail::BmmShape s = detail::bmm_shape(shape);
    return canonical_gemm_point(s.gemm, s.batch, point);
  };
  d.flop_count = [](const ShapeKey& shape) {
    const detail::BmmShape s = detail::bmm_shape(shape);
    return 2.0 * static_cast<double>(s.batch) * static_cast<double>(s.gemm.m) *
           static_cast<double>(s.gemm.n) * static_cast<double>(s.gemm.k);
  };
  d.byte_count = [](const ShapeKey& shape) {
    const detail::BmmShape s = detail::bmm_shape(shape);
    const GemmShape& g = s.gemm;
    return 4.0 * static_cast<double>(s.batch) *
           static_cast<double>(g.m * g.k + g.k * g.n + g.m * g.n);
  };
  return d;
}

}  // namespace

std::string gemm_cpu_isa() { return active_micro_kernel().isa; }

detail::MicroKernelInfo detail::micro_kernel_in_use(std::int64_t cols) {
  return micro_kernel_of_width(cols);
}

std::vector<std::int64_t> gemm_cpu_micro_widths() {
  std::vector<std::int64_t> widths;
  for (int cols = 1; cols <= detail::kMaxMicroCols; ++cols) {
    if (micro_kernel_of_width(cols).fn != nullptr) widths.push_back(cols);
  }
  return widths;
}

namespace {

detail::CpuPath path_of(const char* isa) {
  if (std::strcmp(isa, "avx512") == 0) return detail::CpuPath::kAvx512;
  if (std::strcmp(isa, "avx2") == 0) return detail::CpuPath::kAvx2;
  return detail::CpuPath::kGeneric;
}

}  // namespace

detail::CpuPath detail::active_cpu_path() {
  if (const auto* forced = g_forced.load(std::memory_order_acquire)) return path_of(forced->isa);
  static const CpuPath automatic = path_of(automatic_micro_kernel().isa);
  return automatic;
}

bool detail::avx512_active() { return active_cpu_path() == CpuPath::kAvx512; }

void force_cpu_isa(const std::string& isa) {
  if (isa.empty()) {
    g_forced.store(nullptr, std::memory_order_release);
    return;
  }
  g_forced.store(&checked_micro_kernel(isa, "force_cpu_isa"), std::memory_order_release);
}

const KernelDescriptor& gemm_f32_cpu_descriptor() {
  static const KernelDescriptor d = make_cpu_descriptor();
  return d;
}

const KernelDescriptor& bmm_f32_cpu_descriptor() {
  static const KernelDescriptor d = make_bmm_descriptor();
  return d;
}

namespace {

// alpha * A[:, k0:k1] @ B[k0:k1, j0:j1] into the calling thread's private tile, whose row
// stride (returned in ld) is off powers of two: C's own rows, 16 KiB apart at N = 4096, fall
// in one L1 set and evict each other. Note [Skinny rows in one pass].
const float* skinny_products(const SkinnyJob& job, std::int64_t k0, std::int64_t k1,
                             std::int64_t j0, std::int64_t j1, std::int64_t& ld) {
  const std::int64_t cols = j1 - j0;
  ld = ceil_div(cols, 16) * 16 + 16;
  std::vector<float>& tile = pack_buffers().b;
  const auto need = static_cast<std::size_t>(job.shape.m * ld);
  if (tile.size() < need) tile.resize(need);
  std::fill(tile.begin(), tile.begin() + static_cast<std::ptrdiff_t>(need), 0.0F);
  if (k1 > k0) {
    detail::SkinnyArgs part = job.operands;
    part.a += k0 * part.a_col_stride;
    part.b += k0 * part.b_k_stride();
    part.k = k1 - k0;
    part.c = tile.data();
    part.ldc = ld;
    job.columns(part, j0, j1);
  }
  return tile.data();
}

// C[:, j0:j1] += the tile.
void add_tile(const SkinnyJob& job, const float* tile, std::int64_t ld, std::int64_t j0,
              std::int64_t j1) {
  const detail::SkinnyArgs& op = job.operands;
  for (std::int64_t r = 0; r < job.shape.m; ++r) {
    float* c = op.c + r * op.ldc + j0;
    const float* t = tile + r * ld;
    for (std::int64_t j = 0; j < j1 - j0; ++j) c[j] += t[j];
  }
}

void run_skinny(const SkinnyJob& job, std::int64_t task) {
  const std::int64_t j0 = task * job.cols;
  const std::int64_t j1 = std::min(job.shape.n, j0 + job.cols);
  const detail::SkinnyArgs& op = job.operands;
  init_output(op.c, op.ldc, job.bias, job.beta, 0, job.shape.m, j0, j1);
  if (job.shape.k > 0) {
    std::int64_t ld = 0;
    const float* tile = skinny_products(job, 0, job.shape.k, j0, j1, ld);
    add_tile(job, tile, ld, j0, j1);
  }
  if (job.epilogue != Epilogue::kNone) {
    apply_epilogue(job.epilogue, op.c, op.ldc, 0, job.shape.m, j0, j1);
  }
}

// Block `part` of a split-K skinny GEMM (one column task). Note [Split K].
void run_skinny_part(const SkinnyJob& job, std::int64_t part, double* scratch) {
  const GemmShape& s = job.shape;
  const std::int64_t k0 = s.k * part / job.k_parts;
  const std::int64_t k1 = s.k * (part + 1) / job.k_parts;
  std::int64_t ld = 0;
  const float* tile = skinny_products(job, k0, k1, 0, s.n, ld);
  if (part == 0) {
    init_output(job.operands.c, job.operands.ldc, job.bias, job.beta, 0, s.m, 0, s.n);
    add_tile(job, tile, ld, 0, s.n);
    return;
  }
  auto* slot = reinterpret_cast<unsigned char*>(scratch) +
               static_cast<std::size_t>((part - 1) * s.m * s.n) * sizeof(float);
  for (std::int64_t r = 0; r < s.m; ++r) {
    std::memcpy(slot + static_cast<std::size_t>(r * s.n) * sizeof(float), tile + r * ld,
                static_cast<std::size_t>(s.n) * sizeof(float));
  }
}

void finish_skinny_parts(const SkinnyJob& job, const double* scratch) {
  const GemmShape& s = job.shape;
  const detail::SkinnyArgs& op = job.operands;
  const auto* parts = reinterpret_cast<const unsigned char*>(scratch);
  for (std::int64_t p = 1; p < job.k_parts; ++p) {
    for (std::int64_t r = 0; r < s.m; ++r) {
      float row[kSplitFloats];
      std::memcpy(row, parts + static_cast<std::size_t>(((p - 1) * s.m + r) * s.n) * sizeof(float),
                  static_cast<std::size_t>(s.n) * sizeof(float));
      float* c = op.c + r * op.ldc;
      for (std::int64_t j = 0; j < s.n; ++j) c[j] += row[j];
    }
  }
  if (job.epilogue != Epilogue::kNone) apply_epilogue(job.epilogue, op.c, op.ldc, 0, s.m, 0, s.n);
}

TileJob tile_job(const LaunchConfig& config, const GemmShape& s) {
  TileJob job{};
  job.shape = s;
  job.micro = micro_kernel_of_width(config.get_or("micro_n", 0));
  job.block_m = config.get_or("block_m", 0);
  job.tile_m = config.get_or("tile_m", 96);
  job.tile_n = config.get_or("tile_n", 256);
  job.tile_k = config.get_or("tile_k", 256);
  job.tiles_n = ceil_div(s.n, job.tile_n);
  job.tiles_per_batch = ceil_div(s.m, job.tile_m) * job.tiles_n;
  job.alpha = 1.0F;
  job.beta = 0.0F;
  job.epilogue = Epilogue::kNone;
  return job;
}

}  // namespace

std::int64_t PackedMat2Layout::floats() const noexcept {
  return cols <= 0 ? 0 : k * round_up(n, cols);
}

namespace {

// Whether the tiled path can read a B packed whole in `job`'s layout: every task's columns
// start on a sliver boundary.
bool reads_packed_b(const TileJob& job) {
  return job.tiles_n == 1 || job.tile_n % job.micro.cols == 0;
}

PackedMat2Layout packed_b_layout(const TileJob& job) {
  return {job.shape.k, job.shape.n, std::min(job.tile_k, job.shape.k),
          static_cast<std::int64_t>(job.micro.cols),
          reinterpret_cast<const void*>(job.micro.pack_b)};
}

// The tiled job of a GEMM `args` whose config `check_gemm_point` accepted, without operands.
std::optional<TileJob> tiled_job_of(const AddmmArgs& args, const LaunchConfig& config,
                                    GemmShape& s) {
  s = detail::validate_addmm(args, DeviceType::kCPU);
  if (config.get_or("skinny", 0) == 1 || s.m == 0 || s.n == 0 || s.k == 0) return std::nullopt;
  return tile_job(config, s);
}

}  // namespace

std::optional<PackedMat2Layout> gemm_f32_cpu_mat2_layout(const AddmmArgs& args,
                                                         const LaunchConfig& config) {
  GemmShape s;
  const std::optional<TileJob> job = tiled_job_of(args, config, s);
  if (!job || job->micro.fn == nullptr || !reads_packed_b(*job)) return std::nullopt;
  const bool streamed = args.mat2.stride(1) == 1 || args.mat2.stride(0) == 1 || s.n <= 1;
  if (!check_gemm_point(gemm_f32_cpu_descriptor(), s, 1, streamed, config)) return std::nullopt;
  return packed_b_layout(*job);
}

void pack_gemm_f32_cpu_mat2(const AddmmArgs& args, const PackedMat2Layout& layout, float* out) {
  const GemmShape s = detail::validate_addmm(args, DeviceType::kCPU);
  const detail::MicroKernelInfo micro = micro_kernel_of_width(layout.cols);
  KA_CHECK(s.k == layout.k && s.n == layout.n && micro.cols == layout.cols &&
               reinterpret_cast<const void*>(micro.pack_b) == layout.pack && layout.tile_k > 0,
           "pack_gemm_f32_cpu_mat2: the layout (", layout.k, " x ", layout.n, ", K blocks of ",
           layout.tile_k, ", ", layout.cols, " wide) is not one of this GEMM (", s.k, " x ", s.n,
           ") on the ", gemm_cpu_isa(), " path");
  const float* b = args.mat2.data_as<const float>();
  const std::int64_t padded_n = round_up(s.n, layout.cols);
  for (std::int64_t k0 = 0; k0 < s.k; k0 += layout.tile_k) {
    const std::int64_t kb = std::min(layout.tile_k, s.k - k0);
    micro.pack_b(b, args.mat2.stride(0), args.mat2.stride(1), k0, kb, 0, s.n, layout.cols,
                 out + k0 * padded_n);
  }
}

Status prepare_gemm_f32_cpu(const AddmmArgs& args, const LaunchConfig& config,
                            CpuLaunch& launch) {
  const GemmShape s = detail::validate_addmm(args, DeviceType::kCPU);
  const bool mat2_row_major = args.mat2.stride(1) == 1 || s.n <= 1;
  const bool mat2_transposed = !mat2_row_major && args.mat2.stride(0) == 1;
  if (Status st = check_gemm_point(gemm_f32_cpu_descriptor(), s, 1,
                                   mat2_row_major || mat2_transposed, config);
      !st) {
    return st;
  }
  const auto threads = static_cast<int>(config.get_or("threads", 1));
  if (s.m == 0 || s.n == 0) {
    launch.blocks = 0;
    launch.threads = threads;
    return Status::ok();
  }
  const detail::BiasView bias = detail::broadcast_bias(args, s.m, s.n);
  if (config.get_or("skinny", 0) == 1) {
    SkinnyJob job{};
    job.bias = bias;
    job.beta = args.beta;
    job.epilogue = args.epilogue;
    job.shape = s;
    job.operands = detail::SkinnyArgs{args.mat1.data_as<const float>(),
                                      args.mat1.stride(0),
                                      args.mat1.stride(1),
                                      args.mat2.data_as<const float>(),
                                      args.mat2.stride(mat2_transposed ? 1 : 0),
                                      args.out.data_as<float>(),
                                      args.out.stride(0),
                                      s.m,
                                      s.k,
                                      args.alpha,
                                      mat2_transposed};
    job.columns = mat2_transposed ? active_micro_kernel().skinny_dot : active_micro_kernel().skinny;
    job.cols = config.get_or("tile_n", 256);
    job.k_parts = config.get_or("split_k", 1);
    if (job.k_parts > 1) {
      launch.bind_split<SkinnyJob, run_skinny_part, finish_skinny_parts>(job, job.k_parts, threads);
    } else {
      launch.bind<SkinnyJob, run_skinny>(job, ceil_div(s.n, job.cols), threads);
    }
    return Status::ok();
  }
  TileJob job = tile_job(config, s);
  job.a = args.mat1.data_as<const float>();
  job.a_rs = args.mat1.stride(0);
  job.a_cs = args.mat1.stride(1);
  job.b = args.mat2.data_as<const float>();
  job.b_rs = args.mat2.stride(0);
  job.b_cs = args.mat2.stride(1);
  job.c = args.out.data_as<float>();
  job.ldc = args.out.stride(0);
  job.bias = bias;
  job.alpha = args.alpha;
  job.beta = args.beta;
  job.epilogue = args.epilogue;
  if (args.mat2_packed.data != nullptr && reads_packed_b(job) &&
      args.mat2_packed.layout == packed_b_layout(job)) {
    job.b_packed = args.mat2_packed.data;
  }
  launch.bind<TileJob, run_tile>(job, job.tiles_per_batch, threads);
  return Status::ok();
}

Status gemm_f32_cpu(const AddmmArgs& args, const LaunchConfig& config) {
  CpuLaunch launch;
  if (Status st = prepare_gemm_f32_cpu(args, config, launch); !st) return st;
  run_on_pool(launch);
  return Status::ok();
}

Status prepare_bmm_f32_cpu(const BmmArgs& args, const LaunchConfig& config, CpuLaunch& launch) {
  const detail::BmmShape bs = detail::validate_bmm(args, DeviceType::kCPU);
  // The CPU tiles write rows of out contiguously.
  KA_CHECK(args.out.stride(2) == 1 || bs.gemm.n <= 1, "bmm: out must have unit column stride, ",
           "got strides [", args.out.stride(0), ", ", args.out.stride(1), ", ",
           args.out.stride(2), "]");
  const GemmShape& s = bs.gemm;
  if (Status st = check_gemm_point(bmm_f32_cpu_descriptor(), s, bs.batch, true, config); !st) {
    return st;
  }
  const auto threads = static_cast<int>(config.get_or("threads", 1));
  if (bs.batch == 0 || s.m == 0 || s.n == 0) {
    launch.blocks = 0;
    launch.threads = threads;
    return Status::ok();
  }
  TileJob job = tile_job(config, s);
  job.a = args.mat1.data_as<const float>();
  job.a_bs = args.mat1.stride(0);
  job.a_rs = args.mat1.stride(1);
  job.a_cs = args.mat1.stride(2);
  job.b = args.mat2.data_as<const float>();
  job.b_bs = args.mat2.stride(0);
  job.b_rs = args.mat2.stride(1);
  job.b_cs = args.mat2.stride(2);
  job.c = args.out.data_as<float>();
  job.c_bs = args.out.stride(0);
  job.ldc = args.out.stride(1);
  job.alpha = 1.0F;
  launch.bind<TileJob, run_tile>(job, bs.batch * job.tiles_per_batch, threads);
  return Status::ok();
}

Status bmm_f32_cpu(const BmmArgs& args, const LaunchConfig& config) {
  CpuLaunch launch;
  if (Status st = prepare_bmm_f32_cpu(args, config, launch); !st) return st;
  run_on_pool(launch);
  return Status::ok();
}

}  // namespace ka::kernels
