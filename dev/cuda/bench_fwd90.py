#!/usr/bin/env python3
"""Forward-only A/B timing of the CUDA backend's loops, one flashc context per FLASHC_CUDA_SM90 mode
(0 mma.sync, 1 wgmma lockstep, 2 wgmma ping-pong, 3 wgmma warp-specialized with TMA, t = tuned),
beside SDPA FLASH / CUDNN, with the shapes, FLOP count and timing of bench/bench_gpu.py (bf16,
B * S = 16k, hidden 2048). The first mode is the one the ratios are taken of; max|o - o_x| is
against the second mode.

Usage: python3 dev/cuda/bench_fwd90.py [--lib build/libflashc.so] [--modes t,0] [--dims 64,128,256] [--seqlens ...]
"""
import argparse
import os
import sys

import torch
from torch.nn.attention import SDPBackend

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import bench_gpu as bg  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libflashc.so")
    ap.add_argument("--modes", default="t,0")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--causal", default="0,1")
    args = ap.parse_args()
    lib = os.path.abspath(args.lib)
    modes = args.modes.split(",")
    ctx = {}
    for m in modes:
        if m == "t":
            os.environ.pop("FLASHC_CUDA_SM90", None)
        else:
            os.environ["FLASHC_CUDA_SM90"] = m
        ctx[m] = bg.Flashc(lib)
    os.environ.pop("FLASHC_CUDA_SM90", None)
    m0, m1 = modes[0], modes[1 % len(modes)]
    head = " ".join(f"{'m' + m:>6}" for m in modes)
    print(f"{'D':>3} {'S':>5} c | {head} {'flash':>6} {'cudnn':>6} | {'x m' + m1:>6} {'x flash':>7} {'x cudnn':>7} | "
          f"max|o-o_m{m1}| max|o-o_flash|", flush=True)
    for D in [int(x) for x in args.dims.split(",")]:
        for causal in (bool(int(c)) for c in args.causal.split(",")):
            for S in [int(x) for x in args.seqlens.split(",")]:
                B, H = 16384 // S, 2048 // D
                fl = bg.fwd_flops(B, H, S, D, causal)
                torch.manual_seed(S * 1000 + D + causal)
                q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                o = {m: torch.empty_like(q) for m in modes}
                lse = {m: torch.empty(B, H, S, device="cuda", dtype=torch.float32) for m in modes}
                d = ctx[m0].desc(B, S, H, D, causal)
                for m in modes:
                    ctx[m].fwd(d, q, k, v, o[m], lse[m])
                q4, k4, v4 = (t.transpose(1, 2) for t in (q, k, v))
                of = bg.sdpa_call(SDPBackend.FLASH_ATTENTION, q4, k4, v4, causal).transpose(1, 2)
                torch.cuda.synchronize()
                e_m1 = (o[m0].float() - o[m1].float()).abs().max().item()
                e_fl = (o[m0].float() - of.float()).abs().max().item()
                e_lse = (lse[m0] - lse[m1]).abs().max().item()
                del of
                est = bg.time_ms(lambda: ctx[m0].fwd(d, q, k, v, o[m0], lse[m0]), 1, warmup=1)
                r = bg.reps_for(est)
                t = {}
                for m in modes:
                    t[m] = bg.time_ms(lambda: ctx[m].fwd(d, q, k, v, o[m], lse[m]), r)
                for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    try:
                        t[name] = bg.time_ms(lambda: bg.sdpa_call(be, q4, k4, v4, causal), r)
                    except RuntimeError:
                        t[name] = float("nan")
                tf = {kk: fl / (ms * 1e-3) / 1e12 for kk, ms in t.items()}
                cols = " ".join(f"{tf[m]:6.1f}" for m in modes)
                print(f"{D:3d} {S:5d} {int(causal)} | {cols} {tf['flash']:6.1f} {tf['cudnn']:6.1f} | "
                      f"{tf[m0] / tf[m1]:6.2f} {tf[m0] / tf['flash']:7.2f} {tf[m0] / tf['cudnn']:7.2f} | "
                      f"{e_m1:.3g} {e_fl:.3g} (lse {e_lse:.3g})", flush=True)
                del q, k, v, o, lse
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
