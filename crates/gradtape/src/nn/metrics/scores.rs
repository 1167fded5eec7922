//! F-scores ([`FBetaScore`], [`F1Score`]) and the mean intersection over
//! union of classes ([`MeanIoU`]).

use super::array::{argmax, nonempty, Arr};
use super::Metric;
use crate::error::{Error, Result};
use crate::nn::losses::EPSILON;
use crate::tensor::Tensor;

/// How [`FBetaScore`] combines its classes' scores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FScoreAverage {
    /// One score per class (Keras's `None`, the default).
    #[default]
    None,
    /// One score from the counts of every class together.
    Micro,
    /// The mean of the classes' scores.
    Macro,
    /// The mean of the classes' scores weighted by their (weighted) number
    /// of positive labels.
    Weighted,
}

/// The F-beta score of `[batch, classes]` labels and predictions, Keras's
/// `FBetaScore`: `(1 + β²) · P · R / (β² · P + R)` from each class's
/// precision P and recall R (each `tp / (tp + x + ε)`, ε = 1e-7, as
/// Keras's). A prediction is positive above `threshold`, or, without one,
/// when it is its row's largest (and not 0). Sample weights are one per
/// sample.
///
/// ```
/// use gradtape::{nn::metrics::{FBetaScore, FScoreAverage, Metric}, Tensor};
/// let y = Tensor::from_vec(vec![1.0f64, 0.0, 0.0, 1.0, 1.0, 0.0], &[3, 2])?;
/// let p = Tensor::from_vec(vec![0.9f64, 0.2, 0.6, 0.7, 0.3, 0.1], &[3, 2])?;
/// let mut f = FBetaScore::new(FScoreAverage::None, 2.0, Some(0.5))?;
/// f.update_state(&y, &p, None)?;
/// let v = f.values(); // class 0: P 1/2, R 1/2; class 1: P 1, R 1
/// assert!((v[0] - 0.5).abs() < 1e-6 && (v[1] - 1.0).abs() < 1e-6);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct FBetaScore {
    average: FScoreAverage,
    beta: f64,
    threshold: Option<f64>,
    /// Per class (one entry for micro): tp, fp, fn and the labels' sum
    /// (empty before the first update fixes the number of classes).
    tp: Vec<f64>,
    fp: Vec<f64>,
    fn_: Vec<f64>,
    positives: Vec<f64>,
    classes: usize,
}

impl FBetaScore {
    /// With `average`, `beta` > 0 and `threshold` in `(0, 1]` (`None`: each
    /// row's largest prediction).
    pub fn new(average: FScoreAverage, beta: f64, threshold: Option<f64>) -> Result<Self> {
        Self::checked("FBetaScore", average, beta, threshold)
    }

    fn checked(op: &'static str, average: FScoreAverage, beta: f64, threshold: Option<f64>) -> Result<Self> {
        if !(beta > 0.0 && beta.is_finite()) {
            return Err(Error::invalid(op, format!("beta must be a number > 0, got {beta}")));
        }
        if let Some(t) = threshold.filter(|t| !(*t > 0.0 && *t <= 1.0)) {
            return Err(Error::invalid(op, format!("threshold must lie in (0, 1], got {t}")));
        }
        Ok(FBetaScore {
            average,
            beta,
            threshold,
            tp: Vec::new(),
            fp: Vec::new(),
            fn_: Vec::new(),
            positives: Vec::new(),
            classes: 0,
        })
    }

    fn update(&mut self, op: &'static str, y_true: &Tensor, y_pred: &Tensor, w: Option<&Tensor>) -> Result<()> {
        let fits = y_true.shape() == y_pred.shape() && y_pred.rank() == 2;
        if !fits || (self.classes != 0 && y_pred.shape()[1] != self.classes) {
            return Err(Error::invalid(
                op,
                format!(
                    "expects y_true and y_pred of one shape [batch, classes]{}, got {:?} and {:?}",
                    if self.classes != 0 {
                        format!(" with {} classes", self.classes)
                    } else {
                        String::new()
                    },
                    y_true.shape(),
                    y_pred.shape()
                ),
            ));
        }
        nonempty(op, y_true, y_pred)?;
        let (t, p) = (Arr::read(op, y_true)?, Arr::read(op, y_pred)?);
        let (b, c) = (p.s[0], p.s[1]);
        let w = match w {
            None => vec![1.0; b],
            Some(w) if w.shape() == [b] => Arr::read(op, w)?.v,
            Some(w) => {
                return Err(Error::invalid(
                    op,
                    format!(
                        "sample_weight must have shape [{b}] (one per sample), got {:?}",
                        w.shape()
                    ),
                ));
            }
        };
        if self.classes == 0 {
            let n = if self.average == FScoreAverage::Micro { 1 } else { c };
            for acc in [&mut self.tp, &mut self.fp, &mut self.fn_, &mut self.positives] {
                *acc = vec![0.0; n];
            }
            self.classes = c;
        }
        let micro = self.average == FScoreAverage::Micro;
        for (r, (row, lab)) in p.v.chunks(c).zip(t.v.chunks(c)).enumerate() {
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            for (k, (&p, &y)) in row.iter().zip(lab).enumerate() {
                let hit = match self.threshold {
                    Some(t) => p > t,
                    None => p >= max && p.abs() > 1e-9,
                };
                let (hit, i) = (f64::from(u8::from(hit)), if micro { 0 } else { k });
                self.tp[i] += hit * y * w[r];
                self.fp[i] += hit * (1.0 - y) * w[r];
                self.fn_[i] += (1.0 - hit) * y * w[r];
                self.positives[i] += y * w[r];
            }
        }
        Ok(())
    }

    fn scores(&self) -> Vec<f64> {
        let b2 = self.beta * self.beta;
        let f: Vec<f64> = (0..self.tp.len())
            .map(|i| {
                let precision = self.tp[i] / (self.tp[i] + self.fp[i] + EPSILON);
                let recall = self.tp[i] / (self.tp[i] + self.fn_[i] + EPSILON);
                precision * recall / (b2 * precision + recall + EPSILON) * (1.0 + b2)
            })
            .collect();
        match self.average {
            FScoreAverage::None => f,
            _ if f.is_empty() => vec![0.0],
            FScoreAverage::Weighted => {
                let total = self.positives.iter().sum::<f64>() + EPSILON;
                vec![f.iter().zip(&self.positives).map(|(f, w)| f * (w / total)).sum()]
            }
            FScoreAverage::Micro | FScoreAverage::Macro => vec![f.iter().sum::<f64>() / f.len() as f64],
        }
    }

    fn result_tensor(&self) -> Tensor {
        let s = self.scores();
        if self.average == FScoreAverage::None {
            Tensor::vector(&s)
        } else {
            Tensor::scalar(s[0])
        }
    }

    fn reset(&mut self) {
        for acc in [&mut self.tp, &mut self.fp, &mut self.fn_, &mut self.positives] {
            acc.iter_mut().for_each(|x| *x = 0.0);
        }
    }
}

impl Metric for FBetaScore {
    fn name(&self) -> &str {
        "fbeta_score"
    }

    fn update_state(&mut self, y_true: &Tensor, y_pred: &Tensor, sample_weight: Option<&Tensor>) -> Result<()> {
        self.update("FBetaScore", y_true, y_pred, sample_weight)
    }

    /// The score per class (an empty vector before the first update), or
    /// averaged (0 before the first update).
    fn result(&self) -> Tensor {
        self.result_tensor()
    }

    fn reset_state(&mut self) {
        self.reset();
    }
}

/// The F1 score, [`FBetaScore`] with β = 1 (Keras's `F1Score`).
///
/// ```
/// use gradtape::{nn::metrics::{F1Score, FScoreAverage, Metric}, Tensor};
/// let y = Tensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0], &[2, 2])?;
/// let p = Tensor::from_vec(vec![0.8f32, 0.3, 0.6, 0.4], &[2, 2])?;
/// let mut f1 = F1Score::new(FScoreAverage::Micro, None)?; // each row's arg-max
/// f1.update_state(&y, &p, None)?;
/// assert!((f1.values()[0] - 0.5).abs() < 1e-6);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct F1Score(FBetaScore);

impl F1Score {
    /// With `average` and `threshold` in `(0, 1]` (`None`: each row's
    /// largest prediction).
    pub fn new(average: FScoreAverage, threshold: Option<f64>) -> Result<Self> {
        Ok(F1Score(FBetaScore::checked("F1Score", average, 1.0, threshold)?))
    }
}

impl Default for F1Score {
    /// One score per class, each row's largest prediction positive.
    fn default() -> Self {
        F1Score(FBetaScore::checked("F1Score", FScoreAverage::None, 1.0, None).expect("valid options"))
    }
}

impl Metric for F1Score {
    fn name(&self) -> &str {
        "f1_score"
    }

    fn update_state(&mut self, y_true: &Tensor, y_pred: &Tensor, sample_weight: Option<&Tensor>) -> Result<()> {
        self.0.update("F1Score", y_true, y_pred, sample_weight)
    }

    fn result(&self) -> Tensor {
        self.0.result_tensor()
    }

    fn reset_state(&mut self) {
        self.0.reset();
    }
}

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
    num_classes: usize,
    ignore_class: Option<i64>,
    sparse_y_true: bool,
    sparse_y_pred: bool,
    /// `cm[true][pred]`, row-major.
    cm: Vec<f64>,
}

impl MeanIoU {
    /// For `num_classes` classes (an error if 0), class ids on both sides.
    pub fn new(num_classes: usize) -> Result<Self> {
        if num_classes == 0 {
            return Err(Error::invalid("MeanIoU", "num_classes must be at least 1, got 0"));
        }
        Ok(MeanIoU {
            num_classes,
            ignore_class: None,
            sparse_y_true: true,
            sparse_y_pred: true,
            cm: vec![0.0; num_classes * num_classes],
        })
    }

    /// A label (of any value) left out of the matrix: 255 for unlabelled
    /// pixels, say.
    pub fn ignore_class(mut self, class: i64) -> Self {
        self.ignore_class = Some(class);
        self
    }

    /// Whether labels are class ids (default true) or scores per class.
    pub fn sparse_y_true(mut self, yes: bool) -> Self {
        self.sparse_y_true = yes;
        self
    }

    /// Whether predictions are class ids (default true) or scores per
    /// class.
    pub fn sparse_y_pred(mut self, yes: bool) -> Self {
        self.sparse_y_pred = yes;
        self
    }

    /// The mean IoU so far (0 before any update).
    pub fn result(&self) -> f64 {
        let n = self.num_classes;
        let (mut sum, mut valid) = (0.0, 0.0);
        for c in 0..n {
            let tp = self.cm[c * n + c];
            let row: f64 = self.cm[c * n..(c + 1) * n].iter().sum();
            let col: f64 = (0..n).map(|r| self.cm[r * n + c]).sum();
            let den = col + row - tp;
            if den > 1e-9 {
                sum += tp / (den + EPSILON);
                valid += 1.0;
            }
        }
        sum / (valid + EPSILON)
    }
}

impl Metric for MeanIoU {
    fn name(&self) -> &str {
        "mean_io_u"
    }

    fn update_state(&mut self, y_true: &Tensor, y_pred: &Tensor, sample_weight: Option<&Tensor>) -> Result<()> {
        const OP: &str = "MeanIoU";
        nonempty(OP, y_true, y_pred)?;
        let ids = |t: &Tensor, sparse: bool| -> Result<Vec<f64>> {
            let a = Arr::read(OP, t)?;
            if sparse {
                return Ok(a.v);
            }
            let c = *a.s.last().filter(|_| a.rank() > 0).ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!("scores per class need rank at least 1, got shape {:?}", t.shape()),
                )
            })?;
            Ok(a.v.chunks(c).map(|r| argmax(r) as f64).collect())
        };
        let (t, p) = (ids(y_true, self.sparse_y_true)?, ids(y_pred, self.sparse_y_pred)?);
        if t.len() != p.len() {
            return Err(Error::invalid(
                OP,
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
                let w = Arr::read(OP, w)?;
                let flat = Arr {
                    s: vec![w.v.len()],
                    v: w.v,
                };
                flat.broadcast_to(OP, "sample_weight (flattened)", &w.s, &[t.len()])?
            }
        };
        let n = self.num_classes;
        let mut add = Vec::with_capacity(t.len());
        for (i, (&t, &p)) in t.iter().zip(&p).enumerate() {
            if self.ignore_class.is_some_and(|c| t == c as f64) {
                continue;
            }
            let Some(&bad) = [t, p].iter().find(|&&v| !(v >= 0.0 && v < n as f64)) else {
                add.push((t as usize * n + p as usize, w[i]));
                continue;
            };
            return Err(Error::invalid(
                OP,
                format!(
                    "class id {bad} outside [0, {n}) (num_classes {n}; y_true {:?}, y_pred {:?})",
                    y_true.shape(),
                    y_pred.shape()
                ),
            ));
        }
        add.into_iter().for_each(|(i, w)| self.cm[i] += w);
        Ok(())
    }

    fn result(&self) -> Tensor {
        Tensor::scalar(MeanIoU::result(self))
    }

    fn reset_state(&mut self) {
        self.cm.iter_mut().for_each(|x| *x = 0.0);
    }
}
