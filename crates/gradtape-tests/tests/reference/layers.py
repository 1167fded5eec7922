"""Reference values for tests/nn/nn.rs: Keras 3.15.1 (TensorFlow 2.21
backend) layers, losses and schedules, float64 where Keras allows.

Run: ~/.cache/gradtape-peers/bin/python layers.py
Every weight and input is given by the formula
    fill(shape, k)[i] = 0.5 * sin(0.7 * i + k)     (row-major i)
"""
import os
os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import keras
from keras import layers, losses, optimizers

from keras_refs import fill

keras.config.set_floatx("float64")


def show(name, a):
    a = np.asarray(a, dtype=np.float64).ravel()
    print(f"// {name}: {len(a)} values")
    print("const " + name.upper() + ": [f64; %d] = [%s];" % (len(a), ", ".join(repr(float(x)) for x in a)))


# Conv2DTranspose: 2 -> 3 channels, kernel 3x3, stride 2, same and valid
x = fill((1, 3, 2, 2), 0.0)
for pad in ["same", "valid"]:
    l = layers.Conv2DTranspose(3, 3, strides=2, padding=pad)
    l.build(x.shape)
    l.kernel.assign(fill((3, 3, 3, 2), 1.0))
    l.bias.assign(fill((3,), 2.0))
    y = l(x)
    print("// shape", tuple(y.shape))
    show(f"conv_transpose_{pad}", y)

# LayerNormalization over the last axis (epsilon 1e-3)
x = fill((2, 5), 0.3)
l = layers.LayerNormalization()
l.build(x.shape)
l.gamma.assign(fill((5,), 1.0) + 1.0)
l.beta.assign(fill((5,), 2.0))
show("layer_norm", l(x))

# BatchNormalization: one training call then one inference call
x = fill((4, 3), 0.5) * 3.0 + 1.0
l = layers.BatchNormalization()
l.build(x.shape)
l.gamma.assign(fill((3,), 1.0) + 1.0)
l.beta.assign(fill((3,), 2.0))
show("batch_norm_train", l(x, training=True))
show("batch_norm_moving_mean", l.moving_mean)
show("batch_norm_moving_variance", l.moving_variance)
show("batch_norm_infer", l(x, training=False))

# LSTMCell and GRUCell: 3 -> 4 units, two steps from a non-zero state
x = fill((2, 3), 0.1)
x2 = fill((2, 3), 0.9)
cell = layers.LSTMCell(4)
cell.build((2, 3))
cell.kernel.assign(fill((3, 16), 1.0))
cell.recurrent_kernel.assign(fill((4, 16), 2.0))
cell.bias.assign(fill((16,), 3.0))
h, (h1, c1) = cell(x, [fill((2, 4), 4.0), fill((2, 4), 5.0)])
h, (h2, c2) = cell(x2, [h1, c1])
show("lstm_h", h2)
show("lstm_c", c2)
cell = layers.GRUCell(4)
cell.build((2, 3))
cell.kernel.assign(fill((3, 12), 1.0))
cell.recurrent_kernel.assign(fill((4, 12), 2.0))
cell.bias.assign(fill((2, 12), 3.0))
h, _ = cell(x, [fill((2, 4), 4.0)])
h, _ = cell(x2, [h])
show("gru_h", h)

# losses on a [3, 4] batch, Keras's default reduction (mean over the batch)
y_true = fill((3, 4), 0.2) + 0.5                    # in [0, 1]
probs = np.abs(fill((3, 4), 1.1)) + 0.05            # positive, not normalised
logits = fill((3, 4), 2.3) * 4.0
onehot = np.eye(4)[[2, 0, 3]]
labels = np.array([2, 0, 3])
vals = [
    losses.MeanSquaredError()(y_true, logits),
    losses.MeanAbsoluteError()(y_true, logits),
    losses.Huber(delta=0.7)(y_true, logits),
    losses.BinaryCrossentropy(from_logits=True)(y_true, logits),
    losses.BinaryCrossentropy(from_logits=True, label_smoothing=0.2)(y_true, logits),
    losses.BinaryCrossentropy()(y_true, np.clip(probs, 0, 1)),
    losses.CategoricalCrossentropy(from_logits=True)(onehot, logits),
    losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)(onehot, logits),
    losses.CategoricalCrossentropy()(onehot, probs),
    losses.SparseCategoricalCrossentropy(from_logits=True)(labels, logits),
    losses.SparseCategoricalCrossentropy()(labels, probs / probs.sum(-1, keepdims=True)),
    losses.MeanSquaredError(reduction="sum")(y_true, logits),
]
show("losses", [float(v) for v in vals])
show("huber_per_sample", losses.Huber(delta=0.7, reduction=None)(y_true, logits))

# schedules (Keras evaluates them in float32)
s = [optimizers.schedules.ExponentialDecay(0.1, 7, 0.5), optimizers.schedules.ExponentialDecay(0.1, 7, 0.5, staircase=True),
     optimizers.schedules.CosineDecay(0.1, 20, alpha=0.1), optimizers.schedules.CosineDecay(0.01, 20, alpha=0.0, warmup_target=0.1, warmup_steps=5)]
steps = [0, 3, 7, 10, 24, 40]
show("schedules", [float(f(st)) for f in s for st in steps])
