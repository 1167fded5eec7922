//! A traced loop whose variables change shape runs one condition graph and
//! one body graph at every size, so those graphs must hold no number
//! derived from a size.
//!
//! A trace runs the closures on example tensors, so every number they
//! derive from a shape is fixed in the graphs: a `mean`'s count, a
//! reshape's or a broadcast's target, the position of the last row, a
//! Rust `bool` made from a length. Where a loop variable's shape invariant
//! lets a dim change (`None`), the loop's graphs run at sizes they were
//! not traced at, and such a number is then silently wrong: a body taking
//! the `mean` of a growing carry divided by its first size (0.2755 traced
//! against 0.2754 eagerly, found by the loop tests of `loop_compiled.rs`).
//! TensorFlow's traced loops see `None` for those dims and make the user
//! compute them from `tf.shape`; here the closures see real sizes.
//!
//! So, as a function with `None` dims in its signature does for its graph
//! (see [`sizes`](crate::function::sizes)), a loop with such invariants is
//! traced a second time, on examples whose varying dims are one longer
//! (the first slice repeated, so the values stay of the kind the closures
//! expect), and the two traces, without their dead nodes, must be the
//! same graph, shapes aside. If
//! they differ, the loop is refused with an error naming the variable, its
//! invariant and both shapes, rather than run with the traced numbers. A
//! second trace that fails (the closures refuse the longer example) leaves
//! the loop as traced: nothing is known against it.
//!
//! A condition that compares a length with a bound (`v.shape()[0] < 6`,
//! a Rust `bool`) is the same graph at both sizes (a constant `true`), so
//! the second trace cannot see it; but a condition that held when traced
//! and reads no loop variable's value (nor any state) would hold at every
//! iteration of the graph, and the traced loop would never end: that is
//! refused too ([`check_condition_moves`]), unless `max_iterations` bounds
//! the loop.

use super::loop_checks::spec_text;
use super::ragged::varies;
use crate::error::{Error, Result};
use crate::function::func::TensorSpec;
use crate::function::graph::Graph;
use crate::function::passes::dce;
use crate::function::sizes::same_graph;
use crate::function::trace;
use crate::tensor::Tensor;

/// The loop variables with each dim that `sig` lets vary one longer (the
/// first slice along it repeated, or zeros where the dim is empty), made
/// outside the enclosing trace.
fn longer(vars: &[Tensor], sig: &[TensorSpec]) -> Result<Vec<Tensor>> {
    trace::paused(|| {
        vars.iter()
            .zip(sig)
            .map(|(v, spec)| {
                let mut t = v.clone();
                for (d, dim) in spec.shape.iter().enumerate() {
                    if dim.is_some() {
                        continue;
                    }
                    t = if t.shape()[d] == 0 {
                        let mut shape = t.shape().to_vec();
                        shape[d] = 1;
                        Tensor::zeros(&shape, t.dtype())
                    } else {
                        Tensor::concat(&[&t, &t.narrow(d as isize, 0, 1)?], d as isize)?
                    };
                }
                Ok(t)
            })
            .collect()
    })
}

/// Fails where the condition's or the body's graph (`traced`, as traced
/// on `vars`) differs from its trace on longer variables (`retrace`, a
/// trace of the same closure on the variables it is given): a number in
/// it depends on a size the invariants let change.
pub(super) fn check_sizes_free(
    vars: &[Tensor],
    sig: &[TensorSpec],
    traced: [(&str, &Graph); 2],
    retrace: impl Fn(&str, &[Tensor]) -> Result<Graph>,
) -> Result<()> {
    if !sig.iter().any(varies) {
        return Ok(());
    }
    let others = longer(vars, sig)?;
    for (what, graph) in traced {
        let Ok(mut again) = retrace(what, &others) else {
            continue;
        };
        // (as the loop will run them: a trace also records the steps of
        // gradients nothing reads, which hold sizes)
        let mut traced = graph.clone();
        dce(&mut traced);
        dce(&mut again);
        if same_graph(&traced, &again) {
            continue;
        }
        let (k, spec) = sig.iter().enumerate().find(|(_, s)| varies(s)).expect("one varies");
        return Err(Error::invalid(
            "while_loop",
            format!(
                "loop variable {k} may change shape (shape invariant {}), but the {what} traced with it \
                 of shape {:?} is another graph than with shape {:?}: a number computed from a size \
                 (a mean's count, a reshape's target, a position from a length) is fixed when the \
                 loop is traced and would be wrong at other sizes; compute it from tensors (a sum \
                 of ones_like), keep the shape fixed, or run the loop outside the traced function",
                spec_text(spec),
                vars[k].shape(),
                others[k].shape()
            ),
        ));
    }
    Ok(())
}

/// Fails where a loop whose variables may change shape, with no
/// `max_iterations`, has a condition that held when traced and reads
/// neither a loop variable's value nor any state: its graph's answer is then
/// the same at every iteration, and the traced loop would never end. Such a
/// condition is a number read from a shape (`v.shape()[0] < 6` made a
/// `bool` in Rust): eagerly it changes as the shape grows, in the graph it
/// is fixed. (Without changing shapes, the eager loop would never end
/// either.)
pub(super) fn check_condition_moves(
    cond: &Graph,
    vars: &[Tensor],
    sig: &[TensorSpec],
    held: bool,
    max_iterations: Option<usize>,
) -> Result<()> {
    let Some((k, spec)) = sig.iter().enumerate().find(|(_, s)| varies(s)) else {
        return Ok(());
    };
    if !held || max_iterations.is_some() {
        return Ok(());
    }
    let mut moves = vec![false; cond.values.len()];
    for &v in &cond.inputs[..vars.len().min(cond.inputs.len())] {
        moves[v as usize] = true;
    }
    for node in &cond.nodes {
        if node.op.is_stateful() || node.inputs.iter().any(|&v| moves[v as usize]) {
            for &o in &node.outputs {
                moves[o as usize] = true;
            }
        }
    }
    if cond.outputs.iter().any(|&o| moves[o as usize]) {
        return Ok(());
    }
    Err(Error::invalid(
        "while_loop",
        format!(
            "loop variable {k} may change shape (shape invariant {}, shape {:?} when traced), but the \
             condition reads no loop variable's value and was true when traced: the traced loop would \
             never end (a condition computed in Rust from a shape, such as a length, is fixed when the \
             loop is traced); compare tensors (a counter among the loop variables), or set \
             max_iterations",
            spec_text(spec),
            vars[k].shape()
        ),
    ))
}
