//! Control flow decided at run time: [`cond`] and [`while_loop`].
//!
//! Outside a trace both are plain Rust control flow: `cond` reads its
//! predicate and runs one closure, `while_loop` loops, and tapes record the
//! ops that run (so their gradients are those ops' gradients). Inside a
//! trace each closure is traced once into a sub-graph (reading the
//! enclosing function's values as extra inputs, *captures*), and the whole
//! construct becomes one node, so the branch taken and the iteration count
//! are decided when the graph runs. Where none of the sub-graphs writes, their
//! variable reads are made once, in front of the node, and captured
//! ([`hoist`]): the gradients then see the values the forward run read.
//!
//! Gradients of the nodes (reverse mode, any order):
//!
//! - `cond` ([`branch`]): a `cond` on the same predicate of the two branches' gradient
//!   graphs (as seed 004's `_grad_fn`), each giving zeros for the inputs its
//!   branch does not depend on. Where a branch has effects (a write, a
//!   fresh random draw), which must not run twice, the node returns the
//!   values the gradient reads instead ([`branch_residuals`]).
//! - `while_loop`: the loop node keeps each iteration's entry values (a
//!   *history*, one stacked tensor per loop variable) when a tape of the
//!   user's watches it; the gradient is a second `while_loop` running the
//!   iterations backward, pulling the cotangent through the body's gradient
//!   at each iteration's saved values and summing the captures' gradients.
//!   With the history, the forward loop also keeps the values that
//!   gradient reads ([`residuals`]), so the backward loop does not run the
//!   body again.
//!   Without a history (recorded only by a trace's own tape), the gradient
//!   first runs the loop again to get one. Both are made of `while_loop`,
//!   `gather` and the body's gradient, so they differentiate again; forward
//!   mode goes through them too. A variable whose shape invariant lets its
//!   shape change keeps its history as a list ([`ragged`]). A loop made
//!   where nothing differentiated it keeps its history anyway when it
//!   later runs under a tape that does (a loop in the body of a
//!   differentiated loop: its draws become the outer loop's residuals).
//!
//! In a compiled graph, a loop variable that only accumulates products
//! over rows (a backward loop's weight gradients, `dW ← dW + x_tᵀ dz_t`)
//! is summed after the loop in one product over the stacked rows
//! ([`sums_after`]).

use std::fmt;
use std::sync::{Arc, OnceLock};

use super::compile::{self, Executable};
use super::graph::{Graph, RunPlan};
use super::structure::{tensors_of, TensorStruct};
use super::{func::TensorSpec, trace};
use crate::autodiff::custom::record_rule;
use crate::autodiff::tape::{self, vjp, Grads, VjpFn};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::ops::desc::{DynOp, Op, Outputs};
use crate::tensor::{DType, Tensor, TensorId};

mod branch;
mod branch_residuals;
mod captures;
mod history;
mod hoist;
mod iterate;
mod loop_checks;
mod loop_grad;
mod loop_sizes;
mod ragged;
mod residuals;
mod sums_after;
pub use branch::cond;
use captures::{union, with_captures};
pub(crate) use hoist::writes;
use loop_checks::{check_body, spec_text};
use residuals::{graph_vjp, Residuals};

/// The value of a predicate: a bool tensor of one element, on any device.
fn pred_value(op: &'static str, p: &Tensor) -> Result<bool> {
    if p.dtype() != DType::Bool || p.numel() != 1 {
        return Err(Error::invalid(
            op,
            format!(
                "the predicate must be a bool tensor with one element, got {} of shape {:?}",
                p.dtype(),
                p.shape()
            ),
        ));
    }
    // (on a GPU, read as `item` reads: a copy of its one element)
    Ok(crate::kernels::gpu::to_host(op, p)?.values::<bool>(op)?[0])
}

/// A sub-graph with the plan to run it, and its compiled copy (made on
/// the first run that asks for it).
pub struct Sub {
    graph: Arc<Graph>,
    plan: RunPlan,
    /// The compiled copy: `None` where it is not compiled.
    pub exec: OnceLock<Option<Executable>>,
    /// why `exec` is `None`, where a compiler pass broke the graph (and the
    /// compiler checks it)
    broken: OnceLock<Error>,
}

impl Sub {
    fn new(mut graph: Graph) -> Self {
        super::passes::optimize(&mut graph);
        let plan = RunPlan::new(&graph);
        Sub {
            graph: Arc::new(graph),
            plan,
            exec: OnceLock::new(),
            broken: OnceLock::new(),
        }
    }

    /// Runs the graph: compiled, with the enclosing function's compiler
    /// options, where the enclosing graph runs compiled (see
    /// [`compile::with_compiled_subgraphs`]), the graph is static and
    /// the inputs have its traced shapes, and nothing records (a gradient
    /// of the sub-graph runs it under a tape); traced otherwise.
    fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        if let Some(e) = self.compiled()?.filter(|e| e.fits(inputs)) {
            return e.run(inputs);
        }
        self.graph.run(inputs, &self.plan)
    }

    /// The compiled copy where runs now are compiled (see [`run`](Self::run)),
    /// made at the first such run; the error of a compiler pass that broke
    /// the graph.
    fn compiled(&self) -> Result<Option<&Executable>> {
        let Some(opts) = compile::subgraphs_compiled().filter(|_| !crate::dispatch::listening()) else {
            return Ok(None);
        };
        let exec = self.exec.get_or_init(|| {
            let on = compile::enabled_by_env() && compile::is_static(&self.graph);
            match on.then(|| Executable::compile(&self.graph, &opts)) {
                Some(Err(e)) => {
                    let _ = self.broken.set(e);
                    None
                }
                compiled => compiled.and_then(Result::ok),
            }
        });
        if let Some(e) = self.broken.get() {
            return Err(e.clone());
        }
        Ok(exec.as_ref())
    }

    /// Whether the graph is static and returns these shapes, then
    /// `extra` more values.
    fn returns_shapes(&self, shapes: &[&[usize]], extra: usize) -> bool {
        let g = &self.graph;
        compile::is_static(g)
            && g.outputs.len() == shapes.len() + extra
            && g.outputs
                .iter()
                .zip(shapes)
                .all(|(&o, s)| g.values[o as usize].shape[..] == s[..])
    }
}

/// An op of this module: how it runs, and its VJP rule.
trait Control: DynOp {
    /// The variables its sub-graphs read that gradients reach (the
    /// trainable ones, and those a tape or accumulator watched when it was
    /// made).
    fn variables(&self) -> &[Variable];
    /// Runs the op itself (branch, loop) on its inputs.
    fn run_raw(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>>;
    /// The VJP rule of a run with these inputs and outputs.
    fn rule(self: Arc<Self>, inputs: Vec<Tensor>, outputs: Vec<Tensor>) -> VjpFn;
}

/// Runs a control op as an op: computes its outputs with every tape and
/// trace hidden, then records it as one node of the active trace and one
/// op of the active tapes and accumulators.
fn bind_control<C: Control + 'static>(op: Arc<C>, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let made_before = TensorId::fresh();
    let outs = trace::paused(|| tape::without_tapes(|| op.run_raw(inputs)))?;
    let outs = new_tensors(outs, made_before);
    if trace::recording() {
        let refs: Vec<&Tensor> = inputs.iter().collect();
        trace::record(Op::Dyn(op.clone()), &refs, &outs);
    }
    if crate::dispatch::differentiating() {
        for v in op.variables() {
            tape::variable_accessed(v);
        }
        let mut ids: Vec<(TensorId, DType)> = inputs.iter().map(|t| (t.id(), t.dtype())).collect();
        ids.extend(op.variables().iter().map(|v| (v.handle(), v.dtype())));
        let (ins, o) = (inputs.to_vec(), outs.clone());
        record_rule(op.name(), &ids, &outs, move || op.rule(ins, o));
    }
    Ok(outs)
}

/// `outs`, the outputs of an op that ran a graph (a branch, a loop's body,
/// a function), as new tensors: each one made before the op ran (its id
/// below `made_before`) or returned twice is replaced by an alias (a new
/// id, the same elements).
///
/// An output must be a tensor of its own: a trace knows values by their
/// tensors' ids, so an output with the id of a tensor made earlier (an
/// input passed through, or a constant a branch returns as it is, which
/// the enclosing trace may know, or come to know when a later op reads
/// it) would stand for that tensor in the rest of the trace, and every
/// later use of the constant would read the op's output instead (a `cond`
/// whose branch returned a constant `c` made `sigmoid(c)` after it read
/// whatever the branch taken at run time returned). Ids are drawn in order
/// on each thread; a tensor made on another thread during the run may have
/// a smaller id and is aliased too, which costs a handle.
pub(crate) fn new_tensors(outs: Vec<Tensor>, made_before: TensorId) -> Vec<Tensor> {
    let mut seen: rustc_hash::FxHashSet<TensorId> = rustc_hash::FxHashSet::default();
    outs.into_iter()
        .map(|t| {
            if t.id().0 > made_before.0 && seen.insert(t.id()) {
                t
            } else {
                t.alias()
            }
        })
        .collect()
}

/// The variables read by any of these traces that gradients reach through
/// a control op, each once: the trainable ones (of differentiable dtypes),
/// and the others an active tape or accumulator watches.
fn differentiated(lists: &[&[Variable]]) -> Vec<Variable> {
    let mut out: Vec<Variable> = Vec::new();
    for l in lists {
        for v in *l {
            if tape::differentiates_variable(v) && !out.iter().any(|w| w.handle() == v.handle()) {
                out.push(v.clone());
            }
        }
    }
    out
}

/// Whether a tape of the user's or an accumulator will differentiate an op
/// of these inputs, or reading these variables: such an op keeps what its
/// gradient reads (a loop's history, the residuals of a body or branch
/// with effects). Forward mode gets a control op's tangents from its VJP
/// rule (the double-VJP construction), which reads them too.
fn watched(ids: &[TensorId], vars: &[Variable]) -> bool {
    use crate::autodiff::forward;
    tape::user_tape_watches(ids)
        || tape::user_tape_watches_variables(vars)
        || (forward::any_active()
            && (ids.iter().any(|&i| forward::watches(i)) || vars.iter().any(|v| forward::watches(v.handle()))))
}

/// The dtypes of a graph's outputs.
fn output_dtypes(g: &Graph) -> Vec<DType> {
    g.outputs.iter().map(|&o| g.values[o as usize].dtype).collect()
}

/// A rule written in its optional form (`None`: no cotangent for that
/// output), told which inputs need a gradient (the tape's `needs`: one
/// per input then per variable, `true` where unknown); the dense form
/// passes every cotangent.
fn optional_rule(f: impl Fn(&[Option<Tensor>], &[bool]) -> Result<Grads> + Send + Sync + 'static) -> VjpFn {
    let f = Arc::new(f);
    let g = f.clone();
    vjp(move |cts, needs| g(&cts.iter().cloned().map(Some).collect::<Vec<_>>(), needs))
        .with_optional(move |cts, needs| f(cts, needs))
}

/// A cotangent, or zeros shaped like the output (traced from it, so the
/// shape follows the output when a graph runs).
fn or_zeros(ct: &Option<Tensor>, output: &Tensor) -> Result<Tensor> {
    ct.clone().map_or_else(|| output.try_zeros_like(), Ok)
}

/// Checks that two lists of dtypes agree.
fn same_dtypes(op: &'static str, what: &str, da: &[DType], db: &[DType]) -> Result<()> {
    if da != db {
        return Err(Error::invalid(op, format!("{what}: {da:?} vs {db:?}")));
    }
    Ok(())
}

// ---------------------------------------------------------- while_loop

/// Options of [`while_loop`].
#[derive(Clone, Debug, Default)]
pub struct WhileOptions {
    /// Stop after this many iterations even if the condition still holds.
    pub max_iterations: Option<usize>,
    /// Per loop variable (tensor leaves, in order), the shapes it may take:
    /// a `None` dim may change from one iteration to the next. Without it a
    /// body that changes a variable's shape is an error.
    pub shape_invariants: Option<Vec<TensorSpec>>,
}

/// `while_loop`'s node: condition and body graphs over the loop variables
/// then the captures. Cheap to clone.
#[derive(Clone)]
pub struct WhileOp {
    /// The loop it runs.
    pub loop_: Arc<Loop>,
    /// also output the iteration count and each variable's history
    keep_history: bool,
}

/// The parts of a loop.
pub struct Loop {
    cond: Sub,
    /// The loop's body.
    pub body: Sub,
    /// the body's gradient split at its residuals, which a loop keeping
    /// its history also keeps (see [`residuals`]): set when the loop is
    /// made where a tape watches it, else at its first run that keeps
    /// its history (a loop in a body that a differentiated loop runs)
    res: OnceLock<Option<Residuals>>,
    /// the shape invariants (a variable whose invariant has a `None` dim
    /// keeps its history as a list, see [`ragged`])
    invariants: Option<Vec<TensorSpec>>,
    vars: Vec<Variable>,
    n_vars: usize,
    max_iterations: Option<usize>,
    /// whether the condition or the body writes or draws fresh numbers
    /// (which their gradient must not run again)
    effects: bool,
    /// the iteration count of the last run that kept its history: the
    /// rows its histories make room for at the first (see [`history`])
    last_count: std::sync::atomic::AtomicUsize,
    /// its bodies compiled with the condition fused in (see [`iterate`])
    fused: iterate::Fused,
    /// the sums it carries that the compiler took out of it: its body
    /// then returns the operands they stack (see [`sums_after`])
    after: Option<sums_after::SumsAfter>,
}

impl WhileOp {
    fn with_history(&self, keep_history: bool) -> WhileOp {
        WhileOp {
            loop_: self.loop_.clone(),
            keep_history,
        }
    }

    /// The residuals of the body's gradient, where this run keeps them.
    fn kept_res(&self) -> Option<&Residuals> {
        self.res.get().and_then(Option::as_ref).filter(|_| self.keep_history)
    }
}

impl Loop {
    /// Whether the condition is static and the body static, returning
    /// its variables' traced shapes.
    fn shapes_kept(&self) -> bool {
        let b = &self.body.graph;
        let shapes: Vec<&[usize]> = b.inputs[..self.n_vars]
            .iter()
            .map(|&v| &b.values[v as usize].shape[..])
            .collect();
        let extra = self.after.as_ref().map_or(0, sums_after::SumsAfter::n_stacked);
        compile::is_static(&self.cond.graph) && self.body.returns_shapes(&shapes, extra)
    }

    /// Loop variable `k`'s shape invariant, if any.
    fn invariant(&self, k: usize) -> Option<&TensorSpec> {
        self.invariants.as_ref().map(|s| &s[k])
    }

    /// Whether loop variable `k` may change shape (its history is then
    /// kept as a list, see [`ragged`]).
    fn ragged(&self, k: usize) -> bool {
        self.invariant(k).is_some_and(ragged::varies)
    }

    /// Splits the body at its residuals (see [`residuals`]) the first time
    /// it is asked, at these example inputs: never for a body with shape
    /// invariants (its residuals' shapes may change), and `None` where the
    /// body does not split (its gradient then runs it again).
    fn residuals_at(&self, vars: &[Tensor], caps: &[Tensor]) -> Option<&Residuals> {
        self.res
            .get_or_init(|| match self.invariants {
                None => residuals::split(&self.body, vars, caps, &self.vars).unwrap_or(None),
                Some(_) => None,
            })
            .as_ref()
    }
}

impl std::ops::Deref for WhileOp {
    type Target = Loop;
    fn deref(&self) -> &Loop {
        &self.loop_
    }
}

impl DynOp for WhileOp {
    fn name(&self) -> &'static str {
        if self.keep_history {
            "WhileWithHistory"
        } else {
            "While"
        }
    }
    /// Where a tape or accumulator differentiates the loop though none did
    /// when it was made (a loop in the body of a differentiated loop,
    /// which runs it under a tape to get its gradient), the run keeps its
    /// history (and its residuals): the effects of its body then run once,
    /// and the enclosing gradient reads what they made. (The node returns
    /// the loop variables alone, as made; its rule holds the history, and
    /// a trace records the node with it.)
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let watched_now = || {
            let ids: Vec<TensorId> = inputs.iter().map(Tensor::id).collect();
            watched(&ids, &self.vars)
        };
        let rewritten = self.after.is_some();
        if !self.keep_history && !rewritten && self.effects && crate::dispatch::differentiating() && watched_now() {
            let outs = bind_control(Arc::new(self.with_history(true)), inputs)?;
            return Ok(outs.into_iter().take(self.n_vars).collect());
        }
        Ok(bind_control(Arc::new(self.clone()), inputs)?.into_iter().collect())
    }
    fn stateful(&self) -> bool {
        [&self.cond, &self.body]
            .iter()
            .any(|s| s.graph.nodes.iter().any(|n| n.op.is_stateful()))
    }
    fn writes(&self) -> bool {
        writes(&self.cond.graph) || writes(&self.body.graph)
    }
    fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let max = self.max_iterations.map(|m| format!("max_iterations={m}"));
        let after = self.after.as_ref().map(|a| format!("sums_after={}", a.n_sums()));
        let attrs: Vec<String> = max.into_iter().chain(after).collect();
        match attrs.is_empty() {
            true => Ok(()),
            false => write!(f, "[{}]", attrs.join(", ")),
        }
    }
    fn subgraphs(&self) -> Vec<(String, crate::ops::desc::Erased)> {
        let mut subs = vec![
            ("cond".into(), self.cond.graph.clone() as crate::ops::desc::Erased),
            ("body".into(), self.body.graph.clone() as crate::ops::desc::Erased),
        ];
        // (the body that runs where the history is kept, its gradient's
        // residuals as extra outputs)
        if let Some(r) = self.kept_res() {
            subs.push((
                "body with residuals".into(),
                r.fwd.graph.clone() as crate::ops::desc::Erased,
            ));
        }
        subs
    }
    /// A loop keeping no history (whose length is the iteration count),
    /// with static graphs, whose body returns its variables' shapes.
    fn static_shapes(&self) -> bool {
        !self.keep_history && self.shapes_kept()
    }
    /// Keeping its history, where its variables keep their shapes: the
    /// variables and the count keep theirs, the histories' length is the
    /// count.
    fn dynamic_outputs(&self) -> Option<Vec<bool>> {
        let n_out = 1 + self.n_vars + self.n_vars + self.kept_res().map_or(0, |r| r.specs.len());
        let ragged = (0..self.n_vars).any(|k| self.ragged(k));
        (self.keep_history && !ragged && self.shapes_kept()).then(|| (0..n_out).map(|k| k > self.n_vars).collect())
    }
    /// A loop keeping its variables' shapes outputs them, whatever its
    /// captures' shapes (checked when it runs).
    fn ignores_shape_of(&self, i: usize) -> bool {
        i >= self.n_vars && self.shapes_kept()
    }
}

impl Control for WhileOp {
    fn variables(&self) -> &[Variable] {
        &self.vars
    }

    fn run_raw(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        use std::sync::atomic::Ordering::Relaxed;
        let n = self.n_vars;
        let vars0 = &inputs[..n];
        // the residuals where the history is kept and the body splits
        let res = match self.keep_history {
            true => self.residuals_at(vars0, &inputs[n..]),
            false => None,
        };
        let n_res = res.map_or(0, |r| r.specs.len());
        let kept = if self.keep_history { n } else { 0 };
        // (each iteration's values copied into the histories as they come:
        // they die when the loop moves on, and the next iteration's
        // outputs take their buffers)
        let hint = self.last_count.load(Relaxed);
        // per residual, the variable whose next value it is (read from
        // that variable's history one row on, which then also keeps the
        // final value: see `residuals`)
        let next_of: &[Option<usize>] = res.map_or(&[], |r| &r.next_of);
        let one_on: Vec<bool> = (0..kept).map(|k| next_of.contains(&Some(k))).collect();
        let mut history: Vec<history::History> = (0..kept + n_res)
            .map(|k| history::History::new(k < n && self.ragged(k), hint + usize::from(k < kept && one_on[k])))
            .collect();
        // the loop variables, replaced at each iteration (see `iterate`)
        let body = res.map_or(&self.body, |r| &r.fwd);
        let mut it = iterate::Iterations::new(self, body, res.is_some(), inputs)?;
        // (the operands of the sums taken out of the loop, stacked)
        let mut stacks = self.after.as_ref().map(|a| a.stacks(hint));
        let mut count = 0usize;
        loop {
            if self.max_iterations.is_some_and(|m| count >= m) {
                break;
            }
            if !it.holds()? {
                break;
            }
            // (the entry values before the body takes them, then the
            // residuals it gave, but for those that are a variable's next
            // value: that variable's history keeps them, one row on)
            for (h, v) in history[..kept].iter_mut().zip(it.vars()) {
                h.push(v)?;
            }
            let residuals = it.step()?;
            if let Some(st) = &mut stacks {
                for (h, v) in st.iter_mut().zip(residuals) {
                    h.push(v)?;
                }
            }
            for (j, (h, v)) in history[kept..].iter_mut().zip(residuals).enumerate() {
                if next_of.get(j).copied().flatten().is_none() {
                    h.push(v)?;
                }
            }
            count += 1;
        }
        let mut vars = it.into_vars();
        // (a compiled graph plans with these shapes, see `ignores_shape_of`)
        if let Some(k) = (0..n).find(|&k| !self.ragged(k) && vars[k].shape() != vars0[k].shape()) {
            return Err(Error::invalid(
                "while_loop",
                format!(
                    "loop variable {k} entered with shape {:?} and left with {:?}",
                    vars0[k].shape(),
                    vars[k].shape()
                ),
            ));
        }
        if let (Some(a), Some(st)) = (&self.after, stacks) {
            self.last_count.store(count, Relaxed);
            a.finish(st, &mut vars)?;
        }
        if self.keep_history {
            self.last_count.store(count, Relaxed);
            for ((h, v), _) in history.iter_mut().zip(&vars).zip(&one_on).filter(|(_, on)| **on) {
                h.push(v)?;
            }
            vars.push(Tensor::scalar(count as i64));
            let specs = vars0.iter().map(|v| (v.dtype(), v.shape()));
            let specs = specs.chain(res.iter().flat_map(|r| r.specs.iter().map(|(d, s)| (*d, &s[..]))));
            // (the shapes of the rows of the histories kept as lists, last)
            let mut shapes = Vec::new();
            // (the histories that also keep the final value, whole)
            let mut whole: Vec<Option<Tensor>> = vec![None; n];
            for (k, (h, (dtype, shape))) in history.into_iter().zip(specs).enumerate() {
                if k < n && self.ragged(k) {
                    let (flat, s) = ragged::history(&h.into_list(), dtype, shape.len())?;
                    vars.push(flat);
                    shapes.push(s);
                    continue;
                }
                if let Some(v) = k.checked_sub(n).and_then(|r| next_of[r]) {
                    // (rows 1..=count of variable v's: views, no copy)
                    let full = whole[v]
                        .as_ref()
                        .ok_or_else(|| Error::invalid("while_loop", "missing history"))?;
                    vars.push(history::rows(full, 1, count));
                    continue;
                }
                let on = k < n && one_on[k];
                debug_assert_eq!(h.len(), count + usize::from(on));
                let t = h.finish(k, dtype, shape)?;
                if on {
                    vars.push(history::rows(&t, 0, count));
                    whole[k] = Some(t);
                } else {
                    vars.push(t);
                }
            }
            vars.extend(shapes);
        }
        Ok(vars)
    }

    fn rule(self: Arc<Self>, inputs: Vec<Tensor>, outputs: Vec<Tensor>) -> VjpFn {
        optional_rule(move |cts, needs| {
            self.not_rewritten()?;
            self.backward(&inputs, &outputs, cts, needs)
        })
    }
}

/// Repeats `body_fn` on the loop variables while `cond_fn` gives true (a
/// bool tensor of one element), like `tf.while_loop`; returns the final
/// variables. Each iteration's variables must keep their dtypes and
/// shapes (unless [`WhileOptions::shape_invariants`] lets a dim vary).
/// Outside a trace this is a Rust loop; inside one the condition and the
/// body are traced once and the iteration count is decided when the graph
/// runs. Differentiable in reverse mode to any order and in forward mode,
/// also where a variable changes shape. A body with effects (a variable
/// write, a fresh random draw), which its gradient must not run again, is
/// differentiated at the forward run's draws and writes, to any order and
/// in forward mode where its effects are its own, to the first order where
/// they are in a loop or branch in it (the others, and a body with effects
/// whose variables change shape, are an error that says so).
///
/// ```
/// use gradtape::{function, while_loop, GradientTape, Tensor, WhileOptions};
/// // square x until it exceeds 100: the count depends on x
/// let f = function(|x: &Tensor| {
///     let tape = GradientTape::new();
///     let y = tape.record(|| {
///         tape.watch(x);
///         let out = while_loop(
///             |v: &Vec<Tensor>| v[0].lt_scalar(100.0),
///             |v: &Vec<Tensor>| Ok(vec![v[0].square()?]),
///             vec![x.clone()],
///             WhileOptions::default(),
///         )?;
///         Ok(out[0].clone())
///     })?;
///     Ok((y.clone(), tape.gradient(&y, x)?.unwrap()))
/// });
/// // 3 -> 9 -> 81 -> 6561 = x^8: dy/dx = 8 x^7
/// let (y, dy) = f.call(&Tensor::scalar(3.0f64))?;
/// assert_eq!((y.to_scalar::<f64>()?, dy.to_scalar::<f64>()?), (6561.0, 8.0 * 2187.0));
/// // 20 -> 400 = x^2: dy/dx = 2 x, from the same graph
/// let (y, dy) = f.call(&Tensor::scalar(20.0f64))?;
/// assert_eq!((y.to_scalar::<f64>()?, dy.to_scalar::<f64>()?), (400.0, 40.0));
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn while_loop<V, C, B>(cond_fn: C, body_fn: B, loop_vars: V, opts: WhileOptions) -> Result<V>
where
    V: TensorStruct,
    C: Fn(&V) -> Result<Tensor>,
    B: Fn(&V) -> Result<V>,
{
    let vars = tensors_of(&loop_vars);
    if let Some(sig) = &opts.shape_invariants {
        if sig.len() != vars.len() {
            return Err(Error::invalid(
                "while_loop",
                format!("{} shape_invariants for {} loop variables", sig.len(), vars.len()),
            ));
        }
        if let Some((i, v)) = vars.iter().enumerate().find(|(i, v)| !sig[*i].accepts(v)) {
            return Err(Error::invalid(
                "while_loop",
                format!(
                    "loop variable {i} enters the loop with shape {:?} and dtype {}, which its shape \
                     invariant {} does not accept",
                    v.shape(),
                    v.dtype(),
                    spec_text(&sig[i])
                ),
            ));
        }
    }
    if !trace::recording() {
        let mut v = loop_vars;
        let mut count = 0;
        loop {
            if opts.max_iterations.is_some_and(|m| count >= m) {
                return Ok(v);
            }
            if !pred_value("while_loop", &cond_fn(&v)?)? {
                return Ok(v);
            }
            let next = body_fn(&v)?;
            check_body(&opts, &tensors_of(&v), &tensors_of(&next))?;
            v = next;
            count += 1;
        }
    }
    // (whether the condition held at the example)
    let held = std::cell::Cell::new(false);
    let c = trace::trace(&vars, &[], true, |xs| {
        let v = loop_vars.rebuild(&mut xs.iter().cloned())?;
        let p = cond_fn(&v)?;
        held.set(pred_value("while_loop", &p)?);
        Ok(((), vec![p]))
    })?;
    let b = trace::trace(&vars, &[], true, |xs| {
        let v = loop_vars.rebuild(&mut xs.iter().cloned())?;
        let next = body_fn(&v)?;
        let ts = tensors_of(&next);
        check_body(&opts, &vars, &ts)?;
        Ok(((), ts))
    })?;
    if let Some(sig) = &opts.shape_invariants {
        // (graphs that run at other sizes must not hold numbers of this one)
        let retrace = |what: &str, xs: &[Tensor]| -> Result<Graph> {
            let t = trace::trace(xs, &[], true, |xs| {
                let v = loop_vars.rebuild(&mut xs.iter().cloned())?;
                let outs = if what == "condition" {
                    vec![cond_fn(&v)?]
                } else {
                    tensors_of(&body_fn(&v)?)
                };
                Ok(((), outs))
            })?;
            Ok(t.graph)
        };
        loop_sizes::check_sizes_free(&vars, sig, [("condition", &c.graph), ("body", &b.graph)], retrace)?;
        loop_sizes::check_condition_moves(&c.graph, &vars, sig, held.get(), opts.max_iterations)?;
    }
    let (mut c, mut b) = (c, b);
    hoist::hoist_reads(&mut [&mut c, &mut b]);
    let caps = union(&[&c.captures, &b.captures]);
    let n = vars.len();
    let variables = differentiated(&[&c.variables, &b.variables]);
    let body = Sub::new(with_captures(b.graph, n, &b.captures, &caps));
    let ids: Vec<TensorId> = vars.iter().chain(&caps).map(Tensor::id).collect();
    // a tape or accumulator that will differentiate the loop (through its
    // inputs or the variables its body reads) gets the history from this
    // run (and the residuals of the body's gradient, where it splits):
    // without it, the gradient runs the whole loop again to make it
    let keep = watched(&ids, &variables);
    // (a body whose gradient fails to trace keeps the recomputing
    // gradient, which reports the error if the gradient is asked for)
    let res = OnceLock::new();
    if keep && opts.shape_invariants.is_none() {
        let _ = res.set(residuals::split(&body, &vars, &caps, &variables).unwrap_or(None));
    }
    let effects = hoist::has_effects(&c.graph) || hoist::has_effects(&body.graph);
    let op = WhileOp {
        loop_: Arc::new(Loop {
            effects,
            vars: variables,
            cond: Sub::new(with_captures(c.graph, n, &c.captures, &caps)),
            body,
            res,
            invariants: opts.shape_invariants.clone(),
            n_vars: n,
            max_iterations: opts.max_iterations,
            last_count: Default::default(),
            fused: Default::default(),
            after: None,
        }),
        keep_history: keep,
    };
    let mut inputs = vars;
    inputs.extend(caps);
    let outs = bind_control(Arc::new(op), &inputs)?;
    loop_vars.rebuild(&mut outs.into_iter().take(n))
}
