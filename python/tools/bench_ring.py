"""bench_ring.py -- ring attention against one plain flashc call: the cost of the ring code.

    python3 python/tools/bench_ring.py                     # world size 1: one process, the ring degenerates
    torchrun --nproc-per-node 8 python/tools/bench_ring.py # N GPUs: each rank holds 1/N of the sequence

Same process, same inputs: `flashc` is flashc.attention on the whole sequence (on every rank, so
the numbers are comparable on one device), `flashc_ring` is flashc.distributed.ring_attention on
this rank's zigzag shard. With world size 1 the ring has no communication, so the ratio is the
overhead of the Python ring code (shard bookkeeping, lse handling) over a plain call; with N
ranks, ring time x 1 against plain time x 1/N is the scaling (tflops is per rank, counted on the
rank's share of the FLOPs: 4 B H S^2 D / N, halved for causal, backward 2.5x).

Defaults are DESIGN.md section 3's training shapes on CUDA (bf16, hidden 2048, head_dim 128,
batch x seqlen = 16k) and a tiny fp32 shape on the CPU (a smoke run, not a measurement). Median of
--repeats timed runs after warm-up, CUDA events on the GPU. JSON lines on stdout (and --out),
rank 0 only; ms is the slowest rank's median, rank_ms every rank's, imbalance = slowest / fastest - 1.
Unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE when benchmarking on the CPU.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import flashc  # noqa: E402
from flashc.distributed import ring_attention, shard  # noqa: E402


def timed(fn, repeats, cuda, warmup=3):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeats):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="bf16 | f16 | f32 (default bf16 on cuda, f32 on cpu)")
    ap.add_argument("--head-dim", type=int, default=None)
    ap.add_argument("--seqlens", default=None, help="comma list (default 2048,8192,16384 on cuda, 256 on cpu)")
    ap.add_argument("--tokens", type=int, default=None, help="batch x seqlen (default 16384 on cuda, 256 on cpu)")
    ap.add_argument("--hidden", type=int, default=None, help="heads x head_dim (default 2048 on cuda, 128 on cpu)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--masks", default="both", choices=("both", "causal", "none"))
    ap.add_argument("--skip-plain", action="store_true",
                    help="with several ranks, time only the ring (the plain single-GPU call comes from a world-1 run)")
    a = ap.parse_args()
    cuda = a.device == "cuda"
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype or ("bf16" if cuda else "f32")]
    D = a.head_dim or (128 if cuda else 32)
    hidden = a.hidden or (2048 if cuda else 128)
    tokens = a.tokens or (16384 if cuda else 256)
    seqlens = [int(s) for s in (a.seqlens or ("2048,8192,16384" if cuda else "256")).split(",")]
    repeats = a.repeats or (30 if cuda else 5)

    if "RANK" in os.environ:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        dist.init_process_group("nccl" if cuda else "gloo")
    else:
        rank, world = 0, 1
        store = os.path.join(tempfile.mkdtemp(), "store")
        dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{store}", rank=0, world_size=1)
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    H = hidden // D
    lines = []
    for S in seqlens:
        B = max(1, tokens // S)
        g = torch.Generator().manual_seed(S)
        q, k, v, do = (torch.randn(B, S, H, D, generator=g).to(dev, dt).requires_grad_(True) for _ in range(4))
        do = do.detach()
        ql, kl, vl, dol = (shard(t.detach(), rank, world).contiguous().requires_grad_(True) for t in (q, k, v, do))
        dol = dol.detach()
        for causal in {"both": (False, True), "causal": (True,), "none": (False,)}[a.masks]:
            fl = 4 * B * H * S * S * D / (2 if causal else 1)
            runs = {
                ("flashc", "fwd"): lambda: flashc.attention(q, k, v, causal=causal),
                ("flashc_ring", "fwd"): lambda: ring_attention(ql, kl, vl, causal=causal),
                ("flashc", "bwd"): lambda: flashc.attention(q, k, v, causal=causal).backward(do),
                ("flashc_ring", "bwd"): lambda: ring_attention(ql, kl, vl, causal=causal).backward(dol),
            }
            for (impl, direction), fn in runs.items():
                if impl == "flashc" and a.skip_plain and world > 1:
                    continue
                with torch.set_grad_enabled(direction == "bwd"):
                    ms = timed(fn, repeats, cuda, a.warmup)
                # every rank's median: the slowest rank sets the step time, the spread is the balance
                all_ms = [None] * world
                dist.all_gather_object(all_ms, ms)
                ms = max(all_ms)
                share = 1 if impl == "flashc" else world
                work = fl / share * (3.5 if direction == "bwd" else 1.0)   # "bwd" times forward + backward
                lines.append({"impl": impl, "backend": a.device, "device": name, "dtype": {torch.bfloat16: "bf16",
                              torch.float16: "f16", torch.float32: "f32"}[dt], "direction": direction,
                              "batch": B, "heads": H, "heads_kv": H, "seqlen_q": S, "seqlen_k": S, "head_dim": D,
                              "causal": causal, "world": world, "ms": ms, "rank_ms": all_ms,
                              "imbalance": max(all_ms) / min(all_ms) - 1,
                              "tflops" if cuda else "gflops": work / ms / (1e9 if cuda else 1e6),
                              "note": "bwd is forward + backward"})
                if rank == 0:
                    print(json.dumps(lines[-1]), flush=True)
    if rank == 0 and a.out:
        with open(a.out, "a") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
