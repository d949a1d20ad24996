// The IR front end of graph cases: TorchScript IR text parsed as ka parses it
// (ka::runtime::parse_ir: a nesting bound, Note [IR nesting], then torch::jit::parseIR with
// its errors turned into ka::ValueError), then lowered to ka's OpGraph by
// Runtime::lower, as every graph case is before it runs. The parser is libtorch's and not
// instrumented: libFuzzer's coverage is ka's lowering, and a finding is IR that crashes or
// hangs the parser, or that lowering rejects with anything but a ka::Error.
#include "fuzz_target.hpp"

#include <ka/core/error.hpp>
#include <ka/runtime/runtime.hpp>

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/ir.h>

#include <exception>
#include <memory>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string ir(ka::fuzz::as_text(data, size));
  std::shared_ptr<torch::jit::Graph> graph;
  try {
    graph = ka::runtime::parse_ir(ir);
  } catch (const ka::ValueError&) {
    return 0;  // rejected: too deeply nested, or the parser's c10::Error or ErrorReport
  }
  // Lowering only records the inputs; their values are never computed with.
  static const at::Tensor input = at::zeros({1});
  const std::vector<c10::IValue> inputs(graph->inputs().size(), c10::IValue(input));
  try {
    const auto lowered = ka::runtime::Runtime::lower(*graph, inputs);
    (void)lowered;
  } catch (const ka::Error&) {
    // rejected
  }
  return 0;
}
