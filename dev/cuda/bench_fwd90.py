#!/usr/bin/env python3
"""Forward-only A/B timing of the CUDA backend: the wgmma (sm_90a) forward against the mma.sync one
(FLASHC_CUDA_SM90=0 in a second context of the same library) and SDPA FLASH / CUDNN, with the
shapes, FLOP count and timing of bench/bench_gpu.py (bf16, B * S = 16k, hidden 2048).

Usage: python3 dev/cuda/bench_fwd90.py [--lib build/libflashc.so] [--dims 64,128,256] [--seqlens ...]
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
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    args = ap.parse_args()
    lib = os.path.abspath(args.lib)
    os.environ.pop("FLASHC_CUDA_SM90", None)
    new = bg.Flashc(lib)
    os.environ["FLASHC_CUDA_SM90"] = "0"
    old = bg.Flashc(lib)
    del os.environ["FLASHC_CUDA_SM90"]
    print(f"{'D':>3} {'S':>5} c | {'sm90':>6} {'mma':>6} {'flash':>6} {'cudnn':>6} | "
          f"{'x mma':>6} {'x flash':>7} {'x cudnn':>7} | max|o-o_mma| max|o-o_flash|", flush=True)
    for D in [int(x) for x in args.dims.split(",")]:
        for causal in (False, True):
            for S in [int(x) for x in args.seqlens.split(",")]:
                B, H = 16384 // S, 2048 // D
                fl = bg.fwd_flops(B, H, S, D, causal)
                torch.manual_seed(S * 1000 + D + causal)
                q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                o1, o2 = torch.empty_like(q), torch.empty_like(q)
                lse1 = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
                lse2 = torch.empty_like(lse1)
                d = new.desc(B, S, H, D, causal)
                new.fwd(d, q, k, v, o1, lse1)
                old.fwd(d, q, k, v, o2, lse2)
                q4, k4, v4 = (t.transpose(1, 2) for t in (q, k, v))
                of = bg.sdpa_call(SDPBackend.FLASH_ATTENTION, q4, k4, v4, causal).transpose(1, 2)
                torch.cuda.synchronize()
                e_old = (o1.float() - o2.float()).abs().max().item()
                e_fl = (o1.float() - of.float()).abs().max().item()
                e_lse = (lse1 - lse2).abs().max().item()
                del of
                est = bg.time_ms(lambda: new.fwd(d, q, k, v, o1, lse1), 1, warmup=1)
                r = bg.reps_for(est)
                t = {}
                t["sm90"] = bg.time_ms(lambda: new.fwd(d, q, k, v, o1, lse1), r)
                t["mma"] = bg.time_ms(lambda: old.fwd(d, q, k, v, o2, lse2), r)
                for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    try:
                        t[name] = bg.time_ms(lambda: bg.sdpa_call(be, q4, k4, v4, causal), r)
                    except RuntimeError:
                        t[name] = float("nan")
                tf = {kk: fl / (ms * 1e-3) / 1e12 for kk, ms in t.items()}
                print(f"{D:3d} {S:5d} {int(causal)} | {tf['sm90']:6.1f} {tf['mma']:6.1f} {tf['flash']:6.1f} "
                      f"{tf['cudnn']:6.1f} | {tf['sm90'] / tf['mma']:6.2f} {tf['sm90'] / tf['flash']:7.2f} "
                      f"{tf['sm90'] / tf['cudnn']:7.2f} | {e_old:.3g} {e_fl:.3g} (lse {e_lse:.3g})", flush=True)
                del q, k, v, o1, o2, lse1, lse2
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
