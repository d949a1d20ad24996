// The call log of libka_torch: what each call of a served operator ran (ka's kernel, or
// libtorch's fallback and why), for ka.explain() and the report of `python3 -m ka`.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace ka::pytorch::detail {

/// Records a call that ran on ka's pipeline: reads what it ran from the extractor
/// (Extractor::last_eager_plan, this thread). `args` are the call's schema arguments.
void record_ka_call(const char* op, const c10::IValue* args, std::size_t num_args);
/// Records a call that went to libtorch's kernel, and why (the first line of `reason`).
void record_fallback(const char* op, const c10::IValue* args, std::size_t num_args,
                     std::string_view reason);

/// See ka::pytorch::explain_json(), report_json() and reset().
std::string explain_json();
std::string report_json();
void reset_log();

}  // namespace ka::pytorch::detail
