//! Optional OpenBLAS backend for matrix products (cargo feature `openblas`,
//! linking the system `libopenblas`). Used by `matmul` when every operand
//! has a unit stride in one of its two matrix dims (BLAS's layouts);
//! other views go through the `gemm` crate.
//!
//! Measured on the project machine (see the `nn` helper's report): Debian's
//! OpenBLAS 0.3.21 mis-detects the virtual CPU as "Prescott" and is then
//! 3-10x slower than `gemm`; with `OPENBLAS_CORETYPE=SkylakeX` it is about
//! 1.5-2x faster for the MLP/RNN shapes. Hence it is not the default.

use crate::tensor::Element;

#[link(name = "openblas")]
extern "C" {
    fn cblas_sgemm(
        layout: i32,
        ta: i32,
        tb: i32,
        m: i32,
        n: i32,
        k: i32,
        alpha: f32,
        a: *const f32,
        lda: i32,
        b: *const f32,
        ldb: i32,
        beta: f32,
        c: *mut f32,
        ldc: i32,
    );
    fn cblas_dgemm(
        layout: i32,
        ta: i32,
        tb: i32,
        m: i32,
        n: i32,
        k: i32,
        alpha: f64,
        a: *const f64,
        lda: i32,
        b: *const f64,
        ldb: i32,
        beta: f64,
        c: *mut f64,
        ldc: i32,
    );
}

const ROW_MAJOR: i32 = 101;
const NO_TRANS: i32 = 111;
const TRANS: i32 = 112;

/// BLAS's description of an `rows x cols` operand with strides `(rs, cs)`:
/// `(transpose flag, leading dimension)`, or `None` if BLAS cannot take it.
fn blas_layout(rows: usize, cols: usize, rs: isize, cs: isize) -> Option<(i32, i32)> {
    let fits = |ld: isize, min: usize| ld >= min.max(1) as isize && ld <= i32::MAX as isize;
    if (cs == 1 || cols <= 1) && fits(rs, cols) {
        Some((NO_TRANS, rs as i32))
    } else if (rs == 1 || rows <= 1) && fits(cs, rows) {
        Some((TRANS, cs as i32))
    } else {
        None
    }
}

/// `c (m x n, row-major, contiguous) = a (m x k) @ b (k x n)` through
/// OpenBLAS; returns false (doing nothing) when the layouts do not fit.
///
/// # Safety
/// The pointers and strides must describe valid operands; `c` must hold
/// `m * n` writable elements.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn try_gemm<T: Element>(
    m: usize,
    n: usize,
    k: usize,
    c: *mut T,
    a: *const T,
    ars: isize,
    acs: isize,
    b: *const T,
    brs: isize,
    bcs: isize,
) -> bool {
    let max = i32::MAX as usize;
    if m > max || n > max || k > max {
        return false;
    }
    let (Some((ta, lda)), Some((tb, ldb))) = (blas_layout(m, k, ars, acs), blas_layout(k, n, brs, bcs)) else {
        return false;
    };
    let (m, n, k, ldc) = (m as i32, n as i32, k as i32, n.max(1) as i32);
    if T::DTYPE == crate::DType::F32 {
        cblas_sgemm(
            ROW_MAJOR,
            ta,
            tb,
            m,
            n,
            k,
            1.0,
            a as *const f32,
            lda,
            b as *const f32,
            ldb,
            0.0,
            c as *mut f32,
            ldc,
        );
        true
    } else if T::DTYPE == crate::DType::F64 {
        cblas_dgemm(
            ROW_MAJOR,
            ta,
            tb,
            m,
            n,
            k,
            1.0,
            a as *const f64,
            lda,
            b as *const f64,
            ldb,
            0.0,
            c as *mut f64,
            ldc,
        );
        true
    } else {
        false
    }
}
