// fwd90_trace.cu -- where the persistent Hopper forward's time goes per tile: clock64 stamps at the
// FLASHC_FWD_TRACE hooks of flashc_sm90_fwd.cuh (Q_i landed, K_0 landed, the wgmma turn, first S_ij,
// the key loop, the last PV, the epilogue), averaged over the middle tiles of every CTA and its
// consumer warpgroups. For full tiles only (no windows: a tile without key blocks leaves its
// stamps on the previous one). Then, with --steps, the same for the key loop's phases at the
// FLASHC_FWD_STEP hooks (K_j landed, the wgmma turn, S_ij done, softmax, PV done, P packed), over
// the middle key blocks of each CTA's second tile, bf16 and e4m3 (which ncu found both pipes half
// busy in, NOTES s41: where does the rest of a block's time go?).
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc dev/cuda/fwd90_trace.cu -lcuda -o build/fwd90_trace
//   build/fwd90_trace [seqlen ...]           (default 512 2048; D = 64, 128, 256, bf16)
//   build/fwd90_trace --steps [seqlen ...]   (default 16384; D = 128 bf16, e4m3 D = 128 and 256)
#include <math.h>
#include <stdio.h>
#include <string.h>

#define TR_CTAS 132
#define TR_UNITS 96
#define TR_STEPS 64
#define TR_STEP_UNIT 1 // each CTA's second tile
__device__ unsigned long long g_trace[TR_CTAS][4][TR_UNITS][8];
__device__ unsigned long long g_step[TR_CTAS][3][TR_STEPS][8];
#define FLASHC_FWD_TRACE(wg, unit, ev)                                                                 \
    do {                                                                                               \
        if ((threadIdx.x & 127) == 0 && blockIdx.x < TR_CTAS && (unit) >= 0 && (unit) < TR_UNITS)      \
            g_trace[blockIdx.x][wg][unit][ev] = clock64();                                             \
    } while (0)
#define FLASHC_FWD_STEP(c, unit, t, ev)                                                                \
    do {                                                                                               \
        if ((threadIdx.x & 127) == 0 && blockIdx.x < TR_CTAS && (unit) == TR_STEP_UNIT && (t) < TR_STEPS) \
            g_step[blockIdx.x][c][t][ev] = clock64();                                                  \
    } while (0)
#include "cuda/flashc_sm90_fwd.cuh"
#include "lab.h"

typedef __nv_bfloat16 bf16;
typedef __nv_fp8_e4m3 e4m3;
static unsigned long long h_trace[TR_CTAS][4][TR_UNITS][8];
static unsigned long long h_step[TR_CTAS][3][TR_STEPS][8];

// The key loop's phases (FLASHC_FWD_STEP events 0 top, 1 K_j landed, 2 turn, 3 S_ij done, 4 softmax
// done, 5 PV done, 6 P packed; next top), mean cycles over blocks 2 .. of every CTA's second tile.
// ptxas schedules the wait for PV_t-1 right after the row max (NOTES s42), so most of that wait
// falls in "softmax", and "PV wait" is what is left of it (the stamps' own cost, mostly).
static void print_steps(int NWG) {
    const char *name[] = {"K_j wait", "turn wait", "issue + S wait", "softmax", "PV wait", "rescale + pack", "to next",
                          "block"};
    double sum[8] = {0};
    long cnt = 0;
    for (int cta = 0; cta < TR_CTAS; cta++)
        for (int c = 0; c < NWG; c++)
            for (int t = 2; t + 1 < TR_STEPS; t++) {
                const unsigned long long *e = h_step[cta][c][t], *nx = h_step[cta][c][t + 1];
                if (!nx[0] || !e[6]) break; // the tile's last block, or a tile not reached
                for (int i = 0; i < 6; i++) sum[i] += (double)(e[i + 1] - e[i]);
                sum[6] += (double)(nx[0] - e[6]), sum[7] += (double)(nx[0] - e[0]);
                cnt++;
            }
    printf("  key loop, mean cycles per block over %ld blocks (consumers' own view):\n", cnt);
    for (int i = 0; i < 8; i++) printf("    %-16s %8.0f\n", name[i], cnt ? sum[i] / cnt : 0.);
}

template <typename T, int D>
static void run(int S, int causal, bool steps) {
    constexpr bool FP8 = sm90_elem<T>::FP8;
    const int B = 16384 / S, H = 2048 / D, NWG =
        flashc_cuda_tune_fwd_sm90(D, FP8, S < flashc_cuda_fwd_sm90_short_keys(D, FP8, causal)).nwarps / 4;
    const size_t n = (size_t)B * S * H * D;
    T *q, *k, *v;
    bf16 *o;
    float *lse;
    uint8_t *vt = NULL;
    CK(cudaMalloc(&q, n * sizeof(T)));
    CK(cudaMalloc(&k, n * sizeof(T)));
    CK(cudaMalloc(&v, n * sizeof(T)));
    CK(cudaMalloc(&o, n * 2));
    CK(cudaMalloc(&lse, (size_t)B * H * S * 4));
    lab_fill<<<1024, 256>>>(q, n, 1u, 2.f);
    lab_fill<<<1024, 256>>>(k, n, 2u, 2.f);
    lab_fill<<<1024, 256>>>(v, n, 3u, 2.f);
    if (FP8) CK(cudaMalloc(&vt, (size_t)H * D * fp8_vt_col0((int64_t)B * S, B)));
    flashc_fwd_params p;
    memset(&p, 0, sizeof p);
    flashc_cuda_attn *a = &p.a;
    a->B = B, a->H = a->H_kv = H, a->group = 1, a->Sq = a->Sk = S, a->D = D, a->total_q = (int64_t)B * S;
    a->window_left = -1, a->window_right = causal ? 0 : -1;
    a->scale = 1.f / sqrtf((float)D), a->scale_log2 = a->scale * FLASHC_LOG2E, a->aligned = 1;
    p.o_scale = 1.f;
    CK(cudaDeviceGetAttribute(&p.ctas, cudaDevAttrMultiProcessorCount, 0));
    p.q = q, p.k = k, p.v = v, p.o = o, p.lse = lse, p.vt = vt, p.vt_cols = FP8 ? fp8_vt_col0((int64_t)B * S, B) : 0;
    p.q_bs = p.k_bs = p.v_bs = p.o_bs = (int64_t)H * D * S;
    p.q_rs = p.k_rs = p.v_rs = p.o_rs = (int64_t)H * D;
    p.q_hs = p.k_hs = p.v_hs = p.o_hs = D;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float ms = 0.f;
    for (int r = 0; r < 6; r++) {
        flashc_fwd_params pr = p;
        void *tp;
        CK(cudaGetSymbolAddress(&tp, g_trace));
        CK(cudaMemset(tp, 0, sizeof h_trace));
        CK(cudaGetSymbolAddress(&tp, g_step));
        CK(cudaMemset(tp, 0, sizeof h_step));
        CK(cudaEventRecord(e0));
        CK(flashc_cuda_fwd_sm90_launch<T, D>(&pr, 0));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
    }
    CK(cudaMemcpyFromSymbol(h_trace, g_trace, sizeof h_trace));
    CK(cudaMemcpyFromSymbol(h_step, g_step, sizeof h_step));
    // phases of consumer c (events: 0 top, 1 Q_i landed, 7 K_0 landed, 2 turn, 3 S_0 done, 4 loop done,
    // 5 last PV done, 6 stored; next top) and of the producer (0 top, 1 Q slot free, 2 all issued)
    const char *name[] = {"Q wait", "K0 wait", "turn", "S_0", "loop", "last PV", "store", "to next", "unit",
                          "prod: Q slot wait", "prod: issue", "prod: to next"};
    double sum[12] = {0};
    long cnt = 0;
    for (int cta = 0; cta < TR_CTAS; cta++)
        for (int u = 1; u + 2 < TR_UNITS; u++) {
            int done = !h_trace[cta][0][u + 1][0];
            for (int c = 1; c <= NWG; c++) done |= !h_trace[cta][c][u + 1][0];
            if (done) break;
            for (int c = 1; c <= NWG; c++) {
                const unsigned long long *e = h_trace[cta][c][u], *nx = h_trace[cta][c][u + 1];
                const double d[9] = {(double)(e[1] - e[0]), (double)(e[7] - e[1]), (double)(e[2] - e[7]),
                                     (double)(e[3] - e[2]), (double)(e[4] - e[3]), (double)(e[5] - e[4]),
                                     (double)(e[6] - e[5]), (double)(nx[0] - e[6]), (double)(nx[0] - e[0])};
                for (int i = 0; i < 9; i++) sum[i] += d[i] / NWG;
            }
            const unsigned long long *e = h_trace[cta][0][u], *nx = h_trace[cta][0][u + 1];
            sum[9] += (double)(e[1] - e[0]), sum[10] += (double)(e[2] - e[1]), sum[11] += (double)(nx[0] - e[2]);
            cnt++;
        }
    const double fl = 4.0 * B * H * (double)S * S * D / (causal ? 2 : 1);
    printf("%s D=%d S=%d causal=%d: %.3f ms, %.1f TFLOP/s; mean cycles per unit over %ld middle units (consumers' mean):\n",
           FP8 ? "e4m3" : "bf16", D, S, causal, ms, fl / ms / 1e9, cnt);
    for (int i = 0; i < 12; i++) printf("  %-18s %8.0f\n", name[i], cnt ? sum[i] / cnt : 0.);
    if (steps) print_steps(NWG);
    fflush(stdout);
    CK(cudaFree(vt));
    CK(cudaFree(q));
    CK(cudaFree(k));
    CK(cudaFree(v));
    CK(cudaFree(o));
    CK(cudaFree(lse));
}

int main(int argc, char **argv) {
    const bool steps = argc > 1 && !strcmp(argv[1], "--steps");
    int seqs[8] = {512, 2048}, ns = 2;
    if (steps) seqs[0] = 16384, ns = 1;
    if (argc > 1 + steps) {
        ns = 0;
        for (int i = 1 + steps; i < argc && ns < 8; i++) seqs[ns++] = atoi(argv[i]);
    }
    for (int si = 0; si < ns; si++)
        for (int causal = 0; causal < 2; causal++) {
            if (steps) {
                run<bf16, 128>(seqs[si], causal, true);
                run<e4m3, 128>(seqs[si], causal, true);
                run<e4m3, 256>(seqs[si], causal, true);
                continue;
            }
            run<bf16, 64>(seqs[si], causal, false);
            run<bf16, 128>(seqs[si], causal, false);
            run<bf16, 256>(seqs[si], causal, false);
        }
    return 0;
}
