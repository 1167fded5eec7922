"""Reference values for tests/nn/masking.rs: Keras 3.15's recurrent layers
given a mask (LSTM, GRU, Bidirectional; sequence or last outputs, going
backwards), Embedding(mask_zero) -> LSTM, Masking -> GRU, and the 1-D and
3-D pooling layers (TensorFlow backend, float64 but for the 3-D pools,
CPU).

Run: /work/refvenv/bin/python keras_masking.py
Inputs x = init(shape, 1, 1) (`init(shape, k, s)[i] = s sin(0.37 i + k)`),
weights w_i = init(shape, 10 + i, 0.4) in Keras's order; each tensor is
summarised as (Σ v, Σ v[i] sin(0.1 i)); gradients of L = Σ y[i] sin(0.1 i)
with respect to the input (when it is a float), then each weight. The mask
of the [2, 5, 3] inputs is MASK below (a right-padded row and a row with
holes at its start, middle and end).
"""
import numpy as np
import tensorflow as tf
import keras

from layer_refs import init, wsum


L = keras.layers
f64 = {"dtype": "float64"}
MASK = np.array([[1, 1, 1, 0, 0], [0, 1, 1, 0, 1]], dtype=bool)


def assign(weights):
    for i, w in enumerate(weights):
        w.assign(init(w.shape, 10.0 + i, 0.4))


def show(name, y, grads):
    print(f"// {name}: {list(y.shape)}")
    grads = [tf.convert_to_tensor(g) for g in grads]  # the table's is sparse
    print(f"    ({list(y.shape)}, {wsum(y)}, &{[wsum(g) for g in grads]}),")


def masked(name, layer, shape=(2, 5, 3)):
    """`layer(x, mask=MASK)`; gradients for x, then the layer's weights."""
    x = tf.Variable(init(list(shape), 1.0, 1.0))
    layer.build(x.shape)
    assign(layer.weights)
    with tf.GradientTape() as tape:
        y = layer(x, mask=tf.constant(MASK))
        n = int(np.prod(y.shape))
        loss = tf.reduce_sum(tf.reshape(y, [-1]) * np.sin(0.1 * np.arange(n)))
    show(name, y, tape.gradient(loss, [x] + list(layer.weights)))


def chained(name, first, second, x, float_input):
    """`second(first(x))` with the mask Keras passes along between them
    (checked against the mask given by hand); gradients for x (when a
    float), then the weights of both."""
    x = tf.Variable(x) if float_input else tf.constant(x)
    first.build(x.shape)
    second.build(first.compute_output_shape(x.shape))
    weights = list(first.weights) + list(second.weights)
    assign(weights)
    with tf.GradientTape() as tape:
        h = first(x)
        y = second(h)
        by_hand = second(h, mask=first.compute_mask(x, None))
        n = int(np.prod(y.shape))
        loss = tf.reduce_sum(tf.reshape(y, [-1]) * np.sin(0.1 * np.arange(n)))
    assert np.array_equal(y.numpy(), by_hand.numpy())
    sources = ([x] if float_input else []) + weights
    show(name, y, tape.gradient(loss, sources))


def pool(name, layer, shape):
    """A pooling layer: its output (as float64) and the gradient for x."""
    x = tf.Variable(init(shape, 1.0, 1.0))
    with tf.GradientTape() as tape:
        y = tf.cast(layer(x), tf.float64)
        n = int(np.prod(y.shape))
        loss = tf.reduce_sum(tf.reshape(y, [-1]) * np.sin(0.1 * np.arange(n)))
    show(name, y, tape.gradient(loss, [x]))


print("// recurrent layers, mask MASK")
masked("LSTM(4)", L.LSTM(4, **f64))
masked("LSTM(4, return_sequences)", L.LSTM(4, return_sequences=True, **f64))
masked("LSTM(4, return_sequences, go_backwards)", L.LSTM(4, return_sequences=True, go_backwards=True, **f64))
masked("LSTM(4, go_backwards)", L.LSTM(4, go_backwards=True, **f64))
masked("GRU(4, return_sequences)", L.GRU(4, return_sequences=True, **f64))
masked("GRU(4, go_backwards)", L.GRU(4, go_backwards=True, **f64))
masked("Bidirectional(LSTM(4, return_sequences), concat)",
       L.Bidirectional(L.LSTM(4, return_sequences=True, **f64), **f64))
masked("Bidirectional(GRU(3), sum)", L.Bidirectional(L.GRU(3, **f64), merge_mode="sum", **f64))
masked("Bidirectional(GRU(3, return_sequences), mul)",
       L.Bidirectional(L.GRU(3, return_sequences=True, **f64), merge_mode="mul", **f64))

print("// Embedding(10, 3, mask_zero) -> LSTM(4, return_sequences), ids IDS")
IDS = np.array([[3, 5, 9, 0, 0], [0, 2, 7, 0, 1]], dtype=np.int64)
chained("Embedding(mask_zero) -> LSTM", L.Embedding(10, 3, mask_zero=True, **f64),
        L.LSTM(4, return_sequences=True, **f64), IDS, False)
print("// Masking(0.5) -> GRU(4), x with steps [0, 3] and [1, 1], [1, 4] set to 0.5")
XM = init([2, 5, 3], 1.0, 1.0)
XM[0, 3] = 0.5
XM[1, 1] = 0.5
XM[1, 4] = 0.5
XM[0, 1, 0] = 0.5  # one feature alone does not mask a step
chained("Masking(0.5) -> GRU(4)", L.Masking(0.5, **f64), L.GRU(4, **f64), XM, True)

print("// pooling layers: ([shape], y sums, &[x gradient sums]); TensorFlow's 3-D max")
print("// pooling has no float64 kernel, so the 3-D layers compute in float32")
f32 = {"dtype": "float32"}
pool("MaxPooling3D(2)", L.MaxPooling3D(2, **f32), [2, 4, 5, 4, 3])
pool("MaxPooling3D((2, 3, 1), strides (1, 2, 1), same)",
    L.MaxPooling3D((2, 3, 1), strides=(1, 2, 1), padding="same", **f32), [1, 3, 5, 4, 2])
pool("AveragePooling3D(2, same)", L.AveragePooling3D(2, padding="same", **f32), [2, 3, 5, 3, 2])
pool("AveragePooling3D((1, 2, 2), strides 1, channels_first)",
    L.AveragePooling3D((1, 2, 2), strides=1, data_format="channels_first", **f32), [1, 2, 3, 4, 3])
pool("MaxPooling3D(2, same, channels_first)",
    L.MaxPooling3D(2, padding="same", data_format="channels_first", **f32), [1, 2, 3, 5, 3])
pool("MaxPooling1D(2)", L.MaxPooling1D(2, **f64), [2, 7, 3])
pool("MaxPooling1D(3, strides 2, same)", L.MaxPooling1D(3, strides=2, padding="same", **f64), [2, 8, 3])
pool("AveragePooling1D(3, strides 1)", L.AveragePooling1D(3, strides=1, **f64), [2, 7, 3])
pool("AveragePooling1D(2, same, channels_first)",
    L.AveragePooling1D(2, padding="same", data_format="channels_first", **f64), [2, 3, 7])
