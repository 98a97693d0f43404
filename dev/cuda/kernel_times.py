#!/usr/bin/env python3
"""kernel_times.py -- where one call's GPU time goes, kernel by kernel: flashc's forward or backward
beside SDPA CUDNN's on the same training shape (hidden 2048, B * S = 16k, bf16), from the CUDA
activity trace of torch.profiler (kernel durations as the GPU ran them, launches not serialised).

    python3 dev/cuda/kernel_times.py --lib build/libflashc.so --bwd --dims 64,128 --seqlens 512,2048,16384
    python3 dev/cuda/kernel_times.py --lib build/libflashc.so --decode 1:65536,16:16384
    python3 dev/cuda/kernel_times.py --lib build/libflashc.so --e4m3 --dims 128 --seqlens 4096,16384

Prints, per shape and implementation, each kernel's mean microseconds per call and its share, with
its launch (grid, block, registers per thread, shared memory) as the trace records it. --decode
B:Sk,... times the decode shapes of bench_gpu.py (GQA 32/8, head_dim 128, seqlen_q 1, contiguous
bf16 cache) instead of the training shapes.
"""
import argparse
import collections
import json
import os
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import bench_gpu as bg  # noqa: E402


def kernel_table(fn, reps):
    """{kernel name: (mean us per call, launch)} over reps calls, from the profiler's chrome trace."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    t, launch = collections.Counter(), {}
    for e in events:
        if e.get("cat") != "kernel":
            continue
        name, a = e["name"][:70], e.get("args", {})
        t[name] += e["dur"] / reps
        launch[name] = (f"grid {a.get('grid')} block {a.get('block')} regs {a.get('registers per thread')} "
                        f"smem {a.get('shared memory')}")
    return t, launch


def show(label, tl):
    t, launch = tl
    tot = sum(t.values())
    print(f"  {label}: {tot:9.1f} us per call")
    for name, us in t.most_common():
        print(f"    {us:9.1f} us {100 * us / tot:5.1f}%  {name}\n{'':22}{launch[name]}")


def decode(fc, B, Sk, reps):
    x = bg.decode_inputs(B, Sk)
    print(f"decode B={B} Sk={Sk} (K + V {4 * x.k.numel() / 1e6:.0f} MB)")
    show("flashc", kernel_table(lambda: fc.kvcache(x.d, x.kv, x.q, x.k, x.v, None, None, x.o, x.lse), reps))
    q4, k4, v4 = (t.transpose(1, 2) for t in (x.q, x.k, x.v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        show("cudnn", kernel_table(lambda: F.scaled_dot_product_attention(q4, k4, v4, enable_gqa=True), reps))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libflashc.so")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,2048,16384")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--bwd", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--decode", default="")
    ap.add_argument("--e4m3", action="store_true", help="the e4m3 forward (its V^T pre-pass and kernel) first")
    args = ap.parse_args()
    fc = bg.Flashc(os.path.abspath(args.lib))
    if args.decode:
        for shape in args.decode.split(","):
            B, Sk = map(int, shape.split(":"))
            decode(fc, B, Sk, args.reps)
            torch.cuda.empty_cache()
        return
    for D in map(int, args.dims.split(",")):
        for S in map(int, args.seqlens.split(",")):
            x = bg.training_inputs(fc, D, S, args.causal, bwd=args.bwd)
            print(f"D={D} S={S} B={x.B} H={x.H} causal={int(args.causal)} {'bwd' if args.bwd else 'fwd'}")
            if args.e4m3 and not args.bwd:
                x = bg.training_inputs(fc, D, S, args.causal, e4m3=True)
                show("flashc e4m3", kernel_table(lambda: fc.fwd(x.d8, x.q8, x.k8, x.v8, x.o8, x.lse), args.reps))
            fc.fwd(x.d, x.q, x.k, x.v, x.o, x.lse)
            if args.bwd:
                g = [torch.empty_like(x.q) for _ in range(3)]
                show("flashc", kernel_table(lambda: fc.bwd(x.d, x.q, x.k, x.v, x.o, x.lse, x.do, *g, x.ws), args.reps))
            else:
                show("flashc", kernel_table(lambda: fc.fwd(x.d, x.q, x.k, x.v, x.o, x.lse), args.reps))
            # SDPA takes (B, H, S, D); the same memory as flashc's (B, S, H, D) through a transpose
            q4, k4, v4 = (t.transpose(1, 2).requires_grad_(args.bwd) for t in (x.q, x.k, x.v))
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                o4 = F.scaled_dot_product_attention(q4, k4, v4, is_causal=args.causal)
                if args.bwd:
                    do4 = x.do.transpose(1, 2)
                    show("cudnn (backward only)",
                         kernel_table(lambda: torch.autograd.grad(o4, (q4, k4, v4), do4, retain_graph=True), args.reps))
                else:
                    show("cudnn", kernel_table(lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=args.causal),
                                               args.reps))
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
