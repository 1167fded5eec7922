//! How a `while_loop` node runs its iterations.
//!
//! Run as traced (or where its graphs are not compiled), each iteration
//! runs the condition's graph, then the body's, through
//! [`Sub::run`](super::Sub): each run clones every input into its slots
//! and drops them at the end, takes the plan's lock, allocates its list of
//! outputs, and times itself for the executor's sharing trial. A loop of
//! small tensors (an RNN of 8 units, a neural ODE's Euler steps) spends
//! more on that than on its nodes. Where both graphs are compiled and the
//! loop's inputs have their traced shapes (which then hold at every
//! iteration: the body is static and returns its variables' shapes), the
//! iterations instead run the compiled body as one caller's repeated runs
//! ([`Repeat`]):
//!
//! - the plan's slots, operand lists and bin are taken once per loop, and
//!   the lists of outputs are reused from one iteration to the next;
//! - the captures are borrowed (read where they are: a capture no node
//!   reads costs nothing, one read once is cloned once);
//! - the loop variables are moved into the body's run, not cloned (their
//!   entry values are copied into the histories first): at their last
//!   read a buffer held by nothing else is written in place (a gradient
//!   loop's sums: `sum + g` into `sum`'s buffer);
//! - the condition is fused into the body ([`with_condition`]): one
//!   compiled graph gives the next variables and whether the loop goes on,
//!   so an iteration is one run, not two. Only where the condition has no
//!   stateful node (no random draw, no variable read) and the body writes
//!   no variable (the condition then reads nothing an iteration changes
//!   but the variables), and where the loop has no `max_iterations` (the
//!   fused condition is evaluated after the last iteration, which the
//!   loop would otherwise not do: harmless only when nothing stops the
//!   loop before its condition). Otherwise the condition's compiled graph
//!   runs as a second [`Repeat`].
//!
//! The values are those of the runs one graph at a time: the same nodes
//! run on the same values, in the same order (a fused graph's passes may
//! share a constant between the body and the condition, or fuse nothing
//! across them: the condition reads the body's outputs, which the body's
//! own passes already gave).

use std::sync::OnceLock;

use super::{pred_value, writes, Loop, Sub};
use crate::error::{Error, Result};
use crate::function::compile::exec::{Args, Repeat};
use crate::function::compile::{self, Executable};
use crate::function::graph::{Graph, ValueId};
use crate::tensor::Tensor;

/// A loop's bodies compiled with its condition fused in (see
/// [`with_condition`]): one for its body, one for its body with residuals
/// (`None` where the condition is not fused or the body not compiled;
/// the error of a compiler pass that broke the graph).
#[derive(Default)]
pub(super) struct Fused {
    plain: OnceLock<std::result::Result<Option<Executable>, Error>>,
    with_residuals: OnceLock<std::result::Result<Option<Executable>, Error>>,
}

/// The graph of one iteration with the next one's condition: `body`'s
/// nodes, then `cond`'s reading the body's first `n` outputs (the next
/// loop variables) and the captures (the inputs past the first `n`, the
/// same in both graphs); its outputs the body's, then the condition's.
pub(super) fn with_condition(body: &Graph, cond: &Graph, n: usize) -> Graph {
    let mut g = body.clone();
    let mut map: Vec<ValueId> = vec![ValueId::MAX; cond.values.len()];
    for (k, &v) in cond.inputs.iter().enumerate() {
        map[v as usize] = if k < n { body.outputs[k] } else { body.inputs[k] };
    }
    for node in &cond.nodes {
        let mut node = node.clone();
        for v in node.inputs.iter_mut() {
            *v = map[*v as usize];
        }
        for v in node.outputs.iter_mut() {
            let info = &cond.values[*v as usize];
            let nv = g.add_value(info.dtype, &info.shape);
            map[*v as usize] = nv;
            *v = nv;
        }
        g.nodes.push(node);
    }
    g.outputs.push(map[cond.outputs[0] as usize]);
    g
}

impl Loop {
    /// The compiled graph the loop's iterations ran, where they ran one
    /// (its body, or its body with residuals `with_residuals`): the body
    /// with the condition fused in, else the body's own compiled copy.
    pub fn compiled_body(&self, with_residuals: bool) -> Option<&Executable> {
        let (slot, body) = match with_residuals {
            false => (&self.fused.plain, &self.body),
            true => (&self.fused.with_residuals, self.kept_body()),
        };
        match slot.get() {
            Some(Ok(Some(e))) => Some(e),
            _ => body.exec.get().and_then(Option::as_ref),
        }
    }
}

/// How the iterations run.
enum How<'a> {
    /// each graph on its own (see [`Sub::run`]): the loop variables then
    /// the captures
    Each { ins: Vec<Tensor> },
    /// the compiled body, repeated; `cond`: the condition's compiled graph,
    /// or `None` where it is fused into the body (its last output)
    Repeated {
        vars: Vec<Tensor>,
        body: Repeat<'a>,
        cond: Option<Repeat<'a>>,
        /// the fused condition's value at the variables now (`None`
        /// before the first iteration)
        holds: Option<bool>,
    },
}

/// A loop's iterations under way: the loop variables, and how the next
/// iteration runs.
pub(super) struct Iterations<'a> {
    lp: &'a Loop,
    /// the body that runs: the loop's, or its body with residuals
    body: &'a Sub,
    caps: &'a [Tensor],
    how: How<'a>,
    /// the last iteration's outputs past the loop variables (the
    /// residuals), and the fused condition's
    out: Vec<Tensor>,
    /// the condition's outputs
    cond_out: Vec<Tensor>,
}

impl<'a> Iterations<'a> {
    /// The iterations of `lp` running `body` (the loop's, or its body with
    /// residuals, `with_residuals`) from `inputs` (the loop variables then
    /// the captures).
    pub(super) fn new(lp: &'a Loop, body: &'a Sub, with_residuals: bool, inputs: &'a [Tensor]) -> Result<Self> {
        let n = lp.n_vars;
        let caps = &inputs[n..];
        let how = match repeated(lp, body, with_residuals, inputs)? {
            Some((b, c)) => How::Repeated {
                vars: inputs[..n].to_vec(),
                body: Repeat::new(b),
                cond: c.map(Repeat::new),
                holds: None,
            },
            None => How::Each { ins: inputs.to_vec() },
        };
        Ok(Iterations {
            lp,
            body,
            caps,
            how,
            out: Vec::new(),
            cond_out: Vec::new(),
        })
    }

    /// The loop variables now.
    pub(super) fn vars(&self) -> &[Tensor] {
        match &self.how {
            How::Each { ins } => &ins[..self.lp.n_vars],
            How::Repeated { vars, .. } => vars,
        }
    }

    /// Whether the condition holds at the variables now.
    pub(super) fn holds(&mut self) -> Result<bool> {
        let out = &mut self.cond_out;
        out.clear();
        match &mut self.how {
            How::Each { ins } => out.extend(self.lp.cond.run(ins)?),
            How::Repeated {
                holds: Some(h),
                cond: None,
                ..
            } => return Ok(*h),
            How::Repeated {
                vars, cond: Some(c), ..
            } => c.run(
                Args {
                    moved: &mut Vec::new(),
                    borrowed: [vars, self.caps],
                },
                out,
            )?,
            // (before the first iteration of a fused condition: on its own)
            How::Repeated { vars, cond: None, .. } => {
                let ins: Vec<Tensor> = vars.iter().chain(self.caps).cloned().collect();
                out.extend(self.lp.cond.run(&ins)?);
            }
        }
        let p = out
            .first()
            .ok_or_else(|| Error::invalid("while_loop", "the condition gave no value"))?;
        pred_value("while_loop", p)
    }

    /// Runs the body once: the variables become the next ones; returns
    /// the values it gave past them (the residuals).
    pub(super) fn step(&mut self) -> Result<&[Tensor]> {
        let n = self.lp.n_vars;
        let few = |got: usize| {
            Error::invalid(
                "while_loop",
                format!("the body gave {got} values for {n} loop variables"),
            )
        };
        self.out.clear();
        match &mut self.how {
            How::Each { ins } => {
                self.out.extend(self.body.run(ins)?);
                if self.out.len() < n {
                    return Err(few(self.out.len()));
                }
                for (slot, v) in ins.iter_mut().zip(self.out.drain(..n)) {
                    *slot = v;
                }
            }
            How::Repeated {
                vars,
                body,
                cond,
                holds,
            } => {
                let args = Args {
                    moved: vars,
                    borrowed: [&[], self.caps],
                };
                body.run(args, &mut self.out)?;
                let fused = usize::from(cond.is_none());
                if self.out.len() < n + fused {
                    return Err(few(self.out.len() - fused));
                }
                if cond.is_none() {
                    let p = self.out.pop().ok_or_else(|| few(0))?;
                    *holds = Some(pred_value("while_loop", &p)?);
                }
                vars.extend(self.out.drain(..n));
            }
        }
        Ok(&self.out)
    }

    /// The loop variables, once the loop is done.
    pub(super) fn into_vars(self) -> Vec<Tensor> {
        match self.how {
            How::Each { mut ins } => {
                ins.truncate(self.lp.n_vars);
                ins
            }
            How::Repeated { vars, .. } => vars,
        }
    }
}

/// The compiled graphs the iterations repeat, where runs now are compiled
/// and the loop's inputs (all on the host) have the traced shapes: the body
/// with the condition fused in (and no condition), or the body and the
/// condition.
fn repeated<'a>(
    lp: &'a Loop,
    body: &'a Sub,
    with_residuals: bool,
    inputs: &[Tensor],
) -> Result<Option<(&'a Executable, Option<&'a Executable>)>> {
    let Some(opts) = compile::subgraphs_compiled().filter(|_| !crate::dispatch::listening()) else {
        return Ok(None);
    };
    if !compile::enabled_by_env() || !lp.shapes_kept() || inputs.iter().any(|t| t.device_buffer().is_some()) {
        return Ok(None);
    }
    let fusable =
        lp.max_iterations.is_none() && !lp.cond.graph.nodes.iter().any(|n| n.op.is_stateful()) && !writes(&body.graph);
    if fusable {
        let slot = match with_residuals {
            false => &lp.fused.plain,
            true => &lp.fused.with_residuals,
        };
        let fused = slot.get_or_init(|| {
            if !compile::is_static(&body.graph) {
                return Ok(None);
            }
            let g = with_condition(&body.graph, &lp.cond.graph, lp.n_vars);
            Executable::compile(&g, &opts).map(Some)
        });
        match fused {
            Err(e) => return Err(e.clone()),
            Ok(Some(e)) if e.fits(inputs) => return Ok(Some((e, None))),
            Ok(_) => {}
        }
    }
    match (body.compiled()?, lp.cond.compiled()?) {
        (Some(b), Some(c)) if b.fits(inputs) && c.fits(inputs) => Ok(Some((b, Some(c)))),
        _ => Ok(None),
    }
}
