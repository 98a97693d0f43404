// flashc_cpu_avx512.c -- the CPU kernels (flashc_cpu_kernels.h) compiled for AVX512.
// Flags: -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512bf16 -mfma -mf16c (the Makefile's rule for
// *_avx512.c). flashc_cpu.c picks these when the CPU has AVX-512 F/BW/DQ/VL/BF16.
#define FLASHC_ISA FLASHC_ISA_AVX512
#define FLASHC_ISA_NAME(x) x##_avx512
#define FLASHC_ISA_STR "avx512"
#include "flashc_cpu_kernels.h"
