#!/usr/bin/env python3
"""bench_fp8.py -- the e4m3 forward beside flashc's bf16 forward on the same inputs (rounded to
e4m3), one process, training shapes (hidden 2048, B * S = 16k), TFLOP/s and the ratio; FLASHC_CUDA_SM90
= 1 / 2 in the environment forces the lockstep / ping-pong loop of both.

Usage: python3 dev/cuda/bench_fp8.py --lib build/libflashc.so [--dims 128,256] [--seqlens 4096,8192]
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
    ap.add_argument("--dims", default="128,256")
    ap.add_argument("--seqlens", default="1024,4096,8192")
    args = ap.parse_args()
    fc = bg.Flashc(os.path.abspath(args.lib))
    print(f"FLASHC_CUDA_SM90={os.environ.get('FLASHC_CUDA_SM90', '')}")
    for D in (int(x) for x in args.dims.split(",")):
        for causal in (False, True):
            for S in (int(x) for x in args.seqlens.split(",")):
                x = bg.training_inputs(fc, D, S, causal, e4m3=True)
                fl = bg.fwd_flops(x.B, x.H, S, D, causal)
                t = [0.0, 0.0]
                for rep in range(3):  # interleaved: the two see the same clocks
                    t[0] += bg.time_ms(lambda: fc.fwd(x.d, x.q, x.k, x.v, x.o, x.lse), 20)
                    t[1] += bg.time_ms(lambda: fc.fwd(x.d8, x.q8, x.k8, x.v8, x.o8, x.lse), 20)
                tb, t8 = (fl / (x / 3 * 1e-3) / 1e12 for x in t)
                print(f"D={D:3d} causal={int(causal)} S={S:5d}  bf16 {tb:6.1f}  e4m3 {t8:6.1f}  x {t8 / tb:.2f}", flush=True)
                del x
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
