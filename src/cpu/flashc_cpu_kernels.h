// flashc_cpu_kernels.h -- the FlashAttention-2 forward (one query block) and backward (one key
// block) on the CPU, as sequences of the tile steps of flashc_cpu_tile.h.
//
// An "include template": flashc_cpu_<isa>.c defines FLASHC_ISA and FLASHC_ISA_NAME(x) and includes
// this file, which then defines the kernel table flashc__cpu_kernels_<isa>. Nothing here knows
// about threads or the workspace as a whole: the driver (flashc_cpu.c) decides which block runs
// where and hands each call its scratch slice and, for the backward, its fp32 accumulators.
#ifndef FLASHC_ISA_NAME
#error "define FLASHC_ISA and FLASHC_ISA_NAME before including flashc_cpu_kernels.h"
#endif

#include "flashc_cpu_tile.h"


// Address of row `row` of sequence b, head `head`, of a q-like tensor with element size es.
static inline const void *row_ptr(const flashc_problem *p, const void *base, const int64_t st[3], int b,
                                  int64_t row0, int64_t row, int head, size_t es) {
    return (const char *)base + es * (size_t)(flashc__row_off(p, st, b, row0, row) + head * st[2]);
}

// Address of key row j of sequence b, head `head`, of a k-like tensor (through the block table
// when paged, honouring a KV-cache batch index).
static inline const void *key_ptr(const flashc_problem *p, const void *base, const int64_t st[3], int b,
                                  const flashc_seq *s, int64_t j, int head, size_t es) {
    return (const char *)base + es * (size_t)(flashc__k_off(p, st, b, s, j) + head * st[2]);
}

// Rows j0 .. j0 + n - 1 of sequence b, kv head kvh, of a k-like tensor as the tile loaders read
// them: a pointer and a row stride (*rs). In place, rows st[1] apart; with paged K/V the rows of a
// block lie on different pages (a page holds page_size >= 1 of them), so they are gathered into the
// thread's buffer (t->Kp or t->Vp), rows D apart: one memcpy of D elements a row, against the
// 4 * BR * D FLOPs the row then takes part in.
static const void *kv_rows(const flashc_problem *p, const void *base, const int64_t st[3], void *gather, int b,
                           const flashc_seq *s, int64_t j0, int64_t n, int kvh, int64_t *rs) {
    const size_t es = flashc__dtype_size(p->dtype), row = es * (size_t)p->D;
    if (!p->block_table) {
        *rs = st[1];
        return key_ptr(p, base, st, b, s, j0, kvh, es);
    }
    for (int64_t r = 0; r < n; r++) memcpy((char *)gather + (size_t)r * row, key_ptr(p, base, st, b, s, j0 + r, kvh, es), row);
    *rs = p->D;
    return gather;
}

// Ask for the same rows' cache lines ahead of kv_rows (row by row through the table when paged).
static void kv_prefetch(const flashc_problem *p, const void *base, const int64_t st[3], int b, const flashc_seq *s,
                        int64_t j0, int64_t n, int kvh) {
    const size_t es = flashc__dtype_size(p->dtype);
    const int64_t bytes = p->D * (int64_t)es;
    if (!p->block_table) {
        tile_prefetch_rows(key_ptr(p, base, st, b, s, j0, kvh, es), st[1], es, n, bytes);
        return;
    }
    for (int64_t r = 0; r < n; r++) tile_prefetch_rows(key_ptr(p, base, st, b, s, j0 + r, kvh, es), 0, es, 1, bytes);
}

// ------------------------------------------------------------------------------------------------
// forward: FA2 Algorithm 1 for query rows [i0, i0 + nq) of sequence b, head h
//
// q, o: rows of (.., H, D) with strides q_stride / o_stride; k, v: rows of (.., H_kv, D);
// lse: fp32 (B, H, Sq) or (H, total_q), may be NULL. Key blocks outside every row's mask range are
// never visited; only blocks that some row sees in part are masked element by element.

// K_j, V_j (block jb = j0 / FWD_BC of sequence b, kv head kvh; all its min(FWD_BC, sk - j0) rows)
// into the tiles t->K, t->V, through the thread's cache slot min(jb, n_slots - 1). tag: the
// block's cache tag.
static void kv_load_block(flashc_cpu_fwd_scratch *t, const flashc_problem *p, const flashc_fwd_args *a, int b,
                          const flashc_seq *s, int kvh, int64_t j0, int64_t tag) {
    const int64_t D = p->D, n = min64(FLASHC_CPU_FWD_BC, s->sk - j0), ld = (int64_t)flashc__cpu_row_ld((size_t)D);
    const int64_t slot = min64(j0 / FLASHC_CPU_FWD_BC, t->n_slots - 1), off = slot * FLASHC_CPU_FWD_BC * ld;
    const void *k = NULL, *v = NULL;
    int64_t krs = 0, vrs = 0;
    if (t->tag[slot] != tag) { // (a cached block reads neither)
        k = kv_rows(p, a->k, p->k_stride, t->Kp, b, s, j0, n, kvh, &krs);
        v = kv_rows(p, a->v, p->v_stride, t->Vp, b, s, j0, n, kvh, &vrs);
    }
    tile_load_rows_cached(t->K, t->V, t->Kc + off, t->Vc + off, &t->tag[slot], tag, k, krs, v, vrs, n, D, ld, p->dtype);
}

static void fwd_qblock(const flashc_problem *p, const flashc_fwd_args *a, int b, int h, int64_t i0,
                       int64_t kv_slots, void *scratch) {
    flashc_cpu_fwd_scratch t;
    flashc__cpu_fwd_carve(p, kv_slots, scratch, &t);
    const flashc_seq s = flashc__seq(p, b);
    const int64_t D = p->D, nq = min64(BRF, s.sq - i0), ld = (int64_t)flashc__cpu_row_ld((size_t)D);
    const int64_t nl = ceil_div(nq, FWD_LANES) * FWD_LANES; // the lanes the steps compute
    const int kvh = h / p->group;
    const flashc_dtype dt = p->dtype;
    const size_t es = flashc__dtype_size(dt);

    // Alg. 1 line 6: load Q_i (transposed: queries in the lanes), with scale * log2 e folded in
    // (the dot path applies it to S_ij); with softcap the tanh needs the natural-unit score, so
    // log2 e comes after it.
    const float qmul = p->softcap > 0 ? p->scale : p->scale * LOG2E;
    // bf16 with AVX-512 BF16 (not on AMX CPUs: FLASHC_CPU_DOT_KERNELS): the products by dot products
    // on bf16 pairs (flashc_cpu_tile.h), the scale applied to S_ij; their tiles (Q2, K_j, V2, P2)
    // take the fp32 tiles' memory, each needing at most as much. With AMX (flashc_cpu_amx.c): the
    // two products on its tiles, the same operands but V_j^T.
    const int amx = FLASHC_CPU_AMX && flashc__cpu_amx(p);
    const int dot = amx || (FLASHC_CPU_DOT_KERNELS && flashc__cpu_bf16_dot(p));
    if (amx) amx_begin();
    if (dot)
        tile_load_T2((uint32_t *)t.QT, BRF, row_ptr(p, a->q, p->q_stride, b, s.q_row0, i0, h, es), p->q_stride[1], nq, D);
    else
        tile_load_T(t.QT, BRF, row_ptr(p, a->q, p->q_stride, b, s.q_row0, i0, h, es), p->q_stride[1], nq, D, dt, qmul);

    // The rows' key ranges. Keys outside [kv_lo, kv_hi) are seen by no row and never loaded; a key
    // block inside [max_lo, min_hi) is seen whole by every row and needs no mask.
    int64_t kv_lo = s.sk, kv_hi = 0, max_lo = 0, min_hi = s.sk;
    for (int64_t r = 0; r < nq; r++) {
        flashc__key_range(p, i0 + r, s.sq, s.sk, &t.lo[r], &t.hi[r]);
        if (t.lo[r] < t.hi[r]) {
            kv_lo = min64(kv_lo, t.lo[r]);
            kv_hi = max64(kv_hi, t.hi[r]);
        }
        max_lo = max64(max_lo, t.lo[r]);
        min_hi = min64(min_hi, t.hi[r]);
    }

    // Alg. 1 line 5 (for this block): O_i = 0, l_i = 0, m_i = -inf
    memset(t.OT, 0, sizeof(float) * (size_t)(D * BRF));
    for (int r = 0; r < BRF; r++) {
        t.m[r] = -INFINITY;
        t.l[r] = 0.0f;
    }
    const float slope2 = flashc__alibi_slope(p, b, h) * LOG2E;
    const int64_t diag_off = (int64_t)s.sk - s.sq;
    float *m_old = t.m, *m_new = t.m_new;

    // Key blocks start at multiples of FWD_BC, the cache's unit; keys of the first block before
    // kv_lo are masked like any boundary block's.
    const int64_t tag0 = ((int64_t)b * p->H_kv + kvh) * ceil_div(p->Sk, FLASHC_CPU_FWD_BC);
    for (int64_t j0 = kv_lo / FLASHC_CPU_FWD_BC * FLASHC_CPU_FWD_BC; j0 < kv_hi; j0 += FLASHC_CPU_FWD_BC) { // Alg. 1 line 7
        const int64_t nk = min64(FLASHC_CPU_FWD_BC, kv_hi - j0), jb = j0 / FLASHC_CPU_FWD_BC;
        // Alg. 1 line 8: load K_j, V_j (dot: the nk rows some query sees, copied, not widened, so
        // without the row cache; AMX: a block whose every row is seen goes through the cache, as
        // K_j's rows and V_j^T by pairs, built once a thread instead of once a query block)
        uint16_t *K_j = (uint16_t *)t.K; // (the dot paths' bf16 rows, and V_j by pairs)
        uint32_t *V2 = (uint32_t *)t.V;
        int load = dot;
        if (amx && nk == min64(FLASHC_CPU_FWD_BC, s.sk - j0)) { // a whole block: through the cache
            const int64_t slot = min64(jb, t.n_slots - 1), off = slot * FLASHC_CPU_FWD_BC * ld;
            K_j = (uint16_t *)(t.Kc + off);
            V2 = (uint32_t *)(t.Vc + off);
            load = t.tag[slot] != tag0 + jb;
            t.tag[slot] = tag0 + jb;
        }
        if (load) {
            int64_t krs, vrs;
            // (paged: K_j's rows gathered straight into the tile, which has kv_rows' layout)
            const uint16_t *k = kv_rows(p, a->k, p->k_stride, K_j, b, &s, j0, nk, kvh, &krs);
            const uint16_t *v = kv_rows(p, a->v, p->v_stride, t.Vp, b, &s, j0, nk, kvh, &vrs);
            if (k != K_j) tile_copy_rows16(K_j, D, k, krs, nk, D);
            if (amx) tile_pair_rows_T(V2, v, vrs, nk, D);
            else tile_pair_rows(V2, D, v, vrs, nk, (nk + 1) / 2, D);
        } else if (!dot)
            kv_load_block(&t, p, a, b, &s, kvh, j0, tag0 + jb);
        // K_{j+1}, V_{j+1} arrive while this block computes when they are not in the cache: all
        // their rows, not just tile_load_rows' first ROW_PREFETCH, since each row sits in its own
        // 4 KiB page at H = 16 and asking early hid enough of that to run 16% faster on one
        // thread. (Prefetching a cached block's dense slot as well made no measurable difference.)
        const int64_t j1 = j0 + FLASHC_CPU_FWD_BC;
        if (j1 < kv_hi && t.tag[min64(jb + 1, t.n_slots - 1)] != tag0 + jb + 1) {
            const int64_t n1 = min64(FLASHC_CPU_FWD_BC, s.sk - j1);
            kv_prefetch(p, a->k, p->k_stride, b, &s, j1, n1, kvh);
            kv_prefetch(p, a->v, p->v_stride, b, &s, j1, n1, kvh);
        }
        // Only the lanes [ra, ra + na) whose rows see a key of this block are computed (lo and hi
        // are nondecreasing in the row), in whole microkernel widths; the others keep m_i, l_i and
        // O_i as they are. Under a causal mask that skips most of the diagonal blocks' rows: causal
        // forward 1.08-1.15x at seqlen 512, 1.07x at 1024, 1.03x at 2048 on 2 threads (two runs),
        // non-causal 1.01x (dev/cpu/ab.py, bench/results/cpu_amd-epyc-2c_2026-12-02-rowwin.txt).
        int64_t ra = 0, rb = nq;
        while (ra < nq && t.hi[ra] <= j0) ra++;
        while (rb > ra && t.lo[rb - 1] >= j0 + nk) rb--;
        ra = ra / FWD_LANES * FWD_LANES;
        const int64_t na = max64(0, min64(nl, ceil_div(rb, FWD_LANES) * FWD_LANES) - ra);
        float *ST = t.ST + ra;
        if (amx)
            tile_qkT_amx(ST, K_j, (const uint32_t *)t.QT + ra, nk, na, D, qmul);
        else if (dot)
            tile_qkT2(ST, K_j, (const uint32_t *)t.QT + ra, nk, na, D, qmul);
        else
            tile_qkT(ST, t.K, ld, t.QT + ra, nk, na, D); // S_ij = Q_i K_j^T
        if (p->softcap > 0) // cap * tanh(S / cap)
            for (int64_t c = 0; c < nk; c++) tile_softcap(ST + c * BRF, NULL, na, p->softcap, LOG2E);
        if (slope2 != 0.0f) tile_alibi_kq(ST, nk, na, i0 + ra, j0, diag_off, slope2); // - slope |i - j|
        if (!(max_lo <= j0 && j0 + nk <= min_hi)) // boundary block
            tile_mask_kq(ST, nk, j0, t.lo + ra, t.hi + ra, min64(nq - ra, na));
        if (amx) tile_rowmax_lazy(m_new + ra, t.m_use + ra, ST, m_old + ra, nk, na);
        else tile_rowmax(m_new + ra, t.m_use + ra, ST, m_old + ra, nk, na); // m_i^j = max(m_i^{j-1}, rowmax(S_ij))
        tile_alpha(t.alpha + ra, m_old + ra, t.m_use + ra, na);         // alpha = 2^(m_i^{j-1} - m_i^j)
        tile_exp_rowsum(ST, t.l + ra, t.m_use + ra, t.alpha + ra, nk, na); // P_ij = 2^(S_ij - m_i^j), l_i = alpha l_i + rowsum(P_ij)
        if (amx) {
            tile_pair_f32(ST, BRF, nk, na);
            tile_pv_amx(t.OT + ra, t.alpha + ra, m_old + ra, (uint32_t *)ST, V2, nk, na, D);
        } else if (dot) {
            tile_pair_f32(ST, BRF, nk, na);
            tile_pv_acc2(t.OT + ra, t.alpha + ra, (const uint32_t *)ST, V2, nk, na, D);
        } else
            tile_pv_acc(t.OT + ra, t.alpha + ra, ST, t.V, ld, nk, na, D); // O_i = diag(alpha) O_i + P_ij V_j
        for (int64_t r = 0; r < ra; r++) m_new[r] = m_old[r];
        for (int64_t r = ra + na; r < nl; r++) m_new[r] = m_old[r];
        float *swap = m_old;
        m_old = m_new;
        m_new = swap;
    }

    if (amx) amx_end();

    // Alg. 1 lines 12-13: O_i = diag(l_i)^-1 O_i, L_i = m_i + log(l_i); rows with no key: 0, +inf
    float *inv_l = t.alpha; // (free now)
    for (int64_t r = 0; r < nq; r++) {
        const float L = flashc__cpu_row_end(m_old[r], t.l[r], &inv_l[r]);
        if (t.l[r] == 0.0f)
            for (int64_t d = 0; d < D; d++) t.OT[d * BRF + r] = 0.0f;
        if (a->lse) a->lse[flashc__lse_off(p, b, h, &s, i0 + r)] = L;
    }
    const int64_t o_off = flashc__row_off(p, p->o_stride, b, s.q_row0, i0) + h * p->o_stride[2];
    tile_store_T((char *)a->o + es * (size_t)o_off, p->o_stride[1], dt, t.OT, BRF, inv_l, nq, D);
}

// ------------------------------------------------------------------------------------------------
// backward: FA2 Algorithm 2 for one key block j of sequence b against every query row of head
// blk->h that sees it
//
// q, dout (rows of (.., H, D)), k, v (rows of (.., H_kv, D)); lse and D_i fp32 indexed like lse.
// Writes dK_j, dV_j (or adds them to the group's fp32 sums) and adds dS_ij K_j to the rows of its
// fp32 dQ part; every row of the key block is written, zeros where no query sees it.

// Smallest row i in [0, sq) whose key range [lo(i), hi(i)) has lo(i) >= j (by_lo) or hi(i) > j,
// sq if none: both are monotone in i (lo and hi are nondecreasing), so a binary search.
static int64_t first_row(const flashc_problem *p, int32_t sq, int32_t sk, int64_t j, int by_lo) {
    int64_t lo_i = 0, hi_i = sq;
    while (lo_i < hi_i) {
        int64_t mid = lo_i + (hi_i - lo_i) / 2, l, h;
        flashc__key_range(p, mid, sq, sk, &l, &h);
        if (by_lo ? l >= j : h > j) hi_i = mid;
        else lo_i = mid + 1;
    }
    return lo_i;
}

static void bwd_kvblock(const flashc_problem *p, const flashc_bwd_args *a, const flashc_cpu_bwd_block *blk,
                        void *scratch) {
    flashc_cpu_bwd_scratch t;
    flashc__cpu_bwd_carve(p, blk->q_slots, scratch, &t);
    const int b = blk->b, h = blk->h, kvh = h / p->group;
    const flashc_seq s = flashc__seq(p, b);
    const int64_t D = p->D, Dp = blk->dq_ld, j0 = blk->j0, nk = min64(BCB, s.sk - j0);
    const int64_t ld = (int64_t)flashc__cpu_row_ld((size_t)D);
    const flashc_dtype dt = p->dtype;
    const size_t es = flashc__dtype_size(dt);

    // Alg. 2 line 7: load K_j, V_j. K_j^T carries scale (* log2 e), for S = Q K^T in log2 units;
    // K_j (row-major, padded to Dp) carries the scale for dQ = scale dS K. bf16 with AVX-512 BF16:
    // the five products by dot products (flashc_cpu_tile.h) on K_j^T, V_j^T as bf16 pairs along D
    // and K_j by pairs of key rows, unscaled (kmul multiplies S_ij, the scale is folded into the
    // bf16 dS_ij of dQ), in the fp32 tiles' memory.
    // With AMX: the five products on its tiles (flashc_cpu_tile.h), the same operands but for Q_i^T
    // and dO_i^T by pairs of query rows.
    const float kmul = p->softcap > 0 ? p->scale : p->scale * LOG2E;
    const int amx = FLASHC_CPU_AMX && flashc__cpu_amx(p);
    const int dot = amx || (FLASHC_CPU_DOT_KERNELS && flashc__cpu_bf16_dot(p));
    const void *k_j = key_ptr(p, a->k, p->k_stride, b, &s, j0, kvh, es);
    const void *v_j = key_ptr(p, a->v, p->v_stride, b, &s, j0, kvh, es);
    if (dot) {
        tile_load_T2((uint32_t *)t.KT, BCB, k_j, p->k_stride[1], nk, D);
        tile_load_T2((uint32_t *)t.VT, BCB, v_j, p->v_stride[1], nk, D);
        // (AMX reads whole tiles of 16 pairs: the pairs past the block's rows are 0)
        tile_pair_rows((uint32_t *)t.K, Dp, k_j, p->k_stride[1], nk, amx ? 16 * ceil_div(nk, 32) : (nk + 1) / 2, D);
    } else {
        tile_load_T(t.KT, BCB, k_j, p->k_stride[1], nk, D, dt, kmul);
        tile_load_T(t.VT, BCB, v_j, p->v_stride[1], nk, D, dt, 1.0f);
        tile_load_rows(t.K, Dp, k_j, p->k_stride[1], nk, D, dt, p->scale);
        for (int64_t c = 0; c < nk; c++)
            for (int64_t d = D; d < Dp; d++) t.K[c * Dp + d] = 0.0f;
    }
    if (amx) amx_begin();
    // Alg. 2 line 8: dK_j = 0, dV_j = 0
    memset(t.dKT, 0, sizeof(float) * (size_t)(D * BCB));
    memset(t.dVT, 0, sizeof(float) * (size_t)(D * BCB));

    // The query rows that see a key of this block: [r_beg, r_end) (lo, hi are nondecreasing in i).
    const int64_t r_beg = first_row(p, s.sq, s.sk, j0, 0), r_end = first_row(p, s.sq, s.sk, j0 + nk, 1); // (nk >= 1)
    const float slope2 = flashc__alibi_slope(p, b, h) * LOG2E;
    const int64_t diag_off = (int64_t)s.sk - s.sq;
    float *T = p->softcap > 0 ? t.T : NULL;

    // Query blocks start at multiples of BWD_BR, the row cache's unit; rows of the first block
    // before r_beg see no key of this block and are masked like any boundary block's.
    const int64_t tag0 = ((int64_t)b * p->H + h) * ceil_div(p->Sq, FLASHC_CPU_BWD_BR);
    for (int64_t i0 = r_beg / FLASHC_CPU_BWD_BR * FLASHC_CPU_BWD_BR; i0 < r_end; i0 += FLASHC_CPU_BWD_BR) { // Alg. 2 line 9
        const int64_t nq = min64(FLASHC_CPU_BWD_BR, r_end - i0), ib = i0 / FLASHC_CPU_BWD_BR;
        int full = nk == BCB;
        int64_t c_hi = 0; // one past the last key of the block any of these rows sees
        for (int64_t r = 0; r < nq; r++) {
            flashc__key_range(p, i0 + r, s.sq, s.sk, &t.lo[r], &t.hi[r]);
            full &= t.lo[r] <= j0 && j0 + nk <= t.hi[r];
            c_hi = max64(c_hi, min64(t.hi[r] - j0, nk));
            const int64_t li = flashc__lse_off(p, b, h, &s, i0 + r);
            t.L2[r] = a->lse[li] * LOG2E;
            t.Di[r] = blk->Di[li];
        }
        // Alg. 2 line 10: load Q_i, dO_i (all min(BWD_BR, sq - i0) rows) through the thread's cache
        // slot min(ib, n_slots - 1), as the forward loads K_j, V_j: into fp32 tiles, or (dot) the
        // slot keeps the bf16 rows as they are, read in place
        const int64_t slot = min64(ib, t.n_slots - 1), off = slot * FLASHC_CPU_BWD_BR * ld;
        const void *q_i = row_ptr(p, a->q, p->q_stride, b, s.q_row0, i0, h, es);
        const void *do_i = row_ptr(p, a->dout, p->do_stride, b, s.q_row0, i0, h, es);
        const uint16_t *Q16 = (const uint16_t *)(t.Qc + off), *dO16 = (const uint16_t *)(t.dOc + off);
        if (!dot)
            tile_load_rows_cached(t.Q, t.dO, t.Qc + off, t.dOc + off, &t.tag[slot], tag0 + ib, q_i, p->q_stride[1],
                                  do_i, p->do_stride[1], min64(FLASHC_CPU_BWD_BR, s.sq - i0), D, ld, dt);
        else if (t.tag[slot] != tag0 + ib) {
            tile_copy_rows16((uint16_t *)Q16, D, q_i, p->q_stride[1], min64(FLASHC_CPU_BWD_BR, s.sq - i0), D);
            tile_copy_rows16((uint16_t *)dO16, D, do_i, p->do_stride[1], min64(FLASHC_CPU_BWD_BR, s.sq - i0), D);
            t.tag[slot] = tag0 + ib;
        }
        const float *Q_i = t.Q, *dO_i = t.dO;
        const int64_t q_rs = ld, do_rs = ld;
        if (i0 + FLASHC_CPU_BWD_BR < r_end) { // Q_{i+1}, dO_{i+1} (unless cached) and their dQ rows, ahead of use
            const int64_t i1 = i0 + FLASHC_CPU_BWD_BR, n1 = min64(FLASHC_CPU_BWD_BR, r_end - i1);
            if (t.tag[min64(ib + 1, t.n_slots - 1)] != tag0 + ib + 1) {
                const int64_t row_bytes = D * (int64_t)es;
                const void *q_1 = row_ptr(p, a->q, p->q_stride, b, s.q_row0, i1, h, es);
                const void *do_1 = row_ptr(p, a->dout, p->do_stride, b, s.q_row0, i1, h, es);
                tile_prefetch_rows(q_1, p->q_stride[1], es, n1, row_bytes);
                tile_prefetch_rows(do_1, p->do_stride[1], es, n1, row_bytes);
            }
            tile_prefetch_rows(blk->dq_acc + i1 * Dp, Dp, sizeof(float), n1, Dp * (int64_t)sizeof(float));
        }
        // Keys past c_hi get P_ij = 0 from every row here: the steps compute the first nc columns
        // only (under a causal mask half of each diagonal tile). Causal backward 1.04-1.08x at seqlen
        // 512, 1.04x at 1024, 1.03x at 2048, non-causal 0.99-1.00x (two runs of dev/cpu/ab.py,
        // bench/results/cpu_amd-epyc-2c_2026-12-02-rowwin.txt).
        const int64_t nc = min64(BCB, ceil_div(c_hi, BWD_COLS) * BWD_COLS);
        if (amx) // S_ij = Q_i K_j^T
            tile_qkT_rows_amx(t.S, Q16, (const uint32_t *)t.KT, nq, nc, D, kmul);
        else if (dot)
            tile_qkT_rows2(t.S, Q16, (const uint32_t *)t.KT, nq, nc, D, kmul);
        else
            tile_qkT_rows(t.S, Q_i, q_rs, t.KT, nq, nc, D);
        if (T)                                          // cap * tanh(S / cap)
            for (int64_t r = 0; r < nq; r++) tile_softcap(t.S + r * BCB, T + r * BCB, nc, p->softcap, LOG2E);
        if (slope2 != 0.0f) tile_alibi_qk(t.S, nq, nc, i0, j0, diag_off, slope2); // - slope |i - j|
        if (!full) tile_mask_qk(t.S, nq, nc, j0, t.lo, t.hi);                     // boundary block
        tile_exp_sub_lse(t.S, t.L2, nq, nc);                 // P_ij = exp(S_ij - L_i)
        if (!dot) {
            tile_dv_acc(t.dVT, dO_i, do_rs, t.S, nq, nc, D); // dV_j += P_ij^T dO_i
            tile_dP(t.dP, dO_i, do_rs, t.VT, nq, nc, D);     // dP_ij = dO_i V_j^T
            tile_ds(t.dP, t.S, t.Di, T, nq, nc);             // dS_ij = P_ij o (dP_ij - D_i)
            tile_dq_acc(blk->dq_acc + i0 * Dp, Dp, t.dP, t.K, Dp, nq, min64(nk, nc)); // dQ_i += scale dS_ij K_j
            tile_dk_acc(t.dKT, Q_i, q_rs, t.dP, nq, nc, D);  // dK_j += dS_ij^T Q_i (scaled below)
        } else {
            // Q_i, dO_i by pairs of rows into their fp32 tiles; P_ij's pairs of rows where its
            // first rows were, dS_ij's in place, and dS_ij by rows (scaled for dQ_i) into the S
            // tile's second half.
            uint32_t *Q2 = (uint32_t *)t.Q, *dO2 = (uint32_t *)t.dO;
            _Static_assert(FLASHC_CPU_BWD_BR % 2 == 0, "P_ij pairs: first half of S; dS16: second half");
            uint16_t *dS16 = (uint16_t *)(t.S + FLASHC_CPU_BWD_BR / 2 * BCB);
            // (AMX: Q_i^T, dO_i^T by pairs of rows instead, and Q_i^T's tile is the dQ_i tail's
            // stage once dK_j has used it)
            if (amx) {
                tile_pair_rows_T(Q2, Q16, D, nq, D);
                tile_pair_rows_T(dO2, dO16, D, nq, D);
                tile_qkT_rows_amx(t.dP, dO16, (const uint32_t *)t.VT, nq, nc, D, 1.0f);
            } else {
                tile_pair_rows(Q2, D, Q16, D, nq, (nq + 1) / 2, D);
                tile_pair_rows(dO2, D, dO16, D, nq, (nq + 1) / 2, D);
                tile_qkT_rows2(t.dP, dO16, (const uint32_t *)t.VT, nq, nc, D, 1.0f); // dP_ij = dO_i V_j^T
            }
            tile_ds(t.dP, t.S, t.Di, T, nq, nc); // dS_ij = P_ij o (dP_ij - D_i)
            tile_pair_f32(t.S, BCB, nq, nc);
            if (amx) tile_dkv_acc_amx(t.dVT, dO2, (uint32_t *)t.S, nq, nc, D);
            else tile_dkv_acc2(t.dVT, dO2, (const uint32_t *)t.S, nq, nc, D); // dV_j += P_ij^T dO_i
            tile_bf16_rows(dS16, BCB, t.dP, BCB, nq, nc, p->scale);
            tile_pair_f32(t.dP, BCB, nq, nc);
            if (amx) tile_dkv_acc_amx(t.dKT, Q2, (uint32_t *)t.dP, nq, nc, D);
            else tile_dkv_acc2(t.dKT, Q2, (const uint32_t *)t.dP, nq, nc, D); // dK_j += dS_ij^T Q_i
            if (amx) tile_dq_acc_amx(blk->dq_acc + i0 * Dp, Dp, dS16, (const uint32_t *)t.K, Dp, nq, min64(nk, nc), D, t.Q);
            else tile_dq_acc2(blk->dq_acc + i0 * Dp, Dp, dS16, (const uint32_t *)t.K, Dp, nq, min64(nk, nc));
        }
    }
    if (amx) amx_end();

    // Alg. 2 line 24: write dK_j = scale dK_j, dV_j; GQA sums the group's heads in fp32 first
    // (in head order, so the sum is the same on every run), kept per key block as D x nk (dK_j^T's
    // layout, so both operands run along the keys), and the group's last head writes the sums.
    const float *outK = t.dKT, *outV = t.dVT;
    int64_t out_ld = BCB;
    float *mul_k = t.S, *mul_v = t.S + BCB; // (the S tile, BR x BC, is free now)
    for (int64_t c = 0; c < nk; c++) {
        mul_k[c] = p->scale;
        mul_v[c] = 1.0f;
    }
    if (blk->dk_acc) {
        float *sum_k = blk->dk_acc + j0 * D, *sum_v = blk->dv_acc + j0 * D;
        for (int64_t d = 0; d < D; d++)
            for (int64_t c = 0; c < nk; c++) {
                const float dk = p->scale * t.dKT[d * BCB + c], dv = t.dVT[d * BCB + c];
                sum_k[d * nk + c] = blk->first_head ? dk : dk + sum_k[d * nk + c];
                sum_v[d * nk + c] = blk->first_head ? dv : dv + sum_v[d * nk + c];
            }
        if (!blk->last_head) return;
        outK = sum_k, outV = sum_v, out_ld = nk;
        mul_k = mul_v; // (the sums are scaled already)
    }
    const int64_t dk_off = flashc__row_off(p, p->dk_stride, b, s.k_row0, j0) + kvh * p->dk_stride[2];
    const int64_t dv_off = flashc__row_off(p, p->dv_stride, b, s.k_row0, j0) + kvh * p->dv_stride[2];
    tile_store_T((char *)a->dk + es * (size_t)dk_off, p->dk_stride[1], dt, outK, out_ld, mul_k, nk, D);
    tile_store_T((char *)a->dv + es * (size_t)dv_off, p->dv_stride[1], dt, outV, out_ld, mul_v, nk, D);
}

const flashc_cpu_kernels FLASHC_ISA_NAME(flashc__cpu_kernels) = {
    FLASHC_ISA_STR,
    BWD_NV * FLASHC_VF32_W,
    FLASHC_CPU_DOT_KERNELS,
    fwd_qblock,
    bwd_kvblock,
};
