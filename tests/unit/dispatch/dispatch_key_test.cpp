#include <gtest/gtest.h>

#include <ka/core/error.hpp>
#include <ka/dispatch/dispatch_key.hpp>
#include <ka/dispatch/guards.hpp>
#include <set>

namespace ka::dispatch {
namespace {

TEST(DispatchKeyTest, SpellingsRoundTrip) {
  for (int i = 0; i < kNumDispatchKeys; ++i) {
    const auto k = static_cast<DispatchKey>(i);
    const auto parsed = parse_dispatch_key(to_string(k));
    ASSERT_TRUE(parsed.has_value()) << to_string(k);
    EXPECT_EQ(*parsed, k);
  }
  EXPECT_EQ(to_string(DispatchKey::AutogradCUDA), "AutogradCUDA");
  EXPECT_EQ(to_string(DispatchKey::CompositeExplicitAutogradNonFunctional),
            "CompositeExplicitAutogradNonFunctional");
  EXPECT_FALSE(parse_dispatch_key("NotAKey").has_value());
}

TEST(DispatchKeyTest, RenamePrivateUse1) {
  rename_privateuse1_backend("npu");
  EXPECT_EQ(to_string(DispatchKey::PrivateUse1), "npu");
  EXPECT_EQ(to_string(DispatchKey::AutogradPrivateUse1), "Autogradnpu");
  EXPECT_EQ(parse_dispatch_key("npu"), DispatchKey::PrivateUse1);
  EXPECT_EQ(parse_dispatch_key("PrivateUse1"), DispatchKey::PrivateUse1);
  rename_privateuse1_backend("PrivateUse1");
  EXPECT_EQ(to_string(DispatchKey::PrivateUse1), "PrivateUse1");
  EXPECT_THROW(rename_privateuse1_backend(""), ValueError);
}

TEST(DispatchKeyTest, KeyClassification) {
  EXPECT_TRUE(is_alias_key(DispatchKey::Autograd));
  EXPECT_TRUE(is_alias_key(DispatchKey::CompositeExplicitAutogradNonFunctional));
  EXPECT_FALSE(is_alias_key(DispatchKey::AutogradCPU));
  EXPECT_TRUE(is_per_backend_functionality(DispatchKey::Dense));
  EXPECT_TRUE(is_runtime_key(DispatchKey::AutogradMeta));
  EXPECT_FALSE(is_runtime_key(DispatchKey::AutogradFunctionality));
  EXPECT_TRUE(is_backend_key(DispatchKey::Meta));
  EXPECT_FALSE(is_backend_key(DispatchKey::AutogradMeta));
  EXPECT_EQ(to_functionality_key(DispatchKey::AutogradCUDA), DispatchKey::AutogradFunctionality);
  EXPECT_EQ(to_backend_component(DispatchKey::AutogradCUDA), BackendComponent::CUDABit);
  EXPECT_EQ(to_runtime_key(DispatchKey::Dense, BackendComponent::MetaBit), DispatchKey::Meta);
  EXPECT_EQ(autograd_key_from_backend(BackendComponent::PrivateUse1Bit),
            DispatchKey::AutogradPrivateUse1);
}

TEST(DispatchKeySetTest, LayoutBackendsLowFunctionalitiesAbove) {
  EXPECT_EQ(DispatchKeySet(BackendComponent::CPUBit).raw_repr(), 1U);
  EXPECT_EQ(DispatchKeySet(BackendComponent::CUDABit).raw_repr(), 2U);
  EXPECT_EQ(DispatchKeySet(DispatchKey::Dense).raw_repr(), std::uint64_t{1} << kNumBackends);
  EXPECT_EQ(DispatchKeySet(DispatchKey::CPU).raw_repr(), (std::uint64_t{1} << kNumBackends) | 1U);
  // Priority follows the bit order.
  for (int f = 2; f <= kNumFunctionalities; ++f) {
    EXPECT_GT(DispatchKeySet(static_cast<DispatchKey>(f)).raw_repr(),
              DispatchKeySet(static_cast<DispatchKey>(f - 1)).raw_repr());
  }
  EXPECT_TRUE(DispatchKeySet(DispatchKey::Undefined).empty());
  EXPECT_TRUE(DispatchKeySet(DispatchKey::Autograd).empty());
}

TEST(DispatchKeySetTest, HighestPriorityKey) {
  const DispatchKeySet cpu_tensor{DispatchKey::CPU, DispatchKey::ADInplaceOrView,
                                  DispatchKey::AutogradCPU};
  EXPECT_EQ(cpu_tensor.highest_priority_key(), DispatchKey::AutogradCPU);
  EXPECT_EQ(cpu_tensor.highest_functionality_key(), DispatchKey::AutogradFunctionality);
  EXPECT_EQ(cpu_tensor.highest_backend(), BackendComponent::CPUBit);
  // AutogradCUDA beats AutogradCPU: the highest backend bit wins.
  const DispatchKeySet mixed = cpu_tensor | DispatchKeySet(DispatchKey::AutogradCUDA);
  EXPECT_EQ(mixed.highest_priority_key(), DispatchKey::AutogradCUDA);
  EXPECT_EQ(DispatchKeySet().highest_priority_key(), DispatchKey::Undefined);
  EXPECT_EQ((cpu_tensor | DispatchKeySet(DispatchKey::Tracer)).highest_priority_key(),
            DispatchKey::Tracer);
}

TEST(DispatchKeySetTest, RemoveKeepsBackendBits) {
  const DispatchKeySet ks{DispatchKey::CPU, DispatchKey::AutogradCPU};
  const DispatchKeySet below = ks - kAutogradKeySet;
  EXPECT_TRUE(below.has(DispatchKey::CPU));
  EXPECT_FALSE(below.has(DispatchKey::AutogradCPU));
  EXPECT_EQ(below.highest_priority_key(), DispatchKey::CPU);
  EXPECT_EQ(ks.remove(DispatchKey::AutogradCUDA), below);
  EXPECT_EQ(ks.remove_backend(BackendComponent::CPUBit).highest_backend(),
            BackendComponent::InvalidBit);
}

TEST(DispatchKeySetTest, IterationAndPrinting) {
  const DispatchKeySet ks{DispatchKey::CPU, DispatchKey::CUDA, DispatchKey::ADInplaceOrView,
                          DispatchKey::AutogradCUDA};
  // A per-backend functionality combines with every backend in the set.
  const std::vector<DispatchKey> expected{DispatchKey::CPU, DispatchKey::CUDA,
                                          DispatchKey::ADInplaceOrView, DispatchKey::AutogradCPU,
                                          DispatchKey::AutogradCUDA};
  EXPECT_EQ(ks.keys(), expected);
  EXPECT_EQ(ks.to_string(),
            "DispatchKeySet(CPU, CUDA, ADInplaceOrView, AutogradCPU, AutogradCUDA)");
}

TEST(DispatchKeySetTest, FullAfter) {
  const DispatchKeySet after = DispatchKeySet::full_after(DispatchKey::AutogradCPU);
  EXPECT_FALSE(after.has(DispatchKey::AutogradCPU));
  EXPECT_TRUE(after.has(DispatchKey::AutogradOther));
  EXPECT_TRUE(after.has(DispatchKey::CUDA));
  EXPECT_EQ((DispatchKeySet{DispatchKey::CPU, DispatchKey::AutogradCPU} & kAfterAutogradKeySet)
                .highest_priority_key(),
            DispatchKey::CPU);
}

TEST(DispatchKeySetTest, RuntimeTableIndexIsDenseAndUnique) {
  std::set<int> seen;
  for (int i = 0; i < kNumDispatchKeys; ++i) {
    const auto k = static_cast<DispatchKey>(i);
    const int idx = runtime_entry_index(k);
    if (!is_runtime_key(k)) {
      EXPECT_EQ(idx, -1) << to_string(k);
      continue;
    }
    ASSERT_GE(idx, 0);
    ASSERT_LT(idx, kNumRuntimeEntries);
    EXPECT_TRUE(seen.insert(idx).second) << to_string(k);
    EXPECT_EQ(runtime_key_of_entry(idx), k);
    // The index of a key set is the index of its highest-priority key.
    if (k != DispatchKey::Undefined) {
      EXPECT_EQ(runtime_entry_index(DispatchKeySet(k) | DispatchKeySet(DispatchKey::Dense)), idx);
    }
  }
  EXPECT_EQ(static_cast<int>(seen.size()), kNumRuntimeEntries);
  EXPECT_EQ(runtime_entry_index(DispatchKeySet()), 0);
  // A backend bit with no functionality is Undefined; Dense with no backend is CPU's entry.
  EXPECT_EQ(runtime_entry_index(DispatchKeySet(BackendComponent::CUDABit)), 0);
  EXPECT_EQ(runtime_entry_index(DispatchKeySet(DispatchKey::Dense)),
            runtime_entry_index(DispatchKey::CPU));
}

TEST(DispatchKeySetTest, AliasExpansion) {
  const DispatchKeySet autograd = runtime_key_set(DispatchKey::Autograd);
  EXPECT_TRUE(autograd.has(DispatchKey::AutogradCPU));
  EXPECT_TRUE(autograd.has(DispatchKey::AutogradPrivateUse1));
  EXPECT_TRUE(autograd.has(DispatchKey::AutogradOther));
  EXPECT_FALSE(autograd.has(DispatchKey::CPU));
  const DispatchKeySet math = runtime_key_set(DispatchKey::CompositeImplicitAutograd);
  EXPECT_TRUE(math.has(DispatchKey::CPU) && math.has(DispatchKey::AutogradCUDA));
  EXPECT_FALSE(math.has(DispatchKey::BackendSelect));
  const DispatchKeySet backends = runtime_key_set(DispatchKey::CompositeExplicitAutograd);
  EXPECT_TRUE(backends.has(DispatchKey::Meta));
  EXPECT_FALSE(backends.has(DispatchKey::AutogradMeta));
  EXPECT_TRUE(is_included_in_alias(DispatchKey::CUDA, DispatchKey::CompositeExplicitAutograd));
  EXPECT_FALSE(
      is_included_in_alias(DispatchKey::Undefined, DispatchKey::CompositeImplicitAutograd));
  EXPECT_EQ(backend_key_set_from_autograd(DispatchKey::AutogradCUDA),
            DispatchKeySet(DispatchKey::CUDA));
  EXPECT_TRUE(backend_key_set_from_autograd(DispatchKey::CPU).empty());
}

TEST(GuardTest, DefaultsAndNesting) {
  EXPECT_EQ(tls_local_dispatch_key_set().included, kDefaultIncludedSet);
  EXPECT_TRUE(tls_local_dispatch_key_set().excluded.empty());
  {
    IncludeDispatchKeyGuard inc(DispatchKey::Tracer);
    EXPECT_TRUE(tls_local_dispatch_key_set().included.has(DispatchKey::Tracer));
    {
      IncludeDispatchKeyGuard again(DispatchKey::Tracer);  // already included: no-op
    }
    EXPECT_TRUE(tls_local_dispatch_key_set().included.has(DispatchKey::Tracer));
    {
      AutoDispatchBelowAutograd below;
      EXPECT_TRUE(tls_local_dispatch_key_set().excluded.has(DispatchKey::AutogradFunctionality));
      EXPECT_TRUE(tls_local_dispatch_key_set().excluded.has(DispatchKey::AutogradOther));
    }
    EXPECT_TRUE(tls_local_dispatch_key_set().excluded.empty());
    ExcludeDispatchKeyGuard exc(DispatchKey::BackendSelect);
    EXPECT_TRUE(tls_local_dispatch_key_set().excluded.has(DispatchKey::BackendSelect));
  }
  EXPECT_EQ(tls_local_dispatch_key_set().included, kDefaultIncludedSet);
  EXPECT_TRUE(tls_local_dispatch_key_set().excluded.empty());
}

}  // namespace
}  // namespace ka::dispatch
