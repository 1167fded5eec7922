//! The regression and distribution losses' per-sample values (Keras's
//! formulas: `keras.losses.mean_absolute_percentage_error`, ...): each
//! reduces the last axis (cosine similarity: its `axis`).

use super::{same_shape, EPSILON};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// `mean((y_pred − y_true)²)`.
pub(super) fn mean_squared_error(y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
    same_shape("mean_squared_error", y_true, y_pred)?
        .sub(y_true)?
        .square()?
        .mean(&[-1], false)
}

/// `mean(|y_pred − y_true|)`.
pub(super) fn mean_absolute_error(y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
    same_shape("mean_absolute_error", y_true, y_pred)?
        .sub(y_true)?
        .abs()?
        .mean(&[-1], false)
}

/// `mean(e²/2)` where `|e| <= delta`, `delta·|e| − delta²/2` beyond.
pub(super) fn huber(y_true: &Tensor, y_pred: &Tensor, delta: f64) -> Result<Tensor> {
    if !(delta >= 0.0 && delta.is_finite()) {
        return Err(Error::invalid(
            "huber",
            format!("delta must be finite and >= 0, got {delta}"),
        ));
    }
    let e = same_shape("huber", y_true, y_pred)?.sub(y_true)?;
    let a = e.abs()?;
    let quad = e.square()?.mul_scalar(0.5)?;
    let lin = a.mul_scalar(delta)?.add_scalar(-0.5 * delta * delta)?;
    let small = a.le(&a.try_full_like(delta)?)?;
    Tensor::where_(&small, &quad, &lin)?.mean(&[-1], false)
}

/// `100 · mean(|y_true − y_pred| / max(|y_true|, ε))`.
pub(super) fn mean_absolute_percentage_error(y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
    let p = same_shape("mean_absolute_percentage_error", y_true, y_pred)?;
    let denom = y_true.abs()?.maximum(&y_true.try_full_like(EPSILON)?)?;
    y_true.sub(p)?.div(&denom)?.abs()?.mean(&[-1], false)?.mul_scalar(100.0)
}

/// `mean((log(1 + max(y_pred, ε)) − log(1 + max(y_true, ε)))²)`.
pub(super) fn mean_squared_logarithmic_error(y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
    let p = same_shape("mean_squared_logarithmic_error", y_true, y_pred)?;
    let log1p = |t: &Tensor| t.maximum(&t.try_full_like(EPSILON)?)?.log1p();
    log1p(p)?.sub(&log1p(y_true)?)?.square()?.mean(&[-1], false)
}

/// `mean(e + softplus(−2e) − log 2)`, `e = y_pred − y_true`: log(cosh(e))
/// without cosh's overflow.
pub(super) fn log_cosh(y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
    let e = same_shape("log_cosh", y_true, y_pred)?.sub(y_true)?;
    e.add(&e.mul_scalar(-2.0)?.softplus()?)?
        .add_scalar(-std::f64::consts::LN_2)?
        .mean(&[-1], false)
}

/// `−Σ ŷ_true ŷ_pred` along `axis`, `x̂ = x · min(rsqrt(Σx²), 1/ε)` (Keras's
/// `normalize`, which is [`Tensor::l2_normalize`] with epsilon ε²).
pub(super) fn cosine_similarity(y_true: &Tensor, y_pred: &Tensor, axis: isize) -> Result<Tensor> {
    let p = same_shape("cosine_similarity", y_true, y_pred)?;
    let eps = EPSILON * EPSILON;
    let t = y_true.l2_normalize(&[axis], eps)?;
    t.mul(&p.l2_normalize(&[axis], eps)?)?.sum(&[axis], false)?.neg()
}

/// `mean(y_pred − y_true · log(y_pred + ε))`.
pub(super) fn poisson(y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
    let p = same_shape("poisson", y_true, y_pred)?;
    p.sub(&y_true.mul(&p.add_scalar(EPSILON)?.log()?)?)?.mean(&[-1], false)
}

/// `Σ y_true · log(y_true / y_pred)`, both clipped to `[ε, 1]`.
pub(super) fn kl_divergence(y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
    let p = same_shape("kl_divergence", y_true, y_pred)?;
    let (t, p) = (y_true.clip_by_value(EPSILON, 1.0)?, p.clip_by_value(EPSILON, 1.0)?);
    t.mul(&t.div(&p)?.log()?)?.sum(&[-1], false)
}
