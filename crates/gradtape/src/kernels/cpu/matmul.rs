//! Matrix multiplication: `f32` products through [`super::sgemm`] (AVX-512)
//! where the CPU has it, everything else through the `gemm` crate.
//!
//! Both take arbitrary row and column strides, so transposed and other
//! strided views are multiplied in place, without a copy. Batch dimensions
//! broadcast like NumPy's `matmul`. Products of at least `PAR_FLOPS`
//! multiply-adds are split over gradtape's compute threads
//! ([`super::workers`]), one piece per thread; smaller ones (an RNN step's)
//! run on the calling thread, where the synchronisation would cost more
//! than it saves, except in a compiled graph's run, where the `f32` kernel
//! splits products from a quarter of that size (see `super::sgemm`).

use super::gemm_crates::Gemm;
use super::lockstep::{chunks_mut, zip};
use crate::error::{Error, Result};
use crate::tensor::dtype::with_types;
use crate::tensor::layout::{broadcast_shapes, broadcast_strides, checked_numel, contiguous_strides};
use crate::tensor::{alloc, Buf, Complex, Shape, Tensor};

/// Products below this many multiply-adds run on one thread.
const PAR_FLOPS: usize = 1 << 20;

/// The operand dims of a matmul: (batch shape, rows, cols, batch strides, row stride, col stride).
struct Mat<'a> {
    batch: &'a [usize],
    rows: usize,
    cols: usize,
    bstrides: &'a [isize],
    rs: isize,
    cs: isize,
    offset: usize,
}

fn operand(t: &Tensor, transpose: bool) -> Mat<'_> {
    let r = t.rank();
    let (s, st) = (t.shape(), t.strides());
    let (rows, cols, rs, cs) = if transpose {
        (s[r - 1], s[r - 2], st[r - 1], st[r - 2])
    } else {
        (s[r - 2], s[r - 1], st[r - 2], st[r - 1])
    };
    Mat {
        batch: &s[..r - 2],
        rows,
        cols,
        bstrides: &st[..r - 2],
        rs,
        cs,
        offset: t.layout().offset,
    }
}

/// `op(a) @ op(b)` where `op` transposes the last two dims when its flag is set.
/// The output shape of `op(a) @ op(b)`, or the error [`matmul`] gives for
/// operands that do not multiply.
pub(crate) fn matmul_shape(a: &Tensor, b: &Tensor, ta: bool, tb: bool) -> Result<Shape> {
    let (ma, mb, batch) = checked(a, b, ta, tb)?;
    let mut out: Shape = batch;
    out.push(ma.rows);
    out.push(mb.cols);
    Ok(out)
}

/// The operands as matrices and the broadcast batch shape, checked.
fn checked<'a>(a: &'a Tensor, b: &'a Tensor, ta: bool, tb: bool) -> Result<(Mat<'a>, Mat<'a>, Shape)> {
    const OP: &str = "matmul";
    if a.dtype() != b.dtype() {
        return Err(Error::DTypeMismatch {
            op: OP,
            lhs: a.dtype(),
            rhs: b.dtype(),
        });
    }
    if a.rank() < 2 || b.rank() < 2 {
        return Err(Error::invalid(
            OP,
            format!(
                "needs operands of rank >= 2, got shapes {:?} and {:?}",
                a.shape(),
                b.shape()
            ),
        ));
    }
    let (ma, mb) = (operand(a, ta), operand(b, tb));
    if ma.cols != mb.rows {
        // the contracted axes: a's columns (its rows when transposed), b's
        // rows (its columns when transposed)
        return Err(Error::InnerDimMismatch {
            op: OP,
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
            lhs_axis: a.rank() - if ta { 2 } else { 1 },
            rhs_axis: b.rank() - if tb { 1 } else { 2 },
            lhs_dim: ma.cols,
            rhs_dim: mb.rows,
        });
    }
    let batch = broadcast_shapes(OP, ma.batch, mb.batch).map_err(|_| Error::ShapeMismatch {
        op: OP,
        lhs: a.shape().to_vec(),
        rhs: b.shape().to_vec(),
    })?;
    Ok((ma, mb, batch))
}

pub fn matmul(a: &Tensor, b: &Tensor, ta: bool, tb: bool) -> Result<Tensor> {
    const OP: &str = "matmul";
    let (ma, mb, batch) = checked(a, b, ta, tb)?;
    // (dtypes cuBLAS has no product for here: complex, integers)
    if let Some(r) = crate::kernels::gpu::hosted(OP, &[a, b], |h| matmul(&h[0], &h[1], ta, tb)) {
        return r;
    }
    if a.dtype().is_half() {
        // f32 copies of the operands, an f32 product (f32 accumulation, as
        // TensorFlow's CPU kernel for half types), rounded once
        let to32 = |t: &Tensor| super::elementwise::cast(t, crate::DType::F32);
        let y = matmul(&to32(a)?, &to32(b)?, ta, tb)?;
        return super::elementwise::cast(&y, a.dtype());
    }
    with_types!(a.dtype(), T => run::<T>(a, b, &ma, &mb, &batch),
        [F32: f32, F64: f64, C64: Complex<f32>, C128: Complex<f64>, I32: i32, I64: i64], _ => Err(Error::UnsupportedDType {
        op: OP,
        dtype: a.dtype(),
        expected: "a numeric dtype",
    }))
}

fn run<T: Gemm>(a: &Tensor, b: &Tensor, ma: &Mat, mb: &Mat, batch: &[usize]) -> Result<Tensor> {
    const OP: &str = "matmul";
    let _flush = super::denormal::flush_guard();
    let (m, k, n) = (ma.rows, ma.cols, mb.cols);
    let nb: usize = batch.iter().product();
    let mut out_shape: Shape = batch.into();
    out_shape.push(m);
    out_shape.push(n);
    let total = checked_numel(OP, &out_shape)?;
    if total == 0 || k == 0 {
        return Ok(Tensor::from_storage(
            T::buf_into_storage(super::filled_buf(OP, total, T::zero())?),
            &out_shape,
        ));
    }
    let bsa = broadcast_strides(ma.batch, ma.bstrides, batch);
    let bsb = broadcast_strides(mb.batch, mb.bstrides, batch);
    let bidx = contiguous_strides(batch);
    // (as slices: `SmallVec`'s indexing is not inlined)
    let (bsa, bsb, bidx): (&[isize], &[isize], &[isize]) = (&bsa, &bsb, &bidx);
    let offsets = |i: usize| -> (isize, isize) {
        let (mut oa, mut ob) = (ma.offset as isize, mb.offset as isize);
        let mut rem = i;
        for d in 0..batch.len() {
            let q = rem / bidx[d] as usize;
            rem %= bidx[d] as usize;
            oa += q as isize * bsa[d];
            ob += q as isize * bsb[d];
        }
        (oa, ob)
    };
    crate::kernels::gpu::expect_host(OP, a)?;
    crate::kernels::gpu::expect_host(OP, b)?;
    let (pa, pb) = (a.buffer::<T>().as_ptr() as usize, b.buffer::<T>().as_ptr() as usize);
    let flops = m * n * k;
    let one = |dst: &mut [std::mem::MaybeUninit<T>], i: usize, par: bool| {
        let (oa, ob) = offsets(i);
        #[cfg(feature = "openblas")]
        // SAFETY: as for gemm below; BLAS writes all m*n elements of `dst`.
        if unsafe {
            super::blas::try_gemm::<T>(
                m,
                n,
                k,
                dst.as_mut_ptr() as *mut T,
                (pa as *const T).offset(oa),
                ma.rs,
                ma.cs,
                (pb as *const T).offset(ob),
                mb.rs,
                mb.cs,
            )
        } {
            return;
        }
        // SAFETY: the offsets and strides describe views that lie inside the
        // operands' buffers (guaranteed by the layouts), `dst` holds m*n
        // elements written row-major, and nothing is read from `dst`
        // (`acc` is false).
        unsafe {
            gemm_raw(
                (m, n, k),
                dst.as_mut_ptr() as *mut T,
                (n as isize, 1),
                false,
                (pa as *const T).offset(oa),
                (ma.rs, ma.cs),
                (pb as *const T).offset(ob),
                (mb.rs, mb.cs),
                par,
            )
        }
    };
    let mut out: Buf<T> = alloc::try_buf(OP, total)?;
    let dst = &mut super::spare(&mut out)[..total];
    let threads = super::workers::threads();
    if nb > 1 && flops < PAR_FLOPS * 4 && nb * flops >= PAR_FLOPS {
        super::workers::for_each_chunk_mut(dst, m * n, |i, d| one(d, i, false));
    } else {
        // (each kernel decides from the product's size whether to split)
        let par = threads > 1;
        for (i, d) in zip(0.., chunks_mut(dst, m * n)) {
            one(d, i, par);
        }
    }
    // SAFETY: each batch's m*n block was written whole by one gemm call
    // above (read_dst = false, so nothing uninitialised was read).
    unsafe { out.set_len(total) };
    Ok(Tensor::from_storage(T::buf_into_storage(out), &out_shape))
}

/// Whether an `f32` product of `m×k` by `k×n` into a row-major output runs
/// on [`super::sgemm`] (`a_row_major`: `a`'s columns are adjacent), as
/// [`gemm_raw`] decides. That kernel computes each element in one order
/// whatever the operands' layouts, which the `gemm` crate does not promise.
pub(crate) fn on_sgemm(m: usize, n: usize, k: usize, a_row_major: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        !(a_row_major && n <= 32) && super::sgemm::suits(m, n, k)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (m, n, k, a_row_major);
        false
    }
}

/// `dst = (acc ? dst : 0) + a @ b` on raw strided matrices (`rs`/`cs`: row
/// and column strides), `a` m x k, `b` k x n, `dst` m x n. `f32` products
/// with a unit column stride in `dst` go to [`super::sgemm`] where the CPU
/// has it, or to [`super::narrow_matmul`] when `narrow_matmul::MIN_N` to `narrow_matmul::MAX_N` columns wide;
/// the rest to the `gemm` kernel crates ([`super::gemm_crates`]). With `par`, a product of at least
/// `PAR_FLOPS` multiply-adds is split over the compute threads, one piece
/// per thread along the output's longer side.
///
/// # Safety
/// The pointers and strides must describe matrices inside live buffers, and
/// `dst` must not overlap `a` or `b`; without `acc`, `dst` may be
/// uninitialised.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_raw<T: Gemm>(
    (m, n, k): (usize, usize, usize),
    dst: *mut T,
    (d_rs, d_cs): (isize, isize),
    acc: bool,
    a: *const T,
    (a_rs, a_cs): (isize, isize),
    b: *const T,
    (b_rs, b_cs): (isize, isize),
    par: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    let _flush = super::denormal::flush_guard();
    #[cfg(target_arch = "x86_64")]
    // (thin products of a row-major `a` go to `gemm`, which reads `a` in
    // place where this kernel would pack it: the packing costs as much as
    // the arithmetic when `n` is a few vectors wide)
    if T::DTYPE == crate::DType::F32 && d_cs == 1 && d_rs >= n as isize && on_sgemm(m, n, k, a_cs == 1) {
        use super::sgemm::{sgemm, View};
        let va = View {
            ptr: a as *const f32,
            rs: a_rs,
            cs: a_cs,
        };
        let vb = View {
            ptr: b as *const f32,
            rs: b_rs,
            cs: b_cs,
        };
        // SAFETY: T is f32, and the caller's guarantees carry over.
        return unsafe { sgemm(m, n, k, va, vb, dst as *mut f32, d_rs as usize, acc, par) };
    }
    let threads = super::workers::threads();
    let (d, a, b) = (super::workers::SendPtr(dst), a as usize, b as usize);
    // (narrow f32 products on their own kernel: the `gemm` crate allocates
    // on every call for them; not products with a few columns, which it
    // runs as matrix-vector products without allocating, faster than
    // `narrow_matmul`'s part-empty vectors)
    let narrow = T::DTYPE == crate::DType::F32
        && d_cs == 1
        && d_rs >= n as isize
        && (super::narrow_matmul::MIN_N..=super::narrow_matmul::MAX_N).contains(&n);
    // one piece: a block of rows and columns of dst
    let piece = |rows: std::ops::Range<usize>, cols: std::ops::Range<usize>| {
        let (i, j) = (rows.start as isize, cols.start as isize);
        if narrow {
            // SAFETY: as below; T is f32.
            return unsafe {
                super::narrow_matmul::matmul(
                    (rows.len(), cols.len(), k),
                    d.get().offset(i * d_rs + j) as *mut f32,
                    d_rs,
                    acc,
                    (a as *const f32).offset(i * a_rs),
                    (a_rs, a_cs),
                    (b as *const f32).offset(j * b_cs),
                    (b_rs, b_cs),
                )
            };
        }
        // SAFETY: a sub-block of the caller's matrices; pieces write
        // disjoint blocks of dst.
        unsafe {
            T::gemm(
                (rows.len(), cols.len(), k),
                (d.get().offset(i * d_rs + j * d_cs), d_rs, d_cs),
                acc,
                ((a as *const T).offset(i * a_rs), a_rs, a_cs),
                ((b as *const T).offset(j * b_cs), b_rs, b_cs),
            )
        }
    };
    if par && threads > 1 && m * n * k >= PAR_FLOPS && super::workers::split_output(m, n, (16, 16), false, piece) {
        return;
    }
    piece(0..m, 0..n)
}
