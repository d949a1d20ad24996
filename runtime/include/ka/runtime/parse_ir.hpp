// parse_ir: TorchScript IR text to a torch::jit::Graph, with ka's errors. Kept apart from
// runtime.hpp so that the suite parser (and its fuzz target) use it without the pipeline.
#pragma once

#include <memory>
#include <string>

namespace torch::jit {
struct Graph;
}

namespace ka::runtime {

/// Parses TorchScript IR text (torch::jit::parseIR) into a new graph. Throws ka::ValueError
/// with the parser's message for IR that does not parse, and for IR nested deeper than
/// kMaxIrNesting brackets or indentation levels, before libtorch's parser sees it (Note [IR
/// nesting]).
std::shared_ptr<torch::jit::Graph> parse_ir(const std::string& ir);
/// The deepest bracket nesting, and separately the deepest block indentation, parse_ir accepts.
inline constexpr int kMaxIrNesting = 64;

}  // namespace ka::runtime
