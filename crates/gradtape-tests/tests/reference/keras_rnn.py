"""Reference values for tests/nn/rnn_layers.rs: Keras 3.15's LSTM, GRU
and Bidirectional layers (TensorFlow backend, float64, CPU).

Run: /work/refvenv/bin/python keras_rnn.py
Inputs x = init([2, 5, 3], 1, 1) (`init(shape, k, s)[i] = s sin(0.37 i + k)`),
weights w_i = init(shape, 10 + i, 0.4) in Keras's order; each tensor is
summarised as (Σ v, Σ v[i] sin(0.1 i)); gradients of L = Σ y[i] sin(0.1 i).
"""
import os

os.environ["KERAS_BACKEND"] = "tensorflow"
import numpy as np
import tensorflow as tf
import keras


def init(shape, k, scale):
    n = int(np.prod(shape))
    return (scale * np.sin(0.37 * np.arange(n) + k)).reshape(shape)


def wsum(t):
    v = np.asarray(t, dtype=np.float64).reshape(-1)
    return (float(v.sum()), float((v * np.sin(0.1 * np.arange(v.size))).sum()))


def run(name, layer):
    x = tf.Variable(init([2, 5, 3], 1.0, 1.0))
    layer.build(x.shape)
    for i, w in enumerate(layer.weights):
        w.assign(init(w.shape, 10.0 + i, 0.4))
    with tf.GradientTape() as tape:
        y = layer(x)
        n = int(np.prod(y.shape))
        loss = tf.reduce_sum(tf.reshape(y, [-1]) * tf.constant(np.sin(0.1 * np.arange(n))))
    grads = tape.gradient(loss, [x] + list(layer.weights))
    print(f"// {name}: {list(y.shape)}, weights {[w.path for w in layer.weights]}")
    print(f"    ({wsum(y)}, &{[wsum(g) for g in grads]}),")


L = keras.layers
run("LSTM(4)", L.LSTM(4, dtype="float64"))
run("LSTM(4, return_sequences, go_backwards)", L.LSTM(4, return_sequences=True, go_backwards=True, dtype="float64"))
run("GRU(4, return_sequences)", L.GRU(4, return_sequences=True, dtype="float64"))
run("GRU(4, go_backwards)", L.GRU(4, go_backwards=True, dtype="float64"))
for merge in ["concat", "sum", "mul", "ave"]:
    run(f"Bidirectional(LSTM(4, return_sequences), {merge})",
        L.Bidirectional(L.LSTM(4, return_sequences=True, dtype="float64"), merge_mode=merge, dtype="float64"))
run("Bidirectional(GRU(3))", L.Bidirectional(L.GRU(3, dtype="float64"), dtype="float64"))
