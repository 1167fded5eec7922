//! Exact values of the issue-3 math ops at special points: kinks (TF's
//! conventions), rounding, floor division/modulo signs, prod's gradient with
//! zeros, argmax ties, scan flags, norm at zero. Expected numbers are worked
//! out by hand or taken from Python's `math` module (an independent
//! implementation), never from this crate's output.

use crate::common;

use gradtape::{DType, GradientTape, Result, Tensor};

fn v(x: &[f64]) -> Tensor {
    Tensor::vector(x)
}

/// d(sum(w · f(x)))/dx with `w = 1`.
fn grad(x: &Tensor, f: impl Fn(&Tensor) -> Result<Tensor>) -> Vec<f64> {
    let tape = GradientTape::new();
    let y = tape
        .record(|| {
            tape.watch(x);
            f(x)?.sum_all()
        })
        .unwrap();
    match tape.gradient(&y, x).unwrap() {
        Some(g) => g.to_vec::<f64>().unwrap(),
        None => vec![0.0; x.numel()],
    }
}

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{a:?} vs {b:?}");
    }
}

#[test]
fn activation_kinks_follow_tensorflow() {
    let x = v(&[-1.0, 0.0, 3.0, 6.0, 7.0]);
    assert_eq!(
        x.relu6().unwrap().to_vec::<f64>().unwrap(),
        vec![0.0, 0.0, 3.0, 6.0, 6.0]
    );
    assert_eq!(grad(&x, |x| x.relu6()), vec![0.0, 0.0, 1.0, 0.0, 0.0]);

    let x = v(&[-1.0, 0.0, 2.0]);
    assert_eq!(grad(&x, |x| x.leaky_relu(0.2)), vec![0.2, 0.2, 1.0]);
    assert_eq!(
        x.leaky_relu(0.2).unwrap().to_vec::<f64>().unwrap(),
        vec![-0.2, 0.0, 2.0]
    );

    let e = grad(&x, |x| x.elu());
    close(&e, &[(-1.0f64).exp(), 1.0, 1.0], 1e-15);
    let s = grad(&x, |x| x.selu());
    let (l, a) = (gradtape::SELU_SCALE, gradtape::SELU_ALPHA);
    close(&s, &[l * a * (-1.0f64).exp(), l, l], 1e-15);
    close(
        &x.selu().unwrap().to_vec::<f64>().unwrap(),
        &[l * a * ((-1.0f64).exp() - 1.0), 0.0, 2.0 * l],
        1e-15,
    );

    // softplus: ln 2 and 1/2 at 0; no overflow or underflow at the extremes
    let x = v(&[0.0, -1000.0, 1000.0, 30.0]);
    let y = x.softplus().unwrap().to_vec::<f64>().unwrap();
    close(
        &y,
        &[std::f64::consts::LN_2, 0.0, 1000.0, 30.0 + (-30.0f64).exp()],
        1e-15,
    );
    close(
        &grad(&x, |x| x.softplus()),
        &[0.5, 0.0, 1.0, 1.0 - (-30.0f64).exp()],
        1e-15,
    );

    // softsign'(0) = 1, softsign'(1) = 1/4
    assert_eq!(grad(&v(&[0.0, 1.0, -1.0]), |x| x.softsign()), vec![1.0, 0.25, 0.25]);
}

#[test]
fn clip_by_value_passes_the_gradient_on_its_boundaries() {
    let x = v(&[-2.0, -1.0, 0.0, 1.0, 2.0]);
    assert_eq!(
        x.clip_by_value(-1.0, 1.0).unwrap().to_vec::<f64>().unwrap(),
        vec![-1.0, -1.0, 0.0, 1.0, 1.0]
    );
    assert_eq!(grad(&x, |x| x.clip_by_value(-1.0, 1.0)), vec![0.0, 1.0, 1.0, 1.0, 0.0]);
    // lo == hi: everything equal to it passes
    assert_eq!(grad(&x, |x| x.clip_by_value(0.0, 0.0)), vec![0.0, 0.0, 1.0, 0.0, 0.0]);
    let i = Tensor::vector(&[-5i32, 2, 9]);
    assert_eq!(
        i.clip_by_value(0.0, 4.0).unwrap().to_vec::<i32>().unwrap(),
        vec![0, 2, 4]
    );
}

#[test]
fn gelu_and_special_functions_match_python_math() {
    let x = v(&[1.0, -0.5]);
    close(
        &x.gelu(false).unwrap().to_vec::<f64>().unwrap(),
        &[0.8413447460685429, -0.15426876936299344],
        1e-15,
    );
    close(
        &x.gelu(true).unwrap().to_vec::<f64>().unwrap(),
        &[0.8411919906082768, -0.15428599017485606],
        1e-15,
    );
    close(
        &v(&[0.5, -1.2]).erf().unwrap().to_vec::<f64>().unwrap(),
        &[0.5204998778130465, -0.9103139782296353],
        1e-15,
    );
    let c = v(&[3.0]).erfc().unwrap().to_vec::<f64>().unwrap()[0];
    assert!((c - 2.2090496998585438e-05).abs() < 1e-19);
    let e = v(&[1e-5]).expm1().unwrap().to_vec::<f64>().unwrap()[0];
    assert!((e - 1.0000050000166668e-05).abs() < 1e-20);
    close(
        &v(&[-0.5]).log1p().unwrap().to_vec::<f64>().unwrap(),
        &[-std::f64::consts::LN_2],
        1e-15,
    );
    // f32 goes through the f32 functions
    let f = Tensor::vector(&[0.5f32]).erf().unwrap().to_vec::<f32>().unwrap()[0];
    assert!((f - 0.520_499_9).abs() < 1e-6);
    // d erf(x)/dx at 0 is 2/√π
    close(
        &grad(&v(&[0.0]), |x| x.erf()),
        &[std::f64::consts::FRAC_2_SQRT_PI],
        1e-15,
    );
}

#[test]
fn round_is_half_to_even_and_rounding_has_zero_gradient() {
    let x = v(&[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999999999999994, 2.6]);
    let r = x.round().unwrap().to_vec::<f64>().unwrap();
    assert_eq!(r, vec![0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 0.0, 3.0]);
    assert!(r[3].is_sign_negative());
    assert_eq!(
        v(&[-1.5, 1.5, -2.0]).floor().unwrap().to_vec::<f64>().unwrap(),
        vec![-2.0, 1.0, -2.0]
    );
    assert_eq!(
        v(&[-1.5, 1.5, -2.0]).ceil().unwrap().to_vec::<f64>().unwrap(),
        vec![-1.0, 2.0, -2.0]
    );
    for f in [Tensor::floor, Tensor::ceil, Tensor::round] {
        assert_eq!(grad(&v(&[0.3, -1.7]), f), vec![0.0, 0.0]);
    }
    // integers pass unchanged
    let i = Tensor::vector(&[3i64, -4]);
    assert_eq!(i.round().unwrap().to_vec::<i64>().unwrap(), vec![3, -4]);
}

#[test]
fn floor_div_and_floor_mod_take_the_divisors_sign() {
    let a = Tensor::vector(&[7i32, -7, 7, -7, 6, -8]);
    let b = Tensor::vector(&[3i32, 3, -3, -3, 3, 2]);
    assert_eq!(
        a.floor_div(&b).unwrap().to_vec::<i32>().unwrap(),
        vec![2, -3, -3, 2, 2, -4]
    );
    assert_eq!(
        a.floor_mod(&b).unwrap().to_vec::<i32>().unwrap(),
        vec![1, 2, -2, -1, 0, 0]
    );
    let a = v(&[7.5, -7.5, 7.5, -7.5]);
    let b = v(&[2.0, 2.0, -2.0, -2.0]);
    assert_eq!(
        a.floor_div(&b).unwrap().to_vec::<f64>().unwrap(),
        vec![3.0, -4.0, -4.0, 3.0]
    );
    assert_eq!(
        a.floor_mod(&b).unwrap().to_vec::<f64>().unwrap(),
        vec![1.5, 0.5, -0.5, -1.5]
    );
    // MIN / -1 wraps (no panic); MIN mod -1 is 0
    let m = Tensor::vector(&[i64::MIN]);
    let n = Tensor::vector(&[-1i64]);
    assert_eq!(m.floor_div(&n).unwrap().to_vec::<i64>().unwrap(), vec![i64::MIN]);
    assert_eq!(m.floor_mod(&n).unwrap().to_vec::<i64>().unwrap(), vec![0]);
    // broadcasting
    let r = Tensor::from_vec(vec![5i64, -5], &[2, 1])
        .unwrap()
        .floor_mod(&Tensor::vector(&[3i64, -3]));
    assert_eq!(r.unwrap().to_vec::<i64>().unwrap(), vec![2, -1, 1, -2]);
}

#[test]
fn binary_values_and_gradients() {
    let y = v(&[-1.0, 1.0, 0.0]);
    let x = v(&[-1.0, 0.0, -1.0]);
    let a = y.atan2(&x).unwrap().to_vec::<f64>().unwrap();
    close(
        &a,
        &[-2.356194490192345, std::f64::consts::FRAC_PI_2, std::f64::consts::PI],
        1e-15,
    );
    // d atan2(y, x)/dy = x/(x²+y²): at (y,x) = (-1,-1): -1/2
    assert_eq!(grad(&y, |y| y.atan2(&x)), vec![-0.5, 0.0, -1.0]);
    assert_eq!(grad(&x, |x| y.atan2(x)), vec![0.5, -1.0, 0.0]);
    let d = v(&[1.0, 5.0]).squared_difference(&v(&[3.0])).unwrap();
    assert_eq!(d.to_vec::<f64>().unwrap(), vec![4.0, 4.0]);
    assert_eq!(grad(&v(&[3.0]), |b| v(&[1.0, 5.0]).squared_difference(b)), vec![0.0]);
    assert_eq!(
        grad(&v(&[1.0, 5.0]), |a| a.squared_difference(&v(&[3.0]))),
        vec![-4.0, 4.0]
    );

    let p = Tensor::vector(&[true, true, false, false]);
    let q = Tensor::vector(&[true, false, true, false]);
    assert_eq!(
        p.logical_and(&q).unwrap().to_vec::<bool>().unwrap(),
        vec![true, false, false, false]
    );
    assert_eq!(
        p.logical_or(&q).unwrap().to_vec::<bool>().unwrap(),
        vec![true, true, true, false]
    );
    assert_eq!(
        p.logical_xor(&q).unwrap().to_vec::<bool>().unwrap(),
        vec![false, true, true, false]
    );
    assert_eq!(
        p.logical_not().unwrap().to_vec::<bool>().unwrap(),
        vec![false, false, true, true]
    );
}

#[test]
fn prod_gradient_is_right_with_zeros() {
    assert_eq!(grad(&v(&[2.0, 0.0, 3.0]), |x| x.prod(&[0], false)), vec![0.0, 6.0, 0.0]);
    assert_eq!(grad(&v(&[0.0, 0.0, 3.0]), |x| x.prod(&[0], false)), vec![0.0, 0.0, 0.0]);
    assert_eq!(
        grad(&v(&[2.0, 5.0, 3.0]), |x| x.prod(&[0], false)),
        vec![15.0, 6.0, 10.0]
    );
    let m = Tensor::from_vec(vec![1.0, 2.0, 0.0, 4.0], &[2, 2]).unwrap();
    assert_eq!(m.prod(&[0], false).unwrap().to_vec::<f64>().unwrap(), vec![0.0, 8.0]);
    assert_eq!(grad(&m, |x| x.prod(&[0], false)), vec![0.0, 4.0, 1.0, 2.0]);
    assert_eq!(grad(&m, |x| x.prod(&[0, 1], true)), vec![0.0, 0.0, 8.0, 0.0]);
    assert_eq!(grad(&m, |x| x.prod(&[-1], false)), vec![2.0, 1.0, 4.0, 0.0]);
    // empty product is 1, integers wrap
    let e = Tensor::zeros(&[0, 3], DType::F64);
    assert_eq!(e.prod(&[0], false).unwrap().to_vec::<f64>().unwrap(), vec![1.0; 3]);
    let big = Tensor::vector(&[i32::MAX, 2]);
    assert_eq!(big.prod(&[0], false).unwrap().to_vec::<i32>().unwrap(), vec![-2]);
}

#[test]
fn argmax_argmin_take_the_first_of_ties() {
    let x = Tensor::vector(&[1.0f32, 3.0, 3.0, 2.0]);
    assert_eq!(x.argmax(0).unwrap().to_vec::<i64>().unwrap(), vec![1]);
    assert_eq!(x.argmin(-1).unwrap().to_vec::<i64>().unwrap(), vec![0]);
    let m = Tensor::from_vec(vec![5i32, 1, 1, 5, 0, 7], &[2, 3]).unwrap();
    assert_eq!(m.argmax(1).unwrap().to_vec::<i64>().unwrap(), vec![0, 2]);
    assert_eq!(m.argmin(1).unwrap().to_vec::<i64>().unwrap(), vec![1, 1]);
    assert_eq!(m.argmax(0).unwrap().to_vec::<i64>().unwrap(), vec![0, 0, 1]);
    assert_eq!(m.argmax(0).unwrap().dtype(), DType::I64);
    let z = Tensor::zeros(&[0, 3], DType::F32);
    assert_eq!(z.argmax(1).unwrap().shape(), &[0]);
}

#[test]
fn scans_with_exclusive_and_reverse() {
    let x = v(&[1.0, 2.0, 3.0, 4.0]);
    let cs = |e, r| x.cumsum(0, e, r).unwrap().to_vec::<f64>().unwrap();
    assert_eq!(cs(false, false), vec![1.0, 3.0, 6.0, 10.0]);
    assert_eq!(cs(true, false), vec![0.0, 1.0, 3.0, 6.0]);
    assert_eq!(cs(false, true), vec![10.0, 9.0, 7.0, 4.0]);
    assert_eq!(cs(true, true), vec![9.0, 7.0, 4.0, 0.0]);
    let cp = |e, r| x.cumprod(0, e, r).unwrap().to_vec::<f64>().unwrap();
    assert_eq!(cp(false, false), vec![1.0, 2.0, 6.0, 24.0]);
    assert_eq!(cp(true, false), vec![1.0, 1.0, 2.0, 6.0]);
    assert_eq!(cp(false, true), vec![24.0, 24.0, 12.0, 4.0]);
    assert_eq!(cp(true, true), vec![24.0, 12.0, 4.0, 1.0]);
    // along an inner axis
    let m = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[2, 3]).unwrap();
    assert_eq!(
        m.cumsum(1, false, false).unwrap().to_vec::<i64>().unwrap(),
        vec![1, 3, 6, 4, 9, 15]
    );
    assert_eq!(
        m.cumsum(0, true, false).unwrap().to_vec::<i64>().unwrap(),
        vec![0, 0, 0, 1, 2, 3]
    );
    // gradients: d sum(w · cumsum(x)) / dx = reverse cumsum of w
    let w = v(&[1.0, 2.0, 3.0, 4.0]);
    assert_eq!(
        grad(&x, |x| x.cumsum(0, false, false)?.mul(&w)),
        vec![10.0, 9.0, 7.0, 4.0]
    );
    assert_eq!(
        grad(&x, |x| x.cumsum(0, true, false)?.mul(&w)),
        vec![9.0, 7.0, 4.0, 0.0]
    );
    assert_eq!(
        grad(&x, |x| x.cumsum(0, false, true)?.mul(&w)),
        vec![1.0, 3.0, 6.0, 10.0]
    );
    // cumprod of [1,2,3,4]: d/dx_k Σ_i y_i = Σ_{i>=k} y_i / x_k
    assert_eq!(grad(&x, |x| x.cumprod(0, false, false)), vec![33.0, 16.0, 10.0, 6.0]);
    // at zeros (TensorFlow's formula would divide by zero here):
    // Σ cumprod([a,b,c]) = a + ab + abc, at (2,0,3): (1 + b + bc, a + ac, ab) = (1, 8, 0)
    assert_eq!(
        grad(&v(&[2.0, 0.0, 3.0]), |x| x.cumprod(0, false, false)),
        vec![1.0, 8.0, 0.0]
    );
    assert_eq!(
        grad(&v(&[2.0, 0.0, 0.0, 3.0]), |x| x.cumprod(0, false, false)),
        vec![1.0, 2.0, 0.0, 0.0]
    );
    // exclusive reverse of [a,b,c] = [bc, c, 1]: gradient (0, c, b + 1) at (2,0,3): (0, 3, 1)
    assert_eq!(
        grad(&v(&[2.0, 0.0, 3.0]), |x| x.cumprod(0, true, true)),
        vec![0.0, 3.0, 1.0]
    );
}

/// Second derivatives of `cumprod` where a scan holds several zeros, and
/// where its values span 60 orders of magnitude: the gradient rule divided
/// by `x` (as TensorFlow's, which gives 0 for all of these second
/// derivatives) and then set the elements after a scan's first zero to 0,
/// losing their slope in that zero; the division also cancelled the row of
/// ±1e30 to 0. Referee: JAX 0.8 in f64 (TensorFlow is wrong here), with
/// `w = [[1, -2, 3, -4], [5, -6, 7, -8]]`, `L = Σ w · cumprod(x, 1,
/// exclusive, reverse)`, `grad(L)` and `grad(Σ grad(L) · w / 2)` at
/// `x = [[0, 0, 2, 0], [-1e30, -1e30, 1, 0.5]]`.
#[test]
fn cumprod_second_derivatives_at_zeros_and_far_apart_magnitudes() -> gradtape::Result<()> {
    let x = Tensor::from_vec(vec![0.0f64, 0.0, 2.0, 0.0, -1e30, -1e30, 1.0, 0.5], &[2, 4])?;
    let w = Tensor::from_vec(vec![1.0f64, -2.0, 3.0, -4.0, 5.0, -6.0, 7.0, -8.0], &[2, 4])?;
    #[rustfmt::skip]
    let cases: [(bool, bool, [f64; 8], [f64; 8]); 4] = [
        (false, false,
         [1.0, 0.0, 0.0, 0.0, 3e30, 3e30, 3e60, -8e60],
         [-4.0, 2.0, 0.0, 0.0, -4.25e31, -4.25e31, 3.2e61, -2.8e61]),
        (false, true,
         [0.0, 0.0, 0.0, 2.0, -2.5e30, -2.5e30, 2.5e60, 5e60],
         [0.0, 8.0, -6.0, 8.5, 1.125e31, 1.125e31, -2e61, 1.75e61]),
        (true, false,
         [-2.0, 0.0, 0.0, 0.0, 1e30, 1e30, -8e60, 0.0],
         [5.0, -2.5, 0.0, 0.0, 2.8e31, 2.8e31, -4e30, 0.0]),
        (true, true,
         [0.0, 0.0, 0.0, -1.0, 0.0, 2.5, -2.5e30, -5e30],
         [0.0, -4.0, 4.0, -5.0, 0.0, -11.25, 2e31, -1.75e31]),
    ];
    for (exclusive, reverse, want_g, want_h) in cases {
        let (g, h) = common::nested_grads(
            &x,
            |x| x.cumprod(1, exclusive, reverse)?.mul(&w)?.sum_all(),
            |g| g.mul(&w)?.mul_scalar(0.5)?.sum_all(),
        )?;
        for (what, got, want) in [
            ("gradient", g.to_vec::<f64>()?, want_g),
            ("second", h.to_vec::<f64>()?, want_h),
        ] {
            for (a, b) in got.iter().zip(want) {
                assert!(
                    (a - b).abs() <= 1e-14 * b.abs(),
                    "cumprod exclusive={exclusive} reverse={reverse} {what}: got {got:?}, want {want:?}"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn norm_variance_logsumexp_values() {
    let x = v(&[3.0, 4.0]);
    assert_eq!(grad(&x, |x| x.norm(&[0], false)), vec![0.6, 0.8]);
    // at zero the gradient is 0 (documented subgradient), not NaN
    let z = v(&[0.0, 0.0]);
    assert_eq!(z.norm(&[0], false).unwrap().to_vec::<f64>().unwrap(), vec![0.0]);
    assert_eq!(grad(&z, |x| x.norm(&[0], false)), vec![0.0, 0.0]);
    let m = Tensor::from_vec(vec![0.0, 0.0, 3.0, 4.0], &[2, 2]).unwrap();
    assert_eq!(grad(&m, |x| x.norm(&[1], true)), vec![0.0, 0.0, 0.6, 0.8]);

    let x = v(&[1.0, 2.0, 3.0, 4.0]);
    assert_eq!(x.variance(&[0], false).unwrap().to_vec::<f64>().unwrap(), vec![1.25]);
    // d var / dx = 2 (x - mean) / n
    assert_eq!(grad(&x, |x| x.variance(&[0], false)), vec![-0.75, -0.25, 0.25, 0.75]);
    let s = x.std(&[0], true).unwrap();
    assert_eq!(s.shape(), &[1]);
    close(&s.to_vec::<f64>().unwrap(), &[1.25f64.sqrt()], 1e-15);

    let l = v(&[0.0, 0.0]);
    close(
        &l.logsumexp(&[0], false).unwrap().to_vec::<f64>().unwrap(),
        &[std::f64::consts::LN_2],
        1e-15,
    );
    assert_eq!(grad(&l, |x| x.logsumexp(&[0], false)), vec![0.5, 0.5]);
    let ni = v(&[f64::NEG_INFINITY, f64::NEG_INFINITY]);
    assert_eq!(
        ni.logsumexp(&[0], false).unwrap().to_vec::<f64>().unwrap(),
        vec![f64::NEG_INFINITY]
    );
    let pi = v(&[f64::INFINITY, 1.0]);
    assert_eq!(
        pi.logsumexp(&[0], false).unwrap().to_vec::<f64>().unwrap(),
        vec![f64::INFINITY]
    );
    let e = Tensor::zeros(&[0], DType::F64);
    assert_eq!(
        e.logsumexp(&[0], false).unwrap().to_vec::<f64>().unwrap(),
        vec![f64::NEG_INFINITY]
    );
}

#[test]
fn all_any_over_axes() {
    let b = Tensor::from_vec(vec![true, false, true, true, true, true], &[2, 3]).unwrap();
    assert_eq!(b.all(&[1], false).unwrap().to_vec::<bool>().unwrap(), vec![false, true]);
    assert_eq!(
        b.all(&[0], true).unwrap().to_vec::<bool>().unwrap(),
        vec![true, false, true]
    );
    assert_eq!(b.all(&[0], true).unwrap().shape(), &[1, 3]);
    assert_eq!(b.any(&[0, 1], false).unwrap().to_vec::<bool>().unwrap(), vec![true]);
    let f = Tensor::from_vec(vec![false; 4], &[2, 2]).unwrap();
    assert_eq!(
        f.any(&[-1], false).unwrap().to_vec::<bool>().unwrap(),
        vec![false, false]
    );
    let e = Tensor::zeros(&[0, 2], DType::Bool);
    assert_eq!(e.all(&[0], false).unwrap().to_vec::<bool>().unwrap(), vec![true, true]);
    assert_eq!(
        e.any(&[0], false).unwrap().to_vec::<bool>().unwrap(),
        vec![false, false]
    );
}

#[test]
fn broadcast_rows_add_exact_values() -> Result<()> {
    // [rows, c] + [c]: the bias-add route; then a strided (transposed) left side
    let a = Tensor::from_vec((0..12).map(|i| i as f32).collect::<Vec<_>>(), &[3, 4])?;
    let b = Tensor::vector(&[100.0f32, 200.0, 300.0, 400.0]);
    let want: Vec<f32> = (0..12).map(|i| i as f32 + 100.0 * (i % 4 + 1) as f32).collect();
    assert_eq!(a.add(&b)?.to_vec::<f32>()?, want);
    assert_eq!(
        b.sub(&a)?.to_vec::<f32>()?,
        want.iter()
            .zip(0..12)
            .map(|(w, i)| w - 2.0 * i as f32)
            .collect::<Vec<_>>()
    );
    let at = a.transpose()?; // [4, 3], column stride 4
    let c = Tensor::vector(&[1.0f32, 2.0, 3.0]);
    let got = at.add(&c)?.to_vec::<f32>()?;
    let want_t: Vec<f32> = (0..4)
        .flat_map(|i| (0..3).map(move |j| (j * 4 + i) as f32 + (j + 1) as f32))
        .collect();
    assert_eq!(got, want_t);
    // a [rows, 1] column against a row: every operand steps differently
    let col = Tensor::from_vec(vec![10.0f32, 20.0], &[2, 1])?;
    assert_eq!(col.mul(&c)?.to_vec::<f32>()?, vec![10.0, 20.0, 30.0, 20.0, 40.0, 60.0]);
    Ok(())
}

/// Max pooling's exact outputs and gradient routing: a tie sends the
/// gradient to the first maximum in window order, a NaN is skipped (as
/// TensorFlow 2.21: `tf.nn.max_pool2d` of this image gives
/// `[5, -0, 7, -2, 4, -4, -1, 3]`, and its gradient the positions below), and
/// SAME padding never wins (windows of negative values stay negative).
#[test]
fn max_pool_exact_values_ties_and_nan() -> gradtape::Result<()> {
    use gradtape::{GradientTape, Padding, Variable};
    // one image 4x4, 2 channels; channel 1 is channel 0 negated
    let base = [
        1.0f32,
        5.0,
        5.0,
        2.0,
        3.0,
        0.0,
        7.0,
        7.0,
        4.0,
        4.0,
        -1.0,
        -2.0,
        4.0,
        4.0,
        -3.0,
        f32::NAN,
    ];
    let data: Vec<f32> = base.iter().flat_map(|&v| [v, -v]).collect();
    let x = Variable::new(Tensor::from_vec(data, &[1, 4, 4, 2])?);
    let tape = GradientTape::new();
    let y = tape.record(|| x.read().max_pool2d([2, 2], [2, 2], Padding::Valid))?;
    let got = y.to_vec::<f32>()?;
    let want = [5.0f32, -0.0, 7.0, -2.0, 4.0, -4.0, -1.0, 3.0];
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!((g.is_nan() && w.is_nan()) || g == w, "{got:?} vs {want:?}");
    }
    let loss = tape.record(|| {
        y.mul(&Tensor::from_vec(
            (1..=8).map(|v| v as f32).collect::<Vec<_>>(),
            &[1, 2, 2, 2],
        )?)?
        .sum_all()
    })?;
    let g = tape
        .gradient(&loss, std::slice::from_ref(&x))?
        .remove(0)
        .expect("a gradient");
    let g = g.to_vec::<f32>()?;
    // channel 0: the windows' first maxima at (0,1), (1,2), (2,0), and -1 at
    // (2,2) (the NaN at (3,3) skipped)
    let mut want0 = [0.0f32; 16];
    want0[1] = 1.0;
    want0[6] = 3.0;
    want0[8] = 5.0;
    want0[10] = 7.0;
    // channel 1 (negated): maxima -0 at (1,1), -2 at (0,3), -4 at (2,0), 3 at (3,2)
    let mut want1 = [0.0f32; 16];
    want1[5] = 2.0;
    want1[3] = 4.0;
    want1[8] = 6.0;
    want1[14] = 8.0;
    let (g0, g1): (Vec<f32>, Vec<f32>) = (
        g.iter().step_by(2).copied().collect(),
        g.iter().skip(1).step_by(2).copied().collect(),
    );
    assert_eq!(g0, want0.to_vec());
    assert_eq!(g1, want1.to_vec());
    // SAME padding on a negative image: the padded windows take real values
    let neg = Tensor::from_vec(vec![-3.0f32, -1.0, -2.0], &[1, 1, 3, 1])?;
    assert_eq!(
        neg.max_pool2d([1, 2], [1, 2], Padding::Same)?.to_vec::<f32>()?,
        vec![-1.0, -2.0]
    );
    Ok(())
}

/// First and second derivatives of `f` at each element of `x`
/// (elementwise ops: the gradient of the sum, then of the gradient's sum).
fn grads_1_2(x: &Tensor, f: fn(&Tensor) -> Result<Tensor>) -> (Vec<f64>, Vec<f64>) {
    let outer = GradientTape::new();
    let (g, h) = {
        let g = outer
            .record(|| {
                outer.watch(x);
                let inner = GradientTape::new();
                let y = inner.record(|| {
                    inner.watch(x);
                    f(x)?.sum_all()
                })?;
                Ok(inner.gradient(&y, x)?.unwrap())
            })
            .unwrap();
        let s = outer.record(|| g.sum_all()).unwrap();
        let h = outer.gradient(&s, x).unwrap();
        (g, h)
    };
    let h = h.map_or(vec![0.0; x.numel()], |h| h.to_vec::<f64>().unwrap());
    (g.to_vec::<f64>().unwrap(), h)
}

/// `a` and `b` agree elementwise: both NaN, equal infinities, or close.
fn agree(what: &str, a: &[f64], b: &[f64]) {
    common::values::agree(what, a, b, 1e-12);
}

#[test]
fn activation_gradients_at_infinity_match_tensorflow() {
    let inf = f64::INFINITY;
    let nan = f64::NAN;
    let x = v(&[-inf, -1000.0, -2.0, 2.0, 1000.0, inf]);
    // TF 2.21 (float64), tf.GradientTape over tf.nn.* at x: the gradient
    // and the gradient of the gradient. softsign's second derivative: TF
    // has no gradient for SoftsignGrad, so the exact -2 sign(x)/(1+|x|)³
    // (JAX gives NaN at ±inf through its composite, and 0 is the limit).
    // gelu (both forms): the finite values are JAX's (float64, jax.grad of
    // jax.nn.gelu), as TF's float64 gelu gradients are off by ~4e-9
    // relative (-0.08523180477 vs -0.08523180108 at x = -2); TF and JAX
    // agree on the NaN at -inf and +inf (inf · 0 in x · Φ(x)).
    type F = fn(&Tensor) -> Result<Tensor>;
    let cases: [(&str, F, [f64; 6], [f64; 6]); 9] = [
        (
            "softsign",
            |x| x.softsign(),
            [
                0.0,
                9.98002996004994e-07,
                1.0 / 9.0,
                1.0 / 9.0,
                9.98002996004994e-07,
                0.0,
            ],
            [
                0.0,
                2.0 / 1001f64.powi(3),
                2.0 / 27.0,
                -2.0 / 27.0,
                -2.0 / 1001f64.powi(3),
                0.0,
            ],
        ),
        (
            "softplus",
            |x| x.softplus(),
            [0.0, 0.0, 0.11920292202211755, 0.8807970779778824, 1.0, 1.0],
            [0.0, 0.0, 0.1049935854035065, 0.10499358540350653, 0.0, 0.0],
        ),
        (
            "elu",
            |x| x.elu(),
            [0.0, 0.0, 0.1353352832366127, 1.0, 1.0, 1.0],
            [0.0, 0.0, 0.1353352832366127, 0.0, 0.0, 0.0],
        ),
        (
            "selu",
            |x| x.selu(),
            [
                0.0,
                0.0,
                0.2379328722516818,
                1.0507009873554805,
                1.0507009873554805,
                1.0507009873554805,
            ],
            [0.0, 0.0, 0.2379328722516818, 0.0, 0.0, 0.0],
        ),
        (
            "gelu",
            |x| x.gelu(false),
            [nan, 0.0, -0.08523180107819688, 1.085231801078197, 1.0, nan],
            [nan, 0.0, -0.10798193302637608, -0.10798193302637608, 0.0, nan],
        ),
        (
            "gelu approximate",
            |x| x.gelu(true),
            [nan, 0.0, -0.08609925662361839, 1.0860992566236183, 1.0, nan],
            [nan, 0.0, -0.1078750799510784, -0.10787507995107838, 0.0, nan],
        ),
        (
            "silu",
            |x| x.silu(),
            [nan, 0.0, -0.09078424878489547, 1.0907842487848955, 1.0, nan],
            [nan, 0.0, 0.050062168694706914, 0.05006216869470693, 0.0, nan],
        ),
        (
            "tanh",
            |x| x.tanh(),
            [0.0, 0.0, 0.07065082485316443, 0.07065082485316443, 0.0, 0.0],
            [0.0, 0.0, 0.13621868742711296, -0.13621868742711296, 0.0, 0.0],
        ),
        (
            "sigmoid",
            |x| x.sigmoid(),
            [0.0, 0.0, 0.1049935854035065, 0.10499358540350653, 0.0, 0.0],
            [0.0, 0.0, 0.07996250105615305, -0.07996250105615307, 0.0, 0.0],
        ),
    ];
    for (name, f, g1, g2) in cases {
        let (a, b) = grads_1_2(&x, f);
        agree(&format!("{name}'"), &a, &g1);
        agree(&format!("{name}''"), &b, &g2);
    }
    // softsign's value at ±inf: NaN, as TF's kernel (inf / inf)
    let y = x.softsign().unwrap().to_vec::<f64>().unwrap();
    assert!(y[0].is_nan() && y[5].is_nan() && (y[2] + 2.0 / 3.0).abs() < 1e-15);
}

/// GELU's tanh form and its gradient, one op each: in `f32` against
/// TensorFlow 2.21's `tf.nn.gelu(x, approximate=True)` in `f32` (and its
/// tape gradient), within 4 `f32` ulps of the value's scale, or nearer the
/// exact value than TensorFlow; in `f64` against JAX's
/// `jax.nn.gelu(x, approximate=True)` in x64 (and `vmap(grad(..))`), the
/// referee here, since TensorFlow's `f64` values differ from the formula
/// in the 10th digit (-0.15428599020775666 at -0.5, where NumPy, PyTorch
/// and JAX give -0.15428599017485606).
#[test]
fn gelu_tanh_form_matches_tensorflow_in_f32_and_jax_in_f64() -> Result<()> {
    let xs = [-6.0, -3.0, -1.5, -0.5, -0.01, 0.0, 0.3, 1.0, 2.5, 5.0];
    let tf_y = [
        -0.0,
        -0.0036374330520629883,
        -0.10042843222618103,
        -0.1542859971523285,
        -0.00496010622009635,
        0.0,
        0.18537093698978424,
        0.8411920070648193,
        2.4849157333374023,
        5.0,
    ];
    let tf_g = [
        0.0,
        -0.011584242805838585,
        -0.12771078944206238,
        0.1326300948858261,
        0.4920214116573334,
        0.5,
        0.7322955131530762,
        1.0829640626907349,
        1.0379514694213867,
        1.0,
    ];
    let jax_y = [
        -8.439682286365269e-11,
        -0.003637392081773161,
        -0.10042842301976715,
        -0.15428599017485609,
        -0.0049601064401444276,
        0.0,
        0.18537092354275922,
        0.8411919906082768,
        2.4849157339100016,
        4.999999770820381,
    ];
    let jax_g = [
        -7.710016767410024e-10,
        -0.011584166630970047,
        -0.1277107931514332,
        0.1326300964653577,
        0.49202142166375923,
        0.5,
        0.7322954516388018,
        1.0829640838457828,
        1.0379515762126654,
        1.000001546361986,
    ];
    let x32 = v(&xs).cast(DType::F32)?;
    let y32 = x32.gelu(true)?.cast(DType::F64)?.to_vec::<f64>()?;
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x32);
        x32.gelu(true)?.sum_all()
    })?;
    let g32 = tape
        .gradient(&y, &x32)?
        .expect("a gradient")
        .cast(DType::F64)?
        .to_vec::<f64>()?;
    let ulp = f32::EPSILON as f64;
    for i in 0..xs.len() {
        for (what, got, tf, exact) in [
            ("value", y32[i], tf_y[i], jax_y[i]),
            ("gradient", g32[i], tf_g[i], jax_g[i]),
        ] {
            // (TensorFlow's f32 gradient at 5 is 1, 1.5e-6 below the
            // exact value, where 1 - tanh² cancels)
            assert!(
                (got - tf).abs() <= 4.0 * ulp * tf.abs().max(1e-3) || (got - exact).abs() < (tf - exact).abs(),
                "gelu tanh f32 {what} at {}: {got} vs TensorFlow's {tf} (exact {exact})",
                xs[i]
            );
        }
    }
    // f64 from -3 up (at -6, 1 + tanh cancels to a few digits in any order)
    let x64 = v(&xs[1..]);
    close(&x64.gelu(true)?.to_vec::<f64>()?, &jax_y[1..], 1e-14);
    close(&grad(&x64, |x| x.gelu(true)), &jax_g[1..], 1e-14);
    Ok(())
}
