// flashc_simd.h -- the one place that maps flashc's vector vocabulary onto an instruction set.
//
// The tile code (flashc_cpu_tile.h) is written only against these names, so a new ISA (NEON, SVE)
// is one more block here and one more flashc_cpu_<isa>.c. The including file picks the ISA by
// defining FLASHC_ISA before the include (the per-ISA translation units do it, each compiled with
// its own -m flags), never by what the compiler happens to enable:
//     FLASHC_ISA_SCALAR  one float per "vector", plain C, any compiler, any CPU
//     FLASHC_ISA_AVX2    8 lanes, needs -mavx2 -mfma -mf16c
//     FLASHC_ISA_AVX512  16 lanes, needs -mavx512f -mavx512bw -mfma -mf16c
//
// Vocabulary (all lanes independent, no horizontal operations are needed by the kernels):
//     FLASHC_VF32                    the vector type;  FLASHC_VF32_W  lanes per vector
//     FLASHC_VF32_ZERO()  _SET1(x)   constructors
//     FLASHC_VF32_LOAD(p) _STORE(p,v)  unaligned load / store of W floats
//     FLASHC_VF32_ADD/SUB/MUL/DIV/MAX/MIN(a, b)
//     FLASHC_VF32_FMA(a, b, c)       a * b + c (fused where the ISA has it)
//     FLASHC_VF32_SEL_NZ(p, x)       x where p != 0 (or NaN), else +0: a masked P_ij = 0 must
//                                    give dS_ij = 0 even where dP_ij is infinite (0 * inf = NaN)
//     flashc_vf32_load_f16(p) / _bf16(p)   W halves / bfloat16s (uint16_t) widened to fp32
//     FLASHC_PREFETCH(p)             hint: bring the line at p towards L2 (no-op where unknown)
//     flashc_vexp2(x)                2^x, ~2 ulp for x in [-126, 128); exactly 0 for x < -126 and
//                                    for -inf (masked scores must contribute exactly nothing); NaN
//                                    for NaN (a NaN score must make its row NaN, as in the
//                                    reference, not look like a masked key)
#ifndef FLASHC_SIMD_H
#define FLASHC_SIMD_H

#include <stdint.h>
#include <string.h>

#define FLASHC_ISA_SCALAR 1
#define FLASHC_ISA_AVX2 2
#define FLASHC_ISA_AVX512 3

#ifndef FLASHC_ISA
#error "define FLASHC_ISA (FLASHC_ISA_SCALAR, _AVX2 or _AVX512) before including flashc_simd.h"
#endif

#if defined(__GNUC__)
#define FLASHC_PREFETCH(p) __builtin_prefetch((p), 0, 2)
#else
#define FLASHC_PREFETCH(p) ((void)(p))
#endif

// 2^f on [-0.5, 0.5]: degree-6 polynomial fitted for relative error (max 1.9e-9 in exact
// arithmetic, 9.6e-8 = 0.8 ulp evaluated in fp32 by Horner's rule).
#define FLASHC_EXP2_C1 0.6931472057374948f
#define FLASHC_EXP2_C2 0.2402264689059338f
#define FLASHC_EXP2_C3 0.0555032877646625f
#define FLASHC_EXP2_C4 0.00961848895972163f
#define FLASHC_EXP2_C5 0.0013399931422222733f
#define FLASHC_EXP2_C6 0.00015345811779943902f

// ------------------------------------------------------------------------------------------------
#if FLASHC_ISA == FLASHC_ISA_AVX512
#include <immintrin.h>

typedef __m512 FLASHC_VF32;
#define FLASHC_VF32_W 16
#define FLASHC_VF32_ZERO() _mm512_setzero_ps()
#define FLASHC_VF32_SET1(x) _mm512_set1_ps(x)
#define FLASHC_VF32_LOAD(p) _mm512_loadu_ps(p)
#define FLASHC_VF32_STORE(p, v) _mm512_storeu_ps((p), (v))
#define FLASHC_VF32_ADD(a, b) _mm512_add_ps((a), (b))
#define FLASHC_VF32_SUB(a, b) _mm512_sub_ps((a), (b))
#define FLASHC_VF32_MUL(a, b) _mm512_mul_ps((a), (b))
#define FLASHC_VF32_DIV(a, b) _mm512_div_ps((a), (b))
#define FLASHC_VF32_MAX(a, b) _mm512_max_ps((a), (b))
#define FLASHC_VF32_MIN(a, b) _mm512_min_ps((a), (b))
#define FLASHC_VF32_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define FLASHC_VF32_SEL_NZ(p, x) _mm512_maskz_mov_ps(_mm512_cmp_ps_mask((p), _mm512_setzero_ps(), _CMP_NEQ_UQ), (x))

static inline FLASHC_VF32 flashc_vf32_load_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline FLASHC_VF32 flashc_vf32_load_bf16(const uint16_t *p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
static inline FLASHC_VF32 flashc_vexp2(FLASHC_VF32 x) {
    // -inf and far-negative inputs clamp here and give 0; NaN stays (max_ps returns its second
    // operand where either is NaN, and NLT is true for NaN) and gives NaN
    x = _mm512_max_ps(_mm512_set1_ps(-127.0f), x);
    __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(FLASHC_EXP2_C6);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FLASHC_EXP2_C5));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FLASHC_EXP2_C4));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FLASHC_EXP2_C3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FLASHC_EXP2_C2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FLASHC_EXP2_C1));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(live, p, _mm512_castsi512_ps(e));
}

// ------------------------------------------------------------------------------------------------
#elif FLASHC_ISA == FLASHC_ISA_AVX2
#include <immintrin.h>

typedef __m256 FLASHC_VF32;
#define FLASHC_VF32_W 8
#define FLASHC_VF32_ZERO() _mm256_setzero_ps()
#define FLASHC_VF32_SET1(x) _mm256_set1_ps(x)
#define FLASHC_VF32_LOAD(p) _mm256_loadu_ps(p)
#define FLASHC_VF32_STORE(p, v) _mm256_storeu_ps((p), (v))
#define FLASHC_VF32_ADD(a, b) _mm256_add_ps((a), (b))
#define FLASHC_VF32_SUB(a, b) _mm256_sub_ps((a), (b))
#define FLASHC_VF32_MUL(a, b) _mm256_mul_ps((a), (b))
#define FLASHC_VF32_DIV(a, b) _mm256_div_ps((a), (b))
#define FLASHC_VF32_MAX(a, b) _mm256_max_ps((a), (b))
#define FLASHC_VF32_MIN(a, b) _mm256_min_ps((a), (b))
#define FLASHC_VF32_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define FLASHC_VF32_SEL_NZ(p, x) _mm256_and_ps(_mm256_cmp_ps((p), _mm256_setzero_ps(), _CMP_NEQ_UQ), (x))

static inline FLASHC_VF32 flashc_vf32_load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline FLASHC_VF32 flashc_vf32_load_bf16(const uint16_t *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
static inline FLASHC_VF32 flashc_vexp2(FLASHC_VF32 x) {
    // as the AVX-512 form: -inf and far-negative inputs give 0, NaN gives NaN
    x = _mm256_max_ps(_mm256_set1_ps(-127.0f), x);
    __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_NLT_UQ);
    __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(x, n);
    __m256 p = _mm256_set1_ps(FLASHC_EXP2_C6);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLASHC_EXP2_C5));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLASHC_EXP2_C4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLASHC_EXP2_C3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLASHC_EXP2_C2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLASHC_EXP2_C1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(live, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// ------------------------------------------------------------------------------------------------
#elif FLASHC_ISA == FLASHC_ISA_SCALAR
#include <math.h>

typedef float FLASHC_VF32;
#define FLASHC_VF32_W 1
#define FLASHC_VF32_ZERO() 0.0f
#define FLASHC_VF32_SET1(x) ((float)(x))
#define FLASHC_VF32_LOAD(p) (*(p))
#define FLASHC_VF32_STORE(p, v) (*(p) = (v))
#define FLASHC_VF32_ADD(a, b) ((a) + (b))
#define FLASHC_VF32_SUB(a, b) ((a) - (b))
#define FLASHC_VF32_MUL(a, b) ((a) * (b))
#define FLASHC_VF32_DIV(a, b) ((a) / (b))
#define FLASHC_VF32_MAX(a, b) ((a) > (b) ? (a) : (b))
#define FLASHC_VF32_MIN(a, b) ((a) < (b) ? (a) : (b))
#define FLASHC_VF32_FMA(a, b, c) ((a) * (b) + (c)) // not fmaf: software fma is slow without the ISA
#define FLASHC_VF32_SEL_NZ(p, x) ((p) != 0.0f ? (x) : 0.0f)

static inline FLASHC_VF32 flashc_vf32_load_f16(const uint16_t *p) {
    uint32_t sign = (uint32_t)(*p & 0x8000u) << 16, exp = (*p >> 10) & 0x1fu, man = *p & 0x3ffu, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        float f = (float)man * 5.9604644775390625e-8f; // subnormal: man * 2^-24
        memcpy(&u, &f, 4);
        u |= sign;
    } else {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline FLASHC_VF32 flashc_vf32_load_bf16(const uint16_t *p) {
    uint32_t u = (uint32_t)*p << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline FLASHC_VF32 flashc_vexp2(FLASHC_VF32 x) {
    if (x < -126.0f) return 0.0f; // also -inf
    if (x != x) return x;         // NaN stays NaN (and (int32_t)NaN below would be undefined)
    float n = floorf(x + 0.5f), f = x - n;
    float p = FLASHC_EXP2_C6;
    p = p * f + FLASHC_EXP2_C5;
    p = p * f + FLASHC_EXP2_C4;
    p = p * f + FLASHC_EXP2_C3;
    p = p * f + FLASHC_EXP2_C2;
    p = p * f + FLASHC_EXP2_C1;
    p = p * f + 1.0f;
    uint32_t u = (uint32_t)((int32_t)n + 127) << 23;
    float e;
    memcpy(&e, &u, 4);
    return p * e;
}

#else
#error "unknown FLASHC_ISA"
#endif

#endif // FLASHC_SIMD_H
