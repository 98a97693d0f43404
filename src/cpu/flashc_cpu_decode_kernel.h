// flashc_cpu_decode_kernel.h -- the decode kernel's work item (see flashc_cpu_decode.h), written
// against flashc_simd.h.
//
// An "include template" like flashc_cpu_kernels.h: flashc_cpu_decode_<isa>.c defines FLASHC_ISA and
// FLASHC_ISA_NAME(x) and includes this file, which defines flashc__cpu_dec_item_<isa>.
//
// Layout of the math: query rows in registers, keys streamed. For each block of BC keys and each
// kv head of the item, every row tile (MR rows of that head's group) does FA2's inner loop
// (Alg. 1 lines 8-10) against the block: S_ij = Q_i K_j^T one key at a time (MR rows x 2 vectors of
// accumulators, then a horizontal sum), the online softmax over the block, and O_i += P_ij V_j with
// the MR x 2 (or 4) vectors of O_i in registers while the keys stream. K_j and V_j are read in
// their dtype straight from the cache (bf16 / f16 widened in registers, or bf16 by dot products:
// MODE_DOT), never copied, except when D is not a multiple of the vector width (then an fp32 copy
// padded with zeros). While a block computes, the next one's rows are prefetched in address order
// (see pf_cursor).
#ifndef FLASHC_ISA_NAME
#error "define FLASHC_ISA and FLASHC_ISA_NAME before including flashc_cpu_decode_kernel.h"
#endif

#include "flashc_cpu_decode.h"
#include "flashc_simd.h"

#define W FLASHC_VF32_W
#define MR FLASHC_CPU_DEC_MR
// Keys per block (at most FLASHC_CPU_DEC_BC, what the scratch holds). AVX2 takes 16: there a PV
// pass reads half of each 64-byte line of bf16 V_j (4 rows x 2 vectors), the next pass the other
// half, and V_j's rows of one head, 2 KiB apart (8 kv heads x D = 128), fall in 2 of the L1's sets
// a line: 16 keys' lines fit their 8 ways, 32 keys' did not (every other pass ran backwards to find
// the lines the pass before left). Zen 3, alternating runs against 32 keys: 1 thread, kv 2k, min of
// 201, 0.723-0.741 ms against 0.752-0.766; the decode bar's shape (2 threads, kv 64k) 68-78% of the
// read against 47-64%; 8, 24, 48, 64 keys no faster than 32
// (bench/results/decode-cpu_amd-epyc-avx2-2c_2026-12-06-s46.txt). AVX-512 reads bf16 by dot
// products, which take a row of P_ij as two vectors of 16 (pv_tile_dot), and its f16 / fp32 passes
// read whole lines.
#if FLASHC_ISA == FLASHC_ISA_AVX2
#define BC 16
#else
#define BC FLASHC_CPU_DEC_BC
#endif
_Static_assert(BC <= FLASHC_CPU_DEC_BC && BC % W == 0, "a block is at most the scratch's, whole vectors");

#if defined(__GNUC__)
#define DEC_INLINE static inline __attribute__((always_inline))
#define DEC_UNROLL _Pragma("GCC unroll 4")
#else
#define DEC_INLINE static inline
#define DEC_UNROLL
#endif

// ------------------------------------------------------------------------------------------------
// horizontal reductions (once per key or per block, outside the FMA chains)

#if FLASHC_ISA == FLASHC_ISA_AVX2 || FLASHC_ISA == FLASHC_ISA_AVX512
// a vector's two 256-bit halves folded by add / max (AVX2: the vector itself)
#if FLASHC_ISA == FLASHC_ISA_AVX512
DEC_INLINE __m256 dec_half(__m512 a) { return _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)); }
DEC_INLINE __m256 dec_half_max(__m512 a) { return _mm256_max_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)); }
#else
DEC_INLINE __m256 dec_half(__m256 a) { return a; }
DEC_INLINE __m256 dec_half_max(__m256 a) { return a; }
#endif
// out[r] = the sum of the lanes of a_r, r < 4: three hadds give [a0 a1 a2 a3 | a0 a1 a2 a3] partial
// sums of each 128-bit half, one add folds the halves
DEC_INLINE void hsum4(FLASHC_VF32 a0, FLASHC_VF32 a1, FLASHC_VF32 a2, FLASHC_VF32 a3, float *out) {
    __m256 t0 = _mm256_hadd_ps(dec_half(a0), dec_half(a1)), t1 = _mm256_hadd_ps(dec_half(a2), dec_half(a3));
    __m256 t = _mm256_hadd_ps(t0, t1);
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
}
// the lane max and lane sum of one vector by shuffles, each a chain of 3 steps instead of a store
// and W - 1 (softmax_rows, 4 rows a block: decode 0.833-0.839 ms against 0.852-0.857, AVX2, kv 2k,
// the file pv_tile names)
DEC_INLINE float hmax(FLASHC_VF32 a) {
    const __m256 h = dec_half_max(a);
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}
DEC_INLINE float hsum(FLASHC_VF32 a) {
    const __m256 h = dec_half(a);
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}
#else
DEC_INLINE void hsum4(FLASHC_VF32 a0, FLASHC_VF32 a1, FLASHC_VF32 a2, FLASHC_VF32 a3, float *out) {
    out[0] = a0;
    out[1] = a1;
    out[2] = a2;
    out[3] = a3;
}
static inline float hmax(FLASHC_VF32 a) { return a; }
static inline float hsum(FLASHC_VF32 a) { return a; }
#endif

// W elements d .. d + W - 1 of a row of dtype dt, as fp32 (dt is a constant at every call)
DEC_INLINE FLASHC_VF32 load_elems(const char *row, int64_t d, flashc_dtype dt) {
    if (dt == FLASHC_DTYPE_BF16) return flashc_vf32_load_bf16((const uint16_t *)row + d);
    if (dt == FLASHC_DTYPE_F16) return flashc_vf32_load_f16((const uint16_t *)row + d);
    return FLASHC_VF32_LOAD((const float *)row + d);
}

// A loaded vector kept in a register: GCC 12 folds a load into every instruction that uses its
// value, so a Q_i vector shared by two keys' FMAs, or a bf16 pair both widened halves use, was
// read twice from L1 (20 loads for 16 FMAs a step of qk_tile's pair loop, past Zen 3's two 256-bit
// loads a cycle; kept, 10: AVX2, Zen 3, 1 thread, kv 2k, min 0.776-0.783 ms against 0.792-0.822,
// bench/results/decode-cpu_amd-epyc-avx2-2c_2026-12-06-s45.txt).
#if defined(__GNUC__) && (FLASHC_ISA == FLASHC_ISA_AVX2 || FLASHC_ISA == FLASHC_ISA_AVX512)
#define DEC_IN_REG(x) __asm__("" : "+x"(x))
#else
#define DEC_IN_REG(x) ((void)0)
#endif

// bf16 pairs: 2W bf16 at row + d in one load, widened as two vectors without a shuffle: the low
// halves of the 32-bit words (elements d, d+2, ...) shifted up, the high halves (d+1, d+3, ...)
// masked. The products see the elements in that even / odd order, so Q and O are kept in it too
// (pair_pos); 3 operations per 2W elements instead of 4 (zero-extend, shift, twice).
#if FLASHC_ISA == FLASHC_ISA_AVX512
#define PAIR_BF16 1
DEC_INLINE void load_pair_bf16(const char *row, int64_t d, FLASHC_VF32 *even, FLASHC_VF32 *odd) {
    const __m512i x = _mm512_loadu_si512((const void *)((const uint16_t *)row + d));
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32((int)0xffff0000u)));
}
#elif FLASHC_ISA == FLASHC_ISA_AVX2
#define PAIR_BF16 1
DEC_INLINE void load_pair_bf16(const char *row, int64_t d, FLASHC_VF32 *even, FLASHC_VF32 *odd) {
    __m256i x = _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + d));
    DEC_IN_REG(x);
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32((int)0xffff0000u)));
}
#else
#define PAIR_BF16 0
DEC_INLINE void load_pair_bf16(const char *row, int64_t d, FLASHC_VF32 *even, FLASHC_VF32 *odd) {
    *even = load_elems(row, d, FLASHC_DTYPE_BF16);
    *odd = load_elems(row, d + W, FLASHC_DTYPE_BF16);
}
#endif

// How the microkernels read bf16 (the item picks one): widened one vector at a time, widened in
// pairs (load_pair_bf16), or by dot products (AVX-512 BF16, below).
enum { MODE_PLAIN, MODE_PAIR, MODE_DOT };

// Where element d of a head vector sits in the scratch rows: Q and O in pair order for MODE_PAIR
// (see load_pair_bf16); O in dot order for MODE_DOT (see pv_pass_dot; Q is the bf16 row as it is);
// else in place.
static inline int64_t pair_pos(int64_t d, int mode) {
    if (mode == MODE_PAIR) {
        const int64_t g = d / (2 * W), r = d % (2 * W);
        return g * 2 * W + (r % 2 ? W + r / 2 : r / 2);
    }
    if (mode == MODE_DOT) { // within 32 dims, L < 4, i < 4: dims 8L + i (unpacklo's) at 4L + i, dims
                            // 8L + 4 + i (unpackhi's) at 16 + 4L + i
        const int64_t g = d / 32, e = d % 32;
        return g * 32 + (e % 8 >= 4 ? 16 : 0) + e / 8 * 4 + e % 4;
    }
    return d;
}

// (k0, k1): the 2W elements d .. d + 2W - 1 as two vectors, in the order Q and O use
DEC_INLINE void load_two(const char *row, int64_t d, flashc_dtype dt, int pair, FLASHC_VF32 *k0, FLASHC_VF32 *k1) {
    if (pair) {
        load_pair_bf16(row, d, k0, k1);
    } else {
        *k0 = load_elems(row, d, dt);
        *k1 = load_elems(row, d + W, dt);
    }
}

// The next block's K (or V) rows, as a list of segments of seg_lines cache lines each (a key row's
// span over the item's heads when they are packed, else one head's D elements), prefetched a few
// lines per key while this block computes. Measured on a Zen 3 (D = 128, 8 kv heads, bf16): the
// head-by-head order of the products reads 256 bytes every 2 KiB, which streams at ~1/3 of the
// sequential rate even with each head's lines prefetched ahead; prefetching whole rows in order
// and spreading them over the head passes brings it back to the sequential rate.
typedef struct pf_cursor {
    const char **seg;
    int64_t seg_lines, s, l, left; // current segment and line, lines left to issue in this pass
} pf_cursor;

// min(n, left) lines, a segment's run at a time: with a test and the cursor's update a line, the
// loop cost ~6% of the item (AVX2, Zen 3, 1 thread, kv 2k: 0.754-0.780 ms against 0.808-0.824 in
// alternating runs, bench/results/decode-cpu_amd-epyc-avx2-2c_2026-12-06-s44.txt)
DEC_INLINE void pf_step(pf_cursor *pc, int64_t n) {
    n = min64(n, pc->left);
    pc->left -= n;
    while (n > 0) {
        const int64_t run = min64(n, pc->seg_lines - pc->l);
        const char *x = pc->seg[pc->s] + 64 * pc->l;
        for (int64_t i = 0; i < run; i++) FLASHC_PREFETCH(x + 64 * i);
        n -= run;
        if ((pc->l += run) == pc->seg_lines) pc->l = 0, pc->s++;
    }
}

// ------------------------------------------------------------------------------------------------
// the microkernels (mr, nch and dt are constants at every call: the loops unroll, the
// accumulators live in registers)

// S[r][c] = Q_r . K_c for rows r < mr (Q rows Dp apart, pre-scaled), keys c < nk (Alg. 1 line 8).
// Two accumulators per row (even / odd vectors) keep 2 * mr FMA chains in flight. With each key,
// pf_per_key lines of the next block are prefetched (pc may be NULL).
DEC_INLINE void qk_tile(const int mr, const flashc_dtype dt, const int pair, float *restrict S, const float *restrict Q,
                        int64_t Dp, const char *const *kp, int64_t nk, int64_t Dv, pf_cursor *pc, int64_t pf_per_key) {
    int64_t c = 0;
    // A full tile of bf16 pairs takes two keys at a time: each Q vector is loaded once for both, and
    // a key pair's two sets of 4 chains overlap. AVX2 (MODE_PAIR's ISA), AMD EPYC Zen 3, alternating
    // runs against one key at a time (bench/results/decode-cpu_amd-epyc-avx2-2c_2026-12-06-s43-qk2.txt):
    // 1 thread, kv 2k (cache-resident) min 0.881-0.902 against 0.896-0.944 ms; the decode bar's
    // shape (2 threads, kv 64k) 17.5-17.9 against 16.9-17.4 GB/s.
    if (pair && mr == MR && Dv % (2 * W) == 0)
        for (; c + 2 <= nk; c += 2) {
            const char *K_0 = kp[c], *K_1 = kp[c + 1];
            if (pc) pf_step(pc, 2 * pf_per_key);
            FLASHC_VF32 a[MR], b[MR];
            DEC_UNROLL for (int r = 0; r < MR; r++) a[r] = b[r] = FLASHC_VF32_ZERO();
            for (int64_t d = 0; d < Dv; d += 2 * W) {
                FLASHC_VF32 x0, x1, y0, y1;
                load_pair_bf16(K_0, d, &x0, &x1);
                load_pair_bf16(K_1, d, &y0, &y1);
                DEC_UNROLL for (int r = 0; r < MR; r++) {
                    FLASHC_VF32 q0 = FLASHC_VF32_LOAD(Q + r * Dp + d), q1 = FLASHC_VF32_LOAD(Q + r * Dp + d + W);
                    DEC_IN_REG(q0);
                    DEC_IN_REG(q1);
                    a[r] = FLASHC_VF32_FMA(x0, q0, a[r]);
                    b[r] = FLASHC_VF32_FMA(y0, q0, b[r]);
                    a[r] = FLASHC_VF32_FMA(x1, q1, a[r]);
                    b[r] = FLASHC_VF32_FMA(y1, q1, b[r]);
                }
            }
            float s4[4], t4[4];
            hsum4(a[0], a[1], a[2], a[3], s4);
            hsum4(b[0], b[1], b[2], b[3], t4);
            DEC_UNROLL for (int r = 0; r < MR; r++) S[r * BC + c] = s4[r], S[r * BC + c + 1] = t4[r];
        }
#if FLASHC_ISA == FLASHC_ISA_SCALAR
    // The portable build's vectors are single floats, so the two chains below would each sum D / 2
    // rounded products in order (the SIMD builds keep 2W chains): four chains a row here. f32, D =
    // 193, scale 0.49 (test_kvcache's "f32-D=193"): O error 1.09e-5 with two chains (the fp32 bound
    // is 1e-5), 2.97e-6 with four, 1.67e-6 summed in double (1.27x slower: 7.0 ms against 5.5,
    // 1 thread, kv 2k), 2.09e-6 on AVX2; four chains ran as fast as two.
    for (; c < nk; c++) {
        const char *K_c = kp[c];
        if (pc) pf_step(pc, pf_per_key);
        float a[4][MR];
        DEC_UNROLL for (int r = 0; r < MR; r++) a[0][r] = a[1][r] = a[2][r] = a[3][r] = 0.0f;
        int64_t d = 0;
        for (; d + 4 <= Dv; d += 4) {
            DEC_UNROLL for (int u = 0; u < 4; u++) {
                const float k = load_elems(K_c, d + u, dt);
                DEC_UNROLL for (int r = 0; r < MR; r++) if (r < mr) a[u][r] += Q[r * Dp + d + u] * k;
            }
        }
        for (; d < Dv; d++) {
            const float k = load_elems(K_c, d, dt);
            DEC_UNROLL for (int r = 0; r < MR; r++) if (r < mr) a[0][r] += Q[r * Dp + d] * k;
        }
        DEC_UNROLL for (int r = 0; r < MR; r++) if (r < mr) S[r * BC + c] = (a[0][r] + a[1][r]) + (a[2][r] + a[3][r]);
    }
#else
    for (; c < nk; c++) {
        const char *K_c = kp[c];
        if (pc) pf_step(pc, pf_per_key);
        FLASHC_VF32 a0[MR], a1[MR];
        DEC_UNROLL for (int r = 0; r < MR; r++) a0[r] = a1[r] = FLASHC_VF32_ZERO();
        int64_t d = 0;
        for (; d + 2 * W <= Dv; d += 2 * W) {
            FLASHC_VF32 k0, k1;
            load_two(K_c, d, dt, pair, &k0, &k1);
            DEC_UNROLL for (int r = 0; r < MR; r++) {
                if (r < mr) {
                    a0[r] = FLASHC_VF32_FMA(k0, FLASHC_VF32_LOAD(Q + r * Dp + d), a0[r]);
                    a1[r] = FLASHC_VF32_FMA(k1, FLASHC_VF32_LOAD(Q + r * Dp + d + W), a1[r]);
                }
            }
        }
        for (; d < Dv; d += W) {
            const FLASHC_VF32 k0 = load_elems(K_c, d, dt);
            DEC_UNROLL for (int r = 0; r < MR; r++) if (r < mr) a0[r] = FLASHC_VF32_FMA(k0, FLASHC_VF32_LOAD(Q + r * Dp + d), a0[r]);
        }
        float s4[4];
        hsum4(FLASHC_VF32_ADD(a0[0], a1[0]), FLASHC_VF32_ADD(a0[1], a1[1]), FLASHC_VF32_ADD(a0[2], a1[2]),
              FLASHC_VF32_ADD(a0[3], a1[3]), s4);
        DEC_UNROLL for (int r = 0; r < MR; r++) if (r < mr) S[r * BC + c] = s4[r];
    }
#endif
}

// O_r = alpha_r O_r + sum_c P[r][c] V_c for rows r < mr (Alg. 1 line 10), nch vectors of D per pass:
// mr * nch accumulators in registers while the nk keys stream. The pass's n_pf lines of the next
// block are prefetched before its keys, which leaves the key loop without a branch.
DEC_INLINE void pv_pass(const int mr, const int nch, const flashc_dtype dt, const int pair, float *restrict O, int64_t Dp, int64_t d,
                        const float *restrict P, const float *restrict alpha, const char *const *vp, int64_t nk,
                        pf_cursor *pc, int64_t n_pf) {
    FLASHC_VF32 o[4][MR];
    DEC_UNROLL for (int r = 0; r < MR; r++) {
        if (r < mr) {
            const FLASHC_VF32 al = FLASHC_VF32_SET1(alpha[r]);
            DEC_UNROLL for (int u = 0; u < 4; u++) if (u < nch) o[u][r] = FLASHC_VF32_MUL(FLASHC_VF32_LOAD(O + r * Dp + d + u * W), al);
        }
    }
    if (pc) pf_step(pc, n_pf);
    for (int64_t c = 0; c < nk; c++) {
        FLASHC_VF32 v[4];
        if (nch == 1) v[0] = load_elems(vp[c], d, dt);
        if (nch >= 2) load_two(vp[c], d, dt, pair, &v[0], &v[1]);
        if (nch == 4) load_two(vp[c], d + 2 * W, dt, pair, &v[2], &v[3]);
        DEC_UNROLL for (int r = 0; r < MR; r++) {
            if (r < mr) {
                const FLASHC_VF32 P_rc = FLASHC_VF32_SET1(P[r * BC + c]);
                DEC_UNROLL for (int u = 0; u < 4; u++) if (u < nch) o[u][r] = FLASHC_VF32_FMA(P_rc, v[u], o[u][r]);
            }
        }
    }
    DEC_UNROLL for (int r = 0; r < MR; r++) {
        if (r < mr) {
            DEC_UNROLL for (int u = 0; u < 4; u++) if (u < nch) FLASHC_VF32_STORE(O + r * Dp + d + u * W, o[u][r]);
        }
    }
}

DEC_INLINE void pv_tile(const int mr, const flashc_dtype dt, const int pair, float *restrict O, int64_t Dp,
                        const float *restrict P, const float *restrict alpha, const char *const *vp, int64_t nk,
                        int64_t Dv, pf_cursor *pc) {
    // 8 chains: 4 rows x 2 vectors, or (1-2 rows) x 4 vectors. Pairs of bf16 vectors stay together
    // (Dv % 2W == 0 then). Measured on AVX2, Zen 3 (1 thread, kv 2k, min of 201 runs, alternating:
    // bench/results/decode-cpu_amd-epyc-avx2-2c_2026-12-06-s44.txt):
    // - The next block's V lines (pc may be NULL) are spread over the passes, an equal share each,
    //   issued before each pass's keys, instead of all in the first pass (~5 cycles a key at 4
    //   rows), 4 a key: 0.847-0.854 ms against 0.881-0.882 (pf_step still a line at a time then).
    // - A pass and the next read the two halves of V_j's lines: BC (above) keeps them in L1.
    const int nch = mr <= 2 ? 4 : 2;
    const int64_t full = Dv / (nch * W), rest = Dv - full * nch * W;
    const int64_t np = full + (pair ? rest / (2 * W) : rest / W); // passes
    for (int64_t d = 0, i = 0; d < Dv; i++) {
        const int64_t share = pc ? (pc->left + np - i - 1) / (np - i) : 0; // of the lines still left
        if (d + nch * W <= Dv) pv_pass(mr, nch, dt, pair, O, Dp, d, P, alpha, vp, nk, pc, share), d += nch * W;
        else if (pair) pv_pass(mr, 2, dt, pair, O, Dp, d, P, alpha, vp, nk, pc, share), d += 2 * W;
        else pv_pass(mr, 1, dt, 0, O, Dp, d, P, alpha, vp, nk, pc, share), d += W;
    }
}

// ------------------------------------------------------------------------------------------------
// bf16 by dot products (MODE_DOT, AVX-512 BF16): vdpbf16ps adds a[2l] b[2l] + a[2l+1] b[2l+1] into
// fp32 lane l, twice an FMA's multiply-adds per instruction, straight from bf16 pairs with nothing
// widened. The widening kernels computed ~12.5 GB/s of K + V a core with K and V in L3 (NOTES
// session 39): about what DRAM gives two cores of a busy host, half of what it gives a quiet one.
//   S_ij = Q_i K_j^T: pairs along D, Q_i's bf16 rows as they are; the scale multiplies S_ij as it
//     leaves the registers.
//   O_i += P_ij V_j: pairs along the keys: P_ij rounded to bf16, as the GPU kernels and the FA2
//     tiles' dot path do (l_i stays the fp32 sum), two V rows interleaved by unpacklo / unpackhi,
//     which leaves O_i's dims in dot order within each 32 (pair_pos).
#if FLASHC_ISA == FLASHC_ISA_AVX512
#define DOT_BF16 1
_Static_assert(BC == 2 * W, "pv_tile_dot converts a row of P_ij as two vectors");

// S[r][c] = qmul Q_r . K_c for rows r < mr (bf16 rows ldq apart), keys c < nk; D % 32 == 0.
DEC_INLINE void qk_tile_dot(const int mr, float *restrict S, const uint16_t *restrict Q, int64_t ldq,
                            const char *const *kp, int64_t nk, int64_t D, float qmul, pf_cursor *pc,
                            int64_t pf_per_key) {
    for (int64_t c = 0; c < nk; c++) {
        const uint16_t *K_c = (const uint16_t *)kp[c];
        if (pc) pf_step(pc, pf_per_key);
        __m512 a0[MR], a1[MR];
        DEC_UNROLL for (int r = 0; r < MR; r++) a0[r] = a1[r] = _mm512_setzero_ps();
        int64_t d = 0;
        for (; d + 64 <= D; d += 64) {
            const __m512bh k0 = (__m512bh)_mm512_loadu_si512((const void *)(K_c + d)),
                           k1 = (__m512bh)_mm512_loadu_si512((const void *)(K_c + d + 32));
            DEC_UNROLL for (int r = 0; r < MR; r++) {
                if (r < mr) {
                    a0[r] = _mm512_dpbf16_ps(a0[r], (__m512bh)_mm512_loadu_si512((const void *)(Q + r * ldq + d)), k0);
                    a1[r] = _mm512_dpbf16_ps(a1[r], (__m512bh)_mm512_loadu_si512((const void *)(Q + r * ldq + d + 32)), k1);
                }
            }
        }
        if (d < D) {
            const __m512bh k0 = (__m512bh)_mm512_loadu_si512((const void *)(K_c + d));
            DEC_UNROLL for (int r = 0; r < MR; r++)
                if (r < mr) a0[r] = _mm512_dpbf16_ps(a0[r], (__m512bh)_mm512_loadu_si512((const void *)(Q + r * ldq + d)), k0);
        }
        float s4[4];
        hsum4(_mm512_add_ps(a0[0], a1[0]), _mm512_add_ps(a0[1], a1[1]), _mm512_add_ps(a0[2], a1[2]),
              _mm512_add_ps(a0[3], a1[3]), s4);
        DEC_UNROLL for (int r = 0; r < MR; r++) if (r < mr) S[r * BC + c] = s4[r] * qmul;
    }
}

// O_r = alpha_r O_r + sum_c P2[r][c / 2] . (V_c, V_c+1) for rows r < mr over dims [d, d + 16 nch) of
// O's dot order (nch = 2: 32 dims, 4: 64), the keys by pairs (an odd last key meets a zero row).
// nch = 4 at every mr: 16 accumulators + 4 V pairs + a P pair fit the 32 registers, and a pair of
// keys then feeds 16 independent dot products (the widening pv_pass keeps 8 FMA chains).
DEC_INLINE void pv_pass_dot(const int mr, const int nch, float *restrict O, int64_t Dp, int64_t d,
                            const uint32_t (*P2)[BC / 2], const float *restrict alpha, const char *const *vp, int64_t nk,
                            pf_cursor *pc, int64_t pf_per_key) {
    __m512 o[4][MR];
    DEC_UNROLL for (int r = 0; r < MR; r++) {
        if (r < mr) {
            const __m512 al = _mm512_set1_ps(alpha[r]);
            DEC_UNROLL for (int u = 0; u < 4; u++) if (u < nch) o[u][r] = _mm512_mul_ps(_mm512_loadu_ps(O + r * Dp + d + u * W), al);
        }
    }
    for (int64_t c = 0; c < nk; c += 2) {
        if (pc) pf_step(pc, 2 * pf_per_key);
        const uint16_t *v0 = (const uint16_t *)vp[c] + d, *v1 = c + 1 < nk ? (const uint16_t *)vp[c + 1] + d : NULL;
        __m512bh v[4];
        DEC_UNROLL for (int u = 0; u < 4; u += 2) {
            if (u < nch) {
                const __m512i x = _mm512_loadu_si512((const void *)(v0 + 16 * u)),
                              y = v1 ? _mm512_loadu_si512((const void *)(v1 + 16 * u)) : _mm512_setzero_si512();
                v[u] = (__m512bh)_mm512_unpacklo_epi16(x, y);
                v[u + 1] = (__m512bh)_mm512_unpackhi_epi16(x, y);
            }
        }
        DEC_UNROLL for (int r = 0; r < MR; r++) {
            if (r < mr) {
                const __m512bh P_rc = (__m512bh)_mm512_set1_epi32((int)P2[r][c / 2]);
                DEC_UNROLL for (int u = 0; u < 4; u++) if (u < nch) o[u][r] = _mm512_dpbf16_ps(o[u][r], P_rc, v[u]);
            }
        }
    }
    DEC_UNROLL for (int r = 0; r < MR; r++) {
        if (r < mr) {
            DEC_UNROLL for (int u = 0; u < 4; u++) if (u < nch) _mm512_storeu_ps(O + r * Dp + d + u * W, o[u][r]);
        }
    }
}

DEC_INLINE void pv_tile_dot(const int mr, float *restrict O, int64_t Dp, const float *restrict P,
                            const float *restrict alpha, const char *const *vp, int64_t nk, int64_t D, pf_cursor *pc,
                            int64_t pf_per_key) {
    // P_ij by pairs of keys, rounded to bf16: word w of row r holds keys 2w (low half) and 2w + 1.
    // P's columns [nk, 16 or 32) are 0 (softmax_rows pads to a whole vector); when nk <= 16 those
    // past 16 are not written this block, so the second vector is 0 instead.
    uint32_t P2[MR][BC / 2];
    DEC_UNROLL for (int r = 0; r < MR; r++) {
        if (r < mr) {
            const __m512 x = _mm512_loadu_ps(P + r * BC), y = nk > W ? _mm512_loadu_ps(P + r * BC + W) : _mm512_setzero_ps();
            _mm512_storeu_si512((void *)P2[r], (__m512i)_mm512_cvtne2ps_pbh(y, x));
        }
    }
    int64_t d = 0;
    for (; d + 64 <= D; d += 64) pv_pass_dot(mr, 4, O, Dp, d, (const uint32_t (*)[BC / 2])P2, alpha, vp, nk, d == 0 ? pc : NULL, pf_per_key);
    if (d < D) pv_pass_dot(mr, 2, O, Dp, d, (const uint32_t (*)[BC / 2])P2, alpha, vp, nk, d == 0 ? pc : NULL, pf_per_key);
}
#else
#define DOT_BF16 0
#endif

// One row tile's S_ij = Q_i K_j^T and O_i = diag(alpha) O_i + P_ij V_j in the item's mode (mr, dt and
// mode are constants at every call). By dot products Q holds bf16 rows (2 Dp of them a row) and
// qmul scales S_ij; otherwise Q_i carries the scale.
DEC_INLINE void tile_qk(const int mr, const flashc_dtype dt, const int mode, float *restrict S, const float *restrict Q,
                        int64_t Dp, const char *const *kp, int64_t nk, int64_t Dv, float qmul, pf_cursor *pc,
                        int64_t pf_per_key) {
#if DOT_BF16
    if (mode == MODE_DOT) {
        qk_tile_dot(mr, S, (const uint16_t *)Q, 2 * Dp, kp, nk, Dv, qmul, pc, pf_per_key);
        return;
    }
#endif
    (void)qmul;
    qk_tile(mr, dt, mode == MODE_PAIR, S, Q, Dp, kp, nk, Dv, pc, pf_per_key);
}

DEC_INLINE void tile_pv(const int mr, const flashc_dtype dt, const int mode, float *restrict O, int64_t Dp,
                        const float *restrict P, const float *restrict alpha, const char *const *vp, int64_t nk,
                        int64_t Dv, pf_cursor *pc, int64_t pf_per_key) {
#if DOT_BF16
    if (mode == MODE_DOT) {
        pv_tile_dot(mr, O, Dp, P, alpha, vp, nk, Dv, pc, pf_per_key);
        return;
    }
#endif
    (void)pf_per_key;
    pv_tile(mr, dt, mode == MODE_PAIR, O, Dp, P, alpha, vp, nk, Dv, pc);
}

// ------------------------------------------------------------------------------------------------
// the online softmax of one row tile over one key block (Alg. 1 lines 9-10, log2 units)

// Row r of S: softcap, ALiBi, the mask, then m_new = max(m, rowmax S), alpha = 2^(m - m_new),
// P = 2^(S - m_new) in place, l = alpha l + rowsum P. A row that has seen no key yet keeps P = 0 and
// alpha = 0 (the subtrahend is 0 instead of -inf, which would give NaN).
static void softmax_rows(const flashc_problem *p, float *S, int mr, int64_t nk, int64_t j0, const float *slope2,
                         const int64_t *diag, const int64_t *lo, const int64_t *hi, float *m, float *l,
                         float *alpha) {
    const int64_t nkw = (nk + W - 1) / W * W;
    const FLASHC_VF32 neg_inf = FLASHC_VF32_SET1(-INFINITY);
    for (int r = 0; r < mr; r++) {
        float *S_r = S + r * BC;
        if (p->softcap > 0) { // S = cap tanh(S / cap), tanh(y) = (1 - e) / (1 + e), e = 2^(-2 y log2 e)
            const FLASHC_VF32 inv = FLASHC_VF32_SET1(1.0f / p->softcap), k2 = FLASHC_VF32_SET1(-2.0f * LOG2E),
                              lo9 = FLASHC_VF32_SET1(-9.0f), hi9 = FLASHC_VF32_SET1(9.0f), one = FLASHC_VF32_SET1(1.0f),
                              om = FLASHC_VF32_SET1(p->softcap * LOG2E);
            for (int64_t c = 0; c < nkw; c += W) {
                FLASHC_VF32 y = FLASHC_VF32_MIN(hi9, FLASHC_VF32_MAX(lo9, FLASHC_VF32_MUL(FLASHC_VF32_LOAD(S_r + c), inv)));
                FLASHC_VF32 e = flashc_vexp2(FLASHC_VF32_MUL(k2, y));
                FLASHC_VF32_STORE(S_r + c, FLASHC_VF32_MUL(om, FLASHC_VF32_DIV(FLASHC_VF32_SUB(one, e), FLASHC_VF32_ADD(one, e))));
            }
        }
        if (slope2[r] != 0.0f) // S -= slope |i + sk - sq - j| (log2 units)
            for (int64_t c = 0; c < nk; c++) S_r[c] -= slope2[r] * fabsf((float)(diag[r] - (j0 + c)));
        // the mask (keys outside [lo, hi)) and the padding past nk
        const int64_t c_lo = max64(0, min64(nk, lo[r] - j0)), c_hi = max64(c_lo, min64(nk, hi[r] - j0));
        for (int64_t c = 0; c < c_lo; c++) S_r[c] = -INFINITY;
        for (int64_t c = c_hi; c < nkw; c++) S_r[c] = -INFINITY;

        FLASHC_VF32 mx = neg_inf;
        for (int64_t c = 0; c < nkw; c += W) mx = FLASHC_VF32_MAX(mx, FLASHC_VF32_LOAD(S_r + c));
        const float m_blk = hmax(mx), m_old = m[r];
        const float m_new = m_blk > m_old ? m_blk : m_old;
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        float a[W];
        FLASHC_VF32_STORE(a, flashc_vexp2(FLASHC_VF32_SET1(m_old - m_use))); // 0 for m_old = -inf
        alpha[r] = a[0];
        const FLASHC_VF32 mu = FLASHC_VF32_SET1(m_use);
        FLASHC_VF32 sum = FLASHC_VF32_ZERO();
        for (int64_t c = 0; c < nkw; c += W) {
            const FLASHC_VF32 P = flashc_vexp2(FLASHC_VF32_SUB(FLASHC_VF32_LOAD(S_r + c), mu));
            FLASHC_VF32_STORE(S_r + c, P);
            sum = FLASHC_VF32_ADD(sum, P);
        }
        l[r] = alpha[r] * l[r] + hsum(sum);
        m[r] = m_new;
    }
}

// ------------------------------------------------------------------------------------------------
// the item

// Element offsets (head 0) of key rows j .. j + n - 1 of sequence b in K and V: through the block
// table one page run at a time (one division per block), else rows are evenly spaced.
static void row_offsets(const flashc_problem *p, int b, const flashc_seq *s, int64_t j, int64_t n, int64_t *ko,
                        int64_t *vo) {
    if (p->block_table) {
        const int32_t *bt = p->block_table + (int64_t)b * p->block_table_stride;
        int64_t pg = j / p->page_size, r = j % p->page_size;
        for (int64_t c = 0; c < n; c++) {
            const int64_t page = bt[pg];
            ko[c] = page * p->k_stride[0] + r * p->k_stride[1];
            vo[c] = page * p->v_stride[0] + r * p->v_stride[1];
            if (++r == p->page_size) r = 0, pg++;
        }
    } else {
        const int64_t k0 = flashc__k_off(p, p->k_stride, b, s, j), v0 = flashc__k_off(p, p->v_stride, b, s, j);
        for (int64_t c = 0; c < n; c++) {
            ko[c] = k0 + c * p->k_stride[1];
            vo[c] = v0 + c * p->v_stride[1];
        }
    }
}

// fp32 copy of n rows of D elements (dtype dt) into dst (row stride Dp), zero up to Dv; the row
// pointers are redirected to the copies.
static void stage_rows(const char **rows, int64_t n, int64_t D, int64_t Dv, int64_t Dp, flashc_dtype dt, float *dst) {
    for (int64_t c = 0; c < n; c++) {
        float *x = dst + c * Dp;
        for (int64_t d = 0; d < D; d++) x[d] = flashc__load(rows[c], d, dt);
        for (int64_t d = D; d < Dv; d++) x[d] = 0.0f;
        rows[c] = (const char *)x;
    }
}

typedef struct dec_ctx {
    const flashc_cpu_dec_job *J;
    const flashc_problem *p;
    flashc_cpu_dec_scratch t;
    flashc_seq s;
    int b, kh0, nh, G;
    int64_t i0, ni, RG, Dp, Dv, jb, je;
    int staged, mode;
    float qmul; // MODE_DOT: the scale S_ij takes as it leaves the registers (else Q_i carries it)
} dec_ctx;

// The next block's segments for prefetching (see pf_cursor): n1 key rows starting at element
// offsets off (head 0) in base; one segment per row spanning the item's heads when they are packed
// (head stride at most 2 head_dims), else one per (row, head). Returns the segment count.
static int64_t pf_segments(const flashc_problem *p, const char *base, int64_t hstride, const int64_t *off, int64_t n1,
                           int kh0, int nh, const char **seg, int64_t *seg_lines) {
    const size_t es = flashc__dtype_size(p->dtype);
    const int64_t span = ((int64_t)(nh - 1) * hstride + p->D) * (int64_t)es;
    if (span <= 2 * (int64_t)nh * p->D * (int64_t)es) {
        for (int64_t c = 0; c < n1; c++) seg[c] = base + es * (size_t)(off[c] + kh0 * hstride);
        *seg_lines = (span + 63) / 64;
        return n1;
    }
    for (int64_t c = 0; c < n1; c++)
        for (int h = 0; h < nh; h++) seg[c * nh + h] = base + es * (size_t)(off[c] + (kh0 + h) * hstride);
    *seg_lines = (p->D * (int64_t)es + 63) / 64;
    return n1 * nh;
}

// The key blocks of [jb, je) for every kv head of the item (dt: the dtype the microkernels read,
// fp32 when staged; mode: how they read bf16).
DEC_INLINE void run_blocks(const dec_ctx *X, const flashc_dtype dt, const int mode) {
    const flashc_cpu_dec_job *J = X->J;
    const flashc_problem *p = X->p;
    const flashc_cpu_dec_scratch *t = &X->t;
    const size_t es = flashc__dtype_size(p->dtype);
    const int64_t Dp = X->Dp, Dv = X->Dv;
    float slope2[MR];
    int64_t diag[MR];
    int cur = 0;
    if (X->jb < X->je) row_offsets(p, X->b, &X->s, X->jb, min64(BC, X->je - X->jb), t->k_off, t->v_off);
    for (int64_t j0 = X->jb; j0 < X->je; j0 += BC, cur ^= 1) {
        const int64_t nk = min64(BC, X->je - j0), n1 = max64(0, min64(BC, X->je - j0 - BC));
        const int64_t *ko = t->k_off + cur * BC, *vo = t->v_off + cur * BC;
        // the next block: its row offsets, and its K and V lines to prefetch over this block's head
        // passes (an equal share of the lines per pass, a few per key)
        pf_cursor kc = {t->kn, 1, 0, 0, 0}, vc = {t->vn, 1, 0, 0, 0};
        int64_t k_lines = 0, v_lines = 0;
        if (n1 > 0) {
            int64_t *ko1 = t->k_off + (cur ^ 1) * BC, *vo1 = t->v_off + (cur ^ 1) * BC;
            row_offsets(p, X->b, &X->s, j0 + BC, n1, ko1, vo1);
            if (!X->staged) { // (the staged path copies rows anyway)
                k_lines = pf_segments(p, J->k, p->k_stride[2], ko1, n1, X->kh0, X->nh, t->kn, &kc.seg_lines);
                v_lines = pf_segments(p, J->v, p->v_stride[2], vo1, n1, X->kh0, X->nh, t->vn, &vc.seg_lines);
                k_lines *= kc.seg_lines, v_lines *= vc.seg_lines;
            }
        }
        const int64_t k_share = (k_lines + X->nh - 1) / X->nh, v_share = (v_lines + X->nh - 1) / X->nh;
        const int64_t k_per_key = (k_share + nk - 1) / nk, v_per_key = (v_share + nk - 1) / nk;
        for (int kh = X->kh0; kh < X->kh0 + X->nh; kh++) {
            // Alg. 1 line 8: K_j, V_j of kv head kh (row pointers; read in place)
            const char *k = (const char *)J->k + es * (size_t)(kh * p->k_stride[2]);
            const char *v = (const char *)J->v + es * (size_t)(kh * p->v_stride[2]);
            for (int64_t c = 0; c < nk; c++) {
                t->kp[c] = k + es * (size_t)ko[c];
                t->vp[c] = v + es * (size_t)vo[c];
            }
            if (X->staged) {
                stage_rows(t->kp, nk, p->D, Dv, Dp, p->dtype, t->Ks);
                stage_rows(t->vp, nk, p->D, Dv, Dp, p->dtype, t->Vs);
            }
            // this pass's share: up to (pass + 1) shares issued in all, never past the last line
            const int64_t pass = kh - X->kh0 + 1;
            kc.left = min64(k_lines, pass * k_share) - (kc.s * kc.seg_lines + kc.l);
            vc.left = min64(v_lines, pass * v_share) - (vc.s * vc.seg_lines + vc.l);
            const int64_t m0 = (int64_t)(kh - X->kh0) * X->RG;
            for (int64_t r0 = 0; r0 < X->RG; r0 += MR) {
                const int mr = (int)min64(MR, X->RG - r0);
                // rows of the tile that see a key of this block
                int any = 0;
                for (int r = 0; r < mr; r++) {
                    const int64_t ii = (r0 + r) / X->G;
                    const int h = kh * X->G + (int)((r0 + r) % X->G);
                    any |= t->lo[ii] < t->hi[ii] && t->lo[ii] < j0 + nk && t->hi[ii] > j0;
                    slope2[r] = flashc__alibi_slope(p, X->b, h) * LOG2E;
                    diag[r] = X->i0 + ii + X->s.sk - X->s.sq;
                }
                if (!any) continue;
                int64_t lo[MR], hi[MR];
                for (int r = 0; r < mr; r++) {
                    lo[r] = t->lo[(r0 + r) / X->G];
                    hi[r] = t->hi[(r0 + r) / X->G];
                }
                float *Q = t->Q + (m0 + r0) * Dp, *O = t->O + (m0 + r0) * Dp;
                float *m = t->m + m0 + r0, *l = t->l + m0 + r0, *alpha = t->alpha + m0 + r0;
                pf_cursor *kpc = r0 == 0 && k_lines ? &kc : NULL, *vpc = r0 == 0 && v_lines ? &vc : NULL;
                const float qmul = X->qmul;
                switch (mr) { // S_ij = Q_i K_j^T
                case 4: tile_qk(4, dt, mode, t->S, Q, Dp, t->kp, nk, Dv, qmul, kpc, k_per_key); break;
                case 3: tile_qk(3, dt, mode, t->S, Q, Dp, t->kp, nk, Dv, qmul, kpc, k_per_key); break;
                case 2: tile_qk(2, dt, mode, t->S, Q, Dp, t->kp, nk, Dv, qmul, kpc, k_per_key); break;
                default: tile_qk(1, dt, mode, t->S, Q, Dp, t->kp, nk, Dv, qmul, kpc, k_per_key); break;
                }
                softmax_rows(p, t->S, mr, nk, j0, slope2, diag, lo, hi, m, l, alpha);
                switch (mr) { // O_i = diag(alpha) O_i + P_ij V_j
                case 4: tile_pv(4, dt, mode, O, Dp, t->S, alpha, t->vp, nk, Dv, vpc, v_per_key); break;
                case 3: tile_pv(3, dt, mode, O, Dp, t->S, alpha, t->vp, nk, Dv, vpc, v_per_key); break;
                case 2: tile_pv(2, dt, mode, O, Dp, t->S, alpha, t->vp, nk, Dv, vpc, v_per_key); break;
                default: tile_pv(1, dt, mode, O, Dp, t->S, alpha, t->vp, nk, Dv, vpc, v_per_key); break;
                }
            }
        }
        // what tiles without a visible key left over
        kc.left = k_lines - (kc.s * kc.seg_lines + kc.l);
        vc.left = v_lines - (vc.s * vc.seg_lines + vc.l);
        if (k_lines) pf_step(&kc, kc.left);
        if (v_lines) pf_step(&vc, vc.left);
    }
}

void FLASHC_ISA_NAME(flashc__cpu_dec_item)(const flashc_cpu_dec_job *J, int b, int kh0, int nh, int64_t i0, int sp,
                                          void *scratch) {
    const flashc_problem *p = J->p;
    dec_ctx X;
    X.J = J;
    X.p = p;
    flashc__cpu_dec_carve(J->rows, p->D, scratch, &X.t);
    X.s = flashc__seq(p, b);
    X.b = b;
    X.kh0 = kh0;
    X.nh = nh;
    X.G = p->group;
    X.i0 = i0;
    X.ni = min64(J->qc, X.s.sq - i0);
    X.RG = X.ni * X.G;
    X.Dp = (p->D + FLASHC_CPU_DEC_DP_ALIGN - 1) / FLASHC_CPU_DEC_DP_ALIGN * FLASHC_CPU_DEC_DP_ALIGN;
    X.staged = p->D % W != 0;
    X.Dv = X.staged ? (p->D + W - 1) / W * W : p->D;
    // (on AVX-512 every bf16 D that pairs also dots: MODE_PAIR is AVX2's)
    X.mode = DOT_BF16 && p->dtype == FLASHC_DTYPE_BF16 && p->D % 32 == 0 ? MODE_DOT
             : PAIR_BF16 && !X.staged && p->dtype == FLASHC_DTYPE_BF16 && p->D % (2 * W) == 0 ? MODE_PAIR
                                                                                                : MODE_PLAIN;
    const flashc_cpu_dec_scratch *t = &X.t;
    const int64_t D = p->D, Dp = X.Dp, M = (int64_t)nh * X.RG;
    const flashc_dtype dt = p->dtype;

    // Alg. 1 line 6 for all rows m = (kh - kh0) RG + ii G + g (position i0 + ii, head kh G + g):
    // Q_i * scale (* log2 e; with softcap the tanh needs natural units, log2 e comes after it); by
    // dot products Q_i's bf16 row as it is (in the row's first 2 Dp bytes), the scale on S_ij
    const float qmul = p->softcap > 0 ? p->scale : p->scale * LOG2E;
    X.qmul = qmul;
    for (int64_t m = 0; m < M; m++) {
        const int64_t kh = kh0 + m / X.RG, ii = m % X.RG / X.G;
        const int h = (int)(kh * X.G + m % X.G);
        const int64_t off = flashc__row_off(p, J->q_stride, b, X.s.q_row0, i0 + ii) + h * J->q_stride[2];
        float *Q_m = t->Q + m * Dp;
        if (X.mode == MODE_DOT) {
            memcpy(Q_m, (const uint16_t *)J->q + off, sizeof(uint16_t) * (size_t)D);
        } else {
            for (int64_t d = 0; d < D; d++) Q_m[pair_pos(d, X.mode)] = flashc__load(J->q, off + d, dt) * qmul;
            for (int64_t d = D; d < Dp; d++) Q_m[d] = 0.0f;
        }
        memset(t->O + m * Dp, 0, sizeof(float) * (size_t)Dp); // Alg. 1 line 5: O_i = 0, l_i = 0, m_i = -inf
        t->m[m] = -INFINITY;
        t->l[m] = 0.0f;
    }

    // the rows' key ranges (per query position) and the item's share of their union
    int64_t ulo = X.s.sk, uhi = 0;
    for (int64_t ii = 0; ii < X.ni; ii++) {
        flashc__key_range(p, i0 + ii, X.s.sq, X.s.sk, &t->lo[ii], &t->hi[ii]);
        if (t->lo[ii] < t->hi[ii]) {
            ulo = min64(ulo, t->lo[ii]);
            uhi = max64(uhi, t->hi[ii]);
        }
    }
    X.jb = X.je = 0;
    if (ulo < uhi) {
        const int64_t per = ((uhi - ulo + J->n_splits - 1) / J->n_splits + BC - 1) / BC * BC;
        X.jb = min64(uhi, ulo + sp * per);
        X.je = min64(uhi, X.jb + per);
    }

    if (X.mode == MODE_DOT) run_blocks(&X, FLASHC_DTYPE_BF16, MODE_DOT);
    else if (X.mode == MODE_PAIR) run_blocks(&X, FLASHC_DTYPE_BF16, MODE_PAIR);
    else if (X.staged || dt == FLASHC_DTYPE_F32) run_blocks(&X, FLASHC_DTYPE_F32, MODE_PLAIN);
    else if (dt == FLASHC_DTYPE_F16) run_blocks(&X, FLASHC_DTYPE_F16, MODE_PLAIN);
    else run_blocks(&X, FLASHC_DTYPE_BF16, MODE_PLAIN);

    // Alg. 1 lines 12-13: O_i / l_i and L_i = m_i + log l_i (natural log); no key: O = 0, L = +inf.
    // One split writes o and lse; several write their fp32 partials for the merge.
    for (int64_t m = 0; m < M; m++) {
        const int64_t kh = kh0 + m / X.RG, i = i0 + m % X.RG / X.G;
        const int h = (int)(kh * X.G + m % X.G);
        float inv_l;
        const float L = flashc__cpu_row_end(t->m[m], t->l[m], &inv_l);
        if (t->l[m] == 0.0f) memset(t->O + m * Dp, 0, sizeof(float) * (size_t)Dp);
        const float *O = t->O + m * Dp;
        if (J->n_splits == 1) {
            const int64_t o_off = flashc__row_off(p, p->o_stride, b, X.s.q_row0, i) + h * p->o_stride[2];
            if (dt == FLASHC_DTYPE_F32)
                for (int64_t d = 0; d < D; d++) ((float *)J->o)[o_off + d] = O[d] * inv_l;
            else
                for (int64_t d = 0; d < D; d++) flashc__store(J->o, o_off + d, dt, O[pair_pos(d, X.mode)] * inv_l);
            if (J->lse) J->lse[flashc__lse_off(p, b, h, &X.s, i)] = L;
        } else {
            const int64_t bm = p->varlen ? 0 : b, sm = p->varlen ? X.s.q_row0 + i : i;
            float *po = J->part_o + ((((int64_t)sp * J->PB + bm) * J->PS + sm) * p->H + h) * D;
            for (int64_t d = 0; d < D; d++) po[d] = O[pair_pos(d, X.mode)] * inv_l;
            J->part_lse[(((int64_t)sp * J->PB + bm) * p->H + h) * J->PS + sm] = L;
        }
    }
}
