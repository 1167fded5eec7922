//! The referees of [`super`]: when a traced result and the eager one
//! differ by more than a few ulps of their scale, whether the difference
//! is rounding (of `f32`, refereed by the program in `f64`; of a program
//! whose terms cancel, measured by its `f32` run) or a kink (a value zero
//! up to rounding under `|x|`, `max`, `where`), or a wrong element.

use gradtape::{DType, Result, Tensor};

use super::{run_with_gradients, Gen, Step};

/// How two results differ beyond `tol` of the expected one's scale, if
/// they do (NaN and infinities must sit where the expected has them).
pub fn differs(got: &Tensor, want: &Tensor, tol: f64) -> Option<String> {
    if got.shape() != want.shape() || got.dtype() != want.dtype() {
        return Some(format!(
            "{} {:?} against {} {:?}",
            got.dtype(),
            got.shape(),
            want.dtype(),
            want.shape()
        ));
    }
    let (g, w) = (got.to_vec_f64(), want.to_vec_f64());
    let scale = w.iter().filter(|x| x.is_finite()).fold(0.0f64, |m, x| m.max(x.abs()));
    for (i, (x, y)) in g.iter().zip(&w).enumerate() {
        let same = match (x.is_finite(), y.is_finite()) {
            (true, true) => (x - y).abs() <= tol * (1.0 + scale),
            (false, false) => x.is_nan() == y.is_nan() && (x.is_nan() || x == y),
            _ => false,
        };
        if !same {
            return Some(format!("element {i}: {x} against {y} (scale {scale})"));
        }
    }
    None
}

/// The program's `f32` noise, the worst over the outputs of
/// `run_with_gradients`, each relative to its scale, of two measures:
/// - how far its eager `f32` run is from its `f64` run: a program whose
///   values cancel (a sum of terms near 700 that leaves 0.8) loses most of
///   its `f32` digits, traced or not;
/// - how far its eager `f32` run moves when every input moves by 2^-22 of
///   itself (2 `f32` ulps; all by the same factor, which keeps the
///   inputs' ties and order, so that no `max` or `where` of them changes
///   its choice): the program's condition.
///   A traced run that adds in another order moves its intermediate
///   values by a few ulps, which such a program amplifies as it does the
///   inputs' (seed 49's program 283, leaning: a value of 2.8e5, a few
///   ulps of which are 0.1, goes through `sin`; eager `f32` lands 2.9 from
///   the `f64` gradient, of scale 6,540, traced 94, both noise), where
///   the first measure can be a lucky eager run.
pub fn f32_noise(steps: &[Step], x: &[Tensor]) -> f64 {
    let x64: Result<Vec<Tensor>> = x.iter().map(|t| t.cast(DType::F64)).collect();
    let Ok(a) = run_with_gradients(steps, x) else {
        return 0.0;
    };
    let in_f64 = x64.and_then(|x| run_with_gradients(steps, &x));
    in_f64
        .map_or(0.0, |b| worst_gap(&a, &b))
        .max(moved(steps, x, &a, (-22f64).exp2()))
}

/// The program's `f64` condition, measured as [`f32_noise`]'s second
/// measure is in `f32`: how far its eager `f64` run moves when every input
/// moves by 2^-50 of itself (4 ulps). Where a value far past 1 goes
/// through a bounded function, the `f32` measure saturates (a sine's value
/// is `O(1)` whatever its argument's error) while `f64` still resolves the
/// digits that another order of addition moves (seed 5608's larger
/// program 350: a cumulative product reaching 2.8e11, 33 ulps apart
/// traced, then its sine, 1.5e-4 of the scale apart).
pub fn f64_noise(steps: &[Step], x: &[Tensor]) -> f64 {
    run_with_gradients(steps, x).map_or(0.0, |a| moved(steps, x, &a, (-50f64).exp2()))
}

/// How far `a`, the outputs of `run_with_gradients` on `x`, move when
/// every input moves by `by` of itself (all by the same factor, which
/// keeps the inputs' ties and order, so that no `max` or `where` of them
/// changes its choice), relative to each output's scale.
fn moved(steps: &[Step], x: &[Tensor], a: &[Tensor], by: f64) -> f64 {
    let x: Result<Vec<Tensor>> = x.iter().map(|t| t.mul_scalar(1.0 + by)).collect();
    x.and_then(|x| run_with_gradients(steps, &x))
        .map_or(0.0, |b| worst_gap(a, &b))
}

/// The largest difference between the finite elements of `a` and `b`,
/// output by output, relative to the scale of `b`'s.
fn worst_gap(a: &[Tensor], b: &[Tensor]) -> f64 {
    let mut worst = 0.0f64;
    for (a, b) in a.iter().zip(b) {
        let (a, b) = (a.to_vec_f64(), b.to_vec_f64());
        let scale = b.iter().filter(|v| v.is_finite()).fold(0.0f64, |m, v| m.max(v.abs()));
        for (x, y) in a.iter().zip(&b) {
            if x.is_finite() && y.is_finite() {
                worst = worst.max((x - y).abs() / (1.0 + scale));
            }
        }
    }
    worst
}

/// Whether a difference between traced (`got`) and eager (`want`) is
/// rounding. In `f32`: `got` is no farther from the program's `f64` values than
/// four times `want` is, plus 16 times the program's own `f32` noise
/// ([`f32_noise`]) and a few ulps, of the output's scale. A sum over a few
/// hundred thousand terms that cancel, added in another order, moves the
/// last digits of both, and where a program loses most of its `f32`
/// digits (seed 20's program 820: eager `f32` is 36 off at one output,
/// 4e-4 of its scale) one element of the traced run may land 16 times
/// farther than eager's happened to; a wrong element (an `O(1)` error)
/// does not come that close. In `f16` and `bf16` the same, with the
/// slack of the half type ([`slack`]).
///
/// In `f64` there is no referee; the program's conditioning is measured
/// instead, by its `f32` run (the noise of the inputs rounded to `f32`),
/// and scaled down to `f64`'s precision (2^-29 of `f32`'s): a difference
/// within 32 times that, of the output's scale, is rounding (seed 22's
/// program 1170: a shared weight's gradient, a sum of four products whose
/// terms cancel, 2.4e-9 apart relative). The caller may raise `noise` to
/// [`f64_noise`]'s measure scaled up by 2^29 where that is larger.
pub fn rounding(dtype: DType, got: &Tensor, want: &Tensor, exact: Option<Tensor>, noise: f64) -> bool {
    // (another shape is never rounding: the comparisons below zip)
    if got.shape() != want.shape() {
        return false;
    }
    if dtype == DType::F64 {
        let (g, w) = (got.to_vec_f64(), want.to_vec_f64());
        let scale = w.iter().filter(|v| v.is_finite()).fold(0.0f64, |m, v| m.max(v.abs()));
        let bound = 32.0 * noise * (-29f64).exp2() * (1.0 + scale);
        // (NaN and infinities where eager has them: `differs` asks the
        // same; seed 5602's program 242, larger, has six in a gradient)
        return g.iter().zip(&w).all(|(a, b)| match (a.is_finite(), b.is_finite()) {
            (true, true) => (a - b).abs() <= bound,
            (false, false) => a.is_nan() == b.is_nan() && (a.is_nan() || a == b),
            _ => false,
        });
    }
    let Some(exact) = exact else {
        return false;
    };
    let dist = |t: &Tensor| -> Option<f64> {
        let (a, b) = (t.to_vec_f64(), exact.to_vec_f64());
        let mut m = 0.0f64;
        for (x, y) in a.iter().zip(&b) {
            match (x.is_finite(), y.is_finite()) {
                (true, true) => m = m.max((x - y).abs()),
                // a NaN (or the same infinity) where the f64 run has it
                (false, false) if (x.is_nan() && y.is_nan()) || x == y => {}
                // overflow in f32 where f64 has a value: no referee
                _ => return None,
            }
        }
        Some(m)
    };
    let scale = exact
        .to_vec_f64()
        .iter()
        .filter(|x| x.is_finite())
        .fold(0.0f64, |m, x| m.max(x.abs()));
    match (dist(got), dist(want)) {
        (Some(g), Some(w)) => g <= 4.0 * w + slack(dtype, noise) * (1.0 + scale),
        _ => false,
    }
}

/// What [`rounding`] allows beyond four times eager's distance from the
/// `f64` values, of the output's scale: in `f32`, a few ulps and 16 times
/// the program's noise; in a half type, four units of its roundoff (2^-11
/// for `f16`, 2^-8 for `bf16`) and 16 times the noise scaled from `f32`'s
/// measure (inputs moved by 2^-22) to that roundoff.
fn slack(dtype: DType, noise: f64) -> f64 {
    match dtype {
        DType::F16 | DType::BF16 => {
            let eps = if dtype == DType::F16 {
                (-11f64).exp2()
            } else {
                (-8f64).exp2()
            };
            4.0 * eps + 16.0 * noise * eps / (-22f64).exp2()
        }
        _ => 1e-6 + 16.0 * noise,
    }
}

/// Whether every element where `got` (traced) and `want` (eager) differ
/// sits at a kink of the program: the same eager computation, on inputs
/// moved by a few ulps' worth (`1e-12` of each, `2e-6` in `f32`), gives
/// `got`'s value there in one of 24 tries (a tie of an input and a value
/// that is zero up to rounding goes one way or the other with the sign
/// of the input's move: six tries missed one such side in 64, and a
/// campaign of 8,000 programs met one). `|x|`, `max`, `min`, `where`
/// and `relu` turn a value that is zero (or a tie) up to rounding, which
/// the compiler may round the other way (a scan or a product summed in
/// another order: `4e-15` eagerly, `-1e-15` traced), into a derivative of
/// the other sign; a wrong element matches no nearby eager result.
///
/// Twelve more tries move each input by one common factor (`1 + u·1e-12`,
/// `u` drawn per tensor), which keeps equal elements equal: a value that
/// is exactly zero by the program's symmetry (a roll of a tensor less
/// itself, where two elements agree) stays zero, and only a sum's
/// rounding residue moves. Independent moves cannot reach the compiler's
/// side of such a kink when one zero feeds kinks of opposite slopes: in
/// seed 5302's larger program 328 (a campaign of 1,500), `roll(w) - w`
/// is 0 at one element, a 1×1 convolution with filter values of opposite
/// signs then adds the mean of `roll(w) - w` (1.1e-17 eagerly, the
/// rounding of an exact 0; summed in another order traced) and a ReLU
/// follows: both channels sit at the kink on the mean's side, while any
/// independent move opens one channel and closes the other.
///
/// A singular point counts too, for a NaN or infinity traced, two ways:
/// - an element whose eager value itself moves by a tenth of the output's
///   scale, or to a NaN or infinity, between those nearby inputs has no
///   value that a comparison could check;
/// - the program run once more with every argument of a singular op (the
///   square root of a variance) that is zero up to its own rounding made
///   exactly zero ([`snap_rounding_zero`]: what the compiler's other order
///   of summation may give) is one more nearby run, whose NaN or infinity
///   excuses one traced at the same element (seed 99992's program 303,
///   leaning: the square root of the variance over a column of 240 copies
///   of -8.87, 2.8e-27 eagerly from the mean's rounding, exactly 0 traced,
///   where the mean summed in another order came out exact; the gradient
///   there, 0.31 eagerly, is 0·∞ = NaN traced, as TensorFlow's `sqrt`
///   gradient gives at 0; and eager's own value does not move nearby,
///   since every nearby mean rounds the same way).
///
/// A wrong element at a regular point, or a finite one at a jump that no
/// nearby input gives, is still caught.
pub fn at_a_kink(
    got: &Tensor,
    want: &Tensor,
    tol: f64,
    x: &[Tensor],
    eval: impl Fn(&[Tensor]) -> Option<Tensor>,
) -> bool {
    // (results of other shapes are never a kink: seed 5704, f16, reached
    // here with a traced result longer than eager's and indexed past it)
    if got.shape() != want.shape() {
        return false;
    }
    let (g, w) = (got.to_vec_f64(), want.to_vec_f64());
    let scale = w.iter().filter(|v| v.is_finite()).fold(0.0f64, |m, v| m.max(v.abs()));
    let off = |a: f64, b: f64| !((a - b).abs() <= tol * (1.0 + scale) || (a.is_nan() && b.is_nan()) || a == b);
    let mut open: Vec<usize> = (0..g.len()).filter(|&i| off(g[i], w[i])).collect();
    // per element, the range of its nearby eager values (from eager's own)
    let mut range: Vec<(f64, f64)> = w.iter().map(|&v| (v, v)).collect();
    let singular = |(lo, hi): (f64, f64)| !(lo.is_finite() && hi.is_finite()) || hi - lo > 0.1 * (1.0 + scale);
    // the program with its rounding zeros made exact: a NaN or infinity
    // there, where eager has a number, excuses one traced
    if let Some(snapped) = snapping(|| eval(x)) {
        let n = snapped.to_vec_f64();
        if n.len() == g.len() {
            open.retain(|&i| g[i].is_finite() || n[i].is_finite() || !w[i].is_finite());
        }
    }
    let delta = if got.dtype() == DType::F32 { 2e-6 } else { 1e-12 };
    let mut noise = Gen(0x6b69_6e6b);
    for attempt in 0..36 {
        if open.is_empty() {
            break;
        }
        // (from the 25th try on, one factor per tensor)
        let common = attempt >= 24;
        let moved: Option<Vec<Tensor>> = x
            .iter()
            .map(|t| {
                let u = |noise: &mut Gen| (noise.below(2001) as f64 - 1000.0) / 1000.0;
                let factor = 1.0 + delta * u(&mut noise);
                let v: Vec<f64> = t
                    .to_vec_f64()
                    .iter()
                    .map(|&e| match common {
                        true => e * factor,
                        false => e + delta * (e.abs() + 1.0) * u(&mut noise),
                    })
                    .collect();
                Tensor::from_vec(v, t.shape()).and_then(|m| m.cast(t.dtype())).ok()
            })
            .collect();
        let Some(near) = moved.and_then(|m| eval(&m)) else {
            return false;
        };
        let n = near.to_vec_f64();
        if n.len() != g.len() {
            return false;
        }
        open.retain(|&i| {
            let r = &mut range[i];
            *r = match (r.0.is_nan() || n[i].is_nan(), n[i] < r.0, n[i] > r.1) {
                (true, ..) => (f64::NAN, f64::NAN),
                (false, lower, higher) => (if lower { n[i] } else { r.0 }, if higher { n[i] } else { r.1 }),
            };
            off(g[i], n[i])
        });
    }
    // (a NaN or infinity alone: a finite value at a jump must still be
    // one of the values nearby, as at a kink)
    open.retain(|&i| g[i].is_finite() || !singular(range[i]));
    open.is_empty()
}

thread_local! {
    /// Whether [`snap_rounding_zero`] makes its rounding zeros exact (only
    /// within [`snapping`], on the referee's thread).
    static SNAP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `f()` with [`snap_rounding_zero`] on.
fn snapping<T>(f: impl FnOnce() -> T) -> T {
    SNAP.set(true);
    let out = f();
    SNAP.set(false);
    out
}

/// `x.std(axes, keepdims)`, the library's op as it is; within
/// [`snapping`], its variance with the rounding zeros made exact
/// ([`snap_rounding_zero`]) under the square root. (Seed 5709's program
/// 104, f32: the std of seven equal values, each `log(0.1)`, eagerly
/// 2.4e-7 from the mean's rounding in a sequential sum, exactly 0 compiled,
/// where the mean summed in lanes came out exact; the gradient there is
/// 0·∞ = NaN compiled, as TensorFlow's in f64, and a finite 0.0746
/// eagerly.)
pub fn std_snapped(x: &Tensor, axes: &[isize], keepdims: bool) -> Result<Tensor> {
    if !SNAP.get() {
        return x.std(axes, keepdims);
    }
    let var = x.variance(axes, keepdims)?;
    snap_rounding_zero(x, axes, keepdims, &var)?.sqrt()
}

/// `var`, the variance of `x` over `axes` (as `moments` gave it, with
/// `keepdims`), as it is; within [`snapping`], with every element that is
/// zero up to its own rounding made exactly zero (its gradient kept: the
/// value less itself stopped), for a singular op (`sqrt`) to take. Zero
/// up to rounding: at most twice `(n·ε·max|x|)²` over the `n` reduced
/// elements, the square of the bound on the rounding of their mean, which
/// is what the variance of equal values comes to when their mean is not
/// exact.
pub fn snap_rounding_zero(x: &Tensor, axes: &[isize], keepdims: bool, var: &Tensor) -> Result<Tensor> {
    if !SNAP.get() {
        return Ok(var.clone());
    }
    let rank = x.rank().max(1) as isize;
    let n: usize = axes
        .iter()
        .map(|&a| x.shape().get(a.rem_euclid(rank) as usize).copied().unwrap_or(1))
        .product();
    let eps = if x.dtype() == DType::F32 {
        (-24f64).exp2()
    } else {
        (-53f64).exp2()
    };
    let bound = x
        .abs()?
        .max(axes, keepdims)?
        .mul_scalar(n as f64 * eps)?
        .square()?
        .mul_scalar(2.0)?;
    let zero = var.le(&bound)?.cast(var.dtype())?;
    var.sub(&var.stop_gradient().mul(&zero)?)
}

/// The comparison itself: a wrong element is caught in f64 and in f32 (the
/// f64 referee excuses only a traced value as close to it as eager's), a
/// NaN must sit where eager's does, and agreement passes.
#[test]
fn the_comparison_catches_a_wrong_element() -> Result<()> {
    let want = Tensor::vector(&[1.0f64, -2.0, 3.0]);
    assert!(differs(&want, &want, 1e-11).is_none());
    assert!(differs(&Tensor::vector(&[1.0f64, -2.0, 3.000_001]), &want, 1e-11).is_some());
    assert!(differs(&Tensor::vector(&[1.0f64, f64::NAN, 3.0]), &want, 1e-11).is_some());
    assert!(differs(
        &Tensor::vector(&[1.0f64, 3.0]),
        &Tensor::vector(&[1.0f64, 3.0, 0.0]),
        1e-11
    )
    .is_some());
    // f32: eager exact, traced off in the fourth digit: not rounding
    let exact = Tensor::vector(&[1.0f64, -2.0, 3.0]);
    let (eager, traced) = (exact.cast(DType::F32)?, Tensor::vector(&[1.0f32, -2.0, 3.001]));
    assert!(differs(&traced, &eager, 2e-5).is_some());
    assert!(!rounding(DType::F32, &traced, &eager, Some(exact.clone()), 0.0));
    // unless the program's own f32 run is that far off elsewhere
    assert!(rounding(DType::F32, &traced, &eager, Some(exact.clone()), 1e-4));
    // both off by the same rounding: excused
    let (eager, traced) = (
        Tensor::vector(&[1.0f32, -2.0, 3.000_2]),
        Tensor::vector(&[1.0f32, -2.0, 2.999_8]),
    );
    assert!(rounding(DType::F32, &traced, &eager, Some(exact), 0.0));
    // f64: a sixth digit is never rounding, even where f32 loses three
    let off = Tensor::vector(&[1.0f64, -2.0, 3.000_001]);
    assert!(!rounding(DType::F64, &off, &want, None, 1e-3));
    assert!(rounding(
        DType::F64,
        &Tensor::vector(&[1.0f64, -2.0, 3.0 + 1e-14]),
        &want,
        None,
        1e-3
    ));
    // at a kink: d|x - y|/dx at x = y (a cancellation's sign) is either
    // sign nearby, and nothing else
    let x = vec![Tensor::vector(&[0.3f64, 1.5]), Tensor::vector(&[0.3f64, 0.5])];
    let slope = |m: &[Tensor]| m[0].sub(&m[1]).and_then(|d| d.sign()).ok();
    let eager = slope(&x).unwrap();
    assert!(at_a_kink(&Tensor::vector(&[-1.0f64, 1.0]), &eager, 1e-11, &x, slope));
    assert!(!at_a_kink(&Tensor::vector(&[0.5f64, 1.0]), &eager, 1e-11, &x, slope));
    assert!(!at_a_kink(&Tensor::vector(&[0.0f64, -1.0]), &eager, 1e-11, &x, slope));
    // a result of another shape (eager's elements and one more): caught,
    // not a referee's panic nor a comparison of the common elements
    let longer = Tensor::vector(&[0.0f64, 1.0, 1.0]);
    assert!(!at_a_kink(&longer, &eager, 1e-11, &x, slope));
    assert!(!rounding(DType::F64, &longer, &eager, None, 1e-3));
    // at a singular point: the gradient of the standard deviation of a
    // column whose values are equal (a broadcast value, moved as one) is
    // rounding over rounding eagerly; traced, NaN there is excused, and a
    // wrong element in the other column (values apart) still is not
    let col = |c: f64| -> Vec<f64> { (0..7).flat_map(|i| [c, 0.25 * i as f64 - 0.6]).collect() };
    let x = vec![
        Tensor::from_vec(col(-8.87), &[7, 2])?,
        Tensor::from_vec(col(0.3), &[7, 2])?,
    ];
    let grad_std = |m: &[Tensor]| {
        let tape = gradtape::GradientTape::new();
        let x = m[0].add(&m[1]).ok()?;
        let s = tape
            .record(|| {
                tape.watch(&x);
                x.moments(&[0], false)?.1.sqrt()?.sum_all()
            })
            .ok()?;
        tape.gradient(&s, &x).ok()?
    };
    let eager = grad_std(&x).unwrap();
    let (e, shape) = (eager.to_vec_f64(), eager.shape().to_vec());
    let with = |f: &dyn Fn(usize, f64) -> f64| {
        Tensor::from_vec(
            e.iter().enumerate().map(|(i, &v)| f(i, v)).collect::<Vec<f64>>(),
            &shape,
        )
    };
    let nan_in_first = with(&|i, v| if i % 2 == 0 { f64::NAN } else { v })?;
    assert!(at_a_kink(&nan_in_first, &eager, 1e-11, &x, grad_std));
    let wrong_in_second = with(&|i, v| if i == 1 { v + 0.5 } else { v })?;
    assert!(!at_a_kink(&wrong_in_second, &eager, 1e-11, &x, grad_std));
    a_variance_zero_up_to_rounding()?;
    a_std_zero_up_to_rounding()?;
    super::ties::a_sort_at_a_near_tie()
}

/// The square root of a variance zero up to rounding, as in seed 99992's
/// program 303: a column of 240 copies of one value (here a constant,
/// `x·0 + c`, which no nearby input moves), whose mean is not exact
/// eagerly (a variance of about 1e-27), so that the gradient there is
/// finite and the same for every nearby input; where a compiled graph's
/// mean is exact, the variance is 0 and the gradient 0·∞ = NaN. Excused
/// through the variance made exactly zero, and only there: not without
/// that step, not a NaN or a wrong value in the other column, not a wrong
/// finite value in the singular one.
fn a_variance_zero_up_to_rounding() -> Result<()> {
    let rows = 240;
    let v: Vec<f64> = (0..rows)
        .flat_map(|i| [0.1 * (i % 7) as f64, 0.25 * (i % 9) as f64 - 1.1])
        .collect();
    let x = vec![Tensor::from_vec(v, &[rows, 2])?];
    let program = |snap: bool| {
        move |m: &[Tensor]| -> Option<Tensor> {
            let tape = gradtape::GradientTape::new();
            let x = m[0].clone();
            let s = tape
                .record(|| {
                    tape.watch(&x);
                    let y = x
                        .mul(&Tensor::vector(&[0.0f64, 1.0]))?
                        .add(&Tensor::vector(&[-8.87f64, 0.0]))?;
                    let (mean, var) = y.moments(&[0], false)?;
                    let var = if snap {
                        snap_rounding_zero(&y, &[0], false, &var)?
                    } else {
                        var
                    };
                    mean.add(&var.sqrt()?)?.sum_all()
                })
                .ok()?;
            tape.gradient(&s, &x).ok()?
        }
    };
    let eager = program(true)(&x).expect("the program runs");
    let e = eager.to_vec_f64();
    // (the premise: eager's mean of the copies is not exact, so its
    // gradient is finite everywhere)
    assert!(e.iter().all(|v| v.is_finite()), "{e:?}");
    let with = |f: &dyn Fn(usize, f64) -> f64| {
        Tensor::from_vec(
            e.iter().enumerate().map(|(i, &v)| f(i, v)).collect::<Vec<f64>>(),
            &[rows, 2],
        )
    };
    // must excuse: NaN over the broadcast column
    let nan_in_first = with(&|i, v| if i % 2 == 0 { f64::NAN } else { v })?;
    assert!(at_a_kink(&nan_in_first, &eager, 1e-11, &x, program(true)));
    // must catch: the same without the variance made zero (eager's
    // nearby runs all give the same finite value there)
    assert!(!at_a_kink(&nan_in_first, &eager, 1e-11, &x, program(false)));
    // must catch: a wrong element beside the excused ones, finite or NaN
    let wrong_beside = with(&|i, v| match i {
        3 => v + 0.5,
        _ if i % 2 == 0 => f64::NAN,
        _ => v,
    })?;
    assert!(!at_a_kink(&wrong_beside, &eager, 1e-11, &x, program(true)));
    let nan_beside = with(&|i, v| if i % 2 == 0 || i == 5 { f64::NAN } else { v })?;
    assert!(!at_a_kink(&nan_beside, &eager, 1e-11, &x, program(true)));
    // must catch: a finite wrong value in the singular column
    let wrong_there = with(&|i, v| if i == 0 { v + 0.5 } else { v })?;
    assert!(!at_a_kink(&wrong_there, &eager, 1e-11, &x, program(true)));
    Ok(())
}

/// The library's `std` of equal values, as in seed 5709's program 104
/// (f32): a column of seven copies of `log(0.1)` (`x·0 + c`, which no
/// nearby input moves), whose mean is not exact eagerly (a std of 2.4e-7),
/// so that the gradient there is finite; where a compiled graph's mean is
/// exact, the std is 0 and its gradient 0·∞ = NaN. Excused through
/// [`std_snapped`], and only there: not through the library's `std` as it
/// is, not a NaN in the other column, not a wrong finite value in the
/// singular one.
fn a_std_zero_up_to_rounding() -> Result<()> {
    let rows = 7;
    let v: Vec<f32> = (0..rows)
        .flat_map(|i| [0.3 * i as f32, 0.25 * (i % 3) as f32 - 0.4])
        .collect();
    let x = vec![Tensor::from_vec(v, &[rows, 2])?];
    let program = |snap: bool| {
        move |m: &[Tensor]| -> Option<Tensor> {
            let tape = gradtape::GradientTape::new();
            let x = m[0].clone();
            let s = tape
                .record(|| {
                    tape.watch(&x);
                    let y = x
                        .mul(&Tensor::vector(&[0.0f32, 1.0]))?
                        .add(&Tensor::vector(&[0.1f32.ln(), 0.0]))?;
                    let sd = match snap {
                        true => std_snapped(&y, &[0], false)?,
                        false => y.std(&[0], false)?,
                    };
                    sd.add_scalar(0.1)?.log()?.sum_all()
                })
                .ok()?;
            tape.gradient(&s, &x).ok()?
        }
    };
    // (the premise: eager's mean of the copies is not exact, so the std is
    // not 0 and the gradient finite everywhere)
    let y = x[0]
        .mul(&Tensor::vector(&[0.0f32, 1.0]))?
        .add(&Tensor::vector(&[0.1f32.ln(), 0.0]))?;
    let sd = y.std(&[0], false)?.to_vec_f64();
    assert!(sd[0] > 0.0, "{sd:?}");
    let eager = program(true)(&x).expect("the program runs");
    let e = eager.to_vec_f64();
    assert!(e.iter().all(|v| v.is_finite()), "{e:?}");
    let with = |f: &dyn Fn(usize, f64) -> f64| {
        Tensor::from_vec(
            e.iter().enumerate().map(|(i, &v)| f(i, v) as f32).collect::<Vec<f32>>(),
            &[rows, 2],
        )
    };
    let tol = 2e-5;
    // must excuse: NaN over the constant column
    let nan_in_first = with(&|i, v| if i % 2 == 0 { f64::NAN } else { v })?;
    assert!(at_a_kink(&nan_in_first, &eager, tol, &x, program(true)));
    // must catch: the same through the library's std as it is
    assert!(!at_a_kink(&nan_in_first, &eager, tol, &x, program(false)));
    // must catch: a NaN in the regular column, a wrong finite value in
    // the singular one
    let nan_beside = with(&|i, v| if i % 2 == 0 || i == 5 { f64::NAN } else { v })?;
    assert!(!at_a_kink(&nan_beside, &eager, tol, &x, program(true)));
    let wrong_there = with(&|i, v| if i == 0 { v + 0.5 } else { v })?;
    assert!(!at_a_kink(&wrong_there, &eager, tol, &x, program(true)));
    Ok(())
}

/// Whether eager refused for want of memory: the compiled graph may run
/// where eager cannot, since a fused group never makes its inner values
/// (seed 5312's larger program 590, leaning to motifs, in a campaign of
/// 3,000: eager `tanh` asked for 10 GB, `[179·303²·152]` `f32`s, under a
/// 16 GB address-space limit, and the traced call ran; without a limit the
/// eager run met the system's out-of-memory killer). Campaigns that lean
/// to motifs at the larger sizes run under `ulimit -v` for that reason.
pub fn eager_oom(e: &gradtape::Error) -> bool {
    matches!(e, gradtape::Error::OutOfMemory { .. })
}
