//! The checks of a loop's variables against the body's outputs and the
//! shape invariants (`while_loop`'s errors).

use super::{same_dtypes, WhileOptions};
use crate::error::{Error, Result};
use crate::function::func::TensorSpec;
use crate::tensor::Tensor;

/// A shape invariant as text: its dims (`?` for one of any size) and dtype.
pub(super) fn spec_text(spec: &TensorSpec) -> String {
    let dims: Vec<String> = spec
        .shape
        .iter()
        .map(|d| d.map_or("?".to_string(), |d| d.to_string()))
        .collect();
    format!("[{}] of {}", dims.join(", "), spec.dtype)
}

/// Fails unless the body's outputs `next` match the variables it was given,
/// `prev`, in number, dtypes and (where not declared variable) shapes.
pub(super) fn check_body(opts: &WhileOptions, prev: &[Tensor], next: &[Tensor]) -> Result<()> {
    let dtypes = |ts: &[Tensor]| ts.iter().map(Tensor::dtype).collect::<Vec<_>>();
    same_dtypes(
        "while_loop",
        "the body changes the loop variables' number or dtypes",
        &dtypes(prev),
        &dtypes(next),
    )?;
    for (i, (v, n)) in prev.iter().zip(next).enumerate() {
        let msg = match &opts.shape_invariants {
            Some(sig) if !sig[i].accepts(n) => format!(
                "the body changes loop variable {i} from shape {:?} to {:?}, which its shape invariant {} \
                 does not accept",
                v.shape(),
                n.shape(),
                spec_text(&sig[i])
            ),
            None if v.shape() != n.shape() => format!(
                "the body changes loop variable {i} from shape {:?} to {:?}; declare the dims that vary in \
                 shape_invariants",
                v.shape(),
                n.shape()
            ),
            _ => continue,
        };
        return Err(Error::invalid("while_loop", msg));
    }
    Ok(())
}

/// History `k` (a loop variable's value at each iteration's entry, or a
/// residual's) as one tensor, its rows the iterations: an error naming the
/// loop where a row changed shape (the history of a loop in the loop's
/// body, as long as its iteration count, which changed between
/// iterations; a variable whose invariant lets its shape change keeps its
/// history as a list instead, see `ragged`).
pub(super) fn stacked_history(k: usize, h: &[Tensor]) -> Result<Tensor> {
    if let Some(w) = h.windows(2).find(|w| w[0].shape() != w[1].shape()) {
        return Err(Error::invalid(
            "while_loop",
            format!(
                "the value {k} the loop keeps for its gradient (after the loop variables, the residuals of its \
                 body's gradient, e.g. the history of a loop in its body) changes shape from {:?} to {:?} \
                 between iterations: a loop in the body of a differentiated loop must run as many iterations \
                 each time (or differentiate the loop eagerly)",
                w[0].shape(),
                w[1].shape()
            ),
        ));
    }
    let refs: Vec<&Tensor> = h.iter().collect();
    Tensor::stack(&refs, 0)
}
