#!/usr/bin/env python3
"""profile_peers.py -- one training shape through flashc, SDPA CUDNN and SDPA FLASH, forward or
backward, two warm-ups then one profiled call each, for Nsight Compute. What a peer's kernel is
(grid, block, registers, shared memory: its tile) is what LaunchStats tells, e.g.

    ncu --section LaunchStats --section Occupancy --section SpeedOfLight --launch-skip-before-match 0 \\
        python3 dev/cuda/profile_peers.py --lib build/libflashc.so --dim 128 --seqlen 512 [--causal] [--bwd]

Shape: bf16, B * S = 16k, hidden 2048 (bench_gpu.py's training shapes). Every kernel launched is
profiled (ncu's --kernel-name regex:... narrows it); the script prints the order it calls them in.
Our backward alone, its third call (at --dim 256 each backward launches two sm90 kernels, dK/dV then
dQ: skip 4, count 2):

    ncu --kernel-name regex:flashc_bwd_sm90 --launch-skip 2 --launch-count 1 --section SpeedOfLight \
        --section WarpStateStats python3 dev/cuda/profile_peers.py --lib build/libflashc.so --dim 64 --bwd
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import bench_gpu as bg  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libflashc.so")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=512)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--bwd", action="store_true")
    args = ap.parse_args()
    fc = bg.Flashc(os.path.abspath(args.lib))
    x = bg.training_inputs(fc, args.dim, args.seqlen, args.causal, bwd=args.bwd)
    q4, k4, v4 = (t.transpose(1, 2).detach().requires_grad_(args.bwd) for t in (x.q, x.k, x.v))

    def run_flashc():
        fc.fwd(x.d, x.q, x.k, x.v, x.o, x.lse)
        if args.bwd:
            dq, dk, dv = (torch.empty_like(x.q) for _ in range(3))
            fc.bwd(x.d, x.q, x.k, x.v, x.o, x.lse, x.do, dq, dk, dv, x.ws)

    def run_sdpa(backend):
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(q4, k4, v4, is_causal=args.causal)
            if args.bwd:
                o.backward(x.do.transpose(1, 2))

    for name, fn in (("flashc", run_flashc), ("sdpa_cudnn", lambda: run_sdpa(SDPBackend.CUDNN_ATTENTION)),
                     ("sdpa_flash", lambda: run_sdpa(SDPBackend.FLASH_ATTENTION))):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        print(f"profile_peers: {name} x3 ({'fwd + bwd' if args.bwd else 'fwd'}, D={args.dim} S={args.seqlen} "
              f"causal={int(args.causal)} B={x.B} H={x.H})", flush=True)


if __name__ == "__main__":
    main()
