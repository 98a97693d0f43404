"""Bindings on torch tensors: autograd against the fp64 reference, strides and packed layouts,
the custom ops (opcheck, torch.compile fullgraph), and on a GPU the CUDA path (current stream,
CUDA graphs). CPU tests run everywhere torch is installed; CUDA tests skip without a GPU."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flashc  # noqa: E402
from conftest import cuda_ready  # noqa: E402
from torch_ref import check, expect, naive, ref  # noqa: E402

CUDA, CUDA_WHY = cuda_ready()
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
cuda_only = pytest.mark.skipif(not CUDA, reason=CUDA_WHY)


def rand(*shape, dt=torch.float32, dev="cpu", grad=False):
    return torch.randn(*shape, dtype=dt, device=dev).requires_grad_(grad)


def roundtrip(dev, dt_name, B, Sq, Sk, H, Hkv, D, **opt):
    dt = DT[dt_name]
    q, k, v = rand(B, Sq, H, D, dt=dt, dev=dev, grad=True), rand(B, Sk, Hkv, D, dt=dt, dev=dev, grad=True), \
        rand(B, Sk, Hkv, D, dt=dt, dev=dev, grad=True)
    out, lse = flashc.attention(q, k, v, return_lse=True, **opt)
    dout = torch.randn_like(out)
    out.backward(dout)
    ropt = {kk: vv for kk, vv in opt.items() if kk != "alibi_slopes"}
    if "alibi_slopes" in opt:
        ropt["alibi"] = opt["alibi_slopes"]
    r_out, r_lse, r_g = ref(q, k, v, dout, **ropt)
    nv = ng = None
    if dt_name != "f32":
        qn, kn, vn = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
        nv = naive(qn, kn, vn, **ropt)
        nv.backward(dout)
        ng = (qn.grad, kn.grad, vn.grad)
    check("out", out, r_out, nv)
    fin = np.isfinite(r_lse)
    assert np.abs(lse.detach().cpu().double().numpy()[fin] - r_lse[fin]).max(initial=0) < 1e-4 * (1 + np.abs(r_lse).max(
        initial=0, where=fin))
    for i, (name, t) in enumerate((("dq", q), ("dk", k), ("dv", v))):
        check(name, t.grad, r_g[i], None if ng is None else ng[i], factor=3.0, f32_tol=5e-5)


# fp32 on the CPU; the CUDA backend takes fp16 / bf16 (DESIGN.md section 1)
CASES = [(d, t) for d in DEVICES for t in ("f32", "f16", "bf16") if not (d == "cuda" and t == "f32")]
DEV_DT = [("cpu", torch.float32)] + ([("cuda", torch.bfloat16)] if CUDA else [])


@pytest.mark.parametrize("dev,dt", CASES)
@pytest.mark.parametrize("causal", [False, True])
def test_autograd_matches_reference(dev, dt, causal):
    roundtrip(dev, dt, 2, 19, 27, 4, 2, 64 if dev == "cuda" else 16, causal=causal)


@pytest.mark.parametrize("dev", DEVICES)
def test_all_options(dev):
    alibi = torch.rand(2, 4, device=dev) + 0.1
    d = 64 if dev == "cuda" else 16
    roundtrip(dev, "f32" if dev == "cpu" else "f16", 2, 11, 14, 4, 2, d, causal=True, softcap=4.0, scale=0.2,
              alibi_slopes=alibi)
    roundtrip(dev, "bf16", 1, 13, 13, 2, 1, 64 if dev == "cuda" else 32, window=(4, 2))


@pytest.mark.parametrize("dev,dt", DEV_DT)
def test_noncontiguous_views_and_sum_loss(dev, dt):
    B, S, H, D = 2, 9, 4, 64
    base = rand(B, H, S, 3 * D, dt=dt, dev=dev, grad=True)
    q, k, v = (base[..., i * D:(i + 1) * D].transpose(1, 2) for i in range(3))  # strided (B, S, H, D) views
    assert not q.is_contiguous()
    out = flashc.attention(q, k, v, causal=True)
    out.sum().backward()  # autograd hands the backward an expanded, stride-0 gradient
    g = base.grad
    expect(out, q, k, v, torch.ones_like(out), [g[..., i * D:(i + 1) * D].transpose(1, 2) for i in range(3)],
           causal=True)


@pytest.mark.parametrize("dev,dt", DEV_DT)
def test_varlen_autograd(dev, dt):
    lens_q, lens_k = [3, 0, 7], [5, 2, 7]
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lens_q)]), dtype=torch.int32, device=dev)
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lens_k)]), dtype=torch.int32, device=dev)
    q, k, v = (rand(n, h, 64, dt=dt, dev=dev, grad=True) for n, h in ((10, 4), (14, 2), (14, 2)))
    out, lse = flashc.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True, return_lse=True)
    assert lse.shape == (4, 10)
    dout = torch.randn_like(out)
    out.backward(dout)
    for b in range(3):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        expect(out[None, qs], q[None, qs], k[None, ks], v[None, ks], dout[None, qs],
               (q.grad[None, qs], k.grad[None, ks], v.grad[None, ks]), causal=True)


@pytest.mark.parametrize("dev", DEVICES)
def test_broadcast_inputs_are_copied(dev):
    # expand()ed tensors have stride 0, and all-zero [batch, seq, head] strides mean "contiguous" to
    # C: passed as they are, k would be read past its memory
    dt = torch.bfloat16 if dev == "cuda" else torch.float32  # (the CUDA backend has no fp32)
    q = rand(2, 6, 4, 8, dt=dt, dev=dev, grad=True)
    k0, v0 = rand(8, dt=dt, dev=dev, grad=True), rand(1, 1, 2, 8, dt=dt, dev=dev, grad=True)
    k, v = k0.expand(2, 6, 2, 8), v0.expand(2, 6, 2, 8)
    out = flashc.attention(q, k, v)
    want = flashc.attention(q.detach(), k.detach().contiguous(), v.detach().contiguous())
    assert torch.equal(out.detach(), want)
    out.sum().backward()  # (dout is an expanded tensor too)
    assert k0.grad is not None and v0.grad.shape == v0.shape


def test_varlen_offsets_past_the_tensors_are_refused():
    q = rand(4, 2, 8)
    big, small = torch.tensor([0, 4096], dtype=torch.int32), torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        flashc.attention(q, q, q, cu_seqlens_q=big, cu_seqlens_k=small)
    with pytest.raises(ValueError, match="cu_seqlens_k"):
        flashc.attention(q, q, q, cu_seqlens_q=small, cu_seqlens_k=torch.tensor([0, 5], dtype=torch.int32))


@pytest.mark.parametrize("dev", DEVICES)
def test_varlen_rows_after_the_last_sequence(dev):
    """Rows after cu_seqlens_*[-1] belong to no sequence: out 0, lse +inf (flash-attn's lse is (H, q
    rows), C's (H, cu_seqlens_q[-1])), zero gradients; the other rows as without them."""
    cu_q = torch.tensor([0, 3, 6], dtype=torch.int32, device=dev)
    cu_k = torch.tensor([0, 5, 9], dtype=torch.int32, device=dev)
    dt = torch.bfloat16 if dev == "cuda" else torch.float32  # (the CUDA backend has no fp32)
    q, k, v = (rand(n, h, 8, dt=dt, dev=dev, grad=True) for n, h in ((10, 2), (12, 1), (12, 1)))
    out, lse = flashc.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True)
    q6, k9, v9 = (t.detach()[:n].clone().requires_grad_(True) for t, n in ((q, 6), (k, 9), (v, 9)))
    o6, l6 = flashc.attention(q6, k9, v9, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True)
    assert lse.shape == (2, 10) and torch.equal(lse[:, :6], l6) and torch.isinf(lse[:, 6:]).all()
    assert torch.equal(out[:6], o6) and (out[6:] == 0).all()
    dout = torch.randn_like(out)
    out.backward(dout)
    o6.backward(dout[:6])
    for g, g6, n in ((q.grad, q6.grad, 6), (k.grad, k9.grad, 9), (v.grad, v9.grad, 9)):
        assert torch.allclose(g[:n], g6) and (g[n:] == 0).all()


def test_attention_backward_function_matches_autograd():
    q, k, v = rand(1, 8, 2, 8, grad=True), rand(1, 8, 2, 8, grad=True), rand(1, 8, 2, 8, grad=True)
    out, lse = flashc.attention(q, k, v, causal=True, return_lse=True)
    dout = torch.randn_like(out)
    out.backward(dout)
    dq, dk, dv = flashc.attention_backward(dout, q.detach(), k.detach(), v.detach(), out.detach(), lse, causal=True)
    for a, b in ((dq, q.grad), (dk, k.grad), (dv, v.grad)):
        assert torch.equal(a, b)  # the CPU backend is deterministic


def test_errors_are_python_exceptions():
    q = rand(1, 4, 2, 8)
    with pytest.raises(ValueError, match="scale = -2"):
        flashc.attention(q, q, q, scale=-2.0)
    with pytest.raises(ValueError, match="dtype"):
        flashc.attention(q.double(), q.double(), q.double())
    with pytest.raises(ValueError, match="one dtype"):
        flashc.attention(q, q.half(), q)
    if CUDA:
        with pytest.raises(ValueError, match="device"):
            flashc.attention(q, q.cuda(), q)


def test_e4m3_forward():
    """e4m3 q, k, v (descales 1) give a bf16 out: on an sm_90 GPU close to the bf16 forward of the same
    rounded values (P is rounded to e4m3 on the way: test_fp8.c holds the exact accuracy rule); the
    cpu backend refuses them, naming the dtype."""
    q, k, v = (torch.randn(2, 300, 4, 128) for _ in range(3))
    q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
    with pytest.raises(NotImplementedError, match="dtype"):
        flashc.attention(q8, k8, v8)
    if CUDA and torch.cuda.get_device_capability() == (9, 0):
        q8, k8, v8 = (t.cuda() for t in (q8, k8, v8))
        out = flashc.attention(q8, k8, v8, causal=True)
        ref = flashc.attention(*(t.to(torch.bfloat16) for t in (q8, k8, v8)), causal=True)
        assert out.dtype == torch.bfloat16 and out.shape == ref.shape
        diff = (out.float() - ref.float()).norm() / ref.float().norm()
        assert diff.item() < 0.1
        # descales: the inputs are the codes times (0.5, 2, 4) -> scores unchanged, out x 4
        out_d = flashc.attention(q8, k8, v8, causal=True, descale=(0.5, 2.0, 4.0))
        diff = (out_d.float() - 4 * out.float()).norm() / (4 * out.float()).norm()
        assert diff.item() < 0.02
    with pytest.raises(ValueError, match="descale"):
        flashc.attention(q8.cpu(), k8.cpu(), v8.cpu(), descale=(1.0, 1.0))


def test_opcheck_custom_ops():
    """Schema, fake (meta) implementation and autograd registration checked by torch itself."""
    q, k, v = rand(2, 5, 4, 8), rand(2, 6, 2, 8), rand(2, 6, 2, 8)
    args = (q, k, v, None, None, None, None, 0, 0, 0.0, 0.0, True, -1, -1)
    torch.library.opcheck(torch.ops.flashc.fwd.default, args, test_utils=("test_schema", "test_faketensor"))
    out, lse = torch.ops.flashc.fwd(*args)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    bargs = (torch.randn_like(out), q, k, v, out, lse, dq, dk, dv, None, None, None, None, 0, 0, 0.0, 0.0, True, -1, -1,
             False)
    torch.library.opcheck(torch.ops.flashc.bwd.default, bargs, test_utils=("test_schema", "test_faketensor"))
    # paged K/V: k, v page pools (3 pages of 4 rows), block table (batch, max_pages)
    kp, vp = rand(3, 4, 2, 8), rand(3, 4, 2, 8)
    table = torch.tensor([[2, 0], [1, 2]], dtype=torch.int32)
    pargs = (q, kp, vp, None, None, None, None, 0, 0, 0.0, 0.0, True, -1, -1, 1.0, 1.0, 1.0, table)
    torch.library.opcheck(torch.ops.flashc.fwd.default, pargs, test_utils=("test_schema", "test_faketensor"))
    out_p = flashc.attention(q, kp, vp, block_table=table, causal=True)
    expect(out_p, q, kp[table.long()].flatten(1, 2), vp[table.long()].flatten(1, 2), causal=True)


class TinyAttn(torch.nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.o = torch.nn.Linear(dim, dim)

    def forward(self, x, attn):
        B, S, _ = x.shape
        qkv = self.qkv(x).view(B, S, 3, self.heads, -1)
        y = attn(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2])
        return self.o(y.reshape(B, S, -1))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(backend):
    torch._dynamo.reset()
    model = TinyAttn()
    x = torch.randn(2, 16, 32)

    def attn(q, k, v):
        return flashc.attention(q, k, v, causal=True)

    compiled = torch.compile(lambda x: model(x, attn), fullgraph=True, backend=backend)
    y = compiled(x)
    y.square().sum().backward()
    g_compiled = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    y_eager = model(x, attn)
    y_eager.square().sum().backward()
    assert torch.allclose(y, y_eager, atol=1e-5, rtol=1e-5)
    for a, b in zip(g_compiled, (p.grad for p in model.parameters())):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------------------------------------
# CUDA


@cuda_only
def test_cuda_runs_on_the_current_stream():
    q = rand(2, 64, 4, 64, dt=torch.bfloat16, dev="cuda")
    ref_out = flashc.attention(q, q, q, causal=True)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        q2 = q.clone()  # ordered on s
        out = flashc.attention(q2, q2, q2, causal=True)
    s.synchronize()
    assert torch.equal(out, ref_out)


@cuda_only
def test_cuda_graph_capture():
    q, k, v = (rand(2, 128, 8, 64, dt=torch.bfloat16, dev="cuda") for _ in range(3))
    out = flashc.attention(q, k, v, causal=True)  # warm-up: ctx creation happens outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        graph_out = flashc.attention(q, k, v, causal=True)
    for _ in range(2):
        q.copy_(torch.randn_like(q))
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(graph_out, flashc.attention(q, k, v, causal=True))
    assert not torch.equal(graph_out, out)


@cuda_only
@pytest.mark.parametrize("shape", [(2, 200, 4, 2, True), (1, 2048, 26, 13, False)], ids=["causal", "tail-split"])
@pytest.mark.parametrize("det", [False, True])
@pytest.mark.parametrize("D", [64, 128, 256])
def test_cuda_graph_capture_backward(D, det, shape):
    """The backward captured in a CUDA graph (its workspace then private to the graph) and replayed
    on new dout: the deterministic mode equals an eager call bit for bit, the atomic mode to within
    its dQ's order of additions. Each head dim runs its own kernels on Hopper (D = 256 and the
    deterministic mode: a dK/dV kernel, then a dQ kernel), GQA and a causal tail included.
    "tail-split": 16 key blocks x 13 kv heads = 208 on an H100 / H200's 132 SMs leave a last round
    of 76, which the sm90 backward at D <= 128 runs as 3 pieces each in a second launch that
    depends on the first programmatically (PDL), so the graph holds that edge."""
    B, S, H, H_kv, causal = shape
    q = rand(B, S, H, D, dt=torch.bfloat16, dev="cuda")
    k, v = (rand(B, S, H_kv, D, dt=torch.bfloat16, dev="cuda") for _ in range(2))
    dout = torch.randn_like(q)
    out, lse = flashc.attention(q, k, v, causal=causal, return_lse=True)
    flashc.attention_backward(dout, q, k, v, out, lse, causal=causal, deterministic=det)  # warm-up outside
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        grads = flashc.attention_backward(dout, q, k, v, out, lse, causal=causal, deterministic=det)
    for _ in range(2):
        dout.copy_(torch.randn_like(dout))
        g.replay()
        torch.cuda.synchronize()
        ref = flashc.attention_backward(dout, q, k, v, out, lse, causal=causal, deterministic=det)
        for a, b in zip(grads, ref):
            if det:
                assert torch.equal(a, b)
            else:
                torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)


@cuda_only
def test_cuda_compile_inductor_fullgraph():
    torch._dynamo.reset()
    model = TinyAttn(dim=128, heads=2).cuda().bfloat16()
    x = torch.randn(2, 64, 128, device="cuda", dtype=torch.bfloat16)

    def attn(q, k, v):
        return flashc.attention(q, k, v, causal=True)

    y = torch.compile(lambda x: model(x, attn), fullgraph=True)(x)
    y.float().square().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_empty_sequences():
    """Sk = 0: every row sees no key (out 0, lse +inf, zero gradients); Sq = 0: empty outputs.
    torch gives empty tensors a NULL data pointer, which the bindings must not hand to C as such."""
    q, k = rand(1, 3, 2, 8, grad=True), rand(1, 0, 2, 8, grad=True)
    out, lse = flashc.attention(q, k, k, return_lse=True)
    assert (out == 0).all() and torch.isinf(lse).all() and (lse > 0).all()
    out.sum().backward()
    assert (q.grad == 0).all()
    out, lse = flashc.attention(k, q, q, return_lse=True)
    assert out.shape == (1, 0, 2, 8) and lse.shape == (1, 2, 0)


def test_merge_matches_unsplit_attention():
    """flashc.merge on torch tensors (the device's backend): the merge of two key halves against an
    fp64 merge of the same partials, and (fp32 on the CPU) against one call over all keys."""
    dev = "cuda" if CUDA else "cpu"
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    q = torch.randn(2, 4, 3, 64, device=dev, dtype=dt)
    k, v = torch.randn(2, 40, 3, 64, device=dev, dtype=dt), torch.randn(2, 40, 3, 64, device=dev, dtype=dt)
    parts = [flashc.attention(q, k[:, a:b], v[:, a:b], return_lse=True) for a, b in ((0, 13), (13, 40))]
    o_parts, l_parts = torch.stack([p[0].float() for p in parts]), torch.stack([p[1] for p in parts])
    out, lse = flashc.merge(o_parts, l_parts, out_dtype=dt)
    assert out.dtype == dt and out.shape == q.shape and lse.shape == (2, 3, 4)
    l64 = l_parts.double()
    L = torch.logsumexp(l64, dim=0)
    w = torch.exp(l64 - L).permute(0, 1, 3, 2)[..., None]  # (n, B, S, H, 1)
    r = (w * o_parts.double()).sum(0)
    err = (out.double() - r).abs().max().item()
    assert err <= (1e-6 if dt == torch.float32 else 2 ** -8) * (1 + r.abs().max().item()), err
    assert (lse.double() - L).abs().max().item() <= 1e-5 * (1 + L.abs().max().item())
    if dt == torch.float32:
        expect(out, q, k, v)
