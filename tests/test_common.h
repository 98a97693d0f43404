// test_common.h -- small helpers shared by the C tests: a seeded RNG, dtype rounding, aligned
// buffers, pass/fail counters and the closing "N passed, M failed" line.
//
// No framework: each test is a loop over a table of cases that calls tc_pass / tc_fail and ends
// with `return tc_summary();`. tests/run_tests.sh sums the summary lines of every program.
#ifndef FLASHC_TEST_COMMON_H
#define FLASHC_TEST_COMMON_H

#include "flashc.h"
#include "flashc_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ------------------------------------------------------------------------------------------------
// counters

static int tc_n_pass, tc_n_fail, tc_n_skip, tc_verbose;

static inline void tc_vline(const char *tag, const char *fmt, va_list ap) {
    printf("%s", tag);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
}

// A passed check: one line with -v, silence otherwise.
static inline __attribute__((format(printf, 1, 2))) void tc_pass(const char *fmt, ...) {
    tc_n_pass++;
    if (!tc_verbose) return;
    va_list ap;
    va_start(ap, fmt);
    tc_vline("OK    ", fmt, ap);
    va_end(ap);
}

// A failed check: always one line.
static inline __attribute__((format(printf, 1, 2))) void tc_fail(const char *fmt, ...) {
    tc_n_fail++;
    va_list ap;
    va_start(ap, fmt);
    tc_vline("FAIL  ", fmt, ap);
    va_end(ap);
}

// A check that could not run here (backend lacks the feature): counted apart, never as a pass.
static inline __attribute__((format(printf, 1, 2))) void tc_skip(const char *fmt, ...) {
    tc_n_skip++;
    if (!tc_verbose) return;
    va_list ap;
    va_start(ap, fmt);
    tc_vline("SKIP  ", fmt, ap);
    va_end(ap);
}

// The closing lines; the last one is what tests/run_tests.sh adds up. Returns the exit status.
static inline int tc_summary(const char *prog) {
    if (tc_n_skip) printf("%s: %d skipped (not supported by the backend, not counted as passed)\n", prog, tc_n_skip);
    printf("%d passed, %d failed\n", tc_n_pass, tc_n_fail);
    fflush(stdout);
    return tc_n_fail != 0;
}

// ------------------------------------------------------------------------------------------------
// crashes: name the check that was running, then die as the signal would have us die

#include <signal.h>
#include <unistd.h>

static char tc_current[1024]; // the check in progress, set by the tests

static inline void tc_on_crash(int sig) {
    static const char a[] = "\nCRASH (signal) while running: ";
    ssize_t r = write(2, a, sizeof a - 1);
    r = write(2, tc_current, strlen(tc_current));
    r = write(2, "\n", 1);
    (void)r;
    signal(sig, SIG_DFL);
    raise(sig);
}

static inline void tc_catch_crashes(void) {
    static const int sigs[] = {SIGSEGV, SIGFPE, SIGBUS, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], tc_on_crash);
}

static inline void tc_running(const char *what) { snprintf(tc_current, sizeof tc_current, "%s", what); }

// ------------------------------------------------------------------------------------------------
// random numbers (splitmix64: tiny, seedable, good enough for test data)

typedef struct tc_rng {
    uint64_t s;
} tc_rng;

static inline uint64_t tc_next(tc_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline tc_rng tc_rng_make(uint64_t seed, uint64_t stream) {
    tc_rng r = {seed * 0x2545f4914f6cdd1dull + stream * 0x9e3779b97f4a7c15ull + 1};
    tc_next(&r);
    return r;
}

static inline double tc_uniform(tc_rng *r) { return (double)(tc_next(r) >> 11) * (1.0 / 9007199254740992.0); } // [0, 1)

static inline int tc_int(tc_rng *r, int n) { return (int)(tc_next(r) % (uint64_t)n); }

// Standard normal (Box-Muller), like torch.randn: never zero in practice, heavy enough tails.
static inline double tc_normal(tc_rng *r) {
    double u1 = tc_uniform(r), u2 = tc_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

// ------------------------------------------------------------------------------------------------
// dtypes

static inline const char *tc_dtype_name(flashc_dtype t) {
    switch (t) {
    case FLASHC_DTYPE_F32: return "f32";
    case FLASHC_DTYPE_F16: return "f16";
    case FLASHC_DTYPE_BF16: return "bf16";
    case FLASHC_DTYPE_E4M3: return "e4m3";
    }
    return "?";
}

// x rounded to dtype t (round to nearest even) and back to float.
static inline float tc_round(float x, flashc_dtype t) {
    switch (t) {
    case FLASHC_DTYPE_F16: return flashc__f16_to_f32(flashc__f32_to_f16(x));
    case FLASHC_DTYPE_BF16: return flashc__bf16_to_f32(flashc__f32_to_bf16(x));
    default: return x;
    }
}

// A quiet NaN of dtype t, to poison outputs: an element still NaN after a call was never written.
static inline void tc_store_nan(void *base, int64_t idx, flashc_dtype t) {
    if (t == FLASHC_DTYPE_F32) {
        uint32_t u = 0x7fc0dead;
        memcpy((char *)base + 4 * idx, &u, 4);
    } else {
        uint16_t h = t == FLASHC_DTYPE_F16 ? 0x7e5a : 0x7fda;
        memcpy((char *)base + 2 * idx, &h, 2);
    }
}

// ------------------------------------------------------------------------------------------------
// memory

// 64-byte aligned host memory; tests stop on allocation failure (library code never would).
static inline void *tc_alloc(size_t bytes) {
    size_t n = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, n ? n : 64);
    if (!p) {
        fprintf(stderr, "test: out of memory for %zu bytes\n", bytes);
        exit(2);
    }
    return p;
}

// ------------------------------------------------------------------------------------------------
// the backend's memory: host backends use the host buffers themselves, CUDA gets staged copies

static inline int tc_on_dev(flashc_ctx *ctx) { return flashc_ctx_backend(ctx) == FLASHC_BACKEND_CUDA; }

// A device copy of host[0 .. bytes) (host itself for host backends; NULL stays NULL).
static inline void *tc_dev_put(flashc_ctx *ctx, const void *host, size_t bytes) {
    if (!host || !tc_on_dev(ctx)) return (void *)host;
    void *d = ctx->ops->ws_alloc(ctx, bytes ? bytes : 64);
    if (d && ctx->ops->copy(ctx, d, host, bytes, 1) != FLASHC_OK) {
        ctx->ops->ws_free(ctx, d);
        d = NULL;
    }
    if (!d) {
        printf("FAIL  staging %zu bytes to the device\n", bytes);
        exit(1);
    }
    return d;
}

static inline void tc_dev_get(flashc_ctx *ctx, void *host, const void *dev, size_t bytes) {
    if (!host || host == dev) return;
    if (ctx->ops->copy(ctx, host, (void *)dev, bytes, 0) != FLASHC_OK) {
        printf("FAIL  copying %zu bytes back from the device: %s\n", bytes, flashc_ctx_last_error(ctx));
        exit(1);
    }
}

static inline void tc_dev_free(flashc_ctx *ctx, const void *host, void *dev) {
    if (dev && dev != host) ctx->ops->ws_free(ctx, dev);
}

// ------------------------------------------------------------------------------------------------
// messages

// 1 if `name` occurs in msg as a whole identifier (not as part of a longer one), so that "k"
// matches "k is NULL" but not "kv" and "q_stride" matches "q_stride[1] = ...".
static inline int tc_names(const char *msg, const char *name) {
    size_t n = strlen(name);
    for (const char *s = msg; (s = strstr(s, name)) != NULL; s++) {
        int before = s == msg ? 0 : (s[-1] == '_' || (s[-1] >= '0' && s[-1] <= '9') || (s[-1] >= 'a' && s[-1] <= 'z') ||
                                     (s[-1] >= 'A' && s[-1] <= 'Z'));
        char c = s[n];
        int after = c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        if (!before && !after) return 1;
    }
    return 0;
}

#endif // FLASHC_TEST_COMMON_H
