//! The referees of [`super`]: when the traced copy and the eager one
//! differ beyond the tolerance, whether the difference is the training's
//! own rounding: the training's spread from moved initial weights, the
//! `f64` copy (with the training's `f32` noise in a half type), and the
//! traced step replayed eagerly from the traced copy's own state. The
//! tests at the end are cases the campaigns found, each a difference of
//! rounding that a referee here explains, and the sabotage it must still
//! report.

use gradtape::{DType, Result, Tensor, Variable};

use super::optimizers::LrSpec;
use super::random_programs_referees::{differs, rounding};
use super::{draw, run_case, Case, Ran, Sabotage, Twin};

/// The comparison's tolerance, of a tensor's scale.
pub(super) fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 2e-5,
        DType::F16 => 4.0 * (-11f64).exp2(),
        _ => 4.0 * (-8f64).exp2(),
    }
}

/// The training's own condition, element by element: fresh eager copies
/// trained to step `upto`, the first as drawn, the others from initial
/// weights each moved by a few units of roundoff of itself (by one
/// factor per variable, `1 ± k·u`); each copy's loss then its state.
pub(super) fn spread(case: &Case, batches: &[Vec<Tensor>], upto: usize) -> Option<Vec<Vec<Tensor>>> {
    // (in a half type one or two ulps, of one sign or the other: more
    // would license a wrong weight, a copy moved by 5% in f16)
    let (u, k): (f64, &[f64]) = match case.dtype {
        DType::F64 => ((-51f64).exp2(), &[1.0, -2.0, 3.0, -1.0, 2.0]),
        DType::F32 => ((-23f64).exp2(), &[1.0, -2.0, 3.0, -1.0, 2.0]),
        DType::F16 => ((-11f64).exp2(), &[1.0, -1.0]),
        _ => ((-8f64).exp2(), &[1.0, -1.0]),
    };
    let run = |by: Option<f64>| -> Result<Vec<Tensor>> {
        let c = Twin::new(case, case.dtype)?;
        if let Some(by) = by {
            for (i, v) in c.model.variables().iter().enumerate() {
                v.assign(&v.read().mul_scalar(1.0 + k[i % k.len()] * by)?)?;
            }
        }
        let mut loss = None;
        for (s, batch) in batches.iter().enumerate().take(upto + 1) {
            if let Some((at, lr)) = case.set_lr
                && at == s
            {
                c.set_learning_rate(lr)?;
            }
            loss = Some(c.step(case, batch)?);
        }
        let mut all = vec![loss.expect("a step")];
        all.extend(c.state().iter().map(Variable::read));
        Ok(all)
    };
    [
        None,
        Some(u),
        Some(-2.0 * u),
        Some(if k.len() == 2 { 2.0 * u } else { 4.0 * u }),
    ]
    .into_iter()
    .map(|by| run(by).ok())
    .collect()
}

/// Whether every element where `got` and `want` differ beyond `tol` is
/// one that the training itself moves that much: within `factor` times as far
/// as the copies of [`spread`] from moved initial weights land from the
/// unmoved one (`runs[0]`). A gradient element zero up to rounding that
/// Adam's or RMSprop's first step divides by its own size, an element
/// whose squared-gradient average is still tiny when a larger gradient
/// arrives (seed 5802's case 2958: RMSprop, `1e-11` apart after six
/// steps): another order of a sum moves such an element as a move of the
/// inputs does. A wrong update moves elements that no nearby start does.
pub(super) fn within_spread(got: &Tensor, want: &Tensor, runs: &[Tensor], tol: f64, factor: f64) -> bool {
    if got.shape() != want.shape() || runs.iter().any(|r| r.shape() != want.shape()) {
        return false;
    }
    let (g, w) = (got.to_vec_f64(), want.to_vec_f64());
    let r: Vec<Vec<f64>> = runs.iter().map(Tensor::to_vec_f64).collect();
    let scale = w.iter().filter(|x| x.is_finite()).fold(0.0f64, |m, x| m.max(x.abs()));
    (0..w.len()).all(|i| {
        let (a, b) = (g[i], w[i]);
        if !(a.is_finite() && b.is_finite()) {
            return a.is_nan() == b.is_nan() && (a.is_nan() || a == b);
        }
        let moved = r[1..].iter().fold(0.0f64, |m, x| m.max((x[i] - r[0][i]).abs()));
        (a - b).abs() <= tol * (1.0 + scale) + factor * moved
    })
}

/// Whether `got` (traced) is `want` (eager) up to rounding: within `tol`
/// of the scale, or (`f32`, halves) refereed by the `f64` copy's `exact`
/// (in a half type with the slack of the training's `f32` `noise`, see
/// [`f32_noise`]), or element by element within the training's own spread
/// (`runs`, the same tensor of [`spread`]'s copies, computed when asked).
pub(super) fn agree(
    dtype: DType,
    got: &Tensor,
    want: &Tensor,
    exact: Option<&Tensor>,
    runs: impl FnOnce() -> Option<Vec<Tensor>>,
    noise: impl FnOnce() -> f64,
    replay: impl FnOnce() -> Option<(Tensor, Option<Tensor>)>,
) -> Option<String> {
    let tol = tolerance(dtype);
    let why = differs(got, want, tol)?;
    // (16 times the spread; 4 times in a half type, whose ulps are coarse)
    let factor = if matches!(dtype, DType::F64 | DType::F32) {
        16.0
    } else {
        4.0
    };
    if runs().is_some_and(|r| within_spread(got, want, &r, tol, factor)) {
        return None;
    }
    let noise = match dtype {
        DType::F16 | DType::BF16 => noise(),
        _ => 0.0,
    };
    // (both ways: a wrong eager copy is as much a failure)
    let refereed = |want: &Tensor, exact: Option<&Tensor>| {
        exact.is_some_and(|e| {
            rounding(dtype, got, want, Some(e.clone()), noise) && rounding(dtype, want, got, Some(e.clone()), noise)
        })
    };
    if refereed(want, exact) {
        return None;
    }
    // the step itself, from the traced copy's own state
    match replay() {
        Some((r, x)) if differs(got, &r, tol).is_none() || refereed(&r, x.as_ref()) => None,
        _ => Some(why),
    }
}

/// The traced copy's step `s` replayed eagerly from the traced copy's own
/// state before it (`pre`, every tensor of [`Twin::state`]), in the case's
/// dtype and (below `f64`) in `f64` from that state cast: the loss, then
/// the state after the step, of each. Where the copies' trajectories have
/// parted by rounding (a training that diverges, a ReLU whose input is
/// zero up to rounding taking the other side: seed 6009's case 2301 in
/// `bf16`, where `dense_2`'s pre-activation is -2.8e-4 from the eager
/// copy's weights, +3.2e-4 from the traced copy's, which differ from them
/// by an ulp, and -1.2e-2 in `f64`, one position's term of 0.08 in a bias
/// gradient, kept or not), each traced step must still be the eager step
/// from the same state: a wrong update, a stale read, a slot or counter
/// not advanced all differ from the replay. A copy trained eagerly to step
/// `s` gets the optimizer its slots and every setting, then takes `pre`.
/// `None` at the first step (the eager copy is its replay) or where the
/// state does not fit.
pub(super) fn replay(
    case: &Case,
    batches: &[Vec<Tensor>],
    s: usize,
    pre: &[Tensor],
) -> Option<(Vec<Tensor>, Option<Vec<Tensor>>)> {
    if s == 0 {
        return None;
    }
    let run = |dtype: DType| -> Result<Option<Vec<Tensor>>> {
        let cast = |t: &Tensor| {
            if t.dtype().is_float() {
                t.cast(dtype)
            } else {
                Ok(t.clone())
            }
        };
        let c = Twin::new(case, dtype)?;
        for (t, batch) in batches.iter().enumerate().take(s + 1) {
            if let Some((at, lr)) = case.set_lr
                && at == t
            {
                c.set_learning_rate(lr)?;
            }
            if t == s {
                break;
            }
            c.step(case, &batch.iter().map(cast).collect::<Result<Vec<_>>>()?)?;
        }
        let state = c.state();
        if state.len() != pre.len() || state.iter().zip(pre).any(|(v, p)| v.shape() != p.shape()) {
            return Ok(None);
        }
        for (v, p) in state.iter().zip(pre) {
            v.assign(&p.cast(v.dtype())?)?;
        }
        let loss = c.step(case, &batches[s].iter().map(cast).collect::<Result<Vec<_>>>()?)?;
        let mut all = vec![loss];
        all.extend(c.state().iter().map(Variable::read));
        Ok(Some(all))
    };
    let here = run(case.dtype).ok()??;
    let exact = match case.dtype {
        DType::F64 => None,
        _ => run(DType::F64).ok().flatten(),
    };
    Some((here, exact))
}

/// The training's `f32` noise at step `upto`, tensor by tensor (the loss,
/// then every tensor of [`Twin::state`]), for a half-type case: how far a
/// copy trained eagerly in `f32`, from the case's (rounded) initial
/// weights on its batches, lands from `exact` (the `f64` copy's loss and
/// state at that step), relative to each tensor's scale: what
/// `random_programs`'s referee calls a program's noise, here the
/// trajectory's. A training that diverges amplifies the roundoff of every
/// step: seed 5819's case 572 in `bf16` (Adadelta at rate 2 with
/// `epsilon` 1, SGD at rate 2 while `epsilon` dominates its averages;
/// BatchNorm over four samples) has an `f64` loss of 1.40, 2.19, 1.57 and
/// 265 over its four steps, its `f32` copy drifting from the `f64` one by
/// `3e-7`, then `5e-6`, then `2e-5` of the weights' scale (roundoff
/// amplified 70-fold); at `bf16`'s roundoff (2^-8) nothing is left: the
/// eager and traced copies (bit for bit equal when the same case runs in
/// `f32` or `f64`) both land a third of the scale from the `f64` copy,
/// and as far from each other. [`rounding`] scales such noise to the half
/// type's roundoff; an independent copy measures it, so a wrong traced
/// update cannot widen it. `None` if the `f32` copy fails.
pub(super) fn f32_noise(case: &Case, batches: &[Vec<Tensor>], upto: usize, exact: &[Tensor]) -> Option<Vec<f64>> {
    let run = || -> Result<Vec<Tensor>> {
        let c = Twin::new(case, DType::F32)?;
        let from = Twin::new(case, case.dtype)?;
        for (v, w) in c.model.variables().iter().zip(from.model.variables()) {
            v.assign(&w.read().cast(DType::F32)?)?;
        }
        let mut loss = None;
        for (s, batch) in batches.iter().enumerate().take(upto + 1) {
            if let Some((at, lr)) = case.set_lr
                && at == s
            {
                c.set_learning_rate(lr)?;
            }
            let b32 = batch
                .iter()
                .map(|t| {
                    if t.dtype().is_float() {
                        t.cast(DType::F32)
                    } else {
                        Ok(t.clone())
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            loss = Some(c.step(case, &b32)?);
        }
        let mut all = vec![loss.expect("a step")];
        all.extend(c.state().iter().map(Variable::read));
        Ok(all)
    };
    let got = run().ok()?;
    (got.len() == exact.len()).then(|| {
        got.iter()
            .zip(exact)
            .map(|(a, b)| {
                let (a, b) = (a.to_vec_f64(), b.to_vec_f64());
                let scale = b.iter().filter(|x| x.is_finite()).fold(0.0f64, |m, x| m.max(x.abs()));
                a.iter()
                    .zip(&b)
                    .filter(|(x, y)| x.is_finite() && y.is_finite())
                    .fold(0.0f64, |m, (x, y)| m.max((x - y).abs() / (1.0 + scale)))
            })
            .collect()
    })
}

/// Seed 5819's case 572 in `bf16`, as it was drawn before Adadelta's
/// rates were scaled to its `epsilon` (Adadelta at rate 2, set to 1 before
/// the last step), diverges (its `f64` loss 1.40, 2.19, 1.57, 265): its
/// eager and traced copies, bit for bit equal when the case runs in `f32`
/// or `f64`, land as far from each other as each from the `f64` copy by
/// the last step, which the training's `f32` noise ([`f32_noise`])
/// licenses (it was reported as a difference before the noise was
/// measured). Where the training is still tame the comparison keeps its
/// power: a weight moved by 20% after the first step (5% lies within
/// `bf16`'s tolerance, four units of 2^-8 of the scale), or the first
/// step's update applied twice, is reported.
#[test]
fn a_diverging_half_training_is_rounding_not_a_wrong_copy() {
    let (mut case, batches) = draw(5819, 572, Some(DType::BF16));
    assert!(matches!(case.opt.lr, LrSpec::Constant(lr) if lr == 0.1), "{case:#?}");
    case.opt.lr = LrSpec::Constant(2.0);
    case.set_lr = Some((3, 1.0));
    assert_eq!(run_case(&case, &batches, Sabotage::None), Ok(Ran::Trained), "{case:#?}");
    for sabotage in [
        Sabotage::Perturb { step: 0, rel: 0.2 },
        Sabotage::ExtraUpdate { step: 0 },
    ] {
        let r = run_case(&case, &batches, sabotage);
        assert!(r.is_err(), "{sabotage:?} not reported");
    }
    // the noise that licenses the last step is the training's: far above
    // the roundoff of f32 at the last step, near it at the first
    let exact = |upto: usize| -> Vec<Tensor> {
        let c = Twin::new(&case, DType::F64).unwrap();
        let from = Twin::new(&case, case.dtype).unwrap();
        for (v, w) in c.model.variables().iter().zip(from.model.variables()) {
            v.assign(&w.read().cast(DType::F64).unwrap()).unwrap();
        }
        let mut loss = None;
        for (s, batch) in batches.iter().enumerate().take(upto + 1) {
            if let Some((at, lr)) = case.set_lr
                && at == s
            {
                c.set_learning_rate(lr).unwrap();
            }
            let b64: Vec<Tensor> = batch
                .iter()
                .map(|t| {
                    if t.dtype().is_float() {
                        t.cast(DType::F64).unwrap()
                    } else {
                        t.clone()
                    }
                })
                .collect();
            loss = Some(c.step(&case, &b64).unwrap());
        }
        let mut all = vec![loss.unwrap()];
        all.extend(c.state().iter().map(Variable::read));
        all
    };
    let worst = |upto: usize| {
        f32_noise(&case, &batches, upto, &exact(upto))
            .expect("the f32 copy trains")
            .into_iter()
            .fold(0.0f64, f64::max)
    };
    let (first, last) = (worst(0), worst(case.steps - 1));
    assert!(first < 1e-5, "step 0: {first}");
    assert!(last > 100.0 * first, "step 0: {first}, last step: {last}");
}

/// Seed 6009's case 2301 in `bf16` (Adamax, `clipvalue`, a loss scale,
/// moving averages; a ReLU `Dense` after a transformer block): at its last
/// step a pre-activation of `dense_2` is -2.8e-4 from the eager copy's
/// weights and +3.2e-4 from the traced copy's (an ulp apart), -1.2e-2 in
/// `f64`, so one position's term (0.08) is in the traced copy's bias
/// gradient and not in the eager copy's: the copies' trajectories parted
/// by rounding. The step itself, replayed eagerly from the traced copy's
/// state ([`replay`]), is the traced step (it was reported before the
/// replay referee); a traced weight moved by 20% or a traced update
/// applied twice at that step is still reported.
#[test]
fn a_relu_at_its_kink_is_rounding_not_a_wrong_step() {
    let (case, batches) = draw(6009, 2301, Some(DType::BF16));
    assert_eq!(run_case(&case, &batches, Sabotage::None), Ok(Ran::Trained), "{case:#?}");
    let last = case.steps - 1;
    for sabotage in [
        Sabotage::Perturb { step: last, rel: 0.2 },
        Sabotage::ExtraUpdate { step: last },
    ] {
        let r = run_case(&case, &batches, sabotage);
        assert!(r.is_err(), "{sabotage:?} not reported");
    }
}
