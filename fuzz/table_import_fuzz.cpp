// The table readers on an arbitrary file taken as a SQLite database: `ka-db import`
// (import_sqlite into a fresh database), `ka-db merge/diff` (read_recommendation_rows) and
// KA_TUNED_TABLE / --tuned-table (RecommendationTable::load). SQLite is not instrumented;
// libFuzzer's coverage is ka's code that reads the rows SQLite returns.
//
// With KA_FUZZ_WRITE_SEED=<file> in the environment, LLVMFuzzerInitialize first writes a valid
// table export there (export_sqlite of two rows), so the corpus always holds the current
// schema: scripts/fuzz.sh and the replay test use it.
#include "fuzz_target.hpp"

#include <ka/core/error.hpp>
#include <ka/core/launch_config.hpp>
#include <ka/db/recommendation_io.hpp>
#include <ka/db/recommendation_table.hpp>
#include <ka/db/schema.hpp>
#include <ka/db/sqlite.hpp>
#include <ka/db/table_ops.hpp>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

constexpr const char* kFingerprint = "cpu:fuzz";

const ka::db::KernelVersions& kernels() {
  static const ka::db::KernelVersions versions{{"gemm_cpu", 1}, {"ew_cpu", 2}};
  return versions;
}

void write_seed(const std::string& path) {
  std::vector<ka::db::Recommendation> rows(2);
  rows[0].fingerprint = kFingerprint;
  rows[0].op = "aten::mm";
  rows[0].shape_key = "aten::mm(f32[64,32]c,f32[32,16]c)";
  rows[0].kernel = "gemm_cpu";
  rows[0].kernel_version = 1;
  rows[0].config = ka::LaunchConfig::parse("grid=4x1x1 block=16x16x1 tile_k=32");
  rows[0].median_ns = 1200.5;
  rows[0].gain_over_default = 1.25;
  rows[1] = rows[0];
  rows[1].op = "aten::add.Tensor";
  rows[1].shape_key = "aten::add.Tensor(f32[128]c,f32[128]c)";
  rows[1].kernel = "ew_cpu";
  rows[1].kernel_version = 2;
  rows[1].config = ka::LaunchConfig::parse("grid=2x1x1 block=64x1x1 unroll=4");
  rows[1].fusion = "none";
  rows[1].source_run = 7;
  const ka::db::RecommendationTable table(kFingerprint, std::move(rows), kernels());
  ka::db::export_sqlite(table, path);
  // 512-byte pages shrink the export from 60 KiB to a few KiB: fewer bytes for each mutation
  // to miss, and a faster execution. The page size is a property of the file; ka reads both.
  ka::db::Connection db(path);
  db.exec("PRAGMA journal_mode = DELETE; PRAGMA page_size = 512; VACUUM");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  if (const char* seed = std::getenv("KA_FUZZ_WRITE_SEED"); seed != nullptr && *seed != '\0') {
    write_seed(seed);
  }
  return 0;
}

// A freshly migrated ka database, as the bytes of its file: each input is imported into a
// copy, which is much cheaper than running the migrations for every input.
const std::string& empty_database() {
  static const std::string bytes = [] {
    const ka::fuzz::ScratchFile file(".empty.db");
    file.write("");
    {
      ka::db::Connection db(file.path());
      ka::db::migrate(db);
    }
    std::ifstream in(file.path(), std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }();
  return bytes;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const ka::fuzz::ScratchFile file(".db");
  static const ka::fuzz::ScratchFile target_file(".target.db");
  file.write(ka::fuzz::as_text(data, size));
  target_file.write(empty_database());
  try {
    ka::db::Connection target(target_file.path());
    ka::db::import_sqlite(file.path(), target, kFingerprint, kernels());
  } catch (const ka::Error&) {
    // rejected
  }
  try {
    ka::db::read_recommendation_rows(file.path());
  } catch (const ka::Error&) {
  }
  try {
    ka::db::RecommendationTable::load(file.path(), kFingerprint, kernels());
  } catch (const ka::Error&) {
  }
  return 0;
}
