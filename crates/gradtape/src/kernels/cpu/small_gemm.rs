//! Small matrix products on one thread: the blocks of fused attention
//! ([`attention_gemm`](super::attention_gemm)) with heads 8 to 63 wide,
//! whose products are a block of at most 64 query rows against the keys,
//! the head width or the block's keys or rows their shared dimension.
//!
//! At those sizes the general kernels spend much of a product outside its
//! arithmetic (the `gemm` crate packs both operands in buffers of its own
//! and dispatches per call), which is why the online kernel, one query row
//! at a time, was the faster of two slow choices for heads narrower than
//! 64. Here `B` is copied once into a reused buffer (rows of `n` rounded up
//! to the tile width, zero-filled, so every tile is whole), and a tile of
//! `R` rows by `W` columns of the output stays in registers over the whole
//! shared dimension: per step, `W` values of `B`, one of `A` per row, and
//! `R·W` fused multiply-adds. `A` is read where it lies, with any strides
//! (the transposes of the backward pass are strides).
//!
//! The tiles are plain array code that LLVM vectorises in a function
//! compiled for AVX2 with FMA: 4 rows by 16 `f32` (or 8 `f64`), eight
//! vector registers of accumulators. CPUs without those, and CPUs with
//! AVX-512 (where `f32` products have [`sgemm`](super::sgemm)), keep the
//! general kernels ([`suits`]).

use std::sync::OnceLock;

use super::lockstep::{copy, zip};
use crate::tensor::Float;

/// Rows of a register tile.
const R: usize = 4;

/// Whether this CPU runs [`product`]: AVX2 with FMA, without AVX-512.
pub(crate) fn suits() -> bool {
    static S: OnceLock<bool> = OnceLock::new();
    *S.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("fma")
                && !std::is_x86_feature_detected!("avx512f")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// `dst (m×n) = [dst +] a (m×k) · b (k×n)`: `dst`'s rows `d_rs` apart
/// (unit column stride), `a` and `b` with any (row, column) strides;
/// `pack` is scratch, reused between calls.
///
/// # Safety
/// [`suits`] must hold. The pointers and strides must describe matrices
/// inside live buffers, and `dst` must not overlap `a` or `b`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn product<T: Float>(
    (m, n, k): (usize, usize, usize),
    dst: *mut T,
    d_rs: usize,
    acc: bool,
    a: *const T,
    a_strides: (usize, usize),
    b: *const T,
    b_strides: (usize, usize),
    pack: &mut Vec<T>,
) {
    if m == 0 || n == 0 {
        return;
    }
    // SAFETY: the caller's contract (the CPU has AVX2 and FMA, by `suits`).
    unsafe {
        if size_of::<T>() == 4 {
            tiles::<T, 16>((m, n, k), dst, d_rs, acc, a, a_strides, b, b_strides, pack)
        } else {
            tiles::<T, 8>((m, n, k), dst, d_rs, acc, a, a_strides, b, b_strides, pack)
        }
    }
}

/// [`product`] with tiles `W` wide.
#[allow(clippy::too_many_arguments)]
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2,fma"))]
unsafe fn tiles<T: Float, const W: usize>(
    (m, n, k): (usize, usize, usize),
    dst: *mut T,
    d_rs: usize,
    acc: bool,
    a: *const T,
    (a_rs, a_cs): (usize, usize),
    b: *const T,
    (b_rs, b_cs): (usize, usize),
    pack: &mut Vec<T>,
) {
    // B, rows padded to whole tiles
    let np = n.div_ceil(W) * W;
    pack.clear();
    pack.resize(k * np, T::zero());
    // SAFETY (the copies): elements (p, j) of `b`, p < k, j < n (the
    // caller's contract).
    if b_cs == 1 {
        // rows of `b` as they lie
        for p in 0..k {
            let src = unsafe { std::slice::from_raw_parts(b.add(p * b_rs), n) };
            copy(&mut pack[p * np..][..n], src);
        }
    } else {
        // a transposed `b` (its columns lie in rows): read along them
        for j in 0..n {
            for p in 0..k {
                pack[p * np + j] = unsafe { *b.add(p * b_rs + j * b_cs) };
            }
        }
    }
    let ops = Operands {
        k,
        a,
        a_strides: (a_rs, a_cs),
        b: pack.as_ptr(),
        np,
        dst,
        d_rs,
        n,
        acc,
    };
    // SAFETY (the row groups): rows i..i + R (or i) of `a` and `dst` lie in
    // the caller's matrices; `pack` holds k rows of np.
    let mut i = 0;
    while i + R <= m {
        unsafe { ops.rows::<R, W>(i) };
        i += R;
    }
    while i < m {
        unsafe { ops.rows::<1, W>(i) };
        i += 1;
    }
}

/// A product's operands as [`tiles`] runs it (`b` packed, rows `np`
/// apart).
struct Operands<T> {
    k: usize,
    a: *const T,
    a_strides: (usize, usize),
    b: *const T,
    np: usize,
    dst: *mut T,
    d_rs: usize,
    n: usize,
    acc: bool,
}

impl<T: Float> Operands<T> {
    /// Rows `i..i + ROWS` of the output, a tile `W` wide at a time.
    ///
    /// # Safety
    /// Those rows lie in `a` and `dst`.
    #[inline(always)]
    unsafe fn rows<const ROWS: usize, const W: usize>(&self, i: usize) {
        for jt in (0..self.n).step_by(W) {
            // SAFETY: row i of `a` and `dst`, column tile jt of `b` and
            // `dst` (the caller's contract and `tiles`').
            unsafe {
                tile::<T, ROWS, W>(
                    self.k,
                    self.a.add(i * self.a_strides.0),
                    self.a_strides,
                    self.b.add(jt),
                    self.np,
                    self.dst.add(i * self.d_rs + jt),
                    self.d_rs,
                    (self.n - jt).min(W),
                    self.acc,
                )
            }
        }
    }
}

/// One tile: `ROWS` rows of `a` (from `a`) by `W` packed columns of `b`
/// (from `b`, rows `np` apart) into `ROWS × w` of `c` (rows `c_rs` apart).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn tile<T: Float, const ROWS: usize, const W: usize>(
    k: usize,
    a: *const T,
    (a_rs, a_cs): (usize, usize),
    b: *const T,
    np: usize,
    c: *mut T,
    c_rs: usize,
    w: usize,
    acc: bool,
) {
    let mut t = [[T::zero(); W]; ROWS];
    for p in 0..k {
        // SAFETY: `W` packed values of row p, and `a`'s element (r, p).
        let bv: [T; W] = unsafe { b.add(p * np).cast::<[T; W]>().read_unaligned() };
        for (r, tr) in zip(0.., &mut t[..]) {
            let av = unsafe { *a.add(r * a_rs + p * a_cs) };
            for (x, &y) in zip(&mut tr[..], &bv) {
                *x = av.mul_add(y, *x);
            }
        }
    }
    // (the tile leaves its registers once: written back through a copy, as
    // indexing it by the run-time width `w` kept it in memory, stored at
    // every step)
    let t = std::hint::black_box(t);
    for (r, tr) in zip(0.., &t[..]) {
        for (j, &x) in zip(0.., &tr[..w][..]) {
            // SAFETY: element (r, j) of the tile, inside `c`.
            unsafe {
                let d = c.add(r * c_rs + j);
                *d = if acc { *d + x } else { x };
            }
        }
    }
}
