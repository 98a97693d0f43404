"""flashc.distributed.ring_attention: N processes on this machine (gloo, flashc's CPU backend; on a
GPU machine also world size 1 on NCCL) each hold a shard of one sequence; their outputs, lse and
gradients are checked shard by shard against the fp64 reference on the whole sequence (DESIGN.md
section 2: fp32 within 1e-5 (1 + |ref|), gradients 5e-5; bf16 at most 2x / 3x the error of a naive
bf16 attention), and the gathered output against single-process flashc.attention.

Every case draws fresh inputs from its own seed (the same on every rank, so each rank can build the
reference), and FLASHC_POISON=1 (conftest.py, inherited by the workers) starts every output as NaN.
"""
import json
import os
from datetime import timedelta

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available in this torch build", allow_module_level=True)

import flashc  # noqa: E402
from conftest import cuda_ready  # noqa: E402

CUDA, CUDA_WHY = cuda_ready()

# (dtype, B, S per rank, H, H_kv, D, causal, layout, softcap, scale)
CPU_CASES = [
    ("f32", 2, 16, 4, 4, 32, False, "zigzag", 0.0, 0.3),
    ("f32", 1, 24, 4, 2, 32, True, "zigzag", 0.0, None),
    ("f32", 1, 16, 2, 1, 32, True, "contiguous", 5.0, None),
    ("bf16", 1, 32, 4, 2, 32, True, "zigzag", 0.0, None),
    ("bf16", 1, 16, 2, 2, 32, False, "zigzag", 0.0, None),
]
# on a sub-group: ranks 1 and 3 of a world of 4 (peers are global ranks inside the ring)
SUBGROUP_CASE = ("f32", 1, 16, 4, 2, 32, True, "zigzag", 0.0, None)
CUDA_CASES = [
    ("bf16", 2, 256, 4, 2, 64, True, "zigzag", 0.0, None),
    ("bf16", 1, 128, 4, 4, 128, False, "zigzag", 0.0, None),
    ("f16", 1, 128, 4, 1, 64, True, "contiguous", 0.0, None),
]
DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def _np(t):
    return t.detach().to("cpu", torch.float64).numpy()


def _run_case(group, dev, seed, dt_name, B, S_loc, H, Hkv, D, causal, layout, softcap, scale):
    from flashc.distributed import ring_attention, shard, unshard
    from torch_ref import check, naive, ref

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    opt = {"causal": causal, "softcap": softcap, "scale": scale}
    dt = DT[dt_name]
    S = S_loc * world
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, S, h, D, generator=g).to(dt) for h in (H, Hkv, Hkv))
    dout = torch.randn(B, S, H, D, generator=g).to(dt)

    def mine(x):
        return shard(x, rank, world, layout).contiguous()

    ql, kl, vl = (mine(t).to(dev).requires_grad_(True) for t in (q, k, v))
    out_l, lse_l = ring_attention(ql, kl, vl, group, layout=layout, return_lse=True, **opt)
    out_l.backward(mine(dout).to(dev))
    with torch.no_grad():   # the path without autograd gives the same output
        assert torch.equal(ring_attention(ql, kl, vl, group, layout=layout, **opt), out_l.detach())
    got = {"out": out_l, "dq": ql.grad, "dk": kl.grad, "dv": vl.grad}

    r_out, r_lse, r_grads = ref(q, k, v, dout, **opt)
    want = {"out": r_out, "dq": r_grads[0], "dk": r_grads[1], "dv": r_grads[2]}
    want = {n: _np(mine(torch.from_numpy(np.ascontiguousarray(a)))) for n, a in want.items()}
    lowp = {n: None for n in want}
    if dt != torch.float32:
        qn, kn, vn = (t.clone().requires_grad_(True) for t in (q, k, v))
        nv = naive(qn, kn, vn, **opt)
        nv.backward(dout)
        lowp = {n: mine(t) for n, t in (("out", nv), ("dq", qn.grad), ("dk", kn.grad), ("dv", vn.grad))}
    errs = {}
    for n in ("out", "dq", "dk", "dv"):
        check(n, got[n], want[n], lowp[n], factor=2.0 if n == "out" else 3.0, f32_tol=1e-5 if n == "out" else 5e-5)
        errs[n] = float(np.abs(_np(got[n]) - want[n]).max())
        if lowp[n] is not None:
            errs[n + "_naive"] = float(np.abs(_np(lowp[n]) - want[n]).max())

    r_lse_l = _np(mine(torch.from_numpy(np.ascontiguousarray(r_lse)).transpose(1, 2)).transpose(1, 2))
    lse_np = _np(lse_l)
    fin = np.isfinite(r_lse_l)
    assert (np.isinf(lse_np) == ~fin).all(), "lse: rows with no key must be +inf, the others finite"
    errs["lse"] = float(np.abs(lse_np[fin] - r_lse_l[fin]).max(initial=0))
    assert errs["lse"] <= 1e-4 * (1 + np.abs(r_lse_l[fin]).max(initial=0)), f"lse: max err {errs['lse']:.3g}"

    # the gathered output against one flashc.attention call on the whole sequence
    parts = [torch.empty_like(out_l) for _ in range(world)]
    dist.all_gather(parts, out_l.detach().contiguous(), group=group)
    full = unshard([p.cpu() for p in parts], layout)
    single = flashc.attention(q.to(dev), k.to(dev), v.to(dev), **opt).cpu()
    errs["vs_single"] = float((full.double() - single.double()).abs().max())
    if dt == torch.float32:
        check("gathered out vs flashc.attention", full, _np(single))
    else:
        # two roundings to bf16 may differ by an ulp: judge both by the fp64 rule on the whole sequence
        check("gathered out", full, r_out, nv.detach(), factor=2.0)
        check("flashc.attention out", single, r_out, nv.detach(), factor=2.0)
    return {"rank": rank, "world": world, "dtype": dt_name, "B": B, "S_loc": S_loc, "H": H, "Hkv": Hkv, "D": D,
            "causal": causal, "layout": layout, "softcap": softcap, "scale": scale, "max_err": errs}


def _worker(rank, world, dev, init_file, result_dir):
    torch.set_num_threads(1)  # N workers share the machine's cores
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # all ranks on this machine: no hostname lookup
    if dev == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())  # one GPU per rank where there are enough
    dist.init_process_group("nccl" if dev == "cuda" else "gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=180))
    try:
        cases = CUDA_CASES if dev == "cuda" else CPU_CASES
        res = [_run_case(None, dev, 7919 * world + 101 * i, *c) for i, c in enumerate(cases)]
        if world == 4:
            sub = dist.new_group([1, 3])   # every rank takes part in creating it
            if rank in (1, 3):
                res.append(dict(_run_case(sub, dev, 4242, *SUBGROUP_CASE), rank=rank, subgroup=[1, 3]))
        with open(os.path.join(result_dir, f"rank{rank}.json"), "w") as f:
            json.dump(res, f)
    finally:
        dist.destroy_process_group()


def _spawn(world, dev, tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(world, dev, str(tmp_path / "store"), str(tmp_path)), nprocs=world, join=True)
    res = []
    for r in range(world):
        with open(tmp_path / f"rank{r}.json") as f:
            res += json.load(f)
    for line in res:
        print(json.dumps(line))
    return res


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_ring_gloo_cpu(world, tmp_path):
    res = _spawn(world, "cpu", tmp_path)
    assert len(res) == world * len(CPU_CASES) + (2 if world == 4 else 0)


@pytest.mark.skipif(not CUDA, reason=CUDA_WHY)
def test_ring_nccl_cuda_world1(tmp_path):
    res = _spawn(1, "cuda", tmp_path)
    assert len(res) == len(CUDA_CASES)


@pytest.mark.skipif(not CUDA, reason=CUDA_WHY)
def test_ring_nccl_cuda_all_gpus(tmp_path):
    """One rank per GPU, NCCL, on machines with several GPUs."""
    world = torch.cuda.device_count()
    if world < 2:
        pytest.skip(f"{world} GPU here: the multi-GPU NCCL ring needs 2 or more")
    res = _spawn(world, "cuda", tmp_path)
    assert len(res) == world * len(CUDA_CASES)


def test_shard_unshard_roundtrip():
    from flashc.distributed import shard, unshard

    x = torch.arange(2 * 24 * 3).reshape(2, 24, 3)
    for world in (1, 2, 3):
        for layout in ("zigzag", "contiguous"):
            parts = [shard(x, r, world, layout) for r in range(world)]
            assert torch.equal(unshard(parts, layout), x)
    # zigzag: rank 0 of 3 holds chunks 0 and 5 of 6
    assert torch.equal(shard(x, 0, 3)[:, :4], x[:, :4]) and torch.equal(shard(x, 0, 3)[:, 4:], x[:, 20:])
    with pytest.raises(ValueError):
        shard(x, 0, 5)


def test_bad_arguments_before_any_communication():
    from flashc.distributed import ring_attention

    q = torch.randn(1, 6, 2, 16)
    with pytest.raises(NotImplementedError):
        ring_attention(q, q, q, window=(4, 0))
    with pytest.raises(ValueError):
        ring_attention(q, q[:, :4], q[:, :4])
    with pytest.raises(ValueError):
        ring_attention(q[:, :5], q[:, :5], q[:, :5], causal=True)
    if not dist.is_initialized():
        with pytest.raises(RuntimeError):
            ring_attention(q, q, q)
