"""Keras 3.15's losses (TensorFlow 2.21 backend, float64), for
tests/nn/keras_losses.rs: per-sample values and every reduction, with and
without sample weights, and the gradient with respect to y_pred.

Run: /work/refvenv/bin/python keras_losses.py > ../data/keras_losses.txt

Each line: `loss|config|shape|y_true|y_pred|weights|reduction|value|grad`:
`config` the loss's options (`k=v` pairs joined by `;`), `weights` the
sample weights (`none`, or a shape `b` or `b,1` then `:` and the values),
`reduction` Keras's name, `value` the loss (row-major), and `grad` the
gradient with respect to y_pred of Σ c[i] value[i], c[i] = 1 + i/2.
"""
import os

os.environ["KERAS_BACKEND"] = "tensorflow"
import numpy as np
import tensorflow as tf
import keras

rng = np.random.default_rng(7)


def fmt(v):
    return ",".join(repr(float(x)) for x in np.asarray(v).reshape(-1))


def case(name, cls, cfg, y_true, y_pred, weights=None, reduction="none"):
    loss = cls(reduction=reduction, dtype="float64", **cfg)
    yp = tf.Variable(y_pred)
    with tf.GradientTape() as tape:
        sw = None if weights is None else tf.constant(weights)
        v = loss(tf.constant(y_true), yp, sample_weight=sw)
        n = int(np.prod(v.shape))
        s = tf.reduce_sum(tf.reshape(v, [-1]) * tf.constant(1.0 + 0.5 * np.arange(n), tf.float64))
    g = tape.gradient(s, yp)
    v = v.numpy()
    if name == "log_cosh":
        # Keras's log 2 is float32's (ops.log(2.0), then cast), 1.9e-9 off;
        # the value is numpy's log(cosh(e)) in f64 (the gradient, tanh, is
        # Keras's)
        e = y_pred - y_true
        exact = np.mean(np.abs(e) + np.log1p(np.exp(-2 * np.abs(e))) - np.log(2.0), axis=-1)
        assert 1e-9 < np.abs(exact - v).max() < 3e-9
        v = exact
    c = ";".join(f"{k}={v}" for k, v in cfg.items()) or "-"
    w = "none" if weights is None else ",".join(map(str, weights.shape)) + ":" + fmt(weights)
    shape = ",".join(map(str, y_pred.shape))  # (sparse labels: without the last axis)
    print(f"{name}|{c}|{shape}|{fmt(y_true)}|{fmt(y_pred)}|{w}|{reduction}|{fmt(v)}|{fmt(g.numpy())}")


S = (3, 4)
pos_true = np.round(rng.uniform(0, 2, S), 3)
pos_true[0, 1] = 0.0  # MAPE's and MSLE's clipped zero
pos_pred = np.round(rng.uniform(0.05, 2, S), 3)
any_true = np.round(rng.normal(0, 1, S), 3)
any_pred = np.round(rng.normal(0, 1, S), 3)
any_pred[1, 2] = any_true[1, 2] + 3.5  # past Huber's delta
L = keras.losses
for name, cls, cfg, yt, yp in [
    ("mean_squared_error", L.MeanSquaredError, {}, any_true, any_pred),
    ("mean_absolute_error", L.MeanAbsoluteError, {}, any_true, any_pred),
    ("mean_absolute_percentage_error", L.MeanAbsolutePercentageError, {}, pos_true, pos_pred),
    ("mean_squared_logarithmic_error", L.MeanSquaredLogarithmicError, {}, pos_true, pos_pred),
    ("huber", L.Huber, {"delta": 0.7}, any_true, any_pred),
    ("log_cosh", L.LogCosh, {}, any_true, any_pred * 20),
    ("poisson", L.Poisson, {}, pos_true, pos_pred),
    ("kl_divergence", L.KLDivergence, {}, pos_true / 2, pos_pred / 2),
]:
    case(name, cls, cfg, yt, yp)
zero_row = any_true.copy()
zero_row[2] = 0.0  # a zero vector: similarity 0
case("cosine_similarity", L.CosineSimilarity, {"axis": -1}, zero_row, any_pred)
case("cosine_similarity", L.CosineSimilarity, {"axis": 0}, any_true, any_pred)
y3 = np.round(rng.normal(0, 1, (2, 3, 4)), 3)
p3 = np.round(rng.normal(0, 1, (2, 3, 4)), 3)
case("cosine_similarity", L.CosineSimilarity, {"axis": 1}, y3, p3)

# classification: binary labels, probabilities and logits
bin_true = (rng.uniform(0, 1, S) < 0.5).astype(np.float64)
prob = np.round(rng.uniform(0.02, 0.98, S), 3)
prob[0, 0] = 1.0  # clipped
logit = np.round(rng.normal(0, 2, S), 3)
logit[2, 3] = 40.0  # saturated
for ls in [0.0, 0.1]:
    case("binary_crossentropy", L.BinaryCrossentropy, {"from_logits": False, "label_smoothing": ls}, bin_true, prob)
    case("binary_crossentropy", L.BinaryCrossentropy, {"from_logits": True, "label_smoothing": ls}, bin_true, logit)
for bal, a, g, ls in [(False, 0.25, 2.0, 0.0), (True, 0.25, 2.0, 0.0), (True, 0.6, 1.5, 0.1), (False, 0.25, 0.0, 0.0)]:
    cfg = {"apply_class_balancing": bal, "alpha": a, "gamma": g, "label_smoothing": ls}
    case("binary_focal_crossentropy", L.BinaryFocalCrossentropy, {**cfg, "from_logits": False}, bin_true, prob)
    case("binary_focal_crossentropy", L.BinaryFocalCrossentropy, {**cfg, "from_logits": True}, bin_true, logit)
onehot = np.eye(4)[[2, 0, 3]]
probs = np.round(rng.uniform(0.05, 1, S), 3)  # renormalised by the loss
for ls in [0.0, 0.2]:
    case("categorical_crossentropy", L.CategoricalCrossentropy, {"from_logits": False, "label_smoothing": ls}, onehot, probs)
    case("categorical_crossentropy", L.CategoricalCrossentropy, {"from_logits": True, "label_smoothing": ls}, onehot, logit)
for a, g, ls in [(0.25, 2.0, 0.0), (0.5, 1.0, 0.1), (1.0, 0.0, 0.0)]:
    cfg = {"alpha": a, "gamma": g, "label_smoothing": ls}
    case("categorical_focal_crossentropy", L.CategoricalFocalCrossentropy, {**cfg, "from_logits": False}, onehot, probs)
    case("categorical_focal_crossentropy", L.CategoricalFocalCrossentropy, {**cfg, "from_logits": True}, onehot, logit)
pm_true = bin_true * 2 - 1
mixed = bin_true.copy()
mixed[1, 1] = 0.5  # not all binary: used as they are
for name, cls in [("hinge", L.Hinge), ("squared_hinge", L.SquaredHinge)]:
    for yt in [bin_true, pm_true, mixed]:
        case(name, cls, {}, yt, any_pred)
case("categorical_hinge", L.CategoricalHinge, {}, onehot, any_pred)
labels = np.array([2.0, 0.0, 3.0])  # integer class labels (floats, cast by the loss)
case("sparse_categorical_crossentropy", L.SparseCategoricalCrossentropy, {"from_logits": False}, labels, probs)
case("sparse_categorical_crossentropy", L.SparseCategoricalCrossentropy, {"from_logits": True}, labels, logit)

# sample weights and reductions
w = np.array([0.5, 2.0, 0.0])
for red in ["sum_over_batch_size", "sum", "mean_with_sample_weight", "none"]:
    case("mean_squared_error", L.MeanSquaredError, {}, any_true, any_pred, w, red)
    case("huber", L.Huber, {"delta": 0.7}, any_true, any_pred, w.reshape(3, 1), red)
    case("categorical_crossentropy", L.CategoricalCrossentropy, {"from_logits": True}, onehot, logit, w, red)
    case("binary_crossentropy", L.BinaryCrossentropy, {"from_logits": True}, bin_true, logit, None, red)
    case("sparse_categorical_crossentropy", L.SparseCategoricalCrossentropy, {"from_logits": True}, labels, logit, w, red)
# weights per element of a [2, 3, 4] loss's per-sample [2, 3]
w23 = np.round(rng.uniform(0, 2, (2, 3)), 3)
case("mean_squared_error", L.MeanSquaredError, {}, y3, p3, w23, "sum_over_batch_size")
case("mean_squared_error", L.MeanSquaredError, {}, y3, p3, w23, "mean_with_sample_weight")
