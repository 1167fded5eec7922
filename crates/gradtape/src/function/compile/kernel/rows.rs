//! Inputs that are views with contiguous rows, read in place.
//!
//! A fused kernel's input is often a view: a column slice of a joined
//! product (the query, key and value weights' gradients are slices of one
//! `[d, 3d]` product; SwiGLU's gate and up parts), a narrowed tensor, a
//! band of rows. Its rows are contiguous in the buffer but lie `stride`
//! apart. Copying the whole view into a buffer of its own before the
//! kernel (what [`Tensor::values`] does) cost an allocation and a pass over
//! memory: the global-norm clipping of `gpt`'s sliced weight gradients ran
//! at 0.5 ns an element, against 0.18 for contiguous gradients of the same
//! kernel. [`Rows`] reads such a view where it lies instead: a register
//! loaded from it stands for the elements in place when its piece lies in
//! one row, and otherwise takes a copy of the piece's row segments, a copy
//! in the first-level cache; the pieces are those of a contiguous input
//! (the same elements in the same registers), so the kernel computes the
//! same bits, sums included.
//!
//! Views whose innermost elements are not adjacent (transposes) are still
//! copied whole: their copy is a tiled transpose, which a walk element by
//! element inside the kernel would not beat.

use std::borrow::Cow;

use super::regs::Regs;
use super::{Instr, Program, Reg, Splat};
use crate::error::Result;
use crate::tensor::layout::{self, Layout};
use crate::tensor::{Element, Tensor};

/// The most dimensions besides the rows' own that a view read in place
/// may have (after merging those that are contiguous with each other).
const MAX_OUTER: usize = 3;

/// The fewest elements a row of a view read in place has: shorter rows
/// are copied whole as before (a piece would be mostly row boundaries).
const MIN_ROW: usize = 16;

/// Where a view's rows lie: each row `row` contiguous elements, the rows
/// in row-major order of up to [`MAX_OUTER`] outer dimensions.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rows {
    /// elements of a row
    row: usize,
    /// the outer dimensions (sizes and strides), outermost first
    dims: [(usize, isize); MAX_OUTER],
    /// how many of `dims` there are
    n_dims: usize,
    /// the first element's place in the buffer
    offset: isize,
    /// the view's elements
    numel: usize,
}

impl Rows {
    /// The rows of view `l` of a buffer of `buf_len` elements, where its
    /// innermost elements are adjacent, its rows at least [`MIN_ROW`]
    /// long, it has at most [`MAX_OUTER`] outer dimensions once merged,
    /// and every element lies in the buffer; `None` otherwise (or for a
    /// contiguous view, read as a slice).
    pub(super) fn of(l: &Layout, buf_len: usize) -> Option<Rows> {
        let numel = l.numel();
        if l.is_contiguous() || numel == 0 {
            return None;
        }
        let (shape, [strides]) = layout::coalesce(&l.shape, [&l.strides]);
        let d = shape.len();
        let (row, outer) = (shape[d - 1], d - 1);
        if strides[d - 1] != 1 || row < MIN_ROW || outer > MAX_OUTER {
            return None;
        }
        let mut dims = [(1, 0); MAX_OUTER];
        let (mut lo, mut hi) = (l.offset as isize, l.offset as isize + row as isize);
        for k in 0..outer {
            dims[k] = (shape[k], strides[k]);
            let span = (shape[k] as isize - 1).checked_mul(strides[k])?;
            if span < 0 {
                lo = lo.checked_add(span)?;
            } else {
                hi = hi.checked_add(span)?;
            }
        }
        (lo >= 0 && hi as usize <= buf_len).then_some(Rows {
            row,
            dims,
            n_dims: outer,
            offset: l.offset as isize,
            numel,
        })
    }

    /// Where row `r` starts in the buffer.
    #[inline(always)]
    fn base(&self, r: usize) -> usize {
        let mut at = self.offset;
        let mut rem = r;
        for &(n, s) in self.dims[..self.n_dims].iter().rev() {
            at += (rem % n) as isize * s;
            rem /= n;
        }
        at as usize
    }

    /// Where elements `start..start + n` lie in the buffer, if in one row.
    #[inline(always)]
    fn within(&self, start: usize, n: usize) -> Option<usize> {
        let (r, c) = (start / self.row, start % self.row);
        (c + n <= self.row).then(|| self.base(r) + c)
    }

    /// `f(at, k)` for each row segment of elements `start..start + n` in
    /// order: `k` elements at `at` in the buffer (checked to lie in the
    /// view).
    #[inline(always)]
    pub(super) fn segments(&self, start: usize, n: usize, mut f: impl FnMut(usize, usize)) {
        assert!(start + n <= self.numel, "a fused load past its input");
        let (mut r, mut c, mut left) = (start / self.row, start % self.row, n);
        while left > 0 {
            let k = (self.row - c).min(left);
            f(self.base(r) + c, k);
            (r, c, left) = (r + 1, 0, left - k);
        }
    }

    /// Register `dst` takes elements `start..start + n` of the view whose
    /// buffer starts at `buf`: it stands for them in place when they lie
    /// in one row, and takes a copy of their row segments otherwise.
    ///
    /// # Safety
    /// `buf` is the buffer [`of`](Self::of) checked the view against, which
    /// lives through the run and which nothing writes meanwhile.
    #[inline(always)]
    pub(super) unsafe fn load<T: Copy>(&self, buf: *const T, regs: &mut Regs<'_, T>, dst: Reg, start: usize, n: usize) {
        assert!(start + n <= self.numel, "a fused load past its input");
        match self.within(start, n) {
            // SAFETY: the `n` elements lie in the buffer (`of`, and the
            // check above), which nothing writes during the run.
            Some(at) => unsafe { regs.view(dst, buf.add(at), n) },
            None => {
                let out = regs.get_mut(dst, n);
                let mut o = 0;
                self.segments(start, n, |at, k| {
                    // SAFETY: as above; `out` is a register, another
                    // allocation, of `n` elements.
                    unsafe { std::ptr::copy_nonoverlapping(buf.add(at), out.as_mut_ptr().add(o), k) };
                    o += k;
                });
            }
        }
    }
}

/// An input's elements as [`Program::read`] gives them: borrowed or
/// copied, and where a view's rows lie.
pub(super) type Read<'t, T> = (Cow<'t, [T]>, Option<Rows>);

impl Program {
    /// Input `i`'s elements: its whole buffer and where its rows lie, for
    /// a view with contiguous rows that the program only loads (see
    /// [`Rows::of`]); else the elements in row-major order, borrowed or
    /// copied ([`Tensor::values`]).
    pub(super) fn read<'t, T: Element>(&self, i: usize, t: &'t Tensor) -> Result<Read<'t, T>> {
        self.read_as(self.loads_only(i), t)
    }

    /// [`read`](Self::read) of an input of which `loads_only` says whether
    /// only loads read it (from the program's call plan).
    pub(super) fn read_as<'t, T: Element>(&self, loads_only: bool, t: &'t Tensor) -> Result<Read<'t, T>> {
        if loads_only {
            crate::kernels::gpu::expect_host("Fused", t)?;
            let buf = t.buffer::<T>();
            if let Some(rows) = Rows::of(t.layout(), buf.len()) {
                return Ok((Cow::Borrowed(buf), Some(rows)));
            }
        }
        Ok((t.values::<T>("Fused")?, None))
    }

    /// Whether input `i` may be read in place as [`Rows`]: it has the
    /// group's elements, and the program only loads it (no broadcast read,
    /// no splat, which read it as a slice).
    pub(super) fn loads_only(&self, i: usize) -> bool {
        let i16 = i as u16;
        self.input_len[i] == self.len
            && !self.splats.iter().any(|(_, s)| *s == Splat::Input(i16))
            && !self
                .body
                .iter()
                .any(|x| matches!(x, Instr::Gather { input, .. } if *input == i16))
    }
}
