//! The `xent_keeps_softmax` pass: a traced sparse softmax cross-entropy
//! and its gradient node of the same labels and logits become the eager
//! pair (the forward node also writes the softmax, the gradient node reads
//! it instead of the logits). Checked: the pass fires once per pair, the
//! compiled graph's losses and gradients are the bits of the same graph
//! with the pass off and of the eager step (whose rule reads the softmax
//! its kernel kept), for row lengths 1, 7, 64, 1000 and 4096 (the kernel's
//! short-row and long-row paths), `f32` and `f64`, `i32` and `i64`
//! labels; two cross-entropies of one logits pair each with its own
//! gradient; half logits do not pair; a second order taken inside the
//! trace keeps TensorFlow's numbers; a label out of range is still the
//! forward's error. The expected values are the eager ones (bit for bit)
//! and, for the second order, TensorFlow 2.21's (as in
//! `sparse_xent_grad_op`).

use gradtape::{DType, Function, FunctionOptions, GradientOptions, GradientTape, Result, Rng, Tensor};

const PASS: &str = "xent_keeps_softmax";

fn no_grad() -> gradtape::Error {
    gradtape::Error::InvalidArgument {
        op: "test",
        msg: "no gradient".into(),
    }
}

/// The losses and the gradient of `Σ w · loss` with respect to the logits.
fn step((x, labels, w): &(Tensor, Tensor, Tensor)) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(x);
        Tensor::sparse_softmax_cross_entropy_with_logits(labels, x)
    })?;
    let opts = GradientOptions::default().output_gradients(vec![w.clone()]);
    let [dx] = tape.gradient_with(&loss, &[x], opts)?;
    Ok(vec![loss, dx.ok_or_else(no_grad)?])
}

fn traced<I, F>(body: F, pass_on: bool) -> Result<Function<I, Vec<Tensor>, F>>
where
    I: gradtape::TensorStruct + Send + Sync + 'static,
    F: Fn(&I) -> Result<Vec<Tensor>> + Send + Sync + 'static,
{
    let opts = match pass_on {
        true => FunctionOptions::default(),
        false => FunctionOptions::default().disable_pass(PASS)?,
    };
    Ok(Function::with_options(body, opts))
}

fn bits(t: &Tensor) -> Vec<u64> {
    match t.dtype() {
        DType::F32 => t.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits() as u64).collect(),
        // (the half types' values are exact in f64)
        _ => t.to_vec_f64().iter().map(|v| v.to_bits()).collect(),
    }
}

fn same_bits(what: &str, got: &[Tensor], want: &[Tensor]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert_eq!(a.shape(), b.shape(), "{what}: output {i}");
        assert!(bits(a) == bits(b), "{what}: output {i} differs: {a:?} against {b:?}");
    }
}

#[test]
fn the_pair_gives_the_eager_bits_at_every_row_length() -> Result<()> {
    let mut rng = Rng::new(2828);
    for (dt, classes) in [
        (DType::F32, 1),
        (DType::F32, 7),
        (DType::F64, 7),
        (DType::F32, 64),
        (DType::F32, 1000),
        (DType::F64, 1000),
        (DType::F32, 4096),
    ] {
        let rows = 37;
        let x = rng.normal(&[rows, classes], 0.0, 3.0, dt)?;
        let w = rng.normal(&[rows], 0.0, 1.0, dt)?;
        let lab: Vec<i64> = (0..rows).map(|r| ((r * 7919 + 5) % classes) as i64).collect();
        for labels in [
            Tensor::from_vec(lab.clone(), &[rows])?,
            Tensor::from_vec(lab, &[rows])?.cast(DType::I32)?,
        ] {
            let what = format!("{dt:?} [{rows}, {classes}] {:?} labels", labels.dtype());
            let args = (x.clone(), labels, w.clone());
            let eager = step(&args)?;
            let on = traced(step, true)?;
            let off = traced(step, false)?;
            assert_eq!(on.concrete(&args)?.compile_stats().count(PASS), Some(1), "{what}");
            assert_eq!(off.concrete(&args)?.compile_stats().count(PASS), None, "{what}");
            let listing = on.concrete(&args)?.optimized_graph().to_string();
            assert!(
                listing.contains("SparseSoftmaxCrossEntropyGradFromSoftmax"),
                "{what}: {listing}"
            );
            same_bits(&format!("{what}, pass on against eager"), &on.call(&args)?, &eager);
            same_bits(&format!("{what}, pass off against eager"), &off.call(&args)?, &eager);
            // the values themselves, against each row's f64 softmax
            let (xs, ls, gs) = (x.to_vec_f64(), args.1.to_vec_f64(), eager[1].to_vec_f64());
            let wv = w.to_vec_f64();
            for r in 0..rows {
                let row = &xs[r * classes..(r + 1) * classes];
                let m = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
                let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
                for j in 0..classes {
                    let want = wv[r] * ((row[j] - lse).exp() - if j == ls[r] as usize { 1.0 } else { 0.0 });
                    let got = gs[r * classes + j];
                    let tol = if dt == DType::F32 { 2e-6 } else { 1e-14 };
                    assert!(
                        (got - want).abs() <= tol * (1.0 + wv[r].abs()),
                        "{what}: [{r}, {j}] {got} against {want}"
                    );
                }
            }
        }
    }
    Ok(())
}

#[test]
fn two_cross_entropies_of_one_logits_pair_each_with_its_own_gradient() -> Result<()> {
    let body = |(x, a, b): &(Tensor, Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            tape.watch(x);
            let la = Tensor::sparse_softmax_cross_entropy_with_logits(a, x)?.sum_all()?;
            let lb = Tensor::sparse_softmax_cross_entropy_with_logits(b, x)?
                .mul_scalar(0.25)?
                .sum_all()?;
            la.add(&lb)
        })?;
        Ok(vec![loss.clone(), tape.gradient(&loss, x)?.ok_or_else(no_grad)?])
    };
    let x = Rng::new(5).normal(&[16, 300], 0.0, 2.0, DType::F32)?;
    let a = Tensor::from_vec((0..16i64).map(|i| (i * 37) % 300).collect(), &[16])?;
    let b = Tensor::from_vec((0..16i64).map(|i| (i * 11 + 3) % 300).collect(), &[16])?;
    let args = (x, a, b);
    let on = traced(body, true)?;
    assert_eq!(on.concrete(&args)?.compile_stats().count(PASS), Some(2));
    same_bits(
        "two pairs against the pass off",
        &on.call(&args)?,
        &traced(body, false)?.call(&args)?,
    );
    same_bits("two pairs against eager", &on.call(&args)?, &body(&args)?);
    Ok(())
}

#[test]
fn half_logits_do_not_pair() -> Result<()> {
    let mut rng = Rng::new(9);
    for dt in [DType::F16, DType::BF16] {
        let x = rng.normal(&[8, 40], 0.0, 2.0, DType::F32)?.cast(dt)?;
        let w = Tensor::ones(&[8], dt);
        let labels = Tensor::from_vec((0..8i64).map(|i| i * 5).collect(), &[8])?;
        let args = (x, labels, w);
        let on = traced(step, true)?;
        assert_eq!(on.concrete(&args)?.compile_stats().count(PASS), Some(0), "{dt:?}");
        same_bits(&format!("{dt:?}"), &on.call(&args)?, &traced(step, false)?.call(&args)?);
    }
    Ok(())
}

// TensorFlow 2.21 in f64 (`sparse_xent_grad_op`'s numbers and nested
// tapes): `loss = Σ w · sparse_xent([2, 0, 3], X)`, `G = dloss/dX`,
// `s = Σ G · V`, and `ds/dX` (the second of `first_and_second`'s results).
use super::sparse_xent_grad_op::{first_and_second, TF_HVP_X, W, X};

#[test]
fn a_second_order_inside_the_trace_keeps_tensorflows_numbers() -> Result<()> {
    let body = |(x, w, labels): &(Tensor, Tensor, Tensor)| first_and_second(x, w, labels);
    let args = (
        Tensor::from_vec(X.to_vec(), &[3, 4])?,
        Tensor::from_vec(W.to_vec(), &[3])?,
        Tensor::vector(&[2i64, 0, 3]),
    );
    let f = traced(body, true)?;
    let got = f.call(&args)?[1].to_vec::<f64>()?;
    for (i, (a, b)) in got.iter().zip(&TF_HVP_X).enumerate() {
        assert!((a - b).abs() <= 1e-13 * (1.0 + b.abs()), "d/dx[{i}]: {a} against {b}");
    }
    same_bits(
        "second order against the pass off",
        &f.call(&args)?,
        &traced(body, false)?.call(&args)?,
    );
    Ok(())
}

#[test]
fn a_label_out_of_range_is_the_forwards_error() -> Result<()> {
    let f = traced(step, true)?;
    let w = Tensor::vector(&[1.0f32, 1.0]);
    let x = Tensor::zeros(&[2, 3], DType::F32);
    f.call(&(x.clone(), Tensor::vector(&[0i64, 1]), w.clone()))?;
    assert_eq!(
        f.concrete(&(x.clone(), Tensor::vector(&[0i64, 1]), w.clone()))?
            .compile_stats()
            .count(PASS),
        Some(1)
    );
    for bad in [3i64, -1] {
        let e = f
            .call(&(x.clone(), Tensor::vector(&[0i64, bad]), w.clone()))
            .expect_err("a label out of range")
            .to_string();
        assert!(
            e.contains("sparse_softmax_cross_entropy_with_logits") && e.contains(&bad.to_string()),
            "{e}"
        );
    }
    Ok(())
}
