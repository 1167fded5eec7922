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
pub(crate) fn stack_rows(rows: Vec<Option<Tensor>>) -> Result<Option<Tensor>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::{vjp, vjp_batched};
    use crate::ops::grads;
    use crate::{GradientTape, JacobianOptions};

    /// `x³` with an *unbatched* rule that reshapes its cotangent to `x`'s
    /// shape: given batched cotangents it would fail, so a correct vectorized
    /// Jacobian proves the row loop ran.
    fn cube(x: &Tensor) -> Result<Tensor> {
        let y = x.pow_scalar(3.0)?.stop_gradient();
        let x = x.clone();
        Ok(crate::ops::bind("TestCube", &[&x.clone()], y, move |_| {
            vjp(move |g, _| {
                assert_eq!(ct::batch_dims(), 0, "an unbatched rule sees plain cotangents");
                let d = g[0].mul(&x.square()?.mul_scalar(3.0)?)?;
                Ok(grads![Some(d.reshape(x.shape())?)])
            })
        }))
    }

    #[test]
    fn unbatched_rules_run_row_by_row() -> Result<()> {
        let x = Tensor::vector(&[1.0f64, -2.0, 0.5]);
        let tape = GradientTape::persistent();
        let y = tape.record(|| {
            tape.watch(&x);
            cube(&x.sin()?)?.mul_scalar(2.0)
        })?;
        let j = tape.jacobian(&y, &x)?.expect("connected");
        let jn = tape
            .jacobian_with(&y, &x, JacobianOptions::default().vectorized(false))?
            .expect("connected");
        let xv = x.to_vec::<f64>()?;
        let mut want = vec![0.0; 9];
        for i in 0..3 {
            want[i * 4] = 6.0 * xv[i].sin().powi(2) * xv[i].cos();
        }
        for (a, b) in j.to_vec::<f64>()?.iter().zip(&want) {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
        assert_eq!(j.to_vec::<f64>()?, jn.to_vec::<f64>()?);
        Ok(())
    }

    #[test]
    fn the_row_loop_is_differentiable() -> Result<()> {
        // J = diag(3x²) through the row loop, recorded on the outer tape:
        // d/dx sum(J) = 6x
        let x = Tensor::vector(&[1.0f64, 2.0]);
        let outer = GradientTape::new();
        let s = outer.record(|| {
            outer.watch(&x);
            let inner = GradientTape::new();
            let y = inner.record(|| {
                inner.watch(&x);
                cube(&x)
            })?;
            inner.jacobian(&y, &x)?.expect("connected").sum_all()
        })?;
        let d = outer.gradient(&s, &x)?.expect("connected");
        assert_eq!(d.to_vec::<f64>()?, vec![6.0, 12.0]);
        Ok(())
    }

    /// `x + c` (c of shape [3], x of shape [2, 3]) whose rule claims to be
    /// batched but undoes broadcasting with `sum_to_shape`, which also sums
    /// the batch dim: the checker must catch it.
    fn wrongly_batched_add(x: &Tensor, c: &Tensor) -> Result<Tensor> {
        let y = x.add(c)?.stop_gradient();
        let (sx, sc) = (x.shape().to_vec(), c.shape().to_vec());
        Ok(crate::ops::bind("TestAdd", &[x, c], y, move |_| {
            vjp_batched(move |g, _| {
                let gc = g[0].sum_to_shape(&sc)?;
                Ok(grads![Some(ct::unbroadcast(&g[0], &sx)?), Some(gc)])
            })
        }))
    }

    #[test]
    fn the_checker_catches_a_wrongly_batched_rule() -> Result<()> {
        let x = Tensor::from_vec(vec![0.1f64, 0.2, 0.3, 0.4, 0.5, 0.6], &[2, 3])?;
        let c = Tensor::vector(&[1.0f64, -1.0, 0.5]);
        let opts = crate::CheckOptions::default();
        // first and second order alone would pass: the unbatched behaviour is right
        let no_batch = crate::CheckOptions {
            second_order: false,
            ..opts.clone()
        };
        let f = |xs: &[Tensor]| wrongly_batched_add(&xs[0], &xs[1]);
        let err = crate::check_gradients(f, &[x.clone(), c.clone()], &no_batch).unwrap_err();
        assert!(err.to_string().contains("atched"), "{err}");
        // the same rule made with plain `vjp` passes (row loop)
        let report = crate::check_gradients(|xs: &[Tensor]| xs[0].add(&xs[1]), &[x, c], &opts)?;
        assert!(report.max_err_batched.is_some_and(|e| e < 1e-12));
        assert_eq!(report.compared_batched, 6 * 9);
        Ok(())
    }

    #[test]
    fn stack_rows_fills_missing_rows_with_zeros() -> Result<()> {
        assert!(stack_rows(vec![None, None])?.is_none());
        let s = stack_rows(vec![None, Some(Tensor::vector(&[1.0f32, 2.0]))])?.expect("some");
        assert_eq!(s.shape(), &[2, 2]);
        assert_eq!(s.to_vec::<f32>()?, vec![0.0, 0.0, 1.0, 2.0]);
        Ok(())
    }
}
