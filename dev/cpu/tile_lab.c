// tile_lab.c -- times the CPU forward's tile steps alone, one thread, on L1/L2-resident tiles, to
// see where a whole forward loses against the sum of its parts (NOTES.md, issue 7).
//
//   cc -O3 -mavx2 -mfma -mf16c -std=c11 -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc
//      dev/cpu/tile_lab.c -o build/tile_lab -lm && build/tile_lab
//
// Versions: 1 (2026-11-29) -- tile_qkT, tile_pv_acc, the softmax steps and the K/V row loads of
// flashc_cpu_tile.h (AVX2), at D = 128, FLASHC_CPU_FWD_BC keys by FLASHC_CPU_FWD_BR queries.
// Thread CPU time, so other work on the machine inflates the numbers less than wall time would.
#define FLASHC_ISA FLASHC_ISA_AVX2
#include "cpu/flashc_cpu_tile.h"

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double thread_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// One thread's fp32 FMA ceiling: 12 independent 8-lane chains (AVX2 has 2 FMA pipes of latency 4).
static double fma_peak(void) {
    __m256 acc[12], x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_ps((float)i);
    const long n = 20000000;
    const double t0 = thread_s();
    for (long r = 0; r < n; r++)
        for (int i = 0; i < 12; i++) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    const double t = thread_s() - t0;
    float sink = 0;
    for (int i = 0; i < 12; i++) sink += _mm256_cvtss_f32(acc[i]);
    if (sink == 12345.0f) printf("%g\n", (double)sink);
    return 12.0 * 8 * 2 * (double)n / t * 1e-9;
}

int main(void) {
    enum { BC = FLASHC_CPU_FWD_BC, D = 128, N = 20000 };
    float *K = aligned_alloc(64, BC * D * 4), *V = aligned_alloc(64, BC * D * 4);
    float *QT = aligned_alloc(64, D * BRF * 4), *OT = aligned_alloc(64, D * BRF * 4);
    float *ST = aligned_alloc(64, BC * BRF * 4), *alpha = aligned_alloc(64, BRF * 4);
    float m_old[BRF], m_new[BRF], m_use[BRF], l[BRF];
    for (int i = 0; i < BC * D; i++) K[i] = (float)(i % 13) * 0.01f, V[i] = (float)(i % 7) * 0.01f;
    for (int i = 0; i < D * BRF; i++) QT[i] = (float)(i % 11) * 0.01f, OT[i] = 0.0f;
    for (int i = 0; i < BRF; i++) alpha[i] = 1.0f, m_old[i] = 0.0f, l[i] = 0.0f;
    const double flop = 2.0 * BC * D * BRF; // one of the two products of a key block

    double t0 = thread_s();
    for (int r = 0; r < N; r++) tile_qkT(ST, K, D, QT, BC, BRF, D);
    const double t_qk = (thread_s() - t0) / N;
    t0 = thread_s();
    for (int r = 0; r < N; r++) tile_pv_acc(OT, alpha, ST, V, D, BC, BRF, D);
    const double t_pv = (thread_s() - t0) / N;
    for (int i = 0; i < BC * BRF; i++) ST[i] = (float)(i % 17) * 0.1f;
    t0 = thread_s();
    for (int r = 0; r < N; r++) {
        tile_rowmax(m_new, m_use, ST, m_old, BC, BRF);
        tile_alpha(alpha, m_old, m_use, BRF);
        tile_exp_rowsum(ST, l, m_use, alpha, BC, BRF);
    }
    const double t_sm = (thread_s() - t0) / N;
    t0 = thread_s();
    for (int r = 0; r < N; r++) {
        tile_load_rows(K, D, V, D, BC, D, FLASHC_DTYPE_F32, 1.0f);
        tile_load_rows(V, D, K, D, BC, D, FLASHC_DTYPE_F32, 1.0f);
    }
    const double t_ld = (thread_s() - t0) / N;

    const double peak = fma_peak();
    printf("per key block of %d keys x %d queries, D = %d, one thread (AVX2); FMA ceiling %.1f GFLOP/s\n", BC, BRF,
           D, peak);
    printf("  tile_qkT     %7.2f us  %6.1f GFLOP/s\n", t_qk * 1e6, flop / t_qk * 1e-9);
    printf("  tile_pv_acc  %7.2f us  %6.1f GFLOP/s\n", t_pv * 1e6, flop / t_pv * 1e-9);
    printf("  softmax      %7.2f us  (%.1f%% of the two products)\n", t_sm * 1e6, 100 * t_sm / (t_qk + t_pv));
    printf("  K, V loads   %7.2f us  (%.1f%% of the two products)\n", t_ld * 1e6, 100 * t_ld / (t_qk + t_pv));
    printf("  sum          %7.2f us  -> %.1f GFLOP/s for the whole step\n", (t_qk + t_pv + t_sm + t_ld) * 1e6,
           2 * flop / (t_qk + t_pv + t_sm + t_ld) * 1e-9);
    printf("(checksum %g)\n", (double)(OT[5] + ST[3] + l[2]));
    return 0;
}
