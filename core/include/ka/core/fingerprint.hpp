// DeviceFingerprint: what tuned entries are keyed by. A mismatch is never silently used.
#pragma once

#include <ka/core/device.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ka {

/// Identifies a device closely enough that a tuned configuration measured on one applies to
/// another with an equal key(). CPU fields come from /proc/cpuinfo, sysfs and CPUID; CUDA
/// fields from the runtime (filled by the CUDA backend).
struct DeviceFingerprint {
  Device device;
  std::string name;            ///< CPU model name or GPU name.
  std::string isa;             ///< CPU: avx512, avx2, sse4.2 or generic. CUDA: sm_XY.
  int cores = 0;               ///< CPU: logical cores available to the process. CUDA: SMs.
  std::int64_t l1d_bytes = 0;  ///< Per core; 0 when unknown.
  std::int64_t l2_bytes = 0;   ///< Per core (CPU) or per device (CUDA); 0 when unknown.
  std::int64_t l3_bytes = 0;   ///< Per package; 0 when unknown.
  std::int64_t memory_bytes = 0;  ///< Physical memory (CPU) or device memory (CUDA).
  std::string driver_version;     ///< CUDA only: the driver's CUDA version, e.g. "13.0".
  std::string runtime_version;    ///< CUDA only: the runtime's, e.g. "13.0".
  int clock_mhz = 0;              ///< CUDA only: the SMs' peak clock; 0 when unknown.
  int memory_clock_mhz = 0;       ///< CUDA only: the memory's peak clock; 0 when unknown.

  /// Stable one-line key: every field that changes tuned results, in a fixed order, e.g.
  /// "cpu|AMD EPYC|avx512|cores=2|l1d=48K|l2=1024K|l3=32768K" or "cuda|NVIDIA H200|sm_90|
  /// cores=132|l2=61440K|memory=143771M|clock=1980MHz|memory_clock=3201MHz|driver=13.0|
  /// runtime=13.0".
  [[nodiscard]] std::string key() const;
  /// Field name → value, for storage and display.
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> fields() const;
};

/// The fingerprint of the CPU this process runs on. Never throws: unknown fields stay empty/0.
DeviceFingerprint cpu_fingerprint();

/// The best CPU instruction set this process may use: "avx512", "avx2", "sse4.2" or "generic".
std::string cpu_isa_level();

}  // namespace ka
