//! Intersection over union of chosen classes, Keras's `IoU` and its kin
//! ([`IoU`], [`BinaryIoU`], [`OneHotIoU`], [`OneHotMeanIoU`], and the mean
//! over every class, [`MeanIoU`]).
//!
//! Each holds a weighted confusion matrix `cm[true][pred]` of
//! `num_classes` classes. A class's IoU is `tp / (tp + fp + fn)`, from the
//! diagonal and the sums of its row and column; the result is the mean of
//! the IoUs of the target classes, leaving out those never seen (neither
//! labelled nor predicted). Labels and predictions are class ids (any
//! shape, flattened) or scores per class on the last axis (their arg-max);
//! weights are flattened and broadcast to the flattened labels. A class id
//! outside `[0, num_classes)` is an error (Keras drops it), except the
//! ignored class's. Keras divides in float32; this in f64.

use super::array::{argmax, nonempty, Arr};
use super::Metric;
use crate::error::{Error, Result};
use crate::nn::losses::EPSILON;
use crate::tensor::Tensor;

/// The confusion matrix of class ids and how inputs become class ids.
#[derive(Clone, Debug, PartialEq)]
struct Confusion {
    num_classes: usize,
    ignore_class: Option<i64>,
    sparse_y_true: bool,
    sparse_y_pred: bool,
    /// The class ids the result averages over.
    targets: Vec<usize>,
    /// `cm[true][pred]`, row-major.
    cm: Vec<f64>,
}

impl Confusion {
    fn new(op: &'static str, num_classes: usize, targets: &[usize]) -> Result<Confusion> {
        if num_classes == 0 {
            return Err(Error::invalid(op, "num_classes must be at least 1, got 0"));
        }
        if targets.is_empty() {
            return Err(Error::invalid(op, "target_class_ids must not be empty"));
        }
        if let Some(bad) = targets.iter().find(|&&c| c >= num_classes) {
            return Err(Error::invalid(
                op,
                format!("target class id {bad} outside [0, {num_classes}) (num_classes {num_classes})"),
            ));
        }
        Ok(Confusion {
            num_classes,
            ignore_class: None,
            sparse_y_true: true,
            sparse_y_pred: true,
            targets: targets.to_vec(),
            cm: vec![0.0; num_classes * num_classes],
        })
    }

    /// `t`'s class ids: its values, or the arg-max of its last axis.
    fn ids(op: &'static str, t: &Tensor, sparse: bool) -> Result<Vec<f64>> {
        let a = Arr::read(op, t)?;
        if sparse {
            return Ok(a.v);
        }
        let c = *a.s.last().filter(|_| a.rank() > 0).ok_or_else(|| {
            Error::invalid(
                op,
                format!("scores per class need rank at least 1, got shape {:?}", t.shape()),
            )
        })?;
        Ok(a.v.chunks(c).map(|r| argmax(r) as f64).collect())
    }

    /// Adds a batch; `pred` gives the predictions' class ids (by default
    /// [`ids`](Confusion::ids)).
    fn update(
        &mut self,
        op: &'static str,
        y_true: &Tensor,
        y_pred: &Tensor,
        sample_weight: Option<&Tensor>,
        pred: Option<Vec<f64>>,
    ) -> Result<()> {
        nonempty(op, y_true, y_pred)?;
        let t = Self::ids(op, y_true, self.sparse_y_true)?;
        let p = match pred {
            Some(p) => p,
            None => Self::ids(op, y_pred, self.sparse_y_pred)?,
        };
        if t.len() != p.len() {
            return Err(Error::invalid(
                op,
                format!(
                    "{} labels (y_true {:?}) against {} predictions (y_pred {:?})",
                    t.len(),
                    y_true.shape(),
                    p.len(),
                    y_pred.shape()
                ),
            ));
        }
        let w = match sample_weight {
            None => vec![1.0; t.len()],
            Some(w) => {
                let w = Arr::read(op, w)?;
                let flat = Arr {
                    s: vec![w.v.len()],
                    v: w.v,
                };
                flat.broadcast_to(op, "sample_weight (flattened)", &w.s, &[t.len()])?
            }
        };
        let n = self.num_classes;
        let mut add = Vec::with_capacity(t.len());
        for ((&t, &p), &w) in t.iter().zip(&p).zip(&w) {
            if self.ignore_class.is_some_and(|c| t == c as f64) {
                continue;
            }
            if let Some(&bad) = [t, p].iter().find(|&&v| !(v >= 0.0 && v < n as f64)) {
                return Err(Error::invalid(
                    op,
                    format!(
                        "class id {bad} outside [0, {n}) (num_classes {n}; y_true {:?}, y_pred {:?})",
                        y_true.shape(),
                        y_pred.shape()
                    ),
                ));
            }
            // class ids truncated to integers, as Keras casts them
            add.push((t as usize * n + p as usize, w));
        }
        add.into_iter().for_each(|(i, w)| self.cm[i] += w);
        Ok(())
    }

    /// The mean IoU of the target classes seen so far (0 before any
    /// update).
    fn result(&self) -> f64 {
        let n = self.num_classes;
        let (mut sum, mut valid) = (0.0, 0.0);
        for &c in &self.targets {
            let tp = self.cm[c * n + c];
            let row: f64 = self.cm[c * n..(c + 1) * n].iter().sum();
            let col: f64 = (0..n).map(|r| self.cm[r * n + c]).sum();
            let den = row + col - tp;
            if den > 1e-9 {
                sum += tp / (den + EPSILON);
                valid += 1.0;
            }
        }
        sum / (valid + EPSILON)
    }

    fn reset(&mut self) {
        self.cm.iter_mut().for_each(|x| *x = 0.0);
    }
}

/// Implements [`Metric`] and `result() -> f64` for a type holding a
/// [`Confusion`] in `cm`; `$pred` maps `(&self, y_pred)` to the predicted
/// class ids (`None`: the default).
macro_rules! iou_metric {
    ($ty:ident, $name:literal, $pred:expr) => {
        impl $ty {
            /// The mean IoU of the target classes so far (0 before any
            /// update).
            pub fn result(&self) -> f64 {
                self.cm.result()
            }
        }

        impl Metric for $ty {
            fn name(&self) -> &str {
                $name
            }

            fn update_state(&mut self, y_true: &Tensor, y_pred: &Tensor, sample_weight: Option<&Tensor>) -> Result<()> {
                let pred = ($pred)(&*self, y_pred)?;
                self.cm
                    .update(stringify!($ty), y_true, y_pred, sample_weight, pred)
            }

            fn result(&self) -> Tensor {
                Tensor::scalar(self.cm.result())
            }

            fn reset_state(&mut self) {
                self.cm.reset();
            }
        }
    };
}

/// The options of the [`Confusion`] in `cm` a type offers, as builder
/// methods (one arm per option).
macro_rules! iou_options {
    ($ty:ident: $($opt:ident),*) => {
        impl $ty {
            $(iou_options!(@ $opt);)*
        }
    };
    (@ ignore_class) => {
        /// A label (of any value) left out of the matrix: 255 for
        /// unlabelled pixels, say (for one-hot labels, where it is their
        /// arg-max).
        pub fn ignore_class(mut self, class: i64) -> Self {
            self.cm.ignore_class = Some(class);
            self
        }
    };
    (@ sparse_y_true) => {
        /// Whether labels are class ids (default true) or scores per class.
        pub fn sparse_y_true(mut self, yes: bool) -> Self {
            self.cm.sparse_y_true = yes;
            self
        }
    };
    (@ sparse_y_pred) => {
        /// Whether predictions are class ids or scores per class (default:
        /// class ids, but scores for the one-hot metrics).
        pub fn sparse_y_pred(mut self, yes: bool) -> Self {
            self.cm.sparse_y_pred = yes;
            self
        }
    };
}

/// The default class ids of predictions.
fn default_ids<T>(_: &T, _: &Tensor) -> Result<Option<Vec<f64>>> {
    Ok(None)
}

/// The mean intersection over union of the classes `target_class_ids`
/// among `num_classes` (Keras's `IoU`): with one target, that class's
/// IoU. Labels and predictions are class ids, or, with
/// [`sparse_y_true`](IoU::sparse_y_true) / [`sparse_y_pred`](IoU::sparse_y_pred)
/// false, scores per class on the last axis.
///
/// ```
/// use gradtape::{nn::metrics::{IoU, Metric}, Tensor};
/// let mut iou = IoU::new(2, &[0])?;
/// let (y, p) = (Tensor::vector(&[0i64, 0, 1, 1]), Tensor::vector(&[0i64, 1, 0, 1]));
/// iou.update_state(&y, &p, Some(&Tensor::vector(&[0.3f64, 0.3, 0.3, 0.1])))?;
/// assert!((iou.result() - 1.0 / 3.0).abs() < 1e-6); // class 0: 0.3 / (0.6 + 0.6 - 0.3)
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct IoU {
    cm: Confusion,
}

impl IoU {
    /// For `num_classes` classes (at least 1) and the target classes (at
    /// least one, each below `num_classes`; a repeated id counts twice),
    /// class ids on both sides.
    pub fn new(num_classes: usize, target_class_ids: &[usize]) -> Result<Self> {
        Ok(IoU {
            cm: Confusion::new("IoU", num_classes, target_class_ids)?,
        })
    }
}

iou_metric!(IoU, "io_u", default_ids);
iou_options!(IoU: ignore_class, sparse_y_true, sparse_y_pred);

/// The IoU of two classes, 0 and 1, predicted by a threshold (Keras's
/// `BinaryIoU`): a prediction at or above `threshold` is class 1, below
/// it class 0; labels are class ids (0 or 1). The result is the mean IoU
/// of `target_class_ids` (both by default). As Keras, predictions and the
/// threshold are compared in float32.
///
/// ```
/// use gradtape::{nn::metrics::{BinaryIoU, Metric}, Tensor};
/// let mut iou = BinaryIoU::new(&[0, 1], 0.3)?;
/// let (y, p) = (Tensor::vector(&[0i64, 1, 0, 1]), Tensor::vector(&[0.1f64, 0.2, 0.4, 0.7]));
/// iou.update_state(&y, &p, Some(&Tensor::vector(&[0.2f64, 0.3, 0.4, 0.1])))?;
/// // class 0: 0.2 / (0.6 + 0.5 - 0.2); class 1: 0.1 / (0.4 + 0.5 - 0.1)
/// assert!((iou.result() - (0.2 / 0.9 + 0.1 / 0.8) / 2.0).abs() < 1e-6);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct BinaryIoU {
    threshold: f64,
    cm: Confusion,
}

impl BinaryIoU {
    /// For the target classes (0, 1 or both; at least one) and a finite
    /// threshold.
    pub fn new(target_class_ids: &[usize], threshold: f64) -> Result<Self> {
        if !threshold.is_finite() {
            return Err(Error::invalid(
                "BinaryIoU",
                format!("threshold must be a finite number, got {threshold}"),
            ));
        }
        Ok(BinaryIoU {
            threshold,
            cm: Confusion::new("BinaryIoU", 2, target_class_ids)?,
        })
    }

    /// The thresholded predictions, 0 or 1 (compared in float32).
    fn classes(&self, y_pred: &Tensor) -> Result<Option<Vec<f64>>> {
        let p = Arr::read("BinaryIoU", y_pred)?;
        let th = self.threshold as f32;
        Ok(Some(p.v.iter().map(|&p| f64::from(u8::from(p as f32 >= th))).collect()))
    }
}

impl Default for BinaryIoU {
    /// Both classes, threshold 0.5.
    fn default() -> Self {
        BinaryIoU::new(&[0, 1], 0.5).expect("valid options")
    }
}

iou_metric!(BinaryIoU, "binary_io_u", BinaryIoU::classes);

/// [`IoU`] of one-hot labels (Keras's `OneHotIoU`): labels are scores per
/// class on the last axis (their arg-max), predictions too unless
/// [`sparse_y_pred`](OneHotIoU::sparse_y_pred).
///
/// ```
/// use gradtape::{nn::metrics::{Metric, OneHotIoU}, Tensor};
/// let y = Tensor::from_vec(vec![0.0f64, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0], &[4, 3])?;
/// let p = Tensor::from_vec(vec![0.2f64, 0.3, 0.5, 0.1, 0.2, 0.7, 0.5, 0.3, 0.1, 0.1, 0.4, 0.5], &[4, 3])?;
/// let mut iou = OneHotIoU::new(3, &[1, 2])?;
/// iou.update_state(&y, &p, Some(&Tensor::vector(&[0.1f64, 0.2, 0.3, 0.4])))?;
/// // ids 2, 0, 1, 0 against 2, 2, 0, 2: class 1 never right, class 2 0.1 / 0.7
/// assert!((iou.result() - (0.0 + 0.1 / 0.7) / 2.0).abs() < 1e-6);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct OneHotIoU {
    cm: Confusion,
}

impl OneHotIoU {
    /// For `num_classes` classes (at least 1) and the target classes (at
    /// least one, each below `num_classes`).
    pub fn new(num_classes: usize, target_class_ids: &[usize]) -> Result<Self> {
        let mut cm = Confusion::new("OneHotIoU", num_classes, target_class_ids)?;
        (cm.sparse_y_true, cm.sparse_y_pred) = (false, false);
        Ok(OneHotIoU { cm })
    }
}

iou_metric!(OneHotIoU, "one_hot_io_u", default_ids);
iou_options!(OneHotIoU: ignore_class, sparse_y_pred);

/// The mean IoU of every class, of one-hot labels (Keras's
/// `OneHotMeanIoU`): [`MeanIoU`](super::MeanIoU) with labels, and
/// predictions unless [`sparse_y_pred`](OneHotMeanIoU::sparse_y_pred),
/// given as scores per class on the last axis.
///
/// ```
/// use gradtape::{nn::metrics::{Metric, OneHotMeanIoU}, Tensor};
/// let y = Tensor::from_vec(vec![1.0f32, 0.0, 1.0, 0.0, 0.0, 1.0], &[3, 2])?;
/// let p = Tensor::from_vec(vec![0.9f32, 0.1, 0.4, 0.6, 0.2, 0.8], &[3, 2])?;
/// let mut iou = OneHotMeanIoU::new(2)?;
/// iou.update_state(&y, &p, None)?;
/// // ids 0, 0, 1 against 0, 1, 1: each class 1 / (1 + 2 - 1)
/// assert!((iou.result() - 0.5).abs() < 1e-6);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct OneHotMeanIoU {
    cm: Confusion,
}

impl OneHotMeanIoU {
    /// For `num_classes` classes (at least 1).
    pub fn new(num_classes: usize) -> Result<Self> {
        let all: Vec<usize> = (0..num_classes).collect();
        let mut cm = Confusion::new("OneHotMeanIoU", num_classes, &all)?;
        (cm.sparse_y_true, cm.sparse_y_pred) = (false, false);
        Ok(OneHotMeanIoU { cm })
    }
}

iou_metric!(OneHotMeanIoU, "one_hot_mean_io_u", default_ids);
iou_options!(OneHotMeanIoU: ignore_class, sparse_y_pred);

/// The mean, over classes, of the intersection over union `tp / (tp + fp +
/// fn)` of `num_classes` classes (Keras's `MeanIoU`), from a weighted
/// confusion matrix; classes never seen (neither labelled nor predicted)
/// are left out of the mean. Labels and predictions are class ids (any
/// shape, flattened), or, with [`sparse_y_true`](MeanIoU::sparse_y_true)
/// / [`sparse_y_pred`](MeanIoU::sparse_y_pred) false, scores per class on
/// the last axis (their arg-max). A class id outside `[0, num_classes)` is
/// an error (Keras drops it), except the ignored class's. Keras divides in
/// float32; this in f64.
///
/// ```
/// use gradtape::{nn::metrics::{MeanIoU, Metric}, Tensor};
/// let mut iou = MeanIoU::new(2)?;
/// iou.update_state(&Tensor::vector(&[0i64, 0, 1, 1]), &Tensor::vector(&[0i64, 1, 0, 1]), None)?;
/// assert!((iou.result() - 1.0 / 3.0).abs() < 1e-6); // each class: 1 / (1 + 1 + 1)
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct MeanIoU {
    cm: Confusion,
}

impl MeanIoU {
    /// For `num_classes` classes (an error if 0), class ids on both sides.
    pub fn new(num_classes: usize) -> Result<Self> {
        let all: Vec<usize> = (0..num_classes).collect();
        Ok(MeanIoU {
            cm: Confusion::new("MeanIoU", num_classes, &all)?,
        })
    }
}

iou_metric!(MeanIoU, "mean_io_u", default_ids);
iou_options!(MeanIoU: ignore_class, sparse_y_true, sparse_y_pred);
