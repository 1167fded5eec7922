"""TensorFlow's values and gradients of the complex binary ops and of the
cumulative, sorting and indexing ops at edge points, for
tests/ops/tf_complex_index.rs.

Run: /work/refvenv/bin/python tf_complex_index.py > ../data/tf_complex_index.txt
(TensorFlow 2.21 CPU. Where TensorFlow's gradient divides by the input
and so is wrong at zeros and infinities, a referee's replaces it: JAX in
f64 for cumprod, the product rule by brute force for the segment
products.)

Lines of three kinds:
- `c2|op|dtype|a|b|value|ga|gb`: complex binary ops (`a`, `b` complex
  lists, `re,im` pairs joined by `;`); `ga`, `gb` are
  `tape.gradient(y, [a, b], output_gradients=w)` with
  w[i] = (1 + i/2) − 0.5i·(i mod 3), TensorFlow's convention.
- `c1|op|dtype|z|value|grad`: complex unary ops, the same cotangent
  (`abs` and `angle` cast to the complex dtype first).
- `r|op|x|value|grad|referee`: real (f64) ops of the watched `x` (shapes
  and the other arguments are fixed per op, in both files); `value` the
  flattened outputs as floats (indices and counts too, several outputs
  joined), `grad` d/dx of Σ w[i] y[i] with w[i] = 1 + i/2 over the first
  output (`none`: not differentiable); `referee` says whose gradient it
  is (`tf`; `jax` or `rule` where TensorFlow's differs from theirs).
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf

jax.config.update("jax_enable_x64", True)
inf, nan = math.inf, math.nan


def cfmt(v):
    return ";".join(f"{float(np.real(x))!r},{float(np.imag(x))!r}" for x in np.asarray(v).reshape(-1))


def ffmt(v):
    return ",".join(repr(float(x)) for x in np.asarray(v).reshape(-1))


def weights(n, dtype):
    return tf.constant([complex(1 + 0.5 * i, -0.5 * (i % 3)) for i in range(n)], dtype)


# ---- complex binary ops: pairs (a, b) ----
PAIRS = [
    ((1, 2), (3, -1)), ((0, 0), (0, 0)), ((-0.0, -0.0), (1, 0)), ((0, 0), (2, 0)), ((0, 0), (-1, 0.5)),
    ((1e200, 1e200), (1e200, -1e200)), ((1e-200, 1e-200), (1e-200, 3e-200)), ((1e300, 0), (1e-300, 1e-300)),
    ((inf, 0), (1, 1)), ((nan, 0), (1, 0)), ((-1, 0), (0.5, 0)), ((-1, -0.0), (0.5, 0)), ((-8, 0), (1 / 3, 0)),
    ((2, 0), (-1, 0)), ((0, 1), (0, 1)), ((-2.5, 1e-300), (1.5, -0.5)), ((-2.5, -1e-300), (1.5, -0.5)),
    ((3, 4), (0, 0)), ((1, 0), (inf, 0)), ((1e-30, 0), (0.25, 2)),
]
# pairs the c64 lines use (those representable in float32)
PAIRS32 = [p for p in PAIRS if all(abs(v) == 0 or 1e-30 <= abs(v) <= 1e30 or not math.isfinite(v)
                                     for z in p for v in z)]
BINARY = {"add": tf.add, "sub": tf.subtract, "mul": tf.multiply, "div": tf.divide, "pow": tf.pow}

for dtype, pairs in [(tf.complex128, PAIRS), (tf.complex64, PAIRS32)]:
    a0 = tf.constant([complex(*p[0]) for p in pairs], dtype)
    b0 = tf.constant([complex(*p[1]) for p in pairs], dtype)
    w = weights(len(pairs), dtype)
    for name, f in BINARY.items():
        a, b = tf.Variable(a0), tf.Variable(b0)
        with tf.GradientTape() as tape:
            y = f(a, b)
        ga, gb = tape.gradient(y, [a, b], output_gradients=w)
        print(f"c2|{name}|{dtype.name}|{cfmt(a0)}|{cfmt(b0)}|{cfmt(y)}|{cfmt(ga)}|{cfmt(gb)}")
    # broadcasting: a [n] with b a scalar (b's gradient sums over a)
    for name, f in BINARY.items():
        a, b = tf.Variable(a0), tf.Variable(tf.constant([complex(0.5, -1.5)], dtype))
        with tf.GradientTape() as tape:
            y = f(a, b[0])
        ga, gb = tape.gradient(y, [a, b], output_gradients=w)
        print(f"c2|{name}_bcast|{dtype.name}|{cfmt(a0)}|{cfmt(b.numpy())}|{cfmt(y)}|{cfmt(ga)}|{cfmt(gb)}")

# ---- complex unary ops ----
PTS = [
    (0.0, 0.0), (-0.0, 0.0), (0.0, -0.0), (-0.0, -0.0), (-1.0, 0.0), (-1.0, -0.0), (-4.0, 1e-30), (-4.0, -1e-30),
    (2.0, 0.0), (0.0, 3.0), (0.0, -3.0), (1e-20, 1e-20), (1e20, -1e20), (0.5, 0.5), (-2.5, 1.5),
    (3e-39, 0.0), (1e30, 1e30), (inf, 0.0), (0.0, inf), (-inf, 0.0), (nan, 0.0), (0.0, nan), (inf, inf),
]
UNARY = {
    "abs": lambda z: tf.cast(tf.abs(z), z.dtype), "angle": lambda z: tf.cast(tf.math.angle(z), z.dtype),
    "sqrt": tf.sqrt, "log": tf.math.log, "reciprocal": tf.math.reciprocal,
    "pow_scalar:2": lambda z: tf.pow(z, tf.cast(2.0, z.dtype)), "pow_scalar:0.5": lambda z: tf.pow(z, tf.cast(0.5, z.dtype)),
    "pow_scalar:-1": lambda z: tf.pow(z, tf.cast(-1.0, z.dtype)), "pow_scalar:0": lambda z: tf.pow(z, tf.cast(0.0, z.dtype)),
    "pow_scalar:3": lambda z: tf.pow(z, tf.cast(3.0, z.dtype)),
}
for dtype in [tf.complex128, tf.complex64]:
    z0 = tf.constant([complex(*p) for p in PTS], dtype)
    w = weights(len(PTS), dtype)
    for name, f in UNARY.items():
        z = tf.Variable(z0)
        with tf.GradientTape() as tape:
            y = f(z)
        g = tape.gradient(y, z, output_gradients=w)
        print(f"c1|{name}|{dtype.name}|{cfmt(z0)}|{cfmt(y)}|{cfmt(g)}")

# exp where e^re overflows but e^re·cos(im) does not (and its gradient);
# complex128 only: TensorFlow's complex64 exp overflows there itself
# (inf + inf i at 89 + 1.5i, where e^89·cos 1.5 = 3.2e37)
for dtype, pts in [(tf.complex128, [(710.0, 1.5), (709.9, -3.0), (740.0, 1.5707963267948966), (-750.0, 1.0),
                                    (1.0, 2.0), (1400.0, 1e-300)])]:
    z = tf.Variable(tf.constant([complex(*p) for p in pts], dtype))
    with tf.GradientTape() as tape:
        y = tf.exp(z)
    g = tape.gradient(y, z, output_gradients=weights(len(pts), dtype))
    print(f"c1|exp|{dtype.name}|{cfmt(z.numpy())}|{cfmt(y)}|{cfmt(g)}")


# ---- real ops (f64) ----
def line(name, x, f, referee_grad=None):
    xv = tf.Variable(tf.constant(x, tf.float64))
    with tf.GradientTape() as tape:
        ys = f(xv)
        if not isinstance(ys, (tuple, list)):
            ys = [ys]
        y0 = tf.reshape(tf.cast(ys[0], tf.float64), [-1])
        s = tf.reduce_sum(y0 * tf.constant([1 + 0.5 * i for i in range(int(tf.size(y0)))], tf.float64))
    try:
        g = tape.gradient(s, xv) if ys[0].dtype == tf.float64 else None
    except LookupError:  # no gradient registered (bincount's weights)
        g = None
    value = ",".join(ffmt(tf.cast(y, tf.float64).numpy()) for y in ys if tf.size(y) > 0) or "empty"
    referee = "tf"
    if referee_grad is not None:
        who, rg = referee_grad
        tg = None if g is None else tf.convert_to_tensor(g).numpy()
        if tg is None or not np.allclose(tg, rg, rtol=1e-13, atol=0.0, equal_nan=True):
            g, referee = rg, who
    grad = "none" if g is None else ffmt(tf.convert_to_tensor(g).numpy())
    print(f"r|{name}|{ffmt(np.asarray(x))}|{value}|{grad}|{referee}")


def jax_grad(f, x):
    x = jnp.asarray(x, jnp.float64)
    n = f(x).size
    w = jnp.asarray([1 + 0.5 * i for i in range(n)], jnp.float64)
    return np.asarray(jax.grad(lambda v: jnp.sum(f(v).reshape(-1) * w))(x))


def jax_cumprod(x, exclusive, reverse):
    if reverse:
        return jnp.flip(jax_cumprod(jnp.flip(x, 1), exclusive, False), 1)
    if exclusive:
        x = jnp.concatenate([jnp.ones_like(x[:, :1]), x[:, :-1]], 1)
    return jnp.cumprod(x, 1)


M = [[1.5, -0.0, inf, 2.0], [-3.0, nan, 0.5, 1e300]]
for ex in [False, True]:
    for rev in [False, True]:
        for ax in [0, 1]:
            line(f"cumsum:{ax}:{int(ex)}:{int(rev)}", M, lambda x: tf.cumsum(x, ax, exclusive=ex, reverse=rev))
CUMPROD = [[[2.0, 0.0, 3.0, 4.0]], [[0.0, 2.0, 0.0, 5.0]], [[0.0, 0.0, 0.0, 3.0]], [[3.0, 4.0, 5.0, 0.0]],
           [[1.5, -2.0, 0.5, 3.0]], [[0.0, -0.0, 2.0, inf]], [[1e200, 1e200, 1e-200, 0.0]]]
for x in CUMPROD:
    for ex in [False, True]:
        for rev in [False, True]:
            jg = jax_grad(lambda v: jax_cumprod(v, ex, rev), x)
            line(f"cumprod:{int(ex)}:{int(rev)}", x, lambda v: tf.math.cumprod(v, 1, exclusive=ex, reverse=rev),
                 ("jax", jg))

TOPK = [[1.0, 3.0, 3.0, 2.0, 3.0], [0.0, -0.0, 0.0, -1.0, 5.0], [-inf, inf, 2.0, inf, -inf], [7.0, 7.0, 7.0, 7.0, 7.0]]
for x in TOPK:
    for k in [1, 2, 3, 5]:
        line(f"top_k:{k}", x, lambda v: tf.math.top_k(v, k))
    line("sort", x, lambda v: tf.sort(v))
    line("sort_desc", x, lambda v: tf.sort(v, direction="DESCENDING"))
    line("argsort", x, lambda v: tf.argsort(v, stable=True))
    line("argsort_desc", x, lambda v: tf.argsort(v, direction="DESCENDING", stable=True))
line("top_k_rows:2", [[4.0, 1.0, 4.0], [-0.0, 0.0, -5.0]], lambda v: tf.math.top_k(v, 2))
line("sort_rows:0", [[4.0, 1.0, 4.0], [-0.0, 0.0, -5.0]], lambda v: tf.sort(v, axis=0))

for x in [[3.0, 1.0, 3.0, -0.0, 0.0, 2.0, 1.0, 0.0], [5.0, 5.0, 5.0], [-inf, inf, -inf, 1e-300, 1e-300, 0.0]]:
    line("unique", x, lambda v: tf.unique(v))

SORTED = [1.0, 2.0, 2.0, 2.0, 5.0, inf]
VALUES = [2.0, 0.0, 9.0, 2.5, -inf, inf, 5.0, 1.0, -0.0]
for side in ["left", "right"]:
    line(f"searchsorted:{side}", VALUES,
         lambda v: tf.searchsorted(tf.constant(SORTED, tf.float64), v, side=side, out_type=tf.int64))
    line(f"searchsorted_rows:{side}", [[2.0, -1.0, 3.0], [0.0, 0.0, 7.0]],
         lambda v: tf.searchsorted(tf.constant([[0.0, 2.0, 2.0, 3.0], [-0.0, 0.0, 0.0, 7.0]], tf.float64), v,
                                   side=side, out_type=tf.int64))

BIN_IDS = [1, 3, 1, 0, 3, 3, 7]
for ml in [0, 4, 10]:
    line(f"bincount:{ml}", [0.5, -1.0, 2.0, 1e300, 1e300, -0.0, 3.0],
         lambda v: tf.math.bincount(tf.constant(BIN_IDS, tf.int32), weights=v, minlength=ml, dtype=tf.float64))
    line(f"bincount_counts:{ml}", [0.0], lambda v: tf.math.bincount(tf.constant(BIN_IDS, tf.int32), minlength=ml,
                                                                 dtype=tf.int64))

line("argwhere", [[0.0, -0.0, nan], [1e-300, 0.0, -inf]], lambda v: tf.where(v))
line("argwhere", [[0.0, 0.0], [-0.0, 0.0]], lambda v: tf.where(v))

MASK_X = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
line("boolean_mask:1", MASK_X, lambda v: tf.boolean_mask(v, tf.constant([True, False, True])))
line("boolean_mask:2", MASK_X, lambda v: tf.boolean_mask(v, tf.constant([[True, False], [False, False], [True, True]])))
line("boolean_mask:none", MASK_X, lambda v: tf.boolean_mask(v, tf.constant([False, False, False])))

R = [[1.0, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0]]
for shifts, axes in [([-7], [1]), ([13], [1]), ([1, -3], [0, 1]), ([2, 3], [1, 1]), ([-1], [-1]), ([5], [1]),
                     ([-10], [0])]:
    line(f"roll:{shifts}:{axes}".replace(" ", ""), R, lambda v: tf.roll(v, shifts, axes))

G = np.arange(24, dtype=np.float64).reshape(2, 3, 4) * 0.5 - 3.0
GI = tf.constant([[2, 0, 2], [1, 1, 0]], tf.int64)
line("gather_batch:1:1", G, lambda v: tf.gather(v, GI, axis=1, batch_dims=1))
GI2 = tf.constant([[3, 0, 3], [1, 1, 2]], tf.int64)
line("gather_batch:2:1", G, lambda v: tf.gather(v, GI2, axis=2, batch_dims=1))
line("gather_batch:2:-1", G, lambda v: tf.gather(v, GI2, axis=2, batch_dims=-1))
GI3 = tf.constant([[[1, 1], [3, 0], [2, 2]], [[0, 0], [0, 3], [1, 2]]], tf.int64)
line("gather_batch:2:2", G, lambda v: tf.gather(v, GI3, axis=2, batch_dims=2))
line("gather_nd:1", G, lambda v: tf.gather_nd(v, tf.constant([[1], [0], [1]], tf.int64)))
line("gather_nd:2", G, lambda v: tf.gather_nd(v, tf.constant([[1, 2], [0, 0], [1, 2]], tf.int64)))
line("gather_nd:3", G, lambda v: tf.gather_nd(v, tf.constant([[[1, 2, 3], [1, 2, 3]], [[0, 1, 0], [1, 0, 0]]], tf.int64)))

SI = tf.constant([[1], [3], [1], [0], [1]], tf.int64)
U = [[1.0, -2.0], [3.0, 4.0], [inf, 0.5], [-0.0, 7.0], [1e300, 1e300]]
line("scatter_nd", U, lambda v: tf.scatter_nd(SI, v, [5, 2]))
BASE = [[10.0, 20.0], [30.0, 40.0], [50.0, 60.0], [70.0, 80.0], [90.0, 100.0]]
UPD = tf.constant([[1.0, -2.0], [3.0, 4.0], [-5.0, 0.5], [-0.0, 7.0], [8.0, 9.0]], tf.float64)
line("tsn_add:x", BASE, lambda v: tf.tensor_scatter_nd_add(v, SI, UPD))
line("tsn_add:u", UPD.numpy(), lambda v: tf.tensor_scatter_nd_add(tf.constant(BASE, tf.float64), SI, v))
line("tsn_update:x", BASE, lambda v: tf.tensor_scatter_nd_update(v, SI, UPD))
line("tsn_update:u", UPD.numpy(), lambda v: tf.tensor_scatter_nd_update(tf.constant(BASE, tf.float64), SI, v))
SI2 = tf.constant([[2, 1], [0, 0], [2, 1]], tf.int64)
line("tsn_add2:x", BASE, lambda v: tf.tensor_scatter_nd_add(v, SI2, tf.constant([1.0, 2.0, 4.0], tf.float64)))
line("tsn_update2:u", [1.0, 2.0, 4.0], lambda v: tf.tensor_scatter_nd_update(tf.constant(BASE, tf.float64), SI2, v))

SEGX = [[1.0, -2.0], [3.0, 0.0], [-0.0, 5.0], [inf, 2.0], [4.0, 4.0], [nan, -1.0]]
SEG_SORTED = tf.constant([1, 1, 3, 3, 3, 5])
SEG_UNSORTED = tf.constant([-1, 4, 0, 4, -1, 2])


def prod_rule(ids):
    """d/dx of Σ w·y for a segment product by the product rule (no division)."""
    x = np.asarray(SEGX)
    g = np.zeros_like(x)
    for r, s in enumerate(ids):
        if s < 0:
            continue
        for c in range(2):
            others = [x[q, c] for q, t in enumerate(ids) if t == s and q != r]
            g[r, c] = (1 + 0.5 * (s * 2 + c)) * math.prod(others)
    return g


for kind in ["sum", "mean", "max", "min", "prod"]:
    rs = ("rule", prod_rule([1, 1, 3, 3, 3, 5])) if kind == "prod" else None
    ru = ("rule", prod_rule([-1, 4, 0, 4, -1, 2])) if kind == "prod" else None
    line(f"segment_{kind}", SEGX, lambda v: getattr(tf.math, f"segment_{kind}")(v, SEG_SORTED), rs)
    line(f"unsorted_segment_{kind}", SEGX, lambda v: getattr(tf.math, f"unsorted_segment_{kind}")(v, SEG_UNSORTED, 6),
         ru)

TA = [[4.0, -1.0, 0.0], [2.0, inf, -0.0]]
line("take_along_axis:1", TA, lambda v: tf.experimental.numpy.take_along_axis(v, tf.constant([[2, 2, 0, 1], [1, 0, 1, 1]]), 1))
line("take_along_axis:0", TA, lambda v: tf.experimental.numpy.take_along_axis(v, tf.constant([[1, 0, 1], [1, 1, 1]]), 0))

OH = tf.constant([[0, 3, -1], [2, 7, 1]], tf.int64)
for axis in [-1, 0, 1, 2]:
    line(f"one_hot:{axis}", [0.0], lambda v: tf.one_hot(OH, 4, on_value=tf.constant(2.5, tf.float64),
                                                        off_value=tf.constant(-0.0, tf.float64), axis=axis))
line("one_hot:nan", [0.0], lambda v: tf.one_hot(OH, 3, on_value=tf.constant(nan, tf.float64),
                                                off_value=tf.constant(-inf, tf.float64), axis=-1))
