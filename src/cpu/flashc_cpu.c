// flashc_cpu.c -- the CPU backend's driver: ISA choice, thread pool, workspace layout, and the work
// grids of the forward (batch, head, query block) and backward (batch, head, key block).
//
// The math lives in flashc_cpu_kernels.h (one query block forward, one key block backward),
// compiled per ISA; this file only decides which block runs where and carves the caller's
// workspace. No allocation happens in fwd or bwd: all scratch comes from the workspace, whose size
// depends only on the problem and ctx->n_threads.
//
// Determinism: the forward computes each output row in exactly one kernel call, and the backward
// gives every key block to a fixed dQ "part" (block j to part j mod n_parts), an fp32 partial dQ
// summed with the others in part order at the end, so results are bit-identical from run to run
// whatever thread runs what (they may differ between contexts with different thread counts).
#define _DEFAULT_SOURCE 1 // syscall (amx_usable), beside the build's _POSIX_C_SOURCE
#include "flashc_cpu.h"
#include "flashc_cpu_decode.h"
#include "flashc_threads.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

typedef struct cpu_state {
    flashc_pool *pool;
    const flashc_cpu_kernels *k;
    int decode_max_sq; // forwards with seqlen_q <= this run the decode kernel (fwd_by_decode)
} cpu_state;

// The forward's two kernels: FA2's tiles (flashc_cpu_kernels.h), or the decode kernel
// (flashc_cpu_decode.c) where each sequence has few queries. A query block of the FA2 kernel is
// BR = 144 lanes run against every key block of its head's kv head, so a handful of queries pays
// for K/V loads and tiles it barely uses, once per query head of a GQA group; the decode kernel
// packs a kv group's queries into one pass over K and V and splits the keys over the threads.
// Both read paged K/V (FA2's gathers a key block's rows from their pages: 1.00-1.01x the dense
// call's time in f32, 1.03-1.06x in bf16 at seqlen 2048, where the decode kernel took 2.4-3.3x),
// and both serve flashc_fwd_kvcache (a 1024-token prompt: the decode kernel 1.8-1.9x FA2's time).
// FLASHC_CPU_DECODE_MAX_SQ = N sets the bound (-1: the FA2 kernel always). Its default is where
// the two cross; decode / FA2 time at seqlen_k 4096, D 128, causal, f32 and bf16, GQA 32/8 and MHA
// 16/16, 2 threads: 0.07-0.50 at seqlen_q 1-8, 0.61-0.96 at 16, 1.09-1.79 at 32, 2.1-3.4 at 144
// (dev/cpu/decode_rule.py, bench/results/cpu_amd-epyc-2c_2026-12-05-s32-rule.txt).
#define DECODE_MAX_SQ 16
static int fwd_by_decode(const cpu_state *st, const flashc_problem *p) { return p->Sq <= st->decode_max_sq; }

// The backward groups sequences into waves of at most this many query rows (and key rows) unless a
// single sequence is longer, bounding its fp32 buffers (the dQ parts, GQA dK/dV sums) by
// max(seqlen, 4096) rows: O(seqlen), 2 MiB per partial at D = 128 and 4096 rows.
#define BWD_WAVE_ROWS 4096
// The backward's dQ parts: between n_threads and 4 x n_threads (so a slow or descheduled thread's
// share can be taken over), as many as fit in 32 MiB of fp32 partials; never fewer than n_threads.
#define BWD_PART_BYTES (32u << 20)
// Rows per chunk of the backward's dQ reduction.
#define REDUCE_ROWS 256

// ------------------------------------------------------------------------------------------------
// init / fini: pick the kernels, start the pool

// AMX-BF16 and AMX-TILE (CPUID.(7,0):EDX bits 22, 24), and Linux's leave for this process to use
// the tile data (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, 18; Linux 5.16 on): asked
// once, process-wide, as oneDNN does. Linux refuses it (so flashc stays on avx512) where a thread
// has an alternate signal stack too small for the larger signal frame the tile state needs.
static int amx_usable(void) {
#if defined(__x86_64__) && defined(__linux__)
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 22 & 1) || !(d >> 24 & 1)) return 0;
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return 0;
#endif
}

// FLASHC_CPU_ISA = scalar | avx2 | avx512 | amx forces a level (an error if this CPU lacks it).
// Otherwise the best level this CPU has: AVX-512 F/BW/DQ/VL/BF16, else AVX2+FMA (F16C comes with
// every AVX2 CPU), else scalar. (AVX-512 was opt-in until it ran on AVX-512 hardware: session 24's
// machine, an AMD EPYC with AVX-512 BF16, where every test passes at every level and, beside AVX2
// on 2 threads at B 1, H 16, S 4096, D 128, the fp32 forward ran 1.14x, its backward 1.23x and the
// bf16 forward, by bf16 dot products, 1.9x.)
static flashc_status pick_kernels(flashc_ctx *ctx, const flashc_cpu_kernels **out) {
    int has_avx2 = 0, has_avx512 = 0;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    has_avx512 = has_avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                 __builtin_cpu_supports("avx512bf16");
#endif
    const char *env = getenv("FLASHC_CPU_ISA");
    if (!env || !*env) {
        *out = has_avx512 ? (amx_usable() ? &flashc__cpu_kernels_amx : &flashc__cpu_kernels_avx512)
               : has_avx2 ? &flashc__cpu_kernels_avx2
                          : &flashc__cpu_kernels_scalar;
        return FLASHC_OK;
    }
    if (!strcmp(env, "scalar")) {
        *out = &flashc__cpu_kernels_scalar;
    } else if (!strcmp(env, "avx2")) {
        if (!has_avx2) return flashc__fail(ctx, FLASHC_ERR_UNSUPPORTED, "FLASHC_CPU_ISA=avx2: this CPU lacks AVX2/FMA");
        *out = &flashc__cpu_kernels_avx2;
    } else if (!strcmp(env, "avx512")) {
        if (!has_avx512)
            return flashc__fail(ctx, FLASHC_ERR_UNSUPPORTED,
                                "FLASHC_CPU_ISA=avx512: this CPU lacks AVX-512 F/BW/DQ/VL/BF16");
        *out = &flashc__cpu_kernels_avx512;
    } else if (!strcmp(env, "amx")) {
        if (!has_avx512 || !amx_usable())
            return flashc__fail(ctx, FLASHC_ERR_UNSUPPORTED,
                                "FLASHC_CPU_ISA=amx: this CPU lacks AVX-512 BF16 or AMX-BF16, or Linux did not grant the tile state");
        *out = &flashc__cpu_kernels_amx;
    } else {
        return flashc__fail(ctx, FLASHC_ERR_INVALID_ARG, "FLASHC_CPU_ISA=%s: expected scalar, avx2, avx512 or amx", env);
    }
    return FLASHC_OK;
}

static flashc_status cpu_init(flashc_ctx *ctx) {
    cpu_state *st = calloc(1, sizeof *st);
    if (!st) return flashc__fail(ctx, FLASHC_ERR_ALLOC, "cpu backend: cannot allocate its state");
    flashc_status s = pick_kernels(ctx, &st->k);
    if (s != FLASHC_OK) {
        free(st);
        return s;
    }
    const char *env = getenv("FLASHC_CPU_DECODE_MAX_SQ");
    st->decode_max_sq = env && *env ? atoi(env) : DECODE_MAX_SQ;
    st->pool = flashc__pool_create(ctx->n_threads);
    if (!st->pool) {
        free(st);
        return flashc__fail(ctx, FLASHC_ERR_ALLOC, "cpu backend: cannot start %d threads", ctx->n_threads);
    }
    ctx->priv = st;
    return FLASHC_OK;
}

static void cpu_fini(flashc_ctx *ctx) {
    cpu_state *st = ctx->priv;
    if (!st) return;
    flashc__pool_free(st->pool);
    free(st);
    ctx->priv = NULL;
}

static flashc_status cpu_supports(flashc_ctx *ctx, const flashc_problem *p) {
    if (p->dtype != FLASHC_DTYPE_F32 && p->dtype != FLASHC_DTYPE_F16 && p->dtype != FLASHC_DTYPE_BF16)
        return flashc__fail(ctx, FLASHC_ERR_UNSUPPORTED,
                            "dtype: the cpu backend takes f32, f16 and bf16 (e4m3 is GPU-only)");
    return FLASHC_OK;
}

// ------------------------------------------------------------------------------------------------
// forward
//
// Workspace layout (every piece 64-byte aligned):
//   blk_off   int64 (B + 1)   prefix sums of the chunks per sequence (ceil(ceil(sq_b / FWD_BR) / G))
//   scratch   n_threads slices of flashc__cpu_fwd_carve bytes: Q_i^T, O_i^T, S_ij^T, m_i, l_i, ...
//             and the thread's key block cache of kv_slots slots
// At D = 128: 257 KiB a thread plus 72 KiB per cache slot, one slot per 64 keys of seqlen_k up to
// 32 MiB for all threads together (4.8 MiB a thread at seqlen 4096): O(seqlen_k), bounded; one
// slot where the bf16 dot products run (the avx512 kernels'; the amx kernels cache their tiles in
// the slots).
// blk_off scales with the batch.

typedef struct fwd_layout {
    int64_t *blk_off;
    char *scratch;
    size_t slice, total;
    int64_t kv_slots;
} fwd_layout;

static fwd_layout fwd_carve(const flashc_ctx *ctx, const flashc_problem *p, void *ws) {
    fwd_layout L;
    size_t off = 0;
    L.blk_off = flashc__cpu_take(ws, &off, sizeof(int64_t) * ((size_t)p->B + 1));
    // (the bf16 dot path copies the rows each query block sees and keeps no key block cache:
    // one slot, unused, keeps the scratch's layout)
    const cpu_state *st = ctx->priv;
    L.kv_slots = st->k->bf16_dot && flashc__cpu_bf16_dot(p) ? 1 : flashc__cpu_fwd_kv_slots(p, ctx->n_threads);
    L.slice = flashc__cpu_fwd_carve(p, L.kv_slots, NULL, NULL);
    L.scratch = flashc__cpu_take(ws, &off, L.slice * (size_t)ctx->n_threads);
    L.total = off;
    return L;
}

static size_t cpu_fwd_ws(flashc_ctx *ctx, const flashc_problem *p) {
    if (fwd_by_decode(ctx->priv, p)) return flashc__cpu_decode_fwd_ws(p, ctx->n_threads);
    return fwd_carve(ctx, p, NULL).total;
}

typedef struct fwd_job {
    const flashc_problem *p;
    const flashc_fwd_args *a;
    const flashc_cpu_kernels *k;
    fwd_layout L;
    int64_t G; // query blocks per chunk
} fwd_job;

// The forward's chunks per thread: at least this many (unless there are fewer query blocks), so
// the threads' loads balance.
#define FWD_CHUNKS_PER_THREAD 8

// Chunk c is up to G consecutive query blocks of one (b, h): the thread that runs them reads that
// head's strided K/V rows into its cache once for all of them (at 2 threads, H = 16: a whole head
// at B = 1, seqlen 4096, and at B = 8, seqlen 512). Heads go one after the other; within
// a head the last chunks of the last sequence come first, since under a causal mask they see the
// most keys (largest first balances the threads' loads).
static void fwd_chunk(void *arg, int64_t c, int thread) {
    const fwd_job *J = arg;
    const flashc_problem *p = J->p;
    const int64_t n_chk = J->L.blk_off[p->B];
    const int h = (int)(c / n_chk);
    const int64_t g = n_chk - 1 - c % n_chk;
    const int b = find_seq(J->L.blk_off, p->B, g);
    const int64_t k = g - J->L.blk_off[b], n_blk = ceil_div(flashc__seq(p, b).sq, FLASHC_CPU_FWD_BR);
    for (int64_t i = k * J->G; i < min64(n_blk, (k + 1) * J->G); i++)
        J->k->fwd_qblock(p, J->a, b, h, i * FLASHC_CPU_FWD_BR, J->L.kv_slots,
                         J->L.scratch + J->L.slice * (size_t)thread);
}

static flashc_status cpu_fwd(flashc_ctx *ctx, const flashc_problem *p, const flashc_fwd_args *a) {
    cpu_state *st = ctx->priv;
    flashc__unowned_rows_host(p, a->o, a->lse);
    if (fwd_by_decode(st, p)) return flashc__cpu_decode_fwd(st->pool, st->k->isa, p, a);
    fwd_job J = {p, a, st->k, fwd_carve(ctx, p, a->ws), 1};
    for (int t = 0; t < ctx->n_threads; t++) { // every thread's key block cache starts empty
        flashc_cpu_fwd_scratch sc;
        flashc__cpu_fwd_carve(p, J.L.kv_slots, J.L.scratch + J.L.slice * (size_t)t, &sc);
        for (int64_t i = 0; i < sc.n_slots; i++) sc.tag[i] = -1;
    }
    int64_t n_blk = 0;
    for (int b = 0; b < p->B; b++) n_blk += ceil_div(flashc__seq(p, b).sq, FLASHC_CPU_FWD_BR);
    J.G = max64(1, n_blk * p->H / (FWD_CHUNKS_PER_THREAD * (int64_t)ctx->n_threads));
    J.L.blk_off[0] = 0;
    for (int b = 0; b < p->B; b++)
        J.L.blk_off[b + 1] = J.L.blk_off[b] + ceil_div(ceil_div(flashc__seq(p, b).sq, FLASHC_CPU_FWD_BR), J.G);
    flashc__pool_run(st->pool, fwd_chunk, &J, J.L.blk_off[p->B] * p->H);
    return FLASHC_OK;
}

// ------------------------------------------------------------------------------------------------
// backward
//
// Order of work (FA2 Alg. 2 with the dQ accumulation made deterministic):
//   1. D_i = rowsum(dO_i o O_i) for every (b, h, row), in parallel over (b, h, 256-row chunk).
//   2. For each kv head, for each wave of sequences (<= BWD_WAVE_ROWS rows unless one is longer),
//      for each query head h of the kv head's group, in order:
//        a. in parallel over (b in wave, part s < n_parts): zero dQ part s of sequence b, then run
//           every key block j = s, s + n_parts, ... of b (bwd_kvblock), which adds into that part
//           and writes dK_j, dV_j (through the fp32 group sums when group > 1);
//        b. in parallel over (b, 256-row chunk): dQ = sum of the parts, in part order.
//   n_parts = n_threads .. 4 n_threads (BWD_PART_BYTES). Each key block's dK_j, dV_j are private
//   to one call.
//
// Workspace layout (every piece 64-byte aligned):
//   Di        fp32, like lse: (B, H, Sq) or (H, total_q)
//   q_off     int64 (B + 1)  first row of each sequence of the wave in the wave's buffers
//   k_off     int64 (B + 1)  same for key rows
//   r_off     int64 (B + 1)  prefix sums of the wave's dQ-reduction chunks
//   dq_part   fp32 n_parts x CAPQ x Dp   the dQ parts, row-major, D padded to Dp
//   dk_sum    fp32 CAPK x D   GQA sums of dK over the group's heads (group > 1 only)
//   dv_sum    fp32 CAPK x D   same for dV
//   scratch   n_threads slices of flashc__cpu_bwd_carve bytes: K_j^T, V_j^T, dK_j^T, dV_j^T, ...
//             and the thread's Q_i, dO_i cache of q_slots slots
// with CAPQ = max(Sq, min(4096, total_q)), CAPK likewise, Dp = D rounded up to 32. At B = 1, H = 8,
// Sq = Sk = 32768, D = 128, fp32, 2 threads: Di 1 MiB + 2 parts x 16 MiB + scratch 0.7 MiB + the
// Q_i, dO_i caches 32 MiB (9 MiB at Sq = 4096).

typedef struct bwd_layout {
    float *Di;
    int64_t *q_off, *k_off, *r_off;
    float *dq_part, *dk_sum, *dv_sum;
    char *scratch;
    size_t slice, total;
    int64_t capq, capk, part_stride; // part_stride: floats per dQ part (CAPQ * Dp_max)
    int64_t q_slots;                 // slots of each thread's Q_i, dO_i cache
    int n_parts;
} bwd_layout;

static bwd_layout bwd_carve(const flashc_ctx *ctx, const flashc_problem *p, void *ws) {
    bwd_layout L;
    size_t off = 0, f = sizeof(float), nb = (size_t)p->B + 1;
    const size_t n_lse = p->varlen ? (size_t)p->H * (size_t)p->total_q : (size_t)p->B * p->H * (size_t)p->Sq;
    const size_t Dp = flashc__cpu_round_up((size_t)p->D, FLASHC_CPU_DP_ALIGN_MAX);
    // at least one row, so a problem with seqlen 0 still carves non-empty parts (and never divides by 0)
    L.capq = max64(1, max64(p->Sq, min64(BWD_WAVE_ROWS, p->total_q)));
    L.capk = max64(1, max64(p->Sk, min64(BWD_WAVE_ROWS, p->total_k)));
    L.part_stride = L.capq * (int64_t)Dp;
    L.Di = flashc__cpu_take(ws, &off, n_lse * f);
    L.q_off = flashc__cpu_take(ws, &off, nb * sizeof(int64_t));
    L.k_off = flashc__cpu_take(ws, &off, nb * sizeof(int64_t));
    L.r_off = flashc__cpu_take(ws, &off, nb * sizeof(int64_t));
    const size_t part_bytes = (size_t)L.part_stride * f;
    L.n_parts = (int)max64(ctx->n_threads, min64(4 * (int64_t)ctx->n_threads, (int64_t)(BWD_PART_BYTES / part_bytes)));
    L.dq_part = flashc__cpu_take(ws, &off, (size_t)L.n_parts * part_bytes);
    const size_t sum = p->group > 1 ? (size_t)L.capk * (size_t)p->D * f : 0;
    L.dk_sum = flashc__cpu_take(ws, &off, sum);
    L.dv_sum = flashc__cpu_take(ws, &off, sum);
    L.q_slots = flashc__cpu_bwd_q_slots(p, ctx->n_threads);
    L.slice = flashc__cpu_bwd_carve(p, L.q_slots, NULL, NULL);
    L.scratch = flashc__cpu_take(ws, &off, L.slice * (size_t)ctx->n_threads);
    L.total = off;
    return L;
}

static size_t cpu_bwd_ws(flashc_ctx *ctx, const flashc_problem *p) { return bwd_carve(ctx, p, NULL).total; }

typedef struct bwd_job {
    const flashc_problem *p;
    const flashc_bwd_args *a;
    const flashc_cpu_kernels *k;
    bwd_layout L;
    int64_t Dp;
    // the current wave and head
    int b0, nb;
    int h, first_head, last_head;
} bwd_job;

// Step 1: D_i = rowsum(dO_i o O_i) in fp32 for REDUCE_ROWS rows of one (b, h); chunk c is
// (h = c % H, chunk c / H of the prefix r_off over all sequences).
static void bwd_dot_do_o_chunk(void *arg, int64_t c, int thread) {
    (void)thread;
    const bwd_job *J = arg;
    const flashc_problem *p = J->p;
    const int h = (int)(c % p->H);
    const int64_t g = c / p->H;
    const int b = find_seq(J->L.r_off, p->B, g);
    const flashc_seq s = flashc__seq(p, b);
    const int64_t r0 = (g - J->L.r_off[b]) * REDUCE_ROWS, r1 = min64(r0 + REDUCE_ROWS, s.sq);
    for (int64_t i = r0; i < r1; i++) {
        const int64_t o_off = flashc__row_off(p, p->o_stride, b, s.q_row0, i) + h * p->o_stride[2];
        const int64_t do_off = flashc__row_off(p, p->do_stride, b, s.q_row0, i) + h * p->do_stride[2];
        float acc = 0.0f;
        if (p->dtype == FLASHC_DTYPE_F32) {
            const float *o = (const float *)J->a->o + o_off, *dout = (const float *)J->a->dout + do_off;
            for (int64_t d = 0; d < p->D; d++) acc += o[d] * dout[d];
        } else {
            for (int64_t d = 0; d < p->D; d++)
                acc += flashc__load(J->a->o, o_off + d, p->dtype) * flashc__load(J->a->dout, do_off + d, p->dtype);
        }
        J->L.Di[flashc__lse_off(p, b, h, &s, i)] = acc;
    }
}

// Step 2a: chunk = (sequence b0 + c / n_parts, dQ part c % n_parts).
static void bwd_part_chunk(void *arg, int64_t c, int thread) {
    const bwd_job *J = arg;
    const flashc_problem *p = J->p;
    const int n_parts = J->L.n_parts, wb = (int)(c / n_parts), pt = (int)(c % n_parts), b = J->b0 + wb;
    const flashc_seq s = flashc__seq(p, b);
    float *part = J->L.dq_part + (size_t)pt * (size_t)J->L.part_stride + (size_t)(J->L.q_off[wb] * J->Dp);
    memset(part, 0, sizeof(float) * (size_t)(s.sq * J->Dp));
    flashc_cpu_bwd_block blk = {
        .b = b, .h = J->h, .Di = J->L.Di, .dq_acc = part, .dq_ld = J->Dp,
        .dk_acc = p->group > 1 ? J->L.dk_sum + J->L.k_off[wb] * p->D : NULL,
        .dv_acc = p->group > 1 ? J->L.dv_sum + J->L.k_off[wb] * p->D : NULL,
        .first_head = J->first_head, .last_head = J->last_head, .q_slots = J->L.q_slots,
    };
    void *scratch = J->L.scratch + J->L.slice * (size_t)thread;
    for (int64_t j0 = (int64_t)pt * FLASHC_CPU_BWD_BC; j0 < s.sk; j0 += (int64_t)n_parts * FLASHC_CPU_BWD_BC) {
        blk.j0 = j0;
        J->k->bwd_kvblock(p, J->a, &blk, scratch);
    }
    // Keys past seqused_k belong to no query: their dK, dV rows are zero (written once per kv head).
    if (pt == 0 && J->last_head) {
        const int64_t sk_all = p->varlen ? p->cu_k_host[b + 1] - p->cu_k_host[b] : p->Sk;
        const int kvh = J->h / p->group;
        for (int64_t j = s.sk; j < sk_all; j++) {
            const int64_t dk_off = flashc__row_off(p, p->dk_stride, b, s.k_row0, j) + kvh * p->dk_stride[2];
            const int64_t dv_off = flashc__row_off(p, p->dv_stride, b, s.k_row0, j) + kvh * p->dv_stride[2];
            for (int64_t d = 0; d < p->D; d++) {
                flashc__store(J->a->dk, dk_off + d, p->dtype, 0.0f);
                flashc__store(J->a->dv, dv_off + d, p->dtype, 0.0f);
            }
        }
    }
}

// Step 2b: chunk = REDUCE_ROWS rows of one sequence of the wave; dQ = sum of the parts, in order.
static void bwd_reduce_chunk(void *arg, int64_t c, int thread) {
    (void)thread;
    const bwd_job *J = arg;
    const flashc_problem *p = J->p;
    const int wb = find_seq(J->L.r_off, J->nb, c);
    const int b = J->b0 + wb;
    const flashc_seq s = flashc__seq(p, b);
    const int64_t r0 = (c - J->L.r_off[wb]) * REDUCE_ROWS, r1 = min64(r0 + REDUCE_ROWS, s.sq);
    const float *part0 = J->L.dq_part + (size_t)(J->L.q_off[wb] * J->Dp);
    float acc[256]; // a row, 256 columns at a time; parts outermost, each read contiguously
    for (int64_t i = r0; i < r1; i++) {
        const int64_t dq_off = flashc__row_off(p, p->dq_stride, b, s.q_row0, i) + J->h * p->dq_stride[2];
        for (int64_t d0 = 0; d0 < p->D; d0 += 256) {
            const int64_t nd = min64(256, p->D - d0);
            for (int64_t d = 0; d < nd; d++) acc[d] = 0.0f;
            for (int pt = 0; pt < J->L.n_parts; pt++) {
                const float *ps = part0 + (size_t)pt * (size_t)J->L.part_stride + (size_t)(i * J->Dp + d0);
                for (int64_t d = 0; d < nd; d++) acc[d] += ps[d];
            }
            flashc__store_row(J->a->dq, dq_off + d0, p->dtype, acc, nd);
        }
    }
}

static flashc_status cpu_bwd(flashc_ctx *ctx, const flashc_problem *p, const flashc_bwd_args *a) {
    cpu_state *st = ctx->priv;
    flashc__unowned_grad_rows_host(p, a->dq, a->dk, a->dv);
    bwd_job J = {.p = p, .a = a, .k = st->k, .L = bwd_carve(ctx, p, a->ws)};
    for (int t = 0; t < ctx->n_threads; t++) { // every thread's Q_i, dO_i cache starts empty
        flashc_cpu_bwd_scratch sc;
        flashc__cpu_bwd_carve(p, J.L.q_slots, J.L.scratch + J.L.slice * (size_t)t, &sc);
        for (int64_t i = 0; i < sc.n_slots; i++) sc.tag[i] = -1;
    }
    J.Dp = (int64_t)flashc__cpu_round_up((size_t)p->D, (size_t)st->k->dp_align);

    J.L.r_off[0] = 0; // all sequences' REDUCE_ROWS chunks, for step 1 (the waves reuse r_off)
    for (int b = 0; b < p->B; b++) J.L.r_off[b + 1] = J.L.r_off[b] + ceil_div(flashc__seq(p, b).sq, REDUCE_ROWS);
    flashc__pool_run(st->pool, bwd_dot_do_o_chunk, &J, J.L.r_off[p->B] * p->H);

    for (int kvh = 0; kvh < p->H_kv; kvh++) {
        for (int b0 = 0; b0 < p->B; b0 += J.nb) {
            // the wave: sequences b0 .. b0 + nb - 1, at least one, at most CAPQ / CAPK rows
            int64_t rows_q = 0, rows_k = 0;
            J.b0 = b0;
            J.nb = 0;
            J.L.r_off[0] = 0;
            while (b0 + J.nb < p->B) {
                const flashc_seq s = flashc__seq(p, b0 + J.nb);
                if (J.nb > 0 && (rows_q + s.sq > J.L.capq || rows_k + s.sk > J.L.capk)) break;
                J.L.q_off[J.nb] = rows_q;
                J.L.k_off[J.nb] = rows_k;
                J.L.r_off[J.nb + 1] = J.L.r_off[J.nb] + ceil_div(s.sq, REDUCE_ROWS);
                rows_q += s.sq;
                rows_k += s.sk;
                J.nb++;
            }
            for (int g = 0; g < p->group; g++) {
                J.h = kvh * p->group + g;
                J.first_head = g == 0;
                J.last_head = g == p->group - 1;
                flashc__pool_run(st->pool, bwd_part_chunk, &J, (int64_t)J.nb * J.L.n_parts);
                flashc__pool_run(st->pool, bwd_reduce_chunk, &J, J.L.r_off[J.nb]);
            }
        }
    }
    return FLASHC_OK;
}

// ------------------------------------------------------------------------------------------------

// KV cache: the decode kernel (flashc_cpu_decode.c) does the append, the rotary and the attention,
// unless the queries are many (a prompt appended and attended in one call: fwd_by_decode says no).
// Then the append and q's rotation (into the workspace, contiguous (B, Sq, H, D)) come first and
// FA2's tiles attend over the cache: the problem's seqused_k_host holds each c_b + seqlen_new and
// key_ptr follows cache_batch_idx or the block table.
static size_t kv_q_rot_bytes(const flashc_problem *p, const flashc_kvcache_args *a) {
    return flashc__cpu_round_up(flashc__kvcache_q_rot_bytes(p, a), 64);
}

static size_t cpu_kvcache_ws(flashc_ctx *ctx, const flashc_problem *p, const flashc_kvcache_args *a) {
    if (fwd_by_decode(ctx->priv, p)) return flashc__cpu_decode_kvcache_ws(p, ctx->n_threads, a);
    return kv_q_rot_bytes(p, a) + fwd_carve(ctx, p, NULL).total;
}

static flashc_status cpu_fwd_kvcache(flashc_ctx *ctx, const flashc_problem *p, const flashc_kvcache_args *a) {
    cpu_state *st = ctx->priv;
    if (fwd_by_decode(st, p)) return flashc__cpu_decode_kvcache(st->pool, st->k->isa, p, a);
    flashc__kvcache_append_host(p, a);
    flashc_problem pq = *p;
    flashc_fwd_args f = {a->q, a->k_cache, a->v_cache, a->o, a->lse, (char *)a->ws + kv_q_rot_bytes(p, a),
                         a->ws_size - kv_q_rot_bytes(p, a), a->stream};
    if (a->rotary_cos) {
        flashc__kvcache_rotate_q_host(p, a, a->ws);
        f.q = a->ws;
        pq.q_stride[2] = p->D;
        pq.q_stride[1] = (int64_t)p->H * p->D;
        pq.q_stride[0] = pq.q_stride[1] * p->Sq;
    }
    return cpu_fwd(ctx, &pq, &f);
}

const char *flashc__cpu_isa(const flashc_ctx *ctx) { return ((const cpu_state *)ctx->priv)->k->isa; }

const flashc_backend_ops flashc__cpu_ops = {
    .name = "cpu",
    .init = cpu_init,
    .fini = cpu_fini,
    .supports = cpu_supports,
    .fwd_ws = cpu_fwd_ws,
    .bwd_ws = cpu_bwd_ws,
    .fwd = cpu_fwd,
    .bwd = cpu_bwd,
    .kvcache_ws = cpu_kvcache_ws,
    .fwd_kvcache = cpu_fwd_kvcache,
    .merge = flashc__merge_host,
};
