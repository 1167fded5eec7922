"""The `gpt` example's model and training step in JAX, the whole step
(forward, loss, gradients, clipping to global norm 1, the AdamW update)
one `jax.jit`, for comparing time per step with
`cargo run --release --example gpt` and `scripts/gpt_torch.py`: the same
character-level GPT on the same text (README.md and docs/*.md), 2
pre-LayerNorm causal blocks of width 128 with 4 heads and a GELU MLP of
512, learned positions, a final LayerNorm, the output tied to the token
embedding, windows of 64 characters, 16 per batch, AdamW (weight decay
0.01 on every weight as torch.optim.AdamW applies it, learning rate 1e-3
after a linear warm-up of 50 steps) on gradients clipped to global norm 1
(as torch.nn.utils.clip_grad_norm_ does: a factor 1 / (norm + 1e-6) when
below 1).

    python3 scripts/gpt_jax.py [--steps N] [--layers N] [--width N]
        [--heads N] [--context N] [--batch N] [--llama] [--vocab N]

`--vocab N` tokenizes as the example's `--vocab N` does (the characters
plus the most frequent words, padded with unused ids: `gpt_tokens.py`,
a port of its `corpus.rs`), on the example's text (docs/*.md then
README.md); without it the tokens are the characters.

The options mean what gpt_torch.py's mean (the feed-forward is 4 x width);
`--llama` builds Llama's blocks as gpt_torch.py does (RMS norms, epsilon
1e-5; half-split rotary positions, max wavelength 10000; half as many
key/value heads as query heads when the heads are even; SwiGLU of 4 x
width; no biases; a final RMS norm). optax is not in the reference venv,
so AdamW is written out over the parameter tree (jax.tree_util), with
torch's formulas. The parameters, first and second moments are donated to
the step (updated in place), as a JAX training loop would.

Weights are drawn like torch's defaults (linear layers uniform in
+-1/sqrt(fan in), embeddings normal with std 0.02, norms at 1 and 0) from
numpy's generator, so the values differ from torch's but not the shapes:
the weight count printed equals the `gpt` example's and gpt_torch.py's.
Batches are drawn from numpy's generator (seed 0) outside the timed call.
Times the jitted call until the loss is on the host (its first 5 steps,
compiling included, left out); prints the loss at step 0, every 50 steps
and at the last, and the median time per step. XLA's CPU client uses every
core (2 here), as the project's peers in ../shared/bench/peers do. Not a
test: the numbers go in notes beside gradtape's."""
import argparse
import math
import os
import sys
import time

import numpy as np
import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_tokens  # noqa: E402  (the example's tokenizer, ported)


def linear(rng, fan_in, fan_out, bias=True):
    """torch.nn.Linear's default draw: uniform in +-1/sqrt(fan_in), stored [in, out]."""
    bound = 1.0 / math.sqrt(fan_in)
    p = {"w": jnp.asarray(rng.uniform(-bound, bound, (fan_in, fan_out)).astype(np.float32))}
    if bias:
        p["b"] = jnp.asarray(rng.uniform(-bound, bound, fan_out).astype(np.float32))
    return p


def dense(p, x):
    y = x @ p["w"]
    return y + p["b"] if "b" in p else y


def layer_norm(p, x, eps=1e-5):
    m = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - m), -1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(var + eps) * p["g"] + p["b"]


def rms_norm(p, x, eps=1e-5):
    return x * jax.lax.rsqrt(jnp.mean(jnp.square(x), -1, keepdims=True) + eps) * p["g"]


def rotary_tables(t, hd):
    """cos and sin of the half-split rotary angles, [t, hd] (as gpt_torch.py)."""
    inv = 10000.0 ** (-np.arange(0, hd // 2, dtype=np.float64) * 2 / hd)
    ang = np.arange(t, dtype=np.float64)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], axis=-1)
    return jnp.asarray(np.cos(ang).astype(np.float32)), jnp.asarray(np.sin(ang).astype(np.float32))


def rotate(x, cos, sin):
    """x [b, t, n, hd] rotated at its positions (cos, sin [t, hd])."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    return x * cos + jnp.concatenate([-x2, x1], axis=-1) * sin


def init(rng, vocab, d, h, layers, context, llama):
    ones, zeros = lambda n: jnp.ones(n, jnp.float32), lambda n: jnp.zeros(n, jnp.float32)
    p = {"tokens": jnp.asarray(rng.normal(0, 0.02, (vocab, d)).astype(np.float32)), "blocks": []}
    if llama:
        kv = h // 2 if h % 2 == 0 else h
        hd = d // h
        for _ in range(layers):
            p["blocks"].append({"n1": {"g": ones(d)}, "q": linear(rng, d, d, False),
                                "k": linear(rng, d, kv * hd, False), "v": linear(rng, d, kv * hd, False),
                                "o": linear(rng, d, d, False), "n2": {"g": ones(d)},
                                "gate": linear(rng, d, 4 * d, False), "up": linear(rng, d, 4 * d, False),
                                "down": linear(rng, 4 * d, d, False)})
        p["norm"] = {"g": ones(d)}
    else:
        p["positions"] = jnp.asarray(rng.normal(0, 0.02, (context, d)).astype(np.float32))
        for _ in range(layers):
            p["blocks"].append({"ln1": {"g": ones(d), "b": zeros(d)}, "qkv": linear(rng, d, 3 * d),
                                "proj": linear(rng, d, d), "ln2": {"g": ones(d), "b": zeros(d)},
                                "fc": linear(rng, d, 4 * d), "out": linear(rng, 4 * d, d)})
        p["norm"] = {"g": ones(d), "b": zeros(d)}
    return p


def block(p, x, h):
    b, t, d = x.shape
    q, k, v = jnp.split(dense(p["qkv"], layer_norm(p["ln1"], x)), 3, axis=-1)
    heads = lambda z: z.reshape(b, t, h, d // h)  # noqa: E731 ([b, t, n, hd], dot_product_attention's layout)
    a = jax.nn.dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
    x = x + dense(p["proj"], a.reshape(b, t, d))
    return x + dense(p["out"], jax.nn.gelu(dense(p["fc"], layer_norm(p["ln2"], x)), approximate=False))


def llama_block(p, x, h, cos, sin):
    b, t, d = x.shape
    hd = d // h
    kv = h // 2 if h % 2 == 0 else h
    y = rms_norm(p["n1"], x)
    q = rotate(dense(p["q"], y).reshape(b, t, h, hd), cos, sin)
    k = rotate(dense(p["k"], y).reshape(b, t, kv, hd), cos, sin)
    v = dense(p["v"], y).reshape(b, t, kv, hd)
    # (query head i reads key/value head i // (h / kv), as torch's enable_gqa)
    a = jax.nn.dot_product_attention(q, k, v, is_causal=True)
    x = x + dense(p["o"], a.reshape(b, t, d))
    y = rms_norm(p["n2"], x)
    return x + dense(p["down"], jax.nn.silu(dense(p["gate"], y)) * dense(p["up"], y))


def logits(p, ids, h, llama, tables):
    x = p["tokens"][ids]
    if llama:
        for blk in p["blocks"]:
            x = llama_block(blk, x, h, *tables)
        return rms_norm(p["norm"], x) @ p["tokens"].T
    x = x + p["positions"][: ids.shape[1]]
    for blk in p["blocks"]:
        x = block(blk, x, h)
    return layer_norm(p["norm"], x) @ p["tokens"].T


def make_step(h, llama, tables, wd=0.01, b1=0.9, b2=0.999, eps=1e-8, clip=1.0):
    def loss_fn(p, x, y):
        z = logits(p, x, h, llama, tables)
        z = z.reshape(-1, z.shape[-1])
        return jnp.mean(jax.nn.logsumexp(z, axis=-1) - jnp.take_along_axis(z, y.reshape(-1, 1), 1)[:, 0])

    def step(p, m, v, count, lr, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        leaves = jax.tree_util.tree_leaves(g)
        norm = jnp.sqrt(sum(jnp.sum(jnp.square(leaf)) for leaf in leaves))
        g = jax.tree_util.tree_map(lambda leaf: leaf * jnp.minimum(1.0, clip / (norm + 1e-6)), g)
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        bc1, bc2 = 1 - b1 ** count, 1 - b2 ** count
        p = jax.tree_util.tree_map(
            lambda p, m, v: p * (1 - lr * wd) - (lr / bc1) * m / (jnp.sqrt(v) / jnp.sqrt(bc2) + eps), p, m, v)
        return p, m, v, loss

    return jax.jit(step, donate_argnums=(0, 1, 2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--llama", action="store_true")
    ap.add_argument("--vocab", type=int, default=None)
    args = ap.parse_args()
    tok, train = gpt_tokens.corpus(args.vocab)
    train = np.array(train, dtype=np.int32)
    rng = np.random.default_rng(0)
    params = init(rng, tok.size, args.width, args.heads, args.layers, args.context, args.llama)
    count = sum(int(np.prod(leaf.shape)) for leaf in jax.tree_util.tree_leaves(params))
    print(f"{count} weights")
    tables = rotary_tables(args.context, args.width // args.heads) if args.llama else None
    step = make_step(args.heads, args.llama, tables)
    m = jax.tree_util.tree_map(jnp.zeros_like, params)
    v = jax.tree_util.tree_map(jnp.zeros_like, params)
    warmup = 50
    times = []
    for i in range(args.steps):
        t = args.context
        starts = rng.integers(0, len(train) - t - 1, args.batch)
        x = jnp.asarray(np.stack([train[s : s + t] for s in starts]))
        y = jnp.asarray(np.stack([train[s + 1 : s + t + 1] for s in starts]))
        lr = jnp.float32(1e-3 * min(1.0, (i + 1) / warmup))
        n = jnp.float32(i + 1)
        t0 = time.perf_counter()
        params, m, v, loss = step(params, m, v, n, lr, x, y)
        loss = float(loss)
        times.append(time.perf_counter() - t0)
        if i % 50 == 0 or i == args.steps - 1:
            print(f"step {i}: loss {loss:.3f}")
    times = sorted(times[min(5, len(times) - 1) :])
    print(f"vocabulary {tok.size} ({len(tok.chars)} characters, {len(tok.words)} words, {tok.unused()} unused); median step {1e3 * times[len(times) // 2]:.1f} ms")


if __name__ == "__main__":
    main()
