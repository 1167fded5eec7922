//! `Tensor::gru_sequence`, a GRU's recurrence over a whole sequence as one
//! op, against its definition (the loop of Keras's `reset_after=True` GRU
//! step, written here with the public ops, as `GRUCell` computes it):
//! values bit for bit, gradients of every input (the fused backward op
//! sums the kernel's and the bias's gradients over all steps at once: to
//! rounding), a second order through the backward op's hand-written VJP,
//! forward mode against the loop and against finite differences, traced
//! against eager, what a tape keeps, the GRU layer's op in its graph, and
//! bad input. (The gradient checker covers it against finite differences
//! in `gradcheck_nn`; the GRU layer against Keras in `nn/rnn_layers`.)

use gradtape::nn::{Layer, Module, GRU};
use gradtape::{function, DType, Error, ForwardAccumulator, GradientTape, Result, Rng, Tensor};

use super::lstm_sequence::{bits, close, grads_of, second_order_of};

/// The definition: every step's `h`, stacked (`[T, B, u]`).
fn reference(xw: &Tensor, r: &Tensor, b: &Tensor, h0: &Tensor) -> Result<Tensor> {
    let mut h = h0.clone();
    let mut hs = vec![];
    for x in xw.unstack(0)? {
        let mx = x.split(3, -1)?;
        let mh = h.matmul(r)?.bias_add(b)?.split(3, -1)?;
        let z = mx[0].add(&mh[0])?.sigmoid()?;
        let g = mx[1].add(&mh[1])?.sigmoid()?;
        let hh = mx[2].add(&g.mul(&mh[2])?)?.tanh()?;
        h = z.mul(&h)?.add(&z.neg()?.add_scalar(1.0)?.mul(&hh)?)?;
        hs.push(h.clone());
    }
    Tensor::stack(&hs.iter().collect::<Vec<_>>(), 0)
}

type Seq = fn(&Tensor, &Tensor, &Tensor, &Tensor) -> Result<Tensor>;

/// Projections, a recurrent kernel, a recurrent bias and a state (not
/// zero): `t` steps of a batch of `b`, `u` units.
fn inputs(t: usize, b: usize, u: usize, dtype: DType, seed: u64) -> Result<[Tensor; 4]> {
    let mut rng = Rng::new(seed);
    let mut draw = |s: &[usize], sd: f64| -> Result<Tensor> { rng.normal(s, 0.0, sd, DType::F64)?.cast(dtype) };
    Ok([
        draw(&[t, b, 3 * u], 1.5)?,
        draw(&[u, 3 * u], 0.6)?,
        draw(&[3 * u], 0.4)?,
        draw(&[b, u], 0.5)?,
    ])
}

/// A scalar of the outputs, with weights so that every element counts.
fn weigh(hs: &Tensor) -> Result<Tensor> {
    let w: Vec<f64> = (0..hs.numel()).map(|k| 1.0 + (k % 7) as f64 / 7.0).collect();
    hs.mul(&Tensor::from_vec(w, hs.shape())?.cast(hs.dtype())?)?.sum_all()
}

/// `weigh ∘ f` on the four inputs.
fn loss(f: Seq) -> impl Fn(&[Tensor; 4]) -> Result<Tensor> {
    move |x| weigh(&f(&x[0], &x[1], &x[2], &x[3])?)
}

#[test]
fn values_are_the_loops_bit_for_bit() -> Result<()> {
    // one step; several; a batch of one; one unit; rows of more than one
    // run and more than one task (40 x 100 units)
    for (t, b, u) in [(1, 3, 2), (6, 2, 3), (4, 1, 5), (5, 3, 1), (3, 40, 100)] {
        for dtype in [DType::F32, DType::F64] {
            let x = inputs(t, b, u, dtype, (t * 31 + u) as u64)?;
            let hs = Tensor::gru_sequence(&x[0], &x[1], &x[2], &x[3])?;
            assert_eq!(hs.shape(), &[t, b, u]);
            assert_eq!(
                bits(&hs),
                bits(&reference(&x[0], &x[1], &x[2], &x[3])?),
                "{dtype} t {t} b {b} u {u}"
            );
        }
    }
    Ok(())
}

#[test]
fn gradients_are_the_loops() -> Result<()> {
    for (dtype, tol) in [(DType::F64, 1e-13), (DType::F32, 3e-5)] {
        for (t, b, u) in [(1, 2, 3), (5, 3, 4), (3, 1, 1), (4, 33, 70)] {
            let x = inputs(t, b, u, dtype, 11)?;
            let (got, want) = (
                grads_of(loss(Tensor::gru_sequence), &x)?,
                grads_of(loss(reference), &x)?,
            );
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.shape(), x[k].shape());
                close(g, w, tol, &format!("input {k}, {dtype} t {t} b {b} u {u}"));
            }
        }
    }
    // the last output alone (a layer without return_sequences)
    let x = inputs(5, 2, 3, DType::F64, 5)?;
    let last = |f: Seq| move |x: &[Tensor; 4]| f(&x[0], &x[1], &x[2], &x[3])?.narrow(0, 4, 1)?.sum_all();
    let (got, want) = (
        grads_of(last(Tensor::gru_sequence), &x)?,
        grads_of(last(reference), &x)?,
    );
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        close(g, w, 1e-13, &format!("last h, input {k}"));
    }
    Ok(())
}

#[test]
fn second_order_through_the_backward_ops_vjp() -> Result<()> {
    for (t, b, u) in [(1, 2, 2), (4, 3, 3)] {
        let x = inputs(t, b, u, DType::F64, 23)?;
        let (got, want) = (
            second_order_of(loss(Tensor::gru_sequence), &x)?,
            second_order_of(loss(reference), &x)?,
        );
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            close(g, w, 1e-12, &format!("second order, input {k}, t {t} b {b} u {u}"));
        }
    }
    Ok(())
}

#[test]
fn a_third_order_through_the_second_orders_ops() -> Result<()> {
    // d/dW of the second order's sum: the backward op's VJP is made of
    // differentiable ops, so a third tape sees them
    let x = inputs(3, 2, 2, DType::F64, 29)?;
    let third = |f: Seq| -> Result<Tensor> {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&x[1]);
            let s = second_order_of(loss(f), &x)?;
            s[0].sum_all()?.add(&s[3].sum_all()?)
        })?;
        Ok(tape.gradient(&y, &x[1])?.expect("connected"))
    };
    close(
        &third(Tensor::gru_sequence)?,
        &third(reference)?,
        1e-11,
        "third order, d/dR",
    );
    Ok(())
}

#[test]
fn forward_mode_is_the_loops_and_the_finite_differences() -> Result<()> {
    let x = inputs(4, 3, 2, DType::F64, 3)?;
    let mut rng = Rng::new(9);
    let ts: Vec<Tensor> = x
        .iter()
        .map(|a| rng.normal(a.shape(), 0.0, 1.0, DType::F64))
        .collect::<Result<_>>()?;
    let jvp = |f: Seq, skip: Option<usize>| -> Result<f64> {
        let acc = ForwardAccumulator::new();
        let y = acc.record(|| {
            for (k, (a, t)) in x.iter().zip(&ts).enumerate() {
                if Some(k) != skip {
                    acc.watch(a, t)?;
                }
            }
            loss(f)(&x)
        })?;
        Ok(acc.jvp(&y)?.expect("a tangent").to_vec_f64()[0])
    };
    // f(x + εt) − f(x − εt) over 2ε, every input moved along its tangent
    let moved = |s: f64| -> Result<f64> {
        let y: Vec<Tensor> = x
            .iter()
            .zip(&ts)
            .map(|(a, t)| a.add(&t.mul_scalar(s)?))
            .collect::<Result<_>>()?;
        Ok(loss(Tensor::gru_sequence)(&[y[0].clone(), y[1].clone(), y[2].clone(), y[3].clone()])?.to_vec_f64()[0])
    };
    let eps = 1e-5;
    let fd = (moved(eps)? - moved(-eps)?) / (2.0 * eps);
    let all = jvp(Tensor::gru_sequence, None)?;
    assert!(
        (all - fd).abs() <= 1e-7 * (1.0 + fd.abs()),
        "jvp {all} vs differences {fd}"
    );
    for skip in [None, Some(1), Some(2), Some(0)] {
        let (got, want) = (jvp(Tensor::gru_sequence, skip)?, jvp(reference, skip)?);
        assert!(
            (got - want).abs() <= 1e-13 * (1.0 + want.abs()),
            "without tangent {skip:?}: {got} vs {want}"
        );
    }
    Ok(())
}

#[test]
fn traced_equals_eager_with_the_ops_in_the_graph() -> Result<()> {
    for dtype in [DType::F32, DType::F64] {
        let x = inputs(6, 4, 5, dtype, 17)?;
        let step = |x: &[Tensor; 4]| -> Result<Vec<Tensor>> {
            let tape = GradientTape::new();
            let (mut hs, mut y) = (None, None);
            tape.record(|| {
                tape.watch(&x[..]);
                let h = Tensor::gru_sequence(&x[0], &x[1], &x[2], &x[3])?;
                y = Some(weigh(&h)?);
                hs = Some(h);
                Ok(())
            })?;
            let y = y.expect("recorded");
            let mut out = vec![hs.expect("recorded")];
            out.extend(tape.gradient(&y, &[&x[0], &x[1], &x[2], &x[3]])?.into_iter().flatten());
            out.push(y);
            Ok(out)
        };
        let f = function(move |x: &[Tensor; 4]| step(x));
        let (eager, traced) = (step(&x)?, f.call(&x)?);
        assert_eq!(eager.len(), 6);
        // the op's output: the same kernels, the same bits
        assert_eq!(bits(&eager[0]), bits(&traced[0]), "output, {dtype}");
        // the gradients and the loss, whose weighted sums the graph fuses
        let tol = if dtype == DType::F32 { 2e-6 } else { 1e-14 };
        for (k, (e, t)) in eager.iter().zip(&traced).enumerate().skip(1) {
            close(t, e, tol, &format!("output {k}, {dtype}"));
        }
        let g = f.concrete(&x)?.optimized_graph().to_string();
        assert!(g.contains("GruSequence") && g.contains("GruSequenceGrad"), "{g}");
        assert!(!g.contains("Sigmoid"), "the steps stay inside the op: {g}");
        // the gates' part gets no cotangent: the empty marker, no zeros
        // joined to the outputs' cotangent
        assert!(!g.contains("Concat") && !g.contains("Pad"), "{g}");
    }
    Ok(())
}

#[test]
fn the_tape_keeps_the_packed_output_and_the_weights_alone() -> Result<()> {
    // the rule reads the recurrent kernel, h0 and the packed output's
    // parts: neither the projections nor the bias, nor any step's values
    let x = inputs(5, 2, 3, DType::F32, 2)?;
    let before: Vec<usize> = x.iter().map(Tensor::ref_count).collect();
    let tape = GradientTape::persistent();
    let (y, weak_hs) = tape.record(|| {
        tape.watch(&x[..]);
        let hs = Tensor::gru_sequence(&x[0], &x[1], &x[2], &x[3])?;
        let w = hs.downgrade();
        Ok((hs.sum_all()?, w))
    })?;
    let after: Vec<usize> = x.iter().map(Tensor::ref_count).collect();
    assert_eq!(
        (after[0], after[2]),
        (before[0], before[2]),
        "xw and the bias are not kept"
    );
    assert!(
        after[1] > before[1] && after[3] > before[3],
        "the kernel and h0 are kept"
    );
    assert!(
        weak_hs.is_alive(),
        "the outputs are kept (the backward pass reads them)"
    );
    let g = tape.gradient(&y, &[&x[0], &x[1], &x[2], &x[3]])?;
    assert!(g.iter().all(Option::is_some));
    drop(tape);
    assert_eq!(x.iter().map(Tensor::ref_count).collect::<Vec<_>>(), before);
    assert!(!weak_hs.is_alive(), "the tape let the outputs go");
    Ok(())
}

#[test]
fn the_gru_layer_runs_the_op() -> Result<()> {
    // the layer's output and state against its own cell stepped by hand
    // (per-step input products there: to rounding)
    let mut rng = Rng::new(4);
    let gru = GRU::builder(3, 4).return_sequences(true).build(&mut rng)?;
    let x = rng.normal(&[2, 5, 3], 0.0, 1.0, DType::F32)?;
    let (ys, last) = gru.forward_from(&x, None)?;
    let mut h = gru.cell().zero_state(2)?;
    for t in 0..5 {
        h = gru.cell().step(&x.narrow(1, t, 1)?.reshape(&[2, 3])?, &h)?;
        close(&ys.narrow(1, t, 1)?.reshape(&[2, 4])?, &h, 1e-6, &format!("step {t}"));
    }
    close(&last, &h, 1e-6, "last h");
    // and its graph holds the sequence op, not a step per time step
    let vars = gru.trainable_variables();
    let f = function(move |x: &Tensor| {
        let tape = GradientTape::new();
        let y = tape.record(|| gru.forward(x, true)?.square()?.sum_all())?;
        Ok(tape.gradient(&y, &vars)?.into_iter().flatten().collect::<Vec<_>>())
    });
    let g = f.concrete(&x)?.optimized_graph().to_string();
    assert_eq!(g.matches("GruSequenceGrad").count(), 1, "{g}");
    assert_eq!(g.matches("Tanh").count(), 0, "{g}");
    Ok(())
}

#[test]
fn bad_input_is_an_error_naming_the_op() -> Result<()> {
    let [xw, r, b, h0] = inputs(3, 2, 4, DType::F32, 1)?;
    let zeros = |s: &[usize], d| Tensor::zeros(s, d);
    let f32s = DType::F32;
    let cases: Vec<(&str, Result<Tensor>)> = vec![
        (
            "h0 of the wrong width",
            Tensor::gru_sequence(&xw, &r, &b, &zeros(&[2, 5], f32s)),
        ),
        (
            "h0 of another batch",
            Tensor::gru_sequence(&xw, &r, &b, &zeros(&[3, 4], f32s)),
        ),
        (
            "a kernel not [u, 3u]",
            Tensor::gru_sequence(&xw, &zeros(&[4, 11], f32s), &b, &h0),
        ),
        (
            "a bias not [3u]",
            Tensor::gru_sequence(&xw, &r, &zeros(&[2, 12], f32s), &h0),
        ),
        (
            "projections of rank 2",
            Tensor::gru_sequence(&xw.reshape(&[6, 12])?, &r, &b, &h0),
        ),
        ("no steps", Tensor::gru_sequence(&zeros(&[0, 2, 12], f32s), &r, &b, &h0)),
        ("mixed dtypes", Tensor::gru_sequence(&xw, &r, &b.cast(DType::F64)?, &h0)),
        (
            "integers",
            Tensor::gru_sequence(&zeros(&[3, 2, 12], DType::I32), &r, &b, &h0),
        ),
    ];
    for (what, r) in cases {
        match r {
            Err(e @ (Error::InvalidArgument { .. } | Error::DTypeMismatch { .. } | Error::UnsupportedDType { .. })) => {
                assert!(e.to_string().contains("gru_sequence"), "{what}: {e}")
            }
            Err(e) => panic!("{what}: unexpected error {e:?}"),
            Ok(_) => panic!("{what}: accepted"),
        }
    }
    Ok(())
}

#[test]
fn forward_over_reverse_is_the_loops() -> Result<()> {
    // a Hessian-vector product: forward mode over the tape's gradient
    // (the op bound packed, with its JVP; its backward op's tangent
    // through its VJP's VJP)
    let x = inputs(3, 2, 2, DType::F64, 31)?;
    let v = Rng::new(8).normal(x[1].shape(), 0.0, 1.0, DType::F64)?;
    let hvp = |f: Seq| -> Result<Vec<Vec<f64>>> {
        let acc = ForwardAccumulator::new();
        let g = acc.record(|| {
            acc.watch(&x[1], &v)?;
            grads_of(loss(f), &x)
        })?;
        g.iter()
            .map(|g| Ok(acc.jvp(g)?.expect("a tangent").to_vec_f64()))
            .collect()
    };
    let (got, want) = (hvp(Tensor::gru_sequence)?, hvp(reference)?);
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let scale = w.iter().fold(0f64, |m, y| m.max(y.abs()));
        for (a, b) in g.iter().zip(w) {
            assert!((a - b).abs() <= 1e-12 * (1.0 + scale), "input {k}: {a} vs {b}");
        }
    }
    Ok(())
}
