// Device: where a tensor lives and a kernel runs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace ka {

enum class DeviceType : std::uint8_t { kCPU, kCUDA, kPrivateUse1 };

/// A device type plus an index ("cpu", "cuda:0").
struct Device {
  DeviceType type = DeviceType::kCPU;
  std::int16_t index = 0;

  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(std::int16_t index = 0) { return {DeviceType::kCUDA, index}; }

  /// "cpu" for CPU index 0, otherwise "<type>:<index>".
  [[nodiscard]] std::string str() const;
  /// Parses "cpu", "cuda", "cuda:1", "privateuse1:0". Throws ka::ValueError otherwise.
  static Device parse(std::string_view text);

  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.index == b.index;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

/// "cpu", "cuda", "privateuse1".
std::string_view to_string(DeviceType type);

}  // namespace ka
