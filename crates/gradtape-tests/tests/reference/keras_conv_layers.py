"""Reference values for tests/nn/conv_layers.rs: Keras 3.15's Conv1D
(valid, same, causal; strides, dilations), DepthwiseConv2D, SeparableConv2D,
Conv3D and the global poolings (TensorFlow backend, float64, CPU).

Run: /work/refvenv/bin/python keras_conv_layers.py
Inputs init(shape, 1, 1) (`init(shape, k, s)[i] = s sin(0.37 i + k)`),
weights w_i = init(shape, 10 + i, 0.4) in Keras's order; each tensor is
summarised as (Σ v, Σ v[i] sin(0.1 i)); gradients of L = Σ y[i] sin(0.1 i).
"""
import keras

from layer_refs import run


L = keras.layers
f64 = {"dtype": "float64"}
run("Conv1D(4, 3)", L.Conv1D(4, 3, **f64), [2, 9, 3])
run("Conv1D(4, 3, same, stride 2, tanh)", L.Conv1D(4, 3, strides=2, padding="same", activation="tanh", **f64), [2, 9, 3])
run("Conv1D(4, 3, causal, dilation 2)", L.Conv1D(4, 3, padding="causal", dilation_rate=2, **f64), [2, 9, 3])
run("Conv1D(2, 4, causal, no bias)", L.Conv1D(2, 4, padding="causal", use_bias=False, **f64), [1, 6, 3])
run("DepthwiseConv2D(3, multiplier 2, same, stride 2)", L.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2, **f64), [2, 5, 6, 3])
run("DepthwiseConv2D(2, valid, relu)", L.DepthwiseConv2D(2, activation="relu", **f64), [1, 4, 4, 3])
run("SeparableConv2D(4, 3, multiplier 2, same, stride 2)", L.SeparableConv2D(4, 3, strides=2, padding="same", depth_multiplier=2, **f64), [2, 5, 6, 3])
run("SeparableConv2D(2, 2, dilation 2, tanh, no bias)", L.SeparableConv2D(2, 2, dilation_rate=2, activation="tanh", use_bias=False, **f64), [1, 5, 5, 3])
run("GlobalAveragePooling1D", L.GlobalAveragePooling1D(**f64), [2, 7, 3])
run("GlobalMaxPooling1D", L.GlobalMaxPooling1D(**f64), [2, 7, 3])
run("GlobalAveragePooling2D(keepdims)", L.GlobalAveragePooling2D(keepdims=True, **f64), [2, 4, 5, 3])
run("GlobalMaxPooling2D", L.GlobalMaxPooling2D(**f64), [2, 4, 5, 3])
run("GlobalAveragePooling3D", L.GlobalAveragePooling3D(**f64), [1, 3, 4, 2, 3])
run("Conv3D(3, 2)", L.Conv3D(3, 2, **f64), [1, 3, 4, 3, 2])
run("Conv3D(2, (2, 3, 2), same, strides (1, 2, 1), relu)", L.Conv3D(2, (2, 3, 2), strides=(1, 2, 1), padding="same", activation="relu", **f64), [2, 3, 5, 4, 2])
