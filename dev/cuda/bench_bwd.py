#!/usr/bin/env python3
"""bench_bwd.py -- the backward alone: flashc as dispatched (on an H200 the sm_90a wgmma kernel for
head dim 128, the mma.sync kernel otherwise), flashc's mma.sync kernel (FLASHC_CUDA_SM90=0 in a
second context), SDPA FLASH and SDPA CUDNN, on the same inputs, in one
process. Shapes, FLOPs and timing as bench/bench_gpu.py (whose helpers it imports): bf16, hidden
2048, B * S = 16k, backward FLOPs = 2.5 x forward. Prints one line per shape with TFLOP/s and the
max |flashc - SDPA FLASH| of dq, dk, dv for both flashc paths; --out writes JSON lines.

Usage: python3 dev/cuda/bench_bwd.py --lib build/libflashc.so [--dims 64,128] [--seqlens 1024,4096] [--out F]
"""
import argparse
import json
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
    ap.add_argument("--out", default=None)
    ap.add_argument("--modes", default="", help="extra FLASHC_CUDA_SM90 values timed beside (e.g. 2,4)")
    args = ap.parse_args()
    lib = os.path.abspath(args.lib)
    os.environ.pop("FLASHC_CUDA_SM90", None)
    fc_new = bg.Flashc(lib)
    os.environ["FLASHC_CUDA_SM90"] = "0"
    fc_old = bg.Flashc(lib)
    extra = {}
    for m in (x for x in args.modes.split(",") if x):
        os.environ["FLASHC_CUDA_SM90"] = m
        extra["m" + m] = bg.Flashc(lib)
    os.environ.pop("FLASHC_CUDA_SM90", None)
    device = torch.cuda.get_device_name()
    print(f"bench_bwd: {device}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}", flush=True)
    print(f"{'D':>3} {'c':>1} {'S':>5} | {'sm90':>6} {'old':>6} {'flash':>6} {'cudnn':>6} | {'x flash':>7} {'x cudnn':>7}"
          f" {'x old':>6} | err sm90 / old (max |dqkv|)", flush=True)
    lines = []
    for D in [int(x) for x in args.dims.split(",")]:
        for causal in (False, True):
            for S in [int(x) for x in args.seqlens.split(",")]:
                torch.manual_seed(S * 1000 + D + causal)
                x = bg.training_inputs(fc_new, D, S, causal, bwd=True)
                B, H, q, k, v, do, o, lse, d, ws = x.B, x.H, x.q, x.k, x.v, x.do, x.o, x.lse, x.d, x.ws
                fl = 2.5 * bg.fwd_flops(B, H, S, D, causal)
                fc_new.fwd(d, q, k, v, o, lse)
                res, grads = {}, {}
                for name, fc in (("sm90", fc_new), ("old", fc_old), *extra.items()):
                    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
                    run = lambda: fc.bwd(d, q, k, v, o, lse, do, dq, dk, dv, ws)  # noqa: E731
                    run()
                    torch.cuda.synchronize()
                    est = bg.time_ms(run, 1, warmup=1)
                    res[name] = bg.time_ms(run, bg.reps_for(est))
                    grads[name] = (dq, dk, dv)
                qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
                q4, k4, v4, do4 = (t.transpose(1, 2) for t in (qg, kg, vg, do))
                ref = None
                for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    try:
                        out = bg.sdpa_call(backend, q4, k4, v4, causal)
                        g = torch.autograd.grad(out, (qg, kg, vg), do4, retain_graph=True)
                        torch.cuda.synchronize()
                    except RuntimeError as e:
                        print(f"  {name} unavailable: {str(e).splitlines()[0]}")
                        continue
                    if name == "flash":
                        ref = g
                    res[name] = bg.time_ms(lambda: torch.autograd.grad(out, (qg, kg, vg), do4, retain_graph=True),
                                           bg.reps_for(res["old"]))
                    del out
                errs = []
                scale = max(t.float().abs().max().item() for t in ref) if ref else float("nan")
                for name in ("sm90", "old"):
                    errs.append(max((a.float() - b.float()).abs().max().item() for a, b in zip(grads[name], ref))
                                if ref else float("nan"))
                tf = {n: fl / (ms * 1e-3) / 1e12 for n, ms in res.items()}
                nan = float("nan")
                print(f"{D:3d} {int(causal):1d} {S:5d} | {tf['sm90']:6.1f} {tf['old']:6.1f} {tf.get('flash', nan):6.1f} "
                      f"{tf.get('cudnn', nan):6.1f} | {tf['sm90'] / tf.get('flash', nan):7.2f} "
                      f"{tf['sm90'] / tf.get('cudnn', nan):7.2f} {tf['sm90'] / tf['old']:6.2f} | "
                      f"{errs[0]:.3g} / {errs[1]:.3g} ({scale:.3g})"
                      + "".join(f" | {m} {tf[m]:6.1f}" for m in extra), flush=True)
                base = dict(backend="cuda", device=device, dtype="bf16", direction="bwd", batch=B, heads=H, heads_kv=H,
                            seqlen_q=S, seqlen_k=S, head_dim=D, causal=bool(causal))
                for n, ms in res.items():
                    impl = {"sm90": "flashc", "old": "flashc_mma_sync", "flash": "sdpa_flash",
                            "cudnn": "sdpa_cudnn"}.get(n, "flashc_" + n)
                    lines.append(dict(impl=impl, ms=round(ms, 5), tflops=round(tf[n], 2), **base))
                del x, q, k, v, do, o, lse, ws, grads, qg, kg, vg, ref
                torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            for r in lines:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
