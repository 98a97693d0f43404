"""decode_rule.py -- which of the CPU forward's two kernels to run (flashc_cpu.c, fwd_by_decode).

Times flashc_fwd on the FA2 kernel and on the decode kernel (FLASHC_CPU_DECODE_MAX_SQ = -1 and
1000000, one child process each, the library reads it when a context is made) over seqlen_q at
seqlen_k 4096, D 128, causal, f32 and bf16, GQA 32/8 and MHA 16/16, and prints decode / FA2 time:
below 1 the decode kernel is faster. Then paged K/V (page 16) against the same dense call on the
FA2 kernel at prefill sizes: the cost of gathering a key block's rows from their pages. Then
flashc_fwd_kvcache with a 1024-token prompt appended into an empty cache of 4096 and attended
(flash_attn_with_kvcache, rotary, causal; torch), the attention on either kernel.

  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE PYTHONPATH=python python3 dev/cpu/decode_rule.py
Medians of REPEATS calls after one warm-up; the two kernels' runs interleave by shape.
"""
import json
import os
import subprocess
import sys
import time

REPEATS = 7


def child():
    import numpy as np
    import ml_dtypes
    import flashc

    rng = np.random.default_rng(0)

    def med(f):
        f()
        ts = []
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        return float(np.median(ts))

    out = {}
    for dname, dt in (("f32", np.float32), ("bf16", ml_dtypes.bfloat16)):
        for H, Hkv in ((32, 8), (16, 16)):
            Sk, D = 4096, 128
            k = rng.standard_normal((1, Sk, Hkv, D)).astype(dt)
            v = rng.standard_normal((1, Sk, Hkv, D)).astype(dt)
            for Sq in (1, 4, 8, 16, 32, 64, 144):
                q = rng.standard_normal((1, Sq, H, D)).astype(dt)
                out[f"rule {dname} {H}/{Hkv} Sq={Sq}"] = med(lambda: flashc.attention(q, k, v, causal=True))
        for causal in (False, True):
            S, H, D, page = 2048, 16, 128, 16
            q, k, v = (rng.standard_normal((1, S, H, D)).astype(dt) for _ in range(3))
            perm = rng.permutation(S // page).astype(np.int32)
            kp, vp = np.empty((S // page, page, H, D), dt), np.empty((S // page, page, H, D), dt)
            kp[perm], vp[perm] = k.reshape(S // page, page, H, D), v.reshape(S // page, page, H, D)
            table = perm[None]
            out[f"dense {dname} S={S} causal={causal}"] = med(lambda: flashc.attention(q, k, v, causal=causal))
            out[f"paged {dname} S={S} causal={causal}"] = med(
                lambda: flashc.attention(q, kp, vp, block_table=table, causal=causal))
    import torch
    from flashc.flash_attn import flash_attn_with_kvcache

    for dname, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        B, P, cap, H, Hkv, D = 1, 1024, 4096, 32, 8, 128
        q, kn, vn = torch.randn(B, P, H, D, dtype=dt), torch.randn(B, P, Hkv, D, dtype=dt), torch.randn(B, P, Hkv, D, dtype=dt)
        kc, vc = torch.zeros(B, cap, Hkv, D, dtype=dt), torch.zeros(B, cap, Hkv, D, dtype=dt)
        cos, sin = torch.randn(cap, D // 2, dtype=dt), torch.randn(cap, D // 2, dtype=dt)
        used = torch.zeros(B, dtype=torch.int32)
        out[f"kvcache {dname} prompt={P}"] = med(lambda: flash_attn_with_kvcache(
            q, kc, vc, kn, vn, rotary_cos=cos, rotary_sin=sin, cache_seqlens=used, causal=True))
    print(json.dumps(out))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child()
    res = {}
    for name, max_sq in (("fa2", "-1"), ("decode", "1000000")):
        env = dict(os.environ, FLASHC_CPU_DECODE_MAX_SQ=max_sq)
        r = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, check=True)
        res[name] = json.loads(r.stdout.strip().splitlines()[-1])

    def fa2_vs_decode(prefix):
        for key, t in res["fa2"].items():
            if key.startswith(prefix + " "):
                d = res["decode"][key]
                print(f"{key[len(prefix) + 1:]:24s} {t * 1e3:9.2f} {d * 1e3:9.2f} {d / t:7.2f}")

    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, medians of {REPEATS}")
    print("# seqlen_k 4096, D 128, causal: FA2 ms, decode ms, decode / FA2")
    fa2_vs_decode("rule")
    print("# paged K/V (page 16, shuffled pages) on the FA2 kernel against the dense call: ms, ms, paged / dense")
    for key, t in res["fa2"].items():
        if key.startswith("dense"):
            pk = "paged" + key[5:]
            print(f"{key[6:]:24s} {t * 1e3:9.2f} {res['fa2'][pk] * 1e3:9.2f} {res['fa2'][pk] / t:7.2f}")
            print(f"{'  (decode kernel)':24s} {'':9s} {res['decode'][pk] * 1e3:9.2f} {res['decode'][pk] / t:7.2f}")
    print("# flashc_fwd_kvcache, a prompt appended and attended (GQA 32/8, D 128): FA2 ms, decode ms, decode / FA2")
    fa2_vs_decode("kvcache")


if __name__ == "__main__":
    main()
