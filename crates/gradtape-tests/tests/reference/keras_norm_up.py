"""Reference values for tests/nn/group_norm.rs: Keras 3.15's
GroupNormalization and UpSampling2D (TensorFlow backend, float64, CPU);
PyTorch's F.group_norm agrees with the first (checked here).

Run: /work/refvenv/bin/python keras_norm_up.py
Inputs init(shape, 1, 1.5) + 0.3 (`init(shape, k, s)[i] = s sin(0.37 i + k)`),
weights w_i = init(shape, 10 + i, 0.4) + 1 in Keras's order; each tensor is
summarised as (Σ v, Σ v[i] sin(0.1 i)); gradients of L = Σ y[i] sin(0.1 i).
"""
import os

os.environ["KERAS_BACKEND"] = "tensorflow"
import numpy as np
import tensorflow as tf
import torch
import torch.nn.functional as F
import keras


def init(shape, k, scale):
    n = int(np.prod(shape))
    return (scale * np.sin(0.37 * np.arange(n) + k)).reshape(shape)


def wsum(t):
    v = np.asarray(t, dtype=np.float64).reshape(-1)
    return (float(v.sum()), float((v * np.sin(0.1 * np.arange(v.size))).sum()))


def run(name, layer, shape, torch_ref=None):
    xv = init(shape, 1.0, 1.5) + 0.3
    x = tf.Variable(xv)
    layer.build(x.shape)
    for i, w in enumerate(layer.weights):
        w.assign(init(w.shape, 10.0 + i, 0.4) + 1.0)
    with tf.GradientTape() as tape:
        y = layer(x)
        n = int(np.prod(y.shape))
        loss = tf.reduce_sum(tf.reshape(y, [-1]) * tf.constant(np.sin(0.1 * np.arange(n))))
    grads = tape.gradient(loss, [x] + list(layer.weights))
    if torch_ref is not None:
        assert np.abs(torch_ref(xv, [w.numpy() for w in layer.weights]) - y.numpy()).max() < 1e-12
    print(f"// {name}: {list(y.shape)}, weights {[w.path for w in layer.weights]}")
    print(f"    ({list(y.shape)}, {wsum(y)}, &{[wsum(g) for g in grads]}),")


def torch_gn(groups, eps):
    def f(x, ws):
        # channels last -> first for PyTorch
        xt = torch.tensor(np.moveaxis(x, -1, 1))
        y = F.group_norm(xt, groups, torch.tensor(ws[0]), torch.tensor(ws[1]), eps)
        return np.moveaxis(y.numpy(), 1, -1)
    return f


L = keras.layers
f64 = {"dtype": "float64"}
run("GroupNormalization(groups=2)", L.GroupNormalization(groups=2, **f64), [2, 3, 4, 6], torch_gn(2, 1e-3))
run("GroupNormalization(groups=3, eps 1e-5)", L.GroupNormalization(groups=3, epsilon=1e-5, **f64), [2, 5, 6], torch_gn(3, 1e-5))
run("GroupNormalization(groups=1, no center)", L.GroupNormalization(groups=1, center=False, **f64), [3, 4])
run("GroupNormalization(groups=4) (instance norm)", L.GroupNormalization(groups=4, **f64), [2, 3, 3, 4])
run("UpSampling2D((2, 3))", L.UpSampling2D((2, 3), **f64), [2, 2, 3, 2])
run("UpSampling2D(2, bilinear)", L.UpSampling2D(2, interpolation="bilinear", **f64), [1, 3, 4, 2])
