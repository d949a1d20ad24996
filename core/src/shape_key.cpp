#include <ka/core/error.hpp>
#include <ka/core/shape_key.hpp>
#include <ka/core/text.hpp>

#include <cctype>

namespace ka {
namespace {

bool valid_op_name(std::string_view op) {
  // ns::name or ns::name.overload, identifiers of [A-Za-z0-9_].
  const auto sep = op.find("::");
  if (sep == std::string_view::npos || sep == 0 || sep + 2 >= op.size()) {
    return false;
  }
  int dots = 0;
  for (std::size_t i = 0; i < op.size(); ++i) {
    const char c = op[i];
    if (i == sep || i == sep + 1) {
      continue;
    }
    if (c == '.') {
      if (i < sep || i + 1 == op.size() || op[i - 1] == '.' || op[i - 1] == ':' || ++dots > 1) {
        return false;
      }
      continue;
    }
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) {
      return false;
    }
  }
  return true;
}

}  // namespace

ShapeKey::ShapeKey(std::string op, std::vector<TensorSpec> args)
    : op_(std::move(op)), args_(std::move(args)) {
  KA_CHECK(valid_op_name(op_), "bad operator name '", op_,
           "' in shape key: expected ns::name[.overload], e.g. aten::add.Tensor");
  text_ = op_ + "(";
  for (std::size_t i = 0; i < args_.size(); ++i) {
    if (i != 0) {
      text_ += ',';
    }
    const TensorSpec& t = args_[i];
    for (const auto s : t.sizes) {
      KA_CHECK(s >= 0, "negative size in shape key for ", op_, " argument ", i);
    }
    text_ += short_name(t.dtype);
    text_ += '[' + join_ints(t.sizes, ",") + ']';
    KA_CHECK(!(t.contiguous && t.transposed), "shape key for ", op_, " argument ", i,
             " is both contiguous and transposed");
    text_ += t.contiguous ? 'c' : t.transposed ? 't' : 's';
  }
  text_ += ')';
  hash_ = fnv1a64(text_);
}

ShapeKey ShapeKey::parse(std::string_view text) {
  const auto open = text.find('(');
  KA_CHECK(open != std::string_view::npos && !text.empty() && text.back() == ')',
           "bad shape key '", text, "': expected op(args)");
  const std::string op(text.substr(0, open));
  std::string_view rest = text.substr(open + 1, text.size() - open - 2);
  std::vector<TensorSpec> args;
  while (!rest.empty()) {
    const auto lb = rest.find('[');
    const auto rb = rest.find(']');
    KA_CHECK(lb != std::string_view::npos && rb != std::string_view::npos && lb < rb &&
                 rb + 1 < rest.size(),
             "bad tensor in shape key '", text, "' near '", rest, "'");
    TensorSpec spec;
    spec.dtype = parse_dtype(rest.substr(0, lb));
    const std::string_view sizes = rest.substr(lb + 1, rb - lb - 1);
    if (!sizes.empty()) {
      for (const auto part : split(sizes, ',')) {
        const auto v = parse_int64(part);
        KA_CHECK(v.has_value() && *v >= 0, "bad size '", part, "' in shape key '", text, "'");
        spec.sizes.push_back(*v);
      }
    }
    const char layout = rest[rb + 1];
    KA_CHECK(layout == 'c' || layout == 't' || layout == 's', "bad layout '", layout,
             "' in shape key '", text,
             "': expected c (contiguous), t (transposed matrix) or s (strided)");
    KA_CHECK(layout != 't' || spec.sizes.size() == 2, "bad layout 't' in shape key '", text,
             "': only a matrix can be transposed");
    spec.contiguous = layout == 'c';
    spec.transposed = layout == 't';
    args.push_back(std::move(spec));
    rest = rest.substr(rb + 2);
    if (!rest.empty()) {
      KA_CHECK(rest.front() == ',' && rest.size() > 1, "bad separator in shape key '", text, "'");
      rest = rest.substr(1);
    }
  }
  return ShapeKey(op, std::move(args));
}

}  // namespace ka
