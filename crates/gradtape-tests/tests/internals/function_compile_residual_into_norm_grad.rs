//! The `residual_into_norm_grad` pass on traced pre-LayerNorm residual
//! models: the `Add` of a residual gradient and a layer norm's `dx` goes
//! into the norm's gradient node (`LayerNormGradAdd`), once per block, on
//! models of other depths and widths than the bench's; the values bit for
//! bit those of the graph compiled without the pass, and the eager ones;
//! the graphs it must leave alone (`dx` read elsewhere too); and the
//! node's errors.

use gradtape::{function, DType, FunctionOptions, GradientTape, Result, Rng, Tensor};

const PASS: &str = "residual_into_norm_grad";

fn no_grad() -> gradtape::Error {
    gradtape::Error::InvalidArgument {
        op: "test",
        msg: "no gradient".into(),
    }
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
}

/// `blocks` pre-LN residual blocks `x = x + gelu(LN(x) W1) W2` (each LN
/// with its gain and bias), a final LN, `loss = Σ LN_f(x) · c`; the
/// gradients of `x0` and of every parameter (`p`: per block `W1, W2,
/// gain, bias`, then the final gain, bias, then `c`).
fn step(x0: &Tensor, p: &[Tensor], blocks: usize) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(x0);
        for t in p {
            tape.watch(t);
        }
        let mut x = x0.clone();
        for b in 0..blocks {
            let q = &p[4 * b..4 * b + 4];
            let h = x.layer_normalization(&[-1], Some(&q[2]), Some(&q[3]), 1e-5)?;
            x = x.add(&h.matmul(&q[0])?.gelu(false)?.matmul(&q[1])?)?;
        }
        let f = &p[4 * blocks..];
        let y = x.layer_normalization(&[-1], Some(&f[0]), Some(&f[1]), 1e-5)?;
        y.mul(&f[2])?.sum_all()
    })?;
    let mut sources = vec![x0.clone()];
    sources.extend(p.iter().cloned());
    tape.gradient(&loss, &sources)?
        .into_iter()
        .map(|g| g.ok_or_else(no_grad))
        .collect()
}

fn params(rng: &mut Rng, blocks: usize, width: usize, rows: usize) -> Result<Vec<Tensor>> {
    let mut p = Vec::new();
    for _ in 0..blocks {
        p.push(rng.normal(&[width, 2 * width], 0.0, 0.1, DType::F32)?);
        p.push(rng.normal(&[2 * width, width], 0.0, 0.1, DType::F32)?);
        p.push(rng.normal(&[width], 1.0, 0.1, DType::F32)?);
        p.push(rng.normal(&[width], 0.0, 0.1, DType::F32)?);
    }
    p.push(rng.normal(&[width], 1.0, 0.1, DType::F32)?);
    p.push(rng.normal(&[width], 0.0, 0.1, DType::F32)?);
    p.push(rng.normal(&[rows, width], 0.0, 1.0, DType::F32)?);
    Ok(p)
}

fn off(pass: &str) -> FunctionOptions {
    FunctionOptions::default().disable_pass(pass).unwrap()
}

#[test]
fn each_blocks_residual_joins_its_norm_gradient_bit_for_bit() -> Result<()> {
    let mut rng = Rng::new(5);
    // (3 blocks of width 192, 2 of width 64: one fold per block; the final
    // norm's `dx` starts the residual stream and has nothing to join)
    for (blocks, width, rows) in [(3usize, 192usize, 48usize), (2, 64, 16)] {
        let p = params(&mut rng, blocks, width, rows)?;
        let x0 = rng.normal(&[rows, width], 0.0, 1.0, DType::F32)?;
        let body = move |(x, p): &(Tensor, Vec<Tensor>)| step(x, p, blocks);
        let with = gradtape::Function::with_options(body, FunctionOptions::default());
        let without = gradtape::Function::with_options(body, off(PASS));
        let args = (x0.clone(), p.clone());
        let (a, b) = (with.call(&args)?, without.call(&args)?);
        for (i, (u, v)) in a.iter().zip(&b).enumerate() {
            assert_eq!(bits(u), bits(v), "{blocks} blocks: output {i}");
        }
        let eager = step(&x0, &p, blocks)?;
        for (i, (u, v)) in a.iter().zip(&eager).enumerate() {
            let d = u.sub(v)?.abs()?.max_all()?.to_scalar::<f32>()?;
            let m = v.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(
                d <= 1e-5 * (1.0 + m),
                "{blocks} blocks: output {i} off by {d} (max {m})"
            );
        }
        let c = with.concrete(&args)?;
        assert_eq!(c.compile_stats().count(PASS), Some(blocks));
        let g = c.optimized_graph();
        assert_eq!(g.count("LayerNormGradAdd"), blocks, "{g}");
        assert_eq!(g.count("LayerNormGrad"), 1, "the final norm's: {g}");
        let cw = without.concrete(&args)?;
        assert_eq!(cw.compile_stats().count(PASS), None);
        assert_eq!(cw.optimized_graph().count("LayerNormGradAdd"), 0);
        // without fusion (which would take the `Add`s into kernels), the
        // pass removes one node per block
        let nodes = |o: FunctionOptions| -> Result<usize> {
            let f = gradtape::Function::with_options(body, o);
            Ok(f.concrete(&args)?.optimized_graph().len())
        };
        let unfused = off("fuse");
        let both = off("fuse").disable_pass(PASS)?;
        assert_eq!(nodes(both)? - nodes(unfused)?, blocks);
    }
    Ok(())
}

/// `dx + r` for the norm's `dx` of `Σ LN(x) · dy`; `how`: 0 as is, 1
/// with `dx · 2` returned too (`dx` read twice), 2 with `r` computed
/// after the gradient (`sin(r)`, made after the norm's gradient node).
fn norm_grad_plus((x, gamma, dy, r): &(Tensor, Tensor, Tensor, Tensor), how: u8) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(x);
        x.layer_normalization(&[-1], Some(gamma), None, 1e-5)?
            .mul(dy)?
            .sum_all()
    })?;
    let dx = tape.gradient(&y, x)?.ok_or_else(no_grad)?;
    Ok(match how {
        0 => vec![dx.add(r)?],
        1 => vec![dx.add(r)?, dx.mul_scalar(2.0)?],
        _ => vec![dx.add(&r.sin()?)?],
    })
}

#[test]
fn a_norm_gradient_read_elsewhere_or_a_later_operand_keeps_its_add() -> Result<()> {
    let mut rng = Rng::new(6);
    let (rows, n) = (24, 40);
    let args = (
        rng.normal(&[rows, n], 0.5, 2.0, DType::F32)?,
        rng.normal(&[n], 1.0, 0.2, DType::F32)?,
        rng.normal(&[rows, n], 0.0, 1.0, DType::F32)?,
        rng.normal(&[rows, n], 0.0, 1.0, DType::F32)?,
    );
    for (how, folds) in [(0u8, 1usize), (1, 0), (2, 0)] {
        let body = move |a: &(Tensor, Tensor, Tensor, Tensor)| norm_grad_plus(a, how);
        let f = function(body);
        let got = f.call(&args)?;
        let want = gradtape::Function::with_options(body, off(PASS)).call(&args)?;
        let eager = norm_grad_plus(&args, how)?;
        for (i, ((u, v), e)) in got.iter().zip(&want).zip(&eager).enumerate() {
            assert_eq!(bits(u), bits(v), "case {how}, output {i}");
            let d = u.sub(e)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(d <= 1e-5, "case {how}, output {i}: off by {d} from eager");
        }
        let c = f.concrete(&args)?;
        assert_eq!(c.compile_stats().count(PASS), Some(folds), "case {how}");
        assert_eq!(c.optimized_graph().count("LayerNormGradAdd"), folds, "case {how}");
    }
    Ok(())
}

#[test]
fn the_joined_node_refuses_operands_of_other_shapes_or_arity() -> Result<()> {
    let mut rng = Rng::new(7);
    let p = params(&mut rng, 1, 16, 4)?;
    let x0 = rng.normal(&[4, 16], 0.0, 1.0, DType::F32)?;
    let f = function(|(x, p): &(Tensor, Vec<Tensor>)| step(x, p, 1));
    let c = f.concrete(&(x0.clone(), p.clone()))?;
    let g = c.optimized_graph();
    let node = g
        .nodes
        .iter()
        .find(|n| n.op.name() == "LayerNormGradAdd")
        .expect("the joined node");
    let (x, gamma, dy) = (x0.clone(), p[2].clone(), x0.clone());
    // the right operands: dx + add, then the column sums
    let out = node.op.eval(&[x.clone(), gamma.clone(), dy.clone(), x.clone()])?;
    assert_eq!(out[0].shape(), &[4 * 16 + 2 * 16]);
    let bad = [
        vec![
            x.clone(),
            gamma.clone(),
            dy.clone(),
            Tensor::zeros(&[4, 15], DType::F32),
        ],
        vec![
            x.clone(),
            gamma.clone(),
            dy.clone(),
            Tensor::zeros(&[4, 16], DType::F64),
        ],
        vec![x.clone(), gamma.clone(), dy.clone()],
    ];
    for inputs in bad {
        let e = node.op.eval(&inputs).expect_err("bad operands").to_string();
        assert!(e.contains("LayerNormGradAdd"), "{e}");
    }
    let e = node
        .op
        .eval(&[x.clone(), gamma, dy, Tensor::zeros(&[4, 15], DType::F32)])
        .expect_err("shape")
        .to_string();
    assert!(e.contains("[4, 15]") && e.contains("[4, 16]"), "{e}");
    Ok(())
}
