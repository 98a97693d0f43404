"""torch_ref.py -- references for the torch tests: the fp64 specification (reference.py, through
numpy) and a naive attention in torch in the inputs' own precision (the error budget of
DESIGN.md section 2 for fp16/bf16), both with gradients."""
import numpy as np
import torch

from reference import ref_attention


def to64(t):
    return t.detach().to("cpu", torch.float64).numpy()


def ref(q, k, v, dout=None, **opt):
    """fp64 (out, lse[, (dq, dk, dv)]) as numpy arrays, for batch-mode torch tensors."""
    conv = {kk: (to64(vv) if isinstance(vv, torch.Tensor) else vv) for kk, vv in opt.items()}
    return ref_attention(to64(q), to64(k), to64(v), dout=None if dout is None else to64(dout), **conv)


def naive(q, k, v, causal=False, scale=None, softcap=0.0, window=(-1, -1), alibi=None):
    """Attention as a framework would write it, in q's dtype: (B, Sq, H, D) layout, differentiable."""
    B, Sq, H, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    k = k.repeat_interleave(H // Hkv, dim=2)
    v = v.repeat_interleave(H // Hkv, dim=2)
    scale = D ** -0.5 if scale is None else scale
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(Sq, device=q.device)[:, None]
    j = torch.arange(Sk, device=q.device)[None, :]
    diag = i + Sk - Sq
    if alibi is not None:
        a = alibi if alibi.dim() == 2 else alibi[None].expand(B, H)
        s = s - (a[:, :, None, None] * (diag - j).abs()).to(s.dtype)
    left, right = window
    if causal:
        right = 0
    m = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device)
    if left >= 0:
        m &= j >= diag - left
    if right >= 0:
        m &= j <= diag + right
    s = s.masked_fill(~m, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, v)


def max_err(x, r):
    return float(np.abs(to64(x) - r).max()) if np.size(r) else 0.0


def check(name, got, r, naive_val=None, factor=2.0, f32_tol=1e-5):
    """DESIGN.md section 2 (see reference.assert_close), for torch tensors."""
    g = to64(got)
    assert np.isfinite(g).all(), f"{name}: non-finite values"
    if naive_val is None:
        bad = np.abs(g - r) > f32_tol * (1 + np.abs(r))
        assert not bad.any(), f"{name}: max err {np.abs(g - r).max():.3g} exceeds {f32_tol:g}*(1+|ref|)"
    else:
        e, en = max_err(got, r), max_err(naive_val, r)
        assert e <= factor * en + 1e-5, f"{name}: max err {e:.3g} > {factor:g} x naive {en:.3g} + 1e-5"


def expect(out, q, k, v, dout=None, grads=None, **opt):
    """Assert out (and grads = (dq, dk, dv) for the output gradient dout) against the fp64
    reference by DESIGN.md section 2: the fp32 rule for fp32 inputs, else at most 2x (3x for
    gradients) the error of naive() in the inputs' precision. Batch-mode tensors; opt as ref()."""
    r = ref(q, k, v, dout, **opt)
    nv = ng = None
    if q.dtype != torch.float32:
        qn, kn, vn = (t.detach().clone().requires_grad_(grads is not None) for t in (q, k, v))
        nopt = {kk: vv for kk, vv in opt.items() if kk != "seqused_k"}
        with torch.enable_grad():
            nv = naive(qn, kn, vn, **nopt)
            if grads is not None:
                nv.backward(dout)
                ng = (qn.grad, kn.grad, vn.grad)
    check("out", out, r[0], nv)
    if grads is not None:
        for i, name in enumerate(("dq", "dk", "dv")):
            check(name, grads[i], r[2][i], None if ng is None else ng[i], factor=3.0, f32_tol=5e-5)
    return r
