"""The `gpt` example's model and training step in PyTorch, for comparing
time per step and peak memory (`/usr/bin/time -v`) with
`cargo run --release --example gpt`: a character-level GPT on the same
text (README.md and docs/*.md), 2 pre-LayerNorm causal blocks of width 128
with 4 heads and a GELU MLP of 512, learned positions, a final LayerNorm,
the output tied to the token embedding, windows of 64 characters, 16 per
batch, AdamW (weight decay 0.01, learning rate 1e-3 after a linear
warm-up) on gradients clipped to global norm 1.

    python3 scripts/gpt_torch.py [--steps N] [--compile] [--layers N]
        [--width N] [--heads N] [--context N] [--batch N] [--llama] [--vocab N]

`--vocab N` tokenizes as the example's `--vocab N` does (the characters
plus the most frequent words, padded with unused ids: `gpt_tokens.py`,
a port of its `corpus.rs`), on the example's text (docs/*.md then
README.md); without it the tokens are the characters.

The shape options mean what the `gpt` example's options of the same names
mean (the feed-forward is 4 x width), so other model shapes compare too.
With `--llama`, Llama's blocks as the example's `--llama` builds them: RMS
norms (epsilon 1e-5), rotary positions (half-split, max wavelength 10000)
on the queries and keys instead of learned positions, half as many
key/value heads as query heads when the heads are even, a SwiGLU
feed-forward of 4 x width, no biases, a final RMS norm.

Prints the weight count, the loss every 50 steps and the median time per step. Not a test:
the numbers go in notes beside gradtape's."""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_tokens  # noqa: E402  (the example's tokenizer, ported)


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


def rotary_tables(t, hd):
    """cos and sin of the half-split rotary angles, [t, hd]."""
    inv = 10000.0 ** (-torch.arange(0, hd // 2, dtype=torch.float64) * 2 / hd)
    ang = torch.arange(t, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().float(), ang.sin().float()


def rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, d, h, context):
        super().__init__()
        self.h, self.kv = h, (h // 2 if h % 2 == 0 else h)
        hd = d // h
        self.n1 = nn.RMSNorm(d, eps=1e-5)
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, self.kv * hd, bias=False)
        self.v = nn.Linear(d, self.kv * hd, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.n2 = nn.RMSNorm(d, eps=1e-5)
        self.gate = nn.Linear(d, 4 * d, bias=False)
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)
        cos, sin = rotary_tables(context, hd)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.h
        y = self.n1(x)
        heads = lambda z, n: z.view(b, t, n, hd).transpose(1, 2)
        cos, sin = self.cos[:t], self.sin[:t]
        q = rotate(heads(self.q(y), self.h), cos, sin)
        k = rotate(heads(self.k(y), self.kv), cos, sin)
        v = heads(self.v(y), self.kv)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.h)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        y = self.n2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Gpt(nn.Module):
    def __init__(self, vocab, d=128, h=4, layers=2, context=64, llama=False):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d)
        nn.init.normal_(self.tokens.weight, std=0.02)
        self.positions = None
        if llama:
            self.blocks = nn.ModuleList([LlamaBlock(d, h, context) for _ in range(layers)])
            self.norm = nn.RMSNorm(d, eps=1e-5)
        else:
            self.positions = nn.Embedding(context, d)
            nn.init.normal_(self.positions.weight, std=0.02)
            self.blocks = nn.ModuleList([Block(d, h) for _ in range(layers)])
            self.norm = nn.LayerNorm(d)

    def forward(self, ids):
        x = self.tokens(ids)
        if self.positions is not None:
            x = x + self.positions(torch.arange(ids.shape[1]))
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
    ap.add_argument("--llama", action="store_true")
    ap.add_argument("--vocab", type=int, default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count())
    tok, train = gpt_tokens.corpus(args.vocab)
    train = torch.tensor(train, dtype=torch.long)
    model = Gpt(tok.size, d=args.width, h=args.heads, layers=args.layers, context=args.context, llama=args.llama)
    print(f"{sum(p.numel() for p in model.parameters())} weights")
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
    print(f"vocabulary {tok.size} ({len(tok.chars)} characters, {len(tok.words)} words, {tok.unused()} unused); median step {1e3 * times[len(times) // 2]:.1f} ms")


if __name__ == "__main__":
    main()
