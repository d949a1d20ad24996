#include <ka/core/cpu_cores.hpp>
#include <ka/core/fingerprint.hpp>

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace ka {
namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// "48K" / "1024K" / "32M" as sysfs writes cache sizes.
std::int64_t parse_cache_size(const std::string& text) {
  if (text.empty()) {
    return 0;
  }
  std::int64_t value = 0;
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    value = value * 10 + (text[i] - '0');
    ++i;
  }
  if (i < text.size()) {
    if (text[i] == 'K') value *= 1024;
    if (text[i] == 'M') value *= 1024 * 1024;
  }
  return value;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        auto name = line.substr(colon + 1);
        const auto first = name.find_first_not_of(" \t");
        return first == std::string::npos ? std::string() : name.substr(first);
      }
    }
  }
  return "unknown CPU";
}

std::string kib(std::int64_t bytes) { return std::to_string(bytes / 1024) + "K"; }

}  // namespace

std::string cpu_isa_level() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl")) {
    return "avx512";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return "avx2";
  }
  if (__builtin_cpu_supports("sse4.2")) {
    return "sse4.2";
  }
  return "generic";
}

DeviceFingerprint cpu_fingerprint() {
  DeviceFingerprint fp;
  fp.device = Device::cpu();
  fp.name = cpu_model_name();
  fp.isa = cpu_isa_level();
  fp.cores = usable_cores();
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    const std::string level = read_first_line(dir + "/level");
    if (level.empty()) {
      break;
    }
    const std::string type = read_first_line(dir + "/type");
    const std::int64_t size = parse_cache_size(read_first_line(dir + "/size"));
    if (level == "1" && type == "Data") fp.l1d_bytes = size;
    if (level == "2") fp.l2_bytes = size;
    if (level == "3") fp.l3_bytes = size;
  }
  // Some virtual machines have no sysfs cache folder: take L1d and L2 from CPUID through
  // glibc. Not L3: where sysfs is missing, a guest's CPUID may report an L3 size far from
  // the truth, and an unknown L3 (0) gets the users' own defaults.
  const auto cpuid_size = [](int name) {
    const long bytes = sysconf(name);
    return bytes > 0 ? static_cast<std::int64_t>(bytes) : std::int64_t{0};
  };
  if (fp.l1d_bytes == 0) fp.l1d_bytes = cpuid_size(_SC_LEVEL1_DCACHE_SIZE);
  if (fp.l2_bytes == 0) fp.l2_bytes = cpuid_size(_SC_LEVEL2_CACHE_SIZE);
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) {
    fp.memory_bytes = static_cast<std::int64_t>(pages) * page_size;
  }
  return fp;
}

std::string DeviceFingerprint::key() const {
  std::ostringstream out;
  out << to_string(device.type) << '|' << name << '|' << isa << "|cores=" << cores;
  if (device.type == DeviceType::kCPU) {
    out << "|l1d=" << kib(l1d_bytes) << "|l2=" << kib(l2_bytes) << "|l3=" << kib(l3_bytes);
  } else {
    out << "|l2=" << kib(l2_bytes) << "|memory=" << memory_bytes / (1024 * 1024)
        << "M|clock=" << clock_mhz << "MHz|memory_clock=" << memory_clock_mhz
        << "MHz|driver=" << driver_version << "|runtime=" << runtime_version;
  }
  return out.str();
}

std::vector<std::pair<std::string, std::string>> DeviceFingerprint::fields() const {
  std::vector<std::pair<std::string, std::string>> f = {
      {"device", device.str()},
      {"name", name},
      {"isa", isa},
      {"cores", std::to_string(cores)},
      {"l1d_bytes", std::to_string(l1d_bytes)},
      {"l2_bytes", std::to_string(l2_bytes)},
      {"l3_bytes", std::to_string(l3_bytes)},
      {"memory_bytes", std::to_string(memory_bytes)},
  };
  if (device.type != DeviceType::kCPU) {
    f.emplace_back("driver_version", driver_version);
    f.emplace_back("runtime_version", runtime_version);
    f.emplace_back("clock_mhz", std::to_string(clock_mhz));
    f.emplace_back("memory_clock_mhz", std::to_string(memory_clock_mhz));
  }
  return f;
}

}  // namespace ka
