// fwd90_lab.cu -- the tuning lab of the Hopper (wgmma) forward, src/cuda/flashc_sm90_fwd.cuh:
// times tile shapes and CTA orders side by side on DESIGN.md §3's training shapes (bf16, B * S =
// 16k, hidden 2048), each checked against the tuned mma.sync forward on the same inputs.
// Winners go into flashc_cuda_tune_fwd_sm90 (src/cuda/flashc_cuda_tune.h).
//
// Build (sm_90a only) and run:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc dev/cuda/fwd90_lab.cu -o build/fwd90_lab
//   build/fwd90_lab [seqlen ...]     (default 4096)
// Variant names: "NWGxBN sSTAGES [pp|ws]" (warpgroups of 64 query rows, keys per step, K/V ring
// depth; pp: the ping-pong loop, ws: the warp-specialized TMA kernel, else lockstep);
// "order BH" runs the tuned shape with one CTA group over all (batch, head)s, i.e. without the
// L2-sized grouping (bh_chunk); "1 CTA/tile" the tuned shape without the persistent grid.
// Exit on error is fine here (a lab, not the library).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/flashc_cuda_fwd.cuh"
#include "cuda/flashc_sm90_fwd.cuh"
#include "lab.h"

typedef __nv_bfloat16 bf16;
typedef cudaError_t (*fwd_fn)(flashc_fwd_params *, cudaStream_t);

__global__ void maxdiff_kernel(const bf16 *a, const bf16 *b, size_t n, float *out) {
    float m = 0.f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float d = fabsf(__bfloat162float(a[i]) - __bfloat162float(b[i]));
        m = fmaxf(m, d != d ? 1e30f : d);
    }
    atomicMax((int *)out, __float_as_int(m));
}

static float maxdiff(const bf16 *a, const bf16 *b, size_t n, float *d_tmp) {
    CK(cudaMemset(d_tmp, 0, 4));
    maxdiff_kernel<<<512, 256>>>(a, b, n, d_tmp);
    float h;
    CK(cudaMemcpy(&h, d_tmp, 4, cudaMemcpyDeviceToHost));
    return h;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

typedef struct lab {
    int B, S, H, D, causal;
    bf16 *q, *k, *v, *o, *o2;
    float *lse, *tmp;
    size_t n;
    flashc_fwd_params fp;
} lab;

static void setup(lab *L, int S, int D, int causal) {
    L->S = S, L->D = D, L->causal = causal, L->B = 16384 / S, L->H = 2048 / D;
    L->n = (size_t)L->B * S * L->H * D;
    bf16 **bufs[] = {&L->q, &L->k, &L->v, &L->o, &L->o2};
    for (size_t i = 0; i < 5; i++) CK(cudaMalloc(bufs[i], L->n * 2));
    CK(cudaMalloc(&L->lse, (size_t)L->B * L->H * S * 4));
    CK(cudaMalloc(&L->tmp, 16));
    lab_fill<<<1024, 256>>>(L->q, L->n, 1u, 2.f);
    lab_fill<<<1024, 256>>>(L->k, L->n, 2u, 2.f);
    lab_fill<<<1024, 256>>>(L->v, L->n, 3u, 2.f);
    flashc_fwd_params *f = &L->fp;
    memset(f, 0, sizeof *f);
    flashc_cuda_attn *a = &f->a;
    a->B = L->B, a->H = a->H_kv = L->H, a->group = 1, a->Sq = a->Sk = S, a->D = D;
    a->total_q = (int64_t)L->B * S;
    a->window_left = -1, a->window_right = causal ? 0 : -1;
    a->scale = 1.f / sqrtf((float)D), a->scale_log2 = a->scale * FLASHC_LOG2E;
    f->o_scale = 1.f;
    CK(cudaDeviceGetAttribute(&f->ctas, cudaDevAttrMultiProcessorCount, 0)); // the persistent grid, as the library
    a->aligned = 1;
    const int64_t rs = (int64_t)L->H * D, bs = rs * S;
    f->q = L->q, f->k = L->k, f->v = L->v, f->o = L->o, f->lse = L->lse;
    f->q_bs = f->k_bs = f->v_bs = f->o_bs = bs;
    f->q_rs = f->k_rs = f->v_rs = f->o_rs = rs;
    f->q_hs = f->k_hs = f->v_hs = f->o_hs = D;
}

static void teardown(lab *L) {
    bf16 *bufs[] = {L->q, L->k, L->v, L->o, L->o2};
    for (size_t i = 0; i < 5; i++) CK(cudaFree(bufs[i]));
    CK(cudaFree(L->lse));
    CK(cudaFree(L->tmp));
}

// median ms of reps runs, each timed alone
static float time_it(fwd_fn f, flashc_fwd_params *p, int reps) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[64];
    for (int r = 0; r < reps + 2; r++) {
        CK(cudaEventRecord(e0));
        CK(f(p, 0));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        if (r >= 2) CK(cudaEventElapsedTime(&t[r - 2], e0, e1));
    }
    qsort(t, reps, sizeof t[0], cmp_float);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return t[reps / 2];
}

static int g_ctas = -1; // >= 0: the variants run with this p.ctas (0: one CTA per tile, no persistence)

static void variant(lab *L, const char *name, fwd_fn f, int bh_chunk) {
    flashc_fwd_params p = L->fp;
    p.o = L->o2, p.bh_chunk = bh_chunk;
    if (g_ctas >= 0) p.ctas = g_ctas;
    CK(cudaMemset(L->o2, 0xff, L->n * 2)); // NaN: unwritten outputs show up in the check
    CK(f(&p, 0));
    CK(cudaDeviceSynchronize());
    const float err = maxdiff(L->o, L->o2, L->n, L->tmp);
    p.bh_chunk = bh_chunk;
    const float ms = time_it(f, &p, 15);
    const double fl = 4.0 * L->B * L->H * (double)L->S * L->S * L->D / (L->causal ? 2 : 1);
    printf("D=%3d S=%5d causal=%d %-18s %8.3f ms %6.1f TFLOP/s  max|o - o_mma| = %.3g\n", L->D, L->S, L->causal, name,
           ms, fl / ms / 1e9, err);
    fflush(stdout);
}

int main(int argc, char **argv) {
    int seqs[8] = {4096}, ns = 1;
    if (argc > 1) {
        ns = 0;
        for (int i = 1; i < argc && ns < 8; i++) seqs[ns++] = atoi(argv[i]);
    }
    for (int si = 0; si < ns; si++)
        for (int causal = 0; causal < 2; causal++) {
            const int S = seqs[si];
            lab L;
            setup(&L, S, 64, causal);
            CK(flashc_cuda_fwd_launch<bf16, 64>(&L.fp, 0));
            variant(&L, "mma.sync tuned", flashc_cuda_fwd_launch<bf16, 64>, 0);
            variant(&L, "sm90 tuned", flashc_cuda_fwd_sm90_launch<bf16, 64>, 0);
            variant(&L, "sm90 tuned order BH", flashc_cuda_fwd_sm90_launch<bf16, 64>, L.B * L.H);
            g_ctas = 0;
            variant(&L, "sm90 tuned 1 CTA/tile", flashc_cuda_fwd_sm90_launch<bf16, 64>, 0);
            g_ctas = -1;
            variant(&L, "2x128 s3 pp", flashc_cuda_fwd_sm90_run<bf16, 64, 2, 128, 3, 1>, 0);
            variant(&L, "2x128 s3 ws", flashc_cuda_fwd_sm90_run<bf16, 64, 2, 128, 3, 2>, 0);
            variant(&L, "3x128 s3 ws", flashc_cuda_fwd_sm90_run<bf16, 64, 3, 128, 3, 2>, 0);
            teardown(&L);

            setup(&L, S, 128, causal);
            CK(flashc_cuda_fwd_launch<bf16, 128>(&L.fp, 0));
            variant(&L, "mma.sync tuned", flashc_cuda_fwd_launch<bf16, 128>, 0);
            variant(&L, "sm90 tuned", flashc_cuda_fwd_sm90_launch<bf16, 128>, 0);
            variant(&L, "sm90 tuned order BH", flashc_cuda_fwd_sm90_launch<bf16, 128>, L.B * L.H);
            g_ctas = 0;
            variant(&L, "sm90 tuned 1 CTA/tile", flashc_cuda_fwd_sm90_launch<bf16, 128>, 0);
            g_ctas = -1;
            variant(&L, "2x128 s3 pp", flashc_cuda_fwd_sm90_run<bf16, 128, 2, 128, 3, 1>, 0);
            variant(&L, "2x128 s3 ws", flashc_cuda_fwd_sm90_run<bf16, 128, 2, 128, 3, 2>, 0);
            variant(&L, "2x128 s2 ws", flashc_cuda_fwd_sm90_run<bf16, 128, 2, 128, 2, 2>, 0);
            variant(&L, "2x176 s2 ws", flashc_cuda_fwd_sm90_run<bf16, 128, 2, 176, 2, 2>, 0);
            teardown(&L);

            setup(&L, S, 256, causal);
            CK(flashc_cuda_fwd_launch<bf16, 256>(&L.fp, 0));
            variant(&L, "mma.sync tuned", flashc_cuda_fwd_launch<bf16, 256>, 0);
            variant(&L, "sm90 tuned", flashc_cuda_fwd_sm90_launch<bf16, 256>, 0);
            variant(&L, "sm90 tuned order BH", flashc_cuda_fwd_sm90_launch<bf16, 256>, L.B * L.H);
            g_ctas = 0;
            variant(&L, "sm90 tuned 1 CTA/tile", flashc_cuda_fwd_sm90_launch<bf16, 256>, 0);
            g_ctas = -1;
            variant(&L, "2x80 s2", flashc_cuda_fwd_sm90_run<bf16, 256, 2, 80, 2, 0>, 0);
            variant(&L, "2x80 s2 ws", flashc_cuda_fwd_sm90_run<bf16, 256, 2, 80, 2, 2>, 0);
            variant(&L, "2x64 s2 ws", flashc_cuda_fwd_sm90_run<bf16, 256, 2, 64, 2, 2>, 0);
            teardown(&L);
        }
    return 0;
}
