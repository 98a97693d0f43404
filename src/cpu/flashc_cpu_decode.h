// flashc_cpu_decode.h -- private to the CPU backend: the decode kernel (KV cache, paged K/V).
//
// Decode is one or a few query rows against a long cache: bound by the bytes of K and V, not by
// FLOPs. So the kernel is built around reading K and V once, at memory speed:
//   - a work item is (sequence b, a range of kv heads, a chunk of query positions, a split of the
//     key range); every query head of each kv head's group and every query position of the chunk
//     (up to FLASHC_CPU_DEC_MAX_ROWS rows) is computed against one pass over K_j, V_j (GQA packing);
//   - items take all kv heads when they fit, so an item reads whole (key, all heads) rows: in the
//     (.., seq, heads_kv, head_dim) layout those are contiguous, which the prefetchers and the TLB
//     like far better than one head's 256 bytes every heads_kv * 256 bytes;
//   - when (batch x query chunks x head ranges) cannot keep the threads busy, the key range is
//     split (flash-decoding) and the fp32 partials are merged by their LSEs (flashc__merge_host_rows);
//   - K_j, V_j rows are addressed through the block table (any page size) or cache_batch_idx via
//     per-block row-pointer arrays, and read in their own dtype (bf16, f16, f32), widened in
//     registers, or for bf16 on AVX-512 BF16 multiplied by dot products without widening (the
//     widening kernel computed ~12.5 GB/s a core, less than a quiet host's DRAM gives: NOTES
//     session 39); the next block's rows are prefetched, whole and in address order, while this
//     one computes.
// The kernel (flashc_cpu_decode_kernel.h) is compiled per ISA like the FA2 kernels; the driver is
// flashc_cpu_decode.c.
#ifndef FLASHC_CPU_DECODE_H
#define FLASHC_CPU_DECODE_H

#include "flashc_cpu.h"
#include "flashc_threads.h"

// Keys per block, at most (the scratch's; AVX2 takes 16, flashc_cpu_decode_kernel.h says why): the
// K and V rows of a 32-key block for all 8 kv heads at D = 128, bf16, are 2 x 64 KiB, so this block
// and the prefetched next one stay in a 512 KiB L2.
#define FLASHC_CPU_DEC_BC 32
// Query rows per register tile (the QK and PV microkernels keep 4 rows x 2 vectors in registers).
#define FLASHC_CPU_DEC_MR 4
// Rows (query positions x heads) per work item: bounds the Q and O scratch (64 KiB each at D = 128).
#define FLASHC_CPU_DEC_MAX_ROWS 128
// Scratch rows are padded to the widest ISA's vector (16 floats), so sizes do not depend on the ISA.
#define FLASHC_CPU_DEC_DP_ALIGN 16
// Automatic split-KV aims at this many items per thread (dynamic scheduling evens out the rest)
// and never makes a split shorter than MIN_SPLIT keys of the capacity, or more than MAX_SPLITS.
#define FLASHC_CPU_DEC_ITEMS_PER_THREAD 8
#define FLASHC_CPU_DEC_MIN_SPLIT 1024
#define FLASHC_CPU_DEC_MAX_SPLITS 64

// One call's plan and tensors, shared by every item.
typedef struct flashc_cpu_dec_job {
    const flashc_problem *p;
    const void *q;                // q rows: the user's, or the rotated copy (kvcache with rotary)
    int64_t q_stride[3];
    const void *k, *v;
    void *o;
    float *lse;                   // may be NULL
    int n_splits;                 // >= 1; 1 writes o / lse directly
    int64_t qc;                   // query positions per item
    int32_t hk_per;               // kv heads per item
    int32_t n_hg;                 // head ranges per (sequence, query chunk): ceil(H_kv / hk_per)
    int64_t rows;                 // scratch rows per item: hk_per * group * qc
    float *part_o, *part_lse;     // n_splits > 1: (n_splits, PB, PS, H, D) and (n_splits, PB, H, PS), fp32
    int64_t PB, PS;               // (B, Sq) in batch mode, (1, total_q) in varlen mode
    int64_t *item_off;            // B + 1 prefix sums of the items of each sequence
    char *scratch;                // per-thread slices
    size_t slice;
} flashc_cpu_dec_job;

// Item (b, kv heads [kh0, kh0 + nh), query positions [i0, i0 + qc), split sp): writes its rows of o /
// lse (n_splits == 1) or of the partials.
typedef void (*flashc_cpu_dec_item_fn)(const flashc_cpu_dec_job *J, int b, int kh0, int nh, int64_t i0, int sp,
                                       void *scratch);

FLASHC_INTERNAL void flashc__cpu_dec_item_scalar(const flashc_cpu_dec_job *J, int b, int kh0, int nh, int64_t i0,
                                                 int sp, void *scratch);
FLASHC_INTERNAL void flashc__cpu_dec_item_avx2(const flashc_cpu_dec_job *J, int b, int kh0, int nh, int64_t i0,
                                               int sp, void *scratch);
FLASHC_INTERNAL void flashc__cpu_dec_item_avx512(const flashc_cpu_dec_job *J, int b, int kh0, int nh, int64_t i0,
                                                 int sp, void *scratch);

// Per-thread scratch, carved from one 64-byte aligned slice (base == NULL: size only).
//   Q, O    rows x Dp   Q_i * scale (* log2 e) and the unnormalised O_i accumulators (fp32)
//   m, l, alpha  rows   running max (log2 units), running sum, this block's rescale
//   lo, hi  rows        each row's visible key range
//   S       MR x BC     S_ij of one row tile, then P_ij in place
//   k_off, v_off  2 x BC  element offsets of this block's and the next block's key rows (head 0)
//   kp, vp  BC          row pointers of this block's K_j, V_j for one kv head
//   kn, vn  BC x rows   the next block's K and V segments to prefetch (a row, or a row's head)
//   Ks, Vs  BC x Dp     fp32 copies of K_j, V_j when D is not a multiple of the vector width
typedef struct flashc_cpu_dec_scratch {
    float *Q, *O, *m, *l, *alpha, *S, *Ks, *Vs;
    int64_t *lo, *hi, *k_off, *v_off;
    const char **kp, **vp, **kn, **vn;
} flashc_cpu_dec_scratch;

static inline size_t flashc__cpu_dec_take(char *base, size_t *off, size_t bytes) {
    size_t at = *off;
    *off += (bytes + 63) / 64 * 64;
    (void)base;
    return at;
}

static inline size_t flashc__cpu_dec_carve(int64_t rows, int64_t D, void *base, flashc_cpu_dec_scratch *s) {
    const size_t f = sizeof(float), R = (size_t)rows, BC = FLASHC_CPU_DEC_BC, MR = FLASHC_CPU_DEC_MR;
    const size_t Dp = ((size_t)D + FLASHC_CPU_DEC_DP_ALIGN - 1) / FLASHC_CPU_DEC_DP_ALIGN * FLASHC_CPU_DEC_DP_ALIGN;
    size_t off = 0, at[16];
    int n = 0;
    at[n++] = flashc__cpu_dec_take(base, &off, R * Dp * f);      // Q
    at[n++] = flashc__cpu_dec_take(base, &off, R * Dp * f);      // O
    at[n++] = flashc__cpu_dec_take(base, &off, R * f);           // m
    at[n++] = flashc__cpu_dec_take(base, &off, R * f);           // l
    at[n++] = flashc__cpu_dec_take(base, &off, R * f);           // alpha
    at[n++] = flashc__cpu_dec_take(base, &off, MR * BC * f);     // S
    at[n++] = flashc__cpu_dec_take(base, &off, BC * Dp * f);     // Ks
    at[n++] = flashc__cpu_dec_take(base, &off, BC * Dp * f);     // Vs
    at[n++] = flashc__cpu_dec_take(base, &off, R * 8);           // lo
    at[n++] = flashc__cpu_dec_take(base, &off, R * 8);           // hi
    at[n++] = flashc__cpu_dec_take(base, &off, 2 * BC * 8);      // k_off
    at[n++] = flashc__cpu_dec_take(base, &off, 2 * BC * 8);      // v_off
    at[n++] = flashc__cpu_dec_take(base, &off, 2 * BC * sizeof(char *));     // kp, vp
    at[n++] = flashc__cpu_dec_take(base, &off, 2 * BC * R * sizeof(char *)); // kn, vn (rows >= kv heads)
    if (s && base) {
        char *c = base;
        s->Q = (float *)(c + at[0]);
        s->O = (float *)(c + at[1]);
        s->m = (float *)(c + at[2]);
        s->l = (float *)(c + at[3]);
        s->alpha = (float *)(c + at[4]);
        s->S = (float *)(c + at[5]);
        s->Ks = (float *)(c + at[6]);
        s->Vs = (float *)(c + at[7]);
        s->lo = (int64_t *)(c + at[8]);
        s->hi = (int64_t *)(c + at[9]);
        s->k_off = (int64_t *)(c + at[10]);
        s->v_off = (int64_t *)(c + at[11]);
        s->kp = (const char **)(c + at[12]);
        s->vp = s->kp + BC;
        s->kn = (const char **)(c + at[13]);
        s->vn = s->kn + BC * R;
    }
    return off;
}

// ------------------------------------------------------------------------------------------------
// the driver (flashc_cpu_decode.c), called by flashc_cpu.c

// flashc_fwd and flashc_fwd_kvcache where flashc_cpu.c's fwd_by_decode picks this kernel (few
// queries a sequence; any seqlen_q is correct, varlen, paged or not, but from seqlen_q ~32 the FA2
// kernel is faster).
FLASHC_INTERNAL size_t flashc__cpu_decode_fwd_ws(const flashc_problem *p, int n_threads);
FLASHC_INTERNAL flashc_status flashc__cpu_decode_fwd(flashc_pool *pool, const char *isa, const flashc_problem *p,
                                                     const flashc_fwd_args *a);
// flashc_fwd_kvcache: append, rotate q, decode.
FLASHC_INTERNAL size_t flashc__cpu_decode_kvcache_ws(const flashc_problem *p, int n_threads,
                                                     const flashc_kvcache_args *a);
FLASHC_INTERNAL flashc_status flashc__cpu_decode_kvcache(flashc_pool *pool, const char *isa, const flashc_problem *p,
                                                         const flashc_kvcache_args *a);

#endif // FLASHC_CPU_DECODE_H
