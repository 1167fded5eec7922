"""Reference numbers for tests/nn/new_user_models.rs: four models a new user
would write (a physics-informed network with third-order nested tapes, a
VAE training step, a GAN step, a ResNet-style block with batch
normalisation), computed eagerly by TensorFlow 2.21 / Keras 3 in float64.

Run: /work/refvenv/bin/python new_user_models.py > ../data/new_user_models.txt

Every weight and input is `fill(shape, k)`, 0.5 sin(0.7 i + k) over the
row-major index i (Python's math.sin, the C library's, as Rust's f64::sin),
times a scale written the same in the Rust test. Hyper-parameters are
dyadic: Keras turns some of them into float32 tensors before the float64
update, so other values would carry float32 rounding.
"""
import math

import keras
import numpy as np
import tensorflow as tf

from new_user_common import F64, adam, emit, fill, set_weights


def sgd(lr):
    return keras.optimizers.SGD(learning_rate=lambda: lr, momentum=0.875)


print(f"# written by tests/reference/new_user_models.py (TensorFlow {tf.__version__}, Keras {keras.__version__})")

# 1. Physics-informed network: u(x, y) = sin(tanh(X W1 + b1) W2 + b2) W3 + b3,
# residual r = u_xx + u_yy + sin(pi x) sin(pi y), loss = mean(r^2).
PINN_SHAPES = [(2, 8), (8,), (8, 8), (8,), (8, 1), (1,)]
pinn_w = [tf.Variable(fill(s, 1.0 + j, 3.0 if j == 0 else 1.0)) for j, s in enumerate(PINN_SHAPES)]


def pinn(X):
    W1, b1, W2, b2, W3, b3 = pinn_w
    with tf.GradientTape() as outer:
        with tf.GradientTape(persistent=True) as t1:
            t1.watch(X)
            with tf.GradientTape() as t2:
                t2.watch(X)
                u = tf.sin(tf.tanh(X @ W1 + b1) @ W2 + b2) @ W3 + b3
            g = t2.gradient(u, X)
            ux, uy = g[:, 0:1], g[:, 1:2]
        uxx = t1.gradient(ux, X)[:, 0:1]
        uyy = t1.gradient(uy, X)[:, 1:2]
        f = tf.sin(math.pi * X[:, 0:1]) * tf.sin(math.pi * X[:, 1:2])
        r = uxx + uyy + f
        loss = tf.reduce_mean(tf.square(r))
    grads = outer.gradient(loss, pinn_w)
    return u, r, loss, grads


for call, k in [(1, 0.3), (2, 2.25)]:
    u, r, loss, grads = pinn(tf.constant(fill((16, 2), k, 2.0)))
    emit(f"pinn{call}_u", u)
    emit(f"pinn{call}_r", r)
    emit(f"pinn{call}_loss", loss)
    for j, g in enumerate(grads):
        emit(f"pinn{call}_grad{j}", g)


# The same with the two inner tapes in a tf.function and the outer tape
# around its call: the call's gradient covers all its outputs (u depends on
# b3), so b3 gets zeros here, not None.
@tf.function
def pinn_residual(X):
    W1, b1, W2, b2, W3, b3 = pinn_w
    with tf.GradientTape(persistent=True) as t1:
        t1.watch(X)
        with tf.GradientTape() as t2:
            t2.watch(X)
            u = tf.sin(tf.tanh(X @ W1 + b1) @ W2 + b2) @ W3 + b3
        g = t2.gradient(u, X)
        ux, uy = g[:, 0:1], g[:, 1:2]
    uxx = t1.gradient(ux, X)[:, 0:1]
    uyy = t1.gradient(uy, X)[:, 1:2]
    r = uxx + uyy + tf.sin(math.pi * X[:, 0:1]) * tf.sin(math.pi * X[:, 1:2])
    return u, r, tf.reduce_mean(tf.square(r))


for call, k in [(1, 0.3), (2, 2.25)]:
    with tf.GradientTape() as outer:
        u, r, loss = pinn_residual(tf.constant(fill((16, 2), k, 2.0)))
    for j, g in enumerate(outer.gradient(loss, pinn_w)):
        emit(f"pinn{call}_call_grad{j}", g)


def dense(inp, units, activation=None):
    layer = keras.layers.Dense(units, activation=activation, dtype=F64)
    layer.build((None, inp))
    return layer


# 2. VAE: encoder Dense(8->6, tanh) -> mean, log-variance (Dense 6->2 each),
# z = mean + exp(logvar / 2) eps, decoder Dense(2->6, tanh) -> Dense(6->8)
# logits; loss = mean over the batch of (summed sigmoid cross-entropy + KL).
enc, mu_l, lv_l = dense(8, 6, "tanh"), dense(6, 2), dense(6, 2)
dec1, dec2 = dense(2, 6, "tanh"), dense(6, 8)
vae_layers = [enc, mu_l, lv_l, dec1, dec2]
vae_vars = [v for layer in vae_layers for v in layer.trainable_variables]
set_weights(vae_vars, 10.0)
vae_x = tf.constant(0.5 + fill((6, 8), 0.2, 0.8))
vae_eps = tf.constant(fill((6, 2), 0.9, 2.0))
vae_opt = adam()
for step in (1, 2):
    with tf.GradientTape() as tape:
        h = enc(vae_x)
        mu, lv = mu_l(h), lv_l(h)
        z = mu + tf.exp(0.5 * lv) * vae_eps
        logits = dec2(dec1(z))
        rec = tf.reduce_mean(
            tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=vae_x, logits=logits), axis=1)
        )
        kl = tf.reduce_mean(-0.5 * tf.reduce_sum(1.0 + lv - tf.square(mu) - tf.exp(lv), axis=1))
        loss = rec + kl
    grads = tape.gradient(loss, vae_vars)
    vae_opt.apply_gradients(zip(grads, vae_vars))
    emit(f"vae{step}_rec", rec)
    emit(f"vae{step}_kl", kl)
    emit(f"vae{step}_loss", loss)
    for j, g in enumerate(grads):
        emit(f"vae{step}_grad{j}", g)
for j, v in enumerate(vae_vars):
    emit(f"vae_weight{j}", v)

# 3. GAN: generator Dense(3->6, tanh) -> Dense(6->4), discriminator
# Dense(4->6, tanh) -> Dense(6->1) logits; two tapes over one step, Adam for
# the generator, SGD with momentum for the discriminator.
gen = [dense(3, 6, "tanh"), dense(6, 4)]
disc = [dense(4, 6, "tanh"), dense(6, 1)]
g_vars = [v for layer in gen for v in layer.trainable_variables]
d_vars = [v for layer in disc for v in layer.trainable_variables]
set_weights(g_vars, 20.0)
set_weights(d_vars, 30.0)
gan_z = tf.constant(fill((8, 3), 0.4, 2.0))
gan_real = tf.constant(fill((8, 4), 1.1, 2.0) + 0.5)
g_opt, d_opt = adam(), sgd(0.125)


def sce_mean(label, logits):
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=label * tf.ones_like(logits), logits=logits))


for step in (1, 2):
    with tf.GradientTape() as gt, tf.GradientTape() as dt:
        fake = gen[1](gen[0](gan_z))
        real_logits = disc[1](disc[0](gan_real))
        fake_logits = disc[1](disc[0](fake))
        d_loss = sce_mean(1.0, real_logits) + sce_mean(0.0, fake_logits)
        g_loss = sce_mean(1.0, fake_logits)
    gg = gt.gradient(g_loss, g_vars)
    dg = dt.gradient(d_loss, d_vars)
    g_opt.apply_gradients(zip(gg, g_vars))
    d_opt.apply_gradients(zip(dg, d_vars))
    emit(f"gan{step}_d_loss", d_loss)
    emit(f"gan{step}_g_loss", g_loss)
    for j, g in enumerate(gg):
        emit(f"gan{step}_g_grad{j}", g)
    for j, g in enumerate(dg):
        emit(f"gan{step}_d_grad{j}", g)
for j, v in enumerate(g_vars):
    emit(f"gan_g_weight{j}", v)
for j, v in enumerate(d_vars):
    emit(f"gan_d_weight{j}", v)

# 4. ResNet-style block: conv 3x3 (same, no bias) -> BN -> relu -> conv 3x3
# -> BN, plus a 1x1 projection of the input, relu, global average pooling,
# Dense(4->3) logits, sparse softmax cross-entropy; SGD with momentum.
def conv(inp, filters, k, use_bias):
    layer = keras.layers.Conv2D(filters, k, padding="same", use_bias=use_bias, dtype=F64)
    layer.build((None, 6, 6, inp))
    return layer


def bn():
    layer = keras.layers.BatchNormalization(momentum=0.875, epsilon=1e-3, dtype=F64)
    layer.build((None, 6, 6, 4))
    return layer


c1, bn1, c2, bn2, proj = conv(3, 4, 3, False), bn(), conv(4, 4, 3, False), bn(), conv(3, 4, 1, True)
head = dense(4, 3)
res_vars = [c1.kernel, bn1.gamma, bn1.beta, c2.kernel, bn2.gamma, bn2.beta, proj.kernel, proj.bias, head.kernel, head.bias]
for j, v in enumerate(res_vars):
    gamma = v is bn1.gamma or v is bn2.gamma
    v.assign(fill(v.shape, 40.0 + j) + (1.0 if gamma else 0.0))
res_x = tf.constant(fill((4, 6, 6, 3), 0.5, 2.0))
res_y = tf.constant([0, 2, 1, 2], dtype=tf.int64)


def resnet(x, training):
    h = tf.nn.relu(bn1(c1(x), training=training))
    h = bn2(c2(h), training=training)
    o = tf.nn.relu(h + proj(x))
    logits = head(tf.reduce_mean(o, axis=[1, 2]))
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=res_y, logits=logits))
    return logits, loss


res_opt = sgd(0.0625)
for step in (1, 2):
    with tf.GradientTape() as tape:
        logits, loss = resnet(res_x, True)
    grads = tape.gradient(loss, res_vars)
    res_opt.apply_gradients(zip(grads, res_vars))
    emit(f"res{step}_logits", logits)
    emit(f"res{step}_loss", loss)
    for j, g in enumerate(grads):
        emit(f"res{step}_grad{j}", g)
    for name, layer in [("bn1", bn1), ("bn2", bn2)]:
        emit(f"res{step}_{name}_moving_mean", layer.moving_mean)
        emit(f"res{step}_{name}_moving_variance", layer.moving_variance)
for j, v in enumerate(res_vars):
    emit(f"res_weight{j}", v)
logits, loss = resnet(res_x, False)
emit("res_inference_logits", logits)
emit("res_inference_loss", loss)
