"""Writes the TensorFlow 2.21 reference values of tests/nn/half_nn.rs,
tests/data/half_nn_tf.txt: one line per case, `name: shape: bits`, the bit
patterns of f16/bf16 results (tf.bitcast(t, tf.uint16)).

Inputs are exact in f16 and bf16: element i of an input of n elements is
((i * 37 + 11 + seed) % 101 - 50) / 64, a multiple of 1/64 below 0.8 in
magnitude (7 significant bits).

Run: ~/.cache/gradtape-peers/bin/python half_nn_tf.py
"""
import os

import numpy as np
import tensorflow as tf

lines = []


def inp(shape, seed=0):
    n = int(np.prod(shape))
    v = ((np.arange(n) * 37 + 11 + seed) % 101 - 50) / 64.0
    return v.reshape(shape)


def bits(t):
    return tf.bitcast(t, tf.uint16).numpy().ravel().tolist()


def show(name, t):
    """one line: the case name and dtype (f16/bf16), the shape, the bits"""
    d = {"float16": "f16", "bfloat16": "bf16"}[t.dtype.name]
    shape = " ".join(str(s) for s in t.shape)
    lines.append(f"{name} {d}: {shape}: {' '.join(str(b) for b in bits(t))}")


def r32(t, dt):
    """TF's float32 result rounded to dt by TF's cast."""
    return tf.cast(t, dt)


H = [tf.float16, tf.bfloat16]
for dt in H:
    c = lambda a: tf.constant(a, dt)
    f32 = lambda a: tf.constant(a, tf.float32)
    w32 = lambda t: tf.cast(tf.cast(t, dt), tf.float32)  # a result rounded to dt, widened again
    # TF's CPU kernels for half conv3d and depthwise_conv2d accumulate in the
    # half type (up to 80 bf16 ulps off on these inputs); the references of
    # the convolutions are its f32 ops on the same (exact) inputs, rounded by
    # tf.cast: an f32 accumulator rounded once, as TF's conv2d and matmul do
    x5, f5 = inp([1, 3, 4, 4, 2]), inp([2, 2, 3, 2, 3], 5)
    y = tf.nn.conv3d(f32(x5), f32(f5), [1, 1, 1, 1, 1], "SAME")
    show("conv3d (f32 rounded)", r32(y, dt))
    dy = inp(y.shape, 9)
    show("conv3d_backprop_input (f32 rounded)", r32(tf.raw_ops.Conv3DBackpropInputV2(
        input_sizes=[1, 3, 4, 4, 2], filter=f32(f5), out_backprop=f32(dy), strides=[1, 1, 1, 1, 1],
        padding="SAME"), dt))
    show("conv3d_backprop_filter (f32 rounded)", r32(tf.raw_ops.Conv3DBackpropFilterV2(
        input=f32(x5), filter_sizes=[2, 2, 3, 2, 3], out_backprop=f32(dy), strides=[1, 1, 1, 1, 1],
        padding="SAME"), dt))
    p5 = inp([1, 4, 4, 5, 2], 3)
    if dt == tf.bfloat16:
        show("max_pool3d", tf.nn.max_pool3d(c(p5), [2, 2, 3], [2, 1, 2], "SAME"))
        show("avg_pool3d", tf.nn.avg_pool3d(c(p5), [2, 2, 3], [2, 1, 2], "SAME"))
    else:
        # no CPU kernel for f16 3-D pools in TF 2.21: its f32 result, rounded
        show("max_pool3d", r32(tf.nn.max_pool3d(f32(p5), [2, 2, 3], [2, 1, 2], "SAME"), dt))
        show("avg_pool3d", r32(tf.nn.avg_pool3d(f32(p5), [2, 2, 3], [2, 1, 2], "SAME"), dt))
    p3 = inp([2, 9, 3], 7)
    show("max_pool1d", tf.nn.max_pool1d(c(p3), 3, 2, "SAME"))
    show("avg_pool1d", tf.nn.avg_pool1d(c(p3), 3, 2, "SAME"))
    im = inp([1, 3, 4, 2], 2)
    # tf.image.resize gives float32 for half images: that result, rounded
    show("resize bilinear", r32(tf.image.resize(c(im), [5, 7]), dt))
    show("resize nearest", tf.image.resize(c(im), [5, 7], "nearest"))
    g = inp([1, 5, 7, 2], 4)
    show("resize_bilinear_grad", tf.raw_ops.ResizeBilinearGrad(
        grads=f32(g), original_image=c(im), align_corners=False, half_pixel_centers=True))
    show("resize_nearest_neighbor_grad", tf.raw_ops.ResizeNearestNeighborGrad(
        grads=c(g), size=[3, 4], align_corners=False, half_pixel_centers=True))
    # separable: the depthwise result rounded to dt, then the 1x1 conv rounded
    sx, dw, pw = inp([1, 4, 5, 2], 6), inp([2, 2, 2, 2], 8), inp([1, 1, 4, 3], 10)
    d = w32(tf.nn.depthwise_conv2d(f32(sx), f32(dw), [1, 1, 1, 1], "VALID"))
    show("separable_conv2d (f32 rounded)", r32(tf.nn.conv2d(d, f32(pw), 1, "VALID"), dt))
    # einsum, in its cheapest order A (B v): each product in f32, rounded
    a, b, v = inp([3, 4], 1), inp([4, 5], 2), inp([5], 3)
    bv = w32(tf.linalg.matvec(f32(b), f32(v)))
    show("einsum ij,jk,k->i (f32 rounded)", r32(tf.linalg.matvec(f32(a), bv), dt))
    lg = inp([6, 2, 4], 12) * 2
    ctc = lambda x: tf.nn.ctc_loss(tf.constant([[1, 2, 1], [3, 3, 0]]), x, tf.constant([3, 2]),
                                   tf.constant([6, 5]), logits_time_major=True, blank_index=0)
    show("ctc_loss", ctc(c(lg)))

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "half_nn_tf.txt")
with open(path, "w") as f:
    f.write("# written by tests/reference/half_nn_tf.py (TensorFlow %s)\n" % tf.__version__)
    f.write("\n".join(lines) + "\n")
print(f"wrote {len(lines)} cases to {path}")
