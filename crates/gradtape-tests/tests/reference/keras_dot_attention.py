"""Reference values for tests/nn/dot_attention.rs: Keras 3.15.1
(TensorFlow 2.21 backend) `Attention` (dot and concat scores, with and
without the scale) and `AdditiveAttention`, with the query's and value's
masks, the causal mask, a separate key, and the attention scores; the
gradients of the additive layer from `tf.GradientTape`.

Run: /work/refvenv/bin/python keras_dot_attention.py > keras_dot_attention.rs
Inputs are fill(shape, k)[i] = 0.5 * sin(0.7 * i + k) (row-major i).
"""
import os
os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
from keras import layers
from keras_refs import fill, show


def weighted(o):
    n = int(np.prod(o.shape))
    return tf.reduce_sum(tf.reshape(o, [-1]) * tf.cast(tf.sin(0.1 * tf.range(n, dtype=tf.float64)), o.dtype))


print("//! Keras 3.15.1 (TensorFlow 2.21) outputs printed by")
print("//! `keras_dot_attention.py` beside this file; used by")
print("//! `tests/nn/dot_attention.rs`.")
print("#![allow(clippy::excessive_precision, clippy::unreadable_literal)]")

# query [2, 3, 4], value [2, 5, 6], key [2, 5, 4]; masks of the query's 3
# and the value's 5 positions
q = fill((2, 3, 4), 0.1)
v = fill((2, 5, 6), 0.2)
k = fill((2, 5, 4), 0.4)
qm = np.array([[1, 1, 0], [1, 1, 1]], dtype=bool)
vm = np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]], dtype=bool)

layers_ = {
    "dot": lambda dt: layers.Attention(dtype=dt),
    "dot_scaled": lambda dt: layers.Attention(use_scale=True, dtype=dt),
    "concat": lambda dt: layers.Attention(use_scale=True, score_mode="concat", dtype=dt),
    "additive": lambda dt: layers.AdditiveAttention(dtype=dt),
    "additive_unscaled": lambda dt: layers.AdditiveAttention(use_scale=False, dtype=dt),
}


def built(name, dt):
    a = layers_[name](dt)
    a.build([q.shape, v.shape, k.shape])
    # the scale 0.7 (a scalar) or fill([4], 2.0); the concat weight 1.3
    for w in a.weights:
        leaf = w.path.split("/")[-1]
        if leaf == "scale":
            w.assign(np.full(w.shape, 0.7) if len(w.shape) == 0 else fill(w.shape, 2.0))
        else:
            w.assign(np.full(w.shape, 1.3))
    return a


for dt, sfx in [("float64", "f64"), ("float32", "f32")]:
    qq, vv, kk = (x.astype(dt) for x in (q, v, k))
    for name in layers_:
        a = built(name, dt)
        show(f"{name}_{sfx}", a([qq, vv, kk]))
        show(f"{name}_masked_{sfx}", a([qq, vv, kk], mask=[qm, vm]))
        o, s = a([qq, vv, kk], mask=[qm, vm], use_causal_mask=True, return_attention_scores=True)
        show(f"{name}_causal_{sfx}", o)
        show(f"{name}_causal_scores_{sfx}", s)

# self-attention of the query (no key), dot with the scale
a = built("dot_scaled", "float64")
show("dot_scaled_self_f64", a([q, q]))

# gradients of the masked additive and dot layers (f64) in the query, the
# value, the key and the weights
for name in ["additive", "concat"]:
    a = built(name, "float64")
    qt, vt, kt = tf.constant(q), tf.constant(v), tf.constant(k)
    with tf.GradientTape() as tape:
        tape.watch([qt, vt, kt])
        l = weighted(a([qt, vt, kt], mask=[qm, vm]))
    gs = tape.gradient(l, [qt, vt, kt] + a.trainable_weights)
    show(f"{name}_loss", [l.numpy()])
    for n, g in zip(["query", "value", "key"] + [w.path.split("/")[-1] for w in a.trainable_weights], gs):
        show(f"{name}_grad_{n}", g.numpy())
