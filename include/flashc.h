/* flashc.h -- exact attention by the FlashAttention-2 algorithm, on CPUs and NVIDIA GPUs.
 *
 * The only public header: C11, no CUDA or intrinsics headers. Semantics follow FlashAttention-2
 * (so users can switch without surprises); the contract is written out next to each function.
 *
 *   O = softmax(scale * Q K^T  [softcap] [+ ALiBi] [causal / sliding-window mask]) V
 *
 * Quick start:
 *     flashc_ctx *ctx; flashc_ctx_create(&ctx, FLASHC_BACKEND_AUTO, 0);
 *     flashc_attn_desc d = {0};
 *     d.batch = B; d.seqlen_q = Sq; d.seqlen_k = Sk; d.heads = H; d.heads_kv = H; d.head_dim = D;
 *     d.dtype = FLASHC_DTYPE_BF16; d.causal = 1;
 *     flashc_fill_contiguous_strides(&d);
 *     if (flashc_fwd(ctx, &d, q, k, v, o, lse, NULL, 0, NULL) != FLASHC_OK)
 *         fprintf(stderr, "%s\n", flashc_ctx_last_error(ctx));
 *     flashc_ctx_free(ctx);
 *
 * ABI: structs are zero-initialised by the caller; new fields are only ever taken from the
 * `reserved` tail, so a binary built against an older header keeps working. Enum values are
 * append-only and never reused.
 */
#ifndef FLASHC_H
#define FLASHC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#  if defined(FLASHC_BUILD)
#    define FLASHC_API __declspec(dllexport)
#  else
#    define FLASHC_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__)
#  define FLASHC_API __attribute__((visibility("default")))
#else
#  define FLASHC_API
#endif

/* ------------------------------------------------------------------------------------------ */
/* Version                                                                                     */

#define FLASHC_VERSION_MAJOR 0
#define FLASHC_VERSION_MINOR 1
#define FLASHC_VERSION_PATCH 0
#define FLASHC_VERSION_NUMBER (FLASHC_VERSION_MAJOR * 10000 + FLASHC_VERSION_MINOR * 100 + FLASHC_VERSION_PATCH)

FLASHC_API unsigned    flashc_version_number(void); /* of the library actually loaded */
FLASHC_API const char *flashc_version_string(void); /* "0.1.0" */

/* ------------------------------------------------------------------------------------------ */
/* Status codes. Append-only; values are never reused. 0 is success, negatives are errors.      */

typedef enum flashc_status {
    FLASHC_OK                  = 0,
    FLASHC_ERR_INVALID_ARG     = -1, /* NULL pointer, bad size, bad stride, heads % heads_kv != 0 ... */
    FLASHC_ERR_UNSUPPORTED     = -2, /* a valid request this backend/build cannot do (head_dim, dtype) */
    FLASHC_ERR_NO_BACKEND      = -3, /* backend not compiled in, or no device */
    FLASHC_ERR_ALLOC           = -4, /* out of host or device memory */
    FLASHC_ERR_WORKSPACE_SMALL = -5, /* see flashc_fwd_workspace_size / flashc_bwd_workspace_size */
    FLASHC_ERR_DEVICE          = -6, /* CUDA runtime or launch error; flashc_ctx_last_error has the text */
    FLASHC_ERR_INTERNAL        = -7,
} flashc_status;

FLASHC_API const char *flashc_status_string(flashc_status s); /* never NULL */

/* ------------------------------------------------------------------------------------------ */
/* Types                                                                                       */

typedef enum flashc_dtype {
    FLASHC_DTYPE_F32  = 0,
    FLASHC_DTYPE_F16  = 1,
    FLASHC_DTYPE_BF16 = 2,
    FLASHC_DTYPE_E4M3 = 3, /* fp8 (OCP e4m3) q, k, v of a forward: see q_descale; o is then bf16 */
} flashc_dtype;

typedef enum flashc_backend {
    FLASHC_BACKEND_AUTO = 0, /* CUDA if compiled in and a device is present, else CPU */
    FLASHC_BACKEND_REF  = 1, /* the plain fp64 reference: the specification, slow, host memory */
    FLASHC_BACKEND_CPU  = 2, /* FlashAttention-2 on the CPU, host memory, internal thread pool */
    FLASHC_BACKEND_CUDA = 3, /* FlashAttention-2 on an NVIDIA GPU, device memory, caller's stream */
} flashc_backend;

/* Problem description. Zero-initialise, then set the fields; zero means "default" for every
 * optional field. One description serves the forward and the backward.
 *
 * Layout (element strides; the last dim, head_dim, is always contiguous):
 *   batch mode   q, o, dout, dq : (batch, seqlen_q, heads,    head_dim)  strides [batch, seq, head]
 *                k, v, dk, dv   : (batch, seqlen_k, heads_kv, head_dim)
 *                lse            : fp32 (batch, heads, seqlen_q), contiguous
 *   varlen mode  (cu_seqlens_q != NULL) q is (total_q, heads, head_dim), k/v (total_k, heads_kv,
 *                head_dim); sequence b owns rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1 of q and
 *                likewise of k/v; the [batch] stride is ignored; seqlen_q / seqlen_k are the
 *                maximum sequence lengths (an upper bound the library checks), lse is fp32
 *                (heads, total_q) contiguous, total_q = cu_seqlens_q[batch]. Rows before
 *                cu_seqlens_q[0] belong to no sequence: the forward writes o = 0, lse = +inf there,
 *                the backward dq = 0 (and dk = dv = 0 in rows before cu_seqlens_k[0]).
 *
 * Masking, aligned to the bottom-right corner like FlashAttention-2 (PyTorch's is_causal is
 * top-left; ours is not): with sq, sk this sequence's lengths, query i sees key j iff
 *     i + sk - sq - window_left  <=  j  <=  i + sk - sq + window_right
 * where window_left / window_right = -1 means unbounded. causal = 1 means window_right = 0.
 * The window is read only when use_window = 1 (a zeroed description has no window, since 0 is a
 * valid window width); FlashAttention's window_size=(l, r) is use_window = 1, left = l, right = r.
 *
 * Score pipeline per (i, j): s = scale * q_i . k_j; if softcap > 0: s = softcap * tanh(s / softcap);
 * if alibi: s -= slope * |i + sk - sq - j|; masked keys drop out.
 *
 * Rows that see no key (fully masked, or sk == 0) produce out = 0, lse = +inf, zero gradients.
 *
 * NaN in q, k or v propagates as in the fp64 reference, never turning into a masked key or a row
 * with no key: a NaN score (q_i or a key k_j the row sees) makes that row's out and lse NaN; a NaN
 * element of v_j makes that element of out NaN in the rows that see key j, an infinite one makes it
 * infinite or NaN as in the reference, and either may make it NaN in rows of the same sequence and
 * head that do not see key j (P = 0 times NaN or Inf in P V, as in SDPA's math path). Masked keys'
 * scores are replaced, so a NaN k_j leaves rows that do not see it unchanged. In the backward a NaN
 * row or key may spread NaN over the gradients of its tile beyond the reference's. Scores may be
 * formed as q . k in fp32 before the scale multiplies them (as FlashAttention-2 does): a |q . k|
 * beyond the fp32 range may make the row's out NaN where the reference is finite.
 */
typedef struct flashc_attn_desc {
    int32_t      batch;        /* >= 1 (number of sequences in varlen mode) */
    int32_t      seqlen_q;     /* >= 0; max over sequences in varlen mode */
    int32_t      seqlen_k;     /* >= 0; max over sequences in varlen mode */
    int32_t      heads;        /* >= 1 query heads */
    int32_t      heads_kv;     /* >= 1, heads % heads_kv == 0; query head h reads kv head h / (heads / heads_kv) */
    int32_t      head_dim;     /* >= 1 (backends state their limits through flashc_supports) */
    flashc_dtype dtype;        /* of q, k, v, o, dout, dq, dk, dv */

    float        scale;        /* 0 => 1 / sqrt(head_dim); must be finite and > 0 otherwise */
    float        softcap;      /* 0 => off; > 0 => s = softcap * tanh(s / softcap) */
    int32_t      causal;       /* 0 or 1; 1 forces window_right = 0 */
    int32_t      window_left;  /* -1 = unbounded; >= 0 a window; only read when use_window = 1 */
    int32_t      window_right; /* -1 = unbounded; >= 0 a window; only read when use_window = 1 */
    int32_t      use_window;   /* 0 => window_left = window_right = -1 (no window) */
    const float *alibi_slopes; /* NULL => off; fp32, (heads) or (batch, heads), on the ctx's device */
    int64_t      alibi_batch_stride; /* 0 => one slope per head shared by all batches; else heads */
    int32_t      deterministic; /* 1 => bit-identical backward run to run (may cost speed) */

    /* Element strides [batch, seq, head]. Zero strides everywhere for a tensor mean "contiguous";
     * dout/dq/dk/dv all zero mean "same as o/q/k/v". */
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];
    int64_t do_stride[3], dq_stride[3], dk_stride[3], dv_stride[3];

    /* Varlen (padding-free) batches. int32 arrays of batch + 1 non-decreasing offsets, on the
     * ctx's device. seqused_k (optional, batch entries) caps the keys sequence b uses. */
    const int32_t *cu_seqlens_q;
    const int32_t *cu_seqlens_k;
    const int32_t *seqused_k;

    /* Paged K/V (PagedAttention), forward only, any page size >= 1. With block_table != NULL, k and
     * v are pools of pages (num_pages, page_size, heads_kv, head_dim) whose k_stride[0] / v_stride[0]
     * step from page to page; key j of sequence b is row j % page_size of page
     * block_table[b * block_table_stride + j / page_size]. The key count of sequence b is seqlen_k,
     * or its cu_seqlens_k / seqused_k / cache length where those are given. */
    const int32_t *block_table;   /* int32 (batch, block_table_stride), on the ctx's device */
    int64_t block_table_stride;   /* >= ceil(seqlen_k / page_size) */
    int32_t page_size;            /* >= 1 */
    int32_t num_pages;            /* pages in the pool; every block_table entry used is < num_pages */

    /* fp8 forward (dtype = FLASHC_DTYPE_E4M3; forward only, CUDA on sm_90 and the ref backend):
     * q, k and v hold e4m3 codes and stand for code * descale, one factor per tensor (0 => 1;
     * must be 0 for the other dtypes). o is bf16, lse as usual. */
    float   q_descale, k_descale, v_descale;
    int32_t reserved32;   /* must be zero */

    int64_t reserved[19]; /* must be zero; future fields come from here */
} flashc_attn_desc;

/* Fill the zero strides of q, k, v, o (and leave dout/dq/dk/dv "same as") for the contiguous
 * (batch, seq, heads, head_dim) layout, or (total, heads, head_dim) in varlen mode, or
 * (num_pages, page_size, heads_kv, head_dim) for paged k and v. */
FLASHC_API void flashc_fill_contiguous_strides(flashc_attn_desc *d);

/* ------------------------------------------------------------------------------------------ */
/* Context: one per calling thread. Owns the CPU thread pool, the chosen CPU kernels, cached   */
/* CUDA device properties, and the text of the last error. Calls given no workspace share the */
/* ctx's own buffer: on CUDA, calls on different streams that may overlap need their own      */
/* workspaces (or ctxs).                                                                      */

typedef struct flashc_ctx flashc_ctx;

/* n_threads: CPU worker threads, 0 => all online cores (FLASHC_NUM_THREADS overrides).
 * For CUDA the ctx uses the device current at creation. */
FLASHC_API flashc_status flashc_ctx_create(flashc_ctx **out, flashc_backend backend, int n_threads);
FLASHC_API void          flashc_ctx_free(flashc_ctx *ctx); /* accepts NULL */
FLASHC_API flashc_backend flashc_ctx_backend(const flashc_ctx *ctx); /* the resolved backend */
/* The message of the last failed call on ctx: which argument, what was expected. "" if none.
 * Valid until the next call on ctx. With ctx NULL: why this thread's last flashc_ctx_create
 * failed (e.g. a FLASHC_CPU_ISA this CPU lacks, a CUDA error), valid in this thread until its
 * next flashc_ctx_create; "ctx is NULL" if that one did not fail. */
FLASHC_API const char   *flashc_ctx_last_error(const flashc_ctx *ctx);

/* FLASHC_OK if the ctx's backend can run this problem (forward and backward; the forward alone for
 * E4M3, which has no backward), else the status flashc_fwd would return, with the reason in
 * flashc_ctx_last_error; paged K/V, which has no backward, answers UNSUPPORTED. On CUDA two limits
 * are checked later, by the call itself: the backward's shared memory (flashc_bwd) and E4M3's
 * 16-byte alignment and strides (flashc_fwd). Reads cu_seqlens and seqused_k (a synchronous copy
 * on CUDA) and, on the host backends, block_table; no other tensor memory. */
FLASHC_API flashc_status flashc_supports(flashc_ctx *ctx, const flashc_attn_desc *d);

/* Workspace sizes in bytes (on the ctx's device). 0 means none is needed. The sizes depend only on
 * the description and the ctx (thread count; on CUDA the device's SM count and the FLASHC_CUDA_*
 * switches read at its creation), never on tensor contents except, in varlen mode, cu_seqlens_q /
 * cu_seqlens_k (read to the host: a synchronous copy on CUDA). */
FLASHC_API size_t flashc_fwd_workspace_size(flashc_ctx *ctx, const flashc_attn_desc *d);
FLASHC_API size_t flashc_bwd_workspace_size(flashc_ctx *ctx, const flashc_attn_desc *d);

/* Forward: writes o and (if lse != NULL) lse.
 *   q, k, v, o: see the layout above, dtype d->dtype, on the ctx's device.
 *   lse: fp32 natural-log log-sum-exp of the scaled scores, (batch, heads, seqlen_q) or (heads, total_q);
 *        may be NULL when not needed (the backward needs it).
 *   workspace: at least flashc_fwd_workspace_size bytes, 64-byte aligned; or NULL with size 0, in
 *        which case the ctx uses a buffer of its own, grown on first need (one allocation per growth).
 *   stream: a cudaStream_t for CUDA (NULL = legacy default stream), ignored elsewhere.
 * @return FLASHC_OK or a negative status; on error nothing is written.
 * Note: o must not alias q, k or v. On Hopper, long batch-mode rows without a window or
 * seqused_k (2048 keys and up at head_dim <= 128, 16384 at 256; causal with seqlen_q = seqlen_k:
 * twice that, on the tiles that pair evenly) split the last tiles between CTAs, so that every SM
 * has work to the end: the workspace then holds their partial results (14-36 MB on 132 SMs), the
 * output is bit-identical run to run on one GPU model but depends on its SM count (and on
 * FLASHC_CUDA_CTAS), and the split counters live as the KV-cache's do (flashc_fwd_kvcache): in
 * the ctx with its own workspace (one allocation and synchronisation when they first grow), else
 * in the caller's, zeroed by each call. On the CPU a forward with seqlen_q <= 16 runs the decode
 * kernel, which splits the keys over the threads: bit-identical run to run for one thread count,
 * rounded differently for another. */
FLASHC_API flashc_status flashc_fwd(flashc_ctx *ctx, const flashc_attn_desc *d,
                                    const void *q, const void *k, const void *v,
                                    void *o, float *lse,
                                    void *workspace, size_t workspace_size, void *stream);

/* Backward: given dout, and o and lse from flashc_fwd on the same inputs, writes dq, dk, dv
 * (dtype d->dtype, strides dq/dk/dv_stride). dk and dv sum over the query heads of a GQA group.
 * workspace as for the forward (fp32 dQ accumulators, D = rowsum(dO * O)).
 * d->deterministic = 1 gives bit-identical results run to run (the CPU backend always is).
 * Note: on Hopper, batch-mode problems without a mask or seqused_k at head_dim <= 128, with 2048
 * query rows and up, split the last key blocks between CTAs where the grid leaves a partial last
 * round: the workspace then holds their fp32 dK, dV partials (up to 52 MB on 132 SMs; each call
 * zeroes its counters), and dk, dv depend on the SM count (and on FLASHC_CUDA_CTAS), still
 * bit-identical run to run with d->deterministic = 1. */
FLASHC_API flashc_status flashc_bwd(flashc_ctx *ctx, const flashc_attn_desc *d,
                                    const void *q, const void *k, const void *v,
                                    const void *o, const float *lse, const void *dout,
                                    void *dq, void *dk, void *dv,
                                    void *workspace, size_t workspace_size, void *stream);

/* ------------------------------------------------------------------------------------------ */
/* KV cache (decode): FlashAttention-2's flash_attn_with_kvcache.                               */

/* The cache is described by the flashc_attn_desc passed with it: k_stride / v_stride are the
 * cache's strides, seqlen_k is its capacity per sequence (or max_pages * page_size when paged),
 * batch, heads, heads_kv, head_dim, dtype, scale, softcap, causal, window and ALiBi mean what they
 * mean for flashc_fwd. seqlen_q is the number of new query tokens (1 for plain decode).
 *
 * Per sequence b, with c = cache_seqlens[b] tokens already in the cache:
 *   1. if k_new / v_new are given, their seqlen_new tokens are written into the cache at positions
 *      c .. c + seqlen_new - 1 (rotary applied to k_new first, at those positions);
 *   2. q is rotated (if rotary is on) at positions c + i when causal or windowed, c otherwise (as
 *      FlashAttention-2 does);
 *   3. q attends to keys 0 .. c + seqlen_new - 1 of the cache, the mask aligned bottom-right.
 * Rows that see no key produce out = 0, lse = +inf. The append happens in place, before the attention.
 *
 * Validation of the int32 arrays (cache_seqlens, cache_batch_idx, block_table). The host backends
 * (ref, cpu) check every entry a call uses and fail with FLASHC_ERR_INVALID_ARG. On the CUDA backend
 * they are device memory and are NOT validated beyond clamping, as FlashAttention does: reading them
 * back would cost a synchronous copy per call (and forbid CUDA graph capture). The kernels clamp
 * c = cache_seqlens[b] into [0, seqlen_k - seqlen_new], cache_batch_idx[b] into [0, num_cache_rows)
 * (only >= 0 when num_cache_rows is 0), block_table entries into [0, num_pages), and rotary
 * positions to seqlen_ro - 1, so that no access leaves the given tensors; a bad entry gives a wrong
 * result, not a fault. Everything else (shapes, strides, seqlen_new, rotary sizes that do not
 * depend on c) is checked on every backend. The CUDA path makes no host-device synchronisation
 * (it can be captured in a CUDA graph) once the workspace is given or the ctx's own has grown to
 * the size the call needs. Split-KV counts finished splits on int counters that every call leaves
 * zero: with the ctx's own workspace they live in the ctx (zeroed once, no memset per call), with a
 * caller's workspace in it (zeroed by each call). */
typedef struct flashc_kvcache_desc {
    const int32_t *cache_seqlens;   /* int32 (batch): tokens in the cache before the append; NULL => seqlen_k */
    const int32_t *cache_batch_idx; /* int32 (batch): cache row of sequence b; NULL => b (not with paging).
                                     * Must be >= 0 and < num_cache_rows when that is given (else the
                                     * caller keeps each < the cache's batch dimension); appends
                                     * through two sequences that name one row race. */
    int32_t seqlen_new;             /* tokens in k_new / v_new per sequence; 0 => no append */
    int64_t knew_stride[3], vnew_stride[3]; /* (batch, seqlen_new, heads_kv, head_dim); zero => contiguous */

    /* Rotary embedding (RoPE) on q and k_new: cos and sin are (seqlen_ro, rotary_dim / 2) in the
     * desc's dtype (fp32 for fp32), contiguous. The first rotary_dim dims of each head are rotated:
     * interleaved pairs (x0, x1), (x2, x3) ... (GPT-J) when rotary_interleaved, else halves
     * (x_i, x_{i + rotary_dim/2}) (GPT-NeoX). NULL cos => no rotary. */
    const void *rotary_cos, *rotary_sin;
    int32_t rotary_dim;             /* even, <= head_dim */
    int32_t rotary_interleaved;     /* 0 or 1 */
    int32_t seqlen_ro;              /* rows of cos / sin; every rotated position must be < seqlen_ro */

    int32_t num_splits;             /* split-KV (flash-decoding): 0 => chosen by the library, 1 => none,
                                     * n <= 1024 forces n (each split adds an fp32 partial of
                                     * (batch, seqlen_q, heads, head_dim) to the workspace); the
                                     * CPU backend ignores it above seqlen_q 16, where its FA2
                                     * tiles attend without splitting */
    int64_t num_cache_rows;         /* rows of the cache's batch dimension: bounds cache_batch_idx,
                                     * else (no block table) must be >= batch; 0 => not given
                                     * (cache_batch_idx only checked / clamped >= 0) */
    int64_t reserved[15];           /* must be zero */
} flashc_kvcache_desc;

FLASHC_API size_t flashc_kvcache_workspace_size(flashc_ctx *ctx, const flashc_attn_desc *d,
                                                const flashc_kvcache_desc *kv);

/* q: (batch, seqlen_q, heads, head_dim) with d->q_stride; k_cache, v_cache: the cache (or page
 * pools) with d->k_stride / d->v_stride; k_new, v_new: NULL or (batch, seqlen_new, heads_kv,
 * head_dim); o, lse as in flashc_fwd. Writes o, lse and the appended cache rows, nothing else. */
FLASHC_API flashc_status flashc_fwd_kvcache(flashc_ctx *ctx, const flashc_attn_desc *d,
                                            const flashc_kvcache_desc *kv, const void *q,
                                            void *k_cache, void *v_cache,
                                            const void *k_new, const void *v_new,
                                            void *o, float *lse,
                                            void *workspace, size_t workspace_size, void *stream);

/* ------------------------------------------------------------------------------------------ */
/* Merge: combine partial attention results over disjoint key sets into the exact result.      */
/* The core of split-KV decoding, cascade attention and ring attention across devices.         */
/*                                                                                             */
/*   lse = log(sum_s exp(lse_s)),   out = sum_s exp(lse_s - lse) * out_s                        */
/*                                                                                             */
/* A part with lse_s = +inf saw no key (flashc's convention) and contributes nothing; if no part */
/* saw a key, out = 0 and lse = +inf. A NaN lse_s makes the row's out and lse NaN.              */
typedef struct flashc_merge_desc {
    int32_t n_parts;                /* >= 1 */
    int32_t batch, seqlen, heads, head_dim; /* each part's out is (batch, seqlen, heads, head_dim) */
    flashc_dtype part_dtype;        /* of out_parts (F32 keeps the partials exact) */
    flashc_dtype out_dtype;         /* of out */
    int64_t part_stride[4];         /* element strides [part, batch, seq, head]; zero => contiguous */
    int64_t out_stride[3];          /* [batch, seq, head]; zero => contiguous */
    /* lse_parts: fp32 (n_parts, batch, heads, seqlen) contiguous; lse: fp32 (batch, heads, seqlen) */
    int64_t reserved[8];            /* must be zero */
} flashc_merge_desc;

/* out may be the same memory as part 0 (same dtype and strides) and lse as lse_parts[0]: then the
 * merge is in place, as ring attention uses it. lse may be NULL. */
FLASHC_API flashc_status flashc_merge(flashc_ctx *ctx, const flashc_merge_desc *m,
                                      const void *out_parts, const float *lse_parts,
                                      void *out, float *lse, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* FLASHC_H */
