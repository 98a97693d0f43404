#!/usr/bin/env python3
"""ab_decode.py -- several builds of flashc in one process on the decode shapes (bf16, GQA 32/8,
head_dim 128, contiguous cache), timed interleaved on the same inputs beside SDPA FLASH and CUDNN and a
read-only ceiling (torch's sum over a 2 GiB bf16 tensor: every byte read once, nothing written).
Prints GB/s of K + V read per build and the largest |o - o_first build|.

Usage: python3 dev/cuda/ab_decode.py LIB [LIB ...] [--shapes 1x16384x1,16x16384x1] [--splits 0,16] [--host]
--fwd times flashc_fwd (the dense entry point) on the same cache instead of flashc_fwd_kvcache;
--fwd --ragged as varlen with 1 .. Sq queries a sequence (flashc builds only).
--page P (with --fwd): the cache as a pool of P-key pages through a shuffled block table (flashc builds
only; the same memory, so the bytes read are the same).
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import bench_gpu as bg  # noqa: E402


def b2b_ms(fn, n):
    """n calls back to back between two events (no idle gap before each), per call"""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n):
        fn()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libs", nargs="+")
    ap.add_argument("--shapes", default="1x4096x1,1x16384x1,1x65536x1,16x16384x1,16x65536x1,64x16384x1,16x16384x4")
    ap.add_argument("--splits", default="0", help="forced split counts per build (0 = the library's)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--b2b", type=int, default=0, help="time N calls back to back instead of one after an idle gap")
    ap.add_argument("--voff", type=int, default=0, help="V starts this many elements into its allocation")
    ap.add_argument("--fwd", action="store_true", help="flashc_fwd instead of flashc_fwd_kvcache")
    ap.add_argument("--ragged", action="store_true",
                    help="with --fwd: varlen, sequence b with (b %% Sq) + 1 queries and Sk keys (no SDPA beside)")
    ap.add_argument("--page", type=int, default=0, help="with --fwd: paged K / V, pages of this many keys")
    ap.add_argument("--host", action="store_true",
                    help="also print each impl's host time per call (100 calls queued with no sync, Python included)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    fcs = []
    for i, p in enumerate(args.libs):  # copies under other names, so that the loader keeps them apart
        q = os.path.join(tmp, f"libflashc_{i}.so")
        shutil.copy(p, q)
        fcs.append(bg.Flashc(q))
    x = torch.ones(1 << 30, device="cuda", dtype=torch.bfloat16)
    read = bg.time_ms(lambda: x.sum(dtype=torch.float32), 30)
    print(f"read ceiling (torch sum of 2 GiB bf16): {2 ** 31 / read / 1e6:.0f} GB/s")
    del x
    splits = [int(s) for s in args.splits.split(",")]
    H, Hkv, D = bg.DEC_H, bg.DEC_HKV, bg.DEC_D
    for shape in args.shapes.split(","):
        B, Sk, Sq = (int(v) for v in shape.split("x"))
        kv_bytes = 2 * B * Sk * Hkv * D * 2
        n_rot = max(1, min(8, -(-512_000_000 // kv_bytes)))
        ks = [torch.randn(B, Sk, Hkv, D, device="cuda", dtype=torch.bfloat16) for _ in range(n_rot)]
        n = B * Sk * Hkv * D  # V at an offset of voff elements into its allocation (address aliasing with K)
        vs = [torch.randn(n + args.voff, device="cuda", dtype=torch.bfloat16)[args.voff:].view(B, Sk, Hkv, D)
              for _ in range(n_rot)]
        q = torch.randn(B, Sq, H, D, device="cuda", dtype=torch.bfloat16)
        print(f"  V - K = {vs[0].data_ptr() - ks[0].data_ptr():#x} bytes")
        lse = torch.empty(B, H, Sq, device="cuda", dtype=torch.float32)
        d = bg.Desc()
        d.batch, d.seqlen_q, d.seqlen_k, d.heads, d.heads_kv, d.head_dim = B, Sq, Sk, H, Hkv, D
        d.dtype = bg.FLASHC_DTYPE_BF16
        if args.ragged:  # q (total_q, H, D), K / V the same memory as (B * Sk, H_kv, D)
            lq = [b % Sq + 1 for b in range(B)]
            cu = [0]
            for n in lq:
                cu.append(cu[-1] + n)
            cuq = torch.tensor(cu, dtype=torch.int32, device="cuda")
            cuk = torch.arange(0, (B + 1) * Sk, Sk, dtype=torch.int32, device="cuda")
            q = torch.randn(cu[-1], H, D, device="cuda", dtype=torch.bfloat16)
            lse = torch.empty(H, cu[-1], device="cuda", dtype=torch.float32)
            d.seqlen_q = max(lq)
            d.cu_seqlens_q, d.cu_seqlens_k = cuq.data_ptr(), cuk.data_ptr()
        if args.page:  # every copy read as (B * Sk / P, P, H_kv, D) pages, the table a permutation
            assert args.fwd and Sk % args.page == 0, "--page P needs --fwd and P dividing Sk"
            pps = Sk // args.page
            table = torch.randperm(B * pps, device="cuda").to(torch.int32).view(B, pps).contiguous()
            d.block_table, d.block_table_stride, d.page_size, d.num_pages = table.data_ptr(), pps, args.page, B * pps
        it = [0]
        impls, outs = [], []
        for li, fc in enumerate(fcs):
            for ns in splits:
                kv = bg.KvDesc()
                kv.num_splits = ns
                o = torch.empty_like(q)
                outs.append(o)

                def f(fc=fc, kv=kv, o=o):
                    i = it[0] = (it[0] + 1) % n_rot
                    if args.fwd:
                        fc.fwd(d, q, ks[i], vs[i], o, lse)
                    else:
                        fc.kvcache(d, kv, q, ks[i], vs[i], None, None, o, lse)
                impls.append((f"lib{li}" + (f"/s{ns}" if ns else ""), f))

        def sdpa(backend):
            def f():
                i = it[0] = (it[0] + 1) % n_rot
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q.transpose(1, 2), ks[i].transpose(1, 2),
                                                          vs[i].transpose(1, 2), enable_gqa=True)
            return f
        n_libs = len(impls)
        if not args.ragged and not args.page:
            impls += [("flash", sdpa(SDPBackend.FLASH_ATTENTION)), ("cudnn", sdpa(SDPBackend.CUDNN_ATTENTION))]
        t = {n: [] for n, _ in impls}
        for _ in range(args.rounds):  # interleaved: all see the same clocks
            for n, f in impls:
                t[n].append(bg.time_ms(f, 20) if not args.b2b else b2b_ms(f, args.b2b))
        host = {}
        if args.host:
            for n, f in impls:
                torch.cuda.synchronize()
                torch.cuda._sleep(bg.SLEEP_CYCLES * 20)  # the queue stays ahead: launches do not block
                h0 = time.perf_counter()
                for _ in range(100):
                    f()
                host[n] = (time.perf_counter() - h0) * 1e4  # us per call
                torch.cuda.synchronize()
        # outputs on one copy of the cache, against the first build
        for _, f in impls[:n_libs]:
            it[0] = n_rot - 1  # each call steps to the next copy: all read copy 0
            f()
        torch.cuda.synchronize()
        diff = max((o.float() - outs[0].float()).abs().max().item() for o in outs)
        row = "  ".join(f"{n} {kv_bytes / (statistics.median(v) * 1e-3) / 1e9:.0f}" for n, v in t.items())
        print(f"voff={args.voff} B={B:3d} Sk={Sk:6d} Sq={Sq}  GB/s: {row}  max|o - o_lib0| {diff:.3g}", flush=True)
        if host:
            print("    host us per call: " + "  ".join(f"{n} {v:.1f}" for n, v in host.items()), flush=True)
        del ks, vs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
