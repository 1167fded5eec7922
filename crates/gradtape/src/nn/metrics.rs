//! Metrics: accuracies and running means, Keras's `keras.metrics` (not
//! differentiable; computed on the host as plain numbers).
//!
//! ```
//! use gradtape::{nn::metrics::{self, Mean, SparseCategoricalAccuracy}, Tensor};
//! let logits = Tensor::from_vec(vec![0.1f32, 2.0, 3.0, 0.5], &[2, 2])?;
//! let labels = Tensor::vector(&[1i64, 1]);
//! assert_eq!(metrics::sparse_categorical_accuracy(&labels, &logits)?, 0.5);
//!
//! let mut acc = SparseCategoricalAccuracy::default();
//! acc.update(&labels, &logits)?;
//! acc.update(&Tensor::vector(&[1i64, 0]), &logits)?;
//! assert_eq!(acc.result(), 0.75);
//!
//! let mut loss = Mean::default();
//! loss.update(2.0, 1.0);
//! loss.update(4.0, 3.0);                    // weighted by batch size, say
//! assert_eq!(loss.result(), 3.5);
//! # Ok::<(), gradtape::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::tensor::Tensor;

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

/// A running, weighted mean (Keras's `metrics.Mean`): the epoch's loss
/// from its batches' losses.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Mean {
    total: f64,
    weight: f64,
}

impl Mean {
    /// Adds `value` with `weight`.
    pub fn update(&mut self, value: f64, weight: f64) {
        self.total += value * weight;
        self.weight += weight;
    }

    /// The weighted mean so far (0 before any update).
    pub fn result(&self) -> f64 {
        if self.weight == 0.0 {
            0.0
        } else {
            self.total / self.weight
        }
    }

    /// Starts again.
    pub fn reset(&mut self) {
        *self = Mean::default();
    }
}

/// A running sparse categorical accuracy over batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SparseCategoricalAccuracy {
    correct: usize,
    total: usize,
}

impl SparseCategoricalAccuracy {
    /// Adds a batch of integer `labels` and predictions (logits or
    /// probabilities, classes on the last axis).
    pub fn update(&mut self, labels: &Tensor, preds: &Tensor) -> Result<()> {
        let (c, n) = count_sparse("SparseCategoricalAccuracy", labels, preds)?;
        self.correct += c;
        self.total += n;
        Ok(())
    }

    /// The accuracy so far (0 before any update).
    pub fn result(&self) -> f64 {
        ratio(self.correct, self.total)
    }

    /// Starts again.
    pub fn reset(&mut self) {
        *self = SparseCategoricalAccuracy::default();
    }
}
