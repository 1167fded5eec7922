//! mlp_step: one SGD step of a 784-512-512-10 ReLU network on a batch of 128,
//! mean sparse softmax cross-entropy, with `Variable`s and a `GradientTape`;
//! and the same network built from the library's layers, trained with its
//! SGD (`mlp_step_layers`, to measure the layer API's cost) or with Adam
//! (`mlp_step_adam`). These two are gradtape's own workloads, not in
//! `WORKLOADS.md`.

use gradtape::nn::{losses, Activation, Dense, Layer, Module, Sequential};
use gradtape::optim::{Adam, Optimizer, Sgd};
use std::sync::Mutex;

use gradtape::{GradientTape, Result, Tensor, Variable};

use crate::traced::{measure, Mode, Timing};
use crate::{init, Report};

const TIMING: Timing = Timing::first(20, 2);

/// Labels `i % 10` for a batch of `n`.
pub(crate) fn labels(n: usize) -> Tensor {
    crate::on_device(Tensor::vector(&(0..n as i64).map(|i| i % 10).collect::<Vec<_>>()))
}

/// The workload of WORKLOADS.md; checksum `[loss, sum|dW1|]` of the first step.
pub(crate) fn mlp_step(mode: Mode) -> Result<Report> {
    let params: Vec<Variable> = vec![
        Variable::new(init(&[784, 512], 1.0, (2.0f64 / 784.0).sqrt())),
        Variable::new(crate::zeros(&[512])),
        Variable::new(init(&[512, 512], 2.0, (2.0f64 / 512.0).sqrt())),
        Variable::new(crate::zeros(&[512])),
        Variable::new(init(&[512, 10], 3.0, (2.0f64 / 512.0).sqrt())),
        Variable::new(crate::zeros(&[10])),
    ];
    let body = move |(x, y): &(Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let p: Vec<Tensor> = params.iter().map(Variable::read).collect();
            let h = x.matmul(&p[0])?.bias_add(&p[1])?.relu()?;
            let h = h.matmul(&p[2])?.bias_add(&p[3])?.relu()?;
            let logits = h.matmul(&p[4])?.bias_add(&p[5])?;
            Tensor::sparse_softmax_cross_entropy_with_logits(y, &logits)?.mean_all()
        })?;
        let grads = tape.gradient(&loss, &params[..])?;
        let mut first = None;
        for (v, g) in params.iter().zip(grads) {
            let g = g.ok_or_else(|| gradtape::Error::InvalidArgument {
                op: "mlp_step",
                msg: "no gradient for a variable".into(),
            })?;
            v.apply_gradient_descent(0.01, &g)?;
            if first.is_none() {
                first = Some(g);
            }
        }
        let dw1 = first.ok_or_else(|| gradtape::Error::InvalidArgument {
            op: "mlp_step",
            msg: "no variables".into(),
        })?;
        Ok(vec![loss, dw1.abs()?.sum_all()?])
    };
    measure(mode, (init(&[128, 784], 0.1, 0.5), labels(128)), body, TIMING)
}

/// The same network as gradtape layers: `Dense` (ReLU, ReLU, linear) in a
/// `Sequential`, with the workload's initial weights.
pub(crate) fn layers_model() -> Result<Sequential> {
    let dense = |name: &str, shape: [usize; 2], k: f64, act| {
        let w = init(&shape, k, (2.0f64 / shape[0] as f64).sqrt());
        Dense::from_weights(name, w, Some(crate::zeros(&[shape[1]])), act)
    };
    Ok(Sequential::new()
        .add(dense("dense", [784, 512], 1.0, Activation::Relu)?)
        .add(dense("dense_1", [512, 512], 2.0, Activation::Relu)?)
        .add(dense("dense_2", [512, 10], 3.0, Activation::Linear)?))
}

/// One step of `model` with `opt`: forward, loss, gradients, update;
/// returns `[loss, sum|dW1|]`.
fn layers_step(
    model: &Sequential,
    vars: &[Variable],
    opt: &mut impl Optimizer,
    x: &Tensor,
    y: &Tensor,
) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let loss = tape.record(|| losses::sparse_categorical_crossentropy(y, &model.forward(x, true)?, true))?;
    let grads = tape.gradient(&loss, vars)?;
    let dw1 = grads[0].clone().ok_or_else(|| gradtape::Error::InvalidArgument {
        op: "mlp_step",
        msg: "no gradient for W1".into(),
    })?;
    opt.apply_gradients(grads.into_iter().zip(vars))?;
    Ok(vec![loss, dw1.abs()?.sum_all()?])
}

fn layers_workload(mode: Mode, opt: impl Optimizer + Send + 'static) -> Result<Report> {
    let model = layers_model()?;
    let vars = model.trainable_variables();
    // the step is a `Fn` (a traced function's body): the optimizer, whose
    // state changes at each step, sits behind a lock
    let opt = Mutex::new(opt);
    let body = move |(x, y): &(Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let mut opt = opt.lock().unwrap_or_else(|e| e.into_inner());
        layers_step(&model, &vars, &mut *opt, x, y)
    };
    measure(mode, (init(&[128, 784], 0.1, 0.5), labels(128)), body, TIMING)
}

/// mlp_step with the library's layers and its SGD optimizer (lr 0.01):
/// the same computation as the hand-written [`mlp_step`], so the difference
/// in time is the cost of the layer and optimizer API.
pub(crate) fn mlp_step_layers(mode: Mode) -> Result<Report> {
    layers_workload(mode, Sgd::new(0.01))
}

/// mlp_step with the library's layers and Adam (lr 0.001, Keras's
/// defaults) instead of SGD; the checksum (first step, before any update)
/// is mlp_step's.
pub(crate) fn mlp_step_adam(mode: Mode) -> Result<Report> {
    layers_workload(mode, Adam::new(0.001))
}
