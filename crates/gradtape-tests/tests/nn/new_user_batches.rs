//! A new user's traced training step fed batches of varying size (the last
//! batch of an epoch is smaller) and, for a text model, of varying sequence
//! length: with a plain `function` (a trace per shape) and with an
//! `input_signature` whose batch (and time) dims are `None` (one graph
//! where the numbers do not depend on the size, a graph per size where they
//! do: a mean over the batch, batch normalisation's statistics). Every
//! step's loss and every weight afterwards must be what the same step gives
//! eagerly, from the same weights, to 1e-12 relative (float64).

use std::sync::{Arc, Mutex};

use gradtape::nn::{
    losses, Activation, BatchNorm, Dense, Embedding, GlobalPooling, Layer, Module, PoolKind, SequenceLayer, GRU,
};
use gradtape::optim::{Adam, Optimizer};
use gradtape::{DType, Function, FunctionOptions, GradientTape, Result, Rng, Tensor, TensorSpec, Variable};

const D: DType = DType::F64;

trait Step: Send + Sync + 'static {
    fn vars(&self) -> Vec<Variable>;
    fn step(&self, x: &Tensor, y: &Tensor) -> Result<Tensor>;
}

struct Mlp {
    l1: Dense,
    bn: BatchNorm,
    l2: Dense,
    opt: Mutex<Adam>,
}

impl Step for Mlp {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.l1.variables();
        v.extend(self.bn.variables());
        v.extend(self.l2.variables());
        v
    }

    fn step(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        let vars: Vec<Variable> = self.vars().into_iter().filter(Variable::trainable).collect();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let h = self.bn.forward(&self.l1.call(x)?, true)?.relu()?;
            losses::sparse_categorical_crossentropy(y, &self.l2.call(&h)?, true)
        })?;
        let grads = tape.gradient(&loss, &vars)?;
        self.opt.lock().unwrap().apply_gradients(grads.into_iter().zip(&vars))?;
        Ok(loss)
    }
}

struct Text {
    emb: Embedding,
    gru: GRU,
    pool: GlobalPooling,
    head: Dense,
    opt: Mutex<Adam>,
}

impl Step for Text {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.emb.variables();
        v.extend(self.gru.variables());
        v.extend(self.head.variables());
        v
    }

    fn step(&self, ids: &Tensor, y: &Tensor) -> Result<Tensor> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let e = self.emb.call(ids)?;
            let mask = self.emb.compute_mask(ids)?;
            let seq = self.gru.forward_masked(&e, mask.as_ref(), true)?;
            let pooled = self.pool.forward_masked(&seq, mask.as_ref(), true)?;
            losses::sparse_categorical_crossentropy(y, &self.head.call(&pooled)?, true)
        })?;
        let grads = tape.gradient(&loss, &vars)?;
        self.opt.lock().unwrap().apply_gradients(grads.into_iter().zip(&vars))?;
        Ok(loss)
    }
}

/// The steps eagerly and traced (plain, and with the signature `sig`) on
/// the batches, compared after each step.
fn compare<M: Step>(
    name: &str,
    build: impl Fn() -> Result<M>,
    batches: &[(Tensor, Tensor)],
    sig: Vec<TensorSpec>,
) -> Result<()> {
    let eager = build()?;
    let mut traced = Vec::new();
    for sig in [None, Some(sig)] {
        let m = Arc::new(build()?);
        let mc = m.clone();
        let opts = FunctionOptions {
            input_signature: sig,
            ..FunctionOptions::default()
        };
        let f = Function::with_options(move |(x, y): &(Tensor, Tensor)| mc.step(x, y), opts);
        traced.push((m, f));
    }
    let mut bad = Vec::new();
    for (s, (x, y)) in batches.iter().enumerate() {
        let want = eager.step(x, y)?.to_vec_f64();
        let wv: Vec<Vec<f64>> = eager.vars().iter().map(|v| v.read().to_vec_f64()).collect();
        for (k, (m, f)) in traced.iter().enumerate() {
            let got = f.call(&(x.clone(), y.clone()))?.to_vec_f64();
            let what = if k == 0 { "traced" } else { "traced with a signature" };
            let close = |a: &[f64], b: &[f64]| {
                let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|(p, q)| (p - q).abs() <= 1e-12 * q.abs().max(scale))
            };
            if !close(&got, &want) {
                bad.push(format!(
                    "{name} {what} step {s} (batch {:?}): loss {got:?}, eager {want:?}",
                    x.shape()
                ));
            }
            for (j, (v, w)) in m.vars().iter().zip(&wv).enumerate() {
                if !close(&v.read().to_vec_f64(), w) {
                    bad.push(format!(
                        "{name} {what} step {s} (batch {:?}): variable {j} ({}): {:?}, eager {:?}",
                        x.shape(),
                        v.name(),
                        &v.read().to_vec_f64()[..3],
                        &w[..3]
                    ));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    Ok(())
}

#[test]
fn traced_steps_on_batches_of_varying_size_match_eager() -> Result<()> {
    let mut rng = Rng::new(3);
    let mut batches = Vec::new();
    for n in [8usize, 8, 5, 8, 3, 5, 1] {
        let x = rng.normal(&[n, 6], 0.0, 1.0, D)?;
        let y = rng.uniform(&[n], 0.0, 2.999, D)?.floor()?.cast(DType::I64)?;
        batches.push((x, y));
    }
    let build = || {
        let rng = &mut Rng::new(1);
        Ok(Mlp {
            // (no bias before batch norm: its gradient is zero but for
            // roundoff, which Adam's normalisation scales up to lr)
            l1: Dense::builder(6, 16).dtype(D).use_bias(false).build(rng)?,
            bn: BatchNorm::new(16, D)?,
            l2: Dense::builder(16, 3)
                .dtype(D)
                .activation(Activation::Linear)
                .build(rng)?,
            opt: Mutex::new(Adam::new(1e-2)),
        })
    };
    let sig = vec![
        TensorSpec::new(D, &[None, Some(6)]),
        TensorSpec::new(DType::I64, &[None]),
    ];
    // (batch norm over a batch of one: variance 0, as Keras's)
    compare("mlp + batch norm", build, &batches, sig)
}

#[test]
fn traced_text_steps_on_batches_of_varying_size_and_length_match_eager() -> Result<()> {
    let mut rng = Rng::new(4);
    let mut batches = Vec::new();
    for (n, t) in [(4usize, 7usize), (4, 7), (3, 7), (4, 5), (2, 9), (4, 7)] {
        let mut ids = rng
            .uniform(&[n, t], 1.0, 29.999, D)?
            .floor()?
            .cast(DType::I64)?
            .to_vec::<i64>()?;
        for r in 0..n {
            // row r keeps t - r tokens, then padding
            for c in (t - r.min(t - 1))..t {
                ids[r * t + c] = 0;
            }
        }
        let y = rng.uniform(&[n], 0.0, 3.999, D)?.floor()?.cast(DType::I64)?;
        batches.push((Tensor::from_vec(ids, &[n, t])?, y));
    }
    let build = || {
        let rng = &mut Rng::new(1);
        Ok(Text {
            emb: Embedding::builder(30, 8).mask_zero(true).dtype(D).build(rng)?,
            gru: GRU::builder(8, 6).return_sequences(true).dtype(D).build(rng)?,
            pool: GlobalPooling::new(PoolKind::Avg, 1)?,
            head: Dense::builder(6, 4).dtype(D).build(rng)?,
            opt: Mutex::new(Adam::new(1e-2)),
        })
    };
    let sig = vec![
        TensorSpec::new(DType::I64, &[None, None]),
        TensorSpec::new(DType::I64, &[None]),
    ];
    compare("text", build, &batches, sig)
}
