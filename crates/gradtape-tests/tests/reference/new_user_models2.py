"""Reference numbers for tests/nn/new_user_*.rs (graph_flow, ode, unet,
second_order, adamw, text): more models a new user would write, computed
eagerly by TensorFlow 2.21 / Keras 3 in float64:

1. a graph neural network step (gather by edge index, unsorted segment
   mean / max / sum message passing with a per-destination softmax,
   segment_mean readout; Adam),
2. a RealNVP normalizing flow (split, concat, exp, log-det sums; negative
   log-likelihood; Adam) and its inverse (sampling),
3. a neural ODE integrated by RK4 (a Python loop; gradients through the
   loop to the weights and the initial state; SGD with momentum),
4. a U-Net-ish encoder/decoder (conv, max pool, transposed conv, bilinear
   upsampling, skip concatenation; Adam),
5. second-order: Newton steps for L2-regularised logistic regression (the
   Hessian a jacobian of the gradient, tf.linalg.solve), a Hessian-vector
   product forward-over-reverse, per-example gradients (a jacobian),
6. a custom training loop: gradients accumulated over micro-batches,
   clipped by global norm, AdamW under a cosine learning-rate schedule;
7. the same model with Keras's own `gradient_accumulation_steps`;
8. a text classifier: masked bidirectional LSTM beside a Conv1D with global
   max pooling (new_user_text.rs).

Run: /work/refvenv/bin/python new_user_models2.py > ../data/new_user_models2.txt

Every weight and input is `fill(shape, k)`, 0.5 sin(0.7 i + k) over the
row-major index i, times a scale written the same in the Rust tests.
Hyper-parameters are dyadic (Keras turns some into float32 tensors).
"""
import math

import keras
import numpy as np
import tensorflow as tf

from new_user_common import F64, adam, emit, fill, set_weights


def dense(inp, units, activation=None, use_bias=True):
    layer = keras.layers.Dense(units, activation=activation, use_bias=use_bias, dtype=F64)
    layer.build((None, inp))
    return layer


print(f"# written by tests/reference/new_user_models2.py (TensorFlow {tf.__version__}, Keras {keras.__version__})")

# 1. Graph neural network: 7 nodes in two graphs (0-3, 4-6), 11 weighted
# directed edges (node 6 receives none). Layer 1: mean of weighted
# neighbour messages; layer 2: attention over incoming edges (softmax per
# destination through unsorted_segment_max / _sum); readout segment_mean
# per graph, Dense to one number, mean squared error.
GNN_SRC = [0, 1, 2, 3, 1, 4, 5, 6, 5, 0, 2]
GNN_DST = [1, 0, 3, 2, 2, 5, 4, 5, 4, 3, 1]
GNN_GRAPH = [0, 0, 0, 0, 1, 1, 1]
N = 7
g_self, g_nb = dense(3, 4), dense(3, 4)
g_z = dense(4, 4, use_bias=False)
g_head = dense(4, 1)
a_src = tf.Variable(np.zeros((4, 1)))
a_dst = tf.Variable(np.zeros((4, 1)))
gnn_vars = g_self.trainable_variables + g_nb.trainable_variables + g_z.trainable_variables + [a_src, a_dst] + g_head.trainable_variables
set_weights(gnn_vars, 50.0)
# larger attention weights, so that the leaky relu's two slopes both occur
for v in (a_src, a_dst):
    v.assign(4.0 * v)
gnn_x = tf.constant(fill((N, 3), 0.6, 2.0))
gnn_ew = tf.constant(1.0 + fill((11,), 1.7))
gnn_y = tf.constant(fill((2, 1), 2.9))
src, dst, gid = tf.constant(GNN_SRC), tf.constant(GNN_DST), tf.constant(GNN_GRAPH)


def gnn(x):
    m = tf.gather(x, src) * gnn_ew[:, None]
    agg = tf.math.unsorted_segment_mean(m, dst, N)
    h1 = tf.tanh(g_self(x) + g_nb(agg))
    z = g_z(h1)
    score = tf.nn.leaky_relu(tf.gather(z, src) @ a_src + tf.gather(z, dst) @ a_dst, alpha=0.25)
    mx = tf.math.unsorted_segment_max(score, dst, N)
    ex = tf.exp(score - tf.gather(mx, dst))
    den = tf.math.unsorted_segment_sum(ex, dst, N)
    alpha = ex / tf.gather(den, dst)
    out = tf.math.unsorted_segment_sum(alpha * tf.gather(z, src), dst, N)
    h2 = tf.tanh(out + h1)
    pooled = tf.math.segment_mean(h2, gid)
    pred = g_head(pooled)
    return alpha, pred, tf.reduce_mean(tf.square(pred - gnn_y))


gnn_opt = adam()
for step in (1, 2):
    with tf.GradientTape() as tape:
        alpha, pred, loss = gnn(gnn_x)
    grads = tape.gradient(loss, gnn_vars)
    gnn_opt.apply_gradients(zip(grads, gnn_vars))
    emit(f"gnn{step}_alpha", alpha)
    emit(f"gnn{step}_pred", pred)
    emit(f"gnn{step}_loss", loss)
    for j, g in enumerate(grads):
        emit(f"gnn{step}_grad{j}", g)
for j, v in enumerate(gnn_vars):
    emit(f"gnn_weight{j}", v)

# 2. RealNVP: three affine coupling layers on 4 features; each conditions on
# the first half (Dense 2->8 tanh, then s = scale * tanh(Dense 8->2), t =
# Dense 8->2), transforms the second half, and swaps the halves.
# nll = -mean(log N(z; 0, I) + sum of s).
flow_layers = []
flow_vars = []
for c in range(3):
    h, s, t = dense(2, 8, "tanh"), dense(8, 2), dense(8, 2)
    scale = tf.Variable(np.zeros((2,)))
    flow_layers.append((h, s, t, scale))
    flow_vars += h.trainable_variables + s.trainable_variables + t.trainable_variables + [scale]
set_weights(flow_vars, 60.0)
flow_x = tf.constant(fill((8, 4), 0.45, 2.5))
flow_z = tf.constant(fill((5, 4), 1.3, 2.0))


def flow_forward(x):
    logdet = tf.zeros((x.shape[0],), dtype=tf.float64)
    for h, s_l, t_l, scale in flow_layers:
        x1, x2 = tf.split(x, 2, axis=1)
        hh = h(x1)
        s = scale * tf.tanh(s_l(hh))
        t = t_l(hh)
        y2 = x2 * tf.exp(s) + t
        x = tf.concat([y2, x1], axis=1)
        logdet = logdet + tf.reduce_sum(s, axis=1)
    logp = -0.5 * tf.reduce_sum(tf.square(x), axis=1) - 2.0 * math.log(2.0 * math.pi)
    return x, logdet, -tf.reduce_mean(logp + logdet)


def flow_inverse(z):
    for h, s_l, t_l, scale in reversed(flow_layers):
        y2, x1 = tf.split(z, 2, axis=1)
        hh = h(x1)
        s = scale * tf.tanh(s_l(hh))
        x2 = (y2 - t_l(hh)) * tf.exp(-s)
        z = tf.concat([x1, x2], axis=1)
    return z


flow_opt = adam()
for step in (1, 2):
    with tf.GradientTape() as tape:
        z, logdet, nll = flow_forward(flow_x)
    grads = tape.gradient(nll, flow_vars)
    flow_opt.apply_gradients(zip(grads, flow_vars))
    emit(f"flow{step}_z", z)
    emit(f"flow{step}_logdet", logdet)
    emit(f"flow{step}_nll", nll)
    for j, g in enumerate(grads):
        emit(f"flow{step}_grad{j}", g)
for j, v in enumerate(flow_vars):
    emit(f"flow_weight{j}", v)
emit("flow_sample", flow_inverse(flow_z))

# 3. Neural ODE: dy/dt = Dense(8->2)(tanh(Dense(2->8)(y))), RK4 with dt = 1/8
# over 8 steps from y0; loss = mean((y(1) - target)^2); gradients for the
# weights and y0; SGD with momentum.
ode_l1, ode_l2 = dense(2, 8, "tanh"), dense(8, 2)
ode_vars = ode_l1.trainable_variables + ode_l2.trainable_variables
set_weights(ode_vars, 70.0)
ode_y0 = tf.constant(fill((4, 2), 0.8, 2.0))
ode_target = tf.constant(fill((4, 2), 2.2, 2.0))
DT, STEPS = 0.125, 8


def ode_f(y):
    return ode_l2(ode_l1(y))


def rk4(y):
    for _ in range(STEPS):
        k1 = ode_f(y)
        k2 = ode_f(y + (DT / 2) * k1)
        k3 = ode_f(y + (DT / 2) * k2)
        k4 = ode_f(y + DT * k3)
        y = y + (DT / 6) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return y


ode_opt = keras.optimizers.SGD(learning_rate=lambda: 0.0625, momentum=0.875)
for step in (1, 2):
    with tf.GradientTape() as tape:
        tape.watch(ode_y0)
        y1 = rk4(ode_y0)
        loss = tf.reduce_mean(tf.square(y1 - ode_target))
    grads = tape.gradient(loss, ode_vars + [ode_y0])
    ode_opt.apply_gradients(zip(grads[:-1], ode_vars))
    emit(f"ode{step}_y1", y1)
    emit(f"ode{step}_loss", loss)
    for j, g in enumerate(grads):
        emit(f"ode{step}_grad{j}", g)
for j, v in enumerate(ode_vars):
    emit(f"ode_weight{j}", v)

# 4. U-Net-ish: conv 3x3 (2->4, tanh) -> max pool 2 -> conv 3x3 (4->8,
# tanh); up: transposed conv 2x2 stride 2 (8->4) + conv 1x1 (8->4) of a
# bilinear upsampling; concatenated with the skip, conv 3x3 (8->4, tanh),
# conv 1x1 (4->1) logits; binary cross-entropy from logits; Adam.
def conv(inp, filters, k, size, activation=None, strides=1, transpose=False):
    cls = keras.layers.Conv2DTranspose if transpose else keras.layers.Conv2D
    layer = cls(filters, k, strides=strides, padding="same", activation=activation, dtype=F64)
    layer.build((None, size, size, inp))
    return layer


u_e1 = conv(2, 4, 3, 8, "tanh")
u_e2 = conv(4, 8, 3, 4, "tanh")
u_t = conv(8, 4, 2, 4, strides=2, transpose=True)
u_p = conv(8, 4, 1, 8)
u_d = conv(8, 4, 3, 8, "tanh")
u_o = conv(4, 1, 1, 8)
u_pool = keras.layers.MaxPooling2D(2, dtype=F64)


# Keras's UpSampling2D(2, interpolation="bilinear") is tf.image.resize,
# which computes in float32 whatever the input's dtype (its float64 output
# differs from float64 arithmetic by ~1e-7 relative). The same resize
# (half-pixel centres, edges clamped) as float64 matrices, one per axis:
def bilinear_matrix(n_in, n_out):
    m = np.zeros((n_out, n_in))
    for o in range(n_out):
        s = max((o + 0.5) * n_in / n_out - 0.5, 0.0)
        i0 = int(math.floor(s))
        i1, f = min(i0 + 1, n_in - 1), s - i0
        m[o, i0] += 1.0 - f
        m[o, i1] += f
    return tf.constant(m)


UP4 = bilinear_matrix(4, 8)


def u_up(x):
    return tf.einsum("ai,bj,nijc->nabc", UP4, UP4, x)


unet_layers = [u_e1, u_e2, u_t, u_p, u_d, u_o]
unet_vars = [v for layer in unet_layers for v in layer.trainable_variables]
set_weights(unet_vars, 80.0)
unet_x = tf.constant(fill((2, 8, 8, 2), 0.35, 2.0))
unet_y = tf.constant((fill((2, 8, 8, 1), 1.9) > 0).astype(np.float64))
bce = keras.losses.BinaryCrossentropy(from_logits=True)


def unet(x):
    e1 = u_e1(x)
    e2 = u_e2(u_pool(e1))
    u = u_t(e2) + u_p(u_up(e2))
    logits = u_o(u_d(tf.concat([u, e1], axis=-1)))
    return logits, bce(unet_y, logits)


unet_opt = adam()
for step in (1, 2):
    with tf.GradientTape() as tape:
        logits, loss = unet(unet_x)
    grads = tape.gradient(loss, unet_vars)
    unet_opt.apply_gradients(zip(grads, unet_vars))
    emit(f"unet{step}_logits", logits)
    emit(f"unet{step}_loss", loss)
    for j, g in enumerate(grads):
        emit(f"unet{step}_grad{j}", g)
for j, v in enumerate(unet_vars):
    emit(f"unet_weight{j}", v)

# 5a. Newton's method for logistic regression with an L2 term:
# f(w) = mean(softplus(X w) - y X w) + lam/2 |w|^2, two steps of
# w <- w - H^-1 g, H the jacobian of the gradient.
nx = tf.constant(fill((16, 5), 0.15, 3.0))
ny = tf.constant((fill((16,), 2.6) > 0).astype(np.float64))
LAM = 2.0**-4
newton_w = tf.Variable(fill((5,), 0.55))


def logistic(w):
    xw = tf.linalg.matvec(nx, w)
    return tf.reduce_mean(tf.nn.softplus(xw) - ny * xw) + (LAM / 2) * tf.reduce_sum(tf.square(w))


for step in (1, 2):
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            f = logistic(newton_w)
        g = inner.gradient(f, newton_w)
    h = outer.jacobian(g, newton_w)
    newton_w.assign_sub(tf.linalg.solve(h, g[:, None])[:, 0])
    emit(f"newton{step}_f", f)
    emit(f"newton{step}_g", g)
    emit(f"newton{step}_h", h)
    emit(f"newton{step}_w", newton_w)

# 5b. A small MLP (Dense 3->4 tanh, Dense 4->1) with a mean squared error:
# Hessian-vector product forward over reverse (the tangent of the gradient
# for the weights' tangents v), and per-example gradients of the squared
# errors (a jacobian of the vector of losses).
m1, m2 = dense(3, 4, "tanh"), dense(4, 1)
mlp_vars = m1.trainable_variables + m2.trainable_variables
set_weights(mlp_vars, 90.0)
mx_ = tf.constant(fill((6, 3), 0.25, 2.0))
my_ = tf.constant(fill((6, 1), 1.45))
tangents = [tf.constant(fill(v.shape, 95.0 + j)) for j, v in enumerate(mlp_vars)]
with tf.autodiff.ForwardAccumulator([v.value for v in mlp_vars], tangents) as acc:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(m2(m1(mx_)) - my_))
    grads = tape.gradient(loss, mlp_vars)
hvps = acc.jvp(grads, unconnected_gradients="zero")
emit("hvp_loss", loss)
for j, (g, hv) in enumerate(zip(grads, hvps)):
    emit(f"hvp_grad{j}", g)
    emit(f"hvp{j}", hv)
with tf.GradientTape() as tape:
    per_example = tf.square(m2(m1(mx_)) - my_)[:, 0]
for j, jac in enumerate(tape.jacobian(per_example, mlp_vars)):
    emit(f"per_example{j}", jac)

# 6. A custom training loop: Dense(4->8, tanh) -> Dense(8->3) logits,
# softmax cross-entropy; each step averages the gradients of 3
# micro-batches of 4, clips them to global norm 1/4, and applies AdamW
# (weight decay 1/8) at a cosine-decayed rate (Keras's CosineDecay formula:
# initial 2^-5, 2 decay steps, alpha 1/2, so that every rate is dyadic, as
# Keras rounds a callable's rate to float32).
c1, c2 = dense(4, 8, "tanh"), dense(8, 3)
loop_vars = c1.trainable_variables + c2.trainable_variables
set_weights(loop_vars, 100.0)
loop_x = tf.constant(fill((12, 4), 0.65, 2.0))
loop_y = tf.constant([0, 2, 1, 1, 0, 2, 2, 1, 0, 0, 1, 2], dtype=tf.int64)
schedule_step = [0]


def cosine_lr():
    frac = min(schedule_step[0], 2) / 2
    return 2.0**-5 * (0.5 * (0.5 * (1.0 + math.cos(math.pi * frac))) + 0.5)


loop_opt = keras.optimizers.AdamW(
    learning_rate=cosine_lr, weight_decay=0.125, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=2.0**-20
)
for step in (1, 2, 3):
    acc = [tf.zeros_like(v) for v in loop_vars]
    losses = []
    for mb in range(3):
        xb, yb = loop_x[4 * mb : 4 * mb + 4], loop_y[4 * mb : 4 * mb + 4]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=c2(c1(xb))))
        losses.append(loss)
        acc = [a + g for a, g in zip(acc, tape.gradient(loss, loop_vars))]
    grads = [a / 3.0 for a in acc]
    clipped, norm = tf.clip_by_global_norm(grads, 0.25)
    loop_opt.apply_gradients(zip(clipped, loop_vars))
    schedule_step[0] += 1
    emit(f"loop{step}_losses", tf.stack(losses))
    emit(f"loop{step}_norm", norm)
    for j, g in enumerate(clipped):
        emit(f"loop{step}_grad{j}", g)
    for j, v in enumerate(loop_vars):
        emit(f"loop{step}_weight{j}", v)

# 7. The same model trained with Keras's own gradient accumulation: AdamW
# with gradient_accumulation_steps=3 (the variables change at every third
# call, by the mean of the three calls' gradients), global_clipnorm 1/4 of
# that mean, weight decay 1/8, an ExponentialDecay schedule (2^-5, halved
# every call: dyadic, exact in Keras's float32). Six calls, one micro-batch
# of 4 each (the three micro-batches twice).
set_weights(loop_vars, 100.0)
acc_opt = keras.optimizers.AdamW(
    learning_rate=keras.optimizers.schedules.ExponentialDecay(2.0**-5, decay_steps=1, decay_rate=0.5),
    weight_decay=0.125,
    beta_1=0.875,
    beta_2=1 - 2.0**-10,
    epsilon=2.0**-20,
    global_clipnorm=0.25,
    gradient_accumulation_steps=3,
)
for call in range(1, 7):
    mb = (call - 1) % 3
    xb, yb = loop_x[4 * mb : 4 * mb + 4], loop_y[4 * mb : 4 * mb + 4]
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=c2(c1(xb))))
    acc_opt.apply_gradients(zip(tape.gradient(loss, loop_vars), loop_vars))
    emit(f"accum{call}_loss", loss)
    emit(f"accum{call}_iterations", acc_opt.iterations)
    for j, v in enumerate(loop_vars):
        emit(f"accum{call}_weight{j}", v)

# 8. A text classifier: Embedding(12, 4, mask_zero) -> Bidirectional(LSTM(3))
# given the mask (last outputs, concatenated), beside Conv1D(5, 3, same,
# tanh) over the embeddings -> GlobalMaxPooling1D; concatenated, Dense(11->3)
# logits, sparse softmax cross-entropy; Adam, two steps. Token ids repeat:
# the embedding's gradient (an IndexedSlices) is made dense before Adam, as
# gradtape applies it (Keras's Adam squares an IndexedSlices' values before
# summing repeated rows, which differs from its own dense result).
emb = keras.layers.Embedding(12, 4, mask_zero=True, dtype=F64)
emb.build((None, 7))
bi = keras.layers.Bidirectional(keras.layers.LSTM(3, dtype=F64), dtype=F64)
bi.build((None, 7, 4))
conv1 = keras.layers.Conv1D(5, 3, padding="same", activation="tanh", dtype=F64)
conv1.build((None, 7, 4))
gmp = keras.layers.GlobalMaxPooling1D(dtype=F64)
text_head = dense(11, 3)
text_vars = emb.trainable_variables + bi.trainable_variables + conv1.trainable_variables + text_head.trainable_variables
set_weights(text_vars, 110.0)
text_ids = tf.constant(
    [[3, 7, 3, 1, 0, 0, 0], [5, 5, 2, 9, 11, 4, 0], [8, 1, 0, 0, 0, 0, 0], [2, 6, 10, 6, 7, 3, 5]], dtype=tf.int64
)
text_y = tf.constant([2, 0, 1, 2], dtype=tf.int64)
text_opt = adam()
for step in (1, 2):
    with tf.GradientTape() as tape:
        e = emb(text_ids)
        mask = emb.compute_mask(text_ids)
        r = bi(tf.identity(e), mask=mask)
        c = gmp(conv1(tf.identity(e)))
        logits = text_head(tf.concat([r, c], axis=1))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=text_y, logits=logits))
    grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, text_vars)]
    text_opt.apply_gradients(zip(grads, text_vars))
    emit(f"text{step}_logits", logits)
    emit(f"text{step}_loss", loss)
    for j, g in enumerate(grads):
        emit(f"text{step}_grad{j}", g)
for j, v in enumerate(text_vars):
    emit(f"text_weight{j}", v)
