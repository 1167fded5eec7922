//! A compiled step's small products (`2^18` multiply-adds, below the
//! eager bound for splitting a product over the threads) split only onto
//! helpers already awake; otherwise the caller computes them whole rather
//! than waking a parked helper (`sgemm`'s `PAR_FLOPS_COMPILED`). Either
//! way each element is the same sum in the same order: the traced values
//! are the eager bits whether the helpers were parked (after a pause) or
//! spinning (right after a large product).

use gradtape::{function, GradientTape, Result, Tensor};

fn data(shape: &[usize], seed: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| ((i as f64 * 0.731 + seed).sin() * 0.5) as f32).collect();
    Tensor::from_vec(v, shape).unwrap()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec_f64().iter().map(|v| (*v as f32).to_bits()).collect()
}

/// `tanh(x @ w)` and its gradient for `w` (`xᵀ @ dy`): two `[32,64]x[64,128]`-sized products.
fn step((x, w): &(Tensor, Tensor)) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(w);
        x.matmul(w)?.tanh()
    })?;
    // (the gradient of every element, summed, as TensorFlow's)
    let dw = tape.gradient(&y, w)?.expect("connected");
    Ok(vec![y, dw])
}

#[test]
fn small_products_of_a_compiled_step_have_the_eager_bits_with_helpers_parked_or_awake() -> Result<()> {
    let f = function(step);
    let big = (data(&[512, 512], 5.0), data(&[512, 512], 6.0));
    for round in 0..6u32 {
        let args = (
            data(&[32, 64], f64::from(round)),
            data(&[64, 128], 0.5 + f64::from(round)),
        );
        if round % 2 == 0 {
            // the helpers spin 200 µs after a job, then park
            std::thread::sleep(std::time::Duration::from_millis(20));
        } else {
            // a product split over the threads leaves them spinning
            big.0.matmul(&big.1)?;
        }
        let got = f.call(&args)?;
        let want = step(&args)?;
        assert_eq!(bits(&got[0]), bits(&want[0]), "values, round {round}");
        assert_eq!(bits(&got[1]), bits(&want[1]), "gradient, round {round}");
    }
    Ok(())
}
