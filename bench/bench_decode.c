// bench_decode.c -- CPU decode (flashc_fwd_kvcache) against the memory bandwidth measured in the
// same run, on DESIGN.md §3's decode shapes: GQA 32/8, head_dim 128, bf16 cache, kv length 4k..64k,
// batch 1..16, seqlen_q 1 (decode) and 4 (speculative decoding).
//
// Decode is bound by the bytes of K and V: the figure of merit is
//     GB/s = batch * kv * heads_kv * head_dim * 2 (K and V) * 2 (bf16) / time
// next to the read bandwidth of this machine with the same thread count: a plain streaming read
// (64..512 MiB, about the bytes of the call, each in a part of a 512 MiB buffer the previous one did
// not touch) before each timed call, median over the calls, so
// that the ceiling and the measurement it judges see the same load on (possibly shared) cores.
// A read and a memcpy bandwidth (bytes read + written) of 512 MiB are reported once at the start.
//
// Method: the caches are two pools of "sequence slots" addressed through cache_batch_idx, and each
// timed call reads slots the previous call did not, so no call finds its K/V in the 32 MiB L3.
// --page LIST adds paged caches (PagedAttention) of those page sizes over the same pools: a call's
// B * kv / P pages are the pages of the slots the contiguous call would read, shuffled through its
// block table (one fixed permutation), as an allocator's free list leaves them after churn. The
// layouts take turns within each repeat, so "x contig" is a ratio from the same minutes. Every
// row's "read GB/s" is the streaming read: small pages cost what random reads of that size cost
// the memory system (NOTES.md session 39: 2 KB pages in a shuffled order read at ~half the rate).
// Cache full (cache_seqlens = kv), no append, causal. Warm-up calls, then the median of --repeats
// calls (clock_gettime(CLOCK_MONOTONIC)), min and max beside it. Before timing, one small case is
// checked against the reference backend.
//
// Build and run:  make build/flashc-bench-decode
//                 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/flashc-bench-decode [--json FILE]
#define _GNU_SOURCE
#include "flashc.h"
#include "flashc_internal.h"
#include "bench_util.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define H_Q 32
#define H_KV 8
#define HD 128
#define MAX_LIST 16

typedef struct opts {
    int threads, repeats, hugepages, check;
    double max_gb;
    int kv[MAX_LIST], n_kv, batch[MAX_LIST], n_batch, sq[MAX_LIST], n_sq;
    int page[MAX_LIST], n_page; // page sizes of the paged layouts (none: contiguous only)
    const char *json;
} opts;


static int parse_list(const char *s, int *out) {
    int n = 0;
    while (*s && n < MAX_LIST) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0) return -1;
        if (*end == 'k' || *end == 'K') v *= 1024, end++;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static void usage(void) {
    printf("usage: flashc-bench-decode [options]\n"
           "  --threads N         worker threads (default 2)\n"
           "  --kv LIST           cache lengths (default 4k,8k,16k,32k,64k)\n"
           "  --batch LIST        batch sizes (default 1,4,16)\n"
           "  --seqlen-q LIST     query tokens (default 1,4)\n"
           "  --page LIST         also paged caches of these page sizes (e.g. 1,16,256), beside contiguous\n"
           "  --repeats N         timed calls per shape (default 9)\n"
           "  --max-gb X          memory for the K and V pools together (default 4.5); larger shapes are skipped\n"
           "  --hugepages         madvise(MADV_HUGEPAGE) the pools (default: plain malloc'd memory)\n"
           "  --no-check          skip the check against the reference\n"
           "  --json FILE         append one JSON line per measurement (DESIGN.md §3) to FILE\n");
}

static void parse(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->threads = 2, o->repeats = 9, o->max_gb = 4.5, o->check = 1;
    o->n_kv = parse_list("4k,8k,16k,32k,64k", o->kv);
    o->n_batch = parse_list("1,4,16", o->batch);
    o->n_sq = parse_list("1,4", o->sq);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--threads") && v) o->threads = atoi(v), i++;
        else if (!strcmp(a, "--repeats") && v) o->repeats = atoi(v), i++;
        else if (!strcmp(a, "--max-gb") && v) o->max_gb = atof(v), i++;
        else if (!strcmp(a, "--kv") && v) o->n_kv = parse_list(v, o->kv), i++;
        else if (!strcmp(a, "--batch") && v) o->n_batch = parse_list(v, o->batch), i++;
        else if (!strcmp(a, "--seqlen-q") && v) o->n_sq = parse_list(v, o->sq), i++;
        else if (!strcmp(a, "--page") && v) o->n_page = parse_list(v, o->page), i++;
        else if (!strcmp(a, "--json") && v) o->json = v, i++;
        else if (!strcmp(a, "--hugepages")) o->hugepages = 1;
        else if (!strcmp(a, "--no-check")) o->check = 0;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) usage(), exit(0);
        else {
            usage();
            exit(2);
        }
    }
    if (o->threads < 1 || o->repeats < 1 || o->n_kv < 1 || o->n_batch < 1 || o->n_sq < 1 || o->n_page < 0) {
        fprintf(stderr, "flashc-bench-decode: bad option value\n");
        exit(2);
    }
}

// ------------------------------------------------------------------------------------------------
// the bandwidth ceilings: a streaming read and a memcpy, split over the threads

typedef struct bw_job {
    const uint64_t *src;
    uint64_t *dst;
    size_t n; // uint64 words
    uint64_t sum;
    double t0, t1; // this thread's start and end (the main thread may be descheduled at the barrier)
    pthread_barrier_t *bar;
} bw_job;

static void *bw_read(void *arg) {
    bw_job *j = arg;
    pthread_barrier_wait(j->bar);
    j->t0 = now_s();
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 8 <= j->n; i += 8) { // 4 chains; the compiler vectorises the adds
        a += j->src[i] + j->src[i + 4];
        b += j->src[i + 1] + j->src[i + 5];
        c += j->src[i + 2] + j->src[i + 6];
        d += j->src[i + 3] + j->src[i + 7];
    }
    j->sum = a ^ b ^ c ^ d;
    j->t1 = now_s();
    pthread_barrier_wait(j->bar);
    return NULL;
}

static void *bw_copy(void *arg) {
    bw_job *j = arg;
    pthread_barrier_wait(j->bar);
    j->t0 = now_s();
    memcpy(j->dst, j->src, j->n * sizeof(uint64_t));
    j->t1 = now_s();
    pthread_barrier_wait(j->bar);
    return NULL;
}

static volatile uint64_t g_sink;

// GB/s of one pass (read: bytes read; copy: bytes read + written), median of `reps`.
static double measure_bw(int copy, char *buf, size_t bytes, int threads, int reps) {
    double *t = malloc(sizeof(double) * (size_t)reps);
    size_t words = (copy ? bytes / 2 : bytes) / sizeof(uint64_t) / (size_t)threads / 8 * 8;
    for (int r = 0; r < reps; r++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)threads + 1);
        pthread_t *th = malloc(sizeof(pthread_t) * (size_t)threads);
        bw_job *jobs = malloc(sizeof(bw_job) * (size_t)threads);
        for (int i = 0; i < threads; i++) {
            jobs[i].src = (const uint64_t *)buf + (size_t)i * words;
            jobs[i].dst = (uint64_t *)(buf + bytes / 2) + (size_t)i * words;
            jobs[i].n = words;
            jobs[i].bar = &bar;
            pthread_create(&th[i], NULL, copy ? bw_copy : bw_read, &jobs[i]);
        }
        pthread_barrier_wait(&bar);
        pthread_barrier_wait(&bar);
        double t0 = jobs[0].t0, t1 = jobs[0].t1; // first start to last end
        for (int i = 0; i < threads; i++) {
            pthread_join(th[i], NULL);
            g_sink ^= jobs[i].sum;
            t0 = jobs[i].t0 < t0 ? jobs[i].t0 : t0;
            t1 = jobs[i].t1 > t1 ? jobs[i].t1 : t1;
        }
        t[r] = t1 - t0;
        pthread_barrier_destroy(&bar);
        free(th), free(jobs);
    }
    for (int i = 1; i < reps; i++) // median
        for (int k = i; k > 0 && t[k] < t[k - 1]; k--) {
            double x = t[k]; t[k] = t[k - 1]; t[k - 1] = x;
        }
    double med = t[reps / 2];
    free(t);
    return (double)words * sizeof(uint64_t) * (double)threads * (copy ? 2 : 1) / med * 1e-9;
}

// ------------------------------------------------------------------------------------------------

// The CPU model and the cores online ("cpu" when /proc/cpuinfo names no model).
static void machine_name(char *out, size_t cap) {
    char model[256];
    read_keyed_line("/proc/cpuinfo", "model name", model, sizeof model);
    if (model[0]) snprintf(out, cap, "%s (%ld cores online)", model, sysconf(_SC_NPROCESSORS_ONLN));
    else snprintf(out, cap, "cpu");
}


static void *pool_alloc(size_t bytes, int huge) {
    void *p = NULL;
    if (posix_memalign(&p, 2 << 20, bytes)) return NULL;
    if (huge) madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) { return g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull; }
static uint16_t rand_bf16(void) { // a normal-ish value in [-2, 2), as bf16
    float x = (float)((int32_t)(rng_next() >> 32)) * (2.0f / 2147483648.0f);
    return flashc__f32_to_bf16(x);
}

// a[i] = a random permutation of 0 .. n - 1 (Fisher-Yates): page numbers as an allocator leaves them
static void shuffled_iota(int32_t *a, int n) {
    for (int i = 0; i < n; i++) a[i] = i;
    for (int i = n - 1; i > 0; i--) {
        const int j = (int)((rng_next() >> 33) % (uint64_t)(i + 1)), x = a[i];
        a[i] = a[j], a[j] = x;
    }
}

// One small case (append + rotary + GQA + cache_batch_idx) on the cpu backend against the
// reference backend: the numbers below are only worth reading if this holds.
static int check_against_ref(int threads) {
    const int B = 2, Sq = 4, cap = 700, new = 1, rows = 3;
    const size_t slot = (size_t)cap * H_KV * HD, nq = (size_t)B * Sq * H_Q * HD, nnew = (size_t)B * new * H_KV * HD;
    uint16_t *k[2], *v[2], *q = malloc(nq * 2), *kn = malloc(nnew * 2), *vn = malloc(nnew * 2), *o[2];
    uint16_t *cs = malloc((size_t)(cap + Sq) * HD / 2 * 2), *sn = malloc((size_t)(cap + Sq) * HD / 2 * 2);
    for (int i = 0; i < 2; i++) k[i] = malloc(rows * slot * 2), v[i] = malloc(rows * slot * 2), o[i] = malloc(nq * 2);
    for (size_t e = 0; e < rows * slot; e++) k[0][e] = k[1][e] = rand_bf16(), v[0][e] = v[1][e] = rand_bf16();
    for (size_t e = 0; e < nq; e++) q[e] = rand_bf16();
    for (size_t e = 0; e < nnew; e++) kn[e] = rand_bf16(), vn[e] = rand_bf16();
    for (int p = 0; p < cap + Sq; p++)
        for (int i = 0; i < HD / 2; i++) {
            double th = p / pow(10000.0, 2.0 * i / HD);
            cs[p * HD / 2 + i] = flashc__f32_to_bf16((float)cos(th));
            sn[p * HD / 2 + i] = flashc__f32_to_bf16((float)sin(th));
        }
    int32_t cl[2] = {cap - 1 - 300, cap - 1}, cbi[2] = {2, 0};
    flashc_attn_desc d = {0};
    d.batch = B, d.seqlen_q = Sq, d.seqlen_k = cap, d.heads = H_Q, d.heads_kv = H_KV, d.head_dim = HD;
    d.dtype = FLASHC_DTYPE_BF16, d.causal = 1;
    flashc_fill_contiguous_strides(&d);
    flashc_kvcache_desc kv = {0};
    kv.cache_seqlens = cl, kv.cache_batch_idx = cbi, kv.seqlen_new = new;
    kv.rotary_cos = cs, kv.rotary_sin = sn, kv.rotary_dim = HD, kv.seqlen_ro = cap + Sq;
    double err = 0;
    int ok = 1;
    for (int i = 0; i < 2 && ok; i++) {
        flashc_ctx *ctx;
        if (flashc_ctx_create(&ctx, i ? FLASHC_BACKEND_REF : FLASHC_BACKEND_CPU, threads) != FLASHC_OK) return 0;
        flashc_status st = flashc_fwd_kvcache(ctx, &d, &kv, q, k[i], v[i], kn, vn, o[i], NULL, NULL, 0, NULL);
        if (st != FLASHC_OK) printf("check: %s\n", flashc_ctx_last_error(ctx)), ok = 0;
        flashc_ctx_free(ctx);
    }
    for (size_t e = 0; e < nq && ok; e++)
        err = fmax(err, fabs(flashc__bf16_to_f32(o[0][e]) - flashc__bf16_to_f32(o[1][e])));
    // one bf16 ulp of |o| < 2 (2^-7): a sanity gate for the timed path (the rounding of o, and of
    // P_ij in the dot-product kernel, stay well inside it); the tests hold the accuracy rule
    ok = ok && err <= 0x1p-7 && !memcmp(k[0], k[1], rows * slot * 2) && !memcmp(v[0], v[1], rows * slot * 2);
    printf("check: cpu vs ref, B=%d Sq=%d kv=%d GQA %d/%d D=%d bf16 append+rotary+cache_batch_idx: max |diff| = %.3g "
           "(<= 2^-7), caches %s -> %s\n",
           B, Sq, cap, H_Q, H_KV, HD, err, memcmp(k[0], k[1], rows * slot * 2) ? "differ" : "identical",
           ok ? "ok" : "FAILED");
    for (int i = 0; i < 2; i++) free(k[i]), free(v[i]), free(o[i]);
    free(q), free(kn), free(vn), free(cs), free(sn);
    return ok;
}

// flashc_fwd_kvcache (no append) on the cpu backend and on the reference: the largest |o| difference
// (*err) and relative lse difference (*err_l) over nq output elements and nl lse entries; 0 when a
// call failed (its message printed).
static int cpu_vs_ref(const flashc_attn_desc *d, const flashc_kvcache_desc *kv, const uint16_t *q, uint16_t *k,
                      uint16_t *v, size_t nq, size_t nl, int threads, double *err, double *err_l) {
    uint16_t *o[2] = {malloc(nq * 2), malloc(nq * 2)};
    float *lse[2] = {malloc(nl * sizeof(float)), malloc(nl * sizeof(float))};
    int ok = 1;
    for (int i = 0; i < 2 && ok; i++) {
        flashc_ctx *ctx;
        if (flashc_ctx_create(&ctx, i ? FLASHC_BACKEND_REF : FLASHC_BACKEND_CPU, threads) != FLASHC_OK) {
            ok = 0;
            break;
        }
        flashc_status st = flashc_fwd_kvcache(ctx, d, kv, q, k, v, NULL, NULL, o[i], lse[i], NULL, 0, NULL);
        if (st != FLASHC_OK) printf("check: %s\n", flashc_ctx_last_error(ctx)), ok = 0;
        flashc_ctx_free(ctx);
    }
    *err = *err_l = 0;
    for (size_t e = 0; e < nq && ok; e++)
        *err = fmax(*err, fabs(flashc__bf16_to_f32(o[0][e]) - flashc__bf16_to_f32(o[1][e])));
    for (size_t e = 0; e < nl && ok; e++) *err_l = fmax(*err_l, fabs(lse[0][e] - lse[1][e]) / (1 + fabs(lse[1][e])));
    free(o[0]), free(o[1]), free(lse[0]), free(lse[1]);
    return ok;
}

// The timed path itself: batch 1, one query, a cache of 8192 keys, no append: the CPU decode kernel
// splits the keys over the threads (a split a 1024 keys at most) and merges the partials by their
// lse, which the 700-key case above never reaches. o and lse against the reference backend.
static int check_split_path(int threads) {
    const int cap = 8192;
    const size_t nkv = (size_t)cap * H_KV * HD, nq = (size_t)H_Q * HD;
    uint16_t *k = malloc(nkv * 2), *v = malloc(nkv * 2), *q = malloc(nq * 2);
    for (size_t e = 0; e < nkv; e++) k[e] = rand_bf16(), v[e] = rand_bf16();
    for (size_t e = 0; e < nq; e++) q[e] = rand_bf16();
    flashc_attn_desc d = {0};
    d.batch = 1, d.seqlen_q = 1, d.seqlen_k = cap, d.heads = H_Q, d.heads_kv = H_KV, d.head_dim = HD;
    d.dtype = FLASHC_DTYPE_BF16;
    flashc_fill_contiguous_strides(&d);
    flashc_kvcache_desc kv = {0};
    double err, err_l;
    const int ok = cpu_vs_ref(&d, &kv, q, k, v, nq, H_Q, threads, &err, &err_l) && err <= 0x1p-7 && err_l <= 1e-5;
    printf("check: cpu vs ref, B=1 Sq=1 kv=%d GQA %d/%d D=%d bf16 (split over %d threads, merged): max |diff| o %.3g "
           "(<= 2^-7), lse %.3g (<= 1e-5 relative) -> %s\n", cap, H_Q, H_KV, HD, threads, err, err_l, ok ? "ok" : "FAILED");
    free(k), free(v), free(q);
    return ok;
}

// The paged path at page size P: B = 2, four queries (causal), 1000 and 517 cached keys, the pool's
// pages shuffled through the block table; o and lse against the reference backend.
static int check_paged(int threads, int P) {
    const int B = 2, Sq = 4, pps = (1024 + P - 1) / P, n_pages = B * pps;
    const size_t page = (size_t)P * H_KV * HD, nq = (size_t)B * Sq * H_Q * HD;
    uint16_t *k = malloc(n_pages * page * 2), *v = malloc(n_pages * page * 2), *q = malloc(nq * 2);
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)n_pages), cl[2] = {1000, 517};
    for (size_t e = 0; e < n_pages * page; e++) k[e] = rand_bf16(), v[e] = rand_bf16();
    for (size_t e = 0; e < nq; e++) q[e] = rand_bf16();
    shuffled_iota(bt, n_pages);
    flashc_attn_desc d = {0};
    d.batch = B, d.seqlen_q = Sq, d.seqlen_k = pps * P, d.heads = H_Q, d.heads_kv = H_KV, d.head_dim = HD;
    d.dtype = FLASHC_DTYPE_BF16, d.causal = 1;
    d.block_table = bt, d.block_table_stride = pps, d.page_size = P, d.num_pages = n_pages;
    flashc_fill_contiguous_strides(&d);
    flashc_kvcache_desc kv = {0};
    kv.cache_seqlens = cl;
    double err, err_l;
    const int ok = cpu_vs_ref(&d, &kv, q, k, v, nq, (size_t)B * Sq * H_Q, threads, &err, &err_l) && err <= 0x1p-7 &&
                   err_l <= 1e-5;
    printf("check: cpu vs ref, B=%d Sq=%d kv=%d,%d GQA %d/%d D=%d bf16 paged (page %d, shuffled): max |diff| o %.3g "
           "(<= 2^-7), lse %.3g (<= 1e-5 relative) -> %s\n", B, Sq, cl[0], cl[1], H_Q, H_KV, HD, P, err, err_l,
           ok ? "ok" : "FAILED");
    free(k), free(v), free(q), free(bt);
    return ok;
}

int main(int argc, char **argv) {
    opts o;
    parse(argc, argv, &o);
    char device[256];
    machine_name(device, sizeof device);
    printf("flashc %s decode benchmark: GQA %d/%d, head_dim %d, bf16 cache, %d threads\n", flashc_version_string(), H_Q,
           H_KV, HD, o.threads);
    printf("device: %s; load average (1 min) %.2f at start\n", device, loadavg1());
    if (o.check && !(check_against_ref(o.threads) && check_split_path(o.threads))) return 1;
    for (int i = 0; i < o.n_page && o.check; i++)
        if (!check_paged(o.threads, o.page[i])) return 1;

    FILE *jf = NULL;
    if (o.json && !(jf = fopen(o.json, "a"))) {
        fprintf(stderr, "flashc-bench-decode: cannot open %s\n", o.json);
        return 2;
    }

    // the bandwidth buffer (512 MiB: 16 x the L3) and its ceilings at the start
    const size_t bw_bytes = (size_t)512 << 20;
    char *bw = pool_alloc(bw_bytes, o.hugepages);
    if (!bw) return fprintf(stderr, "out of memory\n"), 1;
    memset(bw, 1, bw_bytes);
    double read0 = measure_bw(0, bw, bw_bytes, o.threads, 5), copy0 = measure_bw(1, bw, bw_bytes, o.threads, 5);
    printf("ceilings: read %.2f GB/s, memcpy %.2f GB/s (read + written), %d threads, 512 MiB\n", read0, copy0, o.threads);
    if (jf) {
        const char *imp[2] = {"read_ceiling", "copy_ceiling"};
        double val[2] = {read0, copy0};
        for (int i = 0; i < 2; i++)
            fprintf(jf,
                    "{\"impl\": \"%s\", \"backend\": \"cpu\", \"device\": \"%s\", \"dtype\": \"bf16\", \"direction\": "
                    "\"decode\", \"threads\": %d, \"bytes\": %zu, \"gbps\": %.3f, \"loadavg\": %.2f}\n",
                    imp[i], device, o.threads, bw_bytes, val[i], loadavg1());
    }

    // the K / V pools: slots of (kv, heads_kv, head_dim) bf16, as large as the biggest shape needs
    // (at least 128 MiB, so that rotating over them leaves the L3), within --max-gb for both
    size_t need = (size_t)128 << 20;
    for (int i = 0; i < o.n_kv; i++)
        for (int j = 0; j < o.n_batch; j++) {
            size_t b = (size_t)o.batch[j] * o.kv[i] * H_KV * HD * 2;
            if (b > need && 2 * (double)b <= o.max_gb * 1e9) need = b;
        }
    uint16_t *kp = pool_alloc(need, o.hugepages), *vp = pool_alloc(need, o.hugepages);
    if (!kp || !vp) return fprintf(stderr, "out of memory for 2 x %zu bytes\n", need), 1;
    for (size_t e = 0; e < need / 2; e++) kp[e] = rand_bf16(), vp[e] = rand_bf16();

    flashc_ctx *ctx;
    if (flashc_ctx_create(&ctx, FLASHC_BACKEND_CPU, o.threads) != FLASHC_OK) return 1;
    // layout 0 is the contiguous cache (slots through cache_batch_idx), layout l >= 1 the paged one
    // at page size o.page[l - 1] over the same pools
    const int n_lay = 1 + o.n_page;
    printf("\n%5s %3s %6s %8s %9s %9s %9s %9s %8s %8s %6s\n", "batch", "sq", "kv", "layout", "ms", "min ms", "GB/s",
           "read GB/s", "% read", "x contig", "load");
    for (int si = 0; si < o.n_sq; si++)
        for (int bi = 0; bi < o.n_batch; bi++)
            for (int ki = 0; ki < o.n_kv; ki++) {
                const int B = o.batch[bi], kv = o.kv[ki], Sq = o.sq[si];
                const size_t slot = (size_t)kv * H_KV * HD, bytes = (size_t)B * slot * 2;
                const int n_slots = (int)(need / (slot * 2));
                if (n_slots < B) {
                    printf("%5d %3d %6d   skipped: K and V need 2 x %.2f GB > --max-gb %.1f\n", B, Sq, kv, bytes * 1e-9,
                           o.max_gb);
                    continue;
                }
                const size_t nq = (size_t)B * Sq * H_Q * HD;
                uint16_t *q = malloc(nq * 2), *out = malloc(nq * 2);
                float *lse = malloc(sizeof(float) * (size_t)B * H_Q * Sq);
                int32_t *cl = malloc(sizeof(int32_t) * (size_t)B), *cbi = malloc(sizeof(int32_t) * (size_t)B);
                for (size_t e = 0; e < nq; e++) q[e] = rand_bf16();
                for (int b = 0; b < B; b++) cl[b] = kv, cbi[b] = b;
                flashc_attn_desc d[MAX_LIST + 1];
                flashc_kvcache_desc kd[MAX_LIST + 1];
                int32_t *perm[MAX_LIST + 1] = {NULL}, *bt[MAX_LIST + 1] = {NULL};
                void *ws[MAX_LIST + 1] = {NULL};
                size_t ws_size[MAX_LIST + 1] = {0};
                int live[MAX_LIST + 1] = {0};
                for (int l = 0; l < n_lay; l++) {
                    const int P = l ? o.page[l - 1] : 0, pps = P ? kv / P : 0;
                    if (P && kv % P) {
                        printf("%5d %3d %6d   page %d skipped: kv is not a whole number of pages\n", B, Sq, kv, P);
                        continue;
                    }
                    memset(&d[l], 0, sizeof d[l]);
                    d[l].batch = B, d[l].seqlen_q = Sq, d[l].seqlen_k = kv, d[l].heads = H_Q, d[l].heads_kv = H_KV;
                    d[l].head_dim = HD, d[l].dtype = FLASHC_DTYPE_BF16, d[l].causal = 1;
                    memset(&kd[l], 0, sizeof kd[l]);
                    kd[l].cache_seqlens = cl;
                    if (P) { // the pools as (num_pages, P, H_KV, HD); a call's table: its slots' pages, shuffled
                        const int n = B * pps;
                        perm[l] = malloc(sizeof(int32_t) * (size_t)n), bt[l] = malloc(sizeof(int32_t) * (size_t)n);
                        shuffled_iota(perm[l], n);
                        memcpy(bt[l], perm[l], sizeof(int32_t) * (size_t)n); // (group 0: the size query reads it)
                        d[l].block_table = bt[l], d[l].block_table_stride = pps, d[l].page_size = P;
                        d[l].num_pages = (int32_t)(need / 2 / ((size_t)P * H_KV * HD));
                    } else {
                        kd[l].cache_batch_idx = cbi;
                    }
                    flashc_fill_contiguous_strides(&d[l]);
                    ws_size[l] = flashc_kvcache_workspace_size(ctx, &d[l], &kd[l]);
                    ws[l] = ws_size[l] ? pool_alloc(ws_size[l], 0) : NULL;
                    live[l] = 1;
                }
                // call number c (over the layouts that run) reads slots (g * B .. g * B + B - 1), g = c mod
                // the groups of B that fit: each call reads slots the previous one did not (where they fit).
                // A paged call's time includes the host backends' check of every block-table entry it uses.
                const int groups = n_slots / B;
                double *t = malloc(sizeof(double) * (size_t)o.repeats * n_lay);
                double *rb = malloc(sizeof(double) * (size_t)o.repeats * n_lay);
                // the ceiling is sampled between the timed calls, one streaming read of about the
                // same bytes (64 .. 512 MiB) before each, so both see the same load on the cores
                size_t rd_bytes = 2 * bytes < ((size_t)64 << 20) ? (size_t)64 << 20 : 2 * bytes;
                if (rd_bytes > bw_bytes) rd_bytes = bw_bytes;
                flashc_status st = FLASHC_OK;
                int64_t call = 0;
                for (int r = -2; r < o.repeats && st == FLASHC_OK; r++) // 2 warm-up rounds
                    for (int l = 0; l < n_lay && st == FLASHC_OK; l++) {
                        if (!live[l]) continue;
                        const int g = (int)(call++ % groups);
                        if (bt[l]) {
                            const int pps = kv / o.page[l - 1];
                            for (int i = 0; i < B * pps; i++) bt[l][i] = g * B * pps + perm[l][i];
                        } else {
                            for (int b = 0; b < B; b++) cbi[b] = g * B + b;
                        }
                        if (r >= 0) { // a window the previous read did not touch (no L3 hits)
                            const size_t n_win = bw_bytes / rd_bytes;
                            rb[l * o.repeats + r] =
                                measure_bw(0, bw + (size_t)(r * n_lay + l) % n_win * rd_bytes, rd_bytes, o.threads, 1);
                        }
                        double t0 = now_s();
                        st = flashc_fwd_kvcache(ctx, &d[l], &kd[l], q, kp, vp, NULL, NULL, out, lse, ws[l], ws_size[l], NULL);
                        if (r >= 0) t[l * o.repeats + r] = now_s() - t0;
                    }
                if (st != FLASHC_OK) {
                    printf("flashc_fwd_kvcache: %s\n", flashc_ctx_last_error(ctx));
                    return 1;
                }
                double med0 = 0;
                for (int l = 0; l < n_lay; l++) {
                    if (!live[l]) continue;
                    double *tl = t + l * o.repeats, *rl = rb + l * o.repeats;
                    qsort(tl, (size_t)o.repeats, sizeof(double), cmp_double);
                    qsort(rl, (size_t)o.repeats, sizeof(double), cmp_double);
                    read0 = rl[o.repeats / 2];
                    const double med = tl[o.repeats / 2], gbps = 2.0 * (double)bytes / med * 1e-9, load = loadavg1();
                    if (l == 0) med0 = med;
                    const int P = l ? o.page[l - 1] : 0;
                    char lay[16], xc[16];
                    snprintf(lay, sizeof lay, P ? "page %d" : "contig", P);
                    snprintf(xc, sizeof xc, P ? "%.3f" : "", med0 / med);
                    printf("%5d %3d %6d %8s %9.3f %9.3f %9.2f %9.2f %7.1f%% %8s %6.2f\n", B, Sq, kv, lay, med * 1e3,
                           tl[0] * 1e3, gbps, read0, 100.0 * gbps / read0, xc, load);
                    fflush(stdout);
                    if (jf) {
                        char pg[48] = "";
                        if (P) snprintf(pg, sizeof pg, "\"page_size\": %d, \"x_contiguous\": %.4f, ", P, med0 / med);
                        fprintf(jf,
                                "{\"impl\": \"%s\", \"backend\": \"cpu\", \"device\": \"%s\", \"dtype\": \"bf16\", "
                                "\"direction\": \"decode\", \"batch\": %d, \"heads\": %d, \"heads_kv\": %d, \"seqlen_q\": %d, "
                                "\"seqlen_k\": %d, \"head_dim\": %d, \"causal\": true, %s\"ms\": %.4f, \"ms_min\": %.4f, "
                                "\"gbps\": %.3f, \"threads\": %d, \"read_ceiling_gbps\": %.3f, \"pct_of_read\": %.1f, "
                                "\"loadavg\": %.2f}\n",
                                P ? "flashc_paged" : "flashc", device, B, H_Q, H_KV, Sq, kv, HD, pg, med * 1e3, tl[0] * 1e3,
                                gbps, o.threads, read0, 100.0 * gbps / read0, load);
                    }
                }
                for (int l = 0; l < n_lay; l++) free(perm[l]), free(bt[l]), free(ws[l]);
                free(q), free(out), free(lse), free(cl), free(cbi), free(t), free(rb);
            }
    printf("load average (1 min) %.2f at the end\n", loadavg1());
    flashc_ctx_free(ctx);
    if (jf) fclose(jf);
    free(kp), free(vp), free(bw);
    return 0;
}
