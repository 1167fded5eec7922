//! The unit tests of `src/function/compile/kernel/prepared.rs` (a fused
//! program's call plan, made at its first run and kept): a program
//! changed after its first run runs as changed, and a program run in
//! place writes the same values as into new buffers, run after run. The
//! expected values are the `f32` operations computed here, in the
//! program's order (the kernel computes each op as Rust's `f32`
//! arithmetic does).

use crate::function_compile_kernel_testing as testing;
use gradtape::__internals::function::compile::kernel::{Instr, Output};
use gradtape::__internals::ops::desc::Binary;
use gradtape::Tensor;
use Binary::{Add, Mul};

fn data(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32) * 0.37 + seed).sin()).collect()
}

#[test]
fn a_program_changed_after_its_first_run_runs_as_changed() {
    use Instr::*;
    let n = 300;
    let (x, y) = (data(n, 0.1), data(n, 2.0));
    let inputs = [
        Tensor::from_vec(x.clone(), &[n]).unwrap(),
        Tensor::from_vec(y.clone(), &[n]).unwrap(),
    ];
    // out0 = x + y
    let mut p = testing::program(
        n,
        2,
        vec![
            Load { dst: 0, input: 0 },
            Load { dst: 1, input: 1 },
            Binary {
                op: Add,
                dst: 2,
                a: 0,
                b: 1,
            },
            Store { out: 0, src: 2 },
        ],
        3,
        vec![Output::Elementwise],
    );
    let sum: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
    let out = p.run(&inputs).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), sum);
    // then out1 = (x + y) * x, and a sum of all of it: more instructions,
    // outputs and registers than the plan kept was made for
    p.body.extend([
        Binary {
            op: Mul,
            dst: 3,
            a: 2,
            b: 0,
        },
        Store { out: 1, src: 3 },
        Accumulate { acc: 0, src: 3 },
    ]);
    p.n_regs = 4;
    p.outputs.extend([Output::Elementwise, Output::Sum(vec![])]);
    let prod: Vec<f32> = sum.iter().zip(&x).map(|(s, a)| s * a).collect();
    for run in 0..2 {
        let out = p.run(&inputs).unwrap();
        assert_eq!(out.len(), 3, "run {run}");
        assert_eq!(out[0].to_vec::<f32>().unwrap(), sum, "run {run}");
        assert_eq!(out[1].to_vec::<f32>().unwrap(), prod, "run {run}");
        let total: f64 = prod.iter().map(|&v| v as f64).sum();
        let got = out[2].to_vec::<f32>().unwrap()[0] as f64;
        // (the fused sum adds in its own order: to the sum's rounding)
        assert!(
            (got - total).abs() <= 1e-5 * total.abs().max(1.0),
            "run {run}: {got} {total}"
        );
    }
}

#[test]
fn a_program_run_in_place_writes_the_values_of_new_buffers_run_after_run() {
    use Instr::*;
    let n = 300;
    // out0 = x * y into x's buffer where x is held alone; x is read again
    // after the store (out1 = x + out0), so its register may not read the
    // buffer out0 writes
    let p = testing::program(
        n,
        2,
        vec![
            Load { dst: 0, input: 0 },
            Load { dst: 1, input: 1 },
            Binary {
                op: Mul,
                dst: 2,
                a: 0,
                b: 1,
            },
            Store { out: 0, src: 2 },
            Binary {
                op: Add,
                dst: 3,
                a: 0,
                b: 2,
            },
            Store { out: 1, src: 3 },
        ],
        4,
        vec![Output::Elementwise, Output::Elementwise],
    );
    let (x, y) = (data(n, 0.4), data(n, 1.3));
    let prod: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a * b).collect();
    let plus: Vec<f32> = x.iter().zip(&prod).map(|(a, b)| a + b).collect();
    for run in 0..3 {
        // held alone (run 0, 2) or also here (run 1: no donor)
        let keep = Tensor::from_vec(x.clone(), &[n]).unwrap();
        let mut inputs = [keep.clone(), Tensor::from_vec(y.clone(), &[n]).unwrap()];
        if run != 1 {
            drop(keep);
        }
        let out = p.run_in_place(&mut inputs).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), prod, "run {run}");
        assert_eq!(out[1].to_vec::<f32>().unwrap(), plus, "run {run}");
    }
}
