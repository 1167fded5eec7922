//! A temporal convolutional network (TCN) forecaster as a new user would
//! write it from the docs, against TensorFlow 2.21 / Keras 3.15.1
//! (`tests/reference/new_user_models7.py` printed the numbers of
//! `tests/data/new_user_models7.txt`): two residual blocks, each of two
//! weight-normalised causal convolutions (gradtape has no weight-norm
//! wrapper, nor had TensorFlow Addons' `WeightNormalization` a Keras 3
//! successor: the kernel is written `g · l2_normalize(v)` over the
//! kernel's time and input axes, from plain variables), causal by a left
//! `pad` of `(k − 1) · d` steps and a `Valid` `conv1d` with dilation `d`
//! (1, then 2), relu after each convolution and after the residual sum; a
//! 1x1 `Conv1D` on the first block's residual path (2 → 4 channels); a
//! Dense(4 → 1) head at every step; Keras's `MeanSquaredError` to the next
//! value of the series; Adam with `clipnorm` 1/4 (each gradient clipped by
//! its own norm; the larger gradients exceed it, the smaller do not). Two steps eagerly and as
//! a traced `function` (called twice, traced once), in float64 at 1e-12
//! relative (see `new_user_util.rs`) and float32 at `REL32`.

use std::sync::Mutex;

use gradtape::nn::losses::Loss;
use gradtape::nn::{Conv1D, Dense, Layer, Module};
use gradtape::optim::Adam;
use gradtape::{DType, GradientTape, Padding, Result, Rng, Tensor, Variable};

use super::new_user_adversarial::DATA;
use super::new_user_physics::dense;
use super::new_user_util::{fill, set_weights_as, train_both, update, Check, Stepper};

/// float32 against the float64 reference, relative to each vector's
/// largest element: a few float32 roundings carried through two Adam
/// steps (the largest seen: 1.2e-6).
const REL32: f64 = 2e-5;

/// One weight-normalised convolution: direction `v` [k, in, out], scale
/// `g` [out], bias `b` [out].
struct WnConv {
    v: Variable,
    g: Variable,
    b: Variable,
}

impl WnConv {
    fn new(k: usize, c_in: usize, c_out: usize, dt: DType) -> WnConv {
        let var = |shape: &[usize]| Variable::new(Tensor::zeros(shape, dt));
        WnConv {
            v: var(&[k, c_in, c_out]),
            g: var(&[c_out]),
            b: var(&[c_out]),
        }
    }

    fn vars(&self) -> Vec<Variable> {
        vec![self.v.clone(), self.g.clone(), self.b.clone()]
    }

    /// The causal convolution of `x` [n, t, in] at dilation `d`.
    fn call(&self, x: &Tensor, d: usize) -> Result<Tensor> {
        let w = self.v.read().l2_normalize(&[0, 1], 1e-12)?.mul(&self.g.read())?;
        let k = self.v.shape()[0];
        let x = x.pad(&[(0, 0), ((k - 1) * d, 0), (0, 0)])?;
        x.conv1d(&w, 1, Padding::Valid, d as i64)?.add(&self.b.read())
    }
}

struct Tcn {
    blocks: [[WnConv; 2]; 2],
    res: Conv1D,
    head: Dense,
    opt: Mutex<Adam>,
}

impl Tcn {
    fn new(dt: DType) -> Result<Tcn> {
        let m = Tcn {
            blocks: [
                [WnConv::new(3, 2, 4, dt), WnConv::new(3, 4, 4, dt)],
                [WnConv::new(3, 4, 4, dt), WnConv::new(3, 4, 4, dt)],
            ],
            res: Conv1D::builder(2, 4, 1).dtype(dt).build(&mut Rng::new(0))?,
            head: dense(4, 1, None, dt)?,
            opt: Mutex::new(
                Adam::new(2f64.powi(-7))
                    .betas(0.875, 1.0 - 2f64.powi(-10))?
                    .epsilon(2f64.powi(-20))?
                    .clipnorm(0.25)?,
            ),
        };
        // the scales g start at 1 + fill
        set_weights_as(&m.vars(), 755.0, &[1, 4, 9, 12]);
        Ok(m)
    }
}

impl Stepper for Tcn {
    /// The first block's, the residual convolution's, the second block's,
    /// the head's.
    fn vars(&self) -> Vec<Variable> {
        let block = |b: &[WnConv; 2]| b.iter().flat_map(|c| c.vars()).collect::<Vec<_>>();
        let mut v = block(&self.blocks[0]);
        v.extend(self.res.trainable_variables());
        v.extend(block(&self.blocks[1]));
        v.extend(self.head.trainable_variables());
        v
    }

    /// data: the series' inputs [2, 10, 2] and next values [2, 10, 1];
    /// outputs the predictions and the loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let out = tape.record(|| {
            let mut h = data[0].clone();
            for (j, (block, d)) in self.blocks.iter().zip([1, 2]).enumerate() {
                let o = block[0].call(&h, d)?.relu()?;
                let o = block[1].call(&o, d)?.relu()?;
                let skip = if j == 0 { self.res.forward(&h, true)? } else { h };
                h = o.add(&skip)?.relu()?;
            }
            let pred = self.head.forward(&h, true)?;
            let loss = Loss::MeanSquaredError.call(&data[1], &pred)?;
            Ok(vec![pred, loss])
        })?;
        let loss = out[1].clone();
        update(&tape, &loss, &vars, &self.opt, out)
    }
}

#[test]
fn tcn_weight_normalised_dilated_causal_convolutions_match_tensorflow() -> Result<()> {
    // the next value of feature 0 is the target
    let series = fill(&[2, 11, 2], 0.3, 2.0);
    let x = series.narrow(1, 0, 10)?;
    let y = series.narrow(1, 1, 10)?.narrow(2, 0, 1)?;
    let (mut c64, mut c32) = (Check::with(DATA, 1e-6), Check::with(DATA, 1e-6).tolerance(REL32));
    train_both(&mut c64, &mut c32, "tcn", &["pred", "loss"], Tcn::new, &[x, y])?;
    c64.finish("tcn f64", 400);
    c32.finish("tcn f32", 400);
    Ok(())
}
