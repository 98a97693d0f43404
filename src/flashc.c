// flashc.c -- the public entry points: version, status strings, context, argument validation and
// backend dispatch.
//
// Every user-supplied value is checked here, once, and turned into a flashc_problem (defaults
// applied, strides filled in, varlen offsets copied to the host). Backends never see bad input.
// A failed check writes nothing and returns a status with a message naming the argument.
#include "flashc_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

// ------------------------------------------------------------------------------------------------
// version, status strings, errors

unsigned flashc_version_number(void) { return FLASHC_VERSION_NUMBER; }

#define FLASHC_STR2(x) #x
#define FLASHC_STR(x) FLASHC_STR2(x)
const char *flashc_version_string(void) {
    return FLASHC_STR(FLASHC_VERSION_MAJOR) "." FLASHC_STR(FLASHC_VERSION_MINOR) "." FLASHC_STR(FLASHC_VERSION_PATCH);
}

const char *flashc_status_string(flashc_status s) {
    switch (s) {
    case FLASHC_OK: return "ok";
    case FLASHC_ERR_INVALID_ARG: return "invalid argument";
    case FLASHC_ERR_UNSUPPORTED: return "unsupported by this backend";
    case FLASHC_ERR_NO_BACKEND: return "backend not available";
    case FLASHC_ERR_ALLOC: return "out of memory";
    case FLASHC_ERR_WORKSPACE_SMALL: return "workspace too small";
    case FLASHC_ERR_DEVICE: return "device error";
    case FLASHC_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

flashc_status flashc__fail(flashc_ctx *ctx, flashc_status status, const char *fmt, ...) {
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
        va_end(ap);
    }
    return status;
}

// ------------------------------------------------------------------------------------------------
// context

static const flashc_backend_ops *backend_ops(flashc_backend b) {
    switch (b) {
    case FLASHC_BACKEND_REF: return &flashc__ref_ops;
    case FLASHC_BACKEND_CPU: return &flashc__cpu_ops;
#ifdef FLASHC_WITH_CUDA
    case FLASHC_BACKEND_CUDA: return &flashc__cuda_ops;
#endif
    default: return NULL;
    }
}

// Why this thread's last flashc_ctx_create failed: there is no ctx to hold it (flashc_ctx_last_error(NULL)).
static _Thread_local char create_err[sizeof ((flashc_ctx *)0)->err + 32]; // + the prefix

static flashc_status create_fail(flashc_status st, const char *why) {
    snprintf(create_err, sizeof create_err, "flashc_ctx_create: %s", why);
    return st;
}

flashc_status flashc_ctx_create(flashc_ctx **out, flashc_backend backend, int n_threads) {
    create_err[0] = 0;
    if (!out) return create_fail(FLASHC_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (backend < FLASHC_BACKEND_AUTO || backend > FLASHC_BACKEND_CUDA)
        return create_fail(FLASHC_ERR_INVALID_ARG, "backend is not a flashc_backend value");
    if (n_threads < 0) return create_fail(FLASHC_ERR_INVALID_ARG, "n_threads < 0");
    if (backend == FLASHC_BACKEND_AUTO) {
        backend = FLASHC_BACKEND_CPU;
#ifdef FLASHC_WITH_CUDA
        if (flashc__cuda_device_present()) backend = FLASHC_BACKEND_CUDA;
#endif
    }
    const flashc_backend_ops *ops = backend_ops(backend);
    if (!ops) return create_fail(FLASHC_ERR_NO_BACKEND, "this library was built without the CUDA backend");

    flashc_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return create_fail(FLASHC_ERR_ALLOC, "cannot allocate the ctx");
    ctx->backend = backend;
    ctx->ops = ops;
    if (n_threads == 0) {
        const char *env = getenv("FLASHC_NUM_THREADS");
        n_threads = env ? atoi(env) : 0;
        if (n_threads <= 0) n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (n_threads <= 0) n_threads = 1;
    }
    ctx->n_threads = n_threads;
    if (ops->init) {
        flashc_status st = ops->init(ctx);
        if (st != FLASHC_OK) {
            create_fail(st, ctx->err[0] ? ctx->err : flashc_status_string(st));
            free(ctx);
            return st;
        }
    }
    *out = ctx;
    return FLASHC_OK;
}

void flashc_ctx_free(flashc_ctx *ctx) {
    if (!ctx) return;
    if (ctx->ws) {
        if (ctx->ops->ws_free) ctx->ops->ws_free(ctx, ctx->ws);
        else free(ctx->ws);
    }
    if (ctx->ops->fini) ctx->ops->fini(ctx);
    free(ctx->host_i32);
    free(ctx);
}

flashc_backend flashc_ctx_backend(const flashc_ctx *ctx) { return ctx ? ctx->backend : FLASHC_BACKEND_AUTO; }

const char *flashc_ctx_last_error(const flashc_ctx *ctx) {
    return ctx ? ctx->err : create_err[0] ? create_err : "ctx is NULL";
}

void flashc_fill_contiguous_strides(flashc_attn_desc *d) {
    if (!d) return;
    int64_t D = d->head_dim;
    int64_t hq = (int64_t)d->heads * D, hk = (int64_t)d->heads_kv * D;
    int64_t *qs[2] = {d->q_stride, d->o_stride}, *ks[2] = {d->k_stride, d->v_stride};
    for (int t = 0; t < 2; t++) {
        if (!qs[t][0] && !qs[t][1] && !qs[t][2]) {
            qs[t][2] = D;
            qs[t][1] = hq;
            qs[t][0] = hq * d->seqlen_q;
        }
        if (!ks[t][0] && !ks[t][1] && !ks[t][2]) {
            ks[t][2] = D;
            ks[t][1] = hk;
            ks[t][0] = hk * (d->block_table ? d->page_size : d->seqlen_k);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// validation: flashc_attn_desc -> flashc_problem

#define FAIL(ctx, st, ...) return flashc__fail((ctx), (st), __VA_ARGS__)

// A (rows, heads, head_dim) view with strides [seq, head] (plus [batch] over `batch` in batch mode)
// must not address one element twice: the dims sorted by stride must each step past the span of
// the smaller ones. Strides are >= 0 (checked before).
static int strides_overlap(int64_t batch, int64_t rows, int64_t heads, int64_t D, const int64_t st[3], int varlen) {
    int64_t size[4] = {varlen ? 1 : batch, rows, heads, D};
    int64_t stride[4] = {varlen ? 0 : st[0], st[1], st[2], 1};
    if (rows == 0) return 0; // an empty tensor (seqlen 0) addresses nothing, whatever its strides
    int n = 0;
    int64_t sz[4], sd[4];
    for (int i = 0; i < 4; i++)
        if (size[i] > 1) sz[n] = size[i], sd[n] = stride[i], n++;
    for (int i = 1; i < n; i++) // insertion sort by stride
        for (int j = i; j > 0 && sd[j] < sd[j - 1]; j--) {
            int64_t t = sd[j]; sd[j] = sd[j - 1]; sd[j - 1] = t;
            t = sz[j]; sz[j] = sz[j - 1]; sz[j - 1] = t;
        }
    int64_t span = 1; // elements covered by the smaller dims: max offset + 1
    for (int i = 0; i < n; i++) {
        if (sd[i] < span) return 1;
        span += (sz[i] - 1) * sd[i];
    }
    return 0;
}

// A tensor of `batch` x `rows` x `heads` head vectors (varlen: batch = 1, rows = total, [batch] stride
// ignored) with strides st: fills "same as" strides, then rejects negative or overlapping ones.
flashc_status flashc__check_tensor(flashc_ctx *ctx, const char *name, int64_t *st, const int64_t *same_as, int varlen,
                                  int64_t batch, int64_t rows, int64_t heads, int32_t D) {
    if (same_as && !st[0] && !st[1] && !st[2]) memcpy(st, same_as, 3 * sizeof *st);
    if (varlen) st[0] = 0;
    for (int i = 0; i < 3; i++)
        if (st[i] < 0)
            FAIL(ctx, FLASHC_ERR_INVALID_ARG, "%s_stride[%d] = %lld: strides must be >= 0", name, i, (long long)st[i]);
    if (strides_overlap(batch, rows, heads, D, st, varlen))
        FAIL(ctx, FLASHC_ERR_INVALID_ARG,
             "%s_stride = [%lld, %lld, %lld]: overlapping or inconsistent strides for a (%lld, %lld, %lld, %d) "
             "tensor (the head stride must be >= head_dim, the seq stride must step past all heads, ...)",
             name, (long long)st[0], (long long)st[1], (long long)st[2], (long long)batch, (long long)rows,
             (long long)heads, D);
    return FLASHC_OK;
}

static flashc_status check_cu_seqlens(flashc_ctx *ctx, const char *name, const int32_t *cu, int32_t B,
                                      const char *max_name, int32_t max_len) {
    if (cu[0] < 0) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "%s[0] = %d: offsets must be >= 0", name, cu[0]);
    for (int32_t b = 0; b < B; b++) {
        int64_t len = (int64_t)cu[b + 1] - cu[b];
        if (len < 0)
            FAIL(ctx, FLASHC_ERR_INVALID_ARG, "%s[%d] = %d < %s[%d] = %d: offsets must be non-decreasing", name, b + 1,
                 cu[b + 1], name, b, cu[b]);
        if (len > max_len)
            FAIL(ctx, FLASHC_ERR_INVALID_ARG, "%s: sequence %d has length %lld > the maximum %s = %d", name, b,
                 (long long)len, max_name, max_len);
    }
    return FLASHC_OK;
}

// The ctx's host scratch for int32 tables (cu_seqlens, seqused_k, cache_seqlens ...), grown to at
// least n entries; NULL if out of memory.
int32_t *flashc__host_i32(flashc_ctx *ctx, size_t n) {
    if (n > ctx->host_i32_cap) {
        int32_t *h = realloc(ctx->host_i32, (n + 64) * sizeof *h);
        if (!h) return NULL;
        ctx->host_i32 = h;
        ctx->host_i32_cap = n + 64;
    }
    return ctx->host_i32;
}

// Copy n int32 from the backend's memory into the ctx's host scratch at offset `at`.
flashc_status flashc__fetch_i32(flashc_ctx *ctx, size_t at, const int32_t *src, int64_t n) {
    if (!flashc__host_i32(ctx, at + (size_t)n))
        FAIL(ctx, FLASHC_ERR_ALLOC, "out of host memory for %lld int32 entries (cu_seqlens, seqused_k)", (long long)n);
    if (ctx->ops->read_i32) return ctx->ops->read_i32(ctx, ctx->host_i32 + at, src, n);
    memcpy(ctx->host_i32 + at, src, (size_t)n * sizeof *src);
    return FLASHC_OK;
}

#define FLASHC_MAX_SEQLEN (1 << 30) // keeps i + Sk - Sq and row counts far from int32/int64 overflow

flashc_status flashc__resolve(flashc_ctx *ctx, const flashc_attn_desc *d, flashc_problem *p, int mode) {
    if (!ctx) return FLASHC_ERR_INVALID_ARG;
    ctx->err[0] = 0;
    if (!d) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "desc is NULL");
    memset(p, 0, sizeof *p);
    for (size_t i = 0; i < sizeof d->reserved / sizeof d->reserved[0]; i++)
        if (d->reserved[i]) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "desc.reserved[%zu] must be zero", i);

    if (d->batch < 1) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "batch = %d: must be >= 1", d->batch);
    if (d->seqlen_q < 0 || d->seqlen_q > FLASHC_MAX_SEQLEN)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "seqlen_q = %d: must be in [0, 2^30]", d->seqlen_q);
    if (d->seqlen_k < 0 || d->seqlen_k > FLASHC_MAX_SEQLEN)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "seqlen_k = %d: must be in [0, 2^30]", d->seqlen_k);
    if (d->heads < 1) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "heads = %d: must be >= 1", d->heads);
    if (d->heads_kv < 1) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "heads_kv = %d: must be >= 1", d->heads_kv);
    if (d->heads % d->heads_kv)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "heads = %d is not a multiple of heads_kv = %d", d->heads, d->heads_kv);
    if (d->head_dim < 1) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "head_dim = %d: must be >= 1", d->head_dim);
    if (d->dtype < FLASHC_DTYPE_F32 || d->dtype > FLASHC_DTYPE_E4M3)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "dtype = %d: not a flashc_dtype", (int)d->dtype);
    if (d->reserved32) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "desc.reserved32 must be zero");
    {
        const float ds[3] = {d->q_descale, d->k_descale, d->v_descale};
        const char *dn[3] = {"q_descale", "k_descale", "v_descale"};
        for (int i = 0; i < 3; i++) {
            if (d->dtype != FLASHC_DTYPE_E4M3 && ds[i] != 0)
                FAIL(ctx, FLASHC_ERR_INVALID_ARG, "%s = %g: only E4M3 inputs take a descale (leave it 0)", dn[i], ds[i]);
            if (!(isfinite(ds[i]) && ds[i] >= 0))
                FAIL(ctx, FLASHC_ERR_INVALID_ARG, "%s = %g: must be finite and > 0 (or 0 for 1)", dn[i], ds[i]);
        }
    }
    if (d->dtype == FLASHC_DTYPE_E4M3 && mode != FLASHC__FOR_FWD)
        FAIL(ctx, FLASHC_ERR_UNSUPPORTED, "dtype = E4M3: fp8 is forward only (flashc_fwd)%s",
             mode == FLASHC__FOR_KVCACHE ? "; the KV-cache path takes F32, F16 or BF16" : "");
    if (d->scale != 0 && !(isfinite(d->scale) && d->scale > 0))
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "scale = %g: must be finite and > 0 (or 0 for 1/sqrt(head_dim))", d->scale);
    if (!(isfinite(d->softcap) && d->softcap >= 0))
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "softcap = %g: must be finite and >= 0 (0 = off)", d->softcap);
    if (d->causal != 0 && d->causal != 1) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "causal = %d: must be 0 or 1", d->causal);
    if (d->use_window != 0 && d->use_window != 1)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "use_window = %d: must be 0 or 1", d->use_window);
    if (d->use_window && d->window_left < -1)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "window_left = %d: must be >= -1 (-1 = unbounded)", d->window_left);
    if (d->use_window && d->window_right < -1)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "window_right = %d: must be >= -1 (-1 = unbounded)", d->window_right);
    if (d->deterministic != 0 && d->deterministic != 1)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "deterministic = %d: must be 0 or 1", d->deterministic);
    if (d->alibi_batch_stride != 0 && d->alibi_batch_stride < d->heads)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "alibi_batch_stride = %lld: must be 0 (per head) or >= heads = %d",
             (long long)d->alibi_batch_stride, d->heads);
    if (!d->cu_seqlens_q != !d->cu_seqlens_k)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "cu_seqlens_q and cu_seqlens_k must be given together (varlen) or both NULL");

    p->B = d->batch;
    p->Sq = d->seqlen_q;
    p->Sk = d->seqlen_k;
    p->H = d->heads;
    p->H_kv = d->heads_kv;
    p->D = d->head_dim;
    p->group = d->heads / d->heads_kv;
    p->dtype = d->dtype;
    p->o_dtype = d->dtype == FLASHC_DTYPE_E4M3 ? FLASHC_DTYPE_BF16 : d->dtype;
    p->q_descale = d->q_descale != 0 ? d->q_descale : 1.f;
    p->k_descale = d->k_descale != 0 ? d->k_descale : 1.f;
    p->v_descale = d->v_descale != 0 ? d->v_descale : 1.f;
    p->scale = d->scale != 0 ? d->scale : (float)(1.0 / sqrt((double)d->head_dim));
    p->softcap = d->softcap;
    p->window_left = d->use_window ? d->window_left : -1;
    p->window_right = d->causal ? 0 : d->use_window ? d->window_right : -1;
    p->alibi_slopes = d->alibi_slopes;
    p->alibi_batch_stride = d->alibi_batch_stride;
    p->deterministic = d->deterministic;
    p->cu_q = d->cu_seqlens_q;
    p->cu_k = d->cu_seqlens_k;
    p->seqused_k = d->seqused_k;
    p->varlen = d->cu_seqlens_q != NULL;

    // varlen offsets: fetch to the host once (device memory for CUDA: a small copy + sync)
    if (p->varlen) {
        size_t n = (size_t)p->B + 1;
        flashc_status st;
        if ((st = flashc__fetch_i32(ctx, 0, d->cu_seqlens_q, (int64_t)n)) != FLASHC_OK) return st;
        if ((st = flashc__fetch_i32(ctx, n, d->cu_seqlens_k, (int64_t)n)) != FLASHC_OK) return st;
        if (d->seqused_k && (st = flashc__fetch_i32(ctx, 2 * n, d->seqused_k, p->B)) != FLASHC_OK) return st;
        p->cu_q_host = ctx->host_i32;
        p->cu_k_host = ctx->host_i32 + n;
        p->seqused_k_host = d->seqused_k ? ctx->host_i32 + 2 * n : NULL;
        if ((st = check_cu_seqlens(ctx, "cu_seqlens_q", p->cu_q_host, p->B, "seqlen_q", p->Sq)) != FLASHC_OK) return st;
        if ((st = check_cu_seqlens(ctx, "cu_seqlens_k", p->cu_k_host, p->B, "seqlen_k", p->Sk)) != FLASHC_OK) return st;
        p->total_q = p->cu_q_host[p->B];
        p->total_k = p->cu_k_host[p->B];
    } else {
        if (d->seqused_k) {
            flashc_status st = flashc__fetch_i32(ctx, 0, d->seqused_k, p->B);
            if (st != FLASHC_OK) return st;
            p->seqused_k_host = ctx->host_i32;
        }
        p->total_q = (int64_t)p->B * p->Sq;
        p->total_k = (int64_t)p->B * p->Sk;
    }
    if (p->seqused_k_host)
        for (int b = 0; b < p->B; b++)
            if (p->seqused_k_host[b] < 0)
                FAIL(ctx, FLASHC_ERR_INVALID_ARG, "seqused_k[%d] = %d: must be >= 0", b, p->seqused_k_host[b]);

    // paged K/V: the table's shape here; its entries are checked where the table is host memory
    // (a device table would cost a copy per call: the CUDA kernels clamp page indices instead)
    if (d->block_table) {
        if (d->page_size < 1) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "page_size = %d: must be >= 1", d->page_size);
        if (d->num_pages < 1) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "num_pages = %d: must be >= 1", d->num_pages);
        int64_t pages_per_seq = flashc__n_pages(p->Sk, d->page_size);
        if (d->block_table_stride < pages_per_seq)
            FAIL(ctx, FLASHC_ERR_INVALID_ARG, "block_table_stride = %lld: must be >= ceil(seqlen_k / page_size) = %lld",
                 (long long)d->block_table_stride, (long long)pages_per_seq);
        if (!ctx->ops->read_i32 && mode != FLASHC__FOR_KVCACHE) { // kvcache: against c_b + seqlen_new
            for (int b = 0; b < p->B; b++) {
                flashc_seq s = flashc__seq(p, b);
                for (int64_t i = 0; i < flashc__n_pages(s.sk, d->page_size); i++) {
                    int32_t page = d->block_table[(int64_t)b * d->block_table_stride + i];
                    if (page < 0 || page >= d->num_pages)
                        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "block_table[%d][%lld] = %d: must be in [0, num_pages = %d)", b,
                             (long long)i, page, d->num_pages);
                }
            }
        }
        p->block_table = d->block_table;
        p->block_table_stride = d->block_table_stride;
        p->page_size = d->page_size;
        p->num_pages = d->num_pages;
    }

    // strides: zero = contiguous for q/k/v/o (filled here), zero = same-as for the gradients (filled
    // by flashc__check_tensor)
    {
        flashc_attn_desc tmp = *d;
        flashc_fill_contiguous_strides(&tmp);
        memcpy(p->q_stride, tmp.q_stride, sizeof p->q_stride);
        memcpy(p->k_stride, tmp.k_stride, sizeof p->k_stride);
        memcpy(p->v_stride, tmp.v_stride, sizeof p->v_stride);
        memcpy(p->o_stride, tmp.o_stride, sizeof p->o_stride);
    }
    memcpy(p->do_stride, d->do_stride, sizeof p->do_stride);
    memcpy(p->dq_stride, d->dq_stride, sizeof p->dq_stride);
    memcpy(p->dk_stride, d->dk_stride, sizeof p->dk_stride);
    memcpy(p->dv_stride, d->dv_stride, sizeof p->dv_stride);
    flashc_status st;
    // q-like tensors: (B, Sq) rows, or total_q rows in varlen mode; k-like: (B, Sk) / total_k, or
    // (num_pages, page_size) when paged
    int vl = p->varlen, kvl = p->varlen && !p->block_table;
    int64_t qb = vl ? 1 : p->B, qr = vl ? p->total_q : p->Sq;
    int64_t kb = p->block_table ? p->num_pages : kvl ? 1 : p->B;
    int64_t kr = p->block_table ? p->page_size : kvl ? p->total_k : p->Sk;
    if ((st = flashc__check_tensor(ctx, "q", p->q_stride, NULL, vl, qb, qr, p->H, p->D)) != FLASHC_OK) return st;
    if ((st = flashc__check_tensor(ctx, "k", p->k_stride, NULL, kvl, kb, kr, p->H_kv, p->D)) != FLASHC_OK) return st;
    if ((st = flashc__check_tensor(ctx, "v", p->v_stride, NULL, kvl, kb, kr, p->H_kv, p->D)) != FLASHC_OK) return st;
    if ((st = flashc__check_tensor(ctx, "o", p->o_stride, NULL, vl, qb, qr, p->H, p->D)) != FLASHC_OK) return st;
    if (mode == FLASHC__FOR_BWD) {
        if (p->block_table) FAIL(ctx, FLASHC_ERR_UNSUPPORTED, "block_table: paged K/V is forward only");
        if ((st = flashc__check_tensor(ctx, "do", p->do_stride, p->o_stride, vl, qb, qr, p->H, p->D)) != FLASHC_OK) return st;
        if ((st = flashc__check_tensor(ctx, "dq", p->dq_stride, p->q_stride, vl, qb, qr, p->H, p->D)) != FLASHC_OK) return st;
        if ((st = flashc__check_tensor(ctx, "dk", p->dk_stride, p->k_stride, kvl, kb, kr, p->H_kv, p->D)) != FLASHC_OK) return st;
        if ((st = flashc__check_tensor(ctx, "dv", p->dv_stride, p->v_stride, kvl, kb, kr, p->H_kv, p->D)) != FLASHC_OK) return st;
    }
    return mode == FLASHC__FOR_KVCACHE ? FLASHC_OK : ctx->ops->supports(ctx, p);
}

// ------------------------------------------------------------------------------------------------
// entry points

flashc_status flashc_supports(flashc_ctx *ctx, const flashc_attn_desc *d) {
    flashc_problem p;
    return flashc__resolve(ctx, d, &p, d && d->dtype == FLASHC_DTYPE_E4M3 ? FLASHC__FOR_FWD : FLASHC__FOR_BWD);
}

size_t flashc_fwd_workspace_size(flashc_ctx *ctx, const flashc_attn_desc *d) {
    flashc_problem p;
    if (flashc__resolve(ctx, d, &p, FLASHC__FOR_FWD) != FLASHC_OK) return 0;
    return ctx->ops->fwd_ws ? ctx->ops->fwd_ws(ctx, &p) : 0;
}

size_t flashc_bwd_workspace_size(flashc_ctx *ctx, const flashc_attn_desc *d) {
    flashc_problem p;
    if (flashc__resolve(ctx, d, &p, FLASHC__FOR_BWD) != FLASHC_OK) return 0;
    return ctx->ops->bwd_ws ? ctx->ops->bwd_ws(ctx, &p) : 0;
}

// The workspace to use: the caller's (checked for size), or the ctx's own, grown on demand.
flashc_status flashc__pick_workspace(flashc_ctx *ctx, size_t need, void **ws, size_t *ws_size) {
    if (*ws) {
        if (*ws_size < need)
            FAIL(ctx, FLASHC_ERR_WORKSPACE_SMALL, "workspace_size = %zu: this problem needs %zu bytes", *ws_size, need);
        if ((uintptr_t)*ws % 64)
            FAIL(ctx, FLASHC_ERR_INVALID_ARG, "workspace: must be 64-byte aligned");
        return FLASHC_OK;
    }
    if (*ws_size)
        FAIL(ctx, FLASHC_ERR_INVALID_ARG, "workspace is NULL but workspace_size = %zu (pass 0 to use the ctx's own)",
             *ws_size);
    if (need > ctx->ws_size) {
        void *fresh = ctx->ops->ws_alloc ? ctx->ops->ws_alloc(ctx, need) : aligned_alloc(64, (need + 63) & ~(size_t)63);
        if (!fresh) FAIL(ctx, FLASHC_ERR_ALLOC, "cannot allocate a %zu-byte workspace", need);
        if (ctx->ws) {
            if (ctx->ops->ws_free) ctx->ops->ws_free(ctx, ctx->ws);
            else free(ctx->ws);
        }
        ctx->ws = fresh;
        ctx->ws_size = need;
    }
    *ws = need ? ctx->ws : NULL;
    *ws_size = need ? ctx->ws_size : 0;
    return FLASHC_OK;
}

flashc_status flashc_fwd(flashc_ctx *ctx, const flashc_attn_desc *d, const void *q, const void *k, const void *v,
                         void *o, float *lse, void *workspace, size_t workspace_size, void *stream) {
    flashc_problem p;
    flashc_status st = flashc__resolve(ctx, d, &p, FLASHC__FOR_FWD);
    if (st != FLASHC_OK) return st;
    if (!q) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "q is NULL");
    if (!k) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "k is NULL");
    if (!v) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "v is NULL");
    if (!o) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "o is NULL");
    if (o == q || o == k || o == v) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "o aliases an input (q, k or v)");
    if ((void *)lse == o) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "lse aliases o");
    size_t need = ctx->ops->fwd_ws ? ctx->ops->fwd_ws(ctx, &p) : 0;
    if ((st = flashc__pick_workspace(ctx, need, &workspace, &workspace_size)) != FLASHC_OK) return st;
    flashc_fwd_args a = {q, k, v, o, lse, workspace, workspace_size, stream};
    return ctx->ops->fwd(ctx, &p, &a);
}

flashc_status flashc_bwd(flashc_ctx *ctx, const flashc_attn_desc *d, const void *q, const void *k, const void *v,
                         const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv,
                         void *workspace, size_t workspace_size, void *stream) {
    flashc_problem p;
    flashc_status st = flashc__resolve(ctx, d, &p, FLASHC__FOR_BWD);
    if (st != FLASHC_OK) return st;
    const void *in[6] = {q, k, v, o, lse, dout};
    const char *in_name[6] = {"q", "k", "v", "o", "lse", "dout"};
    for (int i = 0; i < 6; i++)
        if (!in[i]) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "%s is NULL", in_name[i]);
    void *out[3] = {dq, dk, dv};
    const char *out_name[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        if (!out[i]) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "%s is NULL", out_name[i]);
        for (int j = 0; j < 6; j++)
            if (out[i] == in[j]) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "%s aliases %s", out_name[i], in_name[j]);
        for (int j = 0; j < i; j++)
            if (out[i] == out[j]) FAIL(ctx, FLASHC_ERR_INVALID_ARG, "%s aliases %s", out_name[i], out_name[j]);
    }
    size_t need = ctx->ops->bwd_ws ? ctx->ops->bwd_ws(ctx, &p) : 0;
    if ((st = flashc__pick_workspace(ctx, need, &workspace, &workspace_size)) != FLASHC_OK) return st;
    flashc_bwd_args a = {q, k, v, o, dout, lse, dq, dk, dv, workspace, workspace_size, stream};
    return ctx->ops->bwd(ctx, &p, &a);
}
