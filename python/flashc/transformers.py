"""flashc.transformers -- attn_implementation="flashc" for Hugging Face Transformers.

    import flashc.transformers
    flashc.transformers.register()
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="flashc")   # or from_pretrained

register() adds "flashc" to transformers' AttentionInterface (the attention function below) and
AttentionMaskInterface (a 2-D padding mask, or None when nothing is padded, as flash-attn gets).
Because the name contains "flash", transformers also treats it as a flash-attention flavour (it
preloads its kernels at model init); register() therefore points that loader at flashc.flash_attn
for this name, so transformers' own flash code paths find flashc's functions instead of looking for
a hub kernel.

The attention function takes the (batch, heads, seq, head_dim) tensors transformers hands over as
strided views (no transpose copy), keeps fp32 as fp32, and runs:
  - no padding: one flashc call, causal bottom-right aligned (which is what a KV cache needs);
  - a padding mask: the padded batch is unpadded into varlen form, attended, and padded back
    (queries are the last seqlen_q mask positions, so left and right padding both work);
  - packed sequences (cu_seq_lens_* kwargs, or position_ids that restart at 0): varlen directly.
Dropout > 0 and attention sinks (s_aux) raise NotImplementedError.
"""
import torch

from . import _torch
from .flash_attn import bert_padding


def padding_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=None,
                 attention_mask=None, **kwargs):
    """The mask flashc's attention takes: the 2-D (batch, kv_len) padding mask, or None if no token
    is padded (the causal pattern itself is applied by the kernel)."""
    if attention_mask is None:
        return None
    attention_mask = attention_mask[:, -kv_length:]
    if attention_mask.shape[1] == kv_length and bool(attention_mask.all()):
        return None
    return attention_mask


def _packed_offsets(position_ids, total):
    """int32 offsets of the sequences packed in one row, from position ids that restart at 0, or
    None if the row holds one sequence."""
    pos = position_ids.reshape(-1)
    if pos.numel() != total or pos.numel() < 2:
        return None
    if not bool((pos[1:] - pos[:-1] != 1).any()):
        return None
    starts = torch.nonzero(pos == 0, as_tuple=False).flatten()
    if starts.numel() == 0 or int(starts[0]) != 0:
        return None
    end = torch.tensor([total], device=pos.device, dtype=starts.dtype)
    return torch.cat((starts, end)).to(torch.int32)


def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
                      softcap=None, is_causal=None, s_aux=None, **kwargs):
    """transformers' attention-function contract: query (B, H, Sq, D), key / value (B, H_kv, Sk, D);
    returns (attn_output (B, Sq, H, D), None)."""
    if dropout:
        raise NotImplementedError(f"flashc: attention dropout = {dropout} is not supported; use model.eval() or "
                                  "set the config's attention_dropout to 0")
    if s_aux is not None:
        raise NotImplementedError("flashc: attention sinks (s_aux) are not supported")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)  # views, read in place
    B, Sq, H, D = q.shape
    Hkv = k.shape[2]
    dv = v.shape[-1]
    if dv < D:  # e.g. MLA: v has a smaller head dim; zero columns leave the output unchanged
        v = torch.nn.functional.pad(v, [0, D - dv])
    elif dv > D:  # zero columns in q and k leave the scores unchanged (the scale stays q's head dim's)
        scaling = scaling if scaling is not None else D ** -0.5
        q, k = torch.nn.functional.pad(q, [0, dv - D]), torch.nn.functional.pad(k, [0, dv - D])
        D = dv
    window = (sliding_window - 1, sliding_window - 1) if sliding_window else (-1, -1)
    opt = dict(causal=causal, scale=scaling, softcap=softcap or 0.0, window=window)

    if attention_mask is not None:
        if attention_mask.dim() != 2:
            raise NotImplementedError("flashc: only 2-D padding masks are supported (got a "
                                      f"{attention_mask.dim()}-D mask); custom 4-D masks need eager or sdpa")
        mask = attention_mask.to(torch.bool)
        L = mask.shape[1]
        k, v = k[:, :L], v[:, :L]  # a static cache holds unused slots past the mask
        k_u, idx_k, cu_k, max_k, _ = bert_padding.unpad_input(k, mask)
        v_u = bert_padding.index_first_axis(v.reshape(B * L, Hkv, v.shape[-1]), idx_k)
        q_u, idx_q, cu_q, max_q, _ = bert_padding.unpad_input(q, mask[:, L - Sq:])
        out = _torch.attention(q_u, k_u, v_u, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max_q,
                               max_seqlen_k=max_k, **opt)
        out = bert_padding.pad_input(out, idx_q, B, Sq)
    else:
        cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
        if cu_q is None and B == 1 and kwargs.get("position_ids") is not None and k.shape[1] == Sq:
            cu_q = cu_k = _packed_offsets(kwargs["position_ids"], Sq)
        if cu_q is not None and cu_k is not None:
            out = _torch.attention(q.reshape(-1, H, D), k.reshape(-1, Hkv, D), v.reshape(-1, Hkv, v.shape[-1]),
                                   cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=kwargs.get("max_length_q"),
                                   max_seqlen_k=kwargs.get("max_length_k"), **opt)
            out = out.view(B, Sq, H, -1)
        else:
            out = _torch.attention(q, k, v, **opt)
    if out.shape[-1] != dv:
        out = out[..., :dv]
    return out, None


def _point_flash_loader_at_flashc(name):
    """transformers preloads flash kernels for any implementation named *flash*; resolve this name to
    flashc.flash_attn instead of a hub kernel (no-op on versions without that loader)."""
    try:
        from transformers import modeling_flash_attention_utils as mfu
    except ImportError:
        return
    orig = getattr(mfu, "_lazy_imports", None)
    if orig is None:
        return
    names = getattr(orig, "_flashc_names", None)
    if names is not None:
        names.add(name)
        return

    def _lazy_imports(implementation, *args, **kwargs):
        if implementation in _lazy_imports._flashc_names:
            from .flash_attn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache
            from .flash_attn.bert_padding import pad_input, unpad_input

            return flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache, pad_input, unpad_input
        return orig(implementation, *args, **kwargs)

    _lazy_imports._flashc_names = {name}
    mfu._lazy_imports = _lazy_imports


def register(name="flashc"):
    """Register flashc under `name` with transformers' attention and attention-mask interfaces."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, padding_mask)
    _point_flash_loader_at_flashc(name)
    return name
