// ka's fused CPU attention over its tunables, at the heads ka-bench's fused suite runs: 12
// heads of 64, softmax(q @ kᵀ * 0.125 + mask) @ v, with BERT's padding mask (0 / -1e4 per
// key, broadcast over heads and queries) or GPT-2's causal mask (-inf above the diagonal,
// [S, S] broadcast over heads), or none. Torch-free: for looking inside the kernel, where
// ka-bench --suite fused compares it with ka's unfused kernels and libtorch.
//
//   ka_attention_bench --benchmark_filter='s:512/'
//   ka_attention_bench --benchmark_filter='s:512/mask:1/bq:96' --benchmark_repetitions=5
//   KA_NUM_THREADS=1 ka_attention_bench ...   (the default config planned for one thread)
// bq / bk 0: the descriptor's default for that argument.
#include <ka/core/launch_config.hpp>
#include <ka/core/shape_key.hpp>
#include <ka/kernels/attention.hpp>
#include <ka/kernels/tensor_view.hpp>

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

enum MaskKind : std::int64_t { kNoMask = 0, kPadding = 1, kCausal = 2 };

constexpr std::int64_t kHeads = 12;
constexpr std::int64_t kHeadDim = 64;

std::vector<float> random_floats(std::int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0F, 1.0F);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = g(rng);
  return v;
}

// The [S, S] mask of `kind`: padding masks the last eighth of the keys with -1e4 (BERT's
// extended attention mask), causal masks every key after the query with -inf.
std::vector<float> mask_values(MaskKind kind, std::int64_t s) {
  std::vector<float> m(static_cast<std::size_t>(s * s), 0.0F);
  for (std::int64_t i = 0; i < s; ++i) {
    for (std::int64_t j = 0; j < s; ++j) {
      const bool masked = kind == kPadding ? j >= s - s / 8 : j > i;
      if (masked) {
        m[static_cast<std::size_t>(i * s + j)] =
            kind == kPadding ? -1e4F : -std::numeric_limits<float>::infinity();
      }
    }
  }
  return m;
}

void BM_Attention(benchmark::State& state) {
  const std::int64_t s = state.range(0);
  const auto kind = static_cast<MaskKind>(state.range(1));
  std::mt19937 rng(7);
  std::vector<float> q = random_floats(kHeads * s * kHeadDim, rng);
  std::vector<float> kt = random_floats(kHeads * kHeadDim * s, rng);
  std::vector<float> v = random_floats(kHeads * s * kHeadDim, rng);
  std::vector<float> mask = mask_values(kind, s);
  std::vector<float> out(static_cast<std::size_t>(kHeads * s * kHeadDim));
  const ka::Device cpu = ka::Device::cpu();
  using ka::kernels::TensorView;
  ka::kernels::AttentionArgs args;
  args.out = TensorView::contiguous(out.data(), ka::DType::kFloat32, cpu, {kHeads, s, kHeadDim});
  args.query = TensorView::contiguous(q.data(), ka::DType::kFloat32, cpu, {kHeads, s, kHeadDim});
  args.key_t = TensorView::contiguous(kt.data(), ka::DType::kFloat32, cpu, {kHeads, kHeadDim, s});
  args.value = TensorView::contiguous(v.data(), ka::DType::kFloat32, cpu, {kHeads, s, kHeadDim});
  args.scale = 0.125F;
  std::vector<ka::TensorSpec> metas = {{ka::DType::kFloat32, {kHeads, s, kHeadDim}, false},
                                       {ka::DType::kFloat32, {kHeads, kHeadDim, s}, false},
                                       {ka::DType::kFloat32, {kHeads, s, kHeadDim}, false}};
  if (kind != kNoMask) {
    args.mask = TensorView::make(mask.data(), ka::DType::kFloat32, cpu, {kHeads, s, s}, {0, s, 1});
    metas.push_back({ka::DType::kFloat32, {kHeads, s, s}, false});
  }
  const ka::ShapeKey key("fused::attention", metas);
  const auto& d = ka::kernels::attention_f32_cpu_descriptor();
  ka::LaunchConfig point = d.default_config(key);
  if (state.range(2) != 0) point.set("block_q", state.range(2));
  if (state.range(3) != 0) point.set("block_k", state.range(3));
  const ka::LaunchConfig config = d.complete(key, point);
  if (const ka::Status can = d.can_run(key, config); !can) {
    state.SkipWithError(can.reason().c_str());
    return;
  }
  for (auto _ : state) {
    if (!ka::kernels::attention_f32_cpu(args, config)) state.SkipWithError("config refused");
    benchmark::ClobberMemory();
  }
  state.SetLabel(config.str());
  state.counters["GFLOP/s"] = benchmark::Counter(d.flop_count(key),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

// BERT-base at 512 tokens with its padding mask, GPT-2 at 1024 with its causal mask, each at
// the default config and over the block sizes; 512 unmasked as the plain kernel's figure.
void Configs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"s", "mask", "bq", "bk"});
  for (const auto& [s, kind] : {std::pair{512, kPadding}, std::pair{1024, kCausal},
                                std::pair{512, kNoMask}}) {
    b->Args({s, kind, 0, 0});
    for (const std::int64_t bq : {24, 48, 96, 192}) {
      for (const std::int64_t bk : {64, 128, 256, 512}) b->Args({s, kind, bq, bk});
    }
  }
}
BENCHMARK(BM_Attention)->Apply(Configs)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
