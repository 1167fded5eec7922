"""Reference numbers for tests/nn/new_user_{rl,signal,gp,seq}.rs: a fourth
batch of models a new user would write, computed eagerly by TensorFlow 2.21
/ Keras 3 in float64:

1. a double-DQN step: Q(s, a) gathered by the taken action (batch_dims=1),
   the target network's value at the online network's argmax action on the
   next state, stop_gradient on the target, Huber loss; Adam; then a soft
   target update (tau = 1/8);
2. skip-gram word2vec with negative sampling: two Embeddings (centre and
   context), sigmoid cross-entropy of the positive pair and of 3 sampled
   negatives; the embeddings' gradients are IndexedSlices; SGD with
   momentum;
3. a WaveNet-style stack: a causal Conv1D, three dilated causal Conv1D
   pairs (dilations 1, 2, 4) with gated activations tanh * sigmoid, 1x1
   residual and skip convolutions, relu, 1x1 head; MSE; Adam;
4. Gaussian-process regression: an ARD squared-exponential kernel whose
   log length scales, log signal variance and log noise variance are fitted
   by the negative log marginal likelihood (cholesky, triangular_solve,
   cholesky_solve, log-det from the Cholesky factor's diagonal); the
   predictive mean and variance at test points; Adam;
5. a NeRF-style MLP: positional encoding (x, sin and cos of 2^k pi x for
   k < 4) of points along rays, Dense relu MLP to a density (relu) and a
   colour (sigmoid), volume rendering with the transmittance as an
   exclusive cumprod (colour) and as exp of an exclusive cumsum (depth);
   Adam;
6. a stateful character LSTM trained by truncated backpropagation through
   time: the (h, c) state carried across three chunks in variables (no
   gradient across chunks); Adam;
7. a mixture-of-experts layer: a gate, top_k (k = 2) routing, the chosen
   experts' weights gathered per example, the routing weights scattered
   back to a dense [n, E] matrix (scatter_nd) and the load counted by
   tensor_scatter_nd_add for a load-balancing loss; Adam.

Run: /work/refvenv/bin/python new_user_models4.py > ../data/new_user_models4.txt

Every weight and input is `fill(shape, k)`, 0.5 sin(0.7 i + k) over the
row-major index i, times a scale written the same in the Rust tests.
Hyper-parameters are dyadic (Keras turns some into float32 tensors).
"""
import math

import keras
import numpy as np
import tensorflow as tf

from new_user_common import F64, adam, emit, fill, set_weights, train


def dense(inp, units, activation=None, use_bias=True):
    layer = keras.layers.Dense(units, activation=activation, use_bias=use_bias, dtype=F64)
    layer.build((None, inp))
    return layer


def conv1d(inp, filters, kernel, dilation=1):
    layer = keras.layers.Conv1D(filters, kernel, dilation_rate=dilation, padding="causal", dtype=F64)
    layer.build((None, None, inp))
    return layer


print(f"# written by tests/reference/new_user_models4.py (TensorFlow {tf.__version__}, Keras {keras.__version__})", flush=True)

# 1. Double DQN: states of 4 features, 3 actions, a batch of 6
# transitions; online and target networks Dense(4->8, tanh) -> Dense(8->3);
# gamma 7/8, Huber delta 1, tau 1/8.
q_net = [dense(4, 8, "tanh"), dense(8, 3)]
t_net = [dense(4, 8, "tanh"), dense(8, 3)]
q_vars = [v for l in q_net for v in l.trainable_variables]
t_vars = [v for l in t_net for v in l.trainable_variables]
set_weights(q_vars, 200.0)
set_weights(t_vars, 210.0)
q_s = tf.constant(fill((6, 4), 0.3, 2.0))
q_a = tf.constant([0, 2, 1, 1, 0, 2], dtype=tf.int64)
q_r = tf.constant(fill((6,), 1.1, 4.0))
q_s2 = tf.constant(fill((6, 4), 2.3, 2.0))
q_done = tf.constant([0.0, 0.0, 1.0, 0.0, 0.0, 1.0], dtype=F64)


def mlp(layers, x):
    for l in layers:
        x = l(x)
    return x


def dqn():
    q = mlp(q_net, q_s)
    q_sa = tf.gather(q, q_a[:, None], axis=1, batch_dims=1)[:, 0]
    a2 = tf.argmax(mlp(q_net, q_s2), axis=1)
    q_next = tf.gather(mlp(t_net, q_s2), a2[:, None], axis=1, batch_dims=1)[:, 0]
    y = tf.stop_gradient(q_r + 0.875 * (1.0 - q_done) * q_next)
    loss = keras.losses.Huber(delta=1.0)(y, q_sa)
    return [("q_sa", q_sa), ("y", y), ("loss", loss)]


def soft_update():
    for t, q in zip(t_vars, q_vars):
        t.assign(0.125 * q + 0.875 * t)


train("dqn", dqn, q_vars, adam(), after=soft_update)
for j, v in enumerate(t_vars):
    emit(f"dqn_target{j}", v)

# 2. Skip-gram with negative sampling: vocabulary 12, dimension 4, 5
# (centre, context) pairs, 3 negatives each; ids repeat (the sparse
# gradients sum per row). SGD lr 1/2, momentum 7/8.
w_in = keras.layers.Embedding(12, 4, dtype=F64)
w_out = keras.layers.Embedding(12, 4, dtype=F64)
w_in.build((None,))
w_out.build((None,))
w_vars = w_in.trainable_variables + w_out.trainable_variables
set_weights(w_vars, 220.0)
w_c = tf.constant([3, 7, 3, 1, 9], dtype=tf.int64)
w_o = tf.constant([4, 2, 5, 3, 3], dtype=tf.int64)
w_neg = tf.constant([[1, 8, 11], [0, 3, 6], [9, 9, 2], [7, 5, 10], [3, 0, 4]], dtype=tf.int64)


def word2vec():
    ec = w_in(w_c)
    eo = w_out(w_o)
    en = w_out(w_neg)
    pos = tf.reduce_sum(ec * eo, axis=-1)
    neg = tf.reduce_sum(ec[:, None, :] * en, axis=-1)
    l_pos = tf.nn.sigmoid_cross_entropy_with_logits(tf.ones_like(pos), pos)
    l_neg = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(tf.zeros_like(neg), neg), axis=1)
    return [("pos", pos), ("neg", neg), ("loss", tf.reduce_mean(l_pos + l_neg))]


# Keras's SGD given the IndexedSlices as they come gives the dense result
# (momentum is linear in the gradient): checked here on a copy.
with tf.GradientTape() as _t:
    _l = word2vec()[-1][1]
_g = _t.gradient(_l, w_vars)
assert all(isinstance(g, tf.IndexedSlices) for g in _g)
_copy = [tf.Variable(v) for v in w_vars]
_o1 = keras.optimizers.SGD(learning_rate=0.5, momentum=0.875)
_o2 = keras.optimizers.SGD(learning_rate=0.5, momentum=0.875)
_copy2 = [tf.Variable(v) for v in w_vars]
for _ in range(2):
    _o1.apply_gradients(zip(_g, _copy))
    _o2.apply_gradients(zip([tf.convert_to_tensor(g) for g in _g], _copy2))
for a, b in zip(_copy, _copy2):
    assert np.allclose(a.numpy(), b.numpy(), rtol=1e-14, atol=1e-15)
train("w2v", word2vec, w_vars, keras.optimizers.SGD(learning_rate=lambda: 0.5, momentum=0.875))

# 3. WaveNet: x [2, 12, 1]; causal Conv1D(1->4, 2); per dilation d in
# (1, 2, 4): filter and gate Conv1D(4->4, 2, dilation d, causal), z = tanh(f)
# * sigmoid(g), residual and skip Conv1D(4->4, 1); h += residual, skips +=
# skip; relu, Conv1D(4->4, 1) relu, Conv1D(4->1, 1); MSE against y. The last
# residual convolution feeds nothing the loss reads: no gradient.
wn_in = conv1d(1, 4, 2)
wn_layers = [(conv1d(4, 4, 2, d), conv1d(4, 4, 2, d), conv1d(4, 4, 1), conv1d(4, 4, 1)) for d in (1, 2, 4)]
wn_out1, wn_out2 = conv1d(4, 4, 1), conv1d(4, 1, 1)
wn_all = [wn_in] + [l for ls in wn_layers for l in ls] + [wn_out1, wn_out2]
wn_vars = [v for l in wn_all for v in l.trainable_variables]
set_weights(wn_vars, 230.0)
wn_x = tf.constant(fill((2, 12, 1), 0.5, 2.0))
wn_y = tf.constant(fill((2, 12, 1), 1.3))


def wavenet():
    h = wn_in(wn_x)
    skips = 0.0
    for f, g, res, skip in wn_layers:
        z = tf.tanh(f(h)) * tf.sigmoid(g(h))
        h = h + res(z)
        skips = skips + skip(z)
    out = wn_out2(tf.nn.relu(wn_out1(tf.nn.relu(skips))))
    loss = tf.reduce_mean(tf.square(out - wn_y))
    return [("out", out), ("loss", loss)]


train("wavenet", wavenet, wn_vars, adam())

# 4. GP regression: 10 points in 2-D, an ARD squared-exponential kernel,
# the noise variance plus a jitter 2^-20 on the diagonal; test points 4.
gp_ls = tf.Variable(fill((2,), 240.0), dtype=F64)
gp_sf = tf.Variable(fill((), 241.0), dtype=F64)
gp_sn = tf.Variable(fill((), 242.0), dtype=F64)
gp_vars = [gp_ls, gp_sf, gp_sn]
gp_x = tf.constant(fill((10, 2), 0.2, 3.0))
gp_y = tf.constant(fill((10, 1), 1.4, 2.0))
gp_xs = tf.constant(fill((4, 2), 2.6, 3.0))


def kernel(a, b):
    ls = tf.exp(gp_ls)
    d = (a[:, None, :] - b[None, :, :]) / ls
    return tf.exp(2.0 * gp_sf) * tf.exp(-0.5 * tf.reduce_sum(tf.square(d), axis=-1))


def gp():
    n = 10
    k = kernel(gp_x, gp_x) + (tf.exp(gp_sn) + 2.0**-20) * tf.eye(n, dtype=F64)
    chol = tf.linalg.cholesky(k)
    # alpha = K^-1 y by two triangular solves (fit) and by cholesky_solve
    # (prediction): the same numbers
    a1 = tf.linalg.triangular_solve(chol, gp_y, lower=True)
    alpha = tf.linalg.triangular_solve(chol, a1, lower=True, adjoint=True)
    alpha2 = tf.linalg.cholesky_solve(chol, gp_y)
    logdet = 2.0 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(chol)))
    nll = 0.5 * tf.reduce_sum(gp_y * alpha) + 0.5 * logdet + 0.5 * n * math.log(2 * math.pi)
    ks = kernel(gp_x, gp_xs)
    mean = tf.matmul(ks, alpha2, transpose_a=True)
    v = tf.linalg.triangular_solve(chol, ks, lower=True)
    var = tf.exp(2.0 * gp_sf) - tf.reduce_sum(tf.square(v), axis=0)
    return [("chol", chol), ("mean", mean), ("var", var), ("loss", nll)]


train("gp", gp, gp_vars, keras.optimizers.Adam(learning_rate=lambda: 2.0**-4, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=2.0**-20))

# 5. NeRF: 3 rays (origins [3, 3], directions [3, 3]), 6 samples at t =
# linspace(2, 6); encoding of 4 frequencies (27 features); MLP
# Dense(27->16, relu) -> Dense(16->16, relu) -> Dense(16->4); sigma =
# relu(raw_0), rgb = sigmoid(raw_1:4); deltas (t_i+1 - t_i, last 2^10) times
# |d|; colour weights alpha * exclusive cumprod(1 - alpha + 2^-30); depth
# by exp(-exclusive cumsum(sigma delta)); loss mean squared colour error +
# 2^-6 mean squared depth error.
nf_layers = [dense(27, 16, "relu"), dense(16, 16, "relu"), dense(16, 4)]
nf_vars = [v for l in nf_layers for v in l.trainable_variables]
set_weights(nf_vars, 250.0)
nf_o = tf.constant(fill((3, 3), 0.7, 0.5))
nf_d = tf.constant(fill((3, 3), 1.9) + np.array([0.0, 0.0, 1.0]))
nf_t = tf.constant(np.linspace(2.0, 6.0, 6))
nf_rgb = tf.constant(fill((3, 3), 2.2) + 0.5)
nf_depth = tf.constant(fill((3,), 0.4) + 4.0)


def encode(x):
    feats = [x]
    for k in range(4):
        feats += [tf.sin(2.0**k * math.pi * x), tf.cos(2.0**k * math.pi * x)]
    return tf.concat(feats, axis=-1)


def nerf():
    pts = nf_o[:, None, :] + nf_t[None, :, None] * nf_d[:, None, :]
    raw = mlp(nf_layers, encode(pts))
    sigma = tf.nn.relu(raw[..., 0])
    rgb = tf.sigmoid(raw[..., 1:])
    deltas = tf.concat([nf_t[1:] - nf_t[:-1], tf.constant([2.0**10], dtype=F64)], axis=0)
    deltas = deltas[None, :] * tf.norm(nf_d, axis=-1)[:, None]
    alpha = 1.0 - tf.exp(-sigma * deltas)
    trans = tf.math.cumprod(1.0 - alpha + 2.0**-30, axis=-1, exclusive=True)
    w = alpha * trans
    colour = tf.reduce_sum(w[..., None] * rgb, axis=-2)
    trans2 = tf.exp(-tf.math.cumsum(sigma * deltas, axis=-1, exclusive=True))
    depth = tf.reduce_sum(alpha * trans2 * nf_t[None, :], axis=-1)
    loss = tf.reduce_mean(tf.square(colour - nf_rgb)) + 2.0**-6 * tf.reduce_mean(tf.square(depth - nf_depth))
    return [("sigma", sigma), ("colour", colour), ("depth", depth), ("loss", loss)]


train("nerf", nerf, nf_vars, adam())

# 6. Stateful char-LSTM, truncated BPTT: a batch of 2 texts of 13 ids
# (vocabulary 8), three chunks of 4 steps (inputs ids[:, 4c:4c+4], targets
# one later); Embedding(8, 4) -> LSTM(6) from the carried state -> Dense(6->8);
# sparse softmax cross-entropy; the final state written back to the state
# variables after each step.
cl_emb = keras.layers.Embedding(8, 4, dtype=F64)
cl_emb.build((None, None))
cl_lstm = keras.layers.LSTM(6, return_sequences=True, return_state=True, dtype=F64)
cl_lstm.build((None, None, 4))
cl_head = dense(6, 8)
cl_vars = cl_emb.trainable_variables + cl_lstm.trainable_variables + cl_head.trainable_variables
set_weights(cl_vars, 260.0)
cl_ids = tf.constant(
    [[1, 4, 2, 7, 7, 0, 3, 5, 6, 1, 2, 4, 3], [5, 5, 0, 2, 6, 3, 1, 7, 4, 0, 6, 2, 1]], dtype=tf.int64
)
cl_h = tf.Variable(tf.zeros((2, 6), dtype=F64))
cl_c = tf.Variable(tf.zeros((2, 6), dtype=F64))


def char_lstm(x, y):
    seq, h, c = cl_lstm(cl_emb(x), initial_state=[cl_h, cl_c])
    logits = cl_head(seq)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
    return [("h", h), ("c", c), ("loss", tf.reduce_mean(ce))]


def cl_data(s):
    c = s - 1
    return cl_ids[:, 4 * c : 4 * c + 4], cl_ids[:, 4 * c + 1 : 4 * c + 5]


# the step's final state is written back inside the step (before the
# update), as a stateful layer does
def char_lstm_step(x, y):
    outs = char_lstm(x, y)
    cl_h.assign(outs[0][1])
    cl_c.assign(outs[1][1])
    return outs


train("charlstm", char_lstm_step, cl_vars, adam(), steps=3, data=cl_data)

# 7. Mixture of experts: 6 tokens of 4 features, 4 experts (Dense 4->8
# relu -> 8->4 as stacked weights), a gate Dense(4->4, no bias), top-2
# routing with a softmax over the two chosen logits; the load-balancing
# loss 4 sum(importance * load), importance the mean of the dense routing
# matrix (scatter_nd), load the share of routes per expert
# (tensor_scatter_nd_add); loss MSE + 2^-3 balance.
me_gate = dense(4, 4, use_bias=False)
me_w1 = tf.Variable(tf.zeros((4, 4, 8), dtype=F64))
me_b1 = tf.Variable(tf.zeros((4, 8), dtype=F64))
me_w2 = tf.Variable(tf.zeros((4, 8, 4), dtype=F64))
me_vars = me_gate.trainable_variables + [me_w1, me_b1, me_w2]
set_weights(me_vars, 270.0)
me_x = tf.constant(fill((6, 4), 0.9, 2.0))
me_y = tf.constant(fill((6, 4), 2.7))


def moe():
    logits = me_gate(me_x)
    vals, idx = tf.math.top_k(logits, k=2)
    gates = tf.nn.softmax(vals, axis=-1)
    h = tf.nn.relu(tf.einsum("nd,nkdh->nkh", me_x, tf.gather(me_w1, idx)) + tf.gather(me_b1, idx))
    yk = tf.einsum("nkh,nkho->nko", h, tf.gather(me_w2, idx))
    out = tf.reduce_sum(gates[..., None] * yk, axis=1)
    rows = tf.broadcast_to(tf.range(6)[:, None], (6, 2))
    where = tf.stack([rows, idx], axis=-1)
    comb = tf.scatter_nd(where, gates, (6, 4))
    counts = tf.tensor_scatter_nd_add(tf.zeros(4, dtype=F64), tf.reshape(idx, (-1, 1)), tf.ones(12, dtype=F64))
    balance = 4.0 * tf.reduce_sum(tf.reduce_mean(comb, axis=0) * counts / 12.0)
    loss = tf.reduce_mean(tf.square(out - me_y)) + 0.125 * balance
    return [("idx", idx), ("comb", comb), ("out", out), ("loss", loss)]


train("moe", moe, me_vars, adam())
