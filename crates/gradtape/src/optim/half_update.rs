//! Optimizer updates of `f16` and `bf16` variables, a block at a time.
//!
//! Keras 3 updates a half variable in its own dtype, each operation of the
//! rule rounded to the half type (`m += (g - m) · (1 - β₁)` as three half
//! operations), and so do the rules here ([`ElemRule::apply`] over the
//! half types' arithmetic). Done element by element with the `half`
//! crate's operators, every operation converted its operands to `f32` and
//! back through a call (an Adam step on 2^20 `f16` weights took 59 ms,
//! 24x its `f32` step). Here a block of the weight, its slots and the
//! gradient is converted to `f32` at once ([`Half`]'s vectorised
//! conversions), the rule runs on [`Rounded`] values (`f32`s that round
//! every result to the half type with a few branchless integer
//! operations, so the loop vectorises), and the block is converted back:
//! the same operations, each rounded once to the half type as the `half`
//! crate rounds it (an `f32` operation rounded to nearest, ties to even),
//! so the same bits.

use std::marker::PhantomData;
use std::ops::{Add, Div, Mul, Neg, Sub};

use super::kernel::ElemRule;
use crate::kernels::cpu::half_block::{f32_to_bf16_bits, Half};
use crate::kernels::cpu::lockstep;
use crate::kernels::cpu::math::with_simd;
use crate::tensor::{bf16, f16, Float};

/// The arithmetic an update rule uses ([`ElemRule::apply`]): the float
/// element types, and [`Rounded`] values.
pub trait Arith:
    Copy
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    /// `x` in this type (rounded as `Element::from_f64` rounds).
    fn from_f64(x: f64) -> Self;
    /// `0`.
    fn zero() -> Self;
    /// `1`.
    fn one() -> Self;
    /// `√self`.
    fn sqrt(self) -> Self;
    /// The larger (the other where one is NaN).
    fn max(self, o: Self) -> Self;
    /// `|self|`.
    fn abs(self) -> Self;
}

impl<T: Float> Arith for T {
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        <T as crate::tensor::Element>::from_f64(x)
    }
    #[inline(always)]
    fn zero() -> Self {
        <T as num_traits::Zero>::zero()
    }
    #[inline(always)]
    fn one() -> Self {
        <T as num_traits::One>::one()
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        num_traits::Float::sqrt(self)
    }
    #[inline(always)]
    fn max(self, o: Self) -> Self {
        num_traits::Float::max(self, o)
    }
    #[inline(always)]
    fn abs(self) -> Self {
        num_traits::Float::abs(self)
    }
}

/// A half type whose values [`Rounded`] holds.
pub trait RoundTo: Half {
    /// `x` rounded to this type, as `f32` (what `Self::from_f32(x).to_f32()` gives).
    fn round_f32(x: f32) -> f32;
}

impl RoundTo for f16 {
    #[inline(always)]
    fn round_f32(x: f32) -> f32 {
        f32::from_bits(f16_round_bits(x))
    }
}

impl RoundTo for bf16 {
    #[inline(always)]
    fn round_f32(x: f32) -> f32 {
        f32::from_bits(bf16_round_bits(x))
    }
}

/// The bits of `bf16::from_f32(x).to_f32()`: to nearest, ties to even, at
/// 8 significant bits; a NaN quiet.
#[inline(always)]
pub fn bf16_round_bits(x: f32) -> u32 {
    (f32_to_bf16_bits(x) as u32) << 16
}

/// The bits of `f16::from_f32(x).to_f32()` without branches: to nearest,
/// ties to even, at 11 significant bits for normal halves and at
/// multiples of 2^-24 below 2^-14 (the subnormal halves); infinity from
/// 65520 (half-way past the largest half, 65504) on; a NaN quiet, its
/// payload cut to the half's ten bits.
#[inline(always)]
pub fn f16_round_bits(x: f32) -> u32 {
    let b = x.to_bits();
    let (sign, a) = (b & 0x8000_0000, b & 0x7FFF_FFFF);
    let normal = (a + 0x0FFF + ((a >> 13) & 1)) & 0xFFFF_E000;
    // (|x| + 1/2 rounds at the ulp of [1/2, 1), 2^-24; the subtraction is exact)
    let sub = ((f32::from_bits(a) + 0.5) - 0.5).to_bits();
    let r = if a < 0x3880_0000 { sub } else { normal };
    let r = if a >= 0x477F_F000 { 0x7F80_0000 } else { r };
    let r = if a > 0x7F80_0000 {
        (a & 0xFFFF_E000) | 0x0040_0000
    } else {
        r
    };
    sign | r
}

/// An `f32` holding a value of the half type `H`, whose every operation
/// rounds its result to `H` (the `half` crate's arithmetic of `H`).
#[derive(Clone, Copy, PartialEq, PartialOrd, Debug)]
pub struct Rounded<H>(f32, PhantomData<H>);

impl<H: RoundTo> Rounded<H> {
    #[inline(always)]
    fn new(x: f32) -> Self {
        Rounded(H::round_f32(x), PhantomData)
    }
}

macro_rules! rounded_op {
    ($tr:ident, $f:ident, $op:tt) => {
        impl<H: RoundTo> $tr for Rounded<H> {
            type Output = Self;
            #[inline(always)]
            fn $f(self, o: Self) -> Self {
                Self::new(self.0 $op o.0)
            }
        }
    };
}
rounded_op!(Add, add, +);
rounded_op!(Sub, sub, -);
rounded_op!(Mul, mul, *);
rounded_op!(Div, div, /);

impl<H: RoundTo> Neg for Rounded<H> {
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        Rounded(-self.0, PhantomData)
    }
}

impl<H: RoundTo> Arith for Rounded<H> {
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        // (as `Element::from_f64` of the half types: through `f32`)
        Self::new(x as f32)
    }
    #[inline(always)]
    fn zero() -> Self {
        Rounded(0.0, PhantomData)
    }
    #[inline(always)]
    fn one() -> Self {
        Rounded(1.0, PhantomData)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        Self::new(self.0.sqrt())
    }
    #[inline(always)]
    fn max(self, o: Self) -> Self {
        // (the half types' `max`: `self` unless `o` is greater, or `self` is NaN)
        match self.0.partial_cmp(&o.0) {
            None if self.0.is_nan() => o,
            Some(std::cmp::Ordering::Less) => o,
            _ => self,
        }
    }
    #[inline(always)]
    fn abs(self) -> Self {
        Rounded(self.0.abs(), PhantomData)
    }
}

/// Elements per block.
const BLOCK: usize = 256;

/// The update loop of `rule` on half variables (see the module docs): as
/// `kernel::pass`, each block converted to `f32`, updated with
/// [`Rounded`] arithmetic and converted back.
#[inline(never)]
pub(crate) fn pass<H: RoundTo, R: ElemRule<K>, const K: usize>(
    rule: &R,
    decay: Option<(H, H)>,
    w: &mut [H],
    s: &mut [&mut [H]],
    g: &[H],
) {
    let Ok(s) = <&mut [&mut [H]; K]>::try_from(s) else {
        debug_assert!(false, "{K} slots expected");
        return;
    };
    let decay = decay.map(|(wd, lr)| {
        (
            Rounded::<H>(crate::tensor::Element::to_f64(wd) as f32, PhantomData),
            Rounded::<H>(crate::tensor::Element::to_f64(lr) as f32, PhantomData),
        )
    });
    let (mut wf, mut gf) = ([0f32; BLOCK], [0f32; BLOCK]);
    let mut sf = [[0f32; BLOCK]; K];
    let n = w.len().min(g.len());
    for lo in (0..n).step_by(BLOCK) {
        let m = BLOCK.min(n - lo);
        H::to_f32s(&w[lo..lo + m], &mut wf[..m]);
        H::to_f32s(&g[lo..lo + m], &mut gf[..m]);
        for k in 0..K {
            H::to_f32s(&s[k][lo..lo + m], &mut sf[k][..m]);
        }
        with_simd(
            #[inline(always)]
            || {
                for i in 0..m {
                    let mut wv = Rounded::<H>(wf[i], PhantomData);
                    let mut st: [Rounded<H>; K] = lockstep::from_fn(|k| Rounded(sf[k][i], PhantomData));
                    if let Some((wd, lr)) = decay {
                        // Keras: variable.assign_sub(variable * wd * lr)
                        wv = wv - wv * wd * lr;
                    }
                    rule.apply(&mut wv, &mut st, Rounded(gf[i], PhantomData));
                    wf[i] = wv.0;
                    for k in 0..K {
                        sf[k][i] = st[k].0;
                    }
                }
            },
        );
        H::from_f32s(&wf[..m], &mut w[lo..lo + m]);
        for k in 0..K {
            H::from_f32s(&sf[k][..m], &mut s[k][lo..lo + m]);
        }
    }
}

// (the bit-equality of these updates and the element-by-element ones is
// checked in `tests/internals/optim_kernel_bits.rs`, the roundings against
// the `half` crate's in `tests/internals/optim_half_update.rs`)
