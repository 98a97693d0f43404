"""flashc.distributed -- ring attention: exact attention over a sequence sharded across the ranks of
a torch.distributed process group (NCCL on GPUs, gloo on CPUs), with autograd.

    import flashc.distributed as fd
    q_l, k_l, v_l = (fd.shard(t, rank, world) for t in (q, k, v))   # zigzag: chunks r and 2N-1-r
    out_l = fd.ring_attention(q_l, k_l, v_l, group, causal=True)    # out_l is this rank's rows
    out = fd.unshard([all ranks' out_l])                              # the full sequence again

Every rank keeps its Q rows; the K/V blocks travel around the ring (rank r sends to r+1 and
receives from r-1), and each step computes flashc attention of the local Q against the block it
holds, giving a partial (O_j, L_j) that is merged into the running (O, L) by the LSEs in fp32:
L = logaddexp(L, L_j), O = exp(L_old - L) O + exp(L_j - L) O_j. The next block is already in flight
(batch_isend_irecv issued before the current block is computed), so communication hides behind
the attention of the current block when the block is large enough.

The backward runs the same ring: K/V travel again, with fp32 dK/dV accumulators that follow them
one step behind, so each block's dK/dV come home to their owner after N hops. The backward of
attention over a subset of keys, given the GLOBAL L and O, is exactly that subset's share of the
gradient (P_ij = exp(S_ij - L_i) and D_i = rowsum(dO_i * O_i) are global quantities), so each step
is one call to flashc's backward with the merged out and lse.

Causal masking and load balance. With layout="zigzag" (the default) the global sequence is cut
into 2N equal chunks and rank r holds chunks r and 2N-1-r. Against the block of rank j, rank r
then does: j == r, causal attention of its 2c rows against its 2c keys (its two chunks are in order,
and equal-length diagonal blocks make bottom-right and top-left alignment agree); j < r, all 2c
rows against the first chunk of the block, unmasked; j > r, the second c rows against the whole
block, unmasked. Every step is 2c^2 score entries on every rank, so no rank idles on the masked
half. layout="contiguous" (rank r holds chunk r of N) is also accepted: exact, but rank N-1 does
N times the work of rank 0 under a causal mask. Without a causal mask the layout does not matter.

Supported: fp32/fp16/bf16 where flashc's backend takes them, GQA/MQA (k, v with heads_kv heads),
scale, softcap, deterministic backward. Not supported (NotImplementedError): sliding windows and
ALiBi (their masks depend on global positions that each block would need to be told), varlen.
torch.compile sees the ring as a graph break.
"""
import torch
import torch.distributed as dist

from ._torch import attention_backward, fwd_impl

__all__ = ["ring_attention", "shard", "unshard", "RingAttentionFunction"]

_LAYOUTS = ("zigzag", "contiguous")
_TAG_KV, _TAG_DKV = 1, 2


# ------------------------------------------------------------------------------------------------
# layouts


def shard(x, rank, world, layout="zigzag", dim=1):
    """This rank's part of the full sequence x along dim: chunks rank and 2*world-1-rank of
    2*world (zigzag), or chunk rank of world (contiguous). The length must divide evenly."""
    n = 2 * world if layout == "zigzag" else world
    if layout not in _LAYOUTS:
        raise ValueError(f"flashc: layout must be one of {_LAYOUTS}, got {layout!r}")
    if x.shape[dim] % n:
        raise ValueError(f"flashc: sequence length {x.shape[dim]} is not a multiple of {n} ({layout}, world {world})")
    chunks = x.chunk(n, dim=dim)
    if layout == "contiguous":
        return chunks[rank]
    return torch.cat([chunks[rank], chunks[n - 1 - rank]], dim=dim)


def unshard(parts, layout="zigzag", dim=1):
    """The full sequence from every rank's part (a list in rank order): the inverse of shard."""
    if layout not in _LAYOUTS:
        raise ValueError(f"flashc: layout must be one of {_LAYOUTS}, got {layout!r}")
    if layout == "contiguous":
        return torch.cat(list(parts), dim=dim)
    halves = [p.chunk(2, dim=dim) for p in parts]
    return torch.cat([h[0] for h in halves] + [h[1] for h in reversed(halves)], dim=dim)


# ------------------------------------------------------------------------------------------------
# the ring


def _plan(rank, j, causal, layout, c):
    """(q rows, k rows, causal) of rank's Q against the block of rank j, or None when every score
    is masked. c is half the local length (zigzag chunk)."""
    full = slice(None)
    if not causal:
        return full, full, False
    if j == rank:
        return full, full, True
    if layout == "contiguous":
        return (full, full, False) if j < rank else None
    if j < rank:
        return full, slice(0, c), False   # the block's first chunk j < r precedes both of ours
    return slice(c, None), full, False    # only our second chunk 2N-1-r follows the block's two


class _Ring:
    """The group's ring (peers as global ranks, as P2POp wants them) and one exchange step: send
    a tensor to the next rank while receiving its successor from the previous one into a fresh
    buffer (torch's caching allocator on GPUs makes that an alternation of two buffers)."""

    def __init__(self, group):
        self.group = group
        self.n = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        to_global = (lambda r: r) if group is None else (lambda r: dist.get_global_rank(group, r))
        self.next = to_global((self.rank + 1) % self.n)
        self.prev = to_global((self.rank - 1) % self.n)

    def start(self, send, tag):
        """Post send -> next and a receive from prev into a fresh buffer; (requests, buffer). The
        tag keeps K/V and dK/dV messages apart on gloo (NCCL matches them by issue order, the same
        on every rank)."""
        recv = torch.empty_like(send)
        ops = [dist.P2POp(dist.isend, send, self.next, self.group, tag),
               dist.P2POp(dist.irecv, recv, self.prev, self.group, tag)]
        return dist.batch_isend_irecv(ops), recv

    @staticmethod
    def finish(pending):
        reqs, recv = pending
        for r in reqs:
            r.wait()
        return recv


def _lse_for_merge(lse):
    # flashc marks a row that saw no key with lse = +inf; in a merge that row weighs nothing
    return lse.masked_fill(lse == float("inf"), float("-inf"))


def _merge(out_acc, lse_acc, out_j, lse_j):
    """out_acc (B, S, H, D) fp32 and lse_acc (B, H, S) fp32, views, updated in place."""
    lse_j = _lse_for_merge(lse_j)
    lse_new = torch.logaddexp(lse_acc, lse_j)
    base = lse_new.masked_fill(lse_new == float("-inf"), 0.0)  # both empty: weights exp(-inf) = 0
    w_acc = torch.exp(lse_acc - base).transpose(1, 2).unsqueeze(-1)
    w_j = torch.exp(lse_j - base).transpose(1, 2).unsqueeze(-1)
    out_acc.mul_(w_acc).add_(out_j.float() * w_j)
    lse_acc.copy_(lse_new)


def _ring_fwd(ring, q, k, v, causal, layout, scale, softcap):
    """(out, lse) of the local Q rows over the whole sharded sequence; lse +inf for empty rows."""
    c = q.shape[1] // 2
    kv = torch.stack([k, v]) if ring.n > 1 else (k, v)   # one message per step
    out_acc = lse_acc = None
    merged = False
    for s in range(ring.n):
        pending = ring.start(kv, _TAG_KV) if s < ring.n - 1 else None   # the next block flies meanwhile
        plan = _plan(ring.rank, (ring.rank - s) % ring.n, causal, layout, c)
        if plan is not None:
            rows, cols, blk_causal = plan
            o, lse = fwd_impl(q[:, rows], kv[0][:, cols], kv[1][:, cols], None, None, None, None, 0, 0, scale,
                              softcap, blk_causal, -1, -1)
            if out_acc is None:
                out_acc, lse_acc = o, lse     # step 0 covers every row: the diagonal block is never skipped
            else:
                if not merged:
                    out_acc, lse_acc, merged = out_acc.float(), _lse_for_merge(lse_acc), True
                _merge(out_acc[:, rows], lse_acc[:, :, rows], o, lse)
        if pending is not None:
            kv = ring.finish(pending)
    out = out_acc.to(q.dtype)
    if merged:
        lse_acc = lse_acc.masked_fill(lse_acc == float("-inf"), float("inf"))
    return out, lse_acc


def _ring_bwd(ring, dout, q, k, v, out, lse, causal, layout, scale, softcap, deterministic):
    if ring.n == 1:
        # one block: flashc's own backward, nothing to accumulate or pass on
        return attention_backward(dout, q, k, v, out, lse, causal=causal, scale=scale, softcap=softcap,
                                  deterministic=deterministic)
    c = q.shape[1] // 2
    kv = torch.stack([k, v])
    dq_acc = None
    dkv_pending = None
    for s in range(ring.n):
        pending = ring.start(kv, _TAG_KV) if s < ring.n - 1 else None
        plan = _plan(ring.rank, (ring.rank - s) % ring.n, causal, layout, c)
        contrib = None
        if plan is not None:
            rows, cols, blk_causal = plan
            dq, dk, dv = attention_backward(dout[:, rows], q[:, rows], kv[0][:, cols], kv[1][:, cols], out[:, rows],
                                            lse[:, :, rows], causal=blk_causal, scale=scale, softcap=softcap,
                                            deterministic=deterministic)
            if dq_acc is None:
                dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
            dq_acc[:, rows] += dq
            contrib = (cols, dk, dv)
        # dK/dV of the block held at step s: what the previous ranks added, plus ours
        if s == 0:
            dkv = torch.zeros(kv.shape, dtype=torch.float32, device=q.device)
        else:
            dkv = ring.finish(dkv_pending)
        if contrib is not None:
            cols, dk, dv = contrib
            dkv[0][:, cols] += dk
            dkv[1][:, cols] += dv
        dkv_pending = ring.start(dkv, _TAG_DKV)     # the last hop brings each block's dK/dV home
        if pending is not None:
            kv = ring.finish(pending)
    dkv = ring.finish(dkv_pending)
    if dq_acc is None:
        dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    return dq_acc.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


class RingAttentionFunction(torch.autograd.Function):
    """apply(q, k, v, group, causal, layout, scale, softcap, deterministic) -> (out, lse)."""

    @staticmethod
    def forward(ctx, q, k, v, group, causal, layout, scale, softcap, deterministic):
        ring = _Ring(group)
        out, lse = _ring_fwd(ring, q, k, v, causal, layout, scale, softcap)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring = ring
        ctx.args = (causal, layout, scale, softcap, deterministic)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        if dout.stride(-1) != 1 or 0 in dout.stride():
            dout = dout.contiguous()
        dq, dk, dv = _ring_bwd(ctx.ring, dout, q, k, v, out, lse, *ctx.args)
        return dq, dk, dv, None, None, None, None, None, None


def ring_attention(q, k, v, group=None, causal=False, scale=None, softcap=0.0, layout="zigzag",
                   deterministic=False, return_lse=False, window=(-1, -1), alibi_slopes=None,
                   cu_seqlens_q=None, cu_seqlens_k=None):
    """Exact attention over a sequence sharded across the ranks of `group` (default: the world).

    q (B, S, H, D), k and v (B, S, H_kv, D) are this rank's shard of the sequence, the same S on
    every rank, in `layout` (see shard(); for causal zigzag S must be even). Returns this rank's
    rows of the output, (B, S, H, D) in q's dtype, and with return_lse its fp32 lse (B, H, S) over
    the whole sequence. Differentiable in q, k, v. The collective calls are point-to-point sends
    in a ring, so every rank of the group must call it with the same shapes and options.
    """
    if tuple(window) != (-1, -1) or alibi_slopes is not None:
        raise NotImplementedError("flashc.distributed.ring_attention: sliding windows and ALiBi are not supported")
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        raise NotImplementedError("flashc.distributed.ring_attention: varlen is not supported")
    if layout not in _LAYOUTS:
        raise ValueError(f"flashc: layout must be one of {_LAYOUTS}, got {layout!r}")
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
        raise ValueError("flashc.distributed.ring_attention takes torch tensors")
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise ValueError(f"flashc: q must be (B, S, H, D) and k, v (B, S, H_kv, D), got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape[1] != q.shape[1]:
        raise ValueError(f"flashc: q and k must hold the same shard length, got {q.shape[1]} and {k.shape[1]}")
    if causal and layout == "zigzag" and q.shape[1] % 2:
        raise ValueError(f"flashc: causal zigzag needs an even local length (two equal chunks), got {q.shape[1]}")
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("flashc.distributed.ring_attention needs an initialised torch.distributed process group")
    args = (group, bool(causal), layout, float(scale) if scale is not None else 0.0, float(softcap),
            bool(deterministic))
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        out, lse = RingAttentionFunction.apply(q, k, v, *args)
    else:
        out, lse = _ring_fwd(_Ring(group), q, k, v, *args[1:5])
    return (out, lse) if return_lse else out
