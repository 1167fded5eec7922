"""TensorFlow's values and gradients of the convolutions and pools beyond
tests/ops/tf_conv.rs, for tests/ops/tf_conv_more.rs: conv1d, conv3d,
conv2d_transpose, separable_conv2d, dilated conv1d/conv2d/depthwise_conv2d
and conv3d, and the 1-D and 3-D max and average pools; SAME and VALID
padding, strides, and odd sizes where SAME pads more after than before.

Run: /work/refvenv/bin/python tf_conv_more.py > ../data/tf_conv_more.txt
(TensorFlow 2.21 and JAX, f64, CPU.)

Where TensorFlow's CPU kernels refuse, JAX in f64 (jax.lax) referees,
and the line's `source` says so:
- `tf+jax`: TensorFlow's CPU gradients (Conv2DBackpropInput/Filter)
  refuse dilations above 1, so the value is TensorFlow's and the
  gradients are JAX's, of jax.lax.conv_general_dilated;
- `jax`: a dilated conv2d_transpose is Conv2DBackpropInput itself, so its
  value is JAX's too (the transpose of JAX's convolution, by jax.vjp);
  Conv3D's CPU kernel refuses dilations above 1 in the value too;
  and tf.nn.depthwise_conv2d with dilations and strides both above 1
  only warns that they must not be, and gives other numbers (it is
  defined as the convolution with both, as conv2d's and JAX's);
  TensorFlow's AvgPoolGrad miscounts SAME windows wider than the input,
  and there too the gradient is JAX's (checked against a brute force);
- `tf-f32`: MaxPool3D has only half and float32 kernels; its inputs are
  multiples of 1/1024, so its values (copies) and gradients (sums of the
  weights below) are exact in float32, the same numbers as in f64;
- `jax-pool`: AvgPool3D has only float32 kernels, and a mean rounds in
  float32, so the numbers are JAX's (window sums divided by the count of
  real elements), and TensorFlow's float32 ones are checked here to
  agree within 1e-6 (the gradient: a brute force's, where TensorFlow's
  is wrong, as AvgPoolGrad's above).
Every line's numbers that both TensorFlow and JAX give are checked here
to agree within 1e-12 (JAX's max pool gradients only without ties).

Each line: `op|config|inputs|value|grads|source`: `config` is
`k=..;s=..;d=..;p=SAME` (window or filter size, strides, dilations,
padding; sizes joined by `x`), for conv2d_transpose with `;out=` the
output shape; `inputs` are `shape:values` joined by `/` (the input, then
the filters: conv filters as TensorFlow's, [.., in, out], the depthwise
[kh, kw, c, m], conv2d_transpose's [kh, kw, out, in]); `grads` are the
gradients of Σ w[i] y[i], w[i] = 1 + i/2, with respect to each input,
joined by `/`. Values and shapes row-major.
"""
import itertools

import jax
import numpy as np
import tensorflow as tf

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

rng = np.random.default_rng(2103)
DIMS = {1: ("NWC", "WIO", "NWC"), 2: ("NHWC", "HWIO", "NHWC"), 3: ("NDHWC", "DHWIO", "NDHWC")}


def fmt(v):
    return ",".join(repr(float(x)) for x in np.asarray(v).reshape(-1))


def rnd(shape):
    return np.round(rng.normal(0, 1, shape), 4)


def weights(n):
    return 1.0 + 0.5 * np.arange(n)


# ---- the ops in TensorFlow (None where its CPU kernels refuse)

def tf_op(name, c, xs):
    s, d, p = c["s"], c["d"], c["p"]
    if name == "conv1d":
        return tf.nn.conv1d(xs[0], xs[1], s[0], p, dilations=d[0])
    if name == "conv2d":
        return tf.nn.conv2d(xs[0], xs[1], s, p, dilations=d)
    if name == "depthwise_conv2d":
        return tf.nn.depthwise_conv2d(xs[0], xs[1], [1, *s, 1], p, dilations=d)
    if name == "separable_conv2d":
        return tf.nn.separable_conv2d(xs[0], xs[1], xs[2], [1, *s, 1], p, dilations=d)
    if name == "conv3d":
        return tf.nn.conv3d(xs[0], xs[1], [1, *s, 1], p, dilations=[1, *d, 1])
    if name == "conv2d_transpose":
        return tf.nn.conv2d_transpose(xs[0], xs[1], c["out"], s, p, dilations=d)
    if name == "max_pool1d":
        return tf.nn.max_pool1d(xs[0], c["k"], s, p)
    if name == "avg_pool1d":
        return tf.nn.avg_pool1d(xs[0], c["k"], s, p)
    if name == "max_pool3d":
        return tf.nn.max_pool3d(xs[0], c["k"], s, p)
    if name == "avg_pool3d":
        return tf.nn.avg_pool3d(xs[0], c["k"], s, p)
    raise ValueError(name)


# ---- the same in JAX

def conv(x, w, s, d, p, groups=1):
    return lax.conv_general_dilated(x, w, s, p, rhs_dilation=d, dimension_numbers=DIMS[x.ndim - 2],
                                    feature_group_count=groups)


def jax_op(name, c, xs):
    s, d, p = tuple(c["s"]), tuple(c["d"]), c["p"]
    if name in ("conv1d", "conv2d", "conv3d"):
        return conv(xs[0], xs[1], s, d, p)
    if name in ("depthwise_conv2d", "separable_conv2d"):
        kh, kw, ch, m = xs[1].shape
        y = conv(xs[0], xs[1].reshape(kh, kw, 1, ch * m), s, d, p, groups=ch)
        return y if name == "depthwise_conv2d" else conv(y, xs[2], (1, 1), (1, 1), "VALID")
    if name == "conv2d_transpose":
        zero = jnp.zeros(c["out"])
        return jax.vjp(lambda z: conv(z, xs[1], s, d, p), zero)[1](xs[0])[0]
    win = (1, *c["k"], 1)
    st = (1, *s, 1)
    if name.startswith("max_pool"):
        return lax.reduce_window(xs[0], -jnp.inf, lax.max, win, st, p)
    if name.startswith("avg_pool"):
        total = lax.reduce_window(xs[0], 0.0, lax.add, win, st, p)
        count = lax.reduce_window(jnp.ones_like(xs[0]), 0.0, lax.add, win, st, p)
        return total / count
    raise ValueError(name)


def jax_case(name, c, xs):
    f = lambda *a: jnp.sum(jnp.reshape(jax_op(name, c, a), -1) * weights(jax_op(name, c, a).size))
    y = jax_op(name, c, [jnp.asarray(x) for x in xs])
    gs = jax.grad(f, argnums=tuple(range(len(xs))))(*[jnp.asarray(x) for x in xs])
    return np.asarray(y), [np.asarray(g) for g in gs]


def tf_case(name, c, xs, dtype=tf.float64, grads=True):
    vs = [tf.Variable(tf.constant(x, dtype)) for x in xs]
    with tf.GradientTape() as tape:
        y = tf_op(name, c, vs)
        s = tf.reduce_sum(tf.reshape(y, [-1]) * tf.constant(weights(int(np.prod(y.shape))), dtype))
    gs = tape.gradient(s, vs) if grads else None
    return y.numpy().astype(np.float64), gs and [g.numpy().astype(np.float64) for g in gs]


def avg_pool_grad(x, k, s):
    """The gradient of Σ w[i] y[i] for a SAME average pool by brute force:
    each output's weight shared equally by the real elements of its
    window (the referee where TensorFlow's AvgPoolGrad is wrong)."""
    sp = x.shape[1:-1]
    out = [-(-n // st) for n, st in zip(sp, s)]
    before = [max((o - 1) * st + kk - n, 0) // 2 for o, st, kk, n in zip(out, s, k, sp)]
    w = weights(x.shape[0] * int(np.prod(out)) * x.shape[-1]).reshape(x.shape[0], *out, x.shape[-1])
    g = np.zeros_like(x)
    for o in itertools.product(*[range(v) for v in out]):
        lo = [oi * st - b for oi, st, b in zip(o, s, before)]
        win = tuple(slice(max(a, 0), min(a + kk, n)) for a, kk, n in zip(lo, k, sp))
        count = np.prod([sl.stop - sl.start for sl in win])
        g[(slice(None), *win)] += (w[(slice(None), *o)] / count)[(slice(None), *([None] * len(sp)))]
    return g


def near(a, b, rel):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.all(np.abs(a - b) <= rel * max(np.max(np.abs(b)), 1.0))


def case(name, xs, k=None, s=None, d=None, p="VALID", out=None, ties=False, special=False):
    n = len(s)
    c = {"k": k, "s": list(s), "d": list(d or [1] * n), "p": p, "out": out}
    dilated = max(c["d"]) > 1
    jy, jg = jax_case(name, c, xs)
    strided = max(c["s"]) > 1
    if dilated and (name == "conv2d_transpose" or (name == "depthwise_conv2d" and strided)):
        src, y, gs = "jax", jy, jg
    elif name == "max_pool3d":
        src = "tf-f32"
        assert all(np.all(x * 1024 == np.round(x * 1024)) for x in xs)
        y, gs = tf_case(name, c, xs, tf.float32)
    elif name == "avg_pool3d":
        src, y, gs = "jax-pool", jy, jg
        ty, tg = tf_case(name, c, xs, tf.float32)
        assert near(ty, jy, 1e-6), (name, c)
        if not near(tg[0], jg[0], 1e-6):
            assert p == "SAME" and near(jg[0], avg_pool_grad(xs[0], k, s), 1e-12), (name, c)
    elif dilated:
        src, gs = "tf+jax", jg
        try:
            y, _ = tf_case(name, c, xs, grads=False)
        except tf.errors.OpError:
            src, y = "jax", jy
    else:
        src = "tf"
        y, gs = tf_case(name, c, xs)
        if name == "avg_pool1d" and p == "SAME" and not near(gs[0], jg[0], 1e-12):
            # TensorFlow's AvgPoolGrad miscounts the windows wider than
            # the input: width 7, k = 9, stride 2 gives x[0] the weights
            # 6/7 where 1/5 + 2/7 + 3/7 is right; JAX's gradient referees,
            # checked against the brute force
            assert near(jg[0], avg_pool_grad(xs[0], k, s), 1e-12)
            src, gs = "tf+jax", jg
    # (infinities: TensorFlow's numbers only)
    assert special or near(y, jy, 1e-12), (name, c, y, jy)
    if not (special or ties and name.startswith("max_pool")):
        assert all(near(a, b, 1e-12) for a, b in zip(gs, jg)), (name, c)
    size = lambda v: "x".join(str(x) for x in v)
    cfg = [f"k={size(k)}" if k else None, f"s={size(c['s'])}", f"d={size(c['d'])}", f"p={p}",
           f"out={size(out)}" if out else None]
    ins = "/".join(f"{size(x.shape)}:{fmt(x)}" for x in xs)
    print(f"{name}|{';'.join(v for v in cfg if v)}|{ins}|{fmt(y)}|{'/'.join(fmt(g) for g in gs)}|{src}")


# conv1d: width 7, SAME windows that pad more after than before
x1 = rnd((2, 7, 2))
for k, st, d, p in [(3, 1, 1, "SAME"), (2, 2, 1, "SAME"), (4, 3, 1, "SAME"), (3, 2, 1, "VALID"),
                    (1, 3, 1, "VALID"), (5, 1, 1, "SAME"), (3, 1, 2, "SAME"), (2, 1, 3, "VALID"),
                    (2, 2, 2, "SAME"), (9, 1, 1, "SAME"), (1, 3, 1, "SAME"), (2, 4, 1, "SAME")]:
    case("conv1d", [x1, rnd((k, 2, 3))], s=[st], d=[d], p=p)

# conv2d and depthwise_conv2d dilated (undilated in tf_conv.rs)
x2 = rnd((1, 5, 6, 2))
for k, st, d, p in [((3, 3), (1, 1), (2, 2), "SAME"), ((2, 3), (1, 1), (2, 1), "VALID"),
                    ((2, 2), (1, 1), (3, 2), "SAME"), ((3, 2), (2, 2), (2, 2), "SAME")]:
    case("conv2d", [x2, rnd((*k, 2, 3))], s=st, d=d, p=p)
    case("depthwise_conv2d", [x2, rnd((*k, 2, 2))], s=st, d=d, p=p)

# separable_conv2d
for k, st, p in [((3, 3), (1, 1), "SAME"), ((2, 3), (2, 2), "SAME"), ((2, 2), (2, 2), "VALID")]:
    case("separable_conv2d", [x2, rnd((*k, 2, 2)), rnd((1, 1, 4, 3))], s=st, p=p)

# an infinite filter element, which SAME padding's zeros meet (TensorFlow
# multiplies them: NaN there)
w_inf = rnd((3, 2, 3))
w_inf[0, 1, 2] = np.inf
case("conv1d", [x1, w_inf], s=[1], p="SAME", special=True)
case("conv1d", [x1, w_inf], s=[2], p="VALID", special=True)

# conv3d: depth 4, height 5, width 3
x3 = rnd((2, 4, 5, 3, 2))
for k, st, d, p in [((2, 3, 2), (1, 2, 2), (1, 1, 1), "SAME"), ((3, 3, 3), (2, 2, 1), (1, 1, 1), "SAME"),
                    ((2, 2, 2), (1, 1, 1), (1, 1, 1), "VALID"), ((1, 2, 3), (2, 1, 2), (1, 1, 1), "VALID"),
                    ((3, 2, 2), (3, 3, 3), (1, 1, 1), "SAME"), ((2, 2, 2), (1, 1, 1), (2, 2, 1), "SAME"),
                    ((2, 3, 1), (1, 1, 1), (1, 2, 1), "VALID"), ((5, 6, 4), (1, 2, 2), (1, 1, 1), "SAME")]:
    case("conv3d", [x3, rnd((*k, 2, 3))], s=st, d=d, p=p)

# conv2d_transpose: an input [1, h, w, 3] back to output shapes whose
# convolution gives h x w, the smallest and the largest of them
for (h, w), k, st, d, p, out in [
    ((3, 3), (2, 2), (2, 2), (1, 1), "SAME", (5, 6)), ((3, 3), (2, 2), (2, 2), (1, 1), "SAME", (6, 5)),
    ((3, 4), (3, 3), (2, 2), (1, 1), "VALID", (7, 9)), ((3, 4), (3, 3), (2, 2), (1, 1), "VALID", (8, 10)),
    ((2, 3), (3, 2), (3, 2), (1, 1), "SAME", (4, 5)), ((4, 3), (3, 3), (1, 1), (1, 1), "SAME", (4, 3)),
    ((2, 2), (3, 2), (3, 3), (1, 1), "VALID", (7, 6)), ((4, 4), (3, 3), (1, 1), (2, 2), "SAME", (4, 4)),
    ((2, 3), (2, 2), (1, 1), (2, 3), "VALID", (4, 6)), ((3, 2), (2, 3), (2, 2), (2, 2), "SAME", (5, 4)),
    ((2, 2), (5, 5), (1, 1), (1, 1), "SAME", (2, 2)),
]:
    case("conv2d_transpose", [rnd((1, h, w, 3)), rnd((*k, 2, 3))], s=st, d=d, p=p, out=[1, *out, 2])
w_inf = rnd((3, 3, 2, 3))
w_inf[0, 0, 1, 2] = -np.inf
case("conv2d_transpose", [rnd((1, 2, 2, 3)), w_inf], s=(2, 2), p="SAME", out=[1, 4, 4, 2], special=True)

# the pools: random inputs (multiples of 1/1024 for the 3-D ones), and ties
p1 = [rnd((2, 7, 2)), (np.arange(28) % 3).astype(np.float64).reshape(2, 7, 2)]
for x in p1:
    for k, st, p in [(2, 2, "SAME"), (3, 2, "SAME"), (4, 3, "SAME"), (3, 1, "VALID"), (2, 3, "VALID"),
                     (5, 1, "SAME"), (9, 2, "SAME"), (1, 3, "SAME"), (2, 4, "SAME")]:
        for name in ("max_pool1d", "avg_pool1d"):
            case(name, [x], k=[k], s=[st], p=p, ties=x is p1[1])
p3 = [np.round(rnd((1, 4, 5, 3, 2)) * 1024) / 1024, (np.arange(120) % 5).astype(np.float64).reshape(1, 4, 5, 3, 2) / 8]
for x in p3:
    for k, st, p in [((2, 2, 2), (2, 2, 2), "SAME"), ((3, 3, 2), (2, 2, 1), "SAME"), ((2, 3, 2), (1, 2, 2), "VALID"),
                     ((3, 2, 3), (3, 1, 2), "SAME"), ((1, 1, 1), (2, 3, 2), "VALID"),
                     ((5, 6, 4), (2, 2, 2), "SAME")]:
        for name in ("max_pool3d", "avg_pool3d"):
            case(name, [x], k=list(k), s=list(st), p=p, ties=x is p3[1])
