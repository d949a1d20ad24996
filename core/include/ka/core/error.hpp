// Errors: ka::Error and its subtypes, KA_CHECK for bad input, KA_ASSERT for broken invariants.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace ka {

/// Base of every exception ka throws. `what()` is the user-facing message; `where()` is the
/// ka source location that raised it (useful in bug reports, noise for users).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, std::string where = {})
      : std::runtime_error(message), where_(std::move(where)) {}
  [[nodiscard]] const std::string& where() const noexcept { return where_; }

 private:
  std::string where_;
};

/// Bad input from the caller or the user: a shape, a value, a file's contents.
class ValueError : public Error {
  using Error::Error;
};
/// The request is valid but nothing implements it (no kernel, no backend).
class NotImplementedError : public Error {
  using Error::Error;
};
/// A file or stream could not be read or written.
class IoError : public Error {
  using Error::Error;
};
/// A CUDA runtime or driver call failed.
class CudaError : public Error {
  using Error::Error;
};
/// A CUPTI call failed.
class CuptiError : public Error {
  using Error::Error;
};
/// An SQLite call failed or the database is unusable.
class DbError : public Error {
  using Error::Error;
};
/// A ka invariant is broken: a bug in ka.
class InternalError : public Error {
  using Error::Error;
};

namespace detail {

/// Concatenates streamable values; with no arguments yields an empty string.
template <typename... Args>
std::string str_cat(const Args&... args) {
  if constexpr (sizeof...(Args) == 0) {
    return {};
  } else {
    std::ostringstream out;
    (out << ... << args);
    return out.str();
  }
}

std::string source_location(const char* file, int line);

template <typename E>
[[noreturn]] void throw_error(const char* file, int line, const std::string& message) {
  throw E(message, source_location(file, line));
}

[[noreturn]] void throw_assert_failure(const char* file, int line, const char* condition,
                                       const std::string& message);

}  // namespace detail
}  // namespace ka

/// Throws ka::ValueError with the concatenated message arguments when `cond` is false. The
/// message arguments are evaluated only on failure.
#define KA_CHECK(cond, ...) KA_CHECK_TYPE(::ka::ValueError, cond, __VA_ARGS__)

/// Like KA_CHECK, with the exception type chosen by the caller.
#define KA_CHECK_TYPE(ErrorType, cond, ...)                                              \
  do {                                                                                   \
    if (__builtin_expect(!(cond), 0)) {                                                  \
      ::ka::detail::throw_error<ErrorType>(__FILE__, __LINE__,                           \
                                           ::ka::detail::str_cat(__VA_ARGS__));          \
    }                                                                                    \
  } while (false)

/// Throws ka::ErrorType with the concatenated message arguments, unconditionally.
#define KA_THROW(ErrorType, ...) \
  ::ka::detail::throw_error<ErrorType>(__FILE__, __LINE__, ::ka::detail::str_cat(__VA_ARGS__))

/// Throws ka::InternalError ("internal error, please report") when an invariant is broken.
#define KA_ASSERT(cond, ...)                                                                \
  do {                                                                                      \
    if (__builtin_expect(!(cond), 0)) {                                                     \
      ::ka::detail::throw_assert_failure(__FILE__, __LINE__, #cond,                         \
                                         ::ka::detail::str_cat(__VA_ARGS__));               \
    }                                                                                       \
  } while (false)
