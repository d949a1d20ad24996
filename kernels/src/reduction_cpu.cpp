// CPU softmax (online max/sum), layer_norm (two-pass mean/variance per row) and sum over dims;
// rows contiguous in out take the AVX-512 row kernels where active (Note [AVX-512 row kernels]).
// See Note [CPU row kernels].
#include <algorithm>
#include <cmath>
#include <ka/core/ceil_div.hpp>
#include <ka/core/error.hpp>
#include <ka/kernels/reduction.hpp>
#include <thread>
#include <vector>

#include "ew_math.hpp"
#include "descriptor_common.hpp"

#include <ka/kernels/cpu_launch.hpp>

namespace ka::kernels {

// Note [CPU row kernels]
// softmax and layer_norm work on rows: the dims a row spans (softmax: `dim`; layer_norm: the
// last normalized_dims) form the row space, the others the outer space; each is collapsed
// over every tensor involved (out, the prologue inputs, weight, bias) like the element-wise
// kernel's dims. A grid block is rows_per_block consecutive rows. A row is walked in chunks of
// kEwChunk: the prologue is evaluated on the chunk (inputs read in place when the row is
// contiguous in them, gathered otherwise) and x is stored into out, so later passes re-read x
// from out (hot in cache) instead of re-running the prologue.
//   softmax: pass 1 keeps a running max m and sum s of e^(x−m), rescaling s when m grows
//            (once per chunk); pass 2 writes e^(x−m)/s.
//   layer_norm: pass 1 sums x, pass 2 sums (x−mean)², pass 3 writes the normalized value;
//            chunk sums are float (16 lanes), row sums double, so the result matches ATen's to
//            ~1e-6 even for long rows. (The descriptor keeps the name layer_norm_welford_f32.)
// sum treats the reduced dims as the row space and the kept dims as the outer space: each
// output is a chunked lane sum of its row, or, when the input's unit-stride dim is kept, a
// block of outputs accumulates whole input rows at once (column sums, vectorized across
// outputs), in double.

namespace {

using detail::kEwChunk;
constexpr int kMaxRowTensors = 1 + EwProgram::kMaxInputs + 2;  // out, inputs, weight, bias
constexpr int kMaxDims = TensorView::kMaxDims;

// A collapsed iteration space over several tensors.
struct Space {
  int nd = 0;
  std::int64_t sizes[kMaxDims];
  std::int64_t strides[kMaxRowTensors][kMaxDims];

  [[nodiscard]] std::int64_t volume() const {
    std::int64_t n = 1;
    for (int d = 0; d < nd; ++d) n *= sizes[d];
    return n;
  }
};

void append_dim(Space& s, int tensors, std::int64_t size, const std::int64_t* strides) {
  if (s.nd > 0) {
    bool merge = true;
    for (int t = 0; t < tensors && merge; ++t) {
      merge = s.strides[t][s.nd - 1] == strides[t] * size;
    }
    if (merge) {
      s.sizes[s.nd - 1] *= size;
      for (int t = 0; t < tensors; ++t) s.strides[t][s.nd - 1] = strides[t];
      return;
    }
  }
  s.sizes[s.nd] = size;
  for (int t = 0; t < tensors; ++t) s.strides[t][s.nd] = strides[t];
  ++s.nd;
}

// Splits the dims of `sizes` into the row space (bits of row_mask) and the outer space. A
// tensor with fewer dims is aligned to the trailing dims (stride 0 on the missing ones).
void split_spaces(const TensorView* const* t, int tensors, const TensorView& shape,
                  std::uint64_t row_mask, Space& row, Space& outer) {
  row.nd = 0;
  outer.nd = 0;
  for (int d = 0; d < shape.ndim; ++d) {
    const std::int64_t size = shape.size(d);
    if (size == 1) continue;
    std::int64_t strides[kMaxRowTensors];
    for (int i = 0; i < tensors; ++i) {
      const int lead = shape.ndim - t[i]->ndim;
      strides[i] = d < lead ? 0 : t[i]->stride(d - lead);
    }
    append_dim(((row_mask >> d) & 1U) != 0 ? row : outer, tensors, size, strides);
  }
  if (row.nd == 0) {
    row.nd = 1;
    row.sizes[0] = 1;
    for (int i = 0; i < tensors; ++i) row.strides[i][0] = 0;
  }
}

// Element offsets of linear index `index` of `s` for the first `tensors` tensors.
void offsets_of(const Space& s, int tensors, std::int64_t index, std::int64_t* off) {
  for (int i = 0; i < tensors; ++i) off[i] = 0;
  for (int d = s.nd - 1; d >= 0; --d) {
    const std::int64_t c = index % s.sizes[d];
    index /= s.sizes[d];
    for (int i = 0; i < tensors; ++i) off[i] += c * s.strides[i][d];
  }
}

// Calls f(pos, offset, seg, stride) for the runs of row elements [e, e + len) of tensor t:
// pos is the position in the chunk, offset the element offset from the row base.
template <class F>
void walk_row(const Space& row, int t, std::int64_t e, std::int64_t len, F&& f) {
  const int inner = row.nd - 1;
  if (inner == 0) {
    f(std::int64_t{0}, e * row.strides[t][0], len, row.strides[t][0]);
    return;
  }
  std::int64_t idx[kMaxDims];
  std::int64_t rest = e;
  for (int d = inner; d >= 0; --d) {
    idx[d] = rest % row.sizes[d];
    rest /= row.sizes[d];
  }
  std::int64_t pos = 0;
  while (pos < len) {
    std::int64_t off = 0;
    for (int d = 0; d <= inner; ++d) off += idx[d] * row.strides[t][d];
    const std::int64_t seg = std::min(len - pos, row.sizes[inner] - idx[inner]);
    f(pos, off, seg, row.strides[t][inner]);
    pos += seg;
    idx[inner] += seg;
    for (int d = inner; d > 0 && idx[d] == row.sizes[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

bool row_contiguous(const Space& row, int t) { return row.nd == 1 && row.strides[t][0] == 1; }

// Row elements [e, e + len) of tensor t (row base `base`): in place when contiguous, else
// gathered into buf.
const float* row_read(const Space& row, int t, const float* base, std::int64_t e, std::int64_t len,
                      float* buf) {
  if (row_contiguous(row, t)) return base + e;
  walk_row(row, t, e, len,
           [&](std::int64_t pos, std::int64_t off, std::int64_t seg, std::int64_t stride) {
             const float* p = base + off;
             for (std::int64_t i = 0; i < seg; ++i) buf[pos + i] = p[i * stride];
           });
  return buf;
}

void row_write(const Space& row, int t, float* base, std::int64_t e, std::int64_t len,
               const float* src) {
  if (row_contiguous(row, t)) {
    if (base + e != src) std::copy(src, src + len, base + e);
    return;
  }
  walk_row(row, t, e, len,
           [&](std::int64_t pos, std::int64_t off, std::int64_t seg, std::int64_t stride) {
             float* p = base + off;
             for (std::int64_t i = 0; i < seg; ++i) p[i * stride] = src[pos + i];
           });
}

// The tensors of a row kernel: out, the prologue inputs, then optional extras.
struct RowTensors {
  const TensorView* t[kMaxRowTensors];
  int count = 0;
};

RowTensors row_tensors(const TensorView& out,
                       const std::array<TensorView, EwProgram::kMaxInputs>& inputs, int n) {
  RowTensors r;
  r.t[r.count++] = &out;
  for (int i = 0; i < n; ++i) r.t[r.count++] = &inputs[static_cast<std::size_t>(i)];
  return r;
}

// Scratch of one row walk: prologue registers and gathered inputs.
struct RowScratch {
  alignas(64) float regs[EwProgram::kMaxRegs][kEwChunk];
  alignas(64) float in[EwProgram::kMaxInputs][kEwChunk];
  alignas(64) float a[kEwChunk];
  alignas(64) float b[kEwChunk];
  alignas(64) float c[kEwChunk];
};

// x = prologue over row elements [e, e + len); stores x into out (unless out_base is null)
// and returns it.
const float* prologue_chunk(const EwProgram& p, const Space& row, const float* const* bases,
                            float* out_base, std::int64_t e, std::int64_t len, RowScratch& s) {
  const float* in[EwProgram::kMaxInputs];
  for (int i = 0; i < p.inputs; ++i) in[i] = row_read(row, i + 1, bases[i + 1], e, len, s.in[i]);
  const float* x = detail::eval_program_chunk(p, in, len, s.regs);
  if (out_base != nullptr) row_write(row, 0, out_base, e, len, x);
  return x;
}

// The tensor index (1 + input) whose row is the prologue's result, read in place; -1 when the
// result is computed or the input's row is not contiguous.
int result_input(const EwProgram& p, const Space& row) {
  for (int i = 0; i < p.size; ++i) {
    const EwInstr& c = p.code[static_cast<std::size_t>(i)];
    if (c.dst != p.result) continue;
    if (c.op == EwOp::kInput && row_contiguous(row, c.a + 1)) return c.a + 1;
    return -1;
  }
  return -1;
}

// Row bases of every tensor for row r.
void row_bases(const RowTensors& rt, const Space& outer, std::int64_t r, const float** bases) {
  std::int64_t off[kMaxRowTensors];
  offsets_of(outer, rt.count, r, off);
  for (int i = 0; i < rt.count; ++i) bases[i] = rt.t[i]->data_as<const float>() + off[i];
}

// ---- softmax ---------------------------------------------------------------------------

struct SoftmaxJob {
  const SoftmaxArgs* args;
  std::int64_t rows;
  std::int64_t rows_per_block;
  bool stream;  // Note [Streaming stores]
  detail::RowPrefetch prefetch;  // Note [Row prefetch]
};

// Whether the rows are strided but neighbouring rows are adjacent in memory (softmax over a
// dim other than the last): then a tile of rows is processed side by side, vectorized across
// the rows. See Note [Softmax column tiles].
bool column_layout(const RowTensors& rt, const Space& row, const Space& outer) {
  if (row.nd != 1 || row.strides[0][0] == 1 || outer.nd == 0) return false;
  const int oi = outer.nd - 1;
  if (outer.strides[0][oi] != 1) return false;
  for (int t = 1; t < rt.count; ++t) {
    if (outer.strides[t][oi] != 1 && outer.strides[t][oi] != 0) return false;
  }
  return true;
}

// Note [Softmax column tiles]
// Softmax over a non-last dim walks rows at a stride, one cache line per element. Instead, w
// rows adjacent along the outer innermost dim (unit stride in out, unit or zero in the
// inputs) are processed together: for each k along the softmax dim their w elements are
// contiguous, so each pass is a vector op over w lanes. Passes: x = prologue into out and a
// running per-row max; out = e^(out − max) with per-row sums; out *= 1/sum. The tile
// (dim × w floats) stays in L2 for rows of up to ~64K elements at w = 16.
void softmax_columns(const SoftmaxArgs& a, const RowTensors& rt, const Space& row,
                     const Space& outer, std::int64_t r0, std::int64_t r1, RowScratch& s) {
  const EwProgram& p = a.prologue;
  const std::int64_t d = row.volume();
  const int oi = outer.nd - 1;
  const std::int64_t inner = outer.sizes[oi];
  alignas(64) float m[kEwChunk];
  alignas(64) float sum[kEwChunk];
  for (std::int64_t r = r0; r < r1;) {
    const std::int64_t w = std::min({kEwChunk, r1 - r, inner - r % inner});
    const float* bases[kMaxRowTensors];
    row_bases(rt, outer, r, bases);
    float* out = const_cast<float*>(bases[0]);
    const std::int64_t so = row.strides[0][0];
    std::fill(m, m + w, -HUGE_VALF);
    std::fill(sum, sum + w, 0.0F);
    for (std::int64_t k = 0; k < d; ++k) {
      const float* in[EwProgram::kMaxInputs];
      for (int i = 0; i < p.inputs; ++i) {
        const float* src = bases[i + 1] + k * row.strides[i + 1][0];
        if (outer.strides[i + 1][oi] == 1) {
          in[i] = src;
        } else {
          std::fill(s.in[i], s.in[i] + w, *src);
          in[i] = s.in[i];
        }
      }
      const float* x = detail::eval_program_chunk(p, in, w, s.regs);
      float* o = out + k * so;
      if (x != o) std::copy(x, x + w, o);
      detail::max_accumulate(m, o, w);
    }
    for (std::int64_t k = 0; k < d; ++k) detail::exp_sub_accumulate(out + k * so, m, sum, w);
    for (std::int64_t j = 0; j < w; ++j) sum[j] = 1.0F / sum[j];
    for (std::int64_t k = 0; k < d; ++k) detail::mul_inplace(out + k * so, sum, w);
    r += w;
  }
}

// Note [AVX-512 row kernels]
// Where the CPU kernels' AVX-512 paths are active and a row is contiguous in out, softmax and
// layer_norm run each row through one hand-vectorized function (ew_math_avx512.cpp): a
// computed prologue is first written into out (x is then out, read in place); the passes walk
// the whole row with four vector accumulators (sums in float over 2048-element blocks, in
// double across them), stream the output directly when asked, and prefetch the next row of
// the block while writing (softmax: during its exp pass). The chunked portable path pays a
// call per 256-element chunk and pass and waits on one accumulator chain; a row function makes
// one call per row and pass, and its four chains hide the adds' latency.

// Note [Row prefetch]
// Where the next row's x goes is the `prefetch` tunable: nowhere (the hardware prefetchers
// alone), L1 (prefetcht0) or L2 (prefetcht2). A row of 4096 floats is 16 KiB, and a 32 KiB L1
// does not hold layer_norm's x, out and the next row, or the streamed softmax's x, next row
// and two rows of exponentials (Note [Pipelined softmax]): prefetching into L1 evicts lines
// the row still reads, so those two prefetch into L2; without any prefetch layer_norm is
// slower than with either. An ordinary softmax (x and out only) gains nothing from L2 and
// keeps L1. The defaults follow; `ka_memory_bench --vs prefetch=N` compares them in pairs.

// Whether tensor t is one value along the row (a per-row scalar, as mean[:, None]).
bool row_broadcast(const Space& row, int t) {
  for (int d = 0; d < row.nd; ++d) {
    if (row.strides[t][d] != 0) return false;
  }
  return true;
}

// Whether a computed prologue runs over whole rows in vector groups (Note [Fused vector
// groups]): the program has vector forms and every input row is contiguous or one value. The
// same for every row of a launch: the row kernels ask once per block.
bool prologue_fuses(const EwProgram& p, const Space& row) {
  if (!detail::program_avx512_covers(p)) return false;
  for (int i = 0; i < p.inputs; ++i) {
    if (!row_broadcast(row, i + 1) && !row_contiguous(row, i + 1)) return false;
  }
  return true;
}

// x of row elements: the prologue's input row `src` when it is one read in place
// (result_input), else the prologue evaluated into out (contiguous): in one pass of vector
// groups where `fused` (prologue_fuses; no copy from a chunk buffer into out), else chunk by
// chunk.
const float* row_x(const EwProgram& p, int src, bool fused, const Space& row,
                   const float* const* bases, float* out, std::int64_t n, RowScratch& s) {
  if (src >= 0) return bases[src];
  if (fused) {
    detail::EwOperand in[EwProgram::kMaxInputs];
    for (int i = 0; i < p.inputs; ++i) in[i] = {bases[i + 1], row_broadcast(row, i + 1)};
    detail::program_run_avx512(p, in, out, n, false);
    return out;
  }
  for (std::int64_t e = 0; e < n; e += kEwChunk) {
    (void)prologue_chunk(p, row, bases, out, e, std::min(kEwChunk, n - e), s);
  }
  return out;
}

// The next row as the row kernels get it: its x only where the `prefetch` tunable asks for a
// prefetch (Note [Row prefetch]).
detail::NextRow next_row(const float* next, detail::RowPrefetch to) {
  return {to == detail::RowPrefetch::kNone ? nullptr : next, to};
}

// Calls f(r, bases of row r, next) for the rows [r0, r1) of a block, next being row r + 1's x
// when it is input `src` read in place and r + 1 is in this block (the next block may go to
// another thread), else null: what the row kernels prefetch. Each row's bases are computed once.
template <class F>
void for_rows_with_next(const RowTensors& rt, const Space& outer, int src, std::int64_t r0,
                        std::int64_t r1, F f) {
  if (r0 >= r1) return;
  const float* bases[kMaxRowTensors];
  const float* next[kMaxRowTensors];
  row_bases(rt, outer, r0, bases);
  for (std::int64_t r = r0; r < r1; ++r) {
    const bool has_next = r + 1 < r1;
    if (has_next) row_bases(rt, outer, r + 1, next);
    f(r, bases, has_next && src >= 0 ? next[src] : nullptr);
    if (has_next) std::copy(next, next + rt.count, bases);
  }
}

void softmax_rows_avx512(const SoftmaxJob& job, const RowTensors& rt, const Space& row,
                         const Space& outer, std::int64_t r0, std::int64_t r1, RowScratch& s) {
  const EwProgram& p = job.args->prologue;
  const std::int64_t n = row.volume();
  // Streamed rows' exponentials, two rows' worth (Note [Pipelined softmax]); it only grows.
  thread_local std::vector<float> buffer;
  if (job.stream && buffer.size() < 2 * static_cast<std::size_t>(n)) {
    buffer.resize(2 * static_cast<std::size_t>(n));
  }
  detail::SoftmaxPending pending;
  const int src = result_input(p, row);
  const bool fused = src < 0 && prologue_fuses(p, row);
  for_rows_with_next(rt, outer, src, r0, r1,
                     [&](std::int64_t r, const float* const* bases, const float* next) {
                       float* out = const_cast<float*>(bases[0]);
                       const float* x = row_x(p, src, fused, row, bases, out, n, s);
                       if (job.stream) {
                         detail::softmax_row_streamed_avx512(
                             x, out, n, buffer.data() + (r - r0) % 2 * n, pending,
                             next_row(next, job.prefetch));
                       } else {
                         detail::softmax_row_avx512(x, out, n, next_row(next, job.prefetch));
                       }
                     });
  if (job.stream) {
    detail::softmax_flush_avx512(pending, n);
    detail::stream_fence();
  }
}

// Rows [r0, r1) of any layout on any ISA: two passes over each row (Note in the loop).
void softmax_rows_generic(const SoftmaxJob& job, const RowTensors& rt, const Space& row,
                          const Space& outer, std::int64_t r0, std::int64_t r1, RowScratch& s) {
  const EwProgram& p = job.args->prologue;
  const std::int64_t len_row = row.volume();
  constexpr std::int64_t kMaxChunks = 1024;
  float chunk_max[kMaxChunks];
  // Streaming out: pass 1 keeps e^(x - m_c) in a per-thread row buffer (bounded by the
  // kMaxChunks rows that store them; it only grows) and pass 2 streams the scaled row out.
  const bool stream = job.stream && row_contiguous(row, 0) && len_row <= kMaxChunks * kEwChunk;
  thread_local std::vector<float> row_buffer;
  if (stream && row_buffer.size() < static_cast<std::size_t>(len_row)) {
    row_buffer.resize(static_cast<std::size_t>(len_row));
  }
  for (std::int64_t r = r0; r < r1; ++r) {
    const float* bases[kMaxRowTensors];
    row_bases(rt, outer, r, bases);
    float* out = const_cast<float*>(bases[0]);
    float m = -HUGE_VALF;
    double sum = 0.0;
    // Pass 1 stores e^(x − m_c) with m_c the running max at chunk c; pass 2 rescales each
    // chunk by e^(m_c − m)/sum: one exp per element. Rows of more than kMaxChunks chunks
    // store x instead and pay a second exp in pass 2.
    const bool store_exp = len_row <= kMaxChunks * kEwChunk;
    const bool out_contiguous = row_contiguous(row, 0);
    for (std::int64_t e = 0, c = 0; e < len_row; e += kEwChunk, ++c) {
      const std::int64_t len = std::min(kEwChunk, len_row - e);
      const float* x = prologue_chunk(p, row, bases, store_exp ? nullptr : out, e, len, s);
      const float nm = detail::max_f32(m, detail::lane_max(x, len));
      if (nm == -HUGE_VALF) {  // everything so far is -inf: contributes nothing
        if (store_exp) {
          float* z = stream ? row_buffer.data() + e : s.a;
          std::fill(z, z + len, 0.0F);
          if (!stream) row_write(row, 0, out, e, len, z);
          chunk_max[c] = nm;
        }
        continue;
      }
      const float scale = m == nm ? 1.0F : detail::exp_f32(m - nm);
      // e^(x − nm) straight into out when it is contiguous and not x itself (in place), or
      // into the row buffer when out is streamed.
      float* d = stream ? row_buffer.data() + e
                 : store_exp && out_contiguous && x != out + e ? out + e
                                                               : s.a;
      const float part = detail::exp_shifted_sum(x, nm, d, len);
      sum = sum * static_cast<double>(scale) + static_cast<double>(part);
      m = nm;
      if (store_exp) {
        if (d != out + e && !stream) row_write(row, 0, out, e, len, d);
        chunk_max[c] = nm;
      }
    }
    const auto inv = static_cast<float>(1.0 / sum);
    for (std::int64_t e = 0, c = 0; e < len_row; e += kEwChunk, ++c) {
      const std::int64_t len = std::min(kEwChunk, len_row - e);
      if (stream) {
        const float f = detail::exp_f32(chunk_max[c] - m) * inv;
        detail::scale_run(row_buffer.data() + e, f, s.b, len);
        detail::stream_store(out + e, s.b, len);
        continue;
      }
      if (store_exp && out_contiguous) {
        detail::scale_inplace(out + e, detail::exp_f32(chunk_max[c] - m) * inv, len);
        continue;
      }
      const float* x = row_read(row, 0, out, e, len, s.a);
      if (store_exp) {
        detail::scale_run(x, detail::exp_f32(chunk_max[c] - m) * inv, s.b, len);
      } else {
        detail::exp_shifted_run(x, m, inv, s.b, len);
      }
      row_write(row, 0, out, e, len, s.b);
    }
  }
  if (stream) detail::stream_fence();
}

void softmax_block(const SoftmaxJob& job, std::int64_t block) {
  const SoftmaxArgs& a = *job.args;
  const RowTensors rt = row_tensors(a.out, a.inputs, a.prologue.inputs);
  Space row;
  Space outer;
  split_spaces(rt.t, rt.count, a.out, std::uint64_t{1} << a.dim, row, outer);
  RowScratch s;
  if (column_layout(rt, row, outer)) {
    softmax_columns(a, rt, row, outer, block * job.rows_per_block,
                    std::min(job.rows, (block + 1) * job.rows_per_block), s);
    return;
  }
  const std::int64_t r1 = std::min(job.rows, (block + 1) * job.rows_per_block);
  if (detail::avx512_active() && row_contiguous(row, 0)) {
    softmax_rows_avx512(job, rt, row, outer, block * job.rows_per_block, r1, s);
    return;
  }
  softmax_rows_generic(job, rt, row, outer, block * job.rows_per_block, r1, s);
}

// ---- layer_norm ------------------------------------------------------------------------

struct LayerNormJob {
  const LayerNormArgs* args;
  std::int64_t rows;
  std::int64_t rows_per_block;
  bool stream;  // Note [Streaming stores]
  detail::RowPrefetch prefetch;  // Note [Row prefetch]
};

void layer_norm_block(const LayerNormJob& job, std::int64_t block) {
  const LayerNormArgs& a = *job.args;
  const EwProgram& p = a.prologue;
  RowTensors rt = row_tensors(a.out, a.inputs, p.inputs);
  const int w_index = a.weight.data != nullptr ? rt.count : -1;
  if (w_index >= 0) rt.t[rt.count++] = &a.weight;
  const int b_index = a.bias.data != nullptr ? rt.count : -1;
  if (b_index >= 0) rt.t[rt.count++] = &a.bias;
  const int nd = a.out.ndim;
  const std::uint64_t row_mask =
      ((std::uint64_t{1} << nd) - 1) & ~((std::uint64_t{1} << (nd - a.normalized_dims)) - 1);
  Space row;
  Space outer;
  split_spaces(rt.t, rt.count, a.out, row_mask, row, outer);
  const std::int64_t n = row.volume();
  const int direct_input = result_input(p, row);
  RowScratch s;
  const std::int64_t r1 = std::min(job.rows, (block + 1) * job.rows_per_block);
  // Note [AVX-512 row kernels]
  if (detail::avx512_active() && row_contiguous(row, 0) &&
      (w_index < 0 || row_contiguous(row, w_index)) &&
      (b_index < 0 || row_contiguous(row, b_index))) {
    const bool fused = direct_input < 0 && prologue_fuses(p, row);
    for_rows_with_next(rt, outer, direct_input, block * job.rows_per_block, r1,
                       [&](std::int64_t, const float* const* bases, const float* next) {
                         float* out = const_cast<float*>(bases[0]);
                         detail::layer_norm_row_avx512(
                             row_x(p, direct_input, fused, row, bases, out, n, s),
                             w_index >= 0 ? bases[w_index] : nullptr,
                             b_index >= 0 ? bases[b_index] : nullptr, out, n, a.eps,
                             job.stream, next_row(next, job.prefetch));
                       });
    if (job.stream) detail::stream_fence();
    return;
  }
  for (std::int64_t r = block * job.rows_per_block; r < r1; ++r) {
    const float* bases[kMaxRowTensors];
    row_bases(rt, outer, r, bases);
    float* out = const_cast<float*>(bases[0]);
    // When x is an input read in place (an unfused layer_norm), later passes re-read the input
    // instead of storing x into out first.
    const int src = direct_input;
    const float* x_base = src >= 0 ? bases[src] : out;
    double total = 0.0;
    for (std::int64_t e = 0; e < n; e += kEwChunk) {
      const std::int64_t len = std::min(kEwChunk, n - e);
      const float* x = src >= 0 ? x_base + e : prologue_chunk(p, row, bases, out, e, len, s);
      total += static_cast<double>(detail::lane_sum(x, len));
    }
    const double mean_d = total / static_cast<double>(n);
    const auto mean = static_cast<float>(mean_d);
    double sq = 0.0;
    const int x_index = src >= 0 ? src : 0;
    for (std::int64_t e = 0; e < n; e += kEwChunk) {
      const std::int64_t len = std::min(kEwChunk, n - e);
      const float* x = row_read(row, x_index, x_base, e, len, s.a);
      sq += static_cast<double>(detail::lane_sum_sq_dev(x, mean, len));
    }
    const auto rstd = static_cast<float>(
        1.0 / std::sqrt(sq / static_cast<double>(n) + static_cast<double>(a.eps)));
    const bool out_contiguous = row_contiguous(row, 0);
    for (std::int64_t e = 0; e < n; e += kEwChunk) {
      const std::int64_t len = std::min(kEwChunk, n - e);
      const float* x = row_read(row, x_index, x_base, e, len, s.a);
      const float* w = w_index >= 0 ? row_read(row, w_index, bases[w_index], e, len, s.c) : nullptr;
      const float* b = b_index >= 0 ? row_read(row, b_index, bases[b_index], e, len, s.b) : nullptr;
      // Straight into out unless x is out itself (the loop would lose vectorization to the
      // aliasing check) or out is written with streaming stores.
      const bool stream = job.stream && out_contiguous && x != out + e;
      float* d = out_contiguous && x != out + e && !stream ? out + e : s.regs[0];
      detail::normalize_run(x, mean, rstd, w, b, d, len);
      if (stream) {
        detail::stream_store(out + e, d, len);
      } else if (d != out + e) {
        row_write(row, 0, out, e, len, d);
      }
    }
  }
  if (job.stream) detail::stream_fence();
}

// ---- sum ---------------------------------------------------------------------------------

// Note [Row sums]
// A core reading two to four sequential streams side by side keeps more lines in flight than
// one reading a single stream: the hardware prefetchers follow each stream. Row sums therefore
// read four rows at once, the first rows of the block's four quarters, then their next rows,
// so that where rows are adjacent in memory each stream runs on through a quarter (four
// neighbouring rows at a time would restart every stream at every row); column sums add four
// input rows per pass over their strip. No software prefetch: on top of the hardware's it
// slows the streams down.

// Note [Column sums]
// A sum whose kept dims include the input's unit-stride dim (x.sum(0) of a row-major matrix)
// accumulates whole input rows into a strip of outputs at once, rows in order, so each input
// row is read as one run of the strip's width. A narrow strip makes every row of every strip
// a new page and a short run for the prefetchers (rows are 16 KiB apart at 4096 x 4096), and
// the wider the strip the longer the runs: strips are as wide as kColumnStrip while every
// thread still gets a block, and at least kMinColumnStrip (a 4 KiB page of each row) whatever
// rows_per_block asks.
constexpr std::int64_t kColumnStrip = 4096;
constexpr std::int64_t kMinColumnStrip = 1024;

struct SumJob {
  const SumArgs* args;
  std::int64_t outputs;
  std::int64_t per_block;
  bool columns;  // the input's unit-stride dim is kept: accumulate whole input rows
  std::int64_t splits;  // > 1: each output's row split over this many blocks (Note [Split sums])
};

// Note [Split sums]
// Outputs are the grid's natural unit, so a sum with fewer outputs than threads (x.sum(): one)
// would leave threads idle while one reads the whole input. When there are fewer outputs than
// threads and rows of at least 2 * kMinSplitElems, each output's row is split into `splits`
// contiguous parts, one block each: a block writes its part's sum into the launch's scratch,
// and the launch's finish phase (CpuLaunch::bind_split) adds each output's parts in order, in
// double, so the result does not depend on which thread ran what.
constexpr std::int64_t kMinSplitElems = 65536;

// Sum of the row elements [e0, e1) of tensor 1 (row base `base`), in double.
double row_part_sum(const Space& row, const float* base, std::int64_t e0, std::int64_t e1) {
  if (detail::avx512_active() && row_contiguous(row, 1)) {
    return detail::run_sum_avx512(base + e0, e1 - e0);
  }
  alignas(64) float buf[kEwChunk];
  double total = 0.0;
  for (std::int64_t e = e0; e < e1; e += kEwChunk) {
    const std::int64_t len = std::min(kEwChunk, e1 - e);
    total += static_cast<double>(detail::lane_sum(row_read(row, 1, base, e, len, buf), len));
  }
  return total;
}

// out viewed with in's sizes: stride 0 on the reduced dims.
TensorView out_as_input_shape(const SumArgs& a) {
  TensorView o = a.out;
  for (int d = 0; d < a.in.ndim; ++d) {
    const auto ud = static_cast<std::size_t>(d);
    o.sizes[ud] = a.in.size(d);
    if (((a.reduce_mask >> d) & 1U) != 0) o.strides[ud] = 0;
  }
  return o;
}

// The row (reduced) and outer (kept) spaces of a sum over out and in.
void sum_spaces(const SumArgs& a, Space& row, Space& outer) {
  const TensorView o = out_as_input_shape(a);
  const TensorView* t[2] = {&o, &a.in};
  split_spaces(t, 2, a.in, a.reduce_mask, row, outer);
}

void sum_block(const SumJob& job, std::int64_t block) {
  const SumArgs& a = *job.args;
  Space row;
  Space outer;
  sum_spaces(a, row, outer);
  const std::int64_t n = row.volume();
  const float* in = a.in.data_as<const float>();
  float* out = a.out.data_as<float>();
  const std::int64_t o0 = block * job.per_block;
  const std::int64_t o1 = std::min(job.outputs, o0 + job.per_block);
  if (!job.columns) {
    const bool whole_rows = detail::avx512_active() && row_contiguous(row, 1);
    if (whole_rows && o1 - o0 > 1) {  // four quarters of the block side by side (Note [Row sums])
      const std::int64_t q = ceil_div(o1 - o0, 4);
      for (std::int64_t j = 0; j < q; ++j) {
        int count = 0;
        const float* x[4];
        float* dst[4];
        for (std::int64_t k = o0 + j; k < o1 && count < 4; k += q, ++count) {
          std::int64_t off[2];
          offsets_of(outer, 2, k, off);
          x[count] = in + off[1];
          dst[count] = out + off[0];
        }
        double sums[4];
        detail::rows_sum_avx512(x, count, n, sums);
        for (int r = 0; r < count; ++r) *dst[r] = static_cast<float>(sums[r]);
      }
      return;
    }
    for (std::int64_t k = o0; k < o1; ++k) {
      std::int64_t off[2];
      offsets_of(outer, 2, k, off);
      out[off[0]] = static_cast<float>(row_part_sum(row, in + off[1], 0, n));
    }
    return;
  }
  // Columns: the outer space's innermost dim has unit stride in `in`; runs along it are
  // accumulated over every reduced row at once.
  const int inner = outer.nd - 1;
  const std::int64_t inner_size = outer.sizes[inner];
  const std::int64_t out_stride = outer.strides[0][inner];
  alignas(64) double acc[kColumnStrip];
  alignas(64) float part[kColumnStrip];
  for (std::int64_t k = o0; k < o1;) {
    const std::int64_t col = k % inner_size;
    const std::int64_t len = std::min({kColumnStrip, inner_size - col, o1 - k});
    std::int64_t off[2];
    offsets_of(outer, 2, k, off);
    // Float partial sums over groups of kGroup rows, folded into double: vector-width adds
    // in the inner loop, and an error that grows with kGroup rather than with n.
    constexpr std::int64_t kGroup = 64;
    std::fill(acc, acc + len, 0.0);
    std::int64_t roff[2] = {0, 0};
    for (std::int64_t q0 = 0; q0 < n; q0 += kGroup) {
      std::fill(part, part + len, 0.0F);
      const std::int64_t q1 = std::min(n, q0 + kGroup);
      const auto row_at = [&](std::int64_t q) {
        if (row.nd == 1) {
          roff[1] = q * row.strides[1][0];
        } else {
          offsets_of(row, 2, q, roff);
        }
        return in + off[1] + roff[1];
      };
      std::int64_t q = q0;
      for (; q + 4 <= q1; q += 4) {  // four input rows at a time: four streams to read
        detail::accumulate4_f32(part, row_at(q), row_at(q + 1), row_at(q + 2), row_at(q + 3),
                                len);
      }
      for (; q < q1; ++q) detail::accumulate_f32(part, row_at(q), len);
      detail::accumulate_f64(acc, part, len);
    }
    float* dst = out + off[0];
    for (std::int64_t j = 0; j < len; ++j) dst[j * out_stride] = static_cast<float>(acc[j]);
    k += len;
  }
}

// Block b of a split sum: part b % splits of output b / splits, into scratch[b].
void sum_part_block(const SumJob& job, std::int64_t block, double* scratch) {
  const SumArgs& a = *job.args;
  Space row;
  Space outer;
  sum_spaces(a, row, outer);
  const std::int64_t n = row.volume();
  const std::int64_t k = block / job.splits;
  const std::int64_t part = block % job.splits;
  std::int64_t off[2];
  offsets_of(outer, 2, k, off);
  // Parts of a multiple of 16 elements (whole vectors), the last one taking the rest.
  const std::int64_t step = n / job.splits / 16 * 16;
  const std::int64_t e0 = part * step;
  const std::int64_t e1 = part == job.splits - 1 ? n : e0 + step;
  scratch[block] = row_part_sum(row, a.in.data_as<const float>() + off[1], e0, e1);
}

void sum_parts_finish(const SumJob& job, const double* scratch) {
  const SumArgs& a = *job.args;
  Space row;
  Space outer;
  sum_spaces(a, row, outer);
  float* out = a.out.data_as<float>();
  for (std::int64_t k = 0; k < job.outputs; ++k) {
    double total = 0.0;
    for (std::int64_t p = 0; p < job.splits; ++p) total += scratch[k * job.splits + p];
    std::int64_t off[2];
    offsets_of(outer, 2, k, off);
    out[off[0]] = static_cast<float>(total);
  }
}

// ---- shared validation and descriptors -----------------------------------------------------

Status check_config(const KernelDescriptor& d, const LaunchConfig& config) {
  // grid/block are not checked against the rows: the shape key does not carry the reduced
  // dim, so the descriptor's grid is an estimate (see reduction.hpp).
  return d.space.check(config);
}

// Numel and last extent of a shape key's first tensor (the heuristics assume the last dim).
void key_rows(const ShapeKey& key, std::int64_t& numel, std::int64_t& row) {
  KA_CHECK(!key.args().empty(), "shape key ", key.str(), " has no tensor argument");
  const auto& sizes = key.args().front().sizes;
  numel = 1;
  for (const auto s : sizes) numel *= s;
  row = sizes.empty() ? 1 : std::max<std::int64_t>(sizes.back(), 1);
}

void row_grid(const ShapeKey& key, std::int64_t rows_per_block, Dim3& grid, Dim3& block) {
  std::int64_t numel = 0;
  std::int64_t row = 0;
  key_rows(key, numel, row);
  const std::int64_t rows = numel / row;
  const std::int64_t rpb = std::max<std::int64_t>(1, rows_per_block);
  block = {rpb, 1, 1};
  grid = {std::max<std::int64_t>(1, ceil_div(rows, rpb)), 1, 1};
}

// name, ops, cost per element; rows are the last dim of the key's first tensor (for sum: the
// outputs of a last-dim reduction).
KernelDescriptor make_row_descriptor(const char* name, std::vector<std::string> ops,
                                     double flop_per_elem, bool streams) {
  KernelDescriptor d;
  d.name = name;
  // 2 (softmax, layer_norm): the `stream` tunable; 3: the `prefetch` tunable.
  d.version = streams ? 3 : 1;
  d.ops = std::move(ops);
  d.dtypes = {DType::kFloat32};
  d.device = DeviceType::kCPU;
  const auto threads = detail::cpu_thread_candidates();
  std::vector<TunableParam> params = {
      {"rows_per_block", {1, 2, 4, 8, 16, 32, 64, 128, 256}, "rows (outputs) per grid block"},
      {"threads", threads, "worker threads running the blocks"},
  };
  std::vector<Constraint> constraints = {
      {"rows_per_block >= 1",
       [](const LaunchConfig& c) { return c.get_or("rows_per_block", 0) >= 1; }},
      {"threads >= 1", [](const LaunchConfig& c) { return c.get_or("threads", 0) >= 1; }},
  };
  if (streams) {
    params.push_back({"stream", {0, 1},
                      "1: write contiguous output rows with streaming (non-temporal) stores"});
    constraints.push_back({"stream is 0 or 1", [](const LaunchConfig& c) {
                             return c.get_or("stream", -1) == 0 || c.get_or("stream", -1) == 1;
                           }});
    params.push_back({"prefetch", {0, 1, 2},
                      "the next row's input: 0 not prefetched, 1 into L1 (prefetcht0), 2 into "
                      "L2 (prefetcht2)"});
    constraints.push_back({"prefetch is 0, 1 or 2", [](const LaunchConfig& c) {
                             const std::int64_t v = c.get_or("prefetch", 1);
                             return v >= 0 && v <= 2;
                           }});
  }
  d.space = TunableSpace(std::move(params), std::move(constraints));
  d.complete = [](const ShapeKey& shape, const LaunchConfig& point) {
    LaunchConfig c = point;
    row_grid(shape, point.get_or("rows_per_block", 1), c.grid, c.block);
    return c;
  };
  d.can_run = [name](const ShapeKey& shape, const LaunchConfig& config) -> Status {
    for (const auto& t : shape.args()) {
      if (t.dtype != DType::kFloat32) return Status::unsupported("only float32 is supported");
    }
    const KernelDescriptor* self = nullptr;
    if (std::string_view(name) == "softmax_online_f32") self = &softmax_f32_cpu_descriptor();
    if (std::string_view(name) == "layer_norm_welford_f32") self = &layer_norm_f32_cpu_descriptor();
    if (std::string_view(name) == "sum_f32") self = &sum_f32_cpu_descriptor();
    return check_config(*self, config);
  };
  d.default_config = [streams, name](const ShapeKey& shape) {
    // Blocks of at least ~16K elements (waking a thread for less costs more than it saves);
    // one thread below ~32K elements, else every core with at least one block each.
    std::int64_t numel = 0;
    std::int64_t row = 0;
    key_rows(shape, numel, row);
    const std::int64_t rows = std::max<std::int64_t>(1, numel / row);
    std::int64_t rpb = 1;
    while (rpb < 256 && rpb * row < 16384) rpb *= 2;
    const std::int64_t hw = cpu_thread_limit();
    // Longer blocks (up to 128K elements) while every thread still gets four or more: the row
    // kernels prefetch only the next row of their own block (Note [AVX-512 row kernels]), so
    // every block boundary is a row that arrives unprefetched.
    while (rpb < 256 && rpb * row < 131072 && ceil_div(rows, 2 * rpb) >= 4 * hw) rpb *= 2;
    while (rpb > 1 && ceil_div(rows, rpb) < hw && numel > 32768) rpb /= 2;
    LaunchConfig c;
    c.set("rows_per_block", rpb);
    // A sum's key does not say which dims it reduces, and it splits rows when there are fewer
    // outputs than threads (Note [Split sums]): every core from 32K elements up.
    const bool is_sum = std::string_view(name) == "sum_f32";
    c.set("threads", numel <= 32768 ? 1 : is_sum ? hw : std::min(hw, ceil_div(rows, rpb)));
    // An output beyond the last-level cache goes around it (Note [Streaming stores]) for
    // layer_norm, whose time is memory, and for softmax on two or more threads: on one its
    // arithmetic is the bound, the read-for-ownership overlaps it, and its streamed path
    // (Note [Pipelined softmax]) only adds the wait on the stores. Prefetch targets: Note [Row
    // prefetch].
    if (streams) {
      const bool is_layer_norm = std::string_view(name) == "layer_norm_welford_f32";
      const std::int64_t stream = detail::stream_default(4.0 * static_cast<double>(numel),
                                                         is_layer_norm, c.get_or("threads", 1));
      c.set("stream", stream);
      c.set("prefetch", is_layer_norm || stream == 1 ? 2 : 1);
    }
    row_grid(shape, rpb, c.grid, c.block);
    return c;
  };
  d.flop_count = [flop_per_elem](const ShapeKey& shape) {
    std::int64_t numel = 0;
    std::int64_t row = 0;
    key_rows(shape, numel, row);
    return flop_per_elem * static_cast<double>(numel);
  };
  d.byte_count = [name](const ShapeKey& shape) {
    double bytes = 0.0;
    for (const auto& t : shape.args()) bytes += 4.0 * detail::spec_numel(t);
    std::int64_t numel = 0;
    std::int64_t row = 0;
    key_rows(shape, numel, row);
    // Output: as large as the input, except for sum (one value per row).
    const bool is_sum = std::string_view(name) == "sum_f32";
    return bytes + 4.0 * static_cast<double>(is_sum ? numel / row : numel);
  };
  return d;
}

int threads_of(const LaunchConfig& config) { return static_cast<int>(config.get_or("threads", 1)); }

// The `prefetch` tunable; a config without it prefetches into L1, so that a configuration
// stored before the tunable existed runs as it ran when it was measured.
detail::RowPrefetch row_prefetch(const LaunchConfig& config) {
  return static_cast<detail::RowPrefetch>(config.get_or("prefetch", 1));
}

}  // namespace

const KernelDescriptor& softmax_f32_cpu_descriptor() {
  static const KernelDescriptor d =
      make_row_descriptor("softmax_online_f32", {"aten::_softmax", "aten::softmax.int"}, 5.0,
                          true);
  return d;
}

const KernelDescriptor& layer_norm_f32_cpu_descriptor() {
  static const KernelDescriptor d = make_row_descriptor(
      "layer_norm_welford_f32", {"aten::layer_norm", "aten::native_layer_norm"}, 8.0, true);
  return d;
}

const KernelDescriptor& sum_f32_cpu_descriptor() {
  static const KernelDescriptor d =
      make_row_descriptor("sum_f32", {"aten::sum", "aten::sum.dim_IntList"}, 1.0, false);
  return d;
}

Status prepare_softmax_f32_cpu(const SoftmaxArgs& args, const LaunchConfig& config,
                               CpuLaunch& launch) {
  detail::validate_ew_operands("softmax", args.out, args.inputs, args.prologue);
  KA_CHECK(args.dim >= 0 && args.dim < std::max(args.out.ndim, 1), "softmax: dim ", args.dim,
           " is out of range for shape ", args.out.shape_str());
  if (Status st = check_config(softmax_f32_cpu_descriptor(), config); !st) return st;
  SoftmaxJob job{&args, 0, config.get_or("rows_per_block", 1), config.get_or("stream", 0) == 1,
                 row_prefetch(config)};
  const std::int64_t numel = args.out.numel();
  const std::int64_t d = args.out.ndim == 0 ? 1 : args.out.size(args.dim);
  job.rows = numel == 0 ? 0 : numel / d;
  if (job.rows > 0) {
    // Column tiles are as wide as a block's rows: give them enough rows to fill vectors
    // (narrow tiles run slower than the strided row walk), keeping a tile (d x rows) ~256 KiB.
    const RowTensors rt = row_tensors(args.out, args.inputs, args.prologue.inputs);
    Space row;
    Space outer;
    split_spaces(rt.t, rt.count, args.out, std::uint64_t{1} << args.dim, row, outer);
    if (column_layout(rt, row, outer)) {
      job.rows_per_block =
          std::max(job.rows_per_block, std::clamp<std::int64_t>(65536 / d, 16, kEwChunk));
    }
  }
  launch.bind<SoftmaxJob, softmax_block>(job, ceil_div(job.rows, job.rows_per_block),
                                         threads_of(config));
  return Status::ok();
}

Status prepare_layer_norm_f32_cpu(const LayerNormArgs& args, const LaunchConfig& config,
                                  CpuLaunch& launch) {
  detail::validate_ew_operands("layer_norm", args.out, args.inputs, args.prologue);
  const int k = args.normalized_dims;
  KA_CHECK(k >= 1 && k <= args.out.ndim, "layer_norm: normalized_dims ", k,
           " is out of range for shape ", args.out.shape_str());
  const TensorView* extra[] = {&args.weight, &args.bias};
  const char* names[] = {"weight", "bias"};
  for (int i = 0; i < 2; ++i) {
    const TensorView& t = *extra[i];
    if (t.data == nullptr) continue;
    KA_CHECK(t.dtype == DType::kFloat32 && t.device.type == DeviceType::kCPU,
             "layer_norm: ", names[i], " must be a float32 CPU tensor");
    bool ok = t.ndim == k;
    for (int d = 0; ok && d < k; ++d) ok = t.size(d) == args.out.size(args.out.ndim - k + d);
    KA_CHECK(ok, "layer_norm: ", names[i], " has shape ", t.shape_str(),
             " but the normalized shape of ", args.out.shape_str(), " is its last ", k, " dims");
  }
  if (Status st = check_config(layer_norm_f32_cpu_descriptor(), config); !st) return st;
  LayerNormJob job{&args, 0, config.get_or("rows_per_block", 1),
                   config.get_or("stream", 0) == 1, row_prefetch(config)};
  std::int64_t n = 1;
  for (int d = args.out.ndim - k; d < args.out.ndim; ++d) n *= args.out.size(d);
  job.rows = n == 0 ? 0 : args.out.numel() / n;
  launch.bind<LayerNormJob, layer_norm_block>(job, ceil_div(job.rows, job.rows_per_block),
                                              threads_of(config));
  return Status::ok();
}

Status prepare_sum_f32_cpu(const SumArgs& args, const LaunchConfig& config, CpuLaunch& launch) {
  const TensorView* named[] = {&args.out, &args.in};
  const char* names[] = {"out", "in"};
  for (int i = 0; i < 2; ++i) {
    KA_CHECK(named[i]->dtype == DType::kFloat32, "sum: ", names[i], " has dtype ",
             long_name(named[i]->dtype), "; this kernel takes float32");
    KA_CHECK(named[i]->device.type == DeviceType::kCPU, "sum: ", names[i], " is on ",
             named[i]->device.str(), "; this kernel runs on cpu");
  }
  const int nd = args.in.ndim;
  KA_CHECK(args.out.ndim == nd, "sum: out has shape ", args.out.shape_str(), " but in has ",
           args.in.shape_str(), " (out keeps the reduced dims with size 1)");
  KA_CHECK((args.reduce_mask >> nd) == 0, "sum: reduce_mask ", args.reduce_mask,
           " names dims past ", nd);
  for (int d = 0; d < nd; ++d) {
    const bool reduced = ((args.reduce_mask >> d) & 1U) != 0;
    KA_CHECK(args.out.size(d) == (reduced ? 1 : args.in.size(d)), "sum: out has shape ",
             args.out.shape_str(), ", expected in's shape ", args.in.shape_str(),
             " with size 1 on the reduced dims");
  }
  if (Status st = check_config(sum_f32_cpu_descriptor(), config); !st) return st;
  SumJob job{&args, args.out.numel(), config.get_or("rows_per_block", 1), false, 1};
  const int threads = threads_of(config);
  if (job.outputs > 0) {
    Space row;
    Space outer;
    sum_spaces(args, row, outer);
    const std::int64_t n = row.volume();
    job.columns = outer.nd > 0 && outer.strides[1][outer.nd - 1] == 1 &&
                  row.strides[1][row.nd - 1] != 1 && n > 1;
    // Column blocks cover whole strips of the inner kept dim (Note [Column sums]).
    if (job.columns) {
      const std::int64_t per_thread = ceil_div(job.outputs, std::max(1, threads) * 16) * 16;
      job.per_block = std::max(job.per_block,
                               std::clamp(per_thread, kMinColumnStrip, kColumnStrip));
    }
    // Fewer outputs than threads: split the rows (Note [Split sums]), two parts a thread.
    if (!job.columns && threads > 1 && job.outputs < threads) {
      job.splits = std::max<std::int64_t>(
          1, std::min({ceil_div(2 * threads, job.outputs), n / kMinSplitElems,
                       std::int64_t{CpuLaunch::kScratch} / job.outputs}));
    }
  }
  if (job.splits > 1) {
    launch.bind_split<SumJob, sum_part_block, sum_parts_finish>(job, job.outputs * job.splits,
                                                                 threads);
  } else {
    launch.bind<SumJob, sum_block>(job, ceil_div(job.outputs, job.per_block), threads);
  }
  return Status::ok();
}

Status softmax_f32_cpu(const SoftmaxArgs& args, const LaunchConfig& config) {
  CpuLaunch launch;
  if (Status st = prepare_softmax_f32_cpu(args, config, launch); !st) return st;
  run_on_pool(launch);
  return Status::ok();
}

Status layer_norm_f32_cpu(const LayerNormArgs& args, const LaunchConfig& config) {
  CpuLaunch launch;
  if (Status st = prepare_layer_norm_f32_cpu(args, config, launch); !st) return st;
  run_on_pool(launch);
  return Status::ok();
}

Status sum_f32_cpu(const SumArgs& args, const LaunchConfig& config) {
  CpuLaunch launch;
  if (Status st = prepare_sum_f32_cpu(args, config, launch); !st) return st;
  run_on_pool(launch);
  return Status::ok();
}

}  // namespace ka::kernels
