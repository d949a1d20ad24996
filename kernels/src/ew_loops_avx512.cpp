// The element-wise loops compiled for x86-64-v4 (AVX-512).
// Note [Element-wise loops per ISA].
#define KA_EW_LOOPS_TABLE kEwLoopsAvx512
#define KA_EW_LOOPS_ISA "avx512"
#include "ew_loops_body.hpp"
