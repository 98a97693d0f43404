// test_memory.c -- O(N) memory: attention at long sequence lengths must not materialise S.
//
// Forward: B=1, H=8, Sq=Sk=32768, D=128, fp32, CPU backend with 2 threads. Inputs and outputs take
// 4 x 128 MiB + 1 MiB of LSE; a naive implementation would hold S (8 x 32768^2 fp32 = 32 GiB). The
// call may raise the peak resident memory by < 64 MiB beyond its (already resident) inputs and
// outputs -- everything it allocates counts, its workspace included (workspace = NULL, so the ctx
// allocates its own inside the call), and so do thread stacks it touches.
// Backward: B=1, H=8, Sq=Sk=8192, D=128, fp32: bound 64 MiB + one fp32 dQ accumulator
// (4 B Sq H D bytes = 32 MiB, O(N), what FlashAttention-2's backward keeps); a naive backward
// holds S and dS, 2 x 2 GiB.
//
// How: inputs and outputs are allocated and touched first, the ctx is created, then the peak is
// reset (write "5" to /proc/self/clear_refs, which sets VmHWM to the current VmRSS), the call runs,
// and the rise is VmHWM after the call minus VmRSS before it. Outputs are poisoned with NaN before
// the call and must all be written; a few rows (and keys) are recomputed in fp64 and compared, so
// a call that does little cannot pass. Takes minutes (4.4 TFLOP forward); not for sanitizers.
//
// Usage: build/test_memory [--fwd-seqlen N] [--bwd-seqlen N] [--threads N] [-v]
#include "test_common.h"

#include <time.h>

#define MiB (1024.0 * 1024.0)

// The value (kB) of "key:" in a /proc file such as /proc/self/status or /proc/meminfo; -1 if absent.
static long proc_kb(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') v = atol(line + n + 1);
    fclose(f);
    return v;
}

static long status_kb(const char *key) { return proc_kb("/proc/self/status", key); }
static long meminfo_kb(const char *key) { return proc_kb("/proc/meminfo", key); }

static int reset_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return 0;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Uniform in [-sqrt(3), sqrt(3)) (unit variance), fast enough for 100M elements.
static void fill(float *x, size_t n, uint64_t seed) {
    tc_rng r = tc_rng_make(seed, 5);
    for (size_t i = 0; i < n; i++) x[i] = (float)(((double)(tc_next(&r) >> 40) / 16777216.0 * 2.0 - 1.0) * 1.7320508);
}

static size_t count_nan(const float *x, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += isnan(x[i]);
    return k;
}

// fp64 forward for query row i of head h (contiguous (S, H, D), one batch entry, no mask):
// O_i into o (D doubles), returns L_i.
static double ref_row(const float *q, const float *k, const float *v, int S, int H, int D, int h, int i, double *o) {
    double scale = (double)(float)(1.0 / sqrt((double)D)), m = -INFINITY, l = 0;
    const float *Q_i = q + ((size_t)i * H + h) * D;
    for (int j = 0; j < S; j++) {
        const float *K_j = k + ((size_t)j * H + h) * D;
        double s = 0;
        for (int d = 0; d < D; d++) s += (double)Q_i[d] * K_j[d];
        if (s * scale > m) m = s * scale;
    }
    for (int d = 0; d < D; d++) o[d] = 0;
    for (int j = 0; j < S; j++) {
        const float *K_j = k + ((size_t)j * H + h) * D, *V_j = v + ((size_t)j * H + h) * D;
        double s = 0;
        for (int d = 0; d < D; d++) s += (double)Q_i[d] * K_j[d];
        double e = exp(s * scale - m);
        l += e;
        for (int d = 0; d < D; d++) o[d] += e * V_j[d];
    }
    for (int d = 0; d < D; d++) o[d] /= l;
    return m + log(l);
}

static int g_threads = 2;

static void fwd_memory(int S) {
    const int B = 1, H = 8, D = 128;
    size_t n = (size_t)B * S * H * D, nl = (size_t)B * H * S;
    double io = (4.0 * n + nl) * sizeof(float) / MiB, naive = (double)B * H * S * (double)S * sizeof(float) / MiB;
    char name[128];
    snprintf(name, sizeof name, "memory fwd cpu f32 B=%d H=%d Sq=Sk=%d D=%d threads=%d", B, H, S, D, g_threads);
    float *q = tc_alloc(n * 4), *k = tc_alloc(n * 4), *v = tc_alloc(n * 4), *o = tc_alloc(n * 4), *lse = tc_alloc(nl * 4);
    fill(q, n, 1), fill(k, n, 2), fill(v, n, 3);
    for (size_t i = 0; i < n; i++) o[i] = NAN;
    for (size_t i = 0; i < nl; i++) lse[i] = NAN;
    flashc_ctx *ctx;
    flashc_status st = flashc_ctx_create(&ctx, FLASHC_BACKEND_CPU, g_threads);
    if (st != FLASHC_OK) {
        tc_fail("%s: flashc_ctx_create = %s (%s)", name, flashc_status_string(st), flashc_ctx_last_error(NULL));
        return;
    }
    flashc_attn_desc d;
    memset(&d, 0, sizeof d);
    d.batch = B, d.seqlen_q = S, d.seqlen_k = S, d.heads = H, d.heads_kv = H, d.head_dim = D, d.dtype = FLASHC_DTYPE_F32;
    size_t ws = flashc_fwd_workspace_size(ctx, &d);

    if (!reset_peak()) {
        tc_skip("%s: cannot reset the peak through /proc/self/clear_refs", name);
        flashc_ctx_free(ctx);
        return;
    }
    tc_running(name);
    long rss0 = status_kb("VmRSS");
    double t0 = now_s();
    st = flashc_fwd(ctx, &d, q, k, v, o, lse, NULL, 0, NULL);
    double dt = now_s() - t0;
    long hwm = status_kb("VmHWM");
    double rise = (double)(hwm - rss0) * 1024.0 / MiB;

    if (st != FLASHC_OK) {
        tc_fail("%s: flashc_fwd = %s: %s", name, flashc_status_string(st), flashc_ctx_last_error(ctx));
    } else {
        // everything written, and a sample of rows right (fp32 rule of test_flashc: 1e-5 + 1e-5 |ref|)
        size_t nan_o = count_nan(o, n), nan_l = count_nan(lse, nl);
        double worst = 0, werr = 0;
        int rows[4] = {0, 1, S / 2 + 7, S - 1}, heads[2] = {0, H - 1};
        double ref_o[512];
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 2; b++) {
                int i = rows[a], h = heads[b];
                double L = ref_row(q, k, v, S, H, D, h, i, ref_o);
                double e = fabs(lse[(size_t)h * S + i] - L), r = e / (1e-5 + 1e-5 * fabs(L));
                if (r > worst) worst = r, werr = e;
                for (int dd = 0; dd < D; dd++) {
                    double x = o[((size_t)i * H + h) * D + dd];
                    e = fabs(x - ref_o[dd]);
                    r = e / (1e-5 + 1e-5 * fabs(ref_o[dd]));
                    if (!(r <= worst)) worst = r, werr = e;
                }
            }
        if (nan_o || nan_l) tc_fail("%s: %zu elements of o and %zu of lse left unwritten (NaN)", name, nan_o, nan_l);
        else if (!(worst <= 1.0)) tc_fail("%s: sampled rows off: err %.3e > 1e-5 + 1e-5 |ref|", name, werr);
        else if (!(rise < 64.0))
            tc_fail("%s: peak memory rose by %.1f MiB during the call, bound 64 MiB (inputs + outputs %.0f MiB; workspace %.2f MiB)",
                    name, rise, io, (double)ws / MiB);
        else tc_pass("%s: peak +%.1f MiB during the call (bound 64 MiB; inputs + outputs %.0f MiB; workspace %.2f MiB; "
                     "S alone would be %.0f MiB); %.1f s, %.1f GFLOP/s; sampled rows max err %.2e",
                     name, rise, io, (double)ws / MiB, naive, dt, 4.0 * B * H * (double)S * S * D / dt / 1e9, werr);
    }
    flashc_ctx_free(ctx);
    free(q), free(k), free(v), free(o), free(lse);
}

static void bwd_memory(int S) {
    const int B = 1, H = 8, D = 128;
    size_t n = (size_t)B * S * H * D, nl = (size_t)B * H * S;
    double io = (8.0 * n + nl) * sizeof(float) / MiB, naive = 2.0 * B * H * S * (double)S * sizeof(float) / MiB;
    double bound = 64.0 + 4.0 * (double)n / MiB; // + one fp32 dQ accumulator
    char name[128];
    snprintf(name, sizeof name, "memory bwd cpu f32 B=%d H=%d Sq=Sk=%d D=%d threads=%d", B, H, S, D, g_threads);
    float *q = tc_alloc(n * 4), *k = tc_alloc(n * 4), *v = tc_alloc(n * 4), *o = tc_alloc(n * 4), *lse = tc_alloc(nl * 4);
    float *dout = tc_alloc(n * 4), *dq = tc_alloc(n * 4), *dk = tc_alloc(n * 4), *dv = tc_alloc(n * 4);
    fill(q, n, 11), fill(k, n, 12), fill(v, n, 13), fill(dout, n, 14);
    for (size_t i = 0; i < n; i++) dq[i] = dk[i] = dv[i] = NAN;
    flashc_attn_desc d;
    memset(&d, 0, sizeof d);
    d.batch = B, d.seqlen_q = S, d.seqlen_k = S, d.heads = H, d.heads_kv = H, d.head_dim = D, d.dtype = FLASHC_DTYPE_F32;

    // the forward on a ctx of its own, freed before the measurement (its workspace goes with it)
    tc_running(name);
    flashc_ctx *ctx;
    flashc_status st = flashc_ctx_create(&ctx, FLASHC_BACKEND_CPU, g_threads);
    if (st == FLASHC_OK) {
        st = flashc_fwd(ctx, &d, q, k, v, o, lse, NULL, 0, NULL);
        if (st != FLASHC_OK) tc_fail("%s: flashc_fwd = %s: %s", name, flashc_status_string(st), flashc_ctx_last_error(ctx));
        flashc_ctx_free(ctx);
    }
    if (st != FLASHC_OK) return;
    st = flashc_ctx_create(&ctx, FLASHC_BACKEND_CPU, g_threads);
    if (st != FLASHC_OK) {
        tc_fail("%s: flashc_ctx_create = %s (%s)", name, flashc_status_string(st), flashc_ctx_last_error(NULL));
        return;
    }
    size_t ws = flashc_bwd_workspace_size(ctx, &d);

    if (!reset_peak()) {
        tc_skip("%s: cannot reset the peak through /proc/self/clear_refs", name);
        flashc_ctx_free(ctx);
        return;
    }
    long rss0 = status_kb("VmRSS");
    double t0 = now_s();
    st = flashc_bwd(ctx, &d, q, k, v, o, lse, dout, dq, dk, dv, NULL, 0, NULL);
    double dt = now_s() - t0;
    long hwm = status_kb("VmHWM");
    double rise = (double)(hwm - rss0) * 1024.0 / MiB;

    if (st != FLASHC_OK) {
        tc_fail("%s: flashc_bwd = %s: %s", name, flashc_status_string(st), flashc_ctx_last_error(ctx));
    } else {
        size_t nan = count_nan(dq, n) + count_nan(dk, n) + count_nan(dv, n);
        // spot checks in fp64: dQ_i from scratch (own L_i, O_i); dK_j, dV_j over all queries, with
        // P_ij from the library's LSE and D_i from its O (checked by the forward), hence 1e-4
        double scale = (double)(float)(1.0 / sqrt((double)D)), worst = 0, werr = 0;
        const char *wname = "-";
        double *ro = tc_alloc(D * sizeof(double)), *acc = tc_alloc(2 * D * sizeof(double));
        int hs[2] = {0, H - 1}, is[2] = {3, S - 2};
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) {
                int h = hs[a], i = is[b];
                double L = ref_row(q, k, v, S, H, D, h, i, ro), Di = 0;
                const float *Q_i = q + ((size_t)i * H + h) * D, *dO_i = dout + ((size_t)i * H + h) * D;
                for (int e = 0; e < D; e++) Di += dO_i[e] * ro[e], acc[e] = 0;
                for (int j = 0; j < S; j++) {
                    const float *K_j = k + ((size_t)j * H + h) * D, *V_j = v + ((size_t)j * H + h) * D;
                    double s = 0, dP = 0;
                    for (int e = 0; e < D; e++) s += (double)Q_i[e] * K_j[e], dP += (double)dO_i[e] * V_j[e];
                    double g = exp(s * scale - L) * (dP - Di) * scale;
                    for (int e = 0; e < D; e++) acc[e] += g * K_j[e];
                }
                for (int e = 0; e < D; e++) {
                    double x = dq[((size_t)i * H + h) * D + e], err = fabs(x - acc[e]), r = err / (1e-5 + 1e-5 * fabs(acc[e]));
                    if (!(r <= worst)) worst = r, werr = err, wname = "dq";
                }
                int j = is[b];
                const float *K_j = k + ((size_t)j * H + h) * D, *V_j = v + ((size_t)j * H + h) * D;
                for (int e = 0; e < 2 * D; e++) acc[e] = 0;
                for (int ii = 0; ii < S; ii++) {
                    const float *Q = q + ((size_t)ii * H + h) * D, *dO = dout + ((size_t)ii * H + h) * D;
                    const float *O = o + ((size_t)ii * H + h) * D;
                    double s = 0, dP = 0, Dii = 0;
                    for (int e = 0; e < D; e++) s += (double)Q[e] * K_j[e], dP += (double)dO[e] * V_j[e], Dii += (double)dO[e] * O[e];
                    double P = exp(s * scale - lse[(size_t)h * S + ii]);
                    for (int e = 0; e < D; e++) acc[e] += P * (dP - Dii) * scale * Q[e], acc[D + e] += P * dO[e];
                }
                for (int e = 0; e < 2 * D; e++) {
                    double x = e < D ? dk[((size_t)j * H + h) * D + e] : dv[((size_t)j * H + h) * D + e - D];
                    double err = fabs(x - acc[e]), r = err / (1e-4 + 1e-4 * fabs(acc[e]));
                    if (!(r <= worst)) worst = r, werr = err, wname = e < D ? "dk" : "dv";
                }
            }
        free(ro), free(acc);
        if (nan) tc_fail("%s: %zu elements of dq/dk/dv left unwritten (NaN)", name, nan);
        else if (!(worst <= 1.0)) tc_fail("%s: sampled %s off by %.3e (beyond its tolerance)", name, wname, werr);
        else if (!(rise < bound))
            tc_fail("%s: peak memory rose by %.1f MiB during the call, bound %.0f MiB (inputs + outputs %.0f MiB; workspace %.2f MiB)",
                    name, rise, bound, io, (double)ws / MiB);
        else tc_pass("%s: peak +%.1f MiB during the call (bound %.0f MiB = 64 + one fp32 dQ; inputs + outputs %.0f MiB; "
                     "workspace %.2f MiB; S and dS would be %.0f MiB); %.1f s, %.1f GFLOP/s",
                     name, rise, bound, io, (double)ws / MiB, naive, dt, 10.0 * B * H * (double)S * S * D / dt / 1e9);
    }
    flashc_ctx_free(ctx);
    free(q), free(k), free(v), free(o), free(lse), free(dout), free(dq), free(dk), free(dv);
}

int main(int argc, char **argv) {
    int fwd_s = 32768, bwd_s = 8192;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v")) tc_verbose = 1;
        else if (!strcmp(argv[i], "--fwd-seqlen") && i + 1 < argc) fwd_s = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bwd-seqlen") && i + 1 < argc) bwd_s = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) g_threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: test_memory [--fwd-seqlen N] [--bwd-seqlen N] [--threads N] [-v]\n");
            return 2;
        }
    }
    tc_verbose = 1; // one line per measurement: the figures are the point
    tc_catch_crashes();
    long avail = meminfo_kb("MemAvailable");
    double need = (4.0 * fwd_s * 8 * 128 * 4 + 64 * MiB) / 1024.0;
    if (avail >= 0 && avail < need) { // counted as a skip (and a failure under CI, which must measure it)
        if (getenv("CI")) tc_fail("test_memory: MemAvailable %ld MiB < %.0f MiB needed: not measured", avail / 1024, need / 1024);
        else tc_skip("test_memory: MemAvailable %ld MiB < %.0f MiB needed", avail / 1024, need / 1024);
        return tc_summary("test_memory");
    }
    if (fwd_s > 0) fwd_memory(fwd_s);
    if (bwd_s > 0) bwd_memory(bwd_s);
    return tc_summary("test_memory");
}
