// ka's kernels registered as operators in ka's dispatcher.
#pragma once

#include <string>
#include <vector>

namespace ka::runtime {

/// Defines the operators ka serves (PyTorch's schemas) in ka's dispatcher: their CPU (and,
/// when compiled, CUDA) kernel is "extract and execute" through Extractor::global();
/// aten::linear and aten::softmax.int are CompositeImplicitAutograd and decompose through the
/// dispatcher, as in PyTorch. Idempotent: the first call registers for the life of the
/// process; later calls do nothing. Returns the names of the operators ka serves.
///
///   ka::runtime::register_aten_ops();
///   auto addmm = ka::dispatch::Dispatcher::singleton().find_op_or_throw("aten::addmm");
///   std::cout << addmm.dump_computed_table();
const std::vector<std::string>& register_aten_ops();

}  // namespace ka::runtime
