//! Forward mode: `ForwardAccumulator`, nesting with itself and with tapes,
//! pausing, errors, memory, and the `jvp` / `hvp` / `hessian` helpers.
//!
//! JVPs are checked against two independent references: `J · v` assembled
//! from reverse-mode Jacobian rows (one `gradient` call per output element)
//! and central finite differences along `v`.

use crate::common::*;

use gradtape::{
    hessian, hvp, jvp, jvp_many, DType, Error, ForwardAccumulator, GradientOptions, GradientTape, Result, Tensor,
    Unconnected, Variable,
};

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec_f64()
}

fn close(got: &[f64], want: &[f64], atol: f64, rtol: f64) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g - w).abs() <= atol + rtol * w.abs() && g.is_finite() == w.is_finite())
}

/// Tangents for `xs`: smooth values different from the inputs'.
fn tangents_for(xs: &[Tensor]) -> Vec<Tensor> {
    xs.iter()
        .enumerate()
        .map(|(j, x)| {
            let v: Vec<f64> = (0..x.numel())
                .map(|i| (0.9 * i as f64 + 1.3 * j as f64 + 0.2).cos())
                .collect();
            Tensor::from_vec(v, x.shape()).unwrap()
        })
        .collect()
}

/// `J · v` from reverse mode: one gradient per output element.
fn jv_by_reverse(f: Op, xs: &[Tensor], vs: &[Tensor]) -> Result<Vec<f64>> {
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(xs);
        f(xs)
    })?;
    let mut out = Vec::with_capacity(y.numel());
    for i in 0..y.numel() {
        let mut e = vec![0.0; y.numel()];
        e[i] = 1.0;
        let seed = Tensor::from_vec(e, y.shape())?;
        let opts = GradientOptions::default()
            .output_gradients(vec![seed])
            .unconnected(Unconnected::Zero);
        let grads = tape.gradient_with(&y, xs, opts)?;
        let mut s = 0.0;
        for (g, v) in grads.iter().zip(vs) {
            s += vals(g.as_ref().unwrap())
                .iter()
                .zip(vals(v))
                .map(|(a, b)| a * b)
                .sum::<f64>();
        }
        out.push(s);
    }
    Ok(out)
}

fn shifted(xs: &[Tensor], vs: &[Tensor], h: f64) -> Vec<Tensor> {
    xs.iter()
        .zip(vs)
        .map(|(x, v)| {
            let s: Vec<f64> = vals(x).iter().zip(vals(v)).map(|(a, b)| a + h * b).collect();
            Tensor::from_vec(s, x.shape()).unwrap()
        })
        .collect()
}

/// The forward-mode JVP of `f` at `xs` along `vs` (zeros if unconnected).
fn fwd_jvp(f: Op, xs: &[Tensor], vs: &[Tensor]) -> Result<(Tensor, Tensor)> {
    let acc = ForwardAccumulator::watching(xs, vs)?;
    let y = acc.record(|| f(xs))?;
    let t = acc.jvp_with(&y, Unconnected::Zero)?.unwrap();
    Ok((y, t))
}

/// Second directional derivative `vᵀ f'' v` by two nested accumulators.
fn fwd_fwd(f: Op, xs: &[Tensor], vs: &[Tensor]) -> Result<Tensor> {
    let outer = ForwardAccumulator::watching(xs, vs)?;
    let inner = ForwardAccumulator::watching(xs, vs)?;
    let y = outer.record(|| inner.record(|| f(xs)))?;
    let t = inner.jvp_with(&y, Unconnected::Zero)?.unwrap();
    Ok(outer.jvp_with(&t, Unconnected::Zero)?.unwrap())
}

fn idx(v: &[i64]) -> Tensor {
    Tensor::vector(v)
}

fn table() -> Vec<Case> {
    let m: &[usize] = &[2, 3];
    vec![
        case("neg", |x| x[0].neg(), &[(m, Any)]),
        case("abs", |x| x[0].abs(), &[(m, NonZero)]),
        case("square", |x| x[0].square(), &[(m, Any)]),
        case("sqrt", |x| x[0].sqrt(), &[(m, Pos)]),
        case("exp", |x| x[0].exp(), &[(m, Any)]),
        case("log", |x| x[0].log(), &[(m, Pos)]),
        case("sin", |x| x[0].sin(), &[(m, Any)]),
        case("cos", |x| x[0].cos(), &[(m, Any)]),
        case("tanh", |x| x[0].tanh(), &[(m, Any)]),
        case("sigmoid", |x| x[0].sigmoid(), &[(m, Any)]),
        case("relu", |x| x[0].relu(), &[(m, NonZero)]),
        case("pow_scalar", |x| x[0].pow_scalar(2.5), &[(m, Pos)]),
        case("mul_scalar", |x| x[0].mul_scalar(-1.5), &[(m, Any)]),
        case("div_scalar", |x| x[0].div_scalar(4.0), &[(m, Any)]),
        case("add_scalar", |x| x[0].add_scalar(2.0)?.square(), &[(m, Any)]),
        case("add", |x| x[0].add(&x[1]), &[(&[2, 3], Any), (&[3], Any)]),
        case("sub", |x| x[0].sub(&x[1]), &[(&[2, 1], Any), (&[1, 3], Any)]),
        case("mul", |x| x[0].mul(&x[1]), &[(&[2, 3], Any), (&[2, 1], Any)]),
        case("mul_self", |x| x[0].mul(&x[0]), &[(&[4], Any)]),
        case("div", |x| x[0].div(&x[1]), &[(&[3], Any), (&[2, 3], Pos)]),
        case("pow", |x| x[0].pow(&x[1]), &[(&[2, 3], Pos), (&[3], Any)]),
        case(
            "maximum",
            |x| x[0].maximum(&x[1]),
            &[(&[2, 3], Distinct), (&[3], Distinct)],
        ),
        case(
            "minimum",
            |x| x[0].minimum(&x[1]),
            &[(&[2, 3], Distinct), (&[2, 3], Distinct)],
        ),
        case(
            "where",
            |x| Tensor::where_(&x[0].gt_scalar(0.0)?, &x[0], &x[1].square()?),
            &[(&[2, 3], NonZero), (&[3], Any)],
        ),
        case("sum_axis", |x| x[0].sum(&[0], false), &[(&[2, 3], Any)]),
        case("sum_keep", |x| x[0].sum(&[-1], true), &[(&[2, 3, 2], Any)]),
        case("sum_all", |x| x[0].sum_all(), &[(&[2, 3], Any)]),
        case("mean", |x| x[0].mean(&[1], false), &[(&[2, 3], Any)]),
        // max and min have no JVP rule: their tangents come from the VJP rule
        case("max", |x| x[0].max(&[1], false), &[(&[2, 3], Distinct)]),
        case("min_all", |x| x[0].min_all(), &[(&[2, 3], Distinct)]),
        case("matmul", |x| x[0].matmul(&x[1]), &[(&[2, 3], Any), (&[3, 4], Any)]),
        case(
            "matmul_tt",
            |x| x[0].matmul_with(&x[1], true, true),
            &[(&[3, 2], Any), (&[4, 3], Any)],
        ),
        case(
            "matmul_tb",
            |x| x[0].matmul_with(&x[1], false, true),
            &[(&[2, 3], Any), (&[4, 3], Any)],
        ),
        case(
            "matmul_batch",
            |x| x[0].matmul(&x[1]),
            &[(&[2, 2, 3], Any), (&[3, 2], Any)],
        ),
        case("matmul_self", |x| x[0].matmul(&x[0]), &[(&[3, 3], Any)]),
        case("reshape", |x| x[0].reshape(&[3, 2])?.square(), &[(m, Any)]),
        case("permute", |x| x[0].permute(&[2, 0, 1])?.exp(), &[(&[2, 3, 2], Any)]),
        case("transpose", |x| x[0].transpose()?.contiguous()?.sin(), &[(m, Any)]),
        case("broadcast_to", |x| x[0].broadcast_to(&[2, 3])?.exp(), &[(&[3], Any)]),
        case(
            "expand_squeeze",
            |x| x[0].expand_dims(1)?.tanh()?.squeeze(&[]),
            &[(m, Any)],
        ),
        case("slice", |x| x[0].slice(&[0, 1], &[2, 2])?.square(), &[(m, Any)]),
        case("pad", |x| x[0].pad(&[(1, 0), (0, 2)])?.exp(), &[(m, Any)]),
        case("gather", |x| x[0].gather(&idx(&[2, 0, 2]), 1)?.sin(), &[(m, Any)]),
        case(
            "gather scalar index, last axis",
            |x| x[0].gather(&Tensor::scalar(2i64), -1)?.sin(),
            &[(&[3, 4], Any)],
        ),
        case(
            "gather scalar index, axis 1 of 3",
            |x| x[0].gather(&Tensor::scalar(0i32), 1)?.sin(),
            &[(&[2, 3, 2], Any)],
        ),
        case(
            "scatter_add",
            |x| x[0].scatter_add(&idx(&[1, 1, 0]), 1, 4)?.exp(),
            &[(m, Any)],
        ),
        // f32 inside: compared loosely, with a larger step
        case(
            "cast",
            |x| x[0].cast(DType::F32)?.cast(DType::F64)?.mul(&x[0]),
            &[(m, Any)],
        )
        .loose(),
        case("identity", |x| x[0].identity().mul(&x[0]), &[(m, Any)]),
        case(
            "tanh_layer",
            |x| x[0].matmul(&x[1])?.tanh()?.square()?.sum_all(),
            &[(&[3, 2], Any), (&[2, 1], Any)],
        ),
    ]
}

#[test]
fn jvps_match_reverse_mode_jacobians_and_finite_differences() -> Result<()> {
    let mut failures = Vec::new();
    for c in table() {
        let xs = c.make_inputs();
        let vs = tangents_for(&xs);
        let (y, t) = fwd_jvp(c.f, &xs, &vs)?;
        assert_eq!(t.shape(), y.shape(), "{}", c.name);
        let jv = jv_by_reverse(c.f, &xs, &vs)?;
        let (h, tol) = if c.loose { (1e-2, 1e-4) } else { (1e-6, 1e-6) };
        let (yp, ym) = ((c.f)(&shifted(&xs, &vs, h))?, (c.f)(&shifted(&xs, &vs, -h))?);
        let fd: Vec<f64> = vals(&yp)
            .iter()
            .zip(vals(&ym))
            .map(|(p, m)| (p - m) / (2.0 * h))
            .collect();
        let sym = if c.loose { 1e-6 } else { 1e-10 };
        if !close(&vals(&t), &jv, sym, sym) {
            failures.push(format!("{}: jvp {:?} vs reverse {:?}", c.name, vals(&t), jv));
        }
        if !close(&vals(&t), &fd, tol, tol) {
            failures.push(format!("{}: jvp {:?} vs finite differences {:?}", c.name, vals(&t), fd));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

#[test]
fn nested_accumulators_match_finite_differences_of_the_jvp() -> Result<()> {
    let mut failures = Vec::new();
    for c in table() {
        let xs = c.make_inputs();
        let vs = tangents_for(&xs);
        let second = fwd_fwd(c.f, &xs, &vs)?;
        let (h, tol) = if c.loose { (1e-2, 1e-3) } else { (1e-5, 1e-5) };
        let tp = fwd_jvp(c.f, &shifted(&xs, &vs, h), &vs)?.1;
        let tm = fwd_jvp(c.f, &shifted(&xs, &vs, -h), &vs)?.1;
        let fd: Vec<f64> = vals(&tp)
            .iter()
            .zip(vals(&tm))
            .map(|(p, m)| (p - m) / (2.0 * h))
            .collect();
        if !close(&vals(&second), &fd, tol, tol) {
            failures.push(format!("{}: {:?} vs {:?}", c.name, vals(&second), fd));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

/// f(x) = x^3.5 and its derivatives at 1.1, by hand.
fn x35(order: usize) -> f64 {
    let coef = [1.0, 3.5, 3.5 * 2.5, 3.5 * 2.5 * 1.5][order];
    coef * 1.1f64.powf(3.5 - order as f64)
}

/// Derivatives 0..=3 of x^3.5 at 1.1 by three nested accumulators.
fn x35_nested(dtype: DType) -> Result<Vec<Tensor>> {
    let x = Tensor::scalar(1.1f64).cast(dtype)?;
    let one = Tensor::scalar(1.0f64).cast(dtype)?;
    let accs = [
        ForwardAccumulator::new(),
        ForwardAccumulator::new(),
        ForwardAccumulator::new(),
    ];
    for a in &accs {
        a.watch(&x, &one)?;
    }
    let y = accs[0].record(|| accs[1].record(|| accs[2].record(|| x.pow_scalar(3.5))))?;
    let d1 = accs[2].jvp(&y)?.unwrap();
    let d2 = accs[1].jvp(&d1)?.unwrap();
    let d3 = accs[0].jvp(&d2)?.unwrap();
    Ok(vec![y, d1, d2, d3])
}

#[test]
fn x_to_the_3_5_by_nested_accumulators() -> Result<()> {
    // the numbers of TensorFlow's documentation, in f32
    let d = x35_nested(DType::F32)?;
    let want32 = [1.3959647f32, 4.4417057, 10.094786];
    for (k, w) in want32.iter().enumerate() {
        let got = d[k].to_scalar::<f32>()?;
        assert!(
            (got - w).abs() <= 2.0 * f32::EPSILON * w.abs(),
            "order {k}: {got} vs {w}"
        );
    }
    let got3 = d[3].to_scalar::<f32>()? as f64;
    assert!((got3 - x35(3)).abs() < 1e-5 * x35(3), "order 3: {got3}");
    let d = x35_nested(DType::F64)?;
    for (k, t) in d.iter().enumerate() {
        let got = t.to_scalar::<f64>()?;
        assert!((got - x35(k)).abs() < 1e-13 * x35(k), "order {k}: {got} vs {}", x35(k));
    }
    Ok(())
}

#[test]
fn inner_accumulators_do_not_see_outer_tangent_computations() -> Result<()> {
    let x = Tensor::scalar(1.1f32);
    let outer = ForwardAccumulator::watching(&x, &[Tensor::scalar(1.0f32)])?;
    let inner = ForwardAccumulator::watching(&x, &[Tensor::scalar(1.0f32)])?;
    let y = outer.record(|| inner.record(|| x.pow_scalar(3.5)))?;
    // the outer tangent was computed with the inner accumulator hidden
    assert!(inner.jvp(&outer.jvp(&y)?.unwrap())?.is_none());
    // and an accumulator never sees its own tangent computations
    let d1 = inner.jvp(&y)?.unwrap();
    assert!(inner.jvp(&d1)?.is_none());
    assert!((outer.jvp(&d1)?.unwrap().to_scalar::<f32>()? - 10.094786).abs() < 1e-5);
    Ok(())
}

#[test]
fn higher_order_by_nested_jvp_helpers() -> Result<()> {
    let x = Tensor::scalar(1.1f64);
    let one = Tensor::scalar(1.0f64);
    let d2 = jvp(
        |p| Ok(jvp(|q| q[0].pow_scalar(3.5), p, std::slice::from_ref(&one))?.1),
        &[x],
        std::slice::from_ref(&one),
    )?
    .1;
    assert!((d2.to_scalar::<f64>()? - x35(2)).abs() < 1e-12);
    Ok(())
}

#[test]
fn jvp_helpers() -> Result<()> {
    let x = Tensor::scalar(0.1f64);
    let (y, t) = jvp(|p| p[0].sin(), std::slice::from_ref(&x), &[Tensor::scalar(0.2f64)])?;
    assert_eq!(y.to_scalar::<f64>()?, 0.1f64.sin());
    assert!((t.to_scalar::<f64>()? - 0.2 * 0.1f64.cos()).abs() < 1e-15);
    // the same tensor passed twice is two independent primals: d(a·b) along (1, 0) at (x, x) is x
    let (_, t) = jvp(
        |p| p[0].mul(&p[1]),
        &[x.clone(), x.clone()],
        &[Tensor::scalar(1.0f64), Tensor::scalar(0.0f64)],
    )?;
    assert_eq!(t.to_scalar::<f64>()?, 0.1);
    // unconnected outputs get zeros; several outputs
    let (ys, ts) = jvp_many(
        |p| Ok(vec![p[0].exp()?, Tensor::vector(&[1.0f64, 2.0])]),
        std::slice::from_ref(&x),
        &[Tensor::scalar(3.0f64)],
    )?;
    assert_eq!(ys.len(), 2);
    assert!((ts[0].to_scalar::<f64>()? - 3.0 * 0.1f64.exp()).abs() < 1e-15);
    assert_eq!(vals(&ts[1]), vec![0.0, 0.0]);
    assert!(jvp(|p| p[0].sin(), std::slice::from_ref(&x), &[]).is_err());
    assert!(matches!(
        jvp(|p| p[0].sin(), &[x], &[Tensor::vector(&[1.0f64])]),
        Err(Error::ShapeMismatch { .. })
    ));
    Ok(())
}

/// `f = Σ tanh(W x)²` and its Hessian `Wᵀ diag((2 - 6a²)(1 - a²)) W`, `a = tanh(W x)`.
fn tanh_model() -> (Tensor, Vec<f64>, Vec<f64>, [usize; 2]) {
    let (m, n) = (3, 2);
    let w: Vec<f64> = vec![0.3, -0.5, 0.8, 0.1, -0.4, 0.7];
    let x = vec![0.6, -0.9];
    (Tensor::from_vec(w.clone(), &[m, n]).unwrap(), w, x, [m, n])
}

fn tanh_hessian(w: &[f64], x: &[f64], m: usize, n: usize) -> Vec<f64> {
    let mut h = vec![0.0; n * n];
    for i in 0..m {
        let z: f64 = (0..n).map(|j| w[i * n + j] * x[j]).sum();
        let a = z.tanh();
        let d = (2.0 - 6.0 * a * a) * (1.0 - a * a);
        for j in 0..n {
            for k in 0..n {
                h[j * n + k] += w[i * n + j] * d * w[i * n + k];
            }
        }
    }
    h
}

#[test]
fn hvp_and_hessian_match_hand_derived_hessians() -> Result<()> {
    let (wt, w, xv, [m, n]) = tanh_model();
    let f = |x: &Tensor| {
        x.reshape(&[2, 1])?
            .matmul_with(&wt, true, true)?
            .tanh()?
            .square()?
            .sum_all()
    };
    let h = tanh_hessian(&w, &xv, m, n);
    let x = Tensor::vector(&xv);
    let v = [1.5, -0.5];
    let hv = hvp(f, &x, &Tensor::vector(&v))?;
    let want: Vec<f64> = (0..n).map(|j| (0..n).map(|k| h[j * n + k] * v[k]).sum()).collect();
    assert!(close(&vals(&hv), &want, 1e-12, 1e-12), "{:?} vs {want:?}", vals(&hv));
    let full = hessian(f, &x)?;
    assert_eq!(full.shape(), &[2, 2]);
    assert!(close(&vals(&full), &h, 1e-12, 1e-12), "{:?} vs {h:?}", vals(&full));

    // quadratic form xᵀ A x on a [2, 2] input: H = A + Aᵀ on the flattened x
    let a: Vec<f64> = (0..16).map(|i| ((i * 7 % 11) as f64 - 5.0) / 3.0).collect();
    let at = Tensor::from_vec(a.clone(), &[4, 4])?;
    let q = |x: &Tensor| {
        let c = x.reshape(&[4, 1])?;
        c.matmul_with(&at.matmul(&c)?, true, false)?.sum_all()
    };
    let x = Tensor::from_vec(vec![0.5, -1.0, 2.0, 0.25], &[2, 2])?;
    let hq = hessian(q, &x)?;
    assert_eq!(hq.shape(), &[2, 2, 2, 2]);
    let want: Vec<f64> = (0..16).map(|i| a[i] + a[(i % 4) * 4 + i / 4]).collect();
    assert_eq!(vals(&hq), want);
    // unconnected: zeros; non-scalar: an error
    assert_eq!(vals(&hvp(|_| Ok(Tensor::scalar(1.0f64)), &x, &x)?), vec![0.0; 4]);
    assert!(hvp(|x| x.exp(), &x, &x).is_err());
    assert!(hessian(|x| x.sum_all(), &Tensor::vector(&[1i32])).is_err());
    Ok(())
}

#[test]
fn forward_over_reverse_with_a_variable() -> Result<()> {
    // TensorFlow's documented example: H·[1, 0] of Σ v³ at [1, 2]
    let v = Variable::new(Tensor::vector(&[1.0f32, 2.0]));
    let acc = ForwardAccumulator::new();
    acc.watch(&v, &Tensor::vector(&[1.0f32, 0.0]))?;
    let backward = acc.record(|| {
        let tape = GradientTape::new();
        let y = tape.record(|| v.read().pow_scalar(3.0)?.sum_all())?;
        Ok(tape.gradient(&y, &v)?.unwrap())
    })?;
    assert_eq!(backward.to_vec::<f32>()?, vec![3.0, 12.0]);
    assert_eq!(acc.jvp(&backward)?.unwrap().to_vec::<f32>()?, vec![6.0, 0.0]);
    // reads of a watched variable carry its tangent
    let v = Variable::new(Tensor::vector(&[1.0f64, 2.0, 3.0]));
    let acc = ForwardAccumulator::watching(&v, &[Tensor::vector(&[0.1f64, -0.2, 0.3])])?;
    let (x, x2) = acc.record(|| Ok((v.read().mul_scalar(2.0)?, v.read().add_scalar(0.1)?)))?;
    assert_eq!(vals(&acc.jvp(&v)?.unwrap()), vec![0.1, -0.2, 0.3]);
    assert_eq!(vals(&acc.jvp(&x)?.unwrap()), vec![0.2, -0.4, 0.6]);
    assert_eq!(vals(&acc.jvp(&x2)?.unwrap()), vec![0.1, -0.2, 0.3]);
    // updating a variable under an accumulator computes no tangent
    acc.record(|| v.assign_sub(&Tensor::vector(&[0.5f64, 0.5, 0.5])))?;
    assert_eq!(vals(&v.read()), vec![0.5, 1.5, 2.5]);
    Ok(())
}

#[test]
fn tapes_inside_an_accumulator_keep_none_of_its_tangents() -> Result<()> {
    for acc_first in [true, false] {
        // nesting follows entry order, not creation order
        let c = Tensor::scalar(1.0f64);
        let (acc, tape) = if acc_first {
            let a = ForwardAccumulator::watching(&c, &[Tensor::scalar(0.1f64)])?;
            (a, GradientTape::persistent())
        } else {
            let t = GradientTape::persistent();
            (ForwardAccumulator::watching(&c, &[Tensor::scalar(0.1f64)])?, t)
        };
        tape.record(|| Ok(()))?;
        let (d, weak_e) = acc.record(|| {
            tape.record(|| {
                tape.watch(&c);
                let d = c.cos()?;
                let e = acc.jvp(&d)?.unwrap().cos()?;
                // were e's producer recorded, the rule of this op would keep e alive
                drop(e.cos()?);
                Ok((d, e.downgrade()))
            })
        })?;
        assert!(!weak_e.is_alive(), "the inner tape recorded a tangent computation");
        assert!(tape.gradient(acc.jvp(&d)?.unwrap(), &c)?.is_none());
        assert!((vals(&tape.gradient(&d, &c)?.unwrap())[0] + 1f64.sin()).abs() < 1e-15);
    }
    Ok(())
}

#[test]
fn reverse_over_forward_differentiates_a_jvp() -> Result<()> {
    for acc_first in [true, false] {
        let c = Tensor::scalar(1.0f64);
        let (acc, tape) = if acc_first {
            let a = ForwardAccumulator::watching(&c, &[Tensor::scalar(0.1f64)])?;
            (a, GradientTape::new())
        } else {
            let t = GradientTape::new();
            (ForwardAccumulator::watching(&c, &[Tensor::scalar(0.1f64)])?, t)
        };
        let t = tape.record(|| {
            tape.watch(&c);
            let d = acc.record(|| c.cos())?;
            Ok(acc.jvp(&d)?.unwrap())
        })?;
        let g = tape.gradient(&t, &c)?.unwrap();
        assert!((g.to_scalar::<f64>()? + 0.1 * 1f64.cos()).abs() < 1e-15);
    }
    // through pow's JVP rule, whose derivative in x is not constant
    let x = Tensor::vector(&[1.5f64, 0.5]);
    let p = Tensor::vector(&[3.0f64, 2.0]);
    let tape = GradientTape::new();
    let acc = ForwardAccumulator::watching(&x, &[Tensor::vector(&[1.0f64, 1.0])])?;
    let t = tape.record(|| {
        tape.watch(&x);
        let y = acc.record(|| x.pow(&p))?;
        Ok(acc.jvp(&y)?.unwrap())
    })?;
    // t = p x^(p-1); dt/dx = p (p-1) x^(p-2)
    assert!(close(&vals(&t), &[3.0 * 2.25, 2.0 * 0.5], 1e-12, 1e-12));
    let g = tape.gradient(&t, &x)?.unwrap();
    assert!(close(&vals(&g), &[6.0 * 1.5, 2.0], 1e-12, 1e-12), "{:?}", vals(&g));
    Ok(())
}

#[test]
fn stop_recording_pauses_forward_mode() -> Result<()> {
    let c = Tensor::scalar(1.0f32);
    let acc = ForwardAccumulator::watching(&c, &[Tensor::scalar(2.0f32)])?;
    let tape = GradientTape::persistent();
    let (d, e) = acc.record(|| {
        tape.record(|| {
            tape.watch(&c);
            let d = tape.stop_recording(|| c.mul_scalar(2.0))?;
            let e = acc.stop_recording(|| c.mul_scalar(3.0))?;
            Ok((d, e))
        })
    })?;
    // the tape's stop_recording pauses the tape and forward mode
    assert!(acc.jvp(&d)?.is_none());
    assert!(tape.gradient(&d, &c)?.is_none());
    // the accumulator's pauses only itself
    assert!(acc.jvp(&e)?.is_none());
    assert_eq!(tape.gradient(&e, &c)?.unwrap().to_scalar::<f32>()?, 3.0);
    assert!(acc.stop_recording(|| Ok(())).is_err());
    // both resume; a tape resumed inside an accumulator keeps its place
    // outside it (it still records the tangent computations)
    let tape = GradientTape::new();
    let t = tape.record(|| {
        tape.watch(&c);
        acc.record(|| {
            tape.stop_recording(|| Ok(()))?;
            acc.stop_recording(|| Ok(()))?;
            let y = c.square()?;
            Ok(acc.jvp(&y)?.unwrap())
        })
    })?;
    assert_eq!(t.to_scalar::<f32>()?, 4.0);
    assert_eq!(tape.gradient(&t, &c)?.unwrap().to_scalar::<f32>()?, 4.0);
    Ok(())
}

#[test]
fn reentry_watches_and_unconnected_tensors() -> Result<()> {
    let x = Tensor::scalar(-2.0f32);
    let acc = ForwardAccumulator::new();
    acc.watch(&x, &Tensor::scalar(1.5f32))?;
    let y = acc.record(|| {
        assert_eq!(acc.jvp(&x)?.unwrap().to_scalar::<f32>()?, 1.5);
        assert!(acc.enter().is_err());
        x.mul_scalar(4.0)
    })?;
    assert_eq!(acc.jvp(&y)?.unwrap().to_scalar::<f32>()?, 6.0);
    // not active: nothing is computed
    let z = x.mul_scalar(4.0)?;
    assert!(acc.jvp(&z)?.is_none());
    // entered again: continues with the same tangents
    let yy = {
        let _guard = acc.enter()?;
        assert!(acc.is_recording());
        y.mul(&y)?
    };
    assert!(!acc.is_recording());
    assert_eq!(acc.jvp(&yy)?.unwrap().to_scalar::<f32>()?, 6.0 * -8.0 * 2.0);
    // watching again adds the tangents
    let w = Tensor::scalar(-2.0f32);
    let acc = ForwardAccumulator::watching(&[&w], &[Tensor::scalar(3.0f32)])?;
    acc.watch(&w, &Tensor::scalar(10.0f32))?;
    acc.watch(&w, &Tensor::scalar(11.0f32))?;
    let y = acc.record(|| Tensor::scalar(3.0f32).mul(&w))?;
    assert_eq!(acc.jvp(&w)?.unwrap().to_scalar::<f32>()?, 24.0);
    assert_eq!(acc.jvp(&y)?.unwrap().to_scalar::<f32>()?, 72.0);
    // unconnected: None, or zeros of the primal's shape
    let u = Tensor::vector(&[1.0f32, 2.0]);
    assert!(acc.jvp(&u)?.is_none());
    assert_eq!(
        acc.jvp_with(&u, Unconnected::Zero)?.unwrap().to_vec::<f32>()?,
        vec![0.0, 0.0]
    );
    assert_eq!(acc.jvp_with(&w, Unconnected::Zero)?.unwrap().to_scalar::<f32>()?, 24.0);
    // several primals at once, shaped like the request
    let (a, b) = acc.jvp(&(&w, &u))?;
    assert!(a.is_some() && b.is_none());
    // integer and bool results get no tangent
    let (i, m) = acc.record(|| Ok((w.cast(DType::I32)?, w.gt_scalar(0.0)?)))?;
    assert!(acc.jvp(&[&i, &m])?.iter().all(Option::is_none));
    Ok(())
}

#[test]
fn watch_checks_shape_dtype_and_count() {
    let x = Tensor::vector(&[1.0f32, 2.0]);
    let acc = ForwardAccumulator::new();
    let e = acc.watch(&x, &Tensor::vector(&[1.0f32])).unwrap_err();
    assert!(matches!(&e, Error::ShapeMismatch { lhs, rhs, .. } if lhs == &[2] && rhs == &[1]));
    assert!(e.to_string().contains("ForwardAccumulator::watch"), "{e}");
    let e = acc.watch(&x, &Tensor::vector(&[1.0f64, 2.0])).unwrap_err();
    assert!(matches!(
        e,
        Error::DTypeMismatch {
            lhs: DType::F32,
            rhs: DType::F64,
            ..
        }
    ));
    let i = Tensor::vector(&[1i64, 2]);
    let e = acc.watch(&i, &i).unwrap_err();
    assert!(matches!(e, Error::UnsupportedDType { dtype: DType::I64, .. }), "{e}");
    let e = ForwardAccumulator::watching(&[&x, &x], &[x.clone(), x.clone()]).unwrap_err();
    assert!(e.to_string().contains("already listed"), "{e}");
    let e = ForwardAccumulator::watching(&[&x], &[]).unwrap_err();
    assert!(e.to_string().contains("1 primals given with 0 tangents"), "{e}");
    assert!(acc.is_empty());
}

#[test]
fn no_forward_work_without_watched_inputs() -> Result<()> {
    let x = Tensor::vector(&[1.0f64, 2.0]);
    let c = Tensor::vector(&[0.5f64, 1.5]);
    let acc = ForwardAccumulator::watching(&x, &[Tensor::vector(&[1.0f64, 0.0])])?;
    let tape = GradientTape::persistent();
    let (y, weak) = acc.record(|| {
        tape.record(|| {
            let e = c.exp()?;
            let w = e.downgrade();
            let y = e.sin()?.reshape(&[1, 2])?.matmul(&c.reshape(&[2, 1])?)?;
            Ok((y, w))
        })
    })?;
    // nothing was computed or kept for ops on unwatched inputs
    assert_eq!(acc.len(), 1);
    assert!(acc.jvp(&y)?.is_none());
    assert!(!weak.is_alive());
    // one op on a watched input adds exactly one tangent
    let z = acc.record(|| x.add(&c))?;
    assert_eq!(acc.len(), 2);
    assert_eq!(vals(&acc.jvp(&z)?.unwrap()), vec![1.0, 0.0]);
    Ok(())
}

#[test]
fn dropping_an_accumulator_frees_its_tangents() -> Result<()> {
    let x = Tensor::vector(&[0.5f32, 1.5]);
    let v = Tensor::vector(&[1.0f32, 1.0]);
    let acc = ForwardAccumulator::watching(&x, std::slice::from_ref(&v))?;
    let y = acc.record(|| x.exp()?.sin())?;
    let t = acc.jvp(&y)?.unwrap();
    let weak = t.downgrade();
    drop(t);
    assert!(weak.is_alive(), "the accumulator holds the tangent");
    assert_eq!(v.ref_count(), 2, "and the watched tangent");
    drop(acc);
    assert!(!weak.is_alive());
    assert_eq!(v.ref_count(), 1);
    Ok(())
}

#[test]
fn tangents_of_dead_primals_are_swept() -> Result<()> {
    let x = Tensor::vector(&[0.5f64, 1.5]);
    let acc = ForwardAccumulator::watching(&x, &[Tensor::vector(&[1.0f64, 1.0])])?;
    let (first, y) = acc.record(|| {
        let first = acc_tangent_weak(&acc, &x.exp()?)?;
        let mut y = x.clone();
        for _ in 0..5000 {
            y = y.mul_scalar(0.999)?;
        }
        Ok((first, y))
    })?;
    assert!(!first.is_alive(), "the tangent of a dropped intermediate was freed");
    assert!(acc.len() < 200, "{} tangents held", acc.len());
    assert!(close(
        &vals(&acc.jvp(&y)?.unwrap()),
        &[0.999f64.powi(5000); 2],
        1e-12,
        1e-9
    ));
    Ok(())
}

fn acc_tangent_weak(acc: &ForwardAccumulator, t: &Tensor) -> Result<gradtape::WeakTensor> {
    Ok(acc.jvp(t)?.unwrap().downgrade())
}

#[test]
fn accumulators_are_per_thread() -> Result<()> {
    let x = Tensor::scalar(2.0f64);
    let acc = ForwardAccumulator::watching(&x, &[Tensor::scalar(1.0f64)])?;
    let y = acc.record(|| {
        let x2 = x.clone();
        std::thread::spawn(move || x2.square()).join().unwrap()
    })?;
    assert!(acc.jvp(&y)?.is_none());
    Ok(())
}
