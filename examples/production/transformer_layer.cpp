// A production program with ka: libtorch's own TransformerEncoderLayer (as a model builds it)
// runs once on libtorch's kernels and once with ka's kernels in PyTorch's dispatcher
// (ka::pytorch::enable()), configured from a tuned table that is either compiled in
// (--table compiled: the header `ka-db export --format header` generated at build time) or
// loaded at run time (--table env: KA_TUNED_TABLE). It checks that both runs agree and that
// ka's GEMMs took their configurations from the table, prints what ran where and the time
// of both, and exits 1 when a check fails.
#include <ka/pytorch/ka_torch.hpp>

#include "tuned_table.hpp"  // generated: production::tuned_rows, _size, _device_json

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

constexpr std::int64_t kTokens = 64, kBatch = 2, kModel = 256, kHeads = 4, kHidden = 1024;

// Median wall time of `runs` calls of `f`, in milliseconds.
template <typename F>
double median_ms(F&& f, int runs) {
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --table compiled|env\n"
               "  compiled  use the table compiled in from tuned_table.hpp\n"
               "  env       use the table KA_TUNED_TABLE names (a ka database or export)\n",
               argv0);
  return 2;
}

}  // namespace

int run(int argc, char** argv) {
  if (argc != 3 || std::strcmp(argv[1], "--table") != 0) return usage(argv[0]);
  const std::string table = argv[2];
  if (table != "compiled" && table != "env") return usage(argv[0]);
  if (table == "env" && std::getenv("KA_TUNED_TABLE") == nullptr) {
    std::fprintf(stderr, "--table env: set KA_TUNED_TABLE to the tuned table's file\n");
    return 2;
  }

  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  torch::nn::TransformerEncoderLayer layer(
      torch::nn::TransformerEncoderLayerOptions(kModel, kHeads).dim_feedforward(kHidden).dropout(0.0));
  layer->eval();
  const torch::Tensor x = torch::randn({kTokens, kBatch, kModel});
  const torch::Tensor reference = layer->forward(x);

  if (table == "compiled") {
    const std::int64_t rows = ka::pytorch::use_compiled_table(
        production::tuned_rows, production::tuned_size, production::tuned_device_json);
    std::printf("table: %lld of %zu compiled-in rows are for this CPU\n",
                static_cast<long long>(rows), production::tuned_size);
  } else {
    std::printf("table: KA_TUNED_TABLE=%s\n", std::getenv("KA_TUNED_TABLE"));
  }
  ka::pytorch::enable();  // loads KA_TUNED_TABLE, if set, on first use
  ka::pytorch::reset();
  const torch::Tensor out = layer->forward(x);
  const auto report = nlohmann::json::parse(ka::pytorch::report_json());

  int failures = 0;
  const double diff = (out - reference).abs().max().item<double>();
  std::printf("output: max |ka - libtorch| = %.3g over %lld values\n", diff,
              static_cast<long long>(out.numel()));
  if (!(diff <= 1e-3)) {
    std::printf("FAIL: ka's output differs from libtorch's\n");
    ++failures;
  }
  std::printf("%-22s %-28s %8s %8s  %s\n", "operator", "shapes", "ka", "libtorch", "provenance");
  int linears = 0, tuned_linears = 0, tuned_calls = 0;
  for (const auto& row : report) {
    std::string shapes;
    for (const auto& s : row["shapes"]) shapes += (shapes.empty() ? "" : ",") + s.dump();
    const std::string op = row["op"];
    const std::string provenance = row.value("provenance", "");
    std::printf("%-22s %-28s %8lld %8lld  %s\n", op.c_str(), shapes.c_str(),
                row["ka_calls"].get<long long>(), row["fallback_calls"].get<long long>(),
                provenance.c_str());
    if (provenance == "exact") ++tuned_calls;
    // The linear layers' GEMMs, the layer's cost: each was tuned, so each must find its row.
    if ((op == "aten::mm" || op == "aten::addmm") && row["ka_calls"].get<long long>() > 0) {
      ++linears;
      if (provenance == "exact") ++tuned_linears;
    }
  }
  std::printf("%d shape(s) took their configuration from the tuned table\n", tuned_calls);
  if (linears == 0 || tuned_linears != linears) {
    std::printf("FAIL: %d of %d linear-layer GEMM shapes ka ran took their configuration from "
                "the tuned table (provenance exact)\n", tuned_linears, linears);
    ++failures;
  }

  // Interleaved rounds, so that drift favours neither side.
  std::vector<double> ka_ms, torch_ms;
  for (int round = 0; round < 8; ++round) {
    ka::pytorch::enable();
    ka_ms.push_back(median_ms([&] { layer->forward(x); }, 5));
    ka::pytorch::disable();
    torch_ms.push_back(median_ms([&] { layer->forward(x); }, 5));
  }
  std::sort(ka_ms.begin(), ka_ms.end());
  std::sort(torch_ms.begin(), torch_ms.end());
  std::printf("forward (%lld tokens x %lld, d_model %lld, %d threads): libtorch %.3f ms, ka %.3f "
              "ms (median of 8 interleaved rounds of 5, hot): %.2fx\n",
              static_cast<long long>(kTokens), static_cast<long long>(kBatch),
              static_cast<long long>(kModel), torch::get_num_threads(), torch_ms[4], ka_ms[4],
              torch_ms[4] / ka_ms[4]);
  return failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // a table that does not load, say: ka names the file
    std::fprintf(stderr, "transformer_layer: %s\n", e.what());
    return 2;
  }
}
