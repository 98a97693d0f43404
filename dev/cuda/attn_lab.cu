// attn_lab.cu -- the tuning lab of the CUDA backend (llm.c dev/cuda style): times tile shapes of
// the src/cuda kernels side by side on DESIGN.md §3's training shapes, after checking each against
// the tuned (production) shape on the same inputs. Winners go into src/cuda/flashc_cuda_tune.h.
//
// Build (here or on the GPU machine) and run:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc dev/cuda/attn_lab.cu -o build/attn_lab
//   build/attn_lab [seqlen]        (default 4096; batch = 16384 / seqlen, heads = 2048 / D, bf16)
//
// Versions (a row of the tuning table each): "fwd BMxBNxWARPS sSTAGES", "bwd BMxBNxWARPS mWM_S kvWN_KV
// qWM_Q" (warp grids of the three backward matmuls; see flashc_cuda_bwd.cuh). The tuned row of each
// head dim comes first; the others are the runners-up worth re-measuring after a kernel change.
// Earlier rounds (same day, H200, S = 4096, TFLOP/s) live in the comments of flashc_cuda_tune.h.
// `attn_lab profile` runs the tuned D = 128 forward and backward once each (for ncu).
// Exit on error is fine here (a lab, not the library).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/flashc_cuda_bwd.cuh"
#include "cuda/flashc_cuda_fwd.cuh"
#include "lab.h"

typedef __nv_bfloat16 bf16;

__global__ void maxdiff_kernel(const bf16 *a, const bf16 *b, size_t n, float *out) {
    float m = 0.f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        m = fmaxf(m, fabsf(__bfloat162float(a[i]) - __bfloat162float(b[i])));
    atomicMax((int *)out, __float_as_int(m)); // m >= 0: int order = float order
}

static float maxdiff(const bf16 *a, const bf16 *b, size_t n, float *d_tmp) {
    CK(cudaMemset(d_tmp, 0, 4));
    maxdiff_kernel<<<512, 256>>>(a, b, n, d_tmp);
    float h;
    CK(cudaMemcpy(&h, d_tmp, 4, cudaMemcpyDeviceToHost));
    return h;
}

typedef struct lab {
    int B, S, H, D, causal;
    bf16 *q, *k, *v, *o, *o2, *dout, *dq, *dk, *dv, *dq2, *dk2, *dv2;
    float *lse, *ws, *tmp;
    size_t n, ws_bytes;
    flashc_fwd_params fp;
    flashc_bwd_params bp;
} lab;

static void set_attn(flashc_cuda_attn *a, const lab *L) {
    memset(a, 0, sizeof *a);
    a->B = L->B, a->H = a->H_kv = L->H, a->group = 1, a->Sq = a->Sk = L->S, a->D = L->D;
    a->total_q = (int64_t)L->B * L->S;
    a->window_left = -1, a->window_right = L->causal ? 0 : -1;
    a->scale = 1.f / sqrtf((float)L->D), a->scale_log2 = a->scale * FLASHC_LOG2E;
    a->aligned = 1;
}

static void setup(lab *L, int S, int D, int causal) {
    L->S = S, L->D = D, L->causal = causal, L->B = 16384 / S, L->H = 2048 / D;
    L->n = (size_t)L->B * S * L->H * D;
    bf16 **bufs[] = {&L->q, &L->k, &L->v, &L->o, &L->o2, &L->dout, &L->dq, &L->dk, &L->dv, &L->dq2, &L->dk2, &L->dv2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) CK(cudaMalloc(bufs[i], L->n * 2));
    CK(cudaMalloc(&L->lse, (size_t)L->B * L->H * S * 4));
    CK(cudaMalloc(&L->tmp, 16));
    lab_fill<<<1024, 256>>>(L->q, L->n, 1u, 1.f);
    lab_fill<<<1024, 256>>>(L->k, L->n, 2u, 1.f);
    lab_fill<<<1024, 256>>>(L->v, L->n, 3u, 1.f);
    lab_fill<<<1024, 256>>>(L->dout, L->n, 4u, 1.f);
    const int64_t sq_pad = (S + 127) / 128 * 128, rows = (int64_t)L->B * L->H * sq_pad;
    L->ws_bytes = (size_t)rows * 4 * (2 + 256);
    CK(cudaMalloc(&L->ws, L->ws_bytes));

    flashc_fwd_params *f = &L->fp;
    memset(f, 0, sizeof *f);
    set_attn(&f->a, L);
    const int64_t rs = (int64_t)L->H * D, bs = rs * S;
    f->q = L->q, f->k = L->k, f->v = L->v, f->o = L->o, f->lse = L->lse;
    f->q_bs = f->k_bs = f->v_bs = f->o_bs = bs;
    f->q_rs = f->k_rs = f->v_rs = f->o_rs = rs;
    f->q_hs = f->k_hs = f->v_hs = f->o_hs = D;

    flashc_bwd_params *b = &L->bp;
    memset(b, 0, sizeof *b);
    set_attn(&b->a, L);
    b->q = L->q, b->k = L->k, b->v = L->v, b->o = L->o, b->dout = L->dout, b->lse = L->lse;
    b->dq = L->dq, b->dk = L->dk, b->dv = L->dv;
    b->q_bs = b->k_bs = b->v_bs = b->o_bs = b->do_bs = b->dq_bs = b->dk_bs = b->dv_bs = bs;
    b->q_rs = b->k_rs = b->v_rs = b->o_rs = b->do_rs = b->dq_rs = b->dk_rs = b->dv_rs = rs;
    b->q_hs = b->k_hs = b->v_hs = b->o_hs = b->do_hs = b->dq_hs = b->dk_hs = b->dv_hs = D;
    b->ws_rows_per_head = sq_pad, b->ws_rows = rows;
    b->lse2 = L->ws, b->delta = L->ws + rows, b->dq_acc = L->ws + 2 * rows;
}

static void teardown(lab *L) {
    bf16 *bufs[] = {L->q, L->k, L->v, L->o, L->o2, L->dout, L->dq, L->dk, L->dv, L->dq2, L->dk2, L->dv2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) CK(cudaFree(bufs[i]));
    CK(cudaFree(L->lse));
    CK(cudaFree(L->ws));
    CK(cudaFree(L->tmp));
}

typedef cudaError_t (*fwd_fn)(flashc_fwd_params *, cudaStream_t);
typedef cudaError_t (*bwd_fn)(flashc_bwd_params *, cudaStream_t);

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

// median ms of `reps` runs, each timed alone behind a busy GPU (so launch gaps do not count)
static float time_it(fwd_fn f, bwd_fn g, lab *L, int reps) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[64];
    for (int r = 0; r < reps + 2; r++) {
        CK(cudaEventRecord(e0));
        if (f) CK(f(&L->fp, 0));
        else CK(g(&L->bp, 0));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        if (r >= 2) CK(cudaEventElapsedTime(&t[r - 2], e0, e1));
    }
    qsort(t, reps, sizeof t[0], cmp_float);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return t[reps / 2];
}

static double flops_fwd(const lab *L) {
    return 4.0 * L->B * L->H * (double)L->S * L->S * L->D / (L->causal ? 2 : 1);
}

static void fwd_variant(lab *L, const char *name, fwd_fn f) {
    L->fp.o = L->o2;
    CK(f(&L->fp, 0));
    CK(cudaDeviceSynchronize());
    float err = maxdiff(L->o, L->o2, L->n, L->tmp);
    float ms = time_it(f, NULL, L, 15);
    L->fp.o = L->o;
    printf("fwd D=%3d S=%5d causal=%d %-16s %8.3f ms %6.1f TFLOP/s  max|o - o_tuned| = %.3g\n", L->D, L->S, L->causal,
           name, ms, flops_fwd(L) / ms / 1e9, err);
}

static void bwd_variant(lab *L, const char *name, bwd_fn g, int deterministic) {
    L->bp.dq = L->dq2, L->bp.dk = L->dk2, L->bp.dv = L->dv2, L->bp.deterministic = deterministic;
    CK(g(&L->bp, 0));
    CK(cudaDeviceSynchronize());
    float e1 = maxdiff(L->dq, L->dq2, L->n, L->tmp), e2 = maxdiff(L->dk, L->dk2, L->n, L->tmp);
    float e3 = maxdiff(L->dv, L->dv2, L->n, L->tmp);
    float ms = time_it(NULL, g, L, 9);
    L->bp.dq = L->dq, L->bp.dk = L->dk, L->bp.dv = L->dv, L->bp.deterministic = 0;
    printf("bwd D=%3d S=%5d causal=%d %-16s %8.3f ms %6.1f TFLOP/s  max diff dq %.3g dk %.3g dv %.3g%s\n", L->D, L->S,
           L->causal, name, ms, 2.5 * flops_fwd(L) / ms / 1e9, e1, e2, e3, deterministic ? " (deterministic)" : "");
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "profile")) {
        for (int causal = 0; causal < 2; causal++) {
            lab L;
            setup(&L, 4096, 128, causal);
            CK(flashc_cuda_fwd_launch<bf16, 128>(&L.fp, 0));
            CK(flashc_cuda_bwd_launch<bf16, 128>(&L.bp, 0));
            CK(cudaDeviceSynchronize());
            teardown(&L);
        }
        return 0;
    }
    const int S = argc > 1 ? atoi(argv[1]) : 4096;
    for (int causal = 0; causal < 2; causal++) {
        lab L;
        setup(&L, S, 64, causal);
        CK(flashc_cuda_fwd_launch<bf16, 64>(&L.fp, 0));
        CK(flashc_cuda_bwd_launch<bf16, 64>(&L.bp, 0));
        fwd_variant(&L, "128x64x4 s2 tuned", flashc_cuda_fwd_launch<bf16, 64>);
        fwd_variant(&L, "128x128x4 s2", flashc_cuda_fwd_run<bf16, 64, 128, 128, 4, 2>);
        fwd_variant(&L, "128x64x4 s1", flashc_cuda_fwd_run<bf16, 64, 128, 64, 4, 1>);
        bwd_variant(&L, "128x128x8 tuned", flashc_cuda_bwd_launch<bf16, 64>, 0);
        bwd_variant(&L, "128x128x8 tuned", flashc_cuda_bwd_launch<bf16, 64>, 1);
        bwd_variant(&L, "128x128x8 q2", flashc_cuda_bwd_run<bf16, 64, 128, 128, 8, 2, 4, 4, 2, 64, 64, 4>, 0);
        teardown(&L);

        setup(&L, S, 128, causal);
        CK(flashc_cuda_fwd_launch<bf16, 128>(&L.fp, 0));
        CK(flashc_cuda_bwd_launch<bf16, 128>(&L.bp, 0));
        fwd_variant(&L, "128x64x4 s2 tuned", flashc_cuda_fwd_launch<bf16, 128>);
        fwd_variant(&L, "128x64x4 s1", flashc_cuda_fwd_run<bf16, 128, 128, 64, 4, 1>);
        fwd_variant(&L, "128x32x4 s2", flashc_cuda_fwd_run<bf16, 128, 128, 32, 4, 2>);
        bwd_variant(&L, "64x128x8 tuned", flashc_cuda_bwd_launch<bf16, 128>, 0);
        bwd_variant(&L, "64x128x8 tuned", flashc_cuda_bwd_launch<bf16, 128>, 1);
        bwd_variant(&L, "64x128x8 m2kv4q4", flashc_cuda_bwd_run<bf16, 128, 64, 128, 8, 2, 2, 4, 4, 64, 64, 4>, 0);
        bwd_variant(&L, "64x128x8 m4kv4q2", flashc_cuda_bwd_run<bf16, 128, 64, 128, 8, 2, 4, 4, 2, 64, 64, 4>, 0);
        teardown(&L);

        setup(&L, S, 256, causal);
        CK(flashc_cuda_fwd_launch<bf16, 256>(&L.fp, 0));
        CK(flashc_cuda_bwd_launch<bf16, 256>(&L.bp, 0));
        fwd_variant(&L, "128x64x8 s2 tuned", flashc_cuda_fwd_launch<bf16, 256>);
        fwd_variant(&L, "64x64x4 s1", flashc_cuda_fwd_run<bf16, 256, 64, 64, 4, 1>);
        fwd_variant(&L, "128x64x8 s1", flashc_cuda_fwd_run<bf16, 256, 128, 64, 8, 1>);
        fwd_variant(&L, "64x32x4 s1", flashc_cuda_fwd_run<bf16, 256, 64, 32, 4, 1>);
        bwd_variant(&L, "64x64x8 tuned", flashc_cuda_bwd_launch<bf16, 256>, 0);
        bwd_variant(&L, "64x64x8 tuned", flashc_cuda_bwd_launch<bf16, 256>, 1);
        bwd_variant(&L, "64x64x8 m2kv4q4", flashc_cuda_bwd_run<bf16, 256, 64, 64, 8, 2, 2, 4, 4, 64, 64, 4>, 0);
        bwd_variant(&L, "64x64x8 m4kv4q2", flashc_cuda_bwd_run<bf16, 256, 64, 64, 8, 2, 4, 4, 2, 64, 64, 4>, 0);
        teardown(&L);
    }
    return 0;
}
