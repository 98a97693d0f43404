// bench_util.h -- what both benchmarks (flashc_bench.c, bench_decode.c) need from the machine:
// a monotonic clock, /proc facts (CPU model, load average) and a qsort comparator for medians.
// Header-only (static inline): each benchmark is a single translation unit.
#ifndef FLASHC_BENCH_UTIL_H
#define FLASHC_BENCH_UTIL_H

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static inline double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline void trim(char *s) {
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    size_t i = 0;
    while (isspace((unsigned char)s[i])) i++;
    memmove(s, s + i, n - i + 1);
}

// The value of the first line of `path` that starts with `key`, after the ':' (or "" if none).
static inline void read_keyed_line(const char *path, const char *key, char *out, size_t cap) {
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, key, strlen(key))) {
            char *c = strchr(line, ':');
            if (c) {
                snprintf(out, cap, "%s", c + 1);
                trim(out);
            }
            break;
        }
    }
    fclose(f);
}

static inline void cpu_name(char *out, size_t cap) {
    read_keyed_line("/proc/cpuinfo", "model name", out, cap);
    if (!out[0]) snprintf(out, cap, "unknown cpu");
}

static inline double loadavg1(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif // FLASHC_BENCH_UTIL_H
