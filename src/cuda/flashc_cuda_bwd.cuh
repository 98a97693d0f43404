// flashc_cuda_bwd.cuh -- the backward kernels (FlashAttention-2 Algorithm 2) and their launcher
// template. Included by the generated inst/flashc_bwd_hd*_*.cu files only.
//
// FA2's three-kernel structure:
//   flashc_bwd_dot_do_o_kernel   D_i = rowsum(dO_i * O_i) and lse2_i = L_i * log2(e) into the
//                                workspace (Alg. 2 line 4), padding rows set to (0, +inf)
//   flashc_bwd_dkdv_kernel       one CTA per key block K_j, V_j of one (batch, kv head); loops over
//                                the query blocks (and the query heads of its GQA group), keeps
//                                dK_j and dV_j in registers, recomputes P_ij = exp2(S_ij - lse2_i),
//                                and adds dQ_i += dS_ij K_j into an fp32 accumulator atomically
//   flashc_bwd_convert_dq_kernel dq = scale * dq_acc in the input dtype and dq's strides (0 for
//                                a row that sees no key: bwd_dq_out)
// Deterministic mode: the dkdv kernel skips dQ, and flashc_bwd_dq_kernel computes dQ_i per query
// block by walking the key blocks itself (recomputing S_ij and dP_ij: 3 more matmuls per block
// pair, the price of bit-identical results with no atomics).
//
// Warps of the dkdv kernel take three tilings of the same CTA, one per matmul shape:
//   S_ij, dP_ij (BM x BN):     WM_S x (NWARPS / WM_S) warps
//   dV_j, dK_j  (BN x D):      WN_KV x (NWARPS / WN_KV) warps, accumulators live across the loop
//   dQ_i        (BM x D):      WM_Q x (NWARPS / WM_Q) warps
// so P_ij and dS_ij pass through shared memory (bf16/f16, as FA2 does) between the first and
// the other two. Rows of every smem tile are padded by 16 bytes, as in the forward.
#ifndef FLASHC_CUDA_BWD_CUH
#define FLASHC_CUDA_BWD_CUH

#include "flashc_cuda_common.cuh"
#include "flashc_cuda_tune.h"

// ------------------------------------------------------------------------------------------------
// pre-pass and dQ conversion: memory-bound, so every global access is a 16-byte chunk

// D_i = rowsum(dO_i * O_i) (Alg. 2 line 4) and lse2_i = L_i log2(e), into the workspace; in the
// atomic mode also dq_acc = 0 for the same rows (cuDNN's pre-pass does the same: a separate
// cudaMemset of dq_acc cost 30 us at B * S = 16k, hidden 2048, beside this kernel's 66-75 us).
// D_i is the diagonal of dO_i O_i^T computed with the same mma.sync m16n8k16 sequence (k blocks
// 0..D/16-1 from a zero accumulator) that the dkdv kernel uses for dP_ij = dO_i V_j^T: where
// O_i = V_j exactly (a row that sees one key), dP_ij - D_i is then exactly 0, as in exact math.
// The 64 x D tiles of dO_i and O_i go through shared memory (cp.async 16-byte chunks, then
// ldmatrix into the fragments): loading the fragments from global memory 4 bytes at a time ran
// at 1.9 TB/s. One warp per 16 rows of one (b, h), 4 warps per CTA; writes rows 0 ..
// round_up(sq, 128) - 1 (the padding rows: D_i = 0, lse2_i = +inf). With the conversion below,
// the whole backward ran 1.00-1.13x (S = 16k .. 512, B * S = 16k) its time with the memset and the
// old kernels (H200, bench/results/h200-2026-12-02-s13.txt call 3).
// dout, o: (B, Sq, H, D) or (total_q, H, D); lse: (B, H, Sq) or (H, total_q).
template <typename T, int D>
__global__ void __launch_bounds__(128) flashc_bwd_dot_do_o_kernel(const __grid_constant__ flashc_bwd_params p) {
    constexpr int LD = D + 8; // padded rows: the 8 rows of an ldmatrix fall in distinct banks
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const int BH = p.a.B * p.a.H;
    const int i0 = (int)(blockIdx.x / BH) * 64;
    const int bh = (int)(blockIdx.x % BH), h = bh % p.a.H, b = bh / p.a.H;
    const flashc_cuda_seq s = cuda_seq(p.a, b);
    if (i0 >= (s.sq + FLASHC_WS_PAD - 1) / FLASHC_WS_PAD * FLASHC_WS_PAD) return;
    const int64_t r = ws_row(p, b, h, s) + i0;
    const int nrows = s.sq - i0;
    uint16_t *sdO = flashc_smem, *sO = sdO + 64 * LD;
    const uint16_t *dO = (const uint16_t *)p.dout + b * p.do_bs + (s.q_row0 + i0) * p.do_rs + h * p.do_hs;
    const uint16_t *O = (const uint16_t *)p.o + b * p.o_bs + (s.q_row0 + i0) * p.o_rs + h * p.o_hs;
    load_tile<64, D, LD, 128>(sdO, dO, p.do_rs, nrows, p.a.D, p.a.aligned, p.dout, tid);
    load_tile<64, D, LD, 128>(sO, O, p.o_rs, nrows, p.a.D, p.a.aligned, p.o, tid);
    cp_async_commit();
    if (p.dq_acc) { // rows r .. r + 63 of dq_acc (D_pad = D floats each) are one contiguous block
        float4 *z = (float4 *)(p.dq_acc + r * D);
#pragma unroll
        for (int k = 0; k < 64 * D / 4 / 128; k++) z[k * 128 + tid] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    cp_async_wait<0>();
    __syncthreads();

    // ldmatrix x4, lane's row: matrix lane / 8 is (rows + 8 (m & 1), columns + 8 (m >> 1)), which is
    // the A fragment of dO (a0..a3) and, for O as B = O^T (n = O row), b0 = {r0, r2}, b1 = {r1, r3}
    const int m = lane >> 3;
    const uint32_t offs = (uint32_t)((warp * 16 + 8 * (m & 1) + (lane & 7)) * LD + 8 * (m >> 1)) * 2u;
    float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a[4], o[4];
        ldmatrix_x4(a, smem_u32(sdO) + offs + kk * 32);
        ldmatrix_x4(o, smem_u32(sO) + offs + kk * 32);
        const uint32_t b0[2] = {o[0], o[2]}, b1[2] = {o[1], o[3]};
        mma_m16n8k16<T>(acc[0], a, b0);
        mma_m16n8k16<T>(acc[1], a, b1);
    }
    // the diagonal: (row g, col g) is element g & 1 of tile 0 in the thread with c = g / 2, and
    // (row g + 8, col g + 8) is element 2 + (g & 1) of tile 1 in the same thread
    if (c == (g >> 1)) {
        const int64_t l0 = p.a.cu_q ? (int64_t)h * p.a.total_q + s.q_row0 : ((int64_t)b * p.a.H + h) * p.a.Sq;
        const float diag[2] = {(g & 1) ? acc[0][1] : acc[0][0], (g & 1) ? acc[1][3] : acc[1][2]};
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int i = warp * 16 + g + 8 * half;
            const bool in = i < nrows;
            p.delta[r + i] = in ? diag[half] : 0.f;
            p.lse2[r + i] = in ? p.lse[l0 + i0 + i] * FLASHC_LOG2E : INFINITY; // +inf (no key) stays +inf
        }
    }
}
static constexpr int flashc_bwd_dot_do_o_smem(int D) { return 2 * 64 * (D + 8) * 2; }

// dq (dq strides, dtype T) = scale * dq_acc (D_pad = D floats per row; 0 for a row with no key:
// bwd_dq_out), for the rows of every sequence: 256 threads of 8 columns each, 2048 / D rows of one
// (b, h) per CTA. (One warp per row left 3 / 4 of the lanes idle at D = 64: 100 us against 58 at
// D = 128 for the same rows.)
template <typename T, int D>
__global__ void __launch_bounds__(256) flashc_bwd_convert_dq_kernel(const __grid_constant__ flashc_bwd_params p) {
    constexpr int CPR = D / 8, ROWS = 256 / CPR; // 8-column chunks per row, rows per CTA
    const int BH = p.a.B * p.a.H;
    const int i = (int)(blockIdx.x / BH) * ROWS + (int)threadIdx.x / CPR, d0 = (int)threadIdx.x % CPR * 8;
    const int bh = (int)(blockIdx.x % BH), h = bh % p.a.H, b = bh / p.a.H;
    const flashc_cuda_seq s = cuda_seq(p.a, b);
    if (i >= s.sq || d0 >= p.a.D) return;
    const int64_t r = ws_row(p, b, h, s) + i;
    const float *src = p.dq_acc + r * D + d0, lse2 = p.lse2[r];
    uint16_t *dst = (uint16_t *)p.dq + b * p.dq_bs + (s.q_row0 + i) * p.dq_rs + h * p.dq_hs + d0;
    const float4 v0 = *(const float4 *)src, v1 = *(const float4 *)(src + 4);
    const float f[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    uint16_t y[8];
#pragma unroll
    for (int e = 0; e < 8; e++) y[e] = from_f32<T>(bwd_dq_out(f[e], p.a.scale, lse2));
    if (p.a.aligned) {
        *(uint4 *)dst = *(const uint4 *)y;
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++) dst[e] = y[e];
    }
}

// ------------------------------------------------------------------------------------------------
// P_ij and dS_ij from the recomputed scores (shared by the dkdv and dq kernels)

// S: raw q.k of a warp tile -> P_ij = exp2(S_ij * sl2 - lse2_i) (0 where masked);
// dP: dO.v -> dS_ij = P_ij (dP_ij - D_i) (times 1 - tanh^2 under softcap): the gradient with
// respect to scale * q.k. Rows: row0 + mt*16 + g + 8r, with lse2 L2[mt][r] and D_i Dl[mt][r];
// keys: col0 + nt*8 + 2c + e. TRANSFORM (softcap / ALiBi) is a compile-time copy of a runtime
// flag, so the plain path has no per-score branch for the scheduler to work around.
template <int MT, int NT, bool TRANSFORM>
static __device__ __forceinline__ void bwd_p_ds_tile(float (&S)[MT][NT][4], float (&dP)[MT][NT][4],
                                                     const flashc_cuda_attn &a, const flashc_cuda_seq &s,
                                                     const float (&L2)[MT][2], const float (&Dl)[MT][2], int row0,
                                                     int col0, float slope, bool masked, int lane) {
    const int g = lane >> 2, c = lane & 3;
    const float sl2 = TRANSFORM ? 1.f : a.scale_log2;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = row0 + mt * 16 + g + 8 * r;
            const float l2 = L2[mt][r], dl = Dl[mt][r];
            int lo = 0, hi = 0x7fffffff;
            if (masked) {
                lo = key_lo(a, row, s.sq, s.sk);
                hi = key_hi(a, row, s.sq, s.sk);
            }
            const int diag = row + s.sk - s.sq;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int col = col0 + nt * 8 + 2 * c + e;
                    float dsf;
                    const float x = bwd_logit<TRANSFORM>(S[mt][nt][2 * r + e], a, diag - col, slope, &dsf);
                    float P = ex2(fmaf(x, sl2, -l2));
                    if (col < lo || col >= hi) P = 0.f;
                    S[mt][nt][2 * r + e] = P;
                    dP[mt][nt][2 * r + e] = P * (dP[mt][nt][2 * r + e] - dl) * dsf;
                }
        }
}

template <int MT, int NT>
static __device__ __forceinline__ void bwd_p_ds(float (&S)[MT][NT][4], float (&dP)[MT][NT][4], const flashc_cuda_attn &a,
                                                const flashc_cuda_seq &s, const float (&L2)[MT][2],
                                                const float (&Dl)[MT][2], int row0, int col0, float slope, bool masked,
                                                int lane) {
    if (a.transform) bwd_p_ds_tile<MT, NT, true>(S, dP, a, s, L2, Dl, row0, col0, slope, masked, lane);
    else bwd_p_ds_tile<MT, NT, false>(S, dP, a, s, L2, Dl, row0, col0, slope, masked, lane);
}

// ------------------------------------------------------------------------------------------------
// dK_j, dV_j (and dQ by atomics): one CTA per (key block, batch, kv head)

template <int BM, int D, int LD, int NTHREADS>
static __device__ __forceinline__ void bwd_load_q_block(const flashc_bwd_params &p, const flashc_cuda_seq &s, int b, int h,
                                                        int mm0, uint16_t *sQb, uint16_t *sdOb, float *sLb, float *sDb,
                                                        int tid) {
    const int rows = min(BM, s.sq - mm0);
    const uint16_t *Qg = (const uint16_t *)p.q + b * p.q_bs + (s.q_row0 + mm0) * p.q_rs + h * p.q_hs;
    const uint16_t *dOg = (const uint16_t *)p.dout + b * p.do_bs + (s.q_row0 + mm0) * p.do_rs + h * p.do_hs;
    load_tile<BM, D, LD, NTHREADS>(sQb, Qg, p.q_rs, rows, p.a.D, p.a.aligned, p.q, tid);
    load_tile<BM, D, LD, NTHREADS>(sdOb, dOg, p.do_rs, rows, p.a.D, p.a.aligned, p.dout, tid);
    const int64_t r0 = ws_row(p, b, h, s) + mm0; // padded: rows past sq hold (+inf, 0)
    for (int i = tid; i < BM; i += NTHREADS) {
        cp_async_4(smem_u32(sLb + i), p.lse2 + r0 + i, 4);
        cp_async_4(smem_u32(sDb + i), p.delta + r0 + i, 4);
    }
}

template <typename T, int D, int BM, int BN, int NWARPS, int STAGES, int WM_S, int WN_KV, int WM_Q>
__global__ void __launch_bounds__(NWARPS * 32) flashc_bwd_dkdv_kernel(const __grid_constant__ flashc_bwd_params p) {
    constexpr int NTHREADS = NWARPS * 32;
    constexpr int LD = D + 8, LDP = BN + 8;
    constexpr int WN_S = NWARPS / WM_S, SM = BM / WM_S, SN = BN / WN_S;               // S, dP warp tile
    constexpr int MT_S = SM / 16, NT_S = SN / 8;
    constexpr int WD_KV = NWARPS / WN_KV, KR = BN / WN_KV, DC = D / WD_KV;            // dK, dV warp tile
    constexpr int KT = KR / 16, DT = DC / 8;
    constexpr int WD_Q = NWARPS / WM_Q, QR = BM / WM_Q, QC = D / WD_Q;                // dQ warp tile
    constexpr int QT = QR / 16, QDT = QC / 8;
    static_assert(NWARPS % WM_S == 0 && SM % 16 == 0 && SN % 16 == 0, "S tile");
    static_assert(NWARPS % WN_KV == 0 && NWARPS % WM_Q == 0, "warp grids");
    static_assert(KR % 16 == 0 && DC % 16 == 0 && QR % 16 == 0 && QC % 16 == 0, "dK/dV/dQ tiles");
    static_assert(STAGES == 1 || STAGES == 2, "stages");

    uint16_t *sQ = flashc_smem;                 // [STAGES][BM][LD]
    uint16_t *sdO = sQ + STAGES * BM * LD;      // [STAGES][BM][LD]
    uint16_t *sK = sdO + STAGES * BM * LD;      // [BN][LD]
    uint16_t *sV = sK + BN * LD;                // [BN][LD]
    uint16_t *sP = sV + BN * LD;                // [BM][LDP]  P_ij  (rows: queries)
    uint16_t *sdS = sP + BM * LDP;              // [BM][LDP]  dS_ij
    float *sL = (float *)(sdS + BM * LDP);      // [STAGES][BM] lse2
    float *sDl = sL + STAGES * BM;              // [STAGES][BM] D_i

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, c = lane & 3;

    // --- which (key block, batch, kv head) --------------------------------------------------------
    int n_block, b, h_kv;
    bwd_key_block_of_cta(p.a, &n_block, &b, &h_kv);
    const flashc_cuda_seq s = cuda_seq(p.a, b);
    const int n0 = n_block * BN;
    if (n0 >= s.sk_len) return;

    // --- query blocks with rows that see some key of this block ----------------------------------
    int mb_begin, n_mb;
    query_blocks_of_keys(p.a, s, n0, BN, BM, &mb_begin, &n_mb);
    const int count = n_mb * p.a.group; // (query head of the group, query block) pairs

    // warp coordinates in the three tilings
    const int ws_m = warp / WN_S, ws_n = warp % WN_S;     // S, dP
    const int wk_n = warp / WD_KV, wk_d = warp % WD_KV;   // dK, dV
    const int wq_m = warp / WD_Q, wq_d = warp % WD_Q;     // dQ

    float dK[KT][DT][4], dV[KT][DT][4];
#pragma unroll
    for (int kt = 0; kt < KT; kt++)
#pragma unroll
        for (int dt = 0; dt < DT; dt++)
#pragma unroll
            for (int e = 0; e < 4; e++) dK[kt][dt][e] = dV[kt][dt][e] = 0.f;

    const uint32_t sQ_u = smem_u32(sQ), sdO_u = smem_u32(sdO), sK_u = smem_u32(sK), sV_u = smem_u32(sV);
    const uint32_t sP_u = smem_u32(sP), sdS_u = smem_u32(sdS);
    // ldmatrix lane offsets (elements): A rows (normal), B from K-major rows, B from MN-major rows
    // (.trans), and A from MN-major rows (.trans: A = P^T / dS^T read from the query-major tiles)
    const int a_col = (lane >> 4) * 8;                                        // row: lane & 15
    const int bk_row = (lane & 7) + 8 * (lane >> 4), bk_col = 8 * ((lane >> 3) & 1);
    const int bt_row = (lane & 7) + 8 * ((lane >> 3) & 1), bt_col = 8 * (lane >> 4);
    const int at_row = (lane & 7) + 8 * (lane >> 4), at_col = 8 * ((lane >> 3) & 1);

    if (count > 0) {
        const uint16_t *Kg = (const uint16_t *)p.k + b * p.k_bs + (s.k_row0 + n0) * p.k_rs + h_kv * p.k_hs;
        const uint16_t *Vg = (const uint16_t *)p.v + b * p.v_bs + (s.k_row0 + n0) * p.v_rs + h_kv * p.v_hs;
        load_tile<BN, D, LD, NTHREADS>(sK, Kg, p.k_rs, s.sk - n0, p.a.D, p.a.aligned, p.k, tid);
        load_tile<BN, D, LD, NTHREADS>(sV, Vg, p.v_rs, s.sk - n0, p.a.D, p.a.aligned, p.v, tid);
        bwd_load_q_block<BM, D, LD, NTHREADS>(p, s, b, h_kv * p.a.group, mb_begin * BM, sQ, sdO, sL, sDl, tid);
        cp_async_commit();

        for (int it = 0; it < count; it++) {
            const int buf = STAGES == 2 ? (it & 1) : 0;
            const int h = h_kv * p.a.group + it / n_mb;
            const int mm0 = (mb_begin + it % n_mb) * BM;
            cp_async_wait<0>();
            __syncthreads(); // Q_i, dO_i, lse2_i, D_i landed; the previous step is done everywhere
            if (STAGES == 2 && it + 1 < count) {
                const int nb = buf ^ 1;
                bwd_load_q_block<BM, D, LD, NTHREADS>(p, s, b, h_kv * p.a.group + (it + 1) / n_mb,
                                                      (mb_begin + (it + 1) % n_mb) * BM, sQ + nb * BM * LD,
                                                      sdO + nb * BM * LD, sL + nb * BM, sDl + nb * BM, tid);
                cp_async_commit();
            }
            const uint32_t sQb = sQ_u + buf * BM * LD * 2, sdOb = sdO_u + buf * BM * LD * 2;
            const float slope = p.a.alibi ? p.a.alibi[b * p.a.alibi_bs + h] : 0.f;

            // S_ij = Q_i K_j^T, dP_ij = dO_i V_j^T      (Alg. 2 lines 10, 12)
            float S[MT_S][NT_S][4], dP[MT_S][NT_S][4];
#pragma unroll
            for (int mt = 0; mt < MT_S; mt++)
#pragma unroll
                for (int nt = 0; nt < NT_S; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) S[mt][nt][e] = dP[mt][nt][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t aq[MT_S][4], ado[MT_S][4];
#pragma unroll
                for (int mt = 0; mt < MT_S; mt++) {
                    const int off = ((ws_m * SM + mt * 16 + (lane & 15)) * LD + kk * 16 + a_col) * 2;
                    ldmatrix_x4(aq[mt], sQb + off);
                    ldmatrix_x4(ado[mt], sdOb + off);
                }
#pragma unroll
                for (int nb2 = 0; nb2 < SN / 16; nb2++) {
                    const int off = ((ws_n * SN + nb2 * 16 + bk_row) * LD + kk * 16 + bk_col) * 2;
                    uint32_t bk[4], bv[4];
                    ldmatrix_x4(bk, sK_u + off);
                    ldmatrix_x4(bv, sV_u + off);
#pragma unroll
                    for (int mt = 0; mt < MT_S; mt++) {
                        mma_m16n8k16<T>(S[mt][2 * nb2], aq[mt], bk);
                        mma_m16n8k16<T>(S[mt][2 * nb2 + 1], aq[mt], bk + 2);
                        mma_m16n8k16<T>(dP[mt][2 * nb2], ado[mt], bv);
                        mma_m16n8k16<T>(dP[mt][2 * nb2 + 1], ado[mt], bv + 2);
                    }
                }
            }

            // P_ij = exp2(S_ij - lse2_i), dS_ij = P_ij (dP_ij - D_i)    (lines 11, 14)
            const int mm_last = min(mm0 + BM, s.sq) - 1;
            const bool masked = !(n0 >= key_lo(p.a, mm_last, s.sq, s.sk) && n0 + BN <= key_hi(p.a, mm0, s.sq, s.sk));
            float l2r[MT_S][2], dlr[MT_S][2];
#pragma unroll
            for (int mt = 0; mt < MT_S; mt++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int lrow = buf * BM + ws_m * SM + mt * 16 + g + 8 * r;
                    l2r[mt][r] = sL[lrow];
                    dlr[mt][r] = sDl[lrow];
                }
            bwd_p_ds<MT_S, NT_S>(S, dP, p.a, s, l2r, dlr, mm0 + ws_m * SM, n0 + ws_n * SN, slope, masked, lane);
#pragma unroll
            for (int mt = 0; mt < MT_S; mt++)
#pragma unroll
                for (int r = 0; r < 2; r++)
#pragma unroll
                    for (int nt = 0; nt < NT_S; nt++) {
                        const int o = (ws_m * SM + mt * 16 + g + 8 * r) * LDP + ws_n * SN + nt * 8 + 2 * c;
                        *(uint32_t *)(sP + o) = pack2<T>(S[mt][nt][2 * r], S[mt][nt][2 * r + 1]);
                        *(uint32_t *)(sdS + o) = pack2<T>(dP[mt][nt][2 * r], dP[mt][nt][2 * r + 1]);
                    }
            __syncthreads();

            // dV_j += P_ij^T dO_i, dK_j += dS_ij^T Q_i     (lines 13, 16; scale applied at the end)
#pragma unroll
            for (int kk = 0; kk < BM / 16; kk++) {
                uint32_t ap[KT][4], ads[KT][4];
#pragma unroll
                for (int kt = 0; kt < KT; kt++) {
                    const int off = ((kk * 16 + at_row) * LDP + wk_n * KR + kt * 16 + at_col) * 2;
                    ldmatrix_x4_trans(ap[kt], sP_u + off);
                    ldmatrix_x4_trans(ads[kt], sdS_u + off);
                }
#pragma unroll
                for (int db = 0; db < DC / 16; db++) {
                    const int off = ((kk * 16 + bt_row) * LD + wk_d * DC + db * 16 + bt_col) * 2;
                    uint32_t bdo[4], bq[4];
                    ldmatrix_x4_trans(bdo, sdOb + off);
                    ldmatrix_x4_trans(bq, sQb + off);
#pragma unroll
                    for (int kt = 0; kt < KT; kt++) {
                        mma_m16n8k16<T>(dV[kt][2 * db], ap[kt], bdo);
                        mma_m16n8k16<T>(dV[kt][2 * db + 1], ap[kt], bdo + 2);
                        mma_m16n8k16<T>(dK[kt][2 * db], ads[kt], bq);
                        mma_m16n8k16<T>(dK[kt][2 * db + 1], ads[kt], bq + 2);
                    }
                }
            }

            // dQ_i += dS_ij K_j, added to the fp32 accumulator        (line 15)
            if (!p.deterministic) {
                float dq[QT][QDT][4];
#pragma unroll
                for (int qt = 0; qt < QT; qt++)
#pragma unroll
                    for (int dt = 0; dt < QDT; dt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) dq[qt][dt][e] = 0.f;
#pragma unroll
                for (int kk = 0; kk < BN / 16; kk++) {
                    uint32_t a[QT][4];
#pragma unroll
                    for (int qt = 0; qt < QT; qt++)
                        ldmatrix_x4(a[qt], sdS_u + ((wq_m * QR + qt * 16 + (lane & 15)) * LDP + kk * 16 + a_col) * 2);
#pragma unroll
                    for (int db = 0; db < QC / 16; db++) {
                        uint32_t bk[4];
                        ldmatrix_x4_trans(bk, sK_u + ((kk * 16 + bt_row) * LD + wq_d * QC + db * 16 + bt_col) * 2);
#pragma unroll
                        for (int qt = 0; qt < QT; qt++) {
                            mma_m16n8k16<T>(dq[qt][2 * db], a[qt], bk);
                            mma_m16n8k16<T>(dq[qt][2 * db + 1], a[qt], bk + 2);
                        }
                    }
                }
                float *acc = p.dq_acc + (ws_row(p, b, h, s) + mm0) * p.D_pad; // padded rows absorb i >= sq
#pragma unroll
                for (int qt = 0; qt < QT; qt++)
#pragma unroll
                    for (int r = 0; r < 2; r++)
#pragma unroll
                        for (int dt = 0; dt < QDT; dt++) {
                            float *dst = acc + (wq_m * QR + qt * 16 + g + 8 * r) * p.D_pad + wq_d * QC + dt * 8 + 2 * c;
#if __CUDA_ARCH__ >= 900
                            atomicAdd((float2 *)dst, make_float2(dq[qt][dt][2 * r], dq[qt][dt][2 * r + 1]));
#else
                            atomicAdd(dst, dq[qt][dt][2 * r]);
                            atomicAdd(dst + 1, dq[qt][dt][2 * r + 1]);
#endif
                        }
            }
            if (STAGES == 1) {
                __syncthreads(); // every warp is done with Q_i, dO_i
                if (it + 1 < count) {
                    bwd_load_q_block<BM, D, LD, NTHREADS>(p, s, b, h_kv * p.a.group + (it + 1) / n_mb,
                                                          (mb_begin + (it + 1) % n_mb) * BM, sQ, sdO, sL, sDl, tid);
                    cp_async_commit();
                }
            }
        }
    }

    // --- epilogue: dK_j = scale dK_j, dV_j -> smem (over K_j, V_j) -> global, all BN rows the
    //     sequence owns (keys nobody saw get 0) ----------------------------------------------------
    cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int kt = 0; kt < KT; kt++)
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int dt = 0; dt < DT; dt++) {
                const int o = (wk_n * KR + kt * 16 + g + 8 * r) * LD + wk_d * DC + dt * 8 + 2 * c;
                *(uint32_t *)(sK + o) = pack2<T>(dK[kt][dt][2 * r] * p.a.scale, dK[kt][dt][2 * r + 1] * p.a.scale);
                *(uint32_t *)(sV + o) = pack2<T>(dV[kt][dt][2 * r], dV[kt][dt][2 * r + 1]);
            }
    __syncthreads();
    const int out_rows = min(BN, s.sk_len - n0);
    uint16_t *dKg = (uint16_t *)p.dk + b * p.dk_bs + (s.k_row0 + n0) * p.dk_rs + h_kv * p.dk_hs;
    uint16_t *dVg = (uint16_t *)p.dv + b * p.dv_bs + (s.k_row0 + n0) * p.dv_rs + h_kv * p.dv_hs;
    store_tile<BN, D, LD, NTHREADS>(dKg, p.dk_rs, sK, out_rows, p.a.D, p.a.aligned, tid);
    store_tile<BN, D, LD, NTHREADS>(dVg, p.dv_rs, sV, out_rows, p.a.D, p.a.aligned, tid);
}

// ------------------------------------------------------------------------------------------------
// dQ without atomics (deterministic mode): one CTA per (query block, batch, head), like the forward

template <typename T, int D, int BM, int BN, int NWARPS>
__global__ void __launch_bounds__(NWARPS * 32) flashc_bwd_dq_kernel(const __grid_constant__ flashc_bwd_params p) {
    constexpr int NTHREADS = NWARPS * 32;
    constexpr int MT = BM / (16 * NWARPS);
    constexpr int LD = D + 8;
    constexpr int NS = BN / 8, ND = D / 8, KD = D / 16, KN = BN / 16;
    static_assert(MT >= 1 && MT * 16 * NWARPS == BM, "BM must be a multiple of 16 * NWARPS");

    uint16_t *sQ = flashc_smem;        // [BM][LD]
    uint16_t *sdO = sQ + BM * LD;      // [BM][LD]
    uint16_t *sK = sdO + BM * LD;      // [2][BN][LD]
    uint16_t *sV = sK + 2 * BN * LD;   // [2][BN][LD]

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, c = lane & 3;
    const int BH = p.a.B * p.a.H;
    const int n_m_blocks = (p.a.Sq + BM - 1) / BM;
    const int m_block = n_m_blocks - 1 - (int)(blockIdx.x / BH);
    const int bh = (int)(blockIdx.x % BH), h = bh % p.a.H, b = bh / p.a.H;
    const flashc_cuda_seq s = cuda_seq(p.a, b);
    const int m0 = m_block * BM;
    if (m0 >= s.sq) return;
    const int h_kv = h / p.a.group;
    const int m_rows = min(BM, s.sq - m0);
    const int wrow0 = warp * 16 * MT;

    const uint16_t *Kg = (const uint16_t *)p.k + b * p.k_bs + s.k_row0 * p.k_rs + h_kv * p.k_hs;
    const uint16_t *Vg = (const uint16_t *)p.v + b * p.v_bs + s.k_row0 * p.v_rs + h_kv * p.v_hs;
    int nb_min, nb_max, full_lo, full_hi;
    key_blocks_of_rows(p.a, s, m0, m_rows, BN, &nb_min, &nb_max, &full_lo, &full_hi);
    const float slope = p.a.alibi ? p.a.alibi[b * p.a.alibi_bs + h] : 0.f;

    // this thread's rows: lse2_i and D_i straight from the (padded) workspace
    float L2[MT][2], Dl[MT][2];
    const int64_t wr = ws_row(p, b, h, s) + m0 + wrow0;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            L2[mt][r] = p.lse2[wr + mt * 16 + g + 8 * r];
            Dl[mt][r] = p.delta[wr + mt * 16 + g + 8 * r];
        }

    float dq[MT][ND][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nd = 0; nd < ND; nd++)
#pragma unroll
            for (int e = 0; e < 4; e++) dq[mt][nd][e] = 0.f;

    const uint32_t sQ_u = smem_u32(sQ), sdO_u = smem_u32(sdO), sK_u = smem_u32(sK), sV_u = smem_u32(sV);
    const uint32_t q_lane = (uint32_t)(((wrow0 + (lane & 15)) * LD + (lane >> 4) * 8) * 2);
    const uint32_t k_lane = (uint32_t)((((lane & 7) + 8 * (lane >> 4)) * LD + 8 * ((lane >> 3) & 1)) * 2);
    const uint32_t t_lane = (uint32_t)((((lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 8 * (lane >> 4)) * 2);

    if (nb_max > nb_min) {
        const uint16_t *Qg = (const uint16_t *)p.q + b * p.q_bs + (s.q_row0 + m0) * p.q_rs + h * p.q_hs;
        const uint16_t *dOg = (const uint16_t *)p.dout + b * p.do_bs + (s.q_row0 + m0) * p.do_rs + h * p.do_hs;
        load_tile<BM, D, LD, NTHREADS>(sQ, Qg, p.q_rs, m_rows, p.a.D, p.a.aligned, p.q, tid);
        load_tile<BM, D, LD, NTHREADS>(sdO, dOg, p.do_rs, m_rows, p.a.D, p.a.aligned, p.dout, tid);
        {
            const int n0 = (nb_max - 1) * BN;
            load_tile<BN, D, LD, NTHREADS>(sK, Kg + (int64_t)n0 * p.k_rs, p.k_rs, s.sk - n0, p.a.D, p.a.aligned, p.k, tid);
            load_tile<BN, D, LD, NTHREADS>(sV, Vg + (int64_t)n0 * p.v_rs, p.v_rs, s.sk - n0, p.a.D, p.a.aligned, p.v, tid);
        }
        cp_async_commit();
        int stage = 0;
        for (int nb = nb_max - 1; nb >= nb_min; nb--) {
            cp_async_wait<0>();
            __syncthreads();
            if (nb > nb_min) {
                const int n0 = (nb - 1) * BN;
                load_tile<BN, D, LD, NTHREADS>(sK + (stage ^ 1) * BN * LD, Kg + (int64_t)n0 * p.k_rs, p.k_rs, s.sk - n0,
                                               p.a.D, p.a.aligned, p.k, tid);
                load_tile<BN, D, LD, NTHREADS>(sV + (stage ^ 1) * BN * LD, Vg + (int64_t)n0 * p.v_rs, p.v_rs, s.sk - n0,
                                               p.a.D, p.a.aligned, p.v, tid);
                cp_async_commit();
            }
            const uint32_t sKs = sK_u + stage * BN * LD * 2, sVs = sV_u + stage * BN * LD * 2;
            const int n0 = nb * BN;

            // S_ij = Q_i K_j^T, dP_ij = dO_i V_j^T
            float S[MT][NS][4], dP[MT][NS][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < NS; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) S[mt][nt][e] = dP[mt][nt][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KD; kk++) {
                uint32_t aq[MT][4], ado[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    ldmatrix_x4(aq[mt], sQ_u + q_lane + (mt * 16 * LD + kk * 16) * 2);
                    ldmatrix_x4(ado[mt], sdO_u + q_lane + (mt * 16 * LD + kk * 16) * 2);
                }
#pragma unroll
                for (int nb2 = 0; nb2 < KN; nb2++) {
                    uint32_t bk[4], bv[4];
                    ldmatrix_x4(bk, sKs + k_lane + (nb2 * 16 * LD + kk * 16) * 2);
                    ldmatrix_x4(bv, sVs + k_lane + (nb2 * 16 * LD + kk * 16) * 2);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma_m16n8k16<T>(S[mt][2 * nb2], aq[mt], bk);
                        mma_m16n8k16<T>(S[mt][2 * nb2 + 1], aq[mt], bk + 2);
                        mma_m16n8k16<T>(dP[mt][2 * nb2], ado[mt], bv);
                        mma_m16n8k16<T>(dP[mt][2 * nb2 + 1], ado[mt], bv + 2);
                    }
                }
            }
            const bool masked = !(n0 >= full_lo && n0 + BN <= full_hi);
            bwd_p_ds<MT, NS>(S, dP, p.a, s, L2, Dl, m0 + wrow0, n0, slope, masked, lane);

            // dQ_i += dS_ij K_j: dS is already the A fragment (as P is in the forward)
#pragma unroll
            for (int kk = 0; kk < KN; kk++) {
                uint32_t a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    a[mt][0] = pack2<T>(dP[mt][2 * kk][0], dP[mt][2 * kk][1]);
                    a[mt][1] = pack2<T>(dP[mt][2 * kk][2], dP[mt][2 * kk][3]);
                    a[mt][2] = pack2<T>(dP[mt][2 * kk + 1][0], dP[mt][2 * kk + 1][1]);
                    a[mt][3] = pack2<T>(dP[mt][2 * kk + 1][2], dP[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int nd = 0; nd < KD; nd++) {
                    uint32_t bk[4];
                    ldmatrix_x4_trans(bk, sKs + t_lane + (kk * 16 * LD + nd * 16) * 2);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma_m16n8k16<T>(dq[mt][2 * nd], a[mt], bk);
                        mma_m16n8k16<T>(dq[mt][2 * nd + 1], a[mt], bk + 2);
                    }
                }
            }
            stage ^= 1;
        }
    }

    // epilogue: dq = scale dQ_i (bwd_dq_out), staged in this warp's rows of sQ (only this warp reads them)
    cp_async_wait<0>();
    __syncwarp();
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int nd = 0; nd < ND; nd++)
                *(uint32_t *)(sQ + (wrow0 + mt * 16 + g + 8 * r) * LD + nd * 8 + 2 * c) =
                    pack2<T>(bwd_dq_out(dq[mt][nd][2 * r], p.a.scale, L2[mt][r]),
                             bwd_dq_out(dq[mt][nd][2 * r + 1], p.a.scale, L2[mt][r]));
    __syncwarp();
    uint16_t *dQg = (uint16_t *)p.dq + b * p.dq_bs + (s.q_row0 + m0 + wrow0) * p.dq_rs + h * p.dq_hs;
    store_tile<16 * MT, D, LD, 32>(dQg, p.dq_rs, sQ + wrow0 * LD, m_rows - wrow0, p.a.D, p.a.aligned, lane);
}

// ------------------------------------------------------------------------------------------------
// launchers: dQ_acc zero, pre-pass, dK/dV, dQ; one per tile shape (also used by
// dev/cuda/attn_lab.cu), and the tuned one per (dtype, D), instantiated in inst/

static inline cudaError_t flashc_cuda_grid(long long blocks, unsigned *out) {
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    *out = (unsigned)blocks;
    return cudaSuccess;
}

// Before the main kernel (any backward kernel, also flashc_sm90_bwd.cuh): D_i and lse2_i for rows
// 0 .. round_up(sq, 128) - 1, 64 rows per CTA, and in the atomic mode (dq_acc not NULL; D_pad = D
// floats per row) dq_acc = 0 for the same rows, which are all the rows the main kernels add to.
template <typename T, int D>
cudaError_t flashc_cuda_bwd_prepass(flashc_bwd_params *p, cudaStream_t stream) {
    const long long BH = (long long)p->a.B * p->a.H;
    constexpr int smem = flashc_bwd_dot_do_o_smem(D);
    unsigned grid;
    cudaError_t e;
    if ((e = flashc_cuda_grid((long long)((p->a.Sq + FLASHC_WS_PAD - 1) / FLASHC_WS_PAD) * (FLASHC_WS_PAD / 64) * BH, &grid)) != cudaSuccess) return e;
    if (!grid) return cudaSuccess;
    if (smem > 48 * 1024 &&
        (e = cudaFuncSetAttribute(flashc_bwd_dot_do_o_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) != cudaSuccess)
        return e;
    flashc_bwd_dot_do_o_kernel<T, D><<<grid, 128, smem, stream>>>(*p);
    return cudaGetLastError();
}

// After the main kernel in atomic mode: dq = scale * dq_acc (bwd_dq_out).
template <typename T, int D>
cudaError_t flashc_cuda_bwd_finish(flashc_bwd_params *p, cudaStream_t stream) {
    constexpr int ROWS = 256 / (D / 8);
    unsigned grid;
    cudaError_t e;
    if ((e = flashc_cuda_grid((long long)((p->a.Sq + ROWS - 1) / ROWS) * p->a.B * p->a.H, &grid)) != cudaSuccess) return e;
    if (grid) flashc_bwd_convert_dq_kernel<T, D><<<grid, 256, 0, stream>>>(*p);
    return cudaGetLastError();
}

template <typename T, int D, int BM, int BN, int NWARPS, int STAGES, int WM_S, int WN_KV, int WM_Q, int QBM, int QBN,
          int QNWARPS>
cudaError_t flashc_cuda_bwd_run(flashc_bwd_params *p, cudaStream_t stream) {
    constexpr int smem = (2 * STAGES * BM * (D + 8) + 2 * BN * (D + 8) + 2 * BM * (BN + 8)) * 2 + 2 * STAGES * BM * 4;
    constexpr int smem_dq = (2 * QBM + 4 * QBN) * (D + 8) * 2;
    // (the pre-pass zeroes dq_acc only up to round_up(sq, FLASHC_WS_PAD) rows: the query blocks'
    // rows must end there)
    static_assert(BM <= FLASHC_WS_PAD && FLASHC_WS_PAD % BM == 0 && FLASHC_WS_PAD % QBM == 0, "padding");
    p->D_pad = D;
    const long long BH = (long long)p->a.B * p->a.H;
    if (BH == 0) return cudaSuccess;
    unsigned grid;
    cudaError_t e;

    if ((e = flashc_cuda_bwd_prepass<T, D>(p, stream)) != cudaSuccess) return e;

    // dK, dV (and dQ_acc)
    void (*dkdv)(const flashc_bwd_params) = flashc_bwd_dkdv_kernel<T, D, BM, BN, NWARPS, STAGES, WM_S, WN_KV, WM_Q>;
    if ((e = cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) != cudaSuccess) return e;
    if ((e = flashc_cuda_grid((long long)((p->a.Sk + BN - 1) / BN) * p->a.B * p->a.H_kv, &grid)) != cudaSuccess) return e;
    if (grid) dkdv<<<grid, NWARPS * 32, smem, stream>>>(*p);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;

    if (p->deterministic) {
        void (*dqk)(const flashc_bwd_params) = flashc_bwd_dq_kernel<T, D, QBM, QBN, QNWARPS>;
        if ((e = cudaFuncSetAttribute(dqk, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_dq)) != cudaSuccess) return e;
        if ((e = flashc_cuda_grid((long long)((p->a.Sq + QBM - 1) / QBM) * BH, &grid)) != cudaSuccess) return e;
        if (grid) dqk<<<grid, QNWARPS * 32, smem_dq, stream>>>(*p);
        return cudaGetLastError();
    }
    return flashc_cuda_bwd_finish<T, D>(p, stream);
}

template <typename T, int D>
cudaError_t flashc_cuda_bwd_launch(flashc_bwd_params *p, cudaStream_t stream) {
    constexpr flashc_cuda_tile t = flashc_cuda_tune_bwd(D), tq = flashc_cuda_tune_bwd_dq(D);
    return flashc_cuda_bwd_run<T, D, t.bm, t.bn, t.nwarps, t.stages, t.wm_sdp, t.wn_kv, t.wm_dq, tq.bm, tq.bn, tq.nwarps>(
        p, stream);
}

#endif // FLASHC_CUDA_BWD_CUH
