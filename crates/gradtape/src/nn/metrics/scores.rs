//! F-scores ([`FBetaScore`], [`F1Score`]).

use super::array::{nonempty, Arr};
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
