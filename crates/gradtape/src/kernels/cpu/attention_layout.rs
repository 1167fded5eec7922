//! Where the fused attention kernels ([`attention_gemm`](super::attention_gemm))
//! read their operands and write their gradients: batches of matrices
//! that lie anywhere in a buffer, as strided rows ([`Rows`], [`Batch`]),
//! and the layout of the backward pass's three gradients ([`GradDest`]).

use super::attention::Dims;
use crate::error::Result;

/// A batch of matrices inside one buffer, each row's elements adjacent:
/// row `i` of batch element `b` starts at `batch.offset(b) + i · rs`.
/// Packed matrices are one case ([`Rows::packed`]); the heads of a fused
/// QKV product's slice, `[batch, time, heads · d]` read as `[batch, heads,
/// time, d]`, are another (rows `3 · heads · d` apart), so the kernels read
/// them where they lie instead of from a copy.
pub struct Rows<'a, T> {
    /// The buffer.
    pub data: &'a [T],
    /// Where each batch element's first row starts.
    pub batch: Batch,
    /// The step from a row to the next.
    pub rs: usize,
}

/// Where the matrices of a batch start: batch element `b`, as an index
/// into dims `[n0, n1, ..]` (the last fastest), starts at `base + Σ i_a ·
/// stride_a`. Computed when asked (per block of rows), so that no list of
/// offsets is made per call.
#[derive(Clone, Debug)]
pub struct Batch {
    /// `(size, stride)` of each batch dim, outermost first.
    pub dims: smallvec::SmallVec<[(usize, usize); 4]>,
    /// Where batch element 0 starts.
    pub base: usize,
}

impl Batch {
    /// `n` matrices `step` elements apart from `base`.
    pub fn even(n: usize, step: usize, base: usize) -> Batch {
        Batch {
            dims: smallvec::smallvec![(n, step)],
            base,
        }
    }

    /// How many matrices.
    pub fn len(&self) -> usize {
        self.dims.iter().map(|&(n, _)| n).product()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where batch element `b` starts.
    #[inline]
    pub fn offset(&self, b: usize) -> usize {
        let (mut rem, mut off) = (b, self.base);
        for &(n, stride) in self.dims.iter().rev() {
            off += (rem % n) * stride;
            rem /= n;
        }
        off
    }
}

impl<'a, T: Copy> Rows<'a, T> {
    /// `batch` matrices of `rows × width` one after the other in `data`.
    pub fn packed(data: &'a [T], batch: usize, rows: usize, width: usize) -> Self {
        Rows {
            data,
            batch: Batch::even(batch, rows * width, 0),
            rs: width,
        }
    }

    /// Row `i` of batch element `b` and everything after it.
    #[inline(always)]
    pub(super) fn at(&self, b: usize, i: usize) -> &'a [T] {
        &self.data[self.batch.offset(b) + i * self.rs..]
    }

    /// The matrices (`rows × width` each) packed one after the other:
    /// borrowed when they already are.
    pub(crate) fn packed_values(
        &self,
        op: &'static str,
        rows: usize,
        width: usize,
    ) -> Result<std::borrow::Cow<'a, [T]>> {
        let count = self.batch.len();
        let n = count * rows * width;
        if n == 0 {
            return Ok(std::borrow::Cow::Borrowed(&[]));
        }
        let first = self.batch.offset(0);
        let packed =
            (rows <= 1 || self.rs == width) && (0..count).all(|b| self.batch.offset(b) == first + b * rows * width);
        if packed {
            return Ok(std::borrow::Cow::Borrowed(
                &self.data[first.min(self.data.len())..][..n],
            ));
        }
        let mut out = crate::tensor::alloc::try_vec(op, n)?;
        for b in 0..count {
            for i in 0..rows {
                out.extend_from_slice(&self.at(b, i)[..width]);
            }
        }
        Ok(std::borrow::Cow::Owned(out))
    }
}

/// Where the backward pass writes `dq`, `dk` and `dv` (`parts`, in that
/// order) in one buffer of `len` elements: each a batch of matrices, as
/// [`Rows`] reads them (each batch element's first row, and the step from
/// a row to the next; a row's elements adjacent). Packed, the gradients of
/// each batch element follow each other ([`GradDest::packed`]); a graph
/// compiler may lay them out as the slices of a concatenation instead
/// (`function::compile::grads_into_concat`), so that no copy joins them.
#[derive(Clone, Debug)]
pub struct GradDest {
    /// Elements of the buffer.
    pub len: usize,
    /// `dq`, `dk`, `dv`: where each batch element's matrix starts, and the
    /// row stride.
    pub parts: [(Batch, usize); 3],
}

impl GradDest {
    /// Each batch element's `dq` (`tq · d`), `dk` (`tk · d`) and `dv`
    /// (`tk · dv`), one after the other.
    pub fn packed(dims: &Dims) -> GradDest {
        let Dims {
            batch, tq, tk, d, dv, ..
        } = *dims;
        let per = tq * d + tk * d + tk * dv;
        GradDest {
            len: batch * per,
            parts: [
                (Batch::even(batch, per, 0), d),
                (Batch::even(batch, per, tq * d), d),
                (Batch::even(batch, per, tq * d + tk * d), dv),
            ],
        }
    }

    /// How many elements each part's rows reach from a batch element's
    /// first row; an error naming `op` where a part is not of `dims.batch`
    /// matrices, its rows overlap, or it reaches past the buffer.
    pub(crate) fn extents(&self, op: &'static str, dims: &Dims) -> Result<[usize; 3]> {
        let sizes = [(dims.tq, dims.d), (dims.tk, dims.d), (dims.tk, dims.dv)];
        let mut ext = [0; 3];
        for (p, ((batch, rs), (rows, width))) in self.parts.iter().zip(sizes).enumerate() {
            let reach = if rows == 0 || width == 0 {
                0
            } else {
                (rows - 1) * rs + width
            };
            let last = batch
                .dims
                .iter()
                .map(|&(n, st)| n.saturating_sub(1) * st)
                .sum::<usize>()
                + batch.base;
            if batch.len() != dims.batch || (rows > 1 && *rs < width) || (dims.batch > 0 && last + reach > self.len) {
                return Err(crate::error::Error::invalid(
                    op,
                    format!(
                        "gradient part {p} ({} matrices of {rows}x{width}, rows {rs} apart, batch {:?}) does not fit a layout of {} elements for {} matrices",
                        batch.len(),
                        batch.dims,
                        self.len,
                        dims.batch
                    ),
                ));
            }
            ext[p] = reach;
        }
        Ok(ext)
    }
}
