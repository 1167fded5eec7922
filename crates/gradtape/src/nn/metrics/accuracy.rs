//! Accuracies: the mean, over samples, of whether a prediction is right
//! (exactly, after a threshold, by arg-max, or within the top k).

use super::array::{argmax, mismatch, nonempty, pair, Arr};
use super::{mean_metric, Mean, Metric};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The fraction of elements of `y_pred` equal to `y_true` (Keras's
/// `Accuracy`).
///
/// ```
/// use gradtape::{nn::metrics::{Accuracy, Metric}, Tensor};
/// let mut acc = Accuracy::new();
/// acc.update_state(&Tensor::vector(&[1i64, 2, 3, 4]), &Tensor::vector(&[0i64, 2, 3, 4]), None)?;
/// assert_eq!(acc.result(), 0.75);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Accuracy {
    mean: Mean,
}

impl Accuracy {
    /// A new metric.
    pub fn new() -> Self {
        Self::default()
    }
}

mean_metric!(
    Accuracy,
    "accuracy",
    |_: &Accuracy, op, y_true: &Tensor, y_pred: &Tensor| {
        let (t, p) = pair(op, y_true, y_pred)?;
        Ok::<_, Error>(Arr {
            v: t.v.iter().zip(&p.v).map(|(t, p)| f64::from(u8::from(t == p))).collect(),
            s: p.s,
        })
    }
);

/// The fraction of elements where `y_pred > threshold` (as 0 or 1) equals
/// `y_true` (Keras's `BinaryAccuracy`: a label other than 0 or 1 is never
/// matched; the free function [`binary_accuracy`](super::binary_accuracy)
/// reads labels above 0.5 as 1 instead).
///
/// ```
/// use gradtape::{nn::metrics::{BinaryAccuracy, Metric}, Tensor};
/// let mut acc = BinaryAccuracy::default(); // threshold 0.5
/// let y = Tensor::vector(&[1.0f32, 0.0, 1.0, 0.0]);
/// acc.update_state(&y, &Tensor::vector(&[0.9f32, 0.2, 0.4, 0.6]), None)?;
/// assert_eq!(acc.result(), 0.5);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BinaryAccuracy {
    threshold: f64,
    mean: Mean,
}

impl Default for BinaryAccuracy {
    /// With threshold 0.5.
    fn default() -> Self {
        BinaryAccuracy {
            threshold: 0.5,
            mean: Mean::default(),
        }
    }
}

impl BinaryAccuracy {
    /// With `threshold` (any number: 0 for logits, say); an error if NaN.
    pub fn new(threshold: f64) -> Result<Self> {
        if threshold.is_nan() {
            return Err(Error::invalid("BinaryAccuracy", "threshold must be a number, got NaN"));
        }
        Ok(BinaryAccuracy {
            threshold,
            ..Self::default()
        })
    }
}

mean_metric!(
    BinaryAccuracy,
    "binary_accuracy",
    |m: &BinaryAccuracy, op, y_true: &Tensor, y_pred: &Tensor| {
        let (t, p) = pair(op, y_true, y_pred)?;
        let hit = |t: f64, p: f64| t == f64::from(u8::from(p > m.threshold));
        Ok::<_, Error>(Arr {
            v: t.v
                .iter()
                .zip(&p.v)
                .map(|(&t, &p)| f64::from(u8::from(hit(t, p))))
                .collect(),
            s: p.s,
        })
    }
);

/// The fraction of rows (last axis) whose arg-max is the one-hot label's
/// (the first of equal largest values counts).
///
/// ```
/// use gradtape::{nn::metrics::{CategoricalAccuracy, Metric}, Tensor};
/// let mut acc = CategoricalAccuracy::new();
/// let y = Tensor::from_vec(vec![0.0f32, 1.0, 1.0, 0.0], &[2, 2])?;
/// acc.update_state(&y, &Tensor::from_vec(vec![0.2f32, 0.8, 0.3, 0.7], &[2, 2])?, None)?;
/// assert_eq!(acc.result(), 0.5);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CategoricalAccuracy {
    mean: Mean,
}

impl CategoricalAccuracy {
    /// A new metric.
    pub fn new() -> Self {
        Self::default()
    }
}

/// The rows of `p` (last axis), with `p`'s shape without it.
fn rows(p: &Arr) -> (std::slice::Chunks<'_, f64>, Vec<usize>) {
    let c = p.s.last().copied().unwrap_or(1).max(1);
    (p.v.chunks(c), p.s[..p.rank().saturating_sub(1)].to_vec())
}

/// `y_true` and `y_pred` of one shape, of rank at least `min_rank`, read.
fn one_hot_pair(op: &'static str, y_true: &Tensor, y_pred: &Tensor, min_rank: usize) -> Result<(Arr, Arr)> {
    if y_true.shape() != y_pred.shape() || y_pred.rank() < min_rank {
        return Err(mismatch(op, y_true, y_pred));
    }
    nonempty(op, y_true, y_pred)?;
    Ok((Arr::read(op, y_true)?, Arr::read(op, y_pred)?))
}

mean_metric!(
    CategoricalAccuracy,
    "categorical_accuracy",
    |_: &CategoricalAccuracy, op, y_true: &Tensor, y_pred: &Tensor| {
        let (t, p) = one_hot_pair(op, y_true, y_pred, 1)?;
        let ((tr, s), (pr, _)) = (rows(&t), rows(&p));
        let v = tr
            .zip(pr)
            .map(|(t, p)| f64::from(u8::from(argmax(t) == argmax(p))))
            .collect();
        Ok::<_, Error>(Arr { v, s })
    }
);

/// Integer labels against the rows of `y_pred`: the labels (as `f64`) and
/// the rows, the labels of shape `y_pred.shape[..-1]`, or with a last axis
/// of 1 (that shape kept, but a trailing 1 of a rank above 1 dropped, as
/// Keras shapes the matches).
fn sparse_pair(op: &'static str, labels: &Tensor, preds: &Tensor, min_rank: usize) -> Result<(Arr, Arr)> {
    let mut want = preds.shape().to_vec();
    want.pop();
    let fits = labels.shape() == want.as_slice() || labels.shape().split_last() == Some((&1, want.as_slice()));
    if preds.rank() < min_rank || !fits {
        return Err(mismatch(op, labels, preds));
    }
    let mut l = Arr::read(op, labels)?;
    if l.rank() > 1 && l.s.last() == Some(&1) {
        l = l.squeezed();
    }
    Ok((l, Arr::read(op, preds)?))
}

/// Whether `target` is among the `k` largest of `row`, TensorFlow's
/// `in_top_k`: ties at the boundary are all in, and a target out of range
/// or any non-finite prediction is not.
fn in_top_k(row: &[f64], target: i64, k: usize) -> bool {
    let Some(&tp) = usize::try_from(target).ok().and_then(|t| row.get(t)) else {
        return false;
    };
    if row.iter().any(|p| !p.is_finite()) {
        return false;
    }
    row.iter().filter(|&&p| p > tp).count() < k
}

/// The fraction of samples whose integer label is the arg-max of their
/// predictions (logits or probabilities, classes on the last axis), Keras's
/// `SparseCategoricalAccuracy`. Labels have the predictions' shape without
/// the last axis (or with a last axis of 1); a label out of range is
/// never matched.
///
/// ```
/// use gradtape::{nn::metrics::{Metric, SparseCategoricalAccuracy}, Tensor};
/// let mut acc = SparseCategoricalAccuracy::default();
/// let p = Tensor::from_vec(vec![0.1f32, 2.0, 3.0, 0.5], &[2, 2])?;
/// acc.update_state(&Tensor::vector(&[1i64, 1]), &p, Some(&Tensor::vector(&[3.0f32, 1.0])))?;
/// assert_eq!(acc.result(), 0.75);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct SparseCategoricalAccuracy {
    mean: Mean,
}

impl PartialEq for SparseCategoricalAccuracy {
    fn eq(&self, other: &Self) -> bool {
        self.mean.same(&other.mean)
    }
}

impl Eq for SparseCategoricalAccuracy {}

impl SparseCategoricalAccuracy {
    /// Adds a batch of integer `labels` and predictions (logits or
    /// probabilities, classes on the last axis), without weights (an empty
    /// batch adds nothing).
    pub fn update(&mut self, labels: &Tensor, preds: &Tensor) -> Result<()> {
        if preds.numel() == 0 && preds.rank() > 0 {
            sparse_pair("SparseCategoricalAccuracy", labels, preds, 1)?;
            return Ok(());
        }
        self.update_state(labels, preds, None)
    }

    /// Starts again.
    pub fn reset(&mut self) {
        *self = SparseCategoricalAccuracy::default();
    }
}

mean_metric!(
    SparseCategoricalAccuracy,
    "sparse_categorical_accuracy",
    |_: &SparseCategoricalAccuracy, op, labels: &Tensor, preds: &Tensor| {
        let (l, p) = sparse_pair(op, labels, preds, 1)?;
        nonempty(op, labels, preds)?;
        let v = rows(&p)
            .0
            .zip(&l.v)
            .map(|(r, &l)| f64::from(u8::from(argmax(r) as f64 == l)))
            .collect();
        Ok::<_, Error>(Arr { v, s: l.s })
    }
);

/// `k` checked to be at least 1.
fn check_k(op: &'static str, k: usize) -> Result<usize> {
    if k == 0 {
        return Err(Error::invalid(op, "k must be at least 1, got 0"));
    }
    Ok(k)
}

/// The fraction of rows whose one-hot label's class is among the `k`
/// largest predictions (ties at the boundary count as in, as TensorFlow's
/// `in_top_k`); predictions of rank at least 2.
///
/// ```
/// use gradtape::{nn::metrics::{Metric, TopKCategoricalAccuracy}, Tensor};
/// let mut acc = TopKCategoricalAccuracy::new(2)?;
/// let y = Tensor::from_vec(vec![0.0f32, 0.0, 1.0, 1.0, 0.0, 0.0], &[2, 3])?;
/// let p = Tensor::from_vec(vec![0.5f32, 0.2, 0.3, 0.1, 0.5, 0.4], &[2, 3])?;
/// acc.update_state(&y, &p, None)?;
/// assert_eq!(acc.result(), 0.5);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TopKCategoricalAccuracy {
    k: usize,
    mean: Mean,
}

impl Default for TopKCategoricalAccuracy {
    /// With k = 5 (Keras's default).
    fn default() -> Self {
        TopKCategoricalAccuracy {
            k: 5,
            mean: Mean::default(),
        }
    }
}

impl TopKCategoricalAccuracy {
    /// With `k` (an error if 0).
    pub fn new(k: usize) -> Result<Self> {
        Ok(TopKCategoricalAccuracy {
            k: check_k("TopKCategoricalAccuracy", k)?,
            ..Self::default()
        })
    }
}

mean_metric!(
    TopKCategoricalAccuracy,
    "top_k_categorical_accuracy",
    |m: &TopKCategoricalAccuracy, op, y_true: &Tensor, y_pred: &Tensor| {
        let (t, p) = one_hot_pair(op, y_true, y_pred, 2)?;
        let ((tr, s), (pr, _)) = (rows(&t), rows(&p));
        let v = tr
            .zip(pr)
            .map(|(t, p)| f64::from(u8::from(in_top_k(p, argmax(t) as i64, m.k))))
            .collect();
        Ok::<_, Error>(Arr { v, s })
    }
);

/// The fraction of samples whose integer label is among the `k` largest
/// predictions (labels truncated to integers, as Keras casts them; out of
/// range: not in), or, with `from_sorted_ids`, among the first `k` of the
/// class ids `y_pred` holds (best first).
///
/// ```
/// use gradtape::{nn::metrics::{Metric, SparseTopKCategoricalAccuracy}, Tensor};
/// let mut acc = SparseTopKCategoricalAccuracy::new(2)?;
/// let p = Tensor::from_vec(vec![0.5f32, 0.2, 0.3, 0.1, 0.5, 0.4], &[2, 3])?;
/// acc.update_state(&Tensor::vector(&[2i64, 0]), &p, None)?;
/// assert_eq!(acc.result(), 0.5);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SparseTopKCategoricalAccuracy {
    k: usize,
    from_sorted_ids: bool,
    mean: Mean,
}

impl Default for SparseTopKCategoricalAccuracy {
    /// With k = 5 (Keras's default).
    fn default() -> Self {
        SparseTopKCategoricalAccuracy {
            k: 5,
            from_sorted_ids: false,
            mean: Mean::default(),
        }
    }
}

impl SparseTopKCategoricalAccuracy {
    /// With `k` (an error if 0).
    pub fn new(k: usize) -> Result<Self> {
        Ok(SparseTopKCategoricalAccuracy {
            k: check_k("SparseTopKCategoricalAccuracy", k)?,
            ..Self::default()
        })
    }

    /// Whether `y_pred` holds class ids sorted best first (default false:
    /// scores per class).
    pub fn from_sorted_ids(mut self, yes: bool) -> Self {
        self.from_sorted_ids = yes;
        self
    }
}

mean_metric!(
    SparseTopKCategoricalAccuracy,
    "sparse_top_k_categorical_accuracy",
    |m: &SparseTopKCategoricalAccuracy, op, labels: &Tensor, preds: &Tensor| {
        let (l, p) = sparse_pair(op, labels, preds, 2)?;
        nonempty(op, labels, preds)?;
        let hit = |r: &[f64], l: f64| {
            if m.from_sorted_ids {
                r.iter().take(m.k).any(|&id| id == l)
            } else {
                in_top_k(r, l as i64, m.k)
            }
        };
        let v = rows(&p)
            .0
            .zip(&l.v)
            .map(|(r, &l)| f64::from(u8::from(hit(r, l))))
            .collect();
        Ok::<_, Error>(Arr { v, s: l.s })
    }
);
