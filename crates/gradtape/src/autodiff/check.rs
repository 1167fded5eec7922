//! Gradient checking against central finite differences, in f64.
//!
//! A function `f` of several tensors is reduced to a scalar with fixed,
//! non-uniform weights, `L(x) = Σ w ⊙ f(x)`, so every output element
//! matters and errors cannot cancel by symmetry. First order compares the
//! tape's `∇L` with `(L(x + h·eᵢ) − L(x − h·eᵢ)) / 2h` for every element of
//! every float input. Second order does the same for `M(x) = Σ v ⊙ ∇L(x)`,
//! whose gradient is a Hessian-vector product computed with nested tapes;
//! that checks the gradient rules' own gradients.
//!
//! Batching: the vectorized Jacobian of `f` w.r.t. every float input (the
//! backward pass traced and batched by vmap's interpreter, see
//! [`GradientTape::jacobian`](crate::GradientTape::jacobian)) is compared
//! with the same rows computed one backward pass at a time (all rows, or
//! an evenly spaced sample of them for outputs with many elements). That
//! checks the batching rules of every op the rules use on the way.
//!
//! Float inputs are cast to f64 first; integer inputs (indices) are passed
//! through unchanged and not differentiated.

use crate::autodiff::backprop::Unconnected;
use crate::autodiff::gradient_tape::{GradientOptions, GradientTape};
use crate::autodiff::jacobian::JacobianOptions;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// Tolerances and switches for [`check_gradients`].
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Finite-difference step.
    pub eps: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance (of the numeric value).
    pub rtol: f64,
    /// Also check second derivatives.
    pub second_order: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            eps: 1e-6,
            atol: 1e-6,
            rtol: 1e-5,
            second_order: true,
        }
    }
}

/// What [`check_gradients`] compared.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckReport {
    /// Number of derivative entries compared with finite differences (all orders).
    pub compared: usize,
    /// Number of Jacobian entries compared between the vectorized and the
    /// row-by-row computation.
    pub compared_batched: usize,
    /// Largest |analytic − numeric| at first order.
    pub max_err_first: f64,
    /// Largest |analytic − numeric| at second order, if checked.
    pub max_err_second: Option<f64>,
    /// Largest |vectorized − row-by-row| over the Jacobian rows compared
    /// (`None` when there is no float input or the output is empty).
    pub max_err_batched: Option<f64>,
}

/// Rows of the Jacobian compared one by one at most.
const BATCH_ROWS: usize = 24;

/// The vectorized Jacobian of `f` against row-by-row gradients: returns the
/// number of entries compared and the largest difference.
fn check_batched(
    f: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    xs: &[Tensor],
    floats: &[usize],
    opts: &CheckOptions,
) -> Result<Option<(usize, f64)>> {
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        for &j in floats {
            tape.watch(&xs[j]);
        }
        f(xs)?.cast(DType::F64)
    })?;
    let n = y.numel();
    if floats.is_empty() || n == 0 {
        return Ok(None);
    }
    let srcs: Vec<Tensor> = floats.iter().map(|&j| xs[j].clone()).collect();
    let jopts = JacobianOptions::default().unconnected(Unconnected::Zero);
    let jac: Vec<Vec<f64>> = tape
        .jacobian_with(&y, &srcs, jopts)
        .map_err(|e| Error::GradientCheck(format!("batched: the vectorized Jacobian failed: {e}")))?
        .into_iter()
        .map(|j| j.map_or_else(|| Ok(Vec::new()), |j| j.f64_values("check_gradients")))
        .collect::<Result<_>>()?;
    let rows: Vec<usize> = if n <= BATCH_ROWS {
        (0..n).collect()
    } else {
        let mut r: Vec<usize> = (0..BATCH_ROWS).map(|i| i * (n - 1) / (BATCH_ROWS - 1)).collect();
        r.dedup();
        r
    };
    let (mut compared, mut max_err) = (0, 0.0f64);
    for row in rows {
        let mut onehot = vec![0.0f64; n];
        onehot[row] = 1.0;
        let seed = Tensor::from_vec(onehot, y.shape())?;
        let gopts = GradientOptions::default()
            .output_gradients(vec![seed])
            .unconnected(Unconnected::Zero);
        let gs = tape.gradient_with(&y, &srcs, gopts)?;
        for (k, (g, &j)) in gs.iter().zip(floats).enumerate() {
            let want = g
                .as_ref()
                .map_or_else(|| Ok(Vec::new()), |g| g.f64_values("check_gradients"))?;
            let m = xs[j].numel();
            let got = jac[k].get(row * m..(row + 1) * m).ok_or_else(|| {
                Error::GradientCheck(format!(
                    "vectorized Jacobian w.r.t. input {j} has {} elements, expected {}",
                    jac[k].len(),
                    n * m
                ))
            })?;
            for (e, (a, b)) in got.iter().zip(&want).enumerate() {
                let err = (a - b).abs();
                if err.is_nan() || err > opts.atol + opts.rtol * b.abs() {
                    return Err(Error::GradientCheck(format!(
                        "batched: Jacobian row {row} w.r.t. input {j} (shape {:?}) element {e}: \
                         vectorized {a} vs row-by-row {b}",
                        xs[j].shape()
                    )));
                }
                max_err = max_err.max(err);
                compared += 1;
            }
        }
    }
    Ok(Some((compared, max_err)))
}

/// Deterministic, non-uniform weights of a shape.
fn weights(shape: &[usize], k: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| 0.6 + 0.5 * (1.3 * i as f64 + k).sin()).collect();
    Tensor::from_vec(v, shape).expect("numel matches")
}

fn to_f64(inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    inputs
        .iter()
        .map(|t| {
            if t.dtype().is_float() {
                t.cast(DType::F64)
            } else {
                Ok(t.clone())
            }
        })
        .collect()
}

/// `Σ w ⊙ f(xs)`.
fn weighted(f: &dyn Fn(&[Tensor]) -> Result<Tensor>, xs: &[Tensor]) -> Result<Tensor> {
    let y = f(xs)?;
    let y = y.cast(DType::F64)?;
    y.mul(&weights(y.shape(), 0.3))?.sum_all()
}

/// The gradient of `Σ w ⊙ f` w.r.t. the float inputs, zeros when unconnected.
fn grad_l(f: &dyn Fn(&[Tensor]) -> Result<Tensor>, xs: &[Tensor], floats: &[usize]) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let l = tape.record(|| {
        for &j in floats {
            tape.watch(&xs[j]);
        }
        weighted(f, xs)
    })?;
    let srcs: Vec<Tensor> = floats.iter().map(|&j| xs[j].clone()).collect();
    let gs = tape.gradient(&l, &srcs)?;
    gs.into_iter()
        .zip(&srcs)
        .map(|(g, s)| g.map_or_else(|| s.try_zeros_like(), Ok))
        .collect()
}

/// `M = Σ_j v_j ⊙ ∇_j L` (recorded on any active outer tape).
fn hvp_target(f: &dyn Fn(&[Tensor]) -> Result<Tensor>, xs: &[Tensor], floats: &[usize]) -> Result<Tensor> {
    let gs = grad_l(f, xs, floats)?;
    let mut m = Tensor::scalar(0.0f64);
    for (k, g) in gs.iter().enumerate() {
        m = m.add(&g.mul(&weights(g.shape(), 1.1 + k as f64))?.sum_all()?)?;
    }
    Ok(m)
}

/// Compares analytic `∇ scalar(xs)` with central differences.
fn compare(
    order: u8,
    scalar: &dyn Fn(&[Tensor]) -> Result<f64>,
    analytic: &[Tensor],
    xs: &[Tensor],
    floats: &[usize],
    opts: &CheckOptions,
) -> Result<(usize, f64)> {
    let mut max_err = 0.0f64;
    let mut n = 0;
    for (k, &j) in floats.iter().enumerate() {
        let base = xs[j].to_vec::<f64>()?;
        let a = analytic[k].f64_values("check_gradients")?;
        if a.len() != base.len() {
            return Err(Error::GradientCheck(format!(
                "order {order}: gradient of input {j} has {} elements, the input has {}",
                a.len(),
                base.len()
            )));
        }
        for e in 0..base.len() {
            let eval = |delta: f64| -> Result<f64> {
                let mut v = base.clone();
                v[e] += delta;
                let mut p = xs.to_vec();
                p[j] = Tensor::from_vec(v, xs[j].shape())?;
                scalar(&p)
            };
            let num = (eval(opts.eps)? - eval(-opts.eps)?) / (2.0 * opts.eps);
            let err = (a[e] - num).abs();
            if err.is_nan() || err > opts.atol + opts.rtol * num.abs() {
                return Err(Error::GradientCheck(format!(
                    "order {order}: input {j} (shape {:?}) element {e}: analytic {} vs numeric {num}",
                    xs[j].shape(),
                    a[e]
                )));
            }
            max_err = max_err.max(err);
            n += 1;
        }
    }
    Ok((n, max_err))
}

/// Checks the gradients of `f` at `inputs` against central finite
/// differences in f64, at first order and (by default) second order, and
/// the vectorized Jacobian against row-by-row gradients (the batching rules).
/// Returns an error naming the input and element where they disagree.
///
/// ```
/// use gradtape::{check_gradients, CheckOptions, Tensor};
/// let x = Tensor::vector(&[0.3f64, -1.2, 2.0]);
/// let report = check_gradients(|xs| xs[0].sin()?.mul(&xs[0]), &[x], &CheckOptions::default())?;
/// assert!(report.max_err_first < 1e-6);
///
/// // a wrong derivative is caught
/// let wrong = |xs: &[Tensor]| xs[0].mul(&xs[0].stop_gradient());
/// let x = Tensor::vector(&[1.0f64, 2.0]);
/// assert!(check_gradients(wrong, &[x], &CheckOptions::default()).is_err());
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn check_gradients(
    f: impl Fn(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    opts: &CheckOptions,
) -> Result<CheckReport> {
    let f: &dyn Fn(&[Tensor]) -> Result<Tensor> = &f;
    let xs = to_f64(inputs)?;
    let floats: Vec<usize> = (0..xs.len()).filter(|&j| xs[j].dtype().is_float()).collect();

    let g1 = grad_l(f, &xs, &floats)?;
    let l = |p: &[Tensor]| weighted(f, p)?.item();
    let (n1, e1) = compare(1, &l, &g1, &xs, &floats, opts)?;
    let mut report = CheckReport {
        compared: n1,
        max_err_first: e1,
        max_err_second: None,
        max_err_batched: None,
        compared_batched: 0,
    };
    if let Some((nb, eb)) = check_batched(f, &xs, &floats, opts)? {
        report.compared_batched = nb;
        report.max_err_batched = Some(eb);
    }
    if opts.second_order {
        let outer = GradientTape::new();
        let m = outer.record(|| {
            for &j in &floats {
                outer.watch(&xs[j]);
            }
            hvp_target(f, &xs, &floats)
        })?;
        let srcs: Vec<Tensor> = floats.iter().map(|&j| xs[j].clone()).collect();
        let g2: Vec<Tensor> = outer
            .gradient(&m, &srcs)?
            .into_iter()
            .zip(&srcs)
            .map(|(g, s)| g.map_or_else(|| s.try_zeros_like(), Ok))
            .collect::<Result<_>>()?;
        let mfun = |p: &[Tensor]| hvp_target(f, p, &floats)?.item();
        let (n2, e2) = compare(2, &mfun, &g2, &xs, &floats, opts)?;
        report.compared += n2;
        report.max_err_second = Some(e2);
    }
    Ok(report)
}
