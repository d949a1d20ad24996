// libka_torch: ka's kernels inside PyTorch's own dispatcher (c10's), for Python programs
// (`import ka`) and C++ libtorch programs that link or dlopen libka_torch.so.
//
// Loading the library defines torch.ops.ka.<op> for every operator ka serves, with aten's
// schemas. enable() also puts ka in front of aten's own CPU kernels for those operators, so
// unmodified code (nn.Linear, F.gelu, F.softmax, torch.bmm, ...) runs ka's kernels on fp32
// CPU tensors; whatever ka does not take goes to libtorch's kernel. disable() restores
// libtorch's kernels exactly. KA_OVERRIDE_ATEN=1 enables at load; KA_TUNED_TABLE names the
// tuned table the kernels' configurations come from.
//
//   #include <ka/pytorch/ka_torch.hpp>
//   ka::pytorch::enable();              // aten's CPU kernels -> ka's, where ka serves the call
//   auto y = torch::nn::functional::linear(x, w);
//   std::cout << ka::pytorch::report_json();
#pragma once

#include <cstdint>
#include <string>

namespace ka::pytorch {

/// Registers ka's kernels in front of aten's CPU kernels for the operators ka serves.
/// Idempotent. Throws ka::Error when KA_TUNED_TABLE names a table that does not load.
void enable();
/// Removes them: aten's dispatch tables are as they were before enable(). Idempotent.
void disable();
/// Whether enable() is in effect.
bool enabled();

/// Loads the rows tuned on this machine from a ka database or exported table; returns how
/// many configurations this CPU now has. Throws ka::DbError naming the file.
std::int64_t load_table(const std::string& path);

/// The last calls that reached ka's kernels or their fallback, newest last, as a JSON array
/// of {op, shapes, dtypes, served ("ka" or "fallback"), kernel, kernel_version, config,
/// provenance, shape_key, reason}.
std::string explain_json();
/// Every (operator, shapes, dtypes) seen since load or reset(), as a JSON array of {op,
/// shapes, dtypes, ka_calls, fallback_calls, kernel, config, provenance, reason}.
std::string report_json();
/// Forgets what explain_json() and report_json() would show.
void reset();

}  // namespace ka::pytorch
