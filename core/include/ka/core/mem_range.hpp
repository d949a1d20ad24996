// MemRange: a span of device memory a task reads or writes, for hazard analysis.
#pragma once

#include <ka/core/device.hpp>

#include <cstddef>
#include <cstdint>

namespace ka {

enum class Access : std::uint8_t { kRead, kWrite, kReadWrite };

/// `bytes` bytes from `base` on `device`, with the way a task accesses them.
struct MemRange {
  Device device;
  std::uintptr_t base = 0;
  std::size_t bytes = 0;
  Access access = Access::kRead;

  [[nodiscard]] bool writes() const noexcept { return access != Access::kRead; }
  /// True when both ranges are on the same device and share at least one byte.
  [[nodiscard]] bool overlaps(const MemRange& other) const noexcept {
    return device == other.device && bytes != 0 && other.bytes != 0 &&
           base < other.base + other.bytes && other.base < base + bytes;
  }
  /// True when ordering matters: the ranges overlap and at least one of them writes
  /// (read-after-write, write-after-read, write-after-write).
  [[nodiscard]] bool conflicts_with(const MemRange& other) const noexcept {
    return overlaps(other) && (writes() || other.writes());
  }
};

}  // namespace ka
