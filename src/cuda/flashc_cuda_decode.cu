// flashc_cuda_decode.cu -- the CUDA KV-cache (decode) path: append with rotary, split-KV attention
// (flash-decoding) over a plain, row-indexed (cache_batch_idx) or paged cache, and the LSE merge
// that also serves the public flashc_merge. Host launchers at the end; flashc_cuda.cu calls them
// through flashc_cuda_decode.h and turns their cudaError_t into a status.
//
// Decode reads every K and V byte once and does ~2 FLOP per byte per query row: it is bound by
// HBM bandwidth, not by math. Both attention kernels keep all the query rows of one KV group
// together (GQA packing: K_j and V_j are read once for the group's `group` heads x seqlen_q rows),
// and what decides their speed is how steadily the bytes stream in.
//
// Work decomposition. One CTA = (batch b, kv head hk, chunk of ROWS packed query rows, split s).
// Packed row r of a kv group is query position i = r / group, head hk * group + r % group. Inside a
// CTA, parts of the CTA each take their own keys and run their own online softmax (FA2 Alg. 1
// lines 8-10) with no synchronisation, and are merged by their (m_i, l_i) at the end (finish_rows).
// With split-KV the CTA's key range is one of n_splits slices; slices write fp32 partials (O_i
// normalised, LSE) into the workspace, count themselves in on a per-(b, hk, chunk) counter, and the
// last to arrive combines them by their LSEs (merge_splits; flashc_merge_kernel serves flashc_merge).
// Nothing is read back to the host: cache_seqlens / cache_batch_idx / block_table are read here and
// clamped, so a call is a fixed sequence of stream operations (CUDA-graph capturable).
//
// The two kernels:
//   2b, on the tensor cores: 16-byte aligned caches at head_dim <= 128 (all the decode shapes).
//       ROWS = 16 (one m16 tile of mma.sync), a warp = a part, each warp streaming its keys through
//       its own cp.async ring.
//   2, on the CUDA cores: any alignment or stride, head_dim 256. ROWS = 4 or 8; TPK lanes (a "key
//       group") cover one key row and form a part. Per step, a key group computes the ROWS x KPG =
//       16 partial dot products of its lanes and reduces them across its TPK lanes by a
//       transpose-reduce (each level halves the values a lane holds: 15 shuffles for 16 sums
//       instead of 64), so that lane g ends with the scores of row (g * C) / KPG, keys (g * C) %
//       KPG .. + C - 1. The probabilities go to shared memory and come back as broadcast reads for
//       P V. Its cost is the instruction count per key (~60 warp instructions per 512-byte key row,
//       where the issue slots at 4.5 TB/s allow ~120 per SM), which is why 2b exists.
#include <math.h>
#include <stdio.h>

#include "flashc_cuda_common.cuh"
#include "flashc_cuda_decode.h"

// Time stamps of the tensor-core kernel (ev: 0 entry, 1 + w warp w's first step landed, 5 + w warp
// w's key loop done, 9 the CTA finished: stored, or merged if it was the last split; 10 Q_i in
// shared memory, 11 the warps' (m_i, l_i, O_i) in shared memory, 12 the rows stored or parked; see
// dev/cuda/dec_trace.cu, which defines the hook; nothing by default)
#ifndef FLASHC_DEC_TRACE
#define FLASHC_DEC_TRACE(ev) do {} while (0)
#endif

#define DEC_WARPS 4             // 128 threads: small CTAs, several per SM, for load balance
#define DEC_THREADS (DEC_WARPS * 32)
#define DEC_MIN_SPLIT_KEYS 128  // a split below this many keys costs more in setup and merge than it saves
#define DEC_MAX_SPLITS 128
// the tensor-core kernel (2b)
#define DEC_MMA_ROWS 16  // packed query rows per CTA: the m of m16n8k16
#define DEC_MMA_TILE 64 // split-KV slices meet at multiples of this many keys

// ------------------------------------------------------------------------------------------------
// kernel ABI

// flashc_fwd_kvcache on the device. Strides in elements. The cache is addressed by "units": a page
// (paged: k_bs steps from page to page, k_rs from row to row in the page) or a cache row of the
// batch (cache_batch_idx[b], or b). Key j of sequence b lives in unit
//     paged: block_table[b * bt_stride + j / page_size], row j % page_size
//     else:  cache_batch_idx ? cache_batch_idx[b] : b, row j
typedef struct flashc_decode_params {
    int B, Sq, H, H_kv, group, D;
    int rows;                        // group * Sq packed rows per kv head
    int row_chunks;                  // ceil(rows / ROWS)
    int n_splits;                    // 1: write o / lse directly; > 1: partials, merged by the last split
    int *counters;                   // n_splits > 1: (B, H_kv, row_chunks) splits finished, zero at launch;
                                     // the last split of each resets its counter (they end zero)
    int zero_counters;               // the append kernel zeroes them first (else they are zero already)
    int Sk;                          // capacity: c_b when cache_seqlens is NULL
    int seqlen_new;
    const int32_t *cache_seqlens;    // device (B), may be NULL; clamped into [0, Sk - seqlen_new]
    const int32_t *cache_batch_idx;  // device (B), may be NULL; clamped into [0, num_cache_rows)
    int64_t num_cache_rows;          // 0 = not given (clamped >= 0 only)
    const int32_t *block_table;      // device (B, bt_stride), NULL = not paged
    int64_t bt_stride;
    int page_size, num_pages;        // page indices are clamped to [0, num_pages)
    uint32_t page_magic, page_shift; // j / page_size = (umulhi(j, magic) + j) >> shift, j < 2^31
    const void *q;                   // (B, Sq, H, D)
    int64_t q_bs, q_rs, q_hs;
    void *k, *v;                     // the cache, [unit, row, head]
    int64_t k_bs, k_rs, k_hs, v_bs, v_rs, v_hs;
    const void *k_new, *v_new;       // (B, seqlen_new, H_kv, D)
    int64_t kn_bs, kn_rs, kn_hs, vn_bs, vn_rs, vn_hs;
    void *o;                         // (B, Sq, H, D)
    int64_t o_bs, o_rs, o_hs;
    float *lse;                      // (B, H, Sq) fp32, may be NULL
    float *part_o;                   // fp32 (n_splits, B, Sq, H, D) contiguous
    float *part_lse;                 // fp32 (n_splits, B, H, Sq): flashc_merge's lse_parts layout
    const void *rot_cos, *rot_sin;   // (seqlen_ro, rot_dim / 2), NULL = no rotary
    int rot_dim, rot_interleaved, rot_q_per_row;
    int seqlen_ro;                   // rotary positions are clamped to seqlen_ro - 1
    float q_mul;                     // q is multiplied by this once: scale * log2(e), or scale with a transform
    float softcap, inv_softcap;      // softcap = 0: off
    int transform;                   // softcap or ALiBi: scores finished per key, then * log2(e)
    const float *alibi;              // slope of (b, h) = alibi[b * alibi_bs + h], NULL = off
    int64_t alibi_bs;
    int window_left, window_right;   // -1 = unbounded
    int kv_vec;                      // K / V allow 16-byte loads (pointers and strides)
    int k_bs32, k_rs32, v_bs32, v_rs32; // the same strides as int32 (fast paths: every K / V stride < 2^31)
} flashc_decode_params;

// flashc_merge: parts (n_parts, B, S, H, D) with strides ps, out (B, S, H, D) with strides os.
typedef struct flashc_merge_params {
    int n_parts, B, S, H, D;
    const void *parts;
    int part_dtype;
    int64_t ps[4];
    const float *lse_parts;          // (n_parts, B, H, S)
    void *out;
    int out_dtype;
    int64_t os[3];
    float *lse;                      // (B, H, S), may be NULL
} flashc_merge_params;

// ------------------------------------------------------------------------------------------------
// small helpers

template <typename T>
static __device__ __forceinline__ void unpack8(const uint4 &u, float f[8]);

template <>
__device__ __forceinline__ void unpack8<__nv_bfloat16>(const uint4 &u, float f[8]) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

template <>
__device__ __forceinline__ void unpack8<__half>(const uint4 &u, float f[8]) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 t = __half22float2(*(const __half2 *)&w[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}

// 8 elements at ptr (16 bytes, or 8 two-byte loads when the tensor is not 16-byte aligned); each
// K / V byte is used once per CTA, so not kept in L1 (ld_stream_v4), where it would evict the block
// table
static __device__ __forceinline__ uint4 load8(const uint16_t *ptr, int vec) {
    if (vec) return ld_stream_v4(ptr);
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) w[i] = (uint32_t)ptr[2 * i] | ((uint32_t)ptr[2 * i + 1] << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
}

static __device__ __forceinline__ float dt_load(const void *base, int64_t i, int dt) {
    if (dt == FLASHC_DTYPE_F32) return ((const float *)base)[i];
    const uint16_t u = ((const uint16_t *)base)[i];
    return dt == FLASHC_DTYPE_BF16 ? to_f32<__nv_bfloat16>(u) : to_f32<__half>(u);
}

static __device__ __forceinline__ void dt_store(void *base, int64_t i, int dt, float x) {
    if (dt == FLASHC_DTYPE_F32) ((float *)base)[i] = x;
    else ((uint16_t *)base)[i] = dt == FLASHC_DTYPE_BF16 ? from_f32<__nv_bfloat16>(x) : from_f32<__half>(x);
}

// c_b, the tokens of sequence b in the cache before the append. The device arrays are not validated
// on the host (that would be a synchronous copy per call): a bad entry is clamped so that every row
// touched, c_b + seqlen_new - 1 included, lies inside the capacity (include/flashc.h).
static __device__ __forceinline__ int cache_len(const flashc_decode_params &p, int b) {
    if (!p.cache_seqlens) return p.Sk; // kv_resolve: no append then
    const int c = p.cache_seqlens[b];
    return c < 0 ? 0 : c > p.Sk - p.seqlen_new ? p.Sk - p.seqlen_new : c;
}

// The cache row of sequence b: cache_batch_idx[b] clamped into [0, num_cache_rows), or b.
static __device__ __forceinline__ int64_t cache_unit(const flashc_decode_params &p, int b) {
    if (!p.cache_batch_idx) return b;
    int64_t u = p.cache_batch_idx[b];
    u = u < 0 ? 0 : u;
    return p.num_cache_rows > 0 && u >= p.num_cache_rows ? p.num_cache_rows - 1 : u;
}

// Key j's cache row of sequence b (element offset of head 0): through the block table (the entry
// clamped into the pool, so a bad table cannot make us read outside it) or the cache row.
static __device__ __forceinline__ int64_t key_unit_row(const flashc_decode_params &p, const int32_t *bt_b,
                                                       int64_t unit_b, int j, int64_t *row) {
    if (!bt_b) {
        *row = j;
        return unit_b;
    }
    const uint32_t pg = (__umulhi((uint32_t)j, p.page_magic) + (uint32_t)j) >> p.page_shift;
    *row = j - (int64_t)pg * p.page_size;
    int e = __ldg(bt_b + pg);
    e = e < 0 ? 0 : e >= p.num_pages ? p.num_pages - 1 : e;
    return e;
}

// Element d of head vector x (dtype T) rotated at position pos, rounded to T as a stored value
// would be (GPT-J pairs (2i, 2i+1) when interleaved, GPT-NeoX (i, i + rd/2) otherwise). The
// reference rotates in fp64 and rounds once; fp32 with one FMA differs from it by < 1 ulp of T.
template <typename T>
static __device__ __forceinline__ float rope_elem(const flashc_decode_params &p, const uint16_t *x, int d, int64_t pos) {
    const float xd = to_f32<T>(x[d]);
    if (!p.rot_cos || d >= p.rot_dim) return xd;
    const int half = p.rot_dim / 2;
    pos = pos < p.seqlen_ro ? pos : p.seqlen_ro - 1; // checked on the host only when c_b is known there
    int pair, partner, first;
    if (p.rot_interleaved) pair = d >> 1, partner = d ^ 1, first = !(d & 1);
    else first = d < half, pair = first ? d : d - half, partner = first ? d + half : d - half;
    const float xp = to_f32<T>(x[partner]);
    const float c = to_f32<T>(((const uint16_t *)p.rot_cos)[pos * half + pair]);
    const float s = to_f32<T>(((const uint16_t *)p.rot_sin)[pos * half + pair]);
    const float r = first ? fmaf(xd, c, -xp * s) : fmaf(xp, s, xd * c);
    return to_f32<T>(from_f32<T>(r));
}

// The keys query i of a sequence with n keys sees, [lo, hi), bottom-right aligned.
static __device__ __forceinline__ void row_keys(const flashc_decode_params &p, int i, int n, int *lo, int *hi) {
    const long long diag = (long long)i + n - p.Sq;
    long long l = p.window_left < 0 ? 0 : diag - p.window_left;
    long long h = p.window_right < 0 ? n : diag + p.window_right + 1;
    l = l < 0 ? 0 : l;
    h = h > n ? n : h;
    h = h < l ? l : h;
    *lo = (int)l;
    *hi = (int)h;
}

// The key range [kb, ke) of the CTA of packed rows r0 .. r0 + rows - 1 and split `split`: the union
// of its rows' ranges (monotone in i), then this split's slice, in whole tiles so that slices meet
// at tile (and page) boundaries.
static __device__ __forceinline__ void cta_keys(const flashc_decode_params &p, int r0, int rows, int tile, int split,
                                                int n_b, int *kb, int *ke) {
    int lo0, hi0, lo1, hi1;
    const int r_last = min(p.rows, r0 + rows) - 1;
    row_keys(p, r0 / p.group, n_b, &lo0, &hi0);
    row_keys(p, r_last / p.group, n_b, &lo1, &hi1);
    const int span = hi1 > lo0 ? hi1 - lo0 : 0;
    const int per = (span + p.n_splits - 1) / p.n_splits;
    const int per_t = (per + tile - 1) / tile * tile;
    *kb = lo0 + split * per_t;
    *ke = min(hi1, *kb + per_t);
    if (*kb > *ke) *kb = *ke;
}

// ------------------------------------------------------------------------------------------------
// 1. the append: k_new (rotated at c_b + t) and v_new into cache rows c_b .. c_b + seqlen_new - 1

// It also zeroes the split counters of the attention kernel that follows (one launch less than a
// memset).
template <typename T>
__global__ void flashc_decode_append_kernel(const flashc_decode_params p) {
    const int64_t n_cnt = p.n_splits > 1 && p.zero_counters ? (int64_t)p.B * p.H_kv * p.row_chunks : 0;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n_cnt; t += (int64_t)gridDim.x * blockDim.x)
        p.counters[t] = 0;
    const int64_t n = (int64_t)p.B * p.seqlen_new * p.H_kv * p.D;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
        const int d = (int)(t % p.D), hk = (int)(t / p.D % p.H_kv);
        const int tt = (int)(t / ((int64_t)p.D * p.H_kv) % p.seqlen_new);
        const int b = (int)(t / ((int64_t)p.D * p.H_kv * p.seqlen_new));
        const int j = cache_len(p, b) + tt;
        const int32_t *bt_b = p.block_table ? p.block_table + (int64_t)b * p.bt_stride : NULL;
        int64_t row;
        const int64_t unit = key_unit_row(p, bt_b, cache_unit(p, b), j, &row);
        const uint16_t *kn = (const uint16_t *)p.k_new + b * p.kn_bs + tt * p.kn_rs + hk * p.kn_hs;
        const uint16_t *vn = (const uint16_t *)p.v_new + b * p.vn_bs + tt * p.vn_rs + hk * p.vn_hs;
        ((uint16_t *)p.k)[unit * p.k_bs + row * p.k_rs + hk * p.k_hs + d] = from_f32<T>(rope_elem<T>(p, kn, d, j));
        ((uint16_t *)p.v)[unit * p.v_bs + row * p.v_rs + hk * p.v_hs + d] = vn[d];
    }
}

// ------------------------------------------------------------------------------------------------
// 2. split-KV attention over the cache on the CUDA cores (the general path, head_dim 256)

// One level of the transpose-reduce of N partial sums over a key group's TPK lanes: with lane offset
// O, the lane whose bit O is set keeps the upper half of its NH * 2 values and sends the lower half
// (the partner the opposite), then adds what it receives; the next level halves again. After all
// levels lane g holds the sums of values g * C .. g * C + C - 1. Templates so that every index is a
// constant (a runtime loop here put the values in local memory).
template <int O, int NH>
struct transpose_reduce {
    static __device__ __forceinline__ void run(float *s, int lg) {
        const uint32_t up = (lg & O) ? 0xffffffffu : 0u; // a lane-dependent select as bit ops (LOP3), not a branch
#pragma unroll
        for (int x = 0; x < NH; x++) {
            const uint32_t lo = __float_as_uint(s[x]), hi = __float_as_uint(s[x + NH]);
            const float send = __uint_as_float((lo & up) | (hi & ~up));
            const float keep = __uint_as_float((hi & up) | (lo & ~up));
            s[x] = keep + __shfl_xor_sync(0xffffffffu, send, O);
        }
        transpose_reduce<O / 2, NH / 2>::run(s, lg);
    }
};

template <int NH>
struct transpose_reduce<0, NH> {
    static __device__ __forceinline__ void run(float *, int) {}
};

template <typename T, int DP, int ROWS>
struct dec_shape {
    static constexpr int TPK = DP / 8 < 16 ? DP / 8 : 16; // lanes per key row
    static constexpr int NV = DP / (8 * TPK);             // 16-byte vectors per lane per key row
    static constexpr int E = 8 * NV;                      // dims per lane
    static constexpr int GPW = 32 / TPK;                  // key groups per warp
    static constexpr int NG = DEC_WARPS * GPW;            // key groups per CTA
    static constexpr int KPG = 16 / ROWS;                 // keys per group per step
    static constexpr int N = ROWS * KPG;                  // scores per group per step
    static constexpr int C = N / TPK;                     // scores a lane holds after the reduce
    static constexpr int LPR = KPG / C;                   // lanes holding one row's scores
    static constexpr int TILE = NG * KPG;                 // keys per CTA step
    static_assert(C >= 1 && KPG % C == 0 && N % TPK == 0, "decode tile shape");
};

// K_j, V_j of keys j0 .. j0 + KPG - 1 (my TPK-lane slice of each row), zero past ke; every load
// issued before any is used (bytes in flight)
template <int KPG, int NV, int TPK>
static __device__ __forceinline__ void load_kv(const flashc_decode_params &p, const uint16_t *kbase,
                                               const uint16_t *vbase, const int32_t *bt_b, int64_t unit_b, int j0,
                                               int ke, int lg, uint4 (&kr)[KPG][NV], uint4 (&vr)[KPG][NV]) {
#pragma unroll
    for (int k = 0; k < KPG; k++) {
        const int j = j0 + k;
        int64_t row = 0;
        const int64_t unit = j < ke ? key_unit_row(p, bt_b, unit_b, j, &row) : 0;
#pragma unroll
        for (int v = 0; v < NV; v++) {
            const bool on = j < ke && (v * TPK + lg) * 8 < p.D;
            kr[k][v] = on ? load8(kbase + unit * p.k_bs + row * p.k_rs + v * TPK * 8, p.kv_vec) : make_uint4(0, 0, 0, 0);
            vr[k][v] = on ? load8(vbase + unit * p.v_bs + row * p.v_rs + v * TPK * 8, p.kv_vec) : make_uint4(0, 0, 0, 0);
        }
    }
}

// The tensor-core kernel's loads (16-byte aligned K / V, strides < 2^31): element offsets of the K
// and V rows (head 0) of keys j0 .. j0 + KPG - 1, each clamped to ke - 1 so that every address is a
// real cache row (its scores are masked to -inf, so it contributes P = 0); 32x32->64 multiplies, no
// branch but the paged one. Paged, the KPG keys share one block-table entry whenever they share a
// page (page_size >= KPG with the keys aligned: every lane of every step at page 16), so the
// lookup, its clamp and the page's multiplies run once per lane and step instead of once per key
// (paged-16 ran at 0.88-0.94 of contiguous with a lookup per key, in the CUDA-core kernel).
static __device__ __forceinline__ uint32_t page_of(const flashc_decode_params &p, int j) {
    return (__umulhi((uint32_t)j, p.page_magic) + (uint32_t)j) >> p.page_shift;
}

static __device__ __forceinline__ int page_unit(const flashc_decode_params &p, const int32_t *bt_b, uint32_t pg) {
    const int e = __ldg(bt_b + pg);
    return e < 0 ? 0 : e >= p.num_pages ? p.num_pages - 1 : e;
}

template <int KPG>
static __device__ __forceinline__ void key_offsets(const flashc_decode_params &p, const int32_t *bt_b, int unit_b,
                                                   int j0, int ke, int64_t (&ko)[KPG], int64_t (&vo)[KPG]) {
    int unit = unit_b, first = 0; // the unit of the keys, and the key at its row 0
    if (bt_b) {
        const uint32_t pf = page_of(p, min(j0, ke - 1));
        if (pf != page_of(p, min(j0 + KPG - 1, ke - 1))) { // the keys span pages: an entry per key
#pragma unroll
            for (int k = 0; k < KPG; k++) {
                const int jj = min(j0 + k, ke - 1);
                const uint32_t pg = page_of(p, jj);
                const int u = page_unit(p, bt_b, pg), row = jj - (int)pg * p.page_size;
                ko[k] = (int64_t)u * p.k_bs32 + (int64_t)row * p.k_rs32;
                vo[k] = (int64_t)u * p.v_bs32 + (int64_t)row * p.v_rs32;
            }
            return;
        }
        unit = page_unit(p, bt_b, pf);
        first = (int)pf * p.page_size;
    }
    const int64_t kb = (int64_t)unit * p.k_bs32, vb = (int64_t)unit * p.v_bs32;
#pragma unroll
    for (int k = 0; k < KPG; k++) {
        const int row = min(j0 + k, ke - 1) - first;
        ko[k] = kb + (int64_t)row * p.k_rs32;
        vo[k] = vb + (int64_t)row * p.v_rs32;
    }
}

// The split-KV merge inside the attention kernel, run by the last split of a (b, kv head, row
// chunk) to finish (a separate merge kernel of B * H rows is latency-bound at batch 1: B * H_kv
// CTAs reading n_splits partials each, after a launch gap). Online over rounds of U splits, all of a
// round's loads issued before any is used: M = the running max of the lse_s, L = sum_s w_s with
// w_s = exp(lse_s - M), out = sum_s w_s out_s / L, lse = M + log(L). The merge is a chain of L2
// round trips on the critical path of the kernel's last CTA; one round when n_splits <= U (the
// two passes before, the max and then the weights, cost 1.7 us more at batch 1 kv 16k: 2395 ->
// 2553 GB/s, H200, 2026-12-01, -s7-decode-ab.txt). In fp32: lse_s - M is exact for the splits that
// matter (Sterbenz), so a weight carries a few ulp of error instead of the ulp of |lse| ~ 1e2 that
// exp(lse_s - lse) would. A split that saw no key has lse +inf and weight 0; a NaN lse makes the row
// NaN. The splits are summed in split order, whichever CTA merges: the result is bit-identical run
// to run. The partials are read through L2 (ld.global.cg): other CTAs wrote them, before the
// release of their count (finish_rows).
template <typename T, int DP, int ROWS, int U>
static __device__ __forceinline__ void merge_splits(const flashc_decode_params &p, int b, int hk, int r0) {
    const int64_t l_step = (int64_t)p.B * p.H * p.Sq, o_step = l_step * p.D / 4;
    const int n_rows = min(ROWS, p.rows - r0);
    for (int idx = threadIdx.x; idx < n_rows * DP / 4; idx += DEC_THREADS) {
        const int r = idx * 4 / DP, d0 = idx * 4 % DP, rg = r0 + r;
        if (d0 >= p.D) continue; // D % 8 == 0: a float4 is all in or all out
        const int i = rg / p.group, h = hk * p.group + rg % p.group;
        const float *lp = p.part_lse + ((int64_t)b * p.H + h) * p.Sq + i;
        const float4 *op = (const float4 *)(p.part_o + (((int64_t)b * p.Sq + i) * p.H + h) * p.D + d0);
        float M = -INFINITY, L = 0.f;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        int nan = 0;
        for (int s0 = 0; s0 < p.n_splits; s0 += U) {
            float x[U];
            float4 v[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int sp = s0 + u;
                x[u] = sp < p.n_splits ? __ldcg(lp + sp * l_step) : INFINITY;
                v[u] = sp < p.n_splits ? __ldcg(op + sp * o_step) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
            float Mn = M;
#pragma unroll
            for (int u = 0; u < U; u++) {
                nan |= x[u] != x[u];
                if (!isinf(x[u])) Mn = fmaxf(Mn, x[u]);
            }
            if (Mn == -INFINITY) continue; // no split so far saw a key
            const float f = expf(M - Mn);  // 0 when M = -inf
            L *= f, acc.x *= f, acc.y *= f, acc.z *= f, acc.w *= f;
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (isinf(x[u]) || x[u] != x[u]) continue;
                const float w = expf(x[u] - Mn);
                L += w;
                acc.x = fmaf(w, v[u].x, acc.x), acc.y = fmaf(w, v[u].y, acc.y);
                acc.z = fmaf(w, v[u].z, acc.z), acc.w = fmaf(w, v[u].w, acc.w);
            }
            M = Mn;
        }
        const float inv = nan ? NAN : L > 0.f ? 1.f / L : 0.f;
        uint16_t *o = (uint16_t *)p.o + b * p.o_bs + (int64_t)i * p.o_rs + (int64_t)h * p.o_hs + d0;
        o[0] = from_f32<T>(acc.x * inv), o[1] = from_f32<T>(acc.y * inv);
        o[2] = from_f32<T>(acc.z * inv), o[3] = from_f32<T>(acc.w * inv);
        if (p.lse && d0 == 0) p.lse[((int64_t)b * p.H + h) * p.Sq + i] = nan ? NAN : L > 0.f ? M + logf(L) : INFINITY;
    }
}

// The end of a CTA: the warps' (m_i, l_i, O_i) -- sO (DEC_WARPS, ROWS, SLD) fp32 unnormalised, sWML
// (DEC_WARPS, 2, ROWS), rows r0 + r >= p.rows not read (the caller may leave them unwritten) --
// merged: O_i = sum_w ex2(m_w - M) O_w / L with L = sum_w ex2(m_w - M) l_w, and L_i = M + log2(L) in
// natural log (Alg. 1 lines 12-13), stored, or parked as this split's partial; with split-KV the last
// split of the (b, kv head, row chunk) to finish merges them all (U: merge_splits' loads in flight).
// Called by every thread after a __syncthreads. One thread per row first turns the warps' (m, l)
// into a weight per warp, ex2(m_w - M) / L, so that a dim costs DEC_WARPS FMAs, four dims a thread: a
// thread per dim with the max, the ex2s and the divide in it took 1.7 us (H200, dec_trace).
template <typename T, int DP, int ROWS, int U, int SLD>
static __device__ __forceinline__ void finish_rows(const flashc_decode_params &p, const float *sO,
                                                   const float (*sWML)[2][ROWS], int b, int hk, int chunk, int split,
                                                   int r0) {
    __shared__ float sF[ROWS][DEC_WARPS + 1]; // per row: the warps' weights, then the lse
    const int n_rows = min(ROWS, p.rows - r0);
    if (threadIdx.x < n_rows) {
        const int r = threadIdx.x;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, sWML[w][0][r]);
        const float Mu = M == -INFINITY ? 0.f : M;
        float f[DEC_WARPS], L = 0.f;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) {
            f[w] = ex2(sWML[w][0][r] - Mu);
            L += sWML[w][1][r] * f[w];
        }
        // a row with no key has L = 0: O_i = 0, lse +inf; a NaN score makes L NaN: O_i and lse NaN
        const float inv = L > 0.f ? 1.f / L : L == 0.f ? 0.f : NAN;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) sF[r][w] = f[w] * inv;
        sF[r][DEC_WARPS] = row_lse(Mu, L);
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < n_rows * DP / 4; idx += DEC_THREADS) {
        const int r = idx / (DP / 4), d0 = idx % (DP / 4) * 4, rg = r0 + r;
        if (d0 >= p.D) continue; // D % 8 == 0: four dims are all in or all out
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) {
            const float f = sF[r][w];
            const float4 x = *(const float4 *)&sO[(w * ROWS + r) * SLD + d0];
            o.x = fmaf(f, x.x, o.x), o.y = fmaf(f, x.y, o.y), o.z = fmaf(f, x.z, o.z), o.w = fmaf(f, x.w, o.w);
        }
        const float lse = sF[r][DEC_WARPS];
        // no key: 0, not the weight 0 times the warps' O_i, which hold 0 * inf = NaN when the CTA read
        // a non-finite V at keys this row does not see
        if (lse == INFINITY) o = make_float4(0.f, 0.f, 0.f, 0.f);
        const int i = rg / p.group, h = hk * p.group + rg % p.group;
        if (p.n_splits == 1) {
            uint16_t *out = (uint16_t *)p.o + b * p.o_bs + (int64_t)i * p.o_rs + (int64_t)h * p.o_hs + d0;
            out[0] = from_f32<T>(o.x), out[1] = from_f32<T>(o.y), out[2] = from_f32<T>(o.z), out[3] = from_f32<T>(o.w);
            if (p.lse && d0 == 0) p.lse[((int64_t)b * p.H + h) * p.Sq + i] = lse;
        } else {
            const int64_t row = (((int64_t)split * p.B + b) * p.Sq + i) * p.H + h;
            *(float4 *)&p.part_o[row * p.D + d0] = o; // the workspace: 16-byte aligned, D % 8 == 0
            if (d0 == 0) p.part_lse[(((int64_t)split * p.B + b) * p.H + h) * p.Sq + i] = lse;
        }
    }

    if (threadIdx.x == 0) FLASHC_DEC_TRACE(12);
    // --- split-KV: count this split in; the last of the (b, kv head, row chunk) merges them all
    if (p.n_splits > 1) {
        // A release / acquire pair on the counter (one MEMBAR.ALL.GPU, by thread 0) instead of a
        // __threadfence (MEMBAR.SC.GPU) by every thread before the count and again after it: the
        // merging split's count and merge 3.04 -> 2.75 us at batch 1 kv 64k (H200, dec_trace,
        // bench/results/h200-2026-12-02-s16.txt; in GB/s within the A/B's noise). Every thread's
        // partials are stored before the barrier, and thread 0's release is cumulative over what
        // the barrier ordered before it; the last split's acquire, then the barrier, order its
        // partial loads after every other split's release.
        __shared__ int s_last;
        __syncthreads();
        if (threadIdx.x == 0) {
            int *cnt = p.counters + ((int64_t)b * p.H_kv + hk) * p.row_chunks + chunk;
            s_last = count_in_last(cnt, p.n_splits); // (zeroed for the next call: flashc__cuda_kvcache)
        }
        __syncthreads();
        if (!s_last) return;
        merge_splits<T, DP, ROWS, U>(p, b, hk, r0);
    }
}

// The CUDA-core kernel: any alignment and stride (8 two-byte loads when not 16-byte aligned), int64
// offsets, keys past ke zero-filled; it runs unaligned or huge-stride caches and head_dim 256. (Its
// register-pipelined fast paths for aligned caches, and the load paths tried for them, are in the
// history before the tensor-core kernel: NOTES.md, sixth session.)
template <typename T, int DP, int ROWS>
__global__ __launch_bounds__(DEC_THREADS) void flashc_decode_kernel(const __grid_constant__ flashc_decode_params p) {
    typedef dec_shape<T, DP, ROWS> S;
    constexpr int TPK = S::TPK, NV = S::NV, E = S::E, GPW = S::GPW, NG = S::NG, KPG = S::KPG, N = S::N, C = S::C,
                  LPR = S::LPR, TILE = S::TILE;
    __shared__ __align__(16) float sP[NG][N + ROWS];    // per key group: P_ij of the step, then alpha per row
    __shared__ float sML[NG][2][ROWS];                  // per key group: m_i, l_i at the end
    __shared__ __align__(16) float sO[DEC_WARPS][ROWS][DP]; // per warp: O_i (unnormalised)
    __shared__ float sWML[DEC_WARPS][2][ROWS];          // per warp: m_i, l_i

    // --- setup: which (b, kv head, row chunk, split) am I; my key group and lane in it
    const int b = blockIdx.z, hk = blockIdx.y;
    const int chunk = blockIdx.x % p.row_chunks, split = blockIdx.x / p.row_chunks;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int grp = warp * GPW + lane / TPK, lg = lane % TPK;
    const int c_b = cache_len(p, b);
    const int n_b = c_b + p.seqlen_new;
    const int r0 = chunk * ROWS;
    const int32_t *bt_b = p.block_table ? p.block_table + (int64_t)b * p.bt_stride : NULL;
    const int64_t unit_b = cache_unit(p, b);

    int kb, ke;
    cta_keys(p, r0, ROWS, TILE, split, n_b, &kb, &ke);

    // my row after the reduce, its visible keys within [kb, ke), its ALiBi slope
    const int my_r = lg * C / KPG, my_k0 = lg * C % KPG;
    int my_lo = 0, my_hi = 0;
    float my_slope = 0.f;
    long long my_diag = 0;
    if (r0 + my_r < p.rows) {
        const int i = (r0 + my_r) / p.group, h = hk * p.group + (r0 + my_r) % p.group;
        row_keys(p, i, n_b, &my_lo, &my_hi);
        my_lo = max(my_lo, kb);
        my_hi = min(my_hi, ke);
        my_diag = (long long)i + n_b - p.Sq;
        if (p.alibi) my_slope = p.alibi[b * p.alibi_bs + h];
    }

    // --- Q_i: my E dims of every row, rotated at c_b (+ i), times scale (* log2 e)
    float qf[ROWS][E];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const int rg = r0 + r;
        const int i = rg / p.group, h = hk * p.group + rg % p.group;
        const uint16_t *qrow = (const uint16_t *)p.q + b * p.q_bs + (int64_t)i * p.q_rs + (int64_t)h * p.q_hs;
        const int64_t pos = (int64_t)c_b + (p.rot_q_per_row ? i : 0);
#pragma unroll
        for (int v = 0; v < NV; v++)
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const int d = (v * TPK + lg) * 8 + e;
                qf[r][v * 8 + e] = rg < p.rows && d < p.D ? rope_elem<T>(p, qrow, d, pos) * p.q_mul : 0.f;
            }
    }

    // --- init: m_i = -inf, l_i = 0, O_i = 0 (Alg. 1 line 6); m and l of my row only
    float m_i = -INFINITY, l_i = 0.f;
    float acc[ROWS][E];
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int e = 0; e < E; e++) acc[r][e] = 0.f;

    const uint16_t *kbase = (const uint16_t *)p.k + (int64_t)hk * p.k_hs + lg * 8;
    const uint16_t *vbase = (const uint16_t *)p.v + (int64_t)hk * p.v_hs + lg * 8;

    // --- for each tile of TILE keys (line 7); my group's keys are j0 .. j0 + KPG - 1
    const int n_tiles = (ke - kb + TILE - 1) / TILE;
    for (int t = 0; t < n_tiles; t++) {
        const int j0 = kb + t * TILE + grp * KPG;
        uint4 kr[KPG][NV], vr[KPG][NV];
        load_kv<KPG, NV, TPK>(p, kbase, vbase, bt_b, unit_b, j0, ke, lg, kr, vr);

        // S_ij = Q_i K_j^T (line 8): my lanes' partial sums, s[r * KPG + k]
        float s[N];
#pragma unroll
        for (int k = 0; k < KPG; k++) {
            float kf[E];
#pragma unroll
            for (int v = 0; v < NV; v++) unpack8<T>(kr[k][v], kf + 8 * v);
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                float x = 0.f;
#pragma unroll
                for (int e = 0; e < E; e++) x = fmaf(qf[r][e], kf[e], x);
                s[r * KPG + k] = x;
            }
        }
        // transpose-reduce over the TPK lanes: after each level a lane keeps half the values
        transpose_reduce<TPK / 2, N / 2>::run(s, lg);
        // now s[c] is the score of row my_r, key j0 + my_k0 + c: softcap, ALiBi, mask
        float mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < C; c++) {
            const int j = j0 + my_k0 + c;
            float x = s[c];
            if (p.transform) {
                if (p.softcap > 0.f) x = p.softcap * tanhf(x * p.inv_softcap);
                x -= my_slope * fabsf((float)(my_diag - j));
                x *= FLASHC_LOG2E;
            }
            s[c] = j >= my_lo && j < my_hi ? x : -INFINITY;
            mx = fmaxf(mx, s[c]);
        }
        // m_new = max(m_i, rowmax(S)) (line 9) over the LPR lanes of my row
#pragma unroll
        for (int o = 1; o < LPR; o *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float m_new = fmaxf(m_i, mx);
        const float m_use = m_new == -INFINITY ? 0.f : m_new; // a row with no key yet: keep exp2 finite
        const float alpha = ex2(m_i - m_use);
        m_i = m_new;
        // P_ij = exp2(S - m_new); l_i = alpha l_i + rowsum(P) (my lanes' part of the sum)
        __syncwarp();
        l_i *= alpha;
#pragma unroll
        for (int c = 0; c < C; c++) {
            const float pc = ex2(s[c] - m_use);
            l_i += pc;
            sP[grp][lg * C + c] = pc;
        }
        if (lg % LPR == 0) sP[grp][N + my_r] = alpha;
        __syncwarp();
        // O_i = diag(alpha) O_i + P_ij V_j (line 10), P and alpha as broadcast reads
        float pr[N + ROWS];
#pragma unroll
        for (int x = 0; x < N + ROWS; x += 4) {
            const float4 t4 = *(const float4 *)&sP[grp][x];
            pr[x] = t4.x, pr[x + 1] = t4.y, pr[x + 2] = t4.z, pr[x + 3] = t4.w;
        }
#pragma unroll
        for (int r = 0; r < ROWS; r++)
#pragma unroll
            for (int e = 0; e < E; e++) acc[r][e] *= pr[N + r];
#pragma unroll
        for (int k = 0; k < KPG; k++) {
            float vf[E];
#pragma unroll
            for (int v = 0; v < NV; v++) unpack8<T>(vr[k][v], vf + 8 * v);
#pragma unroll
            for (int r = 0; r < ROWS; r++)
#pragma unroll
                for (int e = 0; e < E; e++) acc[r][e] = fmaf(pr[r * KPG + k], vf[e], acc[r][e]);
        }
    }


    // --- merge the key groups: first (m, l) of every row to every lane of the group
#pragma unroll
    for (int o = 1; o < LPR; o *= 2) l_i += __shfl_xor_sync(0xffffffffu, l_i, o);
    __syncwarp();
    if (lg % LPR == 0) sML[grp][0][my_r] = m_i, sML[grp][1][my_r] = l_i;
    __syncwarp();
    float m[ROWS], l[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) m[r] = sML[grp][0][r], l[r] = sML[grp][1][r];
    // the groups of a warp by shuffles, rescaled to their common max
#pragma unroll
    for (int o = TPK; o < 32; o *= 2)
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            const float mo = __shfl_xor_sync(0xffffffffu, m[r], o), lo = __shfl_xor_sync(0xffffffffu, l[r], o);
            const float M = fmaxf(m[r], mo), Mu = M == -INFINITY ? 0.f : M;
            const float a = ex2(m[r] - Mu), ao = ex2(mo - Mu);
            l[r] = l[r] * a + lo * ao;
            m[r] = M;
#pragma unroll
            for (int e = 0; e < E; e++) acc[r][e] = acc[r][e] * a + __shfl_xor_sync(0xffffffffu, acc[r][e], o) * ao;
        }
    // the warps through shared memory
    if (lane < TPK) {
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
#pragma unroll
            for (int v = 0; v < NV; v++)
#pragma unroll
                for (int e = 0; e < 8; e++) sO[warp][r][(v * TPK + lg) * 8 + e] = acc[r][v * 8 + e];
            if (lane == 0) sWML[warp][0][r] = m[r], sWML[warp][1][r] = l[r];
        }
    }
    __syncthreads();

    // 8 merge loads in flight, not 16: this kernel's occupancy is set by its registers (128 now; 16
    // took an earlier version from ~128 to 168, 4 CTAs per SM to 3)
    finish_rows<T, DP, ROWS, 8, DP>(p, &sO[0][0][0], sWML, b, hk, chunk, split, r0);
}

// ------------------------------------------------------------------------------------------------
// 2b. split-KV attention on the tensor cores (fast-path caches, head_dim <= 128)
//
// The same work decomposition with 16 packed query rows per CTA: one m16 tile of mma.sync, so GQA
// 32/8 at seqlen_q 1 fills 4 of its rows and seqlen_q 4 all 16. The CUDA-core kernel above spends
// ~60 warp instructions per 512-byte key row (unpack, FMAs, the transpose-reduce); here S_ij and
// P_ij V_j take 3 (two m16n8k16 per 16 dims, half an ldmatrix each), so the issue slots are no
// longer what bounds the bandwidth (the 12 padding rows at seqlen_q 1 waste tensor-core work that
// costs nothing here: by my count ~12% of the tensor pipe at full bandwidth).
//
// Each warp owns a ring of NST shared-memory stages that only it fills (cp.async) and
// reads (ldmatrix): no barrier between warps inside the key loop. Warp w takes the w-th quarter of
// the CTA's key range, 16 keys a step, and runs its own online softmax (FA2 Alg. 1 lines 8-10) on
// it; the warps are merged by (m_i, l_i) at the end (finish_rows), as the key groups are above.

template <int DP>
struct dec_mma_shape {
    static constexpr int LD = DP + 8;             // sQ row stride in elements: rows 4 banks apart (ldmatrix)
    static constexpr int KLD = DP;                // K / V rows unpadded, 16-byte chunk c of row r at c ^ (r & 7)
    static constexpr int CPR = DP / 8;            // 16-byte chunks per key row
    static constexpr int KPL = 16 * CPR / 32;     // key rows a lane copies per step (each its chunk lane % CPR)
    static constexpr int STAGE = 2 * 16 * KLD;    // K_j then V_j of one warp step, elements
    // Stages per warp (NST - 1 in flight while one is read) and the dynamic shared memory asked for:
    // at head_dim 128, 3 stages (96 KB of rings) with 128 KB asked, so that one CTA runs per SM. H200,
    // 2026-12-01, GB/s against 4 stages (-s7-decode-ab.txt run 6; 3 stages at two CTAs per SM in
    // brackets, same split counts): batch 1 kv 4k / 64k 1095 / 3758 vs 1062 / 3678; batch 16 kv 16k /
    // 64k 4359 / 4497 vs 4270 / 4364 (4364 / 4496); batch 64 kv 16k / 64k 4473 / 4550 vs 4413 / 4465
    // (4434 / 4465); 2 stages in between. Head dim 64 keeps 4 stages (64 KB: 3 CTAs per SM), not
    // measured against 3.
    static constexpr int NST = DP == 128 ? 3 : 4;
    static constexpr size_t RINGS = (size_t)DEC_WARPS * NST * STAGE * 2;                   // bytes
    static constexpr size_t SMEM = DP == 128 && RINGS < 131072 ? 131072 : RINGS;          // dynamic, bytes
    // sO's row stride in floats: 8 more than DP, so that the 8 rows of a warp's float2 stores (lane / 4)
    // start 8 banks apart (at DP they all started in bank 0: 8-way conflicts)
    static constexpr int SLD = DP + 8;
    static_assert((size_t)DEC_WARPS * DEC_MMA_ROWS * SLD * 4 <= RINGS, "sO reuses the rings");
};

// One warp step: K_j and V_j of keys j0 .. j0 + 15 into a stage (rows past ke repeat row ke - 1:
// real memory, masked to P = 0). Lane copies chunk lane % CPR of KPL consecutive rows.
template <int DP>
static __device__ __forceinline__ void mma_load_step(const flashc_decode_params &p, const uint16_t *kg,
                                                     const uint16_t *vg, const int32_t *bt_b, int unit_b, int j0,
                                                     int ke, uint32_t stage, int lane) {
    typedef dec_mma_shape<DP> S;
    int64_t ko[S::KPL], vo[S::KPL];
    const int row0 = lane / S::CPR * S::KPL;
    key_offsets<S::KPL>(p, bt_b, unit_b, j0 + row0, ke, ko, vo);
#pragma unroll
    for (int k = 0; k < S::KPL; k++) {
        const int r = row0 + k;
        const uint32_t dst = stage + (uint32_t)(r * S::KLD + ((lane % S::CPR) ^ (r & 7)) * 8) * 2u;
        cp_async_16(dst, kg + ko[k], 16);
        cp_async_16(dst + 16 * S::KLD * 2, vg + vo[k], 16);
    }
}

template <typename T, int DP>
__global__ __launch_bounds__(DEC_THREADS) void flashc_decode_mma_kernel(const __grid_constant__ flashc_decode_params p) {
    typedef dec_mma_shape<DP> S;
    constexpr int LD = S::LD, CPR = S::CPR, NST = S::NST, ROWS = DEC_MMA_ROWS, TILE = DEC_MMA_TILE;
    extern __shared__ __align__(128) uint16_t dec_smem[]; // the warps' rings; after the loop sO
    __shared__ __align__(16) uint16_t sQ[ROWS * LD];
    __shared__ float sWML[DEC_WARPS][2][ROWS];

    // --- setup: which (b, kv head, row chunk, split) am I, and my key range
    const int b = blockIdx.z, hk = blockIdx.y;
    const int chunk = blockIdx.x % p.row_chunks, split = blockIdx.x / p.row_chunks;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0) FLASHC_DEC_TRACE(0);
    const int c_b = cache_len(p, b);
    const int n_b = c_b + p.seqlen_new;
    const int r0 = chunk * ROWS;
    const int32_t *bt_b = p.block_table ? p.block_table + (int64_t)b * p.bt_stride : NULL;
    const int unit_b = (int)cache_unit(p, b);
    int kb, ke;
    cta_keys(p, r0, ROWS, TILE, split, n_b, &kb, &ke);
    // my keys: a contiguous quarter [wb, we) of the CTA's, in 16-key steps (16-key slices dealt
    // round-robin over the warps streamed the same, -s6-decode-ab.txt run 3; a contiguous range
    // keeps each warp's loop free of the others' bounds)
    const int per_w = ((ke - kb + DEC_WARPS - 1) / DEC_WARPS + 15) / 16 * 16;
    const int wb = min(ke, kb + warp * per_w), we = min(ke, wb + per_w);
    const int n_steps = (we - wb + 15) / 16;

    // --- Q_i: the CTA's 16 rows rotated at c_b (+ i), as T, zero past the rows and the head dim; a
    // thread takes 8 dims of a row, their loads unrolled so that they are in flight together. Without
    // rotary they are issued before the ring's first copies: behind them, they landed 1.7 us later
    // and every warp waited for them (H200, dec_trace: the first K_j, V_j landed at 4.1 us, now 2.4)
    constexpr int QN = (ROWS * CPR + DEC_THREADS - 1) / DEC_THREADS;
    uint16_t xq[QN][8];
    auto load_q = [&]() {
#pragma unroll
        for (int u = 0; u < QN; u++) {
            const int c = u * DEC_THREADS + threadIdx.x, r = c / CPR, d0 = c % CPR * 8, rg = r0 + r;
#pragma unroll
            for (int e = 0; e < 8; e++) xq[u][e] = 0;
            if (c >= ROWS * CPR || rg >= p.rows || d0 >= p.D) continue;
            const int i = rg / p.group, h = hk * p.group + rg % p.group;
            const uint16_t *qrow = (const uint16_t *)p.q + b * p.q_bs + (int64_t)i * p.q_rs + (int64_t)h * p.q_hs;
            if (!p.rot_cos) {
#pragma unroll
                for (int e = 0; e < 8; e++) xq[u][e] = qrow[d0 + e];
            } else {
                const int64_t pos = (int64_t)c_b + (p.rot_q_per_row ? i : 0);
#pragma unroll
                for (int e = 0; e < 8; e++) xq[u][e] = from_f32<T>(rope_elem<T>(p, qrow, d0 + e, pos));
            }
        }
    };
    if (!p.rot_cos) load_q();

    // --- the first NST - 1 steps of K_j, V_j in flight
    const uint32_t ring = smem_u32(dec_smem) + (uint32_t)(warp * NST * S::STAGE) * 2u;
    // my chunk of a key row; past the head dim (D < DP, D % 8 == 0) dims 0..7 of the same row instead:
    // real memory, met by Q_i = 0 (its O_i columns are never stored)
    const int dk = lane % CPR * 8 < p.D ? lane % CPR * 8 : 0;
    const uint16_t *kg = (const uint16_t *)p.k + (int64_t)hk * p.k_hs + dk;
    const uint16_t *vg = (const uint16_t *)p.v + (int64_t)hk * p.v_hs + dk;
#pragma unroll
    for (int t = 0; t < NST - 1; t++) {
        if (t < n_steps) mma_load_step<DP>(p, kg, vg, bt_b, unit_b, wb + t * 16, we, ring + t * S::STAGE * 2, lane);
        cp_async_commit();
    }

    if (p.rot_cos) load_q();
#pragma unroll
    for (int u = 0; u < QN; u++) {
        const int c = u * DEC_THREADS + threadIdx.x, r = c / CPR, d0 = c % CPR * 8;
        if (c >= ROWS * CPR) break;
        const uint16_t *x = xq[u];
        *(uint4 *)&sQ[r * LD + d0] = make_uint4(x[0] | (uint32_t)x[1] << 16, x[2] | (uint32_t)x[3] << 16,
                                                x[4] | (uint32_t)x[5] << 16, x[6] | (uint32_t)x[7] << 16);
    }
    __syncthreads();
    if (threadIdx.x == 0) FLASHC_DEC_TRACE(10);
    uint32_t qa[DP / 16][4]; // A fragments of Q_i, k = 16 dims each
#pragma unroll
    for (int kk = 0; kk < DP / 16; kk++)
        ldmatrix_x4(qa[kk], smem_u32(sQ + (lane / 8 % 2 * 8 + lane % 8) * LD + kk * 16 + lane / 16 * 8));

    // my two rows (lane / 4 and lane / 4 + 8 of the tile): visible keys within [wb, we), ALiBi
    int lo[2] = {0, 0}, hi[2] = {0, 0};
    float slope[2] = {0.f, 0.f};
    long long diag[2] = {0, 0};
#pragma unroll
    for (int x = 0; x < 2; x++) {
        const int rg = r0 + lane / 4 + 8 * x;
        if (rg >= p.rows) continue; // padding row: no key (P = 0, never stored)
        const int i = rg / p.group, h = hk * p.group + rg % p.group;
        row_keys(p, i, n_b, &lo[x], &hi[x]);
        lo[x] = max(lo[x], wb);
        hi[x] = min(hi[x], we);
        diag[x] = (long long)i + n_b - p.Sq;
        if (p.alibi) slope[x] = p.alibi[b * p.alibi_bs + h];
    }

    // --- init (line 6): m_i = -inf, l_i = 0, O_i = 0 for my two rows
    float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.f, 0.f};
    float acc[DP / 8][4];
#pragma unroll
    for (int n = 0; n < DP / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

    // --- for each step of 16 keys (line 7)
    for (int t = 0; t < n_steps; t++) {
        const int tn = t + NST - 1;
        if (tn < n_steps) mma_load_step<DP>(p, kg, vg, bt_b, unit_b, wb + tn * 16, we, ring + tn % NST * S::STAGE * 2, lane);
        cp_async_commit();
        cp_async_wait<NST - 1>();
        __syncwarp(); // every lane's copies of step t are visible to the warp
        if (t == 0 && lane == 0) FLASHC_DEC_TRACE(1 + warp);
        const uint32_t sK = ring + t % NST * S::STAGE * 2, sV = sK + 16 * S::KLD * 2;
        const int sw = lane % 8; // the rows an ldmatrix lane addresses have r & 7 = lane % 8

        // S_ij = Q_i K_j^T (line 8): keys 0-7 in s[0], 8-15 in s[1]
        float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
        for (int kk = 0; kk < DP / 16; kk++) {
            uint32_t kf[4];
            ldmatrix_x4(kf, sK + (uint32_t)((lane / 16 * 8 + lane % 8) * S::KLD + ((kk * 2 + lane / 8 % 2) ^ sw) * 8) * 2u);
            mma_m16n8k16<T>(s[0], qa[kk], kf);
            mma_m16n8k16<T>(s[1], qa[kk], kf + 2);
        }
        // scale, softcap, ALiBi, mask: element e of s[n] is row lane / 4 + 8 * (e / 2), key j0 + n * 8 + 2 * (lane % 4) + e % 2
        const int j0 = wb + t * 16;
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int x = e / 2, j = j0 + n * 8 + 2 * (lane % 4) + e % 2;
                float v = s[n][e] * p.q_mul;
                if (p.transform) {
                    if (p.softcap > 0.f) v = p.softcap * tanhf(v * p.inv_softcap);
                    v -= slope[x] * fabsf((float)(diag[x] - j));
                    v *= FLASHC_LOG2E;
                }
                s[n][e] = j >= lo[x] && j < hi[x] ? v : -INFINITY;
                mx[x] = fmaxf(mx[x], s[n][e]);
            }
        // m_new = max(m_i, rowmax(S)) (line 9); P_ij = exp2(S - m_new); l_i = alpha l_i + rowsum(P)
        float alpha[2], m_use[2];
#pragma unroll
        for (int x = 0; x < 2; x++) {
            const float m_new = fmaxf(m_i[x], quad_max(mx[x]));
            m_use[x] = m_new == -INFINITY ? 0.f : m_new; // a row with no key yet: keep exp2 finite
            alpha[x] = ex2(m_i[x] - m_use[x]);
            m_i[x] = m_new;
            l_i[x] *= alpha[x];
        }
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[n][e] = ex2(s[n][e] - m_use[e / 2]);
                l_i[e / 2] += s[n][e];
            }
        // O_i = diag(alpha) O_i + P_ij V_j (line 10), P_ij from the S accumulators as the A operand
        const uint32_t pa[4] = {pack2<T>(s[0][0], s[0][1]), pack2<T>(s[0][2], s[0][3]), pack2<T>(s[1][0], s[1][1]),
                                pack2<T>(s[1][2], s[1][3])};
#pragma unroll
        for (int n = 0; n < DP / 8; n++) {
            acc[n][0] *= alpha[0], acc[n][1] *= alpha[0];
            acc[n][2] *= alpha[1], acc[n][3] *= alpha[1];
        }
#pragma unroll
        for (int nd = 0; nd < DP / 16; nd++) {
            uint32_t vf[4];
            ldmatrix_x4_trans(vf, sV + (uint32_t)((lane / 8 % 2 * 8 + lane % 8) * S::KLD + ((nd * 2 + lane / 16) ^ sw) * 8) * 2u);
            mma_m16n8k16<T>(acc[2 * nd], pa, vf);
            mma_m16n8k16<T>(acc[2 * nd + 1], pa, vf + 2);
        }
        __syncwarp(); // the stage is read before a later step's copies refill it
    }

    // --- the warps' (m_i, l_i, O_i) to shared memory (over the rings, once every copy has landed)
    if (lane == 0) FLASHC_DEC_TRACE(5 + warp);
    cp_async_wait<0>();
    __syncthreads();
    float *sO = (float *)dec_smem; // (DEC_WARPS, ROWS, SLD)
#pragma unroll
    for (int x = 0; x < 2; x++) {
        l_i[x] = quad_sum(l_i[x]);
        const int r = lane / 4 + 8 * x;
        if (r0 + r >= p.rows) continue; // a padding row: never read
#pragma unroll
        for (int n = 0; n < DP / 8; n++)
            *(float2 *)&sO[(warp * ROWS + r) * S::SLD + n * 8 + 2 * (lane % 4)] = make_float2(acc[n][2 * x], acc[n][2 * x + 1]);
        if (lane % 4 == 0) sWML[warp][0][r] = m_i[x], sWML[warp][1][r] = l_i[x];
    }
    __syncthreads();
    if (threadIdx.x == 0) FLASHC_DEC_TRACE(11);

    finish_rows<T, DP, ROWS, 16, S::SLD>(p, sO, sWML, b, hk, chunk, split, r0);
    if (threadIdx.x == 0) FLASHC_DEC_TRACE(9);
}

// ------------------------------------------------------------------------------------------------
// 3. the merge: lse = log sum_s exp(lse_s), out = sum_s exp(lse_s - lse) out_s, one warp per row.
// In fp32, with M = max_s lse_s: lse = M + log(sum_s exp(lse_s - M)), weights
// exp((lse_s - M) - log(sum)). lse_s - M is exact for the parts that matter (Sterbenz) and log(sum)
// <= log(n_parts) is small, so a weight carries a few ulp of error, where an fp32 exp(lse_s - lse)
// would carry the rounding of lse (1e-6 relative at |lse| ~ 1e2). The fp64 version this replaces
// had 40 bytes of spills (ptxas) for its exp / log calls. A part with lse_s = +/-inf saw no key:
// weight 0, its out not read (it may be NaN). A NaN lse_s makes the row's out and lse NaN. In
// place (out = part 0) is safe: a lane reads its elements of every part before it writes them, and
// lse is written after a __syncwarp (all lanes have read it).

__global__ __launch_bounds__(128) void flashc_merge_kernel(const flashc_merge_params p) {
    const int64_t n_rows = (int64_t)p.B * p.S * p.H;
    const int64_t row = blockIdx.x * 4LL + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= n_rows) return;
    const int h = (int)(row % p.H), s = (int)(row / p.H % p.S), b = (int)(row / p.H / p.S);
    const int64_t l_off = ((int64_t)b * p.H + h) * p.S + s, l_step = (int64_t)p.B * p.H * p.S;
    float mx = -INFINITY, sum = 0.f;
    int nan = 0;
    for (int sp = lane; sp < p.n_parts; sp += 32) {
        const float x = p.lse_parts[sp * l_step + l_off];
        nan |= isnan(x);
        if (!isinf(x)) mx = fmaxf(mx, x);
    }
#pragma unroll
    for (int o = 16; o >= 1; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    for (int sp = lane; sp < p.n_parts; sp += 32) {
        const float x = p.lse_parts[sp * l_step + l_off];
        if (!isinf(x) && !isnan(x)) sum += expf(x - mx);
    }
#pragma unroll
    for (int o = 16; o >= 1; o /= 2) {
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
        nan |= __shfl_xor_sync(0xffffffffu, nan, o);
    }
    const float M = nan ? NAN : mx, LS = sum > 0.f ? logf(sum) : INFINITY;
    const int64_t o_off = b * p.os[0] + s * p.os[1] + h * p.os[2];
    const int64_t p_off = b * p.ps[1] + s * p.ps[2] + h * p.ps[3];
    for (int d0 = lane * 4; d0 < p.D; d0 += 128) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        // 8 parts per round, their loads issued together: the rounds are latency-bound (a split-KV
        // merge of B = 1 has only B * H warps on the whole GPU)
        // (a NaN lse is in no sum, so a row whose only parts with keys are NaN has LS = +inf: it
        // still runs, w = NaN puts NaN in acc, as in the host merge)
        for (int sp0 = 0; sp0 < p.n_parts && (LS != INFINITY || nan); sp0 += 8) {
            float x[8], val[8][4];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int sp = sp0 + u;
                x[u] = sp < p.n_parts ? p.lse_parts[sp * l_step + l_off] : INFINITY;
#pragma unroll
                for (int e = 0; e < 4; e++)
                    val[u][e] = !isinf(x[u]) && d0 + e < p.D
                                    ? dt_load(p.parts, sp * p.ps[0] + p_off + d0 + e, p.part_dtype) : 0.f;
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                if (isinf(x[u])) continue;
                const float w = expf((x[u] - M) - LS);
#pragma unroll
                for (int e = 0; e < 4; e++) acc[e] = fmaf(w, val[u][e], acc[e]);
            }
        }
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (d0 + e < p.D) dt_store(p.out, o_off + d0 + e, p.out_dtype, acc[e]);
    }
    __syncwarp(); // every lane has read lse_parts (lse may be part 0's) before lane 0 writes lse
    if (p.lse && lane == 0) p.lse[l_off] = M != M ? NAN : LS == INFINITY ? INFINITY : M + LS;
}

// ------------------------------------------------------------------------------------------------
// host: the plan (rows per CTA, split count), launchers

static int pad_dim(int D) { return D <= 64 ? 64 : D <= 128 ? 128 : 256; }

// The CUDA-core kernel: 8 rows per CTA when a kv group has that many (MQA, seqlen_q > 1), else 4;
// head_dim 256 always 4 (16 dims per lane: 8 rows would need ~256 registers of Q_i and O_i).
static int rows_per_cta(const flashc_problem *p) {
    const int rows = p->group * (p->Sq > 0 ? p->Sq : 1);
    return rows > 4 && pad_dim(p->D) < 256 ? 8 : 4;
}

typedef void (*dec_kernel_fn)(flashc_decode_params);

// A kernel and its launch shape: packed rows per CTA, dynamic shared memory.
typedef struct dec_kernel {
    dec_kernel_fn fn;
    int rows;
    size_t smem;
} dec_kernel;

// The tensor-core kernel on a fast-path cache at head_dim <= 128, else the CUDA-core kernel. H200,
// 2026-12-01, bf16 GQA 32/8 d128, GB/s of K + V read, one process each line (dev/cuda/ab_decode.py;
// bench/results/h200-2026-12-01-s6-decode-ab.txt):
//   tensor-core kernel, 3 / 2 / 4 stages per warp (padded rows), CUDA-core kernel, SDPA CUDNN:
//   B 1  kv 4k / 16k / 64k:  855 / 882 / 950 / 768 / 1136    2140 / 1925 / 2280 / 1910 / 2533
//                            3300 / 3146 / 3381 / 3312 / 3796
//   B 16 kv 4k / 16k / 64k:  3385 / 3364 / 3593 / 3517 / 4067  3927 / 3920 / 4006 / 4162 / 4466
//                            4117 / 4093 / 4099 / 4343 / 4550
//   B 64 kv 16k / 64k:       4134 / 4042 / 4116 / 4107 / 4455  4153 / 4100 / 4110 / 4157 / 4464
//   B 16 kv 16k seqlen_q 4:  3788 / 3748 / 3930 / 608 / 1397
//   4 stages with padded / swizzled rows:  B 1 kv 16k 2262 / 2436, 64k 3384 / 3601; B 16 kv 16k
//   seqlen_q 4 3946 / 4164
//   swizzled, CUDA-core / tensor-core / CUDNN:  B 16 kv 4k 3556 / 3848 / 4080, 16k 4174 / 4253 /
//   4436, 64k 4351 / 4369 / 4546; B 64 kv 4k 3942 / 4189 / 4328, 16k 4106 / 4442 / 4445, 64k
//   4155 / 4505 / 4466
// The tensor-core kernel asks for 128 KB of shared memory per CTA (dec_mma_shape): devices that allow less
// per block (sm_86 / sm_89: 99 KB) run the CUDA-core kernel.
template <typename T>
static dec_kernel pick_kernel(const flashc_problem *p, int fast, int smem_optin) {
    const int Dp = pad_dim(p->D), rows = rows_per_cta(p);
    const size_t mma_smem = Dp == 64 ? dec_mma_shape<64>::SMEM : dec_mma_shape<128>::SMEM;
    if (fast && Dp <= 128 && mma_smem + 8192 <= (size_t)smem_optin) { // + its static shared memory
        if (Dp == 64) return {flashc_decode_mma_kernel<T, 64>, DEC_MMA_ROWS, dec_mma_shape<64>::SMEM};
        return {flashc_decode_mma_kernel<T, 128>, DEC_MMA_ROWS, dec_mma_shape<128>::SMEM};
    }
    if (Dp == 64) return {rows == 8 ? flashc_decode_kernel<T, 64, 8> : flashc_decode_kernel<T, 64, 4>, rows, 0};
    if (Dp == 128) return {rows == 8 ? flashc_decode_kernel<T, 128, 8> : flashc_decode_kernel<T, 128, 4>, rows, 0};
    return {flashc_decode_kernel<T, 256, 4>, 4, 0};
}

static int kv_vec_ok(const flashc_problem *p, const void *k, const void *v) {
    return ((uintptr_t)k & 15) == 0 && ((uintptr_t)v & 15) == 0 && p->k_stride[0] % 8 == 0 &&
           p->k_stride[1] % 8 == 0 && p->k_stride[2] % 8 == 0 && p->v_stride[0] % 8 == 0 && p->v_stride[1] % 8 == 0 &&
           p->v_stride[2] % 8 == 0;
}

// The fast paths: 16-byte access and every K / V stride (and the cache row index) within int32.
static int kv_fast_ok(const flashc_problem *p, const void *k, const void *v) {
    const int64_t lim = INT32_MAX;
    for (int i = 0; i < 3; i++)
        if (p->k_stride[i] > lim || p->v_stride[i] > lim) return 0;
    return kv_vec_ok(p, k, v);
}

static dec_kernel decode_kernel(const flashc_problem *p, int fast, int smem_optin) {
    return p->dtype == FLASHC_DTYPE_BF16 ? pick_kernel<__nv_bfloat16>(p, fast, smem_optin)
                                         : pick_kernel<__half>(p, fast, smem_optin);
}

// CTAs of kernel k per SM, with its shared-memory attribute set; from oc when oc holds k (a decode
// loop calls with one shape), else queried and kept in oc.
static int kernel_occ(const dec_kernel &k, flashc_dec_occ *oc) {
    if (oc && oc->fn == (const void *)k.fn) return oc->occ;
    int occ = 0;
    if (cudaFuncSetAttribute((const void *)k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)k.smem) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, (const void *)k.fn, DEC_THREADS, k.smem) != cudaSuccess ||
        occ < 1) {
        cudaGetLastError();
        return 1; // not kept: the launch sets the attribute again and reports the error
    }
    if (oc) oc->fn = (const void *)k.fn, oc->occ = occ;
    return occ;
}

// Split count: n_splits forced by the caller, else enough CTAs for an even wave over every SM's
// resident slots (occupancy x SMs): the smallest count within 95% of the best wave efficiency
// waves / ceil(waves) over at most two waves, each split >= DEC_MIN_SPLIT_KEYS keys of the
// capacity. FlashAttention-2's num_splits_heuristic takes 85% (fewer splits, less merging); with
// the merge fused into the last split the fuller wave wins. H200, 2026-11-29, batch 1, bf16 GQA
// 32/8 d128, the CUDA-core kernel then (3 CTAs per SM: 396 slots, 8 CTAs per split), us by forced
// split count (* = the 85% rule with a 256-key minimum):
//   kv 4k:   s12 22.8   s14* 22.0   s16 20.7   s24 20.7   s32 19.9   s48 21.1
//   kv 16k:  s24 35.9   s32 32.1    s42* 33.2  s48 32.4   s64 45.1 (two waves)
//   kv 64k:  s32 82.4   s42* 79.7   s48 76.1   s64 109.3 (two waves)
// Two later runs that day gave kv 16k s32 33.6 / 33.8 against s48 35.2 / 35.0, kv 64k s32 84.6 /
// 83.8 against s48 80.8 / 79.4: at 16k the fuller wave is not better, at 64k it is.
// This rule takes s31 / s48 / s48 there, and at batch 16 / 64 the counts of the 85% rule (3 / 1;
// batch 16 kv 16k: s3 252, s4 314, s6 263 us; one CTA per SM, s1, 417). The two-wave bound keeps
// out plans of many exact waves (batch 16: 99 splits fill 32 waves exactly), which only add
// merging. The workspace size may depend on the description only (not on cache_seqlens, nor on
// the tensors' alignment), so the plan always takes the occupancy of the kernel an aligned cache
// runs; an unaligned one runs the CUDA-core kernel on the same plan. The tensor-core kernel (one CTA
// per SM) gets 16 splits at batch 1 (s16 was within noise of the best forced count there, 2026-12-01,
// -s6-decode-ab.txt) and 1 at batch 16.
static int plan_splits(const flashc_problem *p, const flashc_kvcache_args *a, int sm_count, int smem_optin,
                       flashc_dec_occ *oc) {
    if (a->num_splits > 0) return a->num_splits;
    const dec_kernel k = decode_kernel(p, 1, smem_optin);
    const int rows = p->group * (p->Sq > 0 ? p->Sq : 1);
    const int64_t items = (int64_t)p->B * p->H_kv * ((rows + k.rows - 1) / k.rows);
    const int occ = kernel_occ(k, oc);
    const int64_t slots = (int64_t)sm_count * occ;
    int max_s = (int)((p->Sk + DEC_MIN_SPLIT_KEYS - 1) / DEC_MIN_SPLIT_KEYS);
    const int64_t two_waves = 2 * ((slots + items - 1) / items);
    if (max_s > two_waves) max_s = (int)two_waves;
    if (max_s > DEC_MAX_SPLITS) max_s = DEC_MAX_SPLITS;
    if (max_s < 1) max_s = 1;
    double eff[DEC_MAX_SPLITS + 1], best = 0.0;
    for (int s = 1; s <= max_s; s++) {
        const double waves = (double)(items * s) / (double)slots;
        eff[s] = waves / ceil(waves);
        if (eff[s] > best) best = eff[s];
    }
    for (int s = 1; s <= max_s; s++)
        if (eff[s] >= 0.95 * best) return s;
    return max_s;
}

// The workspace with n_splits > 1: fp32 partials O (n_splits, B, Sq, H, D), LSE (n_splits, B, H,
// Sq), then the int32 split counters (B, H_kv, row chunks); each piece 256-byte aligned.
static size_t ws_o_bytes(const flashc_problem *p, int n_splits) {
    const size_t rows = (size_t)p->B * (size_t)p->Sq * (size_t)p->H;
    return ((size_t)n_splits * rows * (size_t)p->D * sizeof(float) + 255) & ~(size_t)255;
}

static size_t ws_lse_bytes(const flashc_problem *p, int n_splits) {
    const size_t rows = (size_t)p->B * (size_t)p->Sq * (size_t)p->H;
    return ((size_t)n_splits * rows * sizeof(float) + 255) & ~(size_t)255;
}

// One per (b, kv head, row chunk) of whichever kernel runs (the workspace size may not depend on
// the tensors' alignment): chunks of the fewest rows any kernel takes.
static size_t n_counters(const flashc_problem *p) {
    const int rows = p->group * p->Sq, R = 4;
    return (size_t)p->B * (size_t)p->H_kv * (size_t)((rows + R - 1) / R);
}

static size_t ws_bytes(const flashc_problem *p, int n_splits) {
    if (n_splits <= 1) return 0;
    return ws_o_bytes(p, n_splits) + ws_lse_bytes(p, n_splits) + n_counters(p) * sizeof(int);
}

size_t flashc__cuda_kvcache_ws(const flashc_problem *p, const flashc_kvcache_args *a, int sm_count, int smem_optin,
                               flashc_dec_occ *oc) {
    return p->Sq > 0 ? ws_bytes(p, plan_splits(p, a, sm_count, smem_optin, oc)) : 0;
}

size_t flashc__cuda_kvcache_counters(const flashc_problem *p) { return n_counters(p); }

static void fast_div_init(uint32_t d, uint32_t *magic, uint32_t *shift) {
    uint32_t s = 0;
    while ((1ull << s) < d) s++;
    *magic = (uint32_t)((((1ull << 32) * ((1ull << s) - d)) / d) + 1);
    *shift = s;
}

cudaError_t flashc__cuda_kvcache(const flashc_problem *p, const flashc_kvcache_args *a, int sm_count, int smem_optin,
                                 flashc_dec_occ *oc, int *zeroed_counters) {
    cudaStream_t stream = (cudaStream_t)a->stream;
    flashc_decode_params P;
    memset(&P, 0, sizeof P);
    P.B = p->B, P.Sq = p->Sq, P.H = p->H, P.H_kv = p->H_kv, P.group = p->group, P.D = p->D;
    P.Sk = p->Sk;
    P.seqlen_new = a->seqlen_new;
    P.cache_seqlens = a->cache_seqlens;
    P.cache_batch_idx = p->cache_batch_idx;
    P.num_cache_rows = a->num_cache_rows;
    P.block_table = p->block_table;
    P.bt_stride = p->block_table_stride;
    P.page_size = p->page_size, P.num_pages = p->num_pages;
    if (p->block_table) fast_div_init((uint32_t)p->page_size, &P.page_magic, &P.page_shift);
    P.q = a->q, P.q_bs = p->q_stride[0], P.q_rs = p->q_stride[1], P.q_hs = p->q_stride[2];
    P.k = a->k_cache, P.k_bs = p->k_stride[0], P.k_rs = p->k_stride[1], P.k_hs = p->k_stride[2];
    P.v = a->v_cache, P.v_bs = p->v_stride[0], P.v_rs = p->v_stride[1], P.v_hs = p->v_stride[2];
    P.k_new = a->k_new, P.kn_bs = a->knew_stride[0], P.kn_rs = a->knew_stride[1], P.kn_hs = a->knew_stride[2];
    P.v_new = a->v_new, P.vn_bs = a->vnew_stride[0], P.vn_rs = a->vnew_stride[1], P.vn_hs = a->vnew_stride[2];
    P.o = a->o, P.o_bs = p->o_stride[0], P.o_rs = p->o_stride[1], P.o_hs = p->o_stride[2];
    P.lse = a->lse;
    P.rot_cos = a->rotary_cos, P.rot_sin = a->rotary_sin;
    P.rot_dim = a->rotary_dim, P.rot_interleaved = a->rotary_interleaved, P.rot_q_per_row = a->rotary_q_per_row;
    P.seqlen_ro = a->seqlen_ro;
    P.transform = p->softcap > 0.f || p->alibi_slopes != NULL;
    P.q_mul = P.transform ? p->scale : p->scale * FLASHC_LOG2E;
    P.softcap = p->softcap;
    P.inv_softcap = p->softcap > 0.f ? 1.f / p->softcap : 0.f;
    P.alibi = p->alibi_slopes, P.alibi_bs = p->alibi_batch_stride;
    P.window_left = p->window_left, P.window_right = p->window_right;
    P.kv_vec = kv_vec_ok(p, a->k_cache, a->v_cache);
    const int fast = kv_fast_ok(p, a->k_cache, a->v_cache);
    if (fast) {
        P.k_bs32 = (int)p->k_stride[0], P.k_rs32 = (int)p->k_stride[1];
        P.v_bs32 = (int)p->v_stride[0], P.v_rs32 = (int)p->v_stride[1];
    }

    // the plan (the append kernel zeroes the split counters)
    const dec_kernel k = decode_kernel(p, fast, smem_optin);
    P.rows = p->group * p->Sq;
    P.row_chunks = (P.rows + k.rows - 1) / k.rows;
    P.n_splits = p->Sq > 0 ? plan_splits(p, a, sm_count, smem_optin, oc) : 1;
    if (P.n_splits > 1) {
        P.part_o = (float *)a->ws;
        P.part_lse = (float *)((char *)a->ws + ws_o_bytes(p, P.n_splits));
        P.counters = zeroed_counters;
        P.zero_counters = !zeroed_counters;
        if (!P.counters) P.counters = (int *)((char *)a->ws + ws_o_bytes(p, P.n_splits) + ws_lse_bytes(p, P.n_splits));
    }

    // 1. the append, before the attention reads the cache (same stream)
    if (a->seqlen_new > 0) {
        const int64_t n = (int64_t)p->B * a->seqlen_new * p->H_kv * p->D;
        const int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
        if (p->dtype == FLASHC_DTYPE_BF16) flashc_decode_append_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(P);
        else flashc_decode_append_kernel<__half><<<blocks, 256, 0, stream>>>(P);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    } else if (P.n_splits > 1 && P.zero_counters) {
        cudaError_t e = cudaMemsetAsync(P.counters, 0, n_counters(p) * sizeof(int), stream);
        if (e != cudaSuccess) return e;
    }
    if (p->Sq == 0) return cudaSuccess;

    // 2. the attention, split-KV; the last split of each (b, kv head, row chunk) merges
    dim3 grid((unsigned)(P.row_chunks * P.n_splits), (unsigned)p->H_kv, (unsigned)p->B);
    if (k.smem > 0 && !(oc && oc->fn == (const void *)k.fn)) { // else set when oc took it
        cudaError_t e = cudaFuncSetAttribute((const void *)k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)k.smem);
        if (e != cudaSuccess) return e;
    }
    k.fn<<<grid, DEC_THREADS, k.smem, stream>>>(P);
    return cudaGetLastError();
}

cudaError_t flashc__cuda_merge(const flashc_merge_problem *m, const flashc_merge_args *a) {
    flashc_merge_params P;
    memset(&P, 0, sizeof P);
    P.n_parts = m->n_parts, P.B = m->B, P.S = m->S, P.H = m->H, P.D = m->D;
    P.parts = a->out_parts, P.part_dtype = m->part_dtype;
    memcpy(P.ps, m->part_stride, sizeof P.ps);
    P.lse_parts = a->lse_parts;
    P.out = a->out, P.out_dtype = m->out_dtype;
    memcpy(P.os, m->out_stride, sizeof P.os);
    P.lse = a->lse;
    const int64_t rows = (int64_t)m->B * m->S * m->H;
    if (rows == 0) return cudaSuccess;
    flashc_merge_kernel<<<(unsigned)((rows + 3) / 4), 128, 0, (cudaStream_t)a->stream>>>(P);
    return cudaGetLastError();
}
