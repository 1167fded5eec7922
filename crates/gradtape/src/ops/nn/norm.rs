//! Normalisation and losses built from differentiable ops: moments,
//! batch, layer and RMS normalisation, l2_normalize, l2_loss, embedding_lookup.
//!
//! These are compositions of public ops, so their gradients (of any order)
//! come from the ops they are made of; `layer_normalization` over trailing
//! axes runs as one fused op (`layer_norm.rs`) where its kernel applies.

use super::super::reduce::norm_axes;
use super::super::{expect_float, expect_same_dtype};
use crate::error::{Error, Result};
use crate::tensor::layout::broadcast_shapes;
use crate::tensor::{DType, Tensor};

/// Checks that `t` (named `what`) has `x`'s dtype and broadcasts against
/// `shape` without changing it.
fn expect_param(op: &'static str, x: &Tensor, shape: &[usize], t: &Tensor) -> Result<()> {
    expect_same_dtype(op, x, t)?;
    match broadcast_shapes(op, shape, t.shape()) {
        Ok(s) if s.as_slice() == shape => Ok(()),
        _ => Err(Error::ShapeMismatch {
            op,
            lhs: shape.to_vec(),
            rhs: t.shape().to_vec(),
        }),
    }
}

/// Fails unless `eps` is finite and `>= 0`.
fn check_eps(op: &'static str, eps: f64) -> Result<()> {
    if eps >= 0.0 && eps.is_finite() {
        Ok(())
    } else {
        Err(Error::invalid(op, format!("eps must be finite and >= 0, got {eps}")))
    }
}

impl Tensor {
    /// Mean and (biased) variance over `axes`, as TensorFlow's `moments`.
    /// Both are differentiable to any order.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[1.0f64, 2.0, 3.0, 6.0]);
    /// let (m, v) = x.moments(&[0], false)?;
    /// assert_eq!((m.to_scalar::<f64>()?, v.to_scalar::<f64>()?), (3.0, 3.5));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn moments(&self, axes: &[isize], keepdims: bool) -> Result<(Tensor, Tensor)> {
        expect_float("moments", self)?;
        let ax = norm_axes("moments", axes, self.shape())?;
        // one reduction for the mean; kept dims by a reshape (a view)
        let kept: Vec<usize> = (0..self.rank())
            .map(|i| if ax.contains(&i) { 1 } else { self.shape()[i] })
            .collect();
        let mean = self.mean(axes, false)?;
        let mk = mean.reshape(&kept)?;
        let var = self.sub(&mk)?.square()?.mean(axes, false)?;
        if keepdims {
            Ok((mk, var.reshape(&kept)?))
        } else {
            Ok((mean, var))
        }
    }

    /// `(x − mean) / sqrt(variance + eps) · scale + offset`, every argument
    /// broadcasting against `x` (and not beyond its shape); `offset` and
    /// `scale` are optional (0 and 1).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[1.0f64, 3.0]);
    /// let y = Tensor::batch_normalization(&x, &Tensor::scalar(2.0f64), &Tensor::scalar(1.0f64), None, None, 0.0)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![-1.0, 1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn batch_normalization(
        x: &Tensor,
        mean: &Tensor,
        variance: &Tensor,
        offset: Option<&Tensor>,
        scale: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        const OP: &str = "batch_normalization";
        expect_float(OP, x)?;
        let shape = x.shape();
        for t in [Some(mean), Some(variance), offset, scale].into_iter().flatten() {
            expect_param(OP, x, shape, t)?;
        }
        check_eps(OP, eps)?;
        let mut inv = variance.add_scalar(eps)?.pow_scalar(-0.5)?;
        if let Some(s) = scale {
            inv = inv.mul(s)?;
        }
        let y = x.sub(mean)?.mul(&inv)?;
        match offset {
            Some(o) => y.add(o),
            None => Ok(y),
        }
    }

    /// Layer normalisation: normalises over `axes` (mean 0, variance 1,
    /// with `eps` added to the variance), then `· gamma + beta` (optional,
    /// broadcasting against `x`).
    ///
    /// Over the last axes of an `f32`/`f64` tensor on the CPU, with
    /// `gamma` and `beta` varying along those axes only (a layer's), it
    /// is one op, `LayerNorm`, with a row kernel each way; otherwise the
    /// composite of `moments` and `batch_normalization`. A half-precision
    /// tensor on the CPU is normalised in `f32` (it, `gamma` and `beta`
    /// cast to `f32`) and the result rounded once to its dtype, as Keras
    /// computes a half layer normalisation.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f64, 3.0, 10.0, 20.0], &[2, 2])?;
    /// let y = x.layer_normalization(&[-1], None, None, 0.0)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![-1.0, 1.0, -1.0, 1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn layer_normalization(
        &self,
        axes: &[isize],
        gamma: Option<&Tensor>,
        beta: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        const OP: &str = "layer_normalization";
        expect_float(OP, self)?;
        let ax = norm_axes(OP, axes, self.shape())?;
        for t in [gamma, beta].into_iter().flatten() {
            expect_param(OP, self, self.shape(), t)?;
        }
        check_eps(OP, eps)?;
        if self.dtype().is_half() && self.device() == crate::tensor::Device::Cpu {
            // in f32, rounded once at the end (as Keras normalises a half
            // tensor): the fused f32 op below, where the half composite
            // ran some ten ops in half arithmetic each way
            let f = |t: &Tensor| t.cast(DType::F32);
            let (g, b) = (gamma.map(f).transpose()?, beta.map(f).transpose()?);
            return f(self)?
                .layer_normalization(axes, g.as_ref(), b.as_ref(), eps)?
                .cast(self.dtype());
        }
        // one fused op where its kernel applies (see `layer_norm.rs`)
        if let Some(y) = super::layer_norm::fused(self, &ax, gamma, beta, eps)? {
            return Ok(y);
        }
        let (mean, var) = self.moments(axes, true)?;
        Tensor::batch_normalization(self, &mean, &var, beta, gamma, eps)
    }

    /// Root-mean-square normalisation (Zhang & Sennrich, 2019; Keras's
    /// `ops.rms_normalization`, PyTorch's `F.rms_norm`):
    /// `x / sqrt(mean(x², axes) + eps) · scale`, with no centring and no
    /// offset. `scale` is optional and broadcasts against `x` (a layer's
    /// is a vector over the last axis, see [`nn::RMSNorm`](crate::nn::RMSNorm)).
    ///
    /// `f16`/`bf16` inputs are computed in `f32` and the result cast back,
    /// as Keras and PyTorch do (their squares overflow `f16` past 256).
    /// A composite of differentiable ops, so its derivatives of any order
    /// and its forward mode are theirs. A row of zeros with `eps = 0` is
    /// `0 / 0`, NaN, as the formula says.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec(vec![3.0f64, 4.0, 0.0, -2.0], &[2, 2])?;
    /// let y = x.rms_normalization(&[-1], None, 0.0)?;
    /// // rms of [3, 4] is 5/√2; of [0, -2], √2
    /// let r = 2f64.sqrt();
    /// let want = [3.0 / 5.0 * r, 4.0 / 5.0 * r, 0.0, -r];
    /// assert!(y.to_vec::<f64>()?.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-15));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn rms_normalization(&self, axes: &[isize], scale: Option<&Tensor>, eps: f64) -> Result<Tensor> {
        const OP: &str = "rms_normalization";
        expect_float(OP, self)?;
        norm_axes(OP, axes, self.shape())?;
        if let Some(s) = scale {
            expect_param(OP, self, self.shape(), s)?;
        }
        check_eps(OP, eps)?;
        let dtype = self.dtype();
        let wide = matches!(dtype, DType::F16 | DType::BF16);
        let work = |t: &Tensor| if wide { t.cast(DType::F32) } else { Ok(t.clone()) };
        let run = || -> Result<Tensor> {
            let x = work(self)?;
            let inv = x.square()?.mean(axes, true)?.add_scalar(eps)?.rsqrt()?;
            let mut y = x.mul(&inv)?;
            if let Some(s) = scale {
                y = y.mul(&work(s)?)?;
            }
            if wide {
                y.cast(dtype)
            } else {
                Ok(y)
            }
        };
        run().map_err(|e| e.for_op(OP))
    }

    /// `x / sqrt(max(sum(x², axes), epsilon))` (TensorFlow's
    /// `tf.math.l2_normalize`, whose default `epsilon` is `1e-12`): unit
    /// vectors along `axes`; a vector whose squared norm is below
    /// `epsilon` is scaled by `1 / √epsilon` instead (the zero vector stays
    /// zero, with a finite gradient). Made of differentiable ops.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec(vec![3.0f64, 4.0, 0.0, 0.0], &[2, 2])?;
    /// let y = x.l2_normalize(&[-1], 1e-12)?;
    /// let want = [0.6, 0.8, 0.0, 0.0];
    /// assert!(y.to_vec::<f64>()?.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-15));
    /// assert!(x.l2_normalize(&[-1], -1.0).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn l2_normalize(&self, axes: &[isize], epsilon: f64) -> Result<Tensor> {
        const OP: &str = "l2_normalize";
        expect_float(OP, self)?;
        norm_axes(OP, axes, self.shape())?;
        check_eps(OP, epsilon)?;
        let run = || -> Result<Tensor> {
            let sq = self.square()?.sum(axes, true)?;
            let floor = self.scalar_like(epsilon)?;
            self.mul(&sq.maximum(&floor)?.rsqrt()?)
        };
        run().map_err(|e| e.for_op(OP))
    }

    /// `sum(x²) / 2`, a scalar (floats).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// assert_eq!(Tensor::vector(&[1.0f32, 2.0]).l2_loss()?.to_scalar::<f32>()?, 2.5);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn l2_loss(&self) -> Result<Tensor> {
        expect_float("l2_loss", self)?;
        // (x · x/2, not x²/2: the gradient, x, as TensorFlow's, where 2x
        // overflowed at |x| > max/2: -inf for -f64::MAX; random programs
        // vs TF, seed 42's program 1330)
        self.mul(&self.mul_scalar(0.5)?)?.sum_all()
    }

    /// Rows of the table `self` (`[vocab, ..]`) picked by integer `ids`:
    /// `gather(ids, 0)`, so its gradient w.r.t. the table is gather's.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let table = Tensor::from_vec(vec![0.0f32, 1.0, 10.0, 11.0, 20.0, 21.0], &[3, 2])?;
    /// let e = table.embedding_lookup(&Tensor::vector(&[2i64, 2, 0]))?;
    /// assert_eq!(e.to_vec::<f32>()?, vec![20.0, 21.0, 20.0, 21.0, 0.0, 1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn embedding_lookup(&self, ids: &Tensor) -> Result<Tensor> {
        let _site = crate::dispatch::site::user_op("embedding_lookup", &[("table", self), ("ids", ids)]);
        if self.rank() == 0 {
            return Err(Error::invalid(
                "embedding_lookup",
                "the table must have rank >= 1, got a scalar",
            ));
        }
        self.gather(ids, 0).map_err(|e| e.for_op("embedding_lookup"))
    }
}
