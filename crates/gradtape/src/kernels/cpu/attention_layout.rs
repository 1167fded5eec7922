//! Where the fused attention kernels ([`attention_gemm`](super::attention_gemm))
//! read their operands and write their gradients: batches of matrices
//! that lie anywhere in a buffer, as strided rows ([`Rows`], [`Batch`]),
//! and the layout of the backward pass's three gradients ([`GradDest`]),
//! made in a task's scratch where their rows lie apart ([`Staged`]).

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

/// Which of a batch element's three gradient parts the backward pass makes
/// in its task's scratch (rows adjacent) rather than in place: those whose
/// rows lie apart (`rs > width`, over more than one row: the heads of a
/// QKV gradient, `[batch, time, 3 · heads · d]`, whose rows of one head
/// are `3 · heads · d` elements apart). In place, a block's `dK`/`dV` rows
/// were zeroed by a `memset` call each (128 bytes at heads of 32) and the
/// products wrote rows 3 kB apart (`[8, 128, 3 · 256]`), one or two lines
/// in each page, where no hardware prefetcher runs ahead: each write
/// waited on its line. Staged, the parts are zeroed in one call and made
/// in the caches, then copied out row by row, each row's lines fetched for
/// writing [`AHEAD`] rows before (`prefetchw`). The same products on the
/// same operands: the same bits. Per call, `[8, 8, 128, 32]` causal, two
/// threads, the traced forward and backward on the QKV layout (the
/// `AttentionGradInto` node): 2.83-2.86 → 2.55-2.63 ms, medians of 30
/// (heads of 64, `[8, 6, 64, 64]`: level, 1.15-1.29 → 1.15-1.23).
pub(super) struct Staged {
    /// Whether each part is staged.
    on: [bool; 3],
    /// Where each staged part starts in the scratch.
    offs: [usize; 3],
    /// `(rows, width)` of each part.
    sizes: [(usize, usize); 3],
    /// The scratch's elements (0: none staged).
    pub(super) len: usize,
}

impl Staged {
    /// The parts of `real` (each part's first row, reach and row stride)
    /// to stage, for a call of `dims`.
    pub(super) fn new<T>(dims: &Dims, real: &[(*mut T, usize, usize); 3]) -> Staged {
        let sizes = [(dims.tq, dims.d), (dims.tk, dims.d), (dims.tk, dims.dv)];
        let (mut on, mut offs, mut len) = ([false; 3], [0; 3], 0);
        for (((on, off), &(rows, width)), &(_, _, rs)) in on.iter_mut().zip(&mut offs).zip(&sizes).zip(real) {
            if rows > 1 && width > 0 && rs != width {
                (*on, *off) = (true, len);
                len += rows * width;
            }
        }
        Staged { on, offs, sizes, len }
    }

    /// Each part's first row, reach and row stride: the scratch's (from
    /// `local`, `len` elements) where staged, else the real one.
    pub(super) fn parts<T>(&self, real: &[(*mut T, usize, usize); 3], local: *mut T) -> [(*mut T, usize, usize); 3] {
        let mut out = *real;
        for (((part, &on), &off), &(rows, width)) in out.iter_mut().zip(&self.on).zip(&self.offs).zip(&self.sizes) {
            if on {
                // SAFETY: within the scratch's `len` elements.
                *part = (unsafe { local.add(off) }, rows * width, width);
            }
        }
        out
    }

    /// Copies each staged part's rows from the scratch to where they go.
    ///
    /// # Safety
    ///
    /// `real`'s parts are writable for their reach and apart from the
    /// scratch that `parts` (from [`Staged::parts`]) points into, which
    /// holds the finished rows.
    pub(super) unsafe fn copy_out<T: Copy>(
        &self,
        real: &[(*mut T, usize, usize); 3],
        parts: &[(*mut T, usize, usize); 3],
    ) {
        for (((&(to, _, rs), &(from, _, _)), &on), &(rows, width)) in
            real.iter().zip(parts).zip(&self.on).zip(&self.sizes)
        {
            if !on {
                continue;
            }
            // each row's lines fetched for writing AHEAD rows before it is
            // written: rows 3 kB apart, a line or two each, run no
            // hardware prefetcher
            let fetch = |i: usize| {
                if i < rows {
                    // SAFETY: row i lies within the part's reach.
                    prefetch_write(unsafe { to.add(i * rs) }, width);
                }
            };
            for i in 0..AHEAD.min(rows) {
                fetch(i);
            }
            for i in 0..rows {
                fetch(i + AHEAD);
                // SAFETY: the caller's; row i lies within both reaches.
                unsafe { std::ptr::copy_nonoverlapping(from.add(i * width), to.add(i * rs), width) };
            }
        }
    }
}

/// Rows a staged part's copy fetches ahead of the row it writes.
const AHEAD: usize = 12;

/// Asks for the lines of `len` elements from `p` for writing (a hint:
/// nothing is read or written).
#[inline(always)]
fn prefetch_write<T>(p: *mut T, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let bytes = len * std::mem::size_of::<T>();
        for at in (0..bytes).step_by(64) {
            // SAFETY: a hint, which does not fault.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_ET0 }>(
                    (p as *const i8).wrapping_add(at),
                )
            };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}
