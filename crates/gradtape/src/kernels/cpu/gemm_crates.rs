//! The `gemm-f32` and `gemm-f64` crates behind one generic call, for the
//! products [`super::matmul::gemm_raw`] does not run on its own kernels.
//!
//! The `gemm` facade crate would do this too, but it always builds its
//! complex kernels (`gemm-c32`, `gemm-c64`), the two slowest dependencies
//! of a fresh build. A complex product here is four real ones over the
//! interleaved real and imaginary parts (strides doubled): `Re C = Re A Re
//! B - Im A Im B`, `Im C = Re A Im B + Im A Re B`, each added into `C` by
//! the real kernels' `alpha`/`beta` (so it sums in another order than a
//! complex kernel would, within rounding of it).
//!
//! As the facade does, the operands are first normalised for the kernels:
//! a column-major output is computed as the transposed product, and
//! negative strides are turned around.

use gemm_common::Parallelism;
use num_complex::Complex;

use crate::tensor::Element;

/// A real matrix operand: a pointer and its (row, column) strides.
pub type Raw<T> = (*const T, isize, isize);

/// `dst = (acc ? dst : 0) + beta · lhs @ rhs` for f32 or f64 (`R`), with
/// `lhs` m×k, `rhs` k×n, `dst` m×n, all strided (`(ptr, rs, cs)`).
///
/// # Safety
/// As [`Gemm::gemm`]'s.
#[allow(clippy::too_many_arguments)]
unsafe fn real<R: Real>(
    (m, n, k): (usize, usize, usize),
    (mut dst, mut d_rs, mut d_cs): (*mut R, isize, isize),
    acc: bool,
    (mut a, mut a_rs, mut a_cs): Raw<R>,
    (mut b, mut b_rs, mut b_cs): Raw<R>,
    beta: R,
) {
    let (mut m, mut n) = (m, n);
    if d_cs.abs() < d_rs.abs() {
        // dst is column-major: compute dstᵀ = rhsᵀ lhsᵀ, whose rows are
        // adjacent, as the kernels prefer
        (m, n) = (n, m);
        (d_rs, d_cs) = (d_cs, d_rs);
        (a, b) = (b, a);
        (a_rs, a_cs, b_rs, b_cs) = (b_cs, b_rs, a_cs, a_rs);
    }
    // SAFETY (offsets): each turned-around pointer is the far end of a
    // matrix the caller vouched for, so it stays inside its buffer.
    if d_rs < 0 && m > 0 {
        dst = unsafe { dst.offset((m - 1) as isize * d_rs) };
        d_rs = -d_rs;
        a = unsafe { a.offset((m - 1) as isize * a_rs) };
        a_rs = -a_rs;
    }
    if d_cs < 0 && n > 0 {
        dst = unsafe { dst.offset((n - 1) as isize * d_cs) };
        d_cs = -d_cs;
        b = unsafe { b.offset((n - 1) as isize * b_cs) };
        b_cs = -b_cs;
    }
    if a_cs < 0 && k > 0 {
        a = unsafe { a.offset((k - 1) as isize * a_cs) };
        a_cs = -a_cs;
        b = unsafe { b.offset((k - 1) as isize * b_rs) };
        b_rs = -b_rs;
    }
    // SAFETY: the caller's matrices, normalised above.
    unsafe {
        R::kernel()(
            m,
            n,
            k,
            dst,
            d_cs,
            d_rs,
            acc,
            a,
            a_cs,
            a_rs,
            b,
            b_cs,
            b_rs,
            R::one(),
            beta,
            false,
            false,
            false,
            Parallelism::None,
        )
    }
}

/// A `gemm` crate's kernel: `(m, n, k, dst, dst_cs, dst_rs, read_dst,
/// lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs, alpha, beta, conj_dst,
/// conj_lhs, conj_rhs, parallelism)`, computing `dst = alpha dst + beta lhs
/// rhs` (`alpha dst` only when `read_dst`).
pub type GemmFn<T> = unsafe fn(
    usize,
    usize,
    usize,
    *mut T,
    isize,
    isize,
    bool,
    *const T,
    isize,
    isize,
    *const T,
    isize,
    isize,
    T,
    T,
    bool,
    bool,
    bool,
    Parallelism,
);

/// The real dtypes with a `gemm` kernel crate.
pub trait Real: Copy + num_traits::One + std::ops::Neg<Output = Self> + 'static {
    /// The crate's kernel for this dtype, picked for the CPU.
    fn kernel() -> GemmFn<Self>;
}

impl Real for f32 {
    fn kernel() -> GemmFn<f32> {
        gemm_f32::gemm::f32::get_gemm_fn()
    }
}

impl Real for f64 {
    fn kernel() -> GemmFn<f64> {
        gemm_f64::gemm::f64::get_gemm_fn()
    }
}

/// A complex product as four real ones on the parts of `Complex<R>`
/// matrices (strides in complex elements).
///
/// # Safety
/// As [`Gemm::gemm`]'s.
unsafe fn complex<R: Real>(
    mnk: (usize, usize, usize),
    (dst, d_rs, d_cs): (*mut Complex<R>, isize, isize),
    acc: bool,
    (a, a_rs, a_cs): Raw<Complex<R>>,
    (b, b_rs, b_cs): Raw<Complex<R>>,
) {
    // `Complex<R>` is `#[repr(C)]` `{re, im}`: the parts of element `i` are
    // reals `2i` and `2i + 1`
    let (dr, ar, br) = (dst as *mut R, a as *const R, b as *const R);
    // SAFETY: `+ 1` stays inside the first complex element of each.
    let (di, ai, bi) = unsafe { (dr.add(1), ar.add(1), br.add(1)) };
    let d = |p| (p, 2 * d_rs, 2 * d_cs);
    let l = |p| (p, 2 * a_rs, 2 * a_cs);
    let r = |p| (p, 2 * b_rs, 2 * b_cs);
    let one = R::one();
    // SAFETY: views of the caller's matrices, with its guarantees.
    unsafe {
        real(mnk, d(dr), acc, l(ar), r(br), one);
        real(mnk, d(dr), true, l(ai), r(bi), -one);
        real(mnk, d(di), acc, l(ar), r(bi), one);
        real(mnk, d(di), true, l(ai), r(br), one);
    }
}

/// The element types with a matrix-product kernel: f32 and f64 (from the
/// `gemm` kernel crates), complex64 and complex128 (four real products),
/// the half types and the integers (plain loops).
pub trait Gemm: Element + num_traits::Zero + num_traits::One {
    /// `dst = (acc ? dst : 0) + a @ b`, `a` m×k, `b` k×n, `dst` m×n, each
    /// given as `(ptr, row stride, column stride)`, on the calling thread.
    ///
    /// # Safety
    /// The pointers and strides must describe matrices inside live
    /// buffers, `dst` must not overlap `a` or `b`, and without `acc` `dst`
    /// may be uninitialised.
    unsafe fn gemm(mnk: (usize, usize, usize), dst: (*mut Self, isize, isize), acc: bool, a: Raw<Self>, b: Raw<Self>);
}

impl Gemm for f32 {
    unsafe fn gemm(mnk: (usize, usize, usize), dst: (*mut f32, isize, isize), acc: bool, a: Raw<f32>, b: Raw<f32>) {
        // SAFETY: the caller's guarantees.
        unsafe { real(mnk, dst, acc, a, b, 1.0) }
    }
}

impl Gemm for f64 {
    unsafe fn gemm(mnk: (usize, usize, usize), dst: (*mut f64, isize, isize), acc: bool, a: Raw<f64>, b: Raw<f64>) {
        // SAFETY: the caller's guarantees.
        unsafe { real(mnk, dst, acc, a, b, 1.0) }
    }
}

impl<R: Real> Gemm for Complex<R>
where
    Complex<R>: Element + num_traits::Zero + num_traits::One,
{
    unsafe fn gemm(mnk: (usize, usize, usize), dst: (*mut Self, isize, isize), acc: bool, a: Raw<Self>, b: Raw<Self>) {
        // SAFETY: the caller's guarantees.
        unsafe { complex(mnk, dst, acc, a, b) }
    }
}

/// Half-precision products (which the matmul kernels widen to f32 before
/// they get here; a caller that does not gets this plain loop, summing in
/// f32 and rounding each output once, as TensorFlow's CPU kernels do).
///
/// # Safety
/// As [`Gemm::gemm`]'s.
unsafe fn half<H: Element + num_traits::Float>(
    (m, n, k): (usize, usize, usize),
    (dst, d_rs, d_cs): (*mut H, isize, isize),
    acc: bool,
    (a, a_rs, a_cs): Raw<H>,
    (b, b_rs, b_cs): Raw<H>,
) {
    let wide = |x: H| x.to_f32().unwrap_or(f32::NAN);
    for i in 0..m as isize {
        for j in 0..n as isize {
            // SAFETY: indices inside the caller's m×k, k×n and m×n matrices.
            unsafe {
                let d = dst.offset(i * d_rs + j * d_cs);
                let mut s = if acc { wide(*d) } else { 0.0 };
                for p in 0..k as isize {
                    s += wide(*a.offset(i * a_rs + p * a_cs)) * wide(*b.offset(p * b_rs + j * b_cs));
                }
                d.write(H::from(s).unwrap_or_else(H::nan));
            }
        }
    }
}

/// Integer products: a plain loop, wrapping on overflow as TensorFlow's
/// CPU kernels do (integer products are rare and small; exact in any order).
///
/// # Safety
/// As [`Gemm::gemm`]'s.
unsafe fn int<I: crate::tensor::Num>(
    (m, n, k): (usize, usize, usize),
    (dst, d_rs, d_cs): (*mut I, isize, isize),
    acc: bool,
    (a, a_rs, a_cs): Raw<I>,
    (b, b_rs, b_cs): Raw<I>,
) {
    for i in 0..m as isize {
        for j in 0..n as isize {
            // SAFETY: indices inside the caller's m×k, k×n and m×n matrices.
            unsafe {
                let d = dst.offset(i * d_rs + j * d_cs);
                let mut s = if acc { *d } else { I::zero() };
                for p in 0..k as isize {
                    s = s.add_wrap((*a.offset(i * a_rs + p * a_cs)).mul_wrap(*b.offset(p * b_rs + j * b_cs)));
                }
                d.write(s);
            }
        }
    }
}

/// `Gemm` for each of the types, by the plain loop `kernel`.
macro_rules! loop_gemm {
    ($kernel:ident: $($t:ty),*) => {$(
        impl Gemm for $t {
            unsafe fn gemm(mnk: (usize, usize, usize), dst: (*mut $t, isize, isize), acc: bool, a: Raw<$t>, b: Raw<$t>) {
                // SAFETY: the caller's guarantees.
                unsafe { $kernel(mnk, dst, acc, a, b) }
            }
        }
    )*};
}
loop_gemm!(int: i32, i64);
loop_gemm!(half: crate::tensor::f16, crate::tensor::bf16);
