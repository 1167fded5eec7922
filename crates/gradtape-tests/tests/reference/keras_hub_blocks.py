"""Reference values for tests/nn/transformer_blocks.rs: keras_hub's
`TransformerEncoder` and `TransformerDecoder` (Keras 3.15.1, TensorFlow
2.21 backend, float64): post-norm (their default `normalize_first=False`)
and pre-norm, a decoder with cross-attention to an encoder's sequence,
padding masks of both; and the gradients of the decoder's output in both
inputs from `tf.GradientTape`.

Run: /work/refvenv/bin/python keras_hub_blocks.py > keras_hub_blocks.rs
Inputs are fill(shape, k)[i] = 0.5 * sin(0.7 * i + k) (row-major i); a
weight whose path inside the block is `p` (e.g.
`self_attention/query/kernel`) is fill(shape, key(p)) with
key(p) = (sum of p's bytes mod 89) / 7.
"""
import os
os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
import keras_hub
from keras_refs import fill, show


def key(p):
    # (the encoder names its attention `self_attention_layer`, the
    # decoder and gradtape `self_attention`)
    p = p.replace("self_attention_layer/", "self_attention/")
    return (sum(p.encode()) % 89) / 7.0


def set_weights(layer):
    for w in layer.weights:
        p = w.path.split("/", 1)[1]
        w.assign(fill(w.shape, key(p)))
    # the attention's scale 1/sqrt(head_dim) exactly (Keras casts its
    # Python float through float32; see tests/reference/transformer.py)
    for a in ["_self_attention_layer", "_cross_attention_layer"]:
        m = getattr(layer, a, None)
        if m is not None:
            m._inverse_sqrt_key_dim = np.float64(1.0 / np.sqrt(m._key_dim))


def weighted(o):
    n = int(np.prod(o.shape))
    return tf.reduce_sum(tf.reshape(o, [-1]) * tf.sin(0.1 * tf.range(n, dtype=tf.float64)))


print("//! keras_hub (Keras 3.15.1, TensorFlow 2.21) outputs printed by")
print("//! `keras_hub_blocks.py` beside this file; used by")
print("//! `tests/nn/transformer_blocks.rs`.")
print("#![allow(clippy::excessive_precision, clippy::unreadable_literal)]")

# width 6, 2 heads of 3, feed-forward 8, ReLU (their default); decoder
# input [2, 4, 6], encoder sequence [2, 5, 10]
x = fill((2, 4, 6), 0.3)
enc = fill((2, 5, 10), 0.8)
xpad = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=bool)
epad = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=bool)

# 1. the encoder, post-norm: unmasked and padded
e = keras_hub.layers.TransformerEncoder(8, 2, dtype="float64")
e.build((2, 4, 6))
set_weights(e)
show("encoder_post", e(x))
show("encoder_post_padded", e(x, padding_mask=xpad))

# 2. the decoder with cross-attention, post-norm and pre-norm, causal,
# with both padding masks
for first in [False, True]:
    d = keras_hub.layers.TransformerDecoder(8, 2, normalize_first=first, dtype="float64")
    d.build((2, 4, 6), (2, 5, 10))
    set_weights(d)
    tag = "pre" if first else "post"
    show(f"decoder_{tag}", d(x, enc))
    show(f"decoder_{tag}_padded", d(x, enc, decoder_padding_mask=xpad, encoder_padding_mask=epad))
    if not first:
        print("// the post-norm decoder's weights: " + ", ".join(w.path.split("/", 1)[1] for w in d.weights))
        xt, et = tf.constant(x), tf.constant(enc)
        with tf.GradientTape() as tape:
            tape.watch([xt, et])
            l = weighted(d(xt, et, decoder_padding_mask=xpad, encoder_padding_mask=epad))
        gx, ge = tape.gradient(l, [xt, et])
        show("decoder_post_loss", [l.numpy()])
        show("decoder_post_grad_x", gx.numpy())
        show("decoder_post_grad_encoder", ge.numpy())
