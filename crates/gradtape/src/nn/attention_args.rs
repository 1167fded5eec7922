//! The arguments of a [`MultiHeadAttention`](super::MultiHeadAttention)
//! call, the one mask they make (Keras's `_compute_attention_mask`), and
//! the [`KvCache`] the layer decodes with.

use crate::error::{Error, Result};
use crate::function::{Leaf, TensorStruct};
use crate::tensor::{DType, Tensor, TensorId};

const OP: &str = "MultiHeadAttention";

/// The optional arguments of
/// [`MultiHeadAttention::call_with`](super::MultiHeadAttention::call_with),
/// Keras's keyword arguments of `MultiHeadAttention.__call__`.
///
/// ```
/// use gradtape::{nn::AttentionArgs, Tensor};
/// let k = Tensor::zeros(&[1, 2, 3], gradtape::DType::F32);
/// let args = AttentionArgs::new().key(&k).use_causal_mask(true).training(true);
/// assert!(args.use_causal_mask && args.training && args.attention_mask.is_none());
/// ```
///
/// Keras attaches padding masks to tensors (an `Embedding(mask_zero=True)`
/// marks its output) and the layer reads them from its inputs; here they
/// are passed: [`query_mask`](Self::query_mask) and
/// [`value_mask`](Self::value_mask), `[batch, time]` bool as
/// [`Embedding::compute_mask`](super::Embedding::compute_mask) gives them
/// (or a tokenizer's 0/1 integers, kept where nonzero as Keras casts
/// them; not floats), and [`key_mask`](Self::key_mask). Every mask given
/// is combined with
/// `&`, as Keras does: a query row `i` may attend to key `j` when
/// `query_mask[b, i] & value_mask[b, j] & key_mask[b, j] &
/// attention_mask[b, i, j]` (and `j <= i` when causal, and `|i - j| <
/// sliding_window` with the layer's
/// [`sliding_window`](super::MultiHeadAttentionBuilder::sliding_window)).
///
/// ```
/// use gradtape::nn::{AttentionArgs, Embedding, Layer, MultiHeadAttention};
/// use gradtape::{Rng, Tensor};
/// let mut rng = Rng::new(0);
/// let emb = Embedding::builder(10, 8).mask_zero(true).build(&mut rng)?;
/// let mha = MultiHeadAttention::builder(2, 4).build(8, &mut rng)?;
/// let ids = Tensor::from_vec(vec![3i64, 5, 0, 0, 7, 1, 2, 4], &[2, 4])?;
/// let (x, pad) = (emb.call(&ids)?, emb.compute_mask(&ids)?.unwrap());
/// let args = AttentionArgs::new().query_mask(&pad).value_mask(&pad).use_causal_mask(true);
/// assert_eq!(mha.call_with(&x, &x, args)?.shape(), &[2, 4, 8]);
/// // a mask of the wrong length is an error naming the layer and shapes
/// let short = Tensor::from_vec(vec![true; 6], &[2, 3])?;
/// let err = mha.call_with(&x, &x, AttentionArgs::new().value_mask(&short)).unwrap_err();
/// assert!(err.to_string().contains("value_mask"), "{err}");
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Copy, Default, Debug)]
pub struct AttentionArgs<'a> {
    /// The keys' input `[batch, t_k, key_features]`; `None`: the value
    /// input (Keras's default).
    pub key: Option<&'a Tensor>,
    /// A bool mask, `true` where a query may attend to a key: `[batch,
    /// t_q, t_k]` as in Keras, or, as Keras takes it, any mask of rank 2 or
    /// 3 that broadcasts to that (`[batch, 1, t_k]`: BERT's key padding;
    /// `[1, t_q, t_k]`, `[t_q, t_k]`), and of integers instead of bool,
    /// kept where nonzero (a tokenizer's 0/1 mask, as Keras's
    /// `ops.cast(mask, "bool")`; a float mask is an error, being PyTorch's
    /// additive `0 / -inf` as often as Keras's `1 / 0`). A query row it masks entirely (a padded
    /// query, with Keras's padding masks) gives what Keras gives: from a
    /// layer without dropout, uniform probabilities over all the keys (the
    /// mean of the values, projected); from a layer with dropout, and in
    /// [`call_with_scores`](super::MultiHeadAttention::call_with_scores),
    /// zero probabilities (the output projection's bias alone).
    pub attention_mask: Option<&'a Tensor>,
    /// The query's padding mask `[batch, t_q]` (bool, `true` at real
    /// positions): Keras's mask of the `query` input. A padded query's row
    /// sees no key (see [`attention_mask`](Self::attention_mask) for what
    /// such a row gives).
    pub query_mask: Option<&'a Tensor>,
    /// The value's padding mask `[batch, t_k]`: Keras's mask of the
    /// `value` input (`value_mask`); no query attends to a padded key.
    pub value_mask: Option<&'a Tensor>,
    /// A mask of the keys `[batch, t_k]`, Keras's `key_mask`, combined as
    /// [`value_mask`](Self::value_mask) is.
    pub key_mask: Option<&'a Tensor>,
    /// Also masks keys after the query's position (query `i` sees keys
    /// `j <= i`, counted from the start of both, as Keras's causal mask).
    pub use_causal_mask: bool,
    /// Applies the attention dropout (when the layer has one).
    pub training: bool,
}

impl<'a> AttentionArgs<'a> {
    /// No key, no mask, not causal, inference.
    pub fn new() -> AttentionArgs<'a> {
        AttentionArgs::default()
    }
    /// Sets [`key`](Self::key).
    pub fn key(mut self, key: &'a Tensor) -> Self {
        self.key = Some(key);
        self
    }
    /// Sets [`attention_mask`](Self::attention_mask).
    pub fn attention_mask(mut self, mask: &'a Tensor) -> Self {
        self.attention_mask = Some(mask);
        self
    }
    /// Sets [`query_mask`](Self::query_mask).
    pub fn query_mask(mut self, mask: &'a Tensor) -> Self {
        self.query_mask = Some(mask);
        self
    }
    /// Sets [`value_mask`](Self::value_mask).
    pub fn value_mask(mut self, mask: &'a Tensor) -> Self {
        self.value_mask = Some(mask);
        self
    }
    /// Sets [`key_mask`](Self::key_mask).
    pub fn key_mask(mut self, mask: &'a Tensor) -> Self {
        self.key_mask = Some(mask);
        self
    }
    /// Sets [`use_causal_mask`](Self::use_causal_mask).
    pub fn use_causal_mask(mut self, causal: bool) -> Self {
        self.use_causal_mask = causal;
        self
    }
    /// Sets [`training`](Self::training).
    pub fn training(mut self, training: bool) -> Self {
        self.training = training;
        self
    }
}

impl AttentionArgs<'_> {
    /// The one bool mask `[b|1, 1, t_q, t_k]` the heads attend under: the
    /// `&` of every mask given and of the sliding `window`'s band (queries
    /// at absolute positions `offset..`, `window` being `(width, offset)`),
    /// without the causal mask (the fused op's flag), made on `device`;
    /// `None` when nothing masks.
    pub(super) fn combined_mask(
        &self,
        op: &'static str,
        (b, tq, tk): (usize, usize, usize),
        window: Option<(usize, usize)>,
        device: crate::Device,
    ) -> Result<Option<Tensor>> {
        let mut parts: Vec<Tensor> = Vec::new();
        if let Some(m) = self.attention_mask {
            parts.push(attention_mask_3d(op, m, b, tq, tk)?);
        }
        if let Some(m) = self.query_mask {
            check_padding(op, m, "query_mask", b, tq)?;
            parts.push(as_keep(m)?.expand_dims(2)?);
        }
        for (m, what) in [(self.value_mask, "value_mask"), (self.key_mask, "key_mask")] {
            if let Some(m) = m {
                check_padding(op, m, what, b, tk)?;
                parts.push(as_keep(m)?.expand_dims(1)?);
            }
        }
        if let Some((w, offset)) = window {
            parts.push(window_band(tq, tk, offset, w, device)?.expand_dims(0)?);
        }
        let Some((first, rest)) = parts.split_first() else {
            return Ok(None);
        };
        let mut m = first.clone();
        for p in rest {
            m = m.logical_and(p)?;
        }
        // [b|1, tq|1, tk|1] to [b|1, 1, tq, tk]
        let rows = m.shape()[0];
        if m.shape()[1..] != [tq, tk] {
            m = m.broadcast_to(&[rows, tq, tk])?;
        }
        Ok(Some(m.expand_dims(1)?))
    }
}

/// An attention mask as Keras's `MultiHeadAttention` takes it, as a bool
/// `[b|1, tq, tk]`: of rank 2 or 3, each axis of the size of the scores'
/// `[b, tq, tk]` (the last two for rank 2) or 1, broadcast (BERT's key
/// padding `[b, 1, tk]`, a `[tq, tk]` band); bool, or integers kept where
/// nonzero (Keras's `ops.cast(mask, "bool")` of a tokenizer's 0/1 mask).
/// A float mask is refused: Keras would keep its nonzero entries, but
/// PyTorch's (and the fused op's) float masks are added to the scores,
/// `0` where a query attends and `-inf` where it does not, which read as
/// Keras's would hide exactly the keys meant to be seen.
fn attention_mask_3d(op: &'static str, m: &Tensor, b: usize, tq: usize, tk: usize) -> Result<Tensor> {
    let s = m.shape();
    let full = [b, tq, tk];
    let fits = (2..=3).contains(&s.len())
        && s.iter()
            .zip(&full[3 - s.len()..])
            .all(|(&d, &want)| d == want || d == 1);
    if !fits || !(m.dtype() == DType::Bool || m.dtype().is_int()) {
        return Err(Error::invalid(
            op,
            format!(
                "the attention mask must be bool (or 0/1 integers; a float mask is ambiguous: Keras keeps its nonzero entries, PyTorch adds it to the scores) and broadcast to [batch, t_q, t_k] = [{b}, {tq}, {tk}] from rank 2 or 3, got {} {:?}",
                m.dtype(),
                s
            ),
        ));
    }
    let keep = as_keep(m)?;
    let keep = if s.len() == 2 { keep.expand_dims(0)? } else { keep };
    let rows = keep.shape()[0];
    if keep.shape()[1..] == [tq, tk] {
        Ok(keep)
    } else {
        keep.broadcast_to(&[rows, tq, tk])
    }
}

/// Checks a padding mask `what` of `op`'s call: `[b, t]`, bool or
/// integers (a tokenizer's 0/1 mask, kept where nonzero as Keras's
/// `ops.cast(mask, "bool")`; a float mask is refused, as an attention
/// mask's is: see `attention_mask_3d`).
pub(super) fn check_padding(op: &'static str, m: &Tensor, what: &str, b: usize, t: usize) -> Result<()> {
    if !(m.dtype() == DType::Bool || m.dtype().is_int()) || m.shape() != [b, t] {
        return Err(Error::invalid(
            op,
            format!(
                "the {what} must be bool (or 0/1 integers) [batch, time] = [{b}, {t}], got {} {:?}",
                m.dtype(),
                m.shape()
            ),
        ));
    }
    Ok(())
}

/// A mask checked by [`check_padding`] or `attention_mask_3d` as bool:
/// integers kept where nonzero.
pub(super) fn as_keep(m: &Tensor) -> Result<Tensor> {
    if m.dtype() == DType::Bool {
        Ok(m.clone())
    } else {
        m.ne(&m.scalar_like(0.0)?)
    }
}

/// `[tq, tk]`, true where `|i + offset - j| < w` (query `i`, key `j`):
/// Keras's sliding-window band.
pub(super) fn window_band(tq: usize, tk: usize, offset: usize, w: usize, device: crate::Device) -> Result<Tensor> {
    let n = crate::tensor::layout::checked_numel(OP, &[tq, tk])?;
    let mut m = crate::tensor::alloc::try_vec(OP, n)?;
    m.extend((0..n).map(|x| ((x / tk).saturating_add(offset)).abs_diff(x % tk) < w));
    Tensor::from_vec(m, &[tq, tk])?.to(device)
}

/// The keys and values a [`MultiHeadAttention`](super::MultiHeadAttention)
/// layer has seen so far while decoding, `[batch, kv_heads, t, key_dim]`
/// and `[batch, kv_heads, t, value_dim]` (after the projections; `kv_heads`
/// is the layer's
/// [`num_key_value_heads`](super::MultiHeadAttention::num_key_value_heads),
/// so a grouped layer's cache is that much smaller), so that each new
/// position attends to them without recomputing the context. One cache per
/// attention layer.
///
/// ```
/// use gradtape::nn::KvCache;
/// let cache = KvCache::new();
/// assert_eq!(cache.len(), 0);
/// assert!(cache.keys().is_none());
/// ```
#[derive(Clone, Default, Debug)]
pub struct KvCache {
    pub(super) keys: Option<Tensor>,
    pub(super) values: Option<Tensor>,
    /// A decoder block's cross-attention keys and values (see
    /// [`CrossKv`]).
    pub(super) cross: Option<CrossKv>,
}

/// The projected keys and values of an encoder's sequence, kept by a
/// decoder block's [`KvCache`] while it decodes (keras_hub's
/// `cross_attention_cache`): each new position attends to them without
/// projecting the whole encoder's sequence again. They are reused only for
/// the same key and value tensors (by their ids), so a new encoder's
/// sequence is projected anew, never answered from a stale cache.
#[derive(Clone, Debug)]
pub(super) struct CrossKv {
    pub(super) key: TensorId,
    pub(super) value: TensorId,
    /// `[b, kv_heads, s, key_dim]` and `[b, kv_heads, s, value_dim]`
    pub(super) k: Tensor,
    pub(super) v: Tensor,
}

impl CrossKv {
    /// The cached heads, if they are `key`'s and `value`'s.
    pub(super) fn of(slot: &Option<CrossKv>, key: &Tensor, value: &Tensor) -> Option<(Tensor, Tensor)> {
        slot.as_ref()
            .filter(|c| c.key == key.id() && c.value == value.id())
            .map(|c| (c.k.clone(), c.v.clone()))
    }
}

impl KvCache {
    /// An empty cache.
    pub fn new() -> KvCache {
        KvCache::default()
    }

    /// The number of positions cached (the absolute position of the next
    /// one).
    pub fn len(&self) -> usize {
        self.keys.as_ref().map_or(0, |k| k.shape()[2])
    }

    /// Whether no position is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cached keys, `[batch, kv_heads, t, key_dim]`.
    pub fn keys(&self) -> Option<&Tensor> {
        self.keys.as_ref()
    }

    /// The cached values, `[batch, kv_heads, t, value_dim]`.
    pub fn values(&self) -> Option<&Tensor> {
        self.values.as_ref()
    }

    /// A decoder block's projected keys of its encoder's sequence,
    /// `[batch, heads, s, key_dim]`, kept from the first
    /// [`call_cached_with`](super::TransformerBlock::call_cached_with) that
    /// had it (and projected anew when another sequence is given).
    ///
    /// ```
    /// use gradtape::nn::{BlockArgs, KvCache, TransformerBlock};
    /// use gradtape::{DType, Rng};
    /// let mut rng = Rng::new(0);
    /// let decoder = TransformerBlock::builder(8, 2, 16).causal(true).cross_attention(8).build(&mut rng)?;
    /// let enc = rng.normal(&[1, 6, 8], 0.0, 1.0, DType::F32)?;
    /// let mut cache = KvCache::new();
    /// decoder.call_cached_with(&rng.normal(&[1, 2, 8], 0.0, 1.0, DType::F32)?, &mut cache, BlockArgs::new().encoder(&enc))?;
    /// let keys = cache.encoder_keys().expect("kept").clone();
    /// assert_eq!(keys.shape(), &[1, 2, 6, 4]);
    /// decoder.call_cached_with(&rng.normal(&[1, 1, 8], 0.0, 1.0, DType::F32)?, &mut cache, BlockArgs::new().encoder(&enc))?;
    /// assert_eq!(cache.encoder_keys().expect("kept").id(), keys.id()); // not projected again
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn encoder_keys(&self) -> Option<&Tensor> {
        self.cross.as_ref().map(|c| &c.k)
    }

    /// Forgets every position (to start a new sequence), and a decoder
    /// block's projections of its encoder's sequence.
    pub fn clear(&mut self) {
        self.keys = None;
        self.values = None;
        self.cross = None;
    }
}

/// A cache goes into and comes out of a traced
/// [`function`](crate::function()) as its tensors, so that a decoding step
/// (the new positions and the caches in, the logits and the extended
/// caches out) can be traced as TensorFlow's `call_with_cache` is: the
/// keys and values, then a decoder block's kept projections of its
/// encoder's sequence (reused inside the trace only for the encoder
/// tensor they were made from; a cache's length is its tensors' shape,
/// so each length gets its own trace).
///
/// ```
/// use gradtape::nn::{KvCache, MultiHeadAttention};
/// use gradtape::{function, DType, Rng};
/// use std::sync::Arc;
/// let mut rng = Rng::new(0);
/// let mha = Arc::new(MultiHeadAttention::builder(2, 4).dtype(DType::F64).build(8, &mut rng)?);
/// let step = {
///     let mha = mha.clone();
///     function(move |(x, cache): &(gradtape::Tensor, KvCache)| {
///         let mut cache = cache.clone();
///         Ok((mha.call_cached(x, &mut cache)?, cache))
///     })
/// };
/// let x = rng.normal(&[1, 4, 8], 0.0, 1.0, DType::F64)?;
/// let (mut eager, mut traced) = (KvCache::new(), KvCache::new());
/// for t in 0..4 {
///     let xt = x.narrow(1, t, 1)?;
///     let want = mha.call_cached(&xt, &mut eager)?.to_vec::<f64>()?;
///     let (got, next) = step.call(&(xt, traced))?;
///     traced = next;
///     assert!(got.to_vec::<f64>()?.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-12));
/// }
/// assert_eq!(traced.len(), 4);
/// # Ok::<(), gradtape::Error>(())
/// ```
impl TensorStruct for KvCache {
    fn leaves<'a>(&'a self, out: &mut Vec<Leaf<'a>>) {
        self.keys.leaves(out);
        self.values.leaves(out);
        match &self.cross {
            Some(c) => {
                out.push(Leaf::Tag(1));
                out.push(Leaf::Tensor(&c.k));
                out.push(Leaf::Tensor(&c.v));
            }
            None => out.push(Leaf::Tag(0)),
        }
    }

    fn rebuild(&self, tensors: &mut dyn Iterator<Item = Tensor>) -> Result<Self> {
        let keys = self.keys.rebuild(tensors)?;
        let values = self.values.rebuild(tensors)?;
        let cross = match &self.cross {
            Some(c) => Some(CrossKv {
                key: c.key,
                value: c.value,
                k: c.k.rebuild(tensors)?,
                v: c.v.rebuild(tensors)?,
            }),
            None => None,
        };
        Ok(KvCache { keys, values, cross })
    }
}
