"""TensorFlow's values and gradients of the 2-D convolutions and pools
(NHWC) with SAME and VALID padding, strides, dilations, ties, infinities
and NaN in the input, for tests/ops/tf_conv.rs.

Run: /work/refvenv/bin/python tf_conv.py > ../data/tf_conv.txt
(TensorFlow 2.21, f64, CPU.)

Each line: `op|config|x|filter|value|dx|dfilter`: `config` is
`k,s,d,padding` (window or filter size, stride, dilation, SAME/VALID);
x is [1, 5, 6, 2] and a filter [k, k, 2, 3] (depthwise: [k, k, 2, 2]),
row-major; the gradients are of Σ w[i] y[i], w[i] = 1 + i/2 (`none`
for the pools' filter).
"""
import math

import numpy as np
import tensorflow as tf

inf, nan = math.inf, math.nan
rng = np.random.default_rng(21)
X_TIES = (np.arange(60) % 4).astype(np.float64).reshape(1, 5, 6, 2)
X_RAND = np.round(rng.normal(0, 1, (1, 5, 6, 2)), 4)
X_SPECIAL = X_RAND.copy()
X_SPECIAL[0, 1, 2, 0] = inf
X_SPECIAL[0, 3, 4, 1] = -inf
X_SPECIAL[0, 2, 0, 1] = nan
XS = [X_TIES, X_RAND, X_SPECIAL]


def fmt(v):
    return "none" if v is None else ",".join(repr(float(x)) for x in np.asarray(v).reshape(-1))


def case(name, cfg, f, x, w):
    xv = tf.Variable(x)
    wv = tf.Variable(w) if w is not None else None
    with tf.GradientTape() as tape:
        y = f(xv, wv)
        n = int(np.prod(y.shape))
        s = tf.reduce_sum(tf.reshape(y, [-1]) * tf.constant(1.0 + 0.5 * np.arange(n), tf.float64))
    gx, gw = tape.gradient(s, [xv, wv]) if wv is not None else (tape.gradient(s, xv), None)
    print(f"{name}|{cfg}|{fmt(x)}|{fmt(w)}|{fmt(y.numpy())}|{fmt(gx.numpy())}|{fmt(None if gw is None else gw.numpy())}")


for x in XS:
    for k, st, pad in [(2, 2, "VALID"), (2, 1, "SAME"), (3, 2, "SAME"), (3, 1, "VALID")]:
        cfg = f"{k},{st},1,{pad}"
        case("max_pool", cfg, lambda a, _: tf.nn.max_pool2d(a, k, st, pad), x, None)
        case("avg_pool", cfg, lambda a, _: tf.nn.avg_pool2d(a, k, st, pad), x, None)
    # (TensorFlow's CPU gradients refuse dilations above 1)
    for k, st, d, pad in [(2, 1, 1, "VALID"), (3, 2, 1, "SAME"), (2, 2, 1, "SAME"), (3, 1, 1, "SAME")]:
        cfg = f"{k},{st},{d},{pad}"
        w = np.round(rng.normal(0, 1, (k, k, 2, 3)), 4)
        case("conv2d", cfg, lambda a, b: tf.nn.conv2d(a, b, st, pad, dilations=d), x, w)
        wd = np.round(rng.normal(0, 1, (k, k, 2, 1)), 4)
        case("depthwise_conv2d", cfg,
             lambda a, b: tf.nn.depthwise_conv2d(a, b, [1, st, st, 1], pad, dilations=[d, d]), x, wd)
