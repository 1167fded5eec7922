"""Reference values for tests/nn/attention_masks.rs: Keras 3.15.1
(TensorFlow 2.21 backend) `MultiHeadAttention` with the masks it derives
from its inputs (the query's and value's Keras masks, an explicit
`key_mask`), its `sliding_window` and its `use_gate`, with fixed weights;
gradients of the gated layer from `tf.GradientTape`.

Run: /work/refvenv/bin/python keras_attention_masks.py > keras_attention_masks.rs
Every weight and input is given by the formula
    fill(shape, k)[i] = 0.5 * sin(0.7 * i + k)     (row-major i)
"""
import os
os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
import keras
from keras import layers
from keras.src import backend
from keras_refs import fill, show


def mha(heads, key_dim, value_dim, out, dq, dk, dv, dtype, k0, **kw):
    """A built layer whose weights are fill(shape, k0 + j) in Keras's order."""
    m = layers.MultiHeadAttention(heads, key_dim, value_dim=value_dim, output_shape=out, dtype=dtype, **kw)
    q = np.zeros((1, 1, dq)); v = np.zeros((1, 1, dv)); k = np.zeros((1, 1, dk))
    m(q.astype(dtype), v.astype(dtype), key=k.astype(dtype))
    ws = [fill(w.shape, k0 + j).astype(dtype) for j, w in enumerate(m.weights)]
    m.set_weights(ws)
    if dtype == "float64":
        # Keras casts its Python-float scale through float32; an np.float64
        # keeps the exact scale (as tests/reference/transformer.py)
        m._inverse_sqrt_key_dim = np.float64(1.0 / np.sqrt(key_dim))
    return m, [w.path.split("/", 1)[1] for w in m.weights]


def masked(x, mask):
    """x as a tensor carrying `mask` as its Keras mask (what an
    `Embedding(mask_zero=True)` before it attaches)."""
    t = tf.constant(x)
    backend.set_keras_mask(t, tf.constant(mask))
    return t


def weighted(o):
    n = int(np.prod(o.shape))
    return tf.reduce_sum(tf.reshape(o, [-1]) * tf.cast(tf.sin(0.1 * tf.range(n, dtype=tf.float64)), o.dtype))


print("//! Keras 3.15.1 (TensorFlow 2.21) outputs printed by")
print("//! `keras_attention_masks.py` beside this file; used by")
print("//! `tests/nn/attention_masks.rs`.")
print("#![allow(clippy::excessive_precision, clippy::unreadable_literal, dead_code)]")

# padding of a batch of 2 sequences of 5: the first has 3 tokens
pad = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)

# 1. self-attention (2 heads of 3 on 6 features) over a padded batch: the
# query's mask hides the padded queries' rows, the value's its keys
for dt, sfx in [("float64", "f64"), ("float32", "f32")]:
    m, _ = mha(2, 3, None, None, 6, 6, 6, dt, 1.0)
    x = fill((2, 5, 6), 0.3).astype(dt)
    show("self_padded_" + sfx, m(masked(x, pad), masked(x, pad)))
    show("self_padded_causal_" + sfx, m(masked(x, pad), masked(x, pad), use_causal_mask=True))
    # the value's mask alone (the query unmasked)
    show("self_value_mask_" + sfx, m(tf.constant(x), masked(x, pad)))

# 2. cross-attention: query [2, 3, 5], value [2, 6, 4], key [2, 6, 7], 3
# heads, key_dim 2, value_dim 3, output 4 (f64): value and key masks, then
# with an attention mask and causal too
vmask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=bool)
kmask = np.array([[1, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]], dtype=bool)
amask = (np.arange(2 * 3 * 6).reshape(2, 3, 6) * 7 % 5) != 1
qmask = np.array([[1, 1, 0], [1, 1, 1]], dtype=bool)
show("cross_vmask", vmask.astype(np.float64))
show("cross_kmask", kmask.astype(np.float64))
show("cross_amask", amask.astype(np.float64))
c, _ = mha(3, 2, 3, 4, 5, 7, 4, "float64", 10.0)
q = fill((2, 3, 5), 0.1)
v = fill((2, 6, 4), 0.2)
k = fill((2, 6, 7), 0.4)
show("cross_value_key", c(tf.constant(q), masked(v, vmask), key=tf.constant(k), key_mask=tf.constant(kmask)))
show("cross_all_causal", c(masked(q, qmask), masked(v, vmask), key=tf.constant(k), key_mask=tf.constant(kmask),
                           attention_mask=amask, use_causal_mask=True))

# 3. sliding windows (self-attention, 6 positions): a band of 2 alone; a
# band of 3 with the causal mask; a band of 2 with the padding masks (f64,
# and f32 for the first)
for w, causal in [(2, False), (3, True)]:
    for dt, sfx in [("float64", "f64"), ("float32", "f32")]:
        m, _ = mha(2, 3, None, None, 6, 6, 6, dt, 1.0, sliding_window=w)
        x = fill((2, 6, 6), 0.5).astype(dt)
        show(f"window_{w}_{'causal_' if causal else ''}{sfx}", m(x, x, use_causal_mask=causal))
m, _ = mha(2, 3, None, None, 6, 6, 6, "float64", 1.0, sliding_window=2)
x = fill((2, 5, 6), 0.3)
show("window_2_padded_f64", m(masked(x, pad), masked(x, pad)))

# 4. the gate (sigmoid of a projection of the query, times each head's
# output): self-attention causal, and cross-attention; f64 and f32
for dt, sfx in [("float64", "f64"), ("float32", "f32")]:
    g, paths = mha(2, 3, None, None, 6, 6, 6, dt, 2.0, use_gate=True)
    x = fill((2, 4, 6), 0.3).astype(dt)
    show("gate_causal_" + sfx, g(x, x, use_causal_mask=True))
print("// the gated layer's weights in Keras's order: " + ", ".join(paths))
gc, _ = mha(3, 2, 3, 4, 5, 7, 4, "float64", 10.0, use_gate=True)
show("gate_cross_f64", gc(q, v, key=k))

# 5. gradients of weighted(out) of the gated causal layer over the padded
# batch (f64) wrt every weight (Keras's order) and the input
g, paths = mha(2, 3, None, None, 6, 6, 6, "float64", 2.0, use_gate=True)
x = tf.constant(fill((2, 5, 6), 0.3))
with tf.GradientTape() as tape:
    tape.watch(x)
    xm = tf.identity(x)
    backend.set_keras_mask(xm, tf.constant(pad))
    o = g(xm, xm, use_causal_mask=True)
    l = weighted(o)
gs = tape.gradient(l, g.trainable_weights + [x])
show("gate_grad_loss", [l.numpy()])
for n, gr in zip([p.replace("/", "_") for p in paths] + ["input"], gs):
    show("gate_grad_" + n, gr.numpy())
