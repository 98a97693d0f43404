"""reference.py -- the fp64 specification of DESIGN.md section 1 in numpy, and the accuracy rule of
section 2, for the binding tests.

ref_attention works on batch-mode float64 arrays for one sequence set; varlen inputs are compared
by slicing them into sequences first (see split_varlen). naive_lowp is "a naive implementation in
the same precision": every intermediate the way a framework would store it (rounded to the input
dtype), which sets the error budget for fp16/bf16.
"""
import numpy as np


def key_mask(sq, sk, causal, window, used=None):
    """bool (sq, sk): query i sees key j (bottom-right aligned, DESIGN.md section 1)."""
    sk_eff = sk if used is None else min(sk, used)
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    diag = i + sk_eff - sq
    left, right = window
    if causal:
        right = 0
    m = np.broadcast_to(j < sk_eff, (sq, sk)).copy()
    if left >= 0:
        m &= j >= diag - left
    if right >= 0:
        m &= j <= diag + right
    return m, sk_eff


def _scores(q, k, scale, softcap, slope, sq, sk_eff):
    """Raw (capped, biased) scores for one head: q (sq, D), k (sk, D), float64."""
    s = scale * (q @ k.T)
    t = None
    if softcap > 0:
        t = np.tanh(s / softcap)
        s = softcap * t
    if slope:
        i = np.arange(q.shape[0])[:, None]
        j = np.arange(k.shape[0])[None, :]
        s = s - slope * np.abs(i + sk_eff - sq - j)
    return s, t


def ref_attention(q, k, v, causal=False, scale=None, softcap=0.0, window=(-1, -1), alibi=None, seqused_k=None,
                  dout=None):
    """fp64 out (B, Sq, H, D), lse (B, H, Sq) and, with dout, (dq, dk, dv), for batch-mode inputs."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, Sq, H, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    g = H // Hkv
    scale = 1 / np.sqrt(D) if scale is None else scale
    out = np.zeros_like(q)
    lse = np.full((B, H, Sq), np.inf)
    grads = None
    if dout is not None:
        dout = np.asarray(dout, np.float64)
        grads = (np.zeros_like(q), np.zeros_like(k), np.zeros_like(v))
    for b in range(B):
        used = None if seqused_k is None else int(seqused_k[b])
        m, sk_eff = key_mask(Sq, Sk, causal, window, used)
        for h in range(H):
            kh = h // g
            slope = 0.0
            if alibi is not None:
                a = np.asarray(alibi, np.float64)
                slope = a[b, h] if a.ndim == 2 else a[h]
            s, t = _scores(q[b, :, h], k[b, :, kh], scale, softcap, slope, Sq, sk_eff)
            s = np.where(m, s, -np.inf)
            rows = m.any(1)
            mx = np.where(rows, s.max(1, initial=-np.inf), 0.0)
            p = np.exp(s - mx[:, None])
            l = p.sum(1)
            p = np.where(rows[:, None], p / np.where(rows, l, 1)[:, None], 0.0)
            out[b, :, h] = p @ v[b, :, kh]
            lse[b, h] = np.where(rows, mx + np.log(np.where(rows, l, 1)), np.inf)
            if dout is not None:
                do = dout[b, :, h]
                dp = do @ v[b, :, kh].T
                dd = (do * out[b, :, h]).sum(1)
                ds = p * (dp - dd[:, None])
                if softcap > 0:
                    ds = ds * (1 - t * t)
                grads[0][b, :, h] += scale * ds @ k[b, :, kh]
                grads[1][b, :, kh] += scale * ds.T @ q[b, :, h]
                grads[2][b, :, kh] += p.T @ do
    return (out, lse, grads) if dout is not None else (out, lse)


def naive_lowp(q, k, v, rnd, causal=False, scale=None, softcap=0.0, window=(-1, -1), alibi=None, seqused_k=None,
               dout=None):
    """The naive algorithm with every stored intermediate rounded by rnd (x -> x in the low dtype,
    back to float64): scores, probabilities, output, and for the backward dP, dS and the gradients."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, Sq, H, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    g = H // Hkv
    scale = 1 / np.sqrt(D) if scale is None else scale
    out = np.zeros_like(q)
    grads = None
    if dout is not None:
        dout = np.asarray(dout, np.float64)
        grads = [np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)]
    for b in range(B):
        used = None if seqused_k is None else int(seqused_k[b])
        m, sk_eff = key_mask(Sq, Sk, causal, window, used)
        for h in range(H):
            kh = h // g
            slope = 0.0
            if alibi is not None:
                a = np.asarray(alibi, np.float64)
                slope = a[b, h] if a.ndim == 2 else a[h]
            s = rnd(rnd(q[b, :, h] @ k[b, :, kh].T) * scale)
            t = None
            if softcap > 0:
                t = rnd(np.tanh(s / softcap))
                s = rnd(softcap * t)
            if slope:
                i = np.arange(Sq)[:, None]
                j = np.arange(Sk)[None, :]
                s = rnd(s - slope * np.abs(i + sk_eff - Sq - j))
            s = np.where(m, s, -np.inf)
            rows = m.any(1)
            mx = np.where(rows, s.max(1, initial=-np.inf), 0.0)
            e = np.exp(s - mx[:, None])
            p = rnd(np.where(rows[:, None], e / np.where(rows, e.sum(1), 1)[:, None], 0.0))
            o = rnd(p @ v[b, :, kh])
            out[b, :, h] = o
            if dout is not None:
                do = dout[b, :, h]
                dp = rnd(do @ v[b, :, kh].T)
                dd = rnd((do * o).sum(1))
                ds = rnd(p * (dp - dd[:, None]))
                if softcap > 0:
                    ds = rnd(ds * (1 - t * t))
                grads[0][b, :, h] += scale * ds @ k[b, :, kh]
                grads[1][b, :, kh] += scale * ds.T @ q[b, :, h]
                grads[2][b, :, kh] += p.T @ do
    if dout is not None:
        grads = tuple(rnd(x) for x in grads)
    return (out, grads) if dout is not None else out


def max_err(x, ref, where=None):
    d = np.abs(np.asarray(x, np.float64) - ref)
    if where is not None:
        d = d[where]
    return float(d.max()) if d.size else 0.0


def assert_close(name, got, ref, naive=None, factor=2.0, f32_tol=1e-5):
    """DESIGN.md section 2: fp32 paths max|got - ref| <= f32_tol * (1 + |ref|) elementwise; fp16/bf16
    paths max error <= factor * (max error of the naive low-precision run) + 1e-5."""
    got64 = np.asarray(got, np.float64)
    assert np.isfinite(got64).all(), f"{name}: non-finite values (unwritten output?)"
    if naive is None:
        bad = np.abs(got64 - ref) > f32_tol * (1 + np.abs(ref))
        assert not bad.any(), (f"{name}: max err {max_err(got64, ref):.3g} exceeds {f32_tol:g}*(1+|ref|) "
                               f"at {np.argwhere(bad)[:3].tolist()}")
    else:
        e, en = max_err(got64, ref), max_err(naive, ref)
        assert e <= factor * en + 1e-5, f"{name}: max err {e:.3g} > {factor:g} x naive {en:.3g} + 1e-5"
