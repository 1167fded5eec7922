//! `while_loop`'s VJP rule: a second `while_loop` running the iterations
//! backward (see the module docs of `control`), reading each iteration's
//! entry values (and the residuals of the body's gradient) from the
//! history the forward loop kept. A variable whose shape changes has its
//! history kept as a list and read back at run time ([`ragged`]); the
//! backward loop's cotangent of it then changes shape too, which the
//! backward loop's shape invariants allow.

use std::sync::Arc;

use super::ragged::{self, RunFn, RunTimeFn};
use super::residuals::graph_vjp;
use super::{bind_control, or_zeros, while_loop, WhileOp, WhileOptions};
use crate::autodiff::tape::Grads;
use crate::error::{Error, Result};
use crate::function::func::TensorSpec;
use crate::ops::index::row_at;
use crate::tensor::{DType, Tensor};

impl WhileOp {
    /// The number of residual histories a run keeps (after the entry
    /// values' histories).
    fn n_res(&self) -> usize {
        self.kept_res().map_or(0, |r| r.specs.len())
    }

    /// The gradients of the loop's inputs (then of the variables its graphs
    /// read) for the cotangents `cts` of its `outputs`, where `needs` (one
    /// per input then per variable; `true` past its end) asks for them.
    ///
    /// A capture or variable whose gradient is not needed gets none, and
    /// the backward loop carries no sum of its gradients: its body then
    /// computes none of it (the traced body's dead code). A step reading
    /// its data `x[t]` at each iteration otherwise scattered a gradient of
    /// the whole `x` into zeros and added it to a sum, every iteration.
    pub(super) fn backward(
        self: &Arc<Self>,
        inputs: &[Tensor],
        outputs: &[Tensor],
        cts: &[Option<Tensor>],
        needs: &[bool],
    ) -> Result<Grads> {
        let n = self.n_vars;
        let (vars0, caps) = inputs.split_at(n);
        // the iteration count and history (the entry values' histories,
        // the residuals', then the shapes of those kept as lists): this
        // run's, or a new run's
        let again;
        let (outs, ct_hist): (&[Tensor], Vec<Option<Tensor>>) = if self.keep_history {
            (outputs, cts[n + 1..].to_vec())
        } else {
            self.body_runs_again("no tape watched the loop when it ran, so it kept no history")?;
            let op = Arc::new(self.with_history(true));
            again = bind_control(op, inputs)?;
            (&again[..], vec![None; again.len() - n - 1])
        };
        let n_hist = n + self.n_res();
        let count = outs[n].clone();
        let hist = outs[n + 1..n + 1 + n_hist].to_vec();
        // per loop variable, the tensor of its rows' shapes where its
        // history is a list
        let mut shapes_of: Vec<Option<Tensor>> = vec![None; n];
        let mut extra = outs[n + 1 + n_hist..].iter();
        for (k, s) in shapes_of.iter_mut().enumerate() {
            if self.ragged(k) {
                *s = Some(
                    extra
                        .next()
                        .cloned()
                        .ok_or_else(|| Error::invalid("while_loop", "missing history"))?,
                );
            }
        }
        let diff_var: Vec<bool> = vars0.iter().map(|t| t.dtype().is_differentiable()).collect();
        let diff_cap: Vec<bool> = caps.iter().map(|t| t.dtype().is_differentiable()).collect();
        // the captures and variables whose gradients are summed
        let need = |i: usize| needs.get(i).copied().unwrap_or(true);
        let keep_cap: Vec<bool> = diff_cap.iter().enumerate().map(|(i, &d)| d && need(n + i)).collect();
        let keep_var: Vec<bool> = (0..self.vars.len()).map(|i| need(inputs.len() + i)).collect();
        let n_dv = diff_var.iter().filter(|&&d| d).count();
        // the backward loop's variables: the iteration index j, the
        // cotangents of the differentiable loop variables, and the
        // gradients summed so far of the captures and of the variables
        let mut bvars: Vec<Tensor> = vec![count];
        let mut specs: Vec<TensorSpec> = vec![TensorSpec::new(DType::I64, &[])];
        let fixed = |t: &Tensor| TensorSpec::new(t.dtype(), &t.shape().iter().map(|&d| Some(d)).collect::<Vec<_>>());
        for (k, &d) in diff_var.iter().enumerate() {
            if d {
                let ct = or_zeros(&cts[k], &outputs[k])?;
                specs.push(match self.invariant(k) {
                    Some(s) if self.ragged(k) => s.clone(),
                    _ => fixed(&ct),
                });
                bvars.push(ct);
            }
        }
        for (c, &k) in caps.iter().zip(&keep_cap) {
            if k {
                bvars.push(c.try_zeros_like()?);
                specs.push(fixed(c));
            }
        }
        for (v, &k) in self.vars.iter().zip(&keep_var) {
            if k {
                let z = Tensor::try_zeros(&v.shape(), v.dtype())?;
                specs.push(fixed(&z));
                bvars.push(z);
            }
        }
        let any_ragged = shapes_of.iter().any(Option::is_some);
        // the row of history `k` (an entry value, a residual or a
        // cotangent of one) at iteration `j`
        let like: Vec<Tensor> = vars0.to_vec();
        let read = move |k: usize, h: &Tensor, j: &Tensor| match shapes_of.get(k).and_then(Option::as_ref) {
            Some(s) => ragged::row(h, s, j, &like[k]),
            None => row_at(h, j),
        };
        let me = self.clone();
        let caps_v = caps.to_vec();
        let dv = diff_var.clone();
        let (dc, kc, kv) = (diff_cap.clone(), keep_cap.clone(), keep_var.clone());
        let body = move |bv: &Vec<Tensor>| -> Result<Vec<Tensor>> {
            let j = bv[0].sub(&Tensor::scalar(1i64))?;
            let rows: Vec<Tensor> = hist
                .iter()
                .enumerate()
                .map(|(k, h)| read(k, h, &j))
                .collect::<Result<_>>()?;
            let (entry, res_rows) = rows.split_at(n);
            let mut ins = entry.to_vec();
            ins.extend(caps_v.iter().cloned());
            let cts = &bv[1..1 + n_dv];
            let mut g = if any_ragged {
                me.ragged_body_vjp(&ins, cts, &j)?
            } else {
                me.body_vjp(&ins, cts, res_rows, &ct_hist[n..n_hist], &j)?
            }
            .into_iter();
            let mut next = vec![j.clone()];
            for k in (0..n).filter(|&k| dv[k]) {
                let mut c = g
                    .next()
                    .ok_or_else(|| Error::invalid("while_loop", "missing gradient"))?;
                if let Some(h) = &ct_hist[k] {
                    c = c.add(&read(k, h, &j)?)?;
                }
                next.push(c);
            }
            // (the gradients of the differentiable captures, then of the
            // variables: those kept added to their sums, the others dropped)
            let mut sums = bv[1 + n_dv..].iter();
            let kept = dc.iter().zip(&kc).filter(|(d, _)| **d).map(|(_, k)| *k);
            for k in kept.chain(kv.iter().copied()) {
                let g = g
                    .next()
                    .ok_or_else(|| Error::invalid("while_loop", "missing gradient"))?;
                if k {
                    let sum = sums
                        .next()
                        .ok_or_else(|| Error::invalid("while_loop", "missing gradient sum"))?;
                    next.push(sum.add(&g)?);
                }
            }
            Ok(next)
        };
        let opts = WhileOptions {
            shape_invariants: any_ragged.then_some(specs),
            ..Default::default()
        };
        let done = while_loop(|bv: &Vec<Tensor>| bv[0].gt(&Tensor::scalar(0i64)), body, bvars, opts)?;
        let mut it = done.into_iter().skip(1);
        let mut out: Grads = Grads::new();
        for &d in diff_var.iter().chain(&keep_cap).chain(&keep_var) {
            out.push(if d { it.next() } else { None });
        }
        Ok(out)
    }

    /// The body's VJP at one iteration's entry values then the captures
    /// `ins` and the cotangents `cts`, for a loop whose variables change
    /// shape: a node computing it when it runs, at that iteration's shapes
    /// (see [`ragged`]). At `j` < 0 (the backward body traced for a loop
    /// that did not iterate, where it never runs), whose entry values are
    /// placeholders that need not fit the cotangents, it gives zeros.
    fn ragged_body_vjp(&self, ins: &[Tensor], cts: &[Tensor], j: &Tensor) -> Result<Vec<Tensor>> {
        self.body_runs_again("a loop variable changes shape, so the forward loop kept no residuals")?;
        let lp = self.loop_.clone();
        let (n_in, n_ct) = (ins.len(), cts.len());
        let f: RunFn = Arc::new(move |xs: &[Tensor]| {
            let (ins, cts) = (&xs[..n_in], &xs[n_in..n_in + n_ct]);
            if crate::kernels::gpu::to_host("while_loop", &xs[n_in + n_ct])?.values::<i64>("while_loop")?[0] >= 0 {
                return graph_vjp(&lp.body, ins, cts, &lp.vars);
            }
            let zeros = ins
                .iter()
                .filter(|t| t.dtype().is_differentiable())
                .map(Tensor::try_zeros_like);
            let vars = lp.vars.iter().map(|v| Tensor::try_zeros(&v.shape(), v.dtype()));
            zeros.chain(vars).collect()
        });
        let mut all = ins.to_vec();
        all.extend_from_slice(cts);
        all.push(j.clone());
        RunTimeFn::call("WhileBodyVjp", f, &self.vars, &all)
    }
}
