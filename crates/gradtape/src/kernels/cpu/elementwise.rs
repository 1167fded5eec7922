//! Elementwise kernels: maps, broadcasting binary maps, select and cast.

use std::mem::MaybeUninit;

use super::half_block::Half;
use super::lockstep::{self, chunks_mut, zip3};
use super::math::{baseline, with_simd_for};
use super::{build, build_rows};
use crate::error::Result;
use crate::tensor::layout::{self, broadcast_shapes, broadcast_strides, contiguous_strides, Shape};
use crate::tensor::{bf16, f16, with_dtype, Buf, DType, Element, Float, Tensor};

/// Below this many elements a loop runs as compiled for the baseline CPU;
/// above, through [`with_simd_for`] (the feature check is not worth it for tiny
/// tensors, whose cost is per-op overhead anyway).
const SIMD_MIN: usize = 64;

/// Runs a loop over `len` elements (from `A`s to `O`s) through
/// [`with_simd_for`] when it is long.
#[inline(always)]
pub(crate) fn simd_if_long<A: Element, O: Element>(len: usize, body: impl FnOnce()) {
    if len >= SIMD_MIN {
        with_simd_for::<A, O, ()>(body)
    } else {
        baseline(body)
    }
}

/// `f` applied to every element; the output is contiguous with `x`'s shape.
/// Errors (allocation failures) name `op`.
pub(crate) fn map<T: Element, O: Element>(op: &'static str, x: &Tensor, f: impl Fn(T) -> O + Sync) -> Result<Tensor> {
    if let Some(r) = crate::kernels::gpu::hosted(op, &[x], |h| map_host(op, &h[0], &f)) {
        return r;
    }
    map_host(op, x, f)
}

/// [`map`] on a host tensor.
fn map_host<T: Element, O: Element>(op: &'static str, x: &Tensor, f: impl Fn(T) -> O + Sync) -> Result<Tensor> {
    if const { by_ref(&[T::DTYPE, O::DTYPE]) } {
        map_with::<T, O>(op, x, &f as &(dyn Fn(T) -> O + Sync))
    } else {
        map_with(op, x, f)
    }
}

/// Whether the elementwise kernels over these dtypes (a kernel's inputs
/// and output) call their element function through a reference: half
/// kernels, with nothing but halves and bools, whose element functions are
/// software conversions either side of an `f32` operation anyway. Their
/// loops are then compiled once per dtype, not once per op; an indirect
/// call per element is what it costs them. Conversions to and from halves keep their loops.
const fn by_ref(dtypes: &[DType]) -> bool {
    let (mut half, mut i) = (false, 0);
    while i < dtypes.len() {
        match dtypes[i] {
            DType::F16 | DType::BF16 => half = true,
            DType::Bool => {}
            _ => return false,
        }
        i += 1;
    }
    half
}

#[inline]
fn map_with<T: Element, O: Element>(op: &'static str, x: &Tensor, f: impl Fn(T) -> O + Sync) -> Result<Tensor> {
    if x.numel() <= 2 {
        // a scalar or so: no threads, no dispatch, an inline buffer
        let mut data: Buf<O> = Buf::new();
        for &v in x.values::<T>(op)?.iter() {
            data.push(f(v));
        }
        return Ok(Tensor::from_storage(O::buf_into_storage(data), x.shape()));
    }
    let src = x.values::<T>(op)?;
    let data = build(op, src.len(), |start, out| {
        let src = &src[start..start + out.len()];
        simd_if_long::<T, O>(
            out.len(),
            #[inline(always)]
            || {
                for (o, &v) in lockstep::zip(out, src) {
                    o.write(f(v));
                }
            },
        )
    })?;
    Ok(Tensor::from_storage(O::buf_into_storage(data), x.shape()))
}

/// `f(part of x, its part of the output)` over the parallel chunks of `x`
/// (all of it when small), the output contiguous with `x`'s shape: how the
/// slice functions of the elementwise table (`ops::math::table`) run
/// eagerly. `f` must write every element of its output part, and
/// vectorises itself (`table::unary_run`): this runs no SIMD dispatch.
pub(crate) fn map_slices<T: Float>(op: &'static str, x: &Tensor, f: impl Fn(&[T], &mut [T]) + Sync) -> Result<Tensor> {
    if let Some(r) = crate::kernels::gpu::hosted(op, &[x], |h| map_slices_host(op, &h[0], &f)) {
        return r;
    }
    map_slices_host(op, x, f)
}

/// [`map_slices`] on a host tensor.
fn map_slices_host<T: Float>(op: &'static str, x: &Tensor, f: impl Fn(&[T], &mut [T]) + Sync) -> Result<Tensor> {
    if x.numel() <= 2 {
        // a scalar or so: no threads, no dispatch, an inline buffer
        let src = x.values::<T>(op)?;
        let mut out = [T::zero(); 2];
        let out = &mut out[..src.len()];
        f(&src, out);
        let mut data: Buf<T> = Buf::new();
        for &v in out.iter() {
            data.push(v);
        }
        return Ok(Tensor::from_storage(T::buf_into_storage(data), x.shape()));
    }
    let src = x.values::<T>(op)?;
    let data = build(op, src.len(), |start, out| {
        let o = to_be_written(out);
        f(&src[start..start + o.len()], o)
    })?;
    Ok(Tensor::from_storage(T::buf_into_storage(data), x.shape()))
}

/// `f(part of x, its part of a, its part of b)` over the parallel chunks
/// of `x`: two outputs of `x`'s shape (contiguous) made in one pass, as
/// [`map_slices`] makes one (an eager op that keeps a second value of its
/// input for its gradient: the exact GELU and its slope). `f` must write
/// every element of both parts. Host tensors only.
pub(crate) fn map_slices2<T: Float>(
    op: &'static str,
    x: &Tensor,
    f: impl Fn(&[T], &mut [T], &mut [T]) + Sync,
) -> Result<(Tensor, Tensor)> {
    let src = x.values::<T>(op)?;
    let n = src.len();
    let mut a: Buf<T> = crate::tensor::alloc::try_buf(op, n)?;
    let mut b: Buf<T> = crate::tensor::alloc::try_buf(op, n)?;
    let c = if n >= super::PAR_MIN {
        super::chunk_len(n)
    } else {
        n.max(1)
    };
    super::workers::for_each_chunk2_mut(
        &mut super::spare(&mut a)[..n],
        c,
        &mut super::spare(&mut b)[..n],
        c,
        |i, pa, pb| f(&src[i * c..i * c + pa.len()], to_be_written(pa), to_be_written(pb)),
    );
    // SAFETY: the chunks cover `0..n` in both buffers, and `f` wrote every
    // element of each part.
    unsafe {
        a.set_len(n);
        b.set_len(n);
    }
    let shape = x.shape();
    Ok((
        Tensor::from_storage(T::buf_into_storage(a), shape),
        Tensor::from_storage(T::buf_into_storage(b), shape),
    ))
}

/// An output part of a [`build`] of floats, as floats for a slice
/// function to write: every bit pattern of an `f32` or `f64` is a value,
/// and the slice functions (`map_slices`, `zip_slices`) write each element
/// before anything reads it (the buffer's length is set after the fill).
fn to_be_written<T: Float>(out: &mut [MaybeUninit<T>]) -> &mut [T] {
    // SAFETY: as above; `MaybeUninit<T>` has `T`'s layout.
    unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut T, out.len()) }
}

/// The broadcast shape of host tensors `a` and `b`, and the coalesced
/// shape of the walk over it with each operand's strides (broadcast
/// dimensions stride 0).
fn broadcast_pair(op: &'static str, a: &Tensor, b: &Tensor) -> Result<(Shape, Shape, [layout::Strides; 2])> {
    let shape = broadcast_shapes(op, a.shape(), b.shape())?;
    crate::kernels::gpu::expect_host(op, a)?;
    crate::kernels::gpu::expect_host(op, b)?;
    let (la, lb) = (a.layout(), b.layout());
    let sa = broadcast_strides(&la.shape, &la.strides, &shape);
    let sb = broadcast_strides(&lb.shape, &lb.strides, &shape);
    let so = contiguous_strides(&shape);
    let (cshape, [_, csa, csb]) = layout::coalesce(&shape, [&so, &sa, &sb]);
    Ok((shape, cshape, [csa, csb]))
}

/// `f(run of a, run of b, its run of the output)` with NumPy broadcasting,
/// over contiguous runs of at most [`RUN`] elements: how the two-input
/// functions of the elementwise table run eagerly, through one kernel per
/// type that all of them share (`table::binary_run`), not a [`zip`] per op
/// and type. Long rows (of the coalesced shape) are cut into runs; short
/// rows of a matrix are taken many to a run, so that a bias add over a few
/// channels costs no call per row. An operand whose run is not a slice of
/// its buffer (broadcast, strided, rows apart) is copied into a run first,
/// and not again while the next run is the same (a broadcast bias or
/// scalar). `f` must write every element of its output run. Dtypes are
/// the caller's to check.
pub(crate) fn zip_slices<T: Float>(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(&[T], &[T], &mut [T]) + Sync,
) -> Result<Tensor> {
    if let Some(r) = crate::kernels::gpu::hosted(op, &[a, b], |h| zip_slices_host(op, &h[0], &h[1], &f)) {
        return r;
    }
    zip_slices_host(op, a, b, f)
}

/// [`zip_slices`] on host tensors.
fn zip_slices_host<T: Float>(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(&[T], &[T], &mut [T]) + Sync,
) -> Result<Tensor> {
    let (shape, cshape, strides) = broadcast_pair(op, a, b)?;
    let (la, lb) = (a.layout(), b.layout());
    let srcs = [a.buffer::<T>(), b.buffer::<T>()];
    let offs = [la.offset as isize, lb.offset as isize];
    let n: usize = shape.iter().product(); // checked by broadcast_shapes
    let d = cshape.len();
    let row_len = cshape[d - 1];
    let inner = [strides[0][d - 1], strides[1][d - 1]];
    // `f` over the runs of rows `r` (`m` rows, `len` elements each) from
    // `bases`, each operand's rows `outer` apart
    let call = |runs: &mut [Run<T>; 2], bases: [isize; 2], outer: [isize; 2], (m, len): (usize, usize), o: &mut [T]| {
        let [ra, rb] = runs;
        let x = ra.get(srcs[0], bases[0], outer[0], inner[0], m, len);
        let y = rb.get(srcs[1], bases[1], outer[1], inner[1], m, len);
        f(x, y, o)
    };
    let data = if d == 1 {
        // one row: parallel chunks of it, cut into runs
        build(op, n, |start, out| {
            let out = to_be_written(out);
            let mut runs = [Run::new(), Run::new()];
            for (k, o) in out.chunks_mut(RUN).enumerate() {
                let at = (start + k * RUN) as isize;
                let bases = [0, 1].map(|j| offs[j] + at * inner[j]);
                call(&mut runs, bases, [0, 0], (1, o.len()), o);
            }
        })
    } else {
        // rows per run: whole rows of a matrix when they are short
        let per = match d {
            2 => (RUN / row_len.max(1)).max(1),
            _ => 1,
        };
        build_rows(op, n / row_len.max(1), row_len, |rows, out| {
            let out = to_be_written(out);
            let first = rows.start;
            let mut runs = [Run::new(), Run::new()];
            if per > 1 {
                let outer = [strides[0][0], strides[1][0]];
                for r0 in rows.clone().step_by(per) {
                    let m = per.min(rows.end - r0);
                    let bases = [0, 1].map(|j| offs[j] + r0 as isize * outer[j]);
                    let o = &mut out[(r0 - first) * row_len..(r0 - first + m) * row_len];
                    call(&mut runs, bases, outer, (m, row_len), o);
                }
                return;
            }
            // short rows: tiles of neighbouring rows of one matrix, each
            // operand's rows of a tile one run (a slice of its buffer where
            // they follow each other there, else a copy), one call of `f`
            // per tile (a call per row of a head's 64 elements, or of a
            // transpose's 128, cost several times the row's arithmetic)
            let tile = (RUN / row_len.max(1)).min(TILE_ROWS);
            if tile > 1 {
                let (height, outer) = (cshape[d - 2], [strides[0][d - 2], strides[1][d - 2]]);
                let (mut k, mut start) = (0, (first, [0isize; 2]));
                let last = rows.end.saturating_sub(1);
                layout::for_rows(&cshape, &strides, [la.offset, lb.offset], rows, |row, bases| {
                    if k == 0 {
                        start = (row, bases);
                    }
                    k += 1;
                    // (a tile ends after `tile` rows, with its matrix, or
                    // with the task's rows)
                    if k == tile || (row + 1) % height == 0 || row == last {
                        let (r0, b0) = start;
                        let o = &mut out[(r0 - first) * row_len..(r0 - first + k) * row_len];
                        call(&mut runs, b0, outer, (k, row_len), o);
                        k = 0;
                    }
                });
                return;
            }
            layout::for_rows(&cshape, &strides, [la.offset, lb.offset], rows, |row, bases| {
                for at in (0..row_len).step_by(RUN) {
                    let len = RUN.min(row_len - at);
                    let bases = [0, 1].map(|j| bases[j] + at as isize * inner[j]);
                    let o = (row - first) * row_len + at;
                    call(&mut runs, bases, [0, 0], (1, len), &mut out[o..o + len]);
                }
            });
        })
    }?;
    Ok(Tensor::from_storage(T::buf_into_storage(data), &shape))
}

/// The most rows of a matrix [`zip_slices`] hands its function in one
/// run, where its rows are short.
const TILE_ROWS: usize = 16;

/// The runs of elements [`zip_slices`] hands its function, and the
/// elementwise table's functions are handed (`ops::math::table::RUN`).
pub(crate) const RUN: usize = 1024;

/// One operand's runs in [`zip_slices`]: a slice of the operand's buffer
/// where its elements follow each other there, else a copy, kept while the
/// next run is the same (same rows of the same elements).
struct Run<T> {
    /// (inline for the runs of small tensors: no allocation per op)
    buf: smallvec::SmallVec<[T; 32]>,
    /// What `buf` holds: the run of these [`get`](Self::get) arguments.
    kept: Option<(isize, isize, isize, usize, usize)>,
}

impl<T: Float> Run<T> {
    fn new() -> Self {
        Run {
            buf: smallvec::SmallVec::new(),
            kept: None,
        }
    }

    /// The run of `m` rows of `len` elements of `src`, from `base`, rows
    /// `outer` apart and elements `inner` apart.
    #[inline]
    fn get<'a>(&'a mut self, src: &'a [T], base: isize, outer: isize, inner: isize, m: usize, len: usize) -> &'a [T] {
        let total = m * len;
        if inner == 1 && (m == 1 || outer == len as isize) {
            return &src[base as usize..base as usize + total];
        }
        let key = (base, outer, inner, m, len);
        if self.kept != Some(key) {
            self.buf.clear();
            for j in 0..m as isize {
                let row = base + j * outer;
                let r = row as usize;
                match inner {
                    1 => self.buf.extend_from_slice(&src[r..r + len]),
                    0 => self.buf.extend(std::iter::repeat_n(src[r], len)),
                    _ => self
                        .buf
                        .extend((0..len as isize).map(|i| src[(row + i * inner) as usize])),
                }
            }
            self.kept = Some(key);
        }
        &self.buf[..total]
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn zip_row<A: Element, B: Element, O: Element>(
    out: &mut [MaybeUninit<O>],
    a: &[A],
    oa: isize,
    sa: isize,
    b: &[B],
    ob: isize,
    sb: isize,
    f: &impl Fn(A, B) -> O,
) {
    let n = out.len();
    if n == 0 {
        return;
    }
    match (sa, sb) {
        (1, 1) => {
            let a = &a[oa as usize..oa as usize + n];
            let b = &b[ob as usize..ob as usize + n];
            for i in 0..n {
                out[i].write((*f)(a[i], b[i]));
            }
        }
        (1, 0) => {
            let a = &a[oa as usize..oa as usize + n];
            let bv = b[ob as usize];
            for i in 0..n {
                out[i].write((*f)(a[i], bv));
            }
        }
        (0, 1) => {
            let av = a[oa as usize];
            let b = &b[ob as usize..ob as usize + n];
            for i in 0..n {
                out[i].write((*f)(av, b[i]));
            }
        }
        _ => {
            for (i, o) in lockstep::zip(0..n, out) {
                let i = i as isize;
                o.write((*f)(a[(oa + i * sa) as usize], b[(ob + i * sb) as usize]));
            }
        }
    }
}

/// `f(a, b)` with NumPy broadcasting. Dtypes are the caller's to check.
pub(crate) fn zip<A: Element, B: Element, O: Element>(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(A, B) -> O + Sync,
) -> Result<Tensor> {
    if let Some(r) = crate::kernels::gpu::hosted(op, &[a, b], |h| zip_host(op, &h[0], &h[1], &f)) {
        return r;
    }
    zip_host(op, a, b, f)
}

/// [`zip`] on host tensors.
fn zip_host<A: Element, B: Element, O: Element>(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(A, B) -> O + Sync,
) -> Result<Tensor> {
    if const { by_ref(&[A::DTYPE, B::DTYPE, O::DTYPE]) } {
        zip_with::<A, B, O>(op, a, b, &f as &(dyn Fn(A, B) -> O + Sync))
    } else {
        zip_with(op, a, b, f)
    }
}

#[inline]
fn zip_with<A: Element, B: Element, O: Element>(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(A, B) -> O + Sync,
) -> Result<Tensor> {
    let (shape, cshape, [csa, csb]) = broadcast_pair(op, a, b)?;
    let (la, lb) = (a.layout(), b.layout());
    let (ba, bb) = (a.buffer::<A>(), b.buffer::<B>());
    let n: usize = shape.iter().product(); // checked by broadcast_shapes
    let data = if cshape.len() == 1 {
        let (sa, sb) = (csa[0], csb[0]);
        let (oa, ob) = (la.offset as isize, lb.offset as isize);
        build(op, n, |start, out| {
            let s = start as isize;
            simd_if_long::<A, O>(
                out.len(),
                #[inline(always)]
                || zip_row(out, ba, oa + s * sa, sa, bb, ob + s * sb, sb, &f),
            )
        })
    } else if cshape.len() == 2 && csa[1] == 1 && csb[1] == 1 {
        // rows with a contiguous last dim, each operand stepping by a fixed
        // stride per row (0 when broadcast): a bias add. A plain double loop,
        // so short rows (a few channels) cost no per-row walking.
        let row_len = cshape[1];
        let (ra, rb) = (csa[0], csb[0]);
        let (oa, ob) = (la.offset as isize, lb.offset as isize);
        build_rows(op, cshape[0], row_len, |rows, out| {
            simd_if_long::<A, O>(
                out.len(),
                #[inline(always)]
                || {
                    for (o, row) in lockstep::zip(chunks_mut(out, row_len), rows.clone()) {
                        let r = row as isize;
                        let (pa, pb) = ((oa + r * ra) as usize, (ob + r * rb) as usize);
                        let (a, b) = (&ba[pa..pa + row_len], &bb[pb..pb + row_len]);
                        for (o, &x, &y) in zip3(o, a, b) {
                            o.write(f(x, y));
                        }
                    }
                },
            )
        })
    } else {
        let row_len = *cshape.last().unwrap();
        let r = cshape.len() - 1;
        let strides = [csa.clone(), csb.clone()];
        build_rows(op, n / row_len.max(1), row_len, |rows, out| {
            let first = rows.start;
            simd_if_long::<A, O>(
                out.len(),
                #[inline(always)]
                || {
                    let (sa, sb) = (strides[0][r], strides[1][r]);
                    layout::for_rows(&cshape, &strides, [la.offset, lb.offset], rows, |row, [oa, ob]| {
                        let o = &mut out[(row - first) * row_len..(row - first + 1) * row_len];
                        zip_row(o, ba, oa, sa, bb, ob, sb, &f)
                    });
                },
            )
        })
    }?;
    Ok(Tensor::from_storage(O::buf_into_storage(data), &shape))
}

/// Converts every element to `to` (as Rust's `as` does, through `f64`).
pub(crate) fn cast(x: &Tensor, to: DType) -> Result<Tensor> {
    if x.dtype().is_complex() || to.is_complex() {
        if let Some(r) = crate::kernels::gpu::hosted("cast", &[x], |h| cast(&h[0], to)) {
            return r;
        }
        return super::complex::cast(x, to);
    }
    // (the `Element` conversions by name: `D::from_f64` would pick the half
    // types' inherent `from_f64`, which rounds to bf16 from the top 32 bits
    // of the f64 only: an f32 just above a bf16 tie became a tie, rounded
    // to even, e.g. 0xbe408002 to 0xbe40 instead of 0xbe41)
    match (x.dtype(), to) {
        // int64 is the one source an f64 does not hold exactly: to int32 it
        // keeps the low 32 bits (as TF, NumPy and JAX do; through f64 it
        // saturated), and to the narrower floats it rounds once, to f32
        // (through f64 it rounded twice: 2^60 + 2^28 + 1 became 2^60 in f32)
        (DType::I64, DType::I32) => map::<i64, i32>("cast", x, |v| v as i32),
        (DType::I64, DType::F32) => map::<i64, f32>("cast", x, |v| v as f32),
        (DType::I64, DType::F16 | DType::BF16) => cast(&cast(x, DType::F32)?, to),
        // the casts of a mixed-precision step: one vectorised pass
        (DType::F16, DType::F32) => convert::<f16, f32>(x, f16::to_f32s),
        (DType::BF16, DType::F32) => convert::<bf16, f32>(x, bf16::to_f32s),
        (DType::F32, DType::F16) => convert::<f32, f16>(x, f16::from_f32s),
        (DType::F32, DType::BF16) => convert::<f32, bf16>(x, bf16::from_f32s),
        _ => {
            with_dtype!(x.dtype(), S => with_dtype!(to, D => map::<S, D>("cast", x, |v| <D as Element>::from_f64(<S as Element>::to_f64(v)))))
        }
    }
}

/// `x` converted by the slice function `f` (`f32` to or from a half
/// type, [`Half`]), over the parallel chunks of `x`.
fn convert<S: Element, D: Float>(x: &Tensor, f: fn(&[S], &mut [D])) -> Result<Tensor> {
    if let Some(r) = crate::kernels::gpu::hosted("cast", &[x], |h| convert(&h[0], f)) {
        return r;
    }
    let src = x.values::<S>("cast")?;
    let data = build("cast", src.len(), |start, out| {
        let o = to_be_written(out);
        f(&src[start..start + o.len()], o)
    })?;
    Ok(Tensor::from_storage(D::buf_into_storage(data), x.shape()))
}

/// `x ← f(x, g)` elementwise over `x`'s buffer, for two float tensors of
/// one shape and dtype (the caller checks), when nothing else references
/// `x`: whether it was done (nothing is done otherwise).
#[inline(always)]
fn update_in_place<T: Float>(x: &mut Tensor, g: &[T], f: impl Fn(T, T) -> T + Sync) -> bool {
    let Some(xs) = x.unique_values_mut::<T>() else {
        return false;
    };
    let body = |start: usize, out: &mut [T]| {
        let g = &g[start..start + out.len()];
        simd_if_long::<T, T>(
            out.len(),
            #[inline(always)]
            || {
                for (o, &d) in lockstep::zip(&mut *out, g) {
                    *o = f(*o, d);
                }
            },
        )
    };
    if xs.len() >= super::PAR_MIN {
        let c = super::chunk_len(xs.len());
        super::workers::for_each_chunk_mut(xs, c, |i, out| body(i * c, out));
    } else {
        body(0, xs);
    }
    true
}

/// `x + g` written over `x`'s buffer, for two float tensors of one shape
/// and dtype (the caller checks), when nothing else references `x`:
/// `true` when done (the same bits as a new `x + g`), `false` (nothing
/// done) otherwise.
pub(crate) fn add_in_place<T: Float>(op: &'static str, x: &mut Tensor, g: &Tensor) -> Result<bool> {
    let gv = g.values::<T>(op)?;
    Ok(update_in_place(x, &gv, |a, b| a + b))
}

/// `x - alpha * g` for two float tensors of one shape and dtype (the
/// caller checks): written over `x`'s buffer when nothing else references
/// it (one pass, no new buffer), else into a new tensor that replaces `x`.
pub(crate) fn sub_scaled_in_place<T: Float>(op: &'static str, x: &mut Tensor, alpha: T, g: &Tensor) -> Result<()> {
    let gv = g.values::<T>(op)?;
    let gs: &[T] = &gv;
    if update_in_place(x, gs, |v, d| v - alpha * d) {
        return Ok(());
    }
    let xv = x.values::<T>(op)?;
    let xs: &[T] = &xv;
    let data = build(op, xs.len(), |start, out| {
        let (a, b) = (&xs[start..start + out.len()], &gs[start..start + out.len()]);
        simd_if_long::<T, T>(
            out.len(),
            #[inline(always)]
            || {
                for (o, &v, &d) in zip3(out, a, b) {
                    o.write(v - alpha * d);
                }
            },
        )
    })?;
    let shape = x.shape().to_vec();
    drop(xv);
    *x = Tensor::from_storage(T::buf_into_storage(data), &shape);
    Ok(())
}
