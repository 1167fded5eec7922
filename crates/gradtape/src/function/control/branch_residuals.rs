//! A `cond` a tape watches keeps, for its gradient, the values its taken
//! branch made, so the gradient does not run the branch again.
//!
//! Without them, `cond`'s gradient runs the taken branch again under a
//! tape to get the values its VJP reads. That is wrong for a branch with
//! effects (a variable write, a fresh random draw), which must not run
//! twice: a traced training step with a dropout in a branch got the
//! gradient of another mask than the one its value used, and a branch
//! that updated a variable (a counter, a batch normalisation's moving
//! statistics) updated it twice. And it is slow for any other: a traced
//! step whose `cond` picks `tanh` computed the `tanh` of the whole
//! activation again in its gradient, where eager's tape keeps it (the
//! `cond_l` model of the `trace_vs_eager` example lost to eager by that).
//! So a `cond` a tape watches (its captures `caps` or the variables it
//! reads) splits each branch's gradient at its residuals as a loop
//! body's ([`residuals`](super::residuals)): the node runs the taken
//! branch's forward half, which returns the residuals beside the outputs,
//! and the gradient is a `cond` of the two backward halves on those
//! residuals. TensorFlow's `cond_v2` does the same: its forward `If`
//! outputs the intermediates the gradient needs, zeros from the branch
//! not taken. Ours are a zero broadcast to the residual's shape (stride
//! 0: nothing is allocated or filled for them). The memory kept is what
//! eager's tape keeps for the ops of the taken branch.
//!
//! Where a branch does not split (shapes decided at run time), the
//! gradient runs it again, which is allowed for a branch without effects.
//! Where the gradient of a `cond` with effects would still run a branch
//! again (no tape watched it when it ran, a branch whose shapes are
//! decided at run time, a gradient of the gradient reaching the residuals
//! of a branch whose effects are in nested control flow), it is an error
//! that says so.

use std::sync::Arc;

use super::branch::{cond, CondOp};
use super::residuals::{self, Residuals};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::tensor::{Layout, Tensor, TensorId};

impl CondOp {
    /// The branches' halves where a tape of the user's watches the `cond`
    /// (its captures `caps` or the variables it reads); `None` otherwise,
    /// or where a branch does not split.
    pub(super) fn split_branches(&self, caps: &[Tensor]) -> Option<Arc<[Residuals; 2]>> {
        let vars: &[Variable] = &self.vars;
        let ids: Vec<TensorId> = caps.iter().map(Tensor::id).collect();
        if !super::watched(&ids, vars) {
            return None;
        }
        let half = |k: usize| residuals::split(&self.branches[k], &[], caps, vars).ok().flatten();
        Some(Arc::new([half(0)?, half(1)?]))
    }

    /// How many outputs the branches return (before the residuals).
    pub(super) fn n_out(&self) -> usize {
        self.branches[0].graph.outputs.len()
    }

    /// Runs branch `k`'s forward half on the captures: its outputs, then
    /// both branches' residuals (for the other's, a zero broadcast to each
    /// residual's shape: a view of one element).
    pub(super) fn run_with_residuals(&self, res: &[Residuals; 2], k: usize, caps: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut outs = res[k].fwd.run(caps)?;
        let mine = outs.split_off(self.n_out());
        for (j, r) in res.iter().enumerate() {
            if j == k {
                outs.extend(mine.iter().cloned());
            } else {
                for (dtype, shape) in &r.specs {
                    let zero = Tensor::try_zeros(&[], *dtype)?;
                    outs.push(zero.view(Layout {
                        shape: shape.clone(),
                        strides: std::iter::repeat_n(0, shape.len()).collect(),
                        offset: 0,
                    }));
                }
            }
        }
        Ok(outs)
    }

    /// The gradients of the captures (differentiable ones) and of the
    /// variables: a `cond` of the branches' backward halves on the
    /// residuals the forward run returned (`outputs` past the branches'
    /// own), or of the branches' gradients run again where there are none
    /// (and the branches have no effects). `cts` are the cotangents of
    /// the differentiable outputs; `res_cts` those of the residuals (a
    /// gradient of the gradient, or forward mode's double VJP, gives
    /// them): pulled back through each branch without its effects
    /// ([`residuals::Pure`]). Only the gradients `asked` for (one flag
    /// per differentiable capture then per variable) are returned.
    pub(super) fn branch_grads(
        self: &Arc<Self>,
        pred: &Tensor,
        caps: &[Tensor],
        cts: &[Tensor],
        outputs: &[Tensor],
        res_cts: &[Option<Tensor>],
        asked: &[bool],
    ) -> Result<Vec<Tensor>> {
        // each branch returns the gradients asked for only, so that the
        // traced branches of the gradient's `cond` compute no others (dead
        // code there)
        if !asked.contains(&true) {
            return Ok(Vec::new());
        }
        let asked: Arc<[bool]> = asked.into();
        let pick = move |grads: Vec<Tensor>| -> Vec<Tensor> {
            grads
                .into_iter()
                .zip(asked.iter().chain(std::iter::repeat(&true)))
                .filter_map(|(g, &k)| k.then_some(g))
                .collect()
        };
        let Some(res) = self.res.clone() else {
            self.branch_runs_again(
                "no tape watched the cond when it ran, or a branch's shapes are decided when it runs",
            )?;
            let branch = |k: usize| {
                let (me, caps, cts, pick) = (self.clone(), caps.to_vec(), cts.to_vec(), pick.clone());
                move || Ok(pick(super::graph_vjp(&me.branches[k], &caps, &cts, &me.vars)?))
            };
            return cond(pred, branch(0), branch(1));
        };
        let at = self.n_out() + res[0].specs.len();
        let rows = [outputs[self.n_out()..at].to_vec(), outputs[at..].to_vec()];
        if res_cts.iter().any(Option::is_some) {
            let held = |k: usize| res[k].pure.is_some() || !super::hoist::has_effects(&self.branches[k].graph);
            if !held(0) || !held(1) {
                self.branch_runs_again("a gradient of its gradient reaches the values the forward branch kept")?;
            }
            let cts_of = [&res_cts[..res[0].specs.len()], &res_cts[res[0].specs.len()..]];
            let branch = |k: usize| -> Result<_> {
                let mut all = cts.to_vec();
                for (row, ct) in rows[k].iter().zip(cts_of[k]) {
                    if row.dtype().is_differentiable() {
                        all.push(ct.clone().map_or_else(|| row.try_zeros_like(), Ok)?);
                    }
                }
                let (me, caps, rows) = (self.clone(), caps.to_vec(), rows[k].clone());
                let (res, pick) = (res.clone(), pick.clone());
                Ok(move || {
                    Ok(pick(match &res[k].pure {
                        Some(p) => p.vjp(&caps, &rows, &all, &me.vars)?,
                        None => super::graph_vjp(&res[k].fwd, &caps, &all, &me.vars)?,
                    }))
                })
            };
            return cond(pred, branch(0)?, branch(1)?);
        }
        let branch = |k: usize| {
            let mut all: Vec<Tensor> = caps.iter().chain(cts).cloned().collect();
            all.extend(rows[k].iter().cloned());
            let (res, pick) = (res.clone(), pick.clone());
            move || Ok(pick(res[k].bwd.run(&all)?))
        };
        cond(pred, branch(0), branch(1))
    }

    /// Fails where a branch has effects: the gradient would run it again,
    /// for the reason `why`.
    fn branch_runs_again(&self, why: &str) -> Result<()> {
        if !self.effects {
            return Ok(());
        }
        Err(Error::invalid(
            "cond",
            format!(
                "the gradient would run a branch again ({why}), and a branch writes variables or draws fresh \
                 random numbers, which a second run would repeat or draw anew; move the effects out of the \
                 cond, or differentiate a cond without them"
            ),
        ))
    }
}
