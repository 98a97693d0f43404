"""train_compare.py -- a 2-layer transformer trained 50 steps with flash-attn's API on flashc, beside
the same model on PyTorch SDPA, from the same initial weights on the same batches.

    python3 python/tools/train_compare.py [--steps 50] [--device cuda] [--dtype bf16]

"Within noise" is measured, not assumed: the same training also runs on two SDPA backends (FLASH,
the FlashAttention-2 port, and EFFICIENT on the GPU, MATH on the CPU), whose disagreement is the noise
floor of bf16 training. Prints the three loss curves and passes when max |flashc - sdpa| over the
run is at most 2x max |sdpa_a - sdpa_b| (plus 1e-3 for early, near-identical steps).
"""
import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from flashc.flash_attn import flash_attn_func  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.o = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x, attn):
        B, S, C = x.shape
        q, k, v = self.qkv(self.n1(x)).view(B, S, 3, self.heads, C // self.heads).unbind(2)
        x = x + self.o(attn(q, k, v).reshape(B, S, C))
        return x + self.mlp(self.n2(x))


class Model(torch.nn.Module):
    def __init__(self, vocab=512, dim=512, heads=8, layers=2, seq=256):
        super().__init__()
        self.emb, self.pos = torch.nn.Embedding(vocab, dim), torch.nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, ids, attn):
        x = self.emb(ids) + self.pos[: ids.shape[1]]
        for b in self.blocks:
            x = b(x, attn)
        return self.head(x)


def flashc_attn(q, k, v):
    return flash_attn_func(q, k, v, causal=True)


def sdpa_attn(backend):
    from torch.nn.attention import sdpa_kernel

    def attn(q, k, v):  # SDPA takes (B, H, S, D); Sq == Sk so its top-left causal equals ours
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  is_causal=True).transpose(1, 2)
    return attn


def train(attn, init, batches, dev, dtype, steps):
    model = Model().to(dev)
    model.load_state_dict(init)
    model.to(dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for ids in batches[:steps]:
        logits = model(ids[:, :-1], attn)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bf16")
    a = ap.parse_args()
    from torch.nn.attention import SDPBackend

    dev, dtype = a.device, {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    torch.manual_seed(0)
    init = Model().state_dict()
    # a learnable stream: each token is a fixed function of the previous two, plus noise
    g = torch.Generator().manual_seed(1)
    table = torch.randint(0, 512, (512, 512), generator=g)
    batches = []
    for _ in range(a.steps):
        ids = torch.empty(8, 257, dtype=torch.long)
        ids[:, :2] = torch.randint(0, 512, (8, 2), generator=g)
        for t in range(2, 257):
            ids[:, t] = table[ids[:, t - 1], ids[:, t - 2]]
        noise = torch.rand(8, 257, generator=g) < 0.1
        ids[noise] = torch.randint(0, 512, (int(noise.sum()),), generator=g)
        batches.append(ids.to(dev))
    other = SDPBackend.EFFICIENT_ATTENTION if dev == "cuda" else SDPBackend.MATH
    base = SDPBackend.FLASH_ATTENTION
    curves = {"flashc (flash_attn_func)": train(flashc_attn, init, batches, dev, dtype, a.steps),
              f"sdpa {base.name}": train(sdpa_attn(base), init, batches, dev, dtype, a.steps),
              f"sdpa {other.name}": train(sdpa_attn(other), init, batches, dev, dtype, a.steps)}
    names = list(curves)
    print(f"device {dev} ({torch.cuda.get_device_name() if dev == 'cuda' else 'cpu'}), {a.dtype}, 2 layers, "
          f"dim 512, 8 heads, seq 256, batch 8, AdamW 1e-3")
    print("step " + "".join(f"{n:>26s}" for n in names))
    for i in range(a.steps):
        if i % 5 == 0 or i == a.steps - 1:
            print(f"{i:4d} " + "".join(f"{curves[n][i]:26.5f}" for n in names))
    d_fc = max(abs(x - y) for x, y in zip(curves[names[0]], curves[names[1]]))
    d_noise = max(abs(x - y) for x, y in zip(curves[names[1]], curves[names[2]]))
    ok = d_fc <= 2 * d_noise + 1e-3
    print(f"max |flashc - {names[1]}| = {d_fc:.5f}; noise: max |{names[1]} - {names[2]}| = {d_noise:.5f}; "
          f"loss {curves[names[0]][0]:.3f} -> {curves[names[0]][-1]:.3f}: {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
