// flashc_cpu_decode_avx512.c -- the decode kernel (flashc_cpu_decode_kernel.h) compiled for AVX512.
// Flags: -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512bf16 -mfma -mf16c (the Makefile's rule for *_avx512.c).
// flashc_cpu_decode.c calls it only when the CPU backend picked the avx512 kernels.
#define FLASHC_ISA FLASHC_ISA_AVX512
#define FLASHC_ISA_NAME(x) x##_avx512
#include "flashc_cpu_decode_kernel.h"
