//! A fused kernel's call plan (`compile/kernel/prepared.rs`: what its
//! runs work out from the program alone, made at its first run and kept)
//! against calls whose inputs differ in everything the plan leaves to
//! each run: one compiled function called, one call after another, with a
//! contiguous input and then a view of the same shape (read in place as
//! rows), a bias of `[n]` and then one of `[rows, 1]` (another broadcast),
//! `f32` and then `f64`, one element, and the first inputs again. Each
//! call's values must be the eager ops' bits (the fused elementwise ops
//! compute what the eager kernels compute, element by element), and the
//! last call the first call's: a plan made for one call and kept (a
//! stale layout, a gather read as a load, a donor whose register was
//! thought to read in place) would change them.

use gradtape::{function, DType, Result, Tensor};

use super::function_fuse_views::all_bits;

/// Deterministic data of `shape` in `dtype`.
fn data(shape: &[usize], seed: f64, dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| (i as f64 * 0.731 + seed).sin() * 1.5).collect();
    Tensor::from_vec(v, shape).unwrap().cast(dtype).unwrap()
}

/// The step: a product whose output (held by nothing else) a fused
/// kernel may write in place, a bias broadcast into it, and a second
/// chain reading `x` and the bias.
fn step(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Vec<Tensor>> {
    let h = x.matmul(w)?;
    Ok(vec![h.add(b)?.tanh()?, x.mul_scalar(0.5)?.sub(b)?.mul(x)?.exp()?])
}

#[test]
fn one_compiled_function_over_other_layouts_broadcasts_and_dtypes_gives_eager_bits_each_call() -> Result<()> {
    let f = function(|(x, w, b): &(Tensor, Tensor, Tensor)| step(x, w, b));
    let (rows, n) = (6, 40);
    let calls: Vec<(&str, Tensor, Tensor, Tensor)> = vec![
        (
            "contiguous, bias [n]",
            data(&[rows, n], 0.3, DType::F32),
            data(&[n, n], 0.9, DType::F32),
            data(&[n], 1.7, DType::F32),
        ),
        (
            "x a column slice (rows read in place), bias [n]",
            data(&[rows, 3 * n], 0.5, DType::F32).narrow(1, n, n)?,
            data(&[n, n], 1.1, DType::F32),
            data(&[n], 2.1, DType::F32),
        ),
        (
            "bias [rows, 1]",
            data(&[rows, n], 0.7, DType::F32),
            data(&[n, n], 1.3, DType::F32),
            data(&[rows, 1], 2.5, DType::F32),
        ),
        (
            "f64",
            data(&[rows, n], 0.3, DType::F64),
            data(&[n, n], 0.9, DType::F64),
            data(&[n], 1.7, DType::F64),
        ),
        (
            "one element",
            data(&[1, 1], 0.3, DType::F32),
            data(&[1, 1], 0.9, DType::F32),
            data(&[1], 1.7, DType::F32),
        ),
        (
            "wide (tasks over the threads), bias [n]",
            data(&[64, 1024], 0.2, DType::F32),
            data(&[1024, 1024], 0.4, DType::F32).mul_scalar(0.03)?,
            data(&[1024], 0.6, DType::F32),
        ),
    ];
    let mut first = None;
    for (name, x, w, b) in calls.iter() {
        let want = step(x, w, b)?;
        // twice: the second call runs in the first one's memory, its
        // kernels' plans made
        for k in 0..2 {
            let got = f.call(&(x.clone(), w.clone(), b.clone()))?;
            assert_eq!(all_bits(&got), all_bits(&want), "{name}, call {k}");
            first.get_or_insert_with(|| all_bits(&got));
        }
    }
    // the first inputs again, after the others' plans
    let (_, x, w, b) = &calls[0];
    let again = f.call(&(x.clone(), w.clone(), b.clone()))?;
    assert_eq!(Some(all_bits(&again)), first);
    Ok(())
}
