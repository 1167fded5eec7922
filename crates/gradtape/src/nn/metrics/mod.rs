//! Metrics, Keras's `keras.metrics`: accuracies, regression errors,
//! confusion-matrix metrics (precision, recall, AUC of one curve or one
//! per label, ...), F-scores, the IoUs of classes (mean, of chosen
//! classes, binary, one-hot) and R², each a running state that batches
//! update.
//!
//! Every metric but [`Mean`] and [`Sum`] implements [`Metric`], Keras's
//! `update_state(y_true, y_pred, sample_weight)`, `result()` and
//! `reset_state()`, so a training loop can hold a `Vec<Box<dyn Metric>>`.
//! The formulas, defaults, names and the handling of sample weights are
//! Keras 3's (its rank adjustment of `y_true`, `y_pred` and the weights:
//! a trailing axis of 1 is dropped, or added to a vector, where ranks
//! differ by one; then the weights broadcast as Keras broadcasts them).
//! Where Keras would broadcast `y_true` against `y_pred`, the shapes must
//! be equal here. Bad input (shapes that do not fit, an empty batch, an
//! option out of range, a label outside `num_classes`) is an
//! [`Error`] naming the metric, and leaves the state as it was.
//!
//! Metrics are not differentiable: the values are read to the host and
//! accumulated there in `f64` (inputs may be f32 or f64, integer labels
//! where Keras takes them, on any device). [`Metric::result`] is a tensor
//! as Keras's is (an `f64` scalar, or one value per threshold or class);
//! the metrics whose result is always one number also have their own
//! `result()` giving it as an `f64`.
//!
//! ```
//! use gradtape::nn::metrics::{self, Metric, Precision, SparseCategoricalAccuracy, AUC};
//! use gradtape::Tensor;
//! let logits = Tensor::from_vec(vec![0.1f32, 2.0, 3.0, 0.5], &[2, 2])?;
//! let labels = Tensor::vector(&[1i64, 1]);
//! assert_eq!(metrics::sparse_categorical_accuracy(&labels, &logits)?, 0.5);
//!
//! let mut acc = SparseCategoricalAccuracy::default();
//! acc.update(&labels, &logits)?;
//! acc.update(&Tensor::vector(&[1i64, 0]), &logits)?;
//! assert_eq!(acc.result(), 0.75);
//!
//! // a training loop's metrics
//! let mut all: Vec<Box<dyn Metric>> = vec![Box::new(Precision::new()), Box::new(AUC::new())];
//! let y = Tensor::vector(&[1.0f64, 0.0, 1.0, 0.0]);
//! let p = Tensor::vector(&[0.9f64, 0.6, 0.4, 0.2]);
//! for m in &mut all {
//!     m.update_state(&y, &p, None)?;
//! }
//! assert_eq!(all[0].name(), "precision");
//! assert_eq!(all[0].result().to_scalar::<f64>()?, 0.5);
//! assert_eq!(all[1].values(), vec![0.75]);
//! # Ok::<(), gradtape::Error>(())
//! ```

mod accuracy;
mod array;
mod auc;
mod confusion;
mod iou;
mod precision;
mod reduction;
mod regression;
mod scores;

pub use accuracy::{
    Accuracy, BinaryAccuracy, CategoricalAccuracy, SparseCategoricalAccuracy, SparseTopKCategoricalAccuracy,
    TopKCategoricalAccuracy,
};
pub use auc::{
    AucCurve, AucSummation, PrecisionAtRecall, RecallAtPrecision, SensitivityAtSpecificity, SpecificityAtSensitivity,
    AUC,
};
pub use iou::{BinaryIoU, IoU, MeanIoU, OneHotIoU, OneHotMeanIoU};
pub use precision::{FalseNegatives, FalsePositives, Precision, Recall, TrueNegatives, TruePositives};
pub use reduction::{Mean, Sum};
pub use regression::{
    CosineSimilarity, LogCoshError, MeanAbsoluteError, MeanAbsolutePercentageError, MeanSquaredError,
    MeanSquaredLogarithmicError, R2Aggregation, R2Score, RootMeanSquaredError,
};
pub use scores::{F1Score, FBetaScore, FScoreAverage};

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A stateful metric, Keras's `keras.metrics.Metric`: batches update it,
/// [`result`](Metric::result) reads it, [`reset_state`](Metric::reset_state)
/// starts it again (at the start of each epoch, say).
///
/// ```
/// use gradtape::{nn::metrics::{Metric, MeanAbsoluteError}, Tensor};
/// let mut mae: Box<dyn Metric> = Box::new(MeanAbsoluteError::new());
/// let y = Tensor::from_vec(vec![0.0f64, 1.0, 2.0, 3.0], &[2, 2])?;
/// let p = Tensor::from_vec(vec![1.0f64, 1.0, 2.0, 1.0], &[2, 2])?;
/// mae.update_state(&y, &p, Some(&Tensor::vector(&[1.0f64, 3.0])))?;
/// assert_eq!(mae.values(), vec![0.875]); // (0.5·1 + 1·3) / 4
/// mae.reset_state();
/// assert_eq!(mae.values(), vec![0.0]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub trait Metric: std::fmt::Debug + Send {
    /// Keras's default name of the metric (`"accuracy"`, `"auc"`, ...).
    fn name(&self) -> &str;

    /// Adds a batch: labels `y_true`, predictions `y_pred` and, optionally,
    /// per-sample (or per-element) weights. On an error the state is
    /// unchanged.
    fn update_state(&mut self, y_true: &Tensor, y_pred: &Tensor, sample_weight: Option<&Tensor>) -> Result<()>;

    /// The value so far, an `f64` tensor: a scalar, or a vector (one value
    /// per threshold or per class) for the metrics configured so.
    fn result(&self) -> Tensor;

    /// Forgets every batch.
    fn reset_state(&mut self);

    /// The values of [`result`](Metric::result), row-major.
    fn values(&self) -> Vec<f64> {
        self.result().try_to_vec_f64().unwrap_or_default()
    }
}

/// Implements [`Metric`] for a metric holding a running [`Mean`] (`mean`)
/// of per-sample values computed by `values(&self, y_true, y_pred)`, and
/// gives it a `result() -> f64` (`finish` applied to the mean).
macro_rules! mean_metric {
    ($ty:ident, $name:literal, $values:expr) => {
        mean_metric!($ty, $name, $values, |m: f64| m);
    };
    ($ty:ident, $name:literal, $values:expr, $finish:expr) => {
        impl $ty {
            /// The value so far (0 before any update).
            pub fn result(&self) -> f64 {
                ($finish)(self.mean.result())
            }
        }

        impl $crate::nn::metrics::Metric for $ty {
            fn name(&self) -> &str {
                $name
            }
            fn update_state(
                &mut self,
                y_true: &$crate::Tensor,
                y_pred: &$crate::Tensor,
                sample_weight: Option<&$crate::Tensor>,
            ) -> $crate::Result<()> {
                const OP: &str = stringify!($ty);
                let values = ($values)(&*self, OP, y_true, y_pred)?;
                let weight = sample_weight
                    .map(|w| $crate::nn::metrics::array::Arr::read(OP, w))
                    .transpose()?;
                self.mean.add(OP, values, weight)
            }
            fn result(&self) -> $crate::Tensor {
                $crate::Tensor::scalar(<$ty>::result(self))
            }
            fn reset_state(&mut self) {
                self.mean.reset();
            }
        }
    };
}
use mean_metric;

/// Counts `(correct, total)` of class predictions: the arg-max of `preds`'
/// last axis against integer (or integral float) `labels` of shape
/// `preds.shape[..-1]` (or with a last axis of 1).
fn count_sparse(op: &'static str, labels: &Tensor, preds: &Tensor) -> Result<(usize, usize)> {
    let mut want = preds.shape().to_vec();
    want.pop();
    let squeezed = labels.rank() == preds.rank() && labels.shape().last() == Some(&1);
    let lshape = if squeezed {
        &labels.shape()[..labels.rank() - 1]
    } else {
        labels.shape()
    };
    if preds.rank() == 0 || lshape != want.as_slice() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: labels.shape().to_vec(),
            rhs: preds.shape().to_vec(),
        });
    }
    let arg = preds.argmax(-1)?.to_vec::<i64>()?;
    let lab = labels.try_to_vec_f64()?;
    let correct = arg.iter().zip(&lab).filter(|&(&a, &l)| a as f64 == l).count();
    Ok((correct, arg.len()))
}

/// The fraction of rows whose arg-max matches the integer label.
pub fn sparse_categorical_accuracy(labels: &Tensor, preds: &Tensor) -> Result<f64> {
    let (c, n) = count_sparse("sparse_categorical_accuracy", labels, preds)?;
    Ok(ratio(c, n))
}

/// The fraction of rows whose arg-max matches the one-hot label's.
///
/// ```
/// use gradtape::{nn::metrics, Tensor};
/// let y = Tensor::from_vec(vec![0.0f32, 1.0, 1.0, 0.0], &[2, 2])?;
/// let p = Tensor::from_vec(vec![0.2f32, 0.8, 0.3, 0.7], &[2, 2])?;
/// assert_eq!(metrics::categorical_accuracy(&y, &p)?, 0.5);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn categorical_accuracy(one_hot: &Tensor, preds: &Tensor) -> Result<f64> {
    const OP: &str = "categorical_accuracy";
    if one_hot.shape() != preds.shape() {
        return Err(Error::ShapeMismatch {
            op: OP,
            lhs: one_hot.shape().to_vec(),
            rhs: preds.shape().to_vec(),
        });
    }
    let (c, n) = count_sparse(OP, &one_hot.argmax(-1)?, preds)?;
    Ok(ratio(c, n))
}

/// The fraction of elements where `y_pred > threshold` agrees with
/// `y_true` (0 or 1).
///
/// ```
/// use gradtape::{nn::metrics, Tensor};
/// let y = Tensor::vector(&[1.0f32, 0.0, 1.0, 0.0]);
/// let p = Tensor::vector(&[0.9f32, 0.2, 0.4, 0.6]);
/// assert_eq!(metrics::binary_accuracy(&y, &p, 0.5)?, 0.5);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn binary_accuracy(y_true: &Tensor, y_pred: &Tensor, threshold: f64) -> Result<f64> {
    if y_true.shape() != y_pred.shape() {
        return Err(Error::ShapeMismatch {
            op: "binary_accuracy",
            lhs: y_true.shape().to_vec(),
            rhs: y_pred.shape().to_vec(),
        });
    }
    let (t, p) = (y_true.try_to_vec_f64()?, y_pred.try_to_vec_f64()?);
    let c = t
        .iter()
        .zip(&p)
        .filter(|&(&t, &p)| (p > threshold) == (t > 0.5))
        .count();
    Ok(ratio(c, t.len()))
}

fn ratio(c: usize, n: usize) -> f64 {
    if n == 0 {
        0.0
    } else {
        c as f64 / n as f64
    }
}
