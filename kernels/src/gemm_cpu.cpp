// Blocked CPU GEMM: each grid tile (tile_m x tile_n of the output) is one task; it walks K in
// tile_k steps, packs its A and B panels into thread-local buffers and runs an ISA-specific
// register-blocked micro-kernel over them. See Note [CPU GEMM blocking].
#include "gemm_internal.hpp"

#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/core/logging.hpp>
#include <ka/core/thread_pool.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>
#include <thread>
#include <vector>

namespace ka::kernels {

// Note [CPU GEMM blocking]
// The output is cut into tiles of tile_m x tile_n (the LaunchConfig's block; the grid is the
// number of tiles). A tile is the unit of parallel work, so tiles never share writes. For each
// K block of tile_k, the tile packs A (tile_m x tile_k) into slivers of kMicroRows rows and B
// (tile_k x tile_n) into slivers of the micro-kernel's width, zero-padded at the edges, so the
// micro-kernel always sees full slivers and any input strides (transposed views) cost nothing
// extra. The output is first set to beta * bias (or 0), then every K block adds
// alpha * A_block * B_block. Edge micro-tiles go through a small local buffer.
// This is "reasonably blocked", not yet tuned: a later issue adds shared B panels, split-K
// and a skinny-M path.

namespace {

std::atomic<const detail::MicroKernelInfo*> g_forced{nullptr};

bool cpu_can_run(const std::string& isa) {
  const std::string level = cpu_isa_level();
  if (isa == "generic") return true;
  if (isa == "avx2") return level == "avx2" || level == "avx512";
  if (isa == "avx512") return level == "avx512";
  return false;
}

const detail::MicroKernelInfo& micro_kernel_for(const std::string& isa) {
  static const detail::MicroKernelInfo avx512 = detail::micro_kernel_avx512();
  static const detail::MicroKernelInfo avx2 = detail::micro_kernel_avx2();
  static const detail::MicroKernelInfo generic = detail::micro_kernel_generic();
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

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Packing buffers live per thread and only grow, so steady-state calls do not allocate.
struct PackBuffers {
  std::vector<float> a;
  std::vector<float> b;
};
PackBuffers& pack_buffers() {
  thread_local PackBuffers buffers;
  return buffers;
}

struct TileJob {
  const AddmmArgs* args;
  GemmShape shape;
  detail::BiasView bias;
  detail::MicroKernelInfo micro;
  std::int64_t tile_m, tile_n, tile_k, tiles_n;
};

// Sets out[i0:i1, j0:j1] to beta * bias, or to zero without a bias term.
void init_output(const AddmmArgs& args, const detail::BiasView& bias, std::int64_t i0,
                 std::int64_t i1, std::int64_t j0, std::int64_t j1) {
  float* out = args.out.data_as<float>();
  const std::int64_t ldc = args.out.stride(0);
  for (std::int64_t i = i0; i < i1; ++i) {
    float* row = out + i * ldc;
    if (bias.data == nullptr) {
      std::fill(row + j0, row + j1, 0.0F);
    } else {
      const float* brow = bias.data + i * bias.row_stride;
      for (std::int64_t j = j0; j < j1; ++j) row[j] = args.beta * brow[j * bias.col_stride];
    }
  }
}

void pack_a(const TensorView& a, std::int64_t row0, std::int64_t rows, std::int64_t k0,
            std::int64_t kb, float* dst) {
  const float* src = a.data_as<const float>();
  const std::int64_t s0 = a.stride(0);
  const std::int64_t s1 = a.stride(1);
  constexpr std::int64_t mr = detail::kMicroRows;
  for (std::int64_t s = 0; s < ceil_div(rows, mr); ++s) {
    float* out = dst + s * mr * kb;
    const std::int64_t live = std::min(mr, rows - s * mr);
    const float* in[mr];
    for (std::int64_t r = 0; r < mr; ++r) {
      in[r] = src + (row0 + s * mr + std::min(r, live - 1)) * s0 + k0 * s1;
    }
    // k outer, rows inner: the stores are contiguous (the micro-kernel's order) and the six
    // row streams are read sequentially. Rows past the edge read a valid row, then are zeroed.
    for (std::int64_t k = 0; k < kb; ++k) {
      for (std::int64_t r = 0; r < mr; ++r) out[k * mr + r] = in[r][k * s1];
    }
    if (live < mr) {
      for (std::int64_t k = 0; k < kb; ++k) {
        for (std::int64_t r = live; r < mr; ++r) out[k * mr + r] = 0.0F;
      }
    }
  }
}

void pack_b(const TensorView& b, std::int64_t k0, std::int64_t kb, std::int64_t col0,
            std::int64_t cols, std::int64_t nr, float* dst) {
  const float* src = b.data_as<const float>();
  const std::int64_t s0 = b.stride(0);
  const std::int64_t s1 = b.stride(1);
  for (std::int64_t s = 0; s < ceil_div(cols, nr); ++s) {
    float* out = dst + s * nr * kb;
    const std::int64_t width = std::min(nr, cols - s * nr);
    for (std::int64_t k = 0; k < kb; ++k) {
      const float* in = src + (k0 + k) * s0 + (col0 + s * nr) * s1;
      float* o = out + k * nr;
      if (s1 == 1) {
        std::copy(in, in + width, o);
      } else {
        for (std::int64_t j = 0; j < width; ++j) o[j] = in[j * s1];
      }
      std::fill(o + width, o + nr, 0.0F);
    }
  }
}

void run_tile(const TileJob& job, std::int64_t tile) {
  const AddmmArgs& args = *job.args;
  const std::int64_t i0 = (tile / job.tiles_n) * job.tile_m;
  const std::int64_t j0 = (tile % job.tiles_n) * job.tile_n;
  const std::int64_t mb = std::min(job.tile_m, job.shape.m - i0);
  const std::int64_t nb = std::min(job.tile_n, job.shape.n - j0);
  float* out = args.out.data_as<float>();
  const std::int64_t ldc = args.out.stride(0);

  // Output starts as beta * bias (or zero); the K blocks accumulate onto it.
  init_output(args, job.bias, i0, i0 + mb, j0, j0 + nb);

  const std::int64_t mr = detail::kMicroRows;
  const std::int64_t nr = job.micro.cols;
  PackBuffers& buf = pack_buffers();
  const auto a_need = static_cast<std::size_t>(ceil_div(mb, mr) * mr * job.tile_k);
  const auto b_need = static_cast<std::size_t>(ceil_div(nb, nr) * nr * job.tile_k);
  if (buf.a.size() < a_need) buf.a.resize(a_need);
  if (buf.b.size() < b_need) buf.b.resize(b_need);

  alignas(64) float edge[detail::kMicroRows * detail::kMaxMicroCols];
  for (std::int64_t k0 = 0; k0 < job.shape.k; k0 += job.tile_k) {
    const std::int64_t kb = std::min(job.tile_k, job.shape.k - k0);
    pack_a(args.mat1, i0, mb, k0, kb, buf.a.data());
    pack_b(args.mat2, k0, kb, j0, nb, nr, buf.b.data());
    for (std::int64_t js = 0; js < ceil_div(nb, nr); ++js) {
      const std::int64_t cols = std::min(nr, nb - js * nr);
      const float* bp = buf.b.data() + js * nr * kb;
      for (std::int64_t is = 0; is < ceil_div(mb, mr); ++is) {
        const std::int64_t rows = std::min(mr, mb - is * mr);
        const float* ap = buf.a.data() + is * mr * kb;
        float* c = out + (i0 + is * mr) * ldc + j0 + js * nr;
        if (rows == mr && cols == nr) {
          job.micro.fn(kb, ap, bp, c, ldc, args.alpha);
        } else {
          std::fill(edge, edge + mr * nr, 0.0F);
          job.micro.fn(kb, ap, bp, edge, nr, args.alpha);
          for (std::int64_t r = 0; r < rows; ++r) {
            for (std::int64_t j = 0; j < cols; ++j) c[r * ldc + j] += edge[r * nr + j];
          }
        }
      }
    }
  }
}

std::vector<std::int64_t> thread_candidates() {
  const auto hw = static_cast<std::int64_t>(std::max(1U, std::thread::hardware_concurrency()));
  std::vector<std::int64_t> out;
  for (std::int64_t t = 1; t < hw; t *= 2) out.push_back(t);
  out.push_back(hw);
  return out;
}

std::int64_t pick_candidate(const std::vector<std::int64_t>& candidates, std::int64_t want) {
  // Smallest candidate >= want, else the largest.
  for (const auto c : candidates) {
    if (c >= want) return c;
  }
  return candidates.back();
}

// The CPU "launch" of a GEMM: block = one tile_n x tile_m output tile, grid = the tiles.
void gemm_grid(const GemmShape& s, std::int64_t tm, std::int64_t tn, Dim3& grid, Dim3& block) {
  block = {tn, tm, 1};
  grid = {std::max<std::int64_t>(1, ceil_div(s.n, tn)), std::max<std::int64_t>(1, ceil_div(s.m, tm)), 1};
}

LaunchConfig complete_gemm_config(const ShapeKey& shape, const LaunchConfig& point) {
  LaunchConfig c = point;
  gemm_grid(gemm_shape(shape), point.get_or("tile_m", 1), point.get_or("tile_n", 1), c.grid, c.block);
  return c;
}

bool uses_avx512() { return std::string_view(active_micro_kernel().isa) == "avx512"; }

// Whether `config` can run a GEMM of shape `s`. Allocates nothing unless it refuses (it runs
// on every call of gemm_f32_cpu).
Status check_gemm_point(const GemmShape& s, bool mat2_row_major, const LaunchConfig& config) {
  const KernelDescriptor& d = gemm_f32_cpu_descriptor();
  if (Status st = d.space.check(config); !st) return st;
  if (config.get_or("skinny", 0) == 1) {
    if (!uses_avx512()) {
      return Status::unsupported("skinny=1 needs the AVX-512 path; this process uses " +
                                 gemm_cpu_isa());
    }
    if (!mat2_row_major) {
      return Status::unsupported("skinny=1 needs mat2 with unit column stride (row-major)");
    }
  }
  Dim3 grid;
  Dim3 block;
  gemm_grid(s, config.get_or("tile_m", 1), config.get_or("tile_n", 1), grid, block);
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

Status check_gemm_config(const ShapeKey& shape, const LaunchConfig& config) {
  return check_gemm_point(gemm_shape(shape), shape.args().back().contiguous, config);
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

KernelDescriptor make_cpu_descriptor() {
  KernelDescriptor d;
  d.name = "gemm_f32_blocked";
  // 2: adds the skinny-M path (tunable `skinny`).
  d.version = 2;
  d.ops = {"aten::mm", "aten::addmm"};
  d.dtypes = {DType::kFloat32};
  d.device = DeviceType::kCPU;
  const auto threads = thread_candidates();
  d.space = TunableSpace(
      {
          {"tile_m", {6, 12, 24, 48, 96, 192, 384}, "rows of the output tile one task computes"},
          {"tile_n", {32, 64, 128, 256, 512}, "columns of the output tile one task computes"},
          {"tile_k", {64, 128, 256, 512}, "depth of the packed A/B panels (K block)"},
          {"threads", threads, "worker threads running the tiles"},
          {"skinny", {0, 1},
           "1: stream B unpacked, tile_n columns per task (decode shapes; AVX-512, row-major B)"},
      },
      {
          {"tile_m % 6 == 0 (micro-tile rows)",
           [](const LaunchConfig& c) { return c.get_or("tile_m", 0) > 0 && c.get_or("tile_m", 0) % 6 == 0; }},
          {"tile_n % 32 == 0 (widest micro-tile)",
           [](const LaunchConfig& c) { return c.get_or("tile_n", 0) > 0 && c.get_or("tile_n", 0) % 32 == 0; }},
          {"tile_k >= 1", [](const LaunchConfig& c) { return c.get_or("tile_k", 0) >= 1; }},
          {"threads >= 1", [](const LaunchConfig& c) { return c.get_or("threads", 0) >= 1; }},
          {"skinny is 0 or 1",
           [](const LaunchConfig& c) { return c.get_or("skinny", -1) == 0 || c.get_or("skinny", -1) == 1; }},
          {"(tile_m + tile_n) * tile_k * 4 <= L2 bytes per core (packed panels stay in L2)",
           [l2 = l2_budget_bytes()](const LaunchConfig& c) {
             return (c.get_or("tile_m", 0) + c.get_or("tile_n", 0)) * c.get_or("tile_k", 0) * 4 <=
                    l2;
           }},
      });
  d.complete = complete_gemm_config;
  d.can_run = [](const ShapeKey& shape, const LaunchConfig& config) -> Status {
    for (const auto& t : shape.args()) {
      if (t.dtype != DType::kFloat32) return Status::unsupported("only float32 is supported");
    }
    return check_gemm_config(shape, config);
  };
  d.default_config = [threads](const ShapeKey& shape) {
    // Heuristic: split M evenly into tiles of at most 384 rows (the A block, 384 x 256 floats,
    // stays in a 1 MiB L2, and taller tiles re-pack B less often per FLOP: 384 rows measured
    // 79% of peak at 1024^3 against 61% for 96), N into tiles of at most 256 columns, K in
    // blocks of 256; then split tiles until every thread has one.
    const GemmShape s = gemm_shape(shape);
    const std::int64_t hw = threads.back();
    const auto round_up = [](std::int64_t v, std::int64_t q) { return ceil_div(v, q) * q; };
    const std::int64_t m = std::max<std::int64_t>(s.m, 1);
    std::int64_t tm = round_up(ceil_div(m, ceil_div(m, 384)), 6);
    std::int64_t tn = pick_candidate({32, 64, 128, 256}, s.n);
    // Below ~4 MFLOP (tens of microseconds) waking a second thread costs more than it saves.
    const double flop = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) *
                        static_cast<double>(s.k);
    const bool tiny = flop < 4.0e6;
    while (!tiny && ceil_div(s.m, tm) * ceil_div(s.n, tn) < hw) {
      if (tn >= 64 && (tn >= tm || tm <= 6)) {
        tn /= 2;
      } else if (tm >= 12) {
        tm = round_up(tm / 2, 6);
      } else {
        break;
      }
    }
    const std::int64_t tiles = ceil_div(s.m, tm) * ceil_div(s.n, tn);
    LaunchConfig point;
    point.set("tile_m", tm).set("tile_n", tn).set("tile_k", 256).set("skinny", 0);
    point.set("threads", tiny ? 1 : std::min<std::int64_t>(hw, std::max<std::int64_t>(1, tiles)));
    // Decode shapes (M <= 16) with row-major B: packing B costs as much as the arithmetic,
    // so stream it unpacked, 256 columns per task. See gemm_skinny_avx512.cpp.
    if (s.m <= 16 && !tiny && uses_avx512() && shape.args().back().contiguous) {
      point.set("skinny", 1).set("tile_m", round_up(std::max<std::int64_t>(s.m, 1), 6));
      point.set("tile_n", 256);
      point.set("threads", std::min<std::int64_t>(hw, ceil_div(s.n, 256)));
    }
    return complete_gemm_config(shape, point);
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

}  // namespace

std::string gemm_cpu_isa() { return active_micro_kernel().isa; }

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

Status gemm_f32_cpu(const AddmmArgs& args, const LaunchConfig& config) {
  const GemmShape s = detail::validate_addmm(args, DeviceType::kCPU);
  const bool mat2_row_major = args.mat2.stride(1) == 1 || s.n <= 1;
  if (Status st = check_gemm_point(s, mat2_row_major, config); !st) return st;
  if (s.m == 0 || s.n == 0) return Status::ok();

  const detail::BiasView bias = detail::broadcast_bias(args, s.m, s.n);
  const auto threads = static_cast<int>(config.get_or("threads", 1));
  if (config.get_or("skinny", 0) == 1) {
    // One pointer captured: the std::function stays in its inline buffer (no allocation).
    struct SkinnyJob {
      const AddmmArgs* args;
      detail::BiasView bias;
      GemmShape shape;
      detail::SkinnyArgs operands;
      std::int64_t cols;
    } const sj{&args, bias, s,
               detail::SkinnyArgs{args.mat1.data_as<const float>(), args.mat1.stride(0),
                                  args.mat1.stride(1), args.mat2.data_as<const float>(),
                                  args.mat2.stride(0), args.out.data_as<float>(),
                                  args.out.stride(0), s.m, s.k, config.get_or("tile_k", 256),
                                  args.alpha},
               config.get_or("tile_n", 256)};
    ThreadPool::global().parallel_for(ceil_div(s.n, sj.cols), threads, [p = &sj](std::int64_t t) {
      const std::int64_t j0 = t * p->cols;
      const std::int64_t j1 = std::min(p->shape.n, j0 + p->cols);
      init_output(*p->args, p->bias, 0, p->shape.m, j0, j1);
      if (p->shape.k > 0) detail::skinny_columns_avx512(p->operands, j0, j1);
    });
    return Status::ok();
  }

  TileJob job{};
  job.args = &args;
  job.shape = s;
  job.bias = bias;
  job.micro = active_micro_kernel();
  job.tile_m = config.get_or("tile_m", 96);
  job.tile_n = config.get_or("tile_n", 256);
  job.tile_k = config.get_or("tile_k", 256);
  job.tiles_n = ceil_div(s.n, job.tile_n);
  const std::int64_t tiles = ceil_div(s.m, job.tile_m) * job.tiles_n;
  ThreadPool::global().parallel_for(tiles, threads,
                                    [&job](std::int64_t tile) { run_tile(job, tile); });
  return Status::ok();
}

}  // namespace ka::kernels
