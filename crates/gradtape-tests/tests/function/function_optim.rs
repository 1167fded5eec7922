//! Optimizers inside traced functions: `apply_gradients` / `minimize` in a
//! traced training step are recorded as one `ApplyUpdates` node that
//! updates the variables and the slots at each call, with the learning
//! rate and the step number read from the optimizer's step counter when
//! the graph runs.
//!
//! The reference is the same training run done eagerly (whose update rules
//! `tests/nn/optimizers.rs` checks against Keras 3 / TensorFlow 2.21): the
//! traced run must give the same variables, slots and losses (f64, to
//! rounding: the graph runs the same kernels in the same order).

use std::sync::{Arc, Mutex};

use gradtape::optim::{Adadelta, Adam, Adamax, ExponentialDecay, Lion, Nadam, Optimizer, RmsProp, Sgd};
use gradtape::{function, GradientTape, Result, Tensor, Variable};

const STEPS: usize = 5;

/// A two-layer regression model's variables, the same at every call.
fn model_vars() -> Result<Vec<Variable>> {
    let w1: Vec<f64> = (0..12).map(|i| 0.4 * (0.7 * i as f64 + 0.3).sin()).collect();
    let w2: Vec<f64> = (0..8).map(|i| 0.5 * (1.1 * i as f64 - 0.2).cos()).collect();
    Ok(vec![
        Variable::builder(Tensor::from_vec(w1, &[3, 4])?).name("w1").build(),
        Variable::builder(Tensor::zeros(&[4], gradtape::DType::F64))
            .name("b1")
            .build(),
        Variable::builder(Tensor::from_vec(w2, &[4, 2])?).name("w2").build(),
    ])
}

fn data() -> Result<(Tensor, Tensor)> {
    let x: Vec<f64> = (0..15).map(|i| (0.37 * i as f64 + 0.1).sin()).collect();
    let y: Vec<f64> = (0..10).map(|i| (0.21 * i as f64).cos()).collect();
    Ok((Tensor::from_vec(x, &[5, 3])?, Tensor::from_vec(y, &[5, 2])?))
}

/// The loss of the model on a batch.
fn loss_of(vars: &[Variable], x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let h = x.matmul(&vars[0].read())?.add(&vars[1].read())?.tanh()?;
    h.matmul(&vars[2].read())?.sub(y)?.square()?.mean_all()
}

/// What a run ends with: the losses of every step, then the values of the
/// model's variables and of the optimizer's (counter and slots).
struct Run {
    losses: Vec<f64>,
    values: Vec<Vec<f64>>,
    iterations: u64,
}

/// `STEPS` training steps with the optimizer `make` builds, eagerly or as
/// one traced function (`minimize` or `apply_gradients` inside).
fn train<O: Optimizer + Send + 'static>(make: impl Fn() -> O, traced: bool, use_minimize: bool) -> Result<Run> {
    let vars = model_vars()?;
    let opt = Arc::new(Mutex::new(make()));
    let (x, y) = data()?;
    let step = {
        let (vars, opt) = (vars.clone(), opt.clone());
        move |(x, y): &(Tensor, Tensor)| -> Result<Tensor> {
            let tape = GradientTape::new();
            let loss = tape.record(|| loss_of(&vars, x, y))?;
            let mut opt = opt.lock().unwrap();
            if use_minimize {
                opt.minimize(&tape, &loss, &vars)?;
            } else {
                let grads = tape.gradient(&loss, &vars)?;
                opt.apply_gradients(grads.into_iter().zip(&vars))?;
            }
            Ok(loss)
        }
    };
    let mut losses = Vec::new();
    if traced {
        let f = function(step);
        for _ in 0..STEPS {
            losses.push(f.call(&(x.clone(), y.clone()))?.item()?);
        }
        assert_eq!(f.trace_count(), 1, "one trace serves every step");
        let g = f.graph(&(x.clone(), y.clone()))?;
        assert_eq!(g.count("ApplyUpdates"), 1, "{g}");
        assert_eq!(
            g.count("AssignVariable"),
            0,
            "the counter advances inside the node: {g}"
        );
    } else {
        for _ in 0..STEPS {
            losses.push(step(&(x.clone(), y.clone()))?.item()?);
        }
    }
    let opt = opt.lock().unwrap();
    let values = vars
        .iter()
        .chain(&opt.variables())
        .map(|v| v.read().to_vec_f64())
        .collect();
    Ok(Run {
        losses,
        values,
        iterations: opt.iterations(),
    })
}

fn assert_same(name: &str, eager: &Run, traced: &Run) {
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0);
    assert_eq!(eager.iterations, STEPS as u64, "{name}: eager step counter");
    assert_eq!(traced.iterations, STEPS as u64, "{name}: traced step counter");
    for (k, (a, b)) in eager.losses.iter().zip(&traced.losses).enumerate() {
        assert!(close(*a, *b), "{name}: loss of step {k}: eager {a}, traced {b}");
    }
    // training makes progress (the updates are not no-ops)
    assert!(eager.losses[STEPS - 1] < eager.losses[0], "{name}: {:?}", eager.losses);
    assert_eq!(eager.values.len(), traced.values.len(), "{name}: variable count");
    for (i, (a, b)) in eager.values.iter().zip(&traced.values).enumerate() {
        for (j, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(close(*x, *y), "{name}: variable {i}[{j}]: eager {x}, traced {y}");
        }
    }
}

fn check<O: Optimizer + Send + 'static>(name: &str, make: impl Fn() -> O + Copy) -> Result<()> {
    for use_minimize in [false, true] {
        let eager = train(make, false, use_minimize)?;
        let traced = train(make, true, use_minimize)?;
        assert_same(name, &eager, &traced);
    }
    Ok(())
}

#[test]
fn sgd_with_momentum_in_a_traced_step_matches_eager() -> Result<()> {
    check("sgd(momentum)", || Sgd::new(0.1).momentum(0.9).unwrap())?;
    check("sgd(nesterov)", || Sgd::new(0.1).momentum(0.5).unwrap().nesterov(true))?;
    check("sgd", || Sgd::new(0.1))
}

#[test]
fn adam_in_a_traced_step_matches_eager() -> Result<()> {
    // Adam's bias correction depends on the step number: read at each call
    check("adam", || Adam::new(0.05))?;
    check("adam(amsgrad, weight decay)", || {
        Adam::new(0.05).amsgrad(true).weight_decay(0.1)
    })
}

#[test]
fn rmsprop_in_a_traced_step_matches_eager() -> Result<()> {
    check("rmsprop", || RmsProp::new(0.01))?;
    check("rmsprop(momentum, centered)", || {
        RmsProp::new(0.01).momentum(0.5).unwrap().centered(true)
    })
}

#[test]
fn adamax_nadam_adadelta_and_lion_in_a_traced_step_match_eager() -> Result<()> {
    // Nadam's momentum factors and Adamax's bias correction follow the
    // step number, read at each call
    check("adamax", || Adamax::new(0.05))?;
    check("nadam", || Nadam::new(0.05))?;
    check("adadelta", || Adadelta::new(1.0))?;
    check("lion(weight decay)", || Lion::new(0.01).weight_decay(0.1))
}

#[test]
fn a_schedule_and_clipping_in_a_traced_step_follow_the_step_counter() -> Result<()> {
    // the learning rate changes at every step: a value frozen at trace time
    // would differ from the eager run from the second step on
    check("sgd(schedule, clipnorm)", || {
        Sgd::new(ExponentialDecay::new(0.2, 1, 0.5)).clipnorm(0.05).unwrap()
    })
}

#[test]
fn a_traced_update_changes_the_variables_only_when_the_graph_runs() -> Result<()> {
    let w = Variable::builder(Tensor::vector(&[1.0f64, -2.0])).name("w").build();
    let opt = Arc::new(Mutex::new(Adam::new(0.1)));
    let f = {
        let (w, opt) = (w.clone(), opt.clone());
        function(move |g: &Tensor| -> Result<Tensor> {
            let mut opt = opt.lock().unwrap();
            opt.apply_gradients([(Some(g.clone()), &w)])?;
            // a read after the update sees the new value, in the trace too
            Ok(w.read())
        })
    };
    let g = Tensor::vector(&[4.0f64, -0.5]);
    // the concrete function (a trace) alone changes nothing
    let graph = f.graph(&g)?;
    assert_eq!(w.read().to_vec::<f64>()?, vec![1.0, -2.0]);
    assert_eq!(opt.lock().unwrap().iterations(), 0);
    // the node is listed with the optimizer's and the variable's names
    let listing = graph.to_string();
    assert!(listing.contains("ApplyUpdates['adam"), "{listing}");
    assert!(listing.contains("vars=[\"w\"]"), "{listing}");
    // each call is one Adam step: the first moves each weight by about lr
    // (the sign of its gradient), as Keras's Adam does
    let after = f.call(&g)?.to_vec::<f64>()?;
    assert!(
        (after[0] - 0.9).abs() < 1e-6 && (after[1] + 1.9).abs() < 1e-6,
        "{after:?}"
    );
    assert_eq!(w.read().to_vec::<f64>()?, after);
    f.call(&g)?;
    assert_eq!(opt.lock().unwrap().iterations(), 2);
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

/// `STEPS` steps of `minimize` on an embedding table read through
/// `gather` (a sparse gradient), eagerly or traced; the table and slots.
fn train_sparse(lazy: bool, traced: bool) -> Result<Vec<Vec<f64>>> {
    let rows: Vec<f64> = (0..30).map(|i| (0.3 * i as f64).sin()).collect();
    let table = Variable::builder(Tensor::from_vec(rows, &[10, 3])?)
        .name("table")
        .build();
    let opt = Arc::new(Mutex::new(Adam::new(0.05).lazy_sparse(lazy)));
    let step = {
        let (table, opt) = (table.clone(), opt.clone());
        move |ids: &Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            let loss = tape.record(|| table.read().gather(ids, 0)?.sub_scalar(0.5)?.square()?.sum_all())?;
            opt.lock()
                .unwrap()
                .minimize(&tape, &loss, std::slice::from_ref(&table))?;
            Ok(loss)
        }
    };
    // row 7 twice (its gradients add), rows 0..6 and 8, 9 never
    let ids = Tensor::vector(&[7i64, 2, 7]);
    if traced {
        let f = function(step);
        for _ in 0..STEPS {
            f.call(&ids)?;
        }
        assert_eq!(f.trace_count(), 1);
        assert_eq!(f.graph(&ids)?.count("ApplyUpdates"), 1);
    } else {
        for _ in 0..STEPS {
            step(&ids)?;
        }
    }
    let opt = opt.lock().unwrap();
    Ok(std::iter::once(&table)
        .chain(&opt.variables())
        .map(|v| v.read().to_vec_f64())
        .collect())
}

#[test]
fn sparse_gradients_in_a_traced_step_match_eager() -> Result<()> {
    for lazy in [false, true] {
        let eager = train_sparse(lazy, false)?;
        let traced = train_sparse(lazy, true)?;
        assert_eq!(eager, traced, "lazy_sparse({lazy})");
        // the rows used moved, an unused one did not (its momentum is zero)
        let before: Vec<f64> = (0..30).map(|i| (0.3 * i as f64).sin()).collect();
        assert!((eager[0][21] - before[21]).abs() > 0.1, "row 7 moved");
        assert_eq!(eager[0][0], before[0], "row 0 untouched");
    }
    Ok(())
}

/// Dynamic loss scaling inside a traced step, as Keras's
/// `LossScaleOptimizer` under `tf.function`: each call of the graph
/// decides whether to skip (a non-finite gradient: the scale halves, the
/// variables, the slots and the step counter stay) or to apply the
/// unscaled gradients (counting the finite steps, doubling the scale after
/// `dynamic_growth_steps`), with `minimize` and with `apply_gradients`;
/// the same bits as eagerly, one trace. (It used to be an error: the
/// wrapper ran eagerly only.) A user-made optimizer inside the wrapper is
/// refused in a trace, naming it.
#[test]
fn loss_scaling_inside_a_trace_skips_or_applies_at_each_call() -> Result<()> {
    use gradtape::optim::LossScaleOptimizer;
    type Opt = LossScaleOptimizer<Adam>;
    let make = || -> Result<(Variable, Arc<Mutex<Opt>>)> {
        let opt = LossScaleOptimizer::new(Adam::new(0.1).clipnorm(0.5)?)
            .initial_scale(4.0)?
            .dynamic_growth_steps(2)?;
        Ok((Variable::new(Tensor::scalar(2.0f32)), Arc::new(Mutex::new(opt))))
    };
    let step = |w: &Variable, opt: &Mutex<Opt>, x: &Tensor, use_minimize: bool| -> Result<Tensor> {
        let tape = GradientTape::new();
        let loss = tape.record(|| w.read().mul(x)?.square())?;
        let mut opt = opt.lock().unwrap();
        if use_minimize {
            opt.minimize(&tape, &loss, std::slice::from_ref(w))?;
        } else {
            let scaled = tape.record(|| opt.scale_loss(&loss))?;
            let g = tape.gradient(&scaled, std::slice::from_ref(w))?;
            opt.apply_gradients(g.into_iter().zip([w]))?;
        }
        Ok(loss)
    };
    // the state after each call: w, Adam's slots and counter, the scale,
    // the count of finite steps, whether the call skipped
    let state = |w: &Variable, opt: &Mutex<Opt>| -> Vec<f64> {
        let opt = opt.lock().unwrap();
        let mut v = vec![w.read().to_vec_f64()[0], opt.loss_scale(), opt.good_steps() as f64];
        v.extend(opt.variables().iter().map(|v| v.read().to_vec_f64()[0]));
        v.push(if opt.last_step_skipped() { 1.0 } else { 0.0 });
        v
    };
    let xs = [1.0f32, f32::INFINITY, 1.0, 0.5, f32::NAN, 1.0, 1.0];
    for use_minimize in [true, false] {
        let (we, oe) = make()?;
        let (wt, ot) = make()?;
        let f = {
            let (wt, ot) = (wt.clone(), ot.clone());
            function(move |x: &Tensor| step(&wt, &ot, x, use_minimize))
        };
        let mut skipped = 0;
        for x in xs {
            let x = Tensor::scalar(x);
            step(&we, &oe, &x, use_minimize)?;
            f.call(&x)?;
            let (e, t) = (state(&we, &oe), state(&wt, &ot));
            assert_eq!(
                e.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                t.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "minimize {use_minimize}, x {x}: eager {e:?}, traced {t:?}"
            );
            skipped += ot.lock().unwrap().last_step_skipped() as u64;
        }
        assert_eq!(f.trace_count(), 1);
        let o = ot.lock().unwrap();
        // two skipped (inf, NaN); five applied; the scale 4 halved twice,
        // doubled after the 2nd and 4th finite steps after each halving
        assert_eq!((skipped, o.iterations()), (2, 5));
        // (4, then 2 after inf, 4 after two finite steps, 2 after NaN, 4)
        assert_eq!(o.loss_scale(), 4.0);
        assert!(wt.read().to_vec_f64()[0] < 2.0 - 0.2, "the applied steps moved w");
    }
    // a user-made optimizer: refused inside a trace, naming it
    let w = Variable::new(Tensor::scalar(2.0f32));
    let opt = Arc::new(Mutex::new(LossScaleOptimizer::new(Mine(Sgd::new(0.1)))));
    let (w2, opt2) = (w.clone(), opt.clone());
    let f = function(move |x: &Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        let loss = tape.record(|| w2.read().mul(x)?.square())?;
        opt2.lock().unwrap().minimize(&tape, &loss, std::slice::from_ref(&w2))?;
        Ok(loss)
    });
    let e = f.call(&Tensor::scalar(1.0f32)).unwrap_err().to_string();
    assert!(
        e.contains("LossScaleOptimizer") && e.contains("'mine'") && e.contains("outside the traced function"),
        "{e}"
    );
    assert_eq!(w.read().to_scalar::<f32>()?, 2.0, "nothing applied");
    // scale_loss traces a read of the scale: a changed scale is seen
    let opt2 = opt.clone();
    let f = function(move |x: &Tensor| opt2.lock().unwrap().scale_loss(x));
    assert_eq!(f.call(&Tensor::scalar(3.0f32))?.to_scalar::<f32>()?, 3.0 * 32768.0);
    opt.lock()
        .unwrap()
        .apply_gradients([(Some(Tensor::scalar(f32::INFINITY)), &w)])?; // halves the scale
    assert_eq!(f.call(&Tensor::scalar(3.0f32))?.to_scalar::<f32>()?, 3.0 * 16384.0);
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

/// An optimizer of a user's own (here SGD under another name).
struct Mine(Sgd);

impl Optimizer for Mine {
    fn name(&self) -> &str {
        "mine"
    }
    fn apply(&mut self, pairs: Vec<(Option<gradtape::Gradient>, Variable)>) -> Result<()> {
        self.0.apply(pairs)
    }
    fn build(&mut self, vars: &[Variable]) -> Result<()> {
        self.0.build(vars)
    }
    fn variables(&self) -> Vec<Variable> {
        self.0.variables()
    }
    fn iterations(&self) -> u64 {
        self.0.iterations()
    }
    fn learning_rate(&self) -> f64 {
        self.0.learning_rate()
    }
    fn set_learning_rate(&mut self, lr: f64) -> Result<()> {
        self.0.set_learning_rate(lr)
    }
    fn finalize_variable_values(&self, vars: &[Variable]) -> Result<()> {
        self.0.finalize_variable_values(vars)
    }
    fn skipped(&self) -> &[String] {
        self.0.skipped()
    }
}

/// A first step that overflows is skipped by a `LossScaleOptimizer`, but
/// the wrapped optimizer is built all the same, eagerly as traced: Keras
/// 3's `LossScaleOptimizer.apply` builds the inner optimizer before it
/// checks the gradients (TensorFlow 2.21 / Keras 3: after
/// `LossScaleOptimizer(Adam(0.1), initial_scale=1024).apply([[inf, 1]],
/// [w])`, `opt.variables` holds `adam/variable_momentum` and
/// `variable_velocity`, zeros; `w` unchanged, the scale 512), and a traced
/// step makes its update node, slots and all, when it is traced. Found by
/// `random_steps` (seed 5803's case 20 in `f16`: 20 variables eagerly, 37
/// traced); eagerly the slots were missing until the first finite step.
#[test]
fn a_skipped_first_step_builds_the_wrapped_optimizer_eagerly_as_traced() -> Result<()> {
    use gradtape::optim::LossScaleOptimizer;
    let names = |opt: &LossScaleOptimizer<Adam>| -> Vec<String> {
        opt.variables().iter().map(|v| v.name().to_string()).collect()
    };
    let values = |opt: &LossScaleOptimizer<Adam>| -> Vec<Vec<f64>> {
        opt.variables().iter().map(|v| v.read().to_vec_f64()).collect()
    };
    // eagerly: a gradient with an infinity, as Keras's example
    let w = Variable::builder(Tensor::vector(&[0.5f32, -0.25])).name("w").build();
    let mut eager = LossScaleOptimizer::new(Adam::new(0.1).with_name("adam_e")).initial_scale(1024.0)?;
    eager.apply_gradients([(Some(Tensor::vector(&[f32::INFINITY, 1.0])), &w)])?;
    assert!(eager.last_step_skipped());
    assert_eq!(w.read().to_vec::<f32>()?, vec![0.5, -0.25], "skipped");
    let n = eager.name().to_string();
    let want = [
        "adam_e/iterations".into(),
        "adam_e/w/m".into(),
        "adam_e/w/v".into(),
        format!("{n}/loss_scale"),
        format!("{n}/loss_scale_steps"),
    ];
    assert_eq!(names(&eager), want);
    assert_eq!(
        values(&eager),
        vec![vec![0.0], vec![0.0, 0.0], vec![0.0, 0.0], vec![512.0], vec![0.0]]
    );
    // the same step traced: a loss whose scaled gradient overflows f16
    let wt = Variable::builder(Tensor::vector(&[0.5f32, -0.25])).name("w").build();
    let traced = Arc::new(Mutex::new(
        LossScaleOptimizer::new(Adam::new(0.1).with_name("adam_e")).initial_scale(1024.0)?,
    ));
    let f = {
        let (wt, traced) = (wt.clone(), traced.clone());
        function(move |x: &Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            let loss = tape.record(|| {
                wt.read()
                    .cast(gradtape::DType::F16)?
                    .mul(x)?
                    .sum_all()?
                    .cast(gradtape::DType::F32)
            })?;
            traced
                .lock()
                .unwrap()
                .minimize(&tape, &loss, std::slice::from_ref(&wt))?;
            Ok(loss)
        })
    };
    f.call(&Tensor::vector(&[1e3f32, 1.0]).cast(gradtape::DType::F16)?)?;
    let traced = traced.lock().unwrap();
    assert!(traced.last_step_skipped());
    assert_eq!(wt.read().to_vec::<f32>()?, vec![0.5, -0.25], "skipped");
    assert_eq!(values(&traced), values(&eager));
    assert_eq!(names(&traced).len(), names(&eager).len());
    Ok(())
}
