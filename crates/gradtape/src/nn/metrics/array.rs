//! The host arrays the metrics compute on: a tensor's values as `f64`
//! with its shape, and the few shape rules Keras's metrics use (its rank
//! adjustment, broadcasting a weight to a shape, reductions over trailing
//! axes).

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Row-major `f64` values and their shape.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Arr {
    pub v: Vec<f64>,
    pub s: Vec<usize>,
}

impl Arr {
    /// `t`'s values (any real dtype: floats, integers, booleans).
    pub fn read(op: &'static str, t: &Tensor) -> Result<Arr> {
        if t.dtype().is_complex() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: t.dtype(),
                expected: "a real dtype (f32, f64, an integer or bool)",
            });
        }
        Ok(Arr {
            v: t.try_to_vec_f64()?,
            s: t.shape().to_vec(),
        })
    }

    pub fn rank(&self) -> usize {
        self.s.len()
    }

    /// Drops a trailing axis (of size 1).
    pub fn squeezed(mut self) -> Arr {
        self.s.pop();
        self
    }

    /// Adds a trailing axis of size 1.
    pub fn expanded(mut self) -> Arr {
        self.s.push(1);
        self
    }

    /// Reduces every axis from `keep` on (by their mean or their sum): the
    /// shape becomes `s[..keep]`.
    pub fn reduce_from(&self, keep: usize, mean: bool) -> Arr {
        let s = self.s[..keep.min(self.rank())].to_vec();
        let rows: usize = s.iter().product();
        if rows == 0 {
            return Arr { v: Vec::new(), s };
        }
        let n = self.v.len() / rows;
        let v = (0..rows)
            .map(|r| {
                let t: f64 = self.v[r * n..(r + 1) * n].iter().sum();
                if mean {
                    t / n as f64
                } else {
                    t
                }
            })
            .collect();
        Arr { v, s }
    }

    /// The values broadcast to `shape` (numpy's rules: aligned on the
    /// right, each dimension equal or 1, no more axes than `shape`); the
    /// error names `what` and its shape as given, `given`.
    pub fn broadcast_to(&self, op: &'static str, what: &str, given: &[usize], shape: &[usize]) -> Result<Vec<f64>> {
        let bad = || {
            let adjusted = if given == self.s {
                String::new()
            } else {
                format!(" (adjusted to {:?})", self.s)
            };
            Error::invalid(
                op,
                format!("{what} of shape {given:?}{adjusted} does not broadcast to shape {shape:?}"),
            )
        };
        if self.s == shape {
            return Ok(self.v.clone());
        }
        let (r, n) = (shape.len(), self.rank());
        if n > r {
            return Err(bad());
        }
        // strides of self aligned to `shape`, 0 on broadcast axes
        let mut strides = vec![0usize; r];
        let mut acc = 1;
        for i in (0..n).rev() {
            let (d, t) = (self.s[i], shape[r - n + i]);
            if d != t && d != 1 {
                return Err(bad());
            }
            strides[r - n + i] = if d == 1 { 0 } else { acc };
            acc *= d;
        }
        let total: usize = shape.iter().product();
        let mut out = Vec::with_capacity(total);
        let mut idx = vec![0usize; r];
        for _ in 0..total {
            out.push(self.v[idx.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>()]);
            for a in (0..r).rev() {
                idx[a] += 1;
                if idx[a] < shape[a] {
                    break;
                }
                idx[a] = 0;
            }
        }
        Ok(out)
    }
}

/// Keras's `squeeze_or_expand_to_same_rank(a, b, expand_rank_1)`: when the
/// ranks differ by one and the longer has a trailing axis of 1, it is
/// dropped, or, if the shorter is a vector (and `expand_rank_1`), one is
/// added to the shorter.
pub(super) fn same_rank(a: Arr, b: Arr, expand_rank_1: bool) -> (Arr, Arr) {
    let (ra, rb) = (a.rank(), b.rank());
    if ra == rb + 1 && a.s.last() == Some(&1) {
        if rb == 1 && expand_rank_1 {
            (a, b.expanded())
        } else {
            (a.squeezed(), b)
        }
    } else if rb == ra + 1 && b.s.last() == Some(&1) {
        if ra == 1 && expand_rank_1 {
            (a.expanded(), b)
        } else {
            (a, b.squeezed())
        }
    } else {
        (a, b)
    }
}

/// `y_true` and `y_pred` read, rank-adjusted as Keras does, and checked to
/// have one shape with at least one element.
pub(super) fn pair(op: &'static str, y_true: &Tensor, y_pred: &Tensor) -> Result<(Arr, Arr)> {
    let (t, p) = same_rank(Arr::read(op, y_true)?, Arr::read(op, y_pred)?, true);
    if t.s != p.s {
        return Err(mismatch(op, y_true, y_pred));
    }
    nonempty(op, y_true, y_pred)?;
    Ok((t, p))
}

/// The error for `y_true` and `y_pred` of shapes that do not fit.
pub(super) fn mismatch(op: &'static str, y_true: &Tensor, y_pred: &Tensor) -> Error {
    Error::ShapeMismatch {
        op,
        lhs: y_true.shape().to_vec(),
        rhs: y_pred.shape().to_vec(),
    }
}

/// Fails for a batch without elements.
pub(super) fn nonempty(op: &'static str, y_true: &Tensor, y_pred: &Tensor) -> Result<()> {
    if y_pred.numel() == 0 || y_true.numel() == 0 {
        return Err(Error::invalid(
            op,
            format!(
                "empty batch: y_true of shape {:?}, y_pred of shape {:?}",
                y_true.shape(),
                y_pred.shape()
            ),
        ));
    }
    Ok(())
}

/// `a / b`, or 0 where `b` is 0 (TensorFlow's `divide_no_nan`).
pub(super) fn divide_no_nan(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        0.0
    } else {
        a / b
    }
}

/// The index of the first largest value of `row` (−0 counts as below +0,
/// as in Keras's `argmax`).
pub(super) fn argmax(row: &[f64]) -> usize {
    let key = |x: f64| {
        if x == 0.0 && x.is_sign_negative() {
            -f64::MIN_POSITIVE
        } else {
            x
        }
    };
    let mut best = 0;
    for (i, &x) in row.iter().enumerate().skip(1) {
        if key(x) > key(row[best]) {
            best = i;
        }
    }
    best
}
