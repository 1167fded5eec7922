//! Sorting and searching: `argsort`, `sort`, `take_along_axis`, `top_k`,
//! `unique`, `searchsorted`, `bincount`, `argwhere` (TensorFlow's
//! one-argument `where`), `boolean_mask` and `roll`.
//!
//! The primitives here produce indices or counts and have no gradient
//! (`argsort`, `unique`, `searchsorted`, `bincount`, `argwhere`); the
//! differentiable ops are built on them with gathers, so their gradients
//! scatter the cotangent back to the chosen entries (`sort`, `top_k`,
//! `boolean_mask`, `take_along_axis`) or are slices and concats (`roll`).
//!
//! Order: NaN counts as larger than every number (last in an ascending
//! sort, as NumPy and TensorFlow; first in a descending one, where
//! TensorFlow 2.21's `sort` leaves NaN in an arbitrary place, e.g.
//! `[2, nan, -1]`); equal values keep their order (stable sorts, so `top_k`
//! prefers the lower index on ties, as TensorFlow). Indices are `i64` (TF's
//! default is `int32`).

use std::cmp::Ordering;

use crate::error::{Error, Result};
use crate::kernels::cpu::index::int_values;
use crate::ops::desc::{Lazy, Op, SortOp};
use crate::ops::{bind_nondiff, unsupported};
use crate::tensor::layout::norm_axis;
use num_traits::Zero;

use crate::tensor::{alloc, with_num_dtype, DType, Num, Tensor};

#[allow(clippy::eq_op)]
#[inline]
fn is_nan<T: PartialEq + Copy>(v: T) -> bool {
    v != v
}

/// Ascending order with NaN after every number.
#[inline]
pub fn order<T: Num>(a: &T, b: &T) -> Ordering {
    a.partial_cmp(b).unwrap_or_else(|| is_nan(*a).cmp(&is_nan(*b)))
}

/// `(outer, n, inner)` of `shape` around axis `a`.
fn split_at_axis(shape: &[usize], a: usize) -> (usize, usize, usize) {
    (shape[..a].iter().product(), shape[a], shape[a + 1..].iter().product())
}

fn argsort_kernel<T: Num>(op: &'static str, x: &Tensor, a: usize, descending: bool) -> Result<Tensor> {
    let v = x.values::<T>(op)?;
    let (outer, n, inner) = split_at_axis(x.shape(), a);
    let mut out = alloc::try_vec::<i64>(op, v.len())?;
    out.resize(v.len(), 0);
    // an empty tensor may have huge dims (`[2^63 - 1, 0]`): no row to sort,
    // no scratch, and no walk over its empty batches
    if v.is_empty() {
        return Tensor::from_vec(out, x.shape());
    }
    let mut idx: Vec<usize> = alloc::try_vec(op, n)?;
    for o in 0..outer {
        for j in 0..inner {
            let at = |i: usize| v[(o * n + i) * inner + j];
            idx.clear();
            idx.extend(0..n);
            if descending {
                idx.sort_by(|&p, &q| order(&at(q), &at(p)));
            } else {
                idx.sort_by(|&p, &q| order(&at(p), &at(q)));
            }
            for (r, &i) in idx.iter().enumerate() {
                out[(o * n + r) * inner + j] = i as i64;
            }
        }
    }
    Tensor::from_vec(out, x.shape())
}

impl Tensor {
    /// The indices that sort `self` along `axis` (stable; `i64`, the shape
    /// of `self`). NaN sorts as the largest value. Not differentiable.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[3.0f32, 1.0, 2.0, 1.0]);
    /// assert_eq!(x.argsort(0, false)?.to_vec::<i64>()?, vec![1, 3, 2, 0]);
    /// assert_eq!(x.argsort(-1, true)?.to_vec::<i64>()?, vec![0, 2, 1, 3]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn argsort(&self, axis: isize, descending: bool) -> Result<Tensor> {
        const OP: &str = "argsort";
        let a = norm_axis(OP, axis, self.shape())?;
        let host = |x: &Tensor| {
            with_num_dtype!(x.dtype(), T => argsort_kernel::<T>(OP, x, a, descending),
                _ => Err(unsupported(OP, x.dtype(), "a real numeric dtype")))
        };
        let real = self.dtype().is_float() || self.dtype().is_int();
        // on a GPU: ranks counted per element (`kernels::cuda::scan`), the
        // CPU's order exactly
        let gpu = if real {
            crate::dispatch::device::offload(
                OP,
                &[self],
                |_| crate::kernels::cuda::argsort(OP, self, a, descending),
                |h| host(&h[0]),
            )
        } else {
            None
        };
        let y = gpu.unwrap_or_else(|| host(self))?;
        Ok(bind_nondiff(
            Lazy("ArgSort", || Op::Sort(SortOp::ArgSort { axis, descending })),
            &[self],
            y,
        ))
    }

    /// The entries of `self` picked along `axis` by `indices` of the same
    /// rank (NumPy's `take_along_axis`): `out[.., i, ..] = self[.., indices[.., i, ..], ..]`.
    /// The other dims of `indices` must equal those of `self`.
    /// Differentiable in `self` (the cotangent is scattered back).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec(vec![10i32, 20, 30, 40], &[2, 2])?;
    /// let i = Tensor::from_vec(vec![1i64, 1, 0, 1], &[2, 2])?;
    /// assert_eq!(x.take_along_axis(&i, 1)?.to_vec::<i32>()?, vec![20, 20, 30, 40]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn take_along_axis(&self, indices: &Tensor, axis: isize) -> Result<Tensor> {
        let _site = crate::dispatch::site::user_op("take_along_axis", &[("x", self), ("indices", indices)]);
        const OP: &str = "take_along_axis";
        let a = norm_axis(OP, axis, self.shape())?;
        let (xs, is) = (self.shape(), indices.shape());
        if xs.len() != is.len() || (0..xs.len()).any(|d| d != a && xs[d] != is[d]) {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: xs.to_vec(),
                rhs: is.to_vec(),
            });
        }
        let r = xs.len();
        // move the axis last, gather with every other dim as a batch dim
        let perm: Vec<usize> = (0..r).filter(|&d| d != a).chain([a]).collect();
        let mut back = vec![0; r];
        for (i, &p) in perm.iter().enumerate() {
            back[p] = i;
        }
        let run = || {
            let xt = self.permute(&perm)?;
            let it = indices.permute(&perm)?;
            xt.gather_with(&it, -1, r as isize - 1)?.permute(&back)
        };
        run().map_err(|e| e.for_op(OP))
    }

    /// `self` sorted along `axis` (stable; NaN largest). Differentiable:
    /// each entry's cotangent goes back to the entry it came from.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[3.0f64, -1.0, 2.0]);
    /// assert_eq!(x.sort(0, false)?.to_vec::<f64>()?, vec![-1.0, 2.0, 3.0]);
    /// assert_eq!(x.sort(0, true)?.to_vec::<f64>()?, vec![3.0, 2.0, -1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn sort(&self, axis: isize, descending: bool) -> Result<Tensor> {
        let idx = self.argsort(axis, descending).map_err(|e| e.for_op("sort"))?;
        self.take_along_axis(&idx, axis).map_err(|e| e.for_op("sort"))
    }

    /// The `k` largest entries along the last axis, largest first, and their
    /// indices (`i64`); on ties the lower index comes first (TensorFlow's
    /// `top_k`). `k` must not exceed the last dim. Differentiable in the
    /// values (the cotangent goes to the chosen entries).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[1.0f32, 5.0, 3.0, 5.0]);
    /// let (v, i) = x.top_k(2)?;
    /// assert_eq!(v.to_vec::<f32>()?, vec![5.0, 5.0]);
    /// assert_eq!(i.to_vec::<i64>()?, vec![1, 3]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn top_k(&self, k: usize) -> Result<(Tensor, Tensor)> {
        const OP: &str = "top_k";
        let Some(&n) = self.shape().last() else {
            return Err(Error::invalid(OP, "needs rank >= 1, got a scalar"));
        };
        if k > n {
            return Err(Error::invalid(
                OP,
                format!("k = {k} exceeds the last dim of shape {:?}", self.shape()),
            ));
        }
        let run = || {
            let idx = self.argsort(-1, true)?.narrow(-1, 0, k)?;
            let values = self.take_along_axis(&idx, -1)?;
            Ok((values, idx))
        };
        run().map_err(|e: Error| e.for_op(OP))
    }

    /// The distinct values of a 1-D tensor in order of first appearance,
    /// and for each element the index of its value among them (`i64`), as
    /// TensorFlow's `unique`. NaN never equals anything, so each NaN is its
    /// own value; `-0.0` equals `0.0`. Not differentiable.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[4i32, 1, 4, 2, 1]);
    /// let (y, i) = x.unique()?;
    /// assert_eq!(y.to_vec::<i32>()?, vec![4, 1, 2]);
    /// assert_eq!(i.to_vec::<i64>()?, vec![0, 1, 0, 2, 1]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn unique(&self) -> Result<(Tensor, Tensor)> {
        const OP: &str = "unique";
        if self.rank() != 1 {
            return Err(Error::invalid(
                OP,
                format!("needs a 1-D tensor, got shape {:?}", self.shape()),
            ));
        }
        // (no GPU kernel: on the CPU under soft device placement)
        let (values, idx) = match crate::dispatch::device::hosted_pair(OP, &[self], |h| h[0].unique()) {
            Some(r) => r?,
            None => with_num_dtype!(self.dtype(), T => unique_kernel::<T>(OP, self)?,
                _ => return Err(unsupported(OP, self.dtype(), "a real numeric dtype"))),
        };
        let values = bind_nondiff(Op::Sort(SortOp::Unique(0)), &[self], values);
        let idx = bind_nondiff(Op::Sort(SortOp::Unique(1)), &[self], idx);
        Ok((values, idx))
    }

    /// For each value (last axis of `values`), where it would go in the
    /// matching sorted row of `self` (last axis): before equal entries
    /// (`right = false`) or after them. Leading dims must match (a 1-D
    /// `self` serves every row of `values`). `i64`, the shape of `values`.
    /// Not differentiable.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let s = Tensor::vector(&[1.0f64, 2.0, 2.0, 5.0]);
    /// let v = Tensor::vector(&[2.0f64, 0.0, 9.0]);
    /// assert_eq!(s.searchsorted(&v, false)?.to_vec::<i64>()?, vec![1, 0, 4]);
    /// assert_eq!(s.searchsorted(&v, true)?.to_vec::<i64>()?, vec![3, 0, 4]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn searchsorted(&self, values: &Tensor, right: bool) -> Result<Tensor> {
        const OP: &str = "searchsorted";
        crate::ops::expect_same_dtype(OP, self, values)?;
        let (ss, vs) = (self.shape(), values.shape());
        let shared = ss.len() == 1 && !vs.is_empty();
        if ss.is_empty()
            || vs.is_empty()
            || (!shared && (ss.len() != vs.len() || ss[..ss.len() - 1] != vs[..vs.len() - 1]))
        {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: ss.to_vec(),
                rhs: vs.to_vec(),
            });
        }
        let hosted = crate::dispatch::device::hosted(OP, &[self, values], |h| h[0].searchsorted(&h[1], right));
        let y = if let Some(r) = hosted {
            r?
        } else {
            with_num_dtype!(self.dtype(), T => {
            let (s, v) = (self.values::<T>(OP)?, values.values::<T>(OP)?);
            let n = ss[ss.len() - 1];
            let m = vs[vs.len() - 1];
            let out = alloc::try_collect(OP, v.iter().enumerate().map(|(j, x)| {
                let row = if shared { &s[..] } else { &s[(j / m.max(1)) * n..(j / m.max(1) + 1) * n] };
                let p = if right {
                    row.partition_point(|e| order(e, x) != Ordering::Greater)
                } else {
                    row.partition_point(|e| order(e, x) == Ordering::Less)
                };
                p as i64
            }))?;
            Tensor::from_vec(out, vs)?
        }, _ => return Err(unsupported(OP, self.dtype(), "a real numeric dtype")))
        };
        Ok(bind_nondiff(
            Lazy("SearchSorted", || Op::Sort(SortOp::SearchSorted { right })),
            &[self, values],
            y,
        ))
    }

    /// Counts of each value `0..len` among the (non-negative integer)
    /// entries of `self`, or the sums of `weights` (same shape as `self`)
    /// at them; `len` is the largest entry + 1, at least `minlength`.
    /// Counts are `i64`; sums have the dtype of `weights`. A negative entry
    /// is an error. Not differentiable.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[1i64, 3, 1]);
    /// assert_eq!(x.bincount(None, 0)?.to_vec::<i64>()?, vec![0, 2, 0, 1]);
    /// let w = Tensor::vector(&[0.5f32, 1.0, 2.0]);
    /// assert_eq!(x.bincount(Some(&w), 6)?.to_vec::<f32>()?, vec![0.0, 2.5, 0.0, 1.0, 0.0, 0.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn bincount(&self, weights: Option<&Tensor>, minlength: usize) -> Result<Tensor> {
        const OP: &str = "bincount";
        let inputs: Vec<&Tensor> = std::iter::once(self).chain(weights).collect();
        if let Some(r) = crate::dispatch::device::hosted(OP, &inputs, |h| h[0].bincount(h.get(1), minlength)) {
            let y = r?;
            let desc = || Op::Sort(SortOp::Bincount { minlength });
            return Ok(bind_nondiff(Lazy("Bincount", desc), &inputs, y));
        }
        let v = int_values(OP, self)?;
        if let Some(&bad) = v.iter().find(|&&x| x < 0) {
            return Err(Error::invalid(
                OP,
                format!("entries must be >= 0, got {bad} (shape {:?})", self.shape()),
            ));
        }
        let len = v.iter().map(|&x| x as usize + 1).max().unwrap_or(0).max(minlength);
        let y = match weights {
            None => {
                let mut out = alloc::try_vec::<i64>(OP, len)?;
                out.resize(len, 0);
                for &x in v.iter() {
                    out[x as usize] += 1;
                }
                Tensor::from_vec(out, &[len])?
            }
            Some(w) => {
                if w.shape() != self.shape() {
                    return Err(Error::ShapeMismatch {
                        op: OP,
                        lhs: self.shape().to_vec(),
                        rhs: w.shape().to_vec(),
                    });
                }
                with_num_dtype!(w.dtype(), T => {
                    let wv = w.values::<T>(OP)?;
                    let mut out = alloc::try_vec::<T>(OP, len)?;
                    out.resize(len, T::zero());
                    for (&x, &wx) in v.iter().zip(wv.iter()) {
                        out[x as usize] = out[x as usize].add_wrap(wx);
                    }
                    Tensor::from_vec(out, &[len])?
                }, _ => return Err(unsupported(OP, w.dtype(), "real numeric weights")))
            }
        };
        let desc = || Op::Sort(SortOp::Bincount { minlength });
        Ok(match weights {
            None => bind_nondiff(Lazy("Bincount", desc), &[self], y),
            Some(w) => bind_nondiff(Lazy("Bincount", desc), &[self, w], y),
        })
    }

    /// The coordinates of the non-zero (or true) elements in row-major
    /// order, `[count, rank]` `i64`: TensorFlow's one-argument `where`
    /// (NumPy's `argwhere`). Not differentiable.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let m = Tensor::from_vec(vec![true, false, false, true], &[2, 2])?;
    /// assert_eq!(m.argwhere()?.to_vec::<i64>()?, vec![0, 0, 1, 1]);
    /// assert_eq!(m.argwhere()?.shape(), &[2, 2]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn argwhere(&self) -> Result<Tensor> {
        const OP: &str = "argwhere";
        // (its output's shape depends on the values: the host's kernel,
        // under soft device placement, for a GPU tensor)
        if let Some(r) = crate::dispatch::device::hosted(OP, &[self], |h| h[0].argwhere()) {
            return Ok(bind_nondiff(Op::Sort(SortOp::ArgWhere), &[self], r?));
        }
        let nz: Vec<bool> = match self.dtype() {
            DType::Bool => self.values::<bool>(OP)?.to_vec(),
            d => with_num_dtype!(d, T => self.values::<T>(OP)?.iter().map(|&v| v != T::zero()).collect(),
                _ => return Err(unsupported(OP, d, "a real numeric or bool dtype"))),
        };
        let r = self.rank();
        let count = nz.iter().filter(|&&b| b).count();
        let mut out = alloc::try_vec::<i64>(OP, count * r)?;
        let shape = self.shape();
        for (flat, _) in nz.iter().enumerate().filter(|&(_, &b)| b) {
            let start = out.len();
            out.resize(start + r, 0);
            let mut rem = flat;
            for d in (0..r).rev() {
                out[start + d] = (rem % shape[d]) as i64;
                rem /= shape[d];
            }
        }
        let y = Tensor::from_vec(out, &[count, r])?;
        Ok(bind_nondiff(Op::Sort(SortOp::ArgWhere), &[self], y))
    }

    /// The slices of `self` where `mask` (bool, the leading dims of
    /// `self`) is true, stacked along a new first axis: shape
    /// `[count, shape[mask.rank..]..]`. Differentiable in `self`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
    /// let m = Tensor::vector(&[true, false, true]);
    /// assert_eq!(x.boolean_mask(&m)?.to_vec::<f32>()?, vec![1.0, 2.0, 5.0, 6.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn boolean_mask(&self, mask: &Tensor) -> Result<Tensor> {
        const OP: &str = "boolean_mask";
        if mask.dtype() != DType::Bool {
            return Err(unsupported(OP, mask.dtype(), "a bool mask"));
        }
        let k = mask.rank();
        if k == 0 || k > self.rank() || mask.shape() != &self.shape()[..k] {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: self.shape().to_vec(),
                rhs: mask.shape().to_vec(),
            });
        }
        let run = || self.gather_nd(&mask.argwhere()?);
        run().map_err(|e| e.for_op(OP))
    }

    /// Rotates the entries along each of `axes` by the matching `shifts`
    /// (positive toward higher indices; any size, taken modulo the dim).
    /// Differentiable (slices and a concat).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[1i32, 2, 3, 4, 5]);
    /// assert_eq!(x.roll(&[2], &[0])?.to_vec::<i32>()?, vec![4, 5, 1, 2, 3]);
    /// assert_eq!(x.roll(&[-1], &[0])?.to_vec::<i32>()?, vec![2, 3, 4, 5, 1]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn roll(&self, shifts: &[isize], axes: &[isize]) -> Result<Tensor> {
        const OP: &str = "roll";
        if shifts.len() != axes.len() {
            return Err(Error::invalid(
                OP,
                format!("{} shifts given for {} axes", shifts.len(), axes.len()),
            ));
        }
        let mut y = self.clone();
        for (&s, &axis) in shifts.iter().zip(axes) {
            let a = norm_axis(OP, axis, self.shape())?;
            let n = self.shape()[a];
            if n == 0 {
                continue;
            }
            let s = s.rem_euclid(n as isize) as usize;
            if s == 0 {
                continue;
            }
            let a = a as isize;
            let run = |y: &Tensor| Tensor::concat(&[&y.narrow(a, n - s, s)?, &y.narrow(a, 0, n - s)?], a);
            y = run(&y).map_err(|e| e.for_op(OP))?;
        }
        if y.id() == self.id() {
            return Ok(self.identity());
        }
        Ok(y)
    }
}

fn unique_kernel<T: Num>(op: &'static str, x: &Tensor) -> Result<(Tensor, Tensor)> {
    let v = x.values::<T>(op)?;
    let n = v.len();
    // sort positions by value, group runs of equal values, then number the
    // groups by their first appearance (every buffer allocated fallibly)
    let mut pos: Vec<usize> = alloc::try_collect(op, 0..n)?;
    pos.sort_by(|&p, &q| order(&v[p], &v[q]).then(p.cmp(&q)));
    let mut group = alloc::try_filled(op, n, 0usize)?;
    let groups = pos.windows(2).filter(|w| v[w[0]] != v[w[1]]).count() + usize::from(n > 0);
    let mut firsts: Vec<usize> = alloc::try_vec(op, groups)?;
    for (r, &p) in pos.iter().enumerate() {
        if r == 0 || v[pos[r - 1]] != v[p] {
            firsts.push(p);
        }
        group[p] = firsts.len() - 1;
    }
    drop(pos);
    let mut rank: Vec<usize> = alloc::try_collect(op, 0..firsts.len())?;
    rank.sort_by_key(|&g| firsts[g]);
    let mut number = alloc::try_filled(op, firsts.len(), 0usize)?;
    for (k, &g) in rank.iter().enumerate() {
        number[g] = k;
    }
    let values: Vec<T> = alloc::try_collect(op, rank.iter().map(|&g| v[firsts[g]]))?;
    let idx: Vec<i64> = alloc::try_collect(op, group.iter().map(|&g| number[g] as i64))?;
    Ok((Tensor::from_vec(values, &[firsts.len()])?, Tensor::from_vec(idx, &[n])?))
}
