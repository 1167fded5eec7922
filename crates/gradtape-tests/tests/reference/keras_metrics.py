"""Keras 3.15's metrics (TensorFlow 2.21 backend, `dtype="float64"` on each
metric and floatx float64), for tests/nn/keras_metrics.rs: the result after each of several
`update_state` calls (with and without sample weights), and after
`reset_state`.

Run: /work/refvenv/bin/python keras_metrics.py > ../data/keras_metrics.txt

Each line: `metric|config|updates|results|reset`:
- `metric` Keras's default name of the metric (`metric.name`, without the
  `_1`, `_2`, ... Keras adds to repeated names);
- `config` its options as `k=v` pairs joined by `;` (`-` for none; a list
  of numbers joined by `,`);
- `updates` the `update_state` calls, joined by `;`, each
  `y_true y_pred sample_weight` (space-separated; `-` for none, and Mean
  and Sum take `values - sample_weight`), a tensor written
  `dtype:shape:values` (`f64` or `i64`; dimensions joined by `x`, empty
  for a scalar; row-major values joined by `,`);
- `results` the result after each update, joined by `;`, each
  `shape:values`;
- `reset` the result right after `reset_state`.
"""
import os
import re

os.environ["KERAS_BACKEND"] = "tensorflow"
import numpy as np
import keras

# float64 everywhere: some metrics (R2Score) make their variables in
# floatx whatever their dtype
keras.config.set_floatx("float64")
M = keras.metrics
rng = np.random.default_rng(11)
LOG2_F32 = float(np.float32(np.log(np.float32(2.0))))


def tens(a):
    if a is None:
        return "-"
    a = np.asarray(a)
    dt = "i64" if a.dtype.kind in "iu" else "f64"
    vals = ",".join(repr(int(x)) if dt == "i64" else repr(float(x)) for x in a.reshape(-1))
    return f"{dt}:{'x'.join(map(str, a.shape))}:{vals}"


def res(r, shift=0.0):
    r = np.asarray(r, dtype=np.float64) + shift
    return f"{'x'.join(map(str, r.shape))}:" + ",".join(repr(float(x)) for x in r.reshape(-1))


def cfg_str(cfg):
    def v(x):
        if isinstance(x, (list, tuple)):
            return ",".join(map(str, x))
        return str(x)

    return ";".join(f"{k}={v(x)}" for k, x in cfg.items()) or "-"


def case(cls, cfg, updates, name=None):
    m = cls(dtype="float64", **cfg)
    results = []
    for yt, yp, sw in updates:
        if yp is None:
            m.update_state(yt, sample_weight=sw)
        else:
            m.update_state(yt, yp, sample_weight=sw)
        r = m.result().numpy()
        shift = 0.0
        if isinstance(m, M.LogCoshError) and float(m.count.numpy()) != 0.0:
            # Keras's log 2 is float32's (ops.log(2.0), then cast), 1.9e-9
            # off: print the float64 value
            shift = LOG2_F32 - np.log(2.0)
            assert 1e-9 < abs(shift) < 3e-9
        results.append(res(r, shift))
    m.reset_state()
    reset = res(m.result().numpy())
    ups = ";".join(f"{tens(yt)} {tens(yp)} {tens(sw)}" for yt, yp, sw in updates)
    name = re.sub(r"_[0-9]+$", "", m.name)  # Keras numbers repeated names
    print(f"{name}|{cfg_str(cfg)}|{ups}|{';'.join(results)}|{reset}")


def r3(shape, lo=0.0, hi=1.0):
    return np.round(rng.uniform(lo, hi, shape), 3)


def n3(shape):
    return np.round(rng.normal(0, 1, shape), 3)


# ---- reductions: Mean and Sum of values -------------------------------
v4 = np.array([1.0, 3.0, 5.0, 7.0])
v23 = n3((2, 3))
v232 = n3((2, 3, 2))
w4 = np.array([1.0, 0.5, 0.0, 2.0])
for cls in [M.Mean, M.Sum]:
    case(cls, {}, [(v4, None, None), (v23, None, None), (v232, None, None), (np.array(2.5), None, None)])
    case(cls, {}, [(v4, None, w4), (v23, None, np.array([2.0, 0.5])), (v232, None, r3((2, 3))),
                   (v23, None, np.array([[1.0], [3.0]])), (v4, None, np.array(3.0)),
                   (v23.reshape(2, 3, 1), None, np.array([0.5, 1.5]))])

# ---- regression wrappers ----------------------------------------------
yt = [n3((3, 4)) for _ in range(3)]
yp = [n3((3, 4)) for _ in range(3)]
pt = [r3((3, 4), 0.0, 2.0) for _ in range(3)]
pp = [r3((3, 4), 0.05, 2.0) for _ in range(3)]
pt[0][0, 1] = 0.0  # MAPE's clipped zero
w3 = np.array([0.5, 2.0, 0.0])
w34 = r3((3, 4), 0.0, 2.0)
y3d_t, y3d_p = n3((2, 3, 4)), n3((2, 3, 4))
for cls, cfg, a, b in [
    (M.MeanSquaredError, {}, yt, yp),
    (M.MeanAbsoluteError, {}, yt, yp),
    (M.RootMeanSquaredError, {}, yt, yp),
    (M.MeanAbsolutePercentageError, {}, pt, pp),
    (M.MeanSquaredLogarithmicError, {}, pt, pp),
    (M.LogCoshError, {}, yt, [p * 10 for p in yp]),
    (M.CosineSimilarity, {}, yt, yp),
    (M.CosineSimilarity, {"axis": 0}, yt, yp),
]:
    case(cls, cfg, [(a[0], b[0], None), (a[1], b[1], None), (a[2], b[2], None)])
    # weights per element only where the values are (RMSE's squared
    # errors); the others reduce the last axis first (Keras refuses them)
    last = w34 if cls is M.RootMeanSquaredError else np.array([1.5, 0.0, 0.5])
    if cfg:  # axis 0: one value per column
        case(cls, cfg, [(a[0], b[0], w34[0]), (a[1], b[1], np.array(2.0))])
        continue
    case(cls, cfg, [(a[0], b[0], w3), (a[1], b[1], w3.reshape(3, 1)), (a[2], b[2], last),
                    (a[0], b[0], np.array(2.0))])
# other ranks: 1-D (one value per update), [b, 1] against [b], 3-D with
# weights per sample and per step
for cls in [M.MeanSquaredError, M.RootMeanSquaredError, M.MeanAbsoluteError]:
    case(cls, {}, [(yt[0][0], yp[0][0], None), (yt[1][:, :1], yp[1][:, 0], None),
                   (y3d_t, y3d_p, np.array([1.0, 3.0])), (y3d_t, y3d_p, r3((2, 3)))])
case(M.CosineSimilarity, {"axis": 1}, [(y3d_t, y3d_p, None), (y3d_t, y3d_p, np.array([1.0, 0.25]))])
zero = yt[0].copy()
zero[1] = 0.0
case(M.CosineSimilarity, {}, [(zero, yp[0], w3)])

# R2Score
r2t = [n3((5, 3)) for _ in range(2)]
r2p = [t + 0.5 * n3((5, 3)) for t in r2t]
for agg in ["uniform_average", "variance_weighted_average", None]:
    case(M.R2Score, {"class_aggregation": agg}, [(r2t[0], r2p[0], None), (r2t[1], r2p[1], r3(5, 0.1, 2.0))])
case(M.R2Score, {"num_regressors": 2}, [(r2t[0], r2p[0], None), (r2t[1], r2p[1], r3((5, 3), 0.1, 2.0))])
case(M.R2Score, {"num_regressors": 14}, [(r2t[0], r2p[0], None)])  # n - 1: plain R2
case(M.R2Score, {"num_regressors": 20}, [(r2t[0], r2p[0], None)])  # > n - 1: plain R2
case(M.R2Score, {}, [(r2t[0][:, :1], r2p[0][:, 0], np.array(2.0))])
const = r2t[0].copy()
const[:, 1] = 0.7  # a constant column: its score is -inf, counted as 0
case(M.R2Score, {"class_aggregation": None}, [(const, r2p[0], None)])

# ---- accuracies -------------------------------------------------------
lab = np.array([[1.0, 2.0, 0.0], [3.0, 2.0, 2.0]])
guess = np.array([[1.0, 2.0, 1.0], [3.0, 0.0, 2.0]])
case(M.Accuracy, {}, [(lab, guess, None), (lab[0], guess[1], None), (lab, guess, np.array([1.0, 3.0])),
                      (lab.reshape(6, 1), guess.reshape(6), None)])
bt = (rng.uniform(0, 1, (4, 3)) < 0.5).astype(np.float64)
bp = r3((4, 3))
bp[0, 0] = 0.5  # not above 0.5
bt2 = bt.copy()
bt2[1, 1] = 0.7  # never equal to a thresholded prediction
for th in [0.5, 0.3]:
    case(M.BinaryAccuracy, {"threshold": th}, [(bt, bp, None), (bt2, bp, np.array([1.0, 0.0, 2.0, 0.5])),
                                                (bt[:, :1], bp[:, 0], None), (bt, bp, r3((4, 3)))])
oh = np.eye(4)[[1, 3, 0, 2, 2]]
probs = r3((5, 4))
probs[2, 0] = probs[2, 3] = 0.99  # a tie: the first wins
oh3 = np.eye(4)[rng.integers(0, 4, (2, 3))]
probs3 = r3((2, 3, 4))
w5 = np.array([1.0, 2.0, 0.5, 0.0, 1.0])
case(M.CategoricalAccuracy, {}, [(oh, probs, None), (oh, probs, w5), (oh3, probs3, None),
                                 (oh3, probs3, np.array([2.0, 1.0])), (oh3, probs3, r3((2, 3)))])
ids = np.array([1, 3, 0, 2, 2])
fids = np.array([1.0, 3.0, 0.0, 2.0, 7.0])
ids3 = rng.integers(0, 4, (2, 3))
case(M.SparseCategoricalAccuracy, {}, [(ids, probs, None), (fids.reshape(5, 1), probs, w5),
                                       (ids3, probs3, None), (ids3, probs3, np.array([2.0, 1.0]))])
# TensorFlow's in_top_k takes float32 predictions only: the same order
# and ties as the float64 values
p32, p332 = probs.astype(np.float32), probs3.astype(np.float32)
for k in [1, 2, 3]:
    case(M.TopKCategoricalAccuracy, {"k": k}, [(oh, p32, None), (oh, p32, w5), (oh3, p332, None)])
    case(M.SparseTopKCategoricalAccuracy, {"k": k}, [(ids, p32, None), (np.array([1, 3, 0, 2, 9]), p32, w5),
                                                     (ids3, p332, np.array([2.0, 1.0])),
                                                     (fids.reshape(5, 1), p32, None)])
tie = np.array([[0.1, 0.5, 0.5, 0.5], [0.3, 0.3, 0.2, 0.1]], dtype=np.float32)
case(M.SparseTopKCategoricalAccuracy, {"k": 1}, [(np.array([3, 1]), tie, None)])
case(M.SparseTopKCategoricalAccuracy, {"k": 2, "from_sorted_ids": True},
     [(np.array([3, 1]), np.array([[3, 1, 0], [0, 2, 1]]), None)])

# ---- confusion-matrix metrics -----------------------------------------
ct = [(rng.uniform(0, 1, (6, 3)) < 0.5).astype(np.float64) for _ in range(2)]
cp = [r3((6, 3)) for _ in range(2)]
cp[0][0, 0], cp[0][1, 1], cp[0][2, 2], cp[0][3, 0] = 0.5, 0.0, 1.0, 0.3  # on thresholds
ct[1][2, 1] = 2.0  # any non-zero label is positive
cw = [r3(6, 0.0, 2.0), r3((6, 3), 0.0, 2.0)]
cups = [(ct[0], cp[0], None), (ct[1], cp[1], cw[0]), (ct[0], cp[0], cw[1]), (ct[1][:, :1], cp[1][:, 0], cw[0]),
        (ct[0], cp[0], np.array(0.5))]
for cls in [M.TruePositives, M.FalsePositives, M.TrueNegatives, M.FalseNegatives, M.Precision, M.Recall]:
    case(cls, {}, cups)
    case(cls, {"thresholds": [0.0, 0.3, 0.5, 0.8]}, cups)
    case(cls, {"thresholds": [0.0, 0.25, 0.5, 0.75, 1.0]}, cups)  # evenly spread: Keras's buckets
over = cp[0].copy()
over[4, 2] = 1.5  # clipped to 1 by the bucketed form only
case(M.TruePositives, {"thresholds": [0.0, 0.5, 1.0]}, [(ct[0], over, None)])
case(M.TruePositives, {"thresholds": [0.1, 0.5, 1.0]}, [(ct[0], over, None)])
for cls in [M.Precision, M.Recall]:
    case(cls, {"top_k": 2}, cups[:3])
    case(cls, {"class_id": 1}, [(ct[0], cp[0], None), (ct[1], cp[1], cw[0])])
    case(cls, {"top_k": 1, "class_id": 2}, [(ct[0], cp[0], None), (ct[1], cp[1], cw[0])])
    case(cls, {"thresholds": [0.2, 0.6], "top_k": 2}, cups[:2])
for curve in ["ROC", "PR"]:
    for summ in ["interpolation", "minoring", "majoring"]:
        case(M.AUC, {"curve": curve, "summation_method": summ}, cups[:4])
    case(M.AUC, {"curve": curve, "num_thresholds": 7}, cups[:3])
    case(M.AUC, {"curve": curve, "thresholds": [0.3, 0.1, 0.7]}, cups[:3])
    case(M.AUC, {"curve": curve, "from_logits": True}, [(ct[0], n3((6, 3)) * 3, cw[1])])
for cls, key, vals in [(M.PrecisionAtRecall, "recall", [0.5, 0.9]), (M.RecallAtPrecision, "precision", [0.7, 0.65]),
                       (M.SensitivityAtSpecificity, "specificity", [0.5]),
                       (M.SpecificityAtSensitivity, "sensitivity", [0.4, 0.8])]:
    for v in vals:
        case(cls, {key: v}, cups[:3])
    case(cls, {key: vals[0], "num_thresholds": 1}, cups[:2])
    case(cls, {key: vals[0], "num_thresholds": 5, "class_id": 0}, cups[:2])

# F-scores
ft = [(rng.uniform(0, 1, (6, 3)) < 0.4).astype(np.float64) for _ in range(2)]
fp = [r3((6, 3)) for _ in range(2)]
fp[0][5] = 0.0  # an all-zero row: no prediction without a threshold
for avg in [None, "micro", "macro", "weighted"]:
    for th in [None, 0.5]:
        case(M.F1Score, {"average": avg, "threshold": th}, [(ft[0], fp[0], None), (ft[1], fp[1], r3(6, 0.0, 2.0))])
    case(M.FBetaScore, {"average": avg, "beta": 2.0}, [(ft[0], fp[0], None), (ft[1], fp[1], r3(6, 0.0, 2.0))])
case(M.FBetaScore, {"average": "macro", "beta": 0.5, "threshold": 0.3}, [(ft[0], fp[0], r3(6, 0.0, 2.0))])

# MeanIoU
it = rng.integers(0, 3, (4, 5))
ip = rng.integers(0, 3, (4, 5))
ip4 = r3((4, 5, 3))
case(M.MeanIoU, {"num_classes": 3}, [(it, ip, None), (it[0], ip[1], r3(5, 0.0, 2.0)), (it, ip, r3((4, 5), 0.0, 2.0))])
case(M.MeanIoU, {"num_classes": 4}, [(it, ip, None)])  # a class never seen: left out of the mean
case(M.MeanIoU, {"num_classes": 3, "sparse_y_pred": False}, [(it, ip4, None)])
case(M.MeanIoU, {"num_classes": 3, "sparse_y_true": False, "sparse_y_pred": False},
     [(np.eye(3)[it], ip4, None)])
ig = it.copy()
ig[0, :2] = 255
case(M.MeanIoU, {"num_classes": 3, "ignore_class": 255}, [(ig, ip, None)])
case(M.MeanIoU, {"num_classes": 3, "ignore_class": 1}, [(it, ip, None)])
