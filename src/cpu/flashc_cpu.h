// flashc_cpu.h -- private to the CPU backend: tile sizes, the per-ISA kernel table, and what the
// driver (flashc_cpu.c) hands to one kernel call. The kernels themselves are written once, in
// flashc_cpu_kernels.h, and compiled once per ISA (flashc_cpu_scalar.c, _avx2.c, _avx512.c, _amx.c).
#ifndef FLASHC_CPU_H
#define FLASHC_CPU_H

#include "flashc_internal.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The sequence b with off[b] <= c < off[b + 1], off nondecreasing with off[0] = 0 <= c (the drivers
// number their work items per sequence in off[]).
static inline int find_seq(const int64_t *off, int n, int64_t c) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (off[mid] <= c) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// The row caches (the forward's of K_j, V_j blocks, the backward's of Q_i, dO_i blocks; see
// flashc__cpu_fwd_kv_slots): all threads together hold at most this many bytes in each.
#define FLASHC_CPU_ROW_CACHE_BYTES (32u << 20)

// Tile sizes. The forward keeps Q_i^T and O_i^T of FWD_BR query rows (the vector lanes) and streams
// K_j, V_j in blocks of FWD_BC keys; the backward keeps K_j^T, V_j^T, dK_j^T, dV_j^T of BWD_BC keys
// (the lanes) and streams Q_i, dO_i in blocks of BWD_BR rows. At D = 128 the forward's tiles are
// 250 KiB and the backward's 450 KiB, inside the 512 KiB L2 of a Zen 3 core; the microkernels'
// operand panels (a 24- or 16-column slice of the stationary tile, <= 12 KiB) stay in L1. Every
// streamed row is read once per stationary block, so a wider stationary block reads less. Measured
// (fp32, D = 128, Sq = Sk = 2048, 1 thread, best of several on a loaded machine): the forward at
// FWD_BR = 144 ran 15-35% faster than at 96, and no faster at 192 or 240; the backward at
// BWD_BC = 128 ran 10-25% faster than at 64, with BWD_BR = 64 and 96 alike.
// FWD_BR is a multiple of 48 (3 vectors of 16 lanes), BWD_BC of 32, so every ISA tiles them evenly.
#define FLASHC_CPU_FWD_BR 144
#define FLASHC_CPU_FWD_BC 64
#define FLASHC_CPU_BWD_BR 64
#define FLASHC_CPU_BWD_BC 128
// The backward pads D to a multiple of the dQ microkernel's width (2 vectors); workspace sizes use
// the widest ISA's (2 x 16 lanes) so they do not depend on the ISA picked.
#define FLASHC_CPU_DP_ALIGN_MAX 32

// One backward kernel call: key block [j0, min(j0 + BWD_BC, sk)) of sequence b against every query
// row of head h that sees it (FA2 Alg. 2, lines 6-21 for one j and one head).
typedef struct flashc_cpu_bwd_block {
    int b, h;
    int64_t j0;
    const float *Di;          // D_i = rowsum(dO_i * O_i), fp32, indexed like lse (flashc__lse_off)
    float *dq_acc;            // this block's fp32 dQ part of sequence b: (sq, dq_ld), row-major, +=
    int64_t dq_ld;            // its row stride (D padded to the ISA's dp_align)
    float *dk_acc, *dv_acc;   // fp32 sums over the GQA group for sequence b (sk x D floats; key block j0's
                              // at j0 * D, as D x nk), or NULL if group == 1
    int first_head, last_head; // h is the first / last query head of its group
    int64_t q_slots;          // slots of the thread's Q_i, dO_i cache (flashc__cpu_bwd_q_slots)
} flashc_cpu_bwd_block;

// The problems the bf16 dot-product paths take (flashc_cpu_tile.h), where the ISA has them.
static inline int flashc__cpu_bf16_dot(const flashc_problem *p) { return p->dtype == FLASHC_DTYPE_BF16 && p->D % 2 == 0; }
// Those that run on AMX tiles, where the ISA has them (whole tiles of pairs along D).
static inline int flashc__cpu_amx(const flashc_problem *p) { return flashc__cpu_bf16_dot(p) && p->D % 32 == 0; }

typedef struct flashc_cpu_kernels {
    const char *isa; // "scalar", "avx2", "avx512", "amx" (avx512 with bf16 on AMX tiles)
    int dp_align;    // the backward's padding of D (2 vectors of the ISA), <= FLASHC_CPU_DP_ALIGN_MAX
    int bf16_dot;    // flashc__cpu_bf16_dot problems run their products by bf16 dot products (not
                     // on amx, whose flashc__cpu_amx problems run on the tiles, the rest widened)
    // Forward for query rows [i0, min(i0 + FWD_BR, sq)) of sequence b, head h: writes o and lse rows.
    // scratch: the thread's slice, carved with kv_slots cache slots whose tags persist between calls.
    void (*fwd_qblock)(const flashc_problem *p, const flashc_fwd_args *a, int b, int h, int64_t i0,
                       int64_t kv_slots, void *scratch);
    // Backward for one key block (see flashc_cpu_bwd_block).
    void (*bwd_kvblock)(const flashc_problem *p, const flashc_bwd_args *a, const flashc_cpu_bwd_block *blk,
                        void *scratch);
} flashc_cpu_kernels;

FLASHC_INTERNAL extern const flashc_cpu_kernels flashc__cpu_kernels_scalar;
FLASHC_INTERNAL extern const flashc_cpu_kernels flashc__cpu_kernels_avx2;
FLASHC_INTERNAL extern const flashc_cpu_kernels flashc__cpu_kernels_avx512;
FLASHC_INTERNAL extern const flashc_cpu_kernels flashc__cpu_kernels_amx;
// The kernels a CPU ctx picked ("scalar" .. "amx"; the benchmark prints it and sizes its ceilings by it)
FLASHC_INTERNAL const char *flashc__cpu_isa(const flashc_ctx *ctx);

// The AMX tile configuration (ldtilecfg's 64-byte operand, palette 1) the amx kernels and the
// benchmark's AMX ceiling load: tiles 0-7 each 16 rows x 64 bytes.
typedef struct flashc_amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} flashc_amx_cfg;

static inline flashc_amx_cfg flashc__amx_cfg(void) {
    flashc_amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) c.colsb[i] = 64, c.rows[i] = 16;
    return c;
}

// ------------------------------------------------------------------------------------------------
// per-thread scratch: one 64-byte aligned slice of the workspace per thread, carved into tiles here
// (so the driver's size and the kernels' pointers come from the same list). With base == NULL only
// the size in bytes is computed. Every piece starts on a 64-byte boundary.

// Alg. 1 lines 12-13 for a row whose running max is m (log2 units) and sum l: returns L = (m +
// log2 l) ln 2 and sets *inv_l = 1 / l. A row that saw no key (l = 0): +inf and 0, and its caller
// stores O = 0, not 0 * O_i (O_i holds 0 * inf = NaN where the block read an Inf in V at a key
// other rows see); a NaN score makes l NaN: NaN and NaN.
#define LN2 0.6931471805599453f
#define LOG2E 1.4426950408889634f
static inline float flashc__cpu_row_end(float m, float l, float *inv_l) {
    *inv_l = l > 0.0f ? 1.0f / l : l == 0.0f ? 0.0f : NAN;
    return l > 0.0f ? (m + log2f(l)) * LN2 : l == 0.0f ? INFINITY : NAN;
}

static inline size_t flashc__cpu_round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Row stride (floats) of the fp32 copies of streamed rows (K_j, V_j forward; Q_i, dO_i backward):
// D rounded to a cache line plus one line, so consecutive rows start in different L1 sets. A
// power-of-two stride (D = 128: 512 B, or the input's own 8 KiB at H = 16) puts the column the
// microkernel walks in a handful of sets and thrashes L1.
static inline size_t flashc__cpu_row_ld(size_t D) { return flashc__cpu_round_up(D, 16) + 16; }

static inline void *flashc__cpu_take(char *base, size_t *off, size_t bytes) {
    void *p = base ? base + *off : NULL;
    *off += flashc__cpu_round_up(bytes, 64);
    return p;
}

// Forward, one query block (FWD_BR rows, the lanes) against key blocks of FWD_BC:
//   QT  D x BR    Q_i^T * scale (* log2 e)     OT  D x BR   unnormalised O_i^T (fp32 accumulator)
//   ST  BC x BR   S_ij^T, then P_ij^T in place
//   K, V  BC x ld fp32 copies of K_j, V_j, ld = flashc__cpu_row_ld(D), where the microkernels read them
//   (the AVX-512 bf16 forward keeps its bf16 tiles Q2, K_j, V2, P2 in QT, K, V, ST: flashc_cpu_tile.h;
//   the AMX one its slots' K_j rows in Kc and V2T in Vc)
//   Kc, Vc  n_slots x BC x ld  the thread's key block cache (flashc__cpu_fwd_kv_slots)
//   tag   n_slots int64: the block a slot holds, (b * H_kv + kv head) * ceil(Sk / BC) + j; -1 none
//   m, m_new, m_use, l, alpha: BR each          lo, hi: BR int64 each, the rows' key ranges
//   Kp, Vp  BC x D elements of the input dtype: paged K/V only, a key block's rows gathered from
//   their pages (flashc_cpu_kernels.h, kv_rows)
typedef struct flashc_cpu_fwd_scratch {
    float *QT, *OT, *ST, *K, *V, *Kc, *Vc, *m, *m_new, *m_use, *l, *alpha;
    int64_t *lo, *hi, *tag;
    void *Kp, *Vp;
    int64_t n_slots;
} flashc_cpu_fwd_scratch;


// Slots of one thread's key block cache. Each thread keeps the fp32 copies of the key blocks it
// has loaded, so it reads (and widens) a head's K and V once, not once per query block: the input
// rows of one head sit H * D * es apart (8 KiB at H = 16, D = 128, fp32), one 4 KiB page each:
// read strided 29 times per head (seqlen 4096), one thread ran at 51 GFLOP/s at H = 16 against 64
// at H = 1; the cache made H = 16 1.31x faster (one thread, seqlen 2048, A/B on a loaded machine).
// One slot per key block of the longest sequence (4.5 MiB a thread at seqlen 4096, D = 128), up
// to FLASHC_CPU_ROW_CACHE_BYTES / n_threads; past that, blocks from the last slot on share the
// last slot and are reloaded on every use.
static inline int64_t flashc__cpu_fwd_kv_slots(const flashc_problem *p, int n_threads) {
    const int64_t slot_bytes = 2 * FLASHC_CPU_FWD_BC * (int64_t)flashc__cpu_row_ld((size_t)p->D) * (int64_t)sizeof(float);
    const int64_t n_blocks = ceil_div(p->Sk, FLASHC_CPU_FWD_BC);
    const int64_t cap = (int64_t)FLASHC_CPU_ROW_CACHE_BYTES / n_threads / slot_bytes;
    return max64(1, min64(n_blocks, cap));
}

static inline size_t flashc__cpu_fwd_carve(const flashc_problem *p, int64_t n_slots, void *base,
                                           flashc_cpu_fwd_scratch *s) {
    size_t D = (size_t)p->D, BR = FLASHC_CPU_FWD_BR, BC = FLASHC_CPU_FWD_BC, off = 0, f = sizeof(float);
    size_t kv = BC * flashc__cpu_row_ld(D) * f;
    flashc_cpu_fwd_scratch t;
    t.n_slots = n_slots;
    t.QT = flashc__cpu_take(base, &off, D * BR * f);
    t.OT = flashc__cpu_take(base, &off, D * BR * f);
    t.ST = flashc__cpu_take(base, &off, BC * BR * f);
    t.K = flashc__cpu_take(base, &off, kv);
    t.V = flashc__cpu_take(base, &off, kv);
    t.Kc = flashc__cpu_take(base, &off, (size_t)n_slots * kv);
    t.Vc = flashc__cpu_take(base, &off, (size_t)n_slots * kv);
    t.m = flashc__cpu_take(base, &off, BR * f);
    t.m_new = flashc__cpu_take(base, &off, BR * f);
    t.m_use = flashc__cpu_take(base, &off, BR * f);
    t.l = flashc__cpu_take(base, &off, BR * f);
    t.alpha = flashc__cpu_take(base, &off, BR * f);
    t.lo = flashc__cpu_take(base, &off, BR * sizeof(int64_t));
    t.hi = flashc__cpu_take(base, &off, BR * sizeof(int64_t));
    t.tag = flashc__cpu_take(base, &off, (size_t)n_slots * sizeof(int64_t));
    const size_t paged = p->block_table ? BC * D * flashc__dtype_size(p->dtype) : 0;
    t.Kp = flashc__cpu_take(base, &off, paged);
    t.Vp = flashc__cpu_take(base, &off, paged);
    if (s) *s = t;
    return off;
}

// Backward, one key block (BWD_BC keys, the lanes) against query blocks of BWD_BR rows:
//   KT, VT  D x BC   K_j^T * scale (* log2 e), V_j^T      dKT, dVT  D x BC  fp32 dK_j^T, dV_j^T
//   K       BC x Dp  K_j * scale, zero-padded to Dp columns (the B operand of dQ_i += dS_ij K_j)
//   S, dP, T  BR x BC  S_ij -> P_ij, dP_ij -> dS_ij, tanh of the softcap (softcap only)
//   Q, dO   BR x ld  fp32 copies of Q_i, dO_i, ld = flashc__cpu_row_ld(D)
//   Qc, dOc n_slots x BR x ld  the thread's cache of Q_i, dO_i blocks (flashc__cpu_bwd_q_slots)
//   (the bf16 dot products keep K_j^T, V_j^T, K_j (all unscaled), Q_i, dO_i, P_ij and dS_ij as
//   bf16 pairs in the same tiles, dS_ij's bf16 rows in the S tile's second half and the bf16 rows
//   of Q_i, dO_i in the cache slots: flashc_cpu_kernels.h)
//   tag     n_slots int64: the block a slot holds, (b * H + h) * ceil(Sq / BR) + i; -1 none
//   L2, Di: BR each (L_i * log2 e, D_i)       lo, hi: BR int64 each
typedef struct flashc_cpu_bwd_scratch {
    float *KT, *VT, *dKT, *dVT, *K, *S, *dP, *T, *Q, *dO, *Qc, *dOc, *L2, *Di;
    int64_t *lo, *hi, *tag;
    int64_t n_slots;
} flashc_cpu_bwd_scratch;

// Slots of one thread's Q_i, dO_i cache, the backward's twin of the forward's key block cache: a
// thread runs 16 key blocks of a head at seqlen 4096 (2 threads, 8 dQ slots) and each reads every
// query block that sees it; one slot per query block of the longest sequence (4.5 MiB a thread at
// seqlen 4096, D = 128), up to FLASHC_CPU_ROW_CACHE_BYTES / n_threads.
static inline int64_t flashc__cpu_bwd_q_slots(const flashc_problem *p, int n_threads) {
    const int64_t slot_bytes = 2 * FLASHC_CPU_BWD_BR * (int64_t)flashc__cpu_row_ld((size_t)p->D) * (int64_t)sizeof(float);
    const int64_t cap = (int64_t)FLASHC_CPU_ROW_CACHE_BYTES / n_threads / slot_bytes;
    return max64(1, min64(ceil_div(p->Sq, FLASHC_CPU_BWD_BR), cap));
}

static inline size_t flashc__cpu_bwd_carve(const flashc_problem *p, int64_t n_slots, void *base,
                                           flashc_cpu_bwd_scratch *s) {
    size_t D = (size_t)p->D, BR = FLASHC_CPU_BWD_BR, BC = FLASHC_CPU_BWD_BC, off = 0, f = sizeof(float);
    size_t Dp = flashc__cpu_round_up(D, FLASHC_CPU_DP_ALIGN_MAX);
    size_t qdo = BR * flashc__cpu_row_ld(D) * f;
    size_t t_sz = p->softcap > 0 ? BR * BC * f : 0;
    flashc_cpu_bwd_scratch t;
    t.n_slots = n_slots;
    t.KT = flashc__cpu_take(base, &off, D * BC * f);
    t.VT = flashc__cpu_take(base, &off, D * BC * f);
    t.dKT = flashc__cpu_take(base, &off, D * BC * f);
    t.dVT = flashc__cpu_take(base, &off, D * BC * f);
    t.K = flashc__cpu_take(base, &off, BC * Dp * f);
    t.S = flashc__cpu_take(base, &off, BR * BC * f);
    t.dP = flashc__cpu_take(base, &off, BR * BC * f);
    t.T = flashc__cpu_take(base, &off, t_sz);
    t.Q = flashc__cpu_take(base, &off, qdo);
    t.dO = flashc__cpu_take(base, &off, qdo);
    t.Qc = flashc__cpu_take(base, &off, (size_t)n_slots * qdo);
    t.dOc = flashc__cpu_take(base, &off, (size_t)n_slots * qdo);
    t.L2 = flashc__cpu_take(base, &off, BR * f);
    t.Di = flashc__cpu_take(base, &off, BR * f);
    t.lo = flashc__cpu_take(base, &off, BR * sizeof(int64_t));
    t.hi = flashc__cpu_take(base, &off, BR * sizeof(int64_t));
    t.tag = flashc__cpu_take(base, &off, (size_t)n_slots * sizeof(int64_t));
    if (s) *s = t;
    return off;
}

#endif // FLASHC_CPU_H
