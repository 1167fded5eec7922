//! Devices, on an emulated GPU: everything above the GPU kernels (device
//! placement, the mixed-device errors, moving tensors, the tape, forward
//! mode, Jacobians, variables and optimizers on a GPU) checked on machines
//! without one. `gradtape::emulate_cuda_on_host()` makes `Device::Cuda(0)`
//! host memory behind the GPU's dispatch, so an op runs where a GPU would
//! run it or fails as it would there (a binary of its own: emulation is
//! process-wide). The CUDA kernels themselves are checked by `tests/gpu`
//! on a machine with a GPU.

mod hosted_ops;
mod models;
mod ops_table;

use gradtape::{DType, Device, Error, GradientTape, Tensor, Variable};

const GPU: Device = Device::Cuda(0);

fn emulate() {
    gradtape::emulate_cuda_on_host();
}

fn t(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.iter().map(|&x| x as f32).collect(), shape).unwrap()
}

/// Deterministic values in (-1, 1).
fn vals(n: usize, seed: u64) -> Vec<f64> {
    (0..n)
        .map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f64 / 500.0) - 1.0)
        .collect()
}

fn close(a: &Tensor, b: &Tensor, tol: f64) {
    assert_eq!(a.shape(), b.shape());
    let (x, y) = (a.to_vec_f64(), b.to_vec_f64());
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        assert!((p - q).abs() <= tol * (1.0 + q.abs()), "element {i}: {p} vs {q}");
    }
}

#[test]
fn tensors_move_between_devices_and_print_their_device() {
    emulate();
    let x = t(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    assert_eq!(x.device(), Device::Cpu);
    let g = x.to(GPU).unwrap();
    assert_eq!(g.device(), GPU);
    assert_eq!((g.shape(), g.dtype()), (x.shape(), x.dtype()));
    assert_eq!(g.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(g.to(GPU).unwrap().id(), g.id(), "already there: the same tensor");
    let back = g.cpu().unwrap();
    assert_eq!(back.device(), Device::Cpu);
    assert_eq!(back.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    assert!(g.to_string().ends_with("dtype=f32, device=cuda:0)"), "{g}");
    assert_eq!(
        g.transpose().unwrap().to_vec::<f32>().unwrap(),
        vec![1.0, 3.0, 2.0, 4.0]
    );
    let s = Tensor::scalar(2.5f64).to(GPU).unwrap();
    assert_eq!(s.item().unwrap(), 2.5);
    assert_eq!(s.to_scalar::<f64>().unwrap(), 2.5);
    for d in [DType::I32, DType::I64, DType::Bool, DType::F64] {
        let y = x.cast(d).unwrap().to(GPU).unwrap();
        assert_eq!(y.dtype(), d);
        assert_eq!(y.to_vec_f64(), x.cast(d).unwrap().to_vec_f64());
    }
}

#[test]
fn inputs_on_two_devices_are_an_error_naming_the_op_and_both() {
    emulate();
    let a = t(&[1.0, 2.0], &[2]);
    let b = a.to(GPU).unwrap();
    for r in [a.add(&b), b.add(&a), a.matmul(&b.reshape(&[2, 1]).unwrap()), b.lt(&a)] {
        match r {
            Err(Error::DeviceMismatch { lhs, rhs, .. }) => assert_ne!(lhs, rhs),
            other => panic!("expected a device mismatch, got {other:?}"),
        }
    }
    let e = a.mul(&b).unwrap_err().to_string();
    assert!(e.contains("mul") && e.contains("cpu") && e.contains("cuda:0"), "{e}");
    let w = Tensor::where_(&b.gt(&b).unwrap(), &a, &a).unwrap_err();
    assert!(matches!(w, Error::DeviceMismatch { op: "where", .. }), "{w:?}");
    // attention: a key, or the mask, on another device than the query
    let q = t(&vals(24, 1), &[2, 3, 4]);
    let qg = q.to(GPU).unwrap();
    let m = Tensor::zeros(&[3, 3], DType::F32);
    for r in [
        qg.scaled_dot_product_attention(&q, &qg, None, false, None),
        qg.scaled_dot_product_attention(&qg, &qg, Some(&m), true, None),
        q.scaled_dot_product_attention(&q, &q, Some(&m.to(GPU).unwrap()), false, None),
    ] {
        let e = r.unwrap_err();
        assert!(
            matches!(
                e,
                Error::DeviceMismatch {
                    op: "scaled_dot_product_attention",
                    ..
                }
            ),
            "{e:?}"
        );
    }
}

/// Ops with no GPU kernel (the matrix decompositions and solves, CTC, the
/// special functions) run on the CPU for GPU inputs under soft device
/// placement, on by default as in TensorFlow: values and tape gradients
/// come back on the GPU and equal the CPU's. Turned off, such an op is an
/// error naming it and the device, not a panic. (The one test of this
/// binary that turns it off, and the only one that runs these ops.)
#[test]
fn ops_without_a_gpu_kernel_run_on_the_cpu_under_soft_placement() {
    emulate();
    let spd = Tensor::from_vec(vec![4.0f32, 1.0, 1.0, 3.0], &[2, 2])
        .unwrap()
        .to(GPU)
        .unwrap();
    gradtape::set_soft_device_placement(false);
    let e = spd.cholesky().unwrap_err();
    gradtape::set_soft_device_placement(true);
    match &e {
        Error::Device { device, msg, op } => {
            assert_eq!((*device, *op), (GPU, "cholesky"));
            assert!(msg.contains("no kernel"), "{e}");
        }
        other => panic!("expected a device error, got {other:?}"),
    }
    let l = spd.cholesky().unwrap();
    assert_eq!(l.device(), GPU);
    assert_eq!(l.to_vec::<f32>().unwrap()[0], 2.0);
    // inputs on two devices stay an error
    let b = Tensor::ones(&[2, 1], DType::F32);
    assert!(matches!(spd.solve(&b), Err(Error::DeviceMismatch { .. })));
    let failures = ops_table::run_hosted(GPU);
    assert!(
        failures.is_empty(),
        "{} cases did not agree:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The depthwise convolution and its two gradients on the (emulated) GPU
/// give the CPU's values and stay there, with a multiplier, strides,
/// dilations and both paddings, through a tape.
#[test]
fn depthwise_convolution_on_the_gpu_is_the_cpus() {
    emulate();
    let x = t(&vals(2 * 7 * 6 * 3, 1), &[2, 7, 6, 3]);
    let f = t(&vals(3 * 2 * 3 * 2, 2), &[3, 2, 3, 2]);
    for (s, d, p) in [
        ([1i64, 1], [1i64, 1], gradtape::Padding::Same),
        ([2, 1], [1, 2], gradtape::Padding::Valid),
    ] {
        let run = |x: &Tensor, f: &Tensor| {
            let tape = GradientTape::new();
            let y = tape
                .record(|| {
                    tape.watch(x);
                    tape.watch(f);
                    x.depthwise_conv2d(f, s, p, d)?.square()?.sum_all()
                })
                .unwrap();
            let [dx, df] = tape.gradient(&y, &[x, f]).unwrap();
            (x.depthwise_conv2d(f, s, p, d).unwrap(), dx.unwrap(), df.unwrap())
        };
        let (cy, cdx, cdf) = run(&x, &f);
        let (gy, gdx, gdf) = run(&x.to(GPU).unwrap(), &f.to(GPU).unwrap());
        for (c, g) in [(&cy, &gy), (&cdx, &gdx), (&cdf, &gdf)] {
            assert_eq!(g.device(), GPU);
            close(g, c, 1e-12);
        }
    }
}

/// Integer sums, differences, products, maxima and minima of tensors on
/// the (emulated) GPU stay there and give the CPU's values, wrapping at
/// the ends of the range, broadcasting; an integer on the CPU beside one
/// on the GPU is the usual device mismatch.
#[test]
fn integer_arithmetic_on_the_gpu_is_the_cpus() {
    emulate();
    let a64 = Tensor::from_vec(vec![i64::MAX, i64::MIN, -7, 5, 0, 3], &[2, 3]).unwrap();
    let b64 = Tensor::vector(&[1i64, -1, 4]);
    let a32 = Tensor::from_vec(vec![i32::MAX, i32::MIN, -7, 5, 0, 3], &[2, 3]).unwrap();
    let b32 = Tensor::vector(&[1i32, -1, 4]);
    type F = fn(&Tensor, &Tensor) -> gradtape::Result<Tensor>;
    let ops: [(&str, F); 5] = [
        ("add", |a, b| a.add(b)),
        ("sub", |a, b| a.sub(b)),
        ("mul", |a, b| a.mul(b)),
        ("maximum", |a, b| a.maximum(b)),
        ("minimum", |a, b| a.minimum(b)),
    ];
    for (a, b) in [(&a64, &b64), (&a32, &b32)] {
        let (ga, gb) = (a.to(GPU).unwrap(), b.to(GPU).unwrap());
        for (name, f) in ops {
            let (c, g) = (f(a, b).unwrap(), f(&ga, &gb).unwrap_or_else(|e| panic!("{name}: {e}")));
            assert_eq!(g.device(), GPU, "{name}");
            assert_eq!(g.dtype(), a.dtype(), "{name}");
            assert_eq!(
                g.cast(DType::I64).unwrap().to_vec::<i64>().unwrap(),
                c.cast(DType::I64).unwrap().to_vec::<i64>().unwrap(),
                "{name}"
            );
        }
        assert!(matches!(ga.add(b), Err(Error::DeviceMismatch { .. })));
        // one-input ops, and with a scalar
        type G = fn(&Tensor) -> gradtape::Result<Tensor>;
        let unary: [(&str, G); 11] = [
            ("neg", |a| a.neg()),
            ("abs", |a| a.abs()),
            ("square", |a| a.square()),
            ("sign", |a| a.sign()),
            ("relu", |a| a.relu()),
            ("add_scalar", |a| a.add_scalar(-3.0)),
            ("mul_scalar", |a| a.mul_scalar(-3.0)),
            ("cumsum", |a| a.cumsum(1, false, false)),
            ("cumprod", |a| a.cumprod(0, true, true)),
            ("prod", |a| a.prod(&[1], false)),
            ("sum", |a| a.sum(&[0], false)),
        ];
        for (name, f) in unary {
            let (c, g) = (f(a).unwrap(), f(&ga).unwrap_or_else(|e| panic!("{name}: {e}")));
            assert_eq!(g.device(), GPU, "{name}");
            let as64 = |t: &Tensor| t.cast(DType::I64).unwrap().to_vec::<i64>().unwrap();
            assert_eq!(as64(&g), as64(&c), "{name}");
        }
        // division truncates toward zero, MIN / -1 wraps, a zero divisor
        // is the CPU's error
        let (c, g) = (a.div_scalar(-1.0).unwrap(), ga.div_scalar(-1.0).unwrap());
        assert_eq!(g.device(), GPU);
        assert_eq!(
            g.cast(DType::I64).unwrap().to_vec::<i64>().unwrap(),
            c.cast(DType::I64).unwrap().to_vec::<i64>().unwrap()
        );
        let (c, g) = (a.div(b).unwrap(), ga.div(&gb).unwrap());
        assert_eq!(g.device(), GPU);
        assert_eq!(
            g.cast(DType::I64).unwrap().to_vec::<i64>().unwrap(),
            c.cast(DType::I64).unwrap().to_vec::<i64>().unwrap()
        );
        let z = b.sub(b).unwrap().to(GPU).unwrap();
        let e = ga.div(&z).unwrap_err().to_string();
        assert!(e.contains("division by zero"), "{e}");
        assert!(ga.div_scalar(0.0).unwrap_err().to_string().contains("division by zero"));
    }
}

#[test]
fn ops_on_the_gpu_give_the_cpus_values_and_stay_there() {
    emulate();
    let a = t(&vals(12, 1), &[3, 4]);
    let b = t(&vals(4, 2), &[4]);
    let m = t(&vals(20, 3), &[4, 5]);
    let (ga, gb, gm) = (a.to(GPU).unwrap(), b.to(GPU).unwrap(), m.to(GPU).unwrap());
    type F = fn(&Tensor, &Tensor, &Tensor) -> gradtape::Result<Tensor>;
    let cases: Vec<(&str, F)> = vec![
        ("add", |a, b, _| a.add(b)),
        ("mul", |a, b, _| a.mul(b)),
        ("div", |a, b, _| a.div(&b.add_scalar(3.0)?)),
        ("exp", |a, _, _| a.exp()),
        ("tanh", |a, _, _| a.tanh()),
        ("relu", |a, _, _| a.relu()),
        ("mul_scalar", |a, _, _| a.mul_scalar(-1.5)),
        ("sum", |a, _, _| a.sum(&[0], false)),
        ("sum_keep", |a, _, _| a.sum(&[1], true)),
        ("mean", |a, _, _| a.mean_all()),
        ("max", |a, _, _| a.max(&[1], false)),
        ("matmul", |a, _, m| a.matmul(m)),
        ("matmul_t", |a, _, _| a.matmul_with(a, false, true)),
        ("softmax", |a, _, _| a.softmax(-1)),
        ("softmax0", |a, _, _| a.softmax(0)),
        ("log_softmax", |a, _, _| a.log_softmax(-1)),
        ("transpose_reshape", |a, _, _| a.transpose()?.reshape(&[12])),
        ("where", |a, b, _| {
            Tensor::where_(&a.gt(&a.zeros_like())?, a, &b.broadcast_to(&[3, 4])?)
        }),
        ("cast", |a, _, _| a.cast(DType::F64)),
        ("argmax", |a, _, _| a.argmax(1)),
        ("argmin", |a, _, _| a.argmin(0)),
    ];
    for (name, f) in cases {
        let cpu = f(&a, &b, &m).unwrap();
        let gpu = f(&ga, &gb, &gm).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(gpu.device(), GPU, "{name}");
        close(&gpu, &cpu, 1e-6);
    }
    let labels = Tensor::vector(&[0i64, 3, 1]);
    let cpu = Tensor::sparse_softmax_cross_entropy_with_logits(&labels, &a).unwrap();
    let gpu = Tensor::sparse_softmax_cross_entropy_with_logits(&labels.to(GPU).unwrap(), &ga).unwrap();
    assert_eq!(gpu.device(), GPU);
    close(&gpu, &cpu, 1e-6);
    let bad = Tensor::vector(&[0i64, 9, 1]).to(GPU).unwrap();
    assert!(Tensor::sparse_softmax_cross_entropy_with_logits(&bad, &ga).is_err());
}

/// The small MLP's weights: `[W1 6x5, b1, W2 5x4, b2]`.
fn mlp_init() -> [Tensor; 4] {
    [
        t(&vals(6 * 5, 5), &[6, 5]),
        t(&vals(5, 6), &[5]),
        t(&vals(5 * 4, 7), &[5, 4]),
        t(&vals(4, 8), &[4]),
    ]
}

/// The small MLP's batch of 8 inputs and their labels.
fn mlp_x() -> Tensor {
    t(&vals(8 * 6, 4), &[8, 6])
}

fn mlp_labels() -> Tensor {
    Tensor::vector(&[0i64, 1, 2, 3, 0, 1, 2, 3])
}

/// The MLP of the `mlp_step` workload, smaller: logits = relu(x W1 + b1) W2 + b2,
/// mean sparse softmax cross-entropy.
fn mlp_loss(x: &Tensor, labels: &Tensor, w: &[Tensor]) -> gradtape::Result<Tensor> {
    let h = x.matmul(&w[0])?.add(&w[1])?.relu()?;
    let logits = h.matmul(&w[2])?.add(&w[3])?;
    Tensor::sparse_softmax_cross_entropy_with_logits(labels, &logits)?.mean_all()
}

#[test]
fn the_tape_differentiates_on_the_gpu_as_on_the_cpu() {
    emulate();
    let x = t(&vals(8 * 6, 4), &[8, 6]);
    let labels = Tensor::vector(&[0i64, 1, 2, 3, 0, 1, 2, 3]);
    let w = vec![
        t(&vals(6 * 5, 5), &[6, 5]),
        t(&vals(5, 6), &[5]),
        t(&vals(5 * 4, 7), &[5, 4]),
        t(&vals(4, 8), &[4]),
    ];
    let grads = |x: &Tensor, labels: &Tensor, w: &[Tensor]| {
        let tape = GradientTape::new();
        let loss = tape
            .record(|| {
                for v in w {
                    tape.watch(v);
                }
                mlp_loss(x, labels, w)
            })
            .unwrap();
        let g = tape.gradient(&loss, w).unwrap();
        (loss, g)
    };
    let (loss, g) = grads(&x, &labels, &w);
    let gw: Vec<Tensor> = w.iter().map(|v| v.to(GPU).unwrap()).collect();
    let (gloss, gg) = grads(&x.to(GPU).unwrap(), &labels.to(GPU).unwrap(), &gw);
    assert_eq!(gloss.device(), GPU);
    close(&gloss, &loss, 1e-6);
    for (c, d) in g.iter().zip(&gg) {
        let (c, d) = (c.as_ref().unwrap(), d.as_ref().unwrap());
        assert_eq!(d.device(), GPU, "gradients live where their sources do");
        close(d, c, 1e-5);
    }
}

#[test]
fn moving_is_differentiable_and_gradients_come_back_to_the_source_device() {
    emulate();
    let x = t(&[1.0, -2.0, 3.0], &[3]);
    let tape = GradientTape::persistent();
    let y = tape
        .record(|| {
            tape.watch(&x);
            x.to(GPU)?.square()?.sum_all()
        })
        .unwrap();
    assert_eq!(y.device(), GPU);
    let g = tape.gradient(&y, &x).unwrap().unwrap();
    assert_eq!(g.device(), Device::Cpu);
    assert_eq!(g.to_vec::<f32>().unwrap(), vec![2.0, -4.0, 6.0]);
}

#[test]
fn second_order_forward_mode_and_jacobians_on_the_gpu() {
    emulate();
    let x = t(&[0.5, -1.0], &[2]).to(GPU).unwrap();
    // d²/dx² of sum(x³) = 6x, by nested tapes
    let outer = GradientTape::new();
    let g2 = outer
        .record(|| {
            outer.watch(&x);
            let inner = GradientTape::new();
            let y = inner.record(|| {
                inner.watch(&x);
                x.mul(&x)?.mul(&x)?.sum_all()
            })?;
            inner.gradient(&y, &x).map(|g| g.unwrap())
        })
        .unwrap();
    let h = outer.gradient(&g2, &x).unwrap().unwrap();
    assert_eq!(h.device(), GPU);
    close(&h, &t(&[3.0, -6.0], &[2]), 1e-6);
    // forward mode: d tanh(x) · v
    let v = t(&[1.0, 2.0], &[2]).to(GPU).unwrap();
    let (y, dy) = gradtape::jvp(|p| p[0].tanh(), std::slice::from_ref(&x), std::slice::from_ref(&v)).unwrap();
    assert_eq!((y.device(), dy.device()), (GPU, GPU));
    let xc = x.cpu().unwrap();
    let want = xc
        .tanh()
        .unwrap()
        .square()
        .unwrap()
        .neg()
        .unwrap()
        .add_scalar(1.0)
        .unwrap()
        .mul(&v.cpu().unwrap())
        .unwrap();
    close(&dy, &want, 1e-6);
    // a Jacobian of tanh(W x)
    let w = t(&vals(6, 9), &[3, 2]).to(GPU).unwrap();
    let tape = GradientTape::persistent();
    let y = tape
        .record(|| {
            tape.watch(&x);
            w.matmul(&x.reshape(&[2, 1])?)?.reshape(&[3])?.tanh()
        })
        .unwrap();
    let j = tape.jacobian(&y, &x).unwrap().unwrap();
    assert_eq!(j.shape(), &[3, 2]);
    let (wc, yc) = (w.cpu().unwrap(), y.cpu().unwrap());
    let d = yc
        .square()
        .unwrap()
        .neg()
        .unwrap()
        .add_scalar(1.0)
        .unwrap()
        .reshape(&[3, 1])
        .unwrap();
    close(&j.cpu().unwrap(), &wc.mul(&d).unwrap(), 1e-5);
}

#[test]
fn variables_and_sgd_train_on_the_gpu() {
    emulate();
    let (x, labels, init) = (mlp_x(), mlp_labels(), mlp_init());
    let train = |device: Device| {
        let vars: Vec<Variable> = init.iter().map(|w| Variable::new(w.to(device).unwrap())).collect();
        let (x, labels) = (x.to(device).unwrap(), labels.to(device).unwrap());
        let mut losses = vec![];
        for _ in 0..5 {
            let tape = GradientTape::new();
            let loss = tape
                .record(|| {
                    let w: Vec<Tensor> = vars.iter().map(|v| v.read()).collect();
                    mlp_loss(&x, &labels, &w)
                })
                .unwrap();
            let g = tape.gradient(&loss, &vars).unwrap();
            for (v, g) in vars.iter().zip(g) {
                v.apply_gradient_descent(0.5, &g.unwrap()).unwrap();
            }
            losses.push(loss.item().unwrap());
        }
        assert!(vars.iter().all(|v| v.read().device() == device));
        losses
    };
    let (cpu, gpu) = (train(Device::Cpu), train(GPU));
    assert!(cpu[4] < cpu[0], "the loss falls: {cpu:?}");
    for (a, b) in cpu.iter().zip(&gpu) {
        assert!((a - b).abs() < 1e-5, "{cpu:?} vs {gpu:?}");
    }
}

#[test]
fn parsing_devices() {
    assert_eq!("cpu".parse::<Device>().unwrap(), Device::Cpu);
    assert_eq!("cuda".parse::<Device>().unwrap(), Device::Cuda(0));
    assert_eq!("cuda:3".parse::<Device>().unwrap(), Device::Cuda(3));
    assert!("tpu".parse::<Device>().is_err());
    assert!("cuda:x".parse::<Device>().is_err());
}

#[test]
fn every_op_of_the_table_reaches_its_gpu_kernel_with_its_gradient() {
    emulate();
    let failures = ops_table::run_all(GPU);
    assert!(
        failures.is_empty(),
        "{} cases did not agree:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn a_traced_training_step_runs_on_the_gpu_as_eagerly() {
    emulate();
    let (x, labels, init) = (mlp_x(), mlp_labels(), mlp_init());
    let run = |device: Device| -> Vec<f64> {
        let vars: Vec<Variable> = init.iter().map(|w| Variable::new(w.to(device).unwrap())).collect();
        let step = move |(x, labels): &(Tensor, Tensor)| -> gradtape::Result<Vec<Tensor>> {
            let tape = GradientTape::new();
            let loss = tape.record(|| {
                let w: Vec<Tensor> = vars.iter().map(|v| v.read()).collect();
                mlp_loss(x, labels, &w)
            })?;
            let g = tape.gradient(&loss, &vars)?;
            for (v, g) in vars.iter().zip(g) {
                v.apply_gradient_descent(0.5, &g.expect("connected"))?;
            }
            Ok(vec![loss])
        };
        let args = (x.to(device).unwrap(), labels.to(device).unwrap());
        let f = gradtape::function(step);
        let losses = (0..4)
            .map(|_| {
                let out = f.call(&args).unwrap();
                assert_eq!(out[0].device(), device);
                out[0].item().unwrap()
            })
            .collect();
        assert_eq!(f.trace_count(), 1);
        // on the GPU, the graph compiled for it ran, with fused kernels
        let c = f.concrete(&args).unwrap();
        match device {
            Device::Cpu => assert!(c.gpu_compile_stats().is_none()),
            _ => {
                let s = c.gpu_compile_stats().expect("compiled for the GPU");
                assert!(s.cuda_kernels > 0 && s.cuda_kernels == s.kernels, "{s:?}");
                assert!(s.count("pair_products").is_none(), "{s:?}");
            }
        }
        losses
    };
    let (cpu, gpu) = (run(Device::Cpu), run(GPU));
    assert!(cpu[3] < cpu[0], "{cpu:?}");
    for (a, b) in cpu.iter().zip(&gpu) {
        assert!((a - b).abs() < 1e-5, "traced on the CPU {cpu:?} vs on the GPU {gpu:?}");
    }
}

/// Three steps of the small MLP with the optimizer `make` gives, on the
/// CPU and on the GPU: the losses and the first weight agree.
fn optimizer_agrees<O: gradtape::optim::Optimizer>(name: &str, make: impl Fn() -> O) {
    let (x, labels, init) = (mlp_x(), mlp_labels(), mlp_init());
    let train = |device: Device| -> Vec<f64> {
        let vars: Vec<Variable> = init.iter().map(|w| Variable::new(w.to(device).unwrap())).collect();
        let (x, labels) = (x.to(device).unwrap(), labels.to(device).unwrap());
        let mut opt = make();
        let mut out = vec![];
        for _ in 0..3 {
            let tape = GradientTape::new();
            let loss = tape
                .record(|| {
                    let w: Vec<Tensor> = vars.iter().map(|v| v.read()).collect();
                    mlp_loss(&x, &labels, &w)
                })
                .unwrap();
            let g = tape.gradient(&loss, &vars).unwrap();
            opt.apply_gradients(g.into_iter().zip(vars.iter())).unwrap();
            out.push(loss.item().unwrap());
        }
        assert!(vars.iter().all(|v| v.read().device() == device), "{name}");
        out.extend(vars[0].read().to_vec_f64());
        out
    };
    let (cpu, gpu) = (train(Device::Cpu), train(GPU));
    assert!(cpu[2] != cpu[0], "{name}: the loss moves");
    for (a, b) in cpu.iter().zip(&gpu) {
        assert!((a - b).abs() < 1e-5, "{name}: {a} vs {b}");
    }
}

#[test]
fn every_optimizer_trains_on_the_gpu_as_on_the_cpu() {
    use gradtape::optim::{Adagrad, Adam, AdamW, RmsProp, Sgd};
    emulate();
    optimizer_agrees("sgd", || Sgd::new(0.1));
    optimizer_agrees("momentum", || Sgd::new(0.1).momentum(0.9).unwrap());
    optimizer_agrees("nesterov", || Sgd::new(0.1).momentum(0.9).unwrap().nesterov(true));
    optimizer_agrees("adam", || Adam::new(0.01));
    optimizer_agrees("amsgrad", || Adam::new(0.01).amsgrad(true));
    optimizer_agrees("adamw", || AdamW::new(0.01));
    optimizer_agrees("rmsprop", || RmsProp::new(0.01));
    optimizer_agrees("rmsprop_centered", || RmsProp::new(0.01).centered(true));
    optimizer_agrees("rmsprop_momentum", || RmsProp::new(0.01).momentum(0.5).unwrap());
    optimizer_agrees("adagrad", || Adagrad::new(0.1));
}

#[test]
fn layers_move_to_the_gpu_train_and_checkpoint() {
    use gradtape::nn::{Activation, Dense, Layer, Module, Sequential};
    use gradtape::optim::{Adam, Optimizer};
    emulate();
    let model = |_: ()| {
        Sequential::new()
            .add(
                Dense::from_weights(
                    "d0",
                    t(&vals(6 * 5, 5), &[6, 5]),
                    Some(t(&vals(5, 6), &[5])),
                    Activation::Relu,
                )
                .unwrap(),
            )
            .add(Dense::from_weights("d1", t(&vals(5 * 4, 7), &[5, 4]), None, Activation::Linear).unwrap())
    };
    let x = t(&vals(8 * 6, 4), &[8, 6]);
    let labels = Tensor::vector(&[0i64, 1, 2, 3, 0, 1, 2, 3]);
    let train = |device: Device| -> (Vec<f64>, Sequential) {
        let m = model(());
        m.move_to(device).unwrap();
        assert!(m.variables().iter().all(|v| v.device() == device));
        let (x, labels) = (x.to(device).unwrap(), labels.to(device).unwrap());
        let mut opt = Adam::new(0.05);
        let losses = (0..4)
            .map(|_| {
                let vars = m.trainable_variables();
                let tape = GradientTape::new();
                let loss = tape
                    .record(|| Tensor::sparse_softmax_cross_entropy_with_logits(&labels, &m.call(&x)?)?.mean_all())
                    .unwrap();
                let g = tape.gradient(&loss, &vars).unwrap();
                opt.apply_gradients(g.into_iter().zip(vars.iter())).unwrap();
                loss.item().unwrap()
            })
            .collect();
        (losses, m)
    };
    let ((cpu, _), (gpu, m)) = (train(Device::Cpu), train(GPU));
    assert!(cpu[3] < cpu[0], "{cpu:?}");
    for (a, b) in cpu.iter().zip(&gpu) {
        assert!((a - b).abs() < 1e-5, "{cpu:?} vs {gpu:?}");
    }
    // a checkpoint of GPU variables is written from host copies, and loads
    // back into variables on the GPU, which stay there
    let bytes = gradtape::io::safetensors_to_bytes(&m.variables()).unwrap();
    let fresh = model(());
    fresh.move_to(GPU).unwrap();
    gradtape::io::safetensors_from_bytes(&bytes, &fresh.variables()).unwrap();
    for (a, b) in m.variables().iter().zip(fresh.variables()) {
        assert_eq!(b.device(), GPU);
        assert_eq!(a.read().to_vec_f64(), b.read().to_vec_f64());
    }
    // creation on a device
    let z = Tensor::zeros_on(&[2, 3], DType::F32, GPU).unwrap();
    assert_eq!((z.device(), z.to_vec::<f32>().unwrap()), (GPU, vec![0.0; 6]));
    assert_eq!(
        Tensor::full_on(&[2], 1.5, DType::F64, GPU)
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        vec![1.5, 1.5]
    );
}
