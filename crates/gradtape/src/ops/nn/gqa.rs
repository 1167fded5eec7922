//! Grouped-query attention (GQA, Ainslie et al. 2023): fewer key/value
//! heads than query heads, each key/value head shared by a group of
//! consecutive query heads, as PyTorch's `scaled_dot_product_attention(...,
//! enable_gqa=True)` and Keras's `GroupedQueryAttention`.
//!
//! It is the fused attention op on keys and values repeated along the head
//! axis (`repeat`, whose gradient sums each group's copies), so it has
//! that op's kernels, rules and orders of derivatives; the repeat costs a
//! copy of `k` and `v`, small beside attention's products.

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
        let group = hq / hkv;
        let (k, v) = if group == 1 {
            (k.clone(), v.clone())
        } else {
            (k.repeat(group, -3)?, v.repeat(group, -3)?)
        };
        let out = match dropout {
            Some(d) => q.scaled_dot_product_attention_dropout(&k, &v, mask, causal, scale, d),
            None => q.scaled_dot_product_attention(&k, &v, mask, causal, scale),
        };
        out.map_err(|e| e.for_op(OP))
    }
}
