#include "descriptor_common.hpp"

#include "ew_math.hpp"

#include <ka/core/cpu_cores.hpp>
#include <ka/core/error.hpp>
#include <ka/core/fingerprint.hpp>
#include <ka/core/logging.hpp>
#include <ka/core/option_checks.hpp>

#include <ka/kernels/cpu_launch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>

namespace ka::kernels {
namespace {
std::atomic<int> g_thread_limit{0};
}  // namespace

void set_cpu_thread_limit(int threads) { g_thread_limit.store(std::max(0, threads)); }

int cpu_thread_limit() {
  const int hw = usable_cores();
  int limit = g_thread_limit.load();
  if (limit <= 0) {
    // KA_NUM_THREADS, read once, as OMP_NUM_THREADS is for OpenMP programs. The tools refuse
    // a bad value as they start (check_environment); a library user is told, and gets all cores.
    static const int from_env = [] {
      try {
        return env_thread_limit();
      } catch (const ValueError& e) {
        log().warn("{}; using all cores", e.what());
        return 0;
      }
    }();
    limit = from_env;
  }
  return limit > 0 ? std::min(limit, hw) : hw;
}

}  // namespace ka::kernels

namespace ka::kernels::detail {

std::vector<std::int64_t> cpu_thread_candidates() {
  const auto hw = static_cast<std::int64_t>(usable_cores());
  std::vector<std::int64_t> out;
  for (std::int64_t t = 1; t < hw; t *= 2) out.push_back(t);
  out.push_back(hw);
  return out;
}

std::int64_t stream_default(double out_bytes, bool memory_bound, std::int64_t threads) {
  static const double llc = [] {
    const std::int64_t l3 = cpu_fingerprint().l3_bytes;
    return static_cast<double>(l3 > 0 ? l3 : std::int64_t{32} << 20);
  }();
  if (out_bytes < llc) return 0;
  return memory_bound || (threads >= 2 && avx512_active()) ? 1 : 0;
}

double spec_numel(const TensorSpec& t) {
  double n = 1.0;
  for (const auto s : t.sizes) n *= static_cast<double>(s);
  return n;
}

std::int64_t broadcast_numel(const ShapeKey& key) {
  std::vector<std::int64_t> out;
  for (const TensorSpec& t : key.args()) {
    if (t.sizes.size() > out.size()) out.insert(out.begin(), t.sizes.size() - out.size(), 1);
    const std::size_t lead = out.size() - t.sizes.size();
    for (std::size_t d = 0; d < t.sizes.size(); ++d) {
      std::int64_t& o = out[lead + d];
      const std::int64_t s = t.sizes[d];
      KA_CHECK(s == o || s == 1 || o == 1, "shape key ", key.str(),
               ": the tensors do not broadcast");
      if (o == 1) o = s;
    }
  }
  std::int64_t n = 1;
  for (const std::int64_t s : out) n *= s;
  return n;
}

double elementwise_bytes(const ShapeKey& key) {
  double bytes = 4.0 * static_cast<double>(broadcast_numel(key));
  for (const TensorSpec& t : key.args()) bytes += 4.0 * spec_numel(t);
  return bytes;
}

}  // namespace ka::kernels::detail
