// mufu_lab.cu -- how many 2^x results an SM's MUFU gives a clock, by the form of ex2: f32 (what every
// softmax here uses) and the packed f16x2 / bf16x2 forms (two results an instruction, if the pipe
// took them as one). The question (session 41): the e4m3 forward at D = 128 needs as many MUFU
// clocks a key block as tensor clocks (NOTES s23), so a packed ex2 at one issue a pair would halve
// its MUFU time, where the FMA-pipe polynomial (s26) cost more issue slots than it saved.
// Answer (H100, bench/results/h100-2026-12-06-s41.txt): no. Every form gives 16 results a clock an
// SM; ptxas splits a packed ex2 into two MUFU.EX2.F16 / .BF16, one a half.
// As many CTAs of 1024 threads as SMs (8 warps a scheduler: latency hidden; nothing forces one a
// SM, but two on one SM would each read half the rate, and the slowest CTA is the one counted), 8
// independent chains a thread, x <- 2^(-x) (stays in [0.5, 1]); thread 0 of each CTA times the loop by clock64.
// Second question (session 52): does one warp a scheduler get that rate out of a softmax? 0033
// fp8-ex2turn (the e4m3 consumers' softmaxes one after the other) lost 12-19% at D = 128, as if one
// consumer's softmax alone ran well below the MUFU's rate. softmax_loop<NT, ORDER> runs sm90_softmax's
// body on a 64 x 192 e4m3 key block's share (96 scores a thread: row max, quad shuffles, ex2 of
// fma(s, scale, -m), row sums) with NT / 128 warps a scheduler (128: one consumer warpgroup alone,
// 256: two side by side) and prints the cycles of one softmax and the MUFU results a clock an SM.
// H100 (s53, before the lines below existed): 1200 cycles a softmax at one warp a scheduler (10.2
// results a clock an SM), 1697 for two (14.5). Session 53 asks why: the pure ex2 loop from one and
// two warps a scheduler (a per-warp issue limit of MUFU, or the softmax's chains?), the softmax in
// sm90_softmax's own order (both row maxes, a vote, then the ex2s) and in column halves with the
// online max between them, and the packing conversions.
// Answers (H100, bench/results/h100-2026-12-07-s53.txt calls 3-4): the pure ex2 loop gets 15.1 of 16
// a clock from one warp a scheduler, so the softmax's 10.2 is its own chains, not a per-warp MUFU
// limit; its orders at one / two warps: row by row 1200 / 1697 cycles, sm90_softmax's 1113 / 1883,
// column halves 1048 / 1671 (the kernel in halves, patch 0034, was 0.92-0.99x slower all the same).
// cvt.e4m3x2 runs 16 a clock an SM, and an ex2 + cvt mix 30.5: its own pipe, not the MUFU's.
// Build: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a dev/cuda/mufu_lab.cu -o mufu_lab
// Run:   ./mufu_lab   (then cuobjdump -sass mufu_lab | grep -c MUFU per kernel, to see the SASS form)
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#define ITERS 4096
#define CHAINS 8

// The two packing conversions of P_ij (sm90_pack_p) ride along: if they shared the MUFU's 16 lanes,
// packing would cost an e4m3 key block half its ex2 clocks again (48 cvts a thread to 96 ex2s).
// MIX_*: an ex2 then a conversion of its result in each chain step: ~16 instructions a clock an SM
// if the conversion shares the MUFU's lanes, up to 32 if it has its own.
enum { EX2_F32, EX2_F16X2, EX2_BF16X2, CVT_E4M3X2, CVT_BF16X2, MIX_E4M3, MIX_BF16, N_FORMS };
static const char *form_name[N_FORMS] = {"ex2.approx.ftz.f32", "ex2.approx.f16x2", "ex2.approx.ftz.bf16x2",
                                         "cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.bf16x2.f32",
                                         "ex2.f32 + cvt.e4m3x2", "ex2.f32 + cvt.bf16x2"};
static const int form_results[N_FORMS] = {1, 2, 2, 2, 2, 1, 1}; // results an instruction (MIX: instructions)
static const int form_instrs[N_FORMS] = {1, 1, 1, 1, 1, 2, 2};  // XU-candidate instructions a chain step

template <int FORM, int NT>
__global__ void __launch_bounds__(NT, 1) ex2_loop(uint32_t *sink, long long *cycles) {
    uint32_t v[CHAINS];
#pragma unroll
    for (int c = 0; c < CHAINS; c++) // about 0.5, in each form's encoding (values do not change the rate)
        v[c] = FORM == EX2_F16X2 ? 0x38003801u + c : FORM == EX2_BF16X2 ? 0x3f003f01u : 0x3f000000u + threadIdx.x + c;
    __syncthreads();
    const long long t0 = clock64();
    for (int it = 0; it < ITERS; it++) {
#pragma unroll
        for (int c = 0; c < CHAINS; c++) {
            if (FORM == EX2_F32 || FORM >= MIX_E4M3) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+r"(v[c]));
            if (FORM == EX2_F16X2) asm volatile("ex2.approx.f16x2 %0, %0;" : "+r"(v[c]));
            if (FORM == EX2_BF16X2) asm volatile("ex2.approx.ftz.bf16x2 %0, %0;" : "+r"(v[c]));
            if (FORM == CVT_E4M3X2 || FORM == MIX_E4M3) {
                uint16_t h;
                asm volatile("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "r"(v[c]), "r"(v[c] ^ 1u));
                v[c] = 0x3f000000u | h; // back to a float near 0.5
            }
            if (FORM == CVT_BF16X2 || FORM == MIX_BF16) {
                uint32_t w;
                asm volatile("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(w) : "r"(v[c]));
                v[c] = 0x3f000000u | (w & 0xffffu);
            }
            if (FORM <= EX2_BF16X2) v[c] ^= FORM == EX2_F32 ? 0x80000000u : 0x80008000u; // x <- -2^x
        }
    }
    __syncthreads();
    const long long t1 = clock64();
    uint32_t acc = 0;
#pragma unroll
    for (int c = 0; c < CHAINS; c++) acc ^= v[c];
    if (acc == 0x12345678u) sink[0] = acc; // keeps the chains live
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

// Accuracy of ex2.approx.f16x2 over x in [-25, 0] (every f16 there; the softmax feeds it x <= 0):
// the largest relative error against exp2 in double, over results that are f16-normal (>= 2^-14),
// and what it gives for 2^-20 (an f16 subnormal: kept, or flushed to 0?).
__global__ void ex2_f16x2_sweep(const uint16_t *x, uint16_t *y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (2 * i + 1 >= n) return;
    uint32_t h = (uint32_t)x[2 * i] | ((uint32_t)x[2 * i + 1] << 16);
    asm("ex2.approx.f16x2 %0, %0;" : "+r"(h));
    y[2 * i] = (uint16_t)h;
    y[2 * i + 1] = (uint16_t)(h >> 16);
}

static double f16_value(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    const double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

static void sweep(void) {
    enum { N = 32768 };
    static uint16_t x[N], y[N];
    int n = 0;
    for (uint32_t h = 0x8000; h <= 0xce40 && n < N; h++) x[n++] = (uint16_t)h; // -0 .. -25
    if (n & 1) x[n++] = 0x8000;
    uint16_t *dx, *dy;
    cudaMalloc(&dx, n * 2);
    cudaMalloc(&dy, n * 2);
    cudaMemcpy(dx, x, n * 2, cudaMemcpyHostToDevice);
    ex2_f16x2_sweep<<<(n / 2 + 255) / 256, 256>>>(dx, dy, n);
    cudaMemcpy(y, dy, n * 2, cudaMemcpyDeviceToHost);
    double worst = 0, worst_x = 0, y20 = -1;
    for (int i = 0; i < n; i++) {
        const double xv = f16_value(x[i]), want = exp2(xv), got = f16_value(y[i]);
        if (xv == -20.0) y20 = got;
        if (want < ldexp(1, -14)) continue;
        const double rel = fabs(got - want) / want;
        if (rel > worst) worst = rel, worst_x = xv;
    }
    printf("ex2.approx.f16x2 over %d f16 x in [-25, 0]: max rel error %.3g (2^%.2f) at x = %g (normal results); "
           "2^-0 -> %g; 2^-20 -> %g (%s)\n", n, worst, log2(worst), worst_x, f16_value(y[0]), y20,
           y20 == 0 ? "flushed" : "subnormal kept");
    cudaFree(dx);
    cudaFree(dy);
}

// The cycles of the slowest CTA of the last launch (the one that sets the rate).
static long long slowest_cta(int sms, const long long *cycles, long long *host) {
    cudaMemcpy(host, cycles, sms * sizeof(long long), cudaMemcpyDeviceToHost);
    long long mx = 0;
    for (int i = 0; i < sms; i++) mx = host[i] > mx ? host[i] : mx;
    return mx;
}

// One softmax of sm90_softmax's shape a loop iteration: S holds 2 rows x 48 columns a thread (BN =
// 192), S[4 nt + 2 r + e]; no rescale of O (there is none here). The scores are fed back (s <- 0.5 s
// + p, stays in [0, 2]), so every iteration depends on the last and nothing can leave the loop.
#define SOFTMAX_N 96
#define SOFTMAX_ITERS 256
// Three orders of the same work. ROW_BY_ROW: a row's max, then its ex2s. BOTH_MAX_FIRST:
// sm90_softmax's (both rows' maxes, a warp vote, then the ex2s). HALVES: the block's columns in
// two halves with the online max between them (half 1's max is independent of half 0's ex2s, so
// its chain can fill the issue slots between them; half 0's P is rescaled where half 1 raised m).
enum { ROW_BY_ROW, BOTH_MAX_FIRST, HALVES };
static const char *order_name[3] = {"row by row", "both maxes first", "column halves"};

// The max of row r over columns nt in [n0, n1) of this thread's quad, in log2 units.
static __device__ __forceinline__ float lab_rowmax(const float *S, int r, int n0, int n1, float sl2) {
    float x = -INFINITY;
#pragma unroll
    for (int nt = n0; nt < n1; nt++) x = fmaxf(x, fmaxf(S[4 * nt + 2 * r], S[4 * nt + 2 * r + 1]));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    return x * sl2;
}

// P = 2^(S sl2 - m) of row r over columns [n0, n1), fed back into S; returns the row sum.
static __device__ __forceinline__ float lab_ex2s(float *S, int r, int n0, int n1, float sl2, float m) {
    float sum = 0.f;
#pragma unroll
    for (int nt = n0; nt < n1; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float p;
            asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(p) : "f"(fmaf(S[4 * nt + 2 * r + e], sl2, -m)));
            S[4 * nt + 2 * r + e] = fmaf(S[4 * nt + 2 * r + e], 0.5f, p);
            sum += p;
        }
    return sum;
}

template <int NT, int ORDER>
__global__ void __launch_bounds__(NT, 1) softmax_loop(float *sink, long long *cycles, float sl2) {
    constexpr int NH = SOFTMAX_N / 8; // n8 column blocks in half the row
    float S[SOFTMAX_N], m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < SOFTMAX_N; i++) S[i] = (float)((threadIdx.x * 7 + i * 13) & 31) * (1.f / 32);
    __syncthreads();
    const long long t0 = clock64();
    for (int it = 0; it < SOFTMAX_ITERS; it++) {
        if (ORDER == ROW_BY_ROW) {
#pragma unroll
            for (int r = 0; r < 2; r++) {
                m_i[r] = fmaxf(m_i[r], lab_rowmax(S, r, 0, 2 * NH, sl2));
                l_i[r] += lab_ex2s(S, r, 0, 2 * NH, sl2, m_i[r]);
            }
        }
        if (ORDER == BOTH_MAX_FIRST) {
            bool grow = false;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const float x = lab_rowmax(S, r, 0, 2 * NH, sl2);
                grow |= x > m_i[r];
                m_i[r] = fmaxf(m_i[r], x);
            }
            if (__any_sync(0xffffffffu, grow)) l_i[0] *= 0.5f, l_i[1] *= 0.5f;
#pragma unroll
            for (int r = 0; r < 2; r++) l_i[r] += lab_ex2s(S, r, 0, 2 * NH, sl2, m_i[r]);
        }
        if (ORDER == HALVES) {
            float m0[2];
#pragma unroll
            for (int r = 0; r < 2; r++) m0[r] = fmaxf(m_i[r], lab_rowmax(S, r, 0, NH, sl2));
#pragma unroll
            for (int r = 0; r < 2; r++) l_i[r] += lab_ex2s(S, r, 0, NH, sl2, m0[r]);
            bool grow = false;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                m_i[r] = fmaxf(m0[r], lab_rowmax(S, r, NH, 2 * NH, sl2));
                grow |= m_i[r] > m0[r];
            }
            if (__any_sync(0xffffffffu, grow)) { // half 0's P and l_i to the new max (the kernel's rare case)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    float c;
                    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(c) : "f"(m0[r] - m_i[r]));
                    l_i[r] *= c;
#pragma unroll
                    for (int nt = 0; nt < NH; nt++) S[4 * nt + 2 * r] *= c, S[4 * nt + 2 * r + 1] *= c;
                }
            }
#pragma unroll
            for (int r = 0; r < 2; r++) l_i[r] += lab_ex2s(S, r, NH, 2 * NH, sl2, m_i[r]);
        }
    }
    __syncthreads();
    const long long t1 = clock64();
    float acc = l_i[0] + l_i[1];
#pragma unroll
    for (int i = 0; i < SOFTMAX_N; i++) acc += S[i];
    if (acc == 1234.5f) sink[0] = acc; // keeps the scores live
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <int NT, int ORDER>
static void run_softmax(int sms, float *sink, long long *cycles, long long *host) {
    for (int rep = 0; rep < 3; rep++) { // the first launch warms up; the last one is reported
        softmax_loop<NT, ORDER><<<sms, NT>>>(sink, cycles, 0.12752f);
        cudaDeviceSynchronize();
    }
    const long long mx = slowest_cta(sms, cycles, host);
    const double per = (double)mx / SOFTMAX_ITERS, results = (double)NT * SOFTMAX_N * SOFTMAX_ITERS;
    printf("softmax of %d scores a thread (%s), %d warp(s) a scheduler: %7.1f cycles each (%.0f MUFU clocks at 16 a "
           "clock an SM), %5.2f ex2 results / clock / SM\n", SOFTMAX_N, order_name[ORDER], NT / 128, per,
           NT * SOFTMAX_N / 16.0, results / mx);
}

template <int FORM, int NT = 1024>
static void run(int sms, uint32_t *sink, long long *cycles, long long *host) {
    for (int rep = 0; rep < 3; rep++) { // the first launch warms up; the last one is reported
        ex2_loop<FORM, NT><<<sms, NT>>>(sink, cycles);
        cudaDeviceSynchronize();
    }
    const long long mx = slowest_cta(sms, cycles, host);
    const double results = (double)NT * ITERS * CHAINS * form_results[FORM] * form_instrs[FORM];
    printf("%-28s %d warp(s) a scheduler: %6.2f results / clock / SM (%5.2f instructions / clock; slowest CTA %lld "
           "cycles)\n", form_name[FORM], NT / 128, results / mx, results / form_results[FORM] / mx, mx);
}

int main(void) {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    uint32_t *sink;
    long long *cycles, host[1024];
    cudaMalloc(&sink, 4);
    cudaMalloc(&cycles, sms * sizeof(long long));
    run<EX2_F32>(sms, sink, cycles, host);
    run<EX2_F16X2>(sms, sink, cycles, host);
    run<EX2_BF16X2>(sms, sink, cycles, host);
    run<EX2_F32, 128>(sms, sink, cycles, host); // 8 independent chains from one / two warps a scheduler
    run<EX2_F32, 256>(sms, sink, cycles, host);
    run<CVT_E4M3X2>(sms, sink, cycles, host);
    run<CVT_BF16X2>(sms, sink, cycles, host);
    run<MIX_E4M3>(sms, sink, cycles, host);
    run<MIX_BF16>(sms, sink, cycles, host);
    run_softmax<128, ROW_BY_ROW>(sms, (float *)sink, cycles, host);
    run_softmax<256, ROW_BY_ROW>(sms, (float *)sink, cycles, host);
    run_softmax<128, BOTH_MAX_FIRST>(sms, (float *)sink, cycles, host);
    run_softmax<256, BOTH_MAX_FIRST>(sms, (float *)sink, cycles, host);
    run_softmax<128, HALVES>(sms, (float *)sink, cycles, host);
    run_softmax<256, HALVES>(sms, (float *)sink, cycles, host);
    sweep();
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        printf("CUDA error: %s\n", cudaGetErrorString(e));
        return 1;
    }
    return 0;
}
