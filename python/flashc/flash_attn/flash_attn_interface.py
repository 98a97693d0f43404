"""flash_attn_interface.py -- flash-attn 2.x's Python API on flashc.

Same functions, argument names, defaults and return conventions as flash-attn 2.8
(flash_attn/flash_attn_interface.py), so code written for flash-attn runs unchanged, on CUDA and
on the CPU. What flashc does not do raises NotImplementedError instead of being ignored:
dropout_p > 0, and cache_leftpad together with block_table. Paged K/V (block_table) works in
flash_attn_varlen_func (forward only, as in flash-attn) and flash_attn_with_kvcache, with pages of
any size (flash-attn asks for multiples of 256 in the varlen function).

Return conventions (as flash-attn): out; with return_attn_probs=True, (out, softmax_lse, S_dmask)
where S_dmask is an empty tensor, which is what flash-attn returns when dropout_p == 0.
flash_attn_with_kvcache returns out, or (out, softmax_lse) with return_softmax_lse=True.

flash_attn_with_kvcache is libflashc's flashc_fwd_kvcache: append, rotary, paged caches and the
split-KV decode kernel in C. Only cache_leftpad, which the C API does not have, takes a torch path:
the append and rotary in torch, then one varlen flashc attention call over the cache.
"""
from typing import Optional, Union

import torch

from .. import _torch


def _no_dropout(dropout_p):
    if dropout_p:
        raise NotImplementedError(
            f"flashc: dropout_p = {dropout_p} is not supported (flashc has no attention dropout yet); "
            "pass dropout_p=0.0, e.g. by calling model.eval() or setting the attention dropout to 0")


def _call(q, k, v, pack, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
          return_attn_probs, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
          block_table=None):
    if dropout_p:
        _no_dropout(dropout_p)
    d = q.shape[-1]
    if softmax_scale is None:
        softmax_scale = d ** (-0.5)
    padded = d % 8 and q.is_cuda
    if padded:  # flash-attn pads head dims that are not a multiple of 8 on the GPU; so do we
        q, k, v = (torch.nn.functional.pad(t, [0, 8 - d % 8]) if t is not None else None for t in (q, k, v))
    out, lse = _torch.attention(q, k, v, causal, softmax_scale, softcap, window_size, alibi_slopes, cu_seqlens_q,
                                cu_seqlens_k, max_seqlen_q, max_seqlen_k, None, deterministic, True, pack,
                                block_table=block_table)
    if padded:
        out = out[..., :d]
    if not return_attn_probs:
        return out
    return out, lse, torch.empty((0,), dtype=out.dtype, device=out.device)


def flash_attn_qkvpacked_func(
    qkv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """qkv: (batch, seqlen, 3, nheads, headdim). Returns out (batch, seqlen, nheads, headdim); the
    gradient of qkv is written packed by the backward, with no concatenation."""
    return _call(qkv, None, None, "qkv", dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                 deterministic, return_attn_probs)


def flash_attn_kvpacked_func(
    q,
    kv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """q: (batch, seqlen_q, nheads, headdim), kv: (batch, seqlen_k, 2, nheads_k, headdim)."""
    return _call(q, kv, None, "kv", dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                 deterministic, return_attn_probs)


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """q: (batch, seqlen_q, nheads, headdim), k and v: (batch, seqlen_k, nheads_k, headdim); nheads a
    multiple of nheads_k (MQA/GQA). causal and window_size are aligned to the bottom-right corner.
    alibi_slopes: fp32 (nheads,) or (batch, nheads). Returns out, or (out, softmax_lse, S_dmask)."""
    return _call(q, k, v, None, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                 return_attn_probs)


def flash_attn_varlen_qkvpacked_func(
    qkv,
    cu_seqlens,
    max_seqlen,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """qkv: (total, 3, nheads, headdim); cu_seqlens int32 (batch + 1,). softmax_lse is (nheads, total)."""
    return _call(qkv, None, None, "qkv", dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                 deterministic, return_attn_probs, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen)


def flash_attn_varlen_kvpacked_func(
    q,
    kv,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """q: (total_q, nheads, headdim), kv: (total_k, 2, nheads_k, headdim)."""
    return _call(q, kv, None, "kv", dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                 deterministic, return_attn_probs, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
):
    """q: (total_q, nheads, headdim), k and v: (total_k, nheads_k, headdim); cu_seqlens_q / _k int32
    (batch + 1,) offsets; max_seqlen_q / _k the largest lengths. Masks are bottom-right aligned per
    sequence. softmax_lse is (nheads, total_q). With block_table (batch, max_pages) int32, k and v are
    page pools (num_pages, page_size, nheads_k, headdim), page_size >= 1: key j of sequence b is row
    j % page_size of page block_table[b, j // page_size], cu_seqlens_k giving the lengths (forward only)."""
    return _call(q, k, v, None, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                 return_attn_probs, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_table)


# ------------------------------------------------------------------------------------------------
# KV cache


def _rotate(x, cos, sin, pos, interleaved):
    """RoPE on the first 2 * cos.shape[1] dims of x (B, S, H, D) at integer positions pos (B, S),
    computed in fp32 and rounded once, as flash-attn's kernel does."""
    rd = 2 * cos.shape[1]
    c = cos[pos].float().unsqueeze(2)  # (B, S, 1, rd/2)
    s = sin[pos].float().unsqueeze(2)
    xr = x[..., :rd].float()
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        rot = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    else:
        x1, x2 = xr[..., : rd // 2], xr[..., rd // 2:]
        rot = torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)
    return torch.cat((rot.to(x.dtype), x[..., rd:]), dim=-1)


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens: Optional[Union[int, torch.Tensor]] = None,
    cache_batch_idx: Optional[torch.Tensor] = None,
    cache_leftpad: Optional[torch.Tensor] = None,
    block_table: Optional[torch.Tensor] = None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
):
    """Decode against a KV cache, flash-attn 2.x semantics.

    q: (batch, seqlen_q, nheads, headdim); k_cache, v_cache: (batch_cache, seqlen_cache, nheads_k,
    headdim); k, v (optional): (batch, seqlen_new, nheads_k, headdim), written *in place* into the
    cache at cache_seqlens (rotary applied to k first when rotary_cos / rotary_sin are given; q is
    rotated at cache_seqlens + i when causal or windowed, at cache_seqlens otherwise). Sequence b then
    attends to cache rows cache_leftpad[b] .. cache_seqlens[b] + seqlen_new - 1 of cache row
    cache_batch_idx[b] (or through block_table when the cache is paged: k_cache, v_cache are then
    (num_blocks, page_block_size, nheads_k, headdim), any page size). num_splits forces the split-KV
    count (0: chosen by flashc). No backward (as flash-attn).
    Returns out, or (out, softmax_lse (batch, nheads, seqlen_q)) with return_softmax_lse=True.
    """
    if cache_leftpad is None:
        if isinstance(cache_seqlens, int):
            cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
        if softmax_scale is None:
            softmax_scale = q.shape[-1] ** (-0.5)
        out, lse = _torch.kvcache_impl(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                                       cache_batch_idx, block_table, softmax_scale, causal, window_size[0],
                                       window_size[1], softcap, alibi_slopes, rotary_interleaved, num_splits)
        return (out, lse) if return_softmax_lse else out
    # cache_leftpad (each sequence starts at its own cache row) is not in the C API: append and rotary
    # in torch, then one varlen attention call over the cache
    if block_table is not None:
        raise NotImplementedError("flashc: cache_leftpad together with a paged KV cache (block_table) is not supported")
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("flashc: k_cache and v_cache must have a contiguous last dimension")
    if (k is None) != (v is None):
        raise ValueError("flashc: k and v must be given together")
    B, Sq, H, D = q.shape
    Bc, Sc, Hkv = k_cache.shape[0], k_cache.shape[1], k_cache.shape[2]
    dev = q.device
    if softmax_scale is None:
        softmax_scale = D ** (-0.5)
    if cache_seqlens is None:
        if k is not None:
            raise ValueError("flashc: cache_seqlens must be given when k and v are appended")
        seqlens = torch.full((B,), Sc, dtype=torch.int32, device=dev)
    elif isinstance(cache_seqlens, int):
        seqlens = torch.full((B,), cache_seqlens, dtype=torch.int32, device=dev)
    else:
        seqlens = cache_seqlens.to(device=dev, dtype=torch.int32)
    rows = cache_batch_idx.to(device=dev, dtype=torch.long) if cache_batch_idx is not None else None
    new = 0 if k is None else k.shape[1]
    rotary = rotary_cos is not None
    with torch.no_grad():
        if k is not None:
            pos = seqlens.long()[:, None] + torch.arange(new, device=dev)  # (B, new) cache slots
            if rotary:
                k = _rotate(k, rotary_cos, rotary_sin, pos, rotary_interleaved)
            r = (rows if rows is not None else torch.arange(B, device=dev))[:, None].expand(B, new)
            k_cache[r, pos] = k.to(k_cache.dtype)
            v_cache[r, pos] = v.to(v_cache.dtype)
        if rotary:
            if causal or tuple(window_size) != (-1, -1):
                qpos = seqlens.long()[:, None] + torch.arange(Sq, device=dev)
            else:
                qpos = seqlens.long()[:, None].expand(B, Sq)
            q = _rotate(q, rotary_cos, rotary_sin, qpos, rotary_interleaved)
        kc = k_cache[rows] if rows is not None else (k_cache if Bc == B else k_cache[:B])
        vc = v_cache[rows] if rows is not None else (v_cache if Bc == B else v_cache[:B])
        used = seqlens + new
        # sequence b starts at cache row leftpad[b]: varlen offsets into the flattened cache, each
        # capped by seqused_k before the next sequence's rows begin
        lp = cache_leftpad.to(device=dev, dtype=torch.int32)
        kc, vc = kc.reshape(B * Sc, Hkv, D), vc.reshape(B * Sc, Hkv, D)
        starts = torch.arange(B, device=dev, dtype=torch.int32) * Sc + lp
        cu_k = torch.cat((starts, torch.tensor([B * Sc], dtype=torch.int32, device=dev)))
        cu_q = torch.arange(B + 1, device=dev, dtype=torch.int32) * Sq
        out, lse = _torch.attention(q.reshape(B * Sq, H, D), kc, vc, causal=causal, scale=softmax_scale,
                                    softcap=softcap, window=window_size, alibi_slopes=alibi_slopes,
                                    cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=Sq,
                                    max_seqlen_k=_torch.max_len(cu_k), seqused_k=used - lp, return_lse=True)
        out = out.view(B, Sq, H, D)
        lse = lse.view(H, B, Sq).transpose(0, 1).contiguous()
    return (out, lse) if return_softmax_lse else out
