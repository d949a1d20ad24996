// parse_ir: a nesting bound on the text (Note [IR nesting]), then libtorch's IR parser.
#include <ka/core/error.hpp>
#include <ka/runtime/parse_ir.hpp>

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/irparser.h>

#include <exception>
#include <vector>

namespace ka::runtime {
namespace {

// Note [IR nesting]
// libtorch's IR parser recurses once per nested bracket of a type or a list (parseType ->
// parseList -> parseType ...) and once per nested block, with no limit: a type such as
// `((((...int...))))` a few thousand levels deep overflows the stack (the `ir` fuzz target
// found it under ASan with 4 KiB of input). Real graphs nest a handful of levels, so parse_ir
// scans the text first and refuses more than kMaxIrNesting open brackets, or indentation
// levels, at once. The scan follows the lexer's rules (torch/csrc/jit/frontend/lexer.h):
// strings in one or three single or double quotes with backslash escapes, a one-quote
// string ending at its line, `#` comments to the end of the line. Where it could disagree
// with the lexer it errs towards refusing: an opening bracket counts even inside a string
// or a comment, a closing one only outside them, so its depth is never below the parser's.
struct IrNestingScan {
  const std::string& ir;
  std::size_t pos = 0;
  int line = 1;
  std::size_t line_start = 0;
  int brackets = 0;
  std::vector<std::size_t> indents{0};

  [[noreturn]] void refuse(const char* what, int depth) const {
    KA_THROW(ValueError, "TorchScript IR nests ", what, " ", depth, " levels deep at line ",
             line, ", column ", pos - line_start + 1, " (ka accepts at most ", kMaxIrNesting,
             ")");
  }
  static bool opens(char c) { return c == '(' || c == '[' || c == '{'; }
  bool at(char c, std::size_t offset = 0) const {
    return pos + offset < ir.size() && ir[pos + offset] == c;
  }
  // Called with pos at a '\n'.
  void newline() {
    ++line;
    line_start = pos + 1;
  }
  void open_bracket() {
    if (++brackets > kMaxIrNesting) refuse("brackets", brackets);
  }
  // A line's indentation opens a level where it is deeper than the enclosing one, as the
  // lexer's INDENT tokens do. Every line counts, also those the lexer joins inside brackets:
  // the bracket depth here may be above the parser's, and must not hide a block.
  void indent_of_line() {
    std::size_t width = 0;
    while (at(' ', width) || at('\t', width)) ++width;
    if (at('\n', width) || at('#', width) || pos + width >= ir.size()) return;  // blank
    while (indents.size() > 1 && indents.back() > width) indents.pop_back();
    if (width > indents.back()) {
      indents.push_back(width);
      if (static_cast<int>(indents.size()) - 1 > kMaxIrNesting) {
        pos += width;
        refuse("indented blocks", static_cast<int>(indents.size()) - 1);
      }
    }
  }
  void skip_comment() {
    while (pos < ir.size() && ir[pos] != '\n') {
      if (opens(ir[pos])) open_bracket();
      ++pos;
    }
  }
  void skip_string() {
    const char quote = ir[pos];
    const std::size_t quotes = at(quote, 1) && at(quote, 2) ? 3 : 1;
    pos += quotes;
    while (pos < ir.size()) {
      if (at(quote) && (quotes == 1 || (at(quote, 1) && at(quote, 2)))) {
        pos += quotes;
        return;
      }
      const char c = ir[pos];
      if (c == '\n') {
        if (quotes == 1) return;  // the lexer does not take it as a string
        newline();
      }
      if (opens(c)) open_bracket();
      if (c == '\\' && pos + 1 < ir.size()) {  // an escape: the next character is literal
        ++pos;
        if (ir[pos] == '\n') newline();
        if (opens(ir[pos])) open_bracket();
      }
      ++pos;
    }
  }

  void run() {
    indent_of_line();
    while (pos < ir.size()) {
      const char c = ir[pos];
      if (c == '"' || c == '\'') {
        skip_string();
        continue;
      }
      if (c == '#') {
        skip_comment();
        continue;
      }
      if (opens(c)) open_bracket();
      if ((c == ')' || c == ']' || c == '}') && brackets > 0) --brackets;
      if (c == '\n') {
        newline();
        ++pos;
        indent_of_line();
        continue;
      }
      ++pos;
    }
  }
};

}  // namespace

std::shared_ptr<torch::jit::Graph> parse_ir(const std::string& ir) {
  IrNestingScan{ir}.run();
  auto graph = std::make_shared<torch::jit::Graph>();
  try {
    torch::jit::parseIR(ir, graph.get());
  } catch (const c10::Error& e) {
    KA_THROW(ValueError, "TorchScript IR does not parse: ", e.what_without_backtrace());
  } catch (const std::exception& e) {
    KA_THROW(ValueError, "TorchScript IR does not parse: ", e.what());
  }
  // The parser resolves names as it meets them and accepts graphs that libtorch's passes and
  // interpreter assume cannot exist (a value used before its definition, a block returning the
  // node that owns it): the graph's own structural checks (lint) decide.
  try {
    graph->lint();
  } catch (const c10::Error& e) {
    KA_THROW(ValueError, "TorchScript IR is not a well-formed graph: ",
             e.what_without_backtrace());
  } catch (const std::exception& e) {
    KA_THROW(ValueError, "TorchScript IR is not a well-formed graph: ", e.what());
  }
  return graph;
}

}  // namespace ka::runtime
