// A small recommendation table shared by the build-time exporter (ka_export_fixture) and
// export_header_test.cpp, which compares the generated header with the SQLite export.
#pragma once

#include <ka/core/launch_config.hpp>
#include <ka/db/recommendation_table.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace ka::db::fixture {

inline const std::string kFingerprint = "cpu|Fixture CPU \"v2\"|avx512|cores=2|l1d=48K|l2=1024K";
// Quotes, a backslash, a would-be trigraph, a newline and UTF-8: the header's string
// literals must carry them unchanged.
inline const std::string kDeviceJson =
    "{\"name\":\"Fixture CPU \\\"v2\\\" ?\?= caf\xc3\xa9\",\"note\":\"line\\nbreak\"}";

inline KernelVersions kernel_versions() { return {{"gemm_a", 1}, {"gemm_b", 3}}; }

inline LaunchConfig config(std::int64_t id, std::int64_t tile) {
  LaunchConfig c;
  c.grid = {id, 1, 1};
  c.block = {tile, tile, 1};
  c.set("tile_k", tile * 2);
  return c;
}

inline Recommendation row(std::string shape, std::string kernel, int version, std::int64_t id,
                          double median_ns, std::string op = "aten::mm") {
  Recommendation r;
  r.fingerprint = kFingerprint;
  r.op = std::move(op);
  r.shape_key = std::move(shape);
  r.kernel = std::move(kernel);
  r.kernel_version = version;
  r.config = config(id, 32 + id);
  r.median_ns = median_ns;
  r.gain_over_default = 1.0 + 0.125 * static_cast<double>(id);
  r.source_run = id;
  r.created_at = "2026-11-30T10:00:00.000Z";
  return r;
}

/// Rows of every kind: exact shapes, two kernels for one shape, an arch default, another
/// dtype and op, a fusion decision, unknown medians.
inline std::vector<Recommendation> rows() {
  std::vector<Recommendation> r = {
      row("aten::mm(f32[64,64]c,f32[64,64]c)", "gemm_a", 1, 1, 100.0),
      row("aten::mm(f32[512,512]c,f32[512,512]c)", "gemm_a", 1, 2, 1000.0),
      row("aten::mm(f32[512,512]c,f32[512,512]c)", "gemm_b", 3, 3, 900.0),
      row("aten::mm(f32[1024,64]c,f32[64,1024]c)", "gemm_b", 3, 4, 2000.5),
      row("*", "gemm_a", 1, 6, std::numeric_limits<double>::quiet_NaN()),
      row("aten::mm(f16[512,512]c,f16[512,512]c)", "gemm_a", 1, 7, 0.1),
      row("aten::bmm(f32[8,64,64]c,f32[8,64,64]c)", "gemm_b", 3, 8, 1e-3, "aten::bmm"),
      row("aten::addmm(f32[768]c,f32[512,768]c,f32[768,768]c)", "gemm_a", 1, 9, 5e9,
          "aten::addmm+aten::relu"),
  };
  r.back().fusion = "fuse \"epilogue\"";
  r.back().source_run.reset();
  return r;
}

/// Keys that reach every provenance.
inline std::vector<std::string> probe_keys() {
  return {
      "aten::mm(f32[64,64]c,f32[64,64]c)",                   // exact
      "aten::mm(f32[512,512]c,f32[512,512]c)",               // exact, two kernels
      "aten::mm(f32[600,500]c,f32[500,480]c)",               // nearest
      "aten::mm(f32[900,64]c,f32[64,900]c)",                 // nearest
      "aten::mm(f16[100,100]c,f16[100,100]c)",               // nearest, f16 bucket
      "aten::mm(f64[512,512]c,f64[512,512]c)",               // arch default
      "aten::mm(f32[512,512]c,f32[512,512]s)",               // arch default (strided)
      "aten::bmm(f32[4,64,64]c,f32[4,64,64]c)",              // nearest
      "aten::addmm(f32[768]c,f32[512,768]c,f32[768,768]c)",  // none (stored under a pattern)
      "aten::add.Tensor(f32[10]c,f32[10]c)",                 // none
  };
}

}  // namespace ka::db::fixture
