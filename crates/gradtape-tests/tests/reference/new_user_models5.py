"""Reference numbers for tests/nn/new_user_{gpt,seq2seq_attn,meta,mobile}.rs:
a fifth batch of models a new user would write, computed eagerly by
TensorFlow 2.21 / Keras 3 in float64 (the mixed-precision model in float16
with float32 master weights):

1. a small GPT: token embedding and learned positions, one pre-norm block
   (LayerNormalization, MultiHeadAttention with use_causal_mask, an exact
   GELU MLP), a final LayerNormalization and the output projection tied to
   the token embedding; categorical cross-entropy from logits with label
   smoothing 1/8; the gradients clipped by tf.clip_by_global_norm(., 1/2);
   AdamW (weight decay 1/8) under Keras's CosineDecay formula with a
   linear warm-up (computed in float64 here, as a callable);
2. a seq2seq encoder-decoder: a GRU encoder over a padded source (the
   embedding's mask_zero mask), a GRU decoder started from the encoder's
   state with teacher forcing, Keras's Attention (Luong dot scores) over
   the encoder's states with the source mask, a tanh combination layer and
   logits; the cross-entropy masked on padded targets; Adam;
3. MAML: a 1-8-1 tanh MLP on two sine-regression tasks, one inner SGD
   step (lr 1/4) per task under the outer tape (second order); Adam;
4. a Hamiltonian neural network: H(q, p) a 2-16-1 tanh MLP, the vector
   field (dH/dp, -dH/dq) from an inner tape watching the inputs, MSE to a
   spring's field; Adam;
5. a MobileNet-style block on NHWC images: Conv2D 3x3 stride 2 -> BN ->
   ReLU6 -> DepthwiseConv2D 3x3 -> BN -> ReLU6 -> Conv2D 1x1 -> BN ->
   ReLU6 -> GlobalAveragePooling2D -> Dense; BatchNormalization in training
   mode (momentum 7/8; the moving statistics emitted); SGD with momentum;
6. knowledge distillation: a frozen teacher, a student, 1/4 hard-label
   sparse cross-entropy plus 3/4 T^2 KLDivergence between the softmaxes at
   temperature T = 2; Adam;
7. a triplet-loss embedding network: l2-normalised embeddings, squared
   distances, batch-hard mining (the farthest positive and the nearest
   negative of each anchor), margin 1; SGD (lr 1/16);
8. mixed precision: Dense(4->8, relu) -> Dense(8->3) with float32 master
   weights computed in float16, the loss in float32, Keras's
   LossScaleOptimizer (initial scale 2^20, growth every 2 finite steps)
   around SGD with global_clipnorm: the first steps overflow and are
   skipped, halving the scale; the applied ones are clipped unscaled.

Run: /work/refvenv/bin/python new_user_models5.py > ../data/new_user_models5.txt

Every weight and input is `fill(shape, k)`, 0.5 sin(0.7 i + k) over the
row-major index i, times a scale written the same in the Rust tests.
Hyper-parameters are dyadic (Keras turns some into float32 tensors).
"""
import math

import keras
import numpy as np
import tensorflow as tf

from new_user_common import F64, adam, emit, fill, set_weights, train


def dense(inp, units, activation=None, use_bias=True, dtype=F64):
    layer = keras.layers.Dense(units, activation=activation, use_bias=use_bias, dtype=dtype)
    layer.build((None, inp))
    return layer


def mlp(layers, x):
    for l in layers:
        x = l(x)
    return x


print(f"# written by tests/reference/new_user_models5.py (TensorFlow {tf.__version__}, Keras {keras.__version__})", flush=True)

# 1. GPT: vocabulary 11, context 6, width 8, 2 heads of 4, MLP 16, batch 2.
V, T, D = 11, 6, 8
g_tok = keras.layers.Embedding(V, D, dtype=F64)
g_tok.build((None, T))
g_pos = tf.Variable(np.zeros((T, D)), dtype=F64)
g_ln1 = keras.layers.LayerNormalization(epsilon=1e-5, dtype=F64)
g_ln1.build((None, T, D))
g_mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, dtype=F64)
g_mha.build((None, T, D), (None, T, D))
g_ln2 = keras.layers.LayerNormalization(epsilon=1e-5, dtype=F64)
g_ln2.build((None, T, D))
# The GELU is written out, as in new_user_models3.py: TensorFlow 2.21's
# float64 tf.nn.gelu (Keras's "gelu") is off by up to 5e-9 from
# 0.5 x erfc(-x / sqrt 2), too far for a 1e-12 comparison.
g_fc1 = dense(D, 16, lambda x: 0.5 * x * tf.math.erfc(-x * 0.7071067811865476))
g_fc2 = dense(16, D)
g_lnf = keras.layers.LayerNormalization(epsilon=1e-5, dtype=F64)
g_lnf.build((None, T, D))
g_vars = g_tok.trainable_variables + [g_pos]
for l in (g_ln1, g_mha, g_ln2, g_fc1, g_fc2, g_lnf):
    g_vars += l.trainable_variables
print("# gpt weights: " + ", ".join(getattr(v, "path", "pos") for v in g_vars))
set_weights(g_vars, 300.0, (2, 12, 18))
g_ids = tf.constant([[3, 7, 1, 9, 4, 2], [5, 0, 10, 6, 8, 1]], dtype=tf.int64)
g_next = tf.constant([[7, 1, 9, 4, 2, 6], [0, 10, 6, 8, 1, 3]], dtype=tf.int64)


def gpt():
    h = g_tok(g_ids) + g_pos
    a = g_ln1(h)
    h = h + g_mha(a, a, use_causal_mask=True)
    h = h + g_fc2(g_fc1(g_ln2(h)))
    logits = tf.matmul(g_lnf(h), g_tok.embeddings, transpose_b=True)
    loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.125)(tf.one_hot(g_next, V, dtype=F64), logits)
    return [("logits", logits), ("loss", loss)]


def warmup_cosine(step, initial=2.0**-7, target=2.0**-5, warmup=2, decay=2):
    """Keras's CosineDecay(initial, decay, warmup_target=target, warmup_steps=warmup)."""
    if step < warmup:
        return (target - initial) * step / warmup + initial
    s = min(step - warmup, decay)
    return target * 0.5 * (1.0 + math.cos(math.pi * s / decay))


g_opt = keras.optimizers.AdamW(weight_decay=0.125, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=2.0**-20)
g_opt.learning_rate = lambda: warmup_cosine(int(g_opt.iterations.numpy()))
g_norms = []


def clip(grads, outs):
    clipped, norm = tf.clip_by_global_norm(grads, 0.5)
    g_norms.append(norm)
    return clipped


train("gpt", gpt, g_vars, g_opt, steps=3, grads_fn=clip)
for s, n in enumerate(g_norms, 1):
    emit(f"gpt{s}_norm", n)

# 2. Seq2seq with dot attention: source vocabulary 9 (0 pads), target 8
# (0 pads, 1 starts), embeddings 4, GRU units 6, batch 2.
s_src_emb = keras.layers.Embedding(9, 4, mask_zero=True, dtype=F64)
s_enc = keras.layers.GRU(6, return_sequences=True, return_state=True, dtype=F64)
s_tgt_emb = keras.layers.Embedding(8, 4, dtype=F64)
s_dec = keras.layers.GRU(6, return_sequences=True, dtype=F64)
s_att = keras.layers.Attention(dtype=F64)
s_comb = dense(12, 6, "tanh")
s_out = dense(6, 8)
s_src = tf.constant([[3, 5, 2, 7, 0], [4, 1, 6, 0, 0]], dtype=tf.int64)
s_tin = tf.constant([[1, 3, 4, 5], [1, 6, 2, 0]], dtype=tf.int64)
s_tout = tf.constant([[3, 4, 5, 2], [6, 2, 7, 0]], dtype=tf.int64)


def seq2seq():
    src_mask = s_src_emb.compute_mask(s_src)
    enc_seq, enc_h = s_enc(s_src_emb(s_src), mask=src_mask)
    dec_seq = s_dec(s_tgt_emb(s_tin), initial_state=enc_h)
    ctx = s_att([dec_seq, enc_seq], mask=[None, src_mask])
    logits = s_out(s_comb(tf.concat([ctx, dec_seq], -1)))
    per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(s_tout, logits)
    w = tf.cast(tf.not_equal(s_tout, 0), F64)
    loss = tf.reduce_sum(per_token * w) / tf.reduce_sum(w)
    return [("enc_h", enc_h), ("ctx", ctx), ("logits", logits), ("loss", loss)]


seq2seq()  # builds the layers
s_vars = []
for l in (s_src_emb, s_enc, s_tgt_emb, s_dec, s_comb, s_out):
    s_vars += l.trainable_variables
print("# s2s weights: " + ", ".join(v.path for v in s_vars))
set_weights(s_vars, 310.0)
train("s2s", seq2seq, s_vars, adam())

# 3. MAML: tasks y = a sin(x + b), support and query sets of 5 points.
m_vars = [tf.Variable(np.zeros(s), dtype=F64) for s in ((1, 8), (8,), (8, 1), (1,))]
set_weights(m_vars, 320.0)
m_xs = tf.constant(fill((2, 5, 1), 0.2, 6.0))
m_xq = tf.constant(fill((2, 5, 1), 1.3, 6.0))
m_a = np.array([1.0, 0.5]).reshape(2, 1, 1)
m_b = np.array([0.25, 1.5]).reshape(2, 1, 1)
m_ys = tf.constant(m_a * np.sin(m_xs.numpy() + m_b))
m_yq = tf.constant(m_a * np.sin(m_xq.numpy() + m_b))


def net(w, x):
    return tf.matmul(tf.tanh(tf.matmul(x, w[0]) + w[1]), w[2]) + w[3]


def maml():
    inner_losses, outer = [], []
    for t in range(2):
        with tf.GradientTape() as inner:
            l = tf.reduce_mean(tf.square(net(m_vars, m_xs[t]) - m_ys[t]))
        g = inner.gradient(l, m_vars)
        fast = [v - 0.25 * gi for v, gi in zip(m_vars, g)]
        inner_losses.append(l)
        outer.append(tf.reduce_mean(tf.square(net(fast, m_xq[t]) - m_yq[t])))
    return [("inner", tf.stack(inner_losses)), ("outer", tf.stack(outer)), ("loss", tf.add_n(outer) / 2.0)]


train("maml", maml, m_vars, adam())

# 4. HNN: states (q, p) [8, 2], the spring's field (p, -q).
h_net = [dense(2, 16, "tanh"), dense(16, 1)]
h_vars = [v for l in h_net for v in l.trainable_variables]
set_weights(h_vars, 330.0)
h_x = tf.constant(fill((8, 2), 0.6, 3.0))
h_dx = tf.stack([h_x[:, 1], -h_x[:, 0]], axis=1)


def hnn():
    with tf.GradientTape() as inner:
        inner.watch(h_x)
        H = tf.reduce_sum(mlp(h_net, h_x))
    dH = inner.gradient(H, h_x)
    field = tf.stack([dH[:, 1], -dH[:, 0]], axis=1)
    return [("field", field), ("loss", tf.reduce_mean(tf.square(field - h_dx)))]


train("hnn", hnn, h_vars, adam())

# 5. MobileNet block: images [2, 6, 6, 3], labels [2].
def bn():
    return keras.layers.BatchNormalization(momentum=0.875, epsilon=1e-3, dtype=F64)


b_conv = keras.layers.Conv2D(8, 3, strides=2, padding="same", use_bias=False, dtype=F64)
b_bn1, b_bn2, b_bn3 = bn(), bn(), bn()
b_dw = keras.layers.DepthwiseConv2D(3, padding="same", use_bias=False, dtype=F64)
b_pw = keras.layers.Conv2D(8, 1, use_bias=False, dtype=F64)
b_head = dense(8, 3)
b_img = tf.constant(fill((2, 6, 6, 3), 0.8, 2.0))
b_y = tf.constant([2, 0], dtype=tf.int64)
b_layers = [b_conv, b_bn1, b_dw, b_bn2, b_pw, b_bn3]


def mobile():
    h = b_img
    for l in b_layers:
        h = l(h, training=True) if isinstance(l, keras.layers.BatchNormalization) else l(h)
        if isinstance(l, keras.layers.BatchNormalization):
            h = tf.nn.relu6(h)
    logits = b_head(tf.reduce_mean(h, axis=[1, 2]))
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(b_y, logits))
    return [("logits", logits), ("loss", loss)]


for l in b_layers:
    l.build((None, 3, 3, 8) if l is not b_conv else (None, 6, 6, 3))
b_vars = [v for l in b_layers + [b_head] for v in l.trainable_variables]
b_moving = [v for l in (b_bn1, b_bn2, b_bn3) for v in l.non_trainable_variables]
print("# mobile weights: " + ", ".join(v.path for v in b_vars))
print("# mobile moving: " + ", ".join(v.path for v in b_moving))
set_weights(b_vars, 340.0, (1, 4, 7))
train("mobile", mobile, b_vars, keras.optimizers.SGD(learning_rate=lambda: 0.125, momentum=0.875))
for j, v in enumerate(b_moving):
    emit(f"mobile_moving{j}", v)

# 6. Distillation: teacher 6-12 relu-4 (frozen), student 6-5 tanh-4.
d_teacher = [dense(6, 12, "relu"), dense(12, 4)]
d_student = [dense(6, 5, "tanh"), dense(5, 4)]
set_weights([v for l in d_teacher for v in l.trainable_variables], 350.0)
d_vars = [v for l in d_student for v in l.trainable_variables]
set_weights(d_vars, 360.0)
d_x = tf.constant(fill((6, 6), 0.1, 2.0))
d_y = tf.constant([1, 3, 0, 2, 1, 0], dtype=tf.int64)


def distill():
    t_logits = tf.stop_gradient(mlp(d_teacher, d_x))
    s_logits = mlp(d_student, d_x)
    soft = keras.losses.KLDivergence()(tf.nn.softmax(t_logits / 2.0), tf.nn.softmax(s_logits / 2.0))
    hard = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(d_y, s_logits)
    loss = 0.25 * hard + 0.75 * 4.0 * soft
    return [("soft", soft), ("hard", hard), ("loss", loss)]


train("distill", distill, d_vars, adam())

# 7. Triplet loss, batch-hard: 8 examples of 3 classes, embeddings of 4.
t_net = [dense(6, 8, "tanh"), dense(8, 4)]
t_vars = [v for l in t_net for v in l.trainable_variables]
set_weights(t_vars, 370.0)
# row i is fill((6,), 0.7 i, 3) (the rows of one fill((8, 6)) repeat
# nearly every third row)
t_x = tf.constant(np.stack([fill((6,), 0.7 * i, 3.0) for i in range(8)]))
t_y = tf.constant([0, 0, 1, 1, 2, 2, 0, 1], dtype=tf.int64)


def triplet():
    e = tf.math.l2_normalize(mlp(t_net, t_x), axis=1)
    dot = tf.matmul(e, e, transpose_b=True)
    sq = tf.linalg.diag_part(dot)
    d = tf.maximum(sq[:, None] - 2.0 * dot + sq[None, :], 0.0)
    same = tf.equal(t_y[:, None], t_y[None, :])
    pos_mask = tf.cast(tf.logical_and(same, tf.logical_not(tf.eye(8, dtype=tf.bool))), F64)
    neg_mask = tf.cast(tf.logical_not(same), F64)
    hardest_pos = tf.reduce_max(d * pos_mask, axis=1)
    hardest_neg = tf.reduce_min(d + tf.reduce_max(d, axis=1, keepdims=True) * (1.0 - neg_mask), axis=1)
    loss = tf.reduce_mean(tf.nn.relu(hardest_pos - hardest_neg + 1.0))
    return [("pos", hardest_pos), ("neg", hardest_neg), ("loss", loss)]


train("triplet", triplet, t_vars, keras.optimizers.SGD(learning_rate=lambda: 0.0625))

# 8. Mixed precision: float32 master weights, float16 compute, float32
# loss; LossScaleOptimizer(SGD(1/8, global_clipnorm 1/2: the unscaled
# gradients are clipped), initial scale 2^20, growth every 2 finite
# steps), five steps.
x_net = [dense(4, 8, "relu", dtype="float32"), dense(8, 3, dtype="float32")]
x_vars = [v for l in x_net for v in l.trainable_variables]
set_weights(x_vars, 380.0)
x_x = tf.constant(fill((4, 4), 0.7, 2.0), dtype=tf.float16)
x_y = tf.constant([0, 2, 1, 2], dtype=tf.int64)
x_opt = keras.optimizers.LossScaleOptimizer(
    keras.optimizers.SGD(learning_rate=0.125, global_clipnorm=0.5), initial_scale=2.0**20, dynamic_growth_steps=2
)
x_opt.build(x_vars)
for s in range(1, 6):
    with tf.GradientTape() as tape:
        w = [tf.cast(v, tf.float16) for v in x_vars]
        h = tf.nn.relu(tf.matmul(x_x, w[0]) + w[1])
        logits = tf.matmul(h, w[2]) + w[3]
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(x_y, tf.cast(logits, tf.float32)))
        scaled = x_opt.scale_loss(loss)
    grads = tape.gradient(scaled, x_vars)
    finite = all(bool(tf.reduce_all(tf.math.is_finite(g))) for g in grads)
    x_opt.apply_gradients(zip(grads, x_vars))
    emit(f"mixed{s}_loss", loss)
    emit(f"mixed{s}_finite", tf.constant(1.0 if finite else 0.0))
    emit(f"mixed{s}_scale", x_opt.dynamic_scale)
for j, v in enumerate(x_vars):
    emit(f"mixed_weight{j}", v)
