// decode_hot.c -- the CPU decode kernel's compute rate with K and V already in cache: flashc_fwd_kvcache
// on one small bf16 cache (GQA 32/8, D 128, seqlen_q 1, 2 threads), called 200 times on the same
// memory; the best time and GB/s of K + V. Beside bench_decode (which keeps every call's K and V out
// of L3) it tells a compute-bound kernel from a memory-bound one (NOTES.md session 39).
//
// Build: cc -O2 -Iinclude dev/cpu/decode_hot.c -o decode_hot build/libflashc.a -lm -lpthread
// Run:   ./decode_hot KV BATCH      e.g. ./decode_hot 1024 4  (16.8 MB of K + V)
#include "flashc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 3) return fprintf(stderr, "usage: decode_hot KV BATCH\n"), 2;
    const int kv = atoi(argv[1]), B = atoi(argv[2]);
    const size_t n = (size_t)B * kv * 8 * 128, nq = (size_t)B * 32 * 128;
    uint16_t *k = malloc(n * 2), *v = malloc(n * 2), *q = malloc(nq * 2), *o = malloc(nq * 2);
    for (size_t i = 0; i < n; i++) k[i] = 0x3f80 ^ (i & 0x7f), v[i] = 0x3f00 ^ (i & 0x3f); // bf16 near 1 and 0.5
    for (size_t i = 0; i < nq; i++) q[i] = 0x3e00 ^ (i & 0x1f);
    flashc_attn_desc d = {0};
    d.batch = B, d.seqlen_q = 1, d.seqlen_k = kv, d.heads = 32, d.heads_kv = 8, d.head_dim = 128;
    d.dtype = FLASHC_DTYPE_BF16, d.causal = 1;
    flashc_fill_contiguous_strides(&d);
    flashc_kvcache_desc kd = {0};
    flashc_ctx *ctx;
    if (flashc_ctx_create(&ctx, FLASHC_BACKEND_CPU, 2) != FLASHC_OK) return 1;
    double best = 1e9;
    for (int r = 0; r < 200; r++) {
        const double t0 = now_s();
        if (flashc_fwd_kvcache(ctx, &d, &kd, q, k, v, NULL, NULL, o, NULL, NULL, 0, NULL) != FLASHC_OK)
            return fprintf(stderr, "%s\n", flashc_ctx_last_error(ctx)), 1;
        const double t = now_s() - t0;
        if (r > 5 && t < best) best = t; // after warm-up: K and V in cache
    }
    printf("kv %d B %d: best %.1f us, %.1f GB/s of K+V (%.1f MB)\n", kv, B, best * 1e6, 2.0 * n * 2 / best * 1e-9,
           2.0 * n * 2 / 1e6);
    flashc_ctx_free(ctx);
    free(k), free(v), free(q), free(o);
    return 0;
}
