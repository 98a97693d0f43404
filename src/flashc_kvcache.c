// flashc_kvcache.c -- the KV-cache (decode) and merge entry points: flashc_kvcache_workspace_size,
// flashc_fwd_kvcache, flashc_merge. Validation in the style of src/flashc.c (every argument checked
// once, the message names it, nothing is written on error), then dispatch to the backend's
// fwd_kvcache / merge hooks. Also the host-memory pieces the host backends share: rotary, the
// append into the cache, and the fp64 merge.
//
// flashc_fwd_kvcache is FlashAttention-2's flash_attn_with_kvcache. Per sequence b, with c_b tokens
// in the cache: k_new / v_new go into rows c_b .. c_b + seqlen_new - 1 (k_new rotated at those
// positions), q is rotated at c_b + i (causal or windowed) or at c_b, and q attends to the first
// c_b + seqlen_new keys, mask aligned bottom-right. The backends receive a flashc_problem whose
// seqused_k_host holds those key counts, so the cache is an ordinary (paged, or row-indexed through
// cache_batch_idx) K/V of capacity Sk.
#include "flashc_internal.h"

#include <stdlib.h>

#define FAIL(ctx, st, ...) return flashc__fail((ctx), (st), __VA_ARGS__)

// The most splits a caller may force: each split costs an fp32 partial of (B, Sq, H, D) in the
// workspace; beyond ~1k splits every split of a 2^30-key cache is still > 1M keys.
#define FLASHC_MAX_SPLITS 1024

// ------------------------------------------------------------------------------------------------
// rotary and append (host memory)

// x rounded to dtype dt and back, so the fp64 rotation is rounded once, like a stored value
static float round_to(double x, flashc_dtype dt) {
    float f = (float)x;
    switch (dt) {
    case FLASHC_DTYPE_BF16: return flashc__bf16_to_f32(flashc__f32_to_bf16(f));
    case FLASHC_DTYPE_F16: return flashc__f16_to_f32(flashc__f32_to_f16(f));
    default: return f;
    }
}

void flashc__rope_row(const flashc_kvcache_args *a, flashc_dtype dt, int32_t D, const void *x, int64_t x_off,
                      int64_t pos, void *dst, int64_t dst_off) {
    const int32_t rd = a->rotary_cos ? a->rotary_dim : 0, half = rd / 2;
    for (int32_t d = rd; d < D; d++) flashc__store(dst, dst_off + d, dt, flashc__load(x, x_off + d, dt));
    // GPT-J pairs (x_2i, x_2i+1) when interleaved, GPT-NeoX halves (x_i, x_i+rd/2) otherwise; the
    // pair is read before either element is written, so dst may be x itself
    for (int32_t i = 0; i < half; i++) {
        const int64_t i0 = a->rotary_interleaved ? 2 * i : i, i1 = a->rotary_interleaved ? 2 * i + 1 : i + half;
        const double x0 = flashc__load(x, x_off + i0, dt), x1 = flashc__load(x, x_off + i1, dt);
        const double c = flashc__load(a->rotary_cos, pos * half + i, dt);
        const double s = flashc__load(a->rotary_sin, pos * half + i, dt);
        flashc__store(dst, dst_off + i0, dt, round_to(x0 * c - x1 * s, dt));
        flashc__store(dst, dst_off + i1, dt, round_to(x0 * s + x1 * c, dt));
    }
}

void flashc__kvcache_append_host(const flashc_problem *p, const flashc_kvcache_args *a) {
    for (int b = 0; b < p->B && a->seqlen_new > 0; b++) {
        const flashc_seq s = flashc__seq(p, b);
        const int64_t c = a->cache_seqlens_host[b];
        for (int64_t t = 0; t < a->seqlen_new; t++) {
            // row c + t of sequence b, through the block table or cache_batch_idx when given
            const int64_t k_row = flashc__k_off(p, p->k_stride, b, &s, c + t);
            const int64_t v_row = flashc__k_off(p, p->v_stride, b, &s, c + t);
            for (int hk = 0; hk < p->H_kv; hk++) {
                const int64_t kn = b * a->knew_stride[0] + t * a->knew_stride[1] + hk * a->knew_stride[2];
                const int64_t vn = b * a->vnew_stride[0] + t * a->vnew_stride[1] + hk * a->vnew_stride[2];
                flashc__rope_row(a, p->dtype, p->D, a->k_new, kn, c + t, a->k_cache, k_row + hk * p->k_stride[2]);
                const size_t es = flashc__dtype_size(p->dtype);
                memcpy((char *)a->v_cache + es * (size_t)(v_row + hk * p->v_stride[2]),
                       (const char *)a->v_new + es * (size_t)vn, es * (size_t)p->D);
            }
        }
    }
}

void flashc__kvcache_rotate_q_host(const flashc_problem *p, const flashc_kvcache_args *a, void *q_rot) {
    for (int b = 0; b < p->B; b++)
        for (int64_t i = 0; i < p->Sq; i++) {
            const int64_t pos = a->cache_seqlens_host[b] + (a->rotary_q_per_row ? i : 0);
            for (int h = 0; h < p->H; h++) {
                const int64_t src = b * p->q_stride[0] + i * p->q_stride[1] + h * p->q_stride[2];
                const int64_t dst = (((int64_t)b * p->Sq + i) * p->H + h) * p->D;
                flashc__rope_row(a, p->dtype, p->D, a->q, src, pos, q_rot, dst);
            }
        }
}

// ------------------------------------------------------------------------------------------------
// the merge (host memory, fp64)

// Rows are merged in chunks of this many elements of D, so the accumulator lives on the stack for
// any head_dim; part 0's chunk is read completely before out's is written (in place is safe).
#define MERGE_CHUNK 64

void flashc__merge_host_rows(const flashc_merge_problem *m, const flashc_merge_args *a, int64_t r0, int64_t r1) {
    const int64_t lse_part_stride = (int64_t)m->B * m->H * m->S;
    const float *part_f32 = m->part_dtype == FLASHC_DTYPE_F32 ? a->out_parts : NULL;
    for (int64_t r = r0; r < r1; r++) {
        const int h = (int)(r % m->H);
        const int64_t s = r / m->H % m->S, b = r / m->H / m->S;
        const int64_t l_off = (b * m->H + h) * m->S + s;
        // lse = log sum_s exp(lse_s) over the parts that saw a key (lse_s = +inf: none; -inf has
        // weight 0 too); NaN propagates
        double l_max = -INFINITY;
        int any = 0;
        for (int sp = 0; sp < m->n_parts; sp++) {
            const double x = a->lse_parts[sp * lse_part_stride + l_off];
            if (isinf(x)) continue;
            any = 1;
            if (!(x <= l_max)) l_max = x;
        }
        double sum = 0.0;
        for (int sp = 0; sp < m->n_parts && any; sp++) {
            const double x = a->lse_parts[sp * lse_part_stride + l_off];
            if (!isinf(x)) sum += exp(x - l_max);
        }
        const double L = any ? l_max + log(sum) : INFINITY;
        const int64_t o_off = b * m->out_stride[0] + s * m->out_stride[1] + h * m->out_stride[2];
        for (int32_t d0 = 0; d0 < m->D; d0 += MERGE_CHUNK) {
            const int32_t nd = m->D - d0 < MERGE_CHUNK ? m->D - d0 : MERGE_CHUNK;
            double acc[MERGE_CHUNK] = {0};
            for (int sp = 0; sp < m->n_parts && any; sp++) {
                const double x = a->lse_parts[sp * lse_part_stride + l_off];
                if (isinf(x)) continue; // saw no key: its out is not read
                const double w = exp(x - L);
                const int64_t p_off = sp * m->part_stride[0] + b * m->part_stride[1] + s * m->part_stride[2] +
                                      h * m->part_stride[3] + d0;
                if (part_f32)
                    for (int32_t d = 0; d < nd; d++) acc[d] += w * part_f32[p_off + d];
                else
                    for (int32_t d = 0; d < nd; d++) acc[d] += w * flashc__load(a->out_parts, p_off + d, m->part_dtype);
            }
            for (int32_t d = 0; d < nd; d++) flashc__store(a->out, o_off + d0 + d, m->out_dtype, (float)acc[d]);
        }
        if (a->lse) a->lse[l_off] = (float)L;
    }
}

flashc_status flashc__merge_host(flashc_ctx *ctx, const flashc_merge_problem *m, const flashc_merge_args *a) {
    (void)ctx;
    flashc__merge_host_rows(m, a, 0, (int64_t)m->B * m->S * m->H);
    return FLASHC_OK;
}

// ------------------------------------------------------------------------------------------------
// flashc_fwd_kvcache: validation

// cache_seqlens (and cache_batch_idx, block_table on a host backend) read on the host: every
// c_b + seqlen_new, page and rotary position checked; the host backends get host copies.
static flashc_status check_lengths(flashc_ctx *ctx, const flashc_kvcache_desc *kv, flashc_problem *p,
                                   flashc_kvcache_args *a) {
    flashc_status st;
    const int on_dev = ctx->ops->read_i32 != NULL;
    const size_t B = (size_t)p->B;
    if (!flashc__host_i32(ctx, 3 * B))
        FAIL(ctx, FLASHC_ERR_ALLOC, "out of host memory for %zu cache_seqlens entries", 3 * B);
    if (kv->cache_seqlens && (st = flashc__fetch_i32(ctx, 0, kv->cache_seqlens, p->B)) != FLASHC_OK) return st;
    if (!on_dev && kv->cache_batch_idx && (st = flashc__fetch_i32(ctx, 2 * B, kv->cache_batch_idx, p->B)) != FLASHC_OK)
        return st;
    int32_t *c = ctx->host_i32, *used = ctx->host_i32 + B, *cbi = ctx->host_i32 + 2 * B;
    for (int b = 0; b < p->B; b++) {
        if (!kv->cache_seqlens) c[b] = p->Sk;
        if (c[b] < 0) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "cache_seqlens[%d] = %d: must be >= 0", b, c[b]);
        const int64_t n = (int64_t)c[b] + a->seqlen_new;
        if (n > p->Sk)
            FAIL(ctx, FLASHC_ERR_INVALID_ARG,
                 "cache_seqlens[%d] = %d: with seqlen_new = %d the sequence needs %lld rows, more than the cache "
                 "capacity seqlen_k = %d",
                 b, c[b], a->seqlen_new, (long long)n, p->Sk);
        used[b] = (int32_t)n;
        if (!on_dev && kv->cache_batch_idx && cbi[b] < 0)
            FAIL(ctx, FLASHC_ERR_INVALID_ARG, "cache_batch_idx[%d] = %d: must be >= 0", b, cbi[b]);
        if (!on_dev && kv->cache_batch_idx && kv->num_cache_rows && cbi[b] >= kv->num_cache_rows)
            FAIL(ctx, FLASHC_ERR_INVALID_ARG, "cache_batch_idx[%d] = %d: must be < num_cache_rows = %lld", b, cbi[b],
                 (long long)kv->num_cache_rows);
        if (p->block_table && !on_dev) // a device table is clamped by the kernels instead
            for (int64_t i = 0; i < flashc__n_pages(n, p->page_size); i++) {
                const int32_t page = p->block_table[(int64_t)b * p->block_table_stride + i];
                if (page < 0 || page >= p->num_pages)
                    FAIL(ctx, FLASHC_ERR_INVALID_ARG, "block_table[%d][%lld] = %d: must be in [0, num_pages = %d)", b,
                         (long long)i, page, p->num_pages);
            }
        if (a->rotary_cos) {
            int64_t last = -1; // the largest position rotated for sequence b
            if (a->seqlen_new > 0) last = n - 1;
            if (p->Sq > 0) {
                const int64_t q_last = c[b] + (a->rotary_q_per_row ? p->Sq - 1 : 0);
                if (q_last > last) last = q_last;
            }
            if (last >= a->seqlen_ro)
                FAIL(ctx, FLASHC_ERR_INVALID_ARG,
                     "seqlen_ro = %d: sequence %d rotates position %lld (cache_seqlens = %d, seqlen_new = %d, "
                     "seqlen_q = %d); cos / sin need more rows",
                     a->seqlen_ro, b, (long long)last, c[b], a->seqlen_new, p->Sq);
        }
    }
    if (!on_dev) { // host copies for the host backends (on a device backend they would be stale pointers)
        p->seqused_k_host = used;
        if (kv->cache_batch_idx) p->cache_batch_idx = cbi;
        a->cache_seqlens_host = c;
    }
    return FLASHC_OK;
}

// The problem and the args (tensor pointers aside) of one flashc_fwd_kvcache call. On a host
// backend, host copies of cache_seqlens, the key counts and cache_batch_idx live in ctx->host_i32:
// [0, B), [B, 2B), [2B, 3B). On a device backend nothing is read back (check_lengths' comment).
static flashc_status kv_resolve(flashc_ctx *ctx, const flashc_attn_desc *d, const flashc_kvcache_desc *kv,
                                flashc_problem *p, flashc_kvcache_args *a) {
    if (!ctx) return FLASHC_ERR_INVALID_ARG;
    ctx->err[0] = 0;
    if (!d) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "desc is NULL");
    if (!kv) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "kv (the flashc_kvcache_desc) is NULL");
    for (size_t i = 0; i < sizeof kv->reserved / sizeof kv->reserved[0]; i++)
        if (kv->reserved[i]) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "kv.reserved[%zu] must be zero", i);
    if (d->cu_seqlens_q || d->cu_seqlens_k)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "cu_seqlens_q / cu_seqlens_k: flashc_fwd_kvcache takes batch-mode q "
                                          "(batch, seqlen_q, heads, head_dim); the key counts come from cache_seqlens");
    if (d->seqused_k)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "seqused_k: not with flashc_fwd_kvcache (cache_seqlens gives the key counts)");
    flashc_status st = flashc__resolve(ctx, d, p, FLASHC__FOR_KVCACHE);
    if (st != FLASHC_OK) return st;

    memset(a, 0, sizeof *a);
    if (kv->seqlen_new < 0 || kv->seqlen_new > p->Sk)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "seqlen_new = %d: must be in [0, seqlen_k = %d] (the cache capacity)",
             kv->seqlen_new, p->Sk);
    if (kv->num_splits < 0 || kv->num_splits > FLASHC_MAX_SPLITS)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "num_splits = %d: must be in [0, %d] (0 = chosen by the library)",
             kv->num_splits, FLASHC_MAX_SPLITS);
    if (kv->cache_batch_idx && p->block_table)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG,
             "cache_batch_idx: not with a block_table (the table already maps each sequence to its pages)");
    if (!kv->cache_seqlens && kv->seqlen_new > 0)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG,
             "cache_seqlens is NULL (a full cache of seqlen_k = %d tokens) but seqlen_new = %d tokens are to be appended",
             p->Sk, kv->seqlen_new);

    // rotary
    if (kv->rotary_cos || kv->rotary_sin) {
        if (!kv->rotary_cos) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "rotary_cos is NULL but rotary_sin is given");
        if (!kv->rotary_sin) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "rotary_sin is NULL but rotary_cos is given");
        if (kv->rotary_dim < 2 || kv->rotary_dim % 2 || kv->rotary_dim > p->D)
            FAIL(ctx, FLASHC_ERR_INVALID_ARG, "rotary_dim = %d: must be even, >= 2 and <= head_dim = %d",
                 kv->rotary_dim, p->D);
        if (kv->rotary_interleaved != 0 && kv->rotary_interleaved != 1)
            FAIL(ctx, FLASHC_ERR_INVALID_ARG, "rotary_interleaved = %d: must be 0 or 1", kv->rotary_interleaved);
        if (kv->seqlen_ro < 1) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "seqlen_ro = %d: must be >= 1", kv->seqlen_ro);
        a->rotary_cos = kv->rotary_cos;
        a->rotary_sin = kv->rotary_sin;
        a->rotary_dim = kv->rotary_dim;
        a->rotary_interleaved = kv->rotary_interleaved;
        a->seqlen_ro = kv->seqlen_ro;
        // as FlashAttention-2: the new queries sit at c_b, c_b + 1, ... only when the mask cares
        a->rotary_q_per_row = p->window_left >= 0 || p->window_right >= 0;
    } else if (kv->rotary_dim || kv->rotary_interleaved || kv->seqlen_ro) {
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "rotary_dim / rotary_interleaved / seqlen_ro are set but rotary_cos is NULL");
    }

    // k_new / v_new strides: (batch, seqlen_new, heads_kv, head_dim)
    a->seqlen_new = kv->seqlen_new;
    memcpy(a->knew_stride, kv->knew_stride, sizeof a->knew_stride);
    memcpy(a->vnew_stride, kv->vnew_stride, sizeof a->vnew_stride);
    if (a->seqlen_new > 0) {
        const int64_t contig[3] = {(int64_t)a->seqlen_new * p->H_kv * p->D, (int64_t)p->H_kv * p->D, p->D};
        if ((st = flashc__check_tensor(ctx, "knew", a->knew_stride, contig, 0, p->B, a->seqlen_new, p->H_kv, p->D)) !=
            FLASHC_OK)
            return st;
        if ((st = flashc__check_tensor(ctx, "vnew", a->vnew_stride, contig, 0, p->B, a->seqlen_new, p->H_kv, p->D)) !=
            FLASHC_OK)
            return st;
    }

    if (kv->num_cache_rows < 0)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "num_cache_rows = %lld: must be >= 0 (0 = not given)",
             (long long)kv->num_cache_rows);
    if (!kv->cache_batch_idx && !p->block_table && kv->num_cache_rows && p->B > kv->num_cache_rows)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "num_cache_rows = %lld: fewer cache rows than batch = %d, and no "
             "cache_batch_idx to map sequences to rows", (long long)kv->num_cache_rows, p->B);
    a->cache_seqlens = kv->cache_seqlens;
    a->num_splits = kv->num_splits;
    a->num_cache_rows = kv->num_cache_rows;
    p->cache_batch_idx = kv->cache_batch_idx;

    // A backend with device memory (read_i32 set: CUDA) gets cache_seqlens / cache_batch_idx as they
    // are: its kernels read them and clamp (include/flashc.h), since a copy to the host here would
    // be a synchronous round trip on every decode step. Only a full cache (cache_seqlens NULL, every
    // c_b = seqlen_k) is still checked, as that needs no read. The host backends read host memory:
    // every c_b + seqlen_new, page and rotary position is checked below.
    if (!ctx->ops->read_i32 || !kv->cache_seqlens)
        if ((st = check_lengths(ctx, kv, p, a)) != FLASHC_OK) return st;

    if ((st = ctx->ops->supports(ctx, p)) != FLASHC_OK) return st;
    if (!ctx->ops->fwd_kvcache)
        FAIL(ctx, FLASHC_ERR_UNSUPPORTED, "flashc_fwd_kvcache: the %s backend has no KV-cache path yet", ctx->ops->name);
    return FLASHC_OK;
}

size_t flashc_kvcache_workspace_size(flashc_ctx *ctx, const flashc_attn_desc *d, const flashc_kvcache_desc *kv) {
    flashc_problem p;
    flashc_kvcache_args a;
    if (kv_resolve(ctx, d, kv, &p, &a) != FLASHC_OK) return 0;
    return ctx->ops->kvcache_ws ? ctx->ops->kvcache_ws(ctx, &p, &a) : 0;
}

flashc_status flashc_fwd_kvcache(flashc_ctx *ctx, const flashc_attn_desc *d, const flashc_kvcache_desc *kv,
                                 const void *q, void *k_cache, void *v_cache, const void *k_new, const void *v_new,
                                 void *o, float *lse, void *workspace, size_t workspace_size, void *stream) {
    flashc_problem p;
    flashc_kvcache_args a;
    flashc_status st = kv_resolve(ctx, d, kv, &p, &a);
    if (st != FLASHC_OK) return st;
    if (!q) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "q is NULL");
    if (!k_cache) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "k_cache is NULL");
    if (!v_cache) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "v_cache is NULL");
    if (!o) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "o is NULL");
    if (a.seqlen_new > 0 && !k_new) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "k_new is NULL but seqlen_new = %d", a.seqlen_new);
    if (a.seqlen_new > 0 && !v_new) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "v_new is NULL but seqlen_new = %d", a.seqlen_new);
    if (k_cache == v_cache) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "v_cache aliases k_cache (the append writes both)");
    const void *in[5] = {q, k_cache, v_cache, a.seqlen_new ? k_new : NULL, a.seqlen_new ? v_new : NULL};
    const char *in_name[5] = {"q", "k_cache", "v_cache", "k_new", "v_new"};
    for (int i = 0; i < 5; i++)
        if (in[i] && o == in[i]) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "o aliases %s", in_name[i]);
    if (a.seqlen_new > 0)
        for (int i = 3; i < 5; i++)
            if (in[i] == k_cache || in[i] == v_cache)
                FAIL(ctx, FLASHC_ERR_INVALID_ARG, "%s aliases the cache it is appended to", in_name[i]);
    if ((void *)lse == o) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "lse aliases o");
    a.q = q;
    a.k_cache = k_cache;
    a.v_cache = v_cache;
    a.k_new = a.seqlen_new ? k_new : NULL;
    a.v_new = a.seqlen_new ? v_new : NULL;
    a.o = o;
    a.lse = lse;
    a.stream = stream;
    size_t need = ctx->ops->kvcache_ws ? ctx->ops->kvcache_ws(ctx, &p, &a) : 0;
    if ((st = flashc__pick_workspace(ctx, need, &workspace, &workspace_size)) != FLASHC_OK) return st;
    a.ws = workspace;
    a.ws_size = workspace_size;
    return ctx->ops->fwd_kvcache(ctx, &p, &a);
}

// ------------------------------------------------------------------------------------------------
// flashc_merge: validation

// n dims of the given sizes and element strides address no element twice: sorted by stride, each
// dim steps past the span of the smaller ones (as src/flashc.c's check, for any rank).
static int dims_overlap(int n, const int64_t *size, const int64_t *stride) {
    int64_t sz[6], sd[6];
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (size[i] == 0) return 0; // an empty tensor addresses nothing
        if (size[i] > 1) sz[k] = size[i], sd[k] = stride[i], k++;
    }
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && sd[j] < sd[j - 1]; j--) {
            int64_t t = sd[j]; sd[j] = sd[j - 1]; sd[j - 1] = t;
            t = sz[j]; sz[j] = sz[j - 1]; sz[j - 1] = t;
        }
    int64_t span = 1;
    for (int i = 0; i < k; i++) {
        if (sd[i] < span) return 1;
        span += (sz[i] - 1) * sd[i];
    }
    return 0;
}

// Bytes from the first to one past the last element addressed (0 if empty).
static size_t byte_span(int n, const int64_t *size, const int64_t *stride, size_t es) {
    int64_t last = 0;
    for (int i = 0; i < n; i++) {
        if (size[i] == 0) return 0;
        last += (size[i] - 1) * stride[i];
    }
    return (size_t)(last + 1) * es;
}

static int ranges_meet(const void *a, size_t na, const void *b, size_t nb) {
    const char *x = a, *y = b;
    return na && nb && x < y + nb && y < x + na;
}

static flashc_status check_merge_dtype(flashc_ctx *ctx, const char *name, flashc_dtype t) {
    if (t == FLASHC_DTYPE_F32 || t == FLASHC_DTYPE_F16 || t == FLASHC_DTYPE_BF16) return FLASHC_OK;
    if (t == FLASHC_DTYPE_E4M3) FAIL(ctx, FLASHC_ERR_UNSUPPORTED, "%s = E4M3: the merge takes F32, F16 or BF16", name);
    FAIL(ctx, FLASHC_ERR_INVALID_ARG, "%s = %d: not a flashc_dtype", name, (int)t);
}

flashc_status flashc_merge(flashc_ctx *ctx, const flashc_merge_desc *md, const void *out_parts, const float *lse_parts,
                           void *out, float *lse, void *stream) {
    if (!ctx) return FLASHC_ERR_INVALID_ARG;
    ctx->err[0] = 0;
    if (!md) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "m (the flashc_merge_desc) is NULL");
    for (size_t i = 0; i < sizeof md->reserved / sizeof md->reserved[0]; i++)
        if (md->reserved[i]) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "m.reserved[%zu] must be zero", i);
    if (md->n_parts < 1) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "n_parts = %d: must be >= 1", md->n_parts);
    if (md->batch < 1) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "batch = %d: must be >= 1", md->batch);
    if (md->seqlen < 0) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "seqlen = %d: must be >= 0", md->seqlen);
    if (md->heads < 1) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "heads = %d: must be >= 1", md->heads);
    if (md->head_dim < 1) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "head_dim = %d: must be >= 1", md->head_dim);
    flashc_status st;
    if ((st = check_merge_dtype(ctx, "part_dtype", md->part_dtype)) != FLASHC_OK) return st;
    if ((st = check_merge_dtype(ctx, "out_dtype", md->out_dtype)) != FLASHC_OK) return st;

    flashc_merge_problem m = {md->n_parts, md->batch, md->seqlen, md->heads, md->head_dim, md->part_dtype,
                              md->out_dtype, {0}, {0}};
    memcpy(m.part_stride, md->part_stride, sizeof m.part_stride);
    memcpy(m.out_stride, md->out_stride, sizeof m.out_stride);
    const int64_t D = m.D, HD = (int64_t)m.H * D;
    if (!m.part_stride[0] && !m.part_stride[1] && !m.part_stride[2] && !m.part_stride[3]) {
        m.part_stride[3] = D;
        m.part_stride[2] = HD;
        m.part_stride[1] = HD * m.S;
        m.part_stride[0] = HD * m.S * m.B;
    }
    if (!m.out_stride[0] && !m.out_stride[1] && !m.out_stride[2]) {
        m.out_stride[2] = D;
        m.out_stride[1] = HD;
        m.out_stride[0] = HD * m.S;
    }
    for (int i = 0; i < 4; i++)
        if (m.part_stride[i] < 0)
            FAIL(ctx, FLASHC_ERR_INVALID_ARG, "part_stride[%d] = %lld: strides must be >= 0", i, (long long)m.part_stride[i]);
    for (int i = 0; i < 3; i++)
        if (m.out_stride[i] < 0)
            FAIL(ctx, FLASHC_ERR_INVALID_ARG, "out_stride[%d] = %lld: strides must be >= 0", i, (long long)m.out_stride[i]);
    const int64_t p_size[5] = {m.n_parts, m.B, m.S, m.H, D}, p_st[5] = {m.part_stride[0], m.part_stride[1],
                                                                      m.part_stride[2], m.part_stride[3], 1};
    const int64_t o_size[4] = {m.B, m.S, m.H, D}, o_st[4] = {m.out_stride[0], m.out_stride[1], m.out_stride[2], 1};
    if (dims_overlap(5, p_size, p_st))
        FAIL(ctx, FLASHC_ERR_INVALID_ARG,
             "part_stride = [%lld, %lld, %lld, %lld]: overlapping strides for (%d, %d, %d, %d, %d) parts",
             (long long)m.part_stride[0], (long long)m.part_stride[1], (long long)m.part_stride[2],
             (long long)m.part_stride[3], m.n_parts, m.B, m.S, m.H, m.D);
    if (dims_overlap(4, o_size, o_st))
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "out_stride = [%lld, %lld, %lld]: overlapping strides for a (%d, %d, %d, %d) out",
             (long long)m.out_stride[0], (long long)m.out_stride[1], (long long)m.out_stride[2], m.B, m.S, m.H, m.D);

    if (!out_parts) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "out_parts is NULL");
    if (!lse_parts) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "lse_parts is NULL");
    if (!out) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "out is NULL");
    // in place (out = part 0, lse = lse part 0) or apart; any other overlap would read written data
    const size_t part_bytes = byte_span(5, p_size, p_st, flashc__dtype_size(m.part_dtype));
    const size_t out_bytes = byte_span(4, o_size, o_st, flashc__dtype_size(m.out_dtype));
    const size_t lse_bytes = (size_t)m.B * m.H * (size_t)m.S * sizeof(float);
    const size_t lse_parts_bytes = lse_bytes * (size_t)m.n_parts;
    if (out == out_parts) {
        if (m.out_dtype != m.part_dtype || memcmp(m.out_stride, m.part_stride + 1, sizeof m.out_stride))
            FAIL(ctx, FLASHC_ERR_INVALID_ARG,
                 "out is out_parts (in place) but out_dtype / out_stride differ from part_dtype / part_stride[1..3]");
    } else if (ranges_meet(out, out_bytes, out_parts, part_bytes)) {
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "out overlaps out_parts (only out = out_parts, part 0 in place, is allowed)");
    }
    if (ranges_meet(out, out_bytes, lse_parts, lse_parts_bytes)) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "out overlaps lse_parts");
    if (lse) {
        if (lse != lse_parts && ranges_meet(lse, lse_bytes, lse_parts, lse_parts_bytes))
            FAIL(ctx, FLASHC_ERR_INVALID_ARG, "lse overlaps lse_parts (only lse = lse_parts, part 0 in place, is allowed)");
        if (ranges_meet(lse, lse_bytes, out, out_bytes)) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "lse overlaps out");
        if (ranges_meet(lse, lse_bytes, out_parts, part_bytes)) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "lse overlaps out_parts");
    }
    if (!ctx->ops->merge)
        FAIL(ctx, FLASHC_ERR_UNSUPPORTED, "flashc_merge: the %s backend has no merge yet", ctx->ops->name);
    if (m.S == 0) return FLASHC_OK;
    flashc_merge_args a = {out_parts, lse_parts, out, lse, stream};
    return ctx->ops->merge(ctx, &m, &a);
}
