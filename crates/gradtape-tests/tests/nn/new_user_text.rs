//! A text classifier a new user would write, against TensorFlow 2.21 /
//! Keras 3.15.1 in float64 (`tests/reference/new_user_models2.py`, numbers
//! in `tests/data/new_user_models2.txt`): Embedding(12, 4, mask_zero) ->
//! Bidirectional(LSTM(3)) given the embedding's mask, beside Conv1D(5, 3,
//! same, tanh) over the embeddings -> global max pooling; concatenated,
//! Dense(11->3) logits, sparse softmax cross-entropy; Adam, two steps, with
//! repeated token ids (the embedding's sparse gradient summed per row).
//! Eagerly and as a traced `function` called twice, compared at 1e-12
//! relative (see `new_user_util.rs`).

use std::sync::{Arc, Mutex};

use gradtape::nn::{
    losses, Activation, Bidirectional, Conv1D, Dense, Embedding, GlobalPooling, Layer, Merge, PoolKind, SequenceLayer,
    LSTM,
};
use gradtape::optim::{Adam, Optimizer};
use gradtape::{function, DType, GradientTape, Padding, Result, Rng, Tensor, Variable};

use super::new_user_util::{adam, dense, eager_vs_traced, names, print_times, set_weights, Check};

struct Text {
    emb: Embedding,
    bi: Bidirectional,
    conv: Conv1D,
    pool: GlobalPooling,
    head: Dense,
}

impl Text {
    fn new() -> Result<Text> {
        let rng = &mut Rng::new(0);
        let lstm = |rng: &mut Rng| LSTM::builder(4, 3).dtype(DType::F64).build(rng);
        let m = Text {
            emb: Embedding::builder(12, 4).mask_zero(true).dtype(DType::F64).build(rng)?,
            bi: Bidirectional::new(lstm(rng)?, lstm(rng)?, Merge::Concat),
            conv: Conv1D::builder(4, 5, 3)
                .padding(Padding::Same)
                .activation(Activation::Tanh)
                .dtype(DType::F64)
                .build(rng)?,
            pool: GlobalPooling::new(PoolKind::Max, 1)?,
            head: dense(11, 3, None, true)?,
        };
        set_weights(&m.vars(), 110.0);
        Ok(m)
    }

    fn vars(&self) -> Vec<Variable> {
        let layers: [&dyn Layer; 4] = [&self.emb, &self.bi, &self.conv, &self.head];
        layers.iter().flat_map(|l| l.trainable_variables()).collect()
    }

    /// The logits and the loss.
    fn forward(&self, ids: &Tensor, y: &Tensor) -> Result<[Tensor; 2]> {
        let e = self.emb.call(ids)?;
        let mask = self.emb.compute_mask(ids)?;
        let r = self.bi.forward_masked(&e, mask.as_ref(), true)?;
        let c = self.pool.call(&self.conv.call(&e)?)?;
        let logits = self.head.call(&Tensor::concat(&[&r, &c], 1)?)?;
        let loss = losses::sparse_categorical_crossentropy(y, &logits, true)?;
        Ok([logits, loss])
    }
}

/// The logits, the loss, the gradients (the embedding's made dense, to
/// compare), one Adam step with the gradients as they come (sparse).
fn text_step(m: &Text, opt: &mut Adam, ids: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
    let vars = m.vars();
    let tape = GradientTape::new();
    let out = tape.record(|| m.forward(ids, y))?;
    let grads = tape.sparse_gradient(&out[1], &vars)?;
    let dense: Vec<Tensor> = grads
        .iter()
        .map(|g| g.as_ref().expect("every weight has a gradient").to_dense())
        .collect::<Result<_>>()?;
    opt.apply_gradients(grads.into_iter().zip(&vars))?;
    Ok(out.into_iter().chain(dense).collect())
}

fn data() -> Result<(Tensor, Tensor)> {
    let ids: Vec<i64> = vec![
        3, 7, 3, 1, 0, 0, 0, //
        5, 5, 2, 9, 11, 4, 0, //
        8, 1, 0, 0, 0, 0, 0, //
        2, 6, 10, 6, 7, 3, 5,
    ];
    Ok((Tensor::from_vec(ids, &[4, 7])?, Tensor::vector(&[2i64, 0, 1, 2])))
}

#[test]
fn text_classifier_matches_tensorflow() -> Result<()> {
    let (ids, y) = data()?;
    let mut check = Check::new();
    for traced in [false, true] {
        let what = if traced { "traced" } else { "eager" };
        let m = Arc::new(Text::new()?);
        let opt = Arc::new(Mutex::new(adam()));
        let f = {
            let (m, opt) = (m.clone(), opt.clone());
            function(move |(ids, y): &(Tensor, Tensor)| text_step(&m, &mut opt.lock().unwrap(), ids, y))
        };
        for s in 1..=2 {
            let got = if traced {
                f.call(&(ids.clone(), y.clone()))?
            } else {
                text_step(&m, &mut opt.lock().unwrap(), &ids, &y)?
            };
            check.all(
                what,
                &names(&format!("text{s}"), &["logits", "loss"], &[("grad", 11)]),
                &got,
            );
        }
        if traced {
            assert_eq!(f.trace_count(), 1);
        }
        check.vars(what, "text_weight", &m.vars());
    }
    check.finish("text", 900);
    Ok(())
}

/// Eager and traced time per training step (a release-mode measurement,
/// printed; run with `--ignored --nocapture`).
#[test]
#[ignore]
fn text_classifier_eager_vs_traced_time() -> Result<()> {
    let data = data()?;
    let (m, mut o) = (Text::new()?, adam());
    let (m2, o2) = (Arc::new(Text::new()?), Arc::new(Mutex::new(adam())));
    let f = function(move |(x, y): &(Tensor, Tensor)| text_step(&m2, &mut o2.lock().unwrap(), x, y));
    let (eager, traced) = eager_vs_traced(
        100,
        || text_step(&m, &mut o, &data.0, &data.1).map(drop),
        || f.call(&data).map(drop),
    );
    print_times(
        "text classifier",
        "batch 4, 7 tokens, BiLSTM 3 + Conv1D 5",
        eager,
        traced,
    );
    Ok(())
}
