#!/usr/bin/env python3
"""ab_decode.py -- two builds of flashc-bench-decode on the CPU, interleaved: each shape line's
median GB/s of each over ROUNDS runs (the order alternates every round, so both see the same load
on a shared machine) and their ratio B / A, with each side's range.

Usage: python3 dev/cpu/ab_decode.py --a OLD/flashc-bench-decode --b NEW/flashc-bench-decode
                                    [--rounds 5] -- BENCH_ARGS
  e.g. ... -- --kv 16k,64k --batch 1,16 --seqlen-q 1,4 --repeats 7
(build A from a worktree of the base commit: the bench source may be either side's.)
OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for the runs, as for any benchmark here.
"""
import statistics
import subprocess

from ab import interleaved  # the shared driver (this folder is on sys.path when run as a script)


def run(exe, args, env):
    out = subprocess.run([exe, "--no-check"] + args, env=env, capture_output=True, text=True, check=True).stdout
    res = {}
    for line in out.splitlines():
        f = line.split()
        # batch sq kv [layout: "contig" or "page N"; none before --page] ms min GB/s read %read ...
        if len(f) < 8 or not (f[0].isdigit() and f[1].isdigit() and f[2].isdigit()) or "skipped:" in f:
            continue
        if f[3] == "contig":
            lay, rest = "contig", f[4:]
        elif f[3] == "page":
            lay, rest = "page " + f[4], f[5:]
        else:  # a bench built before --page: contiguous only
            lay, rest = "contig", f[3:]
        res[(int(f[0]), int(f[1]), int(f[2]), lay)] = float(rest[2])
    return res


def main():
    res_a, res_b = interleaved(run)
    print(f"{'batch':>5} {'sq':>3} {'kv':>6} {'layout':>8} | {'A GB/s':>7} {'range':>13} | {'B GB/s':>7} {'range':>13} | B / A")
    for key in sorted(res_a):
        a, b = res_a[key], res_b.get(key, [])
        if not b:
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{key[0]:5d} {key[1]:3d} {key[2]:6d} {key[3]:>8} | {ma:7.2f} {min(a):6.2f}-{max(a):6.2f} | "
              f"{mb:7.2f} {min(b):6.2f}-{max(b):6.2f} | {mb / ma:.3f}")


if __name__ == "__main__":
    main()
