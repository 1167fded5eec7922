"""Reference numbers for tests/nn/new_user_{adversarial,sets,tcn,metric,capsule}.rs:
a seventh batch of models a new user would write, computed eagerly by
TensorFlow 2.21 / Keras 3 in float64:

1. WGAN-GP: a generator Dense(3->8, relu) -> Dense(8->2) and a critic
   Dense(2->8, leaky_relu) -> Dense(8->8, tanh) -> Dense(8->1) (the
   slope 1/4: TensorFlow's LeakyRelu takes its slope as a float32
   attribute, 0.2 would be 0.2f32); per step two critic updates, each with the gradient penalty of Keras's WGAN-GP
   example (an inner tape watching the interpolates between real and fake
   points, the penalty's norm written sqrt(sum(square(g))), lambda 10),
   Adam with beta_1 = 0; then one generator update, RMSprop (rho 7/8);
2. PGD adversarial training: a Dense(4->8, tanh) -> Dense(8->3)
   classifier; three projected-gradient steps (alpha 1/8, sign of the
   input gradient, tf.clip_by_value to the epsilon ball of 1/4 around the
   clean inputs with tensor bounds, then to [-1, 1]) taken inside the
   training tape (the weights' gradient through sign() is zero); the loss
   half the clean and half the adversarial sparse cross-entropy; SGD with
   Nesterov momentum;
3. SimCLR's NT-Xent loss: an encoder Dense(6->8, relu) -> Dense(8->4) over
   two views of 4 examples, the 8 embeddings l2-normalised, their cosine
   similarity matrix over temperature 1/2, the diagonal pushed to -1e9,
   sparse softmax cross-entropy against each view's partner; Adam;
4. PointNet: clouds of 6 points in 3-D with duplicated points (exact ties
   in the max over points, whose gradient TensorFlow splits evenly), a
   shared Conv1D(3->8, kernel 1, relu) and Dense(8->16, relu) over the
   points, GlobalMaxPooling1D, Dense(16->8, relu) -> Dense(8->3) logits,
   sparse cross-entropy, and the points' saliency (the loss's gradient
   w.r.t. the points, where the tie rule shows); Adam;
5. a TCN forecaster: two residual blocks of two weight-normalised causal
   convolutions (kernel 3, dilations 1 and 2; w = g l2_normalize(v) over
   the kernel's time and input axes, left padding by tf.pad,
   tf.nn.convolution with dilations: tf.nn.conv1d's CPU gradient refuses
   dilations > 1), relu, a 1x1 Conv1D on the first block's residual path
   (2 -> 4 channels), a Dense(4->1) head at every step, mean squared error
   to the next value; Adam with clipnorm 1/4 (each gradient clipped by its
   own norm);
6. ArcFace: an embedding network Dense(6->8, tanh) -> Dense(8->4) and a
   class-centre matrix [4, 3], both l2-normalised, their cosines clipped
   to [-1 + 1e-7, 1 - 1e-7], acos, the additive angular margin 1/2 on the
   true class (one_hot), scale 8, sparse softmax cross-entropy; Adam;
7. SimSiam: an encoder Dense(6->8, relu) -> Dense(8->4) and a predictor
   Dense(4->8, relu) -> Dense(8->4) over two views; the symmetric
   negative cosine similarity (Keras's CosineSimilarity loss) of each
   view's prediction against the other view's stop_gradient projection;
   SGD with momentum 7/8;
8. a capsule network: primary capsules from a Dense(6->12) reshaped to 4
   capsules of 3, squashed; predictions u_hat = einsum("bid,ijde->bije")
   for 3 class capsules of 2; three iterations of dynamic routing (the
   routing logits' softmax over the class capsules, agreement updates;
   u_hat under stop_gradient but in the last iteration); the margin loss
   on the capsules' lengths (m+ 0.9, m- 0.1, lambda 1/2); Adam.

Run: /work/refvenv/bin/python new_user_models7.py > ../data/new_user_models7.txt

Every weight and input is `fill(shape, k)`, 0.5 sin(0.7 i + k) over the
row-major index i, times a scale written the same in the Rust tests.
Hyper-parameters are dyadic (Keras turns some into float32 tensors).
"""
import keras
import numpy as np
import tensorflow as tf

from new_user_common import F64, adam, emit, fill, set_weights, train


def dense(inp, units, activation=None):
    layer = keras.layers.Dense(units, activation=activation, dtype=F64)
    layer.build((None, inp))
    return layer


def mlp(layers, x):
    for l in layers:
        x = l(x)
    return x


def emit_step(name, s, outs, grads):
    for n, t in outs:
        emit(f"{name}{s}_{n}", t)
    for j, g in enumerate(grads):
        emit(f"{name}{s}_grad{j}", g)


print(f"# written by tests/reference/new_user_models7.py (TensorFlow {tf.__version__}, Keras {keras.__version__})", flush=True)

# 1. WGAN-GP: 6 real points in 2-D, noise of 3.
w_gen = [dense(3, 8, "relu"), dense(8, 2)]
w_critic = [dense(2, 8, keras.layers.LeakyReLU(negative_slope=0.25)), dense(8, 8, "tanh"), dense(8, 1)]
c_vars = [v for l in w_critic for v in l.trainable_variables]
g_vars = [v for l in w_gen for v in l.trainable_variables]
set_weights(c_vars, 700.0)
set_weights(g_vars, 710.0)
w_real = tf.constant(fill((6, 2), 0.9, 2.0))
w_z = [tf.constant(fill((6, 3), 0.4 + k, 2.0)) for k in range(3)]
# the interpolation weights, in [0, 1] (a user's tf.random.uniform, fixed)
w_eps = [tf.constant(fill((6, 1), 1.3 + k) + 0.5) for k in range(2)]
c_opt = keras.optimizers.Adam(learning_rate=lambda: 2.0**-7, beta_1=0.0, beta_2=0.875, epsilon=2.0**-20)
g_opt = keras.optimizers.RMSprop(learning_rate=lambda: 2.0**-7, rho=0.875, epsilon=2.0**-20)


def critic_step(z, eps):
    with tf.GradientTape() as tape:
        fake = mlp(w_gen, z)
        x_hat = eps * w_real + (1.0 - eps) * fake
        with tf.GradientTape() as gp_tape:
            gp_tape.watch(x_hat)
            d_hat = mlp(w_critic, x_hat)
        g = gp_tape.gradient(d_hat, x_hat)
        norm = tf.sqrt(tf.reduce_sum(tf.square(g), axis=1))
        gp = tf.reduce_mean(tf.square(norm - 1.0))
        wd = tf.reduce_mean(mlp(w_critic, fake)) - tf.reduce_mean(mlp(w_critic, w_real))
        loss = wd + 10.0 * gp
    grads = tape.gradient(loss, c_vars)
    c_opt.apply_gradients(zip(grads, c_vars))
    return [("norm", norm), ("gp", gp), ("loss", loss)], grads


for s in range(1, 3):
    outs = []
    for k in range(2):
        o, c_grads = critic_step(w_z[k], w_eps[k])
        outs += [(f"c{k}{n}", t) for n, t in o]
    with tf.GradientTape() as tape:
        g_loss = -tf.reduce_mean(mlp(w_critic, mlp(w_gen, w_z[2])))
    g_grads = tape.gradient(g_loss, g_vars)
    g_opt.apply_gradients(zip(g_grads, g_vars))
    emit_step("wgan", s, outs + [("gloss", g_loss)], list(c_grads) + list(g_grads))
for j, v in enumerate(c_vars + g_vars):
    emit(f"wgan_weight{j}", v)

# 2. PGD adversarial training: 6 examples of 4 features, 3 classes.
p_net = [dense(4, 8, "tanh"), dense(8, 3)]
p_vars = [v for l in p_net for v in l.trainable_variables]
set_weights(p_vars, 720.0)
p_x = tf.constant(fill((6, 4), 0.2, 1.5))
p_y = tf.constant([0, 2, 1, 1, 0, 2], dtype=tf.int64)
p_ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def pgd():
    x_adv = p_x
    for _ in range(3):
        with tf.GradientTape() as t:
            t.watch(x_adv)
            l = p_ce(p_y, mlp(p_net, x_adv))
        g = t.gradient(l, x_adv)
        x_adv = x_adv + 0.125 * tf.sign(g)
        x_adv = tf.clip_by_value(x_adv, p_x - 0.25, p_x + 0.25)
        x_adv = tf.clip_by_value(x_adv, -1.0, 1.0)
    clean = p_ce(p_y, mlp(p_net, p_x))
    adv = p_ce(p_y, mlp(p_net, x_adv))
    return [("xadv", x_adv), ("clean", clean), ("adv", adv), ("loss", 0.5 * clean + 0.5 * adv)]


train("pgd", pgd, p_vars, keras.optimizers.SGD(learning_rate=lambda: 0.125, momentum=0.875, nesterov=True))

# 3. NT-Xent: 4 examples of 6 features, two views.
n_net = [dense(6, 8, "relu"), dense(8, 4)]
n_vars = [v for l in n_net for v in l.trainable_variables]
set_weights(n_vars, 730.0)
n_x1 = tf.constant(fill((4, 6), 0.5, 2.0))
n_x2 = n_x1 + tf.constant(fill((4, 6), 2.1, 0.5))
n_labels = tf.constant([4, 5, 6, 7, 0, 1, 2, 3], dtype=tf.int64)


def ntxent():
    z = tf.math.l2_normalize(tf.concat([mlp(n_net, n_x1), mlp(n_net, n_x2)], axis=0), axis=1)
    sim = tf.matmul(z, z, transpose_b=True) / 0.5
    logits = sim - 1e9 * tf.eye(8, dtype=F64)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(n_labels, logits)
    return [("sim", sim), ("loss", loss)]


train("ntxent", ntxent, n_vars, adam())

# 4. PointNet: 2 clouds of 6 points; cloud 0 repeats its point 3 as point
# 5, cloud 1 has 4 points, padded by repeating its last (points 4 and 5):
# point 3 gives the maximum of most channels.
t_conv = keras.layers.Conv1D(8, 1, activation="relu", dtype=F64)
t_conv.build((None, 6, 3))
t_layers = [t_conv, dense(8, 16, "relu"), dense(16, 8, "relu"), dense(8, 3)]
t_vars = [v for l in t_layers for v in l.trainable_variables]
set_weights(t_vars, 740.0)
pts = fill((2, 6, 3), 0.6, 2.0)
pts[0, 5] = pts[0, 3]
pts[1, 4] = pts[1, 3]
pts[1, 5] = pts[1, 3]
t_pts = tf.constant(pts)
t_y = tf.constant([1, 2], dtype=tf.int64)


def pointnet():
    # the points' saliency (the loss's gradient w.r.t. the points) shows
    # how the max's gradient is shared among tied points: the weights'
    # gradients do not (tied points are equal, whichever gets it)
    with tf.GradientTape() as t:
        t.watch(t_pts)
        h = t_layers[1](t_layers[0](t_pts))
        g = keras.layers.GlobalMaxPooling1D(dtype=F64)(h)
        logits = t_layers[3](t_layers[2](g))
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(t_y, logits)
    saliency = t.gradient(loss, t_pts)
    return [("global", g), ("logits", logits), ("saliency", saliency), ("loss", loss)]


train("pointnet", pointnet, t_vars, adam())

# 5. TCN: 2 series of 10 steps, 2 features; the target is the next value
# of feature 0.
c_res = keras.layers.Conv1D(4, 1, dtype=F64)
c_res.build((None, 10, 2))
c_head = dense(4, 1)


def wn_params(k, c_in, c_out):
    return [tf.Variable(np.zeros((k, c_in, c_out))), tf.Variable(np.zeros(c_out)), tf.Variable(np.zeros(c_out))]


# per block: v1, g1, b1, v2, g2, b2 (then the first block's residual conv)
c_blocks = [wn_params(3, 2, 4) + wn_params(3, 4, 4), wn_params(3, 4, 4) + wn_params(3, 4, 4)]
c_vars = c_blocks[0] + c_res.trainable_variables + c_blocks[1] + c_head.trainable_variables
set_weights(c_vars, 755.0, (1, 4, 9, 12))
series = fill((2, 11, 2), 0.3, 2.0)
c_x = tf.constant(series[:, :10])
c_y = tf.constant(series[:, 1:, :1])


def wn_conv(x, v, g, b, d):
    w = g * tf.math.l2_normalize(v, axis=[0, 1])
    x = tf.pad(x, [[0, 0], [2 * d, 0], [0, 0]])
    return tf.nn.convolution(x, w, padding="VALID", dilations=d) + b


def tcn():
    h = c_x
    for j, (p, d) in enumerate(zip(c_blocks, (1, 2))):
        o = tf.nn.relu(wn_conv(h, *p[:3], d))
        o = tf.nn.relu(wn_conv(o, *p[3:], d))
        h = tf.nn.relu(o + (c_res(h) if j == 0 else h))
    pred = c_head(h)
    loss = keras.losses.MeanSquaredError()(c_y, pred)
    return [("pred", pred), ("loss", loss)]


train("tcn", tcn, c_vars, keras.optimizers.Adam(learning_rate=lambda: 2.0**-7, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=2.0**-20, clipnorm=0.25))

# 6. ArcFace: 6 examples of 6 features, 3 classes, embeddings of 4.
a_net = [dense(6, 8, "tanh"), dense(8, 4)]
a_centres = tf.Variable(np.zeros((4, 3)))
a_vars = [v for l in a_net for v in l.trainable_variables] + [a_centres]
set_weights(a_vars, 760.0)
a_x = tf.constant(fill((6, 6), 0.45, 2.0))
a_y = tf.constant([0, 1, 2, 2, 1, 0], dtype=tf.int64)


def arcface():
    e = tf.math.l2_normalize(mlp(a_net, a_x), axis=1)
    w = tf.math.l2_normalize(a_centres, axis=0)
    cos = tf.clip_by_value(tf.matmul(e, w), -1.0 + 1e-7, 1.0 - 1e-7)
    theta = tf.acos(cos)
    onehot = tf.one_hot(a_y, 3, dtype=F64)
    logits = 8.0 * (onehot * tf.cos(theta + 0.5) + (1.0 - onehot) * cos)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(a_y, logits)
    return [("theta", theta), ("logits", logits), ("loss", loss)]


train("arcface", arcface, a_vars, adam())

# 7. SimSiam: 4 examples, two views.
s_enc = [dense(6, 8, "relu"), dense(8, 4)]
s_pred = [dense(4, 8, "relu"), dense(8, 4)]
s_vars = [v for l in s_enc + s_pred for v in l.trainable_variables]
set_weights(s_vars, 770.0)
s_x1 = tf.constant(fill((4, 6), 0.85, 2.0))
s_x2 = s_x1 + tf.constant(fill((4, 6), 1.9, 0.5))
s_cos = keras.losses.CosineSimilarity()


def simsiam():
    z1, z2 = mlp(s_enc, s_x1), mlp(s_enc, s_x2)
    p1, p2 = mlp(s_pred, z1), mlp(s_pred, z2)
    loss = 0.5 * s_cos(tf.stop_gradient(z2), p1) + 0.5 * s_cos(tf.stop_gradient(z1), p2)
    return [("p1", p1), ("p2", p2), ("loss", loss)]


train("simsiam", simsiam, s_vars, keras.optimizers.SGD(learning_rate=lambda: 0.125, momentum=0.875))

# 8. Capsule network: 4 examples of 6 features, 3 classes.
k_primary = dense(6, 12)
k_W = tf.Variable(np.zeros((4, 3, 3, 2)))
k_vars = k_primary.trainable_variables + [k_W]
set_weights(k_vars, 780.0)
k_x = tf.constant(fill((4, 6), 0.15, 2.0))
k_y = tf.constant([2, 0, 1, 2], dtype=tf.int64)


def squash(s, axis=-1):
    sq = tf.reduce_sum(tf.square(s), axis=axis, keepdims=True)
    return sq / (1.0 + sq) * s / tf.sqrt(sq + 1e-7)


def capsule():
    u = squash(tf.reshape(k_primary(k_x), (4, 4, 3)))
    u_hat = tf.einsum("bid,ijde->bije", u, k_W)
    u_stop = tf.stop_gradient(u_hat)
    logits = tf.zeros((4, 4, 3), dtype=F64)
    for r in range(3):
        c = tf.nn.softmax(logits, axis=2)
        pred = u_hat if r == 2 else u_stop
        v = squash(tf.reduce_sum(c[..., None] * pred, axis=1))
        if r < 2:
            logits = logits + tf.reduce_sum(u_stop * v[:, None], axis=-1)
    lengths = tf.sqrt(tf.reduce_sum(tf.square(v), axis=-1) + 1e-7)
    t = tf.one_hot(k_y, 3, dtype=F64)
    margin = t * tf.square(tf.nn.relu(0.9 - lengths)) + 0.5 * (1.0 - t) * tf.square(tf.nn.relu(lengths - 0.1))
    loss = tf.reduce_mean(tf.reduce_sum(margin, axis=1))
    return [("c", c), ("lengths", lengths), ("loss", loss)]


train("capsule", capsule, k_vars, adam())
