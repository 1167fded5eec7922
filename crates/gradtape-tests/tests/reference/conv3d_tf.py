"""Writes the TensorFlow 2.21 reference fixtures of tests/conv3d_values.rs
(conv3d, 3-D and 1-D pools, separable_conv2d, channels-first forms) as .npy
files: each case's inputs, output, and the gradients of sum(y * w) for a
random weight w (and, for conv3d, one second-order gradient).

Run: ~/.cache/gradtape-peers/bin/python conv3d_tf.py
"""
import os
import numpy as np
import tensorflow as tf

out = os.path.join(os.path.dirname(__file__), "..", "data", "conv_tf")
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(1505)
written = []


def save(name, **arrays):
    for k, a in arrays.items():
        np.save(os.path.join(out, f"{name}.{k}.npy"), np.asarray(a, dtype=np.float64))
    written.append(name)


def rand(shape):
    return rng.uniform(-1.5, 1.5, size=shape)


def case(name, fn, inputs, second=False, f32=False):
    """fn(*tensors) -> y; saves inputs in0.., y, w, grads g0.. (f32: TF's
    kernel takes float32 only; the inputs are rounded to it first)"""
    if f32:
        inputs = [np.float32(a) for a in inputs]
    ts = [tf.constant(a) for a in inputs]
    with tf.GradientTape(persistent=True) as outer:
        outer.watch(ts)
        with tf.GradientTape() as tape:
            tape.watch(ts)
            y = fn(*ts)
            w = tf.constant(rand(y.shape).astype(y.dtype.as_numpy_dtype))
            s = tf.reduce_sum(y * w)
        gs = tape.gradient(s, ts)
        if second:
            # second order: d/d(inputs) of sum(g0^2), g0 the first input's gradient
            s2 = tf.reduce_sum(gs[0] * gs[0])
    arrays = {f"in{i}": a for i, a in enumerate(inputs)}
    arrays.update(y=y.numpy(), w=w.numpy())
    arrays.update({f"g{i}": g.numpy() for i, g in enumerate(gs)})
    if second:
        g2 = outer.gradient(s2, ts)
        arrays.update({f"h{i}": (g.numpy() if g is not None else np.zeros_like(inputs[i])) for i, g in enumerate(g2)})
    save(name, **arrays)


# conv3d: NDHWC, DHWIO
case("conv3d_same_s1", lambda x, f: tf.nn.conv3d(x, f, [1, 1, 1, 1, 1], "SAME"),
     [rand([2, 4, 5, 4, 2]), rand([3, 2, 3, 2, 3])], second=True)
case("conv3d_valid_s212", lambda x, f: tf.nn.conv3d(x, f, [1, 2, 1, 2, 1], "VALID"),
     [rand([1, 5, 6, 5, 3]), rand([2, 3, 2, 3, 2])])
case("conv3d_same_s223", lambda x, f: tf.nn.conv3d(x, f, [1, 2, 2, 3, 1], "SAME"),
     [rand([1, 5, 4, 7, 1]), rand([3, 3, 2, 1, 2])])
# dilations: TF's CPU Conv3D kernel rejects them; tf.nn.convolution runs them
# (space-to-batch around the undilated kernel)
case("conv3d_same_d212", lambda x, f: tf.nn.convolution(x, f, strides=1, padding="SAME", dilations=[2, 1, 2]),
     [rand([1, 6, 5, 6, 2]), rand([2, 2, 3, 2, 2])])
case("conv3d_valid_d122", lambda x, f: tf.nn.convolution(x, f, strides=1, padding="VALID", dilations=[1, 2, 2]),
     [rand([2, 4, 6, 5, 1]), rand([2, 2, 2, 1, 3])])

# 3-D pools (TF's MaxPool3D and AvgPool3D take float32 only)
case("max_pool3d_same", lambda x: tf.nn.max_pool3d(x, [2, 3, 2], [2, 2, 2], "SAME"), [rand([2, 5, 4, 6, 2])], f32=True)
case("max_pool3d_valid", lambda x: tf.nn.max_pool3d(x, [3, 2, 2], [1, 2, 1], "VALID"), [rand([1, 4, 5, 5, 3])], f32=True)
case("avg_pool3d_same", lambda x: tf.nn.avg_pool3d(x, [2, 3, 2], [2, 2, 2], "SAME"), [rand([2, 5, 4, 6, 2])], f32=True)
case("avg_pool3d_valid", lambda x: tf.nn.avg_pool3d(x, [3, 2, 2], [1, 2, 1], "VALID"), [rand([1, 4, 5, 5, 3])], f32=True)

# 1-D pools: NWC
case("max_pool1d_same", lambda x: tf.nn.max_pool1d(x, 3, 2, "SAME"), [rand([2, 9, 3])])
case("avg_pool1d_same", lambda x: tf.nn.avg_pool1d(x, 3, 2, "SAME"), [rand([2, 9, 3])])
case("avg_pool1d_valid", lambda x: tf.nn.avg_pool1d(x, 2, 1, "VALID"), [rand([1, 6, 2])])

# separable_conv2d
case("separable_same_s2",
     lambda x, d, p: tf.nn.separable_conv2d(x, d, p, [1, 2, 2, 1], "SAME"),
     [rand([2, 6, 5, 3]), rand([3, 3, 3, 2]), rand([1, 1, 6, 4])])
case("separable_valid_d2",
     lambda x, d, p: tf.nn.separable_conv2d(x, d, p, [1, 1, 1, 1], "VALID", dilations=[2, 2]),
     [rand([1, 7, 6, 2]), rand([2, 2, 2, 3]), rand([1, 1, 6, 2])])

# channels-first: bias_add runs NCHW on TF's CPU; conv2d, the pools and
# conv3d do not (TF's CPU kernels are NHWC only), so their NCHW reference is
# TF's NHWC op between transposes, which is what data_format means
case("bias_add_nchw", lambda x, b: tf.nn.bias_add(x, b, data_format="NCHW"), [rand([2, 3, 4, 5]), rand([3])])
nchw = lambda t: tf.transpose(t, [0, 2, 3, 1])
back = lambda t: tf.transpose(t, [0, 3, 1, 2])
case("conv2d_nchw", lambda x, f: back(tf.nn.conv2d(nchw(x), f, [1, 2, 1, 1], "SAME", dilations=1)),
     [rand([2, 3, 5, 6]), rand([3, 2, 3, 4])])
case("max_pool2d_nchw", lambda x: back(tf.nn.max_pool2d(nchw(x), [2, 3], [2, 1], "SAME")), [rand([2, 3, 5, 6])])
case("avg_pool2d_nchw", lambda x: back(tf.nn.avg_pool2d(nchw(x), [2, 3], [2, 1], "VALID")), [rand([2, 3, 5, 6])])
ncdhw = lambda t: tf.transpose(t, [0, 2, 3, 4, 1])
back3 = lambda t: tf.transpose(t, [0, 4, 1, 2, 3])
case("conv3d_ncdhw", lambda x, f: back3(tf.nn.conv3d(ncdhw(x), f, [1, 1, 2, 1, 1], "SAME")),
     [rand([1, 2, 4, 5, 3]), rand([2, 3, 2, 2, 3])])
case("max_pool3d_ncdhw", lambda x: back3(tf.nn.max_pool3d(ncdhw(x), [2, 2, 2], [1, 2, 2], "SAME")),
     [rand([1, 2, 4, 5, 3])], f32=True)
# 1-D channels-first (NCW) and separable NCHW, as above: TF's channels-last
# ops between transposes
ncw = lambda t: tf.transpose(t, [0, 2, 1])
case("conv1d_ncw", lambda x, f: ncw(tf.nn.conv1d(ncw(x), f, 2, "SAME")), [rand([2, 3, 7]), rand([3, 3, 2])])
case("max_pool1d_ncw", lambda x: ncw(tf.nn.max_pool1d(ncw(x), 2, 1, "VALID")), [rand([2, 3, 6])])
case("avg_pool1d_ncw", lambda x: ncw(tf.nn.avg_pool1d(ncw(x), 3, 2, "SAME")), [rand([2, 3, 6])])
case("separable_nchw",
     lambda x, d, p: back(tf.nn.separable_conv2d(nchw(x), d, p, [1, 1, 1, 1], "SAME")),
     [rand([1, 2, 5, 4]), rand([2, 3, 2, 2]), rand([1, 1, 4, 3])])
print(tf.__version__, np.__version__, len(written), "cases")
