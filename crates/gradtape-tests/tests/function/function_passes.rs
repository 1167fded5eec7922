//! The compiler's passes one by one: each fires (its count in
//! `CompileStats`, by name) on a small graph unlike the bench workload it
//! was written for, and gives the values of the uncompiled graph; with the
//! pass switched off by name it does not run and the values are the same.
//! (This binary checks every compiled graph after every pass: `main.rs`
//! sets `GRADTAPE_VERIFY_PASSES=1`.)

use gradtape::{
    function, CompileOptions, CompileStats, DType, Function, FunctionOptions, GradientTape, Padding, Result, Tensor,
    TensorStruct, Variable,
};

fn data(shape: &[usize], seed: f64, dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| (i as f64 * 0.613 + seed).sin() * 0.5).collect();
    Tensor::from_vec(v, shape).unwrap().cast(dtype).unwrap()
}

/// The largest difference between `a` and `b`, relative to the largest
/// magnitude of `b` (at least 1).
fn rel_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    let (a, b) = (a.to_vec_f64(), b.to_vec_f64());
    let scale = b.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max) / scale
}

/// Compiles `body` on `args`; checks that the pass `pass` made `want`
/// rewrites (at least one where `want` is `None`) and that the compiled
/// graph gives the values of the uncompiled one to `tol`; then the same
/// with the pass off (it does not run). Returns the stats.
fn fires<I, F>(pass: &str, body: F, args: &I, want: Option<usize>, tol: f64) -> Result<CompileStats>
where
    I: TensorStruct + Send + Sync + 'static,
    F: Fn(&I) -> Result<Vec<Tensor>> + Send + Sync + Clone + 'static,
{
    let with = |opts: FunctionOptions| Function::with_options(body.clone(), opts);
    let plain = with(FunctionOptions {
        optimize: false,
        ..Default::default()
    })
    .call(args)?;
    let on = with(FunctionOptions::default());
    let stats = on.concrete(args)?.compile_stats();
    let n = stats
        .count(pass)
        .unwrap_or_else(|| panic!("{pass} did not run: {stats:?}"));
    match want {
        Some(w) => assert_eq!(n, w, "{pass}: {stats:?}"),
        None => assert!(n > 0, "{pass} made no rewrite: {stats:?}"),
    }
    let off = with(FunctionOptions::default().disable_pass(pass)?);
    assert_eq!(off.concrete(args)?.compile_stats().count(pass), None);
    for f in [on, off] {
        let got = f.call(args)?;
        assert_eq!(got.len(), plain.len());
        for (i, (g, p)) in got.iter().zip(&plain).enumerate() {
            let d = rel_diff(g, p);
            assert!(d <= tol, "{pass}: output {i} differs by {d:e}");
        }
    }
    Ok(stats)
}

/// Whether `f32` products run on gradtape's AVX-512 kernel here (the
/// passes that rewrite for that kernel fire only then).
fn avx512_kernel() -> bool {
    #[cfg(target_arch = "x86_64")]
    let cpu = std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    let cpu = false;
    cpu && std::env::var("GRADTAPE_SGEMM").map_or(true, |v| v != "0")
}

/// The compute threads gradtape uses (as `kernels::cpu::workers` counts).
fn threads() -> usize {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse::<usize>().ok());
    env("GRADTAPE_NUM_THREADS")
        .or_else(|| env("RAYON_NUM_THREADS"))
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[test]
fn this_binary_checks_every_graph_after_every_pass() {
    assert_eq!(std::env::var("GRADTAPE_VERIFY_PASSES").as_deref(), Ok("1"));
}

#[test]
fn the_pass_list_names_every_pass_once_and_refuses_unknown_names() -> Result<()> {
    let names = CompileOptions::pass_names();
    assert_eq!(
        names,
        [
            "fold",
            "simplify",
            "pads_to_concat",
            "concat_of_reshapes",
            "merge_reads",
            "cse",
            "dce",
            "grads_into_concat",
            "pool_argmax",
            "xent_keeps_softmax",
            "residual_into_norm_grad",
            "scale_into_update",
            "join_products",
            "stack_products",
            "sums_after_loops",
            "transpose_once",
            "diag_matmul",
            "fuse",
            "remat",
            "share_im2col",
            "hoist_reductions",
            "pair_products"
        ]
    );
    let e = FunctionOptions::default().disable_pass("keep").unwrap_err().to_string();
    assert!(e.contains("'keep'") && e.contains("share_im2col"), "{e}");
    // every pass runs by default, and is counted in order
    let f = function(|x: &Tensor| x.exp());
    let stats = f.concrete(&Tensor::vector(&[1.0f32]))?.compile_stats();
    let ran: Vec<&str> = stats.passes.iter().map(|(n, _)| *n).collect();
    assert_eq!(ran, names);
    Ok(())
}

#[test]
fn fold_runs_constant_subgraphs_once() -> Result<()> {
    // constants of f64 vectors (the bench's scalar chain folds scalars)
    let body = |x: &Tensor| -> Result<Vec<Tensor>> {
        let c = Tensor::vector(&[1.0f64, 2.0, 3.0]).sqrt()?.exp()?;
        Ok(vec![x.mul(&c)?])
    };
    let s = fires("fold", body, &data(&[4, 3], 0.0, DType::F64), None, 0.0)?;
    assert_eq!(s.count("fold"), Some(s.folded));
    Ok(())
}

#[test]
fn simplify_cse_and_dce_remove_identities_and_what_they_expose() -> Result<()> {
    // `exp(reshape(x * 1))` is `exp(x)`, which the graph also computes
    let body = |x: &Tensor| -> Result<Vec<Tensor>> {
        let a = x.mul_scalar(1.0)?.reshape(&[2, 6])?.exp()?;
        let b = x.reshape(&[2, 6])?.exp()?;
        Ok(vec![a.sub(&b.sin()?)?])
    };
    let x = data(&[3, 4], 1.0, DType::F32);
    for pass in ["simplify", "cse", "dce"] {
        let s = fires(pass, body, &x, None, 0.0)?;
        assert_eq!(s.count("simplify"), Some(s.simplified));
    }
    Ok(())
}

#[test]
fn simplify_lets_elementwise_ops_broadcast_their_own_operands() -> Result<()> {
    // the gradients of a max over a middle axis and of a mean over the
    // leading one broadcast their reduced values back; the elementwise
    // ops that read those broadcasts read the reduced values instead
    // (a row or column by index in a fused kernel), and no BroadcastTo
    // is left; the same bits as uncompiled
    let body = |x: &Tensor| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(x);
            let a = x.max(&[1], false)?.square()?.sum_all()?;
            a.add(&x.mean(&[0], false)?.sin()?.sum_all()?)
        })?;
        Ok(vec![tape.gradient(&y, x)?.expect("connected")])
    };
    for shape in [[4usize, 50, 6], [300, 2, 40]] {
        let x = data(&shape, 0.5, DType::F32);
        fires("simplify", body, &x, None, 0.0)?;
        let f = function(body);
        let g = f.concrete(&x)?.optimized_graph().clone();
        assert_eq!(g.count("BroadcastTo"), 0, "{shape:?}: {g}");
    }
    Ok(())
}

#[test]
fn pool_argmax_merges_a_pool_and_its_positions() -> Result<()> {
    // an overlapping 3x3 pool of stride 1 in f64 (the bench: 2x2 of stride
    // 2 in f32)
    let body = |x: &Tensor| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(x);
            x.max_pool2d([3, 3], [1, 1], Padding::Same)?.square()?.sum_all()
        })?;
        Ok(vec![y.clone(), tape.gradient(&y, x)?.expect("connected")])
    };
    let s = fires(
        "pool_argmax",
        body,
        &data(&[2, 5, 6, 3], 2.0, DType::F64),
        Some(1),
        1e-12,
    )?;
    assert_eq!(s.merged, 1);
    Ok(())
}

#[test]
fn join_products_joins_a_sum_of_products_outside_any_loop() -> Result<()> {
    // `Σ x_i W_i` of f64 operands written out (the bench: an RNN's weight
    // gradient, f32, summed over the steps of a loop)
    let body = |(xs, ws): &(Vec<Tensor>, Vec<Tensor>)| -> Result<Vec<Tensor>> {
        let mut s = xs[0].matmul(&ws[0])?;
        for (x, w) in xs.iter().zip(ws).skip(1) {
            s = s.add(&x.matmul(w)?)?;
        }
        Ok(vec![s.tanh()?])
    };
    let xs = (0..4).map(|i| data(&[16, 4], i as f64, DType::F64)).collect();
    let ws = (0..4).map(|i| data(&[4, 12], 10.0 + i as f64, DType::F64)).collect();
    let s = fires("join_products", body, &(xs, ws), Some(1), 1e-12)?;
    assert_eq!(s.joined, 1);
    Ok(())
}

#[test]
fn stack_products_stacks_inputs_by_one_weight() -> Result<()> {
    // three batches through one layer (the bench: an RNN's `x_t W`)
    let body =
        |(xs, w): &(Vec<Tensor>, Tensor)| -> Result<Vec<Tensor>> { xs.iter().map(|x| x.matmul(w)?.relu()).collect() };
    let xs = (0..3).map(|i| data(&[5, 24], i as f64, DType::F32)).collect();
    let on = usize::from(avx512_kernel());
    let s = fires(
        "stack_products",
        body,
        &(xs, data(&[24, 48], 7.0, DType::F32)),
        Some(on),
        0.0,
    )?;
    assert_eq!(s.stacked, on);
    Ok(())
}

#[test]
fn transpose_once_serves_products_of_independent_inputs() -> Result<()> {
    // `x_i Wᵀ` for inputs that do not chain (the bench: an RNN's backward
    // `g_t Uᵀ`, each step reading the one before)
    let body = |(xs, w): &(Vec<Tensor>, Tensor)| -> Result<Vec<Tensor>> {
        xs.iter().map(|x| x.matmul_with(w, false, true)).collect()
    };
    // (at least 4 rows each: `sgemm::suits` sends narrower products to
    // another kernel, which the pass leaves alone)
    let xs = (0..2).map(|i| data(&[4 + i, 36], i as f64, DType::F32)).collect();
    let on = usize::from(avx512_kernel());
    let s = fires(
        "transpose_once",
        body,
        &(xs, data(&[44, 36], 5.0, DType::F32)),
        Some(on),
        0.0,
    )?;
    assert_eq!(s.transposed, on);
    Ok(())
}

#[test]
fn diag_matmul_scales_columns_by_a_traced_vector() -> Result<()> {
    // `W (I * v)`: a column scaling, the diagonal on the right, from a
    // vector argument (the bench: a Jacobian's identity seed on the left)
    let body = |(w, v): &(Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let d = Tensor::eye(12, DType::F32).mul(v)?;
        Ok(vec![w.matmul(&d)?])
    };
    let args = (data(&[7, 12], 1.0, DType::F32), data(&[12], 3.0, DType::F32));
    let s = fires("diag_matmul", body, &args, Some(1), 0.0)?;
    assert_eq!(s.diagonal, 1);
    Ok(())
}

#[test]
fn fuse_makes_one_kernel_of_a_row_reduction() -> Result<()> {
    let body =
        |(x, b): &(Tensor, Tensor)| -> Result<Vec<Tensor>> { Ok(vec![x.add(b)?.tanh()?.square()?.sum(&[1], false)?]) };
    let args = (data(&[6, 10], 0.0, DType::F64), data(&[10], 4.0, DType::F64));
    let s = fires("fuse", body, &args, Some(4), 1e-12)?;
    assert_eq!((s.fused, s.kernels), (4, 1));
    Ok(())
}

#[test]
fn remat_recomputes_a_scaled_value_for_a_kernel_after_a_product() -> Result<()> {
    // f64, a scale-and-shift of a wide input that both a product and the
    // kernel after it read (the bench: LayerNorm's x̂ in f32)
    let body = |(x, s, w): &(Tensor, Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let h = x.mul(s)?.sub_scalar(0.25)?;
        let y = h.matmul(w)?;
        Ok(vec![h.mul(&y)?.add(x)?.sum(&[0], false)?])
    };
    let args = (
        data(&[600, 128], 0.0, DType::F64),
        data(&[128], 1.0, DType::F64),
        data(&[128, 128], 2.0, DType::F64),
    );
    fires("remat", body, &args, Some(1), 1e-12)?;
    Ok(())
}

#[test]
fn share_im2col_serves_a_strided_convolution_in_f64() -> Result<()> {
    // stride 2, three input channels, f64 (the bench: stride 1, SAME, f32)
    let body = |(x, k): &(Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(k);
            x.conv2d(k, [2, 2], Padding::Valid, [1, 1])?.tanh()?.sum_all()
        })?;
        Ok(vec![y.clone(), tape.gradient(&y, k)?.expect("connected")])
    };
    let args = (
        data(&[2, 9, 9, 3], 0.0, DType::F64),
        data(&[3, 3, 3, 4], 6.0, DType::F64),
    );
    let s = fires("share_im2col", body, &args, Some(1), 1e-12)?;
    assert_eq!(s.kept, 1);
    Ok(())
}

#[test]
fn hoist_reductions_moves_a_column_sum_before_an_assignment() -> Result<()> {
    // a column sum of an input traced after the variable it is assigned
    // to is written (the bench: a gradient's norm after the SGD updates)
    let v = Variable::new(Tensor::zeros(&[64, 32], DType::F32));
    let vc = v.clone();
    let body = move |x: &Tensor| -> Result<Vec<Tensor>> {
        vc.assign(x)?;
        Ok(vec![x.abs()?.sum(&[0], false)?])
    };
    let x = data(&[64, 32], 2.0, DType::F32);
    fires("hoist_reductions", body, &x, Some(1), 1e-6)?;
    assert_eq!(v.read().to_vec::<f32>()?, x.to_vec::<f32>()?);
    Ok(())
}

#[test]
fn pair_products_runs_a_layers_two_heads_together() -> Result<()> {
    // two independent products of one forward pass (the bench: a layer's
    // input and weight gradients)
    let body = |(x, a, b): &(Tensor, Tensor, Tensor)| -> Result<Vec<Tensor>> { Ok(vec![x.matmul(a)?, x.matmul(b)?]) };
    let args = (
        data(&[64, 96], 0.0, DType::F32),
        data(&[96, 80], 1.0, DType::F32),
        data(&[96, 72], 2.0, DType::F32),
    );
    fires("pair_products", body, &args, Some(usize::from(threads() > 1)), 0.0)?;
    Ok(())
}

#[test]
fn pair_products_leaves_products_past_its_bound_split() -> Result<()> {
    // `MAX_PAIRED_MACS` (2^28 multiply-adds) is the largest product that
    // pairs: `[1024,512] @ [512,512]` is exactly that and pairs (with more
    // than one thread); one more column, `[1024,512] @ [512,513]`, makes a
    // product past the bound, which runs alone, split over the threads,
    // whether its neighbour is as large or small. Either way every output
    // is the bits of the graph run unoptimised (tolerance 0).
    type Args = (Tensor, Tensor, Tensor);
    let body = |(x, a, b): &Args| -> Result<Vec<Tensor>> { Ok(vec![x.matmul(a)?, x.matmul(b)?]) };
    let x = data(&[1024, 512], 0.0, DType::F32);
    let w = |cols: usize, seed: f64| data(&[512, cols], seed, DType::F32);
    let paired = usize::from(threads() > 1);
    let cases: [(Args, usize); 3] = [
        ((x.clone(), w(512, 1.0), w(512, 2.0)), paired),
        ((x.clone(), w(513, 1.0), w(513, 2.0)), 0),
        ((x.clone(), w(513, 1.0), w(64, 2.0)), 0),
    ];
    for (args, pairs) in cases {
        fires("pair_products", body, &args, Some(pairs), 0.0)?;
    }
    Ok(())
}

#[test]
fn concat_of_reshapes_merges_head_gradients_once() -> Result<()> {
    // the gradient of a fused projection split into heads (rows of 6, 2
    // heads of 5, three parts): each part's gradient merges heads back
    // (a reshape that copies) and the split's gradient concatenates them
    let body = |x: &Tensor| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(x);
            let p = x.split(3, -1)?;
            let heads = |t: &Tensor| t.reshape(&[2, 3, 2, 5])?.permute(&[0, 2, 1, 3]);
            let (q, k, v) = (heads(&p[0])?, heads(&p[1])?, heads(&p[2])?);
            q.mul(&k)?.add(&v.sin()?)?.square()?.sum_all()
        })?;
        Ok(vec![tape.gradient(&y, x)?.expect("connected")])
    };
    let x = data(&[6, 30], 3.0, DType::F64);
    fires("concat_of_reshapes", body, &x, Some(1), 0.0)?;
    // and the compiled step gives what the same code gives eagerly
    let traced = function(body).call(&x)?;
    let eager = body(&x)?;
    assert!(rel_diff(&traced[0], &eager[0]) <= 1e-12);
    Ok(())
}

/// The gradient w.r.t. `x` and `w` of `sum((attention of the heads of
/// x w) o)`: `x` `[b·t, m]` projected by `w` `[m, 3·h·hd]`, split into
/// three parts (taken as `q`, `k`, `v` in the order `order`), each
/// `[b, h, t, hd]`; the heads' outputs merged and multiplied by `o`.
fn attention_grads(
    (b, t, h, hd): (usize, usize, usize, usize),
    order: [usize; 3],
    mask: Option<Tensor>,
    causal: bool,
) -> impl Fn(&(Tensor, Tensor, Tensor)) -> Result<Vec<Tensor>> + Clone + Send + Sync + 'static {
    move |(x, w, o): &(Tensor, Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(x);
            tape.watch(w);
            let p = x.matmul(w)?.split(3, -1)?;
            let heads = |t0: &Tensor| t0.reshape(&[b, t, h, hd])?.permute(&[0, 2, 1, 3]);
            let (q, k, v) = (heads(&p[order[0]])?, heads(&p[order[1]])?, heads(&p[order[2]])?);
            let a = q.scaled_dot_product_attention(&k, &v, mask.as_ref(), causal, None)?;
            a.permute(&[0, 2, 1, 3])?.reshape(&[b * t, h * hd])?.mul(o)?.sum_all()
        })?;
        let g = tape.gradient(&y, &[x.clone(), w.clone()][..])?;
        Ok(g.into_iter().map(|g| g.expect("connected")).collect())
    }
}

#[test]
fn grads_into_concat_writes_attention_gradients_where_their_concatenation_puts_them() -> Result<()> {
    // self-attention on a fused projection, at sizes other than the
    // bench's (3 heads of 16, 24 steps, batch 2), causal, f32 (the kernels
    // on products write the rows in place): the gradients of q, k, v go
    // straight into the split's gradient, bit for bit as through the copy
    let dims = (2, 24, 3, 16);
    let args = |dt| {
        (
            data(&[48, 20], 0.0, dt),
            data(&[20, 144], 1.0, dt).mul_scalar(0.3).unwrap(),
            data(&[48, 48], 2.0, dt),
        )
    };
    let s = fires(
        "grads_into_concat",
        attention_grads(dims, [0, 1, 2], None, true),
        &args(DType::F32),
        Some(1),
        0.0,
    )?;
    assert_eq!(s.count("concat_of_reshapes"), Some(1));
    // the parts in another order (k, v, q of the split), with an additive
    // mask instead of the causal one
    let m: Vec<f32> = (0..24 * 24)
        .map(|i| if (i * 7) % 5 == 0 { -1e9 } else { 0.1 * (i % 3) as f32 })
        .collect();
    let mask = Tensor::from_vec(m, &[24, 24])?;
    fires(
        "grads_into_concat",
        attention_grads(dims, [2, 0, 1], Some(mask), false),
        &args(DType::F32),
        Some(1),
        0.0,
    )?;
    // f64 (the online kernel, whose packed gradients are copied into place)
    let f = attention_grads(dims, [0, 1, 2], None, true);
    fires("grads_into_concat", f.clone(), &args(DType::F64), Some(1), 0.0)?;
    // and the compiled step gives what the same code gives eagerly
    let a = args(DType::F64);
    let (traced, eager) = (function(f.clone()).call(&a)?, f(&a)?);
    for (t, e) in traced.iter().zip(&eager) {
        assert!(rel_diff(t, e) <= 1e-12);
    }
    Ok(())
}

#[test]
fn grads_into_concat_stages_gradients_whose_rows_lie_apart() -> Result<()> {
    // the kernels make a QKV gradient's parts (rows 3·heads·d apart) in
    // their scratch and copy them out (`attention_layout::Staged`): bit for
    // bit what the unjoined gradients give, copied by the concatenation,
    // at shapes past the first test's: 300 causal steps (past the 256 keys
    // that the f32 tiles take whole: the keys before a block's diagonal on
    // the blocked products, so dQ's rows are summed over two products in
    // the scratch), 77 steps with a mask (partial blocks of 64 rows and
    // keys), one head of 64 (q's rows still 192 apart), and f64 (the
    // products of the other kernels, heads of 64 from 64 keys)
    let args = |(b, t, h, hd): (usize, usize, usize, usize), dt| {
        (
            data(&[b * t, 20], 0.0, dt),
            data(&[20, 3 * h * hd], 1.0, dt).mul_scalar(0.3).unwrap(),
            data(&[b * t, h * hd], 2.0, dt),
        )
    };
    let m: Vec<f32> = (0..77 * 77)
        .map(|i| {
            if (i * 11) % 7 == 0 {
                f32::NEG_INFINITY
            } else {
                0.2 * (i % 5) as f32
            }
        })
        .collect();
    let mask = Tensor::from_vec(m, &[77, 77])?;
    let cases = [
        ((1, 300, 2, 16), None, true, DType::F32),
        ((1, 77, 2, 16), Some(mask), false, DType::F32),
        ((2, 70, 1, 64), None, true, DType::F32),
        ((2, 70, 1, 64), None, true, DType::F64),
        ((1, 130, 2, 64), None, false, DType::F64),
    ];
    for (dims, mask, causal, dt) in cases {
        fires(
            "grads_into_concat",
            attention_grads(dims, [0, 1, 2], mask, causal),
            &args(dims, dt),
            Some(1),
            0.0,
        )?;
    }
    Ok(())
}

#[test]
fn grads_into_concat_leaves_gradients_it_cannot_join_alone() -> Result<()> {
    // cross-attention: q from one projection, k and v from a fused one;
    // the concatenation joins dk and dv only, and dq goes elsewhere
    let (b, t, s, h, hd) = (2, 8, 12, 2, 8);
    let body = move |(x, c, wq, wkv): &(Tensor, Tensor, Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(wq);
            tape.watch(wkv);
            let heads = |t0: &Tensor, n: usize| t0.reshape(&[b, n, h, hd])?.permute(&[0, 2, 1, 3]);
            let q = heads(&x.matmul(wq)?, t)?;
            let kv = c.matmul(wkv)?.split(2, -1)?;
            let (k, v) = (heads(&kv[0], s)?, heads(&kv[1], s)?);
            q.scaled_dot_product_attention(&k, &v, None, false, None)?
                .square()?
                .sum_all()
        })?;
        let g = tape.gradient(&y, &[wq.clone(), wkv.clone()][..])?;
        Ok(g.into_iter().map(|g| g.expect("connected")).collect())
    };
    let args = (
        data(&[b * t, 10], 0.0, DType::F32),
        data(&[b * s, 6], 1.0, DType::F32),
        data(&[10, h * hd], 2.0, DType::F32),
        data(&[6, 2 * h * hd], 3.0, DType::F32),
    );
    fires("grads_into_concat", body, &args, Some(0), 0.0)?;
    Ok(())
}

#[test]
fn merge_reads_gives_a_cell_unrolled_in_a_loop_one_read_of_its_weights() -> Result<()> {
    // a tanh cell `h = tanh(h U + x_t W)` over 5 steps, its weights read
    // at every step, and the gradient w.r.t. both: 10 reads become 2, and
    // with them the backward steps' `g Uᵀ` share one transposed `U`
    let (w, u) = (
        Variable::new(data(&[6, 40], 1.0, DType::F32)),
        Variable::new(data(&[40, 40], 2.0, DType::F32).mul_scalar(0.2)?),
    );
    let body = move |xs: &Vec<Tensor>| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            // (40 units: the `f32` kernel takes products more than 32 wide)
            let mut h = Tensor::zeros(&[4, 40], DType::F32);
            for x in xs {
                h = h.matmul(&u.read())?.add(&x.matmul(&w.read())?)?.tanh()?;
            }
            h.square()?.sum_all()
        })?;
        let g = tape.gradient(&loss, &[&w, &u])?;
        Ok(vec![loss, g[0].clone().unwrap(), g[1].clone().unwrap()])
    };
    let xs: Vec<Tensor> = (0..5).map(|i| data(&[4, 6], i as f64, DType::F32)).collect();
    // (products joined or stacked add in another order)
    let s = fires("merge_reads", body.clone(), &xs, Some(8), 1e-5)?;
    if avx512_kernel() {
        assert!(s.transposed >= 1, "{s:?}");
    }
    let f = function(body);
    let reads = f.concrete(&xs)?.optimized_graph().count("ReadVariable");
    assert_eq!(reads, 2);
    Ok(())
}

#[test]
fn merge_reads_keeps_reads_apart_around_a_write() -> Result<()> {
    let v = Variable::new(Tensor::vector(&[1.0f64, 2.0]));
    let body = {
        let v = v.clone();
        move |x: &Tensor| -> Result<Vec<Tensor>> {
            let a = v.read().mul(x)?;
            let b = v.read().add(x)?; // merged into the first read
            v.assign_add(x)?;
            let c = v.read().mul(x)?; // after the write: its own read
            Ok(vec![a, b, c])
        }
    };
    let f = function(body);
    let x = Tensor::vector(&[3.0f64, 4.0]);
    let c = f.concrete(&x)?;
    assert_eq!(c.optimized_graph().count("ReadVariable"), 2);
    assert_eq!(c.compile_stats().count("merge_reads"), Some(1));
    // each run reads the value as the eager code would: v = [1, 2] before
    // the first call's write, [4, 6] after it
    v.assign(&Tensor::vector(&[1.0f64, 2.0]))?;
    let got: Vec<Vec<f64>> = f.call(&x)?.iter().map(|t| t.to_vec::<f64>().unwrap()).collect();
    assert_eq!(got, vec![vec![3.0, 8.0], vec![4.0, 6.0], vec![12.0, 24.0]]);
    let got: Vec<Vec<f64>> = f.call(&x)?.iter().map(|t| t.to_vec::<f64>().unwrap()).collect();
    assert_eq!(got, vec![vec![12.0, 24.0], vec![7.0, 10.0], vec![21.0, 40.0]]);
    Ok(())
}

/// Common-subexpression elimination merges equal constants by their bits:
/// `i64` constants past 2^53 that differ only in their low bits stay apart
/// (keyed through `f64`, the folded product `(2^63 - 6) · 3` was merged
/// into its operand `2^63 - 6`: found by the traced fuzz, seed 5208).
/// The wanted values are Rust's wrapping products, the eager op's.
#[test]
fn large_i64_constants_are_not_merged_by_rounding() -> Result<()> {
    for (x, y) in [
        (i64::MAX - 5, 3i64),
        (i64::MAX, 1),
        (i64::MIN + 1, 2),
        ((1 << 53) + 1, 1),
        (-(1 << 60) - 3, 7),
    ] {
        let f = function(move |z: &Tensor| {
            let p = Tensor::scalar(x).mul(&Tensor::scalar(y))?;
            // the operand itself too, beside its product
            Ok(vec![p.add(&z.mul_scalar(0.0)?)?, Tensor::scalar(x).add(z)?])
        });
        let got = f.call(&Tensor::scalar(0i64))?;
        assert_eq!(got[0].to_vec::<i64>()?, vec![x.wrapping_mul(y)], "{x} * {y}");
        assert_eq!(got[1].to_vec::<i64>()?, vec![x], "{x}");
    }
    // two constants 1 apart past 2^53, both returned
    let f = function(|z: &Tensor| {
        Ok(vec![
            Tensor::scalar((1i64 << 60) + 1).add(z)?,
            Tensor::scalar((1i64 << 60) + 2).add(z)?,
        ])
    });
    let got = f.call(&Tensor::scalar(0i64))?;
    assert_eq!(got[0].to_vec::<i64>()?, vec![(1i64 << 60) + 1]);
    assert_eq!(got[1].to_vec::<i64>()?, vec![(1i64 << 60) + 2]);
    Ok(())
}
