//! Keras's attention layers without projections: [`Attention`] (Luong's
//! dot-product scores, or Keras's `"concat"` scores) and
//! [`AdditiveAttention`] (Bahdanau's), which weigh a value sequence by
//! the softmax of scores between a query and a key sequence. Their call
//! takes the [`AttentionArgs`] of [`MultiHeadAttention`](super::MultiHeadAttention).
//! (One struct computes both: [`AdditiveAttention`] wraps an
//! [`Attention`] of additive scores.)
//!
//! Keras's masking, kept here: a hidden key's score has 1e9 (65504 in f16)
//! *subtracted* (not replaced), so a query row that sees no key at all
//! gets the softmax of its unmasked scores as they survive that
//! subtraction; and a masked query's output row is zero.

use std::sync::Mutex;

use super::attention_args::{as_keep, check_padding};
use super::{expect_float_dtype, new_weight, unique_name, AttentionArgs, Dropout, Initializer, Layer, Module};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::random::Rng;
use crate::tensor::{DType, Tensor};

/// How [`Attention`] scores a query against a key (Keras's `score_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoreMode {
    /// `q · k` (times the scale).
    Dot,
    /// `concat_score_weight · Σ tanh(scale · (q + k))` over the features.
    Concat,
}

/// Which layer an [`Attention`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Attention(ScoreMode),
    Additive,
}

impl Kind {
    /// The layer's name in errors.
    fn op(self) -> &'static str {
        match self {
            Kind::Additive => "AdditiveAttention",
            Kind::Attention(_) => "Attention",
        }
    }
}

/// Keras's `Attention` layer: `softmax(scores(q, k)) · v` over inputs
/// `[batch, t, features]`, scores `q · k` (Luong), optionally times a
/// learned scalar `scale` (`use_scale`, initialised to 1), or Keras's
/// `"concat"` scores. No projections: wrap it in [`Dense`](super::Dense)
/// layers for those (or use [`MultiHeadAttention`](super::MultiHeadAttention)).
///
/// ```
/// use gradtape::nn::{Attention, AttentionArgs, ScoreMode};
/// use gradtape::{DType, Rng, Tensor};
/// let mut rng = Rng::new(0);
/// let att = Attention::builder().use_scale(true).build(&mut rng)?;
/// let q = rng.normal(&[2, 3, 4], 0.0, 1.0, DType::F32)?;
/// let v = rng.normal(&[2, 5, 4], 0.0, 1.0, DType::F32)?;
/// let pad = Tensor::from_vec(vec![true, true, true, false, false, true, true, true, true, true], &[2, 5])?;
/// let y = att.call_with(&q, &v, AttentionArgs::new().value_mask(&pad))?;
/// assert_eq!(y.shape(), &[2, 3, 4]);
/// let concat = Attention::builder().score_mode(ScoreMode::Concat).build(&mut rng)?;
/// assert_eq!(concat.call_with(&q, &v, AttentionArgs::new().use_causal_mask(true))?.shape(), &[2, 3, 4]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Attention {
    name: String,
    kind: Kind,
    /// the scale: a scalar (Attention) or `[features]` (AdditiveAttention)
    scale: Option<Variable>,
    /// `concat_score_weight`, a scalar (concat scores only)
    concat_weight: Option<Variable>,
    dropout: Option<Mutex<Dropout>>,
    dtype: DType,
}

/// Keras's `AdditiveAttention` layer (Bahdanau's): scores `Σ scale ·
/// tanh(q + k)` over the features, with a learned `scale` vector
/// `[features]` (Glorot-uniform; without
/// [`use_scale`](AttentionBuilder::use_scale): none), then as
/// [`Attention`], whose calls it has.
///
/// ```
/// use gradtape::nn::{AdditiveAttention, AttentionArgs, Module};
/// use gradtape::{DType, Rng};
/// let mut rng = Rng::new(0);
/// let att = AdditiveAttention::builder(4).build(&mut rng)?;
/// assert_eq!(att.variables()[0].shape(), vec![4]);
/// let q = rng.normal(&[2, 3, 4], 0.0, 1.0, DType::F32)?;
/// let v = rng.normal(&[2, 5, 4], 0.0, 1.0, DType::F32)?;
/// let (y, weights) = att.call_with_scores(&q, &v, AttentionArgs::new())?;
/// assert_eq!((y.shape(), weights.shape()), (&[2, 3, 4][..], &[2, 3, 5][..]));
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct AdditiveAttention(Attention);

impl std::ops::Deref for AdditiveAttention {
    type Target = Attention;
    fn deref(&self) -> &Attention {
        &self.0
    }
}

/// Options for [`Attention`] and [`AdditiveAttention`]; see
/// [`Attention::builder`] and [`AdditiveAttention::builder`].
pub struct AttentionBuilder {
    kind: Kind,
    features: usize,
    use_scale: bool,
    dropout: f64,
    dtype: DType,
    name: Option<String>,
}

impl AttentionBuilder {
    /// Whether the scores have a learned scale (default false for
    /// `Attention`, true for `AdditiveAttention`, as Keras).
    pub fn use_scale(mut self, on: bool) -> Self {
        self.use_scale = on;
        self
    }
    /// The scores (`Attention` only; default [`ScoreMode::Dot`]).
    pub fn score_mode(mut self, mode: ScoreMode) -> Self {
        if let Kind::Attention(_) = self.kind {
            self.kind = Kind::Attention(mode);
        }
        self
    }
    /// The dropout rate on the attention weights while training (default
    /// 0), in `[0, 1)`.
    pub fn dropout(mut self, rate: f64) -> Self {
        self.dropout = rate;
        self
    }
    /// The weights' dtype (default f32).
    pub fn dtype(mut self, d: DType) -> Self {
        self.dtype = d;
        self
    }
    /// The layer's name (default `attention` or `additive_attention`, made
    /// unique).
    pub fn name(mut self, n: impl Into<String>) -> Self {
        self.name = Some(n.into());
        self
    }

    /// Creates the weights, drawing from `rng`: an [`Attention`] layer, or
    /// an [`AdditiveAttention`] one from [`AdditiveAttention::builder`]
    /// .
    ///
    /// ```
    /// use gradtape::{nn::{AdditiveAttention, Attention}, Rng};
    /// let mut rng = Rng::new(0);
    /// assert!(Attention::builder().dropout(1.0).build(&mut rng).is_err());
    /// assert!(AdditiveAttention::builder(0).build(&mut rng).is_err());
    /// ```
    pub fn build(self, rng: &mut Rng) -> Result<Attention> {
        let op = self.op();
        expect_float_dtype(op, self.dtype)?;
        if self.kind == Kind::Additive && self.features == 0 {
            return Err(Error::invalid(op, "the number of features must be positive, got 0"));
        }
        let name = self.name.unwrap_or_else(|| {
            unique_name(match self.kind {
                Kind::Additive => "additive_attention",
                Kind::Attention(_) => "attention",
            })
        });
        let dropout = (self.dropout != 0.0)
            .then(|| Dropout::new(self.dropout, rng).map(Mutex::new))
            .transpose()
            .map_err(|_| Error::invalid(op, format!("dropout must lie in [0, 1), got {}", self.dropout)))?;
        let scale = match (self.kind, self.use_scale) {
            (_, false) => None,
            (Kind::Additive, true) => Some((vec![self.features], Initializer::GlorotUniform)),
            (Kind::Attention(_), true) => Some((vec![], Initializer::Ones)),
        }
        .map(|(shape, init)| new_weight(&name, "scale", &shape, self.dtype, &init, rng, true))
        .transpose()?;
        let concat_weight = (self.kind == Kind::Attention(ScoreMode::Concat))
            .then(|| {
                new_weight(
                    &name,
                    "concat_score_weight",
                    &[],
                    self.dtype,
                    &Initializer::Ones,
                    rng,
                    true,
                )
            })
            .transpose()?;
        Ok(Attention {
            name,
            kind: self.kind,
            scale,
            concat_weight,
            dropout,
            dtype: self.dtype,
        })
    }

    fn op(&self) -> &'static str {
        self.kind.op()
    }
}

impl AdditiveAttention {
    /// Starts an [`AdditiveAttention`] layer over query and key features
    /// of size `features` (with the scale, as Keras's default).
    pub fn builder(features: usize) -> AdditiveBuilder {
        AdditiveBuilder(AttentionBuilder {
            kind: Kind::Additive,
            features,
            use_scale: true,
            ..Attention::builder()
        })
    }
}

/// Options for an [`AdditiveAttention`] layer: those of
/// [`AttentionBuilder`] but the score mode.
pub struct AdditiveBuilder(AttentionBuilder);

impl AdditiveBuilder {
    /// Whether the scores have the learned scale vector (default true).
    pub fn use_scale(self, on: bool) -> Self {
        AdditiveBuilder(self.0.use_scale(on))
    }
    /// The dropout rate on the attention weights while training.
    pub fn dropout(self, rate: f64) -> Self {
        AdditiveBuilder(self.0.dropout(rate))
    }
    /// The weights' dtype (default f32).
    pub fn dtype(self, d: DType) -> Self {
        AdditiveBuilder(self.0.dtype(d))
    }
    /// The layer's name (default `additive_attention`, made unique).
    pub fn name(self, n: impl Into<String>) -> Self {
        AdditiveBuilder(self.0.name(n))
    }
    /// Creates the scale (with `use_scale`), drawing from `rng`. Zero
    /// features are an error.
    pub fn build(self, rng: &mut Rng) -> Result<AdditiveAttention> {
        self.0.build(rng).map(AdditiveAttention)
    }
}

impl Attention {
    /// Starts an [`Attention`] layer (dot scores, no scale).
    pub fn builder() -> AttentionBuilder {
        AttentionBuilder {
            kind: Kind::Attention(ScoreMode::Dot),
            features: 0,
            use_scale: false,
            dropout: 0.0,
            dtype: DType::F32,
            name: None,
        }
    }

    fn op(&self) -> &'static str {
        self.kind.op()
    }

    /// The scores `[b, tq, tk]` of `q` `[b, tq, d]` against `k` `[b, tk, d]`.
    fn scores(&self, q: &Tensor, k: &Tensor) -> Result<Tensor> {
        let scale = self.scale.as_ref().map(Variable::read);
        match self.kind {
            Kind::Attention(ScoreMode::Dot) => {
                let s = q.matmul_with(k, false, true)?;
                match scale {
                    Some(c) => s.mul(&c),
                    None => Ok(s),
                }
            }
            Kind::Attention(ScoreMode::Concat) | Kind::Additive => {
                let mut z = q.expand_dims(2)?.add(&k.expand_dims(1)?)?;
                let concat = self.kind != Kind::Additive;
                if let (true, Some(c)) = (concat, &scale) {
                    z = z.mul(c)?;
                }
                let mut t = z.tanh()?;
                if let (false, Some(c)) = (concat, &scale) {
                    t = t.mul(c)?;
                }
                let s = t.sum(&[-1], false)?;
                match &self.concat_weight {
                    Some(w) => s.mul(&w.read()),
                    None => Ok(s),
                }
            }
        }
    }

    /// Checks the inputs: `[b, t, _]` of the layer's dtype, the query's and
    /// key's features equal, the key's and value's `[b, t]` equal.
    fn check(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<()> {
        let op = self.op();
        for x in [q, k, v] {
            if x.dtype() != self.dtype {
                return Err(Error::DTypeMismatch {
                    op,
                    lhs: x.dtype(),
                    rhs: self.dtype,
                });
            }
        }
        let ok = [q, k, v].iter().all(|x| x.rank() == 3)
            && q.shape()[0] == k.shape()[0]
            && k.shape()[..2] == v.shape()[..2]
            && q.shape()[2] == k.shape()[2]
            && self
                .scale
                .as_ref()
                .is_none_or(|s| s.shape().is_empty() || s.shape() == [q.shape()[2]]);
        if !ok {
            return Err(Error::invalid(
                op,
                format!(
                    "expected query [batch, t_q, d], key [batch, t_k, d] (d the scale's size) and value [batch, t_k, _], got {:?}, {:?} and {:?}",
                    q.shape(),
                    k.shape(),
                    v.shape()
                ),
            ));
        }
        Ok(())
    }

    /// The attention of `query` `[batch, t_q, d]` to `value` `[batch, t_k,
    /// d_v]` (keys `args.key`, `[batch, t_k, d]`, by default the value),
    /// Keras's `layer([query, value, key], mask=[query_mask, value_mask],
    /// use_causal_mask=..., training=...)`: `[batch, t_q, d_v]`.
    /// `args.key_mask` and `args.attention_mask`, which Keras's layer does
    /// not take, hide keys as the value's mask does.
    pub fn call_with(&self, query: &Tensor, value: &Tensor, args: AttentionArgs<'_>) -> Result<Tensor> {
        Ok(self.call_with_scores(query, value, args)?.0)
    }

    /// [`call_with`](Self::call_with) and the attention weights `[batch,
    /// t_q, t_k]` (after the softmax, before the dropout), Keras's
    /// `return_attention_scores=True`.
    pub fn call_with_scores(
        &self,
        query: &Tensor,
        value: &Tensor,
        args: AttentionArgs<'_>,
    ) -> Result<(Tensor, Tensor)> {
        let key = args.key.unwrap_or(value);
        self.check(query, key, value)?;
        let (b, tq, tk) = (query.shape()[0], query.shape()[1], key.shape()[1]);
        if let Some(qm) = args.query_mask {
            check_padding(self.op(), qm, "query_mask", b, tq)?;
        }
        let mut s = self.scores(query, key)?;
        // the keys a query sees: `[b|1, 1, tq, tk]` from the masks given
        let mut keep = AttentionArgs {
            query_mask: None,
            ..args
        }
        .combined_mask(self.op(), (b, tq, tk), None, None, query.device())?
        .map(|m| m.squeeze(&[1]))
        .transpose()?;
        if args.use_causal_mask {
            let causal = super::attention::causal_mask(tq, tk, 0, query.device())?;
            keep = Some(match keep {
                Some(m) => m.logical_and(&causal)?,
                None => causal.expand_dims(0)?,
            });
        }
        if let Some(keep) = &keep {
            let big = if self.dtype == DType::F16 { 65504.0 } else { 1e9 };
            s = Tensor::where_(keep, &s, &s.sub_scalar(big)?)?;
        }
        let w = s.softmax(-1)?;
        let dropped = match (&self.dropout, args.training) {
            (Some(d), true) => d.lock().unwrap_or_else(|e| e.into_inner()).forward(&w, true)?,
            _ => w.clone(),
        };
        let mut out = dropped.matmul(value)?;
        if let Some(qm) = args.query_mask {
            out = Tensor::where_(&as_keep(qm)?.expand_dims(2)?, &out, &out.scalar_like(0.0)?)?;
        }
        Ok((out, w))
    }
}

impl Module for Attention {
    /// `scale` (with `use_scale`), then `concat_score_weight` (concat
    /// scores): Keras's order.
    fn variables(&self) -> Vec<Variable> {
        self.scale.iter().chain(&self.concat_weight).cloned().collect()
    }
}

impl Layer for Attention {
    fn name(&self) -> &str {
        &self.name
    }

    /// Unmasked self-attention of `x` `[batch, t, features]`.
    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        self.call_with(x, x, AttentionArgs::new().training(training))
    }
}

impl Module for AdditiveAttention {
    fn variables(&self) -> Vec<Variable> {
        self.0.variables()
    }
}

impl Layer for AdditiveAttention {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        self.0.forward(x, training)
    }
}
