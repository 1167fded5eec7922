//! Ops with no GPU kernel for some of their dtypes run on the CPU for GPU
//! inputs under soft device placement (the default, as TensorFlow's):
//! the integer and complex arithmetic the generic host kernels do
//! (elementwise maps and zips, selects, reductions, products, casts), the
//! ops whose output shape depends on the values (`argwhere`,
//! `boolean_mask`, `unique`, `bincount`), `searchsorted`, the FFTs, and
//! the integer checks of `floor_div` and `pow`. Each must give the CPU's
//! values (the same host code: to the bit) on the GPU, eagerly and in a
//! traced function, and keep its errors.

use gradtape::{DType, Device, Result, Tensor};

const GPU: Device = Device::Cuda(0);

type Op = fn(&[Tensor]) -> Result<Tensor>;

/// The values as `f64` bit patterns (so that NaN equals NaN).
fn bits(t: &Tensor) -> Vec<u64> {
    let v = t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
    v.iter().map(|x| x.to_bits()).collect()
}

/// The operands: f32 `[2, 3]`, i32 `[2, 3]`, positive i32 `[2, 3]`, a
/// sorted f32 vector.
fn operands(device: Device) -> Vec<Tensor> {
    let f = Tensor::from_vec(vec![3.0f32, -1.0, 2.0, 2.0, 0.5, -4.0], &[2, 3]).unwrap();
    let i = Tensor::from_vec(vec![3i32, -1, 2, 2, 5, -4], &[2, 3]).unwrap();
    let p = Tensor::from_vec(vec![2i32, 3, 1, 2, 2, 7], &[2, 3]).unwrap();
    let s = Tensor::from_vec(vec![-1.0f32, 0.0, 2.0, 5.0], &[4]).unwrap();
    [f, i, p, s].iter().map(|t| t.to(device).unwrap()).collect()
}

fn cases() -> Vec<(&'static str, Op)> {
    vec![
        ("floor_div i32", |x| x[1].floor_div(&x[2])),
        ("floor_mod i32", |x| x[1].floor_mod(&x[2])),
        ("pow i32", |x| x[2].pow(&x[2])),
        ("bitwise_and", |x| x[1].bitwise_and(&x[2])),
        ("left_shift", |x| x[2].left_shift(&x[2])),
        ("argwhere", |x| x[0].argwhere()),
        ("boolean_mask", |x| x[0].boolean_mask(&x[0].gt(&x[0].zeros_like())?)),
        ("unique values", |x| Ok(x[0].reshape(&[6])?.unique()?.0)),
        ("unique indices", |x| Ok(x[1].reshape(&[6])?.unique()?.1)),
        ("searchsorted", |x| x[3].searchsorted(&x[0].reshape(&[6])?, true)),
        ("bincount", |x| x[2].reshape(&[6])?.bincount(None, 9)),
        ("bincount weighted", |x| {
            x[2].reshape(&[6])?.bincount(Some(&x[0].reshape(&[6])?), 0)
        }),
        ("int matmul", |x| x[1].matmul_with(&x[2], false, true)),
        ("complex fft", |x| x[0].cast(DType::C64)?.fft()?.abs()),
        ("rfft", |x| x[0].rfft(None)?.real()),
        ("complex matmul", |x| {
            let c = x[0].cast(DType::C64)?;
            c.matmul_with(&c.exp()?, false, true)?.imag()
        }),
        ("complex sum", |x| {
            x[0].cast(DType::C128)?
                .mul(&x[0].cast(DType::C128)?)?
                .sum(&[1], false)?
                .real()
        }),
    ]
}

/// Every case on the GPU gives the CPU's values there, eagerly.
#[test]
fn ops_without_a_gpu_kernel_for_their_dtype_run_on_the_cpu_for_gpu_tensors() {
    gradtape::emulate_cuda_on_host();
    let (cpu, gpu) = (operands(Device::Cpu), operands(GPU));
    for (name, f) in cases() {
        let want = f(&cpu).unwrap_or_else(|e| panic!("{name} on the CPU: {e}"));
        let got = f(&gpu).unwrap_or_else(|e| panic!("{name} on the GPU: {e}"));
        assert_eq!(got.device(), GPU, "{name}");
        assert_eq!((got.dtype(), got.shape()), (want.dtype(), want.shape()), "{name}");
        assert_eq!(bits(&got), bits(&want), "{name}");
    }
    // their errors stay: an integer division by zero, a negative exponent
    let zero = Tensor::from_vec(vec![1i32, 0], &[2]).unwrap().to(GPU).unwrap();
    let e = zero.floor_div(&zero).unwrap_err().to_string();
    assert!(e.contains("floor_div") && e.contains("division by zero"), "{e}");
    let neg = Tensor::from_vec(vec![1i32, -1], &[2]).unwrap().to(GPU).unwrap();
    assert!(zero.pow(&neg).unwrap_err().to_string().contains("pow"));
}

/// The same cases inside one traced function on GPU inputs: the values
/// of the eager run, on the GPU.
#[test]
fn ops_without_a_gpu_kernel_run_in_traced_functions_on_gpu_tensors() {
    gradtape::emulate_cuda_on_host();
    let gpu = operands(GPU);
    let f =
        gradtape::function(|x: &Vec<Tensor>| -> Result<Vec<Tensor>> { cases().iter().map(|(_, f)| f(x)).collect() });
    let traced = f.call(&gpu).unwrap();
    for ((name, op), got) in cases().iter().zip(&traced) {
        let want = op(&gpu).unwrap();
        assert_eq!(got.device(), GPU, "{name}");
        assert_eq!(bits(got), bits(&want), "{name}");
    }
}

/// Empty tensors on a GPU: every op gives an (empty or filled) result on
/// the GPU, as its CPU values, never one made on the host.
#[test]
fn ops_on_empty_gpu_tensors_stay_on_the_gpu() {
    gradtape::emulate_cuda_on_host();
    let ops: Vec<(&str, Op)> = vec![
        ("sum", |x| x[0].sum(&[0], false)),
        ("max", |x| x[0].max(&[0], false)),
        ("min keepdims", |x| x[0].min(&[0], true)),
        ("mean", |x| x[0].mean(&[0], false)),
        ("prod", |x| x[0].prod(&[0], false)),
        ("logsumexp", |x| x[0].logsumexp(&[0], false)),
        ("softmax", |x| x[0].softmax(-1)),
        ("cumsum", |x| x[0].cumsum(0, false, false)),
        ("matmul", |x| x[0].matmul_with(&x[0], true, false)),
        ("matmul outer", |x| x[0].matmul_with(&x[0], false, true)),
        ("concat", |x| Tensor::concat(&[&x[0], &x[0]], 0)),
        ("conv2d", |x| {
            let k = x[0].reshape(&[1, 1, 0, 3])?;
            x[0].reshape(&[1, 1, 1, 0])?
                .conv2d(&k, [1, 1], gradtape::Padding::Same, [1, 1])
        }),
        ("sort", |x| x[0].sort(0, false)),
        ("argwhere", |x| x[0].argwhere()),
        ("transpose", |x| x[0].transpose()?.contiguous()),
        ("pad", |x| x[0].pad(&[(1, 1), (0, 0)])),
    ];
    let x = |d: Device| vec![Tensor::zeros(&[0, 3], DType::F32).to(d).unwrap()];
    let (cpu, gpu) = (x(Device::Cpu), x(GPU));
    for (name, f) in ops {
        let want = f(&cpu).unwrap_or_else(|e| panic!("{name} on the CPU: {e}"));
        let got = f(&gpu).unwrap_or_else(|e| panic!("{name} on the GPU: {e}"));
        assert_eq!(got.device(), GPU, "{name}");
        assert_eq!(got.shape(), want.shape(), "{name}");
        assert_eq!(bits(&got), bits(&want), "{name}");
    }
}

/// Recurrent layers (whose zero initial state is made by the layer) and a
/// `while_loop` differentiated through its history (rows read back by a
/// loop counter) run on the GPU as on the CPU: values and gradients, on
/// the GPU. (The LSTM's weight gradients to rounding: on the CPU its
/// steps are one op, `lstm_sequence`, whose backward pass sums the
/// recurrent kernel's gradient over all steps in one product; on the GPU
/// the loop of steps sums it step by step.)
#[test]
fn recurrent_layers_and_while_loops_run_on_the_gpu_as_on_the_cpu() {
    use gradtape::nn::{Layer, Module, GRU, LSTM};
    use gradtape::{GradientTape, Rng, WhileOptions};
    gradtape::emulate_cuda_on_host();
    let run = |d: Device| -> Vec<Vec<u64>> {
        let mut rng = Rng::new(7);
        let lstm = LSTM::builder(3, 4).build(&mut rng).unwrap();
        let gru = GRU::builder(3, 4).build(&mut rng).unwrap();
        lstm.move_to(d).unwrap();
        gru.move_to(d).unwrap();
        let x = Tensor::from_vec((0..2 * 5 * 3).map(|i| (i as f32 * 0.37).sin()).collect(), &[2, 5, 3])
            .unwrap()
            .to(d)
            .unwrap();
        let tape = GradientTape::new();
        let loss = tape
            .record(|| lstm.call(&x)?.square()?.sum_all()?.add(&gru.call(&x)?.sum_all()?))
            .unwrap();
        let vars: Vec<_> = lstm
            .trainable_variables()
            .into_iter()
            .chain(gru.trainable_variables())
            .collect();
        let g = tape.gradient(&loss, &vars).unwrap();
        // y <- sin(y) * c, n times (n decided when it runs), then its gradient
        let y0 = x.slice(&[0, 0, 0], &[1, 1, 3]).unwrap().reshape(&[3]).unwrap();
        let c = Tensor::from_vec(vec![1.5f32, 0.5, -2.0], &[3]).unwrap().to(d).unwrap();
        let n = Tensor::scalar(4.0f32).to(d).unwrap();
        let t = GradientTape::new();
        let y = t
            .record(|| {
                t.watch(&y0);
                let (_, y) = gradtape::while_loop(
                    |(i, _): &(Tensor, Tensor)| i.lt(&n),
                    |(i, y): &(Tensor, Tensor)| Ok((i.add_scalar(1.0)?, y.sin()?.mul(&c)?)),
                    (Tensor::scalar(0.0f32).to(d)?, y0.clone()),
                    WhileOptions::default(),
                )?;
                y.square()?.sum_all()
            })
            .unwrap();
        let gy = t.gradient(&y, &y0).unwrap().expect("connected");
        let mut out = vec![bits(&loss), bits(&y), bits(&gy)];
        for g in g {
            let g = g.expect("connected");
            assert_eq!(g.device(), d);
            out.push(g.to_vec_f64().iter().map(|v| v.to_bits()).collect());
        }
        assert_eq!((loss.device(), gy.device()), (d, d));
        out
    };
    let (gpu, cpu) = (run(GPU), run(Device::Cpu));
    assert_eq!(gpu.len(), cpu.len());
    // values: the same bits; the LSTM's three and the GRU's gradients
    // within a few f32 roundings of the largest element
    for (k, (a, b)) in gpu.iter().zip(&cpu).enumerate() {
        if k < 3 {
            assert_eq!(a, b, "output {k}");
            continue;
        }
        let (a, b): (Vec<f64>, Vec<f64>) = (
            a.iter().map(|&v| f64::from_bits(v)).collect(),
            b.iter().map(|&v| f64::from_bits(v)).collect(),
        );
        let scale = b.iter().fold(0f64, |m, v| m.max(v.abs()));
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!((x - y).abs() <= 4e-7 * scale, "gradient {k} element {i}: {x} vs {y}");
        }
    }
}

/// The fused LSTM step on a GPU runs its composite (no GPU kernel of its
/// own), eagerly and as the nodes of a function traced on the CPU and
/// called with GPU tensors: the same bits as on the CPU, values and
/// gradients.
#[test]
fn the_lstm_cell_op_runs_on_the_gpu_as_on_the_cpu() {
    use gradtape::{function, GradientTape};
    gradtape::emulate_cuda_on_host();
    let step = |args: &(Tensor, Tensor)| -> gradtape::Result<Vec<Tensor>> {
        let (z, c) = args;
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(z);
            tape.watch(c);
            let (h, c1) = Tensor::lstm_cell(z, c)?;
            h.mul(&c1)?.add(&h)?.sum_all()
        })?;
        let [gz, gc] = tape.gradient(&y, &[z, c])?;
        Ok(vec![y, gz.expect("connected"), gc.expect("connected")])
    };
    let z = Tensor::from_vec((0..3 * 20).map(|i| (i as f32 * 0.61).sin() * 3.0).collect(), &[3, 20]).unwrap();
    let c = Tensor::from_vec((0..3 * 5).map(|i| (i as f32 * 0.29).cos()).collect(), &[3, 5]).unwrap();
    let on = |d: Device| (z.to(d).unwrap(), c.to(d).unwrap());
    let cpu: Vec<Vec<u64>> = step(&on(Device::Cpu)).unwrap().iter().map(bits).collect();
    let eager_gpu = step(&on(GPU)).unwrap();
    assert!(eager_gpu.iter().all(|t| t.device() == GPU));
    let f = function(step);
    let traced_cpu = f.call(&on(Device::Cpu)).unwrap();
    let traced_gpu = f.call(&on(GPU)).unwrap();
    assert!(traced_gpu.iter().all(|t| t.device() == GPU));
    for outs in [eager_gpu, traced_cpu, traced_gpu] {
        let got: Vec<Vec<u64>> = outs.iter().map(bits).collect();
        assert_eq!(got.len(), cpu.len());
        for (g, w) in got.iter().zip(&cpu) {
            // (the composite's gradient rounds differently from the fused
            // kernel's: equal to a few units in the last place)
            for (a, b) in g.iter().zip(w) {
                let (a, b) = (f64::from_bits(*a), f64::from_bits(*b));
                assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{a} vs {b}");
            }
        }
    }
}

/// The fused recurrences (`lstm_sequence`, `gru_sequence`) on a GPU run
/// their composites, eagerly and as the nodes of a function traced on the
/// CPU and called with GPU tensors (whose backward op takes the empty
/// marker of the parts without a cotangent): the same values as on the
/// CPU, gradients to rounding (the fused backward pass sums in another
/// order).
#[test]
fn the_sequence_ops_run_on_the_gpu_as_on_the_cpu() {
    use gradtape::{function, GradientTape};
    gradtape::emulate_cuda_on_host();
    type Seq = fn(&[Tensor; 4]) -> gradtape::Result<Tensor>;
    let lstm: Seq = |x| Ok(Tensor::lstm_sequence(&x[0], &x[1], &x[2], &x[3])?.0);
    let gru: Seq = |x| Tensor::gru_sequence(&x[0], &x[1], &x[2], &x[3]);
    let (t, b, u) = (4, 3, 2);
    let draw = |s: &[usize], k: f32| {
        let n: usize = s.iter().product();
        Tensor::from_vec((0..n).map(|i| (i as f32 * k).sin()).collect(), s).unwrap()
    };
    for (name, f, gates, bias) in [("lstm", lstm, 4, vec![b, u]), ("gru", gru, 3, vec![3 * u])] {
        let x = [
            draw(&[t, b, gates * u], 0.61),
            draw(&[u, gates * u], 0.37),
            draw(&bias, 0.23),
            draw(&[b, u], 0.91),
        ];
        let step = move |x: &[Tensor; 4]| -> gradtape::Result<Vec<Tensor>> {
            let tape = GradientTape::new();
            let (mut hs, mut y) = (None, None);
            tape.record(|| {
                tape.watch(&x[..]);
                let h = f(x)?;
                y = Some(h.square()?.sum_all()?);
                hs = Some(h);
                Ok(())
            })?;
            let y = y.expect("recorded");
            let mut out = vec![hs.expect("recorded"), y.clone()];
            out.extend(tape.gradient(&y, &[&x[0], &x[1], &x[2], &x[3]])?.into_iter().flatten());
            Ok(out)
        };
        let on = |d: Device| x.clone().map(|a| a.to(d).unwrap());
        let cpu = step(&on(Device::Cpu)).unwrap();
        let eager_gpu = step(&on(GPU)).unwrap();
        let f = function(step);
        let traced_gpu = f.call(&on(GPU)).unwrap();
        for (how, outs) in [("eager", eager_gpu), ("traced", traced_gpu)] {
            assert!(outs.iter().all(|t| t.device() == GPU), "{name} {how}");
            assert_eq!(outs.len(), 6, "{name} {how}");
            assert_eq!(bits(&outs[0]), bits(&cpu[0]), "{name} {how}: the outputs");
            for (k, (g, w)) in outs.iter().zip(&cpu).enumerate().skip(1) {
                for (a, b) in g.to_vec_f64().iter().zip(w.to_vec_f64()) {
                    assert!(
                        (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                        "{name} {how} output {k}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
