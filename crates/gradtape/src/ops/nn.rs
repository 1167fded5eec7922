//! Neural-network ops: softmax, log-softmax, the cross-entropies, bias_add.
//!
//! Softmax-type ops have their own stable kernels (the row maximum is
//! subtracted before exponentiating); their rules are written with public
//! ops, so they differentiate again.

use super::{bind, ct, expect_float, expect_same_dtype, grads, unsupported};
use crate::autodiff::tape::{self, vjp_batched};
use crate::error::{Error, Result};
use crate::kernels::cpu::elementwise::zip;
use crate::kernels::cpu::nn as k;
use crate::tensor::layout::norm_axis;
use crate::tensor::{with_float_dtype, DType, Element, Tensor};

impl Tensor {
    /// `exp(x) / sum(exp(x))` along `axis` (negative counts from the end),
    /// computed stably. Rule: `y · (g − Σ g·y)` summed along `axis`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let y = Tensor::vector(&[0.0f64, 0.0]).softmax(-1)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![0.5, 0.5]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn softmax(&self, axis: isize) -> Result<Tensor> {
        expect_float("softmax", self)?;
        let ax = norm_axis("softmax", axis, self.shape())?;
        let y = with_float_dtype!(self.dtype(), T => k::softmax::<T>("softmax", self, ax, false), _ => unreachable!())?;
        Ok(bind("Softmax", &[self], y, move |y| {
            let y = y.clone();
            vjp_batched(move |g, _| {
                let gy = g[0].mul(&y)?;
                let s = gy.sum(&[ct::axis(ax)], true)?;
                Ok(grads![Some(gy.sub(&s.mul(&y)?)?)])
            })
        }))
    }

    /// `x − log Σ exp(x)` along `axis`, computed stably. Rule:
    /// `g − softmax(x) · Σ g` along `axis`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let y = Tensor::vector(&[1000.0f64, 1000.0]).log_softmax(0)?;
    /// assert!((y.to_vec::<f64>()?[0] + 2f64.ln()).abs() < 1e-12);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn log_softmax(&self, axis: isize) -> Result<Tensor> {
        expect_float("log_softmax", self)?;
        let ax = norm_axis("log_softmax", axis, self.shape())?;
        let y =
            with_float_dtype!(self.dtype(), T => k::softmax::<T>("log_softmax", self, ax, true), _ => unreachable!())?;
        Ok(bind("LogSoftmax", &[self], y, move |y| {
            let y = y.clone();
            vjp_batched(move |g, _| {
                let s = g[0].sum(&[ct::axis(ax)], true)?;
                Ok(grads![Some(g[0].sub(&s.mul(&y.exp()?)?)?)])
            })
        }))
    }

    /// Softmax cross-entropy with dense `labels` (a probability distribution
    /// over the last axis, same shape and dtype as `logits`): per-example
    /// `−Σ labels · log_softmax(logits)` over the last axis. Differentiable
    /// in both: d/dlogits = `softmax − labels` (times the label sums), d/dlabels
    /// = `−log_softmax(logits)`, as TensorFlow.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let logits = Tensor::from_vec(vec![0.0f64, 0.0], &[1, 2])?;
    /// let labels = Tensor::from_vec(vec![1.0f64, 0.0], &[1, 2])?;
    /// let l = Tensor::softmax_cross_entropy_with_logits(&labels, &logits)?;
    /// assert!((l.to_vec::<f64>()?[0] - 2f64.ln()).abs() < 1e-12);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn softmax_cross_entropy_with_logits(labels: &Tensor, logits: &Tensor) -> Result<Tensor> {
        const OP: &str = "softmax_cross_entropy_with_logits";
        expect_float(OP, logits)?;
        expect_same_dtype(OP, logits, labels)?;
        if logits.rank() == 0 || labels.shape() != logits.shape() {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: labels.shape().to_vec(),
                rhs: logits.shape().to_vec(),
            });
        }
        labels.mul(&logits.log_softmax(-1)?)?.sum(&[-1], false)?.neg()
    }

    /// Softmax cross-entropy with integer class `labels` (`i32`/`i64`, shape
    /// `logits.shape[..-1]`, each in `0..classes`; anything else is an
    /// error naming the label): per-example `−log softmax(logits)[label]`.
    /// One fused pass computes the losses and keeps the softmax for the
    /// rule, `g · (softmax − one_hot(labels))`. Labels get no gradient.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let logits = Tensor::from_vec(vec![0.0f32, 0.0, 0.0, 5.0], &[2, 2])?;
    /// let l = Tensor::sparse_softmax_cross_entropy_with_logits(&Tensor::vector(&[0i64, 1]), &logits)?;
    /// assert!((l.to_vec::<f32>()?[0] - 2f32.ln()).abs() < 1e-6);
    /// assert!(Tensor::sparse_softmax_cross_entropy_with_logits(&Tensor::vector(&[2i64, 0]), &logits).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn sparse_softmax_cross_entropy_with_logits(labels: &Tensor, logits: &Tensor) -> Result<Tensor> {
        const OP: &str = "sparse_softmax_cross_entropy_with_logits";
        expect_float(OP, logits)?;
        if logits.rank() == 0 || labels.shape() != &logits.shape()[..logits.rank() - 1] {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: labels.shape().to_vec(),
                rhs: logits.shape().to_vec(),
            });
        }
        let classes = logits.shape()[logits.rank() - 1];
        let lab = match labels.dtype() {
            DType::I32 => k::checked_labels::<i32>(OP, labels, classes)?,
            DType::I64 => k::checked_labels::<i64>(OP, labels, classes)?,
            d => return Err(unsupported(OP, d, "i32 or i64 labels")),
        };
        let (loss, p) = with_float_dtype!(logits.dtype(), T => k::sparse_xent::<T>(OP, logits, &lab, labels.shape()), _ => unreachable!())?;
        let (x, labels_t) = (logits.clone(), labels.clone());
        Ok(bind(
            "SparseSoftmaxCrossEntropyWithLogits",
            &[labels, logits],
            loss,
            move |_| {
                vjp_batched(move |g, needs| {
                    if !needs[1] {
                        return Ok(grads![None, None]);
                    }
                    // Under an outer tape the softmax must be a differentiable
                    // function of the logits (second order); otherwise the saved one is exact.
                    let p = if tape::any_active() { x.softmax(-1)? } else { p.clone() };
                    let onehot = one_hot_like(&labels_t, &x)?;
                    let d = p.sub(&onehot)?;
                    Ok(grads![None, Some(g[0].expand_dims(-1)?.mul(&d)?)])
                })
            },
        ))
    }

    /// Logistic loss of `logits` against `labels` in `[0, 1]` (same shape and
    /// dtype), elementwise, in the stable form
    /// `max(x, 0) − x·z + log(1 + e^(−|x|))`. d/dx = `sigmoid(x) − z`,
    /// d/dz = `−x`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let l = Tensor::sigmoid_cross_entropy_with_logits(&Tensor::vector(&[1.0f64]), &Tensor::vector(&[0.0f64]))?;
    /// assert!((l.to_vec::<f64>()?[0] - 2f64.ln()).abs() < 1e-12);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn sigmoid_cross_entropy_with_logits(labels: &Tensor, logits: &Tensor) -> Result<Tensor> {
        const OP: &str = "sigmoid_cross_entropy_with_logits";
        expect_float(OP, logits)?;
        expect_same_dtype(OP, logits, labels)?;
        if labels.shape() != logits.shape() {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: labels.shape().to_vec(),
                rhs: logits.shape().to_vec(),
            });
        }
        let y = with_float_dtype!(logits.dtype(), T => zip::<T, T, T>(OP, logits, labels, |x: T, z: T| {
            let zero = T::from_f64(0.0);
            let relu = if x > zero { x } else { zero };
            relu - x * z + (-x.abs()).exp().ln_1p()
        })?, _ => unreachable!());
        let (x, z) = (logits.clone(), labels.clone());
        Ok(bind("SigmoidCrossEntropyWithLogits", &[labels, logits], y, move |_| {
            vjp_batched(move |g, needs| {
                let gz = needs[0].then(|| g[0].mul(&x)?.neg()).transpose()?;
                let gx = needs[1].then(|| g[0].mul(&x.sigmoid()?.sub(&z)?)).transpose()?;
                Ok(grads![gz, gx])
            })
        }))
    }

    /// `x + bias`, `bias` a vector as long as `x`'s last axis (an error
    /// otherwise). d/dbias sums the cotangent over every other axis.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::zeros(&[2, 3], gradtape::DType::F32);
    /// let y = x.bias_add(&Tensor::vector(&[1.0f32, 2.0, 3.0]))?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    /// assert!(x.bias_add(&Tensor::vector(&[1.0f32, 2.0])).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn bias_add(&self, bias: &Tensor) -> Result<Tensor> {
        const OP: &str = "bias_add";
        expect_same_dtype(OP, self, bias)?;
        if self.rank() == 0 || bias.rank() != 1 || bias.shape()[0] != self.shape()[self.rank() - 1] {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: self.shape().to_vec(),
                rhs: bias.shape().to_vec(),
            });
        }
        let y = with_dtype_num(OP, self, bias)?;
        let (sx, sb) = (self.shape().to_vec(), bias.shape().to_vec());
        Ok(bind("BiasAdd", &[self, bias], y, move |_| {
            vjp_batched(move |g, needs| {
                let gx = needs[0].then(|| ct::unbroadcast(&g[0], &sx)).transpose()?;
                let gb = needs[1].then(|| ct::unbroadcast(&g[0], &sb)).transpose()?;
                Ok(grads![gx, gb])
            })
        }))
    }
}

/// The raw (untaped) broadcast sum of bias_add.
fn with_dtype_num(op: &'static str, x: &Tensor, b: &Tensor) -> Result<Tensor> {
    use crate::tensor::{with_num_dtype, Num};
    with_num_dtype!(x.dtype(), T => zip::<T, T, T>(op, x, b, |u: T, v: T| u.add_wrap(v)),
        _ => Err(unsupported(op, x.dtype(), "a numeric dtype")))
}

/// A constant `one_hot(labels)` with `logits`' shape and dtype.
fn one_hot_like(labels: &Tensor, logits: &Tensor) -> Result<Tensor> {
    const OP: &str = "sparse_softmax_cross_entropy_with_logits";
    let c = logits.shape()[logits.rank() - 1];
    let lab = labels.f64_values(OP)?;
    with_float_dtype!(logits.dtype(), T => {
        let mut v = crate::kernels::cpu::filled_vec(OP, logits.numel(), T::from_f64(0.0))?;
        for (r, &l) in lab.iter().enumerate() {
            v[r * c + l as usize] = T::from_f64(1.0);
        }
        Tensor::from_vec(v, logits.shape())
    }, _ => unreachable!())
}
