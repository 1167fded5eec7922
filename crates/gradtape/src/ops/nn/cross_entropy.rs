//! The cross-entropies: softmax (dense and sparse labels), sigmoid and
//! weighted sigmoid, and the Poisson loss.
//!
//! The sparse and sigmoid ones have fused kernels; the dense one is made of
//! `log_softmax`, the weighted one and the Poisson loss of elementwise ops. Every rule is written with public ops.
//! The sparse one's gradient is one row kernel either way: from the kept
//! softmax when nothing records it (written over the softmax's buffer,
//! which the rule alone holds: no second buffer of the logits' size), else as an op of its own
//! ([`sparse_xent_grad`], `SparseSoftmaxCrossEntropyWithLogitsGrad`, with
//! a rule of public ops), so that a traced step computes it in one pass
//! over the logits rather than five.

// (the half types take their math from `num_traits::Float`)
use super::super::desc::NnOp;
use super::super::{bind, expect_float, expect_same_dtype, grads, unsupported};
use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::elementwise::{cast, zip};
use crate::kernels::cpu::nn as k;
use crate::tensor::{alloc, with_float_dtype, DType, Element, Tensor};
#[allow(unused_imports)]
use num_traits::Float as _;

impl Tensor {
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
        let _site = crate::dispatch::site::user_op(
            "sparse_softmax_cross_entropy_with_logits",
            &[("labels", labels), ("logits", logits)],
        );
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
        // the softmax is kept for the rule only where something may ask for
        // it (a tape or a forward accumulator listens); the rule computes
        // it from the logits where it was not kept
        let keep = crate::dispatch::differentiating();
        let cpu = |labels: &Tensor, logits: &Tensor, keep: bool| -> Result<(Tensor, Option<Tensor>)> {
            match labels.dtype() {
                DType::I32 => {
                    k::checked_labels::<i32>(OP, labels, classes)?;
                    with_float_dtype!(logits.dtype(), T => k::sparse_xent::<T, i32>(OP, logits, labels, labels.shape(), keep), _ => unreachable!())
                }
                DType::I64 => {
                    k::checked_labels::<i64>(OP, labels, classes)?;
                    with_float_dtype!(logits.dtype(), T => k::sparse_xent::<T, i64>(OP, logits, labels, labels.shape(), keep), _ => unreachable!())
                }
                d => Err(unsupported(OP, d, "i32 or i64 labels")),
            }
        };
        let on_gpu = crate::dispatch::device::offload_pair(
            OP,
            &[labels, logits],
            |_| {
                if !matches!(labels.dtype(), DType::I32 | DType::I64) {
                    return Err(unsupported(OP, labels.dtype(), "i32 or i64 labels"));
                }
                // (the kernel checks the labels: one out of range makes its
                // row NaN and is the error of the next read of a value, the
                // CPU's `IndexOutOfRange`; the host does not wait mid-step)
                crate::kernels::cuda::sparse_xent(OP, labels, logits)
            },
            |h| {
                let (loss, p) = cpu(&h[0], &h[1], true)?;
                let p = p.ok_or_else(|| Error::invalid(OP, "the kernel kept no softmax".to_string()))?;
                Ok((loss, p))
            },
        );
        let (loss, p) = match on_gpu {
            Some(r) => r.map(|(loss, p)| (loss, Some(p)))?,
            None => cpu(labels, logits, keep)?,
        };
        let (x, labels_t) = (logits.clone(), labels.clone());
        // (taken by the first gradient that can write over it: see the rule)
        let p = std::sync::Mutex::new(p);
        Ok(bind(
            NnOp::SparseSoftmaxCrossEntropy,
            &[labels, logits],
            loss,
            move |_| {
                vjp(move |g, needs| {
                    if !needs[1] {
                        return Ok(grads![None, None]);
                    }
                    // empty logits (no rows, or no classes): an empty gradient,
                    // without building the one-hot classes (possibly a huge
                    // `0..classes` for no rows at all)
                    if x.numel() == 0 {
                        return Ok(grads![None, Some(x.try_zeros_like()?)]);
                    }
                    // Under an outer tape (or a trace, which records on its own
                    // tape) or a forward accumulator (forward over reverse)
                    // the gradient is an op of the logits, differentiable
                    // again (second order); otherwise the kept softmax gives it
                    // in one pass.
                    if crate::dispatch::differentiating() {
                        return Ok(grads![None, Some(sparse_xent_grad(&labels_t, &x, &g[0])?)]);
                    }
                    let mut kept = p.lock().unwrap_or_else(|e| e.into_inner());
                    let gx = match kept.take() {
                        Some(mut p) if on_host(&[&labels_t, &p, &g[0]]) => {
                            // `f32`/`f64`: written over the softmax, which
                            // this rule alone holds (a later call of a
                            // persistent tape's rule computes the same bits
                            // from the logits); else from it, kept
                            if grad_in_place(&labels_t, &mut p, &g[0])? {
                                p
                            } else {
                                let gx = grad_kernel(GRAD_OP, &labels_t, &p, &g[0], true)?;
                                *kept = Some(p);
                                gx
                            }
                        }
                        Some(p) => {
                            let gx = g[0].expand_dims(-1)?.mul(&p.sub(&one_hot_like(&labels_t, &x)?)?)?;
                            *kept = Some(p);
                            gx
                        }
                        // (not kept, or taken: from the logits, one pass on
                        // the host)
                        None => sparse_xent_grad(&labels_t, &x, &g[0])?,
                    };
                    Ok(grads![None, Some(gx)])
                })
            },
        ))
    }

    /// Logistic loss of `logits` against `labels` in `[0, 1]` (same shape and
    /// dtype), elementwise, in the stable form
    /// `max(x, 0) − x·z + log(1 + e^(−|x|))`. d/dx = `sigmoid(x) − z`
    /// (computed as `(1 − z)·σ(x) − z·σ(−x)`, exact where σ(x) rounds to
    /// 1), d/dz = `−x`.
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
        let host = |x: &Tensor, z: &Tensor| {
            with_float_dtype!(x.dtype(), T => zip::<T, T, T>(OP, x, z, |x: T, z: T| {
                let zero = T::from_f64(0.0);
                let relu = if x > zero { x } else { zero };
                relu - x * z + (-x.abs()).exp().ln_1p()
            }), _ => unreachable!())
        };
        // on a GPU: the same formula as one elementwise kernel (in `f32`
        // for the half types, rounded once)
        let gpu = crate::dispatch::device::offload(
            OP,
            &[logits, labels],
            |_| {
                let expr = if logits.dtype() == crate::tensor::DType::F64 {
                    "(a > 0.0 ? a : 0.0) - a * b + log1p(exp(-fabs(a)))"
                } else {
                    "(a > 0.0f ? a : 0.0f) - a * b + log1pf(expf(-fabsf(a)))"
                };
                crate::kernels::cuda::binary(OP, logits, labels, logits.shape(), "", expr, logits.dtype())
            },
            |h| host(&h[0], &h[1]),
        );
        let y = gpu.unwrap_or_else(|| host(logits, labels))?;
        let (x, z) = (logits.clone(), labels.clone());
        Ok(bind(NnOp::SigmoidCrossEntropy, &[labels, logits], y, move |_| {
            vjp(move |g, needs| {
                let gz = needs[0].then(|| g[0].mul(&x)?.neg()).transpose()?;
                // σ(x) − z as (1 − z)·σ(x) − z·σ(−x): no cancellation
                // where σ(x) rounds to 1 (at z = 1, x = 30 it is −σ(−30),
                // not 1 − 0.99999999999990643)
                let gx = needs[1]
                    .then(|| {
                        let d = z.neg()?.add_scalar(1.0)?.mul(&x.sigmoid()?)?;
                        g[0].mul(&d.sub(&z.mul(&x.neg()?.sigmoid()?)?)?)
                    })
                    .transpose()?;
                Ok(grads![gz, gx])
            })
        }))
    }
}

impl Tensor {
    /// [`sigmoid_cross_entropy_with_logits`](Self::sigmoid_cross_entropy_with_logits)
    /// with the positive term weighted by `pos_weight` (TensorFlow's
    /// `tf.nn.weighted_cross_entropy_with_logits`): `pos_weight · z ·
    /// −log σ(x) + (1 − z) · −log(1 − σ(x))`, computed as `(1 − z) ·
    /// softplus(x) + pos_weight · z · softplus(−x)` (TensorFlow's `(1 −
    /// z)·x + (1 + (pos_weight − 1)·z)·softplus(−x)`, the same function),
    /// whose derivative `(1 − z)·σ(x) − pos_weight·z·σ(−x)` does not
    /// cancel where σ(x) rounds to 0 or 1. Made of differentiable ops.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let (z, x) = (Tensor::vector(&[1.0f64, 0.0]), Tensor::vector(&[0.0f64, 0.0]));
    /// let l = Tensor::weighted_cross_entropy_with_logits(&z, &x, 3.0)?.to_vec::<f64>()?;
    /// let ln2 = 2f64.ln();
    /// assert!((l[0] - 3.0 * ln2).abs() < 1e-15 && (l[1] - ln2).abs() < 1e-15);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn weighted_cross_entropy_with_logits(labels: &Tensor, logits: &Tensor, pos_weight: f64) -> Result<Tensor> {
        const OP: &str = "weighted_cross_entropy_with_logits";
        expect_float(OP, logits)?;
        expect_same_dtype(OP, logits, labels)?;
        if labels.shape() != logits.shape() {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: labels.shape().to_vec(),
                rhs: logits.shape().to_vec(),
            });
        }
        if !pos_weight.is_finite() {
            return Err(Error::invalid(
                OP,
                format!("pos_weight must be finite, got {pos_weight}"),
            ));
        }
        let run = || -> Result<Tensor> {
            let (x, z) = (logits, labels);
            let negative = z.neg()?.add_scalar(1.0)?.mul(&x.softplus()?)?;
            negative.add(&z.mul_scalar(pos_weight)?.mul(&x.neg()?.softplus()?)?)
        };
        run().map_err(|e| e.for_op(OP))
    }

    /// The Poisson negative log-likelihood of `targets` given `log_input`
    /// (the log of the predicted rate; TensorFlow's
    /// `tf.nn.log_poisson_loss`): `exp(log_input) − log_input · targets`,
    /// plus, with `compute_full_loss`, Stirling's approximation of
    /// `log(targets!)`, `t·log t − t + ½·log(2πt)`, where `targets > 1`
    /// (0 elsewhere). Made of differentiable ops.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let (t, c) = (Tensor::vector(&[2.0f64]), Tensor::vector(&[0.0f64]));
    /// assert_eq!(Tensor::log_poisson_loss(&t, &c, false)?.to_vec::<f64>()?, vec![1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn log_poisson_loss(targets: &Tensor, log_input: &Tensor, compute_full_loss: bool) -> Result<Tensor> {
        const OP: &str = "log_poisson_loss";
        expect_float(OP, log_input)?;
        expect_same_dtype(OP, log_input, targets)?;
        let run = || -> Result<Tensor> {
            let loss = log_input.exp()?.sub(&log_input.mul(targets)?)?;
            if !compute_full_loss {
                return Ok(loss);
            }
            let t = targets;
            // (the log of 1 where t <= 1, so that no log of 0 or below
            // reaches the unused branch: its gradient would be NaN)
            let safe = Tensor::where_(&t.gt_scalar(1.0)?, t, &t.try_ones_like()?)?;
            let stirling = safe
                .mul(&safe.log()?)?
                .sub(&safe)?
                .add(&safe.mul_scalar(2.0 * std::f64::consts::PI)?.log()?.mul_scalar(0.5)?)?;
            let zero = t.scalar_like(0.0)?;
            loss.add(&Tensor::where_(&t.gt_scalar(1.0)?, &stirling, &zero)?)
        };
        run().map_err(|e| e.for_op(OP))
    }
}

/// The name [`sparse_xent_grad`]'s errors give.
const GRAD_OP: &str = "sparse_softmax_cross_entropy_with_logits_grad";

/// The sparse softmax cross-entropy's gradient with respect to the logits,
/// `g[.., None] · (softmax(logits) − one_hot(labels))`, as one op
/// (`SparseSoftmaxCrossEntropyWithLogitsGrad`): one row kernel reads the
/// logits once and writes the gradient, where the composite was a
/// softmax, the one-hot classes (a comparison and casts), a difference
/// and a product, each a pass over the logits' shape. Its VJP is written
/// with differentiable ops (higher orders work): with `p = softmax(x)` and
/// the cotangent `v`, `d/dx = g · p · (v − Σ v·p)` and `d/dg = Σ v · (p −
/// one_hot)` along the last axis. Tensors on a GPU, and empty ones, run
/// the composite.
pub(crate) fn sparse_xent_grad(labels: &Tensor, logits: &Tensor, g: &Tensor) -> Result<Tensor> {
    expect_float(GRAD_OP, logits)?;
    expect_same_dtype(GRAD_OP, logits, g)?;
    if logits.rank() == 0 || labels.shape() != &logits.shape()[..logits.rank() - 1] || g.shape() != labels.shape() {
        return Err(Error::invalid(
            GRAD_OP,
            format!(
                "labels {:?} and upstream gradient {:?} must have the shape of the logits {:?} without its last axis",
                labels.shape(),
                g.shape(),
                logits.shape()
            ),
        ));
    }
    if logits.numel() == 0 || !on_host(&[labels, logits, g]) {
        return g
            .expand_dims(-1)?
            .mul(&logits.softmax(-1)?.sub(&one_hot_like(labels, logits)?)?);
    }
    let out = grad_kernel(GRAD_OP, labels, logits, g, false)?;
    let (lab, x, gc) = (labels.clone(), logits.clone(), g.clone());
    Ok(bind(
        NnOp::SparseSoftmaxCrossEntropyGrad,
        &[labels, logits, g],
        out,
        move |_| {
            vjp(move |v, needs| {
                let v = &v[0];
                let p = x.softmax(-1)?;
                let gx = needs[1]
                    .then(|| {
                        let s = v.mul(&p)?.sum(&[-1], true)?;
                        gc.expand_dims(-1)?.mul(&p.mul(&v.sub(&s)?)?)
                    })
                    .transpose()?;
                let gg = needs[2]
                    .then(|| v.mul(&p.sub(&one_hot_like(&lab, &x)?)?)?.sum(&[-1], false))
                    .transpose()?;
                Ok(grads![None, gx, gg])
            })
        },
    ))
}

/// The sparse softmax cross-entropy's losses with the softmax its
/// gradient reads, from one pass of the kernel (computed, not bound: the
/// compiler's `xent_keeps_softmax` node): the losses are the bits of
/// [`Tensor::sparse_softmax_cross_entropy_with_logits`], the softmax the
/// rows [`sparse_xent_grad`] computes from the logits. `f32` or `f64`
/// logits on the host, `i32` or `i64` labels (checked).
pub(crate) fn sparse_xent_and_softmax(labels: &Tensor, logits: &Tensor) -> Result<(Tensor, Tensor)> {
    // (the errors name the op the user called)
    const OP: &str = "sparse_softmax_cross_entropy_with_logits";
    check_kept(OP, labels, logits, None)?;
    let classes = logits.shape()[logits.rank() - 1];
    let (loss, p) = match labels.dtype() {
        DType::I32 => {
            k::checked_labels::<i32>(OP, labels, classes)?;
            with_float_dtype!(logits.dtype(), T => k::sparse_xent::<T, i32>(OP, logits, labels, labels.shape(), true)?, _ => unreachable!())
        }
        _ => {
            k::checked_labels::<i64>(OP, labels, classes)?;
            with_float_dtype!(logits.dtype(), T => k::sparse_xent::<T, i64>(OP, logits, labels, labels.shape(), true)?, _ => unreachable!())
        }
    };
    let p = p.ok_or_else(|| Error::invalid(OP, "the kernel kept no softmax".to_string()))?;
    Ok((loss, p))
}

/// [`sparse_xent_grad`]'s values from the softmax [`sparse_xent_and_softmax`]
/// kept (computed, not bound: the compiler's `xent_keeps_softmax` node):
/// `g · p`, and `(p − 1) · g` at the label, the bits of the gradient from
/// the logits (the same softmax, the same two roundings).
pub(crate) fn sparse_xent_grad_from_softmax(labels: &Tensor, softmax: &Tensor, g: &Tensor) -> Result<Tensor> {
    check_kept(GRAD_OP, labels, softmax, Some(g))?;
    grad_kernel(GRAD_OP, labels, softmax, g, true)
}

/// The checks of the kept-softmax pair: `f32`/`f64` host `x` of rank at
/// least 1, `i32`/`i64` labels of `x`'s shape without its last axis, and
/// `g` (when given) of the labels' shape and `x`'s dtype.
fn check_kept(op: &'static str, labels: &Tensor, x: &Tensor, g: Option<&Tensor>) -> Result<()> {
    if !matches!(x.dtype(), DType::F32 | DType::F64) {
        return Err(unsupported(op, x.dtype(), "f32 or f64"));
    }
    if !matches!(labels.dtype(), DType::I32 | DType::I64) {
        return Err(unsupported(op, labels.dtype(), "i32 or i64 labels"));
    }
    let ts: smallvec::SmallVec<[&Tensor; 3]> = [Some(labels), Some(x), g].into_iter().flatten().collect();
    let shapes_ok = x.rank() > 0
        && labels.shape() == &x.shape()[..x.rank() - 1]
        && g.is_none_or(|g| g.shape() == labels.shape() && g.dtype() == x.dtype());
    if !shapes_ok || !on_host(&ts) {
        return Err(Error::invalid(
            op,
            format!(
                "host tensors with labels {:?} and upstream gradient {:?} of the shape of {:?} without its last axis (and its dtype {:?}), got {:?}",
                labels.shape(),
                g.map(Tensor::shape),
                x.shape(),
                x.dtype(),
                g.map(Tensor::dtype)
            ),
        ));
    }
    Ok(())
}

/// Whether every tensor is on the host.
fn on_host(ts: &[&Tensor]) -> bool {
    ts.iter().all(|t| t.device() == crate::tensor::Device::Cpu)
}

/// [`sparse_xent_grad`]'s kernel on the host: from the logits, or from
/// their softmax (`probs`); the half types computed in `f32` and rounded
/// once. Checks the labels.
fn grad_kernel(op: &'static str, labels: &Tensor, src: &Tensor, g: &Tensor, probs: bool) -> Result<Tensor> {
    if src.dtype().is_half() {
        // (the raw conversions: this runs inside the op, recorded as one)
        let (s, g32) = (cast(src, DType::F32)?, cast(g, DType::F32)?);
        return cast(&grad_kernel(op, labels, &s, &g32, probs)?, src.dtype());
    }
    let classes = src.shape()[src.rank() - 1];
    match labels.dtype() {
        DType::I32 => {
            k::checked_labels::<i32>(op, labels, classes)?;
            with_float_dtype!(src.dtype(), T => k::sparse_xent_grad::<T, i32>(op, src, labels, g, probs), _ => unreachable!())
        }
        DType::I64 => {
            k::checked_labels::<i64>(op, labels, classes)?;
            with_float_dtype!(src.dtype(), T => k::sparse_xent_grad::<T, i64>(op, src, labels, g, probs), _ => unreachable!())
        }
        d => Err(unsupported(op, d, "i32 or i64 labels")),
    }
}

/// The gradient from the kept softmax `p` written over `p` when `p` is an
/// `f32` or `f64` host tensor that nothing else holds (`true`); nothing
/// done otherwise (`false`). Checks the labels. Half types are left out:
/// their kept softmax is rounded, so the gradient from it differs from the
/// one from the logits, which a second call of a persistent tape's rule
/// would compute once this buffer is spent.
fn grad_in_place(labels: &Tensor, p: &mut Tensor, g: &Tensor) -> Result<bool> {
    if !matches!(p.dtype(), DType::F32 | DType::F64) || g.dtype() != p.dtype() {
        return Ok(false);
    }
    let classes = p.shape()[p.rank() - 1];
    match labels.dtype() {
        DType::I32 => {
            k::checked_labels::<i32>(GRAD_OP, labels, classes)?;
            with_float_dtype!(p.dtype(), T => k::sparse_xent_grad_in_place::<T, i32>(GRAD_OP, p, labels, g), _ => Ok(false))
        }
        DType::I64 => {
            k::checked_labels::<i64>(GRAD_OP, labels, classes)?;
            with_float_dtype!(p.dtype(), T => k::sparse_xent_grad_in_place::<T, i64>(GRAD_OP, p, labels, g), _ => Ok(false))
        }
        d => Err(unsupported(GRAD_OP, d, "i32 or i64 labels")),
    }
}

/// `one_hot(labels)` in `logits`' shape and dtype, made of public ops (the
/// labels compared with `0..classes`), so that a traced gradient follows the
/// labels of each call rather than those it was traced with.
fn one_hot_like(labels: &Tensor, logits: &Tensor) -> Result<Tensor> {
    const OP: &str = "sparse_softmax_cross_entropy_with_logits";
    let c = logits.shape()[logits.rank() - 1];
    let classes = Tensor::from_vec(alloc::try_collect(OP, (0..c).map(|i| i as i64))?, &[c])?;
    let classes = crate::kernels::gpu::to_device(OP, &classes, logits.device())?;
    labels
        .cast(DType::I64)?
        .expand_dims(-1)?
        .eq(&classes)?
        .cast(logits.dtype())
}
