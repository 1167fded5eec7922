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
        f32::from_bits((f32_to_bf16_bits(x) as u32) << 16)
    }
}

/// The bits of `f16::from_f32(x).to_f32()` without branches: to nearest,
/// ties to even, at 11 significant bits for normal halves and at
/// multiples of 2^-24 below 2^-14 (the subnormal halves); infinity from
/// 65520 (half-way past the largest half, 65504) on; a NaN quiet, its
/// payload cut to the half's ten bits.
#[inline(always)]
pub(crate) fn f16_round_bits(x: f32) -> u32 {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::optim::*;
    use crate::{DType, Tensor, Variable};

    thread_local! {
        /// Runs the half updates element by element (the half types'
        /// own arithmetic), as before the blocks: the reference.
        pub(crate) static ELEMENTWISE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// Weights or gradients of `n` elements with the special values among
    /// them: signed zeros, subnormals, the largest finite f16, infinities,
    /// NaN, and ordinary values of several scales.
    pub(crate) fn values(n: usize, seed: u64, dt: DType) -> Tensor {
        let special = [
            0.0,
            -0.0,
            6e-8,
            -3e-7,
            1e-5,
            65504.0,
            -65504.0,
            f64::INFINITY,
            f64::NAN,
            1.0,
            -2.0,
        ];
        let v: Vec<f64> = (0..n as u64)
            .map(|i| match (i * 7 + seed) % 13 {
                k @ 0..=3 => special[((i / 13 + seed + k) % special.len() as u64) as usize],
                k => ((i as f64 * 0.731 + seed as f64).sin()) * 10f64.powi(k as i32 - 9),
            })
            .collect();
        Tensor::from_vec(v, &[n]).unwrap().cast(dt).unwrap()
    }

    /// One `apply_gradients` call of an optimizer, boxed.
    pub(crate) type Apply = Box<dyn FnMut(Vec<(Option<Tensor>, Variable)>) -> crate::Result<()>>;

    /// Every optimizer rule in its main configurations, each made fresh by
    /// its function: the cases of the tests that compare update loops.
    pub(crate) fn every_optimizer() -> Vec<(&'static str, fn() -> Apply)> {
        fn boxed<O: Optimizer + 'static>(mut o: O) -> Apply {
            Box::new(move |pairs| o.apply_gradients(pairs.iter().map(|(g, v)| (g.clone(), v))))
        }
        vec![
            ("adam", || boxed(Adam::new(1e-3))),
            ("adam amsgrad", || boxed(Adam::new(1e-3).amsgrad(true))),
            ("adamw", || boxed(AdamW::new(1e-3).weight_decay(0.01))),
            ("sgd", || boxed(Sgd::new(0.1))),
            ("sgd momentum", || boxed(Sgd::new(0.1).momentum(0.9).unwrap())),
            ("sgd nesterov", || {
                boxed(Sgd::new(0.1).momentum(0.9).unwrap().nesterov(true))
            }),
            ("sgd momentum wd", || {
                boxed(Sgd::new(0.1).momentum(0.9).unwrap().weight_decay(0.1))
            }),
            ("rmsprop", || boxed(RmsProp::new(1e-2))),
            ("rmsprop centered momentum", || {
                boxed(RmsProp::new(1e-2).centered(true).momentum(0.5).unwrap())
            }),
            ("adagrad", || boxed(Adagrad::new(1e-2))),
            ("adamax", || boxed(Adamax::new(1e-3))),
            ("nadam", || boxed(Nadam::new(1e-3))),
            ("lion", || boxed(Lion::new(1e-3))),
            ("adadelta", || boxed(Adadelta::new(1.0))),
        ]
    }

    /// Every optimizer's update of variables of each of `dtypes`, as the
    /// library runs it (in blocks, a large variable spread over the
    /// threads), gives the bits of the element-by-element update on one
    /// thread (`ELEMENTWISE`: for the half types, Keras 3's computation in
    /// the variable's dtype): over three steps (the slots' values carried),
    /// on special values, for variables of each length in `sizes`.
    pub(crate) fn updates_are_the_elementwise_bits(dtypes: &[DType], sizes: &[usize]) {
        let makes = every_optimizer();
        for &dt in dtypes {
            for &n in sizes {
                for (name, make) in &makes {
                    let run = |elementwise: bool| {
                        ELEMENTWISE.with(|c| c.set(elementwise));
                        let v = Variable::new(values(n, 1, dt));
                        let mut opt = make();
                        for step in 0..3 {
                            opt(vec![(Some(values(n, 2 + step, dt)), v.clone())]).unwrap();
                        }
                        ELEMENTWISE.with(|c| c.set(false));
                        v.read().to_vec_f64()
                    };
                    let (got, want) = (run(false), run(true));
                    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                            "{dt:?} {name} n={n} [{i}]: blocks {a} vs elementwise {b}"
                        );
                    }
                    // (the updates did something: most weights moved)
                    let before = values(n, 1, dt).to_vec_f64();
                    let moved = got
                        .iter()
                        .zip(&before)
                        .filter(|(a, b)| a.to_bits() != b.to_bits())
                        .count();
                    assert!(moved > n * 3 / 7, "{dt:?} {name} n={n}: {moved} moved");
                }
            }
        }
    }

    /// Half variables: a length past two blocks and a tail, and one spread
    /// over two and a half tasks with a tail.
    #[test]
    fn half_updates_in_blocks_are_the_elementwise_bits() {
        let spread = 2 * super::super::kernel::TASK + super::super::kernel::TASK / 2 + 77;
        updates_are_the_elementwise_bits(&[DType::F16, DType::BF16], &[700, spread]);
    }

    /// `f16_round_bits` against the `half` crate's conversion there and
    /// back: around every rounding boundary of every exponent (the low 13
    /// bits at and beside the tie, and the ends), and every 7th `f32`.
    #[test]
    fn f16_rounding_is_the_half_crates() {
        let check = |b: u32| {
            let x = f32::from_bits(b);
            let want = f16::from_f32(x).to_f32().to_bits();
            assert_eq!(f16_round_bits(x), want, "{b:#010x} ({x:e})");
        };
        for hi in 0..(1u32 << 19) {
            for lo in [0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF] {
                check(hi << 13 | lo);
            }
        }
        for b in (0..=u32::MAX).step_by(7) {
            check(b);
        }
    }

    /// The bf16 rounding against the crate's conversion (every 3rd `f32`).
    #[test]
    fn bf16_rounding_is_the_half_crates() {
        for b in (0..=u32::MAX).step_by(3) {
            let x = f32::from_bits(b);
            let want = bf16::from_f32(x).to_f32().to_bits();
            assert_eq!(<bf16 as RoundTo>::round_f32(x).to_bits(), want, "{b:#010x}");
        }
    }
}
