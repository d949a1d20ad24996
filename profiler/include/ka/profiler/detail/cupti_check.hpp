// KA_CUPTI_CHECK: the one wrapper around CUPTI calls (STYLE.md, "Errors").
#pragma once

#include <ka/core/error.hpp>

#include <cupti.h>

#include <string>

namespace ka::profiler::detail {

/// "CUPTI_ERROR_X: <description>" for a CUPTI result code.
std::string cupti_result_text(CUptiResult result);

}  // namespace ka::profiler::detail

/// Throws ka::CuptiError "<file>:<line>: CUPTI call failed: <name>: <text> / call: '<expr>'".
#define KA_CUPTI_CHECK(expr)                                                                    \
  do {                                                                                          \
    const CUptiResult ka_cupti_status_ = (expr);                                                \
    if (ka_cupti_status_ != CUPTI_SUCCESS) {                                                    \
      KA_THROW(                                                                                 \
          ::ka::CuptiError, ::ka::detail::source_location(__FILE__, __LINE__),                  \
          ": CUPTI call failed: ", ::ka::profiler::detail::cupti_result_text(ka_cupti_status_), \
          " / call: '" #expr "'");                                                              \
    }                                                                                           \
  } while (false)
