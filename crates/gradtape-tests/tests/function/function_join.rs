//! Sums of matrix products joined into one product (issue 13): the
//! gradient of a weight used at every step of a loop, `Σ_t a_tᵀ b_t`, runs
//! as one `MatMul` of concatenated operands. Checked for the rewrite (the
//! optimised graph's nodes) and for values: equal to the eager ones to
//! rounding (the joined sum adds in another order). And a weight read
//! transposed by many small products, transposed once (bit for bit).

use gradtape::{function, GradientTape, Result, Tensor};

fn data(shape: &[usize], seed: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| ((i as f64 * 0.731 + seed).sin() * 0.5) as f32).collect();
    Tensor::from_vec(v, shape).unwrap()
}

fn data_f64(shape: &[usize], seed: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| (i as f64 * 0.377 + seed).cos() * 0.5).collect();
    Tensor::from_vec(v, shape).unwrap()
}

/// Largest difference relative to the largest magnitude of `want`.
fn rel_err(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.shape(), want.shape());
    let (g, w) = (got.to_vec_f64(), want.to_vec_f64());
    let scale = w.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(f64::MIN_POSITIVE);
    g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max) / scale
}

type Rnn = (Vec<Tensor>, Tensor, Tensor);

/// A tanh RNN's loss and gradients w.r.t. `W` and `U`.
fn rnn((xs, w, u): &Rnn) -> Result<Vec<Tensor>> {
    let (w, u) = (w.stop_gradient(), u.stop_gradient());
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(&w);
        tape.watch(&u);
        let mut h = Tensor::zeros(&[xs[0].shape()[0], u.shape()[0]], xs[0].dtype());
        for x in xs {
            h = x.matmul(&w)?.add(&h.matmul(&u)?)?.tanh()?;
        }
        h.mul(&h)?.mean_all()
    })?;
    let [dw, du] = tape.gradient(&loss, &[w.clone(), u.clone()])?;
    let missing = || gradtape::Error::InvalidArgument {
        op: "rnn",
        msg: "no gradient".into(),
    };
    Ok(vec![loss, dw.ok_or_else(missing)?, du.ok_or_else(missing)?])
}

#[test]
fn an_rnn_weight_gradient_is_one_product_of_joined_steps() -> Result<()> {
    let steps = 6;
    for f64_data in [false, true] {
        let mk = |s: &[usize], seed| if f64_data { data_f64(s, seed) } else { data(s, seed) };
        let args: Rnn = (
            (0..steps).map(|t| mk(&[4, 3], t as f64)).collect(),
            mk(&[3, 5], 0.5),
            mk(&[5, 5], 0.9),
        );
        let f = function(rnn);
        let c = f.concrete(&args)?;
        // dW and dU: each a sum over the steps
        assert_eq!(c.compile_stats().joined, 2, "{}", c.optimized_graph());
        let g = c.optimized_graph();
        assert_eq!(g.count("ConcatV2"), 4, "{g}");
        // forward products, the backward `g U^T`, and one per weight
        // gradient (the first step's `g U^T` is not needed)
        assert_eq!(g.count("MatMul"), 2 * steps + (steps - 1) + 2, "{g}");
        let got = f.call(&args)?;
        let want = rnn(&args)?;
        let tol = if f64_data { 1e-12 } else { 1e-5 };
        for (a, b) in got.iter().zip(&want) {
            assert!(rel_err(a, b) < tol, "{} vs {}", a, b);
        }
    }
    Ok(())
}

type Terms = (Vec<Tensor>, Vec<Tensor>, Tensor);

#[test]
fn products_of_every_transpose_layout_join_and_other_terms_are_added() -> Result<()> {
    for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
        // a_k: [3, k] (or [k, 3] used transposed), b_k: [k, 4] (or [4, k])
        let ks = [2usize, 5, 3];
        let a: Vec<Tensor> = ks
            .iter()
            .enumerate()
            .map(|(i, &k)| data(&if ta { [k, 3] } else { [3, k] }, i as f64))
            .collect();
        let b: Vec<Tensor> = ks
            .iter()
            .enumerate()
            .map(|(i, &k)| data(&if tb { [4, k] } else { [k, 4] }, 10.0 + i as f64))
            .collect();
        let body = move |(a, b, c): &Terms| -> Result<Tensor> {
            let p = |i: usize| a[i].matmul_with(&b[i], ta, tb);
            // ((p0 + c) + p1) + p2: a tree with one leaf that is no product
            p(0)?.add(c)?.add(&p(1)?)?.add(&p(2)?)
        };
        let args: Terms = (a, b, data(&[3, 4], 7.0));
        let f = function(body);
        let c = f.concrete(&args)?;
        assert_eq!(c.compile_stats().joined, 1, "{}", c.optimized_graph());
        let g = c.optimized_graph();
        assert_eq!(g.count("MatMul"), 1, "{g}");
        assert_eq!(g.count("ConcatV2"), 2, "{g}");
        let got = f.call(&args)?;
        let want = body(&args)?;
        assert!(rel_err(&got, &want) < 1e-6, "{ta} {tb}: {got} vs {want}");
    }
    Ok(())
}

#[test]
fn a_product_read_elsewhere_or_a_single_one_is_not_joined() -> Result<()> {
    type Four = (Tensor, Tensor, Tensor, Tensor);
    // p0 is also returned: the sum has two products it may take, too few
    let body = |(a0, b0, a1, b1): &Four| -> Result<Vec<Tensor>> {
        let p0 = a0.matmul(b0)?;
        let s = p0.add(&a1.matmul(b1)?)?.add(&a1.matmul(b0)?)?;
        Ok(vec![s, p0])
    };
    let args = (
        data(&[3, 2], 0.0),
        data(&[2, 4], 1.0),
        data(&[3, 2], 2.0),
        data(&[2, 4], 3.0),
    );
    let f = function(body);
    let c = f.concrete(&args)?;
    assert_eq!(c.compile_stats().joined, 0, "{}", c.optimized_graph());
    let (got, want) = (f.call(&args)?, body(&args)?);
    for (x, y) in got.iter().zip(&want) {
        assert_eq!(x.to_vec_f64(), y.to_vec_f64());
    }
    // a partial sum read elsewhere ends a tree: (p0 + p1 + p2) is
    // returned, and the sum above it has one product and that partial sum
    let body = |(a0, b0, a1, b1): &Four| -> Result<Vec<Tensor>> {
        let s = a0.matmul(b0)?.add(&a1.matmul(b1)?)?.add(&a1.matmul(b0)?)?;
        let t = s.add(&a0.matmul(b1)?)?;
        Ok(vec![t, s])
    };
    let f = function(body);
    let c = f.concrete(&args)?;
    // the lower sum joins its two products; the upper one keeps its own
    assert_eq!(c.compile_stats().joined, 1, "{}", c.optimized_graph());
    let (got, want) = (f.call(&args)?, body(&args)?);
    for (x, y) in got.iter().zip(&want) {
        assert!(rel_err(x, y) < 1e-6, "{x} vs {y}");
    }
    Ok(())
}

type Steps = (Vec<Tensor>, Tensor);

/// Whether `f32` products run on gradtape's AVX-512 kernel here.
fn avx512_kernel() -> bool {
    #[cfg(target_arch = "x86_64")]
    let cpu = std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    let cpu = false;
    cpu && std::env::var("GRADTAPE_SGEMM").map_or(true, |v| v != "0")
}

#[test]
fn a_weight_read_transposed_by_many_products_is_transposed_once() -> Result<()> {
    // `g_{t+1} = tanh(g_t Uᵀ)`, as an RNN's backward pass: no sum, so the
    // copy changes no bit (and each left operand comes from the product
    // before: nothing to stack)
    let body = |(gs, u): &Steps| -> Result<Vec<Tensor>> {
        let mut g = gs[0].clone();
        let mut out = Vec::new();
        for _ in 0..4 {
            g = g.matmul_with(u, false, true)?.tanh()?;
            out.push(g.clone());
        }
        Ok(out)
    };
    for f64_data in [false, true] {
        let mk = |s: &[usize], seed| if f64_data { data_f64(s, seed) } else { data(s, seed) };
        let args: Steps = (vec![mk(&[6, 40], 1.0)], mk(&[40, 40], 9.0));
        let f = function(body);
        let c = f.concrete(&args)?;
        let g = c.optimized_graph();
        // f32 products on the AVX-512 kernel only (the one that reads
        // operands in place, and adds in one order for every layout)
        let want_copies = usize::from(!f64_data && avx512_kernel());
        assert_eq!(c.compile_stats().transposed, want_copies, "{g}");
        assert_eq!(g.count("Contiguous"), want_copies, "{g}");
        let got = f.call(&args)?;
        let want = body(&args)?;
        for (x, y) in got.iter().zip(&want) {
            assert_eq!(x.shape(), y.shape());
            assert_eq!(x.to_vec_f64(), y.to_vec_f64());
        }
    }
    // a single such product keeps its flag
    let one = |(gs, u): &Steps| -> Result<Tensor> { gs[0].matmul_with(u, false, true) };
    let args: Steps = (vec![data(&[6, 5], 0.0)], data(&[40, 5], 9.0));
    assert_eq!(function(one).concrete(&args)?.compile_stats().transposed, 0);
    Ok(())
}

#[test]
fn products_by_one_weight_stack_into_one_and_give_the_same_bits() -> Result<()> {
    // `x_t W` for inputs known up front, and one whose left operand is
    // made after the first product (not stacked)
    let body = |(xs, w): &Steps| -> Result<Vec<Tensor>> {
        let mut out: Vec<Tensor> = xs.iter().map(|x| x.matmul(w)).collect::<Result<_>>()?;
        let late = out[0].slice(&[0, 0], &[8, 16])?.exp()?;
        out.push(late.matmul(w)?);
        Ok(out)
    };
    for f64_data in [false, true] {
        let mk = |s: &[usize], seed| if f64_data { data_f64(s, seed) } else { data(s, seed) };
        let args: Steps = ((0..4).map(|t| mk(&[8, 16], t as f64)).collect(), mk(&[16, 40], 9.0));
        let f = function(body);
        let c = f.concrete(&args)?;
        let g = c.optimized_graph();
        let on = !f64_data && avx512_kernel();
        assert_eq!(c.compile_stats().stacked, usize::from(on), "{g}");
        assert_eq!(g.count("MatMul"), if on { 2 } else { 5 }, "{g}");
        let got = f.call(&args)?;
        let want = body(&args)?;
        assert_eq!(got.len(), want.len());
        for (x, y) in got.iter().zip(&want) {
            assert_eq!(x.shape(), y.shape());
            assert_eq!(x.to_vec_f64(), y.to_vec_f64());
        }
    }
    Ok(())
}
