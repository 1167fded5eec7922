"""TensorFlow's values, gradients and second derivatives of the elementwise
ops at special points (signed zeros, ±1, tiny and huge, ±inf, NaN) and at
random ones, for tests/ops/tf_elementwise.rs.

Run: /work/refvenv/bin/python tf_elementwise.py > ../data/tf_elementwise.txt
(TensorFlow 2.21, f64, CPU.)

Each line: `op|inputs|value|grads|second|referee`, lists of floats (`,`)
per operand (`;`): unary ops at every point (`grads` d/dx of Σ f(x), `second`
d²/dx², `none` also where TensorFlow has no rule for it), binary ops on a grid of pairs (`grads` d/dx; d/dy of Σ f(x, y),
`second` empty); `none` where TensorFlow gives no gradient. `referee` is
mpmath's value, first and second derivative (`;`) of the unary ops that
TensorFlow computes less accurately than this crate (NaN where not
computed).
"""
import math

import mpmath as mp
import numpy as np
import tensorflow as tf

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.5, 3.7, -7.2, 10.0, -30.0, 1e-8, -1e-300,
           40.0, 1e3, -1e3, 1e300, -1e300, math.inf, -math.inf, math.nan,
           # beside the edges of atanh's, asin's, erfinv's and acosh's domains
           0.999999, -0.999999, 1 - 2**-40, -(1 - 2**-40), 1.000001, -1.000001]
rng = np.random.default_rng(7)
POINTS = SPECIAL + list(np.round(rng.normal(0.0, 3.0, 10), 6)) + list(np.round(rng.uniform(0.0, 1.0, 4), 6))

UNARY = {
    "neg": tf.negative, "abs": tf.abs, "sign": tf.sign, "square": tf.square, "sqrt": tf.sqrt,
    "exp": tf.exp, "log": tf.math.log, "sin": tf.sin, "cos": tf.cos, "tanh": tf.tanh,
    "sigmoid": tf.sigmoid, "relu": tf.nn.relu, "softplus": tf.math.softplus, "softsign": tf.nn.softsign,
    "relu6": tf.nn.relu6, "elu": tf.nn.elu, "selu": tf.nn.selu, "silu": tf.nn.silu,
    "expm1": tf.math.expm1, "log1p": tf.math.log1p, "rsqrt": tf.math.rsqrt,
    "reciprocal": tf.math.reciprocal, "erf": tf.math.erf, "erfc": tf.math.erfc,
    "floor": tf.floor, "ceil": tf.math.ceil, "round": tf.round, "lgamma": tf.math.lgamma,
    "digamma": tf.math.digamma, "erfinv": tf.math.erfinv, "ndtri": tf.math.ndtri,
    "bessel_i0e": tf.math.bessel_i0e, "bessel_i1e": tf.math.bessel_i1e,
    "log_sigmoid": tf.math.log_sigmoid, "tan": tf.tan, "asin": tf.asin, "acos": tf.acos,
    "atan": tf.atan, "sinh": tf.sinh, "cosh": tf.cosh, "asinh": tf.asinh, "acosh": tf.acosh,
    "atanh": tf.atanh, "gelu": lambda x: tf.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: tf.nn.gelu(x, approximate=True),
    "leaky_relu": lambda x: tf.nn.leaky_relu(x, 0.2),
}

# the referee where TensorFlow is off: mpmath at 40 digits (its
# derivatives by mpmath.diff), at finite points away from kinks
mp.mp.dps = 40
SELU_A, SELU_S = mp.mpf("1.6732632423543772848170429916717"), mp.mpf("1.0507009873554804934193349852946")
REF = {
    "tanh": mp.tanh, "sigmoid": lambda x: 1 / (1 + mp.exp(-x)), "softplus": lambda x: mp.log1p(mp.exp(x)),
    "softsign": lambda x: x / (1 + abs(x)), "elu": lambda x: x if x > 0 else mp.expm1(x),
    "selu": lambda x: SELU_S * (x if x > 0 else SELU_A * mp.expm1(x)), "erf": mp.erf,
    "lgamma": lambda x: mp.log(abs(mp.gamma(x))) if abs(x) < 100 else mp.re(mp.loggamma(x)),
    "digamma": mp.digamma, "erfinv": mp.erfinv,
    "bessel_i0e": lambda x: mp.exp(-abs(x)) * mp.besseli(0, x),
    "bessel_i1e": lambda x: mp.exp(-abs(x)) * mp.besseli(1, x),
    "log_sigmoid": lambda x: -mp.log1p(mp.exp(-x)), "asinh": mp.asinh,
    "gelu": lambda x: x * mp.ncdf(x),
    "gelu_tanh": lambda x: x / 2 * (1 + mp.tanh(mp.sqrt(2 / mp.pi) * (x + mp.mpf("0.044715") * x**3))),
    "leaky_relu": lambda x: x if x > 0 else x / 5,
    # (TensorFlow's slopes form 1 - x² from a rounded x², off by 5e-12 at 0.999999)
    "asin": mp.asin, "acos": mp.acos, "atanh": mp.atanh,
}


def referee(name, points):
    f = REF.get(name)
    rows = [[], [], []]
    for x in points:
        # (mpmath.diff steps badly at tiny and huge points: none there)
        ok = f is not None and 1e-6 <= abs(x) <= 1e4 and (name not in ("erfinv", "asin", "acos", "atanh") or abs(x) < 1)
        for k in range(3):
            try:
                v = float(mp.diff(f, mp.mpf(x), k)) if ok else math.nan
            except (ValueError, ZeroDivisionError, OverflowError):
                v = math.nan
            rows[k].append(v)
    return ";".join(fmt(r) for r in rows)


GRID = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -2.5, 3.0, 1e-8, 40.0, math.inf, -math.inf, math.nan]
BINARY = {
    "add": tf.add, "sub": tf.subtract, "mul": tf.multiply, "div": tf.math.truediv, "pow": tf.pow,
    "maximum": tf.maximum, "minimum": tf.minimum, "atan2": tf.atan2,
    "floor_div": tf.math.floordiv, "floor_mod": tf.math.floormod,
    "squared_difference": tf.math.squared_difference, "xlogy": tf.math.xlogy,
    "xlog1py": tf.math.xlog1py, "igamma": tf.math.igamma, "igammac": tf.math.igammac,
}


def fmt(v):
    return "none" if v is None else ",".join(repr(float(x)) for x in np.asarray(v).reshape(-1))


for name, f in UNARY.items():
    x = tf.Variable(np.array(POINTS, dtype=np.float64))
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = f(x)
            s = tf.reduce_sum(y)
        g = inner.gradient(s, x)
        gs = tf.reduce_sum(g) if g is not None else None
    try:
        h = outer.gradient(gs, x) if gs is not None else None
    except LookupError:  # no second-order rule registered (e.g. SoftsignGrad)
        h = None
    print(f"{name}|{fmt(x.numpy())}|{fmt(y.numpy())}|{fmt(None if g is None else g.numpy())}|{fmt(None if h is None else h.numpy())}|{referee(name, POINTS)}")

for name, f in BINARY.items():
    pairs = [(a, b) for a in GRID for b in GRID]
    x = tf.Variable(np.array([a for a, _ in pairs], dtype=np.float64))
    y = tf.Variable(np.array([b for _, b in pairs], dtype=np.float64))
    with tf.GradientTape() as tape:
        z = f(x, y)
        s = tf.reduce_sum(z)
    gx, gy = tape.gradient(s, [x, y])
    gx = None if gx is None else gx.numpy()
    gy = None if gy is None else gy.numpy()
    print(f"{name}|{fmt(x.numpy())};{fmt(y.numpy())}|{fmt(z.numpy())}|{fmt(gx)};{fmt(gy)}||")
