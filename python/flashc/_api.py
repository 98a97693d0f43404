"""_api.py -- flashc.attention and flashc.attention_backward: dispatch by array type, and the numpy path.

Arrays go to C as they are: a data pointer plus element strides, no copy (a copy is made only when
the last dim is not contiguous, which the C layout cannot express, as flash-attn does). torch
tensors go through flashc._torch (autograd, torch.compile, CUDA streams); numpy arrays are
handled here on the CPU backend; other arrays that speak DLPack are taken zero-copy through
numpy (CPU) or torch (CUDA).

Layouts (DESIGN.md section 1):
  batch   q (B, Sq, H, D), k and v (B, Sk, H_kv, D); out like q; lse fp32 (B, H, Sq)
  varlen  q (total_q, H, D), k and v (total_k, H_kv, D), int32 cu_seqlens_q / cu_seqlens_k of B + 1
          offsets; lse fp32 (H, total_q)
"""
import ctypes
import os

import numpy as np

from . import _lib

# FLASHC_POISON=1 (the tests set it) fills every output with NaN before the C call, so an element
# the library failed to write cannot pass for a correct one.
POISON = os.environ.get("FLASHC_POISON") == "1"

_NP_DTYPES = {np.dtype(np.float32): _lib.DTYPE_F32, np.dtype(np.float16): _lib.DTYPE_F16}
try:  # bfloat16 / float8 numpy dtypes come from ml_dtypes when it is installed
    import ml_dtypes as _ml

    _NP_DTYPES[np.dtype(_ml.bfloat16)] = _lib.DTYPE_BF16
    _NP_DTYPES[np.dtype(_ml.float8_e4m3fn)] = _lib.DTYPE_E4M3
except ImportError:
    pass

_I32 = np.dtype(np.int32)
_F32 = np.dtype(np.float32)


# ------------------------------------------------------------------------------------------------
# the description shared by every path


_NO_STRIDES = (0, 0, 0)


def make_desc(dtype, batch, sq, sk, h, hkv, d, qs, ks, vs, os_, scale, softcap, causal, window_left, window_right,
              alibi_ptr=0, alibi_batch_stride=0, cu_q=0, cu_k=0, seqused_k=0, deterministic=False,
              dos=_NO_STRIDES, dqs=_NO_STRIDES, dks=_NO_STRIDES, dvs=_NO_STRIDES, paged=(0, 0, 0, 0)):
    """A flashc_attn_desc. Strides are element strides [batch, seq, head] (batch ignored in varlen);
    scale 0 or None means 1/sqrt(head_dim); zero gradient strides mean "same as out/q/k/v";
    paged = (block_table, block_table_stride, page_size, num_pages) or zeros."""
    desc = _lib.AttnDesc()
    use_window = window_left != -1 or window_right != -1
    _lib.DESC_PACK.pack_into(
        desc, 0, batch, sq, sk, h, hkv, d, dtype, scale or 0.0, softcap, 1 if causal else 0,
        window_left if use_window else 0, window_right if use_window else 0, 1 if use_window else 0,
        alibi_ptr or 0, alibi_batch_stride, 1 if deterministic else 0, *qs, *ks, *vs, *os_, *dos, *dqs, *dks, *dvs,
        cu_q or 0, cu_k or 0, seqused_k or 0, *paged)
    return desc


def geometry(qshape, kshape, vshape, varlen, cu_len_q, cu_len_k, bt_shape=None):
    """(batch, seqlen_q, seqlen_k, heads, heads_kv, head_dim) from the shapes, or ValueError.

    Only what C cannot see is checked here: C gets one seqlen_k and one head_dim for k and v, so
    their shapes must agree, and a rank the layout does not have must not reach it. With a block
    table (bt_shape, (batch, max_pages)) k and v are page pools (num_pages, page_size, H_kv, D) and
    a batch-mode seqlen_k is max_pages * page_size. seqlen_q and seqlen_k are None in varlen mode.
    """
    paged = bt_shape is not None
    for name, s in (("q", qshape), ("k", kshape), ("v", vshape)):
        pool = paged and name != "q"
        if len(s) != (3 if varlen and not pool else 4):
            layout = ("a page pool (num_pages, page_size, heads_kv, head_dim)" if pool else
                      "(total, heads, head_dim)" if varlen else "(batch, seqlen, heads, head_dim)")
            raise ValueError(f"flashc: {name} has shape {tuple(s)}: expected {layout}")
    if tuple(kshape) != tuple(vshape):
        raise ValueError(f"flashc: k has shape {tuple(kshape)} but v has {tuple(vshape)}: they must match")
    if qshape[-1] != kshape[-1]:
        raise ValueError(f"flashc: q has head_dim {qshape[-1]} but k and v have {kshape[-1]}")
    if varlen:
        if cu_len_q != cu_len_k:
            raise ValueError(f"flashc: cu_seqlens_q has {cu_len_q} entries and cu_seqlens_k {cu_len_k}: "
                             "both must be batch + 1")
        b, sq, sk = cu_len_q - 1, None, None
    else:
        if not paged and qshape[0] != kshape[0]:
            raise ValueError(f"flashc: q has batch {qshape[0]} but k and v have {kshape[0]}")
        b, sq, sk = qshape[0], qshape[1], kshape[1]
    if paged:
        if len(bt_shape) != 2 or bt_shape[0] != b:
            raise ValueError(f"flashc: block_table has shape {tuple(bt_shape)}: expected (batch = {b}, max_pages)")
        sk = None if varlen else bt_shape[1] * kshape[1]
    return b, sq, sk, qshape[-2], kshape[-2], qshape[-1]


def paged_args(bt_ptr, bt_shape, kshape):
    """make_desc's paged = (block_table, block_table_stride, page_size, num_pages) for a contiguous
    int32 block table of bt_shape over page pools of kshape (num_pages, page_size, H_kv, D), the
    shapes as geometry checked them."""
    return bt_ptr, bt_shape[-1], kshape[1], kshape[0]


def desc_strides(st, varlen):
    """Element strides of a (B, S, H, D) or (T, H, D) tensor as the [batch, seq, head] triple."""
    return (0, st[0], st[1]) if varlen else (st[0], st[1], st[2])


def check_1d(name, shape, n, dtype_ok):
    if len(shape) != 1 or shape[0] != n or not dtype_ok:
        raise ValueError(f"flashc: {name} must be a 1-D int32 array of {n} entries, got shape {tuple(shape)}")


def check_alibi(shape, batch, heads, dtype_ok):
    if not dtype_ok or not (tuple(shape) == (heads,) or tuple(shape) == (batch, heads)):
        raise ValueError(f"flashc: alibi_slopes must be float32 of shape ({heads},) or ({batch}, {heads}), "
                         f"got shape {tuple(shape)}")


# ------------------------------------------------------------------------------------------------
# numpy


_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof


def _np_ptr(a):
    """The data pointer of a numpy array. ctypes' buffer view is ~2x quicker than a.ctypes.data but
    takes only writable C-contiguous arrays; the array interface serves the rest."""
    try:
        return _addressof(_from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.__array_interface__["data"][0]


def _np_in(a, name):
    """(array with a contiguous last dim, data pointer, element strides)."""
    try:
        st, item, shape = a.strides, a.itemsize, a.shape
    except AttributeError:
        raise TypeError(f"flashc: {name} is a {type(a).__name__}; all arrays of one call must be numpy arrays") from None
    if not isinstance(a, np.ndarray):
        raise TypeError(f"flashc: {name} is a {type(a).__name__}; all arrays of one call must be numpy arrays")
    bits = 0
    for x in st:
        bits |= x
    # item is 1, 2 or 4 bytes: a stride is a multiple of it iff its low bits are clear. The C layout has
    # no head_dim stride (flash-attn copies there too), takes no negative strides, and reads all-zero
    # [batch, seq, head] strides as "contiguous": a broadcast (stride-0) dim is materialised
    if (st[-1] != item and shape[-1] > 1) or bits & (item - 1) or any(x <= 0 < n - 1 for x, n in zip(st, shape)):
        a = np.ascontiguousarray(a)
        st = a.strides
    return a, _np_ptr(a), tuple(x // item for x in st)


def _np_i32(x):
    if x is None:
        return None, 0
    if not (isinstance(x, np.ndarray) and x.dtype == _I32 and x.flags.c_contiguous):
        x = np.ascontiguousarray(x, dtype=np.int32)
    return x, _np_ptr(x)


def _np_max_len(cu):
    return int(np.max(cu[1:] - cu[:-1])) if cu.shape[0] > 1 else 0


def _np_common(q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
               block_table=None):
    """Everything both directions need: converted arrays, pointers, geometry, desc arguments."""
    q, qp, qs = _np_in(q, "q")
    k, kp, ks = _np_in(k, "k")
    v, vp, vs = _np_in(v, "v")
    dt = _NP_DTYPES.get(q.dtype)
    if dt is None:
        raise ValueError(f"flashc: q.dtype = {q.dtype}: flashc takes float32, float16 and bfloat16 (ml_dtypes) arrays")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"flashc: q, k, v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    extra = [None, None, None, None, None]  # arrays to keep alive until C returns
    totals = None  # varlen: the offsets' last entries (q and k rows in sequences)
    cu_qp = cu_kp = usedp = alp = albs = 0
    bt = btp = None
    if block_table is not None:
        bt, btp = _np_i32(block_table)
        extra[4] = bt
    bt_shape = bt.shape if bt is not None else None
    if varlen:
        if cu_seqlens_q is None or cu_seqlens_k is None:
            raise ValueError("flashc: cu_seqlens_q and cu_seqlens_k must be given together")
        (cu_q, cu_qp), (cu_k, cu_kp) = _np_i32(cu_seqlens_q), _np_i32(cu_seqlens_k)
        extra[0], extra[1] = cu_q, cu_k
        b, sq, sk, h, hkv, d = geometry(q.shape, k.shape, v.shape, True, cu_q.shape[0], cu_k.shape[0], bt_shape)
        check_1d("cu_seqlens_q", cu_q.shape, b + 1, True)
        check_1d("cu_seqlens_k", cu_k.shape, b + 1, True)
        # C reads q and writes o, lse by cu_seqlens_q[-1] rows (k, v by cu_seqlens_k[-1]): it cannot see
        # the arrays' row counts, so larger offsets would run past them
        totals = (int(cu_q[-1]), int(cu_k[-1]))
        if totals[0] > q.shape[0] or (bt is None and totals[1] > k.shape[0]):
            raise ValueError(f"flashc: cu_seqlens_q[-1] = {totals[0]} and cu_seqlens_k[-1] = {totals[1]} must not "
                             f"exceed the rows of q ({q.shape[0]}) and k ({k.shape[0]})")
        sq = _np_max_len(cu_q) if max_seqlen_q is None else int(max_seqlen_q)
        sk = _np_max_len(cu_k) if max_seqlen_k is None else int(max_seqlen_k)
    else:
        b, sq, sk, h, hkv, d = geometry(q.shape, k.shape, v.shape, False, 0, 0, bt_shape)
    kv_rows = varlen and bt is None  # k, v (total_k, H_kv, D); a page pool is (page, row, head) like batch mode
    qs, ks, vs = desc_strides(qs, varlen), desc_strides(ks, kv_rows), desc_strides(vs, kv_rows)
    paged = paged_args(btp, bt_shape, k.shape) if bt is not None else (0, 0, 0, 0)
    if seqused_k is not None:
        used, usedp = _np_i32(seqused_k)
        check_1d("seqused_k", used.shape, b, True)
        extra[2] = used
    if alibi_slopes is not None:
        al = extra[3] = np.ascontiguousarray(alibi_slopes)
        check_alibi(al.shape, b, h, al.dtype == _F32)
        alp = _np_ptr(al)
        albs = al.strides[0] // 4 if al.ndim == 2 and al.shape[0] > 1 else 0
    return (q, k, v, qp, kp, vp, qs, ks, vs, dt, varlen, b, sq, sk, h, hkv, d, cu_qp, cu_kp, usedp, alp, albs, extra,
            paged, totals)


def _np_fwd(q, k, v, causal, scale, softcap, window, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
            max_seqlen_k, seqused_k, return_lse, block_table=None):
    (q, k, v, qp, kp, vp, qs, ks, vs, dt, varlen, b, sq, sk, h, hkv, d, cu_qp, cu_kp, usedp, alp, albs,
     _keep, paged, totals) = _np_common(q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                seqused_k, block_table)
    # e4m3 inputs (CUDA only, so never here in practice) would give a bf16 out
    out = np.empty(q.shape, _ml.bfloat16 if dt == _lib.DTYPE_E4M3 else q.dtype)
    # varlen: C's lse is (H, cu_seqlens_q[-1]), the returned one (H, q rows), as flash-attn's: rows of q
    # after the last sequence belong to none, so out 0 and lse +inf there (as before the first)
    tq = totals[0] if varlen else 0
    lse = np.empty((h, tq) if varlen else (b, h, sq), _F32)
    if POISON:
        out.fill(np.nan)
        lse.fill(np.nan)
    st = out.strides
    it = out.itemsize
    os_ = (0, st[0] // it, st[1] // it) if varlen else (st[0] // it, st[1] // it, st[2] // it)
    desc = make_desc(dt, b, sq, sk, h, hkv, d, qs, ks, vs, os_, scale, softcap, causal, window[0], window[1],
                     alp, albs, cu_qp, cu_kp, usedp, paged=paged)
    ctx = _lib.get_ctx(_lib.BACKEND_CPU)
    status = _lib.fwd(ctx, desc, qp, kp, vp, _np_ptr(out), _np_ptr(lse), None, 0, None)
    if status:
        _lib.raise_status(ctx, status, "flashc.attention")
    if varlen and tq < q.shape[0]:
        out[tq:] = 0
        lse = np.concatenate((lse, np.full((h, q.shape[0] - tq), np.inf, _F32)), axis=1)
    return (out, lse) if return_lse else out


def _np_bwd(dout, q, k, v, out, lse, causal, scale, softcap, window, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
            max_seqlen_q, max_seqlen_k, seqused_k, deterministic):
    (q, k, v, qp, kp, vp, qs, ks, vs, dt, varlen, b, sq, sk, h, hkv, d, cu_qp, cu_kp, usedp, alp, albs,
     _keep, _paged, totals) = _np_common(q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                         max_seqlen_k, seqused_k)
    out, op, os_ = _np_in(out, "out")
    dout, dop, dos = _np_in(dout, "dout")
    for name, a in (("out", out), ("dout", dout)):
        if a.shape != q.shape or a.dtype != q.dtype:
            raise ValueError(f"flashc: {name} must have q's shape {q.shape} and dtype {q.dtype}, got {a.shape} {a.dtype}")
    lse_shape = (h, q.shape[0]) if varlen else (b, h, sq)
    if not isinstance(lse, np.ndarray) or lse.shape != lse_shape or lse.dtype != _F32:
        raise ValueError(f"flashc: lse must be a float32 array of shape {lse_shape}")
    tq, tk = totals if varlen else (0, 0)
    lse = np.ascontiguousarray(lse[:, :tq] if varlen else lse)  # (C reads (H, cu_seqlens_q[-1]))
    dq, dk, dv = np.empty(q.shape, q.dtype), np.empty(k.shape, k.dtype), np.empty(v.shape, v.dtype)
    if POISON:
        for a in (dq, dk, dv):
            a.fill(np.nan)
    if varlen:  # rows after the last sequence: zero gradients (C writes those before the first)
        dq[tq:], dk[tk:], dv[tk:] = 0, 0, 0
    el = q.itemsize
    grad_st = [desc_strides(tuple(x // el for x in a.strides), varlen) for a in (dq, dk, dv)]
    desc = make_desc(dt, b, sq, sk, h, hkv, d, qs, ks, vs, desc_strides(os_, varlen), scale, softcap, causal,
                     window[0], window[1], alp, albs, cu_qp, cu_kp, usedp, deterministic, desc_strides(dos, varlen),
                     *grad_st)
    ctx = _lib.get_ctx(_lib.BACKEND_CPU)
    status = _lib.bwd(ctx, desc, qp, kp, vp, op, _np_ptr(lse), dop, _np_ptr(dq), _np_ptr(dk), _np_ptr(dv), None, 0,
                      None)
    if status:
        _lib.raise_status(ctx, status, "flashc.attention_backward")
    return dq, dk, dv


# ------------------------------------------------------------------------------------------------
# dispatch


def _kind(x):
    """'numpy', 'torch', or 'dlpack' for the array x."""
    if isinstance(x, np.ndarray):
        return "numpy"
    mod = type(x).__module__
    if mod.startswith("torch"):
        return "torch"
    if hasattr(x, "__dlpack__"):
        return "dlpack"
    raise TypeError(f"flashc: expected numpy arrays, torch tensors or DLPack arrays, got {type(x).__name__}")


def _from_dlpack(xs):
    """Zero-copy views of DLPack arrays: numpy for host memory, torch for CUDA memory."""
    out = []
    for x in xs:
        if x is None or isinstance(x, (int, float)) or _kind(x) != "dlpack":
            out.append(x)
            continue
        dev_type = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else 1
        if dev_type == 1:  # kDLCPU
            out.append(np.from_dlpack(x))
        else:
            import torch

            out.append(torch.from_dlpack(x))
    return out


_torch_mod = None  # flashc._torch once a torch tensor has been seen (imports torch)


def _torch_module():
    global _torch_mod
    if _torch_mod is None:
        from . import _torch

        _torch_mod = _torch
    return _torch_mod


def attention(q, k, v, *, causal=False, scale=None, softcap=0.0, window=(-1, -1), alibi_slopes=None,
              cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, seqused_k=None,
              deterministic=False, return_lse=False, descale=None, block_table=None):
    """Exact attention by the FlashAttention-2 algorithm (DESIGN.md section 1 semantics).

    q (B, Sq, H, D), k and v (B, Sk, H_kv, D) -- or, with cu_seqlens_q/k, q (total_q, H, D) and k, v
    (total_k, H_kv, D). numpy arrays (float32, float16, ml_dtypes.bfloat16) run on the CPU backend;
    torch tensors run on the CPU or CUDA backend by their device, on the current CUDA stream, and are
    differentiable (torch.autograd, torch.compile). Inputs are read in place through their strides.

    causal         mask aligned to the bottom-right corner (FlashAttention-2; not PyTorch's is_causal)
    scale          scores = scale * q.k; None means 1/sqrt(D)
    softcap        > 0: scores = softcap * tanh(scores / softcap)
    window         (left, right) sliding window, -1 = unbounded: query i sees keys
                   i + Sk - Sq - left .. i + Sk - Sq + right
    alibi_slopes   float32 (H,) or (B, H): adds -slope * |i + Sk - Sq - j|
    cu_seqlens_q/k int32 (B + 1,) offsets (varlen); max_seqlen_q/k their largest lengths (computed
                   when None, which synchronises a CUDA stream)
    seqused_k      int32 (B,): sequence b uses only its first seqused_k[b] keys
    block_table    int32 (B, max_pages): paged K/V (forward only), k and v page pools (num_pages,
                   page_size, H_kv, D) of any page_size >= 1; key j of sequence b is row
                   j % page_size of page block_table[b, j // page_size]. Its key count is
                   max_pages * page_size in batch mode, else its cu_seqlens_k length; seqused_k caps it
    deterministic  bit-identical gradients run to run (read by the backward)
    return_lse     also return lse, fp32 natural log, (B, H, Sq) or (H, total_q); +inf for rows
                   that see no key (their output is 0)
    descale        (q_descale, k_descale, v_descale) floats for torch.float8_e4m3fn q, k, v (CUDA,
                   compute capability 9.0, forward only): the true inputs are the e4m3 values times
                   these; out is bfloat16. None means (1, 1, 1).

    Returns out (like q), or (out, lse). Errors raise ValueError (bad argument) or
    NotImplementedError (unsupported here), with the library's message.
    """
    if type(q) is np.ndarray:
        if descale is not None:
            raise ValueError("flashc: descale applies to torch float8_e4m3fn tensors only")
        return _np_fwd(q, k, v, causal, scale, softcap, window, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
                       max_seqlen_q, max_seqlen_k, seqused_k, return_lse, block_table)
    tm = _torch_mod
    kind = "torch" if tm is not None and isinstance(q, tm.Tensor) else _kind(q)
    if kind == "torch":
        return _torch_module().attention(q, k, v, causal, scale, softcap, window, alibi_slopes, cu_seqlens_q,
                                         cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, deterministic, return_lse,
                                         descale=descale, block_table=block_table)
    if descale is not None:
        raise ValueError("flashc: descale applies to torch float8_e4m3fn tensors only")
    if kind == "dlpack":
        q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table = _from_dlpack(
            (q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table))
        return attention(q, k, v, causal=causal, scale=scale, softcap=softcap, window=window,
                         alibi_slopes=alibi_slopes, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                         max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_k=seqused_k,
                         deterministic=deterministic, return_lse=return_lse, block_table=block_table)
    return _np_fwd(q, k, v, causal, scale, softcap, window, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
                   max_seqlen_q, max_seqlen_k, seqused_k, return_lse, block_table)


def attention_backward(dout, q, k, v, out, lse, *, causal=False, scale=None, softcap=0.0, window=(-1, -1),
                       alibi_slopes=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                       max_seqlen_k=None, seqused_k=None, deterministic=False):
    """Gradients (dq, dk, dv) of attention(q, k, v, ...) for the output gradient dout.

    out and lse are what attention(..., return_lse=True) returned for the same inputs and options.
    dk and dv sum over the query heads of a GQA group. Same array kinds and options as attention.
    """
    kind = _kind(q)
    if kind == "torch":
        return _torch_module().attention_backward(dout, q, k, v, out, lse, causal, scale, softcap, window, alibi_slopes,
                                         cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                                         deterministic)
    if kind == "dlpack":
        dout, q, k, v, out, lse, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k = _from_dlpack(
            (dout, q, k, v, out, lse, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k))
        return attention_backward(dout, q, k, v, out, lse, causal=causal, scale=scale, softcap=softcap,
                                  window=window, alibi_slopes=alibi_slopes, cu_seqlens_q=cu_seqlens_q,
                                  cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                                  seqused_k=seqused_k, deterministic=deterministic)
    return _np_bwd(dout, q, k, v, out, lse, causal, scale, softcap, tuple(window), alibi_slopes, cu_seqlens_q,
                   cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, deterministic)


# ------------------------------------------------------------------------------------------------
# merge


def merge_desc(shape, part_dtype, out_dtype, part_strides):
    """A flashc_merge_desc for out_parts of shape (n_parts, B, S, H, D) with element strides
    part_strides (last dim contiguous) and a contiguous (B, S, H, D) out."""
    if len(shape) != 5:
        raise ValueError(f"flashc: out_parts has shape {tuple(shape)}: expected (n_parts, batch, seqlen, heads, head_dim)")
    m = _lib.MergeDesc()
    m.n_parts, m.batch, m.seqlen, m.heads, m.head_dim = shape
    m.part_dtype, m.out_dtype = part_dtype, out_dtype
    m.part_stride[:] = part_strides[:4]
    return m


def merge(out_parts, lse_parts, out_dtype=None):
    """Combine partial attention results over disjoint key sets into the exact result (the merge of
    split-KV decoding, cascade and ring attention): lse = log(sum_s exp(lse_s)), out = sum_s
    exp(lse_s - lse) * out_s. A part with lse_s = +inf saw no key and weighs nothing.

    out_parts (n_parts, B, S, H, D) float32/float16/bfloat16, lse_parts float32 (n_parts, B, H, S).
    Returns (out (B, S, H, D) in out_dtype, default out_parts' dtype; lse float32 (B, H, S)). numpy
    arrays run on the CPU backend, torch tensors on their device's backend.
    """
    if _kind(out_parts) == "torch":
        return _torch_module().merge_impl(out_parts, lse_parts, out_dtype)
    parts, pp, pst = _np_in(out_parts, "out_parts")
    pdt = _NP_DTYPES.get(parts.dtype)
    odt = np.dtype(out_dtype) if out_dtype is not None else parts.dtype
    if pdt is None or odt not in _NP_DTYPES:
        raise ValueError(f"flashc: out_parts is {parts.dtype}, out_dtype {odt}: float32, float16 or bfloat16 expected")
    m = merge_desc(parts.shape, pdt, _NP_DTYPES[odt], pst)
    n, b, sq, h, d = parts.shape
    lse_parts = np.ascontiguousarray(lse_parts)
    if lse_parts.dtype != _F32 or lse_parts.shape != (n, b, h, sq):
        raise ValueError(f"flashc: lse_parts must be float32 of shape {(n, b, h, sq)}, "
                         f"got {lse_parts.dtype} {lse_parts.shape}")
    out = np.empty((b, sq, h, d), odt)
    lse = np.empty((b, h, sq), np.float32)
    if POISON:
        out.fill(np.nan)
        lse.fill(np.nan)
    ctx = _lib.get_ctx(_lib.BACKEND_CPU)
    st = _lib.merge(ctx, m, pp, _np_ptr(lse_parts), _np_ptr(out), _np_ptr(lse), None)
    if st:
        _lib.raise_status(ctx, st, "flashc.merge")
    return out, lse
