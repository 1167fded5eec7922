//! Gradient checkpointing, after `tf.recompute_grad`.
//!
//! [`recompute_grad`] wraps a closure so that calling it under a tape runs
//! it with every tape paused (nothing it computes on the way is recorded or
//! kept) and records its outputs as one op of its inputs and of the
//! trainable variables it read. That op's gradient re-runs the closure under
//! a fresh tape, on fresh identities of the saved inputs, and
//! differentiates it with the incoming cotangents: memory for the
//! intermediates is paid only during that op's backward step, at the price
//! of a second forward pass. The same ops run on the same values, so the
//! gradients equal those of the plain closure. Because the re-run is an
//! ordinary recorded computation (the fresh identities are recorded on any
//! outer tape), higher derivatives work through it too.

use std::sync::Arc;

use crate::autodiff::custom::{record_checked, variables_read};
use crate::autodiff::gradient_tape::{GradientOptions, GradientTape};
use crate::autodiff::sources::SourceRef;
use crate::autodiff::tape;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// A closure whose intermediates are recomputed during backprop instead of
/// kept; made by [`recompute_grad`].
pub struct Recompute<F> {
    f: Arc<F>,
}

/// Wraps `f` (inputs to outputs) for gradient checkpointing: see the module
/// notes. The closure must compute the same function each time it is called
/// (it runs once forward, and again when the gradient is taken).
///
/// ```
/// use gradtape::{recompute_grad, GradientTape, Tensor};
/// let block = recompute_grad(|xs: &[Tensor]| Ok(vec![xs[0].sin()?.mul(&xs[1])?]));
/// let (x, w) = (Tensor::scalar(0.0f64), Tensor::scalar(3.0f64));
/// let tape = GradientTape::new();
/// let y = tape.record(|| {
///     tape.watch(&[&x, &w]);
///     Ok(block.call(&[x.clone(), w.clone()])?.remove(0))
/// })?;
/// let [dx, dw] = tape.gradient(&y, &[&x, &w])?;
/// assert_eq!(dx.unwrap().to_scalar::<f64>()?, 3.0); // cos(0) * 3
/// assert_eq!(dw.unwrap().to_scalar::<f64>()?, 0.0); // sin(0)
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn recompute_grad<F>(f: F) -> Recompute<F>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
{
    Recompute { f: Arc::new(f) }
}

impl<F> Recompute<F>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
{
    /// Runs the closure on `inputs`. With no tape active this is a plain
    /// call; otherwise the outputs are fresh tensors recorded as one
    /// `RecomputeGrad` op.
    pub fn call(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        if !tape::any_active() {
            return (self.f)(inputs);
        }
        let (outs, vars) = tape::without_tapes(|| variables_read(|| (self.f)(inputs)))?;
        // the tapes did not see the reads: tell them now, so that they watch
        // the variables and record the op w.r.t. them
        for v in &vars {
            tape::variable_accessed(v);
        }
        let outs: Vec<Tensor> = outs.iter().map(crate::autodiff::custom::traced_alias).collect();
        let f = self.f.clone();
        let xs: Vec<Tensor> = inputs.to_vec();
        let vs = vars.clone();
        let first: Vec<(Vec<usize>, DType)> = outs.iter().map(|o| (o.shape().to_vec(), o.dtype())).collect();
        let backward = move |dys: &[Tensor]| {
            let fresh: Vec<Tensor> = xs.iter().map(|x| x.identity()).collect();
            let tape = GradientTape::new();
            let ys = tape.record(|| {
                tape.watch(&fresh[..]);
                tape.watch(&vs[..]);
                f(&fresh)
            })?;
            let again: Vec<(Vec<usize>, DType)> = ys.iter().map(|y| (y.shape().to_vec(), y.dtype())).collect();
            if again != first {
                return Err(Error::invalid(
                    "recompute_grad",
                    format!(
                        "the closure returned {} outputs (shapes and dtypes {}) when recomputed for the \
                         gradient, but {} ({}) when first called; it must compute the same function each time",
                        again.len(),
                        describe(&again),
                        first.len(),
                        describe(&first)
                    ),
                ));
            }
            let sources: Vec<SourceRef<'_>> = fresh
                .iter()
                .map(SourceRef::from)
                .chain(vs.iter().map(SourceRef::from))
                .collect();
            tape.gradient_with(
                &ys,
                &sources[..],
                GradientOptions::default().output_gradients(dys.to_vec()),
            )
        };
        record_checked("RecomputeGrad", inputs, &vars, &outs, backward);
        Ok(outs)
    }
}

/// `[2, 3] f32, [] f64` for a list of output shapes and dtypes.
fn describe(outs: &[(Vec<usize>, DType)]) -> String {
    let parts: Vec<String> = outs.iter().map(|(s, d)| format!("{s:?} {d}")).collect();
    format!("[{}]", parts.join(", "))
}
