//! Averaging gradients over ranks: tensor fusion for the dense ones,
//! all-gathers for the sparse ones.

use super::{agree, describe, num_ranks, total_len, Buffer, BufferMut, Collectives};
use crate::autodiff::gradient::{Gradient, IndexedSlices};
use crate::error::{Error, Result};
use crate::tensor::alloc::{try_filled, try_vec};
use crate::tensor::{DType, Element, Tensor};

const OP: &str = "allreduce_gradients";

/// How [`allreduce_gradients_with`] reduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllreduceOptions {
    /// Divide by the number of ranks (the mean, default) or not (the sum).
    pub average: bool,
    /// Make sparse gradients dense first, so that they join the fused
    /// all-reduce (default false: all-gather their rows).
    pub sparse_as_dense: bool,
}

impl Default for AllreduceOptions {
    fn default() -> Self {
        AllreduceOptions {
            average: true,
            sparse_as_dense: false,
        }
    }
}

/// What one reduction sent through the collectives (payload only; the
/// small description exchanged first is not counted in the bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes of the fused dense buffers all-reduced (each rank's buffer:
    /// one `f32` buffer and/or one `f64` buffer).
    pub allreduce_bytes: usize,
    /// Bytes of sparse rows (indices and values) each rank received from
    /// the all-gathers, its own included.
    pub allgather_bytes: usize,
    /// How many collective calls, the description exchange included.
    pub calls: usize,
}

/// Averages `grads` over the ranks of `comm` (see the [module
/// docs](super)): dense gradients of each dtype through one fused
/// all-reduce, sparse ones ([`IndexedSlices`]) all-gathered (the result
/// holds every rank's rows, rank 0's first, values divided by the number of
/// ranks; its indices are `i64`). `None` stays `None`. Gradients must be
/// `f32` or `f64`, and every rank must pass the same list of dtypes,
/// shapes and kinds (dense, sparse or `None`), or every rank gets an error.
///
/// ```
/// use gradtape::distributed::{allreduce_gradients, SingleProcess};
/// use gradtape::{Gradient, Tensor};
/// let g = vec![Some(Gradient::Dense(Tensor::vector(&[2.0f32, 4.0]))), None];
/// let avg = allreduce_gradients(&SingleProcess, &g)?;    // one rank: unchanged
/// assert_eq!(avg[0].as_ref().unwrap().to_dense()?.to_vec::<f32>()?, vec![2.0, 4.0]);
/// assert!(avg[1].is_none());
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn allreduce_gradients(comm: &impl Collectives, grads: &[Option<Gradient>]) -> Result<Vec<Option<Gradient>>> {
    Ok(reduce(comm, grads, &AllreduceOptions::default())?.0)
}

/// [`allreduce_gradients`] with options; also returns what went through
/// the collectives.
///
/// ```
/// use gradtape::distributed::{allreduce_gradients_with, AllreduceOptions, SingleProcess};
/// use gradtape::{Gradient, IndexedSlices, Tensor};
/// let rows = IndexedSlices::new(Tensor::from_vec(vec![1.0f64, 2.0], &[1, 2])?, Tensor::vector(&[2i64]), &[4, 2])?;
/// let g = vec![Some(Gradient::Dense(Tensor::zeros(&[3], gradtape::DType::F32))), Some(Gradient::Sparse(rows))];
/// let (avg, traffic) = allreduce_gradients_with(&SingleProcess, &g, &AllreduceOptions::default())?;
/// assert!(avg[1].as_ref().unwrap().is_sparse());
/// assert_eq!(traffic.allreduce_bytes, 12);                // 3 f32
/// assert_eq!(traffic.allgather_bytes, 8 + 16);            // one i64 index, 2 f64
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn allreduce_gradients_with(
    comm: &impl Collectives,
    grads: &[Option<Gradient>],
    options: &AllreduceOptions,
) -> Result<(Vec<Option<Gradient>>, Traffic)> {
    reduce(comm, grads, options)
}

/// A sparse gradient's rows on this rank, ready to send.
struct Rows {
    /// Position in the gradient list.
    at: usize,
    dtype: DType,
    /// Elements per row.
    row: usize,
    dense_shape: Vec<usize>,
}

pub(super) fn reduce(
    comm: &dyn Collectives,
    grads: &[Option<Gradient>],
    options: &AllreduceOptions,
) -> Result<(Vec<Option<Gradient>>, Traffic)> {
    let grads: Vec<Option<Gradient>> = if options.sparse_as_dense {
        grads
            .iter()
            .map(|g| match g {
                Some(Gradient::Sparse(s)) => Ok(Some(Gradient::Dense(s.to_dense()?))),
                g => Ok(g.clone()),
            })
            .collect::<Result<_>>()?
    } else {
        grads.to_vec()
    };
    let mut desc = Vec::new();
    for g in &grads {
        match g {
            None => describe(&mut desc, 0, DType::F32, &[]),
            Some(g) => describe(&mut desc, if g.is_sparse() { 2 } else { 1 }, g.dtype(), g.shape()),
        }
    }
    agree(comm, OP, "gradient", &desc)?;
    let mut traffic = Traffic {
        calls: 1,
        ..Traffic::default()
    };
    // every rank has the same dtypes now: failing here fails everywhere
    if let Some(g) = grads
        .iter()
        .flatten()
        .find(|g| !matches!(g.dtype(), DType::F32 | DType::F64))
    {
        return Err(Error::UnsupportedDType {
            op: OP,
            dtype: g.dtype(),
            expected: "f32 or f64 gradients",
        });
    }
    let size = num_ranks(comm, OP)?;
    let scale = if options.average { 1.0 / size as f64 } else { 1.0 };
    let mut out: Vec<Option<Gradient>> = vec![None; grads.len()];
    dense::<f32>(comm, &grads, scale, &mut out, &mut traffic)?;
    dense::<f64>(comm, &grads, scale, &mut out, &mut traffic)?;
    sparse(comm, &grads, scale, &mut out, &mut traffic)?;
    Ok((out, traffic))
}

/// A typed slice as a collective's buffer.
trait Wire: Element {
    fn buf(s: &[Self]) -> Buffer<'_>;
    fn buf_mut(s: &mut [Self]) -> BufferMut<'_>;
}

impl Wire for f32 {
    fn buf(s: &[f32]) -> Buffer<'_> {
        Buffer::F32(s)
    }
    fn buf_mut(s: &mut [f32]) -> BufferMut<'_> {
        BufferMut::F32(s)
    }
}

impl Wire for f64 {
    fn buf(s: &[f64]) -> Buffer<'_> {
        Buffer::F64(s)
    }
    fn buf_mut(s: &mut [f64]) -> BufferMut<'_> {
        BufferMut::F64(s)
    }
}

/// `src` times `scale` (a copy when `scale` is 1).
fn scaled<T: Element>(src: &[T], scale: f64) -> Result<Vec<T>> {
    let mut v = try_vec(OP, src.len())?;
    if scale == 1.0 {
        v.extend_from_slice(src);
    } else {
        v.extend(src.iter().map(|&x| T::from_f64(x.to_f64() * scale)));
    }
    Ok(v)
}

/// The dense gradients of dtype `T`: packed, one all-reduce, unpacked.
fn dense<T: Wire>(
    comm: &dyn Collectives,
    grads: &[Option<Gradient>],
    scale: f64,
    out: &mut [Option<Gradient>],
    traffic: &mut Traffic,
) -> Result<()> {
    let picked: Vec<(usize, &Tensor)> = grads
        .iter()
        .enumerate()
        .filter_map(|(i, g)| match g {
            Some(Gradient::Dense(t)) if t.dtype() == T::DTYPE => Some((i, t)),
            _ => None,
        })
        .collect();
    if picked.is_empty() {
        return Ok(());
    }
    let total = total_len(OP, picked.iter().map(|(_, t)| t.numel()))?;
    let mut buf: Vec<T> = try_vec(OP, total)?;
    for (_, t) in &picked {
        buf.extend_from_slice(&t.values::<T>(OP)?);
    }
    comm.all_reduce_sum(T::buf_mut(&mut buf))?;
    traffic.allreduce_bytes += total * std::mem::size_of::<T>();
    traffic.calls += 1;
    let mut off = 0;
    for (i, t) in picked {
        let n = t.numel();
        out[i] = Some(Gradient::Dense(Tensor::from_vec(
            scaled(&buf[off..off + n], scale)?,
            t.shape(),
        )?));
        off += n;
    }
    Ok(())
}

/// The sparse gradients: their row counts all-gathered, then their indices
/// (one call) and their values (one call per dtype).
fn sparse(
    comm: &dyn Collectives,
    grads: &[Option<Gradient>],
    scale: f64,
    out: &mut [Option<Gradient>],
    traffic: &mut Traffic,
) -> Result<()> {
    let slices: Vec<(usize, &IndexedSlices)> = grads
        .iter()
        .enumerate()
        .filter_map(|(i, g)| match g {
            Some(Gradient::Sparse(s)) => Some((i, s)),
            _ => None,
        })
        .collect();
    if slices.is_empty() {
        return Ok(());
    }
    let size = num_ranks(comm, OP)?;
    let k = slices.len();
    let rows: Vec<Rows> = slices
        .iter()
        .map(|&(at, s)| Rows {
            at,
            dtype: s.dtype(),
            row: s.dense_shape()[1..].iter().product(),
            dense_shape: s.dense_shape().to_vec(),
        })
        .collect();
    // counts[r * k + j]: rows of sparse gradient j on rank r
    let mine: Vec<i64> = slices.iter().map(|(_, s)| s.indices().numel() as i64).collect();
    let words = size
        .checked_mul(k)
        .ok_or_else(|| Error::invalid(OP, format!("{size} ranks are too many")))?;
    let mut counts = try_filled(OP, words, 0i64)?;
    comm.all_gather(
        Buffer::I64(&mine),
        &try_filled(OP, size, k)?,
        BufferMut::I64(&mut counts),
    )?;
    traffic.calls += 1;
    // every rank sees the same counts, so a bad one fails every rank alike
    if let Some(at) = counts.iter().position(|&c| c < 0) {
        return Err(Error::invalid(
            OP,
            format!(
                "rank {} reports {} rows for its sparse gradient {}",
                at / k,
                counts[at],
                at % k
            ),
        ));
    }
    let count = |r: usize, j: usize| counts[r * k + j] as usize;

    // indices, all as i64, one call
    let mut idx: Vec<i64> = try_vec(OP, total_len(OP, mine.iter().map(|&c| c as usize))?)?;
    for (_, s) in &slices {
        let i = s.indices().cast(DType::I64)?;
        idx.extend_from_slice(&i.values::<i64>(OP)?);
    }
    let per_rank = (0..size)
        .map(|r| total_len(OP, (0..k).map(|j| count(r, j))))
        .collect::<Result<Vec<usize>>>()?;
    let mut all_idx = try_filled(OP, total_len(OP, per_rank.iter().copied())?, 0i64)?;
    comm.all_gather(Buffer::I64(&idx), &per_rank, BufferMut::I64(&mut all_idx))?;
    traffic.allgather_bytes += all_idx.len() * 8;
    traffic.calls += 1;
    let mut starts = vec![0usize; size];
    for r in 1..size {
        starts[r] = starts[r - 1] + per_rank[r - 1];
    }
    let mut indices: Vec<Vec<i64>> = vec![Vec::new(); k];
    for (r, &start) in starts.iter().enumerate() {
        let mut off = start;
        for (j, out_j) in indices.iter_mut().enumerate() {
            out_j.extend_from_slice(&all_idx[off..off + count(r, j)]);
            off += count(r, j);
        }
    }
    let mut values: Vec<Option<Tensor>> = vec![None; k];
    sparse_values::<f32>(comm, &slices, &rows, &count, scale, &mut values, traffic)?;
    sparse_values::<f64>(comm, &slices, &rows, &count, scale, &mut values, traffic)?;
    for ((r, ind), val) in rows.into_iter().zip(indices).zip(values) {
        let Some(val) = val else {
            return Err(Error::invalid(OP, "internal: sparse values not gathered"));
        };
        let n = ind.len();
        let slices = IndexedSlices::from_parts(val, Tensor::from_vec(ind, &[n])?, r.dense_shape);
        out[r.at] = Some(Gradient::Sparse(slices));
    }
    Ok(())
}

/// The values of the sparse gradients of dtype `T`, one all-gather.
fn sparse_values<T: Wire>(
    comm: &dyn Collectives,
    slices: &[(usize, &IndexedSlices)],
    rows: &[Rows],
    count: &dyn Fn(usize, usize) -> usize,
    scale: f64,
    values: &mut [Option<Tensor>],
    traffic: &mut Traffic,
) -> Result<()> {
    let picked: Vec<usize> = (0..rows.len()).filter(|&j| rows[j].dtype == T::DTYPE).collect();
    if picked.is_empty() {
        return Ok(());
    }
    let size = num_ranks(comm, OP)?;
    let elems = |r: usize, j: usize| {
        count(r, j)
            .checked_mul(rows[j].row)
            .ok_or_else(|| Error::invalid(OP, format!("rank {r}'s sparse gradient {j} has too many rows")))
    };
    let per_rank = (0..size)
        .map(|r| total_len(OP, picked.iter().map(|&j| elems(r, j)).collect::<Result<Vec<_>>>()?))
        .collect::<Result<Vec<usize>>>()?;
    let mut send: Vec<T> = try_vec(OP, per_rank[comm.this_rank()])?;
    for &j in &picked {
        send.extend_from_slice(&slices[j].1.values().values::<T>(OP)?);
    }
    if send.len() != per_rank[comm.this_rank()] {
        return Err(Error::invalid(OP, "internal: sparse values of an unexpected length"));
    }
    let mut all: Vec<T> = try_filled(OP, total_len(OP, per_rank.iter().copied())?, T::from_f64(0.0))?;
    comm.all_gather(T::buf(&send), &per_rank, T::buf_mut(&mut all))?;
    traffic.allgather_bytes += all.len() * std::mem::size_of::<T>();
    traffic.calls += 1;
    let mut gathered: Vec<Vec<T>> = vec![Vec::new(); rows.len()];
    let mut off = 0;
    for r in 0..size {
        for &j in &picked {
            let n = elems(r, j)?;
            gathered[j].extend(scaled(&all[off..off + n], scale)?);
            off += n;
        }
    }
    for &j in &picked {
        let n = total_len(OP, (0..size).map(|r| count(r, j)))?;
        let mut shape = vec![n];
        shape.extend_from_slice(&rows[j].dense_shape[1..]);
        values[j] = Some(Tensor::from_vec(std::mem::take(&mut gathered[j]), &shape)?);
    }
    Ok(())
}
