// Small text helpers shared by the canonical forms (launch configs, shape keys, suites).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ka {

/// Splits on every `sep`; keeps empty pieces ("a,,b" -> {"a", "", "b"}).
std::vector<std::string_view> split(std::string_view text, char sep);
/// The whole text as a base-10 int64 (optional leading '-'), or nullopt.
std::optional<std::int64_t> parse_int64(std::string_view text) noexcept;
/// Joins integers with `sep`: {2, 3} -> "2x3".
std::string join_ints(const std::vector<std::int64_t>& values, std::string_view sep);
/// Stable 64-bit FNV-1a hash of the bytes (the same on every machine and build).
std::uint64_t fnv1a64(std::string_view bytes) noexcept;

}  // namespace ka
