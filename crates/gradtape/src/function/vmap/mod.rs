//! Vectorising map, after JAX's `vmap` and TensorFlow's `vectorized_map`:
//! a function of one example, run on a batch of examples at once.
//!
//! **How it works.** [`vmap`] wraps a closure `f` written for *one
//! example*. On a call it traces `f` once, at the shapes of one example
//! (through the same machinery as [`function`](crate::function()): the
//! closure runs eagerly on the batch's first example while its ops are
//! recorded into a [`Graph`]), then *interprets* that graph on the whole
//! batch, node by node, with each node's **batching rule**. This is
//! TensorFlow's `pfor` model rather than JAX's: ops in this crate compute
//! eagerly before any interpreter sees them (see the dispatch layer), so a
//! batching interpreter cannot stand between the user's code and the
//! kernels; a graph of the per-example computation can be re-run instead.
//!
//! Terms:
//!
//! - A **batched value** is a tensor that holds one value per example
//!   along its **batch axis**; an *unbatched* value is the same for every
//!   example (a constant, a variable read, an argument whose `in_axes`
//!   entry is `None`, anything computed from those alone). Inside the
//!   interpreter the batch axis of a batched value is always axis 0 (the
//!   canonical position): arguments have theirs moved there on entry, and
//!   outputs have theirs moved to `out_axes` on exit.
//! - A node whose inputs are all unbatched runs once, as the op itself:
//!   its outputs are unbatched.
//! - A **batching rule** computes a node's batched outputs from its
//!   (batched or unbatched) inputs with ordinary ops on the whole batch:
//!   elementwise ops pad the ranks of batched operands so that unbatched
//!   ones broadcast; reductions, scans, softmax and shape ops shift their
//!   axes by one; products with an unbatched operand fold the batch into
//!   the rows; convolutions and pooling fold it into `N`. The rules are in
//!   `rules.rs`, family by family.
//! - A node without a rule (or a case its rule does not cover) runs in the
//!   **fallback** loop: each batched input is unstacked, the op runs once
//!   per example, and the outputs are stacked. It is correct and slow; the
//!   first fallback of each op name is logged once (`log::warn!`), and
//!   [`vmap_fallbacks`] and [`Vmap::fallbacks`] say which ops fell back.
//!   Where the examples' outputs differ in shape (under a tape, a
//!   `while_loop` keeps a history as long as each example's trip count),
//!   the fallback keeps them apart, one per example, and only the fallback
//!   reads such a value (the loop's gradient, which reads the history, runs
//!   per example too); an output of the function must stack.
//!
//! Because the batched evaluation is made of ordinary eager ops, whatever
//! listens sees it: a [`GradientTape`](crate::GradientTape) recording
//! around a call differentiates the vmapped function, a
//! [`ForwardAccumulator`](crate::ForwardAccumulator) pushes tangents
//! through it, a `function` tracing around it records the batched ops, and
//! `vmap` of `vmap` batches the batched ops again. A tape used *inside* `f`
//! is traced with it (its backward pass becomes graph nodes), so
//! `vmap(grad(loss))` gives per-example gradients.
//!
//! **Axes.** `in_axes[i]` is the batch axis of argument `i`, or `None`
//! for an argument every example shares; a single entry applies to every
//! argument. `out_axes[j]` is where output `j`'s batch axis goes: an
//! output that does not depend on a batched argument is broadcast along a
//! new axis there, and `None` asks for an unbatched output (an error if it
//! is batched). A single entry applies to every output. The batch size is
//! the size of the batched arguments' batch axes, which must agree; at
//! least one argument must be batched.
//!
//! **What is traced, and when.** As with [`function`](crate::function()),
//! the closure runs only while tracing: Rust code in it runs once per new
//! argument signature (dtypes and per-example shapes, which is the cache
//! key), tensors it captures are frozen into the graph as constants, and
//! variables are read at each call. A vmapped closure that calls an op
//! that cannot be traced fails with that op's error. Ops with state
//! (variable writes) must not be given batched inputs.
//!
//! ```
//! use gradtape::{vmap, Tensor};
//!
//! // a dot product of one example with a shared vector, over a batch of rows
//! let w = Tensor::vector(&[1.0f64, 10.0, 100.0]);
//! let dot = vmap(
//!     |a: &[Tensor]| Ok(vec![a[0].mul(&a[1])?.sum(&[0], false)?]),
//!     &[Some(0), None],
//!     &[Some(0)],
//! );
//! let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
//! let y = dot.call(&[x, w])?;
//! assert_eq!(y[0].to_vec::<f64>()?, vec![321.0, 654.0]);
//! # Ok::<(), gradtape::Error>(())
//! ```

pub(crate) mod cache;
mod interp;
mod rules;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use smallvec::SmallVec;

use super::graph::Graph;
use super::trace;
use crate::dispatch::{self, Kind};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

use interp::{BVal, Stats};

/// How many traced graphs a [`Vmap`] keeps (least recently used go first).
const MAX_CACHED: usize = 8;

/// A closure over one example, run over batches by [`vmap`]; see the
/// [module docs](self).
///
/// ```
/// use gradtape::{vmap, Tensor};
/// let f = vmap(|a: &[Tensor]| Ok(vec![a[0].exp()?]), &[Some(1)], &[Some(1)]);
/// let x = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0], &[2, 2])?;
/// let y = f.call(&[x.clone()])?;
/// assert_eq!(y[0].to_vec::<f32>()?, x.exp()?.to_vec::<f32>()?);
/// assert_eq!(f.trace_count(), 1);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Vmap<F> {
    f: Arc<F>,
    in_axes: Vec<Option<usize>>,
    out_axes: Vec<Option<usize>>,
    state: Mutex<State>,
}

/// The cache key of a call: each argument's dtype and per-example shape.
type Signature = Vec<(DType, Vec<usize>)>;

/// What a [`Vmap`] keeps between calls.
#[derive(Default)]
struct State {
    /// (per-example signature, graph), most recently used last
    cache: Vec<(Signature, Arc<Graph>)>,
    traces: usize,
    /// per op name, how many node evaluations of this vmap fell back
    fallbacks: BTreeMap<&'static str, usize>,
}

/// Makes a [`Vmap`]: `f` (a closure over the tensors of one example) run
/// over a batch, with `in_axes` saying where each argument's batch axis is
/// (`None`: shared by every example) and `out_axes` where each output's
/// goes (see the [module docs](self) for the rules of both).
///
/// ```
/// use gradtape::{vmap, Tensor};
/// // per-row softmax, batch on axis 0, result with the batch on axis 1
/// let f = vmap(|a: &[Tensor]| Ok(vec![a[0].softmax(0)?]), &[Some(0)], &[Some(1)]);
/// let x = Tensor::from_vec(vec![0.0f64, 0.0, 1.0, 1.0, 2.0, 2.0], &[3, 2])?;
/// let y = f.call(&[x])?;
/// assert_eq!(y[0].shape(), &[2, 3]);
/// assert_eq!(y[0].to_vec::<f64>()?, vec![0.5; 6]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn vmap<F>(f: F, in_axes: &[Option<usize>], out_axes: &[Option<usize>]) -> Vmap<F>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
{
    Vmap {
        f: Arc::new(f),
        in_axes: in_axes.to_vec(),
        out_axes: out_axes.to_vec(),
        state: Mutex::new(State::default()),
    }
}

/// One op that fell back to the loop, as [`vmap_fallbacks`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmapFallback {
    /// The op's name (as in a graph listing).
    pub op: &'static str,
    /// How many node evaluations ran in the loop, over all vmaps.
    pub runs: usize,
    /// How many times the fallback was logged (once per op name).
    pub logged: usize,
}

/// Process-wide: op name -> (runs, logged).
static FALLBACKS: Mutex<BTreeMap<&'static str, (usize, usize)>> = Mutex::new(BTreeMap::new());

/// The ops that ran in the fallback loop (no batching rule) since the
/// process started, in name order, over every [`Vmap`].
///
/// ```
/// use gradtape::{vmap, vmap_fallbacks, Tensor};
/// // `bincount` has no batching rule: it runs once per example
/// let f = vmap(|a: &[Tensor]| Ok(vec![a[0].bincount(None, 3)?]), &[Some(0)], &[Some(0)]);
/// let y = f.call(&[Tensor::from_vec(vec![0i64, 1, 1, 2, 2, 2], &[2, 3])?])?;
/// assert_eq!(y[0].to_vec::<i64>()?, vec![1, 2, 0, 0, 0, 3]);
/// let fell_back = vmap_fallbacks();
/// assert!(fell_back.iter().any(|f| f.op == "Bincount" && f.logged == 1));
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn vmap_fallbacks() -> Vec<VmapFallback> {
    lock(&FALLBACKS)
        .iter()
        .map(|(&op, &(runs, logged))| VmapFallback { op, runs, logged })
        .collect()
}

/// Notes that `op` ran in the fallback loop; logs it the first time.
fn note_fallback(op: &'static str) {
    let mut all = lock(&FALLBACKS);
    let e = all.entry(op).or_insert((0, 0));
    e.0 += 1;
    if e.1 == 0 {
        e.1 = 1;
        drop(all);
        log::warn!("vmap: {op} has no batching rule for these inputs; it runs in a loop, once per example");
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` with traces, tapes and accumulators paused on this thread (the
/// slicing that makes a tracing example is no part of the computation).
fn hidden<T>(f: impl FnOnce() -> T) -> T {
    dispatch::paused(Kind::Trace, || {
        dispatch::paused(Kind::Tape, || dispatch::paused(Kind::Forward, f))
    })
}

/// A one-shot vmap for the crate's own transformations (the tape's
/// vectorized Jacobians): traces `f` at the first example of `batch` (each
/// argument's axis 0 is its batch axis, `b` examples), with tapes and
/// accumulators paused so that only the trace sees that example, then
/// interprets the graph on the whole batch. `f` may run twice: the trace
/// wants only the graph ([`trace::graph_only`]), and is made again without
/// placeholders if `f` fails with them. The optimized graph is kept by
/// structure ([`cache`]): a later trace of the same structure runs it with
/// its own constants instead of optimizing again. Tensors `f` reads besides its
/// arguments are constants of the graph (or captures of an enclosing
/// trace): the interpreter reads those very tensors, so a tape recording
/// around the call differentiates through them.
/// Returns what `f` returned beside its tensors, and its tensors batched
/// on axis 0 (one that depends on no batched argument broadcast along
/// it). Fallbacks are noted and logged as for [`Vmap::call`].
pub(crate) fn batch_once<T>(
    batch: &[Tensor],
    b: usize,
    f: impl Fn(&[Tensor]) -> Result<(T, Vec<Tensor>)>,
) -> Result<(T, Vec<Tensor>)> {
    let examples: Vec<Tensor> = hidden(|| {
        batch
            .iter()
            .map(|t| {
                if b == 0 {
                    Tensor::try_zeros(&t.shape()[1..], t.dtype())
                } else {
                    t.narrow(0, 0, 1)?.squeeze(&[0])
                }
            })
            .collect::<Result<Vec<_>>>()
    })?;
    // tapes paused outside the trace (the caller's) and inside it (the
    // trace's own, which only `gradients` inside a trace needs); only the
    // graph is wanted (the example outputs are dropped), so products of
    // the example's values are placeholders, unless that made `f` fail (a
    // kernel that rejects the placeholder's values): then it is traced again
    // on the example's values throughout
    let run = |graph_only: bool| {
        dispatch::paused(Kind::Tape, || {
            dispatch::paused(Kind::Forward, || {
                trace::trace(&examples, &[], trace::recording(), |xs| {
                    if graph_only {
                        trace::graph_only();
                    }
                    dispatch::paused(Kind::Tape, || f(xs))
                })
            })
        })
    };
    let traced = run(true).or_else(|_| run(false))?;
    let batched = batch.iter().map(|t| BVal::batched(t.clone()));
    let outs = if trace::recording() || !traced.captures.is_empty() {
        // a graph of an enclosing trace's values: that trace's, not kept
        let mut graph = traced.graph;
        super::passes::optimize(&mut graph);
        let ins = batched
            .chain(traced.captures.into_iter().map(BVal::unbatched))
            .collect();
        interp::interpret_call(&graph, ins, b, &mut Stats::default())?
    } else {
        // the graph optimized for an earlier trace of this structure, or
        // this one's, kept; this trace's constants fed in
        let consts = cache::constants(&traced.graph);
        let kept = match cache::find(&traced.graph) {
            Some(k) => k,
            None => cache::optimize_and_keep(traced.graph),
        };
        let ins = batched
            .chain(kept.consts.iter().map(|&i| BVal::unbatched(consts[i].clone())))
            .collect();
        interp::interpret_call(&kept.graph, ins, b, &mut Stats::default())?
    };
    let outs = outs
        .into_iter()
        .map(|v| {
            if v.batched {
                return Ok(v.t);
            }
            let mut s: SmallVec<[usize; 4]> = smallvec::smallvec![b];
            s.extend_from_slice(v.t.shape());
            v.t.expand_dims(0)?.broadcast_to(&s)
        })
        .collect::<Result<_>>()?;
    Ok((traced.value, outs))
}

/// The entry of `axes` for position `i` of `n` (one entry: for all).
fn axis_for(what: &str, axes: &[Option<usize>], i: usize, n: usize) -> Result<Option<usize>> {
    match axes {
        [a] => Ok(*a),
        _ if axes.len() == n => Ok(axes[i]),
        _ => Err(Error::invalid(
            "vmap",
            format!(
                "{what} has {} entries for {n} {}",
                axes.len(),
                if what == "in_axes" { "arguments" } else { "outputs" }
            ),
        )),
    }
}

impl<F> Vmap<F>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
{
    /// Runs `f` over the batch: traces it at one example's shapes if no
    /// graph fits, then evaluates the graph on the whole batch. Returns one
    /// tensor per output of `f`, each with its batch axis where `out_axes`
    /// puts it.
    ///
    /// ```
    /// use gradtape::{vmap, Tensor};
    /// let outer = vmap(|a: &[Tensor]| Ok(vec![a[0].mul(&a[1])?]), &[Some(0), None], &[Some(0)]);
    /// let x = Tensor::vector(&[1.0f32, 2.0]);
    /// let y = Tensor::vector(&[10.0f32, 20.0, 30.0]);
    /// // x[i] * y for each i: an outer product
    /// let o = outer.call(&[x, y])?;
    /// assert_eq!(o[0].shape(), &[2, 3]);
    /// assert_eq!(o[0].to_vec::<f32>()?, vec![10.0, 20.0, 30.0, 20.0, 40.0, 60.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn call(&self, args: &[Tensor]) -> Result<Vec<Tensor>> {
        let (b, ins) = self.batch_inputs(args)?;
        let graph = self.graph_for(&ins, b)?;
        let mut stats = Stats::default();
        let outs = interp::interpret_call(&graph.0, ins.into_iter().chain(graph.1).collect(), b, &mut stats)?;
        {
            let mut st = lock(&self.state);
            for (op, n) in stats.fallbacks {
                *st.fallbacks.entry(op).or_insert(0) += n;
            }
        }
        let n = outs.len();
        outs.into_iter()
            .enumerate()
            .map(|(j, v)| self.place_output(j, n, v, b))
            .collect()
    }

    /// The graph of one example that serves these arguments (tracing if
    /// needed): what the batching rules run on.
    ///
    /// ```
    /// use gradtape::{vmap, Tensor};
    /// let f = vmap(|a: &[Tensor]| Ok(vec![a[0].sin()?.sum(&[0], false)?]), &[Some(0)], &[Some(0)]);
    /// let g = f.graph(&[Tensor::zeros(&[5, 3], gradtape::DType::F32)])?;
    /// assert_eq!(g.values[g.inputs[0] as usize].shape.as_slice(), &[3]); // one example
    /// assert_eq!(g.count("Sin"), 1);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn graph(&self, args: &[Tensor]) -> Result<Graph> {
        let (b, ins) = self.batch_inputs(args)?;
        Ok((*self.graph_for(&ins, b)?.0).clone())
    }

    /// How many times `f` has been traced.
    ///
    /// ```
    /// use gradtape::{vmap, DType, Tensor};
    /// let f = vmap(|a: &[Tensor]| Ok(vec![a[0].neg()?]), &[Some(0)], &[Some(0)]);
    /// f.call(&[Tensor::zeros(&[4, 2], DType::F32)])?;
    /// f.call(&[Tensor::zeros(&[7, 2], DType::F32)])?; // another batch size: the same graph
    /// assert_eq!(f.trace_count(), 1);
    /// f.call(&[Tensor::zeros(&[4, 3], DType::F32)])?; // another example shape: a new trace
    /// assert_eq!(f.trace_count(), 2);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn trace_count(&self) -> usize {
        lock(&self.state).traces
    }

    /// The ops of this vmap's graphs that ran in the fallback loop, with how
    /// many node evaluations did, in name order.
    ///
    /// ```
    /// use gradtape::{vmap, Tensor};
    /// let f = vmap(|a: &[Tensor]| Ok(vec![a[0].exp()?]), &[Some(0)], &[Some(0)]);
    /// f.call(&[Tensor::vector(&[1.0f32, 2.0])])?;
    /// assert!(f.fallbacks().is_empty()); // `Exp` has a rule
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn fallbacks(&self) -> Vec<(&'static str, usize)> {
        lock(&self.state).fallbacks.iter().map(|(&k, &v)| (k, v)).collect()
    }

    /// Checks the arguments against `in_axes`, and gives the batch size and
    /// the arguments as batched values (batch axis moved to the front).
    fn batch_inputs(&self, args: &[Tensor]) -> Result<(usize, Vec<BVal>)> {
        let n = args.len();
        if self.in_axes.is_empty() || (self.in_axes.len() != 1 && self.in_axes.len() != n) {
            return Err(Error::invalid(
                "vmap",
                format!("in_axes has {} entries for {n} arguments", self.in_axes.len()),
            ));
        }
        let mut size: Option<(usize, usize)> = None;
        for (i, a) in args.iter().enumerate() {
            let Some(ax) = axis_for("in_axes", &self.in_axes, i, n)? else {
                continue;
            };
            if ax >= a.rank() {
                return Err(Error::invalid(
                    "vmap",
                    format!(
                        "in_axes[{i}] = {ax} is out of range for argument {i} of shape {:?} (rank {})",
                        a.shape(),
                        a.rank()
                    ),
                ));
            }
            let d = a.shape()[ax];
            match size {
                None => size = Some((d, i)),
                Some((b, j)) if b != d => {
                    let shapes: Vec<String> = args
                        .iter()
                        .enumerate()
                        .map(|(k, t)| {
                            format!(
                                "{:?} (axis {:?})",
                                t.shape(),
                                axis_for("in_axes", &self.in_axes, k, n).ok().flatten()
                            )
                        })
                        .collect();
                    return Err(Error::invalid(
                        "vmap",
                        format!(
                            "batch sizes differ: argument {j} has {b} examples, argument {i} has {d}; \
                             argument shapes and batch axes: {}",
                            shapes.join(", ")
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        let Some((b, _)) = size else {
            let shapes: Vec<Vec<usize>> = args.iter().map(|t| t.shape().to_vec()).collect();
            return Err(Error::invalid(
                "vmap",
                format!(
                    "no argument is batched (in_axes {:?}, argument shapes {shapes:?})",
                    self.in_axes
                ),
            ));
        };
        let ins = args
            .iter()
            .enumerate()
            .map(|(i, a)| match axis_for("in_axes", &self.in_axes, i, n)? {
                None => Ok(BVal::unbatched(a.clone())),
                Some(0) => Ok(BVal::batched(a.clone())),
                Some(ax) => Ok(BVal::batched(interp::move_axis(a, ax, 0)?)),
            })
            .collect::<Result<_>>()?;
        Ok((b, ins))
    }

    /// The per-example graph for these batched inputs (from the cache, or
    /// traced), with the tensors it captured from an enclosing trace (its
    /// trailing inputs, unbatched).
    fn graph_for(&self, ins: &[BVal], b: usize) -> Result<(Arc<Graph>, Vec<BVal>)> {
        let key: Signature = ins.iter().map(|v| (v.t.dtype(), v.example_shape().to_vec())).collect();
        {
            let mut st = lock(&self.state);
            if let Some(i) = st.cache.iter().position(|(k, _)| *k == key) {
                let e = st.cache.remove(i);
                let g = e.1.clone();
                st.cache.push(e);
                return Ok((g, Vec::new()));
            }
        }
        // one example: the first of the batch (zeros for an empty batch)
        let examples: Vec<Tensor> = hidden(|| {
            ins.iter()
                .map(|v| {
                    if !v.batched {
                        Ok(v.t.clone())
                    } else if b == 0 {
                        Tensor::try_zeros(v.example_shape(), v.t.dtype())
                    } else {
                        v.t.narrow(0, 0, 1)?.squeeze(&[0])
                    }
                })
                .collect::<Result<Vec<_>>>()
        })?;
        let f = self.f.clone();
        let traced = trace::trace(&examples, &[], trace::recording(), |xs| {
            let outs = f(xs)?;
            Ok(((), outs))
        })
        .map_err(|e| match e {
            Error::InvalidArgument { op, msg } if op != "vmap" => Error::InvalidArgument {
                op,
                msg: format!("{msg} (while vmap traced its function at one example's shapes)"),
            },
            e => e,
        })?;
        // dead nodes (a tape's or accumulator's work on captured tensors,
        // traced along) would be batched for nothing
        let mut graph = traced.graph;
        super::passes::optimize(&mut graph);
        let graph = Arc::new(graph);
        let captures: Vec<BVal> = traced.captures.into_iter().map(BVal::unbatched).collect();
        let mut st = lock(&self.state);
        st.traces += 1;
        // a graph that captured values of an enclosing trace is that
        // trace's: not kept
        if captures.is_empty() {
            st.cache.push((key, graph.clone()));
            if st.cache.len() > MAX_CACHED {
                st.cache.remove(0);
            }
        }
        Ok((graph, captures))
    }

    /// Output `j` of `n` with its batch axis where `out_axes` says.
    fn place_output(&self, j: usize, n: usize, v: BVal, b: usize) -> Result<Tensor> {
        let ax = axis_for("out_axes", &self.out_axes, j, n)?;
        match (ax, v.batched) {
            (None, false) => Ok(v.t),
            (None, true) => Err(Error::invalid(
                "vmap",
                format!(
                    "output {j} (one example's shape {:?}) depends on a batched argument, but out_axes[{j}] is None",
                    v.example_shape()
                ),
            )),
            (Some(ax), batched) => {
                let r = v.example_shape().len();
                if ax > r {
                    return Err(Error::invalid(
                        "vmap",
                        format!(
                            "out_axes[{j}] = {ax} is out of range for output {j} of one example's shape {:?} (rank {r}, so at most {r})",
                            v.example_shape()
                        ),
                    ));
                }
                let t = if batched {
                    v.t
                } else {
                    let mut s: SmallVec<[usize; 4]> = smallvec::smallvec![b];
                    s.extend_from_slice(v.t.shape());
                    v.t.expand_dims(0)?.broadcast_to(&s)?
                };
                if ax == 0 {
                    Ok(t)
                } else {
                    interp::move_axis(&t, 0, ax)
                }
            }
        }
    }
}
