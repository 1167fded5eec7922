//! Compiled graphs on a GPU replayed as CUDA graphs (`function::compile::
//! replay`): a traced training step captured at its second run gives the
//! eager step's numbers at every later run; new inputs, variables assigned
//! between runs and values the caller keeps are all honoured; graphs that
//! need the host run without a CUDA graph, and still right.

use gradtape::nn::Layer;
use gradtape::{function, DType, GradientTape, Result, Tensor, Variable};

use super::{gpu_here, serial, GPU};

/// Deterministic values in [-scale, scale].
fn init(shape: &[usize], k: f64, scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(
        (0..n).map(|i| (scale * (0.37 * i as f64 + k).sin()) as f32).collect(),
        shape,
    )
    .unwrap()
}

/// A two-layer network's SGD step on `vars` (loss returned).
fn step(vars: &[Variable], x: &Tensor, labels: &Tensor) -> Result<Tensor> {
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        let p: Vec<Tensor> = vars.iter().map(Variable::read).collect();
        let h = x.matmul(&p[0])?.bias_add(&p[1])?.tanh()?;
        let logits = h.matmul(&p[2])?.bias_add(&p[3])?;
        Tensor::sparse_softmax_cross_entropy_with_logits(labels, &logits)?.mean_all()
    })?;
    let grads = tape.gradient(&loss, vars)?;
    for (v, g) in vars.iter().zip(grads) {
        v.apply_gradient_descent(0.5, &g.expect("every variable is used"))?;
    }
    Ok(loss)
}

fn weights() -> Vec<Tensor> {
    vec![
        init(&[64, 48], 1.0, 0.3),
        Tensor::zeros(&[48], DType::F32),
        init(&[48, 10], 2.0, 0.3),
        Tensor::zeros(&[10], DType::F32),
    ]
}

#[test]
fn a_traced_training_step_replays_as_a_cuda_graph_with_the_eager_numbers() -> Result<()> {
    let _serial = serial();
    if !gpu_here() {
        return Ok(());
    }
    let x = init(&[32, 64], 0.1, 1.0).to(GPU)?;
    let labels = Tensor::vector(&(0..32i64).map(|i| (i * 7) % 10).collect::<Vec<_>>()).to(GPU)?;
    let on_gpu = |w: &[Tensor]| -> Vec<Variable> { w.iter().map(|w| Variable::new(w.to(GPU).unwrap())).collect() };
    let (eager_vars, traced_vars) = (on_gpu(&weights()), on_gpu(&weights()));
    let tv = traced_vars.clone();
    let f = function(move |(x, y): &(Tensor, Tensor)| step(&tv, x, y));
    let before = gradtape::cuda_graph_launches();
    let (mut eager, mut traced) = (Vec::new(), Vec::new());
    for _ in 0..6 {
        eager.push(step(&eager_vars, &x, &labels)?.item()?);
        traced.push(f.call(&(x.clone(), labels.clone()))?.item()?);
    }
    let replays = gradtape::cuda_graph_launches() - before;
    let args = (x.clone(), labels.clone());
    assert_eq!(f.concrete(&args)?.cuda_graph_status().as_deref(), Some("replayed"));
    println!("losses eager {eager:?}\n      traced {traced:?}; {replays} CUDA graph replays");
    // the first run goes node by node, the second is captured and replayed,
    // and so is every later one
    assert_eq!(replays, 5, "the step should replay from its second run");
    for (i, (a, b)) in eager.iter().zip(&traced).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 * a.abs().max(1.0),
            "step {i}: eager {a}, traced {b}"
        );
        if i > 0 {
            // (the weights move: a stale variable would repeat a loss)
            assert!((eager[i - 1] - a).abs() > 1e-3, "the loss did not move at step {i}");
        }
    }
    for (e, t) in eager_vars.iter().zip(&traced_vars) {
        assert_eq!(t.read().device(), GPU);
        let (e, t) = (e.read().cpu()?.to_vec_f64(), t.read().cpu()?.to_vec_f64());
        for (a, b) in e.iter().zip(&t) {
            assert!(
                (a - b).abs() <= 1e-4 * (1.0 + a.abs()),
                "weights: eager {a}, traced {b}"
            );
        }
    }
    Ok(())
}

#[test]
fn a_replayed_graph_reads_new_inputs_and_variables_assigned_between_runs() -> Result<()> {
    let _serial = serial();
    if !gpu_here() {
        return Ok(());
    }
    let v = Variable::new(Tensor::vector(&[1.0f32, 2.0, 3.0]).to(GPU)?);
    let c = Variable::new(Tensor::vector(&[0.5f32, 0.25, 2.0]).to(GPU)?);
    let (vf, cf) = (v.clone(), c.clone());
    // a write, then a read of the written variable, in one graph; an
    // output that is the input itself, and one that is a view
    let f = function(move |x: &Tensor| -> Result<Vec<Tensor>> {
        vf.assign_add(&x.mul(&cf.read())?)?;
        let y = vf.read().mul_scalar(2.0)?;
        Ok(vec![y, x.clone(), x.reshape(&[3, 1])?.transpose()?])
    });
    let (mut host_v, host_c) = (vec![1.0f32, 2.0, 3.0], vec![0.5f32, 0.25, 2.0]);
    let before = gradtape::cuda_graph_launches();
    let mut kept = Vec::new();
    for run in 0..6 {
        let xs: Vec<f32> = (0..3).map(|i| (run * 3 + i) as f32 - 4.0).collect();
        if run == 3 {
            // assigned between runs: the graph must read the new value
            v.assign(&Tensor::vector(&[10.0f32, 20.0, 30.0]).to(GPU)?)?;
            host_v = vec![10.0, 20.0, 30.0];
        }
        // a value the caller keeps must not change when the graph writes
        kept.push((v.read(), host_v.clone()));
        let out = f.call(&Tensor::vector(&xs).to(GPU)?)?;
        for i in 0..3 {
            host_v[i] += xs[i] * host_c[i];
        }
        let want: Vec<f64> = host_v.iter().map(|&a| 2.0 * a as f64).collect();
        assert_eq!(out[0].cpu()?.to_vec_f64(), want, "run {run}: 2·v");
        assert_eq!(out[1].to_vec::<f32>()?, xs, "run {run}: x itself");
        assert_eq!(out[2].shape(), &[1, 3]);
        assert_eq!(out[2].to_vec::<f32>()?, xs, "run {run}: a view of x");
        assert_eq!(v.read().to_vec::<f32>()?, host_v, "run {run}: the variable");
    }
    for (t, want) in &kept {
        assert_eq!(&t.to_vec::<f32>()?, want, "a value read before a run changed");
    }
    assert_eq!(gradtape::cuda_graph_launches() - before, 5);
    Ok(())
}

#[test]
fn graphs_that_need_the_host_run_without_a_cuda_graph_and_stay_right() -> Result<()> {
    let _serial = serial();
    if !gpu_here() {
        return Ok(());
    }
    // a dropout draws afresh at each run, on the host: the graph is never
    // captured, and each run drops other elements
    let layer = gradtape::nn::Dropout::new(0.5, &mut gradtape::Rng::new(3))?;
    let f = function(move |x: &Tensor| layer.forward(x, true));
    let before = gradtape::cuda_graph_launches();
    let x = Tensor::ones(&[256], DType::F32).to(GPU)?;
    let runs: Vec<Vec<f32>> = (0..4).map(|_| f.call(&x)?.to_vec::<f32>()).collect::<Result<_>>()?;
    for r in &runs {
        assert!(r.iter().all(|&v| v == 0.0 || v == 2.0), "{r:?}");
        let kept = r.iter().filter(|&&v| v == 2.0).count();
        assert!((64..192).contains(&kept), "{kept} of 256 kept");
    }
    assert!(
        runs.windows(2).all(|w| w[0] != w[1]),
        "two runs dropped the same elements"
    );
    assert_eq!(
        gradtape::cuda_graph_launches(),
        before,
        "a graph with a fresh draw was replayed"
    );
    let status = f.concrete(&x)?.cuda_graph_status().unwrap_or_default();
    assert!(status.starts_with("not replayed: "), "{status}");
    // the same step on the CPU never tries
    let g = function(|x: &Tensor| x.mul_scalar(3.0));
    for _ in 0..3 {
        assert_eq!(g.call(&Tensor::vector(&[1.0f32]))?.to_vec::<f32>()?, vec![3.0]);
    }
    assert_eq!(gradtape::cuda_graph_launches(), before);
    Ok(())
}

#[test]
fn a_label_out_of_range_on_the_gpu_is_the_error_of_the_next_read() -> Result<()> {
    let _serial = serial();
    if !gpu_here() {
        return Ok(());
    }
    let logits = init(&[4, 5], 0.3, 1.0).to(GPU)?;
    let labels = |bad: bool| Tensor::vector(&[0i64, 4, if bad { 7 } else { 2 }, 1]).to(GPU);
    let loss = move |labels: &Tensor| Tensor::sparse_softmax_cross_entropy_with_logits(labels, &logits)?.mean_all();
    let good = loss(&labels(false)?)?.item()?;
    // eagerly: the op returns, its loss is NaN, and the read says why
    let e = loss(&labels(true)?)?.item().unwrap_err();
    assert!(
        matches!(&e, gradtape::Error::IndexOutOfRange { op, index: 7, dim: 5, shape }
            if op.contains("sparse_softmax_cross_entropy") && shape == &[4]),
        "{e:?}"
    );
    // the check is cleared: the next read is fine
    assert_eq!(loss(&labels(false)?)?.item()?, good);
    // in a replayed CUDA graph
    let f = function(move |y: &Tensor| loss(y));
    let before = gradtape::cuda_graph_launches();
    for _ in 0..3 {
        assert_eq!(f.call(&labels(false)?)?.item()?, good);
    }
    let e = f.call(&labels(true)?)?.item().unwrap_err();
    assert!(matches!(e, gradtape::Error::IndexOutOfRange { index: 7, .. }), "{e:?}");
    assert_eq!(f.call(&labels(false)?)?.item()?, good);
    assert_eq!(
        gradtape::cuda_graph_launches() - before,
        4,
        "the loss should replay from its second run"
    );
    Ok(())
}

#[test]
fn a_function_called_inside_a_replayed_one_is_recorded_with_it() -> Result<()> {
    let _serial = serial();
    if !gpu_here() {
        return Ok(());
    }
    // the inner function's plan runs its nodes inside the outer capture
    // (they become part of the outer graph), never a graph launch of its own
    let inner = std::sync::Arc::new(function(|x: &Tensor| x.mul_scalar(3.0)?.add_scalar(1.0)));
    // (called alone first: its own graph is captured and replayed)
    let x0 = Tensor::vector(&[1.0f32, 2.0, 3.0, 4.0]).to(GPU)?;
    let before = gradtape::cuda_graph_launches();
    for _ in 0..3 {
        assert_eq!(inner.call(&x0)?.to_vec::<f32>()?, vec![4.0, 7.0, 10.0, 13.0]);
    }
    assert_eq!(gradtape::cuda_graph_launches() - before, 2);
    let called = inner.clone();
    let outer = function(move |x: &Tensor| called.call(x)?.square());
    let before = gradtape::cuda_graph_launches();
    for run in 0..5 {
        let xs: Vec<f32> = (0..4).map(|i| (run * 4 + i) as f32 * 0.25).collect();
        let y = outer.call(&Tensor::vector(&xs).to(GPU)?)?.to_vec::<f32>()?;
        let want: Vec<f32> = xs.iter().map(|&a| (3.0 * a + 1.0) * (3.0 * a + 1.0)).collect();
        for (a, b) in y.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "run {run}: {y:?} vs {want:?}");
        }
    }
    // the outer function replays from its second run (4 launches); its
    // first run may replay the inner one's graph too, if the call is a node
    let n = gradtape::cuda_graph_launches() - before;
    assert!((4..=5).contains(&n), "{n} CUDA graph launches");
    let status = outer.concrete(&x0)?.cuda_graph_status();
    assert_eq!(status.as_deref(), Some("replayed"));
    Ok(())
}
