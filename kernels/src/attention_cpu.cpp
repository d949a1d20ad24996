// Fused attention on the CPU. See Note [Attention in blocks of keys].
#include "descriptor_common.hpp"
#include "ew_math.hpp"
#include "gemm_internal.hpp"

#include <ka/core/ceil_div.hpp>
#include <ka/core/error.hpp>
#include <ka/kernels/attention.hpp>

#include <algorithm>
#include <limits>
#include <vector>

namespace ka::kernels {

// Note [Attention in blocks of keys]
// A query block is one batch entry's block_q queries. It packs those queries once (the
// GEMM's A packing, kMicroRows rows per sliver), then walks the keys in blocks of block_k:
//  1. S = mask (or 0) + scale * Q @ Kᵀ for the block's rows and keys, by the GEMM's
//     micro-kernel over Kᵀ's block packed as its B (kc = D), which starts its tiles from the
//     mask where it is read (Note [Scores start as the mask]). A bool fill mask (masked_fill,
//     or where) then sets its positions to the fill value.
//  2. Online softmax per row: m' = max(m, max_j S), P = exp(S − m'), l = l·e^(m−m') + Σ P,
//     and the row's output accumulator O is scaled by e^(m−m') (skipped when m does not grow).
//     A row whose scores so far are all -inf keeps m = -inf and adds nothing. One call for
//     the block's rows (detail::online_softmax_rows, Note [One softmax call per block]).
//  3. O += P @ V by the micro-kernel, P as A (kc = the block's keys; Note [P read in rows]),
//     V's block packed as B.
// After the last key block, out = O / l. The scores never exist beyond one block_q x block_k
// tile, so the working set is Q's and O's block plus the key block of K and V in use, whatever
// the sequence length; K and V blocks are packed once per grid block (Note [Keys packed once
// per grid block]).
// Padding: Q's slivers repeat the last row and the packed B's columns are zero past the edge,
// so the micro-kernel always runs whole tiles into S and O, whose extra rows and columns are
// never read.

// Note [Keys packed once per grid block]
// Packed K and V do not depend on the queries, yet each query block packed them anew: at 512
// tokens and 96 queries per block, 6 times per head. A grid block is therefore one
// batch entry's span of query blocks (every `spans`-th one, so that a causal mask's cheap
// early rows and dear late ones share each span), and it packs each key block of K and V the
// first time one of its query blocks needs it, into a per-thread store that the span's other
// query blocks read. The store lives for one grid block only: a prepared launch may run
// again on new data, and its blocks on any threads. There are enough spans per batch entry
// for four blocks per thread (the pool hands blocks out one at a time), at most one per
// query block.

// Note [Scores start as the mask]
// S's tiles start as the mask's (or zeros) and add scale * Q @ Kᵀ. Copying the mask into S and
// letting the micro-kernel add to it was a pass that wrote S and a second that read it back,
// per key block; the micro-kernel that sets C (MicroKernelSet) reads the mask's tile in place
// of C, and zeros without reading anything where there is no mask. It needs the mask's rows
// contiguous and whole tiles: a tile at the block's edge starts from zeros and adds its part
// of the mask after; a mask with strided rows, or an ISA without that micro-kernel, copies
// the block first as before. Whether the block is live (Note [Masked key blocks]) is then a
// scan that stops at the first finite value.

// Note [P read in rows]
// P is written once and read once per key block. Packing it as the GEMM's A would write and
// read it a second time, so where the ISA has one, a micro-kernel that reads A's rows where
// they are (MicroKernelRowA) multiplies it unpacked. P then has rows_pad rows, those past the
// block's rows zero (the full tile reads them and its extra rows of O are never stored). The
// portable kernel has none and packs P.

// Note [Masked key blocks]
// A key block whose mask is -inf for every row of the query block (a causal mask's upper
// triangle: half the work at any length) is skipped: its probabilities are exactly 0 and it
// leaves m, l and O as they were. A key block that the fill mask fills throughout is
// deferred: after the other blocks, it is skipped if every row's max m is more than
// kNegligibleExp above the fill value (its probabilities, e^(fill − m), are then below
// float's smallest denormal: exactly 0 in ATen's softmax), else computed then (the online
// softmax takes blocks in any order). So a causal mask written with -inf, -1e4 or
// torch.finfo(float).min (Hugging Face's GPT-2) skips the upper triangle, and a row masked
// throughout still gets what softmax gives it (uniform over a finite fill, NaN over -inf).
// The one difference from computing a skipped block: a NaN or inf in q or k there does not
// reach the output (ATen's softmax would give NaN).

namespace {

constexpr std::int64_t kMr = detail::kMicroRows;
// e^-128 is below float's smallest denormal (2^-149 ≈ e^-103.3): Note [Masked key blocks].
constexpr float kNegligibleExp = 128.0F;

// One call, copied into the CpuLaunch: the sizes and blocking. The operands are read from the
// arguments themselves (`args`, which the caller keeps alive until the launch has run), as
// their batch strides do not fit the job.
struct AttentionJob {
  const AttentionArgs* args;
  std::int64_t sq, sk, d, dv;
  std::int64_t block_q, block_k, q_blocks;
  std::int64_t spans;  // grid blocks per batch entry (Note [Keys packed once per grid block])
  detail::MicroKernelInfo micro;
};
static_assert(sizeof(AttentionJob) <= CpuLaunch::kJobBytes);

// The per-thread buffers, grown on demand and never shrunk.
struct Scratch {
  std::vector<float> q_packed, k_packed, v_packed, p_packed, s, p, o, m, l;
  std::vector<std::int64_t> deferred;  // first keys of the blocks the fill mask fills
  std::vector<char> packed;            // per key block: its K and V are in k_packed, v_packed
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}
float* sized(std::vector<float>& v, std::int64_t n) {
  if (static_cast<std::int64_t>(v.size()) < n) v.resize(static_cast<std::size_t>(n));
  return v.data();
}

// The A operand of the micro-kernel: packed in slivers of kMr rows (`ld` 0), or rows of stride
// `ld` read in place (Note [P read in rows]).
struct OperandA {
  const float* data;
  std::int64_t ld;
};

// The micro-kernel over every (A sliver, B sliver) pair: C[0:rows_pad, 0:cols_pad] +=
// alpha * A @ B, A's rows a multiple of kMr, B packed in slivers of nr columns, both kc deep.
void multiply(const detail::MicroKernelInfo& micro, std::int64_t kc, OperandA a,
              std::int64_t a_slivers, const float* b, std::int64_t b_slivers, float* c,
              std::int64_t ldc, float alpha) {
  const std::int64_t nr = micro.cols;
  for (std::int64_t t = 0; t < b_slivers; ++t) {
    const float* bs = b + t * nr * kc;
    for (std::int64_t s = 0; s < a_slivers; ++s) {
      float* cs = c + s * kMr * ldc + t * nr;
      if (a.ld == 0) {
        micro.fn(kc, a.data + s * kMr * kc, bs, cs, ldc, alpha);
      } else {
        micro.fn_row_a(kc, a.data + s * kMr * a.ld, a.ld, bs, cs, ldc, alpha);
      }
    }
  }
}

// Whether x[0..n) is -inf throughout (NaN is not).
bool all_neg_inf(const float* x, std::int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  int all = 1;
  for (std::int64_t j = 0; j < n; ++j) all &= static_cast<int>(x[j] == kNegInf);
  return all != 0;
}

// A batch entry's matrix of an operand: its first element and the strides of its last two
// dims.
template <typename T>
struct Operand {
  const T* data;
  std::int64_t rs, cs;
};

// Whether the fill mask fills every position of its block [i0, i0 + rows) x [j0, j0 + cols):
// is set there, or clear with `where_false`.
bool all_filled(const Operand<std::uint8_t>& f, bool where_false, std::int64_t i0,
                std::int64_t j0, std::int64_t rows, std::int64_t cols) {
  const int fills = where_false ? 0 : 1;
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::uint8_t* src = f.data + (i0 + i) * f.rs + j0 * f.cs;
    int all = 1;
    for (std::int64_t j = 0; j < cols; ++j) all &= static_cast<int>((src[j * f.cs] != 0) == fills);
    if (all == 0) return false;
  }
  return true;
}

// S[i, j] = value where the fill mask fills (set, or clear with `where_false`), after the
// product.
void apply_fill(const Operand<std::uint8_t>& f, bool where_false, float value, std::int64_t i0,
                std::int64_t j0, std::int64_t rows, std::int64_t cols, float* s,
                std::int64_t lds) {
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::uint8_t* src = f.data + (i0 + i) * f.rs + j0 * f.cs;
    float* row = s + i * lds;
    for (std::int64_t j = 0; j < cols; ++j) {
      row[j] = (src[j * f.cs] != 0) != where_false ? value : row[j];
    }
  }
}

// Whether every row's max m lies more than kNegligibleExp above `fill` (Note [Masked key
// blocks]); false for a row with no finite score yet.
bool fill_negligible(const float* m, std::int64_t rows, float fill) {
  for (std::int64_t i = 0; i < rows; ++i) {
    if (!(m[i] - fill > kNegligibleExp)) return false;
  }
  return true;
}

// Whether the mask leaves any score of the block [i0, i0 + rows) x [j0, j0 + cols) finite:
// false when it is -inf throughout (Note [Masked key blocks]). Stops at the first value that
// is not -inf (NaN included).
bool block_live(const Operand<float>& mask, std::int64_t i0, std::int64_t j0, std::int64_t rows,
                std::int64_t cols) {
  if (mask.data == nullptr) return true;
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* src = mask.data + (i0 + i) * mask.rs + j0 * mask.cs;
    if (mask.cs == 1) {
      if (!all_neg_inf(src, cols)) return true;
      continue;
    }
    for (std::int64_t j = 0; j < cols; ++j) {
      if (!(src[j * mask.cs] == -std::numeric_limits<float>::infinity())) return true;
    }
  }
  return false;
}

// S[0:rows, 0:cols] (+)= the mask's block [i0, i0 + rows) x [j0, j0 + cols), or = zeros where
// there is no mask.
template <bool Add>
void mask_into(const Operand<float>& mask, std::int64_t i0, std::int64_t j0, std::int64_t rows,
               std::int64_t cols, float* s, std::int64_t lds) {
  for (std::int64_t i = 0; i < rows; ++i) {
    float* row = s + i * lds;
    if (mask.data == nullptr) {
      if (!Add) std::fill(row, row + cols, 0.0F);
      continue;
    }
    const float* src = mask.data + (i0 + i) * mask.rs + j0 * mask.cs;
    for (std::int64_t j = 0; j < cols; ++j) row[j] = (Add ? row[j] : 0.0F) + src[j * mask.cs];
  }
}

// Step 1: S[0:rows_pad, 0:cols_pad] = mask (or 0) + scale * Q @ Kᵀ for the key block at j0,
// Q packed in `a_slivers` slivers and Kᵀ's block in `k_slivers`, both kc = d (Note [Scores
// start as the mask]). Rows and columns past the block's are never read.
void compute_scores(const detail::MicroKernelInfo& micro, const Operand<float>& mask,
                    std::int64_t i0, std::int64_t j0, std::int64_t rows, std::int64_t cols,
                    std::int64_t d, const float* qp, std::int64_t a_slivers, const float* kp,
                    std::int64_t k_slivers, float* s, std::int64_t lds, float scale) {
  const std::int64_t nr = micro.cols;
  if (micro.fn_set == nullptr || (mask.data != nullptr && mask.cs != 1)) {
    mask_into<false>(mask, i0, j0, rows, cols, s, lds);
    multiply(micro, d, {qp, 0}, a_slivers, kp, k_slivers, s, lds, scale);
    return;
  }
  for (std::int64_t t = 0; t < k_slivers; ++t) {
    for (std::int64_t v = 0; v < a_slivers; ++v) {
      float* c = s + v * kMr * lds + t * nr;
      const std::int64_t tile_rows = std::min(kMr, rows - v * kMr);
      const std::int64_t tile_cols = std::min(nr, cols - t * nr);
      const bool whole = tile_rows == kMr && tile_cols == nr;
      const float* c0 = mask.data != nullptr && whole
                            ? mask.data + (i0 + v * kMr) * mask.rs + j0 + t * nr
                            : nullptr;
      micro.fn_set(d, qp + v * kMr * d, kp + t * nr * d, c, lds, scale, c0, mask.rs);
      if (!whole) {
        mask_into<true>(mask, i0 + v * kMr, j0 + t * nr, tile_rows, tile_cols, c, lds);
      }
    }
  }
}

// The offset of batch entry `b` (row-major over t's leading dims) in `t`.
std::int64_t batch_offset(std::int64_t b, const TensorView& t) {
  std::int64_t off = 0;
  for (int d = t.ndim - 3; d >= 0; --d) {
    off += (b % t.size(d)) * t.stride(d);
    b /= t.size(d);
  }
  return off;
}

// Grid blocks per batch entry: enough for four per thread, at most one per query block (Note
// [Keys packed once per grid block]).
std::int64_t spans_per_entry(std::int64_t q_blocks, std::int64_t batch, std::int64_t threads) {
  const std::int64_t wanted = ceil_div(4 * threads, std::max<std::int64_t>(1, batch));
  return std::max<std::int64_t>(1, std::min(q_blocks, wanted));
}

// Batch entry b's matrix of t (null where t is undefined).
template <typename T>
Operand<T> matrix_of(const TensorView& t, std::int64_t b) {
  if (t.data == nullptr) return Operand<T>{nullptr, 0, 0};
  return Operand<T>{t.data_as<const T>() + batch_offset(b, t), t.stride(t.ndim - 2),
                    t.stride(t.ndim - 1)};
}

// One batch entry's operands and output.
struct EntryOperands {
  Operand<float> q, kt, v, mask;
  Operand<std::uint8_t> fill;
  float* out;
  std::int64_t out_rs;
};

EntryOperands entry_operands(const AttentionArgs& a, std::int64_t b) {
  return {matrix_of<float>(a.query, b),
          matrix_of<float>(a.key_t, b),
          matrix_of<float>(a.value, b),
          matrix_of<float>(a.mask, b),
          matrix_of<std::uint8_t>(a.fill_mask, b),
          a.out.data_as<float>() + batch_offset(b, a.out),
          a.out.stride(a.out.ndim - 2)};
}

// The query block of `rows` rows at i0, its key blocks' K and V packed in `kp_all` and
// `vp_all` on first use (Note [Keys packed once per grid block]).
void run_query_block(const AttentionJob& job, const EntryOperands& op, std::int64_t i0,
                     Scratch& sc, float* kp_all, float* vp_all) {
  const AttentionArgs& a = *job.args;
  const std::int64_t rows = std::min(job.block_q, job.sq - i0);
  const detail::MicroKernelInfo& micro = job.micro;
  const std::int64_t nr = micro.cols;
  const std::int64_t a_slivers = ceil_div(rows, kMr);
  const std::int64_t rows_pad = a_slivers * kMr;
  const std::int64_t lds = round_up(job.block_k, nr);
  const std::int64_t dv_slivers = ceil_div(job.dv, nr);
  const std::int64_t ldo = dv_slivers * nr;

  float* qp = sized(sc.q_packed, rows_pad * job.d + detail::kPackSlack);
  float* pp = micro.fn_row_a != nullptr
                  ? nullptr
                  : sized(sc.p_packed, rows_pad * job.block_k + detail::kPackSlack);
  float* s = sized(sc.s, rows_pad * lds);
  const std::int64_t ldp = job.block_k;
  float* p = sized(sc.p, rows_pad * ldp);
  std::fill(p + rows * ldp, p + rows_pad * ldp, 0.0F);
  float* o = sized(sc.o, rows_pad * ldo);
  float* m = sized(sc.m, rows);
  float* l = sized(sc.l, rows);
  std::fill(o, o + rows_pad * ldo, 0.0F);
  std::fill(m, m + rows, -std::numeric_limits<float>::infinity());
  std::fill(l, l + rows, 0.0F);

  micro.pack_a(op.q.data, op.q.rs, op.q.cs, i0, rows, 0, job.d, qp);
  // Steps 1 to 3 for the key block at j0.
  const auto key_block = [&](std::int64_t j0) {
    const std::int64_t cols = std::min(job.block_k, job.sk - j0);
    const std::int64_t k_slivers = ceil_div(cols, nr);
    if (!block_live(op.mask, i0, j0, rows, cols)) return;
    const std::int64_t kb = j0 / job.block_k;
    float* kp = kp_all + kb * job.d * lds;
    float* vp = vp_all + kb * job.block_k * ldo;
    if (sc.packed[static_cast<std::size_t>(kb)] == 0) {
      micro.pack_b(op.kt.data, op.kt.rs, op.kt.cs, 0, job.d, j0, cols, nr, kp);
      micro.pack_b(op.v.data, op.v.rs, op.v.cs, j0, cols, 0, job.dv, nr, vp);
      sc.packed[static_cast<std::size_t>(kb)] = 1;
    }
    compute_scores(micro, op.mask, i0, j0, rows, cols, job.d, qp, a_slivers, kp, k_slivers, s,
                   lds, a.scale);
    if (op.fill.data != nullptr) {
      apply_fill(op.fill, a.fill_where_false, a.fill_value, i0, j0, rows, cols, s, lds);
    }
    detail::online_softmax_rows(s, lds, rows, cols, p, ldp, m, l, o, ldo, job.dv);
    if (micro.fn_row_a != nullptr) {  // Note [Scores start as the mask]
// S's tiles start as the mask's (or zeros) and add scale * Q @ Kᵀ. Copying the mask into S and
// letting the micro-kernel add to it was a pass that wrote S and a second that read it back,
// per key block; the micro-kernel that sets C (MicroKernelSet) reads the mask's tile in place
// of C, and zeros without reading anything where there is no mask. It needs the mask's rows
// contiguous and whole tiles: a tile at the block's edge starts from zeros and adds its part
// of the mask after; a mask with strided rows, or an ISA without that micro-kernel, copies
// the block first as before. Whether the block is live (Note [Masked key blocks]) is then a
// scan that stops at the first finite value.

// Note [P read in rows]
      multiply(micro, cols, {p, ldp}, a_slivers, vp, dv_slivers, o, ldo, 1.0F);
    } else {
      micro.pack_a(p, ldp, 1, 0, rows, 0, cols, pp);
      multiply(micro, cols, {pp, 0}, a_slivers, vp, dv_slivers, o, ldo, 1.0F);
    }
  };
  std::vector<std::int64_t>& deferred = sc.deferred;
  deferred.clear();
  for (std::int64_t j0 = 0; j0 < job.sk; j0 += job.block_k) {
    const std::int64_t cols = std::min(job.block_k, job.sk - j0);
    if (op.fill.data != nullptr && all_filled(op.fill, a.fill_where_false, i0, j0, rows, cols)) {
      deferred.push_back(j0);
      continue;
    }
    key_block(j0);
  }
  if (!deferred.empty() && !fill_negligible(m, rows, a.fill_value)) {
    for (const std::int64_t j0 : deferred) key_block(j0);
  }
  for (std::int64_t i = 0; i < rows; ++i) {
    detail::scale_run(o + i * ldo, 1.0F / l[i], op.out + (i0 + i) * op.out_rs, job.dv);
  }
}

// Grid block `block`: one batch entry's span of query blocks (Note [Keys packed once per grid
// block]).
void run_span(const AttentionJob& job, std::int64_t block) {
  const std::int64_t b = block / job.spans;
  const EntryOperands op = entry_operands(*job.args, b);
  const std::int64_t nr = job.micro.cols;
  const std::int64_t key_blocks = ceil_div(job.sk, job.block_k);
  Scratch& sc = scratch();
  float* kp_all = sized(sc.k_packed, key_blocks * job.d * round_up(job.block_k, nr));
  float* vp_all = sized(sc.v_packed, key_blocks * job.block_k * round_up(job.dv, nr));
  sc.packed.assign(static_cast<std::size_t>(key_blocks), 0);
  for (std::int64_t qb = block % job.spans; qb < job.q_blocks; qb += job.spans) {
    run_query_block(job, op, qb * job.block_q, sc, kp_all, vp_all);
  }
}

// ---- operands ------------------------------------------------------------------------------

void check_operand(const TensorView& t, const char* name, int ndim) {
  KA_CHECK(t.dtype == DType::kFloat32, "attention: ", name, " must be float32");
  KA_CHECK(t.device.type == DeviceType::kCPU, "attention: ", name, " must be on the CPU");
  KA_CHECK(t.ndim == ndim, "attention: ", name, " has ", t.ndim, " dims, query has ", ndim);
}

// Validates the operands; returns the shape.
AttentionShape validate(const AttentionArgs& a) {
  const int nd = a.query.ndim;
  KA_CHECK(nd >= 3 && nd <= TensorView::kMaxDims, "attention: query must have 3 to ",
           TensorView::kMaxDims, " dims (batch..., Sq, D), got ", a.query.shape_str());
  check_operand(a.query, "query", nd);
  check_operand(a.key_t, "key_t", nd);
  check_operand(a.value, "value", nd);
  check_operand(a.out, "out", nd);
  const bool has_mask = a.mask.data != nullptr || a.mask.ndim > 0;
  if (has_mask) check_operand(a.mask, "mask", nd);
  const bool has_fill = a.fill_mask.data != nullptr || a.fill_mask.ndim > 0;
  if (has_fill) {
    KA_CHECK(a.fill_mask.dtype == DType::kBool && a.fill_mask.device.type == DeviceType::kCPU &&
                 a.fill_mask.ndim == nd,
             "attention: fill_mask must be a bool CPU tensor of ", nd, " dims, got ",
             a.fill_mask.shape_str());
    for (int d = 0; d < nd; ++d) {
      const std::int64_t want = d == nd - 1 ? a.key_t.size(nd - 1) : a.query.size(d);
      KA_CHECK(a.fill_mask.size(d) == want, "attention: fill_mask ", a.fill_mask.shape_str(),
               " must be [..., Sq, Sk] like the scores");
    }
  }
  AttentionShape s;
  s.sq = a.query.size(nd - 2);
  s.d = a.query.size(nd - 1);
  s.sk = a.key_t.size(nd - 1);
  s.dv = a.value.size(nd - 1);
  s.mask = has_mask || has_fill;
  for (int d = 0; d + 2 < nd; ++d) {
    const std::int64_t n = a.query.size(d);
    KA_CHECK(a.key_t.size(d) == n && a.value.size(d) == n && a.out.size(d) == n &&
                 (!has_mask || a.mask.size(d) == n),
             "attention: batch dimension ", d, " differs: query ", a.query.shape_str(),
             ", key_t ", a.key_t.shape_str(), ", value ", a.value.shape_str(), ", out ",
             a.out.shape_str(), has_mask ? ", mask " + a.mask.shape_str() : std::string());
    s.batch *= n;
  }
  KA_CHECK(a.key_t.size(nd - 2) == s.d, "attention: key_t ", a.key_t.shape_str(),
           " must be [..., D, Sk] with D = ", s.d, " (query ", a.query.shape_str(), ")");
  KA_CHECK(a.value.size(nd - 2) == s.sk, "attention: value ", a.value.shape_str(),
           " must be [..., Sk, Dv] with Sk = ", s.sk);
  KA_CHECK(a.out.size(nd - 2) == s.sq && a.out.size(nd - 1) == s.dv, "attention: out ",
           a.out.shape_str(), " must be [..., ", s.sq, ", ", s.dv, "]");
  KA_CHECK(a.out.stride(nd - 1) == 1 || s.dv <= 1, "attention: out must have unit stride "
           "along Dv");
  KA_CHECK(!has_mask || (a.mask.size(nd - 2) == s.sq && a.mask.size(nd - 1) == s.sk),
           "attention: mask ", a.mask.shape_str(), " must be [..., ", s.sq, ", ", s.sk, "]");
  return s;
}

// ---- descriptor ----------------------------------------------------------------------------

// The config's micro-kernel on the active ISA (micro_n 0: its default width).
detail::MicroKernelInfo micro_of(const LaunchConfig& c) {
  return detail::micro_kernel_in_use(c.get_or("micro_n", 0));
}

Status check_point(const KernelDescriptor& d, const LaunchConfig& c) {
  if (Status st = d.space.check(c); !st) return st;
  if (micro_of(c).fn == nullptr) {
    return Status::unsupported("micro_n=" + std::to_string(c.get_or("micro_n", 0)) +
                               ": the " + gemm_cpu_isa() + " path has no micro-kernel that wide");
  }
  return Status::ok();
}

LaunchConfig complete_point(const ShapeKey& key, const LaunchConfig& point) {
  const AttentionShape s = attention_shape(key);
  LaunchConfig c = point;
  const std::int64_t bq = std::max<std::int64_t>(1, point.get_or("block_q", 1));
  c.block = {point.get_or("block_k", 1), bq, 1};
  const std::int64_t threads = std::max<std::int64_t>(1, point.get_or("threads", 1));
  const std::int64_t spans = spans_per_entry(ceil_div(s.sq, bq), s.batch, threads);
  c.grid = {spans, std::max<std::int64_t>(1, s.batch), 1};
  return c;
}

// Default: 192 queries per block (96 with a mask, whose -inf blocks a smaller block skips
// more of) where that still gives every thread four blocks, else fewer (down to 24); 256 keys
// per step (the scores' tile then stays within 192 KiB, in L2 beside Q, O and the key block).
LaunchConfig default_point(const AttentionShape& s) {
  const std::int64_t threads = cpu_thread_limit();
  std::int64_t bq = s.mask ? 96 : 192;
  while (bq > 24 && s.batch * ceil_div(s.sq, bq) < 4 * threads) bq /= 2;
  LaunchConfig c;
  c.set("block_q", bq);
  c.set("block_k", 256);
  c.set("micro_n", 0);
  c.set("threads", std::min<std::int64_t>(threads, std::max<std::int64_t>(1, s.batch * ceil_div(s.sq, bq))));
  return c;
}

KernelDescriptor make_descriptor() {
  KernelDescriptor d;
  d.name = "attention_f32_cpu";
  d.version = 1;
  d.ops = {"fused::attention"};
  d.dtypes = {DType::kFloat32};
  d.device = DeviceType::kCPU;
  std::vector<std::int64_t> widths = {0};
  for (const std::int64_t w : {16, 32, 48}) widths.push_back(w);
  d.space = TunableSpace(
      {{"block_q", {24, 48, 96, 192}, "queries per block"},
       {"block_k", {64, 128, 256, 512}, "keys per online-softmax step"},
       {"micro_n", widths, "GEMM micro-kernel width (0: the ISA's default)"},
       {"threads", detail::cpu_thread_candidates(), "threads"}},
      {{"block_q % 6 == 0 (micro-tile rows)",
        [](const LaunchConfig& c) { return c.get_or("block_q", 0) > 0 && c.get_or("block_q", 0) % kMr == 0; }},
       {"block_k >= 1", [](const LaunchConfig& c) { return c.get_or("block_k", 0) >= 1; }},
       {"threads >= 1", [](const LaunchConfig& c) { return c.get_or("threads", 0) >= 1; }}});
  d.complete = complete_point;
  d.can_run = [](const ShapeKey& key, const LaunchConfig& config) -> Status {
    const auto& args = key.args();
    for (std::size_t i = 0; i < args.size(); ++i) {
      const bool fill_mask = i == 3 && args[i].dtype == DType::kBool;
      if (args[i].dtype != DType::kFloat32 && !fill_mask) {
        return Status::unsupported("only float32 is supported (and a bool fill mask)");
      }
    }
    return check_point(attention_f32_cpu_descriptor(), config);
  };
  d.default_config = [](const ShapeKey& key) {
    return complete_point(key, default_point(attention_shape(key)));
  };
  d.canonical = [](const ShapeKey& key, const LaunchConfig& point) {
    const AttentionShape s = attention_shape(key);
    LaunchConfig c;
    c.set("block_q", std::min(point.get_or("block_q", 0), round_up(s.sq, kMr)));
    c.set("block_k", std::min(point.get_or("block_k", 0), s.sk));
    c.set("micro_n", micro_of(point).cols);
    const std::int64_t blocks = s.batch * ceil_div(s.sq, c.get_or("block_q", 1));
    c.set("threads", std::min(point.get_or("threads", 1), std::max<std::int64_t>(1, blocks)));
    return c;
  };
  d.flop_count = [](const ShapeKey& key) {
    const AttentionShape s = attention_shape(key);
    return 2.0 * static_cast<double>(s.batch) * static_cast<double>(s.sq) *
           static_cast<double>(s.sk) * static_cast<double>(s.d + s.dv);
  };
  d.byte_count = [](const ShapeKey& key) {
    const AttentionShape s = attention_shape(key);
    const double per_batch = static_cast<double>(s.sq * s.d + s.d * s.sk + s.sk * s.dv +
                                                 s.sq * s.dv + (s.mask ? s.sq * s.sk : 0));
    return 4.0 * static_cast<double>(s.batch) * per_batch;
  };
  return d;
}

}  // namespace

AttentionShape attention_shape(const ShapeKey& key) {
  const auto& a = key.args();
  KA_CHECK(a.size() == 3 || a.size() == 4, "shape key ", key.str(),
           ": attention takes query, key_t, value and an optional mask");
  const std::size_t nd = a[0].sizes.size();
  KA_CHECK(nd >= 3, "shape key ", key.str(), ": query must have at least 3 dims");
  for (const auto& t : a) {
    KA_CHECK(t.sizes.size() == nd, "shape key ", key.str(), ": every operand must have ", nd,
             " dims");
  }
  AttentionShape s;
  for (std::size_t d = 0; d + 2 < nd; ++d) s.batch *= a[0].sizes[d];
  s.sq = a[0].sizes[nd - 2];
  s.d = a[0].sizes[nd - 1];
  s.sk = a[1].sizes[nd - 1];
  s.dv = a[2].sizes[nd - 1];
  s.mask = a.size() == 4;
  KA_CHECK(a[1].sizes[nd - 2] == s.d && a[2].sizes[nd - 2] == s.sk, "shape key ", key.str(),
           ": expected query [..., Sq, D], key_t [..., D, Sk], value [..., Sk, Dv]");
  return s;
}

const KernelDescriptor& attention_f32_cpu_descriptor() {
  static const KernelDescriptor d = make_descriptor();
  return d;
}

Status prepare_attention_f32_cpu(const AttentionArgs& args, const LaunchConfig& config,
                                 CpuLaunch& launch) {
  const AttentionShape s = validate(args);
  if (Status st = check_point(attention_f32_cpu_descriptor(), config); !st) return st;
  const auto threads = static_cast<int>(config.get_or("threads", 1));
  if (s.batch == 0 || s.sq == 0 || s.dv == 0) {
    launch.blocks = 0;
    launch.threads = threads;
    return Status::ok();
  }
  KA_CHECK(s.sk > 0, "attention: no keys (key_t ", args.key_t.shape_str(),
           "): softmax over an empty row");
  AttentionJob job{};
  job.sq = s.sq;
  job.sk = s.sk;
  job.d = s.d;
  job.dv = s.dv;
  job.block_q = config.get_or("block_q", 96);
  job.block_k = config.get_or("block_k", 256);
  job.q_blocks = ceil_div(s.sq, job.block_q);
  job.spans = spans_per_entry(job.q_blocks, s.batch, threads);
  job.micro = micro_of(config);
  job.args = &args;
  launch.bind<AttentionJob, run_span>(job, s.batch * job.spans, threads);
  return Status::ok();
}

Status attention_f32_cpu(const AttentionArgs& args, const LaunchConfig& config) {
  CpuLaunch launch;
  if (Status st = prepare_attention_f32_cpu(args, config, launch); !st) return st;
  run_on_pool(launch);
  return Status::ok();
}

}  // namespace ka::kernels
