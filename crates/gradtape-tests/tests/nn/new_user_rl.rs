//! Two models a new user would write, against TensorFlow 2.21 / Keras
//! 3.15.1 (`tests/reference/new_user_models4.py` printed the numbers of
//! `tests/data/new_user_models4.txt`):
//!
//! - a double-DQN step: the online network's Q-values gathered at the
//!   taken actions (`gather_with`, TensorFlow's `gather(..., batch_dims=1)`),
//!   the target network's value at the online network's `argmax` action on
//!   the next state, `stop_gradient` on the bootstrapped target, Huber loss
//!   of the targets `[b]` against Q(s, a) `[b, 1]` (Keras drops the
//!   trailing 1; gradtape refused it);
//!   Adam; then a soft target update (τ = 1/8) by `Variable::assign` (in the
//!   traced step too: it must happen at each call);
//! - skip-gram word2vec with negative sampling: a centre and a context
//!   `Embedding`, the sigmoid cross-entropy of each positive pair and of 3
//!   sampled negatives; the embeddings' gradients are `IndexedSlices` (ids
//!   repeat, so rows sum), applied sparse by SGD with momentum.
//!
//! Each runs two steps eagerly and as a traced `function` (called twice,
//! traced once), in float64 at 1e-12 relative (see `new_user_util.rs`) and
//! in float32 against the same reference at `REL32`.

use std::sync::Mutex;

use gradtape::nn::{losses, Activation, Dense, Embedding, Layer, Module};
use gradtape::optim::{Adam, Optimizer, Sgd};
use gradtape::{DType, Error, GradientTape, Result, Rng, Tensor, Variable};

use super::new_user_physics::dense;
use super::new_user_util::{adam, fill, set_weights_as, train_both, update, Check, Stepper};

pub(super) const DATA: &str = include_str!("../data/new_user_models4.txt");

/// float32 against the float64 reference, relative to each vector's
/// largest element: rounding (observed up to 2e-7).
const REL32: f64 = 1e-6;

// ---- 1. Double DQN -------------------------------------------------------------

pub(super) struct Dqn {
    q: [Dense; 2],
    target: [Dense; 2],
    opt: Mutex<Adam>,
}

pub(super) fn mlp(layers: &[Dense], x: &Tensor) -> Result<Tensor> {
    layers.iter().try_fold(x.clone(), |h, l| l.forward(&h, true))
}

fn vars_of(layers: &[Dense]) -> Vec<Variable> {
    layers.iter().flat_map(|l| l.trainable_variables()).collect()
}

impl Dqn {
    pub(super) fn new(dt: DType) -> Result<Dqn> {
        Dqn::sized(4, 8, 3, dt)
    }

    pub(super) fn sized(states: usize, hidden: usize, actions: usize, dt: DType) -> Result<Dqn> {
        let net = || -> Result<[Dense; 2]> {
            Ok([
                dense(states, hidden, Some(Activation::Tanh), dt)?,
                dense(hidden, actions, None, dt)?,
            ])
        };
        let m = Dqn {
            q: net()?,
            target: net()?,
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 200.0, &[]);
        set_weights_as(&vars_of(&m.target), 210.0, &[]);
        Ok(m)
    }
}

impl Stepper for Dqn {
    fn vars(&self) -> Vec<Variable> {
        vars_of(&self.q)
    }

    /// data: states [b, 4], actions [b] (i64), rewards [b], next states
    /// [b, 4], done [b] (0 or 1); outputs Q(s, a), the target and the loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let [s, a, r, s2, done] = data else {
            return Err(Error::InvalidArgument {
                op: "dqn",
                msg: "five tensors".into(),
            });
        };
        let b = a.shape()[0];
        let vars = self.vars();
        let tape = GradientTape::new();
        let (q_sa, y, loss) = tape.record(|| {
            // [b, 1], against targets [b] in the loss (Keras's rank
            // adjustment)
            let q_sa = mlp(&self.q, s)?.gather_with(&a.reshape(&[b, 1])?, 1, 1)?;
            let a2 = mlp(&self.q, s2)?.argmax(1)?;
            let q_next = mlp(&self.target, s2)?
                .gather_with(&a2.reshape(&[b, 1])?, 1, 1)?
                .reshape(&[b])?;
            let not_done = done.neg()?.add_scalar(1.0)?;
            let y = r.add(&not_done.mul(&q_next)?.mul_scalar(0.875)?)?.stop_gradient();
            let loss = losses::huber(&y, &q_sa, 1.0)?;
            Ok((q_sa, y, loss))
        })?;
        let out = update(&tape, &loss, &vars, &self.opt, vec![q_sa, y, loss.clone()])?;
        for (t, q) in vars_of(&self.target).iter().zip(&vars) {
            t.assign(&q.read().mul_scalar(0.125)?.add(&t.read().mul_scalar(0.875)?)?)?;
        }
        Ok(out)
    }
}

pub(super) fn dqn_data() -> Vec<Tensor> {
    vec![
        fill(&[6, 4], 0.3, 2.0),
        Tensor::vector(&[0i64, 2, 1, 1, 0, 2]),
        fill(&[6], 1.1, 4.0),
        fill(&[6, 4], 2.3, 2.0),
        Tensor::vector(&[0.0f64, 0.0, 1.0, 0.0, 0.0, 1.0]),
    ]
}

#[test]
fn double_dqn_with_a_soft_target_update_matches_tensorflow() -> Result<()> {
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    let runs = train_both(&mut c64, &mut c32, "dqn", &["q_sa", "y", "loss"], Dqn::new, &dqn_data())?;
    // the target network after two soft updates, each way
    for (what, m) in &runs.models {
        let c = if what.contains("F64") { &mut c64 } else { &mut c32 };
        c.vars(what, "dqn_target", &vars_of(&m.target));
    }
    c64.finish("dqn f64", 400);
    c32.finish("dqn f32", 400);
    Ok(())
}

// ---- 2. Skip-gram with negative sampling -----------------------------------------

pub(super) struct SkipGram {
    centre: Embedding,
    context: Embedding,
    opt: Mutex<Sgd>,
}

impl SkipGram {
    pub(super) fn new(dt: DType) -> Result<SkipGram> {
        SkipGram::sized(12, 4, dt)
    }

    pub(super) fn sized(vocab: usize, dim: usize, dt: DType) -> Result<SkipGram> {
        let rng = &mut Rng::new(0);
        let m = SkipGram {
            centre: Embedding::builder(vocab, dim).dtype(dt).build(rng)?,
            context: Embedding::builder(vocab, dim).dtype(dt).build(rng)?,
            opt: Mutex::new(Sgd::new(0.5).momentum(0.875)?),
        };
        set_weights_as(&m.vars(), 220.0, &[]);
        Ok(m)
    }
}

impl Stepper for SkipGram {
    fn vars(&self) -> Vec<Variable> {
        [&self.centre, &self.context]
            .iter()
            .flat_map(|l| l.trainable_variables())
            .collect()
    }

    /// data: centre ids [b], context ids [b], negative ids [b, k] (i64);
    /// outputs the positive and negative logits and the loss, then the
    /// gradients made dense (they are applied sparse).
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let (pos, neg, loss) = tape.record(|| {
            let ec = self.centre.call(&data[0])?;
            let eo = self.context.call(&data[1])?;
            let en = self.context.call(&data[2])?;
            let pos = ec.mul(&eo)?.sum(&[-1], false)?;
            let neg = ec.expand_dims(1)?.mul(&en)?.sum(&[-1], false)?;
            let l_pos = Tensor::sigmoid_cross_entropy_with_logits(&pos.ones_like(), &pos)?;
            let l_neg = Tensor::sigmoid_cross_entropy_with_logits(&neg.zeros_like(), &neg)?.sum(&[1], false)?;
            let loss = l_pos.add(&l_neg)?.mean_all()?;
            Ok((pos, neg, loss))
        })?;
        let grads = tape.sparse_gradient(&loss, &vars)?;
        let mut dense = Vec::new();
        for (j, g) in grads.iter().enumerate() {
            let g = g.as_ref().expect("both tables have gradients");
            // a lookup's gradient is sparse: the rows it read, repeated ids
            // not yet summed
            assert!(g.is_sparse(), "table {j}: a dense gradient");
            dense.push(Some(g.to_dense()?));
        }
        self.opt.lock().unwrap().apply_gradients(grads.into_iter().zip(&vars))?;
        Ok([pos, neg, loss].into_iter().map(Some).chain(dense).collect())
    }
}

pub(super) fn skip_gram_data() -> Result<Vec<Tensor>> {
    let neg: Vec<i64> = vec![1, 8, 11, 0, 3, 6, 9, 9, 2, 7, 5, 10, 3, 0, 4];
    Ok(vec![
        Tensor::vector(&[3i64, 7, 3, 1, 9]),
        Tensor::vector(&[4i64, 2, 5, 3, 3]),
        Tensor::from_vec(neg, &[5, 3])?,
    ])
}

#[test]
fn skip_gram_with_negative_sampling_and_sparse_updates_matches_tensorflow() -> Result<()> {
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    train_both(
        &mut c64,
        &mut c32,
        "w2v",
        &["pos", "neg", "loss"],
        SkipGram::new,
        &skip_gram_data()?,
    )?;
    c64.finish("w2v f64", 300);
    c32.finish("w2v f32", 300);
    Ok(())
}

/// The hard target update a Keras user writes, `target.set_weights(
/// online.get_weights())` (which gradtape lacked), after each DQN step:
/// eagerly, and inside a traced step, where it must copy the weights of
/// each call (not those seen while tracing). The traced run's weights
/// must be the eager run's, and the target the online network's exactly.
#[test]
fn dqn_hard_target_update_by_set_weights_eager_and_traced() -> Result<()> {
    let data = dqn_data();
    let step = |m: &Dqn, d: &[Tensor]| -> Result<Tensor> {
        let loss = m.step(d)?[2].clone().expect("the loss");
        for (t, q) in m.target.iter().zip(&m.q) {
            t.set_weights(&q.get_weights())?;
        }
        Ok(loss)
    };
    let eager = Dqn::new(DType::F64)?;
    let traced = std::sync::Arc::new(Dqn::new(DType::F64)?);
    let f = {
        let m = traced.clone();
        gradtape::function(move |d: &Vec<Tensor>| step(&m, d))
    };
    let mut losses = Vec::new();
    for _ in 0..3 {
        let (a, b) = (step(&eager, &data)?.item()?, f.call(&data)?.item()?);
        losses.push(a);
        assert!((a - b).abs() <= 1e-13 * a.abs(), "loss eager {a}, traced {b}");
        for m in [&eager, &*traced] {
            for (t, q) in vars_of(&m.target).iter().zip(m.vars()) {
                assert_eq!(t.read().to_vec::<f64>()?, q.read().to_vec::<f64>()?, "{}", t.name());
            }
        }
    }
    assert_eq!(f.trace_count(), 1);
    // the first step is the soft-update run's (the copy comes after it)
    let mut c = Check::with(DATA, 0.0);
    c.one("eager", "dqn1_loss", Some(&Tensor::scalar(losses[0])));
    c.finish("dqn hard update", 0);
    for (a, b) in eager.vars().iter().zip(traced.vars()) {
        let (a, b) = (a.read().to_vec::<f64>()?, b.read().to_vec::<f64>()?);
        assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-13 * x.abs().max(1.0)));
    }
    // a weight list of another module is refused, naming the mismatch
    let e = eager.target[0]
        .set_weights(&eager.q[1].get_weights())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("set_weights") && e.contains("[8, 3]") && e.contains("[4, 8]"),
        "{e}"
    );
    let e = eager.target[0].set_weights(&[]).unwrap_err().to_string();
    assert!(e.contains("0 weights given for a module of 2 variables"), "{e}");
    Ok(())
}
