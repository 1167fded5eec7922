//! The sparse softmax cross-entropy's row kernels against references
//! computed here in `f64` (the log-sum-exp `m + ln Σ e^(x − m)` and the
//! softmax, summed in `f64`): losses and gradients of `f32` and `f64`
//! logits, from 1 to 100 000 classes, with huge logits (whose naive
//! exponentials overflow), `-inf` logits, rows of only `-inf` and rows
//! with a NaN. Each of the kernel's three paths is checked: the loss alone
//! (nothing records the op: the exponentials summed, no softmax kept), the
//! loss under a tape (the softmax kept, the gradient from it) and the
//! traced step (the gradient an op of the logits); the paths give the
//! same bits.

use gradtape::{function, DType, GradientTape, Result, Tensor, Variable};

/// Deterministic logits in about `[-scale, scale]` (a linear congruential
/// generator: no dependence on gradtape's random ops).
fn logits(n: usize, scale: f64, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The `f64` references of one row: the loss `lse(x) − x[label]` and the
/// gradient `g · (softmax(x) − one_hot(label))`.
fn reference(x: &[f64], label: usize, g: f64) -> (f64, Vec<f64>) {
    let m = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY || x.iter().any(|v| v.is_nan()) {
        return (f64::NAN, vec![f64::NAN; x.len()]);
    }
    let s: f64 = x.iter().map(|&v| (v - m).exp()).sum();
    // (the shift first: `m + ln s` would lose `ln s` beside a huge `m`)
    let loss = (m - x[label]) + s.ln();
    let grad = x
        .iter()
        .enumerate()
        .map(|(j, &v)| g * ((v - m).exp() / s - if j == label { 1.0 } else { 0.0 }))
        .collect();
    (loss, grad)
}

/// The three paths' losses and gradients of `x` `[rows, classes]` (in
/// `dtype`) with `labels` and upstream gradients `g`: (loss without a
/// tape, loss and gradient under a tape, loss and gradient traced).
#[allow(clippy::type_complexity)]
fn paths(
    x: &[f64],
    classes: usize,
    labels: &[i64],
    g: &[f64],
    dtype: DType,
) -> Result<(Vec<f64>, [(Vec<f64>, Vec<f64>); 2])> {
    let rows = labels.len();
    let xt = Tensor::from_vec(x.to_vec(), &[rows, classes])?.cast(dtype)?;
    let lt = Tensor::from_vec(labels.to_vec(), &[rows])?;
    let gt = Tensor::from_vec(g.to_vec(), &[rows])?.cast(dtype)?;
    let alone = Tensor::sparse_softmax_cross_entropy_with_logits(&lt, &xt)?.to_vec_f64();
    let var = Variable::new(xt.clone());
    let step = {
        let (var, lt, gt) = (var.clone(), lt.clone(), gt.clone());
        move |_: &()| -> Result<Vec<Tensor>> {
            let tape = GradientTape::new();
            let loss = tape.record(|| Tensor::sparse_softmax_cross_entropy_with_logits(&lt, &var.read()))?;
            let weighted = tape.record(|| loss.mul(&gt)?.sum(&[0], false))?;
            let grad = tape.gradient(&weighted, std::slice::from_ref(&var))?;
            Ok(vec![loss, grad[0].clone().expect("the logits get a gradient")])
        }
    };
    let eager = step(&())?;
    let traced = function(step).call(&())?;
    let pair = |v: &[Tensor]| (v[0].to_vec_f64(), v[1].to_vec_f64());
    Ok((alone, [pair(&eager), pair(&traced)]))
}

/// Whether `a` is within `tol` (relative to `max(1, |b|)`) of `b`, NaN
/// matching NaN and infinities matching exactly.
fn close(a: f64, b: f64, tol: f64) -> bool {
    if b.is_nan() || a.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if b.is_infinite() {
        return a == b;
    }
    (a - b).abs() <= tol * b.abs().max(1.0)
}

/// Checks the three paths of `x` against [`reference`] (losses to `tol`
/// relative, gradients to `tol` absolute, each scaled by `|g|`) and their
/// bits against each other.
fn check(name: &str, x: &[f64], classes: usize, labels: &[i64], g: &[f64], dtype: DType, tol: f64) -> Result<()> {
    let (alone, [(l_eager, g_eager), (l_traced, g_traced)]) = paths(x, classes, labels, g, dtype)?;
    // the same bits on every path (NaN as NaN)
    let bits = |v: &[f64]| {
        v.iter()
            .map(|x| if x.is_nan() { u64::MAX } else { x.to_bits() })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        bits(&alone),
        bits(&l_eager),
        "{name} {dtype}: loss alone vs under a tape"
    );
    assert_eq!(bits(&alone), bits(&l_traced), "{name} {dtype}: loss alone vs traced");
    assert_eq!(
        bits(&g_eager),
        bits(&g_traced),
        "{name} {dtype}: gradient eager (kept softmax) vs traced (from the logits)"
    );
    // the reference sees the logits as rounded to `dtype`
    let xr = Tensor::from_vec(x.to_vec(), &[x.len()])?.cast(dtype)?.to_vec_f64();
    for (r, &label) in labels.iter().enumerate() {
        let row = &xr[r * classes..(r + 1) * classes];
        let (want_l, want_g) = reference(row, label as usize, g[r]);
        assert!(
            close(alone[r], want_l, tol),
            "{name} {dtype} row {r}: loss {} against {want_l}",
            alone[r]
        );
        for (j, (&got, &want)) in g_eager[r * classes..(r + 1) * classes].iter().zip(&want_g).enumerate() {
            let ok = if want.is_nan() {
                got.is_nan()
            } else {
                (got - want).abs() <= tol * g[r].abs().max(1.0)
            };
            assert!(ok, "{name} {dtype} row {r} class {j}: gradient {got} against {want}");
        }
    }
    Ok(())
}

#[test]
fn rows_of_1_to_100k_classes_match_f64_references() -> Result<()> {
    for classes in [1usize, 2, 10, 63, 64, 65, 127, 1000, 100_000] {
        let rows = if classes >= 100_000 { 3 } else { 7 };
        let x = logits(rows * classes, 8.0, classes as u64);
        let labels: Vec<i64> = (0..rows).map(|r| ((r * 7919 + 3) % classes) as i64).collect();
        let g: Vec<f64> = (0..rows)
            .map(|r| 0.5 + r as f64 * 0.75 - if r % 3 == 1 { 3.0 } else { 0.0 })
            .collect();
        check("random", &x, classes, &labels, &g, DType::F64, 1e-13)?;
        // f32: the loss relative to its size, a sum of `classes` terms
        check("random", &x, classes, &labels, &g, DType::F32, 2e-6)?;
    }
    Ok(())
}

#[test]
fn huge_logits_do_not_overflow() -> Result<()> {
    // e^x overflows f32 above 88.7 and f64 above 709.8: the shifted
    // exponentials do not; 1e30 apart, a row is one-hot
    let x = vec![
        100.0, 95.0, 99.0, -3.0, //
        1e30, -1e30, 0.0, 1e30, //
        3e38, 2.9e38, -3e38, 1.0, //
        800.0, 800.0, 799.0, -800.0,
    ];
    let labels = [1i64, 3, 0, 2];
    let g = [1.0, -2.0, 0.5, 3.0];
    check("huge", &x, 4, &labels, &g, DType::F64, 1e-14)?;
    check("huge", &x, 4, &labels, &g, DType::F32, 1e-6)?;
    Ok(())
}

#[test]
fn minus_infinity_and_nan_rows() -> Result<()> {
    let (ninf, nan) = (f64::NEG_INFINITY, f64::NAN);
    let x = vec![
        0.5, ninf, 2.0, ninf, 1.0, // some keys hidden: their probability 0
        0.5, ninf, 2.0, ninf, 1.0, // the label at -inf: an infinite loss
        ninf, ninf, ninf, ninf, ninf, // all -inf: NaN
        0.5, nan, 2.0, 1.0, 1.0, // a NaN: NaN
        3.0, 3.0, 3.0, 3.0, 3.0, // ties: ln 5
    ];
    let labels = [2i64, 1, 0, 3, 4];
    let g = [1.0, 1.0, 1.0, 1.0, 2.0];
    for dt in [DType::F64, DType::F32] {
        let (alone, [(_, grad), _]) = paths(&x, 5, &labels, &g, dt)?;
        assert_eq!(alone[1], f64::INFINITY, "{dt}: the label's logit -inf");
        assert!(alone[2].is_nan() && alone[3].is_nan(), "{dt}: {alone:?}");
        assert!(
            (alone[4] - 5f64.ln()).abs() < 1e-6,
            "{dt}: ties give ln 5, got {}",
            alone[4]
        );
        // the hidden classes get exactly 0
        assert_eq!((grad[1], grad[3]), (0.0, 0.0), "{dt}: {grad:?}");
        assert!(
            grad[10..20].iter().all(|v| v.is_nan()),
            "{dt}: NaN rows give NaN gradients"
        );
        assert!(grad[..10].iter().chain(&grad[20..]).all(|v| v.is_finite()));
        let tol = if dt == DType::F64 { 1e-14 } else { 1e-6 };
        check("special", &x, 5, &labels, &g, dt, tol)?;
    }
    Ok(())
}

/// Forward over reverse ([`hvp`]: the gradient rule run while a forward
/// accumulator, and no tape, listens) takes the gradient as an op of the
/// logits, as reverse over reverse does: the Hessian-vector product of
/// `Σ tanh(loss)` against reverse over reverse and against central
/// differences of the gradient in `f64`. (The rule took the kept
/// softmax's kernel, which no accumulator sees, wherever no tape listened:
/// a zero H·v.)
#[test]
fn forward_over_reverse_hessian_vector_product_matches_reverse_over_reverse() -> Result<()> {
    let x0 = Tensor::from_vec(vec![-0.135, 1.8875, 2.1175, 1.15, -0.485, 0.935f64], &[2, 3])?;
    let v = Tensor::from_vec(vec![1.1675, 1.39, 2.42, 1.4275, -0.8525, 1.1975f64], &[2, 3])?;
    let labels = Tensor::vector(&[2i64, 0]);
    let f = |x: &Tensor| {
        Tensor::sparse_softmax_cross_entropy_with_logits(&labels, x)?
            .tanh()?
            .sum_all()
    };
    let grad = |x: &Tensor| -> Result<Vec<f64>> {
        let t = GradientTape::new();
        let l = t.record(|| {
            t.watch(x);
            f(x)
        })?;
        Ok(t.gradient(&l, x)?.expect("connected").to_vec_f64())
    };
    let h = 1e-5;
    let (gp, gm) = (grad(&x0.add(&v.mul_scalar(h)?)?)?, grad(&x0.sub(&v.mul_scalar(h)?)?)?);
    let fd: Vec<f64> = gp.iter().zip(&gm).map(|(a, b)| (a - b) / (2.0 * h)).collect();
    let fwd = gradtape::hvp(f, &x0, &v)?.to_vec_f64();
    let outer = GradientTape::new();
    let hv = outer.record(|| {
        outer.watch(&x0);
        let inner = GradientTape::new();
        let l = inner.record(|| {
            inner.watch(&x0);
            f(&x0)
        })?;
        inner.gradient(&l, &x0)?.expect("connected").mul(&v)?.sum_all()
    })?;
    let rev = outer.gradient(&hv, &x0)?.expect("connected").to_vec_f64();
    assert!(fd.iter().any(|z| z.abs() > 0.05), "{fd:?}");
    for i in 0..fd.len() {
        assert!(
            (fwd[i] - rev[i]).abs() < 1e-12,
            "element {i}: forward over reverse {fwd:?}, reverse over reverse {rev:?}"
        );
        assert!(
            (fwd[i] - fd[i]).abs() < 1e-7,
            "element {i}: forward over reverse {fwd:?}, differences {fd:?}"
        );
    }
    Ok(())
}
