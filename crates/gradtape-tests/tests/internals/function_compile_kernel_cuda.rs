//! The CUDA kernels of fused programs: made for the programs of graphs
//! compiled for a GPU, compiled by NVRTC (where it is found), and run on
//! the host (the skeleton is host C++ too: one loop over the elements)
//! against the CPU program.

use gradtape::__internals::function::compile::exec::Executable;
use gradtape::__internals::function::compile::fuse::Fused;
use gradtape::__internals::function::compile::kernel::Output;
use gradtape::__internals::function::compile::kernel::Program;
use gradtape::__internals::kernels::cuda::fused::FusedKernel;
use gradtape::__internals::OpInternals;
use gradtape::function;
use gradtape::DType;
use gradtape::Result;
use gradtape::Tensor;
use std::fmt::Write as _;

fn f32s(n: usize, seed: u64) -> Vec<f32> {
    (0..n)
        .map(|i| ((((i as u64 * 2654435761 + seed * 97) % 1000) as f32) / 400.0) - 1.2)
        .collect()
}

fn f64s(n: usize, seed: u64) -> Vec<f64> {
    f32s(n, seed).into_iter().map(|v| f64::from(v) * 1.37).collect()
}

/// The fused programs of the graph compiled for a GPU from `graph`.
fn gpu_programs(graph: &gradtape::Graph) -> Vec<Program> {
    let e = Executable::compile_for_gpu(graph, &Default::default()).unwrap();
    let progs: Vec<Program> = e
        .graph
        .nodes
        .iter()
        .filter_map(|n| n.op.as_dyn::<Fused>())
        .map(|f| f.program.clone())
        .collect();
    assert_eq!(e.stats.cuda_kernels, progs.len(), "{}", e.graph);
    assert!(e.stats.cuda_kernels > 0, "{}", e.graph);
    progs
}

/// Programs of several shapes of graph (`f32` and `f64`), each with
/// inputs of its sizes.
fn cases() -> Vec<(String, Program)> {
    let mut out: Vec<(String, Program)> = Vec::new();
    let mut add = |name: &str, progs: Vec<Program>| {
        for (k, p) in progs.into_iter().enumerate() {
            out.push((format!("{name} #{k}"), p));
        }
    };
    // a layer: product, bias (a gathered row), tanh, squared and summed
    let x = Tensor::from_vec(f32s(24 * 7, 1), &[24, 7]).unwrap();
    let w = Tensor::from_vec(f32s(7 * 5, 2), &[7, 5]).unwrap();
    let b = Tensor::from_vec(f32s(5, 3), &[5]).unwrap();
    let f = function(|(x, w, b): &(Tensor, Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let h = x.matmul(w)?.bias_add(b)?.tanh()?;
        Ok(vec![h.clone(), h.square()?.sum_all()?])
    });
    add("layer", gpu_programs(f.concrete(&(x, w, b)).unwrap().graph()));
    // a chain of unary ops with attributes (f64)
    let x = Tensor::from_vec(f64s(300, 4), &[300]).unwrap();
    let f = function(|x: &Tensor| {
        x.sin()?
            .exp()?
            .mul_scalar(1.5)?
            .add_scalar(-0.25)?
            .leaky_relu(0.1)?
            .clip_by_value(-0.5, 2.0)?
            .sigmoid()?
            .softplus()?
            .log()
    });
    add("unary chain f64", gpu_programs(f.concrete(&x).unwrap().graph()));
    // the same in f32, with a sine and a cosine of one value
    let x = Tensor::from_vec(f32s(1000, 5), &[1000]).unwrap();
    let f = function(|x: &Tensor| -> Result<Vec<Tensor>> {
        let s = x.sin()?.add(&x.cos()?)?;
        Ok(vec![s.mul(x)?.sub(x)?, s.relu()?.sum_all()?])
    });
    add("sincos f32", gpu_programs(f.concrete(&x).unwrap().graph()));
    // and a GELU with its derivative (one pair), in f32 and f64
    let f = function(|x: &Tensor| -> Result<Vec<Tensor>> {
        let x = x.mul_scalar(3.0)?;
        Ok(vec![x.gelu(false)?.mul(&x.gelu_grad()?)?])
    });
    let x64 = Tensor::from_vec(f64s(500, 9), &[500]).unwrap();
    for (name, x) in [("gelu pair f32", x), ("gelu pair f64", x64)] {
        let progs = gpu_programs(f.concrete(&x).unwrap().graph());
        assert!(progs.iter().any(|p| p.to_string().contains("GeluAndGrad")), "{name}");
        add(name, progs);
    }
    // broadcasting: a row and a column, a scalar operand, two sums
    let x = Tensor::from_vec(f64s(6 * 10, 6), &[6, 10]).unwrap();
    let row = Tensor::from_vec(f64s(10, 7), &[10]).unwrap();
    let col = Tensor::from_vec(f64s(6, 8), &[6, 1]).unwrap();
    let s = Tensor::scalar(0.75f64);
    let f = function(
        |(x, row, col, s): &(Tensor, Tensor, Tensor, Tensor)| -> Result<Vec<Tensor>> {
            let y = x.add(row)?.mul(col)?.maximum(&x.mul(s)?)?;
            Ok(vec![
                y.clone(),
                y.sum_all()?,
                y.square()?.div(&x.abs()?.add_scalar(1.0)?)?.sum_all()?,
            ])
        },
    );
    add(
        "broadcast f64",
        gpu_programs(f.concrete(&(x, row, col, s)).unwrap().graph()),
    );
    out
}

/// The host program: the kernel's source, and a `main` that reads the
/// inputs (hexadecimal bits of doubles) from stdin, runs the kernel, and
/// prints each output's values (bits of doubles), one output a line.
fn host_program(p: &Program, k: &FusedKernel) -> String {
    let mut s = k.source.clone();
    s.push_str(
        "#include <cstdio>\n#include <vector>\n\
         static double rd() { unsigned long long u = 0; if (scanf(\"%llx\", &u) != 1) return 0; double d; memcpy(&d, &u, 8); return d; }\n\
         static void put(double v) { unsigned long long u; memcpy(&u, &v, 8); printf(\"%llx \", u); }\n\
         int main() {\n",
    );
    let mut args = Vec::new();
    for (i, len) in p.input_len.iter().enumerate() {
        let _ = writeln!(s, "  std::vector<T> in{i}({len}); for (auto& v : in{i}) v = (T)rd();");
        args.push(format!("in{i}.data()"));
    }
    let n_outs = p.outputs.iter().filter(|o| matches!(o, Output::Elementwise)).count();
    for o in 0..n_outs {
        let _ = writeln!(s, "  std::vector<T> out{o}({});", p.len);
        args.push(format!("out{o}.data()"));
    }
    let _ = writeln!(s, "  std::vector<double> acc({}, 0.0);", k.n_sums().max(1));
    args.push("acc.data()".into());
    let _ = writeln!(s, "  k({}, {}LL);", args.join(", "), p.len);
    let (mut e, mut a) = (0, 0);
    for o in &p.outputs {
        match o {
            Output::Elementwise => {
                let _ = writeln!(s, "  for (T v : out{e}) put((double)v); printf(\"\\n\");");
                e += 1;
            }
            _ => {
                let _ = writeln!(s, "  put((double)(T)acc[{a}]); printf(\"\\n\");");
                a += 1;
            }
        }
    }
    s.push_str("  return 0;\n}\n");
    s
}

fn inputs(p: &Program, seed: u64) -> Vec<Tensor> {
    p.input_len
        .iter()
        .enumerate()
        .map(|(i, &n)| match p.dtype {
            DType::F32 => Tensor::from_vec(f32s(n, seed + i as u64), &[n]).unwrap(),
            _ => Tensor::from_vec(f64s(n, seed + i as u64), &[n]).unwrap(),
        })
        .collect()
}

#[test]
fn programs_compiled_for_a_gpu_have_kernels_and_a_partial_reduction_stays_a_node() {
    let cases = cases();
    assert!(cases.len() >= 4);
    // (the cases read inputs every way, and have every kind of statement)
    let all: String = cases.iter().map(|(_, p)| p.cuda_kernel().unwrap().source).collect();
    for what in [
        "[i];",
        "[(i / 10LL) % 6LL]",
        "= in3[0];",
        "gt_sin((x))",
        "const T t =",
        "s1 += (double)y",
        "gt_leaky_relu((r0), ((0.1)))",
    ] {
        assert!(all.contains(what), "no kernel has {what}");
    }
    for (name, p) in &cases {
        let k = p.cuda_kernel().unwrap_or_else(|| panic!("{name}: no kernel for\n{p}"));
        assert!(k.source.contains("extern \"C\" __global__ void k("), "{name}");
        assert_eq!(k.outputs.len(), p.outputs.len());
    }
    // a partial reduction: fused on the CPU, a node of its own on a GPU
    let x = Tensor::from_vec(f32s(8 * 16, 9), &[8, 16]).unwrap();
    let f = function(|x: &Tensor| x.exp()?.mul(x)?.sum(&[1], false)?.tanh());
    let c = f.concrete(&x).unwrap();
    let cpu: Vec<&Fused> = c
        .optimized_graph()
        .nodes
        .iter()
        .filter_map(|n| n.op.as_dyn::<Fused>())
        .collect();
    assert!(cpu.iter().any(|f| f.cuda_kernel().is_none()), "{}", c.optimized_graph());
    let gpu = Executable::compile_for_gpu(c.graph(), &Default::default()).unwrap();
    assert_eq!(gpu.graph.count("Sum"), 1, "{}", gpu.graph);
    assert_eq!(gpu.stats.cuda_kernels, 2, "{}", gpu.graph);
    assert_eq!(gpu.stats.count("fold"), None);
    assert_eq!(gpu.stats.count("pair_products"), None);
}

/// Every case's kernel, compiled by the host's C++ compiler and run over
/// its inputs, gives the CPU program's values: elementwise outputs within
/// 16 epsilons of the larger of 1 and the value (the transcendental
/// functions are the C library's on the host, the table's on the CPU, a
/// few ulps apart; cancellation in a chain makes that absolute), sums
/// within a relative 1e-6 per square root of the terms (added in another
/// order).
#[test]
fn the_kernels_run_on_the_host_give_the_cpu_programs_values() {
    for (c, (name, p)) in cases().iter().enumerate() {
        let k = p.cuda_kernel().unwrap();
        let ins = inputs(p, 11 + c as u64);
        let mut stdin = String::new();
        for t in &ins {
            for v in t.to_vec_f64() {
                stdin.push_str(&format!("{:x}\n", v.to_bits()));
            }
        }
        let Some(text) = crate::ops_math_cuda_expr::run_host_cxx("fused", &host_program(p, &k), &stdin) else {
            return;
        };
        let lines: Vec<&str> = text.lines().collect();
        let want = p.run(&ins).unwrap();
        assert_eq!(lines.len(), want.len(), "{name}");
        let eps = match p.dtype {
            DType::F32 => f64::from(f32::EPSILON),
            _ => f64::EPSILON,
        };
        for (o, (line, w)) in lines.iter().zip(&want).enumerate() {
            let got: Vec<f64> = line
                .split_whitespace()
                .map(|h| f64::from_bits(u64::from_str_radix(h, 16).unwrap()))
                .collect();
            let w = w.to_vec_f64();
            assert_eq!(got.len(), w.len(), "{name}: output {o}");
            let sum = matches!(p.outputs[o], Output::Sum(_));
            for (j, (g, w)) in got.iter().zip(&w).enumerate() {
                let tol = if sum {
                    1e-6 * (1.0 + w.abs()) * (p.len as f64).sqrt()
                } else {
                    16.0 * eps * (1.0 + w.abs())
                };
                assert!(
                    (g - w).abs() <= tol || (g.is_nan() && w.is_nan()),
                    "{name}: output {o} element {j}: host kernel {g:e}, CPU program {w:e}\n{p}"
                );
            }
        }
    }
}

/// Every case's kernel source compiles with NVRTC (to PTX for Hopper: no
/// GPU needed), where the NVRTC library is found.
#[cfg(feature = "cuda")]
#[test]
fn the_kernels_compile_with_nvrtc() {
    // SAFETY: only looks the library up
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!("skipped: NVRTC (libnvrtc.so) not found; set LD_LIBRARY_PATH to its folder to check the kernels");
        return;
    }
    let cases = cases();
    for (name, p) in &cases {
        let k = p.cuda_kernel().unwrap();
        if let Err(log) = gradtape::__internals::kernels::cuda::runtime::compile_with(
            &k.source,
            "--gpu-architecture=compute_90",
            false,
        ) {
            panic!("{name}: {log}\nsource:\n{}", k.source);
        }
    }
    println!("compiled {} fused kernels with NVRTC", cases.len());
}
