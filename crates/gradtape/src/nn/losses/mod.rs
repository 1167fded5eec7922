//! Losses, Keras's `keras.losses` (same formulas, same defaults).
//!
//! A [`Loss`] computes a per-sample value (reducing the last axis, as
//! Keras's loss functions do) and then reduces it ([`Reduction`]; Keras's
//! default is the mean, `sum_over_batch_size`), after weighting the
//! samples if [`Loss::compute_weighted`] is given weights. The free
//! functions are the loss with the default reduction, a scalar.
//!
//! The losses are Keras's (`keras.losses`, the same names, formulas,
//! clipping and defaults): the regression losses (mean squared, absolute,
//! absolute percentage and squared logarithmic errors, Huber, log-cosh,
//! cosine similarity), the distribution losses (Poisson, Kullback-Leibler),
//! the cross-entropies (binary, categorical, sparse, and the focal
//! variants of the first two) and the hinge losses (hinge, squared,
//! categorical). Their formulas are in `regression.rs` and
//! `classification.rs`.
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

mod classification;
mod regression;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Keras's `epsilon()`, the clip margin for probabilities.
pub const EPSILON: f64 = 1e-7;

/// How per-sample losses become the returned value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reduction {
    /// The per-sample losses, unreduced.
    None,
    /// Their sum.
    Sum,
    /// Their mean (Keras's `"sum_over_batch_size"`, the default): with
    /// sample weights, the sum of the weighted losses over their number.
    #[default]
    SumOverBatchSize,
    /// The sum of the weighted losses over the sum of the weights (Keras's
    /// `"mean_with_sample_weight"`); the mean without weights.
    MeanWithSampleWeight,
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
    /// `100 · mean(|y_true − y_pred| / max(|y_true|, ε))` over the last
    /// axis (ε = [`EPSILON`]).
    MeanAbsolutePercentageError,
    /// `mean((log(1 + max(y_pred, ε)) − log(1 + max(y_true, ε)))²)` over
    /// the last axis.
    MeanSquaredLogarithmicError,
    /// `mean(log(cosh(y_pred − y_true)))` over the last axis, computed as
    /// `e + softplus(−2e) − log 2` (no overflow for large errors).
    LogCosh,
    /// `−Σ ŷ_true · ŷ_pred` along `axis`, each side L2-normalised
    /// (`x · min(1/‖x‖, 1/ε)`, so a zero vector gives 0): in `[−1, 1]`,
    /// −1 when they point the same way.
    CosineSimilarity {
        /// The axis of the vectors (Keras's default −1).
        axis: isize,
    },
    /// `mean(y_pred − y_true · log(y_pred + ε))` over the last axis.
    Poisson,
    /// `Σ y_true · log(y_true / y_pred)` over the last axis, both clipped
    /// to `[ε, 1]`.
    KLDivergence,
    /// `mean(max(1 − y_true · y_pred, 0))` over the last axis; labels in
    /// `{0, 1}` (all of them) are first mapped to `{−1, 1}`.
    Hinge,
    /// `mean(max(1 − y_true · y_pred, 0)²)` over the last axis, labels as
    /// [`Loss::Hinge`]'s.
    SquaredHinge,
    /// `max(1 + max((1 − y_true) · y_pred) − Σ y_true · y_pred, 0)` over the
    /// last axis (one-hot labels).
    CategoricalHinge,
    /// Binary cross-entropy scaled by `(1 − p_t)^gamma`, `p_t` the
    /// probability given to the true label (Lin et al. 2017), and by
    /// `alpha` for positives and `1 − alpha` for negatives with class
    /// balancing; mean over the last axis. From logits the probabilities
    /// are their sigmoids (clipped as probabilities are, as Keras's).
    BinaryFocalCrossentropy {
        /// Whether to weight positives by `alpha`, negatives by `1 − alpha`.
        apply_class_balancing: bool,
        /// The positives' weight with class balancing (Keras's 0.25).
        alpha: f64,
        /// The focusing exponent (Keras's 2; 0 is the cross-entropy).
        gamma: f64,
        /// Whether predictions are logits (else probabilities).
        from_logits: bool,
        /// Label smoothing in `[0, 1]`.
        label_smoothing: f64,
    },
    /// Categorical cross-entropy with each class's term scaled by
    /// `alpha · (1 − p)^gamma`; the probabilities renormalised and clipped
    /// as [`Loss::CategoricalCrossentropy`]'s (from logits: their softmax).
    CategoricalFocalCrossentropy {
        /// The classes' weight (Keras's 0.25).
        alpha: f64,
        /// The focusing exponent (Keras's 2).
        gamma: f64,
        /// Whether predictions are logits (else probabilities).
        from_logits: bool,
        /// Label smoothing in `[0, 1]`.
        label_smoothing: f64,
    },
}

impl Loss {
    /// The per-sample losses reduced by `reduction`.
    pub fn compute(&self, y_true: &Tensor, y_pred: &Tensor, reduction: Reduction) -> Result<Tensor> {
        self.compute_weighted(y_true, y_pred, None, reduction)
    }

    /// The per-sample losses, each multiplied by its `sample_weight`, then
    /// reduced by `reduction` (Keras's `loss(y_true, y_pred,
    /// sample_weight)`). The weights broadcast against the per-sample
    /// losses, after Keras's rank adjustment: a trailing axis of 1 on
    /// either side is dropped (or, for weights of rank 1, one added) when
    /// their ranks differ by one.
    ///
    /// ```
    /// use gradtape::{nn::losses::{Loss, Reduction}, Tensor};
    /// let y = Tensor::from_vec(vec![0.0f64, 1.0, 1.0, 0.0], &[2, 2])?;
    /// let p = Tensor::from_vec(vec![1.0f64, 1.0, 1.0, 0.0], &[2, 2])?;
    /// let w = Tensor::vector(&[2.0f64, 3.0]);               // per-sample losses 0.5, 0
    /// let mse = Loss::MeanSquaredError;
    /// let mean = mse.compute_weighted(&y, &p, Some(&w), Reduction::SumOverBatchSize)?;
    /// assert_eq!(mean.to_scalar::<f64>()?, 0.5);            // (2 · 0.5 + 3 · 0) / 2 samples
    /// let by_weight = mse.compute_weighted(&y, &p, Some(&w), Reduction::MeanWithSampleWeight)?;
    /// assert_eq!(by_weight.to_scalar::<f64>()?, 0.2);       // ... / (2 + 3)
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn compute_weighted(
        &self,
        y_true: &Tensor,
        y_pred: &Tensor,
        sample_weight: Option<&Tensor>,
        reduction: Reduction,
    ) -> Result<Tensor> {
        let mut per = self.per_sample(y_true, y_pred)?;
        let mut weight = None;
        if let Some(w) = sample_weight {
            let (p, w) = same_rank(per, w.cast(y_pred.dtype())?)?;
            per = p.mul(&w).map_err(|_| {
                Error::invalid(
                    "loss",
                    format!(
                        "sample_weight of shape {:?} does not broadcast against the per-sample losses {:?}",
                        w.shape(),
                        p.shape()
                    ),
                )
            })?;
            weight = Some(w);
        }
        match (reduction, weight) {
            (Reduction::None, _) => Ok(per),
            (Reduction::Sum, _) => per.sum_all(),
            (Reduction::MeanWithSampleWeight, Some(w)) => per.sum_all()?.div(&w.sum_all()?),
            (Reduction::SumOverBatchSize | Reduction::MeanWithSampleWeight, _) => per.mean_all(),
        }
    }

    /// The loss with the default reduction (the mean), a scalar.
    pub fn call(&self, y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
        self.compute(y_true, y_pred, Reduction::SumOverBatchSize)
    }

    /// The per-sample losses (the last axis reduced).
    ///
    /// `y_true` and `y_pred` have one shape, except that, as in Keras, when
    /// their ranks differ by one and the longer ends in an axis of 1, that
    /// axis is dropped (or, if the other is a vector, one is added to it):
    /// labels `[b]` against a `Dense(1)`'s predictions `[b, 1]` are the
    /// same as `[b, 1]` against `[b, 1]`. Any other difference is an error
    /// (where Keras would broadcast `[k]` against `[b, k]` silently). The
    /// sparse cross-entropy takes integer labels of the logits' rank or
    /// one less, as it always did.
    ///
    /// ```
    /// use gradtape::nn::losses;
    /// use gradtape::Tensor;
    /// let y = Tensor::vector(&[0.0f64, 1.0, 2.0, 3.0]);
    /// let pred = Tensor::from_vec(vec![0.5f64, 1.5, 0.0, 5.0], &[4, 1])?;
    /// assert_eq!(losses::huber(&y, &pred, 1.0)?.item()?, 0.8125); // Keras's Huber()(y, pred)
    /// assert!(losses::huber(&y.narrow(0, 0, 1)?, &pred, 1.0).is_err()); // [1] against [4, 1]
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn per_sample(&self, y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
        if !matches!(self, Loss::SparseCategoricalCrossentropy { .. }) && y_true.rank() != y_pred.rank() {
            let (t, p) = same_rank(y_true.clone(), y_pred.clone())?;
            // (else the error names the shapes as given)
            if t.shape() == p.shape() {
                return self.per_sample(&t, &p);
            }
        }
        match *self {
            Loss::MeanSquaredError => regression::mean_squared_error(y_true, y_pred),
            Loss::MeanAbsoluteError => regression::mean_absolute_error(y_true, y_pred),
            Loss::Huber { delta } => regression::huber(y_true, y_pred, delta),
            Loss::BinaryCrossentropy {
                from_logits,
                label_smoothing,
            } => classification::binary(y_true, y_pred, from_logits, label_smoothing),
            Loss::CategoricalCrossentropy {
                from_logits,
                label_smoothing,
            } => classification::categorical(y_true, y_pred, from_logits, label_smoothing),
            Loss::SparseCategoricalCrossentropy { from_logits } => {
                classification::sparse_categorical(y_true, y_pred, from_logits)
            }
            Loss::MeanAbsolutePercentageError => regression::mean_absolute_percentage_error(y_true, y_pred),
            Loss::MeanSquaredLogarithmicError => regression::mean_squared_logarithmic_error(y_true, y_pred),
            Loss::LogCosh => regression::log_cosh(y_true, y_pred),
            Loss::CosineSimilarity { axis } => regression::cosine_similarity(y_true, y_pred, axis),
            Loss::Poisson => regression::poisson(y_true, y_pred),
            Loss::KLDivergence => regression::kl_divergence(y_true, y_pred),
            Loss::Hinge => classification::hinge(y_true, y_pred, false),
            Loss::SquaredHinge => classification::hinge(y_true, y_pred, true),
            Loss::CategoricalHinge => classification::categorical_hinge(y_true, y_pred),
            Loss::BinaryFocalCrossentropy {
                apply_class_balancing,
                alpha,
                gamma,
                from_logits,
                label_smoothing,
            } => classification::binary_focal(
                y_true,
                y_pred,
                apply_class_balancing.then_some(alpha),
                gamma,
                from_logits,
                label_smoothing,
            ),
            Loss::CategoricalFocalCrossentropy {
                alpha,
                gamma,
                from_logits,
                label_smoothing,
            } => classification::categorical_focal(y_true, y_pred, alpha, gamma, from_logits, label_smoothing),
        }
    }
}

/// Keras's rank adjustment of the per-sample losses and their weights,
/// and of the labels and predictions
/// (`squeeze_or_expand_to_same_rank`): when their ranks differ by one and
/// the longer has a trailing axis of 1, it is dropped, or, if the shorter
/// is a vector, one is added to it.
fn same_rank(per: Tensor, w: Tensor) -> Result<(Tensor, Tensor)> {
    let (pr, wr) = (per.rank(), w.rank());
    Ok(if pr == wr + 1 && per.shape().last() == Some(&1) {
        if wr == 1 {
            (per, w.expand_dims(-1)?)
        } else {
            (per.squeeze(&[-1])?, w)
        }
    } else if wr == pr + 1 && w.shape().last() == Some(&1) {
        if pr == 1 {
            (per.expand_dims(-1)?, w)
        } else {
            (per, w.squeeze(&[-1])?)
        }
    } else {
        (per, w)
    })
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
