#!/usr/bin/env python3
"""ab.py -- two builds of flashc in one process: --lib (A) and --lib2 (B, e.g. a worktree of the
previous commit built into another folder), timed interleaved on the same inputs, training shapes
(hidden 2048, B * S = 16k): the forward (bf16, and e4m3 rounded from the same inputs) or, with
--bwd, the backward (bf16). Prints TFLOP/s of both, B / A and the largest |A - B| of the outputs.

Usage: python3 dev/cuda/ab.py --lib build/libflashc.so --lib2 build-base/libflashc.so [--bwd]
                              [--dims 128,256] [--seqlens 1024,4096,16384] [--dtypes bf16,e4m3]
                              [--env2 FLASHC_CUDA_SM90=4] [--varlen] [--det]
--varlen: the forward (with --bwd, the backward) in varlen mode, 16k tokens packed from sequences of
random lengths between S / 2 and 3 S / 2 (fixed seed; the last one takes the rest), TFLOP/s of the
sum over sequences.
--env2 K=V[,K=V]: environment set only while B's context is created (the CUDA backend reads its
FLASHC_* switches there), so one library can be timed against itself in another mode.
"""
import argparse
import os
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import bench_gpu as bg  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--lib2", required=True)
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqlens", default="1024,4096,16384")
    ap.add_argument("--dtypes", default="bf16,e4m3")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bwd", action="store_true")
    ap.add_argument("--env2", default="")
    ap.add_argument("--varlen", action="store_true")
    ap.add_argument("--det", action="store_true", help="the backward in the deterministic mode")
    args = ap.parse_args()
    # a copy under another name, so that the loader keeps two libraries apart
    tmp = tempfile.mkdtemp()
    lib2 = os.path.join(tmp, "libflashc_b.so")
    shutil.copy(args.lib2, lib2)
    fa = bg.Flashc(os.path.abspath(args.lib))
    env2 = dict(kv.split("=", 1) for kv in args.env2.split(",") if kv)
    saved = {k: os.environ.get(k) for k in env2}
    os.environ.update(env2)
    fb = bg.Flashc(lib2)
    for k, v in saved.items():
        if v is None:
            del os.environ[k]
        else:
            os.environ[k] = v
    print(f"A = {args.lib}  B = {args.lib2}{'  with ' + args.env2 if env2 else ''}")
    if args.varlen:
        return ab_varlen(fa, fb, args)
    if args.bwd:
        return ab_bwd(fa, fb, args)
    for dt in args.dtypes.split(","):
        for D in (int(x) for x in args.dims.split(",")):
            if dt == "e4m3" and D == 64:  # (bench_gpu times it; this lab's tables never had it)
                print("e4m3 D=64: not timed by this lab", flush=True)
                continue
            for causal in (False, True):
                for S in (int(x) for x in args.seqlens.split(",")):
                    B, H = 16384 // S, 2048 // D
                    fl = bg.fwd_flops(B, H, S, D, causal)
                    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                    if dt == "e4m3":
                        q, k, v = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
                    oa, ob = (torch.empty(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
                    lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
                    da, db = fa.desc(B, S, H, D, causal), fb.desc(B, S, H, D, causal)
                    if dt == "e4m3":
                        da.dtype = db.dtype = bg.FLASHC_DTYPE_E4M3
                    ab_time(f"{dt:4s} D={D:3d} causal={int(causal)} S={S:5d}", lambda: fa.fwd(da, q, k, v, oa, lse),
                            lambda: fb.fwd(db, q, k, v, ob, lse), [oa], [ob], fl, args.rounds)
                    del q, k, v, oa, ob
                    torch.cuda.empty_cache()
    shutil.rmtree(tmp)


def ab_time(label, run_a, run_b, outs_a, outs_b, flops, rounds, reps=10, what="max|O_a - O_b|"):
    """A and B timed interleaved (the two see the same clocks): median TFLOP/s, B / A, the largest
    |a - b| over the output pairs"""
    t = [[], []]
    for r in range(rounds):  # the order alternates, so neither is always the one timed first
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            t[i].append(bg.time_ms((run_a, run_b)[i], reps))
    ta, tb = (flops / (sorted(x)[len(x) // 2] * 1e-3) / 1e12 for x in t)
    err = max((a.float() - b.float()).abs().max().item() for a, b in zip(outs_a, outs_b))
    print(f"{label}  A {ta:6.1f}  B {tb:6.1f}  B/A {tb / ta:.3f}  {what} {err:.2e}", flush=True)


def varlen_lens(S, total=16384):
    g = torch.Generator().manual_seed(S)
    lens = []
    while sum(lens) < total:
        n = int(torch.randint(S // 2, 3 * S // 2 + 1, (1,), generator=g))
        lens.append(min(n, total - sum(lens)))
    return lens


def ab_varlen(fa, fb, args):
    for D in (int(x) for x in args.dims.split(",")):
        H = 2048 // D
        for causal in (False, True):
            for S in (int(x) for x in args.seqlens.split(",")):
                lens = varlen_lens(S)
                T = sum(lens)
                cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), device="cuda", dtype=torch.int32)
                fl = sum(bg.fwd_flops(1, H, n, D, causal) for n in lens)
                q, k, v = (torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                oa, ob = (torch.empty(T, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
                lse = torch.empty(H, T, device="cuda", dtype=torch.float32)
                ds = []
                for f in (fa, fb):
                    d = f.desc(len(lens), max(lens), H, D, causal, deterministic=int(args.det))
                    d.cu_seqlens_q = d.cu_seqlens_k = cu.data_ptr()
                    ds.append(d)
                label = f"varlen D={D:3d} causal={int(causal)} S~{S:5d} ({len(lens)} seqs)"
                if not args.bwd:
                    ab_time(label, lambda: fa.fwd(ds[0], q, k, v, oa, lse), lambda: fb.fwd(ds[1], q, k, v, ob, lse),
                            [oa], [ob], fl, args.rounds)
                else:  # both from A's forward; the workspace sized for the larger of the two
                    fa.fwd(ds[0], q, k, v, oa, lse)
                    do = torch.randn_like(q)
                    nw = max(f.lib.flashc_bwd_workspace_size(f.ctx, bg.ctypes.byref(d)) for f, d in zip((fa, fb), ds))
                    ws = torch.empty(nw, device="cuda", dtype=torch.uint8)
                    ga = [torch.empty_like(q) for _ in range(3)]
                    gb = [torch.empty_like(q) for _ in range(3)]
                    ab_time(f"bwd {label}", lambda: fa.bwd(ds[0], q, k, v, oa, lse, do, *ga, ws),
                            lambda: fb.bwd(ds[1], q, k, v, oa, lse, do, *gb, ws), ga, gb, 2.5 * fl, args.rounds, 7,
                            "max|dqkv A - B|")
                    del do, ws, ga, gb
                del q, k, v, oa, ob
                torch.cuda.empty_cache()


def ab_bwd(fa, fb, args):
    for D in (int(x) for x in args.dims.split(",")):
        for causal in (False, True):
            for S in (int(x) for x in args.seqlens.split(",")):
                x = bg.training_inputs(fa, D, S, causal, bwd=True)
                q, k, v, do, o, lse, d, ws = x.q, x.k, x.v, x.do, x.o, x.lse, x.d, x.ws
                d.deterministic = int(args.det)  # (x.ws was sized for the atomic mode, which needs more)
                nb = fb.lib.flashc_bwd_workspace_size(fb.ctx, bg.ctypes.byref(d))  # B's may be larger
                if nb > ws.numel():
                    ws = torch.empty(nb, device="cuda", dtype=torch.uint8)
                fl = 2.5 * bg.fwd_flops(x.B, x.H, S, D, causal)
                fa.fwd(d, q, k, v, o, lse)
                ga = [torch.empty_like(q) for _ in range(3)]
                gb = [torch.empty_like(q) for _ in range(3)]
                ab_time(f"bwd{'-det' if args.det else ''}  D={D:3d} causal={int(causal)} S={S:5d}",
                        lambda: fa.bwd(d, q, k, v, o, lse, do, *ga, ws), lambda: fb.bwd(d, q, k, v, o, lse, do, *gb, ws),
                        ga, gb, fl, args.rounds, 7, "max|dqkv A - B|")
                del x, q, k, v, do, o, lse, ws, ga, gb
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
