#include <ka/core/memory_limit.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

namespace ka {
namespace {

// A "Key:   123 kB" line of /proc/meminfo, in bytes; nullopt when absent.
std::optional<std::uint64_t> meminfo_bytes(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  std::uint64_t kib = 0;
  std::string unit;
  while (in >> name >> kib) {
    std::getline(in, unit);
    if (name == key) return kib * 1024;
  }
  return std::nullopt;
}

// One unsigned number in a file (cgroup v2's memory.max holds "max" when unlimited).
std::optional<std::uint64_t> file_number(const char* path) {
  std::ifstream in(path);
  std::uint64_t v = 0;
  if (in >> v) return v;
  return std::nullopt;
}

}  // namespace

std::uint64_t memory_limit_bytes() {
  std::optional<std::uint64_t> avail = meminfo_bytes("MemAvailable:");
  const auto cg_max = file_number("/sys/fs/cgroup/memory.max");
  const auto cg_used = file_number("/sys/fs/cgroup/memory.current");
  if (cg_max) {
    const std::uint64_t headroom = *cg_max - std::min(*cg_max, cg_used.value_or(0));
    avail = avail ? std::min(*avail, headroom) : headroom;
  }
  if (!avail) {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGESIZE);
    avail = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page)
                                  : std::uint64_t{1} << 34;
  }
  return *avail / 4 * 3;
}

std::string format_bytes(std::uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  std::size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++u;
  }
  char text[64];
  std::snprintf(text, sizeof text, "%.1f %s (%llu bytes)", v, kUnits[u],
                static_cast<unsigned long long>(bytes));
  return text;
}

}  // namespace ka
