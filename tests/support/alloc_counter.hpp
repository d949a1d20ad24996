// A counting replacement of the global operator new, for tests that prove a path allocates
// nothing. Link tests/support/alloc_counter.cpp into the test binary to use it.
#pragma once

/// Calls of the global operator new so far, on any thread.
long ka_test_allocation_count();
