// test_kvcache.c -- flashc_fwd_kvcache, paged K/V and flashc_merge on the host backends (ref, cpu),
// against expectations built independently of the code under test.
//
// KV cache. Each case draws a logical cache per sequence (capacity `cap` rows, random contents
// everywhere, so rows past c_b are garbage that must be ignored), lays it out physically (plain,
// pages in a shuffled pool with garbage in unused pages, or rows picked by cache_batch_idx out of a
// larger cache, optionally with padded strides), and builds the expectation itself:
//   - the append and the rotary in plain fp64 here (rotated values rounded to the dtype once);
//   - the attention by the ref backend's flashc_fwd in fp32 on a dense copy of the appended cache
//     with seqused_k = c_b + seqlen_new and the rotated q (the oracle: fp64 inside, exact inputs).
// Then flashc_fwd_kvcache runs on the backend under test with o / lse poisoned, and the test
// checks o, lse, the appended cache rows (each equal to the fp64-rotated value, rounded) and that
// every other byte of both caches is unchanged.
// Tolerances: lse (fp32 in every dtype) and f32 o: |err| <= 1e-5 (1 + |ref|). f16 / bf16 o:
// FlashAttention-2's rule, max |err| <= 2 max |err of a naive attention in that precision| + 1e-5,
// with the naive one computed here (scores rounded to the dtype, P rounded, O accumulated in fp32
// and rounded).
//
// Paged prefill: flashc_fwd with a block table (varlen and batch mode, with and without seqused_k,
// table entries past the keys seen out of range) against the ref backend's flashc_fwd on the dense
// layout; f16 / bf16 by the same 2x-naive rule.
//
// Merge: random partials against the formula in fp64; attention split over disjoint key sets and
// merged against attention over all keys; in place; parts that saw no key (lse = +inf, out NaN);
// rows where no part saw a key; strided parts and out.
//
// Bad input: the new entry points reject each broken argument with the right status, name it in
// the message and write nothing.
//
// CUDA: the same cases with every tensor staged into device memory (ctx->ops->ws_alloc / copy) and
// the results copied back; f32 cases run as f16 there (the CUDA backend takes f16 / bf16), head
// dims it does not take (D = 20) are skipped, as are the bad-input cases (front-end validation,
// the same code as on the host backends, with host buffers).
//
// Usage: build/test_kvcache [-v] [--backend ref|cpu|cuda] [--seed N] [--filter STR] [--fuzz N].
// Default: ref, cpu and cuda when a device is present; --filter runs only the KV-cache and merge
// cases whose label contains STR; --fuzz N runs N random KV-cache cases and N / 4 random paged
// prefills from --seed (kv_fuzz) instead of everything else. The last line is "N passed, M failed".
#include "test_common.h"

static const char *g_backend; // NULL: ref, cpu and cuda (when present)
static const char *g_filter;  // NULL: every case; else only the KV-cache and merge cases whose label contains it
static uint64_t g_seed = 1234;
static int g_fuzz;            // --fuzz N: N random cases of each kind (kv_fuzz) instead of the sweeps

static flashc_ctx *make_ctx(flashc_backend kind) {
    flashc_ctx *ctx = NULL;
    if (flashc_ctx_create(&ctx, kind, 2) != FLASHC_OK) {
        printf("FAIL  flashc_ctx_create(%d): %s\n", (int)kind, flashc_ctx_last_error(NULL));
        exit(1);
    }
    return ctx;
}

static double rnd_dt(tc_rng *r, flashc_dtype dt, double scale) { return tc_round((float)(tc_normal(r) * scale), dt); }

static double load_d(const void *p, int64_t i, flashc_dtype dt) { return flashc__load(p, i, dt); }

// x rounded to dt (through float, the way the library rounds fp64 values)
static double round_dt(double x, flashc_dtype dt) { return tc_round((float)x, dt); }

static int same_bits(const void *a, const void *b, int64_t i, flashc_dtype dt) {
    size_t es = flashc__dtype_size(dt);
    return !memcmp((const char *)a + es * i, (const char *)b + es * i, es);
}

// ------------------------------------------------------------------------------------------------
// KV cache cases

typedef struct kvc {
    const char *tag;
    flashc_dtype dt;
    int B, Sq, H, Hkv, D, cap;
    int page;          // 0: not paged
    int snew;          // seqlen_new
    int rot;           // 0 off, 1 halves (NeoX), 2 interleaved (GPT-J)
    int rd;            // rotary_dim, 0 => D
    int causal, use_window, wl, wr;
    float softcap, scale;
    int alibi;         // 0 off, 1 per head, 2 per (batch, head)
    int cbi;           // cache_batch_idx into a cache of B + 2 rows
    int splits;        // num_splits
    int pad;           // padded strides for q, o, caches, k_new / v_new
    int full;          // cache_seqlens = NULL (every c_b = cap), no append
    int no_lse;
    int own_ws;        // pass a workspace of flashc_kvcache_workspace_size bytes
} kvc;

static kvc kv_base(void) {
    kvc c;
    memset(&c, 0, sizeof c);
    c.dt = FLASHC_DTYPE_BF16;
    c.B = 3, c.Sq = 1, c.H = 8, c.Hkv = 2, c.D = 64, c.cap = 600;
    c.splits = 0;
    return c;
}

static void kv_label(const kvc *c, const char *backend, char *buf, size_t n) {
    snprintf(buf, n,
             "kvcache %s %s %s B=%d Sq=%d H=%d/%d D=%d cap=%d page=%d new=%d rot=%d/%d causal=%d win=%d(%d,%d) "
             "softcap=%g alibi=%d cbi=%d splits=%d pad=%d full=%d",
             backend, c->tag ? c->tag : "", tc_dtype_name(c->dt), c->B, c->Sq, c->H, c->Hkv, c->D, c->cap, c->page,
             c->snew, c->rot, c->rd, c->causal, c->use_window, c->wl, c->wr, c->softcap, c->alibi, c->cbi, c->splits,
             c->pad, c->full);
}

// GPT-NeoX / GPT-J rotation of x (D doubles) at position pos, in place; cos/sin typed tables.
static void rope_f64(const kvc *c, double *x, int64_t pos, const void *cs, const void *sn) {
    int rd = c->rd ? c->rd : c->D, half = rd / 2;
    for (int i = 0; i < half; i++) {
        int i0 = c->rot == 2 ? 2 * i : i, i1 = c->rot == 2 ? 2 * i + 1 : i + half;
        double co = load_d(cs, pos * half + i, c->dt), si = load_d(sn, pos * half + i, c->dt);
        double x0 = x[i0], x1 = x[i1];
        x[i0] = round_dt(x0 * co - x1 * si, c->dt);
        x[i1] = round_dt(x0 * si + x1 * co, c->dt);
    }
}

// Naive attention in the dtype's precision for one row: the 2x rule's yardstick for o (lse is judged
// by fp32's rule in every dtype).
static void naive_row(const kvc *c, const double *q, const double *K, const double *V, int64_t kst, int lo, int hi,
                      double scale, double slope, int64_t diag, double *o) {
    const flashc_dtype dt = c->dt;
    int n = hi - lo;
    for (int d = 0; d < c->D; d++) o[d] = 0;
    if (n <= 0) return;
    float *s = malloc(sizeof(float) * (size_t)n);
    float m = -INFINITY;
    for (int j = lo; j < hi; j++) {
        float acc = 0;
        for (int d = 0; d < c->D; d++) acc += (float)q[d] * (float)K[j * kst + d];
        float x = tc_round((float)scale * acc, dt);
        if (c->softcap > 0) x = c->softcap * tanhf(x / c->softcap);
        x -= (float)slope * (float)llabs(diag - j);
        s[j - lo] = x;
        if (x > m) m = x;
    }
    float l = 0;
    for (int j = 0; j < n; j++) l += (s[j] = expf(s[j] - m));
    float *acc = calloc((size_t)c->D, sizeof(float));
    for (int j = 0; j < n; j++) {
        float P = tc_round(s[j] / l, dt);
        for (int d = 0; d < c->D; d++) acc[d] += P * (float)V[(lo + j) * kst + d];
    }
    for (int d = 0; d < c->D; d++) o[d] = tc_round(acc[d], dt);
    free(s);
    free(acc);
}

// The visible key range of query row i (bottom-right aligned), written out here independently.
static void key_range(const kvc *c, int i, int sq, int sk, int *lo, int *hi) {
    int64_t diag = (int64_t)i + sk - sq;
    int left = c->use_window ? c->wl : -1, right = c->causal ? 0 : c->use_window ? c->wr : -1;
    int64_t l = left < 0 ? 0 : diag - left, h = right < 0 ? sk : diag + right + 1;
    if (l < 0) l = 0;
    if (h > sk) h = sk;
    if (h < l) h = l;
    *lo = (int)l, *hi = (int)h;
}

static void run_kv(flashc_ctx *ctx, const char *bname, const kvc *c_in, uint64_t seed) {
    kvc c_dev = *c_in;
    if (tc_on_dev(ctx) && c_dev.dt == FLASHC_DTYPE_F32) c_dev.dt = FLASHC_DTYPE_F16; // CUDA: f16 / bf16 only
    if (tc_on_dev(ctx)) c_dev.D = (c_dev.D + 7) / 8 * 8; // and head dims that are multiples of 8
    const kvc *c = &c_dev;
    char label[512];
    kv_label(c, bname, label, sizeof label);
    if (g_filter && !strstr(label, g_filter)) return;
    tc_rng r = tc_rng_make(seed, 11);
    const flashc_dtype dt = c->dt;
    const size_t es = flashc__dtype_size(dt);
    const int B = c->B, Sq = c->Sq, H = c->H, Hkv = c->Hkv, D = c->D, cap = c->cap, G = H / Hkv, snew = c->snew;
    const int rd = c->rd ? c->rd : D;

    // cache lengths: 0 and 1 for the first two sequences, then one that makes the append cross a
    // page boundary, then random
    int32_t *cl = malloc(sizeof(int32_t) * (size_t)B), *used = malloc(sizeof(int32_t) * (size_t)B);
    for (int b = 0; b < B; b++) {
        int c_b;
        if (c->full) c_b = cap;
        else if (b == 0) c_b = 0;
        else if (b == 1) c_b = 1;
        else if (b == 2 && c->page > 1 && snew > 1) c_b = (cap - snew) / c->page * c->page - 1;
        else c_b = tc_int(&r, cap - snew + 1);
        if (c_b + snew > cap) c_b = cap - snew;
        if (c_b < 0) c_b = 0;
        cl[b] = c_b;
        used[b] = c_b + snew;
    }

    // physical layout
    const int64_t hs = D + (c->pad ? 8 : 0), rs = (int64_t)Hkv * hs + (c->pad ? 24 : 0);
    const int pps = c->page ? (cap + c->page - 1) / c->page : 0;
    const int num_pages = c->page ? B * pps + 3 : 0;
    const int Bc = c->cbi ? B + 2 : B;
    const int64_t rows_per_unit = c->page ? c->page : cap;
    const int64_t ust = rows_per_unit * rs + (c->pad ? 40 : 0); // k_stride[0]: page or cache row
    const int64_t units = c->page ? num_pages : Bc;
    const int64_t kv_elems = units * ust;
    int32_t *table = NULL, *cbi = NULL;
    if (c->page) { // a shuffled pool: sequence b's pages scattered, 3 pages nobody uses
        table = malloc(sizeof(int32_t) * (size_t)B * pps);
        int32_t *perm = malloc(sizeof(int32_t) * (size_t)num_pages);
        for (int i = 0; i < num_pages; i++) perm[i] = i;
        for (int i = num_pages - 1; i > 0; i--) {
            int j = tc_int(&r, i + 1);
            int32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
        }
        for (int i = 0; i < B * pps; i++) table[i] = perm[i];
        free(perm);
    }
    if (c->cbi) { // sequence b lives in cache row Bc - 1 - 2 b mod Bc (a permutation: step 1 where Bc is even)
        cbi = malloc(sizeof(int32_t) * (size_t)B);
        const int step = Bc % 2 ? 2 : 1;
        for (int b = 0; b < B; b++) cbi[b] = ((Bc - 1 - b * step) % Bc + Bc) % Bc;
    }
    // element offset of logical row j of sequence b, head 0
    #define PHYS(b, j) (c->page ? (int64_t)table[(b) * pps + (j) / c->page] * ust + ((j) % c->page) * rs \
                               : (int64_t)(c->cbi ? cbi[b] : (b)) * ust + (int64_t)(j) * rs)

    void *kc = tc_alloc((size_t)kv_elems * es), *vc = tc_alloc((size_t)kv_elems * es);
    for (int64_t e = 0; e < kv_elems; e++) {
        flashc__store(kc, e, dt, (float)rnd_dt(&r, dt, 1.0));
        flashc__store(vc, e, dt, (float)rnd_dt(&r, dt, 1.0));
    }
    void *kc0 = tc_alloc((size_t)kv_elems * es), *vc0 = tc_alloc((size_t)kv_elems * es);
    memcpy(kc0, kc, (size_t)kv_elems * es);
    memcpy(vc0, vc, (size_t)kv_elems * es);

    // q, k_new, v_new (possibly padded), rotary tables
    const int64_t qhs = D + (c->pad ? 4 : 0), qrs = (int64_t)H * qhs + (c->pad ? 12 : 0), qbs = (int64_t)Sq * qrs + (c->pad ? 20 : 0);
    const int64_t nhs = D + (c->pad ? 4 : 0), nrs = (int64_t)Hkv * nhs + (c->pad ? 4 : 0), nbs = (int64_t)snew * nrs + (c->pad ? 8 : 0);
    const int64_t q_elems = (int64_t)B * qbs, new_elems = (int64_t)B * nbs > 0 ? (int64_t)B * nbs : 1;
    void *q = tc_alloc((size_t)q_elems * es), *o = tc_alloc((size_t)q_elems * es);
    void *kn = tc_alloc((size_t)new_elems * es), *vn = tc_alloc((size_t)new_elems * es);
    for (int64_t e = 0; e < q_elems; e++) flashc__store(q, e, dt, (float)rnd_dt(&r, dt, 1.0));
    for (int64_t e = 0; e < new_elems; e++) {
        flashc__store(kn, e, dt, (float)rnd_dt(&r, dt, 1.0));
        flashc__store(vn, e, dt, (float)rnd_dt(&r, dt, 1.0));
    }
    const int seqlen_ro = cap + Sq + 1;
    void *cs = tc_alloc((size_t)seqlen_ro * (rd / 2) * es), *sn = tc_alloc((size_t)seqlen_ro * (rd / 2) * es);
    for (int pos = 0; pos < seqlen_ro; pos++)
        for (int i = 0; i < rd / 2; i++) {
            double th = pos / pow(10000.0, 2.0 * i / rd);
            flashc__store(cs, (int64_t)pos * (rd / 2) + i, dt, (float)cos(th));
            flashc__store(sn, (int64_t)pos * (rd / 2) + i, dt, (float)sin(th));
        }
    float *slopes = malloc(sizeof(float) * (size_t)B * H);
    for (int i = 0; i < B * H; i++) slopes[i] = (float)(0.02 + 0.3 * tc_uniform(&r));

    // ---- the expectation: dense logical cache with the append, rotated q, ref flashc_fwd in f32
    float *Kd = malloc(sizeof(float) * (size_t)B * cap * Hkv * D), *Vd = malloc(sizeof(float) * (size_t)B * cap * Hkv * D);
    double *row = malloc(sizeof(double) * (size_t)D);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < cap; j++)
            for (int hk = 0; hk < Hkv; hk++) {
                int64_t dst = (((int64_t)b * cap + j) * Hkv + hk) * D, src = PHYS(b, j) + hk * hs;
                if (j >= cl[b] && j < cl[b] + snew) { // appended: k_new rotated at position j
                    int64_t t = j - cl[b], ko = b * nbs + t * nrs + hk * nhs;
                    for (int d = 0; d < D; d++) row[d] = load_d(kn, ko + d, dt);
                    if (c->rot) rope_f64(c, row, j, cs, sn);
                    for (int d = 0; d < D; d++) {
                        Kd[dst + d] = (float)row[d];
                        Vd[dst + d] = (float)load_d(vn, ko + d, dt);
                    }
                } else {
                    for (int d = 0; d < D; d++) {
                        Kd[dst + d] = (float)load_d(kc, src + d, dt);
                        Vd[dst + d] = (float)load_d(vc, src + d, dt);
                    }
                }
            }
    const int q_per_row = c->causal || (c->use_window && (c->wl >= 0 || c->wr >= 0));
    float *Qd = malloc(sizeof(float) * (size_t)B * Sq * H * D);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < Sq; i++)
            for (int h = 0; h < H; h++) {
                for (int d = 0; d < D; d++) row[d] = load_d(q, b * qbs + i * qrs + h * qhs + d, dt);
                if (c->rot) rope_f64(c, row, cl[b] + (q_per_row ? i : 0), cs, sn);
                for (int d = 0; d < D; d++) Qd[(((int64_t)b * Sq + i) * H + h) * D + d] = (float)row[d];
            }
    flashc_attn_desc rd_desc = {0};
    rd_desc.batch = B, rd_desc.seqlen_q = Sq, rd_desc.seqlen_k = cap, rd_desc.heads = H, rd_desc.heads_kv = Hkv;
    rd_desc.head_dim = D, rd_desc.dtype = FLASHC_DTYPE_F32, rd_desc.causal = c->causal, rd_desc.scale = c->scale;
    rd_desc.softcap = c->softcap, rd_desc.use_window = c->use_window, rd_desc.window_left = c->wl;
    rd_desc.window_right = c->wr;
    rd_desc.alibi_slopes = c->alibi ? slopes : NULL, rd_desc.alibi_batch_stride = c->alibi == 2 ? H : 0;
    rd_desc.seqused_k = used;
    flashc_fill_contiguous_strides(&rd_desc);
    float *o_ref = malloc(sizeof(float) * (size_t)B * Sq * H * D), *lse_ref = malloc(sizeof(float) * (size_t)B * H * Sq + 4);
    flashc_ctx *rctx = make_ctx(FLASHC_BACKEND_REF);
    flashc_status st = flashc_fwd(rctx, &rd_desc, Qd, Kd, Vd, o_ref, lse_ref, NULL, 0, NULL);
    if (st != FLASHC_OK) {
        tc_fail("%s: the reference flashc_fwd failed: %s", label, flashc_ctx_last_error(rctx));
        flashc_ctx_free(rctx);
        goto done;
    }
    flashc_ctx_free(rctx);

    // naive error in the dtype (bf16 / f16 bound)
    double naive_o = 0;
    if (dt != FLASHC_DTYPE_F32) {
        double *qr = malloc(sizeof(double) * (size_t)D), *on = malloc(sizeof(double) * (size_t)D);
        double *Kb = malloc(sizeof(double) * (size_t)cap * D), *Vb = malloc(sizeof(double) * (size_t)cap * D);
        double scale = c->scale > 0 ? c->scale : 1.0 / sqrt((double)D);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                int hk = h / G;
                for (int j = 0; j < used[b]; j++)
                    for (int d = 0; d < D; d++) {
                        Kb[(int64_t)j * D + d] = Kd[(((int64_t)b * cap + j) * Hkv + hk) * D + d];
                        Vb[(int64_t)j * D + d] = Vd[(((int64_t)b * cap + j) * Hkv + hk) * D + d];
                    }
                double slope = c->alibi ? slopes[(c->alibi == 2 ? b * H : 0) + h] : 0;
                for (int i = 0; i < Sq; i++) {
                    int lo, hi;
                    key_range(c, i, Sq, used[b], &lo, &hi);
                    for (int d = 0; d < D; d++) qr[d] = Qd[(((int64_t)b * Sq + i) * H + h) * D + d];
                    naive_row(c, qr, Kb, Vb, D, lo, hi, scale, slope, (int64_t)i + used[b] - Sq, on);
                    int64_t ro = (((int64_t)b * Sq + i) * H + h) * D;
                    for (int d = 0; d < D; d++) naive_o = fmax(naive_o, fabs(on[d] - o_ref[ro + d]));
                }
            }
        free(qr), free(on), free(Kb), free(Vb);
    }

    // ---- the call under test
    {
        flashc_attn_desc d = {0};
        d.batch = B, d.seqlen_q = Sq, d.heads = H, d.heads_kv = Hkv;
        d.head_dim = D, d.dtype = dt, d.causal = c->causal, d.scale = c->scale, d.softcap = c->softcap;
        d.use_window = c->use_window, d.window_left = c->wl, d.window_right = c->wr;
        d.alibi_slopes = c->alibi ? slopes : NULL, d.alibi_batch_stride = c->alibi == 2 ? H : 0;
        d.q_stride[0] = qbs, d.q_stride[1] = qrs, d.q_stride[2] = qhs;
        memcpy(d.o_stride, d.q_stride, sizeof d.q_stride);
        d.k_stride[0] = ust, d.k_stride[1] = rs, d.k_stride[2] = hs;
        memcpy(d.v_stride, d.k_stride, sizeof d.k_stride);
        if (c->page) d.block_table = table, d.block_table_stride = pps, d.page_size = c->page, d.num_pages = num_pages;
        d.seqlen_k = cap; // the capacity (a paged cache may hold less than max_pages * page_size)
        flashc_kvcache_desc kv = {0};
        kv.cache_seqlens = c->full ? NULL : cl;
        kv.cache_batch_idx = cbi;
        kv.seqlen_new = snew;
        kv.knew_stride[0] = nbs, kv.knew_stride[1] = nrs, kv.knew_stride[2] = nhs;
        memcpy(kv.vnew_stride, kv.knew_stride, sizeof kv.knew_stride);
        if (c->rot) kv.rotary_cos = cs, kv.rotary_sin = sn, kv.rotary_dim = rd, kv.rotary_interleaved = c->rot == 2, kv.seqlen_ro = seqlen_ro;
        kv.num_splits = c->splits;

        int64_t n_lse = (int64_t)B * H * Sq;
        float *lse = malloc(sizeof(float) * (size_t)(n_lse + 1));
        for (int64_t e = 0; e < q_elems; e++) tc_store_nan(o, e, dt);
        for (int64_t e = 0; e <= n_lse; e++) lse[e] = NAN;
        void *ws = NULL;
        size_t ws_size = 0;
        if (c->own_ws) {
            ws_size = flashc_kvcache_workspace_size(ctx, &d, &kv);
            ws = ws_size ? (tc_on_dev(ctx) ? ctx->ops->ws_alloc(ctx, ws_size) : tc_alloc(ws_size)) : NULL;
        }
        // device copies of every tensor and table (the host ones themselves on host backends)
        const size_t kv_bytes = (size_t)kv_elems * es, q_bytes = (size_t)q_elems * es, new_bytes = (size_t)new_elems * es;
        const size_t ro_bytes = (size_t)seqlen_ro * (rd / 2) * es;
        void *dq = tc_dev_put(ctx, q, q_bytes), *dkc = tc_dev_put(ctx, kc, kv_bytes), *dvc = tc_dev_put(ctx, vc, kv_bytes);
        void *dkn = tc_dev_put(ctx, kn, new_bytes), *dvn = tc_dev_put(ctx, vn, new_bytes), *dout = tc_dev_put(ctx, o, q_bytes);
        float *dlse = tc_dev_put(ctx, lse, sizeof(float) * (size_t)(n_lse + 1));
        void *dcs = tc_dev_put(ctx, kv.rotary_cos, ro_bytes), *dsn = tc_dev_put(ctx, kv.rotary_sin, ro_bytes);
        float *dsl = tc_dev_put(ctx, d.alibi_slopes, sizeof(float) * (size_t)B * H);
        int32_t *dcl = tc_dev_put(ctx, kv.cache_seqlens, sizeof(int32_t) * (size_t)B);
        int32_t *dcbi = tc_dev_put(ctx, kv.cache_batch_idx, sizeof(int32_t) * (size_t)B);
        int32_t *dtab = tc_dev_put(ctx, d.block_table, sizeof(int32_t) * (size_t)B * (pps ? pps : 1));
        const void *h_cs = kv.rotary_cos, *h_sn = kv.rotary_sin;
        const float *h_sl = d.alibi_slopes;
        const int32_t *h_cl = kv.cache_seqlens, *h_cbi = kv.cache_batch_idx, *h_tab = d.block_table;
        kv.rotary_cos = dcs, kv.rotary_sin = dsn, d.alibi_slopes = dsl, kv.cache_seqlens = dcl;
        kv.cache_batch_idx = dcbi, d.block_table = dtab;
        st = flashc_fwd_kvcache(ctx, &d, &kv, dq, dkc, dvc, snew ? dkn : NULL, snew ? dvn : NULL, dout,
                                c->no_lse ? NULL : dlse, ws, ws_size, NULL);
        if (tc_on_dev(ctx)) {
            tc_dev_get(ctx, o, dout, q_bytes);
            tc_dev_get(ctx, lse, dlse, sizeof(float) * (size_t)(n_lse + 1));
            tc_dev_get(ctx, kc, dkc, kv_bytes);
            tc_dev_get(ctx, vc, dvc, kv_bytes);
            if (ws) ctx->ops->ws_free(ctx, ws);
        } else {
            free(ws);
        }
        tc_dev_free(ctx, q, dq), tc_dev_free(ctx, kc, dkc), tc_dev_free(ctx, vc, dvc), tc_dev_free(ctx, kn, dkn);
        tc_dev_free(ctx, vn, dvn), tc_dev_free(ctx, o, dout), tc_dev_free(ctx, lse, dlse), tc_dev_free(ctx, h_cs, dcs);
        tc_dev_free(ctx, h_sn, dsn), tc_dev_free(ctx, h_sl, dsl), tc_dev_free(ctx, h_cl, dcl), tc_dev_free(ctx, h_cbi, dcbi);
        tc_dev_free(ctx, h_tab, dtab);
        if (st == FLASHC_ERR_UNSUPPORTED && tc_on_dev(ctx)) {
            tc_skip("%s: %s", label, flashc_ctx_last_error(ctx));
            free(lse);
            goto done;
        }
        if (st != FLASHC_OK) {
            tc_fail("%s: flashc_fwd_kvcache = %s: %s", label, flashc_status_string(st), flashc_ctx_last_error(ctx));
            free(lse);
            goto done;
        }

        // o and lse
        double err_o = 0, err_l = 0, worst_rel = 0;
        int bad_inf = 0, unwritten = 0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < Sq; i++)
                for (int h = 0; h < H; h++) {
                    int64_t ro = (((int64_t)b * Sq + i) * H + h) * D, oo = b * qbs + i * qrs + h * qhs;
                    for (int dd = 0; dd < D; dd++) {
                        double x = load_d(o, oo + dd, dt), e = fabs(x - o_ref[ro + dd]);
                        if (isnan(x)) unwritten++;
                        err_o = fmax(err_o, e);
                        worst_rel = fmax(worst_rel, e / (1 + fabs(o_ref[ro + dd])));
                    }
                    if (c->no_lse) continue;
                    double l = lse[((int64_t)b * H + h) * Sq + i], lr = lse_ref[((int64_t)b * H + h) * Sq + i];
                    if (isinf(lr) || isinf(l)) bad_inf += !(isinf(lr) && isinf(l) && l > 0);
                    else err_l = fmax(err_l, fabs(l - lr) / (1 + fabs(lr)));
                }
        if (!c->no_lse && !isnan(lse[n_lse])) unwritten++; // one past the end must stay untouched
        double bound_o = dt == FLASHC_DTYPE_F32 ? 1e-5 : 2 * naive_o + 1e-5;
        // LSE: fp32 in every dtype, |x - ref| <= 1e-5 (1 + |ref|) (DESIGN.md §2's fp32 form, as test_flashc);
        // the bf16 naive's LSE error (~1e-2, its rounded scores) let an LSE off by 4e-3 pass
        double bound_l = 1e-5;
        double got_o = dt == FLASHC_DTYPE_F32 ? worst_rel : err_o;
        if (unwritten || bad_inf || !(got_o <= bound_o) || !(err_l <= bound_l))
            tc_fail("%s: o err %.3g (bound %.3g), lse err %.3g (bound %.3g), %d unwritten, %d lse +inf mismatches",
                    label, got_o, bound_o, err_l, bound_l, unwritten, bad_inf);
        else
            tc_pass("%s: o err %.3g (bound %.3g), lse err %.3g (bound %.3g)", label, got_o, bound_o, err_l, bound_l);

        // the caches: appended rows hold the expected values, every other element is unchanged
        unsigned char *touched = calloc((size_t)kv_elems, 1);
        int64_t bad_app = 0, bad_other = 0;
        for (int b = 0; b < B; b++)
            for (int j = cl[b]; j < cl[b] + snew; j++)
                for (int hk = 0; hk < Hkv; hk++) {
                    int64_t po = PHYS(b, j) + hk * hs, lo_ = (((int64_t)b * cap + j) * Hkv + hk) * D;
                    for (int dd = 0; dd < D; dd++) {
                        touched[po + dd] = 1;
                        double kx = load_d(kc, po + dd, dt), vx = load_d(vc, po + dd, dt);
                        double ulp = dt == FLASHC_DTYPE_F32 ? 1e-6 * (1 + fabs(Kd[lo_ + dd])) : fabs(Kd[lo_ + dd]) * (dt == FLASHC_DTYPE_BF16 ? 0x1p-7 : 0x1p-10) + 1e-30;
                        if (!(fabs(kx - Kd[lo_ + dd]) <= ulp) || vx != Vd[lo_ + dd]) bad_app++;
                    }
                }
        for (int64_t e = 0; e < kv_elems; e++)
            if (!touched[e] && (!same_bits(kc, kc0, e, dt) || !same_bits(vc, vc0, e, dt))) bad_other++;
        free(touched);
        if (bad_app || bad_other)
            tc_fail("%s: cache: %lld appended elements wrong, %lld other elements changed", label, (long long)bad_app,
                    (long long)bad_other);
        else
            tc_pass("%s: cache appended and otherwise unchanged", label);
        free(lse);
    }

done:
    #undef PHYS
    free(cl), free(used), free(table), free(cbi), free(kc), free(vc), free(kc0), free(vc0), free(q), free(o), free(kn);
    free(vn), free(cs), free(sn), free(slopes), free(Kd), free(Vd), free(row), free(Qd), free(o_ref), free(lse_ref);
}

static void kv_sweep(flashc_ctx *ctx, const char *bname) {
    uint64_t seed = g_seed;
    kvc c;
    // page sizes {none, 1, 16, 256} x dtype x seqlen_q {1, 4} x append {0, 3}; causal, rotary
    const int pages[4] = {0, 1, 16, 256};
    for (int pi = 0; pi < 4; pi++)
        for (int di = 0; di < 2; di++)
            for (int sq = 1; sq <= 4; sq += 3)
                for (int sn = 0; sn <= 3; sn += 3) {
                    c = kv_base();
                    c.tag = "pages";
                    c.page = pages[pi], c.dt = di ? FLASHC_DTYPE_BF16 : FLASHC_DTYPE_F32, c.Sq = sq, c.snew = sn;
                    c.causal = 1, c.rot = 1;
                    run_kv(ctx, bname, &c, seed++);
                }
    // rotary: interleaved or halves, causal or not (q at c_b + i or at c_b), full or partial rotary_dim
    for (int rot = 1; rot <= 2; rot++)
        for (int causal = 0; causal <= 1; causal++)
            for (int half = 0; half <= 1; half++)
                for (int pg = 0; pg <= 1; pg++) {
                    c = kv_base();
                    c.tag = "rotary";
                    c.rot = rot, c.causal = causal, c.rd = half ? c.D / 2 : 0, c.page = pg ? 16 : 0;
                    c.Sq = 4, c.snew = 2, c.dt = (rot + causal + half) % 2 ? FLASHC_DTYPE_F32 : FLASHC_DTYPE_BF16;
                    run_kv(ctx, bname, &c, seed++);
                }
    // split counts forced 1, 2, 7 and automatic, with and without pages, decode and speculative
    const int splits[4] = {0, 1, 2, 7};
    for (int si = 0; si < 4; si++)
        for (int pg = 0; pg <= 1; pg++)
            for (int sq = 1; sq <= 4; sq += 3) {
                c = kv_base();
                c.tag = "splits";
                c.splits = splits[si], c.page = pg ? 16 : 0, c.Sq = sq, c.snew = 1, c.causal = 1, c.rot = 2;
                c.own_ws = si % 2;
                run_kv(ctx, bname, &c, seed++);
            }
    // GQA 32/8 and MQA at head_dim 128
    for (int mqa = 0; mqa <= 1; mqa++)
        for (int sq = 1; sq <= 4; sq += 3)
            for (int pg = 0; pg <= 1; pg++) {
                c = kv_base();
                c.tag = mqa ? "mqa" : "gqa32/8";
                c.B = 3, c.H = mqa ? 16 : 32, c.Hkv = mqa ? 1 : 8, c.D = 128, c.cap = 300, c.Sq = sq, c.snew = 1;
                c.causal = 1, c.rot = 1, c.page = pg ? 16 : 0;
                run_kv(ctx, bname, &c, seed++);
            }
    // a batch that fills the GPU (the CUDA backend's plan: one split or few)
    for (int sq = 1; sq <= 4; sq += 3)
        for (int pg = 0; pg <= 1; pg++) {
            c = kv_base();
            c.tag = "gqa32/8-b16";
            c.B = 16, c.H = 32, c.Hkv = 8, c.D = 128, c.cap = 700, c.Sq = sq, c.snew = 1, c.rot = 2;
            c.causal = sq > 1, c.page = pg ? 16 : 0;
            run_kv(ctx, bname, &c, seed++);
        }
    // long caches, where the CUDA tensor-core kernel's warps meet at barriers (every 16 steps of 64
    // keys: > 1024 keys per CTA), with CTA key ranges that are not multiples of 64
    for (int li = 0; li < 5; li++) {
        c = kv_base();
        c.tag = "long";
        c.B = 2, c.H = 32, c.Hkv = 8, c.D = 128, c.cap = 2100, c.full = 1;
        if (li == 1) c.splits = 2;
        if (li == 2) c.D = 64, c.Sq = 4, c.causal = 1, c.use_window = 1, c.wl = 1500, c.wr = 0, c.cap = 2111;
        if (li == 3) c.dt = FLASHC_DTYPE_F16, c.alibi = 1, c.softcap = 3.0f, c.cap = 1999, c.splits = 1;
        if (li == 4) c.full = 0, c.B = 3, c.D = 64, c.cap = 3000, c.snew = 3, c.rot = 1, c.causal = 1;
        run_kv(ctx, bname, &c, seed++);
    }
    // score options: softcap, ALiBi per head and per (batch, head), windows, custom scale
    for (int pg = 0; pg <= 1; pg++)
        for (int opt = 0; opt < 6; opt++) {
            c = kv_base();
            c.page = pg ? 16 : 0, c.Sq = 4, c.snew = 2, c.rot = opt % 2 ? 2 : 0;
            c.dt = opt % 3 == 0 ? FLASHC_DTYPE_F32 : FLASHC_DTYPE_BF16;
            if (opt == 0) c.tag = "softcap", c.softcap = 2.0f, c.scale = 0.5f, c.causal = 1;
            if (opt == 1) c.tag = "softcap-nc", c.softcap = 5.0f;
            if (opt == 2) c.tag = "alibi", c.alibi = 1, c.causal = 1;
            if (opt == 3) c.tag = "alibi-batch", c.alibi = 2;
            if (opt == 4) c.tag = "window-causal", c.use_window = 1, c.wl = 37, c.wr = 0, c.causal = 1;
            if (opt == 5) c.tag = "window", c.use_window = 1, c.wl = 5, c.wr = 3;
            c.splits = opt % 2 ? 7 : 0;
            run_kv(ctx, bname, &c, seed++);
        }
    // cache_batch_idx (rows of a larger cache), with splits and rotary
    for (int si = 0; si < 3; si++) {
        c = kv_base();
        c.tag = "cache_batch_idx";
        c.cbi = 1, c.splits = si == 0 ? 0 : si == 1 ? 1 : 7, c.Sq = si == 2 ? 4 : 1, c.snew = 2, c.rot = 1, c.causal = 1;
        c.dt = si == 1 ? FLASHC_DTYPE_F32 : FLASHC_DTYPE_BF16;
        run_kv(ctx, bname, &c, seed++);
    }
    // f16, padded strides, odd head_dim (the fp32 copy path), MHA, many kv heads, long seqlen_q
    c = kv_base(), c.tag = "f16", c.dt = FLASHC_DTYPE_F16, c.Sq = 4, c.snew = 3, c.rot = 1, c.causal = 1, c.page = 16;
    run_kv(ctx, bname, &c, seed++);
    c = kv_base(), c.tag = "f16-cbi", c.dt = FLASHC_DTYPE_F16, c.cbi = 1, c.snew = 1, c.splits = 2;
    run_kv(ctx, bname, &c, seed++);
    for (int pg = 0; pg <= 1; pg++) {
        c = kv_base(), c.tag = "padded", c.pad = 1, c.Sq = 4, c.snew = 2, c.rot = 2, c.causal = 1, c.page = pg ? 16 : 0;
        run_kv(ctx, bname, &c, seed++);
    }
    c = kv_base(), c.tag = "cbi-padded", c.pad = 1, c.cbi = 1, c.snew = 2, c.dt = FLASHC_DTYPE_F32;
    run_kv(ctx, bname, &c, seed++);
    // bf16 at head dims of 32 (mod 64): the CPU dot-product kernel's last 32 dims (its QK and PV
    // tails), with a split, ALiBi, softcap, paging and several query positions between them
    for (int di = 0; di < 3; di++) {
        c = kv_base(), c.tag = di == 0 ? "D=96" : di == 1 ? "D=160" : "D=32", c.D = di == 0 ? 96 : di == 1 ? 160 : 32;
        c.snew = 1, c.rot = 1, c.causal = 1, c.cap = 500;
        if (di == 0) c.Sq = 4, c.splits = 3, c.alibi = 1;
        if (di == 1) c.Sq = 2, c.softcap = 4.0f, c.page = 16, c.H = 12, c.Hkv = 4;
        if (di == 2) c.Sq = 7, c.splits = 2, c.cbi = 1;
        run_kv(ctx, bname, &c, seed++);
    }
    c = kv_base(), c.tag = "D=20", c.D = 20, c.Sq = 4, c.snew = 2, c.rot = 1, c.rd = 10, c.causal = 1, c.page = 16;
    run_kv(ctx, bname, &c, seed++);
    c = kv_base(), c.tag = "D=8", c.D = 8, c.dt = FLASHC_DTYPE_F32, c.snew = 1, c.splits = 2;
    run_kv(ctx, bname, &c, seed++);
    c = kv_base(), c.tag = "mha", c.H = 4, c.Hkv = 4, c.Sq = 1, c.snew = 1, c.rot = 1, c.page = 1;
    run_kv(ctx, bname, &c, seed++);
    c = kv_base(), c.tag = "many-kv-heads", c.H = 40, c.Hkv = 40, c.D = 16, c.Sq = 4, c.snew = 1, c.causal = 1, c.cap = 200;
    run_kv(ctx, bname, &c, seed++);
    c = kv_base(), c.tag = "seqlen_q=37", c.Sq = 37, c.snew = 5, c.causal = 1, c.rot = 1, c.page = 16, c.cap = 300;
    run_kv(ctx, bname, &c, seed++);
    c = kv_base(), c.tag = "seqlen_q=37-window", c.Sq = 37, c.snew = 0, c.use_window = 1, c.wl = 20, c.wr = 2, c.cap = 300;
    run_kv(ctx, bname, &c, seed++);
    // a full cache (cache_seqlens NULL), the exact capacity, no lse
    c = kv_base(), c.tag = "full", c.full = 1, c.Sq = 4, c.causal = 1, c.page = 16, c.cap = 200;
    run_kv(ctx, bname, &c, seed++);
    c = kv_base(), c.tag = "no-lse", c.no_lse = 1, c.snew = 2, c.page = 256;
    run_kv(ctx, bname, &c, seed++);
    c = kv_base(), c.tag = "append-only (seqlen_q = 0)", c.Sq = 0, c.snew = 3, c.rot = 2, c.page = 16, c.splits = 2;
    run_kv(ctx, bname, &c, seed++);
    c = kv_base(), c.tag = "to-capacity", c.B = 3, c.cap = 48, c.page = 16, c.snew = 47, c.Sq = 4, c.causal = 1, c.rot = 1;
    run_kv(ctx, bname, &c, seed++);
    // f32 at D = 193 with a large scale (scores ~7 wide), its own inputs: a fuzz case the portable
    // (scalar) decode kernel missed the fp32 bound on (1.09e-5) while its dot products ran in two
    // chains a row (four now: flashc_cpu_decode_kernel.h, qk_tile)
    memset(&c, 0, sizeof c);
    c.tag = "f32-D=193", c.dt = FLASHC_DTYPE_F32, c.B = 5, c.Sq = 4, c.H = 12, c.Hkv = 4, c.D = 193, c.cap = 238;
    c.full = 1, c.rot = 2, c.rd = 160, c.causal = 1, c.scale = 0.491369843f, c.splits = 916;
    run_kv(ctx, bname, &c, 5000113);
}

// ------------------------------------------------------------------------------------------------
// paged K/V in flashc_fwd (prefill, batch and varlen)

typedef struct pgc {
    flashc_dtype dt;
    int page, varlen, causal;
    int used;     // seqused_k below, at 0 and above (capped) the key counts; table entries past them garbage
    int misalign; // the pools one element past a 16-byte boundary (CUDA: the gather's 2-byte path)
    int own_ws;   // a workspace of flashc_fwd_workspace_size bytes, 64 bytes past a 256-byte boundary
    int big;      // head dim of a case with hundreds of keys (CUDA: the wgmma TMA kernel, or with few the
                  // decode kernel's split-KV); 0: D = 32, 90 keys
    int few;      // seqlen_q 4 (varlen: 1, 1, 4 queries): the decode kernel's range (the CPU's fwd_by_decode)
} pgc;

static void run_paged_fwd(flashc_ctx *ctx, const char *bname, pgc c, uint64_t seed) {
    if (tc_on_dev(ctx) && c.dt == FLASHC_DTYPE_F32) c.dt = FLASHC_DTYPE_F16; // CUDA: f16 / bf16 only
    const flashc_dtype dt = c.dt;
    char label[256];
    const int B = 3, H = 4, Hkv = 2, D = c.big ? c.big : 32, Sq = c.few ? 4 : c.big ? 256 : 40, Sk = c.big ? 520 : 90;
    snprintf(label, sizeof label,
             "paged fwd %s %s page=%d varlen=%d causal=%d seqused_k=%d misaligned=%d own_ws=%d D=%d Sq=%d", bname,
             tc_dtype_name(dt), c.page, c.varlen, c.causal, c.used, c.misalign, c.own_ws, D, Sq);
    tc_rng r = tc_rng_make(seed, 13);
    // varlen: sequences of 90, 1, 40 keys (big: 520, 1, 374 from row 5 on); batch: Sk keys each
    static const int32_t cuq_s[4] = {0, 40, 41, 70}, cuk_s[4] = {0, 90, 91, 131};
    static const int32_t cuq_b[4] = {0, 256, 257, 400}, cuk_b[4] = {5, 525, 526, 900};
    static const int32_t cuq_f[4] = {0, 1, 2, 6};
    const int32_t *cuq = c.few ? cuq_f : c.big ? cuq_b : cuq_s, *cuk = c.big ? cuk_b : cuk_s;
    const size_t es = flashc__dtype_size(dt);
    int32_t lk[3], used[3], sk[3]; // keys: of the layout, seqused_k, seen
    for (int b = 0; b < B; b++) {
        lk[b] = c.varlen ? cuk[b + 1] - cuk[b] : Sk;
        used[b] = b == 0 ? lk[b] - 17 : b == 1 ? 0 : lk[b] + 7;
        sk[b] = c.used && used[b] < lk[b] ? used[b] : lk[b];
    }
    const int pps = (Sk + c.page - 1) / c.page, num_pages = B * pps + 2;
    int32_t *table = malloc(sizeof(int32_t) * (size_t)B * pps);
    for (int i = 0; i < B * pps; i++) table[i] = (i * 7 + 1) % num_pages;
    // check it is a permutation prefix (7 coprime to num_pages or not: fall back to identity)
    for (int i = 0; i < B * pps; i++)
        for (int j = 0; j < i; j++)
            if (table[i] == table[j]) {
                for (int t = 0; t < B * pps; t++) table[t] = t;
                i = j = B * pps;
            }
    for (int b = 0; b < B; b++) // pages past the keys seen: entries no backend may read
        for (int i = (sk[b] + c.page - 1) / c.page; i < pps; i++) table[b * pps + i] = i % 2 ? -1 : num_pages + 3;
    const int64_t total_q = c.varlen ? cuq[B] : (int64_t)B * Sq, total_k = c.varlen ? cuk[B] : (int64_t)B * Sk;
    const int64_t pool = (int64_t)num_pages * c.page * Hkv * D, nq = total_q * H * D, nk = total_k * Hkv * D;
    const int64_t off = c.misalign ? 1 : 0; // elements
    const size_t pool_bytes = (size_t)(pool + 8) * es;
    void *q = tc_alloc((size_t)nq * es), *o = tc_alloc((size_t)nq * es), *kp0 = tc_alloc(pool_bytes), *vp0 = tc_alloc(pool_bytes);
    void *kp = (char *)kp0 + off * es, *vp = (char *)vp0 + off * es;
    float *qf = malloc(sizeof(float) * (size_t)nq), *kf = calloc((size_t)nk, sizeof(float)), *vf = calloc((size_t)nk, sizeof(float));
    double *kd = calloc((size_t)nk, sizeof(double)), *vd = calloc((size_t)nk, sizeof(double));
    float *of = malloc(sizeof(float) * (size_t)nq), *lr = malloc(sizeof(float) * (size_t)total_q * H);
    float *lse = malloc(sizeof(float) * (size_t)total_q * H);
    for (int64_t e = 0; e < nq; e++) {
        double x = rnd_dt(&r, dt, 1.0);
        flashc__store(q, e, dt, (float)x);
        qf[e] = (float)x;
    }
    for (int64_t e = 0; e < pool; e++) {
        flashc__store(kp, e, dt, (float)rnd_dt(&r, dt, 1.0));
        flashc__store(vp, e, dt, (float)rnd_dt(&r, dt, 1.0));
    }
    for (int b = 0; b < B; b++) // the dense copy: row j of sequence b from its page (zeros past the keys seen)
        for (int j = 0; j < sk[b]; j++) {
            int64_t src = ((int64_t)table[b * pps + j / c.page] * c.page + j % c.page) * Hkv * D;
            int64_t dst = ((c.varlen ? cuk[b] : (int64_t)b * Sk) + j) * Hkv * D;
            for (int e = 0; e < Hkv * D; e++) {
                kd[dst + e] = kf[dst + e] = (float)load_d(kp, src + e, dt);
                vd[dst + e] = vf[dst + e] = (float)load_d(vp, src + e, dt);
            }
        }
    flashc_attn_desc d = {0};
    d.batch = B, d.seqlen_q = Sq, d.seqlen_k = Sk, d.heads = H, d.heads_kv = Hkv, d.head_dim = D, d.causal = c.causal;
    if (c.varlen) d.cu_seqlens_q = cuq, d.cu_seqlens_k = cuk;
    if (c.used) d.seqused_k = used;
    flashc_attn_desc dr = d;
    dr.dtype = FLASHC_DTYPE_F32;
    flashc_fill_contiguous_strides(&dr);
    flashc_ctx *rctx = make_ctx(FLASHC_BACKEND_REF);
    flashc_status st = flashc_fwd(rctx, &dr, qf, kf, vf, of, lr, NULL, 0, NULL);
    flashc_ctx_free(rctx);

    // f16 / bf16: FlashAttention-2's rule against a naive attention in the dtype (as run_kv)
    double naive_o = 0;
    if (dt != FLASHC_DTYPE_F32 && st == FLASHC_OK) {
        kvc nc = kv_base();
        nc.dt = dt, nc.D = D, nc.causal = c.causal;
        double *qr = malloc(sizeof(double) * (size_t)D), *on = malloc(sizeof(double) * (size_t)D);
        for (int b = 0; b < B; b++) {
            const int sq = c.varlen ? cuq[b + 1] - cuq[b] : Sq;
            const int64_t q0 = c.varlen ? cuq[b] : (int64_t)b * Sq, k0 = c.varlen ? cuk[b] : (int64_t)b * Sk;
            for (int i = 0; i < sq; i++)
                for (int h = 0; h < H; h++) {
                    const int64_t qo = ((q0 + i) * H + h) * D, ko = (k0 * Hkv + h / (H / Hkv)) * D;
                    int lo, hi;
                    key_range(&nc, i, sq, sk[b], &lo, &hi);
                    for (int e = 0; e < D; e++) qr[e] = qf[qo + e];
                    naive_row(&nc, qr, kd + ko, vd + ko, (int64_t)Hkv * D, lo, hi, 1.0 / sqrt((double)D), 0,
                              (int64_t)i + sk[b] - sq, on);
                    for (int e = 0; e < D; e++) naive_o = fmax(naive_o, fabs(on[e] - of[qo + e]));
                }
        }
        free(qr), free(on);
    }

    // the call under test, on device copies where the backend has its own memory
    d.dtype = dt;
    d.block_table = table, d.block_table_stride = pps, d.page_size = c.page, d.num_pages = num_pages;
    flashc_fill_contiguous_strides(&d);
    for (int64_t e = 0; e < nq; e++) tc_store_nan(o, e, dt);
    for (int64_t e = 0; e < total_q * H; e++) lse[e] = NAN;
    const size_t q_bytes = (size_t)nq * es, lse_bytes = sizeof(float) * (size_t)total_q * H;
    void *dq = tc_dev_put(ctx, q, q_bytes), *dkp = tc_dev_put(ctx, kp0, pool_bytes), *dvp = tc_dev_put(ctx, vp0, pool_bytes);
    void *dout = tc_dev_put(ctx, o, q_bytes);
    float *dlse = tc_dev_put(ctx, lse, lse_bytes);
    int32_t *dcuq = tc_dev_put(ctx, d.cu_seqlens_q, sizeof cuq_s), *dcuk = tc_dev_put(ctx, d.cu_seqlens_k, sizeof cuk_s);
    int32_t *dused = tc_dev_put(ctx, d.seqused_k, sizeof used), *dtab = tc_dev_put(ctx, table, sizeof(int32_t) * (size_t)B * pps);
    const int32_t *h_cuq = d.cu_seqlens_q, *h_cuk = d.cu_seqlens_k, *h_used = d.seqused_k;
    d.cu_seqlens_q = dcuq, d.cu_seqlens_k = dcuk, d.seqused_k = dused, d.block_table = dtab;
    void *ws_mem = NULL, *ws = NULL;
    size_t ws_size = 0;
    if (c.own_ws && (ws_size = flashc_fwd_workspace_size(ctx, &d)) > 0) {
        ws_mem = tc_on_dev(ctx) ? ctx->ops->ws_alloc(ctx, ws_size + 256) : tc_alloc(ws_size + 256);
        ws = (char *)ws_mem + 64; // (64-byte aligned, as flashc.h promises no more)
    }
    flashc_status st2 = flashc_fwd(ctx, &d, dq, (char *)dkp + off * es, (char *)dvp + off * es, dout, dlse, ws, ws_size, NULL);
    tc_dev_get(ctx, o, dout, q_bytes);
    tc_dev_get(ctx, lse, dlse, lse_bytes);
    if (tc_on_dev(ctx)) {
        if (ws_mem) ctx->ops->ws_free(ctx, ws_mem);
    } else {
        free(ws_mem);
    }
    tc_dev_free(ctx, q, dq), tc_dev_free(ctx, kp0, dkp), tc_dev_free(ctx, vp0, dvp), tc_dev_free(ctx, o, dout);
    tc_dev_free(ctx, lse, dlse), tc_dev_free(ctx, h_cuq, dcuq), tc_dev_free(ctx, h_cuk, dcuk);
    tc_dev_free(ctx, h_used, dused), tc_dev_free(ctx, table, dtab);
    if (st != FLASHC_OK || st2 != FLASHC_OK) {
        tc_fail("%s: status ref %d, test %d: %s", label, (int)st, (int)st2, flashc_ctx_last_error(ctx));
    } else {
        double err = 0, errl = 0;
        for (int64_t e = 0; e < nq; e++) {
            double x = load_d(o, e, dt), ex = fabs(x - of[e]);
            err = fmax(err, isnan(x) ? INFINITY : dt == FLASHC_DTYPE_F32 ? ex / (1 + fabs(of[e])) : ex);
        }
        for (int64_t e = 0; e < total_q * H; e++)
            errl = fmax(errl, isnan(lse[e]) ? INFINITY : isinf(lr[e]) ? (lse[e] == lr[e] ? 0 : INFINITY) : fabs(lse[e] - lr[e]) / (1 + fabs(lr[e])));
        // f32: 1e-5 relative; f16 / bf16: 2 x the naive attention's error + 1e-5 (absolute)
        double bound = dt == FLASHC_DTYPE_F32 ? 1e-5 : 2 * naive_o + 1e-5;
        if (err <= bound && errl <= 1e-5) tc_pass("%s: err %.3g lse %.3g (bound %.3g)", label, err, errl, bound);
        else tc_fail("%s: err %.3g lse %.3g (bound %.3g, lse 1e-5)", label, err, errl, bound);
    }
    free(table), free(q), free(o), free(kp0), free(vp0), free(qf), free(kf), free(vf), free(kd), free(vd), free(of);
    free(lr), free(lse);
}

// ------------------------------------------------------------------------------------------------
// merge

// out = sum_s exp(lse_s - lse) out_s over parts with finite lse, in fp64 here; a NaN lse makes the
// row's out and lse NaN, a NaN out element of a part with finite lse that element.
static void merge_expect(int n, int B, int S, int H, int D, const double *parts, const double *lp, double *out, double *lse) {
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++)
            for (int h = 0; h < H; h++) {
                double mx = -INFINITY;
                int nan = 0;
                for (int p = 0; p < n; p++) {
                    double x = lp[(((int64_t)p * B + b) * H + h) * S + s];
                    nan |= isnan(x);
                    if (!isinf(x) && x > mx) mx = x;
                }
                double sum = 0;
                for (int p = 0; p < n; p++) {
                    double x = lp[(((int64_t)p * B + b) * H + h) * S + s];
                    if (!isinf(x) && !isnan(x)) sum += exp(x - mx);
                }
                double L = nan ? NAN : sum > 0 ? mx + log(sum) : INFINITY;
                lse[((int64_t)b * H + h) * S + s] = L;
                for (int d = 0; d < D; d++) {
                    double acc = nan ? NAN : 0;
                    for (int p = 0; p < n && sum > 0 && !nan; p++) {
                        double x = lp[(((int64_t)p * B + b) * H + h) * S + s];
                        if (!isinf(x)) acc += exp(x - L) * parts[((((int64_t)p * B + b) * S + s) * H + h) * D + d];
                    }
                    out[(((int64_t)b * S + s) * H + h) * D + d] = acc;
                }
            }
}

static void run_merge_random(flashc_ctx *ctx, const char *bname, flashc_dtype pdt, flashc_dtype odt, int in_place,
                             int strided, uint64_t seed) {
    char label[200];
    snprintf(label, sizeof label, "merge %s parts=%s out=%s in_place=%d strided=%d", bname, tc_dtype_name(pdt),
             tc_dtype_name(odt), in_place, strided);
    if (g_filter && !strstr(label, g_filter)) return;
    tc_rng r = tc_rng_make(seed, 17);
    const int n = 5, B = 2, S = 3, H = 4, D = 40;
    const int64_t hs = D + (strided ? 3 : 0), ss = (int64_t)H * hs + (strided ? 5 : 0), bs = (int64_t)S * ss + (strided ? 7 : 0),
                  ps = (int64_t)B * bs + (strided ? 11 : 0);
    const int64_t n_parts_el = n * ps, n_lse = (int64_t)B * H * S;
    const size_t pes = flashc__dtype_size(pdt), oes = flashc__dtype_size(odt);
    void *parts = tc_alloc((size_t)n_parts_el * pes);
    float *lp = malloc(sizeof(float) * (size_t)n * n_lse);
    double *pd = malloc(sizeof(double) * (size_t)n * B * S * H * D), *ld = malloc(sizeof(double) * (size_t)n * n_lse);
    for (int64_t e = 0; e < n_parts_el; e++) tc_store_nan(parts, e, pdt); // gaps and empty parts hold NaN
    for (int p = 0; p < n; p++)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int s = 0; s < S; s++) {
                    // part 1 saw no key anywhere; row (b=1, h=2, s=0) saw none in any part
                    int empty = p == 1 || (b == 1 && h == 2 && s == 0) || tc_int(&r, 7) == 0;
                    double L = empty ? INFINITY : 3.0 * tc_normal(&r) + (p == 3 ? 40 : 0);
                    lp[(((int64_t)p * B + b) * H + h) * S + s] = (float)L;
                    ld[(((int64_t)p * B + b) * H + h) * S + s] = (float)L;
                    for (int d = 0; d < D; d++) {
                        int64_t off = p * ps + b * bs + s * ss + h * hs + d;
                        int64_t di = ((((int64_t)p * B + b) * S + s) * H + h) * D + d;
                        if (empty) {
                            pd[di] = 0;
                            continue;
                        }
                        double x = rnd_dt(&r, pdt, 1.0);
                        flashc__store(parts, off, pdt, (float)x);
                        pd[di] = x;
                    }
                }
    // NaN propagates: row (b=0, h=1, s=2) has a NaN lse in part 2; row (1, 3, 1) a NaN lse in part 0
    // and no key in the others (a merge that sums only finite lse would see an empty row: out 0);
    // row (0, 2, 1) a NaN out element (d = 7) in part 4, which saw keys
    for (int p = 0; p < n; p++) {
        lp[(((int64_t)p * B + 1) * H + 3) * S + 1] = p ? INFINITY : NAN;
        ld[(((int64_t)p * B + 1) * H + 3) * S + 1] = p ? INFINITY : NAN;
    }
    lp[(((int64_t)2 * B + 0) * H + 1) * S + 2] = NAN, ld[(((int64_t)2 * B + 0) * H + 1) * S + 2] = NAN;
    lp[(((int64_t)4 * B + 0) * H + 2) * S + 1] = 0.5f, ld[(((int64_t)4 * B + 0) * H + 2) * S + 1] = 0.5;
    for (int d = 0; d < D; d++) {
        const int64_t off = 4 * ps + 0 * bs + 1 * ss + 2 * hs + d, di = ((((int64_t)4 * B + 0) * S + 1) * H + 2) * D + d;
        const double x = d == 7 ? NAN : rnd_dt(&r, pdt, 1.0);
        flashc__store(parts, off, pdt, (float)x);
        pd[di] = x;
    }
    double *oe = malloc(sizeof(double) * (size_t)B * S * H * D), *le = malloc(sizeof(double) * (size_t)n_lse);
    merge_expect(n, B, S, H, D, pd, ld, oe, le);

    flashc_merge_desc m = {0};
    m.n_parts = n, m.batch = B, m.seqlen = S, m.heads = H, m.head_dim = D, m.part_dtype = pdt, m.out_dtype = odt;
    if (strided) m.part_stride[0] = ps, m.part_stride[1] = bs, m.part_stride[2] = ss, m.part_stride[3] = hs;
    void *out;
    float *lse;
    int64_t ob = bs, osq = ss, oh = hs, out_el = B * bs;
    if (in_place) {
        out = parts; // part 0
        lse = lp;
        if (strided) m.out_stride[0] = bs, m.out_stride[1] = ss, m.out_stride[2] = hs;
    } else {
        if (strided) {
            ob = (int64_t)S * H * (D + 9), osq = (int64_t)H * (D + 9), oh = D + 9, out_el = B * ob;
            m.out_stride[0] = ob, m.out_stride[1] = osq, m.out_stride[2] = oh;
        } else {
            ob = (int64_t)S * H * D, osq = (int64_t)H * D, oh = D, out_el = B * ob;
        }
        out = tc_alloc((size_t)out_el * oes);
        for (int64_t e = 0; e < out_el; e++) tc_store_nan(out, e, odt);
        lse = malloc(sizeof(float) * (size_t)n_lse);
        for (int64_t e = 0; e < n_lse; e++) lse[e] = NAN;
    }
    if (in_place && !strided) ob = bs, osq = ss, oh = hs;
    const size_t parts_bytes = (size_t)n_parts_el * pes, lp_bytes = sizeof(float) * (size_t)n * n_lse;
    void *dparts = tc_dev_put(ctx, parts, parts_bytes);
    float *dlp = tc_dev_put(ctx, lp, lp_bytes);
    void *dout = in_place ? dparts : tc_dev_put(ctx, out, (size_t)out_el * oes);
    float *dlse = in_place ? dlp : tc_dev_put(ctx, lse, sizeof(float) * (size_t)n_lse);
    flashc_status st = flashc_merge(ctx, &m, dparts, dlp, dout, dlse, NULL);
    if (tc_on_dev(ctx)) {
        if (in_place) {
            tc_dev_get(ctx, parts, dparts, parts_bytes);
            tc_dev_get(ctx, lp, dlp, lp_bytes);
        } else {
            tc_dev_get(ctx, out, dout, (size_t)out_el * oes);
            tc_dev_get(ctx, lse, dlse, sizeof(float) * (size_t)n_lse);
            tc_dev_free(ctx, out, dout), tc_dev_free(ctx, lse, dlse);
        }
        tc_dev_free(ctx, parts, dparts), tc_dev_free(ctx, lp, dlp);
    }
    if (st != FLASHC_OK) {
        tc_fail("%s: flashc_merge = %s: %s", label, flashc_status_string(st), flashc_ctx_last_error(ctx));
    } else {
        double err = 0, errl = 0;
        int bad = 0;
        for (int b = 0; b < B; b++)
            for (int s = 0; s < S; s++)
                for (int h = 0; h < H; h++) {
                    for (int d = 0; d < D; d++) {
                        double x = load_d(out, b * ob + s * osq + h * oh + d, odt), e = oe[(((int64_t)b * S + s) * H + h) * D + d];
                        // rounding of the result to the out dtype, plus fp32 partial rounding
                        double tol = (odt == FLASHC_DTYPE_F32 ? 1e-6 : odt == FLASHC_DTYPE_BF16 ? 0x1p-8 : 0x1p-11) * (1 + fabs(e));
                        if (isnan(e) ? !isnan(x) : !(fabs(x - e) <= tol)) bad++;
                        if (!isnan(e)) err = fmax(err, fabs(x - e));
                    }
                    double L = lse[((int64_t)b * H + h) * S + s], Le = le[((int64_t)b * H + h) * S + s];
                    if (isnan(Le) ? !isnan(L) : isinf(Le) ? L != Le : !(fabs(L - Le) <= 1e-6 * (1 + fabs(Le)))) bad++;
                    if (isfinite(Le)) errl = fmax(errl, fabs(L - Le));
                }
        if (bad) tc_fail("%s: %d elements off, max err %.3g, lse %.3g", label, bad, err, errl);
        else tc_pass("%s: max err %.3g, lse %.3g", label, err, errl);
    }
    if (!in_place) free(out), free(lse);
    free(parts), free(lp), free(pd), free(ld), free(oe), free(le);
}

// Attention split into disjoint key sets (one of them empty), merged, against attention on all keys.
static void run_merge_attention(flashc_ctx *ctx, const char *bname, uint64_t seed) {
    char label[128];
    snprintf(label, sizeof label, "merge %s of split attention (keys 0..37 | none | 38..99 | 100..150)", bname);
    if (g_filter && !strstr(label, g_filter)) return;
    tc_rng r = tc_rng_make(seed, 19);
    const int B = 2, Sq = 3, H = 4, D = 24, Sk = 151, n = 4;
    const int cut[5] = {0, 38, 38, 100, 151};
    float *q = malloc(sizeof(float) * B * Sq * H * D), *k = malloc(sizeof(float) * B * Sk * H * D),
          *v = malloc(sizeof(float) * B * Sk * H * D);
    for (int i = 0; i < B * Sq * H * D; i++) q[i] = (float)tc_normal(&r);
    for (int i = 0; i < B * Sk * H * D; i++) k[i] = (float)tc_normal(&r), v[i] = (float)tc_normal(&r);
    float *parts = malloc(sizeof(float) * n * B * Sq * H * D), *lp = malloc(sizeof(float) * n * B * H * Sq);
    float *full = malloc(sizeof(float) * B * Sq * H * D), *lf = malloc(sizeof(float) * B * H * Sq);
    float *out = malloc(sizeof(float) * B * Sq * H * D), *lse = malloc(sizeof(float) * B * H * Sq);
    flashc_ctx *rctx = make_ctx(FLASHC_BACKEND_REF);
    flashc_attn_desc d = {0};
    d.batch = B, d.seqlen_q = Sq, d.seqlen_k = Sk, d.heads = H, d.heads_kv = H, d.head_dim = D, d.dtype = FLASHC_DTYPE_F32;
    flashc_fill_contiguous_strides(&d);
    flashc_status st = flashc_fwd(rctx, &d, q, k, v, full, lf, NULL, 0, NULL);
    for (int p = 0; p < n && st == FLASHC_OK; p++) { // keys [cut[p], cut[p+1]) through strides into k / v
        flashc_attn_desc dp = d;
        dp.seqlen_k = cut[p + 1] - cut[p];
        dp.k_stride[0] = d.k_stride[0], dp.k_stride[1] = d.k_stride[1], dp.k_stride[2] = d.k_stride[2];
        memcpy(dp.v_stride, dp.k_stride, sizeof dp.k_stride);
        st = flashc_fwd(rctx, &dp, q, k + (int64_t)cut[p] * H * D, v + (int64_t)cut[p] * H * D,
                        parts + (int64_t)p * B * Sq * H * D, lp + (int64_t)p * B * H * Sq, NULL, 0, NULL);
    }
    flashc_ctx_free(rctx);
    flashc_merge_desc m = {0};
    m.n_parts = n, m.batch = B, m.seqlen = Sq, m.heads = H, m.head_dim = D;
    m.part_dtype = FLASHC_DTYPE_F32, m.out_dtype = FLASHC_DTYPE_F32;
    if (st == FLASHC_OK) {
        const size_t pb = sizeof(float) * n * B * Sq * H * D, lb = sizeof(float) * n * B * H * Sq;
        float *dparts = tc_dev_put(ctx, parts, pb), *dlp = tc_dev_put(ctx, lp, lb);
        float *dout = tc_dev_put(ctx, out, pb / n), *dlse = tc_dev_put(ctx, lse, lb / n);
        st = flashc_merge(ctx, &m, dparts, dlp, dout, dlse, NULL);
        if (tc_on_dev(ctx)) {
            tc_dev_get(ctx, out, dout, pb / n), tc_dev_get(ctx, lse, dlse, lb / n);
            tc_dev_free(ctx, parts, dparts), tc_dev_free(ctx, lp, dlp), tc_dev_free(ctx, out, dout), tc_dev_free(ctx, lse, dlse);
        }
    }
    if (st != FLASHC_OK) {
        tc_fail("%s: %s", label, flashc_ctx_last_error(ctx));
    } else {
        double err = 0, errl = 0;
        for (int i = 0; i < B * Sq * H * D; i++) err = fmax(err, fabs(out[i] - full[i]) / (1 + fabs(full[i])));
        for (int i = 0; i < B * H * Sq; i++) errl = fmax(errl, fabs(lse[i] - lf[i]) / (1 + fabs(lf[i])));
        if (err <= 1e-5 && errl <= 1e-5) tc_pass("%s: err %.3g lse %.3g", label, err, errl);
        else tc_fail("%s: err %.3g lse %.3g (bound 1e-5)", label, err, errl);
    }
    free(q), free(k), free(v), free(parts), free(lp), free(full), free(lf), free(out), free(lse);
}

// ------------------------------------------------------------------------------------------------
// bad input

#define NB 8192 // elements per buffer: more than any case addresses

typedef struct bad_kv {
    flashc_ctx *ctx;
    flashc_attn_desc d;
    flashc_kvcache_desc kv;
    float *buf[8]; // q kc vc kn vn o lse cos/sin
    float *img[8];
    int32_t cl[2], table[4], cbi[2];
    const void *q, *kn, *vn;
    void *kc, *vc, *o;
    float *lse;
    int null_d, null_kv;
    int ptr; // a pointer-level case: the description is valid, so the workspace query answers
} bad_kv;

static void bad_kv_setup(bad_kv *s, flashc_ctx *ctx, int paged) {
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    tc_rng r = tc_rng_make(7, 3);
    for (int i = 0; i < 8; i++) {
        s->buf[i] = tc_alloc(NB * sizeof(float));
        s->img[i] = tc_alloc(NB * sizeof(float));
        for (int e = 0; e < NB; e++) s->buf[i][e] = i == 5 || i == 6 ? -1.0f : (float)tc_uniform(&r);
    }
    flashc_attn_desc *d = &s->d;
    d->batch = 2, d->seqlen_q = 2, d->seqlen_k = 8, d->heads = 4, d->heads_kv = 2, d->head_dim = 8;
    d->dtype = FLASHC_DTYPE_F32, d->causal = 1;
    s->cl[0] = 3, s->cl[1] = 5;
    s->kv.cache_seqlens = s->cl;
    s->kv.seqlen_new = 2;
    s->kv.rotary_cos = s->buf[7], s->kv.rotary_sin = s->buf[7] + 1024, s->kv.rotary_dim = 8, s->kv.seqlen_ro = 16;
    if (paged) { // 2 pages of 4 rows per sequence, in a pool of 4
        s->table[0] = 2, s->table[1] = 0, s->table[2] = 3, s->table[3] = 1;
        d->block_table = s->table, d->block_table_stride = 2, d->page_size = 4, d->num_pages = 4;
    }
    flashc_fill_contiguous_strides(d);
    s->q = s->buf[0], s->kc = s->buf[1], s->vc = s->buf[2], s->kn = s->buf[3], s->vn = s->buf[4];
    s->o = s->buf[5], s->lse = s->buf[6];
}

static void bad_kv_free(bad_kv *s) {
    for (int i = 0; i < 8; i++) free(s->buf[i]), free(s->img[i]);
}

static void bad_kv_check(bad_kv *s, const char *label, flashc_status want, const char *name) {
    for (int i = 0; i < 8; i++) memcpy(s->img[i], s->buf[i], NB * sizeof(float));
    flashc_status st = flashc_fwd_kvcache(s->ctx, s->null_d ? NULL : &s->d, s->null_kv ? NULL : &s->kv, s->q, s->kc, s->vc,
                                          s->kn, s->vn, s->o, s->lse, NULL, 0, NULL);
    const char *msg = flashc_ctx_last_error(s->ctx);
    int ok = st == want;
    if (!ok) tc_fail("bad kvcache %s: status %s (%d), want %s; \"%s\"", label, flashc_status_string(st), (int)st,
                     flashc_status_string(want), msg);
    if (ok && want != FLASHC_OK) {
        if (name && !tc_names(msg, name)) ok = 0, tc_fail("bad kvcache %s: message does not name %s: \"%s\"", label, name, msg);
        for (int i = 0; i < 8; i++)
            if (memcmp(s->img[i], s->buf[i], NB * sizeof(float))) {
                ok = 0;
                tc_fail("bad kvcache %s: buffer %d written although the call failed", label, i);
                break;
            }
        size_t ws = flashc_kvcache_workspace_size(s->ctx, s->null_d ? NULL : &s->d, s->null_kv ? NULL : &s->kv);
        if (ws != 0 && !s->ptr) ok = 0, tc_fail("bad kvcache %s: flashc_kvcache_workspace_size = %zu for a rejected call", label, ws);
    }
    if (ok) tc_pass("bad kvcache %s: %s \"%s\"", label, flashc_status_string(st), msg);
}

#define KV_CASE(label, want, name, paged, ...)                                                                         \
    do {                                                                                                               \
        bad_kv s_;                                                                                                     \
        bad_kv *s = &s_;                                                                                               \
        bad_kv_setup(s, ctx, paged);                                                                                   \
        __VA_ARGS__;                                                                                                   \
        bad_kv_check(s, label, want, name);                                                                            \
        bad_kv_free(s);                                                                                                \
    } while (0)

static void bad_kvcache(flashc_ctx *ctx) {
    const flashc_status INV = FLASHC_ERR_INVALID_ARG;
    KV_CASE("control", FLASHC_OK, NULL, 0, (void)s);
    KV_CASE("control paged", FLASHC_OK, NULL, 1, (void)s);
    KV_CASE("desc NULL", INV, "desc", 0, s->null_d = 1);
    KV_CASE("kv NULL", INV, "kv", 0, s->null_kv = 1);
    KV_CASE("q NULL", INV, "q", 0, s->ptr = 1; s->q = NULL);
    KV_CASE("k_cache NULL", INV, "k_cache", 0, s->ptr = 1; s->kc = NULL);
    KV_CASE("v_cache NULL", INV, "v_cache", 0, s->ptr = 1; s->vc = NULL);
    KV_CASE("o NULL", INV, "o", 0, s->ptr = 1; s->o = NULL);
    KV_CASE("k_new NULL", INV, "k_new", 0, s->ptr = 1; s->kn = NULL);
    KV_CASE("v_new NULL", INV, "v_new", 0, s->ptr = 1; s->vn = NULL);
    KV_CASE("o aliases q", INV, "o", 0, s->ptr = 1; s->o = (void *)s->q);
    KV_CASE("lse aliases o", INV, "lse", 0, s->ptr = 1; s->lse = s->o);
    KV_CASE("v_cache = k_cache", INV, "v_cache", 0, s->ptr = 1; s->vc = s->kc);
    KV_CASE("cache_seqlens + seqlen_new > capacity", INV, "cache_seqlens", 0, s->cl[1] = 7);
    KV_CASE("cache_seqlens + seqlen_new > capacity (paged)", INV, "cache_seqlens", 1, s->cl[0] = 7);
    KV_CASE("cache_seqlens < 0", INV, "cache_seqlens", 0, s->cl[0] = -1);
    KV_CASE("cache_seqlens NULL with an append", INV, "cache_seqlens", 0, s->kv.cache_seqlens = NULL);
    KV_CASE("seqlen_new < 0", INV, "seqlen_new", 0, s->kv.seqlen_new = -1);
    KV_CASE("seqlen_new > capacity", INV, "seqlen_new", 0, s->kv.seqlen_new = 9);
    KV_CASE("block_table page = num_pages (used page)", INV, "block_table", 1, s->table[0] = 4);
    KV_CASE("block_table page < 0 (page of an appended row)", INV, "block_table", 1, s->table[3] = -1);
    KV_CASE("block_table: an unused page out of range is fine", FLASHC_OK, NULL, 1, s->cl[0] = 1; s->table[1] = 99);
    KV_CASE("page_size = 0", INV, "page_size", 1, s->d.page_size = 0);
    KV_CASE("rotary_dim odd", INV, "rotary_dim", 0, s->kv.rotary_dim = 5);
    KV_CASE("rotary_dim > head_dim", INV, "rotary_dim", 0, s->kv.rotary_dim = 10);
    KV_CASE("rotary_dim = 0 with cos", INV, "rotary_dim", 0, s->kv.rotary_dim = 0);
    KV_CASE("rotary_sin NULL", INV, "rotary_sin", 0, s->kv.rotary_sin = NULL);
    KV_CASE("rotary_cos NULL, sin given", INV, "rotary_cos", 0, s->kv.rotary_cos = NULL);
    KV_CASE("rotary_interleaved = 2", INV, "rotary_interleaved", 0, s->kv.rotary_interleaved = 2);
    KV_CASE("seqlen_ro too small for k_new", INV, "seqlen_ro", 0, s->kv.seqlen_ro = 6);
    KV_CASE("seqlen_ro too small for causal q", INV, "seqlen_ro", 0, s->kv.seqlen_new = 0; s->kv.seqlen_ro = 6);
    KV_CASE("seqlen_ro enough for non-causal q", FLASHC_OK, NULL, 0,
            s->kv.seqlen_new = 0; s->d.causal = 0; s->kv.seqlen_ro = 6);
    KV_CASE("seqlen_ro = 0", INV, "seqlen_ro", 0, s->kv.seqlen_ro = 0);
    KV_CASE("rotary fields without cos", INV, "rotary_cos", 0,
            s->kv.rotary_cos = NULL; s->kv.rotary_sin = NULL; s->kv.seqlen_ro = 3);
    KV_CASE("num_splits < 0", INV, "num_splits", 0, s->kv.num_splits = -1);
    KV_CASE("num_splits > 1024", INV, "num_splits", 0, s->kv.num_splits = 1025);
    KV_CASE("kv.reserved", INV, "reserved", 0, s->kv.reserved[5] = 1);
    KV_CASE("desc.reserved", INV, "reserved", 0, s->d.reserved[0] = 1);
    KV_CASE("cache_batch_idx with block_table", INV, "cache_batch_idx", 1, s->kv.cache_batch_idx = s->cbi);
    KV_CASE("cache_batch_idx < 0", INV, "cache_batch_idx", 0, s->cbi[1] = -2; s->kv.cache_batch_idx = s->cbi);
    KV_CASE("cache_batch_idx >= num_cache_rows", INV, "cache_batch_idx", 0,
            s->cbi[1] = 1; s->kv.cache_batch_idx = s->cbi; s->kv.num_cache_rows = 1);
    KV_CASE("num_cache_rows < 0", INV, "num_cache_rows", 0, s->kv.num_cache_rows = -1);
    KV_CASE("num_cache_rows = 1 < batch without cache_batch_idx", INV, "num_cache_rows", 0, s->kv.num_cache_rows = 1);
    KV_CASE("num_cache_rows = batch without cache_batch_idx", FLASHC_OK, NULL, 0, s->kv.num_cache_rows = 2);
    KV_CASE("cache_batch_idx < num_cache_rows", FLASHC_OK, NULL, 0,
            s->cbi[0] = 1; s->cbi[1] = 0; s->kv.cache_batch_idx = s->cbi; s->kv.num_cache_rows = 2);
    KV_CASE("cu_seqlens_q", INV, "cu_seqlens_q", 0, s->d.cu_seqlens_q = s->cl; s->d.cu_seqlens_k = s->cl);
    KV_CASE("seqused_k", INV, "seqused_k", 0, s->d.seqused_k = s->cl);
    KV_CASE("knew_stride overlapping", INV, "knew_stride", 0,
            s->kv.knew_stride[0] = 32; s->kv.knew_stride[1] = 16; s->kv.knew_stride[2] = 4);
    KV_CASE("vnew_stride negative", INV, "vnew_stride", 0,
            s->kv.vnew_stride[0] = -32; s->kv.vnew_stride[1] = 16; s->kv.vnew_stride[2] = 8);
    KV_CASE("k_stride overlapping", INV, "k_stride", 0, s->d.k_stride[1] = 4);
    KV_CASE("heads % heads_kv", INV, "heads_kv", 0, s->d.heads_kv = 3);
    KV_CASE("dtype e4m3", FLASHC_ERR_UNSUPPORTED, "dtype", 0, s->d.dtype = FLASHC_DTYPE_E4M3);
    {
        bad_kv s_;
        bad_kv *s = &s_;
        bad_kv_setup(s, ctx, 0);
        size_t need = flashc_kvcache_workspace_size(ctx, &s->d, &s->kv);
        for (int i = 0; i < 8; i++) memcpy(s->img[i], s->buf[i], NB * sizeof(float));
        flashc_status st = need ? flashc_fwd_kvcache(ctx, &s->d, &s->kv, s->q, s->kc, s->vc, s->kn, s->vn, s->o, s->lse,
                                                     s->buf[7] + 4096, need - 1, NULL)
                                : FLASHC_ERR_WORKSPACE_SMALL;
        int same = 1;
        for (int i = 0; i < 8; i++) same &= !memcmp(s->img[i], s->buf[i], NB * sizeof(float));
        if (st == FLASHC_ERR_WORKSPACE_SMALL && same) tc_pass("bad kvcache workspace one byte short (need %zu)", need);
        else if (need == 0) tc_skip("bad kvcache workspace short: this backend needs none here");
        else tc_fail("bad kvcache workspace one byte short: status %d, buffers unchanged %d", (int)st, same);
        bad_kv_free(s);
    }
}

typedef struct bad_m {
    flashc_ctx *ctx;
    flashc_merge_desc m;
    float *parts, *lp, *out, *lse, *img[4];
    const void *parts_arg;
    const float *lp_arg;
    void *out_arg;
    float *lse_arg;
    int null_m;
} bad_m;

static void bad_merge_check(bad_m *s, const char *label, flashc_status want, const char *name) {
    float *bufs[4] = {s->parts, s->lp, s->out, s->lse};
    for (int i = 0; i < 4; i++) memcpy(s->img[i], bufs[i], NB * sizeof(float));
    flashc_status st = flashc_merge(s->ctx, s->null_m ? NULL : &s->m, s->parts_arg, s->lp_arg, s->out_arg, s->lse_arg, NULL);
    const char *msg = flashc_ctx_last_error(s->ctx);
    int ok = st == want;
    if (!ok) tc_fail("bad merge %s: status %s (%d), want %s; \"%s\"", label, flashc_status_string(st), (int)st,
                     flashc_status_string(want), msg);
    if (ok && want != FLASHC_OK) {
        if (name && !tc_names(msg, name)) ok = 0, tc_fail("bad merge %s: message does not name %s: \"%s\"", label, name, msg);
        for (int i = 0; i < 4; i++)
            if (memcmp(s->img[i], bufs[i], NB * sizeof(float))) {
                ok = 0;
                tc_fail("bad merge %s: buffer %d written although the call failed", label, i);
                break;
            }
    }
    if (ok) tc_pass("bad merge %s: %s \"%s\"", label, flashc_status_string(st), msg);
}

#define M_CASE(label, want, name, ...)                                                                                 \
    do {                                                                                                               \
        bad_m s_;                                                                                                      \
        bad_m *s = &s_;                                                                                                \
        memset(s, 0, sizeof *s);                                                                                       \
        s->ctx = ctx;                                                                                                  \
        s->parts = tc_alloc(NB * 4), s->lp = tc_alloc(NB * 4), s->out = tc_alloc(NB * 4), s->lse = tc_alloc(NB * 4);   \
        for (int i_ = 0; i_ < 4; i_++) s->img[i_] = tc_alloc(NB * 4);                                                  \
        for (int e_ = 0; e_ < NB; e_++) s->parts[e_] = (float)e_, s->lp[e_] = 0.5f, s->out[e_] = -1, s->lse[e_] = -1;  \
        s->m.n_parts = 3, s->m.batch = 2, s->m.seqlen = 2, s->m.heads = 2, s->m.head_dim = 8;                         \
        s->parts_arg = s->parts, s->lp_arg = s->lp, s->out_arg = s->out, s->lse_arg = s->lse;                          \
        __VA_ARGS__;                                                                                                   \
        bad_merge_check(s, label, want, name);                                                                         \
        free(s->parts), free(s->lp), free(s->out), free(s->lse);                                                       \
        for (int i_ = 0; i_ < 4; i_++) free(s->img[i_]);                                                               \
    } while (0)

static void bad_merge(flashc_ctx *ctx) {
    const flashc_status INV = FLASHC_ERR_INVALID_ARG;
    M_CASE("control", FLASHC_OK, NULL, (void)s);
    M_CASE("control in place", FLASHC_OK, NULL, s->out_arg = s->parts; s->lse_arg = s->lp);
    M_CASE("control lse NULL", FLASHC_OK, NULL, s->lse_arg = NULL);
    M_CASE("m NULL", INV, "m", s->null_m = 1);
    M_CASE("n_parts = 0", INV, "n_parts", s->m.n_parts = 0);
    M_CASE("batch = 0", INV, "batch", s->m.batch = 0);
    M_CASE("seqlen < 0", INV, "seqlen", s->m.seqlen = -1);
    M_CASE("heads = 0", INV, "heads", s->m.heads = 0);
    M_CASE("head_dim = 0", INV, "head_dim", s->m.head_dim = 0);
    M_CASE("part_dtype = 9", INV, "part_dtype", s->m.part_dtype = (flashc_dtype)9);
    M_CASE("out_dtype = e4m3", FLASHC_ERR_UNSUPPORTED, "out_dtype", s->m.out_dtype = FLASHC_DTYPE_E4M3);
    M_CASE("part_stride < 0", INV, "part_stride", s->m.part_stride[0] = -1; s->m.part_stride[1] = 32;
           s->m.part_stride[2] = 16; s->m.part_stride[3] = 8);
    M_CASE("part_stride overlapping parts", INV, "part_stride", s->m.part_stride[0] = 8; s->m.part_stride[1] = 32;
           s->m.part_stride[2] = 16; s->m.part_stride[3] = 8);
    M_CASE("out_stride overlapping", INV, "out_stride", s->m.out_stride[0] = 32; s->m.out_stride[1] = 16;
           s->m.out_stride[2] = 4);
    M_CASE("out_parts NULL", INV, "out_parts", s->parts_arg = NULL);
    M_CASE("lse_parts NULL", INV, "lse_parts", s->lp_arg = NULL);
    M_CASE("out NULL", INV, "out", s->out_arg = NULL);
    M_CASE("out = out_parts with another dtype", INV, "out", s->out_arg = s->parts; s->m.out_dtype = FLASHC_DTYPE_BF16);
    M_CASE("out inside out_parts", INV, "out", s->out_arg = s->parts + 64);
    M_CASE("lse inside lse_parts", INV, "lse", s->lse_arg = s->lp + 3);
    M_CASE("lse overlaps out", INV, "lse", s->lse_arg = s->out + 10);
    M_CASE("m.reserved", INV, "reserved", s->m.reserved[7] = 3);
}


// CUDA only: cache_seqlens / cache_batch_idx are device arrays that are clamped, not validated
// (include/flashc.h). A call with entries out of range must equal, bit for bit, the call with the
// entries clamped by hand (c into [0, cap - seqlen_new], cache_batch_idx into [0, num_cache_rows)),
// rotary positions past seqlen_ro clamped in both; and the split-KV merge (forced splits, done by
// the last split to finish) must give bit-identical results run to run.
static void run_clamp_dev(flashc_ctx *ctx, uint64_t seed) {
    const char *label = "cuda clamps bad cache_seqlens / cache_batch_idx / rotary positions; split merge deterministic";
    if (g_filter && !strstr(label, g_filter)) return;
    tc_rng r = tc_rng_make(seed, 23);
    const flashc_dtype dt = FLASHC_DTYPE_BF16;
    const int B = 3, Sq = 2, H = 4, Hkv = 2, D = 64, cap = 300, snew = 2, rows = 4, rd = 32, seqlen_ro = 200;
    const size_t es = 2;
    const int64_t kv_el = (int64_t)rows * cap * Hkv * D, q_el = (int64_t)B * Sq * H * D, new_el = (int64_t)B * snew * Hkv * D;
    const int64_t ro_el = (int64_t)seqlen_ro * (rd / 2);
    void *kc = tc_alloc((size_t)kv_el * es), *vc = tc_alloc((size_t)kv_el * es), *q = tc_alloc((size_t)q_el * es);
    void *kn = tc_alloc((size_t)new_el * es), *vn = tc_alloc((size_t)new_el * es);
    void *cs = tc_alloc((size_t)ro_el * es), *sn = tc_alloc((size_t)ro_el * es);
    for (int64_t e = 0; e < kv_el; e++) flashc__store(kc, e, dt, (float)tc_normal(&r)), flashc__store(vc, e, dt, (float)tc_normal(&r));
    for (int64_t e = 0; e < q_el; e++) flashc__store(q, e, dt, (float)tc_normal(&r));
    for (int64_t e = 0; e < new_el; e++) flashc__store(kn, e, dt, (float)tc_normal(&r)), flashc__store(vn, e, dt, (float)tc_normal(&r));
    for (int64_t e = 0; e < ro_el; e++) {
        const double th = (double)(e / (rd / 2)) * pow(10000.0, -2.0 * (double)(e % (rd / 2)) / rd);
        flashc__store(cs, e, dt, (float)cos(th)), flashc__store(sn, e, dt, (float)sin(th));
    }
    const int32_t bad_cl[3] = {-7, 5000, 150}, good_cl[3] = {0, cap - snew, 150};
    const int32_t bad_cbi[3] = {-3, 99, 1}, good_cbi[3] = {0, rows - 1, 1};
    void *out[3][4]; // run (bad, good, good again) x (o, lse, k cache, v cache), host copies
    const size_t bytes[4] = {(size_t)q_el * es, sizeof(float) * (size_t)B * H * Sq, (size_t)kv_el * es, (size_t)kv_el * es};
    flashc_status st = FLASHC_OK;
    for (int run = 0; run < 3 && st == FLASHC_OK; run++) {
        flashc_attn_desc d;
        memset(&d, 0, sizeof d);
        d.batch = B, d.seqlen_q = Sq, d.seqlen_k = cap, d.heads = H, d.heads_kv = Hkv, d.head_dim = D, d.dtype = dt;
        d.causal = 1;
        flashc_fill_contiguous_strides(&d);
        flashc_kvcache_desc kv;
        memset(&kv, 0, sizeof kv);
        kv.seqlen_new = snew, kv.num_splits = 3, kv.num_cache_rows = rows;
        kv.rotary_dim = rd, kv.seqlen_ro = seqlen_ro;
        int32_t *dcl = tc_dev_put(ctx, run ? good_cl : bad_cl, sizeof bad_cl);
        int32_t *dcbi = tc_dev_put(ctx, run ? good_cbi : bad_cbi, sizeof bad_cbi);
        void *dkc = tc_dev_put(ctx, kc, bytes[2]), *dvc = tc_dev_put(ctx, vc, bytes[3]), *dq = tc_dev_put(ctx, q, bytes[0]);
        void *dkn = tc_dev_put(ctx, kn, (size_t)new_el * es), *dvn = tc_dev_put(ctx, vn, (size_t)new_el * es);
        void *dcs = tc_dev_put(ctx, cs, (size_t)ro_el * es), *dsn = tc_dev_put(ctx, sn, (size_t)ro_el * es);
        void *dout = ctx->ops->ws_alloc(ctx, bytes[0]);
        float *dlse = ctx->ops->ws_alloc(ctx, bytes[1]);
        kv.cache_seqlens = dcl, kv.cache_batch_idx = dcbi, kv.rotary_cos = dcs, kv.rotary_sin = dsn;
        st = flashc_fwd_kvcache(ctx, &d, &kv, dq, dkc, dvc, dkn, dvn, dout, dlse, NULL, 0, NULL);
        const void *dev[4] = {dout, dlse, dkc, dvc};
        for (int t = 0; t < 4; t++) out[run][t] = tc_alloc(bytes[t]), tc_dev_get(ctx, out[run][t], dev[t], bytes[t]);
        tc_dev_free(ctx, NULL, dcl), tc_dev_free(ctx, NULL, dcbi), tc_dev_free(ctx, NULL, dkc), tc_dev_free(ctx, NULL, dvc);
        tc_dev_free(ctx, NULL, dq), tc_dev_free(ctx, NULL, dkn), tc_dev_free(ctx, NULL, dvn), tc_dev_free(ctx, NULL, dcs);
        tc_dev_free(ctx, NULL, dsn), tc_dev_free(ctx, NULL, dout), tc_dev_free(ctx, NULL, dlse);
        if (st != FLASHC_OK) {
            tc_fail("%s: run %d: flashc_fwd_kvcache = %s: %s", label, run, flashc_status_string(st), flashc_ctx_last_error(ctx));
            for (int t = 0; t < 4; t++) free(out[run][t]);
        }
    }
    if (st == FLASHC_OK) {
        const char *what[4] = {"o", "lse", "k cache", "v cache"};
        int bad = 0;
        for (int t = 0; t < 4; t++) {
            if (memcmp(out[0][t], out[1][t], bytes[t])) bad++, tc_fail("%s: %s of the bad entries != clamped by hand", label, what[t]);
            if (memcmp(out[1][t], out[2][t], bytes[t])) bad++, tc_fail("%s: %s differs run to run", label, what[t]);
        }
        int finite = 1;
        for (int64_t e = 0; e < q_el; e++) finite &= isfinite(flashc__load(out[1][0], e, dt));
        if (!finite) bad++, tc_fail("%s: o not finite", label);
        if (!bad) tc_pass("%s", label);
        for (int run = 0; run < 3; run++)
            for (int t = 0; t < 4; t++) free(out[run][t]);
    }
    free(kc), free(vc), free(q), free(kn), free(vn), free(cs), free(sn);
}

// Rows that see no key get O = 0 and lse = +inf, even when keys that other rows of the same CTA see
// hold an Inf in V (a masked key's P = 0 times V = Inf is NaN inside the tensor cores' P V): causal
// with seqlen_q > the cache length, so the first seqlen_q - n queries see nothing. The rows that see
// the Inf are not checked (their output is not finite by right).
static void run_nokey_inf_v(flashc_ctx *ctx, const char *bname, flashc_dtype dt, int D, int Sq, int n, int H,
                            int splits) {
    char label[256];
    snprintf(label, sizeof label, "kvcache %s rows with no key beside an Inf in V: %s D=%d Sq=%d n=%d H=%d/1 splits=%d",
             bname, tc_dtype_name(dt), D, Sq, n, H, splits);
    if (g_filter && !strstr(label, g_filter)) return;
    tc_rng r = tc_rng_make(g_seed, 29 + D + Sq);
    const int cap = n + 64;
    const size_t es = flashc__dtype_size(dt);
    const int64_t kv_el = (int64_t)cap * D, q_el = (int64_t)Sq * H * D;
    void *kc = tc_alloc((size_t)kv_el * es), *vc = tc_alloc((size_t)kv_el * es), *q = tc_alloc((size_t)q_el * es);
    void *o = tc_alloc((size_t)q_el * es);
    float *lse = malloc(sizeof(float) * (size_t)H * Sq);
    for (int64_t e = 0; e < kv_el; e++) flashc__store(kc, e, dt, (float)tc_normal(&r)), flashc__store(vc, e, dt, (float)tc_normal(&r));
    for (int64_t e = 0; e < q_el; e++) flashc__store(q, e, dt, (float)tc_normal(&r));
    for (int d = 0; d < D; d++) flashc__store(vc, d, dt, INFINITY); // key 0: every query that sees a key sees it
    const int32_t cl = n;
    flashc_attn_desc d;
    memset(&d, 0, sizeof d);
    d.batch = 1, d.seqlen_q = Sq, d.seqlen_k = cap, d.heads = H, d.heads_kv = 1, d.head_dim = D, d.dtype = dt;
    d.causal = 1;
    flashc_fill_contiguous_strides(&d);
    flashc_kvcache_desc kv;
    memset(&kv, 0, sizeof kv);
    kv.num_splits = splits;
    int32_t *dcl = tc_dev_put(ctx, &cl, sizeof cl);
    void *dkc = tc_dev_put(ctx, kc, (size_t)kv_el * es), *dvc = tc_dev_put(ctx, vc, (size_t)kv_el * es);
    void *dq = tc_dev_put(ctx, q, (size_t)q_el * es);
    for (int64_t e = 0; e < q_el; e++) tc_store_nan(o, e, dt);
    for (int e = 0; e < H * Sq; e++) lse[e] = NAN;
    void *dout = tc_dev_put(ctx, o, (size_t)q_el * es);
    float *dlse = tc_dev_put(ctx, lse, sizeof(float) * (size_t)H * Sq);
    kv.cache_seqlens = dcl;
    const flashc_status st = flashc_fwd_kvcache(ctx, &d, &kv, dq, dkc, dvc, NULL, NULL, dout, dlse, NULL, 0, NULL);
    tc_dev_get(ctx, o, dout, (size_t)q_el * es);
    tc_dev_get(ctx, lse, dlse, sizeof(float) * (size_t)H * Sq);
    if (st != FLASHC_OK) {
        tc_fail("%s: flashc_fwd_kvcache = %s: %s", label, flashc_status_string(st), flashc_ctx_last_error(ctx));
    } else {
        int bad = 0;
        for (int i = 0; i < Sq - n; i++) // query i sees keys [0, i + n - Sq]: none
            for (int h = 0; h < H; h++) {
                bad += !(isinf(lse[h * Sq + i]) && lse[h * Sq + i] > 0);
                for (int e = 0; e < D; e++) bad += flashc__load(o, ((int64_t)i * H + h) * D + e, dt) != 0.0;
            }
        if (bad) tc_fail("%s: %d values of the rows with no key are not 0 (o) / +inf (lse)", label, bad);
        else tc_pass("%s", label);
    }
    tc_dev_free(ctx, &cl, dcl), tc_dev_free(ctx, kc, dkc), tc_dev_free(ctx, vc, dvc), tc_dev_free(ctx, q, dq);
    tc_dev_free(ctx, o, dout), tc_dev_free(ctx, lse, dlse);
    free(kc), free(vc), free(q), free(o), free(lse);
}

// ------------------------------------------------------------------------------------------------

// --fuzz N: N random KV-cache cases and N / 4 random paged prefills drawn from --seed, over wider
// ranges than the sweeps (any page size from 1 to 256, capacities to 3000, head dims to 256 (a
// quarter of them not multiples of 8), seqlen_q 0 to 40, every option on or off), each with its own inputs.
static void kv_fuzz(flashc_ctx *ctx, const char *bname, int n) {
    static const int HH[][2] = {{1, 1}, {2, 1}, {4, 1}, {4, 4}, {8, 2}, {6, 3}, {12, 4}, {32, 8}};
    static const int PAGES[] = {0, 0, 0, 1, 2, 3, 7, 16, 17, 64, 100, 256};
    static const flashc_dtype DT[3] = {FLASHC_DTYPE_F32, FLASHC_DTYPE_BF16, FLASHC_DTYPE_F16};
    tc_rng r = tc_rng_make(g_seed, 0xf022);
    for (int k = 0; k < n;) {
        kvc c;
        memset(&c, 0, sizeof c);
        c.tag = "fuzz";
        c.dt = DT[tc_int(&r, 3)];
        const int hh = tc_int(&r, 8);
        c.H = HH[hh][0], c.Hkv = HH[hh][1];
        c.B = 1 + tc_int(&r, 6);
        c.Sq = tc_int(&r, 4) ? 1 + tc_int(&r, 4) : tc_int(&r, 41); // mostly decode
        c.D = 8 * (1 + tc_int(&r, 32));
        if (tc_int(&r, 4) == 0) c.D -= 1 + tc_int(&r, 7); // any head dim on the CPU (run_kv: multiples of 8 on CUDA)
        c.cap = 1 + tc_int(&r, tc_int(&r, 4) ? 300 : 3000);
        c.page = PAGES[tc_int(&r, 12)];
        if (tc_int(&r, 5) == 0) c.full = 1;
        else {
            c.snew = tc_int(&r, 7);
            if (c.snew > c.cap) c.snew = c.cap;
        }
        if (tc_int(&r, 2) && c.D >= 2) {
            c.rot = 1 + tc_int(&r, 2);
            if (tc_int(&r, 3) == 0 || c.D % 2) c.rd = 2 * (1 + tc_int(&r, c.D / 2)); // (rotary_dim is even)
        }
        c.causal = tc_int(&r, 2);
        if (tc_int(&r, 5) == 0) c.use_window = 1, c.wl = tc_int(&r, 3) ? tc_int(&r, 200) : -1, c.wr = tc_int(&r, 2) ? tc_int(&r, 5) : -1;
        if (tc_int(&r, 6) == 0) c.softcap = (float)(1 + tc_int(&r, 20));
        if (tc_int(&r, 6) == 0) c.alibi = 1 + tc_int(&r, 2);
        if (tc_int(&r, 6) == 0) c.scale = (float)(0.05 + 0.5 * tc_uniform(&r));
        if (!c.page && tc_int(&r, 5) == 0) c.cbi = 1;
        c.splits = tc_int(&r, 3) ? 0 : tc_int(&r, 9);
        c.pad = tc_int(&r, 4) == 0;
        c.no_lse = tc_int(&r, 8) == 0;
        c.own_ws = tc_int(&r, 4) == 0;
        if ((double)c.B * (c.Sq + 1) * c.H * c.cap * c.D > 3e7) continue; // (the expectation is fp64 on the host)
        run_kv(ctx, bname, &c, g_seed * 1000003u + (uint64_t)k);
        k++;
    }
    static const int PPAGES[] = {1, 2, 5, 16, 33, 64, 128, 256};
    static const int BIG[] = {0, 0, 64, 128};
    for (int k = 0; k < (n + 3) / 4; k++) {
        pgc c; // (field by field: an initializer list's draws are not sequenced)
        c.dt = DT[tc_int(&r, 3)], c.page = PPAGES[tc_int(&r, 8)], c.varlen = tc_int(&r, 2), c.causal = tc_int(&r, 2);
        c.used = tc_int(&r, 2), c.misalign = tc_int(&r, 4) == 0, c.own_ws = tc_int(&r, 4) == 0;
        c.big = BIG[tc_int(&r, 4)], c.few = tc_int(&r, 3) == 0;
        run_paged_fwd(ctx, bname, c, g_seed * 1000033u + (uint64_t)k);
    }
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v")) tc_verbose = 1;
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) g_backend = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) g_seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--filter") && i + 1 < argc) g_filter = argv[++i];
        else if (!strcmp(argv[i], "--fuzz") && i + 1 < argc && (g_fuzz = atoi(argv[i + 1])) > 0) i++;
        else {
            fprintf(stderr, "usage: %s [-v] [--backend ref|cpu|cuda] [--seed N] [--filter STR] [--fuzz N]\n", argv[0]);
            return 2;
        }
    }
    const char *names[3] = {"ref", "cpu", "cuda"};
    const flashc_backend kinds[3] = {FLASHC_BACKEND_REF, FLASHC_BACKEND_CPU, FLASHC_BACKEND_CUDA};
    if (g_backend && strcmp(g_backend, "ref") && strcmp(g_backend, "cpu") && strcmp(g_backend, "cuda")) {
        fprintf(stderr, "--backend %s: expected ref, cpu or cuda\n", g_backend);
        return 2;
    }
    for (int bi = 0; bi < 3; bi++) {
        if (g_backend && strcmp(g_backend, names[bi])) continue;
        flashc_ctx *ctx = NULL;
        if (kinds[bi] == FLASHC_BACKEND_CUDA) {
            flashc_status cst = flashc_ctx_create(&ctx, FLASHC_BACKEND_CUDA, 0);
            if (cst == FLASHC_ERR_NO_BACKEND) { // asked for by name (gpu.sh): 0 checks must not read as a pass
                const char *why = flashc_ctx_last_error(NULL); // not compiled in, or no usable device
                if (g_backend) tc_fail("cuda: --backend cuda, but the backend is unavailable (%s)", why);
                else printf("cuda: skipped (%s)\n", why);
                continue;
            }
            if (cst != FLASHC_OK) {
                tc_fail("cuda: flashc_ctx_create = %s (%s)", flashc_status_string(cst), flashc_ctx_last_error(NULL));
                continue;
            }
        } else {
            ctx = make_ctx(kinds[bi]);
        }
        if (g_fuzz > 0) {
            kv_fuzz(ctx, names[bi], g_fuzz);
            flashc_ctx_free(ctx);
            continue;
        }
        kv_sweep(ctx, names[bi]);
        const int pages[3] = {1, 16, 256};
        for (int pi = 0; pi < 3 && !g_filter; pi++)
            for (int varlen = 0; varlen <= 1; varlen++)
                for (int di = 0; di < 2; di++)
                    for (int used = 0; used <= 1; used++) {
                        pgc c = {di ? FLASHC_DTYPE_BF16 : FLASHC_DTYPE_F32, pages[pi], varlen, (pi + varlen) % 2, used,
                                 (di + varlen) % 2, (pi + used) % 2, 0, 0};
                        run_paged_fwd(ctx, names[bi], c, g_seed + 100 + pi * 8 + varlen * 4 + di * 2 + used);
                    }
        if (!g_filter) { // hundreds of keys at D = 64 / 128: on CUDA (sm_90) the TMA kernel, plain and RAGGED
            const pgc big[3] = {{FLASHC_DTYPE_BF16, 64, 0, 0, 0, 0, 1, 64, 0},
                                {FLASHC_DTYPE_F32, 16, 1, 1, 1, 0, 1, 64, 0},
                                {FLASHC_DTYPE_BF16, 128, 0, 1, 1, 1, 0, 128, 0}};
            for (int i = 0; i < 3; i++) run_paged_fwd(ctx, names[bi], big[i], g_seed + 130 + i);
            for (int i = 0; i < 8; i++) { // a few queries a sequence: the decode kernel's range (the varlen
                // ones, i & 2: 1, 1, 4 queries, on CUDA a query row a decode sequence), in the caller's
                // workspace (i = 2, 6), on misaligned pools (i = 3, 7), one without a mask (i = 7)
                pgc c = {i % 2 ? FLASHC_DTYPE_BF16 : FLASHC_DTYPE_F32, i / 4 ? 16 : 1, i / 2 % 2, i != 7, i % 2,
                         i % 4 == 3, i % 4 == 2, 0, 1};
                run_paged_fwd(ctx, names[bi], c, g_seed + 140 + i);
            }
            const pgc few_big[3] = {{FLASHC_DTYPE_BF16, 16, 1, 1, 1, 0, 1, 128, 1}, // hundreds of keys: split-KV
                                    {FLASHC_DTYPE_F32, 256, 1, 0, 0, 0, 0, 64, 1},
                                    {FLASHC_DTYPE_BF16, 16, 0, 1, 0, 0, 0, 128, 1}};
            for (int i = 0; i < 3; i++) run_paged_fwd(ctx, names[bi], few_big[i], g_seed + 150 + i);
        }
        const flashc_dtype dts[3] = {FLASHC_DTYPE_F32, FLASHC_DTYPE_BF16, FLASHC_DTYPE_F16};
        for (int pd = 0; pd < 3; pd++)
            for (int od = 0; od < 3; od++)
                run_merge_random(ctx, names[bi], dts[pd], dts[od], 0, (pd + od) % 2, g_seed + 200 + pd * 3 + od);
        for (int pd = 0; pd < 3; pd++)
            for (int strided = 0; strided <= 1; strided++)
                run_merge_random(ctx, names[bi], dts[pd], dts[pd], 1, strided, g_seed + 300 + pd * 2 + strided);
        run_merge_attention(ctx, names[bi], g_seed + 400);
        if (tc_on_dev(ctx)) run_clamp_dev(ctx, g_seed + 500);
        for (int dti = 0; dti < 2; dti++)
            for (int di = 0; di < 3; di++) {
                const flashc_dtype dt = dti ? FLASHC_DTYPE_F16 : FLASHC_DTYPE_BF16;
                const int D = 64 << di;
                run_nokey_inf_v(ctx, names[bi], dt, D, 4, 2, 4, 1);       // one CTA: rows 0-7 of 16 see nothing
                run_nokey_inf_v(ctx, names[bi], dt, D, 4, 2, 1, 1);       // queries 0-3 in one CTA at every D
                run_nokey_inf_v(ctx, names[bi], dt, D, 160, 130, 2, 3);   // split-KV: the merge of empty partials
            }
        if (tc_on_dev(ctx)) {
            tc_skip("bad input on cuda: the front end's checks, run on the host backends");
        } else if (!g_filter) {
            bad_kvcache(ctx);
            bad_merge(ctx);
        }
        flashc_ctx_free(ctx);
    }
    return tc_summary("test_kvcache");
}
