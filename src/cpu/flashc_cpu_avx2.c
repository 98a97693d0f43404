// flashc_cpu_avx2.c -- the CPU kernels (flashc_cpu_kernels.h) compiled for AVX2.
// Flags: -mavx2 -mfma -mf16c (the Makefile's rule for *_avx2.c). flashc_cpu.c picks these by
// default when the CPU has AVX2 and FMA.
#define FLASHC_ISA FLASHC_ISA_AVX2
#define FLASHC_ISA_NAME(x) x##_avx2
#define FLASHC_ISA_STR "avx2"
#include "flashc_cpu_kernels.h"
