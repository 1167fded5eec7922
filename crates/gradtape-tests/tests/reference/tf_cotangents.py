"""TensorFlow's gradients of elementwise ops for a cotangent of 0, inf or
NaN at special points (zeros, ±1, ±inf, NaN, ±1e300, ±2; every pair for
the binary ops): where its gradient kernels select and where they
multiply, which decides whether a zero, infinite or NaN cotangent
gives 0 or NaN. For tests/ops/tf_cotangents.rs.

Run: /work/refvenv/bin/python tf_cotangents.py > ../data/tf_cotangents.txt
(TensorFlow 2.21, f64, CPU.) Each line: `op arity k c attrs grads`, the
gradient w.r.t. operand k for the cotangent c everywhere (`none` where
TensorFlow gives none). Subnormal points are left out: TensorFlow's CPU
kernels flush them to zero.
"""
import numpy as np
import tensorflow as tf

from tf_programs import BINARY_F, BINARY_NUM, UNARY_F, run_op

PTS = np.array([0.0, -0.0, -1.0, 1.0, np.inf, -np.inf, np.nan, 1e300, -1e300, 2.0, -2.0])
XS, YS = np.repeat(PTS, len(PTS)), np.tile(PTS, len(PTS))
WITH_ATTRS = [("clip", {"lo": [-1.0], "hi": [1.5]}, "lo=-1.0;hi=1.5")]


def fmt(g):
    return "none" if g is None else ",".join(repr(float(v)) for v in tf.convert_to_tensor(g).numpy())


def line(op, attrs, text, xs, c):
    xs = [tf.constant(x) for x in xs]
    with tf.GradientTape() as t:
        t.watch(xs)
        y = run_op(op, xs, attrs)
    gs = t.gradient(y, xs, output_gradients=tf.fill(tf.shape(y), tf.constant(c, tf.float64)))
    for k, g in enumerate(gs):
        print(op, len(xs), k, c, text, fmt(g))


for c in (0.0, np.inf, np.nan):
    for op in UNARY_F:
        if not op.startswith("is_"):
            line(op, {}, "-", [PTS], c)
    for op, attrs, text in WITH_ATTRS:
        line(op, attrs, text, [PTS], c)
    for op in [*BINARY_NUM, *BINARY_F]:
        line(op, {}, "-", [XS, YS], c)
