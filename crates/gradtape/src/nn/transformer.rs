//! `TransformerBlock`: a Transformer block, GPT-2's (pre-norm) by
//! default and Llama's with its builder's options, for encoders or,
//! causal, for decoders; post-norm and with cross-attention to an
//! encoder's sequence, keras_hub's `TransformerEncoder` and
//! `TransformerDecoder`. [`BlockArgs`] are a call's optional arguments.

use super::attention_args::{check_padding, CrossKv};
use super::{
    unique_name, Activation, AttentionArgs, Dense, Dropout, KvCache, Layer, LayerNorm, Module, MultiHeadAttention,
    RMSNorm, RotaryEmbedding,
};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::random::Rng;
use crate::tensor::{DType, Tensor};

const OP: &str = "TransformerBlock";

/// A pre-LayerNorm Transformer block on `x [batch, time, d_model]`:
///
/// ```text
/// x = x + dropout(attention(ln_1(x)))          self-attention, causal or not
/// x = x + dropout(ff_2(activation(ff_1(ln_2(x)))))
/// ```
///
/// with `ff_1` a `Dense(d_model, ff_dim)` (GELU by default) and `ff_2` a
/// `Dense(ff_dim, d_model)`; the dropout rate also applies to the attention
/// probabilities (keras_hub's `TransformerDecoder`, which puts the norms
/// after instead). The sublayers are named after keras_hub's
/// (`{name}/self_attention`, `{name}/self_attention_layer_norm`,
/// `{name}/feedforward_intermediate_dense`, ...).
///
/// With [`normalize_first(false)`](TransformerBlockBuilder::normalize_first)
/// the norms come after each residual sum instead (`x = ln_1(x +
/// dropout(attention(x)))`, the original Transformer's and BERT's, and
/// keras_hub's default); with
/// [`cross_attention`](TransformerBlockBuilder::cross_attention) a second
/// attention sublayer between the two, from the block's positions to an
/// encoder's sequence given in [`BlockArgs::encoder`] (keras_hub's
/// `TransformerDecoder` called with an `encoder_sequence`).
///
/// The builder makes the block Llama's (keras_hub's
/// `LlamaTransformerDecoder`) with [`llama`](TransformerBlockBuilder::llama)
/// or option by option: RMS norms instead of LayerNorms, fewer key/value
/// heads than query heads (grouped-query attention), rotary positions on
/// the queries and keys, and a gated feed-forward
/// `ff_2(activation(gate(x)) · ff_1(x))` (SwiGLU with SiLU, GEGLU with
/// GELU).
///
/// ```
/// use gradtape::nn::{KvCache, Layer, Module, TransformerBlock};
/// use gradtape::{DType, Rng};
/// let mut rng = Rng::new(0);
/// let block = TransformerBlock::builder(16, 4, 64).causal(true).dropout(0.1).build(&mut rng)?;
/// let x = rng.normal(&[2, 5, 16], 0.0, 1.0, DType::F32)?;
/// assert_eq!(block.forward(&x, true)?.shape(), &[2, 5, 16]);   // training: dropout
/// let y = block.call(&x)?;                                     // inference
/// // decoding: the last position from the cached first four
/// let mut cache = KvCache::new();
/// block.call_cached(&x.narrow(1, 0, 4)?, &mut cache)?;
/// let last = block.call_cached(&x.narrow(1, 4, 1)?, &mut cache)?;
/// let (a, b) = (last.to_vec::<f32>()?, y.narrow(1, 4, 1)?.to_vec::<f32>()?);
/// assert!(a.iter().zip(&b).all(|(a, b)| (a - b).abs() < 1e-5));
/// assert_eq!(block.variables().len(), 2 + 8 + 2 + 2 + 2);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct TransformerBlock {
    name: String,
    d_model: usize,
    causal: bool,
    normalize_first: bool,
    ln_1: Norm,
    attention: MultiHeadAttention,
    /// the cross-attention sublayer's norm and attention
    cross: Option<(Norm, MultiHeadAttention)>,
    ln_2: Norm,
    ff_1: Dense,
    /// the gate of a gated feed-forward, with the activation
    gate: Option<Dense>,
    ff_2: Dense,
    dropout: Option<Dropout>,
}

/// The block's normalisation: LayerNorm (GPT-2's) or RMS (Llama's).
enum Norm {
    Layer(LayerNorm),
    Rms(RMSNorm),
}

impl Norm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Norm::Layer(n) => n.forward(x, false),
            Norm::Rms(n) => n.forward(x, false),
        }
    }

    fn variables(&self) -> Vec<Variable> {
        match self {
            Norm::Layer(n) => n.variables(),
            Norm::Rms(n) => n.variables(),
        }
    }
}

/// Options for a [`TransformerBlock`]; see [`TransformerBlock::builder`].
pub struct TransformerBlockBuilder {
    d_model: usize,
    num_heads: usize,
    ff_dim: usize,
    key_dim: Option<usize>,
    dropout: f64,
    causal: bool,
    activation: Activation,
    epsilon: f64,
    use_bias: bool,
    rms_norm: bool,
    kv_heads: Option<usize>,
    rotary: Option<RotaryEmbedding>,
    /// whether to rotate with the default embedding when `rotary` is unset
    default_rotary: bool,
    gated: bool,
    sliding_window: Option<usize>,
    normalize_first: bool,
    cross_features: Option<usize>,
    dtype: DType,
    name: Option<String>,
}

impl TransformerBlockBuilder {
    /// The size of each attention head (default `d_model / num_heads`,
    /// which must then divide exactly).
    pub fn key_dim(mut self, d: usize) -> Self {
        self.key_dim = Some(d);
        self
    }
    /// The dropout rate, on the attention probabilities and on both
    /// residual branches, while training (default 0).
    pub fn dropout(mut self, rate: f64) -> Self {
        self.dropout = rate;
        self
    }
    /// Whether each position attends only to itself and those before it
    /// (a decoder, GPT's; default false).
    pub fn causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }
    /// The feed-forward's inner activation (default exact GELU).
    pub fn activation(mut self, a: Activation) -> Self {
        self.activation = a;
        self
    }
    /// The layer norms' epsilon (default `1e-5`, keras_hub's and
    /// PyTorch's).
    pub fn layer_norm_epsilon(mut self, eps: f64) -> Self {
        self.epsilon = eps;
        self
    }
    /// Whether the attention and feed-forward layers have biases (default
    /// true).
    pub fn use_bias(mut self, b: bool) -> Self {
        self.use_bias = b;
        self
    }
    /// Whether the two norms are RMS normalisations ([`RMSNorm`], a scale
    /// and no centring; Llama's) instead of LayerNorms (default false).
    pub fn rms_norm(mut self, on: bool) -> Self {
        self.rms_norm = on;
        self
    }
    /// The number of key/value heads, which must divide `num_heads`
    /// (grouped-query attention; default `num_heads`); see
    /// [`MultiHeadAttentionBuilder::num_key_value_heads`](super::MultiHeadAttentionBuilder::num_key_value_heads).
    pub fn num_key_value_heads(mut self, n: usize) -> Self {
        self.kv_heads = Some(n);
        self
    }
    /// Rotates the attention's queries and keys by their positions with
    /// `rope` (default none); see
    /// [`MultiHeadAttentionBuilder::rotary_embedding`](super::MultiHeadAttentionBuilder::rotary_embedding).
    pub fn rotary_embedding(mut self, rope: RotaryEmbedding) -> Self {
        self.rotary = Some(rope);
        self
    }
    /// Whether the feed-forward is gated (default false): `ff_2(a(gate(x))
    /// · ff_1(x))` with a third `Dense(d_model, ff_dim)`, the gate
    /// (`{name}/feedforward_gate_dense`), carrying the activation `a` and
    /// `ff_1` linear: SwiGLU with [`Activation::Silu`], GEGLU with GELU
    /// (Shazeer 2020).
    pub fn gated_feed_forward(mut self, on: bool) -> Self {
        self.gated = on;
        self
    }
    /// The attention's sliding window (default none: every key): query
    /// `i` sees keys `j` with `|i - j| < w`, with the causal mask the last
    /// `w` positions (Mistral's); see
    /// [`MultiHeadAttentionBuilder::sliding_window`](super::MultiHeadAttentionBuilder::sliding_window).
    ///
    /// ```
    /// use gradtape::nn::{KvCache, Layer, TransformerBlock};
    /// use gradtape::{DType, Rng};
    /// let mut rng = Rng::new(0);
    /// let block = TransformerBlock::builder(16, 2, 32).llama().sliding_window(3).dtype(DType::F64).build(&mut rng)?;
    /// let x = rng.normal(&[1, 6, 16], 0.0, 1.0, DType::F64)?;
    /// let full = block.call(&x)?;
    /// // decoding position by position gives the same rows
    /// let mut cache = KvCache::new();
    /// let rows: Vec<_> = (0..6).map(|i| block.call_cached(&x.narrow(1, i, 1)?, &mut cache)).collect::<Result<_, _>>()?;
    /// let max_diff = (full.to_vec::<f64>()?.iter().zip(gradtape::Tensor::concat(&rows.iter().collect::<Vec<_>>(), 1)?.to_vec::<f64>()?))
    ///     .map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    /// assert!(max_diff < 1e-12);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn sliding_window(mut self, w: usize) -> Self {
        self.sliding_window = Some(w);
        self
    }
    /// Whether each sublayer normalises its input (true, the default:
    /// pre-norm, GPT-2's and Llama's) or the residual sum after it (false:
    /// post-norm, keras_hub's `normalize_first=False`, its default).
    ///
    /// ```
    /// use gradtape::nn::{Activation, Layer, TransformerBlock};
    /// use gradtape::{DType, Rng};
    /// let mut rng = Rng::new(0);
    /// // keras_hub's TransformerEncoder: post-norm, ReLU
    /// let block = TransformerBlock::builder(8, 2, 16).normalize_first(false).activation(Activation::Relu).build(&mut rng)?;
    /// let y = block.call(&rng.normal(&[2, 3, 8], 0.0, 1.0, DType::F32)?)?;
    /// // the output is a LayerNorm's: each position's features have mean 0
    /// let mean = y.mean(&[-1], false)?.to_vec::<f32>()?;
    /// assert!(mean.iter().all(|m| m.abs() < 1e-5));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn normalize_first(mut self, on: bool) -> Self {
        self.normalize_first = on;
        self
    }
    /// Adds a cross-attention sublayer (`{name}/cross_attention`, with its
    /// norm `{name}/cross_attention_layer_norm`) after the
    /// self-attention: the block's positions attend to an encoder's
    /// sequence `[batch, s, encoder_features]`, given at each call in
    /// [`BlockArgs::encoder`] (keras_hub's `TransformerDecoder` with an
    /// `encoder_sequence`; its heads and head size the self-attention's).
    ///
    /// ```
    /// use gradtape::nn::{BlockArgs, TransformerBlock};
    /// use gradtape::{DType, Rng};
    /// let mut rng = Rng::new(0);
    /// let decoder = TransformerBlock::builder(8, 2, 16).causal(true).cross_attention(12).build(&mut rng)?;
    /// let (x, enc) = (rng.normal(&[2, 3, 8], 0.0, 1.0, DType::F32)?, rng.normal(&[2, 5, 12], 0.0, 1.0, DType::F32)?);
    /// assert_eq!(decoder.call_with(&x, BlockArgs::new().encoder(&enc))?.shape(), &[2, 3, 8]);
    /// assert!(decoder.call_with(&x, BlockArgs::new()).is_err()); // the encoder's sequence is missing
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn cross_attention(mut self, encoder_features: usize) -> Self {
        self.cross_features = Some(encoder_features);
        self
    }
    /// Llama's block (keras_hub's `LlamaTransformerDecoder`): causal, RMS
    /// norms, rotary positions (max wavelength 10000), a SwiGLU
    /// feed-forward and no biases. Options set after it change it
    /// (`num_key_value_heads` for grouped-query attention, a
    /// `rotary_embedding` of another wavelength).
    ///
    /// ```
    /// use gradtape::nn::{Layer, Module, TransformerBlock};
    /// use gradtape::{DType, Rng};
    /// let mut rng = Rng::new(0);
    /// let block = TransformerBlock::builder(32, 4, 64).llama().num_key_value_heads(2).build(&mut rng)?;
    /// let shapes: Vec<Vec<usize>> = block.variables().iter().map(|v| v.shape()).collect();
    /// assert_eq!(shapes[0], vec![32]);         // the first RMS norm's scale
    /// assert_eq!(shapes[2], vec![32, 2, 8]);   // key/kernel: two key/value heads
    /// assert_eq!(shapes.len(), 1 + 4 + 1 + 3); // norms, attention, three dense kernels
    /// let x = rng.normal(&[2, 5, 32], 0.0, 1.0, DType::F32)?;
    /// assert_eq!(block.call(&x)?.shape(), &[2, 5, 32]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn llama(self) -> Self {
        let mut b = self
            .causal(true)
            .rms_norm(true)
            .gated_feed_forward(true)
            .activation(Activation::Silu)
            .use_bias(false);
        b.default_rotary = true;
        b
    }
    /// The weights' dtype (default f32).
    pub fn dtype(mut self, d: DType) -> Self {
        self.dtype = d;
        self
    }
    /// The block's name (default `transformer_block`, made unique).
    pub fn name(mut self, n: impl Into<String>) -> Self {
        self.name = Some(n.into());
        self
    }

    /// Creates the block's layers (Glorot-uniform kernels, zero biases),
    /// drawing from `rng`.
    ///
    /// ```
    /// use gradtape::{nn::TransformerBlock, Rng};
    /// let mut rng = Rng::new(0);
    /// assert!(TransformerBlock::builder(10, 4, 32).build(&mut rng).is_err()); // 4 does not divide 10
    /// assert!(TransformerBlock::builder(10, 4, 32).key_dim(3).build(&mut rng).is_ok());
    /// ```
    pub fn build(self, rng: &mut Rng) -> Result<TransformerBlock> {
        let (d, h) = (self.d_model, self.num_heads);
        if d == 0 || h == 0 || self.ff_dim == 0 {
            return Err(Error::invalid(
                OP,
                format!(
                    "d_model, num_heads and ff_dim must be positive, got {d}, {h} and {}",
                    self.ff_dim
                ),
            ));
        }
        let key_dim = match self.key_dim {
            Some(k) => k,
            None if d % h == 0 => d / h,
            None => {
                return Err(Error::invalid(
                    OP,
                    format!("num_heads = {h} does not divide d_model = {d}; set key_dim"),
                ));
            }
        };
        let name = self.name.unwrap_or_else(|| unique_name("transformer_block"));
        let ln = |part: &str| -> Result<Norm> {
            let name = format!("{name}/{part}");
            Ok(if self.rms_norm {
                Norm::Rms(
                    RMSNorm::builder(d)
                        .epsilon(self.epsilon)
                        .dtype(self.dtype)
                        .name(name)
                        .build()?,
                )
            } else {
                Norm::Layer(
                    LayerNorm::builder(d)
                        .epsilon(self.epsilon)
                        .dtype(self.dtype)
                        .name(name)
                        .build()?,
                )
            })
        };
        let ln_1 = ln("self_attention_layer_norm")?;
        let mut attention = MultiHeadAttention::builder(h, key_dim)
            .dropout(self.dropout)
            .use_bias(self.use_bias)
            .dtype(self.dtype)
            .name(format!("{name}/self_attention"));
        if let Some(n) = self.kv_heads {
            attention = attention.num_key_value_heads(n);
        }
        if let Some(w) = self.sliding_window {
            attention = attention.sliding_window(w);
        }
        let rope = match self.rotary {
            None if self.default_rotary => Some(RotaryEmbedding::builder().build()?),
            rope => rope,
        };
        if let Some(rope) = rope {
            attention = attention.rotary_embedding(rope);
        }
        let attention = attention.build(d, rng)?;
        let cross = match self.cross_features {
            Some(features) => {
                let mha = MultiHeadAttention::builder(h, key_dim)
                    .value_features(features)
                    .dropout(self.dropout)
                    .use_bias(self.use_bias)
                    .dtype(self.dtype)
                    .name(format!("{name}/cross_attention"))
                    .build(d, rng)?;
                Some((ln("cross_attention_layer_norm")?, mha))
            }
            None => None,
        };
        let ln_2 = ln("feedforward_layer_norm")?;
        let dense = |part: &str, activation: Activation, rng: &mut Rng| {
            Dense::builder(d, self.ff_dim)
                .activation(activation)
                .use_bias(self.use_bias)
                .dtype(self.dtype)
                .name(format!("{name}/{part}"))
                .build(rng)
        };
        let (ff_1, gate) = if self.gated {
            let ff_1 = dense("feedforward_intermediate_dense", Activation::Linear, rng)?;
            (ff_1, Some(dense("feedforward_gate_dense", self.activation, rng)?))
        } else {
            (dense("feedforward_intermediate_dense", self.activation, rng)?, None)
        };
        let ff_2 = Dense::builder(self.ff_dim, d)
            .use_bias(self.use_bias)
            .dtype(self.dtype)
            .name(format!("{name}/feedforward_output_dense"))
            .build(rng)?;
        let dropout = (self.dropout > 0.0)
            .then(|| Dropout::new(self.dropout, rng))
            .transpose()?;
        Ok(TransformerBlock {
            name,
            d_model: d,
            causal: self.causal,
            normalize_first: self.normalize_first,
            ln_1,
            attention,
            cross,
            ln_2,
            ff_1,
            gate,
            ff_2,
            dropout,
        })
    }
}

impl TransformerBlock {
    /// Starts a block of width `d_model` with `num_heads` attention heads
    /// and a feed-forward of `ff_dim` hidden units.
    ///
    /// ```
    /// use gradtape::nn::{Activation, Layer, TransformerBlock};
    /// use gradtape::{DType, Rng};
    /// let block = TransformerBlock::builder(32, 4, 128)
    ///     .causal(true)
    ///     .dropout(0.1)
    ///     .activation(Activation::Relu)
    ///     .layer_norm_epsilon(1e-6)
    ///     .dtype(DType::F64)
    ///     .name("h0")
    ///     .build(&mut Rng::new(0))?;
    /// assert!(block.is_causal());
    /// assert_eq!(block.attention().name(), "h0/self_attention");
    /// assert_eq!(block.attention().key_dim(), 8);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn builder(d_model: usize, num_heads: usize, ff_dim: usize) -> TransformerBlockBuilder {
        TransformerBlockBuilder {
            d_model,
            num_heads,
            ff_dim,
            key_dim: None,
            dropout: 0.0,
            causal: false,
            activation: Activation::Gelu,
            epsilon: 1e-5,
            use_bias: true,
            rms_norm: false,
            kv_heads: None,
            rotary: None,
            default_rotary: false,
            gated: false,
            sliding_window: None,
            normalize_first: true,
            cross_features: None,
            dtype: DType::F32,
            name: None,
        }
    }

    /// Whether the block's attention is causal.
    pub fn is_causal(&self) -> bool {
        self.causal
    }

    /// The attention layer.
    pub fn attention(&self) -> &MultiHeadAttention {
        &self.attention
    }

    fn residual_dropout(&self, x: Tensor, training: bool) -> Result<Tensor> {
        match &self.dropout {
            Some(d) if training => d.forward(&x, true),
            _ => Ok(x),
        }
    }

    fn check(&self, x: &Tensor) -> Result<()> {
        if x.rank() != 3 || x.shape()[2] != self.d_model {
            return Err(Error::invalid(
                OP,
                format!(
                    "block '{}' expected an input [batch, time, {}], got {:?}",
                    self.name,
                    self.d_model,
                    x.shape()
                ),
            ));
        }
        let dtype = self.ff_2.kernel().dtype();
        if x.dtype() != dtype {
            return Err(Error::invalid(
                OP,
                format!(
                    "block '{}' has {dtype} weights but got a {} input (cast the input, or build the block with that dtype)",
                    self.name,
                    x.dtype()
                ),
            ));
        }
        Ok(())
    }

    /// A sublayer `f` with its residual and `norm`: `x + dropout(f(norm(x)))`
    /// pre-norm, `norm(x + dropout(f(x)))` post-norm.
    fn residual(
        &self,
        x: &Tensor,
        norm: &Norm,
        training: bool,
        f: impl FnOnce(&Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let h = if self.normalize_first {
            f(&norm.forward(x)?)?
        } else {
            f(x)?
        };
        let y = x.add(&self.residual_dropout(h, training)?)?;
        if self.normalize_first {
            Ok(y)
        } else {
            norm.forward(&y)
        }
    }

    /// The feed-forward sublayer.
    fn feed_forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        self.residual(x, &self.ln_2, training, |n| {
            let mut h = self.ff_1.forward(n, training)?;
            if let Some(gate) = &self.gate {
                h = gate.forward(n, training)?.mul(&h)?;
            }
            self.ff_2.forward(&h, training)
        })
    }

    /// The cross-attention sublayer to `args.encoder` (`x` as it is
    /// without one); the encoder's key and value heads from `kept` where
    /// it holds them (decoding), else projected (and kept there).
    fn cross_attend(&self, x: &Tensor, args: &BlockArgs<'_>, kept: Option<&mut Option<CrossKv>>) -> Result<Tensor> {
        let (norm, mha, enc) = match (&self.cross, args.encoder) {
            (None, None) => return Ok(x.clone()),
            (Some((norm, mha)), Some(enc)) => (norm, mha, enc),
            (None, Some(_)) => {
                return Err(Error::invalid(
                    OP,
                    "an encoder's sequence was given to a block without cross-attention (builder's cross_attention)",
                ));
            }
            (Some(_), None) => {
                return Err(Error::invalid(
                    OP,
                    "a block with cross-attention needs the encoder's sequence (BlockArgs::encoder)",
                ));
            }
        };
        let mut a = AttentionArgs::new().training(args.training);
        if let Some(m) = args.encoder_padding_mask {
            if enc.rank() == 3 {
                check_padding(OP, m, "encoder padding mask", enc.shape()[0], enc.shape()[1])?;
            }
            a = a.value_mask(m);
        }
        self.residual(x, norm, args.training, |n| mha.call_kept(n, enc, a, kept))
    }

    /// The block over `x [batch, t, d_model]` with the optional
    /// arguments of keras_hub's `TransformerEncoder` and
    /// `TransformerDecoder` calls: a padding mask of `x`'s positions, an
    /// encoder's sequence for the cross-attention and its padding mask,
    /// and whether it is training (dropout).
    ///
    /// ```
    /// use gradtape::nn::{BlockArgs, TransformerBlock};
    /// use gradtape::{DType, Rng, Tensor};
    /// let mut rng = Rng::new(0);
    /// let decoder = TransformerBlock::builder(8, 2, 16).causal(true).cross_attention(8).build(&mut rng)?;
    /// let x = rng.normal(&[1, 3, 8], 0.0, 1.0, DType::F32)?;
    /// let enc = rng.normal(&[1, 4, 8], 0.0, 1.0, DType::F32)?;
    /// // the last encoder position is padding: it is as if it were not there
    /// let real = Tensor::from_vec(vec![true, true, true, false], &[1, 4])?;
    /// let padded = decoder.call_with(&x, BlockArgs::new().encoder(&enc).encoder_padding_mask(&real))?;
    /// let cut = decoder.call_with(&x, BlockArgs::new().encoder(&enc.narrow(1, 0, 3)?))?;
    /// let (a, b) = (padded.to_vec::<f32>()?, cut.to_vec::<f32>()?);
    /// assert!(a.iter().zip(&b).all(|(a, b)| (a - b).abs() < 1e-6));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn call_with(&self, x: &Tensor, args: BlockArgs<'_>) -> Result<Tensor> {
        self.check(x)?;
        if let Some(m) = args.padding_mask {
            check_padding(OP, m, "padding mask", x.shape()[0], x.shape()[1])?;
        }
        let x = self.residual(x, &self.ln_1, args.training, |n| {
            let mut a = AttentionArgs::new()
                .use_causal_mask(self.causal)
                .training(args.training);
            if let Some(m) = args.padding_mask {
                a = a.value_mask(m);
            }
            self.attention.call_with(n, n, a)
        })?;
        let x = self.cross_attend(&x, &args, None)?;
        self.feed_forward(&x, args.training)
    }

    /// The block on a padded batch: `padding_mask` `[batch, time]` (bool)
    /// is true at the real tokens and false at the padding, which no
    /// position attends to (keras_hub's `padding_mask` of its
    /// `TransformerEncoder` and `TransformerDecoder`: it hides keys, the
    /// padded positions' own outputs are computed but mean nothing). With
    /// the padding at the end of each row, the real positions' outputs are
    /// those of the block on the unpadded sequence:
    ///
    /// ```
    /// use gradtape::nn::{Layer, TransformerBlock};
    /// use gradtape::{DType, Rng, Tensor};
    /// let mut rng = Rng::new(0);
    /// let block = TransformerBlock::builder(8, 2, 16).dtype(DType::F64).build(&mut rng)?;
    /// let x = rng.normal(&[1, 5, 8], 0.0, 1.0, DType::F64)?;
    /// let real = Tensor::from_vec(vec![true, true, true, false, false], &[1, 5])?;
    /// let padded = block.forward_with_padding(&x, &real, false)?.narrow(1, 0, 3)?;
    /// let alone = block.forward(&x.narrow(1, 0, 3)?, false)?;
    /// let (a, b) = (padded.to_vec::<f64>()?, alone.to_vec::<f64>()?);
    /// assert!(a.iter().zip(&b).all(|(a, b)| (a - b).abs() < 1e-12));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn forward_with_padding(&self, x: &Tensor, padding_mask: &Tensor, training: bool) -> Result<Tensor> {
        self.call_with(x, BlockArgs::new().padding_mask(padding_mask).training(training))
    }

    /// The block on the new positions `x [batch, t_new, d_model]` of a
    /// sequence whose earlier positions are in `cache` (which it extends;
    /// see [`MultiHeadAttention::call_cached`]): the rows of the whole
    /// sequence's output at those positions. Inference only; the block
    /// must be causal. A model keeps one cache per block:
    ///
    /// ```
    /// use gradtape::nn::{KvCache, TransformerBlock};
    /// use gradtape::{DType, Rng, Tensor};
    /// let mut rng = Rng::new(0);
    /// let blocks: Vec<TransformerBlock> = (0..2)
    ///     .map(|_| TransformerBlock::builder(8, 2, 32).causal(true).build(&mut rng))
    ///     .collect::<Result<_, _>>()?;
    /// let mut caches = vec![KvCache::new(); blocks.len()];
    /// let mut h = rng.normal(&[1, 4, 8], 0.0, 1.0, DType::F32)?;   // a prompt
    /// for step in 0..3 {
    ///     for (b, c) in blocks.iter().zip(&mut caches) {
    ///         h = b.call_cached(&h, c)?;
    ///     }
    ///     h = h.narrow(1, h.shape()[1] - 1, 1)?;                  // feed the last back
    /// }
    /// assert_eq!(caches[0].len(), 4 + 2);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn call_cached(&self, x: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        self.call_cached_with(x, cache, BlockArgs::new())
    }

    /// A cache of fixed capacity for [`call_cached`](Self::call_cached),
    /// one trace of a decoding step serving every position (see
    /// [`MultiHeadAttention::kv_cache`]).
    ///
    /// ```
    /// use gradtape::{nn::TransformerBlock, Rng};
    /// let block = TransformerBlock::builder(8, 2, 16).causal(true).build(&mut Rng::new(0))?;
    /// assert_eq!(block.kv_cache(2, 32)?.keys().unwrap().shape(), &[2, 2, 32, 4]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn kv_cache(&self, batch: usize, max_length: usize) -> Result<KvCache> {
        self.attention.kv_cache(batch, max_length)
    }

    /// [`call_cached`](Self::call_cached) with the encoder's sequence (and
    /// its padding mask) in `args` for a block with cross-attention: each
    /// new position also attends to the whole encoder's sequence.
    /// Inference without a padding mask of the new positions.
    ///
    /// ```
    /// use gradtape::nn::{BlockArgs, KvCache, TransformerBlock};
    /// use gradtape::{DType, Rng};
    /// let mut rng = Rng::new(0);
    /// let decoder = TransformerBlock::builder(8, 2, 16).causal(true).cross_attention(8).dtype(DType::F64).build(&mut rng)?;
    /// let (x, enc) = (rng.normal(&[1, 4, 8], 0.0, 1.0, DType::F64)?, rng.normal(&[1, 6, 8], 0.0, 1.0, DType::F64)?);
    /// let args = BlockArgs::new().encoder(&enc);
    /// let full = decoder.call_with(&x, args)?;
    /// let mut cache = KvCache::new();
    /// decoder.call_cached_with(&x.narrow(1, 0, 3)?, &mut cache, args)?;
    /// let last = decoder.call_cached_with(&x.narrow(1, 3, 1)?, &mut cache, args)?;
    /// let (a, b) = (last.to_vec::<f64>()?, full.narrow(1, 3, 1)?.to_vec::<f64>()?);
    /// assert!(a.iter().zip(&b).all(|(a, b)| (a - b).abs() < 1e-12));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn call_cached_with(&self, x: &Tensor, cache: &mut KvCache, args: BlockArgs<'_>) -> Result<Tensor> {
        if !self.causal {
            return Err(Error::invalid(
                OP,
                "call_cached decodes: it needs a causal block (builder's causal(true))",
            ));
        }
        if args.padding_mask.is_some() || args.training {
            return Err(Error::invalid(
                OP,
                "call_cached decodes at inference: no padding mask of the new positions, no training",
            ));
        }
        self.check(x)?;
        let x = self.residual(x, &self.ln_1, false, |n| self.attention.call_cached(n, cache))?;
        let x = self.cross_attend(&x, &args, Some(&mut cache.cross))?;
        self.feed_forward(&x, false)
    }
}

impl Module for TransformerBlock {
    /// The first norm's, the attention's (Keras's order), the second
    /// norm's, then the feed-forward's (intermediate, gate, output).
    fn variables(&self) -> Vec<Variable> {
        let mut v = self.ln_1.variables();
        v.extend(self.attention.variables());
        if let Some((norm, mha)) = &self.cross {
            v.extend(norm.variables());
            v.extend(mha.variables());
        }
        v.extend(self.ln_2.variables());
        v.extend(self.ff_1.variables());
        if let Some(g) = &self.gate {
            v.extend(g.variables());
        }
        v.extend(self.ff_2.variables());
        v
    }
}

impl Layer for TransformerBlock {
    fn name(&self) -> &str {
        &self.name
    }

    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        self.call_with(x, BlockArgs::new().training(training))
    }
}

/// The optional arguments of [`TransformerBlock::call_with`] (keras_hub's
/// `TransformerDecoder` call's).
///
/// ```
/// use gradtape::{nn::BlockArgs, Tensor};
/// let pad = Tensor::from_vec(vec![true, false], &[1, 2])?;
/// let args = BlockArgs::new().padding_mask(&pad).training(true);
/// assert!(args.training && args.encoder.is_none());
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Copy, Default, Debug)]
pub struct BlockArgs<'a> {
    /// `[batch, t]` bool, false at the padding of the block's input, which
    /// no position attends to (keras_hub's `padding_mask` /
    /// `decoder_padding_mask`); or 0/1 integers, 0 at the padding.
    pub padding_mask: Option<&'a Tensor>,
    /// The encoder's sequence `[batch, s, encoder_features]` for a block
    /// with cross-attention (keras_hub's `encoder_sequence`).
    pub encoder: Option<&'a Tensor>,
    /// `[batch, s]` bool, false at the encoder's padding (keras_hub's
    /// `encoder_padding_mask`); or 0/1 integers.
    pub encoder_padding_mask: Option<&'a Tensor>,
    /// Applies the dropouts (when the block has them).
    pub training: bool,
}

impl<'a> BlockArgs<'a> {
    /// No masks, no encoder, inference.
    pub fn new() -> BlockArgs<'a> {
        BlockArgs::default()
    }
    /// Sets [`padding_mask`](Self::padding_mask).
    pub fn padding_mask(mut self, m: &'a Tensor) -> Self {
        self.padding_mask = Some(m);
        self
    }
    /// Sets [`encoder`](Self::encoder).
    pub fn encoder(mut self, e: &'a Tensor) -> Self {
        self.encoder = Some(e);
        self
    }
    /// Sets [`encoder_padding_mask`](Self::encoder_padding_mask).
    pub fn encoder_padding_mask(mut self, m: &'a Tensor) -> Self {
        self.encoder_padding_mask = Some(m);
        self
    }
    /// Sets [`training`](Self::training).
    pub fn training(mut self, training: bool) -> Self {
        self.training = training;
        self
    }
}
