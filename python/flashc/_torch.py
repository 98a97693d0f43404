"""_torch.py -- flashc for torch tensors: the C calls, two torch.library custom ops, and autograd.

  flashc::fwd  (q, k, v, ...) -> (out, lse)       fake impl: shapes only, for torch.compile
  flashc::bwd  (dout, q, k, v, out, lse, dq!, dk!, dv!, ...) -> ()   writes dq, dk, dv in place
  AttentionFunction   torch.autograd.Function: saves q, k, v, out, lse; backward calls flashc::bwd.

Eager calls go straight to the C call (the custom-op dispatcher costs microseconds that a tiny
attention cannot hide); under torch.compile the ops are what gets traced, so
torch.compile(fullgraph=True) sees no graph break. Tensors are passed as data pointer + strides on
their own device (CPU backend for CPU tensors, CUDA backend for CUDA tensors) and the work is
queued on the current CUDA stream, with the workspace taken from torch's caching allocator, so the
calls can be captured in a CUDA graph.

Imported lazily by flashc.attention the first time it sees a torch tensor.
"""
import ctypes
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _lib
from ._api import POISON, check_1d, check_alibi, geometry, make_desc, merge_desc, paged_args

_DTYPES = {torch.float32: _lib.DTYPE_F32, torch.float16: _lib.DTYPE_F16, torch.bfloat16: _lib.DTYPE_BF16}
if hasattr(torch, "float8_e4m3fn"):
    _DTYPES[torch.float8_e4m3fn] = _lib.DTYPE_E4M3

# Zero-element tensors may have a NULL data pointer, which C rightly rejects as "q is NULL"; C never
# reads or writes through it when there are no elements, so any valid address serves -- a distinct
# one per argument, or C would see outputs aliasing inputs.
_EMPTY = ctypes.create_string_buffer(64 * 9)
_E = [ctypes.addressof(_EMPTY) + 64 * i for i in range(9)]


def _ptrs(*ts):
    return tuple(t.data_ptr() or _E[i] for i, t in enumerate(ts))


_CONTIGUOUS = torch.contiguous_format


def _broadcast(t):
    """Has t a broadcast (expand()ed, stride-0) dim? All-zero [batch, seq, head] strides mean
    "contiguous" to C, so such a tensor cannot be passed as it is."""
    return any(s == 0 and n > 1 for s, n in zip(t.stride(), t.shape))


def _c_layout(t):
    """t, or a contiguous copy where the C layout cannot express it: a last dim with a stride (the C
    layout has none for head_dim; flash-attn makes the same copy) or a broadcast dim."""
    st = t.stride()
    if st[-1] == 1 and 0 not in st:  # (the common case, without the loop)
        return t
    return t.contiguous() if (t.shape[-1] > 1 and st[-1] != 1) or _broadcast(t) else t


def _check_out(name, t):
    """An output or in-place tensor (dq, dk, dv, the KV cache) must be one C can address as it is."""
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"flashc: {name} must have a contiguous last dimension (it is written in place)")
    if _broadcast(t):
        raise ValueError(f"flashc: {name} has a broadcast (stride 0) dimension: it is written, so each element "
                         f"needs its own memory")


def _same_device(q, name, t):
    if t is not None and t.device != q.device:
        raise ValueError(f"flashc: {name} is on {t.device} but q is on {q.device}; all tensors must share a device")


def _i32(t, name, q):
    if t is None:
        return None
    _same_device(q, name, t)
    if t.dtype != torch.int32:
        t = t.to(torch.int32)
    return t.contiguous()


class _Cuda:
    """The ctx, stream and current-device guard for a call on a CUDA device."""

    __slots__ = ("ctx", "stream", "guard", "device")

    def __init__(self, dev):
        self.device = dev
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        # the C library works on the current device, as torch's own kernels do
        self.guard = torch.cuda.device(idx) if torch.cuda.current_device() != idx else None
        if self.guard is not None:
            self.guard.__enter__()
        try:
            self.ctx = _lib.get_ctx(_lib.BACKEND_CUDA, idx)
            self.stream = torch.cuda.current_stream(dev).cuda_stream
        except BaseException:
            self.close()
            raise

    def workspace(self, size_fn, descs):
        """(pointer, size, owner) of a per-call workspace from torch's caching allocator: ordered on
        the current stream, and private to a CUDA graph while one is being captured."""
        n = size_fn(self.ctx, *descs)
        if n == 0:
            return None, 0, None
        buf = torch.empty(n, dtype=torch.uint8, device=self.device)
        return buf.data_ptr(), n, buf

    def close(self):
        if self.guard is not None:
            self.guard.__exit__(None, None, None)
            self.guard = None


def _call(fn, ws_fn, descs, q, ptrs, what):
    """Run flashc_fwd / flashc_bwd / flashc_fwd_kvcache (descs: its description structs) for tensors
    on q's device."""
    dev = q.device
    if dev.type == "cpu":
        ctx = _lib.get_ctx(_lib.BACKEND_CPU)
        status = fn(ctx, *descs, *ptrs, None, 0, None)
    elif dev.type == "cuda":
        run = _Cuda(dev)
        try:
            ctx = run.ctx
            ws, wsz, _keep = run.workspace(ws_fn, descs)
            status = fn(ctx, *descs, *ptrs, ws, wsz, run.stream)
        finally:
            run.close()
    else:
        raise NotImplementedError(f"flashc: tensors on {dev} are not supported (cpu and cuda are)")
    if status:
        _lib.raise_status(ctx, status, what)


def _alibi(slopes, q, b, h):
    """(tensor to keep alive, data pointer, batch stride) of ALiBi slopes (H,) or (B, H), fp32."""
    _same_device(q, "alibi_slopes", slopes)
    al = _c_layout(slopes)
    check_alibi(al.shape, b, h, al.dtype == torch.float32)
    return al, al.data_ptr(), al.stride(0) if al.dim() == 2 and al.shape[0] > 1 else 0


def _common(q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table=None):
    """Checks C cannot make (shapes it does not see, dtypes, devices) and the desc's arguments;
    paged = (block_table, its row stride, page_size, num_pages) or zeros; totals = the varlen
    offsets' last entries (q and k rows in sequences) or None."""
    dt = _DTYPES.get(q.dtype)
    if dt is None:
        raise ValueError(f"flashc: q.dtype = {q.dtype}: flashc takes float32, float16 and bfloat16 tensors")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"flashc: q, k, v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    dev = q.device
    if k.device != dev or v.device != dev:
        raise ValueError(f"flashc: q, k, v must be on one device, got {dev}, {k.device}, {v.device}")
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    cu_qp = cu_kp = usedp = alp = albs = 0
    keep = totals = None
    bt = None
    if block_table is not None:
        bt = _i32(block_table, "block_table", q)
        keep = [bt]
    bt_shape = bt.shape if bt is not None else None
    if varlen:
        if cu_seqlens_q is None or cu_seqlens_k is None:
            raise ValueError("flashc: cu_seqlens_q and cu_seqlens_k must be given together")
        cu_q, cu_k = _i32(cu_seqlens_q, "cu_seqlens_q", q), _i32(cu_seqlens_k, "cu_seqlens_k", q)
        b, sq, sk, h, hkv, d = geometry(q.shape, k.shape, v.shape, True, cu_q.shape[0], cu_k.shape[0], bt_shape)
        check_1d("cu_seqlens_q", cu_q.shape, b + 1, True)
        check_1d("cu_seqlens_k", cu_k.shape, b + 1, True)
        # C writes o, lse and reads q by cu_seqlens_q[-1] rows (k, v by cu_seqlens_k[-1]) and cannot see
        # the tensors' row counts: larger offsets would run past them (one host sync on CUDA). While a
        # CUDA graph is being captured nothing can be read back: the offsets are then taken to end at
        # the tensors' last rows, unchecked, as flash-attn takes them (transformers' static cache
        # with CUDA graphs comes here).
        if q.is_cuda and torch.cuda.is_current_stream_capturing():
            tq, tk = q.shape[0], k.shape[0]
        else:
            tq, tk = torch.stack((cu_q[-1], cu_k[-1])).tolist()
        if tq > q.shape[0] or (bt is None and tk > k.shape[0]):
            raise ValueError(f"flashc: cu_seqlens_q[-1] = {tq} and cu_seqlens_k[-1] = {tk} must not exceed the rows of "
                             f"q ({q.shape[0]}) and k ({k.shape[0]})")
        totals = (tq, tk)
        cu_qp, cu_kp = cu_q.data_ptr(), cu_k.data_ptr()
        keep = (keep or []) + [cu_q, cu_k]
    else:
        b, sq, sk, h, hkv, d = geometry(q.shape, k.shape, v.shape, False, 0, 0, bt_shape)
    if seqused_k is not None:
        used = _i32(seqused_k, "seqused_k", q)
        check_1d("seqused_k", used.shape, b, True)
        usedp = used.data_ptr()
        keep = (keep or []) + [used]
    if alibi_slopes is not None:
        al, alp, albs = _alibi(alibi_slopes, q, b, h)
        keep = (keep or []) + [al]
    paged = paged_args(bt.data_ptr(), bt_shape, k.shape) if bt is not None else (0, 0, 0, 0)
    return dt, varlen, b, sq, sk, h, hkv, d, cu_qp, cu_kp, usedp, alp, albs, keep, paged, totals


def _st(t, varlen):
    s = t.stride()
    return (0, s[0], s[1]) if varlen else (s[0], s[1], s[2])


def _out_dtype(dtype):
    return torch.bfloat16 if dtype == getattr(torch, "float8_e4m3fn", None) else dtype


def fwd_impl(q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, scale, softcap,
             causal, window_left, window_right, descale_q=1.0, descale_k=1.0, descale_v=1.0, block_table=None):
    """(out, lse) for torch tensors: out contiguous like q, lse fp32 (B, H, Sq) or (H, total_q)."""
    q, k, v = _c_layout(q), _c_layout(k), _c_layout(v)
    dt, varlen, b, sq, sk, h, hkv, d, cu_qp, cu_kp, usedp, alp, albs, _keep, paged, totals = _common(
        q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table)
    dev = q.device
    kv_rows = varlen and block_table is None  # k, v (total_k, H_kv, D); a page pool is 4-D like batch mode
    qs, ks, vs = _st(q, varlen), _st(k, kv_rows), _st(v, kv_rows)
    # empty_like / new_empty: half the Python cost of torch.empty(shape, dtype=, device=) (~1.5 us)
    if varlen:
        sq, sk = max_seqlen_q, max_seqlen_k
        out_st = (0, h * d, d)
        # C's lse is (H, cu_seqlens_q[-1]); flash-attn's (H, q rows): the same unless q has rows after
        # the last sequence, whose lse is +inf and out 0 (rows of no sequence, as before the first)
        lse = q.new_empty((h, totals[0]), dtype=torch.float32)
    else:
        out_st = (sq * h * d, h * d, d)
        lse = q.new_empty((b, h, sq), dtype=torch.float32)
    # e4m3 q, k, v (forward only; true inputs = values x descales) give a bf16 out
    out = torch.empty_like(q, memory_format=_CONTIGUOUS, dtype=_out_dtype(q.dtype))
    if POISON:
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
    desc = make_desc(dt, b, sq, sk, h, hkv, d, qs, ks, vs, out_st, scale, softcap, causal, window_left, window_right,
                     alp, albs, cu_qp, cu_kp, usedp, paged=paged)
    if descale_q != 1.0 or descale_k != 1.0 or descale_v != 1.0:  # (0 in the desc also means 1)
        desc.q_descale, desc.k_descale, desc.v_descale = descale_q, descale_k, descale_v
    ptrs = (q.data_ptr() or _E[0], k.data_ptr() or _E[1], v.data_ptr() or _E[2], out.data_ptr() or _E[3],
            lse.data_ptr() or _E[4])
    if dev.type == "cpu":
        ctx = _lib.get_ctx(_lib.BACKEND_CPU)
        status = _lib.fwd(ctx, desc, *ptrs, None, 0, None)
        if status:
            _lib.raise_status(ctx, status, "flashc.attention")
    else:
        _call(_lib.fwd, _lib.fwd_workspace_size, (desc,), q, ptrs, "flashc.attention")
    if varlen and totals[0] < q.shape[0]:
        out[totals[0]:].zero_()
        lse = torch.cat((lse, lse.new_full((h, q.shape[0] - totals[0]), float("inf"))), dim=1)
    return out, lse


def bwd_impl(dout, q, k, v, out, lse, dq, dk, dv, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
             max_seqlen_k, scale, softcap, causal, window_left, window_right, deterministic):
    """Writes dq, dk, dv (given, any strides with a contiguous last dim) for torch tensors."""
    q, k, v, out = _c_layout(q), _c_layout(k), _c_layout(v), _c_layout(out)
    dout = _c_layout(dout)  # (autograd hands expanded, stride-0 gradients to sum() and mean())
    dt, varlen, b, sq, sk, h, hkv, d, cu_qp, cu_kp, usedp, alp, albs, _keep, _paged, totals = _common(
        q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k)
    if varlen:
        sq, sk = max_seqlen_q, max_seqlen_k
    for name, t, like in (("out", out, q), ("dout", dout, q), ("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
        if t.shape != like.shape or t.dtype != like.dtype or t.device != like.device:
            raise ValueError(f"flashc: {name} must match {tuple(like.shape)} {like.dtype} on {like.device}, "
                             f"got {tuple(t.shape)} {t.dtype} on {t.device}")
        if name[0] == "d" and name != "dout":
            _check_out(name, t)
    lse_shape = (h, q.shape[0]) if varlen else (b, h, sq)
    if tuple(lse.shape) != lse_shape or lse.dtype != torch.float32 or lse.device != q.device:
        raise ValueError(f"flashc: lse must be float32 of shape {lse_shape} on {q.device}, "
                         f"got {tuple(lse.shape)} {lse.dtype} on {lse.device}")
    # (C reads lse as (H, cu_seqlens_q[-1]); rows after the last sequence get zero gradients)
    lse = (lse[:, :totals[0]] if varlen else lse).contiguous()
    if varlen:
        dq[totals[0]:].zero_()
        dk[totals[1]:].zero_()
        dv[totals[1]:].zero_()
    vl = varlen
    desc = make_desc(dt, b, sq, sk, h, hkv, d, _st(q, vl), _st(k, vl), _st(v, vl), _st(out, vl), scale, softcap, causal,
                     window_left, window_right, alp, albs, cu_qp, cu_kp, usedp, deterministic, _st(dout, vl),
                     _st(dq, vl), _st(dk, vl), _st(dv, vl))
    _call(_lib.bwd, _lib.bwd_workspace_size, (desc,), q,
          _ptrs(q, k, v, out, lse, dout, dq, dk, dv),
          "flashc.attention_backward")


def kvcache_impl(q, k_cache, v_cache, k_new, v_new, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, block_table,
                 scale, causal, window_left, window_right, softcap, alibi_slopes, rotary_interleaved, num_splits):
    """(out, lse) of flashc_fwd_kvcache for torch tensors; appends k_new / v_new into the cache in place.

    q (B, Sq, H, D); k_cache, v_cache (B_cache, S_cache, H_kv, D), or page pools (num_pages, page_size,
    H_kv, D) with block_table (B, max_pages); k_new, v_new (B, S_new, H_kv, D) or None; cache_seqlens
    int32 (B,) or None (a full cache); rotary_cos / rotary_sin (S_ro, rotary_dim / 2) or None.
    """
    dt = _DTYPES.get(q.dtype)
    if dt is None:
        raise ValueError(f"flashc: q.dtype = {q.dtype}: flashc takes float32, float16 and bfloat16 tensors")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache), ("k", k_new), ("v", v_new)):
        if t is None:
            continue
        _same_device(q, name, t)
        if t.dtype != q.dtype:
            raise ValueError(f"flashc: {name}.dtype = {t.dtype} but q.dtype = {q.dtype}: they must match")
        if t.dim() != 4:
            raise ValueError(f"flashc: {name} has shape {tuple(t.shape)}: expected 4 dims")
        if name.endswith("cache"):
            _check_out(name, t)
    if q.dim() != 4:
        raise ValueError(f"flashc: q has shape {tuple(q.shape)}: expected (batch, seqlen_q, nheads, headdim)")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"flashc: k_cache has shape {tuple(k_cache.shape)} but v_cache has {tuple(v_cache.shape)}")
    if (k_new is None) != (v_new is None):
        raise ValueError("flashc: k and v must be given together")
    q = _c_layout(q)
    B, Sq, H, D = q.shape
    Hkv = k_cache.shape[2]
    if k_cache.shape[3] != D:
        raise ValueError(f"flashc: q has head_dim {D} but k_cache has {k_cache.shape[3]}")
    paged = (0, 0, 0, 0)
    keep = []
    if block_table is not None:
        bt = _i32(block_table, "block_table", q)
        if bt.dim() != 2 or bt.shape[0] != B:
            raise ValueError(f"flashc: block_table has shape {tuple(bt.shape)}: expected (batch = {B}, max_pages)")
        paged = paged_args(bt.data_ptr(), bt.shape, k_cache.shape)
        sk = bt.shape[1] * k_cache.shape[1]
        keep.append(bt)
    else:
        sk = k_cache.shape[1]
    kv = _lib.KvcacheDesc()  # zero-filled: no append, no rotary, splits chosen by the library
    if block_table is None:  # C checks batch (or cache_batch_idx) against the cache's rows
        kv.num_cache_rows = k_cache.shape[0]
    new = 0
    if k_new is not None:
        k_new, v_new = _c_layout(k_new), _c_layout(v_new)
        new = k_new.shape[1]
        if k_new.shape != (B, new, Hkv, D) or v_new.shape != k_new.shape:
            raise ValueError(f"flashc: k and v must be (batch = {B}, seqlen_new, nheads_k = {Hkv}, headdim = {D}), "
                             f"got {tuple(k_new.shape)} and {tuple(v_new.shape)}")
        kv.knew_stride[:] = k_new.stride()[:3]
        kv.vnew_stride[:] = v_new.stride()[:3]
    kv.seqlen_new = new
    kv.num_splits = int(num_splits)
    if cache_seqlens is not None:
        cs = _i32(cache_seqlens, "cache_seqlens", q)
        check_1d("cache_seqlens", cs.shape, B, True)
        kv.cache_seqlens = cs.data_ptr()
        keep.append(cs)
    if cache_batch_idx is not None:
        cbi = _i32(cache_batch_idx, "cache_batch_idx", q)
        check_1d("cache_batch_idx", cbi.shape, B, True)
        kv.cache_batch_idx = cbi.data_ptr()  # (the kernels clamp the indices into num_cache_rows)
        keep.append(cbi)
    if rotary_cos is not None or rotary_sin is not None:
        if rotary_cos is None or rotary_sin is None:
            raise ValueError("flashc: rotary_cos and rotary_sin must be given together")
        cos, sin = (_rotary_table(t, name, q) for name, t in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)))
        if cos.dim() != 2 or sin.shape != cos.shape:
            raise ValueError(f"flashc: rotary_cos / rotary_sin must be (seqlen_ro, rotary_dim / 2) and match, "
                             f"got {tuple(cos.shape)} and {tuple(sin.shape)}")
        kv.rotary_cos, kv.rotary_sin = cos.data_ptr(), sin.data_ptr()
        kv.rotary_dim = 2 * cos.shape[1]
        kv.rotary_interleaved = 1 if rotary_interleaved else 0
        kv.seqlen_ro = cos.shape[0]
        keep += [cos, sin]
    alp = albs = 0
    if alibi_slopes is not None:
        al, alp, albs = _alibi(alibi_slopes, q, B, H)
        keep.append(al)
    out = torch.empty_like(q, memory_format=_CONTIGUOUS)
    lse = q.new_empty((B, H, Sq), dtype=torch.float32)
    if POISON:
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
    desc = make_desc(dt, B, Sq, sk, H, Hkv, D, q.stride()[:3], k_cache.stride()[:3], v_cache.stride()[:3],
                     (Sq * H * D, H * D, D), scale, softcap, causal, window_left, window_right, alp, albs,
                     paged=paged)
    ptrs = (q.data_ptr() or _E[0], k_cache.data_ptr() or _E[1], v_cache.data_ptr() or _E[2],
            k_new.data_ptr() or _E[3] if new else None, v_new.data_ptr() or _E[4] if new else None,
            out.data_ptr() or _E[5], lse.data_ptr() or _E[6])
    _call(_lib.fwd_kvcache, _lib.kvcache_workspace_size, (desc, kv), q, ptrs, "flash_attn_with_kvcache")
    return out, lse


def merge_impl(out_parts, lse_parts, out_dtype):
    """flashc.merge for torch tensors (see there)."""
    pdt = _DTYPES.get(out_parts.dtype)
    out_dtype = out_dtype or out_parts.dtype
    odt = _DTYPES.get(out_dtype)
    if pdt is None or odt is None:
        raise ValueError(f"flashc: out_parts is {out_parts.dtype}, out_dtype {out_dtype}: float32, float16 or "
                         "bfloat16 expected")
    parts = _c_layout(out_parts)
    m = merge_desc(tuple(parts.shape), pdt, odt, parts.stride())
    n, b, s, h, d = parts.shape
    _same_device(parts, "lse_parts", lse_parts)
    lse_parts = lse_parts.contiguous()
    if lse_parts.dtype != torch.float32 or tuple(lse_parts.shape) != (n, b, h, s):
        raise ValueError(f"flashc: lse_parts must be float32 of shape {(n, b, h, s)}, "
                         f"got {lse_parts.dtype} {tuple(lse_parts.shape)}")
    out = parts.new_empty((b, s, h, d), dtype=out_dtype)
    lse = parts.new_empty((b, h, s), dtype=torch.float32)
    if POISON:
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
    ptrs = (parts.data_ptr() or _E[0], lse_parts.data_ptr() or _E[1], out.data_ptr() or _E[2], lse.data_ptr() or _E[3])
    if parts.device.type == "cpu":
        ctx = _lib.get_ctx(_lib.BACKEND_CPU)
        status = _lib.merge(ctx, m, *ptrs, None)
    else:
        run = _Cuda(parts.device)
        try:
            ctx = run.ctx
            status = _lib.merge(ctx, m, *ptrs, run.stream)
        finally:
            run.close()
    if status:
        _lib.raise_status(ctx, status, "flashc.merge")
    return out, lse


def _rotary_table(t, name, q):
    """A rotary table on q's device, in q's dtype (what the C call reads), contiguous."""
    _same_device(q, name, t)
    return t.to(q.dtype).contiguous()


# ------------------------------------------------------------------------------------------------
# custom ops (what torch.compile traces)


@torch.library.custom_op("flashc::fwd", mutates_args=())
def fwd_op(q: Tensor, k: Tensor, v: Tensor, alibi_slopes: Optional[Tensor], cu_seqlens_q: Optional[Tensor],
           cu_seqlens_k: Optional[Tensor], seqused_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
           scale: float, softcap: float, causal: bool, window_left: int, window_right: int, descale_q: float = 1.0,
           descale_k: float = 1.0, descale_v: float = 1.0, block_table: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    return fwd_impl(q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, scale,
                    softcap, causal, window_left, window_right, descale_q, descale_k, descale_v, block_table)


@fwd_op.register_fake
def _fwd_fake(q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, scale,
              softcap, causal, window_left, window_right, descale_q=1.0, descale_k=1.0, descale_v=1.0, block_table=None):
    lse_shape = (q.shape[1], q.shape[0]) if cu_seqlens_q is not None else (q.shape[0], q.shape[2], q.shape[1])
    return q.new_empty(q.shape, dtype=_out_dtype(q.dtype)), q.new_empty(lse_shape, dtype=torch.float32)


@torch.library.custom_op("flashc::bwd", mutates_args=("dq", "dk", "dv"))
def bwd_op(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, dq: Tensor, dk: Tensor,
           dv: Tensor, alibi_slopes: Optional[Tensor], cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
           seqused_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int, scale: float, softcap: float,
           causal: bool, window_left: int, window_right: int, deterministic: bool) -> None:
    bwd_impl(dout, q, k, v, out, lse, dq, dk, dv, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
             max_seqlen_k, scale, softcap, causal, window_left, window_right, deterministic)


@bwd_op.register_fake
def _bwd_fake(dout, q, k, v, out, lse, dq, dk, dv, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
              max_seqlen_k, scale, softcap, causal, window_left, window_right, deterministic):
    return None


def _fwd(*args):
    if torch.compiler.is_compiling():
        return torch.ops.flashc.fwd(*args)
    return fwd_impl(*args)


def _bwd(*args):
    if torch.compiler.is_compiling():
        return torch.ops.flashc.bwd(*args)
    return bwd_impl(*args)


# ------------------------------------------------------------------------------------------------
# autograd


def _unpack(pack, a, b, c):
    """q, k, v from the inputs: separate, kv packed (..., 2, H_kv, D) or qkv packed (..., 3, H, D)."""
    if pack == "qkv":
        return a.select(-3, 0), a.select(-3, 1), a.select(-3, 2)
    if pack == "kv":
        return a, b.select(-3, 0), b.select(-3, 1)
    return a, b, c


class AttentionFunction(torch.autograd.Function):
    """out, lse = attention(q, k, v); saves q, k, v, out, lse; backward calls flashc's backward.

    apply(pack, a, b, c, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
          max_seqlen_k, scale, softcap, causal, window_left, window_right, deterministic)
    with pack None (a, b, c = q, k, v), "kv" (a = q, b = kv) or "qkv" (a = qkv); packed inputs get
    packed gradients, written by the backward in place (no concatenation).
    """

    @staticmethod
    def forward(ctx, pack, a, b, c, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                scale, softcap, causal, window_left, window_right, deterministic):
        q, k, v = _unpack(pack, a, b, c)
        out, lse = _fwd(q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                        scale, softcap, causal, window_left, window_right)
        ctx.save_for_backward(q, k, v, out, lse, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k)
        ctx.pack = pack
        ctx.shapes = (a.shape, b.shape if b is not None else None)
        ctx.args = (max_seqlen_q, max_seqlen_k, scale, softcap, causal, window_left, window_right, deterministic)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, alibi_slopes, cu_q, cu_k, used = ctx.saved_tensors
        pack = ctx.pack
        ga = gb = gc = None
        if pack == "qkv":
            ga = torch.empty(ctx.shapes[0], dtype=q.dtype, device=q.device)
            dq, dk, dv = _unpack("qkv", ga, None, None)
        elif pack == "kv":
            ga = dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
            gb = torch.empty(ctx.shapes[1], dtype=k.dtype, device=k.device)
            dk, dv = gb.select(-3, 0), gb.select(-3, 1)
        else:
            ga = dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
            gb = dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
            gc = dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
        dout = _c_layout(dout)
        _bwd(dout, q, k, v, out, lse, dq, dk, dv, alibi_slopes, cu_q, cu_k, used, *ctx.args)
        return (None, ga, gb, gc) + (None,) * 12


# ------------------------------------------------------------------------------------------------
# entry points used by flashc.attention and flashc.flash_attn


def max_len(cu):
    """Largest sequence length in int32 offsets (a host sync for CUDA tensors)."""
    return int((cu[1:] - cu[:-1]).max().item()) if cu.shape[0] > 1 else 0


def _max_lens(cu_q, cu_k, max_q, max_k):
    """max_seqlen_q / _k as given, or computed from the offsets of a varlen call when None."""
    if cu_q is not None:
        if max_q is None:
            max_q = max_len(cu_q)
        if max_k is None and cu_k is not None:
            max_k = max_len(cu_k)
    return max_q, max_k


def attention(q, k, v, causal=False, scale=None, softcap=0.0, window=(-1, -1), alibi_slopes=None,
              cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, seqused_k=None,
              deterministic=False, return_lse=False, pack=None, descale=None, block_table=None):
    """See flashc.attention. pack: None, "kv" (k is kv, v None) or "qkv" (q is qkv, k and v None)."""
    max_seqlen_q, max_seqlen_k = _max_lens(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    wl, wr = window
    args = (alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q or 0, max_seqlen_k or 0,
            float(scale) if scale is not None else 0.0, float(softcap), bool(causal), int(wl), int(wr))
    if descale is not None:  # e4m3, forward only
        if len(descale) != 3:
            raise ValueError(f"flashc: descale must be (q_descale, k_descale, v_descale), got {descale!r}")
        args = args + tuple(float(x) for x in descale)
    if block_table is not None:  # paged K/V, forward only: after the (default) descales
        args = args + (1.0,) * (14 - len(args)) + (block_table,)
    if torch.is_grad_enabled() and (q.requires_grad or k is not None and k.requires_grad
                                    or v is not None and v.requires_grad):
        if descale is not None:
            raise NotImplementedError("flashc: descale is for the e4m3 forward, which has no backward")
        if block_table is not None:
            raise NotImplementedError("flashc: paged K/V (block_table) is forward only; call it under "
                                      "torch.no_grad() or on tensors that do not require grad")
        out, lse = AttentionFunction.apply(pack, q, k, v, *args, bool(deterministic))
    elif pack is None:
        out, lse = _fwd(q, k, v, *args)
    else:
        out, lse = _fwd(*_unpack(pack, q, k, v), *args)
    return (out, lse) if return_lse else out


def attention_backward(dout, q, k, v, out, lse, causal=False, scale=None, softcap=0.0, window=(-1, -1),
                       alibi_slopes=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                       seqused_k=None, deterministic=False):
    """See flashc.attention_backward: returns fresh (dq, dk, dv)."""
    max_seqlen_q, max_seqlen_k = _max_lens(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    if POISON:
        for t in (dq, dk, dv):
            t.fill_(float("nan"))
    wl, wr = window
    _bwd(dout, q, k, v, out, lse, dq, dk, dv, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k,
         max_seqlen_q or 0, max_seqlen_k or 0, float(scale) if scale is not None else 0.0, float(softcap),
         bool(causal), int(wl), int(wr), bool(deterministic))
    return dq, dk, dv
