//! Grouped-query attention (GQA, Ainslie et al. 2023): fewer key/value
//! heads than query heads, each key/value head shared by a group of
//! consecutive query heads, as PyTorch's `scaled_dot_product_attention(...,
//! enable_gqa=True)` and Keras's `GroupedQueryAttention`.
//!
//! It is the fused attention op on views, no copy: the heads axis of `q`
//! split into `[hkv, group]` (a view), and `k`, `v` with a unit axis there
//! broadcast to the group (views whose group axis has stride 0: the
//! kernels read key/value head `h / group` where the query head `h` is).
//! So it has that op's kernels, rules and orders of derivatives; the
//! gradient of `k` and `v` is the broadcast's, each group's sum. (It
//! repeated `k` and `v` along the head axis before, a copy of each that
//! the tape kept too.) The flat batch index of a query head is the same
//! either way, so the dropout decisions are.

use super::attention::AttentionDropout;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

const OP: &str = "grouped_query_attention";

impl Tensor {
    /// Attention of `q: [..., hq, tq, d]` to `k: [..., hkv, tk, d]` and
    /// `v: [..., hkv, tk, dv]` with `hkv` dividing `hq`: query head `h`
    /// reads key/value head `h / (hq / hkv)` (PyTorch's `enable_gqa=True`).
    /// `mask`, `causal` and `scale` are
    /// [`scaled_dot_product_attention`](Self::scaled_dot_product_attention)'s
    /// (the mask broadcasts to `[..., hq, tq, tk]`), and `dropout`, where
    /// given,
    /// [`scaled_dot_product_attention_dropout`](Self::scaled_dot_product_attention_dropout)'s.
    /// With `hkv = hq` it is that op.
    ///
    /// ```
    /// use gradtape::{DType, Tensor};
    /// let q = Tensor::random_normal(&[1, 4, 3, 2], 0.0, 1.0, DType::F64, 1)?;
    /// let k = Tensor::random_normal(&[1, 2, 3, 2], 0.0, 1.0, DType::F64, 2)?;
    /// let v = Tensor::random_normal(&[1, 2, 3, 5], 0.0, 1.0, DType::F64, 3)?;
    /// let o = q.grouped_query_attention(&k, &v, None, true, None, None)?;
    /// assert_eq!(o.shape(), &[1, 4, 3, 5]);
    /// // query heads 2 and 3 read the second key/value head
    /// let alone = q.narrow(1, 3, 1)?.scaled_dot_product_attention(
    ///     &k.narrow(1, 1, 1)?, &v.narrow(1, 1, 1)?, None, true, None)?;
    /// assert_eq!(o.narrow(1, 3, 1)?.to_vec::<f64>()?, alone.to_vec::<f64>()?);
    /// // 3 key/value heads do not divide 4 query heads
    /// let k3 = Tensor::zeros(&[1, 3, 3, 2], DType::F64);
    /// assert!(q.grouped_query_attention(&k3, &k3, None, false, None, None).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn grouped_query_attention(
        &self,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        causal: bool,
        scale: Option<f64>,
        dropout: Option<AttentionDropout>,
    ) -> Result<Tensor> {
        let (q, r) = (self, self.rank());
        if r < 3 || k.rank() != r || v.rank() != r {
            return Err(Error::invalid(
                OP,
                format!(
                    "q, k and v must have one rank of at least 3 ([..., heads, time, width]), got shapes {:?}, {:?} and {:?}",
                    q.shape(),
                    k.shape(),
                    v.shape()
                ),
            ));
        }
        let (hq, hkv) = (q.shape()[r - 3], k.shape()[r - 3]);
        if hkv == 0 || v.shape()[r - 3] != hkv || hq % hkv != 0 {
            return Err(Error::invalid(
                OP,
                format!(
                    "k and v must have one number of heads (axis -3) dividing q's, got q {:?}, k {:?} and v {:?}",
                    q.shape(),
                    k.shape(),
                    v.shape()
                ),
            ));
        }
        let run = |q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>| match dropout {
            Some(d) => q.scaled_dot_product_attention_dropout(k, v, mask, causal, scale, d),
            None => q.scaled_dot_product_attention(k, v, mask, causal, scale),
        };
        let out = match grouped(q, k, v, mask) {
            Ok(Some(g)) => run(&g.q, &g.k, &g.v, g.mask.as_ref()).and_then(|o| g.ungroup(&o)),
            Ok(None) => run(q, k, v, mask),
            Err(e) => Err(e),
        };
        out.map_err(|e| e.for_op(OP))
    }
}

/// The operands of a grouped-query attention as those of one attention
/// call on views (see the module docs): `q` `[..., hkv, group, tq, d]`,
/// `k`, `v` broadcast to `[..., hkv, group, tk, *]`, the mask with its
/// heads axis split too.
pub(crate) struct Grouped {
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    pub mask: Option<Tensor>,
    /// The query heads.
    hq: usize,
}

impl Grouped {
    /// The attention's output `[..., hkv, group, tq, dv]` as `[..., hq, tq,
    /// dv]` (a view).
    pub fn ungroup(&self, o: &Tensor) -> Result<Tensor> {
        let r = o.rank();
        let mut s = o.shape()[..r - 4].to_vec();
        s.extend([self.hq, o.shape()[r - 2], o.shape()[r - 1]]);
        o.reshape(&s)
    }
}

/// `q` `[..., hq, tq, d]`, `k` `[..., hkv, tk, d]`, `v` `[..., hkv, tk,
/// dv]` (ranks of at least 3, `hkv` dividing `hq`) and a mask broadcasting
/// to `[..., hq, tq, tk]`, as [`Grouped`] views; `None` where `hkv = hq`
/// (no group), or where the shapes are not those (the attention op then
/// reports them).
pub(crate) fn grouped(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> Result<Option<Grouped>> {
    let r = q.rank();
    if r < 3 || k.rank() != r || v.rank() != r {
        return Ok(None);
    }
    let (hq, hkv) = (q.shape()[r - 3], k.shape()[r - 3]);
    if hkv == 0 || hkv == hq || hq % hkv != 0 || v.shape()[r - 3] != hkv {
        return Ok(None);
    }
    let g = hq / hkv;
    // `shape` with its axis -3 (of `n`) replaced by `parts`
    let split = |shape: &[usize], parts: [usize; 2]| -> Vec<usize> {
        let n = shape.len();
        let mut s = shape[..n - 3].to_vec();
        s.extend(parts);
        s.extend(&shape[n - 2..]);
        s
    };
    let qg = q.reshape(&split(q.shape(), [hkv, g]))?;
    let spread = |t: &Tensor| -> Result<Tensor> {
        t.reshape(&split(t.shape(), [hkv, 1]))?
            .broadcast_to(&split(t.shape(), [hkv, g]))
    };
    let mask = match mask {
        Some(m) if m.rank() >= 3 => {
            let h = m.shape()[m.rank() - 3];
            let parts = if h == hq { [hkv, g] } else { [1, 1] };
            if h != hq && h != 1 {
                return Ok(None);
            }
            Some(m.reshape(&split(m.shape(), parts))?)
        }
        other => other.cloned(),
    };
    Ok(Some(Grouped {
        q: qg,
        k: spread(k)?,
        v: spread(v)?,
        mask,
        hq,
    }))
}
