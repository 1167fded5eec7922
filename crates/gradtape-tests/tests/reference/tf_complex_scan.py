"""Reference values for `complex_cumsum_and_cumprod_match_tensorflow` in
tests/ops/tf_complex_index.rs: TensorFlow 2.21's complex128 `cumsum` and
`cumprod` (every exclusive/reverse flag) and their gradients with a
complex cotangent (TensorFlow's conjugate convention), at nonzero points
(TensorFlow's cumprod gradient divides by the input).

Run: /work/refvenv/bin/python tf_complex_scan.py
"""
import os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf

x0 = tf.constant([1 + 2j, -0.5 + 0.3j, 2 - 1j, 0.7 + 0j], tf.complex128)
g = tf.constant([0.3 - 0.2j, 1 + 0.5j, -0.4 + 0.9j, 0.2 + 0.1j], tf.complex128)
for op in ["cumsum", "cumprod"]:
    for exclusive in [False, True]:
        for reverse in [False, True]:
            x = tf.identity(x0)
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = getattr(tf.math, op)(x, exclusive=exclusive, reverse=reverse)
            d = tape.gradient(y, x, output_gradients=g)
            fmt = lambda t: ", ".join(f"({float(z.real)!r}, {float(z.imag)!r})" for z in t.numpy())
            print(f'("{op}", {str(exclusive).lower()}, {str(reverse).lower()}, [{fmt(y)}], [{fmt(d)}]),')

# TensorFlow's own cumprod gradient omits the conjugate of its complex
# convention (it is g · ∂y/∂x, where tf.multiply's is g · conj(∂y/∂x)):
# the referee for the cumprod gradients is the same products written as a
# chain of tf.multiply, which TensorFlow differentiates by its convention
print("# cumprod as a chain of tf.multiply:")
for exclusive in [False, True]:
    for reverse in [False, True]:
        x = tf.identity(x0)
        with tf.GradientTape() as tape:
            tape.watch(x)
            xs = tf.unstack(x)
            order = list(range(4))[::-1] if reverse else list(range(4))
            out = [None] * 4
            acc = tf.constant(1 + 0j, tf.complex128)
            for i in order:
                nxt = acc * xs[i]
                out[i] = acc if exclusive else nxt
                acc = nxt
            y = tf.stack(out)
        d = tape.gradient(y, x, output_gradients=g)
        fmt = lambda t: ", ".join(f"({float(z.real)!r}, {float(z.imag)!r})" for z in t.numpy())
        print(f'("cumprod", {str(exclusive).lower()}, {str(reverse).lower()}, [{fmt(y)}], [{fmt(d)}]),')
