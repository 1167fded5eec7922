"""The `gpt` example's model and training step in TensorFlow, the whole
step (forward, loss, GradientTape gradients, clipping to global norm 1,
the AdamW update) one `tf.function(jit_compile=False)` (a graph run by
TensorFlow's executor, as the project's tf-function peer runs
transformer_step in ../shared/bench/peers/tf_eager.py), for comparing time
per step with `cargo run --release --example gpt` and
`scripts/gpt_torch.py`: the same character-level GPT on the same text
(README.md and docs/*.md), 2 pre-LayerNorm causal blocks of width 128 with
4 heads and a GELU MLP of 512, learned positions, a final LayerNorm, the
output tied to the token embedding, windows of 64 characters, 16 per
batch, AdamW (weight decay 0.01 on every weight as torch.optim.AdamW
applies it, learning rate 1e-3 after a linear warm-up of 50 steps) on
gradients clipped to global norm 1 (as torch.nn.utils.clip_grad_norm_
does: a factor 1 / (norm + 1e-6) when below 1).

    python3 scripts/gpt_tf.py [--steps N] [--layers N] [--width N]
        [--heads N] [--context N] [--batch N] [--llama] [--eager] [--vocab N]

`--vocab N` tokenizes as the example's `--vocab N` does (the characters
plus the most frequent words, padded with unused ids: `gpt_tokens.py`,
a port of its `corpus.rs`), on the example's text (docs/*.md then
README.md); without it the tokens are the characters.

The options mean what gpt_torch.py's mean (the feed-forward is 4 x width);
`--llama` builds Llama's blocks as gpt_torch.py does (RMS norms, epsilon
1e-5; half-split rotary positions, max wavelength 10000; half as many
key/value heads as query heads when the heads are even, each group of
query heads against its key/value head without copying them; SwiGLU of 4
x width; no biases; a final RMS norm). TensorFlow has no fused causal
attention on the CPU: the scores are a masked matmul and softmax, as the
peers' transformer_step writes them. AdamW is written out with torch's
formulas (Keras' AdamW would add its own bookkeeping; the update is the
same). `--eager` runs the step op by op under the tape instead (TF eager).

Weights are drawn like torch's defaults (linear layers uniform in
+-1/sqrt(fan in), embeddings normal with std 0.02, norms at 1 and 0) from
numpy's generator, so the values differ from torch's but not the shapes:
the weight count printed equals the `gpt` example's and gpt_torch.py's.
Batches are drawn from numpy's generator (seed 0) outside the timed call.
Times the call until the loss is on the host (its first 5 steps, tracing
included, left out); prints the loss at step 0, every 50 steps and at the
last, and the median time per step. TensorFlow's thread pools are left at
their defaults (every core, 2 here), as the project's peers do. Not a test:
the numbers go in notes beside gradtape's."""
import argparse
import math
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_tokens  # noqa: E402  (the example's tokenizer, ported)


class Params:
    """The model's variables, in order of creation, by name."""

    def __init__(self, rng):
        self.rng, self.vars = rng, {}

    def add(self, name, value):
        self.vars[name] = tf.Variable(value.astype(np.float32), name=name.replace("/", "_"))
        return self.vars[name]

    def linear(self, name, fan_in, fan_out, bias=True):
        """torch.nn.Linear's default draw: uniform in +-1/sqrt(fan_in), stored [in, out]."""
        bound = 1.0 / math.sqrt(fan_in)
        w = self.add(name + "/w", self.rng.uniform(-bound, bound, (fan_in, fan_out)))
        b = self.add(name + "/b", self.rng.uniform(-bound, bound, fan_out)) if bias else None
        return w, b


def dense(wb, x):
    w, b = wb
    y = tf.matmul(x, w)
    return y + b if b is not None else y


def layer_norm(gb, x, eps=1e-5):
    mean, var = tf.nn.moments(x, [-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + eps) * gb[0] + gb[1]


def rms_norm(g, x, eps=1e-5):
    return x * tf.math.rsqrt(tf.reduce_mean(tf.square(x), -1, keepdims=True) + eps) * g


def rotary_tables(t, hd):
    """cos and sin of the half-split rotary angles, [t, hd] (as gpt_torch.py)."""
    inv = 10000.0 ** (-np.arange(0, hd // 2, dtype=np.float64) * 2 / hd)
    ang = np.arange(t, dtype=np.float64)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], axis=-1)
    return tf.constant(np.cos(ang).astype(np.float32)), tf.constant(np.sin(ang).astype(np.float32))


def rotate(x, cos, sin):
    """x [b, n, t, hd] rotated at its positions (cos, sin [t, hd])."""
    x1, x2 = tf.split(x, 2, axis=-1)
    return x * cos + tf.concat([-x2, x1], axis=-1) * sin


def attention(q, k, v, group, mask):
    """Causal attention of q [b, kv * group, t, hd] on k, v [b, kv, t, hd]:
    query head i reads key/value head i // group (torch's enable_gqa), each
    group's queries stacked as rows of one product per key/value head."""
    b, h, t, hd = q.shape
    kv = h // group
    q = tf.reshape(q, [b, kv, group * t, hd])
    s = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(hd)) + mask
    a = tf.matmul(tf.nn.softmax(s), v)  # [b, kv, group * t, hd]
    return tf.reshape(tf.transpose(tf.reshape(a, [b, h, t, hd]), [0, 2, 1, 3]), [b, t, h * hd])


class Gpt:
    def __init__(self, rng, vocab, d, h, layers, context, llama):
        self.h, self.llama = h, llama
        self.kv = h // 2 if llama and h % 2 == 0 else h
        hd = d // h
        p = Params(rng)
        self.tokens = p.add("tokens", rng.normal(0, 0.02, (vocab, d)))
        ones, zeros = np.ones(d), np.zeros(d)
        self.blocks = []
        if llama:
            for i in range(layers):
                n = f"block_{i}/"
                self.blocks.append({"n1": p.add(n + "n1", ones), "q": p.linear(n + "q", d, d, False),
                                    "k": p.linear(n + "k", d, self.kv * hd, False),
                                    "v": p.linear(n + "v", d, self.kv * hd, False),
                                    "o": p.linear(n + "o", d, d, False), "n2": p.add(n + "n2", ones),
                                    "gate": p.linear(n + "gate", d, 4 * d, False),
                                    "up": p.linear(n + "up", d, 4 * d, False),
                                    "down": p.linear(n + "down", 4 * d, d, False)})
            self.norm = p.add("norm/g", ones)
            self.cos, self.sin = rotary_tables(context, hd)
        else:
            self.positions = p.add("positions", rng.normal(0, 0.02, (context, d)))
            for i in range(layers):
                n = f"block_{i}/"
                self.blocks.append({"ln1": (p.add(n + "ln1/g", ones), p.add(n + "ln1/b", zeros)),
                                    "qkv": p.linear(n + "qkv", d, 3 * d), "proj": p.linear(n + "proj", d, d),
                                    "ln2": (p.add(n + "ln2/g", ones), p.add(n + "ln2/b", zeros)),
                                    "fc": p.linear(n + "fc", d, 4 * d), "out": p.linear(n + "out", 4 * d, d)})
            self.norm = (p.add("norm/g", ones), p.add("norm/b", zeros))
        self.vars = list(p.vars.values())
        # -1e9 above the diagonal, one row block per query head of a group
        group = h // self.kv
        self.mask = tf.constant(np.tile(np.triu(np.full([context, context], -1e9, np.float32), 1), [group, 1]))

    def block(self, p, x):
        b, t, d = x.shape
        heads = lambda z: tf.transpose(tf.reshape(z, [b, t, self.h, d // self.h]), [0, 2, 1, 3])  # noqa: E731
        q, k, v = tf.split(dense(p["qkv"], layer_norm(p["ln1"], x)), 3, axis=-1)
        x = x + dense(p["proj"], attention(heads(q), heads(k), heads(v), 1, self.mask))
        return x + dense(p["out"], tf.nn.gelu(dense(p["fc"], layer_norm(p["ln2"], x)), approximate=False))

    def llama_block(self, p, x):
        b, t, d = x.shape
        hd = d // self.h
        heads = lambda z, n: tf.transpose(tf.reshape(z, [b, t, n, hd]), [0, 2, 1, 3])  # noqa: E731
        y = rms_norm(p["n1"], x)
        q = rotate(heads(dense(p["q"], y), self.h), self.cos, self.sin)
        k = rotate(heads(dense(p["k"], y), self.kv), self.cos, self.sin)
        v = heads(dense(p["v"], y), self.kv)
        x = x + dense(p["o"], attention(q, k, v, self.h // self.kv, self.mask))
        y = rms_norm(p["n2"], x)
        return x + dense(p["down"], tf.nn.silu(dense(p["gate"], y)) * dense(p["up"], y))

    def logits(self, ids):
        x = tf.gather(self.tokens, ids)
        if self.llama:
            for blk in self.blocks:
                x = self.llama_block(blk, x)
            return tf.matmul(rms_norm(self.norm, x), self.tokens, transpose_b=True)
        x = x + self.positions[: ids.shape[1]]
        for blk in self.blocks:
            x = self.block(blk, x)
        return tf.matmul(layer_norm(self.norm, x), self.tokens, transpose_b=True)


def make_step(model, eager, wd=0.01, b1=0.9, b2=0.999, eps=1e-8, clip=1.0):
    vs = model.vars
    m = [tf.Variable(tf.zeros_like(v)) for v in vs]
    s = [tf.Variable(tf.zeros_like(v)) for v in vs]

    def step(x, y, count, lr):
        with tf.GradientTape() as tape:
            z = model.logits(x)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                tf.reshape(y, [-1]), tf.reshape(z, [-1, z.shape[-1]])))
        # the token table's gradient sums a gather's IndexedSlices and the output product's dense
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, vs)]
        norm = tf.linalg.global_norm(grads)
        scale = tf.minimum(1.0, clip / (norm + 1e-6))
        bc1, bc2 = 1 - b1 ** count, 1 - b2 ** count
        for v, mv, sv, g in zip(vs, m, s, grads):
            g = g * scale
            mv.assign(b1 * mv + (1 - b1) * g)
            sv.assign(b2 * sv + (1 - b2) * g * g)
            v.assign(v * (1 - lr * wd) - (lr / bc1) * mv / (tf.sqrt(sv) / tf.sqrt(bc2) + eps))
        return loss

    return step if eager else tf.function(step, jit_compile=False)


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
    ap.add_argument("--eager", action="store_true")
    args = ap.parse_args()
    tok, train = gpt_tokens.corpus(args.vocab)
    train = np.array(train, dtype=np.int32)
    rng = np.random.default_rng(0)
    model = Gpt(rng, tok.size, args.width, args.heads, args.layers, args.context, args.llama)
    print(f"{sum(int(np.prod(v.shape)) for v in model.vars)} weights")
    step = make_step(model, args.eager)
    warmup = 50
    times = []
    for i in range(args.steps):
        t = args.context
        starts = rng.integers(0, len(train) - t - 1, args.batch)
        x = tf.constant(np.stack([train[s : s + t] for s in starts]))
        y = tf.constant(np.stack([train[s + 1 : s + t + 1] for s in starts]))
        lr = tf.constant(1e-3 * min(1.0, (i + 1) / warmup), tf.float32)
        n = tf.constant(i + 1, tf.float32)
        t0 = time.perf_counter()
        loss = float(step(x, y, n, lr))
        times.append(time.perf_counter() - t0)
        if i % 50 == 0 or i == args.steps - 1:
            print(f"step {i}: loss {loss:.3f}")
    times = sorted(times[min(5, len(times) - 1) :])
    print(f"vocabulary {tok.size} ({len(tok.chars)} characters, {len(tok.words)} words, {tok.unused()} unused); median step {1e3 * times[len(times) // 2]:.1f} ms")


if __name__ == "__main__":
    main()
