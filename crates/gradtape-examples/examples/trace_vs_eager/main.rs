//! Tracing never loses (issue 28 item 5): one training step of each of a
//! range of models, run eagerly and as a traced [`gradtape::function`],
//! timed side by side. A harness, not a test: it asserts nothing about
//! time; it checks that the two give the same numbers and prints how long
//! each takes.
//!
//! ```text
//! cargo run --release -p gradtape-examples --example trace_vs_eager             # every model
//! cargo run --release -p gradtape-examples --example trace_vs_eager -- rnn pgd  # names containing these
//! cargo run --release -p gradtape-examples --example trace_vs_eager -- --steps 60
//! cargo run --release -p gradtape-examples --example trace_vs_eager -- --traced-only rnn_loop_s
//! ```
//!
//! (On a shared machine wrap it in a script that keeps other work off the
//! cores while it runs; compare ratios within one run, never times across
//! runs.)
//!
//! For each model two copies are built from the same seed (the same
//! initial weights and optimizer), one stepped eagerly (op by op under the
//! tape), the other through `function` (traced at its first call, then run
//! as a graph). Three steps of each run first on the same batch; their
//! outputs (loss, and what else the step returns) and every weight after
//! each step must agree to a relative 1e-3 of the largest magnitude (or
//! of 1e-4 where all are smaller; f32:
//! the compiled graph sums in another order; the worst difference is
//! printed), else the model is reported as DIFFERENT and not timed. Then
//! the two run alternately, `--steps` steps each (default 30), and the
//! median time per step of each is printed with the ratio traced / eager:
//! above 1.00 tracing lost. `--traced-only NAME` (`--eager-only NAME`)
//! runs one model's traced (eager) step alone for 8 seconds and prints its
//! mean time (to profile it: `perf record -g -- <binary> --traced-only
//! NAME`). `--profile NAME` prints the time per node of the traced step
//! (`gradtape::function::compile::profile`, 50 steps; a loop's line
//! includes its body's nodes, which have lines of their own).
//!
//! Models (small sizes expose per-op and per-node overhead, large ones
//! kernel quality):
//!
//! - `mlp_s`, `mlp_l`: Dense layers (ReLU) and softmax cross-entropy, SGD.
//! - `cnn_s`, `cnn_l`: Conv2D + max pool twice, a Dense head, Adam.
//! - `rnn_loop_*`: a tanh RNN written as a `while_loop` (its input row read
//!   with `gather` at the counter), the gradient through the loop, SGD;
//!   several batch / hidden / length sizes.
//! - `lstm`, `gru`: the `nn` layers over a sequence, a Dense head, Adam.
//! - `pgd_*`: adversarial training: a 5-step PGD attack as a `while_loop`
//!   inside the training tape (each step an inner tape's input gradient),
//!   then the loss on clean and adversarial inputs, SGD with momentum.
//! - `transformer_*`: pre-LayerNorm causal `TransformerBlock`s on
//!   embedded tokens, tied output projection, Adam.
//! - `encdec`: an encoder block and a decoder block with cross-attention.
//! - `cond_*`: an MLP whose middle layer is a `cond` on a value of the
//!   batch (ReLU or tanh branch), SGD.
//! - `ode_loop`: a neural ODE (8 Euler steps of a small MLP in a
//!   `while_loop`), MSE, Adam.
//! - `count_loop`: an RNN's recurrence as a `while_loop` run to a count
//!   given as data, forward only: no tape, no update.
//!
//! Models a new user would write from the docs (`new_models.rs`):
//!
//! - `vit`: patches by reshape and permute, a class token and positions,
//!   two pre-LN blocks of `MultiHeadAttention` and a GELU MLP, Adam.
//! - `conv_ae`: stride-2 `Conv2D`s down, `Conv2DTranspose`s up, sigmoid,
//!   MSE, Adam.
//! - `wavenet`: dilated causal `Conv1D`s with gated `tanh * sigmoid` units,
//!   residuals and skips, MSE, Adam.
//! - `bn_mlp`: Dense + BatchNorm (training) + ReLU + Dropout twice, an L2
//!   penalty in the loss, Adam.
//! - `gnn`: message passing by `gather` of edge sources and
//!   `unsorted_segment_sum` into targets, Dense updates, MSE, Adam.
//! - `vae`: a VAE with its noise drawn from an `Rng` inside the step,
//!   binary cross-entropy plus KL, Adam.
//! - `rk4_chain`: a damped spring-mass chain, 50 RK4 steps unrolled in
//!   Rust, the mean final energy's gradient to the stiffnesses, SGD.
//! - `newton_hvp`: a Hessian-vector product (reverse over reverse) in the
//!   step for the exact step length along the gradient, `assign_sub`.

mod more_models;
mod new_models;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use gradtape::nn::{
    losses, Activation, BlockArgs, Conv2D, Dense, Embedding, Flatten, Layer, Module, Pool2D, PoolKind,
    TransformerBlock, GRU, LSTM,
};
use gradtape::optim::{Adam, Optimizer, Sgd};
use more_models::{cond_mlp, count_loop, encdec, gpt, ode};
use new_models::{bn_mlp, conv_ae, gnn, newton, rk4, vae, vit, wavenet};

use gradtape::{cond, function, while_loop, DType, GradientTape, Padding, Result, Rng, Tensor, Variable, WhileOptions};

const F: DType = DType::F32;

/// One training step of a model.
trait Model: Send + Sync + 'static {
    /// Every weight the step changes (compared after each step).
    fn vars(&self) -> Vec<Variable>;
    /// The step on a batch: its outputs (the loss first).
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>>;
}

fn vars_of(layers: &[&dyn Layer]) -> Vec<Variable> {
    layers.iter().flat_map(|l| l.variables()).collect()
}

fn dense(i: usize, o: usize, act: Activation, rng: &mut Rng) -> Result<Dense> {
    Dense::builder(i, o).activation(act).build(rng)
}

/// Applies the gradients of `loss` (from `tape`) to `vars`.
fn apply<O: Optimizer>(opt: &Mutex<O>, tape: &GradientTape, loss: &Tensor, vars: &[Variable]) -> Result<()> {
    let g = tape.gradient(loss, vars)?;
    opt.lock().unwrap().apply_gradients(g.into_iter().zip(vars))
}

fn labels(rng: &mut Rng, n: usize, classes: usize) -> Result<Tensor> {
    let u = rng.uniform(&[n], 0.0, classes as f64, DType::F64)?.to_vec::<f64>()?;
    Ok(Tensor::vector(
        &u.iter()
            .map(|v| (*v as i64).min(classes as i64 - 1))
            .collect::<Vec<i64>>(),
    ))
}

// ---- MLP -----------------------------------------------------------------

struct Mlp {
    layers: Vec<Dense>,
    opt: Mutex<Sgd>,
}

impl Model for Mlp {
    fn vars(&self) -> Vec<Variable> {
        self.layers.iter().flat_map(|l| l.variables()).collect()
    }
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let h = self.layers.iter().try_fold(d[0].clone(), |h, l| l.call(&h))?;
            losses::sparse_categorical_crossentropy(&d[1], &h, true)
        })?;
        apply(&self.opt, &tape, &loss, &vars)?;
        Ok(vec![loss])
    }
}

fn mlp(sizes: &[usize], batch: usize) -> Result<(impl Fn() -> Result<Mlp>, Vec<Tensor>)> {
    let sizes = sizes.to_vec();
    let mut rng = Rng::new(11);
    let data = vec![
        rng.normal(&[batch, sizes[0]], 0.0, 1.0, F)?,
        labels(&mut rng, batch, *sizes.last().unwrap())?,
    ];
    let build = move || {
        let rng = &mut Rng::new(1);
        let n = sizes.len() - 1;
        let layers = (0..n)
            .map(|k| {
                let act = if k + 1 < n {
                    Activation::Relu
                } else {
                    Activation::Linear
                };
                dense(sizes[k], sizes[k + 1], act, rng)
            })
            .collect::<Result<_>>()?;
        Ok(Mlp {
            layers,
            opt: Mutex::new(Sgd::new(0.05)),
        })
    };
    Ok((build, data))
}

// ---- CNN -----------------------------------------------------------------

struct Cnn {
    convs: [Conv2D; 2],
    pool: Pool2D,
    head: Dense,
    opt: Mutex<Adam>,
}

impl Model for Cnn {
    fn vars(&self) -> Vec<Variable> {
        vars_of(&[&self.convs[0], &self.convs[1], &self.head])
    }
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let h = self.pool.call(&self.convs[0].call(&d[0])?)?;
            let h = self.pool.call(&self.convs[1].call(&h)?)?;
            let logits = self.head.call(&Flatten::new().call(&h)?)?;
            losses::sparse_categorical_crossentropy(&d[1], &logits, true)
        })?;
        apply(&self.opt, &tape, &loss, &vars)?;
        Ok(vec![loss])
    }
}

fn cnn(batch: usize, side: usize, c: [usize; 2]) -> Result<(impl Fn() -> Result<Cnn>, Vec<Tensor>)> {
    let mut rng = Rng::new(12);
    let data = vec![
        rng.normal(&[batch, side, side, 1], 0.0, 1.0, F)?,
        labels(&mut rng, batch, 10)?,
    ];
    let build = move || {
        let rng = &mut Rng::new(2);
        let conv = |i, o, rng: &mut Rng| {
            Conv2D::builder(i, o, [3, 3])
                .padding(Padding::Same)
                .activation(Activation::Relu)
                .build(rng)
        };
        Ok(Cnn {
            convs: [conv(1, c[0], rng)?, conv(c[0], c[1], rng)?],
            pool: Pool2D::new(PoolKind::Max, [2, 2], [2, 2], Padding::Valid),
            head: dense((side / 4) * (side / 4) * c[1], 10, Activation::Linear, rng)?,
            opt: Mutex::new(Adam::new(1e-3)),
        })
    };
    Ok((build, data))
}

// ---- RNN as a while_loop --------------------------------------------------

struct RnnLoop {
    w: Variable,
    u: Variable,
    b: Variable,
    head: Dense,
    opt: Mutex<Sgd>,
}

impl Model for RnnLoop {
    fn vars(&self) -> Vec<Variable> {
        let mut v = vec![self.w.clone(), self.u.clone(), self.b.clone()];
        v.extend(self.head.variables());
        v
    }
    /// data: xs [t, batch, in], targets [batch, 1]
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let (xs, y) = (&d[0], &d[1]);
        let (t, batch) = (xs.shape()[0], xs.shape()[1]);
        let units = self.u.shape()[0];
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let out = while_loop(
                |v: &Vec<Tensor>| v[0].lt_scalar(t as f64),
                |v: &Vec<Tensor>| {
                    let x = xs.gather(&v[0], 0)?;
                    let h = x
                        .matmul(&self.w.read())?
                        .add(&v[1].matmul(&self.u.read())?)?
                        .add(&self.b.read())?
                        .tanh()?;
                    Ok(vec![v[0].add_scalar(1.0)?, h])
                },
                vec![Tensor::scalar(0i64), Tensor::zeros(&[batch, units], F)],
                WhileOptions::default(),
            )?;
            losses::mean_squared_error(y, &self.head.call(&out[1])?)
        })?;
        apply(&self.opt, &tape, &loss, &vars)?;
        Ok(vec![loss])
    }
}

fn rnn_loop(batch: usize, input: usize, units: usize, t: usize) -> Result<(impl Fn() -> Result<RnnLoop>, Vec<Tensor>)> {
    let mut rng = Rng::new(13);
    let data = vec![
        rng.normal(&[t, batch, input], 0.0, 1.0, F)?,
        rng.normal(&[batch, 1], 0.0, 1.0, F)?,
    ];
    let build = move || {
        let rng = &mut Rng::new(3);
        Ok(RnnLoop {
            w: Variable::new(rng.normal(&[input, units], 0.0, 1.0 / (input as f64).sqrt(), F)?),
            u: Variable::new(rng.normal(&[units, units], 0.0, 0.5 / (units as f64).sqrt(), F)?),
            b: Variable::new(Tensor::zeros(&[units], F)),
            head: dense(units, 1, Activation::Linear, rng)?,
            opt: Mutex::new(Sgd::new(0.01)),
        })
    };
    Ok((build, data))
}

// ---- LSTM / GRU layers ---------------------------------------------------

struct Recurrent<L: Layer> {
    rnn: L,
    head: Dense,
    opt: Mutex<Adam>,
}

impl<L: Layer + 'static> Model for Recurrent<L> {
    fn vars(&self) -> Vec<Variable> {
        vars_of(&[&self.rnn, &self.head])
    }
    /// data: xs [batch, t, in], labels [batch]
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let logits = self.head.call(&self.rnn.call(&d[0])?)?;
            losses::sparse_categorical_crossentropy(&d[1], &logits, true)
        })?;
        apply(&self.opt, &tape, &loss, &vars)?;
        Ok(vec![loss])
    }
}

fn recurrent<L: Layer + 'static>(
    batch: usize,
    input: usize,
    units: usize,
    t: usize,
    make: impl Fn(&mut Rng) -> Result<L>,
) -> Result<(impl Fn() -> Result<Recurrent<L>>, Vec<Tensor>)> {
    let mut rng = Rng::new(14);
    let data = vec![
        rng.normal(&[batch, t, input], 0.0, 1.0, F)?,
        labels(&mut rng, batch, 5)?,
    ];
    let build = move || {
        let rng = &mut Rng::new(4);
        Ok(Recurrent {
            rnn: make(rng)?,
            head: dense(units, 5, Activation::Linear, rng)?,
            opt: Mutex::new(Adam::new(1e-3)),
        })
    };
    Ok((build, data))
}

// ---- PGD adversarial training --------------------------------------------

struct Pgd {
    net: (Dense, Dense),
    opt: Mutex<Sgd>,
}

impl Pgd {
    fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        losses::sparse_categorical_crossentropy(y, &self.net.1.call(&self.net.0.call(x)?)?, true)
    }
    /// One ascent step: `x + 0.01 sign(∇x loss)`, kept within 0.03 of the
    /// clean input.
    fn ascend(&self, x_adv: &Tensor, y: &Tensor, lo: &Tensor, hi: &Tensor) -> Result<Tensor> {
        let t = GradientTape::new();
        let l = t.record(|| {
            t.watch(x_adv);
            self.loss(x_adv, y)
        })?;
        let g = t.gradient(&l, x_adv)?.expect("the input gradient");
        x_adv.add(&g.sign()?.mul_scalar(0.01)?)?.clip_by_tensors(lo, hi)
    }
}

impl Model for Pgd {
    fn vars(&self) -> Vec<Variable> {
        vars_of(&[&self.net.0, &self.net.1])
    }
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let (x, y) = (&d[0], &d[1]);
        let vars = self.vars();
        let tape = GradientTape::new();
        let (loss, x_adv) = tape.record(|| {
            let (lo, hi) = (x.add_scalar(-0.03)?, x.add_scalar(0.03)?);
            let x_adv = while_loop(
                |v: &Vec<Tensor>| v[0].lt_scalar(5.0),
                |v: &Vec<Tensor>| Ok(vec![v[0].add_scalar(1.0)?, self.ascend(&v[1], y, &lo, &hi)?]),
                vec![Tensor::scalar(0i64), x.clone()],
                WhileOptions::default(),
            )?[1]
                .clone();
            let loss = self.loss(x, y)?.add(&self.loss(&x_adv, y)?)?.mul_scalar(0.5)?;
            Ok((loss, x_adv))
        })?;
        apply(&self.opt, &tape, &loss, &vars)?;
        Ok(vec![loss, x_adv])
    }
}

fn pgd(batch: usize, features: usize, hidden: usize) -> Result<(impl Fn() -> Result<Pgd>, Vec<Tensor>)> {
    let mut rng = Rng::new(15);
    let data = vec![
        rng.normal(&[batch, features], 0.0, 1.0, F)?,
        labels(&mut rng, batch, 10)?,
    ];
    let build = move || {
        let rng = &mut Rng::new(5);
        Ok(Pgd {
            net: (
                dense(features, hidden, Activation::Relu, rng)?,
                dense(hidden, 10, Activation::Linear, rng)?,
            ),
            opt: Mutex::new(Sgd::new(0.05).momentum(0.9)?),
        })
    };
    Ok((build, data))
}

// ---- the harness -------------------------------------------------------------

struct Args {
    names: Vec<String>,
    steps: usize,
    /// `--traced-only NAME` / `--eager-only NAME`
    only: Option<(String, String)>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Compares, times and prints one model (see the module doc).
fn run<M: Model>(
    args: &Args,
    name: &str,
    what: &str,
    (build, data): (impl Fn() -> Result<M>, Vec<Tensor>),
) -> Result<()> {
    if let Some((mode, only)) = &args.only {
        if only != name {
            return Ok(());
        }
        let m = Arc::new(build()?);
        let f = function(move |d: &Vec<Tensor>| m.step(d));
        let eager = build()?;
        if mode == "profile" {
            // (the first call traces and compiles, outside the profile)
            f.call(&data)?;
            let runs = 50;
            let (r, lines) =
                gradtape::function::compile::profile(|| (0..runs).try_for_each(|_| f.call(&data).map(drop)));
            r?;
            print!("{name}: {}", gradtape::function::compile::report(&lines, runs));
            return Ok(());
        }
        let t0 = Instant::now();
        let mut n = 0;
        while t0.elapsed().as_secs_f64() < 4.0 {
            match mode.as_str() {
                "eager" => eager.step(&data)?,
                _ => f.call(&data)?,
            };
            n += 1;
        }
        println!(
            "{name}: {n} {mode} steps, {:.3} ms each",
            t0.elapsed().as_secs_f64() * 1e3 / n as f64
        );
        return Ok(());
    }
    if !args.names.is_empty() && !args.names.iter().any(|n| name.contains(n.as_str())) {
        return Ok(());
    }
    let eager = build()?;
    let traced = Arc::new(build()?);
    let f = {
        let m = traced.clone();
        function(move |d: &Vec<Tensor>| m.step(d))
    };
    let mut worst = 0.0f64;
    let mut bad = None;
    let mut cmp = |what: String, a: &Tensor, b: &Tensor| {
        let (a, b) = (a.to_vec_f64(), b.to_vec_f64());
        // (a floor: a gradient that is zero but for rounding, as an
        // attention key's bias has, leaves its weight at rounding noise)
        let scale = a.iter().fold(1e-4f64, |m, x| m.max(x.abs()));
        if a.len() != b.len() {
            bad.get_or_insert(format!("{what}: {} values eager, {} traced", a.len(), b.len()));
        }
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            let d = (x - y).abs() / scale;
            worst = worst.max(d);
            if d > 1e-3 || d.is_nan() {
                bad.get_or_insert(format!("{what}[{i}]: eager {x}, traced {y}"));
            }
        }
    };
    for s in 1..=3 {
        let e = eager.step(&data)?;
        let t = f.call(&data)?;
        for (j, (a, b)) in e.iter().zip(&t).enumerate() {
            cmp(format!("step {s} output {j}"), a, b);
        }
        for (j, (a, b)) in eager.vars().iter().zip(traced.vars()).enumerate() {
            cmp(format!("step {s} weight {j} ({})", a.name()), &a.read(), &b.read());
        }
    }
    if let Some(b) = bad {
        println!("{name:<16} DIFFERENT: {b}");
        return Ok(());
    }
    let (mut te, mut tt) = (Vec::new(), Vec::new());
    for _ in 0..args.steps {
        let t0 = Instant::now();
        eager.step(&data)?;
        te.push(t0.elapsed().as_secs_f64() * 1e3);
        let t0 = Instant::now();
        f.call(&data)?;
        tt.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let (e, t) = (median(te), median(tt));
    let mark = if t > e { "  <- traced slower" } else { "" };
    println!(
        "{name:<16} {what:<44} eager {e:>8.3} ms  traced {t:>8.3} ms  traced/eager {:.2}  (max diff {worst:.0e}, {} traces){mark}",
        t / e,
        f.trace_count()
    );
    Ok(())
}

fn main() -> Result<()> {
    let mut args = Args {
        names: Vec::new(),
        steps: 30,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--steps" => args.steps = it.next().and_then(|s| s.parse().ok()).expect("--steps N"),
            "--traced-only" => args.only = it.next().map(|n| ("traced".into(), n)),
            "--eager-only" => args.only = it.next().map(|n| ("eager".into(), n)),
            "--profile" => args.only = it.next().map(|n| ("profile".into(), n)),
            _ => args.names.push(a),
        }
    }
    let a = &args;
    run(a, "mlp_s", "batch 32, 64-128-10", mlp(&[64, 128, 10], 32)?)?;
    run(a, "mlp_l", "batch 256, 784-512-512-10", mlp(&[784, 512, 512, 10], 256)?)?;
    run(a, "cnn_s", "batch 8, 12x12, 4/8 channels", cnn(8, 12, [4, 8])?)?;
    run(a, "cnn_l", "batch 32, 28x28, 16/32 channels", cnn(32, 28, [16, 32])?)?;
    run(
        a,
        "rnn_loop_xs",
        "batch 4, 8 -> 16 units, 16 steps",
        rnn_loop(4, 8, 16, 16)?,
    )?;
    run(
        a,
        "rnn_loop_s",
        "batch 16, 16 -> 32 units, 32 steps",
        rnn_loop(16, 16, 32, 32)?,
    )?;
    run(
        a,
        "rnn_loop_m",
        "batch 32, 64 -> 128 units, 64 steps",
        rnn_loop(32, 64, 128, 64)?,
    )?;
    run(
        a,
        "rnn_loop_long",
        "batch 2, 4 -> 8 units, 128 steps",
        rnn_loop(2, 4, 8, 128)?,
    )?;
    run(
        a,
        "lstm",
        "batch 16, 16 steps, 8 -> 32 units",
        recurrent(16, 8, 32, 16, |rng| LSTM::builder(8, 32).build(rng))?,
    )?;
    run(
        a,
        "gru",
        "batch 16, 16 steps, 8 -> 32 units",
        recurrent(16, 8, 32, 16, |rng| GRU::builder(8, 32).build(rng))?,
    )?;
    run(a, "pgd_s", "batch 16, 16 -> 32 -> 10, 5 attack steps", pgd(16, 16, 32)?)?;
    run(
        a,
        "pgd_m",
        "batch 128, 64 -> 256 -> 10, 5 attack steps",
        pgd(128, 64, 256)?,
    )?;
    run(
        a,
        "transformer_s",
        "batch 2, 16 tokens, width 32, 2 heads, 1 block",
        gpt(2, 16, 32, 2, 1)?,
    )?;
    run(
        a,
        "transformer_m",
        "batch 8, 64 tokens, width 128, 4 heads, 2 blocks",
        gpt(8, 64, 128, 4, 2)?,
    )?;
    run(
        a,
        "encdec",
        "batch 4, 24 -> 16 tokens, width 64, 4 heads",
        encdec(4, 24, 16, 64, 4)?,
    )?;
    run(a, "cond_s", "batch 16, 32 -> 32 -> 32 -> 10", cond_mlp(16, 32)?)?;
    run(a, "cond_l", "batch 256, 32 -> 512 -> 512 -> 10", cond_mlp(256, 512)?)?;
    run(a, "ode_loop", "batch 64, 4 -> 64 -> 4, 8 Euler steps", ode(64, 64)?)?;
    run(
        a,
        "count_loop",
        "batch 4, 16 units, 256 steps, no tape",
        count_loop(4, 16, 256)?,
    )?;
    run(
        a,
        "vit",
        "batch 8, 16x16x3, 4x4 patches, width 64, 2 blocks",
        vit(8, 16, 4, 64, 4)?,
    )?;
    run(
        a,
        "conv_ae",
        "batch 16, 28x28, 8/16 channels, stride 2",
        conv_ae(16, 28, [8, 16])?,
    )?;
    run(
        a,
        "wavenet",
        "batch 8, 128 steps, 16 channels, rates 1-8",
        wavenet(8, 128, 16)?,
    )?;
    run(
        a,
        "bn_mlp",
        "batch 128, 64-256-256-10, BN, dropout, L2",
        bn_mlp(128, [64, 256, 256])?,
    )?;
    run(
        a,
        "gnn",
        "256 nodes, 1024 edges, 16 -> 64, 2 rounds",
        gnn(256, 1024, 16, 64)?,
    )?;
    run(
        a,
        "vae",
        "batch 256, 784 -> 256 -> 16 -> 256 -> 784",
        vae(256, 784, 256, 16)?,
    )?;
    run(
        a,
        "rk4_chain",
        "batch 8, 16 masses, 50 RK4 steps unrolled",
        rk4(8, 16, 50)?,
    )?;
    run(
        a,
        "vit_l",
        "batch 32, 32x32x3, 4x4 patches, width 128",
        vit(32, 32, 4, 128, 4)?,
    )?;
    run(
        a,
        "conv_ae_l",
        "batch 32, 64x64, 16/32 channels, stride 2",
        conv_ae(32, 64, [16, 32])?,
    )?;
    run(
        a,
        "wavenet_l",
        "batch 16, 512 steps, 32 channels, rates 1-8",
        wavenet(16, 512, 32)?,
    )?;
    run(
        a,
        "bn_mlp_l",
        "batch 256, 256-1024-1024-10, BN, dropout, L2",
        bn_mlp(256, [256, 1024, 1024])?,
    )?;
    run(
        a,
        "gnn_l",
        "4096 nodes, 16384 edges, 16 -> 64, 2 rounds",
        gnn(4096, 16384, 16, 64)?,
    )?;
    run(
        a,
        "rk4_chain_l",
        "batch 64, 256 masses, 50 RK4 steps unrolled",
        rk4(64, 256, 50)?,
    )?;
    run(
        a,
        "newton_hvp",
        "batch 1024, 16 -> 128 -> 1, Hessian-vector product",
        newton(1024, 16, 128)?,
    )?;
    Ok(())
}
