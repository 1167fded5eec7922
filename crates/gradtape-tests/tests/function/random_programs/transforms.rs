//! The random programs through the other transformations: `vmap` against
//! the loop it replaces, forward mode against reverse mode, the
//! vectorized Jacobian against its rows, and second order both ways.
//!
//! - **vmap**: a program over one example's three inputs, mapped over a
//!   batch of two to four examples (the weight input batched or shared),
//!   must give the loop's results stacked: its forward values, and, with
//!   the tape inside the mapped function, its per-example gradients
//!   (`vmap(grad(loss))`). Ops without a batching rule run in vmap's
//!   fallback loop, which is fine: the values are what is checked.
//! - **forward against reverse**: for the program's scalar loss `L` and a
//!   tangent `v` per input, forward mode's `dL·v` (one `jvp`) must equal
//!   `Σ ⟨∇L, v⟩` from the tape's gradients, and the same `jvp` inside a
//!   traced function must equal the eager one. The two modes share no code
//!   per op (each op's JVP rule against its VJP rule, in any
//!   combination), and the inputs hold ties (multiples of 1/400), so a
//!   `max`, a pool or a sort whose two rules break ties differently shows.
//! - **jacobian**: all rows at once (vmap over the cotangents) against one
//!   backward pass per row.
//! - **second order**: Hessian-vector products forward over reverse
//!   against reverse over reverse.
//!
//! In f64, at the small sizes. A campaign: `GRADTAPE_PROGRAMS=3000
//! GRADTAPE_PROGRAMS_SEED=7 cargo test --release --test function
//! random_programs_`.

use gradtape::{function, hvp, jvp, vmap, DType, GradientTape, JacobianOptions, Result, Tensor, Unconnected};

use super::referees::{differs, rounding};
use super::{campaign, draw_program, inputs, run, run_with_gradients, Gen, Step};

/// Programs per CI run of each test.
const CASES: usize = 60;

/// The campaign's range, [`CASES`] unless the environment asks for more.
fn range() -> (u64, std::ops::Range<usize>) {
    let (seed, range, _) = campaign();
    match std::env::var_os("GRADTAPE_PROGRAMS") {
        Some(_) => (seed, range),
        None => (seed, 0..CASES),
    }
}

/// One program's steps and sizes from `seed` and `k`, with the generator
/// after them.
fn program(seed: u64, k: usize) -> (Vec<Step>, (usize, usize, usize), Gen) {
    let mut g = Gen(seed ^ (k as u64).wrapping_mul(0x9E6C_63D0_676A_9A99));
    let lean = g.coin();
    // (without the ops whose shapes the values decide: vmap traces one
    // example and replays it on the others, whose counts differ; an
    // error, as in JAX, but no comparison; and without the CTC loss,
    // which has no second derivative, as in TensorFlow)
    let mut steps = draw_program(&mut g, lean);
    steps.retain(|s| s.op != super::fourth_ops::VALUE_SHAPES && !super::fourth_ops::is_ctc(s));
    let sizes = (1 + g.below(4), 2 + g.below(5), 1 + g.below(5));
    (steps, sizes, g)
}

/// `steps` without the casts through a narrower float, for comparing two
/// modes of differentiation: each rounds its own vector (a tangent, a
/// cotangent) to that float.
fn without_narrowing(steps: Vec<Step>) -> Vec<Step> {
    steps
        .into_iter()
        .filter(|s| s.op != super::more_ops::NARROWING)
        .collect()
}

/// `vmap` of `f` (a program's outputs from one example's inputs) equals
/// the loop over the examples, stacked.
fn check_vmap(
    label: &str,
    f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + Clone + Send + Sync + 'static,
    examples: &[Vec<Tensor>],
    shared: bool,
) -> bool {
    // the loop: every example must run for the comparison to mean anything
    let Ok(per) = examples.iter().map(|x| f(x)).collect::<Result<Vec<_>>>() else {
        return false;
    };
    let batched: Vec<Tensor> = (0..3)
        .map(|i| match shared && i == 2 {
            true => examples[0][2].clone(),
            false => Tensor::stack(&examples.iter().map(|x| &x[i]).collect::<Vec<_>>(), 0).expect("stack"),
        })
        .collect();
    let in_axes = [Some(0), Some(0), if shared { None } else { Some(0) }];
    let outs = per[0].len();
    let mapped = vmap(move |a: &[Tensor]| f(a), &in_axes, &vec![Some(0); outs]);
    let got = match mapped.call(&batched) {
        Ok(got) => got,
        // (outputs whose shapes each example's values decide, a mask's
        // count: vmap's error by design, as JAX's; no comparison)
        Err(e) if e.to_string().contains("depends on each example's values") => return false,
        Err(e) => panic!("{label}: vmap refused ({e}) what the loop ran"),
    };
    for (j, g) in got.iter().enumerate() {
        // (examples whose outputs' shapes their values decide, a mask's
        // count, stack to nothing a vmap could give: no comparison)
        let Ok(want) = Tensor::stack(&per.iter().map(|o| &o[j]).collect::<Vec<_>>(), 0) else {
            return false;
        };
        if let Some(why) = differs(g, &want, 1e-10) {
            panic!("{label}: output {j}: {why}");
        }
    }
    true
}

#[test]
fn random_programs_through_vmap_equal_their_loop() {
    let (seed, range) = range();
    let (mut compared, total) = (0, range.len());
    for k in range {
        let (steps, (b, n, m), mut g) = program(seed, k);
        let count = 2 + g.below(3);
        let shared = g.coin();
        // examples of one shape; with `shared`, the weight is the first's
        let mut examples: Vec<Vec<Tensor>> = (0..count)
            .map(|_| inputs(&mut g, DType::F64, b, n, m).expect("inputs"))
            .collect();
        if shared {
            let w = examples[0][2].clone();
            for x in &mut examples {
                x[2] = w.clone();
            }
        }
        let label =
            format!("program {k} of seed {seed} (b {b}, n {n}, m {m}, {count} examples, shared {shared}): {steps:?}");
        let fwd = {
            let steps = steps.clone();
            move |x: &[Tensor]| run(&steps, x)
        };
        compared += usize::from(check_vmap(&format!("vmap, {label}"), fwd, &examples, shared));
        let step = move |x: &[Tensor]| run_with_gradients(&steps, x);
        check_vmap(&format!("vmap of the gradients, {label}"), step, &examples, shared);
    }
    // (most programs run on every example)
    assert!(compared * 2 >= total, "{compared} of {total} programs compared");
}

/// How far the program's eager `f32` value (`which` 0) or jvp (1) lands
/// from `want`, the `f64` one, relative to `want`'s scale: the digits the
/// program's cancellations cost (0 where the `f32` run fails).
fn jvp_noise(
    loss: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    x: &[Tensor],
    v: &[Tensor],
    which: usize,
    want: &Tensor,
) -> f64 {
    let f32s = |t: &[Tensor]| t.iter().map(|t| t.cast(DType::F32)).collect::<Result<Vec<_>>>();
    let (Ok(x), Ok(v)) = (f32s(x), f32s(v)) else {
        return 0.0;
    };
    let Ok((l, dl)) = jvp(loss, &x, &v) else {
        return 0.0;
    };
    let got = if which == 0 { l } else { dl };
    if got.shape() != want.shape() {
        return 0.0;
    }
    let (g, w) = (got.to_vec_f64(), want.to_vec_f64());
    let scale = w.iter().filter(|v| v.is_finite()).fold(0.0f64, |m, v| m.max(v.abs()));
    let worst = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0f64, f64::max);
    if worst.is_finite() {
        worst / (1.0 + scale)
    } else {
        0.0
    }
}

#[test]
fn random_programs_through_forward_mode_agree_with_reverse() -> Result<()> {
    let (seed, range) = range();
    let (mut checked, mut non_finite, total) = (0, 0, range.len());
    for k in range {
        let (steps, (b, n, m), mut g) = program(seed.wrapping_add(1), k);
        let steps = without_narrowing(steps);
        let x = inputs(&mut g, DType::F64, b, n, m)?;
        let v = inputs(&mut g, DType::F64, b, n, m)?;
        let loss = |p: &[Tensor]| Ok(run(&steps, p)?[1].clone());
        let Ok((l, dl)) = jvp(loss, &x, &v) else {
            // (refused: then the plain run must refuse too)
            assert!(
                run(&steps, &x).is_err(),
                "program {k} of seed {seed}: jvp refused what runs: {steps:?}"
            );
            continue;
        };
        if !l.to_scalar::<f64>()?.is_finite() {
            continue;
        }
        // forward mode inside a traced function: the eager jvp, to rounding
        let traced = {
            let steps = steps.clone();
            function(move |(x, v): &(Vec<Tensor>, Vec<Tensor>)| {
                let (l, dl) = jvp(|p| Ok(run(&steps, p)?[1].clone()), x, v)?;
                Ok(vec![l, dl])
            })
        };
        let got = traced
            .call(&(x.clone(), v.clone()))
            .unwrap_or_else(|e| panic!("program {k} of seed {seed}: the traced jvp refused ({e}): {steps:?}"));
        for (which, (what, got, want)) in [("value", &got[0], &l), ("jvp", &got[1], &dl)].into_iter().enumerate() {
            // (a traced run may add in another order: a joined sum of
            // products whose terms cancel is rounding, measured by the
            // program's f32 jvp, as the values' referee does)
            if let Some(why) = differs(got, want, 1e-10)
                && !rounding(DType::F64, got, want, None, jvp_noise(&loss, &x, &v, which, want))
            {
                panic!("program {k} of seed {seed}: traced {what}: {why}: {steps:?}");
            }
        }
        let tape = GradientTape::new();
        let l2 = tape.record(|| {
            for t in &x {
                tape.watch(t);
            }
            loss(&x)
        })?;
        let grads = tape.gradient(&l2, &x)?;
        let (mut dot, mut scale) = (0.0, 0.0);
        for (gi, vi) in grads.iter().zip(&v) {
            if let Some(gi) = gi {
                for (a, c) in gi.to_vec_f64().iter().zip(vi.to_vec_f64()) {
                    dot += a * c;
                    scale += (a * c).abs();
                }
            }
        }
        let fwd = dl.to_scalar::<f64>()?;
        if !(fwd.is_finite() && dot.is_finite()) {
            // a derivative that is infinite where a value is (`sqrt` of a
            // variance that is 0) meets a zero: forward mode multiplies
            // the zero tangent by it (NaN), reverse mode may select the
            // product away (a mask's gradient), or the other way round.
            // JAX's two modes do the same. Rare: counted below.
            non_finite += 1;
            continue;
        }
        checked += 1;
        assert!(
            (fwd - dot).abs() <= 1e-9 * (1.0 + scale),
            "program {k} of seed {seed} (b {b}, n {n}, m {m}): forward mode's dL·v {fwd}, reverse mode's {dot} (scale {scale}): {steps:?}"
        );
    }
    // (most programs run, and few meet an infinite derivative)
    assert!(
        checked * 2 >= total && non_finite * 20 <= total.max(20),
        "{checked} of {total} programs compared, {non_finite} with a non-finite dL·v"
    );
    Ok(())
}

/// A tape inside a traced function around a `while_loop` whose condition
/// reads the values: with no iteration (the loop is the identity, the
/// gradient ones) and with the iteration cap reached (each trip scales by
/// 1.5: the gradient 1.5⁴), traced as eager. (Expected values by hand:
/// `mean |x|` is 2.95 ≥ 1 for `[5, 0.9]`, and 0.15 · 1.5⁴ ≈ 0.76 < 1 for
/// `[0.1, 0.2]`.)
#[test]
fn a_while_loop_of_zero_or_capped_trips_differentiates_inside_a_trace() -> Result<()> {
    use gradtape::{while_loop, WhileOptions};
    let step = |x: &Tensor| -> Result<(Tensor, Tensor)> {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(x);
            let out = while_loop(
                |v: &Vec<Tensor>| v[0].abs()?.mean_all()?.lt_scalar(1.0),
                |v: &Vec<Tensor>| Ok(vec![v[0].mul_scalar(1.5)?]),
                vec![x.mul_scalar(1.0)?],
                WhileOptions {
                    max_iterations: Some(4),
                    ..WhileOptions::default()
                },
            )?;
            out[0].sum_all()
        })?;
        Ok((y.clone(), tape.gradient(&y, x)?.unwrap()))
    };
    let traced = function(step);
    for (x, y, g) in [([5.0f64, 0.9], 5.9, 1.0), ([0.1, 0.2], 0.3 * 5.0625, 5.0625)] {
        let x = Tensor::vector(&x);
        for (how, (yv, gv)) in [("eager", step(&x)?), ("traced", traced.call(&x)?)] {
            assert!((yv.to_vec::<f64>()?[0] - y).abs() < 1e-12, "{how}: {yv:?} against {y}");
            assert_eq!(gv.to_vec::<f64>()?, vec![g; 2], "{how}");
        }
    }
    Ok(())
}

/// The Jacobian of a program's last value w.r.t. its three inputs, all
/// rows at once (the backward pass batched over the rows' cotangents by
/// vmap, the saved values shared) against one backward pass per row.
#[test]
fn random_programs_through_jacobian_equal_their_rows() -> Result<()> {
    let (seed, range) = range();
    let (mut compared, total) = (0, range.len());
    for k in range {
        let (steps, (b, n, m), mut g) = program(seed.wrapping_add(2), k);
        let x = inputs(&mut g, DType::F64, b, n, m)?;
        let tape = GradientTape::persistent();
        let Ok(y) = tape.record(|| {
            for t in &x {
                tape.watch(t);
            }
            Ok(run(&steps, &x)?[0].clone())
        }) else {
            continue;
        };
        // (a last value of up to 400 elements: as many backward passes)
        if y.numel() > 400 || !y.dtype().is_differentiable() {
            continue;
        }
        let by_rows = JacobianOptions::default()
            .vectorized(false)
            .unconnected(Unconnected::Zero);
        let want = tape.jacobian_with(&y, &x, by_rows)?;
        let got = tape
            .jacobian_with(&y, &x, JacobianOptions::default().unconnected(Unconnected::Zero))
            .unwrap_or_else(|e| panic!("program {k} of seed {seed}: the vectorized jacobian refused ({e}): {steps:?}"));
        for (i, (gj, wj)) in got.iter().zip(&want).enumerate() {
            let (Some(gj), Some(wj)) = (gj, wj) else {
                panic!("program {k} of seed {seed}: jacobian {i} missing: {steps:?}");
            };
            if let Some(why) = differs(gj, wj, 1e-10) {
                panic!("program {k} of seed {seed} (b {b}, n {n}, m {m}): jacobian {i}: {why}: {steps:?}");
            }
        }
        compared += 1;
    }
    assert!(compared * 2 >= total, "{compared} of {total} programs compared");
    Ok(())
}

/// Second order: the Hessian-vector product of a program's loss w.r.t.
/// its first input, forward over reverse ([`hvp`]: every op's gradient
/// rule pushed through forward mode) against reverse over reverse (the
/// gradient of `⟨∇L, v⟩` from an outer tape: the gradient rules'
/// gradients).
#[test]
fn random_programs_hessian_vector_products_agree_in_both_modes() -> Result<()> {
    let (seed, range) = range();
    let (mut compared, mut non_finite, total) = (0, 0, range.len());
    for k in range {
        let (steps, (b, n, m), mut g) = program(seed.wrapping_add(3), k);
        let steps = without_narrowing(steps);
        let x = inputs(&mut g, DType::F64, b, n, m)?;
        let v = inputs(&mut g, DType::F64, b, n, m)?.swap_remove(0);
        let loss =
            |x0: &Tensor| -> Result<Tensor> { Ok(run(&steps, &[x0.clone(), x[1].clone(), x[2].clone()])?[1].clone()) };
        let Ok(fwd) = hvp(loss, &x[0], &v) else {
            continue;
        };
        let outer = GradientTape::new();
        let hv = outer.record(|| {
            outer.watch(&x[0]);
            let inner = GradientTape::new();
            let l = inner.record(|| {
                inner.watch(&x[0]);
                loss(&x[0])
            })?;
            match inner.gradient(&l, &x[0])? {
                Some(g) => g.mul(&v)?.sum_all(),
                None => Tensor::scalar(0.0f64).mul(&x[0].sum_all()?),
            }
        })?;
        let rev = outer.gradient(&hv, &x[0])?.map_or_else(|| x[0].try_zeros_like(), Ok)?;
        let (f, r) = (fwd.to_vec_f64(), rev.to_vec_f64());
        if f.iter().chain(&r).any(|z| !z.is_finite()) {
            // (as in the first order's test: an infinite derivative met by
            // a zero, in one mode's order)
            non_finite += 1;
            continue;
        }
        if let Some(why) = differs(&fwd, &rev, 1e-9) {
            panic!("program {k} of seed {seed} (b {b}, n {n}, m {m}): H·v forward over reverse against reverse over reverse: {why}: {steps:?}");
        }
        compared += 1;
    }
    assert!(
        compared * 2 >= total && non_finite * 20 <= total.max(20),
        "{compared} of {total} programs compared, {non_finite} with a non-finite H·v"
    );
    Ok(())
}
