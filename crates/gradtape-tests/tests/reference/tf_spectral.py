"""TensorFlow's values and gradients of the discrete Fourier transforms
(tf.signal fft, ifft, fft2d, ifft2d, rfft, irfft, rfft2d, irfft2d), for
tests/ops/tf_spectral.rs: prime, odd and even lengths, batches, length 1,
fft_length shorter and longer than the input, and half spectra whose
zero and Nyquist frequencies carry imaginary parts (ignored by irfft).

Run: /work/refvenv/bin/python tf_spectral.py > ../data/tf_spectral.txt
(TensorFlow 2.21, complex128 and float64, CPU.)

Each line: `op|shape|fft_length|x|value|grad|source`, `shape` the input's dims
joined by `x`, `fft_length` `none` or its numbers joined by `,`, and the
tensors as complex numbers (`re,im` pairs joined by `;`, real tensors with
zero imaginary parts), row-major. `grad` is `tape.gradient(y, x,
output_gradients=w)`: w[i] = (1 + i/2) − 0.5i·(i mod 3) for a complex y
(TensorFlow's convention, the conjugate of the Wirtinger product), and
w[i] = 1 + i/2 for a real y (irfft), i over the flattened y. `source`
is `tf`, or `tf-cropped` where fft_length crops the input: TensorFlow's
own gradient is wrong there (see `case`), and the gradient is
TensorFlow's of the cropping spelled out.
"""
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(2021)


def fmt(v):
    return ";".join(f"{float(np.real(x))!r},{float(np.imag(x))!r}" for x in np.asarray(v).reshape(-1))


def real(shape):
    return np.round(rng.normal(0, 1, shape), 4)


def cplx(shape):
    return real(shape) + 1j * real(shape)


def crop(name, x, n):
    """x cut to at most n[j] along each of its last len(n) axes (n[-1]//2 + 1
    for the last axis of an inverse real transform's half spectrum)."""
    if name.startswith("irfft"):
        n = list(n[:-1]) + [n[-1] // 2 + 1]
    return x[(Ellipsis,) + tuple(slice(0, v) for v in n)]


def case(name, f, x, n=None):
    xv = tf.Variable(x)
    with tf.GradientTape() as tape:
        y = f(xv) if n is None else f(xv, tf.constant(n, tf.int32))
    src = "tf"
    if n is not None and crop(name, x, n).shape != x.shape:
        # TensorFlow's gradients of the real transforms are wrong when
        # fft_length crops the input: they fail ("Incompatible shapes"), or
        # broadcast where the kept part has length 1 (rfft of 6 numbers
        # to fft_length 1: 3.5 for every input, where 1, 0, ..., 0 is
        # right; JAX agrees with the latter). The gradient is then
        # TensorFlow's of the same function spelled f(x[..., :n], n).
        src = "tf-cropped"
        with tf.GradientTape() as tape:
            y_cropped = f(crop(name, xv, n), tf.constant(n, tf.int32))
        g = gradient(tape, y_cropped, xv)
    else:
        g = gradient(tape, y, xv)
    shape = "x".join(str(d) for d in x.shape)
    length = "none" if n is None else ",".join(str(v) for v in n)
    print(f"{name}|{shape}|{length}|{fmt(x)}|{fmt(y.numpy())}|{fmt(g.numpy())}|{src}")


def gradient(tape, y, xv):
    k = int(np.prod(y.shape))
    i = np.arange(k)
    if y.dtype.is_complex:
        w = (1 + 0.5 * i) - 0.5j * (i % 3)
    else:
        w = 1 + 0.5 * i
    return tape.gradient(y, xv, output_gradients=tf.constant(w.reshape(y.shape), y.dtype))


for shape in [(1,), (2,), (5,), (7,), (8,), (11,), (2, 6), (3, 1), (2, 2, 9)]:
    z = cplx(shape)
    case("fft", tf.signal.fft, z)
    case("ifft", tf.signal.ifft, z)
for shape in [(1, 1), (3, 4), (5, 3), (1, 7), (2, 3, 5), (2, 4, 4)]:
    z = cplx(shape)
    case("fft2d", tf.signal.fft2d, z)
    case("ifft2d", tf.signal.ifft2d, z)

# rfft: the default length, and lengths shorter (crop) and longer (zero
# padding) than the input, odd and even
for shape, lengths in [
    ((1,), [None, [1], [4]]),
    ((2,), [None, [3]]),
    ((5,), [None, [3], [4], [8], [9]]),
    ((6,), [None, [1], [5], [7], [10]]),
    ((8,), [None, [6]]),
    ((2, 7), [None, [4], [12]]),
]:
    x = real(shape)
    for n in lengths:
        case("rfft", tf.signal.rfft, x, n)

# irfft of m frequencies: the default length 2(m - 1), the odd 2m - 1,
# shorter (crops the spectrum) and longer (pads it with zeros)
for shape, lengths in [
    ((2,), [None, [1], [3], [4]]),
    ((3,), [None, [5], [2], [3], [8], [9]]),
    ((4,), [None, [7], [4], [10]]),
    ((5,), [None, [9], [1], [6], [7], [16]]),
    ((2, 6), [None, [11], [5], [14]]),
]:
    z = cplx(shape)
    for n in lengths:
        case("irfft", tf.signal.irfft, z, n)

for shape, lengths in [
    ((3, 4), [None, [3, 4], [2, 3], [5, 6], [4, 5], [1, 1]]),
    ((4, 5), [None, [3, 8], [6, 2]]),
    ((2, 3, 6), [None, [3, 5]]),
    ((1, 1), [None, [1, 2]]),
]:
    x = real(shape)
    for n in lengths:
        case("rfft2d", tf.signal.rfft2d, x, n)

for shape, lengths in [
    ((3, 3), [None, [3, 5], [3, 4], [2, 3], [5, 6], [4, 7]]),
    ((4, 4), [None, [4, 7], [2, 2], [6, 9]]),
    ((2, 3, 5), [None, [3, 9], [4, 5]]),
    ((1, 2), [None, [1, 1], [1, 3]]),
]:
    z = cplx(shape)
    for n in lengths:
        case("irfft2d", tf.signal.irfft2d, z, n)
