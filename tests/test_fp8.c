// test_fp8.c -- the e4m3 (fp8) forward: every backend that takes it against the fp64 reference.
//
// DESIGN.md §2 gives rules for fp32 and f16/bf16; for e4m3 inputs we state and check this one:
//   O    |x - ref| <= 2 * max|naive - ref| + flip + 1e-5 per element, with the max over the case
//        (FlashAttention-2's rule) and naive = a straightforward attention on the same e4m3 codes
//        and descales that, as any fp8 P V must, rounds P = exp(s - rowmax) to e4m3 before the
//        product, and O to bf16, in two forms whose larger error counts (as test_flashc's naive):
//        its scores from an fp32 sum of the q.k products, and the same scores each moved by up to
//        2^-13 scale sum_e |q_e k_e| (uniform, a fixed random stream per row). The tensor cores sum
//        fp8 products with less precision than fp32 (HOPPER-NOTES 1.1: ~1e-4 of scale sum |q k|
//        seen), and where one or two keys hold a row's weight, that moves a P past an e4m3 rounding
//        step and O by several times the naive's worst error elsewhere in the case: a random draw
//        of the second form finds such a step only by chance. So each element also gets `flip`: a
//        bound on how far its naive O moves when one key's score moves anywhere within its error
//        and the row max's (each q.k sum by up to 2^-13 sum |q k|, through the softcap), its P
//        re-rounded and l moved with it (flip_row; the largest over the keys: one key, not a sum
//        over keys, which session 36 found 1.2-16x too loose). Seen on the H200 (session 36, --fuzz
//        60 --seed 5120 --case 23: scores ~244 for a row's top two keys, 0.57 apart; the kernel
//        erred 2.7x the naive's worst) and on an H100 (session 37, --fuzz 40 --seed 6012 --case 18,
//        D 176: P = 1 and 0.199 for the top two keys, scores ~346; the kernel's O fits the second
//        key's score 0.12 lower, 1e-4 of scale sum |q k|: 3.9x the naive's worst, within 2x naive +
//        flip);
//   LSE  |x - ref| <= 1e-5 + 2^-10 * max_j |s_ij| per row (|s_ij| = scale |q_i| . |k_j|, descales in):
//        the LSE moves by at most its largest score error; HOPPER-NOTES 1.1 measured 2.4e-4 relative
//        to the result, ~2^-12: a 4x margin;
//   rows that see no key: O exactly 0 and LSE +inf; O and LSE poisoned with NaN before the call.
// The reference itself: its e4m3 path against its f32 path on the decoded, descaled values. Also
// the e4m3 codec over every code, and the validation of the descales and of what fp8 does not do
// (backward, KV cache, the cpu backend).
//
// Usage: build/test_fp8 [--backend cuda|ref] [--quick] [--seed N] [--fuzz N] [--case K] [-v]. Without
// a CUDA device the kernel cases skip with a message; --quick (for compute-sanitizer) skips the cases
// of more than QUICK_COST multiply-adds per score pass; --fuzz N runs N random cases from --seed
// (fuzz_case) instead of the table; --case K runs only case K (0-based) of the table or of the
// fuzz draws, to reproduce one failure. The last line is "N passed, M failed".
#include "test_common.h"

#define FP8_O_FACTOR 2.0
#define FP8_SLACK 1e-5
#define FP8_LSE_REL 0x1p-10
#define FP8_S_REL 0x1p-13 // the naive's second form: its score error, relative to scale sum |q k|

typedef struct fcase {
    int B, H, Hkv, Sq, Sk, D;
    int causal, win, wl, wr;
    float softcap;
    int alibi;
    int varlen;              // ragged lengths lq / lk (Sq, Sk are their maxima)
    int lq[4], lk[4];
    int padded;              // q, k, v rows strided by H (D + 16) instead of H D
    float dq, dk, dv;        // descales (0 = default 1)
} fcase;

static void case_name(char *s, size_t n, const char *be, const fcase *c) {
    int k = snprintf(s, n, "fwd %s e4m3 B=%d H=%d/%d Sq=%d Sk=%d D=%d", be, c->B, c->H, c->Hkv, c->Sq, c->Sk, c->D);
    if (c->causal) k += snprintf(s + k, n - k, " causal");
    if (c->win) k += snprintf(s + k, n - k, " window=(%d,%d)", c->wl, c->wr);
    if (c->softcap > 0) k += snprintf(s + k, n - k, " softcap=%g", c->softcap);
    if (c->alibi) k += snprintf(s + k, n - k, " alibi");
    if (c->varlen) k += snprintf(s + k, n - k, " varlen");
    if (c->padded) k += snprintf(s + k, n - k, " padded");
    snprintf(s + k, n - k, " descale=(%g,%g,%g)", c->dq, c->dk, c->dv);
}

// ------------------------------------------------------------------------------------------------
// one case's data: e4m3 codes, the desc, the fp64 reference and the naive fp8 yardstick

typedef struct fdata {
    flashc_attn_desc d;          // host pointers (cu_seqlens, alibi)
    int32_t cu_q[5], cu_k[5];
    float slopes[8];
    int64_t tq, tk;              // rows of q / k
    int64_t nq, nk, no;          // elements of q, k / v (with padding), o
    uint8_t *q, *k, *v;          // e4m3 codes
    double *ref_o, *ref_lse;     // (rows, H, D), (H, total_q) or (B, H, Sq)
    float *nv_o;                 // naive, bf16-rounded
    float *nv2_o;                // the naive's second form (scores with the tensor cores' error), bf16-rounded
    float *flip;                 // per element: a bound on what one key's score error moves the naive's O by (flip_row)
    double *lse_tol;             // per LSE entry
} fdata;

static uint8_t e4m3_rand(tc_rng *r, double amp) { return flashc__f32_to_e4m3((float)(amp * tc_normal(r))); }

// the keys query i of a sequence (sq, sk) sees, bottom-right aligned (include/flashc.h)
static int sees(const flashc_attn_desc *d, int i, int j, int sq, int sk) {
    const int64_t diag = (int64_t)i + sk - sq;
    const int wl = d->use_window ? d->window_left : -1, wr = d->causal ? 0 : d->use_window ? d->window_right : -1;
    return (wl < 0 || j >= diag - wl) && (wr < 0 || j <= diag + wr);
}

// score s_ij from the fp32 sum of q.k products: scale and descales, softcap, ALiBi, the mask
static float score(const fcase *c, const fdata *F, const flashc_problem *p, float qk, int h, int i, int j, flashc_seq sb) {
    float sc = qk * p->scale * p->q_descale * p->k_descale;
    if (c->softcap > 0) sc = c->softcap * tanhf(sc / c->softcap);
    if (c->alibi) sc -= F->slopes[h] * fabsf((float)((int64_t)i + sb.sk - sb.sq - j));
    return sees(&F->d, i, j, sb.sq, sb.sk) ? sc : -INFINITY;
}

// O_i of the naive: P = exp(s - rowmax) rounded to e4m3 (pr), l the sum of the unrounded P
// (returned), num[e] = sum_j pr[j] v_j[e] (decoded codes, kept for flip_row), O = num v_descale / l
// rounded to bf16
static float naive_row(const fcase *c, const fdata *F, const flashc_problem *p, const float *s, float *pr,
                       float *num, int b, int hk, flashc_seq sb, float *o) {
    float m = -INFINITY, l = 0.f;
    for (int j = 0; j < sb.sk; j++) m = fmaxf(m, s[j]);
    for (int j = 0; j < sb.sk; j++) {
        const float e = m == -INFINITY ? 0.f : expf(s[j] - m);
        l += e;
        pr[j] = flashc__e4m3_to_f32(flashc__f32_to_e4m3(e));
    }
    for (int e = 0; e < c->D; e++) num[e] = 0.f;
    for (int j = 0; j < sb.sk; j++) { // (each num[e] sums its keys in order j = 0, 1, ...)
        const uint8_t *v_j = F->v + flashc__row_off(p, p->v_stride, b, sb.k_row0, j) + hk * p->v_stride[2];
        for (int e = 0; e < c->D; e++) num[e] += pr[j] * flashc__e4m3_to_f32(v_j[e]);
    }
    for (int e = 0; e < c->D; e++) o[e] = l > 0 ? tc_round(num[e] * p->v_descale / l, FLASHC_DTYPE_BF16) : 0.f;
    return l;
}

// The `flip` allowance of one row (see the rule at the top). Key j's score may move against the
// row max's by -(dn[j] + up[max]) .. +(up[j] + dn[max]) (up / dn: how far score() moves when the q.k
// sum moves by +/- 2^-13 sum |q k|: softcap's slope and ALiBi's shift included), so its P moves
// over [lo, hi] and its rounded value over the e4m3 codes between. With dp = the rounded P's change
// and dl = l's (the unrounded P's), O_e changes by (dp (v_je - O_e) + O_e (dp - dl)) / (l + dl),
// bounded over the whole interval by (A |v_je - O_e| + B |O_e|) / (l + lo - P), A = max |dp|, B =
// max |dp - dl| (at the ends of each code's part of [lo, hi]: dp - dl is monotone between); flip[e] =
// the largest such bound over the keys. pr, num and l: naive_row's on the same scores. Keys whose P
// stays below 2^-10 are left out (they round to 0 either way; l moves < 2^-10). A key that would
// overtake the max has its P rounded on [1, 2)'s grid, one step coarser than the old max's below 1
// would be: slightly generous there.
static void flip_row(const fcase *c, const fdata *F, const flashc_problem *p, const float *s, const float *up,
                     const float *dn, const float *pr, const float *num, double l, int b, int hk, flashc_seq sb,
                     float *flip) {
    float m = -INFINITY;
    int jm = -1;
    for (int e = 0; e < c->D; e++) flip[e] = 0.f;
    for (int j = 0; j < sb.sk; j++)
        if (s[j] > m) m = s[j], jm = j;
    if (jm < 0) return; // no key: O is exactly 0, checked apart
    for (int j = 0; j < sb.sk; j++) {
        if (j == jm || s[j] == -INFINITY) continue;
        const double P = exp((double)s[j] - m);
        const double lo = P * exp(-((double)dn[j] + up[jm])), hi = P * exp((double)up[j] + dn[jm]);
        if (hi < 0x1p-10) continue;
        // the codes from lo's to hi's (positive e4m3 codes are ordered as their values), each over
        // its part of [lo, hi]: between the midpoints to its neighbours
        const int k0 = flashc__f32_to_e4m3((float)lo), k1 = flashc__f32_to_e4m3((float)hi);
        double A = 0, B = 0;
        for (int k = k0; k <= k1; k++) {
            const double v = flashc__e4m3_to_f32((uint8_t)k), dp = v - pr[j];
            const double below = k > 0 ? 0.5 * (v + flashc__e4m3_to_f32((uint8_t)(k - 1))) : 0.0;
            const double above = k < 0x7e ? 0.5 * (v + flashc__e4m3_to_f32((uint8_t)(k + 1))) : INFINITY;
            const double x0 = fmax(lo, below), x1 = fmin(hi, above);
            A = fmax(A, fabs(dp));
            B = fmax(B, fmax(fabs(dp - (x0 - P)), fabs(dp - (x1 - P))));
        }
        const double lmin = l + lo - P; // > 0: l >= 1 (the max key's P) and lo >= 0
        const uint8_t *v_j = F->v + flashc__row_off(p, p->v_stride, b, sb.k_row0, j) + hk * p->v_stride[2];
        for (int e2 = 0; e2 < c->D; e2++) {
            const double o = num[e2] / l;
            const double f = (A * fabs(flashc__e4m3_to_f32(v_j[e2]) - o) + B * fabs(o)) / lmin;
            flip[e2] = fmaxf(flip[e2], (float)(f * p->v_descale));
        }
    }
}

static void fdata_build(fdata *F, const fcase *c, tc_rng *rng) {
    memset(F, 0, sizeof *F);
    flashc_attn_desc *d = &F->d;
    d->batch = c->B, d->heads = c->H, d->heads_kv = c->Hkv, d->head_dim = c->D, d->dtype = FLASHC_DTYPE_E4M3;
    d->seqlen_q = c->Sq, d->seqlen_k = c->Sk, d->causal = c->causal;
    d->use_window = c->win, d->window_left = c->wl, d->window_right = c->wr;
    d->softcap = c->softcap;
    d->q_descale = c->dq, d->k_descale = c->dk, d->v_descale = c->dv;
    if (c->alibi) {
        for (int h = 0; h < c->H; h++) F->slopes[h] = 0.5f / (float)(h + 1);
        d->alibi_slopes = F->slopes;
    }
    if (c->varlen) {
        for (int b = 0; b < c->B; b++) F->cu_q[b + 1] = F->cu_q[b] + c->lq[b], F->cu_k[b + 1] = F->cu_k[b] + c->lk[b];
        d->cu_seqlens_q = F->cu_q, d->cu_seqlens_k = F->cu_k;
        F->tq = F->cu_q[c->B], F->tk = F->cu_k[c->B];
    } else {
        F->tq = (int64_t)c->B * c->Sq, F->tk = (int64_t)c->B * c->Sk;
    }
    const int64_t rq = (int64_t)c->H * (c->D + (c->padded ? 16 : 0)), rk = (int64_t)c->Hkv * (c->D + (c->padded ? 16 : 0));
    const int64_t hq = c->D + (c->padded ? 16 : 0);
    if (c->padded) {
        const int64_t sq[3] = {(int64_t)c->Sq * rq, rq, hq}, sk[3] = {(int64_t)c->Sk * rk, rk, hq};
        memcpy(d->q_stride, sq, sizeof sq), memcpy(d->k_stride, sk, sizeof sk), memcpy(d->v_stride, sk, sizeof sk);
    }
    flashc_fill_contiguous_strides(d);
    F->nq = F->tq * rq, F->nk = F->tk * rk, F->no = F->tq * c->H * c->D;
    F->q = tc_alloc((size_t)F->nq + 1), F->k = tc_alloc((size_t)F->nk + 1), F->v = tc_alloc((size_t)F->nk + 1);
    for (int64_t i = 0; i < F->nq; i++) F->q[i] = e4m3_rand(rng, 3.0);
    for (int64_t i = 0; i < F->nk; i++) F->k[i] = e4m3_rand(rng, 3.0);
    for (int64_t i = 0; i < F->nk; i++) F->v[i] = e4m3_rand(rng, 2.0);

    // the reference: flashc__ref_fwd_f64 on the decoded codes times their descales
    flashc_ctx *ref = NULL;
    flashc_problem p;
    if (flashc_ctx_create(&ref, FLASHC_BACKEND_REF, 1) != FLASHC_OK || flashc__resolve(ref, d, &p, FLASHC__FOR_FWD) != FLASHC_OK) {
        fprintf(stderr, "test_fp8: cannot resolve the case on the ref backend: %s\n", ref ? flashc_ctx_last_error(ref) : "");
        exit(2);
    }
    double *q = tc_alloc(sizeof(double) * (size_t)F->nq), *k = tc_alloc(sizeof(double) * (size_t)F->nk);
    double *v = tc_alloc(sizeof(double) * (size_t)F->nk);
    for (int64_t i = 0; i < F->nq; i++) q[i] = (double)flashc__e4m3_to_f32(F->q[i]) * p.q_descale;
    for (int64_t i = 0; i < F->nk; i++) k[i] = (double)flashc__e4m3_to_f32(F->k[i]) * p.k_descale;
    for (int64_t i = 0; i < F->nk; i++) v[i] = (double)flashc__e4m3_to_f32(F->v[i]) * p.v_descale;
    const int64_t n_lse = (int64_t)c->H * F->tq;
    F->ref_o = tc_alloc(sizeof(double) * (size_t)F->no), F->ref_lse = tc_alloc(sizeof(double) * (size_t)n_lse);
    F->nv_o = tc_alloc(sizeof(float) * (size_t)F->no), F->nv2_o = tc_alloc(sizeof(float) * (size_t)F->no);
    F->flip = tc_alloc(sizeof(float) * (size_t)F->no);
    F->lse_tol = tc_alloc(sizeof(double) * (size_t)n_lse);
    flashc__ref_fwd_f64(&p, q, k, v, F->ref_o, F->ref_lse);

    // the naive fp8 attention in its two forms, row by row, and the LSE tolerance
    float *s1 = tc_alloc(sizeof(float) * (size_t)(c->Sk + 1)), *s2 = tc_alloc(sizeof(float) * (size_t)(c->Sk + 1));
    float *pr = tc_alloc(sizeof(float) * (size_t)(c->Sk + 1)), *up = tc_alloc(sizeof(float) * (size_t)(c->Sk + 1));
    float *dn = tc_alloc(sizeof(float) * (size_t)(c->Sk + 1));
    float *num = tc_alloc(sizeof(float) * (size_t)c->D);
    for (int b = 0; b < c->B; b++) {
        const flashc_seq sb = flashc__seq(&p, b);
        for (int h = 0; h < c->H; h++) {
            const int hk = h / (c->H / c->Hkv);
            for (int i = 0; i < sb.sq; i++) {
                const int64_t qo = flashc__row_off(&p, p.q_stride, b, sb.q_row0, i) + h * p.q_stride[2];
                const int64_t oo = (sb.q_row0 + (c->varlen ? 0 : (int64_t)b * c->Sq) + i) * c->H * c->D + (int64_t)h * c->D;
                const int64_t lo = c->varlen ? (int64_t)h * F->tq + sb.q_row0 + i : ((int64_t)b * c->H + h) * c->Sq + i;
                double smax = 0;
                tc_rng su = tc_rng_make((uint64_t)lo, 0x5c0e); // the second form's score errors, a stream per row
                for (int j = 0; j < sb.sk; j++) {
                    const int64_t ko = flashc__row_off(&p, p.k_stride, b, sb.k_row0, j) + hk * p.k_stride[2];
                    float acc = 0.f, aabs = 0.f;
                    for (int e = 0; e < c->D; e++) {
                        const float x = flashc__e4m3_to_f32(F->q[qo + e]) * flashc__e4m3_to_f32(F->k[ko + e]);
                        acc += x, aabs += fabsf(x);
                    }
                    const float u = (float)tc_uniform(&su);
                    s1[j] = score(c, F, &p, acc, h, i, j, sb);
                    s2[j] = score(c, F, &p, acc + (2 * u - 1) * FP8_S_REL * aabs, h, i, j, sb);
                    up[j] = score(c, F, &p, acc + FP8_S_REL * aabs, h, i, j, sb) - s1[j]; // (-inf - -inf: NaN, unused)
                    dn[j] = s1[j] - score(c, F, &p, acc - FP8_S_REL * aabs, h, i, j, sb);
                    if (s1[j] > -INFINITY) smax = fmax(smax, (double)aabs * p.scale * p.q_descale * p.k_descale);
                }
                const float l1 = naive_row(c, F, &p, s1, pr, num, b, hk, sb, F->nv_o + oo);
                flip_row(c, F, &p, s1, up, dn, pr, num, l1, b, hk, sb, F->flip + oo); // (before pr, num are reused)
                naive_row(c, F, &p, s2, pr, num, b, hk, sb, F->nv2_o + oo);
                F->lse_tol[lo] = 1e-5 + FP8_LSE_REL * smax;
            }
        }
    }
    free(s1), free(s2), free(pr), free(up), free(dn), free(num), free(q), free(k), free(v);
    flashc_ctx_free(ref);
}

static void fdata_free(fdata *F) {
    free(F->q), free(F->k), free(F->v), free(F->ref_o), free(F->ref_lse), free(F->nv_o), free(F->nv2_o), free(F->flip), free(F->lse_tol);
}

// ------------------------------------------------------------------------------------------------
// a backend's run of one case: device copies, poisoned outputs, the checks

// ws_off 0: the ctx's own workspace; else the caller's, ws_off bytes into its allocation (64: the
// least alignment flashc.h promises to take), poisoned, and those ws_off bytes must stay untouched.
static void run_case(flashc_ctx *ctx, const char *be, const fcase *c, const fdata *F, size_t ws_off) {
    char name[256];
    case_name(name, sizeof name, be, c);
    if (ws_off) snprintf(name + strlen(name), sizeof name - strlen(name), " ws+%zu", ws_off);
    tc_running(name);
    const int64_t n_lse = (int64_t)c->H * F->tq;
    uint16_t *o = tc_alloc(2 * (size_t)F->no);
    float *lse = tc_alloc(sizeof(float) * (size_t)n_lse);
    for (int64_t i = 0; i < F->no; i++) o[i] = 0x7fda; // bf16 NaN
    for (int64_t i = 0; i < n_lse; i++) lse[i] = NAN;
    flashc_attn_desc d = F->d;
    void *dq = tc_dev_put(ctx, F->q, (size_t)F->nq), *dk = tc_dev_put(ctx, F->k, (size_t)F->nk), *dv = tc_dev_put(ctx, F->v, (size_t)F->nk);
    void *dO = tc_dev_put(ctx, o, 2 * (size_t)F->no), *dl = tc_dev_put(ctx, lse, sizeof(float) * (size_t)n_lse);
    void *dcq = NULL, *dck = NULL, *dsl = NULL;
    if (c->varlen) d.cu_seqlens_q = dcq = tc_dev_put(ctx, F->cu_q, sizeof F->cu_q), d.cu_seqlens_k = dck = tc_dev_put(ctx, F->cu_k, sizeof F->cu_k);
    if (c->alibi) d.alibi_slopes = dsl = tc_dev_put(ctx, F->slopes, sizeof F->slopes);
    const size_t ws_size = ws_off ? flashc_fwd_workspace_size(ctx, &d) : 0;
    uint8_t *ws_host = NULL;
    void *dws = NULL;
    if (ws_off) {
        ws_host = tc_alloc(ws_size + ws_off);
        memset(ws_host, 0xFF, ws_size + ws_off);
        dws = tc_dev_put(ctx, ws_host, ws_size + ws_off);
    }
    flashc_status st = flashc_fwd(ctx, &d, dq, dk, dv, dO, dl, dws ? (char *)dws + ws_off : NULL, ws_size, NULL);
    int64_t n_before = 0; // bytes before the caller's workspace that the call wrote
    if (st == FLASHC_OK && ws_off) {
        tc_dev_get(ctx, ws_host, dws, ws_off);
        for (size_t i = 0; i < ws_off; i++) n_before += ws_host[i] != 0xFF;
    }
    if (st != FLASHC_OK) {
        tc_fail("%s: flashc_fwd = %s: %s", name, flashc_status_string(st), flashc_ctx_last_error(ctx));
    } else {
        tc_dev_get(ctx, o, dO, 2 * (size_t)F->no);
        tc_dev_get(ctx, lse, dl, sizeof(float) * (size_t)n_lse);
        double err = 0, nerr1 = 0, nerr2 = 0, excess = -INFINITY; // the naive's two forms
        int64_t n_nan = 0, worst = 0, n_dead = 0, n_lse_bad = 0, worst_lse = -1;
        for (int64_t i = 0; i < F->no; i++)
            nerr1 = fmax(nerr1, fabs(F->nv_o[i] - F->ref_o[i])), nerr2 = fmax(nerr2, fabs(F->nv2_o[i] - F->ref_o[i]));
        const double nerr = fmax(nerr1, nerr2), bound = FP8_O_FACTOR * nerr + FP8_SLACK;
        for (int64_t i = 0; i < F->no; i++) { // worst: the element furthest past (or least within) its bound
            const double x = flashc__bf16_to_f32(o[i]);
            if (x != x) { n_nan++; continue; }
            const double e = fabs(x - F->ref_o[i]);
            err = fmax(err, e);
            if (e - bound - F->flip[i] > excess) excess = e - bound - F->flip[i], worst = i;
        }
        for (int64_t i = 0; i < n_lse; i++) {
            const double x = lse[i], r = F->ref_lse[i];
            if (isinf(r)) { // a row that sees no key: O exactly 0 (checked below), LSE +inf
                if (!(isinf(x) && x > 0)) n_dead++;
                continue;
            }
            const double e = fabs(x - r);
            if (!(e <= F->lse_tol[i])) {
                n_lse_bad++;
                if (worst_lse < 0) worst_lse = i;
            }
        }
        for (int64_t r = 0; r < F->tq; r++) // rows that see no key: O exactly 0 (+0 or -0)
            for (int h = 0; h < c->H; h++) {
                const int64_t li = c->varlen ? h * F->tq + r : ((r / c->Sq) * c->H + h) * c->Sq + r % c->Sq;
                if (!isinf(F->ref_lse[li])) continue;
                for (int e = 0; e < c->D; e++)
                    if (o[(r * c->H + h) * c->D + e] & 0x7fff) n_dead++;
            }
        // the element furthest past its bound, or closest to it (none when the case has no output)
        const double we = F->no ? fabs(flashc__bf16_to_f32(o[worst]) - F->ref_o[worst]) : 0;
        const double wf = F->no ? F->flip[worst] : 0, wx = F->no ? flashc__bf16_to_f32(o[worst]) : 0;
        const double wr = F->no ? F->ref_o[worst] : 0, wn1 = F->no ? F->nv_o[worst] : 0, wn2 = F->no ? F->nv2_o[worst] : 0;
        if (n_nan || n_dead || n_lse_bad || n_before || excess > 0)
            tc_fail("%s: O err %.3e %s its bound %.3e = 2 x naive %.3e + flip %.3e + 1e-5 at row %lld head %lld elem "
                    "%lld (%.4f, ref %.4f, naive %.4f / %.4f; case max err %.3e), %lld unwritten, %lld no-key rows "
                    "wrong, %lld LSE beyond tolerance (first at %lld: %.6f vs ref %.6f, tol %.2e), %lld bytes written "
                    "before the workspace", name, we, excess > 0 ? "past" : "within", bound + wf, nerr, wf,
                    (long long)(worst / ((int64_t)c->H * c->D)), (long long)(worst / c->D % c->H),
                    (long long)(worst % c->D), wx, wr, wn1, wn2, err, (long long)n_nan, (long long)n_dead,
                    (long long)n_lse_bad, (long long)worst_lse, worst_lse >= 0 ? lse[worst_lse] : 0.0,
                    worst_lse >= 0 ? F->ref_lse[worst_lse] : 0.0, worst_lse >= 0 ? F->lse_tol[worst_lse] : 0.0,
                    (long long)n_before);
        else // ratio: the case's max error over the naive's (the rule without flip needs <= 2)
            tc_pass("%s: O max err %.3e (naive %.3e: forms %.3e / %.3e, ratio %.2f; closest to its bound: %.3e of "
                    "%.3e, flip %.3e)", name, err, nerr, nerr1, nerr2, nerr > 0 ? err / nerr : 0.0, we, bound + wf, wf);
    }
    tc_dev_free(ctx, F->q, dq), tc_dev_free(ctx, F->k, dk), tc_dev_free(ctx, F->v, dv), tc_dev_free(ctx, o, dO), tc_dev_free(ctx, lse, dl);
    tc_dev_free(ctx, F->cu_q, dcq), tc_dev_free(ctx, F->cu_k, dck), tc_dev_free(ctx, F->slopes, dsl);
    tc_dev_free(ctx, ws_host, dws);
    free(o), free(lse), free(ws_host);
}

// ------------------------------------------------------------------------------------------------
// the cases: awkward sizes, GQA, every mask and score option, varlen with empty sequences, rows
// that see no key, padded strides, descales other than 1; head dims 16 .. 256 (the kernels are
// compiled for 128 and 256: smaller dims run zero-padded)

static const fcase CASES[] = {
    // B H Hkv  Sq    Sk    D  causal win wl wr softcap alibi varlen lq lk padded dq dk dv
    {1, 1, 1, 1, 1, 128, 0, 0, 0, 0, 0, 0, 0, {0}, {0}, 0, 0, 0, 0},
    {1, 1, 1, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, {0}, {0}, 0, 0.5f, 2.f, 1.f},
    {1, 2, 1, 17, 15, 64, 1, 0, 0, 0, 0, 0, 0, {0}, {0}, 0, 0, 0, 0}, // causal, Sq > Sk: rows 0, 1 see no key
    {2, 4, 2, 127, 129, 128, 0, 0, 0, 0, 0, 0, 0, {0}, {0}, 0, 0.25f, 0.5f, 2.f},
    {1, 3, 1, 129, 127, 96, 1, 0, 0, 0, 0, 0, 0, {0}, {0}, 0, 0, 0, 0},
    {2, 2, 2, 256, 1000, 256, 0, 0, 0, 0, 0, 0, 0, {0}, {0}, 0, 1.f, 0.125f, 4.f},
    {1, 2, 1, 100, 100, 208, 1, 0, 0, 0, 0, 0, 0, {0}, {0}, 0, 0, 0, 0},
    {1, 8, 2, 1024, 1024, 128, 1, 0, 0, 0, 0, 0, 0, {0}, {0}, 0, 0.5f, 0.5f, 0.5f},
    {1, 2, 2, 300, 300, 128, 0, 1, 64, 16, 0, 0, 0, {0}, {0}, 0, 0, 0, 0},
    {1, 4, 4, 200, 333, 128, 0, 0, 0, 0, 3.f, 0, 0, {0}, {0}, 0, 0, 0, 0},
    {1, 4, 2, 200, 200, 64, 1, 0, 0, 0, 0, 1, 0, {0}, {0}, 0, 0, 0, 0},
    {3, 4, 2, 129, 200, 128, 1, 0, 0, 0, 0, 0, 1, {17, 0, 129}, {15, 200, 64}, 0, 0, 0, 0},
    {2, 2, 1, 65, 190, 128, 0, 0, 0, 0, 0, 0, 0, {0}, {0}, 1, 0, 0, 0},
    {1, 2, 1, 2048, 2048, 128, 0, 0, 0, 0, 0, 0, 0, {0}, {0}, 0, 2.f, 0.25f, 0.5f},
    {1, 2, 1, 700, 1500, 256, 1, 0, 0, 0, 0, 0, 0, {0}, {0}, 0, 0, 0, 0},
    // rows that see >= 2048 keys: D = 128 runs its 192-key tile (flashc_cuda_tune.h); short Sq
    // keeps the fp64 reference cheap
    {1, 4, 2, 65, 2100, 128, 1, 0, 0, 0, 0, 0, 0, {0}, {0}, 0, 0.5f, 1.f, 2.f},
    {1, 2, 1, 100, 2500, 128, 0, 1, 1000, -1, 0, 0, 0, {0}, {0}, 0, 0, 0, 0},
    {1, 2, 2, 33, 2200, 128, 0, 0, 0, 0, 5.f, 0, 0, {0}, {0}, 0, 0, 0, 0},
    {1, 4, 2, 40, 2049, 128, 1, 0, 0, 0, 0, 1, 0, {0}, {0}, 1, 0, 0, 0},
    {3, 2, 1, 129, 2300, 96, 1, 0, 0, 0, 0, 0, 1, {17, 0, 129}, {2300, 5, 2111}, 0, 0, 0, 0},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))
#define QUICK_COST 2e8 // keeps every feature, both kernels' head dims and the 192-key tile

// A random case (--fuzz): every field drawn, head dims every multiple of 16 to 256 (what the e4m3
// kernels take: k32 steps of two 16-wide halves), keys up to 2600 (the 192-key tile from 2048), at
// most FUZZ_COST multiply-adds per score pass.
#define FUZZ_COST 1e8
static fcase fuzz_case(tc_rng *r) {
    static const int HH[][2] = {{1, 1}, {2, 1}, {2, 2}, {4, 2}, {6, 3}, {8, 1}};
    static const float DESC[] = {0.f, 0.f, 0.125f, 0.5f, 1.f, 2.f, 4.f};
    for (;;) {
        fcase c;
        memset(&c, 0, sizeof c);
        const int hh = tc_int(r, 6);
        c.B = 1 + tc_int(r, 3), c.H = HH[hh][0], c.Hkv = HH[hh][1];
        c.Sq = 1 + tc_int(r, 400);
        c.Sk = 1 + tc_int(r, tc_int(r, 4) ? 400 : 2600);
        c.D = 16 * (1 + tc_int(r, 16));
        c.causal = tc_int(r, 2);
        if (tc_int(r, 4) == 0) c.win = 1, c.wl = tc_int(r, 3) ? tc_int(r, 300) : -1, c.wr = tc_int(r, 2) ? tc_int(r, 30) : -1;
        if (tc_int(r, 5) == 0) c.softcap = (float)(1 + tc_int(r, 10));
        if (tc_int(r, 5) == 0) c.alibi = 1;
        if (tc_int(r, 4) == 0) {
            c.varlen = 1;
            c.Sq = c.Sk = 0;
            for (int b = 0; b < c.B; b++) {
                const int lq = tc_int(r, 200), empty = tc_int(r, 5) == 0; // (one draw after the other)
                c.lq[b] = empty ? 0 : lq, c.lk[b] = tc_int(r, 600);
                if (c.lq[b] > c.Sq) c.Sq = c.lq[b];
                if (c.lk[b] > c.Sk) c.Sk = c.lk[b];
            }
        }
        c.padded = tc_int(r, 4) == 0;
        c.dq = DESC[tc_int(r, 7)], c.dk = DESC[tc_int(r, 7)], c.dv = DESC[tc_int(r, 7)];
        if ((double)c.B * c.H * c.Sq * c.Sk * c.D <= FUZZ_COST) return c;
    }
}

// ------------------------------------------------------------------------------------------------
// the codec, the validation, the reference's e4m3 path

static void check_codec(void) {
    int bad = 0;
    for (int x = 0; x < 256; x++) { // every code decodes and encodes back (NaN aside)
        const float f = flashc__e4m3_to_f32((uint8_t)x);
        if (f == f && flashc__f32_to_e4m3(f) != x) bad++;
    }
    for (int x = 0; x < 126; x++) { // midpoints round to even, above them up; 448 is the largest
        const float a = flashc__e4m3_to_f32((uint8_t)x), b = flashc__e4m3_to_f32((uint8_t)(x + 1));
        if (flashc__f32_to_e4m3(0.5f * (a + b)) != ((x & 1) ? x + 1 : x)) bad++;
        if (flashc__f32_to_e4m3(a + 0.51f * (b - a)) != x + 1) bad++;
    }
    if (flashc__e4m3_to_f32(0x7e) != 448.f || flashc__f32_to_e4m3(1e6f) != 0x7e || flashc__f32_to_e4m3(-1e6f) != 0xfe) bad++;
    if (bad) tc_fail("e4m3 codec: %d wrong", bad);
    else tc_pass("e4m3 codec: 254 codes round-trip, ties to even, saturation at 448");
}

static void expect(flashc_status got, flashc_status want, const char *name, flashc_ctx *ctx, const char *what) {
    const char *msg = flashc_ctx_last_error(ctx);
    if (got == want && (want == FLASHC_OK || tc_names(msg, name))) tc_pass("validation: %s", what);
    else tc_fail("validation: %s: got %s \"%s\", want %s naming %s", what, flashc_status_string(got), msg,
                 flashc_status_string(want), name);
}

static void check_validation(void) {
    flashc_ctx *ref = NULL, *cpu = NULL;
    if (flashc_ctx_create(&ref, FLASHC_BACKEND_REF, 1) != FLASHC_OK || flashc_ctx_create(&cpu, FLASHC_BACKEND_CPU, 1) != FLASHC_OK) {
        tc_fail("validation: cannot create the ref / cpu contexts");
        return;
    }
    enum { B = 1, S = 8, H = 2, D = 16 };
    uint8_t q[B * S * H * D] = {0}, k[B * S * H * D] = {0}, v[B * S * H * D] = {0};
    uint16_t o[B * S * H * D], g[B * S * H * D];
    float lse[B * H * S];
    flashc_attn_desc d0 = {0};
    d0.batch = B, d0.seqlen_q = S, d0.seqlen_k = S, d0.heads = H, d0.heads_kv = H, d0.head_dim = D;
    d0.dtype = FLASHC_DTYPE_E4M3;
    flashc_attn_desc d = d0;
    expect(flashc_supports(ref, &d), FLASHC_OK, "", ref, "ref supports an e4m3 forward");
    expect(flashc_fwd(ref, &d, q, k, v, o, lse, NULL, 0, NULL), FLASHC_OK, "", ref, "ref runs an e4m3 forward");
    d.q_descale = -1.f;
    expect(flashc_fwd(ref, &d, q, k, v, o, lse, NULL, 0, NULL), FLASHC_ERR_INVALID_ARG, "q_descale", ref, "q_descale < 0");
    d = d0, d.k_descale = NAN;
    expect(flashc_fwd(ref, &d, q, k, v, o, lse, NULL, 0, NULL), FLASHC_ERR_INVALID_ARG, "k_descale", ref, "k_descale NaN");
    d = d0, d.dtype = FLASHC_DTYPE_BF16, d.v_descale = 2.f;
    expect(flashc_fwd(ref, &d, q, k, v, o, lse, NULL, 0, NULL), FLASHC_ERR_INVALID_ARG, "v_descale", ref,
           "a descale with a bf16 problem");
    d = d0, d.reserved32 = 1;
    expect(flashc_fwd(ref, &d, q, k, v, o, lse, NULL, 0, NULL), FLASHC_ERR_INVALID_ARG, "reserved32", ref, "reserved32 != 0");
    d = d0;
    expect(flashc_bwd(ref, &d, q, k, v, o, lse, o, g, g + 1, g + 2, NULL, 0, NULL), FLASHC_ERR_UNSUPPORTED, "dtype", ref,
           "an e4m3 backward");
    expect(flashc_fwd(cpu, &d, q, k, v, o, lse, NULL, 0, NULL), FLASHC_ERR_UNSUPPORTED, "dtype", cpu, "the cpu backend");
    flashc_kvcache_desc kv = {0};
    expect(flashc_fwd_kvcache(ref, &d, &kv, q, k, v, NULL, NULL, o, lse, NULL, 0, NULL), FLASHC_ERR_UNSUPPORTED, "dtype",
           ref, "an e4m3 KV cache");
    flashc_ctx_free(ref), flashc_ctx_free(cpu);
}

// The ref backend's e4m3 path (decode, descale, bf16 out) against its f32 path on the decoded,
// descaled values: O within bf16 rounding, LSE within fp32 rounding.
static void check_ref_path(const fcase *c, const fdata *F) {
    char name[256];
    case_name(name, sizeof name, "ref-vs-f32", c);
    flashc_ctx *ref = NULL;
    if (flashc_ctx_create(&ref, FLASHC_BACKEND_REF, 1) != FLASHC_OK) return tc_fail("%s: no ref ctx", name);
    const int64_t n_lse = (int64_t)c->H * F->tq;
    float *q = tc_alloc(4 * (size_t)F->nq), *k = tc_alloc(4 * (size_t)F->nk), *v = tc_alloc(4 * (size_t)F->nk);
    float *o32 = tc_alloc(4 * (size_t)F->no), *l32 = tc_alloc(4 * (size_t)n_lse), *l8 = tc_alloc(4 * (size_t)n_lse);
    uint16_t *o8 = tc_alloc(2 * (size_t)F->no);
    const float dq = c->dq ? c->dq : 1.f, dk = c->dk ? c->dk : 1.f, dv = c->dv ? c->dv : 1.f;
    for (int64_t i = 0; i < F->nq; i++) q[i] = flashc__e4m3_to_f32(F->q[i]) * dq;
    for (int64_t i = 0; i < F->nk; i++) k[i] = flashc__e4m3_to_f32(F->k[i]) * dk, v[i] = flashc__e4m3_to_f32(F->v[i]) * dv;
    flashc_attn_desc d32 = F->d;
    d32.dtype = FLASHC_DTYPE_F32, d32.q_descale = d32.k_descale = d32.v_descale = 0;
    memset(d32.o_stride, 0, sizeof d32.o_stride);
    flashc_status s1 = flashc_fwd(ref, &F->d, F->q, F->k, F->v, o8, l8, NULL, 0, NULL);
    flashc_status s2 = flashc_fwd(ref, &d32, q, k, v, o32, l32, NULL, 0, NULL);
    double worst = 0, worst_l = 0;
    for (int64_t i = 0; i < F->no; i++)
        worst = fmax(worst, fabs(flashc__bf16_to_f32(o8[i]) - o32[i]) / (0x1p-8 * fabs(o32[i]) + 1e-30));
    for (int64_t i = 0; i < n_lse; i++)
        if (!(isinf(l8[i]) && isinf(l32[i]))) worst_l = fmax(worst_l, fabs(l8[i] - l32[i]) / (1e-6 * (1 + fabs(l32[i]))));
    if (s1 != FLASHC_OK || s2 != FLASHC_OK || !(worst <= 1.0) || !(worst_l <= 1.0))
        tc_fail("%s: status %s / %s, O %.2f x bf16 rounding, LSE %.2f x 1e-6", name, flashc_status_string(s1),
                flashc_status_string(s2), worst, worst_l);
    else
        tc_pass("%s", name);
    free(q), free(k), free(v), free(o32), free(l32), free(l8), free(o8);
    flashc_ctx_free(ref);
}

// ------------------------------------------------------------------------------------------------
// NaN: an e4m3 NaN code (0x7F) in q, k or v propagates as flashc.h states (test_flashc's nan_case
// checks the other dtypes): q_i -> that row's O and lse NaN; k_j -> every row of the kv head's
// group that sees key j; v_j element e -> element e of those rows (and may of the group's rows
// that do not see j: P = 0 times NaN). Everything else must match a clean run within 2^-6 (O) and
// 1e-5 (lse). A 129 x 300 causal case (several key blocks; rows < 29 do not see key 200) and a
// 1-query case, D = 128, batch 2, H 4/2, the NaN in sequence 1.
static void fp8_fwd_copy(flashc_ctx *ctx, const flashc_attn_desc *d, const uint8_t *q, const uint8_t *k, const uint8_t *v,
                         int64_t nq, int64_t nk, uint16_t *o, int64_t no, float *lse, int64_t nl, flashc_status *st) {
    for (int64_t i = 0; i < no; i++) o[i] = 0x7fda; // bf16 NaN
    for (int64_t i = 0; i < nl; i++) lse[i] = NAN;
    void *dq = tc_dev_put(ctx, q, (size_t)nq), *dk = tc_dev_put(ctx, k, (size_t)nk), *dv = tc_dev_put(ctx, v, (size_t)nk);
    void *dO = tc_dev_put(ctx, o, 2 * (size_t)no), *dl = tc_dev_put(ctx, lse, sizeof(float) * (size_t)nl);
    *st = flashc_fwd(ctx, d, dq, dk, dv, dO, dl, NULL, 0, NULL);
    tc_dev_get(ctx, o, dO, 2 * (size_t)no);
    tc_dev_get(ctx, lse, dl, sizeof(float) * (size_t)nl);
    tc_dev_free(ctx, q, dq), tc_dev_free(ctx, k, dk), tc_dev_free(ctx, v, dv), tc_dev_free(ctx, o, dO), tc_dev_free(ctx, lse, dl);
}

static void check_nan(flashc_ctx *ctx, const char *be, uint64_t seed) {
    const int B = 2, H = 4, Hkv = 2, G = H / Hkv, D = 128, pb = 1, pe = 40;
    for (int shape = 0; shape < 2; shape++)
        for (int what = 0; what < 3; what++) {
            const int Sq = shape ? 1 : 129, Sk = shape ? 1000 : 300, pi = shape ? 0 : 100, ph = 3, pj = shape ? 517 : 200, pg = 1;
            char name[160];
            snprintf(name, sizeof name, "NaN in %s propagates %s e4m3 B=%d H=%d/%d Sq=%d Sk=%d D=%d%s", what == 0 ? "q" : what == 1 ? "k" : "v",
                     be, B, H, Hkv, Sq, Sk, D, shape ? "" : " causal");
            tc_running(name);
            flashc_attn_desc d = {0};
            d.batch = B, d.heads = H, d.heads_kv = Hkv, d.head_dim = D, d.dtype = FLASHC_DTYPE_E4M3;
            d.seqlen_q = Sq, d.seqlen_k = Sk, d.causal = !shape;
            flashc_fill_contiguous_strides(&d);
            const int64_t nq = (int64_t)B * Sq * H * D, nk = (int64_t)B * Sk * Hkv * D, nl = (int64_t)B * H * Sq;
            uint8_t *q = tc_alloc((size_t)nq), *k = tc_alloc((size_t)nk), *v = tc_alloc((size_t)nk);
            tc_rng rng = tc_rng_make(seed, 0x9a9 + 8u * (uint64_t)shape + (uint64_t)what);
            for (int64_t i = 0; i < nq; i++) q[i] = e4m3_rand(&rng, 3.0);
            for (int64_t i = 0; i < nk; i++) k[i] = e4m3_rand(&rng, 3.0), v[i] = e4m3_rand(&rng, 2.0);
            uint16_t *o[2] = {tc_alloc(2 * (size_t)nq), tc_alloc(2 * (size_t)nq)};
            float *l[2] = {tc_alloc(sizeof(float) * (size_t)nl), tc_alloc(sizeof(float) * (size_t)nl)};
            flashc_status st[2];
            fp8_fwd_copy(ctx, &d, q, k, v, nq, nk, o[0], nq, l[0], nl, &st[0]);
            if (what == 0) q[(((int64_t)pb * Sq + pi) * H + ph) * D + pe] = 0x7F;
            else (what == 1 ? k : v)[(((int64_t)pb * Sk + pj) * Hkv + pg) * D + pe] = 0x7F;
            fp8_fwd_copy(ctx, &d, q, k, v, nq, nk, o[1], nq, l[1], nl, &st[1]);
            if (st[0] != FLASHC_OK || st[1] != FLASHC_OK) {
                tc_fail("%s: flashc_fwd = %s: %s", name, flashc_status_string(st[st[0] == FLASHC_OK]), flashc_ctx_last_error(ctx));
            } else {
                double amax = 0;
                for (int64_t i = 0; i < nq; i++) amax = fmax(amax, fabs((double)flashc__bf16_to_f32(o[0][i])));
                int64_t n_want = 0, n_missing = 0, n_clean_nan = 0, n_leak = 0, n_off = 0;
                for (int b = 0; b < B; b++)
                    for (int i = 0; i < Sq; i++)
                        for (int h = 0; h < H; h++) {
                            const int in_group = b == pb && h / G == pg, see = in_group && sees(&d, i, pj, Sq, Sk);
                            const int row_nan = what == 0 ? b == pb && i == pi && h == ph : what == 1 && see;
                            for (int e = -1; e < D; e++) { // e = -1: the lse
                                const int64_t oi = (((int64_t)b * Sq + i) * H + h) * D + e, li = ((int64_t)b * H + h) * Sq + i;
                                const double x0 = e < 0 ? l[0][li] : flashc__bf16_to_f32(o[0][oi]);
                                const double x1 = e < 0 ? l[1][li] : flashc__bf16_to_f32(o[1][oi]);
                                const int want = row_nan || (what == 2 && see && e == pe), may = what == 2 && in_group && !see && e == pe;
                                n_clean_nan += isnan(x0);
                                if (want) n_want++, n_missing += !isnan(x1);
                                else if (isnan(x1)) n_leak += !may;
                                else if (x1 != x0)
                                    n_off += !(fabs(x1 - x0) <= (e < 0 ? 1e-5 * (1 + fabs(x0)) : 0x1p-6 * fabs(x0) + 0x1p-9 * amax));
                            }
                        }
                if (n_clean_nan || n_missing || n_leak || n_off)
                    tc_fail("%s: %lld NaN in the clean run, %lld of %lld values that must be NaN are not, %lld NaN that must "
                            "not be, %lld moved beyond tolerance", name, (long long)n_clean_nan, (long long)n_missing,
                            (long long)n_want, (long long)n_leak, (long long)n_off);
                else tc_pass("%s: %lld values NaN as they must be", name, (long long)n_want);
            }
            free(q), free(k), free(v), free(o[0]), free(o[1]), free(l[0]), free(l[1]);
        }
}

int main(int argc, char **argv) {
    const char *backend = NULL;
    uint64_t seed = 1;
    int quick = 0, fuzz = 0, only = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v")) tc_verbose = 1;
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--fuzz") && i + 1 < argc && (fuzz = atoi(argv[i + 1])) > 0) i++;
        else if (!strcmp(argv[i], "--case") && i + 1 < argc) only = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--backend cuda|ref] [--quick] [--seed N] [--fuzz N] [--case K] [-v]\n", argv[0]);
            return 2;
        }
    }
    tc_catch_crashes();
    check_codec();
    check_validation();

    flashc_ctx *ctx = NULL;
    const char *be = backend ? backend : "cuda";
    flashc_status st = flashc_ctx_create(&ctx, strcmp(be, "ref") ? FLASHC_BACKEND_CUDA : FLASHC_BACKEND_REF, 0);
    if (st != FLASHC_OK) { // asked for by name (gpu.sh), no backend is a failure: 0 checks must not read as a pass
        const char *why = flashc_ctx_last_error(NULL);
        if (backend) tc_fail("%s: --backend %s, but the backend is unavailable (%s)", be, be, why);
        else printf("%s: skipped (%s)\n", be, why);
        ctx = NULL;
    }
    // the same cases again on a persistent grid of 3 CTAs (FLASHC_CUDA_CTAS, read when a context is
    // made): many tiles per CTA, and the paired tile order of causal problems, varlen included
    flashc_ctx *ctx3 = NULL;
    if (ctx && strcmp(be, "ref")) {
        setenv("FLASHC_CUDA_CTAS", "3", 1);
        if (flashc_ctx_create(&ctx3, FLASHC_BACKEND_CUDA, 0) != FLASHC_OK) {
            tc_fail("cuda-ctas3: flashc_ctx_create with FLASHC_CUDA_CTAS=3 failed (%s): its reruns are lost",
                    flashc_ctx_last_error(NULL));
            ctx3 = NULL;
        }
        unsetenv("FLASHC_CUDA_CTAS");
    }
    tc_rng fr = tc_rng_make(seed, 0xf022);
    for (int ci = 0; ci < (fuzz > 0 ? fuzz : N_CASES); ci++) {
        const fcase c = fuzz > 0 ? fuzz_case(&fr) : CASES[ci];
        if (only >= 0 && ci != only) continue;
        tc_rng rng = tc_rng_make(seed, (uint64_t)ci);
        fdata F;
        const double cost = (double)c.B * c.H * c.Sq * c.Sk * c.D;
        if (!ctx && cost >= 4e7) continue; // nothing to check it against but the (slow) reference itself
        if (quick && cost > QUICK_COST) continue;
        fdata_build(&F, &c, &rng);
        if (cost < 4e7) check_ref_path(&c, &F); // the fp32 copy through the ref is slow
        if (ctx) {
            run_case(ctx, be, &c, &F, 0);
            run_case(ctx, be, &c, &F, 64);
        }
        if (ctx3) run_case(ctx3, "cuda-ctas3", &c, &F, 0);
        fdata_free(&F);
    }
    if (!fuzz && only < 0) { // on the ref backend when there is no device: the rule's own check
        flashc_ctx *ref = NULL;
        if (ctx) check_nan(ctx, be, seed);
        else if (flashc_ctx_create(&ref, FLASHC_BACKEND_REF, 1) == FLASHC_OK) check_nan(ref, "ref", seed);
        flashc_ctx_free(ref);
    }
    flashc_ctx_free(ctx);
    flashc_ctx_free(ctx3);
    return tc_summary("test_fp8");
}
