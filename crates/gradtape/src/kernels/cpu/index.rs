//! Gather along an axis and its adjoint, scatter-add.

use crate::error::{Error, Result};
use crate::tensor::{with_dtype, DType, Element, Num, Shape, Tensor};

/// Reads integer indices as `i64`, checking each lies in `0..dim`.
pub(crate) fn checked_indices(op: &'static str, indices: &Tensor, dim: usize, shape: &[usize]) -> Result<Vec<i64>> {
    let idx: Vec<i64> = match indices.dtype() {
        DType::I32 => indices.values::<i32>().iter().map(|&v| v as i64).collect(),
        DType::I64 => indices.values::<i64>().into_owned(),
        d => {
            return Err(Error::UnsupportedDType {
                op,
                dtype: d,
                expected: "i32 or i64 indices",
            })
        }
    };
    if let Some(&bad) = idx.iter().find(|&&i| i < 0 || i as usize >= dim) {
        return Err(Error::IndexOutOfRange {
            op,
            index: bad,
            dim,
            shape: shape.to_vec(),
        });
    }
    Ok(idx)
}

/// `out[a.., i.., b..] = params[a.., indices[i..], b..]` with `axis` the
/// position of the gathered dimension.
pub(crate) fn gather(params: &Tensor, indices: &Tensor, axis: usize) -> Result<Tensor> {
    let ps = params.shape();
    let idx = checked_indices("gather", indices, ps[axis], ps)?;
    let outer: usize = ps[..axis].iter().product();
    let inner: usize = ps[axis + 1..].iter().product();
    let dim = ps[axis];
    let mut shape: Shape = ps[..axis].into();
    shape.extend_from_slice(indices.shape());
    shape.extend_from_slice(&ps[axis + 1..]);
    Ok(with_dtype!(params.dtype(), T => {
        let src = params.values::<T>();
        let mut out: Vec<T> = Vec::with_capacity(outer * idx.len() * inner);
        for o in 0..outer {
            for &i in &idx {
                let start = (o * dim + i as usize) * inner;
                out.extend_from_slice(&src[start..start + inner]);
            }
        }
        Tensor::from_storage(T::into_storage(out), &shape)
    }))
}

/// The adjoint of [`gather`]: zeros of `[a.., dim, b..]` with each slice of
/// `updates` added at its index (duplicates accumulate).
pub(crate) fn scatter_add(updates: &Tensor, indices: &Tensor, axis: usize, dim: usize) -> Result<Tensor> {
    let us = updates.shape();
    let ir = indices.rank();
    if us.len() < axis + ir || us[axis..axis + ir] != *indices.shape() {
        return Err(Error::ShapeMismatch {
            op: "scatter_add",
            lhs: us.to_vec(),
            rhs: indices.shape().to_vec(),
        });
    }
    let mut shape: Shape = us[..axis].into();
    shape.push(dim);
    shape.extend_from_slice(&us[axis + ir..]);
    let idx = checked_indices("scatter_add", indices, dim, &shape)?;
    let outer: usize = us[..axis].iter().product();
    let inner: usize = us[axis + ir..].iter().product();
    fn run<T: Num>(u: &[T], idx: &[i64], outer: usize, inner: usize, dim: usize) -> Vec<T> {
        let mut out = vec![T::zero(); outer * dim * inner];
        for o in 0..outer {
            for (j, &i) in idx.iter().enumerate() {
                let src = &u[(o * idx.len() + j) * inner..][..inner];
                let dst = &mut out[(o * dim + i as usize) * inner..][..inner];
                for (d, &s) in dst.iter_mut().zip(src) {
                    *d = d.add_wrap(s);
                }
            }
        }
        out
    }
    crate::tensor::with_num_dtype!(updates.dtype(), T => {
        let u = updates.values::<T>();
        Ok(Tensor::from_storage(T::into_storage(run::<T>(&u, &idx, outer, inner, dim)), &shape))
    }, _ => super::complex::scatter_add(updates, &idx, &shape, outer, inner, dim))
}

/// `base[indices[j]] = f(base[indices[j]], updates[j])`, row by row along
/// axis 0 (a repeated index is updated once per occurrence, so additions
/// accumulate). Written over `base`'s buffer when nothing else references
/// it, so the cost is the rows', not the table's; otherwise into a copy that
/// replaces `base` (copy-on-write: a tensor sharing the old buffer keeps its
/// value). Indices are checked here; shapes and dtypes by the caller.
pub(crate) fn update_rows<T: Num>(
    op: &'static str,
    base: &mut Tensor,
    updates: &Tensor,
    indices: &Tensor,
    f: impl Fn(T, T) -> T,
) -> Result<()> {
    let shape: Shape = base.shape().into();
    let rows = shape.first().copied().unwrap_or(0);
    let idx = checked_indices(op, indices, rows, &shape)?;
    let inner: usize = shape[1..].iter().product();
    let u = updates.values::<T>();
    let apply = |out: &mut [T]| {
        for (j, &i) in idx.iter().enumerate() {
            let src = &u[j * inner..][..inner];
            let dst = &mut out[i as usize * inner..][..inner];
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = f(*d, s);
            }
        }
    };
    if let Some(out) = base.unique_values_mut::<T>() {
        apply(out);
        return Ok(());
    }
    let mut out = base.values::<T>().into_owned();
    apply(&mut out);
    *base = Tensor::from_storage(T::into_storage(out), &shape);
    Ok(())
}
