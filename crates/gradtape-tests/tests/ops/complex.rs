//! Complex tensors: construction, reading, display, casts, the forward values
//! of the complex ops (checked against hand-computed numbers), the issue's
//! gradient examples under TensorFlow's convention (the gradient is
//! `conj(df/dz) · dy`), mixed real/complex graphs on the tape, and the
//! errors for what complex numbers do not support.
//!
//! The finite-difference check of every op's gradient is in
//! `gradcheck_complex.rs`; the never-panic property test in
//! `robust_complex.rs`.

use gradtape::{Complex, DType, Error, GradientTape, Result, Tensor, Variable};

type C32 = Complex<f32>;
type C64 = Complex<f64>;

fn c(re: f64, im: f64) -> C64 {
    Complex::new(re, im)
}

/// The tensor of `vals` in the complex dtype `dt` (C64 or C128).
fn ct(vals: &[C64], shape: &[usize], dt: DType) -> Tensor {
    let t = Tensor::from_vec(vals.to_vec(), shape).unwrap();
    if dt == DType::C128 {
        t
    } else {
        t.cast(dt).unwrap()
    }
}

/// The elements of a complex tensor of either dtype, as `Complex<f64>`.
fn cv(t: &Tensor) -> Vec<C64> {
    match t.dtype() {
        DType::C64 => t
            .to_vec::<C32>()
            .unwrap()
            .into_iter()
            .map(|z| c(z.re as f64, z.im as f64))
            .collect(),
        DType::C128 => t.to_vec::<C64>().unwrap(),
        d => panic!("not complex: {d}"),
    }
}

#[track_caller]
fn close(got: &[C64], want: &[C64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).norm_sqr().sqrt() <= tol * (1.0 + w.norm_sqr().sqrt()),
            "{got:?} vs {want:?}"
        );
    }
}

#[track_caller]
fn close_r(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{got:?} vs {want:?}");
    }
}

const DTYPES: [(DType, f64); 2] = [(DType::C64, 1e-6), (DType::C128, 1e-14)];

// ---------------------------------------------------------------- the examples

#[test]
fn gradient_of_c_times_z_is_conj_c() -> Result<()> {
    for (dt, tol) in DTYPES {
        let cc = ct(&[c(5.0, 7.0)], &[], dt);
        let z = ct(&[c(1.5, -2.0)], &[], dt);
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&z);
            cc.mul(&z)
        })?;
        assert_eq!(y.dtype(), dt);
        let g = tape.gradient(&y, &z)?.expect("connected");
        assert_eq!(g.dtype(), dt);
        close(&cv(&g), &[c(5.0, -7.0)], tol);
        // and through the other operand
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&z);
            z.mul(&cc)
        })?;
        close(&cv(&tape.gradient(&y, &z)?.unwrap()), &[c(5.0, -7.0)], tol);
    }
    Ok(())
}

#[test]
fn gradient_of_abs_squared_is_2z() -> Result<()> {
    for (dt, tol) in DTYPES {
        let z = ct(&[c(1.0, 2.0)], &[], dt);
        // |z|² as abs(z)², as real(z · conj z), and as re² + im²
        let forms: [fn(&Tensor) -> Result<Tensor>; 3] = [
            |z| z.abs()?.square(),
            |z| z.mul(&z.conj()?)?.real(),
            |z| z.real()?.square()?.add(&z.imag()?.square()?),
        ];
        for f in forms {
            let tape = GradientTape::new();
            let y = tape.record(|| {
                tape.watch(&z);
                f(&z)
            })?;
            assert_eq!(y.dtype(), dt.real_dtype());
            close_r(&y.to_vec_f64(), &[5.0], tol);
            let g = tape.gradient(&y, &z)?.expect("connected");
            assert_eq!(g.dtype(), dt);
            close(&cv(&g), &[c(2.0, 4.0)], tol);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- construction and reading

#[test]
fn constructors_readers_and_dtypes() -> Result<()> {
    let t = Tensor::from_vec(vec![Complex::new(1.0f32, 2.0)], &[1])?;
    assert_eq!(t.dtype(), DType::C64);
    assert_eq!(t.to_vec::<C32>()?, vec![Complex::new(1.0, 2.0)]);
    assert_eq!(t.to_scalar::<C32>()?, Complex::new(1.0, 2.0));
    let s = Tensor::scalar(c(3.0, -4.0));
    assert_eq!(s.dtype(), DType::C128);
    assert_eq!(s.to_scalar::<C64>()?, c(3.0, -4.0));
    assert!(matches!(
        s.to_vec::<C32>(),
        Err(Error::DTypeMismatch {
            op: "to_vec",
            lhs: DType::C128,
            rhs: DType::C64
        })
    ));
    assert!(matches!(s.to_vec::<f64>(), Err(Error::DTypeMismatch { .. })));

    let z = Tensor::complex(&Tensor::vector(&[1.0f32, 2.0]), &Tensor::vector(&[-1.0f32, 0.5]))?;
    assert_eq!(z.dtype(), DType::C64);
    assert_eq!(
        z.to_vec::<C32>()?,
        vec![Complex::new(1.0, -1.0), Complex::new(2.0, 0.5)]
    );
    assert_eq!(z.real()?.to_vec::<f32>()?, vec![1.0, 2.0]);
    assert_eq!(z.imag()?.to_vec::<f32>()?, vec![-1.0, 0.5]);
    // broadcasting parts
    let b = Tensor::complex(
        &Tensor::from_vec(vec![1.0f64, 2.0], &[2, 1])?,
        &Tensor::vector(&[10.0f64, 20.0, 30.0]),
    )?;
    assert_eq!(b.shape(), &[2, 3]);
    assert_eq!(
        b.to_vec::<C64>()?,
        vec![c(1., 10.), c(1., 20.), c(1., 30.), c(2., 10.), c(2., 20.), c(2., 30.)]
    );

    for (dt, size) in [(DType::C64, 8), (DType::C128, 16)] {
        assert!(dt.is_complex() && dt.is_differentiable() && !dt.is_float() && !dt.is_int());
        assert_eq!(dt.size_in_bytes(), size);
        assert_eq!(dt.complex_dtype(), Some(dt));
    }
    assert!(!DType::F32.is_complex() && DType::F32.is_differentiable() && !DType::I32.is_differentiable());
    assert_eq!(DType::C64.real_dtype(), DType::F32);
    assert_eq!(DType::C128.real_dtype(), DType::F64);
    assert_eq!(DType::F32.complex_dtype(), Some(DType::C64));
    assert_eq!(DType::F64.complex_dtype(), Some(DType::C128));
    assert_eq!(DType::I64.complex_dtype(), None);
    assert_eq!(
        (DType::C64.name(), DType::C128.to_string()),
        ("complex64", "complex128".to_string())
    );

    // filled constructors: real values
    assert_eq!(Tensor::ones(&[2], DType::C128).to_vec::<C64>()?, vec![c(1., 0.); 2]);
    assert_eq!(
        Tensor::full(&[1], -2.5, DType::C64).to_vec::<C32>()?,
        vec![Complex::new(-2.5, 0.0)]
    );
    assert_eq!(Tensor::zeros(&[0, 2], DType::C64).shape(), &[0, 2]);
    Ok(())
}

#[test]
fn display_is_tensorflow_style() {
    let z = Tensor::from_vec(vec![Complex::new(1.0f32, 2.0), Complex::new(-0.5, -3.0)], &[2]).unwrap();
    assert_eq!(
        z.to_string(),
        "Tensor([(1.0+2.0j), (-0.5-3.0j)], shape=[2], dtype=complex64)"
    );
    let s = Tensor::scalar(c(0.0, 1.0));
    assert_eq!(s.to_string(), "Tensor((0.0+1.0j), shape=[], dtype=complex128)");
    let m = Tensor::from_vec(vec![c(1., 0.), c(2., 0.), c(3., -1.), c(4., 0.5)], &[2, 2]).unwrap();
    assert_eq!(
        format!("{m:?}"),
        "Tensor([[(1.0+0.0j), (2.0+0.0j)], [(3.0-1.0j), (4.0+0.5j)]], shape=[2, 2], dtype=complex128)"
    );
}

#[test]
fn casts_real_to_complex_and_between_complex_types() -> Result<()> {
    let x = Tensor::vector(&[1.5f32, -2.0]);
    let z = x.cast(DType::C128)?;
    assert_eq!(z.to_vec::<C64>()?, vec![c(1.5, 0.0), c(-2.0, 0.0)]);
    let i = Tensor::vector(&[3i64, -4]).cast(DType::C64)?;
    assert_eq!(
        i.to_vec::<C32>()?,
        vec![Complex::new(3.0, 0.0), Complex::new(-4.0, 0.0)]
    );
    let b = Tensor::vector(&[true, false]).cast(DType::C64)?;
    assert_eq!(b.to_vec::<C32>()?, vec![Complex::new(1.0, 0.0), Complex::new(0.0, 0.0)]);
    let w = Tensor::vector(&[c(0.1, -0.2)]).cast(DType::C64)?;
    assert_eq!(w.to_vec::<C32>()?, vec![Complex::new(0.1f32, -0.2f32)]);
    let back = w.cast(DType::C128)?.to_vec::<C64>()?;
    assert_eq!(back, vec![c(0.1f32 as f64, -0.2f32 as f64)]);

    // gradient of a real -> complex cast is the real part of the cotangent
    let x = Tensor::vector(&[1.0f64, 2.0]);
    let k = Tensor::scalar(c(3.0, 4.0));
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        x.cast(DType::C128)?.mul(&k)?.sum_all()
    })?;
    // L = sum(c · x) for real x: the complex cotangent of x is conj(c), its real part 3
    let g = tape.gradient(&y, &x)?.unwrap();
    assert_eq!(g.dtype(), DType::F64);
    assert_eq!(g.to_vec::<f64>()?, vec![3.0, 3.0]);
    Ok(())
}

// ---------------------------------------------------------------- forward values

#[test]
fn elementwise_values_match_hand_computation() -> Result<()> {
    let a = [c(1.0, 2.0), c(-3.0, 0.5), c(0.0, -1.0)];
    let b = [c(2.0, -1.0), c(1.0, 1.0), c(4.0, 0.0)];
    for (dt, tol) in DTYPES {
        let (ta, tb) = (ct(&a, &[3], dt), ct(&b, &[3], dt));
        // (1+2i)+(2-i) = 3+i; (-3+.5i)+(1+i) = -2+1.5i; -i+4 = 4-i
        close(&cv(&ta.add(&tb)?), &[c(3., 1.), c(-2., 1.5), c(4., -1.)], tol);
        close(&cv(&ta.sub(&tb)?), &[c(-1., 3.), c(-4., -0.5), c(-4., -1.)], tol);
        // (1+2i)(2-i) = 2 - i + 4i + 2 = 4+3i; (-3+.5i)(1+i) = -3 -3i +.5i -.5 = -3.5-2.5i; -4i
        close(&cv(&ta.mul(&tb)?), &[c(4., 3.), c(-3.5, -2.5), c(0., -4.)], tol);
        // (1+2i)/(2-i) = (1+2i)(2+i)/5 = (2+i+4i-2)/5 = i; (-3+.5i)/(1+i) = (-3+.5i)(1-i)/2 = (-3+3i+.5i+.5)/2
        close(&cv(&ta.div(&tb)?), &[c(0., 1.), c(-1.25, 1.75), c(0., -0.25)], tol);
        close(&cv(&ta.neg()?), &[c(-1., -2.), c(3., -0.5), c(0., 1.)], tol);
        close(&cv(&ta.conj()?), &[c(1., -2.), c(-3., -0.5), c(0., 1.)], tol);
        // (1+2i)² = -3+4i; (-3+.5i)² = 9 - 3i - .25 = 8.75-3i; (-i)² = -1
        close(&cv(&ta.square()?), &[c(-3., 4.), c(8.75, -3.), c(-1., 0.)], tol);
        close(&cv(&ta.mul_scalar(2.0)?), &[c(2., 4.), c(-6., 1.), c(0., -2.)], tol);
        close(
            &cv(&ta.div_scalar(2.0)?),
            &[c(0.5, 1.), c(-1.5, 0.25), c(0., -0.5)],
            tol,
        );
        close(&cv(&ta.add_scalar(1.0)?), &[c(2., 2.), c(-2., 0.5), c(1., -1.)], tol);
        close(&cv(&ta.sub_scalar(1.0)?), &[c(0., 2.), c(-4., 0.5), c(-1., -1.)], tol);
        let r = ta.abs()?;
        assert_eq!(r.dtype(), dt.real_dtype());
        close_r(&r.to_vec_f64(), &[5f64.sqrt(), 9.25f64.sqrt(), 1.0], tol);
        let ang = ta.angle()?;
        assert_eq!(ang.dtype(), dt.real_dtype());
        close_r(
            &ang.to_vec_f64(),
            &[2f64.atan2(1.0), 0.5f64.atan2(-3.0), -std::f64::consts::FRAC_PI_2],
            tol,
        );
        // e^(iπ) = -1; e^(1 + iπ/2) = e·i; e^0 = 1
        let e = ct(
            &[
                c(0., std::f64::consts::PI),
                c(1., std::f64::consts::FRAC_PI_2),
                c(0., 0.),
            ],
            &[3],
            dt,
        );
        close(
            &cv(&e.exp()?),
            &[c(-1., 0.), c(0., std::f64::consts::E), c(1., 0.)],
            tol * 4.0,
        );
        // ln(-1) = iπ (principal branch); ln(i) = iπ/2; ln(e) = 1
        let l = ct(&[c(-1., 0.), c(0., 1.), c(std::f64::consts::E, 0.)], &[3], dt);
        close(
            &cv(&l.log()?),
            &[
                c(0., std::f64::consts::PI),
                c(0., std::f64::consts::FRAC_PI_2),
                c(1., 0.),
            ],
            tol * 4.0,
        );
        // broadcasting a scalar
        let s = ct(&[c(0., 1.)], &[], dt);
        close(&cv(&ta.mul(&s)?), &[c(-2., 1.), c(-0.5, -3.), c(1., 0.)], tol);
        // equality works, ordering does not
        let eq = ta.eq(&ct(&[c(1., 2.), c(-3., 0.), c(0., -1.)], &[3], dt))?;
        assert_eq!(eq.to_vec::<bool>()?, vec![true, false, true]);
        assert_eq!(ta.ne(&ta)?.to_vec::<bool>()?, vec![false; 3]);
    }
    Ok(())
}

#[test]
fn sum_mean_and_matmul_values() -> Result<()> {
    for (dt, tol) in DTYPES {
        let m = ct(
            &[c(1., 1.), c(2., 0.), c(0., -1.), c(3., 2.), c(-1., 0.5), c(0., 0.)],
            &[2, 3],
            dt,
        );
        close(&cv(&m.sum_all()?), &[c(5., 2.5)], tol);
        close(&cv(&m.sum(&[0], false)?), &[c(4., 3.), c(1., 0.5), c(0., -1.)], tol);
        let s1 = m.sum(&[-1], true)?;
        assert_eq!(s1.shape(), &[2, 1]);
        close(&cv(&s1), &[c(3., 0.), c(2., 2.5)], tol);
        close(&cv(&m.mean(&[1], false)?), &[c(1., 0.), c(2. / 3., 2.5 / 3.)], tol);
        close(&cv(&m.mean_all()?), &[c(5. / 6., 2.5 / 6.)], tol);
        // [[1+i, 2], [i, 1]] @ [[1, -i], [1+i, 0]]
        let a = ct(&[c(1., 1.), c(2., 0.), c(0., 1.), c(1., 0.)], &[2, 2], dt);
        let b = ct(&[c(1., 0.), c(0., -1.), c(1., 1.), c(0., 0.)], &[2, 2], dt);
        // row0: (1+i)·1 + 2(1+i) = 3+3i; (1+i)(-i) + 0 = 1-i
        // row1: i + (1+i) = 1+2i; i(-i) = 1
        close(&cv(&a.matmul(&b)?), &[c(3., 3.), c(1., -1.), c(1., 2.), c(1., 0.)], tol);
        // aᵀ b (transpose, no conjugation): aᵀ = [[1+i, i], [2, 1]]
        // row0: (1+i) + i(1+i) = 1+i+i-1 = 2i; (1+i)(-i) = 1-i
        // row1: 2 + 1+i = 3+i; -2i
        close(
            &cv(&a.matmul_with(&b, true, false)?),
            &[c(0., 2.), c(1., -1.), c(3., 1.), c(0., -2.)],
            tol,
        );
        // batch broadcasting: [2,2,2] @ [2,2]
        let ab = Tensor::stack_like(&a)?;
        close(
            &cv(&ab.matmul(&b)?),
            &[
                c(3., 3.),
                c(1., -1.),
                c(1., 2.),
                c(1., 0.),
                c(3., 3.),
                c(1., -1.),
                c(1., 2.),
                c(1., 0.),
            ],
            tol,
        );
    }
    Ok(())
}

/// `[a, a]` along a new leading axis (a local helper written with public ops).
trait StackLike {
    fn stack_like(a: &Tensor) -> Result<Tensor>;
}
impl StackLike for Tensor {
    fn stack_like(a: &Tensor) -> Result<Tensor> {
        let mut s = vec![2];
        s.extend_from_slice(a.shape());
        a.expand_dims(0)?.broadcast_to(&s)?.contiguous()
    }
}

#[test]
fn data_movement_ops_carry_complex_values() -> Result<()> {
    let v: Vec<C64> = (0..6).map(|i| c(i as f64, -(i as f64) / 2.0)).collect();
    let t = Tensor::from_vec(v.clone(), &[2, 3])?;
    let tt = t.transpose()?;
    assert_eq!(
        tt.contiguous()?.to_vec::<C64>()?,
        vec![v[0], v[3], v[1], v[4], v[2], v[5]]
    );
    assert_eq!(
        tt.reshape(&[6])?.to_vec::<C64>()?,
        vec![v[0], v[3], v[1], v[4], v[2], v[5]]
    );
    assert_eq!(t.slice(&[1, 1], &[1, 2])?.to_vec::<C64>()?, vec![v[4], v[5]]);
    let p = Tensor::vector(&[v[1]]).pad(&[(1, 1)])?;
    assert_eq!(p.to_vec::<C64>()?, vec![c(0., 0.), v[1], c(0., 0.)]);
    let g = t.gather(&Tensor::vector(&[2i64, 0]), 1)?;
    assert_eq!(g.to_vec::<C64>()?, vec![v[2], v[0], v[5], v[3]]);
    let sa = Tensor::vector(&[v[1], v[2], v[3]]).scatter_add(&Tensor::vector(&[0i32, 1, 0]), 0, 2)?;
    assert_eq!(sa.to_vec::<C64>()?, vec![v[1] + v[3], v[2]]);
    let b = Tensor::vector(&[v[1], v[2]]).broadcast_to(&[2, 2])?;
    assert_eq!(b.to_vec::<C64>()?, vec![v[1], v[2], v[1], v[2]]);
    let w = Tensor::where_(
        &Tensor::vector(&[true, false]),
        &Tensor::vector(&[v[1], v[2]]),
        &Tensor::scalar(v[5]),
    )?;
    assert_eq!(w.to_vec::<C64>()?, vec![v[1], v[5]]);
    assert_eq!(t.expand_dims(0)?.squeeze(&[])?.to_vec::<C64>()?, v);
    assert_eq!(t.permute(&[1, 0])?.narrow(0, 2, 1)?.to_vec::<C64>()?, vec![v[2], v[5]]);
    Ok(())
}

// ---------------------------------------------------------------- the tape

#[test]
fn complex_target_gets_a_ones_seed_and_mixed_graphs_work() -> Result<()> {
    // y = exp(z) · w, complex target: gradient = conj(exp(z) · w) (ones seed)
    let z = Tensor::vector(&[c(0.3, -0.2), c(-1.0, 0.7)]);
    let w = Tensor::vector(&[c(2.0, 1.0), c(0.0, -1.0)]);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&z);
        z.exp()?.mul(&w)
    })?;
    let g = tape.gradient(&y, &z)?.unwrap();
    let want: Vec<C64> = [c(0.3, -0.2), c(-1.0, 0.7)]
        .iter()
        .zip([c(2.0, 1.0), c(0.0, -1.0)])
        .map(|(z, w)| (c(z.re.exp() * z.im.cos(), z.re.exp() * z.im.sin()) * w).conj())
        .collect();
    close(&cv(&g), &want, 1e-14);

    // real sources, complex inside, real target: L = |x + i y|² = x² + y²
    let (x, yy) = (Tensor::scalar(3.0f64), Tensor::scalar(-4.0f64));
    let tape = GradientTape::new();
    let l = tape.record(|| {
        tape.watch(&x);
        tape.watch(&yy);
        Tensor::complex(&x, &yy)?.abs()?.square()
    })?;
    let gs = tape.gradient(&l, &[x.clone(), yy.clone()])?;
    assert_eq!(gs[0].as_ref().unwrap().to_scalar::<f64>()?, 6.0);
    assert_eq!(gs[1].as_ref().unwrap().to_scalar::<f64>()?, -8.0);

    // angle: d/dz of arg(z) at z = 1 + i is (-y + ix)/|z|² = (-1 + i)/2
    let z = Tensor::scalar(c(1.0, 1.0));
    let tape = GradientTape::new();
    let a = tape.record(|| {
        tape.watch(&z);
        z.angle()
    })?;
    close(&cv(&tape.gradient(&a, &z)?.unwrap()), &[c(-0.5, 0.5)], 1e-15);

    // imag: L = imag(z)·3 -> gradient 3i
    let tape = GradientTape::new();
    let l = tape.record(|| {
        tape.watch(&z);
        z.imag()?.mul_scalar(3.0)
    })?;
    close(&cv(&tape.gradient(&l, &z)?.unwrap()), &[c(0.0, 3.0)], 0.0);
    Ok(())
}

#[test]
fn second_order_through_nested_tapes() -> Result<()> {
    // L(z) = real(z³) with z = x + iy: L = x³ - 3xy². grad = (3x² - 3y²) + i(-6xy) = conj(3z²).
    // M = real(conj(v) · grad L) with v = 1: M = 3x² - 3y²; grad M = 6x - 6y i = 6 conj(z).
    let z = Tensor::scalar(c(0.5, 2.0));
    let outer = GradientTape::new();
    let m = outer.record(|| -> Result<Tensor> {
        outer.watch(&z);
        let inner = GradientTape::new();
        let l = inner.record(|| {
            inner.watch(&z);
            z.mul(&z)?.mul(&z)?.real()
        })?;
        let g = inner.gradient(&l, &z)?.unwrap();
        close(&cv(&g), &[c(3.0 * (0.25 - 4.0), -6.0 * 0.5 * 2.0)], 1e-14);
        g.real()
    })?;
    let h = outer.gradient(&m, &z)?.unwrap();
    close(&cv(&h), &[c(3.0, -12.0)], 1e-14);
    Ok(())
}

#[test]
fn persistent_tape_and_complex_variables() -> Result<()> {
    let v = Variable::new(Tensor::vector(&[c(1.0, -1.0), c(0.0, 2.0)]));
    let tape = GradientTape::persistent();
    let l = tape.record(|| v.read().abs()?.square()?.sum_all())?;
    let g = tape.gradient(&l, &v)?.expect("complex variables are watched");
    close(&cv(&g), &[c(2.0, -2.0), c(0.0, 4.0)], 1e-15);
    let again = tape.gradient(&l, &v)?.unwrap();
    close(&cv(&again), &[c(2.0, -2.0), c(0.0, 4.0)], 1e-15);
    Ok(())
}

#[test]
fn unconnected_complex_source_gives_none_or_zeros() -> Result<()> {
    let z = Tensor::vector(&[c(1.0, 1.0)]);
    let x = Tensor::vector(&[2.0f64]);
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&z);
        tape.watch(&x);
        x.square()
    })?;
    assert!(tape.gradient(&y, &z)?.is_none());
    let opts = gradtape::GradientOptions::default().unconnected(gradtape::Unconnected::Zero);
    let gs = tape.gradient_with(&y, std::slice::from_ref(&z), opts)?;
    let g = gs[0].as_ref().unwrap();
    assert_eq!(g.dtype(), DType::C128);
    assert_eq!(g.to_vec::<C64>()?, vec![c(0.0, 0.0)]);
    Ok(())
}

// ---------------------------------------------------------------- errors

#[track_caller]
fn err<T: std::fmt::Debug>(r: Result<T>, needles: &[&str]) -> Error {
    let e = r.expect_err("expected an error");
    let msg = e.to_string();
    for n in needles {
        assert!(msg.contains(n), "message {msg:?} does not contain {n:?}");
    }
    e
}

#[test]
fn float_only_ops_reject_complex_naming_the_op() {
    let z = Tensor::vector(&[c(1.0, 2.0)]);
    let ops: Vec<(&str, Result<Tensor>)> = vec![
        ("relu", z.relu()),
        ("sign", z.sign()),
        ("erf", z.erf()),
        ("asin", z.asin()),
        ("atanh", z.atanh()),
        ("softmax", z.softmax(-1)),
        ("log_softmax", z.log_softmax(-1)),
        ("maximum", z.maximum(&z)),
        ("minimum", z.minimum(&z)),
        ("max", z.max_all()),
        ("min", z.min(&[0], false)),
    ];
    for (name, r) in ops {
        let e = err(r, &[name, "complex128"]);
        assert!(
            matches!(e, Error::UnsupportedDType { op, dtype: DType::C128, .. } if op == name),
            "{name}: {e:?}"
        );
    }
}

#[test]
fn ordering_comparisons_of_complex_are_errors() {
    let z = Tensor::vector(&[Complex::new(1.0f32, 2.0)]);
    for (name, r) in [("lt", z.lt(&z)), ("le", z.le(&z)), ("gt", z.gt(&z)), ("ge", z.ge(&z))] {
        let e = err(r, &[name, "complex64"]);
        assert!(matches!(e, Error::UnsupportedDType { op, .. } if op == name), "{e:?}");
    }
    let e = err(z.gt_scalar(0.0), &["gt", "complex64"]);
    assert!(matches!(e, Error::UnsupportedDType { .. }), "{e:?}");
}

#[test]
fn complex_to_real_cast_is_an_error() {
    let z = Tensor::vector(&[c(1.0, 2.0)]);
    for to in [DType::F64, DType::F32, DType::I32, DType::I64, DType::Bool] {
        let e = err(z.cast(to), &["cast", "complex128", to.name(), "real"]);
        assert!(matches!(e, Error::InvalidArgument { op: "cast", .. }), "{e:?}");
    }
}

#[test]
fn complex_parts_and_mixed_dtypes_errors() {
    let (f32v, f64v) = (Tensor::vector(&[1.0f32]), Tensor::vector(&[1.0f64]));
    let e = err(Tensor::complex(&f32v, &f64v), &["complex", "f32", "f64"]);
    assert!(matches!(e, Error::DTypeMismatch { op: "complex", .. }), "{e:?}");
    let i = Tensor::vector(&[1i32]);
    let e = err(Tensor::complex(&i, &i), &["complex", "i32"]);
    assert!(matches!(e, Error::UnsupportedDType { op: "complex", .. }), "{e:?}");
    let z = Tensor::vector(&[c(1.0, 1.0)]);
    let e = err(Tensor::complex(&z, &z), &["complex", "complex128"]);
    assert!(matches!(e, Error::UnsupportedDType { op: "complex", .. }), "{e:?}");
    let e = err(
        Tensor::complex(&Tensor::vector(&[1.0f64; 2]), &Tensor::vector(&[1.0f64; 3])),
        &["complex", "[2]", "[3]"],
    );
    assert!(matches!(e, Error::ShapeMismatch { op: "complex", .. }), "{e:?}");
    // complex with real, complex64 with complex128
    for (name, r) in [
        ("add", z.add(&f64v)),
        ("sub", z.sub(&f64v)),
        ("mul", z.mul(&f64v)),
        ("div", z.div(&f64v)),
        ("add", f64v.add(&z)),
        ("mul", z.mul(&z.cast(DType::C64).unwrap())),
        (
            "matmul",
            z.reshape(&[1, 1]).unwrap().matmul(&f64v.reshape(&[1, 1]).unwrap()),
        ),
        ("eq", z.eq(&f64v)),
    ] {
        let e = err(r, &[name]);
        assert!(
            matches!(e, Error::DTypeMismatch { op, .. } if op == name),
            "{name}: {e:?}"
        );
    }
    let e = err(
        Tensor::vector(&[c(1., 1.); 3]).add(&Tensor::vector(&[c(1., 1.); 2])),
        &["add", "[3]", "[2]"],
    );
    assert!(matches!(e, Error::ShapeMismatch { op: "add", .. }), "{e:?}");
    let e = err(i.angle(), &["angle", "i32"]);
    assert!(matches!(e, Error::UnsupportedDType { op: "angle", .. }), "{e:?}");
    let e = err(Tensor::where_(&z, &z, &z), &["where", "complex128"]);
    assert!(matches!(e, Error::UnsupportedDType { op: "where", .. }), "{e:?}");
}

#[test]
fn real_inputs_of_the_part_ops() -> Result<()> {
    let x = Tensor::vector(&[-1.5f64, 0.0, 2.0]);
    assert_eq!(x.real()?.to_vec::<f64>()?, vec![-1.5, 0.0, 2.0]);
    assert_eq!(x.imag()?.to_vec::<f64>()?, vec![0.0; 3]);
    assert_eq!(x.conj()?.to_vec::<f64>()?, vec![-1.5, 0.0, 2.0]);
    assert_eq!(x.angle()?.to_vec::<f64>()?, vec![std::f64::consts::PI, 0.0, 0.0]);
    // conj/real of a real tensor pass gradients through
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        x.conj()?.real()?.mul_scalar(2.0)?.sum_all()
    })?;
    assert_eq!(tape.gradient(&y, &x)?.unwrap().to_vec::<f64>()?, vec![2.0; 3]);
    Ok(())
}

#[test]
fn item_of_a_complex_tensor_is_refused() {
    let e = err(Tensor::scalar(c(1.0, 2.0)).item(), &["item", "complex128"]);
    assert!(matches!(e, Error::UnsupportedDType { op: "item", .. }), "{e:?}");
}

#[test]
fn abs_at_zero_has_gradient_zero_as_tensorflow() -> Result<()> {
    // TF's ComplexAbs gradient divides with div_no_nan: 0 at z = 0 (abs'(0) = 0 for reals too)
    for (dt, _) in DTYPES {
        let z = ct(&[c(0.0, 0.0), c(3.0, -4.0)], &[2], dt);
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&z);
            z.abs()?.sum_all()
        })?;
        let g = tape.gradient(&y, &z)?.unwrap();
        close(&cv(&g), &[c(0.0, 0.0), c(0.6, -0.8)], 1e-7);
        assert!(cv(&g).iter().all(|v| v.re.is_finite() && v.im.is_finite()));
    }
    Ok(())
}
