#!/usr/bin/env python3
"""profile_decode.py -- one decode shape (bf16, GQA 32/8, head_dim 128, seqlen_q 1, contiguous cache)
through flashc and through SDPA CUDNN, three calls each, for Nsight Compute, e.g.

    ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \\
        python3 dev/cuda/profile_decode.py --lib build/libflashc.so --batch 16 --seqlen-k 16384

Every kernel the script launches is profiled; the flashc ones are named flashc_decode_*.
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
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seqlen-k", type=int, default=16384)
    args = ap.parse_args()
    fc = bg.Flashc(os.path.abspath(args.lib))
    x = bg.decode_inputs(args.batch, args.seqlen_k)
    for _ in range(3):
        fc.kvcache(x.d, x.kv, x.q, x.k, x.v, None, None, x.o, x.lse)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for _ in range(3):
            F.scaled_dot_product_attention(x.q.transpose(1, 2), x.k.transpose(1, 2), x.v.transpose(1, 2),
                                           enable_gqa=True)
    torch.cuda.synchronize()
    print(f"profile_decode: done (K + V {4 * x.k.numel() / 1e6:.0f} MB)", flush=True)


if __name__ == "__main__":
    main()
