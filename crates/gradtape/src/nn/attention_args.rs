//! The arguments of a [`MultiHeadAttention`](super::MultiHeadAttention)
//! call and the [`KvCache`] it decodes with.

use crate::tensor::Tensor;

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
#[derive(Clone, Copy, Default, Debug)]
pub struct AttentionArgs<'a> {
    /// The keys' input `[batch, t_k, key_features]`; `None`: the value
    /// input (Keras's default).
    pub key: Option<&'a Tensor>,
    /// A bool mask, `true` where a query may attend to a key: `[batch,
    /// t_q, t_k]` as in Keras (or `[1, t_q, t_k]`, `[t_q, t_k]`,
    /// broadcast over the batch). A query row it masks entirely (a padded
    /// query, with Keras's padding masks) gives what Keras gives: from a
    /// layer without dropout, uniform probabilities over all the keys (the
    /// mean of the values, projected); from a layer with dropout, and in
    /// [`call_with_scores`](super::MultiHeadAttention::call_with_scores),
    /// zero probabilities (the output projection's bias alone).
    pub attention_mask: Option<&'a Tensor>,
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

    /// Forgets every position (to start a new sequence).
    pub fn clear(&mut self) {
        self.keys = None;
        self.values = None;
    }
}
