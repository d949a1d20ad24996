// Replaces the global operator new of a test binary with one that counts calls, so tests can
// prove a hot path allocates nothing (see alloc_counter.hpp). Kept in its own file: where the
// replacement is visible beside new-expressions GCC flags free() as mismatched with new.
#include "alloc_counter.hpp"

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

/// Calls of the global operator new so far (any thread).
long ka_test_allocation_count() { return g_allocations.load(std::memory_order_relaxed); }

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t /*size*/) noexcept { std::free(p); }
