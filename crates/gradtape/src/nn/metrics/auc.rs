//! The area under the ROC or precision-recall curve ([`AUC`]), and the
//! best value of one rate where another reaches a target
//! ([`PrecisionAtRecall`] and its kin), from the confusion counts at
//! evenly spread thresholds (`confusion.rs`).

use super::array::divide_no_nan;
use super::confusion::{count, evenly_spread, Counts, Grid, Select};
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
/// moved to −1e-7 and 1 + 1e-7), Keras's `AUC` (one label: every element
/// of `y_pred` is a prediction).
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
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct AUC {
    curve: AucCurve,
    summation: AucSummation,
    from_logits: bool,
    grid: Grid,
    counts: Counts,
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
            counts: Counts::zeros(200),
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
        self.counts = Counts::zeros(n);
        self.grid = grid;
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
        self.counts = Counts::zeros(self.grid.len());
        Ok(self)
    }

    /// The area so far (0 before any update).
    pub fn result(&self) -> f64 {
        let c = &self.counts;
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
        let sel = Select {
            sigmoid: self.from_logits,
            ..Select::default()
        };
        let c = count("AUC", &self.grid, sel, y_true, y_pred, sample_weight)?;
        self.counts.add(&c);
        Ok(())
    }

    fn result(&self) -> Tensor {
        Tensor::scalar(AUC::result(self))
    }

    fn reset_state(&mut self) {
        self.counts.reset();
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
