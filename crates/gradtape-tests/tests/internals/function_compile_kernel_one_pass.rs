//! Fused programs run in one pass (`Prepared::one_pass` in
//! `src/function/compile/kernel/prepared.rs`, `one_pass_width` in
//! `kernel.rs`): which programs are recognised, and that such a program,
//! run in pieces of `one_pass_width` elements instead of the L1-sized
//! registers, gives the eager op's bits at lengths around the pieces'
//! bounds, in `f32` and `f64`, into new buffers and in place. The expected
//! values are the eager ops' (`Unary::eval`, `Binary::eval`), which the
//! fused kernel reproduces bit for bit.

use crate::function_compile_kernel_testing as testing;
use gradtape::__internals::function::compile::kernel::{one_pass_width, register_width, Instr, Output, Program};
use gradtape::__internals::ops::desc::{Binary as B, Unary as U};
use gradtape::__internals::ops::math::table::Pair as FnPair;
use gradtape::{DType, Tensor};

/// A program of `len` elements of `dtype` over `n_inputs` full inputs.
fn program(dtype: DType, len: usize, n_inputs: usize, body: Vec<Instr>, n_regs: usize, n_out: usize) -> Program {
    let outputs = vec![Output::Elementwise; n_out];
    Program {
        dtype,
        ..testing::program(len, n_inputs, body, n_regs, outputs)
    }
}

fn unary(op: U) -> Vec<Instr> {
    use Instr::*;
    vec![
        Load { dst: 0, input: 0 },
        Unary { op, dst: 1, a: 0 },
        Store { out: 0, src: 1 },
    ]
}

fn binary(op: B) -> Vec<Instr> {
    use Instr::*;
    vec![
        Load { dst: 0, input: 0 },
        Load { dst: 1, input: 1 },
        Binary { op, dst: 2, a: 0, b: 1 },
        Store { out: 0, src: 2 },
    ]
}

/// Values over the functions' interesting ranges, a few signed zeros and
/// (past the first few hundred) a NaN and infinities.
pub(crate) fn data(n: usize, seed: f64, dtype: DType) -> Tensor {
    let v: Vec<f64> = (0..n)
        .map(|i| match i % 211 {
            5 => -0.0,
            11 => 0.0,
            200 if i > 300 => f64::NAN,
            201 if i > 300 => f64::INFINITY,
            202 if i > 300 => f64::NEG_INFINITY,
            _ => (i as f64 * 0.731 + seed).sin() * 3.5 + 0.25,
        })
        .collect();
    Tensor::from_vec(v, &[n]).unwrap().cast(dtype).unwrap()
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec_f64().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn one_op_programs_run_in_one_pass_and_longer_ones_do_not() {
    use Instr::*;
    let n = 1000;
    let yes = |body: Vec<Instr>, inputs: usize, regs: usize, outs: usize| {
        program(DType::F32, n, inputs, body, regs, outs).one_pass()
    };
    assert!(yes(unary(U::Relu), 1, 2, 1));
    assert!(yes(binary(B::Mul), 2, 3, 1));
    // a sine and a cosine of one value, each stored
    let pair = vec![
        Load { dst: 0, input: 0 },
        Pair {
            pair: FnPair::SinCos,
            x0: 1,
            x1: 2,
            a: 0,
        },
        Store { out: 0, src: 1 },
        Store { out: 1, src: 2 },
    ];
    assert!(yes(pair, 1, 3, 2));
    // two ops of one input, each its own output
    let siblings = vec![
        Load { dst: 0, input: 0 },
        Unary {
            op: U::Exp,
            dst: 1,
            a: 0,
        },
        Store { out: 0, src: 1 },
        Unary {
            op: U::Tanh,
            dst: 2,
            a: 0,
        },
        Store { out: 1, src: 2 },
    ];
    assert!(yes(siblings, 1, 3, 2));
    // not one pass: an op reading an op's result (its register holds elements)
    let chain = vec![
        Load { dst: 0, input: 0 },
        Unary {
            op: U::Relu,
            dst: 1,
            a: 0,
        },
        Unary {
            op: U::Exp,
            dst: 2,
            a: 1,
        },
        Store { out: 0, src: 2 },
    ];
    assert!(!yes(chain, 1, 3, 1));
    // an op whose result no store takes, or that a store takes only later,
    // after its register was written again
    let unstored = vec![
        Load { dst: 0, input: 0 },
        Unary {
            op: U::Exp,
            dst: 1,
            a: 0,
        },
        Unary {
            op: U::Tanh,
            dst: 1,
            a: 0,
        },
        Store { out: 0, src: 1 },
    ];
    assert!(!yes(unstored, 1, 2, 1));
    // a sum of all elements
    let mut summed = unary(U::Exp);
    summed.push(Accumulate { acc: 0, src: 1 });
    let mut p = program(DType::F32, n, 1, summed, 2, 1);
    p.outputs.push(Output::Sum(vec![]));
    assert!(!p.one_pass());
    // a broadcast operand (read in place: one pass too; the broadcasts'
    // cases are in `function_compile_kernel_one_pass_broadcast`)
    let mut p = program(DType::F32, n, 2, binary(B::Add), 3, 1);
    p.input_len[1] = 1;
    p.body[1] = Gather {
        dst: 1,
        input: 1,
        q: n,
        p: 1,
    };
    assert!(p.one_pass());
}

#[test]
fn one_pass_pieces_are_wider_than_registers() {
    // (the point of the pass: fewer pieces, each paying the body's dispatch)
    for n_regs in [1, 2, 3, 4] {
        let seg = 1 << 20;
        let (wide, narrow) = (one_pass_width::<f32>(n_regs, seg), register_width::<f32>(n_regs, seg));
        assert!(wide >= 3 * narrow, "{n_regs} registers: {wide} against {narrow}");
        assert_eq!(wide % 256, 0);
        assert_eq!(one_pass_width::<f32>(n_regs, 300), 300);
    }
}

#[test]
fn one_pass_runs_give_the_eager_bits() {
    let w = one_pass_width::<f32>(2, 1 << 20);
    let w3 = one_pass_width::<f32>(3, 1 << 20);
    let lens = [1, 255, 256, 1025, w - 1, w, w + 1, w3 + 17, 3 * w + 5, 40_000, 131_073];
    let unaries = [U::Relu, U::Exp, U::Tanh, U::Sigmoid, U::Sin, U::Log1p, U::Gelu];
    let binaries = [B::Add, B::Mul, B::Div, B::Pow, B::Maximum];
    for dtype in [DType::F32, DType::F64] {
        for &n in &lens {
            let x = data(n, 0.3, dtype);
            let y = data(n, 1.7, dtype);
            for op in &unaries {
                let p = program(dtype, n, 1, unary(op.clone()), 2, 1);
                assert!(p.one_pass());
                let want = bits(&op.eval(&x).unwrap());
                for run in 0..2 {
                    let got = p.run(std::slice::from_ref(&x)).unwrap();
                    assert_eq!(bits(&got[0]), want, "{op:?} {dtype} n={n} run {run}");
                }
                // in place: the input's buffer (the normal path), the same bits
                let mut held = [x.mul_scalar(1.0).unwrap()];
                let got = p.run_in_place(&mut held).unwrap();
                assert_eq!(bits(&got[0]), want, "{op:?} {dtype} n={n} in place");
            }
            for op in &binaries {
                let p = program(dtype, n, 2, binary(op.clone()), 3, 1);
                assert!(p.one_pass());
                let want = bits(&op.eval(&x, &y).unwrap());
                let got = p.run(&[x.clone(), y.clone()]).unwrap();
                assert_eq!(bits(&got[0]), want, "{op:?} {dtype} n={n}");
            }
            // a pair: a sine and a cosine from one range reduction
            let p = program(
                dtype,
                n,
                1,
                vec![
                    Instr::Load { dst: 0, input: 0 },
                    Instr::Pair {
                        pair: FnPair::SinCos,
                        x0: 1,
                        x1: 2,
                        a: 0,
                    },
                    Instr::Store { out: 0, src: 1 },
                    Instr::Store { out: 1, src: 2 },
                ],
                3,
                2,
            );
            assert!(p.one_pass());
            let got = p.run(std::slice::from_ref(&x)).unwrap();
            assert_eq!(bits(&got[0]), bits(&x.sin().unwrap()), "sin {dtype} n={n}");
            assert_eq!(bits(&got[1]), bits(&x.cos().unwrap()), "cos {dtype} n={n}");
        }
    }
}
