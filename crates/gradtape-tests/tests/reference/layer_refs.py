"""What the Keras layer reference scripts share (keras_rnn.py,
keras_conv_layers.py, keras_norm_up.py): the tests' inputs, the two sums
that summarise a tensor, and one case's output and gradients.

`init(shape, k, s)[i] = s sin(0.37 i + k)`; a layer's weights are
`init(shape, 10 + i, 0.4) + w_offset` in Keras's order; each tensor is
summarised as (Σ v, Σ v[i] sin(0.1 i)), and the gradients are of
L = Σ y[i] sin(0.1 i), with respect to the input, then each weight.
"""
import os

os.environ["KERAS_BACKEND"] = "tensorflow"
import numpy as np
import tensorflow as tf


def init(shape, k, scale):
    n = int(np.prod(shape))
    return (scale * np.sin(0.37 * np.arange(n) + k)).reshape(shape)


def wsum(t):
    v = np.asarray(t, dtype=np.float64).reshape(-1)
    return (float(v.sum()), float((v * np.sin(0.1 * np.arange(v.size))).sum()))


def run(name, layer, shape, x_scale=1.0, x_offset=0.0, w_offset=0.0, reference=None, with_shape=True):
    """Prints the case as a Rust tuple: ([shape,] y sums, &[gradient sums]).
    `reference(x, weights)`, if given, must agree with the layer's output."""
    xv = init(shape, 1.0, x_scale) + x_offset
    x = tf.Variable(xv)
    layer.build(x.shape)
    for i, w in enumerate(layer.weights):
        w.assign(init(w.shape, 10.0 + i, 0.4) + w_offset)
    with tf.GradientTape() as tape:
        y = layer(x)
        n = int(np.prod(y.shape))
        loss = tf.reduce_sum(tf.reshape(y, [-1]) * tf.constant(np.sin(0.1 * np.arange(n))))
    grads = tape.gradient(loss, [x] + list(layer.weights))
    if reference is not None:
        assert np.abs(reference(xv, [w.numpy() for w in layer.weights]) - y.numpy()).max() < 1e-12
    print(f"// {name}: {list(y.shape)}, weights {[w.path for w in layer.weights]}")
    head = f"{list(y.shape)}, " if with_shape else ""
    print(f"    ({head}{wsum(y)}, &{[wsum(g) for g in grads]}),")
