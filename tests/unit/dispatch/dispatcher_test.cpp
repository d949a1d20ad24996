#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <atomic>
#include <ka/dispatch/dispatcher.hpp>
#include <ka/dispatch/guards.hpp>
#include <ka/dispatch/library.hpp>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace ka::dispatch {
namespace {

using Kind = Library::Kind;

std::int64_t ret1(const at::Tensor& /*x*/) { return 1; }
std::int64_t ret2(const at::Tensor& /*x*/) { return 2; }
std::int64_t ret3(const at::Tensor& /*x*/) { return 3; }
std::int64_t ret_keys(DispatchKeySet ks, const at::Tensor& /*x*/) {
  return static_cast<std::int64_t>(ks.highest_priority_key());
}

template <std::int64_t N>
void boxed_ret(const OperatorHandle& /*op*/, DispatchKeySet /*ks*/, Stack* stack) {
  stack->pop_back();
  stack->emplace_back(N);
}

/// An autograd kernel that adds 100 to what the kernel below it returns.
std::int64_t autograd_plus_100(DispatchKeySet ks, const at::Tensor& x) {
  static const auto op = Dispatcher::singleton()
                             .find_op_or_throw("kaut_redispatch::op")
                             .typed<std::int64_t(const at::Tensor&)>();
  return 100 + op.redispatch(ks & kAfterAutogradKeySet, x);
}

at::Tensor cpu_tensor() { return at::zeros({2}); }

std::int64_t call_typed(const char* name, const at::Tensor& x) {
  return Dispatcher::singleton()
      .find_op_or_throw(name)
      .typed<std::int64_t(const at::Tensor&)>()
      .call(x);
}
std::int64_t call_boxed(const char* name, const at::Tensor& x) {
  Stack stack{x};
  Dispatcher::singleton().find_op_or_throw(name).call_boxed(&stack);
  EXPECT_EQ(stack.size(), 1U);
  return stack.back().toInt();
}

TEST(DispatcherTest, DefineFindAndCall) {
  Library def(Kind::kFragment, "kaut_basic");
  def.def("op(Tensor x) -> int");
  Library impl(Kind::kImpl, "kaut_basic", DispatchKey::CPU);
  impl.impl("op", KernelFunction::from_unboxed(&ret1, "ret1"));
  auto op = Dispatcher::singleton().find_op("kaut_basic::op");
  ASSERT_TRUE(op.has_value());
  EXPECT_EQ(op->name(), "kaut_basic::op");
  EXPECT_EQ(op->schema(), "kaut_basic::op(Tensor x) -> int");
  // The framework's fallthroughs (BackendSelect, ADInplaceOrView, AutogradCPU) let a CPU
  // kernel serve a plain CPU tensor.
  EXPECT_EQ(call_typed("kaut_basic::op", cpu_tensor()), 1);
  EXPECT_EQ(call_boxed("kaut_basic::op", cpu_tensor()), 1);
  EXPECT_FALSE(Dispatcher::singleton().find_op("kaut_basic::nope").has_value());
  EXPECT_THROW((void)Dispatcher::singleton().find_op_or_throw("kaut_basic::nope"), ValueError);
  op->check_invariants();
}

TEST(DispatcherTest, BoxedKernelServesTypedCallAndBack) {
  Library lib(Kind::kFragment, "kaut_adapt");
  lib.def("boxed(Tensor x) -> int");
  lib.def("pair(Tensor x, int n) -> (Tensor, int)");
  lib.impl("boxed", DispatchKey::CPU, KernelFunction::from_boxed(&boxed_ret<7>, "boxed7"));
  lib.impl(
      "pair", DispatchKey::CPU,
      KernelFunction::from_unboxed(
          +[](const at::Tensor& x, std::int64_t n) { return std::make_tuple(x, n * 2); }, "pair"));
  EXPECT_EQ(call_typed("kaut_adapt::boxed", cpu_tensor()), 7);
  const at::Tensor x = cpu_tensor();
  auto pair = Dispatcher::singleton().find_op_or_throw("kaut_adapt::pair");
  Stack stack{x, std::int64_t{21}};
  pair.call_boxed(&stack);
  ASSERT_EQ(stack.size(), 2U);
  EXPECT_TRUE(stack[0].toTensor().is_same(x));
  EXPECT_EQ(stack[1].toInt(), 42);
  auto [t, n] =
      pair.typed<std::tuple<at::Tensor, std::int64_t>(const at::Tensor&, std::int64_t)>().call(x,
                                                                                               4);
  EXPECT_TRUE(t.is_same(x));
  EXPECT_EQ(n, 8);
}

std::int64_t count_defined(at::TensorList xs) {
  std::int64_t n = 0;
  for (const at::Tensor& x : xs) n += x.defined() ? 1 : 0;
  return n;
}
std::int64_t count_present(const c10::List<c10::optional<at::Tensor>>& xs) {
  std::int64_t n = 0;
  for (c10::optional<at::Tensor> x : xs) n += x.has_value() ? 1 : 0;
  return n;
}

TEST(DispatcherTest, TensorListArgumentsDispatch) {
  Library lib(Kind::kFragment, "kaut_lists");
  lib.def("count(Tensor[] xs) -> int");
  lib.def("count_opt(Tensor?[] xs) -> int");
  lib.impl("count", DispatchKey::CPU, KernelFunction::from_unboxed(&count_defined, "count"));
  lib.impl("count_opt", DispatchKey::CPU,
           KernelFunction::from_unboxed(&count_present, "count_opt"));
  const std::vector<at::Tensor> xs{cpu_tensor(), cpu_tensor()};
  auto count = Dispatcher::singleton().find_op_or_throw("kaut_lists::count");
  EXPECT_EQ(count.typed<std::int64_t(at::TensorList)>().call(xs), 2);
  Stack stack{c10::IValue(xs)};
  count.call_boxed(&stack);
  EXPECT_EQ(stack.back().toInt(), 2);
  // An empty list carries no tensors: the Undefined entry, which has no kernel here.
  EXPECT_THROW(count.typed<std::int64_t(at::TensorList)>().call({}), NotImplementedError);

  c10::List<c10::optional<at::Tensor>> opt;
  opt.push_back(cpu_tensor());
  opt.push_back(c10::nullopt);
  auto count_opt = Dispatcher::singleton().find_op_or_throw("kaut_lists::count_opt");
  EXPECT_EQ(count_opt.typed<std::int64_t(const c10::List<c10::optional<at::Tensor>>&)>().call(opt),
            1);
  Stack stack2{c10::IValue(opt)};
  count_opt.call_boxed(&stack2);
  EXPECT_EQ(stack2.back().toInt(), 1);
}

std::int64_t two_cpu(const at::Tensor& /*a*/, const at::Tensor& /*b*/) { return 1; }
std::int64_t two_meta(const at::Tensor& /*a*/, const at::Tensor& /*b*/) { return 2; }

TEST(DispatcherTest, KeySetIsTheUnionOfTensorArguments) {
  Library lib(Kind::kFragment, "kaut_union");
  lib.def("two(Tensor a, Tensor b) -> int");
  lib.impl("two", DispatchKey::CPU, KernelFunction::from_unboxed(&two_cpu, "cpu"));
  lib.impl("two", DispatchKey::Meta, KernelFunction::from_unboxed(&two_meta, "meta"));
  const auto op = Dispatcher::singleton()
                      .find_op_or_throw("kaut_union::two")
                      .typed<std::int64_t(const at::Tensor&, const at::Tensor&)>();
  const at::Tensor cpu = cpu_tensor();
  const at::Tensor meta = at::zeros({2}, at::TensorOptions().device(at::kMeta));
  EXPECT_EQ(op.call(cpu, cpu), 1);
  // Like libtorch 1.13, ka has no default fallthrough for AutogradMeta.
  try {
    (void)op.call(cpu, meta);
    FAIL() << "expected NotImplementedError";
  } catch (const NotImplementedError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("Could not run 'kaut_union::two' with arguments from "
                                          "the 'AutogradMeta' backend.",
                                          0),
              0U)
        << e.what();
  }
  Library ft(Kind::kImpl, "kaut_union", DispatchKey::AutogradMeta);
  ft.impl("two", KernelFunction::fallthrough());
  // The highest backend of all tensor arguments wins, whatever their order.
  EXPECT_EQ(op.call(cpu, meta), 2);
  EXPECT_EQ(op.call(meta, cpu), 2);
  Stack stack{cpu, meta};
  op.call_boxed(&stack);
  EXPECT_EQ(stack.back().toInt(), 2);
}

TEST(DispatcherTest, KernelReceivesKeySet) {
  Library lib(Kind::kFragment, "kaut_keys");
  lib.def("op(Tensor x) -> int");
  lib.impl("op", DispatchKey::AutogradCPU, KernelFunction::from_unboxed(&ret_keys, "keys"));
  EXPECT_EQ(call_typed("kaut_keys::op", cpu_tensor()),
            static_cast<std::int64_t>(DispatchKey::AutogradCPU));
  EXPECT_EQ(call_boxed("kaut_keys::op", cpu_tensor()),
            static_cast<std::int64_t>(DispatchKey::AutogradCPU));
}

TEST(DispatcherTest, GuardsAndRedispatch) {
  Library lib(Kind::kFragment, "kaut_redispatch");
  lib.def("op(Tensor x) -> int");
  lib.impl("op", DispatchKey::CPU, KernelFunction::from_unboxed(&ret1, "cpu"));
  lib.impl("op", DispatchKey::Autograd, KernelFunction::from_unboxed(&autograd_plus_100, "ag"));
  lib.impl("op", DispatchKey::Tracer, KernelFunction::from_unboxed(&ret3, "tracer"));
  EXPECT_EQ(call_typed("kaut_redispatch::op", cpu_tensor()), 101);
  EXPECT_EQ(call_boxed("kaut_redispatch::op", cpu_tensor()), 101);
  {
    AutoDispatchBelowAutograd below;
    EXPECT_EQ(call_typed("kaut_redispatch::op", cpu_tensor()), 1);
    EXPECT_EQ(call_boxed("kaut_redispatch::op", cpu_tensor()), 1);
  }
  {
    IncludeDispatchKeyGuard tracing(DispatchKey::Tracer);
    EXPECT_EQ(call_typed("kaut_redispatch::op", cpu_tensor()), 3);
    ExcludeDispatchKeyGuard no_tracing(DispatchKey::Tracer);
    EXPECT_EQ(call_typed("kaut_redispatch::op", cpu_tensor()), 101);
  }
  EXPECT_EQ(call_typed("kaut_redispatch::op", cpu_tensor()), 101);
}

TEST(DispatcherTest, ComputedTableWithProvenance) {
  Library lib(Kind::kFragment, "kaut_table");
  lib.def("op(Tensor x) -> int");
  lib.impl("op", DispatchKey::CompositeImplicitAutograd,
           KernelFunction::from_unboxed(&ret1, "math_fn"));
  auto op = Dispatcher::singleton().find_op_or_throw("kaut_table::op");
  const std::string fallthrough =
      "fallthrough registered at ka/dispatch framework defaults [backend fallback]\n";
  EXPECT_EQ(op.dump_computed_table(),
            "Undefined: math_fn [math kernel]\n"
            "CPU: math_fn [math kernel]\n"
            "CUDA: math_fn [math kernel]\n"
            "Meta: math_fn [math kernel]\n"
            "PrivateUse1: math_fn [math kernel]\n"
            "BackendSelect: " +
                fallthrough + "ADInplaceOrView: " + fallthrough +
                "AutogradOther: math_fn [math kernel]\n"
                "AutogradCPU: math_fn [math kernel]\n"
                "AutogradCUDA: math_fn [math kernel]\n"
                "AutogradMeta: math_fn [math kernel]\n"
                "AutogradPrivateUse1: math_fn [math kernel]\n");
  {
    // A CPU kernel takes CPU and stops AutogradCPU from using the math kernel.
    Library cpu(Kind::kImpl, "kaut_table", DispatchKey::CPU);
    cpu.impl("op", KernelFunction::from_unboxed(&ret2, "cpu_fn"));
    const std::string table = op.dump_computed_table();
    EXPECT_NE(table.find("CPU: cpu_fn [kernel]\n"), std::string::npos) << table;
    EXPECT_NE(table.find("AutogradCPU: " + fallthrough), std::string::npos) << table;
    EXPECT_NE(table.find("AutogradCUDA: math_fn [math kernel]\n"), std::string::npos) << table;
    EXPECT_EQ(call_typed("kaut_table::op", cpu_tensor()), 2);
    op.check_invariants();
    // An Autograd alias kernel now takes AutogradCPU; a direct AutogradCUDA kernel wins there.
    Library ag(Kind::kImpl, "kaut_table", DispatchKey::Autograd);
    ag.impl("op", KernelFunction::from_unboxed(&ret3, "ag_fn"));
    Library ag_cuda(Kind::kImpl, "kaut_table", DispatchKey::AutogradCUDA);
    ag_cuda.impl("op", KernelFunction::from_unboxed(&ret1, "ag_cuda_fn"));
    const std::string table2 = op.dump_computed_table();
    EXPECT_NE(table2.find("AutogradCPU: ag_fn [autograd kernel]\n"), std::string::npos) << table2;
    EXPECT_NE(table2.find("AutogradCUDA: ag_cuda_fn [kernel]\n"), std::string::npos) << table2;
    EXPECT_NE(table2.find("AutogradCUDA: ag_cuda_fn [kernel]\n"), std::string::npos) << table2;
    EXPECT_EQ(call_typed("kaut_table::op", cpu_tensor()), 3);
  }
  EXPECT_EQ(call_typed("kaut_table::op", cpu_tensor()), 1);
  op.check_invariants();
}

TEST(DispatcherTest, ExplicitAfterImplicitLeavesNoStaleMathKernel) {
  // libtorch 1.13 leaves the math kernel in AutogradCPU in this order (see ANCHORS.md).
  Library lib(Kind::kFragment, "kaut_stale");
  lib.def("op(Tensor x) -> int");
  lib.impl("op", DispatchKey::CompositeImplicitAutograd,
           KernelFunction::from_unboxed(&ret1, "math_fn"));
  lib.impl("op", DispatchKey::CompositeExplicitAutograd,
           KernelFunction::from_unboxed(&ret2, "default_fn"));
  auto op = Dispatcher::singleton().find_op_or_throw("kaut_stale::op");
  op.check_invariants();
  const std::string table = op.dump_computed_table();
  EXPECT_NE(table.find("CPU: default_fn [default backend kernel]\n"), std::string::npos) << table;
  EXPECT_NE(table.find("Undefined: default_fn [default backend kernel]\n"), std::string::npos);
  EXPECT_NE(table.find("AutogradCPU: fallthrough"), std::string::npos) << table;
  EXPECT_EQ(call_typed("kaut_stale::op", cpu_tensor()), 2);
}

TEST(DispatcherTest, FallthroughKernelAndPerBackendMask) {
  Library lib(Kind::kFragment, "kaut_fallthrough");
  lib.def("op(Tensor x) -> int");
  lib.impl("op", DispatchKey::CPU, KernelFunction::from_unboxed(&ret1, "cpu"));
  lib.impl("op", DispatchKey::Autograd, KernelFunction::from_unboxed(&ret3, "ag"));
  EXPECT_EQ(call_typed("kaut_fallthrough::op", cpu_tensor()), 3);
  {
    // Skips AutogradCPU only; AutogradCUDA keeps the autograd kernel.
    Library ft(Kind::kImpl, "kaut_fallthrough", DispatchKey::AutogradCPU);
    ft.impl("op", KernelFunction::fallthrough("ft"));
    EXPECT_EQ(call_typed("kaut_fallthrough::op", cpu_tensor()), 1);
    EXPECT_EQ(call_boxed("kaut_fallthrough::op", cpu_tensor()), 1);
    const std::string table =
        Dispatcher::singleton().find_op_or_throw("kaut_fallthrough::op").dump_computed_table();
    EXPECT_NE(table.find("AutogradCPU: fallthrough ft [kernel]\n"), std::string::npos) << table;
    EXPECT_NE(table.find("AutogradCUDA: ag [autograd kernel]\n"), std::string::npos) << table;
  }
  EXPECT_EQ(call_typed("kaut_fallthrough::op", cpu_tensor()), 3);
}

TEST(DispatcherTest, BackendFallback) {
  Library lib(Kind::kFragment, "kaut_fallback");
  lib.def("op(Tensor x) -> int");
  EXPECT_THROW(call_typed("kaut_fallback::op", cpu_tensor()), NotImplementedError);
  {
    Library fb(Kind::kImpl, "_", DispatchKey::CPU);
    fb.fallback(KernelFunction::from_boxed(&boxed_ret<9>, "cpu_fallback"));
    EXPECT_EQ(call_typed("kaut_fallback::op", cpu_tensor()), 9);
    EXPECT_EQ(call_boxed("kaut_fallback::op", cpu_tensor()), 9);
    // Operators defined later get existing fallbacks.
    Library later(Kind::kFragment, "kaut_fallback");
    later.def("later(Tensor x) -> int");
    EXPECT_EQ(call_typed("kaut_fallback::later", cpu_tensor()), 9);
    // One fallback per key.
    Library again(Kind::kImpl, "_", DispatchKey::CPU);
    try {
      again.fallback(KernelFunction::from_boxed(&boxed_ret<8>, "second"));
      FAIL() << "expected a duplicate-fallback error";
    } catch (const ValueError& e) {
      EXPECT_EQ(std::string(e.what()),
                "Tried to register multiple backend fallbacks for the same dispatch key CPU; "
                "previous registration cpu_fallback, new registration second");
    }
    EXPECT_THROW(again.fallback(KernelFunction::from_unboxed(&ret1, "typed")), ValueError);
  }
  EXPECT_THROW(call_typed("kaut_fallback::op", cpu_tensor()), NotImplementedError);
  Dispatcher::singleton().check_invariants();
}

TEST(DispatcherTest, OverwriteAndRestore) {
  Library lib(Kind::kFragment, "kaut_overwrite");
  lib.def("op(Tensor x) -> int");
  lib.impl("op", DispatchKey::CPU, KernelFunction::from_unboxed(&ret1, "first"));
  auto op = Dispatcher::singleton().find_op_or_throw("kaut_overwrite::op");
  {
    Library second(Kind::kImpl, "kaut_overwrite", DispatchKey::CPU);
    second.impl("op", KernelFunction::from_unboxed(&ret2, "second"));
    EXPECT_EQ(call_typed("kaut_overwrite::op", cpu_tensor()), 2);
    EXPECT_EQ(op.dump_state(),
              "name: kaut_overwrite::op\n"
              "schema: kaut_overwrite::op(Tensor x) -> int\n"
              "debug: registered by ka::dispatch::Library\n"
              "alias analysis kind: FROM_SCHEMA\n"
              "CPU: second :: (none) [ boxed unboxed ]\n"
              "CPU (inactive): first :: (none) [ boxed unboxed ]\n");
  }
  EXPECT_EQ(call_typed("kaut_overwrite::op", cpu_tensor()), 1);
  EXPECT_EQ(op.dump_state().find("inactive"), std::string::npos);
  op.check_invariants();
}

TEST(DispatcherTest, AliasKeysInDumpState) {
  Library lib(Kind::kFragment, "kaut_state", std::nullopt, "registered at state.cpp:1");
  lib.def("op(Tensor x) -> int");
  lib.impl("op", DispatchKey::CompositeExplicitAutograd,
           KernelFunction::from_boxed(&boxed_ret<1>, ""));
  lib.impl("op", DispatchKey::AutogradCPU, KernelFunction::fallthrough());
  EXPECT_EQ(Dispatcher::singleton().find_op_or_throw("kaut_state::op").dump_state(),
            "name: kaut_state::op\n"
            "schema: kaut_state::op(Tensor x) -> int\n"
            "debug: registered at state.cpp:1\n"
            "alias analysis kind: FROM_SCHEMA\n"
            "AutogradCPU: registered at state.cpp:1 :: (none) [ fallthrough boxed ]\n"
            "CompositeExplicitAutograd[alias]: registered at state.cpp:1 :: (none) [ boxed ]\n");
}

TEST(DispatcherTest, MissingKernelErrors) {
  Library lib(Kind::kFragment, "kaut_missing");
  lib.def("op(Tensor x) -> int");
  lib.def("opt(Tensor? x) -> int");
  lib.impl("op", DispatchKey::CUDA, KernelFunction::from_unboxed(&ret1, "cuda_fn"));
  try {
    (void)call_typed("kaut_missing::op", cpu_tensor());
    FAIL() << "expected NotImplementedError";
  } catch (const NotImplementedError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(
        msg.rfind("Could not run 'kaut_missing::op' with arguments from the 'CPU' backend.", 0), 0U)
        << msg;
    EXPECT_NE(
        msg.find("'kaut_missing::op' is only available for these backends: [CUDA, "
                 "BackendSelect, ADInplaceOrView, AutogradOther, AutogradCPU, AutogradCUDA]."),
        std::string::npos)
        << msg;
    EXPECT_NE(msg.find("CUDA: cuda_fn [kernel]\n"), std::string::npos) << msg;
  }
  // No tensor arguments: the Undefined entry.
  Stack stack{c10::IValue()};
  try {
    Dispatcher::singleton().find_op_or_throw("kaut_missing::opt").call_boxed(&stack);
    FAIL() << "expected NotImplementedError";
  } catch (const NotImplementedError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("There were no tensor arguments to this function (e.g., "
                                          "you passed an empty list of Tensors), but no fallback "
                                          "function is registered for schema kaut_missing::opt.",
                                          0),
              0U)
        << e.what();
  }
}

TEST(DispatcherTest, RegistrationErrors) {
  Library lib(Kind::kFragment, "kaut_errors", std::nullopt, "registered at a.cpp:1");
  lib.def("op(Tensor x) -> int");
  Library lib2(Kind::kFragment, "kaut_errors", std::nullopt, "registered at b.cpp:2");
  try {
    lib2.def("op(Tensor x) -> int");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "Tried to register an operator (kaut_errors::op(Tensor x) -> int) with the same "
              "name and overload name multiple times. Each overload's schema should only be "
              "registered with a single call to def(). Duplicate registration: registered at "
              "b.cpp:2. Original registration: registered at a.cpp:1");
  }
  // Overloads are distinct operators.
  lib2.def("op.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)");
  EXPECT_TRUE(Dispatcher::singleton().find_op("kaut_errors::op.out").has_value());
  EXPECT_THROW(lib2.def("bad_schema"), ValueError);
  EXPECT_THROW(lib2.def("other::op(Tensor x) -> int"), ValueError);

  Library impl(Kind::kImpl, "kaut_errors", DispatchKey::CPU);
  EXPECT_THROW(impl.def("x(Tensor x) -> int"), ValueError);
  EXPECT_THROW(impl.impl("op", DispatchKey::CUDA, KernelFunction::from_unboxed(&ret1, "k")),
               ValueError);

  Library def1(Kind::kDef, "kaut_errors_ns");
  EXPECT_THROW(Library(Kind::kDef, "kaut_errors_ns"), ValueError);

  // Typed kernels must share one C++ signature.
  impl.impl("op", KernelFunction::from_unboxed(&ret1, "k1"));
  Library ag(Kind::kImpl, "kaut_errors", DispatchKey::AutogradCPU);
  EXPECT_THROW(ag.impl("op", KernelFunction::from_unboxed(
                                 +[](const at::Tensor&) { return 1.0; }, "k2")),
               ValueError);
  auto op = Dispatcher::singleton().find_op_or_throw("kaut_errors::op");
  EXPECT_THROW((void)op.typed<double(const at::Tensor&)>(), ValueError);
  EXPECT_NO_THROW((void)op.typed<std::int64_t(const at::Tensor&)>());
}

TEST(DispatcherTest, DeregisteringDefHidesOperator) {
  {
    Library lib(Kind::kFragment, "kaut_gone");
    lib.def("op(Tensor x) -> int");
    EXPECT_TRUE(Dispatcher::singleton().find_op("kaut_gone::op").has_value());
  }
  EXPECT_FALSE(Dispatcher::singleton().find_op("kaut_gone::op").has_value());
  Library again(Kind::kFragment, "kaut_gone");
  again.def("op(Tensor x, Tensor y) -> int");
  EXPECT_TRUE(Dispatcher::singleton().find_op("kaut_gone::op").has_value());
}

// Registered at static-initialisation time through the macros.
std::int64_t macro_cpu(const at::Tensor& /*x*/) { return 77; }

}  // namespace
}  // namespace ka::dispatch

KA_LIBRARY(kaut_macro, m) { m.def("op(Tensor x) -> int"); }
KA_LIBRARY_IMPL(kaut_macro, CPU, m) {
  m.impl("op", ka::dispatch::KernelFunction::from_unboxed(&ka::dispatch::macro_cpu, ""));
}
KA_LIBRARY_FRAGMENT(kaut_macro, m) { m.def("op2(Tensor x) -> int"); }
// What a program linking the block from a static archive writes; see
// Note [Libraries and static linking].
KA_USE_LIBRARY(kaut_macro);

namespace ka::dispatch {
namespace {

TEST(DispatcherTest, LibraryMacros) {
  EXPECT_EQ(call_typed("kaut_macro::op", cpu_tensor()), 77);
  EXPECT_TRUE(Dispatcher::singleton().find_op("kaut_macro::op2").has_value());
  const std::string state = Dispatcher::singleton().find_op_or_throw("kaut_macro::op").dump_state();
  EXPECT_NE(state.find("CPU: registered at "), std::string::npos) << state;
  EXPECT_NE(state.find("dispatcher_test.cpp:"), std::string::npos) << state;
}

// Note [Concurrency test]
// Callers dispatch without locks while registrars overwrite and restore kernels of the same
// operator. Every call must see a complete table (one of the kernels that was ever current),
// and at the end the table must equal the computed one. Run it under TSan too: configure a
// separate build with -fsanitize=thread and run `ka_dispatch_tests --gtest_filter=Concurrency*`.
TEST(ConcurrencyTest, CallsWhileRegistering) {
  Library base(Kind::kFragment, "kaut_concurrent");
  base.def("op(Tensor x) -> int");
  base.impl("op", DispatchKey::CPU, KernelFunction::from_unboxed(&ret1, "base"));
  const auto op = Dispatcher::singleton()
                      .find_op_or_throw("kaut_concurrent::op")
                      .typed<std::int64_t(const at::Tensor&)>();
  const at::Tensor x = cpu_tensor();
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::atomic<long> calls{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      const at::Tensor local = x;  // each thread its own handle to the same tensor
      while (!stop.load(std::memory_order_relaxed)) {
        std::int64_t r = 0;
        if (t % 2 == 0) {
          r = op.call(local);
        } else {
          Stack stack{local};
          op.call_boxed(&stack);
          r = stack.back().toInt();
        }
        if (r != 1 && r != 2 && r != 3) bad.fetch_add(1);
        calls.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::vector<std::thread> registrars;
  for (int t = 0; t < 3; ++t) {
    registrars.emplace_back([t] {
      for (int i = 0; i < 1000; ++i) {
        if (t == 0) {
          // Overwrites the CPU kernel; destroying the library restores it.
          Library lib(Kind::kImpl, "kaut_concurrent", DispatchKey::CPU);
          lib.impl("op", KernelFunction::from_unboxed(&ret2, "overwrite"));
        } else if (t == 1) {
          Library lib(Kind::kImpl, "kaut_concurrent", DispatchKey::Autograd);
          lib.impl("op", KernelFunction::from_boxed(&boxed_ret<3>, "autograd"));
        } else {
          // A fallback change republishes every operator's table.
          Library lib(Kind::kImpl, "_", DispatchKey::CUDA);
          lib.fallback(KernelFunction::from_boxed(&boxed_ret<4>, "cuda fallback"));
        }
      }
    });
  }
  for (auto& r : registrars) r.join();
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(calls.load(), 0);
  EXPECT_EQ(op.call(x), 1);
  op.check_invariants();
}

}  // namespace
}  // namespace ka::dispatch
