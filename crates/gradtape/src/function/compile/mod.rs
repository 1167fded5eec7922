//! The graph compiler: what a traced graph goes through before it runs.
//!
//! A [`ConcreteFunction`](super::ConcreteFunction) keeps two graphs. The
//! *traced* graph (after dead-code and common-subexpression elimination)
//! is the one users print and the one symbolic differentiation reads: its
//! nodes are the ops the closure ran. The *executable* graph is a copy
//! that only runs, made by a list of passes (`pipeline::PASSES`), each
//! named after what it does, each in the module of that name (the
//! `pipeline` module runs them, counts their rewrites into
//! [`CompileStats`], and checks the graph after each):
//!
//! 1. `fold` — constant folding: nodes of constants run once, here.
//! 2. `simplify` — algebraic simplification: `x * 1`, identities,
//!    casts and reshapes to the same type and shape, transpose and reshape
//!    chains.
//!    `pads_to_concat` — a sum of zero-padded parts that do not overlap
//!    (the gradient of a `split`) becomes one concatenation of the parts.
//!    `concat_of_reshapes` — a concatenation of reshapes that copy (heads
//!    merged back) concatenates their sources, and reshapes the result
//!    without a copy.
//! 3. `cse` and `dce` — common-subexpression and dead-code elimination
//!    again (folding and simplification expose more).
//!    `grads_into_concat` — an op whose packed parts (attention's `dq`,
//!    `dk`, `dv`) are sliced, viewed and concatenated writes them straight
//!    into the concatenation's slices; the views and the copy go.
//! 4. `pool_argmax` — a max pool and the positions of its maxima (which
//!    its gradient reads) from one pass of the pooling kernel.
//!    `xent_keeps_softmax` — a sparse softmax cross-entropy writes its
//!    softmax for its gradient node, which reads it in place of the
//!    logits (the eager op's pair; the rows' exponentials made once).
//!    `residual_into_norm_grad` — a residual gradient added to a layer
//!    norm's `dx` is added by the norm's gradient kernel as it writes `dx`
//!    (one pass over the tensor fewer). `scale_into_update` — a scalar
//!    factor of an optimizer step's dense gradients (a global-norm
//!    clipping's) is multiplied by the update loop as it reads each
//!    gradient, instead of by `Mul` nodes that write the products out.
//! 5. `join_products` — a sum of matrix products (a weight's gradient over
//!    the steps of a loop) becomes one product of operands joined along
//!    the shared dimension. `stack_products` — products of many left
//!    operands by one right operand (an RNN's `x_t W`) become one product,
//!    sliced (bit for bit). `sums_after_loops` — a sum a `while_loop`
//!    carries (its gradient's `dW ← dW + x_tᵀ dz_t`) is taken out of it: the
//!    loop stacks the operands, and one product over all their rows after
//!    the iterations gives the sum.
//! 6. `transpose_once` — a weight read transposed by many small products
//!    (an RNN's `g Uᵀ` at every step) is transposed once, and the products
//!    read the copy as is.
//! 7. `diag_matmul` — a product with an operand made elementwise from a
//!    constant diagonal matrix (a Jacobian's seed, the identity) scales
//!    the other operand's rows or columns when the operand is diagonal at
//!    run time (bit for bit the product's values), and runs the product
//!    otherwise.
//! 8. `fuse` — elementwise fusion: chains and trees of elementwise ops
//!    (with scalar operands, row and column broadcasts, and sums, maxima
//!    and minima over all, the leading or the trailing axes) become one
//!    kernel (`kernel`) that reads each input once and writes each output once.
//! 9. `share_im2col` — a dense convolution hands its im2col matrix to the
//!    filter gradient of the same input (as the tape's rule does), which
//!    then does not build it again.
//! 10. `hoist_reductions` — a fused reduction (a norm, a checksum) traced
//!     after variable updates runs before them, while its operand is still
//!     in cache.
//! 11. `pair_products` — rewrites nothing: adjacent independent products
//!     (a layer's input and weight gradients) run at the same time, one per
//!     thread, bit for bit as one after the other, where their first runs
//!     find the two tasks balanced, or else the pair faster so (timed both
//!     ways).
//!
//! Each pass can be switched off by name
//! ([`CompileOptions::disable_pass`], on
//! [`FunctionOptions::compile`](super::FunctionOptions::compile); the
//! function's `cond` branches and loop bodies compile with its options
//! too), and [`CompileStats::count`] gives its count by name.
//!
//! The result runs on the `exec` executor: a plan made here, once (which
//! slot each node reads, and whether for the last time), values moved out
//! at their last read, fused kernels writing into the buffers of
//! inputs that nothing else holds, and the pairs of `pair_products` run
//! at the same time.
//!
//! The executable graph is planned for the traced shapes of the inputs; a
//! call with other shapes (a signature with `None` dims) runs the traced
//! graph instead, and a graph whose inner shapes may change from call to
//! call (data-dependent shapes, a loop that changes its variables' shapes
//! or keeps a history, branches of other shapes; see `is_static`) is not
//! compiled. (Its traced graph checks the shapes its data-dependent ops
//! give against the trace: the nodes after them were traced for those
//! shapes, so a call where they change is traced again; see
//! `Function::call`.) Control flow is compiled at two levels: a static `cond` or
//! `while_loop` is one node of the compiled graph, and its branches or
//! body are compiled on their own (where static) the first time they run
//! in a function whose compiler is on, also when the enclosing graph is
//! not static. [`CompileStats`] says what each pass did, and
//! [`ConcreteFunction::optimized_graph`](super::ConcreteFunction::optimized_graph)
//! shows the result. Setting `GRADTAPE_GRAPH_OPT=0` in the environment (or
//! [`FunctionOptions::optimize`](super::FunctionOptions::optimize) to
//! `false`) runs traced graphs as traced.
//!
//! **On a GPU.** A call whose inputs or variables are on a GPU runs
//! another executable copy, compiled at the first such call
//! (`Executable::compile_for_gpu`): the same traced graph through the
//! passes that run anywhere (`pipeline::GPU_PASSES`: simplification,
//! `merge_reads`, `cse`, `dce` and fusion, the last without partial reductions, which
//! stay nodes). Each fused kernel is then a CUDA kernel generated from its
//! program (`kernel::cuda`, run by `kernels::cuda::fused`), made once per
//! compiled graph; every other node runs its op, on its GPU kernel.
//! `ConcreteFunction::gpu_compile_stats` says what was made.
//!
//! Values: folding runs the same kernels ahead of time, simplification
//! removes only exact identities, and a fused kernel computes each op as
//! its own kernel does, so an optimised graph gives the traced graph's
//! values bit for bit, except for fused sums and joined sums of products,
//! which add in another order (`Executable::reassociates`).
//!
//! ```
//! use gradtape::{function, Tensor};
//! let f = function(|x: &Tensor| x.sin()?.exp()?.mul(x)?.sum_all());
//! let x = Tensor::vector(&[0.5f32, 1.0, 1.5]);
//! let c = f.concrete(&x)?;
//! assert_eq!(c.graph().len(), 4);            // Sin, Exp, Mul, Sum as traced
//! assert_eq!(c.optimized_graph().len(), 1);  // one fused kernel
//! assert_eq!(c.compile_stats().fused, 4);
//! let y = f.call(&x)?.to_scalar::<f32>()?;
//! let want: f32 = [0.5f32, 1.0, 1.5].iter().map(|v| v.sin().exp() * v).sum();
//! assert!((y - want).abs() < 1e-5);
//! # Ok::<(), gradtape::Error>(())
//! ```

pub(crate) mod concat_of_reshapes;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod diag_matmul;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod exec;
pub(crate) mod fold;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod fuse;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod grads_into_concat;
pub(crate) mod hoist_reductions;
pub(crate) mod join_products;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod kernel;
pub(crate) mod merge_reads;
pub(crate) mod pads_to_concat;
pub(crate) mod pair_products;
pub(crate) mod pipeline;
pub(crate) mod pool_argmax;
mod profile;
pub(crate) mod remat;
#[cfg(feature = "cuda")]
mod replay;
pub(crate) mod residual_into_norm_grad;
pub(crate) mod scale_into_update;
pub(crate) mod share_im2col;
pub(crate) mod sharing;
pub(crate) mod simplify;
pub(crate) mod sums_after_loops;
pub(crate) mod transpose_once;
pub(crate) mod xent_keeps_softmax;

pub use pipeline::CompileOptions;
pub use profile::{profile, report, ProfileLine};

use super::graph::{Graph, Node};
use super::passes;
use crate::error::Result;
use crate::ops::desc::Op;
use crate::tensor::Tensor;

/// What the compiler's passes did to one graph: per pass, by name, how
/// many rewrites it made ([`count`](CompileStats::count)), and the counts
/// of some passes in fields of their own.
///
/// ```
/// use gradtape::{function, Tensor};
/// let f = function(|x: &Tensor| x.mul_scalar(1.0)?.exp()?.sin());
/// let s = f.concrete(&Tensor::vector(&[0.5f32, 1.0]))?.compile_stats();
/// assert_eq!(s.count("simplify"), Some(1)); // x * 1 is x
/// assert_eq!(s.count("fuse"), Some(2)); // exp and sin in one kernel
/// assert_eq!(s.count("fuse"), Some(s.fused));
/// assert_eq!(s.count("nonesuch"), None);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompileStats {
    /// Nodes of the traced graph.
    pub nodes_before: usize,
    /// Nodes of the executable graph.
    pub nodes_after: usize,
    /// Nodes replaced by constants.
    pub folded: usize,
    /// Nodes removed or shortened by algebraic simplification.
    pub simplified: usize,
    /// Pairs of nodes merged into one (a max pool and its positions).
    pub merged: usize,
    /// Sums of matrix products computed as one product of joined operands.
    pub joined: usize,
    /// Groups of products by one right operand stacked into one product.
    pub stacked: usize,
    /// Operands of products given a transposed copy, made once per run.
    pub transposed: usize,
    /// Products with a likely diagonal operand, run as a scaling when it is.
    pub diagonal: usize,
    /// Nodes merged into fused kernels.
    pub fused: usize,
    /// Fused kernels made.
    pub kernels: usize,
    /// Fused kernels given a CUDA program (in a graph compiled for a GPU:
    /// see [`ConcreteFunction::gpu_compile_stats`](super::ConcreteFunction::gpu_compile_stats)).
    pub cuda_kernels: usize,
    /// Convolutions whose im2col matrix their filter gradient reuses.
    pub kept: usize,
    /// Every pass that ran, in order, with the number of rewrites it made.
    pub passes: Vec<(&'static str, usize)>,
}

impl CompileStats {
    /// How many rewrites the pass `name` made (`None`: it did not run, or
    /// no pass has that name; see
    /// [`CompileOptions::pass_names`]).
    pub fn count(&self, name: &str) -> Option<usize> {
        self.passes.iter().find(|(n, _)| *n == name).map(|&(_, c)| c)
    }
}

// (the struct is in `exec`, a private module, so that the test binaries
// can reach it through `__internals` without it being API)
pub(crate) use exec::Executable;

impl Executable {
    /// Runs the passes `opts` leaves on over a copy of `traced`. Fails
    /// only where the graph is checked after each pass
    /// ([`CompileOptions::verify`]) and a pass broke it.
    pub fn compile(traced: &Graph, opts: &CompileOptions) -> Result<Executable> {
        Executable::compile_for(traced, opts, false)
    }

    /// The executable of `traced` for a GPU: made by the passes of
    /// `pipeline::GPU_PASSES` that `opts` leaves on, its fused nodes given
    /// their CUDA kernels now (see `kernel::cuda`); its other nodes run
    /// their ops, on their GPU kernels.
    pub fn compile_for_gpu(traced: &Graph, opts: &CompileOptions) -> Result<Executable> {
        Executable::compile_for(traced, opts, true)
    }

    fn compile_for(traced: &Graph, opts: &CompileOptions, gpu: bool) -> Result<Executable> {
        let mut g = traced.clone();
        let mut stats = CompileStats {
            nodes_before: traced.len(),
            ..CompileStats::default()
        };
        let mut cx = pipeline::PassCx {
            gpu,
            ..Default::default()
        };
        pipeline::run(&mut g, opts, &mut stats, &mut cx)?;
        // values renumbered: a run's slots are only those still made
        let all: Vec<usize> = (0..g.len()).collect();
        let g = passes::extract(&g, &all, &g.inputs, &g.outputs);
        if opts.verifies() {
            pipeline::checked(&g, "(renumbering)")?;
        }
        stats.kernels = g
            .nodes
            .iter()
            .filter(|n| n.op.as_dyn::<fuse::Fused>().is_some())
            .count();
        if gpu {
            stats.cuda_kernels = g
                .nodes
                .iter()
                .filter_map(|n| n.op.as_dyn::<fuse::Fused>())
                .filter(|f| f.cuda_kernel().is_some())
                .count();
        }
        stats.nodes_after = g.len();
        let shapes = g.inputs.iter().map(|&v| g.values[v as usize].shape.clone()).collect();
        Ok(Executable {
            plan: exec::Plan::new(&g, cx.pair_products),
            graph: g,
            stats,
            shapes,
            fused_sums: cx.reassociated,
        })
    }

    /// Whether these inputs have the shapes the graph was planned for.
    pub(crate) fn fits(&self, inputs: &[Tensor]) -> bool {
        inputs.len() == self.shapes.len() && inputs.iter().zip(&self.shapes).all(|(t, s)| t.shape() == &s[..])
    }

    /// Runs the executable graph.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut out = Vec::new();
        self.run_into(inputs, &mut out)?;
        Ok(out)
    }

    /// Runs the executable graph, appending its outputs to `out`.
    pub(crate) fn run_into(&self, inputs: &[Tensor], out: &mut Vec<Tensor>) -> Result<()> {
        // (its products are back to back: smaller ones are worth splitting
        // over the threads than in eager code)
        #[cfg(target_arch = "x86_64")]
        return crate::kernels::cpu::sgemm::split_small(|| self.plan.run_into(&self.graph, inputs, out));
        #[cfg(not(target_arch = "x86_64"))]
        self.plan.run_into(&self.graph, inputs, out)
    }

    /// Whether a run may add numbers in another order than the traced
    /// graph (a fused sum, a joined sum of products).
    pub(crate) fn reassociates(&self) -> bool {
        self.fused_sums > 0
    }
}

/// Whether every value of `g` has its traced shape whenever the inputs
/// have theirs: no op whose output shape depends on input values (`unique`,
/// `boolean_mask`, `bincount`, the sorted `segment_sum`, ...: see
/// [`SortOp::static_shape`](crate::ops::desc::SortOp::static_shape); the
/// sorts, `top_k`, searches, `unsorted_segment_*` and scatter updates have
/// static shapes, and a graph of them is compiled), and control flow and calls only where their shapes are fixed
/// ([`DynOp::static_shapes`](crate::ops::desc::DynOp::static_shapes): a
/// loop that keeps its variables' shapes and keeps no history, branches
/// that return the same shapes, calls of static graphs). Only such graphs
/// are compiled: the passes plan with the traced shapes.
///
/// A node whose some outputs may change shape (a loop keeping its history,
/// [`DynOp::dynamic_outputs`](crate::ops::desc::DynOp::dynamic_outputs))
/// does not stop it where only nodes that ignore those outputs' shapes
/// read them (the loop's gradient, a loop capturing the history,
/// [`DynOp::ignores_shape_of`](crate::ops::desc::DynOp::ignores_shape_of))
/// and no output of the graph is one: the passes leave such nodes alone,
/// and every other value keeps its traced shape.
pub(crate) fn is_static(g: &Graph) -> bool {
    let mut dynamic = vec![false; g.values.len()];
    for n in &g.nodes {
        let reads_dynamic = n.inputs.iter().enumerate().filter(|(_, v)| dynamic[**v as usize]);
        let ok = match &n.op {
            Op::Dyn(d) => reads_dynamic.into_iter().all(|(i, _)| d.ignores_shape_of(i)),
            _ => reads_dynamic.count() == 0,
        };
        if !ok {
            return false;
        }
        if node_is_static(n) {
            continue;
        }
        let Some(mask) = (match &n.op {
            Op::Dyn(d) => d.dynamic_outputs(),
            _ => None,
        }) else {
            return false;
        };
        if mask.len() != n.outputs.len() {
            return false;
        }
        for (&v, m) in n.outputs.iter().zip(mask) {
            dynamic[v as usize] = m;
        }
    }
    !g.outputs.iter().any(|&v| dynamic[v as usize])
}

/// Whether a node's outputs' shapes follow from its inputs' shapes.
pub(crate) fn node_is_static(n: &crate::function::graph::Node) -> bool {
    match &n.op {
        Op::Dyn(d) => d.static_shapes(),
        Op::Sort(s) => s.static_shape(),
        Op::Opaque(_) => false,
        _ => true,
    }
}

thread_local! {
    static SUBGRAPHS: std::cell::Cell<Option<CompileOptions>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with the sub-graphs of control flow (branches, loop bodies)
/// compiled with `opts` (the enclosing function's options, so a pass it
/// switches off is off in its branches and bodies too) or, with `None`,
/// run as traced: a function's graph runs them as it runs itself (the
/// traced graph, which the compiler is checked against, runs traced ones).
pub(crate) fn with_compiled_subgraphs<R>(opts: Option<CompileOptions>, f: impl FnOnce() -> R) -> R {
    struct Reset(Option<CompileOptions>);
    impl Drop for Reset {
        fn drop(&mut self) {
            SUBGRAPHS.with(|s| s.set(self.0));
        }
    }
    let _reset = Reset(SUBGRAPHS.with(|s| s.replace(opts)));
    f()
}

/// The options control-flow sub-graphs compile with now, `None` when they
/// run as traced (see [`with_compiled_subgraphs`]).
pub(crate) fn subgraphs_compiled() -> Option<CompileOptions> {
    SUBGRAPHS.with(|s| s.get())
}

/// Whether graphs are optimised (the `GRADTAPE_GRAPH_OPT` variable: `0`
/// turns the compiler off).
pub(crate) fn enabled_by_env() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GRADTAPE_GRAPH_OPT").map_or(true, |v| v != "0"))
}

/// The checks of `Graph::verify` for the compiler's own nodes: a fused
/// kernel takes and makes what its program does.
pub(crate) fn check_node(g: &Graph, node: &Node) -> std::result::Result<(), String> {
    match node.op.as_dyn::<fuse::Fused>() {
        Some(f) => f.check(g, node),
        None => Ok(()),
    }
}

/// For each value of `g`, the index of the node that makes it
/// (`usize::MAX` for the graph's inputs), and how many times the graph's
/// outputs and its live nodes read it (as dead-code elimination sees them:
/// a node is live when it has effects or a live read of an output; a node
/// an earlier pass left unused does not count).
pub(crate) fn makers_and_reads(g: &Graph) -> (Vec<usize>, Vec<usize>) {
    let mut made_by = vec![usize::MAX; g.values.len()];
    let mut reads = vec![0usize; g.values.len()];
    for &o in &g.outputs {
        reads[o as usize] += 1;
    }
    for (i, n) in g.nodes.iter().enumerate().rev() {
        for &o in &n.outputs {
            made_by[o as usize] = i;
        }
        if n.op.is_stateful() || n.outputs.iter().any(|&o| reads[o as usize] > 0) {
            for &v in &n.inputs {
                reads[v as usize] += 1;
            }
        }
    }
    (made_by, reads)
}

/// For each value of `g`, the index of the node that makes it
/// (`usize::MAX` for the graph's inputs), and how many times the graph's
/// outputs and all its nodes (live or not) read it: for the passes that
/// remove a node only where nothing at all reads its output.
pub(crate) fn makers_and_all_reads(g: &Graph) -> (Vec<usize>, Vec<usize>) {
    let mut made_by = vec![usize::MAX; g.values.len()];
    let mut reads = vec![0usize; g.values.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for &v in &n.outputs {
            made_by[v as usize] = i;
        }
        for &v in &n.inputs {
            reads[v as usize] += 1;
        }
    }
    for &v in &g.outputs {
        reads[v as usize] += 1;
    }
    (made_by, reads)
}

/// Puts each `(i, node)` of `new` before the graph's node `i` (nodes for
/// one `i` in the order given), the passes' one way of inserting nodes.
pub(crate) fn insert_before(g: &mut Graph, mut new: Vec<(usize, Node)>) {
    if new.is_empty() {
        return;
    }
    new.sort_by_key(|(i, _)| *i); // stable: keeps the order within one `i`
    let mut at = new.into_iter().peekable();
    let old = std::mem::take(&mut g.nodes);
    for (i, node) in old.into_iter().enumerate() {
        while let Some((_, n)) = at.next_if(|(j, _)| *j == i) {
            g.nodes.push(n);
        }
        g.nodes.push(node);
    }
}
