//! The projections of [`MultiHeadAttention`](super::MultiHeadAttention)
//! (Keras's `EinsumDense` layers of its `query`, `key`, `value` and
//! `attention_output`), and several of them of one input as one product.
//!
//! Keras keeps the query, key and value kernels apart and projects with
//! three products. Self-attention projects one input three times, and a
//! decoder's cross-attention projects the encoder's sequence twice (key and
//! value): [`Projection::joined_heads`] multiplies that input once by the
//! kernels side by side, `x [Wq | Wk | Wv]`, and adds the biases side by
//! side in one pass (PyTorch's `in_proj` does the same). Each projection's
//! heads are then a column slice of the product, which the fused attention
//! kernels read in place in a traced step, and the backward is one product
//! for the input's gradient (`dQKV [Wq | Wk | Wv]ᵀ`) and one for the
//! kernels' (`xᵀ dQKV`), whose columns are each kernel's gradient: six
//! narrow products become two wide ones (at `[2048, 128]` by `[128, 128]`
//! the sgemm kernel runs at ~150 GFLOP/s on two cores, at `[128, 384]` at
//! ~190). The variables are Keras's, unchanged. The forward values are the
//! same sums; the input's gradient adds the three products' terms in one
//! sum (equal to rounding).

use crate::autodiff::variable::Variable;
use crate::error::Result;
use crate::tensor::Tensor;

/// One of the four projections: a kernel `[in, heads, dim]` (the output
/// projection's is `[heads, dim, out]`) and an optional bias.
pub(super) struct Projection {
    pub(super) kernel: Variable,
    pub(super) bias: Option<Variable>,
}

impl Projection {
    /// `x [b, t, in]` to `[b, heads, t, dim]`.
    pub(super) fn heads(&self, x: &Tensor, heads: usize, dim: usize) -> Result<Tensor> {
        let (b, t, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let k = self.kernel.read().reshape(&[d, heads * dim])?;
        let mut y = x.reshape(&[b * t, d])?.matmul(&k)?;
        if let Some(bias) = &self.bias {
            y = y.bias_add(&bias.read().reshape(&[heads * dim])?)?;
        }
        y.reshape(&[b, t, heads, dim])?.permute(&[0, 2, 1, 3])
    }

    /// The heads of each of `parts` (a projection, its heads and their
    /// width) of the one input `x [b, t, in]`, `[b, heads, t, dim]` each,
    /// from one product by the kernels side by side (see the module
    /// docs); projection by projection where some have a bias and others
    /// not.
    pub(super) fn joined_heads(parts: &[(&Projection, usize, usize)], x: &Tensor) -> Result<Vec<Tensor>> {
        let n = parts.len();
        let with_bias = parts.iter().filter(|(p, ..)| p.bias.is_some()).count();
        if with_bias != 0 && with_bias != n {
            return parts.iter().map(|(p, h, dim)| p.heads(x, *h, *dim)).collect();
        }
        let (b, t, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let widths: Vec<usize> = parts.iter().map(|(_, h, dim)| h * dim).collect();
        let kernels: Vec<Tensor> = parts
            .iter()
            .zip(&widths)
            .map(|((p, ..), w)| p.kernel.read().reshape(&[d, *w]))
            .collect::<Result<_>>()?;
        let mut y = x
            .reshape(&[b * t, d])?
            .matmul(&Tensor::concat(&kernels.iter().collect::<Vec<_>>(), 1)?)?;
        if with_bias == n {
            let biases: Vec<Tensor> = parts
                .iter()
                .zip(&widths)
                .filter_map(|((p, ..), w)| p.bias.as_ref().map(|v| v.read().reshape(&[*w])))
                .collect::<Result<_>>()?;
            y = y.bias_add(&Tensor::concat(&biases.iter().collect::<Vec<_>>(), 0)?)?;
        }
        y.split_sizes(&widths, 1)?
            .iter()
            .zip(parts)
            .map(|(y, (_, h, dim))| y.reshape(&[b, t, *h, *dim])?.permute(&[0, 2, 1, 3]))
            .collect()
    }

    /// `o [b, heads, t, dim]` to `[b, t, out]`.
    pub(super) fn merge(&self, o: &Tensor) -> Result<Tensor> {
        let (b, h, t, dv) = (o.shape()[0], o.shape()[1], o.shape()[2], o.shape()[3]);
        let k = self.kernel.read();
        let out = k.shape()[2];
        let mut y = o
            .permute(&[0, 2, 1, 3])?
            .reshape(&[b * t, h * dv])?
            .matmul(&k.reshape(&[h * dv, out])?)?;
        if let Some(bias) = &self.bias {
            y = y.bias_add(&bias.read())?;
        }
        y.reshape(&[b, t, out])
    }
}
