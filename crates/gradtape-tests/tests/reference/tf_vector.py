"""TensorFlow's values and gradients of reductions, scans, softmaxes and
sorts of vectors with ties, zeros, infinities, NaN, huge and tiny values,
for tests/ops/tf_vector.rs.

Run: /work/refvenv/bin/python tf_vector.py > ../data/tf_vector.txt
(TensorFlow 2.21, f64, CPU.)

Each line: `op|x|value|grad`, lists of floats (`,`); `grad` is d/dx of
Σ w[i] y[i] with w[i] = 1 + i/2 (`none` where TensorFlow gives none).
"""
import math

import numpy as np
import tensorflow as tf

inf, nan = math.inf, math.nan
rng = np.random.default_rng(11)
VECTORS = [
    [1.0, 3.0, 3.0], [3.0, 1.0, 3.0, 2.0], [0.0, 0.0, 2.0], [0.0, 2.0, 5.0], [-inf, 1.0],
    [inf, 1.0], [inf, -inf], [-inf, -inf], [inf, inf], [nan, 1.0], [1.0, nan, 3.0],
    [1e300, 1e300], [-1e300, 1e300], [1e-300, 1e-300], [0.0, 0.0], [-0.0, 0.0], [5.0],
    [2.0, -2.0], [1.0, 2.0, 3.0, 4.0], [-1.0, -1.0, -1.0], [1e-200, -3e-200],
    list(np.round(rng.normal(0.0, 2.0, 6), 6)), list(np.round(rng.normal(0.0, 30.0, 5), 5)),
]

OPS = {
    "sum": lambda x: tf.reduce_sum(x), "mean": lambda x: tf.reduce_mean(x),
    "max": lambda x: tf.reduce_max(x), "min": lambda x: tf.reduce_min(x),
    "prod": lambda x: tf.reduce_prod(x), "logsumexp": lambda x: tf.reduce_logsumexp(x),
    "norm": lambda x: tf.norm(x), "std": lambda x: tf.math.reduce_std(x),
    "variance": lambda x: tf.math.reduce_variance(x),
    "cumsum": lambda x: tf.cumsum(x), "cumsum_exclusive": lambda x: tf.cumsum(x, exclusive=True),
    "cumsum_reverse": lambda x: tf.cumsum(x, reverse=True),
    "cumprod": lambda x: tf.math.cumprod(x),
    "cumprod_exclusive_reverse": lambda x: tf.math.cumprod(x, exclusive=True, reverse=True),
    "softmax": tf.nn.softmax, "log_softmax": tf.nn.log_softmax,
    "sort": lambda x: tf.sort(x), "sort_descending": lambda x: tf.sort(x, direction="DESCENDING"),
    "top_k": lambda x: tf.math.top_k(x, k=min(2, int(x.shape[0]))).values,
    "argmax": lambda x: tf.cast(tf.argmax(x), tf.float64),
    "argmin": lambda x: tf.cast(tf.argmin(x), tf.float64),
}


def fmt(v):
    return "none" if v is None else ",".join(repr(float(x)) for x in np.asarray(v).reshape(-1))


for name, f in OPS.items():
    for v in VECTORS:
        x = tf.Variable(np.array(v, dtype=np.float64))
        with tf.GradientTape() as tape:
            y = f(x)
            w = tf.constant(1.0 + 0.5 * np.arange(int(np.prod(y.shape))), dtype=tf.float64)
            s = tf.reduce_sum(tf.reshape(y, [-1]) * w)
        g = tape.gradient(s, x)
        print(f"{name}|{fmt(v)}|{fmt(y.numpy())}|{fmt(None if g is None else g.numpy())}")
