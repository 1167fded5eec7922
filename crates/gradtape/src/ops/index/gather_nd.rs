//! N-d indexing: gather_nd and its adjoint scatter_nd (each the other's
//! rule), and gather with batch dims (a permute around gather_nd).

use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::filled_vec;
use crate::kernels::cpu::index::int_values;
use crate::ops::desc::{Lazy, Op, ShapeOp};
use crate::ops::{bind, grads, unsupported};
use crate::tensor::layout::{checked_numel, norm_axis};
use crate::tensor::{alloc, with_dtype, with_num_dtype, Num, Tensor};

/// Reads `[..., K]` integer indices into `params_shape` (shape `shape`) as
/// flat offsets (in units of the `shape[K..]` slices), checking every
/// coordinate.
pub(crate) fn nd_offsets(op: &'static str, indices: &Tensor, shape: &[usize]) -> Result<(Vec<usize>, usize)> {
    let k = nd_check(op, indices, shape)?;
    let raw = int_values(op, indices)?;
    let count: usize = indices.shape()[..indices.rank() - 1].iter().product();
    let mut offsets = alloc::try_vec(op, count)?;
    for i in 0..count {
        let mut o = 0usize;
        for d in 0..k {
            let v = raw[i * k + d];
            if v < 0 || v as u64 >= shape[d] as u64 {
                return Err(Error::IndexOutOfRange {
                    op,
                    index: v,
                    dim: shape[d],
                    shape: shape.to_vec(),
                });
            }
            o = o * shape[d] + v as usize;
        }
        offsets.push(o);
    }
    Ok((offsets, k))
}

/// The `K` of `[..., K]` integer indices into `shape` (their dtype and
/// shape checked; their values are checked where they are read).
fn nd_check(op: &'static str, indices: &Tensor, shape: &[usize]) -> Result<usize> {
    if !indices.dtype().is_int() {
        return Err(unsupported(op, indices.dtype(), "i32 or i64 indices"));
    }
    let Some(&k) = indices.shape().last() else {
        return Err(Error::invalid(
            op,
            format!("indices need rank >= 1, got shape [] (params shape {shape:?})"),
        ));
    };
    if k > shape.len() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: shape.to_vec(),
            rhs: indices.shape().to_vec(),
        });
    }
    Ok(k)
}

impl Tensor {
    /// Picks slices of `self` by `K`-tuples of indices: `indices` is
    /// `[..., K]` (integers) and the result is `indices.shape[..-1] ++
    /// self.shape[K..]`. An index out of range is an error. d/dparams
    /// scatters the cotangent back (dense).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let i = Tensor::from_vec(vec![1i64, 0, 0, 1], &[2, 2])?;
    /// assert_eq!(x.gather_nd(&i)?.to_vec::<f32>()?, vec![3.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn gather_nd(&self, indices: &Tensor) -> Result<Tensor> {
        let _site = crate::dispatch::site::user_op("gather_nd", &[("params", self), ("indices", indices)]);
        const OP: &str = "gather_nd";
        let ps = self.shape();
        let k = nd_check(OP, indices, ps)?;
        let inner: usize = ps[k..].iter().product();
        let mut shape = indices.shape()[..indices.rank() - 1].to_vec();
        shape.extend_from_slice(&ps[k..]);
        let n = checked_numel(OP, &shape)?;
        let host = |p: &Tensor, i: &Tensor| -> Result<Tensor> {
            let (offs, _) = nd_offsets(OP, i, ps)?;
            with_dtype!(p.dtype(), T => {
                let src = p.values::<T>(OP)?;
                let mut out: Vec<T> = alloc::try_vec(OP, n)?;
                for &o in &offs {
                    out.extend_from_slice(&src[o * inner..(o + 1) * inner]);
                }
                Tensor::from_vec(out, &shape)
            })
        };
        // on a GPU: the tuples' flat offsets, checked, then a gather
        // (`kernels::cuda::index`)
        let gpu = crate::dispatch::device::offload(
            OP,
            &[self, indices],
            |_| crate::kernels::cuda::gather_nd(OP, self, indices, k, &shape),
            |h| host(&h[0], &h[1]),
        );
        let y = gpu.unwrap_or_else(|| host(self, indices))?;
        let (idx, pshape) = (indices.clone(), ps.to_vec());
        Ok(bind(Op::Shape(ShapeOp::GatherNd), &[self, indices], y, move |_| {
            vjp(move |g, _| Ok(grads![Some(Tensor::scatter_nd(&idx, &g[0], &pshape)?), None]))
        }))
    }

    /// Zeros of `shape` with each slice of `updates` added at its `K`-tuple
    /// of `indices` (`[..., K]`); duplicates add up. `updates` must have
    /// shape `indices.shape[..-1] ++ shape[K..]`. d/dupdates is gather_nd.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let i = Tensor::from_vec(vec![2i64, 0, 2], &[3, 1])?;
    /// let u = Tensor::vector(&[1.0f64, 2.0, 3.0]);
    /// assert_eq!(Tensor::scatter_nd(&i, &u, &[4])?.to_vec::<f64>()?, vec![2.0, 0.0, 4.0, 0.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn scatter_nd(indices: &Tensor, updates: &Tensor, shape: &[usize]) -> Result<Tensor> {
        let _site = crate::dispatch::site::user_op("scatter_nd", &[("indices", indices), ("updates", updates)]);
        const OP: &str = "scatter_nd";
        let n = checked_numel(OP, shape)?;
        let k = nd_check(OP, indices, shape)?;
        let mut want = indices.shape()[..indices.rank() - 1].to_vec();
        want.extend_from_slice(&shape[k..]);
        if updates.shape() != want.as_slice() {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: updates.shape().to_vec(),
                rhs: want,
            });
        }
        let inner: usize = shape[k..].iter().product();
        fn run<T: Num>(u: &[T], offs: &[usize], inner: usize, n: usize) -> Result<Vec<T>> {
            let mut out = filled_vec(OP, n, T::zero())?;
            for (j, &o) in offs.iter().enumerate() {
                for (d, &s) in out[o * inner..(o + 1) * inner]
                    .iter_mut()
                    .zip(&u[j * inner..(j + 1) * inner])
                {
                    *d = d.add_wrap(s);
                }
            }
            Ok(out)
        }
        let host = |u: &Tensor, i: &Tensor| -> Result<Tensor> {
            let (offs, _) = nd_offsets(OP, i, shape)?;
            with_num_dtype!(u.dtype(), T => Tensor::from_vec(run::<T>(&u.values::<T>(OP)?, &offs, inner, n)?, shape),
                _ => Err(unsupported(OP, u.dtype(), "a numeric dtype")))
        };
        // on a GPU: the tuples' flat offsets, checked, then a scatter-add
        let gpu = crate::dispatch::device::offload(
            OP,
            &[updates, indices],
            |_| crate::kernels::cuda::scatter_nd(OP, updates, indices, k, shape),
            |h| host(&h[0], &h[1]),
        );
        let y = gpu.unwrap_or_else(|| host(updates, indices))?;
        let idx = indices.clone();
        Ok(bind(
            Lazy("ScatterNd", || Op::Shape(ShapeOp::ScatterNd(shape.into()))),
            &[updates, indices],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].gather_nd(&idx)?), None])),
        ))
    }

    /// Gather along `axis` with `batch_dims` leading dims shared by `self`
    /// and `indices` (as TF's `gather(..., batch_dims)`): for
    /// `self: [B.., A.., D, R..]` (`axis` at `D`) and `indices: [B.., I..]`,
    /// the result is `[B.., A.., I.., R..]`. A negative `batch_dims` counts
    /// from the rank of `indices`. Differentiable in `self` (through
    /// gather_nd). With `batch_dims = 0` it equals [`gather`](Self::gather).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec(vec![1i32, 2, 3, 4, 5, 6], &[2, 3])?;
    /// let i = Tensor::from_vec(vec![2i64, 0, 1, 1], &[2, 2])?;
    /// let y = x.gather_with(&i, 1, 1)?;
    /// assert_eq!(y.to_vec::<i32>()?, vec![3, 1, 5, 5]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn gather_with(&self, indices: &Tensor, axis: isize, batch_dims: isize) -> Result<Tensor> {
        let _site = crate::dispatch::site::user_op("gather_with", &[("params", self), ("indices", indices)]);
        const OP: &str = "gather_with";
        if !indices.dtype().is_int() {
            return Err(unsupported(OP, indices.dtype(), "i32 or i64 indices"));
        }
        let ax = norm_axis(OP, axis, self.shape())?;
        let ir = indices.rank() as isize;
        let b = if batch_dims < 0 { batch_dims + ir } else { batch_dims };
        if b < 0 || b > ir || b as usize > ax {
            return Err(Error::invalid(
                OP,
                format!(
                    "batch_dims {batch_dims} must lie in 0..={} and not exceed axis {axis} (params {:?}, indices {:?})",
                    ir,
                    self.shape(),
                    indices.shape()
                ),
            ));
        }
        let b = b as usize;
        let (ps, is) = (self.shape(), indices.shape());
        if ps[..b] != is[..b] {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: ps.to_vec(),
                rhs: is.to_vec(),
            });
        }
        let r = ps.len();
        // params -> [B.., D, A.., R..]
        let perm: Vec<usize> = (0..b).chain([ax]).chain(b..ax).chain(ax + 1..r).collect();
        let p = self.permute(&perm)?;
        // nd indices [B.., I.., b+1]: the batch coordinates (a constant of
        // the shapes), then the index (read by ops, so a trace follows it)
        let mut nd_shape = is.to_vec();
        nd_shape.push(b);
        let per_batch: usize = is[b..].iter().product();
        let last = indices.cast(crate::DType::I64)?.expand_dims(-1)?;
        // (no batch dims: the index alone; the loop would walk every index
        // for nothing, 2^40 of them for a broadcast index)
        let nd = if b == 0 {
            last
        } else {
            let mut coords = alloc::try_vec(OP, checked_numel(OP, &nd_shape)?)?;
            for j in 0..checked_numel(OP, is)? {
                let mut rem = j / per_batch.max(1);
                let start = coords.len();
                coords.resize(start + b, 0i64);
                for d in (0..b).rev() {
                    coords[start + d] = (rem % is[d]) as i64;
                    rem /= is[d];
                }
            }
            // (made where the indices are: a constant of their device)
            let coords = Tensor::from_vec(coords, &nd_shape)?.to(indices.device())?;
            Tensor::concat(&[&coords, &last], -1)?
        };
        let g = p.gather_nd(&nd).map_err(|e| match e {
            Error::IndexOutOfRange { index, dim, .. } => Error::IndexOutOfRange {
                op: OP,
                index,
                dim,
                shape: ps.to_vec(),
            },
            other => other,
        })?;
        // [B.., I.., A.., R..] -> [B.., A.., I.., R..]
        let ni = is.len() - b;
        let na = ax - b;
        let back: Vec<usize> = (0..b)
            .chain(b + ni..b + ni + na)
            .chain(b..b + ni)
            .chain(b + ni + na..g.rank())
            .collect();
        g.permute(&back)
    }
}
