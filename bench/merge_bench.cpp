// `ka-db merge` at campaign scale: ka::db::merge_databases() of many shard databases (one per
// machine or job of a tuning campaign) into one. The target from the issue: 100 shards of
// 10,000 trials each merged in under 30 s.
//
// The shards are written with ka's own writer (ResultsStore): one device per shard (two
// distinct fingerprints over all shards, so the merge keeps two devices apart), one run, the
// trials in batches as ka-tune adds them, and a few recommendations. They are kept in --dir and
// reused by the next run when their counts match. Generation time is reported apart; the
// figure is the merge alone, into a fresh target, --repetitions times.
//
//   ka_merge_bench [--shards 100] [--trials 10000] [--dir DIR] [--repetitions 3]
#include <ka/core/fingerprint.hpp>
#include <ka/core/launch_config.hpp>
#include <ka/core/shape_key.hpp>
#include <ka/db/recommendation_table.hpp>
#include <ka/db/results_store.hpp>
#include <ka/db/schema.hpp>
#include <ka/db/sqlite.hpp>
#include <ka/db/table_ops.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <sys/resource.h>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Options {
  int shards = 100;
  int trials = 10000;
  std::string dir = (fs::temp_directory_path() / "ka_merge_bench").string();
  int repetitions = 3;
};

constexpr int kShapesPerShard = 20;                 // a tuning job sweeps a few shapes...
constexpr int kRecommendationsPerShard = 5;         // ...and recommends for some of them
constexpr std::size_t kBatch = 500;                 // trials per add_trials() call
constexpr int kGemmPoints = 8 * 8 * 8 * 8 * 4 * 2;  // distinct configs of gemm_point()

// User plus system CPU seconds this process has used; beside the wall-clock figure it shows how
// much of a merge was spent waiting (fsync, another process holding the CPU).
double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto secs = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return secs(usage.ru_utime) + secs(usage.ru_stime);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  }
  return "unknown";
}

std::string shard_path(const Options& o, int shard) {
  return (fs::path(o.dir) / ("shard-" + std::to_string(shard) + ".db")).string();
}

void remove_database(const std::string& path) {
  std::error_code ignored;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(path + suffix, ignored);
}

std::int64_t count(ka::db::Connection& db, const char* sql) {
  auto st = db.prepare(sql);
  st.step();
  return st.column_int64(0);
}

// Shards alternate between two machines of different models, so the merged database holds
// two devices.
ka::DeviceFingerprint shard_fingerprint(int shard) {
  ka::DeviceFingerprint fp;
  fp.device = ka::Device::cpu();
  if (shard % 2 == 0) {
    fp.name = "AMD EPYC 9654 96-Core Processor";
    fp.isa = "avx512";
    fp.cores = 8;
    fp.l1d_bytes = 32 << 10;
    fp.l2_bytes = 1 << 20;
    fp.l3_bytes = std::int64_t{32} << 20;
    fp.memory_bytes = std::int64_t{64} << 30;
  } else {
    fp.name = "Intel(R) Xeon(R) Platinum 8480+";
    fp.isa = "avx512";
    fp.cores = 16;
    fp.l1d_bytes = 48 << 10;
    fp.l2_bytes = 2 << 20;
    fp.l3_bytes = std::int64_t{105} << 20;
    fp.memory_bytes = std::int64_t{128} << 30;
  }
  return fp;
}

// aten::mm(f32[m,k]c, f32[k,n]c) for the shard's shape `s`; shards share shapes, as machines of
// one campaign tune the same model, so recommendations collide in the merge.
ka::ShapeKey shard_shape(int s) {
  static constexpr std::int64_t kSizes[] = {64, 128, 256, 384, 512, 768, 1024, 2048, 3072, 4096};
  const std::int64_t m = kSizes[s % 10];
  const std::int64_t k = kSizes[(s / 2 + 3) % 10];
  const std::int64_t n = kSizes[(s * 3 + 1) % 10];
  return ka::ShapeKey("aten::mm", {ka::TensorSpec{ka::DType::kFloat32, {m, k}, true},
                                   ka::TensorSpec{ka::DType::kFloat32, {k, n}, true}});
}

// The `i`-th point of cpu_gemm's space: distinct for distinct i below kGemmPoints.
ka::LaunchConfig gemm_point(int i) {
  static constexpr std::int64_t kTilesM[] = {8, 16, 24, 32, 48, 64, 96, 128};
  static constexpr std::int64_t kTilesN[] = {16, 32, 48, 64, 96, 128, 192, 256};
  static constexpr std::int64_t kTilesK[] = {32, 64, 96, 128, 192, 256, 384, 512};
  static constexpr std::int64_t kThreads[] = {1, 2, 4, 6, 8, 12, 16, 32};
  static constexpr std::int64_t kUnroll[] = {1, 2, 4, 8};
  ka::LaunchConfig c;
  c.set("tile_m", kTilesM[i % 8]);
  c.set("tile_n", kTilesN[(i / 8) % 8]);
  c.set("tile_k", kTilesK[(i / 64) % 8]);
  c.set("threads", kThreads[(i / 512) % 8]);
  c.set("unroll", kUnroll[(i / 4096) % 4]);
  c.set("pack_b", (i / 16384) % 2);
  return c;
}

void generate_shard(const Options& o, int shard) {
  const std::string path = shard_path(o, shard);
  remove_database(path);
  const ka::DeviceFingerprint fp = shard_fingerprint(shard);
  std::mt19937_64 rng(static_cast<std::uint64_t>(shard) * 7919 + 1);
  std::normal_distribution<double> noise(0.0, 0.02);
  std::uniform_real_distribution<double> unit(0.0, 1.0);

  ka::db::ResultsStore store(path);
  store.record_device(fp);
  ka::db::RunInfo info =
      ka::db::run_info(fp, "ka-tune",
                       "ka-tune --op aten::mm --kernel cpu_gemm --strategy exhaustive --shard " +
                           std::to_string(shard) + "/" + std::to_string(o.shards));
  info.suite = "campaign";
  info.threads = fp.cores;
  info.strategy = "exhaustive";
  const std::int64_t run = store.begin_run(info);

  // Each shard sweeps kShapesPerShard shapes (offset by shard, so shards overlap), trials
  // spread evenly over them.
  std::vector<ka::db::Recommendation> best(kShapesPerShard);
  std::vector<ka::db::TrialRow> batch;
  batch.reserve(kBatch);
  for (int t = 0; t < o.trials; ++t) {
    const int s = t % kShapesPerShard;
    const int point = t / kShapesPerShard;
    const ka::ShapeKey shape = shard_shape(shard + s);
    const ka::LaunchConfig config = gemm_point(point);
    ka::db::TrialRow row;
    row.op = "aten::mm";
    row.shape_key = shape.str();
    row.kernel = "cpu_gemm";
    row.kernel_version = 3;
    row.config = config.str();
    row.cache_state = "hot";
    if (unit(rng) < 0.03) {
      row.disposition = ka::db::Disposition::kFailed;
      row.error = "cpu_gemm: tile_m * tile_k exceeds the L2 budget for " + shape.str();
    } else {
      const double base = 2e3 * static_cast<double>(point % 97 + 10) * (1.0 + s);
      const double median = base * (1.0 + std::fabs(noise(rng)));
      row.median_ns = median;
      row.mean_ns = median * 1.01;
      row.min_ns = median * 0.97;
      row.max_ns = median * 1.08;
      row.stddev_ns = median * 0.015;
      row.ci95_ns = median * 0.006;
      row.repetitions = 15;
      ka::db::Recommendation& b = best[static_cast<std::size_t>(s)];
      if (std::isnan(b.median_ns) || median < b.median_ns) {
        b.fingerprint = fp.key();
        b.op = row.op;
        b.shape_key = row.shape_key;
        b.kernel = row.kernel;
        b.kernel_version = row.kernel_version;
        b.config = config;
        b.median_ns = median;
        b.default_median_ns = median * 1.4;
        b.gain_over_default = 1.4;
        b.gain_low = 1.3;
        b.gain_high = 1.5;
        b.source_run = run;
      }
    }
    batch.push_back(std::move(row));
    if (batch.size() == kBatch) {
      store.add_trials(run, batch);
      batch.clear();
    }
  }
  if (!batch.empty()) store.add_trials(run, batch);
  store.finish_run(run, true);

  std::vector<ka::db::Recommendation> recommendations;
  for (const ka::db::Recommendation& b : best) {
    if (!b.fingerprint.empty() &&
        recommendations.size() < static_cast<std::size_t>(kRecommendationsPerShard)) {
      recommendations.push_back(b);
    }
  }
  store.put_recommendations(recommendations);
}

// True when `shard` exists with one device, one run and --trials trials.
bool shard_is_reusable(const Options& o, int shard) {
  const std::string path = shard_path(o, shard);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  try {
    ka::db::Connection db(path, ka::db::Connection::Mode::kReadOnly);
    return count(db, "SELECT count(*) FROM trials") == o.trials &&
           count(db, "SELECT count(*) FROM runs") == 1 &&
           count(db, "SELECT count(*) FROM devices") == 1;
  } catch (const std::exception&) {
    return false;
  }
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run(const Options& o) {
  fs::create_directories(o.dir);
  const std::int64_t total_trials = std::int64_t{o.shards} * o.trials;
  std::printf("cpu:              %s\n", cpu_model().c_str());
  std::printf("shards:           %d (in %s)\n", o.shards, o.dir.c_str());
  std::printf("trials per shard: %d\n", o.trials);
  std::printf("trials merged:    %lld\n", static_cast<long long>(total_trials));

  const auto gen_start = Clock::now();
  int generated = 0;
  std::vector<std::string> sources;
  for (int i = 0; i < o.shards; ++i) {
    if (!shard_is_reusable(o, i)) {
      generate_shard(o, i);
      ++generated;
    }
    sources.push_back(shard_path(o, i));
  }
  std::printf("generation:       %.2f s (%d shard(s) written, %d reused)\n",
              seconds_since(gen_start), generated, o.shards - generated);

  const std::string target_path = (fs::path(o.dir) / "merged.db").string();
  std::vector<double> merge_s;
  std::vector<double> total_s;
  std::vector<double> cpu_s;
  ka::db::MergeCounts counts;
  for (int r = 0; r < o.repetitions; ++r) {
    remove_database(target_path);
    const auto start = Clock::now();
    const double cpu_start = cpu_seconds();
    double merged_at = 0.0;
    {
      ka::db::Connection target(target_path);
      const auto merge_start = Clock::now();
      counts = ka::db::merge_databases(target, sources);
      merged_at = seconds_since(merge_start);
    }  // closing checkpoints the WAL into the file, which `ka-db merge` also waits for
    const double total = seconds_since(start);
    const double cpu = cpu_seconds() - cpu_start;
    merge_s.push_back(merged_at);
    total_s.push_back(total);
    cpu_s.push_back(cpu);
    std::printf(
        "repetition %d:     merge_databases %.3f s, with open and close %.3f s (CPU %.3f s)\n",
        r + 1, merged_at, total, cpu);
  }
  const double median = median_of(merge_s);
  std::printf("median:           %.3f s (with open and close %.3f s, CPU %.3f s), %.0f trials/s\n",
              median, median_of(total_s), median_of(cpu_s),
              static_cast<double>(total_trials) / median);
  std::printf(
      "merge counts:     runs %zu copied (%zu present), trials %zu, devices %zu, "
      "recommendations %zu added %zu replaced %zu kept\n",
      counts.runs, counts.runs_present, counts.trials, counts.devices, counts.added,
      counts.replaced, counts.kept);

  ka::db::Connection merged = ka::db::open_for_reading(target_path);
  const std::int64_t trials = count(merged, "SELECT count(*) FROM trials");
  const std::int64_t runs = count(merged, "SELECT count(*) FROM runs");
  const std::int64_t devices = count(merged, "SELECT count(*) FROM devices");
  const std::int64_t expected_devices = std::min(o.shards, 2);
  const bool ok = trials == total_trials && runs == o.shards && devices == expected_devices;
  std::printf(
      "verified:         %lld trials (expected %lld), %lld runs (expected %d), "
      "%lld devices (expected %lld): %s\n",
      static_cast<long long>(trials), static_cast<long long>(total_trials),
      static_cast<long long>(runs), o.shards, static_cast<long long>(devices),
      static_cast<long long>(expected_devices), ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "ka_merge_bench: times ka::db::merge_databases() (what `ka-db merge` runs) at campaign "
      "scale.\n"
      "Writes --shards shard databases DIR/shard-I.db with ka's ResultsStore, each with one "
      "device (two distinct fingerprints over all shards), one run, --trials trials of "
      "aten::mm on cpu_gemm added in batches, and a few recommendations; shards already in DIR "
      "with the right counts are reused (their generation time is reported apart). Then merges "
      "them all into a fresh DIR/merged.db --repetitions times and prints the CPU model, each "
      "repetition's seconds (merge_databases alone, and with opening and closing the target, "
      "which checkpoints its WAL), the median and trials/s. Exits 1 when the merged database "
      "does not hold shards x trials trials, shards runs and min(shards, 2) devices.\n"
      "Target (from the issue): 100 shards of 10,000 trials in under 30 s.",
      "ka_merge_bench"};
  app.add_option("--shards", o.shards, "Shard databases to merge")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--trials", o.trials, "Trials per shard")
      ->check(CLI::Range(1, kShapesPerShard * kGemmPoints))
      ->capture_default_str();
  app.add_option("--dir", o.dir, "Where the shards and the merged database are kept")
      ->capture_default_str();
  app.add_option("--repetitions", o.repetitions, "Merges timed; the median is reported")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ka_merge_bench: error: %s\n", e.what());
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ka_merge_bench: error: %s\n", e.what());
    return 1;
  }
}
