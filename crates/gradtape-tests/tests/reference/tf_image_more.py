"""TensorFlow's values and gradients of tf.image.crop_and_resize,
tf.image.extract_patches, tf.image.resize with the bicubic and area
methods, and tf.signal's fft3d, ifft3d, rfft3d and irfft3d, for
tests/ops/tf_image_more.rs.

Run: /work/refvenv/bin/python tf_image_more.py > ../data/tf_image_more.txt
(TensorFlow 2.21, JAX and NumPy, CPU.)

Each line: `op|config|source|tensor|tensor|...`, each tensor
`name=kind=shape=values` with kind `r` (real numbers joined by `,`), `c`
(complex `re,im` pairs joined by `;`) or `i` (integers), shape the dims
joined by `x`, row-major. Inputs are `x` (and for crop_and_resize `boxes`
and `idx`), the result `y`, gradients `dx` (and `dboxes`). Real results
are differentiated through sum_i w_i y_i, w_i = 1 + i/2; complex ones with
`output_gradients` w_i = (1 + i/2) - 0.5i (i mod 3) (TensorFlow's
convention, as tests/reference/tf_spectral.py), i over the flattened y.

The `source` of a line:
- `tf`: TensorFlow in float64 / complex128 (extract_patches, fft3d,
  ifft3d, and the values of rfft3d and irfft3d);
- `tf-f32`: TensorFlow's CropAndResize, ResizeBicubic and ResizeArea take
  and return float32 only: TensorFlow's float32 numbers, from inputs
  exact in float32 (images multiples of 1/1024, boxes rounded to
  float32), to be compared in f32. ResizeArea has no gradient in
  TensorFlow: its `tf-f32` lines carry no `dx`;
- `ref-f64`: the same cases in float64 by a NumPy / JAX transcription of
  TensorFlow's kernels (crop_and_resize: JAX, its gradients by jax.grad;
  bicubic: Keys' kernel a = -0.5 at offsets rounded to 1/1024 as
  TensorFlow's coefficient table, weights of outside pixels zeroed and
  renormalised; area: overlap lengths over the scale), each asserted here
  to agree with TensorFlow's float32 line (values and the gradients it
  has) within float32 roundoff. The area gradient is the transpose of the
  resize's matrix;
- `jax`: the gradients of rfft3d and irfft3d, which TensorFlow does not
  define, by JAX's jnp.fft.rfftn / irfftn (conjugated into TensorFlow's
  convention); the same route is asserted here to reproduce TensorFlow's
  own rfft2d and irfft2d gradients.
"""
import sys

import jax
import numpy as np
import tensorflow as tf

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

rng = np.random.default_rng(3307)


def fmt_r(v):
    return ",".join(repr(float(x)) for x in np.asarray(v).reshape(-1))


def fmt_c(v):
    return ";".join(f"{float(np.real(x))!r},{float(np.imag(x))!r}" for x in np.asarray(v).reshape(-1))


def tensor(name, v):
    v = np.asarray(v)
    shape = "x".join(str(d) for d in v.shape)
    if np.iscomplexobj(v):
        return f"{name}=c={shape}={fmt_c(v)}"
    if v.dtype.kind in "iu":
        return f"{name}=i={shape}=" + ",".join(str(int(x)) for x in v.reshape(-1))
    return f"{name}=r={shape}={fmt_r(v)}"


def emit(op, cfg, src, **ts):
    print("|".join([op, cfg, src] + [tensor(k, v) for k, v in ts.items() if v is not None]))


def weights(n):
    return 1.0 + 0.5 * np.arange(n)


def cweights(n):
    i = np.arange(n)
    return (1 + 0.5 * i) - 0.5j * (i % 3)


def image(shape):
    """Normal values, multiples of 1/1024 (exact in float32)."""
    return np.round(rng.normal(0, 1, shape) * 1024) / 1024


def close(a, b, rel, what):
    a, b = np.asarray(a), np.asarray(b)
    scale = max(np.max(np.abs(b)), 1e-300)
    err = np.max(np.abs(a - b)) / scale if a.size else 0.0
    assert a.shape == b.shape and err <= rel, f"{what}: {err} (shapes {a.shape} {b.shape})"
    return err


def tf_grads(f, xs):
    """f's value and the gradients of the weighted sum w.r.t. each input."""
    vs = [tf.Variable(x) for x in xs]
    with tf.GradientTape() as tape:
        y = f(*vs)
        s = tf.reduce_sum(tf.reshape(y, [-1]) * tf.cast(weights(int(np.prod(y.shape))), y.dtype))
    gs = tape.gradient(s, vs)
    return y.numpy(), [None if g is None else tf.convert_to_tensor(g).numpy() for g in gs]


# --- crop_and_resize -------------------------------------------------------


def jax_crop(img, boxes, idx, crop, method, extrap):
    """CropAndResize in float64 (TensorFlow's formulas)."""
    b, h, w, c = img.shape
    ch, cw = crop

    def coords(lo, hi, size, n):
        if n > 1:
            return lo[:, None] * (size - 1) + jnp.arange(n)[None, :] * ((hi - lo) * (size - 1) / (n - 1))[:, None]
        return (0.5 * (lo + hi) * (size - 1))[:, None]

    iy = coords(boxes[:, 0], boxes[:, 2], h, ch)
    ix = coords(boxes[:, 1], boxes[:, 3], w, cw)
    vy = (iy >= 0) & (iy <= h - 1)
    vx = (ix >= 0) & (ix <= w - 1)
    im = img[idx]  # [n, h, w, c]
    n = boxes.shape[0]
    bi = jnp.arange(n)[:, None, None]

    def at(yy, xx):
        yy = jnp.clip(yy, 0, h - 1).astype(int)
        xx = jnp.clip(xx, 0, w - 1).astype(int)
        return im[bi, yy[:, :, None], xx[:, None, :]]

    fy, fx = jnp.floor(jax.lax.stop_gradient(iy)), jnp.floor(jax.lax.stop_gradient(ix))
    cy, cx = jnp.ceil(jax.lax.stop_gradient(iy)), jnp.ceil(jax.lax.stop_gradient(ix))
    ly, lx = (iy - fy)[:, :, None, None], (ix - fx)[:, None, :, None]
    tl, tr, bl, br = at(fy, fx), at(fy, cx), at(cy, fx), at(cy, cx)
    top = tl + (tr - tl) * lx
    bot = bl + (br - bl) * lx
    lin = top + (bot - top) * ly
    if method == "bilinear":
        out = lin
    else:
        # halves away from zero (coordinates inside the image are >= 0)
        ry = jnp.floor(jax.lax.stop_gradient(iy) + 0.5)
        rx = jnp.floor(jax.lax.stop_gradient(ix) + 0.5)
        near = at(ry, rx)
        # TensorFlow's box gradient of a nearest crop is the bilinear one
        lin_boxes = jax_crop(jax.lax.stop_gradient(img), boxes, idx, crop, "bilinear", extrap)
        out = near + (lin_boxes - jax.lax.stop_gradient(lin_boxes))
        mask = (vy[:, :, None] & vx[:, None, :])[..., None]
        return jnp.where(mask, out, extrap)
    mask = (vy[:, :, None] & vx[:, None, :])[..., None]
    return jnp.where(mask, out, extrap)


def crop_case(img_shape, boxes, idx, crop, method="bilinear", extrap=0.0):
    img = image(img_shape)
    boxes = np.asarray(boxes, np.float32).astype(np.float64)
    idx = np.asarray(idx, np.int32)
    cfg = f"crop={crop[0]}x{crop[1]};method={method};extrap={extrap!r}"

    def tf_f(i, bx):
        return tf.image.crop_and_resize(i, bx, idx, crop, method=method, extrapolation_value=extrap)

    y32, (dx32, db32) = tf_grads(tf_f, [img.astype(np.float32), boxes.astype(np.float32)])
    emit("crop_and_resize", cfg, "tf-f32", x=img, boxes=boxes, idx=idx, y=y32, dx=dx32, dboxes=db32)

    wts = jnp.asarray(weights(int(np.prod(y32.shape))))

    def loss(i, bx):
        return jnp.sum(jax_crop(i, bx, idx, crop, method, extrap).reshape(-1) * wts)

    y64 = np.asarray(jax_crop(jnp.asarray(img), jnp.asarray(boxes), idx, crop, method, extrap))
    dx64, db64 = (np.asarray(g) for g in jax.grad(loss, argnums=(0, 1))(jnp.asarray(img), jnp.asarray(boxes)))
    close(y64, y32, 1e-5, f"crop {cfg} value")
    close(dx64, dx32, 1e-5, f"crop {cfg} dimage")
    close(db64, db32, 1e-4, f"crop {cfg} dboxes")
    emit("crop_and_resize", cfg, "ref-f64", x=img, boxes=boxes, idx=idx, y=y64, dx=dx64, dboxes=db64)


def random_boxes(n, lo=-0.2, hi=1.2):
    return rng.uniform(lo, hi, (n, 4))


# (box edges with irregular digits: no sample falls exactly on a pixel,
# where the interpolation has a kink and float32 and float64 may fall on
# either side of it)
for method in ["bilinear", "nearest"]:
    # boxes inside, overhanging the image, flipped; several images
    crop_case((2, 5, 6, 2), [[0.113, 0.217, 0.806, 0.911], [0.713, 0.061, 0.157, 0.619],
                             [-0.291, 0.433, 0.923, 1.317]], [1, 0, 1], (4, 3), method)
    crop_case((1, 4, 4, 1), random_boxes(3), [0, 0, 0], (5, 5), method, extrap=-1.5)
    # crops of one row / one column / one pixel (the box's middle)
    crop_case((2, 6, 5, 3), [[0.207, 0.311, 0.733, 0.857], [0.913, 0.109, 0.353, 0.461]], [0, 1], (1, 4), method)
    crop_case((1, 5, 7, 1), [[0.153, 0.207, 0.751, 0.613]], [0], (3, 1), method, extrap=0.25)
    crop_case((1, 3, 3, 2), [[0.309, 0.117, 0.613, 0.809], [0.557, 0.353, 0.211, 0.659]], [0, 0], (1, 1), method)
    # an image of one row (h - 1 = 0: every sample at row 0)
    crop_case((1, 1, 6, 1), [[0.207, 0.113, 0.907, 0.853]], [0], (2, 3), method)

# --- extract_patches -------------------------------------------------------


def patches_case(shape, sizes, strides, rates, padding):
    x = image(shape)
    cfg = (f"sizes={sizes[0]},{sizes[1]};strides={strides[0]},{strides[1]};"
           f"rates={rates[0]},{rates[1]};padding={padding}")

    def f(v):
        return tf.image.extract_patches(v, [1, *sizes, 1], [1, *strides, 1], [1, *rates, 1], padding)

    y, (dx,) = tf_grads(f, [x])
    emit("extract_patches", cfg, "tf", x=x, y=y, dx=dx)


patches_case((1, 4, 4, 1), (2, 2), (1, 1), (1, 1), "VALID")
patches_case((2, 5, 6, 2), (3, 2), (2, 1), (1, 1), "VALID")
patches_case((1, 5, 5, 1), (2, 2), (2, 2), (1, 1), "SAME")
patches_case((1, 6, 7, 2), (2, 3), (1, 2), (2, 1), "SAME")
patches_case((2, 7, 6, 1), (3, 2), (2, 3), (2, 2), "VALID")
patches_case((1, 4, 5, 3), (3, 3), (3, 2), (1, 2), "SAME")
patches_case((1, 3, 3, 1), (1, 1), (2, 2), (1, 1), "VALID")
# the window overhangs by less than a stride: no rows
patches_case((1, 2, 5, 1), (3, 2), (2, 1), (1, 1), "VALID")

# --- bicubic and area resize ------------------------------------------------


def keys(x, a=-0.5):
    x = abs(x)
    if x <= 1:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return 0.0


def bicubic_matrix(n_in, n_out, quantise=True):
    """The [n_out, n_in] matrix of ResizeBicubic (half-pixel centers)."""
    m = np.zeros((n_out, n_in))
    s = n_in / n_out
    for i in range(n_out):
        at = (i + 0.5) * s - 0.5
        base = np.floor(at)
        d = at - base
        if quantise:
            d = np.rint(d * 1024) / 1024  # half to even, as lrintf
        ws = [keys(1 + d), keys(d), keys(1 - d), keys(2 - d)]
        taps = []
        for t in range(4):
            j = int(base) - 1 + t
            if 0 <= j < n_in:
                taps.append((j, ws[t]))
        total = sum(w for _, w in taps)
        for j, wt in taps:
            m[i, j] += wt / total
    return m


def area_matrix(n_in, n_out):
    """The [n_out, n_in] matrix of ResizeArea (corners not aligned)."""
    m = np.zeros((n_out, n_in))
    s = n_in / n_out
    for i in range(n_out):
        lo, hi = i * s, (i + 1) * s
        for k in range(int(np.floor(lo)), int(np.ceil(hi))):
            overlap = min(k + 1, hi) - max(k, lo)
            m[i, min(max(k, 0), n_in - 1)] += overlap / s
    return m


def separable(x, mh, mw):
    return np.einsum("oh,nhwc,pw->nopc", mh, x, mw)


def resize_case(method, shape, size):
    x = image(shape)
    one = len(shape) == 3
    x4 = x[None] if one else x
    cfg = f"size={size[0]}x{size[1]}"

    def f(v):
        return tf.image.resize(v, size, method=method, antialias=False)

    name = f"resize_{method}"
    if method == "bicubic":
        y32, (dx32,) = tf_grads(f, [x.astype(np.float32)])
        mh, mw = bicubic_matrix(x4.shape[1], size[0]), bicubic_matrix(x4.shape[2], size[1])
    else:
        y32 = f(tf.constant(x.astype(np.float32))).numpy()
        dx32 = None
        mh, mw = area_matrix(x4.shape[1], size[0]), area_matrix(x4.shape[2], size[1])
    emit(name, cfg, "tf-f32", x=x, y=y32, dx=dx32)
    y64 = separable(x4, mh, mw)
    g = weights(y64.size).reshape(y64.shape)
    dx64 = np.einsum("oh,nopc,pw->nhwc", mh, g, mw)
    if one:
        y64, dx64 = y64[0], dx64[0]
    close(y64, y32, 2e-6, f"{name} {cfg} value")
    if dx32 is not None:
        close(dx64, dx32, 2e-6, f"{name} {cfg} dx")
    if method == "bicubic":
        # the exact cubic (no table) is further from TensorFlow than float32 roundoff
        exact = separable(x4, bicubic_matrix(x4.shape[1], size[0], False), bicubic_matrix(x4.shape[2], size[1], False))
        exact = exact[0] if one else exact
        err = np.max(np.abs(exact - y32)) / np.max(np.abs(y32))
        print(f"# {name} {cfg}: the exact cubic is {err:.1e} from TensorFlow", file=sys.stderr)
    emit(name, cfg, "ref-f64", x=x, y=y64, dx=dx64)


for method in ["bicubic", "area"]:
    resize_case(method, (1, 4, 5, 2), (7, 9))  # up
    resize_case(method, (2, 9, 8, 1), (4, 3))  # down
    resize_case(method, (1, 5, 6, 1), (3, 10))  # mixed
    resize_case(method, (6, 7, 2), (6, 7))  # same size, one image
    resize_case(method, (1, 7, 5, 1), (1, 2))  # to one row
    resize_case(method, (1, 1, 4, 1), (3, 4))  # from one row
    resize_case(method, (1, 10, 3, 1), (3, 3))  # a non-integer factor

# --- fft3d, ifft3d, rfft3d, irfft3d ----------------------------------------


def real(shape):
    return np.round(rng.normal(0, 1, shape), 4)


def cplx(shape):
    return real(shape) + 1j * real(shape)


def tf_cgrad(f, x, *args):
    v = tf.Variable(x)
    with tf.GradientTape() as tape:
        y = f(v, *args)
    k = int(np.prod(y.shape))
    w = cweights(k) if y.dtype.is_complex else weights(k)
    g = tape.gradient(y, v, output_gradients=tf.constant(w.reshape(y.shape), y.dtype))
    return y.numpy(), None if g is None else g.numpy()


def jax_cgrad(f, x, y_shape, y_complex):
    """f's gradient in TensorFlow's convention: the conjugate of JAX's
    cotangent pulled back through the conjugate cotangent."""
    k = int(np.prod(y_shape))
    w = cweights(k) if y_complex else weights(k)
    _, pull = jax.vjp(f, jnp.asarray(x))
    (g,) = pull(jnp.asarray(np.conj(w).reshape(y_shape)))
    return np.conj(np.asarray(g)) if np.iscomplexobj(x) else np.real(np.asarray(g))


# the route agrees with TensorFlow's own 2-D gradients
for shape, n in [((3, 4), None), ((2, 3, 5), [4, 6]), ((4, 5), [6, 8])]:
    x = real(shape)
    y, g = tf_cgrad(tf.signal.rfft2d, x, *([] if n is None else [tf.constant(n, tf.int32)]))
    gj = jax_cgrad(lambda v: jnp.fft.rfftn(v, s=n, axes=(-2, -1)), x, y.shape, True)
    close(gj, g, 1e-12, f"rfft2d {shape} {n} via JAX")
for shape, n in [((3, 3), None), ((4, 4), [4, 7]), ((2, 3, 5), [3, 9])]:
    z = cplx(shape)
    y, g = tf_cgrad(tf.signal.irfft2d, z, *([] if n is None else [tf.constant(n, tf.int32)]))
    gj = jax_cgrad(lambda v: jnp.fft.irfftn(v, s=n, axes=(-2, -1)), z, y.shape, False)
    close(gj, g, 1e-12, f"irfft2d {shape} {n} via JAX")

for shape in [(1, 1, 1), (2, 3, 4), (3, 1, 5), (2, 2, 3, 2), (4, 3, 2)]:
    z = cplx(shape)
    for name, f in [("fft3d", tf.signal.fft3d), ("ifft3d", tf.signal.ifft3d)]:
        y, g = tf_cgrad(f, z)
        emit(name, "len=none", "tf", x=z, y=y, dx=g)

for shape, lengths in [((2, 3, 4), [None, [2, 3, 6], [3, 2, 5]]), ((3, 2, 5), [None, [3, 2, 5]]),
                       ((2, 2, 2, 3), [None]), ((1, 1, 1), [None, [1, 2, 2]])]:
    x = real(shape)
    for n in lengths:
        args = [] if n is None else [tf.constant(n, tf.int32)]
        y = tf.signal.rfft3d(tf.constant(x), *args).numpy()
        g = jax_cgrad(lambda v: jnp.fft.rfftn(v, s=n, axes=(-3, -2, -1)), x, y.shape, True)
        close(np.asarray(jnp.fft.rfftn(x, s=n, axes=(-3, -2, -1))), y, 1e-12, f"rfft3d {shape} {n}")
        emit("rfft3d", "len=" + ("none" if n is None else ",".join(map(str, n))), "jax", x=x, y=y, dx=g)

for shape, lengths in [((2, 3, 3), [None, [2, 3, 5], [3, 2, 4]]), ((2, 2, 4), [None, [2, 2, 7]]),
                       ((2, 2, 2, 3), [None]), ((1, 2, 2), [None, [1, 2, 3]])]:
    z = cplx(shape)
    for n in lengths:
        args = [] if n is None else [tf.constant(n, tf.int32)]
        y = tf.signal.irfft3d(tf.constant(z), *args).numpy()
        g = jax_cgrad(lambda v: jnp.fft.irfftn(v, s=n, axes=(-3, -2, -1)), z, y.shape, False)
        close(np.asarray(jnp.fft.irfftn(z, s=n, axes=(-3, -2, -1))), y, 1e-12, f"irfft3d {shape} {n}")
        emit("irfft3d", "len=" + ("none" if n is None else ",".join(map(str, n))), "jax", x=z, y=y, dx=g)
