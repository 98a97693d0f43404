// flashc_sm90_fwd.cuh -- the Hopper forward kernel (FlashAttention-2 Algorithm 1 on wgmma) and its
// launcher. Included by the generated inst/flashc_fwd_hd*_*_sm90.cu files only (built for sm_90a).
// flashc_cuda.cu dispatches to it on compute capability 9.0 when every tensor allows 16-byte
// access; everything else runs the mma.sync kernel of flashc_cuda_fwd.cuh.
//
// One CTA = NWG warpgroups, each owning 64 query rows of the BM = 64 NWG rows of Q_i (wgmma's M is
// 64), so m_i, l_i and O_i of a row stay in one warpgroup (in fact in one quad of one warp, as
// in the mma.sync kernel). No producer warp: every thread issues cp.async into the 128B-swizzled
// tiles of flashc_sm90.cuh, which also zero-fills ragged tails and padded head-dim columns, so
// varlen, seqused_k and any seqlen need nothing special. Per key block j, per warpgroup:
//   S_ij = Q_i K_j^T      wgmma SS (both K-major), D / 16 k-steps, N = BN
//   O_i += P_i,j-1 V_j-1  wgmma RS (P from registers: the S accumulator layout is the A layout,
//                         HOPPER-NOTES 1.7), V MN-major, BN / 16 k-steps, N = D
// The PV of the previous block is issued right after this block's S and runs while the softmax
// of S_ij executes (FA3's intra-warpgroup overlap: wait_group 1 frees S, wait_group 0 then frees
// O for the rescale). Loads run one block ahead: at the top of iteration t (after one CTA
// barrier) K_t+1 and V_t are issued into the buffers whose last readers (S_t-1, PV_t-2) every
// warpgroup has already waited for, so two K and two V buffers suffice.
#ifndef FLASHC_SM90_FWD_CUH
#define FLASHC_SM90_FWD_CUH

#include "flashc_cuda_common.cuh"
#include "flashc_cuda_tune.h"
#include "flashc_sm90.cuh"

// ROWS x D tile from rows 0..nrows-1 of g (row stride rs), columns 0..Dact-1 (zero elsewhere),
// into the swizzled layout at shared address tile; cp.async by NTHREADS threads, the caller
// commits. Needs 16-byte aligned pointers and strides (the dispatch checks). With NTHREADS / (D / 8)
// a multiple of 8, a thread's rows all have the same r & 7, so its swizzled chunk is fixed.
template <int ROWS, int D, int NTHREADS>
static __device__ __forceinline__ void sm90_load_tile(uint32_t tile, const uint16_t *g, int64_t rs, int nrows,
                                                      int Dact, const void *safe, int tid) {
    constexpr int CPR = D / 8, RSTEP = NTHREADS / CPR;
    static_assert(NTHREADS % CPR == 0 && RSTEP % 8 == 0, "thread shape");
    const int r0 = tid / CPR, c = tid % CPR;
    const bool col_ok = c * 8 < Dact;
    const uint16_t *src = g + (int64_t)r0 * rs + c * 8;
    const int64_t step = (int64_t)RSTEP * rs;
    uint32_t dst = tile + sw128_offset(ROWS, r0, c * 8);
#pragma unroll 1
    for (int r = r0; r < ROWS; r += RSTEP) {
        const bool ok = col_ok && r < nrows;
        cp_async_16(dst, ok ? (const void *)src : safe, ok ? 16 : 0);
        src += step;
        dst += RSTEP * 128;
    }
}

// Accumulator element i of thread lane l (within its warp) sits at row 8 ((i >> 1) & 1) + l / 4
// of the warp's 16 rows, column 8 (i >> 2) + 2 (l % 4) + (i & 1) (HOPPER-NOTES 1.6).

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

// Q_i K_j^T for this warpgroup's 64 rows: S = (D / 16 wgmma k-steps), committed as one group.
template <typename T, int D, int BM, int BN>
static __device__ __forceinline__ void sm90_issue_qk(float *S, uint32_t sQ, uint32_t sK, int wg) {
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        wgmma_ss<T, BN>(S, sm90_desc_kmajor(sQ, BM, 64 * wg, kk), sm90_desc_kmajor(sK, BN, 0, kk), kk > 0);
    wgmma_commit();
}

// O += P V_j (BN / 16 k-steps), committed as one group.
template <typename T, int D, int BN>
static __device__ __forceinline__ void sm90_issue_pv(float *O, const uint32_t (*P)[4], uint32_t sV) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) wgmma_rs<T, D>(O, P[kk], sm90_desc_mnmajor(sV, BN, kk), 1);
    wgmma_commit();
}

// ------------------------------------------------------------------------------------------------
// the kernel

template <typename T, int D, int NWG, int BN>
__global__ void __launch_bounds__(NWG * 128, 1) flashc_fwd_sm90_kernel(const __grid_constant__ flashc_fwd_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int NTHREADS = NWG * 128, BM = NWG * 64;
    constexpr uint32_t Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
    static_assert(D % 64 == 0 && BN % 16 == 0 && Q_BYTES % 1024 == 0 && KV_BYTES % 1024 == 0, "tile shape");

    // 1024-byte aligned tiles (the swizzle pattern repeats every 1024 B of absolute address)
    const uint32_t base = (smem_u32(flashc_smem) + 1023u) & ~1023u;
    const uint32_t sQ = base, sK0 = sQ + Q_BYTES, sV0 = sK0 + 2 * KV_BYTES;

    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, warp = (tid >> 5) & 3;

    // --- which (query block, batch, head): heaviest query blocks first ---------------------------
    const int BH = p.a.B * p.a.H;
    const int m_block = p.n_m_blocks - 1 - (int)(blockIdx.x / BH);
    const int bh = (int)(blockIdx.x % BH), h = bh % p.a.H, b = bh / p.a.H;
    const flashc_cuda_seq s = cuda_seq(p.a, b);
    const int m0 = m_block * BM;
    if (m0 >= s.sq) return;
    const int h_kv = h / p.a.group;
    const int m_rows = min(BM, s.sq - m0);
    const int trow = wg * 64 + warp * 16 + (lane >> 2);  // this thread's first row in the block (and +8)

    const uint16_t *Qg = (const uint16_t *)p.q + b * p.q_bs + (s.q_row0 + m0) * p.q_rs + h * p.q_hs;
    const uint16_t *Kg = (const uint16_t *)p.k + b * p.k_bs + s.k_row0 * p.k_rs + h_kv * p.k_hs;
    const uint16_t *Vg = (const uint16_t *)p.v + b * p.v_bs + s.k_row0 * p.v_rs + h_kv * p.v_hs;

    // --- key blocks this query block needs (causal / window skip whole blocks) -------------------
    const int m_last = m0 + m_rows - 1;
    const int n_lo = key_lo(p.a, m0, s.sq, s.sk), n_hi = key_hi(p.a, m_last, s.sq, s.sk);
    const int nb_min = n_lo / BN;
    const int nb_max = n_hi > n_lo ? (n_hi + BN - 1) / BN : nb_min; // exclusive
    const int full_lo = key_lo(p.a, m_last, s.sq, s.sk), full_hi = key_hi(p.a, m0, s.sq, s.sk);

    const float slope = p.a.alibi ? p.a.alibi[b * p.a.alibi_bs + h] : 0.f;
    const float sl2 = p.a.transform ? 1.f : p.a.scale_log2;

    // --- init: m_i = -inf, l_i = 0, O_i = 0        (Alg. 1 line 6) ------------------------------
    float O[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) O[i] = 0.f;
    float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.f, 0.f};

    if (nb_max > nb_min) {
        sm90_load_tile<BM, D, NTHREADS>(sQ, Qg, p.q_rs, m_rows, p.a.D, p.q, tid);
        {
            const int n0 = (nb_max - 1) * BN;
            sm90_load_tile<BN, D, NTHREADS>(sK0, Kg + (int64_t)n0 * p.k_rs, p.k_rs, s.sk - n0, p.a.D, p.k, tid);
        }
        cp_async_commit();

        uint32_t P[BN / 16][4]; // P_ij as the A operand of the next PV (bf16/f16 pairs)
        int t = 0;
        // --- for each key block j, right to left (masked diagonal blocks of causal first) -------
        for (int nb = nb_max - 1; nb >= nb_min; nb--, t++) {
            const int n0 = nb * BN;
            cp_async_wait<0>();
            fence_proxy_async_smem();
            __syncthreads(); // K_j and V_j+1 landed; every warpgroup is done with the buffers refilled below
            const uint32_t sK = sK0 + (t & 1) * KV_BYTES;
            {
                if (nb > nb_min) { // K of the next block
                    const int n1 = n0 - BN;
                    sm90_load_tile<BN, D, NTHREADS>(sK0 + ((t + 1) & 1) * KV_BYTES, Kg + (int64_t)n1 * p.k_rs, p.k_rs,
                                                    s.sk - n1, p.a.D, p.k, tid);
                }
                sm90_load_tile<BN, D, NTHREADS>(sV0 + (t & 1) * KV_BYTES, Vg + (int64_t)n0 * p.v_rs, p.v_rs, s.sk - n0,
                                                p.a.D, p.v, tid);
                cp_async_commit();
            }

            // S_ij = Q_i K_j^T (line 8), then O_i += P_i,j-1 V_j-1 of the previous block
            float S[BN / 2];
            wgmma_fence();
            sm90_issue_qk<T, D, BM, BN>(S, sQ, sK, wg);
            if (t > 0) {
                sm90_issue_pv<T, D, BN>(O, P, sV0 + ((t - 1) & 1) * KV_BYTES);
                wgmma_wait<1>();
            } else {
                wgmma_wait<0>();
            }
#pragma unroll
            for (int i = 0; i < BN / 2; i++) reg_fence(S[i]);

            const int row0 = m0 + trow, col0 = n0 + 2 * (lane & 3);
            if (p.a.transform) sm90_scores_transform<BN>(S, p.a, slope, row0 + s.sk - s.sq, col0);
            if (!(n0 >= full_lo && n0 + BN <= full_hi)) sm90_scores_mask<BN>(S, p.a, s, row0, col0);

            // m_new = max(m_i, rowmax(S_ij)); P_ij = exp2(S_ij - m_new); l_i = alpha l_i + rowsum(P_ij)
            // (lines 9-10). As in the mma.sync kernel, m_i moves only when a row's max grew by more
            // than 8 (log2 units): P_ij <= 2^8 stays exact in fp32, and O_i is rescaled rarely.
            float mx[2], alpha[2] = {1.f, 1.f};
            bool grow = false;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float x = -INFINITY;
#pragma unroll
                for (int nt = 0; nt < BN / 8; nt++) x = fmaxf(x, fmaxf(S[4 * nt + 2 * r], S[4 * nt + 2 * r + 1]));
                mx[r] = quad_max(x) * sl2;
                grow |= mx[r] > m_i[r] + 8.f;
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
            for (int r = 0; r < 2; r++) {
                const float ms = m_i[r] == -INFINITY ? 0.f : m_i[r];
                float sum = 0.f;
#pragma unroll
                for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const float x = ex2(fmaf(S[4 * nt + 2 * r + e], sl2, -ms));
                        S[4 * nt + 2 * r + e] = x;
                        sum += x;
                    }
                l_i[r] += sum;
            }

            // the previous PV is done: O_i may be rescaled and P may be overwritten
            wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < D / 2; i++) reg_fence(O[i]);
            if (rescale) {
#pragma unroll
                for (int i = 0; i < D / 2; i++) O[i] *= alpha[(i >> 1) & 1];
            }
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
                for (int r = 0; r < 4; r++) P[kk][r] = pack2<T>(S[8 * kk + 2 * r], S[8 * kk + 2 * r + 1]);
        }

        // the last O_i += P V
        cp_async_wait<0>();
        fence_proxy_async_smem();
        __syncthreads();
        wgmma_fence();
        sm90_issue_pv<T, D, BN>(O, P, sV0 + ((t - 1) & 1) * KV_BYTES);
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < D / 2; i++) reg_fence(O[i]);
    }

    // --- epilogue: O_i = O_i / l_i; L_i = m_i + log(l_i)    (lines 12-13) -------------------------
    // Each warpgroup stages its own 64 rows of O_i in its rows of the (swizzled) Q tile, which
    // only its own, finished, wgmmas read, then stores them as 16-byte chunks.
    float *lse = p.lse;
    const int64_t lse_row0 = p.a.cu_q ? (int64_t)h * p.a.total_q + s.q_row0 : ((int64_t)b * p.a.H + h) * p.a.Sq;
    uint16_t *smem = (uint16_t *)((char *)flashc_smem + (sQ - smem_u32(flashc_smem)));
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float l = quad_sum(l_i[r]);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const int row = trow + 8 * r;
#pragma unroll
        for (int nt = 0; nt < D / 8; nt++) {
            const uint32_t off = sw128_offset(BM, row, 8 * nt) + 4 * (lane & 3);
            *(uint32_t *)((char *)smem + off) = pack2<T>(O[4 * nt + 2 * r] * inv, O[4 * nt + 2 * r + 1] * inv);
        }
        if (lse && (lane & 3) == 0 && m0 + row < s.sq)
            lse[lse_row0 + m0 + row] = l > 0.f ? (m_i[r] + log2f(l)) * FLASHC_LN2 : INFINITY;
    }
    bar_sync(1 + wg, 128);
    uint16_t *Og = (uint16_t *)p.o + b * p.o_bs + (s.q_row0 + m0) * p.o_rs + h * p.o_hs;
    const int t128 = tid & 127;
#pragma unroll
    for (int it = 0; it < 64 * D / 8 / 128; it++) {
        const int idx = t128 + it * 128, r = wg * 64 + idx / (D / 8), c = 8 * (idx % (D / 8));
        if (r < m_rows && c < p.a.D)
            *(uint4 *)(Og + (int64_t)r * p.o_rs + c) = *(const uint4 *)((const char *)smem + sw128_offset(BM, r, c));
    }
#endif
}

// ------------------------------------------------------------------------------------------------
// launchers: one per tile shape, and the tuned one per (dtype, D), instantiated in inst/*_sm90.cu

template <typename T, int D, int NWG, int BN>
cudaError_t flashc_cuda_fwd_sm90_run(flashc_fwd_params *p, cudaStream_t stream) {
    constexpr int smem = 1024 + (NWG * 64 + 4 * BN) * D * 2; // + 1024: the manual alignment
    void (*kernel)(const flashc_fwd_params) = flashc_fwd_sm90_kernel<T, D, NWG, BN>;
    p->n_m_blocks = (p->a.Sq + NWG * 64 - 1) / (NWG * 64);
    const long long blocks = (long long)p->n_m_blocks * p->a.B * p->a.H;
    if (blocks == 0) return cudaSuccess;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    kernel<<<(unsigned)blocks, NWG * 128, smem, stream>>>(*p);
    return cudaGetLastError();
}

template <typename T, int D>
cudaError_t flashc_cuda_fwd_sm90_launch(flashc_fwd_params *p, cudaStream_t stream) {
    constexpr flashc_cuda_tile t = flashc_cuda_tune_fwd_sm90(D);
    static_assert(flashc_cuda_fwd_sm90_smem(D) == 1024 + (t.bm + 4 * t.bn) * D * 2, "smem formula");
    return flashc_cuda_fwd_sm90_run<T, D, t.nwarps / 4, t.bn>(p, stream);
}

#endif // FLASHC_SM90_FWD_CUH
