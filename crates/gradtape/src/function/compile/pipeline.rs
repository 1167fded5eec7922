//! The compiler as one list of passes: [`PASSES`], walked in order by
//! [`run`].
//!
//! Every pass has one signature, `fn(&mut Graph, &mut PassCx) -> usize`: it
//! rewrites the graph in place and returns how many rewrites it made (what
//! a rewrite is, each pass's module says). The driver skips the passes a
//! [`CompileOptions`] turns off by name, records each count in
//! [`CompileStats::passes`] (and in the named field of `CompileStats` a
//! pass feeds), and, when verification is on, checks the graph's
//! invariants (`Graph::verify`) after every pass: a pass that breaks one is
//! named in the error.
//!
//! Verification is on in debug builds, for a function whose
//! [`CompileOptions::verify`] is set, and everywhere when the environment
//! has `GRADTAPE_VERIFY_PASSES=1` (read once; the test binaries `function`
//! and `internals` set it).

use super::{
    concat_of_reshapes, diag_matmul, fold, fuse, grads_into_concat, hoist_reductions, join_products, merge_reads,
    pads_to_concat, pair_products, pool_argmax, remat, residual_into_norm_grad, scale_into_update, share_im2col,
    simplify, sums_after_loops, transpose_once, xent_keeps_softmax, CompileStats,
};
use crate::error::{Error, Result};
use crate::function::graph::Graph;
use crate::function::passes;

/// What passes tell the driver besides their counts.
#[derive(Default)]
pub struct PassCx {
    /// sums now computed in another order than the traced graph's (fused
    /// sums, joined sums of products)
    pub(crate) reassociated: usize,
    /// whether the plan runs adjacent independent products together
    /// (`pair_products` is on)
    pub(crate) pair_products: bool,
    /// whether the graph is compiled for a GPU (see [`GPU_PASSES`])
    pub(crate) gpu: bool,
}

/// The passes a graph compiled for a GPU goes through: those that only
/// rewrite the graph into nodes that run anywhere (simplification, merged
/// variable reads, common subexpressions, dead code) and elementwise fusion, whose fused kernels
/// run as CUDA kernels there (without partial reductions:
/// [`PassCx::gpu`]). The others make nodes of CPU kernels (`diag_matmul`,
/// `pool_argmax`, `share_im2col`), plan for the CPU's threads and caches
/// (`pair_products`, `hoist_reductions`, `transpose_once`), or make host
/// tensors or ops a GPU may not have (`fold`'s host constants,
/// `pads_to_concat`, `concat_of_reshapes`, `grads_into_concat`, `join_products`, `sums_after_loops`,
/// `stack_products`).
pub(crate) const GPU_PASSES: [&str; 5] = ["simplify", "merge_reads", "cse", "dce", "fuse"];

/// One pass of the compiler.
pub(crate) struct Pass {
    /// Its name, to switch it off by ([`CompileOptions::disable_pass`]) and
    /// to find its count by ([`CompileStats::count`]).
    pub(crate) name: &'static str,
    /// Rewrites the graph; returns how many rewrites it made.
    pub(crate) run: fn(&mut Graph, &mut PassCx) -> usize,
    /// The field of [`CompileStats`] its count also goes to, if it has one.
    stat: Option<fn(&mut CompileStats) -> &mut usize>,
}

/// The passes, in the order they run.
pub(crate) static PASSES: [Pass; 22] = [
    Pass {
        name: "fold",
        run: fold::run,
        stat: Some(|s| &mut s.folded),
    },
    Pass {
        name: "simplify",
        run: simplify::run,
        stat: Some(|s| &mut s.simplified),
    },
    Pass {
        name: "pads_to_concat",
        run: pads_to_concat::run,
        stat: None,
    },
    Pass {
        name: "concat_of_reshapes",
        run: concat_of_reshapes::run,
        stat: None,
    },
    // (before `cse`: what reads the merged reads may merge too)
    Pass {
        name: "merge_reads",
        run: merge_reads::run,
        stat: None,
    },
    // folding and simplification expose more of both
    Pass {
        name: "cse",
        run: cse,
        stat: None,
    },
    Pass {
        name: "dce",
        run: dce,
        stat: None,
    },
    // (after `dce`: it removes the views it replaces, and no dead node
    // may still read them)
    Pass {
        name: "grads_into_concat",
        run: grads_into_concat::run,
        stat: None,
    },
    Pass {
        name: "pool_argmax",
        run: pool_argmax::run,
        stat: Some(|s| &mut s.merged),
    },
    Pass {
        name: "xent_keeps_softmax",
        run: xent_keeps_softmax::run,
        stat: None,
    },
    // (before `fuse`, which would take the `Add` into a kernel)
    Pass {
        name: "residual_into_norm_grad",
        run: residual_into_norm_grad::run,
        stat: None,
    },
    // (before `fuse`, which would take the `Mul`s into kernels)
    Pass {
        name: "scale_into_update",
        run: scale_into_update::run,
        stat: None,
    },
    Pass {
        name: "join_products",
        run: join_products::run_join,
        stat: Some(|s| &mut s.joined),
    },
    Pass {
        name: "stack_products",
        run: join_products::run_stack,
        stat: Some(|s| &mut s.stacked),
    },
    Pass {
        name: "sums_after_loops",
        run: sums_after_loops::run,
        stat: None,
    },
    Pass {
        name: "transpose_once",
        run: transpose_once::run,
        stat: Some(|s| &mut s.transposed),
    },
    Pass {
        name: "diag_matmul",
        run: diag_matmul::run,
        stat: Some(|s| &mut s.diagonal),
    },
    Pass {
        name: "fuse",
        run: fuse::run,
        stat: Some(|s| &mut s.fused),
    },
    Pass {
        name: "remat",
        run: remat::run,
        stat: None,
    },
    Pass {
        name: "share_im2col",
        run: share_im2col::run,
        stat: Some(|s| &mut s.kept),
    },
    Pass {
        name: "hoist_reductions",
        run: hoist_reductions::run,
        stat: None,
    },
    // (rewrites nothing: marks the pairs the run plan runs together)
    Pass {
        name: "pair_products",
        run: pair_products::run,
        stat: None,
    },
];

/// Common-subexpression elimination; counts the nodes merged away.
fn cse(g: &mut Graph, _: &mut PassCx) -> usize {
    let before = g.len();
    passes::cse(g);
    before - g.len()
}

/// Dead-code elimination; counts the nodes removed.
fn dce(g: &mut Graph, _: &mut PassCx) -> usize {
    let before = g.len();
    passes::dce(g);
    before - g.len()
}

/// Settings of the graph compiler: which passes run, and whether the graph
/// is checked after each.
///
/// ```
/// use gradtape::{CompileOptions, Function, FunctionOptions, Tensor};
/// let opts = FunctionOptions {
///     compile: CompileOptions::default().disable_pass("fuse")?.verify(true),
///     ..Default::default()
/// };
/// let f = Function::with_options(|x: &Tensor| x.sin()?.exp(), opts);
/// let c = f.concrete(&Tensor::vector(&[0.5f32, 1.0]))?;
/// assert_eq!(c.optimized_graph().count("Fused"), 0); // not fused
/// assert_eq!(c.compile_stats().count("fuse"), None); // did not run
/// assert_eq!(c.compile_stats().count("fold"), Some(0)); // ran, found nothing
/// assert!(CompileOptions::default().disable_pass("fusion").is_err());
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct CompileOptions {
    /// bit `i`: pass `i` of `PASSES` is off
    disabled: u32,
    verify: bool,
}

impl CompileOptions {
    /// The names of the passes, in the order they run.
    ///
    /// ```
    /// use gradtape::CompileOptions;
    /// assert_eq!(CompileOptions::pass_names()[0], "fold");
    /// assert!(CompileOptions::pass_names().contains(&"fuse"));
    /// ```
    pub fn pass_names() -> Vec<&'static str> {
        PASSES.iter().map(|p| p.name).collect()
    }

    /// These options with the pass `name` off. An unknown name is an error
    /// that lists the known ones.
    pub fn disable_pass(mut self, name: &str) -> Result<Self> {
        let Some(i) = PASSES.iter().position(|p| p.name == name) else {
            return Err(Error::invalid(
                "compile",
                format!(
                    "no compiler pass is named '{name}'; the passes are {}",
                    Self::pass_names().join(", ")
                ),
            ));
        };
        self.disabled |= 1 << i;
        Ok(self)
    }

    /// These options with the graph checked after every pass (`on`), or
    /// only where verification is on anyway (debug builds,
    /// `GRADTAPE_VERIFY_PASSES=1`).
    pub fn verify(mut self, on: bool) -> Self {
        self.verify = on;
        self
    }

    /// Whether the pass `name` runs.
    pub fn runs(&self, name: &str) -> bool {
        PASSES
            .iter()
            .position(|p| p.name == name)
            .is_some_and(|i| self.disabled & (1 << i) == 0)
    }

    /// Whether graphs are checked after every pass.
    pub(crate) fn verifies(&self) -> bool {
        self.verify || cfg!(debug_assertions) || verify_by_env()
    }
}

impl std::fmt::Debug for CompileOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let off: Vec<&str> = PASSES.iter().filter(|p| !self.runs(p.name)).map(|p| p.name).collect();
        f.debug_struct("CompileOptions")
            .field("disabled", &off)
            .field("verify", &self.verify)
            .finish()
    }
}

/// Whether `GRADTAPE_VERIFY_PASSES=1` is set (read once).
fn verify_by_env() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GRADTAPE_VERIFY_PASSES").is_ok_and(|v| v == "1"))
}

/// Runs the passes `opts` leaves on over `g`, in order, counting into
/// `stats`; checks the graph before and after each when `opts` verifies.
pub(crate) fn run(g: &mut Graph, opts: &CompileOptions, stats: &mut CompileStats, cx: &mut PassCx) -> Result<()> {
    let verify = opts.verifies();
    if verify {
        checked(g, "(none: the traced graph)")?;
    }
    let gpu = cx.gpu;
    for pass in PASSES
        .iter()
        .filter(|p| opts.runs(p.name) && (!gpu || GPU_PASSES.contains(&p.name)))
    {
        let n = (pass.run)(g, cx);
        if let Some(field) = pass.stat {
            *field(stats) += n;
        }
        stats.passes.push((pass.name, n));
        if verify {
            checked(g, pass.name)?;
        }
    }
    Ok(())
}

/// `g.verify()`, its error naming the pass that ran last.
pub fn checked(g: &Graph, pass: &str) -> Result<()> {
    g.verify()
        .map_err(|e| Error::invalid("compile", format!("the graph is broken after pass {pass}: {e}")))
}
