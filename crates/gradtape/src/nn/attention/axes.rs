//! Keras's `attention_axes`: attention over axes other than the time axis
//! of `[batch, time, features]` inputs (a 2-D image `[B, H, W, C]` with
//! `attention_axes=(1, 2)`, every pixel attending to every pixel).
//!
//! Keras projects each position's features into the heads (the last axis
//! split into `[heads, dim]`), takes the scores over the product of the
//! attention axes (the softmax runs over all of them at once), and treats
//! the other axes like the batch. The projections are per position, so
//! the same computation is the layer's rank-3 path on the inputs permuted
//! to `[B, other..., attention..., C]` and flattened to `[B · Π other,
//! Π attention, C]`, the output flattened back; that is what this does,
//! rather than a second attention path: the fused kernels, masks, grouped
//! heads and gradients are those of the rank-3 layer. Keras's scores
//! `[B, other..., heads, attention_q..., attention_k...]` are the rank-3
//! scores reshaped, and an attention mask in that layout (the heads' axis
//! optional, inserted where Keras inserts it) is flattened the same way.
//!
//! The padding masks, the causal mask and the sliding window of Keras's
//! `_compute_attention_mask` read the axis 1 of rank-3 inputs; with other
//! attention axes they are refused (an attention mask says the same).

use super::super::attention_args::as_keep;
use super::{AttentionArgs, MultiHeadAttention, OP};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// How inputs of another rank or attention axes map onto the rank-3 path.
pub(super) struct AxesPlan {
    /// `[0, other..., attention..., last]`
    perm: Vec<usize>,
    /// the attention axes, normalised, in the order given
    axes: Vec<usize>,
    /// the sizes of the batch and the other axes
    lead: Vec<usize>,
    /// the sizes of the query's and the key's attention axes
    aq: Vec<usize>,
    ak: Vec<usize>,
}

impl MultiHeadAttention {
    /// The attention axes for inputs of `shape`: the layer's, normalised
    /// (negative ones from the end), or every axis between the batch's
    /// and the features'. The batch, the features, repeats and axes out of
    /// range are errors.
    pub(super) fn attention_axes_for(&self, shape: &[usize]) -> Result<Vec<usize>> {
        let r = shape.len();
        let Some(axes) = &self.attention_axes else {
            return Ok((1..r.saturating_sub(1)).collect());
        };
        let mut out = Vec::with_capacity(axes.len());
        for &a in axes {
            let n = if a < 0 { a + r as isize } else { a };
            if n < 1 || n + 1 >= r as isize || out.contains(&(n as usize)) {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "attention_axes {axes:?} must name distinct axes of the inputs {shape:?} other than the batch (0) and the features (the last, {})",
                        r as isize - 1
                    ),
                ));
            }
            out.push(n as usize);
        }
        Ok(out)
    }

    /// The plan of a call whose inputs are not `[batch, time, features]`
    /// attended over the time axis; `None` for those (and for inputs of
    /// rank below 3, which the rank-3 path refuses).
    pub(super) fn axes_plan(
        &self,
        query: &Tensor,
        value: &Tensor,
        args: &AttentionArgs<'_>,
    ) -> Result<Option<AxesPlan>> {
        let r = query.rank();
        if r < 3 || (r == 3 && self.attention_axes.is_none()) {
            return Ok(None);
        }
        let axes = self.attention_axes_for(query.shape())?;
        if axes == [1] && r == 3 {
            return Ok(None);
        }
        let key = args.key.unwrap_or(value);
        let others: Vec<usize> = (1..r - 1).filter(|a| !axes.contains(a)).collect();
        let (qs, ks, vs) = (query.shape(), key.shape(), value.shape());
        let agree = vs.len() == r
            && ks.len() == r
            && std::iter::once(&0)
                .chain(&others)
                .all(|&a| vs[a] == qs[a] && ks[a] == qs[a])
            && axes.iter().all(|&a| ks[a] == vs[a]);
        if !agree {
            return Err(Error::invalid(
                OP,
                format!(
                    "with attention axes {axes:?}, the query {qs:?}, key {ks:?} and value {vs:?} must have one rank and agree on every other axis but the features (and the key and value on the attention axes)"
                ),
            ));
        }
        let masks = [
            args.query_mask.is_some(),
            args.value_mask.is_some(),
            args.key_mask.is_some(),
            args.use_causal_mask,
            self.window.is_some(),
        ];
        if masks.iter().any(|&m| m) {
            return Err(Error::invalid(
                OP,
                format!(
                    "the padding masks, use_causal_mask and sliding_window need [batch, time, features] inputs attended over axis 1, not attention axes {axes:?} of {qs:?}: give an attention_mask"
                ),
            ));
        }
        let mut perm = vec![0];
        perm.extend(&others);
        perm.extend(&axes);
        perm.push(r - 1);
        let lead = std::iter::once(&0).chain(&others).map(|&a| qs[a]).collect();
        Ok(Some(AxesPlan {
            perm,
            lead,
            aq: axes.iter().map(|&a| qs[a]).collect(),
            ak: axes.iter().map(|&a| vs[a]).collect(),
            axes,
        }))
    }
}

impl AxesPlan {
    /// `x` `[B, ..., C]` as `[B · Π other, Π attention, C]`.
    fn flat(&self, x: &Tensor) -> Result<Tensor> {
        let s = x.shape();
        let t: usize = self.axes.iter().map(|&a| s[a]).product();
        x.permute(&self.perm)?
            .reshape(&[self.lead.iter().product(), t, s[s.len() - 1]])
    }

    /// An attention mask in Keras's layout `[B, other..., (heads,)
    /// attention_q..., attention_k...]` (axes of size 1 broadcast, the
    /// missing leading ones inserted before the attention axes' as Keras
    /// does) as `[B · Π other, heads|1, t_q, t_k]`.
    fn mask(&self, m: &Tensor, heads: usize) -> Result<Tensor> {
        let n_att = 2 * self.axes.len();
        let mut full = self.lead.clone();
        full.push(heads);
        full.extend(&self.aq);
        full.extend(&self.ak);
        let rank = m.rank();
        let shape = (n_att..=full.len()).contains(&rank).then(|| {
            let mut s = m.shape().to_vec();
            let at = rank - n_att;
            s.splice(at..at, std::iter::repeat_n(1, full.len() - rank));
            s
        });
        let fits = shape
            .as_ref()
            .is_some_and(|s| s.iter().zip(&full).all(|(&d, &want)| d == want || d == 1));
        if !fits || !(m.dtype() == DType::Bool || m.dtype().is_int()) {
            return Err(Error::invalid(
                OP,
                format!(
                    "with attention axes {:?}, the attention mask must be bool (or 0/1 integers) and broadcast to the scores [batch, other axes..., num_heads, query's attention axes..., key's attention axes...] = {full:?} (the heads' axis optional), got {} {:?}",
                    self.axes,
                    m.dtype(),
                    m.shape()
                ),
            ));
        }
        let shape = shape.expect("checked");
        let h = shape[self.lead.len()];
        full[self.lead.len()] = h;
        as_keep(m)?.reshape(&shape)?.broadcast_to(&full)?.reshape(&[
            self.lead.iter().product(),
            h,
            self.aq.iter().product(),
            self.ak.iter().product(),
        ])
    }

    /// The output `[B · Π other, t_q, out]` in the query's layout.
    fn unflat(&self, y: &Tensor) -> Result<Tensor> {
        let mut shape = self.lead.clone();
        shape.extend(&self.aq);
        shape.push(y.shape()[2]);
        let mut back = vec![0; self.perm.len()];
        for (i, &a) in self.perm.iter().enumerate() {
            back[a] = i;
        }
        y.reshape(&shape)?.permute(&back)
    }

    /// The call of `mha` on the flattened inputs (and the scores `[B,
    /// other..., heads, attention_q..., attention_k...]` with
    /// `with_scores`).
    pub(super) fn run(
        &self,
        mha: &MultiHeadAttention,
        query: &Tensor,
        value: &Tensor,
        args: AttentionArgs<'_>,
        with_scores: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        // (one tensor flattened once: self-attention stays self-attention)
        let q = self.flat(query)?;
        let v = if value.id() == query.id() {
            q.clone()
        } else {
            self.flat(value)?
        };
        let k = match args.key {
            Some(k) if k.id() == value.id() => Some(v.clone()),
            Some(k) => Some(self.flat(k)?),
            None => None,
        };
        let mask = args.attention_mask.map(|m| self.mask(m, mha.num_heads)).transpose()?;
        let flat_args = AttentionArgs {
            key: k.as_ref(),
            attention_mask: mask.as_ref(),
            training: args.training,
            ..AttentionArgs::default()
        };
        if !with_scores {
            return Ok((self.unflat(&mha.call_flat(&q, &v, flat_args, None)?)?, None));
        }
        let (y, s) = mha.scores_flat(&q, &v, flat_args)?;
        let mut shape = self.lead.clone();
        shape.push(mha.num_heads);
        shape.extend(&self.aq);
        shape.extend(&self.ak);
        Ok((self.unflat(&y)?, Some(s.reshape(&shape)?)))
    }
}
