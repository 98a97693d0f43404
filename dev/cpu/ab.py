#!/usr/bin/env python3
"""ab.py -- two builds of flashc-bench on the CPU, interleaved, on one shape: the median GFLOP/s of
each over ROUNDS runs (the order alternates every round, so both see the same load on a shared
machine) and their ratio B / A.

Usage: python3 dev/cpu/ab.py --a OLD/flashc-bench --b NEW/flashc-bench [--rounds 5] -- BENCH_ARGS
  e.g. ... -- --batch 8 --heads 32 --seqlen-q 512 --head-dim 64 --non-causal
OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for the runs, as for any benchmark here.
"""
import argparse
import os
import statistics
import subprocess
import sys


def interleaved(run_one):
    """The A/B driver this script and ab_decode.py share: --a, --b, --rounds, BENCH_ARGS after "--";
    OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset; the order alternates every round. run_one(exe,
    bench_args, env) returns {key: value} for one run. Returns {key: [values]} for A and for B."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("bench_args", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    extra = [x for x in args.bench_args if x != "--"]
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    res = {"a": {}, "b": {}}
    for r in range(args.rounds):
        for name in ("a", "b") if r % 2 == 0 else ("b", "a"):
            for key, value in run_one(getattr(args, name), extra, env).items():
                res[name].setdefault(key, []).append(value)
    return res["a"], res["b"]


def run_bench(exe, extra, env):
    cmd = [exe, "--backend", "cpu", "--no-check", "--no-peers", "--repeats", "3", "--budget", "0.4"]
    out = subprocess.run(cmd + extra, capture_output=True, text=True, env=env, check=True).stdout
    res = {}
    for line in out.splitlines():
        f = line.split()
        if f and f[0] in ("fwd", "bwd") and "|" in f:  # keyed by the whole row's label: one shape each
            res[" ".join(f[:f.index("|")])] = float(f[f.index("|") + 3])  # GFLOP/s
    return res


def main():
    res_a, res_b = interleaved(run_bench)
    for key in res_a:
        a, b = res_a[key], res_b.get(key, [])
        if not b:
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{key}: A {ma:6.1f}  B {mb:6.1f} GFLOP/s  B/A {mb / ma:.3f}"
              f"  (n={len(a)}; A {min(a):.0f}-{max(a):.0f}, B {min(b):.0f}-{max(b):.0f})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
