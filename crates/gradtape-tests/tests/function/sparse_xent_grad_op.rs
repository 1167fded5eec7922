//! The sparse softmax cross-entropy's gradient as one op,
//! `SparseSoftmaxCrossEntropyWithLogitsGrad` (`g · (softmax(x) −
//! one_hot)`, one row kernel), recorded where a tape or a trace listens:
//! its values eager and traced against TensorFlow's, its second order
//! (written with differentiable ops) against TensorFlow's, the nodes it
//! replaces in a traced classifier's step, the half types, and its errors.

use gradtape::{function, DType, GradientTape, Result, Rng, Tensor};

const OP: &str = "SparseSoftmaxCrossEntropyWithLogitsGrad";

fn close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{what}[{i}]: got {a}, want {b}");
    }
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn no_grad() -> gradtape::Error {
    gradtape::Error::InvalidArgument {
        op: "test",
        msg: "no gradient".into(),
    }
}

// TensorFlow 2.21 in f64 (JAX's x64 grad of `log_softmax` agrees to the
// last digit or two): with the logits `X`, labels `[2, 0, 3]`, weights
// `w` and direction `V` below, `loss = Σ w · sparse_xent(labels, X)`,
// `G = dloss/dX` (nested `tf.GradientTape`s), then `s = Σ G · V` and its
// gradients with respect to `X` and `w`.
pub(crate) const X: [f64; 12] = [0.3, -1.2, 2.0, 0.5, 1.5, 0.1, -0.7, 0.0, -2.0, 0.4, 0.9, 3.1];
pub(crate) const W: [f64; 3] = [0.5, -1.25, 2.0];
pub(crate) const V: [f64; 12] = [1.0, -0.5, 0.25, 2.0, 0.0, 1.5, -1.0, 0.5, -0.75, 0.3, 1.2, -2.0];
const TF_GRAD: [f64; 12] = [
    0.0631434290953916,
    0.014089203446375747,
    -0.1543561909985698,
    0.07712355845680241,
    0.45912619398820714,
    -0.19502707942345116,
    -0.08763131557214641,
    -0.17646779899260956,
    0.010297641535201744,
    0.11351271894714972,
    0.1871508342231712,
    -0.3109611947055224,
];
pub(crate) const TF_HVP_X: [f64; 12] = [
    0.02566693298539187,
    -0.015406738302014118,
    -0.11873341588205001,
    0.10847322119867228,
    0.1854714245680194,
    -0.24680392893877845,
    0.10818213520024432,
    -0.04684963082948519,
    0.008377986221794864,
    0.21154037473193707,
    0.5172068662332746,
    -0.7371252271870063,
];
const TF_HVP_W: [f64; 3] = [0.3435137930723322, 0.2345145624474681, 0.43641698750579694];

/// `G`, `dS/dX`, `dS/dw` of the comment above, with nested tapes.
pub(crate) fn first_and_second(x: &Tensor, w: &Tensor, labels: &Tensor) -> Result<Vec<Tensor>> {
    let v = Tensor::from_vec(V.to_vec(), &[3, 4])?;
    let outer = GradientTape::persistent();
    let (g, s) = outer.record(|| {
        outer.watch(x);
        outer.watch(w);
        let inner = GradientTape::new();
        let loss = inner.record(|| {
            inner.watch(x);
            Tensor::sparse_softmax_cross_entropy_with_logits(labels, x)?
                .mul(w)?
                .sum_all()
        })?;
        let g = inner.gradient(&loss, x)?.ok_or_else(no_grad)?;
        let s = g.mul(&v)?.sum_all()?;
        Ok((g, s))
    })?;
    let h = outer.gradient(&s, &[x.clone(), w.clone()])?;
    let mut out = vec![g];
    for t in h {
        out.push(t.ok_or_else(no_grad)?);
    }
    Ok(out)
}

#[test]
fn first_and_second_order_eager_and_traced_give_tensorflows_numbers() -> Result<()> {
    let x = Tensor::from_vec(X.to_vec(), &[3, 4])?;
    let w = Tensor::from_vec(W.to_vec(), &[3])?;
    let labels = Tensor::vector(&[2i64, 0, 3]);
    // eager, first order alone (no outer tape: the kept softmax's pass)
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(&x);
        Tensor::sparse_softmax_cross_entropy_with_logits(&labels, &x)?
            .mul(&w)?
            .sum_all()
    })?;
    close(
        "eager grad",
        &f64s(&tape.gradient(&loss, &x)?.ok_or_else(no_grad)?),
        &TF_GRAD,
        1e-14,
    );
    // eager under an outer tape (the op), and traced
    let eager = first_and_second(&x, &w, &labels)?;
    let f = function(|(x, w, l): &(Tensor, Tensor, Tensor)| first_and_second(x, w, l));
    let traced = f.call(&(x.clone(), w.clone(), labels.clone()))?;
    for (what, ts) in [("eager", &eager), ("traced", &traced)] {
        close(&format!("{what} grad"), &f64s(&ts[0]), &TF_GRAD, 1e-14);
        close(&format!("{what} d/dx"), &f64s(&ts[1]), &TF_HVP_X, 1e-13);
        close(&format!("{what} d/dw"), &f64s(&ts[2]), &TF_HVP_W, 1e-13);
    }
    // the first order is the one op in the traced graph
    let c = f.concrete(&(x, w, labels))?;
    assert_eq!(c.graph().count(OP), 1, "{}", c.graph());
    Ok(())
}

/// An MLP classifier's loss and gradients (`[0]` the loss).
fn mlp_step(x: &Tensor, labels: &Tensor, p: &[Tensor]) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        for t in p {
            tape.watch(t);
        }
        let h = x.matmul(&p[0])?.bias_add(&p[1])?.relu()?;
        let logits = h.matmul(&p[2])?.bias_add(&p[3])?;
        Tensor::sparse_softmax_cross_entropy_with_logits(labels, &logits)?.mean_all()
    })?;
    let mut out = vec![loss.clone()];
    for g in tape.gradient(&loss, p)? {
        out.push(g.ok_or_else(no_grad)?);
    }
    Ok(out)
}

#[test]
fn a_traced_classifier_step_has_one_gradient_node_and_the_eager_values() -> Result<()> {
    let mut rng = Rng::new(28);
    let p: Vec<Tensor> = [&[12usize, 16][..], &[16], &[16, 10], &[10]]
        .iter()
        .map(|s| rng.normal(s, 0.0, 0.4, DType::F32))
        .collect::<Result<_>>()?;
    let f = function(|(x, l, p): &(Tensor, Tensor, Vec<Tensor>)| mlp_step(x, l, p));
    for k in 0..3 {
        let x = rng.normal(&[24, 12], 0.0, 1.0, DType::F32)?;
        let labels = Tensor::from_vec((0..24i32).map(|i| (7 * i + k) % 10).collect(), &[24])?;
        let want = mlp_step(&x, &labels, &p)?;
        let got = f.call(&(x, labels, p.clone()))?;
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            close(&format!("call {k}, output {i}"), &f64s(a), &f64s(b), 1e-5);
        }
    }
    assert_eq!(f.trace_count(), 1);
    // the gradient chain (softmax again, the one-hot classes compared and
    // cast, a difference and a product) is one node
    let args = (
        Tensor::zeros(&[24, 12], DType::F32),
        Tensor::zeros(&[24], DType::I32),
        p.clone(),
    );
    let c = f.concrete(&args)?;
    let g = c.graph();
    assert_eq!(g.count(OP), 1, "{g}");
    for gone in ["Softmax", "Equal", "Cast", "Sub"] {
        assert_eq!(g.count(gone), 0, "{gone} in {g}");
    }
    // ... where the composite, written out, traces those nodes
    let composite = function(|(x, l): &(Tensor, Tensor)| {
        let classes = Tensor::from_vec((0..10i64).collect(), &[10])?;
        let onehot = l.cast(DType::I64)?.expand_dims(-1)?.eq(&classes)?.cast(DType::F32)?;
        x.softmax(-1)?.sub(&onehot)
    });
    let cg = composite.concrete(&(Tensor::zeros(&[24, 10], DType::F32), Tensor::zeros(&[24], DType::I32)))?;
    for node in ["Softmax", "Equal", "Sub"] {
        assert_eq!(cg.graph().count(node), 1, "{node} in {}", cg.graph());
    }
    Ok(())
}

/// `d Σ sparse_xent([2, 0, 3], x) / dx`.
fn grad(x: &Tensor) -> Result<Tensor> {
    let labels = Tensor::vector(&[2i32, 0, 3]);
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(x);
        Tensor::sparse_softmax_cross_entropy_with_logits(&labels, x)?.sum_all()
    })?;
    tape.gradient(&loss, x)?.ok_or_else(no_grad)
}

#[test]
fn the_half_types_give_the_f32_gradient_rounded() -> Result<()> {
    let x32 = Tensor::from_vec(X.iter().map(|&v| v as f32).collect(), &[3, 4])?;
    let want = f64s(&grad(&x32)?);
    for dt in [DType::F16, DType::BF16] {
        let x = x32.cast(dt)?;
        // (bf16 keeps 8 bits: the logits themselves round by 2^-9)
        let tol = if dt == DType::F16 { 2e-3 } else { 2e-2 };
        let eager = grad(&x)?;
        assert_eq!(eager.dtype(), dt);
        close(&format!("{dt:?} eager"), &f64s(&eager), &want, tol);
        let f = function(grad);
        let traced = f.call(&x)?;
        assert_eq!(traced.dtype(), dt);
        close(&format!("{dt:?} traced"), &f64s(&traced), &want, tol);
        assert_eq!(f.concrete(&x)?.graph().count(OP), 1);
    }
    Ok(())
}

#[test]
fn bad_operands_of_the_gradient_op_are_errors_naming_it() -> Result<()> {
    let f = function(|(l, x): &(Tensor, Tensor)| {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            tape.watch(x);
            Tensor::sparse_softmax_cross_entropy_with_logits(l, x)?.sum_all()
        })?;
        tape.gradient(&loss, x)?.ok_or_else(no_grad)
    });
    let x = Tensor::zeros(&[2, 3], DType::F32);
    let c = f.concrete(&(Tensor::vector(&[0i64, 1]), x.clone()))?;
    let node = c
        .graph()
        .nodes
        .iter()
        .find(|n| n.op.name() == OP)
        .expect("the gradient node");
    let g = Tensor::vector(&[1.0f32, 1.0]);
    let cases = [
        // a label out of range: the forward op's error, `IndexOutOfRange`
        (vec![Tensor::vector(&[0i64, 3]), x.clone(), g.clone()], "3"),
        (vec![Tensor::vector(&[-1i32, 0]), x.clone(), g.clone()], "-1"),
        // the upstream gradient's shape, dtype; the labels' dtype
        (
            vec![Tensor::vector(&[0i64, 1]), x.clone(), Tensor::vector(&[1.0f32])],
            "[1]",
        ),
        (
            vec![Tensor::vector(&[0i64, 1]), x.clone(), Tensor::vector(&[1.0f64, 1.0])],
            "f64",
        ),
        (vec![Tensor::vector(&[0.0f32, 1.0]), x.clone(), g.clone()], "f32"),
        (
            vec![
                Tensor::vector(&[0i64, 1]),
                Tensor::zeros(&[2, 3], DType::I32),
                g.clone(),
            ],
            "i32",
        ),
    ];
    for (inputs, names) in cases {
        let e = node.op.eval(&inputs).expect_err("bad operands").to_string();
        assert!(
            e.contains("sparse_softmax_cross_entropy_with_logits_grad") && e.to_lowercase().contains(names),
            "{e}"
        );
    }
    // and through the traced function, out of range: the forward's error
    let e = f
        .call(&(Tensor::vector(&[0i64, 3]), x))
        .expect_err("label 3 of 3 classes")
        .to_string();
    assert!(
        e.contains("sparse_softmax_cross_entropy_with_logits") && e.contains('3'),
        "{e}"
    );
    Ok(())
}

/// The forward kernel computes each task's rows' losses and softmax
/// together, the rows split over the threads: a batch large enough for
/// several tasks, against each row's loss and gradient computed here in
/// `f64` (`logsumexp(x) − x[label]`, `softmax(x) − one_hot`).
#[test]
fn a_batch_split_over_the_threads_gives_each_rows_loss_and_softmax() -> Result<()> {
    let (rows, classes) = (2500, 300);
    let mut rng = Rng::new(41);
    let x = rng.normal(&[rows, classes], 0.0, 3.0, DType::F32)?;
    let labels: Vec<i64> = (0..rows).map(|r| ((r * 7919 + 13) % classes) as i64).collect();
    let lab = Tensor::from_vec(labels.clone(), &[rows])?;
    let tape = GradientTape::new();
    tape.watch(&x);
    let (loss, total) = tape.record(|| {
        let loss = Tensor::sparse_softmax_cross_entropy_with_logits(&lab, &x)?;
        let total = loss.sum_all()?;
        Ok::<_, gradtape::Error>((loss, total))
    })?;
    let dx = tape.gradient(&total, &x)?.ok_or_else(no_grad)?;
    let (xs, got_loss, got_dx) = (f64s(&x), f64s(&loss), f64s(&dx));
    for r in 0..rows {
        let row = &xs[r * classes..(r + 1) * classes];
        let m = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
        let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        let l = labels[r] as usize;
        close(&format!("loss row {r}"), &got_loss[r..r + 1], &[lse - row[l]], 2e-5);
        let want: Vec<f64> = (0..classes)
            .map(|j| (row[j] - lse).exp() - if j == l { 1.0 } else { 0.0 })
            .collect();
        close(
            &format!("gradient row {r}"),
            &got_dx[r * classes..(r + 1) * classes],
            &want,
            2e-6,
        );
    }
    Ok(())
}
