// flashc_internal.h -- private to the library: the resolved problem every backend receives, the
// backend function table, the context, error recording, and small helpers shared by backends
// (dtype conversion, per-sequence offsets, the mask as a key range).
//
// Validation happens once, in src/flashc.c, before dispatch. Backends may assume a valid,
// resolved flashc_problem and never re-check user input.
#ifndef FLASHC_INTERNAL_H
#define FLASHC_INTERNAL_H

#include "flashc.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHC_INTERNAL __attribute__((visibility("hidden")))

// ------------------------------------------------------------------------------------------------
// the resolved problem

// Everything a backend needs, with defaults applied:
//   strides filled in (dout/dq/dk/dv resolved from o/q/k/v), scale resolved,
//   window resolved into [window_left, window_right] with -1 = unbounded and causal folded in,
//   varlen offsets copied to host memory (cu_q_host, cu_k_host: NULL in batch mode; seqused_k_host:
//   NULL without seqused_k).
typedef struct flashc_problem {
    int32_t B, Sq, Sk, H, H_kv, D;   // Sq, Sk: max lengths in varlen mode
    int32_t group;                   // H / H_kv
    flashc_dtype dtype;              // of q, k, v (and dout, dq, dk, dv)
    flashc_dtype o_dtype;            // of o: dtype, or BF16 for E4M3
    float q_descale, k_descale, v_descale; // E4M3: the per-tensor factors (resolved, > 0); else 1
    float scale;                     // resolved, > 0
    float softcap;                   // 0 = off
    int32_t window_left, window_right; // -1 = unbounded; causal => window_right = 0
    const float *alibi_slopes;       // NULL = off (device pointer for CUDA)
    int64_t alibi_batch_stride;      // 0 = per head only
    int32_t deterministic;
    int32_t varlen;                  // 1 if cu_seqlens were given
    int64_t total_q, total_k;        // rows of q and of k/v (B*Sq and B*Sk in batch mode)
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];
    int64_t do_stride[3], dq_stride[3], dk_stride[3], dv_stride[3];
    const int32_t *cu_q, *cu_k, *seqused_k;        // user pointers, on the ctx's device
    const int32_t *cu_q_host, *cu_k_host, *seqused_k_host; // host copies (cu_*: NULL in batch mode)
    // Paged K/V (forward only): key j of sequence b is row j % page_size of page
    // block_table[b * block_table_stride + j / page_size]; k_stride[0] is the page stride.
    const int32_t *block_table;      // NULL = not paged (device pointer for CUDA)
    int64_t block_table_stride;
    int32_t page_size, num_pages;
    // KV cache (flashc_fwd_kvcache only): sequence b reads cache row cache_batch_idx[b] (batch stride
    // of k/v); NULL = b. Host pointer for host backends, device pointer for CUDA.
    const int32_t *cache_batch_idx;
} flashc_problem;

// Pages that hold `keys` keys at page_size keys a page, in int64: (keys + page_size - 1) in int
// wraps at page sizes near 2^31 (a block-table check once ran zero times there).
static inline int64_t flashc__n_pages(int64_t keys, int32_t page_size) { return (keys + page_size - 1) / page_size; }

// One sequence of the batch: its lengths and the row offsets of its first q row and k row.
// In batch mode row offsets are 0 and the batch stride is used; in varlen mode the batch stride
// is 0 and rows start at cu_seqlens[b]. Element offset of (b, i, h) in q is
//     q_b + i * q_stride[1] + h * q_stride[2]   with q_b = flashc__seq(...).q_base
typedef struct flashc_seq {
    int32_t sq, sk;       // lengths (sk already capped by seqused_k)
    int64_t q_row0, k_row0; // first row in the packed (varlen) tensors, 0 in batch mode
} flashc_seq;

static inline flashc_seq flashc__seq(const flashc_problem *p, int b) {
    flashc_seq s;
    if (p->varlen) {
        s.q_row0 = p->cu_q_host[b];
        s.k_row0 = p->cu_k_host[b];
        s.sq = p->cu_q_host[b + 1] - p->cu_q_host[b];
        s.sk = p->cu_k_host[b + 1] - p->cu_k_host[b];
    } else {
        s.q_row0 = 0;
        s.k_row0 = 0;
        s.sq = p->Sq;
        s.sk = p->Sk;
    }
    if (p->seqused_k_host && p->seqused_k_host[b] < s.sk) s.sk = p->seqused_k_host[b];
    return s;
}

// Element offset of row i of sequence b (head 0) for a tensor with the given strides.
static inline int64_t flashc__row_off(const flashc_problem *p, const int64_t st[3], int b, int64_t row0, int64_t i) {
    return p->varlen ? (row0 + i) * st[1] : (int64_t)b * st[0] + i * st[1];
}

// Element offset of key row j of sequence b (head 0) in a k-like tensor (k, v, dk, dv) with strides
// st: through the block table when paged, the cache row when cache_batch_idx is set, else as
// flashc__row_off. Host backends only (the tables are host memory there).
static inline int64_t flashc__k_off(const flashc_problem *p, const int64_t st[3], int b, const flashc_seq *s, int64_t j) {
    if (p->block_table) {
        int64_t page = p->block_table[(int64_t)b * p->block_table_stride + j / p->page_size];
        return page * st[0] + (j % p->page_size) * st[1];
    }
    if (p->cache_batch_idx) return (int64_t)p->cache_batch_idx[b] * st[0] + j * st[1];
    return flashc__row_off(p, st, b, s->k_row0, j);
}

// Index of lse for (b, h, i): (B, H, Sq) in batch mode, (H, total_q) in varlen mode.
static inline int64_t flashc__lse_off(const flashc_problem *p, int b, int h, const flashc_seq *s, int64_t i) {
    return p->varlen ? (int64_t)h * p->total_q + s->q_row0 + i
                     : ((int64_t)b * p->H + h) * p->Sq + i;
}

// The mask of query row i as the half-open key range [*lo, *hi) it sees (possibly empty):
//     i + sk - sq - left <= j <= i + sk - sq + right     (bottom-right aligned, FA2 semantics)
static inline void flashc__key_range(const flashc_problem *p, int64_t i, int32_t sq, int32_t sk,
                                     int64_t *lo, int64_t *hi) {
    int64_t diag = i + sk - sq;
    int64_t l = p->window_left < 0 ? 0 : diag - p->window_left;
    int64_t h = p->window_right < 0 ? sk : diag + p->window_right + 1;
    if (l < 0) l = 0;
    if (h > sk) h = sk;
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

// ALiBi slope of (b, h), 0 when ALiBi is off. The bias added to s_ij is -slope * |i + sk - sq - j|.
static inline float flashc__alibi_slope(const flashc_problem *p, int b, int h) {
    return p->alibi_slopes ? p->alibi_slopes[(int64_t)b * p->alibi_batch_stride + h] : 0.0f;
}

// ------------------------------------------------------------------------------------------------
// dtype conversion (portable bit manipulation; round to nearest even)

static inline float flashc__bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t flashc__f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float flashc__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { // subnormal: value = man * 2^-24
            float f = (float)man * 5.9604644775390625e-8f;
            memcpy(&u, &f, 4);
            u |= sign;
        }
    } else {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t flashc__f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;                    // NaN
    if (a >= 0x477ff000u) return sign | 0x7c00u;                   // >= 65520 rounds to inf
    if (a < 0x38800000u) {                                         // subnormal or zero in f16
        float af;
        memcpy(&af, &a, 4);
        // af * 2^24 rounded to nearest even integer gives the subnormal mantissa
        float m = af * 16777216.0f;
        float r = nearbyintf(m);
        return sign | (uint16_t)r;
    }
    uint32_t r = a + 0x0fffu + ((a >> 13) & 1u);                   // round mantissa to 10 bits
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

// OCP e4m3 (FP8, "fn": no infinities, S.1111.111 is NaN, largest finite 448): 1 sign bit, 4 exponent
// bits with bias 7, 3 mantissa bits, subnormals man * 2^-9. Decoding is exact in fp32.
static inline float flashc__e4m3_to_f32(uint8_t x) {
    const int sign = x >> 7, exp = (x >> 3) & 15, man = x & 7;
    float f;
    if (exp == 15 && man == 7) f = NAN;
    else if (exp == 0) f = (float)man * 0.001953125f; // 2^-9
    else f = ldexpf((float)(8 + man), exp - 10);      // (1 + man / 8) 2^(exp - 7)
    return sign ? -f : f;
}

// Round to nearest even, saturating to +-448 (as cvt.rn.satfinite.e4m3x2.f32 does); NaN -> NaN.
static inline uint8_t flashc__f32_to_e4m3(float f) {
    const uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a != a) return 0x7f;
    if (a >= 448.f) return sign | 0x7e;
    int e;
    frexpf(a, &e);                       // a = m 2^e, m in [0.5, 1): a in [2^(e-1), 2^e)
    const int ulp_exp = e - 1 < -6 ? -9 : e - 1 - 3; // spacing of e4m3 values around a
    const float q = nearbyintf(ldexpf(a, -ulp_exp)); // a in ulps, rounded to nearest even
    const float r = ldexpf(q, ulp_exp);
    if (r >= 448.f) return sign | 0x7e;
    // encode r exactly
    if (r < 0.015625f) return sign | (uint8_t)(r * 512.f); // subnormal (or 0): man = r / 2^-9
    frexpf(r, &e);
    const int exp = e - 1 + 7, man = (int)(ldexpf(r, -(e - 1)) * 8.f) - 8;
    return sign | (uint8_t)(exp << 3) | (uint8_t)man;
}

// Load element idx of a tensor of dtype t as float / store a float as dtype t.
static inline float flashc__load(const void *base, int64_t idx, flashc_dtype t) {
    switch (t) {
    case FLASHC_DTYPE_F16: return flashc__f16_to_f32(((const uint16_t *)base)[idx]);
    case FLASHC_DTYPE_BF16: return flashc__bf16_to_f32(((const uint16_t *)base)[idx]);
    case FLASHC_DTYPE_E4M3: return flashc__e4m3_to_f32(((const uint8_t *)base)[idx]);
    default: return ((const float *)base)[idx];
    }
}

static inline void flashc__store(void *base, int64_t idx, flashc_dtype t, float x) {
    switch (t) {
    case FLASHC_DTYPE_F16: ((uint16_t *)base)[idx] = flashc__f32_to_f16(x); break;
    case FLASHC_DTYPE_BF16: ((uint16_t *)base)[idx] = flashc__f32_to_bf16(x); break;
    case FLASHC_DTYPE_E4M3: ((uint8_t *)base)[idx] = flashc__f32_to_e4m3(x); break;
    default: ((float *)base)[idx] = x; break;
    }
}

// base[idx + i] = x[i], i < n, converted to t (the switch once per row, not per element)
static inline void flashc__store_row(void *base, int64_t idx, flashc_dtype t, const float *x, int64_t n) {
    switch (t) {
    case FLASHC_DTYPE_F32: memcpy((float *)base + idx, x, sizeof(float) * (size_t)n); break;
    case FLASHC_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)base)[idx + i] = flashc__f32_to_bf16(x[i]);
        break;
    default:
        for (int64_t i = 0; i < n; i++) flashc__store(base, idx + i, t, x[i]);
        break;
    }
}

static inline size_t flashc__dtype_size(flashc_dtype t) {
    return t == FLASHC_DTYPE_F32 ? 4 : t == FLASHC_DTYPE_E4M3 ? 1 : 2;
}

// Zero rows 0 .. rows - 1 (heads head vectors of D elements each) of x, strides st [-, row, head].
static inline void flashc__zero_rows_host(void *x, const int64_t st[3], int64_t rows, int heads, int D, flashc_dtype t) {
    const size_t es = flashc__dtype_size(t);
    for (int64_t r = 0; r < rows; r++)
        for (int h = 0; h < heads; h++) memset((char *)x + es * (size_t)(r * st[1] + h * st[2]), 0, es * (size_t)D);
}

// Varlen rows before cu_seqlens_q[0] belong to no sequence: a forward sets them as it sets a row
// that sees no key, o = 0 and lse = +inf (flashc.h), whichever kernel runs. The host backends'
// forwards call this; the CUDA backend has a kernel for it (zero_rows).
static inline void flashc__unowned_rows_host(const flashc_problem *p, void *o, float *lse) {
    if (!p->varlen) return;
    flashc__zero_rows_host(o, p->o_stride, p->cu_q_host[0], p->H, p->D, p->o_dtype);
    for (int64_t r = 0; lse && r < p->cu_q_host[0]; r++)
        for (int h = 0; h < p->H; h++) lse[(int64_t)h * p->total_q + r] = INFINITY;
}

// The backward's: dq rows before cu_seqlens_q[0] and dk, dv rows before cu_seqlens_k[0] are 0, as
// the gradients of rows that see no key and of keys no query sees.
static inline void flashc__unowned_grad_rows_host(const flashc_problem *p, void *dq, void *dk, void *dv) {
    if (!p->varlen) return;
    flashc__zero_rows_host(dq, p->dq_stride, p->cu_q_host[0], p->H, p->D, p->dtype);
    flashc__zero_rows_host(dk, p->dk_stride, p->cu_k_host[0], p->H_kv, p->D, p->dtype);
    flashc__zero_rows_host(dv, p->dv_stride, p->cu_k_host[0], p->H_kv, p->D, p->dtype);
}

// ------------------------------------------------------------------------------------------------
// backends

typedef struct flashc_fwd_args {
    const void *q, *k, *v;
    void *o;
    float *lse;          // may be NULL
    void *ws;            // at least fwd_workspace_size bytes (NULL iff that size is 0)
    size_t ws_size;
    void *stream;
} flashc_fwd_args;

typedef struct flashc_bwd_args {
    const void *q, *k, *v, *o, *dout;
    const float *lse;
    void *dq, *dk, *dv;
    void *ws;
    size_t ws_size;
    void *stream;
} flashc_bwd_args;

// KV cache (flashc_fwd_kvcache): the tensors and the resolved flashc_kvcache_desc of one call,
// validated by src/flashc_kvcache.c. The flashc_problem that comes with it is never varlen; its Sk is
// the cache capacity, seqused_k_host[b] = c_b + seqlen_new (host memory, host backends only: NULL on
// a backend with read_i32, where nothing is read back), and block_table / cache_batch_idx are as
// given (cache_batch_idx a host copy on host backends).
typedef struct flashc_kvcache_args {
    const void *q;
    void *k_cache, *v_cache;
    const void *k_new, *v_new;           // NULL when seqlen_new == 0
    void *o;
    float *lse;                          // may be NULL
    const int32_t *cache_seqlens;        // the user's pointer (device for CUDA); NULL => every c_b = Sk
    const int32_t *cache_seqlens_host;   // host copy of c_b, B entries (host backends; NULL on a backend with
                                         // read_i32, whose kernels read cache_seqlens and clamp it)
    int64_t num_cache_rows;              // cache rows for cache_batch_idx, 0 = not given
    int32_t seqlen_new;
    int64_t knew_stride[3], vnew_stride[3]; // resolved (zero => contiguous filled in)
    const void *rotary_cos, *rotary_sin; // NULL => no rotary
    int32_t rotary_dim, rotary_interleaved, seqlen_ro;
    int32_t rotary_q_per_row;            // 1: q row i rotated at c_b + i (causal or windowed); 0: at c_b
    int32_t num_splits;                  // 0 = the backend's choice
    void *ws;                            // at least kvcache_ws bytes (NULL iff that size is 0)
    size_t ws_size;
    void *stream;
} flashc_kvcache_args;

// flashc_merge, resolved: strides filled in. lse_parts is (n_parts, B, H, S) and lse (B, H, S),
// fp32, contiguous.
typedef struct flashc_merge_problem {
    int32_t n_parts, B, S, H, D;
    flashc_dtype part_dtype, out_dtype;
    int64_t part_stride[4]; // [part, batch, seq, head]
    int64_t out_stride[3];  // [batch, seq, head]
} flashc_merge_problem;

typedef struct flashc_merge_args {
    const void *out_parts;
    const float *lse_parts;
    void *out;              // may be out_parts (in place, same dtype and strides)
    float *lse;             // may be NULL, or lse_parts (in place)
    void *stream;
} flashc_merge_args;

typedef struct flashc_backend_ops {
    const char *name;
    flashc_status (*init)(flashc_ctx *ctx);           // may be NULL; sets ctx->priv
    void (*fini)(flashc_ctx *ctx);                    // may be NULL
    // FLASHC_OK or UNSUPPORTED (with a message through flashc__fail) for a valid problem
    flashc_status (*supports)(flashc_ctx *ctx, const flashc_problem *p);
    size_t (*fwd_ws)(flashc_ctx *ctx, const flashc_problem *p);
    size_t (*bwd_ws)(flashc_ctx *ctx, const flashc_problem *p);
    flashc_status (*fwd)(flashc_ctx *ctx, const flashc_problem *p, const flashc_fwd_args *a);
    flashc_status (*bwd)(flashc_ctx *ctx, const flashc_problem *p, const flashc_bwd_args *a);
    // copy n int32 from the backend's memory to the host (NULL: host memory, plain memcpy)
    flashc_status (*read_i32)(flashc_ctx *ctx, int32_t *dst, const int32_t *src, int64_t n);
    // allocate / free backend memory, 256-byte aligned (NULL: aligned_alloc / free). Used for the
    // ctx-owned workspace, and by tests and benchmarks to stage tensors.
    void *(*ws_alloc)(flashc_ctx *ctx, size_t bytes);
    void (*ws_free)(flashc_ctx *ctx, void *ptr);
    // copy bytes host -> backend memory (to_backend = 1) or backend -> host (0), synchronously
    // (NULL: host memory, memcpy). For tests and benchmarks.
    flashc_status (*copy)(flashc_ctx *ctx, void *dst, const void *src, size_t bytes, int to_backend);
    // KV cache (NULL: the backend has none, flashc_fwd_kvcache answers UNSUPPORTED): workspace bytes
    // (a's tensor pointers are NULL in that query), and the call: append k_new / v_new (rotated) at
    // c_b, rotate q, attend. Must not fail after it has written anything.
    size_t (*kvcache_ws)(flashc_ctx *ctx, const flashc_problem *p, const flashc_kvcache_args *a);
    flashc_status (*fwd_kvcache)(flashc_ctx *ctx, const flashc_problem *p, const flashc_kvcache_args *a);
    // flashc_merge (NULL: the backend has none, flashc_merge answers UNSUPPORTED)
    flashc_status (*merge)(flashc_ctx *ctx, const flashc_merge_problem *m, const flashc_merge_args *a);
} flashc_backend_ops;

FLASHC_INTERNAL extern const flashc_backend_ops flashc__ref_ops;
FLASHC_INTERNAL extern const flashc_backend_ops flashc__cpu_ops;
#ifdef FLASHC_WITH_CUDA
FLASHC_INTERNAL extern const flashc_backend_ops flashc__cuda_ops;
FLASHC_INTERNAL int flashc__cuda_device_present(void);
#endif

// The fp64 reference on fp64 tensors (the specification; used by the REF backend, which converts
// its inputs to double, and by the tests, e.g. the finite-difference check). Same layouts and
// strides as the problem describes, but every tensor is double; lse is double too.
FLASHC_INTERNAL void flashc__ref_fwd_f64(const flashc_problem *p, const double *q, const double *k,
                                         const double *v, double *o, double *lse);
FLASHC_INTERNAL void flashc__ref_bwd_f64(const flashc_problem *p, const double *q, const double *k,
                                         const double *v, const double *o, const double *lse,
                                         const double *dout, double *dq, double *dk, double *dv);

// Host-memory pieces of the KV-cache and merge paths, shared by the host backends (ref, cpu);
// src/flashc_kvcache.c. Rotary and append are computed in fp64 and rounded to the dtype once.
// Head vector x[x_off .. x_off + D) (dtype dt) rotated at position pos into dst[dst_off ..] (dtype
// dt); without rotary a plain copy.
FLASHC_INTERNAL void flashc__rope_row(const flashc_kvcache_args *a, flashc_dtype dt, int32_t D, const void *x,
                                      int64_t x_off, int64_t pos, void *dst, int64_t dst_off);
// Step 1 of flashc_fwd_kvcache: k_new / v_new rows (k_new rotated) written into the cache at c_b.
FLASHC_INTERNAL void flashc__kvcache_append_host(const flashc_problem *p, const flashc_kvcache_args *a);
// Step 2: q rotated (positions per a->rotary_q_per_row) into q_rot, dtype p->dtype, contiguous
// (B, Sq, H, D). Only with rotary.
FLASHC_INTERNAL void flashc__kvcache_rotate_q_host(const flashc_problem *p, const flashc_kvcache_args *a, void *q_rot);
// Bytes of that q_rot (0 without rotary).
static inline size_t flashc__kvcache_q_rot_bytes(const flashc_problem *p, const flashc_kvcache_args *a) {
    return a->rotary_cos ? (size_t)p->B * (size_t)p->Sq * (size_t)p->H * (size_t)p->D * flashc__dtype_size(p->dtype) : 0;
}
// The merge in fp64 on host memory (the ops' merge of ref and cpu); _rows does the rows [r0, r1)
// of the (B, S, H) rows, flattened in that order, so callers can share them out between threads.
FLASHC_INTERNAL flashc_status flashc__merge_host(flashc_ctx *ctx, const flashc_merge_problem *m,
                                                 const flashc_merge_args *a);
FLASHC_INTERNAL void flashc__merge_host_rows(const flashc_merge_problem *m, const flashc_merge_args *a, int64_t r0,
                                             int64_t r1);

struct flashc_ctx {
    flashc_backend backend;          // resolved (never AUTO)
    const flashc_backend_ops *ops;
    int n_threads;                   // CPU worker threads (>= 1)
    void *priv;                      // the backend's own state
    void *ws;                        // ctx-owned workspace, used when the caller passes none
    size_t ws_size;
    int32_t *host_i32;               // host copies of cu_seqlens / seqused_k (grown on demand)
    size_t host_i32_cap;
    char err[512];
};

// Record a formatted message in ctx->err and return status (ctx may be NULL).
FLASHC_INTERNAL flashc_status flashc__fail(flashc_ctx *ctx, flashc_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// The front end's checks, shared by src/flashc.c and src/flashc_kvcache.c.
// resolve: flashc_attn_desc -> flashc_problem. mode FLASHC__FOR_KVCACHE leaves the block table's
// entries (checked against the cache lengths instead) and the backend's supports() to the caller.
enum { FLASHC__FOR_FWD = 0, FLASHC__FOR_BWD = 1, FLASHC__FOR_KVCACHE = 2 };
FLASHC_INTERNAL flashc_status flashc__resolve(flashc_ctx *ctx, const flashc_attn_desc *d, flashc_problem *p, int mode);
// A (batch, rows, heads, D) tensor's strides: "same as" filled in, negative or overlapping rejected.
FLASHC_INTERNAL flashc_status flashc__check_tensor(flashc_ctx *ctx, const char *name, int64_t *st, const int64_t *same_as,
                                                   int varlen, int64_t batch, int64_t rows, int64_t heads, int32_t D);
// n int32 from the backend's memory into ctx->host_i32 + at (which may move: take pointers after).
FLASHC_INTERNAL flashc_status flashc__fetch_i32(flashc_ctx *ctx, size_t at, const int32_t *src, int64_t n);
// ctx->host_i32 with room for n entries (kept), or NULL when out of memory.
FLASHC_INTERNAL int32_t *flashc__host_i32(flashc_ctx *ctx, size_t n);
// The caller's workspace (checked) or the ctx's own, grown on demand.
FLASHC_INTERNAL flashc_status flashc__pick_workspace(flashc_ctx *ctx, size_t need, void **ws, size_t *ws_size);

#ifdef __cplusplus
}
#endif
#endif // FLASHC_INTERNAL_H
