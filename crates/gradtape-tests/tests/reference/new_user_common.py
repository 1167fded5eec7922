"""What the new-user reference scripts (new_user_models*.py) share: Keras on
TensorFlow in float64, the deterministic fill every weight and input is made
of, the line format the Rust tests read, and the optimiser they all use.

Every weight and input is `fill(shape, k)`, 0.5 sin(0.7 i + k) over the
row-major index i, times a scale written the same in the Rust tests.
"""
import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import math

import keras
import numpy as np
import tensorflow as tf

keras.config.set_floatx("float64")
F64 = "float64"


def fill(shape, k, scale=1.0):
    n = int(np.prod(shape))
    v = np.array([0.5 * math.sin(0.7 * i + k) for i in range(n)], dtype=np.float64)
    return v.reshape(shape) * scale


def emit(name, t):
    """One line `name: v0 v1 ...` of float64 reprs; `none` for no gradient."""
    if t is None:
        print(f"{name}: none")
        return
    if isinstance(t, tf.IndexedSlices):
        t = tf.convert_to_tensor(t)
    v = np.asarray(tf.cast(t, tf.float64), dtype=np.float64).ravel()
    print(f"{name}: " + " ".join(repr(float(x)) for x in v))


def set_weights(variables, k0, ones=()):
    """Variable j gets fill(shape, k0 + j), plus one where j is in `ones`."""
    for j, v in enumerate(variables):
        v.assign(tf.cast(fill(v.shape, k0 + j) + (1.0 if j in ones else 0.0), v.dtype))


def adam():
    return keras.optimizers.Adam(learning_rate=lambda: 2.0**-7, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=2.0**-20)


def train(name, step_fn, variables, opt, steps=2, grads_fn=None, after=None, data=None):
    """Runs `steps` steps of `step_fn` (outputs, loss last) under one tape
    each, emitting the outputs, the gradients and then the weights. The
    gradients are made dense (an embedding's IndexedSlices, as gradtape
    applies it: Keras's Adam squares an IndexedSlices' values before summing
    repeated rows, which differs from its own dense result); a missing one
    is `none`, its variable left alone. `grads_fn` maps the gradients to
    those applied (clipping), `after` runs after each update, `data(s)`
    gives step s's arguments."""
    for s in range(1, steps + 1):
        args = data(s) if data else ()
        with tf.GradientTape() as tape:
            outs = step_fn(*args)
        grads = [None if g is None else tf.convert_to_tensor(g) for g in tape.gradient(outs[-1][1], variables)]
        applied = grads_fn(grads, outs) if grads_fn else grads
        opt.apply_gradients([(g, v) for g, v in zip(applied, variables) if g is not None])
        if after:
            after()
        for n, t in outs:
            emit(f"{name}{s}_{n}", t)
        for j, g in enumerate(grads):
            emit(f"{name}{s}_grad{j}", g)
    for j, v in enumerate(variables):
        emit(f"{name}_weight{j}", v)
