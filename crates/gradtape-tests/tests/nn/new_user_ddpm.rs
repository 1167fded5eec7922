//! A DDPM denoiser's training step as a new user would write it from the
//! docs, against TensorFlow 2.21 / Keras 3.15.1
//! (`tests/reference/new_user_models6.py` printed the numbers of
//! `tests/data/new_user_models6.txt`): a linear beta schedule
//! (`Tensor::linspace` from 1e-4 to 0.02 over 10 steps), its cumulative
//! product `ᾱ` (`cumprod`), the noised data `x_t = √ᾱ_t x₀ + √(1 − ᾱ_t) ε`
//! at each example's timestep (`gather`), the timesteps' sinusoidal
//! embedding (rows of `sine_position_encoding`, SinePositionEncoding's
//! interleaved sin/cos), and a SiLU MLP predicting `ε` from `[x_t,
//! embedding]`; MSE; Adam. Two steps eagerly and as a traced `function`
//! (traced once), in float64 at 1e-12 relative and float32 at a rounding
//! tolerance; the noised data against NumPy's.

use std::sync::Mutex;

use gradtape::nn::losses::Loss;
use gradtape::nn::{sine_position_encoding, Activation, Dense, Layer, Module};
use gradtape::optim::Adam;
use gradtape::{DType, GradientTape, Result, Tensor, Variable};

use super::new_user_physics::dense;
use super::new_user_util::{adam, fill, set_weights_as, train_both, update, Check, Stepper};
use super::new_user_vit::{traced_equals_eager, DATA};

/// float32 against the float64 reference: rounding, carried into the
/// weights by Adam (1.8e-6).
const REL32: f64 = 1e-5;

/// The number of diffusion steps.
const STEPS: usize = 10;

struct Denoiser {
    net: [Dense; 3],
    opt: Mutex<Adam>,
}

impl Denoiser {
    fn new(dt: DType) -> Result<Denoiser> {
        let m = Denoiser {
            net: [
                dense(11, 16, Some(Activation::Silu), dt)?,
                dense(16, 16, Some(Activation::Silu), dt)?,
                dense(16, 3, None, dt)?,
            ],
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 450.0, &[]);
        Ok(m)
    }
}

/// The noised data `x_t` of `x0` `[b, d]` with noise `eps` at the
/// timesteps `t` `[b]` (i64).
fn noised(x0: &Tensor, eps: &Tensor, t: &Tensor) -> Result<Tensor> {
    let betas = Tensor::linspace(1e-4, 0.02, STEPS, x0.dtype())?;
    let abar = betas.neg()?.add_scalar(1.0)?.cumprod(0, false, false)?;
    let a = abar.gather(t, 0)?.expand_dims(-1)?;
    x0.mul(&a.sqrt()?)?.add(&eps.mul(&a.neg()?.add_scalar(1.0)?.sqrt()?)?)
}

impl Stepper for Denoiser {
    fn vars(&self) -> Vec<Variable> {
        self.net.iter().flat_map(|l| l.trainable_variables()).collect()
    }

    /// data: x0 [b, 3], the noise [b, 3], the timesteps [b] (i64).
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let (x0, eps, t) = (&data[0], &data[1], &data[2]);
        let tape = GradientTape::new();
        let (pred, loss) = tape.record(|| {
            let temb = sine_position_encoding(STEPS, 8, 0, 10000.0, x0.dtype())?.gather(t, 0)?;
            let mut h = Tensor::concat(&[&noised(x0, eps, t)?, &temb], -1)?;
            for l in &self.net {
                h = l.forward(&h, true)?;
            }
            let loss = Loss::MeanSquaredError.call(eps, &h)?;
            Ok((h, loss))
        })?;
        update(&tape, &loss, &self.vars(), &self.opt, vec![pred, loss.clone()])
    }
}

#[test]
fn ddpm_denoiser_sinusoidal_time_embedding_matches_tensorflow() -> Result<()> {
    let (mut c64, mut c32) = (Check::with(DATA, 1e-6), Check::with(DATA, 1e-4).tolerance(REL32));
    let data = [
        fill(&[4, 3], 2.3, 2.0),
        fill(&[4, 3], 0.35, 1.0),
        Tensor::from_vec(vec![0i64, 3, 9, 6], &[4])?,
    ];
    c64.one("noised", "ddpm_xt", Some(&noised(&data[0], &data[1], &data[2])?));
    let runs = train_both(&mut c64, &mut c32, "ddpm", &["pred", "loss"], Denoiser::new, &data)?;
    traced_equals_eager(&runs, 1e-14, 1e-6);
    c64.finish("ddpm f64", 1200);
    c32.finish("ddpm f32", 1200);
    Ok(())
}
