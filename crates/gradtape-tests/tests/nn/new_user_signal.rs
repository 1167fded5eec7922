//! Two signal models a new user would write, against TensorFlow 2.21 /
//! Keras 3.15.1 (`tests/reference/new_user_models4.py` printed the numbers
//! of `tests/data/new_user_models4.txt`):
//!
//! - a WaveNet-style stack: a causal `Conv1D`, three dilated causal
//!   `Conv1D` pairs (dilations 1, 2, 4) with gated activations tanh ·
//!   sigmoid, 1x1 residual and skip convolutions (the last residual
//!   feeds nothing the loss reads: no gradient, as TensorFlow's `None`,
//!   skipped by the optimizer), relu, a 1x1 head; MSE; Adam;
//! - a NeRF-style MLP: positional encoding (x, sin and cos of 2^k π x,
//!   k < 4) of points along rays, a relu MLP to a density (relu) and a
//!   colour (sigmoid), volume rendering: the colour's transmittance an
//!   exclusive `cumprod` of 1 − α, the depth's the exp of an exclusive
//!   `cumsum` of σ δ; Adam.
//!
//! Each runs two steps eagerly and as a traced `function` (called twice,
//! traced once), in float64 at 1e-12 relative (see `new_user_util.rs`) and
//! in float32 against the same reference at `REL32`.

use std::f64::consts::PI;
use std::sync::Mutex;

use gradtape::nn::{Activation, Conv1D, Dense, Layer, Module};
use gradtape::optim::Adam;
use gradtape::{DType, GradientTape, Result, Rng, Tensor, Variable};

use super::new_user_physics::dense;
use super::new_user_rl::{mlp, DATA};
use super::new_user_util::{adam, fill, set_weights_as, train_both, update, Check, Stepper};

/// float32 against the float64 reference, relative to each vector's
/// largest element: rounding, carried through NeRF's encoding (sin and cos
/// of 8π x, with |x| up to 6: the argument's float32 rounding alone is
/// ~1e-5 of the result; observed up to 1e-5) and elsewhere up to 3e-7.
const REL32: f64 = 5e-5;

// ---- 1. WaveNet ------------------------------------------------------------------

/// One gated residual layer: filter, gate, residual and skip convolutions.
struct Gated {
    filter: Conv1D,
    gate: Conv1D,
    res: Conv1D,
    skip: Conv1D,
}

pub(super) struct WaveNet {
    input: Conv1D,
    layers: Vec<Gated>,
    out1: Conv1D,
    out2: Conv1D,
    opt: Mutex<Adam>,
}

impl WaveNet {
    pub(super) fn new(dt: DType) -> Result<WaveNet> {
        WaveNet::sized(4, &[1, 2, 4], dt)
    }

    pub(super) fn sized(ch: usize, dilations: &[i64], dt: DType) -> Result<WaveNet> {
        let rng = &mut Rng::new(0);
        let mut conv = |i, o, k, d| {
            Conv1D::builder(i, o, k)
                .dilation_rate(d)
                .causal(true)
                .dtype(dt)
                .build(rng)
        };
        let input = conv(1, ch, 2, 1)?;
        let mut layers = Vec::new();
        for &d in dilations {
            layers.push(Gated {
                filter: conv(ch, ch, 2, d)?,
                gate: conv(ch, ch, 2, d)?,
                res: conv(ch, ch, 1, 1)?,
                skip: conv(ch, ch, 1, 1)?,
            });
        }
        let m = WaveNet {
            input,
            layers,
            out1: conv(ch, ch, 1, 1)?,
            out2: conv(ch, 1, 1, 1)?,
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 230.0, &[]);
        Ok(m)
    }

    fn out(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = self.input.call(x)?;
        let mut skips: Option<Tensor> = None;
        for l in &self.layers {
            let z = l.filter.call(&h)?.tanh()?.mul(&l.gate.call(&h)?.sigmoid()?)?;
            h = h.add(&l.res.call(&z)?)?;
            let s = l.skip.call(&z)?;
            skips = Some(match skips {
                Some(a) => a.add(&s)?,
                None => s,
            });
        }
        let skips = skips.expect("at least one layer");
        self.out2.call(&self.out1.call(&skips.relu()?)?.relu()?)
    }
}

impl Stepper for WaveNet {
    fn vars(&self) -> Vec<Variable> {
        let mut layers: Vec<&dyn Layer> = vec![&self.input];
        for l in &self.layers {
            layers.extend([&l.filter as &dyn Layer, &l.gate, &l.res, &l.skip]);
        }
        layers.extend([&self.out1 as &dyn Layer, &self.out2]);
        layers.iter().flat_map(|l| l.trainable_variables()).collect()
    }

    /// data: x [b, t, 1], y [b, t, 1]; outputs the prediction and the loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let (out, loss) = tape.record(|| {
            let out = self.out(&data[0])?;
            let loss = out.sub(&data[1])?.square()?.mean_all()?;
            Ok((out, loss))
        })?;
        update(&tape, &loss, &vars, &self.opt, vec![out, loss.clone()])
    }
}

#[test]
fn wavenet_gated_dilated_causal_stack_matches_tensorflow() -> Result<()> {
    let x = fill(&[2, 12, 1], 0.5, 2.0);
    let y = fill(&[2, 12, 1], 1.3, 1.0);
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    train_both(&mut c64, &mut c32, "wavenet", &["out", "loss"], WaveNet::new, &[x, y])?;
    c64.finish("wavenet f64", 900);
    c32.finish("wavenet f32", 900);
    Ok(())
}

// ---- 2. NeRF ----------------------------------------------------------------------

pub(super) struct Nerf {
    layers: [Dense; 3],
    freqs: usize,
    opt: Mutex<Adam>,
}

impl Nerf {
    pub(super) fn new(dt: DType) -> Result<Nerf> {
        Nerf::sized(4, 16, dt)
    }

    pub(super) fn sized(freqs: usize, width: usize, dt: DType) -> Result<Nerf> {
        let m = Nerf {
            layers: [
                dense(3 + 6 * freqs, width, Some(Activation::Relu), dt)?,
                dense(width, width, Some(Activation::Relu), dt)?,
                dense(width, 4, None, dt)?,
            ],
            freqs,
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 250.0, &[]);
        Ok(m)
    }

    /// `[x, sin(2^k π x), cos(2^k π x) for k < freqs]` on the last axis.
    fn encode(&self, x: &Tensor) -> Result<Tensor> {
        let mut feats = vec![x.clone()];
        for k in 0..self.freqs {
            let a = x.mul_scalar(2f64.powi(k as i32) * PI)?;
            feats.extend([a.sin()?, a.cos()?]);
        }
        Tensor::concat(&feats.iter().collect::<Vec<_>>(), -1)
    }

    /// data: origins [r, 3], directions [r, 3], sample depths [n], target
    /// colours [r, 3] and depths [r]; the density, colour, depth and loss.
    fn render(&self, data: &[Tensor]) -> Result<[Tensor; 4]> {
        let [o, d, t, rgb_true, depth_true] = data else {
            unreachable!("five tensors")
        };
        let (r, n) = (o.shape()[0], t.shape()[0]);
        let pts = o
            .expand_dims(1)?
            .add(&t.reshape(&[1, n, 1])?.mul(&d.expand_dims(1)?)?)?;
        let raw = mlp(&self.layers, &self.encode(&pts)?)?;
        let sigma = raw.narrow(-1, 0, 1)?.squeeze(&[-1])?.relu()?;
        let rgb = raw.narrow(-1, 1, 3)?.sigmoid()?;
        let far = Tensor::full(&[1], 1024.0, t.dtype());
        let deltas = Tensor::concat(&[&t.narrow(0, 1, n - 1)?.sub(&t.narrow(0, 0, n - 1)?)?, &far], 0)?;
        let deltas = deltas.reshape(&[1, n])?.mul(&d.norm(&[-1], false)?.reshape(&[r, 1])?)?;
        let sd = sigma.mul(&deltas)?;
        let alpha = sd.neg()?.exp()?.neg()?.add_scalar(1.0)?;
        let trans = alpha
            .neg()?
            .add_scalar(1.0 + 2f64.powi(-30))?
            .cumprod(-1, true, false)?;
        let colour = alpha.mul(&trans)?.expand_dims(-1)?.mul(&rgb)?.sum(&[-2], false)?;
        let trans2 = sd.cumsum(-1, true, false)?.neg()?.exp()?;
        let depth = alpha.mul(&trans2)?.mul(&t.reshape(&[1, n])?)?.sum(&[-1], false)?;
        let loss = colour
            .sub(rgb_true)?
            .square()?
            .mean_all()?
            .add(&depth.sub(depth_true)?.square()?.mean_all()?.mul_scalar(2f64.powi(-6))?)?;
        Ok([sigma, colour, depth, loss])
    }
}

impl Stepper for Nerf {
    fn vars(&self) -> Vec<Variable> {
        self.layers.iter().flat_map(|l| l.trainable_variables()).collect()
    }

    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let out = tape.record(|| self.render(data))?;
        let loss = out[3].clone();
        update(&tape, &loss, &vars, &self.opt, out.into())
    }
}

pub(super) fn nerf_data(rays: usize, samples: usize) -> Result<Vec<Tensor>> {
    let up = Tensor::vector(&[0.0f64, 0.0, 1.0]);
    Ok(vec![
        fill(&[rays, 3], 0.7, 0.5),
        fill(&[rays, 3], 1.9, 1.0).add(&up)?,
        Tensor::linspace(2.0, 6.0, samples, DType::F64)?,
        fill(&[rays, 3], 2.2, 1.0).add_scalar(0.5)?,
        fill(&[rays], 0.4, 1.0).add_scalar(4.0)?,
    ])
}

#[test]
fn nerf_positional_encoding_and_volume_rendering_matches_tensorflow() -> Result<()> {
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    train_both(
        &mut c64,
        &mut c32,
        "nerf",
        &["sigma", "colour", "depth", "loss"],
        Nerf::new,
        &nerf_data(3, 6)?,
    )?;
    c64.finish("nerf f64", 900);
    c32.finish("nerf f32", 900);
    Ok(())
}
