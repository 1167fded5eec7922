//! Decoding: [`MultiHeadAttention::call_cached`] with a [`KvCache`].
//!
//! A growing cache concatenates each step's keys and values to the past
//! ones, so the tensors a traced decoding step takes and returns have the
//! length decoded so far in their shapes, and the step is traced (and
//! compiled) again at every length: 200 tokens, 200 graphs. A cache of
//! fixed capacity ([`MultiHeadAttention::kv_cache`]) is keras_hub's
//! (`CachedMultiHeadAttention`): buffers `[batch, kv_heads, max_length,
//! dim]` from the start, the new keys and values written at the cache's
//! index with [`Tensor::dynamic_update_slice`], and the queries attending
//! to the whole buffer under a mask made from the index (key `j` is seen
//! by the query at position `p = index + i` when `j <= p`, and `p - j <
//! w` with a sliding window): the positions not yet written are masked
//! with the future ones. The index is an `i64` scalar tensor among the
//! cache's, so it is an input of a traced step, never a number baked into
//! its graph, and every step has inputs of the same shapes: one trace
//! serves them all. The rotary positions are read at the index the same
//! way (`RotaryEmbedding::rotate_from`).
//!
//! What a fixed cache costs: each step attends to `max_length` keys
//! instead of those decoded so far (the masked ones add exact zeros), and
//! the write copies the buffer (an `O(max_length)` copy, as the
//! concatenation was).

use super::{causal_mask, window_band, HiddenRows, KvCache, MultiHeadAttention, OP};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

impl MultiHeadAttention {
    /// A [`KvCache`] of fixed capacity for this layer's
    /// [`call_cached`](Self::call_cached): zero keys `[batch,
    /// num_key_value_heads, max_length, key_dim]` and values `[..,
    /// value_dim]` in the layer's dtype, on its weights' device, and an
    /// index 0 (keras_hub's `CachedMultiHeadAttention` cache and
    /// `cache_update_index`). Decoding through it, a traced step is traced
    /// once for every position (its tensors keep their shapes); writing
    /// past `max_length` is an error. Zero sizes are errors.
    ///
    /// ```
    /// use gradtape::nn::{KvCache, MultiHeadAttention};
    /// use gradtape::{function, DType, Rng, Tensor};
    /// use std::sync::Arc;
    /// let mut rng = Rng::new(0);
    /// let mha = Arc::new(MultiHeadAttention::builder(2, 4).dtype(DType::F64).build(8, &mut rng)?);
    /// let step = {
    ///     let mha = mha.clone();
    ///     function(move |(x, cache): &(Tensor, KvCache)| {
    ///         let mut cache = cache.clone();
    ///         Ok((mha.call_cached(x, &mut cache)?, cache))
    ///     })
    /// };
    /// let x = rng.normal(&[1, 6, 8], 0.0, 1.0, DType::F64)?;
    /// let (mut growing, mut fixed) = (KvCache::new(), mha.kv_cache(1, 6)?);
    /// for t in 0..6 {
    ///     let xt = x.narrow(1, t, 1)?;
    ///     let want = mha.call_cached(&xt, &mut growing)?.to_vec::<f64>()?;
    ///     let (got, next) = step.call(&(xt, fixed))?;
    ///     fixed = next;
    ///     assert!(got.to_vec::<f64>()?.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-12));
    /// }
    /// assert_eq!((fixed.len(), step.trace_count()), (6, 1)); // one trace for six positions
    /// // a seventh position does not fit
    /// let err = mha.call_cached(&x.narrow(1, 0, 1)?, &mut fixed).unwrap_err();
    /// assert!(err.to_string().contains("capacity"), "{err}");
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn kv_cache(&self, batch: usize, max_length: usize) -> Result<KvCache> {
        if batch == 0 || max_length == 0 {
            return Err(Error::invalid(
                OP,
                format!("kv_cache needs a positive batch and max_length, got {batch} and {max_length}"),
            ));
        }
        let (dt, dev) = (self.dtype(), self.query.kernel.device());
        let zeros = |dim: usize| Tensor::try_zeros(&[batch, self.kv_heads, max_length, dim], dt)?.to(dev);
        Ok(KvCache {
            keys: Some(zeros(self.key_dim)?),
            values: Some(zeros(self.value_dim)?),
            cross: None,
            index: Some(Tensor::scalar(0i64).to(dev)?),
        })
    }

    /// Self-attention of the new positions `x` `[batch, t_new, features]`
    /// to themselves and to the positions in `cache`, which it then
    /// extends: new query `i` sits at absolute position `cache.len() + i`
    /// and sees the keys at positions up to its own (causal). Feeding a
    /// sequence in pieces (a prompt, then one position at a time) gives the
    /// rows of the causal [`call_with`](Self::call_with) on the whole
    /// sequence, each piece costing attention to the cached keys only.
    /// Inference only (no dropout); needs a self-attention layer (the
    /// key and value features the query's).
    ///
    /// With a cache of fixed capacity (from [`kv_cache`](Self::kv_cache))
    /// the new keys and values are written at the cache's index and the
    /// queries attend to the whole buffer, the positions past their own
    /// (and those not yet written) masked; the index, a tensor, moves on
    /// by `t_new`. Its rows are the growing cache's to rounding (the masked
    /// keys add exact zeros: bit for bit in the tests' Llama decoder).
    ///
    /// ```
    /// use gradtape::nn::{AttentionArgs, KvCache, MultiHeadAttention};
    /// use gradtape::{DType, Rng, Tensor};
    /// let mut rng = Rng::new(0);
    /// let mha = MultiHeadAttention::builder(2, 4).dtype(DType::F64).build(8, &mut rng)?;
    /// let x = rng.normal(&[1, 5, 8], 0.0, 1.0, DType::F64)?;
    /// let full = mha.call_with(&x, &x, AttentionArgs::new().use_causal_mask(true))?;
    /// let mut cache = KvCache::new();
    /// let prompt = mha.call_cached(&x.narrow(1, 0, 3)?, &mut cache)?;
    /// let fourth = mha.call_cached(&x.narrow(1, 3, 1)?, &mut cache)?;
    /// assert_eq!(cache.len(), 4);
    /// let want = full.narrow(1, 3, 1)?.to_vec::<f64>()?;
    /// let got = fourth.to_vec::<f64>()?;
    /// assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-12));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn call_cached(&self, x: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let [fq, fk, fv] = self.features;
        if fk != fq || fv != fq {
            return Err(Error::invalid(
                OP,
                format!("call_cached is self-attention: the layer's query, key and value features must agree, got {fq}, {fk} and {fv}"),
            ));
        }
        self.check_input("query", x, fq)?;
        if self.attention_axes_for(x.shape())? != [1] {
            return Err(Error::invalid(
                OP,
                "call_cached decodes along axis 1: the layer's attention_axes must be the default",
            ));
        }
        if let Some(index) = cache.index.clone() {
            return self.call_fixed(x, cache, index);
        }
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let past = cache.len();
        let [q, k, mut v] = self.query_key_value(x)?;
        let (q, mut k) = (self.rotate(q, past)?, self.rotate(k, past)?);
        if let (Some(ck), Some(cv)) = (&cache.keys, &cache.values) {
            let want = [b, self.kv_heads, past, self.key_dim];
            if ck.shape() != want
                || cv.shape()[..3] != want[..3]
                || cv.shape()[3] != self.value_dim
                || ck.dtype() != q.dtype()
            {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "the cache holds keys {:?} and values {:?}, which do not fit a batch of {b} for this layer ({} key/value heads, key_dim {}, value_dim {})",
                        ck.shape(),
                        cv.shape(),
                        self.kv_heads,
                        self.key_dim,
                        self.value_dim
                    ),
                ));
            }
            k = Tensor::concat(&[ck, &k], 2)?;
            v = Tensor::concat(&[cv, &v], 2)?;
        }
        // one new query sees every key; several see those up to their own
        // position (the op's causal flag counts from the start of both)
        let dev = q.device();
        let mut mask = (t > 1).then(|| causal_mask(t, past + t, past, dev)).transpose()?;
        if let Some(w) = self.window {
            let band = window_band(t, past + t, past, w, dev)?;
            mask = Some(match mask {
                Some(m) => m.logical_and(&band)?,
                None => band,
            });
        }
        let o = self.attend(&q, &k, &v, mask.as_ref(), false, false, HiddenRows::Zeros)?;
        cache.keys = Some(k);
        cache.values = Some(v);
        self.output.merge(&self.gated(x, o)?)
    }

    /// [`call_cached`](Self::call_cached) with a cache of fixed capacity
    /// (see the module docs), `x` checked.
    fn call_fixed(&self, x: &Tensor, cache: &mut KvCache, index: Tensor) -> Result<Tensor> {
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let (Some(ck), Some(cv)) = (cache.keys.clone(), cache.values.clone()) else {
            return Err(Error::invalid(OP, "a cache of fixed capacity without its buffers"));
        };
        let cap = ck.shape()[2];
        let want = [b, self.kv_heads, cap, self.key_dim];
        if ck.shape() != want
            || cv.shape()[..3] != want[..3]
            || cv.shape()[3] != self.value_dim
            || ck.dtype() != self.dtype()
            || cv.dtype() != self.dtype()
            || index.dtype() != DType::I64
            || index.rank() != 0
        {
            return Err(Error::invalid(
                OP,
                format!(
                    "the cache of fixed capacity holds keys {} {:?}, values {} {:?} and index {} {:?}, which do not fit a batch of {b} for this layer ({} key/value heads, key_dim {}, value_dim {}, {}; an i64 scalar index)",
                    ck.dtype(),
                    ck.shape(),
                    cv.dtype(),
                    cv.shape(),
                    index.dtype(),
                    index.shape(),
                    self.kv_heads,
                    self.key_dim,
                    self.value_dim,
                    self.dtype()
                ),
            ));
        }
        // (checked here where the index can be read: in a compiled step
        // the write below refuses a block past the end)
        if !crate::function::trace::recording() {
            let at = index.try_to_vec_f64()?[0];
            if at < 0.0 || at + t as f64 > cap as f64 {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "the cache's capacity is {cap} positions: {t} new at index {at} do not fit (keys {:?})",
                        ck.shape()
                    ),
                ));
            }
        }
        let [q, k, v] = self.query_key_value(x)?;
        let (q, k) = match &self.rotary {
            Some(rope) => (
                rope.rotate_from(&q, 2, 3, &index, cap)?,
                rope.rotate_from(&k, 2, 3, &index, cap)?,
            ),
            None => (q, k),
        };
        let zero = index.try_zeros_like()?;
        let start = Tensor::stack(&[&zero, &zero, &index, &zero], 0)?;
        let keys = ck.dynamic_update_slice(&k, &start)?;
        let values = cv.dynamic_update_slice(&v, &start)?;
        // query i at position index + i sees keys j <= index + i (and
        // within the window): the keys not yet written are past it
        let dev = q.device();
        let pos = Tensor::range(0.0, t as f64, 1.0, DType::I64)?
            .to(dev)?
            .add(&index)?
            .reshape(&[t, 1])?;
        let keys_at = Tensor::range(0.0, cap as f64, 1.0, DType::I64)?
            .to(dev)?
            .reshape(&[1, cap])?;
        let mut mask = keys_at.le(&pos)?;
        if let Some(w) = self.window {
            mask = mask.logical_and(&pos.sub(&keys_at)?.lt(&pos.scalar_like(w as f64)?)?)?;
        }
        let o = self.attend(&q, &keys, &values, Some(&mask), false, false, HiddenRows::Zeros)?;
        cache.index = Some(index.add(&index.scalar_like(t as f64)?)?);
        cache.keys = Some(keys);
        cache.values = Some(values);
        self.output.merge(&self.gated(x, o)?)
    }
}
