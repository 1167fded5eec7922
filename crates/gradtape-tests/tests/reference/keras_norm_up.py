"""Reference values for tests/nn/group_norm.rs: Keras 3.15's
GroupNormalization and UpSampling2D (TensorFlow backend, float64, CPU);
PyTorch's F.group_norm agrees with the first (checked here).

Run: /work/refvenv/bin/python keras_norm_up.py
Inputs init(shape, 1, 1.5) + 0.3 (`init(shape, k, s)[i] = s sin(0.37 i + k)`),
weights w_i = init(shape, 10 + i, 0.4) + 1 in Keras's order; each tensor is
summarised as (Σ v, Σ v[i] sin(0.1 i)); gradients of L = Σ y[i] sin(0.1 i).
"""
import numpy as np
import torch
import torch.nn.functional as F
import keras

from layer_refs import run


def torch_gn(groups, eps):
    def f(x, ws):
        # channels last -> first for PyTorch
        xt = torch.tensor(np.moveaxis(x, -1, 1))
        y = F.group_norm(xt, groups, torch.tensor(ws[0]), torch.tensor(ws[1]), eps)
        return np.moveaxis(y.numpy(), 1, -1)
    return f


L = keras.layers
f64 = {"dtype": "float64"}
shift = {"x_scale": 1.5, "x_offset": 0.3, "w_offset": 1.0}
run("GroupNormalization(groups=2)", L.GroupNormalization(groups=2, **f64), [2, 3, 4, 6], **shift, reference=torch_gn(2, 1e-3))
run("GroupNormalization(groups=3, eps 1e-5)", L.GroupNormalization(groups=3, epsilon=1e-5, **f64), [2, 5, 6], **shift, reference=torch_gn(3, 1e-5))
run("GroupNormalization(groups=1, no center)", L.GroupNormalization(groups=1, center=False, **f64), [3, 4], **shift)
run("GroupNormalization(groups=4) (instance norm)", L.GroupNormalization(groups=4, **f64), [2, 3, 3, 4], **shift)
run("UpSampling2D((2, 3))", L.UpSampling2D((2, 3), **f64), [2, 2, 3, 2], **shift)
run("UpSampling2D(2, bilinear)", L.UpSampling2D(2, interpolation="bilinear", **f64), [1, 3, 4, 2], **shift)
