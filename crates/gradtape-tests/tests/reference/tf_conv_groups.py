"""TensorFlow's values and gradients of grouped convolutions (conv1d,
conv2d, conv3d, conv2d_transpose with a filter of fewer input channels
than the input: groups = channels / filter in-channels), for
tests/ops/tf_conv_groups.rs.

Run: /work/refvenv/bin/python tf_conv_groups.py > ../data/tf_conv_groups.txt
(TensorFlow 2.21, CPU; each case in f32 and in f64. TensorFlow's eager
CPU kernels refuse grouped 3-D convolutions and the gradients of grouped
ones ("Gradients for grouped convolutions are not supported on CPU"), so
every case runs under XLA, `tf.function(jit_compile=True)`, as Keras 3
runs grouped convolutions on a CPU.)

Each line: `op|dtype|x shape|filter shape|strides|dilations|padding|
output shape|x|filter|value|dx|dfilter`, shapes `;`-separated, `output
shape` conv2d_transpose's (else `none`), arrays row-major; the gradients
are of sum_i w[i] y[i], w[i] = 1 + i/2.
"""
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(2021)


def fmt(v):
    return ",".join(repr(float(x)) for x in np.asarray(v).reshape(-1))


def shp(s):
    return ";".join(str(d) for d in s) if s is not None else "none"


def run(op, x, w, strides, dil, pad, out_shape):
    if op == "conv1d":
        return tf.nn.conv1d(x, w, strides[0], pad, dilations=dil[0])
    if op == "conv2d":
        return tf.nn.conv2d(x, w, strides, pad, dilations=dil)
    if op == "conv3d":
        return tf.nn.conv3d(x, w, [1, *strides, 1], pad, dilations=[1, *dil, 1])
    return tf.nn.conv2d_transpose(x, w, out_shape, strides, pad, dilations=dil)


def grads(op, x, w, strides, dil, pad, out_shape):
    with tf.GradientTape() as tape:
        tape.watch([x, w])
        y = run(op, x, w, strides, dil, pad, out_shape)
        n = tf.size(y)
        wts = 1.0 + 0.5 * tf.cast(tf.range(n), y.dtype)
        s = tf.reduce_sum(tf.reshape(y, [-1]) * wts)
    gx, gw = tape.gradient(s, [x, w])
    return y, gx, gw


CASES = [
    # op, x shape, filter shape, strides, dilations, padding, output shape (transpose)
    ("conv2d", [2, 5, 4, 4], [3, 3, 2, 6], [1, 1], [1, 1], "SAME", None),
    ("conv2d", [1, 6, 7, 8], [2, 3, 2, 4], [2, 2], [1, 1], "VALID", None),
    ("conv2d", [1, 5, 5, 4], [3, 3, 2, 4], [2, 1], [1, 1], "SAME", None),
    ("conv2d", [1, 6, 6, 4], [2, 2, 1, 8], [1, 1], [2, 2], "SAME", None),
    ("conv2d", [1, 5, 6, 8], [3, 2, 2, 8], [1, 1], [2, 1], "VALID", None),
    ("conv2d", [1, 3, 3, 4], [1, 1, 2, 6], [1, 1], [1, 1], "VALID", None),
    ("conv1d", [2, 7, 4], [3, 2, 6], [1], [1], "SAME", None),
    ("conv1d", [1, 9, 8], [3, 2, 4], [2], [1], "VALID", None),
    ("conv1d", [1, 8, 4], [2, 1, 4], [1], [2], "SAME", None),
    ("conv3d", [1, 3, 4, 4, 4], [2, 2, 2, 2, 4], [1, 1, 1], [1, 1, 1], "SAME", None),
    ("conv3d", [1, 5, 5, 4, 8], [2, 3, 2, 2, 4], [2, 2, 1], [1, 1, 1], "VALID", None),
    ("conv3d", [1, 4, 4, 4, 4], [2, 2, 2, 1, 8], [1, 1, 1], [2, 1, 2], "SAME", None),
    # the transpose: x is [n, oh, ow, o], the filter [kh, kw, c/groups, o]
    ("conv2d_transpose", [1, 3, 3, 6], [3, 3, 2, 6], [2, 2], [1, 1], "SAME", [1, 5, 5, 4]),
    ("conv2d_transpose", [1, 4, 3, 4], [2, 2, 1, 4], [1, 1], [1, 1], "VALID", [1, 5, 4, 4]),
]

for op, xs, fs, strides, dil, pad, out_shape in CASES:
    x64 = np.round(rng.normal(0, 1, xs), 4)
    w64 = np.round(rng.normal(0, 1, fs), 4)
    for dt in [tf.float32, tf.float64]:
        x, w = tf.constant(x64, dt), tf.constant(w64, dt)
        f = tf.function(lambda a, b: grads(op, a, b, strides, dil, pad, out_shape), jit_compile=True)
        y, gx, gw = f(x, w)
        print("|".join([
            op, dt.name, shp(xs), shp(fs), shp(strides), shp(dil), pad, shp(out_shape),
            fmt(x64), fmt(w64), fmt(y.numpy()), fmt(gx.numpy()), fmt(gw.numpy()),
        ]))
