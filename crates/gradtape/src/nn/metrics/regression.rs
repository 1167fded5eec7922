//! Regression metrics: the means of Keras's regression losses per sample
//! (squared, absolute, percentage, squared-logarithmic and log-cosh
//! errors, the cosine similarity), the root mean squared error, and R².

use super::array::{pair, Arr};
use super::{mean_metric, Mean, Metric};
use crate::error::{Error, Result};
use crate::nn::losses::EPSILON;
use crate::tensor::Tensor;

/// `f(y_true, y_pred)` elementwise, then the mean over the last axis (the
/// inputs of rank at least 1).
fn last_axis_mean(op: &'static str, y_true: &Tensor, y_pred: &Tensor, f: impl Fn(f64, f64) -> f64) -> Result<Arr> {
    let (t, p) = pair(op, y_true, y_pred)?;
    if p.rank() == 0 {
        return Err(Error::invalid(
            op,
            "needs y_true and y_pred of rank at least 1, got scalars",
        ));
    }
    let e = Arr {
        v: t.v.iter().zip(&p.v).map(|(&t, &p)| f(t, p)).collect(),
        s: p.s,
    };
    Ok(e.reduce_from(e.rank() - 1, true))
}

macro_rules! error_metric {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $f:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq)]
        pub struct $ty {
            mean: Mean,
        }

        impl $ty {
            /// A new metric.
            pub fn new() -> Self {
                Self::default()
            }
        }

        mean_metric!($ty, $name, |_: &$ty, op, t: &Tensor, p: &Tensor| last_axis_mean(op, t, p, $f));
    };
}

error_metric!(
    /// The mean of `mean((y_pred − y_true)²)` over the last axis, Keras's
    /// `MeanSquaredError` metric.
    ///
    /// ```
    /// use gradtape::{nn::metrics::{Metric, MeanSquaredError}, Tensor};
    /// let mut m = MeanSquaredError::new();
    /// let y = Tensor::from_vec(vec![0.0f64, 1.0, 0.0, 0.0], &[2, 2])?;
    /// let p = Tensor::from_vec(vec![1.0f64, 1.0, 1.0, 0.0], &[2, 2])?;
    /// m.update_state(&y, &p, None)?;
    /// assert_eq!(m.result(), 0.5);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    MeanSquaredError,
    "mean_squared_error",
    |t: f64, p: f64| (t - p) * (t - p)
);
error_metric!(
    /// The mean of `mean(|y_pred − y_true|)` over the last axis.
    MeanAbsoluteError,
    "mean_absolute_error",
    |t: f64, p: f64| (t - p).abs()
);
error_metric!(
    /// The mean of `100 · mean(|y_true − y_pred| / max(|y_true|, ε))` over
    /// the last axis, ε = 1e-7.
    MeanAbsolutePercentageError,
    "mean_absolute_percentage_error",
    |t: f64, p: f64| 100.0 * ((t - p) / t.abs().max(EPSILON)).abs()
);
error_metric!(
    /// The mean of `mean((log(1 + max(y_pred, ε)) − log(1 + max(y_true,
    /// ε)))²)` over the last axis.
    MeanSquaredLogarithmicError,
    "mean_squared_logarithmic_error",
    |t: f64, p: f64| {
        let d = (p.max(EPSILON) + 1.0).ln() - (t.max(EPSILON) + 1.0).ln();
        d * d
    }
);
error_metric!(
    /// The mean of `mean(log(cosh(y_pred − y_true)))` over the last axis
    /// (computed without overflow; Keras's subtracts float32's log 2, 2e-9
    /// off, this one f64's).
    LogCoshError,
    "logcosh",
    |t: f64, p: f64| {
        let x = p - t;
        let z = -2.0 * x;
        let softplus = if z > 0.0 { z + (-z).exp().ln_1p() } else { z.exp().ln_1p() };
        x + softplus - std::f64::consts::LN_2
    }
);

/// The root of the mean squared error, the squares averaged per element
/// (so weights may be per element too).
///
/// ```
/// use gradtape::{nn::metrics::{Metric, RootMeanSquaredError}, Tensor};
/// let mut m = RootMeanSquaredError::new();
/// m.update_state(&Tensor::vector(&[0.0f64, 0.0]), &Tensor::vector(&[3.0f64, 4.0]), None)?;
/// assert_eq!(m.result(), 12.5f64.sqrt());
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RootMeanSquaredError {
    mean: Mean,
}

impl RootMeanSquaredError {
    /// A new metric.
    pub fn new() -> Self {
        Self::default()
    }
}

mean_metric!(
    RootMeanSquaredError,
    "root_mean_squared_error",
    |_: &RootMeanSquaredError, op, y_true: &Tensor, y_pred: &Tensor| {
        let (t, p) = pair(op, y_true, y_pred)?;
        Ok::<_, Error>(Arr {
            v: t.v.iter().zip(&p.v).map(|(t, p)| (p - t) * (p - t)).collect(),
            s: p.s,
        })
    },
    f64::sqrt
);

/// The mean cosine similarity of `y_true` and `y_pred` along `axis`
/// (each L2-normalised, a zero vector giving 0): 1 when they point the
/// same way.
///
/// ```
/// use gradtape::{nn::metrics::{CosineSimilarity, Metric}, Tensor};
/// let mut m = CosineSimilarity::default();
/// let y = Tensor::from_vec(vec![1.0f64, 0.0, 0.0, 1.0], &[2, 2])?;
/// let p = Tensor::from_vec(vec![2.0f64, 0.0, 0.0, -4.0], &[2, 2])?;
/// m.update_state(&y, &p, None)?;
/// assert_eq!(m.result(), 0.0); // (1 + −1) / 2
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CosineSimilarity {
    axis: isize,
    mean: Mean,
}

impl Default for CosineSimilarity {
    /// Along the last axis (Keras's default).
    fn default() -> Self {
        CosineSimilarity::new(-1)
    }
}

impl CosineSimilarity {
    /// The similarity along `axis` (negative: from the end).
    pub fn new(axis: isize) -> Self {
        CosineSimilarity {
            axis,
            mean: Mean::default(),
        }
    }
}

mean_metric!(
    CosineSimilarity,
    "cosine_similarity",
    |m: &CosineSimilarity, op, y_true: &Tensor, y_pred: &Tensor| {
        let (t, p) = pair(op, y_true, y_pred)?;
        let r = p.rank() as isize;
        let axis = if m.axis < 0 { m.axis + r } else { m.axis };
        if !(0..r).contains(&axis) {
            return Err(Error::BadAxis {
                op,
                axis: m.axis,
                shape: y_pred.shape().to_vec(),
                repeated: false,
            });
        }
        let a = axis as usize;
        let (n, inner) = (p.s[a], p.s[a + 1..].iter().product::<usize>());
        let outer = p.v.len() / (n * inner);
        // x · min(1/‖x‖, 1/ε), as Keras's normalize
        let inv_norm = |x: &[f64], o: usize, i: usize| {
            let ss: f64 = (0..n).map(|k| x[(o * n + k) * inner + i].powi(2)).sum();
            (1.0 / ss.sqrt()).min(1.0 / EPSILON)
        };
        let mut v = Vec::with_capacity(outer * inner);
        for o in 0..outer {
            for i in 0..inner {
                let (nt, np) = (inv_norm(&t.v, o, i), inv_norm(&p.v, o, i));
                let at = |x: &[f64], k: usize| x[(o * n + k) * inner + i];
                v.push((0..n).map(|k| at(&t.v, k) * nt * (at(&p.v, k) * np)).sum());
            }
        }
        let mut s = p.s;
        s.remove(a);
        Ok(Arr { v, s })
    }
);

/// How [`R2Score`] combines its outputs' scores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum R2Aggregation {
    /// Their mean (Keras's default `"uniform_average"`).
    #[default]
    UniformAverage,
    /// Their mean weighted by each output's variance
    /// (`"variance_weighted_average"`).
    VarianceWeightedAverage,
    /// One score per output (Keras's `None`).
    None,
}

/// The coefficient of determination R² of `[batch, outputs]` predictions,
/// per output, then aggregated (Keras 3's `R2Score`); with
/// `num_regressors` p > 0 the adjusted score `1 − (1 − R²)(n − 1)/(n − p −
/// 1)`, n counting every element seen (as Keras counts), unless p ≥ n − 1.
/// An output whose labels are constant scores 0.
///
/// ```
/// use gradtape::{nn::metrics::{Metric, R2Score}, Tensor};
/// let mut r2 = R2Score::default();
/// let y = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[4, 1])?;
/// r2.update_state(&y, &Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 5.0], &[4, 1])?, None)?;
/// assert_eq!(r2.values(), vec![0.8]); // 1 − 1 / 5
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct R2Score {
    aggregation: R2Aggregation,
    num_regressors: usize,
    /// Per output: Σ w·y, Σ w·y², Σ w·(y − ŷ)², Σ w (empty before the
    /// first update fixes the number of outputs).
    sum: Vec<f64>,
    squared_sum: Vec<f64>,
    residual: Vec<f64>,
    count: Vec<f64>,
    num_samples: f64,
}

impl R2Score {
    /// R² aggregated by `aggregation`, adjusted for `num_regressors`
    /// independent variables (0: not adjusted).
    pub fn new(aggregation: R2Aggregation, num_regressors: usize) -> Self {
        R2Score {
            aggregation,
            num_regressors,
            ..R2Score::default()
        }
    }

    fn scores(&self) -> Vec<f64> {
        let raw = (0..self.sum.len()).map(|c| {
            let mean = self.sum[c] / self.count[c];
            let total = self.squared_sum[c] - self.sum[c] * mean;
            let r = 1.0 - self.residual[c] / total;
            (if r.is_infinite() { 0.0 } else { r }, total)
        });
        let raw: Vec<(f64, f64)> = raw.collect();
        let mut r2 = match self.aggregation {
            R2Aggregation::UniformAverage => vec![raw.iter().map(|r| r.0).sum::<f64>() / raw.len() as f64],
            R2Aggregation::VarianceWeightedAverage => {
                let w: f64 = raw.iter().map(|r| r.0 * r.1).sum();
                vec![w / raw.iter().map(|r| r.1).sum::<f64>()]
            }
            R2Aggregation::None => raw.iter().map(|r| r.0).collect(),
        };
        let (n, p) = (self.num_samples, self.num_regressors as f64);
        if p != 0.0 && p < n - 1.0 {
            for r in &mut r2 {
                *r = 1.0 - (1.0 - *r) * (n - 1.0) / (n - p - 1.0);
            }
        }
        r2
    }
}

impl Metric for R2Score {
    fn name(&self) -> &str {
        "r2_score"
    }

    fn update_state(&mut self, y_true: &Tensor, y_pred: &Tensor, sample_weight: Option<&Tensor>) -> Result<()> {
        const OP: &str = "R2Score";
        let (t, p) = pair(OP, y_true, y_pred)?;
        let outputs = self.sum.len();
        if p.rank() != 2 || (outputs != 0 && p.s[1] != outputs) {
            return Err(Error::invalid(
                OP,
                format!(
                    "expects y_true and y_pred of shape [batch, outputs]{}, got {:?} and {:?}",
                    if outputs != 0 {
                        format!(" with {outputs} outputs")
                    } else {
                        String::new()
                    },
                    y_true.shape(),
                    y_pred.shape()
                ),
            ));
        }
        let w = match sample_weight {
            None => vec![1.0; p.v.len()],
            Some(w) => {
                let mut w = Arr::read(OP, w)?;
                let given = w.s.clone();
                if w.rank() == 1 {
                    w = w.expanded();
                }
                w.broadcast_to(OP, "sample_weight", &given, &p.s)?
            }
        };
        let c = p.s[1];
        if outputs == 0 {
            for acc in [
                &mut self.sum,
                &mut self.squared_sum,
                &mut self.residual,
                &mut self.count,
            ] {
                *acc = vec![0.0; c];
            }
        }
        for (i, ((&y, &yh), &w)) in t.v.iter().zip(&p.v).zip(&w).enumerate() {
            let k = i % c;
            self.sum[k] += y * w;
            self.squared_sum[k] += y * (y * w);
            self.residual[k] += (y - yh) * (y - yh) * w;
            self.count[k] += w;
        }
        self.num_samples += p.v.len() as f64;
        Ok(())
    }

    /// The score (NaN before any update, and after a reset).
    fn result(&self) -> Tensor {
        let r = self.scores();
        match self.aggregation {
            R2Aggregation::None => Tensor::vector(&r),
            _ => Tensor::scalar(r[0]),
        }
    }

    fn reset_state(&mut self) {
        for acc in [
            &mut self.sum,
            &mut self.squared_sum,
            &mut self.residual,
            &mut self.count,
        ] {
            acc.iter_mut().for_each(|x| *x = 0.0);
        }
        self.num_samples = 0.0;
    }
}
