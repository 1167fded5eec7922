"""TensorFlow's values and gradients of the losses and normalisations on
rows with extreme logits (±inf, NaN, huge), constant rows, zeros and
ties, for tests/ops/tf_nn.rs.

Run: /work/refvenv/bin/python tf_nn.py > ../data/tf_nn.txt
(TensorFlow 2.21 with Keras 3.15, f64, CPU.)

Each line: `op|shape|inputs|value|grads`: `inputs` and `grads` one list
of floats (`,`) per operand (`;`), row-major in `shape` (the first
operand's; sparse labels are one per row); `grads` are d/d(operand) of
Σ w[i] y[i] with w[i] = 1 + i/2, `none` where TensorFlow gives none.
"""
import math
import os

os.environ["KERAS_BACKEND"] = "tensorflow"
import keras
import numpy as np
import tensorflow as tf

inf, nan = math.inf, math.nan
rng = np.random.default_rng(5)
ROWS = [
    [1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [5.0, 5.0, 5.0], [1e300, 1.0, -1e300], [-inf, 0.0, 1.0],
    [inf, 0.0, 1.0], [-inf, -inf, 0.0], [nan, 0.0, 1.0], [800.0, -800.0, 0.0], [1e-300, -1e-300, 0.0],
    [30.0, -30.0, 1e-8], list(np.round(rng.normal(0, 3, 3), 5)), list(np.round(rng.normal(0, 40, 3), 4)),
]
LABELS = [[0.2, 0.3, 0.5], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
PAIRS_X = [0.0, 1.0, -1.0, 30.0, -30.0, 800.0, -800.0, 1e300, -1e300, inf, -inf, nan, 1e-8]
PAIRS_Z = [0.0, 1.0, 0.3, 2.0, 5.0]


def fmt(v):
    return "none" if v is None else ",".join(repr(float(x)) for x in np.asarray(v).reshape(-1))


def case(name, f, arrays, shape):
    vs = [tf.Variable(np.array(a, dtype=np.float64)) for a in arrays]
    with tf.GradientTape() as tape:
        y = f(*vs)
        w = tf.constant(1.0 + 0.5 * np.arange(int(np.prod(y.shape))), dtype=tf.float64)
        s = tf.reduce_sum(tf.reshape(y, [-1]) * w)
    gs = tape.gradient(s, vs)
    print(f"{name}|{','.join(map(str, shape))}|{';'.join(fmt(a) for a in arrays)}|{fmt(y.numpy())}|"
          + ";".join(fmt(None if g is None else g.numpy()) for g in gs))


for row in ROWS:
    for lab in LABELS:
        case("softmax_xent", lambda z, x: tf.nn.softmax_cross_entropy_with_logits(z, x), [[lab], [row]], [1, 3])
    for c in range(3):
        x = tf.Variable(np.array([row], dtype=np.float64))
        with tf.GradientTape() as tape:
            y = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.constant([c]), x)
            s = tf.reduce_sum(y)
        g = tape.gradient(s, x)
        print(f"sparse_xent|1,3|{c}.0;{fmt([row])}|{fmt(y.numpy())}|none;{fmt(g.numpy())}")
    case("l2_normalize", lambda x: tf.math.l2_normalize(x, axis=-1), [[row]], [1, 3])
    case("layer_normalization", lambda x: keras.ops.layer_normalization(x, axis=-1, epsilon=1e-3), [[row]], [1, 3])
    case("rms_normalization", lambda x: keras.ops.rms_normalization(x, axis=-1, epsilon=1e-6), [[row]], [1, 3])
    case("moments_mean", lambda x: tf.nn.moments(x, axes=[1])[0], [[row]], [1, 3])
    case("moments_variance", lambda x: tf.nn.moments(x, axes=[1])[1], [[row]], [1, 3])

zs = [z for z in PAIRS_Z for _ in PAIRS_X]
xs = [x for _ in PAIRS_Z for x in PAIRS_X]
n = len(xs)
case("sigmoid_xent", lambda z, x: tf.nn.sigmoid_cross_entropy_with_logits(z, x), [zs, xs], [n])
case("weighted_xent", lambda z, x: tf.nn.weighted_cross_entropy_with_logits(z, x, 3.0), [zs, xs], [n])
case("log_poisson", lambda z, x: tf.nn.log_poisson_loss(z, x), [zs, xs], [n])
case("log_poisson_full", lambda z, x: tf.nn.log_poisson_loss(z, x, compute_full_loss=True), [zs, xs], [n])
