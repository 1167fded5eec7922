//! The area under the ROC or precision-recall curve ([`AUC`]: one curve,
//! or one per label), and the best value of one rate where another
//! reaches a target ([`PrecisionAtRecall`] and its kin), from the
//! confusion counts at evenly spread thresholds (`confusion.rs`).

use super::array::divide_no_nan;
use super::confusion::{count, count_labels, evenly_spread, Counts, Grid, Labels, Select};
use super::Metric;
use crate::error::{Error, Result};
use crate::nn::losses::EPSILON;
use crate::tensor::Tensor;

/// The curve whose area [`AUC`] measures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AucCurve {
    /// The receiver operating characteristic: recall against the false
    /// positive rate (Keras's default).
    #[default]
    ROC,
    /// Precision against recall.
    PR,
}

/// How [`AUC`] sums the area between thresholds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AucSummation {
    /// Trapezoids for ROC; for PR, Davis and Goadrich's interpolation of
    /// precision between the counts (Keras's default).
    #[default]
    Interpolation,
    /// Rectangles under the lower of the two ends.
    Minoring,
    /// Rectangles under the higher of the two ends.
    Majoring,
}

/// The area under the ROC or precision-recall curve, from the counts at
/// `num_thresholds` thresholds (200 by default: `i / 199` with the ends
/// moved to −1e-7 and 1 + 1e-7), Keras's `AUC`.
///
/// By default there is one curve: every element of `y_pred` is a
/// prediction, each weighted by its sample weight and, with
/// [`label_weights`](AUC::label_weights), by the weight of its label (its
/// index on the last axis). With [`multi_label`](AUC::multi_label), the
/// predictions are `[batch, labels]` and each label has its own curve;
/// the result is the mean of their areas, or, with label weights, their
/// weighted mean (the weights then weigh the areas, not the counts). The
/// number of labels is fixed by [`num_labels`](AUC::num_labels) or by the
/// first update.
///
/// ```
/// use gradtape::{nn::metrics::{AucCurve, Metric, AUC}, Tensor};
/// let y = Tensor::vector(&[0.0f64, 0.0, 1.0, 1.0]);
/// let p = Tensor::vector(&[0.1f64, 0.4, 0.35, 0.8]);
/// let mut roc = AUC::new();
/// roc.update_state(&y, &p, None)?;
/// assert!((roc.result() - 0.75).abs() < 1e-12);
/// let mut pr = AUC::new().curve(AucCurve::PR);
/// pr.update_state(&y, &p, None)?;
/// assert!(pr.result() > 0.5);
///
/// // two labels, one curve each: areas 0.75 and 1, weighted 1 : 3
/// let y = Tensor::from_vec(vec![0.0f64, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0], &[4, 2])?;
/// let p = Tensor::from_vec(vec![0.1f64, 0.2, 0.4, 0.9, 0.35, 0.3, 0.8, 0.7], &[4, 2])?;
/// let mut auc = AUC::new().multi_label(true).num_labels(2)?.label_weights(&[1.0, 3.0])?;
/// auc.update_state(&y, &p, None)?;
/// assert!((auc.result() - (0.75 + 3.0) / 4.0).abs() < 1e-12);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct AUC {
    curve: AucCurve,
    summation: AucSummation,
    from_logits: bool,
    multi_label: bool,
    num_labels: Option<usize>,
    label_weights: Option<Vec<f64>>,
    grid: Grid,
    /// One set of counts, or one per label (none before the first update
    /// when the number of labels is not given).
    counts: Vec<Counts>,
}

impl Default for AUC {
    /// ROC, 200 thresholds, interpolation.
    fn default() -> Self {
        let mut grid = Grid::even(200);
        grid.t[0] = -EPSILON;
        grid.t[199] = 1.0 + EPSILON;
        grid.epsilon = true;
        AUC {
            curve: AucCurve::ROC,
            summation: AucSummation::Interpolation,
            from_logits: false,
            multi_label: false,
            num_labels: None,
            label_weights: None,
            counts: vec![Counts::zeros(200)],
            grid,
        }
    }
}

impl AUC {
    /// ROC, 200 thresholds, interpolation.
    pub fn new() -> Self {
        Self::default()
    }

    /// The curve (default ROC).
    pub fn curve(mut self, curve: AucCurve) -> Self {
        self.curve = curve;
        self
    }

    /// The summation (default interpolation).
    pub fn summation_method(mut self, summation: AucSummation) -> Self {
        self.summation = summation;
        self
    }

    /// Whether predictions are logits (their sigmoids are counted).
    pub fn from_logits(mut self, yes: bool) -> Self {
        self.from_logits = yes;
        self
    }

    /// `n` thresholds, evenly spread (an error if `n < 2`).
    pub fn num_thresholds(mut self, n: usize) -> Result<Self> {
        if n < 2 {
            return Err(Error::invalid(
                "AUC",
                format!("num_thresholds must be at least 2, got {n}"),
            ));
        }
        let mut grid = Grid::even(n);
        grid.t[0] = -EPSILON;
        grid.t[n - 1] = 1.0 + EPSILON;
        grid.epsilon = true;
        self.grid = grid;
        self.fresh_counts();
        Ok(self)
    }

    /// The thresholds between the two ends, in `[0, 1]` (sorted here).
    pub fn thresholds(mut self, thresholds: &[f64]) -> Result<Self> {
        if let Some(bad) = thresholds.iter().find(|t| !(0.0..=1.0).contains(*t)) {
            return Err(Error::invalid(
                "AUC",
                format!("thresholds must lie in [0, 1], got {bad} in {thresholds:?}"),
            ));
        }
        let mut inner = thresholds.to_vec();
        inner.sort_by(f64::total_cmp);
        let with = |lo: f64, hi: f64| [&[lo][..], &inner, &[hi]].concat();
        self.grid = Grid {
            even: evenly_spread(&with(0.0, 1.0)),
            t: with(-EPSILON, 1.0 + EPSILON),
            epsilon: true,
        };
        self.fresh_counts();
        Ok(self)
    }

    /// Whether each label (column of `[batch, labels]` predictions) has
    /// its own curve, the result their mean area (default false, one
    /// curve). Turning it off forgets [`num_labels`](AUC::num_labels).
    pub fn multi_label(mut self, yes: bool) -> Self {
        self.multi_label = yes;
        if !yes {
            self.num_labels = None;
        }
        self.fresh_counts();
        self
    }

    /// (Multi-label only, an error otherwise) the number of labels, at
    /// least 1, that every update's predictions must have (without it, the
    /// first update's).
    pub fn num_labels(mut self, n: usize) -> Result<Self> {
        if !self.multi_label {
            return Err(Error::invalid(
                "AUC",
                format!("num_labels ({n}) is for multi_label only: set multi_label(true) first"),
            ));
        }
        if n == 0 {
            return Err(Error::invalid("AUC", "num_labels must be at least 1, got 0"));
        }
        if let Some(w) = self.label_weights.as_ref().filter(|w| w.len() != n) {
            return Err(Error::invalid(
                "AUC",
                format!("{} label_weights for num_labels {n}: one per label needed", w.len()),
            ));
        }
        self.num_labels = Some(n);
        self.fresh_counts();
        Ok(self)
    }

    /// One weight per label, finite and not negative: with one curve, the
    /// weight of each element of the predictions' last axis in the counts
    /// (the predictions' shape must then end with as many labels); with
    /// [`multi_label`](AUC::multi_label), the weights of the labels' areas
    /// in their mean (an area-weighted mean of 0 when they sum to 0).
    pub fn label_weights(mut self, weights: &[f64]) -> Result<Self> {
        if weights.is_empty() {
            return Err(Error::invalid("AUC", "label_weights must not be empty"));
        }
        if let Some(bad) = weights.iter().find(|w| !(w.is_finite() && **w >= 0.0)) {
            return Err(Error::invalid(
                "AUC",
                format!("label_weights must be finite and not negative, got {bad} in {weights:?}"),
            ));
        }
        if let Some(n) = self.labels().filter(|&n| n != weights.len()) {
            return Err(Error::invalid(
                "AUC",
                format!("{} label_weights for {n} labels: one per label needed", weights.len()),
            ));
        }
        self.label_weights = Some(weights.to_vec());
        Ok(self)
    }

    /// The number of labels with a curve of their own, once known.
    fn labels(&self) -> Option<usize> {
        (self.multi_label && !self.counts.is_empty()).then_some(self.counts.len())
    }

    fn fresh_counts(&mut self) {
        let n = self.grid.len();
        let curves = match (self.multi_label, self.num_labels) {
            (false, _) => 1,
            (true, labels) => labels.unwrap_or(0),
        };
        self.counts = vec![Counts::zeros(n); curves];
    }

    /// The area so far (0 before any update): with
    /// [`multi_label`](AUC::multi_label), the (weighted) mean of the
    /// labels' areas.
    pub fn result(&self) -> f64 {
        let areas: Vec<f64> = self.counts.iter().map(|c| self.area(c)).collect();
        if !self.multi_label {
            return areas.first().copied().unwrap_or(0.0);
        }
        if areas.is_empty() {
            return 0.0;
        }
        match &self.label_weights {
            None => areas.iter().sum::<f64>() / areas.len() as f64,
            Some(w) => divide_no_nan(areas.iter().zip(w).map(|(a, w)| a * w).sum(), w.iter().sum()),
        }
    }

    /// The area under one curve.
    fn area(&self, c: &Counts) -> f64 {
        let n = self.grid.len();
        if self.curve == AucCurve::PR && self.summation == AucSummation::Interpolation {
            return (0..n - 1).map(|i| interpolated_pr(c, i)).sum();
        }
        let recall = c.recall();
        let (x, y) = match self.curve {
            AucCurve::ROC => {
                let fpr =
                    c.fp.iter()
                        .zip(&c.tn)
                        .map(|(&fp, &tn)| divide_no_nan(fp, fp + tn))
                        .collect();
                (fpr, recall)
            }
            AucCurve::PR => (recall, c.precision()),
        };
        (0..n - 1)
            .map(|i| {
                let h = match self.summation {
                    AucSummation::Interpolation => (y[i] + y[i + 1]) / 2.0,
                    AucSummation::Minoring => y[i].min(y[i + 1]),
                    AucSummation::Majoring => y[i].max(y[i + 1]),
                };
                (x[i] - x[i + 1]) * h
            })
            .sum()
    }
}

/// The PR area between thresholds `i` and `i + 1`, precision interpolated
/// between the counts (Davis & Goadrich, 2006), as Keras computes it.
fn interpolated_pr(c: &Counts, i: usize) -> f64 {
    let (tp0, tp1) = (c.tp[i], c.tp[i + 1]);
    let (p0, p1) = (tp0 + c.fp[i], tp1 + c.fp[i + 1]);
    let dtp = tp0 - tp1;
    let slope = divide_no_nan(dtp, (p0 - p1).max(0.0));
    let intercept = tp1 - slope * p1;
    let ratio = if p0 > 0.0 && p1 > 0.0 {
        divide_no_nan(p0, p1.max(0.0))
    } else {
        1.0
    };
    divide_no_nan(slope * (dtp + intercept * ratio.ln()), (tp1 + c.fn_[i + 1]).max(0.0))
}

impl Metric for AUC {
    fn name(&self) -> &str {
        "auc"
    }

    fn update_state(&mut self, y_true: &Tensor, y_pred: &Tensor, sample_weight: Option<&Tensor>) -> Result<()> {
        const OP: &str = "AUC";
        if self.multi_label {
            let fits = y_pred.rank() == 2 && self.labels().is_none_or(|n| y_pred.shape()[1] == n);
            if !fits {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "multi_label needs y_pred of shape [batch, {}], got {:?}",
                        self.labels().map_or("labels".to_string(), |n| n.to_string()),
                        y_pred.shape()
                    ),
                ));
            }
            let n = y_pred.shape()[1];
            if let Some(w) = self.label_weights.as_ref().filter(|w| w.len() != n) {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "{} label_weights for y_pred of shape {:?} ({n} labels): one per label needed",
                        w.len(),
                        y_pred.shape()
                    ),
                ));
            }
        }
        let sel = Select {
            sigmoid: self.from_logits,
            ..Select::default()
        };
        let labels = Labels {
            apart: self.multi_label,
            weights: self.label_weights.as_deref().filter(|_| !self.multi_label),
        };
        let c = count_labels(OP, &self.grid, sel, labels, y_true, y_pred, sample_weight)?;
        if self.counts.is_empty() {
            self.counts = vec![Counts::zeros(self.grid.len()); c.len()];
        }
        self.counts.iter_mut().zip(&c).for_each(|(a, c)| a.add(c));
        Ok(())
    }

    fn result(&self) -> Tensor {
        Tensor::scalar(AUC::result(self))
    }

    fn reset_state(&mut self) {
        self.counts.iter_mut().for_each(Counts::reset);
    }
}

/// The best of one rate among the thresholds where another reaches a
/// target.
macro_rules! rate_at {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $target:literal, $constrained:ident, $dependent:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $ty {
            target: f64,
            class_id: Option<usize>,
            grid: Grid,
            counts: Counts,
        }

        impl $ty {
            #[doc = concat!("With the target ", $target, " in `[0, 1]` and 200 thresholds.")]
            pub fn new(target: f64) -> Result<Self> {
                if !(0.0..=1.0).contains(&target) {
                    return Err(Error::invalid(
                        stringify!($ty),
                        format!(concat!($target, " must lie in [0, 1], got {}"), target),
                    ));
                }
                Ok($ty {
                    target,
                    class_id: None,
                    grid: Grid::even(200),
                    counts: Counts::zeros(200),
                })
            }

            /// `n` thresholds evenly spread over `[0, 1]` (one: 0.5); an
            /// error if 0.
            pub fn num_thresholds(mut self, n: usize) -> Result<Self> {
                self.grid = match n {
                    0 => {
                        return Err(Error::invalid(stringify!($ty), "num_thresholds must be at least 1, got 0"));
                    }
                    1 => Grid::one(0.5),
                    n => Grid::even(n),
                };
                self.counts = Counts::zeros(n);
                Ok(self)
            }

            /// Counts only class `class_id` of `[batch, classes]` inputs.
            pub fn class_id(mut self, class_id: usize) -> Self {
                self.class_id = Some(class_id);
                self
            }

            /// The value so far (0 before any update, or when no
            /// threshold reaches the target).
            pub fn result(&self) -> f64 {
                let (c, d) = (self.counts.$constrained(), self.counts.$dependent());
                c.iter().zip(&d).filter(|(c, _)| **c >= self.target).fold(0.0, |m, (_, &d)| m.max(d))
            }
        }

        impl Metric for $ty {
            fn name(&self) -> &str {
                $name
            }

            fn update_state(&mut self, y_true: &Tensor, y_pred: &Tensor, sample_weight: Option<&Tensor>) -> Result<()> {
                let sel = Select {
                    class_id: self.class_id,
                    ..Select::default()
                };
                let c = count(stringify!($ty), &self.grid, sel, y_true, y_pred, sample_weight)?;
                self.counts.add(&c);
                Ok(())
            }

            fn result(&self) -> Tensor {
                Tensor::scalar(<$ty>::result(self))
            }

            fn reset_state(&mut self) {
                self.counts.reset();
            }
        }
    };
}

rate_at!(
    /// The best precision at the thresholds where recall is at least the
    /// target (Keras's `PrecisionAtRecall`).
    ///
    /// ```
    /// use gradtape::{nn::metrics::{Metric, PrecisionAtRecall}, Tensor};
    /// let mut m = PrecisionAtRecall::new(0.5)?;
    /// m.update_state(&Tensor::vector(&[0.0f64, 0.0, 1.0, 1.0]), &Tensor::vector(&[0.1f64, 0.4, 0.35, 0.8]), None)?;
    /// assert_eq!(m.result(), 1.0); // above 0.4: recall 0.5, precision 1
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    PrecisionAtRecall,
    "precision_at_recall",
    "recall",
    recall,
    precision
);
rate_at!(
    /// The best recall at the thresholds where precision is at least the
    /// target (Keras's `RecallAtPrecision`).
    RecallAtPrecision,
    "recall_at_precision",
    "precision",
    precision,
    recall
);
rate_at!(
    /// The best sensitivity (recall) at the thresholds where specificity
    /// is at least the target.
    SensitivityAtSpecificity,
    "sensitivity_at_specificity",
    "specificity",
    specificity,
    recall
);
rate_at!(
    /// The best specificity at the thresholds where sensitivity (recall)
    /// is at least the target.
    SpecificityAtSensitivity,
    "specificity_at_sensitivity",
    "sensitivity",
    recall,
    specificity
);
