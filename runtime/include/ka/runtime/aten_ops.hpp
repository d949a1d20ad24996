// ka's kernels registered as operators in ka's dispatcher.
#pragma once

#include <string>
#include <vector>

namespace ka::runtime {

/// Defines aten::mm and aten::addmm (PyTorch's schemas) in ka's dispatcher and registers ka's
/// CPU GEMM as their CPU kernel. Idempotent: the first call registers for the life of the
/// process; later calls do nothing. Returns the names of the operators ka serves.
///
///   ka::runtime::register_aten_ops();
///   auto addmm = ka::dispatch::Dispatcher::singleton().find_op_or_throw("aten::addmm");
///   std::cout << addmm.dump_computed_table();
const std::vector<std::string>& register_aten_ops();

}  // namespace ka::runtime
