//! The reductions: [`Mean`] and [`Sum`] of values, with Keras's
//! per-sample reduction of values and sample weights (also used by every
//! metric that is the mean of per-sample values).

use super::array::{same_rank, Arr};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Keras's `reduce_to_samplewise_values`: the values (and weights) reduced
/// to one per sample. With weights (rank-adjusted against the values), the
/// values' axes past the weights' rank are reduced first, the weights
/// broadcast to the values and multiply them, and weights of rank above 1
/// are reduced to one per sample; then the values' axes past the first.
/// `mean`: reduce by the mean (else the sum).
pub(super) fn samplewise(op: &'static str, values: Arr, weight: Option<Arr>, mean: bool) -> Result<(Arr, Option<Arr>)> {
    let Some(w) = weight else {
        return Ok((values.reduce_from(1, mean), None));
    };
    let given = w.s.clone();
    let (values, w) = same_rank(values, w, true);
    let wr = w.rank();
    let values = if values.rank() > wr {
        values.reduce_from(wr, mean)
    } else {
        values
    };
    let wb = w.broadcast_to(op, "sample_weight", &given, &values.s)?;
    let weighted = Arr {
        v: values.v.iter().zip(&wb).map(|(v, w)| v * w).collect(),
        s: values.s.clone(),
    };
    let w = Arr { v: wb, s: values.s };
    let w = if wr > 1 { w.reduce_from(1, mean) } else { w };
    Ok((weighted.reduce_from(1, mean), Some(w)))
}

/// A running, weighted mean (Keras's `metrics.Mean`): the epoch's loss
/// from its batches' losses.
///
/// ```
/// use gradtape::{nn::metrics::Mean, Tensor};
/// let mut loss = Mean::default();
/// loss.update(2.0, 1.0);
/// loss.update(4.0, 3.0);                    // weighted by batch size, say
/// assert_eq!(loss.result(), 3.5);
/// let mut m = Mean::default();               // Keras's update_state
/// m.update_state(&Tensor::vector(&[1.0f64, 3.0, 5.0, 7.0]), Some(&Tensor::vector(&[1.0f64, 1.0, 0.0, 0.0])))?;
/// assert_eq!(m.result(), 2.0);
/// # Ok::<(), gradtape::Error>(())
/// ```
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

    /// Adds the values of a tensor (Keras's `Mean.update_state`): each
    /// sample (along the first axis) weighs its `sample_weight` (1 without),
    /// its value the mean of its elements; a scalar weight weighs the
    /// batch's mean once.
    pub fn update_state(&mut self, values: &Tensor, sample_weight: Option<&Tensor>) -> Result<()> {
        const OP: &str = "Mean";
        let values = read_values(OP, values)?;
        let weight = sample_weight.map(|w| Arr::read(OP, w)).transpose()?;
        self.add(OP, values, weight)
    }

    /// Adds per-sample values (the state of the metrics that are means).
    pub(super) fn add(&mut self, op: &'static str, values: Arr, weight: Option<Arr>) -> Result<()> {
        let (values, weight) = samplewise(op, values, weight, true)?;
        let count = match weight {
            Some(w) => w.v.iter().sum(),
            None => values.s.first().map_or(1.0, |&n| n as f64),
        };
        self.total += values.v.iter().sum::<f64>();
        self.weight += count;
        Ok(())
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

    /// Whether two states are bit for bit the same.
    pub(super) fn same(&self, other: &Mean) -> bool {
        self.total.to_bits() == other.total.to_bits() && self.weight.to_bits() == other.weight.to_bits()
    }
}

/// The values of a [`Mean`] or [`Sum`]: at least one.
fn read_values(op: &'static str, values: &Tensor) -> Result<Arr> {
    if values.numel() == 0 {
        return Err(Error::invalid(
            op,
            format!("no values to add (shape {:?})", values.shape()),
        ));
    }
    Arr::read(op, values)
}

/// A running, weighted sum (Keras's `metrics.Sum`): each value times its
/// sample weight (broadcast as [`Mean::update_state`]'s).
///
/// ```
/// use gradtape::{nn::metrics::Sum, Tensor};
/// let mut s = Sum::default();
/// s.update_state(&Tensor::vector(&[1.0f64, 3.0, 5.0, 7.0]), None)?;
/// s.update_state(&Tensor::vector(&[1.0f64, 3.0]), Some(&Tensor::vector(&[2.0f64, 0.0])))?;
/// assert_eq!(s.result(), 18.0);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sum {
    total: f64,
}

impl Sum {
    /// Adds the values, times their weights.
    pub fn update_state(&mut self, values: &Tensor, sample_weight: Option<&Tensor>) -> Result<()> {
        const OP: &str = "Sum";
        let values = read_values(OP, values)?;
        let weight = sample_weight.map(|w| Arr::read(OP, w)).transpose()?;
        let (values, _) = samplewise(OP, values, weight, false)?;
        self.total += values.v.iter().sum::<f64>();
        Ok(())
    }

    /// The sum so far.
    pub fn result(&self) -> f64 {
        self.total
    }

    /// Starts again.
    pub fn reset(&mut self) {
        *self = Sum::default();
    }
}
