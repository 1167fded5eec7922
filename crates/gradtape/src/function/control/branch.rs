//! `cond`'s node ([`CondOp`]) and the function that makes it ([`cond`]):
//! kept apart from the loop because the two share only the machinery of
//! the parent module (sub-graphs, captures, running an op as one node of
//! tapes and traces); the branches' residuals, for branches with effects,
//! are in [`branch_residuals`](super::branch_residuals).

use std::sync::Arc;

use super::captures::{union, with_captures};
use super::residuals::Residuals;
use super::{
    bind_control, differentiated, hoist, optional_rule, or_zeros, output_dtypes, pred_value, same_dtypes, trace,
    writes, Control, Sub,
};
use crate::autodiff::tape::{Grads, VjpFn};
use crate::autodiff::variable::Variable;
use crate::error::Result;
use crate::function::structure::{tensors_of, TensorStruct};
use crate::ops::desc::{DynOp, Outputs};
use crate::tensor::Tensor;

/// `cond`'s node: two branch graphs over the same inputs (the predicate,
/// then the captures). Cheap to clone.
#[derive(Clone)]
pub(super) struct CondOp {
    pub(super) branches: Arc<[Sub; 2]>,
    pub(super) vars: Arc<Vec<Variable>>,
    /// the branches' gradients split at their residuals, which the node
    /// then returns after its outputs (see [`branch_residuals`])
    pub(super) res: Option<Arc<[Residuals; 2]>>,
    /// whether a branch writes or draws fresh numbers
    pub(super) effects: bool,
}

impl DynOp for CondOp {
    fn name(&self) -> &'static str {
        "Cond"
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        Ok(bind_control(Arc::new(self.clone()), inputs)?.into_iter().collect())
    }
    fn stateful(&self) -> bool {
        self.branches
            .iter()
            .any(|b| b.graph.nodes.iter().any(|n| n.op.is_stateful()))
    }
    fn writes(&self) -> bool {
        self.branches.iter().any(|b| writes(&b.graph))
    }
    fn subgraphs(&self) -> Vec<(String, crate::ops::desc::Erased)> {
        let mut subs = vec![
            (
                "true".into(),
                self.branches[0].graph.clone() as crate::ops::desc::Erased,
            ),
            (
                "false".into(),
                self.branches[1].graph.clone() as crate::ops::desc::Erased,
            ),
        ];
        // (the halves that run where the residuals are kept)
        for (label, r) in ["true with residuals", "false with residuals"]
            .iter()
            .zip(self.res.iter().flat_map(|r| r.iter()))
        {
            subs.push((label.to_string(), r.fwd.graph.clone() as crate::ops::desc::Erased));
        }
        subs
    }
    /// Both branches static and returning the same shapes.
    fn static_shapes(&self) -> bool {
        let [a, b] = &*self.branches;
        let shapes: Vec<&[usize]> = a
            .graph
            .outputs
            .iter()
            .map(|&o| &a.graph.values[o as usize].shape[..])
            .collect();
        a.returns_shapes(&shapes, 0) && b.returns_shapes(&shapes, 0)
    }
}

impl Control for CondOp {
    fn variables(&self) -> &[Variable] {
        &self.vars
    }

    fn run_raw(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let k = usize::from(!pred_value("cond", &inputs[0])?);
        match &self.res {
            Some(res) => self.run_with_residuals(res, k, &inputs[1..]),
            None => self.branches[k].run(&inputs[1..]),
        }
    }

    fn rule(self: Arc<Self>, inputs: Vec<Tensor>, outputs: Vec<Tensor>) -> VjpFn {
        optional_rule(move |cts, needs| {
            let (pred, caps) = (&inputs[0], &inputs[1..]);
            let n_out = self.n_out();
            let diff_cts: Vec<Tensor> = cts[..n_out]
                .iter()
                .zip(&outputs)
                .filter(|(_, o)| o.dtype().is_differentiable())
                .map(|(c, o)| or_zeros(c, o))
                .collect::<Result<_>>()?;
            // the gradients asked for (`needs`: the predicate, the
            // captures, then the variables; `true` past its end): of the
            // differentiable captures, then of the variables. The others
            // are not computed (a branch reading a data tensor no tape
            // watches computed its gradient, for nothing)
            let need = |i: usize| needs.get(i).copied().unwrap_or(true);
            let asked: Vec<bool> = caps
                .iter()
                .enumerate()
                .filter(|(_, c)| c.dtype().is_differentiable())
                .map(|(i, _)| need(1 + i))
                .chain((0..self.vars.len()).map(|j| need(inputs.len() + j)))
                .collect();
            let grads = self.branch_grads(pred, caps, &diff_cts, &outputs, &cts[n_out..], &asked)?;
            let mut it = grads.into_iter();
            let mut asked = asked.into_iter();
            let mut out: Grads = smallvec::smallvec![None];
            for c in caps {
                let kept = c.dtype().is_differentiable() && asked.next().unwrap_or(true);
                out.push(if kept { it.next() } else { None });
            }
            for k in asked {
                out.push(if k { it.next() } else { None });
            }
            Ok(out)
        })
    }
}

/// Runs `true_fn` if `pred` (a bool tensor of one element) is true, else
/// `false_fn`, like `tf.cond`. Both must return the same structure and
/// dtypes. Outside a trace this is an `if`; inside one, both branches are
/// traced and the choice is made each time the graph runs. A branch with
/// effects (a variable write, a fresh random draw) is differentiable in
/// reverse mode to any order and in forward mode at the draws and writes
/// of the forward run (where its effects are in nested control flow, to
/// the first order; the others are an error that says so).
///
/// ```
/// use gradtape::{cond, function, GradientTape, Tensor};
/// // x^2 where x > 0, else -x
/// let f = function(|x: &Tensor| {
///     let tape = GradientTape::new();
///     let y = tape.record(|| {
///         tape.watch(x);
///         cond(&x.gt_scalar(0.0)?, || x.square(), || x.neg())
///     })?;
///     Ok((y.clone(), tape.gradient(&y, x)?.unwrap()))
/// });
/// let (y, dy) = f.call(&Tensor::scalar(3.0f64))?;
/// assert_eq!((y.to_scalar::<f64>()?, dy.to_scalar::<f64>()?), (9.0, 6.0));
/// let (y, dy) = f.call(&Tensor::scalar(-2.0f64))?; // same graph, other branch
/// assert_eq!((y.to_scalar::<f64>()?, dy.to_scalar::<f64>()?), (2.0, -1.0));
/// assert_eq!(f.trace_count(), 1);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn cond<O, T, F>(pred: &Tensor, true_fn: T, false_fn: F) -> Result<O>
where
    O: TensorStruct,
    T: FnOnce() -> Result<O>,
    F: FnOnce() -> Result<O>,
{
    if !trace::recording() {
        return if pred_value("cond", pred)? {
            true_fn()
        } else {
            false_fn()
        };
    }
    pred_value("cond", pred)?;
    let branch = |f: Box<dyn FnOnce() -> Result<O> + '_>| {
        trace::trace(&[], &[], true, |_| {
            let o = f()?;
            let ts = tensors_of(&o);
            Ok((o, ts))
        })
    };
    let mut t = branch(Box::new(true_fn))?;
    let mut f = branch(Box::new(false_fn))?;
    hoist::hoist_reads(&mut [&mut t, &mut f]);
    same_dtypes(
        "cond",
        "true_fn and false_fn return different structures or dtypes",
        &output_dtypes(&t.graph),
        &output_dtypes(&f.graph),
    )?;
    let caps = union(&[&t.captures, &f.captures]);
    let n_out = t.graph.outputs.len();
    let mut op = CondOp {
        vars: Arc::new(differentiated(&[&t.variables, &f.variables])),
        effects: hoist::has_effects(&t.graph) || hoist::has_effects(&f.graph),
        branches: Arc::new([
            Sub::new(with_captures(t.graph, 0, &t.captures, &caps)),
            Sub::new(with_captures(f.graph, 0, &f.captures, &caps)),
        ]),
        res: None,
    };
    op.res = op.split_branches(&caps);
    let mut inputs = vec![pred.clone()];
    inputs.extend(caps);
    let outs = bind_control(Arc::new(op), &inputs)?;
    t.value.rebuild(&mut outs.into_iter().take(n_out))
}
