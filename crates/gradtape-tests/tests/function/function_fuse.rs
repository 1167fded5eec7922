//! Fusion of row and column broadcasts and of partial reductions (issue
//! 13.1): what the bench workloads ran unfused. Each pattern is checked
//! for fusing (the optimised graph's nodes) and for values: an optimised
//! run gives the eager values bit for bit (broadcasts are read by index,
//! partial reductions fold in the eager kernels' order).

use gradtape::{function, GradientTape, Result, Tensor};

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec_f64().iter().map(|v| v.to_bits()).collect()
}

/// Bit patterns of all tensors, with their shapes.
fn all_bits(ts: &[Tensor]) -> Vec<(Vec<usize>, Vec<u64>)> {
    ts.iter().map(|t| (t.shape().to_vec(), bits(t))).collect()
}

/// Deterministic test data of `shape`, with a few signed zeros.
fn data_f32(shape: &[usize], seed: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| match i % 17 {
            5 => -0.0,
            11 => 0.0,
            _ => ((i as f64 * 0.731 + seed).sin() * 2.5) as f32,
        })
        .collect();
    Tensor::from_vec(v, shape).unwrap()
}

fn data_f64(shape: &[usize], seed: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| (i as f64 * 0.377 + seed).cos() * 3.0).collect();
    Tensor::from_vec(v, shape).unwrap()
}

type Pair = (Tensor, Tensor);

#[test]
fn a_bias_row_and_its_activation_fuse_into_one_kernel() -> Result<()> {
    for bias_shape in [vec![5usize], vec![1, 5]] {
        let body = |(x, b): &Pair| -> Result<Vec<Tensor>> { Ok(vec![x.add(b)?.relu()?, x.add(b)?.tanh()?]) };
        let f = function(move |p: &Pair| body(p));
        let args = (data_f32(&[4, 5], 0.3), data_f32(&bias_shape, 1.1));
        let c = f.concrete(&args)?;
        let g = c.optimized_graph();
        assert_eq!(g.count("Fused"), 1, "{g}");
        assert_eq!(g.len(), 1, "{g}");
        assert_eq!(g.count("Add") + g.count("Relu") + g.count("Tanh"), 0, "{g}");
        assert_eq!(
            all_bits(&f.call(&args)?),
            all_bits(&body(&args)?),
            "bias {bias_shape:?}"
        );
    }
    Ok(())
}

#[test]
fn columns_and_rows_broadcast_together_fuse_and_give_eager_bits() -> Result<()> {
    // [n, 1] and [k] into [n, k]; [m, 1] into [b, m, k] (ones on both sides)
    let body = |(x, y): &Pair| -> Result<Vec<Tensor>> {
        let col = y.sum(&[1], true)?; // [3, 1] (eager: a separate node)
        let z = x.sub(&col)?.exp()?.mul(&y.reshape(&[3, 4])?.sum(&[0], false)?)?;
        Ok(vec![z])
    };
    let f = function(move |p: &Pair| body(p));
    let args = (data_f64(&[3, 4], 0.2), data_f64(&[3, 4], 0.9));
    let c = f.concrete(&args)?;
    let g = c.optimized_graph();
    assert_eq!(g.count("Sub") + g.count("Exp") + g.count("Mul"), 0, "{g}");
    assert_eq!(all_bits(&f.call(&args)?), all_bits(&body(&args)?));

    let body3 = |(x, m): &Pair| -> Result<Vec<Tensor>> { Ok(vec![x.mul(m)?.sigmoid()?.add(x)?]) };
    let f3 = function(move |p: &Pair| body3(p));
    let args3 = (data_f32(&[2, 3, 70], 0.5), data_f32(&[3, 1], 0.1));
    let g3 = f3.concrete(&args3)?.optimized_graph().clone();
    assert_eq!(g3.len(), 1, "{g3}");
    assert_eq!(all_bits(&f3.call(&args3)?), all_bits(&body3(&args3)?));
    Ok(())
}

#[test]
fn broadcasts_that_are_not_rows_or_columns_stay_outside_and_stay_right() -> Result<()> {
    // [2, 1, 4] into [2, 3, 4]: broadcast in the middle, equal dims around it
    let body = |(x, y): &Pair| -> Result<Vec<Tensor>> { Ok(vec![x.exp()?.add(y)?.mul_scalar(2.0)?.tanh()?]) };
    let f = function(move |p: &Pair| body(p));
    let args = (data_f32(&[2, 3, 4], 0.4), data_f32(&[2, 1, 4], 0.8));
    let g = f.concrete(&args)?.optimized_graph().clone();
    assert_eq!(g.count("Add"), 1, "{g}");
    assert_eq!(all_bits(&f.call(&args)?), all_bits(&body(&args)?));
    // and two operands that broadcast to a shape neither has: [2, 1] + [1, 3]
    let body2 = |(x, y): &Pair| -> Result<Vec<Tensor>> { Ok(vec![x.neg()?.add(&y.abs()?)?.square()?]) };
    let f2 = function(move |p: &Pair| body2(p));
    let args2 = (data_f64(&[2, 1], 0.4), data_f64(&[1, 3], 0.8));
    assert_eq!(all_bits(&f2.call(&args2)?), all_bits(&body2(&args2)?));
    Ok(())
}

/// Sums, maxima and minima over the leading and the trailing axes of a
/// fused value, keepdims or not.
fn reductions(x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
    let z = x.mul(y)?.add(x)?;
    Ok(vec![
        z.sum(&[0], false)?,
        z.max(&[0], true)?,
        z.min(&[0], false)?,
        z.exp()?.sum(&[-1], true)?,
        z.exp()?.max(&[1], false)?,
    ])
}

#[test]
fn partial_reductions_are_epilogues_with_the_eager_bits() -> Result<()> {
    // shapes: small; rows longer than the eager sum's block of 4096;
    // several threads (leading: columns per task; trailing: rows per task)
    // (a group large enough for several threads takes reductions of one
    // kind only; over leading axes to at most 4096 outputs, blocked: its
    // rows split among the threads, a sum then added by bands of 8 rows
    // in f32 and the bands in f64)
    for (shape, unfused, blocked) in [
        (vec![7usize, 13], 0, false),
        (vec![3, 9001], 0, false),
        (vec![64, 2048], 2, true),
        (vec![300, 257], 2, true),
        (vec![1000, 100], 2, true),
        (vec![1500, 320], 2, true),
        (vec![129, 1000], 2, true),
        (vec![13, 4096], 2, true),
        // columns per task: few rows, many rows, a column count that
        // splits unevenly
        (vec![9, 9001], 2, false),
        (vec![40, 4100], 2, false),
        (vec![70, 5003], 2, false),
        // (the max over axis 1 of three: middle axes, left to eager)
        (vec![2, 3, 5], 1, false),
    ] {
        let f = function(move |p: &Pair| {
            let (x, y) = p;
            reductions(x, y)
        });
        let args = (data_f32(&shape, 0.25), data_f32(&shape, 2.0));
        let c = f.concrete(&args)?;
        let g = c.optimized_graph();
        let left = g.count("Sum") + g.count("Max") + g.count("Min");
        assert_eq!(left, unfused, "{shape:?}: {g}");
        assert_eq!(g.count("Fused"), 1, "{shape:?}: {g}");
        assert_eq!(g.to_string().contains("(blocked)"), blocked, "{shape:?}: {g}");
        let got = f.call(&args)?;
        let want = reductions(&args.0, &args.1)?;
        if blocked {
            // the blocked sum: each band of 8 rows of the eager elements
            // summed in f32 (from -0), the bands' sums added in f64,
            // rounded once
            let z = args.0.mul(&args.1)?.add(&args.0)?.to_vec::<f32>()?;
            let p = shape[1];
            let mut exact = vec![0.0f64; p];
            for band in z.chunks(8 * p) {
                let mut b = vec![-0.0f32; p];
                for (j, v) in band.iter().enumerate() {
                    b[j % p] += v;
                }
                for (e, v) in exact.iter_mut().zip(b) {
                    *e += v as f64;
                }
            }
            let exact: Vec<f32> = exact.iter().map(|&v| v as f32).collect();
            assert_eq!(bits(&got[0]), bits(&Tensor::from_vec(exact, &[p])?), "{shape:?}");
            assert!(c.compile_stats().fused > 0);
            assert_eq!(all_bits(&got[1..]), all_bits(&want[1..]), "{shape:?}");
            continue;
        }
        assert_eq!(all_bits(&got), all_bits(&want), "{shape:?}");
        // the f64 kernel too
        let args64 = (args.0.cast(gradtape::DType::F64)?, args.1.cast(gradtape::DType::F64)?);
        assert_eq!(
            all_bits(&f.call(&args64)?),
            all_bits(&reductions(&args64.0, &args64.1)?)
        );
    }
    Ok(())
}

#[test]
fn short_trailing_rows_reduce_with_the_eager_bits_across_threads() -> Result<()> {
    // rows of 1 to 9 elements (below, at and past a group of the eager
    // sum's 8 lanes), enough of them for several tasks, whose chunks end
    // inside rows when 3, 5, 6, 7 or 9 do not divide them; signed zeros
    // and NaNs among the values
    for q in 1..=9usize {
        let n = 40_000 * q;
        let mut v: Vec<f64> = data_f64(&[n], 0.3).to_vec::<f64>()?;
        for (i, x) in v.iter_mut().enumerate() {
            match i % 97 {
                0 => *x = -0.0,
                1 => *x = 0.0,
                50 if i % 3 == 0 => *x = f64::NAN,
                _ => {}
            }
        }
        let body = |x: &Tensor| -> Result<Vec<Tensor>> {
            let z = x.mul_scalar(-1.0)?;
            Ok(vec![z.sum(&[-1], false)?, z.max(&[-1], false)?, z.min(&[-1], true)?])
        };
        let f = function(move |x: &Tensor| body(x));
        for x in [
            Tensor::from_vec(v.clone(), &[40_000, q])?.cast(gradtape::DType::F32)?,
            Tensor::from_vec(v.clone(), &[40_000, q])?,
        ] {
            let g = f.concrete(&x)?.optimized_graph().clone();
            assert_eq!(g.count("Sum") + g.count("Max") + g.count("Min"), 0, "rows of {q}: {g}");
            assert_eq!(
                all_bits(&f.call(&x)?),
                all_bits(&body(&x)?),
                "rows of {q}, {:?}",
                x.dtype()
            );
        }
    }
    Ok(())
}

#[test]
fn whole_rows_reduce_with_the_eager_bits_at_every_row_length() -> Result<()> {
    // Trailing sums over rows of 8 to a few thousand elements (a loss over
    // ten classes, a norm over a narrow last axis) take whole rows at
    // once, as the eager row sum adds them, and the rows that a register
    // (1024 elements) or a task cuts through element by element; leading
    // folds over few columns take whole rows too. Row lengths below,
    // at and past the eager sum's group of 8 lanes and its block of 4096;
    // row counts for one task and for several; NaNs and signed zeros
    // among the values; f32 and f64: every result has the eager bits.
    let body = |x: &Tensor| -> Result<Vec<Tensor>> {
        let z = x.mul_scalar(-1.5)?;
        Ok(vec![
            z.sum(&[-1], false)?,
            z.square()?.sum(&[-1], true)?,
            z.max(&[-1], false)?,
        ])
    };
    let leading = |x: &Tensor| -> Result<Vec<Tensor>> {
        let z = x.mul_scalar(-1.5)?;
        Ok(vec![z.sum(&[0], false)?, z.min(&[0], true)?])
    };
    let f = function(move |x: &Tensor| body(x));
    let fl = function(move |x: &Tensor| leading(x));
    let with_specials = |shape: &[usize]| -> Result<Vec<Tensor>> {
        let mut v = data_f64(shape, 0.9).to_vec::<f64>()?;
        for (i, x) in v.iter_mut().enumerate() {
            match i % 89 {
                0 => *x = -0.0,
                1 => *x = 0.0,
                40 if i % 5 == 0 => *x = f64::NAN,
                _ => {}
            }
        }
        let t = Tensor::from_vec(v, shape)?;
        Ok(vec![t.cast(gradtape::DType::F32)?, t])
    };
    for q in [
        8usize, 9, 10, 15, 16, 17, 31, 33, 64, 96, 100, 255, 1000, 1023, 1025, 4095, 4096, 4097, 5000,
    ] {
        for rows in [3usize, 37, 40_000 / q + 7, 200_000 / q + 3] {
            for x in with_specials(&[rows, q])? {
                let g = f.concrete(&x)?.optimized_graph().clone();
                assert_eq!(g.count("Sum") + g.count("Max"), 0, "rows of {q}: {g}");
                assert_eq!(
                    all_bits(&f.call(&x)?),
                    all_bits(&body(&x)?),
                    "{rows} rows of {q}, {:?}",
                    x.dtype()
                );
            }
        }
    }
    // leading folds, one task (not blocked: the eager order), over 2 to
    // 17 columns and rows that a register cuts through
    for p in [2usize, 3, 7, 10, 17] {
        for x in with_specials(&[1500 / p + 1, p])? {
            let g = fl.concrete(&x)?.optimized_graph().clone();
            assert_eq!(g.count("Sum") + g.count("Min"), 0, "columns {p}: {g}");
            assert!(!g.to_string().contains("(blocked)"), "{g}");
            assert_eq!(
                all_bits(&fl.call(&x)?),
                all_bits(&leading(&x)?),
                "columns {p}, {:?}",
                x.dtype()
            );
        }
    }
    Ok(())
}

#[test]
fn reductions_over_leading_axes_of_a_rank_three_value() -> Result<()> {
    // [b, m, k] -> [k] over axes (0, 1), and -> [b, m] over axis 2
    let body = |(x, y): &Pair| -> Result<Vec<Tensor>> {
        let z = x.sub(y)?.square()?;
        Ok(vec![z.sum(&[0, 1], false)?, z.sum(&[1, 0], true)?])
    };
    let f = function(move |p: &Pair| body(p));
    let args = (data_f64(&[4, 3, 6], 0.1), data_f64(&[4, 3, 6], 0.7));
    let g = f.concrete(&args)?.optimized_graph().clone();
    assert_eq!(g.len(), 1, "{g}");
    assert_eq!(all_bits(&f.call(&args)?), all_bits(&body(&args)?));
    // middle axes are not a partial epilogue: computed outside, still right
    let mid = |(x, y): &Pair| -> Result<Vec<Tensor>> { Ok(vec![x.sub(y)?.square()?.sum(&[1], false)?]) };
    let fm = function(move |p: &Pair| mid(p));
    let gm = fm.concrete(&args)?.optimized_graph().clone();
    assert_eq!(gm.count("Sum"), 1, "{gm}");
    assert_eq!(all_bits(&fm.call(&args)?), all_bits(&mid(&args)?));
    Ok(())
}

#[test]
fn nan_infinities_and_signed_zeros_reduce_as_in_eager() -> Result<()> {
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    #[rustfmt::skip]
    let x = Tensor::from_vec(vec![
        -0.0, 0.0, nan, 1.0, -inf,
        -0.0, -0.0, 2.0, nan, -inf,
        0.0, -0.0, -1.0, 3.0, inf,
    ], &[3, 5])?;
    let body = |x: &Tensor| -> Result<Vec<Tensor>> {
        // (times -1, not `neg`: eager `neg` is `0 - x`, which makes +0 of -0)
        let z = x.mul_scalar(-1.0)?;
        Ok(vec![
            z.sum(&[0], false)?,
            z.max(&[0], false)?,
            z.min(&[0], false)?,
            z.sum(&[1], false)?,
            z.max(&[1], false)?,
            z.min(&[1], true)?,
        ])
    };
    let f = function(move |x: &Tensor| body(x));
    let g = f.concrete(&x)?.optimized_graph().clone();
    assert_eq!(g.len(), 1, "{g}");
    let got = f.call(&x)?;
    assert_eq!(all_bits(&got), all_bits(&body(&x)?));
    // the signed zeros, spelled out: +0 + +0 + -0 = +0 down column 0
    // (column sums in order from the first row), and the max of column 1,
    // {-0, +0, +0}, keeps the first of the equal zeros
    assert_eq!(got[0].to_vec::<f64>()?[0].to_bits(), 0.0f64.to_bits());
    assert_eq!(got[1].to_vec::<f64>()?[1].to_bits(), (-0.0f64).to_bits());
    assert!(got[0].to_vec::<f64>()?[2].is_nan() && got[4].to_vec::<f64>()?[0].is_nan());
    Ok(())
}

/// A dense layer's training step: `relu(x w + b)`, a squared error, the
/// gradients of `w` and `b` (the bias gradient a sum over the batch axis),
/// and the SGD updates.
fn dense_step((x, w, b): &(Tensor, Tensor, Tensor)) -> Result<Vec<Tensor>> {
    let (w, b) = (w.stop_gradient(), b.stop_gradient());
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(&w);
        tape.watch(&b);
        let h = x.matmul(&w)?.add(&b)?.relu()?;
        h.sub_scalar(0.5)?.square()?.mean_all()
    })?;
    let g = tape.gradient(&loss, &[w.clone(), b.clone()][..])?;
    let (gw, gb) = (g[0].clone().expect("connected"), g[1].clone().expect("connected"));
    Ok(vec![
        loss,
        w.sub(&gw.mul_scalar(0.1)?)?,
        b.sub(&gb.mul_scalar(0.1)?)?,
        gb,
    ])
}

#[test]
fn a_dense_layer_step_fuses_its_bias_and_bias_gradient() -> Result<()> {
    let f = function(|a: &(Tensor, Tensor, Tensor)| dense_step(a));
    let args = (data_f32(&[16, 8], 0.1), data_f32(&[8, 6], 0.6), data_f32(&[6], 1.7));
    let c = f.concrete(&args)?;
    let g = c.optimized_graph();
    assert_eq!(g.count("Add") + g.count("Relu") + g.count("ReluGrad"), 0, "{g}");
    assert_eq!(g.count("Sum"), 0, "{g}");
    let got = f.call(&args)?;
    let want = dense_step(&args)?;
    // the loss: a mean of all elements, summed in f64 by the kernel
    let (a, e) = (got[0].to_scalar::<f32>()? as f64, want[0].to_scalar::<f32>()? as f64);
    assert!((a - e).abs() <= 1e-6 * e.abs(), "loss {a} vs {e}");
    // the rest: the same bits
    assert_eq!(all_bits(&got[1..]), all_bits(&want[1..]));
    Ok(())
}

#[test]
fn gradients_flow_through_fused_broadcasts_and_reductions() -> Result<()> {
    // d/dx and d/db of sum(max(tanh(x + b), axis=1)) + sum(sum(x * b, axis=0)^2)
    let loss = |x: &Tensor, b: &Tensor| -> Result<Tensor> {
        let t = x.add(b)?.tanh()?;
        let r = x.mul(b)?.sum(&[0], false)?;
        t.max(&[1], false)?.sum_all()?.add(&r.square()?.sum_all()?)
    };
    let grads = move |(x, b): &Pair| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let l = tape.record(|| {
            tape.watch(x);
            tape.watch(b);
            loss(x, b)
        })?;
        let g = tape.gradient(&l, &[x.clone(), b.clone()][..])?;
        Ok(g.into_iter().map(|g| g.expect("connected")).collect())
    };
    let f = function(move |p: &Pair| grads(p));
    let args = (data_f64(&[5, 4], 0.3), data_f64(&[4], 1.3));
    let got = f.call(&args)?;
    let want = grads(&args)?;
    for (a, e) in got.iter().zip(&want) {
        assert_eq!(a.shape(), e.shape());
        for (u, v) in a.to_vec_f64().iter().zip(e.to_vec_f64()) {
            assert!((u - v).abs() <= 1e-12 * v.abs().max(1.0), "{u} vs {v}");
        }
    }
    // and against central differences of the eager loss
    let h = 1e-6;
    let xs = args.0.to_vec_f64();
    for k in [0usize, 7, 19] {
        let shifted = |d: f64| -> Result<f64> {
            let mut v = xs.clone();
            v[k] += d;
            loss(&Tensor::from_vec(v, &[5, 4])?, &args.1)?.to_scalar::<f64>()
        };
        let fd = (shifted(h)? - shifted(-h)?) / (2.0 * h);
        let an = got[0].to_vec_f64()[k];
        assert!((fd - an).abs() <= 1e-6 * an.abs().max(1.0), "dx[{k}]: {an} vs {fd}");
    }
    Ok(())
}

/// Sines and cosines of the same values, in either order, beside other
/// uses (a program computes each pair in one `SinCos`).
fn trig(x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
    let (sx, cy) = (x.sin()?, y.cos()?);
    let e = sx.exp()?.mul(x)?;
    let (cx, sy) = (x.cos()?, y.sin()?);
    Ok(vec![e.mul(&cx)?.add(&cy)?, sx, sy.mul(&cy)?, cx.abs()?])
}

#[test]
fn a_sine_and_a_cosine_of_one_value_are_one_instruction_with_the_eager_bits() -> Result<()> {
    // f32 (several registers), f64, and f32 out of the polynomials' range
    // (libm)
    let far = |t: Tensor| t.mul(&Tensor::scalar(1.0e5f32)).unwrap();
    // values in and out of that range side by side (each element's own)
    let mixed: Vec<f32> = (0..2500)
        .map(|i| (i as f32 * 0.37).sin() * if i % 7 == 3 { 3.0e5 } else { 20.0 })
        .chain([f32::NAN, f32::INFINITY, -f32::INFINITY])
        .collect();
    let mixed = Tensor::from_vec(mixed, &[2503])?;
    let cases = [
        (mixed.clone(), mixed.mul_scalar(0.5)?),
        (data_f32(&[3, 3000], 0.3), data_f32(&[3, 3000], 1.7)),
        (data_f64(&[700], 0.3), data_f64(&[700], 1.7)),
        (far(data_f32(&[600], 0.3)), data_f32(&[600], 1.7)),
    ];
    for args in cases {
        let f = function(move |(x, y): &Pair| trig(x, y));
        let c = f.concrete(&args)?;
        let g = c.optimized_graph();
        assert_eq!(g.count("Fused"), 1, "{g}");
        assert_eq!(g.to_string().matches("SinCos").count(), 2, "{g}");
        assert!(
            !g.to_string().contains("= Sin(") && !g.to_string().contains("= Cos("),
            "{g}"
        );
        assert_eq!(all_bits(&f.call(&args)?), all_bits(&trig(&args.0, &args.1)?), "{g}");
    }
    Ok(())
}

/// A GELU layer's training step, `gelu(x w + b)` under a tape (the forward
/// keeps the derivative the backward pass multiplies in), with the GELU
/// and its derivative also of a second value `y`, and a value whose GELU
/// alone is taken.
fn gelu_step((x, w, b, y): &(Tensor, Tensor, Tensor, Tensor)) -> Result<Vec<Tensor>> {
    let w = w.stop_gradient();
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(&w);
        x.matmul(&w)?.add(b)?.gelu(false)?.square()?.mean_all()
    })?;
    let gw = tape.gradient(&loss, &w)?.expect("connected");
    let (gy, dy) = (y.gelu(false)?, y.gelu_grad()?);
    Ok(vec![gw, gy.mul(&dy)?, y.mul_scalar(3.0)?.gelu(false)?])
}

#[test]
fn a_gelu_and_its_derivative_of_one_value_are_one_instruction_with_the_eager_bits() -> Result<()> {
    // f32 over several rows and a short tail, f64; y with NaN,
    // infinities, signed zeros and values far out (each element's own
    // branch of erf)
    let wild = |n: usize| -> Tensor {
        let v: Vec<f32> = (0..n)
            .map(|i| (i as f32 * 0.37).sin() * if i % 7 == 3 { 40.0 } else { 4.0 })
            .chain([f32::NAN, f32::INFINITY, -f32::INFINITY, -0.0, 0.0, -9.5, 9.5])
            .collect();
        Tensor::from_vec(v, &[n + 7]).unwrap()
    };
    let cases = [
        (
            data_f32(&[40, 24], 0.1),
            data_f32(&[24, 70], 0.6),
            data_f32(&[70], 1.7),
            wild(2493),
        ),
        (
            data_f32(&[3, 5], 0.2),
            data_f32(&[5, 9], 0.4),
            data_f32(&[9], 0.3),
            wild(9),
        ),
        (
            data_f64(&[6, 4], 0.2),
            data_f64(&[4, 33], 0.5),
            data_f64(&[33], 0.9),
            data_f64(&[700], 1.1),
        ),
    ];
    for args in cases {
        let f = function(|a: &(Tensor, Tensor, Tensor, Tensor)| gelu_step(a));
        let c = f.concrete(&args)?;
        let g = c.optimized_graph();
        let text = g.to_string();
        // one pair for the layer's pre-activation, one for y; y·3's GELU
        // alone
        assert_eq!(text.matches("GeluAndGrad").count(), 2, "{g}");
        assert_eq!(text.matches("= Gelu(").count(), 1, "{g}");
        assert!(!text.contains("= GeluGrad("), "{g}");
        assert_eq!(all_bits(&f.call(&args)?), all_bits(&gelu_step(&args)?), "{g}");
    }
    Ok(())
}

/// Values of one group stored as outputs, where registers are reused,
/// read after their store, stored twice and reduced: what an op writing
/// its output in place of its register must keep (with the product an
/// intermediate the kernel may write over; the optimiser and layer steps
/// of `function_nn` and `function_optim` run stores into such inputs).
fn stores(p: &(Tensor, Tensor)) -> Result<Vec<Tensor>> {
    let (x, w) = p;
    let h = x.matmul(w)?;
    let a = h.mul_scalar(2.0)?.add_scalar(1.0)?;
    let b = a.sin()?;
    let c = b.mul(&a)?;
    let d = h.tanh()?;
    let e = d.add(&c)?;
    Ok(vec![
        a.clone(),
        c,
        e.clone(),
        d,
        a.exp()?,
        e.sum(&[0], false)?,
        e.neg()?,
    ])
}

#[test]
fn outputs_written_in_place_of_registers_keep_the_eager_bits() -> Result<()> {
    for (rows, cols) in [(5usize, 7usize), (37, 301), (300, 301), (20, 5000)] {
        let f = function(|p: &(Tensor, Tensor)| stores(p));
        let args = (data_f32(&[rows, 13], 0.3), data_f32(&[13, cols], 1.2));
        let g = f.concrete(&args)?.optimized_graph().clone();
        assert_eq!(g.count("Fused"), 1, "{rows}x{cols}: {g}");
        let (got, want) = (f.call(&args)?, stores(&args)?);
        let blocked = g.to_string().contains("(blocked)");
        // (a blocked sum adds in another order: checked elsewhere)
        let skip = |i: usize| blocked && i == 5;
        for (i, (a, b)) in got.iter().zip(&want).enumerate().filter(|(i, _)| !skip(*i)) {
            assert_eq!(bits(a), bits(b), "{rows}x{cols}, output {i}: {g}");
        }
        let args64 = (args.0.cast(gradtape::DType::F64)?, args.1.cast(gradtape::DType::F64)?);
        let (got, want) = (f.call(&args64)?, stores(&args64)?);
        for (i, (a, b)) in got.iter().zip(&want).enumerate().filter(|(i, _)| !skip(*i)) {
            assert_eq!(bits(a), bits(b), "f64 {rows}x{cols}, output {i}");
        }
    }
    Ok(())
}

/// relu6's gradient is two `ReluGrad`s (float ops, fused with their
/// neighbours), not comparisons, a `LogicalAnd` and a cast: 1 strictly
/// inside (0, 6), 0 at both kinks and outside, as before and as
/// TensorFlow's; the same traced, and no bool op left in the graph.
#[test]
fn relu6_gradient_is_fusible() -> Result<()> {
    let x = Tensor::vector(&[-1.0f32, 0.0, 1e-30, 3.0, 5.999_999_5, 6.0, 7.0, f32::NAN]);
    let grad = |x: &Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(x);
        let y = tape.record(|| x.relu6()?.mul(&x.scalar_like(2.0)?)?.sum_all())?;
        Ok(tape.gradient(&y, x)?.unwrap())
    };
    let want = [0.0f32, 0.0, 2.0, 2.0, 2.0, 0.0, 0.0, 0.0];
    assert_eq!(grad(&x)?.to_vec::<f32>()?, want);
    let f = function(grad);
    assert_eq!(f.call(&x)?.to_vec::<f32>()?, want);
    let listing = f.graph(&x)?.to_string();
    assert!(!listing.contains("bool"), "{listing}");
    // an infinite cotangent gives NaN outside the range (inf · 0), as a product does
    let g = Tensor::vector(&[f32::INFINITY; 3]);
    let xs = Tensor::vector(&[-1.0f32, 3.0, 7.0]);
    let tape = GradientTape::new();
    tape.watch(&xs);
    let y = tape.record(|| xs.relu6())?;
    let opts = gradtape::GradientOptions::default().output_gradients(vec![g]);
    let d = tape.gradient_with(&y, &xs, opts)?.unwrap().to_vec::<f32>()?;
    assert!(d[0].is_nan() && d[1] == f32::INFINITY && d[2].is_nan(), "{d:?}");
    Ok(())
}
