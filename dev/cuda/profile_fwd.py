#!/usr/bin/env python3
"""profile_fwd.py -- one bf16 and one e4m3 forward of the tuned sm_90a kernel, for Nsight Compute:

    ncu --kernel-name regex:flashc_fwd_sm90_ws_kernel --launch-skip 4 --launch-count 2 \\
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats \\
        python3 dev/cuda/profile_fwd.py --lib build/libflashc.so

(launches 1-4 are warm-ups: two bf16, two e4m3; then one bf16, one e4m3). Shape: bf16 training shape B * S = 16k, hidden 2048.
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
    args = ap.parse_args()
    fc = bg.Flashc(os.path.abspath(args.lib))
    x = bg.training_inputs(fc, args.dim, args.seqlen, False, e4m3=True)
    for _ in range(2):  # warm-up: launches 1-2 bf16, 3-4 e4m3
        fc.fwd(x.d, x.q, x.k, x.v, x.o, x.lse)
    for _ in range(2):
        fc.fwd(x.d8, x.q8, x.k8, x.v8, x.o8, x.lse)
    fc.fwd(x.d, x.q, x.k, x.v, x.o, x.lse)
    fc.fwd(x.d8, x.q8, x.k8, x.v8, x.o8, x.lse)
    torch.cuda.synchronize()
    print("profile_fwd: done", flush=True)


if __name__ == "__main__":
    main()
