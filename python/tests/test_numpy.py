"""Bindings on numpy arrays (CPU backend): dtypes, options, strides, varlen, backward, DLPack.

Each check draws fresh random inputs and compares with the fp64 reference (reference.py) by
DESIGN.md section 2; outputs start as NaN (conftest), so unwritten elements fail.
"""
import numpy as np
import pytest

import flashc
from reference import assert_close, naive_lowp, ref_attention

try:
    import ml_dtypes
except ImportError:  # bf16 cases skip
    ml_dtypes = None

RNG = np.random.default_rng()
DTYPES = ["f32", "f16", "bf16"]


def np_dtype(name):
    if name == "f32":
        return np.float32
    if name == "f16":
        return np.float16
    if ml_dtypes is None:
        pytest.skip("ml_dtypes is not installed")
    return ml_dtypes.bfloat16


def rounder(dt):
    return lambda x: np.asarray(x, np.float64).astype(dt).astype(np.float64)


def randn(shape, dt):
    return RNG.standard_normal(shape).astype(dt)


def check_lse(lse, ref_lse):
    lse = np.asarray(lse, np.float64)
    assert (np.isinf(lse) == np.isinf(ref_lse)).all(), "lse: +inf rows differ from the reference"
    fin = np.isfinite(ref_lse)
    assert np.abs(lse[fin] - ref_lse[fin]).max(initial=0) <= 1e-4 * (1 + np.abs(ref_lse[fin]).max(initial=0))


def run_case(dt_name, B, Sq, Sk, H, Hkv, D, grad=True, **opt):
    dt = np_dtype(dt_name)
    q, k, v = randn((B, Sq, H, D), dt), randn((B, Sk, Hkv, D), dt), randn((B, Sk, Hkv, D), dt)
    out, lse = flashc.attention(q, k, v, return_lse=True, **opt)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.dtype == np.float32
    ropt = {k_: v_ for k_, v_ in opt.items() if k_ in ("causal", "scale", "softcap", "window", "seqused_k")}
    if "alibi_slopes" in opt:
        ropt["alibi"] = opt["alibi_slopes"]
    dout = randn(q.shape, dt)
    ref_out, ref_lse, ref_g = ref_attention(q, k, v, dout=dout, **ropt)
    naive = None
    if dt_name != "f32":
        naive_out, naive_g = naive_lowp(q, k, v, rounder(dt), dout=dout, **ropt)
        naive = naive_out
    assert_close("out", out, ref_out, naive)
    check_lse(lse, ref_lse)
    if not grad:
        return
    dq, dk, dv = flashc.attention_backward(dout, q, k, v, out, lse, **opt)
    for name, g, r, i in zip(("dq", "dk", "dv"), (dq, dk, dv), ref_g, range(3)):
        assert g.shape == (q, k, v)[i].shape and g.dtype == q.dtype
        assert_close(name, g, r, None if naive is None else naive_g[i], factor=3.0, f32_tol=5e-5)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_basic(dt, causal):
    run_case(dt, 2, 17, 23, 4, 4, 16, causal=causal)


@pytest.mark.parametrize("dt", DTYPES)
def test_gqa_softcap_scale(dt):
    run_case(dt, 2, 9, 13, 6, 2, 8, causal=True, softcap=5.0, scale=0.3)


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("window", [(3, 0), (2, 4), (-1, 1), (0, 0)])
def test_window(dt, window):
    run_case(dt, 1, 15, 20, 2, 1, 8, window=window)


@pytest.mark.parametrize("per_batch", [False, True])
def test_alibi(per_batch):
    B, H = 3, 4
    slopes = RNG.uniform(0.1, 1.0, (B, H) if per_batch else (H,)).astype(np.float32)
    run_case("f32", B, 8, 11, H, 2, 8, causal=True, alibi_slopes=slopes)


def test_causal_more_queries_than_keys_gives_empty_rows():
    # Sq > Sk with a bottom-right causal mask: the first Sq - Sk rows see no key: out 0, lse +inf
    q, k, v = randn((1, 7, 2, 8), np.float32), randn((1, 3, 2, 8), np.float32), randn((1, 3, 2, 8), np.float32)
    out, lse = flashc.attention(q, k, v, causal=True, return_lse=True)
    assert (out[0, :4] == 0).all() and np.isposinf(lse[0, :, :4]).all()
    run_case("f32", 1, 7, 3, 2, 2, 8, causal=True)


def test_seqused_k():
    used = np.array([5, 0, 11], np.int32)
    run_case("f32", 3, 6, 11, 2, 2, 8, causal=True, seqused_k=used)


def test_head_dim_not_multiple_of_8():
    run_case("f32", 1, 5, 6, 2, 1, 13)


# ------------------------------------------------------------------------------------------------
# strides: views are read in place


def test_strided_views_forward_and_backward():
    B, S, H, D = 2, 10, 4, 16
    # (B, H, S, D) storage seen as (B, S, H, D): the layout transformers hands over
    q = randn((B, H, S, D), np.float32).transpose(0, 2, 1, 3)
    k = randn((B, H, S, D), np.float32).transpose(0, 2, 1, 3)
    v = randn((B, S, 2 * H, D), np.float32)[:, :, ::2]  # every other head
    assert not q.flags.c_contiguous and not v.flags.c_contiguous
    out, lse = flashc.attention(q, k, v, causal=True, return_lse=True)
    dout = randn((B, H, S, D), np.float32).transpose(0, 2, 1, 3)
    ref_out, ref_lse, ref_g = ref_attention(q, k, v, causal=True, dout=dout)
    assert_close("out", out, ref_out)
    for g, r in zip(flashc.attention_backward(dout, q, k, v, out, lse, causal=True), ref_g):
        assert_close("grad", g, r, f32_tol=5e-5)


def test_packed_qkv_is_read_in_place():
    B, S, H, D = 2, 12, 3, 8
    qkv = randn((B, S, 3, H, D), np.float32)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    out = flashc.attention(q, k, v, causal=True)
    assert_close("out", out, ref_attention(q, k, v, causal=True)[0])


def test_last_dim_not_contiguous_is_copied():
    q = np.asfortranarray(randn((1, 6, 2, 8), np.float32))
    k = randn((1, 6, 2, 8), np.float32)
    assert q.strides[-1] != 4
    assert_close("out", flashc.attention(q, k, k), ref_attention(q, k, k)[0])


def test_negative_and_broadcast_strides_are_copied():
    # the C layout takes neither, and reads all-zero strides as "contiguous": a broadcast k would be
    # read past its memory. Both are copied, as a last dim with a stride is.
    q = randn((1, 6, 2, 8), np.float32)[:, ::-1]
    k = np.broadcast_to(randn((8,), np.float32), (1, 6, 2, 8))  # strides (0, 0, 0, 4)
    v = np.broadcast_to(randn((1, 1, 2, 8), np.float32), (1, 6, 2, 8))  # strides (0, 0, 32, 4)
    out = flashc.attention(q, k, v)
    want = flashc.attention(np.ascontiguousarray(q), np.ascontiguousarray(k), np.ascontiguousarray(v))
    assert np.array_equal(out, want)


# ------------------------------------------------------------------------------------------------
# varlen


def split_check(q, k, v, cu_q, cu_k, out, lse, dout=None, grads=None, **opt):
    for b in range(len(cu_q) - 1):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        r = ref_attention(q[None, qs], k[None, ks], v[None, ks], dout=None if dout is None else dout[None, qs], **opt)
        assert_close(f"out[{b}]", out[qs], r[0][0])
        check_lse(lse[:, qs], r[1][0])
        if grads is not None:
            for g, rg, sl in zip(grads, r[2], (qs, ks, ks)):
                assert_close(f"grad[{b}]", g[sl], rg[0], f32_tol=5e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_forward_backward(causal):
    lens_q = [5, 1, 0, 9]
    lens_k = [7, 4, 3, 9]
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    H, Hkv, D = 4, 2, 8
    q, k, v = randn((cu_q[-1], H, D), np.float32), randn((cu_k[-1], Hkv, D), np.float32), \
        randn((cu_k[-1], Hkv, D), np.float32)
    out, lse = flashc.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=causal, return_lse=True)
    assert out.shape == q.shape and lse.shape == (H, cu_q[-1])
    dout = randn(q.shape, np.float32)
    grads = flashc.attention_backward(dout, q, k, v, out, lse, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=causal)
    split_check(q, k, v, cu_q, cu_k, out, lse, dout, grads, causal=causal)


def test_varlen_max_seqlen_too_small_is_an_error_from_c():
    cu = np.array([0, 4, 10], np.int32)
    q = randn((10, 2, 8), np.float32)
    with pytest.raises(ValueError, match="maximum"):
        flashc.attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=3, max_seqlen_k=6)


@pytest.mark.parametrize("long_q", [False, True])
def test_varlen_rows_before_the_first_sequence(long_q):
    """Rows before cu_seqlens_q[0] belong to no sequence: o = 0, lse = +inf (flashc.h), whichever
    CPU kernel runs (max_seqlen_q 3: the decode kernel; 40: the FA2 tiles)."""
    n = 40 if long_q else 3
    cu_q, cu_k = np.array([2, 2 + n, 4 + n], np.int32), np.array([0, 9, 20], np.int32)
    q, k, v = randn((4 + n, 2, 8), np.float32), randn((20, 1, 8), np.float32), randn((20, 1, 8), np.float32)
    out, lse = flashc.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True)
    assert (out[:2] == 0).all() and np.isposinf(lse[:, :2]).all()
    r = ref_attention(q[None, 2:2 + n], k[None, :9], v[None, :9])
    assert_close("out", out[2:2 + n], r[0][0])


def test_varlen_offsets_past_the_arrays_are_refused():
    # C sees cu_seqlens, not the arrays' row counts: offsets past them would read and write out of bounds
    q = randn((4, 2, 8), np.float32)
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        flashc.attention(q, q, q, cu_seqlens_q=np.array([0, 4096], np.int32), cu_seqlens_k=np.array([0, 4], np.int32))
    with pytest.raises(ValueError, match="cu_seqlens_k"):
        flashc.attention(q, q, q, cu_seqlens_q=np.array([0, 4], np.int32), cu_seqlens_k=np.array([0, 5], np.int32))


def test_varlen_rows_after_the_last_sequence():
    """q / k with rows after cu_seqlens_*[-1] (flash-attn's lse is (H, q rows)): those rows belong to no
    sequence (out 0, lse +inf, zero gradients) and the others' lse keeps its place."""
    cu_q, cu_k = np.array([0, 3, 6], np.int32), np.array([0, 5, 9], np.int32)
    H, D = 2, 8
    q, k, v = randn((10, H, D), np.float32), randn((12, 1, D), np.float32), randn((12, 1, D), np.float32)
    out, lse = flashc.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True)
    o6, l6 = flashc.attention(q[:6], k[:9], v[:9], cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True)
    assert lse.shape == (H, 10) and np.array_equal(lse[:, :6], l6) and np.isposinf(lse[:, 6:]).all()
    assert np.array_equal(out[:6], o6) and (out[6:] == 0).all()
    dout = randn(q.shape, np.float32)
    dq, dk, dv = flashc.attention_backward(dout, q, k, v, out, lse, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    g6 = flashc.attention_backward(dout[:6], q[:6], k[:9], v[:9], o6, l6, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    assert np.array_equal(dq[:6], g6[0]) and np.array_equal(dk[:9], g6[1]) and np.array_equal(dv[:9], g6[2])
    assert (dq[6:] == 0).all() and (dk[9:] == 0).all() and (dv[9:] == 0).all()


def test_descale_is_refused_for_numpy():
    q = randn((1, 4, 2, 8), np.float32)
    with pytest.raises(ValueError, match="descale"):
        flashc.attention(q, q, q, descale=(2.0, 1.0, 1.0))


def test_varlen_seqused_k():
    cu_q = np.array([0, 3, 6], np.int32)
    cu_k = np.array([0, 8, 16], np.int32)
    used = np.array([2, 8], np.int32)
    q, k, v = randn((6, 2, 8), np.float32), randn((16, 2, 8), np.float32), randn((16, 2, 8), np.float32)
    out, lse = flashc.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, seqused_k=used, causal=True,
                                return_lse=True)
    for b in range(2):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        r = ref_attention(q[None, qs], k[None, ks], v[None, ks], causal=True, seqused_k=used[b:b + 1])
        assert_close("out", out[qs], r[0][0])


def paginate(ks, vs, page, spare=2):
    """Page pools (num_pages, page, Hkv, D) holding the sequences' rows (lists of (L_b, Hkv, D)
    arrays) on shuffled pages, NaN in every row no sequence owns, and the block table (B, max_pages)
    with -1 past each sequence's pages (entries nobody may read)."""
    need = [-(-k.shape[0] // page) for k in ks]
    n = sum(need) + spare
    order = RNG.permutation(n)
    pools = [np.full((n, page) + ks[0].shape[1:], np.nan, ks[0].dtype) for _ in range(2)]
    table = np.full((len(ks), max(max(need), 1)), -1, np.int32)
    at = 0
    for b, (k, v) in enumerate(zip(ks, vs)):
        for i in range(need[b]):
            pg, rows = order[at], slice(i * page, min((i + 1) * page, k.shape[0]))
            at += 1
            table[b, i] = pg
            pools[0][pg, :rows.stop - rows.start] = k[rows]
            pools[1][pg, :rows.stop - rows.start] = v[rows]
    return pools[0], pools[1], table


@pytest.mark.parametrize("page", [1, 3, 16])
@pytest.mark.parametrize("causal", [False, True])
def test_paged_varlen(page, causal):
    # sequence 2 sees no key; max_seqlen_q 40 takes the CPU's FA2 kernel (test_paged_batch's 5 the decode kernel)
    lens_q, lens_k = [3, 1, 2, 40, 4], [7, 1, 0, 40, 33]
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    H, Hkv, D = 4, 2, 8
    q = randn((cu_q[-1], H, D), np.float32)
    ks = [randn((n, Hkv, D), np.float32) for n in lens_k]
    vs = [randn((n, Hkv, D), np.float32) for n in lens_k]
    kp, vp, table = paginate(ks, vs, page)
    used = np.array([7, 1, 0, 25, 33], np.int32)
    for seqused in (None, used):
        out, lse = flashc.attention(q, kp, vp, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, block_table=table,
                                    seqused_k=seqused, causal=causal, return_lse=True)
        assert out.shape == q.shape and lse.shape == (H, cu_q[-1])
        for b in range(len(lens_q)):
            qs = slice(cu_q[b], cu_q[b + 1])
            r = ref_attention(q[None, qs], ks[b][None], vs[b][None], causal=causal,
                              seqused_k=None if seqused is None else seqused[b:b + 1])
            assert_close(f"out[{b}]", out[qs], r[0][0])
            check_lse(lse[:, qs], r[1][0])


@pytest.mark.parametrize("dt", DTYPES)
def test_paged_batch(dt):
    dt = np_dtype(dt)
    B, Sq, H, Hkv, D, page, pages = 2, 5, 4, 1, 16, 4, 5
    q = randn((B, Sq, H, D), dt)
    k, v = randn((B, page * pages, Hkv, D), dt), randn((B, page * pages, Hkv, D), dt)
    kp, vp, table = paginate(list(k), list(v), page)
    used = np.array([6, 20], np.int32)
    out, lse = flashc.attention(q, kp, vp, block_table=table, seqused_k=used, causal=True, return_lse=True)
    ref_out, ref_lse = ref_attention(q, k, v, causal=True, seqused_k=used)
    naive = None if dt == np.float32 else naive_lowp(q, k, v, rounder(dt), causal=True, seqused_k=used)
    assert_close("out", out, ref_out, naive)
    check_lse(lse, ref_lse)


def test_paged_errors():
    q = randn((1, 4, 2, 8), np.float32)
    kp = randn((3, 4, 2, 8), np.float32)
    table = np.array([[2, 0]], np.int32)
    with pytest.raises(ValueError, match="block_table has shape"):
        flashc.attention(q, kp, kp, block_table=table[0])
    with pytest.raises(ValueError, match="page pool"):
        flashc.attention(q, kp[0], kp[0], block_table=table)
    with pytest.raises(ValueError, match=r"block_table\[0\]\[1\] = 3"):
        flashc.attention(q, kp, kp, block_table=np.array([[0, 3]], np.int32))


# ------------------------------------------------------------------------------------------------
# DLPack and argument errors


class DLPackOnly:
    """An array from 'another framework': only the DLPack protocol."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_input():
    q, k = randn((1, 5, 2, 8), np.float32), randn((1, 6, 2, 8), np.float32)
    out = flashc.attention(DLPackOnly(q), DLPackOnly(k), DLPackOnly(k), causal=True)
    assert isinstance(out, np.ndarray)
    assert_close("out", out, ref_attention(q, k, k, causal=True)[0])


def test_shape_and_dtype_errors():
    q = randn((1, 5, 2, 8), np.float32)
    with pytest.raises(ValueError, match="head_dim"):
        flashc.attention(q, q[..., :4], q[..., :4])
    with pytest.raises(ValueError, match="one dtype"):
        flashc.attention(q, q.astype(np.float16), q)
    with pytest.raises(ValueError, match="dtype"):
        flashc.attention(q.astype(np.float64), q, q)
    with pytest.raises(ValueError, match="expected"):
        flashc.attention(q[0], q[0], q[0])
    with pytest.raises(ValueError, match="alibi_slopes"):
        flashc.attention(q, q, q, alibi_slopes=np.ones(3, np.float32))
    with pytest.raises(TypeError):
        flashc.attention([1.0], q, q)


@pytest.mark.parametrize("causal", [False, True])
def test_merge_of_key_splits_is_exact(causal):
    """Attention over disjoint key ranges (one of them empty for some causal rows), merged by
    flashc.merge, equals attention over all keys: fp32 partials, fp32 out."""
    B, Sq, Sk, H, D = 2, 5, 23, 3, 16
    q, k, v = randn((B, Sq, H, D), np.float32), randn((B, Sk, H, D), np.float32), randn((B, Sk, H, D), np.float32)
    cuts = [0, 7, 8, Sk]
    outs, lses = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        # query i sees key j <= i + Sk - Sq: in the part's own bottom-right frame that is a window
        # with right bound Sk - b
        o, l = flashc.attention(q, k[:, a:b], v[:, a:b], return_lse=True,
                                window=(-1, Sk - b) if causal else (-1, -1))
        outs.append(o)
        lses.append(l)
    out, lse = flashc.merge(np.stack(outs), np.stack(lses))
    ref_out, ref_lse = ref_attention(q, k, v, causal=causal)[:2]
    assert_close("out", out, ref_out)
    check_lse(lse, ref_lse)


@pytest.mark.parametrize("where", ["q", "k", "v"])
@pytest.mark.parametrize("Sq", [1, 40])  # the CPU's decode kernel and its tile kernel
def test_nan_propagates(where, Sq):
    # flashc.h: NaN in an input propagates as in the reference (the C tests cover every backend,
    # shape and dtype; this is what a numpy user sees): never a silent 0 / +inf "row with no key"
    B, Sk, H, Hkv, D = 2, 70, 4, 2, 32
    q, k, v = randn((B, Sq, H, D), np.float32), randn((B, Sk, Hkv, D), np.float32), randn((B, Sk, Hkv, D), np.float32)
    {"q": q, "k": k, "v": v}[where][1, 0, 1, 5] = np.nan  # sequence 1, row 0, head 1 (q) / kv head 1 (k, v)
    out, lse = flashc.attention(q, k, v, return_lse=True)
    heads = [1] if where == "q" else [2, 3]  # the query heads that read kv head 1
    rows = [0] if where == "q" else list(range(Sq))
    for h in range(H):
        for i in range(Sq):
            hit = h in heads and i in rows
            o = out[1, i, h]
            if hit and where == "v":
                assert np.isnan(o[5]) and np.isfinite(np.delete(o, 5)).all() and np.isfinite(lse[1, h, i])
            elif hit:
                assert np.isnan(o).all() and np.isnan(lse[1, h, i])
            else:
                assert np.isfinite(o).all() and np.isfinite(lse[1, h, i])
    assert np.isfinite(out[0]).all() and np.isfinite(lse[0]).all()
