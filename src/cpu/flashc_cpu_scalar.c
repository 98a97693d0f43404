// flashc_cpu_scalar.c -- the CPU kernels (flashc_cpu_kernels.h) compiled for SCALAR.
// Flags: none (plain C11, any CPU). flashc_cpu.c calls these only when the CPU has the ISA.
#define FLASHC_ISA FLASHC_ISA_SCALAR
#define FLASHC_ISA_NAME(x) x##_scalar
#define FLASHC_ISA_STR "scalar"
#include "flashc_cpu_kernels.h"
