//! Compiled graphs on a GPU replayed as CUDA graphs.
//!
//! A traced step on a GPU launches a few dozen small kernels, and the host
//! spends longer launching each than the GPU spends running it. So a
//! [`Plan`] whose inputs and variables live on one GPU is run normally
//! once (which compiles its kernels), **captured** at its second run (its
//! kernels recorded into a CUDA graph, see `kernels::cuda::graph`), and
//! from then on **replayed**: one launch per run.
//!
//! A graph reads and writes fixed addresses, while a run's inputs and
//! variables are new tensors each time. So the capture gives the graph
//! buffers of its own, *stages*:
//!
//! - per input, a stage the graph reads; a run copies its input there
//!   (skipped when it is the very tensor copied last time: device buffers
//!   are never written after they are made, so its values are unchanged);
//! - per variable the graph reads or writes, a stage that stands for the
//!   variable during the capture (the variable holds it, so a
//!   `ReadVariable` reads it and a write's kernel reads it); the graph
//!   ends by copying each written variable's final value back into its
//!   stage. After a replay a written variable gets a fresh copy of its
//!   stage (a tensor of its own, as a write gives it), and a run copies a
//!   variable into its stage only when it holds something else than what
//!   the last run left (a user's `assign`);
//! - per output, a stage the graph copies the output into; a run returns
//!   fresh copies of them.
//!
//! What the graph cannot replay makes the capture fail, and the plan then
//! runs normally forever: a stateful op other than a variable read or
//! write (a random op draws on the host), anything that reads a value on
//! the host or uploads one (control flow on a predicate, a constant made
//! during the run), an input on the CPU or on an emulated GPU. A run whose
//! inputs or variables moved to another device runs normally too.
//!
//! Caveats: a captured graph keeps its own device memory for the run's
//! temporaries (as long as the compiled function lives), beside the
//! stages; and during the one capture the variables hold their stages, so
//! another thread reading them at that moment would read the stages.

use std::sync::Mutex;

use super::exec::Plan;
use crate::autodiff::variable::Variable;
use crate::error::Result;
use crate::function::graph::Graph;
use crate::function::variables::{ReadVariable, WriteVariable};
use crate::kernels::cuda::graph::{self as cuda_graph, copy_tensor, empty, empty_like, gpu_of, same_buffer, GraphExec};
use crate::tensor::Tensor;

const OP: &str = "cuda_graph";

/// A plan's CUDA graph, once captured.
#[derive(Default)]
pub(crate) struct GpuGraph {
    state: Mutex<State>,
}

#[derive(Default)]
enum State {
    /// runs so far, none captured
    #[default]
    Untried,
    /// one run done (its kernels compiled): the next is captured
    Warm,
    Ready(Box<Replay>),
    /// the graph cannot be replayed, for this reason
    Never(String),
}

/// A captured graph and its stages.
struct Replay {
    ordinal: usize,
    exec: GraphExec,
    args: Vec<Stage>,
    vars: Vec<VarStage>,
    outs: Vec<Tensor>,
}

/// An input's stage, and the tensor last copied into it.
struct Stage {
    buf: Tensor,
    last: Option<Tensor>,
}

/// A variable's stage; `last` is the tensor whose values it holds (the one
/// copied in, or given to a written variable after a replay).
struct VarStage {
    var: Variable,
    buf: Tensor,
    written: bool,
    last: Option<Tensor>,
}

impl GpuGraph {
    /// Runs `plan` on `args` as a CUDA graph (capturing it first when due),
    /// appending the outputs to `out`; `None` when the run should go the
    /// normal way (not on one GPU, not capturable, busy on another thread,
    /// a profile being taken).
    pub(crate) fn run(&self, plan: &Plan, g: &Graph, args: &[Tensor], out: &mut Vec<Tensor>) -> Option<Result<()>> {
        if cuda_graph::capturing_any() {
            // (a function called inside another's capture runs its nodes,
            // which the outer graph records)
            return None;
        }
        let mut st = self.state.try_lock().ok()?;
        match &mut *st {
            State::Never(_) => None,
            State::Ready(r) => r.fits(args).then(|| r.replay(args, out)),
            State::Untried | State::Warm if super::profile::start().is_some() => None,
            State::Untried => {
                *st = match placement(g, args) {
                    Some(_) => State::Warm,
                    None => State::Never(
                        "its inputs and variables are not all on one GPU, or it has a stateful op (a random draw) \
                         other than variable reads and writes"
                            .into(),
                    ),
                };
                None
            }
            State::Warm => {
                let ordinal = placement(g, args)?;
                match Replay::capture(plan, g, args, ordinal) {
                    Ok(mut r) => {
                        let done = r.replay(args, out);
                        *st = State::Ready(Box::new(r));
                        Some(done)
                    }
                    Err(e) => {
                        log::info!("a compiled graph runs without a CUDA graph: {e}");
                        *st = State::Never(e.to_string());
                        None
                    }
                }
            }
        }
    }
}

impl GpuGraph {
    /// What [`ConcreteFunction::cuda_graph_status`](crate::function::ConcreteFunction::cuda_graph_status) says.
    pub(crate) fn status(&self) -> String {
        match self.state.lock().as_deref() {
            Ok(State::Ready(_)) => "replayed".into(),
            Ok(State::Untried | State::Warm) => "not yet captured".into(),
            Ok(State::Never(why)) => format!("not replayed: {why}"),
            Err(_) => "not replayed: poisoned".into(),
        }
    }
}

/// The GPU a run of `g` on `args` could be captured on: every input and
/// variable in one GPU's memory, and no stateful op but variable reads and
/// writes.
fn placement(g: &Graph, args: &[Tensor]) -> Option<usize> {
    if g.nodes.is_empty() {
        return None;
    }
    let mut ordinal = None;
    let mut on_one = |t: &Tensor| {
        let o = gpu_of(t)?;
        (*ordinal.get_or_insert(o) == o).then_some(())
    };
    for a in args {
        on_one(a)?;
    }
    for n in &g.nodes {
        if !n.op.is_stateful() {
            continue;
        }
        let v = variable_of(&n.op)?;
        on_one(&v.0.current())?;
    }
    ordinal
}

/// The variable of a variable read or write, and whether it is a write.
fn variable_of(op: &crate::ops::desc::Op) -> Option<(&Variable, bool)> {
    op.as_dyn::<ReadVariable>()
        .map(|r| (&r.0, false))
        .or_else(|| op.as_dyn::<WriteVariable>().map(|w| (&w.0, true)))
}

impl Replay {
    /// Captures a run of `plan` on GPU `ordinal` (see the module docs).
    fn capture(plan: &Plan, g: &Graph, args: &[Tensor], ordinal: usize) -> Result<Replay> {
        let args_st = args
            .iter()
            .map(|a| {
                Ok(Stage {
                    buf: empty_like(OP, a)?,
                    last: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut vars: Vec<VarStage> = Vec::new();
        for n in &g.nodes {
            let Some((v, written)) = variable_of(&n.op) else {
                continue;
            };
            match vars.iter_mut().find(|s| s.var.handle() == v.handle()) {
                Some(s) => s.written |= written,
                None => vars.push(VarStage {
                    var: v.clone(),
                    buf: empty_like(OP, &v.current())?,
                    written,
                    last: None,
                }),
            }
        }
        let outs = g
            .outputs
            .iter()
            .map(|&o| {
                let info = &g.values[o as usize];
                empty(OP, ordinal, &info.shape, info.dtype)
            })
            .collect::<Result<Vec<_>>>()?;
        let staged: Vec<Tensor> = args_st.iter().map(|s| s.buf.clone()).collect();
        let (ran, made) = cuda_graph::capture(OP, ordinal, || {
            // the variables hold their stages during the capture
            let saved: Vec<Tensor> = vars.iter().map(|s| s.var.set_untraced(s.buf.clone())).collect();
            let ran = (|| -> Result<()> {
                let mut results = Vec::new();
                plan.run_fresh(g, &staged, &mut results)?;
                for (stage, o) in outs.iter().zip(&results) {
                    if gpu_of(o) != Some(ordinal) {
                        return Err(crate::error::Error::invalid(OP, "an output is not on the graph's GPU"));
                    }
                    copy_tensor(OP, stage, o)?;
                }
                for v in vars.iter().filter(|v| v.written) {
                    copy_tensor(OP, &v.buf, &v.var.current())?;
                }
                Ok(())
            })();
            // (the run's tensors, the variables' last values among them,
            // go within the capture: the graph frees them)
            for (s, old) in vars.iter().zip(saved) {
                drop(s.var.set_untraced(old));
            }
            ran
        })?;
        ran?;
        Ok(Replay {
            ordinal,
            exec: made?,
            args: args_st,
            vars,
            outs,
        })
    }

    /// Whether a run on `args` can replay the graph: every input and
    /// variable still on its GPU, with the stages' shapes and dtypes.
    fn fits(&self, args: &[Tensor]) -> bool {
        let like = |t: &Tensor, s: &Tensor| {
            gpu_of(t) == Some(self.ordinal) && t.shape() == s.shape() && t.dtype() == s.dtype()
        };
        args.len() == self.args.len()
            && args.iter().zip(&self.args).all(|(a, s)| like(a, &s.buf))
            && self.vars.iter().all(|v| like(&v.var.current(), &v.buf))
    }

    /// One run: the inputs and changed variables into their stages, the
    /// graph, then the written variables' and the outputs' copies.
    fn replay(&mut self, args: &[Tensor], out: &mut Vec<Tensor>) -> Result<()> {
        for (a, s) in args.iter().zip(&mut self.args) {
            if !s.last.as_ref().is_some_and(|l| same_buffer(l, a)) {
                copy_tensor(OP, &s.buf, a)?;
                s.last = Some(a.clone());
            }
        }
        for v in &mut self.vars {
            let current = v.var.current();
            if !v.last.as_ref().is_some_and(|l| same_buffer(l, &current)) {
                copy_tensor(OP, &v.buf, &current)?;
                v.last = Some(current);
            }
        }
        self.exec.launch(OP)?;
        for v in self.vars.iter_mut().filter(|v| v.written) {
            let fresh = empty_like(OP, &v.buf)?;
            copy_tensor(OP, &fresh, &v.buf)?;
            drop(v.var.set_untraced(fresh.clone()));
            v.last = Some(fresh);
        }
        for stage in &self.outs {
            let fresh = empty_like(OP, stage)?;
            copy_tensor(OP, &fresh, stage)?;
            out.push(fresh);
        }
        Ok(())
    }
}
