//! The gradient of a traced loop whose variables change shape from one
//! iteration to the next (a shape invariant with a `None` dim: a tensor
//! grown by a concatenation each step, rows accumulated as TensorFlow's
//! `TensorArray` accumulates them).
//!
//! A loop's gradient reads each variable's value at every iteration's
//! entry (its history). Kept as one stacked tensor, as for a variable of
//! fixed shape, rows of different shapes cannot make it; TensorFlow keeps
//! such a history as a list of tensors. Here it is two tensors, which a
//! graph can carry: the rows' elements one after another (`flat`, 1-D), and
//! their shapes (`shapes`, i64 `[count, rank]`); [`row`] reads row `j` back.
//!
//! The backward loop's body pulls the cotangent through the body's VJP at
//! each iteration's entry values. Traced once, that VJP would be written
//! with the shapes seen when tracing (a concatenation's gradient slices
//! the cotangent at sizes fixed then), wrong at every other iteration.
//! So both the row read and the body's VJP are [`RunTimeFn`] nodes: a
//! node that runs a Rust function of its inputs when the graph runs, at
//! the shapes of that run. Its VJP is another such node (the function run
//! again under a tape, differentiated there), so the gradient
//! differentiates again, to any order, and forward mode goes through it
//! (the double-VJP construction).

use std::sync::Arc;

use super::residuals::closure_vjp;
use super::{bind_control, optional_rule, or_zeros, Control};
use crate::autodiff::tape::{Grads, VjpFn};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::function::func::TensorSpec;
use crate::ops::desc::{DynOp, Outputs};
use crate::tensor::{DType, Tensor};

/// A function of a node's inputs, run when the node runs.
pub(super) type RunFn = Arc<dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync>;

/// A node that runs `f` on its inputs when it runs (so its outputs'
/// shapes are decided then), differentiable: its VJP is a node of the same
/// kind running `f`'s VJP. `vars`: the variables `f` reads that gradients
/// reach; its VJP's outputs end with their gradients. Cheap to clone.
#[derive(Clone)]
pub(super) struct RunTimeFn {
    name: &'static str,
    f: RunFn,
    vars: Arc<Vec<Variable>>,
}

impl RunTimeFn {
    /// Binds the node on `inputs` (as an op of the active trace, tapes and
    /// accumulators) and returns its outputs.
    pub(super) fn call(name: &'static str, f: RunFn, vars: &[Variable], inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let op = RunTimeFn {
            name,
            f,
            vars: Arc::new(vars.to_vec()),
        };
        bind_control(Arc::new(op), inputs)
    }
}

impl DynOp for RunTimeFn {
    fn name(&self) -> &'static str {
        self.name
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        Ok(bind_control(Arc::new(self.clone()), inputs)?.into_iter().collect())
    }
    fn stateful(&self) -> bool {
        false
    }
    fn static_shapes(&self) -> bool {
        false
    }
}

impl Control for RunTimeFn {
    fn variables(&self) -> &[Variable] {
        &self.vars
    }

    fn run_raw(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        (self.f)(inputs)
    }

    fn rule(self: Arc<Self>, inputs: Vec<Tensor>, outputs: Vec<Tensor>) -> VjpFn {
        optional_rule(move |cts, _| {
            let mut args = inputs.clone();
            for (c, o) in cts.iter().zip(&outputs) {
                if o.dtype().is_differentiable() {
                    args.push(or_zeros(c, o)?);
                }
            }
            let (f, vars, n_in) = (self.f.clone(), self.vars.clone(), inputs.len());
            let vjp: RunFn = Arc::new(move |xs: &[Tensor]| {
                let (ins, cts) = xs.split_at(n_in);
                closure_vjp(&|x: &[Tensor]| f(x), ins, cts, &vars)
            });
            let mut g = RunTimeFn::call("RunTimeVjp", vjp, &self.vars, &args)?.into_iter();
            let mut out = Grads::new();
            for x in &inputs {
                out.push(if x.dtype().is_differentiable() { g.next() } else { None });
            }
            out.extend(g.map(Some));
            Ok(out)
        })
    }
}

/// Whether a loop variable's shape invariant lets its shape change.
pub(super) fn varies(spec: &TensorSpec) -> bool {
    spec.shape.iter().any(Option::is_none)
}

/// The history `rows` (one value per iteration, each of rank `rank`) of a
/// variable whose shape changes: its elements one after another, and its
/// rows' shapes (see the module docs).
pub(super) fn history(rows: &[Tensor], dtype: DType, rank: usize) -> Result<(Tensor, Tensor)> {
    let mut shapes: Vec<i64> = Vec::with_capacity(rows.len() * rank);
    let mut flat: Vec<Tensor> = Vec::with_capacity(rows.len());
    for r in rows {
        shapes.extend(r.shape().iter().map(|&d| d as i64));
        flat.push(r.reshape(&[r.numel()])?);
    }
    let flat = match flat.len() {
        0 => Tensor::try_zeros(&[0], dtype)?,
        _ => Tensor::concat(&flat.iter().collect::<Vec<_>>(), 0)?,
    };
    Ok((flat, Tensor::from_vec(shapes, &[rows.len(), rank])?))
}

/// Row `j` (an integer scalar, clamped into the rows) of a history kept by
/// [`history`], as a node that reads it when it runs; with no rows (the
/// backward loop's body traced for a loop that did not iterate), zeros
/// like `like` (the variable's value entering the loop).
pub(super) fn row(flat: &Tensor, shapes: &Tensor, j: &Tensor, like: &Tensor) -> Result<Tensor> {
    let f: RunFn = Arc::new(|xs: &[Tensor]| {
        let [flat, shapes, j, like] = xs else {
            return Err(Error::invalid("while_loop", "a history row reads 4 inputs"));
        };
        let host = crate::kernels::gpu::to_host("while_loop", shapes)?;
        let dims = host.values::<i64>("while_loop")?;
        let (count, rank) = (shapes.shape()[0], shapes.shape()[1]);
        if count == 0 {
            return Ok(vec![like.try_zeros_like()?]);
        }
        let j = crate::kernels::cpu::index::int_values("while_loop", &crate::kernels::gpu::to_host("while_loop", j)?)?
            .first()
            .copied()
            .unwrap_or(0)
            .clamp(0, count as i64 - 1) as usize;
        let numel = |r: usize| dims[r * rank..(r + 1) * rank].iter().product::<i64>() as usize;
        let start: usize = (0..j).map(numel).sum();
        let shape: Vec<usize> = dims[j * rank..(j + 1) * rank].iter().map(|&d| d as usize).collect();
        Ok(vec![flat.narrow(0, start, numel(j))?.reshape(&shape)?])
    });
    let inputs = [flat.clone(), shapes.clone(), j.clone(), like.clone()];
    RunTimeFn::call("HistoryRow", f, &[], &inputs)?
        .pop()
        .ok_or_else(|| Error::invalid("while_loop", "a history row has one output"))
}
