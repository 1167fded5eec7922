//! The classification losses' per-sample values (Keras's formulas): the
//! cross-entropies, their focal variants and the hinge losses, each
//! reducing the last axis.

use super::{clip, same_shape, smooth};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// `1 − t`.
fn one_minus(t: &Tensor) -> Result<Tensor> {
    t.neg()?.add_scalar(1.0)
}

/// `−(y log p + (1 − y) log(1 − p))`, elementwise, `p` clipped to `[ε, 1 −
/// ε]` (Keras's `ops.binary_crossentropy` from probabilities).
fn bce_of_probabilities(y: &Tensor, p: &Tensor) -> Result<Tensor> {
    let p = clip(p)?;
    y.mul(&p.log()?)?
        .add(&one_minus(y)?.mul(&one_minus(&p)?.log()?)?)?
        .neg()
}

/// Binary cross-entropy, mean over the last axis.
pub(super) fn binary(y_true: &Tensor, y_pred: &Tensor, from_logits: bool, label_smoothing: f64) -> Result<Tensor> {
    const OP: &str = "binary_crossentropy";
    let p = same_shape(OP, y_true, y_pred)?;
    let y = smooth(OP, y_true, label_smoothing, 2.0)?;
    let bce = if from_logits {
        Tensor::sigmoid_cross_entropy_with_logits(&y, p)?
    } else {
        bce_of_probabilities(&y, p)?
    };
    bce.mean(&[-1], false)
}

/// The number of classes (the last axis) of `p`.
fn classes(op: &'static str, p: &Tensor) -> Result<usize> {
    p.shape()
        .last()
        .copied()
        .ok_or_else(|| Error::invalid(op, "predictions must have rank >= 1"))
}

/// `p` over its sum along the last axis, clipped to `[ε, 1 − ε]`.
fn renormalised(p: &Tensor) -> Result<Tensor> {
    clip(&p.div(&p.sum(&[-1], true)?)?)
}

/// Categorical cross-entropy over the last axis.
pub(super) fn categorical(y_true: &Tensor, y_pred: &Tensor, from_logits: bool, label_smoothing: f64) -> Result<Tensor> {
    const OP: &str = "categorical_crossentropy";
    let p = same_shape(OP, y_true, y_pred)?;
    let y = smooth(OP, y_true, label_smoothing, classes(OP, p)? as f64)?;
    if from_logits {
        Tensor::softmax_cross_entropy_with_logits(&y, p)
    } else {
        y.mul(&renormalised(p)?.log()?)?.sum(&[-1], false)?.neg()
    }
}

/// Categorical cross-entropy of integer labels.
pub(super) fn sparse_categorical(y_true: &Tensor, y_pred: &Tensor, from_logits: bool) -> Result<Tensor> {
    const OP: &str = "sparse_categorical_crossentropy";
    let mut labels = match y_true.dtype() {
        DType::I32 | DType::I64 => y_true.clone(),
        d if d.is_float() => y_true.cast(DType::I64)?,
        d => {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: d,
                expected: "integer (or float) class labels",
            });
        }
    };
    if labels.rank() == y_pred.rank() && labels.shape().last() == Some(&1) {
        labels = labels.squeeze(&[-1])?;
    }
    let logits = if from_logits {
        y_pred.clone()
    } else {
        clip(y_pred)?.log()?
    };
    Tensor::sparse_softmax_cross_entropy_with_logits(&labels, &logits)
}

/// Binary focal cross-entropy: `(1 − p_t)^gamma · bce`, times `alpha` for
/// positives and `1 − alpha` for negatives when `alpha` is given, mean
/// over the last axis. From logits the cross-entropy is the stable one of
/// the logits (Keras's TensorFlow backend recovers the logits of its
/// sigmoid) and `p_t` uses their sigmoids.
pub(super) fn binary_focal(
    y_true: &Tensor,
    y_pred: &Tensor,
    alpha: Option<f64>,
    gamma: f64,
    from_logits: bool,
    label_smoothing: f64,
) -> Result<Tensor> {
    const OP: &str = "binary_focal_crossentropy";
    check_gamma(OP, gamma)?;
    let p = same_shape(OP, y_true, y_pred)?;
    let y = smooth(OP, y_true, label_smoothing, 2.0)?;
    let (bce, p) = if from_logits {
        (Tensor::sigmoid_cross_entropy_with_logits(&y, p)?, p.sigmoid()?)
    } else {
        (bce_of_probabilities(&y, p)?, p.clone())
    };
    // p_t = y p + (1 − y)(1 − p)
    let p_t = y.mul(&p)?.add(&one_minus(&y)?.mul(&one_minus(&p)?)?)?;
    let mut focal = one_minus(&p_t)?.pow_scalar(gamma)?.mul(&bce)?;
    if let Some(a) = alpha {
        // a y + (1 − a)(1 − y)
        let weight = y.mul_scalar(2.0 * a - 1.0)?.add_scalar(1.0 - a)?;
        focal = weight.mul(&focal)?;
    }
    focal.mean(&[-1], false)
}

/// Categorical focal cross-entropy: `Σ alpha (1 − p)^gamma · (−y log p)`
/// over the last axis, `p` renormalised and clipped (from logits: their
/// softmax, then the same).
pub(super) fn categorical_focal(
    y_true: &Tensor,
    y_pred: &Tensor,
    alpha: f64,
    gamma: f64,
    from_logits: bool,
    label_smoothing: f64,
) -> Result<Tensor> {
    const OP: &str = "categorical_focal_crossentropy";
    check_gamma(OP, gamma)?;
    let p = same_shape(OP, y_true, y_pred)?;
    let y = smooth(OP, y_true, label_smoothing, classes(OP, p)? as f64)?;
    let p = if from_logits { p.softmax(-1)? } else { p.clone() };
    let p = renormalised(&p)?;
    let cce = y.mul(&p.log()?)?.neg()?;
    one_minus(&p)?
        .pow_scalar(gamma)?
        .mul_scalar(alpha)?
        .mul(&cce)?
        .sum(&[-1], false)
}

/// A focusing exponent must be finite and `>= 0`.
fn check_gamma(op: &'static str, gamma: f64) -> Result<()> {
    if gamma >= 0.0 && gamma.is_finite() {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!("gamma must be finite and >= 0, got {gamma}"),
        ))
    }
}

/// `mean(max(1 − y p, 0))` (squared: of its square) over the last axis,
/// with labels in `{0, 1}` (every one of them) mapped to `{−1, 1}` first.
/// The mapping is arithmetic on a 0/1 flag (`y (1 + b) − b`), so a traced
/// function computes it from the labels it is called with.
pub(super) fn hinge(y_true: &Tensor, y_pred: &Tensor, squared: bool) -> Result<Tensor> {
    let op = if squared { "squared_hinge" } else { "hinge" };
    let p = same_shape(op, y_true, y_pred)?;
    let y = if y_true.numel() == 0 {
        y_true.clone()
    } else {
        // b = 1 when every y (1 − y) is 0, that is every label is 0 or 1
        let zero = y_true.try_zeros_like()?;
        let binary = y_true
            .mul(&one_minus(y_true)?)?
            .eq(&zero)?
            .cast(y_true.dtype())?
            .min_all()?;
        y_true.mul(&binary.add_scalar(1.0)?)?.sub(&binary)?
    };
    let margin = one_minus(&y.mul(p)?)?;
    let mut h = margin.maximum(&margin.try_zeros_like()?)?;
    if squared {
        h = h.square()?;
    }
    h.mean(&[-1], false)
}

/// `max(1 + max((1 − y) p) − Σ y p, 0)` over the last axis.
pub(super) fn categorical_hinge(y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
    let p = same_shape("categorical_hinge", y_true, y_pred)?;
    let pos = y_true.mul(p)?.sum(&[-1], false)?;
    let neg = one_minus(y_true)?.mul(p)?.max(&[-1], false)?;
    let m = neg.sub(&pos)?.add_scalar(1.0)?;
    m.maximum(&m.try_zeros_like()?)
}
