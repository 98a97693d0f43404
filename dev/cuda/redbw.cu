// redbw.cu -- how many bytes of fp32 reductions a second does the L2 take, and by which path? A lab
// for the backward's dQ: the sm90 kernel at D = 128 adds a 64 x 128 fp32 dQ_i tile (32 KB) into
// dq_acc per 10.5 MFLOP step, so at 552 TFLOP/s (s30, non-causal 16k) it pushes ~1.7 TB/s of
// reductions; the D = 256 kernel with dQ fused (64 x 256 per 64-key step) would need ~3.4 TB/s at
// the 574 TFLOP/s it ran without them (bench/results/h200-2026-12-01-bwd256.txt). Session 5's
// float2 atomics sank it to 272, the same ~1.7 TB/s. Is that the L2's ceiling for fp32
// reductions, or the atomics'?
//
// The backward's pattern: CTA c plays key block c % kb of head c / kb (kb = R / BN key blocks a
// head, heads outer as the grid runs them), one CTA per SM; it walks its head's R / 64 query
// blocks (rotated by c * rot, so that concurrent CTAs of a head add to different rows when rot =
// 1) and adds a 64 x D fp32 tile to rows 64 i .. 64 i + 63 of the head's dq [R][D]. Each path adds
// the same bytes; the check after the first launch reads every element back (it must equal the
// number of CTAs on its head: the tile holds ones).
//   tma<W>  cp.reduce.async.bulk.tensor of 64 x 32 boxes (the kernel's path; two issuing threads,
//           one a warpgroup, each half the columns), W bulk groups reading at once
//   red4    red.global.add.v4.f32 (atomicAdd on float4), 256 threads, 16 bytes each
//   red2    red.global.add.v2.f32 (atomicAdd on float2: session 5's path)
//   red1    red.global.add.f32
//   st4     plain 16-byte stores of the same pattern: the write ceiling, not a reduction
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude dev/cuda/redbw.cu -o redbw -lcuda
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#include "cuda/flashc_sm90.cuh"
#include "lab.h"

typedef struct pattern {
    int R, D, kb, rot; // rows a head, head dim, key blocks a head, rotation
} pattern;

// this CTA's head and first query block
static __device__ __forceinline__ void cta_walk(const pattern &p, int *head, int *i0) {
    const int c = blockIdx.x, nq = p.R / 64;
    *head = c / p.kb;
    *i0 = p.rot ? (c % p.kb) % nq : 0;
}

template <int W>
__global__ void __launch_bounds__(256, 1) tma_kernel(const __grid_constant__ CUtensorMap map, pattern p) {
    extern __shared__ __align__(1024) char sm[];
    const uint32_t raw = smem_u32(sm), base = (raw + 1023u) & ~1023u;
    float *tile = (float *)(sm + (base - raw));
    for (int k = threadIdx.x; k < 64 * p.D; k += blockDim.x) tile[k] = 1.f; // 64 x D ones, layout irrelevant
    fence_proxy_async_smem();
    __syncthreads();
    if (threadIdx.x % 128 != 0) return;
    const int wg = threadIdx.x / 128, nq = p.R / 64, boxes = p.D / 64; // this thread's 32-column boxes: 2 wg ..
    int head, i0;
    cta_walk(p, &head, &i0);
    for (int s = 0; s < nq; s++) {
        const int row = head * p.R + ((i0 + s) % nq) * 64;
        for (int b = 0; b < boxes; b++) tma_reduce_add_f32(&map, base + (wg * boxes + b) * 8192, (wg * boxes + b) * 32, row);
        bulk_commit();
        bulk_wait_read<W - 1>();
    }
    bulk_wait_all();
}

// V floats per op (1, 2, 4); ST: plain stores instead of reductions
template <int V, bool ST>
__global__ void __launch_bounds__(256, 1) red_kernel(float *dq, pattern p) {
    const int nq = p.R / 64, per_row = p.D / V, ops = 64 * per_row; // ops a step
    int head, i0;
    cta_walk(p, &head, &i0);
    for (int s = 0; s < nq; s++) {
        float *t = dq + ((size_t)head * p.R + ((i0 + s) % nq) * 64) * p.D;
        for (int k = threadIdx.x; k < ops; k += blockDim.x) {
            float *a = t + (k / per_row) * p.D + (k % per_row) * V;
            if (ST) {
                if (V == 4) *(float4 *)a = make_float4(1.f, 1.f, 1.f, 1.f);
                else if (V == 2) *(float2 *)a = make_float2(1.f, 1.f);
                else *a = 1.f;
            } else {
                if (V == 4) atomicAdd((float4 *)a, make_float4(1.f, 1.f, 1.f, 1.f));
                else if (V == 2) atomicAdd((float2 *)a, make_float2(1.f, 1.f));
                else atomicAdd(a, 1.f);
            }
        }
    }
}

// every element of head h's rows equals the number of CTAs on head h (reductions), or 1 (stores)
static int check(const float *dq, const pattern &p, int ctas, bool st) {
    const int heads = (ctas + p.kb - 1) / p.kb;
    std::vector<float> h((size_t)heads * p.R * p.D);
    CK(cudaMemcpy(h.data(), dq, h.size() * 4, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (int hd = 0; hd < heads; hd++) {
        const float want = st ? 1.f : (float)std::min(p.kb, ctas - hd * p.kb);
        for (size_t k = (size_t)hd * p.R * p.D; k < (size_t)(hd + 1) * p.R * p.D; k++) bad += h[k] != want;
    }
    return (int)bad;
}

int main() {
    int sms;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int ctas = sms;
    printf("fp32 reductions into L2 in the backward's dQ pattern, TB/s (median of 15); %d CTAs, 256 threads, 64-row tiles\n",
           ctas);
    // (R, D, BN): the D = 128 kernel at S = 16k and 4k; the D = 256 kernel's 64-key blocks at 16k
    const int cfg[][3] = {{16384, 128, 128}, {4096, 128, 128}, {16384, 256, 64}};
    for (const auto &c : cfg)
        for (int rot = 0; rot <= 1; rot++) {
            const pattern p = {c[0], c[1], c[0] / c[2], rot};
            const int heads = (ctas + p.kb - 1) / p.kb;
            const size_t n = (size_t)heads * p.R * p.D, bytes = (size_t)ctas * p.R * p.D * 4;
            float *dq;
            CK(cudaMalloc(&dq, n * 4));
            CUtensorMap map;
            const uint64_t dim[4] = {(uint64_t)p.D, (uint64_t)heads * p.R, 1, 1};
            const int64_t st[3] = {p.D * 4, 16, 16};
            if (!sm90_tma_map(&map, dq, 4, dim, st, 64)) {
                printf("encode failed\n");
                return 1;
            }
            printf("R %5d D %3d BN %3d rot %d (%d heads, %.2f GB a launch):", p.R, p.D, c[2], rot, heads, bytes / 1e9);
            auto run = [&](const char *name, bool st_path, auto launch) {
                CK(cudaMemset(dq, 0, n * 4));
                launch();
                CK(cudaDeviceSynchronize());
                const int bad = check(dq, p, ctas, st_path);
                const double ms = lab_median_ms(launch);
                printf("  %s %.2f%s", name, bytes / (ms * 1e-3) / 1e12, bad ? " (CHECK FAILED)" : "");
                fflush(stdout);
            };
            const int smem = 64 * p.D * 4 + 1024;
#define TMA(W)                                                                                               \
    CK(cudaFuncSetAttribute(tma_kernel<W>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));           \
    run("tma" #W, false, [&] { tma_kernel<W><<<ctas, 256, smem>>>(map, p); });
            TMA(1)
            TMA(2)
            TMA(8)
            run("red4", false, [&] { red_kernel<4, false><<<ctas, 256>>>(dq, p); });
            run("red2", false, [&] { red_kernel<2, false><<<ctas, 256>>>(dq, p); });
            run("red1", false, [&] { red_kernel<1, false><<<ctas, 256>>>(dq, p); });
            run("st4", true, [&] { red_kernel<4, true><<<ctas, 256>>>(dq, p); });
            printf("\n");
            CK(cudaFree(dq));
        }
    return 0;
}
