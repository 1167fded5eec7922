//! The exact GELU's slope made with its value, for a one-shot tape.
//!
//! Eagerly, `gelu` computes `x·Φ(x)` (one `erf` per element), and its rule,
//! run by the backward pass, computes the slope `Φ(x) + x·φ(x)` from `x`
//! (the same `erf` again, and an exponential) and multiplies the cotangent
//! by it. A traced step computes both in the forward pass, from one `erf`
//! (`Pair::GeluAndGrad`, the same bits as each op), and keeps the slope
//! instead of `x`. The `erf` is most of either op's cost (about 1 ns an
//! element of a 1M-element `f32` activation, on one thread, against 0.2 for
//! the multiply), so the eager training step of a GELU model paid for one
//! `erf` pass per activation more than its traced step.
//!
//! [`gelu`] does the same eagerly when the slope is sure to be all the rule
//! needs: an `f32` host tensor watched by the one tape active on this
//! thread, a one-shot tape of the user's, with no trace or forward
//! accumulator listening (`dispatch::one_shot_tape_alone_watches`). The rule
//! keeps the slope, and `x` only weakly (the memory kept is the same: the
//! slope in place of `x`); it multiplies the cotangent by the slope, the
//! bits of the usual rule.
//!
//! **Higher derivatives.** A tape that records the backward pass (for a
//! second derivative) was entered after the op ran: it cannot have
//! recorded how `x` was made, so `x` is a leaf to it, and the slope's
//! dependence on `x` matters to it only if it watches `x` itself, which the
//! user can do only while holding `x`. So while anything records the rule's
//! ops and `x` still lives, the rule computes the slope from `x` with
//! differentiable ops, as the usual rule does; once `x` is gone, the slope
//! is a constant to every tape there is, as it is in the usual rule to a
//! tape that does not watch `x`.

use super::table::{Lane, Pair, RUN};
use crate::dispatch::vjp;
use crate::error::Result;
use crate::kernels::cpu::lockstep::{chunks, chunks_mut, zip3};
use crate::ops::desc::Unary;
use crate::ops::{bind, grads};
use crate::tensor::{DType, Tensor};

/// `gelu(x)` (exact) with its slope kept for the rule, when the module's
/// conditions hold; `None` otherwise (the caller takes the usual path).
pub(crate) fn gelu(x: &Tensor) -> Option<Result<Tensor>> {
    if x.dtype() != DType::F32
        || x.device_buffer().is_some()
        || x.numel() <= 2
        || !crate::dispatch::one_shot_tape_alone_watches(x.id())
    {
        return None;
    }
    KEPT.with(|c| c.set(c.get() + 1));
    Some(with_slope(x))
}

fn with_slope(x: &Tensor) -> Result<Tensor> {
    let (y, slope) = crate::kernels::cpu::elementwise::map_slices2::<f32>("gelu", x, |s, a, b| {
        pair_run(Pair::GeluAndGrad, s, a, b)
    })?;
    let weak = x.downgrade();
    Ok(bind(Unary::Gelu, &[x], y, move |_| {
        vjp(move |g, _| {
            let d = match crate::dispatch::listening().then(|| weak.upgrade()).flatten() {
                // (a recorded pass: the slope as a function of `x`)
                Some(x) => x.gelu_grad()?,
                None => slope.clone(),
            };
            Ok(grads![Some(g[0].mul(&d)?)])
        })
    }))
}

/// [`Pair::run`] over runs of at most [`RUN`] elements, compiled for the
/// CPU's widest vector extension (as `table::unary_run`).
#[inline(never)]
fn pair_run<T: Lane>(pair: Pair, x: &[T], a: &mut [T], b: &mut [T]) {
    crate::kernels::cpu::math::with_simd(
        #[inline(always)]
        || {
            for (x, a, b) in zip3(chunks(x, RUN), chunks_mut(a, RUN), chunks_mut(b, RUN)) {
                pair.run(x, a, b)
            }
        },
    )
}

thread_local! {
    /// GELUs on this thread that kept their slope (for the tests).
    static KEPT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many exact GELUs on this thread kept their slope for a one-shot
/// tape's rule (see the module's docs).
///
/// ```
/// use gradtape::{GradientTape, Tensor};
/// use gradtape::__internals::ops::math::gelu_slope::slopes_kept;
/// let x = Tensor::vector(&[0.5f32, -1.0, 2.0]);
/// let before = slopes_kept();
/// let tape = GradientTape::new();
/// let y = tape.record(|| { tape.watch(&x); x.gelu(false)?.sum_all() })?;
/// assert_eq!(slopes_kept(), before + 1);
/// // d/dx gelu(x) at 0: 1/2
/// let g = tape.gradient(&y, &x)?.unwrap().to_vec::<f32>()?;
/// assert!((g[0] - 0.8674).abs() < 1e-3);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn slopes_kept() -> usize {
    KEPT.with(std::cell::Cell::get)
}
