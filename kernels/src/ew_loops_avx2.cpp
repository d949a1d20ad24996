// The element-wise loops compiled for x86-64-v3 (AVX2 + FMA).
// Note [Element-wise loops per ISA].
#define KA_EW_LOOPS_TABLE kEwLoopsAvx2
#define KA_EW_LOOPS_ISA "avx2"
#include "ew_loops_body.hpp"
