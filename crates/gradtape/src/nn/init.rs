//! Weight initialisers, Keras's `keras.initializers`.
//!
//! The variance-scaling family follows Keras: with `fan_in` and `fan_out`
//! computed from the shape (a matrix `[in, out]`; a convolution kernel
//! `[kh, kw, in, out]` multiplies both by `kh·kw`), `scale / n` is the
//! target variance, `n` being `fan_in` (He, LeCun) or the mean of the two
//! fans (Glorot). Uniform variants draw from `[-limit, limit)` with `limit =
//! sqrt(3 · scale / n)`; normal variants from a normal truncated at two
//! standard deviations whose standard deviation is `sqrt(scale / n) /
//! 0.8796...`, so that the truncated distribution has the target variance.
//!
//! ```
//! use gradtape::{nn::Initializer, DType, Rng};
//! let w = Initializer::GlorotUniform.init(&[300, 100], DType::F32, &mut Rng::new(0))?;
//! let limit = (6.0f32 / 400.0).sqrt();
//! assert!(w.to_vec::<f32>()?.iter().all(|v| v.abs() <= limit));
//! # Ok::<(), gradtape::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::random::Rng;
use crate::tensor::alloc::{try_collect, try_filled, try_vec};
use crate::tensor::layout::checked_numel;
use crate::tensor::{DType, Tensor};

/// The standard deviation of a standard normal truncated to `[-2, 2]`,
/// Keras's correction for truncated-normal initialisers.
const TRUNCATED_STD: f64 = 0.879_625_661_034_239_8;

/// How a weight tensor is filled.
#[derive(Clone, Debug, PartialEq)]
pub enum Initializer {
    /// All zeros.
    Zeros,
    /// All ones.
    Ones,
    /// Every element `value`.
    Constant(f64),
    /// Uniform in `[lo, hi)`.
    RandomUniform {
        /// Lower bound.
        lo: f64,
        /// Upper bound (excluded).
        hi: f64,
    },
    /// Normal.
    RandomNormal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std: f64,
    },
    /// Normal redrawn beyond two standard deviations.
    TruncatedNormal {
        /// Mean.
        mean: f64,
        /// Standard deviation before truncation.
        std: f64,
    },
    /// Glorot (Xavier) uniform: variance `1 / mean(fan_in, fan_out)`.
    GlorotUniform,
    /// Glorot (Xavier) truncated normal.
    GlorotNormal,
    /// He (Kaiming) uniform: variance `2 / fan_in`.
    HeUniform,
    /// He (Kaiming) truncated normal.
    HeNormal,
    /// LeCun uniform: variance `1 / fan_in`.
    LecunUniform,
    /// LeCun truncated normal.
    LecunNormal,
    /// A random orthogonal matrix times `gain` (the shape flattened to
    /// `[prod(shape[..-1]), shape[-1]]`; orthonormal rows or columns,
    /// whichever are fewer), as Keras's `Orthogonal`.
    Orthogonal {
        /// The multiplier.
        gain: f64,
    },
}

/// `(fan_in, fan_out)` of a weight shape, as Keras computes them (in
/// `f64`, so that no product of dimensions can overflow).
///
/// ```
/// use gradtape::nn::init::fans;
/// assert_eq!(fans(&[3, 3, 2, 8]), (18.0, 72.0));
/// assert_eq!(fans(&[1 << 40, 1 << 40, 1, 1]).0, 2f64.powi(80));
/// ```
pub fn fans(shape: &[usize]) -> (f64, f64) {
    match shape {
        [] => (1.0, 1.0),
        [n] => (*n as f64, *n as f64),
        [i, o] => (*i as f64, *o as f64),
        _ => {
            let r = shape.len();
            let receptive: f64 = shape[..r - 2].iter().map(|&d| d as f64).product();
            (shape[r - 2] as f64 * receptive, shape[r - 1] as f64 * receptive)
        }
    }
}

enum Fan {
    In,
    Avg,
}

impl Initializer {
    /// A tensor of `shape` and `dtype` (f32 or f64) filled by this
    /// initialiser, drawing from `rng` (which advances).
    pub fn init(&self, shape: &[usize], dtype: DType, rng: &mut Rng) -> Result<Tensor> {
        const OP: &str = "Initializer::init";
        super::expect_float_dtype(OP, dtype)?;
        let scaled = |scale: f64, fan: Fan, uniform: bool, rng: &mut Rng| {
            let (fi, fo) = fans(shape);
            let n = match fan {
                Fan::In => fi,
                Fan::Avg => (fi + fo) / 2.0,
            }
            .max(1.0);
            if uniform {
                let limit = (3.0 * scale / n).sqrt();
                rng.uniform(shape, -limit, limit, dtype)
            } else {
                rng.truncated_normal(shape, 0.0, (scale / n).sqrt() / TRUNCATED_STD, dtype)
            }
        };
        match *self {
            Initializer::Zeros => Tensor::try_zeros(shape, dtype),
            Initializer::Ones => Tensor::try_ones(shape, dtype),
            Initializer::Constant(v) => Tensor::try_full(shape, v, dtype),
            Initializer::RandomUniform { lo, hi } => rng.uniform(shape, lo, hi, dtype),
            Initializer::RandomNormal { mean, std } => rng.normal(shape, mean, std, dtype),
            Initializer::TruncatedNormal { mean, std } => rng.truncated_normal(shape, mean, std, dtype),
            Initializer::GlorotUniform => scaled(1.0, Fan::Avg, true, rng),
            Initializer::GlorotNormal => scaled(1.0, Fan::Avg, false, rng),
            Initializer::HeUniform => scaled(2.0, Fan::In, true, rng),
            Initializer::HeNormal => scaled(2.0, Fan::In, false, rng),
            Initializer::LecunUniform => scaled(1.0, Fan::In, true, rng),
            Initializer::LecunNormal => scaled(1.0, Fan::In, false, rng),
            Initializer::Orthogonal { gain } => orthogonal(shape, gain, dtype, rng),
        }
    }
}

/// Keras's `Orthogonal`: the Q factor of a normal matrix of shape
/// `[max(r, c), min(r, c)]`, with signs fixed so that R has a positive
/// diagonal (modified Gram–Schmidt gives that Q directly), transposed when
/// there are fewer rows than columns.
fn orthogonal(shape: &[usize], gain: f64, dtype: DType, rng: &mut Rng) -> Result<Tensor> {
    const OP: &str = "Initializer::Orthogonal";
    if shape.len() < 2 {
        return Err(Error::invalid(OP, format!("needs a shape of rank >= 2, got {shape:?}")));
    }
    let cols = shape[shape.len() - 1];
    let total = checked_numel(OP, shape)?;
    let rows = total.checked_div(cols).unwrap_or(0);
    if total == 0 {
        return Tensor::try_zeros(shape, dtype);
    }
    let (m, n) = (rows.max(cols), rows.min(cols));
    let a = rng.normal(&[m, n], 0.0, 1.0, DType::F64)?.to_vec::<f64>()?;
    // column j of the m x n matrix, orthonormalised against the earlier ones
    let mut q: Vec<Vec<f64>> = try_vec(OP, n)?;
    for j in 0..n {
        let mut v: Vec<f64> = try_collect(OP, (0..m).map(|i| a[i * n + j]))?;
        for u in &q {
            let d: f64 = u.iter().zip(&v).map(|(a, b)| a * b).sum();
            v.iter_mut().zip(u).for_each(|(x, u)| *x -= d * u);
        }
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm < 1e-12 {
            return Err(Error::invalid(OP, "the random matrix was rank deficient; draw again"));
        }
        v.iter_mut().for_each(|x| *x /= norm);
        q.push(v);
    }
    // the rows x cols result: Q (m x n) when rows >= cols, else its transpose
    let mut out = try_filled(OP, total, 0.0f64)?;
    for (j, col) in q.iter().enumerate() {
        for (i, &x) in col.iter().enumerate() {
            let (r, c) = if rows >= cols { (i, j) } else { (j, i) };
            out[r * cols + c] = gain * x;
        }
    }
    Tensor::from_vec(out, shape)?.cast(dtype)
}
