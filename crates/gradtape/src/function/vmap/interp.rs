//! The batching interpreter: a per-example graph evaluated on batched
//! values, node by node (see the [module docs](super)).

use std::collections::BTreeMap;
use std::sync::Arc;

use smallvec::SmallVec;

use super::super::concrete::Call;
use super::super::graph::{Graph, Node, ValueInfo};
use super::rules;
use crate::error::{Error, Result};
use crate::ops::desc::Op;
use crate::tensor::Tensor;

/// A value of the interpreter: a tensor, batched along axis 0 or the same
/// for every example.
#[derive(Clone, Debug)]
pub(crate) struct BVal {
    /// The tensor (of the batch, when `batched`; the first example's when
    /// `ragged`).
    pub t: Tensor,
    /// Whether axis 0 of `t` is the batch axis (also set when `ragged`).
    pub batched: bool,
    /// One tensor per example, where the examples' values differ in shape
    /// and cannot be stacked: the fallback's outputs for an op whose
    /// output shape depends on the values (a `while_loop`'s history, as
    /// long as that example's trip count, which its gradient reads). Only
    /// the fallback reads such a value.
    pub ragged: Option<Arc<[Tensor]>>,
}

impl BVal {
    pub(crate) fn batched(t: Tensor) -> Self {
        BVal {
            t,
            batched: true,
            ragged: None,
        }
    }
    pub(crate) fn unbatched(t: Tensor) -> Self {
        BVal {
            t,
            batched: false,
            ragged: None,
        }
    }
    /// Per-example values: stacked along a new axis 0 when their shapes
    /// agree, else kept apart (ragged). Inside a trace the stack is one
    /// `Stack` node, which takes the rows' shape when the graph runs (the
    /// fallback's outputs may have a shape that depends on the values, as a
    /// loop's history does, so a reshape to the shape seen when tracing
    /// would not do).
    fn per_example(ts: Vec<Tensor>) -> Result<Self> {
        if ts.windows(2).all(|w| w[0].shape() == w[1].shape()) {
            if super::super::trace::recording() {
                return Ok(BVal::batched(crate::ops::array::join::stack(&ts)?));
            }
            let refs: Vec<&Tensor> = ts.iter().collect();
            return Ok(BVal::batched(Tensor::stack(&refs, 0)?));
        }
        Ok(BVal {
            t: ts[0].clone(),
            batched: true,
            ragged: Some(ts.into()),
        })
    }
    /// The shape of one example's value.
    pub(crate) fn example_shape(&self) -> &[usize] {
        if self.batched && self.ragged.is_none() {
            &self.t.shape()[1..]
        } else {
            self.t.shape()
        }
    }
    /// The rank of one example's value.
    pub(crate) fn example_rank(&self) -> usize {
        self.example_shape().len()
    }
}

/// What one interpretation noted: per op name, how many node evaluations
/// fell back to the loop.
#[derive(Default)]
pub(crate) struct Stats {
    pub fallbacks: BTreeMap<&'static str, usize>,
}

/// `t` with axis `from` moved to position `to` (the others in order).
pub(crate) fn move_axis(t: &Tensor, from: usize, to: usize) -> Result<Tensor> {
    if from == to {
        return Ok(t.clone());
    }
    let mut perm: SmallVec<[usize; 6]> = (0..t.rank()).filter(|&a| a != from).collect();
    perm.insert(to, from);
    t.permute(&perm)
}

/// Evaluates `g` on `args` (one batched value per graph input), with `b`
/// examples. Nodes whose inputs are all unbatched run as themselves; the
/// others through their batching rule, or the fallback loop.
pub(crate) fn interpret(g: &Graph, args: Vec<BVal>, b: usize, stats: &mut Stats) -> Result<Vec<BVal>> {
    if args.len() != g.inputs.len() {
        return Err(Error::invalid(
            "vmap",
            format!("the graph takes {} inputs, got {}", g.inputs.len(), args.len()),
        ));
    }
    let last_use = g.last_uses();
    let mut slots: Vec<Option<BVal>> = vec![None; g.values.len()];
    for (&v, a) in g.inputs.iter().zip(args) {
        check_value(g, "an argument", v, &a, b, true)?;
        slots[v as usize] = Some(a);
    }
    for (i, node) in g.nodes.iter().enumerate() {
        let ins: Vec<BVal> = node
            .inputs
            .iter()
            .map(|&v| {
                slots[v as usize]
                    .clone()
                    .ok_or_else(|| Error::invalid("vmap", format!("value %{v} read before it is made")))
            })
            .collect::<Result<_>>()?;
        for &v in &node.inputs {
            if last_use[v as usize] == i {
                slots[v as usize] = None;
            }
        }
        let (outs, exact) = eval_node(g, node, &ins, b, stats)?;
        if outs.len() != node.outputs.len() {
            return Err(Error::invalid(
                "vmap",
                format!(
                    "{} gave {} outputs, the graph expects {}",
                    node.op.name(),
                    outs.len(),
                    node.outputs.len()
                ),
            ));
        }
        for (&v, o) in node.outputs.iter().zip(outs) {
            check_value(g, node.op.name(), v, &o, b, exact)?;
            slots[v as usize] = Some(o);
        }
    }
    g.outputs
        .iter()
        .map(|&o| {
            slots[o as usize]
                .clone()
                .ok_or_else(|| Error::invalid("vmap", format!("output %{o} is never made")))
        })
        .collect()
}

/// [`interpret`] for a whole call: its outputs, where ragged, stacked
/// (an error where the examples' values still differ in shape).
pub(crate) fn interpret_call(g: &Graph, args: Vec<BVal>, b: usize, stats: &mut Stats) -> Result<Vec<BVal>> {
    let outs = interpret(g, args, b, stats)?;
    outs.into_iter()
        .enumerate()
        .map(|(j, v)| match v.ragged {
            None => Ok(v),
            Some(ts) => {
                let shapes: Vec<&[usize]> = ts.iter().map(|t| t.shape()).collect();
                Err(Error::invalid(
                    "vmap",
                    format!(
                        "output {j} has a shape that depends on each example's values ({shapes:?} for the \
                         {b} examples), so the examples' outputs cannot be stacked"
                    ),
                ))
            }
        })
        .collect()
}

/// Checks that a value has the dtype and per-example shape the graph
/// traced (a batching rule that got a shape wrong is an error, never a
/// wrong value). With `exact` false (the fallback's outputs: the op's own
/// values, one example at a time), the shape's dims may differ where the
/// op's output shape depends on the values; the dtype and rank may not.
fn check_value(g: &Graph, what: &str, v: u32, x: &BVal, b: usize, exact: bool) -> Result<()> {
    let ValueInfo { dtype, shape } = &g.values[v as usize];
    let batch_ok = !x.batched || x.ragged.is_some() || x.t.shape().first() == Some(&b);
    let shape_ok = match (&x.ragged, exact) {
        (None, true) => x.example_shape() == &shape[..],
        (None, false) => x.example_shape().len() == shape.len(),
        (Some(ts), _) => ts.len() == b && ts.iter().all(|t| t.dtype() == *dtype && t.rank() == shape.len()),
    };
    if x.t.dtype() != *dtype || !shape_ok || !batch_ok {
        return Err(Error::invalid(
            "vmap",
            format!(
                "{what} gave a {} tensor of shape {:?} ({}), where the graph traced one example's value \
                 %{v} as {dtype} {:?} with {b} examples",
                x.t.dtype(),
                x.t.shape(),
                if x.batched { "batched on axis 0" } else { "unbatched" },
                &shape[..]
            ),
        ));
    }
    Ok(())
}

/// One node on batched values; with whether its outputs' shapes are
/// exactly the traced ones (not so from the fallback, see
/// [`check_value`]).
fn eval_node(g: &Graph, node: &Node, ins: &[BVal], b: usize, stats: &mut Stats) -> Result<(Vec<BVal>, bool)> {
    let op = &node.op;
    if ins.iter().all(|v| !v.batched) {
        let ts: SmallVec<[Tensor; 4]> = ins.iter().map(|v| v.t.clone()).collect();
        return Ok((op.eval(&ts)?.into_iter().map(BVal::unbatched).collect(), true));
    }
    if let Op::Dyn(d) = op {
        let any: &dyn std::any::Any = &**d;
        // a call of a traced function: its graph, interpreted in place
        if let Some(call) = any.downcast_ref::<Call>() {
            return Ok((interpret(call.0.graph(), ins.to_vec(), b, stats)?, false));
        }
        if d.stateful() {
            let shapes: Vec<String> = ins
                .iter()
                .map(|v| format!("{:?}{}", v.example_shape(), if v.batched { " (batched)" } else { "" }))
                .collect();
            return Err(Error::invalid(
                "vmap",
                format!(
                    "{} reads or writes state (a variable) and cannot be given batched inputs; its inputs, \
                     per example: {}",
                    d.name(),
                    shapes.join(", ")
                ),
            ));
        }
    }
    // (a ragged operand has no batched form for a rule to take)
    if ins.iter().all(|v| v.ragged.is_none())
        && let Some(outs) = rules::batch(op, ins, b)?
    {
        return Ok((outs.into_iter().map(BVal::batched).collect(), true));
    }
    *stats.fallbacks.entry(op.name()).or_insert(0) += 1;
    super::note_fallback(op.name());
    let infos: SmallVec<[&ValueInfo; 2]> = node.outputs.iter().map(|&v| &g.values[v as usize]).collect();
    Ok((fallback(op, ins, b, &infos)?, false))
}

/// The fallback: the op once per example, the outputs stacked (or kept
/// apart where their shapes differ between examples).
fn fallback(op: &Op, ins: &[BVal], b: usize, outs: &[&ValueInfo]) -> Result<Vec<BVal>> {
    if b == 0 {
        return outs
            .iter()
            .map(|info| {
                let mut s = vec![0];
                s.extend_from_slice(&info.shape);
                Ok(BVal::batched(Tensor::try_zeros(&s, info.dtype)?))
            })
            .collect();
    }
    let cols: Vec<Option<Vec<Tensor>>> = ins
        .iter()
        .map(|v| match &v.ragged {
            Some(ts) => Ok(Some(ts.to_vec())),
            None => v.batched.then(|| unstack(&v.t, b)).transpose(),
        })
        .collect::<Result<_>>()?;
    let mut per_output: Vec<Vec<Tensor>> = vec![Vec::with_capacity(b); outs.len()];
    let mut args: SmallVec<[Tensor; 4]> = SmallVec::new();
    for i in 0..b {
        args.clear();
        args.extend(
            ins.iter()
                .zip(&cols)
                .map(|(v, c)| c.as_ref().map_or_else(|| v.t.clone(), |c| c[i].clone())),
        );
        let ys = op.eval(&args)?;
        if ys.len() != outs.len() {
            return Err(Error::invalid(
                "vmap",
                format!(
                    "{} gave {} outputs, the graph expects {}",
                    op.name(),
                    ys.len(),
                    outs.len()
                ),
            ));
        }
        for (acc, y) in per_output.iter_mut().zip(ys) {
            acc.push(y);
        }
    }
    per_output.into_iter().map(BVal::per_example).collect()
}

/// The `b` examples of a batched tensor. Inside a trace each is a `RowAt`
/// node, which takes the example's shape when the graph runs: a slice and
/// a reshape would fix the shape seen when tracing, and a batched value may
/// have dims that change from one run of the graph to the next (a loop's
/// history, as long as the trip count, batched by the fallback of an
/// earlier loop in a vectorized Jacobian).
fn unstack(t: &Tensor, b: usize) -> Result<Vec<Tensor>> {
    if !super::super::trace::recording() {
        return t.unstack(0);
    }
    (0..b)
        .map(|i| crate::ops::index::row_at(t, &Tensor::scalar(i as i64)))
        .collect()
}
