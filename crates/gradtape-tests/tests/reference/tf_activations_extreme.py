"""TensorFlow's values, first and second derivatives of the activation
functions at extreme inputs, in f32 and f64, with JAX (f64) beside them as
the referee, for tests/ops/tf_activations_extreme.rs.

Run: /work/refvenv/bin/python tf_activations_extreme.py > ../data/tf_activations_extreme.txt
(TensorFlow 2.21 and JAX 0.10, CPU.)

The points: 0, -0, the smallest subnormal, ±1e-30, ±1, ±20, ±40, ±88,
±700, ±max/4, ±max/2, ±max of the dtype, ±inf and NaN (f32 points are
f32 numbers, printed exactly as doubles).

Each line: `op|dtype|points|value|d1|d2|jax_value|jax_d1|jax_d2|exact_value|exact_d1|exact_d2`,
lists of floats (`,`): `d1` is the gradient of `Σ w·y` and `d2` the
gradient of `Σ w·d1` (nested tapes), `w[i] = 1 + i/2` over the flattened
tensor (so `w·f'(x)` and `w²·f''(x)` for the elementwise ops: weights
above 1 make a product of the cotangent and a huge `x` overflow where a
rule is written so); `none` where TensorFlow has no rule (SoftsignGrad).
`softmax` and `log_softmax` take rows `[p, 1]` (an `[n, 2]` tensor, last
axis). The JAX columns are the same quantities in f64 at the same points
(jax.nn's functions, jax.grad of jax.grad), the referee where TensorFlow
is known to be wrong; the exact columns mpmath's (NaN where not computed:
at 0, ±inf, NaN, and for the softmaxes).
"""
import math

import mpmath as mp
import numpy as np
import tensorflow as tf

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

ALPHA = 0.25  # leaky_relu's slope (exact in f32: TF's attribute is a float)


def points(dtype):
    fi = np.finfo(dtype)
    tiny = float(np.nextafter(dtype(0), dtype(1)))
    mx = float(fi.max)
    pos = [tiny, 1e-30, 1.0, 20.0, 40.0, 88.0, 700.0, mx / 4, mx / 2, mx, math.inf]
    out = [0.0, -0.0]
    for p in pos:
        out += [p, -p]
    out.append(math.nan)
    return [float(dtype(p)) for p in out]


TF = {
    "relu": tf.nn.relu,
    "relu6": tf.nn.relu6,
    "leaky_relu": lambda x: tf.nn.leaky_relu(x, ALPHA),
    "elu": tf.nn.elu,
    "selu": tf.nn.selu,
    "softplus": tf.math.softplus,
    "softsign": tf.nn.softsign,
    "sigmoid": tf.math.sigmoid,
    "log_sigmoid": tf.math.log_sigmoid,
    "tanh": tf.math.tanh,
    "silu": tf.nn.silu,
    "gelu": lambda x: tf.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: tf.nn.gelu(x, approximate=True),
    "softmax": lambda x: tf.nn.softmax(x, axis=-1),
    "log_softmax": lambda x: tf.nn.log_softmax(x, axis=-1),
}

JAX = {
    "relu": jax.nn.relu,
    "relu6": jax.nn.relu6,
    "leaky_relu": lambda x: jax.nn.leaky_relu(x, ALPHA),
    "elu": jax.nn.elu,
    "selu": jax.nn.selu,
    "softplus": jax.nn.softplus,
    "softsign": jax.nn.soft_sign,
    "sigmoid": jax.nn.sigmoid,
    "log_sigmoid": jax.nn.log_sigmoid,
    "tanh": jnp.tanh,
    "silu": jax.nn.silu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "softmax": lambda x: jax.nn.softmax(x, axis=-1),
    "log_softmax": lambda x: jax.nn.log_softmax(x, axis=-1),
}

ROWS = {"softmax", "log_softmax"}

# the exact numbers (mpmath, 60 digits, closed forms of f, f', f''), the
# referee where TensorFlow and JAX both compute less accurately (their
# sigmoid' is y(1 - y), which cancels for x >> 0), at finite points of the
# smooth functions away from their kinks
mp.mp.dps = 60
SELU_A = mp.mpf("1.6732632423543772848170429916717")
SELU_S = mp.mpf("1.0507009873554804934193349852946")
GC, GA = mp.sqrt(2 / mp.pi), mp.mpf("0.044715")


def sig(x):
    return 1 / (1 + mp.exp(-x))


def gelu_tanh(x):
    # (1 + tanh u = 2σ(2u) and sech²u = 4σ(2u)σ(−2u): no cancellation)
    u, du, ddu = GC * (x + GA * x**3), GC * (1 + 3 * GA * x**2), 6 * GA * GC * x
    s, sn = sig(2 * u), sig(-2 * u)
    t, sech2 = s - sn, 4 * s * sn
    d1 = s + x / 2 * sech2 * du
    d2 = sech2 * du + x / 2 * (-2 * t * sech2 * du**2 + sech2 * ddu)
    return x * s, d1, d2


EXACT = {
    "relu": lambda x: (max(x, 0), 1 if x > 0 else 0, 0),
    "relu6": lambda x: (min(max(x, 0), 6), 1 if 0 < x < 6 else 0, 0),
    "leaky_relu": lambda x: (x if x > 0 else ALPHA * x, 1 if x > 0 else ALPHA, 0),
    "sigmoid": lambda x: (sig(x), sig(x) * sig(-x), sig(x) * sig(-x) * (sig(-x) - sig(x))),
    "log_sigmoid": lambda x: (-mp.log1p(mp.exp(-x)), sig(-x), -sig(x) * sig(-x)),
    "softplus": lambda x: (mp.log1p(mp.exp(x)), sig(x), sig(x) * sig(-x)),
    "tanh": lambda x: (mp.tanh(x), 1 / mp.cosh(x) ** 2, -2 * mp.tanh(x) / mp.cosh(x) ** 2),
    "silu": lambda x: (x * sig(x), sig(x) * (1 + x * sig(-x)), sig(x) * sig(-x) * (2 + x * (sig(-x) - sig(x)))),
    # (mpmath's erfc fails beyond 1e4, where Φ is 0 or 1 in every float type)
    "gelu": lambda x: (x * mp.ncdf(x), mp.ncdf(x) + x * mp.npdf(x), mp.npdf(x) * (2 - x * x)) if abs(x) < 1e4
    else ((x, 1, 0) if x > 0 else (0, 0, 0)),
    "gelu_tanh": gelu_tanh,
    "elu": lambda x: (x, 1, 0) if x > 0 else (mp.expm1(x), mp.exp(x), mp.exp(x)),
    "selu": lambda x: (SELU_S * x, SELU_S, 0) if x > 0 else
    (SELU_S * SELU_A * mp.expm1(x), SELU_S * SELU_A * mp.exp(x), SELU_S * SELU_A * mp.exp(x)),
    "softsign": lambda x: (x / (1 + abs(x)), 1 / (1 + abs(x)) ** 2, -2 * mp.sign(x) / (1 + abs(x)) ** 3),
}


def to_float(v):
    """`v` rounded to a double (±inf beyond the largest)."""
    v = mp.mpf(v)
    return float(v) if abs(v) <= mp.mpf(np.finfo(np.float64).max) else math.copysign(math.inf, v)


def exact_row(name, pts):
    f = EXACT.get(name)
    if f is None:
        return [[math.nan] * inputs(name, pts).size] * 3
    rows = [[], [], []]
    for i, p in enumerate(pts):
        w = mp.mpf(1 + 0.5 * i)
        ok = math.isfinite(p) and p != 0
        v = f(mp.mpf(p)) if ok else None
        for k in range(3):
            rows[k].append(to_float(v[k] * w**k) if ok else math.nan)
    return rows


def fmt(v):
    return "none" if v is None else ",".join(repr(float(x)) for x in np.asarray(v).reshape(-1))


def inputs(name, pts):
    if name in ROWS:
        return np.array([[p, 1.0] for p in pts]).reshape(-1, 2)
    return np.array(pts)


def weights(n):
    return np.array([1.0 + 0.5 * i for i in range(n)])


def tf_row(name, dtype, pts):
    f = TF[name]
    x = tf.Variable(inputs(name, pts).astype(dtype))
    n = int(np.prod(x.shape))
    w = tf.constant(weights(n).reshape(x.shape), dtype=dtype)
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = f(x)
            s = tf.reduce_sum(w * y)
        g = inner.gradient(s, x)
        gs = tf.reduce_sum(w * g)
    try:
        h = outer.gradient(gs, x)
    except LookupError:  # no second-order rule registered (SoftsignGrad)
        h = None
    return y.numpy(), g.numpy(), None if h is None else h.numpy()


def jax_row(name, pts):
    f = JAX[name]
    x = jnp.asarray(inputs(name, pts), dtype=jnp.float64)
    w = jnp.asarray(weights(x.size).reshape(x.shape))

    def s(x):
        return jnp.sum(w * f(x))

    g = jax.grad(s)

    def gs(x):
        return jnp.sum(w * g(x))

    return np.asarray(f(x)), np.asarray(g(x)), np.asarray(jax.grad(gs)(x))


for name in TF:
    for dtype, label in [(np.float32, "f32"), (np.float64, "f64")]:
        pts = points(dtype)
        y, g, h = tf_row(name, dtype, pts)
        jy, jg, jh = jax_row(name, pts)
        flat = inputs(name, pts).reshape(-1)
        ey, eg, eh = exact_row(name, pts)
        print(f"{name}|{label}|{fmt(flat)}|{fmt(y)}|{fmt(g)}|{fmt(h)}|{fmt(jy)}|{fmt(jg)}|{fmt(jh)}|"
              f"{fmt(ey)}|{fmt(eg)}|{fmt(eh)}")
