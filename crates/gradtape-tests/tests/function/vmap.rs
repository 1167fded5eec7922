//! `vmap`: the batched evaluation of a per-example graph against the loop
//! it replaces (the eager closure on each example, stacked), over a table
//! of ops, shapes and in/out axes; and its composition with tapes, `grad`,
//! forward mode, `function` and itself; the fallback loop; its errors.

use std::sync::Mutex;

use gradtape::{function, grad, jvp, vmap, vmap_fallbacks, DType, Error, GradientTape, Result, Tensor, Variable};

mod table;

use table::{
    cases, inp, make,
    Kind::{Any, Idx},
};

/// `x` and `y` are the same (bit for bit when `exact`, else within 1e-12
/// relative).
fn assert_close(x: &Tensor, y: &Tensor, exact: bool, what: &str) {
    assert_eq!(x.shape(), y.shape(), "{what}: shapes");
    assert_eq!(x.dtype(), y.dtype(), "{what}: dtypes");
    let (a, b) = (x.to_vec_f64(), y.to_vec_f64());
    for (i, (u, v)) in a.iter().zip(&b).enumerate() {
        let ok = if exact {
            u.to_bits() == v.to_bits() || (u.is_nan() && v.is_nan())
        } else {
            (u - v).abs() <= 1e-12 * v.abs().max(1.0) || (u.is_nan() && v.is_nan())
        };
        assert!(ok, "{what}: element {i}: vmap {u:e}, loop {v:e}");
    }
}

/// All the in_axes to try for inputs of these per-example ranks: each
/// input batched on axis 0, 1 or last, or not batched; at least one
/// batched.
fn all_in_axes(ranks: &[usize]) -> Vec<Vec<Option<usize>>> {
    let mut out: Vec<Vec<Option<usize>>> = vec![vec![]];
    for &r in ranks {
        let mut opts = vec![None, Some(0)];
        for a in [1.min(r), r] {
            if !opts.contains(&Some(a)) {
                opts.push(Some(a));
            }
        }
        out = out
            .into_iter()
            .flat_map(|prefix| {
                opts.iter().map(move |&o| {
                    let mut p = prefix.clone();
                    p.push(o);
                    p
                })
            })
            .collect();
    }
    out.retain(|axes| axes.iter().any(Option::is_some));
    out
}

/// The nodes of the table's cases that have no batching rule for these
/// in_axes: a gather whose tensor and indices are both batched, a
/// convolution whose filter is batched, a dynamic slice or update whose
/// start is batched.
fn expected_fallbacks(name: &str, in_axes: &[Option<usize>]) -> Vec<(&'static str, usize)> {
    match name {
        "gather" | "gather axis 1" if in_axes.iter().all(Option::is_some) => vec![("Gather", 1)],
        "conv2d" if in_axes[1].is_some() => vec![("Conv2D", 1)],
        // a block at a different place in each example
        "dynamic_slice" if in_axes[1].is_some() => vec![("DynamicSlice", 1)],
        "dynamic_update_slice" if in_axes[2].is_some() => vec![("DynamicUpdateSlice", 1)],
        _ => vec![],
    }
}

/// The vmap of each case against the loop of its eager closure over the
/// examples, for every in_axes choice and out_axes 0 and 1.
#[test]
fn vmap_matches_the_loop_over_a_table_of_ops() -> Result<()> {
    const B: usize = 3;
    let mut checked = 0;
    for (ci, case) in cases().into_iter().enumerate() {
        // examples[k][i]: input i of example k; shared[i]: its unbatched value
        let examples: Vec<Vec<Tensor>> = (0..B)
            .map(|k| {
                case.inputs
                    .iter()
                    .enumerate()
                    .map(|(i, inp)| make(inp, (ci * 1000 + i * 10 + k) as u64))
                    .collect()
            })
            .collect();
        let shared: Vec<Tensor> = case
            .inputs
            .iter()
            .enumerate()
            .map(|(i, inp)| make(inp, (ci * 1000 + i * 10 + 7) as u64))
            .collect();
        let ranks: Vec<usize> = case.inputs.iter().map(|i| i.shape.len()).collect();
        for in_axes in all_in_axes(&ranks) {
            let args: Vec<Tensor> = in_axes
                .iter()
                .enumerate()
                .map(|(i, ax)| match ax {
                    None => shared[i].clone(),
                    Some(a) => {
                        let col: Vec<&Tensor> = examples.iter().map(|e| &e[i]).collect();
                        Tensor::stack(&col, *a as isize).unwrap()
                    }
                })
                .collect();
            let per_example: Vec<Vec<Tensor>> = (0..B)
                .map(|k| {
                    let a: Vec<Tensor> = in_axes
                        .iter()
                        .enumerate()
                        .map(|(i, ax)| {
                            if ax.is_some() {
                                examples[k][i].clone()
                            } else {
                                shared[i].clone()
                            }
                        })
                        .collect();
                    (case.f)(&a)
                })
                .collect::<Result<_>>()?;
            let min_rank = per_example[0].iter().map(Tensor::rank).min().unwrap();
            for out_axis in [0, 1].into_iter().filter(|&o| o <= min_rank) {
                let v = vmap(case.f, &in_axes, &[Some(out_axis)]);
                let what = format!("{} (in_axes {in_axes:?}, out_axes [{out_axis}])", case.name);
                let got = v.call(&args).map_err(|e| {
                    eprintln!("{what}: {e}");
                    e
                })?;
                assert_eq!(got.len(), per_example[0].len(), "{what}: outputs");
                for (j, g) in got.iter().enumerate() {
                    let col: Vec<&Tensor> = per_example.iter().map(|o| &o[j]).collect();
                    let want = Tensor::stack(&col, out_axis as isize)?;
                    assert_close(g, &want, case.exact, &what);
                }
                assert_eq!(
                    v.fallbacks(),
                    expected_fallbacks(case.name, &in_axes),
                    "{what}: fallbacks"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 500, "{checked} combinations checked");
    Ok(())
}

/// An empty batch gives an empty result of the right shape; a batch of one
/// gives the one example.
#[test]
fn empty_and_single_batches() -> Result<()> {
    let f = vmap(
        |a: &[Tensor]| Ok(vec![a[0].matmul(&a[1])?.softmax(-1)?]),
        &[Some(0), None],
        &[Some(1)],
    );
    let w = make(&inp(&[4, 2], Any), 1);
    let y = f.call(&[Tensor::zeros(&[0, 3, 4], DType::F64), w.clone()])?;
    assert_eq!(y[0].shape(), &[3, 0, 2]);
    let x = make(&inp(&[3, 4], Any), 2);
    let y = f.call(&[x.expand_dims(0)?, w.clone()])?;
    assert_close(&y[0], &x.matmul(&w)?.softmax(-1)?.expand_dims(1)?, false, "one example");
    Ok(())
}

/// Parameters and data of a small MLP: `(w1 [4, 3], b1 [3], w2 [3, 2])` and
/// `B` examples `x [4]`, `y [2]`.
fn mlp(b: usize) -> (Vec<Tensor>, Tensor, Tensor) {
    let params = vec![
        make(&inp(&[4, 3], Any), 11),
        make(&inp(&[3], Any), 12),
        make(&inp(&[3, 2], Any), 13),
    ];
    (params, make(&inp(&[b, 4], Any), 14), make(&inp(&[b, 2], Any), 15))
}

/// The loss of one example: `a = [w1, b1, w2, x, y]`.
fn mlp_loss(a: &[Tensor]) -> Result<Tensor> {
    let h = a[3].reshape(&[1, 4])?.matmul(&a[0])?.add(&a[1])?.tanh()?;
    h.matmul(&a[2])?.reshape(&[2])?.sub(&a[4])?.square()?.sum(&[0], false)
}

/// Per-example gradients, `vmap(grad(loss))`, with a tape inside the
/// vmapped closure and with `grad`, equal a loop of tape gradients.
#[test]
fn per_example_gradients() -> Result<()> {
    const B: usize = 5;
    let (params, xs, ys) = mlp(B);
    let axes = [None, None, None, Some(0), Some(0)];
    let with_tape = vmap(
        |a: &[Tensor]| {
            let tape = GradientTape::new();
            let loss = tape.record(|| {
                for p in &a[..3] {
                    tape.watch(p);
                }
                mlp_loss(a)
            })?;
            let g = tape.gradient(&loss, &a[..3].to_vec())?;
            Ok(g.into_iter().map(|g| g.unwrap()).collect())
        },
        &axes,
        &[Some(0)],
    );
    let g = grad(mlp_loss).params(&[0, 1, 2]);
    let with_grad = vmap(
        move |a: &[Tensor]| Ok(g.call(a)?.into_iter().map(|g| g.unwrap()).collect()),
        &axes,
        &[Some(0)],
    );
    let mut args = params.clone();
    args.extend([xs.clone(), ys.clone()]);
    let by_tape = with_tape.call(&args)?;
    let by_grad = with_grad.call(&args)?;
    assert_eq!(by_tape.len(), 3);
    // the loop: one tape per example
    let mut want: Vec<Vec<Tensor>> = vec![vec![]; 3];
    for k in 0..B {
        let tape = GradientTape::new();
        let x = xs.narrow(0, k, 1)?.reshape(&[4])?;
        let y = ys.narrow(0, k, 1)?.reshape(&[2])?;
        let loss = tape.record(|| {
            for p in &params {
                tape.watch(p);
            }
            mlp_loss(&[params[0].clone(), params[1].clone(), params[2].clone(), x, y])
        })?;
        for (w, g) in want.iter_mut().zip(tape.gradient(&loss, &params)?) {
            w.push(g.unwrap());
        }
    }
    for i in 0..3 {
        let refs: Vec<&Tensor> = want[i].iter().collect();
        let w = Tensor::stack(&refs, 0)?;
        assert_eq!(w.shape()[0], B);
        assert_close(&by_tape[i], &w, false, &format!("tape inside vmap, parameter {i}"));
        assert_close(&by_grad[i], &w, false, &format!("vmap(grad), parameter {i}"));
    }
    // the gradients differ between examples (they are per example)
    assert_ne!(
        by_tape[2].narrow(0, 0, 1)?.to_vec_f64(),
        by_tape[2].narrow(0, 1, 1)?.to_vec_f64()
    );
    Ok(())
}

/// A tape around a call differentiates the vmapped function, w.r.t. batched
/// and shared arguments alike.
#[test]
fn gradient_of_a_vmapped_function() -> Result<()> {
    const B: usize = 4;
    let (params, xs, ys) = mlp(B);
    let f = vmap(
        |a: &[Tensor]| Ok(vec![mlp_loss(a)?]),
        &[None, None, None, Some(0), Some(0)],
        &[Some(0)],
    );
    let mut args = params.clone();
    args.extend([xs.clone(), ys.clone()]);
    let tape = GradientTape::new();
    let total = tape.record(|| {
        for t in &args {
            tape.watch(t);
        }
        f.call(&args)?[0].sum(&[0], false)
    })?;
    let got = tape.gradient(&total, &args)?;
    // the loop
    let tape2 = GradientTape::new();
    let total2 = tape2.record(|| {
        for t in &args {
            tape2.watch(t);
        }
        let mut acc = Tensor::scalar(0.0f64);
        for k in 0..B {
            let mut a = params.clone();
            a.push(xs.narrow(0, k, 1)?.reshape(&[4])?);
            a.push(ys.narrow(0, k, 1)?.reshape(&[2])?);
            acc = acc.add(&mlp_loss(&a)?)?;
        }
        Ok(acc)
    })?;
    let want = tape2.gradient(&total2, &args)?;
    assert_close(&total, &total2, false, "value");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_close(
            g.as_ref().unwrap(),
            w.as_ref().unwrap(),
            false,
            &format!("gradient {i}"),
        );
    }
    Ok(())
}

/// Forward mode through vmap: the JVP of the vmapped function equals the
/// stacked JVPs of the examples.
#[test]
fn forward_mode_through_vmap() -> Result<()> {
    const B: usize = 3;
    let f = vmap(
        |a: &[Tensor]| Ok(vec![a[0].matmul(&a[1])?.sin()?.softmax(-1)?]),
        &[Some(1), None],
        &[Some(0)],
    );
    let x = make(&inp(&[2, B, 4], Any), 21);
    let w = make(&inp(&[4, 3], Any), 22);
    let (tx, tw) = (make(&inp(&[2, B, 4], Any), 23), make(&inp(&[4, 3], Any), 24));
    let (y, dy) = jvp(
        |p| Ok(f.call(p)?.remove(0)),
        &[x.clone(), w.clone()],
        &[tx.clone(), tw.clone()],
    )?;
    let (mut ys, mut dys) = (vec![], vec![]);
    for k in 0..B {
        let xk = x.narrow(1, k, 1)?.squeeze(&[1])?;
        let tk = tx.narrow(1, k, 1)?.squeeze(&[1])?;
        let (yk, dk) = jvp(
            |p| p[0].matmul(&p[1])?.sin()?.softmax(-1),
            &[xk, w.clone()],
            &[tk, tw.clone()],
        )?;
        ys.push(yk);
        dys.push(dk);
    }
    let stack = |v: &[Tensor]| Tensor::stack(&v.iter().collect::<Vec<_>>(), 0);
    assert_close(&y, &stack(&ys)?, false, "primal");
    assert_close(&dy, &stack(&dys)?, false, "tangent");
    Ok(())
}

/// vmap inside a traced function: the same values as eager vmap, and the
/// graph holds the batched ops.
#[test]
fn vmap_inside_function() -> Result<()> {
    let v = vmap(
        |a: &[Tensor]| Ok(vec![a[0].matmul(&a[1])?.relu()?.sum(&[-1], false)?]),
        &[Some(0), None],
        &[Some(0)],
    );
    let eager = v.call(&[make(&inp(&[5, 2, 4], Any), 31), make(&inp(&[4, 3], Any), 32)])?;
    let v = std::sync::Arc::new(v);
    let v2 = v.clone();
    let f = function(move |(x, w): &(Tensor, Tensor)| Ok(v2.call(&[x.clone(), w.clone()])?.remove(0)));
    for seed in [31, 41] {
        let (x, w) = (make(&inp(&[5, 2, 4], Any), seed), make(&inp(&[4, 3], Any), 32));
        let traced = f.call(&(x.clone(), w.clone()))?;
        let again = v.call(&[x, w])?;
        assert_close(&traced, &again[0], true, "function(vmap) against vmap");
        if seed == 31 {
            assert_close(&traced, &eager[0], true, "function(vmap) against the first eager call");
        }
    }
    assert_eq!(f.trace_count(), 1);
    let g = f.graph(&(make(&inp(&[5, 2, 4], Any), 31), make(&inp(&[4, 3], Any), 32)))?;
    assert_eq!(g.values[g.outputs[0] as usize].shape.as_slice(), &[5, 2]);
    Ok(())
}

/// vmap of vmap: a pairwise function over two batches (rows of `x` against
/// rows of `y`) equals the double loop.
#[test]
fn vmap_of_vmap() -> Result<()> {
    let inner = vmap(
        |a: &[Tensor]| Ok(vec![a[0].squared_difference(&a[1])?.sum(&[0], false)?.sqrt()?]),
        &[None, Some(0)],
        &[Some(0)],
    );
    let outer = vmap(move |a: &[Tensor]| inner.call(a), &[Some(1), None], &[Some(1)]);
    let x = make(&inp(&[3, 4], Any), 51); // 4 rows of 3, batch on axis 1
    let y = make(&inp(&[5, 3], Any), 52); // 5 rows of 3
    let d = outer.call(&[x.clone(), y.clone()])?.remove(0);
    assert_eq!(d.shape(), &[5, 4]);
    for i in 0..4 {
        for j in 0..5 {
            let xi = x.narrow(1, i, 1)?.reshape(&[3])?;
            let yj = y.narrow(0, j, 1)?.reshape(&[3])?;
            let want = xi
                .squared_difference(&yj)?
                .sum(&[0], false)?
                .sqrt()?
                .to_scalar::<f64>()?;
            let got = d.narrow(0, j, 1)?.narrow(1, i, 1)?.reshape(&[])?.to_scalar::<f64>()?;
            assert!(
                (got - want).abs() <= 1e-12 * want.abs().max(1.0),
                "({i}, {j}): {got} vs {want}"
            );
        }
    }
    Ok(())
}

/// Captures the warnings logged.
struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record) {
        self.0.lock().unwrap().push(format!("{}", r.args()));
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));

/// An op without a batching rule runs in the loop: correct, reported by
/// the vmap and process-wide, and logged once however often it runs.
#[test]
fn fallback_loop_is_correct_and_reported_once() -> Result<()> {
    let _ = log::set_logger(&CAPTURE);
    log::set_max_level(log::LevelFilter::Warn);
    let f = vmap(
        |a: &[Tensor]| Ok(vec![a[0].bincount(None, 5)?, a[0].cast(DType::F64)?.exp()?]),
        &[Some(0)],
        &[Some(0)],
    );
    let x = make(&inp(&[4, 6], Idx(5)), 61);
    for _ in 0..3 {
        let out = f.call(std::slice::from_ref(&x))?;
        for k in 0..4 {
            let xk = x.narrow(0, k, 1)?.reshape(&[6])?;
            assert_eq!(
                out[0].narrow(0, k, 1)?.reshape(&[5])?.to_vec::<i64>()?,
                xk.bincount(None, 5)?.to_vec::<i64>()?
            );
        }
        assert_close(&out[1], &x.cast(DType::F64)?.exp()?, true, "exp beside the fallback");
    }
    assert_eq!(f.fallbacks(), vec![("Bincount", 3)]);
    let all = vmap_fallbacks();
    let entry = all.iter().find(|e| e.op == "Bincount").expect("Bincount reported");
    assert!(entry.runs >= 3, "{entry:?}");
    assert_eq!(entry.logged, 1);
    let logged: Vec<String> = CAPTURE
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m.contains("Bincount"))
        .cloned()
        .collect();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(
        logged[0].starts_with("vmap: Bincount has no batching rule"),
        "{}",
        logged[0]
    );
    Ok(())
}

/// The message of an error vmap itself reports (an invalid argument).
fn message(r: Result<Vec<Tensor>>) -> String {
    match r {
        Err(e @ Error::InvalidArgument { .. }) => e.to_string(),
        Err(e) => panic!("another error: {e}"),
        Ok(v) => panic!("no error: {v:?}"),
    }
}

/// The message of any error.
fn any_message(r: Result<Vec<Tensor>>) -> String {
    match r {
        Err(e) => e.to_string(),
        Ok(v) => panic!("no error: {v:?}"),
    }
}

/// Bad axes and sizes are errors naming vmap and the shapes.
#[test]
fn errors_name_vmap_and_the_shapes() -> Result<()> {
    let x = make(&inp(&[3, 4], Any), 71);
    let y = make(&inp(&[5, 4], Any), 72);
    let add = |in_axes: &[Option<usize>], out_axes: &[Option<usize>]| {
        vmap(|a: &[Tensor]| Ok(vec![a[0].add(&a[1])?]), in_axes, out_axes)
    };
    let m = message(add(&[Some(0), Some(0)], &[Some(0)]).call(&[x.clone(), y.clone()]));
    assert!(m.starts_with("vmap: batch sizes differ"), "{m}");
    assert!(m.contains("[3, 4]") && m.contains("[5, 4]"), "{m}");
    let m = message(add(&[Some(2), None], &[Some(0)]).call(&[x.clone(), y.clone()]));
    assert!(
        m.contains("in_axes[0] = 2 is out of range") && m.contains("[3, 4]"),
        "{m}"
    );
    let m = message(add(&[None, None], &[Some(0)]).call(&[x.clone(), y.clone()]));
    assert!(
        m.contains("vmap: no argument is batched") && m.contains("[5, 4]"),
        "{m}"
    );
    let m = message(add(&[Some(0), None, None], &[Some(0)]).call(&[x.clone(), y.clone()]));
    assert!(m.contains("vmap: in_axes has 3 entries for 2 arguments"), "{m}");
    let m = message(add(&[Some(1), Some(1)], &[Some(2)]).call(&[x.clone(), x.clone()]));
    assert!(
        m.contains("vmap: out_axes[0] = 2 is out of range") && m.contains("[3]"),
        "{m}"
    );
    let m = message(add(&[Some(0), None], &[None]).call(&[x.clone(), make(&inp(&[4], Any), 74)]));
    assert!(m.contains("vmap: output 0") && m.contains("out_axes[0] is None"), "{m}");
    // an op's own error on the batch names the op and shapes
    let m = any_message(add(&[Some(0), Some(0)], &[Some(0)]).call(&[x.clone(), make(&inp(&[3, 5], Any), 73)]));
    assert!(m.starts_with("add:") && m.contains("[4]") && m.contains("[5]"), "{m}");
    // a dynamic slice's shared start that does not fit (a second call, the
    // trace cached): the error of one example, with the example's shapes
    let ds = vmap(
        |a: &[Tensor]| Ok(vec![a[0].dynamic_slice(&a[1], &[2, 3])?]),
        &[Some(0), None],
        &[Some(0)],
    );
    let xs = make(&inp(&[3, 5, 4], Any), 75);
    let fits = ds.call(&[xs.clone(), Tensor::from_vec(vec![3i64, 1], &[2])?])?;
    assert_eq!(fits[0].shape(), &[3, 2, 3]);
    assert_eq!(ds.fallbacks(), vec![]);
    let m = any_message(ds.call(&[xs, Tensor::from_vec(vec![4i64, 1], &[2])?]));
    assert!(
        m.starts_with("dynamic_slice:") && m.contains("[2, 3]") && m.contains("[5, 4]") && !m.contains("[3, 5, 4]"),
        "{m}"
    );
    // a write with a batched value
    let v = Variable::new(Tensor::zeros(&[4], DType::F64));
    let w = vmap(
        move |a: &[Tensor]| {
            v.assign(&a[0])?;
            Ok(vec![v.read()])
        },
        &[Some(0)],
        &[Some(0)],
    );
    let m = message(w.call(std::slice::from_ref(&x)));
    assert!(
        m.contains("vmap:") && m.contains("cannot be given batched inputs") && m.contains("[4] (batched)"),
        "{m}"
    );
    Ok(())
}

/// Unbatched outputs are broadcast to the batch (out_axes given) or
/// returned as they are (out_axes None); a shared argument stays shared.
#[test]
fn unbatched_outputs() -> Result<()> {
    let x = make(&inp(&[3, 2], Any), 81);
    let w = make(&inp(&[2], Any), 82);
    let f = vmap(
        |a: &[Tensor]| Ok(vec![a[0].exp()?, a[1].sin()?, a[1].cos()?]),
        &[Some(0), None],
        &[Some(1), Some(1), None],
    );
    let out = f.call(&[x.clone(), w.clone()])?;
    assert_close(&out[0], &x.exp()?.transpose()?, true, "batched output on axis 1");
    assert_close(
        &out[1],
        &Tensor::stack(&[&w.sin()?, &w.sin()?, &w.sin()?], 1)?,
        true,
        "broadcast",
    );
    assert_close(&out[2], &w.cos()?, true, "unbatched");
    Ok(())
}

/// A traced function called inside the vmapped closure is batched through
/// its graph (no fallback); a variable read is shared and read afresh at
/// each call; a `cond` on a batched predicate runs in the fallback loop,
/// one branch per example.
#[test]
fn calls_variables_and_control_flow() -> Result<()> {
    let g = std::sync::Arc::new(function(|x: &Tensor| x.sin()?.mul(x)));
    let w = Variable::new(Tensor::vector(&[1.0f64, 2.0, 3.0]));
    let (g2, w2) = (g.clone(), w.clone());
    let f = vmap(
        move |a: &[Tensor]| Ok(vec![g2.call(&a[0])?.mul(&w2.read())?]),
        &[Some(0)],
        &[Some(0)],
    );
    let x = make(&inp(&[4, 3], Any), 91);
    for scale in [1.0, -2.0] {
        w.assign(&Tensor::vector(&[1.0f64, 2.0, 3.0]).mul_scalar(scale)?)?;
        let got = f.call(std::slice::from_ref(&x))?;
        let want = x.sin()?.mul(&x)?.mul(&w.read())?;
        assert_close(&got[0], &want, true, &format!("call and variable, scale {scale}"));
    }
    assert_eq!(f.trace_count(), 1);
    assert!(f.fallbacks().is_empty(), "{:?}", f.fallbacks());
    assert!(f.graph(std::slice::from_ref(&x))?.count("Call") == 1);

    let c = vmap(
        |a: &[Tensor]| {
            let s = a[0].sum(&[0], false)?;
            let pred = s.gt(&Tensor::scalar(0.0f64))?;
            Ok(vec![gradtape::cond(&pred, || a[0].exp(), || a[0].neg())?])
        },
        &[Some(0)],
        &[Some(0)],
    );
    let got = c.call(std::slice::from_ref(&x))?;
    for k in 0..4 {
        let xk = x.narrow(0, k, 1)?.reshape(&[3])?;
        let want = if xk.sum(&[0], false)?.to_scalar::<f64>()? > 0.0 {
            xk.exp()?
        } else {
            xk.neg()?
        };
        assert_close(
            &got[0].narrow(0, k, 1)?.reshape(&[3])?,
            &want,
            true,
            &format!("cond, example {k}"),
        );
    }
    assert_eq!(c.fallbacks().len(), 1, "{:?}", c.fallbacks());
    Ok(())
}

/// Per-example gradients through a `while_loop` whose trip count differs
/// between the examples (0, 1 and 3 squarings): the loop's history, as
/// long as each example's count, cannot be stacked, so the fallback keeps
/// the examples' values apart until the backward loop has read them. Each
/// example's value and gradient is the loop's: x^(2^n) and
/// 2^n x^(2^n - 1). (Before, `vmap` refused: `stack` of histories of
/// different lengths; and the example traced, with no iteration, failed
/// at a `gather` of row -1.)
#[test]
fn per_example_gradients_through_loops_of_different_lengths() -> Result<()> {
    let f = vmap(
        |a: &[Tensor]| {
            let tape = GradientTape::new();
            let y = tape.record(|| {
                tape.watch(&a[0]);
                let out = gradtape::while_loop(
                    |v: &Vec<Tensor>| v[0].abs()?.lt_scalar(1.5),
                    |v: &Vec<Tensor>| Ok(vec![v[0].square()?]),
                    vec![a[0].clone()],
                    gradtape::WhileOptions::default(),
                )?;
                Ok(out[0].clone())
            })?;
            let dy = tape.gradient(&y, &a[0])?.expect("connected");
            Ok(vec![y, dy])
        },
        &[Some(0)],
        &[Some(0)],
    );
    // 2.0: no squaring; 1.2: one (1.44 < 1.5 squares again: two); 1.05: three
    let xs = [2.0f64, 1.2, 1.05];
    let counts = [0, 2, 4];
    let got = f.call(&[Tensor::vector(&xs)])?;
    for (k, (&x, &n)) in xs.iter().zip(&counts).enumerate() {
        let p = 2f64.powi(n);
        let (y, dy) = (got[0].to_vec_f64()[k], got[1].to_vec_f64()[k]);
        assert!((y - x.powf(p)).abs() <= 1e-12 * y.abs(), "example {k}: y {y}");
        let want = p * x.powf(p - 1.0);
        assert!(
            (dy - want).abs() <= 1e-12 * want.abs(),
            "example {k}: dy {dy}, want {want}"
        );
    }
    Ok(())
}

/// Attention (and, under a tape, its fused backward op) batches without
/// the loop: queries batched, keys and values shared or batched, a shared
/// or a batched mask; values and per-example gradients as the loop's.
#[test]
fn attention_batches_without_the_loop() -> Result<()> {
    const B: usize = 3;
    let t = |shape: &[usize], k: f64| {
        let n: usize = shape.iter().product();
        Tensor::from_vec((0..n).map(|i| (0.37 * i as f64 + k).sin()).collect::<Vec<f64>>(), shape).unwrap()
    };
    let (q, k, v) = (t(&[B, 2, 5, 4], 1.0), t(&[2, 7, 4], 2.0), t(&[B, 2, 7, 3], 3.0));
    let (shared_mask, batched_mask) = (t(&[5, 7], 4.0), t(&[B, 1, 7], 5.0));
    for (mask, mask_axis) in [(&shared_mask, None), (&batched_mask, Some(0))] {
        let f = vmap(
            |a: &[Tensor]| {
                let tape = GradientTape::new();
                let y = tape.record(|| {
                    tape.watch(&a[0]);
                    a[0].scaled_dot_product_attention(&a[1], &a[2], Some(&a[3]), true, None)?
                        .square()?
                        .sum_all()
                })?;
                let g = tape.gradient(&y, &a[0])?.unwrap();
                Ok(vec![y, g])
            },
            &[Some(0), None, Some(0), mask_axis],
            &[Some(0)],
        );
        let got = f.call(&[q.clone(), k.clone(), v.clone(), mask.clone()])?;
        assert!(f.fallbacks().is_empty(), "{:?}", f.fallbacks());
        for e in 0..B {
            let one = |x: &Tensor| -> Result<Tensor> {
                let s = x.shape()[1..].to_vec();
                x.narrow(0, e, 1)?.reshape(&s)
            };
            let (qe, ve) = (one(&q)?, one(&v)?);
            let me = if mask_axis.is_some() { one(mask)? } else { mask.clone() };
            let tape = GradientTape::new();
            let y = tape.record(|| {
                tape.watch(&qe);
                qe.scaled_dot_product_attention(&k, &ve, Some(&me), true, None)?
                    .square()?
                    .sum_all()
            })?;
            let g = tape.gradient(&y, &qe)?.unwrap();
            assert_close(&one(&got[0])?, &y, false, &format!("value of example {e}"));
            assert_close(&one(&got[1])?, &g, false, &format!("gradient of example {e}"));
        }
    }
    Ok(())
}
