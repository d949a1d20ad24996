// ka_gpu_bench: the GPU figures of the CUDA backend on one page, timed with CUDA events (median
// of repeated launches after warm-up), torch-free so it builds and runs wherever nvcc and a
// driver are:
//   1. the device and its copy bandwidth (device-to-device cudaMemcpy, bytes read + written);
//   2. ka's element-wise kernel (relu and add over 256M floats), every config of its space,
//      as % of that bandwidth;
//   3. ka's SGEMM swept over its whole space at a few shapes against cuBLAS's fp32 SGEMM
//      (no TF32), the best config checked against cuBLAS's result;
//   4. ka's bf16 tensor-core GEMM swept the same way against cuBLAS's (cublasGemmEx: bf16 in
//      and out, float compute);
//   5. CUPTI's kernel durations against CUDA events over the same launches.
// Without a usable device it says why and exits 0. scripts/device-check.sh runs it.
//   ka_gpu_bench [--quick]     (--quick: one GEMM shape and fewer repetitions)
#include <ka/core/error.hpp>
#include <ka/executor/cuda_executor.hpp>
#include <ka/kernels/cuda_limits.hpp>
#include <ka/kernels/elementwise.hpp>
#include <ka/kernels/gemm.hpp>
#include <ka/kernels/tensor_view.hpp>
#include <ka/profiler/cupti_profiler.hpp>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
  }
}

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(s));
  }
}

// A device array of floats.
class DeviceFloats {
 public:
  explicit DeviceFloats(std::size_t n) : n_(n) {
    check(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(float)), "cudaMalloc");
  }
  ~DeviceFloats() { cudaFree(p_); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  [[nodiscard]] float* get() const { return p_; }
  [[nodiscard]] std::size_t size() const { return n_; }
  void upload(const std::vector<float>& h) const {
    check(cudaMemcpy(p_, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
  }
  [[nodiscard]] std::vector<float> download() const {
    std::vector<float> h(n_);
    check(cudaMemcpy(h.data(), p_, n_ * sizeof(float), cudaMemcpyDeviceToHost), "download");
    return h;
  }

 private:
  float* p_ = nullptr;
  std::size_t n_;
};

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// Median milliseconds of `launch` over `reps` timed launches (each between two events), after
// `warmup` untimed ones.
double median_ms(const std::function<void()>& launch, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) launch();
  check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t a;
  cudaEvent_t b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(a), "record");
    launch();
    check(cudaEventRecord(b), "record");
    check(cudaEventSynchronize(b), "sync");
    float t = 0.0F;
    check(cudaEventElapsedTime(&t, a, b), "elapsed");
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

ka::kernels::TensorView device_view(float* p, std::initializer_list<std::int64_t> sizes) {
  return ka::kernels::TensorView::contiguous(p, ka::DType::kFloat32, ka::Device::cuda(0), sizes);
}

double copy_bandwidth(int reps) {
  const std::size_t n = std::size_t{256} << 20;  // 1 GiB each way
  DeviceFloats src(n);
  DeviceFloats dst(n);
  check(cudaMemset(src.get(), 0, n * sizeof(float)), "memset");
  const double ms = median_ms(
      [&] { check(cudaMemcpyAsync(dst.get(), src.get(), n * sizeof(float), cudaMemcpyDeviceToDevice), "copy"); },
      3, reps);
  return 2.0 * static_cast<double>(n * sizeof(float)) / (ms * 1e-3) / 1e9;
}

void elementwise(double copy_gbps, int reps) {
  using namespace ka::kernels;
  const std::int64_t n = std::int64_t{256} << 20;
  DeviceFloats x(static_cast<std::size_t>(n));
  DeviceFloats y(static_cast<std::size_t>(n));
  DeviceFloats out(static_cast<std::size_t>(n));
  check(cudaMemset(x.get(), 0, x.size() * sizeof(float)), "memset");
  check(cudaMemset(y.get(), 0, y.size() * sizeof(float)), "memset");
  const KernelDescriptor& d = elementwise_f32_cuda_descriptor();
  for (const bool binary : {false, true}) {
    EwProgram p;
    if (binary) {
      p.set_result(p.binary(EwOp::kAdd, p.input(0), p.input(1)));
    } else {
      p.set_result(p.unary(EwOp::kRelu, p.input(0)));
    }
    ElementwiseArgs args;
    args.out = device_view(out.get(), {n});
    args.inputs[0] = device_view(x.get(), {n});
    if (binary) args.inputs[1] = device_view(y.get(), {n});
    args.program = p;
    const ka::ShapeKey key(binary ? "aten::add.Tensor" : "aten::relu",
                           binary ? std::vector<ka::TensorSpec>{{ka::DType::kFloat32, {n}, true},
                                                               {ka::DType::kFloat32, {n}, true}}
                                  : std::vector<ka::TensorSpec>{{ka::DType::kFloat32, {n}, true}});
    const double bytes = 4.0 * static_cast<double>(n) * (binary ? 3.0 : 2.0);
    double best = 1e30;
    std::string best_config;
    for (const ka::LaunchConfig& point : d.space.enumerate()) {
      const ka::LaunchConfig full = d.complete(key, point);
      if (!d.can_run(key, full)) continue;
      const double ms = median_ms([&] { (void)elementwise_f32_cuda(args, full, nullptr); }, 2, reps);
      if (ms < best) {
        best = ms;
        best_config = full.str();
      }
    }
    const ka::LaunchConfig def = d.default_config(key);
    const double def_ms = median_ms([&] { (void)elementwise_f32_cuda(args, def, nullptr); }, 2, reps);
    const auto pct = [&](double ms) { return bytes / (ms * 1e-3) / 1e9 / copy_gbps * 100.0; };
    std::printf("  %-5s 256M: default %.3f ms (%.0f%% of copy), best %.3f ms (%.0f%%) at %s\n",
                binary ? "add" : "relu", def_ms, pct(def_ms), best, pct(best), best_config.c_str());
  }
}

struct GemmFigures {
  double cublas_ms = 0.0;
  double default_ms = 0.0;
  double best_ms = 0.0;
  std::string best_config;
  double max_rel_error = 0.0;
  int configs = 0;
};

// The fastest configuration of d's space for `key` (ms_of times one), counted and noted in f.
ka::LaunchConfig sweep(const ka::kernels::KernelDescriptor& d, const ka::ShapeKey& key,
                       GemmFigures& f,
                       const std::function<double(const ka::LaunchConfig&)>& ms_of) {
  f.best_ms = 1e30;
  ka::LaunchConfig best;
  for (const ka::LaunchConfig& point : d.space.enumerate()) {
    const ka::LaunchConfig full = d.complete(key, point);
    if (!d.can_run(key, full)) continue;
    ++f.configs;
    const double ms = ms_of(full);
    if (ms < f.best_ms) {
      f.best_ms = ms;
      best = full;
    }
  }
  if (f.configs == 0) throw std::runtime_error(d.name + ": no configuration can run here");
  f.best_config = best.str();
  return best;
}

// max |got - want| / max |want| (1e30 where got is not finite).
double max_rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double norm = 0.0;
  for (const float w : want) norm = std::max(norm, static_cast<double>(std::fabs(w)));
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e =
        std::isfinite(got[i]) ? std::fabs(got[i] - want[i]) / std::max(norm, 1e-30) : 1e30;
    worst = std::max(worst, e);
  }
  return worst;
}

GemmFigures sgemm(cublasHandle_t blas, std::int64_t m, std::int64_t k, std::int64_t nn, int reps) {
  using namespace ka::kernels;
  DeviceFloats a(static_cast<std::size_t>(m * k));
  DeviceFloats b(static_cast<std::size_t>(k * nn));
  DeviceFloats c(static_cast<std::size_t>(m * nn));
  DeviceFloats ref(static_cast<std::size_t>(m * nn));
  a.upload(random_floats(a.size(), 1));
  b.upload(random_floats(b.size(), 2));
  GemmFigures f;
  const float one = 1.0F;
  const float zero = 0.0F;
  // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ.
  const auto run_cublas = [&] {
    check(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(nn), static_cast<int>(m),
                      static_cast<int>(k), &one, b.get(), static_cast<int>(nn), a.get(),
                      static_cast<int>(k), &zero, ref.get(), static_cast<int>(nn)),
          "cublasSgemm");
  };
  f.cublas_ms = median_ms(run_cublas, 3, reps);
  AddmmArgs args;
  args.out = device_view(c.get(), {m, nn});
  args.mat1 = device_view(a.get(), {m, k});
  args.mat2 = device_view(b.get(), {k, nn});
  args.beta = 0.0F;
  const KernelDescriptor& d = gemm_f32_cuda_descriptor();
  const ka::ShapeKey key = addmm_shape_key(m, k, nn, false);
  const ka::LaunchConfig best = sweep(d, key, f, [&](const ka::LaunchConfig& config) {
    return median_ms([&] { (void)gemm_f32_cuda(args, config, nullptr); }, 1, reps);
  });
  const ka::LaunchConfig def = d.default_config(key);
  f.default_ms = median_ms([&] { (void)gemm_f32_cuda(args, def, nullptr); }, 2, reps);
  // The best config's output against cuBLAS's: ‖ka − cuBLAS‖ / ‖cuBLAS‖ per element, max.
  check(cudaMemset(c.get(), 0xff, c.size() * sizeof(float)), "poison");  // NaN everywhere
  if (!gemm_f32_cuda(args, best, nullptr)) throw std::runtime_error("best config refused");
  check(cudaDeviceSynchronize(), "sync");
  f.max_rel_error = max_rel_error(c.download(), ref.download());
  return f;
}

// bf16 values on the device (uploaded from floats, rounded to nearest).
class DeviceBf16 {
 public:
  explicit DeviceBf16(const std::vector<float>& h) : n_(h.size()) {
    check(cudaMalloc(reinterpret_cast<void**>(&p_), n_ * sizeof(__nv_bfloat16)), "cudaMalloc");
    std::vector<__nv_bfloat16> b(n_);
    for (std::size_t i = 0; i < n_; ++i) b[i] = __float2bfloat16(h[i]);
    check(cudaMemcpy(p_, b.data(), n_ * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice), "upload");
  }
  ~DeviceBf16() { cudaFree(p_); }
  DeviceBf16(const DeviceBf16&) = delete;
  DeviceBf16& operator=(const DeviceBf16&) = delete;
  [[nodiscard]] __nv_bfloat16* get() const { return p_; }
  [[nodiscard]] std::vector<float> download() const {
    std::vector<__nv_bfloat16> b(n_);
    check(cudaMemcpy(b.data(), p_, n_ * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost), "download");
    std::vector<float> h(n_);
    for (std::size_t i = 0; i < n_; ++i) h[i] = __bfloat162float(b[i]);
    return h;
  }

 private:
  __nv_bfloat16* p_ = nullptr;
  std::size_t n_;
};

ka::kernels::TensorView bf16_view(__nv_bfloat16* p, std::initializer_list<std::int64_t> sizes) {
  return ka::kernels::TensorView::contiguous(p, ka::DType::kBFloat16, ka::Device::cuda(0), sizes);
}

// ka's bf16 GEMM over its space against cublasGemmEx (bf16 A, B, C; float compute; tensor
// cores as cuBLAS chooses); the error is the best config's against cuBLAS's output.
GemmFigures bf16_gemm(cublasHandle_t blas, std::int64_t m, std::int64_t k, std::int64_t nn,
                      int reps) {
  using namespace ka::kernels;
  const DeviceBf16 a(random_floats(static_cast<std::size_t>(m * k), 3));
  const DeviceBf16 b(random_floats(static_cast<std::size_t>(k * nn), 4));
  const DeviceBf16 c(std::vector<float>(static_cast<std::size_t>(m * nn), 0.0F));
  const DeviceBf16 ref(std::vector<float>(static_cast<std::size_t>(m * nn), 0.0F));
  GemmFigures f;
  const float one = 1.0F;
  const float zero = 0.0F;
  const auto run_cublas = [&] {  // row-major C = A·B as column-major Cᵀ = Bᵀ·Aᵀ
    check(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(nn), static_cast<int>(m),
                       static_cast<int>(k), &one, b.get(), CUDA_R_16BF, static_cast<int>(nn),
                       a.get(), CUDA_R_16BF, static_cast<int>(k), &zero, ref.get(), CUDA_R_16BF,
                       static_cast<int>(nn), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
  };
  f.cublas_ms = median_ms(run_cublas, 3, reps);
  AddmmArgs args;
  args.out = bf16_view(c.get(), {m, nn});
  args.mat1 = bf16_view(a.get(), {m, k});
  args.mat2 = bf16_view(b.get(), {k, nn});
  const KernelDescriptor& d = gemm_bf16_cuda_descriptor();
  const ka::ShapeKey key = mm_bf16_shape_key(m, k, nn);
  const ka::LaunchConfig best = sweep(d, key, f, [&](const ka::LaunchConfig& config) {
    return median_ms([&] { (void)gemm_bf16_cuda(args, config, nullptr); }, 1, reps);
  });
  const ka::LaunchConfig def = d.default_config(key);
  f.default_ms = median_ms([&] { (void)gemm_bf16_cuda(args, def, nullptr); }, 2, reps);
  check(cudaMemset(c.get(), 0xff, static_cast<std::size_t>(m * nn) * 2), "poison");  // NaNs
  if (!gemm_bf16_cuda(args, best, nullptr)) throw std::runtime_error("best config refused");
  check(cudaDeviceSynchronize(), "sync");
  f.max_rel_error = max_rel_error(c.download(), ref.download());
  return f;
}

// CUPTI's kernel durations against CUDA events over the same 20 SGEMM launches.
void cupti_vs_events(std::int64_t n) {
  using namespace ka::kernels;
  DeviceFloats a(static_cast<std::size_t>(n * n));
  DeviceFloats b(static_cast<std::size_t>(n * n));
  DeviceFloats c(static_cast<std::size_t>(n * n));
  check(cudaMemset(a.get(), 0, a.size() * sizeof(float)), "memset");
  check(cudaMemset(b.get(), 0, b.size() * sizeof(float)), "memset");
  AddmmArgs args;
  args.out = device_view(c.get(), {n, n});
  args.mat1 = device_view(a.get(), {n, n});
  args.mat2 = device_view(b.get(), {n, n});
  args.beta = 0.0F;
  const ka::LaunchConfig config = gemm_f32_cuda_descriptor().default_config(addmm_shape_key(n, n, n, false));
  (void)gemm_f32_cuda(args, config, nullptr);
  check(cudaDeviceSynchronize(), "warm-up");
  ka::profiler::CuptiProfiler gpu;
  if (const ka::Status st = gpu.start(); !st) {
    std::printf("  CUPTI: not available: %s\n", st.reason().c_str());
    return;
  }
  constexpr int kLaunches = 20;
  cudaEvent_t e0;
  cudaEvent_t e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  std::vector<cudaEvent_t> marks(kLaunches + 1);
  for (auto& e : marks) check(cudaEventCreate(&e), "event");
  check(cudaEventRecord(marks[0]), "record");
  for (int i = 0; i < kLaunches; ++i) {
    (void)gemm_f32_cuda(args, config, nullptr);
    check(cudaEventRecord(marks[static_cast<std::size_t>(i) + 1]), "record");
  }
  check(cudaDeviceSynchronize(), "sync");
  gpu.stop();
  double events_ms = 0.0;
  for (int i = 0; i < kLaunches; ++i) {
    float t = 0.0F;
    check(cudaEventElapsedTime(&t, marks[static_cast<std::size_t>(i)], marks[static_cast<std::size_t>(i) + 1]), "elapsed");
    events_ms += t;
  }
  double cupti_ms = 0.0;
  int kernels = 0;
  for (const auto& act : gpu.take()) {
    if (act.kind != ka::profiler::GpuActivityKind::kKernel) continue;
    cupti_ms += static_cast<double>(act.duration_ns()) * 1e-6;
    ++kernels;
  }
  for (auto& e : marks) cudaEventDestroy(e);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::printf("  %d launches of SGEMM %lld^3: events %.3f ms, CUPTI %d kernel records %.3f ms: "
              "CUPTI / events = %.4f (dropped records: %llu)\n",
              kLaunches, static_cast<long long>(n), events_ms, kernels, cupti_ms,
              events_ms > 0 ? cupti_ms / events_ms : 0.0,
              static_cast<unsigned long long>(gpu.dropped_records()));
}

}  // namespace

void print_header() {
  std::printf("  %-16s %10s %10s %10s %8s %8s %10s  %s\n", "M x K x N", "cuBLAS ms", "default",
              "best", "best/cB", "TFLOP/s", "rel err", "best config");
}

// A GEMM table row: times, ka's best throughput relative to cuBLAS's (cuBLAS ms / best ms).
void print_row(const std::array<std::int64_t, 3>& s, const GemmFigures& f) {
  const double flop = 2.0 * static_cast<double>(s[0] * s[1] * s[2]);
  const std::string shape =
      std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]);
  std::printf("  %-16s %10.3f %10.3f %10.3f %7.2fx %8.1f %10.2e  %s (%d configs)\n",
              shape.c_str(), f.cublas_ms, f.default_ms, f.best_ms, f.cublas_ms / f.best_ms,
              flop / (f.best_ms * 1e-3) / 1e12, f.max_rel_error, f.best_config.c_str(), f.configs);
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (std::string why; !ka::executor::cuda_device_available(&why)) {
    std::printf("ka_gpu_bench: no usable CUDA device (%s); nothing measured\n", why.c_str());
    return 0;
  }
  try {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    int runtime = 0;
    int driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    std::printf("device: %s, sm_%d%d, %d SMs, %.0f MiB, L2 %d KiB; runtime %d, driver %d\n",
                prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                static_cast<double>(prop.totalGlobalMem) / (1 << 20), prop.l2CacheSize / 1024,
                runtime, driver);
    if (const auto fp = ka::kernels::current_cuda_fingerprint()) {
      std::printf("fingerprint (what tuned entries are keyed by): %s\n", fp->key().c_str());
    }
    const int reps = quick ? 5 : 15;
    const double copy = copy_bandwidth(reps);
    std::printf("copy bandwidth (device-to-device cudaMemcpy of 1 GiB, bytes read + written, "
                "median of %d): %.0f GB/s\n", reps, copy);
    std::printf("element-wise (ka ew_chain_f32 CUDA, every config; CUDA events, median of %d):\n", reps);
    elementwise(copy, reps);
    cublasHandle_t blas = nullptr;
    check(cublasCreate(&blas), "cublasCreate");
    check(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");  // fp32, no TF32
    std::printf("SGEMM fp32, ka (every config of its space) against cuBLAS (no TF32), median of %d:\n",
                reps);
    print_header();
    std::vector<std::array<std::int64_t, 3>> shapes = {{4096, 4096, 4096}};
    if (!quick) {
      shapes.push_back({2048, 2048, 2048});
      shapes.push_back({1024, 4096, 4096});
      shapes.push_back({512, 768, 3072});
    }
    for (const auto& s : shapes) print_row(s, sgemm(blas, s[0], s[1], s[2], reps));
    check(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    std::printf("bf16 GEMM (float accumulation, bf16 out), ka's WMMA kernel (every config) "
                "against cublasGemmEx, median of %d:\n", reps);
    print_header();
    for (const auto& s : shapes) print_row(s, bf16_gemm(blas, s[0], s[1], s[2], reps));
    cublasDestroy(blas);
    std::printf("CUPTI against CUDA events:\n");
    cupti_vs_events(2048);
  } catch (const std::exception& e) {
    std::printf("ka_gpu_bench: FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}
