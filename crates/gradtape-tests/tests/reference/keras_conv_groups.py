"""Reference values for tests/nn/conv_groups.rs: Keras 3.15's grouped
Conv1D, Conv2D and Conv3D (`groups=`; TensorFlow backend, float64, CPU,
where Keras runs grouped convolutions under XLA).

Run: /work/refvenv/bin/python keras_conv_groups.py
Inputs init(shape, 1, 1) (`init(shape, k, s)[i] = s sin(0.37 i + k)`),
weights w_i = init(shape, 10 + i, 0.4) in Keras's order (the kernel
[..., in / groups, filters], then the bias); each tensor is summarised as
(Σ v, Σ v[i] sin(0.1 i)); gradients of L = Σ y[i] sin(0.1 i).
"""
import keras

from layer_refs import run


L = keras.layers
f64 = {"dtype": "float64"}
run("Conv2D(6, 3, groups 2)", L.Conv2D(6, 3, groups=2, **f64), [2, 5, 5, 4])
run("Conv2D(8, (2, 3), groups 4, same, strides 2, relu)",
    L.Conv2D(8, (2, 3), groups=4, strides=2, padding="same", activation="relu", **f64), [1, 6, 7, 8])
run("Conv2D(4, 2, groups 2, dilation 2, no bias)",
    L.Conv2D(4, 2, groups=2, dilation_rate=2, use_bias=False, **f64), [1, 6, 6, 6])
run("Conv1D(6, 3, groups 3, same, dilation 2)", L.Conv1D(6, 3, groups=3, padding="same", dilation_rate=2, **f64), [2, 9, 6])
run("Conv1D(4, 2, groups 2, causal)", L.Conv1D(4, 2, groups=2, padding="causal", **f64), [1, 7, 4])
run("Conv3D(4, 2, groups 2)", L.Conv3D(4, 2, groups=2, **f64), [1, 3, 4, 3, 4])
