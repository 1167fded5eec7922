//! Neural-network ops through the gradient checker (first and second order),
//! exact values computed by hand, and error cases.

use crate::common;

use common::*;
use gradtape::nn::RotaryEmbedding;
use gradtape::{DType, Error, GradientTape, HiddenRows, Result, Tensor};

fn labels_2x3() -> Tensor {
    Tensor::from_vec(vec![0.2f64, 0.3, 0.5, 1.0, 0.0, 0.0], &[2, 3]).unwrap()
}

fn table() -> Vec<Case> {
    let mut t = Vec::new();
    // softmax / log_softmax over every axis of several shapes
    let shaped: &[(&[usize], isize)] = &[(&[5], 0), (&[2, 3], -1), (&[2, 3], 0), (&[2, 3, 2], 1), (&[0, 3], -1)];
    for &(s, ax) in shaped {
        let f: Op = match ax {
            0 => |x| x[0].softmax(0),
            1 => |x| x[0].softmax(1),
            _ => |x| x[0].softmax(-1),
        };
        t.push(case(format!("softmax {s:?} axis {ax}"), f, &[(s, Any)]));
        let f: Op = match ax {
            0 => |x| x[0].log_softmax(0),
            1 => |x| x[0].log_softmax(1),
            _ => |x| x[0].log_softmax(-1),
        };
        t.push(case(format!("log_softmax {s:?} axis {ax}"), f, &[(s, Any)]));
    }
    // fused attention: q, k, v differentiable (first order through the
    // fused backward op, second order through the composite)
    t.push(case(
        "scaled_dot_product_attention [2,3,4] causal",
        |x| sq(x[0].scaled_dot_product_attention(&x[1], &x[2], None, true, None)),
        &[(&[2, 3, 4], Any), (&[2, 3, 4], Any), (&[2, 3, 4], Any)],
    ));
    t.push(case(
        "scaled_dot_product_attention cross [2,1,2,3] x [2,1,5,3] -> dv 2, mask",
        |x| {
            let m = Tensor::from_vec((0..10).map(|i| (i as f64 * 0.7).sin()).collect(), &[2, 5]).unwrap();
            sq(x[0].scaled_dot_product_attention(&x[1], &x[2], Some(&m), false, Some(0.8)))
        },
        &[(&[2, 1, 2, 3], Any), (&[2, 1, 5, 3], Any), (&[2, 1, 5, 2], Any)],
    ));
    // a mask that hides every key from some rows (rows 1 and 4 of the
    // first batch element): those rows are 0, their derivatives 0
    t.push(case(
        "scaled_dot_product_attention [2,5,3] x [2,4,3], rows that see no key",
        |x| {
            let keep: Vec<bool> = (0..40)
                .map(|i| ![4, 5, 6, 7, 16, 17, 18, 19].contains(&i) && i % 3 != 1)
                .collect();
            let m = Tensor::from_vec(keep, &[2, 5, 4]).unwrap();
            sq(x[0].scaled_dot_product_attention(&x[1], &x[2], Some(&m), false, None))
        },
        &[(&[2, 5, 3], Any), (&[2, 4, 3], Any), (&[2, 4, 3], Any)],
    ));
    // the same rows given the values' mean (Keras's convention): their
    // derivatives reach v alone, to every order
    t.push(case(
        "scaled_dot_product_attention [2,5,3] x [2,4,3], rows that see no key give the values' mean",
        |x| {
            let keep: Vec<bool> = (0..40)
                .map(|i| ![4, 5, 6, 7, 16, 17, 18, 19].contains(&i) && i % 3 != 1)
                .collect();
            let m = Tensor::from_vec(keep, &[2, 5, 4]).unwrap();
            sq(x[0].scaled_dot_product_attention_with_hidden(&x[1], &x[2], Some(&m), false, None, HiddenRows::Mean))
        },
        &[(&[2, 5, 3], Any), (&[2, 4, 3], Any), (&[2, 4, 3], Any)],
    ));
    // with dropout: a fixed seed fixes the dropped probabilities, so the op
    // is a smooth function of q, k, v (rate 0.4 drops some of the 2·3·6)
    t.push(case(
        "scaled_dot_product_attention dropout 0.4 [2,3,4] x [2,6,4]",
        |x| {
            let drop = gradtape::AttentionDropout { rate: 0.4, seed: 11 };
            sq(x[0].scaled_dot_product_attention_dropout(&x[1], &x[2], None, false, None, drop))
        },
        &[(&[2, 3, 4], Any), (&[2, 6, 4], Any), (&[2, 6, 3], Any)],
    ));
    t.push(case(
        "scaled_dot_product_attention dropout 0.3 causal [1,5,3]",
        |x| {
            let drop = gradtape::AttentionDropout { rate: 0.3, seed: 5 };
            sq(x[0].scaled_dot_product_attention_dropout(&x[1], &x[2], None, true, Some(0.7), drop))
        },
        &[(&[1, 5, 3], Any), (&[1, 5, 3], Any), (&[1, 5, 3], Any)],
    ));
    // dense xent: both arguments differentiable
    for s in [&[3usize][..], &[2, 3], &[2, 2, 3], &[0, 3]] {
        t.push(case(
            format!("softmax_cross_entropy_with_logits {s:?}"),
            |x| Tensor::softmax_cross_entropy_with_logits(&x[1], &x[0]),
            &[(s, Any), (s, Pos)],
        ));
    }
    t.push(case(
        "softmax_cross_entropy_with_logits fixed labels, squared",
        |x| sq(Tensor::softmax_cross_entropy_with_logits(&labels_2x3(), &x[0])),
        &[(&[2, 3], Any)],
    ));
    // sparse xent: labels fixed per shape
    t.push(case(
        "sparse_softmax_cross_entropy_with_logits [4,3]",
        |x| {
            sq(Tensor::sparse_softmax_cross_entropy_with_logits(
                &idx(&[0, 2, 1, 2], &[4]),
                &x[0],
            ))
        },
        &[(&[4, 3], Any)],
    ));
    t.push(case(
        "sparse_softmax_cross_entropy_with_logits [2,2,3] i32",
        |x| {
            let l = Tensor::from_vec(vec![1i32, 0, 2, 2], &[2, 2]).unwrap();
            Tensor::sparse_softmax_cross_entropy_with_logits(&l, &x[0])
        },
        &[(&[2, 2, 3], Any)],
    ));
    t.push(case(
        "sparse_softmax_cross_entropy_with_logits [3] scalar label",
        |x| {
            sq(Tensor::sparse_softmax_cross_entropy_with_logits(
                &Tensor::scalar(1i64),
                &x[0],
            ))
        },
        &[(&[3], Any)],
    ));
    t.push(case(
        "sparse_softmax_cross_entropy_with_logits [0,4]",
        |x| Tensor::sparse_softmax_cross_entropy_with_logits(&idx(&[], &[0]), &x[0]),
        &[(&[0, 4], Any)],
    ));
    for s in [&[][..], &[5], &[2, 3], &[0, 2]] {
        t.push(case(
            format!("sigmoid_cross_entropy_with_logits {s:?}"),
            |x| sq(Tensor::sigmoid_cross_entropy_with_logits(&x[1], &x[0])),
            &[(s, Any), (s, Pos)],
        ));
    }
    for (s, b) in [
        (&[3usize][..], &[3usize][..]),
        (&[2, 3], &[3]),
        (&[2, 2, 3], &[3]),
        (&[0, 3], &[3]),
    ] {
        t.push(case(
            format!("bias_add {s:?} + {b:?}"),
            |x| sq(x[0].bias_add(&x[1])),
            &[(s, Any), (b, Any)],
        ));
    }
    // moments
    t.push(case(
        "moments mean [2,3] axis 1",
        |x| sq(Ok(x[0].moments(&[1], false)?.0)),
        &[(&[2, 3], Any)],
    ));
    t.push(case(
        "moments variance [2,3] axis 1",
        |x| Ok(x[0].moments(&[1], false)?.1),
        &[(&[2, 3], Any)],
    ));
    t.push(case(
        "moments variance [2,3,2] axes 0,2 keepdims",
        |x| Ok(x[0].moments(&[0, 2], true)?.1),
        &[(&[2, 3, 2], Any)],
    ));
    t.push(case(
        "moments variance [4] all",
        |x| Ok(x[0].moments(&[0], false)?.1),
        &[(&[4], Any)],
    ));
    // batch normalization: every argument differentiable
    t.push(case(
        "batch_normalization [4,3] params [3]",
        |x| Tensor::batch_normalization(&x[0], &x[1], &x[2], Some(&x[3]), Some(&x[4]), 1e-3),
        &[(&[4, 3], Any), (&[3], Any), (&[3], Pos), (&[3], Any), (&[3], Any)],
    ));
    t.push(case(
        "batch_normalization no offset/scale [2,3]",
        |x| Tensor::batch_normalization(&x[0], &x[1], &x[2], None, None, 0.0),
        &[(&[2, 3], Any), (&[1, 3], Any), (&[1, 3], Pos)],
    ));
    t.push(case(
        "batch_normalization with moments [5,2]",
        |x| {
            let (m, v) = x[0].moments(&[0], false)?;
            Tensor::batch_normalization(&x[0], &m, &v, None, Some(&x[1]), 1e-3)
        },
        &[(&[5, 2], Any), (&[2], Any)],
    ));
    t.push(case(
        "layer_normalization [3,4] axis -1",
        |x| x[0].layer_normalization(&[-1], Some(&x[1]), Some(&x[2]), 1e-3),
        &[(&[3, 4], Any), (&[4], Any), (&[4], Any)],
    ));
    t.push(case(
        "layer_normalization [2,3,2] axes 1,2 no params",
        |x| x[0].layer_normalization(&[1, 2], None, None, 1e-3),
        &[(&[2, 3, 2], Any)],
    ));
    // (the fused op: parameters of the normalised shape, broadcast within
    // it, with a leading unit dim; then calls only the composite covers)
    t.push(case(
        "layer_normalization [2,3,4] axes 1,2 gamma [3,4] beta [4]",
        |x| x[0].layer_normalization(&[1, 2], Some(&x[1]), Some(&x[2]), 1e-3),
        &[(&[2, 3, 4], Any), (&[3, 4], Any), (&[4], Any)],
    ));
    t.push(case(
        "layer_normalization [4,5] gamma [1,5]",
        |x| x[0].layer_normalization(&[-1], Some(&x[1]), None, 1e-3),
        &[(&[4, 5], Any), (&[1, 5], Any)],
    ));
    t.push(case(
        "layer_normalization [4,3] axis 0 beta [4,1] (composite)",
        |x| x[0].layer_normalization(&[0], None, Some(&x[1]), 1e-3),
        &[(&[4, 3], Any), (&[4, 1], Any)],
    ));
    // the fused LSTM step (f64 on the CPU: the fused op; its second order
    // goes through the composite VJP), both outputs, then each alone
    t.push(case(
        "lstm_cell [3,8] c [3,2] h and c'",
        |x| {
            let (h, c1) = Tensor::lstm_cell(&x[0], &x[1])?;
            Tensor::concat(&[&h, &c1], -1)
        },
        &[(&[3, 8], Any), (&[3, 2], Any)],
    ));
    t.push(case(
        "lstm_cell [2,2,12] c [2,2,3] h only",
        |x| Ok(Tensor::lstm_cell(&x[0], &x[1])?.0),
        &[(&[2, 2, 12], Any), (&[2, 2, 3], Any)],
    ));
    t.push(case(
        "lstm_cell [4] c [1] c' only",
        |x| Ok(Tensor::lstm_cell(&x[0], &x[1])?.1),
        &[(&[4], Any), (&[1], Any)],
    ));
    // the fused LSTM recurrence (f64 on the CPU: the fused ops; the
    // second order through the backward op's hand-written VJP): every
    // step's h and c, then the last h alone
    t.push(case(
        "lstm_sequence xw [3,2,8] w [2,8] h0 c0 [2,2] all h and c",
        |x| {
            let (hs, cs) = Tensor::lstm_sequence(&x[0], &x[1], &x[2], &x[3])?;
            Tensor::concat(&[&hs, &cs], -1)
        },
        &[(&[3, 2, 8], Any), (&[2, 8], Any), (&[2, 2], Any), (&[2, 2], Any)],
    ));
    t.push(case(
        "lstm_sequence xw [2,1,4] w [1,4] last h",
        |x| Tensor::lstm_sequence(&x[0], &x[1], &x[2], &x[3])?.0.narrow(0, 1, 1),
        &[(&[2, 1, 4], Any), (&[1, 4], Any), (&[1, 1], Any), (&[1, 1], Any)],
    ));
    // the fused GRU recurrence (as the LSTM's): every step's h, then the
    // last h alone
    t.push(case(
        "gru_sequence xw [3,2,6] r [2,6] b [6] h0 [2,2] all h",
        |x| Tensor::gru_sequence(&x[0], &x[1], &x[2], &x[3]),
        &[(&[3, 2, 6], Any), (&[2, 6], Any), (&[6], Any), (&[2, 2], Any)],
    ));
    t.push(case(
        "gru_sequence xw [2,1,3] r [1,3] b [3] h0 [1,1] last h",
        |x| Tensor::gru_sequence(&x[0], &x[1], &x[2], &x[3])?.narrow(0, 1, 1),
        &[(&[2, 1, 3], Any), (&[1, 3], Any), (&[3], Any), (&[1, 1], Any)],
    ));
    t.push(case(
        "rms_normalization [3,4] axis -1 scale [4]",
        |x| x[0].rms_normalization(&[-1], Some(&x[1]), 1e-3),
        &[(&[3, 4], Any), (&[4], Any)],
    ));
    t.push(case(
        "rms_normalization [2,3,2] axes 0,2 no scale",
        |x| x[0].rms_normalization(&[0, 2], None, 0.0),
        &[(&[2, 3, 2], Pos)],
    ));
    t.push(case(
        "l2_normalize [3,4] axis -1",
        |x| x[0].l2_normalize(&[-1], 1e-12),
        &[(&[3, 4], Any)],
    ));
    t.push(case(
        "l2_normalize [2,3] axes 0,1 epsilon above the norm",
        |x| x[0].l2_normalize(&[0, 1], 1e3),
        &[(&[2, 3], Any)],
    ));
    t.push(case(
        "weighted_cross_entropy_with_logits [5] pos_weight 3",
        |x| Tensor::weighted_cross_entropy_with_logits(&x[0], &x[1], 3.0),
        &[(&[5], Pos), (&[5], Any)],
    ));
    t.push(case(
        "log_poisson_loss [6] full",
        |x| Tensor::log_poisson_loss(&x[0].add_scalar(1.0)?, &x[1], true),
        &[(&[6], Pos), (&[6], Any)],
    ));
    // grouped-query attention: k and v summed over each group's copies
    t.push(case(
        "grouped_query_attention [1,4,3,2] x [1,2,5,2] causal",
        |x| sq(x[0].grouped_query_attention(&x[1], &x[2], None, true, None, None)),
        &[(&[1, 4, 3, 2], Any), (&[1, 2, 5, 2], Any), (&[1, 2, 5, 3], Any)],
    ));
    // rotary position embedding: a rotation (linear in x)
    t.push(case(
        "rotary_embedding [2,3,4] from 2",
        |x| {
            sq(RotaryEmbedding::builder()
                .max_wavelength(50.0)
                .build()?
                .call_at(&x[0], 2))
        },
        &[(&[2, 3, 4], Any)],
    ));
    // dropout (fixed mask), l2_loss, embedding_lookup
    t.push(case(
        "dropout [4,5] rate 0.3",
        |x| sq(x[0].dropout(0.3, 9)),
        &[(&[4, 5], Any)],
    ));
    t.push(case("dropout [0,2]", |x| sq(x[0].dropout(0.5, 9)), &[(&[0, 2], Any)]));
    for s in SHAPES {
        t.push(case(format!("l2_loss {s:?}"), |x| sq(x[0].l2_loss()), &[(s, Any)]));
    }
    t.push(case(
        "embedding_lookup [4,2] ids [3]",
        |x| sq(x[0].embedding_lookup(&idx(&[3, 0, 3], &[3]))),
        &[(&[4, 2], Any)],
    ));
    t.push(case(
        "embedding_lookup [3] ids [2,2]",
        |x| sq(x[0].embedding_lookup(&idx(&[2, 0, 1, 2], &[2, 2]))),
        &[(&[3], Any)],
    ));
    t
}

#[test]
fn gradcheck_nn_table() {
    run_table(
        &table(),
        &[
            "softmax ",
            "log_softmax",
            "softmax_cross_entropy_with_logits",
            "sparse_softmax_cross_entropy_with_logits",
            "sigmoid_cross_entropy_with_logits",
            "bias_add",
            "moments mean",
            "moments variance",
            "batch_normalization",
            "layer_normalization",
            "lstm_cell",
            "lstm_sequence",
            "gru_sequence",
            "rms_normalization",
            "grouped_query_attention",
            "rotary_embedding",
            "l2_normalize",
            "weighted_cross_entropy_with_logits",
            "log_poisson_loss",
            "dropout",
            "l2_loss",
            "embedding_lookup",
        ],
        40,
        400,
    );
}

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{a:?} vs {b:?}");
    }
}

#[test]
fn softmax_exact_values() -> Result<()> {
    // softmax([0, ln 2, ln 5]) = [1, 2, 5] / 8
    let x = Tensor::vector(&[0.0f64, 2f64.ln(), 5f64.ln()]);
    close(&x.softmax(0)?.to_vec::<f64>()?, &[0.125, 0.25, 0.625], 1e-15);
    close(
        &x.log_softmax(0)?.to_vec::<f64>()?,
        &[-(8f64.ln()), (0.25f64).ln(), (0.625f64).ln()],
        1e-15,
    );
    // huge logits do not overflow; axis 0 of a [2, 2]
    let big = Tensor::from_vec(vec![1000.0f32, 0.0, 1000.0, 0.0], &[2, 2])?;
    assert_eq!(big.softmax(0)?.to_vec::<f32>()?, vec![0.5; 4]);
    assert_eq!(big.softmax(1)?.to_vec::<f32>()?, vec![1.0, 0.0, 1.0, 0.0]);
    let ls = big.log_softmax(1)?.to_vec::<f32>()?;
    assert_eq!(ls, vec![0.0, -1000.0, 0.0, -1000.0]);
    // gradient of softmax(x)[0]: y0 (e0 - y)
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        x.softmax(0)?.mul(&Tensor::vector(&[1.0f64, 0.0, 0.0]))?.sum_all()
    })?;
    let g = tape.gradient(&y, &x)?.unwrap();
    close(
        &g.to_vec::<f64>()?,
        &[0.125 * 0.875, -0.125 * 0.25, -0.125 * 0.625],
        1e-15,
    );
    Ok(())
}

#[test]
fn cross_entropy_exact_values() -> Result<()> {
    // logits [0, ln 3]: softmax [1/4, 3/4]
    let logits = Tensor::from_vec(vec![0.0f64, 3f64.ln(), 0.0, 3f64.ln()], &[2, 2])?;
    let sparse = Tensor::sparse_softmax_cross_entropy_with_logits(&Tensor::vector(&[0i32, 1]), &logits)?;
    close(&sparse.to_vec::<f64>()?, &[4f64.ln(), (4.0f64 / 3.0).ln()], 1e-14);
    let dense_labels = Tensor::from_vec(vec![1.0f64, 0.0, 0.5, 0.5], &[2, 2])?;
    let dense = Tensor::softmax_cross_entropy_with_logits(&dense_labels, &logits)?;
    close(
        &dense.to_vec::<f64>()?,
        &[4f64.ln(), 0.5 * 4f64.ln() + 0.5 * (4.0f64 / 3.0).ln()],
        1e-14,
    );
    // d loss0 / d logits = softmax - onehot = [-3/4, 3/4]; d/dlabels = -log_softmax
    let tape = GradientTape::persistent();
    let (ls, ld) = tape.record(|| {
        tape.watch(&logits);
        tape.watch(&dense_labels);
        let ls = Tensor::sparse_softmax_cross_entropy_with_logits(&Tensor::vector(&[0i64, 1]), &logits)?.sum_all()?;
        let ld = Tensor::softmax_cross_entropy_with_logits(&dense_labels, &logits)?.sum_all()?;
        Ok((ls, ld))
    })?;
    let g = tape.gradient(&ls, &logits)?.unwrap();
    close(&g.to_vec::<f64>()?, &[-0.75, 0.75, 0.25, -0.25], 1e-15);
    let (gx, gl) = tape.gradient(&ld, &(logits.clone(), dense_labels.clone()))?;
    close(&gx.unwrap().to_vec::<f64>()?, &[-0.75, 0.75, -0.25, 0.25], 1e-15);
    close(
        &gl.unwrap().to_vec::<f64>()?,
        &[4f64.ln(), (4.0f64 / 3.0).ln(), 4f64.ln(), (4.0f64 / 3.0).ln()],
        1e-15,
    );
    // sigmoid xent at 0 (its kink-free derivative sigmoid(0) - z) and at large |x|
    let x = Tensor::vector(&[0.0f64, 100.0, -100.0]);
    let z = Tensor::vector(&[0.25f64, 1.0, 1.0]);
    let tape = GradientTape::new();
    let l = tape.record(|| {
        tape.watch(&x);
        Tensor::sigmoid_cross_entropy_with_logits(&z, &x)?.sum_all()
    })?;
    let g = tape.gradient(&l, &x)?.unwrap().to_vec::<f64>()?;
    close(&g, &[0.25, 0.0, -1.0], 1e-15);
    let v = Tensor::sigmoid_cross_entropy_with_logits(&z, &x)?.to_vec::<f64>()?;
    close(&v, &[2f64.ln(), 0.0, 100.0], 1e-12);
    Ok(())
}

#[test]
fn normalisation_exact_values() -> Result<()> {
    let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 5.0, 7.0, 9.0], &[2, 3])?;
    let (m, v) = x.moments(&[0], false)?;
    assert_eq!(m.to_vec::<f64>()?, vec![3.0, 4.5, 6.0]);
    assert_eq!(v.to_vec::<f64>()?, vec![4.0, 6.25, 9.0]);
    let (m, v) = x.moments(&[1], true)?;
    assert_eq!(m.shape(), &[2, 1]);
    close(&m.to_vec::<f64>()?, &[2.0, 7.0], 1e-15);
    close(&v.to_vec::<f64>()?, &[2.0 / 3.0, 8.0 / 3.0], 1e-15);
    // (x - 3) / sqrt(4) * 2 + 1 over column 0
    let y = Tensor::batch_normalization(
        &x,
        &Tensor::vector(&[3.0f64, 0.0, 0.0]),
        &Tensor::vector(&[4.0f64, 1.0, 1.0]),
        Some(&Tensor::vector(&[1.0f64, 0.0, 0.0])),
        Some(&Tensor::vector(&[2.0f64, 1.0, 1.0])),
        0.0,
    )?;
    assert_eq!(y.to_vec::<f64>()?, vec![-1.0, 2.0, 3.0, 3.0, 7.0, 9.0]);
    let ln = x.layer_normalization(&[1], None, None, 0.0)?.to_vec::<f64>()?;
    let s = 1.5f64.sqrt();
    close(&ln, &[-s, 0.0, s, -s, 0.0, s], 1e-14);
    assert_eq!(Tensor::vector(&[3.0f64, 4.0]).l2_loss()?.to_scalar::<f64>()?, 12.5);
    Ok(())
}

#[test]
fn dropout_keeps_expectation_and_is_reproducible() -> Result<()> {
    let x = Tensor::ones(&[100_000], DType::F64);
    let y = x.dropout(0.25, 5)?.to_vec::<f64>()?;
    let kept = y.iter().filter(|&&v| v != 0.0).count() as f64 / 1e5;
    // binomial sd = sqrt(0.25 * 0.75 / 1e5) ~ 0.00137; allow 5 sd
    assert!((kept - 0.75).abs() < 0.007, "kept {kept}");
    assert!(y.iter().all(|&v| v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-15));
    assert_eq!(x.dropout(0.25, 5)?.to_vec::<f64>()?, y);
    assert_ne!(x.dropout(0.25, 6)?.to_vec::<f64>()?, y);
    assert_eq!(x.dropout(0.0, 5)?.to_vec::<f64>()?, vec![1.0; 100_000]);
    Ok(())
}

#[test]
fn nn_errors_name_op_and_shapes() {
    let x = Tensor::zeros(&[2, 3], DType::F32);
    let msg = |e: Error| e.to_string();
    // sparse xent: out-of-range label names the op and the value
    let e = Tensor::sparse_softmax_cross_entropy_with_logits(&Tensor::vector(&[0i64, 3]), &x).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { index: 3, dim: 3, .. }), "{e:?}");
    assert!(msg(e).contains("sparse_softmax_cross_entropy_with_logits"));
    let e = Tensor::sparse_softmax_cross_entropy_with_logits(&Tensor::vector(&[-1i32, 0]), &x).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { index: -1, .. }), "{e:?}");
    let e = Tensor::sparse_softmax_cross_entropy_with_logits(&Tensor::vector(&[0i64]), &x).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { lhs, rhs, .. } if lhs == vec![1] && rhs == vec![2, 3]));
    let e = Tensor::sparse_softmax_cross_entropy_with_logits(&Tensor::vector(&[0.0f32, 1.0]), &x).unwrap_err();
    assert!(matches!(e, Error::UnsupportedDType { .. }), "{e:?}");
    // dense / sigmoid xent: shape and dtype mismatches
    let e = Tensor::softmax_cross_entropy_with_logits(&Tensor::zeros(&[2, 2], DType::F32), &x).unwrap_err();
    assert!(msg(e).contains("softmax_cross_entropy_with_logits: incompatible shapes [2, 2] and [2, 3]"));
    let e = Tensor::sigmoid_cross_entropy_with_logits(&Tensor::zeros(&[2, 3], DType::F64), &x).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e:?}");
    // softmax: bad axis, integer input
    assert!(matches!(
        x.softmax(2).unwrap_err(),
        Error::BadAxis { op: "softmax", .. }
    ));
    assert!(matches!(
        Tensor::zeros(&[3], DType::I32).log_softmax(0).unwrap_err(),
        Error::UnsupportedDType { op: "log_softmax", .. }
    ));
    // bias_add: length mismatch
    let e = x.bias_add(&Tensor::zeros(&[2], DType::F32)).unwrap_err();
    assert_eq!(msg(e), "bias_add: incompatible shapes [2, 3] and [2]");
    // normalisation parameters that would broadcast beyond x
    let e = Tensor::batch_normalization(&x, &Tensor::zeros(&[4, 3], DType::F32), &x, None, None, 0.0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                op: "batch_normalization",
                ..
            }
        ),
        "{e:?}"
    );
    let e = x
        .layer_normalization(&[1], Some(&Tensor::zeros(&[2], DType::F32)), None, 1e-3)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                op: "layer_normalization",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(matches!(x.moments(&[5], false).unwrap_err(), Error::BadAxis { .. }));
    // dropout rate outside [0, 1)
    for r in [1.0, -0.1, f64::NAN, 2.0] {
        let e = x.dropout(r, 0).unwrap_err();
        assert!(msg(e).starts_with("dropout"));
    }
    assert!(Tensor::zeros(&[2], DType::I64).dropout(0.5, 0).is_err());
    // embedding ids out of range
    assert!(matches!(
        x.embedding_lookup(&Tensor::vector(&[2i64])).unwrap_err(),
        Error::IndexOutOfRange { index: 2, .. }
    ));
}
