//! The unit tests of `src/kernels/cpu/math.rs`, moved out of the library.

use gradtape::__internals::kernels::cpu::math::*;

/// `sin x` for `|x| <= SIN_COS_MAX` (at most 1 ulp, see the module docs).
fn sin_f32(x: f32) -> f32 {
    sin_cos_f32(x).0
}

/// `cos x` for `|x| <= SIN_COS_MAX`.
fn cos_f32(x: f32) -> f32 {
    sin_cos_f32(x).1
}

/// Distance in units in the last place between `got` and the exact value
/// `want` (an f64), measured in f32 ulps at `want`'s magnitude.
fn ulps(got: f32, want: f64) -> f64 {
    let w = want as f32;
    if got == w || (got.is_nan() && want.is_nan()) {
        return 0.0;
    }
    if got.is_infinite() || w.is_infinite() {
        return f64::INFINITY;
    }
    // ulp of the f32 nearest the exact value (the smallest subnormal at 0)
    let ulp = if w == 0.0 {
        f32::from_bits(1) as f64
    } else {
        let b = w.abs().to_bits();
        (f32::from_bits(b + 1) as f64) - (f32::from_bits(b) as f64)
    };
    (got as f64 - want).abs() / ulp
}

/// Every `step`-th f32 bit pattern between `lo` and `hi` (both signs).
fn sweep(lo: f32, hi: f32, step: u32) -> impl Iterator<Item = f32> {
    (lo.to_bits()..=hi.to_bits())
        .step_by(step as usize)
        .flat_map(|b| [f32::from_bits(b), -f32::from_bits(b)])
}

#[test]
fn exp_is_within_one_ulp_everywhere() {
    let mut worst = (0.0f64, 0.0f32);
    for x in sweep(1e-30, 110.0, 97) {
        let e = ulps(exp_f32(x), (x as f64).exp());
        if e > worst.0 {
            worst = (e, x);
        }
    }
    assert!(worst.0 <= 1.0, "worst {} ulp at x = {:e}", worst.0, worst.1);
    assert_eq!(exp_f32(0.0), 1.0);
    assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
    assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
    assert_eq!(exp_f32(89.0), f32::INFINITY);
    assert_eq!(exp_f32(-105.0), 0.0);
    assert!(exp_f32(f32::NAN).is_nan());
    assert!(exp_f32(-100.0) > 0.0, "subnormal results are kept");
    assert!(exp_f32(88.72) < f32::INFINITY);
}

#[test]
fn the_short_exp_gives_the_bits_of_the_full_one_in_its_range() {
    let (lo, hi) = EXP_NORMAL;
    let mut n = 0;
    for x in sweep(1e-30, hi, 13).filter(|&x| x >= lo) {
        assert_eq!(exp_normal(x).to_bits(), exp_f32(x).to_bits(), "{x:e}");
        n += 1;
    }
    assert!(n > 1_000_000);
    for x in [lo, hi, 0.0, -0.0] {
        assert_eq!(exp_normal(x).to_bits(), exp_f32(x).to_bits(), "{x:e}");
    }
    // blocks in range, out of range and mixed give the full form's bits
    let xs: Vec<f32> = (0..300)
        .map(|i| (i as f32 - 150.0) * if i < 128 { 0.5 } else { 0.73 })
        .collect();
    let mut out = vec![0.0; xs.len()];
    with_simd(|| exp_slice(&xs, &mut out));
    for (&x, &e) in xs.iter().zip(&out) {
        assert_eq!(e.to_bits(), exp_f32(x).to_bits(), "{x:e}");
    }
    // (the scan checks |x| <= 86, inside the range on both sides)
    assert!(exp_all_normal(&[lo, -lo, 1.0, -0.0]));
    assert!(!exp_all_normal(&[87.0]) && !exp_all_normal(&[f32::INFINITY]) && !exp_all_normal(&[-f32::NAN]));
    assert_eq!(max_abs_bits(&[]), 0);
    assert_eq!(max_abs_bits(&[-3.0, 2.0, -0.0]), 3.0f32.to_bits());
    assert!(!exp_all_normal(&[1.0, f32::NAN]) && !exp_all_normal(&[hi * 1.001]) && !exp_all_normal(&[lo * 1.001]));
}

#[test]
fn tanh_and_sigmoid_are_within_1_5_and_2_5_ulp_everywhere() {
    let (mut wt, mut ws) = ((0.0f64, 0.0f32), (0.0f64, 0.0f32));
    for x in sweep(1e-30, 120.0, 89) {
        let t = ulps(tanh_f32(x), (x as f64).tanh());
        let s = ulps(sigmoid_f32(x), 1.0 / (1.0 + (-(x as f64)).exp()));
        if t > wt.0 {
            wt = (t, x);
        }
        if s > ws.0 {
            ws = (s, x);
        }
    }
    assert!(wt.0 <= 1.5, "tanh: worst {} ulp at x = {:e}", wt.0, wt.1);
    assert!(ws.0 <= 2.5, "sigmoid: worst {} ulp at x = {:e}", ws.0, ws.1);
    assert!(tanh_f32(-0.0).is_sign_negative() && tanh_f32(0.0) == 0.0);
    assert_eq!((tanh_f32(f32::INFINITY), tanh_f32(f32::NEG_INFINITY)), (1.0, -1.0));
    assert_eq!((tanh_f32(50.0), tanh_f32(-50.0)), (1.0, -1.0));
    assert_eq!((sigmoid_f32(f32::INFINITY), sigmoid_f32(f32::NEG_INFINITY)), (1.0, 0.0));
    assert_eq!(sigmoid_f32(0.0), 0.5);
    assert!(sigmoid_f32(-100.0) > 0.0, "subnormal results are kept");
    assert!(tanh_f32(f32::NAN).is_nan() && sigmoid_f32(f32::NAN).is_nan());
}

#[test]
fn sin_and_cos_are_within_one_ulp_in_range() {
    let mut worst_s = (0.0f64, 0.0f32);
    let mut worst_c = (0.0f64, 0.0f32);
    // every 61st f32 of the range, subnormals included, both signs
    for x in sweep(f32::from_bits(1), SIN_COS_MAX, 61).chain([SIN_COS_MAX, -SIN_COS_MAX]) {
        let (s, c) = sin_cos_f32(x);
        assert_eq!(
            (s.to_bits(), c.to_bits()),
            (sin_f32(x).to_bits(), cos_f32(x).to_bits()),
            "{x:e}"
        );
        let es = ulps(s, (x as f64).sin());
        let ec = ulps(c, (x as f64).cos());
        if es > worst_s.0 {
            worst_s = (es, x);
        }
        if ec > worst_c.0 {
            worst_c = (ec, x);
        }
    }
    assert!(worst_s.0 <= 0.8, "sin: worst {} ulp at x = {:e}", worst_s.0, worst_s.1);
    assert!(worst_c.0 <= 0.8, "cos: worst {} ulp at x = {:e}", worst_c.0, worst_c.1);
    // near the multiples of pi/2, where the result is tiny
    for k in 1..=41721i32 {
        let m = k as f64 * std::f64::consts::FRAC_PI_2;
        let b = (m as f32).to_bits();
        for x in (b - 2..=b + 2).map(f32::from_bits) {
            let (s, c) = sin_cos_f32(x);
            assert!(ulps(s, (x as f64).sin()) <= 0.8, "sin({x:e}) = {s:e}");
            assert!(ulps(c, (x as f64).cos()) <= 0.8, "cos({x:e}) = {c:e}");
        }
    }
    assert_eq!(sin_f32(0.0).to_bits(), 0.0f32.to_bits());
    assert_eq!(sin_f32(-0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!((cos_f32(0.0), cos_f32(-0.0)), (1.0, 1.0));
    let tiny = f32::from_bits(1);
    assert_eq!((sin_f32(tiny), sin_f32(-tiny), cos_f32(tiny)), (tiny, -tiny, 1.0));
    assert_eq!(sin_f32(f32::MIN_POSITIVE), f32::MIN_POSITIVE);
    // (callers use libm beyond the range; these are NaN, as libm's)
    for x in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        assert!(sin_f32(x).is_nan() && cos_f32(x).is_nan(), "{x}");
    }
    assert!(sin_cos_in_range(&[0.0, -SIN_COS_MAX, SIN_COS_MAX]));
    assert!(!sin_cos_in_range(&[0.0, SIN_COS_MAX * 1.001]));
    assert!(!sin_cos_in_range(&[f32::NAN]));
    assert!(!sin_cos_in_range(&[f32::INFINITY]));
}

#[test]
fn the_small_reduction_gives_the_bits_of_the_full_one() {
    // its premise: q C2 is exact for |q| <= 2 (the product error is +0)
    for q in -2..=2 {
        let qf = q as f32;
        assert_eq!(qf.mul_add(PIO2_C2, -(qf * PIO2_C2)).to_bits(), 0, "{q}");
    }
    assert!((SIN_COS_SMALL * std::f32::consts::FRAC_2_PI).round() <= 2.0);
    // every 31st f32 of the range, both signs (compiled for the CPU's
    // fused multiply-adds: libm's are 20x slower)
    let (n, bad) = with_simd(
        #[inline(always)]
        || {
            let mut n = 0usize;
            let mut bad = None;
            for x in sweep(f32::from_bits(1), SIN_COS_SMALL, 31).chain([SIN_COS_SMALL, -SIN_COS_SMALL, 0.0, -0.0]) {
                let (a, b) = (sin_cos_small(x), sin_cos_f32(x));
                if (a.0.to_bits(), a.1.to_bits()) != (b.0.to_bits(), b.1.to_bits()) {
                    bad = Some((x, a, b));
                }
                n += 1;
            }
            (n, bad)
        },
    );
    assert_eq!(bad, None);
    assert!(n > 60_000_000);
}

#[test]
fn slices_give_each_element_its_own_bits() {
    // blocks all small, mixed, large and out of range, and a short tail
    for len in [0usize, 1, 63, 64, 65, 200, 333] {
        let mut xs: Vec<f32> = (0..len)
            .map(|i| match (i / 64) % 3 {
                0 => (i as f32 * 0.37).sin() * 3.7,
                1 => (i as f32 - 100.0) * 0.9,
                _ => (i as f32) * 311.7 - 40_000.0,
            })
            .collect();
        if len > 130 {
            (xs[70], xs[71], xs[130]) = (f32::NAN, 1.0e6, f32::NEG_INFINITY);
        }
        let (mut s, mut c, mut s1, mut c1) = (vec![0.0; len], vec![0.0; len], vec![0.0; len], vec![0.0; len]);
        with_simd(|| {
            sin_cos_slice(&xs, &mut s, &mut c);
            sin_or_cos_slice::<false>(&xs, &mut s1);
            sin_or_cos_slice::<true>(&xs, &mut c1);
        });
        for (i, &x) in xs.iter().enumerate() {
            let want = if x.abs() <= SIN_COS_MAX {
                sin_cos_f32(x)
            } else {
                (x.sin(), x.cos())
            };
            let want = (want.0.to_bits(), want.1.to_bits());
            assert_eq!((s[i].to_bits(), c[i].to_bits()), want, "{len} {i} {x:e}");
            assert_eq!((s1[i].to_bits(), c1[i].to_bits()), want, "{len} {i} {x:e}");
        }
    }
}

#[test]
fn tensor_ops_fall_back_to_libm_outside_the_range() {
    // 1000 elements (vector path, several blocks); one block holds values
    // out of range, which go through libm, exactly, and only they
    let mut xs: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 0.0137).collect();
    xs[600] = 1.0e6;
    xs[601] = f32::NAN;
    xs[602] = f32::INFINITY;
    // (the eager ops, whose f32 kernels are these slice functions)
    let t = gradtape::Tensor::from_vec(xs.clone(), &[1000]).unwrap();
    let (s, c, e) = (
        t.sin().unwrap().to_vec::<f32>().unwrap(),
        t.cos().unwrap().to_vec::<f32>().unwrap(),
        t.exp().unwrap().to_vec::<f32>().unwrap(),
    );
    for (i, &x) in xs.iter().enumerate() {
        if (600..603).contains(&i) {
            assert_eq!(s[i].to_bits(), x.sin().to_bits(), "sin({x}) falls back to libm");
            assert_eq!(c[i].to_bits(), x.cos().to_bits(), "cos({x}) falls back to libm");
        } else {
            assert!(ulps(s[i], (x as f64).sin()) <= 1.0, "sin({x})");
            assert!(ulps(c[i], (x as f64).cos()) <= 1.0, "cos({x})");
        }
        if x.is_finite() {
            assert!(ulps(e[i], (x as f64).exp()) <= 1.0, "exp({x})");
        }
    }
    assert!(e[601].is_nan() && e[602] == f32::INFINITY);
}

#[test]
fn dispatch_gives_the_same_bits() {
    let xs: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 0.173).collect();
    let plain: Vec<f32> = xs
        .iter()
        .map(|&x| exp_f32(x) + sin_cos_f32(x).0 * sin_cos_f32(x).1)
        .collect();
    let simd: Vec<f32> = with_simd(|| {
        xs.iter()
            .map(|&x| exp_f32(x) + sin_cos_f32(x).0 * sin_cos_f32(x).1)
            .collect()
    });
    assert_eq!(plain, simd);
}
