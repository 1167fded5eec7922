//! The graphs of vectorized Jacobians kept by structure
//! (`src/function/vmap/cache.rs`): a later Jacobian of the same structure
//! runs the kept graph on its own tensors, and any change of structure
//! (shapes, dtypes, ops, sources, which small constants are equal) traces
//! and optimizes its own graph. Also the trace's placeholders for products:
//! Jacobians through products have the values of the row-by-row ones.

use gradtape::__internals::function::jacobian::{graph_cache_counts, placeholder_products};
use gradtape::{DType, GradientTape, JacobianOptions, Result, Tensor};

/// `n` values of a smooth pattern, shifted by `k`.
fn data(n: usize, k: f64) -> Vec<f64> {
    (0..n).map(|i| (0.37 * i as f64 + k).sin()).collect()
}

/// Asserts that `got` and `want` agree to rounding.
fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (a, b) in got.iter().zip(want) {
        assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "{a} vs {b}");
    }
}

/// The Jacobian of `tanh(W x + b)` by x, vectorized, with the one the
/// formula gives (`(1 - y_i²) W_ij`).
fn tanh_layer(n: usize, k: f64) -> Result<(Vec<f64>, Vec<f64>)> {
    let (wv, xv, bv) = (data(n * n, k), data(n, k + 1.0), data(n, k + 2.0));
    let w = Tensor::from_vec(wv.clone(), &[n, n])?;
    let x = Tensor::vector(&xv);
    let b = Tensor::vector(&bv);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        w.matmul(&x.reshape(&[n, 1])?)?.reshape(&[n])?.add(&b)?.tanh()
    })?;
    let j = tape.jacobian(&y, &x)?.expect("connected").to_vec::<f64>()?;
    let mut want = vec![0.0; n * n];
    for i in 0..n {
        let z: f64 = (0..n).map(|j| wv[i * n + j] * xv[j]).sum::<f64>() + bv[i];
        let d = 1.0 - z.tanh().powi(2);
        for j in 0..n {
            want[i * n + j] = d * wv[i * n + j];
        }
    }
    Ok((j, want))
}

/// (hits, misses) since `before`.
fn since(before: (usize, usize)) -> (usize, usize) {
    let now = graph_cache_counts();
    (now.0 - before.0, now.1 - before.1)
}

#[test]
fn a_jacobian_of_a_kept_structure_runs_on_its_own_tensors() -> Result<()> {
    let c = graph_cache_counts();
    let (j, want) = tanh_layer(5, 0.0)?;
    close(&j, &want);
    assert_eq!(since(c), (0, 1));
    // other values, one structure: the kept graph, fed this tape's W, b, y
    let c = graph_cache_counts();
    let (j, want) = tanh_layer(5, 3.0)?;
    close(&j, &want);
    assert_eq!(since(c), (1, 0));
    Ok(())
}

/// The Jacobian of `x * c1 + x * c2` (constant vectors) by x, vectorized:
/// diag(c1 + c2).
fn two_constants(c1: &[f64], c2: &[f64]) -> Result<Vec<f64>> {
    let x = Tensor::vector(&data(c1.len(), 0.5));
    let (c1, c2) = (Tensor::vector(c1), Tensor::vector(c2));
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        x.mul(&c1)?.add(&x.mul(&c2)?)
    })?;
    tape.jacobian(&y, &x)?.expect("connected").to_vec::<f64>()
}

#[test]
fn any_change_of_structure_traces_its_own_graph() -> Result<()> {
    let c = graph_cache_counts();
    tanh_layer(4, 0.0)?;
    assert_eq!(since(c), (0, 1));
    // another shape
    let c = graph_cache_counts();
    let (j, want) = tanh_layer(3, 1.0)?;
    close(&j, &want);
    assert_eq!(since(c), (0, 1));
    // another dtype
    let c = graph_cache_counts();
    let x = Tensor::vector(&[0.5f32, -1.0, 2.0, 0.25]);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        x.tanh()
    })?;
    let j = tape.jacobian(&y, &x)?.expect("connected").to_vec::<f32>()?;
    assert_eq!(since(c), (0, 1));
    let xv = x.to_vec::<f32>()?;
    for i in 0..4 {
        let d = 1.0 - xv[i].tanh().powi(2);
        assert!((j[i * 5] - d).abs() < 1e-6, "{} vs {d}", j[i * 5]);
    }
    // another op
    let c = graph_cache_counts();
    let x = Tensor::vector(&[0.5f64, -1.0, 2.0, 0.25]);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        x.sin()
    })?;
    let j = tape.jacobian(&y, &x)?.expect("connected").to_vec::<f64>()?;
    assert_eq!(since(c), (0, 1));
    for (i, xi) in x.to_vec::<f64>()?.iter().enumerate() {
        assert_eq!(j[i * 5], xi.cos());
    }
    // other sources: by x and by b, two outputs
    let c = graph_cache_counts();
    let x = Tensor::vector(&[0.5f64, -1.0]);
    let b = Tensor::vector(&[1.0f64, 2.0]);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&[&x, &b]);
        x.mul(&b)
    })?;
    let [jx, jb] = tape.jacobian(&y, &[&x, &b])?;
    assert_eq!(since(c), (0, 1));
    assert_eq!(jx.expect("connected").to_vec::<f64>()?, vec![1.0, 0.0, 0.0, 2.0]);
    assert_eq!(jb.expect("connected").to_vec::<f64>()?, vec![0.5, 0.0, 0.0, -1.0]);
    // small constants: equal ones are merged (one product of the
    // cotangent, added to itself), so which are equal is structure, not
    // their values
    let c = graph_cache_counts();
    assert_eq!(two_constants(&[2.0, 3.0], &[2.0, 3.0])?, vec![4.0, 0.0, 0.0, 6.0]);
    assert_eq!(since(c), (0, 1));
    let c = graph_cache_counts();
    assert_eq!(two_constants(&[2.0, 3.0], &[5.0, 7.0])?, vec![7.0, 0.0, 0.0, 10.0]);
    assert_eq!(since(c), (0, 1));
    let c = graph_cache_counts();
    assert_eq!(two_constants(&[1.0, 1.0], &[1.0, 1.0])?, vec![2.0, 0.0, 0.0, 2.0]);
    assert_eq!(since(c), (1, 0));
    let c = graph_cache_counts();
    assert_eq!(two_constants(&[0.5, 1.0], &[4.0, 8.0])?, vec![4.5, 0.0, 0.0, 9.0]);
    assert_eq!(since(c), (1, 0));
    // and the first structure again
    let c = graph_cache_counts();
    let (j, want) = tanh_layer(4, 2.0)?;
    close(&j, &want);
    assert_eq!(since(c), (1, 0));
    Ok(())
}

/// d/dx sum(J) for J the Jacobian of `x * x * w` (diag(2 x w)), taken
/// under an outer tape: 2 w.
fn outer_gradient(xv: &[f64], wv: &[f64]) -> Result<Vec<f64>> {
    let x = Tensor::vector(xv);
    let w = Tensor::vector(wv);
    let outer = GradientTape::new();
    let s = outer.record(|| {
        outer.watch(&x);
        let inner = GradientTape::new();
        let y = inner.record(|| {
            inner.watch(&x);
            x.mul(&x)?.mul(&w)
        })?;
        inner.jacobian(&y, &x)?.expect("connected").sum_all()
    })?;
    outer.gradient(&s, &x)?.expect("connected").to_vec::<f64>()
}

#[test]
fn a_kept_graph_is_differentiated_through_this_tapes_tensors() -> Result<()> {
    let c = graph_cache_counts();
    assert_eq!(
        outer_gradient(&[1.0, 2.0, 3.0], &[1.0, 10.0, 100.0])?,
        vec![2.0, 20.0, 200.0]
    );
    assert_eq!(since(c), (0, 1));
    // a hit: the outer tape sees the ops on this call's x and w
    let c = graph_cache_counts();
    assert_eq!(
        outer_gradient(&[-1.0, 0.5, 4.0], &[3.0, 5.0, 7.0])?,
        vec![6.0, 10.0, 14.0]
    );
    assert_eq!(since(c), (1, 0));
    Ok(())
}

#[test]
fn jacobians_through_products_agree_with_the_row_by_row_ones() -> Result<()> {
    // the trace's products are placeholders (zeros): the graph, run on
    // every row, gives the values; the batched Jacobian of a chain of
    // products, transposed ones among them, matches one pass per row
    let a = Tensor::from_vec(data(12, 0.0), &[4, 3])?;
    let m = Tensor::from_vec(data(16, 1.0), &[4, 4])?;
    let x = Tensor::from_vec(data(6, 2.0), &[3, 2])?;
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&x);
        let h = a.matmul(&x)?.tanh()?; // [4, 2]
        m.matmul_with(&h, true, false)?.matmul_with(&x, false, true)?.sin() // [4, 3]
    })?;
    let j = tape.jacobian(&y, &x)?.expect("connected");
    let jn = tape
        .jacobian_with(&y, &x, JacobianOptions::default().vectorized(false))?
        .expect("connected");
    assert_eq!(j.shape(), &[4, 3, 3, 2]);
    close(&j.to_vec::<f64>()?, &jn.to_vec::<f64>()?);
    assert!(j.to_vec::<f64>()?.iter().any(|&v| v.abs() > 1e-3));
    // f32 too
    let x32 = x.cast(DType::F32)?;
    let (a32, m32) = (a.cast(DType::F32)?, m.cast(DType::F32)?);
    let y = tape.record(|| {
        tape.watch(&x32);
        m32.matmul_with(&a32.matmul(&x32)?.tanh()?, true, false)
    })?;
    let j = tape.jacobian(&y, &x32)?.expect("connected").to_vec::<f32>()?;
    let jn = tape
        .jacobian_with(&y, &x32, JacobianOptions::default().vectorized(false))?
        .expect("connected")
        .to_vec::<f32>()?;
    for (p, q) in j.iter().zip(&jn) {
        assert!((p - q).abs() <= 1e-5 * (1.0 + q.abs()), "{p} vs {q}");
    }
    Ok(())
}

#[test]
fn the_vectorized_traces_make_their_products_placeholders() -> Result<()> {
    // the trace of a vectorized Jacobian wants only its graph: its products
    // of the example's values are zeros of their shape, not computed; the
    // row-by-row Jacobian and a plain gradient compute every product
    let before = placeholder_products();
    let (j, want) = tanh_layer(6, 3.0)?;
    close(&j, &want);
    assert!(
        placeholder_products() > before,
        "no product of the trace was a placeholder"
    );
    let before = placeholder_products();
    let w = Tensor::from_vec(data(9, 0.5), &[3, 3])?;
    let x = Tensor::vector(&data(3, 1.5));
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&x);
        w.matmul(&x.reshape(&[3, 1])?)?.tanh()
    })?;
    tape.jacobian_with(&y, &x, JacobianOptions::default().vectorized(false))?
        .expect("connected");
    tape.gradient(&y, &x)?.expect("connected");
    assert_eq!(placeholder_products(), before, "an eager product was a placeholder");
    Ok(())
}
