// flashc_sm90_bwd.cuh -- the Hopper (sm_90a) backward: dK_j, dV_j and dQ_i by wgmma.
// Included by the generated inst/flashc_bwd_hd*_*_sm90.cu files only (built for sm_90a alone);
// flashc_cuda.cu sends a backward here only on a 9.0 device, with 16-byte aligned tensors, for
// head dims 64, 128 and 256 (padded: 8..64, 72..128, 136..256) in both modes (the deterministic
// one, and D = 256 always, run a dQ kernel that adds no atomics). Everything else runs the
// mma.sync kernels of flashc_cuda_bwd.cuh, whose pre-pass (D_i, lse2_i) and dQ conversion this path
// calls (instantiated in the plain inst/ files, so that no kernel is compiled twice for different
// archs).
// D = 64 runs the kernel below with 128-row query steps, with the TMA producer, P^T and dS^T made
// together (LATE_DV) and lse2_i / D_i brought by the consumers (OWN_STATS): H200, one process,
// 1.01-1.08x its cp.async mode (bench/results/h200-2026-12-01-s9-own.txt; S = 16k: 369 against 344
// TFLOP/s), which FLASHC_CUDA_SM90=1 / 2 still selects. (Before OWN_STATS the producer's bulk
// copies of lse2_i / D_i ran 1.07-1.29x, but racecheck flagged them: -s8-bwd64-ws.txt. Earlier,
// without LATE_DV, the TMA mode spilled 196 bytes at 240 registers and ptxas serialised every
// wgmma; with 64-row steps every form tried had run 0.80-0.94x the mma.sync kernel.)
// Head dim 256 has its own two kernels (the D = 256 sections at the end).
//
// One CTA per (key block K_j of BN = 128 rows, batch, kv head), 2 warpgroups (256 threads), each
// owning 64 keys of the block and, in registers, their dK_j and dV_j rows (64 x D fp32 each). The
// CTA walks the query blocks Q_i (BM = 64 rows, and the query heads of its GQA group), Q_i, dO_i,
// lse2_i, D_i double-buffered in shared memory (by TMA and the consumers' cp.async; cp.async alone
// in the plain mode). Per step and warpgroup w:
//   S_ij^T  = K_w Q_i^T      wgmma SS m64n64, both K-major              (Alg. 2 line 10)
//   dP_ij^T = V_w dO_i^T     wgmma SS m64n64, a second group            (line 12)
//   P^T = exp2(S^T scale log2e - lse2_i)    while dP^T runs             (line 11)
//   dV_w   += P^T dO_i       wgmma RS m64nD, dO_i N-major (tnspB)       (line 13)
//   dS^T = P^T (dP^T - D_i)                 while dV_w runs             (line 14)
//     (LATE_DV, the D = 64 TMA mode: P^T and dS^T both after dP^T, before dV_w: 64 registers
//     fewer at the peak)
//     computed transposed so that the accumulator already is the A operand of dV and dK:
//     the m64nNk16 A-register layout equals the accumulator layout (HOPPER-NOTES 1.7), no moves
//   dQ_i   += dS_ij K_j      wgmma SS m64n64, dS^T through shared memory as an M-major A,
//                            K_j N-major                                (line 15)
//   dK_w   += dS^T Q_i       wgmma RS m64nD, Q_i N-major, issued after dQ_i so that it runs
//                            while dQ_i goes out                        (line 16)
//     dQ_i goes to an fp32 tile in shared memory and from there into dq_acc by TMA reductions
//     (cp.reduce.async.bulk.tensor .add, two 64 x 32 boxes per warpgroup) instead of atomics;
//     each warpgroup's 64 x 64 part sums over all 128 keys (dS^T of both warpgroups):
//     D = 128: warpgroup w adds columns 64w..64w+63 of the 64 query rows;
//     D = 64:  warpgroup w adds rows 64w..64w+63 of the 128, all 64 columns (no N split inside
//              a swizzle row).
// H200, 2026-12-01 (bench/results/h200-2026-12-01-s8-bwd-ab.txt, one process, S = 512..16k):
// this and the band mask of sm90_p against one bulk reduction per 256-byte row (a serialised
// loop of 32 issues on two warps of each warpgroup per step) and per-query key bounds on every
// block: D = 64 1.12-1.28x, D = 128 1.02-1.38x, D = 256 (the band only) 1.00-1.04x.
// H200 (dev/cuda/bench_bwd.py, bf16, hidden 2048, B * S = 16k, D = 128, one run), TFLOP/s
// non-causal / causal at S = 1k, 4k, 8k: this loop 256 / 200, 302 / 283, 311 / 305; with dK
// before the dS barrier (dK overlapping the barrier instead of the dQ tile store) 250 / 195,
// 292 / 272, 301 / 295; the loop before (S^T, dP^T in one group, dQ by atomics from registers)
// 252 / 198, 296 / 280, 305 / 300. (Keeping dQ_i in flight into the next step's S^T, dP^T was
// serialized by ptxas, C7514: it does not follow wgmma groups across the loop's back edge.)
// Tried and slower (H200, x SDPA FLASH at D = 128 over S = 512..16k, this loop 0.89-1.03): an
// FA3-style ping-pong, the warpgroups decoupled (Q_i / dO_i ring of 2 or 3 slots on full / empty
// mbarriers filled by cp.async.mbarrier.arrive, named barriers alternating their S^T, dP^T
// issue as in flashc_sm90_fwd.cuh, each warpgroup adding dQ over its own 64 keys) ran
// 0.78-0.89x; the same with no dq_acc reduction at all (dQ wrong, timing only) 1.10-1.15x, so
// the doubled dq_acc traffic, not the schedule, sank it (without the named barriers: 0.77-0.81x);
// summing the two partials in a shared tile first (handed over by mbarriers) 0.79-0.84x, and
// racecheck flagged it. At D = 64 every variant ran 0.66-0.73x FLASH against 0.82-0.88x for the
// mma.sync kernel. With the TMA producer (2026-12-01, bench/results/h200-2026-12-01-bwd-ws.txt) D = 64
// still ran 0.90-0.94x the mma.sync kernel (209.8 against 227.5 TFLOP/s at S = 4096).
// The consumer warpgroups meet once a step, when dS^T is in shared memory (the dQ_i products need
// both halves): dS^T has two tiles by step parity, so no second meeting guards its reuse (H200,
// 2026-12-02, h200-2026-12-02-s12.txt call 6: D = 64 1.10-1.21x, D = 128 1.01x against two a step).
// Shared-memory tiles use the 128-byte swizzle of wgmma (HOPPER-NOTES 2.2, 8.4): a ROWS x D tile
// is D / 64 column blocks of ROWS x 64 elements, 128 bytes per row, 16-byte chunk j of row r at
// chunk j ^ (r & 7); every tile starts on a 1024-byte boundary, so base_offset stays 0.
#ifndef FLASHC_SM90_BWD_CUH
#define FLASHC_SM90_BWD_CUH

#include "flashc_sm90.cuh"

// ------------------------------------------------------------------------------------------------
// tiles and the elementwise step (wgmma wrappers, fences and descriptors: flashc_sm90.cuh)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// lse2_i, D_i of query block mm0 of head h (cp.async, 4 bytes each).
template <int BM, int NTHREADS>
static __device__ __forceinline__ void sm90_load_stats(const flashc_bwd_params &p, const flashc_cuda_seq &s, int b, int h,
                                                       int mm0, float *sL, float *sDl, int tid) {
    const int64_t r0 = ws_row(p, b, h, s) + mm0; // padded: rows past sq hold (+inf, 0)
    if constexpr (BM <= NTHREADS) { // no loop: ptxas made a 4-way unrolled loop with its trip count
        if (tid < BM) {
            cp_async_4(smem_u32(sL + tid), p.lse2 + r0 + tid, 4);
            cp_async_4(smem_u32(sDl + tid), p.delta + r0 + tid, 4);
        }
    } else
        for (int i = tid; i < BM; i += NTHREADS) {
            cp_async_4(smem_u32(sL + i), p.lse2 + r0 + i, 4);
            cp_async_4(smem_u32(sDl + i), p.delta + r0 + i, 4);
        }
}

// The same for the TMA kernel at BM = 64 (batch mode only, so r0 = ws_row + mm0 is a multiple of
// BM and both arrays are 16-byte aligned): one warp copies both in 16-byte chunks, and the caller
// carries r0 from step to step. H200, one process against sm90_load_stats by two warps after a
// 64-bit ws_row every step (h200-2026-12-02-s18.txt call 5): D = 128 1.016-1.031x; at D = 64 (BM =
// 128, two chunks a lane) 0.977-0.989x against its four warps, so D = 64 keeps those.
template <int BM>
static __device__ __forceinline__ void sm90_load_stats_warp(const flashc_bwd_params &p, int64_t r0, float *sL,
                                                            float *sDl, int lane) {
    constexpr int C = BM / 4; // 16-byte chunks of each array
    static_assert(2 * C % 32 == 0, "whole warps of chunks");
#pragma unroll
    for (int c = lane; c < 2 * C; c += 32) {
        const bool d = c >= C;
        const int k = 4 * (d ? c - C : c);
        cp_async_16(smem_u32((d ? sDl : sL) + k), (d ? p.delta : p.lse2) + r0 + k, 16);
    }
}

// Q_i, dO_i (swizzled) and lse2_i, D_i of query block mm0 of head h.
template <int BM, int D, int NTHREADS>
static __device__ __forceinline__ void sm90_load_q_block(const flashc_bwd_params &p, const flashc_cuda_seq &s, int b,
                                                         int h, int mm0, uint32_t sQ, uint32_t sdO, float *sL,
                                                         float *sDl, int tid) {
    const int rows = min(BM, s.sq - mm0);
    const uint16_t *Qg = (const uint16_t *)p.q + b * p.q_bs + (s.q_row0 + mm0) * p.q_rs + h * p.q_hs;
    const uint16_t *dOg = (const uint16_t *)p.dout + b * p.do_bs + (s.q_row0 + mm0) * p.do_rs + h * p.do_hs;
    sm90_load_tile<BM, D, NTHREADS>(sQ, Qg, p.q_rs, rows, p.a.D, p.q, tid);
    sm90_load_tile<BM, D, NTHREADS>(sdO, dOg, p.do_rs, rows, p.a.D, p.dout, tid);
    sm90_load_stats<BM, NTHREADS>(p, s, b, h, mm0, sL, sDl, tid);
}

// Rows r0 .. ROWS - 1 of the two ROWS x D tiles at tA, tB (swizzled, D / 64 column blocks of ROWS
// x 128 bytes) set to zero by NTHREADS threads, 16 bytes a store. Whole rows, so the swizzle does
// not matter.
template <int ROWS, int D, int NTHREADS>
static __device__ __forceinline__ void sm90_zero_rows(char *tA, char *tB, int r0, int tid) {
    const int n = (ROWS - r0) * 8; // 16-byte chunks of a column block's rows r0 ..
#pragma unroll
    for (int cb = 0; cb < 2 * (D / 64); cb++) { // (tile A's column blocks, then tile B's)
        char *t = (cb < D / 64 ? tA + cb * ROWS * 128 : tB + (cb - D / 64) * ROWS * 128) + r0 * 128;
        for (int k = tid; k < n; k += NTHREADS) *(uint4 *)(t + k * 16) = make_uint4(0u, 0u, 0u, 0u);
    }
}

// X_w Y_i^T for this warpgroup's 64 keys, one commit group: X = K_j or V_j (BN x D tile at sX), Y =
// Q_i or dO_i (BM x D at sY), both K-major, K = D in steps of 16: S^T = K Q^T, dP^T = V dO^T.
// Descriptors from the tiles' start fields (sm90_desc_f; the largest layout is 227 KB).
template <typename T, int D, int BN, int BM>
static __device__ __forceinline__ void sm90_issue_rows_t(float (&acc)[BM / 2], uint32_t fX, uint32_t fY, int wg) {
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const uint32_t xo = (kk >> 2) * (BN * 128) + wg * 64 * 128 + (kk & 3) * 32;
        const uint32_t yo = (kk >> 2) * (BM * 128) + (kk & 3) * 32;
        wgmma_ss<T, BM>(acc, sm90_desc_f(fX, xo, 16), sm90_desc_f(fY, yo, 16), kk);
    }
    wgmma_commit();
}

// The D = 256 kernels' X Y^T for 32 columns, one commit group: rows x0 .. x0 + 63 of the XR-row
// tile at sX against rows y0 .. y0 + 31 of the YR-row tile at sY, both K-major, K = D in steps of
// 16 (S = Q K^T, dP = dO V^T, or transposed).
template <typename T, int D>
static __device__ __forceinline__ void sm90_issue_32(float (&acc)[16], uint32_t sX, int XR, int x0, uint32_t sY, int YR,
                                                     int y0) {
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        wgmma_ss<T, 32>(acc, sm90_desc_kmajor(sX, XR, x0, kk), sm90_desc_kmajor(sY, YR, y0, kk), kk);
    wgmma_commit();
}

// The keys query q sees, key_lo(q) <= key < key_hi(q), as a band on the diagonal distance
// d = key - q: dlo <= d <= dhi (INT_MIN / INT_MAX where the window is unbounded), and key < sk.
// One subtraction and two compares per score instead of key_lo / key_hi per query (64-bit
// arithmetic and branches: ~8 instructions per score in sm90_p at D = 64 by the SASS, where the
// band takes 3 and an unmasked block none).
typedef struct sm90_band {
    int dlo, dhi;
} sm90_band;

static __device__ __forceinline__ sm90_band sm90_key_band(const flashc_cuda_attn &a, const flashc_cuda_seq &s) {
    const long long off = (long long)s.sk - s.sq;
    const long long lo = a.window_left < 0 ? INT_MIN : off - a.window_left;
    const long long hi = a.window_right < 0 ? INT_MAX : off + a.window_right;
    return {(int)max(min(lo, (long long)INT_MAX), (long long)INT_MIN), (int)max(min(hi, (long long)INT_MAX), (long long)INT_MIN)};
}

// S^T (keys x queries, raw k.q) -> P^T = exp2(S scale log2e - lse2_q) (0 where masked), in place
// as P^T dsf (dsf = 1 - tanh^2 under softcap, else 1: what dS^T needs), and P^T packed as the A
// fragments of dV += P^T dO_i. The m64n64 accumulator layout: element i of this thread is key
// kr0 + 8 ((i >> 1) & 1), query q0 + 8 (i >> 2) + (i & 1); l2: lse2 of query q0 + 8 j + e at
// index 2 j + e; A fragment k4 (queries 16 k4 ..) register r = elements 8 k4 + 2 r, + 1.
// The same math as bwd_p_ds_tile of flashc_cuda_bwd.cuh, transposed. The plain logits test the
// band where MASKED and nothing else (a block whose every key every query sees); TRANSFORM (softcap,
// ALiBi: rare, and long) takes each query's bounds where the runtime flag masked says so, as all
// of them did before: the band's registers made ptxas spill 172 bytes there at D = 64.
// NS = 32 for the m64n64 tile (64 queries), 16 for m64n32 (the D = 256 kernel's 32 queries); the
// pair j of lse2 values is at sl2q + LS j (LS = 8: the smem row of lse2_i; 2: a float2 array).
// DS: dS^T too, as sm90_ds makes it (dP^T from dP, D_q at sdq as lse2 at sl2q) into adS, element
// by element, so that S^T and dP^T die as they are packed (sm90_ds after this keeps both whole).
// PRE: the first PRE pairs of lse2 and D come in registers (pre_l2, pre_dl), read by the caller
// before its wgmma wait.
template <typename T, bool TRANSFORM, bool MASKED, int NS, int LS = 8, bool DS = false, int PRE = 0>
static __device__ __forceinline__ void sm90_p(float (&S)[NS], uint32_t (&aP)[NS / 8][4], const flashc_cuda_attn &a,
                                              const flashc_cuda_seq &s, sm90_band band, const float *sl2q, int kr0,
                                              int q0, float slope, bool masked, const float *dP = NULL,
                                              const float *sdq = NULL, uint32_t (*adS)[4] = NULL,
                                              const float2 *pre_l2 = NULL, const float2 *pre_dl = NULL) {
    const float sl2 = TRANSFORM ? 1.f : a.scale_log2;
    const bool key_ok[2] = {kr0 < s.sk, kr0 + 8 < s.sk};
#pragma unroll
    for (int j = 0; j < NS / 4; j++) {
        const float2 lv = j < PRE ? pre_l2[j] : *(const float2 *)(sl2q + LS * j); // read here, not kept in registers
        const float l2[2] = {lv.x, lv.y};
        float2 dlv = make_float2(0.f, 0.f);
        if (DS) dlv = j < PRE ? pre_dl[j] : *(const float2 *)(sdq + LS * j);
        const float dl[2] = {dlv.x, dlv.y};
        float P[2][2], dS[2][2]; // [hh][e]
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int q = q0 + 8 * j + e, diag = q + s.sk - s.sq;
            int lo = 0, hi = 0x7fffffff; // TRANSFORM: the bounds of each query, behind a branch
            if (TRANSFORM && masked) {
                lo = key_lo(a, q, s.sq, s.sk);
                hi = key_hi(a, q, s.sq, s.sk);
            }
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int i = 4 * j + 2 * hh + e, key = kr0 + 8 * hh;
                float dsf;
                const float x = bwd_logit<TRANSFORM>(S[i], a, diag - key, slope, &dsf);
                float Pv = ex2(fmaf(x, sl2, -l2[e]));
                if (TRANSFORM ? key < lo || key >= hi
                              : MASKED && !(key_ok[hh] && key - q >= band.dlo && key - q <= band.dhi))
                    Pv = 0.f;
                P[hh][e] = Pv;
                S[i] = Pv * dsf;
                if (DS) dS[hh][e] = S[i] * (dP[i] - dl[e]);
            }
        }
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            aP[j >> 1][2 * (j & 1) + hh] = pack2<T>(P[hh][0], P[hh][1]);
            if (DS) adS[j >> 1][2 * (j & 1) + hh] = pack2<T>(dS[hh][0], dS[hh][1]);
        }
    }
}

// dS^T = P^T dsf (dP^T - D_q) from sm90_p's S and dP^T (v.dO), packed as the A fragments of
// dK += dS^T Q_i (layouts as sm90_p; dl: D of query q0 + 8 j + e at index 2 j + e).
template <typename T, int NS, int LS = 8>
static __device__ __forceinline__ void sm90_ds(const float (&S)[NS], const float (&dP)[NS], const float *sdq,
                                               uint32_t (&adS)[NS / 8][4]) {
#pragma unroll
    for (int k4 = 0; k4 < NS / 8; k4++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = 8 * k4 + 2 * r, j = 2 * k4 + (r >> 1);
            const float2 dl = *(const float2 *)(sdq + LS * j);
            adS[k4][r] = pack2<T>(S[i] * (dP[i] - dl.x), S[i + 1] * (dP[i + 1] - dl.y));
        }
}


// The tail split (batch mode, no mask that skips steps): with 2048 key blocks of 128 on 132 SMs
// at one CTA an SM, 68 CTAs ran a 16th round while 64 SMs idled (the forward's measurement:
// bench/results/h200-2026-12-03-s27.txt call 5). The last T key blocks (from CTA p.sk_tail0 on)
// run as P = p.sk_pieces CTAs each, piece k taking steps [count k / P, count (k + 1) / P) of the
// block's list, in a second launch of the SPLIT instance: its T P pieces of 1 / P of a block fill
// the last rounds. The first launch (main's instance, whose loop the SPLIT one's extra state would
// slow: session 30 measured one SPLIT grid for all 0.974-0.991x at D = 128) skips the tail's CTAs
// and lets the pieces' launch start as its CTAs free SMs (programmatic dependent launch). The
// SPLIT CTA's key block, batch and kv head (heads outer, as bwd_key_block_of_cta), its piece and
// tail index t.
template <int BN>
static __device__ __forceinline__ void sm90_bwd_piece_of(const flashc_bwd_params &p, int *n_block, int *b, int *h_kv,
                                                         int *piece, int *t) {
    int cta;
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(cta)); // (volatile: derived anew, not kept live, where called again)
    *t = cta / p.sk_pieces;
    *piece = cta - *t * p.sk_pieces;
    cta = p.sk_tail0 + *t;
    const int n_kb = (p.a.Sk + BN - 1) / BN, bh = cta / n_kb;
    *n_block = cta - bh * n_kb;
    *h_kv = bh % p.a.H_kv;
    *b = bh / p.a.H_kv;
}

// Programmatic dependent launch: this grid's CTAs let the next launch (made with
// cudaLaunchAttributeProgrammaticStreamSerialization) start once all have started; and the wait,
// in that next grid, for the previous one to complete with its stores visible. (No-ops without.)
static __device__ __forceinline__ void griddep_launch_dependents(void) { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
static __device__ __forceinline__ void griddep_wait(void) { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// A piece's dK_j, dV_j (fp32, each thread its accumulator layout: D / 2 + D / 2) to its slot of the
// workspace; the CTA counts itself in (the decode's protocol: the stores, a barrier, one thread's
// acq_rel add; the counter goes back to 0 for the next call). The last piece to count sums every
// piece's in piece order (the result does not depend on which came last) and returns true to
// store them; the others return false. FLAG: a word of shared memory (the count's result).
template <int D, int NT>
static __device__ __forceinline__ bool sm90_bwd_merge(const flashc_bwd_params &p, int t, int piece, int tid, float *dK,
                                                      float *dV, volatile int *flag) {
    const int P = p.sk_pieces;
    float *const slot = p.part + (int64_t)t * P * NT * D + tid, *const mine = slot + (int64_t)piece * NT * D;
#pragma unroll
    for (int i = 0; i < D / 2; i++) {
        mine[i * NT] = dK[i];
        mine[(D / 2 + i) * NT] = dV[i];
    }
    bar_sync(4, NT);
    if (tid == 0) {
        const int last = count_in_last(p.part_cnt + t, P);
        // the last piece waits for the whole blocks' launch to complete, so that this grid cannot
        // complete before it and what runs after sees its stores too (one waiting thread suffices;
        // the other pieces leave their SMs at once)
        if (last) griddep_wait();
        *flag = last;
    }
    bar_sync(4, NT);
    if (!*flag) return false;
    // every piece's from the workspace in piece order, this one's too (its registers are free then),
    // dK_j then dV_j, a piece at a time: loads beside live sums made ptxas spill ~400 bytes at D = 128
#pragma unroll
    for (int i = 0; i < D / 2; i++) dK[i] = dV[i] = 0.f;
#pragma unroll 1
    for (int q = 0; q < P; q++)
#pragma unroll
        for (int i = 0; i < D / 2; i++) dK[i] += __ldcg(slot + (int64_t)q * NT * D + i * NT);
#pragma unroll 1
    for (int q = 0; q < P; q++)
#pragma unroll
        for (int i = 0; i < D / 2; i++) dV[i] += __ldcg(slot + (int64_t)q * NT * D + (D / 2 + i) * NT);
    return true;
}

#endif // __CUDA_ARCH_FEAT_SM90_ALL

// ------------------------------------------------------------------------------------------------
// the kernel: one CTA per (key block, batch, kv head), 2 warpgroups

#define FLASHC_SM90_BWD_BM 64

// Query rows per step of the kernel below: 64, or 128 at D = 64 (a step of 64 x 128 x 64 is short
// for its fixed costs: barriers, waits, the dQ_i reduction).
static constexpr __host__ __device__ int flashc_sm90_bwd_bm(int D) { return D == 64 ? 128 : FLASHC_SM90_BWD_BM; }

// Shared memory (bytes, from a 1024-aligned base) with its 2 consumer warpgroups (BN = 128 keys) and a
// STAGES-deep Q_i ring: K_j, V_j [BN x D]; Q_i, dO_i [STAGES][BM x D]; dS^T [2][BN x BM]; the dQ_i
// tile (fp32, BM x D in 128-byte swizzled boxes of 64 rows x 32 columns, as the dq map reads them);
// lse2_i, D_i [STAGES][BM] fp32; 64 bytes of mbarriers; + 1024 to align.
static constexpr __host__ __device__ int flashc_sm90_bwd_smem(int D, int STAGES = 2) {
    return 2 * 128 * D * 2 + 2 * STAGES * flashc_sm90_bwd_bm(D) * D * 2 + 2 * 128 * flashc_sm90_bwd_bm(D) * 2 +
           flashc_sm90_bwd_bm(D) * D * 4 + 2 * STAGES * flashc_sm90_bwd_bm(D) * 4 + 64 + 1024;
}

// The TMA maps of the warp-specialized mode (Q and dO, boxes of BM rows x 64 columns).
typedef struct flashc_sm90_bwd_maps {
    CUtensorMap q, dout, k, v; // k, v: the dQ kernel's
    CUtensorMap dq;            // dq_acc [ws_rows][D] fp32, boxes of 64 rows x 32 columns: the D <= 128 kernel's
} flashc_sm90_bwd_maps;

// Two consumer warpgroups: 256 threads, BN = 128, one CTA per SM (242 registers at D = 128 in the
// cp.async mode, 255 at D = 64). One warpgroup (BN = 64, two CTAs per SM) passed the same tests but
// ran 0.6-0.8x as fast; it is gone.
// WS = true: warpgroup 0 is a producer whose one thread brings Q_i, dO_i (TMA) and, with 3 stages
// only, lse2_i, D_i (bulk copies; on 2 stages the consumers load those, OWN_STATS below) into a
// STAGES-deep ring on
// full / empty mbarriers (the forward's scheme), and
// setmaxnreg gives the 2 consumer warpgroups 240 registers; the consumers meet on named
// barrier 4 where the plain kernel has __syncthreads. K_j and V_j come by cp.async, zero past
// seqused_k; the maps zero the rows of Q_i and dO_i past Sq.
// RAGGED (varlen, WS on 2 stages): the maps are of the packed rows, so the query block that holds
// a sequence's end brings the next sequence's Q and dO rows, and dO = Inf there would reach dK_j
// and dV_j through 0 x Inf (P^T = 0 masks those queries, but dP^T = V dO^T does not, and dK +=
// dS^T Q, dV += P^T dO multiply them). The consumers zero those rows of the slot before its first
// wgmma, in that step only (sm90_zero_rows). An instance of its own, as the forward's RAGGED, so
// that the batch-mode kernels stay as they are. H200, 2026-12-03 (h200-2026-12-03-s22.txt call 2,
// dev/cuda/ab.py --varlen --bwd, 16k tokens, sequences of ~512 / 2048 / 8192) against the cp.async
// mode varlen ran before: D = 64 1.08-1.33x, D = 128 1.14-1.38x.
// DQ = false (the deterministic mode): dK_j and dV_j only; flashc_bwd_sm90_dq_kernel makes dQ.
// SPLIT (batch mode, WS on 2 stages; p.sk_pieces > 1): the tail split of sm90_bwd_piece_of below.
template <typename T, int D, bool WS, int STAGES, bool RAGGED = false, bool DQ = true, bool SPLIT = false>
__global__ void __launch_bounds__(128 * (2 + WS), 1)
    flashc_bwd_sm90_kernel(const __grid_constant__ flashc_bwd_params p, const __grid_constant__ flashc_sm90_bwd_maps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int NWG = 2, BM = flashc_sm90_bwd_bm(D), BN = 64 * NWG, NTHREADS = 128 * NWG;
    static_assert(WS || STAGES == 2, "the cp.async mode double-buffers");
    static_assert(!RAGGED || (WS && STAGES == 2), "RAGGED: the consumers' own lse2_i, D_i loads (4-byte: ws rows of a sequence are not 16-byte aligned)");
    // dQ_i over all BN keys: at D = 128 warpgroup w adds columns 64 w .. 64 w + 63 of the BM = 64
    // rows (COLS); at D = 64, rows 64 w .. 64 w + 63 of the BM = 128 (all 64 columns)
    constexpr bool COLS = D >= 128;
    constexpr int TILE_Q = BM * D * 2, TILE_K = BN * D * 2; // bytes
    constexpr int OFF_K = 0, OFF_V = TILE_K, OFF_Q = 2 * TILE_K, OFF_DO = OFF_Q + STAGES * TILE_Q;
    constexpr int TILE_DS = BN * BM * 2;        // dS^T of a step; two, by step parity (below)
    constexpr int OFF_DS = OFF_DO + STAGES * TILE_Q, OFF_DQ = OFF_DS + 2 * TILE_DS; // dQ_i: 2 x 16 KB, 1024-aligned
    constexpr int OFF_L = OFF_DQ + BM * D * 4, OFF_DL = OFF_L + STAGES * BM * 4, OFF_BAR = OFF_DL + STAGES * BM * 4;
    static_assert(D == 64 || D == 128, "head dim");
    static_assert(COLS ? BM == 64 : BM == 128, "the dQ_i split"); // (and BM | FLASHC_WS_PAD: the pre-pass
                                                                  // zeroes dq_acc up to round_up(sq, 128))
    static_assert(OFF_DQ % 1024 == 0 && BM * D * 4 == 2 * 16384, "dQ_i: two warpgroup tiles of 64 x 64 fp32");
    static_assert(OFF_BAR + 64 + 1024 == flashc_sm90_bwd_smem(D, STAGES), "smem layout");
    static_assert(2 * BN * (D + 8) * 2 <= OFF_DS, "epilogue staging (below the dQ_i tile: see the epilogue)");

    const uint32_t raw = smem_u32(flashc_smem);
    const uint32_t base = (raw + 1023u) & ~1023u;
    char *sbase = (char *)flashc_smem + (base - raw);
    float *sL = (float *)(sbase + OFF_L), *sDl = (float *)(sbase + OFF_DL);

    // --- which (key block, batch, kv head), and the query rows that see some of its keys ---------
    if constexpr (WS && STAGES == 2 && !RAGGED && !SPLIT) // (the instance the tail split's first launch runs)
        if (p.sk_pieces > 1) { // the whole blocks; the pieces' launch starts as SMs free up
            griddep_launch_dependents();
            if ((int)blockIdx.x >= p.sk_tail0) return;
        }
    int n_block, b, h_kv, piece = -1, t = 0;
    if (SPLIT) sm90_bwd_piece_of<BN>(p, &n_block, &b, &h_kv, &piece, &t); // (non-causal: no lpt tail)
    else bwd_key_block_of_cta(p.a, &n_block, &b, &h_kv, true, p.lpt_sms); // heads outer (causal: the tail aside): see there
    const flashc_cuda_seq s = cuda_seq(p.a, b);
    const int n0 = n_block * BN;
    if (n0 >= s.sk_len) return; // (never with SPLIT: batch mode, every key block holds keys)
    int mb_begin, n_mb;
    query_blocks_of_keys(p.a, s, n0, BN, BM, &mb_begin, &n_mb);
    // (query head of the group, query block) pairs: steps k0 .. k0 + count - 1 of the key block's
    // n_mb * group (a piece: its share of them)
    int k0 = 0, count = n_mb * p.a.group;
    if (SPLIT) {
        const int all = count;
        k0 = (int)((int64_t)all * piece / p.sk_pieces);
        count = (int)((int64_t)all * (piece + 1) / p.sk_pieces) - k0;
    }
    const int h0 = SPLIT && n_mb > 0 ? h_kv * p.a.group + k0 / n_mb : 0, mb0 = SPLIT && n_mb > 0 ? mb_begin + k0 % n_mb : 0; // step 0's
    const sm90_band band = sm90_key_band(p.a, s);

    // step it reads the block's step k = k0 + it (k0 = 0 unless SPLIT): head h_kv group + k / n_mb, query
    // block mb_begin + k % n_mb; ring slot it % STAGES
    const uint32_t full0 = base + OFF_BAR, empty0 = full0 + 8 * STAGES;
    // WS on 2 stages: the consumers bring lse2_i, D_i themselves (cp.async, a step ahead, ordered by
    // their named barrier), not the producer by bulk copies. racecheck reports the bulk copies
    // against the consumers' reads of the slot's previous use, the empty mbarrier between them (and
    // the consumers' proxy fences before its arrive) notwithstanding: at D = 64 12 hazards
    // (h200-2026-12-01-s8-bwd64-ws.txt), at D = 128 2 (f16, h200-2026-12-02-s14.txt call 6; the
    // --quick cases it had run before did not show them). We read the PTX memory model as ordering
    // them (CUTLASS's TMA pipelines release a stage the same way), but a sanitizer that cannot be
    // kept clean hides real races, so the consumers load. Cost at D = 128, one process against the
    // bulk copies (call 7): 0.98-0.99x. The 3-stage mode (FLASHC_CUDA_SM90=4, not the default) keeps
    // the bulk copies.
    constexpr bool OWN_STATS = WS && STAGES == 2;
    constexpr bool STATS_WARP = OWN_STATS && BM == 64 && !RAGGED; // sm90_load_stats_warp
    if (WS) {
        if (threadIdx.x == 0) {
            ring_init(full0, empty0, STAGES, NWG);
            fence_mbarrier_init();
        }
        __syncthreads();
        if (threadIdx.x < 128) { // --- producer ---------------------------------------------------
            reg_dealloc<24>();
            if (threadIdx.x == 0) {
                tma_prefetch_map(&maps.q);
                tma_prefetch_map(&maps.dout);
                for (int it = 0; it < count; it++) {
                    const int k = SPLIT ? k0 + it : it; // (the block's step)
                    const int st = it % STAGES, h = h_kv * p.a.group + k / n_mb, mm0 = (mb_begin + k % n_mb) * BM;
                    const uint32_t bar = ring_acquire(full0, empty0, it, STAGES, 2 * TILE_Q + (OWN_STATS ? 0 : 2 * BM * 4));
                    const int row = RAGGED ? s.q_row0 + mm0 : mm0, bm = RAGGED ? 0 : b; // RAGGED: packed rows
                    sm90_tma_rows<BM, D * 2, 2>(base + OFF_Q + st * TILE_Q, &maps.q, 0, row, h, bm, bar);
                    sm90_tma_rows<BM, D * 2, 2>(base + OFF_DO + st * TILE_Q, &maps.dout, 0, row, h, bm, bar);
                    if (!OWN_STATS) {
                        const int64_t r0 = ws_row(p, b, h, s) + mm0; // padded: rows past sq hold (+inf, 0)
                        bulk_load(base + OFF_L + st * BM * 4, p.lse2 + r0, BM * 4, bar);
                        bulk_load(base + OFF_DL + st * BM * 4, p.delta + r0, BM * 4, bar);
                    }
                }
            }
            return;
        }
        reg_alloc<240>();
    }
    const int tid = threadIdx.x - (WS ? 128 : 0), wg = warpgroup_uniform(WS ? 1 : 0), wl = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, c = lane & 3;

    float dK[D / 2], dV[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) dK[i] = dV[i] = 0.f;

    const uint32_t sK = base + OFF_K, sV = base + OFF_V, sdS = base + OFF_DS;
    const uint32_t fK = sm90_afield(sK), fV = sm90_afield(sV), fdS = sm90_afield(sdS); // start fields
    const uint32_t fQ0 = sm90_afield(base + OFF_Q), fdO0 = sm90_afield(base + OFF_DO);
    const int nw0 = n0 + wg * 64;                // this warpgroup's first key
    const int kr0 = nw0 + wl * 16 + g;           // key of accumulator rows (+ 8 for the odd pairs)

    if (count > 0) {
        const uint16_t *Kg = (const uint16_t *)p.k + b * p.k_bs + (s.k_row0 + n0) * p.k_rs + h_kv * p.k_hs;
        const uint16_t *Vg = (const uint16_t *)p.v + b * p.v_bs + (s.k_row0 + n0) * p.v_rs + h_kv * p.v_hs;
        sm90_load_tile<BN, D, NTHREADS>(sK, Kg, p.k_rs, s.sk - n0, p.a.D, p.k, tid);
        sm90_load_tile<BN, D, NTHREADS>(sV, Vg, p.v_rs, s.sk - n0, p.a.D, p.v, tid);
        if (!WS) // (not SPLIT)
            sm90_load_q_block<BM, D, NTHREADS>(p, s, b, h_kv * p.a.group, mb_begin * BM, base + OFF_Q, base + OFF_DO,
                                               sL, sDl, tid);
        // STATS_WARP: the loading warp (a lane-0 shuffle, so that ptxas branches the others over it)
        // and the workspace row of the step's lse2_i, D_i (+ ws_rows_per_head a head, carried)
        int64_t srow = ws_row(p, b, SPLIT ? h0 : h_kv * p.a.group, s) + (SPLIT ? mb0 : mb_begin) * BM;
        const bool stats_warp = STATS_WARP && __shfl_sync(0xffffffffu, tid >> 5, 0) == 0;
        if (stats_warp) sm90_load_stats_warp<BM>(p, srow, sL, sDl, lane);
        else if (OWN_STATS && !STATS_WARP)
            sm90_load_stats<BM, NTHREADS>(p, s, b, SPLIT ? h0 : h_kv * p.a.group, (SPLIT ? mb0 : mb_begin) * BM, sL, sDl, tid);
        cp_async_commit();

        // the head, query block, ring slot and phase of step it, carried from step to step (no division
        // by n_mb or STAGES at the head of every step)
        int h = SPLIT ? h0 : h_kv * p.a.group, mb = SPLIT ? mb0 : mb_begin, st = 0, ph = 0;
        const int mb_end = mb_begin + n_mb;
        for (int it = 0; it < count; it++) {
            const int mm0 = mb * BM;
            const int mb_next = mb + 1 == mb_end ? mb_begin : mb + 1, h_next = mb + 1 == mb_end ? h + 1 : h;
            const int64_t srow_next = srow + (mb + 1 == mb_end ? p.ws_rows_per_head - (int64_t)(n_mb - 1) * BM : BM);
            if (WS) {
                if (it == 0) {
                    cp_async_wait<0>();      // K_j, V_j; OWN_STATS: step 0's lse2_i, D_i
                    fence_proxy_async_smem(); // K_j, V_j (cp.async) -> visible to wgmma
                }
                mbar_wait(full0 + 8 * st, ph); // Q_i, dO_i (lse2_i, D_i) landed
                // No CTA barrier at the head of later steps: the warpgroups meet once a step, when
                // dS^T is in shared memory. The dS^T tile a step writes (parity it & 1) was last
                // read by step it - 2's dQ wgmmas, which each warpgroup finished before arriving
                // at step it - 1's barrier; OWN_STATS: slot st ^ 1 was last read before that
                // barrier too, and the loads into it are waited for before this step's.
                if (RAGGED && mm0 + BM > s.sq) { // the next sequence's rows: zeroed before anyone reads
                    sm90_zero_rows<BM, D, NTHREADS>(sbase + OFF_Q + st * TILE_Q, sbase + OFF_DO + st * TILE_Q, s.sq - mm0, tid);
                    fence_proxy_async_smem(); // -> visible to both warpgroups' wgmmas after the barrier
                    bar_sync(4, NTHREADS);
                } else if (it == 0)
                    bar_sync(4, NTHREADS);
                if (OWN_STATS) { // the next step's, into slot st ^ 1
                    const int sn = st ^ 1;
                    if (stats_warp && it + 1 < count)
                        sm90_load_stats_warp<BM>(p, srow_next, sL + sn * BM, sDl + sn * BM, lane);
                    else if (!STATS_WARP && it + 1 < count)
                        sm90_load_stats<BM, NTHREADS>(p, s, b, h_next, mb_next * BM, sL + sn * BM, sDl + sn * BM,
                                                      tid);
                    cp_async_commit();
                }
            } else {
                cp_async_wait<0>();
                fence_proxy_async_smem(); // this thread's cp.async data -> visible to wgmma
                __syncthreads();     // Q_i, dO_i landed everywhere; the previous step is done everywhere
                if (it + 1 < count)
                    sm90_load_q_block<BM, D, NTHREADS>(p, s, b, h_next, mb_next * BM,
                                                       base + OFF_Q + (st ^ 1) * TILE_Q, base + OFF_DO + (st ^ 1) * TILE_Q,
                                                       sL + (st ^ 1) * BM, sDl + (st ^ 1) * BM, tid);
                cp_async_commit();
            }
            const uint32_t fQs = fQ0 + st * (TILE_Q >> 4), fdOs = fdO0 + st * (TILE_Q >> 4);

            // S^T = K_w Q_i^T, dP^T = V_w dO_i^T       (Alg. 2 lines 10, 12), K = D in steps of 16,
            // two groups: P^T is computed while dP^T is still on the tensor cores
            float S[BM / 2], dP[BM / 2];
            wgmma_fence();
            sm90_issue_rows_t<T, D, BN, BM>(S, fK, fQs, wg);
            sm90_issue_rows_t<T, D, BN, BM>(dP, fV, fdOs, wg);

            const float *l2 = sL + st * BM + 2 * c, *dl = sDl + st * BM + 2 * c; // this thread's queries (+ 8 j)
            const int mm_last = min(mm0 + BM, s.sq) - 1;
            const bool masked = !(nw0 >= key_lo(p.a, mm_last, s.sq, s.sk) && nw0 + 64 <= key_hi(p.a, mm0, s.sq, s.sk));
            const float slope = p.a.alibi ? p.a.alibi[b * p.a.alibi_bs + h] : 0.f;

            // P^T (line 11), then dV_w += P^T dO_i (line 13) while dP^T finishes; LATE_DV: both
            // groups first, then P^T and dS^T together (S^T and dP^T die as they are packed: the
            // peak falls by 64 registers, what the TMA mode at D = 64 needs to fit 240)
            constexpr bool LATE_DV = WS && D == 64;
            // LATE_DV: lse2_i and D_i of the first PRE query pairs are read before the wait. Read
            // after it, the first P^T FFMA waits for its load behind the wgmmas' shared-memory
            // traffic (ncu at D = 128: 5% of the warps' samples on that one instruction). H200
            // (h200-2026-12-02-s13.txt call 3): D = 64 1.003-1.017x; D = 128 (lse2_i before the
            // first wait, D_i before the second) 0.993-1.004x, so not there.
            constexpr int PRE = LATE_DV ? 2 : 0;
            float2 pl2[PRE + 1], pdl[PRE + 1]; // (+ 1: C++ has no zero-length arrays)
#pragma unroll
            for (int j = 0; j < PRE; j++) {
                pl2[j] = *(const float2 *)(l2 + 8 * j);
                pdl[j] = *(const float2 *)(dl + 8 * j);
            }
            wgmma_wait<LATE_DV ? 0 : 1>();
            reg_fence(S);
            if (LATE_DV) reg_fence(dP);
            uint32_t aP[BM / 16][4], adS[BM / 16][4];
            if (p.a.transform) sm90_p<T, true, true, BM / 2, 8, LATE_DV, PRE>(S, aP, p.a, s, band, l2, kr0, mm0 + 2 * c, slope, masked, dP, dl, adS, pl2, pdl);
            else if (masked) sm90_p<T, false, true, BM / 2, 8, LATE_DV, PRE>(S, aP, p.a, s, band, l2, kr0, mm0 + 2 * c, slope, masked, dP, dl, adS, pl2, pdl);
            else sm90_p<T, false, false, BM / 2, 8, LATE_DV, PRE>(S, aP, p.a, s, band, l2, kr0, mm0 + 2 * c, slope, masked, dP, dl, adS, pl2, pdl);
            wgmma_fence();
#pragma unroll
            for (int k4 = 0; k4 < BM / 16; k4++) wgmma_rs<T, D>(dV, aP[k4], sm90_desc_f(fdOs, k4 * 2048, BM * 128), 1);
            wgmma_commit();

            // dS^T (line 14; LATE_DV: made above) -> registers for dK_w += dS^T Q_i (line 16; scale
            // applied at the end) and shared memory ([key][query], swizzled, BM / 64 column blocks)
            // for dQ: register r of k-step k4 is key row + 8 (r & 1), queries 16 k4 + 8 (r >> 1) + 2c,
            // +1; the row's swizzle is g
            if (!LATE_DV) {
                wgmma_wait<1>();
                reg_fence(dP);
                sm90_ds<T>(S, dP, dl, adS);
            }
            // one stmatrix (four 8 x 8 b16 matrices) per k-step: matrix i = register r of
            // every thread (keys + 8 (i & 1), chunk 2 k4 + (i >> 1)), its row j at lane 8 i + j. With
            // the tile 1024-aligned the swizzled chunk is lane's address XOR (2 k4 & 7) << 4.
            if (DQ) {
                const int mi = lane >> 3, mj = lane & 7;
                const uint32_t a0 = sdS + (it & 1) * TILE_DS + (wg * 64 + wl * 16 + mj + 8 * (mi & 1)) * 128 +
                                    (((mi >> 1) ^ mj) << 4);
#pragma unroll
                for (int k4 = 0; k4 < BM / 16; k4++)
                    stmatrix_x4((a0 ^ ((k4 & 3) << 5)) + (k4 >> 2) * (BN * 128), adS[k4]);
                fence_proxy_async_smem();
                bulk_wait_read<0>(); // the previous step's dQ reduction has read the dQ tile
            }
            if (OWN_STATS) cp_async_wait<0>(); // the next step's lse2_i, D_i: visible after the barrier
            // dS^T of every warpgroup is in shared memory (DQ), and the next step's lse2_i, D_i,
            // which some warps load for all (OWN_STATS): needed with DQ = false too
            if (WS) bar_sync(4, NTHREADS);
            else __syncthreads();

            // dQ_i += dS K_j                           (line 15), rows 64 rb .. and columns 64 cb .. of
            // the tile (COLS: rb = 0, cb = wg; else rb = wg, cb = 0), through this warpgroup's 16 KB
            // of the shared dQ tile into dq_acc by two TMA reductions (64 rows x 32 columns each,
            // 128-byte swizzle: 16-byte chunk k of row r at k ^ (r & 7), and r & 7 = g here). One
            // bulk reduction per 256-byte row, as before, cost 32 serialised issues (ELECT loops) on
            // two warps of each warpgroup per step. dK_w runs behind it.
            const int cb = COLS ? wg : 0, rb = COLS ? 0 : wg;
            const uint32_t sdQ = base + OFF_DQ + wg * 16384; // for the TMA; sdQp for this thread's stores
            char *sdQp = sbase + OFF_DQ + wg * 16384;
            float dQ[32];
            if (DQ) {
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BN / 16; kk++)
                    wgmma_ss_t<T, 64, 1, 1>(dQ, sm90_desc_f(fdS, (it & 1) * TILE_DS + rb * (BN * 128) + kk * 2048, BN * 128),
                                            sm90_desc_f(fK, cb * (BN * 128) + kk * 2048, BN * 128), kk);
                wgmma_commit();
            }
            wgmma_fence();
#pragma unroll
            for (int k4 = 0; k4 < BM / 16; k4++) wgmma_rs<T, D>(dK, adS[k4], sm90_desc_f(fQs, k4 * 2048, BM * 128), 1);
            wgmma_commit();
            if (DQ) {
                wgmma_wait<1>();
                reg_fence(dQ);
                // Store t of a thread writes column block j = t ^ jo (within each 32-column box), jo =
                // (g & 3) ^ ((g >> 1) & 1) = 0, 1, 3, 2 for g & 3 = 0..3: with the 128-byte swizzle (chunk
                // (2 (j & 3) + (c >> 1)) ^ g) the 16 lanes of a half-warp then cover 8 chunks, all 32
                // banks once (2 wavefronts a float2 store); with the same j for every lane they covered
                // 4, two lanes' 8 bytes on each bank used (4 wavefronts; ncu, H100, D = 128 S = 4096:
                // 32.4M excess shared wavefronts, 9% of all; NOTES session 37). dQ is permuted in place
                // by two conditional swaps (bit ops) so that every register index stays constant.
                // D = 64 keeps every lane on block j (jo = 0 folds the swaps away): the swaps cost it
                // 1-3% on an H100 (NOTES session 39) where D = 128 gained 1-3%
                const int jo = D == 128 ? (g & 3) ^ ((g >> 1) & 1) : 0; // (not h: that is the head, read below)
#pragma unroll
                for (int bit = 1; bit <= 2; bit <<= 1) {
                    const uint32_t m = (jo & bit) ? 0xffffffffu : 0u; // a swap by bit ops (LOP3), not predicates
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        if (!(j & bit))
#pragma unroll
                            for (int k = 0; k < 4; k++) {
                                const uint32_t x = __float_as_uint(dQ[4 * j + k]), y = __float_as_uint(dQ[4 * (j ^ bit) + k]);
                                const uint32_t d = (x ^ y) & m;
                                dQ[4 * j + k] = __uint_as_float(x ^ d);
                                dQ[4 * (j ^ bit) + k] = __uint_as_float(y ^ d);
                            }
                }
                // chunk ^ g = 2 (j & 3) ^ ((c >> 1) ^ g), j & 3 = (t & 3) ^ jo: one base address, XOR (t & 3) << 5
                const uint32_t q0a = (uint32_t)((wl * 16 + g) * 128 + ((((c >> 1) ^ g)) << 4) + (c & 1) * 8) ^ (uint32_t)(jo << 5);
#pragma unroll
                for (int t = 0; t < 8; t++)
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) { // columns 8 (t ^ jo) + 2 c, + 1
                        *(float2 *)(sdQp + (t >> 2) * 8192 + 8 * hh * 128 + (q0a ^ ((t & 3) << 5))) =
                            make_float2(dQ[4 * t + 2 * hh], dQ[4 * t + 2 * hh + 1]);
                    }
                fence_proxy_async_smem();
                bar_sync(1 + wg, 128); // this warpgroup's part of the tile is written
                if ((tid & 127) == 0) {
                    const int r = (int)(ws_row(p, b, h, s) + mm0) + 64 * rb; // padded rows absorb i >= sq
                    tma_reduce_add_f32(&maps.dq, sdQ, 64 * cb, r);
                    tma_reduce_add_f32(&maps.dq, sdQ + 8192, 64 * cb + 32, r);
                    bulk_commit();
                }
            }
            wgmma_wait<0>(); // dK_w: Q_i is free for the load of step it + STAGES
            if (WS && (tid & 127) == 0) mbar_arrive(empty0 + 8 * st);
            reg_fence(dK);
            reg_fence(dV);
            mb = mb_next;
            h = h_next;
            srow = srow_next;
            if (++st == STAGES) {
                st = 0;
                ph ^= 1;
            }
        }
    }

    // a piece of a split key block: the last of its pieces goes on with the sum of all (piece and t
    // derived again from blockIdx: kept live through the loop they made ptxas spill ~380 bytes at
    // D = 128)
    if (SPLIT) {
        sm90_bwd_piece_of<BN>(p, &n_block, &b, &h_kv, &piece, &t);
        if (!sm90_bwd_merge<D, NTHREADS>(p, t, piece, tid, dK, dV, (volatile int *)(sbase + OFF_BAR + 56))) {
            if (DQ) bulk_wait_all(); // (the issuing threads) the dQ reductions are done with this CTA's shared memory
            return;
        }
    }

    // --- epilogue: dK_j = scale dK_j, dV_j -> smem ([BN][D + 8], over K_j, V_j) -> global, all BN
    //     rows the sequence owns (keys nobody saw get 0) ----------------------------------------
    // The last step's dQ_i reduction is waited for at the end: the staging lies below the dQ_i tile
    // (static_assert above), so the reduction runs under the stores.
    cp_async_wait<0>();
    if (WS) bar_sync(4, NTHREADS);
    else __syncthreads();
    uint16_t *stK = (uint16_t *)sbase, *stV = stK + BN * (D + 8);
#pragma unroll
    for (int j = 0; j < D / 8; j++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int o = (wg * 64 + wl * 16 + g + 8 * hh) * (D + 8) + 8 * j + 2 * c;
            *(uint32_t *)(stK + o) = pack2<T>(dK[4 * j + 2 * hh] * p.a.scale, dK[4 * j + 2 * hh + 1] * p.a.scale);
            *(uint32_t *)(stV + o) = pack2<T>(dV[4 * j + 2 * hh], dV[4 * j + 2 * hh + 1]);
        }
    if (WS) bar_sync(4, NTHREADS);
    else __syncthreads();
    const int out_rows = min(BN, s.sk_len - n0);
    uint16_t *dKg = (uint16_t *)p.dk + b * p.dk_bs + (s.k_row0 + n0) * p.dk_rs + h_kv * p.dk_hs;
    uint16_t *dVg = (uint16_t *)p.dv + b * p.dv_bs + (s.k_row0 + n0) * p.dv_rs + h_kv * p.dv_hs;
    store_tile<BN, D, D + 8, NTHREADS>(dKg, p.dk_rs, stK, out_rows, p.a.D, p.a.aligned, tid);
    store_tile<BN, D, D + 8, NTHREADS>(dVg, p.dv_rs, stV, out_rows, p.a.D, p.a.aligned, tid);
    if (DQ) bulk_wait_all(); // (the issuing threads) the dQ reductions are done with this CTA's shared memory
#endif
}

// ------------------------------------------------------------------------------------------------
// D = 256: the warpgroups split the head dim
//
// dK_j and dV_j of 64 keys x 256 would take one warpgroup 2 x 128 fp32 registers per thread, so
// at D = 256 the two consumer warpgroups split the columns instead of the keys: warpgroup w owns
// columns 128 w .. 128 w + 127 of dK_j and dV_j (64 + 64 registers) for all BN = 64 keys of the
// CTA. The products with keys or queries as rows split the other way. Per step (query block Q_i of
// BM = 64 rows), warpgroup w, Q_w / dO_w = its 32 of the 64 query rows, [:, w] = its 128 columns:
//   S^T_w  = K_j Q_w^T             wgmma m64n32, both K-major: RS for K_j's first 8 k-steps
//                                  (held as A fragments), SS for the rest     (Alg. 2 line 10)
//   dP^T_w = V_j dO_w^T            wgmma SS m64n32, a second group            (line 12)
//   P^T_w, dS^T_w as in the D <= 128 kernel (sm90_p, sm90_ds; P^T while dP^T runs), then to
//   shared memory ([key][query], swizzled): the products below need all 64 queries
//   dV_w   += P^T dO_i[:, w]       wgmma SS m64n128, dO N-major               (line 13)
//   dK_w   += dS^T Q_i[:, w]       wgmma SS m64n128, Q N-major                (line 16)
// dQ (line 15) is the next kernel's: added here by atomics (dS K_j[:, w], float2 atomics from
// registers; shared memory, 208 KB of 227, has no room for a 64 KB fp32 tile to reduce in bulk),
// the backward ran at half the speed it ran without them (H200, h200-2026-12-01-bwd256.txt:
// 272 against 574 TFLOP/s at S = 16k, non-causal): 64 KB of fp32 reductions per 64 x 64 block step,
// twice D = 128's bytes per FLOP, is more than L2 takes. In bulk it is no better: one kernel
// reducing dQ by TMA through a tile over the step's own Q_i / dO_i columns ran 0.83-0.90x these two
// kernels, by red.global.add.v4 from registers 0.72-0.77x (H200, h200-2026-12-05-s33-call1.txt):
// the L2 takes 3.1-3.9 TB/s of fp32 reductions in this pattern (dev/cuda/redbw.cu), about what
// such a kernel needs at ~530 TFLOP/s (3.4).
// Warpgroup 0 is a TMA producer as in the D <= 128 kernel, for Q_i and dO_i only: each thread
// reads its 8 lse2_i and D_i values from global memory (L2) while S^T and dP^T run (racecheck
// flagged the bulk copies into shared memory against the consumers' reads, though an mbarrier
// ordered them). RAGGED (varlen, seqused_k): both kernels take packed rows and zero the rows past
// a sequence's end in shared memory (sm90_zero_rows), Q_i / dO_i here, K_j / V_j in the dQ kernel
// (there by TMA); H200, 2026-12-03 (h200-2026-12-03-s22.txt call 2, dev/cuda/ab.py --varlen --bwd,
// against the mma.sync kernels varlen ran before): 1.56-2.16x.
// Tried and not kept: steps rotated by n_block, so that concurrent CTAs of a head add to
// different dQ_i rows (with the atomics): 0.95-1.0x.

#define FLASHC_SM90_BWD256_STAGES 2

static constexpr __host__ __device__ int flashc_sm90_bwd256_smem(int STAGES) {
    return 2 * 64 * 256 * 2 + 2 * STAGES * FLASHC_SM90_BWD_BM * 256 * 2 + 2 * 64 * FLASHC_SM90_BWD_BM * 2 + 64 + 1024;
}

template <typename T, int STAGES, bool RAGGED = false>
__global__ void __launch_bounds__(384, 1)
    flashc_bwd_sm90_dkdv256_kernel(const __grid_constant__ flashc_bwd_params p, const __grid_constant__ flashc_sm90_bwd_maps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int D = 256, BM = FLASHC_SM90_BWD_BM, BN = 64, NTHREADS = 256;
    constexpr int TILE_Q = BM * D * 2, TILE_K = BN * D * 2; // bytes
    constexpr int OFF_K = 0, OFF_V = TILE_K, OFF_Q = 2 * TILE_K, OFF_DO = OFF_Q + STAGES * TILE_Q;
    constexpr int OFF_P = OFF_DO + STAGES * TILE_Q, OFF_DS = OFF_P + BN * BM * 2, OFF_BAR = OFF_DS + BN * BM * 2;
    static_assert(OFF_BAR + 64 + 1024 == flashc_sm90_bwd256_smem(STAGES), "smem layout");
    static_assert(2 * BN * (D + 8) * 2 <= OFF_P, "epilogue staging");

    const uint32_t raw = smem_u32(flashc_smem);
    const uint32_t base = (raw + 1023u) & ~1023u;
    char *sbase = (char *)flashc_smem + (base - raw);

    int n_block, b, h_kv;
    bwd_key_block_of_cta(p.a, &n_block, &b, &h_kv, true, p.lpt_sms);
    const flashc_cuda_seq s = cuda_seq(p.a, b);
    const int n0 = n_block * BN;
    if (n0 >= s.sk_len) return;
    int mb_begin, n_mb;
    query_blocks_of_keys(p.a, s, n0, BN, BM, &mb_begin, &n_mb);
    const int count = n_mb * p.a.group; // step it: head h_kv group + it / n_mb, query block mb_begin + it % n_mb
    const sm90_band band = sm90_key_band(p.a, s);

    const uint32_t full0 = base + OFF_BAR, empty0 = full0 + 8 * STAGES;
    if (threadIdx.x == 0) {
        ring_init(full0, empty0, STAGES, 2); // one release per consumer warpgroup
        fence_mbarrier_init();
    }
    __syncthreads();
    if (threadIdx.x < 128) { // --- producer: as flashc_bwd_sm90_kernel's ------------------------------
        reg_dealloc<24>();
        if (threadIdx.x == 0) {
            tma_prefetch_map(&maps.q);
            tma_prefetch_map(&maps.dout);
            for (int it = 0; it < count; it++) {
                const int st = it % STAGES, h = h_kv * p.a.group + it / n_mb, mm0 = (mb_begin + it % n_mb) * BM;
                const uint32_t bar = ring_acquire(full0, empty0, it, STAGES, 2 * TILE_Q);
                const int row = RAGGED ? s.q_row0 + mm0 : mm0, bm = RAGGED && p.a.cu_q ? 0 : b; // varlen: packed rows
                sm90_tma_rows<BM, D * 2, 2>(base + OFF_Q + st * TILE_Q, &maps.q, 0, row, h, bm, bar);
                sm90_tma_rows<BM, D * 2, 2>(base + OFF_DO + st * TILE_Q, &maps.dout, 0, row, h, bm, bar);
            }
        }
        return;
    }
    reg_alloc<240>();
    const int tid = threadIdx.x - 128, wg = warpgroup_uniform(1), wl = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, c = lane & 3;

    float dK[64], dV[64]; // columns 128 wg + 8 j + 2 c (+1) of keys n0 + 16 wl + g (+8): element 4 j + 2 hh + e
#pragma unroll
    for (int i = 0; i < 64; i++) dK[i] = dV[i] = 0.f;

    const uint32_t sK = base + OFF_K, sV = base + OFF_V, sP = base + OFF_P, sdS = base + OFF_DS;
    const int kr0 = n0 + wl * 16 + g; // key of accumulator rows (+ 8 for the odd pairs)
    const int qw = 32 * wg;           // this warpgroup's first query row of Q_i in S^T, dP^T

    if (count > 0) {
        const uint16_t *Kg = (const uint16_t *)p.k + b * p.k_bs + (s.k_row0 + n0) * p.k_rs + h_kv * p.k_hs;
        const uint16_t *Vg = (const uint16_t *)p.v + b * p.v_bs + (s.k_row0 + n0) * p.v_rs + h_kv * p.v_hs;
        sm90_load_tile<BN, D, NTHREADS>(sK, Kg, p.k_rs, s.sk - n0, p.a.D, p.k, tid);
        sm90_load_tile<BN, D, NTHREADS>(sV, Vg, p.v_rs, s.sk - n0, p.a.D, p.v, tid);
        cp_async_commit();
        cp_async_wait<0>();
        fence_proxy_async_smem(); // K_j, V_j (cp.async) -> visible to wgmma
        bar_sync(4, NTHREADS);    // ... of every thread
        // K_j's first KH k-steps held as A fragments: those of S^T_w read only Q_w (1 KB a k-step
        // instead of 3: m64n32 SS wants 1.5x the 128 B a cycle shared memory gives). All 16 would
        // be 64 registers, past the 240 beside dK, dV (ptxas: 200 before).
        constexpr int KH = 8;
        uint32_t Ka[KH][4];
        sm90_load_afrag<16 * KH, BN>(Ka, sK, 0, wl, lane);

        for (int it = 0; it < count; it++) {
            const int st = it % STAGES, h = h_kv * p.a.group + it / n_mb, mm0 = (mb_begin + it % n_mb) * BM;
            const uint32_t sQs = base + OFF_Q + st * TILE_Q, sdOs = base + OFF_DO + st * TILE_Q;
            mbar_wait(full0 + 8 * st, (it / STAGES) & 1); // Q_i, dO_i landed
            if (RAGGED && p.a.cu_q && mm0 + BM > s.sq) { // varlen: the next sequence's rows, zeroed (flashc_bwd_sm90_kernel)
                sm90_zero_rows<BM, D, NTHREADS>(sbase + OFF_Q + st * TILE_Q, sbase + OFF_DO + st * TILE_Q, s.sq - mm0, tid);
                fence_proxy_async_smem();
                bar_sync(4, NTHREADS);
            }

            // S^T_w = K_j Q_w^T, dP^T_w = V_j dO_w^T: two groups, K = D in 16 steps
            float S[16], dP[16];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                if (kk < KH) wgmma_rs_k<T, 32>(S, Ka[kk], sm90_desc_kmajor(sQs, BM, qw, kk), kk);
                else wgmma_ss<T, 32>(S, sm90_desc_kmajor(sK, BN, 0, kk), sm90_desc_kmajor(sQs, BM, qw, kk), 1);
            }
            wgmma_commit();
            sm90_issue_32<T, D>(dP, sV, BN, 0, sdOs, BM, qw);

            // lse2 and D of this thread's queries mm0 + qw + 8 j + 2 c, +1 (padded rows: +inf, 0)
            const int64_t r0 = ws_row(p, b, h, s) + mm0 + qw + 2 * c;
            float2 l2[4], dl[4];
#pragma unroll
            for (int j = 0; j < 4; j++) { // RAGGED: a sequence's rows start anywhere, so no float2 loads
                l2[j] = RAGGED ? make_float2(p.lse2[r0 + 8 * j], p.lse2[r0 + 8 * j + 1]) : *(const float2 *)(p.lse2 + r0 + 8 * j);
                dl[j] = RAGGED ? make_float2(p.delta[r0 + 8 * j], p.delta[r0 + 8 * j + 1]) : *(const float2 *)(p.delta + r0 + 8 * j);
            }
            const int mm_last = min(mm0 + BM, s.sq) - 1;
            const bool masked = !(n0 >= key_lo(p.a, mm_last, s.sq, s.sk) && n0 + BN <= key_hi(p.a, mm0, s.sq, s.sk));
            const float slope = p.a.alibi ? p.a.alibi[b * p.a.alibi_bs + h] : 0.f;

            // P^T_w while dP^T runs; dS^T_w; both to shared memory as [key][query] with the
            // register order of sm90_p: register r of k-step k4 is key row + 8 (r & 1), queries
            // qw + 16 k4 + 8 (r >> 1) + 2c, +1; the row's swizzle is g
            wgmma_wait<1>();
            reg_fence(S);
            uint32_t aP[2][4], adS[2][4];
            const float *l2f = (const float *)l2;
            if (p.a.transform) sm90_p<T, true, true, 16, 2>(S, aP, p.a, s, band, l2f, kr0, mm0 + qw + 2 * c, slope, masked);
            else if (masked) sm90_p<T, false, true, 16, 2>(S, aP, p.a, s, band, l2f, kr0, mm0 + qw + 2 * c, slope, masked);
            else sm90_p<T, false, false, 16, 2>(S, aP, p.a, s, band, l2f, kr0, mm0 + qw + 2 * c, slope, masked);
            bar_sync(4, NTHREADS); // the previous step's products are done with P^T and dS^T
#pragma unroll
            for (int k4 = 0; k4 < 2; k4++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int row = wl * 16 + g + 8 * (r & 1), chunk = qw / 8 + 2 * k4 + (r >> 1);
                    *(uint32_t *)(sbase + OFF_P + row * 128 + ((chunk ^ g) << 4) + 4 * c) = aP[k4][r];
                }
            wgmma_wait<0>();
            reg_fence(dP);
            sm90_ds<T, 16, 2>(S, dP, (const float *)dl, adS);
#pragma unroll
            for (int k4 = 0; k4 < 2; k4++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int row = wl * 16 + g + 8 * (r & 1), chunk = qw / 8 + 2 * k4 + (r >> 1);
                    *(uint32_t *)(sbase + OFF_DS + row * 128 + ((chunk ^ g) << 4) + 4 * c) = adS[k4][r];
                }
            fence_proxy_async_smem();
            bar_sync(4, NTHREADS); // P^T, dS^T of both warpgroups are in shared memory

            // dV_w += P^T dO_i[:, w], dK_w += dS^T Q_i[:, w] (scale applied at the end); K = BM = 64
            // in 4 steps; column block 2 wg of the tiles
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                wgmma_ss_t<T, 128, 0, 1>(dV, sm90_desc_kmajor(sP, BN, 0, kk),
                                         sm90_desc_mnmajor(sdOs + 2 * wg * BM * 128, BM, kk), 1);
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                wgmma_ss_t<T, 128, 0, 1>(dK, sm90_desc_kmajor(sdS, BN, 0, kk),
                                         sm90_desc_mnmajor(sQs + 2 * wg * BM * 128, BM, kk), 1);
            wgmma_commit();
            wgmma_wait<0>();
            reg_fence(dK);
            reg_fence(dV);
            if ((tid & 127) == 0) mbar_arrive(empty0 + 8 * st); // Q_i, dO_i are free for step it + STAGES
        }
    }

    // --- epilogue: dK_j = scale dK_j, dV_j -> smem ([BN][D + 8], over K_j, V_j, Q_i) -> global ----
    bar_sync(4, NTHREADS); // both warpgroups are done with Q_i (their last dK) before the staging overwrites it
    uint16_t *stK = (uint16_t *)sbase, *stV = stK + BN * (D + 8);
#pragma unroll
    for (int j = 0; j < 16; j++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int o = (wl * 16 + g + 8 * hh) * (D + 8) + 128 * wg + 8 * j + 2 * c;
            *(uint32_t *)(stK + o) = pack2<T>(dK[4 * j + 2 * hh] * p.a.scale, dK[4 * j + 2 * hh + 1] * p.a.scale);
            *(uint32_t *)(stV + o) = pack2<T>(dV[4 * j + 2 * hh], dV[4 * j + 2 * hh + 1]);
        }
    bar_sync(4, NTHREADS);
    const int out_rows = min(BN, s.sk_len - n0);
    uint16_t *dKg = (uint16_t *)p.dk + b * p.dk_bs + (s.k_row0 + n0) * p.dk_rs + h_kv * p.dk_hs;
    uint16_t *dVg = (uint16_t *)p.dv + b * p.dv_bs + (s.k_row0 + n0) * p.dv_rs + h_kv * p.dv_hs;
    store_tile<BN, D, D + 8, NTHREADS>(dKg, p.dk_rs, stK, out_rows, p.a.D, p.a.aligned, tid);
    store_tile<BN, D, D + 8, NTHREADS>(dVg, p.dv_rs, stV, out_rows, p.a.D, p.a.aligned, tid);
#endif
}

// ------------------------------------------------------------------------------------------------
// D = 256, and the deterministic mode at D = 64 / 128: dQ without atomics
//
// The forward's way: one CTA per (query block Q_i of BM = 64 rows, batch, head) walks the key
// blocks K_j, V_j (BN = 64) its rows see and recomputes, per warpgroup w,
//   S_w  = Q_i K_w^T     wgmma RS m64n32 (Q_i held), K_w: keys 32 w .. + 31 of K_j (Alg. 2 line 10)
//   dP_w = dO_i V_w^T    m64n32, a second group: RS at D <= 128 (dO_i held), else SS  (line 12)
//   dS_w = P dsf (dP_w - D_i), P = exp2(S_w scale log2e - lse2_i) while dP runs   (lines 11, 14)
//   dQ_w += dS K_j[:, w] wgmma SS m64n(D / 2) (dS through shared memory: both halves
//                        of the keys), columns D / 2 w .. in registers            (line 15)
// and stores dQ_i = scale dQ once, to dq: no dq_acc, no conversion, no atomics, so the whole D = 256
// backward returns the same bits run to run. Warpgroup 0 is the TMA producer (Q_i and dO_i once,
// K_j and V_j into a STAGES-deep ring on full / empty mbarriers).
// Recomputing S and dP costs 2 of these 7 products per block pair (5 with atomics), and still the
// two kernels ran 1.26-1.73x the one with atomics (H200, h200-2026-12-01-bwd256.txt, S = 512..16k).
// D = 64 / 128 run it in the deterministic mode only, after flashc_bwd_sm90_kernel without its dQ
// (DQ = false): the atomic mode's dq_acc reductions are cheaper there than recomputing S and dP.

static constexpr __host__ __device__ int flashc_sm90_bwd_dq_smem(int D, int STAGES) {
    return 2 * FLASHC_SM90_BWD_BM * D * 2 + 2 * STAGES * 64 * D * 2 + FLASHC_SM90_BWD_BM * 64 * 2 + 64 + 1024;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// S (queries x keys, raw q.k) -> P dsf in place (0 where masked; dsf as sm90_p), the m64n32
// accumulator of this thread: element 4 j + 2 hh + e is query q0 + 8 hh, key k0 + 8 j + e;
// l2[hh]: lse2 of its query. The math of sm90_p, untransposed.
template <bool TRANSFORM>
static __device__ __forceinline__ void sm90_p_rows(float (&S)[16], const flashc_cuda_attn &a, const flashc_cuda_seq &s,
                                                   const float (&l2)[2], int q0, int k0, float slope, bool masked) {
    const float sl2 = TRANSFORM ? 1.f : a.scale_log2;
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int q = q0 + 8 * hh, diag = q + s.sk - s.sq;
        int lo = 0, hi = 0x7fffffff;
        if (masked) {
            lo = key_lo(a, q, s.sq, s.sk);
            hi = key_hi(a, q, s.sq, s.sk);
        }
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int i = 4 * j + 2 * hh + e, key = k0 + 8 * j + e;
                float dsf;
                const float x = bwd_logit<TRANSFORM>(S[i], a, diag - key, slope, &dsf);
                float Pv = ex2(fmaf(x, sl2, -l2[hh]));
                if (key < lo || key >= hi) Pv = 0.f;
                S[i] = Pv * dsf;
            }
    }
}
#endif

template <typename T, int D, int STAGES, bool RAGGED = false>
__global__ void __launch_bounds__(384, 1)
    flashc_bwd_sm90_dq_kernel(const __grid_constant__ flashc_bwd_params p, const __grid_constant__ flashc_sm90_bwd_maps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = FLASHC_SM90_BWD_BM, BN = 64, NTHREADS = 256, DW = D / 2; // DW: a warpgroup's dQ columns
    static_assert(D == 64 || D == 128 || D == 256, "head dim");
    // warpgroup w's columns DW w .. of K_j: column block DW w / 64, + 2 (DW w % 64) bytes inside its
    // 128-byte rows (D = 64: the start moves inside the swizzle atom, as a K-major k-step's does)
    constexpr int K_COL0 = DW / 64 * BN * 128, K_COL0_IN = DW % 64 * 2;
    constexpr int TILE_Q = BM * D * 2, TILE_K = BN * D * 2; // bytes
    constexpr int OFF_Q = 0, OFF_DO = TILE_Q, OFF_K = 2 * TILE_Q, OFF_V = OFF_K + STAGES * TILE_K;
    constexpr int OFF_DS = OFF_V + STAGES * TILE_K, OFF_BAR = OFF_DS + BM * BN * 2;
    static_assert(OFF_BAR + 64 + 1024 == flashc_sm90_bwd_dq_smem(D, STAGES), "smem layout");
    static_assert(BM * (D + 8) * 2 <= STAGES * TILE_K, "epilogue staging");

    const uint32_t raw = smem_u32(flashc_smem);
    const uint32_t base = (raw + 1023u) & ~1023u;
    char *sbase = (char *)flashc_smem + (base - raw);

    // --- which (query block, batch, head): the query blocks of one head are neighbours (K, V stay
    //     in L2), the longest first (causal); a causal grid's last heads block outer (grid_tail_lpt)
    const int n_mblocks = (p.a.Sq + BM - 1) / BM;
    int bh, m_last;
    grid_tail_lpt((int)blockIdx.x, n_mblocks, p.a.B * p.a.H, p.lpt_sms, &bh, &m_last);
    const int m_block = n_mblocks - 1 - m_last;
    const int h = bh % p.a.H, b = bh / p.a.H, h_kv = h / p.a.group;
    const flashc_cuda_seq s = cuda_seq(p.a, b);
    const int mm0 = m_block * BM;
    if (mm0 >= s.sq) return;
    int nb_min, nb_max, full_lo, full_hi;
    key_blocks_of_rows(p.a, s, mm0, min(BM, s.sq - mm0), BN, &nb_min, &nb_max, &full_lo, &full_hi);
    const int n_blocks = max(nb_max - nb_min, 0);

    const uint32_t fullQ = base + OFF_BAR, full0 = fullQ + 8, empty0 = full0 + 8 * STAGES;
    if (threadIdx.x == 0) {
        mbar_init(fullQ, 1);
        ring_init(full0, empty0, STAGES, 2); // one release per consumer warpgroup
        fence_mbarrier_init();
    }
    __syncthreads();
    if (threadIdx.x < 128) { // --- producer ----------------------------------------------------------
        reg_dealloc<24>();
        if (threadIdx.x == 0 && n_blocks > 0) {
            tma_prefetch_map(&maps.k);
            tma_prefetch_map(&maps.v);
            const int bm = RAGGED && p.a.cu_q ? 0 : b, q_row0 = RAGGED ? s.q_row0 : 0, k_row0 = RAGGED ? s.k_row0 : 0; // varlen: packed rows
            mbar_expect_tx(fullQ, 2 * TILE_Q);
            sm90_tma_rows<BM, D * 2, 2>(base + OFF_Q, &maps.q, 0, q_row0 + mm0, h, bm, fullQ);
            sm90_tma_rows<BM, D * 2, 2>(base + OFF_DO, &maps.dout, 0, q_row0 + mm0, h, bm, fullQ);
            for (int t = 0; t < n_blocks; t++) {
                const int st = t % STAGES, n0 = (nb_min + t) * BN;
                const uint32_t bar = ring_acquire(full0, empty0, t, STAGES, 2 * TILE_K);
                sm90_tma_rows<BN, D * 2, 2>(base + OFF_K + st * TILE_K, &maps.k, 0, k_row0 + n0, h_kv, bm, bar);
                sm90_tma_rows<BN, D * 2, 2>(base + OFF_V + st * TILE_K, &maps.v, 0, k_row0 + n0, h_kv, bm, bar);
            }
        }
        return;
    }
    reg_alloc<240>();
    const int tid = threadIdx.x - 128, wg = warpgroup_uniform(1), wl = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, c = lane & 3;
    const int r0 = wl * 16 + g; // this thread's rows r0, r0 + 8 of Q_i

    float dQ[DW / 2]; // rows r0 (+8), columns DW wg + 8 j + 2 c (+1): element 4 j + 2 hh + e
#pragma unroll
    for (int i = 0; i < DW / 2; i++) dQ[i] = 0.f;

    if (n_blocks > 0) {
        const uint32_t sQ = base + OFF_Q, sdO = base + OFF_DO, sdS = base + OFF_DS;
        const int64_t wr = ws_row(p, b, h, s) + mm0 + r0; // padded rows hold (+inf, 0)
        const float l2[2] = {p.lse2[wr], p.lse2[wr + 8]}, dl[2] = {p.delta[wr], p.delta[wr + 8]};
        const float slope = p.a.alibi ? p.a.alibi[b * p.a.alibi_bs + h] : 0.f;
        mbar_wait(fullQ, 0); // (RAGGED: Q_i, dO_i rows past sq need no zeros: row q of dQ_i reads
                             // row q of dS only, and rows past sq are not stored)
        // Q_i, and at D <= 128 dO_i, held as A fragments for the whole walk: S_w and dP_w by wgmma
        // RS read only K_w, V_w from shared memory. As SS, m64n32 reads 3 KB a k-step (A 2, B 1) in
        // 16 tensor-core cycles, 1.5x what shared memory gives (128 B a cycle), so S and dP ran
        // bound by shared memory. D = 256 holds Q_i only: its 64 registers fit beside dQ's 64 (ptxas:
        // 154 registers before), dO_i's would not.
        constexpr bool DO_REGS = D <= 128;
        uint32_t Qa[D / 16][4], dOa[DO_REGS ? D / 16 : 1][4];
        sm90_load_afrag<D, BM>(Qa, sQ, 0, wl, lane);
        if constexpr (DO_REGS) sm90_load_afrag<D, BM>(dOa, sdO, 0, wl, lane);

        for (int t = 0; t < n_blocks; t++) {
            const int st = t % STAGES, n0 = (nb_min + t) * BN;
            const uint32_t sK = base + OFF_K + st * TILE_K, sV = base + OFF_V + st * TILE_K;
            mbar_wait(full0 + 8 * st, (t / STAGES) & 1); // K_j, V_j landed
            // RAGGED: key rows past sk (the next sequence's, or past seqused_k) zeroed: V = Inf
            // there reaches dQ through dS = 0 x Inf, K = NaN through 0 x NaN
            if (RAGGED && n0 + BN > s.sk) {
                sm90_zero_rows<BN, D, NTHREADS>(sbase + OFF_K + st * TILE_K, sbase + OFF_V + st * TILE_K, s.sk - n0, tid);
                fence_proxy_async_smem();
                bar_sync(4, NTHREADS);
            }

            float S[16], dP[16];
            wgmma_fence();
            sm90_issue_rs_k<T, D, 32>(S, Qa, sK, BN, 32 * wg); // (RS: 1 KB of shared memory a k-step, not 3)
            if constexpr (DO_REGS) sm90_issue_rs_k<T, D, 32>(dP, dOa, sV, BN, 32 * wg);
            else sm90_issue_32<T, D>(dP, sdO, BM, 0, sV, BN, 32 * wg);

            const bool masked = !(n0 >= full_lo && n0 + BN <= full_hi);
            wgmma_wait<1>();
            reg_fence(S);
            if (p.a.transform) sm90_p_rows<true>(S, p.a, s, l2, mm0 + r0, n0 + 32 * wg + 2 * c, slope, masked);
            else sm90_p_rows<false>(S, p.a, s, l2, mm0 + r0, n0 + 32 * wg + 2 * c, slope, masked);
            wgmma_wait<0>();
            reg_fence(dP);
            // dS_w -> shared memory [query][key], swizzled: query row r0 + 8 hh, keys 32 wg + 8 j + 2 c, +1
            bar_sync(4, NTHREADS); // the previous step's dQ products are done with dS
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    const int i = 4 * j + 2 * hh, chunk = 4 * wg + j;
                    *(uint32_t *)(sbase + OFF_DS + (r0 + 8 * hh) * 128 + ((chunk ^ g) << 4) + 4 * c) =
                        pack2<T>(S[i] * (dP[i] - dl[hh]), S[i + 1] * (dP[i + 1] - dl[hh]));
                }
            fence_proxy_async_smem();
            bar_sync(4, NTHREADS); // dS of both warpgroups is in shared memory

            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                wgmma_ss_t<T, DW, 0, 1>(dQ, sm90_desc_kmajor(sdS, BM, 0, kk),
                                        sm90_desc_mnmajor(sK + wg * (K_COL0 + K_COL0_IN), BN, kk), 1);
            wgmma_commit();
            wgmma_wait<0>();
            reg_fence(dQ);
            if ((tid & 127) == 0) mbar_arrive(empty0 + 8 * st); // K_j, V_j are free for block t + STAGES
        }
    }

    // --- epilogue: dQ_i = scale dQ -> smem [BM][D + 8] (over the K ring) -> dq --------------------
    bar_sync(4, NTHREADS); // both warpgroups are done with the K ring
    uint16_t *stQ = (uint16_t *)(sbase + OFF_K);
    const int64_t wr = ws_row(p, b, h, s) + mm0 + r0; // padded rows hold +inf
    const float l2[2] = {p.lse2[wr], p.lse2[wr + 8]};
#pragma unroll
    for (int j = 0; j < DW / 8; j++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
            *(uint32_t *)(stQ + (r0 + 8 * hh) * (D + 8) + DW * wg + 8 * j + 2 * c) =
                pack2<T>(bwd_dq_out(dQ[4 * j + 2 * hh], p.a.scale, l2[hh]),
                         bwd_dq_out(dQ[4 * j + 2 * hh + 1], p.a.scale, l2[hh]));
    bar_sync(4, NTHREADS);
    uint16_t *dQg = (uint16_t *)p.dq + b * p.dq_bs + (s.q_row0 + mm0) * p.dq_rs + h * p.dq_hs;
    store_tile<BM, D, D + 8, NTHREADS>(dQg, p.dq_rs, stQ, min(BM, s.sq - mm0), p.a.D, p.a.aligned, tid);
#endif
}

// The TMA maps: Q and dO (boxes of bm rows x 64 columns, bm the query step of the kernel that reads
// them), and with kv (the dQ kernel) K and V (64 rows); varlen: of the packed rows. False (the
// caller falls back) for bases not 128-byte aligned (as flashc_sm90_make_maps) or strides the
// driver refuses.
template <int D>
static bool flashc_sm90_bwd_make_maps(const flashc_bwd_params *p, flashc_sm90_bwd_maps *m, bool kv,
                                      int bm = flashc_sm90_bwd_bm(D)) {
    const flashc_cuda_attn &a = p->a;
    const bool packed = a.cu_q != NULL;
    if (((uintptr_t)p->q | (uintptr_t)p->dout | (kv ? (uintptr_t)p->k | (uintptr_t)p->v : 0)) & 127) return false;
    const uint64_t dim[4] = {(uint64_t)a.D, (uint64_t)(packed ? a.total_q : a.Sq), (uint64_t)a.H, (uint64_t)(packed ? 1 : a.B)};
    const uint64_t kdim[4] = {(uint64_t)a.D, (uint64_t)(packed ? a.total_k : a.Sk), (uint64_t)a.H_kv, (uint64_t)(packed ? 1 : a.B)};
    const int64_t qst[3] = {p->q_rs * 2, p->q_hs * 2, p->q_bs * 2}, dst[3] = {p->do_rs * 2, p->do_hs * 2, p->do_bs * 2};
    const int64_t kst[3] = {p->k_rs * 2, p->k_hs * 2, p->k_bs * 2}, vst[3] = {p->v_rs * 2, p->v_hs * 2, p->v_bs * 2};
    return sm90_tma_map(&m->q, p->q, 2, dim, qst, bm) && sm90_tma_map(&m->dout, p->dout, 2, dim, dst, bm) &&
           (!kv || (sm90_tma_map(&m->k, p->k, 2, kdim, kst, 64) && sm90_tma_map(&m->v, p->v, 2, kdim, vst, 64)));
}

// The D <= 128 kernel's dq_acc map: [ws_rows][D] fp32, boxes of 64 rows x 32 columns; false (the
// caller runs the mma.sync backward) for rows past int32, no rows, or a dq_acc not 128-byte
// aligned (cuda_bwd aligns it inside the workspace, so only a guard).
template <int D>
static bool flashc_sm90_bwd_dq_map(const flashc_bwd_params *p, CUtensorMap *m) {
    if (((uintptr_t)p->dq_acc & 127) || p->ws_rows > 0x7fffffffLL) return false;
    const uint64_t dim[4] = {(uint64_t)D, (uint64_t)p->ws_rows, 1, 1};
    const int64_t st[3] = {D * 4, 16, 16};
    return sm90_tma_map(m, p->dq_acc, 4, dim, st, 64);
}

// One launch of any of this file's kernels: its shared memory asked first (past 48 KB it must be),
// nothing launched for an empty grid, a grid past int32 refused.
typedef void (*flashc_sm90_bwd_fn)(const flashc_bwd_params, const flashc_sm90_bwd_maps);
static cudaError_t flashc_sm90_bwd_go(flashc_sm90_bwd_fn k, long long blocks, int threads, int smem, const flashc_bwd_params *p,
                                      const flashc_sm90_bwd_maps &maps, cudaStream_t stream, bool pdl = false) {
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess || !blocks) return e;
    if (!pdl) {
        k<<<(unsigned)blocks, threads, smem, stream>>>(*p, maps);
        return cudaGetLastError();
    }
    cudaLaunchAttribute at = {};
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)blocks);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.dynamicSmemBytes = (size_t)smem;
    cfg.stream = stream;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    if (cudaLaunchKernelEx(&cfg, k, *p, maps) == cudaSuccess) return cudaSuccess;
    // PDL refused (the first launch has already left the tail's blocks to this one): launched plainly,
    // the pieces start after the whole blocks, and griddepcontrol.wait has nothing to wait for
    (void)cudaGetLastError();
    k<<<(unsigned)blocks, threads, smem, stream>>>(*p, maps);
    return cudaGetLastError();
}

template <typename T, int D, bool WS, int STAGES, bool RAGGED = false, bool DQ = true>
static cudaError_t flashc_cuda_bwd_sm90_run(flashc_bwd_params *p, const flashc_sm90_bwd_maps &maps, cudaStream_t stream) {
    constexpr int BN = 128;
    const long long blocks = (long long)((p->a.Sk + BN - 1) / BN) * p->a.B * p->a.H_kv;
    cudaError_t e = flashc_sm90_bwd_go(flashc_bwd_sm90_kernel<T, D, WS, STAGES, RAGGED, DQ>, blocks, 128 * (2 + WS),
                                       flashc_sm90_bwd_smem(D, STAGES), p, maps, stream);
    if constexpr (WS && STAGES == 2 && !RAGGED)
        if (e == cudaSuccess && p->sk_pieces > 1) // the tail split's pieces (sm90_bwd_piece_of), an instance of their own
            e = flashc_sm90_bwd_go(flashc_bwd_sm90_kernel<T, D, WS, STAGES, false, DQ, true>,
                                   (blocks - p->sk_tail0) * p->sk_pieces, 128 * (2 + WS), flashc_sm90_bwd_smem(D, STAGES), p,
                                   maps, stream, true);
    return e;
}

// WS: the cp.async mode where the maps cannot be made; varlen on the RAGGED instance (2 stages).
template <typename T, int D, bool WS, int STAGES>
static cudaError_t flashc_cuda_bwd_sm90_main(flashc_bwd_params *p, flashc_sm90_bwd_maps maps, cudaStream_t stream) {
    if (WS && !flashc_sm90_bwd_make_maps<D>(p, &maps, false)) return flashc_cuda_bwd_sm90_run<T, D, false, 2>(p, maps, stream);
    if (WS && p->a.cu_q) return flashc_cuda_bwd_sm90_run<T, D, true, 2, true>(p, maps, stream);
    return flashc_cuda_bwd_sm90_run<T, D, WS, STAGES>(p, maps, stream);
}

// The two-kernel backward, D = 256 in both modes and D = 64 / 128 in the deterministic one: the
// pre-pass, the dK/dV kernel (D = 256: its own; else flashc_bwd_sm90_kernel without its dQ), then
// the dQ kernel (no dq_acc, no atomics), when the maps encode; else the mma.sync backward. At D = 64
// the dK/dV kernel steps 128 query rows and the dQ kernel 64: a map set each.
template <typename T, int D>
static cudaError_t flashc_cuda_bwd_sm90_two(flashc_bwd_params *p, cudaStream_t stream) {
    constexpr int STAGES = FLASHC_SM90_BWD256_STAGES, smem_dq = flashc_sm90_bwd_dq_smem(D, STAGES);
    constexpr bool ONE_MAP_SET = flashc_sm90_bwd_bm(D) == FLASHC_SM90_BWD_BM;
    flashc_sm90_bwd_maps maps = {}, maps_dq = {};
    if (!flashc_sm90_bwd_make_maps<D>(p, &maps, true) ||
        (!ONE_MAP_SET && !flashc_sm90_bwd_make_maps<D>(p, &maps_dq, true, FLASHC_SM90_BWD_BM)))
        return flashc_cuda_bwd_launch<T, D>(p, stream);
    p->D_pad = D;
    if ((long long)p->a.B * p->a.H == 0) return cudaSuccess;
    const long long qblocks = (long long)((p->a.Sq + FLASHC_SM90_BWD_BM - 1) / FLASHC_SM90_BWD_BM) * p->a.B * p->a.H;
    if (qblocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    p->dq_acc = NULL; // the pre-pass zeroes no dq_acc
    cudaError_t e;
    if ((e = flashc_cuda_bwd_prepass<T, D>(p, stream)) != cudaSuccess) return e;
    // varlen, seqused_k: the RAGGED instances (rows past a sequence's end zeroed in shared memory)
    const bool ragged = p->a.cu_q || p->a.seqused_k;
    if constexpr (D == 256) {
        const long long blocks = (long long)((p->a.Sk + 63) / 64) * p->a.B * p->a.H_kv;
        e = flashc_sm90_bwd_go(ragged ? flashc_bwd_sm90_dkdv256_kernel<T, STAGES, true> : flashc_bwd_sm90_dkdv256_kernel<T, STAGES>,
                               blocks, 384, flashc_sm90_bwd256_smem(STAGES), p, maps, stream);
    } else { // (its RAGGED instance is for varlen only: K_j, V_j come by cp.async there)
        e = p->a.cu_q ? flashc_cuda_bwd_sm90_run<T, D, true, 2, true, false>(p, maps, stream)
                      : flashc_cuda_bwd_sm90_run<T, D, true, 2, false, false>(p, maps, stream);
    }
    if (e != cudaSuccess) return e;
    return flashc_sm90_bwd_go(ragged ? flashc_bwd_sm90_dq_kernel<T, D, STAGES, true> : flashc_bwd_sm90_dq_kernel<T, D, STAGES>,
                              qblocks, 384, smem_dq, p, ONE_MAP_SET ? maps : maps_dq, stream);
}

// The launcher: the two kernels above (D = 256; the deterministic mode), else the dq_acc zero and
// pre-pass, flashc_bwd_sm90_kernel, and the dQ conversion (flashc_cuda_bwd.cuh).
template <typename T, int D>
cudaError_t flashc_cuda_bwd_sm90_launch(flashc_bwd_params *p, cudaStream_t stream) {
    if constexpr (D == 256) {
        return flashc_cuda_bwd_sm90_two<T, D>(p, stream);
    } else {
        if (p->deterministic) return flashc_cuda_bwd_sm90_two<T, D>(p, stream);
        flashc_sm90_bwd_maps maps = {};
        if (!flashc_sm90_bwd_dq_map<D>(p, &maps.dq)) return flashc_cuda_bwd_launch<T, D>(p, stream);
        p->D_pad = D;
        if ((long long)p->a.B * p->a.H == 0) return cudaSuccess;
        cudaError_t e;
        if ((e = flashc_cuda_bwd_prepass<T, D>(p, stream)) != cudaSuccess) return e;
        // 2 warpgroups: H200 2026-11-29 (dev/cuda/bench_bwd.py, bf16, hidden 2048, B * S = 16k), D = 128
        // non-causal S = 1k / 4k / 16k: 253 / 297 / 308 TFLOP/s with 2, 149 / 204 / 248 with 1
        // 2 warpgroups + the TMA producer, 2 Q_i stages: see the kernel's comment for the measurements
        if constexpr (D == 64) // see the top; FLASHC_CUDA_SM90=1 / 2: the cp.async mode (A/B)
            e = p->sm90_loop == 1 || p->sm90_loop == 2 ? flashc_cuda_bwd_sm90_main<T, D, false, 2>(p, maps, stream)
                                                       : flashc_cuda_bwd_sm90_main<T, D, true, 2>(p, maps, stream);
        else
            e = p->sm90_loop == 1 || p->sm90_loop == 2 ? flashc_cuda_bwd_sm90_main<T, D, false, 2>(p, maps, stream)
                : p->sm90_loop == 4                    ? flashc_cuda_bwd_sm90_main<T, D, true, 3>(p, maps, stream)
                                                       : flashc_cuda_bwd_sm90_main<T, D, true, 2>(p, maps, stream);
        if (e != cudaSuccess) return e;
        return flashc_cuda_bwd_finish<T, D>(p, stream);
    }
}

#endif // FLASHC_SM90_BWD_CUH
