#!/usr/bin/env python3
"""bench_gpu.py -- flashc's CUDA backend side by side with PyTorch SDPA's FLASH (FlashAttention-2)
and CUDNN backends, in one process, on the same inputs (DESIGN.md §3).

Shapes: the FlashAttention-2 paper's training shapes -- bf16, hidden 2048 (heads = 2048 / head_dim),
batch * seqlen = 16384, seqlen in 512 .. 16384, head_dim in {64, 128, 256}, causal and not, forward
and backward. Ceilings measured in the same run: a bf16 8192^3 GEMM (torch.matmul) and a
device-to-device copy.

FLOPs (one convention for every impl): forward 4 * B * H * Sq * Sk * D, halved for causal;
backward 2.5 x forward. Timing: CUDA events around each call, median of many repeats after a
warm-up; before each timed call the GPU is kept busy (torch.cuda._sleep) so host-side launch
overhead (ctypes, autograd) does not count for anyone. Inputs are larger than L2 (64 MiB per
tensor at these shapes), so they are not rotated. Correctness is checked once per shape before
timing: flashc's O and dQ/dK/dV against SDPA FLASH's (max abs difference printed).

flashc is loaded from build/libflashc.so through ctypes (the C API in include/flashc.h).

Usage: python3 bench/bench_gpu.py [--lib build/libflashc.so] [--out FILE.jsonl] [--quick]
Writes one JSON line per measurement (DESIGN.md §3) and prints a table with the ratios last.
"""
import argparse
import ctypes
import datetime
import json
import math
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# ------------------------------------------------------------------------------------------------
# the C API (include/flashc.h)

FLASHC_BACKEND_CUDA = 3
FLASHC_DTYPE_BF16 = 2
I32, I64, F32, VP = ctypes.c_int32, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p


class Desc(ctypes.Structure):
    _fields_ = [("batch", I32), ("seqlen_q", I32), ("seqlen_k", I32), ("heads", I32), ("heads_kv", I32),
                ("head_dim", I32), ("dtype", I32), ("scale", F32), ("softcap", F32), ("causal", I32),
                ("window_left", I32), ("window_right", I32), ("use_window", I32), ("alibi_slopes", VP),
                ("alibi_batch_stride", I64), ("deterministic", I32)] + \
               [(n + "_stride", I64 * 3) for n in ("q", "k", "v", "o", "do", "dq", "dk", "dv")] + \
               [("cu_seqlens_q", VP), ("cu_seqlens_k", VP), ("seqused_k", VP), ("reserved", I64 * 24)]


def load_lib(path):
    lib = ctypes.CDLL(path)
    lib.flashc_ctx_create.argtypes = [ctypes.POINTER(VP), ctypes.c_int, ctypes.c_int]
    lib.flashc_ctx_create.restype = ctypes.c_int
    lib.flashc_ctx_last_error.argtypes = [VP]
    lib.flashc_ctx_last_error.restype = ctypes.c_char_p
    lib.flashc_version_string.restype = ctypes.c_char_p
    lib.flashc_fwd.argtypes = [VP, ctypes.POINTER(Desc)] + [VP] * 5 + [VP, ctypes.c_size_t, VP]
    lib.flashc_fwd.restype = ctypes.c_int
    lib.flashc_bwd.argtypes = [VP, ctypes.POINTER(Desc)] + [VP] * 9 + [VP, ctypes.c_size_t, VP]
    lib.flashc_bwd.restype = ctypes.c_int
    lib.flashc_bwd_workspace_size.argtypes = [VP, ctypes.POINTER(Desc)]
    lib.flashc_bwd_workspace_size.restype = ctypes.c_size_t
    return lib


class Flashc:
    def __init__(self, path):
        self.lib = load_lib(path)
        self.ctx = VP()
        st = self.lib.flashc_ctx_create(ctypes.byref(self.ctx), FLASHC_BACKEND_CUDA, 0)
        if st != 0:
            raise RuntimeError(f"flashc_ctx_create(CUDA) = {st}")
        self.version = self.lib.flashc_version_string().decode()

    def check(self, st, what):
        if st != 0:
            raise RuntimeError(f"{what} = {st}: {self.lib.flashc_ctx_last_error(self.ctx).decode()}")

    def desc(self, B, S, H, D, causal, deterministic=0):
        d = Desc()
        d.batch, d.seqlen_q, d.seqlen_k, d.heads, d.heads_kv, d.head_dim = B, S, S, H, H, D
        d.dtype, d.causal, d.deterministic = FLASHC_DTYPE_BF16, int(causal), deterministic
        return d  # zero strides: contiguous (B, S, H, D)

    def fwd(self, d, q, k, v, o, lse):
        st = self.lib.flashc_fwd(self.ctx, ctypes.byref(d), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                                 lse.data_ptr(), None, 0, torch.cuda.current_stream().cuda_stream)
        self.check(st, "flashc_fwd")

    def bwd(self, d, q, k, v, o, lse, do, dq, dk, dv, ws):
        st = self.lib.flashc_bwd(self.ctx, ctypes.byref(d), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                                 lse.data_ptr(), do.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
                                 ws.data_ptr(), ws.numel(), torch.cuda.current_stream().cuda_stream)
        self.check(st, "flashc_bwd")


# ------------------------------------------------------------------------------------------------
# timing

SLEEP_CYCLES = 2_000_000  # ~1 ms at 1.98 GHz: enough for any impl's host side to queue its launches


def time_ms(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        torch.cuda._sleep(SLEEP_CYCLES)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    return statistics.median(ts)


def reps_for(ms_estimate):
    return max(7, min(30, int(600.0 / max(ms_estimate, 1e-3))))


def fwd_flops(B, H, S, D, causal):
    return 4.0 * B * H * S * S * D / (2 if causal else 1)


# ------------------------------------------------------------------------------------------------
# one shape

def sdpa_call(backend, q4, k4, v4, causal):
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)


def run_shape(fc, D, S, causal, device, emit, log):
    B, H = 16384 // S, 2048 // D
    fl = fwd_flops(B, H, S, D, causal)
    torch.manual_seed(S * 1000 + D + causal)
    q, k, v, do = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    o = torch.empty_like(q)
    lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    d = fc.desc(B, S, H, D, causal)
    ws = torch.empty(fc.lib.flashc_bwd_workspace_size(fc.ctx, ctypes.byref(d)), device="cuda", dtype=torch.uint8)

    base = {"backend": "cuda", "device": device, "dtype": "bf16", "batch": B, "heads": H, "heads_kv": H,
            "seqlen_q": S, "seqlen_k": S, "head_dim": D, "causal": bool(causal)}
    res = {}

    # flashc
    fc.fwd(d, q, k, v, o, lse)
    fc.bwd(d, q, k, v, o, lse, do, dq, dk, dv, ws)
    torch.cuda.synchronize()
    est = time_ms(lambda: fc.fwd(d, q, k, v, o, lse), 1, warmup=1)
    ms = time_ms(lambda: fc.fwd(d, q, k, v, o, lse), reps_for(est))
    res[("flashc", "fwd")] = ms
    ms = time_ms(lambda: fc.bwd(d, q, k, v, o, lse, do, dq, dk, dv, ws), reps_for(2.5 * est))
    res[("flashc", "bwd")] = ms

    # SDPA backends: (B, H, S, D) views of the same tensors
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    q4, k4, v4, do4 = (t.transpose(1, 2) for t in (qg, kg, vg, do))
    check = ""
    for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            out = sdpa_call(backend, q4, k4, v4, causal)
            g = torch.autograd.grad(out, (qg, kg, vg), do4, retain_graph=True)
            torch.cuda.synchronize()
        except RuntimeError as e:
            log(f"  {name} unavailable for D={D} S={S} causal={causal}: {str(e).splitlines()[0]}")
            continue
        if name == "sdpa_flash":
            eo = (o.float() - out.transpose(1, 2).float()).abs().max().item()
            eg = max((a.float() - b.float()).abs().max().item() for a, b in zip((dq, dk, dv), g))
            scale = max(t.float().abs().max().item() for t in g)
            check = f"max|o - o_flash| = {eo:.3g}, max|dqkv - dqkv_flash| = {eg:.3g} (max |dqkv| {scale:.3g})"
        res[(name, "fwd")] = time_ms(lambda: sdpa_call(backend, q4, k4, v4, causal), reps_for(est))
        res[(name, "bwd")] = time_ms(lambda: torch.autograd.grad(out, (qg, kg, vg), do4, retain_graph=True),
                                     reps_for(2.5 * est))
        del out, g
    for (impl, direction), ms in res.items():
        tf = (fl if direction == "fwd" else 2.5 * fl) / (ms * 1e-3) / 1e12
        emit(dict(impl=impl, direction=direction, ms=round(ms, 5), tflops=round(tf, 2), **base))
    log(f"D={D:3d} S={S:5d} causal={int(causal)}  {check}")
    return res, fl


# ------------------------------------------------------------------------------------------------
# ceilings

def gemm_ceiling():
    n = 8192
    a, b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16), torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = time_ms(lambda: torch.matmul(a, b), 20)
    return ms, 2.0 * n ** 3 / (ms * 1e-3) / 1e12


def copy_ceiling():
    n = 1 << 30  # 1 GiB each way
    x, y = torch.empty(n, device="cuda", dtype=torch.uint8), torch.empty(n, device="cuda", dtype=torch.uint8)
    ms = time_ms(lambda: y.copy_(x), 20)
    return ms, 2.0 * n / (ms * 1e-3) / 1e9


# ------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "build", "libflashc.so"))
    ap.add_argument("--out", default=None, help="JSON lines file (default: bench/results/<gpu>-<date>-cuda.jsonl)")
    ap.add_argument("--quick", action="store_true", help="seqlen 1024 and 8192 only")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_gpu: no CUDA device: skipped")
        return 0
    device = torch.cuda.get_device_name()
    slug = device.lower().replace("nvidia", "").strip().split()[0]
    out = args.out or os.path.join(os.path.dirname(__file__), "results",
                                   f"{slug}-{datetime.date.today().isoformat()}-cuda.jsonl")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fc = Flashc(os.path.abspath(args.lib))
    lines = []

    def emit(rec):
        lines.append(rec)

    def log(s):
        print(s, flush=True)

    log(f"bench_gpu: flashc {fc.version}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {device}")
    gms, gtf = gemm_ceiling()
    cms, cgb = copy_ceiling()
    emit(dict(impl="gemm_ceiling", backend="cuda", device=device, dtype="bf16", m=8192, n=8192, k=8192,
              ms=round(gms, 5), tflops=round(gtf, 2)))
    emit(dict(impl="copy_ceiling", backend="cuda", device=device, bytes=2 * (1 << 30), ms=round(cms, 5),
              gbps=round(cgb, 1)))
    log(f"ceilings: bf16 GEMM 8192^3 {gtf:.1f} TFLOP/s, D2D copy {cgb:.0f} GB/s (read + write)")

    dims = [int(x) for x in args.dims.split(",")]
    seqlens = [1024, 8192] if args.quick else [int(x) for x in args.seqlens.split(",")]
    table = []
    for D in dims:
        for causal in (False, True):
            for S in seqlens:
                res, fl = run_shape(fc, D, S, causal, device, emit, log)
                table.append((D, causal, S, res, fl))
                torch.cuda.empty_cache()

    with open(out, "w") as f:
        for rec in lines:
            f.write(json.dumps(rec) + "\n")
    log(f"wrote {len(lines)} lines to {out}")

    def tf(res, impl, direction, fl):
        ms = res.get((impl, direction))
        return (fl if direction == "fwd" else 2.5 * fl) / (ms * 1e-3) / 1e12 if ms else float("nan")

    print(f"\nTFLOP/s (bf16, hidden 2048, B*S = 16k); GEMM ceiling {gtf:.0f}")
    print(f"{'D':>3} {'causal':>6} {'S':>5} | {'fwd flashc':>10} {'flash':>6} {'cudnn':>6} {'x flash':>7} {'x cudnn':>7}"
          f" | {'bwd flashc':>10} {'flash':>6} {'cudnn':>6} {'x flash':>7} {'x cudnn':>7}")
    worst = {}
    for D, causal, S, res, fl in table:
        row = f"{D:3d} {int(causal):6d} {S:5d} |"
        for direction in ("fwd", "bwd"):
            a, b, c = (tf(res, i, direction, fl) for i in ("flashc", "sdpa_flash", "sdpa_cudnn"))
            row += f" {a:10.1f} {b:6.1f} {c:6.1f} {a / b:7.2f} {a / c:7.2f} |"
            bar = 0.9 if S < 1024 else 1.0
            r = a / b
            if not math.isnan(r):
                key = (direction, D, causal)
                worst[key] = min(worst.get(key, 9), r / bar)
        print(row)
    miss = [k for k, v in worst.items() if v < 1.0]
    print("bar (>= 1.0x SDPA FLASH for S >= 1024, >= 0.9x at 512): " +
          ("met everywhere" if not miss else "missed for " + ", ".join(f"{d} D={D} causal={int(c)}" for d, D, c in miss)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
