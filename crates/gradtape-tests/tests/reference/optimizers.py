"""Reference values for tests/nn/optimizers.rs, from Keras 3 (TensorFlow
backend) in float64, and PyTorch's SparseAdam for the lazy sparse Adam.

Run: ~/.cache/gradtape-peers/bin/python optimizers.py
The learning rate is given as a callable (a float learning rate is stored
as a float32 variable), and the hyper-parameters are dyadic (see below).
"""
import os
os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import math
import numpy as np
import keras
import tensorflow as tf

W0 = np.array([[0.5, -1.2, 2.0], [0.3, 0.0, -0.7]], dtype=np.float64)


def grad(k):
    i = np.arange(6, dtype=np.float64)
    return (0.3 * np.sin(1.3 * i + 0.9 * k) + 0.1 * k * np.cos(i)).reshape(2, 3)


def shrinking(k):
    """A gradient that is large first, then small (AMSGrad's v-hat then differs from v)."""
    return grad(k) * (4.0 if k == 0 else 0.1)


def run(name, make, steps=3, g=grad):
    w = keras.Variable(W0.copy(), dtype="float64")
    opt = make()
    for k in range(steps):
        opt.apply_gradients([(tf.constant(g(k)), w)])
    vals = ", ".join(repr(float(x)) for x in w.numpy().ravel())
    print(f"    (\"{name}\", [{vals}]),")


# Hyper-parameters are dyadic (exact in float32): Keras converts some of
# them (the learning rate, momentum, the betas in the bias correction) to
# float32 tensors before casting to float64, so other values would carry
# float32 rounding into the float64 run.
LR, LR_SMALL, EPS = 0.125, 2.0**-7, 2.0**-20
O = keras.optimizers
cases = [
    ("sgd", lambda: O.SGD(learning_rate=lambda: LR)),
    ("sgd_momentum", lambda: O.SGD(learning_rate=lambda: LR, momentum=0.875)),
    ("sgd_nesterov", lambda: O.SGD(learning_rate=lambda: LR, momentum=0.875, nesterov=True)),
    ("sgd_weight_decay", lambda: O.SGD(learning_rate=lambda: LR, weight_decay=0.0625)),
    ("sgd_clipvalue", lambda: O.SGD(learning_rate=lambda: LR, clipvalue=0.0625)),
    ("adam", lambda: O.Adam(learning_rate=lambda: LR_SMALL, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=EPS)),
    ("adam_betas", lambda: O.Adam(learning_rate=lambda: LR_SMALL, beta_1=0.5, beta_2=0.75, epsilon=2.0**-10)),
    ("adam_clipnorm", lambda: O.Adam(learning_rate=lambda: LR_SMALL, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=EPS, clipnorm=0.125)),
    ("adam_global_clipnorm", lambda: O.Adam(learning_rate=lambda: LR_SMALL, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=EPS, global_clipnorm=0.125)),
    ("adamw", lambda: O.AdamW(learning_rate=lambda: LR_SMALL, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=EPS, weight_decay=0.125)),
    ("rmsprop", lambda: O.RMSprop(learning_rate=lambda: LR_SMALL, rho=0.875, epsilon=EPS)),
    ("rmsprop_momentum", lambda: O.RMSprop(learning_rate=lambda: LR_SMALL, rho=0.875, epsilon=EPS, momentum=0.5)),
    ("rmsprop_centered", lambda: O.RMSprop(learning_rate=lambda: LR_SMALL, rho=0.875, epsilon=EPS, centered=True)),
    ("rmsprop_momentum_centered", lambda: O.RMSprop(learning_rate=lambda: LR_SMALL, rho=0.875, epsilon=EPS, momentum=0.5, centered=True)),
    ("adagrad", lambda: O.Adagrad(learning_rate=lambda: LR, initial_accumulator_value=0.125, epsilon=EPS)),
    ("adamax", lambda: O.Adamax(learning_rate=lambda: LR_SMALL, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=EPS)),
    ("nadam", lambda: O.Nadam(learning_rate=lambda: LR_SMALL, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=EPS)),
    ("adadelta", lambda: O.Adadelta(learning_rate=lambda: 1.0, rho=0.875, epsilon=2.0**-10)),
    ("lion", lambda: O.Lion(learning_rate=lambda: LR_SMALL, beta_1=0.875, beta_2=0.96875)),
    ("lion_weight_decay", lambda: O.Lion(learning_rate=lambda: LR_SMALL, beta_1=0.875, beta_2=0.96875, weight_decay=0.5)),
    # Keras's defaults (not dyadic: compared more loosely)
    ("adam_defaults", lambda: O.Adam(learning_rate=lambda: 0.001)),
]
print(f"// keras {keras.__version__}, tensorflow {tf.__version__}: w after 3 steps")
for name, make in cases:
    run(name, make)
# Keras's Nadam keeps the product of its momentum factors in a variable
# updated with a float32 0.96 (ops.power(0.96, ...)), 1e-9 off; the
# referee is its formula in f64 (numpy)
def nadam_f64(lr=LR_SMALL, b1=0.875, b2=1 - 2.0**-10, eps=EPS):
    w, m, v, prod = W0.copy(), np.zeros_like(W0), np.zeros_like(W0), 1.0
    mu = lambda s: b1 * (1 - 0.5 * 0.96**s)
    for k in range(3):
        t, g = k + 1, grad(k)
        prod *= mu(t)
        m += (g - m) * (1 - b1)
        v += (g * g - v) * (1 - b2)
        m_hat = mu(t + 1) * m / (1 - prod * mu(t + 1)) + (1 - mu(t)) * g / (1 - prod)
        w -= m_hat * lr / (np.sqrt(v / (1 - b2**t)) + eps)
    vals = ", ".join(repr(float(x)) for x in w.ravel())
    print(f"    (\"nadam_f64\", [{vals}]),")


nadam_f64()
run("adam_shrinking", lambda: O.Adam(learning_rate=lambda: LR_SMALL, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=EPS), g=shrinking)
run("adam_amsgrad_shrinking", lambda: O.Adam(learning_rate=lambda: LR_SMALL, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=EPS, amsgrad=True), g=shrinking)

# float32, float learning rate (stored as a float32 variable), 3 steps
w = keras.Variable(W0.astype(np.float32), dtype="float32")
opt = keras.optimizers.Adam(learning_rate=0.01)
for k in range(3):
    opt.apply_gradients([(tf.constant(grad(k).astype(np.float32)), w)])
print("// adam f32:", [float(x) for x in w.numpy().ravel()])

# Keras with a sparse gradient (IndexedSlices, rows 0 and 2 of a [4, 3]
# table): the result equals the dense gradient's.
T0 = np.arange(12, dtype=np.float64).reshape(4, 3) * 0.1 - 0.5
def sparse_grad(k):
    """Rows [0, 1], then [2, 0], then [0, 3] of a [4, 3] table (rows 1 to 3
    miss some steps, so lazy and dense-equivalent updates differ)."""
    vals = np.array([[0.3, -0.2, 0.1], [0.05, 0.4, -0.3]]) * (1 + k)
    return vals, np.array([[0, 1], [2, 0], [0, 3]][k])
for name, make in [("adam", lambda: O.Adam(learning_rate=lambda: LR_SMALL, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=EPS)),
                   ("sgd_momentum", lambda: O.SGD(learning_rate=lambda: LR, momentum=0.875))]:
    w = keras.Variable(T0.copy(), dtype="float64")
    opt = make()
    for k in range(3):
        v, i = sparse_grad(k)
        opt.apply_gradients([(tf.IndexedSlices(tf.constant(v), tf.constant(i), tf.constant([4, 3], dtype=tf.int64)), w)])
    print(f"// keras sparse {name}:", [float(x) for x in w.numpy().ravel()])

