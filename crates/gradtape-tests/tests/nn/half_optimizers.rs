//! Optimizers on float16 variables against Keras 3.15.1 on TensorFlow 2.21
//! (the script below, run in float16): Keras updates a half variable in its
//! own dtype, each operation rounded, and so does gradtape (a block at a
//! time since `optim/half_update.rs`, the same bits).
//!
//! The numbers also show why a GPT trained purely in float16 with Adam
//! diverges (at width 128, 2 blocks, 8 x 64 tokens its loss went 4.7 ->
//! 15 after one step and then NaN, its residual stream past 65504): a
//! gradient of 3e-3 has `(1 - β₂) g² ≈ 9e-9`, which float16 rounds to 0, so
//! the second moment stays 0 and the step is `m̂ · lr / ε`, about 2 here
//! (the weight at 1.0 goes to -1.0); a gradient of 1e-4 gives `m · α ≈
//! 3e-9`, rounded to 0 too: no step at all. Keras and PyTorch keep
//! float32 master weights for mixed precision instead (Keras's
//! `mixed_float16` policy, PyTorch's autocast); the same GPT with float32
//! weights and float16 compute tracked its float32 run (loss 0.0255 vs
//! 0.0252 after 15 steps).
//!
//! ```python
//! w0 = np.array([0.5, -0.25, 1.0, 0.125, -2.0, 0.75, 0.0, 3.0], np.float16)
//! g = np.array([1e-4, -2e-4, 3e-3, 5e-5, -1e-2, 0.5, 2e-4, -7e-5], np.float16)
//! gs = [g * np.float16(s) for s in (1.0, 0.5, 2.0)]
//! for opt in [Adam(1e-3), AdamW(1e-3, weight_decay=0.01), SGD(0.1, momentum=0.9)]:
//!     v = keras.Variable(w0, dtype="float16")
//!     for g in gs: opt.apply_gradients([(tf.constant(g), v)])
//!     print(v.numpy().view(np.uint16))
//! ```

use gradtape::optim::{Adam, AdamW, Optimizer, Sgd};
use std::sync::{Arc, Mutex};

use gradtape::{function, DType, Result, Tensor, Variable};

/// The script's weights, gradients and Keras's results (f16 bits).
const W0: [f64; 8] = [0.5, -0.25, 1.0, 0.125, -2.0, 0.75, 0.0, 3.0];
const G: [f64; 8] = [1e-4, -2e-4, 3e-3, 5e-5, -1e-2, 0.5, 2e-4, -7e-5];
const ADAM: [u16; 8] = [0x3800, 0xb400, 0xbc01, 0x3000, 0xbffd, 0x39fa, 0x0, 0x4200];
const SGD_MOMENTUM: [u16; 8] = [0x3800, 0xb3ff, 0x3bfc, 0x3000, 0xbffb, 0x377b, 0x876c, 0x4200];

/// The script's three steps, each an eager `apply_gradients`, or with
/// `traced` one call of a traced function doing it (the update a node of
/// the graph, run at each call): the variable's bits after.
fn three_steps_as<O: Optimizer + Send + 'static>(opt: O, traced: bool) -> Result<Vec<u16>> {
    let v = Variable::new(Tensor::from_vec(W0.to_vec(), &[8])?.cast(DType::F16)?);
    let g = Tensor::from_vec(G.to_vec(), &[8])?.cast(DType::F16)?;
    let opt = Arc::new(Mutex::new(opt));
    let step = {
        let (v, opt) = (v.clone(), opt.clone());
        move |gs: &Tensor| -> Result<Tensor> {
            opt.lock().unwrap().apply_gradients([(Some(gs.clone()), &v)])?;
            Ok(v.read())
        }
    };
    let f = function(step.clone());
    for s in [1.0, 0.5, 2.0] {
        // (the scale applied in float16, as the script's)
        let gs = g.mul(&Tensor::scalar(s).cast(DType::F16)?)?;
        if traced {
            f.call(&gs)?;
        } else {
            step(&gs)?;
        }
    }
    if traced {
        assert_eq!(f.trace_count(), 1, "one trace for the three steps");
    }
    Ok(v.read()
        .to_vec::<gradtape::f16>()?
        .iter()
        .map(|h| h.to_bits())
        .collect())
}

/// Adam, AdamW and SGD with momentum, three steps each, eagerly or as
/// nodes of a traced step, against Keras's bits.
fn three_optimizers_match_keras(traced: bool) -> Result<()> {
    assert_eq!(three_steps_as(Adam::new(1e-3), traced)?, ADAM, "adam");
    // (the decay w · 0.01 · 1e-3 is below half an ulp of every weight: Adam's bits)
    assert_eq!(
        three_steps_as(AdamW::new(1e-3).weight_decay(0.01), traced)?,
        ADAM,
        "adamw"
    );
    assert_eq!(
        three_steps_as(Sgd::new(0.1).momentum(0.9)?, traced)?,
        SGD_MOMENTUM,
        "sgd momentum"
    );
    Ok(())
}

#[test]
fn float16_adam_adamw_and_momentum_match_keras_bit_for_bit() -> Result<()> {
    three_optimizers_match_keras(false)
}

/// The same updates as nodes of a traced step: Keras's bits again.
#[test]
fn float16_updates_in_a_traced_step_match_keras_bit_for_bit() -> Result<()> {
    three_optimizers_match_keras(true)
}
