//! The gradient checker's traced mode: a function of tensors run as a
//! traced [`Function`](super::Function) must give what it gives eagerly.
//!
//! [`check_traced`] traces `f` on the given inputs, then calls the traced
//! function on *other* inputs (float inputs moved, integer and bool inputs
//! kept, so indices stay valid) and compares with `f` run eagerly there:
//!
//! 1. the values, bit for bit (a graph runs the same ops; a value frozen at
//!    trace time, an op whose descriptor loses an attribute, show here),
//!    both of the traced graph and of the optimised graph that a call runs
//!    (see [`compile`](super::compile)), which may differ from eager only
//!    where a fused kernel sums in another order (then to 1e-12 relative
//!    in f64, 1e-5 in f32);
//! 2. the gradient of `L = Σ w ⊙ f` through the call (one op on the tape,
//!    whose rule is the function's symbolic gradient) against the eager
//!    tape's, and the gradient computed by a tape *inside* the traced
//!    function;
//! 3. second derivatives through the call (nested tapes), unless turned off.
//!
//! Gradients are compared to a relative tolerance (`rtol`, default 1e-12):
//! they run the same rules, but a gradient graph may sum contributions in
//! another order.

use super::func::function;
use crate::autodiff::backprop::Unconnected;
use crate::autodiff::gradient_tape::{GradientOptions, GradientTape};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// Options of [`check_traced`].
#[derive(Debug, Clone)]
pub struct TracedCheckOptions {
    /// Relative tolerance for gradients.
    pub rtol: f64,
    /// Also compare second derivatives through the call.
    pub second_order: bool,
}

impl Default for TracedCheckOptions {
    fn default() -> Self {
        TracedCheckOptions {
            rtol: 1e-12,
            second_order: true,
        }
    }
}

/// What [`check_traced`] compared.
#[derive(Debug, Clone, PartialEq)]
pub struct TracedCheckReport {
    /// Output elements compared bit for bit.
    pub values: usize,
    /// Gradient entries compared (all orders and modes).
    pub gradients: usize,
    /// Largest relative difference between traced and eager gradients.
    pub max_rel_err: f64,
}

/// The inputs moved: each float element `v` becomes `0.9 v + 0.05` (so a
/// value frozen at trace time differs), others are kept.
fn moved(inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    inputs
        .iter()
        .map(|t| {
            if t.dtype().is_float() {
                t.mul_scalar(0.9)?.add_scalar(0.05)
            } else {
                Ok(t.clone())
            }
        })
        .collect()
}

/// Fixed non-uniform weights shaped like `y` (f64, cast to `y`'s dtype).
fn weights(y: &Tensor) -> Result<Tensor> {
    let w: Vec<f64> = (0..y.numel()).map(|i| 0.5 + ((i * 7 + 3) % 11) as f64 / 11.0).collect();
    Tensor::from_vec(w, y.shape())?.cast(y.dtype())
}

/// `Σ w ⊙ f(xs)` (f's output must be float).
fn weighted(y: &Tensor) -> Result<Tensor> {
    y.mul(&weights(y)?)?.sum_all()
}

fn floats(xs: &[Tensor]) -> Vec<Tensor> {
    xs.iter().filter(|t| t.dtype().is_float()).cloned().collect()
}

/// Gradients of `L(xs)` w.r.t. the float inputs (zeros where unconnected).
fn grad_l(run: &dyn Fn(&[Tensor]) -> Result<Tensor>, xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let srcs = floats(xs);
    let l = tape.record(|| {
        for x in &srcs {
            tape.watch(x);
        }
        weighted(&run(xs)?)
    })?;
    let opts = GradientOptions::default().unconnected(Unconnected::Zero);
    Ok(tape.gradient_with(&l, &srcs, opts)?.into_iter().flatten().collect())
}

/// `Σ v ⊙ ∇L(xs)` differentiated again: a Hessian-vector product.
fn hvp_l(run: &dyn Fn(&[Tensor]) -> Result<Tensor>, xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let outer = GradientTape::new();
    let srcs = floats(xs);
    let m = outer.record(|| {
        for x in &srcs {
            outer.watch(x);
        }
        let g = grad_l(run, xs)?;
        let mut acc = Tensor::scalar(0.0f64);
        for gi in &g {
            acc = acc.add(&weighted(gi)?.cast(DType::F64)?)?;
        }
        Ok(acc)
    })?;
    let opts = GradientOptions::default().unconnected(Unconnected::Zero);
    Ok(outer.gradient_with(&m, &srcs, opts)?.into_iter().flatten().collect())
}

/// Compares two lists of gradients; returns the count and the largest
/// relative difference, or an error naming the first disagreement.
fn compare(what: &str, traced: &[Tensor], eager: &[Tensor], rtol: f64) -> Result<(usize, f64)> {
    if traced.len() != eager.len() {
        return Err(Error::GradientCheck(format!(
            "{what}: {} traced gradients vs {} eager",
            traced.len(),
            eager.len()
        )));
    }
    let (mut n, mut worst) = (0, 0.0f64);
    for (j, (a, b)) in traced.iter().zip(eager).enumerate() {
        if a.shape() != b.shape() {
            return Err(Error::GradientCheck(format!(
                "{what}: input {j}: traced shape {:?} vs eager {:?}",
                a.shape(),
                b.shape()
            )));
        }
        for (e, (x, y)) in a.try_to_vec_f64()?.iter().zip(b.try_to_vec_f64()?).enumerate() {
            let same_nan = x.is_nan() && y.is_nan();
            let rel = (x - y).abs() / (1.0 + y.abs());
            let within = rel <= rtol;
            if !same_nan && !within {
                return Err(Error::GradientCheck(format!(
                    "{what}: input {j} element {e}: traced {x} vs eager {y}"
                )));
            }
            if !same_nan {
                worst = worst.max(rel);
            }
            n += 1;
        }
    }
    Ok((n, worst))
}

/// Compares values: bit for bit when `rtol` is 0, else to `rtol`
/// relative (to `1 + |eager|`).
fn same_values(what: &str, got: &Tensor, want: &Tensor, rtol: f64) -> Result<()> {
    for (e, (x, y)) in got.try_to_vec_f64()?.iter().zip(want.try_to_vec_f64()?).enumerate() {
        let equal = x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
        let close = rtol > 0.0 && (x - y).abs() <= rtol * (1.0 + y.abs());
        if !(equal || close) {
            return Err(Error::GradientCheck(format!(
                "value element {e}: {what} gives {x}, eager {y}"
            )));
        }
    }
    Ok(())
}

/// Checks `f` traced against `f` eager, on inputs other than those traced:
/// values bit for bit, gradients through the call and inside the trace,
/// and second derivatives through the call. `f` must return a float tensor.
///
/// ```
/// use gradtape::{check_traced, Tensor, TracedCheckOptions};
/// let x = Tensor::vector(&[0.3f64, -1.2, 2.0]);
/// let r = check_traced(|xs: &[Tensor]| xs[0].sin()?.mul(&xs[0]), &[x], &TracedCheckOptions::default())?;
/// assert_eq!(r.values, 3);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn check_traced<F>(f: F, inputs: &[Tensor], opts: &TracedCheckOptions) -> Result<TracedCheckReport>
where
    F: Fn(&[Tensor]) -> Result<Tensor> + Send + Sync + 'static,
{
    let f = std::sync::Arc::new(f);
    let f1 = f.clone();
    let traced = function(move |xs: &Vec<Tensor>| f1(xs));
    let f2 = f.clone();
    let inner = function(move |xs: &Vec<Tensor>| {
        let g = grad_l(&|p: &[Tensor]| f2(p), xs)?;
        Ok(g)
    });
    // trace on the given inputs, run on moved ones
    traced.call(&inputs.to_vec())?;
    let b = moved(inputs)?;
    let bv = b.to_vec();
    let got = traced.call(&bv)?;
    let want = f(&b)?;
    if got.shape() != want.shape() || got.dtype() != want.dtype() {
        return Err(Error::GradientCheck(format!(
            "traced value has shape {:?} and dtype {}, eager {:?} and {}",
            got.shape(),
            got.dtype(),
            want.shape(),
            want.dtype()
        )));
    }
    // the graph as traced gives the eager bits; the optimised graph too,
    // unless a fused kernel adds numbers in another order
    let concrete = traced.concrete(&bv)?;
    let as_traced = concrete.run_traced(&bv)?;
    same_values("the traced graph", &as_traced[0], &want, 0.0)?;
    let tol = match (concrete.reassociates(), want.dtype()) {
        (false, _) => 0.0,
        (true, DType::F32) => 1e-5,
        (true, _) => 1e-12,
    };
    same_values("the optimised graph", &got, &want, tol)?;
    let mut report = TracedCheckReport {
        values: got.numel(),
        gradients: 0,
        max_rel_err: 0.0,
    };
    if !want.dtype().is_float() || floats(&b).is_empty() {
        return Ok(report);
    }
    let through_call = |p: &[Tensor]| traced.call(&p.to_vec());
    let eager = |p: &[Tensor]| f(p);
    let mut add = |r: (usize, f64)| {
        report.gradients += r.0;
        report.max_rel_err = report.max_rel_err.max(r.1);
    };
    let g_eager = grad_l(&eager, &b)?;
    add(compare(
        "gradient through the call",
        &grad_l(&through_call, &b)?,
        &g_eager,
        opts.rtol,
    )?);
    inner.call(&inputs.to_vec())?;
    add(compare(
        "gradient inside the trace",
        &inner.call(&bv)?,
        &g_eager,
        opts.rtol,
    )?);
    if opts.second_order {
        let h_eager = hvp_l(&eager, &b)?;
        add(compare(
            "second order through the call",
            &hvp_l(&through_call, &b)?,
            &h_eager,
            opts.rtol,
        )?);
    }
    Ok(report)
}
