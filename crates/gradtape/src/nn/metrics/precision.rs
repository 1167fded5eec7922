//! The confusion counts ([`TruePositives`] and the three others),
//! [`Precision`] and [`Recall`], at one or more thresholds (see
//! `confusion.rs` for how predictions are counted).

use super::confusion::{count, per_threshold, Counts, Grid, Select, NEG_INF};
use super::Metric;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A count of one cell of the confusion matrix at thresholds.
macro_rules! condition_count {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $field:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $ty {
            grid: Grid,
            counts: Counts,
        }

        impl Default for $ty {
            /// At threshold 0.5.
            fn default() -> Self {
                Self::from_grid(Grid::one(0.5))
            }
        }

        impl $ty {
            /// At threshold 0.5.
            pub fn new() -> Self {
                Self::default()
            }

            /// At each of `thresholds` (in `[0, 1]`): one count per
            /// threshold (a scalar result for one threshold).
            pub fn with_thresholds(thresholds: &[f64]) -> Result<Self> {
                Ok(Self::from_grid(Grid::user(stringify!($ty), thresholds)?))
            }

            fn from_grid(grid: Grid) -> Self {
                let counts = Counts::zeros(grid.len());
                $ty { grid, counts }
            }
        }

        impl Metric for $ty {
            fn name(&self) -> &str {
                $name
            }

            fn update_state(&mut self, y_true: &Tensor, y_pred: &Tensor, sample_weight: Option<&Tensor>) -> Result<()> {
                let c = count(stringify!($ty), &self.grid, Select::default(), y_true, y_pred, sample_weight)?;
                self.counts.add(&c);
                Ok(())
            }

            fn result(&self) -> Tensor {
                per_threshold(self.counts.$field.clone())
            }

            fn reset_state(&mut self) {
                self.counts.reset();
            }
        }
    };
}

condition_count!(
    /// The weighted number of positive labels predicted positive (Keras's
    /// `TruePositives`).
    ///
    /// ```
    /// use gradtape::{nn::metrics::{Metric, TruePositives}, Tensor};
    /// let mut tp = TruePositives::with_thresholds(&[0.3, 0.7])?;
    /// tp.update_state(&Tensor::vector(&[1.0f64, 1.0, 0.0]), &Tensor::vector(&[0.5f64, 0.9, 0.8]), None)?;
    /// assert_eq!(tp.values(), vec![2.0, 1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    TruePositives,
    "true_positives",
    tp
);
condition_count!(
    /// The weighted number of negative labels predicted positive.
    FalsePositives,
    "false_positives",
    fp
);
condition_count!(
    /// The weighted number of negative labels predicted negative.
    TrueNegatives,
    "true_negatives",
    tn
);
condition_count!(
    /// The weighted number of positive labels predicted negative.
    FalseNegatives,
    "false_negatives",
    fn_
);

/// Precision or recall, with Keras's options.
macro_rules! rate_metric {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $rate:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $ty {
            thresholds: Option<Vec<f64>>,
            sel: Select,
            grid: Grid,
            counts: Counts,
        }

        impl Default for $ty {
            /// At threshold 0.5, every class.
            fn default() -> Self {
                $ty {
                    thresholds: None,
                    sel: Select::default(),
                    grid: Grid::one(0.5),
                    counts: Counts::zeros(1),
                }
            }
        }

        impl $ty {
            /// At threshold 0.5, every class.
            pub fn new() -> Self {
                Self::default()
            }

            /// At each of `thresholds` (in `[0, 1]`): one value per
            /// threshold (a scalar result for one threshold).
            pub fn with_thresholds(thresholds: &[f64]) -> Result<Self> {
                Grid::user(stringify!($ty), thresholds)?;
                Ok(Self {
                    thresholds: Some(thresholds.to_vec()),
                    ..Self::default()
                }
                .rebuilt())
            }

            /// Counts only the `k` largest predictions of each row (last
            /// axis) as positive, the others as negative; without
            /// thresholds, every one of the `k` is positive. An error if
            /// `k` is 0.
            pub fn top_k(mut self, k: usize) -> Result<Self> {
                if k == 0 {
                    return Err(Error::invalid(stringify!($ty), "top_k must be at least 1, got 0"));
                }
                self.sel.top_k = Some(k);
                Ok(self.rebuilt())
            }

            /// Counts only class `class_id` (the last axis's index) of
            /// `[batch, classes]` labels and predictions.
            pub fn class_id(mut self, class_id: usize) -> Self {
                self.sel.class_id = Some(class_id);
                self.rebuilt()
            }

            fn rebuilt(mut self) -> Self {
                self.grid = match &self.thresholds {
                    Some(t) => Grid::user(stringify!($ty), t).expect("checked"),
                    None => Grid::one(if self.sel.top_k.is_some() { NEG_INF } else { 0.5 }),
                };
                self.counts = Counts::zeros(self.grid.len());
                self
            }
        }

        impl Metric for $ty {
            fn name(&self) -> &str {
                $name
            }

            fn update_state(&mut self, y_true: &Tensor, y_pred: &Tensor, sample_weight: Option<&Tensor>) -> Result<()> {
                let c = count(stringify!($ty), &self.grid, self.sel, y_true, y_pred, sample_weight)?;
                self.counts.add(&c);
                Ok(())
            }

            fn result(&self) -> Tensor {
                per_threshold(self.counts.$rate())
            }

            fn reset_state(&mut self) {
                self.counts.reset();
            }
        }
    };
}

rate_metric!(
    /// Precision, `tp / (tp + fp)` (0 when nothing is predicted positive),
    /// Keras's `Precision` with its `thresholds`, `top_k` and `class_id`.
    ///
    /// ```
    /// use gradtape::{nn::metrics::{Metric, Precision}, Tensor};
    /// let y = Tensor::from_vec(vec![0.0f64, 1.0, 1.0, 0.0, 1.0, 0.0], &[2, 3])?;
    /// let p = Tensor::from_vec(vec![0.6f64, 0.7, 0.1, 0.2, 0.9, 0.8], &[2, 3])?;
    /// let mut top1 = Precision::new().top_k(1)?;
    /// top1.update_state(&y, &p, None)?;
    /// assert_eq!(top1.values(), vec![1.0]);            // 0.7 and 0.9 are right
    /// let mut class0 = Precision::with_thresholds(&[0.5, 0.65])?.class_id(0);
    /// class0.update_state(&y, &p, None)?;
    /// assert_eq!(class0.values(), vec![0.0, 0.0]);     // 0.6 is wrong
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    Precision,
    "precision",
    precision
);
rate_metric!(
    /// Recall, `tp / (tp + fn)` (0 without positive labels), Keras's
    /// `Recall` with its `thresholds`, `top_k` and `class_id` (as
    /// [`Precision`]'s).
    ///
    /// ```
    /// use gradtape::{nn::metrics::{Metric, Recall}, Tensor};
    /// let mut r = Recall::new();
    /// r.update_state(&Tensor::vector(&[1i64, 1, 0]), &Tensor::vector(&[0.9f32, 0.2, 0.7]), None)?;
    /// assert_eq!(r.values(), vec![0.5]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    Recall,
    "recall",
    recall
);
