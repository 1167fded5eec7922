//! Issue 28 item 5, "tracing never loses": the mechanisms that make a
//! traced training step at least as fast as the eager one, each shown
//! firing on two kinds of model (a GPT block's attention and an LSTM's
//! gates), with the traced values equal to the eager ones.

use gradtape::{CompileOptions, Function, FunctionOptions, GradientTape, Result, Tensor, Variable};

fn data(shape: &[usize], seed: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| ((i as f64 * 0.613 + seed).sin() * 0.5) as f32).collect();
    Tensor::from_vec(v, shape).unwrap()
}

/// The largest difference between `a` and `b`, relative to the largest
/// magnitude of `b` (at least 1).
fn rel_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    let (a, b) = (a.to_vec_f64(), b.to_vec_f64());
    let scale = b.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max) / scale
}

/// The loss and the gradients of `loss` w.r.t. `vars` (one tape).
fn step(vars: &[Variable], loss: impl Fn(&[Tensor]) -> Result<Tensor>) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let l = tape.record(|| {
        let p: Vec<Tensor> = vars.iter().map(Variable::read).collect();
        loss(&p)
    })?;
    let mut out = vec![l.clone()];
    for g in tape.gradient(&l, vars)? {
        out.push(g.expect("every variable has a gradient"));
    }
    Ok(out)
}

/// Runs `loss`'s step eagerly, then traced with `opts`; checks the values
/// agree to `tol` and returns the compiled graph's count of each op in
/// `ops`.
fn traced_counts(
    vars: Vec<Variable>,
    loss: fn(&[Tensor]) -> Result<Tensor>,
    opts: CompileOptions,
    ops: &[&str],
) -> Result<Vec<usize>> {
    let eager = step(&vars, loss)?;
    let v2 = vars.clone();
    let f = Function::with_options(
        move |_: &Tensor| step(&v2, loss),
        FunctionOptions {
            compile: opts,
            ..Default::default()
        },
    );
    let arg = Tensor::scalar(0.0f32);
    let traced = f.call(&arg)?;
    for (i, (t, e)) in traced.iter().zip(&eager).enumerate() {
        let d = rel_diff(t, e);
        assert!(d <= 1e-5, "output {i} differs by {d:e}");
    }
    let c = f.concrete(&arg)?;
    let g = c.optimized_graph();
    Ok(ops.iter().map(|op| g.count(op)).collect())
}

/// Causal self-attention by hand over `x` [B*T, D] (B = 2, T = 4, D = 8,
/// 2 heads), a fused QKV projection split in three, then a squared loss.
fn attention_loss(p: &[Tensor]) -> Result<Tensor> {
    let (b, t, d, h) = (2, 4, 8, 2);
    let [x, wqkv, wo] = p else { unreachable!() };
    let heads = |v: &Tensor| v.reshape(&[b, t, h, d / h])?.permute(&[0, 2, 1, 3]);
    let qkv = x.matmul(wqkv)?.split(3, -1)?;
    let (q, k, v) = (heads(&qkv[0])?, heads(&qkv[1])?, heads(&qkv[2])?);
    let s = q.matmul(&k.permute(&[0, 1, 3, 2])?)?.div_scalar(2.0)?;
    let a = s
        .softmax(-1)?
        .matmul(&v)?
        .permute(&[0, 2, 1, 3])?
        .reshape(&[b * t, d])?;
    a.matmul(wo)?.square()?.mean_all()
}

fn attention_vars() -> Vec<Variable> {
    vec![
        Variable::new(data(&[8, 8], 0.0)),
        Variable::new(data(&[8, 24], 1.0)),
        Variable::new(data(&[8, 8], 2.0)),
    ]
}

/// Three steps of an LSTM by hand (batch 3, 4 units): the gate
/// pre-activations `[x h] W` split into input, forget, cell and output
/// gates.
fn lstm_loss(p: &[Tensor]) -> Result<Tensor> {
    let [x, w] = p else { unreachable!() };
    let mut h = Tensor::zeros(&[3, 4], gradtape::DType::F32);
    let mut c = h.clone();
    for s in 0..3 {
        let xs = x.narrow(0, 3 * s, 3)?;
        let z = Tensor::concat(&[&xs, &h], 1)?.matmul(w)?;
        let g = z.split(4, 1)?;
        let (i, f, o) = (g[0].sigmoid()?, g[1].sigmoid()?, g[3].sigmoid()?);
        c = f.mul(&c)?.add(&i.mul(&g[2].tanh()?)?)?;
        h = o.mul(&c.tanh()?)?;
    }
    h.square()?.sum_all()
}

/// A projection split into parts of unequal sizes, one of them unused
/// (its gradient is zeros: the concatenation has a gap).
fn unequal_loss(p: &[Tensor]) -> Result<Tensor> {
    let [x, w] = p else { unreachable!() };
    let parts = x.matmul(w)?.split_sizes(&[2, 3, 1, 4], 1)?;
    parts[0]
        .exp()?
        .sum_all()?
        .add(&parts[1].square()?.sum_all()?)?
        .add(&parts[3].sin()?.sum_all()?)
}

/// `unequal_loss` sliced by `narrow`s instead of a split.
fn narrows_loss(p: &[Tensor]) -> Result<Tensor> {
    let [x, w] = p else { unreachable!() };
    let y = x.matmul(w)?;
    y.narrow(1, 0, 2)?
        .exp()?
        .sum_all()?
        .add(&y.narrow(1, 2, 3)?.square()?.sum_all()?)?
        .add(&y.narrow(1, 6, 4)?.sin()?.sum_all()?)
}

#[test]
fn the_gradient_of_split_is_one_concatenation() -> Result<()> {
    type Case = (&'static str, fn() -> Vec<Variable>, fn(&[Tensor]) -> Result<Tensor>);
    let cases: [Case; 4] = [
        ("attention", attention_vars, attention_loss),
        (
            "lstm",
            || vec![Variable::new(data(&[9, 2], 3.0)), Variable::new(data(&[6, 16], 4.0))],
            lstm_loss,
        ),
        (
            "unequal",
            || vec![Variable::new(data(&[5, 3], 5.0)), Variable::new(data(&[3, 10], 6.0))],
            unequal_loss,
        ),
        (
            "narrows",
            || vec![Variable::new(data(&[5, 3], 7.0)), Variable::new(data(&[3, 10], 8.0))],
            narrows_loss,
        ),
    ];
    let ops = ["Pad", "ConcatV2"];
    for (name, vars, loss) in cases {
        let on = traced_counts(vars(), loss, CompileOptions::default(), &ops)?;
        let off = traced_counts(
            vars(),
            loss,
            CompileOptions::default().disable_pass("pads_to_concat")?,
            &ops,
        )?;
        assert_eq!(on[0], 0, "{name}: pads are left: {on:?}");
        // a split's gradient is one concatenation by its own rule; the
        // gradients of slices (`narrow`: the LSTM's input at each of its 3
        // steps, and the `narrows` case's 3 pieces) are pads, which the
        // pass joins
        let slices = match name {
            "lstm" | "narrows" => 3,
            _ => 0,
        };
        assert_eq!(off[0], slices, "{name}: pads without the pass: {off:?}");
        if name != "narrows" {
            assert!(off[1] >= 1, "{name}: no concatenation: {off:?}");
        }
        if slices > 0 {
            assert!(on[1] > off[1], "{name}: the pads were not joined: {on:?} vs {off:?}");
        }
    }
    Ok(())
}

/// The bits of each output of `out`.
fn bits(out: &[Tensor]) -> Vec<Vec<u64>> {
    out.iter()
        .map(|t| t.to_vec_f64().iter().map(|v| v.to_bits()).collect())
        .collect()
}

#[test]
fn pairs_of_products_are_tried_both_ways_with_the_same_bits() -> Result<()> {
    // the attention block's and the LSTM's input and weight gradients
    // pair (with more than one thread); their first runs alternate
    // between the pair together and one after the other, then keep the
    // faster: every run gives the bits of the first
    let lstm_vars = || {
        vec![
            Variable::new(data(&[96, 32], 3.0)),
            Variable::new(data(&[96, 256], 4.0)),
        ]
    };
    type Case = (&'static str, fn() -> Vec<Variable>, fn(&[Tensor]) -> Result<Tensor>);
    let cases: [Case; 2] = [
        ("attention", attention_vars, attention_loss),
        ("lstm", lstm_vars, lstm_big_loss),
    ];
    for (name, vars, loss) in cases {
        let vars = vars();
        let f = gradtape::function(move |_: &Tensor| step(&vars, loss));
        let arg = Tensor::scalar(0.0f32);
        let first = bits(&f.call(&arg)?);
        for run in 1..12 {
            assert!(bits(&f.call(&arg)?) == first, "{name}: run {run} differs");
        }
        assert!(f.concrete(&arg)?.compile_stats().count("pair_products").is_some());
    }
    Ok(())
}

/// [`lstm_loss`] at a size whose products pair (batch 32, 64 units).
fn lstm_big_loss(p: &[Tensor]) -> Result<Tensor> {
    let [x, w] = p else { unreachable!() };
    let mut h = Tensor::zeros(&[32, 64], gradtape::DType::F32);
    let mut c = h.clone();
    for s in 0..3 {
        let xs = x.narrow(0, 32 * s, 32)?;
        let z = Tensor::concat(&[&xs, &h], 1)?.matmul(w)?;
        let g = z.split(4, 1)?;
        let (i, f, o) = (g[0].sigmoid()?, g[1].sigmoid()?, g[3].sigmoid()?);
        c = f.mul(&c)?.add(&i.mul(&g[2].tanh()?)?)?;
        h = o.mul(&c.tanh()?)?;
    }
    h.square()?.sum_all()
}
