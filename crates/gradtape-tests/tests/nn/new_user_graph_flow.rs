//! Two models a new user would write, against TensorFlow 2.21 / Keras 3.15.1
//! in float64 (`tests/reference/new_user_models2.py`, numbers in
//! `tests/data/new_user_models2.txt`): a graph neural network step (gather
//! by edge index, unsorted segment mean / max / sum message passing with a
//! per-destination softmax, a segment-mean readout; Adam) and a RealNVP
//! normalizing flow (split, concat, exp, log-det sums, negative
//! log-likelihood; Adam; then sampling through the inverse). Each runs
//! eagerly and as a traced `function` called twice (two training steps),
//! and every output, gradient and updated weight is compared at 1e-12
//! relative (see `new_user_util.rs`).

use std::f64::consts::PI;
use std::sync::{Arc, Mutex};

use gradtape::nn::{Activation, Dense, Layer, Module};
use gradtape::optim::{Adam, Optimizer};
use gradtape::{function, DType, GradientTape, Result, Tensor, Variable};

use super::new_user_util::{adam, all_some, dense, eager_vs_traced, fill, names, print_times, set_weights, Check};

// ---- 1. Graph neural network ------------------------------------------------

const SRC: [i64; 11] = [0, 1, 2, 3, 1, 4, 5, 6, 5, 0, 2];
const DST: [i64; 11] = [1, 0, 3, 2, 2, 5, 4, 5, 4, 3, 1];
const GRAPH: [i64; 7] = [0, 0, 0, 0, 1, 1, 1];
const NODES: usize = 7;

struct Gnn {
    self_l: Dense,
    nb: Dense,
    z: Dense,
    a_src: Variable,
    a_dst: Variable,
    head: Dense,
}

impl Gnn {
    fn new() -> Result<Gnn> {
        let zeros = || Variable::new(Tensor::zeros(&[4, 1], DType::F64));
        let m = Gnn {
            self_l: dense(3, 4, None, true)?,
            nb: dense(3, 4, None, true)?,
            z: dense(4, 4, None, false)?,
            a_src: zeros(),
            a_dst: zeros(),
            head: dense(4, 1, None, true)?,
        };
        set_weights(&m.vars(), 50.0);
        // larger attention weights, so that the leaky relu's two slopes occur
        for v in [&m.a_src, &m.a_dst] {
            v.assign(&v.read().mul_scalar(4.0)?)?;
        }
        Ok(m)
    }

    fn vars(&self) -> Vec<Variable> {
        let mut v = self.self_l.trainable_variables();
        v.extend(self.nb.trainable_variables());
        v.extend(self.z.trainable_variables());
        v.extend([self.a_src.clone(), self.a_dst.clone()]);
        v.extend(self.head.trainable_variables());
        v
    }

    /// The attention weights per edge, the prediction per graph, the loss.
    fn forward(&self, x: &Tensor, ew: &Tensor, y: &Tensor) -> Result<[Tensor; 3]> {
        let (src, dst, gid) = (Tensor::vector(&SRC), Tensor::vector(&DST), Tensor::vector(&GRAPH));
        let m = x.gather(&src, 0)?.mul(&ew.expand_dims(-1)?)?;
        let agg = m.unsorted_segment_mean(&dst, NODES)?;
        let h1 = self.self_l.call(x)?.add(&self.nb.call(&agg)?)?.tanh()?;
        let z = self.z.call(&h1)?;
        let score = z
            .gather(&src, 0)?
            .matmul(&self.a_src.read())?
            .add(&z.gather(&dst, 0)?.matmul(&self.a_dst.read())?)?
            .leaky_relu(0.25)?;
        let mx = score.unsorted_segment_max(&dst, NODES)?;
        let ex = score.sub(&mx.gather(&dst, 0)?)?.exp()?;
        let den = ex.unsorted_segment_sum(&dst, NODES)?;
        let alpha = ex.div(&den.gather(&dst, 0)?)?;
        let out = alpha.mul(&z.gather(&src, 0)?)?.unsorted_segment_sum(&dst, NODES)?;
        let h2 = out.add(&h1)?.tanh()?;
        let pred = self.head.call(&h2.segment_mean(&gid)?)?;
        let loss = pred.sub(y)?.square()?.mean_all()?;
        Ok([alpha, pred, loss])
    }
}

fn gnn_step(m: &Gnn, opt: &mut Adam, x: &Tensor, ew: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
    let vars = m.vars();
    let tape = GradientTape::new();
    let out = tape.record(|| m.forward(x, ew, y))?;
    let grads = tape.gradient(&out[2], &vars)?;
    opt.apply_gradients(grads.clone().into_iter().zip(&vars))?;
    Ok(out.into_iter().chain(all_some(grads, "gnn")).collect())
}

fn gnn_data() -> Result<(Tensor, Tensor, Tensor)> {
    Ok((
        fill(&[NODES, 3], 0.6, 2.0),
        fill(&[11], 1.7, 1.0).add_scalar(1.0)?,
        fill(&[2, 1], 2.9, 1.0),
    ))
}

type Step<M, O> = fn(&M, &mut O, &Tensor, &Tensor, &Tensor) -> Result<Vec<Tensor>>;

/// The model's step eagerly and as a traced function (called twice: two
/// steps), each from fresh weights and optimizer, against the reference.
fn eager_and_traced<M: Send + Sync + 'static, O: Send + 'static>(
    check: &mut Check,
    model: fn() -> Result<M>,
    opt: fn() -> O,
    step: Step<M, O>,
    data: &(Tensor, Tensor, Tensor),
    out_names: impl Fn(usize) -> Vec<String>,
    (vars, weight_prefix): (fn(&M) -> Vec<Variable>, &str),
) -> Result<Vec<Arc<M>>> {
    let mut models = Vec::new();
    for traced in [false, true] {
        let what = if traced { "traced" } else { "eager" };
        let m = Arc::new(model()?);
        let o = Arc::new(Mutex::new(opt()));
        let f = {
            let (m, o) = (m.clone(), o.clone());
            function(move |(a, b, c): &(Tensor, Tensor, Tensor)| step(&m, &mut o.lock().unwrap(), a, b, c))
        };
        for s in 1..=2 {
            let got = if traced {
                f.call(data)?
            } else {
                step(&m, &mut o.lock().unwrap(), &data.0, &data.1, &data.2)?
            };
            check.all(what, &out_names(s), &got);
        }
        if traced {
            assert_eq!(f.trace_count(), 1, "the second step ran the first trace's graph");
        }
        check.vars(what, weight_prefix, &vars(&m));
        models.push(m);
    }
    Ok(models)
}

#[test]
fn graph_neural_network_step_matches_tensorflow() -> Result<()> {
    let mut check = Check::new();
    eager_and_traced(
        &mut check,
        Gnn::new,
        adam,
        gnn_step,
        &gnn_data()?,
        |s| names(&format!("gnn{s}"), &["alpha", "pred", "loss"], &[("grad", 9)]),
        (Gnn::vars, "gnn_weight"),
    )?;
    check.finish("gnn", 300);
    Ok(())
}

// ---- 2. RealNVP normalizing flow ----------------------------------------------

struct Coupling {
    h: Dense,
    s: Dense,
    t: Dense,
    scale: Variable,
}

struct Flow(Vec<Coupling>);

impl Flow {
    fn new() -> Result<Flow> {
        let f = Flow(
            (0..3)
                .map(|_| {
                    Ok(Coupling {
                        h: dense(2, 8, Some(Activation::Tanh), true)?,
                        s: dense(8, 2, None, true)?,
                        t: dense(8, 2, None, true)?,
                        scale: Variable::new(Tensor::zeros(&[2], DType::F64)),
                    })
                })
                .collect::<Result<_>>()?,
        );
        set_weights(&f.vars(), 60.0);
        Ok(f)
    }

    fn vars(&self) -> Vec<Variable> {
        let mut v = Vec::new();
        for c in &self.0 {
            v.extend(c.h.trainable_variables());
            v.extend(c.s.trainable_variables());
            v.extend(c.t.trainable_variables());
            v.push(c.scale.clone());
        }
        v
    }

    /// s and t of a coupling, from the half it conditions on.
    fn st(c: &Coupling, x1: &Tensor) -> Result<(Tensor, Tensor)> {
        let h = c.h.call(x1)?;
        Ok((c.scale.read().mul(&c.s.call(&h)?.tanh()?)?, c.t.call(&h)?))
    }

    /// z, the log-determinant per example, and the negative log-likelihood.
    fn forward(&self, x: &Tensor) -> Result<[Tensor; 3]> {
        let mut x = x.clone();
        let mut logdet = Tensor::zeros(&[x.shape()[0]], DType::F64);
        for c in &self.0 {
            let halves = x.split(2, 1)?;
            let (s, t) = Flow::st(c, &halves[0])?;
            let y2 = halves[1].mul(&s.exp()?)?.add(&t)?;
            x = Tensor::concat(&[&y2, &halves[0]], 1)?;
            logdet = logdet.add(&s.sum(&[1], false)?)?;
        }
        let logp = x
            .square()?
            .sum(&[1], false)?
            .mul_scalar(-0.5)?
            .sub_scalar(2.0 * (2.0 * PI).ln())?;
        let nll = logp.add(&logdet)?.mean_all()?.neg()?;
        Ok([x, logdet, nll])
    }

    /// x from z: the couplings undone in reverse order.
    fn inverse(&self, z: &Tensor) -> Result<Tensor> {
        let mut z = z.clone();
        for c in self.0.iter().rev() {
            let halves = z.split(2, 1)?;
            let (s, t) = Flow::st(c, &halves[1])?;
            let x2 = halves[0].sub(&t)?.mul(&s.neg()?.exp()?)?;
            z = Tensor::concat(&[&halves[1], &x2], 1)?;
        }
        Ok(z)
    }
}

fn flow_step(m: &Flow, opt: &mut Adam, x: &Tensor, _: &Tensor, _: &Tensor) -> Result<Vec<Tensor>> {
    let vars = m.vars();
    let tape = GradientTape::new();
    let out = tape.record(|| m.forward(x))?;
    let grads = tape.gradient(&out[2], &vars)?;
    opt.apply_gradients(grads.clone().into_iter().zip(&vars))?;
    Ok(out.into_iter().chain(all_some(grads, "flow")).collect())
}

fn flow_data() -> (Tensor, Tensor, Tensor) {
    let none = Tensor::scalar(0.0f64);
    (fill(&[8, 4], 0.45, 2.5), none.clone(), none)
}

#[test]
fn realnvp_flow_matches_tensorflow() -> Result<()> {
    let mut check = Check::new();
    let models = eager_and_traced(
        &mut check,
        Flow::new,
        adam,
        flow_step,
        &flow_data(),
        |s| names(&format!("flow{s}"), &["z", "logdet", "nll"], &[("grad", 21)]),
        (Flow::vars, "flow_weight"),
    )?;
    // sampling with the trained weights: eagerly and traced
    let z = fill(&[5, 4], 1.3, 2.0);
    let m = models[0].clone();
    check.one("eager", "flow_sample", Some(&m.inverse(&z)?));
    let m = models[1].clone();
    let sample = function(move |z: &Tensor| m.inverse(z));
    check.one("traced", "flow_sample", Some(&sample.call(&z)?));
    check.finish("flow", 600);
    Ok(())
}

/// Eager and traced time per training step (a release-mode measurement,
/// printed; run with `--ignored --nocapture`).
#[test]
#[ignore]
fn graph_and_flow_eager_vs_traced_time() -> Result<()> {
    fn time<M: Send + Sync + 'static>(
        label: &str,
        sizes: &str,
        model: fn() -> Result<M>,
        step: Step<M, Adam>,
        data: (Tensor, Tensor, Tensor),
    ) -> Result<()> {
        let (m, mut o) = (model()?, adam());
        let (m2, o2) = (Arc::new(model()?), Arc::new(Mutex::new(adam())));
        let f = function(move |(a, b, c): &(Tensor, Tensor, Tensor)| step(&m2, &mut o2.lock().unwrap(), a, b, c));
        let (eager, traced) = eager_vs_traced(
            200,
            || step(&m, &mut o, &data.0, &data.1, &data.2).map(drop),
            || f.call(&data).map(drop),
        );
        print_times(label, sizes, eager, traced);
        Ok(())
    }
    time(
        "gnn",
        "7 nodes, 11 edges, 3->4 features",
        Gnn::new,
        gnn_step,
        gnn_data()?,
    )?;
    time(
        "realnvp",
        "batch 8, 4 features, 3 couplings, hidden 8",
        Flow::new,
        flow_step,
        flow_data(),
    )?;
    Ok(())
}
