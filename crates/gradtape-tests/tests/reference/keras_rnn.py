"""Reference values for tests/nn/rnn_layers.rs: Keras 3.15's LSTM, GRU
and Bidirectional layers (TensorFlow backend, float64, CPU).

Run: /work/refvenv/bin/python keras_rnn.py
Inputs x = init([2, 5, 3], 1, 1) (`init(shape, k, s)[i] = s sin(0.37 i + k)`),
weights w_i = init(shape, 10 + i, 0.4) in Keras's order; each tensor is
summarised as (Σ v, Σ v[i] sin(0.1 i)); gradients of L = Σ y[i] sin(0.1 i).
"""
import keras

from layer_refs import run


L = keras.layers
run("LSTM(4)", L.LSTM(4, dtype="float64"), [2, 5, 3], with_shape=False)
run("LSTM(4, return_sequences, go_backwards)", L.LSTM(4, return_sequences=True, go_backwards=True, dtype="float64"), [2, 5, 3], with_shape=False)
run("GRU(4, return_sequences)", L.GRU(4, return_sequences=True, dtype="float64"), [2, 5, 3], with_shape=False)
run("GRU(4, go_backwards)", L.GRU(4, go_backwards=True, dtype="float64"), [2, 5, 3], with_shape=False)
for merge in ["concat", "sum", "mul", "ave"]:
    run(f"Bidirectional(LSTM(4, return_sequences), {merge})",
        L.Bidirectional(L.LSTM(4, return_sequences=True, dtype="float64"), merge_mode=merge, dtype="float64"),
        [2, 5, 3], with_shape=False)
run("Bidirectional(GRU(3))", L.Bidirectional(L.GRU(3, dtype="float64"), dtype="float64"), [2, 5, 3], with_shape=False)
