"""The `gpt` example's model and training step in PyTorch, for comparing
time per step and peak memory (`/usr/bin/time -v`) with
`cargo run --release --example gpt`: a character-level GPT on the same
text (README.md and docs/*.md), 2 pre-LayerNorm causal blocks of width 128
with 4 heads and a GELU MLP of 512, learned positions, a final LayerNorm,
the output tied to the token embedding, windows of 64 characters, 16 per
batch, AdamW (weight decay 0.01, learning rate 1e-3 after a linear
warm-up) on gradients clipped to global norm 1.

    python3 scripts/gpt_torch.py [--steps N] [--compile] [--layers N]
        [--width N] [--heads N] [--context N] [--batch N]

The shape options mean what the `gpt` example's options of the same names
mean (the feed-forward is 4 x width), so other model shapes compare too.

Prints the loss every 50 steps and the median time per step. Not a test:
the numbers go in notes beside gradtape's."""
import argparse
import glob
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        heads = lambda z: z.view(b, t, self.h, d // self.h).transpose(1, 2)
        a = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, d=128, h=4, layers=2, context=64):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d)
        self.positions = nn.Embedding(context, d)
        nn.init.normal_(self.tokens.weight, std=0.02)
        nn.init.normal_(self.positions.weight, std=0.02)
        self.blocks = nn.ModuleList([Block(d, h) for _ in range(layers)])
        self.norm = nn.LayerNorm(d)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x) @ self.tokens.weight.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count())
    paths = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    text = "".join(open(p, encoding="utf-8").read() for p in paths)
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    train = data[: int(0.9 * len(data))]
    model = Gpt(len(chars), d=args.width, h=args.heads, layers=args.layers, context=args.context)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    warmup = 50

    def step(x, y):
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    if args.compile:
        step = torch.compile(step)
    g = torch.Generator().manual_seed(0)
    times = []
    for i in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = 1e-3 * min(1.0, (i + 1) / warmup)
        t = args.context
        starts = torch.randint(0, len(train) - t - 1, (args.batch,), generator=g)
        x = torch.stack([train[s : s + t] for s in starts])
        y = torch.stack([train[s + 1 : s + t + 1] for s in starts])
        t0 = time.perf_counter()
        loss = step(x, y).item()
        times.append(time.perf_counter() - t0)
        if i % 50 == 0 or i == args.steps - 1:
            print(f"step {i}: loss {loss:.3f}")
    times = sorted(times[min(5, len(times) - 1) :])
    print(f"{len(chars)} characters; median step {1e3 * times[len(times) // 2]:.1f} ms")


if __name__ == "__main__":
    main()
