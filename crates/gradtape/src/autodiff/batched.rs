//! Backward passes whose cotangents carry leading batch dimensions (the
//! vectorized Jacobian), and the pieces backprop needs for them.
//!
//! A backward pass with `k` batch dims seeds every target with a cotangent
//! of shape `batch ++ target.shape`. Rules made with
//! [`vjp_batched`](crate::vjp_batched) are called once, with
//! [`ct::batch_dims`](crate::ct::batch_dims) set to `k`. A rule made with
//! plain [`vjp`](crate::vjp) is called once per batch row instead (its
//! cotangents sliced to that row, `k` set to 0) and the rows' results are
//! stacked back: correct for every rule, only slower. Everything here is
//! built from recorded ops, so a batched pass run under an outer tape is
//! differentiable (the Hessian is the Jacobian of a gradient).

use smallvec::SmallVec;

use crate::autodiff::tape::{Grads, VjpFn};
use crate::error::{Error, Result};
use crate::ops::ct;
use crate::tensor::{DType, Tensor};

/// Zeros of shape `batch ++ shape`: the cotangent of an output no
/// cotangent reached.
pub(crate) fn zeros(batch: &[usize], shape: &[usize], dtype: DType, device: crate::tensor::Device) -> Result<Tensor> {
    let mut s = batch.to_vec();
    s.extend_from_slice(shape);
    crate::kernels::gpu::filled("zeros", &s, 0.0, dtype, device)
}

/// Calls `rule` on cotangents with `k` leading batch dims (`k = 0`: a plain
/// backward pass): directly when the rule is batched (or `k = 0`), else row
/// by row. `name` is the op's, for error messages.
pub(crate) fn call_rule(name: &'static str, rule: &VjpFn, cots: &[Tensor], needs: &[bool], k: usize) -> Result<Grads> {
    if k == 0 {
        if ct::batch_dims() == 0 {
            return rule.call(cots, needs);
        }
        return ct::with_batch_dims(0, || rule.call(cots, needs));
    }
    if rule.is_batched() {
        return ct::with_batch_dims(k, || rule.call(cots, needs));
    }
    ct::with_batch_dims(0, || call_by_rows(name, rule, cots, needs, k))
}

/// The row loop for an unbatched rule: flattens the `k` batch dims of every
/// cotangent into one, calls the rule on each row, stacks the results.
fn call_by_rows(name: &'static str, rule: &VjpFn, cots: &[Tensor], needs: &[bool], k: usize) -> Result<Grads> {
    let first = cots
        .first()
        .ok_or_else(|| Error::invalid(name, "gradient rule called without cotangents"))?;
    if first.rank() < k {
        return Err(Error::invalid(
            name,
            format!("cotangent of shape {:?} lacks the {k} batch dims", first.shape()),
        ));
    }
    let batch: Vec<usize> = first.shape()[..k].to_vec();
    let n: usize = batch.iter().product();
    // every cotangent as [n, logical...]
    let mut flat: SmallVec<[(Tensor, Vec<usize>); 1]> = SmallVec::new();
    for c in cots {
        if c.rank() < k || c.shape()[..k] != batch[..] {
            return Err(Error::invalid(
                name,
                format!(
                    "cotangents of shapes {:?} and {:?} disagree on the batch dims {batch:?}",
                    first.shape(),
                    c.shape()
                ),
            ));
        }
        let logical = c.shape()[k..].to_vec();
        let mut s = vec![n];
        s.extend_from_slice(&logical);
        flat.push((c.reshape(&s)?, logical));
    }
    let mut per_input: Vec<Vec<Option<Tensor>>> = vec![Vec::with_capacity(n); needs.len()];
    for i in 0..n {
        let mut row: SmallVec<[Tensor; 1]> = SmallVec::new();
        for (c, logical) in &flat {
            row.push(c.narrow(0, i, 1)?.reshape(logical)?);
        }
        let gs = rule.call(&row, needs)?;
        if gs.len() != needs.len() {
            return Err(Error::invalid(
                name,
                format!(
                    "gradient rule returned {} gradients for {} inputs",
                    gs.len(),
                    needs.len()
                ),
            ));
        }
        for (slot, g) in per_input.iter_mut().zip(gs) {
            slot.push(g);
        }
    }
    let mut out = Grads::new();
    for rows in per_input {
        out.push(match stack_rows(rows)? {
            None => None,
            Some(s) => {
                let mut shape = batch.clone();
                shape.extend_from_slice(&s.shape()[1..]);
                Some(s.reshape(&shape)?)
            }
        });
    }
    Ok(out)
}

/// Stacks per-row results along a new leading axis: `None` when every row
/// is `None` (or there are no rows), else rows that are `None` become zeros
/// shaped like the others.
pub fn stack_rows(rows: Vec<Option<Tensor>>) -> Result<Option<Tensor>> {
    let Some(like) = rows.iter().flatten().next().cloned() else {
        return Ok(None);
    };
    let rows: Vec<Tensor> = rows
        .into_iter()
        .map(|r| r.map_or_else(|| like.try_zeros_like(), Ok))
        .collect::<Result<_>>()?;
    stack(&rows).map(Some)
}

pub(crate) use crate::ops::array::join::stack;
