#include <ka/core/error.hpp>
#include <ka/dispatch/library.hpp>
#include <string>
#include <utility>

namespace ka::dispatch {
namespace {

const char* kind_name(Library::Kind kind) {
  switch (kind) {
    case Library::Kind::kDef:
      return "KA_LIBRARY";
    case Library::Kind::kImpl:
      return "KA_LIBRARY_IMPL";
    case Library::Kind::kFragment:
      return "KA_LIBRARY_FRAGMENT";
  }
  return "KA_LIBRARY";
}

}  // namespace

Library::Library(Kind kind, std::string ns, std::optional<DispatchKey> key, std::string debug)
    : kind_(kind), ns_(std::move(ns)), key_(key), debug_(std::move(debug)) {
  KA_CHECK(!ns_.empty(), "a Library needs a namespace");
  KA_CHECK(!key_.has_value() || kind_ == Kind::kImpl,
           "only a KA_LIBRARY_IMPL block takes a dispatch key (", debug_, ")");
  if (kind_ == Kind::kDef) {
    registrations_.push_back(Dispatcher::singleton().register_library(ns_, debug_));
  }
}

Library::~Library() {
  // Newest first, so an overwrite made inside this block is undone before its original.
  while (!registrations_.empty()) registrations_.pop_back();
}

Library::Library(Library&&) noexcept = default;

Library& Library::operator=(Library&& o) noexcept {
  if (this != &o) {
    while (!registrations_.empty()) registrations_.pop_back();
    kind_ = o.kind_;
    ns_ = std::move(o.ns_);
    key_ = o.key_;
    debug_ = std::move(o.debug_);
    registrations_ = std::move(o.registrations_);
  }
  return *this;
}

std::string Library::qualified_name(std::string_view name) const {
  const std::size_t paren = name.find('(');
  const std::size_t sep = name.substr(0, paren).find("::");
  if (sep == std::string_view::npos) return ns_ + "::" + std::string(name);
  const std::string_view given = name.substr(0, sep);
  KA_CHECK(given == ns_, "Explicitly provided namespace (", given,
           ") in operator name does not match namespace of enclosing ", kind_name(kind_),
           " block (", ns_, ").  Move this definition to the ", kind_name(kind_),
           " block corresponding to this namespace (and consider deleting the namespace from "
           "your schema string.)  (Error occurred at ",
           debug_, ")");
  return std::string(name);
}

Library& Library::def(std::string_view schema) {
  KA_CHECK(kind_ != Kind::kImpl,
           "Cannot define an operator inside of a KA_LIBRARY_IMPL block.  All def()s should be "
           "placed in the (unique) KA_LIBRARY block for their namespace.  (Error occurred at ",
           debug_, ")");
  registrations_.push_back(Dispatcher::singleton().register_def(qualified_name(schema), debug_));
  return *this;
}

Library& Library::impl(std::string_view name, KernelFunction kernel) {
  if (kernel.debug().empty()) kernel.set_debug(debug_);
  registrations_.push_back(
      Dispatcher::singleton().register_impl(qualified_name(name), key_, std::move(kernel)));
  return *this;
}

Library& Library::impl(std::string_view name, DispatchKey key, KernelFunction kernel) {
  KA_CHECK(!key_.has_value() || *key_ == key, "Explicitly provided dispatch key (", to_string(key),
           ") is inconsistent with the dispatch key of the enclosing ", kind_name(kind_),
           " block (", to_string(*key_), ").  Please declare a separate ", kind_name(kind_),
           " block for this dispatch key and move your impl() there.  (Error occurred at ", debug_,
           ")");
  if (kernel.debug().empty()) kernel.set_debug(debug_);
  registrations_.push_back(
      Dispatcher::singleton().register_impl(qualified_name(name), key, std::move(kernel)));
  return *this;
}

Library& Library::fallback(KernelFunction kernel) {
  KA_CHECK(kind_ == Kind::kImpl && key_.has_value(),
           "Cannot register a fallback outside a KA_LIBRARY_IMPL block with a dispatch key.  "
           "(Error occurred at ",
           debug_, ")");
  KA_CHECK(ns_ == "_", "Fallback functions must be registered in the \"_\" namespace, not ", ns_,
           " (Error occurred at ", debug_, ")");
  if (kernel.debug().empty()) kernel.set_debug(debug_);
  registrations_.push_back(Dispatcher::singleton().register_fallback(*key_, std::move(kernel)));
  return *this;
}

namespace detail {

LibraryInitializer::LibraryInitializer(Library::Kind kind, const char* ns,
                                       std::optional<DispatchKey> key, void (*init)(Library&),
                                       const char* file, int line)
    : library_(kind, ns, key, "registered at " + std::string(file) + ":" + std::to_string(line)) {
  init(library_);
}

}  // namespace detail
}  // namespace ka::dispatch
