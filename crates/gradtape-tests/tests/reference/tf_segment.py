"""TensorFlow's values and gradients of the segment reductions (sorted and
unsorted; sum, mean, max, min, prod) with ties, zeros, infinities, NaN and
empty segments, and of gather with repeated indices, for
tests/ops/tf_segment.rs.

Run: /work/refvenv/bin/python tf_segment.py > ../data/tf_segment.txt
(TensorFlow 2.21, f64, CPU.)

Each line: `op|x|value|grad`, lists of floats (`,`); `grad` is d/dx of
Σ w[i] y[i] with w[i] = 1 + i/2. x has 6 rows of 2 (row-major); the
sorted ids are [0, 0, 1, 1, 1, 3] (segment 2 empty), the unsorted ids
[3, 0, 3, 1, 0, 1] of 5 segments (2 and 4 empty), the gather indices
[2, 0, 2, 5, 2].
"""
import math

import numpy as np
import tensorflow as tf

inf, nan = math.inf, math.nan
rng = np.random.default_rng(9)
XS = [
    [1, 2, 3, 3, 1, 5], [0, 2, 0, 3, 4, 0], [inf, 1, -inf, 2, nan, 3], [1e300, 1e300, -1e300, 2, 3, 4],
    [2, 2, 2, 2, 2, 2], [-1, 0, -0.0, 0, -1, -1], list(np.round(rng.normal(0, 2, 6), 5)),
]
SORTED = tf.constant([0, 0, 1, 1, 1, 3])
UNSORTED = tf.constant([3, 0, 3, 1, 0, 1])
GATHER = tf.constant([2, 0, 2, 5, 2])
OPS = {
    "segment_sum": lambda x: tf.math.segment_sum(x, SORTED),
    "segment_mean": lambda x: tf.math.segment_mean(x, SORTED),
    "segment_max": lambda x: tf.math.segment_max(x, SORTED),
    "segment_min": lambda x: tf.math.segment_min(x, SORTED),
    "segment_prod": lambda x: tf.math.segment_prod(x, SORTED),
    "unsorted_segment_sum": lambda x: tf.math.unsorted_segment_sum(x, UNSORTED, 5),
    "unsorted_segment_mean": lambda x: tf.math.unsorted_segment_mean(x, UNSORTED, 5),
    "unsorted_segment_max": lambda x: tf.math.unsorted_segment_max(x, UNSORTED, 5),
    "unsorted_segment_min": lambda x: tf.math.unsorted_segment_min(x, UNSORTED, 5),
    "unsorted_segment_prod": lambda x: tf.math.unsorted_segment_prod(x, UNSORTED, 5),
    "gather": lambda x: tf.gather(x, GATHER),
}


def fmt(v):
    return ",".join(repr(float(x)) for x in np.asarray(v).reshape(-1))


for name, f in OPS.items():
    for col in XS:
        # two columns: the case and its negation
        x = tf.Variable(np.stack([np.array(col, dtype=np.float64), -np.array(col, dtype=np.float64)], axis=1))
        with tf.GradientTape() as tape:
            y = f(x)
            w = tf.constant(1.0 + 0.5 * np.arange(int(np.prod(y.shape))), tf.float64)
            s = tf.reduce_sum(tf.reshape(y, [-1]) * w)
        g = tape.gradient(s, x)
        g = tf.convert_to_tensor(g)
        print(f"{name}|{fmt(x.numpy())}|{fmt(y.numpy())}|{fmt(g.numpy())}")
