//! `layer_normalization` as the fused `LayerNorm` op (a row kernel each
//! way): values and gradients against TensorFlow, the fused op against the
//! composite it replaces over many shapes and both float types, forward
//! mode against finite differences, a traced gradient made of the two
//! fused nodes (on shapes other than the bench's), and per-example
//! gradients under `vmap` without the loop. The gradient checker's table
//! (`gradcheck/gradcheck_nn.rs`) checks first and second order, eager and
//! traced.

use gradtape::{function, vmap, DType, ForwardAccumulator, GradientTape, Result, Tensor};

use super::sums_util::{close_sums, init, wsum};

/// `Σ y[i] sin(0.1 i)`, a loss whose gradient is no constant.
fn weighted(y: &Tensor) -> Result<Tensor> {
    let n = y.numel();
    let w = Tensor::from_vec((0..n).map(|i| (0.1 * i as f64).sin()).collect(), &[n])?.cast(y.dtype())?;
    y.reshape(&[n])?.mul(&w)?.sum_all()
}

fn close(a: &Tensor, b: &Tensor, tol: f64, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}");
    let (a, b) = (
        a.cast(DType::F64).unwrap().to_vec::<f64>().unwrap(),
        b.cast(DType::F64).unwrap().to_vec::<f64>().unwrap(),
    );
    let scale = b.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!((x - y).abs() <= tol * scale, "{what} [{i}]: {x} vs {y}");
    }
}

/// The composite definition, as TensorFlow's: `moments` over `axes`, then
/// `batch_normalization`.
fn composite(x: &Tensor, axes: &[isize], g: Option<&Tensor>, b: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    let (m, v) = x.moments(axes, true)?;
    Tensor::batch_normalization(x, &m, &v, b, g, eps)
}

/// The loss and its gradients w.r.t. `x` and the parameters given.
fn loss_and_grads(
    f: impl Fn(&Tensor, Option<&Tensor>, Option<&Tensor>) -> Result<Tensor>,
    x: &Tensor,
    g: Option<&Tensor>,
    b: Option<&Tensor>,
) -> Result<(Tensor, Vec<Tensor>)> {
    let watched: Vec<Tensor> = [Some(x), g, b].into_iter().flatten().cloned().collect();
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&watched);
        f(x, g, b)
    })?;
    let loss = tape.record(|| weighted(&y))?;
    let grads = tape.gradient(&loss, &watched)?;
    Ok((y, grads.into_iter().map(|g| g.expect("connected")).collect()))
}

/// TensorFlow 2.21, float64: `m, v = tf.nn.moments(x, axes, keepdims=True)`,
/// `y = tf.nn.batch_normalization(x, m, v, beta, gamma, eps)`, gradients
/// of `Σ y[i] sin(0.1 i)` by `tf.GradientTape` (`/tmp/ln_tf.py` in the
/// session's note): `(Σ, Σ · sin(0.1 i))` of `y` and of each gradient.
#[test]
fn values_and_gradients_match_tensorflow() -> Result<()> {
    type Case = (Tensor, Vec<isize>, Option<Tensor>, Option<Tensor>, f64, [(f64, f64); 4]);
    let cases: Vec<Case> = vec![
        (
            init(&[2, 3, 5], 1.0, 1.5),
            vec![-1],
            Some(init(&[5], 2.0, 1.0)),
            Some(init(&[5], 3.0, 0.5)),
            1e-3,
            [
                (-5.799074016057869, -5.274950145917086),
                (2.6645352591003757e-15, 0.8736718838439024),
                (-0.36362654904295466, -0.010880607136586222),
                (19.81277892663282, 3.9442967642307165),
            ],
        ),
        (
            init(&[3, 4, 6], 4.0, 2.0),
            vec![1, 2],
            Some(init(&[4, 6], 5.0, 1.2)),
            Some(init(&[6], 6.0, 0.7)),
            1e-5,
            [
                (24.87750439408112, 7.57811435841288),
                (-2.7755575615628914e-17, -3.084445710719188),
                (4.177789840912909, 1.377281688967242),
                (3.516388639621263, 1.0865991948707359),
            ],
        ),
        (
            init(&[4, 8], 7.0, 3.0),
            vec![-1],
            None,
            Some(init(&[1, 8], 8.0, 0.9)),
            1e-2,
            [
                (2.5223157084466266, 1.1983377265374804),
                (-6.661338147750939e-16, 0.6631477834320545),
                (19.995479597125975, 6.701844805336953),
                (0.0, 0.0),
            ],
        ),
    ];
    for (i, (x, axes, g, b, eps, want)) in cases.iter().enumerate() {
        let f = |x: &Tensor, g: Option<&Tensor>, b: Option<&Tensor>| x.layer_normalization(axes, g, b, *eps);
        let (y, grads) = loss_and_grads(f, x, g.as_ref(), b.as_ref())?;
        close_sums(wsum(&y), want[0], 1e-12, &format!("case {i}: y"));
        for (j, gr) in grads.iter().enumerate() {
            // (the sums of dx are 0 up to rounding: compared absolutely)
            close_sums(wsum(gr), want[j + 1], 1e-12, &format!("case {i}: gradient {j}"));
        }
        assert_eq!(grads.len(), 1 + g.is_some() as usize + b.is_some() as usize);
        for (gr, p) in grads
            .iter()
            .zip([Some(x), g.as_ref(), b.as_ref()].into_iter().flatten())
        {
            assert_eq!(gr.shape(), p.shape(), "case {i}");
        }
    }
    Ok(())
}

/// The fused op gives the composite's values and gradients over shapes of
/// rank 1 to 4, one to all trailing axes, parameters of the normalised
/// shape, with leading unit dims, or broadcast within it, absent, in f64
/// and f32; and calls it does not cover (leading axes, parameters that vary
/// along a kept axis) still give the composite's.
#[test]
fn fused_equals_the_composite() -> Result<()> {
    let shapes: [&[usize]; 6] = [&[7], &[3, 5], &[2, 3, 4], &[2, 1, 3, 4], &[5, 64], &[3, 300]];
    let mut fused_cases = 0;
    for (si, shape) in shapes.iter().enumerate() {
        let r = shape.len();
        for k in 1..=r {
            let axes: Vec<isize> = (r - k..r).map(|a| a as isize).collect();
            let tail = &shape[r - k..];
            let last = *tail.last().unwrap();
            // parameter shapes: the tail, with a leading unit dim, the last dim only
            // (with the unit dim only where `x` has a dim there)
            let mut forms: Vec<Vec<usize>> = vec![tail.to_vec(), vec![last]];
            if k < r {
                forms.push([&[1][..], tail].concat());
            }
            for (fi, form) in forms.iter().enumerate() {
                for (with_g, with_b) in [(true, true), (true, false), (false, true), (false, false)] {
                    for dt in [DType::F64, DType::F32] {
                        let seed = (si * 31 + k * 7 + fi * 3) as f64;
                        let x = init(shape, seed, 2.5).add_scalar(0.3)?.cast(dt)?;
                        let g = with_g.then(|| init(form, seed + 1.0, 1.3).cast(dt).unwrap());
                        let b = with_b.then(|| init(form, seed + 2.0, 0.8).cast(dt).unwrap());
                        let what = format!("{shape:?} axes {axes:?} params {form:?} {with_g}/{with_b} {dt:?}");
                        let fused = |x: &Tensor, g: Option<&Tensor>, b: Option<&Tensor>| {
                            x.layer_normalization(&axes, g, b, 1e-3)
                        };
                        let comp = |x: &Tensor, g: Option<&Tensor>, b: Option<&Tensor>| composite(x, &axes, g, b, 1e-3);
                        let (y1, g1) = loss_and_grads(fused, &x, g.as_ref(), b.as_ref())?;
                        let (y2, g2) = loss_and_grads(comp, &x, g.as_ref(), b.as_ref())?;
                        let tol = if dt == DType::F64 { 1e-12 } else { 2e-5 };
                        close(&y1, &y2, tol, &format!("{what}: y"));
                        assert_eq!(y1.dtype(), dt);
                        for (j, (a, c)) in g1.iter().zip(&g2).enumerate() {
                            close(a, c, tol * 10.0, &format!("{what}: gradient {j}"));
                        }
                        fused_cases += 1;
                    }
                }
            }
        }
    }
    assert!(fused_cases >= 150, "{fused_cases}");
    // calls the fused op does not cover: leading axes, a parameter that
    // varies along a kept axis, a half type
    let x = init(&[3, 4, 5], 1.0, 2.0);
    let g_rows = init(&[3, 1, 5], 2.0, 1.0);
    for (axes, g) in [(vec![0isize], None), (vec![0, 1], None), (vec![-1], Some(&g_rows))] {
        let (y1, gr1) = loss_and_grads(|x, g, b| x.layer_normalization(&axes, g, b, 1e-3), &x, g, None)?;
        let (y2, gr2) = loss_and_grads(|x, g, b| composite(x, &axes, g, b, 1e-3), &x, g, None)?;
        close(&y1, &y2, 0.0, &format!("axes {axes:?}"));
        for (a, c) in gr1.iter().zip(&gr2) {
            close(a, c, 0.0, &format!("axes {axes:?}: gradient"));
        }
    }
    // a half type: normalised in f32 and rounded once (as Keras
    // normalises float16), so within half a bf16 ulp (2^-8 relative) of
    // the f64 normalisation (the half composite, ten ops each rounded,
    // was not), its gradient a bf16 tensor
    let h = x.cast(DType::BF16)?;
    let g = init(&[5], 3.0, 1.0).cast(DType::BF16)?;
    let y = h.layer_normalization(&[-1], Some(&g), None, 1e-3)?;
    assert_eq!(y.dtype(), DType::BF16);
    let want = composite(&h.cast(DType::F64)?, &[-1], Some(&g.cast(DType::F64)?), None, 1e-3)?.to_vec_f64();
    for (i, (a, w)) in y.to_vec_f64().iter().zip(&want).enumerate() {
        assert!(
            (a - w).abs() <= 1.01 * w.abs() * 2f64.powi(-8),
            "bf16 element {i}: {a} against {w}"
        );
    }
    let (_, grads) = loss_and_grads(|x, g, b| x.layer_normalization(&[-1], g, b, 1e-3), &h, Some(&g), None)?;
    assert!(grads.iter().all(|t| t.dtype() == DType::BF16));
    Ok(())
}

/// Forward mode (`ForwardAccumulator`) gives the directional derivative,
/// against central differences in f64, with tangents on `x`, `gamma` and
/// `beta` together and on each alone.
#[test]
fn forward_mode_matches_finite_differences() -> Result<()> {
    let x = init(&[3, 2, 5], 1.0, 1.7);
    let g = init(&[2, 5], 2.0, 1.1);
    let b = init(&[5], 3.0, 0.6);
    let (tx, tg, tb) = (
        init(&[3, 2, 5], 4.0, 1.0),
        init(&[2, 5], 5.0, 1.0),
        init(&[5], 6.0, 1.0),
    );
    let f = |x: &Tensor, g: &Tensor, b: &Tensor| x.layer_normalization(&[1, 2], Some(g), Some(b), 1e-3);
    let zero = |t: &Tensor| t.zeros_like();
    for (which, (dx, dg, db)) in [
        ("all", (tx.clone(), tg.clone(), tb.clone())),
        ("x", (tx.clone(), zero(&tg), zero(&tb))),
        ("gamma", (zero(&tx), tg.clone(), zero(&tb))),
        ("beta", (zero(&tx), zero(&tg), tb.clone())),
    ] {
        let acc = ForwardAccumulator::new();
        acc.watch(&x, &dx)?;
        acc.watch(&g, &dg)?;
        acc.watch(&b, &db)?;
        let y = acc.record(|| f(&x, &g, &b))?;
        let t = acc.jvp(&y)?.expect("a tangent");
        let h = 1e-6;
        let at = |s: f64| {
            f(
                &x.add(&dx.mul_scalar(s)?)?,
                &g.add(&dg.mul_scalar(s)?)?,
                &b.add(&db.mul_scalar(s)?)?,
            )
        };
        let fd = at(h)?.sub(&at(-h)?)?.mul_scalar(0.5 / h)?;
        close(&t, &fd, 1e-7, &format!("tangent along {which}"));
    }
    Ok(())
}

/// A traced step's gradient is the two fused nodes, `LayerNorm` and
/// `LayerNormGrad` (no mean, variance or their gradients in the graph), on
/// a shape other than the bench's (two trailing axes of a rank-3 input),
/// and equals eager's, also at new inputs.
#[test]
fn traced_gradient_is_the_fused_ops() {
    let step = |x: &Tensor, g: &Tensor, b: &Tensor| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            tape.watch(&[x.clone(), g.clone(), b.clone()]);
            weighted(&x.layer_normalization(&[-2, -1], Some(g), Some(b), 1e-5)?.tanh()?)
        })?;
        let grads = tape.gradient(&loss, &[x.clone(), g.clone(), b.clone()])?;
        let mut out = vec![loss];
        out.extend(grads.into_iter().map(|g| g.unwrap()));
        Ok(out)
    };
    let f = function(move |(x, g, b): &(Tensor, Tensor, Tensor)| step(x, g, b));
    for s in [1.0, 2.0] {
        let args = (
            init(&[4, 6, 10], s, 2.0),
            init(&[6, 10], s + 1.0, 1.0),
            init(&[6, 10], s + 2.0, 0.5),
        );
        let traced = f.call(&args).unwrap();
        let eager = step(&args.0, &args.1, &args.2).unwrap();
        for (i, (t, e)) in traced.iter().zip(&eager).enumerate() {
            close(t, e, 1e-13, &format!("output {i}, seed {s}"));
        }
    }
    let graph = f
        .graph(&(
            init(&[4, 6, 10], 0.0, 1.0),
            init(&[6, 10], 0.0, 1.0),
            init(&[6, 10], 0.0, 1.0),
        ))
        .unwrap();
    assert_eq!(
        (
            graph.count("LayerNorm"),
            graph.count("LayerNormGrad"),
            graph.count("Mean")
        ),
        (1, 1, 0),
        "{graph}"
    );
}

/// Per-example gradients, `vmap` of a tape over a batch of inputs, with
/// shared parameters and with a batched `gamma`, batch both fused ops
/// without the loop and equal one tape per example (each example's
/// `dgamma`, `dbeta` its own sums).
#[test]
fn per_example_gradients_batch_without_the_loop() -> Result<()> {
    const B: usize = 3;
    let xs = init(&[B, 4, 6], 1.0, 2.0);
    let (g_shared, g_batched, b) = (init(&[6], 2.0, 1.0), init(&[B, 6], 4.0, 1.0), init(&[6], 3.0, 0.5));
    let loss = |x: &Tensor, g: &Tensor, b: &Tensor| weighted(&x.layer_normalization(&[-1], Some(g), Some(b), 1e-3)?);
    for (g, g_axis) in [(&g_shared, None), (&g_batched, Some(0))] {
        let f = vmap(
            move |a: &[Tensor]| {
                let tape = GradientTape::new();
                let l = tape.record(|| {
                    tape.watch(&a.to_vec());
                    loss(&a[0], &a[1], &a[2])
                })?;
                Ok(tape
                    .gradient(&l, &a.to_vec())?
                    .into_iter()
                    .map(|g| g.unwrap())
                    .collect())
            },
            &[Some(0), g_axis, None],
            &[Some(0)],
        );
        let got = f.call(&[xs.clone(), g.clone(), b.clone()])?;
        assert!(f.fallbacks().is_empty(), "{:?}", f.fallbacks());
        for e in 0..B {
            let x = xs.narrow(0, e, 1)?.reshape(&[4, 6])?;
            let ge = if g_axis.is_some() {
                g.narrow(0, e, 1)?.reshape(&[6])?
            } else {
                g.clone()
            };
            let tape = GradientTape::new();
            let l = tape.record(|| {
                tape.watch(&[x.clone(), ge.clone(), b.clone()]);
                loss(&x, &ge, &b)
            })?;
            let want = tape.gradient(&l, &[x.clone(), ge.clone(), b.clone()])?;
            for (i, w) in want.iter().enumerate() {
                let s = got[i].shape()[1..].to_vec();
                let one = got[i].narrow(0, e, 1)?.reshape(&s)?;
                let what = format!("gamma axis {g_axis:?}, example {e}, gradient {i}");
                close(&one, w.as_ref().unwrap(), 1e-12, &what);
            }
        }
    }
    Ok(())
}

/// The fused op's rule keeps `x` and `gamma`, not its output nor any
/// `[rows, n]` intermediate: with a persistent tape alive, the output is
/// freed once the caller drops it, and a one-shot tape frees `x`'s extra
/// reference as backward runs.
#[test]
fn the_tape_keeps_only_x_and_gamma() -> Result<()> {
    let x = init(&[6, 16], 1.0, 2.0);
    let (g, b) = (init(&[16], 2.0, 1.0), init(&[16], 3.0, 0.5));
    let tape = GradientTape::persistent();
    let (loss, weak_y) = tape.record(|| {
        tape.watch(&x);
        let y = x.layer_normalization(&[-1], Some(&g), Some(&b), 1e-3)?;
        let w = y.downgrade();
        Ok((y.sum_all()?, w))
    })?;
    assert!(!weak_y.is_alive(), "the output is not kept");
    assert!(tape.gradient(&loss, &x)?.is_some());
    drop(tape);
    let once = GradientTape::new();
    let before = x.ref_count();
    let loss = once.record(|| {
        once.watch(&x);
        x.layer_normalization(&[-1], Some(&g), Some(&b), 1e-3)?.sum_all()
    })?;
    assert!(x.ref_count() > before, "the rule holds x while the tape may run");
    once.gradient(&loss, &x)?;
    assert_eq!(x.ref_count(), before, "a one-shot tape lets x go as backward runs");
    Ok(())
}

/// Rows far from zero (mean 1000, spread about 1) in `f32`: the row
/// statistics keep the digits that plain `f32` sums over the row lose
/// (the mean's error would be about 1e-2 of the spread at 4096 columns),
/// and the column sums of the gradients over 2000 rows keep theirs. The
/// reference is the same op on the same values in `f64`. What `x − mean`
/// in `f32` costs (half an ulp of 1000, 3e-5, over a spread of about 1)
/// bounds the error of `y` (1.6e-5 of its scale here; a mean summed in
/// `f32` runs of eight made it 3.2e-5), and of `dgamma`, that error
/// summed over 2000 rows (8e-4).
#[test]
fn f32_rows_far_from_zero_keep_their_digits() -> Result<()> {
    for (rows, cols) in [(3usize, 4096usize), (5, 300), (2000, 72)] {
        let n = rows * cols;
        let v: Vec<f32> = (0..n).map(|i| 1000.0 + ((i as f32) * 0.37).sin() * 1.5).collect();
        let x32 = Tensor::from_vec(v, &[rows, cols])?;
        let x64 = x32.cast(DType::F64)?;
        let g = init(&[cols], 3.0, 1.3);
        let b = init(&[cols], 4.0, 0.8);
        let fused = |x: &Tensor, g: Option<&Tensor>, b: Option<&Tensor>| x.layer_normalization(&[1], g, b, 1e-5);
        let (g32, b32) = (g.cast(DType::F32)?, b.cast(DType::F32)?);
        let (y32, d32) = loss_and_grads(fused, &x32, Some(&g32), Some(&b32))?;
        let (y64, d64) = loss_and_grads(fused, &x64, Some(&g), Some(&b))?;
        let what = format!("{rows}x{cols}");
        close(&y32, &y64, 2.5e-5, &format!("y {what}"));
        for (k, (name, tol)) in [("dx", 2e-5), ("dgamma", 2e-3), ("dbeta", 2e-5)].iter().enumerate() {
            close(&d32[k], &d64[k], *tol, &format!("{name} {what}"));
        }
    }
    Ok(())
}
