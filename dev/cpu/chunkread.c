// chunkread.c -- read bandwidth of a buffer read as chunks in a shuffled order (the access pattern of
// a paged KV cache whose pages hold CHUNK bytes), 2 threads, AVX-512 loads, with software prefetch of
// the chunk PF ahead for PF = 0, 2, 8, 32. Session 39 (NOTES.md) used it to explain bench_decode --page.
// Build: cc -O2 -mavx512f -pthread dev/cpu/chunkread.c -o chunkread
// Run:   ./chunkread MIB HUGE CHUNK      e.g. ./chunkread 2048 1 2048  (HUGE: madvise huge pages)
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct job {
    const char *base;
    const int32_t *order; // this thread's chunks, in reading order
    size_t n, chunk;
    int pf;               // prefetch the chunk pf ahead (0: none)
    uint64_t sum;
} job;

static void *run(void *arg) {
    job *j = arg;
    __m512i acc = _mm512_setzero_si512();
    for (size_t i = 0; i < j->n; i++) {
        const char *c = j->base + (size_t)j->order[i] * j->chunk;
        if (j->pf && i + j->pf < j->n) {
            const char *next = j->base + (size_t)j->order[i + j->pf] * j->chunk;
            for (size_t o = 0; o < j->chunk; o += 64) _mm_prefetch(next + o, _MM_HINT_T0);
        }
        for (size_t o = 0; o < j->chunk; o += 64) acc = _mm512_add_epi64(acc, _mm512_load_si512(c + o));
    }
    j->sum = (uint64_t)_mm512_reduce_add_epi64(acc);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) return fprintf(stderr, "usage: chunkread MIB HUGE CHUNK\n"), 2;
    const size_t bytes = (size_t)atoi(argv[1]) << 20, chunk = (size_t)atoi(argv[3]), n = bytes / chunk;
    char *p;
    if (posix_memalign((void **)&p, 1 << 21, bytes)) return 1;
    if (atoi(argv[2])) madvise(p, bytes, MADV_HUGEPAGE);
    memset(p, 1, bytes);
    int32_t *order = malloc(sizeof(int32_t) * n);
    uint64_t rng = 1, sink = 0;
    const int pfs[4] = {0, 2, 8, 32};
    for (int pi = 0; pi < 4; pi++) {
        for (size_t i = 0; i < n; i++) order[i] = (int32_t)i;
        for (size_t i = n - 1; i > 0; i--) { // Fisher-Yates
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            const size_t k = (rng >> 33) % (i + 1);
            const int32_t x = order[i];
            order[i] = order[k], order[k] = x;
        }
        printf("%s MB, huge %s, chunk %s, prefetch %2d chunks ahead:", argv[1], argv[2], argv[3], pfs[pi]);
        for (int rep = 0; rep < 5; rep++) {
            pthread_t th[2];
            job J[2];
            for (int t = 0; t < 2; t++) J[t] = (job){p, order + t * (n / 2), n / 2, chunk, pfs[pi], 0};
            const double t0 = now_s();
            for (int t = 0; t < 2; t++) pthread_create(&th[t], NULL, run, &J[t]);
            for (int t = 0; t < 2; t++) pthread_join(th[t], NULL), sink ^= J[t].sum;
            printf(" %.1f", (double)(n / 2 * 2 * chunk) / (now_s() - t0) * 1e-9);
        }
        printf(" GB/s\n");
    }
    free(order), free(p);
    return sink == 42; // (keeps the sums live)
}
