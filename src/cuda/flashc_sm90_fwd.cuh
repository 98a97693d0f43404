// flashc_sm90_fwd.cuh -- the Hopper forward kernel (FlashAttention-2 Algorithm 1 on wgmma) and its
// launcher. Included by the generated inst/flashc_fwd_hd*_*_sm90.cu files only (built for sm_90a).
// flashc_cuda.cu dispatches to it on compute capability 9.0 when every tensor allows 16-byte
// access; everything else runs the mma.sync kernel of flashc_cuda_fwd.cuh.
//
// Two kernels share the math below. flashc_fwd_sm90_ws_kernel (the tuned one, persistent): a
// producer warpgroup loads Q_i, K_j, V_j by TMA into mbarrier rings, NWG consumer warpgroups
// compute. flashc_fwd_sm90_kernel (what the TMA maps do not take: bases not 128-byte aligned): no
// producer, every thread issues cp.async, which zero-fills ragged tails itself.
// A CTA's consumers are NWG warpgroups, each owning 64 query rows of the BM = 64 NWG rows of Q_i
// (wgmma's M is 64), so m_i, l_i and O_i of a row stay in one warpgroup (in fact in one quad of
// one warp, as in the mma.sync kernel). Tiles use the 128B-swizzled layout of flashc_sm90.cuh
// (what TMA writes with the 128-byte swizzle). Per key block j, per warpgroup:
//   S_ij = Q_i K_j^T      wgmma SS (both K-major), D / 16 k-steps, N = BN; in the persistent
//                         kernel's 16-bit tiles of 2 x 64 rows and 128 keys at D <= 128, RS with
//                         Q_i's fragments loaded once a tile (ldmatrix), K_j alone from shared memory
//   O_i += P_i,j-1 V_j-1  wgmma RS (P from registers: the S accumulator layout is the A layout,
//                         HOPPER-NOTES 1.7), V MN-major, BN / 16 k-steps, N = D
// The PV of the previous block is issued right after this block's S and runs while the softmax
// of S_ij executes (FA3's intra-warpgroup overlap: wait_group 1 frees S, wait_group 0 then frees
// O for the rescale). In the cp.async kernel's lockstep loop, loads run STAGES - 1 blocks ahead
// in a ring of STAGES K and STAGES V buffers: at the top of iteration t (after one CTA barrier)
// K_t+STAGES-1 and V_t+STAGES-2 are issued into the buffers whose last readers (S_t-1, PV_t-2)
// every warpgroup has already waited for (its ping-pong loop and the TMA kernel use full / empty
// mbarriers instead). The cp.async kernel's tiles are ordered in groups of p.bh_chunk (batch,
// head)s, heaviest query blocks first inside a group, so that the K/V a group streams stays in L2
// (the host sizes the group); the persistent TMA kernel's order is sm90_fwd_unit's.
// e4m3 inputs (T = __nv_fp8_e4m3) run the same loop with k32 wgmmas: Q_i and K_j tiles are the same
// bytes as a bf16 tile of half the head dim, V_j is read as V^T (written by flashc_fp8_vt_kernel,
// keys permuted so that P_ij needs no shuffles: sm90_pack_p), O_i is bf16 and scaled by v_descale.
#ifndef FLASHC_SM90_FWD_CUH
#define FLASHC_SM90_FWD_CUH

#include "flashc_cuda_common.cuh"
#include "flashc_cuda_tune.h"
#include "flashc_sm90.cuh"

// Phase stamps of the persistent kernel (wg: 0 producer, 1 + c consumer c; unit: the CTA's Q tile
// count; event: see dev/cuda/fwd90_trace.cu, which defines the hook; nothing by default)
#ifndef FLASHC_FWD_TRACE
#define FLASHC_FWD_TRACE(wg, unit, event) do {} while (0)
#endif
// and of its key loop (consumer c, its Q tile count, key block t of the tile; the same lab)
#ifndef FLASHC_FWD_STEP
#define FLASHC_FWD_STEP(c, unit, t, event) do {} while (0)
#endif

// Accumulator element i of thread lane l (within its warp) sits at row 8 ((i >> 1) & 1) + l / 4
// of the warp's 16 rows, column 8 (i >> 2) + 2 (l % 4) + (i & 1) (HOPPER-NOTES 1.6).

// The input element: bytes, the output type, and how V is read. e4m3 (fp8) inputs give a bf16
// output; wgmma takes 8-bit operands K-major only (HOPPER-NOTES 1.5), so their V is read as V^T
// (keys contiguous), which flashc_fp8_vt_kernel writes into the workspace before the forward.
template <typename T>
struct sm90_elem {
    static constexpr int ES = 2;
    static constexpr bool FP8 = false;
    typedef T out;
};
template <>
struct sm90_elem<__nv_fp8_e4m3> {
    static constexpr int ES = 1;
    static constexpr bool FP8 = true;
    typedef __nv_bfloat16 out;
};

// Column of key 0 of sequence b in each row of the fp8 V^T (fp8_vt_col0 of flashc_cuda_common.cuh).
static __device__ __forceinline__ int64_t fp8_vt_seq_col0(const flashc_cuda_attn &a, const flashc_cuda_seq &s, int b) {
    return fp8_vt_col0(a.cu_k ? (int64_t)s.k_row0 : (int64_t)b * a.Sk, b);
}

// The e4m3 P_ij does not line up with wgmma's A layout: a register holds 4 consecutive k,
// k = 16 (r >> 1) + 4 (lane % 4) + e (HOPPER-NOTES 1.7), while the S accumulator gives a thread
// columns 2c, 2c + 1, 8 + 2c, 9 + 2c (+16). Instead of moving values across lanes (FA3 shuffles),
// byte e of register r takes the thread's own column 16 (r >> 1) + 8 (e >> 1) + 2c + (e & 1), and
// V^T stores the keys of each 32-key group in that order: slot s holds key fp8_key_of_slot(s).
static __host__ __device__ __forceinline__ int fp8_key_of_slot(int s) {
    return 16 * (s >> 4) + 8 * ((s >> 1) & 1) + 2 * ((s >> 2) & 3) + (s & 1);
}

// fp32 x0..x3 -> 4 e4m3 bytes, x0 in the lowest (cvt puts its first source in the upper byte)
static __device__ __forceinline__ uint32_t pack4_e4m3(float x0, float x1, float x2, float x3) {
    uint16_t lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(x1), "f"(x0));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(x3), "f"(x2));
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

// P_ij (S after exp2, <= 2^8: see the rescale rule) as the A operand of O_i += P_ij V_j: bf16/f16
// pairs in place (the accumulator layout is the k16 A layout), e4m3 in the order above.
template <typename T, int BN>
static __device__ __forceinline__ void sm90_pack_p(uint32_t (*P)[4], const float *S) {
    if constexpr (sm90_elem<T>::FP8) {
#pragma unroll
        for (int kk = 0; kk < BN / 32; kk++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const float *s0 = S + 4 * (4 * kk + 2 * (r >> 1)) + 2 * (r & 1); // n8 block 4 kk + 2 (r >> 1)
                P[kk][r] = pack4_e4m3(s0[0], s0[1], s0[4], s0[5]);
            }
    } else {
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
            for (int r = 0; r < 4; r++) P[kk][r] = pack2<T>(S[8 * kk + 2 * r], S[8 * kk + 2 * r + 1]);
    }
}

// softcap / ALiBi in place: raw q.k -> score in log2 units (as scores_transform of the mma.sync kernel).
template <int BN>
static __device__ __forceinline__ void sm90_scores_transform(float *S, const flashc_cuda_attn &a, float slope,
                                                             int diag0, int col0) {
#pragma unroll
    for (int i = 0; i < BN / 2; i++) {
        const int diag = diag0 + 8 * ((i >> 1) & 1);
        const int col = col0 + 8 * (i >> 2) + (i & 1);
        float x = S[i] * a.scale;
        if (a.softcap > 0.f) x = a.softcap * tanhf(x * a.inv_softcap);
        x -= slope * fabsf((float)(diag - col));
        S[i] = x * FLASHC_LOG2E;
    }
}

// Masked keys -> -inf; row0 / col0: the row and column of element 0 of this thread.
template <int BN>
static __device__ __forceinline__ void sm90_scores_mask(float *S, const flashc_cuda_attn &a, const flashc_cuda_seq &s,
                                                        int row0, int col0) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int lo = key_lo(a, row0 + 8 * r, s.sq, s.sk), hi = key_hi(a, row0 + 8 * r, s.sq, s.sk);
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int col = col0 + 8 * nt + e;
                if (col < lo || col >= hi) S[4 * nt + 2 * r + e] = -INFINITY;
            }
    }
}

// Q_i K_j^T for this warpgroup's 64 rows: S = (one wgmma k-step per 32 bytes of the head dim),
// committed as one group.
template <typename T, int D, int BM, int BN>
static __device__ __forceinline__ void sm90_issue_qk(float *S, uint32_t sQ, uint32_t sK, int wg) {
#pragma unroll
    for (int kk = 0; kk < D * sm90_elem<T>::ES / 32; kk++)
        wgmma_ss<T, BN>(S, sm90_desc_kmajor(sQ, BM, 64 * wg, kk), sm90_desc_kmajor(sK, BN, 0, kk), kk > 0);
    wgmma_commit();
}

// O += P V_j (one k-step per 32 bytes of P's row), committed as one group: V_j MN-major (BN rows),
// or for e4m3 V_j^T K-major (D rows).
template <typename T, int D, int BN>
static __device__ __forceinline__ void sm90_issue_pv(float *O, const uint32_t (*P)[4], uint32_t sV) {
    if constexpr (sm90_elem<T>::FP8) { // BN / 128 column blocks of 128 bytes, then 64 keys in the 64B swizzle
        constexpr int K128 = BN / 128 * 4; // k-steps in the 128-byte column blocks
#pragma unroll
        for (int kk = 0; kk < BN / 32; kk++)
            wgmma_rs<T, D>(O, P[kk], kk < K128 ? sm90_desc_kmajor(sV, D, 0, kk) : sm90_desc_kmajor_sw64(sV + K128 / 4 * D * 128, kk - K128), 1);
    } else {
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) wgmma_rs<T, D>(O, P[kk], sm90_desc_mnmajor(sV, BN, kk), 1);
    }
    wgmma_commit();
}

// V_j (keys n0 .. n0 + BN - 1 of the sequence whose V starts at Vg) into the ring slot at sV: BN
// rows of V, or for e4m3 the D x BN block of V^T (rows: dims past D zero; columns: whole 16-key
// chunks up to the end of the sequence, whose padding fp8_vt_kernel zeroed).
template <typename T, int D, int BN, int NTHREADS>
static __device__ __forceinline__ void sm90_load_v(const flashc_fwd_params &p, uint32_t sV, const char *Vg, int n0,
                                                   int sk, int tid) {
    if constexpr (sm90_elem<T>::FP8)
        sm90_load_tile<D, BN / 2, NTHREADS>(sV, (const uint16_t *)(Vg + n0), p.vt_cols / 2, p.a.D, (sk - n0 + 1) / 2,
                                            p.vt, tid);
    else
        sm90_load_tile<BN, D, NTHREADS>(sV, (const uint16_t *)Vg + (int64_t)n0 * p.v_rs, p.v_rs, sk - n0, p.a.D, p.v,
                                        tid);
}

// Q_i or K_j: `rows` rows of D inputs at g (row stride rs elements), as a tile of 2-byte units
// (an e4m3 row of D bytes is D / 2 units; the swizzled layout depends only on the bytes).
template <typename T, int ROWS, int D, int NTHREADS>
static __device__ __forceinline__ void sm90_load_rows(uint32_t tile, const char *g, int64_t rs, int rows, int Dact,
                                                      const void *safe, int tid) {
    constexpr int ES = sm90_elem<T>::ES;
    sm90_load_tile<ROWS, D * ES / 2, NTHREADS>(tile, (const uint16_t *)g, rs * ES / 2, rows, Dact * ES / 2, safe, tid);
}

// The (query block, batch, head) of CTA cta: groups of p.bh_chunk (batch, head)s, heaviest query
// blocks first inside a group (flashc_sm90_bh_chunk).
// Index i of an order of groups of p.bh_chunk (batch, head)s, `per` indices each, heads fastest
// inside a group: its rank q among the query blocks and its (batch, head).
static __device__ __forceinline__ void sm90_fwd_split(const flashc_fwd_params &p, int i, int per, int *q, int *b,
                                                      int *h) {
    const int BH = p.a.B * p.a.H, chunk = fastdiv(i, p.div_chunk), in_chunk = i - chunk * per;
    const int heads = min(p.bh_chunk, BH - chunk * p.bh_chunk); // the last group may be smaller
    *q = heads == p.bh_chunk ? fastdiv(in_chunk, p.div_heads) : in_chunk / heads;
    const int bh = chunk * p.bh_chunk + in_chunk - *q * heads;
    *b = fastdiv(bh, p.div_H);
    *h = bh - *b * p.a.H;
}

static __device__ __forceinline__ void sm90_fwd_tile(const flashc_fwd_params &p, int cta, int *m_block, int *b, int *h) {
    int q;
    sm90_fwd_split(p, cta, p.n_m_blocks * p.bh_chunk, &q, b, h);
    *m_block = p.n_m_blocks - 1 - q;
}

// The persistent kernel's order (flashc_fwd_sm90_ws_kernel): the p.bh_chunk (batch, head)s of
// one GQA group side by side, so that all query blocks of a head are in flight together and share
// its K/V through L2. With p.tile_pairs (causal, windows), unit v is member v & 1 of pair v >> 1,
// and a CTA runs both members of each pair it takes: query blocks M - 1 - q and q of one (batch,
// head), whose causal work adds up to about the same whatever q is (M + 1 key blocks where BN = BM
// and Sq = Sk), so that a static stride over pairs balances (over single tiles, heaviest first,
// CTA i got the i-th heaviest of every round). False for the empty second member of the middle
// block (M odd). Without tile_pairs, unit v is tile v of sm90_fwd_tile.
// H200, one process against L2-sized groups of heads and single tiles, heaviest first (dev/cuda/ab.py,
// bench/results/h200-2026-12-01-s10-order.txt, part 6), S = 512 .. 16384: causal D = 128 1.09-1.15x,
// D = 256 1.15-1.25x, D = 64 1.01-1.04x, e4m3 1.01-1.11x; non-causal (groups only) D = 128
// 0.995-1.05x, D = 256 1.00-1.14x (most at S = 512), D = 64 0.98-1.00x.
// SEQ_PAIRS (the RAGGED kernel instances, in varlen mode): a pair is the blocks q and M_b - 1 - q
// of sequence b's own M_b query blocks rather than of the longest sequence's M, where a short
// sequence's blocks were all paired with empty ones. H200, one process, varlen causal, 16k tokens in
// sequences of S / 2 .. 3 S / 2, S ~ 512 / 2048 / 8192, against the cp.async kernel
// (bench/results/h200-2026-12-03-s21.txt calls 5-6): pairs of the longest sequence's blocks D = 64
// 0.99 / 0.98 / 1.47x, D = 128 0.95 / 0.95 / 1.22x, D = 256 0.96 / 1.04 / 1.33x; no pairs 0.99 /
// 1.29 / 1.30x, 0.96 / 1.19 / 1.26x, 1.03 / 1.15 / 1.17x; per sequence 1.01 / 1.02 / 1.42x, 1.01 /
// 1.02 / 1.17x, 1.09 / 1.10 / 1.24x (kept: never below 1; no pairs would win at S ~ 2048).
template <bool SEQ_PAIRS = false, int BM = 0>
static __device__ __forceinline__ bool sm90_fwd_unit(const flashc_fwd_params &p, int v, int *m_block, int *b, int *h) {
    if (!p.tile_pairs) {
        sm90_fwd_tile(p, v, m_block, b, h);
        return true;
    }
    int M = p.n_m_blocks, q;
    sm90_fwd_split(p, v >> 1, (M + 1) / 2 * p.bh_chunk, &q, b, h);
    if (SEQ_PAIRS && p.a.cu_q) M = (p.a.cu_q[*b + 1] - p.a.cu_q[*b] + BM - 1) / BM;
    *m_block = v & 1 ? q : M - 1 - q;
    // (with M_b < M, pair q may lie past the middle: both members empty)
    return SEQ_PAIRS ? (v & 1 ? q < M - 1 - q : q <= M - 1 - q) : !((v & 1) && q == M - 1 - q);
}

// This CTA's walk: both members of pairs blockIdx.x, + gridDim.x, ... (or tiles, without pairs).
static __device__ __forceinline__ int sm90_fwd_unit_first(const flashc_fwd_params &p) {
    return p.tile_pairs ? 2 * (int)blockIdx.x : (int)blockIdx.x;
}
static __device__ __forceinline__ int sm90_fwd_unit_next(const flashc_fwd_params &p, int unit) {
    return !p.tile_pairs ? unit + (int)gridDim.x : unit & 1 ? unit + 2 * (int)gridDim.x - 1 : unit + 1;
}

// What the TMA kernel's producer derives from a unit of sm90_fwd_unit and posts to the consumers
// as the tile's record: its sequence, first query row m0 and key blocks nb_min .. nb_max - 1
// (full_lo / full_hi as key_blocks_of_rows). False when the unit is the empty member of a pair or
// its tile has no query rows (a short varlen sequence): the producer posts no record for it.
typedef struct sm90_fwd_work {
    int b, h, m0, nb_min, nb_max, full_lo, full_hi;
    flashc_cuda_seq s;
} sm90_fwd_work;

template <int BM, int BN, bool SEQ_PAIRS = false>
static __device__ __forceinline__ bool sm90_fwd_work_of(const flashc_fwd_params &p, int unit, sm90_fwd_work *w) {
    int m_block;
    if (!sm90_fwd_unit<SEQ_PAIRS, BM>(p, unit, &m_block, &w->b, &w->h)) return false;
    w->s = cuda_seq(p.a, w->b);
    w->m0 = m_block * BM;
    if (w->m0 >= w->s.sq) return false;
    key_blocks_of_rows(p.a, w->s, w->m0, min(BM, w->s.sq - w->m0), BN, &w->nb_min, &w->nb_max, &w->full_lo,
                       &w->full_hi);
    return true;
}

// Stream-K (p.sk_split: batch mode, every work item the same p.nb_tile key blocks, more items than
// CTAs and not a multiple of them). An item is a tile (no window: all key blocks), or with
// p.tile_pairs a causal pair of tiles M - 1 - q, q (Sq = Sk, BM = BN, M even: M - q + q + 1 = M + 1
// blocks). Whole rounds of items as before, then the key blocks of the last G..2G - 1 items (G CTAs),
// item after item (a pair's first tile, then its second), cut into one equal run per CTA, so that no
// CTA idles through the last round (with 2048 tiles on 132 CTAs, 68 CTAs ran 16 tiles and 64 ran 15:
// H200, bench/results/h200-2026-12-03-s27.txt call 5). A run holds at least an item's blocks, so it
// starts and ends inside a tile at most once each and a tile is split between two CTAs at most:
// split s = the CTA whose run ends inside it. (Runs over all tiles, call 6: 0.65-0.88x at S <= 4096,
// where concurrent CTAs no longer share K_j, V_j through L2; D = 128 S = 16k 1.01x, e4m3 1.03x.) Each
// piece stores its partial O_i, m_i, l_i and counts itself in; the second merges both
// (sm90_fwd_merge). The piece of the tile that holds tail block u (of item item0 + u / nb_tile;
// blocks of a tile in the loop's order, right to left) up to the end of the tile or of the run; *u
// becomes the next piece's start; *piece = (split, which piece), or (-1, 0) for a whole tile.
// (Beside the record, not in it: the other kernel instances keep their code.)
template <int BM, int BN>
static __device__ __forceinline__ void sm90_fwd_piece(const flashc_fwd_params &p, int item0, int64_t *u, int64_t u_end,
                                                      sm90_fwd_work *w, int2 *piece) {
    const int W = p.nb_tile, it = (int)(*u / W), r = (int)(*u - (int64_t)it * W), item = item0 + it;
    int unit = item, off = 0, nb = W; // the tile's unit, its first block in the item, its blocks
    if (p.tile_pairs) { // the pair's first tile is query block mb = M - 1 - q: mb + 1 key blocks
        int mb, b, h;
        sm90_fwd_unit<false, BM>(p, 2 * item, &mb, &b, &h);
        const bool second = r > mb;
        unit = 2 * item + second;
        off = second ? mb + 1 : 0;
        nb = second ? W - (mb + 1) : mb + 1;
    }
    const int t0 = r - off, t1 = (int)min((int64_t)nb, u_end - (int64_t)it * W - off);
    sm90_fwd_work_of<BM, BN>(p, unit, w); // (every tile has rows and key blocks here: batch mode)
    w->nb_min = w->nb_max - t1;
    w->nb_max -= t0;
    *piece = t0 > 0 || t1 < nb ? make_int2((int)blockIdx.x - (t0 > 0), t0 > 0) : make_int2(-1, 0);
    *u = (int64_t)it * W + off + t1;
}

// A piece of a split tile, after its key blocks (consumer warpgroup wg of NWG, each warp on its own):
// its O_i, m_i, l_i go to the workspace (per thread, in the accumulator layout, which the other
// piece's thread of the same index shares), then the warp counts itself in. The second warp of the
// pair loads the other's and merges them (in piece order, so that the result does not depend on
// which came second) and returns true: O_i, m_i, l_i are the whole tile's, for the epilogue. The
// counter goes back to 0 for the next call. (The decode's split protocol, per warp: a release add
// after the stores, ordered by __syncwarp; an acquire in the second, then L2 loads.)
template <int D, int NWG>
static __device__ __forceinline__ bool sm90_fwd_merge(const flashc_fwd_params &p, int split, int role, int wg, float *O,
                                                      float *m_i, float *l_i) {
    constexpr int W = D / 2 + 4; // floats a thread: O_i, m_i, l_i
    const int t128 = threadIdx.x & 127, lane = t128 & 31;
    float *const slot = p.part + ((int64_t)split * 2 * NWG + wg) * 128 * W + t128;
    float *const mine = slot + role * NWG * 128 * W, *const other = slot + (role ^ 1) * NWG * 128 * W;
#pragma unroll
    for (int i = 0; i < D / 2; i++) mine[i * 128] = O[i];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mine[(D / 2 + r) * 128] = m_i[r];
        mine[(D / 2 + 2 + r) * 128] = l_i[r];
    }
    __syncwarp();
    int *const cnt = p.part_cnt + (split * NWG + wg) * 4 + (t128 >> 5);
    int second = 0;
    if (lane == 0) {
        second = count_in_last(cnt, 2);
    }
    if (!__shfl_sync(0xffffffffu, second, 0)) return false;
    __syncwarp();
    float a[2][2]; // [piece][row]: each piece's factor 2^(m_piece - m)
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float mo = __ldcg(other + (D / 2 + r) * 128), lo = __ldcg(other + (D / 2 + 2 + r) * 128);
        const float m0 = role ? mo : m_i[r], m1 = role ? m_i[r] : mo, l0 = role ? lo : l_i[r], l1 = role ? l_i[r] : lo;
        const float m = fmaxf(m0, m1), ms = m == -INFINITY ? 0.f : m;
        a[0][r] = ex2(m0 - ms);
        a[1][r] = ex2(m1 - ms);
        m_i[r] = m;
        l_i[r] = fmaf(l1, a[1][r], l0 * a[0][r]);
    }
#pragma unroll
    for (int i = 0; i < D / 2; i++) {
        const int r = (i >> 1) & 1;
        const float oo = __ldcg(other + i * 128), o0 = role ? oo : O[i], o1 = role ? O[i] : oo;
        O[i] = fmaf(o1, a[1][r], o0 * a[0][r]);
    }
    return true;
}

// Row r's max over this thread's quad (log2 units), and P_ij = 2^(S_ij sl2 - ms) of row r in place
// (returning the row's partial sum): the two halves of the softmax, shared by both orders below.
template <int BN>
static __device__ __forceinline__ float sm90_row_max(const float *S, int r, float sl2) {
    float x = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++) x = fmaxf(x, fmaxf(S[4 * nt + 2 * r], S[4 * nt + 2 * r + 1]));
    return quad_max(x) * sl2;
}
template <int BN>
static __device__ __forceinline__ float sm90_row_exp(float *S, int r, float sl2, float ms) {
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const float x = ex2(fmaf(S[4 * nt + 2 * r + e], sl2, -ms));
            S[4 * nt + 2 * r + e] = x;
            sum += x;
        }
    return sum;
}

// Online softmax of one key block, S in log2 units up to the factor sl2 (Alg. 1 lines 9-10):
// m_new = max(m_i, rowmax(S_ij)); P_ij = exp2(S_ij sl2 - m_new) in place; l_i = alpha l_i + rowsum(P_ij).
// As in the mma.sync kernel, m_i moves only when a row's max grew by more than 8 (log2 units):
// P_ij <= 2^8 stays exact in fp32, and O_i is rescaled rarely. Not for e4m3: there P_ij is rounded
// to 3 mantissa bits, and with m_i the exact running max the largest P_ij of a row is 1, exact, as
// in a naive fp8 attention; with a stale m_i it carried up to 6% error and O erred 2-3.7x the naive
// (H200, test_fp8, Sk >= 129). Returns whether O_i must be multiplied by alpha (warp-uniform).
template <typename T, int BN>
static __device__ __forceinline__ bool sm90_softmax(float *S, float *m_i, float *l_i, float *alpha, float sl2) {
    // e4m3 on 192-key blocks: row by row (a row's max, alpha, then its ex2s), one vote at the end.
    // e4m3's two consumers run their softmaxes side by side (no turns), where mufu_lab timed this
    // order at 1697 cycles against 1883 both maxes first (two warps a scheduler, NOTES s53). H100,
    // one process, two runs against both maxes first (bench/results/h100-2026-12-08-s54.txt call
    // 2): D = 128 on 2 x 192 (S >= 2048) 1.008-1.021x (causal 2048 0.998x); on the 2 x 128 tile
    // (S = 1024) 0.91x, causal 0.98x, and e4m3 D = 256 (2 x 128) 0.985-1.002x, which keep the order below.
    if constexpr (sm90_elem<T>::FP8 && BN == 192) {
        bool grow = false;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float m_new = fmaxf(m_i[r], sm90_row_max<BN>(S, r, sl2)), ms = m_new == -INFINITY ? 0.f : m_new;
            grow |= m_new > m_i[r];
            alpha[r] = ex2(m_i[r] - ms); // 1 where m_i did not move
            m_i[r] = m_new;
            l_i[r] *= alpha[r];
            l_i[r] += sm90_row_exp<BN>(S, r, sl2, ms);
        }
        return __any_sync(0xffffffffu, grow);
    }
    constexpr float M_SLACK = sm90_elem<T>::FP8 ? 0.f : 8.f;
    float mx[2];
    bool grow = false;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = sm90_row_max<BN>(S, r, sl2);
        grow |= mx[r] > m_i[r] + M_SLACK;
    }
    const bool rescale = __any_sync(0xffffffffu, grow);
    if (rescale) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float m_new = fmaxf(m_i[r], mx[r]);
            alpha[r] = ex2(m_i[r] - (m_new == -INFINITY ? 0.f : m_new));
            m_i[r] = m_new;
            l_i[r] *= alpha[r];
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) l_i[r] += sm90_row_exp<BN>(S, r, sl2, m_i[r] == -INFINITY ? 0.f : m_i[r]);
    return rescale;
}

// Once the previous PV is done: O_i *= alpha where the running max moved (line 10's rescale),
// and P_ij packed as the A operand of the next PV.
template <typename T, int D, int BN>
static __device__ __forceinline__ void sm90_rescale_pack(float *O, uint32_t (*P)[4], const float *S, bool rescale,
                                                         const float *alpha) {
#pragma unroll
    for (int i = 0; i < D / 2; i++) reg_fence(O[i]);
    if (rescale) {
#pragma unroll
        for (int i = 0; i < D / 2; i++) O[i] *= alpha[(i >> 1) & 1];
    }
    sm90_pack_p<T, BN>(P, S);
}

// Lines 12-13 for a row of this thread, whose quad holds the row's partial sums: l_i and O_i's
// factor o_scale / l_i, applied by sm90_out; L_i by row_lse. A row that saw no key (l_i = 0)
// stores O_i = 0 and L_i = +inf, even where its O_i holds NaN: P = 0 times an Inf in a V row that
// other rows of the block see. A NaN l_i (a NaN score) gives NaN O_i and L_i.
typedef struct sm90_row_end {
    float l, inv;
} sm90_row_end;
static __device__ __forceinline__ sm90_row_end sm90_finish_row(const flashc_fwd_params &p, float l_part) {
    const float l = quad_sum(l_part);
    return {l, p.o_scale / l};
}
static __device__ __forceinline__ float sm90_out(float o, sm90_row_end e) { return e.l == 0.f ? 0.f : o * e.inv; }

// Where the LSE rows of sequence b, head h begin: (B, H, Sq), or (H, total_q) for packed sequences.
static __device__ __forceinline__ int64_t sm90_lse_row0(const flashc_fwd_params &p, const flashc_cuda_seq &s, int b,
                                                        int h) {
    return p.a.cu_q ? (int64_t)h * p.a.total_q + s.q_row0 : ((int64_t)b * p.a.H + h) * p.a.Sq;
}

// Epilogue of warpgroup wg (its 64 rows of the BM-row block at m0): O_i = O_i / l_i,
// L_i = m_i + log(l_i) (lines 12-13). It stages its rows of O_i in its rows of the (swizzled) Q
// tile at sQ, which only its own, finished, wgmmas read, then stores them as 16-byte chunks.
template <typename T, int D, int BM>
static __device__ __forceinline__ void sm90_fwd_store(const flashc_fwd_params &p, const flashc_cuda_seq &s, int b,
                                                      int h, int m0, int wg, const float *O, const float *m_i,
                                                      const float *l_i, uint32_t sQ) {
    const int t128 = threadIdx.x & 127, lane = t128 & 31;
    const int trow = wg * 64 + (t128 >> 5) * 16 + (lane >> 2);
    const int64_t lse_row0 = sm90_lse_row0(p, s, b, h);
    char *smem = (char *)flashc_smem + (sQ - smem_u32(flashc_smem));
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const sm90_row_end e = sm90_finish_row(p, l_i[r]);
        const int row = trow + 8 * r;
#pragma unroll
        for (int nt = 0; nt < D / 8; nt++) {
            const uint32_t off = sw128_offset(BM, row, 8 * nt) + 4 * (lane & 3);
            *(uint32_t *)(smem + off) =
                pack2<typename sm90_elem<T>::out>(sm90_out(O[4 * nt + 2 * r], e), sm90_out(O[4 * nt + 2 * r + 1], e));
        }
        if (p.lse && (lane & 3) == 0 && m0 + row < s.sq) p.lse[lse_row0 + m0 + row] = row_lse(m_i[r], e.l);
    }
    bar_sync(1 + wg, 128);
    const int m_rows = min(BM, s.sq - m0);
    uint16_t *Og = (uint16_t *)p.o + b * p.o_bs + (s.q_row0 + m0) * p.o_rs + h * p.o_hs;
#pragma unroll
    for (int it = 0; it < 64 * D / 8 / 128; it++) {
        const int idx = t128 + it * 128, r = wg * 64 + idx / (D / 8), c = 8 * (idx % (D / 8));
        if (r < m_rows && c < p.a.D)
            *(uint4 *)(Og + (int64_t)r * p.o_rs + c) = *(const uint4 *)(smem + sw128_offset(BM, r, c));
    }
}

// ------------------------------------------------------------------------------------------------
// the kernel

// PP = false: one CTA barrier per key block (cp.async.wait_group + __syncthreads), so the
// warpgroups run in lockstep and their softmaxes coincide. PP = true: FA3's ping-pong. Each
// thread's cp.asyncs of a ring slot arrive on an mbarrier (full[s], cp.async.mbarrier.arrive),
// the warpgroups release slots on empty[s] once their wgmmas reading it are done, and a pair of
// named barriers per warpgroup lets warpgroup i issue its wgmmas only after warpgroup i - 1 has
// issued its own: the tensor cores then alternate between the warpgroups while each one's
// softmax runs during the other's matmuls. The next slot is loaded after the softmax (when the
// other warpgroup has surely released it). H200, D = 128, S = 4096, 2x128 3 stages: 460 / 419
// TFLOP/s non-causal / causal against 389 / 358 in lockstep (dev/cuda/fwd90_lab.cu).
// The cp.async writes are generic-proxy and a writer cannot fence after its asynchronous
// arrive, so each reader runs fence.proxy.async after its full[s] wait, before its wgmmas read
// the slot. That placement is our reading of the PTX proxy rules, backed so far only by the
// tests (full cuda sweep 519 passed; memcheck/racecheck clean), not by a verified note.
template <typename T, int D, int NWG, int BN, int STAGES, bool PP>
__global__ void __launch_bounds__(NWG * 128, 1) flashc_fwd_sm90_kernel(const __grid_constant__ flashc_fwd_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int NTHREADS = NWG * 128, BM = NWG * 64, ES = sm90_elem<T>::ES;
    // the Q region holds Q_i, then the (2-byte) O_i staged for the store
    constexpr uint32_t Q_BYTES = BM * D * 2, KV_BYTES = BN * D * ES;
    static_assert(D * ES % 128 == 0 && BN % 16 == 0 && Q_BYTES % 1024 == 0 && KV_BYTES % 1024 == 0, "tile shape");
    static_assert(!sm90_elem<T>::FP8 || (BN % 128 == 0 && BN <= FP8_VT_TILE), "fp8: V^T rows of BN bytes fill 128-byte swizzle rows");
    static_assert(STAGES >= 2 && STAGES <= 4, "K/V ring depth");

    // 1024-byte aligned tiles (the swizzle pattern repeats every 1024 B of absolute address)
    const uint32_t base = (smem_u32(flashc_smem) + 1023u) & ~1023u;
    const uint32_t sQ = base, sK0 = sQ + Q_BYTES, sV0 = sK0 + STAGES * KV_BYTES;
    const uint32_t full0 = sV0 + STAGES * KV_BYTES, empty0 = full0 + 8 * STAGES; // PP: mbarriers

    const int tid = threadIdx.x, wg = warpgroup_uniform(0), lane = tid & 31, warp = (tid >> 5) & 3;

    int m_block, b, h;
    sm90_fwd_tile(p, (int)blockIdx.x, &m_block, &b, &h);
    const flashc_cuda_seq s = cuda_seq(p.a, b);
    const int m0 = m_block * BM;
    if (m0 >= s.sq) return;
    const int h_kv = h / p.a.group;
    const int m_rows = min(BM, s.sq - m0);
    const int trow = wg * 64 + warp * 16 + (lane >> 2);  // this thread's first row in the block (and +8)

    const char *Qg = (const char *)p.q + (b * p.q_bs + (s.q_row0 + m0) * p.q_rs + h * p.q_hs) * ES;
    const char *Kg = (const char *)p.k + (b * p.k_bs + s.k_row0 * p.k_rs + h_kv * p.k_hs) * ES;
    const char *Vg = sm90_elem<T>::FP8
                         ? (const char *)p.vt + (int64_t)h_kv * p.a.D * p.vt_cols + fp8_vt_seq_col0(p.a, s, b)
                         : (const char *)p.v + (b * p.v_bs + s.k_row0 * p.v_rs + h_kv * p.v_hs) * ES;

    // --- key blocks this query block needs (causal / window skip whole blocks) -------------------
    int nb_min, nb_max, full_lo, full_hi;
    key_blocks_of_rows(p.a, s, m0, m_rows, BN, &nb_min, &nb_max, &full_lo, &full_hi);

    const float slope = p.a.alibi ? p.a.alibi[b * p.a.alibi_bs + h] : 0.f;
    const float sl2 = p.a.transform ? 1.f : p.a.scale_log2;

    // --- init: m_i = -inf, l_i = 0, O_i = 0        (Alg. 1 line 6) ------------------------------
    float O[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) O[i] = 0.f;
    float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.f, 0.f};

    if (nb_max > nb_min) {
        const int n_blocks = nb_max - nb_min; // key blocks (groups 0 .. n_blocks exist)
        if (PP) {
            if (tid == 0) {
#pragma unroll
                for (int i = 0; i < STAGES; i++) {
                    mbar_init(full0 + 8 * i, NTHREADS);
                    mbar_init(empty0 + 8 * i, NWG);
                }
                fence_mbarrier_init();
            }
            __syncthreads();
            if (wg == NWG - 1) bar_arrive(8, 256); // warpgroup 0 issues first
        }
        // prologue: Q_i, K_0 .. K_STAGES-2, V_0 .. V_STAGES-3 (block t is nb_max - 1 - t), one
        // commit group per t so that group t holds K_t and V_t-1
        sm90_load_rows<T, BM, D, NTHREADS>(sQ, Qg, p.q_rs, m_rows, p.a.D, p.q, tid);
#pragma unroll
        for (int t = 0; t < STAGES - 1; t++) {
            const int n0 = (nb_max - 1 - t) * BN;
            if (n0 >= nb_min * BN)
                sm90_load_rows<T, BN, D, NTHREADS>(sK0 + t * KV_BYTES, Kg + (int64_t)n0 * p.k_rs * ES, p.k_rs,
                                                   s.sk - n0, p.a.D, p.k, tid);
            if (t > 0 && n0 + BN >= nb_min * BN)
                sm90_load_v<T, D, BN, NTHREADS>(p, sV0 + (t - 1) * KV_BYTES, Vg, n0 + BN, s.sk, tid);
            if (!PP) cp_async_commit();
            else if (t <= n_blocks) cp_async_mbar_arrive(full0 + 8 * t);
        }

        uint32_t P[BN * ES / 32][4]; // P_ij as the A operand of the next PV (sm90_pack_p)
        int t = 0;
        int st = 0, ph = 0; // t % STAGES: buffer of K_t and V_t; (t / STAGES) & 1: its mbarrier phase
        // --- for each key block j, right to left (masked diagonal blocks of causal first) -------
        for (int nb = nb_max - 1; nb >= nb_min; nb--, t++, ph ^= st == STAGES - 1, st = st == STAGES - 1 ? 0 : st + 1) {
            const int n0 = nb * BN;
            const uint32_t sK = sK0 + st * KV_BYTES;
            if (PP) {
                mbar_wait(full0 + 8 * st, ph); // K_t and V_t-1 landed
                fence_proxy_async_smem();
            } else {
                cp_async_wait<STAGES - 2>();
                fence_proxy_async_smem();
                __syncthreads(); // K_t and V_t-1 landed; every warpgroup is done with the buffers refilled below
            }
            if (!PP) {
                const int sk1 = st == 0 ? STAGES - 1 : st - 1;  // (t + STAGES - 1) % STAGES
                const int sv1 = sk1 == 0 ? STAGES - 1 : sk1 - 1; // (t + STAGES - 2) % STAGES
                const int n1 = n0 - (STAGES - 1) * BN, nv = n1 + BN;
                if (n1 >= nb_min * BN)
                    sm90_load_rows<T, BN, D, NTHREADS>(sK0 + sk1 * KV_BYTES, Kg + (int64_t)n1 * p.k_rs * ES, p.k_rs,
                                                       s.sk - n1, p.a.D, p.k, tid);
                if (nv >= nb_min * BN) sm90_load_v<T, D, BN, NTHREADS>(p, sV0 + sv1 * KV_BYTES, Vg, nv, s.sk, tid);
                cp_async_commit();
            }

            // S_ij = Q_i K_j^T (line 8), then O_i += P_i,j-1 V_j-1 of the previous block
            float S[BN / 2];
            if (PP) bar_sync(8 + wg, 256); // the previous warpgroup has issued its wgmmas
            wgmma_fence();
            sm90_issue_qk<T, D, BM, BN>(S, sQ, sK, wg);
            if (t > 0) {
                sm90_issue_pv<T, D, BN>(O, P, sV0 + (st == 0 ? STAGES - 1 : st - 1) * KV_BYTES);
                if (PP) bar_arrive(8 + (wg + 1) % NWG, 256); // the next warpgroup may issue
                wgmma_wait<1>();
            } else {
                if (PP) bar_arrive(8 + (wg + 1) % NWG, 256);
                wgmma_wait<0>();
            }
#pragma unroll
            for (int i = 0; i < BN / 2; i++) reg_fence(S[i]);

            const int row0 = m0 + trow, col0 = n0 + 2 * (lane & 3);
            if (p.a.transform) sm90_scores_transform<BN>(S, p.a, slope, row0 + s.sk - s.sq, col0);
            if (!(n0 >= full_lo && n0 + BN <= full_hi)) sm90_scores_mask<BN>(S, p.a, s, row0, col0);

            float alpha[2] = {1.f, 1.f};
            const bool rescale = sm90_softmax<T, BN>(S, m_i, l_i, alpha, sl2);

            if (PP) { // load K_t+STAGES-1, V_t+STAGES-2 into the slot every warpgroup released after block t - 1
                const int sk1 = st == 0 ? STAGES - 1 : st - 1;
                const int sv1 = sk1 == 0 ? STAGES - 1 : sk1 - 1;
                const int n1 = n0 - (STAGES - 1) * BN, nv = n1 + BN;
                if (nv >= nb_min * BN) { // group t + STAGES - 1 <= T exists
                    if (t > 0) mbar_wait(empty0 + 8 * sk1, st == 0 ? ph ^ 1 : ph);
                    if (n1 >= nb_min * BN)
                        sm90_load_rows<T, BN, D, NTHREADS>(sK0 + sk1 * KV_BYTES, Kg + (int64_t)n1 * p.k_rs * ES,
                                                           p.k_rs, s.sk - n1, p.a.D, p.k, tid);
                    sm90_load_v<T, D, BN, NTHREADS>(p, sV0 + sv1 * KV_BYTES, Vg, nv, s.sk, tid);
                    cp_async_mbar_arrive(full0 + 8 * sk1);
                }
            }

            // the previous PV is done: O_i may be rescaled and P may be overwritten
            wgmma_wait<0>();
            if (PP && (tid & 127) == 0) mbar_arrive(empty0 + 8 * st); // this warpgroup is done with K_t, V_t-1
            sm90_rescale_pack<T, D, BN>(O, P, S, rescale, alpha);
        }

        // the last O_i += P V
        if (PP) {
            mbar_wait(full0 + 8 * st, ph);
            fence_proxy_async_smem();
            bar_sync(8 + wg, 256);
        } else {
            cp_async_wait<0>();
            fence_proxy_async_smem();
            __syncthreads();
        }
        wgmma_fence();
        sm90_issue_pv<T, D, BN>(O, P, sV0 + (st == 0 ? STAGES - 1 : st - 1) * KV_BYTES);
        if (PP && wg != NWG - 1) bar_arrive(8 + wg + 1, 256);
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < D / 2; i++) reg_fence(O[i]);
    }

    // --- epilogue: O_i = O_i / l_i; L_i = m_i + log(l_i)    (lines 12-13) -------------------------
    sm90_fwd_store<T, D, BM>(p, s, b, h, m0, wg, O, m_i, l_i, sQ);
#endif
}

// ------------------------------------------------------------------------------------------------
// the warp-specialized kernel (FA3's structure, HOPPER-NOTES 6): warpgroup 0 is the producer, one
// thread of it issues every load by TMA (Q_i once, then K_j and V_j per key block into rings of
// STAGES buffers, each buffer with a full and an empty mbarrier); warpgroups 1..NWG are the
// consumers of the ping-pong loop above, each owning 64 query rows. setmaxnreg moves registers
// from the producer (which needs ~20) to the consumers. The loaders compute no addresses and
// issue no cp.async, so the consumers spend their issue slots on wgmma and the softmax only.
// The producer runs K one block ahead of V (K_j is read one step before V_j):
//   K_0, then for each j >= 1: K_j (buffer freed by S of block j - STAGES), V_j-1 (freed by PV of
//   block j - 1 - STAGES); then the last V.
// TMA zero-fills rows past the tensor's extent and head-dim columns past p.a.D, so the batch-mode
// bf16/f16 maps need nothing else. Rows inside the tensor but past the sequence (varlen: the next
// sequence; seqused_k: an unused cache tail) would reach V_j with P_ij = 0, where an Inf or NaN
// there would still poison O: K_j past the end is masked, and the one V_j holding the end comes
// by cp.async, zero past it (sm90_fwd_ragged_v). e4m3 reads V^T, zero past every sequence
// (flashc_fp8_vt_kernel writes FP8_VT_GAP columns of zeros).

typedef struct flashc_sm90_maps {
    CUtensorMap q, k, v; // v: V, or for e4m3 V^T (the workspace)
    CUtensorMap v64;     // e4m3 with BN an odd multiple of 64: V^T in 64-byte boxes (the 64B swizzle)
    CUtensorMap o;       // O in 64-row boxes, when o_tma
    int o_tma;           // the consumers store O_i by TMA from shared memory (sm90_fwd_store_tma)
} flashc_sm90_maps;

// 4 x 4 transpose of 32-bit words within each quad of lanes: lane j holds w[k] = M[j][k] and
// gets M[k][j] (one exchange with lane j ^ 1, then with lane j ^ 2; 4 shuffles).
static __device__ __forceinline__ void quad_transpose4(uint32_t *w, int j) {
#pragma unroll
    for (int x = 1; x <= 2; x *= 2) {
        const bool up = j & x;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (k & x) continue; // the pair (k, k + x)
            const uint32_t got = __shfl_xor_sync(0xffffffffu, up ? w[k] : w[k + x], x);
            if (up) w[k] = got;
            else w[k + x] = got;
        }
    }
}

// Epilogue of consumer warpgroup wg from registers: O_i / l_i and L_i straight to global memory,
// where the CTA has no room for an O tile beside Q_i and the rings (D = 256, and D = 128 on 3
// stages) or TMA cannot store O (varlen, O not 128-byte aligned, strides a map cannot encode); else
// sm90_fwd_store_tma. (The persistent kernel cannot stage O_i in the Q tile, which already
// receives the next tile's Q_i.) A quad's 4 lanes hold 2 columns each of every 8: a quad transpose
// gives each lane 8 contiguous columns, one 16-byte store. H200 (dev/cuda/fwd90_trace.cu, D = 128, S = 512): with a
// 4-byte store per column pair the epilogue took ~4300 of a tile's ~16900 cycles; 16-byte stores,
// one process against them (h200-2026-12-01-s10b-final.txt): S = 512 1.06x / 1.16x at D = 128 / 256
// (causal 1.10x / 1.16x, e4m3 D = 256 1.17-1.20x), S = 2048 1.02-1.10x, 16384 0.98-1.02x; but
// causal D = 64, S = 512 0.95x.
template <typename T, int D, int BM>
static __device__ __forceinline__ void sm90_fwd_store_regs(const flashc_fwd_params &p, const flashc_cuda_seq &s, int b,
                                                           int h, int m0, int wg, const float *O, const float *m_i,
                                                           const float *l_i) {
    const int t128 = threadIdx.x & 127, lane = t128 & 31, j = lane & 3;
    const int trow = wg * 64 + (t128 >> 5) * 16 + (lane >> 2);
    const int64_t lse_row0 = sm90_lse_row0(p, s, b, h);
    uint16_t *Og = (uint16_t *)p.o + b * p.o_bs + (s.q_row0 + m0) * p.o_rs + h * p.o_hs;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const sm90_row_end e = sm90_finish_row(p, l_i[r]);
        const int row = trow + 8 * r;
        const bool in = m0 + row < s.sq; // the same for the quad (every lane shuffles)
        uint16_t *orow = Og + (int64_t)row * p.o_rs + 8 * j;
#pragma unroll
        for (int g = 0; g < D / 32; g++) { // columns 32 g .. 32 g + 31
            uint32_t w[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int nt = 4 * g + k;
                w[k] = pack2<typename sm90_elem<T>::out>(sm90_out(O[4 * nt + 2 * r], e), sm90_out(O[4 * nt + 2 * r + 1], e));
            }
            quad_transpose4(w, j); // lane j: columns 32 g + 8 j .. + 7
            if (in && 32 * g + 8 * j < p.a.D) // D is a multiple of 8: 8 columns are in or out
                *(uint4 *)(orow + 32 * g) = make_uint4(w[0], w[1], w[2], w[3]);
        }
        if (in && p.lse && j == 0) p.lse[lse_row0 + m0 + row] = row_lse(m_i[r], e.l);
    }
}

// Epilogue of consumer warpgroup wg through shared memory: O_i / l_i into its own 64-row tile at sO,
// in the 128B-swizzled layout of maps.o, by stmatrix (the accumulator layout is stmatrix's: no
// quad transpose), then one thread's TMA store, which runs on while the warpgroup starts its next
// tile; only the next epilogue waits for it to have read sO. Batch mode only (the store clips rows
// at Sq, not at a varlen sequence's end). L_i goes straight to global memory.
// H200, one process against the register stores (dev/cuda/ab.py, h200-2026-12-02-s14.txt call 4),
// S = 512 / 1024 / 2048 / 8192, outputs bit-identical: D = 64 1.02 / 1.02 / 1.01 / 1.01x (causal
// 1.01 / 1.02 / 1.02 / 1.01x), e4m3 D = 128 1.05 / 1.03 / 1.02 / 1.01x (causal 1.04 / 1.03 / 1.02 /
// 1.01x), D = 128 on 2 stages (the only D = 128 tile with room for it) 1.05 / 1.03 / 1.01 / 1.01x
// (causal 1.09 / 1.05 / 1.03 / 1.00x). The same staging written by 16-byte st.shared after the quad
// transposes of sm90_fwd_store_regs (~540 instructions a thread, against ~130 here) ran 0.98-1.01x.
template <typename T, int D>
static __device__ __forceinline__ void sm90_fwd_store_tma(const flashc_fwd_params &p, const CUtensorMap *map_o,
                                                          const flashc_cuda_seq &s, int b, int h, int m0, int wg,
                                                          const float *O, const float *m_i, const float *l_i,
                                                          uint32_t sO) {
    const int t128 = threadIdx.x & 127, lane = t128 & 31, j = lane & 3;
    const int wrow = (t128 >> 5) * 16 + (lane >> 2); // this thread's first row of the warpgroup's 64
    const int64_t lse_row0 = ((int64_t)b * p.a.H + h) * p.a.Sq; // (batch mode: sm90_lse_row0 without cu_q)
    sm90_row_end e[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        e[r] = sm90_finish_row(p, l_i[r]);
        const int row = m0 + 64 * wg + wrow + 8 * r;
        if (p.lse && j == 0 && row < s.sq) p.lse[lse_row0 + row] = row_lse(m_i[r], e[r].l);
    }
    if (t128 == 0) bulk_wait_read<0>(); // the previous tile's store has read sO
    bar_sync(1 + wg, 128);
    // stmatrix k covers columns 16 k .. 16 k + 15 of the warp's 16 rows: matrix i is n-tile 2 k +
    // (i >> 1), rows + 8 (i & 1); lane 8 i + jj addresses its row jj, whose swizzle is jj (the tile is
    // 1024-aligned), so chunk 2 k + (i >> 1) lands at the lane's address XOR (k & 3) << 5.
    const int mi = lane >> 3, mj = lane & 7;
    const uint32_t a0 = sO + ((t128 >> 5) * 16 + mj + 8 * (mi & 1)) * 128 + (((mi >> 1) ^ mj) << 4);
#pragma unroll
    for (int k = 0; k < D / 16; k++) {
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int nt = 2 * k + (i >> 1), rh = i & 1;
            w[i] = pack2<typename sm90_elem<T>::out>(sm90_out(O[4 * nt + 2 * rh], e[rh]), sm90_out(O[4 * nt + 2 * rh + 1], e[rh]));
        }
        stmatrix_x4((a0 ^ ((k & 3) << 5)) + (k >> 2) * (64 * 128), w);
    }
    fence_proxy_async_smem();
    bar_sync(1 + wg, 128);
    if (t128 == 0) {
#pragma unroll
        for (int cb = 0; cb < D * 2 / 128; cb++) tma_store_4d(map_o, sO + cb * 64 * 128, 64 * cb, m0 + 64 * wg, h, b);
        bulk_commit();
    }
}

// RAGGED kernel instances (bf16/f16 varlen or seqused_k): whether tile w's first key block (block
// nb_max - 1: blocks run right to left) holds the sequence's end, so that its V_j is loaded as below.
template <int BN>
static __device__ __forceinline__ bool sm90_fwd_ragged_v0(const sm90_fwd_work &w) { return w.nb_max * BN > w.s.sk; }

// That V_0 into ring slot st by the producer's second warp, once thread 0 has seen the slot released
// (both meet on named barrier RAGGED_BAR; the second warp never waits on anything else, so it is
// always there): rows past the sequence's end zero (sm90_load_v's cp.async zero-fill), completing on
// full[st]. Each lane's cp.async.mbarrier.arrive raises the pending count now and lowers it when its
// loads land; lane 0 then gives the one arrival the phase was initialised with.
#define RAGGED_BAR 5
template <typename T, int D, int BN>
static __device__ __forceinline__ void sm90_fwd_ragged_v(const flashc_fwd_params &p, const sm90_fwd_work &w, int st,
                                                         uint32_t sV0, uint32_t fullV, int lane) {
    const char *Vg = (const char *)p.v + (w.b * p.v_bs + w.s.k_row0 * p.v_rs + (int64_t)(w.h / p.a.group) * p.v_hs) * 2;
    bar_sync(RAGGED_BAR, 64);
    sm90_load_v<T, D, BN, 32>(p, sV0 + st * BN * D * 2, Vg, (w.nb_max - 1) * BN, w.s.sk, lane);
    cp_async_mbar_arrive_inc(fullV + 8 * st);
    __syncwarp(); // every lane's count is raised before lane 0 arrives
    if (lane == 0) mbar_arrive(fullV + 8 * st);
}

// The second warp's walk: the same units as thread 0, the same key-block count kv, and the ragged
// V_0 of each tile that has one; its last loads land before it exits.
template <typename T, int D, int BM, int BN, int STAGES>
static __device__ __forceinline__ void sm90_fwd_ragged_warp(const flashc_fwd_params &p, int n_units, uint32_t sV0,
                                                            uint32_t fullV, int lane) {
    for (int unit = sm90_fwd_unit_first(p), kv = 0; unit < n_units; unit = sm90_fwd_unit_next(p, unit)) {
        sm90_fwd_work w;
        if (!sm90_fwd_work_of<BM, BN, true>(p, unit, &w) || w.nb_max <= w.nb_min) continue;
        if (sm90_fwd_ragged_v0<BN>(w)) sm90_fwd_ragged_v<T, D, BN>(p, w, kv % STAGES, sV0, fullV, lane);
        kv += w.nb_max - w.nb_min;
    }
    cp_async_commit();
    cp_async_wait<0>();
}

// Persistent: gridDim.x CTAs (one per SM) walk the units of sm90_fwd_unit (tiles, or pairs of
// tiles that balance causal work) with a stride of gridDim.x, so a CTA's next Q_i and first K_j, V_j
// load while its consumers finish the previous tile. Every ring counter runs on across tiles; Q_i
// has its own full / empty pair (empty once every consumer thread's last S_ij of the tile is done,
// or, with Q_i in registers (QR), once every consumer thread has loaded them, or once it has read a
// record with no key blocks).
// The producer alone walks the units: with each Q_i it posts the tile's sm90_fwd_work (a record,
// two slots by parity) on the same full barrier, and a tile with no key blocks gets a record
// without Q_i, so that the consumers take their tiles from the records (until one with b = -1)
// instead of each deriving the tile order's divisions again at the top of every tile and in the
// epilogue (the D = 64 short-row kernel, SASS here: 441 -> 280 instructions from the last PV to the
// TMA store). Every consumer thread releases the slot (with one thread a warpgroup, racecheck saw
// the other threads' reads of a record as racing the producer's next write: call 3). H200, one
// process against deriving them (h200-2026-12-02-s17.txt call 4), outputs bit-identical: S = 512
// D = 64 1.03x (causal 1.11x), D = 128 1.05x (1.07x), D = 256 1.01x (1.03x), e4m3 D = 128 1.05x
// (1.07x); S = 2048 1.00-1.06x; S = 16384 0.99-1.02x. (A record with no key blocks holds the Q slot
// until every consumer has read it, so the next tile's loads wait for the previous epilogue:
// masked tiles only.)
// The consumers take turns issuing wgmmas (named barriers 8 + c; not at e4m3, TURNS below), across
// tiles too: the last consumer hands consumer 0 the next tile's first turn right after its last PV,
// so that consumer 0's first S_ij runs under the others' last PV and epilogue. H200, one process (dev/cuda/ab.py,
// bench/results/h200-2026-12-01-s9-fwd-early.txt), against handing it over after the epilogue:
// 1.00-1.09x at S = 512-2048 (causal D = 64 1.04-1.09x, e4m3 D = 128 1.02-1.05x), 0.98-1.02x at
// 4096-16384. (A second Q_i slot, so that the producer runs a whole tile ahead, showed nothing in
// the lab: h200-2026-12-01-s9-own.txt.)
template <typename T, int D, int NWG, int BN, int STAGES, int O_BYTES, bool RAGGED, bool SPLIT = false>
__global__ void __launch_bounds__((NWG + 1) * 128, 1)
    flashc_fwd_sm90_ws_kernel(const __grid_constant__ flashc_fwd_params p, const __grid_constant__ flashc_sm90_maps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = NWG * 64, ES = sm90_elem<T>::ES;
    constexpr bool FP8 = sm90_elem<T>::FP8;
    // The consumers take turns issuing their wgmmas (FA3's ping-pong: named barriers 8 + c), but not
    // at e4m3, where a key block's softmax (~1.9k cycles, fwd90_trace --steps) outlasts the other
    // consumer's GEMMs (768 tensor clocks at D = 128; NOTES s42), so turns only add waits: H100,
    // one process against the turns, bench/results/h100-2026-12-06-s42.txt calls 11-12, D = 128
    // 1.008-1.014x (12 of 12 rows, S 1k-16k, causal and not), D = 256 0.999-1.007x
    // (racecheck and memcheck clean, s43). At bf16 / f16 the turns pay: without them D = 64 read
    // 0.90-1.03x (ptxas spilled 204 bytes in the 3-consumer tile), D = 128 0.98-1.01x
    // (bench/results/h100-2026-12-06-s43.txt call 1).
    constexpr bool TURNS = !FP8;
    // Q_i in registers: S = Q_i K_j^T reads only K_j from shared memory (wgmma_rs_k; per k-step 4 KB
    // instead of 6), and the Q slot is free for the next Q_i from the tile's start. H200, one process
    // against SS (bench/results/h200-2026-12-03-s26.txt call 6, outputs bit-identical): D = 128
    // 1.004-1.013x (S = 512-16k; non-causal 16k 0.998), D = 64 causal 1.007 / 1.015 / 1.029x at S =
    // 512 / 1024 / 2048. Not at NWG = 3 (its 16 more registers a thread at D = 64 made ptxas spill 96
    // bytes and serialise the wgmmas, C7512), nor at D = 256 (64 more), nor e4m3 (tried at D = 128,
    // both tiles: 0.996-1.018x, noise, s26.txt call 10).
    constexpr bool QR = !FP8 && NWG == 2 && BN == 128 && D <= 128;
    // registers per thread (HOPPER-NOTES 5): 168 at entry with 384 threads, 128 with 512
    constexpr int PRODUCER_REGS = NWG == 2 ? 24 : 32, CONSUMER_REGS = NWG == 2 ? 240 : 160;
    constexpr uint32_t Q_BYTES = BM * D * 2, KV_BYTES = BN * D * ES;
    static_assert(NWG == 2 || NWG == 3, "consumer warpgroups");
    static_assert(D * ES % 128 == 0 && BN % 16 == 0 && Q_BYTES % 1024 == 0 && KV_BYTES % 1024 == 0, "tile shape");
    static_assert(!FP8 || (BN % 64 == 0 && BN <= FP8_VT_TILE), "fp8: V^T rows of BN bytes fill 128- and 64-byte swizzle rows");

    const uint32_t base = (smem_u32(flashc_smem) + 1023u) & ~1023u;
    const uint32_t sQ = base, sK0 = sQ + Q_BYTES, sV0 = sK0 + STAGES * KV_BYTES, sO = sV0 + STAGES * KV_BYTES;
    const uint32_t fullQ = sO + O_BYTES, emptyQ = fullQ + 8, fullK = emptyQ + 8, fullV = fullK + 8 * STAGES,
                   emptyK = fullV + 8 * STAGES, emptyV = emptyK + 8 * STAGES, sWork = emptyV + 8 * STAGES;
    static_assert(16 + 32 * STAGES + 2 * sizeof(sm90_fwd_work) + 2 * sizeof(int2) <= 256,
                  "barriers, records and pieces: the 256 bytes of smem_of");
    sm90_fwd_work *const work_slot = (sm90_fwd_work *)((char *)flashc_smem + (sWork - smem_u32(flashc_smem)));
    int2 *const piece_slot = (int2 *)(work_slot + 2); // SPLIT: each record's (split, piece)
    const int tid = threadIdx.x, wg = warpgroup_uniform(0);
    const int n_units = (p.tile_pairs ? (p.n_m_blocks + 1) / 2 * 2 : p.n_m_blocks) * p.a.B * p.a.H;

    if (tid == 0) { // Q and the records: a ring of one slot, released by every consumer thread
        ring_init(fullQ, emptyQ, 1, NWG * 128);
        ring_init(fullK, emptyK, STAGES, NWG);
        ring_init(fullV, emptyV, STAGES, NWG);
        fence_mbarrier_init();
    }
    __syncthreads();

    // RAGGED (bf16/f16 varlen or seqused_k; its own instance, so that batch mode runs the code it ran
    // before): rows of V past a sequence's end inside the tensor (the next sequence; the cache's
    // unused tail) would reach O_i as P_ij = 0 times whatever they hold (0 * Inf = NaN), so the key
    // block holding the end (the first of a tile: blocks run right to left) takes V_j by cp.async,
    // zero past the end, from the producer's second warp. (e4m3 reads V^T, zero there.)
    static_assert(!(FP8 && RAGGED), "e4m3 needs no ragged V");

    if (wg == 0) { // --- producer ---------------------------------------------------------------
        reg_dealloc<PRODUCER_REGS>();
        // Thread 0 issues every TMA load and runs the rings. If RAGGED, the second warp walks the
        // same units and loads each ragged V_0 when thread 0 hands it the slot (sm90_fwd_ragged_v).
        if (tid != 0) {
            if constexpr (RAGGED)
                if (tid >= 32 && tid < 64) sm90_fwd_ragged_warp<T, D, BM, BN, STAGES>(p, n_units, sV0, fullV, tid - 32);
            return;
        }
        tma_prefetch_map(&maps.q);
        tma_prefetch_map(&maps.k);
        tma_prefetch_map(&maps.v);
        if constexpr (FP8 && BN % 128) tma_prefetch_map(&maps.v64);
        int kv = 0, qi = 0, rec = 0; // key blocks, Q tiles and records posted so far
        // stream-K: whole rounds of tiles as before, then this CTA's run [u, u_end) of the key blocks
        // of the last tail tiles (one to two rounds' worth, so that concurrent CTAs keep to neighbouring
        // tiles, whose K_j, V_j L2 holds), from tile tile0 on (sm90_fwd_piece)
        const bool split = SPLIT && p.sk_split; // (the launcher picks SPLIT with sk_split)
        const int items = p.tile_pairs ? n_units / 2 : n_units; // (pairs: M even, no empty member)
        const int item0 = split ? (items / (int)gridDim.x - 1) * (int)gridDim.x : items;
        const int unit0 = !split ? n_units : p.tile_pairs ? 2 * item0 : item0; // the tail's first unit
        const int64_t U = (int64_t)(items - item0) * p.nb_tile;
        int64_t u = (int64_t)blockIdx.x * U / gridDim.x;
        const int64_t u_end = ((int64_t)blockIdx.x + 1) * U / gridDim.x;
        for (int unit = sm90_fwd_unit_first(p); unit < unit0 || (split && u < u_end); unit = sm90_fwd_unit_next(p, unit)) {
            sm90_fwd_work w;
            int2 piece = make_int2(-1, 0);
            if (SPLIT && unit >= unit0) sm90_fwd_piece<BM, BN>(p, item0, &u, u_end, &w, &piece);
            else if (!sm90_fwd_work_of<BM, BN, RAGGED>(p, unit, &w)) continue;
            const int nb_max = w.nb_max, n_blocks = w.nb_max - w.nb_min;
            // the tile's record, and Q_i where it has key blocks (after the consumers are done with
            // the previous Q_i and with the record two back, which shared this slot)
            FLASHC_FWD_TRACE(0, qi, 0);
            mbar_wait(emptyQ, (rec & 1) ^ 1);
            work_slot[rec & 1] = w;
            if (SPLIT) piece_slot[rec & 1] = piece;
            rec++;
            if (n_blocks <= 0) { // nothing to load: the consumers store O = 0, lse = +inf
                mbar_arrive(fullQ);
                continue;
            }
            mbar_expect_tx(fullQ, BM * D * ES);
            qi++;
            FLASHC_FWD_TRACE(0, qi - 1, 1);
            // batch mode: coordinates (column, row, head, batch); varlen: rows are packed
            const int h_kv = w.h / p.a.group, qb = p.a.cu_q ? 0 : w.b, k_r0 = (int)w.s.k_row0;
            const int v_c0 = FP8 ? (int)fp8_vt_seq_col0(p.a, w.s, w.b) : 0;
            const bool v0_cp = RAGGED && sm90_fwd_ragged_v0<BN>(w);
            sm90_tma_rows<BM, D * ES, ES>(sQ, &maps.q, 0, (int)w.s.q_row0 + w.m0, w.h, qb, fullQ);
            for (int t = 0; t <= n_blocks; t++) {
                if (t < n_blocks) { // K_t
                    const int u = kv + t, st = u % STAGES;
                    const uint32_t bar = ring_acquire(fullK, emptyK, u, STAGES, KV_BYTES);
                    sm90_tma_rows<BN, D * ES, ES>(sK0 + st * KV_BYTES, &maps.k, 0, k_r0 + (nb_max - 1 - t) * BN, h_kv,
                                                  qb, bar);
                }
                if (t == 1 && v0_cp) { // V_0 (block nb_max - 1) holds the end
                    mbar_wait(emptyV + 8 * (kv % STAGES), ((kv / STAGES) & 1) ^ 1);
                    // the slot is free: the second warp loads it. A sync, not an arrive: two arrivals of
                    // this warp (tiles of one key block back to back) would complete the barrier alone
                    bar_sync(RAGGED_BAR, 64);
                } else if (t > 0) { // V_t-1
                    const int u = kv + t - 1, st = u % STAGES, n0 = (nb_max - t) * BN;
                    const uint32_t bar = ring_acquire(fullV, emptyV, u, STAGES, KV_BYTES);
                    if constexpr (FP8) { // V^T: D rows of BN keys (128-byte column blocks, then 64 keys)
                        sm90_tma_rows<D, BN / 128 * 128, 1>(sV0 + st * KV_BYTES, &maps.v, v_c0 + n0, 0, h_kv, 0, bar);
                        if constexpr (BN % 128)
                            tma_load_4d(sV0 + st * KV_BYTES + BN / 128 * D * 128, &maps.v64, v_c0 + n0 + BN / 128 * 128, 0,
                                        h_kv, 0, bar);
                    } else
                        sm90_tma_rows<BN, D * 2, 2>(sV0 + st * KV_BYTES, &maps.v, 0, k_r0 + n0, h_kv, qb, bar);
                }
            }
            FLASHC_FWD_TRACE(0, qi - 1, 2);
            kv += n_blocks;
        }
        mbar_wait(emptyQ, (rec & 1) ^ 1); // the end: a record with b = -1
        work_slot[rec & 1].b = -1;
        mbar_arrive(fullQ);
        return;
    }

    // --- consumers: warpgroup c owns rows 64 c .. 64 c + 63 of each tile -----------------------------
    reg_alloc<CONSUMER_REGS>();
    const int c = wg - 1, lane = tid & 31, warp = (tid >> 5) & 3;
    const int trow = c * 64 + warp * 16 + (lane >> 2), lane_col = 2 * (lane & 3);
    int kv = 0, qi = 0; // key blocks and Q tiles consumed
    for (int rec = 0;; rec++) { // the producer's records, one per tile, until b = -1
        FLASHC_FWD_TRACE(1 + c, qi, 0);
        mbar_wait(fullQ, rec & 1);
        const sm90_fwd_work w = work_slot[rec & 1];
        if (w.b < 0) break;
        const flashc_cuda_seq &s = w.s;
        const int b = w.b, h = w.h, m0 = w.m0, nb_max = w.nb_max, full_lo = w.full_lo, full_hi = w.full_hi;
        const int n_blocks = nb_max - w.nb_min;
        const float slope = p.a.alibi ? p.a.alibi[b * p.a.alibi_bs + h] : 0.f;
        const float sl2 = p.a.transform ? 1.f : p.a.scale_log2;
        const int row0 = m0 + trow;
        const bool v0_cp = RAGGED && sm90_fwd_ragged_v0<BN>(w); // V_0 came by cp.async (generic proxy)

        float O[D / 2];
#pragma unroll
        for (int i = 0; i < D / 2; i++) O[i] = 0.f;
        float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.f, 0.f};

        if (n_blocks > 0) {
            uint32_t P[BN * ES / 32][4]; // P_ij as the A operand of the next PV (sm90_pack_p)
            uint32_t Qa[QR ? D / 16 : 1][4];
            if constexpr (QR) {
                sm90_load_afrag<D, BM>(Qa, sQ, 64 * c, warp, lane);
                mbar_arrive(emptyQ); // Q_i is in registers (every thread: it has read the record too)
            }
            if (TURNS && c == NWG - 1 && qi == 0) bar_arrive(8, 256); // consumer 0 issues first
            FLASHC_FWD_TRACE(1 + c, qi, 1);
            qi++;

            // S_ij = Q_i K_j^T, masked; for t > 0 the PV of block t - 1 runs under this block's softmax
            for (int t = 0; t < n_blocks; t++) {
                const int st = (kv + t) % STAGES, ph = ((kv + t) / STAGES) & 1;
                const int pst = (kv + t - 1) % STAGES, pph = ((kv + t - 1) / STAGES) & 1; // block t - 1 (t > 0)
                const int n0 = (nb_max - 1 - t) * BN;
                float S[BN / 2];
                FLASHC_FWD_STEP(c, qi - 1, t, 0);
                mbar_wait(fullK + 8 * st, ph);
                FLASHC_FWD_STEP(c, qi - 1, t, 1);
                if (t == 1 && v0_cp) { // V_0 landed by cp.async: visible to this thread's wgmma (no wgmma in flight here)
                    mbar_wait(fullV + 8 * pst, pph);
                    fence_proxy_async_smem();
                }
                if (t == 0) FLASHC_FWD_TRACE(1 + c, qi - 1, 7);
                if (TURNS) bar_sync(8 + c, 256); // the previous consumer has issued its wgmmas
                FLASHC_FWD_STEP(c, qi - 1, t, 2);
                wgmma_fence();
                if (t == 0) FLASHC_FWD_TRACE(1 + c, qi - 1, 2);
                if constexpr (QR)
                    sm90_issue_rs_k<T, D, BN>(S, Qa, sK0 + st * KV_BYTES, BN, 0); // Q_i held
                else
                    sm90_issue_qk<T, D, BM, BN>(S, sQ, sK0 + st * KV_BYTES, c);
                if (t > 0) {
                    mbar_wait(fullV + 8 * pst, pph);
                    sm90_issue_pv<T, D, BN>(O, P, sV0 + pst * KV_BYTES);
                    if (TURNS) bar_arrive(8 + (c + 1) % NWG, 256); // the next consumer may issue
                    wgmma_wait<1>();
                } else {
                    if (TURNS) bar_arrive(8 + (c + 1) % NWG, 256);
                    wgmma_wait<0>();
                }
                if (t == 0) FLASHC_FWD_TRACE(1 + c, qi - 1, 3);
                FLASHC_FWD_STEP(c, qi - 1, t, 3);
                if ((tid & 127) == 0) mbar_arrive(emptyK + 8 * st); // S_ij is done with K_j
                // ... and this was the tile's last read of Q_i: the next Q_i may land in sQ (so this
                // kernel never stages O_i there: sm90_fwd_store_tma has its own O tile). Every thread
                // arrives: each has read the records up to this one (ordered for racecheck too).
                if (!QR && t == n_blocks - 1) mbar_arrive(emptyQ);
#pragma unroll
                for (int i = 0; i < BN / 2; i++) reg_fence(S[i]);

                if (p.a.transform) sm90_scores_transform<BN>(S, p.a, slope, row0 + s.sk - s.sq, n0 + lane_col);
                if (!(n0 >= full_lo && n0 + BN <= full_hi)) sm90_scores_mask<BN>(S, p.a, s, row0, n0 + lane_col);
                float alpha[2] = {1.f, 1.f};
                const bool rescale = sm90_softmax<T, BN>(S, m_i, l_i, alpha, sl2);
                FLASHC_FWD_STEP(c, qi - 1, t, 4);

                wgmma_wait<0>(); // the PV of block t - 1 is done: O_i may be rescaled, P overwritten
                FLASHC_FWD_STEP(c, qi - 1, t, 5);
                if (t > 0 && (tid & 127) == 0) mbar_arrive(emptyV + 8 * pst);
                sm90_rescale_pack<T, D, BN>(O, P, S, rescale, alpha);
                FLASHC_FWD_STEP(c, qi - 1, t, 6);
            }

            FLASHC_FWD_TRACE(1 + c, qi - 1, 4);
            // the last O_i += P V
            const int lst = (kv + n_blocks - 1) % STAGES, lph = ((kv + n_blocks - 1) / STAGES) & 1;
            mbar_wait(fullV + 8 * lst, lph);
            if (n_blocks == 1 && v0_cp) fence_proxy_async_smem();
            if (TURNS) bar_sync(8 + c, 256);
            wgmma_fence();
            sm90_issue_pv<T, D, BN>(O, P, sV0 + lst * KV_BYTES);
            if (TURNS) bar_arrive(8 + (c + 1) % NWG, 256); // the last consumer: to consumer 0, for the next tile
            wgmma_wait<0>();
            if ((tid & 127) == 0) mbar_arrive(emptyV + 8 * lst);
            FLASHC_FWD_TRACE(1 + c, qi - 1, 5);
#pragma unroll
            for (int i = 0; i < D / 2; i++) reg_fence(O[i]);
            kv += n_blocks;
        } else {
            mbar_arrive(emptyQ); // no Q_i: the record is read
        }
        // the tile's record again rather than kept live through the loop (registers: without this,
        // D = 64 with 3 consumers and e4m3 D = 256 spilled ~100 bytes); its slot is rewritten only
        // two records on, after every consumer has released the next one
        const sm90_fwd_work w2 = work_slot[rec & 1];
        const int2 piece = SPLIT ? piece_slot[rec & 1] : make_int2(-1, 0);
        if (SPLIT && piece.x >= 0) { // a piece of a split tile: the second stores the tile, from registers
            if (sm90_fwd_merge<D, NWG>(p, piece.x, piece.y, c, O, m_i, l_i))
                sm90_fwd_store_regs<T, D, BM>(p, w2.s, w2.b, w2.h, w2.m0, c, O, m_i, l_i);
        } else if (O_BYTES > 0 && maps.o_tma)
            sm90_fwd_store_tma<T, D>(p, &maps.o, w2.s, w2.b, w2.h, w2.m0, c, O, m_i, l_i, sO + c * 64 * D * 2);
        else
            sm90_fwd_store_regs<T, D, BM>(p, w2.s, w2.b, w2.h, w2.m0, c, O, m_i, l_i);
        FLASHC_FWD_TRACE(1 + c, qi - 1, 6);
    }
    if (TURNS && c == 0 && qi > 0) bar_sync(8, 256); // the last consumer's hand-over after the last tile
    if (O_BYTES > 0 && (tid & 127) == 0) bulk_wait_all(); // this warpgroup's last O_i store is done
#endif
}

// ------------------------------------------------------------------------------------------------
// the fp8 V^T: one CTA per (32-key group, kv head, sequence) transposes 32 keys x D bytes through
// shared memory and writes D rows of 32 bytes, keys in the order of fp8_key_of_slot, zeros past the
// sequence's end, and FP8_VT_TILE / 32 more groups of zeros after its last (fp8_vt_col0: the
// kernels' V^T tiles read up to BN - 1 columns past the end). Reads and writes V once (32 MB each
// at B * S = 16k, H_kv = 16, D = 128). H200 (dev/cuda/kernel_times.py --e4m3,
// bench/results/h200-2026-12-02-s20.txt call 4): 25 us at S = 4096, 4% of that e4m3 forward, 21% at
// S = 512. One CTA per 128 keys (256 threads, 4 dims x 16 keys a thread as words through byte
// permutes, every load issued before the first store) took 43 / 57 us: not kept.

template <typename T> // T = __nv_fp8_e4m3 (a template only so that each instance file has its own)
__global__ void __launch_bounds__(128) flashc_fp8_vt_kernel(const __grid_constant__ flashc_fwd_params p) {
    __shared__ __align__(16) uint8_t tile[32][256 + 16]; // + 16: rows start on different banks
    const int j0 = blockIdx.x * 32, hk = blockIdx.y, b = blockIdx.z, D = p.a.D;
    const flashc_cuda_seq s = cuda_seq(p.a, b);
    if (j0 >= (s.sk_len + 31) / 32 * 32 + FP8_VT_TILE) return;
    const uint8_t *vg = (const uint8_t *)p.v + b * p.v_bs + (s.k_row0 + j0) * p.v_rs + hk * p.v_hs;
    for (int i = threadIdx.x; i < 32 * D / 16; i += 128) {
        const int r = i / (D / 16), c = i % (D / 16);
        *(uint4 *)&tile[r][16 * c] = j0 + r < s.sk ? *(const uint4 *)(vg + r * p.v_rs + 16 * c) : make_uint4(0, 0, 0, 0);
    }
    __syncthreads();
    uint8_t *vt = p.vt + (int64_t)hk * D * p.vt_cols + fp8_vt_seq_col0(p.a, s, b) + j0;
    for (int i = threadIdx.x; i < 2 * D; i += 128) {
        const int d = i / 2, half = i % 2;
        uint32_t w[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            w[q] = 0;
#pragma unroll
            for (int e = 0; e < 4; e++) w[q] |= (uint32_t)tile[fp8_key_of_slot(16 * half + 4 * q + e)][d] << (8 * e);
        }
        *(uint4 *)(vt + (int64_t)d * p.vt_cols + 16 * half) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

// ------------------------------------------------------------------------------------------------
// launchers: one per tile shape, and the tuned one per (dtype, D), instantiated in inst/*_sm90.cu

// (batch, head)s per CTA group of the one-CTA-per-tile kernel (the persistent one runs GQA groups:
// sm90_fwd_unit): as many as keep the group's K and V within ~24 MB of the H200's
// 50 MB L2 (all of a group's query blocks run at about the same time and reread the same K/V),
// whole GQA groups at a time. Causal / windowed problems take one group (heaviest query blocks
// first over the whole grid, the mma.sync kernel's order): with groups, each group's heavy
// blocks start late and the last group's make a tail. H200, S = 4096, bf16 (dev/cuda/fwd90_lab.cu),
// grouped vs one group, TFLOP/s: non-causal D = 64 311 vs 307, 128 457 vs 452, 256 484 vs 477;
// causal 64 287 vs 283, 128 427 vs 438, 256 405 vs 459 (the lab's run-to-run noise is ~3%: one
// tile read 467 and 484 in the same run, so only the causal D = 256 gap is clearly real).
// bh_chunk > 0 set by the caller is kept.
static inline int flashc_sm90_bh_chunk(const flashc_fwd_params *p) {
    const long long BH = (long long)p->a.B * p->a.H;
    if (p->a.window_left >= 0 || p->a.window_right >= 0) return (int)BH;
    const long long kv_head = 2LL * p->a.Sk * p->a.D * 2; // K and V bytes of one kv head
    long long n = (24LL << 20) / (kv_head > 0 ? kv_head : 1) * p->a.group;
    n = n < p->a.group ? p->a.group : n;
    return (int)(n > BH ? BH : n < 1 ? 1 : n);
}

// The TMA maps of the warp-specialized kernel; false when the problem needs the cp.async kernel
// (bases not 128-byte aligned) or the driver refuses a map.
template <typename T, int D, int BM, int BN>
static bool flashc_sm90_make_maps(const flashc_fwd_params *p, flashc_sm90_maps *m, bool o_stage) {
    constexpr int ES = sm90_elem<T>::ES;
    const flashc_cuda_attn &a = p->a;
    const bool packed = a.cu_q != NULL;
    // The programming guide asks 128-byte aligned bases of swizzled maps; the driver encodes 16-byte
    // ones, but loads from those were never checked on the H200 (HOPPER-NOTES 3.2, appendix B)
    if (((uintptr_t)p->q | (uintptr_t)p->k | (uintptr_t)(sm90_elem<T>::FP8 ? (const void *)p->vt : p->v)) & 127)
        return false;
    const uint64_t qdim[4] = {(uint64_t)a.D, (uint64_t)(packed ? a.total_q : a.Sq), (uint64_t)a.H, (uint64_t)(packed ? 1 : a.B)};
    const uint64_t kdim[4] = {(uint64_t)a.D, (uint64_t)(packed ? a.total_k : a.Sk), (uint64_t)a.H_kv,
                              (uint64_t)(packed ? 1 : a.B)};
    const int64_t qst[3] = {p->q_rs * ES, p->q_hs * ES, p->q_bs * ES}, kst[3] = {p->k_rs * ES, p->k_hs * ES, p->k_bs * ES};
    if (!sm90_tma_map(&m->q, p->q, ES, qdim, qst, BM) || !sm90_tma_map(&m->k, p->k, ES, kdim, kst, BN)) return false;
    // O by TMA from shared memory: batch mode, a 128-byte aligned base (else the register stores)
    const uint64_t odim[4] = {(uint64_t)a.D, (uint64_t)a.Sq, (uint64_t)a.H, (uint64_t)a.B};
    const int64_t ost[3] = {p->o_rs * 2, p->o_hs * 2, p->o_bs * 2};
    m->o_tma = o_stage && !packed && !((uintptr_t)p->o & 127) && sm90_tma_map(&m->o, p->o, 2, odim, ost, 64);
    if constexpr (sm90_elem<T>::FP8) { // V^T: (vt_cols keys, D rows, H_kv heads), boxes of BN keys x D rows
        if (p->vt_cols > INT32_MAX) return false; // the loader's column is an int: the cp.async kernel instead
        const uint64_t vdim[4] = {(uint64_t)p->vt_cols, (uint64_t)a.D, (uint64_t)a.H_kv, 1};
        const int64_t vst[3] = {p->vt_cols, (int64_t)a.D * p->vt_cols, 16};
        return sm90_tma_map(&m->v, p->vt, 1, vdim, vst, D) && (BN % 128 == 0 || sm90_tma_map(&m->v64, p->vt, 1, vdim, vst, D, 64));
    } else {
        const int64_t vst[3] = {p->v_rs * ES, p->v_hs * ES, p->v_bs * ES};
        return sm90_tma_map(&m->v, p->v, ES, kdim, vst, BN);
    }
}

// LOOP: 0 lockstep, 1 ping-pong (both flashc_fwd_sm90_kernel), 2 warp-specialized with TMA
// (flashc_fwd_sm90_ws_kernel, NWG consumer warpgroups + 1 producer; falls back to ping-pong
// where flashc_sm90_make_maps says no).
template <typename T, int D, int NWG, int BN, int STAGES, int LOOP>
cudaError_t flashc_cuda_fwd_sm90_run(flashc_fwd_params *p, cudaStream_t stream) {
    constexpr int o_bytes = LOOP == 2 ? flashc_cuda_fwd_sm90_o_bytes(NWG * 64, BN, STAGES, D, sm90_elem<T>::ES) : 0;
    constexpr int smem = flashc_cuda_fwd_sm90_smem_of(NWG * 64, BN, STAGES, D, sm90_elem<T>::ES) + o_bytes;
    flashc_sm90_maps maps;
    const bool ragged = !sm90_elem<T>::FP8 && (p->a.cu_q || p->a.seqused_k);
    const bool ws = LOOP == 2 && (!ragged || p->sm90_pp == 3 || flashc_cuda_fwd_sm90_ragged_tma(D, p->a.window_right >= 0, p->a.Sk)) &&
                    flashc_sm90_make_maps<T, D, NWG * 64, BN>(p, &maps, o_bytes > 0);
    // (3 warpgroups without a producer to take registers from spill: the fallback keeps 2)
    if (LOOP == 2 && !ws)
        return flashc_cuda_fwd_sm90_run<T, D, 2, flashc_cuda_fwd_sm90_fallback_bn(BN, sm90_elem<T>::FP8),
                                        flashc_cuda_fwd_sm90_fallback_stages(D, STAGES), flashc_cuda_fwd_sm90_fallback(D)>(p, stream);
    p->n_m_blocks = (p->a.Sq + NWG * 64 - 1) / (NWG * 64);
    const long long blocks = (long long)p->n_m_blocks * p->a.B * p->a.H;
    if (blocks == 0) return cudaSuccess;
    if (blocks > 0x1fffffffLL) return cudaErrorInvalidConfiguration; // (units + 2 gridDim.x stay ints)
    // The persistent kernel runs one GQA group of heads side by side (the others group heads to fit
    // L2) and, where one side of the window is bounded (causal: the work grows with the query block;
    // a left window: it shrinks), pairs query blocks (sm90_fwd_unit) once there are more tiles than
    // CTAs. Where every block has about the same work (no window, or both sides bounded) pairs only
    // lose: an odd M leaves pairs of one tile (non-causal D = 64, S = 512, M = 3: 0.75x).
    p->tile_pairs = ws && p->ctas > 0 && blocks > p->ctas && (p->a.window_left >= 0) != (p->a.window_right >= 0);
    const long long BH = (long long)p->a.B * p->a.H;
    if (p->bh_chunk <= 0) p->bh_chunk = ws ? p->a.group : flashc_sm90_bh_chunk(p); // (group <= H <= B H)
    p->div_chunk = flashc_fastdiv_make((uint32_t)((p->tile_pairs ? (p->n_m_blocks + 1) / 2 : p->n_m_blocks) * p->bh_chunk));
    p->div_heads = flashc_fastdiv_make((uint32_t)p->bh_chunk);
    p->div_H = flashc_fastdiv_make((uint32_t)p->a.H);
    if constexpr (sm90_elem<T>::FP8) { // V^T, and FP8_VT_TILE columns of zeros past each sequence (fp8_vt_col0)
        const dim3 grid((unsigned)((p->a.Sk + 31) / 32 + FP8_VT_TILE / 32), (unsigned)p->a.H_kv, (unsigned)p->a.B);
        flashc_fp8_vt_kernel<T><<<grid, 128, 0, stream>>>(*p);
    }
    if constexpr (LOOP == 2) {
        const long long units = p->tile_pairs ? (long long)(p->n_m_blocks + 1) / 2 * BH : blocks;
        const long long grid = p->ctas > 0 && p->ctas < units ? p->ctas : units; // persistent: one CTA per SM
        // stream-K (sm90_fwd_piece) where the work items do not divide evenly over the grid: tiles
        // that all take every key block (no window), or causal pairs of M + 1 key blocks (Sq = Sk,
        // BM = BN, M even); and the workspace has its area for this grid
        const int M = p->n_m_blocks;
        const bool pairs_even = p->tile_pairs && p->a.window_left < 0 && p->a.window_right == 0 && p->a.Sq == p->a.Sk &&
                                NWG * 64 == BN && M % 2 == 0;
        const long long items = p->tile_pairs ? units : blocks; // (units counts pairs here)
        p->nb_tile = p->tile_pairs ? M + 1 : (p->a.Sk + BN - 1) / BN;
        p->sk_split = p->part != NULL && !ragged && !p->a.cu_q && !p->a.seqused_k && (p->tile_pairs ? pairs_even : p->a.window_left < 0 && p->a.window_right < 0) &&
                      p->a.Sk > 0 && grid == p->ctas && items > grid && items % grid != 0;
        // varlen or seqused_k (bf16/f16): the instance that zeroes V past each sequence; split tiles
        // their own instance, so that the others run the code they ran before
        constexpr bool FP8 = sm90_elem<T>::FP8;
        void (*kernel)(const flashc_fwd_params, const flashc_sm90_maps) =
            ragged         ? flashc_fwd_sm90_ws_kernel<T, D, NWG, BN, STAGES, o_bytes, !FP8>
            : p->sk_split ? flashc_fwd_sm90_ws_kernel<T, D, NWG, BN, STAGES, o_bytes, false, true>
                           : flashc_fwd_sm90_ws_kernel<T, D, NWG, BN, STAGES, o_bytes, false>;
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
        kernel<<<(unsigned)grid, (NWG + 1) * 128, smem, stream>>>(*p, maps);
    } else {
        void (*kernel)(const flashc_fwd_params) = flashc_fwd_sm90_kernel<T, D, NWG, BN, STAGES, LOOP == 1>;
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
        kernel<<<(unsigned)blocks, NWG * 128, smem, stream>>>(*p);
    }
    return cudaGetLastError();
}

// The tuned tile (rows that see few keys may have their own); p->sm90_pp = 1 / 2 / 3 forces the
// lockstep / ping-pong / TMA loop on it (A/B timing, tests).
template <typename T, int D, bool SHORT_ROWS>
cudaError_t flashc_cuda_fwd_sm90_tuned(flashc_fwd_params *p, cudaStream_t stream) {
    constexpr flashc_cuda_tile t = flashc_cuda_tune_fwd_sm90(D, sm90_elem<T>::FP8, SHORT_ROWS);
    constexpr int NWG = t.nwarps / 4, NWG_CP = NWG < 2 ? NWG : 2; // (the cp.async loops spill with 3)
    const int loop = p->sm90_pp ? p->sm90_pp - 1 : t.pingpong;
    constexpr int S_CP = flashc_cuda_fwd_sm90_fallback_stages(D, t.stages);
    constexpr int BN_CP = flashc_cuda_fwd_sm90_fallback_bn(t.bn, sm90_elem<T>::FP8);
    return loop == 0   ? flashc_cuda_fwd_sm90_run<T, D, NWG_CP, BN_CP, S_CP, 0>(p, stream)
           : loop == 1 ? flashc_cuda_fwd_sm90_run<T, D, NWG_CP, BN_CP, S_CP, 1>(p, stream)
                       : flashc_cuda_fwd_sm90_run<T, D, NWG, t.bn, t.stages, 2>(p, stream);
}

template <typename T, int D>
cudaError_t flashc_cuda_fwd_sm90_launch(flashc_fwd_params *p, cudaStream_t stream) {
    constexpr bool fp8 = sm90_elem<T>::FP8;
    constexpr flashc_cuda_tile tn = flashc_cuda_tune_fwd_sm90(D, fp8, false), tc = flashc_cuda_tune_fwd_sm90(D, fp8, true);
    constexpr bool same = tn.bm == tc.bm && tn.bn == tc.bn && tn.stages == tc.stages && tn.pingpong == tc.pingpong;
    // the most keys a row sees (a window bounded on one side only leaves up to Sk); causal stands
    // for any bounded right window (both skip key blocks)
    const int wl = p->a.window_left, wr = p->a.window_right;
    const long long band = wl >= 0 && wr >= 0 ? (long long)wl + wr + 1 : (long long)p->a.Sk;
    const long long span = band < p->a.Sk ? band : p->a.Sk;
    const bool short_rows = span < flashc_cuda_fwd_sm90_short_keys(D, fp8, wr >= 0);
    if constexpr (same) return flashc_cuda_fwd_sm90_tuned<T, D, false>(p, stream);
    else return short_rows ? flashc_cuda_fwd_sm90_tuned<T, D, true>(p, stream) : flashc_cuda_fwd_sm90_tuned<T, D, false>(p, stream);
}

#endif // FLASHC_SM90_FWD_CUH
