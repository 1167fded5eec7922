//! The eager `matmul` rule runs its two products as one job of two tasks,
//! each product whole on one thread (`ops/linalg/matmul_pair.rs`): the
//! gradients are bit for bit those of the rule run one product after the
//! other (`matmul_pair::PAIRS` off), on the shapes of a training step,
//! batched, broadcast and transposed operands, and the pair is run exactly
//! where the module says (not for products below the splitting bound,
//! those with a dimension under 64, `f64`, or while a tape records the backward pass for a
//! higher derivative, whose values are those of the sequential rule too).
//!
//! The reference is the sequential rule itself; its values are checked
//! against TensorFlow by the gradient checker and `ops`' `tf_linalg`.

use gradtape::__internals::kernels::cpu::{sgemm, workers};
use gradtape::__internals::ops::linalg::matmul_pair::{pairs_run, PAIRS};
use gradtape::__internals::scoped::with_flag;
use gradtape::{DType, GradientTape, Result, Tensor};

/// `n` deterministic values in about [-1, 1], different for each `seed`.
fn spread(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i + 31 * seed) * 7919 % 2003) as f32 / 1001.0) - 1.0)
        .collect()
}

fn tensor(shape: &[usize], seed: usize) -> Tensor {
    Tensor::from_vec(spread(shape.iter().product(), seed), shape).unwrap()
}

/// Whether this machine runs pairs at all (two threads, the AVX-512 GEMM).
fn pairs_possible() -> bool {
    workers::threads() > 1 && sgemm::available()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
}

/// The gradients of `sum(op(a) @ op(b) · r)` with respect to `a` and `b`
/// on a one-shot tape, with pairs allowed or not, and whether the rule ran
/// a pair.
fn grads(a: &Tensor, b: &Tensor, (ta, tb): (bool, bool), pairs: bool) -> Result<(Vec<u32>, Vec<u32>, bool)> {
    with_flag(&PAIRS, pairs, || {
        let y = a.matmul_with(b, ta, tb)?;
        let r = tensor(y.shape(), 7);
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            tape.watch(a);
            tape.watch(b);
            a.matmul_with(b, ta, tb)?.mul(&r)?.sum_all()
        })?;
        let before = pairs_run();
        let (ga, gb) = tape.gradient(&loss, &(a.clone(), b.clone()))?;
        let paired = pairs_run() > before;
        let (ga, gb) = (ga.expect("a's gradient"), gb.expect("b's gradient"));
        assert_eq!(ga.shape(), a.shape());
        assert_eq!(gb.shape(), b.shape());
        Ok((bits(&ga), bits(&gb), paired))
    })
}

/// Checks one case: the bits either way, and whether it pairs.
fn check(sa: &[usize], sb: &[usize], t: (bool, bool), pairs: bool) -> Result<()> {
    let (a, b) = (tensor(sa, 1), tensor(sb, 2));
    let (pa, pb, paired) = grads(&a, &b, t, true)?;
    let (sa_, sb_, sequential) = grads(&a, &b, t, false)?;
    assert!(!sequential, "{sa:?} x {sb:?} {t:?}: pairs off");
    assert_eq!(paired, pairs && pairs_possible(), "{sa:?} x {sb:?} {t:?}: paired");
    assert!(pa == sa_, "{sa:?} x {sb:?} {t:?}: a's gradient differs");
    assert!(pb == sb_, "{sa:?} x {sb:?} {t:?}: b's gradient differs");
    Ok(())
}

#[test]
fn paired_products_give_the_bits_of_the_sequential_rule() -> Result<()> {
    // a GPT's layers at issue 28's shape (rows 16·64, width 128): above
    // the splitting bound, every dimension at least 64 (the logits' 65)
    check(&[1024, 128], &[128, 512], (false, false), true)?;
    check(&[1024, 512], &[512, 128], (false, false), true)?;
    check(&[1024, 128], &[128, 65], (false, false), true)?;
    // a batch sharing one weight (the rule folds the batch into rows)
    check(&[16, 64, 128], &[128, 384], (false, false), true)?;
    // batched operands, and broadcast batch dims (summed back for `a`)
    check(&[8, 64, 64], &[8, 64, 96], (false, false), true)?;
    check(&[1, 64, 96], &[6, 96, 72], (false, false), true)
}

#[test]
fn transposed_operands_pair_with_the_same_bits() -> Result<()> {
    // op(a) [96, 200], op(b) [200, 80] in every layout
    for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
        let sa: &[usize] = if ta { &[200, 96] } else { &[96, 200] };
        let sb: &[usize] = if tb { &[80, 200] } else { &[200, 80] };
        check(sa, sb, (ta, tb), true)?;
    }
    // a transposed batch times a shared weight, and the other way round
    check(&[4, 128, 64], &[128, 80], (true, false), true)?;
    check(&[96, 64], &[3, 80, 64], (false, true), true)
}

#[test]
fn small_thin_and_f64_products_stay_one_after_the_other() -> Result<()> {
    // below the splitting bound (each product on one thread anyway): an
    // RNN step's, a batch of small products, a thin one, a tiny one
    check(&[32, 128], &[128, 128], (false, false), false)?;
    check(&[8, 64, 32], &[8, 32, 48], (false, false), false)?;
    check(&[4096, 16], &[16, 12], (false, false), false)?;
    check(&[16, 64], &[64, 64], (false, false), false)?;
    // above it, a batch of products with a dimension under 64 (attention's
    // heads of 32)
    check(&[64, 64, 32], &[64, 32, 64], (false, false), false)?;
    // above the splitting bound with a thin side (24 columns)
    check(&[2048, 300], &[300, 24], (false, false), false)?;
    // f64
    let (a, b) = (
        tensor(&[256, 128], 1).cast(DType::F64)?,
        tensor(&[128, 128], 2).cast(DType::F64)?,
    );
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&a);
        tape.watch(&b);
        a.matmul(&b)?.sum_all()
    })?;
    let before = pairs_run();
    tape.gradient(&y, &(a.clone(), b.clone()))?;
    assert_eq!(pairs_run(), before, "f64");
    // one operand's gradient only: one product
    let a = tensor(&[1024, 128], 1);
    let b = tensor(&[128, 512], 2);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&b);
        a.matmul(&b)?.sum_all()
    })?;
    tape.gradient(&y, &b)?;
    assert_eq!(pairs_run(), before, "one gradient");
    Ok(())
}

/// `d/da sum((∂L/∂b)²)` for `L = sum(a @ b · r)`, an outer tape recording
/// the inner backward pass, with pairs allowed or not, and whether a pair
/// ran.
fn second_order(a: &Tensor, b: &Tensor, pairs: bool) -> Result<(Vec<u32>, bool)> {
    with_flag(&PAIRS, pairs, || {
        let r = tensor(&[a.shape()[0], b.shape()[1]], 7);
        let outer = GradientTape::new();
        let before = pairs_run();
        let z = outer.record(|| {
            outer.watch(a);
            let inner = GradientTape::new();
            let loss = inner.record(|| {
                inner.watch(a);
                inner.watch(b);
                a.matmul(b)?.mul(&r)?.sum_all()
            })?;
            let (_, gb) = inner.gradient(&loss, &(a.clone(), b.clone()))?;
            let gb = gb.expect("b's gradient");
            gb.mul(&gb)?.sum_all()
        })?;
        let paired = pairs_run() > before;
        let g = outer.gradient(&z, a)?.expect("a's second-order gradient");
        Ok((bits(&g), paired))
    })
}

#[test]
fn a_recorded_backward_pass_does_not_pair_and_its_derivative_is_unchanged() -> Result<()> {
    let (a, b) = (tensor(&[256, 128], 1), tensor(&[128, 96], 2));
    let (on, paired) = second_order(&a, &b, true)?;
    assert!(!paired, "the outer tape records the rule's products");
    let (off, _) = second_order(&a, &b, false)?;
    assert!(on == off);
    // d/da sum((aᵀr)²) = 2 r (rᵀ a): one entry against an f64 loop
    let g = second_order(&a, &b, true)?.0;
    let (av, rv) = (spread(256 * 128, 1), spread(256 * 96, 7));
    let (i, j) = (5, 17);
    // (rᵀa)[k, j] = Σ_p r[p, k] a[p, j]
    let rta = |k: usize| {
        (0..256)
            .map(|p| rv[p * 96 + k] as f64 * av[p * 128 + j] as f64)
            .sum::<f64>()
    };
    let terms: Vec<f64> = (0..96).map(|k| 2.0 * rv[i * 96 + k] as f64 * rta(k)).collect();
    let want: f64 = terms.iter().sum();
    // (f32 rounding: a few ulps of the terms' magnitude)
    let scale: f64 = terms.iter().map(|t| t.abs()).sum();
    let got = f32::from_bits(g[i * 128 + j]) as f64;
    assert!((got - want).abs() <= 1e-5 * scale, "{got} against {want}");
    Ok(())
}
