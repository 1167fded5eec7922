//! A concrete function: one traced graph, ready to run, differentiable as
//! one op.
//!
//! Called with no tape, accumulator or trace active, it runs its graph.
//! Under a trace it becomes one `Call` node of the enclosing graph. Under a
//! tape or a forward accumulator it is recorded as one op whose VJP rule is
//! the *symbolic gradient* of the function: a second traced function (built
//! once, see [`grad`](super::grad)) that takes what the forward saved and the
//! output cotangents. Since that gradient function is itself a concrete
//! function, it is recorded as one op in turn when differentiated again:
//! nested tapes give higher derivatives through calls.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use super::compile::{self, CompileOptions, CompileStats, Executable};
use super::grad::{self, Backward};
use super::graph::{Graph, RunPlan};
use super::passes;
use super::trace;
use crate::autodiff::custom::record_rule;
use crate::autodiff::tape;
use crate::autodiff::tape::{vjp, Grads};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::ops::desc::{DynOp, Op, Outputs};
use crate::ops::random::replaying;
use crate::tensor::{layout, DType, Shape, Tensor, TensorId};

/// A gradient split built for calls with these input shapes (or why it
/// could not be).
/// A gradient split, by the input shapes and the variables it
/// differentiates (their handles) it was built for.
type BuiltBackward = (Vec<Shape>, Vec<TensorId>, std::result::Result<Arc<Backward>, Error>);

/// How many gradient splits (one per input shape) a concrete function keeps.
const MAX_BACKWARDS: usize = 8;

/// The flat form of a traced closure: tensors in, tensors out (run again to
/// trace the function's gradient).
pub(crate) type FlatFn = Arc<dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync>;

/// One traced graph of a [`Function`](super::Function), for one input
/// signature.
pub struct ConcreteFunction {
    name: String,
    graph: Arc<Graph>,
    plan: RunPlan,
    /// the optimised copy that runs (`None`: the compiler is off, or the
    /// graph is not static)
    exec: Option<Executable>,
    /// the optimised copy that runs on a GPU (made at the first run there,
    /// where `exec` is made: see [`gpu_executable`](Self::gpu_executable))
    gpu_exec: OnceLock<std::result::Result<Executable, Error>>,
    /// whether the compiler is on for it (then the sub-graphs of its
    /// control flow run compiled too, where static)
    optimize: bool,
    /// its compiler's settings (its symbolic gradients get them too)
    compile: CompileOptions,
    /// tensors of an enclosing trace, passed after the arguments
    captures: Vec<Tensor>,
    /// the variables the graph reads (gradients reach the trainable ones,
    /// and the others a tape or accumulator watches)
    variables: Vec<Variable>,
    /// the closure, to trace the gradient from
    flat_fn: FlatFn,
    /// the gradient splits, built on the first differentiated call with
    /// each input shape (a graph that serves several sizes of a `None` dim
    /// has a gradient traced for each: its shapes are fixed in it), most
    /// recently used last
    backward: Mutex<Vec<BuiltBackward>>,
}

impl fmt::Debug for ConcreteFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConcreteFunction({}) ", self.name)?;
        fmt::Display::fmt(&*self.graph, f)
    }
}

impl ConcreteFunction {
    /// Optimises a traced graph and wraps it; `compile` (the compiler on,
    /// with these settings) also compiles an executable copy (see
    /// [`compile`](super::compile)), which fails only where a pass broke
    /// the graph and the compiler checks it.
    pub(crate) fn new(
        name: String,
        mut graph: Graph,
        captures: Vec<Tensor>,
        variables: Vec<Variable>,
        flat_fn: FlatFn,
        compile: Option<CompileOptions>,
    ) -> Result<Self> {
        passes::optimize(&mut graph);
        let plan = RunPlan::new(&graph);
        let optimize = compile.is_some() && compile::enabled_by_env();
        let compile = compile.unwrap_or_default();
        let exec = match optimize && compile::is_static(&graph) {
            true => Some(Executable::compile(&graph, &compile)?),
            false => None,
        };
        Ok(ConcreteFunction {
            name,
            graph: Arc::new(graph),
            plan,
            exec,
            gpu_exec: OnceLock::new(),
            optimize,
            compile,
            captures,
            variables,
            flat_fn,
            backward: Mutex::new(Vec::new()),
        })
    }

    /// A concrete function whose closure replays a graph (a gradient
    /// function: differentiating it again traces its own nodes again).
    /// (`compile`: whether it is compiled and how, as the function it
    /// derives from: a symbolic gradient of a function made with
    /// `optimize: false` is not compiled either, so that it adds in the
    /// eager tape's order.)
    pub(crate) fn from_graph(name: String, graph: Graph, compile: Option<CompileOptions>) -> Result<Self> {
        let replay = Arc::new(graph.clone());
        let plan = RunPlan::new(&replay);
        let flat_fn: FlatFn = Arc::new(move |args: &[Tensor]| replay.run(args, &plan));
        ConcreteFunction::new(name, graph, Vec::new(), Vec::new(), flat_fn, compile)
    }

    /// The compiler's settings where the function is compiled
    /// (`FunctionOptions::optimize`), for the functions derived from it.
    pub(crate) fn compile_options(&self) -> Option<CompileOptions> {
        self.optimize.then_some(self.compile)
    }

    /// The traced graph (after dead-code and common-subexpression
    /// elimination): the ops the closure ran, which symbolic gradients read.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The graph that runs: the traced graph after the compiler's passes
    /// (constant folding, simplification, fusion; see the `compile`
    /// module), or the traced graph when the compiler is off.
    ///
    /// ```
    /// use gradtape::{function, Tensor};
    /// let f = function(|x: &Tensor| x.mul_scalar(2.0)?.add_scalar(1.0)?.relu());
    /// let c = f.concrete(&Tensor::vector(&[1.0f32, -3.0]))?;
    /// assert_eq!(c.graph().len(), 3);
    /// assert_eq!(c.optimized_graph().count("Fused"), 1);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn optimized_graph(&self) -> &Graph {
        self.exec.as_ref().map_or(&self.graph, |e| &e.graph)
    }

    /// What the compiler's passes did (all zero when it is off).
    pub fn compile_stats(&self) -> CompileStats {
        self.exec.as_ref().map(|e| e.stats.clone()).unwrap_or_default()
    }

    /// What the compiler did to the graph that runs on a GPU (its
    /// [`CompileStats::cuda_kernels`]: the fused kernels that run as CUDA
    /// kernels there), once a call has run on one (`None` before, and
    /// where the compiler is off or the graph is not static).
    ///
    /// A call whose inputs or variables are on a GPU runs a copy of the
    /// traced graph compiled for it: simplified and fused as on the CPU
    /// (without the passes for the CPU's kernels, and without fused
    /// partial reductions, which stay nodes), each fused kernel a CUDA
    /// kernel generated from its program, every other node its op on its
    /// GPU kernel.
    pub fn gpu_compile_stats(&self) -> Option<CompileStats> {
        match self.gpu_exec.get() {
            Some(Ok(e)) => Some(e.stats.clone()),
            _ => None,
        }
    }

    /// Whether runs on a GPU replay a CUDA graph (see
    /// [`cuda_graph_launches`](crate::cuda_graph_launches)): `None` before a
    /// call has run on a GPU (or without the compiler), else a line saying
    /// `"replayed"`, `"not yet captured"` or why the graph cannot be
    /// replayed (a random op, a value read on the host, ...).
    pub fn cuda_graph_status(&self) -> Option<String> {
        match self.gpu_exec.get() {
            Some(Ok(e)) => e.plan.cuda_graph_status(),
            _ => None,
        }
    }

    /// The graph that runs on a GPU (see
    /// [`gpu_compile_stats`](Self::gpu_compile_stats)), once a call has
    /// run on one.
    pub fn gpu_optimized_graph(&self) -> Option<&Graph> {
        match self.gpu_exec.get() {
            Some(Ok(e)) => Some(&e.graph),
            _ => None,
        }
    }

    /// The executable for a GPU, compiled at its first use (`None` where
    /// the function has no executable: compiler off, graph not static).
    fn gpu_executable(&self) -> Option<Result<&Executable>> {
        self.exec.as_ref()?;
        let made = self
            .gpu_exec
            .get_or_init(|| Executable::compile_for_gpu(&self.graph, &self.compile));
        Some(made.as_ref().map_err(Clone::clone))
    }

    /// Runs the executable graph when it was planned for these inputs'
    /// shapes (the one for a GPU when the function runs on one), else the
    /// traced one. The caller hides tapes and traces (a fused kernel
    /// records nothing).
    fn run_graph(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut out = Vec::new();
        self.run_graph_into(inputs, &mut out)?;
        Ok(out)
    }

    /// [`run_graph`](Self::run_graph), appending the outputs to `out`.
    fn run_graph_into(&self, inputs: &[Tensor], out: &mut Vec<Tensor>) -> Result<()> {
        let gpu = self.optimize && self.on_gpu(inputs);
        // (control flow's sub-graphs run as traced on a GPU: their
        // compiled copies are the CPU's)
        let compiled = self.optimize && !gpu;
        compile::with_compiled_subgraphs(compiled.then_some(self.compile), || {
            let exec = match gpu {
                true => self.gpu_executable().transpose()?,
                false => self.exec.as_ref().filter(|_| compiled),
            };
            match exec {
                Some(e) if e.fits(inputs) => e.run_into(inputs, out),
                _ => {
                    out.extend(self.graph.run(inputs, &self.plan)?);
                    Ok(())
                }
            }
        })
        // (a node's error names this function)
        .map_err(|e| e.in_function(&self.name))
    }

    /// Whether the function runs on a GPU: an input or a variable is there.
    /// The compiled executable's fused kernels are the CPU's, so on a GPU
    /// the executable compiled for a GPU runs instead.
    fn on_gpu(&self, inputs: &[Tensor]) -> bool {
        inputs.iter().any(|t| t.device().is_cuda()) || self.variables.iter().any(|v| v.device().is_cuda())
    }

    /// Whether its runs go through the traced graph's own executor (it has
    /// no compiled one: not optimised, or its shapes are not static),
    /// whose nodes tell a shape that changed before any write from one
    /// after (see `Graph::run`).
    pub(crate) fn runs_traced_graph(&self) -> bool {
        !self.optimize || self.exec.is_none()
    }

    /// Runs the traced graph on flat arguments (the captures added), never
    /// the optimised one: to check the compiler against.
    pub(crate) fn run_traced(&self, args: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut inputs: Vec<Tensor> = args.to_vec();
        inputs.extend(self.captures.iter().cloned());
        self.check_inputs(&inputs)?;
        trace::paused(|| {
            tape::without_tapes(|| compile::with_compiled_subgraphs(None, || self.graph.run(&inputs, &self.plan)))
        })
        .map_err(|e| e.in_function(&self.name))
    }

    /// Runs the optimised graph (the traced one if there is none), with
    /// tapes and traces hidden.
    pub(crate) fn run_optimized(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        trace::paused(|| tape::without_tapes(|| self.run_graph(inputs)))
    }

    /// Whether the optimised graph may add numbers in another order than
    /// the traced one.
    pub(crate) fn reassociates(&self) -> bool {
        self.exec.as_ref().is_some_and(Executable::reassociates)
    }

    /// The function's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn flat_fn(&self) -> &FlatFn {
        &self.flat_fn
    }

    pub(crate) fn captures(&self) -> &[Tensor] {
        &self.captures
    }

    /// [`call_inputs`](Self::call_inputs) into `out` (emptied first): a
    /// call outside tapes and traces appends the graph's outputs to it
    /// without a vector of its own.
    pub(crate) fn call_inputs_into(self: &Arc<Self>, inputs: &[Tensor], out: &mut Vec<Tensor>) -> Result<()> {
        out.clear();
        if crate::dispatch::listening() {
            *out = self.call_inputs(inputs)?;
            return Ok(());
        }
        self.check_inputs(inputs)?;
        self.run_graph_into(inputs, out)
    }

    /// Calls the function on all its graph inputs (arguments and captures).
    pub(crate) fn call_inputs(self: &Arc<Self>, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.check_inputs(inputs)?;
        let tracing = trace::recording();
        let taped = crate::dispatch::differentiating();
        if !tracing && !taped {
            return self.run_graph(inputs);
        }
        let (vars, consts) = if taped {
            (self.grad_variables(), self.grad_constants())
        } else {
            Default::default()
        };
        let differentiable =
            taped && (inputs.iter().any(|t| t.dtype().is_differentiable()) || !vars.is_empty() || !consts.is_empty());
        let made_before = TensorId::fresh();
        let (outputs, saved) = match differentiable.then(|| self.backward_for(inputs, &vars, &consts)) {
            Some(Ok(bw)) => {
                // (where the forward run's draws start: a recomputation
                // for higher orders draws them again, see `record_on_tapes`)
                let at = crate::ops::random::snapshot(bw.generators());
                let mut all = bw.forward.run_optimized(inputs)?;
                let saved = all.split_off(self.graph.outputs.len());
                (all, Some((bw, saved, at)))
            }
            // no gradient function: the call still runs (an error surfaces
            // if a gradient is asked for)
            _ => (self.run_optimized(inputs)?, None),
        };
        // an op's outputs must be new tensors, distinct from its inputs, from
        // each other and from every tensor made before (a function may return
        // an argument, a value twice, or a constant: see `new_tensors`)
        let (outputs, saved) = {
            let n = outputs.len();
            let mut all = outputs;
            let saved = saved.map(|(bw, s, at)| {
                all.extend(s);
                (bw, at)
            });
            let mut all = super::control::new_tensors(all, made_before);
            let rest = all.split_off(n);
            (all, saved.map(|(bw, at)| (bw, rest, at)))
        };
        if tracing {
            // a differentiated call runs the forward graph, whose saved values
            // the gradient (traced too) reads: record that graph's call
            let refs: Vec<&Tensor> = inputs.iter().collect();
            match &saved {
                Some((bw, s, _)) => {
                    let all: Vec<Tensor> = outputs.iter().chain(s).cloned().collect();
                    trace::record(Op::Dyn(Arc::new(Call(bw.forward.clone()))), &refs, &all);
                }
                None => trace::record(Op::Dyn(Arc::new(Call(self.clone()))), &refs, &outputs),
            }
        }
        if differentiable {
            self.record_on_tapes(inputs, &outputs, saved, vars, consts);
        }
        Ok(outputs)
    }

    fn check_inputs(&self, inputs: &[Tensor]) -> Result<()> {
        if inputs.len() != self.graph.inputs.len() {
            return Err(Error::invalid(
                "function",
                format!(
                    "'{}' takes {} tensors, got {}",
                    self.name,
                    self.graph.inputs.len() - self.captures.len(),
                    inputs.len() - self.captures.len().min(inputs.len())
                ),
            ));
        }
        for (i, (t, &v)) in inputs.iter().zip(&self.graph.inputs).enumerate() {
            let want = &self.graph.values[v as usize];
            if t.dtype() != want.dtype {
                return Err(Error::invalid(
                    "function",
                    format!(
                        "'{}': argument {i} has dtype {}, the function was traced for {}",
                        self.name,
                        t.dtype(),
                        want.dtype
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The gradient split for these inputs' shapes, built on first use.
    /// The variables the graph reads that a differentiated call gives
    /// gradients to: the trainable ones, and the others an active tape or
    /// accumulator watches (an eager read of those is recorded too; the
    /// call gave them no gradient once, where TensorFlow's does).
    fn grad_variables(&self) -> Vec<Variable> {
        self.variables
            .iter()
            .filter(|v| tape::differentiates_variable(v))
            .cloned()
            .collect()
    }

    /// The tensors the graph holds as constants (captured by the closure)
    /// that a differentiated call gives gradients to: those an active tape
    /// or accumulator watches (or made by a recorded op), as the eager
    /// closure's ops on them would be recorded (TensorFlow passes a
    /// function's captured tensors to its call as inputs).
    fn grad_constants(&self) -> Vec<Tensor> {
        let mut out: Vec<Tensor> = Vec::new();
        for n in &self.graph.nodes {
            if let Op::Const(t) = &n.op
                && t.dtype().is_differentiable()
                && !out.iter().any(|c| c.id() == t.id())
                && tape::watched_now(t.id())
            {
                out.push(t.clone());
            }
        }
        out
    }

    /// The gradient split for these inputs' shapes, variables `vars`
    /// (`grad_variables`) and constants `consts` (`grad_constants`), built
    /// on first use.
    fn backward_for(&self, inputs: &[Tensor], vars: &[Variable], consts: &[Tensor]) -> Result<Arc<Backward>> {
        let lock = || self.backward.lock().unwrap_or_else(|e| e.into_inner());
        let handles = extra_ids(vars, consts);
        {
            let mut built = lock();
            if let Some(i) = built
                .iter()
                .position(|(s, h, _)| same_shapes(s, inputs) && *h == handles)
            {
                let hit = built.remove(i);
                let out = hit.2.clone();
                built.push(hit);
                return out;
            }
        }
        // built without the lock: tracing the gradient may call this function
        let made = grad::build_backward(self, inputs, vars.to_vec(), consts.to_vec()).map(Arc::new);
        let mut built = lock();
        if built.len() >= MAX_BACKWARDS {
            drop(built.remove(0));
        }
        built.push((
            inputs.iter().map(|t| layout::small_copy(t.shape())).collect(),
            handles,
            made.clone(),
        ));
        made
    }

    /// Why the gradient split for these inputs' shapes failed, if it did.
    fn backward_failure(&self, inputs: &[Tensor], vars: &[Variable], consts: &[Tensor]) -> Option<Error> {
        let built = self.backward.lock().unwrap_or_else(|e| e.into_inner());
        let handles = extra_ids(vars, consts);
        built
            .iter()
            .find(|(s, h, _)| same_shapes(s, inputs) && *h == handles)
            .and_then(|(_, _, b)| b.as_ref().err().cloned())
    }

    /// Records the call as one op on the active tapes (and accumulators):
    /// inputs, then the variables `vars` it differentiates; outputs, then the
    /// values its forward saved (so that higher-order tapes see how they
    /// depend on the inputs). Its rule runs the backward graph on the saved
    /// values while only outputs have cotangents, and the full gradient
    /// (recomputing the forward) once saved values have some too.
    fn record_on_tapes(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        saved: Option<SavedRun>,
        vars: Vec<Variable>,
        consts: Vec<Tensor>,
    ) {
        for v in &vars {
            tape::variable_accessed(v);
        }
        let mut ids: Vec<(TensorId, DType)> = inputs.iter().map(|t| (t.id(), t.dtype())).collect();
        ids.extend(vars.iter().map(|v| (v.handle(), v.dtype())));
        ids.extend(consts.iter().map(|c| (c.id(), c.dtype())));
        let Some((bw, saved, at)) = saved else {
            let name = self.name.clone();
            let failure = self.backward_failure(inputs, &vars, &consts);
            let rule = move || {
                vjp(move |_, _| {
                    Err(Error::invalid(
                        "function",
                        match &failure {
                            Some(e) => format!("'{name}' has no gradient: {e}"),
                            None => format!("'{name}' has no gradient"),
                        },
                    ))
                })
            };
            record_rule("Call", &ids, outputs, rule);
            return;
        };
        let n_out = outputs.len();
        let mut all = outputs.to_vec();
        all.extend(saved.iter().cloned());
        let metas: Vec<(Vec<usize>, DType)> = all.iter().map(|t| (t.shape().to_vec(), t.dtype())).collect();
        let held_inputs = inputs.to_vec();
        // (the recomputed forward draws what this run drew)
        let at = Arc::new(at);
        let rule = move || {
            let (bw2, ins2, at2) = (bw.clone(), held_inputs.clone(), at.clone());
            let dense = move |cts: &[Tensor], _: &[bool]| -> Result<Grads> {
                let pulled = replaying(bw2.generators(), &at2, || bw2.pull_full(&ins2, cts))?;
                Ok(pulled.into_iter().collect())
            };
            let optional = move |cts: &[Option<Tensor>], _: &[bool]| -> Result<Grads> {
                // zeros where no cotangent came, only for the values the
                // pull reads: a saved `[t, t]` mask or a huge broadcast
                // condition gets no buffer of zeros it would never read
                let filled = |n: usize| -> Result<Vec<Tensor>> {
                    cts[..n]
                        .iter()
                        .zip(&metas)
                        .map(|(c, (shape, dtype))| match c {
                            Some(c) => Ok(c.clone()),
                            // (no gradient flows through an integer or
                            // bool value: its zero is a broadcast view)
                            None if !dtype.is_float() && !dtype.is_complex() => {
                                Tensor::try_zeros(&[], *dtype)?.broadcast_to(shape)
                            }
                            None => Tensor::try_zeros(shape, *dtype),
                        })
                        .collect()
                };
                let grads = if cts[n_out..].iter().all(Option::is_none) {
                    bw.pull(&saved, &filled(n_out)?)?
                } else {
                    let cts = filled(cts.len())?;
                    replaying(bw.generators(), &at, || bw.pull_full(&held_inputs, &cts))?
                };
                Ok(grads.into_iter().collect())
            };
            vjp(dense).with_optional(optional)
        };
        record_rule("Call", &ids, &all, rule);
    }
}

/// What a differentiated call keeps for its gradient: the gradient
/// function, the saved values, and where the generators its forward graph
/// draws from stood before the run (see `ops::random::replaying`).
type SavedRun = (Arc<Backward>, Vec<Tensor>, Vec<(u64, u64)>);

/// The ids a gradient split is built for beside the inputs: the variables'
/// handles, then the constants'.
fn extra_ids(vars: &[Variable], consts: &[Tensor]) -> Vec<TensorId> {
    vars.iter()
        .map(Variable::handle)
        .chain(consts.iter().map(Tensor::id))
        .collect()
}

/// Whether `shapes` are the shapes of `inputs`.
fn same_shapes(shapes: &[Shape], inputs: &[Tensor]) -> bool {
    shapes.iter().map(|s| &s[..]).eq(inputs.iter().map(Tensor::shape))
}

/// A call of a concrete function, as a node of an enclosing graph.
pub(crate) struct Call(pub Arc<ConcreteFunction>);

impl DynOp for Call {
    fn name(&self) -> &'static str {
        "Call"
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        Ok(self.0.call_inputs(inputs)?.into_iter().collect())
    }
    fn stateful(&self) -> bool {
        self.0.graph.nodes.iter().any(|n| n.op.is_stateful())
    }
    fn writes(&self) -> bool {
        super::control::writes(&self.0.graph)
    }
    fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "['{}']", self.0.name)
    }
    fn subgraphs(&self) -> Vec<(String, crate::ops::desc::Erased)> {
        vec![(self.0.name.clone(), self.0.graph.clone() as crate::ops::desc::Erased)]
    }
    fn static_shapes(&self) -> bool {
        compile::is_static(&self.0.graph)
    }
}
