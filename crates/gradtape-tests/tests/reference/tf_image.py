"""TensorFlow's values and gradients of the image ops this crate has, for
tests/ops/tf_image.rs: ResizeBilinear and ResizeNearestNeighbor with each
of their coordinate conventions (half-pixel centers, aligned corners,
neither), up and down and to one pixel, tf.image.resize of one image, the
mirror and constant pads, flips, rot90, transpose, and the crops and pads
to a bounding box. The gradients are with respect to the image.

Run: /work/refvenv/bin/python tf_image.py > ../data/tf_image.txt
(TensorFlow 2.21 and JAX, CPU.)

The `source` of a line:
- `tf`: TensorFlow in f64;
- `tf-f32`: ResizeBilinear (and tf.image.resize's bilinear) outputs
  float32 whatever its input, and its gradient takes a float32 one, both
  computing their weights in float32: these lines are TensorFlow's in
  float32 from an image of multiples of 1/1024 (exact in float32), for
  the test to run in f32;
- `jax`: the same bilinear resizes in f64 by JAX's
  jax.image.scale_and_translate (linear, no antialiasing), whose scale and
  translation are chosen to sample TensorFlow's input coordinates; each
  is checked here against TensorFlow's float32 numbers within 1e-5.

Each line: `op|config|shape|x|value|dx|source`, `config` the op's
arguments (`size=HxW;align=0|1;hpc=0|1`, `pads=top,bottom,left,right`,
`k=`, `box=top,left,height,width`, ...), `shape` the image's dims joined
by `x`; dx is the gradient of Σ w[i] y[i], w[i] = 1 + i/2. Row-major.
"""
import jax
import numpy as np
import tensorflow as tf

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

rng = np.random.default_rng(2104)


def fmt(v):
    return ",".join(repr(float(x)) for x in np.asarray(v).reshape(-1))


def image(shape, dyadic=False):
    x = rng.normal(0, 1, shape)
    return np.round(x * 1024) / 1024 if dyadic else np.round(x, 4)


def weights(n):
    return 1.0 + 0.5 * np.arange(n)


def tf_case(f, x, dtype):
    v = tf.Variable(tf.constant(x, dtype))
    with tf.GradientTape() as tape:
        y = f(v)
        s = tf.reduce_sum(tf.reshape(y, [-1]) * tf.cast(weights(int(np.prod(y.shape))), y.dtype))
    return y.numpy().astype(np.float64), tape.gradient(s, v).numpy().astype(np.float64)


def emit(name, cfg, x, y, dx, src):
    shape = "x".join(str(d) for d in x.shape)
    print(f"{name}|{cfg}|{shape}|{fmt(x)}|{fmt(y)}|{fmt(dx)}|{src}")


def jax_bilinear(x, size, align, hpc):
    """The bilinear resize sampling input coordinate i·s (legacy), i·(in−1)/(out−1)
    (aligned corners) or (i + ½)·in/out − ½ (half-pixel centers), as
    scale_and_translate, which samples (i + ½ − t)/scale − ½."""
    scales, shifts = [], []
    for n_in, n_out in zip(x.shape[1:3], size):
        if hpc:
            sc, t = n_out / n_in, 0.0
        else:
            sc = (n_out - 1) / (n_in - 1) if align and n_out > 1 else n_out / n_in
            t = 0.5 - 0.5 * sc
        scales.append(sc)
        shifts.append(t)
    shape = (x.shape[0], *size, x.shape[3])

    def f(a):
        return jax.image.scale_and_translate(a, shape, (1, 2), jnp.array(scales), jnp.array(shifts),
                                             "linear", antialias=False)

    y = f(jnp.asarray(x))
    dx = jax.grad(lambda a: jnp.sum(f(a).reshape(-1) * weights(y.size)))(jnp.asarray(x))
    return np.asarray(y), np.asarray(dx)


RESIZES = [((1, 3, 4, 2), (5, 3)), ((2, 4, 5, 1), (7, 3)), ((1, 5, 4, 2), (2, 9)), ((1, 6, 6, 1), (3, 4)),
           ((1, 1, 4, 1), (3, 2)), ((1, 3, 3, 1), (1, 1)), ((1, 4, 3, 1), (8, 6)), ((1, 3, 5, 2), (3, 5)),
           ((1, 7, 2, 1), (3, 1)), ((1, 7, 3, 1), (50, 11)), ((1, 17, 13, 1), (5, 4)), ((1, 2, 2, 1), (9, 9))]
for shape, size in RESIZES:
    for align, hpc in [(False, False), (True, False), (False, True)]:
        cfg = f"size={size[0]}x{size[1]};align={int(align)};hpc={int(hpc)}"
        bil = lambda a: tf.raw_ops.ResizeBilinear(images=a, size=size, align_corners=align,
                                                  half_pixel_centers=hpc)
        x = image(shape, dyadic=True)
        y, dx = tf_case(bil, x, tf.float32)
        emit("resize_bilinear", cfg, x, y, dx, "tf-f32")
        # (a one-pixel axis with aligned corners or a legacy upsampling of more than 2x
        # samples outside what scale_and_translate reads: no JAX line)
        ratio = min(i / o for i, o in zip(shape[1:3], size))
        if not (align and min(shape[1:3]) == 1) and (align or hpc or ratio >= 0.5):
            jy, jdx = jax_bilinear(x, size, align, hpc)
            scale = max(np.max(np.abs(y)), np.max(np.abs(dx)), 1.0)
            assert np.max(np.abs(jy - y)) < 1e-5 * scale and np.max(np.abs(jdx - dx)) < 1e-5 * scale, cfg
            emit("resize_bilinear", cfg, x, jy, jdx, "jax")
        x = image(shape)
        near = lambda a: tf.raw_ops.ResizeNearestNeighbor(images=a, size=size, align_corners=align,
                                                          half_pixel_centers=hpc)
        y, dx = tf_case(near, x, tf.float64)
        emit("resize_nearest_neighbor", cfg, x, y, dx, "tf")

# infinities and NaN in the image: TensorFlow's lerps (a + (b − a)·w) give
# NaN next to an infinity, inf − inf, and in the gradients inf·0 where a
# weight is 0
x = image((1, 3, 4, 1), dyadic=True)
x[0, 1, 1, 0], x[0, 2, 3, 0], x[0, 0, 3, 0] = np.inf, -np.inf, np.nan
for size, align, hpc in [((5, 7), False, True), ((2, 3), True, False), ((6, 8), False, False)]:
    cfg = f"size={size[0]}x{size[1]};align={int(align)};hpc={int(hpc)}"
    f = lambda a: tf.raw_ops.ResizeBilinear(images=a, size=size, align_corners=align, half_pixel_centers=hpc)
    y, dx = tf_case(f, x, tf.float32)
    emit("resize_bilinear", cfg, x, y, dx, "tf-f32")
    f = lambda a: tf.raw_ops.ResizeNearestNeighbor(images=a, size=size, align_corners=align, half_pixel_centers=hpc)
    y, dx = tf_case(f, x, tf.float64)
    emit("resize_nearest_neighbor", cfg, x, y, dx, "tf")

# tf.image.resize of one image [h, w, c] (TensorFlow 2's half-pixel centers)
for shape, size in [((4, 5, 2), (3, 7)), ((2, 3, 1), (5, 2))]:
    cfg = f"size={size[0]}x{size[1]}"
    x = image(shape, dyadic=True)
    y, dx = tf_case(lambda a: tf.image.resize(a, size, "bilinear"), x, tf.float32)
    emit("resize_images_bilinear", cfg, x, y, dx, "tf-f32")
    x = image(shape)
    y, dx = tf_case(lambda a: tf.image.resize(a, size, "nearest"), x, tf.float64)
    emit("resize_images_nearest", cfg, x, y, dx, "tf")

# pads of the height and width of [1, 4, 5, 2]: mirror (up to their limits) and constant
for mode, pads in [("REFLECT", (1, 2, 3, 0)), ("REFLECT", (3, 3, 4, 4)), ("REFLECT", (0, 0, 2, 1)),
                   ("SYMMETRIC", (1, 2, 3, 0)), ("SYMMETRIC", (4, 4, 5, 5)), ("SYMMETRIC", (2, 0, 0, 4)),
                   ("CONSTANT", (1, 0, 2, 3))]:
    t, b, l, r = pads
    x = image((1, 4, 5, 2))
    y, dx = tf_case(lambda a: tf.pad(a, [[0, 0], [t, b], [l, r], [0, 0]], mode, constant_values=1.5), x, tf.float64)
    emit(f"pad_{mode.lower()}", f"pads={t},{b},{l},{r}", x, y, dx, "tf")

# flips, rotations, transposition, and a crop and a pad to a bounding box, of [2, 3, 4, 2]
x = image((2, 3, 4, 2))
for name, cfg, f in [
    ("flip_left_right", "", tf.image.flip_left_right),
    ("flip_up_down", "", tf.image.flip_up_down),
    ("transpose", "", tf.image.transpose),
    ("rot90", "k=1", lambda a: tf.image.rot90(a, 1)),
    ("rot90", "k=2", lambda a: tf.image.rot90(a, 2)),
    ("rot90", "k=3", lambda a: tf.image.rot90(a, 3)),
    ("crop_to_bounding_box", "box=1,1,2,2", lambda a: tf.image.crop_to_bounding_box(a, 1, 1, 2, 2)),
    ("crop_to_bounding_box", "box=0,2,3,2", lambda a: tf.image.crop_to_bounding_box(a, 0, 2, 3, 2)),
    ("pad_to_bounding_box", "box=1,2,5,7", lambda a: tf.image.pad_to_bounding_box(a, 1, 2, 5, 7)),
]:
    y, dx = tf_case(f, x, tf.float64)
    emit(name, cfg, x, y, dx, "tf")
