"""Reference values for tests/nn/batch_norm_axis.rs: Keras 3.15's
BatchNormalization(axis=...) (TensorFlow backend, float64, CPU), momentum
0.9: channels first ([N, C, H, W], axis=1) and a [batch, time, features]
input with axis=-1 and axis=1; then two feature axes, which Keras 3 does
not take (Keras 2's axis=[1, 2]), computed with tf.nn.moments and
tf.nn.batch_normalization over the other axis.

Run: /work/refvenv/bin/python keras_batch_norm_axis.py
Input init(shape, 1, 1.5) + 0.3; weights (gamma, beta, moving_mean,
moving_variance) init([F], 10 + i, 0.4) + 1 (see layer_refs.py); a
training call, then an inference call (with the moving statistics it
left); each prints the output's sums and those of the gradients of
L = Σ y[i] sin(0.1 i) w.r.t. the input, gamma and beta, and the training
call the moving statistics it left.
"""
import numpy as np
import keras
import tensorflow as tf

from layer_refs import init, wsum


def loss_of(y):
    n = int(np.prod(y.shape))
    return tf.reduce_sum(tf.reshape(y, [-1]) * tf.constant(np.sin(0.1 * np.arange(n))))


def case(name, shape, call, weights):
    x = tf.Variable(init(shape, 1.0, 1.5) + 0.3)
    print(f"// {name}: {shape}")
    for training in [True, False]:
        with tf.GradientTape() as tape:
            y = call(x, training)
            loss = loss_of(y)
        g = tape.gradient(loss, [x, weights[0], weights[1]])
        print(f"    // training={training}: y, then gradients of x, gamma, beta")
        print(f"    ({wsum(y)}, &{[wsum(t) for t in g]}),")
        if training:
            print(f"    // moving mean, moving variance after it")
            print(f"    {[float(v) for v in weights[2].numpy()]},")
            print(f"    {[float(v) for v in weights[3].numpy()]},")


def keras_case(shape, axis):
    layer = keras.layers.BatchNormalization(axis=axis, momentum=0.9, dtype="float64")
    layer.build(shape)
    for i, w in enumerate(layer.weights):
        w.assign(init(w.shape, 10.0 + i, 0.4) + 1.0)
    case(f"BatchNormalization(axis={axis}, momentum=0.9)", shape, lambda x, t: layer(x, training=t), layer.weights)


keras_case([2, 3, 4, 5], 1)
keras_case([4, 5, 3], -1)
keras_case([4, 5, 3], 1)

# two feature axes, [2, 3, 4] with axes [1, 2]: 12 features, flattened in
# increasing axis order
shape, feats = [2, 3, 4], [3, 4]
ws = [tf.Variable(init([12], 10.0 + i, 0.4) + 1.0) for i in range(4)]


def two_axes(x, training):
    r = lambda w: tf.reshape(w, [1] + feats)
    if training:
        mean, var = tf.nn.moments(x, axes=[0])
        ws[2].assign(ws[2] * 0.9 + tf.reshape(mean, [-1]) * (1.0 - 0.9))
        ws[3].assign(ws[3] * 0.9 + tf.reshape(var, [-1]) * (1.0 - 0.9))
        mean, var = r(mean), r(var)
    else:
        mean, var = r(ws[2]), r(ws[3])
    return tf.nn.batch_normalization(x, mean, var, r(ws[1]), r(ws[0]), 1e-3)


case("axes [1, 2] (tf.nn.moments over axis 0, tf.nn.batch_normalization)", shape, two_axes, ws)
