//! Losses, Keras's `keras.losses` (same formulas, same defaults).
//!
//! A [`Loss`] computes a per-sample value (reducing the last axis, as
//! Keras's loss functions do) and then reduces it ([`Reduction`]; Keras's
//! default is the mean, `sum_over_batch_size`). The free functions are the
//! loss with the default reduction, a scalar.
//!
//! Cross-entropies from probabilities clip them to `[1e-7, 1 − 1e-7]`
//! (Keras's `epsilon`) and, for the categorical one, renormalise them to sum
//! to one first; from logits they use the fused, stable ops
//! ([`Tensor::softmax_cross_entropy_with_logits`] and friends). Label
//! smoothing replaces binary labels `y` by `y (1 − s) + s / 2` and one-hot
//! labels by `y (1 − s) + s / classes`.
//!
//! ```
//! use gradtape::{nn::losses::{self, Loss, Reduction}, Tensor};
//! let y = Tensor::from_vec(vec![0.0f32, 1.0, 1.0, 0.0], &[2, 2])?;
//! let p = Tensor::from_vec(vec![1.0f32, 1.0, 1.0, 0.0], &[2, 2])?;
//! assert_eq!(losses::mean_squared_error(&y, &p)?.to_scalar::<f32>()?, 0.25);
//! let per_sample = Loss::MeanSquaredError.compute(&y, &p, Reduction::None)?;
//! assert_eq!(per_sample.to_vec::<f32>()?, vec![0.5, 0.0]);
//! # Ok::<(), gradtape::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// Keras's `epsilon()`, the clip margin for probabilities.
pub const EPSILON: f64 = 1e-7;

/// How per-sample losses become the returned value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reduction {
    /// The per-sample losses, unreduced.
    None,
    /// Their sum.
    Sum,
    /// Their mean (Keras's `"sum_over_batch_size"`, the default).
    #[default]
    SumOverBatchSize,
}

/// A loss and its settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Loss {
    /// `mean((y_pred − y_true)²)` over the last axis.
    MeanSquaredError,
    /// `mean(|y_pred − y_true|)` over the last axis.
    MeanAbsoluteError,
    /// Quadratic within `delta` of the target, linear beyond: `e²/2` for
    /// `|e| <= delta`, `delta·|e| − delta²/2` otherwise; mean over the last
    /// axis.
    Huber {
        /// Where the loss turns linear (Keras's default 1).
        delta: f64,
    },
    /// Binary cross-entropy, elementwise, mean over the last axis.
    BinaryCrossentropy {
        /// Whether predictions are logits (else probabilities).
        from_logits: bool,
        /// Label smoothing in `[0, 1]`.
        label_smoothing: f64,
    },
    /// Categorical cross-entropy over the last axis, one-hot (or soft)
    /// labels of the predictions' shape.
    CategoricalCrossentropy {
        /// Whether predictions are logits (else probabilities).
        from_logits: bool,
        /// Label smoothing in `[0, 1]`.
        label_smoothing: f64,
    },
    /// Categorical cross-entropy with integer labels (shape of the
    /// predictions without the last axis, or with a last axis of 1).
    SparseCategoricalCrossentropy {
        /// Whether predictions are logits (else probabilities).
        from_logits: bool,
    },
}

impl Loss {
    /// The per-sample losses reduced by `reduction`.
    pub fn compute(&self, y_true: &Tensor, y_pred: &Tensor, reduction: Reduction) -> Result<Tensor> {
        let per = self.per_sample(y_true, y_pred)?;
        match reduction {
            Reduction::None => Ok(per),
            Reduction::Sum => per.sum_all(),
            Reduction::SumOverBatchSize => per.mean_all(),
        }
    }

    /// The loss with the default reduction (the mean), a scalar.
    pub fn call(&self, y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
        self.compute(y_true, y_pred, Reduction::SumOverBatchSize)
    }

    /// The per-sample losses (the last axis reduced).
    pub fn per_sample(&self, y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
        match *self {
            Loss::MeanSquaredError => same_shape("mean_squared_error", y_true, y_pred)?
                .sub(y_true)?
                .square()?
                .mean(&[-1], false),
            Loss::MeanAbsoluteError => same_shape("mean_absolute_error", y_true, y_pred)?
                .sub(y_true)?
                .abs()?
                .mean(&[-1], false),
            Loss::Huber { delta } => {
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
                let small = a.le(&a.full_like(delta))?;
                Tensor::where_(&small, &quad, &lin)?.mean(&[-1], false)
            }
            Loss::BinaryCrossentropy {
                from_logits,
                label_smoothing,
            } => {
                const OP: &str = "binary_crossentropy";
                let p = same_shape(OP, y_true, y_pred)?;
                let y = smooth(OP, y_true, label_smoothing, 2.0)?;
                let bce = if from_logits {
                    Tensor::sigmoid_cross_entropy_with_logits(&y, p)?
                } else {
                    let p = clip(p)?;
                    let one_minus = |t: &Tensor| t.neg()?.add_scalar(1.0);
                    y.mul(&p.log()?)?
                        .add(&one_minus(&y)?.mul(&one_minus(&p)?.log()?)?)?
                        .neg()?
                };
                bce.mean(&[-1], false)
            }
            Loss::CategoricalCrossentropy {
                from_logits,
                label_smoothing,
            } => {
                const OP: &str = "categorical_crossentropy";
                let p = same_shape(OP, y_true, y_pred)?;
                let classes = *p
                    .shape()
                    .last()
                    .ok_or_else(|| Error::invalid(OP, "predictions must have rank >= 1"))?;
                let y = smooth(OP, y_true, label_smoothing, classes as f64)?;
                if from_logits {
                    Tensor::softmax_cross_entropy_with_logits(&y, p)
                } else {
                    let p = clip(&p.div(&p.sum(&[-1], true)?)?)?;
                    y.mul(&p.log()?)?.sum(&[-1], false)?.neg()
                }
            }
            Loss::SparseCategoricalCrossentropy { from_logits } => {
                const OP: &str = "sparse_categorical_crossentropy";
                let mut labels = match y_true.dtype() {
                    DType::I32 | DType::I64 => y_true.clone(),
                    d if d.is_float() => y_true.cast(DType::I64)?,
                    d => {
                        return Err(Error::UnsupportedDType {
                            op: OP,
                            dtype: d,
                            expected: "integer (or float) class labels",
                        })
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
        }
    }
}

/// `y_pred`, once checked to have `y_true`'s shape and dtype.
fn same_shape<'a>(op: &'static str, y_true: &Tensor, y_pred: &'a Tensor) -> Result<&'a Tensor> {
    if y_true.dtype() != y_pred.dtype() {
        return Err(Error::DTypeMismatch {
            op,
            lhs: y_true.dtype(),
            rhs: y_pred.dtype(),
        });
    }
    if y_true.shape() != y_pred.shape() || y_pred.rank() == 0 {
        return Err(Error::ShapeMismatch {
            op,
            lhs: y_true.shape().to_vec(),
            rhs: y_pred.shape().to_vec(),
        });
    }
    Ok(y_pred)
}

/// Probabilities clipped to `[EPSILON, 1 − EPSILON]`.
fn clip(p: &Tensor) -> Result<Tensor> {
    p.clip_by_value(EPSILON, 1.0 - EPSILON)
}

/// `y (1 − s) + s / k`.
fn smooth(op: &'static str, y: &Tensor, s: f64, k: f64) -> Result<Tensor> {
    if !(0.0..=1.0).contains(&s) {
        return Err(Error::invalid(
            op,
            format!("label_smoothing must lie in [0, 1], got {s}"),
        ));
    }
    if s == 0.0 {
        return Ok(y.clone());
    }
    y.mul_scalar(1.0 - s)?.add_scalar(s / k)
}

/// Mean squared error, averaged over everything (a scalar).
pub fn mean_squared_error(y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
    Loss::MeanSquaredError.call(y_true, y_pred)
}

/// Mean absolute error, averaged over everything (a scalar).
pub fn mean_absolute_error(y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
    Loss::MeanAbsoluteError.call(y_true, y_pred)
}

/// Huber loss with `delta`, averaged (a scalar).
pub fn huber(y_true: &Tensor, y_pred: &Tensor, delta: f64) -> Result<Tensor> {
    Loss::Huber { delta }.call(y_true, y_pred)
}

/// Binary cross-entropy, averaged (a scalar), without label smoothing.
pub fn binary_crossentropy(y_true: &Tensor, y_pred: &Tensor, from_logits: bool) -> Result<Tensor> {
    Loss::BinaryCrossentropy {
        from_logits,
        label_smoothing: 0.0,
    }
    .call(y_true, y_pred)
}

/// Categorical cross-entropy with one-hot labels, averaged (a scalar),
/// without label smoothing.
pub fn categorical_crossentropy(y_true: &Tensor, y_pred: &Tensor, from_logits: bool) -> Result<Tensor> {
    Loss::CategoricalCrossentropy {
        from_logits,
        label_smoothing: 0.0,
    }
    .call(y_true, y_pred)
}

/// Categorical cross-entropy with integer labels, averaged (a scalar).
///
/// ```
/// use gradtape::{nn::losses, Tensor};
/// let logits = Tensor::from_vec(vec![0.0f64, 0.0], &[1, 2])?;
/// let l = losses::sparse_categorical_crossentropy(&Tensor::vector(&[1i64]), &logits, true)?;
/// assert!((l.to_scalar::<f64>()? - 2f64.ln()).abs() < 1e-12);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn sparse_categorical_crossentropy(y_true: &Tensor, y_pred: &Tensor, from_logits: bool) -> Result<Tensor> {
    Loss::SparseCategoricalCrossentropy { from_logits }.call(y_true, y_pred)
}
