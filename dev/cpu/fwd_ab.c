// fwd_ab.c -- A/B of two variants of the CPU forward (or backward) in one process: A and B run
// alternately (the order flips every repeat), and the pairwise time ratio A/B of each repeat is
// reported as a median, so load from other work on a shared machine drifts out of the comparison.
//
//   cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iinclude dev/cpu/fwd_ab.c build/libflashc.a -lm -lpthread -o build/fwd_ab
//   build/fwd_ab H S D causal threads reps [dtype 0=f32 1=f16 2=bf16] [B] [value A] [value B]
//   AB_BWD=1 build/fwd_ab ...      times flashc_bwd instead (after one forward for o and lse)
//
// Variants: an experiment adds `int flashc__fwd_variant = 1;` to src/cpu/flashc_cpu.c (a static
// link reaches it despite -fvisibility=hidden) and branches on it; this harness sets it to value A
// (default 0) or value B (default 1) before each call. Without the symbol, A and B are the same
// code, and causal = 2 compares the non-causal forward (A) with the causal one (B).
// Used for the row caches, the lanes and the chunking of the CPU forward (2026-11-29, issue 7).
#include "flashc.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern int flashc__fwd_variant __attribute__((weak));

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double load1(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) { if (fscanf(f, "%lf", &l) != 1) l = -1; fclose(f); }
    return l;
}

int main(int argc, char **argv) {
    int H = argc > 1 ? atoi(argv[1]) : 16, S = argc > 2 ? atoi(argv[2]) : 4096, D = argc > 3 ? atoi(argv[3]) : 128;
    int causal = argc > 4 ? atoi(argv[4]) : 0, th = argc > 5 ? atoi(argv[5]) : 2, reps = argc > 6 ? atoi(argv[6]) : 5;
    int dt = argc > 7 ? atoi(argv[7]) : 0;
    int B = argc > 8 ? atoi(argv[8]) : 1;
    int va = argc > 9 ? atoi(argv[9]) : 0, vb = argc > 10 ? atoi(argv[10]) : 1;
    if (reps < 1 || reps > 64) reps = reps < 1 ? 1 : 64; // the timing arrays hold 64
    size_t es = dt == 0 ? 4 : 2, n = (size_t)B * S * H * D;
    void *q = malloc(n * es), *k = malloc(n * es), *v = malloc(n * es), *o[2] = {malloc(n * es), malloc(n * es)};
    srand(1);
    for (size_t i = 0; i < n * es / 2; i++) {
        ((uint16_t *)q)[i] = (uint16_t)(0x3c00 + rand() % 0x300 - 0x180);
        ((uint16_t *)k)[i] = (uint16_t)(0x3c00 + rand() % 0x300 - 0x180);
        ((uint16_t *)v)[i] = (uint16_t)(0x3c00 + rand() % 0x300 - 0x180);
    }
    if (dt == 0)
        for (size_t i = 0; i < n; i++) {
            ((float *)q)[i] = (rand() / (float)RAND_MAX - 0.5f);
            ((float *)k)[i] = (rand() / (float)RAND_MAX - 0.5f);
            ((float *)v)[i] = (rand() / (float)RAND_MAX - 0.5f);
        }
    flashc_ctx *ctx;
    if (flashc_ctx_create(&ctx, FLASHC_BACKEND_CPU, th)) return 1;
    flashc_attn_desc d = {0};
    d.batch = B; d.seqlen_q = d.seqlen_k = S; d.heads = d.heads_kv = H; d.head_dim = D;
    d.dtype = (flashc_dtype)dt; d.causal = causal;
    flashc_fill_contiguous_strides(&d);
    float *lse = malloc(sizeof(float) * B * H * S);
    double t[2][64], c[2][64];
    void *bo = malloc(n * es), *dk = malloc(n * es), *dv = malloc(n * es);
    float *blse = malloc(sizeof(float) * B * H * S);
    double flop[2] = {4.0 * B * H * S * (double)S * D * (causal == 1 ? 0.5 : 1), 0};
    flop[1] = causal == 2 ? flop[0] / 2 : flop[0];
    if (getenv("AB_BWD")) {
        flashc_fwd(ctx, &d, q, k, v, bo, blse, NULL, 0, NULL);
        flop[0] *= 2.5, flop[1] *= 2.5;
    }
    double l0 = load1();
    for (int r = -1; r < reps; r++)
        for (int var = 0; var < 2; var++) {
            int vv = (r & 1) ? 1 - var : var;
            if (&flashc__fwd_variant) flashc__fwd_variant = vv ? vb : va;
            if (causal == 2) d.causal = vv; // A = non-causal, B = causal
            double t0 = now(), c0 = cpu_now();
            if (!getenv("AB_BWD") && flashc_fwd(ctx, &d, q, k, v, o[vv], lse, NULL, 0, NULL)) { printf("err %s\n", flashc_ctx_last_error(ctx)); return 1; }
            if (getenv("AB_BWD") && flashc_bwd(ctx, &d, q, k, v, bo, blse, k, o[vv], dk, dv, NULL, 0, NULL)) { printf("err %s\n", flashc_ctx_last_error(ctx)); return 1; }
            if (r >= 0) t[vv][r] = now() - t0, c[vv][r] = cpu_now() - c0;
        }
    double l1 = load1();
    int same = !memcmp(o[0], o[1], n * es);
    printf("H=%d S=%d D=%d causal=%d th=%d B=%d dtype=%d reps=%d load %.2f->%.2f  outputs %s\n", H, S, D, causal, th, B, dt, reps,
           l0, l1, same ? "identical" : "DIFFER");
    double ratio[64], rc[64];
    for (int r = 0; r < reps; r++) ratio[r] = t[0][r] / t[1][r], rc[r] = c[0][r] / c[1][r];
    qsort(ratio, reps, sizeof(double), cmp);
    qsort(rc, reps, sizeof(double), cmp);
    printf("  pairwise A/B time ratio: median %.3f (%.3f..%.3f); cpu-time ratio median %.3f\n", ratio[reps / 2], ratio[0],
           ratio[reps - 1], rc[reps / 2]);
    double med[2];
    for (int var = 0; var < 2; var++) {
        qsort(t[var], reps, sizeof(double), cmp);
        qsort(c[var], reps, sizeof(double), cmp);
        med[var] = t[var][reps / 2];
        printf("  %c: median %8.2f ms  (%.2f..%.2f)  %.1f GFLOP/s\n", "AB"[var], med[var] * 1e3, t[var][0] * 1e3,
               t[var][reps - 1] * 1e3, flop[var] / med[var] * 1e-9);
        printf("     cpu median %8.2f ms -> %.1f GFLOP/s per cpu-second x threads\n", c[var][reps / 2] * 1e3,
               flop[var] / c[var][reps / 2] * th * 1e-9);
    }
    printf("  speedup of B over A (medians) %.3f\n", med[0] / med[1]);
    flashc_ctx_free(ctx);
    return 0;
}
