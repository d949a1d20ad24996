// Status: "cannot run this shape/config" as a value, not an exception.
#pragma once

#include <string>
#include <utility>

namespace ka {

/// The outcome of a check that is allowed to fail (a kernel that cannot run a shape, a
/// configuration outside its constraints). Carries the reason when not ok.
class [[nodiscard]] Status {
 public:
  static Status ok() { return Status(); }
  static Status unsupported(std::string reason) { return Status(std::move(reason)); }

  [[nodiscard]] bool is_ok() const noexcept { return reason_.empty(); }
  explicit operator bool() const noexcept { return is_ok(); }
  /// Why the check failed; empty when ok.
  [[nodiscard]] const std::string& reason() const noexcept { return reason_; }

 private:
  Status() = default;
  explicit Status(std::string reason)
      : reason_(reason.empty() ? std::string("unsupported") : std::move(reason)) {}
  std::string reason_;
};

}  // namespace ka
