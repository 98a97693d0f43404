// flashc_ref.c -- the plain fp64 reference of flashc: the specification every fast path is
// checked against.
//
// What it is: attention written the textbook way, one query row at a time, every score,
// probability and sum in double. It follows the semantics in include/flashc.h word for word
// (score pipeline, bottom-right aligned mask, GQA, varlen, paged K/V, the KV cache with its append
// and rotary, the merge, rows that see no key) and is reachable at runtime as FLASHC_BACKEND_REF,
// so tests and users can compare against it in one process.
// The fp64 core (flashc__ref_fwd_f64 / flashc__ref_bwd_f64) also runs on fp64 tensors directly,
// which is what the finite-difference check of the backward uses. `make` builds it into
// libflashc; select it with flashc_ctx_create(&ctx, FLASHC_BACKEND_REF, 0).
//
// What it is not: fast, tiled, threaded or memory-frugal. It holds fp64 copies of every tensor,
// costs O(B * H * Sq * Sk * D) plain loops, and runs on host memory only. It does no validation:
// src/flashc.c hands it a valid, resolved flashc_problem (strides are non-negative).
//
// The fp64 core allocates nothing (it returns void, and tests call it directly), so instead of
// storing the score row S_i it recomputes S_ij with score() in each pass over the keys: two passes
// in the forward (max, then exp/sum/PV), one in the backward (P_ij comes from the saved L_i).

#include "flashc_internal.h"

#include <stdlib.h>

// ------------------------------------------------------------------------------------------------
// the score pipeline

// S_ij for query row Q_i and key row K_j, exactly as flashc.h defines it:
//     raw  = scale * Q_i . K_j
//     s    = softcap * tanh(raw / softcap)       if softcap > 0, else s = raw
//     s   -= slope * |i + sk - sq - j|           (ALiBi; slope = 0 when off; diag = i + sk - sq)
// The mask is not here: callers only visit keys j inside flashc__key_range.
// If t is not NULL it receives tanh(raw / softcap) (0 without softcap), which the backward needs.
static double score(const flashc_problem *p, const double *Q_i, const double *K_j, double slope,
                    int64_t diag, int64_t j, double *t) {
    double raw = 0.0;
    for (int d = 0; d < p->D; d++) raw += Q_i[d] * K_j[d];
    raw *= (double)p->scale;
    double s = raw, tanh_raw = 0.0;
    if (p->softcap > 0.0f) {
        double softcap = (double)p->softcap;
        tanh_raw = tanh(raw / softcap);
        s = softcap * tanh_raw;
    }
    int64_t dist = diag - j;
    s -= slope * (double)(dist < 0 ? -dist : dist);
    if (t) *t = tanh_raw;
    return s;
}

// ------------------------------------------------------------------------------------------------
// tensor layouts

// A q-like tensor (q, o, dout, dq) is (B, Sq, H, D), or (total_q, H, D) in varlen mode; a k-like
// tensor (k, v, dk, dv) is (B, Sk, H_kv, D) or (total_k, H_kv, D). Either way it is n_rows rows of
// `heads` head vectors of D elements; this enumerates them all, including rows that no sequence
// owns (varlen) or that lie past seqused_k, so outputs are written everywhere they exist.
typedef struct ref_layout {
    const int64_t *st;   // element strides [batch, seq, head]
    int64_t S;           // rows per batch entry (batch mode only)
    int64_t n_rows;      // B * S, or total rows in varlen mode
    int64_t heads;
} ref_layout;

static ref_layout q_layout(const flashc_problem *p, const int64_t st[3]) {
    ref_layout L = {st, p->Sq, p->varlen ? p->total_q : (int64_t)p->B * p->Sq, p->H};
    return L;
}

static ref_layout k_layout(const flashc_problem *p, const int64_t st[3]) {
    ref_layout L = {st, p->Sk, p->varlen ? p->total_k : (int64_t)p->B * p->Sk, p->H_kv};
    return L;
}

// Element offset of head h of row r (0 <= r < n_rows).
static int64_t head_off(const flashc_problem *p, const ref_layout *L, int64_t r, int64_t h) {
    int64_t row = p->varlen ? r * L->st[1] : (r / L->S) * L->st[0] + (r % L->S) * L->st[1];
    return row + h * L->st[2];
}

// Number of elements the strides address: one past the last element of the last head of the
// last row (strides are non-negative, so that element is the furthest).
static int64_t span(const flashc_problem *p, const ref_layout *L) {
    if (L->n_rows == 0) return 0;
    return head_off(p, L, L->n_rows - 1, L->heads - 1) + p->D;
}

static void fill_zero(const flashc_problem *p, const ref_layout *L, double *x) {
    for (int64_t r = 0; r < L->n_rows; r++)
        for (int64_t h = 0; h < L->heads; h++)
            memset(x + head_off(p, L, r, h), 0, (size_t)p->D * sizeof(double));
}

// Typed tensor -> fp64 copy with the same element strides (the gaps are left alone), each element
// times mul (an E4M3 tensor's descale, else 1; exact in fp64).
static void load_f64(const flashc_problem *p, const ref_layout *L, const void *src, double *dst, double mul) {
    for (int64_t r = 0; r < L->n_rows; r++)
        for (int64_t h = 0; h < L->heads; h++) {
            int64_t off = head_off(p, L, r, h);
            for (int d = 0; d < p->D; d++) dst[off + d] = (double)flashc__load(src, off + d, p->dtype) * mul;
        }
}

// Paged K/V or cache rows (block_table or cache_batch_idx): only the rows the sequences use (key j
// < sk of sequence b, wherever the table puts it) are known to exist. kv_used_span is the number of
// elements the fp64 copy needs (one past the furthest such element), load_kv_used copies them.
static int64_t kv_used_span(const flashc_problem *p, const int64_t st[3]) {
    int64_t n = 0;
    for (int b = 0; b < p->B; b++) {
        flashc_seq s = flashc__seq(p, b);
        for (int64_t j = 0; j < s.sk; j++) {
            int64_t end = flashc__k_off(p, st, b, &s, j) + (p->H_kv - 1) * st[2] + p->D;
            if (end > n) n = end;
        }
    }
    return n;
}

static void load_kv_used(const flashc_problem *p, const int64_t st[3], const void *src, double *dst, double mul) {
    for (int b = 0; b < p->B; b++) {
        flashc_seq s = flashc__seq(p, b);
        for (int64_t j = 0; j < s.sk; j++)
            for (int h = 0; h < p->H_kv; h++) {
                int64_t off = flashc__k_off(p, st, b, &s, j) + h * st[2];
                for (int d = 0; d < p->D; d++) dst[off + d] = (double)flashc__load(src, off + d, p->dtype) * mul;
            }
    }
}

// fp64 -> typed output, writing only the elements of this tensor: in a packed layout the gaps
// between its rows belong to other tensors. Rounds double -> float -> dtype t.
static void store_f64(const flashc_problem *p, const ref_layout *L, const double *src, void *dst, flashc_dtype t) {
    for (int64_t r = 0; r < L->n_rows; r++)
        for (int64_t h = 0; h < L->heads; h++) {
            int64_t off = head_off(p, L, r, h);
            for (int d = 0; d < p->D; d++) flashc__store(dst, off + d, t, (float)src[off + d]);
        }
}

// ------------------------------------------------------------------------------------------------
// forward

// q is (B, Sq, H, D) or (total_q, H, D) with strides q_stride; k, v are (B, Sk, H_kv, D) or
// (total_k, H_kv, D) with k_stride, v_stride, or pages / cache rows (key rows through
// flashc__k_off); o is like q with o_stride; lse is (B, H, Sq) or (H, total_q), contiguous, natural
// log; lse may be NULL. All fp64.
void flashc__ref_fwd_f64(const flashc_problem *p, const double *q, const double *k,
                         const double *v, double *o, double *lse) {
    // every output element starts as a row that sees no key: O_i = 0, L_i = +inf
    // (H * total_q covers the lse of both modes: total_q = B * Sq in batch mode)
    ref_layout Lo = q_layout(p, p->o_stride);
    fill_zero(p, &Lo, o);
    if (lse)
        for (int64_t n = 0; n < (int64_t)p->H * p->total_q; n++) lse[n] = INFINITY;

    for (int b = 0; b < p->B; b++) {
        flashc_seq s = flashc__seq(p, b);
        for (int h = 0; h < p->H; h++) {
            int h_kv = h / p->group;                          // GQA: the kv head this head reads
            double slope = (double)flashc__alibi_slope(p, b, h);
            for (int64_t i = 0; i < s.sq; i++) {
                const double *Q_i = q + flashc__row_off(p, p->q_stride, b, s.q_row0, i) + h * p->q_stride[2];
                double *O_i = o + flashc__row_off(p, p->o_stride, b, s.q_row0, i) + h * p->o_stride[2];
                int64_t diag = i + s.sk - s.sq;
                int64_t lo, hi;
                flashc__key_range(p, i, s.sq, s.sk, &lo, &hi); // keys outside [lo, hi) are masked
                if (lo >= hi) continue;                         // no key: O_i = 0, L_i = +inf stay

                // m_i = max_j S_ij, so that exp() below never overflows
                double m_i = -INFINITY;
                for (int64_t j = lo; j < hi; j++) {
                    const double *K_j = k + flashc__k_off(p, p->k_stride, b, &s, j) + h_kv * p->k_stride[2];
                    double S_ij = score(p, Q_i, K_j, slope, diag, j, NULL);
                    if (S_ij > m_i) m_i = S_ij;
                }

                // l_i = sum_j exp(S_ij - m_i);  O_i = sum_j exp(S_ij - m_i) V_j / l_i
                double l_i = 0.0;
                for (int64_t j = lo; j < hi; j++) {
                    const double *K_j = k + flashc__k_off(p, p->k_stride, b, &s, j) + h_kv * p->k_stride[2];
                    const double *V_j = v + flashc__k_off(p, p->v_stride, b, &s, j) + h_kv * p->v_stride[2];
                    double e = exp(score(p, Q_i, K_j, slope, diag, j, NULL) - m_i);
                    l_i += e;
                    for (int d = 0; d < p->D; d++) O_i[d] += e * V_j[d];
                }
                for (int d = 0; d < p->D; d++) O_i[d] /= l_i;

                // L_i = log sum_j exp(S_ij) = m_i + log(l_i)
                if (lse) lse[flashc__lse_off(p, b, h, &s, i)] = m_i + log(l_i);
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// backward

// Same layouts as the forward; dout is like o (do_stride); dq like q (dq_stride); dk, dv like k, v
// (dk_stride, dv_stride). All fp64. lse is the forward's L_i. dq, dk, dv are fully overwritten.
void flashc__ref_bwd_f64(const flashc_problem *p, const double *q, const double *k,
                         const double *v, const double *o, const double *lse,
                         const double *dout, double *dq, double *dk, double *dv) {
    // gradients accumulate, so they start at zero everywhere: keys that no query sees (masked,
    // past seqused_k, rows of no sequence) keep a zero gradient
    ref_layout Ldq = q_layout(p, p->dq_stride), Ldk = k_layout(p, p->dk_stride), Ldv = k_layout(p, p->dv_stride);
    fill_zero(p, &Ldq, dq);
    fill_zero(p, &Ldk, dk);
    fill_zero(p, &Ldv, dv);

    for (int b = 0; b < p->B; b++) {
        flashc_seq s = flashc__seq(p, b);
        for (int h = 0; h < p->H; h++) {
            int h_kv = h / p->group;       // dK, dV of kv head h_kv sum over its `group` query heads
            double slope = (double)flashc__alibi_slope(p, b, h);
            for (int64_t i = 0; i < s.sq; i++) {
                const double *Q_i  = q    + flashc__row_off(p, p->q_stride,  b, s.q_row0, i) + h * p->q_stride[2];
                const double *O_i  = o    + flashc__row_off(p, p->o_stride,  b, s.q_row0, i) + h * p->o_stride[2];
                const double *dO_i = dout + flashc__row_off(p, p->do_stride, b, s.q_row0, i) + h * p->do_stride[2];
                double *dQ_i       = dq   + flashc__row_off(p, p->dq_stride, b, s.q_row0, i) + h * p->dq_stride[2];
                double L_i = lse[flashc__lse_off(p, b, h, &s, i)];
                int64_t diag = i + s.sk - s.sq;
                int64_t lo, hi;
                flashc__key_range(p, i, s.sq, s.sk, &lo, &hi);
                // a row that saw no key has L_i = +inf, so every P_ij = 0 and it adds nothing
                if (lo >= hi || L_i == INFINITY) continue;

                // in the forward pass O_i = sum_j P_ij V_j with P_ij = softmax_j(S_ij); the softmax
                // backward needs D_i = sum_j P_ij dP_ij, which equals dO_i . O_i (FA2 Alg. 2 line 4)
                double D_i = 0.0;
                for (int d = 0; d < p->D; d++) D_i += dO_i[d] * O_i[d];

                for (int64_t j = lo; j < hi; j++) {
                    const double *K_j = k + flashc__row_off(p, p->k_stride, b, s.k_row0, j) + h_kv * p->k_stride[2];
                    const double *V_j = v + flashc__row_off(p, p->v_stride, b, s.k_row0, j) + h_kv * p->v_stride[2];
                    double *dK_j = dk + flashc__row_off(p, p->dk_stride, b, s.k_row0, j) + h_kv * p->dk_stride[2];
                    double *dV_j = dv + flashc__row_off(p, p->dv_stride, b, s.k_row0, j) + h_kv * p->dv_stride[2];

                    // recompute P_ij = exp(S_ij - L_i) from the saved log-sum-exp (line 11)
                    double t;
                    double P_ij = exp(score(p, Q_i, K_j, slope, diag, j, &t) - L_i);

                    // in the forward pass this was: O_i += P_ij V_j
                    // so now we have: dV_j += P_ij dO_i and dP_ij = dO_i . V_j (lines 12-13)
                    double dP_ij = 0.0;
                    for (int d = 0; d < p->D; d++) {
                        dV_j[d] += P_ij * dO_i[d];
                        dP_ij += dO_i[d] * V_j[d];
                    }

                    // in the forward pass this was: P_ij = exp(S_ij) / sum_j' exp(S_ij')
                    // so now we have: dS_ij = P_ij (dP_ij - D_i) (line 14)
                    double dS_ij = P_ij * (dP_ij - D_i);

                    // in the forward pass this was: S_ij = softcap tanh(raw / softcap) - alibi
                    // so now we have: draw = dS_ij (1 - tanh^2); ALiBi and the mask are constants
                    if (p->softcap > 0.0f) dS_ij *= 1.0 - t * t;

                    // in the forward pass this was: raw = scale Q_i . K_j
                    // so now we have: dQ_i += scale draw K_j, dK_j += scale draw Q_i (lines 15-16)
                    double g = (double)p->scale * dS_ij;
                    for (int d = 0; d < p->D; d++) {
                        dQ_i[d] += g * K_j[d];
                        dK_j[d] += g * Q_i[d];
                    }
                }
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// the REF backend: typed tensors in host memory -> fp64 copies -> the core above -> typed outputs

// The fp64 copies of one call, allocated together and freed together, so that a failed
// allocation returns before anything is written.
typedef struct f64_pool {
    double *buf[9];
    int n;
    int failed;
    size_t bytes;
} f64_pool;

static double *pool_alloc(f64_pool *pool, int64_t n) {
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(double);
    double *x = calloc(1, bytes);  // zeroed, so the gaps of strided copies hold no garbage
    pool->buf[pool->n++] = x;
    pool->bytes += bytes;
    if (!x) pool->failed = 1;
    return x;
}

static void pool_free(f64_pool *pool) {
    for (int i = 0; i < pool->n; i++) free(pool->buf[i]);
}

static flashc_status pool_fail(flashc_ctx *ctx, f64_pool *pool) {
    size_t bytes = pool->bytes;
    pool_free(pool);
    return flashc__fail(ctx, FLASHC_ERR_ALLOC, "ref: out of host memory for %zu bytes of fp64 copies", bytes);
}

static flashc_status ref_supports(flashc_ctx *ctx, const flashc_problem *p) {
    (void)ctx;
    (void)p;
    return FLASHC_OK; // every dtype (E4M3 forward only: flashc.c), head_dim >= 1, mask, ALiBi, softcap, varlen
}

static size_t ref_ws(flashc_ctx *ctx, const flashc_problem *p) {
    (void)ctx;
    (void)p;
    return 0; // the reference allocates its own fp64 copies per call
}

static flashc_status ref_fwd(flashc_ctx *ctx, const flashc_problem *p, const flashc_fwd_args *a) {
    ref_layout Lq = q_layout(p, p->q_stride), Lk = k_layout(p, p->k_stride);
    ref_layout Lv = k_layout(p, p->v_stride), Lo = q_layout(p, p->o_stride);

    const int rows = p->block_table || p->cache_batch_idx; // K/V rows through the table

    f64_pool pool = {0};
    double *q = pool_alloc(&pool, span(p, &Lq));
    double *k = pool_alloc(&pool, rows ? kv_used_span(p, p->k_stride) : span(p, &Lk));
    double *v = pool_alloc(&pool, rows ? kv_used_span(p, p->v_stride) : span(p, &Lv));
    double *o = pool_alloc(&pool, span(p, &Lo));
    double *lse = pool_alloc(&pool, (int64_t)p->H * p->total_q);
    if (pool.failed) return pool_fail(ctx, &pool);

    load_f64(p, &Lq, a->q, q, p->q_descale);
    if (rows) {
        load_kv_used(p, p->k_stride, a->k, k, p->k_descale);
        load_kv_used(p, p->v_stride, a->v, v, p->v_descale);
    } else {
        load_f64(p, &Lk, a->k, k, p->k_descale);
        load_f64(p, &Lv, a->v, v, p->v_descale);
    }
    flashc__ref_fwd_f64(p, q, k, v, o, lse);
    store_f64(p, &Lo, o, a->o, p->o_dtype);
    if (a->lse)
        for (int64_t n = 0; n < (int64_t)p->H * p->total_q; n++) a->lse[n] = (float)lse[n];
    flashc__unowned_rows_host(p, a->o, a->lse);

    pool_free(&pool);
    return FLASHC_OK;
}

static flashc_status ref_bwd(flashc_ctx *ctx, const flashc_problem *p, const flashc_bwd_args *a) {
    ref_layout Lq = q_layout(p, p->q_stride), Lk = k_layout(p, p->k_stride);
    ref_layout Lv = k_layout(p, p->v_stride), Lo = q_layout(p, p->o_stride);
    ref_layout Ldo = q_layout(p, p->do_stride), Ldq = q_layout(p, p->dq_stride);
    ref_layout Ldk = k_layout(p, p->dk_stride), Ldv = k_layout(p, p->dv_stride);
    int64_t n_lse = (int64_t)p->H * p->total_q;

    f64_pool pool = {0};
    double *q = pool_alloc(&pool, span(p, &Lq));
    double *k = pool_alloc(&pool, span(p, &Lk));
    double *v = pool_alloc(&pool, span(p, &Lv));
    double *o = pool_alloc(&pool, span(p, &Lo));
    double *dout = pool_alloc(&pool, span(p, &Ldo));
    double *dq = pool_alloc(&pool, span(p, &Ldq));
    double *dk = pool_alloc(&pool, span(p, &Ldk));
    double *dv = pool_alloc(&pool, span(p, &Ldv));
    double *lse = pool_alloc(&pool, n_lse);
    if (pool.failed) return pool_fail(ctx, &pool);

    load_f64(p, &Lq, a->q, q, 1);
    load_f64(p, &Lk, a->k, k, 1);
    load_f64(p, &Lv, a->v, v, 1);
    load_f64(p, &Lo, a->o, o, 1);
    load_f64(p, &Ldo, a->dout, dout, 1);
    for (int64_t n = 0; n < n_lse; n++) lse[n] = (double)a->lse[n];
    flashc__ref_bwd_f64(p, q, k, v, o, lse, dout, dq, dk, dv);
    store_f64(p, &Ldq, dq, a->dq, p->dtype);
    store_f64(p, &Ldk, dk, a->dk, p->dtype);
    store_f64(p, &Ldv, dv, a->dv, p->dtype);

    pool_free(&pool);
    return FLASHC_OK;
}

// ------------------------------------------------------------------------------------------------
// KV cache: the append (k_new rotated) and q's rotation by the shared host code in fp64, then the
// fp64 core on the cache, whose key counts c_b + seqlen_new are the problem's seqused_k_host.

static size_t ref_kvcache_ws(flashc_ctx *ctx, const flashc_problem *p, const flashc_kvcache_args *a) {
    (void)ctx;
    // the rotated q, (B, Sq, H, D) in the dtype: rounded like any stored input
    return flashc__kvcache_q_rot_bytes(p, a);
}

static flashc_status ref_fwd_kvcache(flashc_ctx *ctx, const flashc_problem *p, const flashc_kvcache_args *a) {
    // pq reads q from the rotated copy (contiguous) when rotary is on
    flashc_problem pq = *p;
    if (a->rotary_cos) {
        pq.q_stride[2] = p->D;
        pq.q_stride[1] = (int64_t)p->H * p->D;
        pq.q_stride[0] = pq.q_stride[1] * p->Sq;
    }
    ref_layout Lq = q_layout(&pq, pq.q_stride), Lo = q_layout(p, p->o_stride);

    // everything that can fail comes before the append: the call writes all or nothing
    f64_pool pool = {0};
    double *q = pool_alloc(&pool, span(&pq, &Lq));
    double *k = pool_alloc(&pool, kv_used_span(p, p->k_stride));
    double *v = pool_alloc(&pool, kv_used_span(p, p->v_stride));
    double *o = pool_alloc(&pool, span(p, &Lo));
    double *lse = pool_alloc(&pool, (int64_t)p->H * p->total_q);
    if (pool.failed) return pool_fail(ctx, &pool);

    flashc__kvcache_append_host(p, a);
    if (a->rotary_cos) flashc__kvcache_rotate_q_host(p, a, a->ws);
    load_f64(&pq, &Lq, a->rotary_cos ? a->ws : a->q, q, 1);
    load_kv_used(p, p->k_stride, a->k_cache, k, 1);
    load_kv_used(p, p->v_stride, a->v_cache, v, 1);
    flashc__ref_fwd_f64(&pq, q, k, v, o, lse);
    store_f64(p, &Lo, o, a->o, p->o_dtype);
    if (a->lse)
        for (int64_t n = 0; n < (int64_t)p->H * p->total_q; n++) a->lse[n] = (float)lse[n];

    pool_free(&pool);
    return FLASHC_OK;
}

const flashc_backend_ops flashc__ref_ops = {
    .name = "ref",
    .init = NULL,
    .fini = NULL,
    .supports = ref_supports,
    .fwd_ws = ref_ws,
    .bwd_ws = ref_ws,
    .fwd = ref_fwd,
    .bwd = ref_bwd,
    .read_i32 = NULL,
    .ws_alloc = NULL,
    .ws_free = NULL,
    .kvcache_ws = ref_kvcache_ws,
    .fwd_kvcache = ref_fwd_kvcache,
    .merge = flashc__merge_host,
};
