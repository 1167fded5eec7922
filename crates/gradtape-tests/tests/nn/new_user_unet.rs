//! A U-Net-ish encoder/decoder a new user would write, against TensorFlow
//! 2.21 / Keras 3.15.1 in float64 (`tests/reference/new_user_models2.py`,
//! numbers in `tests/data/new_user_models2.txt`): conv 3x3 (2->4, tanh),
//! max pool 2, conv 3x3 (4->8, tanh); up by a transposed conv 2x2 stride 2
//! (8->4) plus a 1x1 conv of a bilinear upsampling; concatenated with the
//! skip connection, conv 3x3 (8->4, tanh), conv 1x1 logits; binary
//! cross-entropy from logits; Adam. Eagerly and as a traced `function`
//! called twice (two steps), compared at 1e-12 relative (see
//! `new_user_util.rs`).

use std::sync::{Arc, Mutex};

use gradtape::nn::{losses, Activation, Conv2D, Conv2DTranspose, Layer, Pool2D, PoolKind, UpSampling2D};
use gradtape::optim::{Adam, Optimizer};
use gradtape::{function, DType, GradientTape, Padding, ResizeMethod, Result, Rng, Tensor, Variable};

use super::new_user_util::{adam, all_some, eager_vs_traced, fill, names, print_times, set_weights, Check};

struct UNet {
    e1: Conv2D,
    e2: Conv2D,
    t: Conv2DTranspose,
    p: Conv2D,
    d: Conv2D,
    o: Conv2D,
    pool: Pool2D,
    up: UpSampling2D,
}

impl UNet {
    fn new() -> Result<UNet> {
        let rng = &mut Rng::new(0);
        let conv = |i: usize, f: usize, k: usize, tanh: bool, rng: &mut Rng| {
            let b = Conv2D::builder(i, f, [k, k]).padding(Padding::Same).dtype(DType::F64);
            if tanh {
                b.activation(Activation::Tanh).build(rng)
            } else {
                b.build(rng)
            }
        };
        let m = UNet {
            e1: conv(2, 4, 3, true, rng)?,
            e2: conv(4, 8, 3, true, rng)?,
            t: Conv2DTranspose::builder(8, 4, [2, 2])
                .strides([2, 2])
                .padding(Padding::Same)
                .dtype(DType::F64)
                .build(rng)?,
            p: conv(8, 4, 1, false, rng)?,
            d: conv(8, 4, 3, true, rng)?,
            o: conv(4, 1, 1, false, rng)?,
            pool: Pool2D::new(PoolKind::Max, [2, 2], [2, 2], Padding::Valid),
            up: UpSampling2D::new([2, 2], ResizeMethod::Bilinear)?,
        };
        set_weights(&m.vars(), 80.0);
        Ok(m)
    }

    fn vars(&self) -> Vec<Variable> {
        let layers: [&dyn Layer; 6] = [&self.e1, &self.e2, &self.t, &self.p, &self.d, &self.o];
        layers.iter().flat_map(|l| l.trainable_variables()).collect()
    }

    /// The logits and the loss.
    fn forward(&self, x: &Tensor, y: &Tensor) -> Result<[Tensor; 2]> {
        let e1 = self.e1.call(x)?;
        let e2 = self.e2.call(&self.pool.call(&e1)?)?;
        let u = self.t.call(&e2)?.add(&self.p.call(&self.up.call(&e2)?)?)?;
        let logits = self.o.call(&self.d.call(&Tensor::concat(&[&u, &e1], -1)?)?)?;
        let loss = losses::binary_crossentropy(y, &logits, true)?;
        Ok([logits, loss])
    }
}

fn unet_step(m: &UNet, opt: &mut Adam, x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
    let vars = m.vars();
    let tape = GradientTape::new();
    let out = tape.record(|| m.forward(x, y))?;
    let grads = tape.gradient(&out[1], &vars)?;
    opt.apply_gradients(grads.clone().into_iter().zip(&vars))?;
    Ok(out.into_iter().chain(all_some(grads, "unet")).collect())
}

fn data() -> Result<(Tensor, Tensor)> {
    let x = fill(&[2, 8, 8, 2], 0.35, 2.0);
    let y = fill(&[2, 8, 8, 1], 1.9, 1.0)
        .gt(&Tensor::scalar(0.0f64))?
        .cast(DType::F64)?;
    Ok((x, y))
}

#[test]
fn unet_step_matches_tensorflow() -> Result<()> {
    let (x, y) = data()?;
    let mut check = Check::new();
    for traced in [false, true] {
        let what = if traced { "traced" } else { "eager" };
        let m = Arc::new(UNet::new()?);
        let opt = Arc::new(Mutex::new(adam()));
        let f = {
            let (m, opt) = (m.clone(), opt.clone());
            function(move |(x, y): &(Tensor, Tensor)| unet_step(&m, &mut opt.lock().unwrap(), x, y))
        };
        for s in 1..=2 {
            let got = if traced {
                f.call(&(x.clone(), y.clone()))?
            } else {
                unet_step(&m, &mut opt.lock().unwrap(), &x, &y)?
            };
            check.all(
                what,
                &names(&format!("unet{s}"), &["logits", "loss"], &[("grad", 12)]),
                &got,
            );
        }
        if traced {
            assert_eq!(f.trace_count(), 1, "the second step ran the first trace's graph");
        }
        check.vars(what, "unet_weight", &m.vars());
    }
    check.finish("unet", 900);
    Ok(())
}

/// Eager and traced time per training step (a release-mode measurement,
/// printed; run with `--ignored --nocapture`).
#[test]
#[ignore]
fn unet_eager_vs_traced_time() -> Result<()> {
    let data = data()?;
    let (m, mut o) = (UNet::new()?, adam());
    let (m2, o2) = (Arc::new(UNet::new()?), Arc::new(Mutex::new(adam())));
    let f = function(move |(x, y): &(Tensor, Tensor)| unet_step(&m2, &mut o2.lock().unwrap(), x, y));
    let (eager, traced) = eager_vs_traced(
        100,
        || unet_step(&m, &mut o, &data.0, &data.1).map(drop),
        || f.call(&data).map(drop),
    );
    print_times("u-net", "batch 2, 8x8x2 -> 4 -> 8 channels, 1 output", eager, traced);
    Ok(())
}
