//! Keras's `Attention` (dot and concat scores, with and without the scale)
//! and `AdditiveAttention` against Keras 3.15.1's layers with the same
//! weights, in f64 and f32: unmasked, with the query's and value's masks,
//! causal with the attention weights; a separate key; and the gradients of
//! the masked additive and concat layers against `tf.GradientTape`'s. All
//! printed by `tests/reference/keras_dot_attention.py` (inputs
//! `fill(shape, k)`, every scalar scale 0.7, the additive scale
//! `fill([4], 2)`, the concat weight 1.3). Then traced against eager,
//! finite differences, dropout, and the errors.

use gradtape::nn::{AdditiveAttention, Attention, AttentionArgs, Layer, Module, ScoreMode};
use gradtape::{check_gradients, function, CheckOptions, DType, GradientTape, Result, Rng, SourceRef, Tensor};

#[path = "../reference/keras_dot_attention.rs"]
mod keras;
use keras::*;

use super::keras_util::{assert_close, fill, weighted};

/// The script's layers, by name, their weights set as there.
#[derive(Clone, Copy)]
enum Which {
    Dot,
    DotScaled,
    Concat,
    Additive,
    AdditiveUnscaled,
}

/// One of the script's layers as a closure over its calls.
struct Net {
    attention: Option<Attention>,
    additive: Option<AdditiveAttention>,
}

impl Net {
    fn new(which: Which, dtype: DType) -> Result<Net> {
        let mut rng = Rng::new(0);
        let (attention, additive) = match which {
            Which::Dot => (Some(Attention::builder().dtype(dtype).build(&mut rng)?), None),
            Which::DotScaled => (
                Some(Attention::builder().use_scale(true).dtype(dtype).build(&mut rng)?),
                None,
            ),
            Which::Concat => {
                let b = Attention::builder().use_scale(true).score_mode(ScoreMode::Concat);
                (Some(b.dtype(dtype).build(&mut rng)?), None)
            }
            Which::Additive => (None, Some(AdditiveAttention::builder(4).dtype(dtype).build(&mut rng)?)),
            Which::AdditiveUnscaled => {
                let b = AdditiveAttention::builder(4).use_scale(false);
                (None, Some(b.dtype(dtype).build(&mut rng)?))
            }
        };
        let net = Net { attention, additive };
        for v in net.variables() {
            let value = match (v.name().ends_with("/scale"), v.shape().is_empty()) {
                (true, true) => Tensor::full(&[], 0.7, dtype),
                (true, false) => fill(&v.shape(), 2.0, dtype),
                (false, _) => Tensor::full(&[], 1.3, dtype),
            };
            v.assign(&value)?;
        }
        Ok(net)
    }

    fn variables(&self) -> Vec<gradtape::Variable> {
        match (&self.attention, &self.additive) {
            (Some(a), _) => a.variables(),
            (_, Some(a)) => a.variables(),
            _ => unreachable!(),
        }
    }

    fn call(&self, q: &Tensor, v: &Tensor, args: AttentionArgs<'_>) -> Result<(Tensor, Tensor)> {
        match (&self.attention, &self.additive) {
            (Some(a), _) => a.call_with_scores(q, v, args),
            (_, Some(a)) => a.call_with_scores(q, v, args),
            _ => unreachable!(),
        }
    }
}

/// The script's query, value and key, and masks.
fn inputs(dtype: DType) -> [Tensor; 5] {
    let qm = Tensor::from_vec(vec![true, true, false, true, true, true], &[2, 3]).unwrap();
    let vm = [true, true, true, false, false, true, false, true, true, true];
    let vm = Tensor::from_vec(vm.to_vec(), &[2, 5]).unwrap();
    [
        fill(&[2, 3, 4], 0.1, dtype),
        fill(&[2, 5, 6], 0.2, dtype),
        fill(&[2, 5, 4], 0.4, dtype),
        qm,
        vm,
    ]
}

#[test]
fn attention_layers_match_keras_masked_causal_and_their_weights() -> Result<()> {
    type Want<'a> = [&'a [f64]; 4];
    type Row<'a> = (&'a str, Which, Want<'a>, Want<'a>);
    let table: [Row; 5] = [
        (
            "dot",
            Which::Dot,
            [&DOT_F64, &DOT_MASKED_F64, &DOT_CAUSAL_F64, &DOT_CAUSAL_SCORES_F64],
            [&DOT_F32, &DOT_MASKED_F32, &DOT_CAUSAL_F32, &DOT_CAUSAL_SCORES_F32],
        ),
        (
            "dot scaled",
            Which::DotScaled,
            [
                &DOT_SCALED_F64,
                &DOT_SCALED_MASKED_F64,
                &DOT_SCALED_CAUSAL_F64,
                &DOT_SCALED_CAUSAL_SCORES_F64,
            ],
            [
                &DOT_SCALED_F32,
                &DOT_SCALED_MASKED_F32,
                &DOT_SCALED_CAUSAL_F32,
                &DOT_SCALED_CAUSAL_SCORES_F32,
            ],
        ),
        (
            "concat",
            Which::Concat,
            [
                &CONCAT_F64,
                &CONCAT_MASKED_F64,
                &CONCAT_CAUSAL_F64,
                &CONCAT_CAUSAL_SCORES_F64,
            ],
            [
                &CONCAT_F32,
                &CONCAT_MASKED_F32,
                &CONCAT_CAUSAL_F32,
                &CONCAT_CAUSAL_SCORES_F32,
            ],
        ),
        (
            "additive",
            Which::Additive,
            [
                &ADDITIVE_F64,
                &ADDITIVE_MASKED_F64,
                &ADDITIVE_CAUSAL_F64,
                &ADDITIVE_CAUSAL_SCORES_F64,
            ],
            [
                &ADDITIVE_F32,
                &ADDITIVE_MASKED_F32,
                &ADDITIVE_CAUSAL_F32,
                &ADDITIVE_CAUSAL_SCORES_F32,
            ],
        ),
        (
            "additive unscaled",
            Which::AdditiveUnscaled,
            [
                &ADDITIVE_UNSCALED_F64,
                &ADDITIVE_UNSCALED_MASKED_F64,
                &ADDITIVE_UNSCALED_CAUSAL_F64,
                &ADDITIVE_UNSCALED_CAUSAL_SCORES_F64,
            ],
            [
                &ADDITIVE_UNSCALED_F32,
                &ADDITIVE_UNSCALED_MASKED_F32,
                &ADDITIVE_UNSCALED_CAUSAL_F32,
                &ADDITIVE_UNSCALED_CAUSAL_SCORES_F32,
            ],
        ),
    ];
    for (name, which, want64, want32) in table {
        for (dtype, tol, want) in [(DType::F64, 1e-12, want64), (DType::F32, 2e-6, want32)] {
            let net = Net::new(which, dtype)?;
            let [q, v, k, qm, vm] = inputs(dtype);
            let plain = AttentionArgs::new().key(&k);
            assert_close(&format!("{name} {dtype}"), &net.call(&q, &v, plain)?.0, want[0], tol);
            let masked = plain.query_mask(&qm).value_mask(&vm);
            assert_close(
                &format!("{name} masked {dtype}"),
                &net.call(&q, &v, masked)?.0,
                want[1],
                tol,
            );
            let (o, w) = net.call(&q, &v, masked.use_causal_mask(true))?;
            assert_close(&format!("{name} causal {dtype}"), &o, want[2], tol);
            assert_close(&format!("{name} causal weights {dtype}"), &w, want[3], tol);
        }
    }
    // self-attention without a key (dot, scaled)
    let net = Net::new(Which::DotScaled, DType::F64)?;
    let q = fill(&[2, 3, 4], 0.1, DType::F64);
    assert_close(
        "self",
        &net.call(&q, &q, AttentionArgs::new())?.0,
        &DOT_SCALED_SELF_F64,
        1e-12,
    );
    assert_eq!(
        net.attention.as_ref().unwrap().call(&q)?.to_vec_f64(),
        net.call(&q, &q, AttentionArgs::new())?.0.to_vec_f64()
    );
    Ok(())
}

#[test]
fn gradients_match_tensorflow_and_finite_differences() -> Result<()> {
    let additive: [&[f64]; 5] = [
        &ADDITIVE_GRAD_QUERY,
        &ADDITIVE_GRAD_VALUE,
        &ADDITIVE_GRAD_KEY,
        &ADDITIVE_GRAD_SCALE,
        &[],
    ];
    let concat: [&[f64]; 5] = [
        &CONCAT_GRAD_QUERY,
        &CONCAT_GRAD_VALUE,
        &CONCAT_GRAD_KEY,
        &CONCAT_GRAD_SCALE,
        &CONCAT_GRAD_CONCAT_SCORE_WEIGHT,
    ];
    for (name, which, loss, want) in [
        ("additive", Which::Additive, &ADDITIVE_LOSS, additive),
        ("concat", Which::Concat, &CONCAT_LOSS, concat),
    ] {
        let net = Net::new(which, DType::F64)?;
        let [q, v, k, qm, vm] = inputs(DType::F64);
        let tape = GradientTape::new();
        let l = tape.record(|| {
            for x in [&q, &v, &k] {
                tape.watch(x);
            }
            weighted(
                &net.call(&q, &v, AttentionArgs::new().key(&k).query_mask(&qm).value_mask(&vm))?
                    .0,
            )
        })?;
        assert_close(&format!("{name} loss"), &l, loss, 1e-12);
        let vars = net.variables();
        let mut sources: Vec<SourceRef> = [&q, &v, &k].into_iter().map(SourceRef::from).collect();
        sources.extend(vars.iter().map(SourceRef::from));
        let grads = tape.gradient(&l, &sources[..])?;
        assert_eq!(grads.len(), 3 + vars.len());
        for (i, g) in grads.iter().enumerate() {
            assert_close(
                &format!("{name} gradient {i}"),
                g.as_ref().expect("a gradient"),
                want[i],
                1e-10,
            );
        }
        // first and second derivatives in the inputs
        let f = |t: &[Tensor]| {
            weighted(
                &net.call(
                    &t[0],
                    &t[1],
                    AttentionArgs::new().key(&t[2]).query_mask(&qm).value_mask(&vm),
                )?
                .0,
            )
        };
        let report = check_gradients(f, &[q, v, k], &CheckOptions::default())?;
        assert!(report.compared > 0, "{report:?}");
    }
    Ok(())
}

#[test]
fn traced_attention_equals_eager_and_dropout_drops_weights() -> Result<()> {
    let [q, v, k, qm, vm] = inputs(DType::F32);
    let eager = Net::new(Which::Additive, DType::F32)?
        .call(
            &q,
            &v,
            AttentionArgs::new()
                .key(&k)
                .value_mask(&vm)
                .query_mask(&qm)
                .use_causal_mask(true),
        )?
        .0;
    let net = Net::new(Which::Additive, DType::F32)?;
    let traced = function(move |(q, v, k): &(Tensor, Tensor, Tensor)| {
        Ok(net
            .call(
                q,
                v,
                AttentionArgs::new()
                    .key(k)
                    .value_mask(&vm)
                    .query_mask(&qm)
                    .use_causal_mask(true),
            )?
            .0)
    });
    assert_eq!(
        traced.call(&(q.clone(), v.clone(), k.clone()))?.to_vec::<f32>()?,
        eager.to_vec::<f32>()?
    );
    // dropout: while training some weights of a row are zero and the rest
    // scaled by 1 / (1 - rate); at inference none is dropped
    let att = Attention::builder()
        .dropout(0.5)
        .dtype(DType::F64)
        .build(&mut Rng::new(3))?;
    let q = fill(&[4, 8, 4], 0.3, DType::F64);
    let ones = Tensor::ones(&[4, 8, 1], DType::F64);
    // the value of ones: each output is the sum of its row's weights
    let (out, w) = att.call_with_scores(&q, &ones, AttentionArgs::new().key(&q).training(true))?;
    let (sums, w) = (out.to_vec_f64(), w.to_vec_f64());
    assert!(w.chunks(8).all(|r| (r.iter().sum::<f64>() - 1.0).abs() < 1e-12));
    let dropped = sums.iter().filter(|s| (**s - 1.0).abs() > 1e-9).count();
    assert!(dropped > 8, "{dropped} of 32 rows changed by dropout");
    let (out, _) = att.call_with_scores(&q, &ones, AttentionArgs::new().key(&q))?;
    assert!(out.to_vec_f64().iter().all(|s| (s - 1.0).abs() < 1e-12));
    Ok(())
}

#[test]
fn bad_inputs_are_errors_naming_the_layer() -> Result<()> {
    let [q, v, k, _, vm] = inputs(DType::F32);
    let att = Attention::builder().build(&mut Rng::new(0))?;
    let add = AdditiveAttention::builder(3).build(&mut Rng::new(0))?;
    // the key's features must be the query's; the additive scale's too
    let err = att.call_with(&q, &v, AttentionArgs::new()).unwrap_err().to_string();
    assert!(err.contains("Attention") && err.contains("[2, 5, 6]"), "{err}");
    let err = add
        .call_with(&q, &v, AttentionArgs::new().key(&k))
        .unwrap_err()
        .to_string();
    assert!(err.contains("AdditiveAttention"), "{err}");
    // masks of the wrong shape, inputs of the wrong dtype
    let err = att
        .call_with(&q, &v, AttentionArgs::new().key(&k).query_mask(&vm))
        .unwrap_err()
        .to_string();
    assert!(err.contains("query_mask") && err.contains("[2, 3]"), "{err}");
    let err = att
        .call_with(&q, &v, AttentionArgs::new().key(&k).value_mask(&vm.narrow(1, 0, 4)?))
        .unwrap_err()
        .to_string();
    assert!(err.contains("Attention") && err.contains("value_mask"), "{err}");
    assert!(att
        .call_with(&q.cast(DType::F64)?, &v, AttentionArgs::new().key(&k))
        .is_err());
    assert!(Attention::builder().dtype(DType::I32).build(&mut Rng::new(0)).is_err());
    Ok(())
}
