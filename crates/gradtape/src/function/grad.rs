//! Symbolic gradients: the gradient of a traced function as a traced
//! function, and [`gradients`] between values inside a trace.
//!
//! **Departure from seed 004** (TensorFlow's `_GradientsHelper`): TF walks
//! the graph with its own copy of the backprop algorithm (pending counts, a
//! ready queue, aggregation), separate from the eager tape's. Here a trace
//! records every traced op on its own tape as it runs, so the graph's
//! gradient is that tape's backward pass (the one algorithm of
//! `autodiff::backprop`: pruning to the ops between sources and targets,
//! counts, a ready queue, aggregation, a shape check of every generated
//! gradient), run *while tracing*: the rules' ops are recorded as graph
//! nodes. Eager and graph gradients cannot drift apart, and custom
//! gradients hold in graphs.
//!
//! **A function's gradient** ([`build_backward`]) is traced once per
//! concrete function: the function is traced again under a tape, with one
//! extra input per output cotangent, and the tape's gradient returned. The
//! resulting graph is split in two, as TensorFlow splits a function for its
//! gradient: the nodes that do not depend on the cotangents form the
//! *forward* graph (the function's outputs plus the values the backward part
//! reads, *saved*), the others the *backward* graph (saved values and
//! cotangents in, gradients out). A differentiated call runs the forward
//! graph once and keeps the saved values for the backward one.

use std::sync::{Arc, OnceLock};

use rustc_hash::FxHashSet;

use super::concrete::ConcreteFunction;
use super::graph::{Graph, ValueId, ValueInfo};
use super::passes;
use super::trace;
use crate::autodiff::backprop::Unconnected;
use crate::autodiff::gradient_tape::{GradientOptions, GradientTape};
use crate::autodiff::sources::{SourceRef, Sources};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A function's gradient, split into its forward and backward halves.
pub(crate) struct Backward {
    /// inputs: the function's; outputs: its outputs, then the saved values
    /// (a differentiated call runs it, and a trace records a call of it)
    pub forward: Arc<ConcreteFunction>,
    /// inputs: saved values, then the cotangents of the differentiable
    /// outputs; outputs: the gradients that exist
    backward: Arc<ConcreteFunction>,
    /// per output of the function: whether it takes a cotangent
    ct_mask: Vec<bool>,
    /// per input of the function, then per variable of `vars`, then per
    /// tensor of `consts`: which output of `backward` is its gradient
    grad_slots: Vec<Option<usize>>,
    /// the variables the function reads that get gradients (the trainable
    /// ones, and those a tape or accumulator watched at the call)
    vars: Vec<Variable>,
    /// the tensors the function captured as constants that get gradients
    /// (those a tape or accumulator watched at the call)
    consts: Vec<Tensor>,
    /// the gradient of the forward graph with respect to *all* its outputs
    /// (saved values included), recomputing the forward: what a call needs
    /// once its saved values get cotangents (higher orders)
    full: OnceLock<Result<Arc<Full>>>,
    /// the generators the forward graph draws from (see
    /// [`replaying`](crate::ops::random::replaying))
    generators: OnceLock<Vec<Arc<crate::ops::rng_state::State>>>,
}

/// [`Backward::full`]: a gradient function of the forward graph.
struct Full {
    function: Arc<ConcreteFunction>,
    /// per output of the forward graph: whether it takes a cotangent
    ct_mask: Vec<bool>,
    grad_slots: Vec<Option<usize>>,
}

impl Backward {
    /// The gradients of a call (one per input, then per variable of
    /// `vars`) when only its outputs got cotangents (`cts`, one per
    /// output): the backward graph on the saved values.
    pub(crate) fn pull(&self, saved: &[Tensor], cts: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let mut ins: Vec<Tensor> = saved.to_vec();
        ins.extend(
            cts.iter()
                .zip(&self.ct_mask)
                .filter(|&(_, &m)| m)
                .map(|(c, _)| c.clone()),
        );
        let outs = self.backward.call_inputs(&ins)?;
        Ok(self.grad_slots.iter().map(|s| s.map(|i| outs[i].clone())).collect())
    }

    /// The generators the forward graph draws from.
    pub(crate) fn generators(&self) -> &[Arc<crate::ops::rng_state::State>] {
        self.generators
            .get_or_init(|| super::rngs::generators(self.forward.graph()))
    }

    /// The gradients of a call whose outputs *and saved values* got
    /// cotangents (`cts`, one per output of the forward graph), recomputing
    /// the forward from `inputs`.
    pub(crate) fn pull_full(&self, inputs: &[Tensor], cts: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let full = self
            .full
            .get_or_init(|| self.build_full(inputs).map(Arc::new))
            .clone()?;
        let mut ins: Vec<Tensor> = inputs.to_vec();
        ins.extend(
            cts.iter()
                .zip(&full.ct_mask)
                .filter(|&(_, &m)| m)
                .map(|(c, _)| c.clone()),
        );
        let outs = full.function.call_inputs(&ins)?;
        Ok(full.grad_slots.iter().map(|s| s.map(|i| outs[i].clone())).collect())
    }

    fn build_full(&self, inputs: &[Tensor]) -> Result<Full> {
        let forward = self.forward.graph();
        let outs: Vec<ValueInfo> = forward
            .outputs
            .iter()
            .map(|&o| forward.values[o as usize].clone())
            .collect();
        let (gg, grad_slots, ct_mask) =
            trace_gradient(self.forward.flat_fn(), inputs, &[], &self.vars, &self.consts, &outs)?;
        // the function's outputs stay outputs of `gg` (after the gradients'
        // slots are counted from them): drop them, keep the gradients
        let n_out = forward.outputs.len();
        let mut g = gg;
        g.outputs.drain(..n_out);
        let function = Arc::new(ConcreteFunction::from_graph(
            "full_grad".into(),
            g,
            self.forward.compile_options(),
        )?);
        Ok(Full {
            function,
            ct_mask,
            grad_slots,
        })
    }
}

/// Traces the gradient of `flat_fn` (a function of `xs`, reading
/// `captures`, `vars` and the constants `consts`, whose outputs have the
/// dtypes and shapes `outs`): a graph with
/// inputs `[xs, cotangents of the differentiable outputs, captures]` and
/// outputs `[the function's outputs, the gradients that exist]`; with, per
/// `xs ++ captures ++ vars ++ consts`, the index of its gradient among the
/// gradients, and which outputs take a cotangent.
fn trace_gradient(
    flat_fn: &super::concrete::FlatFn,
    xs: &[Tensor],
    captures: &[Tensor],
    vars: &[Variable],
    consts: &[Tensor],
    outs: &[ValueInfo],
) -> Result<(Graph, Vec<Option<usize>>, Vec<bool>)> {
    let ct_mask: Vec<bool> = outs.iter().map(|v| v.dtype.is_differentiable()).collect();
    let mut args: Vec<Tensor> = xs.to_vec();
    for (v, &m) in outs.iter().zip(&ct_mask) {
        if m {
            args.push(Tensor::try_ones(&v.shape, v.dtype)?);
        }
    }
    let n_x = xs.len();
    let caps = captures.to_vec();
    let mask = ct_mask.clone();
    let traced = trace::trace(&args, captures, false, |flat| {
        let (xs, cts) = flat.split_at(n_x);
        let tape = GradientTape::persistent();
        let outs = tape.record(|| {
            for x in xs.iter().chain(&caps) {
                tape.watch(x);
            }
            // (a non-trainable variable is not watched when read)
            for v in vars {
                tape.watch(v);
            }
            for c in consts {
                tape.watch(c);
            }
            flat_fn(xs)
        })?;
        let targets: Vec<Tensor> = outs
            .iter()
            .zip(&mask)
            .filter(|&(_, &m)| m)
            .map(|(t, _)| t.clone())
            .collect();
        let mut sources: Vec<SourceRef<'_>> = xs.iter().chain(&caps).map(SourceRef::Tensor).collect();
        sources.extend(vars.iter().map(SourceRef::Variable));
        sources.extend(consts.iter().map(SourceRef::Tensor));
        let opts = GradientOptions::default().output_gradients(cts.to_vec());
        let grads = tape.gradient_with(&targets, &sources, opts)?;
        let mut slots = Vec::with_capacity(grads.len());
        let mut out = outs;
        let n_out = out.len();
        for gr in grads {
            slots.push(gr.as_ref().map(|_| out.len() - n_out));
            out.extend(gr);
        }
        Ok((slots, out))
    })?;
    Ok((traced.graph, traced.value, ct_mask))
}

/// Traces the gradient of `cf` (on this call's `inputs`: arguments, then
/// captures) with respect to them, to `vars` (variables it reads) and to
/// `consts` (tensors it captured as constants), and splits it.
pub(crate) fn build_backward(
    cf: &ConcreteFunction,
    inputs: &[Tensor],
    vars: Vec<Variable>,
    consts: Vec<Tensor>,
) -> Result<Backward> {
    let g = cf.graph();
    let n_args = inputs.len() - cf.captures().len();
    // the outputs' shapes on these inputs: the graph's, or (for a graph
    // that serves other sizes of a signature's `None` dims) a run's
    let traced_shapes = g
        .inputs
        .iter()
        .map(|&v| &g.values[v as usize].shape[..])
        .eq(inputs.iter().map(Tensor::shape));
    let outs: Vec<ValueInfo> = if traced_shapes {
        g.outputs.iter().map(|&o| g.values[o as usize].clone()).collect()
    } else {
        cf.run_optimized(inputs)?
            .iter()
            .map(|t| ValueInfo {
                dtype: t.dtype(),
                shape: crate::tensor::layout::small_copy(t.shape()),
            })
            .collect()
    };
    let (gg, grad_slots, ct_mask) =
        trace_gradient(cf.flat_fn(), &inputs[..n_args], cf.captures(), &vars, &consts, &outs)?;
    let n_ct = ct_mask.iter().filter(|&&m| m).count();
    let n_out = g.outputs.len();
    // which values depend on a cotangent
    let mut on_ct = vec![false; gg.values.len()];
    for &v in &gg.inputs[n_args..n_args + n_ct] {
        on_ct[v as usize] = true;
    }
    let mut fwd_nodes = Vec::new();
    let mut bwd_nodes = Vec::new();
    for (i, n) in gg.nodes.iter().enumerate() {
        if n.inputs.iter().any(|&v| on_ct[v as usize]) {
            for &o in &n.outputs {
                on_ct[o as usize] = true;
            }
            bwd_nodes.push(i);
        } else {
            fwd_nodes.push(i);
        }
    }
    // values the backward half reads from the forward half (or returns)
    let mut saved: Vec<ValueId> = Vec::new();
    let mut seen = FxHashSet::default();
    let reads = bwd_nodes.iter().flat_map(|&i| gg.nodes[i].inputs.iter().copied());
    for v in reads.chain(gg.outputs[n_out..].iter().copied()) {
        if !on_ct[v as usize] && seen.insert(v) {
            saved.push(v);
        }
    }
    let mut fwd_inputs: Vec<ValueId> = gg.inputs[..n_args].to_vec();
    fwd_inputs.extend_from_slice(&gg.inputs[n_args + n_ct..]);
    let mut fwd_outputs: Vec<ValueId> = gg.outputs[..n_out].to_vec();
    fwd_outputs.extend_from_slice(&saved);
    let mut forward = passes::extract(&gg, &fwd_nodes, &fwd_inputs, &fwd_outputs);
    passes::optimize(&mut forward);
    let mut bwd_inputs = saved.clone();
    bwd_inputs.extend_from_slice(&gg.inputs[n_args..n_args + n_ct]);
    let backward = passes::extract(&gg, &bwd_nodes, &bwd_inputs, &gg.outputs[n_out..]);
    let opt = cf.compile_options();
    let backward = Arc::new(ConcreteFunction::from_graph(
        format!("{}_grad", cf.name()),
        backward,
        opt,
    )?);
    let forward = Arc::new(ConcreteFunction::from_graph(
        format!("{}_forward", cf.name()),
        forward,
        opt,
    )?);
    Ok(Backward {
        forward,
        backward,
        ct_mask,
        grad_slots,
        vars,
        consts,
        full: OnceLock::new(),
        generators: OnceLock::new(),
    })
}

/// Options of [`gradients`]: TensorFlow's `grad_ys`, `stop_gradients` and
/// `unconnected_gradients`.
#[derive(Default, Clone)]
pub struct GradientsOptions {
    /// One cotangent per target (default: ones).
    pub grad_ys: Option<Vec<Tensor>>,
    /// Values treated as constants.
    pub stop_gradients: Vec<Tensor>,
    /// What sources no gradient reaches get.
    pub unconnected: Unconnected,
}

/// The symbolic gradient of `ys` with respect to `xs` inside a traced
/// function, as graph values (TensorFlow's `tf.gradients`): the sum of the
/// `ys` (weighted by `grad_ys`) differentiated through the ops between `xs`
/// and `ys`, treating `stop_gradients` as constants. `xs` may be any traced
/// tensors (inputs or intermediates) or variables the function reads.
/// Outside a trace it is an error (use a [`GradientTape`]).
///
/// ```
/// use gradtape::{function, gradients, GradientsOptions, Tensor};
/// let f = function(|x: &Tensor| {
///     let y = x.mul(x)?.sum_all()?;
///     Ok(gradients(&[y], x, GradientsOptions::default())?.unwrap())
/// });
/// let g = f.call(&Tensor::vector(&[1.0f64, 3.0]))?;
/// assert_eq!(g.to_vec::<f64>()?, vec![2.0, 6.0]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn gradients<S: Sources + ?Sized>(ys: &[Tensor], xs: &S, opts: GradientsOptions) -> Result<S::Output> {
    let trace = match trace::current() {
        Some(t) if trace::recording() => t,
        _ => {
            return Err(Error::invalid(
                "gradients",
                "only valid inside a traced function; use a GradientTape eagerly",
            ))
        }
    };
    let opts = GradientOptions {
        output_gradients: opts.grad_ys,
        unconnected: opts.unconnected,
        stop_gradients: opts.stop_gradients,
    };
    trace.tape.gradient_with(ys, xs, opts)
}
