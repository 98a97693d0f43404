// flashc_cpu_decode_avx2.c -- the decode kernel (flashc_cpu_decode_kernel.h) compiled for AVX2.
// Flags: -mavx2 -mfma -mf16c (the Makefile's rule for *_avx2.c).
// flashc_cpu_decode.c calls it only when the CPU backend picked the avx2 kernels.
#define FLASHC_ISA FLASHC_ISA_AVX2
#define FLASHC_ISA_NAME(x) x##_avx2
#include "flashc_cpu_decode_kernel.h"
