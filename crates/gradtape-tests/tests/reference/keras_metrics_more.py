"""Keras 3.15's AUC with `multi_label` and `label_weights`, and the IoU
metrics beside MeanIoU (IoU, BinaryIoU, OneHotIoU, OneHotMeanIoU), with
the TensorFlow 2.21 backend, `dtype="float64"` on each metric and floatx
float64, for tests/nn/keras_metrics_more.rs: the result after each of
several `update_state` calls (with and without sample weights), and after
`reset_state`.

Run: /work/refvenv/bin/python keras_metrics_more.py > ../data/keras_metrics_more.txt

The lines are keras_metrics.py's (see there): `metric|config|updates|results|reset`,
a list option's numbers joined by `,`.
"""
import os
import re

os.environ["KERAS_BACKEND"] = "tensorflow"
import numpy as np
import keras

keras.config.set_floatx("float64")
M = keras.metrics
rng = np.random.default_rng(23)


def tens(a):
    if a is None:
        return "-"
    a = np.asarray(a)
    dt = "i64" if a.dtype.kind in "iu" else "f64"
    vals = ",".join(repr(int(x)) if dt == "i64" else repr(float(x)) for x in a.reshape(-1))
    return f"{dt}:{'x'.join(map(str, a.shape))}:{vals}"


def res(r):
    r = np.asarray(r, dtype=np.float64)
    return f"{'x'.join(map(str, r.shape))}:" + ",".join(repr(float(x)) for x in r.reshape(-1))


def cfg_str(cfg):
    def v(x):
        if isinstance(x, (list, tuple)):
            return ",".join(map(str, x))
        return str(x)

    return ";".join(f"{k}={v(x)}" for k, x in cfg.items()) or "-"


def case(cls, cfg, updates):
    m = cls(dtype="float64", **cfg)
    results = []
    for yt, yp, sw in updates:
        m.update_state(yt, yp, sample_weight=sw)
        results.append(res(m.result().numpy()))
    m.reset_state()
    reset = res(m.result().numpy())
    ups = ";".join(f"{tens(yt)} {tens(yp)} {tens(sw)}" for yt, yp, sw in updates)
    name = re.sub(r"_[0-9]+$", "", m.name)  # Keras numbers repeated names
    print(f"{name}|{cfg_str(cfg)}|{ups}|{';'.join(results)}|{reset}")


def r3(shape, lo=0.0, hi=1.0):
    return np.round(rng.uniform(lo, hi, shape), 3)


def n3(shape):
    return np.round(rng.normal(0, 1, shape), 3)


# ---- AUC, one curve per label, and label weights -----------------------
ct = [(rng.uniform(0, 1, (6, 3)) < 0.5).astype(np.float64) for _ in range(2)]
cp = [r3((6, 3)) for _ in range(2)]
cp[0][0, 0], cp[0][1, 1], cp[0][2, 2], cp[0][3, 0] = 0.5, 0.0, 1.0, 0.3  # on thresholds
ct[1][2, 1] = 2.0  # any non-zero label is positive
neg = ct[0].copy()
neg[:, 2] = 0.0  # a label never positive: its ROC area is 0
cw = [r3(6, 0.0, 2.0), r3((6, 3), 0.0, 2.0)]
cups = [(ct[0], cp[0], None), (ct[1], cp[1], cw[0]), (neg, cp[0], cw[1]), (ct[0], cp[0], np.array(0.5))]
for curve in ["ROC", "PR"]:
    for summ in ["interpolation", "minoring", "majoring"]:
        case(M.AUC, {"curve": curve, "summation_method": summ, "multi_label": True}, cups)
    case(M.AUC, {"curve": curve, "multi_label": True, "num_labels": 3}, cups[:3])
    case(M.AUC, {"curve": curve, "multi_label": True, "num_thresholds": 7}, cups[:3])
    case(M.AUC, {"curve": curve, "multi_label": True, "thresholds": [0.3, 0.1, 0.7]}, cups[:3])
    case(M.AUC, {"curve": curve, "multi_label": True, "thresholds": [0.5, 0.25, 0.75]}, cups[:3])
    case(M.AUC, {"curve": curve, "multi_label": True, "from_logits": True}, [(ct[0], n3((6, 3)) * 3, cw[1])])
    for lw in [[0.5, 1.0, 2.0], [0.0, 3.0, 1.0], [0.0, 0.0, 0.0]]:
        case(M.AUC, {"curve": curve, "multi_label": True, "label_weights": lw}, cups[:3])
    case(M.AUC, {"curve": curve, "multi_label": True, "num_labels": 3, "label_weights": [1.0, 0.25, 2.0],
                 "thresholds": [0.3, 0.1, 0.7]}, cups[:3])
    # one curve, each element weighted by its label's weight
    for extra in [{}, {"thresholds": [0.3, 0.1, 0.7]}, {"summation_method": "minoring"}]:
        case(M.AUC, {"curve": curve, "label_weights": [0.5, 1.0, 2.0], **extra}, cups)
    case(M.AUC, {"curve": curve, "label_weights": [1.5, 0.0, 1.0]},
         [(ct[0].reshape(2, 3, 3), cp[0].reshape(2, 3, 3), r3((2, 3), 0.0, 2.0)),
          (ct[1].reshape(2, 3, 3), cp[1].reshape(2, 3, 3), None)])
# one label: [batch, 1] predictions against [batch] labels
case(M.AUC, {"multi_label": True}, [(ct[0][:, 0], cp[0][:, :1], None), (ct[1][:, 0], cp[1][:, :1], cw[0])])
case(M.AUC, {"multi_label": True, "label_weights": [2.0]}, [(ct[0][:, 1], cp[0][:, 1:2], cw[0])])

# ---- IoU and its kin ---------------------------------------------------
it = rng.integers(0, 3, (4, 5))
ip = rng.integers(0, 3, (4, 5))
ip4 = r3((4, 5, 3))
iw = [r3(5, 0.0, 2.0), r3((4, 5), 0.0, 2.0)]
iups = [(it, ip, None), (it[0], ip[1], iw[0]), (it, ip, iw[1]), (it[1:3], ip[2:4], np.array(1.5))]
for targets in [[0], [1, 2], [2, 0, 2], [0, 1, 2]]:
    case(M.IoU, {"num_classes": 3, "target_class_ids": targets}, iups)
case(M.IoU, {"num_classes": 4, "target_class_ids": [3, 0]}, iups[:2])  # class 3 never seen
case(M.IoU, {"num_classes": 4, "target_class_ids": [3]}, iups[:2])  # nothing seen: 0
case(M.IoU, {"num_classes": 3, "target_class_ids": [0, 2], "sparse_y_pred": False}, [(it, ip4, None), (it, ip4, iw[1])])
case(M.IoU, {"num_classes": 3, "target_class_ids": [1], "sparse_y_true": False, "sparse_y_pred": False},
     [(np.eye(3)[it], ip4, iw[1])])
ig = it.copy()
ig[0, :2] = 255
case(M.IoU, {"num_classes": 3, "target_class_ids": [0, 1], "ignore_class": 255}, [(ig, ip, None), (ig, ip, iw[1])])
case(M.IoU, {"num_classes": 3, "target_class_ids": [0, 2], "ignore_class": 1}, [(it, ip, iw[1])])
case(M.IoU, {"num_classes": 3, "target_class_ids": [2]}, [(it.astype(np.float64), ip.astype(np.float64), None)])

bt = (rng.uniform(0, 1, (4, 5)) < 0.5).astype(np.int64)
bp = r3((4, 5))
bp[0, 0], bp[0, 1] = 0.5, 0.3
bp[0, 2] = 0.3 - 1e-9  # below 0.3, but not in float32: class 1 at threshold 0.3
bp[0, 3] = 0.5 - 1e-9
bl = n3((4, 5))
bups = [(bt, bp, None), (bt[0], bp[1], iw[0]), (bt.astype(np.float64), bp, iw[1]), (bt, bp, np.array(2.0))]
for targets in [[0, 1], [0], [1]]:
    for th in [0.5, 0.3]:
        case(M.BinaryIoU, {"target_class_ids": targets, "threshold": th}, bups)
case(M.BinaryIoU, {"target_class_ids": [0, 1], "threshold": 0.0}, [(bt, bl, None), (bt, bl, iw[1])])  # logits
case(M.BinaryIoU, {"target_class_ids": [1], "threshold": 1.0}, [(bt, bp, None)])  # nothing predicted 1

oh = np.eye(3)[it]
case(M.OneHotIoU, {"num_classes": 3, "target_class_ids": [1]}, [(oh, ip4, None), (oh, ip4, iw[1]), (oh[0], ip4[1], iw[0])])
case(M.OneHotIoU, {"num_classes": 3, "target_class_ids": [0, 2]}, [(oh, ip4, iw[1]), (oh, ip4, np.array(0.5))])
case(M.OneHotIoU, {"num_classes": 3, "target_class_ids": [0, 1, 2], "sparse_y_pred": True}, [(oh, ip, None), (oh, ip, iw[1])])
case(M.OneHotIoU, {"num_classes": 3, "target_class_ids": [1, 2], "ignore_class": 0}, [(oh, ip4, iw[1])])
case(M.OneHotMeanIoU, {"num_classes": 3}, [(oh, ip4, None), (oh, ip4, iw[1]), (oh[0], ip4[1], iw[0])])
case(M.OneHotMeanIoU, {"num_classes": 3, "sparse_y_pred": True}, [(oh, ip, None), (oh, ip, iw[1])])
case(M.OneHotMeanIoU, {"num_classes": 3, "ignore_class": 2}, [(oh, ip4, iw[1])])
case(M.OneHotMeanIoU, {"num_classes": 4}, [(np.eye(4)[it], r3((4, 5, 4)), None)])  # class 3 never labelled
