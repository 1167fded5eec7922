"""Keras 3's further activations (TensorFlow 2.21 backend) at ordinary
points, at their kinks and at extreme inputs, in f32 and f64, with JAX
(f64) and mpmath beside them, for tests/ops/tf_activations_more.rs; and a
Dense layer with each of them against Keras, for tests/nn/dense_activations.rs.

Run: /work/refvenv/bin/python tf_activations_more.py
(writes ../data/tf_activations_more.txt and ../data/keras_dense_activations.txt;
TensorFlow 2.21, Keras 3, JAX, mpmath, CPU.)

The points: ordinary ones (±0.7, ±1.3, ±2.5), the kinks of the piecewise
ops (0, ±0.5, ±1, ±3, 6), and the extremes 0, -0, ±1e-30, ±20, ±40, ±88,
±700, ±max/2, ±max of the dtype, ±inf and NaN (f32 points are f32
numbers, printed exactly as doubles).

Each line of the first file, as tf_activations_extreme.txt's:
`op|dtype|points|value|d1|d2|jax_value|jax_d1|jax_d2|exact_value|exact_d1|exact_d2`:
`d1` the gradient of `Σ w·y`, `d2` the gradient of `Σ w·d1` (nested
tapes), `w[i] = 1 + i/2` over the flattened tensor; `none` where
TensorFlow has no second-order rule. `glu_a` and `glu_b` take rows
`[p, 0.5]` and `[0.5, p]` (glu over the last axis). The JAX columns are
the same quantities in f64 (Keras's definitions written in jax.numpy,
jax.grad of jax.grad), the exact columns mpmath's closed forms (NaN at the
kinks, at 0, ±inf and NaN, and for glu). PyTorch is not needed: every op
here is in Keras 3 (the tests say where PyTorch's `hardtanh`, `softshrink`
and `celu` differ).
"""
import math
import os

import mpmath as mp
import numpy as np
import tensorflow as tf
import keras

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

A = keras.activations
HERE = os.path.dirname(os.path.abspath(__file__))


def points(dtype):
    fi = np.finfo(dtype)
    mx = float(fi.max)
    pos = [1e-30, 0.5, 0.7, 1.0, 1.3, 2.5, 3.0, 20.0, 40.0, 88.0, 700.0, mx / 2, mx, math.inf]
    out = [0.0, -0.0]
    for p in pos:
        out += [p, -p]
    out += [6.0, math.nan]
    return [float(dtype(p)) for p in out]


def keras_relu(**kw):
    return lambda x: A.relu(x, **kw)


TF = {
    "hard_sigmoid": A.hard_sigmoid,
    "hard_silu": A.hard_silu,
    "mish": A.mish,
    "celu": A.celu,
    "celu_half": lambda x: A.celu(x, alpha=0.5),
    "exponential": A.exponential,
    "relu_slope": keras_relu(negative_slope=0.25),
    "relu_cap": keras_relu(max_value=2.5),
    "relu_cap6": keras_relu(max_value=6.0),
    "relu_threshold": keras_relu(threshold=1.0),
    "relu_all": keras_relu(negative_slope=0.25, max_value=2.5, threshold=1.0),
    "hard_tanh": A.hard_tanh,
    "soft_shrink": A.soft_shrink,
    "hard_shrink": A.hard_shrink,
    "tanh_shrink": A.tanh_shrink,
    "glu_a": A.glu,
    "glu_b": A.glu,
    "sparse_plus": A.sparse_plus,
    "squareplus": A.squareplus,
    "squareplus_half": lambda x: A.squareplus(x, b=0.5),
}


def j_relu(negative_slope=0.0, max_value=None, threshold=0.0):
    # Keras's ReLU.static_call in jax.numpy
    def f(x):
        if negative_slope != 0.0 and max_value is None and threshold == 0:
            return jnp.where(x > 0, x, negative_slope * x)
        neg = jax.nn.relu(-x + threshold) if negative_slope != 0.0 else 0.0
        clip = max_value is not None
        if threshold != 0:
            y = jnp.where(x > threshold, x, 0.0)
        elif max_value == 6:
            y = jax.nn.relu6(x)
            clip = False
        else:
            y = jax.nn.relu(x)
        if clip:
            y = jnp.clip(y, 0.0, max_value)
        return y - negative_slope * neg
    return f


def j_celu(alpha):
    return lambda x: jnp.maximum(x, 0.0) + alpha * jnp.expm1(jnp.minimum(x, 0.0) / alpha)


def j_squareplus(b):
    return lambda x: (x + jnp.sqrt(jnp.square(x) + b)) / 2


def j_glu(x):
    a, b = jnp.split(x, 2, axis=-1)
    return a * jax.nn.sigmoid(b)


JAX = {
    "hard_sigmoid": lambda x: jax.nn.relu6(x + 3.0) / 6.0,
    "hard_silu": lambda x: x * (jax.nn.relu6(x + 3.0) / 6.0),
    "mish": lambda x: x * jnp.tanh(jax.nn.softplus(x)),
    "celu": j_celu(1.0),
    "celu_half": j_celu(0.5),
    "exponential": jnp.exp,
    "relu_slope": j_relu(negative_slope=0.25),
    "relu_cap": j_relu(max_value=2.5),
    "relu_cap6": j_relu(max_value=6.0),
    "relu_threshold": j_relu(threshold=1.0),
    "relu_all": j_relu(negative_slope=0.25, max_value=2.5, threshold=1.0),
    "hard_tanh": lambda x: jnp.clip(x, -1.0, 1.0),
    "soft_shrink": lambda x: jnp.where(x > 0.5, x - 0.5, jnp.where(x < -0.5, x + 0.5, 0.0)),
    "hard_shrink": lambda x: jnp.where(jnp.abs(x) > 0.5, x, 0.0),
    "tanh_shrink": lambda x: x - jnp.tanh(x),
    "glu_a": j_glu,
    "glu_b": j_glu,
    "sparse_plus": lambda x: jnp.where(x <= -1, 0.0, jnp.where(x < 1, 0.25 * (x + 1) ** 2, x)),
    "squareplus": j_squareplus(4.0),
    "squareplus_half": j_squareplus(0.5),
}

ROWS = {"glu_a", "glu_b"}

# mpmath's closed forms of f, f', f'' (None: not computed there, at a kink)
mp.mp.dps = 60


def sig(x):
    return 1 / (1 + mp.exp(-x))


def mish(x):
    e = mp.exp(x)
    n = e * (e + 2)
    t, u = n / (n + 2), 2 / (n + 2)  # tanh(softplus x) and 1 − t
    q = u * (1 + t)  # 1 − t²
    s, sn = sig(x), sig(-x)
    return x * t, t + x * s * q, 2 * q * s + q * x * s * (sn - 2 * t * s)


def celu(alpha):
    def f(x):
        if x > 0:
            return x, 1, 0
        e = mp.exp(x / alpha)
        return alpha * mp.expm1(x / alpha), e, e / alpha
    return f


def piecewise(kinks, f):
    """`f` (value, d1, d2) away from `kinks`; None at them."""
    return lambda x: None if x in kinks else f(x)


def relu_exact(slope, cap, thr):
    def f(x):
        if x > thr:
            return (x, 1, 0) if cap is None or x < cap else (cap, 0, 0)
        return slope * (x - thr), slope, 0
    kinks = {thr} | ({cap} if cap is not None else set())
    return piecewise(kinks, f)


def tanh_shrink(x):
    with mp.workdps(400):  # (x − tanh x cancels near 0)
        t = mp.tanh(x)
        return x - t, t * t, 2 * t * (1 - t * t)


def squareplus(b):
    def f(x):
        r = mp.sqrt(x * x + b)
        if x >= 0:
            return (x + r) / 2, (1 + x / r) / 2, b / (2 * r**3)
        # (x + r = b/(r − x): no cancellation for x ≪ 0)
        return b / (2 * (r - x)), b / (2 * r * (r - x)), b / (2 * r**3)
    return f


EXACT = {
    "hard_sigmoid": piecewise({-3, 3}, lambda x: (min(max(x + 3, 0), 6) / mp.mpf(6), mp.mpf(1) / 6 if -3 < x < 3 else 0, 0)),
    "hard_silu": piecewise({-3, 3}, lambda x: (0, 0, 0) if x < -3 else (x, 1, 0) if x > 3
                           else (x * (x + 3) / 6, (2 * x + 3) / 6, mp.mpf(1) / 3)),
    "mish": mish,
    "celu": celu(mp.mpf(1)),
    "celu_half": celu(mp.mpf("0.5")),
    "exponential": lambda x: (mp.exp(x),) * 3,
    "relu_slope": relu_exact(mp.mpf("0.25"), None, 0),
    "relu_cap": relu_exact(0, mp.mpf("2.5"), 0),
    "relu_cap6": relu_exact(0, mp.mpf(6), 0),
    "relu_threshold": relu_exact(0, None, 1),
    "relu_all": relu_exact(mp.mpf("0.25"), mp.mpf("2.5"), 1),
    "hard_tanh": piecewise({-1, 1}, lambda x: (max(min(x, 1), -1), 1 if -1 < x < 1 else 0, 0)),
    "soft_shrink": piecewise({-0.5, 0.5}, lambda x: (x - mp.mpf("0.5"), 1, 0) if x > 0.5
                             else (x + mp.mpf("0.5"), 1, 0) if x < -0.5 else (0, 0, 0)),
    "hard_shrink": piecewise({-0.5, 0.5}, lambda x: (x, 1, 0) if abs(x) > 0.5 else (0, 0, 0)),
    "tanh_shrink": tanh_shrink,
    "sparse_plus": piecewise({-1, 1}, lambda x: (0, 0, 0) if x < -1 else (x, 1, 0) if x > 1
                             else ((x + 1) ** 2 / 4, (x + 1) / 2, mp.mpf("0.5"))),
    "squareplus": squareplus(mp.mpf(4)),
    "squareplus_half": squareplus(mp.mpf("0.5")),
}


def to_float(v):
    """`v` rounded to a double (±inf beyond the largest)."""
    v = mp.mpf(v)
    return float(v) if abs(v) <= mp.mpf(np.finfo(np.float64).max) else math.copysign(math.inf, v)


def inputs(name, pts):
    if name == "glu_a":
        return np.array([[p, 0.5] for p in pts])
    if name == "glu_b":
        return np.array([[0.5, p] for p in pts])
    return np.array(pts)


def weights(n):
    return np.array([1.0 + 0.5 * i for i in range(n)])


def w_like(t, dtype):
    """`1 + i/2` over the flattened `t`, in `t`'s shape."""
    return tf.constant(weights(int(np.prod(t.shape))).reshape(t.shape), dtype=dtype)


def exact_row(name, pts):
    f = EXACT.get(name)
    if f is None:
        return [[math.nan] * inputs(name, pts).size] * 3
    rows = [[], [], []]
    for i, p in enumerate(pts):
        w = mp.mpf(1 + 0.5 * i)
        v = f(mp.mpf(p)) if math.isfinite(p) and p != 0 else None
        for k in range(3):
            rows[k].append(math.nan if v is None else to_float(v[k] * w**k))
    return rows


def fmt(v):
    return "none" if v is None else ",".join(repr(float(x)) for x in np.asarray(v).reshape(-1))


def tf_row(name, dtype, pts):
    f = TF[name]
    x = tf.Variable(inputs(name, pts).astype(dtype))
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = f(x)
            s = tf.reduce_sum(w_like(y, dtype) * y)
        g = inner.gradient(s, x)
        gs = tf.reduce_sum(w_like(g, dtype) * g)
    try:
        h = outer.gradient(gs, x)
    except LookupError:  # no second-order rule registered
        h = None
    return y.numpy(), g.numpy(), None if h is None else h.numpy()


def jax_row(name, pts):
    f = JAX[name]
    x = jnp.asarray(inputs(name, pts), dtype=jnp.float64)

    def s(x):
        y = f(x)
        return jnp.sum(jnp.asarray(weights(y.size).reshape(y.shape)) * y)

    g = jax.grad(s)

    def gs(x):
        d = g(x)
        return jnp.sum(jnp.asarray(weights(d.size).reshape(d.shape)) * d)

    return np.asarray(f(x)), np.asarray(g(x)), np.asarray(jax.grad(gs)(x))


def activations_fixture():
    lines = []
    for name in TF:
        for dtype, label in [(np.float32, "f32"), (np.float64, "f64")]:
            pts = points(dtype)
            y, g, h = tf_row(name, dtype, pts)
            jy, jg, jh = jax_row(name, pts)
            flat = inputs(name, pts).reshape(-1)
            if name in ROWS:
                ey = eg = eh = [math.nan] * flat.size
            else:
                ey, eg, eh = exact_row(name, pts)
            lines.append(f"{name}|{label}|{fmt(flat)}|{fmt(y)}|{fmt(g)}|{fmt(h)}|{fmt(jy)}|{fmt(jg)}|{fmt(jh)}|"
                         f"{fmt(ey)}|{fmt(eg)}|{fmt(eh)}")
    return lines


# Keras's activation names with the layer's arguments (glu halves the
# 4 units to 2)
DENSE = [
    "hard_sigmoid", "hard_silu", "hard_swish", "mish", "celu", "exponential", "hard_tanh", "soft_shrink",
    "hard_shrink", "tanh_shrink", "glu", "sparse_plus", "squareplus", "softsign", "log_sigmoid", "log_softmax",
]


def dense_fixture():
    rng = np.random.default_rng(7)
    x = rng.uniform(-2, 2, size=(3, 5))
    kernel = rng.uniform(-1.5, 1.5, size=(5, 4))
    bias = rng.uniform(-0.5, 0.5, size=(4,))
    lines = [f"x|{fmt(x)}", f"kernel|{fmt(kernel)}", f"bias|{fmt(bias)}"]
    for name in DENSE + ["relu_args"]:
        act = (lambda t: A.relu(t, negative_slope=0.25, max_value=2.5, threshold=0.5)) if name == "relu_args" else name
        layer = keras.layers.Dense(4, activation=act, dtype="float64")
        layer.build((None, 5))
        layer.set_weights([kernel, bias])
        y = layer(x).numpy()
        lines.append(f"{name}|{'x'.join(map(str, y.shape))}|{fmt(y)}")
    return lines


if __name__ == "__main__":
    data = os.path.join(HERE, "..", "data")
    with open(os.path.join(data, "tf_activations_more.txt"), "w") as f:
        f.write("\n".join(activations_fixture()) + "\n")
    with open(os.path.join(data, "keras_dense_activations.txt"), "w") as f:
        f.write("\n".join(dense_fixture()) + "\n")
