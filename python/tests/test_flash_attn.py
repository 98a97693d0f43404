"""flashc.flash_attn: flash-attn 2.x's API (signatures, defaults, returns), its packed and varlen
variants against the fp64 reference, the interim KV-cache path, bert_padding, and `import flash_attn`
redirection. CPU everywhere torch is installed; the same code runs on CUDA when a GPU is present."""
import inspect
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from flashc import flash_attn as fa  # noqa: E402
from flashc.flash_attn import bert_padding as bp  # noqa: E402
from conftest import cuda_ready  # noqa: E402
from torch_ref import check, expect  # noqa: E402

DEV = "cuda" if cuda_ready()[0] else "cpu"
DT = torch.bfloat16 if DEV == "cuda" else torch.float32  # flashc's CUDA backend takes fp16/bf16


HD = 64 if DEV == "cuda" else 16  # head dims the CUDA kernels have; the CPU takes any


def rand(*shape, grad=False):
    return torch.randn(*shape, dtype=DT, device=DEV).requires_grad_(grad)


def tol(name, got, r, **kw):
    """Values computed from already-rounded data (cache rows, rotary): the fp32 rule, or for bf16 the
    input's own rounding (2^-8 relative) -- the attention outputs go through expect() instead."""
    if DT == torch.float32:
        check(name, got, r, **kw)
    else:
        err = np.abs(got.detach().double().cpu().numpy() - r).max()
        assert err <= 2 ** -7 * (1 + np.abs(r).max()), f"{name}: {err}"


# flash-attn 2.8's signatures, (name, default) in order; inspect.Parameter.empty = positional, no default
E = inspect.Parameter.empty
COMMON = [("dropout_p", 0.0), ("softmax_scale", None), ("causal", False), ("window_size", (-1, -1)),
          ("softcap", 0.0), ("alibi_slopes", None), ("deterministic", False), ("return_attn_probs", False)]
SIGNATURES = {
    "flash_attn_func": [("q", E), ("k", E), ("v", E)] + COMMON,
    "flash_attn_qkvpacked_func": [("qkv", E)] + COMMON,
    "flash_attn_kvpacked_func": [("q", E), ("kv", E)] + COMMON,
    "flash_attn_varlen_func": [("q", E), ("k", E), ("v", E), ("cu_seqlens_q", E), ("cu_seqlens_k", E),
                               ("max_seqlen_q", E), ("max_seqlen_k", E)] + COMMON + [("block_table", None)],
    "flash_attn_varlen_qkvpacked_func": [("qkv", E), ("cu_seqlens", E), ("max_seqlen", E)] + COMMON,
    "flash_attn_varlen_kvpacked_func": [("q", E), ("kv", E), ("cu_seqlens_q", E), ("cu_seqlens_k", E),
                                        ("max_seqlen_q", E), ("max_seqlen_k", E)] + COMMON,
    "flash_attn_with_kvcache": [("q", E), ("k_cache", E), ("v_cache", E), ("k", None), ("v", None),
                                ("rotary_cos", None), ("rotary_sin", None), ("cache_seqlens", None),
                                ("cache_batch_idx", None), ("cache_leftpad", None), ("block_table", None),
                                ("softmax_scale", None), ("causal", False), ("window_size", (-1, -1)),
                                ("softcap", 0.0), ("rotary_interleaved", True), ("alibi_slopes", None),
                                ("num_splits", 0), ("return_softmax_lse", False)],
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signatures_match_flash_attn(name):
    params = inspect.signature(getattr(fa, name)).parameters
    assert [(p.name, p.default) for p in params.values()] == SIGNATURES[name]


def test_returns_and_unsupported_options():
    q, k, v = rand(2, 8, 4, HD), rand(2, 8, 2, HD), rand(2, 8, 2, HD)
    out = fa.flash_attn_func(q, k, v, causal=True)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape
    out2, lse, s_dmask = fa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert torch.equal(out, out2) and lse.shape == (2, 4, 8) and lse.dtype == torch.float32
    assert s_dmask.numel() == 0  # what flash-attn returns without dropout
    with pytest.raises(NotImplementedError, match="dropout"):
        fa.flash_attn_func(q, k, v, dropout_p=0.1)


@pytest.mark.parametrize("causal", [False, True])
def test_packed_variants_match_separate(causal):
    B, S, H, D = 2, 12, 4, HD
    qkv = rand(B, S, 3, H, D, grad=True)
    out = fa.flash_attn_qkvpacked_func(qkv, causal=causal, window_size=(5, -1))
    dout = torch.randn_like(out)
    out.backward(dout)
    g = qkv.grad
    expect(out, qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dout, (g[:, :, 0], g[:, :, 1], g[:, :, 2]),
           causal=causal, window=(5, -1))
    qq, kv = rand(B, S, H, D, grad=True), rand(B, S + 3, 2, 2, D, grad=True)
    out = fa.flash_attn_kvpacked_func(qq, kv, causal=causal, softmax_scale=0.3)
    out.backward(dout)
    expect(out, qq, kv[:, :, 0], kv[:, :, 1], dout, (qq.grad, kv.grad[:, :, 0], kv.grad[:, :, 1]), causal=causal,
           scale=0.3)


def varlen_batch(lens, H, D, grad=True):
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device=DEV)
    return cu, max(lens), rand(int(cu[-1]), H, D, grad=grad)


def test_varlen_variants():
    lens_q, lens_k = [4, 9, 1], [6, 9, 5]
    cu_q, mq, q = varlen_batch(lens_q, 4, HD)
    cu_k, mk, k = varlen_batch(lens_k, 2, HD)
    _, _, v = varlen_batch(lens_k, 2, HD)
    out, lse, _ = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, mq, mk, causal=True, return_attn_probs=True)
    assert lse.shape == (4, sum(lens_q))
    dout = torch.randn_like(out)
    out.backward(dout)
    for b in range(3):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        expect(out[None, qs], q[None, qs], k[None, ks], v[None, ks], dout[None, qs],
               (q.grad[None, qs], k.grad[None, ks], v.grad[None, ks]), causal=True)
    # packed forms of the same batch
    cu, m, qkv = varlen_batch(lens_k, 3 * 2, HD, grad=False)
    qkv = qkv.view(-1, 3, 2, HD)
    o1 = fa.flash_attn_varlen_qkvpacked_func(qkv, cu, m, causal=True)
    o2 = fa.flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu, cu, m, m, causal=True)
    assert torch.equal(o1, o2)
    o3 = fa.flash_attn_varlen_kvpacked_func(qkv[:, 0], qkv[:, 1:], cu, cu, m, m, causal=True)
    assert torch.equal(o1, o3)


def paged(k, v, cu_k, lens_k, page):
    """k, v (total_k, H_kv, D) of varlen sequences as page pools on shuffled pages (two spare), NaN in
    every row no sequence owns, and the block table (batch, max_pages), -1 past each sequence's pages."""
    need = [-(-n // page) for n in lens_k]
    order = torch.randperm(sum(need) + 2).tolist()
    kp = torch.full((len(order), page) + tuple(k.shape[1:]), float("nan"), dtype=k.dtype, device=k.device)
    vp = kp.clone()
    table = torch.full((len(lens_k), max(need)), -1, dtype=torch.int32)
    for b in range(len(lens_k)):
        for i in range(need[b]):
            pg, rows = order.pop(), slice(int(cu_k[b]) + i * page, int(cu_k[b]) + min((i + 1) * page, lens_k[b]))
            table[b, i] = pg
            kp[pg, :rows.stop - rows.start], vp[pg, :rows.stop - rows.start] = k[rows], v[rows]
    return kp, vp, table.to(k.device)


@pytest.mark.parametrize("lens_q, lens_k, causal", [([3, 1, 9, 2], [7, 20, 9, 0], True),
                                                    ([1, 3, 0, 4, 2], [7, 2, 5, 30, 0], True),
                                                    ([1, 3, 0, 4, 2], [7, 2, 5, 30, 0], False)],
                         ids=["prefill", "decode-mix", "decode-mix-nomask"])
def test_varlen_paged_kv(lens_q, lens_k, causal):
    """flash_attn_varlen_func with block_table: k, v page pools of a page size flash-attn does not take
    (5), pages shuffled, NaN in rows no sequence owns; forward only, as in flash-attn. "decode-mix": a
    mixed decode batch, 0-4 queries a sequence, some with fewer keys than queries or none (on CUDA
    each query row runs the decode kernel with its sequence's block-table row)."""
    page, H, Hkv = 5, 4, 2
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lens_q)]), dtype=torch.int32, device=DEV)
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lens_k)]), dtype=torch.int32, device=DEV)
    q, k, v = rand(sum(lens_q), H, HD), rand(sum(lens_k), Hkv, HD), rand(sum(lens_k), Hkv, HD)
    kp, vp, table = paged(k, v, cu_k, lens_k, page)
    out, lse, _ = fa.flash_attn_varlen_func(q, kp, vp, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal,
                                            block_table=table, return_attn_probs=True)
    for b in range(len(lens_q)):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        if lens_q[b]:
            expect(out[None, qs], q[None, qs], k[None, ks], v[None, ks], causal=causal)
    dense = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal,
                                      return_attn_probs=True)
    assert torch.allclose(lse, dense[1], atol=1e-4, rtol=1e-4)  # +inf where a row sees no key
    with pytest.raises(NotImplementedError, match="forward only"):
        fa.flash_attn_varlen_func(q.detach().requires_grad_(), kp, vp, cu_q, cu_k, max(lens_q), max(lens_k),
                                  block_table=table)


def test_varlen_one_query_each():
    """A padded batch's generation step, unpadded: one query a sequence from row 0 (on either backend
    the decode kernel's route), dense and paged K/V, seqused_k, against the fp64 reference."""
    import flashc
    from torch_ref import ref

    lens_k, H, Hkv, page = [7, 30, 1, 12], 4, 2, 3
    B = len(lens_k)
    cu_q = torch.arange(B + 1, dtype=torch.int32, device=DEV)
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lens_k)]), dtype=torch.int32, device=DEV)
    q, k, v = rand(B, H, HD), rand(sum(lens_k), Hkv, HD), rand(sum(lens_k), Hkv, HD)
    used = torch.tensor([7, 9, 1, 5], dtype=torch.int32, device=DEV)
    out, lse, _ = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 1, max(lens_k), causal=True, return_attn_probs=True)
    out_u, lse_u = flashc.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=1,
                                    max_seqlen_k=max(lens_k), seqused_k=used, causal=True, return_lse=True)
    kp, vp, table = paged(k, v, cu_k, lens_k, page)
    out_p, lse_p, _ = fa.flash_attn_varlen_func(q, kp, vp, cu_q, cu_k, 1, max(lens_k), causal=True,
                                                block_table=table, return_attn_probs=True)
    for b in range(B):
        for o, l, n in ((out, lse, lens_k[b]), (out_p, lse_p, lens_k[b]), (out_u, lse_u, int(used[b]))):
            ks = slice(int(cu_k[b]), int(cu_k[b]) + n)  # (seqused_k: the keys it leaves)
            expect(o[None, b:b + 1], q[None, b:b + 1], k[None, ks], v[None, ks], causal=True)
            r_lse = ref(q[None, b:b + 1], k[None, ks], v[None, ks], causal=True)[1][0, :, 0]
            got = l[:, b].double().cpu().numpy()
            assert (np.isinf(got) == np.isinf(r_lse)).all()
            fin = np.isfinite(r_lse)
            assert np.abs(got[fin] - r_lse[fin]).max(initial=0) <= 1e-4 * (1 + np.abs(r_lse[fin]).max(initial=0))


def test_bert_padding_roundtrip_and_grad():
    B, S, Dm = 3, 7, 5
    x = rand(B, S, Dm, grad=True)
    mask = torch.zeros(B, S, dtype=torch.bool, device=DEV)
    mask[0, :7] = True
    mask[1, :3] = True
    mask[2, 4:] = True  # left padding
    xu, idx, cu, mx, used = bp.unpad_input(x, mask)
    assert xu.shape == (int(mask.sum()), Dm) and cu.tolist() == [0, 7, 10, 13] and mx == 7
    assert used.tolist() == [7, 3, 3] and cu.dtype == torch.int32
    assert torch.equal(xu, x[mask])
    back = bp.pad_input(xu, idx, B, S)
    assert torch.equal(back[mask], x[mask]) and (back[~mask] == 0).all()
    back.sum().backward()
    assert torch.equal(x.grad, mask[..., None].expand_as(x).to(x.dtype))
    y = rand(10, 3)
    assert torch.equal(bp.index_first_axis(y, torch.tensor([4, 1], device=DEV)), y[[4, 1]])
    xc, idx2, cu2, mx2 = bp.unpad_input_for_concatenated_sequences(
        x.detach(), torch.tensor([[2, 3, 0, 0, 0, 0, 0], [7, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0]], device=DEV))
    assert cu2.tolist() == [0, 2, 5, 12, 13] and mx2 == 7 and xc.shape == (13, Dm)


def test_import_flash_attn_redirects():
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "flash_attn" or k.startswith("flash_attn.")}
    try:
        fa.install()
        import flash_attn
        from flash_attn import flash_attn_func
        from flash_attn.bert_padding import pad_input, unpad_input
        from flash_attn.flash_attn_interface import flash_attn_varlen_func

        assert flash_attn_func is fa.flash_attn_func and flash_attn_varlen_func is fa.flash_attn_varlen_func
        assert pad_input is bp.pad_input and unpad_input is bp.unpad_input
        assert flash_attn.__version__.startswith("2.")
    finally:
        for k in [k for k in sys.modules if k == "flash_attn" or k.startswith("flash_attn.")]:
            del sys.modules[k]
        sys.modules.update(saved)


# ------------------------------------------------------------------------------------------------
# KV cache (interim Python path)


def rope_ref(x, cos, sin, pos, interleaved):
    """fp64 RoPE of x (S, H, D) numpy at positions pos (S,)."""
    rd = 2 * cos.shape[1]
    x = x.copy()
    c, s = cos[pos][:, None, :], sin[pos][:, None, :]
    if interleaved:
        x1, x2 = x[..., 0:rd:2].copy(), x[..., 1:rd:2].copy()
        x[..., 0:rd:2], x[..., 1:rd:2] = x1 * c - x2 * s, x1 * s + x2 * c
    else:
        x1, x2 = x[..., :rd // 2].copy(), x[..., rd // 2:rd].copy()
        x[..., :rd // 2], x[..., rd // 2:rd] = x1 * c - x2 * s, x1 * s + x2 * c
    return x


@pytest.mark.parametrize("new", [0, 1, 3])
@pytest.mark.parametrize("rotary", [None, "interleaved", "halves"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ["plain", "batch_idx", "leftpad"])
def test_with_kvcache(new, rotary, causal, layout):
    if rotary and not new:
        pytest.skip("flash-attn applies rotary only together with an append")
    B, Bc, Sc, Sq, H, Hkv, D = 3, 5, 24, 2, 4, 2, HD
    kc, vc = rand(Bc, Sc, Hkv, D), rand(Bc, Sc, Hkv, D)
    kc0, vc0 = kc.clone(), vc.clone()
    q = rand(B, Sq, H, D)
    seqlens = torch.tensor([5, 0, 17], dtype=torch.int32, device=DEV)
    k_new = rand(B, new, Hkv, D) if new else None
    v_new = rand(B, new, Hkv, D) if new else None
    idx = torch.tensor([4, 0, 2], dtype=torch.int32, device=DEV) if layout == "batch_idx" else None
    lp = torch.tensor([2, 0, 6], dtype=torch.int32, device=DEV) if layout == "leftpad" else None
    cos = sin = None
    if rotary:
        ang = torch.rand(Sc, 4, device=DEV, dtype=torch.float64) * 6.28
        cos, sin = ang.cos().to(DT), ang.sin().to(DT)
    out, lse = fa.flash_attn_with_kvcache(q, kc, vc, k_new, v_new, rotary_cos=cos, rotary_sin=sin,
                                          cache_seqlens=seqlens, cache_batch_idx=idx, cache_leftpad=lp, causal=causal,
                                          rotary_interleaved=rotary == "interleaved", return_softmax_lse=True)
    assert out.shape == q.shape and lse.shape == (B, H, Sq)
    f64 = lambda t: t.detach().double().cpu().numpy()  # noqa: E731
    for b in range(B):
        row = int(idx[b]) if idx is not None else b
        c = int(seqlens[b])
        start = int(lp[b]) if lp is not None else 0
        kb, vb = f64(kc0[row]), f64(vc0[row])
        qb = f64(q[b])
        if new:
            kn = f64(k_new[b])
            if rotary:
                kn = rope_ref(kn, f64(cos), f64(sin), c + np.arange(new), rotary == "interleaved")
            kb[c:c + new], vb[c:c + new] = kn, f64(v_new[b])
            # the append happened in place, in the cache row of this sequence
            tol("k_cache", kc[row, c:c + new], kn)
            tol("v_cache", vc[row, c:c + new], f64(v_new[b]))
        if rotary:
            qpos = c + np.arange(Sq) if causal else np.full(Sq, c)
            qb = rope_ref(qb, f64(cos), f64(sin), qpos, rotary == "interleaved")
        keys = slice(start, c + new)
        as_in = lambda x: torch.from_numpy(x)[None].to(DEV, DT)  # noqa: E731 (values already rounded to DT)
        r_out, r_lse = expect(out[b][None], as_in(qb), as_in(kb[keys]), as_in(vb[keys]), causal=causal)
        fin = np.isfinite(r_lse[0])
        assert (np.isinf(f64(lse[b])) == ~fin).all()
    untouched = torch.ones(Bc, Sc, dtype=torch.bool, device=DEV)
    for b in range(B):
        row = int(idx[b]) if idx is not None else b
        untouched[row, int(seqlens[b]):int(seqlens[b]) + new] = False
    assert torch.equal(kc[untouched], kc0[untouched]) and torch.equal(vc[untouched], vc0[untouched])


def test_with_kvcache_checks_what_c_cannot_see():
    # a cache of fewer rows than the batch (no cache_batch_idx): the appends and reads would run past it
    q, kc, vc = rand(4, 1, 4, HD), rand(1, 8, 2, HD), rand(1, 8, 2, HD)
    seqlens = torch.zeros(4, dtype=torch.int32, device=DEV)
    with pytest.raises(ValueError, match="num_cache_rows"):
        fa.flash_attn_with_kvcache(q, kc, vc, rand(4, 1, 2, HD), rand(4, 1, 2, HD), cache_seqlens=seqlens)
    # a broadcast cache cannot be written in place; a broadcast k (new keys) is copied
    kc4, vc4 = rand(4, 8, 2, HD), rand(4, 8, 2, HD)
    with pytest.raises(ValueError, match="broadcast"):
        fa.flash_attn_with_kvcache(q, rand(1, 8, 2, HD).expand(4, 8, 2, HD), vc4, cache_seqlens=seqlens)
    k1 = rand(1, 1, 2, HD)
    kc_a, vc_a = kc4.clone(), vc4.clone()
    out = fa.flash_attn_with_kvcache(q, kc4, vc4, k1.expand(4, 1, 2, HD), k1.expand(4, 1, 2, HD), cache_seqlens=seqlens)
    want = fa.flash_attn_with_kvcache(q, kc_a, vc_a, k1.expand(4, 1, 2, HD).contiguous(),
                                      k1.expand(4, 1, 2, HD).contiguous(), cache_seqlens=seqlens)
    assert torch.equal(out, want) and torch.equal(kc4, kc_a)


@pytest.mark.parametrize("page", [1, 16, 256])
@pytest.mark.parametrize("new", [0, 3])
@pytest.mark.parametrize("splits", [0, 1, 3])
def test_with_kvcache_paged(page, new, splits):
    """A paged cache (pages scattered through the pool in random order, appends crossing page
    boundaries) against the fp64 reference on the gathered keys; num_splits forced or chosen."""
    B, Sq, H, Hkv, D = 3, 1, 4, 2, HD
    seqlens = torch.tensor([page - 1 if page > 1 else 5, 0, 2 * page + 1], dtype=torch.int32, device=DEV)
    need = [(int(c) + new + page - 1) // page for c in seqlens]
    max_pages = max(need) + 1
    pool = B * max_pages + 2
    kc, vc = rand(pool, page, Hkv, D), rand(pool, page, Hkv, D)
    kc0, vc0 = kc.clone(), vc.clone()
    table = torch.randperm(pool, device=DEV)[:B * max_pages].view(B, max_pages).to(torch.int32)
    q = rand(B, Sq, H, D)
    k_new = rand(B, new, Hkv, D) if new else None
    v_new = rand(B, new, Hkv, D) if new else None
    out, lse = fa.flash_attn_with_kvcache(q, kc, vc, k_new, v_new, cache_seqlens=seqlens, block_table=table,
                                          causal=True, num_splits=splits, return_softmax_lse=True)
    assert out.shape == q.shape and lse.shape == (B, H, Sq)
    for b in range(B):
        n = int(seqlens[b]) + new
        rows = [(int(table[b, j // page]), j % page) for j in range(n)]
        kb = torch.stack([kc0[p, r] for p, r in rows]) if n else kc0[:0, 0]
        vb = torch.stack([vc0[p, r] for p, r in rows]) if n else vc0[:0, 0]
        c = int(seqlens[b])
        if new:
            kb[c:], vb[c:] = k_new[b], v_new[b]
            got_k = torch.stack([kc[p, r] for p, r in rows[c:]])
            assert torch.equal(got_k, k_new[b]), "the append did not land in the pages of the table"
        r_out, r_lse = expect(out[b][None], q[b][None], kb[None], vb[None], causal=True)
        assert (np.isinf(lse[b].double().cpu().numpy()) == ~np.isfinite(r_lse[0])).all()
