//! Narrow `f32` products (few columns): `a` (m×k) times `b` (k×n) for `n` up to
//! [`MAX_N`], such as a classifier's logits (`[batch, features] @
//! [features, 10]`).
//!
//! They went to the `gemm` crate before (the blocked [`super::sgemm`]
//! packs `a`, which costs as much as the arithmetic when `n` is a vector
//! or two wide), which allocates two buffers on every call: the last
//! allocations of a compiled training step. Here `b` is copied, [`KB`]
//! rows at a time, into a buffer on the stack, its rows padded to 8, 16 or
//! 32 lanes, and four rows of the output (two of 32 lanes on AVX2) are
//! summed at a time in
//! fixed-width registers, reading `a` in place: nothing is allocated.
//!
//! Each element is `Σ_p a[i,p] b[p,j]`, added in order of `p` with a
//! rounded product and a rounded sum per term (no fused multiply-add),
//! starting from zero (or from `dst` when accumulating): the same bits in
//! every build, for every layout of the operands and every split of the
//! rows. (Between blocks of `b` the running sums wait in `dst`, as `f32`:
//! no change to their bits.)

use std::mem::MaybeUninit;

use super::lockstep::zip;
use super::math::with_simd;

/// The widest product this kernel takes.
pub(crate) const MAX_N: usize = 32;

/// The narrowest product its callers give it (narrower ones fill too
/// little of a vector; it computes them right all the same).
pub(crate) const MIN_N: usize = 8;

/// Rows of `b` copied at a time (`KB × MAX_N` floats: 32 KiB of stack).
const KB: usize = 256;

/// `dst = (acc ? dst : 0) + a @ b`, for `1 <= n <= MAX_N`, on strided
/// matrices (`*_rs`/`*_cs`: row and column strides; `dst`'s columns are
/// adjacent).
///
/// # Safety
/// The pointers and strides must describe matrices inside live buffers,
/// and `dst` (m×n, row stride `d_rs >= n`) must not overlap `a` or `b`;
/// without `acc`, `dst` may be uninitialised.
#[allow(clippy::too_many_arguments)]
pub unsafe fn matmul(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    d_rs: isize,
    acc: bool,
    a: *const f32,
    (a_rs, a_cs): (isize, isize),
    b: *const f32,
    (b_rs, b_cs): (isize, isize),
) {
    unsafe {
        debug_assert!((1..=MAX_N).contains(&n));
        let mut x = Mats {
            m,
            n,
            dst,
            d_rs,
            acc,
            a,
            a_rs,
            a_cs,
        };
        // (uninitialised: each block writes the rows it reads first; zeroed,
        // its 32 KiB cost a product of 4×16 by 16×16 more than its
        // arithmetic, a tenth of a small RNN's step)
        let mut packed = [MaybeUninit::<f32>::uninit(); KB * MAX_N];
        let mut p0 = 0;
        // (one pass with zero rows of `b` when k = 0: dst = acc ? dst : 0)
        loop {
            let kl = KB.min(k - p0);
            let bk = b.offset(p0 as isize * b_rs);
            // SAFETY: the caller's guarantees; rows p0..p0 + kl of b and
            // columns p0..p0 + kl of a
            match n {
                0..=8 => run::<8, 4>(x, &mut packed, kl, bk, b_rs, b_cs),
                9..=16 => run::<16, 4>(x, &mut packed, kl, bk, b_rs, b_cs),
                // (four rows of 32 sums are 16 AVX2 registers, all it has:
                // the compiler then kept the sums on the stack, element by
                // element, a sixth of the speed; two rows fit)
                _ if super::math::wide_vectors() => run::<32, 4>(x, &mut packed, kl, bk, b_rs, b_cs),
                _ => run::<32, 2>(x, &mut packed, kl, bk, b_rs, b_cs),
            }
            p0 += kl;
            if p0 >= k {
                break;
            }
            // the next block adds to the running sums
            x.acc = true;
            x.a = x.a.offset(kl as isize * a_cs);
        }
    }
}

/// The output and `a`, as [`matmul`] takes them.
#[derive(Clone, Copy)]
struct Mats {
    m: usize,
    n: usize,
    dst: *mut f32,
    d_rs: isize,
    acc: bool,
    a: *const f32,
    a_rs: isize,
    a_cs: isize,
}

/// `dst (+)= a[:, ..kl] @ b[..kl, :]` with rows of `W` lanes, `R` rows
/// at a time.
unsafe fn run<const W: usize, const R: usize>(
    x: Mats,
    packed: &mut [MaybeUninit<f32>; KB * MAX_N],
    kl: usize,
    b: *const f32,
    b_rs: isize,
    b_cs: isize,
) {
    let packed = &mut packed[..kl * W];
    for (p, row) in packed.chunks_exact_mut(W).enumerate() {
        for (j, v) in zip(0.., &mut row[..]) {
            // SAFETY: (p, j) lies in b for j < n
            v.write(if j < x.n {
                unsafe { *b.offset(p as isize * b_rs + j as isize * b_cs) }
            } else {
                0.0
            });
        }
    }
    // SAFETY: every element of `packed` was written just above
    let packed: &[f32] = unsafe { std::slice::from_raw_parts(packed.as_ptr().cast::<f32>(), packed.len()) };
    with_simd(
        #[inline(always)]
        || {
            let mut i = 0;
            while i + R <= x.m {
                // SAFETY: rows i..i + R lie in a and dst
                unsafe { rows::<W, R>(x, packed, i) };
                i += R;
            }
            while i < x.m {
                // SAFETY: row i lies in a and dst
                unsafe { rows::<W, 1>(x, packed, i) };
                i += 1;
            }
        },
    )
}

/// Output rows `i0..i0 + R`.
#[inline(always)]
unsafe fn rows<const W: usize, const R: usize>(x: Mats, packed: &[f32], i0: usize) {
    // (the sums move to and from memory through whole-row copies: indexed
    // by the run-time width `n`, the sums themselves would live in memory,
    // element by element, and the loop below would not be vectorised)
    let mut s = [[0.0f32; W]; R];
    if x.acc {
        for (r, sr) in zip(0.., &mut s[..]) {
            let mut t = [0.0f32; W];
            for (j, v) in t.iter_mut().enumerate().take(x.n) {
                // SAFETY: (i0 + r, j) lies in dst, initialised when accumulating
                *v = unsafe { *x.dst.offset((i0 + r) as isize * x.d_rs + j as isize) };
            }
            *sr = t;
        }
    }
    // (index loops over the arrays, of constant trip counts, which keep
    // `s` in registers whatever the build inlines; see `lockstep`)
    #[allow(clippy::needless_range_loop)]
    for p in 0..packed.len() / W {
        let Ok(bp) = <&[f32; W]>::try_from(&packed[p * W..(p + 1) * W]) else {
            unreachable!("a whole row")
        };
        for r in 0..R {
            // SAFETY: (i0 + r, p) lies in a
            let av = unsafe { *x.a.offset((i0 + r) as isize * x.a_rs + p as isize * x.a_cs) };
            for j in 0..W {
                s[r][j] += av * bp[j];
            }
        }
    }
    for (r, sr) in zip(0.., &s[..]) {
        let t: [f32; W] = *sr;
        for (j, &v) in t.iter().enumerate().take(x.n) {
            // SAFETY: (i0 + r, j) lies in dst
            unsafe { *x.dst.offset((i0 + r) as isize * x.d_rs + j as isize) = v };
        }
    }
}
