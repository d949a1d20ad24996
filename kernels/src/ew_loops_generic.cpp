// The element-wise loops compiled for baseline x86-64 (SSE2).
// Note [Element-wise loops per ISA].
#define KA_EW_LOOPS_TABLE kEwLoopsGeneric
#define KA_EW_LOOPS_ISA "generic"
#include "ew_loops_body.hpp"
