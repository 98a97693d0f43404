"""flashc.transformers: attn_implementation="flashc" in Hugging Face Transformers.

Small Llama- and Qwen2-architecture models with random weights (nothing downloaded). flashc and
eager run the same weights; both are judged against eager in fp64 by DESIGN.md section 2's rule
(flashc's max error <= 2x eager's in the same precision for logits, 3x for gradients, plus
1e-5 (1 + max|ref|)), on valid (non-padding) positions. Also generate() with a KV cache (dynamic and
static) on left-padded batches, and packed sequences. CPU in fp32; on a GPU also bf16.
"""
import copy
import types

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import flashc.transformers  # noqa: E402
from conftest import cuda_ready  # noqa: E402
from flashc import _torch as ft  # noqa: E402

flashc.transformers.register()

DEVICES = [("cpu", torch.float32)] + ([("cuda", torch.bfloat16)] if cuda_ready()[0] else [])


def config(arch):
    # head_dim 64: a size the CUDA kernels have (the CPU takes any); GQA 4 / 2
    common = dict(vocab_size=96, hidden_size=256, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.1)
    if arch == "llama":
        return transformers.LlamaConfig(**common)
    return transformers.Qwen2Config(**common)


def models(arch, dev, dtype):
    """flashc, eager (same precision) and eager fp64 copies of one randomly initialised model."""
    cfg = config(arch)
    fc = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="flashc")
    eager = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="eager")
    eager.load_state_dict(fc.state_dict())
    ref = copy.deepcopy(eager).to(dev, torch.float64)
    assert fc.config._attn_implementation == "flashc"
    return fc.to(dev, dtype), eager.to(dev, dtype), ref


def batch(dev, B=3, S=14, pad="right"):
    ids = torch.randint(0, 96, (B, S), device=dev)
    mask = torch.ones(B, S, dtype=torch.long, device=dev)
    if pad == "right":
        mask[1, 9:] = 0
        mask[2, 4:] = 0
    elif pad == "left":
        mask[1, :5] = 0
        mask[2, :10] = 0
    return ids, mask


def err(x, r, sel=None):
    d = (x.double() - r).abs()
    return float(d[sel].max() if sel is not None else d.max())


def judge(name, got, eager, ref, factor, sel=None):
    e, en = err(got, ref, sel), err(eager, ref, sel)
    bound = factor * en + 1e-5 * (1 + float(ref.abs().max()))
    assert e <= bound, f"{name}: flashc err {e:.3g} > {factor} x eager err {en:.3g} + slack = {bound:.3g}"


class CallCounter:
    def __init__(self, monkeypatch):
        self.n = 0
        orig = ft.fwd_impl

        def counted(*a):
            self.n += 1
            return orig(*a)

        monkeypatch.setattr(ft, "fwd_impl", counted)


def positions(mask):
    """Position ids counting valid tokens only, as generate() makes them: a padded sequence then
    sees exactly what it would see alone."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def ref_per_sequence(ref, ids, mask, w=None):
    """fp64 eager logits of each sequence run alone, unpadded (zeros at padding); with w, also
    backpropagates sum(logits * w) over the valid positions into ref's gradients."""
    out = torch.zeros(*ids.shape, ref.config.vocab_size, dtype=torch.float64, device=ids.device)
    for b in range(ids.shape[0]):
        v = mask[b].bool()
        logits = ref(ids[b, v][None]).logits[0]
        out[b, v] = logits.detach()
        if w is not None:
            (logits * w[b, v]).sum().backward()
    return out


@pytest.mark.parametrize("dev,dtype", DEVICES)
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("pad", ["none", "right", "left"])
def test_logits_and_gradients_match_eager(arch, dev, dtype, pad, monkeypatch):
    fc, eager, ref = models(arch, dev, dtype)
    ids, mask = batch(dev, pad=pad)
    kw = {} if pad == "none" else {"attention_mask": mask, "position_ids": positions(mask)}
    calls = CallCounter(monkeypatch)
    valid = mask.bool()
    w = torch.randn(*ids.shape, 96, device=dev, dtype=torch.float64) * valid[..., None]
    outs = []
    for m in (fc, eager):
        m.zero_grad()
        logits = m(ids, **kw).logits
        (logits.double() * w).sum().backward()
        outs.append((logits.detach(), {n: p.grad.detach() for n, p in m.named_parameters()}))
    assert calls.n == 2  # one flashc call per layer: flashc really ran
    ref.zero_grad()
    r_logits = ref_per_sequence(ref, ids, mask, w)
    r_grads = {n: p.grad for n, p in ref.named_parameters()}
    judge("logits", outs[0][0], outs[1][0], r_logits, 2.0, valid)
    for n in r_grads:
        judge(f"grad {n}", outs[0][1][n], outs[1][1][n], r_grads[n], 3.0)


def first_divergence(a, b):
    """(row, position) of the earliest position at which any row of a and b differ, or None. (The
    first entry of nonzero() is the first diverging row's, which may diverge later than another:
    the steps after the other's divergence then compare scores of different prefixes.)"""
    diff = (a != b).nonzero()
    if diff.numel() == 0:
        return None
    return diff[int(diff[:, 1].argmin())].tolist()


@pytest.mark.parametrize("dev,dtype", DEVICES)
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_generate_with_kv_cache_and_left_padding(arch, dev, dtype, cache, monkeypatch):
    fc, eager, ref = models(arch, dev, dtype)
    ids, mask = batch(dev, pad="left")
    gen = dict(attention_mask=mask, max_new_tokens=8, do_sample=False, output_scores=True,
               return_dict_in_generate=True, pad_token_id=0)
    calls = CallCounter(monkeypatch)
    r_fc = fc.generate(ids, cache_implementation=cache if cache == "static" else None, **gen)
    assert calls.n >= 2 * 8  # prefill and every decode step went through flashc
    r_eager = eager.generate(ids, **gen)
    seq_fc, seq_e = r_fc.sequences, r_eager.sequences
    d = first_divergence(seq_fc, seq_e)
    steps = len(r_fc.scores) if d is None else d[1] - ids.shape[1]
    # scores of the steps both took on the same prefix, judged against fp64 eager on that prefix
    for t in range(min(steps + 1, len(r_fc.scores))):
        prefix = seq_e[:, : ids.shape[1] + t]
        m = torch.cat((mask, torch.ones(mask.shape[0], t, dtype=mask.dtype, device=dev)), 1)
        with torch.no_grad():
            r = ref_per_sequence(ref, prefix, m)[:, -1]
        judge(f"step {t} scores", r_fc.scores[t], r_eager.scores[t], r, 2.0)
    if d is not None:  # allowed only where greedy decoding met a tie within the two runs' disagreement
        top2 = r_eager.scores[steps][d[0]].double().topk(2).values
        disagreement = float((r_fc.scores[steps][d[0]].double() - r_eager.scores[steps][d[0]].double()).abs().max())
        assert float(top2[0] - top2[1]) <= 2 * disagreement + 1e-4, f"generate diverged at {d} without a near-tie"


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_packed_sequences_by_position_ids(arch, monkeypatch):
    fc, eager, ref = models(arch, "cpu", torch.float32)
    lens = [5, 7, 4]
    ids = torch.randint(0, 96, (1, sum(lens)))
    pos = torch.cat([torch.arange(n) for n in lens])[None]
    calls = CallCounter(monkeypatch)
    with torch.no_grad():
        outs = [m(ids, position_ids=pos, use_cache=False).logits for m in (fc, eager, ref)]
    assert calls.n == 2
    judge("packed logits", outs[0], outs[1], outs[2], 2.0)


def test_dropout_is_refused():
    cfg = config("llama")
    cfg.attention_dropout = 0.1
    m = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="flashc").train()
    with pytest.raises(NotImplementedError, match="dropout"):
        m(torch.randint(0, 96, (1, 5)))


@pytest.mark.parametrize("dv", [8, 32])
def test_value_head_dim_unlike_the_query_head_dim(dv):
    # v narrower than q, k (MLA) is padded with zero columns; wider, q and k are (the scale stays q's)
    from flashc.transformers import attention_forward

    q, k, v = torch.randn(2, 4, 5, 16), torch.randn(2, 2, 5, 16), torch.randn(2, 2, 5, dv)
    out, _ = attention_forward(types.SimpleNamespace(is_causal=True), q, k, v, None)
    want = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                                            is_causal=True).transpose(1, 2)
    assert out.shape == want.shape and torch.allclose(out, want, atol=1e-5)
