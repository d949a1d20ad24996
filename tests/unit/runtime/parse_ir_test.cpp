// parse_ir: libtorch's IR parser behind a nesting bound (Note [IR nesting]). Deep input is
// refused with its line and depth before libtorch's parser could recurse through the stack;
// everything within the bound parses as torch::jit::parseIR parses it.
#include <ka/core/error.hpp>
#include <ka/runtime/parse_ir.hpp>

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/irparser.h>

#include <string>

namespace ka::runtime {
namespace {

// A graph whose input is a tuple type nested `depth` levels: ((int, int), int) ...
std::string nested_tuple_graph(int depth, const std::string& before = "") {
  std::string type = "int";
  for (int i = 0; i < depth; ++i) type = "(" + type + ", int)";
  return before + "graph(%x : " + type + "):\n  return (%x)\n";
}

// Each line of `text` with `spaces` more indentation.
std::string indented(const std::string& text, std::size_t spaces) {
  std::string out;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = text.find('\n', at) + 1;
    out += std::string(spaces, ' ') + text.substr(at, end - at);
    at = end;
  }
  return out;
}

// A graph of `depth` prim::If nodes, each in the first block of the one before.
std::string nested_blocks_graph(int depth) {
  std::string body = "-> (%x)\n";
  for (int i = depth - 1; i >= 0; --i) {
    const std::string y = "%y" + std::to_string(i);
    body = y + " : Tensor = prim::If(%c)\n  block0():\n" + indented(body, 4) +
           "  block1():\n    -> (%x)\n" + (i == 0 ? "return (" : "-> (") + y + ")\n";
  }
  return "graph(%c : bool, %x : Tensor):\n" + indented(body, 2);
}

std::string error_of(const std::string& ir) {
  try {
    parse_ir(ir);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

TEST(ParseIr, NestingWithinTheBoundParsesAsLibtorchParsesIt) {
  const std::string ir = nested_tuple_graph(kMaxIrNesting - 2);
  const auto ours = parse_ir(ir);
  torch::jit::Graph theirs;
  torch::jit::parseIR(ir, &theirs);
  ASSERT_EQ(ours->inputs().size(), 1u);
  EXPECT_EQ(ours->inputs()[0]->type()->str(), theirs.inputs()[0]->type()->str());
}

TEST(ParseIr, DeepBracketsAreRefusedWithLineAndDepth) {
  const std::string err = error_of(nested_tuple_graph(3000, "\n\n"));
  EXPECT_NE(err.find("nests brackets " + std::to_string(kMaxIrNesting + 1) +
                     " levels deep at line 3"),
            std::string::npos)
      << err;
}

TEST(ParseIr, ClosingBracketsInStringsAndCommentsDoNotHideNesting) {
  const std::string half(kMaxIrNesting / 2 + 1, '(');
  const std::string closers(kMaxIrNesting, ')');
  // Real closing brackets between the halves close them: the scan lets the text through.
  EXPECT_EQ(error_of("graph(%x : " + half + closers + half).find("nests brackets"),
            std::string::npos);
  for (const std::string& skipped :
       {"\"" + closers + "\"", "'" + closers + "'", "'''\n" + closers + "\n'''",
        "# " + closers + "\n"}) {
    const std::string err = error_of("graph(%x : " + half + skipped + half + "int");
    EXPECT_NE(err.find("nests brackets"), std::string::npos) << skipped << "\n" << err;
  }
}

TEST(ParseIr, DeepBlocksAreRefused) {
  EXPECT_NO_THROW(parse_ir(nested_blocks_graph(3)));
  const std::string err = error_of(nested_blocks_graph(kMaxIrNesting));
  EXPECT_NE(err.find("nests indented blocks " + std::to_string(kMaxIrNesting + 1) +
                     " levels deep"),
            std::string::npos)
      << err;
}

TEST(ParseIr, ParserErrorsBecomeValueErrors) {
  const std::string err = error_of("graph(%x : Tensor:\n");
  EXPECT_NE(err.find("TorchScript IR does not parse"), std::string::npos) << err;
}

TEST(ParseIr, GraphsThatParseButAreNotWellFormedAreValueErrors) {
  // Parses (the parser resolves %z once the loop defines it), but the loop's body returns the
  // loop's own output: found by the ir fuzz target, where copying the graph then failed.
  const std::string err = error_of(
      "graph(%x : Tensor, %c : bool):\n"
      "  %n : int = prim::Constant[value=4]()\n"
      "  %z : Tensor = prim::Loop(%n, %c, %x)\n"
      "    block0(%i : int, %acc : Tensor):\n"
      "      -> (%z, %acc)\n"
      "  return (%z)\n");
  EXPECT_NE(err.find("TorchScript IR is not a well-formed graph"), std::string::npos) << err;
}

}  // namespace
}  // namespace ka::runtime
