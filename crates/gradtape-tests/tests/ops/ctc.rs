//! The CTC loss: values and gradients against TensorFlow 2.21, the error
//! of second derivatives, infeasible labels, tracing, and bad arguments.
//!
//! Reference numbers: TensorFlow 2.21 `tf.nn.ctc_loss` (dense labels, the
//! arguments of each case) on `float32` logits `x[i] = 1.5 sin(0.9 i + 0.3)`
//! (flat time-major index `i`, shape `[6, 3, 5]`), label lengths `[3, 4, 0]`,
//! logit lengths `[6, 5, 3]`; gradients of `sum(loss * [1, -0.5, 2])` from
//! `tf.GradientTape`.

use gradtape::{DType, Error, GradientTape, Result, Tensor};

// blank 0, time-major [6, 3, 5]
const LOSS_B0: &[f64] = &[7.58110189e+00, 8.56663322e+00, 7.97750187e+00];
const GRAD_B0: &[f64] = &[
    4.62729484e-02,
    -5.29556990e-01,
    3.36508185e-01,
    1.13919102e-01,
    3.28568108e-02,
    -3.03762499e-03,
    -2.20101569e-02,
    -8.02257210e-02,
    2.86442578e-01,
    -1.81169033e-01,
    -1.37578893e+00,
    1.81271330e-01,
    1.16510086e-01,
    2.31585145e-01,
    8.46422434e-01,
    1.98970124e-01,
    6.99456036e-02,
    -3.29365462e-01,
    3.64993848e-02,
    2.39503831e-02,
    -1.34495087e-03,
    2.45666906e-01,
    -1.89834669e-01,
    -2.08224356e-03,
    -5.24049103e-02,
    -1.90249407e+00,
    6.53284416e-02,
    1.34735107e-01,
    4.94597048e-01,
    1.20783329e+00,
    -9.78118181e-03,
    1.50459379e-01,
    -2.66146630e-01,
    4.04710211e-02,
    8.49975199e-02,
    -5.14561161e-02,
    5.41734248e-02,
    -1.57918170e-01,
    -5.04841246e-02,
    2.05685049e-01,
    -1.95490360e+00,
    9.64266360e-02,
    3.54995728e-01,
    8.39196146e-01,
    6.64285123e-01,
    -3.96070868e-01,
    8.12950209e-02,
    -2.76781380e-01,
    1.26271650e-01,
    4.65285718e-01,
    -1.30227551e-01,
    -1.80572063e-01,
    -5.65447956e-02,
    9.51675922e-02,
    2.72176802e-01,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    -4.72801298e-01,
    3.16651464e-02,
    -4.13319409e-01,
    2.63119847e-01,
    5.91335773e-01,
    -1.99816346e-01,
    -9.35575292e-02,
    -2.90543977e-02,
    3.73099357e-01,
    -5.06710075e-02,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    -3.08923591e-02,
    5.31984232e-02,
    -7.50284433e-01,
    4.25404280e-01,
    3.02574247e-01,
    -0.00000000e+00,
    -0.00000000e+00,
    -0.00000000e+00,
    -0.00000000e+00,
    -0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
];
// blank -1 (= 4)
const LOSS_BM1: &[f64] = &[6.45000458e+00, 5.75744772e+00, 2.46639395e+00];
const GRAD_BM1: &[f64] = &[
    1.43608212e-01,
    -5.75389385e-01,
    3.36508185e-01,
    1.13919102e-01,
    -1.86460651e-02,
    -1.12828622e-02,
    -2.20101569e-02,
    -8.02257210e-02,
    1.46673962e-01,
    -3.31552327e-02,
    6.24211073e-01,
    1.81271330e-01,
    1.16510086e-01,
    2.31585145e-01,
    -1.15357757e+00,
    4.37255114e-01,
    -2.50600755e-01,
    -2.17384398e-01,
    3.64993773e-02,
    -5.76926395e-03,
    -2.08844263e-02,
    5.29216081e-02,
    -1.89834669e-01,
    1.55387834e-01,
    2.40972266e-03,
    9.75059643e-02,
    6.53284416e-02,
    1.34735107e-01,
    4.94597048e-01,
    -7.92166710e-01,
    6.16233230e-01,
    6.86306953e-02,
    -5.44044495e-01,
    4.04710211e-02,
    -1.81290403e-01,
    -3.80400717e-02,
    2.55364060e-01,
    -1.57918170e-01,
    -5.04841246e-02,
    -8.92170426e-03,
    4.50964570e-02,
    9.64266360e-02,
    3.54995728e-01,
    8.39196146e-01,
    -1.33571482e+00,
    2.69131064e-01,
    8.12950060e-02,
    -2.14844823e-01,
    1.26271620e-01,
    -2.61852980e-01,
    2.57010698e-01,
    -1.80572063e-01,
    -5.65447956e-02,
    -9.12636146e-03,
    -1.07674338e-02,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    4.25210185e-02,
    3.16651464e-02,
    -1.04589462e-01,
    2.63119847e-01,
    -2.32716501e-01,
    -3.04612070e-01,
    -9.35575292e-02,
    -2.90543977e-02,
    4.72250730e-01,
    -4.50267605e-02,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    2.28204895e-02,
    5.31984232e-02,
    -6.71227694e-01,
    4.25404280e-01,
    1.69804618e-01,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
];
// blank 2
const LOSS_B2: &[f64] = &[7.53291178e+00, 5.12208557e+00, 7.26931334e+00];
const GRAD_B2: &[f64] = &[
    1.43608212e-01,
    -1.87111706e-01,
    -1.03272319e-01,
    1.13919102e-01,
    3.28568108e-02,
    -1.12828622e-02,
    -2.20101569e-02,
    -5.42163029e-02,
    -2.05312267e-01,
    2.92821527e-01,
    6.24211073e-01,
    1.81271330e-01,
    -1.88348997e+00,
    2.31585145e-01,
    8.46422434e-01,
    4.37255144e-01,
    -4.23580945e-01,
    -7.92912394e-03,
    -2.96954401e-02,
    2.39503831e-02,
    -2.08844263e-02,
    1.25976577e-01,
    2.29324549e-02,
    -1.60364613e-01,
    3.23400497e-02,
    9.75059643e-02,
    6.53284416e-02,
    -1.86526489e+00,
    4.94597048e-01,
    1.20783329e+00,
    6.16233230e-01,
    -2.42846534e-01,
    -1.24734141e-01,
    -3.33650082e-01,
    8.49975199e-02,
    -3.38759683e-02,
    1.88033611e-01,
    -8.85540992e-02,
    -5.04841246e-02,
    -1.51194595e-02,
    4.50964570e-02,
    9.64266360e-02,
    -1.64500427e+00,
    8.39196146e-01,
    6.64285123e-01,
    2.69131154e-01,
    8.12950209e-02,
    -2.37939313e-01,
    -5.77772558e-01,
    4.65285718e-01,
    2.55228817e-01,
    -1.80572063e-01,
    -4.78876233e-02,
    -1.72328912e-02,
    -9.53621231e-03,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    4.25210185e-02,
    3.16651464e-02,
    -6.47951841e-01,
    -1.75700188e-02,
    5.91335773e-01,
    -3.04612100e-01,
    -9.35575292e-02,
    -2.79515702e-02,
    -2.21049748e-02,
    4.48226213e-01,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    2.28204895e-02,
    5.31984232e-02,
    1.04809754e-01,
    -4.83402938e-01,
    3.02574247e-01,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
];
// batch-major [3, 6, 5], blank 0
const LOSS_BATCH_MAJOR: &[f64] = &[7.58110189e+00, 8.56663322e+00, 7.97750187e+00];
const GRAD_BATCH_MAJOR: &[f64] = &[
    4.62729484e-02,
    -5.29556990e-01,
    3.36508185e-01,
    1.13919102e-01,
    3.28568108e-02,
    1.98970124e-01,
    6.99456036e-02,
    -3.29365462e-01,
    3.64993848e-02,
    2.39503831e-02,
    -9.78118181e-03,
    1.50459379e-01,
    -2.66146630e-01,
    4.04710211e-02,
    8.49975199e-02,
    -3.96070868e-01,
    8.12950209e-02,
    -2.76781380e-01,
    1.26271650e-01,
    4.65285718e-01,
    -4.72801298e-01,
    3.16651464e-02,
    -4.13319409e-01,
    2.63119847e-01,
    5.91335773e-01,
    -3.08923591e-02,
    5.31984232e-02,
    -7.50284433e-01,
    4.25404280e-01,
    3.02574247e-01,
    -3.03762499e-03,
    -2.20101569e-02,
    -8.02257210e-02,
    2.86442578e-01,
    -1.81169033e-01,
    -1.34495087e-03,
    2.45666906e-01,
    -1.89834669e-01,
    -2.08224356e-03,
    -5.24049103e-02,
    -5.14561161e-02,
    5.41734248e-02,
    -1.57918170e-01,
    -5.04841246e-02,
    2.05685049e-01,
    -1.30227551e-01,
    -1.80572063e-01,
    -5.65447956e-02,
    9.51675922e-02,
    2.72176802e-01,
    -1.99816346e-01,
    -9.35575292e-02,
    -2.90543977e-02,
    3.73099357e-01,
    -5.06710075e-02,
    -0.00000000e+00,
    -0.00000000e+00,
    -0.00000000e+00,
    -0.00000000e+00,
    -0.00000000e+00,
    -1.37578893e+00,
    1.81271330e-01,
    1.16510086e-01,
    2.31585145e-01,
    8.46422434e-01,
    -1.90249407e+00,
    6.53284416e-02,
    1.34735107e-01,
    4.94597048e-01,
    1.20783329e+00,
    -1.95490360e+00,
    9.64266360e-02,
    3.54995728e-01,
    8.39196146e-01,
    6.64285123e-01,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
    0.00000000e+00,
];

fn logits(d: DType, time_major: bool) -> Tensor {
    let v: Vec<f64> = (0..90).map(|i| 1.5 * (0.9 * i as f64 + 0.3).sin()).collect();
    let x = Tensor::from_vec(v, &[6, 3, 5]).unwrap();
    let x = if time_major {
        x
    } else {
        x.permute(&[1, 0, 2]).unwrap().contiguous().unwrap()
    };
    x.cast(d).unwrap()
}

fn i32s(v: &[i32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

/// The losses of the three-example case on `x`: `labels` row-major `[3,
/// 4]`, label lengths `[3, 4, 0]`, logit lengths `[6, 5, 3]`.
fn loss3(x: &Tensor, labels: &[i32], blank: i64, time_major: bool) -> Result<Tensor> {
    Tensor::ctc_loss(
        &i32s(labels, &[3, 4]),
        x,
        &i32s(&[3, 4, 0], &[3]),
        &i32s(&[6, 5, 3], &[3]),
        time_major,
        blank,
    )
}

/// The labels of the three-example case with blank 0.
const LABELS_B0: [i32; 12] = [1, 2, 2, 0, 3, 1, 4, 3, 0, 0, 0, 0];

/// The loss of one example, `label` over all the frames of the time-major
/// `x` (`[frames, 1, classes]`), blank 0.
fn loss1(x: &Tensor, label: &[i32]) -> Result<Tensor> {
    let (n, t) = (label.len(), x.shape()[0]);
    Tensor::ctc_loss(
        &i32s(label, &[1, n]),
        x,
        &i32s(&[n as i32], &[1]),
        &i32s(&[t as i32], &[1]),
        true,
        0,
    )
}

/// `f(x)` recorded on a tape watching `x`, and the gradient of its sum.
fn with_grad(x: &Tensor, f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<(Tensor, Tensor)> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(x);
        f(x)
    })?;
    let g = tape.gradient(&y, x)?.ok_or_else(|| Error::InvalidArgument {
        op: "test",
        msg: "no gradient".into(),
    })?;
    Ok((y, g))
}

fn close(name: &str, got: &Tensor, want: &[f64], tol: f64) {
    let got = got.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
    assert_eq!(got.len(), want.len(), "{name}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{name}[{i}]: got {g}, TensorFlow {w}"
        );
    }
}

fn check(name: &str, labels: &[i32], blank: i64, time_major: bool, loss_ref: &[f64], grad_ref: &[f64]) {
    for d in [DType::F32, DType::F64] {
        let x = logits(d, time_major);
        let loss = loss3(&x, labels, blank, time_major).unwrap();
        assert_eq!(loss.dtype(), d);
        let w = Tensor::vector(&[1.0f64, -0.5, 2.0]).cast(d).unwrap();
        let (_, g) = with_grad(&x, |x| loss3(x, labels, blank, time_major)?.mul(&w)).unwrap();
        // TF's loss is float32 arithmetic
        let tol = if d == DType::F32 { 1e-5 } else { 2e-6 };
        close(&format!("{name} {d} loss"), &loss, loss_ref, tol);
        close(&format!("{name} {d} grad"), &g, grad_ref, tol);
    }
}

#[test]
fn values_and_gradients_match_tensorflow() {
    check("blank 0", &LABELS_B0, 0, true, LOSS_B0, GRAD_B0);
    check(
        "blank -1",
        &[1, 2, 2, 0, 3, 1, 0, 3, 0, 0, 0, 0],
        -1,
        true,
        LOSS_BM1,
        GRAD_BM1,
    );
    check(
        "blank 2",
        &[1, 3, 3, 0, 4, 1, 0, 4, 0, 0, 0, 0],
        2,
        true,
        LOSS_B2,
        GRAD_B2,
    );
    check("batch-major", &LABELS_B0, 0, false, LOSS_BATCH_MAJOR, GRAD_BATCH_MAJOR);
}

#[test]
fn uniform_logits_count_alignments() {
    // classes {blank, a, b}, 3 frames, label "a b": the alignments are
    // ab-, a-b, -ab, aab, abb: 5 of the 27 paths, so loss = ln(27/5)
    let x = Tensor::zeros(&[3, 1, 3], DType::F64);
    let l = loss1(&x, &[1, 2]).unwrap();
    assert!((l.to_vec::<f64>().unwrap()[0] - (27.0f64 / 5.0).ln()).abs() < 1e-12);
}

#[test]
fn infeasible_labels_give_inf_and_the_softmax_as_gradient() {
    // "1 1 1" needs 5 frames (blanks between repeats); 4 are given.
    // TensorFlow's CTCLoss (sparse labels) gives inf and the softmax.
    let v: Vec<f64> = (0..16).map(|i| (0.7 * i as f64).sin()).collect();
    let x = Tensor::from_vec(v, &[4, 1, 4]).unwrap();
    let (l, g) = with_grad(&x, |x| loss1(x, &[1, 1, 1])).unwrap();
    assert_eq!(l.to_vec::<f64>().unwrap(), vec![f64::INFINITY]);
    let p = x.softmax(-1).unwrap().to_vec::<f64>().unwrap();
    for (a, b) in g.to_vec::<f64>().unwrap().iter().zip(&p) {
        assert!((a - b).abs() < 1e-12);
    }
}

#[test]
fn second_derivatives_are_an_error_as_in_tensorflow() {
    let x = logits(DType::F64, true);
    let outer = GradientTape::new();
    let gsum = outer
        .record(|| -> Result<Tensor> {
            outer.watch(&x);
            let inner = GradientTape::new();
            let l = inner.record(|| {
                inner.watch(&x);
                loss3(&x, &LABELS_B0, 0, true)?.sum_all()
            })?;
            let g = inner.gradient(&l, &x)?.unwrap();
            g.square()?.sum_all()
        })
        .unwrap();
    assert!(gsum.to_vec::<f64>().unwrap()[0].is_finite());
    match outer.gradient(&gsum, &x) {
        Err(Error::InvalidArgument { op, msg }) => {
            assert_eq!(op, "ctc_loss");
            assert!(msg.contains("second derivatives"), "{msg}");
        }
        other => panic!("expected an error, got {other:?}"),
    }
}

/// Forward over reverse (`hvp`: the gradient rule run while a forward
/// accumulator, and no tape, listens) is the same error, not a zero H·v
/// (the rule took the forward pass's gradient, which no accumulator sees,
/// wherever no tape listened).
#[test]
fn forward_over_reverse_is_the_same_error() {
    let x = logits(DType::F64, true);
    let v = x.ones_like();
    match gradtape::hvp(|x: &Tensor| loss3(x, &LABELS_B0, 0, true)?.sum_all(), &x, &v) {
        Err(e) => assert!(e.to_string().contains("second derivatives"), "{e}"),
        Ok(hv) => panic!("expected an error, got {:?}", hv.to_vec_f64()),
    }
}

#[test]
fn traced_loss_and_gradient_follow_each_calls_logits() {
    let f = gradtape::function(|x: &Tensor| -> Result<Tensor> { Ok(with_grad(x, |x| loss1(x, &[1, 2]))?.1) });
    let a = Tensor::zeros(&[3, 1, 3], DType::F64);
    let b = Tensor::from_vec((0..9).map(|i| i as f64 * 0.3).collect::<Vec<f64>>(), &[3, 1, 3]).unwrap();
    for x in [&a, &b, &a] {
        let eager = with_grad(x, |x| loss1(x, &[1, 2])).unwrap().1.to_vec::<f64>().unwrap();
        let traced = f.call(x).unwrap().to_vec::<f64>().unwrap();
        for (p, q) in traced.iter().zip(&eager) {
            assert!((p - q).abs() < 1e-12, "traced {p} vs eager {q}");
        }
    }
    assert_eq!(f.trace_count(), 1);
}

fn invalid(r: Result<Tensor>, words: &[&str]) {
    match r {
        Err(e @ Error::InvalidArgument { .. }) | Err(e @ Error::UnsupportedDType { .. }) => {
            let s = e.to_string();
            assert!(s.contains("ctc_loss"), "{s:?} should name ctc_loss");
            for w in words {
                assert!(s.contains(w), "{s:?} should mention {w:?}");
            }
        }
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn bad_arguments_are_errors() {
    let x = Tensor::zeros(&[4, 2, 3], DType::F32);
    let labels = i32s(&[1, 2, 2, 1], &[2, 2]);
    let n = i32s(&[2, 2], &[2]);
    let t = i32s(&[4, 3], &[2]);
    let call = |l: &Tensor, x: &Tensor, n: &Tensor, t: &Tensor, blank: i64| Tensor::ctc_loss(l, x, n, t, true, blank);
    assert!(call(&labels, &x, &n, &t, 0).is_ok());
    // ranks and batch sizes
    invalid(
        call(&labels, &Tensor::zeros(&[4, 6], DType::F32), &n, &t, 0),
        &["rank 3", "[4, 6]"],
    );
    invalid(call(&i32s(&[1, 2], &[2]), &x, &n, &t, 0), &["labels", "[2]"]);
    invalid(
        call(&i32s(&[1, 2, 1], &[3, 1]), &x, &n, &t, 0),
        &["labels", "[3, 1]", "batch of 2"],
    );
    invalid(call(&labels, &x, &i32s(&[2], &[1]), &t, 0), &["label_length", "[1]"]);
    invalid(
        call(&labels, &x, &n, &i32s(&[4, 3, 3], &[3]), 0),
        &["logit_length", "[3]"],
    );
    // label longer than logits, lengths out of range
    invalid(
        call(&labels, &x, &n, &i32s(&[4, 1], &[2]), 0),
        &["label_length[1] = 2", "logit_length[1] = 1"],
    );
    invalid(call(&labels, &x, &n, &i32s(&[5, 3], &[2]), 0), &["logit_length[0] = 5"]);
    invalid(call(&labels, &x, &i32s(&[3, 1], &[2]), &t, 0), &["label_length[0] = 3"]);
    invalid(
        call(&labels, &x, &i32s(&[-1, 1], &[2]), &t, 0),
        &["label_length[0] = -1"],
    );
    // blank index out of range, labels equal to the blank or out of range
    invalid(call(&labels, &x, &n, &t, 3), &["blank_index 3", "3 classes"]);
    invalid(call(&labels, &x, &n, &t, -4), &["blank_index -4"]);
    invalid(
        call(&i32s(&[1, 0, 2, 1], &[2, 2]), &x, &n, &t, 0),
        &["labels[0, 1] = 0", "blank"],
    );
    invalid(
        call(&i32s(&[1, 3, 2, 1], &[2, 2]), &x, &n, &t, 0),
        &["labels[0, 1] = 3"],
    );
    invalid(
        call(&i32s(&[1, 2, -2, 1], &[2, 2]), &x, &n, &t, 0),
        &["labels[1, 0] = -2"],
    );
    // dtypes
    invalid(call(&labels, &x.cast(DType::I32).unwrap(), &n, &t, 0), &["i32"]);
    invalid(
        call(&labels.cast(DType::F32).unwrap(), &x, &n, &t, 0),
        &["labels", "f32"],
    );
    invalid(
        call(&labels, &x, &n, &t.cast(DType::F64).unwrap(), 0),
        &["logit_length", "f64"],
    );
    // no classes at all
    invalid(
        call(
            &i32s(&[], &[2, 0]),
            &Tensor::zeros(&[4, 2, 0], DType::F64),
            &i32s(&[0, 0], &[2]),
            &t,
            0,
        ),
        &["blank_index 0", "0 classes"],
    );
}
