"""Reference values for tests/nn/transformer.rs: Keras 3.15.1 (TensorFlow
2.21 backend) `MultiHeadAttention` with fixed weights, its gradients from
`tf.GradientTape`, and keras_hub's `SinePositionEncoding` formula.

Run: /work/refvenv/bin/python transformer.py > keras_transformer.rs
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
from keras_refs import fill, show


def mha(heads, key_dim, value_dim, out, dq, dk, dv, dtype, k0):
    """A built layer whose weights are fill(shape, k0 + j) in Keras's order."""
    m = layers.MultiHeadAttention(heads, key_dim, value_dim=value_dim, output_shape=out, dtype=dtype)
    q = np.zeros((1, 1, dq)); v = np.zeros((1, 1, dv)); k = np.zeros((1, 1, dk))
    m(q.astype(dtype), v.astype(dtype), key=k.astype(dtype))
    ws = []
    for j, w in enumerate(m.weights):
        ws.append(fill(w.shape, k0 + j).astype(dtype))
    m.set_weights(ws)
    if dtype == "float64":
        # Keras casts its Python-float scale 1 / sqrt(key_dim) through
        # float32 (`ops.cast` of a Python float), which moves float64
        # outputs by ~1e-11; an np.float64 keeps the exact scale
        m._inverse_sqrt_key_dim = np.float64(1.0 / np.sqrt(key_dim))
    return m, [w.path for w in m.weights]


def weighted(o):
    n = int(np.prod(o.shape))
    return tf.reduce_sum(tf.reshape(o, [-1]) * tf.cast(tf.sin(0.1 * tf.range(n, dtype=tf.float64)), o.dtype))


print("//! Keras 3.15.1 (TensorFlow 2.21) outputs printed by `transformer.py`")
print("//! beside this file; used by `tests/nn/transformer.rs`.")
print("#![allow(clippy::excessive_precision, clippy::unreadable_literal)]")

# 1. self-attention, 2 heads of 3, d = 6, B = 2, T = 4, f32
m, paths = mha(2, 3, None, None, 6, 6, 6, "float32", 1.0)
x = fill((2, 4, 6), 0.3).astype("float32")
show("mha_self_f32", m(x, x))
# 2. causal
show("mha_causal_f32", m(x, x, use_causal_mask=True))
# 3. a bool mask [B, Tq, Tk] (no fully masked row)
mask = (np.arange(2 * 4 * 4).reshape(2, 4, 4) * 7 % 5) != 0
mask[:, :, 0] = True
show("mha_mask", mask.astype(np.float64))
show("mha_masked_f32", m(x, x, attention_mask=mask))

# 4. cross-attention: query [2, 3, 5], value [2, 6, 4], key [2, 6, 7],
# 3 heads, key_dim 2, value_dim 3, output 4; f32 and f64; with causal
for dt in ["float32", "float64"]:
    c, _ = mha(3, 2, 3, 4, 5, 7, 4, dt, 10.0)
    q = fill((2, 3, 5), 0.1).astype(dt)
    v = fill((2, 6, 4), 0.2).astype(dt)
    k = fill((2, 6, 7), 0.4).astype(dt)
    suffix = "f32" if dt == "float32" else "f64"
    show("mha_cross_" + suffix, c(q, v, key=k))
    show("mha_cross_causal_" + suffix, c(q, v, key=k, use_causal_mask=True))

# 5. gradients (f64, masked self-attention): of weighted(out) wrt every
# weight (Keras's order) and the input
m64, paths = mha(2, 3, None, None, 6, 6, 6, "float64", 1.0)
x64 = tf.constant(fill((2, 4, 6), 0.3))
with tf.GradientTape() as tape:
    tape.watch(x64)
    o = m64(x64, x64, attention_mask=mask)
    l = weighted(o)
gs = tape.gradient(l, m64.trainable_weights + [x64])
print("// weights in Keras's order: " + ", ".join(p.split("/", 1)[1] for p in paths))
show("mha_grad_loss", [l.numpy()])
names = ["query_kernel", "query_bias", "key_kernel", "key_bias", "value_kernel", "value_bias",
         "output_kernel", "output_bias", "input"]
for n, g in zip(names, gs):
    show("mha_grad_" + n, g.numpy())

# 6. keras_hub SinePositionEncoding (max_wavelength 10000), its formula
# in numpy: 5 positions from start 3, hidden size 6
def sine(seq, hidden, start, max_wavelength=10000.0):
    positions = np.arange(seq, dtype=np.float64) + start
    timescales = np.power(1.0 / max_wavelength, (2 * (np.arange(hidden) // 2)).astype(np.float64) / hidden)
    angles = positions[:, None] * timescales[None, :]
    cos_mask = np.arange(hidden) % 2
    return np.sin(angles) * (1 - cos_mask) + np.cos(angles) * cos_mask
show("sine_5_6_from_3", sine(5, 6, 3))

# 7. a pre-LayerNorm block (d 6, 2 heads of 3, ff 8, causal, f64), from
# Keras layers (the GELU in numpy): x + MHA(LN(x)), then + Dense(Dense(LN(x), gelu)); weights
# fill(shape, 20 + j) in the order gamma, beta, MHA's 8, gamma, beta,
# kernel, bias, kernel, bias
ln1 = layers.LayerNormalization(epsilon=1e-5, dtype="float64")
ln2 = layers.LayerNormalization(epsilon=1e-5, dtype="float64")
att, _ = mha(2, 3, None, None, 6, 6, 6, "float64", 0.0)
ff1 = layers.Dense(8, activation="gelu", dtype="float64")
ff2 = layers.Dense(6, dtype="float64")
xb = fill((2, 4, 6), 0.3)
ln1(xb); ln2(xb); ff2(ff1(xb))
j = 20
for lay in [ln1, att, ln2, ff1, ff2]:
    ws = []
    for w in lay.weights:
        ws.append(fill(w.shape, j)); j += 1
    lay.set_weights(ws)
h = ln1(xb)
xb1 = xb + att(h, h, use_causal_mask=True)
# the GELU in numpy (math.erf): Keras's f64 gelu is off by ~5e-9 (a
# float32 constant somewhere in its TF path)
from math import erf
k1, b1 = [np.asarray(w) for w in ff1.weights]
z = np.asarray(ln2(xb1)) @ k1 + b1
gelu = 0.5 * z * (1.0 + np.vectorize(erf)(z / np.sqrt(2.0)))
yb = np.asarray(xb1) + ff2(gelu)
show("block_causal_f64", yb)

# 8. return_attention_scores=True: the probabilities [B, heads, Tq, Tk]
# (before dropout), self-attention with the bool mask (f32) and causal
# cross-attention (f64)
o, s = m(x, x, attention_mask=mask, return_attention_scores=True)
show("mha_scores_masked_f32", s)
c, _ = mha(3, 2, 3, 4, 5, 7, 4, "float64", 10.0)
q = fill((2, 3, 5), 0.1)
v = fill((2, 6, 4), 0.2)
k = fill((2, 6, 7), 0.4)
o, s = c(q, v, key=k, use_causal_mask=True, return_attention_scores=True)
show("mha_scores_cross_causal_f64", s)

# 9. padding: a query mask and a key mask (the last positions padded) as
# Keras combines them, q_mask[:, :, None] & k_mask[:, None, :], so a padded
# query's row hides every key. Keras 3 has two answers for such a row: its
# default path (ops.dot_product_attention, a layer without dropout, no
# scores asked for) gives it uniform probabilities over all keys; with
# return_attention_scores (or dropout) its Softmax layer gives zeros. The
# outputs of both and the scores in f32, the default path's gradients in f64
q_mask = np.array([[True, True, True, True], [True, True, False, False]])
k_mask = np.array([[True, True, True, False], [True, True, True, False]])
pad = q_mask[:, :, None] & k_mask[:, None, :]
show("mha_pad_mask", pad.astype(np.float64))
show("mha_padded_f32", m(x, x, attention_mask=pad))
o, s = m(x, x, attention_mask=pad, return_attention_scores=True)
show("mha_padded_with_scores_f32", o)
show("mha_padded_scores_f32", s)
with tf.GradientTape() as tape:
    tape.watch(x64)
    o = m64(x64, x64, attention_mask=pad)
    l = weighted(o)
gs = tape.gradient(l, m64.trainable_weights + [x64])
show("mha_padded_grad_loss", [l.numpy()])
for n, g in zip(names, gs):
    show("mha_padded_grad_" + n, g.numpy())
