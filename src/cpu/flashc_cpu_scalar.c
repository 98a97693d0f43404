// flashc_cpu_scalar.c -- the CPU kernels (flashc_cpu_kernels.h) with one float per "vector": the
// tiled FA2 algorithm in plain C11 for any CPU, and the reading aid for the SIMD builds (same code).
// Flags: none. flashc_cpu.c uses it where AVX2 is missing, or when FLASHC_CPU_ISA=scalar asks.
#define FLASHC_ISA FLASHC_ISA_SCALAR
#define FLASHC_ISA_NAME(x) x##_scalar
#define FLASHC_ISA_STR "scalar"
#include "flashc_cpu_kernels.h"
