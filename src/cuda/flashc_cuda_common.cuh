// flashc_cuda_common.cuh -- what every CUDA kernel of flashc shares: the kernel ABI (one flat
// params struct per direction, built on the host from the validated flashc_problem), the
// per-sequence and mask helpers (device twins of flashc__seq / flashc__key_range), and thin
// inline-PTX wrappers with their hardware names (mma.sync m16n8k16, ldmatrix, cp.async, ex2).
//
// Not here: kernels (flashc_cuda_fwd.cuh, flashc_cuda_bwd.cuh), tile sizes (flashc_cuda_tune.h),
// host code (flashc_cuda.cu).
//
// Fragment layouts follow /work/shared/HOPPER-NOTES.md section 8 (checked on the H200): with
// g = lane / 4 and c = lane % 4, an m16n8 fp32 accumulator holds (row g, cols 2c, 2c+1) in
// elements 0, 1 and (row g + 8, same cols) in elements 2, 3.
#ifndef FLASHC_CUDA_COMMON_CUH
#define FLASHC_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "flashc_internal.h"
#include "flashc_cuda_tune.h"

#define FLASHC_LOG2E 1.4426950408889634f
#define FLASHC_LN2 0.6931471805599453f

// Alg. 1 line 13 for a row whose running max is m (log2 units) and sum l: L = (m + log2 l) ln 2; a
// row that saw no key (l = 0): +inf; a NaN score (l NaN): NaN. Every CUDA forward and decode
// epilogue ends its rows here (the CPU's twin: flashc__cpu_row_end).
static __device__ __forceinline__ float row_lse(float m, float l) {
    return l > 0.f ? (m + log2f(l)) * FLASHC_LN2 : l == 0.f ? INFINITY : NAN;
}

// ------------------------------------------------------------------------------------------------
// kernel ABI

// What both directions need to know about the problem. Set once on the host from flashc_problem.
// Masks are bottom-right aligned: query i of a sequence (lengths sq, sk) sees key j iff
//     i + sk - sq - window_left <= j <= i + sk - sq + window_right      (-1 = unbounded)
typedef struct flashc_cuda_attn {
    int B, H, H_kv, group;          // group = H / H_kv: query head h reads kv head h / group
    int Sq, Sk;                     // max lengths (varlen: upper bounds; grids are sized by them)
    int D;                          // the actual head dim (the kernel's template D may be larger)
    int64_t total_q, total_k;       // rows of q (lse in varlen mode is (H, total_q)) and of k / v
    const int32_t *cu_q, *cu_k;     // device, B + 1 offsets; NULL in batch mode
    const int32_t *seqused_k;       // device, B entries, may be NULL
    const float *alibi;             // device slopes, NULL = off; slope of (b, h) is alibi[b * alibi_bs + h]
    int64_t alibi_bs;
    int window_left, window_right;  // -1 = unbounded (host clamps huge windows to -1)
    float scale;                    // softmax scale on q . k
    float scale_log2;               // scale * log2(e): the plain path folds it into one FFMA per score
    float softcap, inv_softcap;     // softcap = 0: off
    int transform;                  // softcap or ALiBi on: scores are turned into log2 units in place
    int aligned;                    // every tensor allows 16-byte vector access (pointers and strides)
} flashc_cuda_attn;

// A split counter's count: an atomic add with release (this split's partials, ordered before it by a
// barrier, are visible before the count) and acquire (the last split sees every other's partials).
// The decode's split-KV and the persistent forward's split tiles.
static __device__ __forceinline__ int atom_add_acq_rel_gpu(int *ptr, int v) {
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(ptr), "r"(v) : "memory");
    return old;
}

// One of n pieces counts itself in at *cnt (atom_add_acq_rel_gpu); 1 for the last, which also
// puts the counter back to 0 for the next call (every piece has counted). The decode's split-KV, the
// forward's split tiles and the backward's split key blocks.
static __device__ __forceinline__ int count_in_last(int *cnt, int n) {
    const int last = atom_add_acq_rel_gpu(cnt, 1) == n - 1;
    if (last) *cnt = 0;
    return last;
}

// n / d for 0 <= n < 2^31 by a multiply-high and a shift instead of a ~25-instruction division
// (Granlund and Montgomery; CUTLASS's FastDivmod): with l = ceil(log2 d), mul = ceil(2^(31 + l) / d)
// errs by e < d <= 2^l, so n e < 2^(31 + l) and the floor is exact; d = 1 passes n through.
typedef struct flashc_fastdiv {
    uint32_t d, mul, shift;
} flashc_fastdiv;

static inline flashc_fastdiv flashc_fastdiv_make(uint32_t d) {
    flashc_fastdiv f = {d, 0, 0};
    if (d > 1) {
        uint32_t l = 0;
        while ((1ull << l) < d) l++;
        f.mul = (uint32_t)(((1ull << (31 + l)) + d - 1) / d);
        f.shift = l - 1;
    }
    return f;
}

static __device__ __forceinline__ int fastdiv(int n, const flashc_fastdiv &f) {
    return f.d == 1 ? n : (int)(__umulhi((uint32_t)n, f.mul) >> f.shift);
}

// Forward. Strides are in elements: [batch, row, head]; the batch stride is 0 in varlen mode.
// q, o: (B, Sq, H, D) or (total_q, H, D); k, v: (B, Sk, H_kv, D) or (total_k, H_kv, D);
// lse: fp32 natural log, (B, H, Sq) or (H, total_q), may be NULL.
typedef struct flashc_fwd_params {
    flashc_cuda_attn a;
    const void *q, *k, *v;
    void *o;
    float *lse;
    int64_t q_bs, q_rs, q_hs, k_bs, k_rs, k_hs, v_bs, v_rs, v_hs, o_bs, o_rs, o_hs;
    int n_m_blocks;                 // ceil(Sq / BM) query blocks per (batch, head)
    int bh_chunk;                   // sm90 kernel: (batch, head)s per group of CTAs sharing K/V in L2
    int ctas;                       // sm90 TMA kernel: CTAs of its persistent grid (SMs; 0: one per tile)
    int tile_pairs;                 // sm90 TMA kernel: 1 = a CTA runs query blocks M - 1 - q and q in turn
    flashc_fastdiv div_chunk, div_heads, div_H; // sm90: the tile order's divisors (sm90_fwd_tile)
    int sm90_pp;                    // sm90 kernel: 0 tuned, 1 lockstep, 2 ping-pong, 3 TMA (FLASHC_CUDA_SM90)
    float o_scale;                  // O_i is multiplied by it at the end: v_descale for E4M3, else 1
    uint8_t *vt;                    // E4M3: V^T in the workspace (flashc_sm90_fwd.cuh, flashc_fp8_vt_kernel)
    int64_t vt_cols;                // E4M3: its row stride in bytes
    float *part;                    // sm90 TMA kernel, split tiles: partial O_i, m_i, l_i in the workspace
    int *part_cnt;                  // ... and their counters (zero between calls)
    int sk_split;                   // 1: the persistent grid takes equal runs of key blocks (sm90_fwd_piece)
    int nb_tile;                    // with sk_split: key blocks of every tile
} flashc_fwd_params;

// Backward. Tensors as in the forward; dout like o, dq like q, dk/dv like k/v.
// Workspace arrays (fp32), one row per (b, h, i), row index ws_row(b, h) + i, padded by 128 rows
// per (b, h) so a query block may run past the sequence end without a bounds check:
//   lse2   = lse * log2(e) (+inf for rows that see no key or lie past the end)
//   delta  = D_i = rowsum(dO_i * O_i) (0 past the end)
//   dq_acc = fp32 dQ accumulator of D_pad floats per row (non-deterministic mode only)
typedef struct flashc_bwd_params {
    flashc_cuda_attn a;
    const void *q, *k, *v, *o, *dout;
    const float *lse;
    void *dq, *dk, *dv;
    int64_t q_bs, q_rs, q_hs, k_bs, k_rs, k_hs, v_bs, v_rs, v_hs, o_bs, o_rs, o_hs;
    int64_t do_bs, do_rs, do_hs, dq_bs, dq_rs, dq_hs, dk_bs, dk_rs, dk_hs, dv_bs, dv_rs, dv_hs;
    float *lse2, *delta, *dq_acc;
    int64_t ws_rows_per_head;       // batch mode: round_up(Sq, 128); varlen: total_q + 128 * B
    int64_t ws_rows;                // rows of each workspace array: B * H * Sq_pad or H * (total_q + 128 B)
    int D_pad;                      // the kernels' template D: row length of dq_acc
    int deterministic;              // 1: dQ by its own kernel (no atomics), bit-identical runs
    int sm90_loop;                  // sm90 kernel (FLASHC_CUDA_SM90): 0 tuned, 1 / 2 cp.async, 3 / 4 TMA, 2 / 3 stages
    int lpt_sms;                    // sm90 grids, causal: the SMs grid_tail_lpt plans the tail for (0: none)
    float *part;                    // sm90 tail split (sm90_bwd_piece_of): pieces' dK_j, dV_j in the workspace
    int *part_cnt;                  // ... and a counter per split key block (zeroed by the call)
    int sk_tail0, sk_pieces;        // sk_pieces > 1: key blocks from CTA sk_tail0 on run as sk_pieces CTAs
} flashc_bwd_params;

#define FLASHC_WS_PAD 128           // >= every BM in the tuning table

// Dynamic shared memory of every kernel; each kernel carves it with constexpr offsets.
extern __shared__ __align__(128) uint16_t flashc_smem[];

// The launchers: defined in flashc_cuda_fwd.cuh / flashc_cuda_bwd.cuh, instantiated once per
// (dtype, D) by the generated files in inst/, called by flashc_cuda.cu.
template <typename T, int D>
cudaError_t flashc_cuda_fwd_launch(flashc_fwd_params *p, cudaStream_t stream);
template <typename T, int D>
cudaError_t flashc_cuda_bwd_launch(flashc_bwd_params *p, cudaStream_t stream);
// The backward's pre-pass (dq_acc zero, D_i, lse2_i) and dQ conversion, shared by both backward
// paths and instantiated with flashc_cuda_bwd_launch; the sm_90a wgmma backward (flashc_sm90_bwd.cuh,
// instantiated in inst/*_sm90.cu, run only on a 9.0 device).
template <typename T, int D>
cudaError_t flashc_cuda_bwd_prepass(flashc_bwd_params *p, cudaStream_t stream);
template <typename T, int D>
cudaError_t flashc_cuda_bwd_finish(flashc_bwd_params *p, cudaStream_t stream);
template <typename T, int D>
cudaError_t flashc_cuda_bwd_sm90_launch(flashc_bwd_params *p, cudaStream_t stream);
// The Hopper forward (flashc_sm90_fwd.cuh), compiled for sm_90a only: needs 16-byte aligned tensors.
template <typename T, int D>
cudaError_t flashc_cuda_fwd_sm90_launch(flashc_fwd_params *p, cudaStream_t stream);

// ------------------------------------------------------------------------------------------------
// per-sequence view and the mask (device twins of flashc__seq and flashc__key_range)

typedef struct flashc_cuda_seq {
    int sq, sk;                     // sk is capped by seqused_k
    int sk_len;                     // rows of k/v this sequence owns (sk <= sk_len)
    int64_t q_row0, k_row0;         // first row in the packed tensors (0 in batch mode)
} flashc_cuda_seq;

static __device__ __forceinline__ flashc_cuda_seq cuda_seq(const flashc_cuda_attn &a, int b) {
    flashc_cuda_seq s;
    if (a.cu_q) {
        int q0 = a.cu_q[b], q1 = a.cu_q[b + 1], k0 = a.cu_k[b], k1 = a.cu_k[b + 1];
        s.q_row0 = q0;
        s.k_row0 = k0;
        s.sq = q1 - q0;
        s.sk_len = k1 - k0;
    } else {
        s.q_row0 = 0;
        s.k_row0 = 0;
        s.sq = a.Sq;
        s.sk_len = a.Sk;
    }
    s.sk = s.sk_len;
    if (a.seqused_k) s.sk = min(s.sk, a.seqused_k[b]);
    return s;
}

// First key row i sees, and one past the last (lo >= hi: none). 64-bit because i + sk - sq + w
// can pass 2^31 before clamping.
static __device__ __forceinline__ int key_lo(const flashc_cuda_attn &a, int i, int sq, int sk) {
    if (a.window_left < 0) return 0;
    long long l = (long long)i + sk - sq - a.window_left;
    return l < 0 ? 0 : (int)(l > sk ? sk : l);
}

static __device__ __forceinline__ int key_hi(const flashc_cuda_attn &a, int i, int sq, int sk) {
    if (a.window_right < 0) return sk;
    long long h = (long long)i + sk - sq + a.window_right + 1;
    return h > sk ? sk : (int)(h < 0 ? 0 : h);
}

// The key blocks (BN keys) that query rows [m0, m0 + m_rows) need, [*nb_min, *nb_max): causal and
// window skip whole blocks. [*full_lo, *full_hi): the keys every one of those rows sees (a block
// inside it needs no mask). Forward and the backward's dQ kernel.
static __device__ __forceinline__ void key_blocks_of_rows(const flashc_cuda_attn &a, const flashc_cuda_seq &s, int m0,
                                                          int m_rows, int BN, int *nb_min, int *nb_max, int *full_lo,
                                                          int *full_hi) {
    const int m_last = m0 + m_rows - 1;
    const int n_lo = key_lo(a, m0, s.sq, s.sk), n_hi = key_hi(a, m_last, s.sq, s.sk);
    *nb_min = n_lo / BN;
    *nb_max = n_hi > n_lo ? (n_hi + BN - 1) / BN : *nb_min; // exclusive
    *full_lo = key_lo(a, m_last, s.sq, s.sk);
    *full_hi = key_hi(a, m0, s.sq, s.sk);
}

// A grid of BH heads (or (batch, head)s) x n blocks, CTA x taking block *blk of head *bh: heads
// outer, so that a head's blocks run side by side and share its operands in L2. Where a causal mask
// makes block 0's list the longest (the backward's key blocks, the dQ kernel's query blocks taken
// last first) such a grid ends on the last heads' long blocks, started late (a list-scheduling model,
// dev/cuda/bwd_grid_model.py: 5-7% over the balanced bound at D = 128, S = 1k-8k). sms > 0 (the grid
// planned as one CTA an SM on sms SMs: every SM, or FLASHC_CUDA_CTAS's in the tests) and a wave of
// flashc_cuda_bwd_lpt_min_heads heads or more: the last heads covering flashc_cuda_bwd_lpt_waves
// waves take their blocks block outer instead, so that the longest start first, as in LPT
// scheduling. Measured in flashc_cuda_tune.h.
static __device__ __forceinline__ void grid_tail_lpt(int x, int n, int BH, int sms, int *bh, int *blk) {
    *bh = x / n;
    *blk = x - *bh * n;
    if (sms > 0 && flashc_cuda_bwd_lpt_min_heads * n <= sms) {
        const int k = min(BH, (flashc_cuda_bwd_lpt_waves * sms + n - 1) / n), bh0 = BH - k; // the tail's heads
        if (*bh >= bh0) {
            const int q = x - bh0 * n;
            *blk = q / k;
            *bh = bh0 + (q - *blk * k);
        }
    }
}

// The backward's grid: CTA blockIdx.x takes key block *n_block of kv head *h_kv of sequence *b.
// By default the (batch, kv head)s of one key block are neighbours, so they run at the same time;
// with heads_outer the key blocks of one (batch, kv head) are, so its Q_i, dO_i stream from L2 to
// all of them. H200 (bench/results/h200-2026-12-01-bwd-order.txt, one process): heads_outer ran
// 1.01-1.16x at D = 256 (the sm90 dK/dV kernel, which uses it), 0.95-1.02x at D = 64 and 128 while
// their dQ reduction was issue-bound; once it went to TMA (h200-2026-12-01-s8-bwd-order.txt) the
// default order was bound by HBM at short S (each wave's CTAs, all of different heads, stream
// Q_i / dO_i and add into dq_acc from HBM) and heads_outer ran D = 128 1.20-1.38x at S = 512-4096
// non-causal (1.01 at 16k), D = 64 1.00-1.06x: the sm90 D <= 128 kernel uses it too. Rotating
// each CTA's query blocks (so that a head's CTAs add to different rows) was 1-2% slower still.
// heads_outer: with the causal tail of grid_tail_lpt (lpt_sms).
static __device__ __forceinline__ void bwd_key_block_of_cta(const flashc_cuda_attn &a, int *n_block, int *b, int *h_kv,
                                                            bool heads_outer = false, int lpt_sms = 0) {
    const int BHk = a.B * a.H_kv;
    int bh;
    if (heads_outer) {
        grid_tail_lpt((int)blockIdx.x, (int)(gridDim.x / BHk), BHk, lpt_sms, &bh, n_block);
    } else {
        bh = (int)(blockIdx.x % BHk);
        *n_block = (int)(blockIdx.x / BHk);
    }
    *h_kv = bh % a.H_kv;
    *b = bh / a.H_kv;
}

// The query blocks (BM rows) with a row that sees some key of [n0, n0 + BN) (the backward's key
// block): blocks *mb_begin .. *mb_begin + *n_mb - 1; none for keys past seqused_k, whose gradients
// are zero.
static __device__ __forceinline__ void rows_seeing_keys(const flashc_cuda_attn &a, const flashc_cuda_seq &s, int n0,
                                                        int BN, int *i_min, int *i_max) {
    *i_min = 0;
    *i_max = s.sq - 1;
    if (n0 >= s.sk) {
        *i_max = -1;
        return;
    }
    const long long n_end = min(n0 + BN, s.sk), shift = (long long)s.sk - s.sq;
    if (a.window_right >= 0) *i_min = (int)max(0LL, (long long)n0 - shift - a.window_right);
    if (a.window_left >= 0) *i_max = (int)min((long long)s.sq - 1, n_end - 1 - shift + a.window_left);
}

static __device__ __forceinline__ void query_blocks_of_keys(const flashc_cuda_attn &a, const flashc_cuda_seq &s, int n0,
                                                            int BN, int BM, int *mb_begin, int *n_mb) {
    int i_min, i_max; // the rows seeing some key of the block
    rows_seeing_keys(a, s, n0, BN, &i_min, &i_max);
    *mb_begin = i_min / BM;
    *n_mb = i_max >= i_min ? i_max / BM + 1 - *mb_begin : 0;
}

// The e4m3 forward's V^T (flashc_sm90_fwd.cuh): the column of key 0 of sequence b in each row,
// where first_key_row is its first k/v row in key order (cu_seqlens_k[b], or b * Sk).
// 32-aligned, so tiles start on 16 bytes, with FP8_VT_GAP columns between sequences: the next
// sequence starts at least FP8_VT_GAP - 31 columns past this one's end, and flashc_fp8_vt_kernel
// writes zeros from the end up to FP8_VT_TILE columns past its last 32-key group, so a V^T tile of
// up to FP8_VT_TILE keys starting at any key of the sequence reads only this sequence's keys and
// zeros. With b = B and the total key count: the row length, vt_cols.
#define FP8_VT_TILE 192 // the widest e4m3 key block (flashc_cuda_tune.h)
#define FP8_VT_GAP (FP8_VT_TILE + 64)
static __host__ __device__ __forceinline__ int64_t fp8_vt_col0(int64_t first_key_row, int b) {
    return (first_key_row + 31) / 32 * 32 + (int64_t)FP8_VT_GAP * b;
}

// dQ of a row as stored: scale * the sum of dS_ij K_j, or exactly 0 for a row that sees no key
// (lse2 = +inf; DESIGN.md §1: zero gradients). Its dS_ij = P_ij (dP_ij - D_i) has P_ij = 0 but can
// still be 0 * inf = NaN where a masked V_j holds an Inf, so the rule is applied per row where dQ
// is written (flashc_bwd_convert_dq_kernel, the dQ kernels' epilogues), not per score in the loops:
// there a select cost the sm90 backward 2-3% at D = 128 and 256 (H200, one process against none:
// bench/results/h200-2026-12-02-s18.txt, calls 1-3), whether behind a branch or not.
static __device__ __forceinline__ float bwd_dq_out(float acc, float scale, float lse2) {
    return lse2 == INFINITY ? 0.f : acc * scale;
}

// The backward's logit of one raw score x = q.k, in log2 units up to its caller's factor sl2:
// without a transform x itself (sl2 = scale log2 e); else softcap and ALiBi (dist = the query's
// diagonal key minus this key) applied here (sl2 = 1), and *dsf = dy / d(softcap input) =
// 1 - tanh^2 for dS (1 without softcap). Every backward kernel's P_ij = exp2(logit sl2 - lse2_i).
template <bool TRANSFORM>
static __device__ __forceinline__ float bwd_logit(float x, const flashc_cuda_attn &a, int dist, float slope, float *dsf) {
    *dsf = 1.f;
    if (!TRANSFORM) return x;
    float y = x * a.scale;
    if (a.softcap > 0.f) {
        const float t = tanhf(y * a.inv_softcap);
        y = a.softcap * t;
        *dsf = 1.f - t * t;
    }
    y -= slope * fabsf((float)dist);
    return y * FLASHC_LOG2E;
}

// Row index into the backward's fp32 workspace arrays for (b, h) (add i).
static __device__ __forceinline__ int64_t ws_row(const flashc_bwd_params &p, int b, int h, const flashc_cuda_seq &s) {
    if (p.a.cu_q) return (int64_t)h * p.ws_rows_per_head + s.q_row0 + (int64_t)b * FLASHC_WS_PAD;
    return ((int64_t)b * p.a.H + h) * p.ws_rows_per_head;
}

// ------------------------------------------------------------------------------------------------
// inline PTX with hardware names

static __device__ __forceinline__ uint32_t smem_u32(const void *ptr) {
    return (uint32_t)__cvta_generic_to_shared(ptr);
}

static __device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

static __device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// D += A B, m16n8k16, fp32 accumulate; a: 4 regs (row-major A), b: 2 regs (col-major B).
template <typename T>
static __device__ __forceinline__ void mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2]);

template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two floats -> one register of two T, lo in the low half (the lower k / column index).
template <typename T>
static __device__ __forceinline__ uint32_t pack2(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&v;
}

template <typename T>
static __device__ __forceinline__ float to_f32(uint16_t bits);

template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(uint16_t bits) {
    return __uint_as_float((uint32_t)bits << 16);
}

template <>
__device__ __forceinline__ float to_f32<__half>(uint16_t bits) {
    return __half2float(__ushort_as_half(bits));
}

template <typename T>
static __device__ __forceinline__ uint16_t from_f32(float x);

template <>
__device__ __forceinline__ uint16_t from_f32<__nv_bfloat16>(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

template <>
__device__ __forceinline__ uint16_t from_f32<__half>(float x) {
    return __half_as_ushort(__float2half_rn(x));
}

// 16 bytes from global memory through the non-coherent path, not kept in L1 (data read once).
static __device__ __forceinline__ uint4 ld_stream_v4(const void *ptr) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(ptr));
    return r;
}

// 2^x, approximate (2 ulp), flushes subnormals; ex2(-inf) = +0.
static __device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// cp.async 16 bytes global -> shared, zero-filling the bytes past src_bytes (0 or 16).
static __device__ __forceinline__ void cp_async_16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// cp.async 4 bytes (one fp32), zero-filled when src_bytes = 0.
static __device__ __forceinline__ void cp_async_4(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

static __device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
static __device__ __forceinline__ void cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

static __device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

static __device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ------------------------------------------------------------------------------------------------
// tile movement: global <-> shared in 16-byte chunks; edges (rows past the end, columns past the
// actual head dim) are zero-filled here so the math never checks bounds

// Load a ROWS x D tile (smem row stride LD elements) from rows 0..nrows-1 of g (row stride rs
// elements), columns 0..Dact-1, zero elsewhere. aligned = 0 takes a scalar path for tensors
// whose pointer or strides do not allow 16-byte access. safe: any valid address (never read).
// Issues cp.async (aligned) or plain stores; the caller commits and waits.
// Thread tid always moves chunk column c = tid % (D / 8) of rows tid / (D / 8) + k * RSTEP, so the
// per-chunk work is one predicate, one cp.async and one pointer step. The loop is not unrolled:
// unrolling lets the compiler hoist every chunk's address out of the caller's key loop, which
// costs ~80 registers at D = 128 and spills the accumulators (ptxas -v: 452 -> 136 spill bytes).
template <int ROWS, int D, int LD, int NTHREADS>
static __device__ __forceinline__ void load_tile(uint16_t *s, const uint16_t *g, int64_t rs, int nrows,
                                                 int Dact, int aligned, const void *safe, int tid) {
    constexpr int CPR = D / 8, RSTEP = NTHREADS / CPR;
    static_assert(NTHREADS % CPR == 0 && ROWS % RSTEP == 0, "tile / thread shape");
    const int r0 = tid / CPR, c = tid % CPR;
    const bool col_ok = c * 8 < Dact;
    const uint16_t *src = g + (int64_t)r0 * rs + c * 8;
    const int64_t step = (int64_t)RSTEP * rs;
    if (aligned) {
        uint32_t dst = smem_u32(s) + (uint32_t)(r0 * LD + c * 8) * 2u;
#pragma unroll 1
        for (int r = r0; r < ROWS; r += RSTEP) {
            const bool ok = col_ok && r < nrows;
            cp_async_16(dst, ok ? (const void *)src : safe, ok ? 16 : 0);
            src += step;
            dst += RSTEP * LD * 2;
        }
    } else {
#pragma unroll 1
        for (int r = r0; r < ROWS; r += RSTEP) {
            const bool ok = col_ok && r < nrows;
            uint32_t w[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                uint32_t lo = ok ? src[2 * e] : 0u, hi = ok ? src[2 * e + 1] : 0u;
                w[e] = lo | (hi << 16);
            }
            *(uint4 *)(s + r * LD + c * 8) = make_uint4(w[0], w[1], w[2], w[3]);
            src += step;
        }
    }
}

// Store rows 0..nrows-1, columns 0..Dact-1 of a ROWS x D smem tile (row stride LD) to g.
// Threads tid = 0..NTHREADS-1 of the group that calls it take part.
template <int ROWS, int D, int LD, int NTHREADS>
static __device__ __forceinline__ void store_tile(uint16_t *g, int64_t rs, const uint16_t *s, int nrows, int Dact,
                                                  int aligned, int tid) {
    constexpr int CPR = D / 8, TOTAL = ROWS * CPR;
#pragma unroll
    for (int it = 0; it < (TOTAL + NTHREADS - 1) / NTHREADS; it++) {
        int idx = tid + it * NTHREADS;
        if (TOTAL % NTHREADS == 0 || idx < TOTAL) {
            int r = idx / CPR, c = idx % CPR;
            if (r < nrows && c * 8 < Dact) {
                uint4 v = *(const uint4 *)(s + r * LD + c * 8);
                uint16_t *dst = g + (int64_t)r * rs + c * 8;
                if (aligned) {
                    *(uint4 *)dst = v;
                } else {
                    uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        dst[2 * e] = (uint16_t)(w[e] & 0xffffu);
                        dst[2 * e + 1] = (uint16_t)(w[e] >> 16);
                    }
                }
            }
        }
    }
}

#endif // FLASHC_CUDA_COMMON_CUH
