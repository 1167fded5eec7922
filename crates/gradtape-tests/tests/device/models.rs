//! Traced functions and models on the (emulated) GPU, a part of
//! `main.rs` (whose helpers it uses): fused kernels compiled for the GPU,
//! the `cnn_step` network, a layer norm layer, the digits example and a
//! transformer block, each against the CPU.

use gradtape::{DType, Device, GradientTape, Tensor, Variable};

use super::{close, emulate, ops_table, t, vals, GPU};

/// A traced function of `args` run on the CPU and on the (emulated) GPU:
/// the GPU's values are the CPU's (within `tol`), it was traced once,
/// and its graph compiled for the GPU has `fused` CUDA kernels (all its
/// fused kernels) and `sums` partial sums left as nodes.
fn traced_on_both<F>(name: &str, f: F, args: &[Tensor], tol: f64, fused: usize, sums: usize)
where
    F: Fn(&[Tensor]) -> gradtape::Result<Vec<Tensor>> + Send + Sync + 'static,
{
    let f = std::sync::Arc::new(f);
    let run = |device: Device| -> Vec<Tensor> {
        let on: Vec<Tensor> = args.iter().map(|a| a.to(device).unwrap()).collect();
        let g = f.clone();
        let traced = gradtape::function(move |xs: &Vec<Tensor>| g(xs));
        let mut out = Vec::new();
        for _ in 0..2 {
            out = traced.call(&on).unwrap();
            for o in &out {
                assert_eq!(o.device(), device, "{name}");
            }
        }
        assert_eq!(traced.trace_count(), 1, "{name}");
        let c = traced.concrete(&on).unwrap();
        if device.is_cuda() {
            let s = c.gpu_compile_stats().expect("compiled for the GPU");
            assert_eq!((s.kernels, s.cuda_kernels), (fused, fused), "{name}: {s:?}");
            let g = c.gpu_optimized_graph().unwrap();
            assert_eq!(g.count("Sum"), sums, "{name}: {g}");
            assert!(c.optimized_graph().count("Fused") >= 1, "{name}");
        }
        out
    };
    let (cpu, gpu) = (run(Device::Cpu), run(GPU));
    // and eagerly, on the GPU
    let eager = f(&args.iter().map(|a| a.to(GPU).unwrap()).collect::<Vec<_>>()).unwrap();
    assert_eq!(cpu.len(), gpu.len());
    for ((c, g), e) in cpu.iter().zip(&gpu).zip(&eager) {
        close(&g.cpu().unwrap(), c, tol);
        close(&g.cpu().unwrap(), &e.cpu().unwrap(), tol);
    }
}

#[test]
fn traced_functions_run_fused_kernels_compiled_for_the_gpu() {
    emulate();
    let x = t(&vals(12 * 5, 21), &[12, 5]);
    let bias = t(&vals(5, 22), &[5]);
    let col = t(&vals(12, 23), &[12, 1]);
    // a chain of unary ops: one kernel
    traced_on_both(
        "unary chain",
        |xs: &[Tensor]| {
            let y = xs[0]
                .sin()?
                .exp()?
                .mul_scalar(0.5)?
                .add_scalar(0.25)?
                .tanh()?
                .sigmoid()?;
            Ok(vec![y])
        },
        std::slice::from_ref(&x),
        1e-6,
        1,
        0,
    );
    // broadcasting binary ops with a bias row and a column, and a scalar
    traced_on_both(
        "broadcasts",
        |xs: &[Tensor]| {
            let y = xs[0].bias_add(&xs[1])?.relu()?.mul(&xs[2])?.sub(&xs[0].square()?)?;
            Ok(vec![y.clone(), y.maximum(&xs[3])?])
        },
        &[x.clone(), bias.clone(), col.clone(), Tensor::scalar(0.1f32)],
        1e-6,
        1,
        0,
    );
    // sums of all elements (in the kernel: added in double)
    traced_on_both(
        "sum of all",
        |xs: &[Tensor]| {
            let d = xs[0].sub(&xs[1])?;
            Ok(vec![d.square()?.sum_all()?, d.abs()?.mean_all()?])
        },
        &[x.clone(), t(&vals(12 * 5, 24), &[12, 5])],
        1e-5,
        2, // (the mean's division: a kernel of one element)
        0,
    );
    // a partial reduction: the kernel stops before it, the sum runs on
    // its own GPU kernel, and what reads it is fused again
    traced_on_both(
        "partial reduction",
        |xs: &[Tensor]| {
            let e = xs[0].exp()?.mul(&xs[0].square()?.add_scalar(1.0)?)?;
            let rows = e.sum(&[1], true)?;
            Ok(vec![e.div(&rows)?.log1p()?])
        },
        std::slice::from_ref(&x),
        1e-5,
        2,
        1,
    );
    // f64, with a sine and a cosine of one value
    let x64 = Tensor::from_vec(vals(40, 25), &[8, 5]).unwrap();
    traced_on_both(
        "sincos f64",
        |xs: &[Tensor]| Ok(vec![xs[0].sin()?.add(&xs[0].cos()?)?.mul(&xs[0])?.sum_all()?]),
        std::slice::from_ref(&x64),
        1e-12,
        1,
        0,
    );
}

/// The network of the `cnn_step` workload (WORKLOADS.md), smaller batch:
/// conv 3x3 SAME 1->16 + bias, relu, maxpool 2x2; conv 3x3 SAME 16->32 +
/// bias, relu, maxpool 2x2; flatten; dense to 10 + bias; mean sparse
/// softmax cross-entropy.
fn cnn_loss(x: &Tensor, labels: &Tensor, p: &[Tensor]) -> gradtape::Result<Tensor> {
    use gradtape::Padding;
    let batch = x.shape()[0];
    let h = x.conv2d(&p[0], [1, 1], Padding::Same, [1, 1])?.add(&p[1])?.relu()?;
    let h = h.max_pool2d([2, 2], [2, 2], Padding::Valid)?;
    let h = h.conv2d(&p[2], [1, 1], Padding::Same, [1, 1])?.add(&p[3])?.relu()?;
    let h = h.max_pool2d([2, 2], [2, 2], Padding::Valid)?;
    let logits = h.reshape(&[batch, 1568])?.matmul(&p[4])?.add(&p[5])?;
    Tensor::sparse_softmax_cross_entropy_with_logits(labels, &logits)?.mean_all()
}

/// WORKLOADS.md's `init`: `scale * sin(0.37 i + k)`.
fn init(shape: &[usize], k: f64, scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    t(
        &(0..n).map(|i| scale * (0.37 * i as f64 + k).sin()).collect::<Vec<_>>(),
        shape,
    )
}

#[test]
fn the_cnn_step_network_trains_on_the_gpu_as_on_the_cpu() {
    emulate();
    let batch = 4;
    let x = init(&[batch, 28, 28, 1], 0.1, 0.5);
    let labels = Tensor::from_vec((0..batch as i64).map(|i| i % 10).collect(), &[batch]).unwrap();
    let init_p = [
        init(&[3, 3, 1, 16], 1.0, (2.0f64 / 9.0).sqrt()),
        init(&[16], 4.0, 0.01),
        init(&[3, 3, 16, 32], 2.0, (2.0f64 / 144.0).sqrt()),
        init(&[32], 5.0, 0.01),
        init(&[1568, 10], 3.0, (2.0f64 / 1568.0).sqrt()),
        init(&[10], 6.0, 0.01),
    ];
    let step = |device: Device| {
        let vars: Vec<Variable> = init_p.iter().map(|w| Variable::new(w.to(device).unwrap())).collect();
        let (x, labels) = (x.to(device).unwrap(), labels.to(device).unwrap());
        let mut out = vec![];
        for _ in 0..2 {
            let tape = GradientTape::new();
            let loss = tape
                .record(|| {
                    let p: Vec<Tensor> = vars.iter().map(|v| v.read()).collect();
                    cnn_loss(&x, &labels, &p)
                })
                .unwrap_or_else(|e| panic!("on {device}: {e}"));
            let g = tape.gradient(&loss, &vars).unwrap();
            let g: Vec<Tensor> = g.into_iter().map(|g| g.unwrap()).collect();
            for (v, g) in vars.iter().zip(&g) {
                assert_eq!(g.device(), device);
                v.apply_gradient_descent(0.01, g).unwrap();
            }
            out.push((loss, g));
        }
        out
    };
    let (cpu, gpu) = (step(Device::Cpu), step(GPU));
    for ((lc, gc), (lg, gg)) in cpu.iter().zip(&gpu) {
        assert_eq!(lg.device(), GPU);
        close(lg, lc, 1e-5);
        for (a, b) in gg.iter().zip(gc) {
            close(&a.cpu().unwrap(), b, 1e-4);
        }
    }
}

#[test]
fn a_layer_norm_layer_runs_forward_and_backward_on_the_gpu() {
    use gradtape::nn::{Layer, LayerNorm, Module};
    emulate();
    let x = t(&vals(4 * 6, 3), &[4, 6]);
    let run = |device: Device| {
        let ln = LayerNorm::new(6, DType::F32).unwrap();
        let vars = ln.trainable_variables();
        for (i, v) in vars.iter().enumerate() {
            let w = t(&vals(6, 10 + i as u64), &[6]);
            // (assign copies to the variable's device: move it first)
            v.move_to(device).unwrap();
            v.assign(&w).unwrap();
            assert_eq!(v.device(), device);
        }
        let x = x.to(device).unwrap();
        let tape = GradientTape::new();
        let y = tape
            .record(|| {
                tape.watch(&x);
                let y = ln.forward(&x, true)?;
                y.mul(&y.sin()?)?.sum_all()
            })
            .unwrap_or_else(|e| panic!("on {device}: {e}"));
        let mut sources: Vec<Tensor> = vec![x.clone()];
        sources.extend(vars.iter().map(|v| v.read()));
        let g = tape.gradient(&y, &vars).unwrap();
        let gx = g.into_iter().map(|g| g.unwrap()).collect::<Vec<_>>();
        (y, gx)
    };
    let (yc, gc) = run(Device::Cpu);
    let (yg, gg) = run(GPU);
    assert_eq!(yg.device(), GPU);
    close(&yg, &yc, 1e-5);
    assert_eq!(gc.len(), 2);
    for (a, b) in gg.iter().zip(&gc) {
        assert_eq!(a.device(), GPU);
        close(&a.cpu().unwrap(), b, 1e-4);
    }
}

#[allow(dead_code)]
#[path = "../../../gradtape-examples/examples/digits.rs"]
mod digits;

/// The digits example, one epoch on the emulated GPU: the data, the model,
/// Adam's slots and the checkpoint's reload all live there, and every op of
/// the CNN's step finds a GPU path; the losses are the CPU run's.
#[test]
fn the_digits_example_trains_on_a_gpu_as_on_the_cpu() -> gradtape::Result<()> {
    emulate();
    let run = |device| {
        let out_dir = std::env::temp_dir().join(format!("gradtape-digits-dev-{}-{device}", std::process::id()));
        let cfg = digits::Config {
            epochs: 1,
            verbose: false,
            out_dir: out_dir.clone(),
            device,
            ..digits::Config::default()
        };
        let out = digits::train(&cfg);
        let _ = std::fs::remove_dir_all(out_dir);
        out
    };
    let (cpu, gpu) = (run(Device::Cpu)?, run(GPU)?);
    assert_eq!(gpu.losses.len(), 1);
    assert!(
        (gpu.losses[0] - cpu.losses[0]).abs() <= 1e-5 * cpu.losses[0],
        "{:?} vs {:?}",
        gpu.losses,
        cpu.losses
    );
    assert_eq!(gpu.test_accuracy, cpu.test_accuracy);
    assert_eq!(gpu.reloaded_test_accuracy, gpu.test_accuracy);
    Ok(())
}

/// A transformer block's step (attention, layer norm, dropout, GELU) finds
/// a GPU path for every op, forward and backward, and gives the CPU's
/// numbers.
#[test]
fn a_transformer_block_runs_on_a_gpu_as_on_the_cpu() -> gradtape::Result<()> {
    emulate();
    let w = ops_table::transformer_block_difference(GPU)?;
    // (the emulated GPU runs the CPU's kernels on host copies)
    assert!(w <= 1e-5, "off by {w:.2e}");
    Ok(())
}

/// The half types find a GPU path for every op of the table but
/// [`ops_table::NO_HALF_KERNEL`]'s, values and gradients.
#[test]
fn half_ops_run_on_a_gpu_as_on_the_cpu() {
    emulate();
    let failures = ops_table::run_halves(GPU);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Mixed precision with loss scaling trains on a GPU as on the CPU.
#[test]
fn mixed_precision_with_loss_scaling_trains_on_a_gpu() -> gradtape::Result<()> {
    emulate();
    let (cpu, gpu) = (
        ops_table::mixed_precision_losses(Device::Cpu, 20)?,
        ops_table::mixed_precision_losses(GPU, 20)?,
    );
    assert_eq!(gpu, cpu);
    assert!(gpu[19] < 0.7 * gpu[0], "{gpu:?}");
    Ok(())
}

#[test]
fn a_traced_step_with_dropout_moves_its_mask_to_the_gpu_at_each_run() -> gradtape::Result<()> {
    use gradtape::nn::Layer;
    emulate();
    // the dropout mask is drawn on the host at each run (a fresh draw) and
    // moved to the input's GPU by a node of the graph; its gradient is the
    // same mask
    let layer = gradtape::nn::Dropout::new(0.5, &mut gradtape::Rng::new(3))?;
    let f = gradtape::function(move |x: &Tensor| -> gradtape::Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        tape.watch(x);
        let (y, total) = tape.record(|| {
            let y = layer.forward(x, true)?;
            let total = y.sum_all()?;
            Ok((y, total))
        })?;
        let g = tape.gradient(&total, x)?.expect("x is watched");
        Ok(vec![y, g])
    });
    let x = Tensor::ones(&[256], DType::F32).to(GPU)?;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let out = f.call(&x)?;
        assert!(out.iter().all(|t| t.device() == GPU));
        let (y, g) = (out[0].to_vec::<f32>()?, out[1].to_vec::<f32>()?);
        assert!(y.iter().all(|&v| v == 0.0 || v == 2.0), "{y:?}");
        assert_eq!(y, g, "the gradient of sum(dropout(x)) is the mask");
        let kept = y.iter().filter(|&&v| v == 2.0).count();
        assert!((64..192).contains(&kept), "{kept} of 256 kept");
        seen.push(y);
    }
    assert!(seen.windows(2).all(|w| w[0] != w[1]), "each run draws afresh");
    Ok(())
}

/// `argmax`/`argmin` of tensors on the (emulated) GPU stay there and give
/// the CPU's indices, for every dtype with a GPU kernel and through a
/// transposed view; an accuracy computed there (`tests/gpu` runs the
/// CUDA kernel on rows longer than a block).
#[test]
fn argmax_and_argmin_stay_on_the_gpu() {
    emulate();
    let vals: Vec<f64> = (0..60)
        .map(|i| {
            if i % 13 == 0 {
                f64::NAN
            } else {
                ((i * 7) % 5) as f64 - 2.0
            }
        })
        .collect();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64] {
        let x = Tensor::from_vec(
            vals.iter()
                .map(|&v| if v.is_nan() { 9.0 } else { v })
                .collect::<Vec<_>>(),
            &[6, 10],
        )
        .unwrap();
        let x = if dtype.is_float() {
            t(&vals, &[6, 10]).cast(dtype).unwrap()
        } else {
            x.cast(dtype).unwrap()
        };
        let g = x.to(GPU).unwrap();
        for (c, d) in [(x.clone(), g.clone()), (x.transpose().unwrap(), g.transpose().unwrap())] {
            for axis in [0isize, 1] {
                let (a, b) = (c.argmax(axis).unwrap(), d.argmax(axis).unwrap());
                assert_eq!(b.device(), GPU);
                assert_eq!(a.to_vec::<i64>().unwrap(), b.to_vec::<i64>().unwrap(), "{dtype:?}");
                let (a, b) = (c.argmin(axis).unwrap(), d.argmin(axis).unwrap());
                assert_eq!(a.to_vec::<i64>().unwrap(), b.to_vec::<i64>().unwrap(), "{dtype:?}");
            }
        }
    }
    let logits = t(&[0.1, 0.9, 0.5, 0.2, 0.7, 0.7], &[3, 2]).to(GPU).unwrap();
    let labels = Tensor::vector(&[1i64, 0, 1]).to(GPU).unwrap();
    let acc = logits
        .argmax(1)
        .unwrap()
        .eq(&labels)
        .unwrap()
        .cast(DType::F32)
        .unwrap()
        .mean_all()
        .unwrap();
    assert_eq!(acc.device(), GPU);
    assert!((acc.item().unwrap() - 2.0 / 3.0).abs() < 1e-6);
}
