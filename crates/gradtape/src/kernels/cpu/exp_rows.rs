//! Exponentials of a row with their sum, for the softmax-like row kernels
//! (attention's scores, the cross-entropy's logits): the shift and scale
//! done on the way into the vectorised exponential ([`exp_slice`]), the
//! sum taken in [`sum_lanes`](super::math::sum_lanes)'s lanes and order as the exponentials are
//! made, or a pass fused after each block while it is in the first-level
//! cache.

use super::lockstep::{chunks, chunks_mut, each, zip};
use super::math::{add_to_lanes, exp_slice, lanes_total, max_lanes};

/// `x[i] = e^x[i]` and their sum: [`exp_affine`] with `a = 1`, `b = 0`
/// (`1·x − 0` is `x`, but for `-0`, whose exponential is also 1).
#[inline(always)]
pub(crate) fn exp_in_place<T: crate::tensor::Float>(x: &mut [T]) -> T {
    exp_affine(x, T::one(), T::zero())
}

/// `x[i] = e^(a·x[i] − b)` and their sum (as [`sum_lanes`](super::math::sum_lanes) of the
/// results): [`exp_in_place`] with the shift and scale of a softmax's
/// scores done on the way into the exponential (`f32`: in the block
/// copy that [`exp_slice`] reads), where separate passes over the row
/// cost about as much as the exponential. With `a = 1` the argument is
/// `x − b` exactly. The sum is taken block by block as the exponentials
/// are made ([`exp_affine_each`]), in [`sum_lanes`](super::math::sum_lanes)'s lanes and order:
/// the same bits as summing the row after.
#[inline(always)]
pub(crate) fn exp_affine<T: crate::tensor::Float>(x: &mut [T], a: T, b: T) -> T {
    let mut acc = [T::zero(); 8];
    // (every block but the last is whole lanes: each element goes to the
    // lane of its index mod 8, as in one pass over the row)
    exp_affine_each(x, a, b, |_, c| add_to_lanes(&mut acc, c));
    lanes_total(&acc)
}

/// `x[i] = e^(a·x[i] − b)` as [`exp_affine`] (the same values), block
/// by block of [`AFFINE_BLOCK`] elements, each handed to `then` with its
/// start in `x` as soon as it is made (while it is in the first-level
/// cache, or in registers): a pass over the results fused with the
/// exponentials' (attention's `dS = P ∘ (dP − D)`), without a sum.
#[inline(always)]
pub(crate) fn exp_affine_each<T: crate::tensor::Float>(x: &mut [T], a: T, b: T, mut then: impl FnMut(usize, &mut [T])) {
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        // SAFETY: T is f32 (same layout).
        let xf = unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast::<f32>(), x.len()) };
        let (af, bf) = (a.to_f64() as f32, b.to_f64() as f32);
        let mut tmp = [0.0f32; AFFINE_BLOCK];
        for (i, c) in zip(0.., chunks_mut(xf, AFFINE_BLOCK)) {
            let t = &mut tmp[..c.len()];
            for (t, &v) in zip(&mut *t, &*c) {
                *t = af * v - bf;
            }
            exp_slice(t, c);
            // SAFETY: T is f32 (same layout).
            let ct = unsafe { std::slice::from_raw_parts_mut(c.as_mut_ptr().cast::<T>(), c.len()) };
            then(i * AFFINE_BLOCK, ct);
        }
    } else {
        for (i, c) in zip(0.., chunks_mut(x, AFFINE_BLOCK)) {
            for v in c.iter_mut() {
                *v = (a * *v - b).exp();
            }
            then(i * AFFINE_BLOCK, c);
        }
    }
}

/// `(m, s)` of a row `x`: its largest element that is not NaN
/// ([`max_lanes`]) and `s = Σ e^(x − m)`, the same bits as exponentiating
/// the shifted row into a buffer ([`exp_affine`] with `a = 1`, `b = m`)
/// and summing it with [`sum_lanes`](super::math::sum_lanes) (each exponential is added to the
/// lane of its index modulo 8, in order, as there), streamed through a
/// block on the stack: the row's log-sum-exp `m + ln s` with one
/// exponential per element and nothing written.
#[inline(always)]
pub(crate) fn max_exp_sum<T: crate::tensor::Float>(x: &[T]) -> (T, T) {
    const BLOCK: usize = 64;
    let m = max_lanes(x);
    let mut acc = [T::zero(); 8];
    let mut e = [T::zero(); BLOCK];
    for c in each(chunks(x, BLOCK)) {
        let e = &mut e[..c.len()];
        if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
            // SAFETY: T is f32 (same layout).
            let (cf, ef, mf) = unsafe {
                (
                    std::slice::from_raw_parts(c.as_ptr().cast::<f32>(), c.len()),
                    std::slice::from_raw_parts_mut(e.as_mut_ptr().cast::<f32>(), c.len()),
                    m.to_f64() as f32,
                )
            };
            let mut t = [0.0f32; BLOCK];
            let t = &mut t[..cf.len()];
            for (t, &v) in zip(&mut *t, cf) {
                *t = 1.0 * v - mf;
            }
            exp_slice(t, ef);
        } else {
            for (e, &v) in zip(&mut *e, c) {
                *e = (T::one() * v - m).exp();
            }
        }
        add_to_lanes(&mut acc, e);
    }
    (m, lanes_total(&acc))
}

/// The elements [`exp_affine_each`] makes at a time.
const AFFINE_BLOCK: usize = 64;
