//! Shapes, strides and the walk over a strided view.
//!
//! A view is `(shape, strides, offset)` over a flat buffer, in elements.
//! Strides may be zero (broadcast) or negative (reversed views).
//!
//! Every shape that enters the library passes [`checked_numel`]: the product
//! of its dimensions (a zero one counted as 1) must not exceed `isize::MAX`.
//! A tensor's shape always satisfies it, so every partial product of its
//! dimensions, its element count and its contiguous strides fit in `isize`
//! without checks, and a view's layout always lies inside its buffer
//! ([`Layout::fits_in`], checked where tensors are made).

use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::kernels::cpu::lockstep;
use crate::kernels::cpu::lockstep::zip;

/// Dimension sizes; inline up to rank 4.
pub type Shape = SmallVec<[usize; 4]>;
/// Element strides; inline up to rank 4.
pub type Strides = SmallVec<[isize; 4]>;

/// Where a view's elements live in its buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The view's shape.
    pub shape: Shape,
    /// Per dim, the step between elements in the buffer.
    pub strides: Strides,
    /// Where the first element is.
    pub offset: usize,
}

impl Layout {
    /// The row-major layout of a buffer of exactly `shape`.
    #[inline]
    pub fn contiguous(shape: &[usize]) -> Self {
        Layout {
            shape: small_copy(shape),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    /// The view's element count.
    #[inline]
    pub fn numel(&self) -> usize {
        let mut n = 1;
        for &d in self.shape.iter() {
            n *= d;
        }
        n
    }

    /// Whether every element the view addresses lies inside a buffer of
    /// `len` elements (an empty view addresses none), with the view's shape
    /// valid ([`checked_numel`]): what lets kernels index buffers through
    /// the layout.
    pub fn fits_in(&self, len: usize) -> bool {
        if checked_numel("view", &self.shape).is_err() {
            return false;
        }
        if self.shape.contains(&0) {
            return true;
        }
        if self.offset >= len {
            return false;
        }
        let (mut lo, mut hi) = (self.offset as i128, self.offset as i128);
        for (&d, &s) in zip(&*self.shape, &self.strides) {
            // `lo` and `hi` lie in 0..len before each step and move by less
            // than 2^126: no overflow of i128
            let span = (d as i128 - 1) * s as i128;
            if span < 0 {
                lo += span;
            } else {
                hi += span;
            }
            if lo < 0 || hi >= len as i128 {
                return false;
            }
        }
        true
    }

    /// Whether some dim of more than one element has stride 0 (a
    /// broadcast: elements share memory).
    pub fn is_broadcast(&self) -> bool {
        self.shape.iter().zip(&self.strides).any(|(&d, &s)| d > 1 && s == 0)
    }

    /// The same elements, in the same order, viewed as `shape` without a
    /// copy: `None` when no strides can do it (`shape` must have the same
    /// element count). The view's dims are cut into runs that step through
    /// memory evenly (each dim's stride is the next one's times its size);
    /// the new dims must split each run exactly, and get strides within it.
    /// A contiguous layout always reshapes; a transposed matrix does not
    /// flatten (its elements are not in row-major order in memory); slices
    /// and dims of size 1 need not get in the way: the middle 256 columns of a `[1024, 768]` matrix (strides
    /// `[768, 1]`) view as `[8, 128, 4, 64]` with strides
    /// `[128·768, 768, 64, 1]` (a head split of a fused QKV product).
    pub fn reshaped(&self, shape: &[usize]) -> Option<Layout> {
        let numel = self.numel();
        if shape.iter().product::<usize>() != numel {
            return None;
        }
        if numel == 0 || self.is_contiguous() {
            return Some(Layout {
                offset: self.offset,
                ..Layout::contiguous(shape)
            });
        }
        // the dims of more than one element, innermost first (size-1 dims
        // may take any stride)
        let old: SmallVec<[(usize, isize); 4]> = self
            .shape
            .iter()
            .zip(&self.strides)
            .rev()
            .filter(|&(&d, _)| d != 1)
            .map(|(&d, &s)| (d, s))
            .collect();
        let mut strides: Strides = SmallVec::from_elem(0, shape.len());
        // the new dims still to place, innermost first
        let mut new = shape.iter().enumerate().rev().peekable();
        let mut i = 0;
        while i < old.len() {
            // one run of old dims: old[i..j] step evenly from old[i]'s stride
            let base = old[i].1;
            let mut run = old[i].0;
            let mut j = i + 1;
            while j < old.len() && old[j].1 == old[j - 1].1 * old[j - 1].0 as isize {
                run *= old[j].0;
                j += 1;
            }
            // the new dims that make up the run, innermost first
            let mut covered = 1usize;
            while covered < run {
                let (k, &d) = new.next()?;
                strides[k] = base * covered as isize;
                covered *= d;
            }
            if covered != run {
                return None;
            }
            // size-1 dims right after the run (their stride is arbitrary)
            while let Some(&(k, &1)) = new.peek() {
                strides[k] = base * run as isize;
                new.next();
            }
            i = j;
        }
        // what is left are size-1 dims
        for (k, &d) in new {
            if d != 1 {
                return None;
            }
            strides[k] = 1;
        }
        Some(Layout {
            shape: small_copy(shape),
            strides,
            offset: self.offset,
        })
    }

    /// Row-major with no gaps (offset may be non-zero).
    #[inline]
    pub fn is_contiguous(&self) -> bool {
        // (an index loop over the slices: this is on every op's path, and
        // `Zip`'s constructor is not inlined everywhere; see
        // `kernels::cpu::lockstep`)
        let (shape, strides): (&[usize], &[isize]) = (&self.shape, &self.strides);
        let mut expected = 1isize;
        let mut i = shape.len().min(strides.len());
        while i > 0 {
            i -= 1;
            let (d, s) = (shape[i], strides[i]);
            if d != 1 && s != expected {
                return false;
            }
            expected *= d as isize;
        }
        true
    }
}

/// `SmallVec::from_slice` without a call to `memcpy` for the usual short
/// shapes (this is on every op's path).
#[inline]
pub fn small_copy<T: Copy + Default>(xs: &[T]) -> SmallVec<[T; 4]> {
    if xs.len() <= 4 {
        let mut buf = [T::default(); 4];
        for (b, &x) in zip(&mut buf, xs) {
            *b = x;
        }
        SmallVec::from_buf_and_len(buf, xs.len())
    } else {
        SmallVec::from_slice(xs)
    }
}

/// The number of elements of `shape`, or [`Error::ShapeOverflow`] naming
/// `op` when the shape cannot exist: the product of its dimensions, a zero
/// dimension counted as 1, must not exceed `isize::MAX`. Every shape that
/// enters the library (constructors, reshape, broadcasting, and each op
/// that computes an output shape) passes through here.
///
/// TensorFlow bounds the plain product by 2^63 - 1, so it accepts an empty
/// shape such as `[0, 2^62, 2^62]`; gradtape refuses it, so that every
/// partial product of a valid shape (the sizes kernels compute) and every
/// stride fits in `isize`.
#[inline]
pub fn checked_numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    let mut n = 1usize;
    let mut empty = false;
    for &d in shape {
        if d == 0 {
            empty = true;
            continue;
        }
        match n.checked_mul(d) {
            Some(m) if m <= isize::MAX as usize => n = m,
            _ => {
                return Err(Error::ShapeOverflow {
                    op,
                    shape: shape.to_vec(),
                })
            }
        }
    }
    Ok(if empty { 0 } else { n })
}

/// Row-major strides of a shape.
pub fn contiguous_strides(shape: &[usize]) -> Strides {
    let fill = |strides: &mut [isize]| {
        let mut acc = 1isize;
        for i in (0..shape.len()).rev() {
            strides[i] = acc;
            acc *= shape[i].max(1) as isize;
        }
    };
    if shape.len() <= 4 {
        // the common case, built in place without SmallVec's generic extend
        let mut buf = [0isize; 4];
        fill(&mut buf[..shape.len()]);
        SmallVec::from_buf_and_len(buf, shape.len())
    } else {
        let mut strides: Strides = SmallVec::from_elem(0, shape.len());
        fill(&mut strides);
        strides
    }
}

/// NumPy broadcasting of two shapes; the result is a valid shape
/// ([`checked_numel`]).
pub fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Shape> {
    let rank = a.len().max(b.len());
    let mut out: Shape = SmallVec::from_elem(0, rank);
    for i in 0..rank {
        let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
        let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::ShapeMismatch {
                op,
                lhs: a.to_vec(),
                rhs: b.to_vec(),
            });
        };
    }
    checked_numel(op, &out)?;
    Ok(out)
}

/// Strides that read a view of `shape`/`strides` as if broadcast to `target`
/// (zero stride on broadcast dimensions). The caller has checked compatibility.
pub fn broadcast_strides(shape: &[usize], strides: &[isize], target: &[usize]) -> Strides {
    let lead = target.len() - shape.len();
    let mut out: Strides = SmallVec::from_elem(0, target.len());
    for i in 0..shape.len() {
        out[lead + i] = if shape[i] == 1 && target[lead + i] != 1 {
            0
        } else {
            strides[i]
        };
    }
    out
}

/// Normalises an axis in `-rank..rank` to `0..rank`.
pub fn norm_axis(op: &'static str, axis: isize, shape: &[usize]) -> Result<usize> {
    let rank = shape.len() as isize;
    let a = if axis < 0 { axis + rank } else { axis };
    if a < 0 || a >= rank {
        return Err(Error::BadAxis {
            op,
            axis,
            shape: shape.to_vec(),
            repeated: false,
        });
    }
    Ok(a as usize)
}

/// Merges adjacent dimensions that every operand walks contiguously, so most
/// walks become one or two nested loops. `strides[k]` are operand `k`'s strides
/// over the common `shape`.
pub(crate) fn coalesce<const N: usize>(shape: &[usize], strides: [&[isize]; N]) -> (Shape, [Strides; N]) {
    let mut out_shape: Shape = SmallVec::new();
    let mut out_strides: [Strides; N] = std::array::from_fn(|_| SmallVec::new());
    for d in 0..shape.len() {
        if shape[d] == 1 {
            continue;
        }
        let mergeable = !out_shape.is_empty()
            && (0..N).all(|k| {
                let last = *out_strides[k].last().unwrap();
                last == strides[k][d] * shape[d] as isize
            });
        if mergeable {
            let n = out_shape.len() - 1;
            out_shape[n] *= shape[d];
            for k in 0..N {
                out_strides[k][n] = strides[k][d];
            }
        } else {
            out_shape.push(shape[d]);
            for k in 0..N {
                out_strides[k].push(strides[k][d]);
            }
        }
    }
    if out_shape.is_empty() {
        out_shape.push(1);
        for s in out_strides.iter_mut() {
            s.push(0);
        }
    }
    (out_shape, out_strides)
}

/// Calls `f(row, [offset of operand k at the row start])` for each row (the
/// last dimension) of a walk over `shape`, rows `rows.start..rows.end`.
#[inline]
pub(crate) fn for_rows<const N: usize>(
    shape: &[usize],
    strides: &[Strides; N],
    offsets: [usize; N],
    rows: std::ops::Range<usize>,
    mut f: impl FnMut(usize, [isize; N]),
) {
    let outer = &shape[..shape.len() - 1];
    // multi-index of the first row
    // (the multi-index and the strides as plain slices: `SmallVec`'s
    // indexing is not `#[inline]`, and this loop runs once per row)
    let mut idx_buf: SmallVec<[usize; 4]> = SmallVec::from_elem(0, outer.len());
    let idx: &mut [usize] = &mut idx_buf;
    let strides: [&[isize]; N] = lockstep::from_fn(|k| &*strides[k]);
    let mut rem = rows.start;
    for d in (0..outer.len()).rev() {
        idx[d] = rem % outer[d];
        rem /= outer[d];
    }
    let mut base: [isize; N] = lockstep::from_fn(|k| {
        let mut at = offsets[k] as isize;
        for (&i, &s) in lockstep::zip(&*idx, strides[k]) {
            at += i as isize * s;
        }
        at
    });
    for row in rows {
        f(row, base);
        // increment the multi-index
        for d in (0..outer.len()).rev() {
            idx[d] += 1;
            for k in 0..N {
                base[k] += strides[k][d];
            }
            if idx[d] < outer[d] {
                break;
            }
            for k in 0..N {
                base[k] -= strides[k][d] * outer[d] as isize;
            }
            idx[d] = 0;
        }
    }
}
