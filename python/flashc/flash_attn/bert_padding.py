"""bert_padding.py -- flash-attn 2.x's padding helpers (flash_attn/bert_padding.py), on plain torch.

unpad_input turns a padded (batch, seqlen, ...) tensor and a (batch, seqlen) mask into the varlen
layout the *_varlen_* functions take; pad_input goes back. Return conventions follow flash-attn
2.7+: unpad_input returns (hidden_states, indices, cu_seqlens, max_seqlen_in_batch, seqused).
"""
import torch
import torch.nn.functional as F


class IndexFirstAxis(torch.autograd.Function):
    """input[indices] along the first axis, with a scatter backward."""

    @staticmethod
    def forward(ctx, input, indices):
        ctx.save_for_backward(indices)
        ctx.first_axis_dim = input.shape[0]
        return input.index_select(0, indices)

    @staticmethod
    def backward(ctx, grad_output):
        (indices,) = ctx.saved_tensors
        grad = grad_output.new_zeros((ctx.first_axis_dim, *grad_output.shape[1:]))
        grad.index_copy_(0, indices, grad_output)
        return grad, None


index_first_axis = IndexFirstAxis.apply


class IndexPutFirstAxis(torch.autograd.Function):
    """A zero (first_axis_dim, ...) tensor with values written at rows indices."""

    @staticmethod
    def forward(ctx, values, indices, first_axis_dim):
        ctx.save_for_backward(indices)
        out = values.new_zeros((first_axis_dim, *values.shape[1:]))
        out.index_copy_(0, indices, values)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        (indices,) = ctx.saved_tensors
        return grad_output.index_select(0, indices), None, None


index_put_first_axis = IndexPutFirstAxis.apply


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """hidden_states (batch, seqlen, ...), attention_mask (batch, seqlen) bool/int, 1 = token.
    unused_mask (optional, same shape): tokens that are allocated but not attended to.
    Returns (hidden_states (total, ...), indices (total,), cu_seqlens int32 (batch + 1,),
    max_seqlen_in_batch int, seqused int32 (batch,))."""
    all_masks = attention_mask + unused_mask if unused_mask is not None else attention_mask
    seqlens = all_masks.sum(dim=-1, dtype=torch.int32)
    used = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(all_masks.flatten(), as_tuple=False).flatten()
    max_seqlen = int(seqlens.max().item())
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return index_first_axis(flat, indices), indices, cu_seqlens, max_seqlen, used


def unpad_input_for_concatenated_sequences(hidden_states, attention_mask_in_length):
    """attention_mask_in_length (batch, seqlen): row b lists the lengths of the sequences packed into
    row b, then zeros (e.g. [2, 3, 0, 0, 0, 0]). Returns (hidden_states, indices, cu_seqlens,
    max_seqlen_in_batch) with one varlen sequence per packed sequence."""
    length = attention_mask_in_length.sum(dim=-1)
    seqlen = attention_mask_in_length.size(-1)
    mask_2d = torch.arange(seqlen, device=length.device, dtype=length.dtype).expand(len(length), seqlen) \
        < length.unsqueeze(1)
    flat_lengths = attention_mask_in_length.flatten()
    seqlens = flat_lengths[torch.nonzero(flat_lengths, as_tuple=False).flatten()]
    indices = torch.nonzero(mask_2d.flatten(), as_tuple=False).flatten()
    max_seqlen = int(seqlens.max().item())
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return index_first_axis(flat, indices), indices, cu_seqlens, max_seqlen


def pad_input(hidden_states, indices, batch, seqlen):
    """hidden_states (total, ...) at rows indices of a (batch * seqlen) grid -> (batch, seqlen, ...),
    zeros elsewhere."""
    out = index_put_first_axis(hidden_states, indices, batch * seqlen)
    return out.view(batch, seqlen, *hidden_states.shape[1:])
