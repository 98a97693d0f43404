#!/usr/bin/env python3
"""profile_bwd.py -- three bf16 backwards (two warm-ups) of one training shape, for Nsight Compute:

    ncu --kernel-name regex:flashc_bwd_sm90 --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats \\
        python3 dev/cuda/profile_bwd.py --lib build/libflashc.so --dim 64

(at --dim 256 each backward launches two sm90 kernels, dK/dV then dQ: skip 4, count 2).
Shape: B * S = 16k, hidden 2048, non-causal unless --causal.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import bench_gpu as bg  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libflashc.so")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    args = ap.parse_args()
    fc = bg.Flashc(os.path.abspath(args.lib))
    x = bg.training_inputs(fc, args.dim, args.seqlen, args.causal, bwd=True)
    dq, dk, dv = (torch.empty_like(x.q) for _ in range(3))
    fc.fwd(x.d, x.q, x.k, x.v, x.o, x.lse)
    for _ in range(3):
        fc.bwd(x.d, x.q, x.k, x.v, x.o, x.lse, x.do, dq, dk, dv, x.ws)
    torch.cuda.synchronize()
    print("profile_bwd: done", flush=True)


if __name__ == "__main__":
    main()
