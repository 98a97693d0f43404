// flashc_cpu_tile.h -- the CPU backend's tile steps, written only against flashc_simd.h.
//
// Included by flashc_cpu_kernels.h, so compiled once per ISA. Every step is a static function over
// fp32 tiles in the thread's scratch, named for the math it does and output first:
//     tile_qkT(S_T, K_j, Q_iT)   S_ij = Q_i K_j^T, stored transposed (keys x queries)
// The forward keeps queries in the vector lanes (tiles are keys x queries, or D x queries): row
// statistics m_i, l_i are then plain vectors and no step needs a horizontal reduction. The
// backward keeps keys in the lanes (tiles are queries x keys, or D x keys) for the same reason.
//
// All matrix products go through one register-blocked microkernel, tile_mm: C (M x N) (+)= A B
// with B row-major (N vectorised, N a multiple of NV vectors) and A read one scalar at a time
// through two strides, so A may be any tile, transposed or not (P_ij^T as P_ij, dO_i as dO_i^T).
// Scores are kept in log2 units (scale * log2 e is folded into Q or K when they are packed) so the
// softmax is exp2, as in FA2's CUDA kernels.
#ifndef FLASHC_CPU_TILE_H
#define FLASHC_CPU_TILE_H

#include "flashc_cpu.h"
#include "flashc_simd.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define W FLASHC_VF32_W

#ifndef FLASHC_CPU_AMX
#define FLASHC_CPU_AMX 0 // 1 in flashc_cpu_amx.c only (the avx512 kernels with AMX tiles)
#endif

#if defined(__GNUC__)
#define FLASHC_FORCE_INLINE static inline __attribute__((always_inline))
#else
#define FLASHC_FORCE_INLINE static inline
#endif

// Microkernel shapes: MR rows of C by NV vectors, MR * NV accumulators in registers. AVX2 has 16
// registers: 4 x 3 (12 accumulators + 3 B vectors + 1 broadcast) for the forward, whose N is the
// 144-query block, and 6 x 2 for the backward, whose N is the 128-key block or D. AVX-512 has 32.
#if FLASHC_ISA == FLASHC_ISA_AVX512
#define FWD_MR 8
#define BWD_MR 12
#else
#define FWD_MR 4
#define BWD_MR 6
#endif
#define FWD_NV 3
#define BWD_NV 2
#define MM_MR_MAX 12
#define MM_NV_MAX 3

// The products over the head dim (S_ij, dP_ij) sum it in blocks of DOT_KB (mm_block): a sequential
// fp32 sum's error grows with its length, and at D = 216 its scores erred as much as a naive fp32
// attention's (LSE 1.34e-5 at scale 0.457; blocked: 3.81e-6, as the decode kernel's 16 lanes
// 2.86e-6: dev/cpu/prec_probe.c, bench/results/cpu_amd-epyc-2c_2026-12-05-s36-dotkb.txt).
#ifndef DOT_KB
#define DOT_KB 32
#endif

// ------------------------------------------------------------------------------------------------
// the microkernel

// C[0:MR][0:NV*W] (= or +=) sum_k A(m, k) * B[k][0:NV*W], A(m, k) = A[m * a_rs + k * a_cs];
// with col_scale != NULL the old C is first scaled by column: C[m][n] * col_scale[n] (the forward's
// O_i = diag(alpha) O_i + P_ij V_j in one pass over O_i^T, whose columns are the query rows).
// kb > 0 sums k in blocks of kb, each from zero in the registers and then added to C (which stays
// in L1): blocked summation, for the products over the head dim (DOT_KB above).
// MR, NV and kb are constants at every call, so the loops unroll and acc lives in registers.
FLASHC_FORCE_INLINE void mm_block(int MR, int NV, float *restrict C, int64_t ldc, const float *restrict A,
                                  int64_t a_rs, int64_t a_cs, const float *restrict B, int64_t ldb, int64_t K,
                                  int accumulate, const float *restrict col_scale, int64_t kb) {
    FLASHC_VF32 acc[MM_MR_MAX][MM_NV_MAX];
    for (int m = 0; m < MR; m++)
        for (int v = 0; v < NV; v++)
            acc[m][v] = accumulate ? FLASHC_VF32_LOAD(C + m * ldc + v * W) : FLASHC_VF32_ZERO();
    if (col_scale)
        for (int v = 0; v < NV; v++) {
            FLASHC_VF32 cs = FLASHC_VF32_LOAD(col_scale + v * W);
            for (int m = 0; m < MR; m++) acc[m][v] = FLASHC_VF32_MUL(acc[m][v], cs);
        }
    if (kb <= 0) kb = K;
    int64_t k0 = 0;
    do { // one block of k, then C = acc (the first) or C + acc, from zero again
        const int64_t k1 = K - k0 < kb ? K : k0 + kb;
        for (int64_t k = k0; k < k1; k++) {
            const float *b = B + k * ldb, *a = A + k * a_cs;
            FLASHC_VF32 bv[MM_NV_MAX];
            for (int v = 0; v < NV; v++) bv[v] = FLASHC_VF32_LOAD(b + v * W);
            for (int m = 0; m < MR; m++) {
                FLASHC_VF32 am = FLASHC_VF32_SET1(a[m * a_rs]);
                for (int v = 0; v < NV; v++) acc[m][v] = FLASHC_VF32_FMA(am, bv[v], acc[m][v]);
            }
        }
        for (int m = 0; m < MR; m++)
            for (int v = 0; v < NV; v++) {
                float *c = C + m * ldc + v * W;
                FLASHC_VF32_STORE(c, k0 ? FLASHC_VF32_ADD(FLASHC_VF32_LOAD(c), acc[m][v]) : acc[m][v]);
                acc[m][v] = FLASHC_VF32_ZERO();
            }
        k0 = k1;
    } while (k0 < K);
}

// C (M x N, row stride ldc) (= or +=) A (M x K) B (K x N, row stride ldb); N % (NV * W) == 0.
// Column panels outermost so one NV-vector panel of B (K x NV*W floats) stays in L1 while A
// streams; leftover rows of M take 4-, 2- and 1-row blocks.
FLASHC_FORCE_INLINE void tile_mm(int MR, int NV, float *restrict C, int64_t ldc, const float *restrict A,
                                 int64_t a_rs, int64_t a_cs, const float *restrict B, int64_t ldb, int64_t M,
                                 int64_t N, int64_t K, int accumulate, const float *restrict col_scale, int64_t kb) {
    for (int64_t n0 = 0; n0 < N; n0 += NV * W) {
        float *c = C + n0;
        const float *b = B + n0, *cs = col_scale ? col_scale + n0 : NULL;
        int64_t m0 = 0;
        for (; m0 + MR <= M; m0 += MR)
            mm_block(MR, NV, c + m0 * ldc, ldc, A + m0 * a_rs, a_rs, a_cs, b, ldb, K, accumulate, cs, kb);
        if (MR > 4)
            for (; m0 + 4 <= M; m0 += 4)
                mm_block(4, NV, c + m0 * ldc, ldc, A + m0 * a_rs, a_rs, a_cs, b, ldb, K, accumulate, cs, kb);
        if (m0 + 2 <= M) {
            mm_block(2, NV, c + m0 * ldc, ldc, A + m0 * a_rs, a_rs, a_cs, b, ldb, K, accumulate, cs, kb);
            m0 += 2;
        }
        if (m0 < M) mm_block(1, NV, c + m0 * ldc, ldc, A + m0 * a_rs, a_rs, a_cs, b, ldb, K, accumulate, cs, kb);
    }
}

// ------------------------------------------------------------------------------------------------
// loads: input rows (any dtype, row stride rs) to fp32 tiles. f16/bf16 are widened once here, at
// the tile load, never inside the products (the AVX-512 bf16 forward below multiplies bf16 pairs).

// How far ahead (in rows) the row loads ask for lines: an input row is read once per query (or key)
// block and comes from L3 or DRAM, and rows of different heads sit in different 4 KiB pages (8 KiB
// apart at H = 16, D = 128), so the hardware's stream prefetcher sees 8-line runs and stays cold.
#define ROW_PREFETCH 16

// dst[r][0:D] (row stride ld) = mult * src rows r < n; lines of row r + ROW_PREFETCH are requested
// while row r is copied.
static void tile_load_rows(float *restrict dst, int64_t ld, const void *src, int64_t rs, int64_t n, int64_t D,
                           flashc_dtype t, float mult) {
    FLASHC_VF32 vm = FLASHC_VF32_SET1(mult);
    const size_t es = flashc__dtype_size(t);
    for (int64_t r = 0; r < n; r++) {
        if (r + ROW_PREFETCH < n)
            for (int64_t off = 0; off < D * (int64_t)es; off += 64)
                FLASHC_PREFETCH((const char *)src + (size_t)((r + ROW_PREFETCH) * rs) * es + off);
        float *o = dst + r * ld;
        int64_t d = 0;
        if (t == FLASHC_DTYPE_F32) {
            const float *s = (const float *)src + r * rs;
            for (; d + W <= D; d += W) FLASHC_VF32_STORE(o + d, FLASHC_VF32_MUL(vm, FLASHC_VF32_LOAD(s + d)));
        } else if (t == FLASHC_DTYPE_F16) {
            const uint16_t *s = (const uint16_t *)src + r * rs;
            for (; d + W <= D; d += W) FLASHC_VF32_STORE(o + d, FLASHC_VF32_MUL(vm, flashc_vf32_load_f16(s + d)));
        } else {
            const uint16_t *s = (const uint16_t *)src + r * rs;
            for (; d + W <= D; d += W) FLASHC_VF32_STORE(o + d, FLASHC_VF32_MUL(vm, flashc_vf32_load_bf16(s + d)));
        }
        for (; d < D; d++) o[d] = mult * flashc__load(src, r * rs + d, t);
    }
}

// dst0, dst1 (n rows, row stride ld) = fp32 copies of the input rows src0, src1 (row strides rs0,
// rs1, dtype t), through one slot of a thread's row cache, c0, c1, whose *slot_tag names the block
// it holds: on a miss (*slot_tag != tag) the input rows are read (f16/bf16 widened) into the slot,
// on a hit the slot is copied, densely (a slot's rows are contiguous, the input's may be pages apart).
static void tile_load_rows_cached(float *restrict dst0, float *restrict dst1, float *restrict c0, float *restrict c1,
                                  int64_t *slot_tag, int64_t tag, const void *src0, int64_t rs0, const void *src1,
                                  int64_t rs1, int64_t n, int64_t D, int64_t ld, flashc_dtype t) {
    if (*slot_tag != tag) {
        tile_load_rows(c0, ld, src0, rs0, n, D, t, 1.0f);
        tile_load_rows(c1, ld, src1, rs1, n, D, t, 1.0f);
        *slot_tag = tag;
    }
    memcpy(dst0, c0, sizeof(float) * (size_t)(n * ld));
    memcpy(dst1, c1, sizeof(float) * (size_t)(n * ld));
}

// Ask for the first rows of the next block's tile load (tile_load_rows asks for the rest itself):
// n rows of `bytes` bytes, row stride rs elements of size es.
static void tile_prefetch_rows(const void *src, int64_t rs, size_t es, int64_t n, int64_t bytes) {
    for (int64_t r = 0; r < n; r++)
        for (int64_t off = 0; off < bytes; off += 64) FLASHC_PREFETCH((const char *)src + (size_t)(r * rs) * es + off);
}

// Transposed copies between input rows and the tiles whose lanes are rows (Q_i^T, O_i^T; K_j^T,
// V_j^T, dK_j^T, dV_j^T), TR rows at a time (f32 and bf16 without a dtype switch per element): the
// input rows sit pages apart (H * D * es bytes), so TR of them are read or written side by side,
// TR streams in flight instead of one, and the tile side of each step is TR contiguous floats.
// Element by element, with a switch per element, the Q_i load and O_i store took 17% of a forward
// at seqlen 512, D = 64 (perf, 2 threads); this made the forward 1.12-1.21x and the backward
// 1.08-1.20x faster at seqlen 512 and 1024, fp32 and bf16 (at 4096: within the machine's noise;
// bench/results/cpu_amd-epyc-2c_2026-12-01-transpose.txt).
// (Prefetching the next TR input rows as well: no difference.)
#define TR 8

// dst[d][r] (row stride ld) = mult * src[r][d] for r < n, 0 for n <= r < ld: a transposed, padded
// copy (once per stationary tile).
static void tile_load_T(float *restrict dst, int64_t ld, const void *src, int64_t rs, int64_t n, int64_t D,
                        flashc_dtype t, float mult) {
    for (int64_t r0 = 0; r0 < n; r0 += TR) {
        const int64_t nr = min64(TR, n - r0);
        for (int64_t d = 0; d < D; d++) {
            float *o = dst + d * ld + r0;
            if (t == FLASHC_DTYPE_F32)
                for (int64_t i = 0; i < nr; i++) o[i] = mult * ((const float *)src)[(r0 + i) * rs + d];
            else if (t == FLASHC_DTYPE_BF16)
                for (int64_t i = 0; i < nr; i++) o[i] = mult * flashc__bf16_to_f32(((const uint16_t *)src)[(r0 + i) * rs + d]);
            else
                for (int64_t i = 0; i < nr; i++) o[i] = mult * flashc__load(src, (r0 + i) * rs + d, t);
        }
    }
    for (int64_t d = 0; d < D; d++)
        for (int64_t r = n; r < ld; r++) dst[d * ld + r] = 0.0f;
}

// dst[r][d] (row stride rs elements, dtype t) = srcT[d][r] * mul[r] for r < n, d < D: the
// forward's O_i = diag(l_i)^-1 O_i out of O_i^T, the backward's dK_j, dV_j out of dK_j^T, dV_j^T
// (row stride ld).
static void tile_store_T(void *dst, int64_t rs, flashc_dtype t, const float *restrict srcT, int64_t ld,
                         const float *restrict mul, int64_t n, int64_t D) {
    for (int64_t r0 = 0; r0 < n; r0 += TR) {
        const int64_t nr = min64(TR, n - r0);
        for (int64_t d = 0; d < D; d++) {
            const float *s = srcT + d * ld + r0, *m = mul + r0;
            if (t == FLASHC_DTYPE_F32)
                for (int64_t i = 0; i < nr; i++) ((float *)dst)[(r0 + i) * rs + d] = s[i] * m[i];
            else if (t == FLASHC_DTYPE_BF16)
                for (int64_t i = 0; i < nr; i++) ((uint16_t *)dst)[(r0 + i) * rs + d] = flashc__f32_to_bf16(s[i] * m[i]);
            else
                for (int64_t i = 0; i < nr; i++) flashc__store(dst, (r0 + i) * rs + d, t, s[i] * m[i]);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// score transforms, shared by both layouts (elementwise over n floats)

// Softcap: x = s_scaled; S = out_mul * cap * tanh(x / cap); T = tanh(x / cap) if T != NULL (the
// backward's 1 - T^2). tanh(y) = (1 - e) / (1 + e) with e = 2^(-2 y log2 e), y clamped to +-9
// where tanh is +-1 in fp32 (1 - tanh(9) = 3e-8); absolute error ~1e-7.
static void tile_softcap(float *restrict S, float *restrict T, int64_t n, float cap, float out_mul) {
    FLASHC_VF32 inv = FLASHC_VF32_SET1(1.0f / cap), k = FLASHC_VF32_SET1(-2.0f * LOG2E),
                lo = FLASHC_VF32_SET1(-9.0f), hi = FLASHC_VF32_SET1(9.0f), one = FLASHC_VF32_SET1(1.0f),
                om = FLASHC_VF32_SET1(out_mul * cap);
    for (int64_t i = 0; i < n; i += W) {
        FLASHC_VF32 y = FLASHC_VF32_MIN(hi, FLASHC_VF32_MAX(lo, FLASHC_VF32_MUL(FLASHC_VF32_LOAD(S + i), inv)));
        FLASHC_VF32 e = flashc_vexp2(FLASHC_VF32_MUL(k, y));
        FLASHC_VF32 th = FLASHC_VF32_DIV(FLASHC_VF32_SUB(one, e), FLASHC_VF32_ADD(one, e));
        if (T) FLASHC_VF32_STORE(T + i, th);
        FLASHC_VF32_STORE(S + i, FLASHC_VF32_MUL(om, th));
    }
}

// ------------------------------------------------------------------------------------------------
// forward steps: tiles are keys x queries (row length FWD_BR), m_i, l_i are vectors of FWD_BR.
// Each step works on the block's first nl query lanes, nl = its query rows rounded up to the
// microkernel's width (FWD_NV vectors, 24 lanes on AVX2): a short last block (80 of seqlen 512's
// rows) then costs 96 lanes, not 144.

#define BRF FLASHC_CPU_FWD_BR
#define FWD_LANES (FWD_NV * W)

// S_ij^T = K_j Q_i^T  (Alg. 1 line 8; Q_i carries scale * log2 e). K_j: nk rows, row stride k_rs.
static void tile_qkT(float *restrict S_T, const float *restrict K_j, int64_t k_rs, const float *restrict Q_iT,
                     int64_t nk, int64_t nl, int64_t D) {
    tile_mm(FWD_MR, FWD_NV, S_T, BRF, K_j, k_rs, 1, Q_iT, BRF, nk, nl, D, 0, NULL, DOT_KB);
}

// S_ij^T[c][r] -= slope2 * |i0 + r + sk - sq - (j0 + c)|  (ALiBi, slope2 = slope * log2 e)
static void tile_alibi_kq(float *restrict S_T, int64_t nk, int64_t nl, int64_t i0, int64_t j0, int64_t diag_off,
                          float slope2) {
    for (int64_t c = 0; c < nk; c++) {
        float *s = S_T + c * BRF;
        float base = (float)(i0 + diag_off - (j0 + c)); // exact below 2^24
        for (int r = 0; r < nl; r++) s[r] -= slope2 * fabsf(base + (float)r);
    }
}

// S_ij^T[c][r] = -inf where key j0 + c is outside row r's range [lo[r], hi[r]) (boundary blocks)
static void tile_mask_kq(float *restrict S_T, int64_t nk, int64_t j0, const int64_t *lo, const int64_t *hi,
                         int64_t nq) {
    for (int64_t c = 0; c < nk; c++) {
        float *s = S_T + c * BRF;
        int64_t j = j0 + c;
        for (int64_t r = 0; r < nq; r++)
            if (j < lo[r] || j >= hi[r]) s[r] = -INFINITY;
    }
}

// m_new = max(m_old, rowmax(S_ij))  (Alg. 1 line 9), and m_use = max(m_new, -FLT_MAX): the
// subtrahend that keeps a row with no visible key yet at P = 0, alpha = 0 instead of NaN.
static void tile_rowmax(float *restrict m_new, float *restrict m_use, const float *restrict S_T, const float *m_old,
                        int64_t nk, int64_t nl) {
    for (int r = 0; r < nl; r += W) {
        FLASHC_VF32 mx = FLASHC_VF32_LOAD(m_old + r);
        for (int64_t c = 0; c < nk; c++) mx = FLASHC_VF32_MAX(mx, FLASHC_VF32_LOAD(S_T + c * BRF + r));
        FLASHC_VF32_STORE(m_new + r, mx);
        FLASHC_VF32_STORE(m_use + r, FLASHC_VF32_MAX(mx, FLASHC_VF32_SET1(-FLT_MAX)));
    }
}

// alpha = 2^(m_old - m_use)  (Alg. 1 line 10's rescale factor e^{m_i^{j-1} - m_i^j})
static void tile_alpha(float *restrict alpha, const float *m_old, const float *m_use, int64_t nl) {
    for (int r = 0; r < nl; r += W)
        FLASHC_VF32_STORE(alpha + r,
                          flashc_vexp2(FLASHC_VF32_SUB(FLASHC_VF32_LOAD(m_old + r), FLASHC_VF32_LOAD(m_use + r))));
}

// P_ij = 2^(S_ij - m_use), in place, and l_i = alpha * l_i + rowsum(P_ij)  (Alg. 1 line 9), in
// one pass over the tile
static void tile_exp_rowsum(float *restrict S_T, float *restrict l, const float *restrict m_use,
                            const float *restrict alpha, int64_t nk, int64_t nl) {
    for (int r = 0; r < nl; r += W) {
        FLASHC_VF32 mu = FLASHC_VF32_LOAD(m_use + r), sum = FLASHC_VF32_ZERO();
        for (int64_t c = 0; c < nk; c++) {
            float *s = S_T + c * BRF + r;
            FLASHC_VF32 e = flashc_vexp2(FLASHC_VF32_SUB(FLASHC_VF32_LOAD(s), mu));
            FLASHC_VF32_STORE(s, e);
            sum = FLASHC_VF32_ADD(sum, e);
        }
        FLASHC_VF32_STORE(l + r, FLASHC_VF32_FMA(FLASHC_VF32_LOAD(alpha + r), FLASHC_VF32_LOAD(l + r), sum));
    }
}

// O_i = diag(alpha) O_i + P_ij V_j, as O_i^T = O_i^T diag(alpha) + V_j^T P_ij^T  (Alg. 1 line 10),
// in one pass over O_i^T. V_j: nk rows, stride v_rs.
static void tile_pv_acc(float *restrict O_T, const float *restrict alpha, const float *restrict P_T,
                        const float *restrict V_j, int64_t v_rs, int64_t nk, int64_t nl, int64_t D) {
    tile_mm(FWD_MR, FWD_NV, O_T, BRF, V_j, 1, v_rs, P_T, BRF, D, nl, nk, 1, alpha, 0);
}

// ------------------------------------------------------------------------------------------------
// bf16 products by dot products (AVX-512 BF16): vdpbf16ps adds a[2l] b[2l] + a[2l+1] b[2l+1] into
// fp32 lane l, twice the multiply-adds of an fp32 FMA per instruction, straight from bf16 pairs.
// So the operands are tiles of 32-bit words, each a pair of bf16 along the product's reduction:
// "rows" (a row's pairs along D: the input as it is), "pairs of rows" (word d of pair row c = row
// 2c's and row 2c+1's element d: tile_pair_rows, tile_pair_f32) or transposed pairs (tile_load_T2).
// The forward's:
//   S_ij^T = K_j Q_i^T:       K_j's rows, Q2[d/2][lane] (tile_load_T2)
//   O_i^T += V_j^T P_ij^T:    V_j by pairs of key rows, P_ij^T by pairs of key rows
// The backward's are below its fp32 steps. P_ij and dS_ij are rounded to bf16 for the products, as
// the GPU kernels do (and the tests' naive bf16 yardstick); the softmax and l_i stay fp32. Q_i is
// not scaled before rounding: the scale multiplies S_ij in fp32 as it leaves the registers.

// dst[r][0:D] (row stride ld) = the 16-bit rows src[r] (row stride rs), r < n: a dense copy, the
// lines of row r + ROW_PREFETCH asked for as in tile_load_rows
static void tile_copy_rows16(uint16_t *restrict dst, int64_t ld, const uint16_t *src, int64_t rs, int64_t n, int64_t D) {
    for (int64_t r = 0; r < n; r++) {
        if (r + ROW_PREFETCH < n)
            for (int64_t off = 0; off < 2 * D; off += 64) FLASHC_PREFETCH((const char *)(src + (r + ROW_PREFETCH) * rs) + off);
        memcpy(dst + r * ld, src + r * rs, sizeof(uint16_t) * (size_t)D);
    }
}

// Q2[k][r] = the pair (Q[r][2k], Q[r][2k+1]) of bf16 input rows r < n (row stride rs elements; D
// even), 0 for n <= r < ld: Q_i^T (forward) or K_j^T, V_j^T (backward) by 32-bit words
static void tile_load_T2(uint32_t *restrict Q2, int64_t ld, const uint16_t *src, int64_t rs, int64_t n, int64_t D) {
    for (int64_t r0 = 0; r0 < n; r0 += TR) {
        const int64_t nr = min64(TR, n - r0);
        for (int64_t k = 0; k < D / 2; k++)
            for (int64_t i = 0; i < nr; i++) memcpy(Q2 + k * ld + r0 + i, src + (r0 + i) * rs + 2 * k, 4);
    }
    for (int64_t k = 0; k < D / 2; k++)
        for (int64_t r = n; r < ld; r++) Q2[k * ld + r] = 0;
}

// P2[c][d] = the pair (src[2c][d], src[2c+1][d]) for c < n_pairs, d < D, of the bf16 rows src[r]
// (row stride rs), rows r >= n read as 0 (so a padding row meets a 0, never the input past its end);
// P2's columns [D, ld) are 0. Row lines are asked for ROW_PREFETCH rows ahead.
static void tile_pair_rows(uint32_t *restrict P2, int64_t ld, const uint16_t *src, int64_t rs, int64_t n, int64_t n_pairs,
                           int64_t D) {
#if FLASHC_ISA == FLASHC_ISA_AVX512
    // word d of a pair row: low half from row 2c, high half from row 2c + 1
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37, 5,
                                        36, 4, 35, 3, 34, 2, 33, 1, 32, 0),
                  hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
#endif
    for (int64_t c = 0; c < n_pairs; c++) {
        for (int64_t r = 2 * c + ROW_PREFETCH; r < min64(2 * c + 2 + ROW_PREFETCH, n); r++)
            for (int64_t off = 0; off < 2 * D; off += 64) FLASHC_PREFETCH((const char *)(src + r * rs) + off);
        const uint16_t *a = 2 * c < n ? src + 2 * c * rs : NULL, *b = 2 * c + 1 < n ? src + (2 * c + 1) * rs : NULL;
        uint32_t *o = P2 + c * ld;
        int64_t d = 0;
#if FLASHC_ISA == FLASHC_ISA_AVX512
        for (; d + 32 <= D; d += 32) {
            const __m512i x = a ? _mm512_loadu_si512((const void *)(a + d)) : _mm512_setzero_si512(),
                          y = b ? _mm512_loadu_si512((const void *)(b + d)) : _mm512_setzero_si512();
            _mm512_storeu_si512((void *)(o + d), _mm512_permutex2var_epi16(x, lo, y));
            _mm512_storeu_si512((void *)(o + d + 16), _mm512_permutex2var_epi16(x, hi, y));
        }
#endif
        for (; d < D; d++) o[d] = (uint32_t)(a ? a[d] : 0) | (uint32_t)(b ? b[d] : 0) << 16;
        for (; d < ld; d++) o[d] = 0;
    }
}

#if FLASHC_ISA == FLASHC_ISA_AVX512
#define FLASHC_CPU_BF16DOT 1
// Whether the kernels take vdpbf16ps for bf16 (else they widen to fp32 at the tile loads). Not on
// the AMX CPUs: there it runs at half the fp32 FMA's multiply-adds (the bench's ceilings on an
// Intel Xeon with AMX, 2 threads: bf16 dot 206.3 GFLOP/s, fp32 FMA 410.2), and bf16 at D 80
// widened ran 1.47-1.48x faster forward, 1.37-1.40x backward (bench/results/
// cpu_intel-xeon-amx-2c_2026-12-06-s40-d80.txt). Their bf16 runs on the tiles where D % 32 == 0.
#define FLASHC_CPU_DOT_KERNELS (!FLASHC_CPU_AMX)

// C[0:MR][0:NV*W] = out_mul * sum_k pair(A, m, k) . B[k][lanes], or (accumulate) C diag(col_scale)
// + the same sum with out_mul 1 (col_scale NULL: C + the sum): the pair of row m at A[m * a_rs + k *
// a_cs], B's row k NV vectors of pairs (row stride ldb words).
FLASHC_FORCE_INLINE void mm2_block(int MR, int NV, float *restrict C, int64_t ldc, const uint32_t *restrict A,
                                   int64_t a_rs, int64_t a_cs, const uint32_t *restrict B, int64_t ldb, int64_t K,
                                   int accumulate, const float *restrict col_scale, float out_mul) {
    __m512 acc[MM_MR_MAX][MM_NV_MAX];
    for (int m = 0; m < MR; m++)
        for (int v = 0; v < NV; v++) {
            acc[m][v] = accumulate ? _mm512_loadu_ps(C + m * ldc + v * W) : _mm512_setzero_ps();
            if (col_scale) acc[m][v] = _mm512_mul_ps(acc[m][v], _mm512_loadu_ps(col_scale + v * W));
        }
    for (int64_t k = 0; k < K; k++) {
        const uint32_t *b = B + k * ldb, *a = A + k * a_cs;
        __m512bh bv[MM_NV_MAX];
        for (int v = 0; v < NV; v++) bv[v] = (__m512bh)_mm512_loadu_si512((const void *)(b + v * W));
        for (int m = 0; m < MR; m++) {
            const __m512bh am = (__m512bh)_mm512_set1_epi32((int)a[m * a_rs]);
            for (int v = 0; v < NV; v++) acc[m][v] = _mm512_dpbf16_ps(acc[m][v], am, bv[v]);
        }
    }
    const __m512 om = _mm512_set1_ps(out_mul);
    for (int m = 0; m < MR; m++)
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(C + m * ldc + v * W, out_mul != 1.0f ? _mm512_mul_ps(acc[m][v], om) : acc[m][v]);
}

// tile_mm's blocking over mm2_block (C's columns a multiple of NV * W; out_mul 1 when accumulating)
FLASHC_FORCE_INLINE void tile_mm2(int MR, int NV, float *restrict C, int64_t ldc, const uint32_t *restrict A, int64_t a_rs,
                                  int64_t a_cs, const uint32_t *restrict B, int64_t ldb, int64_t M, int64_t N, int64_t K,
                                  int accumulate, const float *restrict col_scale, float out_mul) {
    for (int64_t n0 = 0; n0 < N; n0 += NV * W) {
        float *c = C + n0;
        const uint32_t *b = B + n0;
        const float *cs = col_scale ? col_scale + n0 : NULL;
        int64_t m0 = 0;
        for (; m0 + MR <= M; m0 += MR)
            mm2_block(MR, NV, c + m0 * ldc, ldc, A + m0 * a_rs, a_rs, a_cs, b, ldb, K, accumulate, cs, out_mul);
        for (; m0 + 4 <= M; m0 += 4)
            mm2_block(4, NV, c + m0 * ldc, ldc, A + m0 * a_rs, a_rs, a_cs, b, ldb, K, accumulate, cs, out_mul);
        for (; m0 < M; m0++) mm2_block(1, NV, c + m0 * ldc, ldc, A + m0 * a_rs, a_rs, a_cs, b, ldb, K, accumulate, cs, out_mul);
    }
}

// P2[c][lanes] = the bf16 pairs (P[2c][lane], P[2c+1][lane]) of the fp32 tile P (n rows of lanes
// [0, nl), row stride ld; a missing row n read as 0), in place: P2's row c takes the bytes of P's row
// c, which is read before (c = 0) or already consumed (c >= 1).
static void tile_pair_f32(float *restrict P, int64_t ld, int64_t n, int64_t nl) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
                                         20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int64_t c = 0; c < (n + 1) / 2; c++) {
        const float *a = P + 2 * c * ld, *b = P + (2 * c + 1) * ld;
        const int has_b = 2 * c + 1 < n;
        for (int64_t r = 0; r < nl; r += W) {
            const __m512 x = _mm512_loadu_ps(a + r), y = has_b ? _mm512_loadu_ps(b + r) : _mm512_setzero_ps();
            // cvtne2ps: y's bf16 in the high 16 halves, x's in the low; idx interleaves them
            const __m512i xy = (__m512i)_mm512_cvtne2ps_pbh(y, x);
            _mm512_storeu_si512((void *)(P + c * ld + r), _mm512_permutexvar_epi16(idx, xy));
        }
    }
}

// dst[r][0:nl] (row stride ld) = bf16(mul * src[r][0:nl]) (src row stride src_ld; nl % 32 == 0)
static void tile_bf16_rows(uint16_t *restrict dst, int64_t ld, const float *restrict src, int64_t src_ld, int64_t n,
                           int64_t nl, float mul) {
    const __m512 m = _mm512_set1_ps(mul);
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < nl; c += 32) {
            const float *x0 = src + r * src_ld + c;
            const __m512 x = _mm512_mul_ps(m, _mm512_loadu_ps(x0)), y = _mm512_mul_ps(m, _mm512_loadu_ps(x0 + 16));
            _mm512_storeu_si512((void *)(dst + r * ld + c), (__m512i)_mm512_cvtne2ps_pbh(y, x));
        }
}

#else
// No bf16 dot products: the kernels' `dot` is 0 and these are never called (they keep the kernels'
// one code path, and the product steps below, free of #if).
#define FLASHC_CPU_BF16DOT 0
#define FLASHC_CPU_DOT_KERNELS 0
static inline void tile_mm2(int MR, int NV, float *C, int64_t ldc, const uint32_t *A, int64_t a_rs, int64_t a_cs,
                            const uint32_t *B, int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate,
                            const float *col_scale, float out_mul) {
    (void)MR, (void)NV, (void)C, (void)ldc, (void)A, (void)a_rs, (void)a_cs, (void)B, (void)ldb, (void)M, (void)N, (void)K;
    (void)accumulate, (void)col_scale, (void)out_mul;
}
static void tile_pair_f32(float *P, int64_t ld, int64_t n, int64_t nl) { (void)P, (void)ld, (void)n, (void)nl; }
static void tile_bf16_rows(uint16_t *dst, int64_t ld, const float *src, int64_t src_ld, int64_t n, int64_t nl, float mul) {
    (void)dst, (void)ld, (void)src, (void)src_ld, (void)n, (void)nl, (void)mul;
}
#endif

// S_ij^T = mul * K_j Q_i^T (keys x lanes): K_j dense bf16 rows (stride D), Q2 as tile_load_T2 left it
static void tile_qkT2(float *restrict S_T, const uint16_t *restrict K_j, const uint32_t *restrict Q2, int64_t nk, int64_t nl,
                      int64_t D, float mul) {
    tile_mm2(FWD_MR, FWD_NV, S_T, BRF, (const uint32_t *)K_j, D / 2, 1, Q2, BRF, nk, nl, D / 2, 0, NULL, mul);
}

// O_i^T = O_i^T diag(alpha) + V_j^T P_ij^T (tile_pv_acc on pairs): V2 by pairs of key rows
// (tile_pair_rows), P2 by pairs of key rows (tile_pair_f32), over nk keys
static void tile_pv_acc2(float *restrict O_T, const float *restrict alpha, const uint32_t *restrict P2,
                         const uint32_t *restrict V2, int64_t nk, int64_t nl, int64_t D) {
    tile_mm2(FWD_MR, FWD_NV, O_T, BRF, V2, 1, D, P2, BRF, D, nl, (nk + 1) / 2, 1, alpha, 1.0f);
}

// ------------------------------------------------------------------------------------------------
// The bf16 forward's products on AMX tiles (flashc_cpu_amx.c: Intel Sapphire Rapids and later;
// the backward's are at the end of this file).
// TDPBF16PS multiplies a 16 x 32 bf16 tile A by a 32 x 16 one B held as pairs (row r = the pairs of
// rows 2r, 2r + 1) into a 16 x 16 fp32 tile C: the vdpbf16ps layout above, 16 rows of A at once, at
// 16x an AVX-512 core's bf16 multiply-adds a cycle. So the operands are the dot path's tiles:
//   S_ij^T = K_j Q_i^T:     A = K_j's bf16 rows (t.K), B = Q2 (tile_load_T2)
//   O_i^T += V_j^T P_ij^T:  A = V_j^T by pairs of keys (V2T[d][c], tile_pair_rows_T: the dot path's
//                           V2 transposed), B = P2 (tile_pair_f32)
// Every tile is 16 rows x 64 bytes (amx_begin); C is read from and written to memory, so the
// rescale diag(alpha) of O_i^T is a pass over it (skipped when every alpha is 1) and the scale of
// S_ij a pass over S_ij^T. Needs D % 32 == 0 (whole tiles of pairs along D) and whole 16-lane tiles
// (na % 16 == 0: FWD_LANES is 48 on AVX-512). Tiles 0-3 accumulate, 4-5 hold A, 6-7 B.
#if FLASHC_CPU_AMX
static void amx_begin(void) {
    const flashc_amx_cfg c = flashc__amx_cfg();
    _tile_loadconfig(&c);
}

static void amx_end(void) { _tile_release(); }

// X[r][0:nl] *= mul for rows r < n (row stride ld; nl % W == 0): the scale of S_ij the dot paths
// apply as it leaves their registers
static void amx_scale_rows(float *restrict X, int64_t ld, int64_t n, int64_t nl, float mul) {
    const __m512 m = _mm512_set1_ps(mul);
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < nl; c += W) _mm512_storeu_ps(X + r * ld + c, _mm512_mul_ps(m, _mm512_loadu_ps(X + r * ld + c)));
}

// Zeroes the pair rows [ceil(n / 2), 16 ks) of P2 (row stride ld words, nl of them used), ks =
// ceil(n / 32): the B operand's whole tiles over n rows paired by tile_pair_f32. Returns ks.
static int64_t amx_pad_pairs(uint32_t *restrict P2, int64_t ld, int64_t n, int64_t nl) {
    const int64_t pairs = (n + 1) / 2, ks = ceil_div(pairs, 16);
    for (int64_t c = pairs; c < 16 * ks; c++) memset(P2 + c * ld, 0, 4 * (size_t)nl);
    return ks;
}

// C = A B over tiles, C (M x N fp32, row stride ldc bytes) zeroed first or loaded (accumulate), A
// (M x 32 ks bf16, row stride lda bytes), B (16 ks pair rows x N, row stride ldb bytes): M and N
// multiples of 16, 2 x 2 tiles of C at a time (one A and one B load per product where both pairs
// are whole)
static void amx_mm(char *C, size_t ldc, const char *A, size_t lda, const char *B, size_t ldb, int64_t M, int64_t N,
                   int64_t ks, int accumulate) {
    // (GCC's tile intrinsics are asm without a memory clobber: these barriers keep the stores that
    // built A, B and C before the tile loads, and the reads of C after the tile stores)
    __asm__ volatile("" ::: "memory");
    for (int64_t m = 0; m < M; m += 32)
        for (int64_t n = 0; n < N; n += 32) {
            const int m2 = m + 16 < M, n2 = n + 16 < N;
            char *c0 = C + m * ldc + 4 * n, *c2 = c0 + 16 * ldc;
            if (accumulate) {
                _tile_loadd(0, c0, ldc);
                if (n2) _tile_loadd(1, c0 + 64, ldc);
                if (m2) _tile_loadd(2, c2, ldc);
                if (m2 && n2) _tile_loadd(3, c2 + 64, ldc);
            } else {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
            }
            for (int64_t k = 0; k < ks; k++) {
                const char *a = A + m * lda + 64 * k, *b = B + 16 * k * ldb + 4 * n;
                _tile_loadd(4, a, lda);
                _tile_loadd(6, b, ldb);
                _tile_dpbf16ps(0, 4, 6);
                if (n2) {
                    _tile_loadd(7, b + 64, ldb);
                    _tile_dpbf16ps(1, 4, 7);
                }
                if (m2) {
                    _tile_loadd(5, a + 16 * lda, lda);
                    _tile_dpbf16ps(2, 5, 6);
                    if (n2) _tile_dpbf16ps(3, 5, 7);
                }
            }
            _tile_stored(0, c0, ldc);
            if (n2) _tile_stored(1, c0 + 64, ldc);
            if (m2) _tile_stored(2, c2, ldc);
            if (m2 && n2) _tile_stored(3, c2 + 64, ldc);
        }
    __asm__ volatile("" ::: "memory");
}

// S_ij^T = mul * K_j Q_i^T over lanes [0, nl): K_j dense bf16 rows (stride D; rows [nk, 16
// ceil(nk / 16)) are read too, and their rows of S_ij^T written, never used), Q2 (tile_load_T2)
static void tile_qkT_amx(float *restrict S_T, const uint16_t *restrict K_j, const uint32_t *restrict Q2, int64_t nk,
                         int64_t nl, int64_t D, float mul) {
    amx_mm((char *)S_T, 4 * BRF, (const char *)K_j, 2 * (size_t)D, (const char *)Q2, 4 * BRF, ceil_div(nk, 16) * 16, nl,
           D / 32, 0);
    amx_scale_rows(S_T, BRF, nk, nl, mul);
}

// r[i] = word j of row i <- word i of row j: a 16 x 16 transpose of 32-bit words (32-bit, then
// 64-bit interleaves within 128-bit lanes, then two rounds of 128-bit lane shuffles)
static inline void transpose16_epi32(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { // r[i + e], lane L: element 4L + e of rows i .. i + 3
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int e = 0; e < 4; e++) { // lanes 0 / 2 (0x88) and 1 / 3 (0xdd) of rows 0-7, then of 8-15
        t[e] = _mm512_shuffle_i32x4(r[e], r[4 + e], 0x88);
        t[4 + e] = _mm512_shuffle_i32x4(r[e], r[4 + e], 0xdd);
        t[8 + e] = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0x88);
        t[12 + e] = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0xdd);
    }
    for (int e = 0; e < 4; e++) { // output row 4L + e = element e of lane L of every row
        r[e] = _mm512_shuffle_i32x4(t[e], t[8 + e], 0x88);
        r[8 + e] = _mm512_shuffle_i32x4(t[e], t[8 + e], 0xdd);
        r[4 + e] = _mm512_shuffle_i32x4(t[4 + e], t[12 + e], 0x88);
        r[12 + e] = _mm512_shuffle_i32x4(t[4 + e], t[12 + e], 0xdd);
    }
}

// V2T[d][c] (row stride 32 words) = the pair (src[2c][d], src[2c+1][d]) of bf16 rows src[r] (row
// stride rs), rows r >= n read as 0, for d < D (D % 16 == 0) and c < 16 ceil(n / 32) (n <= 64)
static void tile_pair_rows_T(uint32_t *restrict V2T, const uint16_t *src, int64_t rs, int64_t n, int64_t D) {
    for (int64_t c0 = 0; 2 * c0 < n; c0 += 16)
        for (int64_t d0 = 0; d0 < D; d0 += 16) {
            __m512i r[16];
            for (int i = 0; i < 16; i++) { // word j of r[i]: (src[2c][d0 + j], src[2c + 1][d0 + j]), c = c0 + i
                const int64_t k = 2 * (c0 + i);
                const __m512i x = k < n ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + k * rs + d0)))
                                        : _mm512_setzero_si512();
                const __m512i y = k + 1 < n ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + (k + 1) * rs + d0)))
                                            : _mm512_setzero_si512();
                r[i] = _mm512_or_si512(x, _mm512_slli_epi32(y, 16));
            }
            transpose16_epi32(r);
            for (int j = 0; j < 16; j++) _mm512_storeu_si512((void *)(V2T + (d0 + j) * 32 + c0), r[j]);
        }
}

// tile_rowmax, but a row's m_i moves only when its block max passes it by more than AMX_TAU (log2
// units), FlashAttention-4's conditional rescale: P_ij = 2^(S_ij - m_i) <= 2^AMX_TAU then, as exact
// in fp32 and bf16 as P_ij <= 1 (l_i and O_i are divided by the same sum at the end), and after
// the first few key blocks no row moves, so tile_pv_amx skips its rescale pass over O_i^T. (The
// price: O_i's fp32 sum before the division can reach 2^8 x what it would, so values of V within
// 2^8 of overflowing it, |V| ~ 1e36 / seqlen_k, overflow here first: a review's probe, session 40.)
#define AMX_TAU 8.0f
static void tile_rowmax_lazy(float *restrict m_new, float *restrict m_use, const float *restrict S_T, const float *m_old,
                             int64_t nk, int64_t nl) {
    tile_rowmax(m_new, m_use, S_T, m_old, nk, nl);
    for (int64_t r = 0; r < nl; r++)
        if (!(m_new[r] > m_old[r] + AMX_TAU)) m_new[r] = m_old[r], m_use[r] = fmaxf(m_old[r], -FLT_MAX);
}

// O_i^T = O_i^T diag(alpha) + V_j^T P_ij^T over lanes [0, nl) (tile_pv_acc2 on tiles): V2T
// (tile_pair_rows_T), P2 (tile_pair_f32, rows [ceil(nk / 2), 16 ceil(nk / 32)) zeroed here). The
// rescale is a pass over O_i^T, made only where a row that has seen a key moves its m_i (alpha !=
// 1; a row that has not holds O_i = 0).
static void tile_pv_amx(float *restrict O_T, const float *restrict alpha, const float *restrict m_old, uint32_t *restrict P2,
                        const uint32_t *restrict V2T, int64_t nk, int64_t nl, int64_t D) {
    int rescale = 0;
    for (int64_t r = 0; r < nl; r++) rescale |= alpha[r] != 1.0f && m_old[r] != -INFINITY;
    if (rescale)
        for (int64_t d = 0; d < D; d++)
            for (int64_t r = 0; r < nl; r += W)
                _mm512_storeu_ps(O_T + d * BRF + r, _mm512_mul_ps(_mm512_loadu_ps(O_T + d * BRF + r), _mm512_loadu_ps(alpha + r)));
    const int64_t ks = amx_pad_pairs(P2, BRF, nk, nl);
    amx_mm((char *)O_T, 4 * BRF, (const char *)V2T, 128, (const char *)P2, 4 * BRF, D, nl, ks, 1);
}
#else
// (never called: the kernels' `amx` is 0)
static inline void amx_begin(void) {}
static inline void amx_end(void) {}
static inline void tile_qkT_amx(float *S_T, const uint16_t *K_j, const uint32_t *Q2, int64_t nk, int64_t nl, int64_t D, float mul) {
    (void)S_T, (void)K_j, (void)Q2, (void)nk, (void)nl, (void)D, (void)mul;
}
static inline void tile_pair_rows_T(uint32_t *V2T, const uint16_t *src, int64_t rs, int64_t n, int64_t D) {
    (void)V2T, (void)src, (void)rs, (void)n, (void)D;
}
static inline void tile_rowmax_lazy(float *m_new, float *m_use, const float *S_T, const float *m_old, int64_t nk, int64_t nl) {
    (void)m_new, (void)m_use, (void)S_T, (void)m_old, (void)nk, (void)nl;
}
static inline void tile_pv_amx(float *O_T, const float *alpha, const float *m_old, uint32_t *P2, const uint32_t *V2T, int64_t nk,
                               int64_t nl, int64_t D) {
    (void)O_T, (void)alpha, (void)m_old, (void)P2, (void)V2T, (void)nk, (void)nl, (void)D;
}
#endif

// ------------------------------------------------------------------------------------------------
// backward steps: tiles are queries x keys (row length BWD_BC), dK_j^T, dV_j^T are D x keys

#define BCB FLASHC_CPU_BWD_BC

// The backward steps compute the first nc columns (keys) of the BR x BC tiles, nc a multiple of
// BWD_COLS: the keys past them are seen by none of the query block's rows (P_ij = 0 there).
#define BWD_COLS (BWD_NV * W)

// S_ij = Q_i K_j^T  (Alg. 2 line 11; K_j^T carries the scale). Q_i: nq rows, stride q_rs.
static void tile_qkT_rows(float *restrict S, const float *restrict Q_i, int64_t q_rs, const float *restrict K_jT,
                          int64_t nq, int64_t nc, int64_t D) {
    tile_mm(BWD_MR, BWD_NV, S, BCB, Q_i, q_rs, 1, K_jT, BCB, nq, nc, D, 0, NULL, DOT_KB);
}

// S_ij[r][c] -= slope2 * |i0 + r + sk - sq - (j0 + c)|
static void tile_alibi_qk(float *restrict S, int64_t nq, int64_t nc, int64_t i0, int64_t j0, int64_t diag_off,
                          float slope2) {
    for (int64_t r = 0; r < nq; r++) {
        float *s = S + r * BCB;
        float base = (float)(i0 + r + diag_off - j0);
        for (int c = 0; c < nc; c++) s[c] -= slope2 * fabsf(base - (float)c);
    }
}

// S_ij[r][c] = -inf where key j0 + c is outside [lo[r], hi[r]); also masks the padding keys past
// the sequence's end, since hi <= sk.
static void tile_mask_qk(float *restrict S, int64_t nq, int64_t nc, int64_t j0, const int64_t *lo, const int64_t *hi) {
    for (int64_t r = 0; r < nq; r++) {
        float *s = S + r * BCB;
        for (int c = 0; c < nc; c++)
            if (j0 + c < lo[r] || j0 + c >= hi[r]) s[c] = -INFINITY;
    }
}

// P_ij = 2^(S_ij - L_i log2 e), in place  (Alg. 2 line 13: P recomputed from the LSE)
static void tile_exp_sub_lse(float *restrict S, const float *restrict L2, int64_t nq, int64_t nc) {
    for (int64_t r = 0; r < nq; r++) {
        FLASHC_VF32 l2 = FLASHC_VF32_SET1(L2[r]);
        float *s = S + r * BCB;
        for (int c = 0; c < nc; c += W)
            FLASHC_VF32_STORE(s + c, flashc_vexp2(FLASHC_VF32_SUB(FLASHC_VF32_LOAD(s + c), l2)));
    }
}

// dV_j += P_ij^T dO_i, as dV_j^T += dO_i^T P_ij  (Alg. 2 line 16). dO_i: nq rows, stride do_rs.
static void tile_dv_acc(float *restrict dV_jT, const float *restrict dO_i, int64_t do_rs, const float *restrict P,
                        int64_t nq, int64_t nc, int64_t D) {
    tile_mm(BWD_MR, BWD_NV, dV_jT, BCB, dO_i, 1, do_rs, P, BCB, D, nc, nq, 1, NULL, 0);
}

// dP_ij = dO_i V_j^T  (Alg. 2 line 17)
static void tile_dP(float *restrict dP, const float *restrict dO_i, int64_t do_rs, const float *restrict V_jT,
                    int64_t nq, int64_t nc, int64_t D) {
    tile_mm(BWD_MR, BWD_NV, dP, BCB, dO_i, do_rs, 1, V_jT, BCB, nq, nc, D, 0, NULL, DOT_KB);
}

// dS_ij = P_ij o (dP_ij - D_i), in place over dP  (Alg. 2 line 19); with softcap also
// o (1 - T^2), the derivative of cap * tanh(x / cap).
static void tile_ds(float *restrict dP, const float *restrict P, const float *restrict Di, const float *restrict T,
                    int64_t nq, int64_t nc) {
    FLASHC_VF32 one = FLASHC_VF32_SET1(1.0f);
    for (int64_t r = 0; r < nq; r++) {
        FLASHC_VF32 di = FLASHC_VF32_SET1(Di[r]);
        float *ds = dP + r * BCB;
        const float *p = P + r * BCB;
        for (int c = 0; c < nc; c += W) { // (a masked P_ij = 0 gives 0 even beside an Inf in V_j)
            const FLASHC_VF32 pc = FLASHC_VF32_LOAD(p + c);
            FLASHC_VF32 g = FLASHC_VF32_SEL_NZ(pc, FLASHC_VF32_MUL(pc, FLASHC_VF32_SUB(FLASHC_VF32_LOAD(ds + c), di)));
            if (T) {
                FLASHC_VF32 t = FLASHC_VF32_LOAD(T + r * BCB + c);
                g = FLASHC_VF32_MUL(g, FLASHC_VF32_SUB(one, FLASHC_VF32_MUL(t, t)));
            }
            FLASHC_VF32_STORE(ds + c, g);
        }
    }
}

// dK_j += dS_ij^T Q_i, as dK_j^T += Q_i^T dS_ij  (Alg. 2 line 21; the scale is applied at the store)
static void tile_dk_acc(float *restrict dK_jT, const float *restrict Q_i, int64_t q_rs, const float *restrict dS,
                        int64_t nq, int64_t nc, int64_t D) {
    tile_mm(BWD_MR, BWD_NV, dK_jT, BCB, Q_i, 1, q_rs, dS, BCB, D, nc, nq, 1, NULL, 0);
}

// dQ_i += dS_ij K_j  (Alg. 2 line 20; K_j carries the scale). dQ_i: nq rows of Dp, stride dq_ld.
static void tile_dq_acc(float *restrict dQ_i, int64_t dq_ld, const float *restrict dS, const float *restrict K_j,
                        int64_t Dp, int64_t nq, int64_t nk) {
    tile_mm(BWD_MR, BWD_NV, dQ_i, dq_ld, dS, BCB, 1, K_j, Dp, nq, Dp, nk, 1, NULL, 0);
}

// ------------------------------------------------------------------------------------------------
// bf16 backward by dot products (AVX-512 BF16; the pair layouts are the forward's, above). Of the
// five products, S_ij and dP_ij reduce along D (Q_i, dO_i by rows; K_j^T, V_j^T by tile_load_T2),
// dV_j and dK_j along the query rows (dO_i, Q_i and P_ij, dS_ij by pairs of rows), dQ_i along the
// keys (dS_ij by rows, rounded from fp32 with the scale folded in; K_j by pairs of key rows).

// S_ij = mul * Q_i K_j^T: Q_i nq bf16 rows (stride D), K2T as tile_load_T2 left it (ld BCB)
static void tile_qkT_rows2(float *restrict S, const uint16_t *restrict Q_i, const uint32_t *restrict K2T, int64_t nq,
                           int64_t nc, int64_t D, float mul) {
    tile_mm2(BWD_MR, BWD_NV, S, BCB, (const uint32_t *)Q_i, D / 2, 1, K2T, BCB, nq, nc, D / 2, 0, NULL, mul);
}

// dV_j^T += dO_i^T P_ij (or dK_j^T += Q_i^T dS_ij): X2 = dO_i by pairs of rows (row stride D words),
// P2 = P_ij by pairs of rows (tile_pair_f32, ld BCB), over nq rows
static void tile_dkv_acc2(float *restrict dX_jT, const uint32_t *restrict X2, const uint32_t *restrict P2, int64_t nq,
                          int64_t nc, int64_t D) {
    tile_mm2(BWD_MR, BWD_NV, dX_jT, BCB, X2, 1, D, P2, BCB, D, nc, (nq + 1) / 2, 1, NULL, 1.0f);
}

// dQ_i += dS_ij K_j: dS nq bf16 rows (row stride BCB elements, the scale in them), K2 = K_j by
// pairs of key rows (row stride Dp words), over nk keys (a missing key nk of a pair is 0 in K2)
static void tile_dq_acc2(float *restrict dQ_i, int64_t dq_ld, const uint16_t *restrict dS, const uint32_t *restrict K2,
                         int64_t Dp, int64_t nq, int64_t nk) {
    tile_mm2(BWD_MR, BWD_NV, dQ_i, dq_ld, (const uint32_t *)dS, BCB / 2, 1, K2, Dp, nq, Dp, (nk + 1) / 2, 1, NULL, 1.0f);
}

// The backward's five products on AMX tiles (flashc__cpu_amx problems): the dot path's operands
// above, but Q_i^T and dO_i^T by pairs of query rows (tile_pair_rows_T) as A of dK_j and dV_j.
#if FLASHC_CPU_AMX
// S_ij = mul * Q_i K_j^T (tile_qkT_rows2 on tiles; rows [nq, 16 ceil(nq / 16)) computed from what
// the Q rows' buffer holds there, never used)
static void tile_qkT_rows_amx(float *restrict S, const uint16_t *restrict Q_i, const uint32_t *restrict K2T, int64_t nq,
                              int64_t nc, int64_t D, float mul) {
    amx_mm((char *)S, 4 * BCB, (const char *)Q_i, 2 * (size_t)D, (const char *)K2T, 4 * BCB, ceil_div(nq, 16) * 16, nc,
           D / 32, 0);
    if (mul != 1.0f) amx_scale_rows(S, BCB, nq, nc, mul);
}

// dX_j^T += X_i^T P_ij (tile_dkv_acc2 on tiles): XT2 = X_i^T by pairs of rows (tile_pair_rows_T),
// P2 by pairs of rows (tile_pair_f32; its rows [ceil(nq / 2), 16 ceil(nq / 32)) zeroed here)
static void tile_dkv_acc_amx(float *restrict dX_jT, const uint32_t *restrict XT2, uint32_t *restrict P2, int64_t nq,
                             int64_t nc, int64_t D) {
    const int64_t ks = amx_pad_pairs(P2, BCB, nq, nc);
    amx_mm((char *)dX_jT, 4 * BCB, (const char *)XT2, 128, (const char *)P2, 4 * BCB, D, nc, ks, 1);
}

// dQ_i += dS_ij K_j (tile_dq_acc2 on tiles): dS bf16 rows (row stride BCB), K2 by pairs of key rows
// (row stride Dp words, zero pair rows up to 16 ceil(nk / 32)), nk keys. Whole groups of 16 rows in
// place; the last nq % 16 through stage (16 x D floats), since the rows after them in dQ are other
// rows' (or past the buffer's end), which a tile's load and store would race with.
static void tile_dq_acc_amx(float *restrict dQ_i, int64_t dq_ld, const uint16_t *restrict dS, const uint32_t *restrict K2,
                            int64_t Dp, int64_t nq, int64_t nk, int64_t D, float *restrict stage) {
    const int64_t ks = ceil_div(nk, 32), m16 = nq / 16 * 16, r = nq - m16;
    if (m16) amx_mm((char *)dQ_i, 4 * (size_t)dq_ld, (const char *)dS, 2 * BCB, (const char *)K2, 4 * (size_t)Dp, m16, D, ks, 1);
    if (!r) return;
    for (int64_t i = 0; i < r; i++) memcpy(stage + i * D, dQ_i + (m16 + i) * dq_ld, sizeof(float) * (size_t)D);
    amx_mm((char *)stage, 4 * (size_t)D, (const char *)(dS + m16 * BCB), 2 * BCB, (const char *)K2, 4 * (size_t)Dp, 16, D, ks, 1);
    for (int64_t i = 0; i < r; i++) memcpy(dQ_i + (m16 + i) * dq_ld, stage + i * D, sizeof(float) * (size_t)D);
}
#else
static inline void tile_qkT_rows_amx(float *S, const uint16_t *Q_i, const uint32_t *K2T, int64_t nq, int64_t nc, int64_t D,
                                     float mul) {
    (void)S, (void)Q_i, (void)K2T, (void)nq, (void)nc, (void)D, (void)mul;
}
static inline void tile_dkv_acc_amx(float *dX_jT, const uint32_t *XT2, uint32_t *P2, int64_t nq, int64_t nc, int64_t D) {
    (void)dX_jT, (void)XT2, (void)P2, (void)nq, (void)nc, (void)D;
}
static inline void tile_dq_acc_amx(float *dQ_i, int64_t dq_ld, const uint16_t *dS, const uint32_t *K2, int64_t Dp, int64_t nq,
                                   int64_t nk, int64_t D, float *stage) {
    (void)dQ_i, (void)dq_ld, (void)dS, (void)K2, (void)Dp, (void)nq, (void)nk, (void)D, (void)stage;
}
#endif

#endif // FLASHC_CPU_TILE_H
