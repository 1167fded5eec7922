//! `Tensor::lstm_cell`, the fused LSTM step, against its definition (the
//! composite of sigmoids, tanh, products and a sum, written here with the
//! public elementwise ops): values bit for bit (the kernels call the same
//! vectorised functions), gradients, forward mode, a second order through
//! the fused backward op's hand-written VJP, forward over reverse, third order, traced against eager with the
//! fused nodes in the graph, and bad input. (The gradient checker covers
//! it against finite differences in `gradcheck_nn`; the LSTM layers
//! against Keras in `nn/rnn_layers`.)

use gradtape::nn::{LSTMCell, Module};
use gradtape::{function, DType, Error, ForwardAccumulator, GradientTape, Result, Rng, Tensor};

/// The definition: `(h, c')` from the gates `z` `[.., 4u]` and `c`.
fn reference(z: &Tensor, c: &Tensor) -> Result<(Tensor, Tensor)> {
    let p = z.split(4, -1)?;
    let (i, f, g, o) = (p[0].sigmoid()?, p[1].sigmoid()?, p[2].tanh()?, p[3].sigmoid()?);
    let c1 = f.mul(c)?.add(&i.mul(&g)?)?;
    Ok((o.mul(&c1.tanh()?)?, c1))
}

/// Gates and a state with large values too (saturated gates), `u` wide
/// over leading dims `lead`.
fn inputs(lead: &[usize], u: usize, dtype: DType, seed: u64) -> Result<(Tensor, Tensor)> {
    let mut rng = Rng::new(seed);
    let mut zs = lead.to_vec();
    zs.push(4 * u);
    let mut cs = lead.to_vec();
    cs.push(u);
    let z = rng.normal(&zs, 0.0, 3.0, DType::F64)?.cast(dtype)?;
    let c = rng.normal(&cs, 0.0, 2.0, DType::F64)?.cast(dtype)?;
    Ok((z, c))
}

/// A scalar of both outputs, with weights so every element counts.
fn weigh(h: &Tensor, c1: &Tensor) -> Result<Tensor> {
    let n = h.numel();
    let w: Vec<f64> = (0..n).map(|k| 1.0 + (k % 7) as f64 / 7.0).collect();
    let w = Tensor::from_vec(w, h.shape())?.cast(h.dtype())?;
    h.mul(&w)?
        .sum_all()?
        .add(&c1.mul(&w.neg()?)?.mul_scalar(0.5)?.sum_all()?)
}

fn bits(t: &Tensor) -> Vec<u64> {
    match t.dtype() {
        DType::F32 => t.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits() as u64).collect(),
        _ => t.to_vec::<f64>().unwrap().iter().map(|v| v.to_bits()).collect(),
    }
}

fn close(a: &Tensor, b: &Tensor, tol: f64) {
    let (a, b) = (a.to_vec_f64(), b.to_vec_f64());
    assert_eq!(a.len(), b.len());
    for (k, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "element {k}: {x} vs {y} (tolerance {tol})"
        );
    }
}

/// `d weigh / d(z, c)` of `f` by one tape.
fn grads(f: fn(&Tensor, &Tensor) -> Result<(Tensor, Tensor)>, z: &Tensor, c: &Tensor) -> Result<(Tensor, Tensor)> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(z);
        tape.watch(c);
        let (h, c1) = f(z, c)?;
        weigh(&h, &c1)
    })?;
    let [gz, gc] = tape.gradient(&y, &[z, c])?;
    Ok((gz.unwrap(), gc.unwrap()))
}

#[test]
fn values_are_the_composites_bit_for_bit() -> Result<()> {
    // rows of 3 (one run), 100 (two runs) and 130 states; one and two
    // leading dims; more rows than one task takes (64 rows of 100)
    for (lead, u) in [(&[5][..], 3), (&[2, 3][..], 100), (&[64][..], 100), (&[7][..], 130)] {
        for dtype in [DType::F32, DType::F64] {
            let (z, c) = inputs(lead, u, dtype, u as u64)?;
            let (h, c1) = Tensor::lstm_cell(&z, &c)?;
            let (rh, rc) = reference(&z, &c)?;
            assert_eq!(h.shape(), rh.shape());
            assert_eq!(bits(&h), bits(&rh), "h, {dtype} {lead:?} u = {u}");
            assert_eq!(bits(&c1), bits(&rc), "c', {dtype} {lead:?} u = {u}");
        }
    }
    Ok(())
}

/// Values (NaN as NaN) and gradients of `f` at gates and states with
/// infinities, NaNs and huge values.
fn at_special_points(f: fn(&Tensor, &Tensor) -> Result<(Tensor, Tensor)>) -> Result<Vec<Vec<f64>>> {
    let sp = [
        0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1e300,
        -1e300,
        2.0,
        -3.0,
        40.0,
    ];
    // every pair (z element, c element) over 9 x 9 rows of u = 1
    let (mut z, mut c) = (vec![], vec![]);
    for (k, &a) in sp.iter().enumerate() {
        for &b in &sp {
            z.extend([a, sp[(k + 2) % 9], -a, sp[(k + 5) % 9] * 0.5]);
            c.push(b);
        }
    }
    let z = Tensor::from_vec(z, &[81, 4])?;
    let c = Tensor::from_vec(c, &[81, 1])?;
    let (gz, gc) = grads(f, &z, &c)?;
    let (h, c1) = f(&z, &c)?;
    Ok([h, c1, gz, gc].iter().map(Tensor::to_vec_f64).collect())
}

#[test]
fn special_values_are_the_composites() -> Result<()> {
    let (got, want) = (at_special_points(Tensor::lstm_cell)?, at_special_points(reference)?);
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            assert!(
                (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-14 * b.abs(),
                "output {k} element {i}: {a} vs {b}"
            );
        }
    }
    Ok(())
}

#[test]
fn gradients_are_the_composites() -> Result<()> {
    for (dtype, tol) in [(DType::F64, 1e-14), (DType::F32, 2e-6)] {
        for (lead, u) in [(&[4][..], 5), (&[3, 2][..], 70)] {
            let (z, c) = inputs(lead, u, dtype, 7)?;
            let (gz, gc) = grads(Tensor::lstm_cell, &z, &c)?;
            let (wz, wc) = grads(reference, &z, &c)?;
            close(&gz, &wz, tol);
            close(&gc, &wc, tol);
        }
    }
    // one output alone: the other half of the cotangent is zeros
    let (z, c) = inputs(&[3], 4, DType::F64, 3)?;
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&z);
        Tensor::lstm_cell(&z, &c)?.1.sum_all()
    })?;
    let g = tape.gradient(&y, &z)?.unwrap();
    let tape2 = GradientTape::new();
    let y2 = tape2.record(|| {
        tape2.watch(&z);
        reference(&z, &c)?.1.sum_all()
    })?;
    close(&g, &tape2.gradient(&y2, &z)?.unwrap(), 1e-14);
    // (the output gate does not reach c': its quarter of dz is zero)
    let gv = g.to_vec::<f64>()?;
    assert!(gv.chunks(16).all(|row| row[12..].iter().all(|&v| v == 0.0)));
    Ok(())
}

#[test]
fn forward_mode_is_the_composites() -> Result<()> {
    let (z, c) = inputs(&[3], 6, DType::F64, 11)?;
    let (vz, vc) = inputs(&[3], 6, DType::F64, 12)?;
    let jvp = |f: fn(&Tensor, &Tensor) -> Result<(Tensor, Tensor)>, tangents: [Option<&Tensor>; 2]| -> Result<Tensor> {
        let acc = ForwardAccumulator::new();
        for (x, v) in [&z, &c].into_iter().zip(tangents) {
            if let Some(v) = v {
                acc.watch(x, v)?;
            }
        }
        let y = acc.record(|| {
            let (h, c1) = f(&z, &c)?;
            weigh(&h, &c1)
        })?;
        Ok(acc.jvp(&y)?.unwrap())
    };
    for tangents in [[Some(&vz), Some(&vc)], [Some(&vz), None], [None, Some(&vc)]] {
        close(&jvp(Tensor::lstm_cell, tangents)?, &jvp(reference, tangents)?, 1e-13);
    }
    Ok(())
}

#[test]
fn second_order_is_the_composites() -> Result<()> {
    // a Hessian-vector product by nested tapes, and forward over reverse
    let (z, c) = inputs(&[2], 3, DType::F64, 5)?;
    let (v, _) = inputs(&[2], 3, DType::F64, 6)?;
    let hvp = |f: fn(&Tensor, &Tensor) -> Result<(Tensor, Tensor)>| -> Result<Tensor> {
        let outer = GradientTape::new();
        let gv = outer.record(|| {
            outer.watch(&z);
            let inner = GradientTape::new();
            let y = inner.record(|| {
                inner.watch(&z);
                let (h, c1) = f(&z, &c)?;
                weigh(&h, &c1)
            })?;
            inner.gradient(&y, &z)?.unwrap().mul(&v)?.sum_all()
        })?;
        Ok(outer.gradient(&gv, &z)?.unwrap())
    };
    let want = hvp(reference)?;
    close(&hvp(Tensor::lstm_cell)?, &want, 1e-12);
    let acc = ForwardAccumulator::new();
    acc.watch(&z, &v)?;
    let g = acc.record(|| {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&z);
            let (h, c1) = Tensor::lstm_cell(&z, &c)?;
            weigh(&h, &c1)
        })?;
        Ok(tape.gradient(&y, &z)?.unwrap())
    })?;
    close(&acc.jvp(&g)?.unwrap(), &want, 1e-12);
    Ok(())
}

#[test]
fn third_order_is_the_composites() -> Result<()> {
    // d/dc of the Hessian-vector product (in z) dotted with v: three
    // nested tapes, through the hand-written VJP's own rules
    let (z, c) = inputs(&[2], 2, DType::F64, 8)?;
    let (v, _) = inputs(&[2], 2, DType::F64, 9)?;
    let third = |f: fn(&Tensor, &Tensor) -> Result<(Tensor, Tensor)>| -> Result<Tensor> {
        let t3 = GradientTape::new();
        let s = t3.record(|| {
            t3.watch(&c);
            let t2 = GradientTape::new();
            let gv = t2.record(|| {
                t2.watch(&z);
                let t1 = GradientTape::new();
                let y = t1.record(|| {
                    t1.watch(&z);
                    let (h, c1) = f(&z, &c)?;
                    weigh(&h, &c1)
                })?;
                t1.gradient(&y, &z)?.unwrap().mul(&v)?.sum_all()
            })?;
            t2.gradient(&gv, &z)?.unwrap().mul(&v)?.sum_all()
        })?;
        Ok(t3.gradient(&s, &c)?.unwrap())
    };
    let want = third(reference)?;
    assert!(want.to_vec_f64().iter().any(|v| v.abs() > 1e-3));
    close(&third(Tensor::lstm_cell)?, &want, 1e-11);
    Ok(())
}

#[test]
fn an_lstm_training_step_traced_equals_eager_with_the_fused_nodes() -> Result<()> {
    // an LSTM cell stepped by hand (the layer runs the steps as one op,
    // `lstm_sequence`: tape/lstm_sequence.rs) of another shape than the
    // bench's or the new users' (batch 5, 9 steps, 6 features, 20 units),
    // its loss and gradients
    let mut rng = Rng::new(3);
    let cell = std::sync::Arc::new(LSTMCell::new(6, 20, &mut rng)?);
    let vars = cell.trainable_variables();
    let x = rng.normal(&[5, 9, 6], 0.0, 1.0, DType::F32)?;
    let step = move |x: &Tensor| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            let mut s = cell.zero_state(5)?;
            let mut hs = vec![];
            for t in 0..9 {
                s = cell.step(&x.narrow(1, t, 1)?.reshape(&[5, 6])?, &s)?;
                hs.push(s.h.clone());
            }
            Tensor::stack(&hs.iter().collect::<Vec<_>>(), 1)?.square()?.mean_all()
        })?;
        let mut out = vec![y.clone()];
        for g in tape.gradient(&y, &vars)? {
            out.push(g.unwrap());
        }
        Ok(out)
    };
    let eager = step(&x)?;
    let f = function(move |x: &Tensor| step(x));
    for _ in 0..2 {
        let traced = f.call(&x)?;
        assert_eq!(traced.len(), eager.len());
        for (t, e) in traced.iter().zip(&eager) {
            close(t, e, 1e-6);
        }
    }
    let graph = f.concrete(&x)?.graph().to_string();
    assert_eq!(graph.matches("LstmCellGrad").count(), 9, "{graph}");
    assert_eq!(graph.matches("= LstmCell(").count(), 9, "{graph}");
    Ok(())
}

#[test]
fn composite_for_other_dtypes_and_errors_name_the_op_and_shapes() -> Result<()> {
    // f16: the composite (no fused kernel), the same values as the
    // definition's
    let (z, c) = inputs(&[2], 3, DType::F16, 1)?;
    let (h, c1) = Tensor::lstm_cell(&z, &c)?;
    let (rh, rc) = reference(&z, &c)?;
    assert_eq!(h.to_vec_f64(), rh.to_vec_f64());
    assert_eq!(c1.to_vec_f64(), rc.to_vec_f64());
    // empty batch
    let (z0, c0) = inputs(&[0], 3, DType::F32, 1)?;
    assert_eq!(Tensor::lstm_cell(&z0, &c0)?.0.shape(), &[0, 3]);
    let z = Tensor::zeros(&[2, 12], DType::F32);
    for (z, c) in [
        (Tensor::zeros(&[2, 10], DType::F32), Tensor::zeros(&[2, 3], DType::F32)),
        (z.clone(), Tensor::zeros(&[3, 3], DType::F32)),
        (z.clone(), Tensor::zeros(&[2, 4], DType::F32)),
        (z.clone(), Tensor::zeros(&[6], DType::F32)),
        (Tensor::zeros(&[], DType::F32), Tensor::zeros(&[], DType::F32)),
    ] {
        let e = Tensor::lstm_cell(&z, &c).unwrap_err().to_string();
        assert!(
            e.contains("lstm_cell") && e.contains(&format!("{:?}", z.shape())),
            "{e}"
        );
    }
    assert!(matches!(
        Tensor::lstm_cell(&z, &Tensor::zeros(&[2, 3], DType::F64)),
        Err(Error::DTypeMismatch { op: "lstm_cell", .. })
    ));
    let zi = Tensor::zeros(&[2, 12], DType::I32);
    assert!(matches!(
        Tensor::lstm_cell(&zi, &Tensor::zeros(&[2, 3], DType::I32)),
        Err(Error::UnsupportedDType { op: "lstm_cell", .. })
    ));
    Ok(())
}
