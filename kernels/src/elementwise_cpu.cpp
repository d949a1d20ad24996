// The CPU element-wise kernel: one pass over the output evaluating an EwProgram in chunks.
// See Note [CPU element-wise chunks].
#include "descriptor_common.hpp"
#include "ew_loops.hpp"
#include "ew_math.hpp"

#include <ka/core/ceil_div.hpp>
#include <ka/core/error.hpp>
#include <ka/kernels/cpu_launch.hpp>
#include <ka/kernels/elementwise.hpp>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ka::kernels {

// Note [CPU element-wise chunks]
// The dims of out and the inputs are first collapsed (size-1 dims dropped, neighbours merged
// where every tensor's strides allow), so most calls become one flat dimension. A grid block
// is a range of block_elems output elements (linear, row-major order). It is evaluated in
// chunks of kChunk elements: every instruction is one tight loop over the chunk into its own
// register buffer (SSA: one buffer per register), which the compiler vectorizes. A tensor
// whose offset is linear in the element index is read (or written) in place; a broadcast
// scalar (all strides 0) is filled into its buffer once per block; anything else is gathered
// (scattered, for out) segment by segment along the innermost dim. When the result is the
// last instruction it writes straight into a linear out. Exact aliasing of out with an input
// is safe: each element's inputs are read before that element is written.

// Note [Streaming stores]
// A 64 MiB output written with ordinary stores costs three memory streams: each line is read
// (read-for-ownership), then written back. Non-temporal stores skip the read and bypass the
// caches, which is what an output larger than the last-level cache wants. Kernels with a
// `stream` tunable compute each chunk into an L1 buffer and stream it out (64-byte AVX-512
// stores where active, else SSE stores combined into lines by the write-combining buffers),
// then fence at the end of the block so the executor's hand-off to other threads sees the data.
// Defaults turn it on only for outputs at least as large as the L3 (detail::stream_default) of
// kernels bound by memory (light element-wise ops, layer_norm) and, on two or more threads, of
// those bound by their arithmetic where AVX-512 streams them from registers (transcendental
// ops, fused chains, softmax): on one core the read-for-ownership overlaps their arithmetic, on
// two the memory is the bound (see the element-wise and softmax defaults).

namespace detail {

void stream_store(float* __restrict dst, const float* __restrict src, std::int64_t n) {
  switch (active_cpu_path()) {
    case CpuPath::kAvx512:
      stream_store_avx512(dst, src, n);
      return;
    case CpuPath::kAvx2:
      stream_store_avx2(dst, src, n);
      return;
    case CpuPath::kGeneric:
      break;
  }
  std::int64_t i = 0;
  while (i < n && (reinterpret_cast<std::uintptr_t>(dst + i) & 63U) != 0) {
    dst[i] = src[i];
    ++i;
  }
  for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = src[i];
}

void stream_fence() { _mm_sfence(); }

const EwLoops& ew_loops() {
  switch (active_cpu_path()) {
    case CpuPath::kAvx512:
      return kEwLoopsAvx512;
    case CpuPath::kAvx2:
      return kEwLoopsAvx2;
    case CpuPath::kGeneric:
      break;
  }
  return kEwLoopsGeneric;
}

void unary_run(EwOp op, const float* __restrict a, float* __restrict d, std::int64_t n) {
  const CpuPath path = active_cpu_path();
  if (path == CpuPath::kAvx512 && unary_run_avx512(op, a, d, n)) return;
  if (path == CpuPath::kAvx2 && unary_run_avx2(op, a, d, n)) return;
  ew_loops().unary_run(op, a, d, n);
}

// Note [Epilogue in one call per tile]
// The GEMM applies its activation to each micro-tile as it is stored (Note [Epilogue per
// micro-tile]). Row by row through unary_run, that was a dispatch, a copy into a buffer
// (unary_run's operands are restrict) and a loop prologue per nr floats: on a 512 x 3072 GELU
// epilogue, more time than the GELU itself. The ISA versions take the rows in place, one call
// per tile.
void apply_epilogue(Epilogue e, float* c, std::int64_t ldc, std::int64_t rows, std::int64_t cols) {
  if (e == Epilogue::kNone) return;
  const EwOp op = epilogue_op(e);
  const CpuPath path = active_cpu_path();
  if (path == CpuPath::kAvx512 && unary_rows_inplace_avx512(op, c, ldc, rows, cols)) return;
  if (path == CpuPath::kAvx2 && unary_rows_inplace_avx2(op, c, ldc, rows, cols)) return;
  float tmp[256];
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = c + r * ldc;
    for (std::int64_t i = 0; i < cols; i += 256) {
      const std::int64_t len = cols - i < 256 ? cols - i : 256;
      std::memcpy(tmp, row + i, static_cast<std::size_t>(len) * sizeof(float));
      unary_run(op, tmp, row + i, len);
    }
  }
}

void online_softmax_rows(const float* s, std::int64_t lds, std::int64_t rows, std::int64_t cols,
                         float* p, std::int64_t ldp, float* m, float* l, float* o,
                         std::int64_t ldo, std::int64_t dv) {
  switch (active_cpu_path()) {  // Note [One softmax call per block]
    case CpuPath::kAvx512:
      online_softmax_rows_avx512(s, lds, rows, cols, p, ldp, m, l, o, ldo, dv);
      return;
    case CpuPath::kAvx2:
      online_softmax_rows_avx2(s, lds, rows, cols, p, ldp, m, l, o, ldo, dv);
      return;
    case CpuPath::kGeneric:
      break;
  }
  online_softmax_rows_with(
      s, lds, rows, cols, p, ldp, m, l, o, ldo, dv, lane_max, exp_shifted_sum,
      [](float* orow, float d, std::int64_t n) {
        const float c = exp_f32(d);
        scale_inplace(orow, c, n);
        return c;
      });
}

float exp_shifted_sum(const float* __restrict x, float shift, float* __restrict d, std::int64_t n) {
  switch (active_cpu_path()) {
    case CpuPath::kAvx512:
      return exp_shifted_sum_avx512(x, shift, d, n);
    case CpuPath::kAvx2:
      return exp_shifted_sum_avx2(x, shift, d, n);
    case CpuPath::kGeneric:
      break;
  }
  return kEwLoopsGeneric.exp_shifted_sum(x, shift, d, n);
}

void binary_run(EwOp op, const float* a, const float* b, float* d, std::int64_t n) {
  ew_loops().binary_run(op, a, b, d, n);
}
void exp_shifted_run(const float* __restrict x, float shift, float scale, float* __restrict d,
                     std::int64_t n) {
  ew_loops().exp_shifted_run(x, shift, scale, d, n);
}
float lane_sum(const float* x, std::int64_t n) { return ew_loops().lane_sum(x, n); }
float lane_max(const float* x, std::int64_t n) { return ew_loops().lane_max(x, n); }
float lane_sum_sq_dev(const float* x, float mean, std::int64_t n) {
  return ew_loops().lane_sum_sq_dev(x, mean, n);
}
void normalize_run(const float* x, float mean, float rstd, const float* w, const float* b, float* d,
                   std::int64_t n) {
  ew_loops().normalize_run(x, mean, rstd, w, b, d, n);
}
void max_accumulate(float* __restrict m, const float* __restrict x, std::int64_t n) {
  ew_loops().max_accumulate(m, x, n);
}
void exp_sub_accumulate(float* __restrict xd, const float* __restrict m, float* __restrict acc,
                        std::int64_t n) {
  ew_loops().exp_sub_accumulate(xd, m, acc, n);
}
void mul_inplace(float* __restrict d, const float* __restrict f, std::int64_t n) {
  ew_loops().mul_inplace(d, f, n);
}
void scale_run(const float* __restrict x, float f, float* __restrict d, std::int64_t n) {
  ew_loops().scale_run(x, f, d, n);
}
void scale_inplace(float* d, float f, std::int64_t n) { ew_loops().scale_inplace(d, f, n); }
void accumulate_f32(float* __restrict acc, const float* __restrict x, std::int64_t n) {
  ew_loops().accumulate_f32(acc, x, n);
}
void accumulate4_f32(float* __restrict acc, const float* x0, const float* x1, const float* x2,
                     const float* x3, std::int64_t n) {
  ew_loops().accumulate4_f32(acc, x0, x1, x2, x3, n);
}
void accumulate_f64(double* __restrict acc, const float* __restrict x, std::int64_t n) {
  ew_loops().accumulate_f64(acc, x, n);
}

}  // namespace detail

namespace {

constexpr std::int64_t kChunk = 256;
constexpr int kMaxTensors = 1 + EwProgram::kMaxInputs;  // out, then the inputs

enum class Access : std::uint8_t { kLinear, kScalar, kGather };

struct EwJob {
  const ElementwiseArgs* args;
  std::int64_t total;
  std::int64_t block_elems;
  bool stream;  // results go out through streaming stores (out is linear)
  int tensors;  // 1 + program.inputs
  Access access[kMaxTensors];
};

// The collapsed iteration space: sizes and, per tensor, strides (elements).
struct Layout {
  int ndim = 0;
  std::int64_t sizes[TensorView::kMaxDims];
  std::int64_t strides[kMaxTensors][TensorView::kMaxDims];
};

const TensorView& tensor(const ElementwiseArgs& a, int t) {
  return t == 0 ? a.out : a.inputs[static_cast<std::size_t>(t - 1)];
}

void collapse(const ElementwiseArgs& a, int tensors, Layout& l) {
  int nd = 0;
  for (int d = 0; d < a.out.ndim; ++d) {
    const std::int64_t size = a.out.size(d);
    if (size == 1) continue;
    if (nd > 0) {
      bool merge = true;
      for (int t = 0; t < tensors && merge; ++t) {
        merge = l.strides[t][nd - 1] == tensor(a, t).stride(d) * size;
      }
      if (merge) {
        l.sizes[nd - 1] *= size;
        for (int t = 0; t < tensors; ++t) l.strides[t][nd - 1] = tensor(a, t).stride(d);
        continue;
      }
    }
    l.sizes[nd] = size;
    for (int t = 0; t < tensors; ++t) l.strides[t][nd] = tensor(a, t).stride(d);
    ++nd;
  }
  l.ndim = nd;
}

Access access_of(const Layout& l, int t) {
  bool zero = true;
  bool linear = true;
  std::int64_t expected = 1;
  for (int d = l.ndim - 1; d >= 0; --d) {
    zero = zero && l.strides[t][d] == 0;
    linear = linear && l.strides[t][d] == expected;
    expected *= l.sizes[d];
  }
  if (linear) return Access::kLinear;  // includes the 0-d / single-element case
  return zero ? Access::kScalar : Access::kGather;
}

// Gathers (scatter=false) or scatters len elements starting at linear element e of tensor t
// between memory and buf.
void move_strided(const Layout& l, int t, float* base, std::int64_t e, std::int64_t len, float* buf,
                  bool scatter) {
  std::int64_t idx[TensorView::kMaxDims];
  std::int64_t rest = e;
  for (int d = l.ndim - 1; d >= 0; --d) {
    idx[d] = rest % l.sizes[d];
    rest /= l.sizes[d];
  }
  const int inner = l.ndim - 1;
  const std::int64_t s = l.strides[t][inner];
  std::int64_t pos = 0;
  while (pos < len) {
    std::int64_t off = 0;
    for (int d = 0; d < l.ndim; ++d) off += idx[d] * l.strides[t][d];
    const std::int64_t seg = std::min(len - pos, l.sizes[inner] - idx[inner]);
    float* p = base + off;
    if (scatter) {
      for (std::int64_t i = 0; i < seg; ++i) p[i * s] = buf[pos + i];
    } else {
      for (std::int64_t i = 0; i < seg; ++i) buf[pos + i] = p[i * s];
    }
    pos += seg;
    idx[inner] += seg;
    for (int d = inner; d > 0 && idx[d] == l.sizes[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

// The offset (elements) of linear element e in tensor t.
std::int64_t offset_of(const Layout& l, int t, std::int64_t e) {
  std::int64_t off = 0;
  for (int d = l.ndim - 1; d >= 0; --d) {
    off += e % l.sizes[d] * l.strides[t][d];
    e /= l.sizes[d];
  }
  return off;
}

// The elements [e, e + len) of tensor t read in place when they are one unit-stride run of
// its innermost collapsed dim (a bias broadcast over rows: each chunk within a row is the
// bias itself); null when they are not, and the caller gathers them.
const float* unit_stride_run(const Layout& l, int t, const float* base, std::int64_t e,
                             std::int64_t len) {
  const int inner = l.ndim - 1;
  if (inner < 0 || l.strides[t][inner] != 1 || e % l.sizes[inner] + len > l.sizes[inner]) {
    return nullptr;
  }
  return base + offset_of(l, t, e);
}

// Elements of a block below which it is evaluated one element at a time (no chunk buffers).
constexpr std::int64_t kScalarElems = 8;

float scalar_op(EwOp op, float a, float b) {
  switch (op) {
    case EwOp::kAdd:
      return a + b;
    case EwOp::kSub:
      return a - b;
    case EwOp::kMul:
      return a * b;
    case EwOp::kDiv:
      return a / b;
    case EwOp::kMax:
      return detail::max_f32(a, b);
    case EwOp::kNeg:
      return -a;
    case EwOp::kExp:
      return detail::exp_f32(a);
    case EwOp::kTanh:
      return detail::tanh_f32(a);
    case EwOp::kRelu:
      return detail::relu_f32(a);
    case EwOp::kGelu:
      return detail::gelu_f32(a);
    case EwOp::kGeluTanh:
      return detail::gelu_tanh_f32(a);
    case EwOp::kSigmoid:
      return detail::sigmoid_f32(a);
    case EwOp::kSilu:
      return a / (1.0F + detail::exp_f32(-a));
    default:
      return 0.0F;
  }
}

// A tiny block of linear or scalar operands (eager calls on a few elements): element by
// element, without the chunk buffers' 32 KiB stack frame.
__attribute__((noinline)) void run_block_scalar(const EwJob& job, std::int64_t begin,
                                                std::int64_t end) {
  const ElementwiseArgs& a = *job.args;
  const EwProgram& p = a.program;
  float* out = a.out.data_as<float>();
  for (std::int64_t e = begin; e < end; ++e) {
    float r[EwProgram::kMaxRegs] = {};
    for (int i = 0; i < p.size; ++i) {
      const EwInstr& c = p.code[static_cast<std::size_t>(i)];
      if (c.op == EwOp::kInput) {
        const float* in = a.inputs[c.a].data_as<const float>();
        r[c.dst] = job.access[c.a + 1] == Access::kLinear ? in[e] : in[0];
      } else if (c.op == EwOp::kScalar) {
        r[c.dst] = c.imm;
      } else {
        r[c.dst] = scalar_op(c.op, r[c.a], r[c.b]);
      }
    }
    out[e] = r[p.result];
  }
}

// A program that is one op on linear inputs into a linear out (an unfused add, relu, ...): one
// call over the whole block, no chunking. Returns false when the program is not of that form.
bool run_block_single_op(const EwJob& job, std::int64_t begin, std::int64_t end) {
  const ElementwiseArgs& a = *job.args;
  const EwProgram& p = a.program;
  const EwInstr& last = p.code[static_cast<std::size_t>(p.size - 1)];
  if (job.access[0] != Access::kLinear || last.dst != p.result || last.op == EwOp::kInput ||
      last.op == EwOp::kScalar) {
    return false;
  }
  // Pieces of 4 KiB: computed straight into out, or into an L1 buffer streamed out; fewer,
  // longer calls than the 256-element chunks of the general path.
  constexpr std::int64_t kPiece = 1024;
  alignas(64) float scalar_run[kPiece];  // a scalar operand (x * 0.5), broadcast over a piece
  const bool unary = last.op >= EwOp::kNeg;
  const float* operand[2] = {nullptr, nullptr};
  bool advances[2] = {true, true};
  for (int k = 0; k < (unary ? 1 : 2); ++k) {
    const int reg = k == 0 ? last.a : last.b;
    for (int i = 0; i < p.size - 1; ++i) {
      const EwInstr& c = p.code[static_cast<std::size_t>(i)];
      if (c.dst != reg) continue;
      if (c.op == EwOp::kInput && job.access[c.a + 1] == Access::kLinear) {
        operand[k] = a.inputs[c.a].data_as<const float>() + begin;
      } else if (c.op == EwOp::kScalar ||
                 (c.op == EwOp::kInput && job.access[c.a + 1] == Access::kScalar)) {
        if (operand[1 - k] == scalar_run) return false;  // both scalar: the general path
        std::fill(scalar_run, scalar_run + kPiece,
                  c.op == EwOp::kScalar ? c.imm : *a.inputs[c.a].data_as<const float>());
        operand[k] = scalar_run;
        advances[k] = false;
      }
    }
    if (operand[k] == nullptr) return false;
  }
  float* out = a.out.data_as<float>() + begin;
  if (unary && operand[0] == out) return false;  // in place: unary_run takes restrict pointers
  const std::int64_t n = end - begin;
  if (!job.stream && advances[0] && advances[1]) {
    if (unary) {
      detail::unary_run(last.op, operand[0], out, n);
    } else {
      detail::binary_run(last.op, operand[0], operand[1], out, n);
    }
    return true;
  }
  // Streamed on AVX-512: computed and stored in one pass, without the L1 piece buffer between
  // the two (a copy less per element); the ops without a vector form take the pieces.
  if (job.stream && detail::avx512_active() &&
      (unary ? detail::unary_stream_avx512(last.op, operand[0], out, n)
             : detail::binary_stream_avx512(last.op, operand[0], !advances[0], operand[1],
                                            !advances[1], out, n))) {
    detail::stream_fence();
    return true;
  }
  alignas(64) float piece[kPiece];
  for (std::int64_t e = 0; e < n; e += kPiece) {
    const std::int64_t len = std::min(kPiece, n - e);
    float* d = job.stream ? piece : out + e;
    const float* x = operand[0] + (advances[0] ? e : 0);
    if (unary) {
      detail::unary_run(last.op, x, d, len);
    } else {
      detail::binary_run(last.op, x, operand[1] + (advances[1] ? e : 0), d, len);
    }
    if (job.stream) detail::stream_store(out + e, piece, len);
  }
  if (job.stream) detail::stream_fence();
  return true;
}

// Rows shorter than this are not split into runs for the fused path (the chunk path gathers
// them instead).
constexpr std::int64_t kMinFusedRow = 64;

// AVX-512: the program evaluated in vector groups (Note [Fused vector groups]) over runs of
// the block in which every input is linear, a broadcast scalar, or along the innermost dim
// either one unit-stride run (a bias broadcast over rows) or one value (a per-row scalar, as
// x - mean[:, None]); out must be linear. Returns false, having done nothing, otherwise.
bool run_block_fused(const EwJob& job, std::int64_t begin, std::int64_t end) {
  const ElementwiseArgs& a = *job.args;
  if (!detail::avx512_active() || job.access[0] != Access::kLinear ||
      !detail::program_avx512_covers(a.program)) {
    return false;
  }
  Layout layout;
  std::int64_t row = 0;  // runs end at multiples of row (0: the block is one run)
  bool reread[kMaxTensors] = {};
  for (int t = 1; t < job.tensors; ++t) {
    if (job.access[t] != Access::kGather) continue;
    if (row == 0) {
      collapse(a, job.tensors, layout);
      row = layout.sizes[layout.ndim - 1];
      if (row < kMinFusedRow) return false;
    }
    const std::int64_t inner_stride = layout.strides[t][layout.ndim - 1];
    if (inner_stride != 0 && inner_stride != 1) return false;
    // A run that the next row reads again (Note [Re-read rows]).
    reread[t] = inner_stride == 1 && layout.ndim >= 2 && layout.strides[t][layout.ndim - 2] == 0;
  }
  detail::EwOperand in[EwProgram::kMaxInputs];
  float* out = a.out.data_as<float>();
  for (std::int64_t e = begin; e < end;) {
    const std::int64_t len = row == 0 ? end - e : std::min(end, (e / row + 1) * row) - e;
    for (int t = 1; t < job.tensors; ++t) {
      const float* base = a.inputs[static_cast<std::size_t>(t - 1)].data_as<const float>();
      detail::EwOperand& o = in[t - 1];
      switch (job.access[t]) {
        case Access::kLinear:
          o = {base + e, false};
          break;
        case Access::kScalar:
          o = {base, true};
          break;
        case Access::kGather:
          o = {base + offset_of(layout, t, e), layout.strides[t][layout.ndim - 1] == 0,
               reread[t]};
          break;
      }
    }
    detail::program_run_avx512(a.program, in, out + e, len, job.stream);
    e += len;
  }
  if (job.stream) detail::stream_fence();
  return true;
}

// Elements [begin, end) by interpreting the program chunk by chunk in registers: any
// layout (strided inputs gathered, a strided out scattered), any program.
void run_block_interpreted(const EwJob& job, std::int64_t begin, std::int64_t end, bool strided) {
  const ElementwiseArgs& a = *job.args;
  const EwProgram& p = a.program;
  const std::int64_t first_len = std::min(kChunk, end - begin);
  Layout layout;
  if (strided) collapse(a, job.tensors, layout);

  alignas(64) float regs[EwProgram::kMaxRegs][kChunk];
  const float* rp[EwProgram::kMaxRegs];
  // Registers constant over the block: scalars and broadcast-scalar inputs.
  for (int i = 0; i < p.size; ++i) {
    const EwInstr& c = p.code[static_cast<std::size_t>(i)];
    float v = 0.0F;
    if (c.op == EwOp::kScalar) {
      v = c.imm;
    } else if (c.op == EwOp::kInput && job.access[c.a + 1] == Access::kScalar) {
      v = *a.inputs[c.a].data_as<const float>();
    } else {
      continue;
    }
    std::fill(regs[c.dst], regs[c.dst] + first_len, v);
    rp[c.dst] = regs[c.dst];
  }

  float* out = a.out.data_as<float>();
  const EwInstr& last = p.code[static_cast<std::size_t>(p.size - 1)];
  const bool direct_result = last.dst == p.result && last.op != EwOp::kInput &&
                             last.op != EwOp::kScalar && job.access[0] == Access::kLinear &&
                             !job.stream;
  for (std::int64_t e = begin; e < end; e += kChunk) {
    const std::int64_t len = std::min(kChunk, end - e);
    bool written = false;
    for (int i = 0; i < p.size; ++i) {
      const EwInstr& c = p.code[static_cast<std::size_t>(i)];
      float* dst = regs[c.dst];
      if (c.op == EwOp::kInput) {
        const Access acc = job.access[c.a + 1];
        if (acc == Access::kLinear) {
          rp[c.dst] = a.inputs[c.a].data_as<const float>() + e;
        } else if (acc == Access::kGather) {
          const float* in = a.inputs[c.a].data_as<const float>();
          rp[c.dst] = unit_stride_run(layout, c.a + 1, in, e, len);
          if (rp[c.dst] == nullptr) {
            move_strided(layout, c.a + 1, const_cast<float*>(in), e, len, dst, false);
            rp[c.dst] = dst;
          }
        }
        continue;
      }
      if (c.op == EwOp::kScalar) continue;
      const bool unary = c.op >= EwOp::kNeg;
      // The last instruction writes straight into a linear out, unless a unary op's operand
      // is out itself (in-place): unary_run takes restrict pointers.
      if (i == p.size - 1 && direct_result && (!unary || rp[c.a] != out + e)) {
        dst = out + e;
        written = true;
      }
      if (unary) {
        detail::unary_run(c.op, rp[c.a], dst, len);
      } else {
        detail::binary_run(c.op, rp[c.a], rp[c.b], dst, len);
      }
      rp[c.dst] = dst;
    }
    if (written) continue;
    const float* res = rp[p.result];
    if (job.access[0] == Access::kLinear) {
      if (res == out + e) continue;
      if (job.stream) {
        detail::stream_store(out + e, res, len);
      } else {
        std::copy(res, res + len, out + e);
      }
    } else {
      move_strided(layout, 0, out, e, len, const_cast<float*>(res), true);
    }
  }
  if (job.stream) detail::stream_fence();
}

void run_block(const EwJob& job, std::int64_t block) {
  const std::int64_t begin = block * job.block_elems;
  const std::int64_t end = std::min(job.total, begin + job.block_elems);

  bool strided = false;
  for (int t = 0; t < job.tensors; ++t) strided = strided || job.access[t] == Access::kGather;
  if (!strided && !job.stream && end - begin <= kScalarElems) {
    run_block_scalar(job, begin, end);
    return;
  }
  if (!strided && run_block_single_op(job, begin, end)) return;
  if (run_block_fused(job, begin, end)) return;
  run_block_interpreted(job, begin, end, strided);
}

void ew_grid(std::int64_t numel, std::int64_t block_elems, Dim3& grid, Dim3& block) {
  block = {std::max<std::int64_t>(1, block_elems), 1, 1};
  grid = {std::max<std::int64_t>(1, ceil_div(numel, std::max<std::int64_t>(1, block_elems))), 1, 1};
}

// Whether `config` can run `numel` elements (-1: a call, whose grid is not checked); the
// tunables it reads go to block_elems/threads.
// The common case costs two lookups (eager calls of one element pay for every nanosecond);
// only a refusal consults the space for its reason.
Status check_config(std::int64_t numel, const LaunchConfig& config, std::int64_t& block_elems,
                    std::int64_t& threads,
                    bool* stream = nullptr) {
  // One pass over the params instead of a lookup per name.
  std::int64_t be = 0;
  std::int64_t th = 0;
  for (const auto& [name, value] : config.params()) {
    if (name.size() == 11 && std::memcmp(name.data(), "block_elems", 11) == 0) be = value;
    if (name.size() == 7 && std::memcmp(name.data(), "threads", 7) == 0) th = value;
    if (name.size() == 6 && std::memcmp(name.data(), "stream", 6) == 0 && stream != nullptr) {
      *stream = value == 1;
    }
  }
  if (be < 1 || th < 1) {
    Status st = elementwise_f32_cpu_descriptor().space.check(config);
    return st ? Status::unsupported("block_elems and threads must be >= 1") : st;
  }
  block_elems = be;
  threads = th;
  if (config.grid == Dim3{} && config.block == Dim3{}) return Status::ok();
  Dim3 grid;
  Dim3 block;
  ew_grid(numel < 0 ? 1 : numel, block_elems, grid, block);
  // numel < 0 (a call): only the block must agree. A fused chain's shape key need not name
  // every tensor of the call, so its grid may count other elements; the call's grid is ours.
  if (numel < 0) grid = config.grid;
  if (config.grid != grid || config.block != block) {
    LaunchConfig expected = config;
    expected.grid = grid;
    expected.block = block;
    return Status::unsupported("grid/block (" + config.str() +
                               ") do not match block_elems; expected " + expected.str());
  }
  return Status::ok();
}

// [lo, hi) bytes touched by a view, for the overlap check.
void extent(const TensorView& v, std::uintptr_t& lo, std::uintptr_t& hi) {
  std::int64_t min_off = 0;
  std::int64_t max_off = 0;
  for (int d = 0; d < v.ndim; ++d) {
    const std::int64_t span = (v.size(d) - 1) * v.stride(d);
    (span < 0 ? min_off : max_off) += span;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(v.data);
  lo = base + static_cast<std::uintptr_t>(min_off * 4);
  hi = base + static_cast<std::uintptr_t>(max_off * 4 + 4);
}

bool same_layout(const TensorView& a, const TensorView& b) {
  if (a.data != b.data) return false;
  for (int d = 0; d < a.ndim; ++d) {
    if (a.size(d) != 1 && a.stride(d) != b.stride(d)) return false;
  }
  return true;
}

}  // namespace

namespace detail {

void validate_ew_operands(const char* kernel, const TensorView& out,
                          const std::array<TensorView, EwProgram::kMaxInputs>& inputs,
                          const EwProgram& p) {
  KA_CHECK(out.dtype == DType::kFloat32, kernel, ": out has dtype ", long_name(out.dtype),
           "; this kernel takes float32");
  KA_CHECK(out.device.type == DeviceType::kCPU, kernel, ": out is on ", out.device.str(),
           "; this kernel runs on cpu");
  KA_CHECK(p.size >= 1 && p.size <= EwProgram::kMaxInstrs && p.regs <= EwProgram::kMaxRegs &&
               p.result >= 0 && p.result < p.regs && p.inputs >= 0 &&
               p.inputs <= EwProgram::kMaxInputs,
           kernel, ": malformed program ", p.str());
  for (int i = 0; i < p.size; ++i) {
    const EwInstr& c = p.code[static_cast<std::size_t>(i)];
    const bool unary = c.op >= EwOp::kNeg;
    const bool binary = c.op >= EwOp::kAdd && c.op <= EwOp::kMax;
    KA_CHECK(c.op <= EwOp::kSilu && c.dst < p.regs && (c.op != EwOp::kInput || c.a < p.inputs) &&
                 (!(unary || binary) || c.a < p.regs) && (!binary || c.b < p.regs),
             kernel, ": malformed instruction ", i, " in program ", p.str());
  }
  const bool empty = out.numel() == 0;
  KA_CHECK(empty || out.data != nullptr, kernel, ": out has no data");
  std::uintptr_t out_lo = 0;
  std::uintptr_t out_hi = 0;
  if (!empty) extent(out, out_lo, out_hi);
  for (int i = 0; i < p.inputs; ++i) {
    const TensorView& in = inputs[static_cast<std::size_t>(i)];
    KA_CHECK(in.dtype == DType::kFloat32, kernel, ": input ", i, " has dtype ", long_name(in.dtype),
             "; this kernel takes float32");
    KA_CHECK(in.device.type == DeviceType::kCPU, kernel, ": input ", i, " is on ", in.device.str(),
             "; this kernel runs on cpu");
    bool same = in.ndim == out.ndim;
    for (int d = 0; same && d < out.ndim; ++d) same = in.size(d) == out.size(d);
    KA_CHECK(same, kernel, ": input ", i, " has shape ", in.shape_str(), " but out has ",
             out.shape_str(), " (broadcast inputs with broadcast_view)");
    if (empty) continue;
    KA_CHECK(in.data != nullptr, kernel, ": input ", i, " has no data");
    std::uintptr_t lo = 0;
    std::uintptr_t hi = 0;
    extent(in, lo, hi);
    KA_CHECK(lo >= out_hi || hi <= out_lo || same_layout(in, out), kernel, ": input ", i,
             " partially overlaps out (only exact aliasing is allowed)");
  }
}

}  // namespace detail

namespace {

KernelDescriptor make_descriptor() {
  KernelDescriptor d;
  d.name = "ew_chain_f32";
  // 2: the `stream` tunable (Note [Streaming stores]).
  d.version = 2;
  d.ops = {"aten::add.Tensor", "aten::sub.Tensor", "aten::mul.Tensor", "aten::div.Tensor",
           "aten::maximum",    "aten::neg",        "aten::exp",        "aten::tanh",
           "aten::relu",       "aten::gelu",       "aten::sigmoid",    "aten::silu",
           "aten::pow.Tensor_Scalar", "aten::contiguous"};
  d.dtypes = {DType::kFloat32};
  d.device = DeviceType::kCPU;
  const auto threads = detail::cpu_thread_candidates();
  d.space = TunableSpace(
      {
          {"block_elems",
           {4096, 8192, 16384, 32768, 65536, 131072, 262144},
           "output elements per grid block"},
          {"threads", threads, "worker threads running the blocks"},
          {"stream", {0, 1},
           "1: write a contiguous out with streaming (non-temporal) stores, around the caches"},
      },
      {
          {"block_elems >= 1",
           [](const LaunchConfig& c) { return c.get_or("block_elems", 0) >= 1; }},
          {"threads >= 1", [](const LaunchConfig& c) { return c.get_or("threads", 0) >= 1; }},
          {"stream is 0 or 1",
           [](const LaunchConfig& c) {
             return c.get_or("stream", 0) == 0 || c.get_or("stream", 0) == 1;
           }},
      });
  d.complete = [](const ShapeKey& shape, const LaunchConfig& point) {
    LaunchConfig c = point;
    ew_grid(detail::broadcast_numel(shape), point.get_or("block_elems", 1), c.grid, c.block);
    return c;
  };
  d.can_run = [](const ShapeKey& shape, const LaunchConfig& config) -> Status {
    for (const auto& t : shape.args()) {
      if (t.dtype != DType::kFloat32) return Status::unsupported("only float32 is supported");
    }
    std::int64_t block_elems = 0;
    std::int64_t thread_count = 0;
    return check_config(detail::broadcast_numel(shape), config, block_elems, thread_count);
  };
  d.default_config = [](const ShapeKey& shape) {
    // Below ~32K elements (a few microseconds) one block on the calling thread: waking
    // workers costs more than it saves. Above, blocks of up to 64K elements (256 KiB of
    // output, L2-sized) with at least two blocks per thread for balance, on every core.
    const std::int64_t numel = detail::broadcast_numel(shape);
    const std::int64_t hw = cpu_thread_limit();
    LaunchConfig point;
    if (numel <= 32768) {
      point.set("block_elems", 32768).set("threads", 1);
    } else {
      std::int64_t b = 65536;
      while (b > 4096 && ceil_div(numel, b) < 2 * hw) b /= 2;
      point.set("block_elems", b).set("threads", std::min(hw, ceil_div(numel, b)));
    }
    // An output beyond the last-level cache goes around it (Note [Streaming stores]) for ops
    // whose time is memory. Transcendental ones (exp, tanh, gelu, sigmoid, silu, and fused
    // chains, which usually hold one) are bound by their arithmetic on one core, where the
    // read-for-ownership overlaps it and streaming only adds the wait on the write-combining
    // buffers; on two cores the memory is the bound again. Through the chunk buffer (no
    // AVX-512) streaming costs the transcendental ops more than it saves even there, so
    // stream_default asks for AVX-512.
    const std::string& op = shape.op();
    const bool light = op == "aten::add.Tensor" || op == "aten::add.Scalar" ||
                       op == "aten::sub.Tensor" || op == "aten::mul.Tensor" ||
                       op == "aten::mul.Scalar" || op == "aten::div.Tensor" ||
                       op == "aten::maximum" || op == "aten::neg" || op == "aten::relu";
    point.set("stream", detail::stream_default(4.0 * static_cast<double>(numel), light,
                                               point.get_or("threads", 1)));
    LaunchConfig c = point;
    ew_grid(numel, point.get_or("block_elems", 1), c.grid, c.block);
    return c;
  };
  d.flop_count = [](const ShapeKey& shape) {
    return static_cast<double>(detail::broadcast_numel(shape));
  };
  d.byte_count = detail::elementwise_bytes;
  return d;
}

}  // namespace

const KernelDescriptor& elementwise_f32_cpu_descriptor() {
  static const KernelDescriptor d = make_descriptor();
  return d;
}

Status prepare_elementwise_f32_cpu(const ElementwiseArgs& args, const LaunchConfig& config,
                                   CpuLaunch& launch) {
  detail::validate_ew_operands("elementwise", args.out, args.inputs, args.program);
  const std::int64_t total = args.out.numel();
  std::int64_t threads = 1;
  EwJob job{};
  bool stream = false;
  if (Status st = check_config(-1, config, job.block_elems, threads, &stream); !st) return st;
  job.args = &args;
  job.total = total;
  job.tensors = 1 + args.program.inputs;
  Layout layout;
  collapse(args, job.tensors, layout);
  for (int t = 0; t < job.tensors; ++t) job.access[t] = access_of(layout, t);
  KA_CHECK(job.access[0] != Access::kScalar, "elementwise: out ", args.out.shape_str(),
           " has stride 0 on a broadcast dim (its elements overlap)");
  job.stream = stream && job.access[0] == Access::kLinear;
  launch.bind<EwJob, run_block>(job, total == 0 ? 0 : ceil_div(total, job.block_elems),
                                static_cast<int>(threads));
  return Status::ok();
}

Status elementwise_f32_cpu(const ElementwiseArgs& args, const LaunchConfig& config) {
  CpuLaunch launch;
  if (Status st = prepare_elementwise_f32_cpu(args, config, launch); !st) return st;
  run_on_pool(launch);
  return Status::ok();
}

}  // namespace ka::kernels
