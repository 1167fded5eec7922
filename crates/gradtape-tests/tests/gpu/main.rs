//! The CUDA backend on a real GPU, against the CPU: every op of
//! `device/ops_table.rs` (value and tape gradient, `f32` and `f64`), views
//! and broadcasting, the MLP of `mlp_step` trained for a few steps, and the
//! errors a GPU gives. Skipped, with a printed line, where no GPU is found
//! (CI); `scripts/gpu-check.sh` runs it on a machine with one.

#[path = "../device/ops_table.rs"]
mod ops_table;

use gradtape::{DType, Device, GradientTape, Tensor, Variable};

const GPU: Device = Device::Cuda(0);

/// The tests take turns (one toggles TF32 for the process).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether a GPU is here; prints why not.
fn gpu_here() -> bool {
    match gradtape::cuda_device_count() {
        Ok(n) if n > 0 => true,
        Ok(_) => {
            println!("skipped: the CUDA driver reports no GPU");
            false
        }
        Err(e) => {
            println!("skipped: no GPU ({e})");
            false
        }
    }
}

#[test]
fn without_a_gpu_moving_to_one_is_an_error_not_a_panic() {
    if gradtape::cuda_is_available() {
        return;
    }
    let e = Tensor::scalar(1.0f32).to(GPU).unwrap_err();
    assert!(matches!(e, gradtape::Error::Device { .. }), "{e:?}");
    println!("without a GPU: {e}");
}

#[test]
fn every_op_agrees_with_the_cpu_on_the_gpu() {
    let _serial = serial();
    if !gpu_here() {
        return;
    }
    let failures = ops_table::run_all(GPU);
    assert!(
        failures.is_empty(),
        "{} cases did not agree:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn large_and_strided_tensors_move_and_reduce_as_on_the_cpu() {
    let _serial = serial();
    if !gpu_here() {
        return;
    }
    let n = 1 << 20;
    let x = Tensor::from_vec(
        (0..n).map(|i| ((i % 1000) as f32) / 1000.0 - 0.5).collect(),
        &[1024, 1024],
    )
    .unwrap();
    let g = x.to(GPU).unwrap();
    assert_eq!(g.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    // a transposed view, reduced over each axis; a sliced view copied back
    for axes in [&[0isize][..], &[1], &[0, 1]] {
        let c = x.transpose().unwrap().sum(axes, false).unwrap().to_vec_f64();
        let d = g.transpose().unwrap().sum(axes, false).unwrap().to_vec_f64();
        for (a, b) in c.iter().zip(&d) {
            assert!((a - b).abs() <= 1e-4 * (1.0 + a.abs()), "sum over {axes:?}: {a} vs {b}");
        }
    }
    let m = x.matmul(&x.transpose().unwrap()).unwrap();
    let gm = g.matmul(&g.transpose().unwrap()).unwrap();
    let (m, gm) = (m.to_vec_f64(), gm.to_vec_f64());
    let worst = m
        .iter()
        .zip(&gm)
        .map(|(a, b)| (a - b).abs() / (1.0 + a.abs()))
        .fold(0.0, f64::max);
    assert!(worst < 1e-4, "1024² product off by {worst:.2e}");
    // an empty tensor and a scalar
    let e = Tensor::zeros(&[0, 3], DType::F32).to(GPU).unwrap();
    assert_eq!(e.sum(&[0], false).unwrap().to_vec::<f32>().unwrap(), vec![0.0; 3]);
    assert_eq!(
        Tensor::scalar(3.0f64)
            .to(GPU)
            .unwrap()
            .square()
            .unwrap()
            .item()
            .unwrap(),
        9.0
    );
}

/// `argmax`/`argmin` on the GPU (a block of threads per row, combining
/// pairs) give the CPU's indices: rows longer than a block, with many
/// ties (the first index wins), NaN (skipped), a row of NaN only (0),
/// along each axis of a matrix and of a transposed view, in f32, f64,
/// f16 and i64; and an accuracy computed on the GPU.
#[test]
fn argmax_and_argmin_on_the_gpu_are_the_cpus() {
    let _serial = serial();
    if !gpu_here() {
        return;
    }
    let (rows, cols) = (37, 1500);
    let vals: Vec<f64> = (0..rows * cols)
        .map(|i| match i % 977 {
            0 => f64::NAN,
            _ => ((i * 7919) % 61) as f64 - 30.0,
        })
        .collect();
    let mut vals = vals;
    for v in &mut vals[5 * cols..6 * cols] {
        *v = f64::NAN;
    }
    let x = Tensor::from_vec(vals.clone(), &[rows, cols]).unwrap();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::I64] {
        let xc = if dtype == DType::I64 {
            Tensor::from_vec(
                vals.iter().map(|&v| if v.is_nan() { 7 } else { v as i64 }).collect(),
                &[rows, cols],
            )
            .unwrap()
        } else {
            x.cast(dtype).unwrap()
        };
        let xg = xc.to(GPU).unwrap();
        for (view, viewg) in [
            (xc.clone(), xg.clone()),
            (xc.transpose().unwrap(), xg.transpose().unwrap()),
        ] {
            for axis in [0isize, 1] {
                for largest in [true, false] {
                    let f = |t: &Tensor| if largest { t.argmax(axis) } else { t.argmin(axis) };
                    let (c, g) = (f(&view).unwrap(), f(&viewg).unwrap());
                    assert_eq!(g.device(), GPU);
                    assert_eq!(
                        g.to_vec::<i64>().unwrap(),
                        c.to_vec::<i64>().unwrap(),
                        "{dtype:?} axis {axis} largest={largest}"
                    );
                }
            }
        }
    }
    // accuracy of logits against labels, on the GPU
    let logits = Tensor::from_vec(vec![0.1f32, 0.9, 0.5, 0.2, 0.7, 0.7], &[3, 2])
        .unwrap()
        .to(GPU)
        .unwrap();
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

/// Integer sums, differences, products, maxima and minima on the GPU
/// (`i32`, `i64`, wrapping at the ends of the range, broadcasting), and
/// the one-input ops (negation, abs, square, sign, relu, with a scalar),
/// are the CPU's.
#[test]
fn integer_arithmetic_on_the_gpu_is_the_cpus() {
    let _serial = serial();
    if !gpu_here() {
        return;
    }
    let n = 3000usize;
    let a: Vec<i64> = (0..n as i64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15u64 as i64))
        .collect();
    let b: Vec<i64> = (0..n as i64).map(|i| (i * 7919) % 1000 - 500).collect();
    type F = fn(&Tensor, &Tensor) -> gradtape::Result<Tensor>;
    let ops: [(&str, F); 6] = [
        ("add", |a, b| a.add(b)),
        ("sub", |a, b| a.sub(b)),
        ("mul", |a, b| a.mul(b)),
        ("maximum", |a, b| a.maximum(b)),
        ("minimum", |a, b| a.minimum(b)),
        ("div", |a, b| a.div(b)),
    ];
    for dtype in [DType::I64, DType::I32] {
        let x = Tensor::from_vec(a.clone(), &[n / 3, 3]).unwrap().cast(dtype).unwrap();
        let y = Tensor::from_vec(b[..3].to_vec(), &[3]).unwrap().cast(dtype).unwrap();
        let (gx, gy) = (x.to(GPU).unwrap(), y.to(GPU).unwrap());
        for (name, f) in ops {
            let (c, g) = (f(&x, &y).unwrap(), f(&gx, &gy).unwrap());
            assert_eq!(g.device(), GPU);
            let as64 = |t: &Tensor| t.cast(DType::I64).unwrap().to_vec::<i64>().unwrap();
            assert_eq!(as64(&g), as64(&c), "{dtype:?} {name}");
        }
        type G = fn(&Tensor) -> gradtape::Result<Tensor>;
        let unary: [(&str, G); 13] = [
            ("neg", |a| a.neg()),
            ("abs", |a| a.abs()),
            ("square", |a| a.square()),
            ("sign", |a| a.sign()),
            ("relu", |a| a.relu()),
            ("add_scalar", |a| a.add_scalar(-3.0)),
            ("mul_scalar", |a| a.mul_scalar(-3.0)),
            ("div_scalar", |a| a.div_scalar(-1.0)),
            ("div_scalar_7", |a| a.div_scalar(7.0)),
            ("cumsum", |a| a.cumsum(-1, false, false)),
            ("cumprod", |a| a.cumprod(0, true, true)),
            ("prod", |a| a.prod(&[-1], false)),
            ("sum", |a| a.sum(&[0], false)),
        ];
        for (name, f) in unary {
            let (c, g) = (f(&x).unwrap(), f(&gx).unwrap());
            assert_eq!(g.device(), GPU);
            let as64 = |t: &Tensor| t.cast(DType::I64).unwrap().to_vec::<i64>().unwrap();
            assert_eq!(as64(&g), as64(&c), "{dtype:?} {name}");
        }
    }
}

#[test]
fn the_mlp_trains_on_the_gpu_as_on_the_cpu() {
    let _serial = serial();
    if !gpu_here() {
        return;
    }
    let init = |shape: &[usize], k: f64, scale: f64| {
        let n: usize = shape.iter().product();
        Tensor::from_vec(
            (0..n).map(|i| (scale * (0.37 * i as f64 + k).sin()) as f32).collect(),
            shape,
        )
        .unwrap()
    };
    let x = init(&[128, 784], 0.1, 0.5);
    let labels = Tensor::vector(&(0..128i64).map(|i| i % 10).collect::<Vec<_>>());
    let weights = [
        init(&[784, 512], 1.0, (2.0f64 / 784.0).sqrt()),
        Tensor::zeros(&[512], DType::F32),
        init(&[512, 512], 2.0, (2.0f64 / 512.0).sqrt()),
        Tensor::zeros(&[512], DType::F32),
        init(&[512, 10], 3.0, (2.0f64 / 512.0).sqrt()),
        Tensor::zeros(&[10], DType::F32),
    ];
    let train = |device: Device| -> Vec<(f64, f64)> {
        let vars: Vec<Variable> = weights.iter().map(|w| Variable::new(w.to(device).unwrap())).collect();
        let (x, labels) = (x.to(device).unwrap(), labels.to(device).unwrap());
        (0..5)
            .map(|_| {
                let tape = GradientTape::new();
                let loss = tape
                    .record(|| {
                        let p: Vec<Tensor> = vars.iter().map(Variable::read).collect();
                        let h = x.matmul(&p[0])?.bias_add(&p[1])?.relu()?;
                        let h = h.matmul(&p[2])?.bias_add(&p[3])?.relu()?;
                        let logits = h.matmul(&p[4])?.bias_add(&p[5])?;
                        Tensor::sparse_softmax_cross_entropy_with_logits(&labels, &logits)?.mean_all()
                    })
                    .unwrap();
                let grads = tape.gradient(&loss, &vars[..]).unwrap();
                let dw1 = grads[0]
                    .as_ref()
                    .unwrap()
                    .abs()
                    .unwrap()
                    .sum_all()
                    .unwrap()
                    .item()
                    .unwrap();
                for (v, g) in vars.iter().zip(grads) {
                    v.apply_gradient_descent(0.01, &g.unwrap()).unwrap();
                }
                assert!(vars.iter().all(|v| v.read().device() == device));
                (loss.item().unwrap(), dw1)
            })
            .collect()
    };
    let (cpu, gpu) = (train(Device::Cpu), train(GPU));
    println!("mlp_step losses and sum|dW1|, CPU: {cpu:?}\n                             GPU: {gpu:?}");
    // the first step agrees to rounding; later ones drift apart as the
    // rounding of each step's products feeds the next (ReLU kinks amplify
    // it: on an H200 the fifth step's sum|dW1| differed by 5e-4)
    for (i, ((a, b), (c, d))) in cpu.iter().zip(&gpu).enumerate() {
        let tol = if i == 0 { 1e-5 } else { 2e-3 };
        assert!((a - c).abs() <= tol * a.abs().max(1.0), "step {i}: loss {a} vs {c}");
        assert!(
            (b - d).abs() <= 10.0 * tol * b.abs().max(1.0),
            "step {i}: sum|dW1| {b} vs {d}"
        );
    }
}

#[test]
fn a_gpu_gives_clear_errors() {
    let _serial = serial();
    if !gpu_here() {
        return;
    }
    let a = Tensor::vector(&[1.0f32, 2.0]);
    let g = a.to(GPU).unwrap();
    let e = a.add(&g).unwrap_err().to_string();
    assert!(e.contains("cpu") && e.contains("cuda:0"), "{e}");
    let far = Tensor::scalar(1.0f32).to(Device::Cuda(999)).unwrap_err().to_string();
    assert!(far.contains("cuda:999"), "{far}");
    let x = Tensor::ones(&[1, 4, 4, 1], DType::F32).to(GPU).unwrap();
    let k = Tensor::ones(&[2, 2, 1, 1], DType::F32).to(GPU).unwrap();
    // (both 2-D convolutions have GPU kernels, and the 3-D one; the
    // matrix decompositions not yet)
    let y = x.conv2d(&k, [1, 1], gradtape::Padding::Valid, [1, 1]).unwrap();
    assert_eq!((y.device(), y.to_vec::<f32>().unwrap()), (GPU, vec![4.0; 9]));
    let y = x
        .depthwise_conv2d(&k, [1, 1], gradtape::Padding::Valid, [1, 1])
        .unwrap();
    assert_eq!((y.device(), y.to_vec::<f32>().unwrap()), (GPU, vec![4.0; 9]));
    let x3 = Tensor::ones(&[1, 3, 3, 3, 1], DType::F32).to(GPU).unwrap();
    let k3 = Tensor::ones(&[2, 2, 2, 1, 1], DType::F32).to(GPU).unwrap();
    let y3 = x3.conv3d(&k3, [1, 1, 1], gradtape::Padding::Valid, [1, 1, 1]).unwrap();
    assert_eq!((y3.device(), y3.to_vec::<f32>().unwrap()), (GPU, vec![8.0; 8]));
    let spd = Tensor::from_vec(vec![4.0f32, 1.0, 1.0, 3.0], &[2, 2])
        .unwrap()
        .to(GPU)
        .unwrap();
    // the decompositions have no GPU kernel: an error without soft device
    // placement, and on the CPU with it (the default)
    gradtape::set_soft_device_placement(false);
    let c = spd.cholesky().map(|_| ()).unwrap_err().to_string();
    gradtape::set_soft_device_placement(true);
    assert!(c.contains("cuda:0") && c.contains("cholesky"), "{c}");
    let l = spd.cholesky().unwrap();
    assert_eq!(l.device(), GPU);
    assert_eq!(l.to_vec::<f32>().unwrap()[0], 2.0);
}

/// Ops with no GPU kernel (decompositions and solves, CTC, the special
/// functions, and dtypes the GPU's kernels lack: integers and complex
/// numbers in products, value-shaped outputs) run on the CPU for GPU
/// tensors under soft device placement: the CPU's values, on the GPU.
#[test]
fn ops_without_a_gpu_kernel_run_on_the_cpu_for_gpu_tensors() {
    let _serial = serial();
    if !gpu_here() {
        return;
    }
    let failures = ops_table::run_hosted(GPU);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let on = |d: Device| -> Vec<Vec<f64>> {
        let f = Tensor::from_vec(vec![3.0f32, -1.0, 2.0, 2.0, 0.5, -4.0], &[2, 3])
            .unwrap()
            .to(d)
            .unwrap();
        let i = Tensor::from_vec(vec![3i32, -1, 2, 2, 5, -4], &[2, 3])
            .unwrap()
            .to(d)
            .unwrap();
        let p = Tensor::from_vec(vec![2i32, 3, 1, 2, 2, 7], &[2, 3])
            .unwrap()
            .to(d)
            .unwrap();
        let c = f.cast(DType::C64).unwrap();
        let outs = [
            f.boolean_mask(&f.gt(&f.zeros_like()).unwrap()).unwrap(),
            f.reshape(&[6]).unwrap().unique().unwrap().1,
            i.floor_div(&p).unwrap(),
            i.matmul_with(&i, false, true).unwrap(),
            c.matmul_with(&c.exp().unwrap(), false, true).unwrap().imag().unwrap(),
            c.fft().unwrap().abs().unwrap(),
        ];
        outs.iter()
            .map(|t| {
                assert_eq!(t.device(), d);
                t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap()
            })
            .collect()
    };
    assert_eq!(on(GPU), on(Device::Cpu));
}

/// The depthwise convolution and its gradients on the GPU (a multiplier,
/// strides, dilations, both paddings, outputs and filters larger than a
/// block: the filter gradient's tree sum runs) match the CPU's in f32,
/// f64 and f16.
#[test]
fn depthwise_convolution_on_the_gpu_is_the_cpus() {
    let _serial = serial();
    if !gpu_here() {
        return;
    }
    let v = |n: usize, s: usize| -> Vec<f64> {
        (0..n)
            .map(|i| (((i * 7919 + s * 104_729) % 1009) as f64 / 1009.0) - 0.5)
            .collect()
    };
    let x = Tensor::from_vec(v(4 * 30 * 29 * 8, 1), &[4, 30, 29, 8]).unwrap();
    let f = Tensor::from_vec(v(3 * 3 * 8 * 2, 2), &[3, 3, 8, 2]).unwrap();
    for dtype in [DType::F64, DType::F32, DType::F16] {
        let tol = match dtype {
            DType::F64 => 1e-12,
            DType::F32 => 1e-4,
            _ => 2e-2,
        };
        let (xc, fc) = (x.cast(dtype).unwrap(), f.cast(dtype).unwrap());
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
                [x.depthwise_conv2d(f, s, p, d).unwrap(), dx.unwrap(), df.unwrap()].map(|t| t.to_vec_f64())
            };
            let c = run(&xc, &fc);
            let g = run(&xc.to(GPU).unwrap(), &fc.to(GPU).unwrap());
            for (what, (a, b)) in ["value", "dx", "df"].iter().zip(c.iter().zip(&g)) {
                let scale = a.iter().fold(1.0f64, |m, v| m.max(v.abs()));
                let worst = a.iter().zip(b).map(|(p, q)| (p - q).abs()).fold(0.0, f64::max) / scale;
                assert!(worst <= tol, "{dtype:?} {what}: off by {worst:.2e}");
            }
        }
    }
}

#[test]
fn tf32_products_are_opt_in() {
    let _serial = serial();
    if !gpu_here() {
        return;
    }
    let n = 512;
    let a = Tensor::from_vec(
        (0..n * n).map(|i| ((i * 7919 % 1013) as f32) / 1013.0 - 0.5).collect(),
        &[n, n],
    )
    .unwrap();
    let want = a.matmul(&a).unwrap().to_vec_f64();
    let g = a.to(GPU).unwrap();
    let err = |on: bool| {
        gradtape::allow_tf32(on);
        let got = g.matmul(&g).unwrap().to_vec_f64();
        gradtape::allow_tf32(false);
        got.iter()
            .zip(&want)
            .map(|(x, y)| (x - y).abs() / (1.0 + y.abs()))
            .fold(0.0, f64::max)
    };
    let (plain, tf32) = (err(false), err(true));
    println!("512² product vs the CPU: f32 {plain:.2e}, TF32 {tf32:.2e}");
    assert!(
        plain < 1e-5,
        "plain f32 products match the CPU to rounding: {plain:.2e}"
    );
    assert!(tf32 > plain && tf32 < 1e-1, "TF32 rounds its inputs: {tf32:.2e}");
}

#[test]
fn traced_functions_run_their_fused_kernels_as_cuda_kernels() {
    let _serial = serial();
    if !gpu_here() {
        return;
    }
    // (large enough for many blocks: the sums add blocks atomically)
    let (n, k) = (3000, 37);
    let vals = |len: usize, seed: usize| -> Vec<f64> {
        (0..len)
            .map(|i| (((i * 7919 + seed * 104729) % 2001) as f64 / 1000.0) - 1.0)
            .collect()
    };
    for dtype in [DType::F32, DType::F64] {
        let x = Tensor::from_vec(vals(n * k, 1), &[n, k]).unwrap().cast(dtype).unwrap();
        let b = Tensor::from_vec(vals(k, 2), &[k]).unwrap().cast(dtype).unwrap();
        let run = |device: Device| -> Vec<Vec<f64>> {
            let f = gradtape::function(|(x, b): &(Tensor, Tensor)| -> gradtape::Result<Vec<Tensor>> {
                let y = x
                    .bias_add(b)?
                    .tanh()?
                    .mul(x)?
                    .sigmoid()?
                    .add(&x.sin()?.mul_scalar(0.5)?)?;
                let rows = y.sum(&[1], true)?;
                Ok(vec![
                    y.square()?.sum_all()?,
                    y.div(&rows)?.exp()?,
                    y.relu()?.mean_all()?,
                ])
            });
            let args = (x.to(device).unwrap(), b.to(device).unwrap());
            let out = f.call(&args).unwrap();
            if device.is_cuda() {
                let s = f
                    .concrete(&args)
                    .unwrap()
                    .gpu_compile_stats()
                    .expect("compiled for the GPU");
                assert!(s.cuda_kernels >= 2 && s.cuda_kernels == s.kernels, "{s:?}");
            }
            out.iter().map(|t| t.cpu().unwrap().to_vec_f64()).collect()
        };
        let (cpu, gpu) = (run(Device::Cpu), run(GPU));
        let tol = if dtype == DType::F32 { 1e-4 } else { 1e-10 };
        for (o, (c, g)) in cpu.iter().zip(&gpu).enumerate() {
            assert_eq!(c.len(), g.len());
            for (i, (p, q)) in c.iter().zip(g).enumerate() {
                assert!(
                    (p - q).abs() <= tol * (1.0 + p.abs()),
                    "{dtype} output {o} element {i}: cpu {p} gpu {q}"
                );
            }
        }
    }
}

/// The `cnn_step` network of WORKLOADS.md (batch 8): conv 3x3 SAME 1->16 +
/// bias, relu, maxpool 2x2; conv 3x3 SAME 16->32 + bias, relu, maxpool;
/// flatten; dense to 10 + bias; mean sparse softmax cross-entropy; two SGD
/// steps on the GPU against the CPU.
#[test]
fn the_cnn_step_network_trains_on_the_gpu_as_on_the_cpu() {
    use gradtape::Padding;
    if !gpu_here() {
        return;
    }
    let init = |shape: &[usize], k: f64, scale: f64| {
        let n: usize = shape.iter().product();
        Tensor::from_vec(
            (0..n).map(|i| (scale * (0.37 * i as f64 + k).sin()) as f32).collect(),
            shape,
        )
        .unwrap()
    };
    let batch = 8;
    let x = init(&[batch, 28, 28, 1], 0.1, 0.5);
    let labels = Tensor::vector(&(0..batch as i64).map(|i| i % 10).collect::<Vec<_>>());
    let weights = [
        init(&[3, 3, 1, 16], 1.0, (2.0f64 / 9.0).sqrt()),
        init(&[16], 4.0, 0.01),
        init(&[3, 3, 16, 32], 2.0, (2.0f64 / 144.0).sqrt()),
        init(&[32], 5.0, 0.01),
        init(&[1568, 10], 3.0, (2.0f64 / 1568.0).sqrt()),
        init(&[10], 6.0, 0.01),
    ];
    let train = |device: Device| -> Vec<(f64, Vec<Vec<f64>>)> {
        let vars: Vec<Variable> = weights.iter().map(|w| Variable::new(w.to(device).unwrap())).collect();
        let (x, labels) = (x.to(device).unwrap(), labels.to(device).unwrap());
        (0..2)
            .map(|_| {
                let tape = GradientTape::new();
                let loss = tape
                    .record(|| {
                        let p: Vec<Tensor> = vars.iter().map(Variable::read).collect();
                        let h = x.conv2d(&p[0], [1, 1], Padding::Same, [1, 1])?.add(&p[1])?.relu()?;
                        let h = h.max_pool2d([2, 2], [2, 2], Padding::Valid)?;
                        let h = h.conv2d(&p[2], [1, 1], Padding::Same, [1, 1])?.add(&p[3])?.relu()?;
                        let h = h.max_pool2d([2, 2], [2, 2], Padding::Valid)?;
                        let logits = h.reshape(&[batch, 1568])?.matmul(&p[4])?.add(&p[5])?;
                        Tensor::sparse_softmax_cross_entropy_with_logits(&labels, &logits)?.mean_all()
                    })
                    .unwrap();
                let grads = tape.gradient(&loss, &vars[..]).unwrap();
                let gs: Vec<Vec<f64>> = grads.iter().map(|g| g.as_ref().unwrap().to_vec_f64()).collect();
                for (v, g) in vars.iter().zip(grads) {
                    v.apply_gradient_descent(0.01, &g.unwrap()).unwrap();
                }
                assert!(vars.iter().all(|v| v.read().device() == device));
                (loss.item().unwrap(), gs)
            })
            .collect()
    };
    let (cpu, gpu) = (train(Device::Cpu), train(GPU));
    for ((a, ga), (b, gb)) in cpu.iter().zip(&gpu) {
        assert!((a - b).abs() <= 1e-5 * a.abs().max(1.0), "loss {a} vs {b}");
        for (i, (u, v)) in ga.iter().zip(gb).enumerate() {
            let worst = u
                .iter()
                .zip(v)
                .map(|(p, q)| (p - q).abs() / (1e-3 + p.abs()))
                .fold(0.0, f64::max);
            assert!(worst <= 1e-3, "gradient {i}: worst relative difference {worst:.2e}");
        }
    }
    println!(
        "cnn_step losses, CPU {:?} GPU {:?}",
        cpu.iter().map(|c| c.0).collect::<Vec<_>>(),
        gpu.iter().map(|c| c.0).collect::<Vec<_>>()
    );
}

#[allow(dead_code)]
#[path = "../../../gradtape-examples/examples/digits.rs"]
mod digits;

mod graphs;

/// The digits example (a CNN with dropout, Adam, a checkpoint reloaded),
/// two epochs on the GPU beside the same on the CPU: the losses agree to
/// rounding, and the reloaded model scores as the trained one.
#[test]
fn the_digits_example_trains_on_the_gpu_as_on_the_cpu() -> gradtape::Result<()> {
    let _serial = serial();
    if !gpu_here() {
        return Ok(());
    }
    let run = |device| {
        let out_dir = std::env::temp_dir().join(format!("gradtape-digits-gpu-{}-{device}", std::process::id()));
        let cfg = digits::Config {
            epochs: 2,
            verbose: false,
            out_dir: out_dir.clone(),
            device,
            ..digits::Config::default()
        };
        let t = std::time::Instant::now();
        let out = digits::train(&cfg);
        println!("digits, 2 epochs on {device}: {:.2} s", t.elapsed().as_secs_f64());
        let _ = std::fs::remove_dir_all(out_dir);
        out
    };
    let (cpu, gpu) = (run(Device::Cpu)?, run(GPU)?);
    println!(
        "losses CPU {:?} GPU {:?}; test accuracy CPU {} GPU {}",
        cpu.losses, gpu.losses, cpu.test_accuracy, gpu.test_accuracy
    );
    for (a, b) in gpu.losses.iter().zip(&cpu.losses) {
        assert!((a - b).abs() <= 1e-3 * b, "{:?} vs {:?}", gpu.losses, cpu.losses);
    }
    assert!((gpu.test_accuracy - cpu.test_accuracy).abs() <= 0.02);
    assert_eq!(gpu.reloaded_test_accuracy, gpu.test_accuracy);
    Ok(())
}

/// A causal transformer block's output and gradients (attention, layer
/// norm, dropout, GELU) on the GPU agree with the CPU's.
#[test]
fn a_transformer_block_runs_on_the_gpu_as_on_the_cpu() -> gradtape::Result<()> {
    let _serial = serial();
    if !gpu_here() {
        return Ok(());
    }
    let w = ops_table::transformer_block_difference(GPU)?;
    println!("transformer block, GPU vs CPU: {w:.2e}");
    assert!(w <= 1e-4, "off by {w:.2e}");
    Ok(())
}

/// Attention over long sequences (`[1, 4, 2048, 64]`, the fused CUDA
/// kernels' many tiles per row), plain and causal, `f32` and `f64`: the
/// output and the gradients of `q`, `k` and `v` agree with the CPU's.
#[test]
fn long_sequence_attention_agrees_with_the_cpu_on_the_gpu() -> gradtape::Result<()> {
    let _serial = serial();
    if !gpu_here() {
        return Ok(());
    }
    use ops_table::{input, Domain};
    let shape = [1, 4, 2048, 64];
    let run = |dev: Device, dtype: DType, causal: bool| -> gradtape::Result<Vec<Vec<f64>>> {
        let (q, k, v) = (
            input(&shape, Domain::Unit, 1, dtype, dev),
            input(&shape, Domain::Unit, 2, dtype, dev),
            input(&shape, Domain::Unit, 3, dtype, dev),
        );
        let tape = GradientTape::new();
        let y = tape.record(|| {
            for x in [&q, &k, &v] {
                tape.watch(x);
            }
            q.scaled_dot_product_attention(&k, &v, None, causal, None)
        })?;
        let w = input(&shape, Domain::Any, 4, dtype, dev);
        let loss = tape.record(|| y.mul(&w)?.sum_all())?;
        let mut out = vec![y.try_to_vec_f64()?];
        for g in tape.gradient(&loss, &[&q, &k, &v])? {
            let g = g.expect("connected");
            assert_eq!(g.device(), dev);
            out.push(g.try_to_vec_f64()?);
        }
        Ok(out)
    };
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::F64, 1e-12)] {
        for causal in [false, true] {
            let (cpu, gpu) = (run(Device::Cpu, dtype, causal)?, run(GPU, dtype, causal)?);
            for (what, (a, b)) in ["output", "dq", "dk", "dv"].iter().zip(gpu.iter().zip(&cpu)) {
                assert_eq!(a.len(), b.len());
                let worst = a
                    .iter()
                    .zip(b)
                    .map(|(x, y)| (x - y).abs() / (1.0 + y.abs()))
                    .fold(0.0, f64::max);
                println!("long attention {dtype} causal {causal} {what}: {worst:.2e}");
                // (gradients sum over every row: ten times the output's)
                let tol = if *what == "output" { tol } else { 10.0 * tol };
                assert!(worst <= tol, "{dtype} causal {causal} {what} off by {worst:.2e}");
            }
        }
    }
    Ok(())
}

/// `f16` and `bf16` on the GPU: every op of the table but
/// [`ops_table::NO_HALF_KERNEL`]'s (elementwise functions, reductions,
/// softmax, cross-entropy, index ops, products on the tensor cores, casts,
/// convolutions and pools) agrees with the CPU's half kernels to a few
/// ulps, values and gradients.
#[test]
fn half_ops_agree_with_the_cpu_on_the_gpu() {
    let _serial = serial();
    if !gpu_here() {
        return;
    }
    let failures = ops_table::run_halves(GPU);
    assert!(
        failures.is_empty(),
        "{} half cases did not agree:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Mixed precision (f32 weights, f16 compute) with a `LossScaleOptimizer`
/// trains on the GPU as on the CPU: the losses agree to the half products'
/// rounding and fall.
#[test]
fn mixed_precision_with_loss_scaling_trains_on_the_gpu() -> gradtape::Result<()> {
    let _serial = serial();
    if !gpu_here() {
        return Ok(());
    }
    let (cpu, gpu) = (
        ops_table::mixed_precision_losses(Device::Cpu, 20)?,
        ops_table::mixed_precision_losses(GPU, 20)?,
    );
    println!("mixed precision losses, CPU {cpu:?}\nGPU {gpu:?}");
    for (a, b) in gpu.iter().zip(&cpu) {
        assert!((a - b).abs() <= 2e-2 * b.abs().max(1e-3), "{gpu:?} vs {cpu:?}");
    }
    assert!(gpu[19] < 0.7 * gpu[0], "{gpu:?}");
    Ok(())
}
