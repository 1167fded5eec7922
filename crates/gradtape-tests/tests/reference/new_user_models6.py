"""Reference numbers for tests/nn/new_user_{vit,bert,llama,ddpm}.rs:
a sixth batch of models a new user would write, transformers of other
shapes than the GPT of the fifth, computed eagerly by TensorFlow 2.21 /
Keras 3 in float64:

1. a ViT-tiny: 8x8x3 images cut into 4x4 patches by a strided Conv2D, a
   learned class token concatenated in front, learned positions, two
   pre-norm blocks (LayerNormalization, MultiHeadAttention, an exact-GELU
   MLP), a final LayerNormalization and a Dense classifier on the class
   token; sparse cross-entropy; AdamW (weight decay 1/8);
2. a BERT-style masked-LM step: token + segment + position embeddings, an
   embedding LayerNormalization (epsilon 1e-12), two post-norm blocks whose
   attention hides the padded keys (attention_mask [B, 1, T]; the third
   sequence is all padding, whose rows Keras averages every value over),
   an MLM head (Dense + exact GELU + LayerNormalization, the output
   projection tied to the token table plus a bias), the loss on the masked
   positions only (tf.gather(batch_dims=1), sample weights); Adam;
3. a Llama-style decoder written from TensorFlow ops: RMS norms, rotary
   positions (half-split, max wavelength 10000) on the queries and keys,
   grouped-query attention (4 query heads, 2 key/value heads), a SwiGLU
   MLP, no biases, a final RMS norm and an untied head; next-token sparse
   cross-entropy; Adam; then greedy generation from fresh weights by
   recomputing the whole prefix each step (the logits of each step's last
   position and the tokens chosen);
4. a Perceiver-style cross-attention: a learned latent array (4 x 6)
   attends over a longer input (9 positions; tq != tk) with
   MultiHeadAttention(key_dim 4, value_dim 5, output_shape 8), the key
   input (7 features: the input and 2 positional features) unlike the
   value input (5), a value_mask hiding the padding; then a pre-norm latent
   self-attention block of width 8, the mean over the latents and a Dense
   regressor; MSE; Adam. (key_dim 4 and 2 heads of 4 in the block: Keras's
   float64 attention on the TensorFlow backend scales the scores by
   1/sqrt(key_dim) rounded to float32 (`tf.cast` of a Python float makes a
   float32 tensor first), 3.7e-11 relative off the float64 result for
   key_dim 3; 1/2 is exact);
5. a DDPM denoiser step: the sinusoidal encoding (SinePositionEncoding's
   interleaved sin/cos) of the timesteps, x_t = sqrt(abar) x0 +
   sqrt(1 - abar) eps under a linear beta schedule, a SiLU MLP predicting
   eps; MSE; Adam;
6. a left-padded causal decoder: token embedding plus the sinusoidal
   positions, one pre-norm block with MultiHeadAttention(use_causal_mask,
   value_mask of the padding: the first rows of a left-padded sequence see
   no key), a Dense head; the next-token loss weighted by the real targets;
   Adam;
7. one MultiHeadAttention under the attention masks a new user passes as
   Keras takes them: int32 [B, 1, S] key padding, an int64 [T, S] band
   (nonzero keeps), and the bool [B, T, S] of both.

Run: /work/refvenv/bin/python new_user_models6.py > ../data/new_user_models6.txt

Every weight and input is `fill(shape, k)`, 0.5 sin(0.7 i + k) over the
row-major index i, times a scale written the same in the Rust tests.
"""
import math

import keras
import numpy as np
import tensorflow as tf

from new_user_common import F64, adam, emit, fill, set_weights, train


def gelu(x):
    # written out, as in new_user_models3.py: TensorFlow 2.21's float64
    # tf.nn.gelu is off by up to 5e-9 from 0.5 x erfc(-x / sqrt 2)
    return 0.5 * x * tf.math.erfc(-x * 0.7071067811865476)


def dense(inp, units, activation=None, use_bias=True):
    layer = keras.layers.Dense(units, activation=activation, use_bias=use_bias, dtype=F64)
    layer.build((None, inp))
    return layer


def layer_norm(d, eps=1e-5):
    ln = keras.layers.LayerNormalization(epsilon=eps, dtype=F64)
    ln.build((None, d))
    return ln


class Block:
    """gradtape's TransformerBlock written out: pre-norm (GPT-2's) or
    post-norm (BERT's), MultiHeadAttention and an exact-GELU MLP; the
    variables in the block's order (ln_1, attention, ln_2, ff_1, ff_2)."""

    def __init__(self, d, heads, ff, pre=True, eps=1e-5):
        self.pre = pre
        self.ln1 = layer_norm(d, eps)
        self.mha = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=d // heads, dtype=F64)
        self.mha.build((None, 1, d), (None, 1, d))
        self.ln2 = layer_norm(d, eps)
        self.ff1 = dense(d, ff, gelu)
        self.ff2 = dense(ff, d)
        self.vars = []
        for l in (self.ln1, self.mha, self.ln2, self.ff1, self.ff2):
            self.vars += l.trainable_variables

    def __call__(self, x, **mha_args):
        if self.pre:
            a = self.ln1(x)
            x = x + self.mha(a, a, **mha_args)
            return x + self.ff2(self.ff1(self.ln2(x)))
        x = self.ln1(x + self.mha(x, x, **mha_args))
        return self.ln2(x + self.ff2(self.ff1(x)))


# The LayerNorm scales of a Block's 14 variables.
BLOCK_GAMMAS = (0, 10)

print(f"# written by tests/reference/new_user_models6.py (TensorFlow {tf.__version__}, Keras {keras.__version__})", flush=True)

# 1. ViT-tiny: images [2, 8, 8, 3], patches 4x4 -> 4 tokens of 8, a class
# token, 2 blocks of 2 heads, MLP 16, 3 classes.
v_conv = keras.layers.Conv2D(8, 4, strides=4, dtype=F64)
v_conv.build((None, 8, 8, 3))
v_cls = tf.Variable(np.zeros((1, 1, 8)), dtype=F64)
v_pos = tf.Variable(np.zeros((5, 8)), dtype=F64)
v_blocks = [Block(8, 2, 16), Block(8, 2, 16)]
v_lnf = layer_norm(8)
v_head = dense(8, 3)
v_vars = v_conv.trainable_variables + [v_cls, v_pos] + v_blocks[0].vars + v_blocks[1].vars
v_vars += v_lnf.trainable_variables + v_head.trainable_variables
set_weights(v_vars, 400.0, [4 + g for g in BLOCK_GAMMAS] + [18 + g for g in BLOCK_GAMMAS] + [32])
v_img = tf.constant(fill((2, 8, 8, 3), 0.4, 2.0))
v_y = tf.constant([2, 0], dtype=tf.int64)


def vit():
    p = tf.reshape(v_conv(v_img), (2, 4, 8))
    h = tf.concat([tf.tile(v_cls, (2, 1, 1)), p], axis=1) + v_pos
    for b in v_blocks:
        h = b(h)
    logits = v_head(v_lnf(h)[:, 0])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(v_y, logits)
    return [("logits", logits), ("loss", loss)]


v_opt = keras.optimizers.AdamW(learning_rate=lambda: 2.0**-7, weight_decay=0.125, beta_1=0.875, beta_2=1 - 2.0**-10, epsilon=2.0**-20)
train("vit", vit, v_vars, v_opt)

# 2. BERT MLM: vocabulary 13 (0 pads, 1 is [MASK]), 2 segments, length 6,
# width 8, 2 post-norm blocks of 2 heads, MLP 16, batch 3 (the last all
# padding), 2 predicted positions per sequence.
B_V, B_T, B_D = 13, 6, 8
b_tok = keras.layers.Embedding(B_V, B_D, dtype=F64)
b_tok.build((None, B_T))
b_seg = keras.layers.Embedding(2, B_D, dtype=F64)
b_seg.build((None, B_T))
b_pos = tf.Variable(np.zeros((B_T, B_D)), dtype=F64)
b_ln = layer_norm(B_D, 1e-12)
b_blocks = [Block(B_D, 2, 16, pre=False), Block(B_D, 2, 16, pre=False)]
b_mlm = dense(B_D, B_D, gelu)
b_mlm_ln = layer_norm(B_D, 1e-12)
b_bias = tf.Variable(np.zeros((B_V,)), dtype=F64)
b_vars = b_tok.trainable_variables + b_seg.trainable_variables + [b_pos] + b_ln.trainable_variables
b_vars += b_blocks[0].vars + b_blocks[1].vars + b_mlm.trainable_variables + b_mlm_ln.trainable_variables + [b_bias]
set_weights(b_vars, 410.0, [3] + [5 + g for g in BLOCK_GAMMAS] + [19 + g for g in BLOCK_GAMMAS] + [35])
b_ids = tf.constant([[2, 5, 1, 7, 1, 3], [4, 1, 8, 6, 0, 0], [0, 0, 0, 0, 0, 0]], dtype=tf.int64)
b_segs = tf.constant([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]], dtype=tf.int64)
b_at = tf.constant([[2, 4], [1, 3], [0, 0]], dtype=tf.int64)
b_labels = tf.constant([[9, 11], [12, 6], [0, 0]], dtype=tf.int64)
b_w = tf.constant([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]], dtype=F64)


def bert():
    pad = tf.not_equal(b_ids, 0)
    h = b_ln(b_tok(b_ids) + b_seg(b_segs) + b_pos)
    for b in b_blocks:
        h = b(h, attention_mask=pad[:, None, :])
    at = tf.gather(h, b_at, batch_dims=1)
    logits = tf.matmul(b_mlm_ln(b_mlm(at)), b_tok.embeddings, transpose_b=True) + b_bias
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(b_labels, logits, sample_weight=b_w)
    return [("hidden", h), ("logits", logits), ("loss", loss)]


train("bert", bert, b_vars, adam())

# 3. Llama-style decoder: vocabulary 11, width 8, 4 query heads and 2
# key/value heads of 4, SwiGLU 12, 2 blocks, batch 2 of 5 tokens.
L_V, L_D, L_H, L_KV, L_HD, L_F = 11, 8, 4, 2, 4, 12
L_EPS = 1e-6


def llama_vars():
    vs = [tf.Variable(np.zeros((L_V, L_D)), dtype=F64)]  # token table
    for _ in range(2):
        vs += [tf.Variable(np.zeros(s), dtype=F64) for s in (
            (L_D,),  # attention norm scale
            (L_D, L_H, L_HD), (L_D, L_KV, L_HD), (L_D, L_KV, L_HD), (L_H, L_HD, L_D),  # q, k, v, o
            (L_D,),  # MLP norm scale
            (L_D, L_F), (L_D, L_F), (L_F, L_D),  # up, gate, down
        )]
    vs += [tf.Variable(np.zeros((L_D,)), dtype=F64), tf.Variable(np.zeros((L_D, L_V)), dtype=F64)]
    return vs


LLAMA_ONES = [1, 10, 19]


def rms(x, scale):
    return x * tf.math.rsqrt(tf.reduce_mean(tf.square(x), -1, keepdims=True) + L_EPS) * scale


def rope(x, start):
    """x [b, heads, t, d] rotated by positions start.. (half-split)."""
    t, d = x.shape[2], x.shape[3]
    inv = 10000.0 ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.arange(start, start + t, dtype=np.float64)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * np.cos(ang) + tf.concat([-x2, x1], -1) * np.sin(ang)


def llama_logits(w, ids):
    t = ids.shape[1]
    h = tf.gather(w[0], ids)
    causal = np.tril(np.ones((t, t), dtype=bool))
    for i in range(2):
        an, wq, wk, wv, wo, mn, up, gate, down = w[1 + 9 * i : 10 + 9 * i]
        a = rms(h, an)
        q = rope(tf.einsum("btd,dnh->bnth", a, wq), 0)
        k = rope(tf.einsum("btd,dnh->bnth", a, wk), 0)
        v = tf.einsum("btd,dnh->bnth", a, wv)
        k, v = tf.repeat(k, L_H // L_KV, axis=1), tf.repeat(v, L_H // L_KV, axis=1)
        s = tf.einsum("bnqh,bnkh->bnqk", q, k) / math.sqrt(L_HD)
        p = tf.nn.softmax(tf.where(causal, s, -1e9), -1)
        h = h + tf.einsum("bnqh,nhd->bqd", tf.einsum("bnqk,bnkh->bnqh", p, v), wo)
        m = rms(h, mn)
        h = h + tf.matmul(tf.nn.silu(tf.matmul(m, gate)) * tf.matmul(m, up), down)
    return tf.matmul(rms(h, w[19]), w[20])


l_vars = llama_vars()
set_weights(l_vars, 420.0, LLAMA_ONES)
l_ids = tf.constant([[3, 7, 1, 9, 4], [5, 0, 10, 6, 8]], dtype=tf.int64)
l_next = tf.constant([[7, 1, 9, 4, 2], [0, 10, 6, 8, 1]], dtype=tf.int64)


def llama():
    logits = llama_logits(l_vars, l_ids)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(l_next, logits))
    return [("logits", logits), ("loss", loss)]


train("llama", llama, l_vars, adam())

# 3b. Greedy generation: fresh weights (fill from 430), prompts [2, 3],
# 4 new tokens each, the whole prefix recomputed every step.
g_vars = llama_vars()
set_weights(g_vars, 430.0, LLAMA_ONES)
# the head scaled up so that the greedy choices are clear (a margin of
# 1e-3 or more between the best two logits; checked below)
g_vars[20].assign(g_vars[20] * 8.0)
seq = tf.constant([[3, 7, 1], [5, 0, 10]], dtype=tf.int64)
for s in range(4):
    last = llama_logits(g_vars, seq)[:, -1]
    top2 = np.sort(last.numpy(), -1)[:, -2:]
    assert np.all(top2[:, 1] - top2[:, 0] > 1e-3), top2
    nxt = tf.argmax(last, -1)
    emit(f"gen{s}_logits", last)
    seq = tf.concat([seq, nxt[:, None]], 1)
emit("gen_tokens", seq)

# 4. Perceiver: inputs [2, 9, 5] (the second's last 3 positions padding),
# latents [4, 6], cross-attention of 2 heads to width 8, a latent block of
# 2 heads (key_dim 4, MLP 16), a Dense(8 -> 2) on the latents' mean.
p_lat = tf.Variable(np.zeros((4, 6)), dtype=F64)
p_cross = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, value_dim=5, output_shape=8, dtype=F64)
p_cross.build((None, 4, 6), (None, 9, 5), (None, 9, 7))
p_block = Block(8, 2, 16)
p_head = dense(8, 2)
p_vars = [p_lat] + p_cross.trainable_variables + p_block.vars + p_head.trainable_variables
print("# perceiver weights: " + ", ".join(getattr(v, "path", "latents") for v in p_vars))
set_weights(p_vars, 440.0, [9 + g for g in BLOCK_GAMMAS])
p_x = tf.constant(fill((2, 9, 5), 0.9, 2.0))
p_real = tf.constant([[True] * 9, [True] * 6 + [False] * 3])
pos = np.arange(9, dtype=np.float64) / 8.0
p_key = tf.concat([p_x, tf.constant(np.tile(np.stack([np.sin(pos), np.cos(pos)], -1), (2, 1, 1)))], -1)
p_y = tf.constant(fill((2, 2), 1.7, 1.0))


def perceiver():
    q = tf.tile(p_lat[None], (2, 1, 1))
    z = p_block(p_cross(q, p_x, key=p_key, value_mask=p_real))
    pred = p_head(tf.reduce_mean(z, 1))
    return [("latents", z), ("pred", pred), ("loss", keras.losses.MeanSquaredError()(p_y, pred))]


train("perceiver", perceiver, p_vars, adam())

# 5. DDPM: data [4, 3], 10 diffusion steps (betas linear from 1e-4 to
# 0.02), timesteps [4], a time embedding of 8, MLP 11 -> 16 -> 16 -> 3.
d_betas = np.linspace(1e-4, 0.02, 10)
d_abar = np.cumprod(1.0 - d_betas)
d_t = np.array([0, 3, 9, 6])
d_x0 = fill((4, 3), 2.3, 2.0)
d_eps = fill((4, 3), 0.35, 1.0)
d_xt = np.sqrt(d_abar[d_t])[:, None] * d_x0 + np.sqrt(1.0 - d_abar[d_t])[:, None] * d_eps
j = np.arange(8)
d_temb = np.where(j % 2 == 0, np.sin(d_t[:, None] * (1.0 / 10000.0) ** ((2 * (j // 2)) / 8.0)),
                  np.cos(d_t[:, None] * (1.0 / 10000.0) ** ((2 * (j // 2)) / 8.0)))
d_net = [dense(11, 16, "silu"), dense(16, 16, "silu"), dense(16, 3)]
d_vars = [v for l in d_net for v in l.trainable_variables]
set_weights(d_vars, 450.0)
emit("ddpm_xt", d_xt)


def ddpm():
    h = tf.concat([tf.constant(d_xt), tf.constant(d_temb)], -1)
    for l in d_net:
        h = l(h)
    return [("pred", h), ("loss", keras.losses.MeanSquaredError()(tf.constant(d_eps), h))]


train("ddpm", ddpm, d_vars, adam())

# 6. Left-padded causal decoder: vocabulary 9 (0 pads), length 5, width 8,
# one pre-norm block of 2 heads (MLP 16), a Dense head.
c_tok = keras.layers.Embedding(9, 8, dtype=F64)
c_tok.build((None, 5))
c_block = Block(8, 2, 16)
c_head = dense(8, 9)
c_vars = c_tok.trainable_variables + c_block.vars + c_head.trainable_variables
set_weights(c_vars, 460.0, [1 + g for g in BLOCK_GAMMAS])
c_ids = tf.constant([[0, 0, 3, 5, 2], [4, 1, 6, 7, 8]], dtype=tf.int64)
c_next = tf.constant([[0, 3, 5, 2, 6], [1, 6, 7, 8, 2]], dtype=tf.int64)
c_w = tf.constant([[0.0, 1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0, 1.0]], dtype=F64)
j = np.arange(8)
c_pe = np.array([[math.sin(p * (1.0 / 10000.0) ** ((2 * (k // 2)) / 8.0)) if k % 2 == 0
                  else math.cos(p * (1.0 / 10000.0) ** ((2 * (k // 2)) / 8.0)) for k in j] for p in range(5)])


def causal_padded():
    h = c_block(c_tok(c_ids) + c_pe, use_causal_mask=True, value_mask=tf.not_equal(c_ids, 0))
    logits = c_head(h)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(c_next, logits, sample_weight=c_w)
    return [("hidden", h), ("logits", logits), ("loss", loss)]


train("causal", causal_padded, c_vars, adam())

# 7. The attention masks a new user passes as Keras takes them: BERT's
# key padding as int32 [B, 1, S] (`mask[:, None, :]` of a tokenizer's 0/1
# mask), and an int64 [T, S] band of 0 / 2 (any nonzero keeps, as
# ops.cast(mask, "bool")); Keras broadcasts both against [B, T, S]. The
# second sequence's first query sees no key under the band: Keras
# averages every value there.
m_mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, dtype=F64)
m_mha.build((None, 3, 8), (None, 3, 8))
set_weights(m_mha.trainable_variables, 470.0)
m_x = tf.constant(fill((2, 3, 8), 0.45, 1.0))
m_pad = tf.constant([[[1, 1, 0]], [[0, 1, 1]]], dtype=tf.int32)
m_band = tf.constant([[2, 0, 0], [2, 2, 0], [0, 2, 2]], dtype=tf.int64)
emit("mask_int_b1s", m_mha(m_x, m_x, attention_mask=m_pad))
emit("mask_int_ts", m_mha(m_x, m_x, attention_mask=m_band))
emit("mask_both", m_mha(m_x, m_x, attention_mask=tf.logical_and(tf.cast(m_pad, tf.bool), tf.cast(m_band, tf.bool))))
