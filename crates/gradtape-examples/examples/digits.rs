//! Trains a small convolutional network on the UCI hand-written digits
//! (the 8x8 set of 1,797 images that scikit-learn ships; see
//! `examples/data/README.md`) with gradtape's layers, Adam and a
//! `GradientTape`: a shuffled 80/20 train/test split, a progress bar per
//! epoch, the loss and accuracies per epoch, a checkpoint saved and loaded
//! back into a fresh model (same test accuracy), and, with the `plot`
//! feature, a PNG of the loss curve.
//!
//! ```text
//! cargo run --release --example digits                   # 1-2 s of training
//! cargo run --release --example digits --features plot   # also target/digits/loss.png
//! cargo run --release --example digits --features cuda -- --device cuda:0   # on a GPU
//! ```

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use gradtape::nn::{
    losses, metrics, Activation, Conv2D, Dense, Dropout, Flatten, Layer, Module, Pool2D, PoolKind, Sequential,
};
use gradtape::optim::{Adam, Optimizer};
use gradtape::{io, nn, random, Device, Error, GradientTape, Padding, Result, Rng, Tensor};
use indicatif::{ProgressBar, ProgressStyle};

/// The data file, beside this example (named from the `crates/` folder, so
/// that the path holds where the tests' package compiles this file too).
pub const DATA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../gradtape-examples/examples/data/digits.csv.gz"
);

/// What a run does.
pub struct Config {
    pub epochs: usize,
    pub batch_size: usize,
    pub learning_rate: f64,
    pub seed: u64,
    /// Show progress bars and per-epoch lines.
    pub verbose: bool,
    /// Where the checkpoint (and the plot) go.
    pub out_dir: PathBuf,
    /// Where the data, the model and the optimizer live (`--device cuda:0`).
    pub device: Device,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            epochs: 15,
            batch_size: 32,
            learning_rate: 3e-3,
            seed: 0,
            verbose: true,
            out_dir: PathBuf::from("target/digits"),
            device: Device::Cpu,
        }
    }
}

/// What a run measured.
pub struct Outcome {
    /// The mean training loss of each epoch.
    pub losses: Vec<f64>,
    pub train_accuracy: f64,
    pub test_accuracy: f64,
    /// The test accuracy of a fresh model loaded from the checkpoint.
    pub reloaded_test_accuracy: f64,
    pub checkpoint: PathBuf,
}

/// Images `[n, 8, 8, 1]` scaled to `[0, 1]` and labels `[n]` (i64).
pub fn load_digits(path: &str) -> Result<(Tensor, Tensor)> {
    let bad = |msg: String| Error::InvalidArgument { op: "load_digits", msg };
    // (where the folder it was built in is not here, as on a machine the
    // binary was copied to: the same file under the working directory)
    let fallback = "crates/gradtape-examples/examples/data/digits.csv.gz";
    let path = if Path::new(path).exists() || !Path::new(fallback).exists() {
        path
    } else {
        fallback
    };
    let file = std::fs::File::open(path).map_err(|e| bad(format!("{path}: {e}")))?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .map_err(|e| bad(format!("{path}: {e}")))?;
    let (mut pixels, mut labels) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate() {
        let v: Vec<f32> = line
            .split(',')
            .map(|s| s.trim().parse::<f32>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| bad(format!("line {}: {e}", i + 1)))?;
        if v.len() != 65 {
            return Err(bad(format!("line {}: {} values, expected 65", i + 1, v.len())));
        }
        pixels.extend(v[..64].iter().map(|p| p / 16.0));
        labels.push(v[64] as i64);
    }
    let n = labels.len();
    Ok((
        Tensor::from_vec(pixels, &[n, 8, 8, 1])?,
        Tensor::from_vec(labels, &[n])?,
    ))
}

/// The model: conv 3x3 (16) + ReLU, 2x2 max pool, conv 3x3 (32) + ReLU,
/// flatten, dropout, dense 64 + ReLU, dense 10 (logits).
pub fn build_model(rng: &mut Rng) -> Result<Sequential> {
    Ok(Sequential::new()
        .add(
            Conv2D::builder(1, 16, [3, 3])
                .padding(Padding::Same)
                .activation(Activation::Relu)
                .build(rng)?,
        )
        .add(Pool2D::new(PoolKind::Max, [2, 2], [2, 2], Padding::Valid))
        .add(
            Conv2D::builder(16, 32, [3, 3])
                .padding(Padding::Same)
                .activation(Activation::Relu)
                .build(rng)?,
        )
        .add(Flatten::new())
        .add(Dropout::new(0.25, rng)?)
        .add(Dense::builder(4 * 4 * 32, 64).activation(Activation::Relu).build(rng)?)
        .add(Dense::new(64, 10, rng)?))
}

/// Test-time accuracy of `model` on `(x, y)`, in batches.
pub fn accuracy(model: &impl Layer, x: &Tensor, y: &Tensor) -> Result<f64> {
    let mut acc = metrics::SparseCategoricalAccuracy::default();
    for rows in random::batches(x.shape()[0], 256, None)? {
        let idx = Tensor::vector(&rows).to(x.device())?;
        acc.update(&y.gather(&idx, 0)?, &model.forward(&x.gather(&idx, 0)?, false)?)?;
    }
    Ok(acc.result())
}

/// Trains, evaluates, checkpoints and reloads.
pub fn train(cfg: &Config) -> Result<Outcome> {
    let (x, y) = load_digits(DATA)?;
    let (x, y) = (x.to(cfg.device)?, y.to(cfg.device)?);
    let n = x.shape()[0];
    // a shuffled 80/20 split (1,437 / 360 images)
    let mut rng = Rng::new(cfg.seed);
    let order: Vec<i64> = rng.permutation(n)?.into_iter().map(|i| i as i64).collect();
    let n_test = n / 5;
    let (test_idx, train_idx) = order.split_at(n_test);
    let on = |i: &[i64]| Tensor::vector(i).to(cfg.device);
    let (x_test, y_test) = (x.gather(&on(test_idx)?, 0)?, y.gather(&on(test_idx)?, 0)?);
    let (x_train, y_train) = (x.gather(&on(train_idx)?, 0)?, y.gather(&on(train_idx)?, 0)?);

    nn::reset_names();
    let model = build_model(&mut rng)?;
    for v in model.variables() {
        v.move_to(cfg.device)?;
    }
    let vars = model.trainable_variables();
    let mut opt = Adam::new(cfg.learning_rate).with_name("adam");
    if cfg.verbose {
        println!(
            "digits: {} train / {} test images, {} weights, {} epochs of batches of {}, on {}",
            n - n_test,
            n_test,
            model.count_params(),
            cfg.epochs,
            cfg.batch_size,
            cfg.device
        );
    }

    let start = Instant::now();
    let mut losses_per_epoch = Vec::with_capacity(cfg.epochs);
    let mut train_accuracy = 0.0;
    for epoch in 1..=cfg.epochs {
        let batches = random::batches(n - n_test, cfg.batch_size, Some(&mut rng))?;
        let bar = if cfg.verbose {
            let bar = ProgressBar::new(batches.len() as u64);
            let style = ProgressStyle::with_template("epoch {prefix:>2} [{bar:30}] {pos:>2}/{len} {msg}")
                .map_err(|e| Error::InvalidArgument {
                    op: "progress",
                    msg: e.to_string(),
                })?
                .progress_chars("=> ");
            bar.set_style(style);
            bar.set_prefix(epoch.to_string());
            bar
        } else {
            ProgressBar::hidden()
        };
        let mut loss_mean = metrics::Mean::default();
        let mut acc = metrics::SparseCategoricalAccuracy::default();
        for rows in &batches {
            let idx = Tensor::vector(rows).to(cfg.device)?;
            let (xb, yb) = (x_train.gather(&idx, 0)?, y_train.gather(&idx, 0)?);
            let tape = GradientTape::new();
            let (loss, logits) = tape.record(|| {
                let logits = model.forward(&xb, true)?;
                Ok((losses::sparse_categorical_crossentropy(&yb, &logits, true)?, logits))
            })?;
            opt.minimize(&tape, &loss, &vars)?;
            loss_mean.update(loss.item()?, rows.len() as f64);
            acc.update(&yb, &logits)?;
            bar.set_message(format!("loss {:.4}", loss_mean.result()));
            bar.inc(1);
        }
        bar.finish_and_clear();
        train_accuracy = acc.result();
        losses_per_epoch.push(loss_mean.result());
        if cfg.verbose {
            let test = accuracy(&model, &x_test, &y_test)?;
            println!(
                "epoch {epoch:>2}: loss {:.4}, train accuracy {:.2} %, test accuracy {:.2} %",
                loss_mean.result(),
                100.0 * train_accuracy,
                100.0 * test
            );
        }
    }
    let test_accuracy = accuracy(&model, &x_test, &y_test)?;
    if cfg.verbose {
        println!(
            "trained in {:.2} s: test accuracy {:.2} %",
            start.elapsed().as_secs_f64(),
            100.0 * test_accuracy
        );
    }

    // checkpoint: the model's variables and the optimizer's (step counter, m, v)
    std::fs::create_dir_all(&cfg.out_dir).map_err(|e| Error::InvalidArgument {
        op: "digits",
        msg: format!("{}: {e}", cfg.out_dir.display()),
    })?;
    let checkpoint = cfg.out_dir.join("digits.safetensors");
    let mut saved = model.variables();
    saved.extend(opt.variables());
    io::save_safetensors(&checkpoint, &saved)?;

    // a fresh model and optimizer with other random weights, built with the
    // same names, loaded from the checkpoint
    nn::reset_names();
    let fresh = build_model(&mut Rng::new(cfg.seed + 1))?;
    let mut fresh_opt = Adam::new(cfg.learning_rate).with_name("adam");
    fresh_opt.build(&fresh.trainable_variables())?;
    let mut restored = fresh.variables();
    restored.extend(fresh_opt.variables());
    let unused = io::load_safetensors(&checkpoint, &restored)?;
    if !unused.is_empty() {
        return Err(Error::InvalidArgument {
            op: "digits",
            msg: format!("checkpoint entries not loaded: {unused:?}"),
        });
    }
    for v in fresh.variables() {
        v.move_to(cfg.device)?;
    }
    let reloaded_test_accuracy = accuracy(&fresh, &x_test, &y_test)?;
    if cfg.verbose {
        println!(
            "checkpoint {} ({} tensors) reloaded into a fresh model: test accuracy {:.2} %, optimizer at step {}",
            checkpoint.display(),
            restored.len(),
            100.0 * reloaded_test_accuracy,
            fresh_opt.iterations()
        );
    }
    Ok(Outcome {
        losses: losses_per_epoch,
        train_accuracy,
        test_accuracy,
        reloaded_test_accuracy,
        checkpoint,
    })
}

/// Draws the loss curve to `path` (PNG).
#[cfg(feature = "plot")]
pub fn plot_losses(losses: &[f64], path: &Path) -> std::result::Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let root = BitMapBackend::new(path, (720, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = losses.iter().cloned().fold(0.0, f64::max) * 1.05;
    let mut chart = ChartBuilder::on(&root)
        .caption("digits: training loss per epoch", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(1f64..losses.len().max(2) as f64, 0f64..top)?;
    chart.configure_mesh().x_desc("epoch").y_desc("cross-entropy").draw()?;
    chart.draw_series(LineSeries::new(
        losses.iter().enumerate().map(|(i, &l)| ((i + 1) as f64, l)),
        BLUE.stroke_width(2),
    ))?;
    root.present()?;
    Ok(())
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let mut cfg = Config::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--device" => cfg.device = args.next().ok_or("--device needs a value (cpu, cuda:0)")?.parse()?,
            _ => return Err(format!("unknown argument {a:?}; the one flag is --device DEVICE (cpu, cuda:N)").into()),
        }
    }
    let out = train(&cfg)?;
    if out.test_accuracy != out.reloaded_test_accuracy {
        return Err(format!(
            "the reloaded model's accuracy {} differs from the trained model's {}",
            out.reloaded_test_accuracy, out.test_accuracy
        )
        .into());
    }
    let plot = cfg.out_dir.join("loss.png");
    #[cfg(feature = "plot")]
    {
        plot_losses(&out.losses, &plot)?;
        println!("loss curve: {}", plot.display());
    }
    #[cfg(not(feature = "plot"))]
    println!(
        "(run with --features plot to draw the loss curve to {})",
        Path::new(&plot).display()
    );
    let _ = &out.checkpoint;
    Ok(())
}
