// flashc_cpu_decode_scalar.c -- the decode kernel (flashc_cpu_decode_kernel.h) compiled for SCALAR.
// Flags: none (plain C11, any CPU).
// flashc_cpu_decode.c calls it only when the CPU backend picked the scalar kernels.
#define FLASHC_ISA FLASHC_ISA_SCALAR
#define FLASHC_ISA_NAME(x) x##_scalar
#include "flashc_cpu_decode_kernel.h"
