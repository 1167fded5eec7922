//! Cotangent helpers for *batched* VJP rules.
//!
//! A vectorized Jacobian pulls back many cotangents at once: every cotangent
//! then carries `k = batch_dims()` extra **leading** dimensions (the batch
//! shape), ahead of its *logical* shape (the shape of the op output it
//! belongs to). A rule made with [`vjp_batched`](crate::vjp_batched) must
//! accept such cotangents and return input cotangents with the same leading
//! dimensions. Outside a batched pass `k` is 0 and every helper here is the
//! plain operation, so a batched rule is also a correct ordinary rule.
//!
//! What needs care in a rule:
//!
//! - elementwise arithmetic of a cotangent with saved tensors broadcasts by
//!   itself *if the saved tensor's rank is at most the cotangent's logical
//!   rank*; otherwise first [`broadcast_to`] the cotangent;
//! - undo broadcasting with [`unbroadcast`], not `sum_to_shape`;
//! - reshape with [`reshape`], shift axes with [`axis`]/[`axes`], permute
//!   with [`perm`];
//! - matmul treats the batch dims as matmul batch dims, which is right for
//!   `g @ b^T`; the other operand's gradient `a^T @ g` then gets the batch
//!   dims in front too, and [`unbroadcast`] keeps them.
//!
//! Every batched rule is checked against the row-by-row result by the
//! gradient checker ([`check_gradients`](crate::check_gradients)).

use std::cell::Cell;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

thread_local! {
    static BATCH_DIMS: Cell<usize> = const { Cell::new(0) };
}

/// The number of leading batch dimensions on the cotangents of the backward
/// pass running on this thread (0 outside a batched pass).
#[inline]
pub fn batch_dims() -> usize {
    BATCH_DIMS.with(|b| b.get())
}

/// Runs `f` with `k` leading batch dimensions declared on cotangents, and
/// restores the previous value afterwards (also on panic). Backprop sets it
/// for a batched pass; forward-mode and other nested computations set 0.
pub fn with_batch_dims<T>(k: usize, f: impl FnOnce() -> T) -> T {
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            BATCH_DIMS.with(|b| b.set(self.0));
        }
    }
    let _restore = Restore(BATCH_DIMS.with(|b| b.replace(k)));
    f()
}

/// The leading batch shape of a cotangent.
pub fn batch_shape(g: &Tensor) -> &[usize] {
    let k = batch_dims().min(g.rank());
    &g.shape()[..k]
}

/// The logical shape of a cotangent (its shape without the batch dims).
pub fn logical_shape(g: &Tensor) -> &[usize] {
    let k = batch_dims().min(g.rank());
    &g.shape()[k..]
}

/// `batch_shape(g) ++ shape`.
pub fn with_batch(g: &Tensor, shape: &[usize]) -> Vec<usize> {
    let mut s = batch_shape(g).to_vec();
    s.extend_from_slice(shape);
    s
}

/// A logical axis shifted past the batch dims.
#[inline]
pub fn axis(a: usize) -> isize {
    (a + batch_dims()) as isize
}

/// Logical axes shifted past the batch dims.
pub fn axes(a: &[usize]) -> Vec<isize> {
    let k = batch_dims();
    a.iter().map(|&x| (x + k) as isize).collect()
}

/// A logical permutation extended to keep the batch dims in front.
pub fn perm(p: &[usize]) -> Vec<usize> {
    let k = batch_dims();
    (0..k).chain(p.iter().map(|&x| x + k)).collect()
}

/// Reshapes a cotangent to the logical `shape`, keeping its batch dims.
pub fn reshape(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    g.reshape(&with_batch(g, shape))
}

/// Broadcasts a cotangent to the logical `shape` (NumPy rules on the
/// logical dims; missing logical dims are inserted after the batch dims).
pub fn broadcast_to(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let k = batch_dims();
    if k == 0 {
        return g.broadcast_to(shape);
    }
    let logical = logical_shape(g);
    if logical.len() > shape.len() {
        return Err(Error::ShapeMismatch {
            op: "broadcast_to",
            lhs: g.shape().to_vec(),
            rhs: shape.to_vec(),
        });
    }
    let mut padded = batch_shape(g).to_vec();
    padded.extend(std::iter::repeat_n(1, shape.len() - logical.len()));
    padded.extend_from_slice(logical);
    g.reshape(&padded)?.broadcast_to(&with_batch(g, shape))
}

/// Sums a cotangent over the logical dims that broadcasting added or
/// stretched, giving the logical `shape` (batch dims kept). The batched form
/// of [`Tensor::sum_to_shape`].
pub fn unbroadcast(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let k = batch_dims();
    if k == 0 {
        return g.sum_to_shape(shape);
    }
    let s = g.shape();
    let logical = logical_shape(g);
    if logical == shape {
        return Ok(g.clone());
    }
    let mismatch = || Error::ShapeMismatch {
        op: "sum_to_shape",
        lhs: s.to_vec(),
        rhs: shape.to_vec(),
    };
    if shape.len() > logical.len() {
        return Err(mismatch());
    }
    let lead = logical.len() - shape.len();
    let mut ax: Vec<isize> = (k..k + lead).map(|a| a as isize).collect();
    for (i, &d) in shape.iter().enumerate() {
        let have = logical[lead + i];
        if d == 1 && have != 1 {
            ax.push((k + lead + i) as isize);
        } else if d != have {
            return Err(mismatch());
        }
    }
    let out = with_batch(g, shape);
    g.sum(&ax, false)?.reshape(&out)
}
