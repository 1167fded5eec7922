//! A training step (tape, loss, gradient, optimizer update) as one traced
//! graph function: traced once, then run as a graph at every step.
//!
//! The model is a small tanh MLP fitting `y = sin(x₀) + x₁ x₂ / 2` on a
//! fixed batch, trained with Adam. The same steps run eagerly (op by op,
//! under a tape) and traced, from the same initial weights; the example
//! prints the losses, the trace count (1: every step reuses the first
//! trace), the traced graph, the time per step of both, and checks that
//! both runs end with the same weights.
//!
//! ```sh
//! cargo run --release --example traced_training
//! ```

use std::sync::Mutex;
use std::time::Instant;

use gradtape::optim::{Adam, Optimizer};
use gradtape::{function, GradientTape, Result, Tensor, Variable};

const BATCH: usize = 256;
const IN: usize = 3;
const HIDDEN: usize = 64;
const STEPS: usize = 300;

/// `n` values `scale · sin(0.37 i + k)`, as the bench's inputs.
fn init(shape: &[usize], k: f64, scale: f64) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    Tensor::from_vec(
        (0..n).map(|i| (scale * (0.37 * i as f64 + k).sin()) as f32).collect(),
        shape,
    )
}

/// The model's variables, the same at every call.
fn model() -> Result<Vec<Variable>> {
    let var = |name: &str, t: Tensor| Variable::builder(t).name(name).build();
    Ok(vec![
        var("w1", init(&[IN, HIDDEN], 1.0, (1.0 / IN as f64).sqrt())?),
        var("b1", Tensor::zeros(&[HIDDEN], gradtape::DType::F32)),
        var("w2", init(&[HIDDEN, 1], 2.0, (1.0 / HIDDEN as f64).sqrt())?),
        var("b2", Tensor::zeros(&[1], gradtape::DType::F32)),
    ])
}

/// The batch: inputs in [-1, 1] and their targets.
fn batch() -> Result<(Tensor, Tensor)> {
    let x = init(&[BATCH, IN], 0.3, 1.0)?;
    let v = x.to_vec::<f32>()?;
    let y: Vec<f32> = v.chunks(IN).map(|r| r[0].sin() + r[1] * r[2] / 2.0).collect();
    Ok((x, Tensor::from_vec(y, &[BATCH, 1])?))
}

/// One training step: forward, mean squared error, gradients, Adam update.
/// Returns the loss (before the update).
fn step(vars: &[Variable], opt: &Mutex<Adam>, x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        let h = x.matmul(&vars[0].read())?.add(&vars[1].read())?.tanh()?;
        let pred = h.matmul(&vars[2].read())?.add(&vars[3].read())?;
        pred.sub(y)?.square()?.mean_all()
    })?;
    let grads = tape.gradient(&loss, vars)?;
    opt.lock()
        .unwrap_or_else(|e| e.into_inner())
        .apply_gradients(grads.into_iter().zip(vars))?;
    Ok(loss)
}

/// Runs `STEPS` steps of `f`, printing the loss now and then; returns the
/// median time of a step in milliseconds (the first step, which traces,
/// excluded).
fn train(label: &str, mut f: impl FnMut() -> Result<Tensor>) -> Result<f64> {
    let mut times = Vec::with_capacity(STEPS);
    for i in 0..STEPS {
        let start = Instant::now();
        let loss = f()?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        if i % 100 == 0 || i == STEPS - 1 {
            println!("{label} step {i:>3}: loss {:.6}", loss.item()?);
        }
    }
    let mut t = times[1..].to_vec();
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

fn main() -> Result<()> {
    let (x, y) = batch()?;

    // eagerly: every op runs under the tape at every step
    let eager_vars = model()?;
    let eager_opt = Mutex::new(Adam::new(0.01));
    let eager_ms = train("eager ", || step(&eager_vars, &eager_opt, &x, &y))?;

    // traced: the same step as one graph function; the variables and the
    // optimizer are captured (by reference: the graph reads and writes them
    // at each call), the batch is the argument
    let traced_vars = model()?;
    let traced_opt = Mutex::new(Adam::new(0.01));
    let train_step = {
        let vars = traced_vars.clone();
        function(move |(x, y): &(Tensor, Tensor)| step(&vars, &traced_opt, x, y))
    };
    let args = (x.clone(), y.clone());
    let traced_ms = train("traced", || train_step.call(&args))?;

    println!("\ntraces: {} (one trace serves every step)", train_step.trace_count());
    println!("\nthe traced step:\n{}", train_step.graph(&args)?);
    println!("\ntime per step (median): eager {eager_ms:.3} ms, traced {traced_ms:.3} ms");

    // both runs made the same updates
    let mut worst = 0.0f64;
    for (a, b) in eager_vars.iter().zip(&traced_vars) {
        for (p, q) in a.read().to_vec::<f32>()?.iter().zip(b.read().to_vec::<f32>()?) {
            worst = worst.max((p - q).abs() as f64);
        }
    }
    println!("largest difference between the eager and the traced weights: {worst:.2e}");
    assert_eq!(train_step.trace_count(), 1);
    assert!(worst < 1e-4, "the eager and traced runs diverged");
    Ok(())
}
