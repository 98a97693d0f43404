// dec_trace.cu -- where a decode call's time goes: %globaltimer stamps (ns, one clock for every SM)
// at the FLASHC_DEC_TRACE hooks of the tensor-core decode kernel (flashc_cuda_decode.cu: CTA entry,
// Q_i in shared memory, each warp's first step landed, each warp's key loop done, the warps' O_i in
// shared memory, the rows stored or parked, the CTA finished), for the decode shapes
// of bench/bench_gpu.py (bf16, GQA 32/8, head_dim 128, seqlen_q 1, contiguous cache), through the
// library's own launcher (its split plan). Prints, per shape: the call's event time, the kernel's
// span from the first CTA's entry to the last CTA's end, and where the CTAs spend it (the spread of
// their entries, the wait for Q_i and for the first K_j / V_j, the key loop and its rate, the spread
// of the loops' ends over the CTAs and over the warps of a CTA, the finish and merge in three parts).
// First run: bench/results/h200-2026-12-02-s15.txt.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DFLASHC_BUILD -DFLASHC_WITH_CUDA \
//        -Iinclude -Isrc dev/cuda/dec_trace.cu -o build/dec_trace
//   build/dec_trace [B:Sk ...]   (default 1:65536 16:4096 16:16384 16:65536)
#include <math.h>
#include <stdio.h>
#include <string.h>

#define TR_CTAS 4096
__device__ unsigned long long g_dt[TR_CTAS][13];
#define FLASHC_DEC_TRACE(ev)                                                                                 \
    do {                                                                                                     \
        unsigned long long t_;                                                                               \
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                                              \
        const unsigned cta_ = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);                \
        if (cta_ < TR_CTAS) g_dt[cta_][ev] = t_;                                                             \
    } while (0)
#include "cuda/flashc_cuda_decode.cu"
#include "lab.h"
static_assert(DEC_WARPS <= 4, "stamps 1 + w and 5 + w of warp w");

static unsigned long long h_dt[TR_CTAS][13];

static int cmp_u64(const void *a, const void *b) {
    const unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

// the q-quantile of n values (sorted in place)
static double quant(unsigned long long *v, int n, double q) {
    qsort(v, n, sizeof *v, cmp_u64);
    return (double)v[(int)(q * (n - 1) + 0.5)];
}

static void run(int B, int Sk) {
    const int H = 32, Hkv = 8, D = 128;
    const size_t nq = (size_t)B * H * D, nkv = (size_t)B * Sk * Hkv * D;
    __nv_bfloat16 *q, *k, *v, *o;
    float *lse;
    CK(cudaMalloc(&q, nq * 2));
    CK(cudaMalloc(&o, nq * 2));
    CK(cudaMalloc(&k, nkv * 2));
    CK(cudaMalloc(&v, nkv * 2));
    CK(cudaMalloc(&lse, (size_t)B * H * 4));
    lab_fill<<<1024, 256>>>(q, nq, 1u, 1.f);
    lab_fill<<<1024, 256>>>(k, nkv, 2u, 1.f);
    lab_fill<<<1024, 256>>>(v, nkv, 3u, 1.f);

    flashc_problem p;
    memset(&p, 0, sizeof p);
    p.B = B, p.Sq = 1, p.Sk = Sk, p.H = H, p.H_kv = Hkv, p.D = D, p.group = H / Hkv;
    p.dtype = p.o_dtype = FLASHC_DTYPE_BF16;
    p.q_descale = p.k_descale = p.v_descale = 1.f;
    p.scale = 1.f / sqrtf((float)D);
    p.window_left = p.window_right = -1;
    p.total_q = B, p.total_k = (int64_t)B * Sk;
    p.q_stride[0] = p.o_stride[0] = (int64_t)H * D, p.q_stride[1] = p.o_stride[1] = (int64_t)H * D;
    p.q_stride[2] = p.o_stride[2] = D;
    p.k_stride[0] = p.v_stride[0] = (int64_t)Sk * Hkv * D, p.k_stride[1] = p.v_stride[1] = (int64_t)Hkv * D;
    p.k_stride[2] = p.v_stride[2] = D;
    flashc_kvcache_args a;
    memset(&a, 0, sizeof a);
    a.q = q, a.k_cache = k, a.v_cache = v, a.o = o, a.lse = lse;
    int sms, optin;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    flashc_dec_occ oc = {NULL, 0}; // as a ctx keeps it
    a.ws_size = flashc__cuda_kvcache_ws(&p, &a, sms, optin, &oc);
    if (a.ws_size) CK(cudaMalloc(&a.ws, a.ws_size));
    int *counters;
    CK(cudaMalloc(&counters, flashc__cuda_kvcache_counters(&p) * sizeof(int)));
    CK(cudaMemset(counters, 0, flashc__cuda_kvcache_counters(&p) * sizeof(int)));

    void *tp;
    CK(cudaGetSymbolAddress(&tp, g_dt));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float ms = 0.f;
    for (int r = 0; r < 8; r++) { // the last call's stamps are kept
        CK(cudaMemset(tp, 0, sizeof h_dt));
        CK(cudaEventRecord(e0));
        CK(flashc__cuda_kvcache(&p, &a, sms, optin, &oc, counters));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
    }
    CK(cudaMemcpyFromSymbol(h_dt, g_dt, sizeof h_dt));

    int n = 0;
    while (n < TR_CTAS && h_dt[n][0]) n++;
    static unsigned long long entry[TR_CTAS], first[TR_CTAS], loop[TR_CTAS], loop_end[TR_CTAS], warps[TR_CTAS],
        fin[TR_CTAS], qin[TR_CTAS], f_sm[TR_CTAS], f_rows[TR_CTAS], f_cnt[TR_CTAS];
    unsigned long long t0 = ~0ull, t_end = 0;
    for (int c = 0; c < n; c++) {
        t0 = h_dt[c][0] < t0 ? h_dt[c][0] : t0;
        t_end = h_dt[c][9] > t_end ? h_dt[c][9] : t_end;
    }
    // what balancing the warps of each CTA could give at best: the last CTA's loop end if every CTA
    // ended at the mean of its warps' ends (bal), against the last warp's; the four latest CTAs
    double bal = 0.0;
    int late[4] = {-1, -1, -1, -1};
    for (int c = 0; c < n; c++) {
        const unsigned long long *e = h_dt[c];
        unsigned long long f = ~0ull, l0 = ~0ull, l1 = 0;
        double mean = 0.0;
        for (int w = 0; w < DEC_WARPS; w++) {
            if (e[1 + w] && e[1 + w] < f) f = e[1 + w];
            if (e[5 + w] < l0) l0 = e[5 + w];
            if (e[5 + w] > l1) l1 = e[5 + w];
            mean += (double)(e[5 + w] - t0) / DEC_WARPS;
        }
        bal = mean > bal ? mean : bal;
        entry[c] = e[0] - t0;
        first[c] = f == ~0ull ? 0 : f - e[0];
        loop[c] = f == ~0ull ? 0 : l1 - f;
        loop_end[c] = l1 - t0;
        warps[c] = l1 - l0;
        fin[c] = e[9] - l1;
        qin[c] = e[10] - e[0];
        f_sm[c] = e[11] - l1;
        f_rows[c] = e[12] - e[11];
        f_cnt[c] = e[9] - e[12];
        for (int k = 0; k < 4; k++) // loop_end is not sorted yet (quant sorts it below)
            if (late[k] < 0 || loop_end[c] > loop_end[late[k]]) {
                for (int j = 3; j > k; j--) late[j] = late[j - 1];
                late[k] = c;
                break;
            }
    }
    const double kv_bytes = 2.0 * nkv * 2, span = (double)(t_end - t0);
    printf("B=%d Sk=%d: %d CTAs, event %.1f us, kernel span %.1f us (%.0f GB/s over the span, %.0f over the event)\n",
           B, Sk, n, ms * 1e3, span / 1e3, kv_bytes / span, kv_bytes / (ms * 1e6));
    printf("  us, over the CTAs:          median      max\n");
    printf("  entry after the first      %7.2f  %7.2f\n", quant(entry, n, 0.5) / 1e3, quant(entry, n, 1.0) / 1e3);
    printf("  Q_i in shared memory       %7.2f  %7.2f\n", quant(qin, n, 0.5) / 1e3, quant(qin, n, 1.0) / 1e3);
    printf("  first K_j, V_j landed      %7.2f  %7.2f\n", quant(first, n, 0.5) / 1e3, quant(first, n, 1.0) / 1e3);
    const double loop_med = quant(loop, n, 0.5);
    printf("  key loop                   %7.2f  %7.2f   (%.1f GB/s per CTA at the median)\n", loop_med / 1e3,
           quant(loop, n, 1.0) / 1e3, kv_bytes / n / loop_med);
    printf("  loop end after the first   %7.2f  %7.2f   (min %.2f)\n", quant(loop_end, n, 0.5) / 1e3,
           quant(loop_end, n, 1.0) / 1e3, quant(loop_end, n, 0.0) / 1e3);
    printf("  warps' loop ends, spread   %7.2f  %7.2f\n", quant(warps, n, 0.5) / 1e3, quant(warps, n, 1.0) / 1e3);
    const int g_x = n / (Hkv * B); // the grid's x: row chunks x splits
    printf("  last loop end if each CTA ended at its warps' mean: %.2f us\n", bal / 1e3);
    for (int k = 0; k < 4 && late[k] >= 0; k++) {
        printf("    late CTA %4d (x %d, kv head %d, b %d): warps end at", late[k], late[k] % g_x,
               late[k] / g_x % Hkv, late[k] / g_x / Hkv);
        for (int w = 0; w < DEC_WARPS; w++) printf(" %.2f", (h_dt[late[k]][5 + w] - t0) / 1e3);
        printf("\n");
    }
    printf("  finish (and merge)         %7.2f  %7.2f\n", quant(fin, n, 0.5) / 1e3, quant(fin, n, 1.0) / 1e3);
    printf("    warps' O_i in shared     %7.2f  %7.2f\n", quant(f_sm, n, 0.5) / 1e3, quant(f_sm, n, 1.0) / 1e3);
    printf("    rows stored / parked     %7.2f  %7.2f\n", quant(f_rows, n, 0.5) / 1e3, quant(f_rows, n, 1.0) / 1e3);
    printf("    split count (and merge)  %7.2f  %7.2f\n", quant(f_cnt, n, 0.5) / 1e3, quant(f_cnt, n, 1.0) / 1e3);
    fflush(stdout);
    CK(cudaFree(q));
    CK(cudaFree(o));
    CK(cudaFree(k));
    CK(cudaFree(v));
    CK(cudaFree(lse));
    CK(cudaFree(counters));
    if (a.ws) CK(cudaFree(a.ws));
}

int main(int argc, char **argv) {
    int shapes[16][2] = {{1, 65536}, {16, 4096}, {16, 16384}, {16, 65536}}, ns = 4;
    if (argc > 1) {
        ns = 0;
        for (int i = 1; i < argc && ns < 16; i++)
            if (sscanf(argv[i], "%d:%d", &shapes[ns][0], &shapes[ns][1]) == 2) ns++;
    }
    for (int i = 0; i < ns; i++) run(shapes[i][0], shapes[i][1]);
    return 0;
}
