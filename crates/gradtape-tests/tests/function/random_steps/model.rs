//! The models of [`super`]: a drawn stack of `nn` layers over sequences
//! `[batch, time, features]`, built from a [`ModelSpec`] so that two
//! copies (and the `f64` referee's) are the same model: same layers, same
//! initial weights (drawn from one `Rng` seed).

use gradtape::nn::{
    Activation, AttentionArgs, BatchNorm, Conv1D, Conv2D, Dense, Dropout, Embedding, Layer, LayerNorm, Module,
    MultiHeadAttention, TransformerBlock, GRU, LSTM,
};
use gradtape::{DType, Padding, Result, Rng, Tensor, Variable};

use super::Gen;

/// The activations a [`BlockSpec::Dense`] draws from.
const ACTIVATIONS: [Activation; 9] = [
    Activation::Linear,
    Activation::Relu,
    Activation::Tanh,
    Activation::Sigmoid,
    Activation::Gelu,
    Activation::Silu,
    Activation::Elu,
    Activation::Softplus,
    Activation::LeakyRelu(0.2),
];

/// One layer of the stack (each maps `[b, t, f]` to `[b, t, f]`).
#[derive(Clone, Debug)]
pub enum BlockSpec {
    Dense {
        act: usize,
        bias: bool,
    },
    Conv1 {
        k: usize,
        causal: bool,
        bias: bool,
    },
    /// `[b, t, f]` seen as an image `[b, t, f/2, 2]`
    Conv2 {
        kh: usize,
        kw: usize,
        bias: bool,
    },
    LayerNorm,
    /// in training mode: its moving statistics are state written by the step
    BatchNorm {
        momentum: f64,
    },
    Mha {
        causal: bool,
        bias: bool,
    },
    Transformer {
        causal: bool,
        bias: bool,
        pre_norm: bool,
    },
    Lstm,
    Gru,
    /// rate 0 (the identity; a rate above 0 draws a mask from the layer's
    /// own `Rng`, a stream that a traced call and an eager one need not share)
    Dropout,
    /// `x + block(x)`
    Residual(Box<BlockSpec>),
}

/// How the sequence enters: token ids through an `Embedding`, features
/// through a `Dense` projection, or features as they are (`fin == f`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InputSpec {
    Embed { vocab: usize },
    Project,
    Raw,
}

/// A whole model.
#[derive(Clone, Debug)]
pub struct ModelSpec {
    pub input: InputSpec,
    pub fin: usize,
    pub f: usize,
    pub blocks: Vec<BlockSpec>,
    /// the head reads the mean over time (`[b, k]`) or every position (`[b, t, k]`)
    pub pool: bool,
    pub k: usize,
    pub head_act: Activation,
    pub seed: u64,
}

/// Draws a layer. `key_bias`: whether attention may have biases: its key
/// bias shifts every score of a row alike, which the softmax removes, so
/// its gradient is zero up to rounding, and an optimizer that divides by
/// the gradients' own size (Adam's `m / (sqrt(v) + eps)`, Lion's sign)
/// turns that rounding into updates of up to `lr` whose size and sign
/// depend on the order of a sum (traced or eager); drawn for SGD only.
fn draw_block(g: &mut Gen, depth: usize, key_bias: bool) -> BlockSpec {
    let bias = g.coin();
    match g.below(if depth == 0 { 12 } else { 11 }) {
        0 | 1 => BlockSpec::Dense {
            act: g.below(ACTIVATIONS.len()),
            bias,
        },
        2 => BlockSpec::Conv1 {
            k: 1 + g.below(3),
            causal: g.coin(),
            bias,
        },
        3 => BlockSpec::Conv2 {
            kh: 1 + g.below(3),
            kw: 1 + g.below(2),
            bias,
        },
        4 => BlockSpec::LayerNorm,
        5 => BlockSpec::BatchNorm {
            momentum: [0.9, 0.99, 0.5][g.below(3)],
        },
        6 => BlockSpec::Mha {
            causal: g.coin(),
            bias: key_bias && bias,
        },
        7 => BlockSpec::Transformer {
            causal: g.coin(),
            bias: key_bias && bias,
            pre_norm: g.coin(),
        },
        8 => BlockSpec::Lstm,
        9 => BlockSpec::Gru,
        10 => BlockSpec::Dropout,
        _ => BlockSpec::Residual(Box::new(draw_block(g, depth + 1, key_bias))),
    }
}

impl ModelSpec {
    /// Draws a model of 1 to 4 layers; `k` outputs (classes, at least 2,
    /// where `classes`); `key_bias` as [`draw_block`].
    pub fn draw(g: &mut Gen, classes: bool, key_bias: bool) -> ModelSpec {
        let f = [4, 6, 8][g.below(3)];
        let input = match g.below(3) {
            0 => InputSpec::Embed { vocab: 5 + g.below(6) },
            1 => InputSpec::Project,
            _ => InputSpec::Raw,
        };
        let fin = if input == InputSpec::Project { 2 + g.below(4) } else { f };
        let n = 1 + g.below(4);
        let mut blocks: Vec<BlockSpec> = Vec::with_capacity(n);
        for _ in 0..n {
            blocks.push(draw_block(g, 0, key_bias));
        }
        // A BatchNorm removes the mean over the batch of each feature, so
        // the gradient of a constant added before it (a bias, a
        // LayerNorm's offset, a residual's), or before linear layers that
        // lead to it (seed 5801's case 240: a projection's bias, a linear
        // `Dense`, a BatchNorm), is zero up to rounding (see `draw_block`):
        // a BatchNorm follows a recurrence or a nonlinear `Dense` without
        // bias (the projection before a first one has none).
        for i in 1..blocks.len() {
            if matches!(blocks[i], BlockSpec::BatchNorm { .. }) {
                match &mut blocks[i - 1] {
                    BlockSpec::Dense { act, bias } => {
                        *bias = false;
                        if *act == 0 {
                            *act = 2;
                        }
                    }
                    BlockSpec::Lstm | BlockSpec::Gru => {}
                    other => *other = BlockSpec::Dense { act: 2, bias: false },
                }
            }
        }
        ModelSpec {
            input,
            fin,
            f,
            blocks,
            pool: g.coin(),
            k: if classes { 2 + g.below(3) } else { 1 + g.below(3) },
            head_act: Activation::Linear,
            seed: g.next(),
        }
    }
}

/// A built layer.
// (a few per model: the variants' sizes do not matter)
#[allow(clippy::large_enum_variant)]
enum Block {
    Dense(Dense),
    Conv1(Conv1D),
    Conv2(Conv2D),
    LayerNorm(LayerNorm),
    BatchNorm(BatchNorm),
    Mha(MultiHeadAttention, bool),
    Transformer(TransformerBlock),
    Lstm(LSTM),
    Gru(GRU),
    Dropout(Dropout),
    Residual(Box<Block>),
}

impl Block {
    fn build(spec: &BlockSpec, f: usize, dtype: DType, rng: &mut Rng) -> Result<Block> {
        Ok(match spec {
            BlockSpec::Dense { act, bias } => Block::Dense(
                Dense::builder(f, f)
                    .activation(ACTIVATIONS[*act])
                    .use_bias(*bias)
                    .dtype(dtype)
                    .build(rng)?,
            ),
            BlockSpec::Conv1 { k, causal, bias } => {
                let b = Conv1D::builder(f, f, *k).use_bias(*bias).dtype(dtype);
                let b = if *causal {
                    b.causal(true)
                } else {
                    b.padding(Padding::Same)
                };
                Block::Conv1(b.build(rng)?)
            }
            BlockSpec::Conv2 { kh, kw, bias } => Block::Conv2(
                Conv2D::builder(2, 2, [*kh, *kw])
                    .padding(Padding::Same)
                    .use_bias(*bias)
                    .dtype(dtype)
                    .build(rng)?,
            ),
            BlockSpec::LayerNorm => Block::LayerNorm(LayerNorm::builder(f).dtype(dtype).build()?),
            BlockSpec::BatchNorm { momentum } => {
                Block::BatchNorm(BatchNorm::builder(f).momentum(*momentum).dtype(dtype).build()?)
            }
            BlockSpec::Mha { causal, bias } => Block::Mha(
                MultiHeadAttention::builder(2, f / 2)
                    .use_bias(*bias)
                    .dtype(dtype)
                    .build(f, rng)?,
                *causal,
            ),
            BlockSpec::Transformer { causal, bias, pre_norm } => Block::Transformer(
                TransformerBlock::builder(f, 2, 2 * f)
                    .causal(*causal)
                    .use_bias(*bias)
                    .normalize_first(*pre_norm)
                    .dtype(dtype)
                    .build(rng)?,
            ),
            BlockSpec::Lstm => Block::Lstm(LSTM::builder(f, f).return_sequences(true).dtype(dtype).build(rng)?),
            BlockSpec::Gru => Block::Gru(GRU::builder(f, f).return_sequences(true).dtype(dtype).build(rng)?),
            BlockSpec::Dropout => Block::Dropout(Dropout::new(0.0, rng)?),
            BlockSpec::Residual(inner) => Block::Residual(Box::new(Block::build(inner, f, dtype, rng)?)),
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Block::Dense(l) => l.forward(x, true),
            Block::Conv1(l) => l.forward(x, true),
            Block::Conv2(l) => {
                let s = x.shape().to_vec();
                l.forward(&x.reshape(&[s[0], s[1], s[2] / 2, 2])?, true)?.reshape(&s)
            }
            Block::LayerNorm(l) => l.forward(x, true),
            Block::BatchNorm(l) => l.forward(x, true),
            Block::Mha(l, causal) => l.call_with(x, x, AttentionArgs::new().use_causal_mask(*causal).training(true)),
            Block::Transformer(l) => l.forward(x, true),
            Block::Lstm(l) => l.forward(x, true),
            Block::Gru(l) => l.forward(x, true),
            Block::Dropout(l) => l.forward(x, true),
            Block::Residual(inner) => x.add(&inner.forward(x)?),
        }
    }

    fn variables(&self) -> Vec<Variable> {
        match self {
            Block::Dense(l) => l.variables(),
            Block::Conv1(l) => l.variables(),
            Block::Conv2(l) => l.variables(),
            Block::LayerNorm(l) => l.variables(),
            Block::BatchNorm(l) => l.variables(),
            Block::Mha(l, _) => l.variables(),
            Block::Transformer(l) => l.variables(),
            Block::Lstm(l) => l.variables(),
            Block::Gru(l) => l.variables(),
            Block::Dropout(l) => l.variables(),
            Block::Residual(inner) => inner.variables(),
        }
    }
}

/// A built model.
pub struct Model {
    embed: Option<Embedding>,
    project: Option<Dense>,
    blocks: Vec<Block>,
    pool: bool,
    head: Dense,
}

impl Model {
    /// Builds `spec` in `dtype`; the initial weights come from `spec.seed`.
    pub fn build(spec: &ModelSpec, dtype: DType) -> Result<Model> {
        let mut rng = Rng::new(spec.seed);
        let (embed, project) = match spec.input {
            InputSpec::Embed { vocab } => (
                Some(Embedding::builder(vocab, spec.f).dtype(dtype).build(&mut rng)?),
                None,
            ),
            InputSpec::Project => (
                None,
                // (no bias before a BatchNorm: see `ModelSpec::draw`)
                Some(
                    Dense::builder(spec.fin, spec.f)
                        .use_bias(!matches!(spec.blocks.first(), Some(BlockSpec::BatchNorm { .. })))
                        .dtype(dtype)
                        .build(&mut rng)?,
                ),
            ),
            InputSpec::Raw => (None, None),
        };
        let blocks = spec
            .blocks
            .iter()
            .map(|b| Block::build(b, spec.f, dtype, &mut rng))
            .collect::<Result<Vec<_>>>()?;
        let head = Dense::builder(spec.f, spec.k)
            .activation(spec.head_act)
            .dtype(dtype)
            .build(&mut rng)?;
        Ok(Model {
            embed,
            project,
            blocks,
            pool: spec.pool,
            head,
        })
    }

    /// The forward pass in training mode.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = match (&self.embed, &self.project) {
            (Some(e), _) => e.forward(x, true)?,
            (_, Some(p)) => p.forward(x, true)?,
            _ => x.clone(),
        };
        for b in &self.blocks {
            h = b.forward(&h)?;
        }
        if self.pool {
            h = h.mean(&[1], false)?;
        }
        self.head.forward(&h, true)
    }

    /// Every variable (BatchNorm's moving statistics too), in a fixed order.
    pub fn variables(&self) -> Vec<Variable> {
        let mut v = Vec::new();
        if let Some(e) = &self.embed {
            v.extend(e.variables());
        }
        if let Some(p) = &self.project {
            v.extend(p.variables());
        }
        for b in &self.blocks {
            v.extend(b.variables());
        }
        v.extend(self.head.variables());
        v
    }

    /// The variables the optimizer updates.
    pub fn trainable(&self) -> Vec<Variable> {
        self.variables().into_iter().filter(Variable::trainable).collect()
    }

    /// The kernels (weights of rank 2 and more), which an L2 penalty reads.
    pub fn kernels(&self) -> Vec<Variable> {
        self.trainable().into_iter().filter(|v| v.shape().len() >= 2).collect()
    }
}
