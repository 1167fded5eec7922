//! Edge cases where gradtape once differed from TensorFlow 2.21 (found by
//! a differential run against it): the expected values are TF's, printed
//! in the reference environment, unless a comment says otherwise.

use gradtape::{DType, GradientTape, Result, Tensor};

/// `∂(Σ f(x))/∂x` through `f`.
fn grad(x: &Tensor, f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Option<Tensor>> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(x);
        f(x)?.sum_all()
    })?;
    tape.gradient(&y, x)
}

#[test]
fn int64_casts_wrap_and_round_once() -> Result<()> {
    // tf.cast(int64 → int32) keeps the low 32 bits (NumPy and JAX agree)
    let x = Tensor::vector(&[4294967297i64, -4294967297, 2147483648, (1 << 53) + 1, -7]);
    assert_eq!(x.cast(DType::I32)?.to_vec::<i32>()?, vec![1, -1, -2147483648, 1, -7]);
    // to f32 rounded once: 2^60 + 2^28 + 1 is 1.1529216420458004e18 in TF
    // and NumPy (through f64 it became 2^60)
    let big = Tensor::vector(&[1152921573326323713i64]);
    assert_eq!(big.cast(DType::F32)?.to_vec::<f32>()?[0] as f64, 1.1529216420458004e18);
    assert_eq!(
        big.cast(DType::C64)?.real()?.to_vec::<f32>()?[0] as f64,
        1.1529216420458004e18
    );
    // (i32 sources are exact in f64: unchanged)
    assert_eq!(Tensor::vector(&[-3i32]).cast(DType::I64)?.to_vec::<i64>()?, vec![-3]);
    Ok(())
}

#[test]
fn integer_ranges_count_in_integers() -> Result<()> {
    // tf.range(2^53, 2^53 + 4, 1, dtype=tf.int64)
    let r = Tensor::range(9007199254740992.0, 9007199254740996.0, 1.0, DType::I64)?;
    assert_eq!(
        r.to_vec::<i64>()?,
        vec![9007199254740992, 9007199254740993, 9007199254740994, 9007199254740995]
    );
    assert_eq!(
        Tensor::arange(0.0, 2.5, 1.0, DType::I32)?.to_vec::<i32>()?,
        vec![0, 1, 2]
    );
    assert_eq!(
        Tensor::arange(3.0, -0.5, -1.0, DType::I64)?.to_vec::<i64>()?,
        vec![3, 2, 1, 0]
    );
    assert_eq!(
        Tensor::arange(-5.0, 5.0, 3.0, DType::I64)?.to_vec::<i64>()?,
        vec![-5, -2, 1, 4]
    );
    // TF: "Requires start <= limit when delta > 0" (arange, as NumPy's, is empty)
    let e = Tensor::range(5.0, 0.0, 1.0, DType::I32).unwrap_err().to_string();
    assert!(e.contains("range") && e.contains("start <= limit"), "{e}");
    assert!(Tensor::range(0.0, 5.0, -1.0, DType::F32).is_err());
    assert_eq!(Tensor::arange(5.0, 0.0, 1.0, DType::I32)?.numel(), 0);
    // TF: "Cannot convert 0.5 to EagerTensor of dtype int32"
    assert!(Tensor::range(0.5, 3.0, 1.0, DType::I32).is_err());
    assert!(Tensor::arange(0.0, 3e9, 1e9, DType::I32).is_err());
    Ok(())
}

#[test]
fn sign_has_a_zero_gradient() -> Result<()> {
    // tf.sign's gradient is zeros_like(x), not None
    let x = Tensor::vector(&[-2.0f64, 0.0, 3.0]);
    assert_eq!(grad(&x, |x| x.sign())?.unwrap().to_vec::<f64>()?, vec![0.0; 3]);
    let y = grad(&x, |x| x.sign()?.mul(x))?.unwrap();
    assert_eq!(y.to_vec::<f64>()?, vec![-1.0, 0.0, 1.0]);
    Ok(())
}

#[test]
fn norm_gradient_where_the_sum_of_squares_underflows() -> Result<()> {
    // the value is TF's (0: Σx² underflows f32); the gradient is the true
    // x / ‖x‖ (JAX in f64 on the same x: 0.70710678 each), where TF gives
    // inf and the rule once gave x itself
    let tiny = Tensor::vector(&[1e-30f32, 1e-30]);
    assert_eq!(tiny.norm(&[0], false)?.to_scalar::<f32>()?, 0.0);
    let g = grad(&tiny, |x| x.norm(&[0], false))?.unwrap().to_vec::<f32>()?;
    assert!(
        g.iter().all(|v| (v - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6),
        "{g:?}"
    );
    let rows = Tensor::from_vec(vec![3e-30f32, -4e-30, 0.0, 0.0, 3.0, 4.0], &[3, 2])?;
    let g = grad(&rows, |x| x.norm(&[1], false))?.unwrap().to_vec::<f32>()?;
    let want = [0.6, -0.8, 0.0, 0.0, 0.6, 0.8];
    assert!(g.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6), "{g:?}");
    Ok(())
}

#[test]
fn sign_of_negative_zero_is_positive_zero() -> Result<()> {
    // tf.sign([nan, -0.0, 0.0, -2.5]) = [nan, 0.0, 0.0, -1.0]: +0 for -0
    // (the bits, not only the value), eagerly and traced
    let x = Tensor::vector(&[f32::NAN, -0.0, 0.0, -2.5]);
    let f = gradtape::function(|x: &Tensor| x.sign());
    for y in [x.sign()?, f.call(&x)?] {
        let y = y.to_vec::<f32>()?;
        assert!(y[0].is_nan());
        assert_eq!(
            y[1..].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            [0.0f32, 0.0, -1.0].map(f32::to_bits)
        );
    }
    let y = Tensor::vector(&[-0.0f64]).sign()?.to_vec::<f64>()?;
    assert_eq!(y[0].to_bits(), 0.0f64.to_bits());
    Ok(())
}

#[test]
fn reshape_infers_one_minus_one_as_tensorflow() -> Result<()> {
    // tf.reshape(tf.range(6), s) for each s, in TF 2.21: the shapes, or an
    // InvalidArgumentError
    let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32)?;
    for (s, want) in [
        (&[-1isize, 3][..], &[2usize, 3][..]),
        (&[2, -1], &[2, 3]),
        (&[-1], &[6]),
        (&[1, -1, 2], &[1, 3, 2]),
    ] {
        let y = x.reshape_inferred(s)?;
        assert_eq!(y.shape(), want, "{s:?}");
        assert_eq!(y.to_vec::<f32>()?, x.to_vec::<f32>()?);
    }
    for s in [&[-1isize, 4][..], &[-1, -1], &[-2, 3], &[4, 2]] {
        assert!(x.reshape_inferred(s).is_err(), "{s:?} should fail");
    }
    // empty tensors: beside a size 0 the -1 is the input's sizes over the
    // others', zeros counted as ones, rounded down (TF's rule)
    for (from, s, want) in [
        (&[0usize, 3][..], &[-1isize, 3][..], &[0usize, 3][..]),
        (&[0, 3], &[-1, 0], &[3, 0]),
        (&[2, 0, 3], &[-1, 0], &[6, 0]),
        (&[0, 3], &[-1, 2, 0], &[1, 2, 0]),
        (&[0, 3], &[-1], &[0]),
        (&[0, 3], &[0, -1], &[0, 3]),
        (&[0, 3], &[-1, 5], &[0, 5]),
        (&[0], &[-1, 0], &[1, 0]),
        (&[3, 0, 4], &[0, -1], &[0, 12]),
        (&[3, 0, 4], &[-1, 0, 5], &[2, 0, 5]),
    ] {
        let e = Tensor::zeros(from, DType::F32);
        assert_eq!(e.reshape_inferred(s)?.shape(), want, "{from:?} to {s:?}");
    }
    // sizes whose product overflows: an error, not a panic
    let big = isize::MAX / 2;
    assert!(Tensor::zeros(&[0], DType::F32)
        .reshape_inferred(&[-1, 0, big, big])
        .is_err());
    assert!(x.reshape_inferred(&[-1, big, big]).is_err());
    // a non-empty input beside a size 0: an error
    assert!(Tensor::zeros(&[3], DType::F32).reshape_inferred(&[-1, 0]).is_err());
    // a scalar to [-1]: [1]; differentiable as reshape
    let s = Tensor::scalar(2.0f32);
    assert_eq!(s.reshape_inferred(&[-1])?.shape(), &[1]);
    let g = grad(&x, |x| x.reshape_inferred(&[-1, 2])?.square())?.expect("a gradient");
    assert_eq!(g.to_vec::<f32>()?, vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
    Ok(())
}

#[test]
fn segment_extrema_of_infinities_pass_their_gradient() -> Result<()> {
    // x = [inf, -inf, 1, -inf], ids [0, 1, 1, 2]: TF 2.21's values and
    // d(Σ y)/dx. The sorted max / min of a segment of ±inf alone is that
    // infinity (its gradient passes); the unsorted ones start from the
    // dtype's finite extreme, which an infinity never beats (gradient 0).
    let inf = f64::INFINITY;
    let ids = Tensor::vector(&[0i64, 1, 1, 2]);
    type Seg = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let cases: [(&str, Seg, [f64; 4], [f64; 4]); 4] = [
        (
            "segment_min",
            |x, i| x.segment_min(i),
            [inf, -inf, -inf, 0.0],
            [1.0, 1.0, 0.0, 1.0],
        ),
        (
            "segment_max",
            |x, i| x.segment_max(i),
            [inf, 1.0, -inf, 0.0],
            [1.0, 0.0, 1.0, 1.0],
        ),
        (
            "unsorted_segment_min",
            |x, i| x.unsorted_segment_min(i, 4),
            [f64::MAX, -inf, -inf, f64::MAX],
            [0.0, 1.0, 0.0, 1.0],
        ),
        (
            "unsorted_segment_max",
            |x, i| x.unsorted_segment_max(i, 4),
            [inf, 1.0, f64::MIN, f64::MIN],
            [1.0, 0.0, 1.0, 0.0],
        ),
    ];
    for dt in [DType::F64, DType::F32] {
        let x = Tensor::vector(&[inf, -inf, 1.0, -inf]).cast(dt)?;
        for (name, f, want, dwant) in cases {
            let n = if name.starts_with("segment") { 3 } else { 4 };
            let mut want = want[..n].to_vec();
            if dt == DType::F32 {
                // (the f32 fill is f32's extreme)
                for w in want.iter_mut().filter(|w| w.is_finite() && w.abs() > 1e300) {
                    *w = w.signum() * f32::MAX as f64;
                }
            }
            assert_eq!(f(&x, &ids)?.to_vec_f64(), want, "{name} {dt}");
            let g = grad(&x, |x| f(x, &ids))?.expect("connected");
            assert_eq!(g.to_vec_f64(), dwant, "{name} {dt} gradient");
        }
    }
    Ok(())
}

#[test]
fn guarded_products_multiply_their_cotangent_at_zero() -> Result<()> {
    // TF 2.21 and JAX: d/dy xlogy(x, y) = g · x / y is 0 · g at x = 0, so
    // NaN for a cotangent of inf or NaN (as d/dx = g · xlogy(x ≠ 0, y)),
    // and 0 for a finite one; divide_no_nan alike in y at y = 0, while
    // its d/dx = divide_no_nan(g, y) is 0 there whatever g
    let (x, y) = (Tensor::vector(&[0.0f64, 0.0, 2.0]), Tensor::vector(&[2.0f64, 0.0, 0.5]));
    for c in [f64::INFINITY, f64::NAN, 3.0] {
        type Op = fn(&Tensor, &Tensor) -> Result<Tensor>;
        let ops: [(&str, Op); 3] = [
            ("xlogy", Tensor::xlogy),
            ("xlog1py", Tensor::xlog1py),
            ("divide_no_nan", |x, y| Tensor::divide_no_nan(y, x)),
        ];
        for (name, f) in ops {
            let tape = GradientTape::new();
            let l = tape.record(|| {
                tape.watch(&x);
                tape.watch(&y);
                let z = f(&x, &y)?;
                z.mul(&z.full_like(c))?.sum_all()
            })?;
            let g = tape.gradient(&l, &[&x, &y])?;
            // (for divide_no_nan(y, x), x is the divisor: its 0s guard)
            let guarded = if name == "divide_no_nan" { 0 } else { 1 };
            let at_zero = g[guarded].as_ref().expect("connected").to_vec_f64();
            for v in &at_zero[..2] {
                assert_eq!(v.is_nan(), !c.is_finite(), "{name} cotangent {c}: {at_zero:?}");
                assert!(v.is_nan() || *v == 0.0, "{name} cotangent {c}: {at_zero:?}");
            }
        }
    }
    Ok(())
}

#[test]
fn inverse_hyperbolics_of_huge_values_are_finite() -> Result<()> {
    // TF 2.21: tf.math.acosh / tf.math.asinh of [max, -max, 0.75·max, 1e300
    // (1e38 in f32), -90, 0.5, 1] (std's forms overflowed to inf above half
    // the largest float; random programs against TF, seed 25's program 349:
    // acosh(f64::MAX) through an unsorted segment min of nothing)
    let nan = f64::NAN;
    // (dtype, its largest value, a huge one, acosh's values, asinh's)
    type Case = (DType, f64, f64, [f64; 7], [f64; 7]);
    let cases: [Case; 2] = [
        (
            DType::F64,
            f64::MAX,
            1e300,
            [
                710.4758600739439,
                nan,
                710.1881780014921,
                691.4686750787736,
                nan,
                nan,
                0.0,
            ],
            [
                710.4758600739439,
                -710.4758600739439,
                710.1881780014921,
                691.4686750787736,
                -5.192987713658941,
                0.48121182505960347,
                0.881373587019543,
            ],
        ),
        (
            DType::F32,
            f32::MAX as f64,
            1e38,
            [
                89.41598510742188,
                nan,
                89.12830352783203,
                88.19137573242188,
                nan,
                nan,
                0.0,
            ],
            [
                89.41598510742188,
                -89.41598510742188,
                89.12830352783203,
                88.19137573242188,
                -5.19298791885376,
                0.4812118411064148,
                0.8813735842704773,
            ],
        ),
    ];
    for (dt, max, big, acosh, asinh) in cases {
        let x = Tensor::vector(&[max, -max, max / 2.0 * 1.5, big, -90.0, 0.5, 1.0]).cast(dt)?;
        for (name, got, want) in [("acosh", x.acosh()?, acosh), ("asinh", x.asinh()?, asinh)] {
            let got = got.try_to_vec_f64()?;
            for (g, w) in got.iter().zip(want) {
                let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= 4e-7 * w.abs();
                assert!(ok, "{dt} {name}: {got:?}, TensorFlow {want:?}");
            }
        }
    }
    Ok(())
}

#[test]
fn diag_places_non_finite_values_on_the_diagonal_only() -> Result<()> {
    // TF 2.21: tf.linalg.diag([nan, 1, inf]) (a multiply by the identity
    // made NaN of inf · 0 and NaN · 0 across the row)
    let d = Tensor::vector(&[f64::NAN, 1.0, f64::INFINITY])
        .diag()?
        .to_vec::<f64>()?;
    let want = [f64::NAN, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, f64::INFINITY];
    assert!(
        d.iter().zip(want).all(|(a, b)| a == &b || (a.is_nan() && b.is_nan())),
        "{d:?}"
    );
    // TF 2.21: d/dx Σ acos(diag_part(x)) at x = [[-1.4201, 0.5, 2], [1,
    // 0.25, 3]] is [nan, 0, 0, 0, -1.0327955589886444, 0]: a NaN cotangent
    // stays on the diagonal (random programs vs TF, seed 42's program 242)
    let x = Tensor::from_vec(vec![-1.4201f64, 0.5, 2.0, 1.0, 0.25, 3.0], &[2, 3])?;
    let g = grad(&x, |x| x.diag_part()?.acos())?
        .expect("connected")
        .to_vec::<f64>()?;
    assert!(
        g[0].is_nan() && g[1..] == [0.0, 0.0, 0.0, -1.0327955589886444, 0.0],
        "{g:?}"
    );
    // and trace: TF 2.21's d/dx tf.linalg.trace([[nan, 1], [2, 3]]) is the
    // identity
    let x = Tensor::from_vec(vec![f64::NAN, 1.0, 2.0, 3.0], &[2, 2])?;
    let g = grad(&x, |x| x.trace())?.expect("connected").to_vec::<f64>()?;
    assert_eq!(g, vec![1.0, 0.0, 0.0, 1.0]);
    Ok(())
}

#[test]
fn l2_loss_gradient_is_x_even_near_the_largest_float() -> Result<()> {
    // TF 2.21: tf.nn.l2_loss([-f64::MAX, 3]) is inf, its gradient [-max, 3]
    // (x²/2 differentiated as 2x · 1/2 overflowed to -inf; random programs
    // vs TF, seed 42's program 1330)
    let x = Tensor::vector(&[-f64::MAX, 3.0]);
    assert_eq!(x.l2_loss()?.to_scalar::<f64>()?, f64::INFINITY);
    let g = grad(&x, |x| x.l2_loss())?.expect("connected").to_vec::<f64>()?;
    assert_eq!(g, vec![-f64::MAX, 3.0]);
    Ok(())
}
