// flashc_cpu_amx.c -- the CPU kernels (flashc_cpu_kernels.h) compiled for AVX-512 with AMX: the
// avx512 kernels, but bf16 (head_dim % 32 == 0) forward and backward products on AMX tiles
// (flashc_cpu_tile.h), and the other bf16 products widened to fp32 instead of dot products.
// Flags: the *_avx512.c ones plus -mamx-tile -mamx-bf16 (the Makefile's rule for *_amx.c).
// flashc_cpu.c picks these when the CPU has AVX-512 BF16 and AMX-BF16 and Linux grants the process
// the AMX tile state.
#define FLASHC_ISA FLASHC_ISA_AVX512
#define FLASHC_CPU_AMX 1
#define FLASHC_ISA_NAME(x) x##_amx
#define FLASHC_ISA_STR "amx"
#include "flashc_cpu_kernels.h"
