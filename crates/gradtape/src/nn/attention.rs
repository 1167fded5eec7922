//! `MultiHeadAttention`, Keras's layer of the same name (weights laid out
//! as Keras's; with fewer key/value heads, Keras's `GroupedQueryAttention`),
//! and the [`KvCache`] that lets it decode one position at a time
//! (`attention_args.rs`, with the call's [`AttentionArgs`]).

use std::sync::Mutex;

use super::{expect_float_dtype, new_weight, unique_name, Initializer, Layer, Module, RotaryEmbedding};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::ops::{AttentionDropout, HiddenRows};
use crate::random::Rng;
use crate::tensor::{DType, Tensor};

use super::attention_args::{window_band, CrossKv};
pub use super::attention_args::{AttentionArgs, KvCache};
use super::attention_projection::Projection;

mod axes;
mod cached;

const OP: &str = "MultiHeadAttention";

/// Multi-head attention, Keras's `MultiHeadAttention`: the query, key and
/// value inputs are projected to `num_heads` heads (`query/kernel
/// [query_features, heads, key_dim]`, `query/bias [heads, key_dim]`, the
/// same for `key` and for `value` with `value_dim`), each head computes
/// `softmax(q kᵀ / sqrt(key_dim) + mask) v`, and `attention_output/kernel
/// [heads, value_dim, out]` with `attention_output/bias [out]` maps the
/// heads back. Inputs are `[batch, time, features]`.
///
/// The weights are created at [`build`](MultiHeadAttentionBuilder::build),
/// which takes the query's feature size (Keras creates them at the first
/// call); the key and value inputs have the query's unless
/// [`value_features`](MultiHeadAttentionBuilder::value_features) /
/// [`key_features`](MultiHeadAttentionBuilder::key_features) say otherwise
/// (cross-attention).
///
/// The heads run the fused [`Tensor::scaled_dot_product_attention`];
/// while training with dropout,
/// [`Tensor::scaled_dot_product_attention_dropout`], which drops attention
/// probabilities as Keras does, inside the fused kernels.
///
/// As a [`Layer`], `forward(x, training)` is unmasked self-attention; use
/// [`call_with`](Self::call_with) for masks, causal attention and
/// cross-attention, and [`call_cached`](Self::call_cached) to decode.
///
/// ```
/// use gradtape::nn::{AttentionArgs, Layer, Module, MultiHeadAttention};
/// use gradtape::{DType, Rng, Tensor};
/// let mut rng = Rng::new(0);
/// let mha = MultiHeadAttention::builder(2, 4).build(8, &mut rng)?;
/// let x = rng.normal(&[3, 5, 8], 0.0, 1.0, DType::F32)?;
/// let y = mha.call_with(&x, &x, AttentionArgs::new().use_causal_mask(true))?;
/// assert_eq!(y.shape(), &[3, 5, 8]);
/// assert_eq!(mha.call(&x)?.shape(), &[3, 5, 8]);
/// assert_eq!(mha.variables()[0].name(), format!("{}/query/kernel", mha.name()));
/// assert_eq!(mha.variables()[0].shape(), vec![8, 2, 4]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct MultiHeadAttention {
    name: String,
    num_heads: usize,
    /// key/value heads (fewer than `num_heads` in grouped-query attention)
    kv_heads: usize,
    key_dim: usize,
    value_dim: usize,
    /// query, key and value input features
    features: [usize; 3],
    dropout: f64,
    rotary: Option<RotaryEmbedding>,
    /// Keras's `sliding_window`: a query sees keys within `w - 1` positions
    window: Option<usize>,
    /// Keras's `attention_axes` (`None`: every axis but the batch's and
    /// the features')
    attention_axes: Option<Vec<isize>>,
    rng: Mutex<Rng>,
    query: Projection,
    key: Projection,
    /// Keras's `use_gate`: `sigmoid` of this projection of the query
    /// scales each head's output
    gate: Option<Projection>,
    value: Projection,
    output: Projection,
}

/// Options for a [`MultiHeadAttention`] layer; see
/// [`MultiHeadAttention::builder`].
pub struct MultiHeadAttentionBuilder {
    num_heads: usize,
    kv_heads: Option<usize>,
    key_dim: usize,
    value_dim: Option<usize>,
    dropout: f64,
    use_bias: bool,
    output_shape: Option<usize>,
    kernel_init: Initializer,
    bias_init: Initializer,
    dtype: DType,
    name: Option<String>,
    value_features: Option<usize>,
    key_features: Option<usize>,
    rotary: Option<RotaryEmbedding>,
    sliding_window: Option<usize>,
    use_gate: bool,
    attention_axes: Option<Vec<isize>>,
}

impl MultiHeadAttentionBuilder {
    /// The size of each head's values (default `key_dim`).
    pub fn value_dim(mut self, d: usize) -> Self {
        self.value_dim = Some(d);
        self
    }
    /// The number of key/value heads (default `num_heads`): fewer makes
    /// grouped-query attention, Keras's `GroupedQueryAttention` (its
    /// `num_key_value_heads`; `key/kernel` and `value/kernel` are
    /// `[features, n, dim]`), each key/value head shared by `num_heads / n`
    /// consecutive query heads. It must divide `num_heads`.
    ///
    /// ```
    /// use gradtape::{nn::{Module, MultiHeadAttention}, Rng};
    /// let gqa = MultiHeadAttention::builder(8, 16).num_key_value_heads(2).build(64, &mut Rng::new(0))?;
    /// let shapes: Vec<Vec<usize>> = gqa.variables().iter().map(|v| v.shape()).collect();
    /// assert_eq!(shapes[0], vec![64, 8, 16]); // query/kernel
    /// assert_eq!(shapes[2], vec![64, 2, 16]); // key/kernel
    /// assert!(MultiHeadAttention::builder(8, 16).num_key_value_heads(3).build(64, &mut Rng::new(0)).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn num_key_value_heads(mut self, n: usize) -> Self {
        self.kv_heads = Some(n);
        self
    }
    /// Rotates each head's queries and keys by their positions with
    /// `rope` (rotary position embedding, as Llama's attention), after the
    /// projections; `rope`'s own axes are not used (the heads are
    /// `[batch, heads, time, dim]`). Queries and keys count positions from
    /// 0, and [`call_cached`](MultiHeadAttention::call_cached) from the
    /// cache's length. `key_dim` must be even.
    ///
    /// ```
    /// use gradtape::nn::{AttentionArgs, MultiHeadAttention, RotaryEmbedding};
    /// use gradtape::{DType, Rng};
    /// let mut rng = Rng::new(0);
    /// let rope = RotaryEmbedding::builder().build()?;
    /// let mha = MultiHeadAttention::builder(4, 8).rotary_embedding(rope).build(16, &mut rng)?;
    /// let x = rng.normal(&[2, 5, 16], 0.0, 1.0, DType::F32)?;
    /// assert_eq!(mha.call_with(&x, &x, AttentionArgs::new().use_causal_mask(true))?.shape(), &[2, 5, 16]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn rotary_embedding(mut self, rope: RotaryEmbedding) -> Self {
        self.rotary = Some(rope);
        self
    }
    /// Keras's `sliding_window`: query `i` attends only to keys `j` with
    /// `|i - j| < w` (a band of `2w - 1` keys; with the causal mask, the
    /// `w` keys up to its own position, as Mistral's attention). Combined
    /// with every other mask given; in
    /// [`call_cached`](MultiHeadAttention::call_cached), positions count
    /// from the start of the sequence. `w` must be positive.
    ///
    /// ```
    /// use gradtape::nn::{AttentionArgs, MultiHeadAttention};
    /// use gradtape::{DType, Rng};
    /// let mut rng = Rng::new(0);
    /// let mha = MultiHeadAttention::builder(2, 4).sliding_window(1).dtype(DType::F64).build(8, &mut rng)?;
    /// let x = rng.normal(&[1, 3, 8], 0.0, 1.0, DType::F64)?;
    /// let (_, p) = mha.call_with_scores(&x, &x, AttentionArgs::new())?;
    /// // a window of one: every query sees its own key only
    /// assert_eq!(p.to_vec::<f64>()?[..9], [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]);
    /// assert!(MultiHeadAttention::builder(2, 4).sliding_window(0).build(8, &mut rng).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn sliding_window(mut self, w: usize) -> Self {
        self.sliding_window = Some(w);
        self
    }
    /// Keras's `use_gate` (gated attention): each head's output is
    /// multiplied by `sigmoid` of a fourth projection of the query,
    /// `gate/kernel [query_features, heads, value_dim]` (and `gate/bias
    /// [heads, value_dim]`), before the output projection. Default false.
    ///
    /// ```
    /// use gradtape::{nn::{Layer, Module, MultiHeadAttention}, Rng};
    /// let mha = MultiHeadAttention::builder(2, 4).use_gate(true).build(8, &mut Rng::new(0))?;
    /// let names: Vec<String> = mha.variables().iter().map(|v| v.name().to_string()).collect();
    /// assert_eq!(names[4], format!("{}/gate/kernel", mha.name()));
    /// assert_eq!(mha.variables()[4].shape(), vec![8, 2, 4]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn use_gate(mut self, on: bool) -> Self {
        self.use_gate = on;
        self
    }
    /// Keras's `attention_axes`: the axes of the inputs attention runs
    /// over (default: every axis but the batch's and the features', the
    /// time axis of `[batch, time, features]`). For inputs `[batch, d1,
    /// ..., features]` the heads are split from the features, the scores
    /// are over the product of the attention axes (each query position
    /// sees every key position of them, one softmax), and the other axes
    /// are batch-like; scores come out as Keras's `[batch, other...,
    /// heads, query's attention axes..., key's attention axes...]` and an
    /// attention mask goes in in that layout (the heads' axis optional).
    /// Negative axes count from the end; the batch, the features, repeats
    /// and axes out of range are errors at the call. The padding masks,
    /// the causal mask and the sliding window need the default axes.
    ///
    /// ```
    /// use gradtape::nn::{AttentionArgs, MultiHeadAttention};
    /// use gradtape::{DType, Rng};
    /// let mut rng = Rng::new(0);
    /// let mha = MultiHeadAttention::builder(2, 4).attention_axes(&[1, 2]).build(8, &mut rng)?;
    /// let img = rng.normal(&[2, 3, 4, 8], 0.0, 1.0, DType::F32)?; // [B, H, W, C]
    /// let (y, scores) = mha.call_with_scores(&img, &img, AttentionArgs::new())?;
    /// assert_eq!((y.shape(), scores.shape()), (&[2, 3, 4, 8][..], &[2, 2, 3, 4, 3, 4][..]));
    /// let last = MultiHeadAttention::builder(2, 4).attention_axes(&[3]).build(8, &mut rng)?;
    /// let err = last.call_with(&img, &img, AttentionArgs::new()).unwrap_err();
    /// assert!(err.to_string().contains("attention_axes"), "{err}");
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn attention_axes(mut self, axes: &[isize]) -> Self {
        self.attention_axes = Some(axes.to_vec());
        self
    }
    /// The dropout rate on the attention probabilities while training
    /// (default 0), in `[0, 1)`.
    pub fn dropout(mut self, rate: f64) -> Self {
        self.dropout = rate;
        self
    }
    /// Whether the four projections have biases (default true).
    pub fn use_bias(mut self, b: bool) -> Self {
        self.use_bias = b;
        self
    }
    /// The output's feature size (default the query's).
    pub fn output_shape(mut self, out: usize) -> Self {
        self.output_shape = Some(out);
        self
    }
    /// The kernels' initialiser (default Glorot uniform).
    pub fn kernel_initializer(mut self, i: Initializer) -> Self {
        self.kernel_init = i;
        self
    }
    /// The biases' initialiser (default zeros).
    pub fn bias_initializer(mut self, i: Initializer) -> Self {
        self.bias_init = i;
        self
    }
    /// The weights' dtype (default f32).
    pub fn dtype(mut self, d: DType) -> Self {
        self.dtype = d;
        self
    }
    /// The layer's name (default `multi_head_attention`, made unique).
    pub fn name(mut self, n: impl Into<String>) -> Self {
        self.name = Some(n.into());
        self
    }
    /// The feature size of the `value` input (default the query's).
    pub fn value_features(mut self, n: usize) -> Self {
        self.value_features = Some(n);
        self
    }
    /// The feature size of the `key` input (default the value's).
    pub fn key_features(mut self, n: usize) -> Self {
        self.key_features = Some(n);
        self
    }

    /// Creates the weights for queries of `query_features` features,
    /// drawing from `rng`. Zero sizes and a dropout rate outside `[0, 1)`
    /// are errors:
    ///
    /// ```
    /// use gradtape::{nn::MultiHeadAttention, Rng};
    /// let mut rng = Rng::new(0);
    /// assert!(MultiHeadAttention::builder(0, 4).build(8, &mut rng).is_err());
    /// assert!(MultiHeadAttention::builder(2, 4).dropout(1.0).build(8, &mut rng).is_err());
    /// ```
    pub fn build(self, query_features: usize, rng: &mut Rng) -> Result<MultiHeadAttention> {
        expect_float_dtype(OP, self.dtype)?;
        let value_dim = self.value_dim.unwrap_or(self.key_dim);
        let value_features = self.value_features.unwrap_or(query_features);
        let key_features = self.key_features.unwrap_or(value_features);
        let out = self.output_shape.unwrap_or(query_features);
        let kv_heads = self.kv_heads.unwrap_or(self.num_heads);
        let sizes = [
            ("num_heads", self.num_heads),
            ("num_key_value_heads", kv_heads),
            ("key_dim", self.key_dim),
            ("value_dim", value_dim),
            ("query features", query_features),
            ("key features", key_features),
            ("value features", value_features),
            ("output_shape", out),
        ];
        if let Some((what, _)) = sizes.iter().find(|(_, n)| *n == 0) {
            return Err(Error::invalid(OP, format!("{what} must be positive, got 0")));
        }
        if self.rotary.is_some() && !self.key_dim.is_multiple_of(2) {
            return Err(Error::invalid(
                OP,
                format!("rotary position embedding needs an even key_dim, got {}", self.key_dim),
            ));
        }
        if !self.num_heads.is_multiple_of(kv_heads) {
            return Err(Error::invalid(
                OP,
                format!(
                    "num_key_value_heads ({kv_heads}) must divide num_heads ({})",
                    self.num_heads
                ),
            ));
        }
        if self.attention_axes.as_ref().is_some_and(Vec::is_empty) {
            return Err(Error::invalid(OP, "attention_axes must name at least one axis"));
        }
        if self.sliding_window == Some(0) {
            return Err(Error::invalid(OP, "sliding_window must be positive, got 0"));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(Error::invalid(
                OP,
                format!("dropout must lie in [0, 1), got {}", self.dropout),
            ));
        }
        let name = self.name.unwrap_or_else(|| unique_name("multi_head_attention"));
        let heads = self.num_heads;
        let mut proj = |part: &str, kernel: &[usize], bias: &[usize]| -> Result<Projection> {
            let layer = format!("{name}/{part}");
            Ok(Projection {
                kernel: new_weight(&layer, "kernel", kernel, self.dtype, &self.kernel_init, rng, true)?,
                bias: self
                    .use_bias
                    .then(|| new_weight(&layer, "bias", bias, self.dtype, &self.bias_init, rng, true))
                    .transpose()?,
            })
        };
        let query = proj("query", &[query_features, heads, self.key_dim], &[heads, self.key_dim])?;
        let key = proj(
            "key",
            &[key_features, kv_heads, self.key_dim],
            &[kv_heads, self.key_dim],
        )?;
        // (built in Keras's order, which is the variables' order)
        let gate = self
            .use_gate
            .then(|| proj("gate", &[query_features, heads, value_dim], &[heads, value_dim]))
            .transpose()?;
        let value = proj("value", &[value_features, kv_heads, value_dim], &[kv_heads, value_dim])?;
        let output = proj("attention_output", &[heads, value_dim, out], &[out])?;
        Ok(MultiHeadAttention {
            name,
            num_heads: heads,
            kv_heads,
            key_dim: self.key_dim,
            value_dim,
            features: [query_features, key_features, value_features],
            dropout: self.dropout,
            rotary: self.rotary,
            window: self.sliding_window,
            attention_axes: self.attention_axes,
            rng: Mutex::new(rng.split()),
            query,
            key,
            gate,
            value,
            output,
        })
    }
}

impl MultiHeadAttention {
    /// Starts a layer of `num_heads` heads whose queries and keys have
    /// `key_dim` features each.
    ///
    /// ```
    /// use gradtape::{nn::{Module, MultiHeadAttention}, DType, Rng};
    /// let mha = MultiHeadAttention::builder(4, 8)
    ///     .value_dim(6)
    ///     .value_features(10)
    ///     .output_shape(12)
    ///     .use_bias(false)
    ///     .dtype(DType::F64)
    ///     .name("cross")
    ///     .build(16, &mut Rng::new(0))?;
    /// let shapes: Vec<Vec<usize>> = mha.variables().iter().map(|v| v.shape()).collect();
    /// assert_eq!(shapes, vec![vec![16, 4, 8], vec![10, 4, 8], vec![10, 4, 6], vec![4, 6, 12]]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn builder(num_heads: usize, key_dim: usize) -> MultiHeadAttentionBuilder {
        MultiHeadAttentionBuilder {
            num_heads,
            kv_heads: None,
            key_dim,
            value_dim: None,
            dropout: 0.0,
            use_bias: true,
            output_shape: None,
            kernel_init: Initializer::GlorotUniform,
            bias_init: Initializer::Zeros,
            dtype: DType::F32,
            name: None,
            value_features: None,
            key_features: None,
            rotary: None,
            sliding_window: None,
            use_gate: false,
            attention_axes: None,
        }
    }

    /// The number of heads.
    ///
    /// ```
    /// use gradtape::{nn::MultiHeadAttention, Rng};
    /// let mha = MultiHeadAttention::builder(4, 8).value_dim(16).build(32, &mut Rng::new(0))?;
    /// assert_eq!((mha.num_heads(), mha.key_dim(), mha.value_dim()), (4, 8, 16));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn num_heads(&self) -> usize {
        self.num_heads
    }

    /// The number of key/value heads (`num_heads` unless grouped).
    pub fn num_key_value_heads(&self) -> usize {
        self.kv_heads
    }

    /// The size of each head's queries and keys.
    pub fn key_dim(&self) -> usize {
        self.key_dim
    }

    /// The size of each head's values.
    pub fn value_dim(&self) -> usize {
        self.value_dim
    }

    fn dtype(&self) -> DType {
        self.query.kernel.dtype()
    }

    /// Checks an input `[batch, t, features]`.
    fn check_input(&self, what: &str, x: &Tensor, features: usize) -> Result<()> {
        if x.dtype() != self.dtype() {
            return Err(Error::DTypeMismatch {
                op: OP,
                lhs: x.dtype(),
                rhs: self.dtype(),
            });
        }
        if x.rank() != 3 || x.shape()[2] != features {
            return Err(Error::invalid(
                OP,
                format!(
                    "the {what} input must be [batch, time, {features}], got {:?}",
                    x.shape()
                ),
            ));
        }
        Ok(())
    }

    /// Attention of `query` `[batch, t_q, query_features]` to `value`
    /// `[batch, t_k, value_features]` (and `args.key`, `[batch, t_k,
    /// key_features]`, by default `value`), Keras's `mha(query, value,
    /// key=..., attention_mask=..., use_causal_mask=..., training=...)`,
    /// with the padding masks Keras reads from its inputs passed in
    /// `args` ([`AttentionArgs`] says how the masks combine);
    /// gives `[batch, t_q, output_shape]`.
    ///
    /// ```
    /// use gradtape::nn::{AttentionArgs, MultiHeadAttention};
    /// use gradtape::{DType, Rng, Tensor};
    /// let mut rng = Rng::new(0);
    /// let mha = MultiHeadAttention::builder(2, 3).value_features(5).build(4, &mut rng)?;
    /// let q = rng.normal(&[2, 3, 4], 0.0, 1.0, DType::F32)?;
    /// let v = rng.normal(&[2, 6, 5], 0.0, 1.0, DType::F32)?;
    /// // every query sees the first four keys only
    /// let mask = Tensor::from_vec((0..36).map(|i| i % 6 < 4).collect::<Vec<_>>(), &[2, 3, 6])?;
    /// let y = mha.call_with(&q, &v, AttentionArgs::new().attention_mask(&mask))?;
    /// assert_eq!(y.shape(), &[2, 3, 4]);
    /// assert!(mha.call_with(&v, &v, AttentionArgs::new()).is_err()); // 5 query features, not 4
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn call_with(&self, query: &Tensor, value: &Tensor, args: AttentionArgs<'_>) -> Result<Tensor> {
        self.call_kept(query, value, args, None)
    }

    /// [`call_with`](Self::call_with), the key and value heads taken from
    /// `kept` when it holds those of `args`' key and `value`, else
    /// projected (and kept there when there is a slot): a decoder's
    /// cross-attention while it decodes.
    pub(super) fn call_kept(
        &self,
        query: &Tensor,
        value: &Tensor,
        args: AttentionArgs<'_>,
        kept: Option<&mut Option<CrossKv>>,
    ) -> Result<Tensor> {
        match self.axes_plan(query, value, &args)? {
            Some(plan) => Ok(plan.run(self, query, value, args, false)?.0),
            None => self.call_flat(query, value, args, kept),
        }
    }

    /// [`call_kept`](Self::call_kept) on `[batch, time, features]` inputs
    /// attended over the time axis.
    fn call_flat(
        &self,
        query: &Tensor,
        value: &Tensor,
        args: AttentionArgs<'_>,
        kept: Option<&mut Option<CrossKv>>,
    ) -> Result<Tensor> {
        let (q, k, v, mask) = self.project(query, value, &args, kept)?;
        // Keras's default path (`ops.dot_product_attention`, taken by a
        // layer without dropout when no scores are asked for) replaces
        // every masked score by one large negative number: a query row
        // that sees no key gets uniform probabilities, the mean of the
        // values, and no gradient to the queries and keys. (Its other
        // path, with dropout or with the scores, gives such rows zero
        // probabilities: the fused op's zeros.)
        let hidden = if mask.is_some() && self.dropout == 0.0 {
            HiddenRows::Mean
        } else {
            HiddenRows::Zeros
        };
        let o = self.attend(&q, &k, &v, mask.as_ref(), args.use_causal_mask, args.training, hidden)?;
        self.output.merge(&self.gated(query, o)?)
    }

    /// [`call_with`](Self::call_with) that also gives the attention
    /// scores, Keras's `return_attention_scores=True`: the output `[batch,
    /// t_q, output_shape]` and the heads' probabilities `[batch, heads,
    /// t_q, t_k]`, each row a softmax over the keys (zero where masked),
    /// taken before the attention dropout, as Keras returns them. The
    /// output is [`call_with`](Self::call_with)'s (the same fused kernel
    /// and dropout); the scores are computed beside it, a `[t_q, t_k]`
    /// matrix per head, so ask for them only when they are wanted. Both
    /// are differentiable.
    ///
    /// ```
    /// use gradtape::nn::{AttentionArgs, MultiHeadAttention};
    /// use gradtape::{DType, Rng};
    /// let mut rng = Rng::new(0);
    /// let mha = MultiHeadAttention::builder(2, 3).dtype(DType::F64).build(4, &mut rng)?;
    /// let x = rng.normal(&[1, 3, 4], 0.0, 1.0, DType::F64)?;
    /// let (y, scores) = mha.call_with_scores(&x, &x, AttentionArgs::new().use_causal_mask(true))?;
    /// assert_eq!((y.shape(), scores.shape()), (&[1, 3, 4][..], &[1, 2, 3, 3][..]));
    /// let p = scores.to_vec::<f64>()?;
    /// // the first query sees the first key only; every row sums to one
    /// assert_eq!((p[0], p[1], p[2]), (1.0, 0.0, 0.0));
    /// assert!(p.chunks(3).all(|row| (row.iter().sum::<f64>() - 1.0).abs() < 1e-12));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn call_with_scores(
        &self,
        query: &Tensor,
        value: &Tensor,
        args: AttentionArgs<'_>,
    ) -> Result<(Tensor, Tensor)> {
        match self.axes_plan(query, value, &args)? {
            Some(plan) => {
                let (y, s) = plan.run(self, query, value, args, true)?;
                Ok((y, s.expect("asked for")))
            }
            None => self.scores_flat(query, value, args),
        }
    }

    /// [`call_with_scores`](Self::call_with_scores) on `[batch, time,
    /// features]` inputs attended over the time axis.
    fn scores_flat(&self, query: &Tensor, value: &Tensor, args: AttentionArgs<'_>) -> Result<(Tensor, Tensor)> {
        let (q, k, v, mask) = self.project(query, value, &args, None)?;
        let o = self.attend(
            &q,
            &k,
            &v,
            mask.as_ref(),
            args.use_causal_mask,
            args.training,
            HiddenRows::Zeros,
        )?;
        let scores = self.scores(&q, &self.repeat_kv(&k)?, mask.as_ref(), args.use_causal_mask)?;
        Ok((self.output.merge(&self.gated(query, o)?)?, scores))
    }

    /// The heads' probabilities `softmax(q kᵀ / √key_dim)` `[b, h, tq,
    /// tk]`, masked as Keras 3's softmax masks: a hidden key's score
    /// replaced by a large negative number (-1e9, -3e4 in f16) before the
    /// softmax and its probability by 0 after (so a row that sees no key
    /// is all zeros).
    fn scores(&self, q: &Tensor, k: &Tensor, mask: Option<&Tensor>, causal: bool) -> Result<Tensor> {
        let scale = 1.0 / (self.key_dim as f64).sqrt();
        let s = q.matmul_with(k, false, true)?.mul_scalar(scale)?;
        let (tq, tk) = (q.shape()[2], k.shape()[2]);
        let keep = match (mask, causal) {
            (None, false) => return s.softmax(-1),
            (Some(m), false) => m.clone(),
            (None, true) => causal_mask(tq, tk, 0, s.device())?,
            (Some(m), true) => m.logical_and(&causal_mask(tq, tk, 0, s.device())?)?,
        };
        let dtype = s.dtype();
        let hidden = if dtype == DType::F16 { -3e4 } else { -1e9 };
        let p = Tensor::where_(&keep, &s, &s.scalar_like(hidden)?)?.softmax(-1)?;
        Tensor::where_(&keep, &p, &p.scalar_like(0.0)?)
    }

    /// Checks the inputs and projects them into the heads: `q` `[b, h, t,
    /// dim]`, `k`, `v` `[b, kv_heads, t, dim]` and the mask `[b|1, 1, tq, tk]`; `k` and `v` from
    /// `kept` where it holds them (see [`call_kept`](Self::call_kept)).
    fn project(
        &self,
        query: &Tensor,
        value: &Tensor,
        args: &AttentionArgs<'_>,
        kept: Option<&mut Option<CrossKv>>,
    ) -> Result<(Tensor, Tensor, Tensor, Option<Tensor>)> {
        let key = args.key.unwrap_or(value);
        self.check_input("query", query, self.features[0])?;
        self.check_input("key", key, self.features[1])?;
        self.check_input("value", value, self.features[2])?;
        let (b, tq, tk) = (query.shape()[0], query.shape()[1], value.shape()[1]);
        if key.shape()[..2] != value.shape()[..2] || value.shape()[0] != b {
            return Err(Error::invalid(
                OP,
                format!(
                    "query [batch, t_q, _], key and value [batch, t_k, _] must agree, got {:?}, {:?} and {:?}",
                    query.shape(),
                    key.shape(),
                    value.shape()
                ),
            ));
        }
        let mask = args.combined_mask(
            OP,
            (b, tq, tk),
            Some(self.num_heads),
            self.window.map(|w| (w, 0)),
            query.device(),
        )?;
        if kept.is_none() && query.id() == key.id() && key.id() == value.id() {
            // self-attention: the three projections of one input, one product
            let [q, k, v] = self.query_key_value(query)?;
            let (q, k) = (self.rotate(q, 0)?, self.rotate(k, 0)?);
            return Ok((q, k, v, mask));
        }
        let q = self.rotate(self.query.heads(query, self.num_heads, self.key_dim)?, 0)?;
        if let Some((k, v)) = kept.as_deref().and_then(|slot| CrossKv::of(slot, key, value)) {
            return Ok((q, k, v, mask));
        }
        let (k, v) = if key.id() == value.id() {
            // (cross-attention to one sequence: its key and value heads)
            let kv = Projection::joined_heads(
                &[
                    (&self.key, self.kv_heads, self.key_dim),
                    (&self.value, self.kv_heads, self.value_dim),
                ],
                key,
            )?;
            let [k, v]: [Tensor; 2] = kv.try_into().map_err(|_| Error::invalid(OP, "two projections"))?;
            (k, v)
        } else {
            (
                self.key.heads(key, self.kv_heads, self.key_dim)?,
                self.value.heads(value, self.kv_heads, self.value_dim)?,
            )
        };
        let k = self.rotate(k, 0)?;
        if let Some(slot) = kept {
            *slot = Some(CrossKv {
                key: key.clone(),
                value: value.clone(),
                k: k.clone(),
                v: v.clone(),
            });
        }
        Ok((q, k, v, mask))
    }

    /// The query, key and value heads of one input `x` (not yet rotated
    /// nor repeated), from one product (see `Projection::joined_heads`).
    fn query_key_value(&self, x: &Tensor) -> Result<[Tensor; 3]> {
        let parts = [
            (&self.query, self.num_heads, self.key_dim),
            (&self.key, self.kv_heads, self.key_dim),
            (&self.value, self.kv_heads, self.value_dim),
        ];
        Projection::joined_heads(&parts, x)?
            .try_into()
            .map_err(|_| Error::invalid(OP, "three projections"))
    }

    /// Heads `[b, h, t, dim]` of queries or keys at positions `start..`,
    /// rotated by the layer's rotary embedding (as they are without one).
    fn rotate(&self, x: Tensor, start: usize) -> Result<Tensor> {
        match &self.rotary {
            Some(rope) => rope.rotate(&x, 2, 3, start),
            None => Ok(x),
        }
    }

    /// Key/value heads `[b, kv_heads, t, dim]` repeated for the query heads
    /// (Keras's `ops.repeat`: each `num_heads / kv_heads` times in a row;
    /// for the scores, the attention reads them in place).
    fn repeat_kv(&self, t: &Tensor) -> Result<Tensor> {
        match self.num_heads / self.kv_heads {
            1 => Ok(t.clone()),
            g => t.repeat(g, 1),
        }
    }

    /// The heads' outputs `o` `[b, h, tq, dv]` times the gate of the
    /// query `[b, tq, features]` (as they are without a gate).
    fn gated(&self, query: &Tensor, o: Tensor) -> Result<Tensor> {
        match &self.gate {
            Some(g) => o.mul(&g.heads(query, self.num_heads, self.value_dim)?.sigmoid()?),
            None => Ok(o),
        }
    }

    /// The heads' outputs `[b, h, tq, dv]`; a row that sees no key gives
    /// what `hidden` says (zeros, or with [`HiddenRows::Mean`], which
    /// needs a layer without dropout, the values' mean).
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        causal: bool,
        training: bool,
        hidden: HiddenRows,
    ) -> Result<Tensor> {
        if let Some(g) = crate::ops::grouped(q, k, v, mask)? {
            // (fewer key/value heads: views, no copy; see `ops::nn::gqa`)
            let o = self.attend(&g.q, &g.k, &g.v, g.mask.as_ref(), causal, training, hidden)?;
            return g.ungroup(&o);
        }
        let scale = 1.0 / (self.key_dim as f64).sqrt();
        if !training || self.dropout == 0.0 {
            return q.scaled_dot_product_attention_with_hidden(k, v, mask, causal, Some(scale), hidden);
        }
        // dropout on the probabilities inside the fused kernels, with a new
        // seed per call (and per run of a traced step)
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        rng.draw(|seed| {
            let drop = AttentionDropout {
                rate: self.dropout,
                seed,
            };
            q.scaled_dot_product_attention_dropout(k, v, mask, causal, Some(scale), drop)
        })
    }
}

/// `[tq, tk]`, true where key `j <= i + offset` (query `i`), made on
/// `device` (where the masks it meets are).
pub(crate) fn causal_mask(tq: usize, tk: usize, offset: usize, device: crate::Device) -> Result<Tensor> {
    crate::ops::causal_band(OP, tq, tk, offset)?.to(device)
}

impl Module for MultiHeadAttention {
    /// `query/kernel`, `query/bias`, `key/...`, `gate/...` (with
    /// [`use_gate`](MultiHeadAttentionBuilder::use_gate)), `value/...`,
    /// `attention_output/...`: Keras's order.
    fn variables(&self) -> Vec<Variable> {
        [
            Some(&self.query),
            Some(&self.key),
            self.gate.as_ref(),
            Some(&self.value),
            Some(&self.output),
        ]
        .into_iter()
        .flatten()
        .flat_map(|p| std::iter::once(p.kernel.clone()).chain(p.bias.clone()))
        .collect()
    }
}

impl Layer for MultiHeadAttention {
    fn name(&self) -> &str {
        &self.name
    }

    /// Unmasked self-attention of `x` `[batch, t, features]`.
    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        self.call_with(x, x, AttentionArgs::new().training(training))
    }
}
