//! The arguments of a [`MultiHeadAttention`](super::MultiHeadAttention)
//! call, the one mask they make (Keras's `_compute_attention_mask`), and
//! the [`KvCache`] the layer decodes with.

use crate::error::{Error, Result};
use crate::function::{Leaf, TensorStruct};
use crate::tensor::{DType, Tensor};

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
    /// The one bool mask `[b|1, h|1, t_q, t_k]` the heads attend under:
    /// the `&` of every mask given and of the sliding `window`'s band
    /// (queries at absolute positions `offset..`, `window` being `(width,
    /// offset)`), without the causal mask (the fused op's flag), made on
    /// `device`; `None` when nothing masks. `heads`: the layer's number of
    /// heads, which a rank-4 attention mask may have (`None`: a layer
    /// without heads, whose masks have rank 2 or 3).
    pub(super) fn combined_mask(
        &self,
        op: &'static str,
        (b, tq, tk): (usize, usize, usize),
        heads: Option<usize>,
        window: Option<(usize, usize)>,
        device: crate::Device,
    ) -> Result<Option<Tensor>> {
        // each part [b|1, h|1, tq|1, tk|1]
        let mut parts: Vec<Tensor> = Vec::new();
        if let Some(m) = self.attention_mask {
            parts.push(attention_mask_4d(op, m, (b, heads, tq, tk))?);
        }
        if let Some(m) = self.query_mask {
            check_padding(op, m, "query_mask", b, tq)?;
            parts.push(as_keep(m)?.reshape(&[b, 1, tq, 1])?);
        }
        for (m, what) in [(self.value_mask, "value_mask"), (self.key_mask, "key_mask")] {
            if let Some(m) = m {
                check_padding(op, m, what, b, tk)?;
                parts.push(as_keep(m)?.reshape(&[b, 1, 1, tk])?);
            }
        }
        if let Some((w, offset)) = window {
            parts.push(window_band(tq, tk, offset, w, device)?.reshape(&[1, 1, tq, tk])?);
        }
        let Some((first, rest)) = parts.split_first() else {
            return Ok(None);
        };
        let mut m = first.clone();
        for p in rest {
            m = m.logical_and(p)?;
        }
        // [b|1, h|1, tq|1, tk|1] to [b|1, h|1, tq, tk]
        let (rows, h) = (m.shape()[0], m.shape()[1]);
        if m.shape()[2..] != [tq, tk] {
            m = m.broadcast_to(&[rows, h, tq, tk])?;
        }
        Ok(Some(m))
    }
}

/// An attention mask as Keras's `MultiHeadAttention` takes it, as a bool
/// `[b|1, h|1, tq|1, tk|1]`: of rank 2 or 3 (`[b, tq, tk]`, the heads' axis
/// inserted after the batch's, as Keras expands it), or, for a layer of
/// `heads` heads, of rank 4 (`[b, heads, tq, tk]`, a mask per head), each
/// axis of the size of the scores' or 1, broadcast (BERT's key padding
/// `[b, 1, tk]`, a `[tq, tk]` band, ALiBi-like `[1, heads, tq, tk]`);
/// bool, or integers kept where nonzero (Keras's `ops.cast(mask, "bool")`
/// of a tokenizer's 0/1 mask). A float mask is refused: Keras would keep
/// its nonzero entries, but PyTorch's (and the fused op's) float masks are
/// added to the scores, `0` where a query attends and `-inf` where it does
/// not, which read as Keras's would hide exactly the keys meant to be
/// seen.
fn attention_mask_4d(
    op: &'static str,
    m: &Tensor,
    (b, heads, tq, tk): (usize, Option<usize>, usize, usize),
) -> Result<Tensor> {
    let s = m.shape();
    let max_rank = if heads.is_some() { 4 } else { 3 };
    // as [b, h, tq, tk]
    let as4: Option<[usize; 4]> = match *s {
        [q, k] => Some([1, 1, q, k]),
        [r, q, k] => Some([r, 1, q, k]),
        [r, h, q, k] if heads.is_some() => Some([r, h, q, k]),
        _ => None,
    };
    let full = [b, heads.unwrap_or(1), tq, tk];
    let fits = as4.is_some_and(|a| a.iter().zip(&full).all(|(&d, &want)| d == want || d == 1));
    if !fits || !(m.dtype() == DType::Bool || m.dtype().is_int()) {
        let per_head = match heads {
            Some(h) => format!(", or to [batch, num_heads, t_q, t_k] = [{b}, {h}, {tq}, {tk}] from rank 4"),
            None => String::new(),
        };
        return Err(Error::invalid(
            op,
            format!(
                "the attention mask must be bool (or 0/1 integers; a float mask is ambiguous: Keras keeps its nonzero entries, PyTorch adds it to the scores) and broadcast to [batch, t_q, t_k] = [{b}, {tq}, {tk}] from rank 2 or 3{per_head}, got {} {:?} (rank {} at most)",
                m.dtype(),
                s,
                max_rank
            ),
        ));
    }
    as_keep(m)?.reshape(&as4.expect("checked"))
}

/// Checks a padding mask `what` of `op`'s call: `[b, t]`, bool or
/// integers (a tokenizer's 0/1 mask, kept where nonzero as Keras's
/// `ops.cast(mask, "bool")`; a float mask is refused, as an attention
/// mask's is: see `attention_mask_4d`).
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

/// A mask checked by [`check_padding`] or `attention_mask_4d` as bool:
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
/// Two kinds: [`KvCache::new`] grows by concatenation (its tensors have
/// the length cached, so a traced decoding step is traced again at each
/// length), and a cache of fixed capacity, made by the layer
/// ([`MultiHeadAttention::kv_cache`](super::MultiHeadAttention::kv_cache),
/// [`TransformerBlock::kv_cache`](super::TransformerBlock::kv_cache)):
/// keras_hub's `CachedMultiHeadAttention` cache, `[batch, kv_heads,
/// max_length, dim]` buffers written at an index held in a tensor (an
/// `i64` scalar, the number of positions written), so that every step of
/// a traced decoder has inputs of the same shapes and one trace serves
/// them all; the positions not yet written are masked.
///
/// ```
/// use gradtape::nn::KvCache;
/// let cache = KvCache::new();
/// assert_eq!(cache.len(), 0);
/// assert!(cache.keys().is_none());
/// assert_eq!(cache.capacity(), None);
/// ```
#[derive(Clone, Default, Debug)]
pub struct KvCache {
    pub(super) keys: Option<Tensor>,
    pub(super) values: Option<Tensor>,
    /// A decoder block's cross-attention keys and values (see
    /// [`CrossKv`]).
    pub(super) cross: Option<CrossKv>,
    /// A cache of fixed capacity: the number of positions written, an
    /// `i64` scalar on the keys' device (`None`: a growing cache).
    pub(super) index: Option<Tensor>,
}

/// The projected keys and values of an encoder's sequence, kept by a
/// decoder block's [`KvCache`] while it decodes (keras_hub's
/// `cross_attention_cache`): each new position attends to them without
/// projecting the whole encoder's sequence again. They are reused only for
/// the same key and value tensors (by their ids), so a new encoder's
/// sequence is projected anew, never answered from a stale cache.
///
/// The cache holds those tensors themselves, as leaves of its structure:
/// a traced decoding step given the cache and the encoder's output sees
/// one tensor twice, and its trace shares one placeholder between them
/// (see `function`'s shared arguments), so the graph reads the kept heads
/// and projects nothing; a call with another encoder output is another
/// trace, which projects it.
#[derive(Clone, Debug)]
pub(super) struct CrossKv {
    pub(super) key: Tensor,
    pub(super) value: Tensor,
    /// `[b, kv_heads, s, key_dim]` and `[b, kv_heads, s, value_dim]`
    pub(super) k: Tensor,
    pub(super) v: Tensor,
}

impl CrossKv {
    /// The cached heads, if they are `key`'s and `value`'s.
    pub(super) fn of(slot: &Option<CrossKv>, key: &Tensor, value: &Tensor) -> Option<(Tensor, Tensor)> {
        slot.as_ref()
            .filter(|c| c.key.id() == key.id() && c.value.id() == value.id())
            .map(|c| (c.k.clone(), c.v.clone()))
    }
}

impl KvCache {
    /// An empty cache.
    pub fn new() -> KvCache {
        KvCache::default()
    }

    /// The number of positions cached (the absolute position of the next
    /// one); a cache of fixed capacity reads it from its
    /// [`index`](Self::index).
    pub fn len(&self) -> usize {
        match &self.index {
            Some(i) => i
                .try_to_vec_f64()
                .ok()
                .and_then(|v| v.first().copied())
                .map_or(0, |n| n as usize),
            None => self.keys.as_ref().map_or(0, |k| k.shape()[2]),
        }
    }

    /// The number of positions a cache of fixed capacity holds (`None`
    /// for a growing cache).
    ///
    /// ```
    /// use gradtape::nn::MultiHeadAttention;
    /// use gradtape::{DType, Rng};
    /// let mha = MultiHeadAttention::builder(2, 4).build(8, &mut Rng::new(0))?;
    /// let cache = mha.kv_cache(3, 16)?;
    /// assert_eq!((cache.capacity(), cache.len()), (Some(16), 0));
    /// assert_eq!(cache.keys().unwrap().shape(), &[3, 2, 16, 4]);
    /// assert_eq!(cache.index().unwrap().dtype(), DType::I64);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn capacity(&self) -> Option<usize> {
        self.index.as_ref().and(self.keys.as_ref()).map(|k| k.shape()[2])
    }

    /// A cache of fixed capacity's index: the number of positions written,
    /// an `i64` scalar (an input of a traced decoding step, not a number
    /// baked into its graph).
    pub fn index(&self) -> Option<&Tensor> {
        self.index.as_ref()
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
    /// block's projections of its encoder's sequence. A cache of fixed
    /// capacity keeps its buffers, its index set back to 0 (the positions
    /// past the index are masked, whatever they hold).
    pub fn clear(&mut self) {
        self.cross = None;
        match &self.index {
            Some(i) => self.index = Some(i.try_zeros_like().unwrap_or_else(|_| i.clone())),
            None => {
                self.keys = None;
                self.values = None;
            }
        }
    }
}

/// A cache goes into and comes out of a traced
/// [`function`](crate::function()) as its tensors, so that a decoding step
/// (the new positions and the caches in, the logits and the extended
/// caches out) can be traced as TensorFlow's `call_with_cache` is: the
/// keys and values, then a decoder block's kept projections of its
/// encoder's sequence (reused inside the trace only for the encoder
/// tensor they were made from). A growing cache's length is its
/// tensors' shape, so each length gets its own trace; a cache of fixed
/// capacity has the same shapes at every step and its index is one of its
/// tensors, so one trace serves every step (see
/// [`MultiHeadAttention::kv_cache`](super::MultiHeadAttention::kv_cache)).
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
        self.index.leaves(out);
        match &self.cross {
            Some(c) => {
                out.push(Leaf::Tag(1));
                out.push(Leaf::Tensor(&c.key));
                out.push(Leaf::Tensor(&c.value));
                out.push(Leaf::Tensor(&c.k));
                out.push(Leaf::Tensor(&c.v));
            }
            None => out.push(Leaf::Tag(0)),
        }
    }

    fn rebuild(&self, tensors: &mut dyn Iterator<Item = Tensor>) -> Result<Self> {
        let keys = self.keys.rebuild(tensors)?;
        let values = self.values.rebuild(tensors)?;
        let index = self.index.rebuild(tensors)?;
        let cross = match &self.cross {
            Some(c) => Some(CrossKv {
                key: c.key.rebuild(tensors)?,
                value: c.value.rebuild(tensors)?,
                k: c.k.rebuild(tensors)?,
                v: c.v.rebuild(tensors)?,
            }),
            None => None,
        };
        Ok(KvCache {
            keys,
            values,
            cross,
            index,
        })
    }
}
