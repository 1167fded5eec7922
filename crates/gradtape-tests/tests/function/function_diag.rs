//! Products by a diagonal matrix run as a scaling (issue 12): a Jacobian
//! seeded with the identity multiplies a diagonal matrix by a weight, which
//! the compiled graph computes as a row scaling, bit for bit the product's
//! values, and as the product when the operand is not diagonal at run time
//! or the other operand is not finite.

use gradtape::{function, Function, FunctionOptions, GradientTape, Result, Tensor};

fn data(shape: &[usize], seed: f64, scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i as f64 * 0.37 + seed).sin() * scale) as f32)
        .collect();
    Tensor::from_vec(v, shape).unwrap()
}

/// Bits, with every NaN the same (the product and the scaling may make
/// NaNs of other payloads).
fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() })
        .collect()
}

type Args = (Tensor, Tensor, Tensor);

/// The Jacobian of `tanh(W x + b)` w.r.t. `x`.
fn jacobian((x, w, b): &Args) -> Result<Vec<Tensor>> {
    let n = x.shape()[0];
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(x);
        w.matmul(&x.reshape(&[n, 1])?)?.reshape(&[n])?.add(b)?.tanh()
    })?;
    let j = tape.jacobian(&y, x)?.expect("reached");
    Ok(vec![j])
}

fn unoptimised<F>(f: F) -> Function<Args, Vec<Tensor>, F>
where
    F: Fn(&Args) -> Result<Vec<Tensor>> + Send + Sync + 'static,
{
    let off = FunctionOptions {
        optimize: false,
        ..FunctionOptions::default()
    };
    Function::with_options(f, off)
}

#[test]
fn a_jacobian_scales_rows_bit_for_bit() -> Result<()> {
    let n = 64;
    let args = (data(&[n], 0.5, 1.0), data(&[n, n], 1.0, 0.125), data(&[n], 2.0, 0.1));
    let f = function(jacobian);
    let c = f.concrete(&args)?;
    let g = c.optimized_graph();
    assert_eq!(c.compile_stats().diagonal, 1, "{g}");
    assert_eq!(g.count("DiagMatMul"), 1, "{g}");
    let plain = unoptimised(jacobian);
    let want = plain.call(&args)?;
    let eager = jacobian(&args)?;
    assert_eq!(bits(&want[0]), bits(&eager[0]));
    for _ in 0..2 {
        assert_eq!(bits(&f.call(&args)?[0]), bits(&want[0]));
    }
    Ok(())
}

#[test]
fn a_weight_not_finite_runs_the_product() -> Result<()> {
    let n = 32;
    let mut wv = data(&[n, n], 1.0, 0.125).to_vec::<f32>()?;
    wv[3 * n + 5] = f32::INFINITY;
    wv[7 * n + 1] = f32::NAN;
    let args = (
        data(&[n], 0.5, 1.0),
        Tensor::from_vec(wv, &[n, n])?,
        data(&[n], 2.0, 0.1),
    );
    let f = function(jacobian);
    assert_eq!(f.concrete(&args)?.optimized_graph().count("DiagMatMul"), 1);
    let want = unoptimised(jacobian).call(&args)?;
    let got = f.call(&args)?;
    assert_eq!(bits(&got[0]), bits(&want[0]));
    // the product's NaNs (0 · inf), which a scaling would not make
    let nans = got[0].to_vec::<f32>()?.iter().filter(|x| x.is_nan()).count();
    assert!(nans > n, "{nans}");
    Ok(())
}

/// `(I + t) Wᵀ`, `Wᵀ (t I)`, `(t I) Wᵀ` for a traced scalar `t`: functions
/// of the identity, one not diagonal at run time (the product), two that
/// are, on either side, with transposes.
fn products((w, t, _): &Args) -> Result<Vec<Tensor>> {
    let n = w.shape()[0];
    let eye = Tensor::eye(n, w.dtype());
    let dense = eye.add(t)?.matmul_with(w, false, true)?;
    let diag = eye.mul(t)?;
    let right = w.matmul_with(&diag, true, false)?;
    let left = diag.matmul_with(w, false, true)?;
    Ok(vec![dense, right, left])
}

#[test]
fn products_by_functions_of_the_identity_equal_the_products() -> Result<()> {
    let n = 24;
    let clean = data(&[n, n], 3.0, 1.0);
    // a zero (a zero product, whose sign the product decides) and a
    // denormal (flushed): the product runs
    let mut wv = clean.to_vec::<f32>()?;
    wv[2] = 0.0;
    wv[3] = -1e-39;
    let zeros = Tensor::from_vec(wv, &[n, n])?;
    let f = function(products);
    let plain = unoptimised(products);
    for w in [clean, zeros] {
        let args = (w, Tensor::scalar(-2.5f32), Tensor::scalar(0.0f32));
        let c = f.concrete(&args)?;
        let g = c.optimized_graph();
        assert_eq!(g.count("DiagMatMul"), 3, "{g}");
        let want = plain.call(&args)?;
        let got = f.call(&args)?;
        for (a, b) in got.iter().zip(&want) {
            assert_eq!(bits(a), bits(b));
        }
    }
    Ok(())
}
