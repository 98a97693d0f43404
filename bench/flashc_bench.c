// flashc_bench.c -- checks a flashc backend against the fp64 reference, then times its forward and
// backward on the training shapes of DESIGN.md §3, side by side with the peers measured in the
// same process: on the CPU a naive BLAS attention (OpenBLAS, when built with -DFLASHC_BENCH_BLAS)
// and the fp32 FMA peak of this machine.
//
// What it is not: the GPU comparison with PyTorch SDPA (bench/bench_gpu.py does that) or a test suite
// (tests/ does that). CUDA support here is minimal: the correctness check, and host-clock timing of
// back-to-back calls closed by a synchronizing 4-byte copy.
//
// Build and run:  make run  (or: make build/flashc-bench && build/flashc-bench --help)
//
// Conventions, stated once:
//   FLOPs   forward 4·B·H·Sq·Sk·D, halved for causal when Sq == Sk (FlashAttention-2's accounting,
//           so figures line up with SDPA benchmarks); any other masked shape counts the unmasked
//           (i, j) pairs exactly. Backward = 2.5 × forward. Peers are credited with the same FLOPs.
//   Time    clock_gettime(CLOCK_MONOTONIC); warm-up call(s), then the median of at least --repeats
//           samples (more while the --budget lasts), with min and max beside it. flashc and its
//           peer take their samples in turn, so on a shared machine both see the same load.
//   Memory  CPU: peak extra resident memory of the first call: VmHWM after the call minus VmRSS
//           before it, with VmHWM reset through /proc/self/clear_refs ("5"). Inputs and outputs are
//           written before, so this counts the workspace and anything the call allocates.
//           CUDA: the workspace size the library asks for.
//   JSON    --json FILE writes DESIGN.md §3's lines, one measurement a line, plus the run's
//           1-minute load average at start and end ("load_avg_1m"), since the cores may be shared.
#define _GNU_SOURCE
#include "flashc.h"
#include "flashc_internal.h"
#include "cpu/flashc_cpu.h" // flashc__cpu_isa
#include "bench_util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#ifdef FLASHC_BENCH_BLAS
#include <cblas.h>
#endif

// ------------------------------------------------------------------------------------------------
// options

typedef struct opts {
    flashc_backend backend;
    int dtype;                 // -1 = default for the backend (f32 on host backends, bf16 on cuda)
    int batch, heads, heads_kv, seqlen_q, seqlen_k, head_dim; // 0 = from the suite
    int causal;                // -1 = both, 0, 1
    int fwd, bwd;
    int threads;               // 0 = all online cores
    int repeats;               // minimum timed samples
    double budget_s;           // keep sampling while the samples so far took less than this
    const char *json;
    int peers;                 // -1 = default (on for the cpu backend)
    int check;
    int full, quick;
    uint64_t seed;
} opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: flashc-bench [options]\n"
            "  --backend cpu|cuda|ref|auto   backend to check and time (default auto: cuda if present, else cpu)\n"
            "  --dtype f32|f16|bf16          element type (default f32 on cpu/ref, bf16 on cuda)\n"
            "  --batch N --heads N --heads-kv N --seqlen-q N --seqlen-k N --head-dim N\n"
            "                                one custom shape instead of the suite; unset fields follow the\n"
            "                                suite's rules (heads = 2048/head_dim, batch = tokens/seqlen_q,\n"
            "                                seqlen_k = seqlen_q, head_dim 128)\n"
            "  --causal | --non-causal       only causal / only non-causal (default both)\n"
            "  --fwd-only | --bwd-only       one direction (default both)\n"
            "  --threads N                   CPU threads for flashc and the peers (default all cores)\n"
            "  --repeats N                   minimum timed samples per measurement (default 5, at least 1)\n"
            "  --budget S                    keep sampling up to S seconds per measurement (default 1)\n"
            "  --peers | --no-peers          naive BLAS attention + FMA ceiling (default on for cpu)\n"
            "  --full                        DESIGN.md §3's shapes unscaled (batch·seqlen 16384, seqlen\n"
            "                                512..16384, head_dim 64/128/256); default on cuda\n"
            "  --quick                       a small smoke suite (seqlen 512/1024, head_dim 64)\n"
            "  --no-check                    skip the correctness check (results then say so)\n"
            "  --seed N                      seed of the check's random inputs (default: from the clock)\n"
            "  --json FILE                   write one JSON line per measurement to FILE\n");
}

static int parse_int(const char *flag, const char *s, int lo) {
    char *end;
    errno = 0;
    long x = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || *end || x < lo || x > 1 << 30) {
        fprintf(stderr, "flashc-bench: %s needs an integer >= %d, got '%s'\n", flag, lo, s ? s : "");
        exit(2);
    }
    return (int)x;
}

static void parse_args(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->backend = FLASHC_BACKEND_AUTO;
    o->dtype = -1;
    o->causal = -1;
    o->fwd = o->bwd = 1;
    o->repeats = 5;
    o->budget_s = 1.0;
    o->peers = -1;
    o->check = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define TAKES(name) (!strcmp(a, name) && (i++, 1))
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (TAKES("--backend")) {
            if (!v) v = "";
            if (!strcmp(v, "cpu")) o->backend = FLASHC_BACKEND_CPU;
            else if (!strcmp(v, "cuda")) o->backend = FLASHC_BACKEND_CUDA;
            else if (!strcmp(v, "ref")) o->backend = FLASHC_BACKEND_REF;
            else if (!strcmp(v, "auto")) o->backend = FLASHC_BACKEND_AUTO;
            else { fprintf(stderr, "flashc-bench: --backend takes cpu, cuda, ref or auto, got '%s'\n", v); exit(2); }
        } else if (TAKES("--dtype")) {
            if (!v) v = "";
            if (!strcmp(v, "f32")) o->dtype = FLASHC_DTYPE_F32;
            else if (!strcmp(v, "f16")) o->dtype = FLASHC_DTYPE_F16;
            else if (!strcmp(v, "bf16")) o->dtype = FLASHC_DTYPE_BF16;
            else { fprintf(stderr, "flashc-bench: --dtype takes f32, f16 or bf16, got '%s'\n", v); exit(2); }
        } else if (TAKES("--batch")) o->batch = parse_int(a, v, 1);
        else if (TAKES("--heads")) o->heads = parse_int(a, v, 1);
        else if (TAKES("--heads-kv")) o->heads_kv = parse_int(a, v, 1);
        else if (TAKES("--seqlen-q")) o->seqlen_q = parse_int(a, v, 1);
        else if (TAKES("--seqlen-k")) o->seqlen_k = parse_int(a, v, 1);
        else if (TAKES("--head-dim")) o->head_dim = parse_int(a, v, 1);
        else if (TAKES("--threads")) o->threads = parse_int(a, v, 1);
        else if (TAKES("--repeats")) o->repeats = parse_int(a, v, 1);
        else if (TAKES("--seed")) o->seed = (uint64_t)parse_int(a, v, 0);
        else if (TAKES("--budget")) {
            char *end;
            o->budget_s = v ? strtod(v, &end) : -1;
            if (!v || *end || !(o->budget_s >= 0)) {
                fprintf(stderr, "flashc-bench: --budget takes seconds >= 0\n");
                exit(2);
            }
        } else if (TAKES("--json")) {
            if (!v) { fprintf(stderr, "flashc-bench: --json needs a file name\n"); exit(2); }
            o->json = v;
        } else if (!strcmp(a, "--causal")) o->causal = 1;
        else if (!strcmp(a, "--non-causal")) o->causal = 0;
        else if (!strcmp(a, "--fwd-only")) { o->fwd = 1; o->bwd = 0; }
        else if (!strcmp(a, "--bwd-only")) { o->fwd = 0; o->bwd = 1; }
        else if (!strcmp(a, "--peers")) o->peers = 1;
        else if (!strcmp(a, "--no-peers")) o->peers = 0;
        else if (!strcmp(a, "--no-check")) o->check = 0;
        else if (!strcmp(a, "--full")) o->full = 1;
        else if (!strcmp(a, "--quick")) o->quick = 1;
        else {
            fprintf(stderr, "flashc-bench: unknown option '%s'\n", a);
            usage(stderr);
            exit(2);
        }
#undef TAKES
    }
}

// ------------------------------------------------------------------------------------------------
// small utilities: clock, machine facts, memory counters


// First GPU's model as the NVIDIA driver reports it; the bench does not link cudart itself.
// (The first directory listed, which is the CUDA device 0 unless CUDA_VISIBLE_DEVICES reorders them.)
static void gpu_name(char *out, size_t cap) {
    out[0] = 0;
    DIR *dir = opendir("/proc/driver/nvidia/gpus");
    struct dirent *e;
    while (dir && !out[0] && (e = readdir(dir))) {
        if (e->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "/proc/driver/nvidia/gpus/%s/information", e->d_name);
        read_keyed_line(path, "Model", out, cap);
    }
    if (dir) closedir(dir);
    if (!out[0]) snprintf(out, cap, "NVIDIA GPU");
}


// VmRSS / VmHWM of this process in bytes (-1 when /proc is not there).
static int64_t proc_status_kib(const char *key) {
    char v[128];
    read_keyed_line("/proc/self/status", key, v, sizeof v);
    return v[0] ? (int64_t)atoll(v) * 1024 : -1;
}

// Reset VmHWM to the current RSS (Linux >= 4.0). Returns 0 on success.
static int reset_hwm(void) {
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd < 0) return -1;
    int ok = write(fd, "5", 1) == 1;
    close(fd);
    return ok ? 0 : -1;
}

typedef struct mem_probe {
    int64_t rss0;
    int ok;
} mem_probe;

static mem_probe mem_begin(void) {
    mem_probe m = {0, 0};
    if (reset_hwm() == 0) {
        m.rss0 = proc_status_kib("VmRSS");
        m.ok = m.rss0 >= 0;
    }
    return m;
}

// Peak extra MiB since mem_begin, or -1 when it could not be measured.
static double mem_end(mem_probe m) {
    if (!m.ok) return -1;
    int64_t hwm = proc_status_kib("VmHWM");
    if (hwm < 0) return -1;
    return (double)(hwm > m.rss0 ? hwm - m.rss0 : 0) / (1024.0 * 1024.0);
}

// Fresh, untouched pages straight from the kernel, so the first touch shows in VmHWM (malloc may
// hand back pages that are already resident).
static void *pages_alloc(size_t bytes) {
    if (!bytes) bytes = 1;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void pages_free(void *p, size_t bytes) {
    if (p) munmap(p, bytes ? bytes : 1);
}

static uint64_t rng_next(uint64_t *s) { // splitmix64
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rng_uniform(uint64_t *s, float lo, float hi) { // [lo, hi)
    return lo + (hi - lo) * (float)((double)(rng_next(s) >> 40) * 0x1.0p-24);
}

static const char *dtype_name(flashc_dtype t) {
    return t == FLASHC_DTYPE_F16 ? "f16" : t == FLASHC_DTYPE_BF16 ? "bf16" : t == FLASHC_DTYPE_E4M3 ? "e4m3" : "f32";
}

static const char *backend_name(flashc_backend b) {
    return b == FLASHC_BACKEND_CPU    ? "cpu"
           : b == FLASHC_BACKEND_CUDA ? "cuda"
           : b == FLASHC_BACKEND_REF  ? "ref"
                                      : "auto";
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}


// ------------------------------------------------------------------------------------------------
// shapes and FLOPs

typedef struct shape {
    int B, H, H_kv, Sq, Sk, D, causal;
} shape;

// Unmasked (i, j) pairs of one (batch, head) under the bottom-right-aligned causal mask.
static double causal_pairs(int Sq, int Sk) {
    double n = 0;
    for (int64_t i = 0; i < Sq; i++) {
        int64_t hi = i + Sk - Sq + 1; // query i sees keys [0, hi)
        n += (double)(hi < 0 ? 0 : hi > Sk ? Sk : hi);
    }
    return n;
}

static double flops_fwd(const shape *s) {
    double pairs = (double)s->Sq * s->Sk;
    if (s->causal) pairs = s->Sq == s->Sk ? 0.5 * pairs : causal_pairs(s->Sq, s->Sk);
    return 4.0 * s->B * s->H * pairs * s->D;
}

static void fill_desc(flashc_attn_desc *d, const shape *s, flashc_dtype t) {
    memset(d, 0, sizeof *d);
    d->batch = s->B;
    d->seqlen_q = s->Sq;
    d->seqlen_k = s->Sk;
    d->heads = s->H;
    d->heads_kv = s->H_kv;
    d->head_dim = s->D;
    d->dtype = t;
    d->causal = s->causal;
    flashc_fill_contiguous_strides(d);
}

// ------------------------------------------------------------------------------------------------
// tensors in the backend's memory (host pages for host backends, ops->ws_alloc for CUDA)

typedef struct buf {
    void *p;
    size_t bytes;
} buf;

static int dev_alloc(flashc_ctx *ctx, buf *b, size_t bytes) {
    b->bytes = bytes;
    b->p = ctx->ops->ws_alloc ? ctx->ops->ws_alloc(ctx, bytes ? bytes : 256) : pages_alloc(bytes);
    return b->p ? 0 : -1;
}

static void dev_free(flashc_ctx *ctx, buf *b) {
    if (!b->p) return;
    if (ctx->ops->ws_free) ctx->ops->ws_free(ctx, b->p);
    else pages_free(b->p, b->bytes);
    b->p = NULL;
}

static int dev_copy(flashc_ctx *ctx, void *dst, const void *src, size_t bytes, int to_backend) {
    if (ctx->ops->copy) return ctx->ops->copy(ctx, dst, src, bytes, to_backend) == FLASHC_OK ? 0 : -1;
    memcpy(dst, src, bytes);
    return 0;
}

// Fill a backend buffer of n elements with uniform values in [lo, hi), rounded to dtype t; if
// rounded != NULL also return the rounded values as floats.
static int dev_fill_random(flashc_ctx *ctx, buf *b, int64_t n, flashc_dtype t, float lo, float hi, uint64_t *rng,
                           float *rounded) {
    size_t es = flashc__dtype_size(t);
    void *h = ctx->ops->copy ? malloc((size_t)n * es) : b->p;
    if (!h) return -1;
    for (int64_t i = 0; i < n; i++) {
        flashc__store(h, i, t, rng_uniform(rng, lo, hi));
        if (rounded) rounded[i] = flashc__load(h, i, t);
    }
    int rc = 0;
    if (ctx->ops->copy) {
        rc = dev_copy(ctx, b->p, h, (size_t)n * es, 1);
        free(h);
    }
    return rc;
}

// Poison: all bits set is NaN in f32, f16 and bf16, so any element a call fails to write shows.
static int dev_poison(flashc_ctx *ctx, buf *b) {
    if (!ctx->ops->copy) {
        memset(b->p, 0xff, b->bytes);
        return 0;
    }
    void *h = malloc(b->bytes);
    if (!h) return -1;
    memset(h, 0xff, b->bytes);
    int rc = dev_copy(ctx, b->p, h, b->bytes, 1);
    free(h);
    return rc;
}

// Wait for the backend: a 4-byte synchronous copy drains the legacy default stream the calls ran on.
static void dev_sync(flashc_ctx *ctx, const buf *b) {
    if (!ctx->ops->copy) return;
    uint32_t x;
    dev_copy(ctx, &x, b->p, 4, 0);
}

// ------------------------------------------------------------------------------------------------
// correctness check against the reference backend
//
// The reference (FLASHC_BACKEND_REF) computes in fp64 from the same rounded inputs: for f16/bf16
// runs it gets those inputs converted exactly to f32, so its only rounding is the final one to f32.
// Error measure per tensor: max|x - ref| / (1 + max|ref|).
// Tolerances:
//   f32: forward 1e-5 (DESIGN.md §2's "1e-5·(1 + |ref|)"-ish, here scaled per tensor, not per
//        element); backward 4e-5, since dq/dk/dv come
//        through three chained fp32 reductions (dP = dO·V, D_i = rowsum(dO∘O), dS·K) of up to a few
//        hundred terms each.
//   f16/bf16: NOT FlashAttention-2's 2× rule (that needs a naive implementation in the same
//        precision; tests/ applies it). Instead a bound from the format's epsilon
//        (eps = 2^-7 bf16, 2^-10 f16): the output is rounded once (≤ eps/2 relative) and a kernel
//        may round P to the input type before P·V (≤ eps/2 · max|V| ≤ eps/2 with |V| < 1), so
//        forward out/lse allow 2·eps. Gradients may also round dS before two more accumulations
//        over up to 2·Sk terms with random signs (√262 ≈ 16 ⇒ ≈ 8·eps/2); they allow 8·eps.

typedef struct check_err {
    double err, tol;
} check_err;

static check_err compare(const float *x, const float *ref, int64_t n, double tol) {
    double maxref = 0, err = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(ref[i]) && fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    for (int64_t i = 0; i < n; i++) {
        double e = (isinf(ref[i]) && x[i] == ref[i]) ? 0 : fabs((double)x[i] - ref[i]);
        if (isnan(e)) { // an unwritten (poisoned) element, or a NaN result: fails whatever the tolerance
            err = NAN;
            break;
        }
        if (e > err) err = e;
    }
    check_err r = {err / (1 + maxref), tol};
    return r;
}

typedef struct check_case {
    shape s;
    flashc_dtype t;
    int bwd; // also check the backward
} check_case;

// Download n elements of dtype t and convert to float.
static int dev_read_floats(flashc_ctx *ctx, const buf *b, int64_t n, flashc_dtype t, float *out) {
    size_t es = flashc__dtype_size(t);
    void *h = malloc((size_t)n * es);
    if (!h) return -1;
    int rc = dev_copy(ctx, h, b->p, (size_t)n * es, 0);
    for (int64_t i = 0; i < n && !rc; i++) out[i] = flashc__load(h, i, t);
    free(h);
    return rc;
}

#ifdef FLASHC_BENCH_BLAS
static void naive_blas_fwd(const shape *s, float scale, const float *q, const float *k, const float *v, float *o,
                           float **S_bufs, int nth);
#endif

// Runs one small case on ctx and on the reference; prints one line per tensor. Returns 0 if all
// pass, 1 on a failed comparison, 2 when the backend does not support the case (not a failure).
static int check_one(flashc_ctx *ctx, flashc_ctx *ref, const check_case *c, uint64_t *rng, int check_naive, int nth) {
    const shape *s = &c->s;
    flashc_dtype t = c->t;
    flashc_attn_desc d, dr;
    fill_desc(&d, s, t);
    fill_desc(&dr, s, FLASHC_DTYPE_F32);
    if (flashc_supports(ctx, &d) != FLASHC_OK) {
        printf("  check B=%d H=%d/%d Sq=%d Sk=%d D=%d causal=%d %s: unsupported by this backend (%s)\n", s->B, s->H,
               s->H_kv, s->Sq, s->Sk, s->D, s->causal, dtype_name(t), flashc_ctx_last_error(ctx));
        return 2;
    }
    int64_t nq = (int64_t)s->B * s->Sq * s->H * s->D, nk = (int64_t)s->B * s->Sk * s->H_kv * s->D;
    int64_t nl = (int64_t)s->B * s->H * s->Sq;
    size_t es = flashc__dtype_size(t);
    enum { Q, K, V, O, DO, DQ, DK, DV, LSE, NBUF };
    buf b[NBUF] = {{0}};
    int64_t n_of[NBUF] = {nq, nk, nk, nq, nq, nq, nk, nk, nl};
    float *h[NBUF], *r[NBUF]; // host: rounded inputs / backend results, and reference results
    int fail = 0, rc = 0;
    for (int i = 0; i < NBUF; i++) {
        h[i] = malloc((size_t)n_of[i] * sizeof(float));
        r[i] = malloc((size_t)n_of[i] * sizeof(float));
        if (!h[i] || !r[i] || dev_alloc(ctx, &b[i], (size_t)n_of[i] * (i == LSE ? 4 : es))) rc = -1;
    }
    if (rc) goto out;
    // q, k in [-2, 2) give scores with std ≈ 1.3, so softmax rows are neither flat nor one-hot.
    rc |= dev_fill_random(ctx, &b[Q], nq, t, -2, 2, rng, h[Q]);
    rc |= dev_fill_random(ctx, &b[K], nk, t, -2, 2, rng, h[K]);
    rc |= dev_fill_random(ctx, &b[V], nk, t, -1, 1, rng, h[V]);
    rc |= dev_fill_random(ctx, &b[DO], nq, t, -1, 1, rng, h[DO]);
    for (int i = O; i < NBUF; i++)
        if (i != DO) rc |= dev_poison(ctx, &b[i]);
    if (rc) goto out;

    const double eps = t == FLASHC_DTYPE_BF16 ? 0x1p-7 : t == FLASHC_DTYPE_F16 ? 0x1p-10 : 0;
    const double tol_fwd = t == FLASHC_DTYPE_F32 ? 1e-5 : 2 * eps;
    const double tol_bwd = t == FLASHC_DTYPE_F32 ? 4e-5 : 8 * eps;
    printf("  check B=%d H=%d/%d Sq=%d Sk=%d D=%d causal=%d %s:", s->B, s->H, s->H_kv, s->Sq, s->Sk, s->D, s->causal,
           dtype_name(t));

    // reference forward and backward, all fp32 in and out, fp64 inside
    for (int i = O; i < NBUF; i++) memset(r[i], 0xff, (size_t)n_of[i] * sizeof(float));
    flashc_status st = flashc_fwd(ref, &dr, h[Q], h[K], h[V], r[O], r[LSE], NULL, 0, NULL);
    if (st == FLASHC_OK)
        st = flashc_bwd(ref, &dr, h[Q], h[K], h[V], r[O], r[LSE], h[DO], r[DQ], r[DK], r[DV], NULL, 0, NULL);
    if (st != FLASHC_OK) {
        printf(" reference failed: %s: %s\n", flashc_status_string(st), flashc_ctx_last_error(ref));
        rc = -1;
        goto out;
    }

    st = flashc_fwd(ctx, &d, b[Q].p, b[K].p, b[V].p, b[O].p, (float *)b[LSE].p, NULL, 0, NULL);
    if (st != FLASHC_OK) {
        printf(" forward failed: %s: %s\n", flashc_status_string(st), flashc_ctx_last_error(ctx));
        rc = -1;
        goto out;
    }
    if (c->bwd) {
        st = flashc_bwd(ctx, &d, b[Q].p, b[K].p, b[V].p, b[O].p, (const float *)b[LSE].p, b[DO].p, b[DQ].p, b[DK].p,
                        b[DV].p, NULL, 0, NULL);
        if (st != FLASHC_OK) {
            printf(" backward failed: %s: %s\n", flashc_status_string(st), flashc_ctx_last_error(ctx));
            rc = -1;
            goto out;
        }
    }
    static const char *names[NBUF] = {"q", "k", "v", "out", "do", "dq", "dk", "dv", "lse"};
    int outs[] = {O, LSE, DQ, DK, DV};
    for (int u = 0; u < (c->bwd ? 5 : 2); u++) {
        int i = outs[u];
        if (dev_read_floats(ctx, &b[i], n_of[i], i == LSE ? FLASHC_DTYPE_F32 : t, h[i])) {
            rc = -1;
            goto out;
        }
        check_err e = compare(h[i], r[i], n_of[i], u < 2 ? tol_fwd : tol_bwd);
        int ok = e.err <= e.tol;
        fail |= !ok;
        printf(" %s %.1e%s", names[i], e.err, ok ? "" : " (FAIL)");
    }
    printf("  [tol fwd %.0e, bwd %.0e] %s\n", tol_fwd, tol_bwd, fail ? "FAIL" : "ok");

#ifdef FLASHC_BENCH_BLAS
    // The naive peer is checked like any other implementation before it is timed.
    if (check_naive && t == FLASHC_DTYPE_F32) {
        float *S_bufs[64];
        int nb = nth < 64 ? nth : 64;
        for (int i = 0; i < nb; i++) S_bufs[i] = malloc((size_t)s->Sq * s->Sk * sizeof(float));
        float *on = malloc((size_t)nq * sizeof(float));
        int okmem = on != NULL;
        for (int i = 0; i < nb; i++) okmem &= S_bufs[i] != NULL;
        if (okmem) {
            naive_blas_fwd(s, 1.0f / sqrtf((float)s->D), h[Q], h[K], h[V], on, S_bufs, nb);
            check_err e = compare(on, r[O], nq, tol_fwd);
            printf("  check naive_blas (same case): out %.1e  [tol %.0e] %s\n", e.err, e.tol,
                   e.err <= e.tol ? "ok" : "FAIL");
            fail |= !(e.err <= e.tol);
        }
        free(on);
        for (int i = 0; i < nb; i++) free(S_bufs[i]);
    }
#else
    (void)check_naive;
    (void)nth;
#endif

out:
    if (rc) fail = 1;
    for (int i = 0; i < NBUF; i++) {
        dev_free(ctx, &b[i]);
        free(h[i]);
        free(r[i]);
    }
    return fail;
}

// ------------------------------------------------------------------------------------------------
// timing

typedef struct stats {
    double med_ms, min_ms, max_ms;
    int n;           // timed samples
    int inner;       // calls per sample
    double mem_mib;  // peak extra memory of the first call, -1 if unknown
    int ok;
} stats;

typedef int (*call_fn)(void *arg); // one call of the measured operation; 0 on success

#define MAX_SAMPLES 200

// One timed implementation: its call, and what to wait on after it (CUDA), if anything.
typedef struct timed {
    call_fn fn;
    void *arg;
    void (*sync)(void *);
    void *sync_arg;
    int measure_mem;
} timed;

// Times n implementations of the same operation. Each gets a warm-up call (the one whose memory is
// measured, when asked), a second one where that is cheap, and then samples of `inner`
// back-to-back calls closed by its sync (inner > 1 only for calls under 1 ms, too short to time
// alone). The samples are taken round-robin, one of each per round, so on a shared machine every
// implementation sees the same load; rounds go on until each has --repeats samples and the
// --budget has been spent on each. Returns 0, or -1 if a call failed.
static int measure_n(int n, const timed *t, const opts *o, stats *st) {
    double *samples = malloc((size_t)n * MAX_SAMPLES * sizeof(double)), *spent = calloc((size_t)n, sizeof(double));
    int rc = -1;
    if (!samples || !spent) goto out;
    for (int i = 0; i < n; i++) {
        st[i] = (stats){0, 0, 0, 0, 1, -1, 0};
        mem_probe mp = {0, 0};
        if (t[i].measure_mem) mp = mem_begin();
        double t0 = now_s();
        if (t[i].fn(t[i].arg)) goto out;
        if (t[i].sync) t[i].sync(t[i].sync_arg);
        double t1 = now_s() - t0;
        if (t[i].measure_mem) st[i].mem_mib = mem_end(mp);
        if (t1 < 0.25) { // thread pools, caches and GPU clocks settle
            t0 = now_s();
            if (t[i].fn(t[i].arg)) goto out;
            if (t[i].sync) t[i].sync(t[i].sync_arg);
            t1 = now_s() - t0;
        }
        if (t1 < 1e-3) st[i].inner = (int)fmin(1000, ceil(1e-3 / fmax(t1, 1e-7)));
    }
    for (;;) {
        int more = 0;
        for (int i = 0; i < n; i++) more |= st[i].n < o->repeats || spent[i] < o->budget_s;
        if (!more || st[0].n >= MAX_SAMPLES) break;
        for (int i = 0; i < n; i++) {
            double t0 = now_s();
            for (int r = 0; r < st[i].inner; r++)
                if (t[i].fn(t[i].arg)) goto out;
            if (t[i].sync) t[i].sync(t[i].sync_arg);
            double dt = now_s() - t0;
            spent[i] += dt;
            samples[i * MAX_SAMPLES + st[i].n++] = dt / st[i].inner;
        }
    }
    for (int i = 0; i < n; i++) {
        double *x = samples + i * MAX_SAMPLES;
        int m = st[i].n;
        qsort(x, (size_t)m, sizeof(double), cmp_double);
        st[i].med_ms = 1e3 * (m % 2 ? x[m / 2] : 0.5 * (x[m / 2 - 1] + x[m / 2]));
        st[i].min_ms = 1e3 * x[0];
        st[i].max_ms = 1e3 * x[m - 1];
        st[i].ok = 1;
    }
    rc = 0;
out:
    free(samples);
    free(spent);
    return rc;
}

typedef struct flashc_run {
    flashc_ctx *ctx;
    flashc_attn_desc d;
    buf q, k, v, o, lse, dout, dq, dk, dv, ws;
    int bwd;
} flashc_run;

static int call_flashc(void *arg) {
    flashc_run *r = arg;
    flashc_status st;
    if (!r->bwd)
        st = flashc_fwd(r->ctx, &r->d, r->q.p, r->k.p, r->v.p, r->o.p, (float *)r->lse.p, r->ws.p, r->ws.bytes, NULL);
    else
        st = flashc_bwd(r->ctx, &r->d, r->q.p, r->k.p, r->v.p, r->o.p, (const float *)r->lse.p, r->dout.p, r->dq.p,
                        r->dk.p, r->dv.p, r->ws.p, r->ws.bytes, NULL);
    if (st != FLASHC_OK) {
        fprintf(stderr, "\nflashc-bench: %s failed: %s: %s\n", r->bwd ? "flashc_bwd" : "flashc_fwd",
                flashc_status_string(st), flashc_ctx_last_error(r->ctx));
        return -1;
    }
    return 0;
}

static void sync_flashc(void *arg) {
    flashc_run *r = arg;
    dev_sync(r->ctx, &r->o);
}

// ------------------------------------------------------------------------------------------------
// peer: naive attention on BLAS (fp32 forward)
//
// Per (b, h): S = scale · Q K^T (cblas_sgemm), mask, row softmax, O = P V (cblas_sgemm): the
// textbook O(Sq·Sk) memory algorithm. Causal still computes the full S, as a naive code would.
// It runs on the same number of threads as flashc; each thread owns one S buffer (Sq·Sk floats).

#ifdef FLASHC_BENCH_BLAS

// e^x for x <= 0 (a softmax argument after subtracting the row max): Cody-Waite reduction
// x = n·ln2 + r, |r| <= ln2/2, and a degree-6 Taylor polynomial (error r^7/7! <= 1.2e-7).
// Written without calls or branches so the compiler vectorizes the row loops.
static inline float exp_nonpos(float x) {
    x = x < -87.0f ? -87.0f : x; // e^-87 ≈ 1.6e-38, still a normal float
    // round to nearest by adding and subtracting 1.5·2^23 (plain float ops, so it vectorizes)
    float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145752f - n * 1.42860677e-6f; // ln2 split into a 17-bit head and a tail
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    int32_t e = ((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &e, 4);
    return p * two_n;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
static void softmax_row(float *s, int64_t n, int64_t lo, int64_t hi) {
    // s[j] for j outside [lo, hi) is masked; a row that sees no key gets P = 0
    if (hi <= lo) {
        for (int64_t j = 0; j < n; j++) s[j] = 0;
        return;
    }
    for (int64_t j = 0; j < lo; j++) s[j] = 0;
    for (int64_t j = hi; j < n; j++) s[j] = 0;
    float *x = s + lo;
    int64_t m = hi - lo;
    float mx[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int64_t j = 0;
    for (; j + 8 <= m; j += 8)
        for (int u = 0; u < 8; u++) mx[u] = x[j + u] > mx[u] ? x[j + u] : mx[u];
    for (; j < m; j++) mx[0] = x[j] > mx[0] ? x[j] : mx[0];
    float mrow = mx[0];
    for (int u = 1; u < 8; u++) mrow = mx[u] > mrow ? mx[u] : mrow;
    for (j = 0; j < m; j++) x[j] = exp_nonpos(x[j] - mrow);
    float sum[8] = {0}; // 8 partial sums: a vector's worth, so the adds need no reassociation
    for (j = 0; j + 8 <= m; j += 8)
        for (int u = 0; u < 8; u++) sum[u] += x[j + u];
    for (; j < m; j++) sum[0] += x[j];
    float l = 0;
    for (int u = 0; u < 8; u++) l += sum[u];
    float inv = 1.0f / l;
    for (j = 0; j < m; j++) x[j] *= inv;
}

typedef struct naive_job {
    const shape *s;
    float scale;
    const float *q, *k, *v;
    float *o;
    float *S;
    int tid, nth;
    int row_chunks, rows_per_chunk;
} naive_job;

// Work unit u is rows [c·rows_per_chunk, (c+1)·rows_per_chunk) of pair (b, h) = u / row_chunks,
// c = u % row_chunks.
static void *naive_worker(void *arg) {
    naive_job *j = arg;
    const shape *s = j->s;
    int group = s->H / s->H_kv;
    int64_t ldq = (int64_t)s->H * s->D, ldk = (int64_t)s->H_kv * s->D;
    int64_t units = (int64_t)s->B * s->H * j->row_chunks;
    for (int64_t u = j->tid; u < units; u += j->nth) {
        int64_t bh = u / j->row_chunks, i0 = (u % j->row_chunks) * j->rows_per_chunk;
        int64_t i1 = i0 + j->rows_per_chunk < s->Sq ? i0 + j->rows_per_chunk : s->Sq;
        if (i0 >= i1) continue;
        int b = (int)(bh / s->H), h = (int)(bh % s->H), hk = h / group;
        const float *Q = j->q + ((int64_t)b * s->Sq + i0) * ldq + (int64_t)h * s->D;
        const float *K = j->k + (int64_t)b * s->Sk * ldk + (int64_t)hk * s->D;
        const float *V = j->v + (int64_t)b * s->Sk * ldk + (int64_t)hk * s->D;
        float *O = j->o + ((int64_t)b * s->Sq + i0) * ldq + (int64_t)h * s->D;
        int m = (int)(i1 - i0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, s->Sk, s->D, j->scale, Q, (int)ldq, K, (int)ldk, 0.0f,
                    j->S, s->Sk);
        for (int64_t i = i0; i < i1; i++) {
            int64_t hi = s->Sk;
            if (s->causal) {
                hi = i + s->Sk - s->Sq + 1;
                hi = hi < 0 ? 0 : hi > s->Sk ? s->Sk : hi;
            }
            softmax_row(j->S + (i - i0) * s->Sk, s->Sk, 0, hi);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, s->D, s->Sk, 1.0f, j->S, s->Sk, V, (int)ldk, 0.0f, O,
                    (int)ldq);
    }
    return NULL;
}

// q, k, v, o: fp32, contiguous (B, S, H or H_kv, D). S_bufs: nth buffers of Sq·Sk floats (each
// thread uses at most that). The (b, h) pairs, split into row chunks when there are fewer pairs
// than threads, are dealt out to nth threads that each call single-threaded OpenBLAS, OpenBLAS'
// own advice for a threaded caller (and its threads then never spin beside flashc's).
static void naive_blas_fwd(const shape *s, float scale, const float *q, const float *k, const float *v, float *o,
                           float **S_bufs, int nth) {
    if (nth > 64) nth = 64;
    int64_t pairs = (int64_t)s->B * s->H;
    int row_chunks = pairs >= nth ? 1 : (int)((nth + pairs - 1) / pairs);
    int rows_per_chunk = (s->Sq + row_chunks - 1) / row_chunks;
    openblas_set_num_threads(1);
    naive_job jobs[64];
    pthread_t th[64];
    for (int t = 0; t < nth; t++)
        jobs[t] = (naive_job){s, scale, q, k, v, o, S_bufs[t], t, nth, row_chunks, rows_per_chunk};
    int started[64] = {0};
    for (int t = 1; t < nth; t++) started[t] = pthread_create(&th[t], NULL, naive_worker, &jobs[t]) == 0;
    naive_worker(&jobs[0]);
    for (int t = 1; t < nth; t++) {
        if (started[t]) pthread_join(th[t], NULL);
        else naive_worker(&jobs[t]); // could not start a thread: do its share here
    }
}

typedef struct naive_run {
    const shape *s;
    const float *q, *k, *v;
    float *wq, *wk, *wv; // f16 / bf16 inputs widened (NULL for fp32 ones)
    float *o;
    float *S[64];
    int nth;
} naive_run;

static int call_naive(void *arg) {
    naive_run *r = arg;
    naive_blas_fwd(r->s, 1.0f / sqrtf((float)r->s->D), r->q, r->k, r->v, r->o, r->S, r->nth);
    return 0;
}
#endif // FLASHC_BENCH_BLAS

// ------------------------------------------------------------------------------------------------
// ceiling: fp32 FMA peak, all threads at once
//
// Each thread runs independent chains of vector FMAs (more chains than latency × issue width: 12
// ymm chains cover 2 pipes × 4-5 cycles, 16 zmm chains likewise), so the loop is bound by FMA
// throughput only. GFLOP/s = 2 · lanes · chains · iterations · threads / wall time; best of 3.

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) static float fma_loop_avx2(int64_t iters) {
    __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(1.0f), a1 = _mm256_set1_ps(1.1f), a2 = _mm256_set1_ps(1.2f), a3 = _mm256_set1_ps(1.3f);
    __m256 a4 = _mm256_set1_ps(1.4f), a5 = _mm256_set1_ps(1.5f), a6 = _mm256_set1_ps(1.6f), a7 = _mm256_set1_ps(1.7f);
    __m256 a8 = _mm256_set1_ps(1.8f), a9 = _mm256_set1_ps(1.9f), a10 = _mm256_set1_ps(2.0f), a11 = _mm256_set1_ps(2.1f);
    for (int64_t i = 0; i < iters; i++) {
        a0 = _mm256_fmadd_ps(a0, b, c); a1 = _mm256_fmadd_ps(a1, b, c); a2 = _mm256_fmadd_ps(a2, b, c);
        a3 = _mm256_fmadd_ps(a3, b, c); a4 = _mm256_fmadd_ps(a4, b, c); a5 = _mm256_fmadd_ps(a5, b, c);
        a6 = _mm256_fmadd_ps(a6, b, c); a7 = _mm256_fmadd_ps(a7, b, c); a8 = _mm256_fmadd_ps(a8, b, c);
        a9 = _mm256_fmadd_ps(a9, b, c); a10 = _mm256_fmadd_ps(a10, b, c); a11 = _mm256_fmadd_ps(a11, b, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}

__attribute__((target("avx512f"))) static float fma_loop_avx512(int64_t iters) {
    __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    __m512 a[16];
    for (int u = 0; u < 16; u++) a[u] = _mm512_set1_ps(1.0f + 0.1f * (float)u);
    for (int64_t i = 0; i < iters; i++) {
        a[0] = _mm512_fmadd_ps(a[0], b, c); a[1] = _mm512_fmadd_ps(a[1], b, c);
        a[2] = _mm512_fmadd_ps(a[2], b, c); a[3] = _mm512_fmadd_ps(a[3], b, c);
        a[4] = _mm512_fmadd_ps(a[4], b, c); a[5] = _mm512_fmadd_ps(a[5], b, c);
        a[6] = _mm512_fmadd_ps(a[6], b, c); a[7] = _mm512_fmadd_ps(a[7], b, c);
        a[8] = _mm512_fmadd_ps(a[8], b, c); a[9] = _mm512_fmadd_ps(a[9], b, c);
        a[10] = _mm512_fmadd_ps(a[10], b, c); a[11] = _mm512_fmadd_ps(a[11], b, c);
        a[12] = _mm512_fmadd_ps(a[12], b, c); a[13] = _mm512_fmadd_ps(a[13], b, c);
        a[14] = _mm512_fmadd_ps(a[14], b, c); a[15] = _mm512_fmadd_ps(a[15], b, c);
    }
    __m512 s = a[0];
    for (int u = 1; u < 16; u++) s = _mm512_add_ps(s, a[u]);
    return _mm512_reduce_add_ps(s);
}

// The bf16 ceiling (AVX-512 BF16), for bf16 runs: 16 chains of vdpbf16ps, each instruction 16 lanes
// x 2 multiply-adds, the products flashc's bf16 kernels use where the CPU has them.
__attribute__((target("avx512f,avx512bf16"))) static float dot_loop_avx512bf16(int64_t iters) {
    const __m512bh b = (__m512bh)_mm512_set1_epi32(0x3f803f80), c = (__m512bh)_mm512_set1_epi32(0x33d633d6);
    __m512 a[16];
    for (int u = 0; u < 16; u++) a[u] = _mm512_set1_ps(1.0f + 0.1f * (float)u);
    for (int64_t i = 0; i < iters; i++)
        for (int u = 0; u < 16; u++) a[u] = _mm512_dpbf16_ps(a[u], b, c);
    __m512 s = a[0];
    for (int u = 1; u < 16; u++) s = _mm512_add_ps(s, a[u]);
    return _mm512_reduce_add_ps(s);
}

// The AMX ceiling, for bf16 runs on the amx kernels: four 16 x 16 fp32 tiles each taking a 16 x 32
// by 32 x 16 bf16 product (TDPBF16PS, 16 x 16 x 32 multiply-adds) per iteration, the instruction
// flashc's AMX kernels run their products on. (The library has asked Linux for the tile state.)
__attribute__((target("amx-tile,amx-bf16"))) static float amx_loop(int64_t iters) {
    const flashc_amx_cfg c = flashc__amx_cfg();
    static const uint16_t one[16 * 32] = {0}; // (zeros: the tiles do not look at the values)
    float out[16 * 16];
    _tile_loadconfig(&c);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, one, 64);
    _tile_loadd(5, one, 64);
    _tile_loadd(6, one, 64);
    _tile_loadd(7, one, 64);
    for (int64_t i = 0; i < iters; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    _tile_release();
    return out[0];
}
#endif

// Portable fallback: 8 independent scalar multiply-add chains (counted as 2 flops each).
static float fma_loop_scalar(int64_t iters) {
    float a[8] = {1.0f, 1.1f, 1.2f, 1.3f, 1.4f, 1.5f, 1.6f, 1.7f};
    volatile float bv = 0.999999f, cv = 1e-7f;
    float b = bv, c = cv;
    for (int64_t i = 0; i < iters; i++)
        for (int u = 0; u < 8; u++) a[u] = a[u] * b + c;
    return a[0] + a[7];
}

typedef struct fma_job {
    int isa; // 0 scalar, 1 avx2, 2 avx512, 3 avx512 bf16 dot products, 4 amx bf16 tiles
    int64_t iters;
    pthread_barrier_t *bar;
    volatile float sink;
} fma_job;

static void *fma_worker(void *arg) {
    fma_job *j = arg;
    pthread_barrier_wait(j->bar);
#if defined(__x86_64__) && defined(__GNUC__)
    if (j->isa == 4) j->sink = amx_loop(j->iters);
    else if (j->isa == 3) j->sink = dot_loop_avx512bf16(j->iters);
    else if (j->isa == 2) j->sink = fma_loop_avx512(j->iters);
    else if (j->isa == 1) j->sink = fma_loop_avx2(j->iters);
    else
#endif
        j->sink = fma_loop_scalar(j->iters);
    return NULL;
}

static double fma_flops_per_iter(int isa) {
    return isa == 4 ? 4.0 * 2 * 16 * 16 * 32 : isa == 3 ? 4.0 * 16 * 16 : isa == 2 ? 2.0 * 16 * 16 : isa == 1 ? 2.0 * 8 * 12 : 2.0 * 8;
}

// One timed run of the FMA loop on nth threads; returns GFLOP/s.
static double fma_run(int isa, int nth, int64_t iters) {
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nth);
    fma_job jobs[64];
    pthread_t th[64];
    for (int t = 0; t < nth; t++) jobs[t] = (fma_job){isa, iters, &bar, 0};
    int started = 1;
    for (int t = 1; t < nth; t++) {
        if (pthread_create(&th[t], NULL, fma_worker, &jobs[t])) break;
        started++;
    }
    if (started < nth) { // cannot run on all threads: no ceiling rather than a wrong one
        pthread_barrier_destroy(&bar);
        return -1;
    }
    double t0 = now_s();
    fma_worker(&jobs[0]); // the barrier releases every thread at once; t0 is taken just before
    for (int t = 1; t < nth; t++) pthread_join(th[t], NULL);
    double dt = now_s() - t0;
    pthread_barrier_destroy(&bar);
    return fma_flops_per_iter(isa) * (double)iters * nth / dt * 1e-9;
}

typedef struct fma_ceiling {
    double gflops;
    const char *isa;
} fma_ceiling;

// dot = 0: the fp32 FMA ceiling (the best of the vector widths this CPU has); dot = 1: the bf16
// dot-product ceiling (vdpbf16ps, which flashc's bf16 products use where the CPU has AVX-512 BF16),
// gflops 0 where there is none; dot = 2: the AMX tile ceiling (only asked for on the amx kernels)
static fma_ceiling measure_fma(int nth, int dot) {
    if (nth > 64) nth = 64;
    int isas[4], n = 0;
    isas[n++] = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (!dot && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) isas[n++] = 1;
    if (!dot && __builtin_cpu_supports("avx512f")) isas[n++] = 2;
    if (dot == 1 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16")) isas[n++] = 3;
    if (dot == 2) isas[n++] = 4;
#endif
    if (dot && n == 1) return (fma_ceiling){0, "none"};
    static const char *isa_names[5] = {"scalar", "avx2+fma", "avx512f", "avx512bf16 dot", "amx bf16 tiles"};
    fma_ceiling best = {0, "none"};
    for (int k = n > 1 ? 1 : 0; k < n; k++) { // scalar only when nothing wider exists
        int isa = isas[k];
        int64_t iters = 1 << 16;
        double g = fma_run(isa, nth, iters);
        if (g <= 0) continue;
        // size the run to ~0.2 s so thread start-up is noise
        iters = (int64_t)fmax(1 << 16, 0.2 * g * 1e9 / (fma_flops_per_iter(isa) * nth));
        for (int rep = 0; rep < 3; rep++) {
            g = fma_run(isa, nth, iters);
            if (g > best.gflops) {
                best.gflops = g;
                best.isa = isa_names[isa];
            }
        }
    }
    return best;
}

// ------------------------------------------------------------------------------------------------
// results

typedef struct result {
    shape s;
    int bwd;
    stats fl;          // flashc
    stats nv;          // naive_blas (fwd, in fp32), nv.ok = 0 if not run
    const char *nv_note;
    double ws_mib;     // workspace the library asked for
} result;

typedef struct run_info {
    char device[256];
    const char *backend;
    flashc_dtype dtype;
    int threads;
    int checked;       // 1 passed, 0 skipped
    fma_ceiling fma;   // fp32 FMA
    fma_ceiling dot;   // bf16 dot products (bf16 runs on a CPU with AVX-512 BF16), else gflops 0
    fma_ceiling amx;   // AMX tiles (bf16 runs on the amx kernels), else gflops 0
    double load0, load1; // 1-minute load average at the start and at the end of the run
} run_info;

// The ceiling a row's %fma is against: AMX tiles for bf16 rows the amx kernels run on tiles
// (head_dim % 32 == 0; a forward on the FA2 tiles: seqlen_q past the decode kernel's default bound,
// 16), bf16 dot products for bf16 rows of the avx512 kernels, else fp32 FMAs
static const fma_ceiling *row_ceiling(const run_info *ri, const result *x) {
    if (ri->amx.gflops > 0 && x->s.D % 32 == 0 && (x->bwd || x->s.Sq > 16)) return &ri->amx;
    return ri->dot.gflops > 0 ? &ri->dot : &ri->fma;
}

static void json_line_common(FILE *f, const char *impl, const run_info *ri, const char *backend, const char *dtype) {
    fprintf(f, "{\"impl\": ");
    json_str(f, impl);
    fprintf(f, ", \"backend\": \"%s\", \"device\": ", backend);
    json_str(f, ri->device);
    fprintf(f, ", \"dtype\": \"%s\"", dtype);
    if (ri->load0 >= 0) fprintf(f, ", \"load_avg_1m\": [%.2f, %.2f]", ri->load0, ri->load1);
}

// one ceiling line: the higher of the runs before and after the shapes, both beside it
static void json_ceiling(FILE *f, const run_info *ri, const char *dtype, const fma_ceiling *c, double before, double after) {
    json_line_common(f, "fma_ceiling", ri, "cpu", dtype);
    fprintf(f,
            ", \"gflops\": %.3f, \"tflops\": %.5f, \"threads\": %d, \"isa\": \"%s\", \"gflops_before\": %.3f, "
            "\"gflops_after\": %.3f}\n",
            c->gflops, c->gflops * 1e-3, ri->threads, c->isa, before, after);
}

static void json_result(FILE *f, const char *impl, const run_info *ri, const result *r, const stats *st, int is_cuda,
                        const char *dtype) {
    const shape *s = &r->s;
    double fl = flops_fwd(s) * (r->bwd ? 2.5 : 1.0);
    json_line_common(f, impl, ri, is_cuda ? "cuda" : "cpu", dtype);
    fprintf(f,
            ", \"direction\": \"%s\", \"batch\": %d, \"heads\": %d, \"heads_kv\": %d, \"seqlen_q\": %d, "
            "\"seqlen_k\": %d, \"head_dim\": %d, \"causal\": %s, \"ms\": %.4f, \"tflops\": %.5f",
            r->bwd ? "bwd" : "fwd", s->B, s->H, s->H_kv, s->Sq, s->Sk, s->D, s->causal ? "true" : "false", st->med_ms,
            fl / (st->med_ms * 1e-3) * 1e-12);
    if (!is_cuda) fprintf(f, ", \"gflops\": %.3f", fl / (st->med_ms * 1e-3) * 1e-9);
    fprintf(f, ", \"ms_min\": %.4f, \"ms_max\": %.4f, \"repeats\": %d", st->min_ms, st->max_ms, st->n);
    if (!is_cuda) fprintf(f, ", \"threads\": %d", ri->threads);
    if (st->mem_mib >= 0) fprintf(f, ", \"peak_extra_mib\": %.1f", st->mem_mib);
    if (is_cuda && st == &r->fl) fprintf(f, ", \"workspace_mib\": %.1f", r->ws_mib);
    if (!ri->checked) fprintf(f, ", \"checked\": false");
    fprintf(f, "}\n");
}

// ------------------------------------------------------------------------------------------------
// the suite

typedef struct suite {
    shape s[256];
    int n;
    char note[512];
} suite;

static void add_shape(suite *su, shape s) {
    if (su->n < (int)(sizeof su->s / sizeof su->s[0])) su->s[su->n++] = s;
}

static void build_suite(const opts *o, int is_cuda, suite *su) {
    su->n = 0;
    int custom = o->batch || o->heads || o->heads_kv || o->seqlen_q || o->seqlen_k || o->head_dim;
    int full = o->full || (is_cuda && !o->quick);
    int tokens = full ? 16384 : 4096;
    int c_lo = o->causal == 1 ? 1 : 0, c_hi = o->causal == 0 ? 0 : 1;
    if (custom) {
        shape s;
        s.D = o->head_dim ? o->head_dim : 128;
        s.H = o->heads ? o->heads : (2048 / s.D > 0 ? 2048 / s.D : 1);
        s.H_kv = o->heads_kv ? o->heads_kv : s.H;
        s.Sq = o->seqlen_q ? o->seqlen_q : (o->seqlen_k ? o->seqlen_k : 1024);
        s.Sk = o->seqlen_k ? o->seqlen_k : s.Sq;
        s.B = o->batch ? o->batch : (tokens / s.Sq > 0 ? tokens / s.Sq : 1);
        for (int c = c_lo; c <= c_hi; c++) {
            s.causal = c;
            add_shape(su, s);
        }
        snprintf(su->note, sizeof su->note, "custom shape from the command line");
        return;
    }
    static const int seq_full[] = {512, 1024, 2048, 4096, 8192, 16384}, d_full[] = {64, 128, 256};
    static const int seq_cpu[] = {512, 1024, 2048, 4096}, d_cpu[] = {64, 128};
    static const int seq_quick[] = {512, 1024}, d_quick[] = {64};
    const int *seqs = full ? seq_full : o->quick ? seq_quick : seq_cpu;
    const int *ds = full ? d_full : o->quick ? d_quick : d_cpu;
    int nseq = full ? 6 : o->quick ? 2 : 4, nd = full ? 3 : o->quick ? 1 : 2;
    if (o->quick) tokens = 2048;
    for (int di = 0; di < nd; di++)
        for (int c = c_lo; c <= c_hi; c++)
            for (int si = 0; si < nseq; si++) {
                shape s = {tokens / seqs[si], 2048 / ds[di], 2048 / ds[di], seqs[si], seqs[si], ds[di], c};
                add_shape(su, s);
            }
    if (full)
        snprintf(su->note, sizeof su->note,
                 "DESIGN.md §3 training shapes: hidden 2048 (heads = 2048/head_dim), batch·seqlen = 16384, "
                 "seqlen 512..16384, head_dim 64/128/256");
    else if (o->quick)
        snprintf(su->note, sizeof su->note,
                 "quick smoke suite: hidden 2048, batch·seqlen = 2048, seqlen 512/1024, head_dim 64 "
                 "(DESIGN.md §3 scaled down 8x in tokens)");
    else
        snprintf(su->note, sizeof su->note,
                 "DESIGN.md §3 training shapes scaled for a CPU: hidden 2048 (heads = 2048/head_dim) as in the "
                 "paper, but batch·seqlen = 4096 (paper: 16384), seqlen 512..4096 (paper: ..16384), head_dim "
                 "64/128 (paper adds 256); --full runs the paper's shapes");
}

// ------------------------------------------------------------------------------------------------
// one shape: flashc forward/backward and, on the CPU, the naive peer

static int run_shape(flashc_ctx *ctx, const opts *o, const shape *s, flashc_dtype t, int peers, int nth,
                     result *res, int *nres, int idx, int total) {
    flashc_attn_desc d;
    fill_desc(&d, s, t);
    int is_cuda = ctx->backend == FLASHC_BACKEND_CUDA;
    if (flashc_supports(ctx, &d) != FLASHC_OK) {
        fprintf(stderr, "[%d/%d] skip B=%d H=%d Sq=%d Sk=%d D=%d causal=%d: %s\n", idx, total, s->B, s->H, s->Sq,
                s->Sk, s->D, s->causal, flashc_ctx_last_error(ctx));
        return 0;
    }
    size_t es = flashc__dtype_size(t);
    int64_t nq = (int64_t)s->B * s->Sq * s->H * s->D, nk = (int64_t)s->B * s->Sk * s->H_kv * s->D;
    int64_t nl = (int64_t)s->B * s->H * s->Sq;
    flashc_run r;
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    r.d = d;
    int rc = 0;
    rc |= dev_alloc(ctx, &r.q, (size_t)nq * es) | dev_alloc(ctx, &r.k, (size_t)nk * es) |
          dev_alloc(ctx, &r.v, (size_t)nk * es) | dev_alloc(ctx, &r.o, (size_t)nq * es) |
          dev_alloc(ctx, &r.lse, (size_t)nl * 4);
    if (o->bwd)
        rc |= dev_alloc(ctx, &r.dout, (size_t)nq * es) | dev_alloc(ctx, &r.dq, (size_t)nq * es) |
              dev_alloc(ctx, &r.dk, (size_t)nk * es) | dev_alloc(ctx, &r.dv, (size_t)nk * es);
    if (rc) {
        fprintf(stderr, "[%d/%d] skip B=%d H=%d Sq=%d Sk=%d D=%d: out of memory for the tensors\n", idx, total, s->B,
                s->H, s->Sq, s->Sk, s->D);
        goto out;
    }
    uint64_t rng = 0x5eed0000ull + (uint64_t)idx;
    rc |= dev_fill_random(ctx, &r.q, nq, t, -2, 2, &rng, NULL);
    rc |= dev_fill_random(ctx, &r.k, nk, t, -2, 2, &rng, NULL);
    rc |= dev_fill_random(ctx, &r.v, nk, t, -1, 1, &rng, NULL);
    rc |= dev_poison(ctx, &r.o) | dev_poison(ctx, &r.lse);
    if (o->bwd)
        rc |= dev_fill_random(ctx, &r.dout, nq, t, -1, 1, &rng, NULL) | dev_poison(ctx, &r.dq) |
              dev_poison(ctx, &r.dk) | dev_poison(ctx, &r.dv);
    if (rc) goto out;

    for (int dir = 0; dir < 2; dir++) {
        if ((dir == 0 && !o->fwd) || (dir == 1 && !o->bwd)) continue;
        r.bwd = dir;
        if (dir == 1 && !o->fwd) { // the backward needs out and lse of this input
            r.bwd = 0;
            if (call_flashc(&r)) goto out;
            dev_sync(ctx, &r.o);
            r.bwd = 1;
        }
        // The bench passes its own workspace (fresh pages), so its first touch shows in the memory
        // figure and the ctx never grows one of its own.
        size_t ws = dir ? flashc_bwd_workspace_size(ctx, &d) : flashc_fwd_workspace_size(ctx, &d);
        r.ws.p = NULL;
        r.ws.bytes = 0;
        if (ws && dev_alloc(ctx, &r.ws, ws)) {
            fprintf(stderr, "[%d/%d] skip: cannot allocate a %zu-byte workspace\n", idx, total, ws);
            goto out;
        }
        double fl = flops_fwd(s) * (dir ? 2.5 : 1.0);
        result *x = &res[*nres];
        memset(x, 0, sizeof *x);
        x->s = *s;
        x->bwd = dir;
        x->ws_mib = (double)ws / (1024.0 * 1024.0);
        x->nv_note = "";
        timed tm[2] = {{call_flashc, &r, is_cuda ? sync_flashc : NULL, &r, !is_cuda}};
        int n_impl = 1;
#ifdef FLASHC_BENCH_BLAS
        naive_run nr;
        memset(&nr, 0, sizeof nr);
        size_t o_bytes = (size_t)nq * 4, s_bytes = (size_t)s->Sq * s->Sk * 4;
#endif
        if (dir == 0 && peers && !is_cuda) {
#ifdef FLASHC_BENCH_BLAS
            double s_gib = (double)s_bytes / (1024.0 * 1024.0 * 1024.0);
            if (ctx->ops->copy) {
                x->nv_note = "host memory only";
            } else if (s_gib > 4.0) {
                x->nv_note = "S > 4 GiB";
            } else {
                // the peer reads the very same fp32 tensors; f16 / bf16 ones widened to fp32 once,
                // before the timing (sgemm has no 16-bit inputs: the naive attention a user of BLAS
                // would write)
                nr.s = s;
                nr.q = r.q.p;
                nr.k = r.k.p;
                nr.v = r.v.p;
                nr.nth = nth < 64 ? nth : 64;
                int ok = 1;
                if (t != FLASHC_DTYPE_F32) {
                    ok = (nr.wq = pages_alloc((size_t)nq * 4)) && (nr.wk = pages_alloc((size_t)nk * 4)) &&
                         (nr.wv = pages_alloc((size_t)nk * 4)) && !dev_read_floats(ctx, &r.q, nq, t, nr.wq) &&
                         !dev_read_floats(ctx, &r.k, nk, t, nr.wk) && !dev_read_floats(ctx, &r.v, nk, t, nr.wv);
                    nr.q = nr.wq;
                    nr.k = nr.wk;
                    nr.v = nr.wv;
                }
                nr.o = ok ? pages_alloc(o_bytes) : NULL;
                ok &= nr.o != NULL;
                if (ok) memset(nr.o, 0, o_bytes);
                for (int i = 0; i < nr.nth; i++) ok &= (nr.S[i] = pages_alloc(s_bytes)) != NULL;
                if (ok) tm[n_impl++] = (timed){call_naive, &nr, NULL, NULL, 1};
                else x->nv_note = "out of memory";
            }
#else
            (void)nth;
            x->nv_note = "no BLAS";
#endif
        }
        fprintf(stderr, "[%d/%d] %s %s B=%d H=%d/%d Sq=%d Sk=%d D=%d causal=%d ... ", idx, total,
                n_impl > 1 ? "flashc + naive_blas" : "flashc", dir ? "bwd" : "fwd", s->B, s->H, s->H_kv, s->Sq, s->Sk,
                s->D, s->causal);
        stats st2[2];
        int mrc = measure_n(n_impl, tm, o, st2);
        dev_free(ctx, &r.ws);
        r.ws.bytes = 0;
#ifdef FLASHC_BENCH_BLAS
        if (nr.o) pages_free(nr.o, o_bytes);
        if (nr.wq) pages_free(nr.wq, (size_t)nq * 4);
        if (nr.wk) pages_free(nr.wk, (size_t)nk * 4);
        if (nr.wv) pages_free(nr.wv, (size_t)nk * 4);
        for (int i = 0; i < nr.nth; i++) pages_free(nr.S[i], s_bytes);
#endif
        if (mrc) goto out;
        x->fl = st2[0];
        fprintf(stderr, "%.2f ms (%.1f GFLOP/s)", x->fl.med_ms, fl / (x->fl.med_ms * 1e-3) * 1e-9);
        if (n_impl > 1) {
            x->nv = st2[1];
            fprintf(stderr, "; naive_blas %.2f ms (%.1f GFLOP/s)", x->nv.med_ms, fl / (x->nv.med_ms * 1e-3) * 1e-9);
        }
        fprintf(stderr, "\n");
        (*nres)++;
    }
out:
    dev_free(ctx, &r.q);
    dev_free(ctx, &r.k);
    dev_free(ctx, &r.v);
    dev_free(ctx, &r.o);
    dev_free(ctx, &r.lse);
    dev_free(ctx, &r.dout);
    dev_free(ctx, &r.dq);
    dev_free(ctx, &r.dk);
    dev_free(ctx, &r.dv);
    return 0;
}

// ------------------------------------------------------------------------------------------------
// main

int main(int argc, char **argv) {
    opts o;
    parse_args(argc, argv, &o);
    setvbuf(stdout, NULL, _IOLBF, 0);

    flashc_ctx *ctx = NULL, *ref = NULL;
    flashc_status st = flashc_ctx_create(&ctx, o.backend, o.threads);
    if (st != FLASHC_OK) {
        fprintf(stderr, "flashc-bench: cannot create a %s context: %s (%s)\n", backend_name(o.backend),
                flashc_status_string(st), flashc_ctx_last_error(NULL));
        return 2;
    }
    if ((st = flashc_ctx_create(&ref, FLASHC_BACKEND_REF, 1)) != FLASHC_OK) {
        fprintf(stderr, "flashc-bench: cannot create the reference context: %s (%s)\n", flashc_status_string(st),
                flashc_ctx_last_error(NULL));
        return 2;
    }
    int is_cuda = ctx->backend == FLASHC_BACKEND_CUDA;
    flashc_dtype t = o.dtype >= 0 ? (flashc_dtype)o.dtype : is_cuda ? FLASHC_DTYPE_BF16 : FLASHC_DTYPE_F32;
    int peers = o.peers >= 0 ? o.peers : ctx->backend == FLASHC_BACKEND_CPU;
    int nth = ctx->n_threads;

    run_info ri;
    memset(&ri, 0, sizeof ri);
    if (is_cuda) gpu_name(ri.device, sizeof ri.device);
    else cpu_name(ri.device, sizeof ri.device);
    ri.backend = backend_name(ctx->backend);
    ri.dtype = t;
    ri.threads = nth;

    suite su;
    build_suite(&o, is_cuda, &su);

    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S", localtime(&now));
    printf("flashc-bench %s  %s\n", flashc_version_string(), date);
    const char *isa = ctx->backend == FLASHC_BACKEND_CPU ? flashc__cpu_isa(ctx) : NULL; // (a CPU ctx's state only)
    printf("backend %s (%s%s%s), dtype %s, device: %s", ri.backend, ctx->ops->name, isa ? ", kernels " : "", isa ? isa : "",
           dtype_name(t), ri.device);
    if (!is_cuda) printf(", %d thread%s, %ld online cores", nth, nth == 1 ? "" : "s", sysconf(_SC_NPROCESSORS_ONLN));
    ri.load0 = loadavg1();
    printf("\nload average (1 min) at start: %.2f\n", ri.load0);
    printf("suite: %s\n", su.note);
    printf("FLOPs: forward 4·B·H·Sq·Sk·D, halved for causal when Sq == Sk (else the unmasked pairs); "
           "backward 2.5x forward\n");
    printf("time: median of >= %d samples after warm-up (more while %.1f s per measurement lasts), min..max beside\n",
           o.repeats, o.budget_s);
    if (is_cuda)
        printf("cuda timing: host clock around back-to-back calls closed by a synchronizing 4-byte copy (no CUDA "
               "events; inputs > L2 in the default suite)\n");
#ifdef FLASHC_BENCH_BLAS
    if (peers) {
        const char *ct = getenv("OPENBLAS_CORETYPE"), *l2 = getenv("OPENBLAS_L2_SIZE");
        printf("peer naive_blas: %s", openblas_get_config());
        if (ct || l2)
            printf("  (warning: OPENBLAS_CORETYPE=%s OPENBLAS_L2_SIZE=%s are set; run with env -u to let OpenBLAS "
                   "tune itself)",
                   ct ? ct : "", l2 ? l2 : "");
        printf("\n");
    }
#else
    if (peers) printf("peer naive_blas: skipped (built without BLAS: install libopenblas-dev and rebuild)\n");
#endif

    // (a) correctness first
    if (o.check) {
        uint64_t seed = o.seed ? o.seed : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
        printf("check against the reference (seed %llu): error = max|x - ref| / (1 + max|ref|)\n",
               (unsigned long long)seed);
        if (t != FLASHC_DTYPE_F32)
            printf("  (%s: tolerance from the format's epsilon, not DESIGN.md §2's 2x-naive rule; see tests/)\n",
                   dtype_name(t));
        uint64_t rng = seed;
        int fail = 0, checked = 0, done[2][1024] = {{0}};
        int group = su.n ? su.s[0].H / su.s[0].H_kv : 1;
        for (int i = 0; i < su.n; i++) {
            const shape *s = &su.s[i];
            int dkey = s->D < 1024 ? s->D : 1023;
            if (done[s->causal][dkey]) continue;
            done[s->causal][dkey] = 1;
            // a square case and one with Sq < Sk (bottom-right causal alignment), GQA as in the suite
            shape cs[2] = {{2, 2 * group, 2, 96, 96, s->D, s->causal}, {2, 2 * group, 2, 67, 131, s->D, s->causal}};
            for (int k = 0; k < 2; k++) {
                check_case c = {cs[k], t, 1};
                int r = check_one(ctx, ref, &c, &rng, peers && k == 0, nth);
                if (r == 1) fail = 1;
                if (r != 2) checked++;
            }
        }
        if (!fail && !checked) {
            printf("check: nothing in the suite is supported by this backend; nothing timed\n");
            flashc_ctx_free(ref);
            flashc_ctx_free(ctx);
            return 2;
        }
        if (fail) {
            printf("check: FAIL (nothing timed)\n");
            flashc_ctx_free(ref);
            flashc_ctx_free(ctx);
            return 1;
        }
        printf("check: PASS\n");
        ri.checked = 1;
    } else {
        printf("check: skipped (--no-check); results are marked \"checked\": false\n");
    }

    // (b) the ceiling, then the shapes, then the ceiling again: on a shared machine the two differ,
    // and the difference says how much the load moved during the run. The higher one is the ceiling.
    fma_ceiling fma0 = {0, "none"}, fma1 = {0, "none"}, dot0 = {0, "none"}, dot1 = {0, "none"}, amx0 = {0, "none"},
                amx1 = {0, "none"};
    // (the bf16 ceilings of the kernels that run: dot products on avx512; tiles on amx, where
    // head_dim % 32 != 0 widens to fp32)
    const int with_dot = peers && isa && t == FLASHC_DTYPE_BF16 && !strcmp(isa, "avx512");
    const int with_amx = peers && isa && t == FLASHC_DTYPE_BF16 && !strcmp(isa, "amx");
    if (peers && !is_cuda) {
        fprintf(stderr, "fma ceiling on %d threads ... ", nth);
        fma0 = measure_fma(nth, 0);
        if (with_dot) dot0 = measure_fma(nth, 1);
        if (with_amx) amx0 = measure_fma(nth, 2);
        fprintf(stderr, "%.1f GFLOP/s (%s)%s\n", fma0.gflops, fma0.isa, dot0.gflops > 0 ? ", bf16 dot products too" : "");
    }
    result *res = calloc((size_t)su.n * 2, sizeof *res);
    int nres = 0;
    double t_start = now_s();
    for (int i = 0; i < su.n; i++) run_shape(ctx, &o, &su.s[i], t, peers, nth, res, &nres, i + 1, su.n);
    double t_total = now_s() - t_start;
    if (peers && !is_cuda) {
        fprintf(stderr, "fma ceiling again ... ");
        fma1 = measure_fma(nth, 0);
        if (with_dot) dot1 = measure_fma(nth, 1);
        if (with_amx) amx1 = measure_fma(nth, 2);
        fprintf(stderr, "%.1f GFLOP/s (%s)\n", fma1.gflops, fma1.isa);
        ri.fma = fma1.gflops > fma0.gflops ? fma1 : fma0;
        ri.dot = dot1.gflops > dot0.gflops ? dot1 : dot0;
        ri.amx = amx1.gflops > amx0.gflops ? amx1 : amx0;
        printf("fma_ceiling: %.1f GFLOP/s fp32 on %d threads (%s loop; %.1f before the shapes, %.1f after)\n",
               ri.fma.gflops, nth, ri.fma.isa, fma0.gflops, fma1.gflops);
        if (ri.dot.gflops > 0)
            printf("bf16 dot ceiling: %.1f GFLOP/s on %d threads (%.1f before, %.1f after); %%fma of a bf16 row is "
                   "against it (flashc's bf16 forward and backward use these products here)\n",
                   ri.dot.gflops, nth, dot0.gflops, dot1.gflops);
        if (ri.amx.gflops > 0)
            printf("amx ceiling: %.1f GFLOP/s on %d threads (%.1f before, %.1f after); %%fma of a bf16 row with "
                   "head_dim %% 32 == 0 is against it (the amx kernels run those on these tiles)\n",
                   ri.amx.gflops, nth, amx0.gflops, amx1.gflops);
    }

    // table
    int show_naive = peers && !is_cuda;
    int show_fma = show_naive && ri.fma.gflops > 0;
    const char *unit = is_cuda ? "TFLOP/s" : "GFLOP/s";
    double unit_scale = is_cuda ? 1e-12 : 1e-9;
    printf("\n%-3s %4s %5s %5s %6s %6s %4s %3s | %9s %19s %9s", "dir", "B", "H", "H_kv", "Sq", "Sk", "D", "cau",
           "flashc ms", "(min..max)", unit);
    if (show_fma) printf(" %6s", "%fma");
    printf(" %9s", is_cuda ? "ws MiB" : "mem MiB");
    if (show_naive) printf(" | %9s %9s %7s %8s", "naive ms", unit, "speedup", "mem MiB");
    printf("\n");
    for (int i = 0; i < nres; i++) {
        const result *x = &res[i];
        const shape *s = &x->s;
        double fl = flops_fwd(s) * (x->bwd ? 2.5 : 1.0);
        char range[64];
        snprintf(range, sizeof range, "(%.2f..%.2f)", x->fl.min_ms, x->fl.max_ms);
        printf("%-3s %4d %5d %5d %6d %6d %4d %3s | %9.2f %19s %9.2f", x->bwd ? "bwd" : "fwd", s->B, s->H, s->H_kv,
               s->Sq, s->Sk, s->D, s->causal ? "yes" : "no", x->fl.med_ms, range,
               fl / (x->fl.med_ms * 1e-3) * unit_scale);
        if (show_fma)
            printf(" %5.1f%%", 100.0 * fl / (x->fl.med_ms * 1e-3) * 1e-9 / row_ceiling(&ri, x)->gflops);
        if (is_cuda) printf(" %9.1f", x->ws_mib);
        else if (x->fl.mem_mib >= 0) printf(" %9.1f", x->fl.mem_mib);
        else printf(" %9s", "n/a");
        if (show_naive) {
            if (x->nv.ok)
                printf(" | %9.2f %9.2f %6.2fx %8.1f", x->nv.med_ms, fl / (x->nv.med_ms * 1e-3) * unit_scale,
                       x->nv.med_ms / x->fl.med_ms, x->nv.mem_mib);
            else
                printf(" | %s", x->bwd ? "" : (x->nv_note && x->nv_note[0] ? x->nv_note : "-"));
        }
        printf("\n");
    }
    if (show_naive)
        printf("speedup = naive_blas ms / flashc ms on the same inputs (naive_blas: fp32 forward, on f16 / bf16 inputs widened to fp32); "
               "mem = peak extra resident MiB of the first call\n");
    ri.load1 = loadavg1();
    printf("timed section: %.1f s; load average (1 min) at end: %.2f\n", t_total, ri.load1);

    if (o.json) {
        int lines = 0;
        FILE *f = fopen(o.json, "w");
        if (!f) {
            fprintf(stderr, "flashc-bench: cannot write %s: %s\n", o.json, strerror(errno));
            return 2;
        }
        if (show_fma) {
            json_ceiling(f, &ri, "f32", &ri.fma, fma0.gflops, fma1.gflops);
            lines++;
            if (ri.dot.gflops > 0) { // (dtype bf16: the same impl name, told apart by it)
                json_ceiling(f, &ri, "bf16", &ri.dot, dot0.gflops, dot1.gflops);
                lines++;
            }
            if (ri.amx.gflops > 0) { // (told apart by its "isa")
                json_ceiling(f, &ri, "bf16", &ri.amx, amx0.gflops, amx1.gflops);
                lines++;
            }
        }
        for (int i = 0; i < nres; i++) {
            json_result(f, "flashc", &ri, &res[i], &res[i].fl, is_cuda, dtype_name(t));
            lines++;
            if (res[i].nv.ok) {
                json_result(f, "naive_blas", &ri, &res[i], &res[i].nv, 0, "f32");
                lines++;
            }
        }
        if (fclose(f)) {
            fprintf(stderr, "flashc-bench: writing %s failed: %s\n", o.json, strerror(errno));
            return 2;
        }
        printf("wrote %d JSON lines to %s\n", lines, o.json);
    }
    free(res);
    flashc_ctx_free(ref);
    flashc_ctx_free(ctx);
    return 0;
}
