//! A custom training loop a new user would write, against TensorFlow 2.21 /
//! Keras 3.15.1 in float64 (`tests/reference/new_user_models2.py`, numbers
//! in `tests/data/new_user_models2.txt`): Dense(4->8, tanh) -> Dense(8->3)
//! logits, sparse softmax cross-entropy; each step averages the gradients
//! of 3 micro-batches of 4 (one tape each), clips them to global norm 1/4,
//! and applies AdamW (weight decay 1/8) under a cosine-decayed learning
//! rate (2^-5 over 2 steps, alpha 1/2). Three steps, eagerly and as a traced `function`
//! (called three times: the schedule's rate must follow the step counter,
//! not stay at the traced step's); and, both ways, a checkpoint of the
//! model and the optimizer saved after the first step and loaded into a
//! freshly built model and optimizer, which run steps 2 and 3.
//! Compared at 1e-12 relative (see `new_user_util.rs`).

use std::sync::{Arc, Mutex};

use gradtape::io::{safetensors_from_bytes, safetensors_to_bytes};
use gradtape::nn::{losses, Activation, Dense, Layer, Module};
use gradtape::optim::{clip_by_global_norm, AdamW, CosineDecay, ExponentialDecay, Optimizer};
use gradtape::{function, DType, Function, GradientTape, Result, Rng, Tensor, Variable};

use super::new_user_util::{eager_vs_traced, fill, print_times, set_weights, Check};

struct Model {
    l1: Dense,
    l2: Dense,
}

impl Model {
    /// Named layers, so that a model built again loads the checkpoint.
    fn new() -> Result<Model> {
        let rng = &mut Rng::new(0);
        let m = Model {
            l1: Dense::builder(4, 8)
                .activation(Activation::Tanh)
                .dtype(DType::F64)
                .name("hidden")
                .build(rng)?,
            l2: Dense::builder(8, 3).dtype(DType::F64).name("logits").build(rng)?,
        };
        set_weights(&m.vars(), 100.0);
        Ok(m)
    }

    fn vars(&self) -> Vec<Variable> {
        let mut v = self.l1.trainable_variables();
        v.extend(self.l2.trainable_variables());
        v
    }
}

fn adamw() -> AdamW {
    AdamW::new(CosineDecay::new(2f64.powi(-5), 2).alpha(0.5))
        .weight_decay(0.125)
        .betas(0.875, 1.0 - 2f64.powi(-10))
        .unwrap()
        .epsilon(2f64.powi(-20))
        .unwrap()
        .with_name("adamw")
}

/// One step: the 3 micro-batch losses, the global norm before clipping,
/// the clipped mean gradients, the updated weights.
fn train_step(m: &Model, opt: &mut AdamW, x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
    let vars = m.vars();
    let mut acc: Vec<Option<Tensor>> = vec![None; vars.len()];
    let mut losses_ = Vec::new();
    for mb in 0..3 {
        let (xb, yb) = (x.narrow(0, 4 * mb, 4)?, y.narrow(0, 4 * mb, 4)?);
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let logits = m.l2.call(&m.l1.call(&xb)?)?;
            losses::sparse_categorical_crossentropy(&yb, &logits, true)
        })?;
        for (a, g) in acc.iter_mut().zip(tape.gradient(&loss, &vars)?) {
            let g = g.expect("every weight has a gradient");
            *a = Some(match a.take() {
                Some(s) => s.add(&g)?,
                None => g,
            });
        }
        losses_.push(loss);
    }
    let mean: Vec<Option<Tensor>> = acc
        .into_iter()
        .map(|a| a.map(|g| g.div_scalar(3.0)).transpose())
        .collect::<Result<_>>()?;
    let (clipped, norm) = clip_by_global_norm(&mean, 0.25)?;
    opt.apply_gradients(clipped.clone().into_iter().zip(&vars))?;
    let mut out = vec![Tensor::stack(&losses_.iter().collect::<Vec<_>>(), 0)?, norm];
    out.extend(clipped.into_iter().flatten());
    out.extend(vars.iter().map(Variable::read));
    Ok(out)
}

fn step_names(s: usize) -> Vec<String> {
    let mut n = vec![format!("loop{s}_losses"), format!("loop{s}_norm")];
    n.extend((0..4).map(|j| format!("loop{s}_grad{j}")));
    n.extend((0..4).map(|j| format!("loop{s}_weight{j}")));
    n
}

fn data() -> (Tensor, Tensor) {
    (
        fill(&[12, 4], 0.65, 2.0),
        Tensor::vector(&[0i64, 2, 1, 1, 0, 2, 2, 1, 0, 0, 1, 2]),
    )
}

type Shared = (Arc<Model>, Arc<Mutex<AdamW>>);

type Data = (Tensor, Tensor);
type Traced = Function<Data, Vec<Tensor>, Box<dyn Fn(&Data) -> Result<Vec<Tensor>> + Send + Sync>>;

fn traced_step((m, o): &Shared) -> Traced {
    let (m, o) = (m.clone(), o.clone());
    function(Box::new(move |(x, y): &Data| {
        train_step(&m, &mut o.lock().unwrap(), x, y)
    }))
}

fn run(s: &Shared, f: Option<&Traced>, d: &Data) -> Result<Vec<Tensor>> {
    match f {
        Some(f) => f.call(d),
        None => train_step(&s.0, &mut s.1.lock().unwrap(), &d.0, &d.1),
    }
}

#[test]
fn adamw_loop_with_accumulation_clipping_schedule_matches_tensorflow() -> Result<()> {
    let d = data();
    let mut check = Check::new();
    for traced in [false, true] {
        let what = if traced { "traced" } else { "eager" };
        let s: Shared = (Arc::new(Model::new()?), Arc::new(Mutex::new(adamw())));
        let f = traced.then(|| traced_step(&s));
        for step in 1..=3 {
            check.all(what, &step_names(step), &run(&s, f.as_ref(), &d)?);
        }
        if let Some(f) = &f {
            assert_eq!(f.trace_count(), 1);
        }
        assert_eq!(s.1.lock().unwrap().iterations(), 3);
    }
    check.finish("adamw loop", 300);
    Ok(())
}

#[test]
fn adamw_loop_resumed_from_a_checkpoint_matches_tensorflow() -> Result<()> {
    let d = data();
    let mut check = Check::new();
    for traced in [false, true] {
        let what = if traced { "traced, resumed" } else { "eager, resumed" };
        let bytes = {
            let s: Shared = (Arc::new(Model::new()?), Arc::new(Mutex::new(adamw())));
            let f = traced.then(|| traced_step(&s));
            check.all(what, &step_names(1), &run(&s, f.as_ref(), &d)?);
            let mut all = s.0.vars();
            all.extend(s.1.lock().unwrap().variables());
            safetensors_to_bytes(&all)?
        };
        // a fresh model (other initial weights) and optimizer, built, loaded
        let s: Shared = (Arc::new(Model::new()?), Arc::new(Mutex::new(adamw())));
        for v in s.0.vars() {
            v.assign(&v.read().zeros_like())?;
        }
        s.1.lock().unwrap().build(&s.0.vars())?;
        let mut all = s.0.vars();
        all.extend(s.1.lock().unwrap().variables());
        let unused = safetensors_from_bytes(&bytes, &all)?;
        assert!(
            unused.is_empty(),
            "{what}: the checkpoint held {unused:?} that nothing took"
        );
        assert_eq!(s.1.lock().unwrap().iterations(), 1);
        let f = traced.then(|| traced_step(&s));
        for step in 2..=3 {
            check.all(what, &step_names(step), &run(&s, f.as_ref(), &d)?);
        }
    }
    check.finish("adamw loop, resumed", 250);
    Ok(())
}

/// Keras's AdamW with `gradient_accumulation_steps=3`, `global_clipnorm`,
/// weight decay and an `ExponentialDecay` schedule, one micro-batch per
/// call: the weights change at every third call only.
fn accumulating() -> AdamW {
    AdamW::new(ExponentialDecay::new(2f64.powi(-5), 1, 0.5))
        .weight_decay(0.125)
        .betas(0.875, 1.0 - 2f64.powi(-10))
        .unwrap()
        .epsilon(2f64.powi(-20))
        .unwrap()
        .global_clipnorm(0.25)
        .unwrap()
        .gradient_accumulation_steps(3)
        .unwrap()
        .with_name("adamw")
}

/// One call: the micro-batch's loss, its gradients handed to the optimizer.
fn accumulate_step(m: &Model, opt: &mut AdamW, x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
    let vars = m.vars();
    let tape = GradientTape::new();
    let loss = tape.record(|| losses::sparse_categorical_crossentropy(y, &m.l2.call(&m.l1.call(x)?)?, true))?;
    opt.apply_gradients(tape.gradient(&loss, &vars)?.into_iter().zip(&vars))?;
    Ok(std::iter::once(loss).chain(vars.iter().map(Variable::read)).collect())
}

#[test]
fn keras_gradient_accumulation_steps_match_tensorflow() -> Result<()> {
    let (x, y) = data();
    let mut check = Check::new();
    for traced in [false, true] {
        let what = if traced { "traced" } else { "eager" };
        let m = Arc::new(Model::new()?);
        let opt = Arc::new(Mutex::new(accumulating()));
        let f = {
            let (m, opt) = (m.clone(), opt.clone());
            function(move |(x, y): &Data| accumulate_step(&m, &mut opt.lock().unwrap(), x, y))
        };
        for call in 1..=6 {
            let mb = (call - 1) % 3;
            let (xb, yb) = (x.narrow(0, 4 * mb, 4)?, y.narrow(0, 4 * mb, 4)?);
            let got = if traced {
                f.call(&(xb, yb))?
            } else {
                accumulate_step(&m, &mut opt.lock().unwrap(), &xb, &yb)?
            };
            let mut want = vec![format!("accum{call}_loss")];
            want.extend((0..4).map(|j| format!("accum{call}_weight{j}")));
            check.all(what, &want, &got);
            let it = Tensor::scalar(opt.lock().unwrap().iterations() as f64);
            check.one(what, &format!("accum{call}_iterations"), Some(&it));
        }
        if traced {
            assert_eq!(f.trace_count(), 1);
        }
        // the accumulators are optimizer variables (checkpointed)
        let names: Vec<String> = opt
            .lock()
            .unwrap()
            .variables()
            .iter()
            .map(|v| v.name().to_string())
            .collect();
        assert!(
            names.contains(&"adamw/hidden/kernel/gradient_accumulator".to_string()),
            "{names:?}"
        );
    }
    check.finish("gradient accumulation", 500);
    Ok(())
}

/// Eager and traced time per step (a release-mode measurement, printed;
/// run with `--ignored --nocapture`).
#[test]
#[ignore]
fn adamw_loop_eager_vs_traced_time() -> Result<()> {
    let d = data();
    let s: Shared = (Arc::new(Model::new()?), Arc::new(Mutex::new(adamw())));
    let s2: Shared = (Arc::new(Model::new()?), Arc::new(Mutex::new(adamw())));
    let f = traced_step(&s2);
    let (eager, traced) = eager_vs_traced(200, || run(&s, None, &d).map(drop), || run(&s2, Some(&f), &d).map(drop));
    print_times("adamw loop", "3 micro-batches of 4, MLP 4 -> 8 -> 3", eager, traced);
    Ok(())
}
