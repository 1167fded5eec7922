"""Reference values for tests/nn/llama_parts.rs: RMS normalisation, grouped-
query attention and rotary position embedding, the parts of a Llama-style
block.

Run: /work/refvenv/bin/python llama_parts.py
(TensorFlow 2.21 with Keras 3.15, PyTorch 2.15, keras_hub 0.32; all in f64.)
Inputs are the tests' `init(shape, k, scale)[i] = scale * sin(0.37 i + k)`
(row-major i); each tensor is summarised as (Σ x, Σ x[i] sin(0.1 i)) and the
gradients are of L = Σ y[i] sin(0.1 i).
"""
import os

os.environ["KERAS_BACKEND"] = "tensorflow"
import numpy as np
import tensorflow as tf
import torch
import torch.nn.functional as F
import keras
from keras_hub.src.layers.modeling.rotary_embedding import RotaryEmbedding


def init(shape, k, scale):
    n = int(np.prod(shape))
    return (scale * np.sin(0.37 * np.arange(n) + k)).reshape(shape)


def weights(n):
    return np.sin(0.1 * np.arange(n))


def wsum(t):
    v = np.asarray(t, dtype=np.float64).reshape(-1)
    return (float(v.sum()), float((v * weights(v.size)).sum()))


def tf_loss(y):
    n = int(np.prod(y.shape))
    return tf.reduce_sum(tf.reshape(y, [-1]) * tf.constant(weights(n)))


# 1. rms_normalization: Keras's op (TF backend), gradients by tf.GradientTape;
# PyTorch's F.rms_norm as a cross-check
def rms(name, xs, axes, scale_shape, eps):
    x = tf.Variable(init(xs, 1.0, 1.5))
    s = tf.Variable(init(scale_shape, 2.0, 0.5) + 1.0)
    with tf.GradientTape() as tape:
        y = keras.ops.rms_normalization(x, s, axis=axes, epsilon=eps)
        loss = tf_loss(y)
    dx, ds = tape.gradient(loss, [x, s])
    xt = torch.tensor(init(xs, 1.0, 1.5))
    st = torch.tensor(init(scale_shape, 2.0, 0.5) + 1.0)
    yt = F.rms_norm(xt, tuple(xs[a] for a in axes), st, eps)
    assert np.abs(yt.numpy() - y.numpy()).max() < 1e-14
    print(f"// rms_normalization {name}")
    print(f"    y: {wsum(y)}, dx: {wsum(dx)}, dscale: {wsum(ds)},")


rms("[3,5,8] axis -1 eps 1e-6", [3, 5, 8], [2], [8], 1e-6)
rms("[2,3,4] axes 1,2 eps 0.1", [2, 3, 4], [1, 2], [3, 4], 0.1)


# 2. grouped-query attention: PyTorch's scaled_dot_product_attention with
# enable_gqa=True
def gqa(name, shapes, mask, causal):
    qs, ks, vs = shapes
    q, k, v = (torch.tensor(init(s, c, a), requires_grad=True) for s, c, a in zip(shapes, (1.0, 2.0, 3.0), (0.8, 0.9, 1.0)))
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True)
    loss = (o.reshape(-1) * torch.tensor(weights(o.numel()))).sum()
    gq, gk, gv = torch.autograd.grad(loss, (q, k, v))
    print(f"// grouped_query_attention {name}")
    print(f"    out: {wsum(o.detach())}, dq: {wsum(gq)}, dk: {wsum(gk)}, dv: {wsum(gv)},")


shapes = ([2, 4, 5, 6], [2, 2, 7, 6], [2, 2, 7, 3])
gqa("4 query heads, 2 kv heads", shapes, None, False)
gqa("causal, 6 query heads, 1 kv head", ([1, 6, 5, 4], [1, 1, 5, 4], [1, 1, 5, 4]), None, True)
m = torch.tensor(np.array([[(i * 3 + j * 5) % 4 != 0 for j in range(7)] for i in range(5)]))
gqa("bool mask [5,7]", shapes, m, False)


# 3. Keras's GroupQueryAttention layer (f64), weights from init
def gqa_layer(name, causal):
    layer = keras.layers.GroupQueryAttention(head_dim=4, num_query_heads=4, num_key_value_heads=2, dtype="float64")
    query = tf.Variable(init([2, 5, 6], 1.0, 1.0))
    value = tf.Variable(init([2, 7, 6], 2.0, 1.0)) if not causal else query
    layer.build(query.shape, value.shape)
    for i, w in enumerate(layer.weights):
        w.assign(init(w.shape, 10.0 + i, 0.4))
    with tf.GradientTape() as tape:
        y = layer(query, value, use_causal_mask=causal)
        loss = tf_loss(y)
    grads = tape.gradient(loss, [query] + ([value] if not causal else []) + list(layer.weights))
    print(f"// GroupQueryAttention {name}: weights {[w.path for w in layer.weights]}")
    print(f"    y: {wsum(y)},")
    print(f"    grads: {[wsum(g) for g in grads]},")


gqa_layer("cross, 4 query heads, 2 kv heads", False)
gqa_layer("causal self-attention", True)


# 4. rotary embedding: keras_hub's layer, whose angles are f32; the
# reference is its formula in f64 (numpy), checked against the layer
def rope_np(x, seq_axis, start, wavelength, scaling):
    x = np.moveaxis(x, (-1, seq_axis), (-1, 1))
    t, d = x.shape[1], x.shape[-1]
    inv = wavelength ** (-np.arange(0, d, 2) / d) / scaling
    freq = np.outer(np.arange(t) + start, inv)
    emb = np.concatenate([freq, freq], axis=-1)
    shape = [1] * x.ndim
    shape[1], shape[-1] = t, d
    cos, sin = np.cos(emb).reshape(shape), np.sin(emb).reshape(shape)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    y = x * cos + np.concatenate([-x2, x1], axis=-1) * sin
    return np.moveaxis(y, (-1, 1), (-1, seq_axis))


def rope(name, xs, seq_axis, start, wavelength, scaling):
    x = init(xs, 1.0, 1.0)
    want = rope_np(x, seq_axis, start, wavelength, scaling)
    layer = RotaryEmbedding(max_wavelength=wavelength, scaling_factor=scaling, sequence_axis=seq_axis, dtype="float64")
    got = layer(tf.constant(x), start_index=start).numpy()
    assert np.abs(got - want).max() < 1e-5, np.abs(got - want).max()
    print(f"// rotary {name} (keras_hub differs by {np.abs(got - want).max():.1e}, its f32 angles)")
    print(f"    y: {wsum(want)},")


rope("[2,5,3,8] axis 1", [2, 5, 3, 8], 1, 0, 10000.0, 1.0)
rope("[1,2,6,4] axis 2 start 3 wavelength 100 scaling 2", [1, 2, 6, 4], 2, 3, 100.0, 2.0)


# 5. keras_hub's LlamaTransformerDecoder, the block of
# TransformerBlock::builder(..).llama(): it computes its norms, gate and
# softmax in f32 (explicit casts), so it runs in f32 here; weights from
# init in Keras's order
def llama_block(name, kv_heads):
    from keras_hub.src.models.llama.llama_decoder import LlamaTransformerDecoder

    layer = LlamaTransformerDecoder(intermediate_dim=12, num_query_heads=4, num_key_value_heads=kv_heads,
                                    layer_norm_epsilon=1e-5)
    x = tf.Variable(init([2, 5, 8], 1.0, 1.0).astype(np.float32))
    layer.build(x.shape)
    for i, w in enumerate(layer.weights):
        w.assign(init(w.shape, 10.0 + i, 0.4).astype(np.float32))
    with tf.GradientTape() as tape:
        y = layer(x)
        loss = tf.reduce_sum(tf.reshape(y, [-1]) * tf.constant(weights(int(np.prod(y.shape))), tf.float32))
    grads = tape.gradient(loss, [x] + list(layer.weights))
    print(f"// LlamaTransformerDecoder {name}: weights {[w.path for w in layer.weights]}")
    print(f"    y: {wsum(y)},")
    print(f"    grads: {[wsum(g) for g in grads]},")


llama_block("4 query heads, 2 kv heads", 2)
