// flashc_cpu_decode.c -- the decode kernel's driver (see flashc_cpu_decode.h): the plan (query
// chunk, kv heads per item, split count), the workspace, the work grid over the thread pool, the
// merge of split partials, and the two callers, flashc_fwd_kvcache and flashc_fwd, at few queries a
// sequence (flashc_cpu.c, fwd_by_decode).
//
// Workspace layout (every piece 64-byte aligned; sizes depend on the description and the thread
// count only):
//   q_rot     dtype (B, Sq, H, D)          the rotated q (flashc_fwd_kvcache with rotary only)
//   item_off  int64 (B + 1)                prefix sums of the items per sequence
//   part_o    fp32 (n_splits, total_q, H, D)   split partials (n_splits > 1 only)
//   part_lse  fp32 (n_splits, H, total_q)  in (PB, H, PS) order, as flashc_merge's lse_parts
//   scratch   n_threads slices of flashc__cpu_dec_carve bytes
// At B = 1, H = 32, D = 128, Sq = 1, 16 splits, 2 threads: 256 KiB of partials and 2 x 83 KiB.
#include "flashc_cpu_decode.h"

#include <stdlib.h>
#include <string.h>


static flashc_cpu_dec_item_fn pick_item(const char *isa) {
    if (isa && (!strcmp(isa, "avx512") || !strcmp(isa, "amx"))) return flashc__cpu_dec_item_avx512; // (no AMX decode)
    if (isa && !strcmp(isa, "avx2")) return flashc__cpu_dec_item_avx2;
    return flashc__cpu_dec_item_scalar;
}

// ------------------------------------------------------------------------------------------------
// the plan

typedef struct dec_plan {
    int64_t qc, rows;
    int32_t hk_per, n_hg;
    int n_splits;
} dec_plan;

// GQA packing first: as many query positions (qc) and kv heads (hk_per) per item as fit in
// MAX_ROWS rows, so K and V are read once for all of them. Then split-KV when the items (batch x
// query chunks x head ranges) are too few for the threads: ITEMS_PER_THREAD per thread, each split
// at least MIN_SPLIT keys of the capacity. num_splits > 0 forces the count.
static dec_plan make_plan(const flashc_problem *p, int n_threads, int num_splits) {
    dec_plan P;
    const int64_t G = p->group, Sq = max64(1, p->Sq);
    P.qc = min64(Sq, max64(1, FLASHC_CPU_DEC_MAX_ROWS / G));
    P.hk_per = (int32_t)min64(p->H_kv, max64(1, FLASHC_CPU_DEC_MAX_ROWS / (G * P.qc)));
    P.n_hg = (int32_t)ceil_div(p->H_kv, P.hk_per);
    P.rows = (int64_t)P.hk_per * G * P.qc;
    if (num_splits > 0) {
        P.n_splits = num_splits;
    } else {
        const int64_t items = (int64_t)p->B * ceil_div(Sq, P.qc) * P.n_hg;
        const int64_t want = (int64_t)FLASHC_CPU_DEC_ITEMS_PER_THREAD * n_threads;
        int64_t n = n_threads > 1 && items < want ? ceil_div(want, items) : 1;
        n = min64(n, max64(1, p->Sk / FLASHC_CPU_DEC_MIN_SPLIT));
        P.n_splits = (int)min64(n, FLASHC_CPU_DEC_MAX_SPLITS);
    }
    return P;
}

typedef struct dec_layout {
    void *q_rot;
    int64_t *item_off;
    float *part_o, *part_lse;
    char *scratch;
    size_t slice, total;
} dec_layout;

static void *take(void *ws, size_t *off, size_t bytes) {
    void *p = ws ? (char *)ws + *off : NULL;
    *off += (bytes + 63) / 64 * 64;
    return p;
}

static dec_layout carve(const flashc_problem *p, const dec_plan *P, int n_threads, size_t q_rot, void *ws) {
    dec_layout L;
    size_t off = 0, f = sizeof(float);
    const size_t rows_q = (size_t)p->total_q * (size_t)p->H, n = P->n_splits > 1 ? (size_t)P->n_splits : 0;
    L.q_rot = take(ws, &off, q_rot);
    L.item_off = take(ws, &off, sizeof(int64_t) * ((size_t)p->B + 1));
    L.part_o = take(ws, &off, n * rows_q * (size_t)p->D * f);
    L.part_lse = take(ws, &off, n * rows_q * f);
    L.slice = flashc__cpu_dec_carve(P->rows, p->D, NULL, NULL);
    L.scratch = take(ws, &off, L.slice * (size_t)n_threads);
    L.total = off;
    return L;
}

// ------------------------------------------------------------------------------------------------
// the run

typedef struct dec_run {
    flashc_cpu_dec_job J;
    flashc_cpu_dec_item_fn item;
    flashc_merge_problem m;
    flashc_merge_args ma;
    int64_t merge_rows;
} dec_run;

// Chunk c: item (query chunk, head range, split) of sequence b, splits fastest so that the splits
// of one (b, heads) run side by side and share the sequence's pages in L3.
static void dec_chunk(void *arg, int64_t c, int thread) {
    const dec_run *R = arg;
    const flashc_cpu_dec_job *J = &R->J;
    const int b = find_seq(J->item_off, J->p->B, c);
    const int64_t local = c - J->item_off[b];
    const int sp = (int)(local % J->n_splits);
    const int hg = (int)(local / J->n_splits % J->n_hg);
    const int64_t i0 = local / J->n_splits / J->n_hg * J->qc;
    const int kh0 = hg * J->hk_per;
    const int nh = (int)min64(J->hk_per, J->p->H_kv - kh0);
    R->item(J, b, kh0, nh, i0, sp, J->scratch + J->slice * (size_t)thread);
}

#define MERGE_ROWS_PER_CHUNK 16

static void merge_chunk(void *arg, int64_t c, int thread) {
    (void)thread;
    const dec_run *R = arg;
    const int64_t r0 = c * MERGE_ROWS_PER_CHUNK;
    flashc__merge_host_rows(&R->m, &R->ma, r0, min64(R->merge_rows, r0 + MERGE_ROWS_PER_CHUNK));
}

// Attention of q (q_stride) against the problem's K/V (paged, cache rows or plain), writing o and lse.
static void dec_attend(flashc_pool *pool, const char *isa, const flashc_problem *p, const dec_plan *P,
                       const dec_layout *L, const void *q, const int64_t q_stride[3], const void *k, const void *v,
                       void *o, float *lse) {
    dec_run R;
    memset(&R, 0, sizeof R);
    flashc_cpu_dec_job *J = &R.J;
    J->p = p;
    J->q = q;
    memcpy(J->q_stride, q_stride, sizeof J->q_stride);
    J->k = k;
    J->v = v;
    J->o = o;
    J->lse = lse;
    J->n_splits = P->n_splits;
    J->qc = P->qc;
    J->hk_per = P->hk_per;
    J->n_hg = P->n_hg;
    J->rows = P->rows;
    J->part_o = L->part_o;
    J->part_lse = L->part_lse;
    J->PB = p->varlen ? 1 : p->B;
    J->PS = p->varlen ? p->total_q : p->Sq;
    J->item_off = L->item_off;
    J->scratch = L->scratch;
    J->slice = L->slice;
    R.item = pick_item(isa);

    J->item_off[0] = 0;
    for (int b = 0; b < p->B; b++)
        J->item_off[b + 1] = J->item_off[b] + ceil_div(flashc__seq(p, b).sq, P->qc) * P->n_hg * P->n_splits;
    // partial rows that no item writes (varlen rows before cu_seqlens_q[0]) read as "saw no key"
    if (P->n_splits > 1)
        for (int64_t i = 0; i < (int64_t)P->n_splits * p->H * p->total_q; i++) J->part_lse[i] = INFINITY;
    flashc__pool_run(pool, dec_chunk, &R, J->item_off[p->B]);
    if (P->n_splits == 1) return;

    // the splits' partials, merged by their LSEs into o and lse
    const int64_t HD = (int64_t)p->H * p->D;
    flashc_merge_problem m = {P->n_splits, (int32_t)J->PB, (int32_t)J->PS, p->H, p->D, FLASHC_DTYPE_F32, p->dtype,
                              {J->PB * J->PS * HD, J->PS * HD, HD, p->D},
                              {p->varlen ? 0 : p->o_stride[0], p->o_stride[1], p->o_stride[2]}};
    R.m = m;
    R.ma.out_parts = J->part_o;
    R.ma.lse_parts = J->part_lse;
    R.ma.out = o;
    R.ma.lse = lse;
    R.merge_rows = J->PB * J->PS * p->H;
    flashc__pool_run(pool, merge_chunk, &R, ceil_div(R.merge_rows, MERGE_ROWS_PER_CHUNK));
}

// ------------------------------------------------------------------------------------------------
// the callers

size_t flashc__cpu_decode_fwd_ws(const flashc_problem *p, int n_threads) {
    const dec_plan P = make_plan(p, n_threads, 0);
    return carve(p, &P, n_threads, 0, NULL).total;
}

flashc_status flashc__cpu_decode_fwd(flashc_pool *pool, const char *isa, const flashc_problem *p,
                                     const flashc_fwd_args *a) {
    const int n_threads = flashc__pool_size(pool);
    const dec_plan P = make_plan(p, n_threads, 0);
    const dec_layout L = carve(p, &P, n_threads, 0, a->ws);
    dec_attend(pool, isa, p, &P, &L, a->q, p->q_stride, a->k, a->v, a->o, a->lse);
    return FLASHC_OK;
}

size_t flashc__cpu_decode_kvcache_ws(const flashc_problem *p, int n_threads, const flashc_kvcache_args *a) {
    const dec_plan P = make_plan(p, n_threads, a->num_splits);
    return carve(p, &P, n_threads, flashc__kvcache_q_rot_bytes(p, a), NULL).total;
}

flashc_status flashc__cpu_decode_kvcache(flashc_pool *pool, const char *isa, const flashc_problem *p,
                                         const flashc_kvcache_args *a) {
    const int n_threads = flashc__pool_size(pool);
    const dec_plan P = make_plan(p, n_threads, a->num_splits);
    const dec_layout L = carve(p, &P, n_threads, flashc__kvcache_q_rot_bytes(p, a), a->ws);
    // 1. the append (k_new rotated at c_b + t), in place, before the attention reads the cache
    flashc__kvcache_append_host(p, a);
    // 2. q rotated at c_b (+ i) into the workspace
    const void *q = a->q;
    int64_t q_stride[3] = {p->q_stride[0], p->q_stride[1], p->q_stride[2]};
    if (a->rotary_cos) {
        flashc__kvcache_rotate_q_host(p, a, L.q_rot);
        q = L.q_rot;
        q_stride[2] = p->D;
        q_stride[1] = (int64_t)p->H * p->D;
        q_stride[0] = q_stride[1] * p->Sq;
    }
    // 3. attention over the first c_b + seqlen_new keys (the problem's seqused_k_host)
    dec_attend(pool, isa, p, &P, &L, q, q_stride, a->k_cache, a->v_cache, a->o, a->lse);
    return FLASHC_OK;
}
