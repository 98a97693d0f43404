// readbw.cu -- how fast can one kernel read HBM on this GPU, and by which path? A lab for the decode
// kernel (memory-bound: every K / V byte read once). Each kernel reads a 4 GiB buffer (or the part
// named) once and XORs what it read into a word (so nothing is optimised away); GB/s = bytes /
// median time of 15 launches.
//   ldg         grid-stride 16-byte ld.global.nc, U loads in flight per thread
//   bulk        cp.async.bulk (1-D TMA) of CHUNK bytes into a ring of NST stages, one CTA per
//               contiguous slice
//   bulkrr      the same, chunks dealt round-robin over the CTAs
//   kv_ldg      the KV-cache pattern: rows of 8 heads x 256 bytes, a CTA reads one head (256 of
//               every 2048 bytes) of a range of rows, 16 lanes per row, U rows in flight per group
//   kv_dec      the decode kernel's grid and cp.async rings without its math: per-head CTAs with
//               per-step jitter ("drift") or whole-row CTAs of 8 warps (B = 16, S = 16k), then
//               per-head CTAs on K alone or K and V (B = 16, S = 16k / 64k)
//   kv_even     kv_dec's loads (B = 16, 8 heads: 128 (sequence, head) items of S rows) dealt evenly over
//               any number of CTAs, each a contiguous run of 16-row steps across item boundaries:
//               does a grid of all the SMs (132) read the batch-16 decode pattern faster than the
//               128 per-head CTAs do? (KV_EVEN=1: only kv_dec and kv_even, then exit)
//   kv_cpasync  the KV pattern by per-warp cp.async rings (the decode kernel's load path): kv_dec
//               over the whole buffer as one sequence, K alone
//   kv_bulkdec  the decode grid by per-warp rings of 1-D bulk copies, one per 256-byte row (first)
//   kvall_tma   whole 2 KB rows per CTA by 2-D TMA boxes (16 boxes of 64 columns, 128-byte swizzle)
//   kv_tma      one head per CTA by 2-D TMA boxes of 128 columns x BOX rows
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude dev/cuda/readbw.cu -o readbw
// Results of the H200 runs: bench/results/h200-2026-12-01-s6-decode-ab.txt.
#include <stdio.h>
#include <stdlib.h>

#include "cuda/flashc_sm90.cuh"
#include "lab.h"

template <int U>
__global__ void ldg_kernel(const uint4 *x, size_t n, unsigned *sink) {
    unsigned acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = i + u * stride < n ? ld_stream_v4(x + i + u * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x12345678u) *sink = acc;
}

// one thread per CTA drives a ring of NST stages of CHUNK bytes; rr: chunk c of the CTA is
// blockIdx.x + c * gridDim.x, else the CTA's slice is contiguous
template <int CHUNK, int NST>
__global__ void bulk_kernel(const char *x, size_t bytes, int rr, unsigned *sink) {
    extern __shared__ __align__(1024) char sm[];
    __shared__ __align__(8) uint64_t full[NST];
    if (threadIdx.x != 0) return;
    const size_t n_chunks = bytes / CHUNK, per = n_chunks / gridDim.x;
    for (int s = 0; s < NST; s++) mbar_init(smem_u32(&full[s]), 1);
    fence_mbarrier_init();
    auto chunk = [&](size_t c) { return rr ? blockIdx.x + c * gridDim.x : blockIdx.x * per + c; };
    for (int s = 0; s < NST && s < (int)per; s++) {
        mbar_expect_tx(smem_u32(&full[s]), CHUNK);
        bulk_load(smem_u32(sm + s * CHUNK), x + chunk(s) * CHUNK, CHUNK, smem_u32(&full[s]));
    }
    unsigned acc = 0;
    for (size_t c = 0; c < per; c++) {
        const int s = (int)(c % NST);
        mbar_wait(smem_u32(&full[s]), (int)((c / NST) & 1));
        acc ^= *(volatile unsigned *)(sm + s * CHUNK);
        if (c + NST < per) {
            mbar_expect_tx(smem_u32(&full[s]), CHUNK);
            bulk_load(smem_u32(sm + s * CHUNK), x + chunk(c + NST) * CHUNK, CHUNK, smem_u32(&full[s]));
        }
    }
    if (acc == 0x12345678u) *sink = acc;
}

// KV pattern: x is (rows, 8, 128) bf16; CTA (head blockIdx.y, row slice blockIdx.x); 16 lanes per
// row (256 bytes), 8 lane groups per CTA of 128 threads, U rows per group in flight
template <int U>
__global__ void kv_ldg_kernel(const char *x, int rows, unsigned *sink) {
    const int per = rows / gridDim.x, r0 = blockIdx.x * per, g = threadIdx.x / 16, l = threadIdx.x % 16;
    const char *base = x + (size_t)blockIdx.y * 256 + l * 16;
    unsigned acc = 0;
    for (int r = r0 + g; r < r0 + per; r += 8 * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = r + 8 * u < r0 + per ? ld_stream_v4(base + (size_t)(r + 8 * u) * 2048) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x12345678u) *sink = acc;
}

// the same pattern by 2-D TMA boxes {COLS elements, BOX rows}, BOXES side by side per stage: the CTA
// reads columns blockIdx.y * COLS * BOXES .. + COLS * BOXES - 1 of its rows (COLS = 128, BOXES = 1:
// one head per CTA; COLS = 64 with the 128-byte swizzle, BOXES = 16: whole 2 KB rows per CTA)
template <int COLS, int BOX, int BOXES, int NST>
__global__ void kv_tma_kernel(const __grid_constant__ CUtensorMap map, int rows, unsigned *sink) {
    extern __shared__ __align__(1024) char sm[];
    __shared__ __align__(8) uint64_t full[NST];
    constexpr int STAGE = BOXES * BOX * COLS * 2;
    if (threadIdx.x != 0) return;
    const int per = rows / gridDim.x / BOX, r0 = blockIdx.x * (rows / gridDim.x);
    for (int s = 0; s < NST; s++) mbar_init(smem_u32(&full[s]), 1);
    fence_mbarrier_init();
    auto load = [&](int c, int s) {
        mbar_expect_tx(smem_u32(&full[s]), STAGE);
        for (int b = 0; b < BOXES; b++)
            asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
                             smem_u32(sm + s * STAGE + b * BOX * COLS * 2)),
                         "l"((uint64_t)&map), "r"(((int)blockIdx.y * BOXES + b) * COLS), "r"(r0 + c * BOX),
                         "r"(smem_u32(&full[s]))
                         : "memory");
    };
    for (int s = 0; s < NST && s < per; s++) load(s, s);
    unsigned acc = 0;
    for (int c = 0; c < per; c++) {
        const int s = c % NST;
        mbar_wait(smem_u32(&full[s]), (c / NST) & 1);
        acc ^= *(volatile unsigned *)(sm + s * STAGE);
        if (c + NST < per) load(c + NST, s);
    }
    if (acc == 0x12345678u) *sink = acc;
}

// the decode kernel's grid and loads without its math: K and (if v) V of (B, S, 8, 128). WPH = 0:
// CTA (split blockIdx.x, head blockIdx.y, sequence blockIdx.z), its 4 warps a quarter of the split's
// rows each; WPH = 1: CTA (split, sequence) of 8 warps, warp w reading head w of all the split's
// rows (one CTA reads whole 2 KB rows). drift > 0: each warp spins up to drift clocks per step (the
// math's jitter). A warp stage is `stage` bytes: K_j's 16 rows x 256, then V_j's (8192), or K_j
// alone (4096, v = NULL: B = 1 and S = all rows make it the plain KV pattern over the buffer).
template <int NST, int WPH>
__global__ void kv_dec_kernel(const char *k, const char *v, int S, int drift, int stage, unsigned *sink) {
    extern __shared__ __align__(1024) char sm[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int per = S / gridDim.x, per_w = WPH ? per : per / 4;
    const int head = WPH ? warp : blockIdx.y, seq = WPH ? blockIdx.y : blockIdx.z;
    const size_t r0 = (size_t)seq * S + blockIdx.x * per + (WPH ? 0 : warp * per_w);
    const int steps = per_w / 16;
    const size_t off = (size_t)head * 256 + lane % 16 * 16;
    const uint32_t ring = smem_u32(sm) + warp * NST * stage;
    auto load = [&](int t) {
        const uint32_t dst = ring + (t % NST) * stage + lane % 16 * 16;
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            const int r = lane / 16 * 8 + kk;
            cp_async_16(dst + r * 256, k + off + (r0 + t * 16 + r) * 2048, 16);
            if (v) cp_async_16(dst + 4096 + r * 256, v + off + (r0 + t * 16 + r) * 2048, 16);
        }
    };
    for (int t = 0; t < NST - 1; t++) {
        if (t < steps) load(t);
        cp_async_commit();
    }
    unsigned acc = 0, h = blockIdx.x * 7919u + blockIdx.y * 104729u + blockIdx.z * 1299709u + warp * 15485863u;
    for (int t = 0; t < steps; t++) {
        if (t + NST - 1 < steps) load(t + NST - 1);
        cp_async_commit();
        cp_async_wait<NST - 1>();
        __syncwarp();
        acc ^= *(volatile unsigned *)(sm + warp * NST * stage + (t % NST) * stage + lane * 128);
        if (drift) {
            h = h * 1664525u + 1013904223u;
            const long long t0 = clock64(), d = (h >> 8) % drift;
            while (clock64() - t0 < d) {
            }
        }
        __syncwarp();
    }
    if (acc == 0x12345678u) *sink = acc;
}

// kv_dec's per-warp cp.async rings (K_j then V_j of 16 rows a stage) over the T = items * S / 16 steps
// of all (sequence, head) items in order, CTA c taking steps [c T / G, (c + 1) T / G) and each of its
// warps a quarter of them; a step's item and row come from its index (S a multiple of 16)
template <int NST>
__global__ void kv_even_kernel(const char *k, const char *v, int S, int items, unsigned *sink) {
    extern __shared__ __align__(1024) char sm[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, spi = S / 16; // steps per item
    const long long T = (long long)items * spi, c0 = T * blockIdx.x / gridDim.x, c1 = T * (blockIdx.x + 1) / gridDim.x;
    const long long q = (c1 - c0 + 3) / 4, w0 = min(c1, c0 + warp * q), w1 = min(c1, w0 + q);
    const int steps = (int)(w1 - w0);
    const uint32_t ring = smem_u32(sm) + warp * NST * 8192;
    auto load = [&](int t) {
        const long long g = w0 + t;
        const int item = (int)(g / spi), head = item % 8, seq = item / 8;
        const size_t row = (size_t)seq * S + (size_t)(g - (long long)item * spi) * 16;
        const size_t off = (size_t)head * 256 + lane % 16 * 16;
        const uint32_t dst = ring + (t % NST) * 8192 + lane % 16 * 16;
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            const int r = lane / 16 * 8 + kk;
            cp_async_16(dst + r * 256, k + off + (row + r) * 2048, 16);
            cp_async_16(dst + 4096 + r * 256, v + off + (row + r) * 2048, 16);
        }
    };
    for (int t = 0; t < NST - 1; t++) {
        if (t < steps) load(t);
        cp_async_commit();
    }
    unsigned acc = 0;
    for (int t = 0; t < steps; t++) {
        if (t + NST - 1 < steps) load(t + NST - 1);
        cp_async_commit();
        cp_async_wait<NST - 1>();
        __syncwarp();
        acc ^= *(volatile unsigned *)(sm + warp * NST * 8192 + (t % NST) * 8192 + lane * 128);
        __syncwarp();
    }
    if (acc == 0x12345678u) *sink = acc;
}

// the decode grid (as kv_dec, per-head CTAs) by 1-D bulk copies (TMA) instead of cp.async: per warp
// step, lane l < 16 copies the 256 bytes of key row l of K, lane 16 + l those of V, each one
// cp.async.bulk completing on the stage's mbarrier (8 KB a stage)
template <int NST>
__global__ void kv_bulkdec_kernel(const char *k, const char *v, int S, unsigned *sink) {
    extern __shared__ __align__(1024) char sm[];
    __shared__ __align__(8) uint64_t full[4][NST];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int per = S / gridDim.x, per_w = per / 4;
    const size_t r0 = (size_t)blockIdx.z * S + blockIdx.x * per + warp * per_w;
    const int steps = per_w / 16;
    const char *src = (lane < 16 ? k : v) + (size_t)blockIdx.y * 256;
    const uint32_t ring = smem_u32(sm) + warp * NST * 8192;
    if (lane == 0)
        for (int st = 0; st < NST; st++) mbar_init(smem_u32(&full[warp][st]), 1);
    fence_mbarrier_init();
    __syncwarp();
    auto load = [&](int t) {
        const uint32_t bar = smem_u32(&full[warp][t % NST]);
        if (lane == 0) mbar_expect_tx(bar, 8192);
        __syncwarp();
        bulk_load(ring + (t % NST) * 8192 + lane * 256, src + (r0 + t * 16 + lane % 16) * 2048, 256, bar);
    };
    for (int t = 0; t < NST - 1 && t < steps; t++) load(t);
    unsigned acc = 0;
    for (int t = 0; t < steps; t++) {
        if (t + NST - 1 < steps) load(t + NST - 1);
        mbar_wait(smem_u32(&full[warp][t % NST]), (t / NST) & 1);
        acc ^= *(volatile unsigned *)(sm + warp * NST * 8192 + (t % NST) * 8192 + lane * 128);
        __syncwarp();
    }
    if (acc == 0x12345678u) *sink = acc;
}

template <typename F>
static double gbps(size_t bytes, F launch) {
    return bytes / (lab_median_ms(launch) * 1e-3) / 1e9;
}

int main() {
    const size_t bytes = (size_t)4 << 30;
    char *x;
    unsigned *sink;
    CK(cudaMalloc(&x, bytes));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(x, 1, bytes));
    int sms;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    printf("4 GiB read once, GB/s (median of 15); %d SMs\n", sms);
    const size_t n4 = bytes / 16;
    if (getenv("KV_EVEN")) { // batch 16's decode loads: 128 per-head CTAs against even runs over G CTAs
        const int B = 16, sm3 = 3 * 4 * 8192;
        CK(cudaFuncSetAttribute(kv_dec_kernel<3, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, 131072));
        CK(cudaFuncSetAttribute(kv_even_kernel<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, 131072));
        for (int rep = 0; rep < 3; rep++)
            for (int S : {16384, 65536}) {
                const size_t kvb = (size_t)B * S * 2048 * 2;
                printf("kv_dec  B %d S %5d, 128 per-head CTAs (3 stages, 128 KB): %.0f\n", B, S,
                       gbps(kvb, [&] { kv_dec_kernel<3, 0><<<dim3(1, 8, B), 128, 131072>>>(x, x + bytes / 2, S, 0, 8192, sink); }));
                for (int G : {128, sms, 2 * sms})
                    printf("kv_even B %d S %5d, %4d CTAs (3 stages, %s): %.0f\n", B, S, G, G > sms ? "96 KB" : "128 KB",
                           gbps(kvb, [&] { kv_even_kernel<3><<<G, 128, G > sms ? sm3 : 131072>>>(x, x + bytes / 2, S, 8 * B, sink); }));
            }
        return 0;
    }
    {
        // the decode grid, K and V of (B, S, 8, 128), per-head CTAs: cp.async rings (kv_dec) against
        // 1-D bulk copies of each 256-byte row (kv_bulkdec)
        const int B = 16;
        for (int S : {16384, 65536}) {
            const size_t kvb = (size_t)B * S * 2048 * 2;
            for (int ns : {1, 2}) {
                dim3 g(ns, 8, B);
                const int sm3 = 3 * 4 * 8192, sm4 = 4 * 4 * 8192;
                CK(cudaFuncSetAttribute(kv_dec_kernel<3, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, sm3));
                printf("kv_dec     3 stages B %d S %5d splits %d (%4d CTAs): %.0f\n", B, S, ns, ns * 8 * B,
                       gbps(kvb, [&] { kv_dec_kernel<3, 0><<<g, 128, sm3>>>(x, x + bytes / 2, S, 0, 8192, sink); }));
                CK(cudaFuncSetAttribute(kv_bulkdec_kernel<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, sm3));
                printf("kv_bulkdec 3 stages B %d S %5d splits %d (%4d CTAs): %.0f\n", B, S, ns, ns * 8 * B,
                       gbps(kvb, [&] { kv_bulkdec_kernel<3><<<g, 128, sm3>>>(x, x + bytes / 2, S, sink); }));
                CK(cudaFuncSetAttribute(kv_bulkdec_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, sm4));
                printf("kv_bulkdec 4 stages B %d S %5d splits %d (%4d CTAs): %.0f\n", B, S, ns, ns * 8 * B,
                       gbps(kvb, [&] { kv_bulkdec_kernel<4><<<g, 128, sm4>>>(x, x + bytes / 2, S, sink); }));
            }
        }
        if (getenv("BULKDEC_ONLY")) return 0;
    }
    for (int ctas_per_sm : {2, 4, 8})
        for (int thr : {256, 512}) {
            printf("ldg     U4  %d CTA/SM x %d thr: %.0f\n", ctas_per_sm, thr,
                   gbps(bytes, [&] { ldg_kernel<4><<<sms * ctas_per_sm, thr>>>((const uint4 *)x, n4, sink); }));
            printf("ldg     U8  %d CTA/SM x %d thr: %.0f\n", ctas_per_sm, thr,
                   gbps(bytes, [&] { ldg_kernel<8><<<sms * ctas_per_sm, thr>>>((const uint4 *)x, n4, sink); }));
        }
#define BULK(CH, NS)                                                                                           \
    for (int rr = 0; rr <= 1; rr++)                                                                            \
        for (int k : {1, 2, 4}) {                                                                              \
            const int smem = (CH) * (NS);                                                                      \
            if (smem * k > 220 * 1024) continue;                                                               \
            CK(cudaFuncSetAttribute(bulk_kernel<CH, NS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)); \
            printf("bulk%s chunk %5d x %d stages, %d CTA/SM: %.0f\n", rr ? "rr" : "  ", CH, NS, k,           \
                   gbps(bytes, [&] { bulk_kernel<CH, NS><<<sms * k, 32, smem>>>(x, bytes, rr, sink); }));     \
        }
    BULK(4096, 8)
    BULK(8192, 4)
    BULK(8192, 8)
    BULK(16384, 4)
    BULK(32768, 3)
    // KV pattern: rows of 2048 bytes, 8 heads
    const int rows = (int)(bytes / 2048);
    for (int ctas : {sms * 2, sms * 4, sms * 8})
        if (ctas % 8 == 0) {
            dim3 g(ctas / 8, 8);
            printf("kv_ldg  U4 %5d CTAs: %.0f\n", ctas, gbps(bytes, [&] { kv_ldg_kernel<4><<<g, 128>>>(x, rows, sink); }));
            printf("kv_ldg  U8 %5d CTAs: %.0f\n", ctas, gbps(bytes, [&] { kv_ldg_kernel<8><<<g, 128>>>(x, rows, sink); }));
        }
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    CUtensorMap map;
    const cuuint64_t dim[2] = {1024, (cuuint64_t)rows}, st[1] = {2048};
    const cuuint32_t estr[2] = {1, 1};
#define KVTMA(BOX, NS)                                                                                              \
    {                                                                                                               \
        const cuuint32_t box[2] = {128, BOX};                                                                       \
        if (((PFN_cuTensorMapEncodeTiled_v12000)fn)(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, x, dim, st, box, estr,  \
                                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,      \
                                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B,                             \
                                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {           \
            printf("encode failed\n");                                                                              \
            return 1;                                                                                               \
        }                                                                                                           \
        const int smem = (BOX) * 256 * (NS);                                                                        \
        CK(cudaFuncSetAttribute(kv_tma_kernel<128, BOX, 1, NS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));       \
        for (int ctas : {sms * 2, sms * 4, sms * 8}) {                                                              \
            if (ctas % 8 || smem * (ctas / sms) > 220 * 1024) continue;                                             \
            dim3 g(ctas / 8, 8);                                                                                    \
            printf("kv_tma box %3d rows x %d stages %5d CTAs: %.0f\n", BOX, NS, ctas,                              \
                   gbps(bytes, [&] { kv_tma_kernel<128, BOX, 1, NS><<<g, 32, smem>>>(map, rows, sink); }));                \
        }                                                                                                           \
    }
    {
        // the decode grid at B = 16: per-head CTAs with drift, and whole-row CTAs
        const int S = 16384, B = 16;
        const size_t kvb = (size_t)B * S * 2048 * 2;
        for (int drift : {0, 600, 1200, 2400})
            for (int ns : {1, 2, 4}) {
                const int smem = 3 * 4 * 8192;
                CK(cudaFuncSetAttribute(kv_dec_kernel<3, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
                dim3 g(ns, 8, B);
                printf("kv_dec per-head CTAs, drift %4d, B %d S %d splits %d (%4d CTAs): %.0f\n", drift, B, S, ns, ns * 8 * B,
                       gbps(kvb, [&] { kv_dec_kernel<3, 0><<<g, 128, smem>>>(x, x + bytes / 2, S, drift, 8192, sink); }));
            }
        for (int drift : {0, 600, 1200})
            for (int ns : {8, 16}) {
                const int smem = 3 * 8 * 8192;
                CK(cudaFuncSetAttribute(kv_dec_kernel<3, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
                dim3 g(ns, B);
                printf("kv_dec whole-row CTAs (8 warps), drift %4d, B %d S %d splits %d (%4d CTAs): %.0f\n", drift, B, S, ns,
                       ns * B, gbps(kvb, [&] { kv_dec_kernel<3, 1><<<g, 256, smem>>>(x, x + bytes / 2, S, drift, 8192, sink); }));
            }
    }
    {
        // B = 16, S = 16384 / 65536 (K and V 1 / 4 GiB... here both halves of the 4 GiB buffer), splits
        for (int S : {16384, 65536})
            for (int two : {0, 1})
                for (int ns : {1, 2, 4, 8}) {
                    const int B = (int)(bytes / 2 / 2048 / S) < 16 ? (int)(bytes / 2 / 2048 / S) : 16;
                    const size_t kvb = (size_t)B * S * 2048 * (two ? 2 : 1);
                    const int smem = 3 * 4 * 8192;
                    CK(cudaFuncSetAttribute(kv_dec_kernel<3, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
                    dim3 g(ns, 8, B);
                    printf("kv_dec %s B %2d S %5d splits %d (%4d CTAs): %.0f\n", two ? "K+V" : "K  ", B, S, ns, ns * 8 * B,
                           gbps(kvb, [&] { kv_dec_kernel<3, 0><<<g, 128, smem>>>(x, two ? x + bytes / 2 : NULL, S, 0, 8192, sink); }));
                }
    }
    for (int nst : {2, 3, 4})
        for (int ctas : {sms * 1, sms * 2, sms * 3, sms * 4}) {
            const int smem = nst * 4 * 4096;
            if (ctas % 8 || smem * (ctas / sms) > 220 * 1024) continue;
            dim3 g(ctas / 8, 8, 1);
            auto fn = nst == 2 ? kv_dec_kernel<2, 0> : nst == 3 ? kv_dec_kernel<3, 0> : kv_dec_kernel<4, 0>;
            CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            printf("kv_cpasync %d stages/warp %5d CTAs: %.0f\n", nst, ctas,
                   gbps(bytes, [&] { fn<<<g, 128, smem>>>(x, NULL, rows, 0, 4096, sink); }));
        }
    {
        CUtensorMap m2;
        const cuuint32_t box[2] = {64, 16};
        if (((PFN_cuTensorMapEncodeTiled_v12000)fn)(&m2, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, x, dim, st, box, estr,
                                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
            printf("encode failed\n");
            return 1;
        }
        for (int nst : {2, 3, 4})
            for (int k : {1, 2}) {
                const int smem = nst * 16 * 2048 + 1024;
                if (smem * k > 220 * 1024) continue;
                auto f2 = nst == 2 ? kv_tma_kernel<64, 16, 16, 2> : nst == 3 ? kv_tma_kernel<64, 16, 16, 3> : kv_tma_kernel<64, 16, 16, 4>;
                CK(cudaFuncSetAttribute(f2, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
                printf("kvall_tma 16 rows x 2 KB x %d stages, %d CTA/SM: %.0f\n", nst, k,
                       gbps(bytes, [&] { f2<<<sms * k, 32, smem>>>(m2, rows, sink); }));
            }
    }
    KVTMA(16, 8)
    KVTMA(32, 4)
    KVTMA(64, 4)
    KVTMA(128, 3)
    KVTMA(256, 2)
    return 0;
}
