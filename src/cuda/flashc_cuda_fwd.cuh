// flashc_cuda_fwd.cuh -- the forward kernel (FlashAttention-2 Algorithm 1 on mma.sync tensor cores)
// and its launcher template. Included by the generated inst/flashc_fwd_hd*_*.cu files only.
//
// One CTA computes O_i and L_i for one BM block of query rows of one (batch, head). Warps split
// the rows (16 * MT rows each), so the softmax statistics m_i, l_i never leave a warp. K_j and V_j
// stream through shared memory by cp.async, either in a 2-deep ring (STAGES = 2: block j - 1 loads
// during all of block j; the tuned choice) or in one buffer each (STAGES = 1, FA2's order: V_j
// loads during S = Q K_j^T, K_{j-1} during softmax and P V_j; half the smem). Q_i is loaded once,
// and kept in registers where that fits (see Q_IN_REGS). Shared-memory rows are padded by 16
// bytes (row stride D + 8 elements, an odd number of 16-byte units), which makes every ldmatrix
// phase and every cp.async store conflict-free without a swizzle, for any D that is a multiple
// of 32.
//
// FA2's non-matmul savings: the softmax scale is folded into the exp2 argument (one FFMA per
// score), the row sum l_i stays per thread until the end (one quad reduction per row in total),
// and O_i is divided by l_i once, in the epilogue. On top of that O_i is rescaled only when a
// row's max grows by more than 2^8 (see the softmax step): on the H200 this and the cheaper
// loaders took D = 128 from 297 to 344 TFLOP/s (dev/cuda/attn_lab.cu, S = 4096).
#ifndef FLASHC_CUDA_FWD_CUH
#define FLASHC_CUDA_FWD_CUH

#include "flashc_cuda_common.cuh"
#include "flashc_cuda_tune.h"

// Scores of one warp tile, in place: raw q.k -> score in log2 units, for softcap and ALiBi
// (s = softcap * tanh(scale * q.k / softcap) - slope * |i + sk - sq - j|, times log2(e)).
// row0: the query row of element (mt, 0, 0) minus g; col0: the key of (0, 0, 0) minus 2c.
template <int MT, int NS>
static __device__ __forceinline__ void scores_transform(float (&S)[MT][NS][4], const flashc_cuda_attn &a,
                                                        float slope, int diag0, int col0, int lane) {
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int diag = diag0 + mt * 16 + g + 8 * r; // i + sk - sq for this thread's row
#pragma unroll
            for (int nt = 0; nt < NS; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int col = col0 + nt * 8 + 2 * c + e;
                    float x = S[mt][nt][2 * r + e] * a.scale;
                    if (a.softcap > 0.f) x = a.softcap * tanhf(x * a.inv_softcap);
                    x -= slope * fabsf((float)(diag - col));
                    S[mt][nt][2 * r + e] = x * FLASHC_LOG2E;
                }
        }
}

// Masked keys -> -inf. Only called for key blocks that cross the edge of some row's key range.
template <int MT, int NS>
static __device__ __forceinline__ void scores_mask(float (&S)[MT][NS][4], const flashc_cuda_attn &a,
                                                   const flashc_cuda_seq &s, int row0, int col0, int lane) {
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = row0 + mt * 16 + g + 8 * r;
            const int lo = key_lo(a, row, s.sq, s.sk), hi = key_hi(a, row, s.sq, s.sk);
#pragma unroll
            for (int nt = 0; nt < NS; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int col = col0 + nt * 8 + 2 * c + e;
                    if (col < lo || col >= hi) S[mt][nt][2 * r + e] = -INFINITY;
                }
        }
}

// ------------------------------------------------------------------------------------------------
// the kernel

// q, o: rows m0.. of (b, h) with row stride q_rs / o_rs; k, v: rows of (b, h / group);
// lse (B, H, Sq) or (H, total_q). Grid: n_m_blocks * B * H CTAs, heaviest query blocks first.
template <typename T, int D, int BM, int BN, int NWARPS, int STAGES>
__global__ void __launch_bounds__(NWARPS * 32) flashc_fwd_kernel(const __grid_constant__ flashc_fwd_params p) {
    constexpr int NTHREADS = NWARPS * 32;
    constexpr int MT = BM / (16 * NWARPS);  // m16 tiles per warp
    constexpr int LD = D + 8;               // smem row stride (elements)
    constexpr int NS = BN / 8, ND = D / 8;  // n8 tiles of S_ij and of O_i
    constexpr int KD = D / 16, KN = BN / 16;
    // Q_i fragments stay in registers when they are cheap (<= 32 regs) or when Q, O and S together
    // fit in 224 (D = 256, one m16 tile per warp: saves 16 of the 144 ldmatrix per key block)
    constexpr bool Q_IN_REGS = MT * KD * 4 <= 32 || MT * (KD + ND + NS) * 4 <= 224;
    static_assert(MT >= 1 && MT * 16 * NWARPS == BM, "BM must be a multiple of 16 * NWARPS");
    static_assert(D % 32 == 0 && BN % 16 == 0 && (STAGES == 1 || STAGES == 2), "tile shape");

    uint16_t *sQ = flashc_smem;             // [BM][LD]
    uint16_t *sK = sQ + BM * LD;            // [STAGES][BN][LD]
    uint16_t *sV = sK + STAGES * BN * LD;   // [STAGES][BN][LD]

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, c = lane & 3;

    // --- which (query block, batch, head) --------------------------------------------------------
    const int BH = p.a.B * p.a.H;
    const int m_block = p.n_m_blocks - 1 - (int)(blockIdx.x / BH);
    const int bh = (int)(blockIdx.x % BH), h = bh % p.a.H, b = bh / p.a.H;
    const flashc_cuda_seq s = cuda_seq(p.a, b);
    const int m0 = m_block * BM;
    if (m0 >= s.sq) return;
    const int h_kv = h / p.a.group;
    const int m_rows = min(BM, s.sq - m0);
    const int wrow0 = warp * 16 * MT;  // this warp's first row in the block

    const uint16_t *Qg = (const uint16_t *)p.q + b * p.q_bs + (s.q_row0 + m0) * p.q_rs + h * p.q_hs;
    const uint16_t *Kg = (const uint16_t *)p.k + b * p.k_bs + s.k_row0 * p.k_rs + h_kv * p.k_hs;
    const uint16_t *Vg = (const uint16_t *)p.v + b * p.v_bs + s.k_row0 * p.v_rs + h_kv * p.v_hs;

    // --- key blocks this query block needs (causal / window skip whole blocks) -------------------
    int nb_min, nb_max, full_lo, full_hi;
    key_blocks_of_rows(p.a, s, m0, m_rows, BN, &nb_min, &nb_max, &full_lo, &full_hi);

    const float slope = p.a.alibi ? p.a.alibi[b * p.a.alibi_bs + h] : 0.f;
    const float sl2 = p.a.transform ? 1.f : p.a.scale_log2;  // score units -> log2 units

    // --- init: m_i = -inf, l_i = 0, O_i = 0        (Alg. 1 line 6) ------------------------------
    float acc[MT][ND][4];
    float m_i[MT][2], l_i[MT][2]; // m_i in log2 units (score * sl2): the exp2 argument's offset
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int nd = 0; nd < ND; nd++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mt][nd][e] = 0.f;
        m_i[mt][0] = m_i[mt][1] = -INFINITY;
        l_i[mt][0] = l_i[mt][1] = 0.f;
    }

    const uint32_t sQ_u = smem_u32(sQ), sK_u = smem_u32(sK), sV_u = smem_u32(sV);
    // per-lane ldmatrix offsets (bytes): A rows of Q; B from K rows (K-major); B from V rows (.trans)
    const uint32_t q_lane = (uint32_t)(((wrow0 + (lane & 15)) * LD + (lane >> 4) * 8) * 2);
    const uint32_t k_lane = (uint32_t)((((lane & 7) + 8 * (lane >> 4)) * LD + 8 * ((lane >> 3) & 1)) * 2);
    const uint32_t v_lane = (uint32_t)((((lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 8 * (lane >> 4)) * 2);

    if (nb_max > nb_min) {
        // --- prologue: Q_i, then the last key block (FA2 walks key blocks right to left, so the
        //     masked diagonal blocks of causal come first) ----------------------------------------
        load_tile<BM, D, LD, NTHREADS>(sQ, Qg, p.q_rs, m_rows, p.a.D, p.a.aligned, p.q, tid);
        cp_async_commit();
        {
            const int n0 = (nb_max - 1) * BN;
            load_tile<BN, D, LD, NTHREADS>(sK, Kg + (int64_t)n0 * p.k_rs, p.k_rs, s.sk - n0, p.a.D, p.a.aligned, p.k, tid);
            if (STAGES == 2)
                load_tile<BN, D, LD, NTHREADS>(sV, Vg + (int64_t)n0 * p.v_rs, p.v_rs, s.sk - n0, p.a.D, p.a.aligned, p.v, tid);
            cp_async_commit();
        }
        uint32_t qf[Q_IN_REGS ? MT : 1][Q_IN_REGS ? KD : 1][4];
        if (Q_IN_REGS) {
            cp_async_wait<1>();
            __syncthreads();
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int kk = 0; kk < KD; kk++)
                    ldmatrix_x4(qf[Q_IN_REGS ? mt : 0][Q_IN_REGS ? kk : 0], sQ_u + q_lane + (mt * 16 * LD + kk * 16) * 2);
        }

        int stage = 0;
        // --- for each key block j                  (Alg. 1 line 7) --------------------------------
        for (int nb = nb_max - 1; nb >= nb_min; nb--) {
            const int n0 = nb * BN;
            cp_async_wait<0>();
            __syncthreads();  // K_j (and V_j) landed; every warp is done with the buffers loaded next
            if (STAGES == 2 && nb > nb_min) {
                const int n1 = (nb - 1) * BN;
                uint16_t *sKn = sK + (stage ^ 1) * BN * LD, *sVn = sV + (stage ^ 1) * BN * LD;
                load_tile<BN, D, LD, NTHREADS>(sKn, Kg + (int64_t)n1 * p.k_rs, p.k_rs, s.sk - n1, p.a.D, p.a.aligned, p.k, tid);
                load_tile<BN, D, LD, NTHREADS>(sVn, Vg + (int64_t)n1 * p.v_rs, p.v_rs, s.sk - n1, p.a.D, p.a.aligned, p.v, tid);
                cp_async_commit();
            }
            if (STAGES == 1) { // V_j lands while S_ij is computed
                load_tile<BN, D, LD, NTHREADS>(sV, Vg + (int64_t)n0 * p.v_rs, p.v_rs, s.sk - n0, p.a.D, p.a.aligned, p.v, tid);
                cp_async_commit();
            }
            const uint32_t sKs = sK_u + stage * BN * LD * 2, sVs = sV_u + stage * BN * LD * 2;

            // S_ij = Q_i K_j^T                     (line 8)
            float S[MT][NS][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < NS; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) S[mt][nt][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KD; kk++) {
                uint32_t a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    if (Q_IN_REGS) {
#pragma unroll
                        for (int e = 0; e < 4; e++) a[mt][e] = qf[Q_IN_REGS ? mt : 0][Q_IN_REGS ? kk : 0][e];
                    } else {
                        ldmatrix_x4(a[mt], sQ_u + q_lane + (mt * 16 * LD + kk * 16) * 2);
                    }
                }
#pragma unroll
                for (int nb2 = 0; nb2 < KN; nb2++) {
                    uint32_t bk[4];
                    ldmatrix_x4(bk, sKs + k_lane + (nb2 * 16 * LD + kk * 16) * 2);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma_m16n8k16<T>(S[mt][2 * nb2], a[mt], bk);
                        mma_m16n8k16<T>(S[mt][2 * nb2 + 1], a[mt], bk + 2);
                    }
                }
            }

            // softcap / ALiBi (runtime predicates), then the mask on edge blocks only
            const int row0 = m0 + wrow0;
            if (p.a.transform) scores_transform<MT, NS>(S, p.a, slope, row0 + s.sk - s.sq, n0, lane);
            if (!(n0 >= full_lo && n0 + BN <= full_hi)) scores_mask<MT, NS>(S, p.a, s, row0, n0, lane);

            // m_new = max(m_i, rowmax(S_ij)); P_ij = exp2(S_ij - m_new);
            // l_i = exp2(m_i - m_new) l_i + rowsum(P_ij); O_i = diag(exp2(m_i - m_new)) O_i   (lines 9-10)
            // Any m_i >= the true running max - 8 gives the same O_i and L_i (P_ij <= 2^8 stays
            // exact in fp32 and keeps its relative precision in bf16), so the warp moves m_i and
            // rescales O_i only when some row's max grew by more than 8: after the first blocks
            // that is rare, and it saves MT * D / 2 multiplies per thread per block.
            float mx[MT][2];
            bool grow = false;
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    float x = -INFINITY;
#pragma unroll
                    for (int nt = 0; nt < NS; nt++) x = fmaxf(x, fmaxf(S[mt][nt][2 * r], S[mt][nt][2 * r + 1]));
                    mx[mt][r] = quad_max(x) * sl2;
                    grow |= mx[mt][r] > m_i[mt][r] + 8.f; // m_i = -inf: true once the row sees a key
                }
            if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        const float m_new = fmaxf(m_i[mt][r], mx[mt][r]);
                        const float alpha = ex2(m_i[mt][r] - (m_new == -INFINITY ? 0.f : m_new));
                        m_i[mt][r] = m_new;
                        l_i[mt][r] *= alpha;
#pragma unroll
                        for (int nd = 0; nd < ND; nd++) {
                            acc[mt][nd][2 * r] *= alpha;
                            acc[mt][nd][2 * r + 1] *= alpha;
                        }
                    }
            }
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const float ms = m_i[mt][r] == -INFINITY ? 0.f : m_i[mt][r]; // no key yet: P = exp2(-inf) = 0
                    float sum = 0.f;
#pragma unroll
                    for (int nt = 0; nt < NS; nt++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const float P = ex2(fmaf(S[mt][nt][2 * r + e], sl2, -ms));
                            S[mt][nt][2 * r + e] = P;
                            sum += P;
                        }
                    l_i[mt][r] += sum;
                }

            if (STAGES == 1) {
                cp_async_wait<0>();
                __syncthreads(); // V_j landed; every warp is done with K_j
                if (nb > nb_min) { // K_{j-1} lands during P_ij V_j
                    const int n1 = (nb - 1) * BN;
                    load_tile<BN, D, LD, NTHREADS>(sK, Kg + (int64_t)n1 * p.k_rs, p.k_rs, s.sk - n1, p.a.D, p.a.aligned, p.k, tid);
                    cp_async_commit();
                }
            }

            // O_i += P_ij V_j: the S accumulator is already the A fragment of the next mma
#pragma unroll
            for (int kk = 0; kk < KN; kk++) {
                uint32_t a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    a[mt][0] = pack2<T>(S[mt][2 * kk][0], S[mt][2 * kk][1]);
                    a[mt][1] = pack2<T>(S[mt][2 * kk][2], S[mt][2 * kk][3]);
                    a[mt][2] = pack2<T>(S[mt][2 * kk + 1][0], S[mt][2 * kk + 1][1]);
                    a[mt][3] = pack2<T>(S[mt][2 * kk + 1][2], S[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int nd = 0; nd < KD; nd++) {
                    uint32_t bv[4];
                    ldmatrix_x4_trans(bv, sVs + v_lane + (kk * 16 * LD + nd * 16) * 2);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma_m16n8k16<T>(acc[mt][2 * nd], a[mt], bv);
                        mma_m16n8k16<T>(acc[mt][2 * nd + 1], a[mt], bv + 2);
                    }
                }
            }
            if (STAGES == 2) stage ^= 1;
        }
    }

    // --- epilogue: O_i = O_i / l_i; L_i = m_i + log(l_i)    (lines 12-13) -------------------------
    // Each warp stages its own rows of O_i in its own rows of sQ (no other warp reads them), then
    // stores them as 16-byte chunks. Rows that saw no key: l_i = 0 -> O_i = 0 (even where O_i holds
    // NaN: P = 0 times an Inf in V), L_i = +inf; a NaN l_i (a NaN score) gives NaN O_i and L_i.
    cp_async_wait<0>();
    __syncwarp();
    float *lse = p.lse;
    const int64_t lse_row0 = p.a.cu_q ? (int64_t)h * p.a.total_q + s.q_row0 : ((int64_t)b * p.a.H + h) * p.a.Sq;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float l = quad_sum(l_i[mt][r]);
            const float inv = 1.f / l; // unused where l = 0
            const int lrow = wrow0 + mt * 16 + g + 8 * r;
#pragma unroll
            for (int nd = 0; nd < ND; nd++)
                *(uint32_t *)(sQ + lrow * LD + nd * 8 + 2 * c) = pack2<T>(l == 0.f ? 0.f : acc[mt][nd][2 * r] * inv,
                                                                       l == 0.f ? 0.f : acc[mt][nd][2 * r + 1] * inv);
            if (lse && c == 0 && m0 + lrow < s.sq)
                lse[lse_row0 + m0 + lrow] = row_lse(m_i[mt][r], l);
        }
    __syncwarp();
    uint16_t *Og = (uint16_t *)p.o + b * p.o_bs + (s.q_row0 + m0 + wrow0) * p.o_rs + h * p.o_hs;
    store_tile<16 * MT, D, LD, 32>(Og, p.o_rs, sQ + wrow0 * LD, m_rows - wrow0, p.a.D, p.a.aligned, lane);
}

// ------------------------------------------------------------------------------------------------
// launchers: one per tile shape (also used by dev/cuda/attn_lab.cu), and the tuned one per
// (dtype, D), instantiated in inst/

template <typename T, int D, int BM, int BN, int NWARPS, int STAGES>
cudaError_t flashc_cuda_fwd_run(flashc_fwd_params *p, cudaStream_t stream) {
    constexpr int smem = (BM + 2 * STAGES * BN) * (D + 8) * 2;
    void (*kernel)(const flashc_fwd_params) = flashc_fwd_kernel<T, D, BM, BN, NWARPS, STAGES>;
    p->n_m_blocks = (p->a.Sq + BM - 1) / BM;
    const long long blocks = (long long)p->n_m_blocks * p->a.B * p->a.H;
    if (blocks == 0) return cudaSuccess;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    kernel<<<(unsigned)blocks, NWARPS * 32, smem, stream>>>(*p);
    return cudaGetLastError();
}

template <typename T, int D>
cudaError_t flashc_cuda_fwd_launch(flashc_fwd_params *p, cudaStream_t stream) {
    constexpr flashc_cuda_tile t = flashc_cuda_tune_fwd(D);
    static_assert(flashc_cuda_fwd_smem(D) == (t.bm + 2 * t.stages * t.bn) * (D + 8) * 2, "smem formula");
    return flashc_cuda_fwd_run<T, D, t.bm, t.bn, t.nwarps, t.stages>(p, stream);
}

#endif // FLASHC_CUDA_FWD_CUH
