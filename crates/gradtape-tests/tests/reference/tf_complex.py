"""TensorFlow's values and gradients of the complex functions at edge
points (the branch cut of log and sqrt from both sides, zero, the axes,
huge and tiny moduli, infinities), for tests/ops/tf_complex.rs.

Run: /work/refvenv/bin/python tf_complex.py > ../data/tf_complex.txt
(TensorFlow 2.21, complex128, CPU.)

Each line: `op|z|value|grad`, complex numbers as `re,im` pairs joined
by `;`; `grad` is `tape.gradient(y, z, output_gradients=w)` with
w[i] = (1 + i/2) − 0.5i·(i mod 3), TensorFlow's convention (the
conjugate of the cotangent's Wirtinger product).
"""
import math

import numpy as np
import tensorflow as tf

inf = math.inf
PTS = [
    (0.0, 0.0), (-1.0, 0.0), (-1.0, -0.0), (-4.0, 1e-300), (-4.0, -1e-300), (2.0, 0.0), (0.0, 3.0),
    (0.0, -3.0), (1e-200, 1e-200), (1e200, -1e200), (0.5, 0.5), (-2.5, 1.5), (30.0, 1.0), (-30.0, 1.0),
    (1.0, 30.0), (800.0, 0.0), (inf, 0.0), (0.0, inf),
]
OPS = {
    "sqrt": tf.sqrt, "rsqrt": tf.math.rsqrt, "reciprocal": tf.math.reciprocal, "exp": tf.exp,
    "log": tf.math.log, "sin": tf.sin, "cos": tf.cos, "tan": tf.tan, "sinh": tf.sinh, "cosh": tf.cosh,
    "tanh": tf.tanh, "sigmoid": tf.sigmoid, "square": tf.square,
    "abs": lambda z: tf.cast(tf.abs(z), tf.complex128),
    "angle": lambda z: tf.cast(tf.math.angle(z), tf.complex128),
    "conj": tf.math.conj,
}


def fmt(v):
    return ";".join(f"{float(np.real(x))!r},{float(np.imag(x))!r}" for x in np.asarray(v).reshape(-1))


z0 = np.array([complex(a, b) for a, b in PTS])
w = np.array([complex(1 + 0.5 * i, -0.5 * (i % 3)) for i in range(len(PTS))])
for name, f in OPS.items():
    z = tf.Variable(z0)
    with tf.GradientTape() as tape:
        y = f(z)
    g = tape.gradient(y, z, output_gradients=tf.constant(w))
    print(f"{name}|{fmt(z0)}|{fmt(y.numpy())}|{fmt(g.numpy())}")
