"""The steps of `act` campaigns of tf_programs.py: Keras 3's activations on
the TensorFlow backend (mish, hard_sigmoid, hard_silu, sparse_plus, celu,
relu with its arguments, squareplus, glu along the last axis; silu,
log_sigmoid and softsign are tf_programs.py's own) and an LSTM step
written with tf ops, as ../ops/tf_programs_ops.rs runs them in gradtape
(the same names, attributes and constants on both sides).
"""
import keras
import numpy as np
import tensorflow as tf

FLOATS = ("f64", "f32")

# Keras 3's activations on the TensorFlow backend (`act` campaigns)
ACT = {
    "mish": keras.activations.mish, "hard_sigmoid": keras.activations.hard_sigmoid,
    "hard_silu": keras.activations.hard_silu, "sparse_plus": keras.activations.sparse_plus,
}
ACT_OPS = {*ACT, "celu", "relu_with", "squareplus", "glu", "lstm_cell"}
# the gates' scales of `lstm_cell`'s z, one per gate (i, f, g, o)
LSTM_SCALES = (1.0, -0.5, 2.0, 1.5)


def run_act(op, xs, a):
    x = xs[0]
    if not x.dtype.is_floating:
        raise ValueError(f"{op} of {x.dtype.name}")
    if op in ACT:
        return ACT[op](x)
    if op == "celu":
        return keras.activations.celu(x, alpha=a["alpha"][0])
    if op == "relu_with":
        return keras.activations.relu(x, negative_slope=a["slope"][0],
                                      max_value=a["max"][0] if "max" in a else None,
                                      threshold=a["thr"][0])
    if op == "squareplus":
        return keras.activations.squareplus(x, b=a["b"][0])
    if op == "glu":
        return keras.activations.glu(x, axis=-1)
    # lstm_cell: z = x tiled 4 times along its last axis, gate k scaled by
    # LSTM_SCALES[k]; c = xs[1]; the value is h and c' concatenated
    u = x.shape[-1]
    scale = np.repeat(np.array(LSTM_SCALES), u)
    z = tf.tile(x, [1] * (len(x.shape) - 1) + [4]) * tf.constant(scale, x.dtype)
    zi, zf, zg, zo = tf.split(z, 4, axis=-1)
    c1 = tf.sigmoid(zf) * xs[1] + tf.sigmoid(zi) * tf.tanh(zg)
    h = tf.sigmoid(zo) * tf.tanh(c1)
    return tf.concat([h, c1], -1)


def draw_act_step(g):
    """Steps of `act` campaigns: an activation of a float value, or an LSTM
    step of one (its gates tiled from it) and a state of its shape."""
    i = g.pick(FLOATS)
    d, s, _ = g.vals[i]
    r = g.r(14)
    if r < 7:
        return (["mish", "hard_sigmoid", "hard_silu", "sparse_plus", "silu", "log_sigmoid", "softsign"][r], [i], {})
    if r == 7:
        return ("celu", [i], {"alpha": [[1.0, 0.5, 2.0][g.r(3)]]})
    if r == 8:
        # (slopes exact in f32: TensorFlow's leaky_relu takes an f32 alpha)
        a = {"slope": [[0.0, 0.25, 0.5][g.r(3)]], "thr": [[0.0, 0.0, 1.0, 0.5][g.r(4)]]}
        if g.p(0.5):
            a["max"] = [[6.0, 2.5][g.r(2)]]
        return ("relu_with", [i], a)
    if r == 9:
        return ("squareplus", [i], {"b": [[4.0, 0.5, 1.0][g.r(3)]]})
    if r == 10:
        if s and s[-1] % 2 and g.p(0.8):
            i = g.new_input(d, s[:-1] + (2 * max(s[-1], 1),))
        return ("glu", [i], {})
    if not s:
        if g.p(0.5):
            return None
        i = g.new_input(d, g.shape(1 + g.r(2)))
        s = g.vals[i][1]
    c = [j for j, v in enumerate(g.vals) if v[0] == d and v[1] == s and j != i]
    c = c[g.r(len(c))] if c and g.p(0.4) else g.new_input(d, s)
    return ("lstm_cell", [i, c], {})
