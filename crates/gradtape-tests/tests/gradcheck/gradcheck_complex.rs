//! Every complex op's gradient against central finite differences on the
//! real and imaginary parts, in complex128, first and second order, from one
//! table of cases (the complex counterpart of `gradcheck.rs`).
//!
//! The convention checked is TensorFlow's: for a real loss `L` of a complex
//! input `z = x + iy`, the tape's gradient is `dL/dx + i·dL/dy`. Each case's
//! function `f` is reduced to a real loss with fixed, non-uniform weights:
//! `L = Σ real(w ⊙ f(z))` for a complex output (complex `w`), `Σ w ⊙ f(z)`
//! for a real one. First order compares the tape's gradient of `L` with
//! `(L(z + h·e) − L(z − h·e)) / 2h` for `e` every real and every imaginary
//! unit direction of every input element (real inputs: every element).
//! Second order does the same for `M = Σ real(conj(v) ⊙ ∇L)` (a
//! Hessian-vector product, through nested tapes), which checks the gradient
//! rules' own gradients. Functions are usually composed with a (complex)
//! square so that second order differentiates the op's rule, not a constant.

use gradtape::{Complex, DType, GradientTape, Result, Tensor};

type C = Complex<f64>;
type Op = fn(&[Tensor]) -> Result<Tensor>;

/// Where an input's values lie.
#[derive(Clone, Copy, Debug)]
enum Dom {
    /// Complex, parts in about `[-1.3, 1.3]`.
    Any,
    /// Complex, `|z| >= 0.3` (abs, division).
    NonZero,
    /// Complex, real part in `[0.4, 2.0]`: away from 0 and from the branch
    /// cut of log and angle on the negative real axis.
    Right,
    /// Real (f64), in about `[-1.3, 1.3]`.
    Real,
}
use Dom::*;

struct Case {
    name: String,
    f: Op,
    inputs: Vec<(Vec<usize>, Dom)>,
    second_order: bool,
    /// complex64 arithmetic inside: larger step and tolerance
    loose: bool,
}

fn case(name: impl Into<String>, f: Op, inputs: &[(&[usize], Dom)]) -> Case {
    Case {
        name: name.into(),
        f,
        inputs: inputs.iter().map(|(s, d)| (s.to_vec(), *d)).collect(),
        second_order: true,
        loose: false,
    }
}

impl Case {
    fn first_order_only(mut self) -> Self {
        self.second_order = false;
        self
    }

    fn loose(mut self) -> Self {
        self.loose = true;
        self
    }

    fn make_inputs(&self) -> Vec<Tensor> {
        self.inputs
            .iter()
            .enumerate()
            .map(|(j, (shape, dom))| {
                let n: usize = shape.iter().product();
                let s = |i: usize| (1.7 * i as f64 + 2.3 * j as f64 + 0.4).sin();
                let t = |i: usize| (1.1 * i as f64 + 0.7 * j as f64 + 0.9).cos();
                match dom {
                    Real => Tensor::from_vec((0..n).map(|i| 1.3 * s(i)).collect::<Vec<f64>>(), shape).unwrap(),
                    _ => {
                        let v: Vec<C> = (0..n)
                            .map(|i| match dom {
                                Any => C::new(1.3 * s(i), 1.1 * t(i)),
                                NonZero => {
                                    let (r, th) = (0.3 + s(i).abs(), 3.0 * t(i));
                                    C::new(r * th.cos(), r * th.sin())
                                }
                                _ => C::new(0.4 + 0.8 * (1.0 + s(i)), 0.9 * t(i)),
                            })
                            .collect();
                        Tensor::from_vec(v, shape).unwrap()
                    }
                }
            })
            .collect()
    }
}

/// Composes with the complex (or real) square.
fn sq(t: Result<Tensor>) -> Result<Tensor> {
    t?.square()
}

fn cidx(v: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

/// Deterministic, non-uniform weights of a shape: complex for complex dtypes.
fn weights(shape: &[usize], dtype: DType, k: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let re = |i: usize| 0.6 + 0.5 * (1.3 * i as f64 + k).sin();
    if dtype == DType::C128 {
        let v: Vec<C> = (0..n)
            .map(|i| C::new(re(i), 0.4 * (0.7 * i as f64 + 2.0 * k).cos()))
            .collect();
        Tensor::from_vec(v, shape).unwrap()
    } else {
        Tensor::from_vec((0..n).map(re).collect::<Vec<f64>>(), shape).unwrap()
    }
}

/// `Σ real(w ⊙ y)`, or `Σ w ⊙ y` for a real `y`.
fn real_sum(y: &Tensor, k: f64) -> Result<Tensor> {
    match y.dtype() {
        DType::C128 => y.mul(&weights(y.shape(), DType::C128, k))?.real()?.sum_all(),
        DType::F64 => y.mul(&weights(y.shape(), DType::F64, k))?.sum_all(),
        d => panic!("case output of dtype {d}: cast to complex128 or f64 inside the case"),
    }
}

fn loss(f: Op, xs: &[Tensor]) -> Result<Tensor> {
    real_sum(&f(xs)?, 0.3)
}

/// `∇L` w.r.t. every input (zeros where unconnected).
fn grad_l(f: Op, xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let l = tape.record(|| {
        for x in xs {
            tape.watch(x);
        }
        loss(f, xs)
    })?;
    let gs = tape.gradient(&l, xs)?;
    Ok(gs
        .into_iter()
        .zip(xs)
        .map(|(g, x)| g.unwrap_or_else(|| x.zeros_like()))
        .collect())
}

/// `M = Σ_j Σ real(conj(v_j) ⊙ ∇_j L)`.
fn hvp_target(f: Op, xs: &[Tensor]) -> Result<Tensor> {
    let gs = grad_l(f, xs)?;
    let mut m = Tensor::scalar(0.0f64);
    for (k, g) in gs.iter().enumerate() {
        assert_eq!(g.dtype(), xs[k].dtype(), "gradient dtype differs from its source's");
        assert_eq!(g.shape(), xs[k].shape(), "gradient shape differs from its source's");
        let v = weights(g.shape(), g.dtype(), 1.1 + k as f64);
        let term = if g.dtype() == DType::C128 {
            g.mul(&v.conj()?)?.real()?.sum_all()?
        } else {
            g.mul(&v)?.sum_all()?
        };
        m = m.add(&term)?;
    }
    Ok(m)
}

/// The components of a tensor as reals: `(re, im)` pairs for complex.
fn parts(t: &Tensor) -> Vec<f64> {
    match t.dtype() {
        DType::C128 => t.to_vec::<C>().unwrap().iter().flat_map(|z| [z.re, z.im]).collect(),
        DType::F64 => t.to_vec::<f64>().unwrap(),
        d => panic!("unexpected dtype {d}"),
    }
}

/// `t` with real component `k` (see [`parts`]) moved by `h`.
fn nudge(t: &Tensor, k: usize, h: f64) -> Tensor {
    match t.dtype() {
        DType::C128 => {
            let mut v = t.to_vec::<C>().unwrap();
            if k.is_multiple_of(2) {
                v[k / 2].re += h;
            } else {
                v[k / 2].im += h;
            }
            Tensor::from_vec(v, t.shape()).unwrap()
        }
        _ => {
            let mut v = t.to_vec::<f64>().unwrap();
            v[k] += h;
            Tensor::from_vec(v, t.shape()).unwrap()
        }
    }
}

struct Tol {
    eps: f64,
    atol: f64,
    rtol: f64,
}

/// Compares `analytic` (one tensor per input) with central differences of
/// `scalar`; returns (entries compared, largest error) or the first mismatch.
fn compare(
    scalar: &dyn Fn(&[Tensor]) -> Result<f64>,
    analytic: &[Tensor],
    xs: &[Tensor],
    tol: &Tol,
) -> std::result::Result<(usize, f64), String> {
    let mut n = 0;
    let mut max_err = 0.0f64;
    for j in 0..xs.len() {
        let a = parts(&analytic[j]);
        for (k, &ak) in a.iter().enumerate() {
            let mut plus = xs.to_vec();
            plus[j] = nudge(&xs[j], k, tol.eps);
            let mut minus = xs.to_vec();
            minus[j] = nudge(&xs[j], k, -tol.eps);
            let num = (scalar(&plus).map_err(|e| e.to_string())? - scalar(&minus).map_err(|e| e.to_string())?)
                / (2.0 * tol.eps);
            let err = (ak - num).abs();
            if err.is_nan() || err > tol.atol + tol.rtol * num.abs() {
                let part = if xs[j].dtype() == DType::C128 {
                    format!("element {} {}", k / 2, if k % 2 == 0 { "re" } else { "im" })
                } else {
                    format!("element {k}")
                };
                return Err(format!("input {j} {part}: analytic {ak}, numeric {num}"));
            }
            max_err = max_err.max(err);
            n += 1;
        }
    }
    Ok((n, max_err))
}

fn check(c: &Case) -> std::result::Result<usize, String> {
    let xs = c.make_inputs();
    let tol = if c.loose {
        Tol {
            eps: 1e-3,
            atol: 2e-3,
            rtol: 2e-3,
        }
    } else {
        Tol {
            eps: 1e-6,
            atol: 1e-6,
            rtol: 1e-5,
        }
    };
    let e = |e: gradtape::Error| e.to_string();
    let f = c.f;
    let g = grad_l(f, &xs).map_err(e)?;
    let (mut n, _) =
        compare(&|x| loss(f, x)?.to_scalar::<f64>(), &g, &xs, &tol).map_err(|m| format!("first order: {m}"))?;
    if c.second_order {
        let outer = GradientTape::new();
        let m = outer
            .record(|| {
                for x in &xs {
                    outer.watch(x);
                }
                hvp_target(f, &xs)
            })
            .map_err(e)?;
        let h: Vec<Tensor> = outer
            .gradient(&m, &xs)
            .map_err(e)?
            .into_iter()
            .zip(&xs)
            .map(|(g, x)| g.unwrap_or_else(|| x.zeros_like()))
            .collect();
        let (n2, _) = compare(&|x| hvp_target(f, x)?.to_scalar::<f64>(), &h, &xs, &tol)
            .map_err(|m| format!("second order: {m}"))?;
        n += n2;
    }
    Ok(n)
}

/// Shape pairs for binary ops: equal shapes, broadcasting, zero-size dims.
const PAIRS: &[(&[usize], &[usize])] = &[
    (&[], &[]),
    (&[4], &[4]),
    (&[2, 3], &[2, 3]),
    (&[2, 3], &[3]),
    (&[3], &[2, 3]),
    (&[2, 1], &[1, 3]),
    (&[], &[2, 3]),
    (&[2, 3], &[]),
    (&[0, 3], &[3]),
    (&[3, 1], &[0]),
];

const SHAPES: &[&[usize]] = &[&[], &[5], &[2, 3], &[0, 3]];

fn table() -> Vec<Case> {
    let mut t = Vec::new();

    // ---- complex elementwise arithmetic, every shape pair ----
    let binary: &[(&str, Op, Dom, Dom)] = &[
        ("add", |x| sq(x[0].add(&x[1])), Any, Any),
        ("sub", |x| sq(x[0].sub(&x[1])), Any, Any),
        ("mul", |x| x[0].mul(&x[1]), Any, Any),
        ("div", |x| x[0].div(&x[1]), Any, NonZero),
        ("complex", |x| sq(Tensor::complex(&x[0], &x[1])), Real, Real),
    ];
    for &(name, f, da, db) in binary {
        for &(sa, sb) in PAIRS {
            t.push(case(format!("{name} {sa:?},{sb:?}"), f, &[(sa, da), (sb, db)]));
        }
    }
    t.push(case("mul self", |x| x[0].mul(&x[0]), &[(&[2, 3], Any)]));
    t.push(case("div by own exp", |x| x[0].div(&x[0].exp()?), &[(&[4], Any)]));

    // ---- unary, every shape ----
    let unary: &[(&str, Op, Dom)] = &[
        ("neg", |x| sq(x[0].neg()), Any),
        ("exp", |x| x[0].exp(), Any),
        ("log", |x| x[0].log(), Right),
        ("square", |x| x[0].square(), Any),
        ("conj", |x| sq(x[0].conj()), Any),
        ("real", |x| sq(x[0].real()), Any),
        ("imag", |x| sq(x[0].imag()), Any),
        ("abs", |x| sq(x[0].abs()), NonZero),
        ("angle", |x| sq(x[0].angle()), Right),
        ("mul_scalar", |x| sq(x[0].mul_scalar(-1.7)), Any),
        ("div_scalar", |x| sq(x[0].div_scalar(0.8)), Any),
        ("add_scalar", |x| sq(x[0].add_scalar(0.3)), Any),
        ("sub_scalar", |x| sq(x[0].sub_scalar(2.0)), Any),
        ("identity", |x| sq(Ok(x[0].identity())), Any),
        ("cast f64 to complex128", |x| sq(x[0].cast(DType::C128)), Real),
    ];
    for &(name, f, d) in unary {
        for &s in SHAPES {
            t.push(case(format!("{name} {s:?}"), f, &[(s, d)]));
        }
    }
    // ---- holomorphic functions (complex_fns), composed with a square ----
    let holo: &[(&str, Op, Dom)] = &[
        ("sqrt", |x| sq(x[0].sqrt()), Right),
        ("rsqrt", |x| sq(x[0].rsqrt()), Right),
        ("reciprocal", |x| sq(x[0].reciprocal()), NonZero),
        ("sin", |x| sq(x[0].sin()), Any),
        ("cos", |x| sq(x[0].cos()), Any),
        ("tan", |x| sq(x[0].tan()), Any),
        ("sinh", |x| sq(x[0].sinh()), Any),
        ("cosh", |x| sq(x[0].cosh()), Any),
        ("tanh", |x| sq(x[0].tanh()), Any),
        ("sigmoid", |x| sq(x[0].sigmoid()), Any),
        ("pow_scalar 2.5", |x| sq(x[0].pow_scalar(2.5)), Right),
        ("pow_scalar -1.5", |x| x[0].pow_scalar(-1.5), Right),
    ];
    for &(name, f, d) in holo {
        for &s in &[&[5][..], &[2, 3], &[0, 3]] {
            t.push(case(format!("{name} {s:?}"), f, &[(s, d)]));
        }
    }
    t.push(case("pow", |x| sq(x[0].pow(&x[1])), &[(&[4], Right), (&[4], Any)]));
    t.push(case(
        "pow broadcast",
        |x| x[0].pow(&x[1]),
        &[(&[2, 3], Right), (&[3], Any)],
    ));
    t.push(case(
        "sin of sqrt over tanh",
        |x| x[0].sqrt()?.sin()?.div(&x[0].tanh()?),
        &[(&[3], Right)],
    ));
    // complex64 inside (f32 precision): loose
    for (name, f) in [
        (
            "cast complex64 mul",
            (|x| x[0].cast(DType::C64)?.mul(&x[1].cast(DType::C64)?)?.cast(DType::C128)) as Op,
        ),
        ("cast complex64 exp", |x| {
            x[0].cast(DType::C64)?.exp()?.cast(DType::C128)
        }),
        ("cast complex64 abs", |x| {
            sq(x[0].cast(DType::C64)?.abs()?.cast(DType::F64))
        }),
    ] {
        let shapes: &[(&[usize], Dom)] = &[(&[3], NonZero), (&[3], Any)];
        let n = if name.ends_with("mul") { 2 } else { 1 };
        t.push(case(name, f, &shapes[..n]).loose());
    }

    // ---- composites (mixed real / complex graphs) ----
    t.push(case("abs squared", |x| x[0].abs()?.square(), &[(&[4], Any)]));
    t.push(case(
        "z conj z real",
        |x| x[0].mul(&x[0].conj()?)?.real(),
        &[(&[4], Any)],
    ));
    t.push(case("exp of log", |x| x[0].log()?.exp(), &[(&[3], Right)]));
    t.push(case(
        "real times imag",
        |x| x[0].real()?.mul(&x[0].imag()?),
        &[(&[2, 2], Any)],
    ));
    t.push(case(
        "complex from parts of exp",
        |x| Tensor::complex(&x[0].exp()?.imag()?, &x[0].exp()?.real()?),
        &[(&[3], Any)],
    ));
    t.push(case(
        "polar form",
        |x| Tensor::complex(&x[0].angle()?.mul(&x[0].abs()?)?, &x[0].abs()?.square()?),
        &[(&[3], Right)],
    ));
    t.push(case(
        "real scale of complex",
        |x| x[0].mul(&Tensor::complex(&x[1], &x[1].neg()?)?),
        &[(&[2, 3], Any), (&[3], Real)],
    ));

    // ---- reductions ----
    const AXES: &[(&[isize], bool)] = &[
        (&[0], false),
        (&[1, 2], true),
        (&[-1], false),
        (&[], false),
        (&[2, 0], false),
    ];
    for (i, &(axes, keep)) in AXES.iter().enumerate() {
        let sum: [Op; 5] = [
            |x| sq(x[0].sum(AXES[0].0, AXES[0].1)),
            |x| sq(x[0].sum(AXES[1].0, AXES[1].1)),
            |x| sq(x[0].sum(AXES[2].0, AXES[2].1)),
            |x| sq(x[0].sum(AXES[3].0, AXES[3].1)),
            |x| sq(x[0].sum(AXES[4].0, AXES[4].1)),
        ];
        let mean: [Op; 5] = [
            |x| sq(x[0].mean(AXES[0].0, AXES[0].1)),
            |x| sq(x[0].mean(AXES[1].0, AXES[1].1)),
            |x| sq(x[0].mean(AXES[2].0, AXES[2].1)),
            |x| sq(x[0].mean(AXES[3].0, AXES[3].1)),
            |x| sq(x[0].mean(AXES[4].0, AXES[4].1)),
        ];
        t.push(case(format!("sum {axes:?} keep={keep}"), sum[i], &[(&[2, 3, 4], Any)]));
        t.push(case(
            format!("mean {axes:?} keep={keep}"),
            mean[i],
            &[(&[2, 3, 4], Any)],
        ));
    }
    t.push(case("sum_all", |x| sq(x[0].sum_all()), &[(&[3, 2], Any)]));
    t.push(case("sum_all empty", |x| sq(x[0].sum_all()), &[(&[0, 2], Any)]));
    t.push(case("mean_all", |x| sq(x[0].mean_all()), &[(&[3, 2], Any)]));

    // ---- matmul: every transpose flag, batch broadcasting, k = 0 ----
    let mm: &[(&str, Op, &[usize], &[usize])] = &[
        ("matmul", |x| x[0].matmul(&x[1]), &[2, 3], &[3, 4]),
        ("matmul ta", |x| x[0].matmul_with(&x[1], true, false), &[3, 2], &[3, 4]),
        ("matmul tb", |x| x[0].matmul_with(&x[1], false, true), &[2, 3], &[4, 3]),
        (
            "matmul ta tb",
            |x| x[0].matmul_with(&x[1], true, true),
            &[3, 2],
            &[4, 3],
        ),
        ("matmul batch", |x| x[0].matmul(&x[1]), &[2, 2, 3], &[3, 2]),
        ("matmul batch both", |x| x[0].matmul(&x[1]), &[2, 1, 2, 3], &[3, 3, 2]),
        ("matmul k=0", |x| x[0].matmul(&x[1]), &[2, 0], &[0, 3]),
        ("matmul squared", |x| sq(x[0].matmul(&x[1])), &[2, 2], &[2, 3]),
    ];
    for &(name, f, sa, sb) in mm {
        t.push(case(format!("{name} {sa:?},{sb:?}"), f, &[(sa, Any), (sb, Any)]));
    }
    t.push(case(
        "einsum ij,jk,kl->il complex",
        |x| Tensor::einsum("ij,jk,kl->il", &[&x[0], &x[1], &x[2]]),
        &[(&[2, 3], Any), (&[3, 2], Any), (&[2, 2], Any)],
    ));

    // ---- data movement ----
    let moves: &[(&str, Op, &[usize])] = &[
        ("reshape", |x| sq(x[0].reshape(&[3, 2])), &[2, 3]),
        ("transpose", |x| sq(x[0].transpose()), &[2, 3]),
        (
            "permute contiguous",
            |x| sq(x[0].permute(&[2, 0, 1])?.contiguous()),
            &[2, 3, 2],
        ),
        ("broadcast_to", |x| sq(x[0].broadcast_to(&[2, 3])), &[3]),
        ("expand squeeze", |x| sq(x[0].expand_dims(1)?.squeeze(&[])), &[2, 3]),
        ("slice", |x| sq(x[0].slice(&[1, 0], &[1, 2])), &[2, 3]),
        ("narrow", |x| sq(x[0].narrow(-1, 1, 2)), &[2, 3]),
        ("pad", |x| sq(x[0].pad(&[(1, 0), (0, 2)])), &[2, 3]),
        ("gather", |x| sq(x[0].gather(&cidx(&[2, 0, 2], &[3]), 1)), &[2, 3]),
        (
            "gather 2d indices",
            |x| sq(x[0].gather(&cidx(&[1, 1, 0, 1], &[2, 2]), 0)),
            &[2, 3],
        ),
        (
            "scatter_add",
            |x| sq(x[0].scatter_add(&cidx(&[0, 2, 0], &[3]), 0, 4)),
            &[3, 2],
        ),
        (
            "where",
            |x| {
                let c = Tensor::from_vec(vec![true, false, false, true, true, false], &[2, 3])?;
                sq(Tensor::where_(&c, &x[0], &x[0].exp()?))
            },
            &[2, 3],
        ),
        ("sum_to_shape", |x| sq(x[0].sum_to_shape(&[1, 3])), &[2, 3]),
    ];
    for &(name, f, s) in moves {
        t.push(case(format!("{name} {s:?}"), f, &[(s, Any)]));
    }
    // ---- Fourier transforms (linear: composed with a square) ----
    let ffts: &[(&str, Op, &[usize], Dom)] = &[
        ("fft [5]", |x| sq(x[0].fft()), &[5], Any),
        ("fft [2,4]", |x| sq(x[0].fft()), &[2, 4], Any),
        ("ifft [2,3]", |x| sq(x[0].ifft()), &[2, 3], Any),
        ("fft2d [3,4]", |x| sq(x[0].fft2d()), &[3, 4], Any),
        ("ifft2d [2,2,3]", |x| sq(x[0].ifft2d()), &[2, 2, 3], Any),
        ("rfft [6]", |x| sq(x[0].rfft(None)), &[6], Real),
        ("rfft [2,5] padded to 7", |x| sq(x[0].rfft(Some(7))), &[2, 5], Real),
        ("rfft cropped to 3", |x| sq(x[0].rfft(Some(3))), &[4], Real),
        ("irfft [4] to 6", |x| sq(x[0].irfft(None)), &[4], Any),
        ("irfft [2,3] to 5", |x| sq(x[0].irfft(Some(5))), &[2, 3], Any),
        ("rfft2d [3,4]", |x| sq(x[0].rfft2d(None)), &[3, 4], Real),
        (
            "irfft2d [3,3] to [3,4]",
            |x| sq(x[0].irfft2d(Some([3, 4]))),
            &[3, 3],
            Any,
        ),
        (
            "irfft2d [4,2] to [4,3]",
            |x| sq(x[0].irfft2d(Some([4, 3]))),
            &[4, 2],
            Any,
        ),
        ("fft3d [2,2,3]", |x| sq(x[0].fft3d()), &[2, 2, 3], Any),
        ("fft3d batch [2,1,3,2]", |x| sq(x[0].fft3d()), &[2, 1, 3, 2], Any),
        ("ifft3d [2,3,2]", |x| sq(x[0].ifft3d()), &[2, 3, 2], Any),
        ("rfft3d [2,3,4]", |x| sq(x[0].rfft3d(None)), &[2, 3, 4], Real),
        (
            "rfft3d [2,2,3] padded and cropped to [3,2,2]",
            |x| sq(x[0].rfft3d(Some([3, 2, 2]))),
            &[2, 2, 3],
            Real,
        ),
        (
            "irfft3d [2,3,3] to [2,3,4]",
            |x| sq(x[0].irfft3d(None)),
            &[2, 3, 3],
            Any,
        ),
        (
            "irfft3d [3,2,2] to [3,2,3]",
            |x| sq(x[0].irfft3d(Some([3, 2, 3]))),
            &[3, 2, 2],
            Any,
        ),
    ];
    for &(name, f, s, d) in ffts {
        t.push(case(name, f, &[(s, d)]));
    }
    // a kink: |z| at 0 gets gradient 0 (first order only; the function is not differentiable there)
    t.push(case("abs plain", |x| x[0].abs(), &[(&[3], NonZero)]));
    t.push(case("angle plain", |x| x[0].angle(), &[(&[3], Right)]).first_order_only());
    t
}

/// Ops that must each have at least one case.
const REQUIRED: &[&str] = &[
    "add",
    "sub",
    "mul",
    "div",
    "complex",
    "neg",
    "exp",
    "log",
    "square",
    "conj",
    "real",
    "imag",
    "abs",
    "angle",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "sin",
    "cos",
    "tan",
    "sinh",
    "cosh",
    "tanh",
    "sigmoid",
    "pow",
    "einsum",
    "mul_scalar",
    "div_scalar",
    "add_scalar",
    "sub_scalar",
    "cast",
    "sum",
    "mean",
    "matmul",
    "reshape",
    "transpose",
    "broadcast_to",
    "slice",
    "pad",
    "gather",
    "scatter_add",
    "where",
    "fft",
    "ifft",
    "fft2d",
    "ifft2d",
    "rfft",
    "irfft",
    "rfft2d",
    "irfft2d",
    "fft3d",
    "ifft3d",
    "rfft3d",
    "irfft3d",
];

#[test]
fn complex_gradients_match_finite_differences() {
    let cases = table();
    for r in REQUIRED {
        assert!(cases.iter().any(|c| c.name.starts_with(r)), "no case for {r}");
    }
    let mut failures = Vec::new();
    let mut compared = 0;
    for c in &cases {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(c)));
        match outcome {
            Err(_) => failures.push(format!("{}: panicked", c.name)),
            Ok(Err(m)) => failures.push(format!("{}: {m}", c.name)),
            Ok(Ok(n)) => {
                let reals: usize = c
                    .inputs
                    .iter()
                    .map(|(s, d)| s.iter().product::<usize>() * if matches!(d, Real) { 1 } else { 2 })
                    .sum();
                let want = if c.second_order { 2 * reals } else { reals };
                if n != want {
                    failures.push(format!("{}: compared {n} entries, expected {want}", c.name));
                }
                compared += n;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    assert!(
        cases.len() >= 150 && compared >= 3500,
        "{} cases, {compared} entries",
        cases.len()
    );
}

/// The checker itself must catch a wrong rule: a deliberately wrong
/// gradient (the unconjugated derivative) fails the comparison.
#[test]
fn the_comparison_rejects_an_unconjugated_gradient() {
    let xs = vec![Tensor::vector(&[C::new(0.5, 1.0), C::new(-0.3, 0.2)])];
    let w = Tensor::vector(&[C::new(2.0, -1.0), C::new(0.5, 0.5)]);
    // L = Σ real(w z): TF gradient conj(w); the plain derivative w is wrong
    let scalar = |x: &[Tensor]| -> Result<f64> { x[0].mul(&w)?.real()?.sum_all()?.to_scalar::<f64>() };
    let tol = Tol {
        eps: 1e-6,
        atol: 1e-6,
        rtol: 1e-5,
    };
    assert!(compare(&scalar, &[w.conj().unwrap()], &xs, &tol).is_ok());
    assert!(compare(&scalar, std::slice::from_ref(&w), &xs, &tol).is_err());
}
