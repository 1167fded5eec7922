//! Eager and traced runs of one workload step.
//!
//! Every workload is written once, as a *body*: a closure from its
//! arguments (a [`TensorStruct`] of input tensors) to the tensors its
//! checksum is read from, with its variables (model weights) captured by
//! the closure. [`measure`] times it either
//!
//! - **eagerly** ([`Mode::Eager`], impl `gradtape`): the body is called
//!   at each step, ops run one by one on gradtape's tapes; or
//! - **traced** ([`Mode::Traced`], impl `gradtape-traced`): the body is
//!   wrapped in one `gradtape::function`, traced on the first (untimed)
//!   call, and each step is one call of the traced graph: forward, gradient
//!   and, for the training workloads, the variables' update all run as
//!   graph nodes.
//!
//! Both modes compute the checksum from the same body, so they agree by
//! construction up to the order of floating-point operations. A traced run
//! that traces more than once is an error: tracing belongs outside the
//! timed steps. `GRADTAPE_BENCH_GRAPH=1` prints each traced graph, and
//! the optimised graph that runs, to stderr; `GRADTAPE_BENCH_DISABLE=a,b`
//! compiles with the passes `a` and `b` off (to time what a pass gains,
//! in one build); `GRADTAPE_BENCH_PROFILE=1` prints where the traced
//! step's time goes (per op and shape, over five extra steps) to stderr.

use gradtape::{CompileOptions, Error, Function, FunctionOptions, Result, Tensor, TensorStruct};

use crate::{repeat, timeit, Report};

/// How a workload's steps run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Op by op, under tapes (impl `gradtape`).
    Eager,
    /// One traced graph function call per step (impl `gradtape-traced`).
    Traced,
}

impl Mode {
    /// The `impl` field of the JSON lines.
    pub(crate) fn impl_name(self) -> &'static str {
        match self {
            Mode::Eager => "gradtape",
            Mode::Traced => "gradtape-traced",
        }
    }
}

/// How a workload is timed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    /// Timed steps (times `GRADTAPE_BENCH_REPEAT`).
    pub iters: usize,
    /// Untimed steps before them.
    pub warmup: usize,
    /// Whether the checksum is the first step's (training workloads, whose
    /// variables change at each step) rather than the last one's.
    pub first_step_checksum: bool,
}

impl Timing {
    /// `iters` timed steps after `warmup`, checksum from the last step.
    pub(crate) const fn last(iters: usize, warmup: usize) -> Timing {
        Timing {
            iters,
            warmup,
            first_step_checksum: false,
        }
    }

    /// `iters` timed steps after `warmup`, checksum from the first
    /// (untimed) step: training workloads.
    pub(crate) const fn first(iters: usize, warmup: usize) -> Timing {
        Timing {
            iters,
            warmup,
            first_step_checksum: true,
        }
    }
}

/// Times `body` on `args` in `mode`; the checksum is the values of the
/// scalar tensors `body` returns.
pub(crate) fn measure<I, F>(mode: Mode, args: I, body: F, timing: Timing) -> Result<Report>
where
    I: TensorStruct + Send + Sync + 'static,
    F: Fn(&I) -> Result<Vec<Tensor>> + Send + Sync + 'static,
{
    match mode {
        Mode::Eager => time_steps(|| body(&args), timing),
        Mode::Traced => {
            let f = Function::with_options(body, options()?);
            let report = time_steps(|| f.call(&args), timing)?;
            if crate::device().is_cuda() {
                let status = f.concrete(&args)?.cuda_graph_status().unwrap_or_default();
                eprintln!("gradtape-bench: CUDA graph: {status}");
            }
            if std::env::var_os("GRADTAPE_BENCH_GRAPH").is_some() {
                let c = f.concrete(&args)?;
                eprintln!("{}", c.graph());
                eprintln!("optimised ({:?}):\n{}", c.compile_stats(), c.optimized_graph());
            }
            if std::env::var_os("GRADTAPE_BENCH_PROFILE").is_some() {
                print_profile(|| f.call(&args).map(drop))?;
            }
            match f.trace_count() {
                1 => Ok(report),
                n => Err(Error::InvalidArgument {
                    op: "bench",
                    msg: format!("the step was traced {n} times, expected once"),
                }),
            }
        }
    }
}

/// Prints the profile of five calls of `step`, per op and shape, most
/// time first, to stderr.
fn print_profile(step: impl Fn() -> Result<()>) -> Result<()> {
    const STEPS: u32 = 5;
    let (done, lines) = gradtape::function::compile::profile(|| (0..STEPS).try_for_each(|_| step()));
    done?;
    eprint!("{}", gradtape::function::compile::report(&lines, STEPS));
    Ok(())
}

/// The traced function's options: the compiler without the passes
/// `GRADTAPE_BENCH_DISABLE` names (comma-separated).
fn options() -> Result<FunctionOptions> {
    let mut compile = CompileOptions::default();
    for name in std::env::var("GRADTAPE_BENCH_DISABLE").unwrap_or_default().split(',') {
        if !name.trim().is_empty() {
            compile = compile.disable_pass(name.trim())?;
        }
    }
    Ok(FunctionOptions {
        compile,
        ..Default::default()
    })
}

fn time_steps(mut step: impl FnMut() -> Result<Vec<Tensor>>, timing: Timing) -> Result<Report> {
    let mut step = || -> Result<Vec<f64>> { step()?.iter().map(Tensor::item).collect() };
    let first = if timing.first_step_checksum {
        Some(step()?)
    } else {
        None
    };
    let (median_s, last, allocs_per_step) = timeit(&mut step, timing.iters, timing.warmup)?;
    Ok(Report {
        median_s,
        iters: timing.iters * repeat(),
        checksum: first.unwrap_or(last),
        allocs_per_step,
    })
}
