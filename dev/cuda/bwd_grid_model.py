#!/usr/bin/env python3
"""bwd_grid_model.py -- a list-scheduling model of the sm90 backward's dK / dV grid (no GPU needed).

One CTA per (key block, batch, kv head), one CTA an SM, started in blockIdx order as SMs free up (the
usual in-order dispatch; not a promise of the hardware). A CTA costs its query steps (BM rows of one
query head each) plus FIX steps of start and epilogue; causal key block j sees (S - BN j) / BM
steps. Prints the makespan over the balanced bound (total / SMs) for the benchmark's shapes (hidden
2048, B * S = 16k: B H_kv = 2048 / D * 16k / S):
  heads_outer   a head's key blocks side by side, the longest first (main before session 30);
  tail-lpt      the same with the last WAVES waves' worth of heads key block outer (grid_tail_lpt,
                as main runs it where a wave holds 2 heads or more: the gate is not modelled);
  non-causal    for comparison: equal CTAs (2048 at D = 128 and 256, 15.5 waves of 132).
Usage: python3 dev/cuda/bwd_grid_model.py [--sms 132] [--fix 2] [--waves 2] [--dim 128]
--dim 64 / 128 / 256: the kernel's key block BN and query step BM (128 / 64 at D = 128; 128 / 128
at D = 64; 64 / 64 for D = 256's dK / dV kernel) and the heads of hidden 2048 (2048 / D).
A model, not a measurement: it ignores L2 effects, the cheaper masked diagonal steps and the per-SM
spread in speed. Session 29 wrote it to size the causal tail before any GPU run; session 30
measured the tail 1.01-1.05x at S = 1k-8k, 0.98-1.00x ungated at 16k
(bench/results/h200-2026-12-04-s30.txt).
"""
import argparse
import heapq


def makespan(costs, sms):
    free = [0.0] * sms
    for c in costs:
        heapq.heappush(free, heapq.heappop(free) + c)
    return max(free) / (sum(costs) / sms)


def grid(S, BH, causal, fix, tail_ctas, BN=128, BM=64):
    n = (S + BN - 1) // BN
    cost = [((S - j * BN) // BM if causal else S // BM) + fix for j in range(n)]
    k = min(BH, -(-tail_ctas // n)) if tail_ctas > 0 else 0
    return [cost[j] for _ in range(BH - k) for j in range(n)] + [cost[j] for j in range(n) for _ in range(k)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--fix", type=float, default=2.0)
    ap.add_argument("--waves", type=int, default=2)
    ap.add_argument("--dim", type=int, default=128, choices=(64, 128, 256))
    a = ap.parse_args()
    BN, BM = {64: (128, 128), 128: (128, 64), 256: (64, 64)}[a.dim]
    print(f"{'S':>6} {'B*H_kv':>7} {'heads_outer':>12} {'tail-lpt':>9} {'non-causal':>11}")
    for S in (512, 1024, 2048, 4096, 8192, 16384):
        BH = 2048 // a.dim * 16384 // S
        print(f"{S:6d} {BH:7d} {makespan(grid(S, BH, True, a.fix, 0, BN, BM), a.sms):12.3f}"
              f" {makespan(grid(S, BH, True, a.fix, a.waves * a.sms, BN, BM), a.sms):9.3f}"
              f" {makespan(grid(S, BH, False, a.fix, 0, BN, BM), a.sms):11.3f}")


if __name__ == "__main__":
    main()
