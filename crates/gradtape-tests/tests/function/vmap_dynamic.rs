//! `vmap` of a model that reads and writes a block at a position held in a
//! tensor (`dynamic_slice`, `dynamic_update_slice`), with the position
//! shared by the examples: per-example gradients (`vmap(grad(loss))`)
//! equal a loop of tapes, run by the batching rules (no op falls back to
//! the loop), traced (`function` around the vmap) equal to eager, one
//! trace serving every position.

use std::sync::Arc;

use gradtape::{function, grad, vmap, Result, Tensor};

/// Deterministic values in (-1.5, 1.5), different for each `seed`.
fn make(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| 1.5 * ((i as f64 + 1.0) * 0.731 + seed as f64 * 1.913).sin())
        .collect::<Vec<f64>>();
    Tensor::from_vec(v, shape).unwrap()
}

const B: usize = 4;
const T: usize = 6;
const D: usize = 3;
const W: usize = 2;

/// One example's loss: the block of `W` rows at `start` through a layer,
/// written back over itself, the sum of squares of the result.
fn loss(a: &[Tensor]) -> Result<Tensor> {
    let (w, x, start) = (&a[0], &a[1], &a[2]);
    let h = x.dynamic_slice(start, &[W, D])?.matmul(w)?.tanh()?;
    let y = x.dynamic_update_slice(&h, start)?;
    y.mul(&y)?.sum(&[0, 1], false)
}

fn assert_near(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes");
    for (i, (u, v)) in got.to_vec_f64().iter().zip(want.to_vec_f64()).enumerate() {
        assert!(
            (u - v).abs() <= 1e-12 * v.abs().max(1.0),
            "{what}: element {i}: {u:e} against {v:e}"
        );
    }
}

#[test]
fn per_example_gradients_through_a_block_at_a_shared_position() -> Result<()> {
    let w = make(&[D, D], 1);
    let xs = make(&[B, T, D], 2);
    let g = grad(loss).params(&[0, 1]);
    let per_example = Arc::new(vmap(
        move |a: &[Tensor]| Ok(g.call(a)?.into_iter().map(|g| g.unwrap()).collect()),
        &[None, Some(0), None],
        &[Some(0)],
    ));
    let traced = {
        let v = per_example.clone();
        function(move |(w, xs, s): &(Tensor, Tensor, Tensor)| {
            let g = v.call(&[w.clone(), xs.clone(), s.clone()])?;
            Ok((g[0].clone(), g[1].clone()))
        })
    };
    for (k, start) in [[0i64, 0], [3, 0], [4, 0], [1, 0]].iter().enumerate() {
        let s = Tensor::from_vec(start.to_vec(), &[2])?;
        let got = per_example.call(&[w.clone(), xs.clone(), s.clone()])?;
        // the loop: one gradient per example
        let mut gw = Vec::new();
        let mut gx = Vec::new();
        for e in 0..B {
            let x = xs.narrow(0, e, 1)?.reshape(&[T, D])?;
            let g = grad(loss).params(&[0, 1]).call(&[w.clone(), x, s.clone()])?;
            gw.push(g[0].clone().unwrap());
            gx.push(g[1].clone().unwrap());
        }
        let want_w = Tensor::stack(&gw.iter().collect::<Vec<_>>(), 0)?;
        let want_x = Tensor::stack(&gx.iter().collect::<Vec<_>>(), 0)?;
        assert_near(&got[0], &want_w, &format!("start {start:?}: d/dw"));
        assert_near(&got[1], &want_x, &format!("start {start:?}: d/dx"));
        // the gradients differ by example
        assert_ne!(
            got[0].narrow(0, 0, 1)?.to_vec_f64(),
            got[0].narrow(0, 1, 1)?.to_vec_f64()
        );
        let (tw, tx) = traced.call(&(w.clone(), xs.clone(), s))?;
        assert_near(&tw, &want_w, &format!("traced, start {start:?}: d/dw"));
        assert_near(&tx, &want_x, &format!("traced, start {start:?}: d/dx"));
        assert_eq!(traced.trace_count(), 1, "after {} positions", k + 1);
    }
    assert_eq!(per_example.fallbacks(), vec![], "every node batched by its rule");
    // a position past the end: the example's error, from the op
    let past = Tensor::from_vec(vec![5i64, 0], &[2])?;
    let e = per_example
        .call(&[w.clone(), xs.clone(), past])
        .unwrap_err()
        .to_string();
    assert!(e.contains("dynamic_slice") && e.contains("[6, 3]"), "{e}");
    Ok(())
}
