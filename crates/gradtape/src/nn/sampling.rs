//! Drawing tokens from logits for generation: [`categorical`]
//! (`tf.random.categorical`) and [`sample_next`] (temperature and top-k).
//!
//! Both read the logits' values and draw from a [`Rng`] on the host: they
//! are for eager generation loops, not for use inside a traced function,
//! and they are not differentiable.
//!
//! ```
//! use gradtape::nn::sampling::{categorical, sample_next};
//! use gradtape::{Rng, Tensor};
//! let mut rng = Rng::new(0);
//! let logits = Tensor::from_vec(vec![0.0f32, 5.0, 1.0, 2.0, 0.0, 9.0], &[2, 3])?;
//! assert_eq!(categorical(&logits, 4, &mut rng)?.shape(), &[2, 4]);
//! let greedy = sample_next(&logits, 1.0, Some(1), &mut rng)?;
//! assert_eq!(greedy.to_vec::<i64>()?, vec![1, 2]);
//! # Ok::<(), gradtape::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::random::Rng;
use crate::tensor::alloc::try_vec;
use crate::tensor::layout::checked_numel;
use crate::tensor::Tensor;

/// The rows of `logits` `[batch, classes]` as f64, checked.
fn rows(op: &'static str, logits: &Tensor) -> Result<(Vec<f64>, usize, usize)> {
    if logits.rank() != 2 || !logits.dtype().is_float() || logits.shape()[1] == 0 {
        return Err(Error::invalid(
            op,
            format!(
                "expected float logits [batch, classes] with classes > 0, got {} {:?}",
                logits.dtype(),
                logits.shape()
            ),
        ));
    }
    let (b, n) = (logits.shape()[0], logits.shape()[1]);
    let v = logits.try_to_vec_f64().map_err(|e| e.for_op(op))?;
    if let Some(bad) = v.iter().find(|x| x.is_nan() || **x == f64::INFINITY) {
        return Err(Error::invalid(
            op,
            format!("the logits must not be NaN or +inf, got {bad}"),
        ));
    }
    Ok((v, b, n))
}

/// One index drawn with probabilities `softmax(row / temperature)`
/// (`temperature > 0`), by inverting the cumulative distribution.
fn draw(op: &'static str, row: &[f64], temperature: f64, rng: &mut Rng) -> Result<i64> {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return Err(Error::invalid(op, "a row of logits is entirely -inf"));
    }
    // (l - max) / t <= 0: no overflow however small t is
    let w: Vec<f64> = row.iter().map(|l| ((l - max) / temperature).exp()).collect();
    let total: f64 = w.iter().sum();
    let u = rng.next_f64() * total;
    let mut acc = 0.0;
    let mut last = 0;
    for (i, &p) in w.iter().enumerate() {
        if p > 0.0 {
            acc += p;
            last = i;
            if u < acc {
                return Ok(i as i64);
            }
        }
    }
    // rounding left u at the very top: the last class with weight
    Ok(last as i64)
}

/// `num_samples` class indices per row of `logits` `[batch, classes]`
/// (unnormalised log-probabilities), drawn independently with
/// probabilities `softmax(logits)`: `[batch, num_samples]` i64, as
/// `tf.random.categorical`. `-inf` logits are never drawn; NaN, `+inf`
/// and rows entirely `-inf` are errors.
///
/// ```
/// use gradtape::{nn::sampling::categorical, Rng, Tensor};
/// let logits = Tensor::from_vec(vec![f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY], &[1, 3])?;
/// let s = categorical(&logits, 5, &mut Rng::new(1))?;
/// assert_eq!(s.to_vec::<i64>()?, vec![1; 5]);
/// assert!(categorical(&Tensor::vector(&[0.0f32, 1.0]), 1, &mut Rng::new(1)).is_err()); // rank 1
/// assert!(categorical(&logits, usize::MAX, &mut Rng::new(1)).is_err()); // more than memory
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn categorical(logits: &Tensor, num_samples: usize, rng: &mut Rng) -> Result<Tensor> {
    const OP: &str = "categorical";
    let (v, b, n) = rows(OP, logits)?;
    // the output's size is the caller's to choose: checked, and allocated
    // fallibly (an error, not an abort, for a count beyond memory)
    let mut out = try_vec(OP, checked_numel(OP, &[b, num_samples])?)?;
    for row in v.chunks(n) {
        for _ in 0..num_samples {
            out.push(draw(OP, row, 1.0, rng)?);
        }
    }
    Tensor::from_vec(out, &[b, num_samples])
}

/// The next token of each row of `logits` `[batch, vocab]`, `[batch]` i64:
/// the logits are divided by `temperature` (`> 0`; lower is greedier),
/// restricted to the `top_k` largest (`Some(k)`, `k >= 1`, clamped to the
/// vocabulary; ties with the k-th largest are kept) and sampled.
/// `top_k = Some(1)` is greedy decoding (the first maximum, as `argmax`),
/// and a temperature near 0 approaches it.
///
/// ```
/// use gradtape::{nn::sampling::sample_next, Rng, Tensor};
/// let mut rng = Rng::new(0);
/// let logits = Tensor::from_vec(vec![1.0f32, 3.0, 2.0], &[1, 3])?;
/// assert_eq!(sample_next(&logits, 1e-6, None, &mut rng)?.to_vec::<i64>()?, vec![1]);
/// // only the two largest can be drawn
/// for _ in 0..20 {
///     assert_ne!(sample_next(&logits, 5.0, Some(2), &mut rng)?.to_vec::<i64>()?, vec![0]);
/// }
/// assert!(sample_next(&logits, 0.0, None, &mut rng).is_err());
/// assert!(sample_next(&logits, 1.0, Some(0), &mut rng).is_err());
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn sample_next(logits: &Tensor, temperature: f64, top_k: Option<usize>, rng: &mut Rng) -> Result<Tensor> {
    const OP: &str = "sample_next";
    if !(temperature > 0.0 && temperature.is_finite()) {
        return Err(Error::invalid(
            OP,
            format!("temperature must be finite and > 0, got {temperature}"),
        ));
    }
    if top_k == Some(0) {
        return Err(Error::invalid(OP, "top_k must be at least 1, got 0"));
    }
    let (v, b, n) = rows(OP, logits)?;
    let mut out = Vec::with_capacity(b);
    for row in v.chunks(n) {
        let next = match top_k.map(|k| k.min(n)) {
            Some(1) => {
                // the first maximum, without drawing (a row entirely -inf
                // has none to take: the error of the other paths)
                let mut best = 0;
                for (i, &l) in row.iter().enumerate() {
                    if l > row[best] {
                        best = i;
                    }
                }
                if row[best] == f64::NEG_INFINITY {
                    return Err(Error::invalid(OP, "a row of logits is entirely -inf"));
                }
                best as i64
            }
            Some(k) if k < n => {
                let mut sorted = row.to_vec();
                sorted.sort_by(|a, b| b.total_cmp(a));
                let kth = sorted[k - 1];
                let kept: Vec<f64> = row
                    .iter()
                    .map(|&l| if l >= kth { l } else { f64::NEG_INFINITY })
                    .collect();
                draw(OP, &kept, temperature, rng)?
            }
            _ => draw(OP, row, temperature, rng)?,
        };
        out.push(next);
    }
    Tensor::from_vec(out, &[b])
}
