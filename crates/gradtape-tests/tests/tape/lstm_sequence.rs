//! `Tensor::lstm_sequence`, an LSTM's recurrence over a whole sequence as
//! one op, against its definition (the loop of products, additions and
//! `lstm_cell` steps, written here with the public ops): values bit for
//! bit, gradients of every input (the fused backward op's one product for
//! the recurrent kernel's gradient sums in another order: to rounding),
//! a second order through the backward op's hand-written VJP, forward
//! mode, traced against eager, the LSTM layer's op in its graph, and bad
//! input. (The gradient checker covers it against finite differences in
//! `gradcheck_nn`; the LSTM layer against Keras in `nn/rnn_layers`.)

use gradtape::nn::{Layer, Module, LSTM};
use gradtape::{function, DType, Error, ForwardAccumulator, GradientTape, Result, Rng, Tensor};

/// The definition: every step's `h` and `c`, stacked (`[T, B, u]`).
fn reference(xw: &Tensor, w: &Tensor, h0: &Tensor, c0: &Tensor) -> Result<(Tensor, Tensor)> {
    let (mut h, mut c) = (h0.clone(), c0.clone());
    let (mut hs, mut cs) = (vec![], vec![]);
    for x in xw.unstack(0)? {
        (h, c) = Tensor::lstm_cell(&x.add(&h.matmul(w)?)?, &c)?;
        hs.push(h.clone());
        cs.push(c.clone());
    }
    let stack = |v: &[Tensor]| Tensor::stack(&v.iter().collect::<Vec<_>>(), 0);
    Ok((stack(&hs)?, stack(&cs)?))
}

type Seq = fn(&Tensor, &Tensor, &Tensor, &Tensor) -> Result<(Tensor, Tensor)>;

/// Projections, a recurrent kernel and a state (not zero), `t` steps of
/// a batch of `b`, `u` units.
fn inputs(t: usize, b: usize, u: usize, dtype: DType, seed: u64) -> Result<[Tensor; 4]> {
    let mut rng = Rng::new(seed);
    let mut draw = |s: &[usize], sd: f64| -> Result<Tensor> { rng.normal(s, 0.0, sd, DType::F64)?.cast(dtype) };
    Ok([
        draw(&[t, b, 4 * u], 1.5)?,
        draw(&[u, 4 * u], 0.6)?,
        draw(&[b, u], 0.5)?,
        draw(&[b, u], 1.0)?,
    ])
}

/// A scalar of both outputs, with weights so that every element counts.
pub(super) fn weigh(hs: &Tensor, cs: &Tensor) -> Result<Tensor> {
    let w: Vec<f64> = (0..hs.numel()).map(|k| 1.0 + (k % 7) as f64 / 7.0).collect();
    let w = Tensor::from_vec(w, hs.shape())?.cast(hs.dtype())?;
    hs.mul(&w)?
        .sum_all()?
        .add(&cs.mul(&w.neg()?)?.mul_scalar(0.5)?.sum_all()?)
}

pub(super) fn bits(t: &Tensor) -> Vec<u64> {
    match t.dtype() {
        DType::F32 => t.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits() as u64).collect(),
        _ => t.to_vec::<f64>().unwrap().iter().map(|v| v.to_bits()).collect(),
    }
}

pub(super) fn close(a: &Tensor, b: &Tensor, tol: f64, what: &str) {
    let (a, b) = (a.to_vec_f64(), b.to_vec_f64());
    assert_eq!(a.len(), b.len(), "{what}");
    let scale = b.iter().fold(0f64, |m, y| m.max(y.abs()));
    for (k, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + scale),
            "{what} element {k}: {x} vs {y} (tolerance {tol})"
        );
    }
}

/// The gradients of the scalar `f(x)` with respect to the four inputs,
/// by one tape.
pub(super) fn grads_of(f: impl Fn(&[Tensor; 4]) -> Result<Tensor>, x: &[Tensor; 4]) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x[..]);
        f(x)
    })?;
    Ok(tape
        .gradient(&y, &[&x[0], &x[1], &x[2], &x[3]])?
        .into_iter()
        .map(|g| g.expect("a gradient"))
        .collect())
}

/// `d weigh / d(xw, w, h0, c0)` of `f` by one tape.
fn grads(f: Seq, x: &[Tensor; 4]) -> Result<Vec<Tensor>> {
    grads_of(
        |x| {
            let (hs, cs) = f(&x[0], &x[1], &x[2], &x[3])?;
            weigh(&hs, &cs)
        },
        x,
    )
}

#[test]
fn values_are_the_loops_bit_for_bit() -> Result<()> {
    // one step; several; a batch of one; rows of more than one run and
    // more than one task (40 x 100 units)
    for (t, b, u) in [(1, 3, 2), (6, 2, 3), (4, 1, 5), (3, 40, 100)] {
        for dtype in [DType::F32, DType::F64] {
            let x = inputs(t, b, u, dtype, (t * 31 + u) as u64)?;
            let (hs, cs) = Tensor::lstm_sequence(&x[0], &x[1], &x[2], &x[3])?;
            let (rh, rc) = reference(&x[0], &x[1], &x[2], &x[3])?;
            assert_eq!(hs.shape(), &[t, b, u]);
            assert_eq!(bits(&hs), bits(&rh), "h, {dtype} t {t} b {b} u {u}");
            assert_eq!(bits(&cs), bits(&rc), "c, {dtype} t {t} b {b} u {u}");
        }
    }
    Ok(())
}

#[test]
fn gradients_are_the_loops() -> Result<()> {
    for (dtype, tol) in [(DType::F64, 1e-13), (DType::F32, 3e-5)] {
        for (t, b, u) in [(1, 2, 3), (5, 3, 4), (4, 33, 70)] {
            let x = inputs(t, b, u, dtype, 11)?;
            let (got, want) = (grads(Tensor::lstm_sequence, &x)?, grads(reference, &x)?);
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.shape(), x[k].shape());
                close(g, w, tol, &format!("input {k}, {dtype} t {t} b {b} u {u}"));
            }
        }
    }
    Ok(())
}

#[test]
fn only_the_outputs_used_get_cotangents() -> Result<()> {
    // the last h alone (as a layer without return_sequences), and the
    // cell states alone
    let x = inputs(5, 2, 3, DType::F64, 5)?;
    let last_h: Seq = |a, b, c, d| {
        let (hs, cs) = Tensor::lstm_sequence(a, b, c, d)?;
        Ok((hs.narrow(0, 4, 1)?, cs.narrow(0, 0, 1)?.mul_scalar(0.0)?))
    };
    let last_h_ref: Seq = |a, b, c, d| {
        let (hs, cs) = reference(a, b, c, d)?;
        Ok((hs.narrow(0, 4, 1)?, cs.narrow(0, 0, 1)?.mul_scalar(0.0)?))
    };
    for (k, (g, w)) in grads(last_h, &x)?.iter().zip(&grads(last_h_ref, &x)?).enumerate() {
        close(g, w, 1e-13, &format!("last h, input {k}"));
    }
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x[1]);
        Tensor::lstm_sequence(&x[0], &x[1], &x[2], &x[3])?.1.sum_all()
    })?;
    let [gw] = tape.gradient(&y, &[&x[1]])?;
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x[1]);
        reference(&x[0], &x[1], &x[2], &x[3])?.1.sum_all()
    })?;
    let [rw] = tape.gradient(&y, &[&x[1]])?;
    close(&gw.unwrap(), &rw.unwrap(), 1e-13, "cell states alone, d/dW");
    Ok(())
}

/// `d/d(all) (∇f · v)`: a second order of the scalar `f`, by nested
/// tapes (a fixed direction `v` per input).
pub(super) fn second_order_of(f: impl Fn(&[Tensor; 4]) -> Result<Tensor>, x: &[Tensor; 4]) -> Result<Vec<Tensor>> {
    let outer = GradientTape::new();
    let y = outer.record(|| {
        outer.watch(&x[..]);
        let g = grads_of(&f, x)?;
        let mut s: Option<Tensor> = None;
        for (k, g) in g.iter().enumerate() {
            let n = g.numel();
            let v: Vec<f64> = (0..n).map(|i| ((i * 7 + k * 3) % 5) as f64 / 5.0 - 0.4).collect();
            let term = g.mul(&Tensor::from_vec(v, g.shape())?)?.sum_all()?;
            s = Some(match s {
                Some(a) => a.add(&term)?,
                None => term,
            });
        }
        Ok(s.expect("four terms"))
    })?;
    Ok(outer
        .gradient(&y, &[&x[0], &x[1], &x[2], &x[3]])?
        .into_iter()
        .map(|g| g.expect("a second-order gradient"))
        .collect())
}

/// `d/d(all) (∇weigh · v)`: a second order of `f`.
fn second_order(f: Seq, x: &[Tensor; 4]) -> Result<Vec<Tensor>> {
    second_order_of(
        |x| {
            let (hs, cs) = f(&x[0], &x[1], &x[2], &x[3])?;
            weigh(&hs, &cs)
        },
        x,
    )
}

#[test]
fn second_order_through_the_backward_ops_vjp() -> Result<()> {
    for (t, b, u) in [(1, 2, 2), (4, 3, 3)] {
        let x = inputs(t, b, u, DType::F64, 23)?;
        let (got, want) = (second_order(Tensor::lstm_sequence, &x)?, second_order(reference, &x)?);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            close(g, w, 1e-12, &format!("second order, input {k}, t {t} b {b} u {u}"));
        }
    }
    Ok(())
}

#[test]
fn forward_mode_is_the_loops() -> Result<()> {
    let x = inputs(4, 3, 2, DType::F64, 3)?;
    let mut rng = Rng::new(9);
    let ts: Vec<Tensor> = x
        .iter()
        .map(|a| rng.normal(a.shape(), 0.0, 1.0, DType::F64))
        .collect::<Result<_>>()?;
    let jvp = |f: Seq, with_w: bool| -> Result<Vec<f64>> {
        let acc = ForwardAccumulator::new();
        let y = acc.record(|| {
            for (k, (a, t)) in x.iter().zip(&ts).enumerate() {
                if k != 1 || with_w {
                    acc.watch(a, t)?;
                }
            }
            let (hs, cs) = f(&x[0], &x[1], &x[2], &x[3])?;
            weigh(&hs, &cs)
        })?;
        Ok(acc.jvp(&y)?.expect("a tangent").to_vec_f64())
    };
    for with_w in [true, false] {
        let (got, want) = (jvp(Tensor::lstm_sequence, with_w)?, jvp(reference, with_w)?);
        assert!(
            (got[0] - want[0]).abs() <= 1e-13 * (1.0 + want[0].abs()),
            "{got:?} vs {want:?}"
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
            let (mut hc, mut y) = (vec![], None);
            tape.record(|| {
                tape.watch(&x[..]);
                let (hs, cs) = Tensor::lstm_sequence(&x[0], &x[1], &x[2], &x[3])?;
                y = Some(weigh(&hs, &cs)?);
                hc = vec![hs, cs];
                Ok(())
            })?;
            let y = y.expect("recorded");
            let mut out = hc;
            out.extend(tape.gradient(&y, &[&x[0], &x[1], &x[2], &x[3]])?.into_iter().flatten());
            out.push(y);
            Ok(out)
        };
        let f = function(move |x: &[Tensor; 4]| step(x));
        let (eager, traced) = (step(&x)?, f.call(&x)?);
        assert_eq!(eager.len(), 7);
        // the op's outputs: the same kernels, the same bits
        for k in 0..2 {
            assert_eq!(bits(&eager[k]), bits(&traced[k]), "output {k}, {dtype}");
        }
        // the gradients and the loss, whose weighted sums the graph fuses
        // (another order of the sums)
        let tol = if dtype == DType::F32 { 2e-6 } else { 1e-14 };
        for (k, (e, t)) in eager.iter().zip(&traced).enumerate().skip(2) {
            close(t, e, tol, &format!("output {k}, {dtype}"));
        }
        let g = f.concrete(&x)?.optimized_graph().to_string();
        assert!(g.contains("LstmSequence") && g.contains("LstmSequenceGrad"), "{g}");
        assert!(!g.contains("LstmCell"), "the steps stay inside the op: {g}");
    }
    Ok(())
}

#[test]
fn the_lstm_layer_runs_the_op_and_keeps_its_state() -> Result<()> {
    // the layer's output and state against its own cell stepped by hand
    let mut rng = Rng::new(4);
    let lstm = LSTM::builder(3, 4).return_sequences(true).build(&mut rng)?;
    let x = rng.normal(&[2, 5, 3], 0.0, 1.0, DType::F32)?;
    let (ys, last) = lstm.forward_from(&x, None)?;
    let mut s = lstm.cell().zero_state(2)?;
    for t in 0..5 {
        s = lstm.cell().step(&x.narrow(1, t, 1)?.reshape(&[2, 3])?, &s)?;
        close(&ys.narrow(1, t, 1)?.reshape(&[2, 4])?, &s.h, 1e-6, &format!("step {t}"));
    }
    close(&last.h, &s.h, 1e-6, "last h");
    close(&last.c, &s.c, 1e-6, "last c");
    // and its graph holds the sequence op, not a step per time step
    let vars = lstm.trainable_variables();
    let f = function(move |x: &Tensor| {
        let tape = GradientTape::new();
        let y = tape.record(|| lstm.forward(x, true)?.square()?.sum_all())?;
        Ok(tape.gradient(&y, &vars)?.into_iter().flatten().collect::<Vec<_>>())
    });
    let g = f.concrete(&x)?.optimized_graph().to_string();
    assert_eq!(g.matches("LstmSequenceGrad").count(), 1, "{g}");
    assert_eq!(g.matches("LstmCell").count(), 0, "{g}");
    Ok(())
}

#[test]
fn bad_input_is_an_error_naming_the_op() -> Result<()> {
    let [xw, w, h0, c0] = inputs(3, 2, 4, DType::F32, 1)?;
    let zeros = |s: &[usize], d| Tensor::zeros(s, d);
    let cases: Vec<(&str, Result<(Tensor, Tensor)>)> = vec![
        (
            "h0 of the wrong width",
            Tensor::lstm_sequence(&xw, &w, &zeros(&[2, 5], DType::F32), &c0),
        ),
        (
            "c0 of another batch",
            Tensor::lstm_sequence(&xw, &w, &h0, &zeros(&[3, 4], DType::F32)),
        ),
        (
            "a kernel not [u, 4u]",
            Tensor::lstm_sequence(&xw, &zeros(&[4, 15], DType::F32), &h0, &c0),
        ),
        (
            "projections of rank 2",
            Tensor::lstm_sequence(&xw.reshape(&[6, 16])?, &w, &h0, &c0),
        ),
        (
            "no steps",
            Tensor::lstm_sequence(&zeros(&[0, 2, 16], DType::F32), &w, &h0, &c0),
        ),
        (
            "mixed dtypes",
            Tensor::lstm_sequence(&xw, &w.cast(DType::F64)?, &h0, &c0),
        ),
        (
            "integers",
            Tensor::lstm_sequence(&zeros(&[3, 2, 16], DType::I32), &w, &h0, &c0),
        ),
    ];
    for (what, r) in cases {
        match r {
            Err(e @ (Error::InvalidArgument { .. } | Error::DTypeMismatch { .. } | Error::UnsupportedDType { .. })) => {
                assert!(e.to_string().contains("lstm_sequence"), "{what}: {e}")
            }
            Err(e) => panic!("{what}: unexpected error {e:?}"),
            Ok(_) => panic!("{what}: accepted"),
        }
    }
    Ok(())
}

#[test]
fn parts_without_a_cotangent_cost_no_zeros_eager_or_traced() -> Result<()> {
    // a model reading the outputs h alone (or the states c alone): the
    // backward op gets the empty marker for the other parts, not zeros
    // joined into a cotangent of the packed output; the values are the
    // loop's, eager and traced
    let x = inputs(4, 3, 2, DType::F32, 17)?;
    let step = |f: Seq, which: usize, x: &[Tensor; 4]| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&x[..]);
            let (hs, cs) = f(&x[0], &x[1], &x[2], &x[3])?;
            let part = if which == 0 { hs } else { cs };
            part.square()?.sum_all()
        })?;
        Ok(tape
            .gradient(&y, &[&x[0], &x[1], &x[2], &x[3]])?
            .into_iter()
            .flatten()
            .collect())
    };
    for which in [0, 1] {
        let f = function(move |x: &[Tensor; 4]| step(Tensor::lstm_sequence, which, x));
        let (eager, traced, want) = (
            step(Tensor::lstm_sequence, which, &x)?,
            f.call(&x)?,
            step(reference, which, &x)?,
        );
        assert_eq!(eager.len(), 4);
        for (k, ((e, t), w)) in eager.iter().zip(&traced).zip(&want).enumerate() {
            close(e, w, 3e-6, &format!("part {which}, input {k}, eager against the loop"));
            close(t, e, 2e-6, &format!("part {which}, input {k}, traced against eager"));
        }
        let g = f.concrete(&x)?.optimized_graph().to_string();
        assert!(g.contains("f32[0] = Const"), "the marker of an absent cotangent: {g}");
        assert!(
            !g.contains("Concat") && !g.contains("Pad"),
            "no cotangent of the packed output: {g}"
        );
    }
    Ok(())
}

#[test]
fn the_tape_keeps_the_packed_output_and_the_weights_alone() -> Result<()> {
    // the rule reads the recurrent kernel, the initial state and the
    // packed output's parts: not the projections
    let x = inputs(5, 2, 3, DType::F32, 2)?;
    let before: Vec<usize> = x.iter().map(Tensor::ref_count).collect();
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&x[..]);
        Tensor::lstm_sequence(&x[0], &x[1], &x[2], &x[3])?.0.sum_all()
    })?;
    let after: Vec<usize> = x.iter().map(Tensor::ref_count).collect();
    assert_eq!(after[0], before[0], "xw is not kept");
    assert!(
        (1..4).all(|k| after[k] > before[k]),
        "the kernel and the state are kept"
    );
    let g = tape.gradient(&y, &[&x[0], &x[1], &x[2], &x[3]])?;
    assert!(g.iter().all(Option::is_some));
    drop(tape);
    assert_eq!(x.iter().map(Tensor::ref_count).collect::<Vec<_>>(), before);
    Ok(())
}
