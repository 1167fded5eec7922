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

/// `base` with `sign * updates[j]` added to row `indices[j]` of axis 0 (a
/// copy of `base`; repeated indices accumulate). Shapes and indices are
/// checked by the caller's `IndexedSlices`.
pub(crate) fn add_rows(base: &Tensor, updates: &Tensor, indices: &Tensor, negate: bool) -> Result<Tensor> {
    let rows = base.shape().first().copied().unwrap_or(0);
    let idx = checked_indices("scatter_update", indices, rows, base.shape())?;
    let inner: usize = base.shape()[1..].iter().product();
    crate::tensor::with_num_dtype!(base.dtype(), T => {
        let mut out = base.values::<T>().into_owned();
        let u = updates.values::<T>();
        for (j, &i) in idx.iter().enumerate() {
            let src = &u[j * inner..][..inner];
            let dst = &mut out[i as usize * inner..][..inner];
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = if negate { d.sub_wrap(s) } else { d.add_wrap(s) };
            }
        }
        Ok(Tensor::from_storage(T::into_storage(out), base.shape()))
    }, _ => Err(Error::UnsupportedDType { op: "scatter_update", dtype: base.dtype(), expected: "a numeric dtype" }))
}
