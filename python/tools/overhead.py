"""overhead.py -- what a Python call of flashc.attention costs on top of the C call, for tiny shapes.

    python3 python/tools/overhead.py [--lib build/libflashc.so] [--repeats 20000]

Times, in one process on the same inputs (batch 1, seqlen 16, 4 heads, head_dim 64, fp32, CPU
backend, causal): the C call in a C loop (a small program compiled here against the library),
flashc.attention on numpy arrays, and on torch CPU tensors (no grad, and with autograd), each the
median of many blocks after warm-up. The bar: Python minus C < 20 us. Unset OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE when benchmarking (PREAMBLE), and expect noise on a shared 2-core machine.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
B, S, H, D = 1, 16, 4, 64

C_LOOP = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "flashc.h"
static clockid_t clk = CLOCK_MONOTONIC;
static double now(void) { struct timespec t; clock_gettime(clk, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv) {
    if (argv[2][0] == 't') clk = CLOCK_THREAD_CPUTIME_ID;
    int reps = atoi(argv[1]), blocks = 25, B = %d, S = %d, H = %d, D = %d;
    size_t n = (size_t)B * S * H * D;
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *o = malloc(n * 4), *lse = malloc((size_t)B * H * S * 4);
    for (size_t i = 0; i < n; i++) q[i] = k[i] = v[i] = (float)((i * 2654435761u) %% 1000) / 1000.0f - 0.5f;
    flashc_ctx *ctx; flashc_ctx_create(&ctx, FLASHC_BACKEND_CPU, 0);
    flashc_attn_desc d = {0};
    d.batch = B; d.seqlen_q = d.seqlen_k = S; d.heads = d.heads_kv = H; d.head_dim = D; d.dtype = FLASHC_DTYPE_F32; d.causal = 1;
    flashc_fill_contiguous_strides(&d);
    double t[25];
    for (int w = 0; w < reps; w++) flashc_fwd(ctx, &d, q, k, v, o, lse, NULL, 0, NULL);
    for (int b = 0; b < blocks; b++) {
        double t0 = now();
        for (int r = 0; r < reps / blocks; r++)
            if (flashc_fwd(ctx, &d, q, k, v, o, lse, NULL, 0, NULL) != FLASHC_OK) { fprintf(stderr, "%%s\n", flashc_ctx_last_error(ctx)); return 1; }
        t[b] = (now() - t0) / (reps / blocks) * 1e6;
    }
    qsort(t, blocks, sizeof t[0], cmp);
    printf("%%.3f\n", t[blocks / 2]);
    flashc_ctx_free(ctx);
    return 0;
}
"""


def c_time(lib, reps):
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "loop.c", Path(tmp) / "loop"
        src.write_text(C_LOOP % (B, S, H, D))
        # the library's soname is libflashc.so.0: give the loader that name, next to the program
        (Path(tmp) / "libflashc.so.0").symlink_to(Path(lib).resolve())
        subprocess.run(["cc", "-O2", "-std=c11", "-D_POSIX_C_SOURCE=200809L", f"-I{REPO / 'include'}", str(src),
                        "-o", str(exe), str(lib), f"-Wl,-rpath,{tmp}"], check=True)
        return [float(subprocess.run([str(exe), str(reps), clock], check=True, capture_output=True,
                                     text=True).stdout) for clock in ("wall", "thread")]


def py_time(fn, reps, blocks=25):
    """(wall, calling-thread CPU) median microseconds per call. The thread CPU time is what the
    binding adds that machine load does not inflate (the C loop reports the same clock)."""
    for _ in range(reps // 4):
        fn()
    res = []
    for clock in (time.perf_counter, time.thread_time):
        ts = []
        for _ in range(blocks):
            t0 = clock()
            for _ in range(reps // blocks):
                fn()
            ts.append((clock() - t0) / (reps // blocks) * 1e6)
        res.append(statistics.median(ts))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.environ.get("FLASHC_LIBRARY", str(REPO / "build" / "libflashc.so")))
    ap.add_argument("--repeats", type=int, default=20000)
    a = ap.parse_args()
    os.environ["FLASHC_LIBRARY"] = a.lib
    sys.path.insert(0, str(REPO / "python"))
    import numpy as np

    import flashc

    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((B, S, H, D)).astype(np.float32) for _ in range(3))
    c_us = c_time(a.lib, a.repeats)
    rows = [("C loop (flashc_fwd)", c_us)]
    from flashc import _api, _lib

    ctx = _lib.get_ctx(_lib.BACKEND_CPU)
    o, lse = np.empty_like(q), np.empty((B, H, S), np.float32)
    st = (S * H * D, H * D, D)
    desc = _api.make_desc(_lib.DTYPE_F32, B, S, S, H, H, D, st, st, st, st, None, 0.0, True, -1, -1)
    ptrs = (q.ctypes.data, k.ctypes.data, v.ctypes.data, o.ctypes.data, lse.ctypes.data)
    rows.append(("ctypes call only (prebuilt args)", py_time(lambda: _lib.fwd(ctx, desc, *ptrs, None, 0, None),
                                                             a.repeats)))
    rows.append(("flashc.attention numpy", py_time(lambda: flashc.attention(q, k, v, causal=True), a.repeats)))
    try:
        import torch

        tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
        rows.append(("flashc.attention torch", py_time(lambda: flashc.attention(tq, tk, tv, causal=True), a.repeats)))
        gq, gk, gv = (t.clone().requires_grad_(True) for t in (tq, tk, tv))
        rows.append(("flashc.attention torch, autograd", py_time(lambda: flashc.attention(gq, gk, gv, causal=True),
                                                                  a.repeats // 4)))
        from flashc.flash_attn import flash_attn_func

        rows.append(("flash_attn_func torch", py_time(lambda: flash_attn_func(tq, tk, tv, causal=True), a.repeats)))
        torch.set_num_threads(torch.get_num_threads())
    except ImportError:
        pass
    print(f"batch {B}, seqlen {S}, heads {H}, head_dim {D}, fp32, causal, CPU backend, "
          f"FLASHC_NUM_THREADS={os.environ.get('FLASHC_NUM_THREADS', 'all')}, load {os.getloadavg()[0]:.1f}")
    print(f"  {'median us per call':36s} {'wall':>8s} {'over C':>8s} {'thread':>8s} {'over C':>8s}")
    for name, (wall, cpu) in rows:
        print(f"  {name:36s} {wall:8.2f} {wall - c_us[0]:+8.2f} {cpu:8.2f} {cpu - c_us[1]:+8.2f}")


if __name__ == "__main__":
    main()
