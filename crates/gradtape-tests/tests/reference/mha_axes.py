"""Keras 3's MultiHeadAttention (TensorFlow 2.21 backend, float64) with the
arguments gradtape's tests `nn/mha_axes.rs` check: `attention_axes` (the
heads split from the last axis, the softmax over the product of the
attention axes, the other axes batch-like) and per-head attention masks of
rank 4 (and of the scores' rank with `attention_axes`), with the scores
(`return_attention_scores=True`), the gradients of `sum(y * fill)` with
respect to the inputs and every weight.

1. `attention_axes=(1, 2)`, self-attention of images x [2, 3, 4, 8]
   (attention over the 12 pixels), 2 heads of key_dim 4;
2. `attention_axes=(2,)` on the same x (axis 1 batch-like) under a
   per-head mask [2, 1, 2, 4, 4] (broadcast over axis 1);
3. 3-D inputs [2, 5, 8] under a per-head mask [2, 2, 5, 5];
4. the same under a mask [1, 2, 5, 5] with use_causal_mask;
5. cross-attention of images with `attention_axes=(1, 2)`: queries
   [2, 3, 4, 8] to values [2, 2, 3, 6] (6 features; 12 queries to 6 keys),
   value_dim 2, output_shape 5, under a mask [2, 3, 4, 2, 3] (no heads).

Masks: key j of query i (flat over the attention axes) in batch b, head h
is kept where (b + 2h + i + 3j) % 4 != 1 or j == 0 (every query sees a
key). key_dim 4: Keras's float64 attention scales by 1/sqrt(key_dim)
rounded through float32, exact for 4.

Run: /work/refvenv/bin/python mha_axes.py > ../data/mha_axes.txt
"""
import numpy as np
import tensorflow as tf
from keras import layers
from new_user_common import F64, emit, fill, set_weights


def keep(b, h, tq, tk):
    i = np.arange(tq)[:, None]
    j = np.arange(tk)[None, :]
    return np.stack(
        [np.stack([((bb + 2 * hh + i + 3 * j) % 4 != 1) | (j == 0) for hh in range(h)]) for bb in range(b)]
    )


def case(name, mha, q, v, k0, mask=None, causal=False):
    """Builds mha on q, v; weights fill(k0 + j); emits y, scores and the
    gradients of sum(y * fill(y.shape, 9)) w.r.t. q (and v) and weights."""
    mha(q, v)
    set_weights(mha.weights, k0)
    q, v = tf.constant(q), tf.constant(v)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(q)
        tape.watch(v)
        y, s = mha(q, v, attention_mask=mask, use_causal_mask=causal, return_attention_scores=True)
        loss = tf.reduce_sum(y * fill(y.shape, 9.0))
    emit(f"{name}_y", y)
    emit(f"{name}_scores", s)
    emit(f"{name}_dq", tape.gradient(loss, q))
    emit(f"{name}_dv", tape.gradient(loss, v))
    for j, g in enumerate(tape.gradient(loss, mha.weights)):
        emit(f"{name}_grad{j}", g)


img = fill([2, 3, 4, 8], 1.0)
# 1. attention over both image axes
case("img12", layers.MultiHeadAttention(2, 4, attention_axes=(1, 2), dtype=F64), img, img, 100.0)
# 2. attention over axis 2 only, a per-head mask broadcast over axis 1
m2 = keep(2, 2, 4, 4)[:, None]  # [2, 1, 2, 4, 4]
case("img2", layers.MultiHeadAttention(2, 4, attention_axes=(2,), dtype=F64), img, img, 120.0, mask=m2)
seq = fill([2, 5, 8], 2.0)
# 3. a mask per head
case("head4", layers.MultiHeadAttention(2, 4, dtype=F64), seq, seq, 140.0, mask=keep(2, 2, 5, 5))
# 4. a mask per head shared by the batch, with the causal mask
case("head4c", layers.MultiHeadAttention(2, 4, dtype=F64), seq, seq, 160.0, mask=keep(1, 2, 5, 5), causal=True)
# 5. cross-attention between images of other sizes
val = fill([2, 2, 3, 6], 3.0)
m5 = keep(2, 1, 12, 6)[:, 0].reshape(2, 3, 4, 2, 3)
mha5 = layers.MultiHeadAttention(2, 4, value_dim=2, output_shape=5, attention_axes=(1, 2), dtype=F64)
case("cross12", mha5, img, val, 180.0, mask=m5)
