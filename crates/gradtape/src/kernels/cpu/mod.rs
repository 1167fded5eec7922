//! Raw compute on buffers, knowing nothing of tapes.
//!
//! Every kernel takes tensors and returns a fresh contiguous tensor. Inputs
//! may be any strided view: kernels walk views directly (after merging
//! dimensions that all operands walk contiguously) instead of copying them
//! first. Work above [`PAR_MIN`] elements is split across the compute threads
//! of [`workers`];
//! inner loops are plain slice loops that the compiler vectorises, and the
//! long ones run through [`math::with_simd`], compiled for AVX-512 or AVX2
//! when the CPU has them (the default build targets SSE2 only). Transcendental
//! functions of `f32` have vectorisable versions in [`math`]. Output buffers
//! are allocated through `tensor::alloc` (so that one too large for memory
//! is the op's `OutOfMemory` error), and those of 64 KiB and more are
//! recycled through `tensor::pool`; every kernel that allocates takes the
//! name of the op the user called and returns a `Result`.

pub(crate) mod arg_extremum;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod attention;
pub(crate) mod attention_gemm;
pub(crate) mod attention_layout;
pub(crate) mod attention_rows;
pub(crate) mod attention_split;
#[cfg(feature = "openblas")]
pub(crate) mod blas;
pub(crate) mod causal_tiles;
pub(crate) mod complex;
pub(crate) mod complex_fns;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod conv;
pub(crate) mod conv3d;
pub(crate) mod counter;
pub(crate) mod ctc;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod decomp;
pub(crate) mod denormal;
#[cfg(target_arch = "x86_64")]
pub(crate) mod direct_conv;
pub(crate) mod eig;
pub(crate) mod elementwise;
pub(crate) mod erf;
pub(crate) mod exp_rows;
pub(crate) mod gemm_crates;
pub(crate) mod half_block;
pub(crate) mod index;
pub(crate) mod layer_norm;
pub(crate) mod lockstep;
pub(crate) mod log;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod math;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod matmul;
pub(crate) mod narrow_matmul;
pub(crate) mod nn;
pub(crate) mod pooling;
pub(crate) mod pow;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod reduce;
pub(crate) mod resize;
pub(crate) mod rotary;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod scratch;
pub(crate) mod select;
#[cfg(target_arch = "x86_64")]
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod sgemm;
#[cfg(target_arch = "x86_64")]
mod sgemm_pack;
pub(crate) mod small_gemm;
pub(crate) mod softmax_columns;
pub(crate) mod workers;

use std::mem::MaybeUninit;

use crate::error::Result;
use crate::tensor::{alloc, layout, Buf, Element, Layout};

/// Below this many elements a kernel runs on the calling thread.
pub(crate) const PAR_MIN: usize = 1 << 15;

/// Elements per parallel task.
fn chunk_len(n: usize) -> usize {
    let threads = workers::threads();
    (n / (threads * 4)).max(PAR_MIN / 2).next_multiple_of(64)
}

/// The uninitialised elements `len..capacity` of a buffer.
pub(crate) fn spare<O: Element>(v: &mut Buf<O>) -> &mut [MaybeUninit<O>] {
    let (len, cap) = (v.len(), v.capacity());
    // SAFETY: the buffer owns `cap` slots, of which `len..cap` are
    // uninitialised; `MaybeUninit` makes no claim about their contents.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().add(len) as *mut MaybeUninit<O>, cap - len) }
}

/// Builds a buffer of `n` elements without initialising it first: `fill(start,
/// out)` must write every element of `out`, which holds elements
/// `start..start + out.len()`. Runs in parallel chunks when `n` is large.
/// [`Error::OutOfMemory`](crate::Error::OutOfMemory) naming `op` when the
/// buffer cannot be allocated.
#[inline]
pub(crate) fn build<O: Element>(
    op: &'static str,
    n: usize,
    fill: impl Fn(usize, &mut [MaybeUninit<O>]) + Sync,
) -> Result<Buf<O>> {
    build_dyn(op, n, &fill)
}

/// [`build`]'s fill: writes the elements of its output part, which
/// starts at the element given.
type Fill<'a, O> = dyn Fn(usize, &mut [MaybeUninit<O>]) + Sync + 'a;

/// [`build_rows`]'s fill: writes the rows given, its output part.
type RowsFill<'a, O> = dyn Fn(std::ops::Range<usize>, &mut [MaybeUninit<O>]) + Sync + 'a;

/// [`build`] for its `&dyn` fill: compiled once per element type, each
/// caller's `fill` once (as the reference's function).
fn build_dyn<O: Element>(op: &'static str, n: usize, fill: &Fill<'_, O>) -> Result<Buf<O>> {
    let mut v: Buf<O> = alloc::try_buf(op, n)?;
    let spare = &mut spare(&mut v)[..n];
    // (one call of `fill`, for any number of tasks)
    let c = if n >= PAR_MIN { chunk_len(n) } else { n.max(1) };
    workers::for_each_chunk_mut(spare, c, |i, out| fill(i * c, out));
    // SAFETY: `fill` wrote all `n` elements (each caller's loop covers its
    // whole `out` slice), and `O: Copy` has no drop obligations.
    unsafe { v.set_len(n) };
    Ok(v)
}

/// `n` copies of `v`, in a buffer from the cache when it has one (so a
/// large output costs no fresh pages), filled in parallel.
pub(crate) fn filled_buf<T: Element>(op: &'static str, n: usize, v: T) -> Result<Buf<T>> {
    // SAFETY: every Element is a plain number, bool or pair of floats: a
    // `Copy` value without padding, so all its bytes are initialised.
    let bytes = unsafe { std::slice::from_raw_parts(&v as *const T as *const u8, std::mem::size_of::<T>()) };
    let zero = bytes.iter().all(|&b| b == 0);
    build(op, n, |_, out| {
        if zero {
            // SAFETY: all-zero bytes are `v` itself (a memset).
            unsafe { std::ptr::write_bytes(out.as_mut_ptr(), 0, out.len()) };
        } else {
            for o in out {
                o.write(v);
            }
        }
    })
}

/// [`filled_buf`] as a `Vec`.
pub(crate) fn filled_vec<T: Element>(op: &'static str, n: usize, v: T) -> Result<Vec<T>> {
    Ok(filled_buf(op, n, v)?.into_vec())
}

/// An empty buffer with room for `n` elements, from the cache when it has
/// one; write through [`spare`] and then set the length.
pub(crate) fn uninit_buf<T: Element>(op: &'static str, n: usize) -> Result<Buf<T>> {
    alloc::try_buf(op, n)
}

/// Hands a scratch buffer back: to the bin of the compiled run on this
/// thread, if any (`tensor::recycle::put`), else to the buffer cache
/// (large ones are kept there).
pub(crate) fn recycle<T: Element>(v: Vec<T>) {
    crate::tensor::recycle::put(T::into_storage(v));
}

/// [`recycle`] for a buffer of [`uninit_buf`].
pub(crate) fn recycle_buf<T: Element>(v: Buf<T>) {
    crate::tensor::recycle::put(T::buf_into_storage(v));
}

/// Like [`build`], split by whole rows of `row_len` elements: `fill(rows, out)`
/// writes rows `rows.start..rows.end`.
#[inline]
pub(crate) fn build_rows<O: Element>(
    op: &'static str,
    n_rows: usize,
    row_len: usize,
    fill: impl Fn(std::ops::Range<usize>, &mut [MaybeUninit<O>]) + Sync,
) -> Result<Buf<O>> {
    build_rows_dyn(op, n_rows, row_len, &fill)
}

/// [`build_rows`] for its `&dyn` fill (as [`build_dyn`]).
fn build_rows_dyn<O: Element>(
    op: &'static str,
    n_rows: usize,
    row_len: usize,
    fill: &RowsFill<'_, O>,
) -> Result<Buf<O>> {
    // (the rows of a valid shape: the product fits)
    let n = n_rows * row_len;
    let mut v: Buf<O> = alloc::try_buf(op, n)?;
    let spare = &mut spare(&mut v)[..n];
    if n > 0 {
        // (one call of `fill`, as in `build`)
        let rows_per = match n >= PAR_MIN && n_rows > 1 {
            true => (chunk_len(n) / row_len).max(1),
            false => n_rows,
        };
        workers::for_each_chunk_mut(spare, rows_per * row_len, |i, out| {
            let start = i * rows_per;
            fill(start..start + out.len() / row_len, out)
        });
    }
    // SAFETY: as in `build`, every row range handed out is written whole.
    unsafe { v.set_len(n) };
    Ok(v)
}

/// Copies a strided view into a new row-major `Vec` (an error naming `op`
/// when it cannot be allocated).
///
/// Row by row, where the view's rows are runs of its buffer (a slice, a
/// broadcast, heads split from a row). Where they are not (a transpose: a
/// row of the copy is a column of the buffer, its elements a row apart),
/// a walk along rows would read one element per cache line; the copy
/// is then made in tiles of [`TILE_ROWS`] rows by [`TILE_COLS`] columns,
/// read column by column (each column of a tile a short run of the
/// buffer where the rows are near each other, as in a transpose) and
/// written within a few lines of the copy.
pub(crate) fn gather_strided<T: Element>(op: &'static str, buf: &[T], l: &Layout) -> Result<Vec<T>> {
    let contiguous = layout::contiguous_strides(&l.shape);
    let (shape, [_, s]) = layout::coalesce(&l.shape, [&contiguous, &l.strides]);
    let n = l.numel();
    let row_len = *shape.last().unwrap();
    if n == 0 {
        return Ok(Vec::new());
    }
    let strides = [s.clone()];
    let inner = s[shape.len() - 1];
    // (rows of the copy long enough to span more lines than a cache set
    // holds, their elements at least TILE_FROM bytes apart in the buffer)
    let tiled = shape.len() >= 2 && row_len >= 16 && inner.unsigned_abs() * std::mem::size_of::<T>() >= TILE_FROM;
    Ok(build_rows(op, n / row_len, row_len, |rows, out| {
        let first = rows.start;
        if !tiled {
            layout::for_rows(&shape, &strides, [l.offset], rows, |r, [base]| {
                let o = &mut out[(r - first) * row_len..(r - first + 1) * row_len];
                if inner == 1 {
                    let src = &buf[base as usize..][..row_len];
                    for (slot, &x) in o.iter_mut().zip(src) {
                        slot.write(x);
                    }
                } else if inner == 0 {
                    // a broadcast row: one value, written as a fill (an
                    // index per element made a broadcast view of 2^30
                    // bools take seconds to copy)
                    let x = buf[base as usize];
                    for slot in o.iter_mut() {
                        slot.write(x);
                    }
                } else {
                    for (j, slot) in o.iter_mut().enumerate() {
                        slot.write(buf[(base + j as isize * inner) as usize]);
                    }
                }
            });
            return;
        }
        // tiles: the bases of up to TILE_ROWS rows, then their columns
        let mut bases = [0isize; TILE_ROWS];
        let (mut k, mut r0) = (0, first);
        let flush = |bases: &[isize], r0: usize, out: &mut [MaybeUninit<T>]| {
            let block = &mut out[(r0 - first) * row_len..][..bases.len() * row_len];
            for j0 in (0..row_len).step_by(TILE_COLS) {
                for j in j0..(j0 + TILE_COLS).min(row_len) {
                    let at = j as isize * inner;
                    for (t, &b) in bases.iter().enumerate() {
                        block[t * row_len + j].write(buf[(b + at) as usize]);
                    }
                }
            }
        };
        layout::for_rows(&shape, &strides, [l.offset], rows, |r, [base]| {
            if k == 0 {
                r0 = r;
            }
            bases[k] = base;
            k += 1;
            if k == TILE_ROWS {
                flush(&bases[..k], r0, out);
                k = 0;
            }
        });
        if k > 0 {
            flush(&bases[..k], r0, out);
        }
    })?
    .into_vec())
}

/// Rows of a tile of [`gather_strided`]: a column of a tile of `f64`s is
/// a cache line of a transposed buffer (of `f32`s, half of one).
const TILE_ROWS: usize = 8;

/// Columns of a tile of [`gather_strided`] (the tile's lines of the
/// buffer, and of the copy, stay in the L1 cache while it is written).
const TILE_COLS: usize = 32;

/// The distance in bytes, in the buffer, between neighbours of a row of
/// the copy from which [`gather_strided`] tiles: a row whose elements lie
/// a multiple of 4 KiB apart (a transposed matrix with 1024 `f32`
/// columns) falls into one set of the L1 cache, which holds 8 lines, so
/// that the next row, reading the neighbours of those elements, finds
/// them evicted; closer, the walk along rows reads each line from the L1
/// or L2 cache in order, which the prefetchers follow.
const TILE_FROM: usize = 1024;
