//! The buffer cache (`gradtape::buffer_cache_bytes`) stays flat over the
//! steps of a training loop: every large buffer a step frees is one a later
//! step takes again. A kernel whose outputs bypass the cache fills it with
//! buffers nobody takes, up to its limit (256 MiB): the fused attention's
//! outputs and `gather`'s did, which showed as a resident size growing by
//! the attention's outputs at every step of the transformer bench.

use gradtape::nn::{Layer, TransformerBlock};
use gradtape::{buffer_cache_bytes, DType, GradientTape, Result, Rng, Tensor};

use crate::counting::serial;

/// Runs `step` 3 times, then 12 more, and checks the cache holds no more
/// bytes after the 15th than after the 3rd.
fn flat(what: &str, mut step: impl FnMut() -> Result<()>) -> Result<()> {
    for _ in 0..3 {
        step()?;
    }
    let warm = buffer_cache_bytes();
    for _ in 0..12 {
        step()?;
    }
    let after = buffer_cache_bytes();
    assert!(
        after <= warm,
        "{what}: the buffer cache grew from {warm} to {after} bytes"
    );
    Ok(())
}

#[test]
fn a_training_steps_buffers_come_back_from_the_cache() -> Result<()> {
    let _serial = serial();
    let mut rng = Rng::new(3);
    // fused attention, forward and backward (outputs of 1 and 3 MiB)
    let (q, k, v) = (
        rng.normal(&[8, 4, 128, 64], 0.0, 1.0, DType::F32)?,
        rng.normal(&[8, 4, 128, 64], 0.0, 1.0, DType::F32)?,
        rng.normal(&[8, 4, 128, 64], 0.0, 1.0, DType::F32)?,
    );
    flat("attention", || {
        let tape = GradientTape::new();
        let l = tape.record(|| {
            tape.watch(&[q.clone(), k.clone(), v.clone()]);
            q.scaled_dot_product_attention(&k, &v, None, true, None)?
                .square()?
                .sum_all()
        })?;
        tape.gradient(&l, &[q.clone(), k.clone(), v.clone()])?;
        Ok(())
    })?;
    // a row lookup of 512 KiB
    let table = rng.normal(&[1000, 256], 0.0, 1.0, DType::F32)?;
    let ids = Tensor::from_vec((0..512i64).map(|i| (i * 7) % 1000).collect(), &[512])?;
    flat("gather", || table.gather(&ids, 0).map(drop))?;
    // a transformer block's step
    let block = TransformerBlock::builder(64, 4, 256).causal(true).build(&mut rng)?;
    let x = rng.normal(&[8, 64, 64], 0.0, 1.0, DType::F32)?;
    flat("transformer block", || {
        let tape = GradientTape::new();
        let l = tape.record(|| block.forward(&x, true)?.square()?.mean_all())?;
        tape.gradient(&l, &gradtape::nn::Module::trainable_variables(&block))?;
        Ok(())
    })
}

/// Puts the cache's limit back to its default when a test ends, passed or
/// failed.
struct Limit;

impl Drop for Limit {
    fn drop(&mut self) {
        gradtape::set_buffer_cache_limit(256 << 20);
    }
}

/// Buffers freed once and never asked for again (here three of 2.5 MiB,
/// as an evaluation at another batch size before training leaves) must not
/// hold the cache against a loop's buffers: a full cache makes room for a
/// freed buffer by releasing the buffers it has held longest. It refused
/// the newcomer before, so every step of the loop below allocated its two
/// 1 MiB outputs afresh (10 in 5 steps), as the `gpt` example's steps did
/// at context 1024 behind its validation pass's buffers.
#[test]
fn buffers_freed_once_do_not_lock_a_loop_out_of_the_cache() -> Result<()> {
    let _serial = serial();
    let _limit = Limit;
    gradtape::clear_buffer_cache();
    gradtape::set_buffer_cache_limit(8 << 20);
    for extra in 0..3 {
        drop(Tensor::from_vec(vec![0.5f32; 655_360 + extra], &[655_360 + extra])?.exp()?);
    }
    assert!(
        buffer_cache_bytes() >= 7 << 20,
        "the one-off buffers are cached: {} bytes",
        buffer_cache_bytes()
    );
    let x = Tensor::from_vec(vec![0.25f32; 262_144], &[262_144])?; // 1 MiB
    let step = || -> Result<()> {
        let y = x.exp()?;
        let z = y.sin()?;
        drop(y);
        assert!(z.sum_all()?.to_vec::<f32>()?[0] > 0.0);
        Ok(())
    };
    step()?;
    step()?;
    let (fresh, done) = crate::counting::buffers_of(1 << 20, || (0..5).try_for_each(|_| step()));
    done?;
    assert_eq!(
        fresh, 0,
        "steps allocated {fresh} buffers of 1 MiB instead of taking them from the cache"
    );
    assert!(buffer_cache_bytes() <= 8 << 20, "the cache keeps to its limit");
    Ok(())
}
