//! The graph compiler: what a traced graph goes through before it runs.
//!
//! A [`ConcreteFunction`](super::ConcreteFunction) keeps two graphs. The
//! *traced* graph (after dead-code and common-subexpression elimination)
//! is the one users print and the one symbolic differentiation reads: its
//! nodes are the ops the closure ran. The *executable* graph is a copy
//! that only runs, made by these passes, each in its own module:
//!
//! 1. `fold` — constant folding: nodes of constants run once, here.
//! 2. `simplify` — algebraic simplification: `x * 1`, identities,
//!    casts and reshapes to the same type and shape, transpose and reshape
//!    chains.
//! 3. common-subexpression and dead-code elimination again (folding and
//!    simplification expose more).
//! 4. `pair` — nodes that share work merged: a max pool and the
//!    positions of its maxima (which its gradient reads) from one pass.
//! 5. `join` — a sum of matrix products (a weight's gradient over the
//!    steps of a loop) becomes one product of operands joined along the
//!    shared dimension: one long product split over the threads instead of
//!    a small product and an addition per step. The same module stacks
//!    products of many left operands by one right operand (an RNN's
//!    `x_t W`, all inputs) into one product, sliced (bit for bit).
//!    Then `transpose`: a weight read transposed by many small products
//!    (an RNN's `g Uᵀ` at every step) is transposed once, and the products
//!    read the copy as is (the GEMM kernel reads such an operand in place).
//!    Then `diag`: a product with an operand made elementwise from a
//!    constant diagonal matrix (a Jacobian's seed, the identity) becomes a
//!    node that scales the other operand's rows or columns when the operand
//!    is diagonal at run time (bit for bit the product's values), and runs
//!    the product otherwise.
//! 6. `fuse` — elementwise fusion: chains and trees of elementwise ops
//!    (with scalar operands, row and column broadcasts, and sums, maxima
//!    and minima over all, the leading or the trailing axes) become one
//!    kernel (`kernel`) that reads each input once and writes each output once.
//! 7. `keep` — a dense convolution hands its im2col matrix to the filter
//!    gradient of the same input (as the tape's rule does), which then
//!    does not build it again.
//! 8. `hoist` — a fused reduction of a gradient (a norm, a checksum)
//!    traced after variable updates runs before them, while the gradient
//!    its product made is still in cache.
//!
//! The result runs on the `exec` executor: a plan made here, once (which
//! slot each node reads, and whether for the last time), values moved out
//! at their last read, fused kernels writing into the buffers of
//! inputs that nothing else holds, and adjacent independent products (a
//! layer's input and weight gradients) run at the same time, one per
//! thread (`together`), bit for bit as one after the other.
//!
//! The executable graph is planned for the traced shapes of the inputs; a
//! call with other shapes (a signature with `None` dims) runs the traced
//! graph instead, and a graph whose inner shapes may change from call to
//! call (data-dependent shapes, a loop that changes its variables' shapes
//! or keeps a history, branches of other shapes; see `is_static`) is not
//! compiled. Control flow is compiled at two levels: a static `cond` or
//! `while_loop` is one node of the compiled graph, and its branches or
//! body are compiled on their own (where static) the first time they run
//! in a function whose compiler is on, also when the enclosing graph is
//! not static. [`CompileStats`] says what each pass did, and
//! [`ConcreteFunction::optimized_graph`](super::ConcreteFunction::optimized_graph)
//! shows the result. Setting `GRADTAPE_GRAPH_OPT=0` in the environment (or
//! [`FunctionOptions::optimize`](super::FunctionOptions::optimize) to
//! `false`) runs traced graphs as traced.
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

pub(crate) mod diag;
pub(crate) mod exec;
pub(crate) mod fold;
pub(crate) mod fuse;
pub(crate) mod hoist;
pub(crate) mod join;
pub(crate) mod keep;
pub(crate) mod kernel;
pub(crate) mod pair;
pub(crate) mod simplify;
pub(crate) mod together;
pub(crate) mod transpose;

use super::graph::Graph;
use super::passes;
use crate::error::Result;
use crate::ops::desc::Op;
use crate::tensor::{Shape, Tensor};

/// What the compiler's passes did to one graph.
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
    /// Convolutions whose im2col matrix their filter gradient reuses.
    pub kept: usize,
}

/// A graph ready to run: the optimised copy and its run plan.
pub(crate) struct Executable {
    pub(crate) graph: Graph,
    pub(crate) plan: exec::Plan,
    pub(crate) stats: CompileStats,
    /// the input shapes it was planned for
    shapes: Vec<Shape>,
    /// sums computed by fused kernels or joined products (in another
    /// order)
    fused_sums: usize,
}

impl Executable {
    /// Runs the passes on a copy of `traced`.
    pub(crate) fn compile(traced: &Graph) -> Executable {
        let mut g = traced.clone();
        let mut stats = CompileStats {
            nodes_before: traced.len(),
            ..CompileStats::default()
        };
        stats.folded = fold::fold(&mut g);
        stats.simplified = simplify::simplify(&mut g);
        passes::cse(&mut g);
        passes::dce(&mut g);
        stats.merged = pair::pair(&mut g);
        stats.joined = join::join_products(&mut g);
        if stats.joined > 0 {
            passes::dce(&mut g);
        }
        stats.stacked = join::stack_products(&mut g);
        stats.transposed = transpose::transpose_once(&mut g);
        stats.diagonal = diag::diagonal_products(&mut g);
        let (fused, fused_sums) = fuse::fuse(&mut g);
        stats.kept = keep::keep_cols(&mut g);
        hoist::hoist_reductions(&mut g);
        // values renumbered: a run's slots are only those still made
        let all: Vec<usize> = (0..g.len()).collect();
        let g = passes::extract(&g, &all, &g.inputs, &g.outputs);
        stats.kernels = g.count("Fused");
        stats.fused = fused;
        stats.nodes_after = g.len();
        let reordered = fused_sums + stats.joined;
        let shapes = g.inputs.iter().map(|&v| g.values[v as usize].shape.clone()).collect();
        Executable {
            plan: exec::Plan::new(&g),
            graph: g,
            stats,
            shapes,
            fused_sums: reordered,
        }
    }

    /// Whether these inputs have the shapes the graph was planned for.
    pub(crate) fn fits(&self, inputs: &[Tensor]) -> bool {
        inputs.len() == self.shapes.len() && inputs.iter().zip(&self.shapes).all(|(t, s)| t.shape() == &s[..])
    }

    /// Runs the executable graph.
    pub(crate) fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
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
/// have theirs: no op whose output shape depends on input values (sorting,
/// searching and segment ops: `unique`, `boolean_mask`, `segment_sum`,
/// ...), and control flow and calls only where their shapes are fixed
/// ([`DynOp::static_shapes`](crate::ops::desc::DynOp::static_shapes): a
/// loop that keeps its variables' shapes and keeps no history, branches
/// that return the same shapes, calls of static graphs). Only such graphs
/// are compiled: the passes plan with the traced shapes.
pub(crate) fn is_static(g: &Graph) -> bool {
    g.nodes.iter().all(|n| match &n.op {
        Op::Dyn(d) => d.static_shapes(),
        Op::Sort(_) | Op::Opaque(_) => false,
        _ => true,
    })
}

thread_local! {
    static SUBGRAPHS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the sub-graphs of control flow (branches, loop bodies)
/// compiled (`on`) or run as traced: a function's graph runs them as it
/// runs itself (the traced graph, which the compiler is checked against,
/// runs traced ones).
pub(crate) fn with_compiled_subgraphs<R>(on: bool, f: impl FnOnce() -> R) -> R {
    crate::scoped::with_flag(&SUBGRAPHS, on, f)
}

/// Whether control-flow sub-graphs run compiled now (see
/// [`with_compiled_subgraphs`]).
pub(crate) fn subgraphs_compiled() -> bool {
    SUBGRAPHS.with(|s| s.get())
}

/// Whether graphs are optimised (the `GRADTAPE_GRAPH_OPT` variable: `0`
/// turns the compiler off).
pub(crate) fn enabled_by_env() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GRADTAPE_GRAPH_OPT").map_or(true, |v| v != "0"))
}

/// Puts each `(i, node)` of `new` before the graph's node `i` (nodes for
/// one `i` in the order given), the passes' one way of inserting nodes.
pub(crate) fn insert_before(g: &mut Graph, mut new: Vec<(usize, super::graph::Node)>) {
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
