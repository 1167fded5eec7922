//! The rotary position embedding's kernel (`ops::nn::rotary`): each row of
//! `d` features, split into halves `x₁`, `x₂`, becomes `[x₁ c − x₂ s,
//! x₂ c + x₁ s]` with the row's position's `c = cos θ`, `s = sin θ` (`d / 2`
//! of each), or with `−s` for the inverse rotation (the transpose: the
//! gradient).
//!
//! The arithmetic is the composite's (`x · cos + concat(−x₂, x₁) · sin`),
//! op by op: a product of each pair, then their sum, each rounded to the
//! element type (for `f16`, `bf16`: computed in `f32` and rounded to the
//! half type after each, as the half elementwise kernels do), so the
//! results are the composite's bits. `x` is read through its strides (the
//! heads of a projection are a permuted view); the output is row-major.

use std::mem::MaybeUninit;

use super::build_rows;
use crate::error::{Error, Result};
use crate::tensor::layout::{self, Layout};
use crate::tensor::{bf16, f16, Buf, Element};

/// An element type the rotation computes in.
pub(crate) trait Rotate: Element {
    /// `(x₁ c − x₂ s, x₂ c + x₁ s)`, each product and the sum rounded to
    /// the type, as the composite's `mul`, `neg` and `add` round.
    fn pair(x1: Self, x2: Self, c: Self, s: Self) -> (Self, Self);
    /// `−s` (exact).
    fn negated(s: Self) -> Self;
}

macro_rules! native {
    ($($t:ty),*) => {$(
        impl Rotate for $t {
            #[inline(always)]
            fn pair(x1: $t, x2: $t, c: $t, s: $t) -> ($t, $t) {
                // (`a + (−b)` is `a − b` in IEEE arithmetic, bit for bit)
                (x1 * c - x2 * s, x2 * c + x1 * s)
            }
            #[inline(always)]
            fn negated(s: $t) -> $t {
                -s
            }
        }
    )*};
}
native!(f32, f64);

macro_rules! half {
    ($($t:ty),*) => {$(
        impl Rotate for $t {
            #[inline(always)]
            fn pair(x1: $t, x2: $t, c: $t, s: $t) -> ($t, $t) {
                // each op in f32 (a product of two halves is exact there),
                // its result rounded to the half type
                let r = <$t>::from_f32;
                let m = |a: $t, b: $t| r(a.to_f32() * b.to_f32());
                let (a, b) = (m(x1, c), m(x2, s));
                let (e, f) = (m(x2, c), m(x1, s));
                (r(a.to_f32() - b.to_f32()), r(e.to_f32() + f.to_f32()))
            }
            #[inline(always)]
            fn negated(s: $t) -> $t {
                -s
            }
        }
    )*};
}
half!(f16, bf16);

/// The rotation of `x` (`buf` read through `layout`, last axis the
/// features, of even size `d`), rows at position `(row / inner) % t`
/// taking row `p` of the tables `cos`, `sin` (`[t, d / 2]`, row-major);
/// with `inverse`, the rotation by `−θ`. Returns the row-major result.
pub(crate) fn rotate<T: Rotate>(
    op: &'static str,
    buf: &[T],
    layout: &Layout,
    (t, inner): (usize, usize),
    cos: &[T],
    sin: &[T],
    inverse: bool,
) -> Result<Buf<T>> {
    let shape = &layout.shape;
    let d = shape.last().copied().unwrap_or(0);
    let h = d / 2;
    let numel = layout.numel();
    let rows = numel.checked_div(d).unwrap_or(0);
    if d % 2 != 0 || cos.len() != t * h || sin.len() != t * h || (rows > 0 && (inner == 0 || rows % (t * inner) != 0)) {
        return Err(Error::invalid(
            op,
            format!(
                "needs an even number of features and tables of [{t}, {}] for {t} positions, got x {:?} and tables of {} and {}",
                h,
                shape.as_slice(),
                cos.len(),
                sin.len()
            ),
        ));
    }
    if !layout.fits_in(buf.len()) {
        return Err(Error::invalid(op, "the view does not fit its buffer".to_string()));
    }
    let strides = [layout.strides.clone()];
    let sx = layout.strides.last().copied().unwrap_or(1);
    build_rows::<T>(op, rows, d, |rs, out: &mut [MaybeUninit<T>]| {
        let first = rs.start;
        // (AVX2 or AVX-512 code for f32 and f64, where the CPU has them)
        super::math::with_simd_for::<T, T, _>(
            #[inline(always)]
            || {
                layout::for_rows(shape, &strides, [layout.offset], rs, |row, [base]| {
                    let p = (row / inner) % t;
                    let (c, s) = (&cos[p * h..(p + 1) * h], &sin[p * h..(p + 1) * h]);
                    let o = &mut out[(row - first) * d..(row - first + 1) * d];
                    let (o1, o2) = o.split_at_mut(h);
                    let base = base as usize;
                    if sx == 1 {
                        let x = &buf[base..base + d];
                        row_pair(&x[..h], &x[h..], c, s, o1, o2, inverse);
                    } else {
                        for j in 0..h {
                            let at = |k: usize| buf[(base as isize + k as isize * sx) as usize];
                            let sj = if inverse { T::negated(s[j]) } else { s[j] };
                            let (a, b) = T::pair(at(j), at(j + h), c[j], sj);
                            o1[j].write(a);
                            o2[j].write(b);
                        }
                    }
                })
            },
        )
    })
}

/// One row whose halves are contiguous.
#[inline(always)]
fn row_pair<T: Rotate>(
    x1: &[T],
    x2: &[T],
    c: &[T],
    s: &[T],
    o1: &mut [MaybeUninit<T>],
    o2: &mut [MaybeUninit<T>],
    inverse: bool,
) {
    let h = o1.len();
    let (x1, x2, c, s, o2) = (&x1[..h], &x2[..h], &c[..h], &s[..h], &mut o2[..h]);
    if inverse {
        for j in 0..h {
            let (a, b) = T::pair(x1[j], x2[j], c[j], T::negated(s[j]));
            o1[j].write(a);
            o2[j].write(b);
        }
    } else {
        for j in 0..h {
            let (a, b) = T::pair(x1[j], x2[j], c[j], s[j]);
            o1[j].write(a);
            o2[j].write(b);
        }
    }
}
