#!/usr/bin/env python3
"""profile_train.py -- warm-up calls, then one call of the tuned sm_90a forward (bf16, then e4m3)
or backward, on a training shape (B * S = 16k, hidden 2048), for Nsight Compute:

    ncu --kernel-name regex:flashc_fwd_sm90_ws_kernel --launch-skip 4 --launch-count 2 \\
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats \\
        python3 dev/cuda/profile_train.py --lib build/libflashc.so
    ncu --kernel-name regex:flashc_bwd_sm90_kernel --launch-skip 3 --launch-count 1 \\
        --section WarpStateStats --section SourceCounters -o bwd64 \\
        python3 dev/cuda/profile_train.py --lib build/libflashc.so --bwd --dim 64
    ncu --import bwd64.ncu-rep --page source --csv --print-source sass > bwd64.csv   (stalls per SASS line)

Forward: launches 1-4 are warm-ups (two bf16, two e4m3), then one bf16 and one e4m3; at --dim 64
(no e4m3 kernel) launches 1-2 are the warm-ups and 3 the bf16 one. Backward: three warm-ups, then
one (after one forward for O and LSE).
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
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--bwd", action="store_true")
    args = ap.parse_args()
    fc = bg.Flashc(os.path.abspath(args.lib))
    e4m3 = not args.bwd and args.dim >= 128  # e4m3 is compiled for head_dim 128 and 256
    x = bg.training_inputs(fc, args.dim, args.seqlen, args.causal, bwd=args.bwd, e4m3=e4m3)
    if args.bwd:
        fc.fwd(x.d, x.q, x.k, x.v, x.o, x.lse)
        g = [torch.empty_like(x.q) for _ in range(3)]
        for _ in range(4):  # 3 warm-ups, then the one to profile
            fc.bwd(x.d, x.q, x.k, x.v, x.o, x.lse, x.do, *g, x.ws)
    else:
        for _ in range(2):  # warm-up: launches 1-2 bf16, 3-4 e4m3
            fc.fwd(x.d, x.q, x.k, x.v, x.o, x.lse)
        for _ in range(2 if e4m3 else 0):
            fc.fwd(x.d8, x.q8, x.k8, x.v8, x.o8, x.lse)
        fc.fwd(x.d, x.q, x.k, x.v, x.o, x.lse)
        if e4m3:
            fc.fwd(x.d8, x.q8, x.k8, x.v8, x.o8, x.lse)
    torch.cuda.synchronize()
    print("profile_train: done", flush=True)


if __name__ == "__main__":
    main()
