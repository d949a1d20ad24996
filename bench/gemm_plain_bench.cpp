// A plain Google Benchmark loop over ka's CPU GEMM, for checking ka-bench's measurement: the
// same kernel, inputs and configuration (the descriptor's default) as ka-bench's matmul cases,
// timed by Google Benchmark's own loop instead of ka-bench's manual timing.
//
//   ka_gemm_plain_bench --benchmark_repetitions=5 --benchmark_filter=512
//   ka_gemm_plain_bench --benchmark_filter='m:128/'   (prefill linears; mat2:2 packed ahead)
//   KA_NUM_THREADS=1 ka_gemm_plain_bench ...   (the default config planned for one thread, as
//                                               ka-bench --threads 1 uses)
//   KA_GEMM_PLAIN_SET='micro_n=48 tile_k=384' ka_gemm_plain_bench ...   (tunables replaced in
//                                               every case's default config, to try one by hand)
#include <ka/core/launch_config.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/kernels/tensor_view.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

namespace {

struct AlignedFloats {
  explicit AlignedFloats(std::int64_t n)
      : size(n),
        ptr(static_cast<float*>(std::aligned_alloc(64, static_cast<std::size_t>((n * 4 + 63) / 64 * 64)))) {}
  ~AlignedFloats() { std::free(ptr); }
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  float* data() const { return ptr; }
  std::int64_t size;
  float* ptr;
};

void BM_GemmPlain(benchmark::State& state) {
  const std::int64_t m = state.range(0);
  const std::int64_t k = state.range(1);
  const std::int64_t n = state.range(2);
  const bool with_bias = state.range(3) != 0;  // aten::addmm (1) or aten::mm (0)
  // mat2 as: 0 row-major; 1 a linear layer's weight [n, k] transposed; 2 that, packed ahead as
  // a frozen module's weight is (Note [Constant weights packed once]).
  const std::int64_t form = state.range(4);
  // 1: a GELU epilogue (the fused MLP's first linear), 0: none.
  const bool gelu = state.range(5) != 0;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  // 64-byte aligned, as libtorch's allocator (and so ka-bench's tensors) gives.
  AlignedFloats a(m * k), b(k * n), bias(n), c(m * n);
  for (auto* v : {&a, &b, &bias}) {
    for (std::int64_t i = 0; i < v->size; ++i) v->data()[i] = u(rng);
  }
  const ka::Device cpu = ka::Device::cpu();
  ka::kernels::AddmmArgs args;
  args.out = ka::kernels::TensorView::contiguous(c.data(), ka::DType::kFloat32, cpu, {m, n});
  args.mat1 = ka::kernels::TensorView::contiguous(a.data(), ka::DType::kFloat32, cpu, {m, k});
  args.mat2 = form == 0 ? ka::kernels::TensorView::contiguous(b.data(), ka::DType::kFloat32, cpu, {k, n})
                        : ka::kernels::TensorView::make(b.data(), ka::DType::kFloat32, cpu, {k, n}, {1, k});
  if (with_bias) {
    args.self = ka::kernels::TensorView::contiguous(bias.data(), ka::DType::kFloat32, cpu, {n});
  } else {
    args.beta = 0.0F;
  }
  if (gelu) args.epilogue = ka::kernels::Epilogue::kGelu;
  const auto& d = ka::kernels::gemm_f32_cpu_descriptor();
  const ka::ShapeKey key = ka::kernels::addmm_shape_key(m, k, n, with_bias);
  ka::LaunchConfig config = d.default_config(key);
  if (const char* set = std::getenv("KA_GEMM_PLAIN_SET"); set != nullptr && *set != '\0') {
    // The tunables of the text form ("name=value ..."), then grid and block derived again.
    const ka::LaunchConfig wanted = ka::LaunchConfig::parse(set);
    for (const auto& [name, value] : wanted.params()) config.set(name, value);
    config = d.complete(key, config);
    if (const ka::Status ok = d.can_run(key, config); !ok.is_ok()) {
      state.SkipWithError(("KA_GEMM_PLAIN_SET: " + ok.reason()).c_str());
      return;
    }
  }
  std::vector<float> packed;
  if (form == 2) {
    const auto layout = ka::kernels::gemm_f32_cpu_mat2_layout(args, config);
    if (!layout) {
      state.SkipWithError("the default config packs no mat2");
      return;
    }
    packed.resize(static_cast<std::size_t>(layout->floats()));
    ka::kernels::pack_gemm_f32_cpu_mat2(args, *layout, packed.data());
    args.mat2_packed = {packed.data(), *layout};
  }
  for (auto _ : state) {
    if (!ka::kernels::gemm_f32_cpu(args, config)) state.SkipWithError("config refused");
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(m * n * k),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
// ka-bench matmul cases: square_512, 1024 and 2048, bert_ffn_up_512, gpt2_mlp_down_1024,
// llama7b decode 16 (qkvo and MLP up) and decode 1 (MLP up and qkvo), and a decode-16 shape
// whose B (1 MiB) stays in L2, to tell the skinny path's arithmetic from its reading of B;
// then a 128-token prefill's linear layers (GPT-2/BERT MLP up and down, QKV) with the weight
// transposed, packed per call and packed ahead; and a 512-token prefill's MLP up the same ways,
// then packed ahead with and without its GELU epilogue (BERT's at 512 tokens, GPT-2's at 1024
// with the erf GELU: the epilogue's cost is the difference).
BENCHMARK(BM_GemmPlain)
    ->ArgNames({"m", "k", "n", "bias", "mat2", "gelu"})
    ->Args({512, 512, 512, 0, 0, 0})
    ->Args({1024, 1024, 1024, 0, 0, 0})
    ->Args({2048, 2048, 2048, 0, 0, 0})
    ->Args({512, 768, 3072, 1, 0, 0})
    ->Args({1024, 3072, 768, 1, 0, 0})
    ->Args({16, 4096, 4096, 0, 0, 0})
    ->Args({16, 4096, 11008, 0, 0, 0})
    ->Args({1, 4096, 11008, 0, 0, 0})
    ->Args({1, 4096, 4096, 0, 0, 0})
    ->Args({16, 256, 1024, 0, 0, 0})
    ->Args({128, 768, 3072, 1, 1, 0})
    ->Args({128, 768, 3072, 1, 2, 0})
    ->Args({128, 3072, 768, 1, 1, 0})
    ->Args({128, 3072, 768, 1, 2, 0})
    ->Args({128, 768, 2304, 1, 1, 0})
    ->Args({128, 768, 2304, 1, 2, 0})
    ->Args({512, 768, 3072, 1, 1, 0})
    ->Args({512, 768, 3072, 1, 2, 0})
    ->Args({512, 768, 3072, 1, 2, 1})
    ->Args({1024, 768, 3072, 1, 2, 0})
    ->Args({1024, 768, 3072, 1, 2, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
