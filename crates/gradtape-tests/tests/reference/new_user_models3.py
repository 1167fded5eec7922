"""Reference numbers for tests/nn/new_user_*.rs (physics, prob, vision,
tabular): a third batch of models a new
user would write, computed eagerly by TensorFlow 2.21 / Keras 3 in float64:

1. a physics-informed network for Burgers' equation u_t + u u_x = nu u_xx
   (u_x, u_t and u_xx from two nested tapes inside the weights' tape), plus
   the initial condition u(x, 0) = -sin(pi x); Adam, two steps;
2. a mixture-density network: mixture logits, means and softplus scales
   from one hidden layer, the negative log-likelihood through log_softmax
   and reduce_logsumexp; Adam, two steps;
3. a contrastive (SimCLR NT-Xent) loss: two views through one encoder,
   l2-normalised, the cosine similarity matrix over a temperature with the
   diagonal masked out, sparse softmax cross-entropy to the other view; SGD
   with momentum, two steps;
4. a small Vision Transformer: 4x4 patches by reshape / transpose, a Dense
   patch embedding, a class token and learned positions, one pre-norm block
   (MultiHeadAttention, LayerNormalization, GELU MLP), a final norm and a
   head on the class token; Adam, two steps;
5. a REINFORCE policy-gradient step: discounted returns (a reversed
   cumsum), normalised advantages, log_softmax gathered at the taken
   actions (batch_dims=1), an entropy bonus; Adam, two steps;
6. a tabular model: two Embeddings and numeric features concatenated,
   Dense, BatchNormalization in training mode, relu, Dense logit, binary
   cross-entropy; Adam, two steps, the moving statistics, then inference;
7. a WGAN-GP step: the critic's gradient penalty needs the gradient of the
   critic w.r.t. its (interpolated) input on an inner tape; two tapes, Adam
   for the critic, RMSprop for the generator;
8. a contractive autoencoder: the squared Frobenius norm of the encoder's
   per-example Jacobian (batch_jacobian on an inner tape) in the loss; Adam;
9. the mixture-density network with its learning rate set by hand between
   steps (`optimizer.learning_rate = ...`);
10. the mixture-density network with Adam's moving averages of the weights
   (use_ema), then finalize_variable_values.

Run: /work/refvenv/bin/python new_user_models3.py > ../data/new_user_models3.txt

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


print(f"# written by tests/reference/new_user_models3.py (TensorFlow {tf.__version__}, Keras {keras.__version__})", flush=True)

# 1. Burgers PINN: X = (x, t) collocation points, u = Dense(8->1)(tanh(
# Dense(8->8)(tanh(Dense(2->8)(X))))); r = u_t + u u_x - nu u_xx; initial
# points (x0, 0) with u(x0, 0) = -sin(pi x0). loss = mean(r^2) + mean((u0 +
# sin(pi x0))^2).
NU = 0.0625
b_layers = [dense(2, 8, "tanh"), dense(8, 8, "tanh"), dense(8, 1)]
b_vars = [v for l in b_layers for v in l.trainable_variables]
set_weights(b_vars, 60.0)
b_x = tf.constant(fill((12, 2), 0.3, 2.0))
b_x0 = tf.constant(np.stack([fill((6,), 1.9, 2.0), np.zeros(6)], axis=1))


def burgers_u(X):
    h = X
    for l in b_layers:
        h = l(h)
    return h


def burgers():
    with tf.GradientTape(persistent=True) as t1:
        t1.watch(b_x)
        with tf.GradientTape() as t2:
            t2.watch(b_x)
            u = burgers_u(b_x)
        g = t2.gradient(u, b_x)
        ux, ut = g[:, 0:1], g[:, 1:2]
    uxx = t1.gradient(ux, b_x)[:, 0:1]
    r = ut + u * ux - NU * uxx
    u0 = burgers_u(b_x0)
    ic = u0 + tf.sin(math.pi * b_x0[:, 0:1])
    loss = tf.reduce_mean(tf.square(r)) + tf.reduce_mean(tf.square(ic))
    return [("u", u), ("r", r), ("loss", loss)]


train("burgers", burgers, b_vars, adam())

# 2. Mixture-density network, K = 3 components on a scalar target.
m_h = dense(3, 8, "tanh")
m_pi, m_mu, m_sig = dense(8, 3), dense(8, 3), dense(8, 3)
m_vars = [v for l in (m_h, m_pi, m_mu, m_sig) for v in l.trainable_variables]
set_weights(m_vars, 70.0)
m_x = tf.constant(fill((10, 3), 0.8, 2.0))
m_y = tf.constant(fill((10, 1), 2.1, 3.0))


def mdn():
    h = m_h(m_x)
    log_pi = tf.nn.log_softmax(m_pi(h), axis=1)
    mu = m_mu(h)
    sigma = tf.nn.softplus(m_sig(h)) + 2.0**-10
    z = (m_y - mu) / sigma
    log_n = -0.5 * tf.square(z) - tf.math.log(sigma) - 0.5 * math.log(2 * math.pi)
    ll = tf.reduce_logsumexp(log_pi + log_n, axis=1)
    return [("sigma", sigma), ("ll", ll), ("loss", -tf.reduce_mean(ll))]


train("mdn", mdn, m_vars, adam())

# 3. NT-Xent: 4 pairs, views of 6 features; encoder Dense(6->8, tanh),
# projection Dense(8->4); temperature 1/2.
c_enc, c_proj = dense(6, 8, "tanh"), dense(8, 4)
c_vars = c_enc.trainable_variables + c_proj.trainable_variables
set_weights(c_vars, 80.0)
c_x1 = tf.constant(fill((4, 6), 0.1, 2.0))
c_x2 = tf.constant(fill((4, 6), 0.1, 2.0) + fill((4, 6), 3.3, 0.5))
B = 4


def contrastive():
    z = c_proj(c_enc(tf.concat([c_x1, c_x2], axis=0)))
    z = tf.math.l2_normalize(z, axis=1)
    sim = tf.matmul(z, z, transpose_b=True) / 0.5
    sim = sim - 1e9 * tf.eye(2 * B, dtype=F64)
    labels = tf.concat([tf.range(B, 2 * B), tf.range(0, B)], axis=0)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, sim)
    return [("z", z), ("loss", tf.reduce_mean(ce))]


train("contrastive", contrastive, c_vars, keras.optimizers.SGD(learning_rate=lambda: 0.25, momentum=0.875))

# 4. ViT: images [2, 8, 8, 3], 4x4 patches (4 of 48 values), width 8, 2
# heads of 4, MLP 16 (exact GELU), LayerNorm epsilon 1e-5, 3 classes.
# The GELU is written out: TensorFlow 2.21's float64 tf.nn.gelu (Keras's
# "gelu") runs a kernel whose values are off by up to 5e-9 from
# 0.5 x erfc(-x / sqrt 2) (the same formula composed of tf.math ops is
# exact to roundoff), too far for a 1e-12 comparison.


def gelu(x):
    return 0.5 * x * tf.math.erfc(-x * 0.7071067811865476)


v_patch = dense(48, 8)
v_cls = tf.Variable(np.zeros((1, 1, 8)))
v_pos = tf.Variable(np.zeros((1, 5, 8)))
v_ln1 = keras.layers.LayerNormalization(epsilon=1e-5, dtype=F64)
v_ln1.build((None, 5, 8))
v_mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, dtype=F64)
v_mha.build((2, 5, 8), (2, 5, 8))
v_ln2 = keras.layers.LayerNormalization(epsilon=1e-5, dtype=F64)
v_ln2.build((None, 5, 8))
v_ff1, v_ff2 = dense(8, 16, gelu), dense(16, 8)
v_lnf = keras.layers.LayerNormalization(epsilon=1e-5, dtype=F64)
v_lnf.build((None, 5, 8))
v_head = dense(8, 3)
v_vars = (
    v_patch.trainable_variables
    + [v_cls, v_pos]
    + v_ln1.trainable_variables
    + v_mha.trainable_variables
    + v_ln2.trainable_variables
    + v_ff1.trainable_variables
    + v_ff2.trainable_variables
    + v_lnf.trainable_variables
    + v_head.trainable_variables
)
print("# vit weights: " + ", ".join(getattr(v, "path", v.name) for v in v_vars))
VIT_GAMMAS = (4, 14, 20)
set_weights(v_vars, 90.0, VIT_GAMMAS)
v_img = tf.constant(fill((2, 8, 8, 3), 0.4, 2.0))
v_y = tf.constant([2, 0])


def vit():
    p = tf.reshape(v_img, (2, 2, 4, 2, 4, 3))
    p = tf.transpose(p, (0, 1, 3, 2, 4, 5))
    p = tf.reshape(p, (2, 4, 48))
    h = v_patch(p)
    cls = tf.broadcast_to(v_cls, (2, 1, 8))
    h = tf.concat([cls, h], axis=1) + v_pos
    n = v_ln1(h)
    h = h + v_mha(n, n)
    h = h + v_ff2(v_ff1(v_ln2(h)))
    logits = v_head(v_lnf(h)[:, 0])
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(v_y, logits))
    return [("logits", logits), ("loss", loss)]


train("vit", vit, v_vars, adam())

# 5. REINFORCE: an episode of 6 steps, states of 4 features, 3 actions,
# gamma 7/8, entropy bonus 1/16.
r_h, r_out = dense(4, 8, "tanh"), dense(8, 3)
r_vars = r_h.trainable_variables + r_out.trainable_variables
set_weights(r_vars, 100.0)
r_s = tf.constant(fill((6, 4), 1.3, 2.0))
r_a = tf.constant([0, 2, 1, 1, 0, 2])
r_rew = tf.constant(fill((6,), 0.7, 2.0))
GAMMA = 0.875


def reinforce():
    k = tf.range(6, dtype=F64)
    disc = tf.pow(GAMMA, k)
    ret = tf.math.cumsum(r_rew * disc, reverse=True) / disc
    adv = (ret - tf.reduce_mean(ret)) / (tf.math.reduce_std(ret) + 1e-8)
    logits = r_out(r_h(r_s))
    logp = tf.nn.log_softmax(logits, axis=-1)
    taken = tf.gather(logp, r_a[:, None], axis=1, batch_dims=1)[:, 0]
    entropy = -tf.reduce_mean(tf.reduce_sum(tf.exp(logp) * logp, axis=-1))
    loss = -tf.reduce_mean(taken * adv) - 0.0625 * entropy
    return [("ret", ret), ("taken", taken), ("entropy", entropy), ("loss", loss)]


train("reinforce", reinforce, r_vars, adam())

# 6. Tabular: a category of 5 values embedded in 3, one of 4 in 2, and 3
# numeric features; Dense(8->6, no bias), BatchNormalization (momentum
# 7/8, epsilon 1e-3), relu, Dense(6->1) logit, binary cross-entropy.
t_e1 = keras.layers.Embedding(5, 3, dtype=F64)
t_e1.build((None,))
t_e2 = keras.layers.Embedding(4, 2, dtype=F64)
t_e2.build((None,))
t_d1 = dense(8, 6, use_bias=False)
t_bn = keras.layers.BatchNormalization(momentum=0.875, epsilon=1e-3, dtype=F64)
t_bn.build((None, 6))
t_d2 = dense(6, 1)
t_vars = (
    t_e1.trainable_variables + t_e2.trainable_variables + t_d1.trainable_variables + t_bn.trainable_variables + t_d2.trainable_variables
)
set_weights(t_vars, 110.0, (3,))
t_c1 = tf.constant([0, 3, 1, 3, 4, 0, 3, 2])
t_c2 = tf.constant([1, 1, 0, 3, 2, 1, 0, 1])
t_num = tf.constant(fill((8, 3), 2.6, 2.0))
t_y = tf.constant([[1.0], [0.0], [0.0], [1.0], [1.0], [0.0], [1.0], [0.0]], dtype=F64)


def tabular(training):
    h = tf.concat([t_e1(t_c1), t_e2(t_c2), t_num], axis=1)
    h = tf.nn.relu(t_bn(t_d1(h), training=training))
    logits = t_d2(h)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(t_y, logits))
    return [("logits", logits), ("loss", loss)]


train("tabular", lambda: tabular(True), t_vars, adam())
emit("tabular_moving_mean", t_bn.moving_mean)
emit("tabular_moving_variance", t_bn.moving_variance)
for n, t in tabular(False):
    emit(f"tabular_inference_{n}", t)

# 7. WGAN-GP: generator Dense(3->6, tanh) -> Dense(6->4); critic Dense(4->6,
# tanh) -> Dense(6->1); the penalty lambda = 2 at x_hat = a real + (1 - a)
# fake; critic Adam, generator RMSprop (rho 7/8, epsilon 2^-20).
w_g = [dense(3, 6, "tanh"), dense(6, 4)]
w_c = [dense(4, 6, "tanh"), dense(6, 1)]
w_gv = [v for l in w_g for v in l.trainable_variables]
w_cv = [v for l in w_c for v in l.trainable_variables]
set_weights(w_gv, 120.0)
set_weights(w_cv, 130.0)
w_z = tf.constant(fill((6, 3), 0.2, 2.0))
w_real = tf.constant(fill((6, 4), 1.4, 2.0) + 0.25)
w_alpha = tf.constant(0.5 + fill((6, 1), 2.2))
w_gopt = keras.optimizers.RMSprop(learning_rate=lambda: 2.0**-6, rho=0.875, epsilon=2.0**-20)
w_copt = adam()


def critic(x):
    return w_c[1](w_c[0](x))


for s in (1, 2):
    with tf.GradientTape() as gt, tf.GradientTape() as ct:
        fake = w_g[1](w_g[0](w_z))
        x_hat = w_alpha * w_real + (1.0 - w_alpha) * fake
        with tf.GradientTape() as pt:
            pt.watch(x_hat)
            d_hat = critic(x_hat)
        gx = pt.gradient(d_hat, x_hat)
        norm = tf.sqrt(tf.reduce_sum(tf.square(gx), axis=1))
        gp = tf.reduce_mean(tf.square(norm - 1.0))
        d_fake = critic(fake)
        c_loss = tf.reduce_mean(d_fake) - tf.reduce_mean(critic(w_real)) + 2.0 * gp
        g_loss = -tf.reduce_mean(d_fake)
    cg = ct.gradient(c_loss, w_cv)
    gg = gt.gradient(g_loss, w_gv)
    w_copt.apply_gradients(zip(cg, w_cv))
    w_gopt.apply_gradients(zip(gg, w_gv))
    emit(f"wgan{s}_gp", gp)
    emit(f"wgan{s}_c_loss", c_loss)
    emit(f"wgan{s}_g_loss", g_loss)
    # one list, the critic's then the generator's, as the Rust tests' vars()
    for j, g in enumerate(cg + gg):
        emit(f"wgan{s}_grad{j}", g)
for j, v in enumerate(w_cv + w_gv):
    emit(f"wgan_weight{j}", v)

# 8. Contractive autoencoder: encoder Dense(5->4, sigmoid), decoder
# Dense(4->5); loss = mean squared reconstruction error + 1/4 mean over the
# batch of the squared Frobenius norm of the encoder's per-example Jacobian
# (batch_jacobian on an inner tape, inside the weights' tape); Adam.
cae_enc, cae_dec = dense(5, 4, "sigmoid"), dense(4, 5)
cae_vars = cae_enc.trainable_variables + cae_dec.trainable_variables
set_weights(cae_vars, 140.0)
cae_x = tf.constant(fill((6, 5), 0.9, 2.0))


def cae():
    with tf.GradientTape() as jt:
        jt.watch(cae_x)
        h = cae_enc(cae_x)
    jac = jt.batch_jacobian(h, cae_x)
    penalty = tf.reduce_mean(tf.reduce_sum(tf.square(jac), axis=[1, 2]))
    rec = tf.reduce_mean(tf.square(cae_dec(h) - cae_x))
    return [("jac", jac), ("penalty", penalty), ("loss", rec + 0.25 * penalty)]


train("cae", cae, cae_vars, adam())

# 9. The mixture-density network again from the same weights, its learning
# rate set by hand after the first step (a plateau schedule written in the
# training loop): `optimizer.learning_rate = 2^-9`.
set_weights(m_vars, 70.0)
mdn_drop_opt = keras.optimizers.Adam(learning_rate=2.0**-7, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=2.0**-20)
for s in (1, 2, 3):
    with tf.GradientTape() as tape:
        outs = mdn()
    grads = tape.gradient(outs[-1][1], m_vars)
    mdn_drop_opt.apply_gradients(zip(grads, m_vars))
    emit(f"mdn_drop{s}_loss", outs[-1][1])
    if s == 1:
        mdn_drop_opt.learning_rate = 2.0**-9
for j, v in enumerate(m_vars):
    emit(f"mdn_drop_weight{j}", v)

# 10. The mixture-density network again from the same weights, with Adam's
# moving averages of the weights (use_ema=True, ema_momentum=7/8), three
# steps; then finalize_variable_values copies the averages into the weights.
set_weights(m_vars, 70.0)
mdn_ema_opt = keras.optimizers.Adam(
    learning_rate=2.0**-7, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=2.0**-20, use_ema=True, ema_momentum=0.875
)
for s in (1, 2, 3):
    with tf.GradientTape() as tape:
        outs = mdn()
    grads = tape.gradient(outs[-1][1], m_vars)
    mdn_ema_opt.apply_gradients(zip(grads, m_vars))
    emit(f"mdn_ema{s}_loss", outs[-1][1])
for j, v in enumerate(m_vars):
    emit(f"mdn_ema_weight{j}", v)
for j, v in enumerate(mdn_ema_opt._model_variables_moving_average):
    emit(f"mdn_ema_average{j}", v)
mdn_ema_opt.finalize_variable_values(m_vars)
for j, v in enumerate(m_vars):
    emit(f"mdn_ema_final{j}", v)
