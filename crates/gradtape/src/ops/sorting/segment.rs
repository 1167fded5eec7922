//! Segment reductions (`segment_sum/prod/max/min/mean` over sorted ids,
//! their `unsorted_segment_*` forms with a given number of segments) and
//! `tensor_scatter_nd_update/add`.
//!
//! Row `i` of `data` (its leading dims, as many as `segment_ids` has) goes
//! to segment `segment_ids[i]`; output row `s` combines the rows of segment
//! `s`. The gradients are TensorFlow's, written with differentiable ops (so
//! they differentiate again): a sum's cotangent is gathered back to the
//! rows; a max/min's goes to the rows equal to the result, shared among
//! ties; a product's is the product of the other rows (by segmented
//! exclusive product scans, exact at zeros to any order). Empty segments
//! give 0 (sum, mean and the sorted max/min), 1 (product), or the dtype's
//! lowest/highest finite value (unsorted max/min: `f32::MIN` rather than
//! -inf), as TensorFlow; so the unsorted max of a segment of -inf alone is
//! that lowest value too (its gradient 0), the sorted one -inf (its
//! gradient passed through). Unsorted ids that are negative are dropped,
//! as TF.

use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::index::int_values;
use crate::ops::desc::{Lazy, Op, SegmentKind, SortOp};
use crate::ops::{bind, grads, unsupported};
use crate::tensor::layout::checked_numel;
use crate::tensor::{alloc, with_dtype, with_num_dtype, DType, Num, Tensor};

fn op_name(kind: SegmentKind, sorted: bool) -> &'static str {
    match (kind, sorted) {
        (SegmentKind::Sum, true) => "segment_sum",
        (SegmentKind::Prod, true) => "segment_prod",
        (SegmentKind::Max, true) => "segment_max",
        (SegmentKind::Min, true) => "segment_min",
        (SegmentKind::Sum, false) => "unsorted_segment_sum",
        (SegmentKind::Prod, false) => "unsorted_segment_prod",
        (SegmentKind::Max, false) => "unsorted_segment_max",
        (SegmentKind::Min, false) => "unsorted_segment_min",
    }
}

/// Checks `ids` against `data` and gives the number of segments.
fn check_ids(op: &'static str, data: &Tensor, ids: &Tensor, ids_v: &[i64], num: Option<usize>) -> Result<usize> {
    let k = ids.rank();
    let fits = if num.is_none() { k == 1 } else { k >= 1 };
    if !fits || k > data.rank() || ids.shape() != &data.shape()[..k] {
        return Err(Error::ShapeMismatch {
            op,
            lhs: data.shape().to_vec(),
            rhs: ids.shape().to_vec(),
        });
    }
    match num {
        Some(n) => match ids_v.iter().find(|&&s| s >= 0 && s as u64 >= n as u64) {
            Some(&bad) => Err(Error::IndexOutOfRange {
                op,
                index: bad,
                dim: n,
                shape: data.shape().to_vec(),
            }),
            None => Ok(n),
        },
        None => {
            if let Some(&bad) = ids_v.iter().find(|&&s| s < 0) {
                return Err(Error::invalid(op, format!("segment ids must be >= 0, got {bad}")));
            }
            if ids_v.windows(2).any(|w| w[0] > w[1]) {
                return Err(Error::invalid(
                    op,
                    "segment ids must be sorted (use the unsorted_ form)",
                ));
            }
            Ok(ids_v.last().map_or(0, |&s| s as usize + 1))
        }
    }
}

/// The reduction itself: `ids` are the flat ids of the first `k` dims of
/// `data`, all checked.
fn reduce_kernel<T: Num>(
    op: &'static str,
    kind: SegmentKind,
    sorted: bool,
    data: &Tensor,
    ids: &[i64],
    num: usize,
    k: usize,
) -> Result<Tensor> {
    let v = data.values::<T>(op)?;
    let inner: usize = data.shape()[k..].iter().product();
    let mut shape = vec![num];
    shape.extend_from_slice(&data.shape()[k..]);
    let n = checked_numel(op, &shape)?;
    // TF fills empty unsorted max/min segments with the dtype's lowest /
    // highest finite value (not -inf/+inf)
    let (lowest, highest) = if T::DTYPE == DType::F32 {
        (T::from_f64(f32::MIN as f64), T::from_f64(f32::MAX as f64))
    } else if T::DTYPE == DType::F16 {
        (
            T::from_f64(half::f16::MIN.to_f64()),
            T::from_f64(half::f16::MAX.to_f64()),
        )
    } else if T::DTYPE == DType::BF16 {
        (
            T::from_f64(half::bf16::MIN.to_f64()),
            T::from_f64(half::bf16::MAX.to_f64()),
        )
    } else if T::DTYPE == DType::F64 {
        (T::from_f64(f64::MIN), T::from_f64(f64::MAX))
    } else if T::DTYPE == DType::I32 {
        (T::from_f64(i32::MIN as f64), T::from_f64(i32::MAX as f64))
    } else {
        (T::from_f64(i64::MIN as f64), T::from_f64(i64::MAX as f64))
    };
    // the sorted max / min of floats start from -inf / +inf (a segment of
    // -inf alone has the max -inf, as TensorFlow's); the unsorted ones
    // from the finite fill, which an infinity never beats (TensorFlow's)
    let inf = sorted && T::DTYPE.is_float();
    let init = match kind {
        SegmentKind::Sum => T::zero(),
        SegmentKind::Prod => T::one(),
        SegmentKind::Max if inf => T::from_f64(f64::NEG_INFINITY),
        SegmentKind::Min if inf => T::from_f64(f64::INFINITY),
        SegmentKind::Max => lowest,
        SegmentKind::Min => highest,
    };
    let mut out = alloc::try_vec::<T>(op, n)?;
    out.resize(n, init);
    // which segments got a row: only the sorted max / min need it (their
    // empty segments are 0, not the fill); never sized for the others, whose
    // `num` may be huge with an empty output (`[2^40, 0, 2]`)
    let track = sorted && n > 0 && matches!(kind, SegmentKind::Max | SegmentKind::Min);
    let mut seen = if track {
        alloc::try_filled(op, num, false)?
    } else {
        Vec::new()
    };
    #[allow(clippy::eq_op)]
    let is_nan = |x: T| x != x;
    for (i, &s) in ids.iter().enumerate() {
        if s < 0 {
            continue;
        }
        let s = s as usize;
        if track {
            seen[s] = true;
        }
        let (dst, src) = (&mut out[s * inner..(s + 1) * inner], &v[i * inner..(i + 1) * inner]);
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = match kind {
                SegmentKind::Sum => d.add_wrap(x),
                SegmentKind::Prod => d.mul_wrap(x),
                SegmentKind::Max if x > *d || is_nan(x) => x,
                SegmentKind::Min if x < *d || is_nan(x) => x,
                _ => *d,
            };
        }
    }
    if track {
        for (s, _) in seen.iter().enumerate().filter(|&(_, &b)| !b) {
            out[s * inner..(s + 1) * inner].fill(T::zero());
        }
    }
    Tensor::from_vec(out, &shape)
}

/// Rows of `t` picked by `ids` (zeros for negative ids): the adjoint of a
/// segment sum.
fn gather_rows(t: &Tensor, ids: &Tensor) -> Result<Tensor> {
    let num = t.shape()[0];
    let mut zero_shape = t.shape().to_vec();
    zero_shape[0] = 1;
    let zeros = crate::kernels::gpu::filled("segment_sum", &zero_shape, 0.0, t.dtype(), t.device())?;
    let ext = Tensor::concat(&[t, &zeros], 0)?;
    let safe = Tensor::where_(&ids.lt_scalar(0.0)?, &ids.scalar_like(num as f64)?, ids)?;
    ext.gather(&safe, 0)
}

/// For each row of `d` (its first `ids.rank()` dims flattened), the
/// product of the other rows of its segment (0 for a row with a negative
/// id): the gradient of a segment product. It is built from gathers,
/// concatenations and products only (no division, no mask taken from the
/// values), so it is exact at zeros and differentiates again to any order,
/// as `prod`'s exclusive cumulative products: the rows are ordered by
/// segment, and a segmented exclusive product scan from each side runs in
/// `⌈log₂ n⌉` doubling steps, each multiplying a row by the row `2ᵏ` before
/// it when that one is in the same segment. The orderings are computed
/// from `ids` with tensor ops (so a traced function follows its ids).
fn others_product(d: &Tensor, ids: &Tensor, num: usize) -> Result<Tensor> {
    let k = ids.rank();
    let n = ids.numel();
    if n == 0 {
        return d.try_zeros_like();
    }
    let rest = &d.shape()[k..];
    let rows_shape: Vec<usize> = std::iter::once(n).chain(rest.iter().copied()).collect();
    let one_shape: Vec<usize> = std::iter::once(1).chain(rest.iter().copied()).collect();
    // (constants of the shapes, made where the data is)
    let ones = Tensor::try_ones(&one_shape, d.dtype())?.to(d.device())?;
    let flat = ids.reshape(&[n])?.cast(DType::I64)?;
    // negative ids: a segment of their own, `num` (their results are dropped)
    let dropped = flat.lt_scalar(0.0)?;
    let seg_ids = Tensor::where_(&dropped, &flat.scalar_like(num as f64)?, &flat)?;
    let order = seg_ids.argsort(0, false)?;
    let seg = seg_ids.gather(&order, 0)?;
    let xs = d.reshape(&rows_shape)?.gather(&order, 0)?;
    let pos = Tensor::arange(0.0, n as f64, 1.0, DType::I64)?.to(d.device())?;
    let none = pos.scalar_like(n as f64)?;
    // row `j` times the row `j ∓ by` when that one is in the same segment
    // (the appended ones row, index n, otherwise)
    let step = |p: &Tensor, by: usize, back: bool| -> Result<Tensor> {
        let (o, inside) = if back {
            let o = pos.add_scalar(-(by as f64))?;
            (
                o.maximum(&o.scalar_like(0.0)?)?,
                pos.lt_scalar(by as f64)?.logical_not()?,
            )
        } else {
            let o = pos.add_scalar(by as f64)?;
            (o.minimum(&o.scalar_like((n - 1) as f64)?)?, o.lt_scalar(n as f64)?)
        };
        let same = seg.gather(&o, 0)?.eq(&seg)?.logical_and(&inside)?;
        Tensor::concat(&[p, &ones], 0)?.gather(&Tensor::where_(&same, &o, &none)?, 0)
    };
    // exclusive scans: a shift by one within the segment, then inclusive
    // scans by doubling
    let scan = |back: bool| -> Result<Tensor> {
        let mut p = step(&xs, 1, back)?;
        let mut by = 1;
        while by < n {
            p = p.mul(&step(&p, by, back)?)?;
            by *= 2;
        }
        Ok(p)
    };
    let others_sorted = scan(true)?.mul(&scan(false)?)?;
    // back to the rows' order (the inverse permutation); dropped rows get 0
    let others = others_sorted.gather(&order.argsort(0, false)?, 0)?;
    let mut mask_shape = vec![1; rows_shape.len()];
    mask_shape[0] = n;
    let others = Tensor::where_(&dropped.reshape(&mask_shape)?, &others.try_zeros_like()?, &others)?;
    others.reshape(d.shape())
}

/// A segment reduction, recorded with its gradient.
pub(crate) fn segment_reduce(
    kind: SegmentKind,
    data: &Tensor,
    ids: &Tensor,
    num_segments: Option<usize>,
) -> Result<Tensor> {
    let op = op_name(kind, num_segments.is_none());
    let _site = crate::dispatch::site::user_op(op, &[("data", data), ("segment_ids", ids)]);
    // (ids on a GPU are checked on a host copy, as on the CPU)
    let host = crate::kernels::gpu::to_host(op, ids)?;
    let ids_v = int_values(op, &host)?;
    let num = check_ids(op, data, ids, &ids_v, num_segments)?;
    let sorted = num_segments.is_none();
    let cpu = |data: &Tensor, ids_v: &[i64]| -> Result<Tensor> {
        Ok(
            with_num_dtype!(data.dtype(), T => reduce_kernel::<T>(op, kind, sorted, data, ids_v, num, ids.rank())?,
            _ => return Err(unsupported(op, data.dtype(), "a real numeric dtype"))),
        )
    };
    // on a GPU: sums as a scatter-add (negative ids dropped), the others
    // folding each segment's rows in the CPU's order (`kernels::cuda::index`)
    let gpu = if data.dtype() != DType::Bool {
        crate::dispatch::device::offload(
            op,
            &[data, ids],
            |_| {
                let inner: usize = data.shape()[ids.rank()..].iter().product();
                let mut shape = vec![num];
                shape.extend_from_slice(&data.shape()[ids.rank()..]);
                checked_numel(op, &shape)?;
                let name = match kind {
                    SegmentKind::Sum => {
                        return crate::kernels::cuda::scatter_add(
                            op,
                            data,
                            ids,
                            1,
                            ids.numel(),
                            inner,
                            num,
                            &shape,
                            None,
                        );
                    }
                    SegmentKind::Prod => "prod",
                    SegmentKind::Max => "max",
                    SegmentKind::Min => "min",
                };
                crate::kernels::cuda::segment_reduce(op, data, &ids_v, num, name, sorted, &shape)
            },
            |h| cpu(&h[0], &ids_v),
        )
    } else {
        None
    };
    let y = match gpu {
        Some(r) => r?,
        None => cpu(data, &ids_v)?,
    };
    let desc = Lazy(desc_name(kind, num_segments), move || {
        Op::Sort(SortOp::Segment { kind, num_segments })
    });
    let (d, i) = (data.clone(), ids.clone());
    Ok(bind(desc, &[data, ids], y, move |y| {
        let y = y.clone();
        vjp(move |g, _| {
            let g = &g[0];
            let dx = match kind {
                SegmentKind::Sum => gather_rows(g, &i)?,
                SegmentKind::Max | SegmentKind::Min => {
                    let selected = d.eq(&gather_rows(&y, &i)?)?;
                    let count = segment_reduce(SegmentKind::Sum, &selected.cast(d.dtype())?, &i, Some(num))?;
                    // an empty segment counts 0: 1 instead, so that the
                    // transpose of this rule (forward mode's double VJP)
                    // gives its tangent 0, not 0/0
                    let count = count.maximum(&count.scalar_like(1.0)?)?;
                    let share = gather_rows(&g.div(&count)?, &i)?;
                    Tensor::where_(&selected, &share, &d.try_zeros_like()?)?
                }
                SegmentKind::Prod => gather_rows(g, &i)?.mul(&others_product(&d, &i, num)?)?,
            };
            Ok(grads![Some(dx), None])
        })
    }))
}

fn desc_name(kind: SegmentKind, num_segments: Option<usize>) -> &'static str {
    SortOp::Segment { kind, num_segments }.name()
}

impl Tensor {
    /// Sums of the rows of each segment: `segment_ids` (1-D integers,
    /// sorted, non-negative, one per row of `self`) give each row's segment;
    /// the result has `max id + 1` rows (empty segments are 0).
    /// Differentiable in `self`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
    /// let ids = Tensor::vector(&[0i64, 0, 2]);
    /// assert_eq!(x.segment_sum(&ids)?.to_vec::<f32>()?, vec![4.0, 6.0, 0.0, 0.0, 5.0, 6.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn segment_sum(&self, segment_ids: &Tensor) -> Result<Tensor> {
        segment_reduce(SegmentKind::Sum, self, segment_ids, None)
    }
    /// Products per segment (see [`segment_sum`](Self::segment_sum); empty segments are 1).
    pub fn segment_prod(&self, segment_ids: &Tensor) -> Result<Tensor> {
        segment_reduce(SegmentKind::Prod, self, segment_ids, None)
    }
    /// Maxima per segment (see [`segment_sum`](Self::segment_sum); empty
    /// segments are 0; ties share the gradient). A NaN makes its segment's
    /// maximum NaN, wherever it stands in the segment (as [`max`](Self::max),
    /// JAX's and PyTorch's segment reductions; TensorFlow 2.21's segment
    /// kernels keep or drop a NaN depending on where it stands).
    pub fn segment_max(&self, segment_ids: &Tensor) -> Result<Tensor> {
        segment_reduce(SegmentKind::Max, self, segment_ids, None)
    }
    /// Minima per segment (see [`segment_max`](Self::segment_max)).
    pub fn segment_min(&self, segment_ids: &Tensor) -> Result<Tensor> {
        segment_reduce(SegmentKind::Min, self, segment_ids, None)
    }
    /// Means per segment (see [`segment_sum`](Self::segment_sum); empty
    /// segments are 0). Float dtypes.
    pub fn segment_mean(&self, segment_ids: &Tensor) -> Result<Tensor> {
        let run = || {
            let sum = self.segment_sum(segment_ids)?;
            let count = self.try_ones_like()?.segment_sum(segment_ids)?;
            sum.div(&count.maximum(&count.scalar_like(1.0)?)?)
        };
        crate::ops::expect_float("segment_mean", self)?;
        run().map_err(|e| e.for_op("segment_mean"))
    }

    /// Sums of the rows of each of `num_segments` segments: `segment_ids`
    /// (integers, any order, shaped like the leading dims of `self`) give
    /// each row's segment; negative ids drop the row; an id `>=
    /// num_segments` is an error. Differentiable in `self`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[1.0f64, 2.0, 3.0, 4.0]);
    /// let ids = Tensor::vector(&[1i64, 0, 1, -1]);
    /// assert_eq!(x.unsorted_segment_sum(&ids, 3)?.to_vec::<f64>()?, vec![2.0, 4.0, 0.0]);
    /// assert_eq!(x.unsorted_segment_max(&ids, 3)?.to_vec::<f64>()?, vec![2.0, 3.0, f64::MIN]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn unsorted_segment_sum(&self, segment_ids: &Tensor, num_segments: usize) -> Result<Tensor> {
        segment_reduce(SegmentKind::Sum, self, segment_ids, Some(num_segments))
    }
    /// Products per segment (see [`unsorted_segment_sum`](Self::unsorted_segment_sum); empty segments are 1).
    pub fn unsorted_segment_prod(&self, segment_ids: &Tensor, num_segments: usize) -> Result<Tensor> {
        segment_reduce(SegmentKind::Prod, self, segment_ids, Some(num_segments))
    }
    /// Maxima per segment (see [`unsorted_segment_sum`](Self::unsorted_segment_sum);
    /// empty segments hold the dtype's lowest finite value, as TensorFlow).
    pub fn unsorted_segment_max(&self, segment_ids: &Tensor, num_segments: usize) -> Result<Tensor> {
        segment_reduce(SegmentKind::Max, self, segment_ids, Some(num_segments))
    }
    /// Minima per segment (see [`unsorted_segment_sum`](Self::unsorted_segment_sum);
    /// empty segments hold the dtype's highest finite value).
    pub fn unsorted_segment_min(&self, segment_ids: &Tensor, num_segments: usize) -> Result<Tensor> {
        segment_reduce(SegmentKind::Min, self, segment_ids, Some(num_segments))
    }
    /// Means per segment (see [`unsorted_segment_sum`](Self::unsorted_segment_sum);
    /// empty segments are 0). Float dtypes.
    pub fn unsorted_segment_mean(&self, segment_ids: &Tensor, num_segments: usize) -> Result<Tensor> {
        let run = || {
            let sum = self.unsorted_segment_sum(segment_ids, num_segments)?;
            let count = self.try_ones_like()?.unsorted_segment_sum(segment_ids, num_segments)?;
            sum.div(&count.maximum(&count.scalar_like(1.0)?)?)
        };
        crate::ops::expect_float("unsorted_segment_mean", self)?;
        run().map_err(|e| e.for_op("unsorted_segment_mean"))
    }

    /// `self` with `updates` added at the index tuples `indices` (`[..., K]`),
    /// duplicates adding up (TensorFlow's `tensor_scatter_nd_add`).
    /// Differentiable in `self` and `updates`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[1.0f32, 1.0, 1.0]);
    /// let i = Tensor::from_vec(vec![2i64, 2], &[2, 1])?;
    /// let u = Tensor::vector(&[5.0f32, 1.0]);
    /// assert_eq!(x.tensor_scatter_nd_add(&i, &u)?.to_vec::<f32>()?, vec![1.0, 1.0, 7.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn tensor_scatter_nd_add(&self, indices: &Tensor, updates: &Tensor) -> Result<Tensor> {
        let _site = crate::dispatch::site::user_op(
            "tensor_scatter_nd_add",
            &[("x", self), ("indices", indices), ("updates", updates)],
        );
        let run = || self.add(&Tensor::scatter_nd(indices, updates, self.shape())?);
        run().map_err(|e| e.for_op("tensor_scatter_nd_add"))
    }

    /// `self` with the slices at the index tuples `indices` (`[..., K]`)
    /// replaced by `updates` (the last of duplicates wins). d/dself is the
    /// cotangent with the replaced slices zeroed; d/dupdates gathers the
    /// cotangent at the indices (as TensorFlow, for every duplicate).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[1.0f32, 2.0, 3.0]);
    /// let i = Tensor::from_vec(vec![0i64], &[1, 1])?;
    /// assert_eq!(x.tensor_scatter_nd_update(&i, &Tensor::vector(&[9.0f32]))?.to_vec::<f32>()?, vec![9.0, 2.0, 3.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn tensor_scatter_nd_update(&self, indices: &Tensor, updates: &Tensor) -> Result<Tensor> {
        let _site = crate::dispatch::site::user_op(
            "tensor_scatter_nd_update",
            &[("x", self), ("indices", indices), ("updates", updates)],
        );
        const OP: &str = "tensor_scatter_nd_update";
        crate::ops::expect_same_dtype(OP, self, updates)?;
        // (indices on a GPU are read on a host copy, as segment ids are)
        let host_idx = crate::kernels::gpu::to_host(OP, indices)?;
        let (offsets, k) = crate::ops::index::gather_nd::nd_offsets(OP, &host_idx, self.shape())?;
        let mut want = indices.shape()[..indices.rank() - 1].to_vec();
        want.extend_from_slice(&self.shape()[k..]);
        if updates.shape() != want.as_slice() {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: updates.shape().to_vec(),
                rhs: want,
            });
        }
        let inner: usize = self.shape()[k..].iter().product();
        let host = |x: &Tensor, updates: &Tensor| -> Result<Tensor> {
            with_dtype!(x.dtype(), T => {
                let mut out = x.values::<T>(OP)?.into_owned();
                let u = updates.values::<T>(OP)?;
                for (j, &o) in offsets.iter().enumerate() {
                    out[o * inner..(o + 1) * inner].copy_from_slice(&u[j * inner..(j + 1) * inner]);
                }
                Tensor::from_vec(out, x.shape())
            })
        };
        // on a GPU: a copy, then each destination written once by the last
        // slice for it (`kernels::cuda::index`)
        let gpu = crate::dispatch::device::offload(
            OP,
            &[self, indices, updates],
            |_| crate::kernels::cuda::scatter_update(OP, self, updates, &offsets, inner),
            |h| host(&h[0], &h[2]),
        );
        let y = gpu.unwrap_or_else(|| host(self, updates))?;
        let (i, ushape) = (indices.clone(), updates.shape().to_vec());
        Ok(bind(
            Op::Sort(SortOp::TensorScatterUpdate),
            &[self, indices, updates],
            y,
            move |_| {
                vjp(move |g, needs| {
                    let g = &g[0];
                    let dx = if needs[0] {
                        Some(g.tensor_scatter_nd_update(&i, &Tensor::try_zeros(&ushape, g.dtype())?.to(g.device())?)?)
                    } else {
                        None
                    };
                    let du = if needs[2] { Some(g.gather_nd(&i)?) } else { None };
                    Ok(grads![dx, None, du])
                })
            },
        ))
    }
}
